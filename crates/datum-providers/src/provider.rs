//! The contract every resource type implements.
//!
//! A provider turns a resource's declared fields into observations of the host,
//! a diff, and changes. Pure steps (`check`, `diff`) never touch the host, so
//! they are tested as plain functions. Safety rules (validator lookup, what to do
//! when validation fails, blocking dependents, hiding sensitive output) belong
//! to the engine, not here: a provider only offers the staged copy to the
//! engine's [`StagingGate`] before it makes a change live.

use std::path::{Path, PathBuf};

use datum_core::{Diff, Observed, Resource};
use datum_host::{Host, HostError};

/// A problem with one declared field, found without touching the host.
/// `path` is the field path inside `desired` (`["mode"]`, `["ensure"]`), so the
/// manifest loader can point at the exact line; empty for the whole document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FieldError {
    pub path: Vec<String>,
    pub message: String,
}

impl FieldError {
    pub fn new(path: &[&str], message: impl Into<String>) -> Self {
        Self {
            path: path.iter().map(|s| (*s).to_owned()).collect(),
            message: message.into(),
        }
    }
}

/// Why the engine refused a staged copy (a validator said no, or could not run).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{summary}")]
pub struct GateRejection {
    /// One line for reports, e.g. `validation failed (sshd, exit 255)`.
    pub summary: String,
    /// Captured validator output, already bounded and already suppressed by the
    /// engine for sensitive resources.
    pub detail: Option<String>,
}

/// Something a provider could not do on the host.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("{0}")]
    Rejected(#[from] GateRejection),
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// systemd refused, or a unit did not settle (see `service`). Boxed: it
    /// carries the unit, host and systemctl output, and would make every
    /// provider's `Result` large.
    #[error(transparent)]
    Service(Box<crate::service::ServiceError>),
    /// apt or dpkg refused, or the package database is not consistent (see
    /// `package`). Boxed for the same reason as `Service`.
    #[error(transparent)]
    Package(Box<crate::package::PackageError>),
}

/// A complete staged copy, as the gate sees it: where it is (a validator is
/// pointed at that path) and exactly what was written there, so a
/// sandboxed validator can be shown those bytes rather than whatever the
/// path holds a moment later.
#[derive(Debug, Clone, Copy)]
pub struct Staged<'a> {
    pub path: &'a Path,
    pub bytes: &'a [u8],
    pub mode: u32,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// The engine's checkpoint between staging and activation.
pub trait StagingGate {
    /// Called with the complete staged copy, after owner, group and mode are
    /// set, before it replaces the live file. An error means the change must not
    /// go live: the provider removes the staged copy and returns the error.
    fn check_staged(&mut self, staged: &Staged<'_>) -> Result<(), GateRejection>;
}

/// A gate that lets everything through (resources without a validator).
pub struct OpenGate;

impl StagingGate for OpenGate {
    fn check_staged(&mut self, _staged: &Staged<'_>) -> Result<(), GateRejection> {
        Ok(())
    }
}

/// One resource type. Object-safe: the engine holds `&dyn Provider`.
pub trait Provider: Send + Sync {
    /// The manifest `type:` this provider implements (`File`).
    fn kind(&self) -> &'static str;

    /// Checks declared fields without host access: unknown fields, wrong value
    /// types, bad modes, missing required fields. Returns every problem, not
    /// just the first.
    fn check(&self, desired: &serde_json::Value) -> Result<(), Vec<FieldError>>;

    /// The JSON Schema of `desired` as written in a manifest (for editors;
    /// see `common::schema`), from the kind's declaration type.
    fn declaration_schema(&self, generator: &mut schemars::SchemaGenerator) -> schemars::Schema;

    /// Whether declarations of this type carry content (`content:`, `source:`
    /// or `template:`), which the catalogue renders into `Resource::content`.
    fn takes_content(&self) -> bool {
        false
    }

    /// Whether `validate:` means anything for this type: something is staged
    /// (content, a tree, a link) that a validator can check before it goes
    /// live. A type that stages nothing (a Directory) refuses `validate:` at
    /// compile time instead of ignoring it.
    fn takes_validator(&self) -> bool {
        true
    }

    /// Whether declarations of this type carry a folder of the repository
    /// (`source:`), which the catalogue reads and packs into
    /// `Resource::content` (see `tree::archive`). Tree only.
    fn takes_tree(&self) -> bool {
        false
    }

    /// Whether a resource of this type owns the whole folder at its
    /// declared `path`, entries included (a Tree): drift is looked for in
    /// the subtree, evidence and accepted changes are per entry, and files
    /// inside it are no other finding's. Check and the agent ask this
    /// instead of naming a kind.
    fn owns_subtree(&self) -> bool {
        false
    }

    /// Fields of `desired` whose value is sensitive whatever the resource's
    /// `sensitive:` says (a User's `password_hash`): the catalogue masks
    /// them wherever it shows a declaration, and the provider itself never
    /// puts them in an observation, a diff or an error.
    fn sensitive_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// Host paths (as declared, not yet under `--root`) this resource manages.
    fn managed_paths(&self, _resource: &Resource) -> Vec<PathBuf> {
        Vec::new()
    }

    /// Reads the current state from the host.
    fn observe(&self, host: &Host, resource: &Resource) -> Result<Observed, ProviderError>;

    /// Compares declared and observed state. Pure.
    fn diff(&self, resource: &Resource, observed: &Observed) -> Diff;

    /// Makes the host match the declaration. Content changes are staged beside
    /// the target and offered to `gate` before they go live; a failure at any
    /// step leaves the live object as it was.
    fn apply(
        &self,
        host: &Host,
        resource: &Resource,
        observed: &Observed,
        diff: &Diff,
        gate: &mut dyn StagingGate,
    ) -> Result<(), ProviderError>;

    /// Confirms the host now holds the declared state. Returns what was
    /// observed (the engine records its metadata as the last verified state)
    /// and the remaining difference (empty when converged). Providers that know
    /// more than the field set (Service) override this.
    fn verify(&self, host: &Host, resource: &Resource) -> Result<(Observed, Diff), ProviderError> {
        let observed = self.observe(host, resource)?;
        let diff = self.diff(resource, &observed);
        Ok((observed, diff))
    }
}
