//! Opening a SQLite file safely: folders, permissions, pragmas, integrity,
//! schema migrations, and recovery from a database that cannot be used.
//!
//! Shared by the state store and the backup index so that both recover the
//! same way. This module knows nothing about the tables themselves: each caller
//! passes its [`Schema`] (an application id and an ordered list of
//! migrations).
//!
//! It must never delete a database: an unusable one is renamed aside (with its
//! `-wal`/`-shm` companions) so a person can still inspect it.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use crate::error::{StoreError, StoreWarning};

/// How long a write waits for another connection's write to finish. The
/// engine's root lock already serialises passes; this covers a reader such as
/// `datum backup list` running during an apply (WAL lets it read meanwhile,
/// but a checkpoint can still briefly need the lock).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// What a database file must contain, and how to get there from older versions.
pub(crate) struct Schema {
    /// Written to `PRAGMA application_id`, so a foreign SQLite file at our path
    /// (another program's database) is recognised and not mistaken for ours.
    pub application_id: i32,
    /// `migrations[i]` turns schema version `i` into version `i + 1`; the
    /// current version is `migrations.len()` (stored in `PRAGMA user_version`).
    pub migrations: &'static [&'static str],
}

impl Schema {
    fn version(&self) -> i64 {
        i64::try_from(self.migrations.len()).unwrap_or(i64::MAX)
    }
}

/// Why a database file is unusable, as a person should read it.
struct Unusable(String);

enum OpenFailure {
    /// The file is not (or no longer) a database we can trust: move it aside.
    Unusable(Unusable),
    /// Anything else (permissions, disk full, locked): report, do not touch.
    Fatal(StoreError),
}

/// Opens (creating when missing) the database at `path` with `schema`. A
/// corrupt, foreign or too-new database is moved aside and replaced by an
/// empty one, with a warning.
pub(crate) fn open(
    path: &Path,
    schema: &Schema,
) -> Result<(Connection, Vec<StoreWarning>), StoreError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_private_dir(parent)?;
    }
    let mut warnings = Vec::new();
    match try_open(path, schema) {
        Ok(conn) => return Ok((conn, warnings)),
        Err(OpenFailure::Fatal(e)) => return Err(e),
        Err(OpenFailure::Unusable(Unusable(reason))) => {
            let moved_to = move_aside(path)?;
            warnings.push(StoreWarning::CorruptMovedAside {
                path: path.to_owned(),
                moved_to,
                reason,
            });
        }
    }
    // A second failure right after moving the file aside is not corruption
    // any more: it is the environment (read-only file system, full disk).
    match try_open(path, schema) {
        Ok(conn) => Ok((conn, warnings)),
        Err(OpenFailure::Fatal(e)) => Err(e),
        Err(OpenFailure::Unusable(Unusable(reason))) => Err(StoreError::Malformed {
            path: path.to_owned(),
            what: "freshly created database",
            detail: reason,
        }),
    }
}

/// Creates `dir` and any missing parents with mode 0700: the state and the
/// backups describe (and, for backups, contain) root-owned configuration.
/// Existing folders keep their mode: they may be shared system folders.
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| StoreError::Io {
            path: dir.to_owned(),
            action: "cannot create directory",
            source,
        })
}

