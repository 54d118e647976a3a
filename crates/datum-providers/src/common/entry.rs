//! The typed side of the providers whose resource is one entry of the file
//! system at a declared path (File, Directory, Symlink), and the blanket
//! impl that makes each of them a [`Provider`] for the engine.
//!
//! What the three share lives once, here: parse the declaration, map its
//! path under the root, look at what is there without following a link (an
//! absent entry is an absent observation), compare only a declaration that
//! parses, and dispatch apply by action (nothing, remove, or converge) on the
//! entry as the boundary reached it (`Host::locate`: its parent open,
//! reached without following a link; a parent link or an unsafe ownership
//! transition is an error naming it, for observe as much as for apply). A type writes only what differs: its field
//! checks, what it reads from an entry that is there, the pure diff, and how
//! it converges and removes. Must not: run validators or keep backups (the
//! engine does, see [`Provider`]).

use std::path::{Path, PathBuf};

use datum_core::{Action, Diff, Observed, Resource};
use datum_host::fs::Stat;
use datum_host::{Host, Located};
use serde_json::Value;

use crate::{
    DeclaredMeta, FieldError, FieldLookup, OwnsPaths, PathClaim, Provider, ProviderError,
    StagingGate,
};

/// A declaration naming one path.
pub trait EntryDesired: Sized {
    /// The typed declaration (fields already checked by the catalogue).
    fn from_resource(resource: &Resource) -> Result<Self, ProviderError>;
    /// The declared path (as on the managed machine, not under the root).
    fn path(&self) -> &Path;
}

/// A resource type that is one file-system entry at a declared path.
pub trait EntryProvider: Send + Sync {
    type Desired: EntryDesired;
    /// The manifest `type:`.
    const KIND: &'static str;
    /// The declaration as written in a manifest, for its JSON Schema
    /// (see [`Provider::declaration_schema`]).
    type Declaration: schemars::JsonSchema;
    /// Whether declarations carry content (see [`Provider::takes_content`]).
    const TAKES_CONTENT: bool = false;
    /// Whether `validate:` applies (see [`Provider::takes_validator`]).
    const TAKES_VALIDATOR: bool = true;
    /// Whether the entry is a folder whose declared contents are ordered
    /// after it (see [`PathClaim::holds_children`]).
    const HOLDS_CHILDREN: bool = false;
    /// The mode of an entry created without a declared `mode`.
    const DEFAULT_MODE: u32;

    /// Checks declared fields without host access (see [`Provider::check`]).
    fn check_fields(desired: &Value) -> Result<(), Vec<FieldError>>;

    /// Observes the entry at `at`, which exists and whose `lstat` is `stat`.
    fn observe_present(
        host: &Host,
        d: &Self::Desired,
        at: &Located,
        stat: Stat,
    ) -> Result<Observed, ProviderError>;

    /// Compares declared and observed state. Pure.
    fn diff(d: &Self::Desired, observed: &Observed) -> Diff;

    /// Creates, updates or replaces the entry at `at` so that it matches `d`.
    fn converge(
        host: &Host,
        d: &Self::Desired,
        at: &Located,
        diff: &Diff,
        gate: &mut dyn StagingGate,
    ) -> Result<(), ProviderError>;

    /// Removes the entry at `at` (declared `ensure: absent`).
    fn remove(host: &Host, at: &Located) -> Result<(), ProviderError>;
}

impl<T: EntryProvider> Provider for T {
    fn kind(&self) -> &'static str {
        T::KIND
    }

    fn check(&self, desired: &Value) -> Result<(), Vec<FieldError>> {
        T::check_fields(desired)
    }

    fn declaration_schema(&self, generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <T::Declaration as schemars::JsonSchema>::json_schema(generator)
    }

    fn takes_content(&self) -> bool {
        T::TAKES_CONTENT
    }

    fn takes_validator(&self) -> bool {
        T::TAKES_VALIDATOR
    }

    fn paths(&self) -> Option<&dyn OwnsPaths> {
        Some(self)
    }

    fn observe(&self, host: &Host, resource: &Resource) -> Result<Observed, ProviderError> {
        let d = T::Desired::from_resource(resource)?;
        // A missing parent: nothing can be there.
        let Some(at) = host.try_locate(d.path())? else {
            return Ok(Observed::absent());
        };
        match at.lstat()? {
            Some(stat) => T::observe_present(host, &d, &at, stat),
            None => Ok(Observed::absent()),
        }
    }

    fn diff(&self, resource: &Resource, observed: &Observed) -> Diff {
        // `observe` has already refused a declaration that does not parse.
        match T::Desired::from_resource(resource) {
            Ok(d) => T::diff(&d, observed),
            Err(_) => Diff::default(),
        }
    }

    fn apply(
        &self,
        host: &Host,
        resource: &Resource,
        _observed: &Observed,
        diff: &Diff,
        gate: &mut dyn StagingGate,
    ) -> Result<(), ProviderError> {
        let d = T::Desired::from_resource(resource)?;
        match diff.action() {
            Action::None => Ok(()),
            Action::Remove => match host.try_locate(d.path())? {
                Some(at) => T::remove(host, &at),
                None => Ok(()),
            },
            Action::Create | Action::Update | Action::Replace => {
                let at = host.locate(d.path())?;
                T::converge(host, &d, &at, diff, gate)
            }
        }
    }
}

/// Every entry type owns the one path it declares (`path:`).
impl<T: EntryProvider> OwnsPaths for T {
    fn claim<'a>(&self, field: FieldLookup<'a>) -> Option<PathClaim<'a>> {
        path_claim(field, T::HOLDS_CHILDREN)
    }

    fn managed_paths(&self, resource: &Resource) -> Vec<PathBuf> {
        T::Desired::from_resource(resource)
            .map(|d| vec![d.path().to_owned()])
            .unwrap_or_default()
    }

    fn declared_meta(&self, host: &Host, resource: &Resource) -> Result<DeclaredMeta, String> {
        Ok(crate::common::meta::declared_meta(
            host,
            &resource.desired,
            T::DEFAULT_MODE,
        ))
    }
}

/// The claim of a declaration whose `path:` names one entry and whose
/// `ensure: absent` removes it (the entry types and Tree).
pub fn path_claim<'a>(field: FieldLookup<'a>, holds_children: bool) -> Option<PathClaim<'a>> {
    let path = field("path")?.as_str()?;
    let present = field("ensure").and_then(Value::as_str) != Some("absent");
    Some(PathClaim {
        field: "path",
        path,
        present,
        holds_children,
    })
}
