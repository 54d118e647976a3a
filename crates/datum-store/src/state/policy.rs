//! What reconciliation policies remember (issue 5): accepted observations,
//! quarantined resources or hosts, and the revert log used to detect flapping.
//!
//! This module stores decisions; it does not make them. `datum check` decides
//! when an observation is accepted, when reverting has become flapping, and
//! that a person's quarantine is never lifted by a program.

use datum_core::ResourceId;
use rusqlite::{OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use super::{Batch, Store, malformed, sql, u64_from_sql};
use crate::error::StoreError;

/// The stored text for a whole-host quarantine. Resource ids always have the
/// `Kind[name]` shape, so this cannot collide with one.
const HOST_TARGET: &str = "(host)";

/// An observation accepted as the new normal for a resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    pub declaration_hash: String,
    /// A hash of the observed state (content hash and metadata fields), never
    /// the observation itself.
    pub observation_hash: String,
    pub accepted_at: i64,
    /// The patch (or content file) the acceptance wrote for the repository.
    pub patch: Option<String>,
}

// The value types live in `datum_core` (plain data the drift rules use too,
// without linking the store); they stay reachable here under their old path.
pub use datum_core::{Quarantine, QuarantineSource, QuarantineTarget};

/// The stored text of a quarantine's target: its resource id, or
/// [`HOST_TARGET`] for the whole host.
fn target_key(target: &QuarantineTarget) -> String {
    match target {
        QuarantineTarget::Resource(id) => id.to_string(),
        QuarantineTarget::Host => HOST_TARGET.to_owned(),
    }
}

/// The target stored as `key` ([`target_key`]'s inverse).
fn target_from_key(key: &str) -> Option<QuarantineTarget> {
    if key == HOST_TARGET {
        return Some(QuarantineTarget::Host);
    }
    ResourceId::parse(key).ok().map(QuarantineTarget::Resource)
}

/// The source stored as `text` ([`QuarantineSource::as_str`]'s inverse).
fn source_from_word(text: &str) -> Option<QuarantineSource> {
    match text {
        "person" => Some(QuarantineSource::Person),
        "policy" => Some(QuarantineSource::Policy),
        "flapping" => Some(QuarantineSource::Flapping),
        _ => None,
    }
}

impl Batch<'_> {
    /// Accepts the current observation of `id` for this declaration, with
    /// the patch already written that makes the repository follow it (the
    /// acceptance and where its patch is are one row, so neither is ever
    /// recorded without the other).
    pub fn accept(
        &self,
        id: &ResourceId,
        declaration_hash: &str,
        observation_hash: &str,
        at: i64,
        patch: &str,
    ) -> Result<(), StoreError> {
        self.tx
            .execute(
                "INSERT OR REPLACE INTO accepted (resource, kind, name, declaration_hash, \
                 observation_hash, accepted_at, patch) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    id.to_string(),
                    id.kind,
                    id.name,
                    declaration_hash,
                    observation_hash,
                    at,
                    patch
                ],
            )
            .map(drop)
            .map_err(sql(self.path, "cannot record accepted observation"))
    }

    /// Drops the acceptance of `id`. Returns whether there was one.
    pub fn clear_accepted(&self, id: &ResourceId) -> Result<bool, StoreError> {
        self.tx
            .execute("DELETE FROM accepted WHERE resource = ?1", [id.to_string()])
            .map(|n| n > 0)
            .map_err(sql(self.path, "cannot clear accepted observation"))
    }

    /// Quarantines `target`. An existing quarantine keeps its time and its
    /// source if that was a person, so an automatic escalation never turns a
    /// person's break-glass into something a program may release.
    pub fn quarantine(
        &self,
        target: &QuarantineTarget,
        reason: &str,
        source: QuarantineSource,
        at: i64,
    ) -> Result<(), StoreError> {
        self.tx
            .execute(
                "INSERT INTO quarantine (target, reason, source, since) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (target) DO UPDATE SET \
                   reason = CASE WHEN quarantine.source = 'person' AND excluded.source <> 'person' \
                            THEN quarantine.reason ELSE excluded.reason END, \
                   source = CASE WHEN quarantine.source = 'person' THEN 'person' \
                            ELSE excluded.source END",
                params![target_key(target), reason, source.as_str(), at],
            )
            .map(drop)
            .map_err(sql(self.path, "cannot record quarantine"))
    }

    /// Everything quarantined, as this transaction sees it.
    pub fn quarantined(&self) -> Result<Vec<Quarantine>, StoreError> {
        read_quarantined(&self.tx, self.path)
    }

    /// Releases `target` (`datum release`). Returns whether it was quarantined.
    ///
    /// A released resource's flap count starts afresh: the reverts that got
    /// it quarantined as flapping would otherwise quarantine it again at the
    /// next reconcile, undoing the person's release within one interval.
    pub fn release(&self, target: &QuarantineTarget) -> Result<bool, StoreError> {
        let released = self
            .tx
            .execute(
                "DELETE FROM quarantine WHERE target = ?1",
                [target_key(target)],
            )
            .map(|n| n > 0)
            .map_err(sql(self.path, "cannot release quarantine"))?;
        if released && let QuarantineTarget::Resource(_) = target {
            self.tx
                .execute(
                    "DELETE FROM reverts WHERE resource = ?1",
                    [target_key(target)],
                )
                .map_err(sql(self.path, "cannot release quarantine"))?;
        }
        Ok(released)
    }

    /// Logs one revert of `id` at `at` and returns how many reverts of `id`
    /// the log holds since `window_start` (this one included).
    ///
    /// `log_since`: the start of the longest flap window of any class.
    pub fn record_revert(
        &self,
        id: &ResourceId,
        at: i64,
        window_start: i64,
        log_since: i64,
    ) -> Result<u64, StoreError> {
        let err = || sql(self.path, "cannot record revert");
        let key = id.to_string();
        self.tx
            .execute(
                "INSERT INTO reverts (resource, at) VALUES (?1, ?2)",
                params![key, at],
            )
            .map_err(err())?;
        // What no flap window reads: this resource's reverts before its
        // window, anyone's before the longest window.
        self.tx
            .execute(
                "DELETE FROM reverts WHERE resource = ?1 AND at < ?2",
                params![key, window_start],
            )
            .map_err(err())?;
        self.tx
            .execute("DELETE FROM reverts WHERE at < ?1", [log_since])
            .map_err(err())?;
        self.tx
            .query_row(
                "SELECT count(*) FROM reverts WHERE resource = ?1 AND at >= ?2",
                params![key, window_start],
                |r| r.get::<_, i64>(0),
            )
            .map(u64_from_sql)
            .map_err(err())
    }

    /// See [`Store::withdraw_revert`].
    pub fn withdraw_revert(&self, id: &ResourceId, at: i64) -> Result<bool, StoreError> {
        self.tx
            .execute(
                "DELETE FROM reverts WHERE id = \
                 (SELECT max(id) FROM reverts WHERE resource = ?1 AND at = ?2)",
                params![id.to_string(), at],
            )
            .map(|n| n > 0)
            .map_err(sql(self.path, "cannot withdraw a revert"))
    }
}

