//! Reading a tree from the host for its Merkle fingerprint (the model and the hash
//! definitions are `datum_fingerprint`, which does no I/O): a walk with `lstat` semantics
//! while the regular files' contents are hashed in parallel, each node fingerprinted as
//! soon as its children are ([`scan`] keeps every node, [`scan_root`] only what the open
//! directories still need, so its memory follows the tree's depth, not its size).
//!
//! Owns: [`scan`], [`scan_root`], [`ScanOptions`], [`ScannedTree`]. Must not: follow a symbolic link
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

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use datum_fingerprint::{
    Algorithm, Digest, Entry, Exclusions, FingerprintError, FingerprintedNode, FingerprintedTree,
    OtherKind, dir_hash, leaf_hash,
};

/// Read buffer per worker: large enough that a 1 MiB file takes eight reads (a few µs of
/// system calls against ~1 ms of hashing), small enough to stay in L2 while it is hashed;
/// eight workers hold 1 MiB of them (256 KiB each made 2 MiB of a 16 MiB budget for
/// `datum fingerprint`).
const READ_BUFFER: usize = 128 * 1024;

/// See [`QueueState::cold`].
const COLD_READS: u64 = 16;
const COLD_SHARE: u64 = 64;

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
    pub fn root_hash(&self) -> Digest {
        self.tree.root_hash()
    }
}

/// A tree's root fingerprint without the tree: what [`scan_root`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScannedRoot {
    /// The root fingerprint (equal to [`ScannedTree::root_hash`] of the same tree).
    pub hash: Digest,
    /// What was read.
    pub stats: ScanStats,
}

/// Scans the tree at `path` (never following links, the root included: a root that is a
/// symlink is a one-leaf tree) and fingerprints it, keeping every node's fingerprint.
///
/// An entry that disappears between the directory listing and its open is left out, as
/// if the listing had come a moment later; one that changes type in that window fails
/// the scan with [`FingerprintError::Unstable`].
pub fn scan(path: &Path, opts: &ScanOptions) -> Result<ScannedTree, FingerprintError> {
    let scanned = scan_with(Start::Path, path, opts, max_open_dirs(), Keep::Tree)?;
    into_tree(scanned, opts.algorithm, path)
}

/// [`scan`] for the root fingerprint alone, in memory that grows with the tree's depth and
/// its directories' widths, not with its number of files: each node is hashed as soon as
/// its children are, and then only its hash is kept, in its parent, until that parent is
/// hashed in turn. The walk stays at most a bounded number of files ahead of the hashing
/// (it hashes files itself while the backlog is full), so the directories held open for
/// queued files are bounded too. Same rules, same errors, same hash as [`scan`].
pub fn scan_root(path: &Path, opts: &ScanOptions) -> Result<ScannedRoot, FingerprintError> {
    let scanned = scan_with(Start::Path, path, opts, max_open_dirs(), Keep::Hashes)?;
    Ok(ScannedRoot {
        hash: scanned.root.hash(),
        stats: scanned.stats,
    })
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
    let scanned = scan_with(Start::Dir(dir), path, opts, max_open_dirs(), Keep::Tree)?;
    into_tree(scanned, opts.algorithm, path)
}

/// [`scan_root`] of a directory already open (a folder the operator named,
/// `crate::named::open_dir`): the root hash alone, in the same bounded memory.
pub fn scan_root_dir(
    dir: BorrowedFd<'_>,
    path: &Path,
    opts: &ScanOptions,
) -> Result<ScannedRoot, FingerprintError> {
    let scanned = scan_with(Start::Dir(dir), path, opts, max_open_dirs(), Keep::Hashes)?;
    Ok(ScannedRoot {
        hash: scanned.root.hash(),
        stats: scanned.stats,
    })
}

/// Asked about each directory of a kept tree as soon as it is fingerprinted, with its
/// path relative to the root and its node (entries included): `true` drops its entries
/// from the kept tree (the directory's own node and hash stay). It runs on the scan's
/// threads, under the scan's lock, so it should be quick.
#[derive(Clone)]
pub struct Prune(pub Arc<PruneFn>);

/// The question [`Prune`] asks.
pub type PruneFn = dyn Fn(&Path, &FingerprintedNode) -> bool + Send + Sync;

impl std::fmt::Debug for Prune {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prune")
    }
}

/// [`scan`], keeping of each directory that `prune` accepts only its own node (see
/// [`scan_dir_pruned`]): what lets a caller take each directory's entries as the scan
/// finishes it, so that the whole tree is never held.
pub fn scan_pruned(
    path: &Path,
    opts: &ScanOptions,
    prune: Prune,
) -> Result<ScannedTree, FingerprintError> {
    pruned_tree(Start::Path, path, opts, prune)
}

