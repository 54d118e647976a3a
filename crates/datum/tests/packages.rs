//! Packages end to end, with the real CLI, dpkg and apt: the `datum` binary
//! runs inside the test bed (`scripts/testbed`, a Debian root booted with
//! systemd-nspawn, no network) with `--root /`, so the packages it installs
//! and the files it writes are the container's own.
//!
//! - The example repository's `packages` layer on a container from which
//!   openssh-server and nginx are removed: one apt transaction installs both
//!   before the files their validators check, the validators run, and the
//!   next pass has nothing to do.
//! - `datum check` on a host with the packages installed: a hand-edited
//!   configuration file of a declared package is a finding of that Package,
//!   a file a File declares is reported once (as File drift), and a package
//!   at another version than declared is drift.
//! - The same check rules against a scratch root with a hand-made dpkg
//!   database: these two tests need no test bed and always run.
//!
//! Only `target/` is shared with the container, so the fresh-container test
//! copies `examples/` in from this machine before its body runs there. The
//! container has no mirror: the removed packages come back from apt's own
//! cache (`/var/cache/apt/archives`, kept by debootstrap), republished as a
//! local repository. Both tests take the shared `apt` lock (one dpkg
//! transaction at a time; the Package provider's tests take it too), the
//! first one also `nginx` (it removes nginx, which other tests reconfigure),
//! always in that order; everything is put back when a test ends, pass or
//! fail. Without a test bed each test prints "skipped: no testbed (run
//! scripts/testbed)".

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a failed step must stop the test"
)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use datum_testkit::run::Run;
use datum_testkit::testbed::{Testbed, run_inside, test_name, within};
use datum_testkit::testbed_test;
use serde_json::Value;
use tempfile::TempDir;

// ---------------------------------------------------------------------------
// Running the binary

/// What only this file asks of a run.
trait RunExt {
    fn json(&self) -> Value;
    fn line_index(&self, id: &str) -> usize;
    fn line(&self, id: &str) -> String;
}

impl RunExt for Run {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.0.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", self.stdout()))
    }

    /// Index of the report line of `id` in the output (`+ File[motd]  ...`).
    #[track_caller]
    fn line_index(&self, id: &str) -> usize {
        let text = self.stdout();
        text.lines()
            .position(|l| {
                l.get(2..)
                    .is_some_and(|rest| rest.starts_with(&format!("{id} ")))
            })
            .unwrap_or_else(|| panic!("no line for {id} in:\n{text}"))
    }

    #[track_caller]
    fn line(&self, id: &str) -> String {
        self.stdout()
            .lines()
            .nth(self.line_index(id))
            .unwrap_or_default()
            .to_owned()
    }
}

/// `datum --repo REPO --root / --host-file HOST --state STATE <args>`, with
/// `path_prefix` in front of PATH when given.
fn datum(dir: &Path, path_prefix: Option<&Path>, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_datum"));
    cmd.arg("--repo")
        .arg(dir.join("repo"))
        .arg("--root")
        .arg("/")
        .arg("--host-file")
        .arg(dir.join("host.yaml"))
        .arg("--state")
        .arg(dir.join("state.db"))
        .args(["--color", "never"])
        .args(args);
    if let Some(prefix) = path_prefix {
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", prefix.display()));
    }
    let run = Run(cmd.output().unwrap());
    println!(
        "--- datum {} (exit {})\n{}{}",
        args.join(" "),
        run.code(),
        run.stdout(),
        run.stderr()
    );
    run
}

