//! What long work has done so far, for a progress bar: resources observed, files
//! hashed and bytes hashed, counted where the work happens (the observers, the
//! tree scanner's file hashing) and read by whoever draws the bar.
//!
//! Process-wide counters that only grow: a reader takes a [`Snapshot`] when its
//! work starts and shows the difference ([`Snapshot::since`]). Relaxed atomics,
//! one addition per file and per read buffer: nothing a pass would notice.

use std::sync::atomic::{AtomicU64, Ordering};

static OBSERVED: AtomicU64 = AtomicU64::new(0);
static FILES: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

/// One resource observed.
pub fn observed() {
    OBSERVED.fetch_add(1, Ordering::Relaxed);
}

/// One file hashed to its end.
pub fn file_hashed() {
    FILES.fetch_add(1, Ordering::Relaxed);
}

/// `n` more bytes read into a hash.
pub fn bytes_hashed(n: u64) {
    BYTES.fetch_add(n, Ordering::Relaxed);
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub observed: u64,
    pub files: u64,
    pub bytes: u64,
}

impl Snapshot {
    pub fn now() -> Self {
        Snapshot {
            observed: OBSERVED.load(Ordering::Relaxed),
            files: FILES.load(Ordering::Relaxed),
            bytes: BYTES.load(Ordering::Relaxed),
        }
    }

    /// What was done since `start` (taken earlier).
    pub fn since(start: Snapshot) -> Self {
        let now = Snapshot::now();
        Snapshot {
            observed: now.observed.saturating_sub(start.observed),
            files: now.files.saturating_sub(start.files),
            bytes: now.bytes.saturating_sub(start.bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_grow_and_since_subtracts_the_start() {
        let start = Snapshot::now();
        observed();
        file_hashed();
        bytes_hashed(4096);
        let done = Snapshot::since(start);
        // Other tests of this process may count too: at least ours.
        assert!(done.observed >= 1 && done.files >= 1 && done.bytes >= 4096);
    }
}
