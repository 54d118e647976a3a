//! Integration tests of datum-store: the public API against real SQLite files
//! and real folders in temporary directories, including a writer process
//! killed mid-pass.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
// Helpers outside #[test] functions are test code too: a failed fixture
// step must stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers")]

mod backup;
mod crash;
mod state;
