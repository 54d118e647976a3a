//! The walk: lists each directory without following a link, keeps directories open
//! for their queued files (within a descriptor budget) and queues the regular files for
//! the workers, hashing files itself once enough wait.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use datum_fingerprint::{Algorithm, Entry, Exclusions, FingerprintError, OtherKind};

use super::queue::{Done, Job, JobQueue, OpenDir, Parent, Slot};
use super::worker::Worker;
use super::{BATCH, MAX_BACKLOG, ScanStats, io_error};

/// A directory kept open while its files wait in the queue, so that a worker opens
/// `name` relative to it (`openat`) instead of resolving the whole path again: on the bench
/// estate that is 4-9 fewer path components looked up per file.
pub(super) struct DirHandle {
    pub(super) fd: OwnedFd,
    path: PathBuf,
    live: Arc<AtomicUsize>,
}

impl Drop for DirHandle {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many directories a walk may hold open: this process's share of its
/// open files for a Tree walk's folders ([`crate::descriptors::Budget::walk`],
/// an eighth of the soft limit less a reserve, 8 to 4,096; 120 at a soft
/// limit of 1,024), taken from the budget the folder cache, the fsync
/// backlog and the copies staged ahead share. Beyond it (the walk far ahead
/// of the workers in a tree of many directories, or deeper than it) files
/// are queued by path beneath the root, and a directory the walk goes down
/// from is closed while its subdirectories are walked and opened again
/// after, so a scan holds at most about this many whatever the tree's depth
/// or width.
pub(super) fn max_open_dirs() -> usize {
    crate::descriptors::Budget::of_this_process().walk
}

/// Where a queued file is.
pub(super) enum Target {
    /// `name` inside an open directory.
    At(Arc<DirHandle>, CString),
    /// A path relative to the scan's root directory, opened with
    /// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` (when too many directories
    /// are open), and its full path for messages.
    Beneath(Arc<OwnedFd>, PathBuf, PathBuf),
    /// A full path (a root that is itself a file).
    Path(PathBuf),
}

impl Target {
    pub(super) fn path(&self) -> PathBuf {
        match self {
            Target::At(dir, name) => dir.path.join(OsStr::from_bytes(name.to_bytes())),
            Target::Beneath(_, _, full) | Target::Path(full) => full.clone(),
        }
    }
}

/// Where an entry met by the walk is, for the system calls made on it.
pub(super) enum Place<'a> {
    Root(&'a Path),
    In(&'a Arc<DirHandle>, &'a CStr),
}

impl Place<'_> {
    fn lstat(&self) -> rustix::io::Result<Stat> {
        match self {
            Place::Root(p) => rustix::fs::lstat(*p),
            Place::In(dir, name) => rustix::fs::statat(&dir.fd, *name, AtFlags::SYMLINK_NOFOLLOW),
        }
    }

    fn open_dir(&self) -> rustix::io::Result<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match self {
            Place::Root(p) => rustix::fs::open(*p, flags, Mode::empty()),
            Place::In(dir, name) => rustix::fs::openat(&dir.fd, *name, flags, Mode::empty()),
        }
    }

    fn readlink(&self) -> rustix::io::Result<CString> {
        match self {
            Place::Root(p) => rustix::fs::readlink(*p, Vec::new()),
            Place::In(dir, name) => rustix::fs::readlinkat(&dir.fd, *name, Vec::new()),
        }
    }
}

/// A directory being walked: its entries still to walk, in name order.
struct Listed {
    /// Its id in the queue.
    id: usize,
    /// Its device and inode, to know it again when it is opened again.
    st_here: (u64, u64),
    /// Whether it was within the share of open directories when listed.
    share: bool,
    /// Whether it is let go while a subdirectory is walked.
    release: bool,
    /// Its handle, while it is held.
    held: Option<Arc<DirHandle>>,
    /// The entries not walked yet.
    kept: std::vec::IntoIter<(CString, FileType, Option<Stat>)>,
    /// The index of the next entry among its slots.
    next: usize,
}

