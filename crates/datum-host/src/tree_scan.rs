//! Reading a tree from the host for its Merkle fingerprint (the model and the hash
//! definitions are `datum_fingerprint`, which does no I/O): a walk with `lstat` semantics, then the regular files'
//! contents hashed in parallel.
//!
//! Owns: [`scan`], [`ScanOptions`], [`ScannedTree`]. Must not: follow a symbolic link
//! (never: not the root, not an entry, not during an open), write anything, or read a
//! file twice. The cost of a content pass is per-file system calls as much as bytes
//! (bench PEERS.md: ~4 µs of open/read/close per file against ~9 µs of SHA-256 for the
//! estate's average 14 KB file), so a file costs exactly one `open`, one `fstat` (which also
//! proves that what was opened is still a regular file, and gives the mode and owner
//! that belong to the bytes read), reads into a buffer reused by its worker, and `close`.
//! Files are opened relative to their directory (`openat`), which the walk keeps open
//! while they wait. The walk takes each entry's type from `readdir`, opens directories
//! (`O_DIRECTORY|O_NOFOLLOW`, then `fstat`) and calls `lstat` only for links and special
//! files. The walk runs while the workers already hash what it found.

use std::collections::VecDeque;
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use datum_fingerprint::{
    Algorithm, Exclusions, FingerprintError, FingerprintedTree, Node, OtherKind, fingerprint_tree,
};

/// Read buffer per worker: large enough that a 1 MiB file takes four reads, small
/// enough to stay in L2 while it is hashed.
const READ_BUFFER: usize = 256 * 1024;

/// Files a worker takes from the queue at a time: one lock per batch rather than per
/// file, small enough that the workers finish together.
const BATCH: usize = 16;

/// How to scan.
#[derive(Debug, Clone, Default)]
pub struct ScanOptions {
    /// Which fingerprint to compute.
    pub algorithm: Algorithm,
    /// Entries to leave out of the tree entirely (relative to the scanned root).
    pub exclude: Option<Exclusions>,
    /// Hashing threads (the walking thread is one of them); 0 = [`default_threads`].
    pub threads: usize,
    /// Counters the workers advance as they go, for a progress line on a terminal
    /// (another thread reads them while the scan runs).
    pub progress: Option<Arc<ScanProgress>>,
}

/// Live counters of a running scan: files and bytes hashed so far.
#[derive(Debug, Default)]
pub struct ScanProgress {
    files: AtomicU64,
    bytes: AtomicU64,
}

impl ScanProgress {
    /// Regular files hashed so far and their bytes.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.files.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// What a scan read, for progress lines and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Regular files hashed.
    pub files: u64,
    /// Directories listed (the root included, when it is one).
    pub dirs: u64,
    /// Symlinks and special files.
    pub others: u64,
    /// Content bytes hashed.
    pub bytes: u64,
    /// Entries left out by the exclusion rules (an excluded directory counts once).
    pub excluded: u64,
}

/// A scanned tree with every node's fingerprint.
#[derive(Debug, Clone)]
pub struct ScannedTree {
    /// The tree and its fingerprints.
    pub tree: FingerprintedTree,
    /// What was read.
    pub stats: ScanStats,
}

impl ScannedTree {
    /// The root fingerprint.
    pub fn root_hash(&self) -> datum_fingerprint::Digest {
        self.tree.root_hash()
    }
}

/// Scans the tree at `path` (never following links, the root included: a root that is a
/// symlink is a one-leaf tree) and fingerprints it.
///
/// An entry that disappears between the directory listing and its open is left out, as
/// if the listing had come a moment later; one that changes type in that window fails
/// the scan with [`FingerprintError::Unstable`].
pub fn scan(path: &Path, opts: &ScanOptions) -> Result<ScannedTree, FingerprintError> {
    scan_with(Start::Path, path, opts, max_open_dirs())
}

