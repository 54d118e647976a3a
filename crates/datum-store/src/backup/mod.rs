//! The backup store: the old content of every file an apply replaced or
//! removed, so a change never destroys the evidence of what was there.
//!
//! Layout under `<root>/var/lib/datum/backups` (mode 0700):
//! - `objects/<sha256[..2]>/<sha256>`: the bytes, content-addressed, mode
//!   0600, written atomically, stored once however often they are saved;
//! - `index.db`: one row per saved version (resource, declared path,
//!   digest, size, mode, owner, time, reason, sensitive flag, whether the
//!   content was kept: a file larger than [`MAX_KEPT_BYTES`] has its size
//!   and digest recorded and no blob); saving again
//!   what the newest row of that path already holds refreshes that row
//!   instead of adding one (see [`BackupStore::save`]).
//!
//! [`Retention::default`] bounds the store: ten versions per path, and at
//! most [`DEFAULT_MAX_ENTRIES`] entries and [`DEFAULT_MAX_TOTAL_BYTES`] of
//! distinct content in all, the oldest going first.
//!
//! The index is SQLite rather than one JSON file per entry because retention
//! runs after every save and needs per-path ranking, age and total-size
//! queries without listing a directory of thousands of files; because a save
//! or a prune is then one transaction; and because entry ids come from an
//! AUTOINCREMENT key, so an id is never reused and `datum backup show 42`
//! can never show a different file than the one listed earlier as 42.
//!
//! Ordering makes every crash safe: a blob is written before the entry that
//! names it, and deleted only after the last entry naming it is gone. A crash
//! can leave an orphan blob (swept by [`BackupStore::gc`]), never an entry
//! without its blob. If the index itself is unusable it is an error, left as
//! it is; when the operator rebuilds it (`--rebuild-state`), the old index is
//! moved aside and every blob is kept as a "recovered" entry (flagged
//! sensitive, since nobody knows any more) instead of being swept.
//!
//! This module returns bytes and metadata; it never writes a managed file.
//! Restoring goes through the host's atomic staging in the caller.
//!
//! ```
//! use std::path::Path;
//! use datum_core::ResourceId;
//! use datum_store::backup::{BackupReason, BackupStore, Retention, SavedFile};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let root = tempfile::tempdir()?;
//! let mut backups = BackupStore::open(&root.path().join(datum_store::BACKUP_DIR_PATH))?;
//! let id = ResourceId::new("File", "sshd-config");
//! let entry = backups.save(&SavedFile {
//!     resource: &id,
//!     declared_path: Path::new("/etc/ssh/sshd_config"),
//!     bytes: b"PermitRootLogin yes\n",
//!     mode: 0o100_600,
//!     uid: 0,
//!     gid: 0,
//!     reason: BackupReason::Update,
//!     sensitive: false,
//!     at: 1_764_000_000,
//! })?;
//! backups.prune(&Retention::default(), 1_764_000_000)?;
//!
//! let (listed, bytes) = backups.get(entry.id)?;
//! assert_eq!(listed.path, Path::new("/etc/ssh/sshd_config"));
//! assert_eq!(bytes, b"PermitRootLogin yes\n");
//! # Ok(())
//! # }
//! ```

mod objects;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use datum_core::ResourceId;
use rusqlite::{Connection, OptionalExtension as _, Row, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use datum_host::PrivateDir;

use crate::db::{self, Schema};
use crate::error::{StoreError, StoreWarning};

/// "DtmB" in ASCII: marks a SQLite file as a Datum backup index.
const APPLICATION_ID: i32 = 0x4474_6d42;

const SCHEMA: Schema = Schema {
    application_id: APPLICATION_ID,
    migrations: &[V1, V2],
};

/// The declared path is stored as raw bytes: a path need not be UTF-8, and a
/// lossy conversion would restore to the wrong file.
const V1: &str = "
CREATE TABLE entries (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    resource   TEXT NOT NULL,
    path       BLOB NOT NULL,
    sha256     TEXT NOT NULL,
    size       INTEGER NOT NULL,
    mode       INTEGER NOT NULL,
    uid        INTEGER NOT NULL,
    gid        INTEGER NOT NULL,
    saved_at   INTEGER NOT NULL,
    reason     TEXT NOT NULL,
    sensitive  INTEGER NOT NULL
);
CREATE INDEX entries_by_path ON entries (path, saved_at);
CREATE INDEX entries_by_sha ON entries (sha256);
CREATE INDEX entries_by_time ON entries (saved_at);
";

/// An entry whose file was too large to keep records its size and digest
/// only (`kept` 0), and has no blob.
const V2: &str = "ALTER TABLE entries ADD COLUMN kept INTEGER NOT NULL DEFAULT 1;";

/// The largest file whose content a save keeps (256 MiB). A larger one is
/// recorded with its size and SHA-256 and without its bytes (see
/// [`BackupStore::save_from`]): evidence must not take the disk Datum's
/// state lives on, nor can an owner of one managed file make every apply
/// copy gigabytes into it.
pub const MAX_KEPT_BYTES: u64 = 256 << 20;

/// The index's file name in the backup folder.
pub const INDEX: &str = "index.db";

/// How old an unreferenced blob or a temporary file must be before
/// [`BackupStore::gc`] deletes it. A save writes its blob a moment before its
/// entry; the grace keeps a sweep from racing it even without the root lock.
const GC_GRACE: Duration = Duration::from_secs(3600);

/// Resource recorded for blobs adopted after the index was rebuilt.
pub const RECOVERED_RESOURCE: &str = "(unknown)";

/// Why a file's content was saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackupReason {
    /// The file was about to be replaced by new declared content.
    Update,
    /// The file was about to be removed (`ensure: absent`).
    Remove,
    /// A drifted file was about to be reverted to its declaration.
    Revert,
    /// Drifted content recorded by a check (policy `accept`, or evidence).
    Drift,
    /// A blob found without an index entry after the index was rebuilt.
    Recovered,
}

