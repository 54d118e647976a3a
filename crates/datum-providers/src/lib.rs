//! Datum's resource types, one folder per kind, and the registry that lists them.
//!
//! Adding a resource type: write a folder implementing [`Provider`], add one line
//! to [`registry`]. Nothing in the engine or the catalogue changes.

pub mod provider;

pub use provider::{FieldError, GateRejection, OpenGate, Provider, ProviderError, StagingGate};

/// Every resource type this build of Datum knows, in the order `datum` lists them.
pub fn registry() -> &'static [&'static dyn Provider] {
    &[]
}

/// The provider for a manifest `type:`, if there is one.
pub fn lookup(kind: &str) -> Option<&'static dyn Provider> {
    registry().iter().copied().find(|p| p.kind() == kind)
}
