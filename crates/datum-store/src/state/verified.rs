//! The last verified state of each resource: the hash of its declaration and,
//! for file-like resources, the metadata observed right after verification.
//!
//! The engine reads it to label a change intentional (the declaration hash
//! moved) or corrective (it did not, reality did); `datum check` reads the
//! metadata for metadata-first evaluation. Only hashes and metadata are kept,
//! and of a sensitive resource only the host's keyed digests of its hashes
//! ([`Store::record_verified_of`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use datum_core::{FileMeta, ResourceId};
use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};

use super::{Batch, Store, malformed, sql};
use crate::error::StoreError;

/// What the store remembers about one resource's last verified apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifiedRecord {
    /// Hash of the resource's declaration (desired fields and rendered content
    /// hash) as the engine computed it; compared, never interpreted here.
    pub declaration_hash: String,
    /// Metadata observed after verification (File); `None` for resources
    /// without file metadata (Service, Package).
    pub meta: Option<FileMeta>,
    /// Unix seconds.
    pub verified_at: i64,
}

/// `Store::record_verified` flushes its buffer once it holds this many records.
pub const FLUSH_AFTER_RECORDS: usize = 4096;

/// `Store::record_verified` flushes its buffer once its oldest record is this
/// old, so a long pass does not keep much unsaved.
pub const FLUSH_AFTER: Duration = Duration::from_secs(2);

/// Verified records (`Some`) and forgets (`None`) not yet written, by
/// resource id.
#[derive(Default)]
pub(super) struct Pending {
    records: BTreeMap<ResourceId, Option<VerifiedRecord>>,
    since: Option<Instant>,
    /// How many records were buffered when a flush last failed: the next
    /// is due [`FLUSH_AFTER_RECORDS`] records later (see [`Pending::put_off`]).
    floor: usize,
}

impl Pending {
    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub(super) fn clear(&mut self) {
        self.records.clear();
        self.since = None;
        self.floor = 0;
    }

    /// A flush failed (a full file system, a store another process holds):
    /// the next is due as long again, or as many records more, from now,
    /// not at the next record. Each attempt writes the whole buffer, which
    /// keeps growing: tried at every record, an apply of 6,000 Files on a
    /// full file system took 100 s instead of 5.
    fn put_off(&mut self) {
        self.since = Some(Instant::now());
        self.floor = self.records.len();
    }

    fn put(&mut self, id: &ResourceId, record: Option<VerifiedRecord>) {
        self.since.get_or_insert_with(Instant::now);
        self.records.insert(id.clone(), record);
    }

    /// `None`: nothing buffered for `id`; `Some(None)`: a buffered forget.
    fn get(&self, id: &ResourceId) -> Option<Option<&VerifiedRecord>> {
        self.records.get(id).map(Option::as_ref)
    }

    fn due(&self) -> bool {
        self.records.len() >= self.floor.saturating_add(FLUSH_AFTER_RECORDS)
            || self.since.is_some_and(|t| t.elapsed() >= FLUSH_AFTER)
    }
}

const COLUMNS: &str = "declaration_hash, verified_at, meta, sha256";

fn from_row(row: &Row<'_>) -> rusqlite::Result<VerifiedRecord> {
    from_row_at(row, 0)
}

/// [`from_row`] for a row whose [`COLUMNS`] start at column `at`. Columns
/// are read by position: a name lookup per column costs more than the value
/// when a check reads 20,000 records.
fn from_row_at(row: &Row<'_>, at: usize) -> rusqlite::Result<VerifiedRecord> {
    let meta = match meta_at(row, at + 2)? {
        Some(numbers) => Some(FileMeta {
            sha256: row.get(at + 3)?,
            ..numbers
        }),
        None => None,
    };
    Ok(VerifiedRecord {
        declaration_hash: row.get(at)?,
        meta,
        verified_at: row.get(at + 1)?,
    })
}

/// How long the `meta` column's value is: size, mtime, ctime, inode and
/// device as 8 bytes each, mode, owner and group as 4, all big-endian.
const META_LEN: usize = 5 * 8 + 3 * 4;

