//! The embedded store: one SQLite file (`fleet.db` in the server's folder).
//!
//! One connection, behind a mutex, used from tokio's blocking pool: SQLite
//! has one writer at a time anyway, and WAL lets nothing else wait on it
//! here because this process is the only user. `synchronous = NORMAL` with
//! WAL: a killed server loses nothing it acknowledged (the WAL is written
//! before the commit returns); a power cut may lose the last commits, whose
//! hosts then send them again (their outbox keeps a report until it is
//! acknowledged, and an acknowledged-then-lost report is the one case in
//! which the host does not resend; PostgreSQL with its default
//! `synchronous_commit = on` closes that gap too).
//!
//! Owns: [`SqliteBackend`]. Must not: be opened by two server processes at
//! once (the SQLite store is for one server; several servers share
//! PostgreSQL).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::types::{ToSqlOutput, Value as SqlValue, ValueRef};
use rusqlite::{Connection, OpenFlags};

use super::{Backend, Migrations, Phases, Row, Step, Stmt, StoreError, Val, sqlite_dialect};

const NAME: &str = "sqlite";

/// The size the write-ahead log is cut back to once SQLite starts it again
/// (`PRAGMA journal_size_limit`), as the host's state store does. A
/// checkpoint cannot start the log again while a reader holds an older
/// snapshot (`sqlite3 fleet.db` or a backup open during ingest), and a
/// large transaction (retention after a long stop, a migration) writes a
/// large log; SQLite reuses the file from its start but never makes it
/// shorter unless told, so the server's folder kept the largest log it
/// ever had. Twice what one checkpoint interval (1,000 pages) writes.
pub(crate) const JOURNAL_SIZE_LIMIT: u64 = 8 << 20;

/// The SQLite store.
#[derive(Clone)]
pub struct SqliteBackend {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

impl std::fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("path", &self.path)
            .finish()
    }
}

fn db_error(action: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| StoreError::Database {
        backend: NAME,
        action,
        detail: e.to_string(),
    }
}

impl SqliteBackend {
    /// Opens (creating) the database at `path` and brings its schema up to
    /// date.
    pub fn open(path: &Path, migrations: Migrations) -> Result<Self, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags).map_err(db_error("cannot open"))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(db_error("cannot set the busy timeout"))?;
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
             PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT};"
        ))
        .map_err(db_error("cannot set pragmas"))?;
        // Ingest uses a few dozen statements (multi-row ones per row count).
        conn.set_prepared_statement_cache_capacity(256);
        migrate(&mut conn, migrations)?;
        Ok(SqliteBackend {
            conn: Arc::new(Mutex::new(conn)),
            path: path.to_owned(),
        })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().map_err(|_| StoreError::Database {
                backend: NAME,
                action: "cannot use the connection",
                detail: "a previous use panicked".to_owned(),
            })?;
            f(&mut guard)
        })
        .await
        .map_err(|e| StoreError::Database {
            backend: NAME,
            action: "cannot run the query",
            detail: e.to_string(),
        })?
    }
}

fn migrate(conn: &mut Connection, migrations: Migrations) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(db_error("cannot start the migration"))?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
    )
    .map_err(db_error("cannot create schema_migrations"))?;
    let current: i64 = tx
        .query_row(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            [],
            |r| r.get(0),
        )
        .map_err(db_error("cannot read schema_migrations"))?;
    let known = migrations.last().map_or(0, |m| m.0);
    if current > known {
        return Err(StoreError::TooNew {
            backend: NAME,
            found: current,
            known,
        });
    }
    for (version, name, sql) in migrations.iter().filter(|m| m.0 > current) {
        tx.execute_batch(sql).map_err(db_error("cannot migrate"))?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, strftime('%s','now'))",
            rusqlite::params![version, name],
        )
        .map_err(db_error("cannot record the migration"))?;
    }
    tx.commit().map_err(db_error("cannot commit the migration"))
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Val::Int(i) => ToSqlOutput::Owned(SqlValue::Integer(*i)),
            Val::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Val::NullInt | Val::NullText => ToSqlOutput::Owned(SqlValue::Null),
        })
    }
}

/// Runs one statement (a query, or a write with or without `RETURNING`) and
/// collects its rows.
fn run_rows(conn: &Connection, stmt: &Stmt) -> Result<Vec<Row>, StoreError> {
    let sql = sqlite_dialect(&stmt.sql);
    let mut prepared = conn
        .prepare_cached(&sql)
        .map_err(db_error("cannot prepare"))?;
    let columns = prepared.column_count();
    let mut rows = prepared
        .query(rusqlite::params_from_iter(stmt.params.iter()))
        .map_err(db_error("cannot query"))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(db_error("cannot read a row"))? {
        let mut values = Vec::with_capacity(columns);
        for i in 0..columns {
            values.push(
                match row.get_ref(i).map_err(db_error("cannot read a column"))? {
                    ValueRef::Integer(n) => Val::Int(n),
                    ValueRef::Real(f) => Val::Int(f as i64),
                    ValueRef::Text(t) | ValueRef::Blob(t) => {
                        Val::Text(String::from_utf8_lossy(t).into_owned())
                    }
                    ValueRef::Null => Val::NullText,
                },
            );
        }
        out.push(values);
    }
    Ok(out)
}

