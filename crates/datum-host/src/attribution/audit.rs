//! The fallback for a writer that is gone before `/proc` could be read (or
//! when fanotify cannot be used): the Linux audit subsystem's own record of
//! the system call, if `auditd` runs and an audit rule covered the path.
//!
//! Owns running `ausearch` (the audit package's documented search tool, in
//! its `--format raw` output, which is the log's own record format: `type=…
//! msg=audit(SECONDS.MILLIS:SERIAL): key=value …`), parsing those records
//! into [`AuditEvent`]s, and turning the one that matches a writer (same pid,
//! a `PATH` record naming the file) into a [`ChangedBy`]. Must not guess: an
//! event is used only when the audit log itself names the path (and the pid,
//! when fanotify gave one); otherwise the writer stays unknown and the
//! reason says what was missing. Never adds audit rules (that is the
//! operator's choice, see docs/attribution.md).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use datum_core::{ChangedBy, WriterKind};

use super::process::{Own, PACKAGE_MANAGERS};

/// `(uid_t)-1` / `(unsigned)-1`: no login uid, no session.
const UNSET: u32 = u32::MAX;
/// How far back a search reaches: `ausearch -ts recent` is ten minutes.
pub const WINDOW_SECS: i64 = 600;

/// One audit event (the records sharing a serial), as far as attribution
/// needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditEvent {
    pub serial: u64,
    /// Unix seconds of the event.
    pub at: i64,
    pub pid: Option<i32>,
    pub ppid: Option<i32>,
    pub uid: Option<u32>,
    pub euid: Option<u32>,
    /// The login uid (`auid`); `None` when unset.
    pub auid: Option<u32>,
    /// The audit session (`ses`); `None` when unset.
    pub ses: Option<u32>,
    /// `pts3`, `tty1`; `None` for `(none)`.
    pub tty: Option<String>,
    pub comm: Option<String>,
    pub exe: Option<String>,
    /// The command line (`PROCTITLE`, arguments joined by spaces).
    pub proctitle: Option<String>,
    pub cwd: Option<String>,
    /// The `name` of each `PATH` record, as recorded (may be relative to `cwd`).
    pub names: Vec<String>,
    pub key: Option<String>,
}

impl AuditEvent {
    /// The absolute paths the event's `PATH` records name.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.names
            .iter()
            .map(|n| {
                let p = Path::new(n);
                if p.is_absolute() {
                    normalise(p)
                } else {
                    normalise(&Path::new(self.cwd.as_deref().unwrap_or("/")).join(p))
                }
            })
            .collect()
    }

    /// Whether a `PATH` record names `path` (or, with `subtree`, something below it).
    pub fn touches(&self, path: &Path, subtree: bool) -> bool {
        let path = normalise(path);
        self.paths()
            .iter()
            .any(|p| *p == path || (subtree && p.starts_with(&path)))
    }

    /// The writer this event describes. `path` and `event` are what the
    /// change was; `via` says the audit log is the source.
    pub fn writer(
        &self,
        own: &Own,
        names: &dyn Fn(u32) -> Option<String>,
        path: &str,
        event: &str,
    ) -> ChangedBy {
        let comm = self.comm.as_deref().unwrap_or("?");
        let own_exe = own
            .exe
            .as_deref()
            .is_some_and(|o| self.exe.as_deref() == o.to_str());
        let (kind, via) = if own_exe {
            (WriterKind::Datum, "datum (own apply)".to_owned())
        } else if PACKAGE_MANAGERS.contains(&comm) {
            (
                WriterKind::PackageManager,
                format!("{comm} (package upgrade)"),
            )
        } else if let Some(tty) = &self.tty {
            (
                WriterKind::Person,
                format!("terminal /dev/{}", tty_device(tty)),
            )
        } else if let (Some(_), Some(s)) = (self.auid, self.ses) {
            (
                WriterKind::Person,
                format!("login session {s} (no terminal)"),
            )
        } else {
            (
                WriterKind::Process,
                format!("process {comm} (pid {})", self.pid.unwrap_or(0)),
            )
        };
        ChangedBy {
            kind,
            via: format!("{via}; from audit event {}", self.serial),
            event: event.to_owned(),
            path: path.to_owned(),
            at: self.at,
            pid: self.pid,
            uid: self.uid,
            user: self.uid.and_then(names),
            euid: self.euid,
            login_uid: self.auid,
            login_user: self.auid.and_then(names),
            session: self.ses,
            process: self.proctitle.clone().or_else(|| self.comm.clone()),
            exe: self.exe.clone(),
            unit: None,
            parents: self.ppid.map(|p| format!("pid {p}")).into_iter().collect(),
            reason: None,
        }
    }
}