pub(super) struct Walk<'a, 'w> {
    pub(super) root: &'a Path,
    /// The root directory, for files queued by relative path.
    pub(super) root_fd: Option<Arc<OwnedFd>>,
    pub(super) exclude: Option<&'a Exclusions>,
    pub(super) algorithm: Algorithm,
    pub(super) queue: &'a JobQueue,
    /// This thread's own worker, for when the backlog is full.
    pub(super) helper: &'a mut Worker<'w>,
    /// Files found since the last hand-over to the queue (one lock per batch, not per file).
    pub(super) pending: Vec<Job>,
    pub(super) open_dirs: Arc<AtomicUsize>,
    pub(super) max_open_dirs: usize,
    /// The most directory handles alive at once (for the tests).
    pub(super) peak_dirs: usize,
    pub(super) stats: ScanStats,
}

impl Walk<'_, '_> {
    /// Hands the files found so far to the workers, and helps them while the backlog is
    /// full, so that the walk never runs far ahead of the hashing.
    pub(super) fn flush(&mut self) -> Result<(), FingerprintError> {
        if !self.pending.is_empty() && self.queue.push(&mut self.pending) > MAX_BACKLOG {
            self.helper.help(MAX_BACKLOG)?;
        }
        Ok(())
    }

    fn fill(&self, at: Parent, value: Slot) {
        self.queue.lock().fill(at, value);
    }

