//! Who changed it: the kernel's fanotify reports the pid of every process
//! that modifies, replaces, re-owns or deletes an entry of a marked
//! directory; this module reads that process while it still exists (see
//! [`process`]) and hands the agent one [`Attributed`] per event.
//!
//! Owns the fanotify groups (one per marked directory, in
//! `FAN_REPORT_DFID_NAME` mode, so each event names its entry without
//! resolving file handles: the directory is the group's), reading them
//! without blocking, and the reason a writer is unknown. Must not decide
//! what a change means for a resource (the agent maps paths to resources and
//! policies), guess a writer, or read anything of a process beyond its
//! identity (its environment only for `SSH_CONNECTION`).
//!
//! Costs: one fanotify group (a file descriptor) per marked directory, at
//! most [`MAX_GROUPS`]; one read of a handful of `/proc/PID` files per event
//! (the kernel merges repeated `FAN_MODIFY` events of one process on one file
//! while they are queued). Only classes with `attribute: true` start it.
//!
//! Limits, said rather than hidden: a directory created under a marked tree
//! after start is not marked; a process that exits before its event is read
//! is looked up in the audit log ([`audit`]) when `auditd` runs, and is
//! unknown with the reason when the log has no record of it; more than
//! [`MAX_GROUPS`] directories are left unmarked, each with the reason.

pub mod audit;
mod events;
pub mod process;

use std::collections::{BTreeSet, HashMap};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use datum_core::ChangedBy;
use nix::errno::Errno;
use nix::sys::fanotify::{EventFFlags, Fanotify, InitFlags, MarkFlags, MaskFlags};

use self::events::{
    FAN_ATTRIB, FAN_CREATE, FAN_DELETE, FAN_MODIFY, FAN_MOVED_TO, FAN_ONDIR, FAN_Q_OVERFLOW,
};
pub use self::process::Own;

/// Directories marked at most (each is a fanotify group, and the kernel
/// allows 128 groups per user by default).
pub const MAX_GROUPS: usize = 64;

/// Searches of the audit log for a batch of gone writers, and the pause
/// between them (auditd writes a record a few milliseconds after the call).
const AUDIT_TRIES: usize = 4;
const AUDIT_RETRY: Duration = Duration::from_millis(150);

/// The events asked for on each marked directory.
const MASK: u64 = FAN_MODIFY | FAN_ATTRIB | FAN_MOVED_TO | FAN_CREATE | FAN_DELETE;

/// fanotify could not be used at all.
#[derive(Debug, thiserror::Error)]
pub enum AttributionError {
    #[error(
        "fanotify is unavailable ({0}): writers of watched files are known only from the audit log, when auditd runs and has a record"
    )]
    Unavailable(Errno),
}

/// One change and who made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributed {
    /// The entry changed (`None`: the marked directory itself, or an
    /// overflowed queue where anything in it may have changed).
    pub path: PathBuf,
    /// The marked directory the event came from.
    pub dir: PathBuf,
    pub writer: ChangedBy,
}

struct Group {
    dir: PathBuf,
    fan: Fanotify,
}

/// The marks on the directories of the classes that asked for attribution.
pub struct Attributor {
    groups: Vec<Group>,
    unmarked: Vec<(PathBuf, String)>,
    own: Own,
    names: HashMap<u32, String>,
    audit: audit::Fallback,
}

impl std::fmt::Debug for Attributor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attributor")
            .field(
                "dirs",
                &self.groups.iter().map(|g| &g.dir).collect::<Vec<_>>(),
            )
            .field("unmarked", &self.unmarked)
            .finish()
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// User names from the machine's `/etc/passwd` (processes are the
/// machine's, whatever `--root` says).
pub fn user_names() -> HashMap<u32, String> {
    let text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let uid = f.nth(1)?.parse().ok()?;
            Some((uid, name.to_owned()))
        })
        .collect()
}

/// Copies of the groups' descriptors, to wait on (see [`Attributor::waiter`]).
#[derive(Debug)]
pub struct Waiter {
    fds: Vec<std::os::fd::OwnedFd>,
}

impl Waiter {
    /// Waits up to `timeout` for an event; true when one is ready.
    pub fn wait(&self, timeout: Duration) -> bool {
        wait_any(self.fds.iter().map(|f| f.as_fd()), timeout)
    }
}

