//! Every shipped validator, run for real: it says yes to a valid sample and no
//! to an invalid one, and it leaves the file system under the root exactly as
//! it found it (paths, types, sizes, modes, owners, mtimes, ctimes and
//! contents; access times are not compared, reading changes them).
//!
//! The registry requires validators to be free of side effects (see
//! `validators/mod.rs`); Datum cannot enforce that for a third-party program,
//! so these tests are where it is checked, one per definition, and a
//! definition without a test here fails `every_shipped_validator_is_tested`.
//!
//! File validators run on a staged copy laid out as the File provider stages
//! it (`<dir>/.datum.stage.<random>/<target name>` under a temporary root);
//! group validators run on a temporary root holding the main configuration.
//! Each test needs its validator's program: when `DATUM_VALIDATORS_REQUIRED`
//! is set (CI as root, via scripts/test) a missing program is a failure,
//! otherwise the test prints "skipped: X not installed" and returns.
//! `scripts/deps` installs them all.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a failed step must stop the test"
)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use datum_host::Host;
use datum_host::sandbox::{Isolation, Sandbox};
use datum_providers::Staged;
use datum_providers::validators::{
    self, Rejection, RejectionKind, Scope, ValidatorDef, validate_group, validate_group_in,
    validate_staged, validate_staged_in,
};
use tempfile::TempDir;

// ---------------------------------------------------------------------------
// The file system under a root, as a value

/// What a test compares about one path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: &'static str,
    size: u64,
    mode: u32,
    owner: (u32, u32),
    mtime: (i64, i64),
    ctime: (i64, i64),
    /// The bytes of a regular file (compared whole: stronger than a hash).
    content: Option<Vec<u8>>,
    link: Option<PathBuf>,
}

type Tree = BTreeMap<PathBuf, Entry>;

fn snapshot(root: &Path) -> Tree {
    let mut tree = Tree::new();
    walk(root, root, &mut tree);
    tree
}

fn walk(root: &Path, path: &Path, tree: &mut Tree) {
    let meta = fs::symlink_metadata(path).unwrap();
    let kind = if meta.is_symlink() {
        "symlink"
    } else if meta.is_dir() {
        "dir"
    } else if meta.is_file() {
        "file"
    } else {
        "other"
    };
    let entry = Entry {
        kind,
        size: if meta.is_dir() { 0 } else { meta.len() },
        mode: meta.permissions().mode(),
        owner: (meta.uid(), meta.gid()),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ctime: (meta.ctime(), meta.ctime_nsec()),
        content: meta.is_file().then(|| fs::read(path).unwrap()),
        link: meta.is_symlink().then(|| fs::read_link(path).unwrap()),
    };
    tree.insert(path.strip_prefix(root).unwrap().to_owned(), entry);
    if meta.is_dir() {
        let mut children: Vec<PathBuf> = fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        children.sort();
        for child in children {
            walk(root, &child, tree);
        }
    }
}

