//! What `datum check` concludes from observations: findings per resource
//! ([`findings`]) and the report built from them ([`report`]).
//!
//! The observation itself (the engine's per-pass cache, metadata-first
//! decisions, the class policies that reconcile) is driven by the `datum`
//! binary's `check` command, which can see the engine and the providers;
//! this crate cannot (the Tree provider depends on it for fingerprints).
//! Must not: read the host or the store.

pub mod findings;
pub mod report;

pub use findings::{CheckFinding, Inspected, NOT_CONVERGED, findings_for, not_converged};
pub use report::{CheckReport, CheckStats, Reported, human, json, markdown};
