//! Drift detection and reconciliation as a library above the engine: what
//! `datum check` and `datum reconcile` run after loading a catalogue, and
//! what `datum agent` runs in process on the catalogue it has loaded.
//!
//! - [`run()`]: one check of a catalogue, class by class (observe through the
//!   engine, diff, findings as `datum_drift::check` words them, the
//!   policies, the history in the state store, the fleet report queued with
//!   it). Returns a [`Checked`]; never prints.
//! - [`detection`]: which resources a check reads (metadata-first classes
//!   trust a path whose metadata equals its last verified apply), and what
//!   it concludes from the store before a policy runs (`not_converged`).
//! - [`policies`]: carries out what `datum_drift::policy::decide` decided
//!   (revert through the engine's apply pass, accept with a patch,
//!   quarantine).
//! - [`extra`]: the findings a kind adds through its
//!   [`datum_providers::ExtraFindings`] capability (a Package's edited
//!   configuration files), worded as check findings.
//! - [`activation`]: reloads owed and live configurations their group
//!   validator refuses.
//! - [`attribution`]: the agent's "who changed it" (fanotify, the audit
//!   fallback), heard per resource and handed to the caller for the state
//!   store, a sensitive resource's writers without their command line.
//! - [`watch`]: the agent's check of one class or of a few resources a
//!   watch reported, one observation each, with the picture the daemon
//!   counts.
//!
//! Providers come from the [`datum_providers::Registry`] the caller hands
//! in; no kind is named here (the kind-name guard covers this crate). Must
//! not: load or compile the repository (the caller hands in the catalogue,
//! so a revert never applies a declaration that was not loaded), take the
//! root lock (the caller holds it) or print.

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

pub mod activation;
pub mod attribution;
pub mod converged;
pub mod detection;
mod error;
pub mod extra;
pub mod policies;
mod run;
pub mod watch;

pub use error::{CheckError, OpenerError};
pub use run::{Act, Checked, Checking, Options, WithoutStore, run};

/// The `command` recorded in the state store for checks.
pub const COMMAND: &str = "check";

/// Whether resources of `kind` own the whole folder at their path (the
/// provider's capability; an unknown kind owns nothing).
pub fn owns_subtree(registry: &datum_providers::Registry, kind: &str) -> bool {
    registry.lookup(kind).is_some_and(|p| p.owns_subtree())
}

/// Seconds since the Unix epoch (the state store's clock).
pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod run_tests;