    /// Lists the open directory `fd` (at `path`) and walks its entries; its fingerprint
    /// goes to `at` once they are all done. The folders under it are walked depth
    /// first, in name order, from a stack of their listings kept here rather than by
    /// recursion, so a chain of folders of any depth is walked in the same bounded
    /// stack (a repository's Tree source 2,000 folders deep overflowed the 8 MiB main
    /// thread's stack when each level was a call).
    pub(super) fn dir(
        &mut self,
        fd: OwnedFd,
        st: &Stat,
        path: &mut PathBuf,
        at: Parent,
    ) -> Result<(), FingerprintError> {
        let mut stack = vec![self.enter(fd, st, path, at)?];
        while let Some(top) = stack.last_mut() {
            let Some((name, file_type, st)) = top.kept.next() else {
                drop(top.held.take());
                stack.pop();
                // Hand this directory's files over now rather than after the next 64.
                self.flush()?;
                if !stack.is_empty() {
                    // The finished folder's own name, pushed by its parent.
                    path.pop();
                }
                continue;
            };
            let index = top.next;
            top.next += 1;
            let here = Some((top.id, index));
            let dir = self.held(&mut top.held, path, top.st_here)?;
            path.push(OsStr::from_bytes(name.to_bytes()));
            if file_type != FileType::Directory {
                let child = self.child(&dir, top.share, name, file_type, st, path, here);
                path.pop();
                child?;
                continue;
            }
            let opened = self.open_subdir(&Place::In(&dir, &name), path, here);
            drop(dir);
            // Past the share, this directory is not kept open while a subdirectory is
            // walked (a deep tree would hold one descriptor per level): it is let go once
            // the subdirectory is open, and opened again beneath the root for what follows.
            if top.release {
                top.held = None;
            }
            match opened {
                // The subdirectory is walked next; its name stays on `path` until
                // it is done.
                Ok(Some((fd, st))) => match self.enter(fd, &st, path, here) {
                    Ok(frame) => stack.push(frame),
                    Err(e) => {
                        path.pop();
                        return Err(e);
                    }
                },
                Ok(None) => {
                    path.pop();
                }
                Err(e) => {
                    path.pop();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Lists the open directory `fd` (at `path`) and registers it with a slot for each
    /// entry that is part of the tree: what [`Walk::dir`] then walks.
    fn enter(
        &mut self,
        fd: OwnedFd,
        st: &Stat,
        path: &mut PathBuf,
        at: Parent,
    ) -> Result<Listed, FingerprintError> {
        self.stats.dirs += 1;
        let st_here = (st.st_dev, st.st_ino);
        let live = self.open_dirs.fetch_add(1, Ordering::Relaxed);
        self.peak_dirs = self.peak_dirs.max(live + 1);
        let share = live < self.max_open_dirs;
        let handle = Arc::new(DirHandle {
            fd,
            path: path.clone(),
            live: Arc::clone(&self.open_dirs),
        });
        // The whole listing first, so its descriptor is closed before the recursion: a
        // deep tree then holds one descriptor per level, not two.
        let mut names = Vec::new();
        let mut listing =
            Dir::read_from(&handle.fd).map_err(|e| io_error(path, "opendir", e.into()))?;
        while let Some(item) = listing.read() {
            let item = item.map_err(|e| io_error(path, "readdir", e.into()))?;
            let name = item.file_name();
            if name != c"." && name != c".." {
                names.push((name.to_owned(), item.file_type()));
            }
        }
        drop(listing);

        // Types and exclusions before the directory is registered, so that it has a slot
        // for exactly the entries that are part of the tree.
        let mut kept = Vec::with_capacity(names.len());
        for (name, file_type) in names {
            path.push(OsStr::from_bytes(name.to_bytes()));
            let found = self.classify(&handle, &name, file_type, path);
            path.pop();
            if let Some((file_type, st)) = found? {
                kept.push((name, file_type, st));
            }
        }
        kept.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let rel = path.strip_prefix(self.root).unwrap_or(path).to_path_buf();
        let id = self.queue.lock().open_dir(OpenDir {
            parent: at,
            rel,
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            children: kept
                .iter()
                .map(|(name, ..)| (name.as_bytes().to_vec(), Slot::Pending))
                .collect(),
            remaining: kept.len(),
        });
        Ok(Listed {
            id,
            st_here,
            share,
            release: !share && self.root_fd.is_some(),
            held: Some(handle),
            kept: kept.into_iter(),
            next: 0,
        })
    }

    /// The directory at `path` (whose attributes are `st`), still open in `held` or
    /// opened again beneath the root without following a link; one found changed
    /// (another directory there now, or none) makes the scan unstable, as an entry
    /// that changes type does.
    fn held(
        &mut self,
        held: &mut Option<Arc<DirHandle>>,
        path: &Path,
        st: (u64, u64),
    ) -> Result<Arc<DirHandle>, FingerprintError> {
        if let Some(dir) = held {
            return Ok(Arc::clone(dir));
        }
        let unstable = || FingerprintError::Unstable {
            path: path.to_path_buf(),
        };
        let Some(root) = &self.root_fd else {
            return Err(unstable());
        };
        let rel = path.strip_prefix(self.root).unwrap_or(path);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let opened = if rel.as_os_str().is_empty() {
            rustix::fs::openat(&**root, c".", flags, Mode::empty())
        } else {
            rustix::fs::openat2(
                &**root,
                rel,
                flags,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            )
        };
        let fd = match opened {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR | Errno::XDEV) => return Err(unstable()),
            Err(e) => return Err(io_error(path, "open", e.into())),
        };
        let now = rustix::fs::fstat(&fd).map_err(|e| io_error(path, "fstat", e.into()))?;
        if (now.st_dev, now.st_ino) != st {
            return Err(unstable());
        }
        let live = self.open_dirs.fetch_add(1, Ordering::Relaxed);
        self.peak_dirs = self.peak_dirs.max(live + 1);
        let dir = Arc::new(DirHandle {
            fd,
            path: path.to_path_buf(),
            live: Arc::clone(&self.open_dirs),
        });
        *held = Some(Arc::clone(&dir));
        Ok(dir)
    }

    /// Opens the directory at `place` (without following a link) and reads its
    /// attributes from the descriptor; `None` when it vanished since the listing
    /// (filled into `at` as vanished).
    fn open_subdir(
        &mut self,
        place: &Place<'_>,
        path: &Path,
        at: Parent,
    ) -> Result<Option<(OwnedFd, Stat)>, FingerprintError> {
        let fd = match place.open_dir() {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                self.fill(at, Slot::Vanished);
                return Ok(None);
            }
            // Replaced by a link or a file since the listing.
            Err(Errno::LOOP | Errno::NOTDIR) => {
                return Err(FingerprintError::Unstable {
                    path: path.to_path_buf(),
                });
            }
            Err(e) => return Err(io_error(path, "open", e.into())),
        };
        // The directory's attributes from the descriptor: those of what is listed.
        let st = rustix::fs::fstat(&fd).map_err(|e| io_error(path, "fstat", e.into()))?;
        Ok(Some((fd, st)))
    }

    /// An entry's type (`lstat` when `readdir` gives none), unless excluded or vanished.
    fn classify(
        &mut self,
        dir: &Arc<DirHandle>,
        name: &CStr,
        file_type: FileType,
        path: &Path,
    ) -> Result<Option<(FileType, Option<Stat>)>, FingerprintError> {
        // d_type from readdir; a file system without it makes us ask lstat.
        let (file_type, st) = if file_type == FileType::Unknown {
            match Place::In(dir, name).lstat() {
                Ok(st) => (FileType::from_raw_mode(st.st_mode), Some(st)),
                Err(Errno::NOENT) => return Ok(None),
                Err(e) => return Err(io_error(path, "lstat", e.into())),
            }
        } else {
            (file_type, None)
        };
        if let Some(rules) = self.exclude {
            let rel = path.strip_prefix(self.root).unwrap_or(path);
            if rules.is_excluded(rel, file_type == FileType::Directory) {
                self.stats.excluded += 1;
                return Ok(None);
            }
        }
        Ok(Some((file_type, st)))
    }

    /// One directory entry that is part of the tree.
    #[expect(
        clippy::too_many_arguments,
        reason = "the walk's position: directory, entry, path and slot"
    )]
    fn child(
        &mut self,
        dir: &Arc<DirHandle>,
        share: bool,
        name: CString,
        file_type: FileType,
        st: Option<Stat>,
        path: &mut PathBuf,
        at: Parent,
    ) -> Result<(), FingerprintError> {
        if file_type == FileType::RegularFile {
            let target = match (&self.root_fd, share) {
                (_, true) | (None, false) => Target::At(Arc::clone(dir), name),
                (Some(root), false) => Target::Beneath(
                    Arc::clone(root),
                    path.strip_prefix(self.root).unwrap_or(path).to_path_buf(),
                    path.clone(),
                ),
            };
            return self.queue_file(target, at);
        }
        self.entry(&Place::In(dir, &name), file_type, st, path, at)
    }

