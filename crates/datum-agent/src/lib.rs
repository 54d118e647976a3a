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
//!
//! # Example: `--once` with a checker that finds one drifted file
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//! use std::time::Duration;
//! use datum_agent::*;
//!
//! struct OneFile;
//!
//! impl ClassChecker for OneFile {
//!     fn load(&mut self) -> Result<Loaded, LoadError> {
//!         Ok(Loaded {
//!             classes: vec![ClassSpec {
//!                 name: "critical".into(),
//!                 interval: Duration::from_secs(60),
//!                 watch: false,
//!                 policy: "report".into(),
//!             }],
//!             watch: vec![],
//!             resources: 1,
//!         })
//!     }
//!
//!     fn check(&mut self, scope: &Scope, _cancel: &Cancel) -> Result<CheckReport, CheckError> {
//!         assert_eq!(scope, &Scope::All);
//!         let class = ClassReport {
//!             states: BTreeMap::from([("drifted".to_owned(), 1)]),
//!             findings: BTreeMap::from([("changed_outside".to_owned(), 1)]),
//!             acted: BTreeMap::new(),
//!             duration: Duration::from_millis(3),
//!         };
//!         Ok(CheckReport {
//!             classes: BTreeMap::from([("critical".to_owned(), class)]),
//!             conclusion: Conclusion::Drift,
//!             ..CheckReport::default()
//!         })
//!     }
//! }
//!
//! let agent = Agent::new(AgentConfig {
//!     host: "web-01".into(),
//!     listen: None,
//!     full_interval: DEFAULT_FULL_INTERVAL,
//!     debounce: WATCH_DEBOUNCE,
//!     version: "0.1.0".into(),
//!     validators: vec![],
//!     signals: false,
//!     log: Arc::new(|_, line| eprintln!("{line}")),
//! });
//! assert_eq!(agent.run_once(&mut OneFile).unwrap(), Conclusion::Drift);
//!
//! // What `datum schedule` should print for a watched class: the debounce
//! // plus the inspection time, not the interval.
//! let watch = Detection::Watch { debounce: WATCH_DEBOUNCE };
//! let bound = detection_bound(Duration::from_secs(60), watch, Duration::from_millis(3));
//! assert_eq!(bound, Duration::from_millis(103));
//! ```

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

pub mod check;
pub mod daemon;
pub mod exposition;
pub mod http;
pub mod metrics;
pub mod schedule;
mod signals;
pub mod watch;

pub use check::{
    ACTS, Cancel, CheckError, CheckReport, ClassChecker, ClassReport, ClassSpec, Conclusion,
    LoadError, Loaded, STATES, Scope, WatchScope, WatchTarget,
};
pub use daemon::{Agent, AgentConfig, Log, LogLevel};
pub use metrics::Metrics;
pub use schedule::{
    DEFAULT_FULL_INTERVAL, Detection, WATCH_DEBOUNCE, detection_bound, jitter_offset,
};
