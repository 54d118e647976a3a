//! Directory fsyncs deferred to one per directory per flush (issue 17).
//!
//! Making a staged copy live takes two things on disk: the copy's content
//! (its own `fsync`, always done before the rename, see [`crate::staging`])
//! and the rename, which is an entry in the parent directory and is durable
//! only once that directory is fsynced. A pass that writes 2,000 new files
//! into 40 directories used to fsync the parent after every rename: 2,000
//! directory fsyncs, each a journal commit. With [`Durability`] the rename
//! is made as before, the parent is only *remembered* ([`Durability::defer`]),
//! and [`Durability::flush`] fsyncs each remembered directory once: 40
//! directory fsyncs for those 2,000 files, or 1 for N files in one
//! directory. Each directory owed is an open descriptor, so at most
//! [`Budget::pending`] are owed at once: the one past them flushes them first.
//!
//! # Why this is safe
//!
//! - **Atomicity** does not depend on fsync at all: a reader, a validator or
//!   a process killed with SIGKILL sees either the old file or the complete
//!   new one, because the copy is complete before `renameat` and the rename
//!   is atomic. A SIGKILL loses nothing the kernel has been told: the page
//!   cache and the directory entries survive the process, and the kernel
//!   writes them back as usual. What was pending here is only an *fsync*.
//! - **Power loss**: the content of every staged copy is fsynced before its
//!   rename is issued (the rename may reach the disk with any later journal
//!   commit, so waiting for the directory fsync would not be enough), so a
//!   rename that survives a crash always names complete content. A rename
//!   whose directory fsync had not happened yet may be lost: after reboot the
//!   old file (or no file) is there, complete, never a torn one.
//! - **Nothing is recorded ahead of the disk**: the state store calls
//!   [`Durability::flush`] before every commit (`datum_store::Store::set_durability`),
//!   so a resource is never recorded as verified while its rename could
//!   still be lost; the engine also flushes before a service is reloaded,
//!   before a resource that requires a changed one runs, and at the end of
//!   every pass. A rename lost to a power cut is therefore simply not
//!   recorded, and the next pass observes and writes it again.
//! - **A failed directory fsync is sticky**: Linux reports a writeback
//!   error once, and a retried fsync may succeed without the data being on
//!   disk. A directory whose fsync failed is kept in a failure list, every
//!   later flush fails too (so nothing is recorded on top of it), until
//!   the engine takes the list ([`Durability::take_failures`]) and fails the
//!   resources that wrote there.
//!
//! One `Durability` belongs to one [`crate::Host`] (so to one pass; clones
//! share it). Dropped with directories still pending (a pass that returned
//! early), it fsyncs them, best effort.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::descriptors::Budget;
use crate::{Dir, HostError};

/// The most directories owed an fsync at once, each held open until it is
/// made: this process's share for them ([`Budget::pending`], at most 256).
/// Unbounded, a Tree renaming files into a thousand folders held a thousand
/// descriptors and failed under the usual limit of 1,024 ('Too many open
/// files'); a pass writing into fewer folders (the 20,000 Files of an estate
/// are in about 200) still makes one fsync per folder.
fn pending_most() -> usize {
    Budget::of_this_process().pending
}

/// Directories whose renames are not yet durable, shared by clones.
#[derive(Debug, Clone, Default)]
pub struct Durability {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    /// Directory fsyncs done by [`Durability::flush`] (for tests and
    /// statistics).
    synced: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// Keyed by the folder itself (its device and inode, from its open
    /// handle): one fsync per directory however many entries were renamed
    /// into it, through however many handles. Not by its path: a folder
    /// the host's cache let go, replaced at its name and walked to again
    /// is another folder, owed its own fsync.
    pending: HashMap<Key, Dir>,
    failed: Vec<NotDurable>,
}

/// Which folder a [`Dir`] is open on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    /// Device and inode: the folder, however reached. (A folder held open
    /// while owed keeps its inode number from being reused.)
    Folder(u64, u64),
    /// Its descriptor's number, when `fstat` failed: unique while it is
    /// held here, so never taken for another folder (fail closed: at worst
    /// one folder synced twice).
    Handle(i32),
}

