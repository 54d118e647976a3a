//! Drift detection for `datum check`: the vocabulary and the pure decisions.
//!
//! Owns: [`classes`] (interval, content mode, policy per resource class,
//! from `datum.yaml`); [`sampling`] (which hosts a pass reads deeply);
//! [`check`] (findings and the report); [`policy`] (what each policy
//! decides about a drifted resource, quarantine sets, flap detection,
//! accept patches) and [`schedule`] (detection bounds). Must not: read or
//! change the host, or depend on the engine: the catalogue compiler
//! validates `classes:` with this crate, so it sits below the catalogue.
//! Running a check (observe through the engine, carry out the decisions,
//! record the history) is the `datum-check` crate, which `datum check`,
//! `datum reconcile` and the agent share. Whether a file's metadata vouches
//! for its content is `datum_core::trust` (a pass asked to trust metadata
//! decides it the same way). The Merkle fingerprints are
//! `datum-fingerprint` (scanned by `datum_host::tree_scan`).

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

pub mod check;
pub mod classes;
pub mod policy;
pub mod sampling;
pub mod schedule;
