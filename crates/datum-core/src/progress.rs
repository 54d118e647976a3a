//! What long work has done so far, for a progress bar: resources observed, files
//! hashed and bytes hashed, counted where the work happens (the observers, the
//! tree scanner's file hashing) and read by whoever draws the bar.
//!
//! Process-wide counters that only grow: a reader takes a [`Snapshot`] when its
//! work starts and shows the difference ([`Snapshot::since`]). Relaxed atomics,
//! one addition per file and per read buffer: nothing a pass would notice.
//!
//! Some steps have nothing to count: a pass waiting for a job another program
//! runs (systemd starting or restarting a unit, up to the Service's
//! `timeout:`). Whoever waits says so with [`waiting`], which holds the step
//! while its guard lives; whoever draws the bar reads [`current_wait`] and
//! shows what is waited for, for how long so far and at most how long.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// A step being waited for: what, since when, at most how long.
#[derive(Debug)]
struct Step {
    number: u64,
    what: String,
    since: Instant,
    limit: Option<Duration>,
}

/// The steps being waited for now (several threads may wait at once; the
/// last one started is shown).
static WAITS: Mutex<Vec<Step>> = Mutex::new(Vec::new());
static NEXT_WAIT: AtomicU64 = AtomicU64::new(0);

/// A step the process is waiting for, as [`current_wait`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    /// What is waited for, in words (`waiting for systemd: restarting
    /// nginx.service`).
    pub what: String,
    /// How long it has been waited for.
    pub elapsed: Duration,
    /// How long it is waited for at most, if anything bounds it.
    pub limit: Option<Duration>,
}

/// A step being waited for, from [`waiting`] until this guard is dropped.
#[derive(Debug)]
#[must_use = "the wait ends when the guard is dropped"]
pub struct Waiting {
    number: u64,
}

/// Says that this process now waits for `what` (words a person reads on a
/// terminal: never a value that may be secret), at most `limit`, until the
/// guard returned is dropped.
pub fn waiting(what: impl Into<String>, limit: Option<Duration>) -> Waiting {
    let number = NEXT_WAIT.fetch_add(1, Ordering::Relaxed);
    let step = Step {
        number,
        what: what.into(),
        since: Instant::now(),
        limit,
    };
    WAITS.lock().unwrap_or_else(|p| p.into_inner()).push(step);
    Waiting { number }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut waits = WAITS.lock().unwrap_or_else(|p| p.into_inner());
        waits.retain(|step| step.number != self.number);
    }
}

/// The step waited for now (the last one started, if several are), or
/// `None` when nothing is waited for.
pub fn current_wait() -> Option<Wait> {
    let waits = WAITS.lock().unwrap_or_else(|p| p.into_inner());
    let step = waits.last()?;
    Some(Wait {
        what: step.what.clone(),
        elapsed: step.since.elapsed(),
        limit: step.limit,
    })
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

    #[test]
    fn a_wait_is_current_while_its_guard_lives() {
        // The only test of this crate that waits: nothing else is current.
        assert_eq!(current_wait(), None);
        let outer = waiting("waiting for a", Some(Duration::from_secs(120)));
        {
            let _inner = waiting("waiting for b", None);
            let now = current_wait().unwrap();
            assert_eq!((now.what.as_str(), now.limit), ("waiting for b", None));
        }
        std::thread::sleep(Duration::from_millis(20));
        let now = current_wait().unwrap();
        assert_eq!(now.what, "waiting for a");
        assert_eq!(now.limit, Some(Duration::from_secs(120)));
        assert!(now.elapsed >= Duration::from_millis(20), "{now:?}");
        drop(outer);
        assert_eq!(current_wait(), None);
    }
}
