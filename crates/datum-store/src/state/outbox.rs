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

/// Bytes of queued reports kept at most, beside [`OUTBOX_LIMIT`], unless
/// `report.yaml` says otherwise (`outbox_bytes`): a report
/// may be up to about 1 MiB (`datum_fleet::report::REPORT_BUDGET`), so the
/// count alone let an outbox of large reports reach about 1 GB while the
/// server was down, fill the file system under the state store, and with
/// it stop every apply. 128 MiB holds the week of small reports the count
/// is for, and at least 130 of the largest.
pub const OUTBOX_BYTES: u64 = 128 * 1024 * 1024;

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
    /// more than `limit` reports, or more than `OUTBOX_BYTES` (128 MiB) of them, the
    /// oldest not yet sent are dropped and counted, and the count is
    /// announced with the next delivery. A report whose delivery started
    /// ([`Queue::announce`]) is kept: the server may hold it already, and
    /// then it was not dropped. The report just queued is always kept.
    pub fn enqueue_report(
        &self,
        key: &str,
        seq: u64,
        body: &[u8],
        limit: u64,
        now: i64,
    ) -> Result<(), StoreError> {
        self.enqueue_report_within(key, seq, body, limit, OUTBOX_BYTES, now)
    }

    /// [`Batch::enqueue_report`] with a byte budget of `max_bytes` in place
    /// of `OUTBOX_BYTES` (`report.yaml`'s `outbox_bytes`).
    pub fn enqueue_report_within(
        &self,
        key: &str,
        seq: u64,
        body: &[u8],
        limit: u64,
        max_bytes: u64,
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
                     SELECT id FROM outbox WHERE announced IS NULL ORDER BY id
                     LIMIT max(0, (SELECT count(*) FROM outbox) - ?1))",
                params![limit],
            )
            .map_err(sql(self.path, "cannot trim the outbox"))?;
        // Then by bytes: a report whose delivery started counts first,
        // then the others from the newest back; those past the budget go
        // (length() of a BLOB reads its size, not its bytes).
        let max_bytes = i64::try_from(max_bytes).unwrap_or(i64::MAX);
        let over = over
            + tx.execute(
                "DELETE FROM outbox WHERE id IN (
                     SELECT id FROM (
                         SELECT id, sum(length(body)) OVER (ORDER BY id DESC) AS kept
                         FROM outbox WHERE announced IS NULL)
                     WHERE kept + (SELECT coalesce(sum(length(body)), 0) FROM outbox
                                   WHERE announced IS NOT NULL) > ?1
                       AND id <> (SELECT max(id) FROM outbox))",
                params![max_bytes],
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