fn wait_any<'a>(fds: impl Iterator<Item = std::os::fd::BorrowedFd<'a>>, timeout: Duration) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds: Vec<PollFd<'_>> = fds.map(|fd| PollFd::new(fd, PollFlags::POLLIN)).collect();
    if fds.is_empty() {
        std::thread::sleep(timeout);
        return false;
    }
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0)
}

/// `dir` and the directories below it (not through links), at most `limit`
/// in all: what a tree's attribution marks. The walk stops at the limit and
/// says so with `true`.
pub fn tree_dirs(dir: &Path, limit: usize) -> (Vec<PathBuf>, bool) {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        let Ok(entries) = std::fs::read_dir(&out[i]) else {
            i += 1;
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                if out.len() == limit {
                    return (out, true);
                }
                out.push(e.path());
            }
        }
        i += 1;
    }
    (out, false)
}

impl Attributor {
    /// Marks each directory (absolute paths on this machine). A directory
    /// that cannot be marked (missing, a link, over [`MAX_GROUPS`]) is listed
    /// in [`Attributor::unmarked`]; fanotify itself missing is an error.
    pub fn start(dirs: &BTreeSet<PathBuf>, own: Own) -> Result<Self, AttributionError> {
        let mut groups = Vec::new();
        let mut unmarked = Vec::new();
        for dir in dirs {
            if groups.len() == MAX_GROUPS {
                unmarked.push((
                    dir.clone(),
                    format!("more than {MAX_GROUPS} directories ask for attribution"),
                ));
                continue;
            }
            let flags = InitFlags::FAN_CLASS_NOTIF
                | InitFlags::FAN_CLOEXEC
                | InitFlags::FAN_NONBLOCK
                | InitFlags::FAN_UNLIMITED_QUEUE
                | InitFlags::from_bits_retain(libc_flags::REPORT_DFID_NAME);
            let fan = match Fanotify::init(flags, EventFFlags::O_RDONLY) {
                Ok(fan) => fan,
                Err(e) if groups.is_empty() => return Err(AttributionError::Unavailable(e)),
                Err(e) => {
                    unmarked.push((dir.clone(), format!("no fanotify group: {e}")));
                    continue;
                }
            };
            use rustix::fs::{Mode, OFlags};
            let opened = rustix::fs::open(
                dir,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            );
            let handle = match opened {
                Ok(h) => h,
                Err(e) => {
                    unmarked.push((dir.clone(), format!("cannot open it: {e}")));
                    continue;
                }
            };
            let marked = fan.mark::<_, Path>(
                MarkFlags::FAN_MARK_ADD | MarkFlags::FAN_MARK_ONLYDIR,
                MaskFlags::from_bits_retain(MASK) | MaskFlags::FAN_EVENT_ON_CHILD,
                handle.as_fd(),
                None,
            );
            match marked {
                Ok(()) => groups.push(Group {
                    dir: dir.clone(),
                    fan,
                }),
                Err(e) => unmarked.push((dir.clone(), format!("fanotify_mark: {e}"))),
            }
        }
        Ok(Attributor {
            groups,
            unmarked,
            own,
            names: user_names(),
            audit: audit::Fallback::system(),
        })
    }

    /// Where a gone writer is looked up (the machine's auditd unless a
    /// test says otherwise).
    pub fn with_audit(mut self, audit: audit::Fallback) -> Self {
        self.audit = audit;
        self
    }