/// [`scan_dir`], keeping of each directory that `prune` accepts only its own node: what
/// lets a comparison prove equal subtrees while the scan runs, so that the tree kept is
/// the part that differs (and the directories above it), not the whole tree. The root
/// hash and every kept node are those of [`scan_dir`].
pub fn scan_dir_pruned(
    dir: BorrowedFd<'_>,
    path: &Path,
    opts: &ScanOptions,
    prune: Prune,
) -> Result<ScannedTree, FingerprintError> {
    pruned_tree(Start::Dir(dir), path, opts, prune)
}

fn pruned_tree(
    start: Start<'_>,
    path: &Path,
    opts: &ScanOptions,
    prune: Prune,
) -> Result<ScannedTree, FingerprintError> {
    let scanned = scan_with_prune(start, path, opts, max_open_dirs(), Keep::Tree, Some(prune))?;
    into_tree(scanned, opts.algorithm, path)
}

fn into_tree(
    scanned: Scanned,
    algorithm: Algorithm,
    path: &Path,
) -> Result<ScannedTree, FingerprintError> {
    match scanned.root {
        Done::Node(root) => Ok(ScannedTree {
            tree: FingerprintedTree { algorithm, root },
            stats: scanned.stats,
        }),
        // A scan that keeps the tree makes nodes only; a bare hash here is a bug.
        Done::Hash(_) => Err(FingerprintError::WorkerFailed {
            path: path.to_path_buf(),
        }),
    }
}

/// Where a scan starts.
#[derive(Clone, Copy)]
enum Start<'a> {
    /// The path itself (whatever it is: a root that is a link or a file is
    /// a one-leaf tree).
    Path,
    Dir(BorrowedFd<'a>),
}

/// What a scan keeps of each finished node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Keep {
    /// Its hash only (the root's is the answer).
    #[default]
    Hashes,
    /// The whole fingerprinted node, children included.
    Tree,
}

/// Files the walk may have queued and not yet seen hashed before it hashes files itself:
/// enough to keep every worker busy, few enough that the directories they hold open and
/// the names waiting in them stay small whatever the number of files.
const MAX_BACKLOG: usize = 1024;

/// What [`scan_with`] found.
struct Scanned {
    root: Done,
    stats: ScanStats,
    /// The most directories that were open (listed, not yet fingerprinted) at once.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "the tests check the bound on open directories")
    )]
    peak_open: usize,
    /// Threads that hashed files (the walking thread included): one per core while the
    /// files' bytes are in the page cache, more once a read waited for the disk (see
    /// [`default_threads`]).
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "the tests check the threads that hashed")
    )]
    hashing_threads: usize,
    /// Whether the standby threads were woken ([`QueueState::cold`]).
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "the tests check when the cache counts as cold")
    )]
    cold: bool,
}

fn scan_with(
    start: Start<'_>,
    path: &Path,
    opts: &ScanOptions,
    max_open_dirs: usize,
    keep: Keep,
) -> Result<Scanned, FingerprintError> {
    scan_with_prune(start, path, opts, max_open_dirs, keep, None)
}

fn scan_with_prune(
    start: Start<'_>,
    path: &Path,
    opts: &ScanOptions,
    max_open_dirs: usize,
    keep: Keep,
    prune: Option<Prune>,
) -> Result<Scanned, FingerprintError> {
    // A worker per core (the walking thread hashes only once the walk is done, or while
    // it is far ahead); the others stand by until reads wait for the disk.
    let (threads, active) = match opts.threads {
        0 => (default_threads(), hashing_threads_when_warm()),
        n => (n, n),
    };
    let queue = JobQueue::new(opts.algorithm, keep);
    queue.lock().prune = prune;
    // The walk runs on this thread while `threads - 1` workers already hash what it has
    // found; when the walk is done this thread becomes a worker too. On two cores that
    // hides the walk (~10% of a warm pass) behind the hashing.
    //
    // Workers allocate nothing (when only hashes are kept): their buffers are made here,
    // and a finished file or directory becomes a hash in a slot its parent already has.
    // With a per-thread allocator (the `datum` binary uses mimalloc) every allocating
    // thread would otherwise keep megabytes of its own pages, which eight workers multiply.
    let (walked, errors) = std::thread::scope(|s| {
        // A thread the system refuses to start just means fewer workers.
        let workers: Vec<_> = (1..threads)
            .filter_map(|i| {
                let mut worker = Worker::new(&queue, opts, i >= active);
                std::thread::Builder::new()
                    .name("datum-hash".into())
                    .spawn_scoped(s, move || worker.run())
                    .ok()
            })
            .collect();
        let mut helper = Worker::new(&queue, opts, false);
        let walked = walk_root(start, path, opts, &queue, &mut helper, max_open_dirs);
        if walked.is_err() {
            queue.abort();
        } else {
            queue.close();
        }
        let mut errors = vec![helper.run()];
        for worker in workers {
            // A panicked worker leaves its files unhashed and so the root unfinished,
            // which is reported below, never silently lost.
            errors.push(worker.join().unwrap_or(Ok(())));
        }
        (walked, errors)
    });
    let mut stats = walked?;
    for result in errors {
        result?;
    }
    let state = queue.into_state();
    stats.files = state.files;
    stats.bytes = state.bytes;
    let unfinished = state.open.iter().any(Option::is_some);
    match state.root {
        Some(Slot::Done(root)) if !unfinished => Ok(Scanned {
            root,
            stats,
            peak_open: state.peak_open,
            hashing_threads: state.hashing_threads,
            cold: state.cold,
        }),
        Some(Slot::Vanished) => Err(FingerprintError::Unstable {
            path: path.to_path_buf(),
        }),
        _ => Err(FingerprintError::WorkerFailed {
            path: path.to_path_buf(),
        }),
    }
}