/// The metadata's numbers as the `meta` column keeps them ([`META_LEN`]).
/// One value instead of a column each: a metadata pass reads 20,000 rows,
/// and each column read is a step of SQLite's and a call through rusqlite.
fn meta_bytes(meta: &FileMeta) -> [u8; META_LEN] {
    let mut out = [0u8; META_LEN];
    let parts: [&[u8]; 8] = [
        &meta.size.to_be_bytes(),
        &meta.mtime_ns.to_be_bytes(),
        &meta.ctime_ns.to_be_bytes(),
        &meta.inode.to_be_bytes(),
        &meta.dev.to_be_bytes(),
        &meta.mode.to_be_bytes(),
        &meta.uid.to_be_bytes(),
        &meta.gid.to_be_bytes(),
    ];
    let mut at = 0;
    for part in parts {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    out
}

/// [`meta_bytes`] read back (without the content hash); `None` for a value
/// of another length.
fn meta_from_bytes(bytes: &[u8]) -> Option<FileMeta> {
    let bytes: &[u8; META_LEN] = bytes.try_into().ok()?;
    let eight = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        b
    };
    let four = |at: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&bytes[at..at + 4]);
        u32::from_be_bytes(b)
    };
    Some(FileMeta {
        size: u64::from_be_bytes(eight(0)),
        mtime_ns: i64::from_be_bytes(eight(8)),
        ctime_ns: i64::from_be_bytes(eight(16)),
        inode: u64::from_be_bytes(eight(24)),
        dev: u64::from_be_bytes(eight(32)),
        mode: four(40),
        uid: four(44),
        gid: four(48),
        sha256: None,
    })
}

/// The metadata's numbers from the `meta` column (column `at`), without
/// the content hash; `None` when the record has no metadata. Every reader
/// of a verified row takes them from here, whatever columns come before.
fn meta_at(row: &Row<'_>, at: usize) -> rusqlite::Result<Option<FileMeta>> {
    match row.get_ref(at)? {
        rusqlite::types::ValueRef::Null => Ok(None),
        rusqlite::types::ValueRef::Blob(bytes) => {
            meta_from_bytes(bytes).map(Some).ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    at,
                    rusqlite::types::Type::Blob,
                    format!("file metadata of {} bytes, not {META_LEN}", bytes.len()).into(),
                )
            })
        }
        other => Err(rusqlite::Error::InvalidColumnType(
            at,
            "meta".to_owned(),
            other.data_type(),
        )),
    }
}

/// One verified record as [`Store::each_verified`] hands it out, borrowed
/// from the row (or the buffered record) it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedView<'a> {
    pub kind: &'a str,
    pub name: &'a str,
    pub declaration_hash: &'a str,
    /// The metadata without its content hash (`sha256` is always `None`
    /// here: it is [`VerifiedView::sha256`]).
    pub meta: Option<FileMeta>,
    pub sha256: Option<&'a str>,
    pub verified_at: i64,
}

impl<'a> VerifiedView<'a> {
    fn of(id: &'a ResourceId, record: &'a VerifiedRecord) -> Self {
        VerifiedView {
            kind: &id.kind,
            name: &id.name,
            declaration_hash: &record.declaration_hash,
            meta: record.meta.as_ref().map(|m| FileMeta {
                sha256: None,
                ..without_text(m)
            }),
            sha256: record.meta.as_ref().and_then(|m| m.sha256.as_deref()),
            verified_at: record.verified_at,
        }
    }

    /// The record it shows, owned.
    pub fn to_record(&self) -> (ResourceId, VerifiedRecord) {
        (
            ResourceId::new(self.kind, self.name),
            VerifiedRecord {
                declaration_hash: self.declaration_hash.to_owned(),
                meta: self.meta.as_ref().map(|m| FileMeta {
                    sha256: self.sha256.map(str::to_owned),
                    ..without_text(m)
                }),
                verified_at: self.verified_at,
            },
        )
    }
}

/// `plain` as a sensitive resource's record holds it: its keyed digest
/// (one already keyed, as a record read back and written again holds it,
/// stays as it is).
fn sealed(key: &datum_core::DigestKey, plain: &str) -> String {
    if plain.starts_with(datum_core::digest::KEYED_PREFIX) {
        plain.to_owned()
    } else {
        key.digest(plain)
    }
}

