//! Answers kept by one server process, good for as long as the store's
//! generation says nothing they show has changed.
//!
//! Every write that changes what a fleet view shows (a report stored, a
//! host enrolled, a picture backfilled) adds one to the `generation` table
//! in its own transaction ([`bump`]). Before answering, a view reads the
//! generation (one small query, [`GENERATION`]); when it equals the one its
//! kept answer was computed at, the kept answer is served, else the view is
//! computed again and kept with the generation read *before* computing it.
//! That order is what makes it right with several servers on one database:
//! an answer kept under generation G was computed from a snapshot at least
//! as new as G, and any commit after that snapshot makes the sum larger
//! than G, so no server serves an answer older than the last commit it can
//! see. (A commit between reading G and the snapshot only makes the kept
//! answer newer than G, and the next read sees G+1 and computes again.)
//!
//! Time still moves between commits: what depends on the clock (a host's
//! age and staleness, `generated_at`) is rendered again each second from
//! the kept rows, never served from another second.
//!
//! Owns: [`ViewCache`], [`bump`], [`GENERATION`]. Must not: keep anything
//! a request could not have read from the store itself (a cache is per
//! process and only makes answers faster).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::store::Stmt;
use crate::views::{DriftView, HostListing, Paging, Staleness};

/// Slots of the `generation` table: concurrent writers pick different ones.
const SLOTS: u64 = 16;

/// The store's generation: the sum of every slot.
pub const GENERATION: &str = "SELECT CAST(coalesce(sum(n), 0) AS BIGINT) FROM generation";

/// The statement that moves the generation on: part of every transaction
/// that changes what a view shows.
pub fn bump() -> Stmt {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let slot = (u64::from(std::process::id()) + NEXT.fetch_add(1, Ordering::Relaxed)) % SLOTS;
    Stmt::new(
        "INSERT INTO generation (slot, n) VALUES ($1, 1) \
         ON CONFLICT (slot) DO UPDATE SET n = generation.n + 1",
        vec![slot.into()],
    )
}

/// Rollout answers kept at most (one per revision asked for).
const ROLLOUTS_KEPT: usize = 16;

/// What one process keeps, each with the generation it was computed at.
#[derive(Debug, Default)]
pub struct ViewCache {
    /// The hosts' listings (sorted by name), and the document rendered
    /// from them for one second and one staleness rule.
    hosts: Mutex<Option<(i64, Arc<Vec<HostListing>>)>>,
    hosts_doc: Mutex<Option<(i64, Staleness, Bytes)>>,
    /// The rollout document per revision asked for (`None`: the latest).
    rollout: Mutex<HashMap<Option<String>, (i64, Bytes)>>,
    /// The drift view, and the document of the page last asked for, for
    /// one second.
    drift: Mutex<Option<(i64, Arc<DriftView>)>>,
    drift_doc: Mutex<Option<DriftDoc>>,
}

/// A drift document kept: its generation, the second it was made at, the
/// page it is (`None`: the whole view, unpaged) and its bytes.
type DriftDoc = (i64, i64, Option<Paging>, Bytes);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // What a panicking holder left is a whole value or none.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ViewCache {
    pub fn hosts(&self, generation: i64) -> Option<Arc<Vec<HostListing>>> {
        lock(&self.hosts)
            .as_ref()
            .filter(|(g, _)| *g == generation)
            .map(|(_, l)| Arc::clone(l))
    }

    pub fn keep_hosts(&self, generation: i64, listings: Arc<Vec<HostListing>>) {
        *lock(&self.hosts) = Some((generation, listings));
    }

    pub fn hosts_doc(&self, generation: i64, staleness: &Staleness) -> Option<Bytes> {
        lock(&self.hosts_doc)
            .as_ref()
            .filter(|(g, s, _)| *g == generation && s == staleness)
            .map(|(_, _, b)| b.clone())
    }

    pub fn keep_hosts_doc(&self, generation: i64, staleness: Staleness, doc: Bytes) {
        *lock(&self.hosts_doc) = Some((generation, staleness, doc));
    }

    pub fn rollout(&self, generation: i64, revision: Option<&str>) -> Option<Bytes> {
        lock(&self.rollout)
            .get(&revision.map(str::to_owned))
            .filter(|(g, _)| *g == generation)
            .map(|(_, b)| b.clone())
    }

    pub fn keep_rollout(&self, generation: i64, revision: Option<&str>, doc: Bytes) {
        let mut kept = lock(&self.rollout);
        kept.retain(|_, (g, _)| *g == generation);
        if kept.len() >= ROLLOUTS_KEPT {
            kept.clear();
        }
        kept.insert(revision.map(str::to_owned), (generation, doc));
    }

    pub fn drift(&self, generation: i64) -> Option<Arc<DriftView>> {
        lock(&self.drift)
            .as_ref()
            .filter(|(g, _)| *g == generation)
            .map(|(_, v)| Arc::clone(v))
    }

    pub fn keep_drift(&self, generation: i64, view: Arc<DriftView>) {
        *lock(&self.drift) = Some((generation, view));
    }

    pub fn drift_doc(&self, generation: i64, now: i64, paging: Option<Paging>) -> Option<Bytes> {
        lock(&self.drift_doc)
            .as_ref()
            .filter(|(g, n, p, _)| *g == generation && *n == now && *p == paging)
            .map(|(_, _, _, b)| b.clone())
    }

    pub fn keep_drift_doc(&self, generation: i64, now: i64, paging: Option<Paging>, doc: Bytes) {
        *lock(&self.drift_doc) = Some((generation, now, paging, doc));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_served_only_at_the_generation_it_was_computed_at() {
        let cache = ViewCache::default();
        cache.keep_rollout(7, None, Bytes::from_static(b"seven"));
        assert_eq!(cache.rollout(7, None).as_deref(), Some(&b"seven"[..]));
        assert_eq!(cache.rollout(8, None), None, "a newer generation");
        assert_eq!(cache.rollout(7, Some("git:abc")), None, "another revision");
        let s = Staleness {
            now: 100,
            factor: 3.0,
            first_report_within: 60,
        };
        cache.keep_hosts_doc(7, s, Bytes::from_static(b"h"));
        assert!(cache.hosts_doc(7, &s).is_some());
        assert!(
            cache.hosts_doc(7, &Staleness { now: 101, ..s }).is_none(),
            "the next second renders ages again"
        );
        let first = Paging::of(250, None, None);
        cache.keep_drift_doc(7, 100, Some(first), Bytes::from_static(b"d"));
        assert!(cache.drift_doc(7, 100, Some(first)).is_some());
        assert!(cache.drift_doc(7, 101, Some(first)).is_none());
        assert!(cache.drift_doc(8, 100, Some(first)).is_none());
        assert!(
            cache
                .drift_doc(7, 100, Some(Paging::of(250, Some(2), None)))
                .is_none(),
            "another page"
        );
        assert!(cache.drift_doc(7, 100, None).is_none(), "the whole view");
    }

    #[test]
    fn the_bump_spreads_over_slots() {
        let slots: std::collections::BTreeSet<String> =
            (0..4).map(|_| format!("{:?}", bump().params)).collect();
        assert_eq!(slots.len(), 4, "consecutive writers take different slots");
    }
}
