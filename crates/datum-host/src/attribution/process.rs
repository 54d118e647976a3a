//! Who a pid is, read from `/proc/PID` while the process still exists, and
//! how its change arrived (`via`): its ancestors up to the session leader,
//! its tty, its audit login uid and session, and its cgroup.
//!
//! Never guesses: what cannot be read is left out, and a process that is
//! gone is [`Gone`].

use std::path::{Path, PathBuf};

use datum_core::{ChangedBy, WriterKind};

/// `(uid_t)-1` and `(unsigned)-1`: no login uid, no audit session.
const UNSET: u32 = u32::MAX;
/// Ancestors followed at most (a loop guard; sessions are a few deep).
const MAX_PARENTS: usize = 32;
/// Command lines are cut here.
const MAX_CMDLINE: usize = 512;

/// Package managers, by process name (`comm`, at most 15 bytes).
pub(super) const PACKAGE_MANAGERS: &[&str] = &[
    "dpkg",
    "apt",
    "apt-get",
    "aptitude",
    "unattended-upgr",
    "packagekitd",
];

/// This process (the agent), so that its own writes and those of any process
/// running the same `datum` binary (an apply, a delegated check) are
/// recognised.
#[derive(Debug, Clone)]
pub struct Own {
    pub pid: i32,
    pub exe: Option<PathBuf>,
}

impl Own {
    /// The current process.
    pub fn current() -> Self {
        Own {
            pid: std::process::id() as i32,
            exe: std::fs::read_link("/proc/self/exe").ok(),
        }
    }
}

/// The process exited (or was never visible) before it could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gone {
    pub pid: i32,
}

/// What `/proc/PID/stat` and `status` say.
#[derive(Debug, Clone)]
struct Stat {
    comm: String,
    ppid: i32,
    session: i32,
    tty: u32,
}

fn proc_dir(pid: i32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}"))
}

fn read_text(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name)).ok()
}

fn stat(pid: i32) -> Option<Stat> {
    let text = read_text(&proc_dir(pid), "stat")?;
    // `pid (comm) state ppid pgrp session tty_nr ...`; comm may hold spaces
    // and parentheses, so it ends at the last `)`.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    Some(Stat {
        comm,
        ppid: rest.get(1)?.parse().ok()?,
        session: rest.get(3)?.parse().ok()?,
        tty: rest.get(4)?.parse::<i64>().ok()? as u32,
    })
}

fn id_file(dir: &Path, name: &str) -> Option<u32> {
    read_text(dir, name)?
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|v| *v != UNSET)
}

/// Real and effective uid from `status`.
fn uids(dir: &Path) -> Option<(u32, u32)> {
    let text = read_text(dir, "status")?;
    let line = text.lines().find(|l| l.starts_with("Uid:"))?;
    let mut ids = line["Uid:".len()..].split_whitespace();
    Some((ids.next()?.parse().ok()?, ids.next()?.parse().ok()?))
}

fn cmdline(dir: &Path) -> Option<String> {
    let bytes = std::fs::read(dir.join("cmdline")).ok()?;
    let words: Vec<String> = bytes
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    if words.is_empty() {
        return None;
    }
    let mut line = words.join(" ");
    if line.len() > MAX_CMDLINE {
        let mut cut = MAX_CMDLINE;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push('…');
    }
    Some(line)
}

/// The unit or scope named by the process's cgroup (v2 line `0::/…`, else
/// the `name=systemd` hierarchy).
fn unit(dir: &Path) -> Option<String> {
    let text = read_text(dir, "cgroup")?;
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .filter(|p| *p != "/")
        .or_else(|| {
            text.lines()
                .find_map(|l| l.split_once(":name=systemd:").map(|(_, p)| p))
        })?;
    path.split('/')
        .rev()
        .find(|c| {
            [".service", ".scope", ".socket", ".mount", ".timer"]
                .iter()
                .any(|s| c.ends_with(s))
        })
        .map(str::to_owned)
}

/// `SSH_CONNECTION` (client address and port) from a process's environment;
/// nothing else of the environment is kept.
fn ssh_from(pid: i32) -> Option<String> {
    let bytes = std::fs::read(proc_dir(pid).join("environ")).ok()?;
    let value = bytes
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"SSH_CONNECTION="))?;
    let value = String::from_utf8_lossy(value);
    let mut parts = value.split_whitespace();
    Some(format!("{} port {}", parts.next()?, parts.next()?))
}

/// A tty number as a device name (`/dev/pts/3`, `/dev/tty1`).
fn tty_name(tty: u32) -> String {
    let major = (tty >> 8) & 0xfff;
    let minor = (tty & 0xff) | ((tty >> 12) & 0xfff00);
    match major {
        136..=143 => format!("/dev/pts/{}", (major - 136) * 256 + minor),
        4 if minor < 64 => format!("/dev/tty{minor}"),
        4 => format!("/dev/ttyS{}", minor - 64),
        _ => format!("tty {major}:{minor}"),
    }
}

