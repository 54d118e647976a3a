//! Storage: the one trait both databases implement, and the value types
//! that cross it.
//!
//! The fleet's SQL is written once (in [`crate::fleet`] and
//! [`crate::ingest`]), in the subset SQLite and PostgreSQL share (`$1`
//! placeholders, `ON CONFLICT`, `RETURNING`, window functions, integers and
//! text only; [`BYTE_ORDER`] where text is ordered), so the same statements
//! and the same queries run on both and are tested on both. A [`Backend`]
//! only knows how to run statements: a transaction in [`Phases`] (the
//! statements of a phase sent together, the next phase chosen from their
//! rows: a report whose key is already stored writes nothing, a check's
//! findings are compared with the stored ones), and reads from one
//! consistent snapshot.
//!
//! - [`sqlite`]: rusqlite (bundled SQLite, the same library `datum-store`
//!   links), the embedded default: one file in the server's folder, one
//!   writer connection, WAL.
//! - [`postgres`]: tokio-postgres with a deadpool pool; the statements of a
//!   transaction are pipelined (sent without waiting for each answer).
//!
//! Migrations are versioned files (`migrations/<backend>/NNNN_*.sql`),
//! applied in order inside one transaction and recorded in
//! `schema_migrations`; a database newer than this build is refused.
//!
//! Owns: [`Backend`], [`Phases`], [`Val`], [`Stmt`], [`StoreError`],
//! [`MIGRATIONS`].
//! Must not: know what a report is.

pub mod postgres;
pub mod sqlite;

use std::borrow::Cow;
use std::future::Future;

/// A value bound to a statement or read from a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Int(i64),
    Text(String),
    /// NULL of an integer column.
    NullInt,
    /// NULL of a text column.
    NullText,
}

impl Val {
    pub fn int(&self) -> Option<i64> {
        match self {
            Val::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn text(&self) -> Option<&str> {
        match self {
            Val::Text(s) => Some(s),
            _ => None,
        }
    }

    pub fn opt_text(v: Option<&str>) -> Val {
        v.map_or(Val::NullText, |s| Val::Text(s.to_owned()))
    }

    pub fn opt_int(v: Option<i64>) -> Val {
        v.map_or(Val::NullInt, Val::Int)
    }
}

impl From<i64> for Val {
    fn from(v: i64) -> Self {
        Val::Int(v)
    }
}

impl From<u64> for Val {
    fn from(v: u64) -> Self {
        Val::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<&str> for Val {
    fn from(v: &str) -> Self {
        Val::Text(v.to_owned())
    }
}

impl From<String> for Val {
    fn from(v: String) -> Self {
        Val::Text(v)
    }
}

impl From<bool> for Val {
    fn from(v: bool) -> Self {
        Val::Int(i64::from(v))
    }
}

/// One SQL statement with its parameters (`$1`, `$2`...).
#[derive(Debug, Clone)]
pub struct Stmt {
    /// Mostly a constant; a multi-row statement is built for its row count
    /// (see [`values_rows`]), so each row count is one prepared statement.
    pub sql: Cow<'static, str>,
    pub params: Vec<Val>,
}

impl Stmt {
    pub fn new(sql: &'static str, params: Vec<Val>) -> Self {
        Stmt {
            sql: Cow::Borrowed(sql),
            params,
        }
    }

    /// A statement whose text was built at run time.
    pub fn built(sql: String, params: Vec<Val>) -> Self {
        Stmt {
            sql: Cow::Owned(sql),
            params,
        }
    }
}

/// `rows` groups of `per_row` placeholders, numbered from `$first`:
/// `($1, $2), ($3, $4)` for a multi-row `VALUES` or an `IN (...)` list.
pub fn values_rows(first: usize, per_row: usize, rows: usize) -> String {
    let mut out = String::with_capacity(rows * per_row * 5);
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        out.push('(');
        for c in 0..per_row {
            if c > 0 {
                out.push_str(", ");
            }
            out.push('$');
            out.push_str(&(first + r * per_row + c).to_string());
        }
        out.push(')');
    }
    out
}

/// What a [`Phases`] transaction does next.
#[derive(Debug)]
pub enum Step {
    /// Send these statements together (in order); their rows come back to
    /// [`Phases::next`].
    Run(Vec<Stmt>),
    /// Commit what ran.
    Commit,
    /// Undo what ran (nothing to write after all).
    Rollback,
}

/// A transaction in phases: the statements of one phase are sent together
/// (pipelined on PostgreSQL: one round trip), and the next phase is decided
/// from their rows. The plan keeps what it learns; [`Backend::phased`] hands
/// it back after the commit.
pub trait Phases: Send + 'static {
    /// The next step, given the rows of every statement of the last phase
    /// (empty before the first).
    fn next(&mut self, rows: Vec<Vec<Row>>) -> Result<Step, StoreError>;
}

/// A row: its columns in `SELECT` order.
pub type Row = Vec<Val>;

/// Why the database could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{backend}: {action}: {detail}")]
    Database {
        backend: &'static str,
        action: &'static str,
        detail: String,
    },
    #[error(
        "{backend}: the database's schema version {found} is newer than this build knows ({known})"
    )]
    TooNew {
        backend: &'static str,
        found: i64,
        known: i64,
    },
    #[error("{backend}: a row has an unexpected shape: {detail}")]
    Shape {
        backend: &'static str,
        detail: String,
    },
}

