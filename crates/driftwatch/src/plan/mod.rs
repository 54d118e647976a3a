//! The plan as driftwatch sees it, after parsing.
//!
//! [`parse`] reads `tofu show -json` output into the types below. They hold what the
//! classifier needs and nothing else: addresses, actions, `replace_paths`, and for drift the
//! attribute differences with secrets already removed. Values that were marked sensitive or
//! have secret-looking names never reach these types.

pub mod parse;
mod raw;
mod stream;
mod structural;

use serde_json::Value;

use crate::flatten::Path;

pub use parse::{PlanError, PlanRole, check_refreshed, parse_plan, parse_reader, read_plan_file};

/// What a `resource_changes` or `resource_drift` entry says will happen (or happened).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    NoOp,
    Create,
    Read,
    Update,
    Delete,
    /// `["delete","create"]` or `["create","delete"]`: destroy and recreate.
    Replace,
    /// `["forget"]` and the forget+create combinations (a `removed` block).
    Forget,
    /// A combination this version does not know; reported, never guessed at.
    Other(String),
}

impl Action {
    pub fn from_actions<S: AsRef<str>>(actions: &[S]) -> Action {
        let has = |name: &str| actions.iter().any(|a| a.as_ref() == name);
        match actions {
            [one] => match one.as_ref() {
                "no-op" => Action::NoOp,
                "create" => Action::Create,
                "read" => Action::Read,
                "update" => Action::Update,
                "delete" => Action::Delete,
                "forget" => Action::Forget,
                other => Action::Other(other.to_owned()),
            },
            _ if has("delete") && has("create") => Action::Replace,
            _ if has("forget") => Action::Forget,
            _ => Action::Other(
                actions
                    .iter()
                    .map(|a| a.as_ref())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        }
    }

    /// The word used in reports and JSON.
    pub fn as_str(&self) -> &str {
        match self {
            Action::NoOp => "no-op",
            Action::Create => "create",
            Action::Read => "read",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Replace => "replace",
            Action::Forget => "forget",
            Action::Other(s) => s,
        }
    }
}

/// One changed leaf. `before`/`after` are `None` when the leaf is secret, and `null` when
/// the leaf is absent on that side.
#[derive(Debug, Clone, PartialEq)]
pub struct LeafDiff {
    pub path: Path,
    pub before: Option<Value>,
    pub after: Option<Value>,
    pub sensitive: bool,
}

/// A managed resource instance that changed outside OpenTofu (`resource_drift`).
#[derive(Debug, Clone, PartialEq)]
pub struct DriftEntry {
    pub address: String,
    pub previous_address: Option<String>,
    pub action: Action,
    /// Empty for deletes; for updates, every leaf whose value differs.
    pub diffs: Vec<LeafDiff>,
}

/// What the plan will do to one managed resource instance (`resource_changes`).
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeEntry {
    pub address: String,
    pub previous_address: Option<String>,
    pub action: Action,
    pub action_reason: Option<String>,
    /// Set when the entry is about a deposed object left by `create_before_destroy`.
    pub deposed: bool,
    /// An `import` block adopts this object.
    pub importing: bool,
    pub replace_paths: Vec<Path>,
    /// Paths whose value changes (updates and replaces only; values are not kept).
    pub changed_paths: Vec<Path>,
    /// Paths whose value is known only after apply (`after_unknown`; updates and replaces
    /// only). They are left out of `changed_paths`, but the apply does set them.
    pub unknown_paths: Vec<Path>,
}

/// A parsed plan: only managed resources, secrets removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The file name or label used in messages.
    pub source: String,
    /// Which of the two plans it was read as.
    pub role: PlanRole,
    pub format_version: String,
    /// Terraform's `complete: false` (a partial plan by design).
    pub incomplete: bool,
    pub drift: Vec<DriftEntry>,
    pub changes: Vec<ChangeEntry>,
    /// Data sources and ephemeral resources found in `resource_drift` and skipped.
    pub skipped_drift: usize,
    /// No-op `resource_changes` entries of a document read as the refresh-only plan (real
    /// refresh-only plans have none); counted, not kept.
    pub listed_no_ops: usize,
    /// Checkable objects whose status is `fail` or `error` (addresses only).
    pub failed_checks: Vec<String>,
}
