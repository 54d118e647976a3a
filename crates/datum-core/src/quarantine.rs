//! What a quarantine is (issue 5): which target is excluded from apply, who
//! put it there (which decides who may take it out), and why and since when.
//!
//! Plain data shared by the drift rules (`datum_drift::policy`, which decide
//! what a quarantine excludes), the state store (`datum_store`, which keeps
//! quarantines in `state.db` and owns how they are stored there) and the
//! commands that show and release them. Nothing here reads or writes them.

use serde::{Deserialize, Serialize};

use crate::ResourceId;

/// What is excluded from apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuarantineTarget {
    Resource(ResourceId),
    /// The whole host (a class whose policy quarantines the host).
    Host,
}

/// Who put something in quarantine: it decides who may take it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuarantineSource {
    /// A person (break-glass): no automatic action ever touches it.
    Person,
    /// A class whose policy is `quarantine`.
    Policy,
    /// Flap detection escalated a resource that kept drifting after reverts.
    Flapping,
}

impl QuarantineSource {
    /// The word stored and reported: `person`, `policy`, `flapping`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuarantineSource::Person => "person",
            QuarantineSource::Policy => "policy",
            QuarantineSource::Flapping => "flapping",
        }
    }
}

/// One quarantined target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    pub target: QuarantineTarget,
    pub reason: String,
    pub source: QuarantineSource,
    pub since: i64,
}
