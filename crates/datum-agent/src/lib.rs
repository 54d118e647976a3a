//! `datum agent`: the detection loop as a daemon.
//!
//! The agent checks each resource class on its own interval, at a phase
//! derived from the host name so a fleet does not inspect in lockstep
//! ([`schedule`]); checks the files and trees of `watch: true` classes
//! within a second of a kernel change notification ([`watch`]); runs a full
//! pass as a backstop; serves Prometheus metrics and a liveness probe over
//! HTTP ([`metrics`], [`http`]); and answers SIGTERM/SIGINT (finish the
//! resource in flight, exit 0) and SIGHUP (reload; a repository that fails
//! lint is reported and the last good catalogue keeps running) ([`daemon`]).
//!
//! What a check *is* stays outside: the daemon drives a [`ClassChecker`]
//! (`datum check` in the binary, fakes in tests). This crate must not touch
//! managed files, decide drift or policy, or print: it logs through a
//! [`daemon::Log`] the binary provides. Between checks it blocks on one
//! channel with a timeout to the next deadline: no polling loops.

pub mod check;
pub mod daemon;
pub mod http;
pub mod metrics;
pub mod schedule;
mod signals;
pub mod watch;

pub use check::{
    Cancel, CheckError, CheckReport, ClassChecker, ClassReport, ClassSpec, LoadError, Loaded,
    STATES, Scope, WatchTarget,
};
pub use daemon::{Agent, AgentConfig, Log, LogLevel};
pub use metrics::Metrics;
pub use schedule::{DEFAULT_FULL_INTERVAL, WATCH_DEBOUNCE, detection_bound, jitter_offset};
