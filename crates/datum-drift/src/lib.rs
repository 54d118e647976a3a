//! Drift detection for `datum check`.
//!
//! Owns, so far: [`fingerprint`], the Merkle fingerprints of owned trees (scan a host tree,
//! fingerprint a declared one, compare them). Classes, schedules and reconciliation
//! policies will live beside it. Must not: apply anything to the host; detection reads,
//! and reconciliation goes through the engine's normal apply path.

pub mod fingerprint;