/// [`scan`] of a directory already open (reached through the host's
/// boundary, `datum_host::Located::open_dir`): nothing above it is looked up
/// again, so a parent swapped for a link meanwhile changes nothing. `path`
/// names it in messages.
pub fn scan_dir(
    dir: BorrowedFd<'_>,
    path: &Path,
    opts: &ScanOptions,
) -> Result<ScannedTree, FingerprintError> {
    scan_with(Start::Dir(dir), path, opts, max_open_dirs())
}

/// Where a scan starts.
#[derive(Clone, Copy)]
enum Start<'a> {
    /// The path itself (whatever it is: a root that is a link or a file is
    /// a one-leaf tree).
    Path,
    Dir(BorrowedFd<'a>),
}

fn scan_with(
    start: Start<'_>,
    path: &Path,
    opts: &ScanOptions,
    max_open_dirs: usize,
) -> Result<ScannedTree, FingerprintError> {
    let threads = match opts.threads {
        0 => default_threads(),
        n => n,
    };
    let queue = JobQueue::default();
    // The walk runs on this thread while `threads - 1` workers already hash what it has
    // found; when the walk is done this thread becomes a worker too. On two cores that
    // hides the walk (~10% of a warm pass) behind the hashing.
    //
    // Workers allocate nothing: their buffers are made here and their results go into
    // slots that the walk adds to the queue with each job. With a per-thread allocator
    // (the `datum` binary uses mimalloc) every allocating thread would otherwise keep
    // megabytes of its own pages, which eight workers multiply.
    let (walked, errors) = std::thread::scope(|s| {
        // A thread the system refuses to start just means fewer workers.
        let workers: Vec<_> = (1..threads)
            .filter_map(|_| {
                let worker = Worker::new(&queue, opts);
                std::thread::Builder::new()
                    .name("datum-hash".into())
                    .spawn_scoped(s, move || worker.run())
                    .ok()
            })
            .collect();
        let walked = walk_root(start, path, opts.exclude.as_ref(), &queue, max_open_dirs);
        if walked.is_err() {
            queue.abort();
        } else {
            queue.close();
        }
        let mut errors = vec![Worker::new(&queue, opts).run()];
        for worker in workers {
            // A panicked worker is counted as missing files below, never silently lost.
            errors.push(worker.join().unwrap_or(Ok(())));
        }
        (walked, errors)
    });
    let (skeleton, mut stats, jobs) = walked?;
    for result in errors {
        result?;
    }
    let QueueState { results, done, .. } = queue.into_state();
    if done != jobs || results.len() != jobs {
        return Err(FingerprintError::WorkerFailed {
            path: path.to_path_buf(),
        });
    }
    let mut hashed = results;
    for node in hashed.iter().flatten() {
        if let Node::File { size, .. } = node {
            stats.files += 1;
            stats.bytes += size;
        }
    }
    let node = skeleton
        .assemble(&mut hashed)
        .ok_or_else(|| FingerprintError::Unstable {
            path: path.to_path_buf(),
        })?;
    let tree = fingerprint_tree(node, opts.algorithm)?;
    Ok(ScannedTree { tree, stats })
}

