//! The registry: which resource types a program knows, as a value.
//!
//! The catalogue and the engine are handed a [`Registry`] instead of
//! reaching for a global, so a test hands them a fake provider (see
//! `datum-testkit`) and the shipped program hands them [`crate::registry()`].
//! Must not: decide anything about a kind; it only finds providers by name.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use datum_core::Resource;
use datum_host::{Boundary, Host};

use crate::{Provider, WatchesWrites};

/// The resource types one program knows, in the order `datum` lists them.
pub struct Registry {
    providers: Vec<Box<dyn Provider>>,
    /// The providers (by place in `providers`) whose watch of writes
    /// ([`crate::Capabilities::watches_writes`]) no earlier provider
    /// returned too: User and Group return the one account files' watch,
    /// which is told of each write once, not once a kind.
    watchers: Vec<usize>,
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
        let mut watchers: Vec<usize> = Vec::new();
        for (at, provider) in unique.iter().enumerate() {
            let Some(watch) = provider.watches_writes() else {
                continue;
            };
            let seen = watchers.iter().any(|&earlier| {
                unique
                    .get(earlier)
                    .and_then(|p| p.watches_writes())
                    .is_some_and(|w| same_watch(w, watch))
            });
            if !seen {
                watchers.push(at);
            }
        }
        Self {
            providers: unique,
            watchers,
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

    /// Every distinct watch of writes, each once, in listing order (a
    /// watch two kinds return is its first kind's).
    fn watches(&self) -> impl Iterator<Item = &dyn WatchesWrites> {
        self.watchers
            .iter()
            .filter_map(|&at| self.providers.get(at)?.watches_writes())
    }

    /// Tells every kind that watches writes ([`crate::WatchesWrites`])
    /// that a part of a resource went live writing the declared paths
    /// `written`: the engine calls this after each part, whatever the kind.
    /// A watch several kinds share (User's and Group's) is told once.
    pub fn after_writing(&self, host: &Host, written: &[PathBuf]) {
        for watches in self.watches() {
            watches.after_writing(host, written);
        }
    }

    /// Whether writing the declared paths `written` may change what a later
    /// resource's staging reads, for any kind that watches writes
    /// ([`crate::WatchesWrites::changes_what_staging_reads`]).
    pub fn changes_what_staging_reads(&self, boundary: &Boundary, written: &[PathBuf]) -> bool {
        self.watches()
            .any(|w| w.changes_what_staging_reads(boundary, written))
    }

    /// The host path `resource` declares, as its kind claims it
    /// ([`crate::OwnsPaths::claim`], read from its declared fields): `None`
    /// for a kind that owns no path (a Service), a kind this registry does
    /// not know, or a declaration that claims none. Above the providers a
    /// resource's path is known this way, never by reading a field by name:
    /// each kind says which of its fields is its path. One lookup by name
    /// (counted in [`Registry::lookups`]); with the provider at hand, ask
    /// [`Registry::path_claimed`].
    pub fn path_of<'r>(&self, resource: &'r Resource) -> Option<&'r str> {
        Self::path_claimed(self.lookup(&resource.id.kind)?, resource)
    }

    /// [`Registry::path_of`] asked of `resource`'s own provider.
    pub fn path_claimed<'r>(provider: &dyn Provider, resource: &'r Resource) -> Option<&'r str> {
        let field = |name: &str| resource.desired.get(name);
        provider.paths()?.claim(&field).map(|claim| claim.path)
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

