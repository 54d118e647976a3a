//! The fleet outbox: reports waiting to be delivered to `datum server`, in
//! the order they were made, with the delivery's backoff and the sampling
//! plan the server last handed out.
//!
//! A report is queued in the same transaction as the pass it describes
//! ([`Batch::enqueue_report`]), so a pass that is recorded has its report
//! queued and one that is not has none. [`Outbox`] implements
//! `datum_fleet::Queue`: every step of a delivery is one transaction, so a
//! process killed at any point loses nothing (at worst a delivered report
//! is sent again, and the server recognises its key).
//!
//! Reports hold counts, hashes, names and value-free signatures, never a
//! value of a sensitive resource (the `datum` binary builds them so), which
//! keeps the crate's rule that the state database is safe to share.
//!
//! Owns the tables `outbox` and `outbox_state`. Must not: send anything
//! (that is `datum_fleet::delivery`), or read another family's tables.

use datum_fleet::delivery::{Backoff, Queue, Queued};
use datum_fleet::report::{Reply, SamplingPlan};
use rusqlite::{OptionalExtension, params};

use super::{Batch, Store, malformed, sql};
use crate::error::StoreError;

/// Reports kept at most while the server cannot be reached, unless
/// `report.yaml` says otherwise: a week of a check every 10 minutes.
pub const OUTBOX_LIMIT: u64 = 1_008;

/// How long a delivery waits for another delivery of the same outbox (one
/// pass's delivery budget plus a slow last request).
pub const DELIVERY_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// What the outbox knows about its deliveries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboxStatus {
    pub depth: u64,
    /// Unix seconds the oldest queued report was queued at.
    pub oldest_queued_at: Option<i64>,
    pub backoff: Backoff,
    pub delivered_total: u64,
    pub last_delivered_at: Option<i64>,
    /// Dropped because the outbox was full, in all.
    pub dropped_total: u64,
    /// Refused by the server for good, in all, and the last reason.
    pub refused_total: u64,
    pub last_refused: Option<String>,
}

impl Batch<'_> {
    /// The sequence number the next queued report gets (1 for the first).
    pub fn next_report_seq(&self) -> Result<u64, StoreError> {
        ensure_state(self)?;
        let next: i64 = self
            .tx
            .query_row("SELECT next_seq FROM outbox_state WHERE id = 1", [], |r| {
                r.get(0)
            })
            .map_err(sql(self.path, "cannot read the outbox"))?;
        Ok(super::u64_from_sql(next))
    }

    /// Queues a report (its JSON `body`, idempotency `key`, sequence `seq`
    /// from [`Batch::next_report_seq`]) at `now`. When the outbox then holds
    /// more than `limit` reports, the oldest are dropped and counted, and
    /// the count is announced with the next delivery.
    pub fn enqueue_report(
        &self,
        key: &str,
        seq: u64,
        body: &[u8],
        limit: u64,
        now: i64,
    ) -> Result<(), StoreError> {
        ensure_state(self)?;
        let tx = &self.tx;
        tx.execute(
            "INSERT INTO outbox (key, seq, queued_at, body) VALUES (?1, ?2, ?3, ?4)",
            params![key, super::u64_to_sql(seq), now, body],
        )
        .map_err(sql(self.path, "cannot queue the report"))?;
        let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX);
        let over = tx
            .execute(
                "DELETE FROM outbox WHERE id IN (
                     SELECT id FROM outbox ORDER BY id
                     LIMIT max(0, (SELECT count(*) FROM outbox) - ?1))",
                params![limit],
            )
            .map_err(sql(self.path, "cannot trim the outbox"))?;
        tx.execute(
            "UPDATE outbox_state SET next_seq = max(next_seq, ?1 + 1),
                 dropped = dropped + ?2, dropped_total = dropped_total + ?2 WHERE id = 1",
            params![super::u64_to_sql(seq), over as i64],
        )
        .map_err(sql(self.path, "cannot queue the report"))?;
        Ok(())
    }
}

fn ensure_state(batch: &Batch<'_>) -> Result<(), StoreError> {
    batch
        .tx
        .execute("INSERT OR IGNORE INTO outbox_state (id) VALUES (1)", [])
        .map(|_| ())
        .map_err(sql(batch.path, "cannot prepare the outbox"))
}