/// Walks from the root, feeding regular files to `queue`; returns the skeleton, the
/// walk's counts and how many files were queued.
fn walk_root(
    start: Start<'_>,
    path: &Path,
    exclude: Option<&Exclusions>,
    queue: &JobQueue,
    max_open_dirs: usize,
) -> Result<(Skeleton, ScanStats, usize), FingerprintError> {
    let mut walk = Walk {
        root: path,
        root_fd: None,
        exclude,
        queue,
        pending: Vec::new(),
        queued: 0,
        open_dirs: Arc::new(AtomicUsize::new(0)),
        max_open_dirs,
        stats: ScanStats::default(),
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let root_dir = match start {
        Start::Dir(dir) => Some(
            rustix::fs::openat(dir, c".", flags, Mode::empty())
                .map_err(|e| io_error(path, "open", e.into()))?,
        ),
        Start::Path => match rustix::fs::open(path, flags, Mode::empty()) {
            Ok(fd) => Some(fd),
            // Not a directory (a file, a link): a one-leaf tree, below.
            Err(Errno::NOTDIR | Errno::LOOP) => None,
            Err(e) => return Err(io_error(path, "open", e.into())),
        },
    };
    if let Some(fd) = root_dir {
        // The root's own descriptor for files queued by relative path, and
        // one for the walk (which closes its own when the listing is read).
        let st = rustix::fs::fstat(&fd).map_err(|e| io_error(path, "fstat", e.into()))?;
        walk.root_fd = Some(Arc::new(
            rustix::fs::openat(&fd, c".", flags, Mode::empty())
                .map_err(|e| io_error(path, "open", e.into()))?,
        ));
        let skeleton = walk.dir(fd, &st, &mut path.to_path_buf())?;
        walk.flush();
        return Ok((skeleton, walk.stats, walk.queued));
    }
    let st = rustix::fs::lstat(path).map_err(|e| io_error(path, "lstat", e.into()))?;
    let skeleton = walk
        .entry(
            &Place::Root(path),
            FileType::from_raw_mode(st.st_mode),
            Some(st),
            &mut path.to_path_buf(),
        )?
        .ok_or_else(|| FingerprintError::Unstable {
            path: path.to_path_buf(),
        })?;
    walk.flush();
    Ok((skeleton, walk.stats, walk.queued))
}

/// The thread count used when [`ScanOptions::threads`] is 0: one per core, and at least
/// [`MIN_DEFAULT_THREADS`].
///
/// More threads than cores pay off when the page cache is cold: a worker waiting for the
/// disk holds no core, and the virtual disk of the bench machine answers several
/// outstanding reads faster than one at a time (PEERS.md: two `sha256sum -c` readers are
/// 1.7x one). When the cache is warm the extra threads only take turns on the cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .max(MIN_DEFAULT_THREADS)
}

/// See [`default_threads`].
pub const MIN_DEFAULT_THREADS: usize = 8;

/// Files found by the walk and not yet taken by a worker.
#[derive(Default)]
struct JobQueue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

#[derive(Default)]
struct QueueState {
    jobs: VecDeque<(usize, Target)>,
    /// One slot per queued file, filled by the worker that hashed it (`None` also for a
    /// file that vanished); grown by the walk, so workers never allocate.
    results: Vec<Option<Node>>,
    /// Files hashed (or found vanished) so far.
    done: usize,
    /// The walk has finished: no more jobs will come.
    closed: bool,
    /// Something failed: workers stop at once.
    aborted: bool,
}