impl BackupReason {
    pub fn as_str(self) -> &'static str {
        match self {
            BackupReason::Update => "update",
            BackupReason::Remove => "remove",
            BackupReason::Revert => "revert",
            BackupReason::Drift => "drift",
            BackupReason::Recovered => "recovered",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "update" => Some(BackupReason::Update),
            "remove" => Some(BackupReason::Remove),
            "revert" => Some(BackupReason::Revert),
            "drift" => Some(BackupReason::Drift),
            "recovered" => Some(BackupReason::Recovered),
            _ => None,
        }
    }
}

impl std::fmt::Display for BackupReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One saved version of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupEntry {
    /// Never reused, even after pruning.
    pub id: u64,
    /// `File[sshd-config]`, or [`RECOVERED_RESOURCE`].
    pub resource: String,
    /// The declared path (not the root-resolved one), so a restore works on
    /// the same root and a listing reads like the manifest.
    pub path: PathBuf,
    pub sha256: String,
    pub size: u64,
    /// Permission bits and file type as `st_mode` had them.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Unix seconds: when this version was last saved (a save identical to
    /// the newest entry of its path refreshes it, see [`BackupStore::save`]).
    pub saved_at: i64,
    pub reason: BackupReason,
    /// The resource was `sensitive: true`: show `(sensitive)`, never the bytes.
    pub sensitive: bool,
    /// The content is in the store. False for a file larger than
    /// [`MAX_KEPT_BYTES`]: its size and digest are the only evidence, and
    /// [`BackupStore::get`] refuses it ([`StoreError::NotKept`]).
    pub content_kept: bool,
}

/// What the file looked like, besides its bytes, when it was saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedFile<'a> {
    pub resource: &'a ResourceId,
    pub declared_path: &'a Path,
    pub bytes: &'a [u8],
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub reason: BackupReason,
    pub sensitive: bool,
    /// Unix seconds.
    pub at: i64,
}

/// What a file looked like when it was saved, its content aside: the
/// content is read from a stream ([`BackupStore::save_from`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedFrom<'a> {
    pub resource: &'a ResourceId,
    pub declared_path: &'a Path,
    /// The file's length when it was opened (`fstat`): a file longer than
    /// [`MAX_KEPT_BYTES`] is hashed without being copied.
    pub len: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub reason: BackupReason,
    pub sensitive: bool,
    /// Unix seconds.
    pub at: i64,
}

/// How much history to keep. Applied by [`BackupStore::prune`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// The newest N entries of each declared path are kept; older ones go.
    pub keep_per_path: usize,
    /// Entries older than this go, whatever else says (a secret must not
    /// outlive the age its operator allowed).
    pub max_age_days: Option<u64>,
    /// Oldest entries go until the distinct blobs still referenced fit (see
    /// [`Retention::max_entries`] for which go first).
    pub max_total_bytes: Option<u64>,
    /// Oldest entries go until at most this many are left. With
    /// `max_total_bytes`, older versions of a path go before the newest
    /// entry of any path, and the newest entries go oldest first only when
    /// the older versions alone do not bring the store within its bounds:
    /// a path is saved under a new name each time when a purging Tree
    /// removes what something keeps writing into its folder, and every such
    /// entry is the newest of its path. Entries saved at the prune's `now`
    /// (the pass in flight) never go, so evidence a pass has just saved is
    /// not lost to a bound before its change is made.
    #[serde(default)]
    pub max_entries: Option<u64>,
}

/// The byte budget of [`Retention::default`]: 1 GiB of distinct content.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 1 << 30;

/// The entry bound of [`Retention::default`]: several times the files a
/// large host manages, so the first apply over a host's existing files (the
/// content from before Datum, the evidence most often asked for) is not
/// pruned by the next pass's saves; the index holds about 150 bytes per
/// entry.
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep_per_path: 10,
            max_age_days: None,
            max_total_bytes: Some(DEFAULT_MAX_TOTAL_BYTES),
            max_entries: Some(DEFAULT_MAX_ENTRIES),
        }
    }
}

/// What a prune or a sweep removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReport {
    pub entries_removed: usize,
    pub blobs_removed: usize,
    pub bytes_freed: u64,
    /// Bytes of distinct blobs still referenced afterwards; computed only
    /// when the policy has a byte budget and this prune had to bring the
    /// store within its bounds.
    pub bytes_kept: Option<u64>,
}