/// Reads `pid` now and says who it is and how its change arrived.
pub fn describe(
    pid: i32,
    own: &Own,
    names: &dyn Fn(u32) -> Option<String>,
    path: &str,
    event: &str,
    at: i64,
) -> Result<ChangedBy, Gone> {
    let dir = proc_dir(pid);
    let st = stat(pid).ok_or(Gone { pid })?;
    let (uid, euid) = uids(&dir).ok_or(Gone { pid })?;
    let exe = std::fs::read_link(dir.join("exe")).ok();
    let login_uid = id_file(&dir, "loginuid");
    let session = id_file(&dir, "sessionid");
    let process = cmdline(&dir).or_else(|| Some(st.comm.clone()));
    let unit = unit(&dir);

    // Ancestors up to and including the session leader, then the one that
    // started the session (sshd, login, a unit's main process).
    let mut chain: Vec<(i32, Stat)> = Vec::new();
    let mut next = st.ppid;
    let mut leader_seen = st.session == pid;
    while next > 1 && chain.len() < MAX_PARENTS {
        let Some(p) = stat(next) else { break };
        let is_leader = p.session == next;
        let parent = p.ppid;
        chain.push((next, p));
        if leader_seen {
            break;
        }
        leader_seen = is_leader;
        next = parent;
    }
    let parents: Vec<String> = chain
        .iter()
        .map(|(p, s)| format!("{} (pid {p})", s.comm))
        .collect();
    let comms =
        || std::iter::once(st.comm.as_str()).chain(chain.iter().map(|(_, s)| s.comm.as_str()));

    let own_exe = own
        .exe
        .as_deref()
        .is_some_and(|o| exe.as_deref() == Some(o));
    let tty = std::iter::once(st.tty)
        .chain(chain.iter().map(|(_, s)| s.tty))
        .find(|t| *t != 0);
    // Datum itself, or any `datum` process (an apply, the agent's delegated
    // check reverting a file). Not the programs Datum starts (an activation
    // that makes a service rewrite its files is that service's change).
    let (kind, via) = if pid == own.pid || own_exe {
        (WriterKind::Datum, "datum (own apply)".to_owned())
    } else if let Some(pm) = comms().find(|c| PACKAGE_MANAGERS.contains(c)) {
        let upgrade = if comms().any(|c| c == "dpkg") && pm != "dpkg" {
            format!("{pm} → dpkg (package upgrade)")
        } else {
            format!("{pm} (package upgrade)")
        };
        (WriterKind::PackageManager, upgrade)
    } else if let Some((sshd, _)) = chain
        .iter()
        .find(|(_, s)| s.comm == "sshd" || s.comm == "sshd-session")
    {
        let from = std::iter::once(pid)
            .chain(chain.iter().map(|(p, _)| *p).take_while(|p| p != sshd))
            .find_map(ssh_from);
        let via = match from {
            Some(from) => format!("sshd session from {from}"),
            None => format!("sshd session (sshd pid {sshd})"),
        };
        (WriterKind::Person, via)
    } else if let Some(tty) = tty {
        (WriterKind::Person, format!("terminal {}", tty_name(tty)))
    } else if let (Some(_), Some(s)) = (login_uid, session) {
        (
            WriterKind::Person,
            format!("login session {s} (no terminal)"),
        )
    } else if let Some(u) = unit.as_deref().filter(|u| u.ends_with(".service")) {
        (WriterKind::Unit, format!("systemd unit {u}"))
    } else {
        (
            WriterKind::Process,
            format!("process {} (pid {pid})", st.comm),
        )
    };
    Ok(ChangedBy {
        kind,
        via,
        event: event.to_owned(),
        path: path.to_owned(),
        at,
        pid: Some(pid),
        uid: Some(uid),
        user: names(uid),
        euid: Some(euid),
        login_uid,
        login_user: login_uid.and_then(names),
        session,
        process,
        exe: exe.map(|e| e.display().to_string()),
        unit,
        parents,
        reason: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tty_numbers_name_their_device() {
        assert_eq!(tty_name((136 << 8) | 3), "/dev/pts/3");
        assert_eq!(tty_name((4 << 8) | 1), "/dev/tty1");
    }

    #[test]
    fn this_process_is_datum_and_a_missing_pid_is_gone() {
        let own = Own::current();
        let me = describe(own.pid, &own, &|_| None, "/x", "modified", 0).unwrap();
        assert_eq!(me.kind, WriterKind::Datum);
        assert_eq!(me.pid, Some(own.pid));
        assert!(me.uid.is_some());
        // pid_max is at most 2^22: this one never exists.
        let gone = describe(1 << 23, &own, &|_| None, "/x", "modified", 0);
        assert_eq!(gone.unwrap_err(), Gone { pid: 1 << 23 });
    }
}
