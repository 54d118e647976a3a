//! What `datum check` concludes from observations: findings per resource
//! ([`findings`]) and the report built from them ([`report`]).
//!
//! The observation itself (the engine's per-pass cache, metadata-first
//! decisions, carrying out the class policies) is `crates/datum/src/checking`,
//! which can see the engine and the providers; this crate sits below the
//! catalogue (which validates `classes:` with it) and cannot.
//! Must not: read the host or the store.

pub mod findings;
pub mod report;

pub use findings::{CheckFinding, Inspected, NOT_CONVERGED, findings_for, not_converged};
pub use report::{CheckReport, CheckStats, Handling, Reported, human, json, markdown};