/// Everything quarantined, oldest first, as `conn` sees it.
pub(super) fn read_quarantined(
    conn: &rusqlite::Connection,
    path: &std::path::Path,
) -> Result<Vec<Quarantine>, StoreError> {
    let rows: Vec<(String, String, String, i64)> = conn
        .prepare_cached(
            "SELECT target, reason, source, since FROM quarantine ORDER BY since, target",
        )
        .and_then(|mut stmt| {
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect()
        })
        .map_err(sql(path, "cannot read quarantine"))?;
    rows.into_iter()
        .map(|(target, reason, source, since)| {
            Ok(Quarantine {
                target: target_from_key(&target)
                    .ok_or_else(|| malformed(path, "quarantine target", &target))?,
                reason,
                source: source_from_word(&source)
                    .ok_or_else(|| malformed(path, "quarantine source", &source))?,
                since,
            })
        })
        .collect()
}

impl Store {
    /// The accepted observation of `id`, if any. The caller compares both
    /// hashes with the current ones: a change in either means it is no longer
    /// accepted.
    pub fn accepted(&self, id: &ResourceId) -> Result<Option<Accepted>, StoreError> {
        self.conn
            .query_row(
                "SELECT declaration_hash, observation_hash, accepted_at, patch FROM accepted \
                 WHERE resource = ?1",
                [id.to_string()],
                |r| {
                    Ok(Accepted {
                        declaration_hash: r.get(0)?,
                        observation_hash: r.get(1)?,
                        accepted_at: r.get(2)?,
                        patch: r.get(3)?,
                    })
                },
            )
            .optional()
            .map_err(sql(&self.path, "cannot read accepted observation"))
    }

