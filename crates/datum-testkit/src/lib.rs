//! Test-only helpers shared by Datum's integration tests.
//!
//! [`testbed`]: the real systemd that `scripts/testbed` boots in a
//! systemd-nspawn container, and the way a test runs its body inside it (the
//! test executable re-runs itself there with `nsenter`, so code under test
//! talks to systemd directly and carries no test-only branches).
//!
//! [`apt`]: tiny Debian packages built and published as a local repository
//! inside the test bed, for Package tests that must not depend on a mirror.
//!
//! [`run`]: what one run of a built binary did (exit code, streams).
//!
//! [`fake`]: fake resource types (a registry the engine has never heard of)
//! for the engine's unit tests of its safety rules.
//!
//! [`tools`]: whether a program a test drives is installed (skip, or fail
//! when CI requires it).
//!
//! This crate is a dev-dependency only. It panics on every failed set-up step,
//! because a test that cannot set up must stop loudly; it must never be linked
//! into the `datum` binary.

#![allow(
    clippy::disallowed_methods,
    reason = "test-only crate: it builds temporary roots, repositories and packages on disk and drives real programs (dpkg-deb, apt-get, nsenter) for the tests; nothing here is part of Datum"
)]
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failed set-up step must stop the test loudly"
)]

pub mod apt;
pub mod fake;
pub mod run;
pub mod testbed;
pub mod tools;

pub use testbed::{Testbed, inside, run_inside};
