//! Integration tests of datum-store: the public API against real SQLite files
//! and real folders in temporary directories, including a writer process
//! killed mid-pass.

// Helpers outside #[test] functions are test code too: a failed fixture
// step must stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers")]

mod backup;
mod crash;
mod state;