fn write(path: impl AsRef<Path>, text: &str) {
    let path = path.as_ref();
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

#[track_caller]
fn assert_contains(haystack: &str, needle: &str) {
    assert!(
        haystack.contains(needle),
        "`{needle}` missing from:\n{haystack}"
    );
}

// ---------------------------------------------------------------------------
// dpkg and apt

/// `dpkg-query -W -f=${Status}` for `name`, or "" when dpkg does not know it.
fn status_of(name: &str) -> String {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", name])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn installed(name: &str) -> bool {
    status_of(name).ends_with(" installed")
}

fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const HISTORY: &str = "/var/log/apt/history.log";

/// apt's history: one `Start-Date:` per transaction.
fn history() -> String {
    fs::read_to_string(HISTORY).unwrap_or_default()
}

/// What the example's packages layer installs on a fresh host: the two
/// declared packages and the two packages nginx-light pulls in (the nginx
/// binary and the module nginx-light adds).
const REMOVED: &[&str] = &[
    "openssh-server",
    "nginx-light",
    "libnginx-mod-http-echo",
    "nginx",
];

/// apt's cached `.deb` of an installed package, matched on its exact
/// version (the cache may hold others).
fn cached_deb(name: &str) -> PathBuf {
    let version = sh("dpkg-query", &["-W", "-f=${Version}", name]);
    // Debian file names encode the epoch's `:` as `%3a`.
    let prefix = format!("{name}_{}_", version.replace(':', "%3a"));
    fs::read_dir("/var/cache/apt/archives")
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
        .unwrap_or_else(|| panic!("no cached {prefix}*.deb: this test needs the image's apt cache"))
}

/// The packages of [`REMOVED`] taken off the system and offered back by a
/// local apt repository built from their cached `.deb`s (the test bed has
/// no mirror). Dropping it reinstalls whatever is still missing, from the
/// same files, and removes the repository.
struct FreshPackages {
    debs: Vec<PathBuf>,
    dir: PathBuf,
    list: PathBuf,
}

impl FreshPackages {
    fn take() -> Self {
        for name in REMOVED {
            assert!(
                installed(name),
                "{name} is not installed: {}",
                status_of(name)
            );
        }
        let debs: Vec<PathBuf> = REMOVED.iter().map(|n| cached_deb(n)).collect();
        let dir = PathBuf::from("/srv/datum-testkit/it-cli-packages");
        let list = PathBuf::from("/etc/apt/sources.list.d/datum-testkit-it-cli-packages.list");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let fresh = FreshPackages { debs, dir, list };

        // A flat repository: the control stanza of each package plus where
        // apt finds it, its size and hash.
        let mut index = String::new();
        for deb in &fresh.debs {
            let name = deb.file_name().unwrap().to_str().unwrap();
            fs::copy(deb, fresh.dir.join(name)).unwrap();
            let stanza = sh("dpkg-deb", &["--field", deb.to_str().unwrap()]);
            let sha = sh("sha256sum", &[deb.to_str().unwrap()]);
            index.push_str(&format!(
                "{}\nFilename: ./{name}\nSize: {}\nSHA256: {}\n\n",
                stanza.trim_end(),
                fs::metadata(deb).unwrap().len(),
                sha.split_whitespace().next().unwrap()
            ));
        }
        fs::write(fresh.dir.join("Packages"), index).unwrap();
        fs::write(
            &fresh.list,
            format!("deb [trusted=yes] file:{} ./\n", fresh.dir.display()),
        )
        .unwrap();
        sh(
            "apt-get",
            &[
                "update",
                "-qq",
                &format!("-o=Dir::Etc::SourceList={}", fresh.list.display()),
                "-o=Dir::Etc::SourceParts=-",
                "-o=APT::Get::List-Cleanup=0",
            ],
        );

        // Purged, as on a host that never had them: one dpkg call, which
        // orders the removals itself.
        let mut args = vec!["--purge"];
        args.extend(REMOVED);
        sh("dpkg", &args);
        fresh
    }
}

impl Drop for FreshPackages {
    fn drop(&mut self) {
        // Best effort: the test's own assertions are what matter.
        if REMOVED.iter().any(|n| !installed(n)) {
            let _ = Command::new("dpkg")
                .args(["-i", "--force-confold"])
                .args(&self.debs)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .output();
        }
        let _ = fs::remove_file(&self.list);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Paths a test changes, put back as they were when dropped: content, mode
/// and owner of files; directories that did not exist are removed again
/// (only if empty: a test removes what it wrote inside them first).
struct Restore {
    saved: Vec<(PathBuf, Option<Saved>)>,
}

enum Saved {
    File {
        bytes: Vec<u8>,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    Dir {
        mode: u32,
    },
}

impl Restore {
    fn new() -> Self {
        Restore { saved: Vec::new() }
    }

    fn save(&mut self, path: impl Into<PathBuf>) {
        let path = path.into();
        if self.saved.iter().any(|(p, _)| *p == path) {
            return;
        }
        let saved = fs::symlink_metadata(&path).ok().map(|m| {
            if m.is_dir() {
                Saved::Dir { mode: m.mode() }
            } else {
                Saved::File {
                    bytes: fs::read(&path).unwrap(),
                    mode: m.mode(),
                    uid: m.uid(),
                    gid: m.gid(),
                }
            }
        });
        self.saved.push((path, saved));
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        // Deepest first, so a directory is emptied before it is removed.
        let mut saved: Vec<_> = self.saved.drain(..).collect();
        saved.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        for (path, before) in saved {
            match before {
                Some(Saved::File {
                    bytes,
                    mode,
                    uid,
                    gid,
                }) => {
                    let _ = fs::write(&path, bytes);
                    let _ = fs::set_permissions(&path, fs::Permissions::from_mode(mode));
                    let _ = std::os::unix::fs::chown(&path, Some(uid), Some(gid));
                }
                Some(Saved::Dir { mode }) => {
                    let _ = fs::set_permissions(&path, fs::Permissions::from_mode(mode));
                }
                None => {
                    if path.is_dir() {
                        let _ = fs::remove_dir(&path);
                    } else {
                        let _ = fs::remove_file(&path);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// A pass on a fresh container

/// Where the fresh-container test finds the example repository inside.
const EXAMPLES_INSIDE: &str = "/run/datum-it-packages/examples";

/// Copies `examples/` into the container (from this machine: only target/
/// is shared). Outside the test bed, or without one, it does nothing.
fn ship_examples() {
    if datum_testkit::inside() {
        return;
    }
    let Some(testbed) = Testbed::from_env() else {
        return;
    };
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let _ = fs::remove_dir_all(testbed.host_path(EXAMPLES_INSIDE));
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in fs::read_dir(from.join(&rel)).unwrap() {
            let entry = entry.unwrap();
            let rel = rel.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                stack.push(rel);
            } else {
                testbed.write(
                    Path::new(EXAMPLES_INSIDE).join(&rel),
                    fs::read(entry.path()).unwrap(),
                );
            }
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A throwaway self-signed certificate for the example's shop site (Debian's
/// ssl-cert package makes the real snakeoil pair; the test bed lacks it and
/// has no openssl to make one). Test data only: it protects nothing.
const SNAKEOIL_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBhzCCAS2gAwIBAgIUDIC//sQbPfmfmJ14eL6K6CeSnH8wCgYIKoZIzj0EAwIw
GDEWMBQGA1UEAwwNZGF0dW0tdGVzdGJlZDAgFw0yNjExMjkyMTM4MjdaGA8yMTI2
MTEwNTIxMzgyN1owGDEWMBQGA1UEAwwNZGF0dW0tdGVzdGJlZDBZMBMGByqGSM49
AgEGCCqGSM49AwEHA0IABKOccVL64T4onUqbNjLIIhCnfZH0OVqscEA4+H2WzZmS
0/K5kSt5Adxd57qKfKHdRqKCewKMj0uLmKZIUWep90GjUzBRMB0GA1UdDgQWBBSK
hMxh3EqdkHMv3x68c0Z8g1+L2zAfBgNVHSMEGDAWgBSKhMxh3EqdkHMv3x68c0Z8
g1+L2zAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIG9pSnh3AiBx
3IkelNYqg7Y5HI8EKNuzM0yajyDSIPSQAiEAz0Zwmxa48u1tBYc0gs2a4hm1u/+u
6FbC6qFR1enYB/0=
-----END CERTIFICATE-----
";
const SNAKEOIL_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgX+ni+zRy4p1mPTwN
MrvoH1ODeNTl0FGcsUeF+gT5JU6hRANCAASjnHFS+uE+KJ1KmzYyyCIQp32R9Dla
rHBAOPh9ls2ZktPyuZEreQHcXee6inyh3UaignsCjI9Li5imSFFnqfdB
-----END PRIVATE KEY-----
";
const CERT_PATH: &str = "/etc/ssl/certs/ssl-cert-snakeoil.pem";
const KEY_PATH: &str = "/etc/ssl/private/ssl-cert-snakeoil.key";

/// Validator programs that log each call (and whether the real program was
/// on the system then) before running it: the evidence that a validator
/// ran, which a successful pass does not print. Found first because the
/// spies' folder leads datum's PATH.
fn spies(dir: &Path, log: &Path) -> PathBuf {
    let bin = dir.join("spy-bin");
    fs::create_dir_all(&bin).unwrap();
    for name in ["sshd", "nginx"] {
        let path = bin.join(name);
        fs::write(
            &path,
            format!(
                "#!/bin/sh\nif [ -x /usr/sbin/{name} ]; then was=installed; else was=missing; fi\necho \"{name} $was $*\" >> {log}\n\
                 [ $was = installed ] || {{ echo \"spy: {name} ran before its package was installed\"; exit 97; }}\n\
                 exec /usr/sbin/{name} \"$@\"\n",
                log = log.display()
            ),
        )
        .unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

/// The resources of `datum catalogue` in order, with their autorequires.
fn catalogue(dir: &Path) -> Vec<(String, Vec<String>, Option<String>)> {
    let run = datum(dir, None, &["catalogue"]);
    run.assert_exit(0);
    run.json()["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let strings = |v: &Value| -> Vec<String> {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_owned())
                    .collect()
            };
            (
                r["id"].as_str().unwrap().to_owned(),
                strings(&r["autorequires"]),
                r["validate"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

const FRESH: &str = "a_pass_on_a_fresh_container_installs_both_packages_in_one_apt_transaction_before_the_validated_files";

#[test]
fn a_pass_on_a_fresh_container_installs_both_packages_in_one_apt_transaction_before_the_validated_files()
 {
    ship_examples();
    run_inside(&test_name(module_path!(), FRESH), fresh_container);
}

fn fresh_container() {
    let _apt = within::lock("apt");
    let _nginx = within::lock("nginx");
    let dir = TempDir::new().unwrap();
    copy_tree(Path::new(EXAMPLES_INSIDE), &dir.path().join("repo"));
    // The example's real host, named after the container.
    let host = fs::read_to_string(dir.path().join("repo/hosts/web-03-real.yaml")).unwrap();
    assert_contains(&host, "packages: managed");
    write(
        dir.path().join("host.yaml"),
        &host.replace("name: web-03", "name: testbed"),
    );

    // Everything the example writes is put back afterwards (declared by
    // desired.path; a Tree's entries come from its source folder).
    let mut restore = Restore::new();
    let order = catalogue(dir.path());
    let listed = datum(dir.path(), None, &["catalogue"]).json();
    for r in listed["resources"].as_array().unwrap() {
        let Some(path) = r["desired"]["path"].as_str() else {
            continue;
        };
        restore.save(path);
        if r["type"] == "Tree" {
            let source = dir.path().join("repo").join(
                Path::new(r["origin"].as_str().unwrap().split(':').next().unwrap())
                    .parent()
                    .unwrap(),
            );
            let source = source.join(r["desired"]["source"].as_str().unwrap());
            for entry in fs::read_dir(source).unwrap() {
                restore.save(Path::new(path).join(entry.unwrap().file_name()));
            }
        }
    }
    for path in [
        "/etc/ssl/certs",
        CERT_PATH,
        KEY_PATH,
        "/etc/ssh/sshd_config",
        "/etc/nginx/nginx.conf",
    ] {
        restore.save(path);
    }
    if !Path::new(CERT_PATH).exists() {
        write(CERT_PATH, SNAKEOIL_CERT);
        write(KEY_PATH, SNAKEOIL_KEY);
    }

    // The catalogue orders each validated File after the Package providing
    // its validator, without the example saying `requires:`.
    let position = |id: &str| {
        order
            .iter()
            .position(|(r, _, _)| r == id)
            .unwrap_or_else(|| panic!("{id} not in the catalogue: {order:?}"))
    };
    for (file, validator, package) in [
        ("File[sshd-config]", "sshd", "Package[openssh-server]"),
        ("File[nginx-conf]", "nginx", "Package[nginx-light]"),
        ("File[site-shop]", "nginx", "Package[nginx-light]"),
        ("File[shop-http2]", "nginx", "Package[nginx-light]"),
    ] {
        let (_, autorequires, validate) = &order[position(file)];
        assert_eq!(validate.as_deref(), Some(validator), "{file}");
        assert!(
            autorequires.iter().any(|a| a == package),
            "{file} does not wait for {package}: {autorequires:?}"
        );
        assert!(position(package) < position(file), "{order:?}");
    }

    // A fresh host: neither package, nor the validators' programs.
    let packages = FreshPackages::take();
    for name in REMOVED {
        assert!(!installed(name), "{name}: {}", status_of(name));
    }
    assert!(!Path::new("/usr/sbin/sshd").exists());
    assert!(!Path::new("/usr/sbin/nginx").exists());

    let spy_log = dir.path().join("validators.log");
    let spy_bin = spies(dir.path(), &spy_log);
    let before = history();
    let first = datum(dir.path(), Some(&spy_bin), &["apply"]);
    first.assert_exit(2);

    // One apt transaction installed both (and what nginx-light needs).
    let after = history();
    assert!(after.starts_with(&before), "apt's history was rewritten");
    let new = &after[before.len()..];
    assert_eq!(new.matches("Start-Date:").count(), 1, "{new}");
    let install = new
        .lines()
        .find(|l| l.starts_with("Install: "))
        .unwrap_or_else(|| panic!("no Install: line in {new}"));
    for name in REMOVED {
        assert_contains(install, &format!("{name}:"));
    }
    assert_contains(new, "openssh-server nginx-light");
    for name in REMOVED {
        assert_eq!(status_of(name), "install ok installed", "{name}");
    }

    // In the pass, each Package reports its install before the files its
    // validator checks.
    for (package, file) in [
        ("Package[openssh-server]", "File[sshd-config]"),
        ("Package[nginx-light]", "File[nginx-conf]"),
        ("Package[nginx-light]", "File[site-shop]"),
        ("Package[nginx-light]", "File[shop-http2]"),
    ] {
        assert!(
            first.line_index(package) < first.line_index(file),
            "{package} after {file}:\n{}",
            first.stdout()
        );
        assert_contains(&first.line(package), "create");
        assert_contains(&first.line(file), "done");
    }
    // sudo was there already: nothing to do, so no line.
    assert!(
        !first.stdout().contains("Package[sudo]"),
        "{}",
        first.stdout()
    );
    assert!(
        !first.stdout().lines().any(|l| l.starts_with(['!', '#'])),
        "a failed or blocked resource:\n{}",
        first.stdout()
    );

    // The validators ran once their package was installed: a spy that ran
    // before would have failed its file (exit 97), and none failed (above).
    // (Its log is written inside the validator sandbox, whose writes are
    // discarded, so the calls themselves are not visible here; that they
    // run at all is shown by the rejection below.)
    // ... and accepted what the example declares.
    let declared = fs::read(dir.path().join("repo/base/files/sshd_config")).unwrap();
    assert_eq!(fs::read("/etc/ssh/sshd_config").unwrap(), declared);
    assert_contains(
        &fs::read_to_string("/etc/nginx/snippets/shop-http2.conf").unwrap(),
        "listen 443 ssl http2;",
    );

    // The next pass has nothing to do, and asks apt for nothing.
    let second = datum(dir.path(), Some(&spy_bin), &["apply"]);
    second.assert_exit(0);
    assert_contains(&second.stdout(), "0 changed");
    assert_eq!(history(), after, "a second transaction");

    // The validator is really in the path: a configuration sshd rejects
    // never goes live, and the failure names it.
    let live = fs::read("/etc/ssh/sshd_config").unwrap();
    let mut broken = declared.clone();
    broken.extend_from_slice(b"\nNoSuchDirective yes\n");
    fs::write(dir.path().join("repo/base/files/sshd_config"), &broken).unwrap();
    let rejected = datum(dir.path(), Some(&spy_bin), &["apply"]);
    assert!(matches!(rejected.code(), 4 | 6), "{}", rejected.stdout());
    assert_contains(&rejected.line("File[sshd-config]"), "validation failed");
    assert_eq!(fs::read("/etc/ssh/sshd_config").unwrap(), live);

    // Back as it was: the stock nginx and sshd configuration first (the
    // restore), then the services that read them.
    drop(packages);
    drop(restore);
    let _ = within::systemctl(&["restart", "nginx.service", "ssh.service"]);
}

// ---------------------------------------------------------------------------
// check: package-owned files and versions

/// A repository with one layer (`base/main.yaml`) for a host named testbed.
fn small_repo(manifest: &str) -> TempDir {
    let dir = TempDir::new().unwrap();
    write(
        dir.path().join("repo/datum.yaml"),
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
    );
    write(dir.path().join("host.yaml"), "name: testbed\nlabels: {}\n");
    write(dir.path().join("repo/base/main.yaml"), manifest);
    dir
}

/// `datum --output json check`: (subject, category, diffs) of each finding.
fn check(dir: &Path) -> (i32, Vec<(String, String, Value)>) {
    let run = datum(dir, None, &["--output", "json", "check"]);
    let report = run.json();
    assert_eq!(report["errors"], serde_json::json!([]), "{report}");
    let findings = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["subject"].as_str().unwrap().to_owned(),
                f["category"].as_str().unwrap().to_owned(),
                f["diffs"].clone(),
            )
        })
        .collect();
    (run.code(), findings)
}

const DEFAULT_SSH: &str = "/etc/default/ssh";
const PAM_SSHD: &str = "/etc/pam.d/sshd";

fn manifest(version: Option<&str>) -> String {
    let version = version.map_or(String::new(), |v| format!(", version: \"{v}\""));
    format!(
        "datum: v1alpha1\ntype: Package\nname: openssh-server\ndesired: {{name: openssh-server{version}}}\n\
---\n# A conffile of openssh-server that Datum manages.\n\
datum: v1alpha1\ntype: File\nname: default-ssh\ndesired:\n  path: {DEFAULT_SSH}\n  mode: \"0644\"\n  content: \"# Managed by Datum.\\nSSHD_OPTS=\\n\"\n"
    )
}

testbed_test!(
    check_reports_a_hand_edited_conffile_once_and_a_package_at_the_wrong_version,
    {
        let _apt = within::lock("apt");
        assert!(
            installed("openssh-server"),
            "{}",
            status_of("openssh-server")
        );
        let mut restore = Restore::new();
        restore.save(DEFAULT_SSH);
        restore.save(PAM_SSHD);
        let dir = small_repo(&manifest(None));
        let dir = dir.path();

        // Datum writes a conffile: it differs from the packaged version now,
        // as dpkg says, but it is declared, so it is File drift or nothing.
        datum(dir, None, &["apply"]).assert_exit(2);
        let verify = Command::new("dpkg")
            .args(["--verify", "openssh-server"])
            .output()
            .unwrap();
        assert_contains(&String::from_utf8_lossy(&verify.stdout), DEFAULT_SSH);
        let (code, findings) = check(dir);
        assert_eq!((code, findings.len()), (0, 0), "{findings:?}");

        // A hand edit of a conffile nobody declares: a finding of the Package.
        let pam = fs::read_to_string(PAM_SSHD).unwrap();
        fs::write(PAM_SSHD, format!("{pam}# edited by hand\n")).unwrap();
        let (code, findings) = check(dir);
        assert_eq!(code, 2, "{findings:?}");
        assert_eq!(findings.len(), 1, "{findings:?}");
        let (subject, category, diffs) = &findings[0];
        assert_eq!(subject, &format!("Package[openssh-server]:{PAM_SSHD}"));
        assert_eq!(category, "changed_outside");
        assert_eq!(diffs[0]["path"], "content");
        assert_contains(diffs[0]["before"].as_str().unwrap(), "(packaged)");
        assert_ne!(diffs[0]["before"], diffs[0]["after"]);

        // A hand edit of the declared conffile: reported once, as File drift.
        fs::write(DEFAULT_SSH, "SSHD_OPTS=-d\n").unwrap();
        let (_, findings) = check(dir);
        let subjects: Vec<&str> = findings.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(
            subjects,
            [
                "File[default-ssh]".to_owned(),
                format!("Package[openssh-server]:{PAM_SSHD}")
            ],
            "{findings:?}"
        );
        assert_eq!(findings[0].1, "changed_outside");

        // Deleted by hand: still the Package's, as a deletion.
        fs::write(DEFAULT_SSH, "# Managed by Datum.\nSSHD_OPTS=\n").unwrap();
        fs::remove_file(PAM_SSHD).unwrap();
        let (_, findings) = check(dir);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].1, "deleted_outside");
        fs::write(PAM_SSHD, &pam).unwrap();
        assert_eq!(check(dir), (0, Vec::new()));

        // Another version declared than the one installed: in check the
        // change apply owes (the declaration changed since the last apply,
        // so not drift), and a pending change in plan.
        let installed_version = sh("dpkg-query", &["-W", "-f=${Version}", "openssh-server"]);
        write(
            dir.join("repo/base/main.yaml"),
            &manifest(Some("1:9.1p1-1")),
        );
        let (code, findings) = check(dir);
        assert_eq!(code, 2);
        assert_eq!(findings.len(), 1, "{findings:?}");
        let (subject, category, diffs) = &findings[0];
        assert_eq!(subject, "Package[openssh-server]");
        assert_eq!(category, "not_converged");
        let version = diffs
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["path"] == "version")
            .unwrap_or_else(|| panic!("no version difference: {diffs}"));
        // Declared -> installed, the direction reality moved.
        assert_eq!(version["after"], installed_version.as_str());
        assert_contains(version["before"].as_str().unwrap(), "1:9.1p1-1");
        let plan = datum(dir, None, &["plan"]);
        plan.assert_exit(2);
        assert_contains(&plan.line("Package[openssh-server]"), "update");
        assert_eq!(
            sh("dpkg-query", &["-W", "-f=${Version}", "openssh-server"]),
            installed_version,
            "check and plan changed nothing"
        );
        drop(restore);
    }
);

// ---------------------------------------------------------------------------
// check against a scratch root: a hand-made dpkg database, no test bed

/// The MD5 `md5sum` prints for `text`.
fn md5_of(text: &str) -> String {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("f");
    fs::write(&path, text).unwrap();
    let out = sh("md5sum", &[path.to_str().unwrap()]);
    out.split_whitespace().next().unwrap().to_owned()
}

/// A scratch root whose dpkg database says `datum-demo` 1.0-1 and
/// `datum-other` 2.0 are installed, each with conffiles as packaged, and a
/// repository declaring `manifest` for it.
fn scratch_host(manifest: &str) -> TempDir {
    let dir = small_repo(manifest);
    let root = dir.path().join("root");
    let packaged = |name: &str| format!("# {name} as packaged\n");
    let mut status = String::new();
    for (package, version, files) in [
        (
            "datum-demo",
            "1.0-1",
            &[
                "/etc/demo/edited.conf",
                "/etc/demo/declared.conf",
                "/etc/demo/kept.conf",
            ][..],
        ),
        ("datum-other", "2.0", &["/etc/other.conf"][..]),
    ] {
        status.push_str(&format!(
            "Package: {package}\nStatus: install ok installed\nArchitecture: all\nVersion: {version}\nConffiles:\n"
        ));
        for file in files {
            status.push_str(&format!(" {file} {}\n", md5_of(&packaged(file))));
            write(root.join(&file[1..]), &packaged(file));
        }
        status.push_str("Description: test\n\n");
    }
    write(root.join("var/lib/dpkg/status"), &status);
    dir
}

/// `datum ARGS` against the scratch host made by [`scratch_host`].
fn datum_scratch(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_datum"))
        .arg("--repo")
        .arg(dir.join("repo"))
        .arg("--root")
        .arg(dir.join("root"))
        .arg("--host-file")
        .arg(dir.join("host.yaml"))
        .arg("--state")
        .arg(dir.join("state.db"))
        .args(args)
        .output()
        .unwrap()
}

/// `datum --root <scratch> --output json check`: exit code and (subject,
/// category) of each finding.
fn check_scratch(dir: &Path) -> (i32, Vec<(String, String)>) {
    let run = Run(datum_scratch(dir, &["--output", "json", "check"]));
    let report = run.json();
    assert_eq!(report["errors"], serde_json::json!([]), "{report}");
    let findings = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["subject"].as_str().unwrap().to_owned(),
                f["category"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (run.code(), findings)
}

const DEMO: &str = "datum: v1alpha1\ntype: Package\nname: demo\ndesired: {name: datum-demo, version: \"1.0-1\"}\n\
---\ndatum: v1alpha1\ntype: File\nname: declared\ndesired: {path: /etc/demo/declared.conf, content: \"# ours\\n\"}\n";

#[test]
fn check_reports_edited_conffiles_of_declared_packages_only() {
    let dir = scratch_host(DEMO);
    let dir = dir.path();
    let root = dir.join("root");
    // The File's content differs from the packaged one: declared, so it is
    // the File's business (here: not converged, since it was never applied).
    assert_eq!(
        check_scratch(dir),
        (
            2,
            vec![("File[declared]".to_owned(), "not_converged".to_owned())]
        )
    );
    fs::write(root.join("etc/demo/declared.conf"), "# ours\n").unwrap();
    assert_eq!(check_scratch(dir), (0, Vec::new()));

    // Edited, deleted and replaced conffiles of the declared package; an
    // edited one of a package nobody declares is not this report's.
    fs::write(root.join("etc/demo/edited.conf"), "# by hand\n").unwrap();
    fs::remove_file(root.join("etc/demo/kept.conf")).unwrap();
    fs::write(root.join("etc/other.conf"), "# by hand\n").unwrap();
    let (code, findings) = check_scratch(dir);
    assert_eq!(code, 2);
    assert_eq!(
        findings,
        [
            (
                "Package[demo]:/etc/demo/edited.conf".to_owned(),
                "changed_outside".to_owned()
            ),
            (
                "Package[demo]:/etc/demo/kept.conf".to_owned(),
                "deleted_outside".to_owned()
            ),
        ]
    );
    fs::create_dir(root.join("etc/demo/kept.conf")).unwrap();
    let (_, findings) = check_scratch(dir);
    assert_eq!(findings[1].1, "type_changed", "{findings:?}");
}

/// `datum agent --once` on the scratch host: exit code and stderr.
fn agent_once(dir: &Path) -> (i32, String) {
    let out = datum_scratch(dir, &["agent", "--once"]);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_agent_reports_edited_conffiles_of_declared_packages_like_check() {
    let dir = scratch_host(DEMO);
    let dir = dir.path();
    let root = dir.join("root");
    fs::write(root.join("etc/demo/declared.conf"), "# ours\n").unwrap();
    let (code, stderr) = agent_once(dir);
    assert_eq!(code, 0, "{stderr}");
    // An undeclared package's conffile is nobody's finding; the declared
    // package's is one.
    fs::write(root.join("etc/other.conf"), "# by hand\n").unwrap();
    assert_eq!(agent_once(dir).0, 0);
    fs::write(root.join("etc/demo/edited.conf"), "# by hand\n").unwrap();
    let (code, stderr) = agent_once(dir);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("1 open finding(s), exit 2"), "{stderr}");
    assert_eq!(
        check_scratch(dir),
        (
            2,
            vec![(
                "Package[demo]:/etc/demo/edited.conf".to_owned(),
                "changed_outside".to_owned()
            )]
        )
    );
}

#[test]
fn check_reports_a_package_at_another_version_and_ignores_absent_ones() {
    let dir = scratch_host(&DEMO.replace("1.0-1", "1.1-*"));
    let dir = dir.path();
    fs::write(dir.join("root/etc/demo/declared.conf"), "# ours\n").unwrap();
    fs::write(dir.join("root/etc/demo/edited.conf"), "# by hand\n").unwrap();
    let (code, findings) = check_scratch(dir);
    assert_eq!(code, 2);
    assert_eq!(
        findings,
        [
            // Never applied here: not converged, not drift.
            ("Package[demo]".to_owned(), "not_converged".to_owned()),
            (
                "Package[demo]:/etc/demo/edited.conf".to_owned(),
                "changed_outside".to_owned()
            ),
        ]
    );

    // Declared absent: the package itself is the finding (not converged:
    // never applied here), its files are not.
    write(
        dir.join("repo/base/main.yaml"),
        "datum: v1alpha1\ntype: Package\nname: demo\ndesired: {name: datum-demo, state: absent}\n",
    );
    let (_, findings) = check_scratch(dir);
    assert_eq!(
        findings,
        [("Package[demo]".to_owned(), "not_converged".to_owned())]
    );
}

testbed_test!(
    a_file_owned_by_a_user_its_package_adds_is_applied_in_the_same_pass,
    {
        // A package whose postinst adds a system user (as postgresql adds
        // `postgres`), and a File owned by that user, in one pass: the
        // account files the pass read before apt ran no longer hold.
        let _apt = within::lock("apt");
        const PACKAGE: &str = "datum-it-adds-user";
        const USER: &str = "datum-it-svc";
        const CONF: &str = "/etc/datum-it-svc.conf";
        struct Cleanup;
        impl Drop for Cleanup {
            fn drop(&mut self) {
                let _ = Command::new("dpkg").args(["--purge", PACKAGE]).output();
                let _ = Command::new("userdel").arg(USER).output();
                let _ = fs::remove_file(CONF);
            }
        }
        let _cleanup = Cleanup;
        let _repo = datum_testkit::apt::LocalRepo::publish(
            "it-cli-adds-user",
            &[datum_testkit::apt::DebPackage::new(PACKAGE, "1.0-1").script(
                "postinst",
                &format!(
                    "getent passwd {USER} >/dev/null || useradd --system --no-create-home {USER}"
                ),
            )],
        );
        assert!(!installed(PACKAGE));
        let dir = small_repo(&format!(
            "datum: v1alpha1\ntype: Package\nname: svc\ndesired: {{name: {PACKAGE}}}\n\
---\ndatum: v1alpha1\ntype: File\nname: svc-conf\nrequires: [Package/svc]\ndesired:\n  path: {CONF}\n  owner: {USER}\n  mode: \"0640\"\n  content: \"listen 8080\\n\"\n"
        ));
        let dir = dir.path();

        let plan = datum(dir, None, &["plan"]);
        plan.assert_exit(2);
        assert!(!plan.stdout().contains("would fail"), "{}", plan.stdout());

        let apply = datum(dir, None, &["apply"]);
        apply.assert_exit(2);
        assert!(installed(PACKAGE));
        let uid: u32 = sh("id", &["-u", USER]).trim().parse().unwrap();
        assert_eq!(fs::metadata(CONF).unwrap().uid(), uid);
        assert_eq!(fs::read_to_string(CONF).unwrap(), "listen 8080\n");
        datum(dir, None, &["plan"]).assert_exit(0);
    }
);

testbed_test!(
    an_arch_all_package_under_its_native_name_is_the_one_installed,
    {
        // adduser is `Architecture: all` (dpkg names its record adduser:all,
        // and `dpkg -s adduser:amd64` finds nothing), and for apt it is a
        // package of the native architecture: `apt-get install
        // adduser:amd64` is adduser. So Package[adduser] beside a Package
        // of name adduser:amd64 (or adduser:all) is one package, refused as
        // one by plan, apply and check before anything is done; and
        // adduser:amd64 alone is the adduser installed here (it used to be
        // planned as a create, and its apply failed after apt-get, calling
        // it a virtual package).
        let _apt = within::lock("apt");
        assert_eq!(
            sh(
                "dpkg-query",
                &["-W", "-f=${Package}:${Architecture}", "adduser"]
            ),
            "adduser:all"
        );
        let native = sh("dpkg", &["--print-architecture"]).trim().to_owned();
        let pair = |other: &str| {
            format!(
                "datum: v1alpha1\ntype: Package\nname: adduser\ndesired: {{state: installed}}\n\
---\ndatum: v1alpha1\ntype: Package\nname: adduser-arch\ndesired:\n  name: \"{other}\"\n  state: absent\n"
            )
        };
        for other in [format!("adduser:{native}"), "adduser:all".to_owned()] {
            let dir = small_repo(&pair(&other));
            let dir = dir.path();
            for (command, done) in [
                ("plan", "nothing was planned"),
                ("apply", "nothing was applied"),
                ("check", "nothing was reported, reconciled or recorded"),
            ] {
                let out = datum(dir, None, &[command]);
                out.assert_exit(1);
                let err = out.stderr();
                assert_contains(
                    &err,
                    "Package[adduser] (base/main.yaml:1:1) and Package[adduser-arch] (base/main.yaml:6:1)",
                );
                assert_contains(&err, "manage one package adduser:all on this host");
                assert_contains(&err, done);
            }
            assert!(installed("adduser"));
        }
        for name in [format!("adduser:{native}"), "adduser:all".to_owned()] {
            let dir = small_repo(&format!(
                "datum: v1alpha1\ntype: Package\nname: adduser\ndesired:\n  name: \"{name}\"\n  state: installed\n"
            ));
            datum(dir.path(), None, &["plan"]).assert_exit(0);
            datum(dir.path(), None, &["apply"]).assert_exit(0);
        }
    }
);

testbed_test!(
    an_apt_transaction_that_takes_long_is_said_on_a_terminal_only,
    {
        // apt-get's transaction may take minutes (downloads, maintainer
        // scripts): on a terminal the bar says what the pass waits for, as
        // it does for systemd's jobs; piped, nothing of it is written.
        let _apt = within::lock("apt");
        const PACKAGE: &str = "datum-it-slow-postinst";
        struct Cleanup;
        impl Drop for Cleanup {
            fn drop(&mut self) {
                let _ = Command::new("dpkg").args(["--purge", PACKAGE]).output();
            }
        }
        let _cleanup = Cleanup;
        let _repo = datum_testkit::apt::LocalRepo::publish(
            "it-cli-slow-postinst",
            &[datum_testkit::apt::DebPackage::new(PACKAGE, "1.0-1").script("postinst", "sleep 3")],
        );
        let manifest = |state: &str| {
            format!(
                "datum: v1alpha1\ntype: Package\nname: slow\ndesired: {{name: {PACKAGE}, state: {state}}}\n"
            )
        };
        let dir = small_repo(&manifest("installed"));
        let dir = dir.path();
        // Piped: the same slow install, and not a word of the wait.
        let piped = datum(dir, None, &["apply"]);
        piped.assert_exit(2);
        assert!(installed(PACKAGE));
        assert!(
            !piped.stdout().contains("waiting") && !piped.stderr().contains("waiting"),
            "{}{}",
            piped.stdout(),
            piped.stderr()
        );
        write(dir.join("repo/base/main.yaml"), &manifest("absent"));
        datum(dir, None, &["apply"]).assert_exit(2);
        assert!(!installed(PACKAGE));
        // `datum ... apply` under script(1)'s pseudo-terminal.
        write(dir.join("repo/base/main.yaml"), &manifest("installed"));
        let binary = env!("CARGO_BIN_EXE_datum");
        let line = format!(
            "stty cols 200; {binary} --repo {repo} --root / --host-file {host} --state {state} --color never apply",
            repo = dir.join("repo").display(),
            host = dir.join("host.yaml").display(),
            state = dir.join("state.db").display(),
        );
        assert!(!line.contains(['\'', '"']));
        let out = Command::new("script")
            .args(["--quiet", "--return", "--command", &line, "/dev/null"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let terminal = String::from_utf8_lossy(&out.stdout).into_owned();
        println!(
            "--- on a terminal (exit {:?})\n{terminal}",
            out.status.code()
        );
        assert_eq!(out.status.code(), Some(2), "{terminal}");
        assert!(installed(PACKAGE));
        assert_contains(
            &terminal,
            &format!("waiting for apt-get: installing {PACKAGE} ("),
        );
        assert_contains(&terminal, "s, up to 30m)");
    }
);
