//! The query layer against both stores: every test body runs on the
//! embedded SQLite and on a real PostgreSQL (a fresh database each), so
//! "the same queries on both" is checked, not assumed.
//!
//! PostgreSQL comes from `DATUM_TEST_POSTGRES` (a URL to a server whose
//! `postgres` database may be used to create others; `scripts/postgres`
//! starts one and `scripts/test` exports it). Without it the PostgreSQL half
//! is skipped with a note, unless `DATUM_POSTGRES_REQUIRED=1` (CI, as root),
//! which makes its absence a failure.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is the test failing, with its message"
)]

mod api;
mod applied;
mod cache;
mod current;
mod differential;
mod init;
mod queries;
mod revisions;
mod support;
mod warnings;
