//! What the walk and the workers share: the nodes waiting for their children (open
//! directories, finished nodes) and the queue of files found and not yet hashed.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use datum_fingerprint::{
    Algorithm, Digest, Entry, FingerprintError, FingerprintedNode, dir_hash, leaf_hash,
};

use super::walk::Target;
use super::{BATCH, COLD_READS, COLD_SHARE, Keep, Prune};

/// Where a finished node goes: slot `.1` of open directory `.0`, or (`None`) the root.
pub(super) type Parent = Option<(usize, usize)>;

/// A finished node: its hash, or (when the tree is kept) the whole fingerprinted node.
pub(super) enum Done {
    Hash(Digest),
    Node(FingerprintedNode),
}

impl Done {
    pub(super) fn hash(&self) -> Digest {
        *self.hash_ref()
    }

    fn hash_ref(&self) -> &Digest {
        match self {
            Done::Hash(hash) => hash,
            Done::Node(node) => &node.hash,
        }
    }

    pub(super) fn leaf(
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
pub(super) enum Slot {
    /// Not fingerprinted yet.
    Pending,
    /// Gone between the listing and its open: left out, as if listed a moment later.
    Vanished,
    Done(Done),
}

/// A directory listed by the walk whose entries are not all fingerprinted yet.
pub(super) struct OpenDir {
    pub(super) parent: Parent,
    /// Its path relative to the scanned root (for [`Prune`]).
    pub(super) rel: PathBuf,
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    /// Every entry not excluded, in raw byte order of the names (the hash's order).
    pub(super) children: Vec<(Vec<u8>, Slot)>,
    /// Entries still `Pending`.
    pub(super) remaining: usize,
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
pub(super) struct Job {
    pub(super) target: Target,
    pub(super) at: Parent,
}

/// Files found by the walk and not yet taken by a worker, and the directories waiting for
/// them.
pub(super) struct JobQueue {
    state: Mutex<QueueState>,
    /// Jobs were queued, or the queue closed or aborted.
    ready: Condvar,
    /// The reads turned cold (standby workers start), or the queue closed or aborted.
    /// Apart from `ready`, so that queueing jobs does not wake the standby workers.
    cold_ready: Condvar,
}

#[derive(Default)]
pub(super) struct QueueState {
    algorithm: Algorithm,
    pub(super) keep: Keep,
    pub(super) prune: Option<Prune>,
    jobs: VecDeque<Job>,
    /// Directories with entries still pending, by id (`None`: a free id, in `free`).
    pub(super) open: Vec<Option<OpenDir>>,
    free: Vec<usize>,
    /// The most directories open at once (`open.len() - free.len()` at its highest).
    pub(super) peak_open: usize,
    /// The root, once finished.
    pub(super) root: Option<Slot>,
    /// Regular files hashed and their bytes.
    pub(super) files: u64,
    pub(super) bytes: u64,
    /// The walk has finished: no more jobs will come.
    closed: bool,
    /// Something failed: workers stop at once.
    aborted: bool,
    /// Enough reads waited for the disk (or could not tell) that standby workers hash
    /// too: at least [`COLD_READS`], and one in [`COLD_SHARE`] of the files hashed. A
    /// few files the kernel evicted from a warm cache (a proactive reclaim, as DAMON's
    /// `pageout` on the bench machine, leaves ~300 of 200,000) do not count.
    pub(super) cold: bool,
    /// Files whose first read waited for the disk.
    cold_reads: u64,
    /// Threads that took jobs.
    pub(super) hashing_threads: usize,
}

impl QueueState {
    /// Registers a listed directory; one without entries is finished at once.
    pub(super) fn open_dir(&mut self, dir: OpenDir) -> usize {
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
    pub(super) fn fill(&mut self, at: Parent, value: Slot) {
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
    pub(super) fn new(algorithm: Algorithm, keep: Keep) -> JobQueue {
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

    pub(super) fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A poisoned lock only means another worker panicked; the state itself is
        // changed one whole step at a time, and the missing results are detected.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `jobs`; returns how many files are queued now.
    pub(super) fn push(&self, jobs: &mut Vec<Job>) -> usize {
        let mut state = self.lock();
        state.jobs.extend(jobs.drain(..));
        let backlog = state.jobs.len();
        drop(state);
        self.ready.notify_all();
        backlog
    }

    /// Stores a batch's results in the slots their directories keep for them.
    /// `cold`: how many of them waited for the disk (see [`QueueState::cold`]).
    pub(super) fn finish(&self, done: &mut Vec<(Parent, Slot, u64)>, cold: u64) {
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

    pub(super) fn into_state(self) -> QueueState {
        self.state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
        self.cold_ready.notify_all();
    }

    pub(super) fn abort(&self) {
        self.lock().aborted = true;
        self.ready.notify_all();
        self.cold_ready.notify_all();
    }

    /// Counts a thread that hashes.
    pub(super) fn count_hashing_thread(&self) {
        self.lock().hashing_threads += 1;
    }

    /// For a standby worker: waits until reads turn cold (true: start hashing) or the
    /// queue closes or aborts first (false).
    pub(super) fn wait_for_cold(&self) -> bool {
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
    pub(super) fn take(&self, into: &mut Vec<Job>) {
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
    pub(super) fn take_over(&self, limit: usize, into: &mut Vec<Job>) {
        let mut state = self.lock();
        if !state.aborted && state.jobs.len() > limit {
            let n = state.jobs.len().min(BATCH);
            into.extend(state.jobs.drain(..n));
        }
    }
}
