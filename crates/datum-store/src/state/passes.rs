//! Pass summaries and inspection timings.
//!
//! One row per `apply`, `plan` or `check`, plus an optional row per resource
//! class with the time spent inspecting it. `datum schedule` turns the recent
//! timings into p50/p95 inspection times; the history is bounded so an agent
//! checking every minute does not grow the file forever.

use std::collections::BTreeMap;

use rusqlite::{Row, params};
use serde::{Deserialize, Serialize};

use super::{Batch, Store, malformed, sql, u64_from_sql, u64_to_sql};
use crate::error::StoreError;

/// How many passes are kept; older ones (and their class timings) are deleted
/// when a new pass is recorded. At one check a minute this is about a week,
/// far more than percentiles over "recent passes" need.
pub const PASSES_KEPT: i64 = 10_000;

/// The summary of one pass, as the engine reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassRecord {
    /// Unix seconds.
    pub started_at: i64,
    /// Unix seconds.
    pub finished_at: i64,
    /// `apply`, `plan` or `check`.
    pub command: String,
    pub host: String,
    /// Outcome word (`unchanged`, `changed`, `failed`, `blocked`, a drift
    /// category...) to the number of resources that ended with it.
    pub counts: BTreeMap<String, u64>,
    /// Wall-clock duration, measured with a monotonic clock by the caller.
    pub duration_ms: u64,
    pub exit_code: i32,
}

/// A pass read back from the store, with the id `record_pass` returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredPass {
    pub id: i64,
    #[serde(flatten)]
    pub pass: PassRecord,
}

/// Inspection-time percentiles over recent passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50_ms: u64,
    pub p95_ms: u64,
    /// How many passes the figures come from (at most the requested number).
    pub samples: usize,
}

impl Batch<'_> {
    /// Records a pass and returns its id (for `record_class_inspection` and
    /// `record_findings`). Passes beyond [`PASSES_KEPT`] are deleted.
    pub fn record_pass(&self, pass: &PassRecord) -> Result<i64, StoreError> {
        let counts = serde_json::to_string(&pass.counts)
            .map_err(|e| malformed(self.path, "pass counts", e))?;
        let err = || sql(self.path, "cannot record pass");
        self.tx
            .prepare_cached(
                "INSERT INTO passes (command, host, started_at, finished_at, duration_ms, \
                 exit_code, counts) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    pass.command,
                    pass.host,
                    pass.started_at,
                    pass.finished_at,
                    u64_to_sql(pass.duration_ms),
                    pass.exit_code,
                    counts,
                ])
            })
            .map_err(err())?;
        let id = self.tx.last_insert_rowid();
        // Class timings go with their pass through ON DELETE CASCADE.
        self.tx
            .execute(
                "DELETE FROM passes WHERE id <= ?1",
                [id.saturating_sub(PASSES_KEPT)],
            )
            .map_err(err())?;
        Ok(id)
    }

    /// Records how long inspecting the resources of `class` took in pass
    /// `pass_id` (replacing an earlier figure for the same pair).
    pub fn record_class_inspection(
        &self,
        pass_id: i64,
        class: &str,
        duration_ms: u64,
    ) -> Result<(), StoreError> {
        self.insert_class_inspection(pass_id, class, duration_ms, None)
    }

    /// Like [`Batch::record_class_inspection`], also saying whether the
    /// inspection read content (`full_content`) or compared metadata only.
    pub fn record_class_inspection_full(
        &self,
        pass_id: i64,
        class: &str,
        duration_ms: u64,
        full_content: bool,
    ) -> Result<(), StoreError> {
        self.insert_class_inspection(pass_id, class, duration_ms, Some(full_content))
    }

    fn insert_class_inspection(
        &self,
        pass_id: i64,
        class: &str,
        duration_ms: u64,
        full_content: Option<bool>,
    ) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO class_inspections (pass_id, class, duration_ms, \
                 full_content) VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    pass_id,
                    class,
                    u64_to_sql(duration_ms),
                    full_content
                ])
            })
            .map(drop)
            .map_err(sql(self.path, "cannot record class inspection time"))
    }
}

fn pass_from_row(row: &Row<'_>) -> rusqlite::Result<(i64, PassRecord, String)> {
    Ok((
        row.get("id")?,
        PassRecord {
            started_at: row.get("started_at")?,
            finished_at: row.get("finished_at")?,
            command: row.get("command")?,
            host: row.get("host")?,
            counts: BTreeMap::new(),
            duration_ms: u64_from_sql(row.get("duration_ms")?),
            exit_code: row.get("exit_code")?,
        },
        row.get("counts")?,
    ))
}