/// Walks from the root, feeding regular files to `queue` and finishing everything else
/// itself; returns the walk's counts.
fn walk_root(
    start: Start<'_>,
    path: &Path,
    opts: &ScanOptions,
    queue: &JobQueue,
    helper: &mut Worker<'_>,
    max_open_dirs: usize,
) -> Result<ScanStats, FingerprintError> {
    let mut walk = Walk {
        root: path,
        root_fd: None,
        exclude: opts.exclude.as_ref(),
        algorithm: opts.algorithm,
        queue,
        helper,
        pending: Vec::new(),
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
        walk.dir(fd, &st, &mut path.to_path_buf(), None)?;
        walk.flush()?;
        return Ok(walk.stats);
    }
    let st = rustix::fs::lstat(path).map_err(|e| io_error(path, "lstat", e.into()))?;
    walk.entry(
        &Place::Root(path),
        FileType::from_raw_mode(st.st_mode),
        Some(st),
        &mut path.to_path_buf(),
        None,
    )?;
    walk.flush()?;
    Ok(walk.stats)
}

/// The most threads used when [`ScanOptions::threads`] is 0: one per core, and at least
/// [`MIN_DEFAULT_THREADS`]. While the files are read from the page cache only a worker per
/// core (and the walking thread) hash; the rest stand by until reads wait for the disk (a
/// first read with `RWF_NOWAIT` says so, or the file system cannot say; see
/// `QueueState::cold`), and from then on all of them hash.
///
/// More threads than cores pay off when the page cache is cold: a worker waiting for the
/// disk holds no core, and the virtual disk of the bench machine answers several
/// outstanding reads faster than one at a time (PEERS.md: two `sha256sum -c` readers are
/// 1.7x one). When the cache is warm the extra threads would only take turns on the
/// cores, and each allocating thread keeps pages of its own (with mimalloc, the `datum`
/// binary's allocator): five such threads were ~6 MiB of a 51 MiB check of a Tree of
/// 200,000 files.
pub fn default_threads() -> usize {
    cores().max(MIN_DEFAULT_THREADS)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Threads that hash while the files are in the page cache: a worker per core, and the
/// walking thread.
fn hashing_threads_when_warm() -> usize {
    cores() + 1
}

/// See [`default_threads`].
pub const MIN_DEFAULT_THREADS: usize = 8;

/// Where a finished node goes: slot `.1` of open directory `.0`, or (`None`) the root.
type Parent = Option<(usize, usize)>;

/// A finished node: its hash, or (when the tree is kept) the whole fingerprinted node.
enum Done {
    Hash(Digest),
    Node(FingerprintedNode),
}

impl Done {
    fn hash(&self) -> Digest {
        *self.hash_ref()
    }

    fn hash_ref(&self) -> &Digest {
        match self {
            Done::Hash(hash) => hash,
            Done::Node(node) => &node.hash,
        }
    }

    fn leaf(
        keep: Keep,
        algorithm: Algorithm,
        entry: Entry,
        path: &Path,
    ) -> Result<Done, FingerprintError> {
        let hash = leaf_hash(algorithm, &entry, path)?;
        Ok(match keep {
            Keep::Hashes => Done::Hash(hash),
            Keep::Tree => Done::Node(FingerprintedNode {
                hash,
                entry,
                children: BTreeMap::new(),
            }),
        })
    }
}

/// One entry of an open directory.
enum Slot {
    /// Not fingerprinted yet.
    Pending,
    /// Gone between the listing and its open: left out, as if listed a moment later.
    Vanished,
    Done(Done),
}

/// A directory listed by the walk whose entries are not all fingerprinted yet.
struct OpenDir {
    parent: Parent,
    /// Its path relative to the scanned root (for [`Prune`]).
    rel: PathBuf,
    mode: u32,
    uid: u32,
    gid: u32,
    /// Every entry not excluded, in raw byte order of the names (the hash's order).
    children: Vec<(Vec<u8>, Slot)>,
    /// Entries still `Pending`.
    remaining: usize,
}

impl OpenDir {
    /// The directory's fingerprint from its finished entries.
    fn finish(self, algorithm: Algorithm, keep: Keep, prune: Option<&Prune>) -> Done {
        let entry = Entry::Dir {
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
        };
        let present = || {
            self.children.iter().filter_map(|(name, slot)| match slot {
                Slot::Done(done) => Some((name.as_slice(), done)),
                Slot::Pending | Slot::Vanished => None,
            })
        };
        let count = present().count();
        let hash = dir_hash(
            algorithm,
            &entry,
            count,
            present().map(|(name, done)| (name, done.hash_ref())),
        );
        match keep {
            Keep::Hashes => Done::Hash(hash),
            Keep::Tree => {
                let mut node = FingerprintedNode {
                    hash,
                    entry,
                    children: self
                        .children
                        .into_iter()
                        .filter_map(|(name, slot)| match slot {
                            Slot::Done(Done::Node(node)) => Some((name, node)),
                            Slot::Done(Done::Hash(_)) | Slot::Pending | Slot::Vanished => None,
                        })
                        .collect(),
                };
                if prune.is_some_and(|p| (p.0)(&self.rel, &node)) {
                    node.children.clear();
                }
                Done::Node(node)
            }
        }
    }
}

/// A regular file found by the walk, and where its fingerprint goes.
struct Job {
    target: Target,
    at: Parent,
}

/// Files found by the walk and not yet taken by a worker, and the directories waiting for
/// them.
struct JobQueue {
    state: Mutex<QueueState>,
    /// Jobs were queued, or the queue closed or aborted.
    ready: Condvar,
    /// The reads turned cold (standby workers start), or the queue closed or aborted.
    /// Apart from `ready`, so that queueing jobs does not wake the standby workers.
    cold_ready: Condvar,
}

#[derive(Default)]
struct QueueState {
    algorithm: Algorithm,
    keep: Keep,
    prune: Option<Prune>,
    jobs: VecDeque<Job>,
    /// Directories with entries still pending, by id (`None`: a free id, in `free`).
    open: Vec<Option<OpenDir>>,
    free: Vec<usize>,
    /// The most directories open at once (`open.len() - free.len()` at its highest).
    peak_open: usize,
    /// The root, once finished.
    root: Option<Slot>,
    /// Regular files hashed and their bytes.
    files: u64,
    bytes: u64,
    /// The walk has finished: no more jobs will come.
    closed: bool,
    /// Something failed: workers stop at once.
    aborted: bool,
    /// Enough reads waited for the disk (or could not tell) that standby workers hash
    /// too: at least [`COLD_READS`], and one in [`COLD_SHARE`] of the files hashed. A
    /// few files the kernel evicted from a warm cache (a proactive reclaim, as DAMON's
    /// `pageout` on the bench machine, leaves ~300 of 200,000) do not count.
    cold: bool,
    /// Files whose first read waited for the disk.
    cold_reads: u64,
    /// Threads that took jobs.
    hashing_threads: usize,
}

impl QueueState {
    /// Registers a listed directory; one without entries is finished at once.
    fn open_dir(&mut self, dir: OpenDir) -> usize {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.open.push(None);
                self.open.len() - 1
            }
        };
        if let Some(free) = self.open.get_mut(id) {
            *free = Some(dir);
        }
        self.peak_open = self.peak_open.max(self.open.len() - self.free.len());
        self.settle(id);
        id
    }

    /// Puts a finished (or vanished) node in its slot, and finishes every directory that
    /// this completes, up the tree.
    fn fill(&mut self, at: Parent, value: Slot) {
        let Some((id, index)) = at else {
            self.root = Some(value);
            return;
        };
        if let Some(Some(dir)) = self.open.get_mut(id)
            && let Some((_, slot)) = dir.children.get_mut(index)
            && matches!(slot, Slot::Pending)
        {
            *slot = value;
            dir.remaining -= 1;
        }
        // Otherwise a slot filled twice or never made: a bug, and its directory stays open,
        // which the scan reports as unfinished.
        self.settle(id);
    }

    /// Finishes directory `id` if it has nothing pending, and its parents likewise.
    fn settle(&mut self, mut id: usize) {
        loop {
            if !matches!(self.open.get(id), Some(Some(dir)) if dir.remaining == 0) {
                return;
            }
            let Some(dir) = self.open.get_mut(id).and_then(Option::take) else {
                return;
            };
            self.free.push(id);
            let parent = dir.parent;
            let done = Slot::Done(dir.finish(self.algorithm, self.keep, self.prune.as_ref()));
            match parent {
                None => {
                    self.root = Some(done);
                    return;
                }
                Some((up, index)) => {
                    if let Some(Some(up_dir)) = self.open.get_mut(up)
                        && let Some((_, slot)) = up_dir.children.get_mut(index)
                        && matches!(slot, Slot::Pending)
                    {
                        *slot = done;
                        up_dir.remaining -= 1;
                    }
                    id = up;
                }
            }
        }
    }
}