/// The backup store of one root.
pub struct BackupStore {
    dir: PrivateDir,
    objects: PrivateDir,
    index_path: PathBuf,
    conn: Connection,
    /// Declared paths saved since the last prune: the only ones a later
    /// prune with the same policy needs to rank again.
    dirty_paths: BTreeSet<Vec<u8>>,
    /// The policy of the last complete prune in this process.
    pruned_with: Option<Retention>,
    /// The number of entries and the sum of their kept sizes, counted by
    /// the first prune and kept up to date by saves and prunes since, so a
    /// prune within its bounds asks the index nothing more.
    totals: Option<Totals>,
}

/// What [`BackupStore::prune`] weighs against the store-wide bounds.
#[derive(Debug, Clone, Copy)]
struct Totals {
    entries: u64,
    /// Every kept entry's size, a blob saved under two entries twice: at
    /// least the distinct bytes the byte budget counts.
    bytes: u64,
}

impl std::fmt::Debug for BackupStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupStore")
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl BackupStore {
    /// Opens (creating when missing) the backup store in `dir`, a folder the
    /// operator named (created 0700). See [`BackupStore::open_in`].
    pub fn open(dir: &Path) -> Result<BackupStore, StoreError> {
        Self::open_in(&db::private_dir(dir)?)
    }

    /// Opens (creating when missing) the backup store in Datum's private
    /// folder `dir`. An unusable index is [`StoreError::Unusable`] and left
    /// as it is (see [`BackupStore::rebuild_in`]).
    pub fn open_in(dir: &PrivateDir) -> Result<BackupStore, StoreError> {
        let objects = Self::objects_of(dir)?;
        let conn = db::open(dir, INDEX, &SCHEMA)?;
        Ok(Self::with(dir, objects, conn))
    }

    /// Moves an unusable index aside and starts a new one, keeping every
    /// blob it described as a recovered entry (flagged sensitive, since
    /// nobody knows any more), so the evidence is not lost with the index.
    /// For `--rebuild-state` only; the warnings say what happened.
    pub fn rebuild_in(dir: &PrivateDir) -> Result<(BackupStore, Vec<StoreWarning>), StoreError> {
        let objects = Self::objects_of(dir)?;
        let (conn, moved) = db::rebuild(dir, INDEX, &SCHEMA)?;
        let mut store = Self::with(dir, objects, conn);
        let mut warnings = Vec::new();
        if let Some(moved_to) = moved {
            warnings.push(StoreWarning::CorruptMovedAside {
                path: store.index_path.clone(),
                moved_to,
                reason: "rebuilt on request (--rebuild-state)".to_owned(),
            });
        }
        let count = store.adopt_orphans()?;
        if count > 0 {
            warnings.push(StoreWarning::RecoveredBlobs {
                dir: dir.path().to_path_buf(),
                count,
            });
        }
        Ok((store, warnings))
    }

    fn objects_of(dir: &PrivateDir) -> Result<PrivateDir, StoreError> {
        let path = dir.file_path("objects");
        dir.subdir("objects", true)
            .map_err(|source| StoreError::Host {
                path: path.clone(),
                cause: Box::new(source),
            })?
            .ok_or_else(|| StoreError::Io {
                path,
                action: "cannot create directory",
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            })
    }

    fn with(dir: &PrivateDir, objects: PrivateDir, conn: Connection) -> BackupStore {
        BackupStore {
            index_path: dir.file_path(INDEX),
            dir: dir.clone(),
            objects,
            conn,
            dirty_paths: BTreeSet::new(),
            pruned_with: None,
            totals: None,
        }
    }

    /// The folder this store lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Saves `file.bytes` (deduplicated) and records an entry for it. Returns
    /// the entry. The caller runs [`BackupStore::prune`] afterwards.
    ///
    /// A save identical to the newest entry of its path (same resource,
    /// bytes, mode, owner and sensitivity) adds no entry: that entry is
    /// returned with its `saved_at` moved forward to `file.at`, keeping its
    /// id and first reason. A change that keeps failing after its evidence
    /// was saved (a target that cannot be renamed over, a revert that never
    /// holds) saves the same live file on every attempt; as new entries,
    /// those copies would push the older, distinct versions past
    /// `keep_per_path` and destroy the history the store exists to keep.
    /// Only the newest entry is compared, so content that comes back after
    /// another version (A, B, A) is still a new entry: the order of what was
    /// on disk stays in the history.
    pub fn save(&mut self, file: &SavedFile<'_>) -> Result<BackupEntry, StoreError> {
        let mut bytes = file.bytes;
        self.save_from(
            &SavedFrom {
                resource: file.resource,
                declared_path: file.declared_path,
                len: u64::try_from(file.bytes.len()).unwrap_or(u64::MAX),
                mode: file.mode,
                uid: file.uid,
                gid: file.gid,
                reason: file.reason,
                sensitive: file.sensitive,
                at: file.at,
            },
            &mut bytes,
        )
    }

    /// [`BackupStore::save`] of what `content` holds, read to its end
    /// through a fixed buffer and hashed as it goes, never held whole: a
    /// file of any size costs the same memory. A file of at most
    /// [`MAX_KEPT_BYTES`] is copied into the store (a temporary file, read
    /// back and checked against its digest, renamed into place); a larger
    /// one is only hashed, and its entry records its size and SHA-256 with
    /// `content_kept` false. A `content` that cannot be read is an error
    /// naming the declared path, and nothing is recorded.
    pub fn save_from(
        &mut self,
        file: &SavedFrom<'_>,
        content: &mut dyn std::io::Read,
    ) -> Result<BackupEntry, StoreError> {
        // Blob first, entry second: a crash in between leaves an orphan
        // blob, never an entry whose bytes are missing. Done for a reused
        // entry too: `put_from` repairs a damaged copy and refreshes the
        // blob's time, so the entry being reused still has intact bytes.
        let stored = objects::put_from(&self.objects, content, file.len, MAX_KEPT_BYTES).map_err(
            |e| match e {
                objects::PutError::Store(e) => e,
                objects::PutError::Source(source) => StoreError::Io {
                    path: file.declared_path.to_path_buf(),
                    action: "cannot read the file being saved",
                    source,
                },
            },
        )?;
        let (sha, size, kept) = (stored.sha, stored.size, stored.kept);
        let resource = file.resource.to_string();
        let path = file.declared_path.as_os_str().as_bytes();
        let index_path = self.index_path.clone();
        let err = || sql_err(&index_path, "cannot record backup entry");
        // One transaction for the look-up and the write, so two savers of
        // the same path cannot both find no twin and both insert.
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err())?;
        let newest = tx
            .prepare_cached(&format!(
                "SELECT {ENTRY_COLUMNS} FROM entries WHERE path = ?1 \
                 ORDER BY saved_at DESC, id DESC LIMIT 1"
            ))
            .and_then(|mut s| s.query_row([path], raw_entry).optional())
            .map_err(err())?;
        let twin = newest.filter(|raw| {
            raw.resource == resource
                && raw.sha256 == sha
                && raw.mode == file.mode
                && raw.uid == file.uid
                && raw.gid == file.gid
                && raw.sensitive == file.sensitive
                && raw.kept == kept
        });
        if let Some(mut raw) = twin {
            // Never backwards: a clock set back must not make the entry
            // look older than it was already known to be.
            raw.saved_at = raw.saved_at.max(file.at);
            tx.execute(
                "UPDATE entries SET saved_at = ?2 WHERE id = ?1",
                params![raw.id, raw.saved_at],
            )
            .map_err(err())?;
            tx.commit().map_err(err())?;
            // No new row: the path's ranking for `keep_per_path` is
            // unchanged, so it is not marked dirty.
            return self.entry(raw);
        }
        let id: i64 = tx
            .query_row(
                "INSERT INTO entries (resource, path, sha256, size, mode, uid, gid, saved_at, \
                 reason, sensitive, kept) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
                 RETURNING id",
                params![
                    resource,
                    path,
                    sha,
                    to_sql(size),
                    file.mode,
                    file.uid,
                    file.gid,
                    file.at,
                    file.reason.as_str(),
                    file.sensitive,
                    kept,
                ],
                |r| r.get(0),
            )
            .map_err(err())?;
        tx.commit().map_err(err())?;
        self.dirty_paths.insert(path.to_vec());
        if let Some(totals) = &mut self.totals {
            totals.entries = totals.entries.saturating_add(1);
            if kept {
                totals.bytes = totals.bytes.saturating_add(size);
            }
        }
        Ok(BackupEntry {
            id: from_sql(id),
            resource,
            path: file.declared_path.to_owned(),
            sha256: sha,
            size,
            mode: file.mode,
            uid: file.uid,
            gid: file.gid,
            saved_at: file.at,
            reason: file.reason,
            sensitive: file.sensitive,
            content_kept: kept,
        })
    }

    /// Entries, newest first; with `filter_path`, only those of that declared
    /// path.
    pub fn list(&self, filter_path: Option<&Path>) -> Result<Vec<BackupEntry>, StoreError> {
        let order = "ORDER BY saved_at DESC, id DESC";
        let rows: rusqlite::Result<Vec<RawEntry>> = match filter_path {
            None => self
                .conn
                .prepare_cached(&format!("SELECT {ENTRY_COLUMNS} FROM entries {order}"))
                .and_then(|mut s| s.query_map([], raw_entry)?.collect()),
            Some(path) => self
                .conn
                .prepare_cached(&format!(
                    "SELECT {ENTRY_COLUMNS} FROM entries WHERE path = ?1 {order}"
                ))
                .and_then(|mut s| {
                    s.query_map([path.as_os_str().as_bytes()], raw_entry)?
                        .collect()
                }),
        };
        rows.map_err(self.sql("cannot list backups"))?
            .into_iter()
            .map(|raw| self.entry(raw))
            .collect()
    }

    /// One entry and its bytes. The bytes are checked against the recorded
    /// digest: damaged evidence is an error, not a silent wrong restore.
    pub fn get(&self, id: u64) -> Result<(BackupEntry, Vec<u8>), StoreError> {
        let raw = self
            .conn
            .prepare_cached(&format!(
                "SELECT {ENTRY_COLUMNS} FROM entries WHERE id = ?1"
            ))
            .and_then(|mut s| s.query_row([to_sql(id)], raw_entry).optional())
            .map_err(self.sql("cannot read backup entry"))?
            .ok_or_else(|| StoreError::NoSuchBackup {
                path: self.index_path.clone(),
                id,
            })?;
        let entry = self.entry(raw)?;
        if !entry.content_kept {
            return Err(StoreError::NotKept {
                path: self.index_path.clone(),
                id,
                size: entry.size,
                limit: MAX_KEPT_BYTES,
            });
        }
        let blob = objects::blob_path(&self.objects, &entry.sha256);
        let damaged = |detail: String| StoreError::DamagedBackup {
            path: blob.clone(),
            id,
            detail,
        };
        let bytes = objects::read(&self.objects, &entry.sha256)
            .map_err(|e| damaged(format!("cannot read blob: {e}")))?;
        if objects::sha256_hex(&bytes) != entry.sha256 {
            return Err(damaged("content no longer matches its SHA-256".to_owned()));
        }
        Ok((entry, bytes))
    }

    /// Applies `policy` at time `now` (Unix seconds): removes entries, then
    /// the blobs no remaining entry references.
    ///
    /// Cheap enough to run after every save: the first prune of a process
    /// (or one with a different policy) ranks every path, later ones only the
    /// paths saved since; the age rule is an indexed range; the store-wide
    /// bounds are weighed against totals counted once and kept up to date,
    /// and the entries walked only when over one.
    pub fn prune(&mut self, policy: &Retention, now: i64) -> Result<PruneReport, StoreError> {
        let full = self.pruned_with != Some(*policy);
        let dirty = std::mem::take(&mut self.dirty_paths);
        // If this prune fails half-way, the next one starts from scratch.
        self.pruned_with = None;
        let totals = self.totals.take();
        let index_path = self.index_path.clone();
        let err = || sql_err(&index_path, "cannot prune backups");
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err())?;
        let mut doomed: BTreeSet<i64> = BTreeSet::new();

        // Surplus versions per path, newest kept.
        let keep = i64::try_from(policy.keep_per_path).unwrap_or(i64::MAX);
        if full {
            let surplus: Vec<i64> = tx
                .prepare(
                    "SELECT id FROM (SELECT id, row_number() OVER \
                     (PARTITION BY path ORDER BY saved_at DESC, id DESC) AS rank FROM entries) \
                     WHERE rank > ?1",
                )
                .and_then(|mut s| s.query_map([keep], |r| r.get(0))?.collect())
                .map_err(err())?;
            doomed.extend(surplus);
        } else {
            let mut stmt = tx
                .prepare(
                    "SELECT id FROM entries WHERE path = ?1 \
                     ORDER BY saved_at DESC, id DESC LIMIT -1 OFFSET ?2",
                )
                .map_err(err())?;
            for path in &dirty {
                let surplus: Vec<i64> = stmt
                    .query_map(params![path, keep], |r| r.get(0))
                    .and_then(|rows| rows.collect())
                    .map_err(err())?;
                doomed.extend(surplus);
            }
        }

        if let Some(days) = policy.max_age_days {
            let age = i64::try_from(days.saturating_mul(86_400)).unwrap_or(i64::MAX);
            let cutoff = now.saturating_sub(age);
            let old: Vec<i64> = tx
                .prepare("SELECT id FROM entries WHERE saved_at < ?1")
                .and_then(|mut s| s.query_map([cutoff], |r| r.get(0))?.collect())
                .map_err(err())?;
            doomed.extend(old);
        }

        let bounds = Bounds {
            bytes: policy.max_total_bytes.unwrap_or(u64::MAX),
            entries: policy.max_entries.unwrap_or(u64::MAX),
        };
        let mut totals = match totals {
            Some(totals) => totals,
            None => count_totals(&tx).map_err(err())?,
        };
        let walked = bounds.exceeded(&tx, totals).map_err(err())?;
        if walked {
            over_bounds(&tx, bounds, now, &mut doomed).map_err(err())?;
        }

        let mut candidates: BTreeSet<String> = BTreeSet::new();
        {
            let mut delete = tx
                .prepare("DELETE FROM entries WHERE id = ?1 RETURNING sha256, kept, size")
                .map_err(err())?;
            for id in &doomed {
                let gone: Option<(String, bool, i64)> = delete
                    .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()
                    .map_err(err())?;
                if let Some((sha, kept, size)) = gone {
                    totals.entries = totals.entries.saturating_sub(1);
                    if kept {
                        totals.bytes = totals.bytes.saturating_sub(from_sql(size));
                    }
                    candidates.insert(sha);
                }
            }
        }
        let bytes_kept = match (walked, policy.max_total_bytes) {
            (true, Some(_)) => Some(distinct_bytes(&tx).map_err(err())?),
            _ => None,
        };
        tx.commit().map_err(err())?;
        self.pruned_with = Some(*policy);
        self.totals = Some(totals);

        // Only now, with the entries gone for good, may their blobs go.
        let mut report = PruneReport {
            entries_removed: doomed.len(),
            bytes_kept,
            ..PruneReport::default()
        };
        for sha in candidates {
            if self.is_referenced(&sha)? {
                continue;
            }
            let len = objects::len(&self.objects, &sha);
            if objects::remove(&self.objects, sha.get(..2).unwrap_or("00"), &sha)? {
                report.blobs_removed += 1;
                report.bytes_freed += len;
            }
        }
        Ok(report)
    }

    /// Sweeps the object folders: removes blobs no entry references and
    /// temporary files of interrupted saves, both only when older than an
    /// hour. Run once per pass under the root lock, not after every save: it
    /// lists every blob.
    pub fn gc(&mut self) -> Result<PruneReport, StoreError> {
        let referenced = self.referenced_digests()?;
        let cutoff = SystemTime::now()
            .checked_sub(GC_GRACE)
            .unwrap_or(UNIX_EPOCH);
        let mut report = PruneReport::default();
        for found in objects::walk(&self.objects)? {
            let old_enough = found.modified.is_some_and(|m| m < cutoff);
            let is_temp = objects::is_temp_name(&found.name);
            let orphan = objects::is_blob_name(&found.name) && !referenced.contains(&found.name);
            if old_enough
                && (is_temp || orphan)
                && objects::remove(&self.objects, &found.fan, &found.name)?
            {
                report.blobs_removed += 1;
                report.bytes_freed += found.len;
            }
        }
        Ok(report)
    }

    /// After the index was rebuilt: records every intact blob as a recovered
    /// entry, so that pruning and sweeping do not erase evidence the lost
    /// index used to describe.
    fn adopt_orphans(&mut self) -> Result<usize, StoreError> {
        let referenced = self.referenced_digests()?;
        let mut adopted = 0;
        let tx = self
            .conn
            .transaction()
            .map_err(sql_err(&self.index_path, "cannot recover backups"))?;
        for found in objects::walk(&self.objects)? {
            if !objects::is_blob_name(&found.name) || referenced.contains(&found.name) {
                continue;
            }
            if !objects::verify(&self.objects, &found.name) {
                continue;
            }
            let saved_at = found
                .modified
                .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
                .and_then(|d| i64::try_from(d.as_secs()).ok())
                .unwrap_or(0);
            // A unique path per blob, so keep_per_path never collapses them.
            let path = format!("(recovered)/{}", found.name);
            tx.execute(
                "INSERT INTO entries (resource, path, sha256, size, mode, uid, gid, saved_at, \
                 reason, sensitive) VALUES (?1, ?2, ?3, ?4, 0, 0, 0, ?5, 'recovered', 1)",
                params![
                    RECOVERED_RESOURCE,
                    path.as_bytes(),
                    found.name,
                    to_sql(found.len),
                    saved_at
                ],
            )
            .map_err(sql_err(&self.index_path, "cannot recover backups"))?;
            adopted += 1;
        }
        tx.commit()
            .map_err(sql_err(&self.index_path, "cannot recover backups"))?;
        Ok(adopted)
    }

    fn is_referenced(&self, sha: &str) -> Result<bool, StoreError> {
        self.conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM entries WHERE sha256 = ?1)",
                [sha],
                |r| r.get(0),
            )
            .map_err(self.sql("cannot read backup index"))
    }

    fn referenced_digests(&self) -> Result<BTreeSet<String>, StoreError> {
        self.conn
            .prepare("SELECT DISTINCT sha256 FROM entries")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .map_err(self.sql("cannot read backup index"))
    }

    fn entry(&self, raw: RawEntry) -> Result<BackupEntry, StoreError> {
        let reason = BackupReason::parse(&raw.reason).ok_or_else(|| StoreError::Malformed {
            path: self.index_path.clone(),
            what: "backup reason",
            detail: raw.reason.clone(),
        })?;
        Ok(BackupEntry {
            id: from_sql(raw.id),
            resource: raw.resource,
            path: PathBuf::from(OsString::from_vec(raw.path)),
            sha256: raw.sha256,
            size: from_sql(raw.size),
            mode: raw.mode,
            uid: raw.uid,
            gid: raw.gid,
            saved_at: raw.saved_at,
            reason,
            sensitive: raw.sensitive,
            content_kept: raw.kept,
        })
    }

    fn sql(&self, action: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
        sql_err(&self.index_path, action)
    }
}