/// Whether `recorded` is the keyed digest of `plain` under `key`.
pub fn is_sealed_form(key: Option<&datum_core::DigestKey>, recorded: &str, plain: &str) -> bool {
    recorded.starts_with(datum_core::digest::KEYED_PREFIX)
        && key.is_some_and(|k| k.digest(plain) == recorded)
}

/// `meta`'s numbers (a copy with no text to allocate).
fn without_text(meta: &FileMeta) -> FileMeta {
    FileMeta {
        size: meta.size,
        mtime_ns: meta.mtime_ns,
        ctime_ns: meta.ctime_ns,
        inode: meta.inode,
        dev: meta.dev,
        mode: meta.mode,
        uid: meta.uid,
        gid: meta.gid,
        sha256: None,
    }
}

/// A `SELECT kind, name, {COLUMNS}` row, borrowed.
fn view_of<'r>(row: &'r Row<'_>) -> rusqlite::Result<VerifiedView<'r>> {
    let text = |i: usize| -> rusqlite::Result<&'r str> {
        row.get_ref(i)?.as_str().map_err(rusqlite::Error::from)
    };
    let meta = meta_at(row, 4)?;
    let sha256 = match (&meta, row.get_ref(5)?) {
        (None, _) | (_, rusqlite::types::ValueRef::Null) => None,
        (Some(_), v) => Some(v.as_str().map_err(rusqlite::Error::from)?),
    };
    Ok(VerifiedView {
        kind: text(0)?,
        name: text(1)?,
        declaration_hash: text(2)?,
        meta,
        sha256,
        verified_at: row.get(3)?,
    })
}

impl Batch<'_> {
    /// Writes the store's buffered records into this batch.
    pub(super) fn write_pending(&self) -> Result<(), StoreError> {
        let Some(pending) = self.pending.as_deref() else {
            return Ok(());
        };
        for (id, record) in &pending.records {
            match record {
                Some(r) => {
                    self.record_verified(id, &r.declaration_hash, r.meta.as_ref(), r.verified_at)?
                }
                None => {
                    self.forget(id)?;
                }
            }
        }
        Ok(())
    }

    /// Records (replacing any earlier record) that `id` was verified at `at`
    /// with this declaration hash and metadata.
    pub fn record_verified(
        &self,
        id: &ResourceId,
        declaration_hash: &str,
        meta: Option<&FileMeta>,
        at: i64,
    ) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO verified (kind, name, declaration_hash, verified_at, \
                 meta, sha256) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    id.kind,
                    id.name,
                    declaration_hash,
                    at,
                    meta.map(meta_bytes),
                    meta.and_then(|m| m.sha256.as_deref()),
                ])
            })
            .map(drop)
            .map_err(sql(self.path, "cannot record verified state"))
    }

    /// Forgets `id` (it left the catalogue, or was removed with `ensure:
    /// absent`). Returns whether there was a record.
    pub fn forget(&self, id: &ResourceId) -> Result<bool, StoreError> {
        self.tx
            .execute(
                "DELETE FROM verified WHERE kind = ?1 AND name = ?2",
                [&id.kind, &id.name],
            )
            .map(|n| n > 0)
            .map_err(sql(self.path, "cannot forget verified state"))
    }
}