impl Store {
    /// The outbox, for delivery.
    pub fn outbox(&mut self) -> Outbox<'_> {
        Outbox { store: self }
    }

    /// Holds the lock of this store's outbox while a delivery runs: the
    /// file `<store>.delivery-lock` in the store's private folder, waiting
    /// up to `wait` for another delivery. Every program that delivers an
    /// outbox (`datum`'s passes and agent, `driftwatch --report-to`) takes
    /// it, so two deliveries never send, count or trim the same reports at
    /// once. An in-memory store has no folder and is refused (its parent
    /// would be the working directory, where the lock file would be made).
    pub fn delivery_lock(
        &self,
        wait: std::time::Duration,
    ) -> Result<datum_host::RootLock, datum_host::HostError> {
        let state = self.path.as_path();
        let refused = |kind| datum_host::HostError::io("lock", state, std::io::Error::from(kind));
        if state == std::path::Path::new(super::IN_MEMORY) {
            return Err(refused(std::io::ErrorKind::Unsupported));
        }
        let missing = || refused(std::io::ErrorKind::NotFound);
        let (dir, name) =
            datum_host::private::PrivateDir::open_parent_of(state, false)?.ok_or_else(missing)?;
        let mut lock = name;
        lock.push(".delivery-lock");
        datum_host::RootLock::acquire_in(&dir, &lock, wait)
    }

    /// The outbox's state (depth, backoff, totals).
    pub fn outbox_status(&self) -> Result<OutboxStatus, StoreError> {
        let conn = &self.conn;
        let path = &self.path;
        let (depth, oldest): (i64, Option<i64>) = conn
            .query_row("SELECT count(*), min(queued_at) FROM outbox", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(sql(path, "cannot read the outbox"))?;
        let mut status = OutboxStatus {
            depth: super::u64_from_sql(depth),
            oldest_queued_at: oldest,
            ..OutboxStatus::default()
        };
        let row = conn
            .query_row(
                "SELECT failures, next_attempt_ms, last_error, delivered_total,
                        last_delivered_at, dropped_total, refused_total, last_refused
                 FROM outbox_state WHERE id = 1",
                [],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, Option<i64>>(4)?,
                        r.get::<_, i64>(5)?,
                        r.get::<_, i64>(6)?,
                        r.get::<_, Option<String>>(7)?,
                    ))
                },
            )
            .optional()
            .map_err(sql(path, "cannot read the outbox"))?;
        if let Some((failures, next, error, delivered, last, dropped, refused, why)) = row {
            status.backoff = Backoff {
                failures: u32::try_from(failures).unwrap_or(u32::MAX),
                next_attempt_ms: next,
                last_error: error,
            };
            status.delivered_total = super::u64_from_sql(delivered);
            status.last_delivered_at = last;
            status.dropped_total = super::u64_from_sql(dropped);
            status.refused_total = super::u64_from_sql(refused);
            status.last_refused = why;
        }
        Ok(status)
    }

    /// The sampling plan the server last handed out, if any.
    pub fn sampling_plan(&self) -> Result<Option<SamplingPlan>, StoreError> {
        let text: Option<Option<String>> = self
            .conn
            .query_row("SELECT sampling FROM outbox_state WHERE id = 1", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(sql(&self.path, "cannot read the sampling plan"))?;
        match text.flatten() {
            None => Ok(None),
            Some(t) => serde_json::from_str(&t)
                .map(Some)
                .map_err(|e| malformed(&self.path, "sampling plan", e)),
        }
    }
}

/// The outbox of one state store, as `datum_fleet::delivery` drives it.
pub struct Outbox<'s> {
    store: &'s mut Store,
}

impl Outbox<'_> {
    fn write(
        &mut self,
        action: &'static str,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<()>,
    ) -> Result<(), StoreError> {
        let batch = self.store.batch()?;
        ensure_state(&batch)?;
        f(&batch.tx).map_err(sql(batch.path, action))?;
        batch.commit()
    }

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)
    }
}