/// The audit tty name as a device path component (`pts3` → `pts/3`).
fn tty_device(tty: &str) -> String {
    match tty.strip_prefix("pts") {
        Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => format!("pts/{n}"),
        _ => tty.to_owned(),
    }
}

/// `path` without `.` components or a trailing slash (`..` is kept: the
/// log records what the process asked for).
fn normalise(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// Splits a record's body into `key=value` pairs; values may be
/// double-quoted or single-quoted (user-space records) and then hold spaces.
fn fields(body: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = body.trim_start();
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else { break };
        let key = rest[..eq].trim();
        let after = &rest[eq + 1..];
        let (value, next) = match after.chars().next() {
            Some(q @ ('"' | '\'')) => match after[1..].find(q) {
                Some(end) => (&after[..end + 2], &after[end + 2..]),
                None => (after, ""),
            },
            _ => match after.find(' ') {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, ""),
            },
        };
        out.push((key, value));
        rest = next.trim_start();
    }
    out
}

/// An untrusted string field: `"text"`, or hex when it holds spaces or
/// special characters (NULs, as in `proctitle`, become spaces), or
/// `(null)`.
fn text(value: &str) -> Option<String> {
    if let Some(q) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        return Some(q.to_owned());
    }
    if value == "(null)" || value == "(none)" || value.is_empty() {
        return None;
    }
    if value.len().is_multiple_of(2) && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        let bytes = hex::decode(value).ok()?;
        let words: Vec<String> = bytes
            .split(|b| *b == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        return Some(words.join(" "));
    }
    Some(value.to_owned())
}

fn id(value: &str) -> Option<u32> {
    value.parse::<u32>().ok().filter(|v| *v != UNSET)
}

/// Parses the raw records (`ausearch --format raw`, or the log file
/// itself) into events by serial, oldest first. Lines that are not audit
/// records are skipped. An `ENRICHED` log's interpreted tail (after the
/// `\x1d` separator) is ignored: the raw numbers are used.
pub fn parse_raw(output: &str) -> Vec<AuditEvent> {
    let mut events: BTreeMap<u64, AuditEvent> = BTreeMap::new();
    for line in output.lines() {
        let line = line.split('\u{1d}').next().unwrap_or("");
        let Some(rest) = line.strip_prefix("type=") else {
            continue;
        };
        let Some((kind, rest)) = rest.split_once(' ') else {
            continue;
        };
        let Some(rest) = rest.strip_prefix("msg=audit(") else {
            continue;
        };
        let Some((stamp, body)) = rest.split_once("):") else {
            continue;
        };
        let Some((time, serial)) = stamp.split_once(':') else {
            continue;
        };
        let (Some(secs), Ok(serial)) = (
            time.split('.').next().and_then(|s| s.parse::<i64>().ok()),
            serial.parse::<u64>(),
        ) else {
            continue;
        };
        let e = events.entry(serial).or_insert_with(|| AuditEvent {
            serial,
            at: secs,
            ..AuditEvent::default()
        });
        let f = fields(body);
        let get = |k: &str| f.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        match kind {
            "SYSCALL" => {
                e.pid = get("pid").and_then(|v| v.parse().ok());
                e.ppid = get("ppid").and_then(|v| v.parse().ok());
                e.uid = get("uid").and_then(id);
                e.euid = get("euid").and_then(id);
                e.auid = get("auid").and_then(id);
                e.ses = get("ses").and_then(id);
                e.tty = get("tty").and_then(text);
                e.comm = get("comm").and_then(text);
                e.exe = get("exe").and_then(text);
                e.key = get("key").and_then(text);
            }
            "CWD" => e.cwd = get("cwd").and_then(text),
            "PATH" => {
                if let Some(name) = get("name").and_then(text) {
                    e.names.push(name);
                }
            }
            "PROCTITLE" => e.proctitle = get("proctitle").and_then(text),
            _ => {}
        }
    }
    events.into_values().collect()
}

