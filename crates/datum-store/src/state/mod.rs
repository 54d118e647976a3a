//! The state database: one SQLite file per root (`<root>/var/lib/datum/state.db`).
//!
//! [`Store`] owns the connection. Reads are methods on `Store`; every write is
//! a transaction, either one per call (`Store::record_verified`...) or many
//! grouped in a [`Batch`] that commits once. A process killed at any moment
//! leaves either all of a batch or none of it.
//!
//! Each submodule owns one family of tables and must not touch another's.
//! Nothing here decides policy (what counts as drift, when to quarantine):
//! the engine and `datum check` decide, this module remembers.

mod deployments;
mod failures;
mod findings;
mod instructions;
mod keyed;
mod outbox;
mod passes;
mod policy;
mod schema;
mod service;
mod verified;
mod writers;

use std::path::{Path, PathBuf};

use rusqlite::{Connection, Transaction, TransactionBehavior};

pub use deployments::{DEPLOYMENTS_KEPT, Deployment, StoredDeployment};
pub use failures::ApplyFailure;
pub use findings::{FindingAge, FindingRecord, FindingScope};
pub use instructions::{ReceivedInstruction, target_of, word_of};
pub use keyed::KeyedRecords;
pub use outbox::{DELIVERY_LOCK_WAIT, OUTBOX_BYTES, OUTBOX_LIMIT, Outbox, OutboxStatus};
pub use passes::{PASSES_KEPT, PassRecord, Percentiles, StoredPass};
pub use policy::{Accepted, Quarantine, QuarantineSource, QuarantineTarget};
pub use service::{OwedAction, OwedReload};
pub use verified::{
    FLUSH_AFTER, FLUSH_AFTER_RECORDS, VerifiedRecord, VerifiedView, is_sealed_form,
};

use datum_host::{Durability, PrivateDir};

use crate::error::StoreError;

/// Free space a pass needs on the store's file system (see
/// [`require_room`]): a pass's records, with room for the WAL.
pub const MIN_FREE: u64 = 1024 * 1024;

/// Fails unless the file system holding `folder` (a store's folder) has
/// room to record a pass ([`MIN_FREE`] bytes), so an apply finds a full disk
/// before it changes anything rather than after, when owed reloads could no
/// longer be kept. `path` names the store in the error.
pub fn require_room(folder: &PrivateDir, path: &Path) -> Result<(), StoreError> {
    let available = folder.available_bytes().map_err(|e| StoreError::Host {
        path: folder.path().to_owned(),
        cause: Box::new(e),
    })?;
    if available < MIN_FREE {
        return Err(StoreError::Full {
            path: path.to_owned(),
            available,
            needed: MIN_FREE,
        });
    }
    Ok(())
}

/// A database path as its folder and file name.
fn split(path: &Path) -> Result<(PathBuf, String), StoreError> {
    let bad = || StoreError::Io {
        path: path.to_owned(),
        action: "cannot use as a database path",
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    };
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(bad)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name.to_owned()))
}

/// The path of a store opened with [`Store::open_in_memory`]: it names no
/// file (and no folder to keep a lock in).
pub(crate) const IN_MEMORY: &str = ":memory:";

/// The open state database of one root.
///
/// One writer per root: the engine holds the root lock for a pass. Readers
/// (`datum schedule`, `datum backup list`) may open the same file meanwhile.
///
/// `Store::record_verified` and `Store::forget` are buffered (see
/// [`Store::flush`]): a no-op apply touches every resource, and one fsync per
/// resource would cost more than the whole pass. Every other write commits
/// before it returns.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    pending: verified::Pending,
    /// Directory fsyncs a pass owes: flushed before every commit, so
    /// nothing is recorded while a change it describes could still be lost
    /// (see [`Store::set_durability`]).
    durability: Option<Durability>,
    /// The host's digest key: what a sensitive resource's verified record
    /// holds instead of its plain hashes (see `Store::record_verified_of`).
    /// Boxed: a `Store` is moved around in enums of its callers.
    digest_key: Option<Box<datum_core::DigestKey>>,
}

impl Drop for Store {
    fn drop(&mut self) {
        // Best effort: a failure here only loses verified records, which the
        // next pass re-derives from observation (see `Store::flush`).
        let _ = self.flush();
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens the state database at `path` (a path the operator named),
    /// creating it and its folder (mode 0700) when missing. See
    /// [`Store::open_in`].
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let (dir, name) = split(path)?;
        Self::open_in(&crate::db::private_dir(&dir)?, &name)
    }