/// The versioned migrations of one backend: `(version, name, sql)`.
pub type Migrations = &'static [(i64, &'static str, &'static str)];

/// Both backends' migrations, version for version the same change.
pub struct MIGRATIONS;

impl MIGRATIONS {
    pub const SQLITE: Migrations = &[
        (
            1,
            "fleet",
            include_str!("../../migrations/sqlite/0001_fleet.sql"),
        ),
        (
            2,
            "current state",
            include_str!("../../migrations/sqlite/0002_current_state.sql"),
        ),
        (
            3,
            "web",
            include_str!("../../migrations/sqlite/0003_web.sql"),
        ),
        (
            4,
            "changed by",
            include_str!("../../migrations/sqlite/0004_changed_by.sql"),
        ),
        (
            5,
            "generation",
            include_str!("../../migrations/sqlite/0005_generation.sql"),
        ),
        (
            6,
            "cluster index in byte order",
            include_str!("../../migrations/sqlite/0006_cluster_byte_order.sql"),
        ),
        (
            7,
            "deep checks by age",
            include_str!("../../migrations/sqlite/0007_deep_checks_by_age.sql"),
        ),
        (
            8,
            "revision seq",
            include_str!("../../migrations/sqlite/0008_revision_seq.sql"),
        ),
        (
            9,
            "store id",
            include_str!("../../migrations/sqlite/0009_store_id.sql"),
        ),
        (
            10,
            "report store id",
            include_str!("../../migrations/sqlite/0010_report_store_id.sql"),
        ),
        (
            11,
            "report store id backfill",
            include_str!("../../migrations/sqlite/0011_report_store_id_backfill.sql"),
        ),
        (
            12,
            "host revisions rollout index",
            include_str!("../../migrations/sqlite/0012_host_revisions_rollout.sql"),
        ),
        (
            13,
            "host revisions by revision dropped",
            include_str!("../../migrations/sqlite/0013_host_revisions_by_revision_dropped.sql"),
        ),
    ];
    pub const POSTGRES: Migrations = &[
        (
            1,
            "fleet",
            include_str!("../../migrations/postgres/0001_fleet.sql"),
        ),
        (
            2,
            "current state",
            include_str!("../../migrations/postgres/0002_current_state.sql"),
        ),
        (
            3,
            "web",
            include_str!("../../migrations/postgres/0003_web.sql"),
        ),
        (
            4,
            "changed by",
            include_str!("../../migrations/postgres/0004_changed_by.sql"),
        ),
        (
            5,
            "generation",
            include_str!("../../migrations/postgres/0005_generation.sql"),
        ),
        (
            6,
            "cluster index in byte order",
            include_str!("../../migrations/postgres/0006_cluster_byte_order.sql"),
        ),
        (
            7,
            "deep checks by age",
            include_str!("../../migrations/postgres/0007_deep_checks_by_age.sql"),
        ),
        (
            8,
            "revision seq",
            include_str!("../../migrations/postgres/0008_revision_seq.sql"),
        ),
        (
            9,
            "store id",
            include_str!("../../migrations/postgres/0009_store_id.sql"),
        ),
        (
            10,
            "report store id",
            include_str!("../../migrations/postgres/0010_report_store_id.sql"),
        ),
        (
            11,
            "report store id backfill",
            include_str!("../../migrations/postgres/0011_report_store_id_backfill.sql"),
        ),
        (
            12,
            "host revisions rollout index",
            include_str!("../../migrations/postgres/0012_host_revisions_rollout.sql"),
        ),
        (
            13,
            "host revisions by revision dropped",
            include_str!("../../migrations/postgres/0013_host_revisions_by_revision_dropped.sql"),
        ),
    ];
}