    /// Every accepted observation, by resource (display form): what a pass
    /// must not revert while both hashes still match.
    pub fn all_accepted(&self) -> Result<std::collections::HashMap<String, Accepted>, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT resource, declaration_hash, observation_hash, accepted_at, patch \
                 FROM accepted",
            )
            .and_then(|mut stmt| {
                stmt.query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        Accepted {
                            declaration_hash: r.get(1)?,
                            observation_hash: r.get(2)?,
                            accepted_at: r.get(3)?,
                            patch: r.get(4)?,
                        },
                    ))
                })?
                .collect()
            })
            .map_err(sql(&self.path, "cannot read accepted observations"))
    }

    /// Everything quarantined, oldest first.
    pub fn quarantined(&self) -> Result<Vec<Quarantine>, StoreError> {
        read_quarantined(&self.conn, &self.path)
    }

    /// The quarantine of `target`, if any (the host's quarantine is not
    /// folded in: ask for [`QuarantineTarget::Host`] separately).
    pub fn quarantine_of(
        &self,
        target: &QuarantineTarget,
    ) -> Result<Option<Quarantine>, StoreError> {
        let key = target_key(target);
        Ok(self
            .quarantined()?
            .into_iter()
            .find(|q| target_key(&q.target) == key))
    }

    /// See [`Batch::accept`]; one transaction.
    pub fn accept(
        &mut self,
        id: &ResourceId,
        declaration_hash: &str,
        observation_hash: &str,
        at: i64,
        patch: &str,
    ) -> Result<(), StoreError> {
        self.write(|b| b.accept(id, declaration_hash, observation_hash, at, patch))
    }

    /// See [`Batch::clear_accepted`]; one transaction.
    pub fn clear_accepted(&mut self, id: &ResourceId) -> Result<bool, StoreError> {
        self.write(|b| b.clear_accepted(id))
    }

    /// See [`Batch::quarantine`]; one transaction.
    pub fn quarantine(
        &mut self,
        target: &QuarantineTarget,
        reason: &str,
        source: QuarantineSource,
        at: i64,
    ) -> Result<(), StoreError> {
        self.write(|b| b.quarantine(target, reason, source, at))
    }

    /// See [`Batch::release`]; one transaction.
    pub fn release(&mut self, target: &QuarantineTarget) -> Result<bool, StoreError> {
        self.write(|b| b.release(target))
    }

    /// How many reverts of `id` the log holds since `window_start` (what
    /// [`Batch::record_revert`] would count, less the one it logs).
    pub fn reverts_since(&self, id: &ResourceId, window_start: i64) -> Result<u64, StoreError> {
        self.conn
            .query_row(
                "SELECT count(*) FROM reverts WHERE resource = ?1 AND at >= ?2",
                params![id.to_string(), window_start],
                |r| r.get::<_, i64>(0),
            )
            .map(u64_from_sql)
            .map_err(sql(&self.path, "cannot read reverts"))
    }

    /// Withdraws one revert of `id` logged at `at` (by
    /// [`Store::record_revert`], before the revert was made) when the revert
    /// did not go through: a revert that changed nothing does not count
    /// toward flapping. Returns whether there was one.
    pub fn withdraw_revert(&mut self, id: &ResourceId, at: i64) -> Result<bool, StoreError> {
        self.write(|b| b.withdraw_revert(id, at))
    }

    /// See [`Batch::record_revert`]; one transaction.
    pub fn record_revert(
        &mut self,
        id: &ResourceId,
        at: i64,
        window_start: i64,
        log_since: i64,
    ) -> Result<u64, StoreError> {
        self.write(|b| b.record_revert(id, at, window_start, log_since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        (dir, store)
    }

    #[test]
    fn a_release_starts_the_resources_flap_count_afresh() {
        let (_dir, mut store) = open();
        let motd = ResourceId::new("File", "motd");
        let other = ResourceId::new("File", "other");
        for at in 1..=5 {
            store.record_revert(&motd, at, 0, 0).unwrap();
            store.record_revert(&other, at, 0, 0).unwrap();
        }
        let t = QuarantineTarget::Resource(motd.clone());
        // Not quarantined: nothing released, the count stands.
        assert!(!store.release(&t).unwrap());
        assert_eq!(store.reverts_since(&motd, 0).unwrap(), 5);
        store
            .quarantine(&t, "flapping", QuarantineSource::Flapping, 6)
            .unwrap();
        assert!(store.release(&t).unwrap());
        assert_eq!(store.reverts_since(&motd, 0).unwrap(), 0);
        // Another resource's count is its own.
        assert_eq!(store.reverts_since(&other, 0).unwrap(), 5);
    }

    /// Reverts were kept 30 days whatever the flap window: a class with a
    /// 60-day window counted only the last 30 days (a flapping resource
    /// was never quarantined), and one with an hour's kept 30 days of rows
    /// it never reads. A resource's reverts older than its window go when
    /// it is reverted again, and every revert older than the longest window
    /// of any class.
    #[test]
    fn the_revert_log_keeps_what_the_flap_windows_read() {
        let (_dir, mut store) = open();
        const DAY: i64 = 86_400;
        let (slow, fast) = (
            ResourceId::new("File", "slow"),
            ResourceId::new("File", "fast"),
        );
        // `slow`'s class has a 60-day window, `fast`'s an hour.
        let longest = |now: i64| now - 60 * DAY;
        let slow_revert = |store: &mut Store, at: i64| {
            store
                .record_revert(&slow, at, at - 60 * DAY, longest(at))
                .unwrap()
        };
        assert_eq!(slow_revert(&mut store, 0), 1);
        assert_eq!(slow_revert(&mut store, 31 * DAY), 2);
        for n in 0..100 {
            let at = 40 * DAY + n * 2 * 3600;
            assert_eq!(
                store
                    .record_revert(&fast, at, at - 3600, longest(at))
                    .unwrap(),
                1
            );
        }
        assert_eq!(slow_revert(&mut store, 45 * DAY), 3, "three within 60 days");
        let rows = |store: &Store, id: &ResourceId| store.reverts_since(id, i64::MIN).unwrap();
        assert_eq!(rows(&store, &fast), 1, "only what an hour's window reads");
        assert_eq!(rows(&store, &slow), 3);
        // A year on, a revert of another resource forgets `slow`'s.
        store
            .record_revert(&fast, 400 * DAY, 400 * DAY - 3600, longest(400 * DAY))
            .unwrap();
        assert_eq!(rows(&store, &slow), 0);
    }

    #[test]
    fn automatic_quarantine_never_downgrades_a_persons() {
        let (_dir, mut store) = open();
        let t = QuarantineTarget::Resource(ResourceId::new("File", "motd"));
        store
            .quarantine(&t, "investigating", QuarantineSource::Person, 5)
            .unwrap();
        store
            .quarantine(&t, "flapped 4 times", QuarantineSource::Flapping, 9)
            .unwrap();
        let q = store.quarantine_of(&t).unwrap().unwrap();
        assert_eq!(q.source, QuarantineSource::Person);
        assert_eq!(q.reason, "investigating");
        assert_eq!(q.since, 5);
        assert!(store.release(&t).unwrap());
        assert!(store.quarantine_of(&t).unwrap().is_none());
    }

    #[test]
    fn host_and_resource_targets_round_trip() {
        let (_dir, mut store) = open();
        store
            .quarantine(
                &QuarantineTarget::Host,
                "policy",
                QuarantineSource::Policy,
                1,
            )
            .unwrap();
        let r = QuarantineTarget::Resource(ResourceId::new("Tree", "www"));
        store
            .quarantine(&r, "x", QuarantineSource::Flapping, 2)
            .unwrap();
        let all = store.quarantined().unwrap();
        assert_eq!(all[0].target, QuarantineTarget::Host);
        assert_eq!(all[1].target, r);
    }

    #[test]
    fn a_quarantine_that_cannot_be_read_makes_the_store_unusable() {
        for damage in [
            "UPDATE quarantine SET target = 'File[motd' WHERE target = 'File[motd]'",
            "UPDATE quarantine SET since = 'yesterday'",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.db");
            let mut store = Store::open(&path).unwrap();
            let id = ResourceId::new("File", "motd");
            store
                .quarantine(
                    &QuarantineTarget::Resource(id),
                    "outage fix",
                    QuarantineSource::Person,
                    1,
                )
                .unwrap();
            drop(store);
            rusqlite::Connection::open(&path)
                .unwrap()
                .execute(damage, [])
                .unwrap();
            match Store::open(&path) {
                Err(StoreError::Unusable { reason, .. }) => {
                    assert!(reason.contains("malformed"), "{damage}: {reason}")
                }
                other => panic!("{damage}: {other:?}"),
            }
        }
    }

    #[test]
    fn accepted_observation_round_trips_and_clears() {
        let (_dir, mut store) = open();
        let id = ResourceId::new("File", "motd");
        store
            .accept(&id, "decl", "obs", 3, "/p/File-motd.patch")
            .unwrap();
        let a = store.accepted(&id).unwrap().unwrap();
        assert_eq!(
            (a.declaration_hash.as_str(), a.observation_hash.as_str()),
            ("decl", "obs")
        );
        assert_eq!(a.patch.as_deref(), Some("/p/File-motd.patch"));
        assert!(store.clear_accepted(&id).unwrap());
        assert_eq!(store.accepted(&id).unwrap(), None);
    }

    #[test]
    fn revert_count_is_per_resource_and_windowed() {
        let (_dir, mut store) = open();
        let a = ResourceId::new("File", "a");
        let b = ResourceId::new("File", "b");
        assert_eq!(store.record_revert(&a, 100, 0, 0).unwrap(), 1);
        assert_eq!(store.record_revert(&b, 150, 0, 0).unwrap(), 1);
        assert_eq!(store.record_revert(&a, 200, 0, 0).unwrap(), 2);
        assert_eq!(store.record_revert(&a, 300, 150, 0).unwrap(), 2);
    }
}
