//! One pass at a time per root.
//!
//! Two passes interleaving on the same root could each see the other's staged
//! half-state and undo each other's work. A pass therefore holds an exclusive
//! advisory lock (`flock`) on `<root>/var/lib/datum/lock` for its whole
//! duration, and a second pass waits for it up to a timeout. The lock dies
//! with the process (the kernel releases it), so a killed pass never leaves a
//! stale lock to clean up. This module must not decide the timeout: the CLI
//! does.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::FlockOperation;

use crate::HostError;

/// Where the lock lives, relative to the root.
pub const LOCK_PATH: &str = "var/lib/datum/lock";

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
    /// Takes the lock, waiting up to `timeout` for another pass to finish.
    pub fn acquire(root: &Path, timeout: Duration) -> Result<Self, HostError> {
        Self::acquire_file(root.join(LOCK_PATH), timeout)
    }

    /// The same exclusive hold on another lock file of Datum's own (one
    /// delivery of an outbox at a time, say), waiting up to `timeout`.
    pub fn acquire_file(path: PathBuf, timeout: Duration) -> Result<Self, HostError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| HostError::io("create directory", dir, e))?;
        }
        // Datum's own file: never through a symbolic link, private to root.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(|e| HostError::io("open lock file", &path, e))?;
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
    fn a_lock_file_that_is_a_symbolic_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "untouched").unwrap();
        let path = dir.path().join("state.db.delivery-lock");
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert!(RootLock::acquire_file(path, Duration::from_millis(10)).is_err());
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "untouched");
        let fresh = dir.path().join("fresh-lock");
        let lock = RootLock::acquire_file(fresh.clone(), Duration::from_millis(10)).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        drop(lock);
    }

    #[test]
    fn a_second_pass_waits_and_then_times_out() {
        let root = tempfile::tempdir().unwrap();
        let first = RootLock::acquire(root.path(), Duration::from_secs(1)).unwrap();
        assert_eq!(first.path(), root.path().join(LOCK_PATH));

        let started = Instant::now();
        let err = RootLock::acquire(root.path(), Duration::from_millis(200)).unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(matches!(err, HostError::LockTimeout { .. }), "{err}");

        drop(first);
        RootLock::acquire(root.path(), Duration::from_millis(200)).unwrap();
    }

    #[test]
    fn a_waiting_pass_gets_the_lock_when_the_first_ends() {
        let root = tempfile::tempdir().unwrap();
        let first = RootLock::acquire(root.path(), Duration::from_secs(1)).unwrap();
        let path = root.path().to_path_buf();
        let waiter =
            std::thread::spawn(move || RootLock::acquire(&path, Duration::from_secs(10)).is_ok());
        std::thread::sleep(Duration::from_millis(150));
        drop(first);
        assert!(waiter.join().unwrap());
    }
}