/// What a database offers the fleet.
pub trait Backend: Clone + Send + Sync + 'static {
    /// `sqlite` or `postgres`, for messages and metrics.
    fn name(&self) -> &'static str;

    /// How many ingest transactions may run at once (see
    /// [`crate::ingest`]).
    fn writers(&self) -> usize {
        1
    }

    /// Runs `plan` in one transaction, committed (or rolled back, as the
    /// plan says) before this returns; an error rolls back everything. The
    /// plan comes back with what it learnt.
    fn phased<P: Phases>(&self, plan: P) -> impl Future<Output = Result<P, StoreError>> + Send;

    /// Runs every query on one consistent snapshot (a read-only
    /// transaction), the queries sent together; the rows of each, in order.
    fn read(
        &self,
        stmts: Vec<Stmt>,
    ) -> impl Future<Output = Result<Vec<Vec<Row>>, StoreError>> + Send;

    /// Runs every statement in one transaction.
    fn execute(&self, stmts: Vec<Stmt>) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Runs one query.
    fn rows(&self, stmt: Stmt) -> impl Future<Output = Result<Vec<Row>, StoreError>> + Send;
}

/// `sql` as SQLite takes it: `$N` placeholders written `?N` (its numbered
/// form), and `COLLATE "C"` (PostgreSQL's byte order, which the statements
/// write where an order of text must not depend on the database's locale)
/// written `COLLATE BINARY`, SQLite's name for the same order.
pub fn sqlite_dialect(sql: &str) -> String {
    let sql = sql.replace('$', "?");
    if sql.contains(BYTE_ORDER) {
        sql.replace(BYTE_ORDER, "COLLATE BINARY")
    } else {
        sql
    }
}

/// How a statement asks for text in byte order (as Rust's `str` compares,
/// and as the views sort in memory). PostgreSQL's default collation is the
/// database's, which for `en_US.UTF-8` puts `aB` before `a_b` and `B` after
/// `ab`; SQLite's default is byte order.
pub const BYTE_ORDER: &str = "COLLATE \"C\"";

#[cfg(test)]
mod tests {
    #[test]
    fn sqlite_reads_the_byte_order_and_placeholders_its_own_way() {
        assert_eq!(
            super::sqlite_dialect(
                "SELECT host FROM findings WHERE signature = $1 ORDER BY host COLLATE \"C\" LIMIT $2"
            ),
            "SELECT host FROM findings WHERE signature = ?1 ORDER BY host COLLATE BINARY LIMIT ?2"
        );
    }

    #[test]
    fn placeholders_of_several_rows_are_numbered_in_order() {
        assert_eq!(super::values_rows(3, 2, 2), "($3, $4), ($5, $6)");
        assert_eq!(super::values_rows(1, 1, 3), "($1), ($2), ($3)");
    }

    #[test]
    fn the_two_schemas_say_the_same() {
        // Same migrations, same tables and columns: only types, the id
        // column and the name of byte order differ.
        let pg = super::MIGRATIONS::POSTGRES;
        let lite = super::MIGRATIONS::SQLITE;
        assert_eq!(pg.len(), lite.len());
        for ((pv, pn, pg), (lv, ln, lite)) in pg.iter().zip(lite) {
            assert_eq!((pv, pn), (lv, ln));
            assert_eq!(normal(pg), normal(lite), "migration {pv} differs");
        }
        fn normal(s: &str) -> String {
            s.replace("BIGSERIAL PRIMARY KEY", "SERIALKEY")
                .replace("INTEGER PRIMARY KEY AUTOINCREMENT", "SERIALKEY")
                .replace("BIGINT", "INT")
                .replace("INTEGER", "INT")
                .replace("PostgreSQL", "X")
                .replace("SQLite", "X")
                .replace("sqlite/", "other/")
                .replace("postgres/", "other/")
                .replace(super::BYTE_ORDER, "COLLATE BINARY")
        }
    }
}