impl Queue for Outbox<'_> {
    type Error = StoreError;

    fn oldest(&mut self) -> Result<Option<Queued>, StoreError> {
        self.store
            .conn
            .query_row(
                "SELECT id, key, body FROM outbox ORDER BY id LIMIT 1",
                [],
                |r| {
                    Ok(Queued {
                        id: r.get(0)?,
                        key: r.get(1)?,
                        body: r.get(2)?,
                    })
                },
            )
            .optional()
            .map_err(sql(&self.store.path, "cannot read the outbox"))
    }

    fn depth(&mut self) -> Result<u64, StoreError> {
        let n: i64 = self
            .store
            .conn
            .query_row("SELECT count(*) FROM outbox", [], |r| r.get(0))
            .map_err(sql(&self.store.path, "cannot read the outbox"))?;
        Ok(super::u64_from_sql(n))
    }

    fn dropped(&mut self) -> Result<u64, StoreError> {
        let n: Option<i64> = self
            .store
            .conn
            .query_row("SELECT dropped FROM outbox_state WHERE id = 1", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(sql(&self.store.path, "cannot read the outbox"))?;
        Ok(super::u64_from_sql(n.unwrap_or(0)))
    }

    fn delivered(
        &mut self,
        id: i64,
        announced_dropped: u64,
        reply: &Reply,
    ) -> Result<(), StoreError> {
        let sampling = reply
            .sampling
            .as_ref()
            .and_then(|p| serde_json::to_string(p).ok());
        let now = Self::now();
        let batch = self.store.batch()?;
        ensure_state(&batch)?;
        (|| {
            batch.tx.execute("DELETE FROM outbox WHERE id = ?1", [id])?;
            batch.tx.execute(
                // Only what travelled with this delivery: a report dropped
                // (outbox full) while it was on its way is announced with
                // the next one.
                "UPDATE outbox_state SET failures = 0, next_attempt_ms = 0, last_error = NULL,
                     dropped = max(0, dropped - ?3), delivered_total = delivered_total + 1,
                     last_delivered_at = ?1, sampling = ?2 WHERE id = 1",
                params![now, sampling, super::u64_to_sql(announced_dropped)],
            )?;
            Ok(())
        })()
        .map_err(sql(batch.path, "cannot record the delivery"))?;
        // What a person asked through the server is carried out with the
        // delivery that brought it: acknowledged means done.
        batch.receive_instructions(&reply.instructions, now)?;
        batch.commit()
    }

    fn refused(&mut self, id: i64, why: &str) -> Result<(), StoreError> {
        self.write("cannot set the refused report aside", |tx| {
            tx.execute("DELETE FROM outbox WHERE id = ?1", [id])?;
            tx.execute(
                "UPDATE outbox_state SET refused_total = refused_total + 1, last_refused = ?1
                 WHERE id = 1",
                [why],
            )?;
            Ok(())
        })
    }

    fn backoff(&mut self) -> Result<Backoff, StoreError> {
        Ok(self.store.outbox_status()?.backoff)
    }

    fn set_backoff(&mut self, b: &Backoff) -> Result<(), StoreError> {
        self.write("cannot record the delivery's backoff", |tx| {
            tx.execute(
                "UPDATE outbox_state SET failures = ?1, next_attempt_ms = ?2, last_error = ?3
                 WHERE id = 1",
                params![i64::from(b.failures), b.next_attempt_ms, b.last_error],
            )?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_in_memory_store_has_no_delivery_lock_and_makes_none() {
        let store = Store::open_in_memory().unwrap();
        // Its parent would be the working directory.
        let made = std::env::current_dir()
            .unwrap()
            .join(":memory:.delivery-lock");
        let lock = store.delivery_lock(std::time::Duration::ZERO);
        let left = made.exists();
        if left {
            std::fs::remove_file(&made).unwrap();
        }
        assert!(lock.is_err(), "{lock:?}");
        assert!(!left, "{} made", made.display());
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        (dir, store)
    }

    fn queue(store: &mut Store, key: &str, limit: u64) -> u64 {
        let batch = store.batch().unwrap();
        let seq = batch.next_report_seq().unwrap();
        batch
            .enqueue_report(
                key,
                seq,
                format!("{{\"k\":\"{key}\"}}").as_bytes(),
                limit,
                100,
            )
            .unwrap();
        batch.commit().unwrap();
        seq
    }

    fn reply() -> Reply {
        Reply {
            format_version: 1,
            accepted: true,
            duplicate: false,
            sampling: Some(SamplingPlan {
                fraction: 0.25,
                round_s: 600,
                seed: 9,
                round: 3,
            }),
            instructions: Vec::new(),
        }
    }

    #[test]
    fn reports_leave_in_order_and_only_when_delivered() {
        let (_d, mut s) = store();
        assert_eq!(queue(&mut s, "a", 10), 1);
        assert_eq!(queue(&mut s, "b", 10), 2);
        let mut q = s.outbox();
        assert_eq!(q.depth().unwrap(), 2);
        let head = q.oldest().unwrap().unwrap();
        assert_eq!(head.key, "a");
        // Not delivered: still there (a crash here loses nothing).
        assert_eq!(q.oldest().unwrap().unwrap().key, "a");
        q.delivered(head.id, 0, &reply()).unwrap();
        assert_eq!(q.oldest().unwrap().unwrap().key, "b");
        assert_eq!(s.sampling_plan().unwrap().unwrap().seed, 9);
        let status = s.outbox_status().unwrap();
        assert_eq!((status.depth, status.delivered_total), (1, 1));
        // Sequence numbers keep growing after deliveries.
        assert_eq!(queue(&mut s, "c", 10), 3);
    }

    #[test]
    fn a_full_outbox_drops_the_oldest_and_counts_them() {
        let (_d, mut s) = store();
        for k in ["a", "b", "c", "d"] {
            queue(&mut s, k, 3);
        }
        let mut q = s.outbox();
        assert_eq!(q.depth().unwrap(), 3);
        assert_eq!(q.oldest().unwrap().unwrap().key, "b");
        assert_eq!(q.dropped().unwrap(), 1);
        let head = q.oldest().unwrap().unwrap();
        let announced = q.dropped().unwrap();
        q.delivered(head.id, announced, &reply()).unwrap();
        assert_eq!(q.dropped().unwrap(), 0, "announced with that delivery");
        assert_eq!(s.outbox_status().unwrap().dropped_total, 1);
    }

    #[test]
    fn a_report_dropped_while_a_delivery_is_on_its_way_stays_counted() {
        let (_d, mut s) = store();
        for k in ["a", "b", "c", "d"] {
            queue(&mut s, k, 3);
        }
        // The delivery reads the head and the count it announces (1: "a")...
        let (head, announced) = {
            let mut q = s.outbox();
            (q.oldest().unwrap().unwrap(), q.dropped().unwrap())
        };
        assert_eq!((head.key.as_str(), announced), ("b", 1));
        // ...and while it is on its way, a pass queues two more reports
        // into the full outbox: two more are dropped ("b" itself, the
        // oldest, and "c"). "b" reaches the server all the same, but the
        // outbox cannot tell a report trimmed in flight from one another
        // delivery removed, so it stays counted: one too many announced
        // rather than one too few.
        queue(&mut s, "e", 3);
        queue(&mut s, "f", 3);
        assert_eq!(s.outbox().dropped().unwrap(), 3);
        s.outbox().delivered(head.id, announced, &reply()).unwrap();
        assert_eq!(
            s.outbox().dropped().unwrap(),
            2,
            "only the count that travelled is announced"
        );
        assert_eq!(s.outbox_status().unwrap().dropped_total, 3);
        // A count read larger than the one left (it cannot be, but a store
        // edited by hand) leaves zero, not a negative count.
        let head = s.outbox().oldest().unwrap().unwrap();
        s.outbox().delivered(head.id, 50, &reply()).unwrap();
        assert_eq!(s.outbox().dropped().unwrap(), 0);
    }

    #[test]
    fn backoff_and_refusals_are_kept() {
        let (_d, mut s) = store();
        queue(&mut s, "a", 10);
        let mut q = s.outbox();
        let b = Backoff {
            failures: 3,
            next_attempt_ms: 77,
            last_error: Some("down".into()),
        };
        q.set_backoff(&b).unwrap();
        assert_eq!(q.backoff().unwrap(), b);
        let head = q.oldest().unwrap().unwrap();
        q.refused(head.id, "HTTP 413: too large").unwrap();
        assert_eq!(q.depth().unwrap(), 0);
        let status = s.outbox_status().unwrap();
        assert_eq!(status.refused_total, 1);
        assert_eq!(status.last_refused.as_deref(), Some("HTTP 413: too large"));
    }

    #[test]
    fn a_rolled_back_pass_queues_nothing() {
        let (_d, mut s) = store();
        {
            let batch = s.batch().unwrap();
            let seq = batch.next_report_seq().unwrap();
            batch.enqueue_report("x", seq, b"{}", 10, 1).unwrap();
        }
        assert_eq!(s.outbox().depth().unwrap(), 0);
        assert_eq!(queue(&mut s, "y", 10), 1);
    }
}