fn run_exec(conn: &Connection, stmt: &Stmt) -> Result<(), StoreError> {
    let sql = sqlite_dialect(&stmt.sql);
    let mut prepared = conn
        .prepare_cached(&sql)
        .map_err(db_error("cannot prepare"))?;
    if prepared.readonly() || prepared.column_count() > 0 {
        // A statement with RETURNING (or a SELECT) must be stepped.
        let mut rows = prepared
            .query(rusqlite::params_from_iter(stmt.params.iter()))
            .map_err(db_error("cannot execute"))?;
        while rows.next().map_err(db_error("cannot execute"))?.is_some() {}
        return Ok(());
    }
    prepared
        .execute(rusqlite::params_from_iter(stmt.params.iter()))
        .map(|_| ())
        .map_err(db_error("cannot execute"))
}

impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn phased<P: Phases>(&self, mut plan: P) -> Result<P, StoreError> {
        self.blocking(move |conn| {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(db_error("cannot start a transaction"))?;
            let mut rows = Vec::new();
            loop {
                match plan.next(rows)? {
                    Step::Run(stmts) => {
                        rows = stmts
                            .iter()
                            .map(|s| run_rows(&tx, s))
                            .collect::<Result<_, _>>()?;
                    }
                    Step::Commit => {
                        tx.commit().map_err(db_error("cannot commit"))?;
                        return Ok(plan);
                    }
                    Step::Rollback => {
                        tx.rollback().map_err(db_error("cannot roll back"))?;
                        return Ok(plan);
                    }
                }
            }
        })
        .await
    }

    async fn read(&self, stmts: Vec<Stmt>) -> Result<Vec<Vec<Row>>, StoreError> {
        self.blocking(move |conn| {
            // One snapshot for every query (WAL: a deferred transaction
            // reads as of its first statement).
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Deferred)
                .map_err(db_error("cannot start a transaction"))?;
            let rows = stmts
                .iter()
                .map(|s| run_rows(&tx, s))
                .collect::<Result<Vec<_>, _>>()?;
            tx.commit().map_err(db_error("cannot end the read"))?;
            Ok(rows)
        })
        .await
    }

    async fn execute(&self, stmts: Vec<Stmt>) -> Result<(), StoreError> {
        self.blocking(move |conn| {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(db_error("cannot start a transaction"))?;
            for s in &stmts {
                run_exec(&tx, s)?;
            }
            tx.commit().map_err(db_error("cannot commit"))
        })
        .await
    }

    async fn rows(&self, stmt: Stmt) -> Result<Vec<Row>, StoreError> {
        self.blocking(move |conn| run_rows(conn, &stmt)).await
    }
}

#[cfg(test)]
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads the size of the log file it made in its own temp folder"
)]
mod tests {
    use super::*;

    /// A reader that holds its snapshot keeps SQLite from starting its log
    /// again, so the write-ahead log grows while it lasts; SQLite then
    /// reuses the file from its start but never makes it shorter, so the
    /// server's folder kept the largest log it ever had. It goes back to
    /// JOURNAL_SIZE_LIMIT once the reader is done.
    #[tokio::test]
    async fn the_log_shrinks_back_once_a_reader_that_held_it_is_done() {
        const SCHEMA: Migrations = &[(1, "t", "CREATE TABLE t (v TEXT NOT NULL)")];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.db");
        let backend = SqliteBackend::open(&path, SCHEMA).unwrap();
        let write = |n: usize| {
            let backend = backend.clone();
            async move {
                for _ in 0..n {
                    backend
                        .execute(vec![Stmt::new(
                            "INSERT INTO t (v) VALUES ($1)",
                            vec!["x".repeat(6000).into()],
                        )])
                        .await
                        .unwrap();
                }
            }
        };
        let reader = Connection::open(&path).unwrap();
        reader
            .execute_batch("BEGIN; SELECT count(*) FROM t;")
            .unwrap();
        write(2_000).await;
        let wal = dir.path().join("fleet.db-wal");
        let held = std::fs::metadata(&wal).unwrap().len();
        assert!(held > 3 * JOURNAL_SIZE_LIMIT, "{held}");
        reader.execute_batch("ROLLBACK").unwrap();
        drop(reader);
        write(5).await;
        let after = std::fs::metadata(&wal).unwrap().len();
        assert!(after <= JOURNAL_SIZE_LIMIT, "{held} -> {after}");
    }
}