impl Store {
    /// The most recent passes, newest first.
    pub fn recent_passes(&self, limit: usize) -> Result<Vec<StoredPass>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<(i64, PassRecord, String)> = self
            .conn
            .prepare_cached(
                "SELECT id, command, host, started_at, finished_at, duration_ms, exit_code, \
                 counts FROM passes ORDER BY id DESC LIMIT ?1",
            )
            .and_then(|mut stmt| stmt.query_map([limit], pass_from_row)?.collect())
            .map_err(sql(&self.path, "cannot read passes"))?;
        rows.into_iter()
            .map(|(id, mut pass, counts)| {
                pass.counts = serde_json::from_str(&counts)
                    .map_err(|e| malformed(&self.path, "pass counts", e))?;
                Ok(StoredPass { id, pass })
            })
            .collect()
    }

    /// p50 and p95 inspection time over the last `last_n` passes of `command`:
    /// the whole pass's duration, or with `class` the time recorded for that
    /// class. `None` when there is no sample yet.
    pub fn inspection_percentiles(
        &self,
        command: &str,
        class: Option<&str>,
        last_n: usize,
    ) -> Result<Option<Percentiles>, StoreError> {
        let limit = i64::try_from(last_n).unwrap_or(i64::MAX);
        let err = || sql(&self.path, "cannot read inspection times");
        let samples: Vec<i64> = match class {
            None => self
                .conn
                .prepare_cached(
                    "SELECT duration_ms FROM passes WHERE command = ?1 ORDER BY id DESC LIMIT ?2",
                )
                .and_then(|mut stmt| {
                    stmt.query_map(params![command, limit], |r| r.get(0))?
                        .collect()
                })
                .map_err(err())?,
            Some(class) => self
                .conn
                .prepare_cached(
                    "SELECT ci.duration_ms FROM class_inspections ci \
                     JOIN passes p ON p.id = ci.pass_id \
                     WHERE p.command = ?1 AND ci.class = ?2 ORDER BY p.id DESC LIMIT ?3",
                )
                .and_then(|mut stmt| {
                    stmt.query_map(params![command, class, limit], |r| r.get(0))?
                        .collect()
                })
                .map_err(err())?,
        };
        let mut samples: Vec<u64> = samples.into_iter().map(u64_from_sql).collect();
        samples.sort_unstable();
        Ok(percentiles(&samples))
    }

    /// How many inspections of `class` by `command` were recorded after the
    /// most recent one that read content; `None` if none ever did (a class
    /// auditing every Nth check is due when this reaches N - 1, or is `None`).
    /// Only the passes still kept (see [`PASSES_KEPT`]) are counted.
    pub fn inspections_since_full_content(
        &self,
        command: &str,
        class: &str,
    ) -> Result<Option<u64>, StoreError> {
        let err = || sql(&self.path, "cannot read inspection history");
        let last_full: Option<i64> = self
            .conn
            .prepare_cached(
                "SELECT max(ci.pass_id) FROM class_inspections ci JOIN passes p ON p.id = ci.pass_id \
                 WHERE p.command = ?1 AND ci.class = ?2 AND ci.full_content = 1",
            )
            .and_then(|mut stmt| stmt.query_row(params![command, class], |r| r.get(0)))
            .map_err(err())?;
        let Some(last_full) = last_full else {
            return Ok(None);
        };
        let since: i64 = self
            .conn
            .prepare_cached(
                "SELECT count(*) FROM class_inspections ci JOIN passes p ON p.id = ci.pass_id \
                 WHERE p.command = ?1 AND ci.class = ?2 AND ci.pass_id > ?3",
            )
            .and_then(|mut stmt| stmt.query_row(params![command, class, last_full], |r| r.get(0)))
            .map_err(err())?;
        Ok(Some(u64_from_sql(since)))
    }

    /// See [`Batch::record_pass`]; one transaction.
    pub fn record_pass(&mut self, pass: &PassRecord) -> Result<i64, StoreError> {
        self.write(|b| b.record_pass(pass))
    }

    /// See [`Batch::record_class_inspection`]; one transaction.
    pub fn record_class_inspection(
        &mut self,
        pass_id: i64,
        class: &str,
        duration_ms: u64,
    ) -> Result<(), StoreError> {
        self.write(|b| b.record_class_inspection(pass_id, class, duration_ms))
    }

    /// See [`Batch::record_class_inspection_full`]; one transaction.
    pub fn record_class_inspection_full(
        &mut self,
        pass_id: i64,
        class: &str,
        duration_ms: u64,
        full_content: bool,
    ) -> Result<(), StoreError> {
        self.write(|b| b.record_class_inspection_full(pass_id, class, duration_ms, full_content))
    }
}

