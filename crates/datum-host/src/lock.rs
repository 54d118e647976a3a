//! One pass at a time per root.
//!
//! Two passes interleaving on the same root could each see the other's staged
//! half-state and undo each other's work. A pass therefore holds an exclusive
//! advisory lock (`flock`) on `<root>/var/lib/datum/lock` for its whole
//! duration, and a second pass waits for it up to a timeout. The lock dies
//! with the process (the kernel releases it), so a killed pass never leaves a
//! stale lock to clean up. This module must not decide the timeout: the CLI
//! does.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::FlockOperation;

use crate::{Host, HostError, PrivateDir};

/// Where the lock lives, relative to the root.
pub const LOCK_PATH: &str = "var/lib/datum/lock";

/// Datum's folder under the root, as declared.
pub const STATE_FOLDER: &str = "/var/lib/datum";

/// How often a waiting pass retries.
const POLL: Duration = Duration::from_millis(50);

/// An exclusive hold on a root; released when dropped.
#[derive(Debug)]
pub struct RootLock {
    path: PathBuf,
    // Held only so the descriptor, and with it the lock, lives as long as we do.
    _file: File,
}

impl RootLock {
    /// Takes the lock of `host`'s root, waiting up to `timeout` for another
    /// pass to finish. The lock file lives in Datum's private folder,
    /// reached through the boundary and opened without following a link.
    pub fn acquire(host: &Host, timeout: Duration) -> Result<Self, HostError> {
        let Some(dir) = PrivateDir::open_in(host, Path::new(STATE_FOLDER), true)? else {
            return Err(HostError::MissingParent {
                path: host.root().join(LOCK_PATH),
                parent: host.root().join(STATE_FOLDER.trim_start_matches('/')),
            });
        };
        Self::acquire_in(&dir, "lock", timeout)
    }

    /// [`RootLock::acquire`] for a run that may write nothing on a root
    /// Datum has not set up (a read-only check without a usable state
    /// store): the lock is taken when its file exists, and `None` when
    /// Datum's folder or the lock file is missing, which creates neither.
    /// Missing, it is held by no one (an apply holds it only once it has
    /// made it); an apply that starts meanwhile does not wait for this run,
    /// which records nothing.
    pub fn acquire_if_present(host: &Host, timeout: Duration) -> Result<Option<Self>, HostError> {
        let Some(dir) = PrivateDir::open_in(host, Path::new(STATE_FOLDER), false)? else {
            return Ok(None);
        };
        let Some(file) = dir.open_read("lock")? else {
            return Ok(None);
        };
        Self::hold(dir.file_path("lock"), file, timeout).map(Some)
    }

    /// The same exclusive hold on another lock file of Datum's own, `name`
    /// in the private folder `dir` (one delivery of an outbox at a time,
    /// say), waiting up to `timeout`. Created 0600, opened without
    /// following a link.
    pub fn acquire_in(
        dir: &PrivateDir,
        name: impl AsRef<std::ffi::OsStr>,
        timeout: Duration,
    ) -> Result<Self, HostError> {
        let name = name.as_ref();
        let file = dir.open_or_create(name, 0o600)?;
        Self::hold(dir.file_path(name), file, timeout)
    }

    /// Takes the exclusive lock on `file` (at `path`), waiting up to
    /// `timeout`. `flock` needs no write access: a file opened for reading
    /// is locked the same way.
    fn hold(path: PathBuf, file: File, timeout: Duration) -> Result<Self, HostError> {
        let started = Instant::now();
        loop {
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(RootLock { path, _file: file }),
                Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {
                    let waited = started.elapsed();
                    if waited >= timeout {
                        return Err(HostError::LockTimeout { path, waited });
                    }
                    std::thread::sleep(POLL.min(timeout - waited));
                }
                Err(e) => return Err(HostError::io("lock", &path, e.into())),
            }
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_in_a_private_folder_waits_then_times_out() {
        let root = tempfile::tempdir().unwrap();
        let dir = PrivateDir::open_path(&root.path().join("pull"), true)
            .unwrap()
            .unwrap();
        let held = RootLock::acquire_in(&dir, "lock", Duration::from_secs(1)).unwrap();
        let err = RootLock::acquire_in(&dir, "lock", Duration::from_millis(120)).unwrap_err();
        assert!(matches!(err, HostError::LockTimeout { .. }), "{err}");
        drop(held);
        RootLock::acquire_in(&dir, "lock", Duration::from_millis(120)).unwrap();
    }

    #[test]
    fn a_lock_file_that_is_a_symbolic_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "untouched").unwrap();
        let folder = dir.path().join("state");
        let private = PrivateDir::open_path(&folder, true).unwrap().unwrap();
        let path = folder.join("state.db.delivery-lock");
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert!(
            RootLock::acquire_in(
                &private,
                "state.db.delivery-lock",
                Duration::from_millis(10)
            )
            .is_err()
        );
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "untouched");
        let fresh = folder.join("fresh-lock");
        let lock = RootLock::acquire_in(&private, "fresh-lock", Duration::from_millis(10)).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        drop(lock);
    }

    #[test]
    fn a_lock_taken_if_present_creates_nothing_and_waits_like_the_other() {
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path());
        let none = RootLock::acquire_if_present(&host, Duration::from_millis(10)).unwrap();
        assert!(none.is_none());
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
        let first = RootLock::acquire(&host, Duration::from_secs(1)).unwrap();
        let err = RootLock::acquire_if_present(&host, Duration::from_millis(120)).unwrap_err();
        assert!(matches!(err, HostError::LockTimeout { .. }), "{err}");
        drop(first);
        let held = RootLock::acquire_if_present(&host, Duration::from_millis(120)).unwrap();
        assert_eq!(held.unwrap().path(), root.path().join(LOCK_PATH));
    }

    #[test]
    fn a_second_pass_waits_and_then_times_out() {
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path());
        let first = RootLock::acquire(&host, Duration::from_secs(1)).unwrap();
        assert_eq!(first.path(), root.path().join(LOCK_PATH));

        let started = Instant::now();
        let err = RootLock::acquire(&host, Duration::from_millis(200)).unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(matches!(err, HostError::LockTimeout { .. }), "{err}");

        drop(first);
        RootLock::acquire(&host, Duration::from_millis(200)).unwrap();
    }

    #[test]
    fn a_waiting_pass_gets_the_lock_when_the_first_ends() {
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path());
        let first = RootLock::acquire(&host, Duration::from_secs(1)).unwrap();
        let path = root.path().to_path_buf();
        let waiter = std::thread::spawn(move || {
            RootLock::acquire(&Host::new(path), Duration::from_secs(10)).is_ok()
        });
        std::thread::sleep(Duration::from_millis(150));
        drop(first);
        assert!(waiter.join().unwrap());
    }
}