    /// Opens the state database `name` in Datum's private folder `dir`,
    /// creating it when missing. A corrupt, foreign or too-new database is
    /// [`StoreError::Unusable`] and left exactly as it is: it holds
    /// quarantines and owed reloads. Recovering is the operator's decision
    /// ([`Store::rebuild_in`]).
    ///
    /// A store whose quarantines cannot be read is unusable too: every
    /// command that acts leaves out what they name, and one that could not
    /// read them would act on everything, a fix a person told it not to
    /// touch included (the integrity check reads the pages, not the rows:
    /// a damaged row passes it).
    pub fn open_in(dir: &PrivateDir, name: &str) -> Result<Store, StoreError> {
        let conn = crate::db::open(dir, name, &schema::SCHEMA)?;
        let path = dir.file_path(name);
        if let Err(e) = policy::read_quarantined(&conn, &path) {
            return Err(match e {
                StoreError::Malformed { what, detail, .. } => StoreError::Unusable {
                    path,
                    reason: format!("{what} in the database is malformed: {detail}"),
                },
                StoreError::Sqlite { source, .. }
                    if matches!(
                        source,
                        rusqlite::Error::InvalidColumnType(..)
                            | rusqlite::Error::FromSqlConversionFailure(..)
                    ) =>
                {
                    StoreError::Unusable {
                        path,
                        reason: format!("a quarantine in the database is malformed: {source}"),
                    }
                }
                other => other,
            });
        }
        Ok(Store {
            conn,
            path,
            pending: verified::Pending::default(),
            durability: None,
            digest_key: None,
        })
    }

    /// Whether the state database `name` in `dir` exists and looks
    /// usable (see `db::probe`: its header, application id and schema
    /// version, no integrity check), creating and changing nothing.
    pub fn probe_in(dir: &PrivateDir, name: &str) -> Result<(), StoreError> {
        crate::db::probe(dir, name, &schema::SCHEMA)
    }

    /// A store that remembers nothing beyond this process: what a
    /// report-only check uses when the real one is unusable (it reads as
    /// empty, and what it records goes nowhere).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        Ok(Store {
            conn: crate::db::open_memory(&schema::SCHEMA)?,
            path: PathBuf::from(IN_MEMORY),
            pending: verified::Pending::default(),
            durability: None,
            digest_key: None,
        })
    }

    /// Moves the state database `name` in `dir` aside (with its companions)
    /// and starts an empty one: every verified record, finding history,
    /// owed reload, accepted observation and quarantine is forgotten. For
    /// `--rebuild-state` only. Returns where the old database went.
    pub fn rebuild_in(
        dir: &PrivateDir,
        name: &str,
    ) -> Result<(Store, Option<PathBuf>), StoreError> {
        let (conn, moved) = crate::db::rebuild(dir, name, &schema::SCHEMA)?;
        Ok((
            Store {
                conn,
                path: dir.file_path(name),
                pending: verified::Pending::default(),
                durability: None,
                digest_key: None,
            },
            moved,
        ))
    }

    /// Makes every commit wait for `durability` first
    /// ([`Durability::flush`] before the transaction commits; `None` stops
    /// it). A pass that defers its directory fsyncs sets this, so the
    /// store never records a resource as verified, an owed reload as done
    /// or anything else about a change before the renames that made the
    /// change are durable (see `datum_host::durability`). A flush that fails
    /// fails the commit ([`StoreError::Host`]): nothing is recorded.
    pub fn set_durability(&mut self, durability: Option<Durability>) {
        self.durability = durability;
    }

    /// The database file this store was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts a write transaction. Nothing is visible to other connections,
    /// nor survives a crash, until [`Batch::commit`]; dropping the batch rolls
    /// it back. Buffered verified records are written first, in the same
    /// transaction, so the order of writes is kept.
    pub fn batch(&mut self) -> Result<Batch<'_>, StoreError> {
        // IMMEDIATE takes the write lock now, so a conflict shows up here
        // (after the busy timeout) and not halfway through the writes.
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql(&self.path, "cannot start a transaction"))?;
        let batch = Batch {
            tx,
            path: &self.path,
            pending: Some(&mut self.pending),
            durability: self.durability.as_ref(),
        };
        batch.write_pending()?;
        Ok(batch)
    }

    /// Commits the buffered `record_verified`/`forget` calls now (one
    /// transaction, one fsync). The buffer is also flushed by any other
    /// write, by dropping the store, and by `record_verified` itself once it
    /// holds [`crate::FLUSH_AFTER_RECORDS`] records or its oldest is
    /// [`crate::FLUSH_AFTER`] old. A killed process loses at most that
    /// window, which costs nothing but precision: those resources look
    /// unverified, and the next pass observes and records them again.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.batch()?.commit()
    }

    /// Runs `f` in its own batch and commits it.
    fn write<T>(
        &mut self,
        f: impl FnOnce(&Batch<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let batch = self.batch()?;
        let out = f(&batch)?;
        batch.commit()?;
        Ok(out)
    }
}

