//! Opening a SQLite file safely: its private folder, permissions, pragmas,
//! integrity, schema migrations, and recovery from a database that cannot be
//! used (only when a person asks for it).
//!
//! Shared by the state store and the backup index so that both behave the
//! same way. This module knows nothing about the tables themselves: each
//! caller passes its [`Schema`] (an application id and an ordered list of
//! migrations).
//!
//! The database lives in one of Datum's private folders
//! (`datum_host::PrivateDir`: 0700, owned by the user running Datum, opened
//! once): the file and its `-wal`, `-shm` and `-journal` companions must be
//! regular files or absent (a planted link is an error, never a target), a
//! new file is created there with `O_EXCL`, mode 0600, before SQLite sees it,
//! and SQLite is handed the folder's link-free path with
//! `SQLITE_OPEN_NOFOLLOW`, which makes it refuse a link anywhere on the way.
//!
//! Fail closed: a database that is corrupt, foreign or from a newer Datum is
//! an error ([`StoreError::Unusable`]), never silently replaced: it holds
//! quarantines and owed reloads, which an empty database would forget.
//! [`rebuild`] moves it aside (with its companions, so a person can still
//! inspect it) and starts empty, and only the operator's `--rebuild-state`
//! calls it. This module never deletes a database.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use datum_host::PrivateDir;
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use crate::error::StoreError;

/// How long a write waits for another connection's write to finish. The
/// engine's root lock already serialises passes; this covers a reader such as
/// `datum backup list` running during an apply (WAL lets it read meanwhile,
/// but a checkpoint can still briefly need the lock).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// SQLite's page cache per connection, in KiB (its default is 2,000).
const CACHE_KIB: u32 = 512;

/// The size the write-ahead log is cut back to once SQLite starts it again
/// (`PRAGMA journal_size_limit`). A checkpoint cannot start the log again
/// while a reader holds an older snapshot, so the log grows meanwhile, and
/// SQLite never makes the file shorter unless told: the store's folder kept
/// the largest log it ever had. Twice what one checkpoint interval (1,000
/// pages) writes.
pub(crate) const JOURNAL_SIZE_LIMIT: u64 = 8 << 20;

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
    /// The file is not (or no longer) a database we can trust.
    Unusable(Unusable),
    /// Anything else (permissions, disk full, locked): report, do not touch.
    Fatal(StoreError),
}

/// Opens (creating when missing) the database `name` in `dir` with
/// `schema`. A corrupt, foreign or too-new database is
/// [`StoreError::Unusable`]: the caller stops and says how to recover.
pub(crate) fn open(
    dir: &PrivateDir,
    name: &str,
    schema: &Schema,
) -> Result<Connection, StoreError> {
    let path = refuse_links(dir, name)?;
    match try_open(dir, name, &path, schema) {
        Ok(conn) => Ok(conn),
        Err(OpenFailure::Fatal(e)) => Err(e),
        Err(OpenFailure::Unusable(Unusable(reason))) => Err(StoreError::Unusable { path, reason }),
    }
}

/// Whether the database `name` in `dir` exists and looks usable with
/// `schema`, without the integrity check an open runs (which reads every
/// page: 5 ms of a 20,000-resource store) and without creating, migrating
/// or writing anything: a regular file (no link, nor its companions), a
/// SQLite header, Datum's application id and a schema version this Datum
/// understands. For deciding whether a read-only command may keep its
/// caches beside the store; what the command then opens is checked in
/// full.
pub(crate) fn probe(dir: &PrivateDir, name: &str, schema: &Schema) -> Result<(), StoreError> {
    let path = refuse_links(dir, name)?;
    let unusable = |reason: String| StoreError::Unusable {
        path: path.clone(),
        reason,
    };
    if dir.lstat(name).map_err(host_error(&path))?.is_none() {
        return Err(unusable("there is no database".to_owned()));
    }
    match check_header(dir, name, &path) {
        Ok(()) => {}
        Err(OpenFailure::Fatal(e)) => return Err(e),
        Err(OpenFailure::Unusable(Unusable(reason))) => return Err(unusable(reason)),
    }
    let sqlite = sqlite_error(&path);
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let sqlite_path = dir.real_path().map_err(host_error(&path))?.join(name);
    let conn = Connection::open_with_flags(&sqlite_path, flags).map_err(sqlite("cannot open"))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sqlite("cannot set busy timeout"))?;
    match foreign_or_newer(&conn, schema).map_err(sqlite("cannot read"))? {
        Ok(_) => Ok(()),
        Err(why) => Err(unusable(why)),
    }
}