impl JobQueue {
    fn new(algorithm: Algorithm, keep: Keep) -> JobQueue {
        JobQueue {
            state: Mutex::new(QueueState {
                algorithm,
                keep,
                ..QueueState::default()
            }),
            ready: Condvar::new(),
            cold_ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A poisoned lock only means another worker panicked; the state itself is
        // changed one whole step at a time, and the missing results are detected.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `jobs`; returns how many files are queued now.
    fn push(&self, jobs: &mut Vec<Job>) -> usize {
        let mut state = self.lock();
        state.jobs.extend(jobs.drain(..));
        let backlog = state.jobs.len();
        drop(state);
        self.ready.notify_all();
        backlog
    }

    /// Stores a batch's results in the slots their directories keep for them.
    /// `cold`: how many of them waited for the disk (see [`QueueState::cold`]).
    fn finish(&self, done: &mut Vec<(Parent, Slot, u64)>, cold: u64) {
        let mut state = self.lock();
        state.cold_reads += cold;
        if !state.cold
            && state.cold_reads >= COLD_READS
            && state.cold_reads * COLD_SHARE >= state.files + done.len() as u64
        {
            state.cold = true;
            self.cold_ready.notify_all();
        }
        for (at, slot, size) in done.drain(..) {
            if matches!(slot, Slot::Done(_)) {
                state.files += 1;
                state.bytes += size;
            }
            state.fill(at, slot);
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
        self.cold_ready.notify_all();
    }

    fn abort(&self) {
        self.lock().aborted = true;
        self.ready.notify_all();
        self.cold_ready.notify_all();
    }

    /// Counts a thread that hashes.
    fn count_hashing_thread(&self) {
        self.lock().hashing_threads += 1;
    }

    /// For a standby worker: waits until reads turn cold (true: start hashing) or the
    /// queue closes or aborts first (false).
    fn wait_for_cold(&self) -> bool {
        let mut state = self.lock();
        while !state.cold && !state.closed && !state.aborted {
            state = self
                .cold_ready
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.cold && !state.aborted
    }

    /// Up to `BATCH` jobs; empty when the queue is closed and drained, or aborted.
    fn take(&self, into: &mut Vec<Job>) {
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

    /// Up to `BATCH` jobs if more than `limit` are queued (never waits).
    fn take_over(&self, limit: usize, into: &mut Vec<Job>) {
        let mut state = self.lock();
        if !state.aborted && state.jobs.len() > limit {
            let n = state.jobs.len().min(BATCH);
            into.extend(state.jobs.drain(..n));
        }
    }
}

/// A worker: hashes batches from the queue until it is drained; the first error stops
/// every worker. Everything it needs is allocated by the thread that creates it.
struct Worker<'a> {
    queue: &'a JobQueue,
    algorithm: Algorithm,
    keep: Keep,
    progress: Option<&'a ScanProgress>,
    buf: Vec<u8>,
    batch: Vec<Job>,
    done: Vec<(Parent, Slot, u64)>,
    /// Waits for a read that waited for the disk before it takes jobs.
    standby: bool,
    /// Has hashed a batch (counted once in the scan's stats).
    counted: bool,
    /// Files of the current batch whose first read waited for the disk.
    cold: u64,
}

impl<'a> Worker<'a> {
    fn new(queue: &'a JobQueue, opts: &'a ScanOptions, standby: bool) -> Worker<'a> {
        let keep = queue.lock().keep;
        Worker {
            queue,
            algorithm: opts.algorithm,
            keep,
            progress: opts.progress.as_deref(),
            buf: vec![0u8; READ_BUFFER],
            batch: Vec::with_capacity(BATCH),
            done: Vec::with_capacity(BATCH),
            standby,
            counted: false,
            cold: 0,
        }
    }

    fn run(&mut self) -> Result<(), FingerprintError> {
        if self.standby && !self.queue.wait_for_cold() {
            return Ok(());
        }
        loop {
            self.queue.take(&mut self.batch);
            if self.batch.is_empty() {
                return Ok(());
            }
            self.hash_batch()?;
        }
    }

    /// Hashes batches while more than `limit` files are queued (the walk, ahead).
    fn help(&mut self, limit: usize) -> Result<(), FingerprintError> {
        loop {
            self.queue.take_over(limit, &mut self.batch);
            if self.batch.is_empty() {
                return Ok(());
            }
            self.hash_batch()?;
        }
    }

    fn hash_batch(&mut self) -> Result<(), FingerprintError> {
        if !self.counted {
            self.counted = true;
            self.queue.count_hashing_thread();
        }
        // Taken out and put back, so that its allocation is reused.
        let mut batch = std::mem::take(&mut self.batch);
        let mut failed = None;
        for job in batch.drain(..) {
            match self.hash_one(&job.target) {
                Ok(Some((done, size))) => self.done.push((job.at, Slot::Done(done), size)),
                Ok(None) => self.done.push((job.at, Slot::Vanished, 0)),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        self.batch = batch;
        if let Some(e) = failed {
            self.done.clear();
            self.queue.abort();
            return Err(e);
        }
        self.queue
            .finish(&mut self.done, std::mem::take(&mut self.cold));
        Ok(())
    }

    fn hash_one(&mut self, target: &Target) -> Result<Option<(Done, u64)>, FingerprintError> {
        let Some((entry, cache)) = hash_file(target, self.algorithm, &mut self.buf)? else {
            return Ok(None);
        };
        if cache == Cache::Cold {
            self.cold += 1;
        }
        let size = match entry {
            Entry::File { size, .. } => size,
            _ => 0,
        };
        if let Some(p) = self.progress {
            p.files.fetch_add(1, Ordering::Relaxed);
            p.bytes.fetch_add(size, Ordering::Relaxed);
        }
        // The content hash was made with the algorithm's own function, so this cannot
        // fail; the path is looked up only if it does.
        let done =
            Done::leaf(self.keep, self.algorithm, entry, Path::new("")).map_err(|e| match e {
                FingerprintError::ContentFunction {
                    algorithm,
                    expected,
                    found,
                    ..
                } => FingerprintError::ContentFunction {
                    path: target.path(),
                    algorithm,
                    expected,
                    found,
                },
                other => other,
            })?;
        Ok(Some((done, size)))
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

struct Walk<'a, 'w> {
    root: &'a Path,
    /// The root directory, for files queued by relative path.
    root_fd: Option<Arc<OwnedFd>>,
    exclude: Option<&'a Exclusions>,
    algorithm: Algorithm,
    queue: &'a JobQueue,
    /// This thread's own worker, for when the backlog is full.
    helper: &'a mut Worker<'w>,
    /// Files found since the last hand-over to the queue (one lock per batch, not per file).
    pending: Vec<Job>,
    open_dirs: Arc<AtomicUsize>,
    max_open_dirs: usize,
    stats: ScanStats,
}

impl Walk<'_, '_> {
    /// Hands the files found so far to the workers, and helps them while the backlog is
    /// full, so that the walk never runs far ahead of the hashing.
    fn flush(&mut self) -> Result<(), FingerprintError> {
        if !self.pending.is_empty() && self.queue.push(&mut self.pending) > MAX_BACKLOG {
            self.helper.help(MAX_BACKLOG)?;
        }
        Ok(())
    }

    fn fill(&self, at: Parent, value: Slot) {
        self.queue.lock().fill(at, value);
    }

    /// Lists the open directory `fd` (at `path`) and walks its entries; its fingerprint
    /// goes to `at` once they are all done.
    fn dir(
        &mut self,
        fd: OwnedFd,
        st: &Stat,
        path: &mut PathBuf,
        at: Parent,
    ) -> Result<(), FingerprintError> {
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
        for (index, (name, file_type, st)) in kept.into_iter().enumerate() {
            path.push(OsStr::from_bytes(name.to_bytes()));
            let child = self.child(&handle, share, name, file_type, st, path, Some((id, index)));
            path.pop();
            child?;
        }
        // Hand this directory's files over now rather than after the next 64.
        self.flush()
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
    fn entry(
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
            let fd = match place.open_dir() {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    self.fill(at, Slot::Vanished);
                    return Ok(());
                }
                // Replaced by a link or a file since the listing.
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    return Err(FingerprintError::Unstable { path: path.clone() });
                }
                Err(e) => return Err(io_error(path, "open", e.into())),
            };
            // The directory's attributes from the descriptor: those of what is listed.
            let st = rustix::fs::fstat(&fd).map_err(|e| io_error(path, "fstat", e.into()))?;
            return self.dir(fd, &st, path, at);
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

/// Opens, checks and hashes one regular file.
/// Whether a file's first read found its bytes in the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cache {
    Warm,
    /// Not cached, or the file system cannot say.
    Cold,
}

/// The first read of a file, without waiting for the disk (`RWF_NOWAIT`): `None` when
/// its bytes are not in the page cache, or the file system cannot tell (then the caller
/// reads as usual). A short read is a read: the rest follows without the flag.
fn read_if_cached(fd: &OwnedFd, buf: &mut [u8]) -> Option<Result<usize, Errno>> {
    use rustix::io::{ReadWriteFlags, preadv2};
    match preadv2(
        fd,
        &mut [std::io::IoSliceMut::new(buf)],
        0,
        ReadWriteFlags::NOWAIT,
    ) {
        Err(Errno::AGAIN | Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS) => None,
        other => Some(other),
    }
}

fn hash_file(
    target: &Target,
    algorithm: Algorithm,
    buf: &mut [u8],
) -> Result<Option<(Entry, Cache)>, FingerprintError> {
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
    let mut cache = Cache::Warm;
    let mut first = true;
    loop {
        // Read at offsets (the first read's flag needs `preadv2`, which leaves the file
        // position where it was).
        let read = if std::mem::take(&mut first) {
            read_if_cached(&fd, buf).unwrap_or_else(|| {
                cache = Cache::Cold;
                rustix::io::pread(&fd, &mut *buf, 0)
            })
        } else {
            rustix::io::pread(&fd, &mut *buf, size)
        };
        match read {
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
    let entry = Entry::File {
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        size,
        content: hasher.finish(),
    };
    Ok(Some((entry, cache)))
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

    fn tree(start: Start<'_>, path: &Path, opts: &ScanOptions, limit: usize) -> ScannedTree {
        let scanned = scan_with(start, path, opts, limit, Keep::Tree).unwrap();
        into_tree(scanned, opts.algorithm, path).unwrap()
    }

    /// 120 directories of 20 files (2,400 files, more than `MAX_BACKLOG`), nested three
    /// deep, plus an empty directory and a link in each.
    fn wide_tree(base: &Path) {
        for a in 0..4 {
            for b in 0..5 {
                for c in 0..6 {
                    let d = base.join(format!("a{a}/b{b}/c{c}"));
                    std::fs::create_dir_all(d.join("empty")).unwrap();
                    std::os::unix::fs::symlink("f0", d.join("link")).unwrap();
                    for i in 0..20 {
                        write(&d.join(format!("f{i}")), format!("{a}{b}{c}{i}").as_bytes());
                    }
                }
            }
        }
    }

    #[test]
    fn a_root_only_scan_keeps_few_directories_open_and_hashes_like_a_full_scan() {
        let dir = tempfile::tempdir().unwrap();
        wide_tree(dir.path());
        for algorithm in [Algorithm::Compat, Algorithm::Native] {
            // One thread: no workers at all, so only the walk's own hashing under a full
            // backlog keeps it from queueing every file first (and keeps it from waiting
            // forever).
            for threads in [1, 3] {
                let opts = ScanOptions {
                    algorithm,
                    threads,
                    ..ScanOptions::default()
                };
                let full = tree(Start::Path, dir.path(), &opts, 4096);
                let root = scan_with(Start::Path, dir.path(), &opts, 4096, Keep::Hashes).unwrap();
                assert_eq!(
                    root.root.hash(),
                    full.root_hash(),
                    "{algorithm}, {threads} threads"
                );
                assert_eq!(root.stats, full.stats);
                assert_eq!(root.stats.files, 2400);
                // 1 + 4 + 20 + 120 directories and 120 empty ones: a walk that held every
                // directory until the end would have all 265 open. Bounded, it holds those
                // with files queued or being hashed (about MAX_BACKLOG / 20 = 51 leaves and
                // the few their batches spill into), their parents (one per 6 leaves) and
                // the way down from the root: ~68 with one thread, ~75 with three.
                let bound = 100;
                assert!(
                    root.peak_open <= bound,
                    "{} directories open at once (bound {bound})",
                    root.peak_open
                );
                let public = scan_root(dir.path(), &opts).unwrap();
                assert_eq!(public.hash, full.root_hash());
            }
        }
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
            let shared = tree(Start::Path, dir.path(), &opts, 4096);
            let open =
                rustix::fs::open(dir.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
                    .unwrap();
            // 0: every file by relative path; 2: the first directories shared, then paths.
            for limit in [0, 2] {
                let limited = tree(Start::Dir(open.as_fd()), dir.path(), &opts, limit);
                assert_eq!(
                    limited.tree, shared.tree,
                    "limit {limit}, {threads} threads"
                );
                assert_eq!(limited.stats, shared.stats);
                let root = scan_with(
                    Start::Dir(open.as_fd()),
                    dir.path(),
                    &opts,
                    limit,
                    Keep::Hashes,
                )
                .unwrap();
                assert_eq!(root.root.hash(), shared.root_hash());
                assert!(matches!(root.root, Done::Hash(_)));
                assert_eq!(root.stats, shared.stats);
            }
            assert_eq!(shared.stats.files, 60);
        }
    }

    #[test]
    fn a_pruned_scan_keeps_only_the_folders_not_accepted() {
        let dir = tempfile::tempdir().unwrap();
        wide_tree(dir.path());
        let open =
            rustix::fs::open(dir.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let opts = ScanOptions::default();
        let full = scan_dir(open.as_fd(), dir.path(), &opts).unwrap();
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&asked);
        let prune = Prune(Arc::new(move |rel: &Path, node: &FingerprintedNode| {
            counter.fetch_add(1, Ordering::Relaxed);
            // Its entries are all there when it is asked.
            assert!(rel.ends_with("empty") || !node.children.is_empty());
            rel.starts_with("a1")
        }));
        let pruned = scan_dir_pruned(open.as_fd(), dir.path(), &opts, prune).unwrap();
        assert_eq!(pruned.root_hash(), full.root_hash());
        assert_eq!(pruned.stats, full.stats);
        // Every folder is asked about once, the root and the empty ones included.
        assert_eq!(asked.load(Ordering::Relaxed) as u64, full.stats.dirs);
        let kept = |t: &ScannedTree, p: &str| t.tree.root.get(Path::new(p)).cloned();
        assert!(kept(&pruned, "a1").is_some_and(|n| n.children.is_empty()));
        assert!(kept(&pruned, "a1/b0").is_none());
        assert_eq!(kept(&pruned, "a2/b3/c1"), kept(&full, "a2/b3/c1"));
        assert_eq!(
            kept(&pruned, "a1").map(|n| n.hash),
            kept(&full, "a1").map(|n| n.hash)
        );
    }

    fn default_options() -> ScanOptions {
        ScanOptions {
            algorithm: Algorithm::Native,
            ..ScanOptions::default()
        }
    }

    /// Whether the file system under `dir` says if a file's bytes are cached (`RWF_NOWAIT`):
    /// ext4 and xfs do.
    fn says_what_is_cached(dir: &Path) -> bool {
        let probe = dir.join("probe");
        write(&probe, b"cached");
        let fd = rustix::fs::open(&probe, OFlags::RDONLY, Mode::empty()).unwrap();
        let mut buf = [0u8; 16];
        let said = read_if_cached(&fd, &mut buf).is_some();
        std::fs::remove_file(&probe).unwrap();
        said
    }

    /// A temporary folder on a file system that says what is cached; `None` (and a
    /// line saying the test is skipped) on one that cannot.
    fn dir_that_says_what_is_cached() -> Option<tempfile::TempDir> {
        let dir = tempfile::tempdir().unwrap();
        if says_what_is_cached(dir.path()) {
            return Some(dir);
        }
        let path = dir.path().display();
        eprintln!("skipped: the file system of {path} cannot say what is cached");
        None
    }

    #[test]
    fn files_in_the_page_cache_are_hashed_by_a_worker_per_core() {
        let Some(dir) = dir_that_says_what_is_cached() else {
            return;
        };
        wide_tree(dir.path());
        let opts = default_options();
        // Read once: in the page cache now.
        let warm = scan_with(Start::Path, dir.path(), &opts, 4096, Keep::Hashes).unwrap();
        // A few files evicted (as a proactive reclaim does) do not make the cache cold,
        // even the first ones the scan reads.
        for i in 0..COLD_READS - 1 {
            evict(&dir.path().join(format!("a0/b0/c0/f{i}")));
        }
        let again = scan_with(Start::Path, dir.path(), &opts, 4096, Keep::Hashes).unwrap();
        assert_eq!(again.root.hash(), warm.root.hash());
        assert!(
            !again.cold,
            "{} files read from the disk woke the standby threads",
            COLD_READS - 1
        );
        assert!(
            (1..=hashing_threads_when_warm()).contains(&again.hashing_threads),
            "{} threads hashed, {} cores",
            again.hashing_threads,
            cores()
        );
    }

    /// Writes `file` to disk and drops it from the page cache: its next read waits.
    fn evict(file: &Path) {
        let file = std::fs::File::open(file).unwrap();
        file.sync_all().unwrap();
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    }

    #[test]
    fn a_read_that_waits_for_the_disk_wakes_the_standby_threads() {
        if default_threads() <= hashing_threads_when_warm() {
            eprintln!("skipped: {} cores, no thread stands by", cores());
            return;
        }
        let Some(dir) = dir_that_says_what_is_cached() else {
            return;
        };
        // A file system that holds every file in memory (tmpfs) cannot drop one.
        let probe = dir.path().join("evicted");
        write(&probe, b"evicted");
        evict(&probe);
        let fd = rustix::fs::open(&probe, OFlags::RDONLY, Mode::empty()).unwrap();
        if read_if_cached(&fd, &mut [0u8; 16]).is_some() {
            eprintln!(
                "skipped: {} keeps evicted files cached",
                dir.path().display()
            );
            return;
        }
        let tree = dir.path().join("tree");
        std::fs::create_dir(&tree).unwrap();
        wide_tree(&tree);
        let opts = default_options();
        let warm = scan_with(Start::Path, &tree, &opts, 4096, Keep::Hashes).unwrap();
        // Written to disk and dropped from the page cache: every first read waits.
        for file in walkdir(&tree) {
            evict(&file);
        }
        let cold = scan_with(Start::Path, &tree, &opts, 4096, Keep::Hashes).unwrap();
        assert_eq!(cold.root.hash(), warm.root.hash(), "the same bytes hashed");
        assert!(cold.cold);
        assert!(
            cold.hashing_threads > hashing_threads_when_warm(),
            "{} threads hashed, {} cores, up to {}",
            cold.hashing_threads,
            cores(),
            default_threads()
        );
    }

    /// Every regular file below `dir`.
    fn walkdir(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let entry = entry.unwrap();
                let kind = entry.file_type().unwrap();
                if kind.is_dir() {
                    todo.push(entry.path());
                } else if kind.is_file() {
                    files.push(entry.path());
                }
            }
        }
        files
    }

    #[test]
    fn the_descriptor_budget_leaves_room_for_the_process() {
        let n = max_open_dirs();
        assert!((1..=4096).contains(&n), "{n}");
    }
}