impl Key {
    fn of(dir: &Dir) -> Key {
        match rustix::fs::fstat(dir.fd()) {
            Ok(st) => Key::Folder(st.st_dev, st.st_ino),
            Err(_) => Key::Handle(std::os::fd::AsRawFd::as_raw_fd(&dir.fd())),
        }
    }
}

/// A directory whose fsync failed: the renames made in it since the last
/// successful flush may not survive a power cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotDurable {
    /// As declared (under the root), to match against resources.
    pub declared: PathBuf,
    /// The real path, for messages.
    pub path: PathBuf,
    /// What fsync said (`errno`).
    pub errno: i32,
}

impl NotDurable {
    /// The failure as a [`HostError`] naming the directory.
    pub fn error(&self) -> HostError {
        HostError::io(
            "sync directory",
            &self.path,
            std::io::Error::from_raw_os_error(self.errno),
        )
    }
}

impl Durability {
    /// Remembers that an entry was renamed into `dir`: its fsync is owed
    /// until the next [`Durability::flush`].
    /// Each one owed is held open (a descriptor), so at most
    /// [`Budget::pending`] are: the one that would be more flushes them all
    /// first (a failure is kept for the next flush, as ever).
    pub fn defer(&self, dir: &Dir) {
        let key = Key::of(dir);
        let mut state = self.lock();
        if state.pending.contains_key(&key) {
            return;
        }
        if state.pending.len() >= pending_most() {
            drop(state);
            // Its failures stay in the list: every later flush fails too.
            let _ = self.flush();
            state = self.lock();
        }
        state.pending.insert(key, dir.clone());
    }

    /// Whether any directory fsync is owed.
    pub fn is_pending(&self) -> bool {
        !self.lock().pending.is_empty()
    }

    /// fsyncs every directory owed, once each. Fails if any of them fails,
    /// or failed in an earlier flush whose failures were not yet taken
    /// ([`Durability::take_failures`]): until then nothing may be recorded
    /// as durable.
    pub fn flush(&self) -> Result<(), HostError> {
        // Taken out under the lock, synced outside it: a rename made
        // meanwhile (another thread) is owed to the next flush.
        let owed: Vec<Dir> = {
            let mut state = self.lock();
            if state.pending.is_empty() && state.failed.is_empty() {
                return Ok(());
            }
            state.pending.drain().map(|(_, dir)| dir).collect()
        };
        let mut failed = Vec::new();
        for dir in owed {
            self.inner.synced.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = dir.sync() {
                let errno = match &e {
                    HostError::Io { source, .. } => source.raw_os_error(),
                    _ => None,
                };
                failed.push(NotDurable {
                    declared: dir.declared().to_path_buf(),
                    path: dir.path().to_path_buf(),
                    errno: errno.unwrap_or(libc_eio()),
                });
            }
        }
        let mut state = self.lock();
        state.failed.extend(failed);
        match state.failed.first() {
            None => Ok(()),
            Some(first) => Err(first.error()),
        }
    }

    /// The directories whose fsync failed since the last call, emptied:
    /// the caller fails what was written there, and flushing works again.
    pub fn take_failures(&self) -> Vec<NotDurable> {
        std::mem::take(&mut self.lock().failed)
    }

    /// How many directory fsyncs [`Durability::flush`] has made so far.
    pub fn dir_syncs(&self) -> u64 {
        self.inner.synced.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Best effort: a pass that ended early still makes its renames
        // durable (nothing can be reported any more).
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for (_, dir) in state.pending.drain() {
            let _ = dir.sync();
        }
    }
}