fn try_open(path: &Path, schema: &Schema) -> Result<Connection, OpenFailure> {
    let sqlite = |action: &'static str| {
        let path = path.to_owned();
        move |source: rusqlite::Error| classify(path, action, source)
    };
    precreate_private_file(path).map_err(OpenFailure::Fatal)?;
    check_header(path)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(path, flags).map_err(sqlite("cannot open"))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sqlite("cannot set busy timeout"))?;

    // quick_check reads every page and checks its structure (not the
    // index-to-table agreement that integrity_check adds): linear in the
    // database size, a few milliseconds for thousands of resources, and it is
    // the first statement that reads the file, so "not a database" shows here.
    let verdict: Vec<String> = {
        let mut stmt = conn
            .prepare("PRAGMA quick_check")
            .map_err(sqlite("cannot check integrity"))?;
        stmt.query_map([], |row| row.get::<_, String>(0))
            .and_then(|rows| rows.collect())
            .map_err(sqlite("cannot check integrity"))?
    };
    if verdict != ["ok"] {
        let first = verdict.into_iter().next().unwrap_or_default();
        return Err(OpenFailure::Unusable(Unusable(format!(
            "integrity check failed: {first}"
        ))));
    }

    let app_id: i64 = pragma_int(&conn, "application_id").map_err(sqlite("cannot read"))?;
    let version: i64 = pragma_int(&conn, "user_version").map_err(sqlite("cannot read"))?;
    let empty = is_empty(&conn).map_err(sqlite("cannot read"))?;
    if !empty && app_id != i64::from(schema.application_id) {
        return Err(OpenFailure::Unusable(Unusable(format!(
            "not a Datum database (application id {app_id:#x})"
        ))));
    }
    if version > schema.version() {
        return Err(OpenFailure::Unusable(Unusable(format!(
            "schema version {version} is newer than this Datum understands ({})",
            schema.version()
        ))));
    }

    // WAL: readers (`datum backup list`, `datum schedule`) never block the
    // pass's writer, and a killed writer leaves a log SQLite replays or drops
    // on the next open, never a half-applied transaction.
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(sqlite("cannot enable WAL"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(OpenFailure::Fatal(StoreError::Malformed {
            path: path.to_owned(),
            what: "journal mode",
            detail: format!("SQLite kept journal mode {mode} instead of wal"),
        }));
    }
    // FULL, not NORMAL: with WAL, NORMAL survives a killed process but may lose
    // the last commits on power loss. Those commits include owed reloads
    // (issue 3: a reload owed must survive anything after the files were
    // written) and the verified records that label the next change as
    // intentional or corrective. The price is one fsync per commit, which is
    // why the engine groups a pass's writes in one `Batch`.
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")
        .map_err(sqlite("cannot set pragmas"))?;

    // An up-to-date database needs no write at all: opening stays a read
    // (no fsync), which matters for read-only commands and for a pass's
    // start-up time.
    if empty || version != schema.version() {
        migrate(&mut conn, schema).map_err(sqlite("cannot create or migrate the schema"))?;
    }
    Ok(conn)
}

/// Brings the schema to the current version in one transaction: a crash in
/// the middle of a migration leaves the old version intact.
fn migrate(conn: &mut Connection, schema: &Schema) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // Read again inside the write transaction: another process may have
    // migrated between our first look and taking the lock.
    let from: i64 = pragma_int(&tx, "user_version")?;
    let start = usize::try_from(from).unwrap_or(0);
    for step in schema.migrations.iter().skip(start) {
        tx.execute_batch(step)?;
    }
    if from != schema.version() {
        tx.execute_batch(&format!("PRAGMA user_version = {}", schema.version()))?;
    }
    tx.execute_batch(&format!(
        "PRAGMA application_id = {}",
        schema.application_id
    ))?;
    tx.commit()
}

fn pragma_int(conn: &Connection, name: &str) -> rusqlite::Result<i64> {
    conn.query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))
}

fn is_empty(conn: &Connection) -> rusqlite::Result<bool> {
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))?;
    Ok(tables == 0)
}

/// Every SQLite database starts with these 16 bytes.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Rejects a non-empty file that does not start like a SQLite database
/// before SQLite opens it: once SQLite has opened a file it may act on a
/// `-wal` beside it (and deletes it when the connection closes), which would
/// destroy part of what we are about to move aside for inspection.
fn check_header(path: &Path) -> Result<(), OpenFailure> {
    use std::io::Read as _;
    let fatal = |source| {
        OpenFailure::Fatal(StoreError::Io {
            path: path.to_owned(),
            action: "cannot read database header",
            source,
        })
    };
    let mut file = fs::File::open(path).map_err(fatal)?;
    if !file.metadata().map_err(fatal)?.is_file() {
        // A directory or a device: let SQLite report it as it sees it.
        return Ok(());
    }
    let mut head = Vec::with_capacity(SQLITE_MAGIC.len());
    file.by_ref()
        .take(SQLITE_MAGIC.len() as u64)
        .read_to_end(&mut head)
        .map_err(fatal)?;
    if head.is_empty() || head == SQLITE_MAGIC {
        return Ok(());
    }
    Err(OpenFailure::Unusable(Unusable(
        "file is not a database (no SQLite header)".to_owned(),
    )))
}

/// SQLite creates new files with mode 0644 (minus umask); create ours first
/// with 0600 so the state is never readable by other users, not even briefly.
/// SQLite gives the `-wal` and `-shm` files the main file's mode.
fn precreate_private_file(path: &Path) -> Result<(), StoreError> {
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(StoreError::Io {
            path: path.to_owned(),
            action: "cannot create database file",
            source,
        }),
    }
}

/// Corruption-like codes mean "move the file aside"; everything else is an
/// environment problem the operator must fix, and we must not touch the file.
fn classify(path: PathBuf, action: &'static str, source: rusqlite::Error) -> OpenFailure {
    let code = source.sqlite_error_code();
    match code {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            OpenFailure::Unusable(Unusable(source.to_string()))
        }
        _ => OpenFailure::Fatal(StoreError::Sqlite {
            path,
            action,
            source,
        }),
    }
}

