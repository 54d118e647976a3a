//! CLI tests: the built `datum` binary on real repositories in temporary
//! directories, always with `--root` so nothing touches the machine's /etc.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is the test failing, with its message"
)]

mod accounts;
mod apply;
mod backup;
mod boundary;
mod config;
mod conventions;
mod crash;
mod exit_codes;
mod generate;
mod init;
mod lint;
mod sensitive;
mod snapshots;
mod state_store;
mod support;
mod targeting;
mod validation;
