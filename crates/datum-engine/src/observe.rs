//! The per-pass observation cache: every resource is observed once, up front,
//! in parallel over the available cores (observation reads the host and
//! hashes content, which is most of a no-op pass), and the sequential
//! dependency-ordered loop takes its observation from here.
//!
//! An observation taken before the pass changed anything is stale for a
//! resource whose requirements changed the host in this pass (a package that
//! installed the file a File resource then manages): the loop observes such a
//! resource again instead of using this cache.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use datum_core::{Observed, Resource};
use datum_host::Host;
use datum_providers::{ProviderError, Registry};

/// One slot per resource the pass visits, in pass order; `None` once taken.
pub(crate) struct Observations {
    slots: Vec<Mutex<Option<Result<Observed, ProviderError>>>>,
}

impl Observations {
    /// Observes every resource of `resources` (those a pass visits),
    /// `threads` at a time.
    pub(crate) fn gather_resources(
        registry: &Registry,
        resources: &[&Resource],
        host: &Host,
        threads: usize,
    ) -> Self {
        let slots: Vec<_> = resources.iter().map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        let work = || {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&resource) = resources.get(i) else {
                    break;
                };
                let Some(provider) = registry.lookup(&resource.id.kind) else {
                    continue;
                };
                let observed = provider.observe(host, resource);
                datum_core::progress::observed();
                if let Ok(mut slot) = slots[i].lock() {
                    *slot = Some(observed);
                }
            }
        };
        let threads = threads.clamp(1, resources.len().max(1));
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(work);
            }
            work();
        });
        Self { slots }
    }

    /// The fingerprint of the observation at `index` (`None` when it
    /// failed or was already taken), for saved plans.
    pub(crate) fn fingerprint(&self, index: usize) -> Option<String> {
        let slot = self.slots.get(index)?.lock().ok()?;
        match slot.as_ref()? {
            Ok(observed) => Some(crate::select::fingerprint(observed)),
            Err(_) => None,
        }
    }

    /// Looks at the observation at `index` without taking it (`None` when
    /// it failed or was already taken).
    pub(crate) fn peek<T>(&self, index: usize, f: impl FnOnce(&Observed) -> T) -> Option<T> {
        let slot = self.slots.get(index)?.lock().ok()?;
        match slot.as_ref()? {
            Ok(observed) => Some(f(observed)),
            Err(_) => None,
        }
    }

    /// The observation of the resource at catalogue position `index`, once.
    pub(crate) fn take(&self, index: usize) -> Option<Result<Observed, ProviderError>> {
        self.slots
            .get(index)
            .and_then(|slot| slot.lock().ok().and_then(|mut s| s.take()))
    }
}

/// Observes `resources` the way a pass does (once each, in parallel over the
/// available cores), for `datum check`, which diffs without applying.
pub fn observe_all(
    registry: &Registry,
    resources: &[&Resource],
    host: &Host,
) -> Vec<Result<Observed, ProviderError>> {
    let observations = Observations::gather_resources(registry, resources, host, default_threads());
    (0..resources.len())
        .map(|i| {
            observations.take(i).unwrap_or_else(|| {
                Err(ProviderError::Invalid {
                    field: "type".to_owned(),
                    message: "no provider for this type".to_owned(),
                })
            })
        })
        .collect()
}

/// How many observers to run: the cores, and a few more for I/O waits on a
/// cold cache (bounded: more threads than that only contend).
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
}