/// The schema version of the database `conn` and whether it is empty, or
/// why this Datum may not use it with `schema`: another program's
/// (application id), or a newer Datum's (schema version).
fn foreign_or_newer(
    conn: &Connection,
    schema: &Schema,
) -> rusqlite::Result<Result<(i64, bool), String>> {
    let app_id: i64 = pragma_int(conn, "application_id")?;
    let version: i64 = pragma_int(conn, "user_version")?;
    let empty = is_empty(conn)?;
    Ok(if !empty && app_id != i64::from(schema.application_id) {
        Err(format!("not a Datum database (application id {app_id:#x})"))
    } else if version > schema.version() {
        Err(format!(
            "schema version {version} is newer than this Datum understands ({})",
            schema.version()
        ))
    } else {
        Ok((version, empty))
    })
}

/// A SQLite failure at `path` while doing `action`, as [`StoreError`].
fn sqlite_error(
    path: &Path,
) -> impl Fn(&'static str) -> Box<dyn FnOnce(rusqlite::Error) -> StoreError> {
    let path = path.to_owned();
    move |action| {
        let path = path.clone();
        Box::new(move |source| StoreError::Sqlite {
            path,
            action,
            source,
        })
    }
}

/// A database in memory with `schema`: remembers nothing beyond the
/// connection (a report-only check whose store is unusable).
pub(crate) fn open_memory(schema: &Schema) -> Result<Connection, StoreError> {
    let sqlite = sqlite_error(Path::new(":memory:"));
    let mut conn = Connection::open_in_memory().map_err(sqlite("cannot open"))?;
    migrate(&mut conn, schema).map_err(sqlite("cannot create the schema"))?;
    Ok(conn)
}

/// Moves the database `name` in `dir` aside (to `<name>.corrupt-<unix-ts>`,
/// with its companions) and opens an empty one in its place. Only for the
/// operator's explicit `--rebuild-state`: everything the old one held is
/// forgotten. Returns the new connection and where the old file went (`None`
/// when there was none).
pub(crate) fn rebuild(
    dir: &PrivateDir,
    name: &str,
    schema: &Schema,
) -> Result<(Connection, Option<PathBuf>), StoreError> {
    let path = refuse_links(dir, name)?;
    let moved = if dir.lstat(name).map_err(host_error(&path))?.is_some() {
        Some(move_aside(dir, name)?)
    } else {
        None
    };
    // A failure right after moving the file aside is not corruption: it is
    // the environment (read-only file system, full disk).
    match try_open(dir, name, &path, schema) {
        Ok(conn) => Ok((conn, moved)),
        Err(OpenFailure::Fatal(e)) => Err(e),
        Err(OpenFailure::Unusable(Unusable(reason))) => Err(StoreError::Malformed {
            path,
            what: "freshly created database",
            detail: reason,
        }),
    }
}

fn host_error(path: &Path) -> impl FnOnce(datum_host::HostError) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Host {
        path,
        cause: Box::new(source),
    }
}

/// The database's path for SQLite, after checking that the file and its
/// companions are regular files or absent.
fn refuse_links(dir: &PrivateDir, name: &str) -> Result<PathBuf, StoreError> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let file = format!("{name}{suffix}");
        dir.require_regular_or_absent(&file)
            .map_err(host_error(&dir.file_path(&file)))?;
    }
    Ok(dir.file_path(name))
}