impl Batch<'_> {
    /// Sets aside, as refused, every queued report that names another host
    /// than `host` (the name `report.yaml`'s credentials were issued to, now
    /// also the one host.yaml gives): made while the host was named
    /// otherwise, the server refuses them with these credentials (403) and
    /// always will, and the delivery, which keeps the queue in order and
    /// everything while credentials are refused, would hold every later
    /// report behind them for good. The backoff those refusals built up is
    /// cleared with them; the dropped counts they carried are announced with
    /// the next report, as for any refused report. Returns the names and
    /// how many reports each had.
    ///
    /// Only a stuck delivery (a failure since the last success) can be held
    /// back by them, so the outbox is read only then, and once.
    pub fn set_aside_reports_of_others(
        &self,
        host: &str,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let tx = &self.tx;
        let read = || sql(self.path, "cannot read the outbox");
        let stuck: Option<bool> = tx
            .query_row(
                "SELECT failures > 0 OR last_error IS NOT NULL FROM outbox_state WHERE id = 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(read())?;
        if stuck != Some(true) {
            return Ok(Vec::new());
        }
        // The body is the report's JSON, stored as a BLOB (which
        // json_extract would read as SQLite's binary JSON): read as text.
        // A report names its host within its first bytes (serde writes the
        // fields in order: format_version, key, seq, kind, host), so one
        // that holds `"host":"NAME"` there is this host's without parsing
        // the whole of it (a full outbox of large reports is hundreds of
        // MB); only the others are parsed.
        let mut others: Vec<(i64, String, i64)> = Vec::new();
        {
            let mut stmt = tx
                .prepare(
                    "SELECT id, json_extract(CAST(body AS TEXT), '$.host'), coalesce(announced, 0) \
                     FROM outbox WHERE \
                     instr(CAST(substr(body, 1, 256) AS TEXT), '\"host\":' || json_quote(?1)) = 0 \
                     ORDER BY id",
                )
                .map_err(read())?;
            let rows = stmt
                .query_map([host], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .map_err(read())?;
            for row in rows {
                if let (id, Some(name), announced) = row.map_err(read())?
                    && name != host
                {
                    others.push((id, name, announced));
                }
            }
        }
        if others.is_empty() {
            return Ok(Vec::new());
        }
        let mut names: std::collections::BTreeMap<String, u64> = Default::default();
        for (_, name, _) in &others {
            *names.entry(name.clone()).or_default() += 1;
        }
        let names: Vec<(String, u64)> = names.into_iter().collect();
        let why = format!(
            "made while this host was named {}, not `{host}`, whose credentials report.yaml holds: the server refuses it with them",
            names
                .iter()
                .map(|(n, _)| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let count = others.len() as i64;
        let announced: i64 = others.iter().map(|(_, _, a)| *a).sum();
        let failed = || sql(self.path, "cannot set the refused reports aside");
        tx.execute(
            "UPDATE outbox_state SET refused_total = refused_total + ?1, last_refused = ?2, \
             dropped = dropped + ?3, failures = 0, next_attempt_ms = 0, last_error = NULL \
             WHERE id = 1",
            params![count, why, announced],
        )
        .map_err(failed())?;
        let mut delete = tx
            .prepare("DELETE FROM outbox WHERE id = ?1")
            .map_err(failed())?;
        for (id, _, _) in &others {
            delete.execute([id]).map_err(failed())?;
        }
        Ok(names)
    }
}

impl Batch<'_> {
    /// Whether the server's last reply said it takes the optional report
    /// field `field` (`datum_fleet::Reply::takes`): false before any reply,
    /// and after a reply of a server that does not (one that predates the
    /// field refuses a report holding it).
    pub fn server_takes(&self, field: &str) -> Result<bool, StoreError> {
        let text: Option<Option<String>> = self
            .tx
            .query_row("SELECT takes FROM outbox_state WHERE id = 1", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(sql(self.path, "cannot read what the server takes"))?;
        match text.flatten() {
            None => Ok(false),
            Some(t) => serde_json::from_str::<Vec<String>>(&t)
                .map(|takes| takes.iter().any(|t| t == field))
                .map_err(|e| malformed(self.path, "fields the server takes", e)),
        }
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
                // The store's id (schema version 12) is the outbox's: the
                // outbox lives and goes with the store it was made in.
                "SELECT id, key, body, \
                 (SELECT store_id FROM store_identity WHERE id = 1) \
                 FROM outbox ORDER BY id LIMIT 1",
                [],
                |r| {
                    let store: Option<String> = r.get(3)?;
                    Ok(Queued {
                        id: r.get(0)?,
                        key: r.get(1)?,
                        body: r.get(2)?,
                        store: store.as_deref().and_then(super::store_id_of),
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

    fn announce(&mut self, id: i64) -> Result<Option<u64>, StoreError> {
        let batch = self.store.batch()?;
        ensure_state(&batch)?;
        let announced = (|| {
            // The first attempt takes the count not yet announced; every
            // later one finds it in the row.
            let handed = batch.tx.execute(
                "UPDATE outbox SET announced = (SELECT dropped FROM outbox_state WHERE id = 1)
                 WHERE id = ?1 AND announced IS NULL",
                [id],
            )?;
            if handed == 1 {
                batch
                    .tx
                    .execute("UPDATE outbox_state SET dropped = 0 WHERE id = 1", [])?;
            }
            batch
                .tx
                .query_row("SELECT announced FROM outbox WHERE id = ?1", [id], |r| {
                    r.get::<_, Option<i64>>(0)
                })
                .optional()
        })()
        .map_err(sql(
            batch.path,
            "cannot record the dropped count of a delivery",
        ))?;
        batch.commit()?;
        Ok(announced.map(|n| super::u64_from_sql(n.unwrap_or(0))))
    }

    fn delivered(&mut self, id: i64, reply: &Reply) -> Result<(), StoreError> {
        let sampling = reply
            .sampling
            .as_ref()
            .and_then(|p| serde_json::to_string(p).ok());
        // What this server takes, as its reply says: a server replaced by
        // one that predates a field is told by its first reply.
        let takes = Some(&reply.takes)
            .filter(|t| !t.is_empty())
            .and_then(|t| serde_json::to_string(t).ok());
        let now = Self::now();
        let batch = self.store.batch()?;
        ensure_state(&batch)?;
        (|| {
            batch.tx.execute("DELETE FROM outbox WHERE id = ?1", [id])?;
            // The count it carried leaves with it (the server holds it);
            // reports dropped while it was on its way are in `dropped`,
            // for the next one.
            batch.tx.execute(
                "UPDATE outbox_state SET failures = 0, next_attempt_ms = 0, last_error = NULL,
                     delivered_total = delivered_total + 1,
                     last_delivered_at = ?1, sampling = ?2, takes = ?3 WHERE id = 1",
                params![now, sampling, takes],
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
            // Gone since it was sent: a pass set it aside
            // (`Batch::set_aside_reports_of_others`, which runs outside the
            // delivery lock) and counted it, with what it carried.
            let Some(announced) = tx
                .query_row("SELECT announced FROM outbox WHERE id = ?1", [id], |r| {
                    r.get::<_, Option<i64>>(0)
                })
                .optional()?
            else {
                return Ok(());
            };
            // The server took none of the count it carried: the next
            // report announces it.
            tx.execute(
                "UPDATE outbox_state SET refused_total = refused_total + 1, last_refused = ?1,
                     dropped = dropped + ?2
                 WHERE id = 1",
                params![why, announced.unwrap_or(0)],
            )?;
            tx.execute("DELETE FROM outbox WHERE id = ?1", [id])?;
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
    use datum_fleet::{SendError, Transport};
    use std::cell::{Cell, RefCell};

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
            takes: Vec::new(),
        }
    }

    /// Whether a report may carry the pass's warnings is what the server's
    /// last reply said: nothing before a reply, a server that says it takes
    /// them, and one that does not (a server of an older build put in its
    /// place, which refuses a report holding a field it does not know).
    #[test]
    fn what_the_server_takes_is_what_its_last_reply_said() {
        let (_d, mut s) = store();
        let takes = |s: &mut Store| {
            let batch = s.batch().unwrap();
            batch.server_takes("warnings").unwrap()
        };
        assert!(!takes(&mut s), "no reply yet");
        queue(&mut s, "a", 10);
        queue(&mut s, "b", 10);
        queue(&mut s, "c", 10);
        let mut new = reply();
        new.takes = vec!["warnings".into()];
        let head = s.outbox().oldest().unwrap().unwrap();
        s.outbox().delivered(head.id, &new).unwrap();
        assert!(takes(&mut s));
        assert!(!s.batch().unwrap().server_takes("other").unwrap());
        // An older server's reply has no `takes`.
        let old: Reply = serde_json::from_str(
            r#"{"format_version": 1, "accepted": true, "duplicate": false, "sampling": null}"#,
        )
        .unwrap();
        let head = s.outbox().oldest().unwrap().unwrap();
        s.outbox().delivered(head.id, &old).unwrap();
        assert!(!takes(&mut s), "the older server's reply said nothing");
        let head = s.outbox().oldest().unwrap().unwrap();
        s.outbox().delivered(head.id, &new).unwrap();
        assert!(takes(&mut s));
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
        q.delivered(head.id, &reply()).unwrap();
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
        assert_eq!(q.announce(head.id).unwrap(), Some(1));
        q.delivered(head.id, &reply()).unwrap();
        assert_eq!(q.dropped().unwrap(), 0, "announced with that delivery");
        assert_eq!(s.outbox_status().unwrap().dropped_total, 1);
    }

    /// At the limit nothing is dropped; every report beyond it drops
    /// exactly one (the oldest), counted once, whatever the limit.
    #[test]
    fn a_full_outbox_drops_exactly_what_is_beyond_its_limit() {
        for limit in [1, 2, 5] {
            for beyond in 0..4 {
                let (_d, mut s) = store();
                for n in 0..limit + beyond {
                    queue(&mut s, &format!("r{n}"), limit);
                }
                let mut q = s.outbox();
                assert_eq!(q.depth().unwrap(), limit, "limit {limit}, {beyond} beyond");
                assert_eq!(
                    q.dropped().unwrap(),
                    beyond,
                    "limit {limit}, {beyond} beyond"
                );
                assert_eq!(
                    q.oldest().unwrap().unwrap().key,
                    format!("r{beyond}"),
                    "the oldest went"
                );
                let status = s.outbox_status().unwrap();
                assert_eq!(
                    status.dropped_total, beyond,
                    "limit {limit}, {beyond} beyond"
                );
                // With the oldest on its way (kept), as many again beyond.
                let head = s.outbox().oldest().unwrap().unwrap();
                s.outbox().announce(head.id).unwrap();
                for n in 0..beyond {
                    queue(&mut s, &format!("again{n}"), limit);
                }
                let mut q = s.outbox();
                assert_eq!(q.depth().unwrap(), limit, "limit {limit}, {beyond} more");
                assert_eq!(q.dropped().unwrap(), beyond, "limit {limit}, {beyond} more");
                assert_eq!(q.oldest().unwrap().unwrap().id, head.id, "kept");
                let status = s.outbox_status().unwrap();
                assert_eq!(status.dropped_total, 2 * beyond);
            }
        }
    }

    /// The count a report carries is handed to it at its first attempt
    /// and is the same at every repeat; the report is kept while the
    /// outbox drops others, and a refusal gives its count back.
    #[test]
    fn a_report_carries_the_count_of_its_first_attempt() {
        let (_d, mut s) = store();
        for k in ["a", "b", "c", "d"] {
            queue(&mut s, k, 3);
        }
        let head = s.outbox().oldest().unwrap().unwrap();
        assert_eq!(head.key, "b");
        assert_eq!(s.outbox().announce(head.id).unwrap(), Some(1), "a");
        assert_eq!(s.outbox().dropped().unwrap(), 0, "handed to b");
        // Two more reports into the full outbox as "b" travels: "c" and
        // "d" are dropped, not "b" (the server may hold it already).
        queue(&mut s, "e", 3);
        queue(&mut s, "f", 3);
        assert_eq!(s.outbox().dropped().unwrap(), 2);
        assert_eq!(s.outbox().oldest().unwrap().unwrap().key, "b");
        assert_eq!(s.outbox().depth().unwrap(), 3);
        // A repeat of "b" (its reply lost) carries what the first did.
        assert_eq!(s.outbox().announce(head.id).unwrap(), Some(1));
        s.outbox().delivered(head.id, &reply()).unwrap();
        assert_eq!(s.outbox().dropped().unwrap(), 2, "for the next report");
        let e = s.outbox().oldest().unwrap().unwrap();
        assert_eq!(s.outbox().announce(e.id).unwrap(), Some(2));
        assert_eq!(s.outbox().dropped().unwrap(), 0);
        // Refused for good: the server counted none of its 2.
        s.outbox().refused(e.id, "HTTP 400: no").unwrap();
        assert_eq!(s.outbox().dropped().unwrap(), 2);
        let f = s.outbox().oldest().unwrap().unwrap();
        assert_eq!(s.outbox().announce(f.id).unwrap(), Some(2));
        s.outbox().delivered(f.id, &reply()).unwrap();
        let status = s.outbox_status().unwrap();
        assert_eq!((status.depth, status.dropped_total), (0, 3));
        // A report no longer queued has no count to carry.
        assert_eq!(s.outbox().announce(f.id).unwrap(), None);
    }

    /// A stand-in for `datum server`'s report endpoint, as its ingest
    /// treats a key: a new key is stored and its dropped count added to
    /// the host's total; a key it holds already is a duplicate, answered
    /// 200 with nothing stored and its dropped count ignored.
    struct Server {
        stored: RefCell<Vec<String>>,
        dropped: Cell<u64>,
        /// Attempts (from 1) whose reply is lost after the server stored.
        lose: Vec<usize>,
        attempts: Cell<usize>,
        /// Runs while attempt `n` is on its way, before the server reads it.
        meanwhile: Box<dyn Fn(usize)>,
    }

    impl Server {
        fn new(lose: &[usize], meanwhile: impl Fn(usize) + 'static) -> Self {
            Server {
                stored: RefCell::new(Vec::new()),
                dropped: Cell::new(0),
                lose: lose.to_vec(),
                attempts: Cell::new(0),
                meanwhile: Box::new(meanwhile),
            }
        }
    }

    impl Transport for Server {
        fn post_report(
            &self,
            key: &str,
            _body: &[u8],
            _depth: u64,
            dropped: u64,
            _store: Option<u128>,
        ) -> Result<Reply, SendError> {
            let n = self.attempts.get() + 1;
            self.attempts.set(n);
            (self.meanwhile)(n);
            let fresh = !self.stored.borrow().iter().any(|k| k == key);
            if fresh {
                self.stored.borrow_mut().push(key.to_owned());
                self.dropped.set(self.dropped.get() + dropped);
            }
            if self.lose.contains(&n) {
                return Err(SendError::Transient {
                    message: "the reply was lost".to_owned(),
                    retry_after: None,
                });
            }
            Ok(Reply {
                duplicate: !fresh,
                ..reply()
            })
        }
    }

    fn deliver_to(s: &mut Store, server: &Server) -> datum_fleet::Delivered {
        let budget = datum_fleet::Budget {
            until: std::time::Instant::now() + std::time::Duration::from_secs(60),
            respect_backoff: false,
        };
        datum_fleet::deliver(&mut s.outbox(), server, budget, || 0).unwrap()
    }

    /// Every report queued reaches the server or is announced to it as
    /// dropped, exactly once: what the server holds and the count it was
    /// told add up to what was queued, and the count is the host's own.
    fn assert_exact(s: &Store, server: &Server, queued: u64, stored: &[&str]) {
        let held = server.stored.borrow().len() as u64;
        assert_eq!(
            (held, server.dropped.get(), held + server.dropped.get()),
            (stored.len() as u64, queued - stored.len() as u64, queued),
            "held by the server, announced to it as dropped, and both: {:?}",
            server.stored.borrow()
        );
        let status = s.outbox_status().unwrap();
        assert_eq!(
            status.dropped_total,
            server.dropped.get(),
            "dropped, as counted"
        );
        assert_eq!(status.depth, 0);
        assert_eq!(*server.stored.borrow(), stored, "stored by the server");
    }

    /// A reply lost after the server stored the report, and the outbox
    /// full before the report is sent again: the report on its way is not
    /// the one dropped (the server may hold it), and the repeat, which the
    /// server answers as a duplicate, carries the count the first attempt
    /// carried, so the reports dropped since travel with the next one.
    #[test]
    fn a_lost_reply_then_a_duplicate_announces_every_dropped_report_once() {
        let (dir, mut s) = store();
        for k in ["a", "b", "c", "d", "e"] {
            queue(&mut s, k, 3);
        }
        let server = Server::new(&[1], |_| {});
        let first = deliver_to(&mut s, &server);
        assert!(first.error.is_some(), "{first:?}");
        assert_eq!(*server.stored.borrow(), ["c"], "stored, the reply lost");
        // The server is still unreachable; another pass queues a report.
        queue(&mut s, "f", 3);
        assert_eq!(s.outbox().depth().unwrap(), 3);
        let again = deliver_to(&mut s, &server);
        assert_exact(&s, &server, 6, &["c", "e", "f"]);
        assert_eq!((again.duplicates, again.delivered), (1, 2), "{again:?}");
        drop(dir);
    }

    /// Reports queued while a delivery is on its way, into a full outbox:
    /// the report travelling stays (it reaches the server), others are
    /// dropped, and each is announced once, with the next delivery.
    #[test]
    fn a_report_dropped_while_a_delivery_is_on_its_way_is_announced_once() {
        let (dir, mut s) = store();
        for k in ["a", "b", "c", "d"] {
            queue(&mut s, k, 3);
        }
        let path = dir.path().join("state.db");
        // A pass of another process queueing two reports as "b" travels
        // (its own connection to the store).
        let server = Server::new(&[], move |n| {
            if n == 1 {
                let mut pass = Store::open(&path).unwrap();
                queue(&mut pass, "e", 3);
                queue(&mut pass, "f", 3);
            }
        });
        let done = deliver_to(&mut s, &server);
        assert_exact(&s, &server, 6, &["b", "e", "f"]);
        assert_eq!(done.delivered, 3, "{done:?}");
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

    /// Queues a report naming `host` as serde writes one (its host within
    /// its first fields), of `len` bytes at least.
    fn queue_of(store: &mut Store, key: &str, host: &str, len: usize) {
        let batch = store.batch().unwrap();
        let seq = batch.next_report_seq().unwrap();
        let body = format!(
            "{{\"format_version\":1,\"key\":\"{key}\",\"seq\":{seq},\"kind\":\"check\",\"host\":\"{host}\",\"pad\":\"{}\"}}",
            "x".repeat(len)
        );
        batch
            .enqueue_report(key, seq, body.as_bytes(), 100, 100)
            .unwrap();
        batch.commit().unwrap();
    }

    /// The first report queued carries `n` dropped ones (as once its
    /// delivery started: the count is announced with it).
    fn carries_dropped(store: &mut Store, n: u64) {
        let batch = store.batch().unwrap();
        batch
            .tx
            .execute("UPDATE outbox_state SET dropped = ?1 WHERE id = 1", [n])
            .unwrap();
        batch.commit().unwrap();
    }

    fn set_aside(store: &mut Store, host: &str) -> Vec<(String, u64)> {
        let batch = store.batch().unwrap();
        let names = batch.set_aside_reports_of_others(host).unwrap();
        batch.commit().unwrap();
        names
    }

    fn keys(store: &mut Store) -> Vec<String> {
        let mut stmt = store
            .conn
            .prepare("SELECT key FROM outbox ORDER BY id")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn reports_of_another_name_are_set_aside_only_when_delivery_is_stuck() {
        let (_d, mut s) = store();
        // `web-1b` starts as `web-1` does: another name.
        queue_of(&mut s, "a", "web-1b", 10);
        queue_of(&mut s, "b", "old", 1000);
        queue_of(&mut s, "c", "web-1b", 10);
        queue_of(&mut s, "d", "web-1", 10);
        queue_of(&mut s, "e", "web-1", 10);
        // The first report's delivery started: it carries 4 dropped ones.
        carries_dropped(&mut s, 4);
        let mut q = s.outbox();
        let head = q.oldest().unwrap().unwrap();
        assert_eq!(q.announce(head.id).unwrap(), Some(4));
        // Nothing is stuck: nothing is read, nothing set aside.
        assert_eq!(set_aside(&mut s, "web-1"), Vec::new());
        assert_eq!(keys(&mut s), ["a", "b", "c", "d", "e"]);
        // The server refused the first (403): the delivery is stuck.
        s.outbox()
            .set_backoff(&Backoff {
                failures: 2,
                next_attempt_ms: 99,
                last_error: Some("HTTP 403".into()),
            })
            .unwrap();
        assert_eq!(
            set_aside(&mut s, "web-1"),
            [("old".to_owned(), 1), ("web-1b".to_owned(), 2)]
        );
        assert_eq!(keys(&mut s), ["d", "e"]);
        let status = s.outbox_status().unwrap();
        assert_eq!(status.refused_total, 3);
        assert!(
            status
                .last_refused
                .as_deref()
                .unwrap()
                .contains("`old`, `web-1b`"),
            "{status:?}"
        );
        assert_eq!(status.backoff, Backoff::default());
        // The count the first carried is announced with the next report.
        assert_eq!(s.outbox().dropped().unwrap(), 4);
        // Not stuck any more: nothing to do.
        assert_eq!(set_aside(&mut s, "web-1"), Vec::new());
    }

    /// The set-aside runs in a pass's transaction, not under the delivery
    /// lock: a delivery may have sent a report of another name when a pass
    /// sets it aside, and the server's refusal of it (413: too large) then
    /// came back for a report no longer queued. It was counted refused a
    /// second time (refused_total 2 for one report) and named the last
    /// refusal; nothing was lost or sent twice. A refusal of a report that
    /// is gone changes nothing.
    #[test]
    fn a_report_set_aside_while_its_refusal_is_on_its_way_is_counted_once() {
        let (_d, mut s) = store();
        queue_of(&mut s, "a", "old", 10);
        queue_of(&mut s, "b", "web-1", 10);
        carries_dropped(&mut s, 4);
        let mut q = s.outbox();
        q.set_backoff(&Backoff {
            failures: 1,
            next_attempt_ms: 0,
            last_error: Some("HTTP 403".into()),
        })
        .unwrap();
        // A delivery takes the first report and sends it...
        let head = q.oldest().unwrap().unwrap();
        assert_eq!(q.announce(head.id).unwrap(), Some(4));
        // ... while a pass sets it aside ...
        assert_eq!(set_aside(&mut s, "web-1"), [("old".to_owned(), 1)]);
        // ... and then the server's refusal comes back.
        s.outbox().refused(head.id, "HTTP 413: too large").unwrap();
        let status = s.outbox_status().unwrap();
        assert_eq!(status.refused_total, 1, "{status:?}");
        assert!(
            status.last_refused.as_deref().unwrap().contains("`old`"),
            "{status:?}"
        );
        assert_eq!(s.outbox().dropped().unwrap(), 4, "announced once, later");
        assert_eq!(keys(&mut s), ["b"]);
    }

    /// The count alone bounded the outbox (1,008 reports of up to ~1 MiB:
    /// ~1 GB while the server is down). Past the byte budget the oldest go,
    /// counted as dropped as the count bound's are; a report whose
    /// delivery started, and the one just queued, stay.
    #[test]
    fn past_its_byte_budget_the_oldest_reports_are_dropped_and_counted() {
        let (_d, mut s) = store();
        let queue_sized = |s: &mut Store, key: &str| {
            let batch = s.batch().unwrap();
            let seq = batch.next_report_seq().unwrap();
            batch
                .enqueue_report_within(key, seq, &[b'x'; 400], 100, 1000, 100)
                .unwrap();
            batch.commit().unwrap();
        };
        queue_sized(&mut s, "a");
        queue_sized(&mut s, "b");
        assert_eq!(keys(&mut s), ["a", "b"]);
        // 1,200 bytes: the oldest goes.
        queue_sized(&mut s, "c");
        assert_eq!(keys(&mut s), ["b", "c"]);
        assert_eq!(s.outbox().dropped().unwrap(), 1);
        // A report whose delivery started is kept; the next oldest goes.
        let mut q = s.outbox();
        let head = q.oldest().unwrap().unwrap();
        q.announce(head.id).unwrap();
        queue_sized(&mut s, "d");
        assert_eq!(keys(&mut s), ["b", "d"]);
        assert_eq!(s.outbox_status().unwrap().dropped_total, 2);
        // A report larger than the budget on its own is still queued.
        let batch = s.batch().unwrap();
        let seq = batch.next_report_seq().unwrap();
        batch
            .enqueue_report_within("e", seq, &[b'x'; 2000], 100, 1000, 100)
            .unwrap();
        batch.commit().unwrap();
        assert_eq!(keys(&mut s), ["b", "e"]);
        assert_eq!(s.outbox_status().unwrap().dropped_total, 3);
        // The default budget is far above the count's small reports.
        const { assert!(OUTBOX_BYTES >= 128 * 1024 * 1024) };
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