/// What the audit subsystem could say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// `auditd` is not running: there is no log to search.
    NotRunning,
    /// It runs, but its log could not be searched (why).
    Failed(String),
    /// The events of the last [`WINDOW_SECS`].
    Events(Vec<AuditEvent>),
}

/// Where the records come from: the machine's `auditd`, through `ausearch`.
#[derive(Debug, Clone)]
pub struct Fallback {
    running: fn() -> bool,
    program: PathBuf,
}

impl Default for Fallback {
    fn default() -> Self {
        Self::system()
    }
}

impl Fallback {
    /// The machine's audit daemon and `ausearch` from PATH.
    pub fn system() -> Self {
        Fallback {
            running: auditd_running,
            program: PathBuf::from("ausearch"),
        }
    }

    /// A fallback with its own test for a running daemon (tests: the
    /// "not running" path on a machine where auditd runs).
    pub fn with_check(running: fn() -> bool) -> Self {
        Fallback {
            running,
            ..Self::system()
        }
    }

    /// The recent events: `ausearch --input-logs --format raw -ts recent`,
    /// of one process (`-p PID`) when `pid` is given. (Not `-f PATH`: it
    /// misses a `PATH` record whose name is relative to the writer's cwd.)
    pub fn recent(&self, pid: Option<i32>) -> Lookup {
        if !(self.running)() {
            return Lookup::NotRunning;
        }
        let mut cmd = Command::new(&self.program);
        cmd.args(["--input-logs", "--format", "raw", "-ts", "recent"]);
        if let Some(pid) = pid {
            cmd.arg("-p").arg(pid.to_string());
        }
        let out = cmd
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output();
        match out {
            Err(e) => Lookup::Failed(format!("cannot run {}: {e}", self.program.display())),
            Ok(o) if o.status.success() => {
                Lookup::Events(parse_raw(&String::from_utf8_lossy(&o.stdout)))
            }
            Ok(o) => {
                let err = String::from_utf8_lossy(&o.stderr);
                // Exit 1 and nothing on stderr (`--format raw` prints no
                // `<no matches>`): a search that found nothing. A log it
                // cannot read is exit 1 with `Error opening …`.
                let nothing = err.trim().is_empty() || err.trim() == "<no matches>";
                if o.status.code() == Some(1) && nothing {
                    Lookup::Events(Vec::new())
                } else {
                    Lookup::Failed(format!(
                        "{} failed ({}): {}",
                        self.program.display(),
                        o.status,
                        err.trim()
                    ))
                }
            }
        }
    }
}

/// Whether the audit daemon runs.
pub fn auditd_running() -> bool {
    std::fs::read_dir("/proc").is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                && std::fs::read_to_string(e.path().join("comm"))
                    .is_ok_and(|c| c.trim_end() == "auditd")
        })
    })
}

/// The newest event of `pid` that names `path`, at or before `until` (and
/// within the window).
pub fn find<'a>(
    events: &'a [AuditEvent],
    pid: i32,
    path: &Path,
    until: i64,
) -> Option<&'a AuditEvent> {
    events
        .iter()
        .rev()
        .filter(|e| e.at <= until + 1 && e.at >= until - WINDOW_SECS)
        .find(|e| e.pid == Some(pid) && e.touches(path, false))
}

/// The events since `since` (Unix seconds) whose `PATH` records name `path`
/// (or, with `subtree`, something below it), oldest first: the writers of a
/// change when fanotify gave no pid.
pub fn naming<'a>(
    events: &'a [AuditEvent],
    path: &'a Path,
    subtree: bool,
    since: i64,
) -> impl Iterator<Item = &'a AuditEvent> + 'a {
    events
        .iter()
        .filter(move |e| e.at >= since && e.pid.is_some() && e.touches(path, subtree))
}

