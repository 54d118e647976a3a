//! Reading a tree from the host: a walk with `lstat` semantics, then the regular files'
//! contents hashed in parallel.
//!
//! Owns: [`scan`], [`ScanOptions`], [`ScannedTree`]. Must not: follow a symbolic link
//! (never: not the root, not an entry, not during an open), write anything, or read a
//! file twice. The cost of a content pass is per-file system calls as much as bytes
//! (bench PEERS.md: ~4 µs of open/read/close per file against ~7 µs of SHA-256 for the
//! estate's median file), so a file costs exactly one `open`, one `fstat` (which also
//! proves that what was opened is still a regular file, and gives the mode and owner
//! that belong to the bytes read), reads into a buffer reused by its worker, and `close`.
//! The directory walk uses the type from `readdir` and calls `lstat` only for
//! directories, links and special files.

use std::collections::VecDeque;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use super::digest::Algorithm;
use super::error::FingerprintError;
use super::exclude::Exclusions;
use super::node_hash::fingerprint_tree;
use super::tree::{FingerprintedTree, Node, OtherKind};

/// Read buffer per worker: large enough that a 1 MiB file takes four reads, small
/// enough to stay in L2 while it is hashed.
const READ_BUFFER: usize = 256 * 1024;

/// Files handed to a worker at a time: amortises the shared counter without starving
/// the other worker at the end of the list.
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
    pub fn root_hash(&self) -> super::digest::Digest {
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
    let threads = match opts.threads {
        0 => default_threads(),
        n => n,
    };
    let queue = JobQueue::default();
    // The walk runs on this thread while `threads - 1` workers already hash what it has
    // found; when the walk is done this thread becomes a worker too. On two cores that
    // hides the walk (~10% of a warm pass) behind the hashing.
    let (walked, results) = std::thread::scope(|s| {
        let workers: Vec<_> = (1..threads)
            .map(|_| s.spawn(|| work(&queue, opts.algorithm, opts.progress.as_deref())))
            .collect();
        let walked = walk_root(path, opts.exclude.as_ref(), &queue);
        if walked.is_err() {
            queue.abort();
        } else {
            queue.close();
        }
        let mut results = vec![work(&queue, opts.algorithm, opts.progress.as_deref())];
        for worker in workers {
            // A panicked worker is counted as missing files below, never silently lost.
            results.push(worker.join().unwrap_or_else(|_| Ok(Vec::new())));
        }
        (walked, results)
    });
    let (skeleton, mut stats, jobs) = walked?;
    let mut hashed: Vec<Option<Node>> = Vec::new();
    hashed.resize_with(jobs, || None);
    let mut filled = 0usize;
    for part in results {
        for (index, node) in part? {
            if let Some(Node::File { size, .. }) = &node {
                stats.files += 1;
                stats.bytes += size;
            }
            if let Some(slot) = hashed.get_mut(index) {
                *slot = node;
                filled += 1;
            }
        }
    }
    if filled != jobs {
        return Err(FingerprintError::WorkerFailed {
            path: path.to_path_buf(),
        });
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
    path: &Path,
    exclude: Option<&Exclusions>,
    queue: &JobQueue,
) -> Result<(Skeleton, ScanStats, usize), FingerprintError> {
    let mut walk = Walk {
        root: path,
        exclude,
        queue,
        pending: Vec::new(),
        queued: 0,
        stats: ScanStats::default(),
    };
    let meta = std::fs::symlink_metadata(path).map_err(|source| io_error(path, "lstat", source))?;
    let skeleton = if meta.is_dir() {
        walk.dir(&mut path.to_path_buf(), &meta)?
    } else {
        walk.entry(&mut path.to_path_buf(), meta.file_type(), Some(meta))?
            .ok_or_else(|| FingerprintError::Unstable {
                path: path.to_path_buf(),
            })?
    };
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
    jobs: VecDeque<(usize, PathBuf)>,
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

    fn push(&self, jobs: &mut Vec<(usize, PathBuf)>) {
        self.lock().jobs.extend(jobs.drain(..));
        self.ready.notify_all();
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
    fn take(&self, into: &mut Vec<(usize, PathBuf)>) {
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
/// every worker.
fn work(
    queue: &JobQueue,
    algorithm: Algorithm,
    progress: Option<&ScanProgress>,
) -> Result<Vec<(usize, Option<Node>)>, FingerprintError> {
    let mut buf = vec![0u8; READ_BUFFER];
    let mut batch = Vec::with_capacity(BATCH);
    let mut done = Vec::new();
    loop {
        queue.take(&mut batch);
        if batch.is_empty() {
            return Ok(done);
        }
        for (index, path) in batch.drain(..) {
            match hash_file(&path, algorithm, &mut buf) {
                Ok(node) => {
                    if let (Some(p), Some(Node::File { size, .. })) = (progress, &node) {
                        p.files.fetch_add(1, Ordering::Relaxed);
                        p.bytes.fetch_add(*size, Ordering::Relaxed);
                    }
                    done.push((index, node));
                }
                Err(e) => {
                    queue.abort();
                    return Err(e);
                }
            }
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

struct Walk<'a> {
    root: &'a Path,
    exclude: Option<&'a Exclusions>,
    queue: &'a JobQueue,
    /// Files found since the last hand-over to the queue (one lock per batch, not per file).
    pending: Vec<(usize, PathBuf)>,
    queued: usize,
    stats: ScanStats,
}

impl Walk<'_> {
    fn flush(&mut self) {
        if !self.pending.is_empty() {
            self.queue.push(&mut self.pending);
        }
    }

    fn dir(
        &mut self,
        path: &mut PathBuf,
        meta: &std::fs::Metadata,
    ) -> Result<Skeleton, FingerprintError> {
        self.stats.dirs += 1;
        let mut children = Vec::new();
        let listing =
            std::fs::read_dir(&*path).map_err(|source| io_error(path, "readdir", source))?;
        for item in listing {
            let item = item.map_err(|source| io_error(path, "readdir", source))?;
            let name = item.file_name();
            // d_type from readdir; std falls back to lstat where the file system has none.
            let file_type = match item.file_type() {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(io_error(&path.join(&name), "lstat", source)),
            };
            path.push(&name);
            if let Some(rules) = self.exclude {
                let rel = path.strip_prefix(self.root).unwrap_or(path);
                if rules.is_excluded(rel, file_type.is_dir()) {
                    self.stats.excluded += 1;
                    path.pop();
                    continue;
                }
            }
            let child = self.entry(path, file_type, None);
            path.pop();
            if let Some(child) = child? {
                children.push((name.as_bytes().to_vec(), child));
            }
        }
        // Hand this directory's files over now rather than after the next 64.
        self.flush();
        Ok(Skeleton::Dir {
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
            children,
        })
    }

    /// One entry; `None` if it vanished. `meta` is the lstat result when already known.
    fn entry(
        &mut self,
        path: &mut PathBuf,
        file_type: std::fs::FileType,
        meta: Option<std::fs::Metadata>,
    ) -> Result<Option<Skeleton>, FingerprintError> {
        if file_type.is_file() {
            // Mode and owner come from the fstat after the open, with the bytes.
            let index = self.queued;
            self.queued += 1;
            self.pending.push((index, path.clone()));
            if self.pending.len() >= 4 * BATCH {
                self.flush();
            }
            return Ok(Some(Skeleton::File(index)));
        }
        let meta = match meta {
            Some(m) => m,
            None => match std::fs::symlink_metadata(&*path) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(source) => return Err(io_error(path, "lstat", source)),
            },
        };
        if meta.file_type() != file_type {
            return Err(FingerprintError::Unstable { path: path.clone() });
        }
        let mode = meta.mode() & 0o7777;
        if file_type.is_dir() {
            return self.dir(path, &meta).map(Some);
        }
        self.stats.others += 1;
        if file_type.is_symlink() {
            let target = match std::fs::read_link(&*path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(source) => return Err(io_error(path, "readlink", source)),
            };
            return Ok(Some(Skeleton::Leaf(Node::Symlink {
                mode,
                target: target.into_os_string().into_vec(),
            })));
        }
        let kind = if file_type.is_fifo() {
            OtherKind::Fifo
        } else if file_type.is_socket() {
            OtherKind::Socket
        } else if file_type.is_char_device() {
            OtherKind::CharDevice
        } else {
            OtherKind::BlockDevice
        };
        Ok(Some(Skeleton::Leaf(Node::Other { mode, kind })))
    }
}

use std::os::unix::ffi::OsStringExt;

/// Opens, checks and hashes one regular file.
fn hash_file(
    path: &Path,
    algorithm: Algorithm,
    buf: &mut [u8],
) -> Result<Option<Node>, FingerprintError> {
    // NOFOLLOW: a file replaced by a link since the listing fails with ELOOP instead of
    // being followed. NONBLOCK: a file replaced by a fifo cannot hang the scan. NOCTTY: a
    // terminal device cannot become our controlling terminal.
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => {
            return Err(FingerprintError::Unstable {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(io_error(path, "open", e.into())),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| io_error(path, "fstat", e.into()))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(FingerprintError::Unstable {
            path: path.to_path_buf(),
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
                // A short read from a regular file means end of file; having also reached
                // the size fstat gave, the usual extra read that returns 0 would only cost
                // a system call per file (~5% of a warm pass over small files).
                if n < buf.len() && size >= expected {
                    break;
                }
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(io_error(path, "read", e.into())),
        }
    }
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
