//! The registry: which resource types a program knows, as a value.
//!
//! The catalogue and the engine are handed a [`Registry`] instead of
//! reaching for a global, so a test hands them a fake provider (see
//! `datum-testkit`) and the shipped program hands them [`crate::registry()`].
//! Must not: decide anything about a kind; it only finds providers by name.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use datum_host::{Boundary, Host};

use crate::Provider;

/// The resource types one program knows, in the order `datum` lists them.
pub struct Registry {
    providers: Vec<Box<dyn Provider>>,
    /// How many times [`Registry::lookup`] was called (a pass looks each
    /// resource's kind up once; tests hold it to that).
    lookups: AtomicUsize,
}

impl Registry {
    /// A registry of `providers`; a later provider with a kind name already
    /// listed is ignored (the first one wins, and stays the one listed).
    pub fn new(providers: Vec<Box<dyn Provider>>) -> Self {
        let mut unique: Vec<Box<dyn Provider>> = Vec::with_capacity(providers.len());
        for provider in providers {
            if !unique.iter().any(|p| p.kind() == provider.kind()) {
                unique.push(provider);
            }
        }
        Self {
            providers: unique,
            lookups: AtomicUsize::new(0),
        }
    }

    /// The provider for a manifest `type:`, if there is one.
    pub fn lookup(&self, kind: &str) -> Option<&dyn Provider> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        self.providers
            .iter()
            .find(|p| p.kind() == kind)
            .map(|p| &**p)
    }

    /// Every provider, in listing order.
    pub fn iter(&self) -> impl Iterator<Item = &dyn Provider> {
        self.providers.iter().map(|p| &**p)
    }

    /// Every kind name, in listing order.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.iter().map(|p| p.kind()).collect()
    }

    /// Tells every kind that watches writes ([`crate::WatchesWrites`])
    /// that a part of a resource went live writing the declared paths
    /// `written`: the engine calls this after each part, whatever the kind.
    pub fn after_writing(&self, host: &Host, written: &[PathBuf]) {
        for watches in self.iter().filter_map(|p| p.watches_writes()) {
            watches.after_writing(host, written);
        }
    }

    /// Whether writing the declared paths `written` may change what a later
    /// resource's staging reads, for any kind that watches writes
    /// ([`crate::WatchesWrites::changes_what_staging_reads`]).
    pub fn changes_what_staging_reads(&self, boundary: &Boundary, written: &[PathBuf]) -> bool {
        self.iter()
            .filter_map(|p| p.watches_writes())
            .any(|w| w.changes_what_staging_reads(boundary, written))
    }

    /// How many lookups by name this registry has answered so far.
    pub fn lookups(&self) -> usize {
        self.lookups.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.providers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.providers.is_empty()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.kinds()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use datum_host::Host;

    use super::Registry;
    use crate::common::account_files;

    /// The engine names no kind: it tells the registry what a resource
    /// wrote, and User and Group (in their folders) drop the pass's parsed
    /// account files when the write reaches one, and say a later staging
    /// must wait for it; a registry without them watches nothing.
    #[test]
    fn the_account_kinds_watch_writes_that_reach_the_account_files() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(
            root.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(root.path().join("etc/group"), "root:x:0:\n").unwrap();
        let host = Host::new(root.path().to_path_buf());
        let registry = crate::registry();
        let paths = |p: &str| vec![PathBuf::from(p)];

        let first = account_files::current(&host, false).unwrap();
        registry.after_writing(&host, &paths("/etc/motd"));
        assert!(Arc::ptr_eq(
            &first,
            &account_files::current(&host, false).unwrap()
        ));
        registry.after_writing(&host, &paths("/etc"));
        assert!(!Arc::ptr_eq(
            &first,
            &account_files::current(&host, false).unwrap()
        ));

        let boundary = host.boundary();
        assert!(registry.changes_what_staging_reads(boundary, &paths("/etc/passwd")));
        assert!(registry.changes_what_staging_reads(boundary, &paths("/etc")));
        assert!(!registry.changes_what_staging_reads(boundary, &paths("/etc/motd")));
        // A unit file is loaded before a unit acts, but no staging reads it.
        assert!(
            !registry.changes_what_staging_reads(boundary, &paths("/etc/systemd/system/a.service"))
        );

        let files_only = Registry::new(vec![Box::new(crate::file::FileProvider)]);
        assert!(!files_only.changes_what_staging_reads(boundary, &paths("/etc/passwd")));
    }
}