/// Creates `dir` (an operator-given folder) and any missing parents with mode
/// 0700, and opens it as a private folder.
pub(crate) fn private_dir(dir: &Path) -> Result<PrivateDir, StoreError> {
    match PrivateDir::open_path(dir, true) {
        Ok(Some(d)) => Ok(d),
        Ok(None) => Err(StoreError::Io {
            path: dir.to_owned(),
            action: "cannot create directory",
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        }),
        Err(source) => Err(StoreError::Host {
            path: dir.to_owned(),
            cause: Box::new(source),
        }),
    }
}

fn try_open(
    dir: &PrivateDir,
    name: &str,
    path: &Path,
    schema: &Schema,
) -> Result<Connection, OpenFailure> {
    let sqlite = |action: &'static str| {
        let path = path.to_owned();
        move |source: rusqlite::Error| classify(path, action, source)
    };
    precreate_private_file(dir, name, path).map_err(OpenFailure::Fatal)?;
    check_header(dir, name, path)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    // SQLite opens by path: the folder's link-free path as the kernel sees
    // it now, and NOFOLLOW makes SQLite refuse a link on any component.
    let sqlite_path = dir
        .real_path()
        .map_err(|e| OpenFailure::Fatal(host_error(path)(e)))?
        .join(name);
    let mut conn =
        Connection::open_with_flags(&sqlite_path, flags).map_err(sqlite("cannot open"))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sqlite("cannot set busy timeout"))?;

    // A small page cache: the integrity check and a metadata pass read
    // every page once (5 MB for a store of 20,000 resources), and each
    // page of SQLite's default 2 MB cache was fresh memory the process
    // faulted in; the b-tree's upper pages, which lookups share, stay.
    conn.execute_batch(&format!("PRAGMA cache_size = -{CACHE_KIB}"))
        .map_err(sqlite("cannot set pragmas"))?;
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

    let (version, empty) = match foreign_or_newer(&conn, schema).map_err(sqlite("cannot read"))? {
        Ok(read) => read,
        Err(why) => return Err(OpenFailure::Unusable(Unusable(why))),
    };

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
    conn.execute_batch(&format!(
        "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; \
         PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT};"
    ))
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

/// The database files (device, inode) whose header this process has read:
/// see [`check_header`].
fn headers_read() -> &'static std::sync::Mutex<std::collections::HashSet<(u64, u64)>> {
    static READ: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<(u64, u64)>>> =
        std::sync::OnceLock::new();
    READ.get_or_init(Default::default)
}

/// Rejects a non-empty file that does not start like a SQLite database
/// before SQLite opens it: once SQLite has opened a file it may act on a
/// `-wal` beside it (and deletes it when the connection closes), which would
/// destroy part of what we are about to move aside for inspection.
///
/// Read once per file and process: the descriptor this opens is closed
/// again, and closing any descriptor of a file drops every POSIX lock the
/// process holds on it, the read lock of a SQLite connection already open
/// on it included (SQLite shares its locks between its own connections,
/// but cannot see this one). A process that opened the store twice (the
/// agent asking whether its store is usable while it holds it) left its
/// connection unlocked: another process's connection closing last then
/// checkpointed and deleted the `-wal`, and what the first wrote afterwards
/// went into the deleted file, seen by nobody.
fn check_header(dir: &PrivateDir, name: &str, path: &Path) -> Result<(), OpenFailure> {
    use std::io::Read as _;
    let fatal = |source| {
        OpenFailure::Fatal(StoreError::Io {
            path: path.to_owned(),
            action: "cannot read database header",
            source,
        })
    };
    // The file's identity without a descriptor.
    let Some(stat) = dir
        .lstat(name)
        .map_err(|e| OpenFailure::Fatal(host_error(path)(e)))?
    else {
        return Ok(());
    };
    if stat.kind != datum_host::FileKind::File {
        // A directory or a device: let SQLite report it as it sees it.
        return Ok(());
    }
    let identity = (stat.meta.dev, stat.meta.inode);
    let mut read = headers_read().lock().unwrap_or_else(|e| e.into_inner());
    if read.contains(&identity) {
        return Ok(());
    }
    let Some(mut file) = dir
        .open_read(name)
        .map_err(|e| OpenFailure::Fatal(host_error(path)(e)))?
    else {
        return Ok(());
    };
    let meta = file.metadata().map_err(fatal)?;
    if !meta.is_file() {
        return Ok(());
    }
    // What was read, should the name have moved since the lstat.
    let identity = {
        use std::os::unix::fs::MetadataExt as _;
        (meta.dev(), meta.ino())
    };
    let mut head = Vec::with_capacity(SQLITE_MAGIC.len());
    file.by_ref()
        .take(SQLITE_MAGIC.len() as u64)
        .read_to_end(&mut head)
        .map_err(fatal)?;
    if head.is_empty() || head == SQLITE_MAGIC {
        // An empty file becomes this process's database next.
        read.insert(identity);
        return Ok(());
    }
    Err(OpenFailure::Unusable(Unusable(
        "file is not a database (no SQLite header)".to_owned(),
    )))
}

