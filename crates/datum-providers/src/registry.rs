//! The registry: which resource types a program knows, as a value.
//!
//! The catalogue and the engine are handed a [`Registry`] instead of
//! reaching for a global, so a test hands them a fake provider (see
//! `datum-testkit`) and the shipped program hands them [`crate::registry()`].
//! Must not: decide anything about a kind; it only finds providers by name.

use std::sync::atomic::{AtomicUsize, Ordering};

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