/// Whether `a` and `b` are the same watch: the same value (address) seen
/// as the same type (vtable). Not the address alone: a zero-sized watch
/// has no address of its own (a boxed zero-sized provider answering
/// `Some(self)`, as Service does, is at the same dangling address as any
/// other), so two kinds' watches would pass for one and the second would
/// never be told. Equal address and vtable make the same calls, so one of
/// them is enough; one type's vtable copied into two codegen units makes
/// them look distinct, which only tells the watch twice.
fn same_watch(a: &dyn WatchesWrites, b: &dyn WatchesWrites) -> bool {
    std::ptr::eq(a, b)
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
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    /// Fake kinds for the watch tests: `$name` of kind `$kind`, whose
    /// watch of writes is `$watch` (`self` for a kind that is its own).
    macro_rules! watching_kind {
        ($name:ident, $kind:literal, |$me:ident| $watch:expr) => {
            struct $name;

            impl crate::Capabilities for $name {
                fn watches_writes(&self) -> Option<&dyn crate::WatchesWrites> {
                    let $me = self;
                    Some($watch)
                }
            }

            impl crate::Kind for $name {
                const KIND: &'static str = $kind;
                type Declaration = ();
                type Written = serde_json::Value;
                type Staging = crate::Planned;

                fn check_fields(
                    &self,
                    _desired: &serde_json::Value,
                ) -> Result<(), Vec<crate::FieldError>> {
                    Ok(())
                }
                fn declare(
                    &self,
                    _resource: &datum_core::Resource,
                ) -> Result<(), crate::ProviderError> {
                    Ok(())
                }
                fn observe(
                    &self,
                    _: &Host,
                    _: &datum_core::Resource,
                    _: &(),
                ) -> Result<datum_core::Observed, crate::ProviderError> {
                    Ok(datum_core::Observed::absent())
                }
                fn plan(
                    &self,
                    _: &datum_core::Resource,
                    _: &(),
                    _: &datum_core::Observed,
                ) -> datum_core::Diff {
                    datum_core::Diff::default()
                }
                fn stage(
                    &self,
                    _: &Host,
                    _: &datum_core::Resource,
                    _: &(),
                    observed: &datum_core::Observed,
                    diff: &datum_core::Diff,
                ) -> Result<crate::Planned, crate::ProviderError> {
                    Ok(crate::kind::planned(observed, diff))
                }
                fn activate(
                    &self,
                    _: &Host,
                    _: &datum_core::Resource,
                    _: &(),
                    _: crate::Planned,
                ) -> Result<crate::Activated<crate::Planned>, crate::ProviderError> {
                    Ok(crate::Activated::Done)
                }
            }
        };
    }

    /// A watch that counts what it is told.
    struct Counting {
        told: AtomicUsize,
        asked: AtomicUsize,
    }

    impl Counting {
        const fn new() -> Self {
            Counting {
                told: AtomicUsize::new(0),
                asked: AtomicUsize::new(0),
            }
        }
    }

    impl crate::WatchesWrites for Counting {
        fn after_writing(&self, _host: &Host, _written: &[PathBuf]) {
            self.told.fetch_add(1, Ordering::Relaxed);
        }

        fn changes_what_staging_reads(&self, _: &datum_host::Boundary, _: &[PathBuf]) -> bool {
            self.asked.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    static SHARED: Counting = Counting::new();
    watching_kind!(SharingA, "SharingA", |_me| &SHARED);
    watching_kind!(SharingB, "SharingB", |_me| &SHARED);

    /// Two kinds that return the one watch (as User and Group return the
    /// account files' watch) have it told of each write once, and asked
    /// once, not once a kind.
    #[test]
    fn a_watch_two_kinds_share_is_told_of_each_write_once() {
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path().to_path_buf());
        let registry = Registry::new(vec![Box::new(SharingA), Box::new(SharingB)]);
        registry.after_writing(&host, &[PathBuf::from("/etc/passwd")]);
        assert_eq!(SHARED.told.load(Ordering::Relaxed), 1);
        assert!(!registry.changes_what_staging_reads(host.boundary(), &[PathBuf::from("/etc")]));
        assert_eq!(SHARED.asked.load(Ordering::Relaxed), 1);
    }

    static FIRST_OWN: Counting = Counting::new();
    static SECOND_OWN: Counting = Counting::new();
    watching_kind!(OwnFirst, "OwnFirst", |me| me);
    watching_kind!(OwnSecond, "OwnSecond", |me| me);

    impl crate::WatchesWrites for OwnFirst {
        fn after_writing(&self, host: &Host, written: &[PathBuf]) {
            FIRST_OWN.after_writing(host, written);
        }
    }

    impl crate::WatchesWrites for OwnSecond {
        fn after_writing(&self, host: &Host, written: &[PathBuf]) {
            SECOND_OWN.after_writing(host, written);
        }
    }

    /// Two kinds that are each their own watch (as Service is), of no size
    /// and boxed, so at the one dangling address: each is told, as a watch
    /// is the same only when its value and its type are.
    #[test]
    fn distinct_watches_of_no_size_are_each_told() {
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path().to_path_buf());
        let registry = Registry::new(vec![Box::new(OwnFirst), Box::new(OwnSecond)]);
        registry.after_writing(&host, &[PathBuf::from("/etc/motd")]);
        assert_eq!(FIRST_OWN.told.load(Ordering::Relaxed), 1);
        assert_eq!(SECOND_OWN.told.load(Ordering::Relaxed), 1);
    }

    /// A resource's path is the one its kind claims: for the shipped kinds
    /// that own one (File, Directory, Symlink, Tree) its `path`, present or
    /// declared absent; for the others none, and their own check refuses a
    /// `path` field, so no compiled one has one (the field read by name was
    /// `None` for them too). An unknown kind has none. One lookup each.
    #[test]
    fn the_path_of_a_resource_is_the_one_its_kind_claims() {
        use datum_core::{Resource, ResourceId};
        use serde_json::json;

        let registry = crate::registry();
        let mut owning = Vec::new();
        for provider in registry.iter() {
            let kind = provider.kind();
            for ensure in ["present", "absent"] {
                let r = Resource::new(
                    ResourceId::new(kind, "r"),
                    json!({"path": "/etc/r", "ensure": ensure}),
                );
                let before = registry.lookups();
                let found = registry.path_of(&r);
                assert_eq!(registry.lookups() - before, 1, "{kind}");
                assert_eq!(Registry::path_claimed(provider, &r), found, "{kind}");
                if provider.paths().is_some() {
                    assert_eq!(found, Some("/etc/r"), "{kind} {ensure}");
                } else {
                    assert_eq!(found, None, "{kind}");
                    let errors = provider.check(&json!({"path": "/etc/r"})).unwrap_err();
                    assert!(
                        errors.iter().any(|e| e.path == ["path"]),
                        "{kind}: {errors:?}"
                    );
                }
            }
            if provider.paths().is_some() {
                owning.push(kind);
                let without = Resource::new(ResourceId::new(kind, "r"), json!({"mode": "0644"}));
                assert_eq!(registry.path_of(&without), None, "{kind}");
            }
        }
        assert_eq!(owning, ["File", "Directory", "Symlink", "Tree"]);
        let unknown = Resource::new(ResourceId::new("Nothing", "r"), json!({"path": "/etc/r"}));
        assert_eq!(registry.path_of(&unknown), None);
    }
}