    fn queue_file(&mut self, target: Target, at: Parent) -> Result<(), FingerprintError> {
        // Mode and owner come from the fstat after the open, with the bytes.
        self.pending.push(Job { target, at });
        if self.pending.len() >= 4 * BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Anything but a regular file inside a directory (or the root, whatever it is),
    /// finished into `at` (a vanished one as vanished). `st` is its lstat when already
    /// known.
    pub(super) fn entry(
        &mut self,
        place: &Place<'_>,
        file_type: FileType,
        st: Option<Stat>,
        path: &mut PathBuf,
        at: Parent,
    ) -> Result<(), FingerprintError> {
        if file_type == FileType::RegularFile {
            return self.queue_file(Target::Path(path.clone()), at);
        }
        if file_type == FileType::Directory {
            return match self.open_subdir(place, path, at)? {
                Some((fd, st)) => self.dir(fd, &st, path, at),
                None => Ok(()),
            };
        }
        let st = match st {
            Some(st) => st,
            None => match place.lstat() {
                Ok(st) => st,
                Err(Errno::NOENT) => {
                    self.fill(at, Slot::Vanished);
                    return Ok(());
                }
                Err(e) => return Err(io_error(path, "lstat", e.into())),
            },
        };
        if FileType::from_raw_mode(st.st_mode) != file_type {
            return Err(FingerprintError::Unstable { path: path.clone() });
        }
        self.stats.others += 1;
        let mode = st.st_mode & 0o7777;
        let entry = match file_type {
            FileType::Symlink => {
                let target = match place.readlink() {
                    Ok(t) => t,
                    Err(Errno::NOENT) => {
                        self.fill(at, Slot::Vanished);
                        return Ok(());
                    }
                    Err(Errno::INVAL) => {
                        return Err(FingerprintError::Unstable { path: path.clone() });
                    }
                    Err(e) => return Err(io_error(path, "readlink", e.into())),
                };
                Entry::Symlink {
                    mode,
                    target: target.into_bytes(),
                }
            }
            FileType::Fifo => Entry::Other {
                mode,
                kind: OtherKind::Fifo,
            },
            FileType::Socket => Entry::Other {
                mode,
                kind: OtherKind::Socket,
            },
            FileType::CharacterDevice => Entry::Other {
                mode,
                kind: OtherKind::CharDevice,
            },
            FileType::BlockDevice => Entry::Other {
                mode,
                kind: OtherKind::BlockDevice,
            },
            // Regular files and directories are handled above; a type the kernel does not
            // name is as good as changed under us.
            _ => return Err(FingerprintError::Unstable { path: path.clone() }),
        };
        let rel = path.strip_prefix(self.root).unwrap_or(path);
        let done = Done::leaf(self.helper.keep, self.algorithm, entry, rel)?;
        self.fill(at, Slot::Done(done));
        Ok(())
    }
}