impl JobQueue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A poisoned lock only means another worker panicked; the state itself (a queue
        // and two flags) is always consistent, and the missing results are detected.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, jobs: &mut Vec<(usize, Target)>) {
        let mut state = self.lock();
        let slots = state.results.len() + jobs.len();
        state.results.resize_with(slots, || None);
        state.jobs.extend(jobs.drain(..));
        drop(state);
        self.ready.notify_all();
    }

    /// Stores a batch's results (in the slots the walk made for them).
    fn finish(&self, done: &mut Vec<(usize, Option<Node>)>) {
        let mut state = self.lock();
        for (index, node) in done.drain(..) {
            if let Some(slot) = state.results.get_mut(index) {
                *slot = node;
                state.done += 1;
            }
        }
    }

    fn into_state(self) -> QueueState {
        self.state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    fn abort(&self) {
        self.lock().aborted = true;
        self.ready.notify_all();
    }

    /// Up to `BATCH` jobs; empty when the queue is closed and drained, or aborted.
    fn take(&self, into: &mut Vec<(usize, Target)>) {
        let mut state = self.lock();
        loop {
            if state.aborted {
                return;
            }
            if !state.jobs.is_empty() {
                let n = state.jobs.len().min(BATCH);
                into.extend(state.jobs.drain(..n));
                return;
            }
            if state.closed {
                return;
            }
            state = self
                .ready
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// A worker: hashes batches from the queue until it is drained; the first error stops
/// every worker. Everything it needs is allocated by the thread that creates it.
struct Worker<'a> {
    queue: &'a JobQueue,
    algorithm: Algorithm,
    progress: Option<&'a ScanProgress>,
    buf: Vec<u8>,
    batch: Vec<(usize, Target)>,
    done: Vec<(usize, Option<Node>)>,
}

impl<'a> Worker<'a> {
    fn new(queue: &'a JobQueue, opts: &'a ScanOptions) -> Worker<'a> {
        Worker {
            queue,
            algorithm: opts.algorithm,
            progress: opts.progress.as_deref(),
            buf: vec![0u8; READ_BUFFER],
            batch: Vec::with_capacity(BATCH),
            done: Vec::with_capacity(BATCH),
        }
    }

    fn run(mut self) -> Result<(), FingerprintError> {
        loop {
            self.queue.take(&mut self.batch);
            if self.batch.is_empty() {
                return Ok(());
            }
            for (index, target) in self.batch.drain(..) {
                match hash_file(&target, self.algorithm, &mut self.buf) {
                    Ok(node) => {
                        if let (Some(p), Some(Node::File { size, .. })) = (self.progress, &node) {
                            p.files.fetch_add(1, Ordering::Relaxed);
                            p.bytes.fetch_add(*size, Ordering::Relaxed);
                        }
                        self.done.push((index, node));
                    }
                    Err(e) => {
                        self.queue.abort();
                        return Err(e);
                    }
                }
            }
            self.queue.finish(&mut self.done);
        }
    }
}

/// The tree as walked: everything but the regular files' contents, which are indices
/// into the job list until the workers have hashed them.
enum Skeleton {
    Dir {
        mode: u32,
        uid: u32,
        gid: u32,
        children: Vec<(Vec<u8>, Skeleton)>,
    },
    File(usize),
    Leaf(Node),
}

impl Skeleton {
    /// Replaces file indices by the hashed nodes; `None` for a file that vanished.
    fn assemble(self, hashed: &mut [Option<Node>]) -> Option<Node> {
        match self {
            Skeleton::Dir {
                mode,
                uid,
                gid,
                children,
            } => Some(Node::Dir {
                mode,
                uid,
                gid,
                children: children
                    .into_iter()
                    .filter_map(|(name, child)| child.assemble(hashed).map(|node| (name, node)))
                    .collect(),
            }),
            Skeleton::File(index) => hashed.get_mut(index).and_then(Option::take),
            Skeleton::Leaf(node) => Some(node),
        }
    }
}

/// A directory kept open while its files wait in the queue, so that a worker opens
/// `name` relative to it (`openat`) instead of resolving the whole path again: on the bench
/// estate that is 4-9 fewer path components looked up per file.
struct DirHandle {
    fd: OwnedFd,
    path: PathBuf,
    live: Arc<AtomicUsize>,
}

impl Drop for DirHandle {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many directories may stay open for queued files: half of the descriptor limit
/// left after a reserve for the rest of the process, at most 4096. Beyond it (the walk far
/// ahead of the workers in a tree of many directories) files are queued by full path, so a
/// scan never runs the process out of descriptors.
fn max_open_dirs() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(4096 * 2 + 256);
    let budget = soft.saturating_sub(256) / 2;
    usize::try_from(budget.min(4096)).unwrap_or(4096)
}

/// Where a queued file is.
enum Target {
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
    fn path(&self) -> PathBuf {
        match self {
            Target::At(dir, name) => dir.path.join(OsStr::from_bytes(name.to_bytes())),
            Target::Beneath(_, _, full) | Target::Path(full) => full.clone(),
        }
    }
}

/// Where an entry met by the walk is, for the system calls made on it.
enum Place<'a> {
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

struct Walk<'a> {
    root: &'a Path,
    /// The root directory, for files queued by relative path.
    root_fd: Option<Arc<OwnedFd>>,
    exclude: Option<&'a Exclusions>,
    queue: &'a JobQueue,
    /// Files found since the last hand-over to the queue (one lock per batch, not per file).
    pending: Vec<(usize, Target)>,
    queued: usize,
    open_dirs: Arc<AtomicUsize>,
    max_open_dirs: usize,
    stats: ScanStats,
}