    /// The directories marked.
    pub fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.groups.iter().map(|g| g.dir.as_path())
    }

    /// Directories that could not be marked, with the reason.
    pub fn unmarked(&self) -> &[(PathBuf, String)] {
        &self.unmarked
    }

    /// Waits up to `timeout` for an event on any group; true when one is
    /// ready.
    pub fn wait(&self, timeout: Duration) -> bool {
        wait_any(self.groups.iter().map(|g| g.fan.as_fd()), timeout)
    }

    /// A handle that waits for events without borrowing the attributor (so
    /// one thread can wait while another reads with [`Attributor::read_pending`]).
    pub fn waiter(&self) -> std::io::Result<Waiter> {
        let fds = self
            .groups
            .iter()
            .map(|g| g.fan.as_fd().try_clone_to_owned())
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Waiter { fds })
    }

    /// Reads every queued event without blocking and attributes each (the
    /// writer read now, or unknown with the reason).
    pub fn read_pending(&mut self) -> Vec<Attributed> {
        let mut raw: Vec<(usize, events::RawEvent)> = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        for (i, g) in self.groups.iter().enumerate() {
            loop {
                match nix::unistd::read(g.fan.as_fd(), &mut buf) {
                    Ok(0) => break,
                    Ok(n) => raw.extend(events::parse(&buf[..n]).into_iter().map(|e| (i, e))),
                    Err(Errno::EINTR) => continue,
                    Err(_) => break,
                }
            }
        }
        let at = now();
        let mut out = Vec::with_capacity(raw.len());
        let mut gone = Vec::new();
        for (i, event) in raw {
            let dir = self.groups[i].dir.clone();
            if event.mask & FAN_Q_OVERFLOW != 0 {
                out.push(Attributed {
                    path: dir.clone(),
                    dir,
                    writer: ChangedBy::unknown(
                        "",
                        "queue overflow",
                        at,
                        None,
                        "the kernel's fanotify queue overflowed: writers of this directory's changes were lost",
                    ),
                });
                continue;
            }
            if event.mask & FAN_ONDIR != 0 && event.name.is_none() {
                continue;
            }
            let path = match &event.name {
                Some(name) => dir.join(name),
                None => dir.clone(),
            };
            let shown = path.display().to_string();
            match self.describe(event.pid, &shown, event.word(), at) {
                Ok(writer) => out.push(Attributed { path, dir, writer }),
                Err(pid) => gone.push((
                    pid,
                    event.word(),
                    Attributed {
                        writer: ChangedBy::unknown(shown, event.word(), at, Some(pid), ""),
                        path,
                        dir,
                    },
                )),
            }
        }
        if !gone.is_empty() {
            self.look_up_in_audit_log(&mut gone, at);
            out.extend(gone.into_iter().map(|(_, _, a)| a));
        }
        out
    }

    /// Writers gone before they were read: their audit records, one search
    /// for the batch (searched again a few times for a while, as auditd
    /// writes its log a moment after the system call), else unknown with
    /// the reason.
    fn look_up_in_audit_log(&self, gone: &mut [(i32, &'static str, Attributed)], at: i64) {
        let mut found = vec![false; gone.len()];
        // One process (the usual case): search its events only.
        let pid = Some(gone[0].0).filter(|p| gone.iter().all(|(q, _, _)| q == p));
        let mut lookup = self.audit.recent(pid);
        for attempt in 0..AUDIT_TRIES {
            if let audit::Lookup::Events(events) = &lookup {
                for (i, (pid, event, a)) in gone.iter_mut().enumerate() {
                    if found[i] {
                        continue;
                    }
                    if let Some(e) = audit::find(events, *pid, &a.path, at) {
                        let names = &self.names;
                        a.writer = e.writer(
                            &self.own,
                            &|u| names.get(&u).cloned(),
                            &a.writer.path,
                            event,
                        );
                        found[i] = true;
                    }
                }
            }
            let searchable = matches!(lookup, audit::Lookup::Events(_));
            if !searchable || found.iter().all(|f| *f) || attempt + 1 == AUDIT_TRIES {
                break;
            }
            std::thread::sleep(AUDIT_RETRY);
            lookup = self.audit.recent(pid);
        }
        for (i, (pid, _, a)) in gone.iter_mut().enumerate() {
            if !found[i] {
                a.writer.reason = Some(audit::unknown_reason(*pid, &a.path, &lookup));
            }
        }
    }

    /// The writer read from `/proc`, or `Err(pid)` when it is gone.
    fn describe(&mut self, pid: i32, path: &str, event: &str, at: i64) -> Result<ChangedBy, i32> {
        if pid <= 0 {
            return Ok(ChangedBy::unknown(
                path,
                event,
                at,
                None,
                "the kernel reported no process",
            ));
        }
        let described = {
            let names = &self.names;
            process::describe(
                pid,
                &self.own,
                &|uid| names.get(&uid).cloned(),
                path,
                event,
                at,
            )
        };
        match described {
            Ok(mut w) => {
                // A user created after start: read the names once more.
                if w.user.is_none() || (w.login_uid.is_some() && w.login_user.is_none()) {
                    self.names = user_names();
                    w.user = w.uid.and_then(|u| self.names.get(&u).cloned());
                    w.login_user = w.login_uid.and_then(|u| self.names.get(&u).cloned());
                }
                Ok(w)
            }
            Err(process::Gone { pid }) => Err(pid),
        }
    }
}

/// Kernel constants nix does not name.
mod libc_flags {
    /// `FAN_REPORT_DIR_FID | FAN_REPORT_NAME`.
    pub const REPORT_DFID_NAME: u32 = 0x0000_0400 | 0x0000_0800;
}

#[cfg(test)]
mod tests;