/// Renames `path` to `path.corrupt-<unix-ts>` (with a counter if that exists)
/// and its `-wal`, `-shm` and `-journal` companions alongside. The companions
/// must go too: a stale WAL replayed onto the fresh database would bring back
/// pages of the corrupt one.
fn move_aside(path: &Path) -> Result<PathBuf, StoreError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let base = path.as_os_str().to_owned();
    let target = (0u32..)
        .map(|n| {
            let mut name = base.clone();
            name.push(format!(".corrupt-{now}"));
            if n > 0 {
                name.push(format!(".{n}"));
            }
            PathBuf::from(name)
        })
        .find(|candidate| !candidate.exists() && !sidecar(candidate, "-wal").exists())
        .unwrap_or_else(|| path.with_extension("corrupt"));
    for suffix in ["-wal", "-shm", "-journal"] {
        let from = sidecar(path, suffix);
        if from.exists() {
            rename(&from, &sidecar(&target, suffix))?;
        }
    }
    rename(path, &target)?;
    Ok(target)
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn rename(from: &Path, to: &Path) -> Result<(), StoreError> {
    fs::rename(from, to).map_err(|source| StoreError::Io {
        path: from.to_owned(),
        action: "cannot move unusable database aside",
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const TEST_SCHEMA: Schema = Schema {
        application_id: 0x1234,
        migrations: &[
            "CREATE TABLE a (x INTEGER);",
            "ALTER TABLE a ADD COLUMN y TEXT;",
        ],
    };

    #[test]
    fn fresh_database_gets_current_version_private_mode_and_wal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deep/er/x.db");
        let (conn, warnings) = open(&path, &TEST_SCHEMA).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(pragma_int(&conn, "user_version").unwrap(), 2);
        assert_eq!(pragma_int(&conn, "application_id").unwrap(), 0x1234);
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let file_mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(file_mode, 0o600);
        let dir_mode = fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o700);
        conn.execute("INSERT INTO a (x, y) VALUES (1, 'z')", [])
            .unwrap();
    }

    #[test]
    fn older_version_is_migrated_in_place_keeping_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        let v1 = Schema {
            application_id: 0x1234,
            migrations: &TEST_SCHEMA.migrations[..1],
        };
        {
            let (conn, _) = open(&path, &v1).unwrap();
            conn.execute("INSERT INTO a (x) VALUES (7)", []).unwrap();
        }
        let (conn, warnings) = open(&path, &TEST_SCHEMA).unwrap();
        assert!(warnings.is_empty());
        let x: i64 = conn.query_row("SELECT x FROM a", [], |r| r.get(0)).unwrap();
        assert_eq!(x, 7);
        assert_eq!(pragma_int(&conn, "user_version").unwrap(), 2);
    }

    #[test]
    fn foreign_database_is_moved_aside_not_adopted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch("CREATE TABLE other (z); PRAGMA application_id = 99;")
                .unwrap();
        }
        let (_, warnings) = open(&path, &TEST_SCHEMA).unwrap();
        match &warnings[..] {
            [
                StoreWarning::CorruptMovedAside {
                    reason, moved_to, ..
                },
            ] => {
                assert!(reason.contains("not a Datum database"), "{reason}");
                assert!(moved_to.exists());
            }
            other => panic!("unexpected warnings {other:?}"),
        }
    }

    #[test]
    fn empty_file_left_by_a_crash_before_the_schema_is_initialised_quietly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        fs::write(&path, b"").unwrap();
        let (conn, warnings) = open(&path, &TEST_SCHEMA).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(pragma_int(&conn, "user_version").unwrap(), 2);
    }

    #[test]
    fn companions_of_a_corrupt_database_move_aside_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        // At least a page long: SQLite itself discards the WAL of a database
        // shorter than one page, so only a longer file exercises our move.
        fs::write(&path, vec![0x5a; 8192]).unwrap();
        fs::write(dir.path().join("x.db-wal"), b"old log").unwrap();
        let (conn, warnings) = open(&path, &TEST_SCHEMA).unwrap();
        let [StoreWarning::CorruptMovedAside { moved_to, .. }] = &warnings[..] else {
            panic!("{warnings:?}");
        };
        assert_eq!(fs::read(sidecar(moved_to, "-wal")).unwrap(), b"old log");
        conn.execute("INSERT INTO a (x) VALUES (1)", []).unwrap();
        drop(conn);
        // Opening again is quiet: the rebuilt database is healthy.
        let (_, warnings) = open(&path, &TEST_SCHEMA).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn permission_problem_is_an_error_and_leaves_the_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the database should be: not corruption, so it
        // must be reported, never renamed.
        let path = dir.path().join("x.db");
        fs::create_dir(&path).unwrap();
        let err = open(&path, &TEST_SCHEMA).unwrap_err();
        assert!(err.to_string().contains("x.db"), "{err}");
        assert!(path.is_dir());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
