//! How a resource ended its pass, in words shared by code, logs, JSON and metrics.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ResourceId;

/// The phases of a pass a failure can belong to. Validation is a step
/// inside `apply`; diffing is pure and cannot fail, so it has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Observe,
    Plan,
    Apply,
    Verify,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Observe => "observe",
            Phase::Plan => "plan",
            Phase::Apply => "apply",
            Phase::Verify => "verify",
        })
    }
}

/// Why a change was made: the declaration changed since the last verified
/// apply (intentional), or it did not and reality moved (corrective).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Intent {
    Intentional,
    Corrective,
}

/// The end state of one resource in one pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Outcome {
    Unchanged,
    /// `datum plan`: a change is pending.
    WouldChange {
        intent: Intent,
    },
    Changed {
        intent: Intent,
    },
    Failed {
        phase: Phase,
        reason: String,
    },
    Blocked {
        by: ResourceId,
    },
}

impl Outcome {
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Unchanged => "unchanged",
            Outcome::WouldChange { .. } => "would change",
            Outcome::Changed { .. } => "changed",
            Outcome::Failed { .. } => "failed",
            Outcome::Blocked { .. } => "blocked",
        }
    }
}
