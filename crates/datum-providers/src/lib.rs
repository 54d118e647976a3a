//! Datum's resource types, one folder per kind, and the registry that lists them.
//!
//! Adding a resource type: write a folder implementing [`Kind`] (its typed
//! declaration and the steps of a change: observe, plan, stage, validation
//! target, activate, discard, verify) and [`Capabilities`] (the optional
//! capabilities it has: paths, ordering, batching, activation, a source
//! folder, ...; empty when it has none), add one line to [`registry()`].
//! A blanket impl makes every `Kind` a [`Provider`], the
//! object-safe form the engine holds; a kind that is one entry at a path
//! implements the narrower [`common::entry::EntryProvider`] instead. Nothing in the engine or the
//! catalogue changes: they are handed a [`Registry`] and discover what a kind
//! can do through its capabilities, never by its name. The shipped
//! validators are listed, by name, in [`validators`].
//!
//! Providers reach the machine only through `datum_host`, and every managed
//! path through its boundary (`Host::locate`: the parent opened from the
//! root without following links, every operation relative to it), whose
//! errors name the path they were about; they never print, and they never
//! decide what the engine does with a failure.

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

pub mod common;
pub mod directory;
pub mod file;
pub mod group;
pub mod kind;
pub mod package;
pub mod provider;
pub mod registry;
pub mod service;
pub mod symlink;
pub mod tree;
pub mod user;
pub mod validators;

#[cfg(test)]
mod testing;

pub use kind::Kind;
pub use provider::{
    Activated, Activates, Batched, Batches, Capabilities, Declared, DeclaredMeta, EntryDifferences,
    Exclusive, ExtraDrift, ExtraFinding, ExtraFindings, FieldError, FieldLookup, FingerprintRoots,
    Fingerprints, GateRejection, KindError, OnChange, OpenGate, OrderingEdge, OrdersOthers,
    OwnsPaths, PathClaim, Planned, Provider, ProviderError, Reach, Refusal, Staged, Staging,
    StagingGate, TakesSourceFolder, WatchesWrites,
};
pub use registry::Registry;

/// The registry of every resource type this build of Datum ships, in the
/// order `datum` lists them: the one place a new kind is added. Built once;
/// the binary hands it to the catalogue and the engine.
pub fn registry() -> &'static Registry {
    static SHIPPED: std::sync::LazyLock<Registry> = std::sync::LazyLock::new(|| {
        Registry::new(vec![
            Box::new(file::FileProvider),
            Box::new(directory::DirectoryProvider),
            Box::new(symlink::SymlinkProvider),
            Box::new(service::ServiceProvider),
            Box::new(package::PackageProvider),
            Box::new(tree::TreeProvider),
            Box::new(group::GroupProvider),
            Box::new(user::UserProvider),
        ])
    });
    &SHIPPED
}

/// The shipped provider for a manifest `type:`, if there is one (shorthand
/// for `registry().lookup(kind)`, for front-ends that hold no registry).
pub fn lookup(kind: &str) -> Option<&'static dyn Provider> {
    registry().lookup(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `desired:` that is not a mapping is named by its type, through the
    /// same parser a pass uses on the catalogue's fields; a Package reads
    /// nothing written as no fields.
    #[test]
    fn a_desired_that_is_not_a_mapping_is_refused_naming_what_it_is() {
        let list = serde_json::json!([1]);
        let cases = [
            (
                user::UserDesired::parse(&list, "deploy").map(drop),
                "`desired` of a User must be a mapping, found a list",
            ),
            (
                group::GroupDesired::parse(&list, "deploy").map(drop),
                "`desired` of a Group must be a mapping, found a list",
            ),
            (
                package::PackageSpec::parse(&list, "curl").map(drop),
                "a Package's `desired` must be a mapping (name, version, state), found a list",
            ),
            (
                package::PackageSpec::parse(&serde_json::json!("x"), "curl").map(drop),
                "a Package's `desired` must be a mapping (name, version, state), found a string",
            ),
            (
                service::ServiceSpec::parse(&list, "web").map(drop),
                "a Service's `desired` must be a mapping with at least `state` or `enabled`",
            ),
        ];
        for (parsed, want) in cases {
            assert_eq!(parsed.unwrap_err()[0].message, want);
        }
        assert!(package::PackageSpec::parse(&serde_json::Value::Null, "curl").is_ok());
        assert!(package::PackageSpec::parse(&datum_core::Desired::default(), "curl").is_ok());
    }

    #[test]
    fn each_kind_is_registered_once_under_its_name() {
        for kind in ["File", "Directory", "Symlink"] {
            assert_eq!(lookup(kind).map(|p| p.kind()), Some(kind));
        }
        assert!(lookup("file").is_none());
        let mut kinds = registry().kinds();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), registry().len());
        assert!(lookup("File").is_some_and(|p| p.takes_content()));
        assert!(lookup("Directory").is_some_and(|p| !p.takes_content()));
    }
}
