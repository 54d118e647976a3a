//! Drift detection for `datum check`.
//!
//! Owns: [`classes`] (interval, content mode,
//! policy per resource class, from `datum.yaml`); [`metadata`] (metadata-first
//! evaluation); [`sampling`] (which hosts a pass reads deeply); [`check`] (findings
//! and the report); [`policy`] (quarantine sets, flap detection, accept patches) and
//! [`schedule`] (detection bounds). Must not: apply anything to the host; detection
//! reads, and reconciliation goes through the engine's normal apply path (driven by
//! the `datum` binary, since the Tree provider depends on this crate).

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

pub mod check;
pub mod classes;
pub mod metadata;
pub mod policy;
pub mod sampling;
pub mod schedule;
