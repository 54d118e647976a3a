//! driftwatch's integration tests: one binary, one module per concern. Most tests run the
//! built binary on the fixtures under `tests/fixtures/` (written for this crate in the shape
//! of real `tofu show -json` output); `codify` drives the library with the fake runner;
//! `engine` runs everything against real terraform, the real AWS provider and moto.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through its own modules"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions panic on purpose: a failed setup is a failed test"
)]

mod canary;
mod codify;
mod corpus;
mod engine;
mod exits;
mod fleet;
mod history;
mod report;
mod run;
mod sets;
mod support;