/// Nearest-rank percentiles of sorted samples: the reported figure is always
/// a time some pass actually took, never an interpolation between two.
fn percentiles(sorted: &[u64]) -> Option<Percentiles> {
    let rank = |pct: usize| {
        let n = sorted.len();
        // ceil(pct * n / 100), at least 1, as a 0-based index.
        let r = (pct * n).div_ceil(100).max(1);
        sorted.get(r - 1).copied()
    };
    Some(Percentiles {
        p50_ms: rank(50)?,
        p95_ms: rank(95)?,
        samples: sorted.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        assert_eq!(percentiles(&[]), None);
        let one = percentiles(&[7]).unwrap();
        assert_eq!((one.p50_ms, one.p95_ms, one.samples), (7, 7, 1));
        let hundred: Vec<u64> = (1..=100).collect();
        let p = percentiles(&hundred).unwrap();
        assert_eq!((p.p50_ms, p.p95_ms), (50, 95));
        let p = percentiles(&[10, 20, 30, 40]).unwrap();
        // ceil(0.5*4)=2nd -> 20; ceil(0.95*4)=4th -> 40
        assert_eq!((p.p50_ms, p.p95_ms), (20, 40));
    }

    /// A reader that holds its snapshot (a long `datum check` beside the
    /// agent's writes) keeps SQLite from starting its log again, so the
    /// write-ahead log grows while it lasts; SQLite then reuses the file
    /// from its start, but never makes it shorter, so the state folder kept
    /// the largest log it ever had. It goes back to JOURNAL_SIZE_LIMIT once
    /// the reader is done.
    #[test]
    fn the_log_shrinks_back_once_a_reader_that_held_it_is_done() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mut store = super::super::Store::open(&path).unwrap();
        let big = BTreeMap::from([("x".repeat(6000), 1)]);
        let pass = |store: &mut super::super::Store| {
            store
                .record_pass(&PassRecord {
                    started_at: 0,
                    finished_at: 0,
                    command: "check".into(),
                    host: "h".into(),
                    counts: big.clone(),
                    duration_ms: 1,
                    exit_code: 0,
                })
                .unwrap();
        };
        let reader = rusqlite::Connection::open(&path).unwrap();
        reader
            .execute_batch("BEGIN; SELECT count(*) FROM passes;")
            .unwrap();
        for _ in 0..1_500 {
            pass(&mut store);
        }
        let wal = dir.path().join("s.db-wal");
        let held = std::fs::metadata(&wal).unwrap().len();
        assert!(held > 3 * crate::db::JOURNAL_SIZE_LIMIT, "{held}");
        reader.execute_batch("ROLLBACK").unwrap();
        drop(reader);
        for _ in 0..5 {
            pass(&mut store);
        }
        let after = std::fs::metadata(&wal).unwrap().len();
        assert!(after <= crate::db::JOURNAL_SIZE_LIMIT, "{held} -> {after}");
    }

    #[test]
    fn inspections_since_the_last_full_content_audit() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = super::super::Store::open(&dir.path().join("s.db")).unwrap();
        let pass = |store: &mut super::super::Store| {
            store
                .record_pass(&PassRecord {
                    started_at: 0,
                    finished_at: 0,
                    command: "check".into(),
                    host: "h".into(),
                    counts: BTreeMap::new(),
                    duration_ms: 1,
                    exit_code: 0,
                })
                .unwrap()
        };
        assert_eq!(
            store.inspections_since_full_content("check", "c").unwrap(),
            None
        );
        let p = pass(&mut store);
        store
            .record_class_inspection_full(p, "c", 5, false)
            .unwrap();
        assert_eq!(
            store.inspections_since_full_content("check", "c").unwrap(),
            None
        );
        let p = pass(&mut store);
        store
            .record_class_inspection_full(p, "c", 50, true)
            .unwrap();
        store
            .record_class_inspection_full(p, "other", 5, false)
            .unwrap();
        assert_eq!(
            store.inspections_since_full_content("check", "c").unwrap(),
            Some(0)
        );
        for _ in 0..3 {
            let p = pass(&mut store);
            store
                .record_class_inspection_full(p, "c", 5, false)
                .unwrap();
        }
        assert_eq!(
            store.inspections_since_full_content("check", "c").unwrap(),
            Some(3)
        );
        assert_eq!(
            store.inspections_since_full_content("apply", "c").unwrap(),
            None
        );
    }

    #[test]
    fn old_passes_are_trimmed_with_their_class_timings() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = super::super::Store::open(&dir.path().join("s.db")).unwrap();
        // Pretend the id counter is already near the bound, so the test does
        // not need ten thousand inserts.
        store
            .conn
            .execute_batch(
                "INSERT INTO passes (id, command, host, started_at, finished_at, duration_ms, \
                 exit_code, counts) VALUES (5, 'check', 'h', 0, 0, 1, 0, '{}');
                 INSERT INTO class_inspections (pass_id, class, duration_ms) VALUES (5, 'normal', 1);",
            )
            .unwrap();
        store
            .conn
            .execute(
                "UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'passes'",
                [PASSES_KEPT + 4],
            )
            .unwrap();
        let pass = PassRecord {
            started_at: 1,
            finished_at: 2,
            command: "check".into(),
            host: "h".into(),
            counts: BTreeMap::new(),
            duration_ms: 3,
            exit_code: 0,
        };
        let id = store.record_pass(&pass).unwrap();
        assert_eq!(id, PASSES_KEPT + 5);
        let left = store.recent_passes(10).unwrap();
        assert_eq!(left.len(), 1, "pass 5 should have been trimmed");
        let timings: i64 = store
            .conn
            .query_row("SELECT count(*) FROM class_inspections", [], |r| r.get(0))
            .unwrap();
        assert_eq!(timings, 0);
    }
}