/// A group of writes that commits atomically. See [`Store::batch`].
pub struct Batch<'s> {
    tx: Transaction<'s>,
    path: &'s Path,
    /// The store's buffer, written at the start of this batch and emptied
    /// only once the batch has committed.
    pending: Option<&'s mut verified::Pending>,
    /// Flushed before the commit (see [`Store::set_durability`]).
    durability: Option<&'s Durability>,
}

impl Batch<'_> {
    /// Makes every write of this batch durable (fsync, see `db::open` on
    /// `synchronous = FULL`).
    pub fn commit(self) -> Result<(), StoreError> {
        let Batch {
            tx,
            path,
            pending,
            durability,
        } = self;
        if let Some(durability) = durability {
            durability.flush().map_err(|e| StoreError::Host {
                path: path.to_owned(),
                cause: Box::new(e),
            })?;
        }
        tx.commit().map_err(sql(path, "cannot commit"))?;
        if let Some(pending) = pending {
            pending.clear();
        }
        Ok(())
    }
}

/// Maps a SQLite error to [`StoreError::Sqlite`] naming the database file.
fn sql(path: &Path, action: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Sqlite {
        path,
        action,
        source,
    }
}

fn malformed(path: &Path, what: &'static str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Malformed {
        path: path.to_owned(),
        what,
        detail: detail.to_string(),
    }
}

/// SQLite integers are signed 64-bit. Sizes, inodes and device numbers are
/// stored bit for bit (a u64 above `i64::MAX` reads back unchanged), which is
/// all an equality comparison needs.
fn u64_to_sql(value: u64) -> i64 {
    i64::from_ne_bytes(value.to_ne_bytes())
}

fn u64_from_sql(value: i64) -> u64 {
    u64::from_ne_bytes(value.to_ne_bytes())
}

/// A store id as the store keeps it (32 hex digits), else `None`.
fn store_id_of(text: &str) -> Option<u128> {
    if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u128::from_str_radix(text, 16).ok()
}

impl Store {
    /// This store's id: 128 random bits drawn when it was made (or, for a
    /// store made before schema version 12, when it was first opened
    /// since). Its reports carry it to the server, which tells a store
    /// made anew (numbering its reports from 1 again) from the old one.
    pub fn store_id(&self) -> Result<u128, StoreError> {
        let text: String = self
            .conn
            .query_row(
                "SELECT store_id FROM store_identity WHERE id = 1",
                [],
                |r| r.get(0),
            )
            .map_err(sql(&self.path, "cannot read the store's id"))?;
        store_id_of(&text).ok_or_else(|| {
            malformed(
                &self.path,
                "store id",
                format!("`{text}` is not 32 hex digits"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u64_values_round_trip_through_sqlite_integers() {
        for value in [0, 1, u64::from(u32::MAX), i64::MAX as u64, u64::MAX] {
            assert_eq!(u64_from_sql(u64_to_sql(value)), value);
        }
    }

    #[test]
    fn dropped_batch_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("state.db")).unwrap();
        let id = datum_core::ResourceId::new("File", "motd");
        {
            let batch = store.batch().unwrap();
            batch.record_verified(&id, "h1", None, 10).unwrap();
            // dropped without commit
        }
        assert_eq!(store.last_verified(&id).unwrap(), None);
        let batch = store.batch().unwrap();
        batch.record_verified(&id, "h1", None, 10).unwrap();
        batch.commit().unwrap();
        assert_eq!(store.last_verified(&id).unwrap().unwrap().verified_at, 10);
    }
}