impl Walk<'_> {
    fn flush(&mut self) {
        if !self.pending.is_empty() {
            self.queue.push(&mut self.pending);
        }
    }

    /// Lists the open directory `fd` (at `path`) and walks its entries.
    fn dir(
        &mut self,
        fd: OwnedFd,
        st: &Stat,
        path: &mut PathBuf,
    ) -> Result<Skeleton, FingerprintError> {
        self.stats.dirs += 1;
        let share = self.open_dirs.fetch_add(1, Ordering::Relaxed) < self.max_open_dirs;
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

        let mut children = Vec::with_capacity(names.len());
        for (name, file_type) in names {
            path.push(OsStr::from_bytes(name.to_bytes()));
            let child = self.child(&handle, share, name, file_type, path);
            path.pop();
            if let Some((name, child)) = child? {
                children.push((name, child));
            }
        }
        // Hand this directory's files over now rather than after the next 64.
        self.flush();
        Ok(Skeleton::Dir {
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            children,
        })
    }

    /// One directory entry, unless excluded or vanished.
    fn child(
        &mut self,
        dir: &Arc<DirHandle>,
        share: bool,
        name: CString,
        file_type: FileType,
        path: &mut PathBuf,
    ) -> Result<Option<(Vec<u8>, Skeleton)>, FingerprintError> {
        let place = Place::In(dir, &name);
        // d_type from readdir; a file system without it makes us ask lstat.
        let (file_type, st) = if file_type == FileType::Unknown {
            match place.lstat() {
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
        if file_type == FileType::RegularFile {
            let target = match (&self.root_fd, share) {
                (_, true) | (None, false) => Target::At(Arc::clone(dir), name.clone()),
                (Some(root), false) => Target::Beneath(
                    Arc::clone(root),
                    path.strip_prefix(self.root).unwrap_or(path).to_path_buf(),
                    path.clone(),
                ),
            };
            return Ok(Some((name.into_bytes(), self.queue_file(target))));
        }
        let node = self.entry(&place, file_type, st, path)?;
        Ok(node.map(|node| (name.into_bytes(), node)))
    }

    fn queue_file(&mut self, target: Target) -> Skeleton {
        // Mode and owner come from the fstat after the open, with the bytes.
        let index = self.queued;
        self.queued += 1;
        self.pending.push((index, target));
        if self.pending.len() >= 4 * BATCH {
            self.flush();
        }
        Skeleton::File(index)
    }

    /// Anything but a regular file inside a directory (or the root, whatever it is);
    /// `None` if it vanished. `st` is its lstat when already known.
    fn entry(
        &mut self,
        place: &Place<'_>,
        file_type: FileType,
        st: Option<Stat>,
        path: &mut PathBuf,
    ) -> Result<Option<Skeleton>, FingerprintError> {
        if file_type == FileType::RegularFile {
            return Ok(Some(self.queue_file(Target::Path(path.clone()))));
        }
        if file_type == FileType::Directory {
            let fd = match place.open_dir() {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Ok(None),
                // Replaced by a link or a file since the listing.
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    return Err(FingerprintError::Unstable { path: path.clone() });
                }
                Err(e) => return Err(io_error(path, "open", e.into())),
            };
            // The directory's attributes from the descriptor: those of what is listed.
            let st = rustix::fs::fstat(&fd).map_err(|e| io_error(path, "fstat", e.into()))?;
            return self.dir(fd, &st, path).map(Some);
        }
        let st = match st {
            Some(st) => st,
            None => match place.lstat() {
                Ok(st) => st,
                Err(Errno::NOENT) => return Ok(None),
                Err(e) => return Err(io_error(path, "lstat", e.into())),
            },
        };
        if FileType::from_raw_mode(st.st_mode) != file_type {
            return Err(FingerprintError::Unstable { path: path.clone() });
        }
        self.stats.others += 1;
        let mode = st.st_mode & 0o7777;
        let kind = match file_type {
            FileType::Symlink => {
                let target = match place.readlink() {
                    Ok(t) => t,
                    Err(Errno::NOENT) => return Ok(None),
                    Err(Errno::INVAL) => {
                        return Err(FingerprintError::Unstable { path: path.clone() });
                    }
                    Err(e) => return Err(io_error(path, "readlink", e.into())),
                };
                return Ok(Some(Skeleton::Leaf(Node::Symlink {
                    mode,
                    target: target.into_bytes(),
                })));
            }
            FileType::Fifo => OtherKind::Fifo,
            FileType::Socket => OtherKind::Socket,
            FileType::CharacterDevice => OtherKind::CharDevice,
            FileType::BlockDevice => OtherKind::BlockDevice,
            // Regular files and directories are handled above; a type the kernel does not
            // name is as good as changed under us.
            _ => return Err(FingerprintError::Unstable { path: path.clone() }),
        };
        Ok(Some(Skeleton::Leaf(Node::Other { mode, kind })))
    }
}