/// SQLite creates new files with mode 0644 (minus umask); create ours first
/// with 0600 so the state is never readable by other users, not even briefly.
/// SQLite gives the `-wal` and `-shm` files the main file's mode.
fn precreate_private_file(dir: &PrivateDir, name: &str, path: &Path) -> Result<(), StoreError> {
    match dir.create_new(name, 0o600) {
        Ok(_) => Ok(()),
        Err(datum_host::HostError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::AlreadyExists =>
        {
            Ok(())
        }
        Err(datum_host::HostError::Io { source, .. }) => Err(StoreError::Io {
            path: path.to_owned(),
            action: "cannot create database file",
            source,
        }),
        Err(e) => Err(host_error(path)(e)),
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

/// Renames `name` to `name.corrupt-<unix-ts>` (with a counter if that
/// exists) and its `-wal`, `-shm` and `-journal` companions alongside, all
/// inside `dir`. The companions must go too: a stale WAL replayed onto the
/// fresh database would bring back pages of the corrupt one.
fn move_aside(dir: &PrivateDir, name: &str) -> Result<PathBuf, StoreError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let exists = |n: &str| dir.lstat(n).ok().flatten().is_some();
    let target = (0u32..)
        .map(|n| {
            if n > 0 {
                format!("{name}.corrupt-{now}.{n}")
            } else {
                format!("{name}.corrupt-{now}")
            }
        })
        .find(|candidate| !exists(candidate) && !exists(&format!("{candidate}-wal")))
        .unwrap_or_else(|| format!("{name}.corrupt"));
    for suffix in ["-wal", "-shm", "-journal"] {
        let from = format!("{name}{suffix}");
        if exists(&from) {
            rename(dir, &from, &format!("{target}{suffix}"))?;
        }
    }
    rename(dir, name, &target)?;
    Ok(dir.file_path(&target))
}

fn rename(dir: &PrivateDir, from: &str, to: &str) -> Result<(), StoreError> {
    dir.rename(from, to).map_err(|e| match e {
        datum_host::HostError::Io { source, .. } => StoreError::Io {
            path: dir.file_path(from),
            action: "cannot move unusable database aside",
            source,
        },
        other => StoreError::Host {
            path: dir.file_path(from),
            cause: Box::new(other),
        },
    })
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const TEST_SCHEMA: Schema = Schema {
        application_id: 0x1234,
        migrations: &[
            "CREATE TABLE a (x INTEGER);",
            "ALTER TABLE a ADD COLUMN y TEXT;",
        ],
    };

    fn dir_at(path: &Path) -> PrivateDir {
        private_dir(path).unwrap()
    }

    #[test]
    fn fresh_database_gets_current_version_private_mode_and_wal() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("deep/er");
        let conn = open(&dir_at(&folder), "x.db", &TEST_SCHEMA).unwrap();
        let path = folder.join("x.db");
        assert_eq!(pragma_int(&conn, "user_version").unwrap(), 2);
        assert_eq!(pragma_int(&conn, "application_id").unwrap(), 0x1234);
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let file_mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(file_mode, 0o600);
        let dir_mode = fs::metadata(&folder).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        conn.execute("INSERT INTO a (x, y) VALUES (1, 'z')", [])
            .unwrap();
    }

    /// The POSIX locks this process holds on the file `path`, as the kernel
    /// lists them (`/proc/locks`: `1: POSIX ADVISORY READ PID MAJ:MIN:INODE
    /// START END`).
    fn locks_held_on(path: &Path) -> usize {
        use std::os::unix::fs::MetadataExt as _;
        let inode = fs::metadata(path).unwrap().ino();
        let me = std::process::id().to_string();
        fs::read_to_string("/proc/locks")
            .unwrap()
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(1) == Some(&"POSIX")
                    && f.get(4) == Some(&me.as_str())
                    && f.get(5)
                        .is_some_and(|id| id.rsplit(':').next() == Some(&inode.to_string()))
            })
            .count()
    }

    #[test]
    fn opening_a_database_again_keeps_the_locks_of_the_connection_already_open() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir_at(dir.path());
        let path = dir.path().join("x.db");
        let first = open(&d, "x.db", &TEST_SCHEMA).unwrap();
        let _: i64 = first
            .query_row("SELECT count(*) FROM a", [], |r| r.get(0))
            .unwrap();
        // An idle connection in WAL mode holds a read lock on the file:
        // what tells another process's last connection not to checkpoint
        // and delete the -wal while this one still writes to it.
        assert!(locks_held_on(&path) > 0, "no lock to begin with");
        // A second open (and close) in the same process, as the agent's
        // question whether its store is usable made: the header read's
        // descriptor, closed, dropped every lock of the first connection.
        drop(open(&d, "x.db", &TEST_SCHEMA).unwrap());
        assert!(
            locks_held_on(&path) > 0,
            "the first connection lost its lock"
        );
        first.execute("INSERT INTO a (x) VALUES (1)", []).unwrap();
    }

    #[test]
    fn a_probe_tells_a_usable_database_from_others_and_makes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir_at(dir.path());
        let entries = || {
            let mut names: Vec<String> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert!(probe(&d, "x.db", &TEST_SCHEMA).is_err(), "none there");
        assert_eq!(entries(), Vec::<String>::new(), "a probe creates nothing");
        fs::write(dir.path().join("x.db"), b"not a database at all").unwrap();
        assert!(probe(&d, "x.db", &TEST_SCHEMA).is_err());
        fs::remove_file(dir.path().join("x.db")).unwrap();
        drop(open(&d, "x.db", &TEST_SCHEMA).unwrap());
        probe(&d, "x.db", &TEST_SCHEMA).unwrap();
        let other = Schema {
            application_id: 0x9999,
            migrations: TEST_SCHEMA.migrations,
        };
        assert!(probe(&d, "x.db", &other).is_err(), "another program's");
        let older = Schema {
            application_id: 0x1234,
            migrations: &TEST_SCHEMA.migrations[..1],
        };
        assert!(probe(&d, "x.db", &older).is_err(), "newer than understood");
        fs::create_dir(dir.path().join("y.db")).unwrap();
        assert!(probe(&d, "y.db", &TEST_SCHEMA).is_err(), "a directory");
    }

    #[test]
    fn older_version_is_migrated_in_place_keeping_rows() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir_at(dir.path());
        let v1 = Schema {
            application_id: 0x1234,
            migrations: &TEST_SCHEMA.migrations[..1],
        };
        {
            let conn = open(&d, "x.db", &v1).unwrap();
            conn.execute("INSERT INTO a (x) VALUES (7)", []).unwrap();
        }
        let conn = open(&d, "x.db", &TEST_SCHEMA).unwrap();
        let x: i64 = conn.query_row("SELECT x FROM a", [], |r| r.get(0)).unwrap();
        assert_eq!(x, 7);
        assert_eq!(pragma_int(&conn, "user_version").unwrap(), 2);
    }

    #[test]
    fn a_foreign_or_corrupt_database_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir_at(dir.path());
        {
            let conn = Connection::open(dir.path().join("foreign.db")).unwrap();
            conn.execute_batch("CREATE TABLE other (z); PRAGMA application_id = 99;")
                .unwrap();
        }
        fs::write(dir.path().join("garbage.db"), vec![0x5a; 8192]).unwrap();
        for (name, why) in [
            ("foreign.db", "not a Datum database"),
            ("garbage.db", "not a database"),
        ] {
            let before = fs::read(dir.path().join(name)).unwrap();
            match open(&d, name, &TEST_SCHEMA) {
                Err(StoreError::Unusable { reason, path }) => {
                    assert!(reason.contains(why), "{reason}");
                    assert_eq!(path, dir.path().join(name));
                }
                Err(other) => panic!("{name}: {other}"),
                Ok(_) => panic!("{name}: opened"),
            }
            assert_eq!(
                fs::read(dir.path().join(name)).unwrap(),
                before,
                "{name} untouched"
            );
        }
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            2,
            "nothing moved or created"
        );
    }

    #[test]
    fn empty_file_left_by_a_crash_before_the_schema_is_initialised_quietly() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("x.db"), b"").unwrap();
        let conn = open(&dir_at(dir.path()), "x.db", &TEST_SCHEMA).unwrap();
        assert_eq!(pragma_int(&conn, "user_version").unwrap(), 2);
    }

    #[test]
    fn a_rebuild_moves_the_database_and_its_companions_aside() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir_at(dir.path());
        // At least a page long: SQLite itself discards the WAL of a database
        // shorter than one page, so only a longer file exercises our move.
        fs::write(dir.path().join("x.db"), vec![0x5a; 8192]).unwrap();
        fs::write(dir.path().join("x.db-wal"), b"old log").unwrap();
        let (conn, moved_to) = rebuild(&d, "x.db", &TEST_SCHEMA).unwrap();
        let moved_to = moved_to.unwrap();
        assert_eq!(fs::read(&moved_to).unwrap(), vec![0x5a; 8192]);
        let mut wal = moved_to.into_os_string();
        wal.push("-wal");
        assert_eq!(fs::read(wal).unwrap(), b"old log");
        conn.execute("INSERT INTO a (x) VALUES (1)", []).unwrap();
        drop(conn);
        // Opening again is quiet: the rebuilt database is healthy.
        open(&d, "x.db", &TEST_SCHEMA).unwrap();
    }

    #[test]
    fn a_link_where_the_database_belongs_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim");
        fs::write(&target, b"precious").unwrap();
        for name in ["x.db", "x.db-wal", "x.db-shm"] {
            let link = dir.path().join(name);
            std::os::unix::fs::symlink(&target, &link).unwrap();
            let err = open(&dir_at(dir.path()), "x.db", &TEST_SCHEMA)
                .err()
                .unwrap();
            assert!(err.to_string().contains(name), "{err}");
            fs::remove_file(&link).unwrap();
        }
        assert_eq!(fs::read(&target).unwrap(), b"precious");
    }

    #[test]
    fn permission_problem_is_an_error_and_leaves_the_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the database should be: not corruption, so it
        // must be reported, never renamed.
        let path = dir.path().join("x.db");
        fs::create_dir(&path).unwrap();
        let err = open(&dir_at(dir.path()), "x.db", &TEST_SCHEMA).unwrap_err();
        assert!(err.to_string().contains("x.db"), "{err}");
        assert!(path.is_dir());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
