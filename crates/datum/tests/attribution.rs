//! Who changed it, end to end: the built `datum agent` on a temporary root
//! with a class that asks for attribution (`attribute: true`) and one that
//! does not, real writers (another user in a new login session through
//! `setsid` + `setpriv`, with its login uid written to `/proc/self/loginuid`;
//! Datum's own apply), and `datum check --output json` reading back what the
//! agent recorded in the state store.
//!
//! fanotify and setpriv need root; CI runs as root. Not root: "skipped".

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is the test failing, with its message"
)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

const DATUM: &str = env!("CARGO_BIN_EXE_datum");

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

struct Estate {
    dir: TempDir,
}

impl Estate {
    /// `watched` asks for attribution, `plain` is watched without it; one
    /// file each, writable by anyone (so another user can edit them).
    fn new(watched_policy: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = Self { dir };
        e.write(
            "repo/datum.yaml",
            &format!(
                "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {{}}\n\
                 classes:\n  watched: {{interval: 1h, watch: true, attribute: true, policy: {watched_policy}}}\n  plain: {{interval: 1h, watch: true}}\n"
            ),
        );
        e.write(
            "repo/base/files.yaml",
            "datum: v1alpha1\ntype: File\nname: sshd\nclass: watched\ndesired:\n  path: /etc/app/sshd.conf\n  mode: \"0666\"\n  content: \"PermitRootLogin no\\n\"\n\
             ---\ndatum: v1alpha1\ntype: File\nname: motd\nclass: plain\ndesired:\n  path: /etc/other/motd\n  mode: \"0666\"\n  content: \"hello\\n\"\n",
        );
        e.write(
            "root/etc/datum/host.yaml",
            "name: attribution-test\nlabels: {}\n",
        );
        for d in ["root", "root/etc", "root/etc/app", "root/etc/other"] {
            std::fs::create_dir_all(e.path(d)).unwrap();
            std::fs::set_permissions(e.path(d), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let out = e.datum(&["apply"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "apply: {out:?}");
        e
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn datum(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(DATUM);
        cmd.arg("--repo")
            .arg(self.path("repo"))
            .arg("--root")
            .arg(self.path("root"))
            .arg("--color")
            .arg("never")
            .arg("--lock-timeout")
            .arg("20s")
            .args(args)
            .env_remove("DATUM_REPO")
            .env_remove("DATUM_ROOT");
        cmd
    }

    fn start(&self) -> Agent {
        self.start_with(self.datum(&["agent", "--listen", "127.0.0.1:0"]))
    }

    /// The agent as root without `CAP_SYS_ADMIN` (through `setpriv`), so
    /// that fanotify cannot be used.
    fn start_without_fanotify(&self) -> Agent {
        let agent = self.datum(&["agent", "--listen", "127.0.0.1:0"]);
        let mut cmd = Command::new("setpriv");
        cmd.args(["--inh-caps=-sys_admin", "--bounding-set=-sys_admin", "--"])
            .arg(agent.get_program())
            .args(agent.get_args())
            .env_remove("DATUM_REPO")
            .env_remove("DATUM_ROOT");
        self.start_with(cmd)
    }

    fn start_with(&self, mut cmd: Command) -> Agent {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let agent = Agent { child, log };
        agent.wait_log("serving /metrics");
        agent
    }

    /// `datum check --output json`, its findings by subject.
    fn findings(&self) -> Vec<Value> {
        let out = self.datum(&["--output", "json", "check"]).output().unwrap();
        let json: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("check JSON: {e}: {out:?}"));
        assert_eq!(json["format_version"], "1");
        json["findings"].as_array().unwrap().clone()
    }

    fn finding(&self, subject: &str) -> Option<Value> {
        self.findings()
            .into_iter()
            .find(|f| f["subject"] == subject)
    }
}

struct Agent {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    fn wait_log(&self, needle: &str) {
        let found = wait(Duration::from_secs(20), || {
            self.log
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(needle))
                .then_some(())
        });
        assert!(
            found.is_some(),
            "agent never logged {needle:?}: {}",
            self.log.lock().unwrap().join("\n")
        );
    }

    /// Waits for a line containing `needle` after the last line containing
    /// `after`.
    fn wait_log_after(&self, after: &str, needle: &str) {
        let found = wait(Duration::from_secs(20), || {
            let log = self.log.lock().unwrap();
            let start = log.iter().rposition(|l| l.contains(after))?;
            log[start..]
                .iter()
                .any(|l| l.contains(needle))
                .then_some(())
        });
        assert!(
            found.is_some(),
            "agent never logged {needle:?} after {after:?}: {}",
            self.log.lock().unwrap().join("\n")
        );
    }

    /// The inode numbers the agent's fanotify groups mark (from
    /// `/proc/PID/fdinfo`).
    fn marked_inodes(&self) -> Vec<u64> {
        let pid = self.child.id();
        let mut out = Vec::new();
        for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
        {
            let target = std::fs::read_link(e.path()).unwrap_or_default();
            if target.to_string_lossy() != "anon_inode:[fanotify]" {
                continue;
            }
            let info = std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                e.file_name().to_string_lossy()
            ))
            .unwrap();
            for line in info.lines().filter(|l| l.starts_with("fanotify ino:")) {
                let hex = line["fanotify ino:".len()..]
                    .split_whitespace()
                    .next()
                    .unwrap();
                out.push(u64::from_str_radix(hex, 16).unwrap());
            }
        }
        // A group may be open more than once (the reader waits on a copy).
        out.sort_unstable();
        out.dedup();
        out
    }
}