impl Store {
    /// The last verified record of `id`, if it was ever verified (buffered
    /// records included).
    pub fn last_verified(&self, id: &ResourceId) -> Result<Option<VerifiedRecord>, StoreError> {
        if let Some(buffered) = self.pending.get(id) {
            return Ok(buffered.cloned());
        }
        self.conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM verified WHERE kind = ?1 AND name = ?2"
            ))
            .and_then(|mut stmt| stmt.query_row([&id.kind, &id.name], from_row).optional())
            .map_err(sql(&self.path, "cannot read verified state"))
    }

    /// Calls `each` for every verified record (buffered records included,
    /// in place of what the database holds for the same resource), in no
    /// particular order, one at a time and borrowed from where it was read:
    /// a caller that keeps them in a form of its own allocates nothing for
    /// the ones it does not keep.
    pub fn each_verified(&self, mut each: impl FnMut(VerifiedView<'_>)) -> Result<(), StoreError> {
        let read = |e| sql(&self.path, "cannot read verified state")(e);
        // No ORDER BY: SQLite would sort whole rows (20,000 of them spilled
        // to its sorter, 7 % of a no-op apply's CPU) by its own collation.
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT kind, name, {COLUMNS} FROM verified"))
            .map_err(read)?;
        let mut rows = stmt.query([]).map_err(read)?;
        let buffered = !self.pending.records.is_empty();
        while let Some(row) = rows.next().map_err(read)? {
            let view = view_of(row).map_err(|e| malformed(&self.path, "verified record", e))?;
            if buffered
                && self
                    .pending
                    .get(&ResourceId::new(view.kind, view.name))
                    .is_some()
            {
                continue;
            }
            each(view);
        }
        for (id, record) in &self.pending.records {
            if let Some(record) = record {
                each(VerifiedView::of(id, record));
            }
        }
        Ok(())
    }

    /// Every verified record, sorted by resource id.
    pub fn all_verified(&self) -> Result<Vec<(ResourceId, VerifiedRecord)>, StoreError> {
        // Sized once from a count (a list grown by doubling held 32,768
        // records' room for 20,000, 2 MB unused at a no-op apply's peak).
        let count: usize = self
            .conn
            .query_row("SELECT count(*) FROM verified", [], |row| row.get(0))
            .map_err(sql(&self.path, "cannot read verified state"))?;
        let mut all = Vec::with_capacity(count + self.pending.records.len());
        self.each_verified(|view| all.push(view.to_record()))?;
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }

    /// Calls `visit(name, declaration_hash, meta, verified_at)` for every verified record
    /// of `kind` that has file metadata, without building a record for each
    /// (a metadata pass reads 20,000 of them to trust most without a second
    /// look: no allocation per row). `meta.sha256` is `Some("")` when a
    /// content hash was recorded (its value is not read) and `None` when
    /// not. Buffered records are flushed first, so the database is the
    /// whole truth.
    pub fn visit_verified_meta(
        &mut self,
        kind: &str,
        mut visit: impl FnMut(&str, &str, FileMeta, i64),
    ) -> Result<(), StoreError> {
        self.flush()?;
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT name, declaration_hash, meta, sha256 IS NOT NULL, verified_at \
                 FROM verified WHERE kind = ?1 AND meta IS NOT NULL",
            )
            .map_err(sql(&self.path, "cannot read verified state"))?;
        let mut rows = stmt
            .query([kind])
            .map_err(sql(&self.path, "cannot read verified state"))?;
        let bad = |e| malformed(&self.path, "verified record", e);
        while let Some(row) = rows
            .next()
            .map_err(sql(&self.path, "cannot read verified state"))?
        {
            let text = |i: usize| -> Result<&str, StoreError> {
                row.get_ref(i)
                    .and_then(|v| v.as_str().map_err(rusqlite::Error::from))
                    .map_err(bad)
            };
            let meta = (|| -> rusqlite::Result<FileMeta> {
                let numbers = meta_at(row, 2)?.ok_or(rusqlite::Error::InvalidColumnType(
                    2,
                    "meta".to_owned(),
                    rusqlite::types::Type::Null,
                ))?;
                Ok(FileMeta {
                    sha256: row.get::<_, bool>(3)?.then(String::new),
                    ..numbers
                })
            })()
            .map_err(bad)?;
            let verified_at: i64 = row.get(4).map_err(bad)?;
            visit(text(0)?, text(1)?, meta, verified_at);
        }
        Ok(())
    }

    /// Records (replacing any earlier record) that `id` was verified at `at`.
    /// Buffered: see [`Store::flush`] for when it becomes durable. Use
    /// [`Batch::record_verified`] to write it in a transaction of your own.
    pub fn record_verified(
        &mut self,
        id: &ResourceId,
        declaration_hash: &str,
        meta: Option<&FileMeta>,
        at: i64,
    ) -> Result<(), StoreError> {
        let record = VerifiedRecord {
            declaration_hash: declaration_hash.to_owned(),
            meta: meta.cloned(),
            verified_at: at,
        };
        self.pending.put(id, Some(record));
        self.flush_if_due()
    }

    /// Sets the host's digest key (`digest.key` beside the store), which
    /// [`Store::record_verified_of`] and [`Store::records`] use for
    /// sensitive resources. `None`: no sensitive resource is recorded.
    pub fn set_digest_key(&mut self, key: Option<datum_core::DigestKey>) {
        self.digest_key = key.map(Box::new);
    }

    /// The key [`Store::set_digest_key`] set.
    pub fn digest_key(&self) -> Option<&datum_core::DigestKey> {
        self.digest_key.as_deref()
    }

    /// [`Store::record_verified`] for a resource that may be sensitive. A
    /// sensitive resource's record holds the host's keyed digests
    /// (`DigestKey::digest`) of its declaration hash and content hash,
    /// never the plain ones: the plain SHA-256 of a secret's content (or of
    /// a declaration that covers it) lets whoever has a copy of the store
    /// test a guessed secret offline, the keyed one is of no use without
    /// the key file. It still says "the same as verified" to whoever holds
    /// the key ([`Store::records`]). Without a key nothing is recorded for a
    /// sensitive resource, and an earlier record of it is forgotten: the
    /// next pass reads it again.
    pub fn record_verified_of(
        &mut self,
        id: &ResourceId,
        sensitive: bool,
        declaration_hash: &str,
        meta: Option<&FileMeta>,
        at: i64,
    ) -> Result<(), StoreError> {
        if !sensitive {
            return self.record_verified(id, declaration_hash, meta, at);
        }
        let Some(key) = self.digest_key.as_deref().cloned() else {
            return self.forget(id).map(drop);
        };
        let meta = meta.map(|m| FileMeta {
            sha256: m.sha256.as_deref().map(|sha| sealed(&key, sha)),
            ..without_text(m)
        });
        self.record_verified(id, &sealed(&key, declaration_hash), meta.as_ref(), at)
    }

    /// A declaration hash as the store records it for a resource
    /// ([`Store::record_verified_of`]): itself, or for a sensitive resource
    /// its keyed digest, `None` without a key (then nothing is recorded).
    pub fn recorded_hash(&self, sensitive: bool, plain: &str) -> Option<String> {
        match (sensitive, self.digest_key.as_deref()) {
            (false, _) => Some(plain.to_owned()),
            (true, Some(key)) => Some(sealed(key, plain)),
            (true, None) => None,
        }
    }

    /// Whether `recorded`, a hash a verified record holds, stands for
    /// `plain`: it is `plain` itself, or the keyed digest of `plain` under
    /// this store's key ([`Store::record_verified_of`]).
    pub fn records(&self, recorded: &str, plain: &str) -> bool {
        recorded == plain || is_sealed_form(self.digest_key.as_deref(), recorded, plain)
    }

    /// Flushes the buffer when it is due; one that fails is tried again
    /// later, not at each record ([`Pending::put_off`]), and kept.
    fn flush_if_due(&mut self) -> Result<(), StoreError> {
        if !self.pending.due() {
            return Ok(());
        }
        let flushed = self.flush();
        if flushed.is_err() {
            self.pending.put_off();
        }
        flushed
    }

    /// Forgets `id`; returns whether there was a record. Buffered like
    /// [`Store::record_verified`].
    pub fn forget(&mut self, id: &ResourceId) -> Result<bool, StoreError> {
        let existed = self.last_verified(id)?.is_some();
        self.pending.put(id, None);
        self.flush_if_due()?;
        Ok(existed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> FileMeta {
        FileMeta {
            size: 42,
            mtime_ns: 1_700_000_000_123_456_789,
            ctime_ns: -5,
            inode: u64::MAX - 1,
            dev: 2049,
            mode: 0o100_640,
            uid: 0,
            gid: 42,
            sha256: Some("ab".repeat(32)),
        }
    }

    #[test]
    fn record_replaces_and_forget_removes() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("state.db")).unwrap();
        let id = ResourceId::new("File", "sshd-config");
        store
            .record_verified(&id, "h1", Some(&meta()), 100)
            .unwrap();
        store.record_verified(&id, "h2", None, 200).unwrap();
        let got = store.last_verified(&id).unwrap().unwrap();
        assert_eq!(got.declaration_hash, "h2");
        assert_eq!(got.meta, None);
        assert_eq!(got.verified_at, 200);
        assert!(store.forget(&id).unwrap());
        assert!(!store.forget(&id).unwrap());
        assert_eq!(store.last_verified(&id).unwrap(), None);
    }

    #[test]
    fn buffered_records_are_read_back_at_once_and_reach_the_file_on_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut store = Store::open(&path).unwrap();
        let kept = ResourceId::new("File", "kept");
        let gone = ResourceId::new("File", "gone");
        store.record_verified(&gone, "g", None, 1).unwrap();
        store.flush().unwrap();
        store.record_verified(&kept, "k", Some(&meta()), 2).unwrap();
        assert!(store.forget(&gone).unwrap());

        // This connection sees its own buffer...
        assert_eq!(
            store
                .last_verified(&kept)
                .unwrap()
                .unwrap()
                .declaration_hash,
            "k"
        );
        assert_eq!(store.last_verified(&gone).unwrap(), None);
        let ids: Vec<ResourceId> = store
            .all_verified()
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(ids.len(), 1);
        assert_eq!(ids[0], kept);
        // ...another one does not, until the flush.
        let other = Store::open(&path).unwrap();
        assert_eq!(other.last_verified(&kept).unwrap(), None);
        assert!(other.last_verified(&gone).unwrap().is_some());
        store.flush().unwrap();
        assert_eq!(
            other.last_verified(&kept).unwrap().unwrap().meta,
            Some(meta())
        );
        assert_eq!(other.last_verified(&gone).unwrap(), None);
    }

    #[test]
    fn dropping_the_store_flushes_and_other_writes_carry_the_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let a = ResourceId::new("File", "a");
        let b = ResourceId::new("File", "b");
        {
            let mut store = Store::open(&path).unwrap();
            store.record_verified(&a, "a", None, 1).unwrap();
            store
                .owe_reload(&ResourceId::new("Service", "s"), "x", 1)
                .unwrap();
            let other = Store::open(&path).unwrap();
            assert!(
                other.last_verified(&a).unwrap().is_some(),
                "written with the owed reload"
            );
            store.record_verified(&b, "b", None, 1).unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert!(
            store.last_verified(&b).unwrap().is_some(),
            "written on drop"
        );
    }

    #[test]
    fn metadata_of_another_length_is_refused_by_every_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut store = Store::open(&path).unwrap();
        let file = ResourceId::new("File", "/etc/a");
        store
            .record_verified(&file, "da", Some(&meta()), 1)
            .unwrap();
        store.flush().unwrap();
        // Read back as written, then cut short by one byte.
        assert_eq!(
            store.last_verified(&file).unwrap().unwrap().meta,
            Some(meta())
        );
        store
            .conn
            .execute(
                "UPDATE verified SET meta = substr(meta, 1, length(meta) - 1)",
                [],
            )
            .unwrap();
        let malformed = |e: StoreError| matches!(e, StoreError::Malformed { .. });
        // An error, whichever way it is read: never a record without it.
        assert!(store.last_verified(&file).is_err());
        assert!(malformed(store.each_verified(|_| ()).unwrap_err()));
        assert!(malformed(
            store
                .visit_verified_meta("File", |_, _, _, _| ())
                .unwrap_err()
        ));
    }

    #[test]
    fn metadata_bytes_hold_every_number_at_its_extremes() {
        for m in [
            meta(),
            FileMeta {
                size: u64::MAX,
                mtime_ns: i64::MIN,
                ctime_ns: i64::MAX,
                inode: 0,
                dev: u64::MAX,
                mode: u32::MAX,
                uid: u32::MAX,
                gid: 0,
                sha256: None,
            },
        ] {
            let back = meta_from_bytes(&meta_bytes(&m)).unwrap();
            assert_eq!(back, FileMeta { sha256: None, ..m });
        }
        assert_eq!(meta_from_bytes(&[0u8; META_LEN - 1]), None);
        assert_eq!(meta_from_bytes(&[0u8; META_LEN + 1]), None);
    }

    #[test]
    fn visiting_file_metadata_sees_buffered_records_and_skips_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("state.db")).unwrap();
        let unhashed = FileMeta {
            sha256: None,
            ..meta()
        };
        store
            .record_verified(&ResourceId::new("File", "a[1]"), "da", Some(&meta()), 1)
            .unwrap();
        store
            .record_verified(&ResourceId::new("File", "b"), "db", Some(&unhashed), 1)
            .unwrap();
        store
            .record_verified(&ResourceId::new("File", "none"), "dn", None, 1)
            .unwrap();
        store
            .record_verified(&ResourceId::new("Directory", "d"), "dd", Some(&meta()), 1)
            .unwrap();
        // Replaced while still buffered: the newer record is what is seen.
        store
            .record_verified(&ResourceId::new("File", "b"), "db2", Some(&unhashed), 2)
            .unwrap();
        let mut seen = Vec::new();
        store
            .visit_verified_meta("File", |name, decl, m, at| {
                seen.push((name.to_owned(), decl.to_owned(), m, at))
            })
            .unwrap();
        seen.sort_by(|x, y| x.0.cmp(&y.0));
        let names: Vec<(&str, &str)> = seen
            .iter()
            .map(|(n, d, _, _)| (n.as_str(), d.as_str()))
            .collect();
        assert_eq!(names, [("a[1]", "da"), ("b", "db2")]);
        let a = &seen[0].2;
        assert_eq!(
            (a.size, a.mtime_ns, a.ctime_ns, a.inode, a.dev),
            (42, 1_700_000_000_123_456_789, -5, u64::MAX - 1, 2049)
        );
        assert_eq!((a.mode, a.uid, a.gid), (0o100_640, 0, 42));
        assert!(a.sha256.is_some(), "a content hash was recorded");
        assert!(seen[1].2.sha256.is_none(), "none recorded");
        assert_eq!((seen[0].3, seen[1].3), (1, 2), "when each was verified");
    }

    #[test]
    fn a_full_buffer_flushes_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut store = Store::open(&path).unwrap();
        for i in 0..FLUSH_AFTER_RECORDS {
            store
                .record_verified(&ResourceId::new("File", format!("f{i}")), "h", None, 1)
                .unwrap();
        }
        assert!(store.pending.is_empty());
        let other = Store::open(&path).unwrap();
        assert_eq!(other.all_verified().unwrap().len(), FLUSH_AFTER_RECORDS);
    }

    /// A buffer that cannot be written (here a store that refuses writes,
    /// as a full file system does) was written again at every record once
    /// due, the whole growing buffer each time: 6,000 Files applied on a
    /// full file system took 100 s instead of 5. It is tried again once as
    /// long again has passed or as many records more are buffered, and
    /// nothing buffered is lost.
    #[test]
    fn a_buffer_that_cannot_be_written_is_not_tried_at_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut store = Store::open(&path).unwrap();
        store.conn.pragma_update(None, "query_only", true).unwrap();
        let id = |i: usize| ResourceId::new("File", format!("f{i}"));
        store.record_verified(&id(0), "h", None, 1).unwrap();
        // Due by its age.
        store.pending.since = Instant::now().checked_sub(FLUSH_AFTER);
        let failed = (1..=100)
            .filter(|i| store.record_verified(&id(*i), "h", None, 1).is_err())
            .count();
        assert_eq!(failed, 1, "one attempt, then put off");
        assert_eq!(store.pending.records.len(), 101, "kept");
        // As many records more make it due again.
        let failed = (101..101 + FLUSH_AFTER_RECORDS)
            .filter(|i| store.record_verified(&id(*i), "h", None, 1).is_err())
            .count();
        assert_eq!(failed, 1);
        store.conn.pragma_update(None, "query_only", false).unwrap();
        store.flush().unwrap();
        assert_eq!(
            Store::open(&path).unwrap().all_verified().unwrap().len(),
            101 + FLUSH_AFTER_RECORDS
        );
    }

    #[test]
    fn nothing_commits_before_the_renames_it_records_are_durable() {
        let dir = tempfile::tempdir().unwrap();
        let live = tempfile::tempdir().unwrap();
        std::fs::create_dir(live.path().join("etc")).unwrap();
        let host = datum_host::Host::new(live.path());
        let path = dir.path().join("state.db");
        let mut store = Store::open(&path).unwrap();
        store.set_durability(Some(host.durability().clone()));
        // A rename whose directory fsync is owed, then its record.
        let at = host.locate(std::path::Path::new("/etc/motd")).unwrap();
        at.stage_file()
            .unwrap()
            .commit_deferred(host.durability())
            .unwrap();
        let motd = ResourceId::new("File", "motd");
        store.record_verified(&motd, "h", None, 1).unwrap();
        assert!(
            host.durability().is_pending(),
            "buffered: nothing committed"
        );
        store.flush().unwrap();
        assert!(!host.durability().is_pending(), "the commit flushed first");
        assert_eq!(host.durability().dir_syncs(), 1);
        assert_eq!(Store::open(&path).unwrap().all_verified().unwrap().len(), 1);
        // Without a pending directory a commit syncs nothing more.
        store.record_verified(&motd, "h2", None, 2).unwrap();
        store.flush().unwrap();
        assert_eq!(host.durability().dir_syncs(), 1);
    }

    #[test]
    fn all_verified_keeps_names_with_brackets_intact() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("state.db")).unwrap();
        let odd = ResourceId::new("File", "a[b]");
        let plain = ResourceId::new("Directory", "etc");
        store.record_verified(&odd, "x", Some(&meta()), 1).unwrap();
        store.record_verified(&plain, "y", None, 2).unwrap();
        let all = store.all_verified().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].0, plain);
        assert_eq!(all[1].0, odd);
        assert_eq!(all[1].1.meta, Some(meta()));
    }

    #[test]
    fn all_verified_is_in_resource_order_whatever_order_they_were_written_in() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut store = Store::open(&path).unwrap();
        // Written in an order that is neither the ids' nor SQLite's by name.
        let ids = [
            ("File", "b"),
            ("Directory", "z"),
            ("File", "a"),
            ("Directory", "a"),
            ("File", "c"),
        ]
        .map(|(k, n)| ResourceId::new(k, n));
        // One flush each: a flush writes its buffer in its own order.
        for (i, id) in ids.iter().enumerate() {
            store.record_verified(id, "h", None, i as i64).unwrap();
            store.flush().unwrap();
        }
        // From the database alone (nothing buffered) and with one record
        // buffered over it.
        let read = Store::open(&path).unwrap().all_verified().unwrap();
        assert_eq!(read.capacity(), read.len(), "sized once, from a count");
        let mut sorted = ids.to_vec();
        sorted.sort();
        assert_eq!(read.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), sorted);
        store.record_verified(&ids[3], "h2", None, 9).unwrap();
        let read = store.all_verified().unwrap();
        assert_eq!(read.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), sorted);
        assert_eq!(read[0].1.declaration_hash, "h2");
    }

    #[test]
    fn each_verified_gives_what_all_verified_gives_buffered_records_winning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut store = Store::open(&path).unwrap();
        let ids = ["a", "b", "c"].map(|n| ResourceId::new("File", n));
        for (i, id) in ids.iter().enumerate() {
            store
                .record_verified(id, "h", Some(&meta()), i as i64)
                .unwrap();
        }
        store.flush().unwrap();
        // Buffered over the database: one replaced, one forgotten, one new.
        store.record_verified(&ids[1], "h2", None, 7).unwrap();
        store.forget(&ids[2]).unwrap();
        let new = ResourceId::new("Directory", "d");
        store.record_verified(&new, "h3", None, 8).unwrap();
        let mut each = Vec::new();
        store.each_verified(|v| each.push(v.to_record())).unwrap();
        each.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(each, store.all_verified().unwrap());
        let hashes: Vec<&str> = each
            .iter()
            .map(|(_, r)| r.declaration_hash.as_str())
            .collect();
        assert_eq!(hashes, ["h3", "h", "h2"]);
    }
}
