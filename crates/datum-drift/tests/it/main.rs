//! Integration tests of datum-drift: real trees in temp dirs, scanned from disk.
//!
//! The compat golden values were computed once with the specification's reference script
//! (`bench/fingerprint_ref.py` in the shared benchmark folder) on trees built by exactly
//! these builders, owned by 0:0; the tests do not need that script to run. Every tree is
//! chowned to 0:0 explicitly, so the values hold whoever runs the tests, as long as they
//! may chown (CI runs as root).

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
// Helpers outside #[test] functions are test code too: a failed fixture step must stop
// the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers")]

mod fingerprint;
