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
//!
//! The scan's entry points, options and results are here; `walk` lists the directories
//! and queues the files, `worker` hashes them, and `queue` holds what the two share (the
//! directories waiting for their entries, the files waiting for a worker).

mod queue;
mod walk;
mod worker;

use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use queue::{Done, JobQueue, Slot};
use walk::{Place, Walk, max_open_dirs};
use worker::Worker;

use datum_fingerprint::{
    Algorithm, Digest, Exclusions, FingerprintError, FingerprintedNode, FingerprintedTree,
};

/// Read buffer per worker: large enough that a 1 MiB file takes eight reads (a few µs of
/// system calls against ~1 ms of hashing), small enough to stay in L2 while it is hashed;
/// eight workers hold 1 MiB of them (256 KiB each made 2 MiB of a 16 MiB budget for
/// `datum fingerprint`).
const READ_BUFFER: usize = 128 * 1024;

/// See [`QueueState::cold`](queue::QueueState::cold).
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
    /// The most directory descriptors the walk held at once (for listing, or kept for
    /// queued files).
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "the tests check the bound on directory descriptors"
        )
    )]
    peak_dirs: usize,
    /// Threads that hashed files (the walking thread included): one per core while the
    /// files' bytes are in the page cache, more once a read waited for the disk (see
    /// [`default_threads`]).
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "the tests check the threads that hashed")
    )]
    hashing_threads: usize,
    /// Whether the standby threads were woken
    /// ([`QueueState::cold`](queue::QueueState::cold)).
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
    let (mut stats, peak_dirs) = walked?;
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
            peak_dirs,
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
) -> Result<(ScanStats, usize), FingerprintError> {
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
        peak_dirs: 0,
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
        return Ok((walk.stats, walk.peak_dirs));
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
    Ok((walk.stats, walk.peak_dirs))
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

fn io_error(path: &Path, op: &'static str, source: std::io::Error) -> FingerprintError {
    FingerprintError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::worker::read_if_cached;
    use super::*;
    use std::os::fd::AsFd;
    use std::path::PathBuf;

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
        assert!((8..=4096).contains(&n), "{n}");
        assert_eq!(n, crate::descriptors::Budget::of_this_process().walk);
    }

    /// A chain of folders far deeper than a thread's stack allows one call per level
    /// (each level of the walk was a few KiB of stack in a debug build: 2,000 levels
    /// overflowed the main thread's 8 MiB and aborted `datum apply`) is walked in a
    /// small stack, and fingerprinted the same with every folder held or few.
    #[test]
    fn a_chain_of_folders_deeper_than_the_stack_allows_calls_is_walked() {
        let dir = tempfile::tempdir().unwrap();
        // 1,500 levels of "d/": 3,000 bytes, within PATH_MAX for files queued by path.
        let deep: PathBuf = std::iter::repeat_n("d", 1500).collect();
        std::fs::create_dir_all(dir.path().join(&deep)).unwrap();
        write(&dir.path().join(&deep).join("f"), b"deep");
        let root = dir.path().to_path_buf();
        let scanned = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let opts = ScanOptions {
                    threads: 1,
                    ..ScanOptions::default()
                };
                let mut hashes = Vec::new();
                for limit in [64, 4] {
                    let scanned =
                        scan_with(Start::Path, &root, &opts, limit, Keep::Hashes).unwrap();
                    assert_eq!(scanned.stats.dirs, 1501);
                    assert_eq!(scanned.stats.files, 1);
                    hashes.push(scanned.root.hash());
                }
                hashes
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(scanned[0], scanned[1]);
    }

    /// A walk held every directory on its way down open while it walked below it, so a
    /// tree deeper than the descriptor limit (or than what the pass left of it) failed
    /// with 'Too many open files' whatever the bound on directories kept for queued
    /// files. Past that bound a directory is now let go while its subdirectories are
    /// walked and opened again (beneath the root, no link followed) for its next
    /// entries: a chain of 200 folders, each with files, a link, an empty folder and a
    /// folder of files beside the next, is walked holding a few, and fingerprinted
    /// exactly as when every folder stays open.
    #[test]
    fn a_deep_tree_is_walked_holding_at_most_the_bound_of_directories() {
        let dir = tempfile::tempdir().unwrap();
        let mut at = dir.path().to_path_buf();
        for level in 0..200 {
            for i in 0..3 {
                write(&at.join(format!("f{i}")), format!("{level}.{i}").as_bytes());
            }
            std::fs::create_dir(at.join("empty")).unwrap();
            std::fs::create_dir(at.join("side")).unwrap();
            write(&at.join("side/s"), format!("side {level}").as_bytes());
            std::os::unix::fs::symlink("f0", at.join("link")).unwrap();
            at.push("d");
            std::fs::create_dir(&at).unwrap();
        }
        write(&at.join("bottom"), b"bottom");
        for threads in [1, 3] {
            let opts = ScanOptions {
                threads,
                ..ScanOptions::default()
            };
            let all = scan_with(Start::Path, dir.path(), &opts, 4096, Keep::Tree).unwrap();
            assert!(all.peak_dirs > 200, "{} held unbounded", all.peak_dirs);
            let all = into_tree(all, opts.algorithm, dir.path()).unwrap();
            for limit in [0, 4] {
                let open =
                    rustix::fs::open(dir.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
                        .unwrap();
                for start in [Start::Path, Start::Dir(open.as_fd())] {
                    let bounded = scan_with(start, dir.path(), &opts, limit, Keep::Tree).unwrap();
                    // The bound, the folder being listed and the subdirectory being opened.
                    assert!(
                        bounded.peak_dirs <= limit + 2,
                        "{} directories held at once (limit {limit}, {threads} threads)",
                        bounded.peak_dirs
                    );
                    let bounded = into_tree(bounded, opts.algorithm, dir.path()).unwrap();
                    assert_eq!(bounded.tree, all.tree, "limit {limit}, {threads} threads");
                    assert_eq!(bounded.stats, all.stats);
                }
            }
            assert_eq!(all.stats.files, 200 * 4 + 1);
        }
    }
}
