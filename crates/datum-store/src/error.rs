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
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    /// SQLite refused an operation on a database that is not corrupt (locked
    /// past the busy timeout, disk full, read-only file system...).
    #[error("{path}: {action}: {source}")]
    Sqlite {
        path: PathBuf,
        action: &'static str,
        source: rusqlite::Error,
    },
    /// A value read back from the database does not have the shape this
    /// version writes (a hand-edited row, a bug in an older version).
    #[error("{path}: {what} in the database is malformed: {detail}")]
    Malformed {
        path: PathBuf,
        what: &'static str,
        detail: String,
    },
    /// `backup show 42` for an id that does not exist (never existed, or was
    /// pruned).
    #[error("{path}: no backup entry with id {id}")]
    NoSuchBackup { path: PathBuf, id: u64 },
    /// The blob of an entry is gone or its bytes no longer hash to the
    /// recorded digest: the evidence cannot be trusted, so it is not returned.
    #[error("{path}: backup {id} is damaged: {detail}")]
    DamagedBackup {
        path: PathBuf,
        id: u64,
        detail: String,
    },
}

impl StoreError {
    /// Whether SQLite reported the database itself as damaged (found after
    /// opening, in the middle of a pass). The next [`crate::Store::open`]
    /// checks the file and moves it aside if it is still damaged.
    pub fn is_corruption(&self) -> bool {
        match self {
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
