//! Errors and warnings of the state store and the backup store.
//!
//! Every error names the file it is about, so a person reading `datum apply`'s
//! one-line failure knows which database or blob to look at. Warnings are for
//! things the store repaired by itself (a corrupt database moved aside): the
//! caller must show them, but the pass goes on.

use std::fmt;
use std::path::PathBuf;

/// Something the store could not do. The path is the database or blob file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A directory or file operation failed (creating the store's folder,
    /// moving a corrupt database aside, writing or reading a blob).
    #[error("{}: {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    /// SQLite refused an operation on a database that is not corrupt (locked
    /// past the busy timeout, disk full, read-only file system...).
    #[error("{}: {action}: {source}", path.display())]
    Sqlite {
        path: PathBuf,
        action: &'static str,
        source: rusqlite::Error,
    },
    /// A value read back from the database does not have the shape this
    /// version writes (a hand-edited row, a bug in an older version).
    #[error("{}: {what} in the database is malformed: {detail}", path.display())]
    Malformed {
        path: PathBuf,
        what: &'static str,
        detail: String,
    },
    /// The database is corrupt, foreign or from a newer Datum. It is left
    /// as it is: it may hold quarantines and owed reloads, and an empty one
    /// in its place would forget them. The caller refuses to act and says
    /// how to recover (restore the file, or `--rebuild-state`).
    #[error("{}: unusable ({reason})", path.display())]
    Unusable { path: PathBuf, reason: String },
    /// The file system holding the store has no room left to record a
    /// pass: what a pass would record (verified state, owed reloads) could
    /// not be kept.
    #[error("{}: the file system has {available} bytes free, less than the {needed} Datum needs to record a pass", path.display())]
    Full {
        path: PathBuf,
        available: u64,
        needed: u64,
    },
    /// Datum's private folder or a file in it refused (a link where a store
    /// file belongs, a folder others may write to).
    /// Shown as the host's error alone, which names the path and carries
    /// its own cause in its text, and not chained as a source: a chain
    /// printed inline (`{:#}`) said it twice.
    #[error("{cause}")]
    Host {
        path: PathBuf,
        cause: Box<datum_host::HostError>,
    },
    /// `backup show 42` for an id that does not exist (never existed, or was
    /// pruned).
    #[error("{}: no backup entry with id {id}", path.display())]
    NoSuchBackup { path: PathBuf, id: u64 },
    /// The blob of an entry is gone or its bytes no longer hash to the
    /// recorded digest: the evidence cannot be trusted, so it is not returned.
    #[error("{}: backup {id} is damaged: {detail}", path.display())]
    DamagedBackup {
        path: PathBuf,
        id: u64,
        detail: String,
    },
    /// `backup show 42` for an entry that records a file's size and digest
    /// but not its content: it was larger than the store keeps.
    #[error(
        "{}: backup {id} holds no content: the file was {size} bytes, too large to keep \
         (the backup store keeps files of up to {limit} bytes); only its size and SHA-256 \
         were recorded",
        path.display()
    )]
    NotKept {
        path: PathBuf,
        id: u64,
        size: u64,
        limit: u64,
    },
}

impl StoreError {
    /// Whether the database itself is damaged (found when opening, or
    /// reported by SQLite in the middle of a pass).
    pub fn is_corruption(&self) -> bool {
        match self {
            StoreError::Unusable { .. } => true,
            StoreError::Sqlite { source, .. } => matches!(
                source.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
            ),
            StoreError::DamagedBackup { .. } => true,
            _ => false,
        }
    }
}

/// Something the store repaired while opening; the caller reports it and goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreWarning {
    /// The database could not be used and was renamed; an empty one replaced it.
    /// Everything it held (verified metadata, history, owed reloads) is gone, so
    /// the next pass treats every resource as never verified.
    CorruptMovedAside {
        path: PathBuf,
        moved_to: PathBuf,
        reason: String,
    },
    /// Blobs that no index entry referenced were kept after the backup index
    /// was rebuilt, as entries with an unknown resource and path, so the
    /// evidence they hold is not lost with the index.
    RecoveredBlobs { dir: PathBuf, count: usize },
}

impl fmt::Display for StoreWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreWarning::CorruptMovedAside {
                path,
                moved_to,
                reason,
            } => write!(
                f,
                "{}: unusable ({reason}); moved aside to {} and rebuilt empty",
                path.display(),
                moved_to.display()
            ),
            StoreWarning::RecoveredBlobs { dir, count } => write!(
                f,
                "{}: {count} backup blob(s) had no index entry after the index was rebuilt; \
                 kept as recovered entries (marked sensitive)",
                dir.display()
            ),
        }
    }
}