/// Opens, checks and hashes one regular file.
fn hash_file(
    target: &Target,
    algorithm: Algorithm,
    buf: &mut [u8],
) -> Result<Option<Node>, FingerprintError> {
    // NOFOLLOW: a file replaced by a link since the listing fails with ELOOP instead of
    // being followed. NONBLOCK: a file replaced by a fifo cannot hang the scan. NOCTTY: a
    // terminal device cannot become our controlling terminal.
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let opened = match target {
        Target::At(dir, name) => rustix::fs::openat(&dir.fd, name.as_c_str(), flags, Mode::empty()),
        Target::Beneath(root, rel, _) => rustix::fs::openat2(
            root.as_fd(),
            rel,
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ),
        Target::Path(path) => rustix::fs::open(path, flags, Mode::empty()),
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => {
            return Err(FingerprintError::Unstable {
                path: target.path(),
            });
        }
        Err(e) => return Err(io_error(&target.path(), "open", e.into())),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| io_error(&target.path(), "fstat", e.into()))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(FingerprintError::Unstable {
            path: target.path(),
        });
    }
    let mut hasher = algorithm.content_hasher();
    let mut size = 0u64;
    let expected = u64::try_from(st.st_size).unwrap_or(0);
    loop {
        match rustix::io::read(&fd, &mut *buf) {
            Ok(0) => break,
            Ok(n) => {
                let chunk = buf.get(..n).unwrap_or_default();
                hasher.update(chunk);
                size += n as u64;
                datum_core::progress::bytes_hashed(n as u64);
                // A short read from a regular file means end of file; having also reached
                // the size fstat gave, the usual extra read that returns 0 would only cost
                // a system call per file (~5% of a warm pass over small files).
                if n < buf.len() && size >= expected {
                    break;
                }
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(io_error(&target.path(), "read", e.into())),
        }
    }
    datum_core::progress::file_hashed();
    Ok(Some(Node::File {
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        size,
        content: hasher.finish(),
    }))
}

fn io_error(path: &Path, op: &'static str, source: std::io::Error) -> FingerprintError {
    FingerprintError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, bytes: &[u8]) {
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn files_queued_by_path_hash_like_files_opened_in_their_directory() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["a", "a/b", "c"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
            for i in 0..20 {
                write(
                    &dir.path().join(format!("{sub}/f{i}")),
                    format!("{sub}{i}").as_bytes(),
                );
            }
        }
        for threads in [1, 3] {
            let opts = ScanOptions {
                threads,
                ..ScanOptions::default()
            };
            let shared = scan_with(Start::Path, dir.path(), &opts, 4096).unwrap();
            let open =
                rustix::fs::open(dir.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
                    .unwrap();
            // 0: every file by relative path; 2: the first directories shared, then paths.
            for limit in [0, 2] {
                let limited =
                    scan_with(Start::Dir(open.as_fd()), dir.path(), &opts, limit).unwrap();
                assert_eq!(
                    limited.tree, shared.tree,
                    "limit {limit}, {threads} threads"
                );
                assert_eq!(limited.stats, shared.stats);
            }
            assert_eq!(shared.stats.files, 60);
        }
    }

    #[test]
    fn the_descriptor_budget_leaves_room_for_the_process() {
        let n = max_open_dirs();
        assert!((1..=4096).contains(&n), "{n}");
    }
}
