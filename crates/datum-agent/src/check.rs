//! The agent's side of the contract with `datum check`: what the daemon asks
//! for (load the repository, check a class or some resources) and what it
//! gets back (counts by state and by finding kind, never values).
//!
//! This module owns the types only. It must not know how a check is done:
//! the binary implements [`ClassChecker`] with the catalogue, the drift
//! engine and the state store, and tests implement it with fakes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use datum_core::ResourceId;
use datum_core::exit::ExitCode;

/// One resource class as the agent schedules it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassSpec {
    /// `critical`, `normal`... (a name from `datum.yaml`, safe as a label).
    pub name: String,
    /// How often the class is checked by the clock.
    pub interval: Duration,
    /// Whether file-change notifications trigger checks between intervals.
    pub watch: bool,
    /// `report`, `revert`, `accept` or `quarantine`: for logs only; the
    /// checker applies it.
    pub policy: String,
}

/// A path whose change means a resource may have drifted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchTarget {
    pub resource: ResourceId,
    pub class: String,
    /// The path on this host (already resolved under `--root`).
    pub path: PathBuf,
    /// How the path is watched.
    pub scope: WatchScope,
}

/// What a watched path names, which decides how it is watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchScope {
    /// A folder whose whole subtree the resource owns (a Tree): watched
    /// recursively.
    Subtree,
    /// One regular file (a File): watched through its parent folder, so an
    /// atomic replace (a new inode renamed over it) is still seen, and on
    /// its own inode too, so a write through another hard link is seen.
    RegularFile,
    /// Any other single entry (a Symlink, a Directory's own entry):
    /// through its parent folder only (a watch on a link would follow it,
    /// one on a folder would see every entry).
    Entry,
}

/// What a successful (re)load of the repository gives the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    pub classes: Vec<ClassSpec>,
    /// Targets of the classes with `watch: true` only.
    pub watch: Vec<WatchTarget>,
    /// Resources in the catalogue.
    pub resources: usize,
}

/// What one check covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every class: the backstop pass (and `--once`).
    All,
    /// One class whose interval came due.
    Class(String),
    /// Resources of one watched class whose files changed.
    Resources { class: String, ids: Vec<ResourceId> },
}

impl Scope {
    /// How the scope is written in logs and in the `trigger` label.
    pub fn trigger(&self) -> &'static str {
        match self {
            Scope::All => "full",
            Scope::Class(_) => "interval",
            Scope::Resources { .. } => "watch",
        }
    }

    /// Whether a check of this scope is a complete check of each class it
    /// covers: a full pass or a class's interval check. A watch's check of
    /// the resources whose files changed is not (even where a policy then
    /// reconciles the whole class): it does not say the class's own
    /// schedule still runs, which `datum_last_check_timestamp_seconds` and
    /// `/readyz` are about.
    pub fn complete(&self) -> bool {
        !matches!(self, Scope::Resources { .. })
    }
}

/// What a class's policy can do to a resource that drifted, one word each
/// (the `action` label's values of `datum_policy_actions_total`): put it
/// back, write a patch accepting it, or try to put it back and fail. A
/// quarantine is not among them: it stays, and `datum_resources` counts it
/// until it is lifted.
pub const ACTS: [&str; 3] = ["reverted", "accepted", "revert_failed"];

/// The resource states the metrics count, one word each (also the `state`
/// label's values).
pub const STATES: [&str; 6] = [
    "converged",
    "changed",
    "failed",
    "blocked",
    "drifted",
    "quarantined",
];

/// One class after a check: the class-wide picture (a checker that looked at
/// some resources only merges them with what it knew of the others).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassReport {
    /// State word (one of [`STATES`]) -> resources.
    pub states: BTreeMap<String, u64>,
    /// Finding kind (`changed_outside`, `deleted_outside`, `type_changed`,
    /// `unmanaged`...) -> findings currently open.
    pub findings: BTreeMap<String, u64>,
    /// What the class's policy did in this check (one of [`ACTS`]) ->
    /// resources it did it to. Unlike the states, which the next check
    /// replaces (the check a revert's own write sets off, a few
    /// milliseconds later), these are counted.
    pub acted: BTreeMap<String, u64>,
    /// How long inspecting this class took in this check.
    pub duration: Duration,
}

/// What a check concluded, for `datum check`, `datum agent --once` and the
/// agent's log. It has no number of its own: it becomes an [`ExitCode`]
/// (`From`, below), and [`ExitCode::code`], the one table, gives the number
/// the process exits with, the pass's record and the fleet report carry and
/// the agent logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Conclusion {
    /// Nothing drifted, nothing quarantined, everything could be checked.
    #[default]
    Clean,
    /// Drift found or quarantines open, everything could be checked.
    Drift,
    /// Something could not be checked (or the check was cut short): what
    /// it would have found is unknown, so neither clean nor drift.
    Errors,
}