/// Why a gone writer stays unknown after looking at the audit subsystem.
pub fn unknown_reason(pid: i32, path: &Path, lookup: &Lookup) -> String {
    let audit = match lookup {
        Lookup::NotRunning => {
            "the audit subsystem (auditd) is not running, so there is no record to fall back on"
                .to_owned()
        }
        Lookup::Failed(why) => format!("auditd runs but its log could not be searched: {why}"),
        Lookup::Events(_) => format!(
            "auditd has no record of it writing {} (no audit watch covers it? `auditctl -w {} -p wa -k datum`)",
            path.display(),
            path.parent().unwrap_or(Path::new("/")).display()
        ),
    };
    format!("process {pid} exited before it could be read; {audit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Records exactly as `ausearch --format raw` printed them on this
    // project's machine (Debian 12 auditd 3.0.9, log_format = ENRICHED: the
    // interpreted tail follows a \x1d), for `sh -c "echo hi > /tmp/…/x"`
    // as root outside any login, and for a relative name written from the
    // watched folder.
    const RAW: &str = concat!(
        "type=SYSCALL msg=audit(1796152084.636:4): arch=c000003e syscall=257 success=yes exit=3 a0=ffffff9c a1=558d71bcf928 a2=241 a3=1b6 items=2 ppid=10947 pid=11033 auid=4294967295 uid=0 gid=0 euid=0 suid=0 fsuid=0 egid=0 sgid=0 fsgid=0 tty=(none) ses=4294967295 comm=\"sh\" exe=\"/usr/bin/dash\" key=\"datum-probe\"\u{1d}ARCH=x86_64 SYSCALL=openat AUID=\"unset\" UID=\"root\" GID=\"root\" EUID=\"root\" SUID=\"root\" FSUID=\"root\" EGID=\"root\" SGID=\"root\" FSGID=\"root\"\n",
        "type=CWD msg=audit(1796152084.636:4): cwd=\"/work/main\"\n",
        "type=PATH msg=audit(1796152084.636:4): item=0 name=\"/tmp/tmp.6oimEavQ2U/\" inode=10010959 dev=fe:00 mode=040700 ouid=0 ogid=0 rdev=00:00 nametype=PARENT cap_fp=0 cap_fi=0 cap_fe=0 cap_fver=0 cap_frootid=0\u{1d}OUID=\"root\" OGID=\"root\"\n",
        "type=PATH msg=audit(1796152084.636:4): item=1 name=\"/tmp/tmp.6oimEavQ2U/x\" inode=10010960 dev=fe:00 mode=0100644 ouid=0 ogid=0 rdev=00:00 nametype=CREATE cap_fp=0 cap_fi=0 cap_fe=0 cap_fver=0 cap_frootid=0\u{1d}OUID=\"root\" OGID=\"root\"\n",
        "type=PROCTITLE msg=audit(1796152084.636:4): proctitle=7368002D63006563686F206869203E202F746D702F746D702E366F696D4561765132552F78\n",
        "type=PATH msg=audit(1796152156.340:6): item=0 name=\"/tmp/tmp.1SXRPvcak3\" inode=10037466 dev=fe:00 mode=040700 ouid=0 ogid=0 rdev=00:00 nametype=PARENT cap_fp=0 cap_fi=0 cap_fe=0 cap_fver=0 cap_frootid=0\u{1d}OUID=\"root\" OGID=\"root\"\n",
        "type=PATH msg=audit(1796152156.340:6): item=1 name=\"f0\" inode=10037476 dev=fe:00 mode=0100644 ouid=0 ogid=0 rdev=00:00 nametype=CREATE cap_fp=0 cap_fi=0 cap_fe=0 cap_fver=0 cap_frootid=0\u{1d}OUID=\"root\" OGID=\"root\"\n",
        "type=CWD msg=audit(1796152156.340:6): cwd=\"/tmp/tmp.1SXRPvcak3\"\n",
    );

    #[test]
    fn raw_records_parse_into_events_by_serial() {
        let events = parse_raw(RAW);
        assert_eq!(events.len(), 2);
        let e = &events[0];
        assert_eq!(e.serial, 4);
        assert_eq!(e.at, 1_796_152_084);
        assert_eq!((e.pid, e.ppid), (Some(11033), Some(10947)));
        assert_eq!((e.uid, e.euid), (Some(0), Some(0)));
        assert_eq!((e.auid, e.ses, e.tty.as_deref()), (None, None, None));
        assert_eq!(e.comm.as_deref(), Some("sh"));
        assert_eq!(e.exe.as_deref(), Some("/usr/bin/dash"));
        assert_eq!(e.key.as_deref(), Some("datum-probe"));
        assert_eq!(
            e.proctitle.as_deref(),
            Some("sh -c echo hi > /tmp/tmp.6oimEavQ2U/x")
        );
        assert!(e.touches(Path::new("/tmp/tmp.6oimEavQ2U/x"), false));
        assert!(!e.touches(Path::new("/tmp/tmp.6oimEavQ2U/y"), false));
        assert!(e.touches(Path::new("/tmp/tmp.6oimEavQ2U"), true));
        // A relative name is the process's cwd joined with it.
        assert!(events[1].touches(Path::new("/tmp/tmp.1SXRPvcak3/f0"), false));
        assert_eq!(events[1].pid, None);
    }

    #[test]
    fn the_matching_event_names_the_writer_and_others_do_not_match() {
        let events = parse_raw(RAW);
        let path = Path::new("/tmp/tmp.6oimEavQ2U/x");
        assert!(
            find(&events, 11034, path, 1_796_152_090).is_none(),
            "other pid"
        );
        assert!(
            find(&events, 11033, path, 1_796_150_000).is_none(),
            "before it"
        );
        assert!(
            find(&events, 11033, path, 1_796_152_084 + WINDOW_SECS + 5).is_none(),
            "too old"
        );
        let e = find(&events, 11033, path, 1_796_152_085).unwrap();
        let own = Own {
            pid: 1,
            exe: Some(PathBuf::from("/usr/bin/datum")),
        };
        let names = |u: u32| (u == 0).then(|| "root".to_owned());
        let w = e.writer(&own, &names, "/tmp/tmp.6oimEavQ2U/x", "modified");
        assert_eq!(w.kind, WriterKind::Process);
        assert_eq!(w.via, "process sh (pid 11033); from audit event 4");
        assert_eq!(w.user.as_deref(), Some("root"));
        assert_eq!(w.exe.as_deref(), Some("/usr/bin/dash"));
        assert_eq!(w.parents, ["pid 10947"]);
        assert_eq!(w.at, 1_796_152_084);
        // The same record from a login session with a terminal is a person,
        // and Datum's own executable is Datum.
        let mut person = e.clone();
        (person.auid, person.ses, person.tty) = (Some(1001), Some(7), Some("pts3".into()));
        let w = person.writer(&own, &|_| Some("alice".into()), "/x", "modified");
        assert_eq!(
            (w.kind, w.via.as_str()),
            (
                WriterKind::Person,
                "terminal /dev/pts/3; from audit event 4"
            )
        );
        assert_eq!((w.login_uid, w.session), (Some(1001), Some(7)));
        let mut datum = e.clone();
        datum.exe = Some("/usr/bin/datum".into());
        assert_eq!(
            datum.writer(&own, &names, "/x", "modified").kind,
            WriterKind::Datum
        );
    }

    #[test]
    fn reasons_say_what_the_audit_subsystem_lacked() {
        let p = Path::new("/etc/app/a.conf");
        let r = unknown_reason(42, p, &Lookup::NotRunning);
        assert!(
            r.starts_with("process 42 exited before it could be read; "),
            "{r}"
        );
        assert!(r.contains("auditd) is not running"), "{r}");
        let r = unknown_reason(42, p, &Lookup::Events(Vec::new()));
        assert!(r.contains("no record of it writing /etc/app/a.conf"), "{r}");
        assert!(r.contains("auditctl -w /etc/app -p wa"), "{r}");
        let off = Fallback::with_check(|| false);
        assert_eq!(off.recent(None), Lookup::NotRunning);
        let missing = Fallback {
            running: || true,
            program: PathBuf::from("/nonexistent/ausearch"),
        };
        let Lookup::Failed(why) = missing.recent(Some(1)) else {
            panic!("a missing ausearch is a failure");
        };
        assert!(why.contains("cannot run /nonexistent/ausearch"), "{why}");
        let r = unknown_reason(42, p, &Lookup::Failed(why));
        assert!(
            r.contains("auditd runs but its log could not be searched"),
            "{r}"
        );
    }
}
