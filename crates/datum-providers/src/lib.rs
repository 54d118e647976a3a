//! Datum's resource types, one folder per kind, and the registry that lists them.
//!
//! Adding a resource type: write a folder implementing [`Provider`], add one line
//! to [`registry`]. Nothing in the engine or the catalogue changes. The shipped
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
pub mod package;
pub mod provider;
pub mod service;
pub mod symlink;
pub mod tree;
pub mod user;
pub mod validators;

#[cfg(test)]
mod testing;

pub use provider::{
    FieldError, GateRejection, OpenGate, Provider, ProviderError, Staged, StagingGate,
};

/// Every resource type this build of Datum knows, in the order `datum` lists them.
pub fn registry() -> &'static [&'static dyn Provider] {
    &[
        &file::FileProvider,
        &directory::DirectoryProvider,
        &symlink::SymlinkProvider,
        &service::ServiceProvider,
        &package::PackageProvider,
        &tree::TreeProvider,
        &group::GroupProvider,
        &user::UserProvider,
    ]
}

/// The provider for a manifest `type:`, if there is one.
pub fn lookup(kind: &str) -> Option<&'static dyn Provider> {
    registry().iter().copied().find(|p| p.kind() == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_registered_once_under_its_name() {
        for kind in ["File", "Directory", "Symlink"] {
            assert_eq!(lookup(kind).map(|p| p.kind()), Some(kind));
        }
        assert!(lookup("file").is_none());
        let mut kinds: Vec<&str> = registry().iter().map(|p| p.kind()).collect();
        kinds.dedup();
        assert_eq!(kinds.len(), registry().len());
        assert!(lookup("File").is_some_and(|p| p.takes_content()));
        assert!(lookup("Directory").is_some_and(|p| !p.takes_content()));
    }
}
