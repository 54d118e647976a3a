//! Storage: the one trait both databases implement, and the value types
//! that cross it.
//!
//! The fleet's SQL is written once (in [`crate::fleet`]), in the subset
//! SQLite and PostgreSQL share (`$1` placeholders, `ON CONFLICT`,
//! `RETURNING`, integers and text only), so the same statements and the
//! same queries run on both and are tested on both. A [`Backend`] only
//! knows how to run statements: in one transaction, in order, the first
//! one deciding whether the rest run (a report whose key is already stored
//! writes nothing).
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
//! Owns: [`Backend`], [`Val`], [`Stmt`], [`StoreError`], [`MIGRATIONS`].
//! Must not: know what a report is.

pub mod postgres;
pub mod sqlite;

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
    pub sql: &'static str,
    pub params: Vec<Val>,
}

impl Stmt {
    pub fn new(sql: &'static str, params: Vec<Val>) -> Self {
        Stmt { sql, params }
    }
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
            "web",
            include_str!("../../migrations/sqlite/0002_web.sql"),
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
            "web",
            include_str!("../../migrations/postgres/0002_web.sql"),
        ),
    ];
}

/// What a database offers the fleet.
pub trait Backend: Send + Sync + 'static {
    /// `sqlite` or `postgres`, for messages and metrics.
    fn name(&self) -> &'static str;

    /// Runs `first`, and only when it returned at least one row, `rest`, all
    /// in one transaction (committed before this returns). Returns the rows
    /// of `first`, or `None` when it returned none (nothing else ran).
    fn gated(
        &self,
        first: Stmt,
        rest: Vec<Stmt>,
    ) -> impl Future<Output = Result<Option<Vec<Row>>, StoreError>> + Send;

    /// Runs every statement in one transaction.
    fn execute(&self, stmts: Vec<Stmt>) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Runs one query.
    fn rows(&self, stmt: Stmt) -> impl Future<Output = Result<Vec<Row>, StoreError>> + Send;
}

/// `sql` with `$N` placeholders written `?N` (SQLite's numbered form).
pub fn numbered_placeholders(sql: &str) -> String {
    sql.replace('$', "?")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_two_schemas_say_the_same() {
        // Same tables and columns: only types and the id column differ.
        assert_eq!(
            super::MIGRATIONS::POSTGRES.len(),
            super::MIGRATIONS::SQLITE.len()
        );
        for (pg, lite) in super::MIGRATIONS::POSTGRES
            .iter()
            .zip(super::MIGRATIONS::SQLITE)
        {
            assert_eq!((pg.0, pg.1), (lite.0, lite.1));
            same_schema(pg.2, lite.2);
        }
    }

    fn same_schema(pg: &str, lite: &str) {
        let normal = |s: &str| {
            s.replace("BIGSERIAL PRIMARY KEY", "SERIALKEY")
                .replace("INTEGER PRIMARY KEY AUTOINCREMENT", "SERIALKEY")
                .replace("BIGINT", "INT")
                .replace("INTEGER", "INT")
                .replace("PostgreSQL", "X")
                .replace("SQLite", "X")
                .replace("sqlite/", "other/")
                .replace("postgres/", "other/")
        };
        assert_eq!(normal(pg), normal(lite));
    }
}
