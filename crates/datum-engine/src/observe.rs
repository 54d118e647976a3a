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

use datum_core::{Diff, Observed, Resource};
use datum_host::Host;
use datum_providers::{Declared, Provider, ProviderError, Registry};

/// A resource the pass visits, with its provider (looked up once) and its
/// declaration (parsed once): what every later step of the pass is handed.
pub(crate) struct Bound<'a> {
    pub provider: &'a dyn Provider,
    pub declared: Declared<'a>,
}

impl Bound<'_> {
    pub(crate) fn resource(&self) -> &Resource {
        self.declared.resource
    }
}

/// One slot per resource the pass visits, in pass order; `None` once taken.
pub(crate) struct Observations<'a> {
    bound: Vec<Option<Bound<'a>>>,
    slots: Vec<Mutex<Option<Result<Observed, ProviderError>>>>,
}

impl<'a> Observations<'a> {
    /// Looks up, declares and observes every resource of `resources`
    /// (those a pass visits), `threads` at a time. A declaration that does
    /// not parse is that resource's failed observation.
    pub(crate) fn gather_resources(
        registry: &'a Registry,
        resources: &[&'a Resource],
        host: &Host,
        threads: usize,
    ) -> Self {
        let (bound, slots) = in_parallel(resources, threads, |resource| {
            let provider = registry.lookup(&resource.id.kind)?;
            Some(match provider.declare(resource) {
                Ok(declared) => {
                    let observed = provider.observe_declared(host, &declared);
                    (Some(Bound { provider, declared }), observed)
                }
                Err(e) => (None, Err(e)),
            })
        })
        .into_iter()
        .map(|done| match done {
            Some((bound, observed)) => (bound, Mutex::new(Some(observed))),
            None => (None, Mutex::new(None)),
        })
        .unzip();
        Self { bound, slots }
    }

    /// The provider and declaration of the resource at `index` (`None`
    /// when its kind is unknown or its declaration did not parse).
    pub(crate) fn bound(&self, index: usize) -> Option<&Bound<'a>> {
        self.bound.get(index)?.as_ref()
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

/// What a check learns of one resource: its observation and the plan
/// made from the same declaration (parsed once, in the observer thread).
#[derive(Debug)]
pub struct Inspection {
    pub observed: Observed,
    pub diff: Diff,
}

/// Whether [`inspect_all`] reads both sides of a content difference back
/// for a text diff (bounded, never for a sensitive resource).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentDiff {
    /// Read them (bounded; never for a sensitive resource): a report shows them.
    Read,
    /// Checksums only: nothing shows the text.
    Skip,
}

/// Observes and plans `resources` the way a pass does (each looked up and
/// declared once, in parallel over the available cores), without applying
/// anything: `datum check` and the agent's watch.
pub fn inspect_all(
    registry: &Registry,
    resources: &[&Resource],
    host: &Host,
    content: ContentDiff,
) -> Vec<Result<Inspection, ProviderError>> {
    in_parallel(resources, default_threads(), |resource| {
        Some(inspect(registry, resource, host, content))
    })
    .into_iter()
    .map(|done| {
        done.unwrap_or_else(|| {
            Err(ProviderError::Invalid {
                field: "type".to_owned(),
                message: "no provider for this type".to_owned(),
            })
        })
    })
    .collect()
}

fn inspect(
    registry: &Registry,
    resource: &Resource,
    host: &Host,
    content: ContentDiff,
) -> Result<Inspection, ProviderError> {
    let provider = registry
        .lookup(&resource.id.kind)
        .ok_or_else(|| ProviderError::Invalid {
            field: "type".to_owned(),
            message: "no provider for this type".to_owned(),
        })?;
    let declared = provider.declare(resource)?;
    let observed = provider.observe_declared(host, &declared)?;
    let mut diff = provider.plan(&declared, &observed);
    if content == ContentDiff::Read {
        crate::pass::fill_content(&Bound { provider, declared }, &observed, &mut diff, host);
    }
    Ok(Inspection { observed, diff })
}

/// `work` on every resource, `threads` at a time (each taking the next
/// unclaimed one), results in the order of `resources`; `None` where `work`
/// gave none.
fn in_parallel<'r, T: Send>(
    resources: &[&'r Resource],
    threads: usize,
    work: impl Fn(&'r Resource) -> Option<T> + Sync,
) -> Vec<Option<T>> {
    let slots: Vec<Mutex<Option<T>>> = resources.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let worker = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(&resource) = resources.get(i) else {
                break;
            };
            let done = work(resource);
            datum_core::progress::observed();
            if let (Some(done), Ok(mut slot)) = (done, slots[i].lock()) {
                *slot = Some(done);
            }
        }
    };
    let threads = threads.clamp(1, resources.len().max(1));
    std::thread::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(worker);
        }
        worker();
    });
    slots
        .into_iter()
        .map(|slot| slot.into_inner().ok().flatten())
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
