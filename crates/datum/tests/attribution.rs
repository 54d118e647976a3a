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
        let mut child = self
            .datum(&["agent", "--listen", "127.0.0.1:0"])
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