impl Conclusion {
    /// An error outweighs drift: a check that could not look at everything
    /// is never reported as clean or as drift alone.
    pub fn of(errors: bool, drift: bool) -> Conclusion {
        if errors {
            Conclusion::Errors
        } else if drift {
            Conclusion::Drift
        } else {
            Conclusion::Clean
        }
    }

    /// The exit code of this conclusion (what `datum check` exits with;
    /// its [`ExitCode::code`] is the number the pass is recorded, reported
    /// and logged with).
    pub fn exit_code(self) -> ExitCode {
        ExitCode::from(self)
    }
}

/// A check's conclusion as an exit code: drift is [`ExitCode::Changes`] (2),
/// as changes pending are; anything that could not be checked is an error
/// (1).
impl From<Conclusion> for ExitCode {
    fn from(conclusion: Conclusion) -> ExitCode {
        match conclusion {
            Conclusion::Clean => ExitCode::Clean,
            Conclusion::Drift => ExitCode::Changes,
            Conclusion::Errors => ExitCode::ERROR,
        }
    }
}

/// What one check returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// The classes this check inspected.
    pub classes: BTreeMap<String, ClassReport>,
    /// Validator name -> validations that failed during this check (a revert
    /// policy applies through validators). Counted, never described.
    pub validation_failures: BTreeMap<String, u64>,
    /// What the check concluded (`datum check`'s exit code, through
    /// [`Conclusion::exit_code`]).
    pub conclusion: Conclusion,
    /// Whether the check stopped early because it was cancelled.
    pub cancelled: bool,
    /// Classes whose check could not run at all (counted in
    /// `datum_check_errors_total`, like a check that failed as a whole).
    pub failed: u64,
    /// Parts of this check (the check itself, or a class a policy checked)
    /// whose outcome could not be written to the state store: its history,
    /// the fleet report queued with it, and what a policy did (a revert
    /// counted for flap detection) are lost. Counted in
    /// `datum_checks_unrecorded_total` and said by `/healthz`.
    pub unrecorded: u64,
    /// A watch's resources whose events were this agent's own revert
    /// writes, each found still as declared: nothing was checked (no class
    /// is in `classes`), and the agent counts and logs no check.
    pub own_writes: u64,
}

/// Asks a running check to stop after the resource in flight.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Checked by a checker between resources.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// The flag itself, for a signal handler to set.
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

/// A repository that cannot be loaded: the agent keeps running the last good
/// catalogue and reports this.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The repository has lint errors (each logged by the checker on one
    /// line, with its file and line); `first` is the first of them, as
    /// `FILE:LINE:COL: error: message` with the file's full path.
    #[error(
        "{repo}: the repository has {errors} error(s), the first {first}; keeping the last good catalogue"
    )]
    Lint {
        repo: PathBuf,
        errors: usize,
        first: String,
    },
    /// Anything else (no datum.yaml, host identity, unreadable files).
    #[error("{repo}: cannot load the repository: {source}")]
    Other {
        repo: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A check that could not run at all (a resource that fails is a result, not
/// an error).
#[derive(Debug, thiserror::Error)]
#[error("check of {scope} failed: {source}")]
pub struct CheckError {
    /// `all`, the class name, or `class (N resources)`.
    pub scope: String,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// What the agent needs from `datum check`.
pub trait ClassChecker {
    /// Compiles the repository for this host. On error the agent keeps the
    /// previous catalogue: the checker must keep it too (it is only replaced
    /// by a successful load).
    fn load(&mut self) -> Result<Loaded, LoadError>;

    /// Checks `scope`, applies each class's policy, records the check in the
    /// state store, and returns the picture of each class inspected. Stops
    /// between resources once `cancel` is set.
    fn check(&mut self, scope: &Scope, cancel: &Cancel) -> Result<CheckReport, CheckError>;

    /// The repository revision the last successful [`ClassChecker::load`]
    /// compiled (a git commit id), for `datum_repository_revision_info`;
    /// `None` when the repository is not a revision `datum pull` deployed.
    fn revision(&self) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_exits_and_is_recorded_0_clean_2_drift_1_errors() {
        // The pass record, the fleet report and the agent's log take the
        // number from the same `ExitCode::code` the process exits with.
        assert_eq!(Conclusion::Clean.exit_code(), ExitCode::Clean);
        assert_eq!(Conclusion::Clean.exit_code().code(), 0);
        assert_eq!(Conclusion::Drift.exit_code(), ExitCode::Changes);
        assert_eq!(Conclusion::Drift.exit_code().code(), 2);
        assert_eq!(Conclusion::Errors.exit_code(), ExitCode::ERROR);
        assert_eq!(Conclusion::Errors.exit_code().code(), 1);
    }

    #[test]
    fn an_error_outweighs_drift() {
        assert_eq!(Conclusion::of(true, true), Conclusion::Errors);
        assert_eq!(Conclusion::of(true, false), Conclusion::Errors);
        assert_eq!(Conclusion::of(false, true), Conclusion::Drift);
        assert_eq!(Conclusion::of(false, false), Conclusion::Clean);
    }
}