/// Fails naming every path that appeared, disappeared or changed.
#[track_caller]
fn assert_same_tree(before: &Tree, after: &Tree, what: &str) {
    let mut problems = Vec::new();
    for (path, entry) in before {
        match after.get(path) {
            None => problems.push(format!("removed: {}", path.display())),
            Some(now) if now != entry => {
                let mut fields = Vec::new();
                if now.kind != entry.kind {
                    fields.push("type");
                }
                if now.size != entry.size {
                    fields.push("size");
                }
                if now.mode != entry.mode {
                    fields.push("mode");
                }
                if now.owner != entry.owner {
                    fields.push("owner");
                }
                if now.mtime != entry.mtime {
                    fields.push("mtime");
                }
                if now.ctime != entry.ctime {
                    fields.push("ctime");
                }
                if now.content != entry.content {
                    fields.push("content");
                }
                if now.link != entry.link {
                    fields.push("link target");
                }
                problems.push(format!(
                    "changed: {} ({})",
                    path.display(),
                    fields.join(", ")
                ));
            }
            Some(_) => {}
        }
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        problems.push(format!("created: {}", path.display()));
    }
    assert!(
        problems.is_empty(),
        "{what} changed the file system under the root:\n  {}",
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------
// Running a validator on a temporary root

/// The definition, or `None` (after saying so) when its program is missing
/// here and the environment does not require it.
fn require(name: &str) -> Option<&'static ValidatorDef> {
    let def = validators::lookup(name).unwrap_or_else(|| panic!("no validator {name}"));
    if let Some(binary) = def.binary
        && datum_host::command::which(binary).is_none()
    {
        assert!(
            std::env::var_os("DATUM_VALIDATORS_REQUIRED").is_none(),
            "validator {name} needs `{binary}` (Debian package {}), which DATUM_VALIDATORS_REQUIRED says must be installed: run scripts/deps",
            def.package.unwrap_or("?")
        );
        println!("skipped: {binary} not installed (validator {name}; run scripts/deps)");
        return None;
    }
    Some(def)
}

/// A temporary root with files in it (`/etc/x` -> `<root>/etc/x`).
struct Root {
    dir: TempDir,
}

impl Root {
    fn new() -> Self {
        Root {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn live(&self, declared: &str) -> PathBuf {
        self.path().join(declared.trim_start_matches('/'))
    }

    fn write(&self, declared: &str, text: &str, mode: u32) -> PathBuf {
        let path = self.live(declared);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, text).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    fn mkdir(&self, declared: &str) {
        fs::create_dir_all(self.live(declared)).unwrap();
    }

    fn host(&self) -> Host {
        Host::with_name(self.path(), "test-host")
    }
}

/// Stages `text` for the file at `declared` the way the File provider does,
/// runs the validator on it, and checks that nothing under the root changed.
fn run_staged(def: &ValidatorDef, declared: &str, text: &str, mode: u32) -> Result<(), Rejection> {
    let root = Root::new();
    // A live file next to it, as on a real host: it must stay untouched too.
    root.write(declared, "# the live file\n", mode);
    let target = Path::new(declared);
    let stage_dir = format!("{}/.datum.stage.t3st", target.parent().unwrap().display());
    let staged_declared = format!(
        "{stage_dir}/{}",
        target.file_name().unwrap().to_string_lossy()
    );
    let staged = root.write(&staged_declared, text, mode);
    let before = snapshot(root.path());
    let verdict = validate_staged(def, &root.host(), &staged_at(&staged, text, mode));
    let after = snapshot(root.path());
    assert_same_tree(&before, &after, &format!("validator {}", def.name));
    verdict
}

/// What the gate hands a validator for a staged copy at `path`.
fn staged_at<'a>(path: &'a Path, text: &'a str, mode: u32) -> Staged<'a> {
    Staged {
        path,
        bytes: text.as_bytes(),
        mode,
        uid: None,
        gid: None,
    }
}

/// Runs a group validator on `root` and checks that nothing under it changed.
fn run_group(def: &ValidatorDef, root: &Root) -> Result<(), Rejection> {
    let before = snapshot(root.path());
    let verdict = validate_group(def, &root.host());
    let after = snapshot(root.path());
    assert_same_tree(&before, &after, &format!("validator {}", def.name));
    verdict
}

#[track_caller]
fn assert_accepts(verdict: Result<(), Rejection>, what: &str) {
    if let Err(r) = verdict {
        panic!(
            "{what}: rejected a valid sample: {}\n{}",
            r.summary(),
            r.output
        );
    }
}

#[track_caller]
fn assert_rejects(verdict: Result<(), Rejection>, what: &str) {
    match verdict {
        Ok(()) => panic!("{what}: accepted an invalid sample"),
        Err(r) => {
            assert!(
                matches!(r.kind, RejectionKind::Invalid { .. }),
                "{what}: not judged invalid but {:?}: {}\n{}",
                r.kind,
                r.summary(),
                r.output
            );
            assert_eq!(r.validator, what);
            assert_eq!(r.host, "test-host");
            // The diagnostic: the offending line, quoted from the content.
            assert!(
                r.output.contains("offending line"),
                "{what}: no offending line quoted in:\n{}",
                r.output
            );
            // A parser's "no" reads like a checker's exit status.
            assert!(
                !r.summary().contains("killed by a signal"),
                "{}",
                r.summary()
            );
        }
    }
}

/// A file validator: staged valid and invalid samples.
fn check_file_validator(name: &str, declared: &str, mode: u32, valid: &str, invalid: &str) {
    let Some(def) = require(name) else {
        return;
    };
    assert_eq!(def.scope, Scope::File, "{name}");
    assert_accepts(run_staged(def, declared, valid, mode), name);
    assert_rejects(run_staged(def, declared, invalid, mode), name);
}

// ---------------------------------------------------------------------------
// One test per shipped validator

/// Validators with a test below; `every_shipped_validator_is_tested` keeps
/// this list and the registry equal.
const TESTED: &[&str] = &[
    "sshd",
    "nginx",
    "sudoers",
    "json",
    "yaml",
    "toml",
    "systemd-unit",
    "nftables",
    "haproxy",
    "apache2",
    "logrotate",
];

#[test]
fn every_shipped_validator_is_tested() {
    let mut shipped: Vec<&str> = validators::all().iter().map(|v| v.name).collect();
    let mut tested = TESTED.to_vec();
    shipped.sort_unstable();
    tested.sort_unstable();
    assert_eq!(
        shipped, tested,
        "a validator was added or removed: give it a side-effect test here"
    );
}

#[test]
fn sshd() {
    check_file_validator(
        "sshd",
        "/etc/ssh/sshd_config",
        0o600,
        "Port 22\nPermitRootLogin no\nPasswordAuthentication no\n",
        "Port 22\nNoSuchDirective yes\n",
    );
}

/// Validators echo what they cannot parse, from whatever file the staged
/// configuration includes: an sshd_config naming a file not everyone may
/// read (a password hash, a private key) would print it line by line in a
/// plan. Such an output is withheld, naming the file; the same file
/// readable by all is quoted as before.
#[test]
fn output_naming_a_file_not_everyone_may_read_is_withheld() {
    let Some(def) = require("sshd") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    fs::write(&secret, "secretuser:$6$CANARY-SECRET$abc:1::::::\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let text = format!("Include {}\n", secret.display());
    let r = run_staged(def, "/etc/ssh/sshd_config", &text, 0o600).unwrap_err();
    assert!(!r.output.contains("CANARY"), "{}", r.output);
    assert!(
        r.output.contains("withheld") && r.output.contains(&*secret.to_string_lossy()),
        "{}",
        r.output
    );
    // Readable by others, in a folder others may not search (a 0700 home):
    // as private.
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let r = run_staged(def, "/etc/ssh/sshd_config", &text, 0o600).unwrap_err();
    assert!(!r.output.contains("CANARY"), "{}", r.output);
    assert!(r.output.contains("withheld"), "{}", r.output);
    // Everyone may read it: its lines are quoted.
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let r = run_staged(def, "/etc/ssh/sshd_config", &text, 0o600).unwrap_err();
    assert!(r.output.contains("CANARY-SECRET"), "{}", r.output);
}

/// A validator's output naming a private file by a path with a space in it
/// (quoted in the configuration) is withheld too: the check must not split
/// the name at the space and miss the file.
#[test]
fn output_naming_a_private_file_with_a_space_in_its_path_is_withheld() {
    let Some(def) = require("sshd") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("a b")).unwrap();
    let secret = dir.path().join("a b/secret");
    fs::write(&secret, "secretuser:$6$canary-7f3a$abc:1::::::\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let text = format!("Include \"{}\"\n", secret.display());
    let r = run_staged(def, "/etc/ssh/sshd_config", &text, 0o600).unwrap_err();
    assert!(!r.output.contains("canary-7f3a"), "{}", r.output);
}

#[test]
fn sudoers() {
    // visudo also judges owner and mode: a drop-in is 0440.
    check_file_validator(
        "sudoers",
        "/etc/sudoers.d/ops",
        0o440,
        "%ops ALL=(root) /usr/bin/apt-get\n",
        "%ops ALL=(root /usr/bin/apt-get\n",
    );
}

#[test]
fn json() {
    check_file_validator(
        "json",
        "/etc/app/config.json",
        0o644,
        "{\"listen\": [80, 443], \"tls\": true}\n",
        "{\"listen\": [80, 443}\n",
    );
}

#[test]
fn yaml() {
    check_file_validator(
        "yaml",
        "/etc/app/config.yaml",
        0o644,
        "listen: [80, 443]\ntls: true\n---\nother: document\n",
        "listen: [80, 443\ntls: true\n",
    );
}

#[test]
fn toml() {
    check_file_validator(
        "toml",
        "/etc/app/config.toml",
        0o644,
        "listen = [80, 443]\n[tls]\nenabled = true\n",
        "listen = [80, 443\n",
    );
}

#[test]
fn systemd_unit() {
    // systemd-analyze judges by the file name's suffix, which staging keeps.
    check_file_validator(
        "systemd-unit",
        "/etc/systemd/system/datum-test.service",
        0o644,
        "[Unit]\nDescription=datum test\n\n[Service]\nExecStart=/bin/true\n",
        "[Service\nExecStart=/bin/true\n",
    );
}

#[test]
fn nftables() {
    // `nft -c` checks against the kernel without committing anything.
    check_file_validator(
        "nftables",
        "/etc/nftables.conf",
        0o644,
        "table inet datum_test {\n  chain input {\n    type filter hook input priority 0; policy accept;\n  }\n}\n",
        "table inet datum_test {\n  chain input {\n    no_such_statement here;\n  }\n}\n",
    );
}

#[test]
fn haproxy() {
    check_file_validator(
        "haproxy",
        "/etc/haproxy/haproxy.cfg",
        0o644,
        "global\n  maxconn 100\ndefaults\n  mode http\n  timeout connect 1s\n  timeout client 1s\n  timeout server 1s\nfrontend web\n  bind 127.0.0.1:8089\n  default_backend app\nbackend app\n  server a1 127.0.0.1:8090\n",
        "global\n  no_such_keyword 1\n",
    );
}

#[test]
fn haproxy_runs_no_lua_the_configuration_brings() {
    // haproxy -c runs what lua-load names while it reads: a configuration
    // that is also a Lua chunk and loads itself ran its Lua as root in the
    // validator (before haproxy refused it), from `datum plan`.
    let Some(def) = require("haproxy") else {
        return;
    };
    if !sandbox_available() {
        return;
    }
    let root = Root::new();
    let cfg = root.live("/etc/haproxy/haproxy.cfg");
    let polyglot = format!(
        "# both a configuration and a Lua chunk\n--[[\nglobal\n  lua-load {}\n]]\nerror(\"datum-lua-\" .. \"ran\")\n",
        cfg.display()
    );
    let err = validate_staged(def, &root.host(), &staged_at(&cfg, &polyglot, 0o644)).unwrap_err();
    assert!(matches!(err.kind, RejectionKind::Invalid { .. }), "{err:?}");
    assert!(!err.output.contains("datum-lua-ran"), "{}", err.output);
    assert!(
        err.output.contains("one of the files being validated"),
        "{}",
        err.output
    );
}

#[test]
fn logrotate() {
    let Some(def) = require("logrotate") else {
        return;
    };
    // The log it names lives under a root of its own, with old rotations:
    // debug mode (-d) must rotate, compress and remove nothing.
    let logs = Root::new();
    logs.write("/var/log/app/app.log", "a line\n", 0o640);
    logs.write("/var/log/app/app.log.1", "an older line\n", 0o640);
    let pattern = logs.live("/var/log/app/*.log");
    let valid = format!(
        "{} {{\n  daily\n  rotate 0\n  compress\n  missingok\n}}\n",
        pattern.display()
    );
    // logrotate ignores unknown keywords with a warning and exit 0; a bad
    // value for a known one is an error.
    let invalid = format!("{} {{\n  rotate notanumber\n}}\n", pattern.display());
    let logs_before = snapshot(logs.path());
    assert_accepts(
        run_staged(def, "/etc/logrotate.d/app", &valid, 0o644),
        "logrotate",
    );
    assert_rejects(
        run_staged(def, "/etc/logrotate.d/app", &invalid, 0o644),
        "logrotate",
    );
    assert_same_tree(&logs_before, &snapshot(logs.path()), "logrotate -d");
}

/// The machine's uid for `nobody` (nginx's worker user when none is set).
fn nobody_uid() -> u32 {
    fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            (f.next() == Some("nobody")).then(|| f.nth(1).unwrap().parse().unwrap())
        })
        .expect("a nobody user in /etc/passwd")
}

/// nginx's whole configuration in a root of its own. `nginx -t` prepares
/// what its configuration names as nginx does when it starts: it opens the
/// pid file and the logs (creating them when missing) and creates its
/// temporary folders, giving them to the worker user when they belong to
/// someone else. Here they exist already and belong to the worker user, as
/// on any host nginx has run on, so any change to them shows.
fn nginx_root(site: &str) -> Root {
    let root = Root::new();
    let r = root.path().display().to_string();
    for dir in ["body", "proxy", "fastcgi", "uwsgi", "scgi"] {
        let declared = format!("/var/lib/nginx/{dir}");
        root.mkdir(&declared);
        std::os::unix::fs::chown(root.live(&declared), Some(nobody_uid()), None).unwrap();
    }
    root.write("/run/nginx.pid", "4242\n", 0o644);
    root.write("/var/log/nginx/error.log", "an old error\n", 0o640);
    root.write("/var/log/nginx/access.log", "an old request\n", 0o640);
    root.write(
        "/etc/nginx/nginx.conf",
        &format!(
            "pid {r}/run/nginx.pid;\nerror_log {r}/var/log/nginx/error.log;\nevents {{ worker_connections 64; }}\nhttp {{\n  access_log {r}/var/log/nginx/access.log;\n  client_body_temp_path {r}/var/lib/nginx/body;\n  proxy_temp_path {r}/var/lib/nginx/proxy;\n  fastcgi_temp_path {r}/var/lib/nginx/fastcgi;\n  uwsgi_temp_path {r}/var/lib/nginx/uwsgi;\n  scgi_temp_path {r}/var/lib/nginx/scgi;\n  include {r}/etc/nginx/sites-enabled/*.conf;\n}}\n"
        ),
        0o644,
    );
    root.write("/etc/nginx/sites-enabled/shop.conf", site, 0o644);
    root
}

#[test]
fn nginx() {
    let Some(def) = require("nginx") else {
        return;
    };
    assert_eq!(def.scope, Scope::Group);
    let good = "server {\n  listen 127.0.0.1:8099;\n  location / { return 200 \"ok\"; }\n}\n";
    let bad = "server {\n  listen 127.0.0.1:8099;\n  datum_no_such_directive on;\n}\n";
    assert_accepts(run_group(def, &nginx_root(good)), "nginx");
    // The broken line is in an include: only the assembled whole shows it.
    assert_rejects(run_group(def, &nginx_root(bad)), "nginx");
    // A group validator pointed at one staged file judges nothing.
    let root = nginx_root(bad);
    let site = root.live("/etc/nginx/sites-enabled/shop.conf");
    assert!(validate_staged(def, &root.host(), &staged_at(&site, bad, 0o644)).is_ok());
}

/// Apache's configuration in a root of its own, with a relative include (as
/// Debian's apache2.conf has): it must resolve under the root, not in the
/// machine's /etc/apache2.
fn apache_root(extra: &str) -> Root {
    let root = Root::new();
    let r = root.path().display().to_string();
    root.write("/run/apache2/apache2.pid", "4242\n", 0o644);
    root.write("/var/log/apache2/error.log", "an old error\n", 0o640);
    root.write(
        "/etc/apache2/apache2.conf",
        &format!(
            "ServerName localhost\nListen 127.0.0.1:8098\nPidFile {r}/run/apache2/apache2.pid\nErrorLog {r}/var/log/apache2/error.log\nLoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so\nIncludeOptional conf-enabled/*.conf\n"
        ),
        0o644,
    );
    root.write("/etc/apache2/conf-enabled/site.conf", extra, 0o644);
    root
}

#[test]
fn apache2() {
    let Some(def) = require("apache2") else {
        return;
    };
    assert_eq!(def.scope, Scope::Group);
    assert_accepts(run_group(def, &apache_root("Timeout 30\n")), "apache2");
    assert_rejects(
        run_group(def, &apache_root("DatumNoSuchDirective on\n")),
        "apache2",
    );
}

/// The lines a definition says its program prints itself
/// (`ValidatorDef::own_lines`, whose fixed words are not searched for a
/// sensitive file's words) are the program's real wording: each program
/// here, run on an invalid configuration, prints lines that are read as its
/// own (each marker names one such line), and so is Datum's header of the
/// lines it quotes.
#[test]
fn each_validators_own_lines_are_what_it_prints() {
    fn check(def: &ValidatorDef, verdict: Result<(), Rejection>, markers: &[&str]) {
        let Err(rejection) = verdict else {
            panic!("{}: accepted an invalid sample", def.name);
        };
        let own = |line: &str| {
            validators::own_line_holes(def.own_lines, line)
                .or_else(|| validators::own_line_holes(validators::quote::OWN_LINES, line))
                .is_some()
        };
        for marker in markers.iter().chain(&["offending line"]) {
            let lines: Vec<&str> = rejection
                .output
                .lines()
                .map(|l| l.trim_end_matches('\r'))
                .filter(|l| l.contains(marker))
                .collect();
            assert!(
                !lines.is_empty(),
                "{}: no line holds {marker:?} in:\n{}",
                def.name,
                rejection.output
            );
            for line in lines {
                assert!(
                    own(line),
                    "{}: {line:?} is not one of its own lines",
                    def.name
                );
            }
        }
    }
    let staged = [
        (
            "sshd",
            "/etc/ssh/sshd_config",
            0o600,
            "Port 22\nNoSuchDirective yes\n",
            &["Bad configuration option", "terminating"][..],
        ),
        (
            "sudoers",
            "/etc/sudoers.d/ops",
            0o440,
            "%ops ALL=(root /usr/bin/apt-get\n",
            &["syntax error"][..],
        ),
        (
            "sudoers",
            "/etc/sudoers.d/ops",
            0o440,
            "Defaults datum_no_such_default\n",
            &["unknown defaults entry"][..],
        ),
        (
            "systemd-unit",
            "/etc/systemd/system/datum-test.service",
            0o644,
            "[Unit]\nDescription=x\nDatumNoSuchKey=1\n[Service]\nExecStart=relative/path\n",
            &[
                "Unknown key",
                "Neither a valid executable name",
                "fatal error",
                "bad unit file setting",
            ][..],
        ),
        (
            "nftables",
            "/etc/nftables.conf",
            0o644,
            "table inet datum_test {\n  chain c {\n    tcp dport 22 acept\n  }\n}\n",
            &["syntax error, unexpected"][..],
        ),
        (
            "nftables",
            "/etc/nftables.conf",
            0o644,
            "table inet datum_test {\n  chain c {\n    datumnosuch 22 accept\n  }\n}\n",
            &["No symbol type information"][..],
        ),
        (
            "haproxy",
            "/etc/haproxy/haproxy.cfg",
            0o644,
            "global\n  no_such_keyword 1\n",
            &[
                "haproxy version is",
                "path to executable",
                "unknown keyword",
                "Error(s) found",
                "Fatal errors",
            ][..],
        ),
        (
            "logrotate",
            "/etc/logrotate.d/app",
            0o644,
            "/nonexistent/datum/app.log {\n  rotate notanumber\n}\n",
            &[
                "debug mode does nothing",
                "reading config file",
                "bad rotation count",
                "found error in",
                "log configs",
                "Handling",
            ][..],
        ),
    ];
    for (name, declared, mode, invalid, markers) in staged {
        let Some(def) = require(name) else {
            continue;
        };
        check(def, run_staged(def, declared, invalid, mode), markers);
    }
    // haproxy's exit 2 (no listener) quotes no line: its own line alone.
    if let Some(def) = require("haproxy") {
        let Err(r) = run_staged(
            def,
            "/etc/haproxy/haproxy.cfg",
            "global\n  maxconn 10\n",
            0o644,
        ) else {
            panic!("haproxy: a configuration without listener accepted");
        };
        let line = r.output.lines().find(|l| l.contains("no listener"));
        assert!(
            line.is_some_and(|l| validators::own_line_holes(def.own_lines, l).is_some()),
            "{}",
            r.output
        );
    }
    if let Some(def) = require("nginx") {
        let bad = "server {\n  listen 127.0.0.1:8099;\n  datum_no_such_directive on;\n}\n";
        check(
            def,
            run_group(def, &nginx_root(bad)),
            &["unknown directive", "test failed"],
        );
    }
    if let Some(def) = require("apache2") {
        check(
            def,
            run_group(def, &apache_root("DatumNoSuchDirective on\n")),
            &[
                "Syntax error on line",
                "Invalid command",
                "' failed.",
                "error log may have",
            ],
        );
    }
}

// ---------------------------------------------------------------------------
// Every validator that runs a program, in its sandbox: a configuration that
// names log, pid and temporary paths in a watched folder leaves nothing
// there, and the verdict is the one the validator gives without the sandbox.

/// Whether the sandbox can be built here (root); otherwise the sandbox tests
/// say they were skipped, unless CI requires validators.
fn sandbox_available() -> bool {
    if matches!(datum_host::sandbox::isolation(), Ok(Isolation::Sandboxed)) {
        return true;
    }
    assert!(
        std::env::var_os("DATUM_VALIDATORS_REQUIRED").is_none(),
        "the validator sandbox needs root, and DATUM_VALIDATORS_REQUIRED says the validators must be tested"
    );
    println!("skipped: the validator sandbox needs root");
    false
}

/// The verdict as the test compares it: accepted, or the kind of "no".
fn verdict(v: &Result<(), Rejection>) -> String {
    match v {
        Ok(()) => "accepted".to_owned(),
        Err(r) => match r.kind {
            RejectionKind::Invalid { .. } => "invalid".to_owned(),
            RejectionKind::ValidatorError { status } => {
                format!("validator error {status:?}: {}", r.output)
            }
            RejectionKind::TimedOut => "timed out".to_owned(),
            RejectionKind::NotRun => format!("not run: {}", r.output),
            RejectionKind::MissingBinary { .. } => "missing".to_owned(),
        },
    }
}

/// A folder the configuration names for its logs, pid file and temporary
/// folders.
struct Watched(TempDir);

impl Watched {
    fn new() -> Self {
        Watched(tempfile::tempdir().unwrap())
    }

    fn path(&self) -> String {
        self.0.path().canonicalize().unwrap().display().to_string()
    }

    fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.0.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

/// Runs `check` sandboxed and then unsandboxed: nothing appears in the
/// watched folder or under the root in the sandboxed run, and the verdicts
/// agree (and are `want`). Returns what the unsandboxed run left behind.
fn same_verdict_without_trace(
    name: &str,
    watched: &Watched,
    root: &Root,
    want: &str,
    check: impl Fn(Isolation) -> Result<(), Rejection>,
) -> Vec<String> {
    let before = snapshot(root.path());
    let sandboxed = check(Isolation::Sandboxed);
    assert_same_tree(
        &before,
        &snapshot(root.path()),
        &format!("{name} (sandboxed)"),
    );
    assert_eq!(
        watched.entries(),
        Vec::<String>::new(),
        "{name} left a trace in the watched folder from inside the sandbox"
    );
    let unsandboxed = check(Isolation::Unsandboxed);
    assert_eq!(
        verdict(&sandboxed),
        verdict(&unsandboxed),
        "{name}: the sandbox changed the verdict"
    );
    assert_eq!(verdict(&sandboxed), want, "{name}");
    watched.entries()
}

/// A file validator on a staged copy naming paths in `watched`, both ways.
fn file_in_sandbox(name: &str, declared: &str, mode: u32, valid: &str, invalid: &str) {
    let Some(def) = require(name) else {
        return;
    };
    if !sandbox_available() {
        return;
    }
    for (text, want) in [(valid, "accepted"), (invalid, "invalid")] {
        let watched = Watched::new();
        let text = text.replace("{w}", &watched.path());
        let root = Root::new();
        root.write(declared, "# the live file\n", mode);
        let target = Path::new(declared);
        let staged = root.write(
            &format!(
                "{}/.datum.stage.t3st/{}",
                target.parent().unwrap().display(),
                target.file_name().unwrap().to_string_lossy()
            ),
            &text,
            mode,
        );
        let host = root.host();
        same_verdict_without_trace(name, &watched, &root, want, |isolation| {
            validate_staged_in(def, &host, &staged_at(&staged, &text, mode), isolation)
        });
    }
}

#[test]
fn sshd_in_the_sandbox() {
    file_in_sandbox(
        "sshd",
        "/etc/ssh/sshd_config",
        0o600,
        "Port 22\nPidFile {w}/sshd.pid\nAuthorizedKeysFile {w}/keys\nBanner {w}/banner\nChrootDirectory {w}/jail\n",
        "Port 22\nPidFile {w}/sshd.pid\nNoSuchDirective yes\n",
    );
}

#[test]
fn sudoers_in_the_sandbox() {
    file_in_sandbox(
        "sudoers",
        "/etc/sudoers.d/ops",
        0o440,
        "Defaults logfile={w}/sudo.log\nDefaults iolog_dir={w}/io\nDefaults timestampdir={w}/ts\n%ops ALL=(root) /usr/bin/true\n",
        "Defaults logfile={w}/sudo.log\n%ops ALL=(root /usr/bin/true\n",
    );
}

#[test]
fn systemd_unit_in_the_sandbox() {
    file_in_sandbox(
        "systemd-unit",
        "/etc/systemd/system/datum-test.service",
        0o644,
        "[Unit]\nDescription=datum test\n\n[Service]\nExecStart=/bin/true\nPIDFile={w}/unit.pid\nStandardOutput=append:{w}/out.log\nWorkingDirectory={w}\n",
        "[Service\nExecStart=/bin/true\nPIDFile={w}/unit.pid\n",
    );
}

#[test]
fn nftables_in_the_sandbox() {
    // nft names no files to write; its check runs in the sandbox's own
    // network namespace and must judge the same.
    file_in_sandbox(
        "nftables",
        "/etc/nftables.conf",
        0o644,
        "table inet datum_test {\n  chain input {\n    type filter hook input priority 0; policy accept;\n    iifname \"lo\" accept\n  }\n}\n",
        "table inet datum_test {\n  chain input {\n    no_such_statement here;\n  }\n}\n",
    );
}

#[test]
fn haproxy_in_the_sandbox() {
    file_in_sandbox(
        "haproxy",
        "/etc/haproxy/haproxy.cfg",
        0o644,
        "global\n  maxconn 100\n  pidfile {w}/haproxy.pid\n  stats socket {w}/admin.sock mode 660\n  log /dev/log local0\ndefaults\n  mode http\n  timeout connect 1s\n  timeout client 1s\n  timeout server 1s\nfrontend web\n  bind 127.0.0.1:8089\n  default_backend app\nbackend app\n  server a1 127.0.0.1:8090\n",
        "global\n  pidfile {w}/haproxy.pid\n  no_such_keyword 1\n",
    );
}

#[test]
fn logrotate_in_the_sandbox() {
    file_in_sandbox(
        "logrotate",
        "/etc/logrotate.d/app",
        0o644,
        "{w}/app.log {\n  daily\n  rotate 2\n  missingok\n  compress\n  olddir {w}/old\n  createolddir 0755 root root\n}\n",
        "{w}/app.log {\n  rotate notanumber\n}\n",
    );
}

/// nginx's whole configuration naming its pid file, logs and temporary
/// folders in `watched`, none of which exists yet.
fn nginx_watched_root(watched: &Watched, site: &str, extra_main: &str) -> Root {
    let root = Root::new();
    let w = watched.path();
    let r = root.path().display().to_string();
    root.write(
        "/etc/nginx/nginx.conf",
        &format!(
            "{extra_main}pid {w}/nginx.pid;\nerror_log {w}/error.log;\nevents {{ worker_connections 64; }}\nhttp {{\n  access_log {w}/access.log;\n  client_body_temp_path {w}/body;\n  proxy_temp_path {w}/proxy;\n  fastcgi_temp_path {w}/fastcgi;\n  uwsgi_temp_path {w}/uwsgi;\n  scgi_temp_path {w}/scgi;\n  include {r}/etc/nginx/sites-enabled/*.conf;\n}}\n"
        ),
        0o644,
    );
    root.write("/etc/nginx/sites-enabled/shop.conf", site, 0o644);
    root
}

#[test]
fn nginx_in_the_sandbox_may_bind_a_privileged_port() {
    // `nginx -t` binds the ports it listens on, in the view's own network
    // namespace; with the capabilities d1f7309 dropped, a site on port 80 (any
    // real one) failed "bind() to 0.0.0.0:80 failed (13: Permission denied)".
    let Some(def) = require("nginx") else {
        return;
    };
    if !sandbox_available() {
        return;
    }
    let watched = Watched::new();
    let site =
        "server {\n  listen 80;\n  listen [::]:443;\n  location / { return 200 \"ok\"; }\n}\n";
    let root = nginx_watched_root(&watched, site, "");
    let verdict = validate_group_in(def, &root.host(), Isolation::Sandboxed, &Sandbox::new());
    assert!(verdict.is_ok(), "{verdict:?}");
    assert_eq!(watched.entries(), Vec::<String>::new());
}

#[test]
fn nginx_in_the_sandbox() {
    let Some(def) = require("nginx") else {
        return;
    };
    if !sandbox_available() {
        return;
    }
    let good = "server {\n  listen 127.0.0.1:8099;\n  location / { return 200 \"ok\"; }\n}\n";
    let bad = "server {\n  listen 127.0.0.1:8099;\n  datum_no_such_directive on;\n}\n";
    for (site, want) in [(good, "accepted"), (bad, "invalid")] {
        let watched = Watched::new();
        let root = nginx_watched_root(&watched, site, "");
        let host = root.host();
        let left = same_verdict_without_trace("nginx", &watched, &root, want, |isolation| {
            validate_group_in(def, &host, isolation, &Sandbox::new())
        });
        // Without the sandbox nginx -t does create what a valid
        // configuration names: the watched folder is a real test.
        if want == "accepted" {
            assert!(
                left.contains(&"error.log".to_owned()) && left.contains(&"body".to_owned()),
                "nginx -t left no trace even unsandboxed: {left:?}"
            );
        }
    }
}

#[test]
fn nginx_refuses_a_module_that_no_package_installed() {
    let Some(def) = require("nginx") else {
        return;
    };
    if !sandbox_available() {
        return;
    }
    let watched = Watched::new();
    let site = "server {\n  listen 127.0.0.1:8099;\n}\n";
    let probe = Root::new();
    let module = probe.write("/evil/ngx_evil.so", "\u{7f}ELF not really\n", 0o755);
    let root = nginx_watched_root(
        &watched,
        site,
        &format!("load_module {};\n", module.display()),
    );
    let err = validate_group(def, &root.host()).unwrap_err();
    assert!(matches!(err.kind, RejectionKind::Invalid { .. }), "{err:?}");
    assert!(err.output.contains("load_module"), "{}", err.output);
    assert!(
        err.output.contains("not a file of an installed package"),
        "{}",
        err.output
    );
    assert!(err.output.contains("nginx.conf:1"), "{}", err.output);
    assert_eq!(watched.entries(), Vec::<String>::new());

    // Debian's own module (a file of an installed package) still loads.
    let packaged = Path::new("/usr/share/nginx/modules/ngx_http_echo_module.so");
    if packaged.exists() {
        let root = nginx_watched_root(
            &watched,
            site,
            "load_module modules/ngx_http_echo_module.so;\n",
        );
        assert_accepts(validate_group(def, &root.host()), "nginx");
    }
}

#[test]
fn apache2_refuses_a_library_that_no_package_installed() {
    // apache2ctl -t loads what LoadModule and LoadFile name while it reads
    // the configuration: a library's constructor ran as root in the
    // validator (and a root process can leave the view), from `datum plan`.
    let Some(def) = require("apache2") else {
        return;
    };
    if !sandbox_available() {
        return;
    }
    let probe = Root::new();
    let library = probe.write("/evil/mod_evil.so", "\u{7f}ELF not really\n", 0o755);
    for line in [
        format!("LoadModule evil_module {}\n", library.display()),
        format!(
            "<IfModule nothing>\nLoadFile {}\n</IfModule>\n",
            library.display()
        ),
    ] {
        let watched = Watched::new();
        let root = apache_watched_root(&watched, &line);
        let err = validate_group(def, &root.host()).unwrap_err();
        assert!(matches!(err.kind, RejectionKind::Invalid { .. }), "{err:?}");
        assert!(
            err.output.contains("not a file of an installed package"),
            "{line}: {}",
            err.output
        );
        assert!(err.output.contains("site.conf:"), "{}", err.output);
        assert_eq!(watched.entries(), Vec::<String>::new());
    }
}

/// Apache's configuration naming its pid file and logs in `watched`.
fn apache_watched_root(watched: &Watched, extra: &str) -> Root {
    let root = Root::new();
    let w = watched.path();
    root.write(
        "/etc/apache2/apache2.conf",
        &format!(
            "ServerName localhost\nListen 127.0.0.1:8098\nPidFile {w}/apache2.pid\nErrorLog {w}/error.log\nMutex file:{w} default\nLoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so\nCustomLog {w}/access.log combined\nIncludeOptional conf-enabled/*.conf\n"
        ),
        0o644,
    );
    root.write("/etc/apache2/conf-enabled/site.conf", extra, 0o644);
    root
}

#[test]
fn apache2_in_the_sandbox() {
    let Some(def) = require("apache2") else {
        return;
    };
    if !sandbox_available() {
        return;
    }
    for (extra, want) in [
        ("Timeout 30\n", "accepted"),
        ("DatumNoSuchDirective on\n", "invalid"),
    ] {
        let watched = Watched::new();
        let root = apache_watched_root(&watched, extra);
        let host = root.host();
        same_verdict_without_trace("apache2", &watched, &root, want, |isolation| {
            validate_group_in(def, &host, isolation, &Sandbox::new())
        });
    }
}

#[test]
fn apache2_never_runs_an_envvars_a_group_lays_into_the_view() {
    // apache2ctl sources /etc/apache2/envvars as shell before `apache2 -t`:
    // a group that lays the repository's envvars over the live one (a
    // `--root /` plan with an envvars File in the group) ran it as root.
    let Some(def) = require("apache2") else {
        return;
    };
    if !sandbox_available() {
        return;
    }
    let watched = Watched::new();
    let root = apache_watched_root(&watched, "Timeout 30\n");
    let host = root.host();
    let mut view = Sandbox::new();
    view.place(
        Path::new("/etc/apache2/envvars"),
        b"echo DATUM-ENVVARS-RAN >&2\nexit 3\n".to_vec(),
        0o644,
        None,
        None,
    );
    let verdict = validate_group_in(def, &host, Isolation::Sandboxed, &view);
    assert!(verdict.is_ok(), "{verdict:?}");
    assert_eq!(watched.entries(), Vec::<String>::new());
}

#[test]
fn a_group_is_validated_with_files_laid_over_their_live_paths() {
    // What group validation before activation needs (issue 14): the staged
    // site laid over its live path in the view, the machine untouched.
    let Some(def) = require("nginx") else {
        return;
    };
    if !sandbox_available() {
        return;
    }
    let watched = Watched::new();
    let good = "server {\n  listen 127.0.0.1:8099;\n}\n";
    let root = nginx_watched_root(&watched, good, "");
    let host = root.host();
    let live = root.live("/etc/nginx/sites-enabled/shop.conf");
    let before = snapshot(root.path());
    let mut view = Sandbox::new();
    view.place(
        &live,
        b"server {\n  http2_no_such on;\n}\n".to_vec(),
        0o644,
        None,
        None,
    );
    let verdict = validate_group_in(def, &host, Isolation::Sandboxed, &view);
    assert!(
        matches!(
            verdict,
            Err(Rejection {
                kind: RejectionKind::Invalid { .. },
                ..
            })
        ),
        "{verdict:?}"
    );
    assert_same_tree(&before, &snapshot(root.path()), "a placed file");
    assert_eq!(fs::read_to_string(&live).unwrap(), good);
    assert_eq!(watched.entries(), Vec::<String>::new());
}

#[test]
fn a_staged_file_is_never_laid_over_a_program_or_what_the_loader_reads() {
    // `datum plan` lays its scratch copy at the target's own path in the
    // view: a repository File at /usr/sbin/sshd with `validate: sshd` was
    // the program the validator then ran, as root, and printed /etc/shadow
    // into the plan. Nothing a repository declares may be laid where a
    // program, a library or the dynamic loader's configuration is read from.
    let Some(def) = require("sshd") else {
        return;
    };
    if !sandbox_available() {
        return;
    }
    let host = Host::with_name("/", "test-host");
    let script = "#!/bin/sh\necho DATUM-PLACED-PROGRAM-RAN\nexit 1\n";
    let preload = "/nonexistent/datum-placed-preload.so\n";
    let elf = fs::read("/bin/true").unwrap();
    let elf_text = String::from_utf8_lossy(&elf).into_owned();
    for (path, text, mode, rule) in [
        ("/usr/sbin/sshd", script, 0o755, "/usr"),
        ("/etc/ld.so.preload", preload, 0o644, "/etc/ld.so.preload"),
        (
            "/etc/ssl/openssl.cnf",
            "openssl_conf = x\n",
            0o644,
            "OpenSSL",
        ),
        ("/etc/alternatives/awk", script, 0o755, "/etc/alternatives"),
        ("/etc/ssh/sshd_config.d/x.conf", &elf_text, 0o644, "ELF"),
    ] {
        let staged = Staged {
            path: Path::new(path),
            bytes: if rule == "ELF" { &elf } else { text.as_bytes() },
            mode,
            uid: None,
            gid: None,
        };
        let verdict = validate_staged_in(def, &host, &staged, Isolation::Sandboxed);
        let Err(rejection) = verdict else {
            panic!("{path}: accepted");
        };
        let said = format!("{} {}", rejection.summary(), rejection.output);
        assert!(
            !said.contains("DATUM-PLACED-PROGRAM-RAN") && !said.contains("cannot be preloaded"),
            "{path}: the placed file was run or loaded: {said}"
        );
        assert!(
            matches!(rejection.kind, RejectionKind::NotRun)
                && said.contains(path)
                && said.contains("never laid into a validator's view")
                && said.contains(rule),
            "{path}: {said}"
        );
    }
}