fn wait<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if t0.elapsed() > within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Appends to `file` as `nobody` (uid 65534) in a new session whose login
/// uid is 65534, staying a few seconds so that the agent can read it.
fn edit_as_nobody(file: &Path) -> Child {
    let script = format!(
        "echo 65534 > /proc/self/loginuid && exec setpriv --reuid 65534 --regid 65534 --clear-groups sh -c 'echo edited >> {} && sleep 5'",
        file.display()
    );
    Command::new("setsid")
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn an_edit_by_another_user_in_a_login_session_is_attributed_and_datum_apply_is_not_drift() {
    if !is_root() {
        println!("skipped: fanotify and setpriv need root");
        return;
    }
    let e = Estate::new("report");
    let agent = e.start();
    agent.wait_log("attribution: reading who changes the files of class(es) watched");

    // Only the attributing class's directory is marked.
    let marked = agent.marked_inodes();
    let ino = |rel: &str| std::fs::metadata(e.path(rel)).unwrap().ino();
    assert_eq!(marked, [ino("root/etc/app")], "marks: {marked:?}");

    let sshd = e.path("root/etc/app/sshd.conf");
    let motd = e.path("root/etc/other/motd");
    let mut writers = vec![edit_as_nobody(&sshd), edit_as_nobody(&motd)];
    let finding = wait(Duration::from_secs(15), || {
        e.finding("File[sshd]")
            .filter(|f| !f["changed_by"].as_array().unwrap().is_empty())
    })
    .unwrap_or_else(|| panic!("no attributed finding; {:?}", e.findings()));
    for w in &mut writers {
        let _ = w.kill();
        let _ = w.wait();
    }
    let by = &finding["changed_by"][0];
    assert_eq!(by["kind"], "person", "{by}");
    assert_eq!(by["uid"], 65534, "{by}");
    assert_eq!(by["user"], "nobody", "{by}");
    assert_eq!(by["login_uid"], 65534, "{by}");
    assert!(by["session"].as_u64().is_some(), "{by}");
    assert!(
        by["via"].as_str().unwrap().starts_with("login session "),
        "{by}"
    );
    assert!(
        by["process"].as_str().unwrap().contains("echo edited >>"),
        "{by}"
    );
    assert_eq!(by["path"], sshd.display().to_string());
    // Every writer is a person here: no event of Datum's own.
    assert!(
        finding["changed_by"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["kind"] == "person")
    );

    // The class that did not ask: drift, and nobody named.
    let plain = e.finding("File[motd]").expect("motd drifted");
    assert_eq!(plain["changed_by"], serde_json::json!([]));

    // The human report says it too.
    let human = e.datum(&["check"]).output().unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("changed by: nobody (uid 65534; login nobody, session "),
        "{text}"
    );

    // Datum's own apply puts both back: that is not drift, and once the
    // file is clean its writers are forgotten.
    let out = e.datum(&["apply"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "apply: {out:?}");
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(e.findings(), Vec::<Value>::new());
    let again = e.datum(&["--output", "json", "check"]).output().unwrap();
    assert_eq!(again.status.code(), Some(0), "{again:?}");
}

/// With fanotify unusable (no `CAP_SYS_ADMIN`), a watched change's writer
/// comes from the real audit log when auditd runs and watches the folder:
/// here a writer that has long exited by the time anything is read.
#[test]
fn with_fanotify_unusable_the_audit_log_names_a_gone_writer() {
    if !is_root() {
        println!("skipped: setpriv and auditctl need root");
        return;
    }
    let auditd = Command::new("pgrep")
        .args(["-x", "auditd"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !auditd {
        assert!(
            std::env::var_os("DATUM_AUDIT_REQUIRED").is_none(),
            "DATUM_AUDIT_REQUIRED is set but auditd is not running"
        );
        println!("skipped: auditd is not running (scripts/auditd start)");
        return;
    }
    let e = Estate::new("report");
    let dir = e.path("root/etc/app");
    let key = format!("datum-cli-test-{}", std::process::id());
    let rule = |op: &str| {
        Command::new("auditctl")
            .arg(op)
            .arg(&dir)
            .args(["-p", "wa", "-k", &key])
            .status()
            .is_ok_and(|s| s.success())
    };
    assert!(rule("-w"), "auditctl -w failed");
    struct Unwatch<F: Fn(&str) -> bool>(F);
    impl<F: Fn(&str) -> bool> Drop for Unwatch<F> {
        fn drop(&mut self) {
            (self.0)("-W");
        }
    }
    let _unwatch = Unwatch(rule);
    let agent = e.start_without_fanotify();
    agent.wait_log("fanotify is unavailable");

    let sshd = e.path("root/etc/app/sshd.conf");
    let script = format!(
        "echo 65534 > /proc/self/loginuid && exec setpriv --reuid 65534 --regid 65534 --clear-groups sh -c 'echo edited >> {}'",
        sshd.display()
    );
    let status = Command::new("setsid")
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let finding = wait(Duration::from_secs(15), || {
        e.finding("File[sshd]")
            .filter(|f| !f["changed_by"].as_array().unwrap().is_empty())
    })
    .unwrap_or_else(|| panic!("no attributed finding; {:?}", e.findings()));
    drop(agent);
    let by = &finding["changed_by"][0];
    assert_eq!(by["kind"], "person", "{by}");
    assert_eq!(by["uid"], 65534, "{by}");
    assert_eq!(by["user"], "nobody", "{by}");
    assert_eq!(by["login_uid"], 65534, "{by}");
    let via = by["via"].as_str().unwrap();
    assert!(via.starts_with("login session "), "{by}");
    assert!(via.contains("; from audit event "), "{by}");
    assert!(
        by["process"].as_str().unwrap().contains("echo edited >>"),
        "{by}"
    );
    assert_eq!(by["path"], sshd.display().to_string());
}

/// A package `datum-attr-test` installing `/etc/app/pkg.conf` (a conffile)
/// with `content`, built with `dpkg-deb` in `dir`.
fn build_package(dir: &Path, content: &str) -> PathBuf {
    let tree = dir.join("pkg");
    std::fs::create_dir_all(tree.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(tree.join("etc/app")).unwrap();
    std::fs::write(
        tree.join("DEBIAN/control"),
        "Package: datum-attr-test\nVersion: 1.0\nArchitecture: all\nMaintainer: Datum tests <tests@invalid>\nDescription: a conffile for the attribution test\n",
    )
    .unwrap();
    std::fs::write(tree.join("DEBIAN/conffiles"), "/etc/app/pkg.conf\n").unwrap();
    std::fs::write(tree.join("etc/app/pkg.conf"), content).unwrap();
    let deb = dir.join("datum-attr-test.deb");
    let out = Command::new("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&tree)
        .arg(&deb)
        .output()
        .unwrap();
    assert!(out.status.success(), "dpkg-deb: {out:?}");
    deb
}

#[test]
fn rules_by_writer_quarantine_a_persons_edit_and_accept_a_package_upgrade() {
    if !is_root() {
        println!("skipped: fanotify and setpriv need root");
        return;
    }
    let e = Estate::new("revert");
    // The class says: a package upgrade is accepted, a person's edit held.
    e.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n\
         classes:\n  watched:\n    interval: 1h\n    watch: true\n    attribute: true\n    policy: revert\n    on_change_by: {package_manager: accept, person: quarantine}\n  plain: {interval: 1h, watch: true}\n",
    );
    e.write(
        "repo/base/pkg.yaml",
        "datum: v1alpha1\ntype: File\nname: pkg\nclass: watched\ndesired:\n  path: /etc/app/pkg.conf\n  content: \"packaged: 0\\n\"\n",
    );
    let out = e.datum(&["apply"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "apply: {out:?}");
    let schedule = e.datum(&["schedule"]).output().unwrap();
    let text = String::from_utf8_lossy(&schedule.stdout);
    assert!(
        text.contains("watched: writers attributed (fanotify, under datum agent); changes by package_manager → accept, person → quarantine; by anyone else: revert"),
        "{text}"
    );
    let agent = e.start();
    agent.wait_log("attribution: reading who changes");
    // The first full check must be over: an edit made while it runs can be
    // read by it before its writer is heard, and then the class's own
    // policy (revert) applies (seen under load).
    agent.wait_log("check (full) of all classes");

    // A person's edit: quarantined by the rule, not reverted.
    let sshd = e.path("root/etc/app/sshd.conf");
    let mut writer = edit_as_nobody(&sshd);
    agent.wait_log("attribution: File[sshd] modified by nobody (uid 65534; login nobody, session ");
    agent.wait_log_after("attribution: File[sshd]", "check (watch) of class watched");
    let _ = writer.kill();
    let _ = writer.wait();
    // Read back without acting on the class (`--class plain`): the
    // quarantine list is the host's.
    let out = e
        .datum(&["--output", "json", "check", "--class", "plain"])
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let quarantined = json["quarantined"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["target"] == "File[sshd]")
        .unwrap_or_else(|| {
            panic!(
                "not quarantined: {json}\nagent log:\n{}",
                agent.log.lock().unwrap().join("\n")
            )
        });
    let reason = quarantined["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("by policy: drift by login session "),
        "{reason}"
    );
    assert!(std::fs::read_to_string(&sshd).unwrap().contains("edited"));

    // dpkg -i of a package replacing the conffile: accepted, named as the
    // package manager.
    let admin = e.path("root/var/lib/dpkg");
    std::fs::create_dir_all(admin.join("info")).unwrap();
    std::fs::create_dir_all(admin.join("updates")).unwrap();
    std::fs::write(admin.join("status"), "").unwrap();
    let deb = build_package(e.dir.path(), "packaged: 1\n");
    let out = Command::new("dpkg")
        .arg(format!("--root={}", e.path("root").display()))
        .args(["--force-confnew", "--force-script-chrootless", "-i"])
        .arg(&deb)
        .output()
        .unwrap();
    assert!(out.status.success(), "dpkg -i: {out:?}");
    agent.wait_log(
        "attribution: File[pkg] moved into place by root (uid 0) via dpkg (package upgrade)",
    );
    agent.wait_log_after("attribution: File[pkg]", "check (watch) of class watched");
    // Accepted, not reverted: the packaged content stays and is no longer
    // drift.
    assert_eq!(
        std::fs::read_to_string(e.path("root/etc/app/pkg.conf")).unwrap(),
        "packaged: 1\n"
    );
    let open: Vec<Value> = e
        .findings()
        .into_iter()
        .filter(|f| f["subject"] == "File[pkg]")
        .collect();
    assert_eq!(open, Vec::<Value>::new());
}

// A change made by a transient systemd unit (`systemd-run`), inside the test
// bed (a real systemd as PID 1): the writer is the unit, named from its
// cgroup.
datum_testkit::testbed_test!(a_change_by_a_transient_systemd_unit_names_the_unit, {
    let e = Estate::new("report");
    let agent = e.start();
    agent.wait_log("attribution: reading who changes");
    let sshd = e.path("root/etc/app/sshd.conf");
    let unit = "datum-attribution-writer";
    let out = Command::new("systemd-run")
        .arg(format!("--unit={unit}"))
        .args(["--service-type=exec", "--collect", "sh", "-c"])
        .arg(format!("echo by-unit >> {} && sleep 5", sshd.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "systemd-run: {out:?}");
    agent.wait_log(&format!(
        "attribution: File[sshd] modified by root (uid 0) via systemd unit {unit}.service"
    ));
    let finding = wait(Duration::from_secs(15), || {
        e.finding("File[sshd]")
            .filter(|f| !f["changed_by"].as_array().unwrap().is_empty())
    })
    .unwrap_or_else(|| panic!("no attributed finding; {:?}", e.findings()));
    let _ = Command::new("systemctl").args(["stop", unit]).status();
    let by = &finding["changed_by"][0];
    assert_eq!(by["kind"], "unit", "{by}");
    assert_eq!(by["unit"], format!("{unit}.service"), "{by}");
    assert!(by.get("login_uid").is_none(), "{by}");
});

/// A writer's command line often holds what it wrote (`sed -i
/// 's/old/NEW/' FILE`, `sh -c 'echo pw > FILE'`). For a sensitive File it
/// was shown whole: in the agent's log (with the resource's name, which the
/// loop otherwise never logs), in the state store's writers, and in `datum
/// check`'s human, JSON and Markdown reports. A sensitive resource's
/// writers are now recorded and logged without their command line (the
/// executable names the program), and the log names no such resource.
#[test]
fn a_sensitive_files_writer_is_recorded_without_its_command_line() {
    if !is_root() {
        println!("skipped: fanotify needs root");
        return;
    }
    const CANARY: &str = "CANARY-written-by-sh-6c2e";
    let e = Estate::new("report");
    let files = std::fs::read_to_string(e.path("repo/base/files.yaml")).unwrap();
    e.write(
        "repo/base/files.yaml",
        &files.replacen("class: watched\n", "class: watched\nsensitive: true\n", 1),
    );
    let out = e.datum(&["apply"]).output().unwrap();
    assert!(out.status.success(), "apply: {out:?}");
    let agent = e.start();
    agent.wait_log("attribution: reading who changes the files of class(es) watched");
    let sshd = e.path("root/etc/app/sshd.conf");
    // The shell writes the file itself and stays a while, so it is read.
    let mut writer = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo 'PermitRootLogin {CANARY}' > {} && sleep 5",
            sshd.display()
        ))
        // Its `sleep` outlives the kill of the shell: with the test's own
        // output it kept the test's pipes open (nextest: LEAK).
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let finding = wait(Duration::from_secs(15), || {
        e.finding("File[sshd]")
            .filter(|f| !f["changed_by"].as_array().unwrap().is_empty())
    })
    .unwrap_or_else(|| panic!("no attributed finding; {:?}", e.findings()));
    let _ = writer.kill();
    let _ = writer.wait();
    let mut all = finding.to_string();
    for args in [&["check"][..], &["--output", "markdown", "check"]] {
        let out = e.datum(args).output().unwrap();
        all.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    assert!(
        all.contains("/usr/bin/"),
        "the writer is still named: {all}"
    );
    assert!(!all.contains(CANARY), "the command line was shown: {all}");
    let log = agent.log.lock().unwrap().join("\n");
    assert!(!log.contains(CANARY), "{log}");
    assert!(!log.contains("File[sshd]"), "{log}");
    assert!(log.contains("attribution: a sensitive resource"), "{log}");
    for entry in std::fs::read_dir(e.path("root/var/lib/datum")).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().starts_with("state.db") {
            let bytes = std::fs::read(entry.path()).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(CANARY),
                "{:?}",
                entry.path()
            );
        }
    }
}
