//! The last verified state of each resource: the hash of its declaration and,
//! for file-like resources, the metadata observed right after verification.
//!
//! The engine reads it to label a change intentional (the declaration hash
//! moved) or corrective (it did not, reality did); `datum check` reads the
//! metadata for metadata-first evaluation. Only hashes and metadata are kept.

use datum_core::{FileMeta, ResourceId};
use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};

use super::{Batch, Store, malformed, sql, u64_from_sql, u64_to_sql};
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

const COLUMNS: &str = "declaration_hash, verified_at, has_meta, size, mtime_ns, ctime_ns, \
                       inode, dev, mode, uid, gid, sha256";

fn from_row(row: &Row<'_>) -> rusqlite::Result<VerifiedRecord> {
    let has_meta: bool = row.get("has_meta")?;
    let meta = if has_meta {
        Some(FileMeta {
            size: u64_from_sql(row.get("size")?),
            mtime_ns: row.get("mtime_ns")?,
            ctime_ns: row.get("ctime_ns")?,
            inode: u64_from_sql(row.get("inode")?),
            dev: u64_from_sql(row.get("dev")?),
            mode: row.get("mode")?,
            uid: row.get("uid")?,
            gid: row.get("gid")?,
            sha256: row.get("sha256")?,
        })
    } else {
        None
    };
    Ok(VerifiedRecord {
        declaration_hash: row.get("declaration_hash")?,
        meta,
        verified_at: row.get("verified_at")?,
    })
}

impl Batch<'_> {
    /// Records (replacing any earlier record) that `id` was verified at `at`
    /// with this declaration hash and metadata.
    pub fn record_verified(
        &self,
        id: &ResourceId,
        declaration_hash: &str,
        meta: Option<&FileMeta>,
        at: i64,
    ) -> Result<(), StoreError> {
        let m = meta.cloned().unwrap_or_default();
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO verified (resource, kind, name, declaration_hash, \
                 verified_at, has_meta, size, mtime_ns, ctime_ns, inode, dev, mode, uid, gid, \
                 sha256) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    id.to_string(),
                    id.kind,
                    id.name,
                    declaration_hash,
                    at,
                    meta.is_some(),
                    u64_to_sql(m.size),
                    m.mtime_ns,
                    m.ctime_ns,
                    u64_to_sql(m.inode),
                    u64_to_sql(m.dev),
                    m.mode,
                    m.uid,
                    m.gid,
                    m.sha256,
                ])
            })
            .map(drop)
            .map_err(sql(self.path, "cannot record verified state"))
    }

    /// Forgets `id` (it left the catalogue, or was removed with `ensure:
    /// absent`). Returns whether there was a record.
    pub fn forget(&self, id: &ResourceId) -> Result<bool, StoreError> {
        self.tx
            .execute("DELETE FROM verified WHERE resource = ?1", [id.to_string()])
            .map(|n| n > 0)
            .map_err(sql(self.path, "cannot forget verified state"))
    }
}

impl Store {
    /// The last verified record of `id`, if it was ever verified.
    pub fn last_verified(&self, id: &ResourceId) -> Result<Option<VerifiedRecord>, StoreError> {
        self.conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM verified WHERE resource = ?1"
            ))
            .and_then(|mut stmt| stmt.query_row([id.to_string()], from_row).optional())
            .map_err(sql(&self.path, "cannot read verified state"))
    }

    /// Every verified record, sorted by resource id.
    pub fn all_verified(&self) -> Result<Vec<(ResourceId, VerifiedRecord)>, StoreError> {
        let rows: Vec<(String, String, rusqlite::Result<VerifiedRecord>)> = self
            .conn
            .prepare(&format!(
                "SELECT kind, name, {COLUMNS} FROM verified ORDER BY kind, name"
            ))
            .and_then(|mut stmt| {
                stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?, from_row(row))))?
                    .collect()
            })
            .map_err(sql(&self.path, "cannot read verified state"))?;
        rows.into_iter()
            .map(|(kind, name, record)| {
                let record = record.map_err(|e| malformed(&self.path, "verified record", e))?;
                Ok((ResourceId::new(kind, name), record))
            })
            .collect()
    }

    /// See [`Batch::record_verified`]; one transaction.
    pub fn record_verified(
        &mut self,
        id: &ResourceId,
        declaration_hash: &str,
        meta: Option<&FileMeta>,
        at: i64,
    ) -> Result<(), StoreError> {
        self.write(|b| b.record_verified(id, declaration_hash, meta, at))
    }

    /// See [`Batch::forget`]; one transaction.
    pub fn forget(&mut self, id: &ResourceId) -> Result<bool, StoreError> {
        self.write(|b| b.forget(id))
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
        let (mut store, _) = Store::open(&dir.path().join("state.db")).unwrap();
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
    fn all_verified_keeps_names_with_brackets_intact() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = Store::open(&dir.path().join("state.db")).unwrap();
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
}