/// `EIO`, for a failure without an errno (the directory could not be
/// reopened for some other reason).
fn libc_eio() -> i32 {
    rustix::io::Errno::IO.raw_os_error()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::Host;

    #[test]
    fn at_most_pending_most_directories_are_held_open() {
        // A directory owed an fsync is a descriptor held: the one past
        // pending_most() flushes those owed first, so a walk renaming into a
        // thousand folders never holds a thousand descriptors.
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path());
        let durability = host.durability().clone();
        let count = pending_most() + 44;
        for i in 0..count {
            std::fs::create_dir(root.path().join(format!("d{i}"))).unwrap();
            let at = host.locate(Path::new(&format!("/d{i}/f"))).unwrap();
            durability.defer(at.parent());
            durability.defer(at.parent());
            host.forget_dirs_under(Path::new(&format!("/d{i}")));
        }
        assert_eq!(
            durability.dir_syncs(),
            pending_most() as u64,
            "the owed directories flushed when one more came"
        );
        durability.flush().unwrap();
        assert_eq!(durability.dir_syncs(), count as u64, "each once");
        assert!(!durability.is_pending());
    }

    #[test]
    fn renames_into_one_directory_cost_one_fsync_per_flush() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("a/b")).unwrap();
        let host = Host::new(root.path());
        let durability = host.durability().clone();
        for i in 0..50 {
            let at = host.locate(Path::new(&format!("/a/b/f{i}"))).unwrap();
            let mut staged = at.stage_file().unwrap();
            staged.write_all(b"x").unwrap();
            staged.commit_deferred(&durability).unwrap();
        }
        let other = host.locate(Path::new("/a/g")).unwrap();
        other
            .stage_symlink(Path::new("b"))
            .unwrap()
            .commit_deferred(&durability)
            .unwrap();
        assert!(durability.is_pending());
        assert_eq!(durability.dir_syncs(), 0, "nothing synced before the flush");
        durability.flush().unwrap();
        assert_eq!(durability.dir_syncs(), 2, "one fsync per directory");
        assert!(!durability.is_pending());
        durability.flush().unwrap();
        assert_eq!(durability.dir_syncs(), 2, "nothing owed, nothing synced");
        assert_eq!(
            std::fs::read_dir(root.path().join("a/b")).unwrap().count(),
            50
        );
        // The immediate commit still syncs by itself and owes nothing.
        let at = host.locate(Path::new("/a/now")).unwrap();
        at.stage_file().unwrap().commit().unwrap();
        assert!(!durability.is_pending());
    }

    /// The folder a rename landed in is the one fsynced: a folder the
    /// host's cache let go, replaced meanwhile by another at its name, and
    /// renamed into again through a new walk is a second folder owed its
    /// own fsync (keyed by its path, the new one's rename was taken as owed
    /// already and never synced: the old folder, moved away, was).
    #[test]
    fn a_folder_replaced_after_the_cache_let_it_go_is_synced_too() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        std::fs::create_dir(root.path().join("e")).unwrap();
        let mut host = Host::new(root.path());
        host.dirs = Arc::new(Mutex::new(crate::dir_cache::DirCache::with_most(1)));
        let durability = host.durability().clone();
        let write = |declared: &str| {
            let at = host.locate(Path::new(declared)).unwrap();
            let mut staged = at.stage_file().unwrap();
            staged.write_all(b"x").unwrap();
            staged.commit_deferred(&durability).unwrap();
        };
        write("/d/f");
        std::fs::rename(root.path().join("d"), root.path().join("old")).unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        // /e used since: /d let go, and walked to again (the new folder).
        host.locate(Path::new("/e/x")).unwrap();
        write("/d/g");
        assert!(root.path().join("old/f").is_file());
        assert!(root.path().join("d/g").is_file());
        durability.flush().unwrap();
        assert_eq!(
            durability.dir_syncs(),
            2,
            "both folders renamed into are synced, the new one too"
        );
        // The same folder reached through two handles costs one fsync.
        host.locate(Path::new("/e/x")).unwrap();
        write("/d/h");
        host.locate(Path::new("/e/x")).unwrap();
        write("/d/i");
        durability.flush().unwrap();
        assert_eq!(durability.dir_syncs(), 3, "one fsync for one folder");
    }

    #[test]
    fn a_failed_directory_sync_stays_failed_until_taken() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        let host = Host::new(root.path());
        let durability = host.durability().clone();
        let dir = host.dir(Path::new("/d")).unwrap();
        // What `flush` records when fsync fails (EIO from the disk).
        let eio = NotDurable {
            declared: PathBuf::from("/d"),
            path: root.path().join("d"),
            errno: libc_eio(),
        };
        durability.lock().failed.push(eio.clone());
        durability.defer(&dir);
        let err = durability.flush().unwrap_err();
        assert!(err.to_string().contains("sync directory"), "{err}");
        assert_eq!(
            durability.dir_syncs(),
            1,
            "the owed directory was still synced"
        );
        assert!(durability.flush().is_err(), "sticky until taken");
        assert_eq!(durability.take_failures(), vec![eio]);
        durability.flush().unwrap();
        assert!(durability.take_failures().is_empty());
    }
}
