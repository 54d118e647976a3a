//! Real fanotify marks on a temporary directory, real writers: this process,
//! another user in a new login session (`setpriv`, login uid written to
//! `/proc/self/loginuid`), and a writer that is gone before it is read:
//! found in the real audit log when auditd runs (scripts/auditd), unknown
//! with the reason when it does not or has no record.
//! They need root (fanotify, setpriv, auditctl); CI runs as root.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use datum_core::WriterKind;

use super::*;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A directory anyone may write in, marked.
fn marked() -> (tempfile::TempDir, PathBuf, Attributor) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("etc");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let a = Attributor::start(&BTreeSet::from([dir.clone()]), Own::current()).unwrap();
    assert_eq!(a.dirs().count(), 1, "{:?}", a.unmarked());
    (tmp, dir, a)
}

/// Events for `path` read within a few seconds.
fn writers_of(a: &mut Attributor, path: &Path) -> Vec<ChangedBy> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut found = Vec::new();
    while Instant::now() < deadline {
        a.wait(Duration::from_millis(100));
        found.extend(
            a.read_pending()
                .into_iter()
                .filter(|e| e.path == path)
                .map(|e| e.writer),
        );
        if !found.is_empty() {
            break;
        }
    }
    found
}

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !path.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `nobody` in a new session whose login uid is 65534 appends to `file`,
/// then runs `then` (`sleep 3` to stay readable, `true` to exit at once).
fn nobody_in_a_session(file: &Path, then: &str) -> Command {
    let script = format!(
        "echo 65534 > /proc/self/loginuid && exec setpriv --reuid 65534 --regid 65534 --clear-groups sh -c 'echo edited >> {} && {then}'",
        file.display()
    );
    let mut cmd = Command::new("setsid");
    cmd.args(["sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd
}

/// A writer that is gone (exited and reaped) before any event is read.
fn write_and_exit(file: &Path) {
    let status = Command::new("sh")
        .args(["-c", &format!("echo x > {}", file.display())])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn own_writes_are_datum() {
    if !is_root() {
        eprintln!("skipped: fanotify needs root");
        return;
    }
    let (_tmp, dir, mut a) = marked();
    let file = dir.join("motd");
    std::fs::write(&file, "hello\n").unwrap();
    let writers = writers_of(&mut a, &file);
    assert!(!writers.is_empty());
    assert!(
        writers.iter().all(|w| w.kind == WriterKind::Datum),
        "{writers:?}"
    );
    assert_eq!(writers[0].via, "datum (own apply)");
}

#[test]
fn another_user_in_a_new_login_session_is_named() {
    if !is_root() {
        eprintln!("skipped: fanotify needs root");
        return;
    }
    let (_tmp, dir, mut a) = marked();
    let file = dir.join("sshd_config");
    // nobody writes and stays a moment so that it can be read.
    let mut child = nobody_in_a_session(&file, "sleep 3").spawn().unwrap();
    wait_for(&file);
    let writers = writers_of(&mut a, &file);
    let _ = child.kill();
    let _ = child.wait();
    let w = writers
        .iter()
        .find(|w| w.kind != WriterKind::Unknown)
        .unwrap_or_else(|| panic!("no writer named: {writers:?}"));
    assert_eq!(w.kind, WriterKind::Person, "{w:?}");
    assert_eq!(w.uid, Some(65534));
    assert_eq!(w.user.as_deref(), Some("nobody"));
    assert_eq!(w.login_uid, Some(65534));
    assert!(w.session.is_some(), "{w:?}");
    assert!(w.via.starts_with("login session "), "{}", w.via);
    assert!(
        w.process.as_deref().unwrap_or("").contains("echo edited"),
        "{w:?}"
    );
    assert!(!w.parents.is_empty(), "{w:?}");
}

#[test]
fn a_writer_gone_before_it_is_read_is_unknown_with_the_reason() {
    if !is_root() {
        eprintln!("skipped: fanotify needs root");
        return;
    }
    let (_tmp, dir, a) = marked();
    // Whether or not this machine runs auditd: here it does not.
    let mut a = a.with_audit(audit::Fallback::with_check(|| false));
    let file = dir.join("hosts");
    // The writer exits (and is reaped) before any event is read.
    write_and_exit(&file);
    let writers = writers_of(&mut a, &file);
    assert!(!writers.is_empty());
    for w in &writers {
        assert_eq!(w.kind, WriterKind::Unknown, "{w:?}");
        let reason = w.reason.as_deref().unwrap();
        assert!(
            reason.contains("exited before it could be read"),
            "{reason}"
        );
        assert!(
            reason.contains("the audit subsystem (auditd) is not running"),
            "{reason}"
        );
        assert!(w.pid.is_some());
    }
}

/// An audit watch rule on a directory, removed when dropped.
struct AuditWatch {
    dir: PathBuf,
    key: String,
}

impl AuditWatch {
    fn add(dir: &Path) -> AuditWatch {
        let key = format!("datum-test-{}", std::process::id());
        let ok = Command::new("auditctl")
            .arg("-w")
            .arg(dir)
            .args(["-p", "wa", "-k", &key])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "auditctl -w {} failed", dir.display());
        AuditWatch {
            dir: dir.to_path_buf(),
            key,
        }
    }
}

impl Drop for AuditWatch {
    fn drop(&mut self) {
        let _ = Command::new("auditctl")
            .arg("-W")
            .arg(&self.dir)
            .args(["-p", "wa", "-k", &self.key])
            .status();
    }
}

#[test]
fn a_writer_gone_before_it_is_read_is_named_from_the_audit_log() {
    if !is_root() {
        eprintln!("skipped: fanotify and auditctl need root");
        return;
    }
    if !audit::auditd_running() {
        // scripts/test starts auditd (scripts/auditd) and says it must run.
        assert!(
            std::env::var_os("DATUM_AUDIT_REQUIRED").is_none(),
            "DATUM_AUDIT_REQUIRED is set but auditd is not running"
        );
        eprintln!("skipped: auditd is not running (scripts/auditd start)");
        return;
    }
    let (_tmp, dir, mut a) = marked();
    let _watch = AuditWatch::add(&dir);
    let file = dir.join("resolv.conf");
    // nobody, in a new login session (login uid 65534), writes and exits;
    // it is reaped before any event is read, so /proc has nothing of it.
    let status = nobody_in_a_session(&file, "true").status().unwrap();
    assert!(status.success());
    let writers = writers_of(&mut a, &file);
    assert!(!writers.is_empty());
    for w in &writers {
        assert_eq!(w.kind, WriterKind::Person, "{w:?}");
        assert!(w.via.starts_with("login session "), "{}", w.via);
        assert!(w.via.contains("; from audit event "), "{}", w.via);
        assert_eq!(w.uid, Some(65534), "{w:?}");
        assert_eq!(w.user.as_deref(), Some("nobody"));
        assert_eq!(w.login_uid, Some(65534));
        assert_eq!(w.login_user.as_deref(), Some("nobody"));
        assert!(w.session.is_some(), "{w:?}");
        assert_eq!(
            w.exe.as_deref().map(Path::new),
            Some(std::fs::canonicalize("/bin/sh").unwrap().as_path()),
            "{w:?}"
        );
        assert!(
            w.process.as_deref().unwrap_or("").contains("echo edited"),
            "{w:?}"
        );
        assert!(w.reason.is_none(), "{w:?}");
    }
}

#[test]
fn a_gone_writer_without_an_audit_record_is_unknown_and_names_the_rule() {
    if !is_root() || !audit::auditd_running() {
        eprintln!("skipped: needs root and a running auditd");
        return;
    }
    // No audit watch on this directory: the log has nothing to say.
    let (_tmp, dir, mut a) = marked();
    let file = dir.join("hosts");
    write_and_exit(&file);
    let writers = writers_of(&mut a, &file);
    assert!(!writers.is_empty());
    for w in &writers {
        assert_eq!(w.kind, WriterKind::Unknown, "{w:?}");
        let reason = w.reason.as_deref().unwrap();
        assert!(
            reason.contains("auditd has no record of it writing"),
            "{reason}"
        );
        assert!(reason.contains("auditctl -w"), "{reason}");
    }
}

#[test]
fn a_missing_directory_is_unmarked_with_the_reason() {
    if !is_root() {
        eprintln!("skipped: fanotify needs root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let a = Attributor::start(&BTreeSet::from([missing.clone()]), Own::current()).unwrap();
    assert_eq!(a.dirs().count(), 0);
    assert_eq!(a.unmarked()[0].0, missing);
    assert!(
        a.unmarked()[0].1.contains("cannot open"),
        "{:?}",
        a.unmarked()
    );
}
