//! Who changed a drifted subject: the process, user and login session that
//! wrote it, as a host agent's attribution saw them (`datum_host::attribution`, in the agent).
//!
//! Owns the shape every report carries ([`ChangedBy`], [`WriterKind`]) and its
//! one-line wording. Attribution is metadata (who, when, through what), never
//! content, so it may be shown for a sensitive subject too. A writer that could
//! not be identified is [`WriterKind::Unknown`] with the reason; nothing here is
//! ever guessed.

use serde::{Deserialize, Serialize};

/// What sort of writer made a change: what a class's `on_change_by` rules
/// decide on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriterKind {
    /// A person's login session (sshd, a terminal, a desktop session).
    Person,
    /// The package manager (dpkg, apt) installing or upgrading a package.
    PackageManager,
    /// A systemd unit (a service, a timer's job) outside any login session.
    Unit,
    /// Datum's own apply or revert: never drift.
    Datum,
    /// Some other process, neither in a session nor in a unit.
    Process,
    /// Not identified; [`ChangedBy::reason`] says why.
    Unknown,
}

impl WriterKind {
    /// The word used in class rules, JSON and reports.
    pub fn word(self) -> &'static str {
        match self {
            WriterKind::Person => "person",
            WriterKind::PackageManager => "package_manager",
            WriterKind::Unit => "unit",
            WriterKind::Datum => "datum",
            WriterKind::Process => "process",
            WriterKind::Unknown => "unknown",
        }
    }
}

/// One writer of a drifted subject (a file may list several).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedBy {
    pub kind: WriterKind,
    /// How the change arrived, for a person: `sshd session from 10.0.0.7
    /// port 51234`, `terminal /dev/pts/3`, `dpkg (package upgrade)`, `systemd
    /// unit backup.service`, `datum (own apply)`, `unknown`.
    pub via: String,
    /// What the kernel reported: `modified`, `attributes changed`, `moved
    /// into place`, `created`, `deleted`.
    pub event: String,
    /// The path the event named.
    pub path: String,
    /// Unix seconds when the event was read.
    pub at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// Real user id and its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Effective user id (differs under sudo, setuid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub euid: Option<u32>,
    /// The audit login uid (`/proc/PID/loginuid`): who logged in, kept
    /// across `su` and `sudo`. `None` when the process has none set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_user: Option<String>,
    /// The audit session id (`/proc/PID/sessionid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u32>,
    /// The command line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// The systemd unit or scope its cgroup names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Its ancestors up to the session leader (or init), nearest first:
    /// `bash (pid 812)`, `sshd (pid 800)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
    /// Why a writer is unknown (the process exited before it could be read,
    /// no fanotify, no audit record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ChangedBy {
    /// A writer that could not be identified, and why.
    pub fn unknown(
        path: impl Into<String>,
        event: impl Into<String>,
        at: i64,
        pid: Option<i32>,
        reason: impl Into<String>,
    ) -> Self {
        ChangedBy {
            kind: WriterKind::Unknown,
            via: "unknown".to_owned(),
            event: event.into(),
            path: path.into(),
            at,
            pid,
            uid: None,
            user: None,
            euid: None,
            login_uid: None,
            login_user: None,
            session: None,
            process: None,
            exe: None,
            unit: None,
            parents: Vec::new(),
            reason: Some(reason.into()),
        }
    }

    /// One line for a person: `alice (uid 1001; login alice, session 7) via
    /// sshd session from 10.0.0.7 port 51234: vim /etc/motd (pid 4242)`.
    pub fn summary(&self) -> String {
        if self.kind == WriterKind::Unknown {
            return format!(
                "unknown ({})",
                self.reason.as_deref().unwrap_or("no reason recorded")
            );
        }
        let mut who = match (&self.user, self.uid) {
            (Some(u), Some(id)) => format!("{u} (uid {id}"),
            (None, Some(id)) => format!("uid {id} ("),
            _ => "? (".to_owned(),
        };
        if let Some(e) = self.euid.filter(|e| Some(*e) != self.uid) {
            who.push_str(&format!("; euid {e}"));
        }
        match (&self.login_user, self.login_uid) {
            (Some(u), _) => who.push_str(&format!("; login {u}")),
            (None, Some(id)) => who.push_str(&format!("; login uid {id}")),
            _ => {}
        }
        if let Some(s) = self.session {
            who.push_str(&format!(", session {s}"));
        }
        who.push(')');
        let what = self
            .process
            .as_deref()
            .or(self.exe.as_deref())
            .unwrap_or("?");
        let pid = self.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        format!("{who} via {}: {what}{pid}", self.via)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_the_login_user_and_session_and_unknown_says_why() {
        let mut w = ChangedBy::unknown("/etc/motd", "modified", 0, Some(7), "gone");
        assert_eq!(w.summary(), "unknown (gone)");
        w.kind = WriterKind::Person;
        w.reason = None;
        w.via = "terminal /dev/pts/3".to_owned();
        w.uid = Some(1001);
        w.user = Some("alice".to_owned());
        w.euid = Some(0);
        w.login_user = Some("alice".to_owned());
        w.session = Some(5);
        w.process = Some("vim /etc/motd".to_owned());
        assert_eq!(
            w.summary(),
            "alice (uid 1001; euid 0; login alice, session 5) via terminal /dev/pts/3: vim /etc/motd (pid 7)"
        );
        let json = serde_json::to_value(&w).unwrap();
        assert_eq!(json["kind"], "person");
        assert!(json.get("reason").is_none());
        let back: ChangedBy = serde_json::from_value(json).unwrap();
        assert_eq!(back, w);
    }
}