fn sql_err(path: &Path, action: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Sqlite {
        path,
        action,
        source,
    }
}

/// Bytes of the distinct blobs the index references.
fn distinct_bytes(conn: &Connection) -> rusqlite::Result<u64> {
    conn.query_row(
        "SELECT coalesce(sum(size), 0) FROM \
         (SELECT max(size) AS size FROM entries WHERE kept GROUP BY sha256)",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(from_sql)
}

/// The store-wide bounds of a [`Retention`]; `u64::MAX` where it has none.
#[derive(Clone, Copy)]
struct Bounds {
    bytes: u64,
    entries: u64,
}

impl Bounds {
    /// Whether the store, before this prune removes anything, is over
    /// either bound: the distinct bytes are summed only when the sum of
    /// every entry's size is over the budget, and the walk of every entry in
    /// [`over_bounds`] runs only when this says so.
    fn exceeded(self, conn: &Connection, totals: Totals) -> rusqlite::Result<bool> {
        Ok(totals.entries > self.entries
            || (totals.bytes > self.bytes && distinct_bytes(conn)? > self.bytes))
    }
}

/// Counts the entries and sums their kept sizes.
fn count_totals(conn: &Connection) -> rusqlite::Result<Totals> {
    conn.query_row(
        "SELECT count(*), coalesce(sum(CASE WHEN kept THEN size ELSE 0 END), 0) FROM entries",
        [],
        |r| {
            Ok(Totals {
                entries: from_sql(r.get(0)?),
                bytes: from_sql(r.get(1)?),
            })
        },
    )
}

/// Adds to `doomed` the oldest entries until the distinct blobs the rest
/// reference fit in `bounds.bytes` and at most `bounds.entries` are left:
/// first every entry but the newest of its path, then those newest too,
/// oldest first; never one saved at `now` (the pass in flight).
fn over_bounds(
    conn: &Connection,
    bounds: Bounds,
    now: i64,
    doomed: &mut BTreeSet<i64>,
) -> rusqlite::Result<()> {
    type Row = (i64, Vec<u8>, String, i64, i64);
    let rows: Vec<Row> = conn
        .prepare(
            "SELECT id, path, sha256, CASE WHEN kept THEN size ELSE 0 END, saved_at FROM entries \
             ORDER BY saved_at, id",
        )?
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut refs: HashMap<&str, (usize, u64)> = HashMap::new();
    let mut newest_of_path: BTreeMap<&[u8], i64> = BTreeMap::new();
    let mut count: u64 = 0;
    for (id, path, sha, size, _) in &rows {
        if doomed.contains(id) {
            continue;
        }
        let slot = refs.entry(sha.as_str()).or_insert((0, from_sql(*size)));
        slot.0 += 1;
        newest_of_path.insert(path.as_slice(), *id);
        count += 1;
    }
    let mut total: u64 = refs.values().map(|(_, size)| *size).sum();
    let protected: BTreeSet<i64> = newest_of_path.values().copied().collect();
    for spare_newest in [true, false] {
        for (id, _, sha, _, saved_at) in &rows {
            if total <= bounds.bytes && count <= bounds.entries {
                return Ok(());
            }
            if *saved_at == now || doomed.contains(id) || (spare_newest && protected.contains(id)) {
                continue;
            }
            doomed.insert(*id);
            count = count.saturating_sub(1);
            if let Some(slot) = refs.get_mut(sha.as_str()) {
                slot.0 -= 1;
                if slot.0 == 0 {
                    total = total.saturating_sub(slot.1);
                }
            }
        }
    }
    Ok(())
}

const ENTRY_COLUMNS: &str =
    "id, resource, path, sha256, size, mode, uid, gid, saved_at, reason, sensitive, kept";

/// A row as stored, before the reason word is checked.
struct RawEntry {
    id: i64,
    resource: String,
    path: Vec<u8>,
    sha256: String,
    size: i64,
    mode: u32,
    uid: u32,
    gid: u32,
    saved_at: i64,
    reason: String,
    sensitive: bool,
    kept: bool,
}

fn raw_entry(row: &Row<'_>) -> rusqlite::Result<RawEntry> {
    Ok(RawEntry {
        id: row.get(0)?,
        resource: row.get(1)?,
        path: row.get(2)?,
        sha256: row.get(3)?,
        size: row.get(4)?,
        mode: row.get(5)?,
        uid: row.get(6)?,
        gid: row.get(7)?,
        saved_at: row.get(8)?,
        reason: row.get(9)?,
        sensitive: row.get(10)?,
        kept: row.get(11)?,
    })
}

/// Bit-preserving u64 <-> i64 for SQLite integers (see `state`).
fn to_sql(value: u64) -> i64 {
    i64::from_ne_bytes(value.to_ne_bytes())
}

fn from_sql(value: i64) -> u64 {
    u64::from_ne_bytes(value.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved<'a>(id: &'a ResourceId, path: &'a Path, bytes: &'a [u8], at: i64) -> SavedFile<'a> {
        SavedFile {
            resource: id,
            declared_path: path,
            bytes,
            mode: 0o100_644,
            uid: 0,
            gid: 0,
            reason: BackupReason::Update,
            sensitive: false,
            at,
        }
    }

    #[test]
    fn non_utf8_paths_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = BackupStore::open(dir.path()).unwrap();
        let id = ResourceId::new("File", "odd");
        let path = PathBuf::from(OsString::from_vec(b"/etc/caf\xe9.conf".to_vec()));
        store.save(&saved(&id, &path, b"x", 1)).unwrap();
        let listed = store.list(Some(&path)).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].path, path);
    }

    #[test]
    fn byte_budget_spares_the_newest_entry_of_each_path() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = BackupStore::open(dir.path()).unwrap();
        let id = ResourceId::new("File", "big");
        let path = Path::new("/etc/big");
        store.save(&saved(&id, path, &[1; 100], 1)).unwrap();
        store.save(&saved(&id, path, &[2; 100], 2)).unwrap();
        let newest = store.save(&saved(&id, path, &[3; 100], 3)).unwrap();
        let policy = Retention {
            max_total_bytes: Some(10),
            ..Retention::default()
        };
        let report = store.prune(&policy, 3).unwrap();
        assert_eq!(report.entries_removed, 2);
        assert_eq!(report.blobs_removed, 2);
        assert_eq!(report.bytes_kept, Some(100));
        let left = store.list(None).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].id, newest.id);
    }

    /// Files saved under ever new names (what a purging Tree removes from a
    /// folder something keeps writing to, pass after pass) are each the
    /// newest of their path: the store still stays within its bounds,
    /// oldest first, and never loses what the pass in flight saved.
    #[test]
    fn ever_new_paths_stay_within_the_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = BackupStore::open(dir.path()).unwrap();
        let policy = Retention {
            max_total_bytes: Some(1_000),
            max_entries: Some(20),
            ..Retention::default()
        };
        let id = ResourceId::new("Tree", "spool");
        for pass in 0..200u8 {
            let path = PathBuf::from(format!("/spool/junk{pass}"));
            store
                .save(&saved(&id, &path, &[pass; 100], i64::from(pass)))
                .unwrap();
            store.prune(&policy, i64::from(pass)).unwrap();
            let left = store.list(None).unwrap();
            assert!(left.len() <= 10, "pass {pass}: {} entries", left.len());
            assert_eq!(left[0].saved_at, i64::from(pass), "the newest is kept");
        }
        assert!(objects::walk(&store.objects).unwrap().len() <= 10);
        // One pass saving more than the bounds: all of it stays, the
        // older passes' evidence goes.
        for n in 0..30u8 {
            let path = PathBuf::from(format!("/spool/burst{n}"));
            store.save(&saved(&id, &path, &[n; 100], 500)).unwrap();
            store.prune(&policy, 500).unwrap();
        }
        let left = store.list(None).unwrap();
        assert_eq!(left.len(), 30);
        assert!(left.iter().all(|e| e.saved_at == 500));
        // The next pass brings it back within its bounds.
        store
            .save(&saved(&id, Path::new("/spool/after"), b"x", 501))
            .unwrap();
        store.prune(&policy, 501).unwrap();
        let left = store.list(None).unwrap();
        assert_eq!(left.len(), 10, "900 bytes of the burst, and the new one");
        assert_eq!(left[0].path, Path::new("/spool/after"));
        // Entries are bounded too, content kept or not.
        let count = Retention {
            max_entries: Some(3),
            ..Retention::default()
        };
        for n in 0..10 {
            let path = PathBuf::from(format!("/spool/n{n}"));
            store.save(&saved(&id, &path, b"", 600 + n)).unwrap();
            store.prune(&count, 600 + n).unwrap();
        }
        assert_eq!(store.list(None).unwrap().len(), 3);
    }

    #[test]
    fn a_changed_policy_reranks_paths_not_saved_since() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = BackupStore::open(dir.path()).unwrap();
        let id = ResourceId::new("File", "a");
        let path = Path::new("/a");
        for v in 0..5u8 {
            store.save(&saved(&id, path, &[v], i64::from(v))).unwrap();
        }
        let keep = |n| Retention {
            keep_per_path: n,
            ..Retention::default()
        };
        assert_eq!(store.prune(&keep(10), 9).unwrap().entries_removed, 0);
        // Nothing saved since, but the policy is stricter: /a is ranked again.
        assert_eq!(store.prune(&keep(2), 9).unwrap().entries_removed, 3);
        assert_eq!(store.list(None).unwrap().len(), 2);
    }

    /// A file larger than the store keeps is hashed, not copied: its entry
    /// has its size and digest, `get` refuses it, and it weighs nothing in
    /// the byte budget.
    #[test]
    fn a_file_too_large_to_keep_leaves_its_size_and_digest() {
        use std::io::Read as _;
        let dir = tempfile::tempdir().unwrap();
        let mut store = BackupStore::open(dir.path()).unwrap();
        let id = ResourceId::new("File", "big");
        let path = Path::new("/big");
        let len = MAX_KEPT_BYTES + 1;
        let from = SavedFrom {
            resource: &id,
            declared_path: path,
            len,
            mode: 0o100_644,
            uid: 0,
            gid: 0,
            reason: BackupReason::Update,
            sensitive: false,
            at: 1,
        };
        let entry = store
            .save_from(&from, &mut std::io::repeat(0).take(len))
            .unwrap();
        assert!(!entry.content_kept);
        assert_eq!(entry.size, len);
        assert_eq!(entry.sha256.len(), 64);
        assert!(objects::walk(&store.objects).unwrap().is_empty());
        let e = store.get(entry.id).unwrap_err();
        assert!(matches!(e, StoreError::NotKept { .. }), "{e}");
        assert!(e.to_string().contains("too large to keep"), "{e}");
        assert_eq!(store.list(None).unwrap(), vec![entry]);
        let policy = Retention {
            max_total_bytes: Some(0),
            ..Retention::default()
        };
        assert_eq!(store.prune(&policy, 2).unwrap().entries_removed, 0);
    }

    #[test]
    fn reasons_round_trip_through_their_words() {
        for r in [
            BackupReason::Update,
            BackupReason::Remove,
            BackupReason::Revert,
            BackupReason::Drift,
            BackupReason::Recovered,
        ] {
            assert_eq!(BackupReason::parse(r.as_str()), Some(r));
        }
    }
}
