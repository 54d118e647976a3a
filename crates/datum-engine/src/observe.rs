//! The per-pass observation cache: every resource is observed once, up front,
//! in parallel over the available cores (observation reads the host and
//! hashes content, which is most of a no-op pass), and the sequential
//! dependency-ordered loop takes its observation from here.
//!
//! An observation taken before the pass changed anything is stale for a
//! resource whose requirements changed the host in this pass (a package that
//! installed the file a File resource then manages): the loop observes such a
//! resource again instead of using this cache.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use datum_core::{Action, Diff, Observed, Presence, Resource, ResourceId};
use datum_host::Host;
use datum_host::fs::{FileKind, Stat};
use datum_providers::{Declared, Provider, ProviderError, Registry};

use crate::verified::VerifiedRecords;

/// A resource the pass visits, with its provider (looked up once) and its
/// declaration (the one the resource holds, parsed once for every pass
/// over its catalogue: `datum_core::HeldDeclaration`): what every later
/// step of the pass is handed.
pub(crate) struct Bound<'a> {
    pub provider: &'a dyn Provider,
    pub declared: Declared<'a>,
}

impl Bound<'_> {
    pub(crate) fn resource(&self) -> &Resource {
        self.declared.resource
    }
}

/// What the pass keeps of a resource between observation and its turn in
/// the loop.
enum Held<'a> {
    /// Its provider and declaration: every later step is handed them.
    Bound(Bound<'a>),
    /// Observed converged, by a kind whose declaration nothing later in the
    /// pass reads unless the resource changes (no batch, no activation):
    /// its observation may be slimmed, and the pass keeps no handle on its
    /// declaration (which frees it only for a resource that holds none: a
    /// compiled or loaded catalogue's resources keep theirs for every pass,
    /// `datum_core::HeldDeclaration`). Kept: the provider and the plan's
    /// action, to report it as it would have been reported. The rare resource that needs its
    /// declaration after all (observed again because a requirement
    /// changed, held, in a refused group) gets it again
    /// ([`Observations::redeclare`]): the one the resource holds, parsed
    /// only for a resource that holds none (built by hand, without a
    /// declaration hash).
    Converged {
        provider: &'a dyn Provider,
        action: Option<Action>,
        /// Whether the observation was reduced to presence and metadata
        /// (what the verified record needs): its fields, a few hundred bytes
        /// per file, are dropped too.
        slimmed: bool,
        /// Whether it was taken as converged by its metadata, unread (see
        /// [`Observers::trusting`]): its observation is its verified
        /// record's metadata, slimmed.
        trusted: bool,
    },
    /// Unknown kind, or a declaration that did not parse (its observation
    /// holds the error).
    Nothing,
}

/// Whether [`Observations::gather_alongside`] notes the folders of the
/// resources' paths (an apply sweeps them of staging leftovers; a plan
/// does not need them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sweep {
    Folders,
    Nothing,
}

/// One resource's observation, or why there is none.
type Observation = Result<Observed, ProviderError>;

/// One slot per resource the pass visits, in pass order; `None` once taken.
pub(crate) struct Observations<'a> {
    held: Vec<Held<'a>>,
    /// Boxed: a slot is emptied when its resource's turn comes, and an
    /// emptied slot then holds 16 bytes instead of an observation's 150 to
    /// the end of the pass (14 MB of heap at 100,000 Files; the peak RSS
    /// did not move with it, docs/benchmarks.md "Issue 17, 2026-12-05
    /// morning").
    slots: Vec<Mutex<Option<Box<Observation>>>>,
    /// The folders holding the paths of every resource visited (staging
    /// leftovers are swept there), gathered as they are declared.
    folders: BTreeSet<PathBuf>,
    /// The resources whose kind names what they manage on the host
    /// ([`datum_providers::Provider::observed_identity`]): position and
    /// identity, in pass order.
    identities: Vec<(usize, String)>,
}

/// How a pass observes its resources: everything
/// [`Observations::gather_alongside`] needs besides the resources.
pub(crate) struct Observers<'a, 's> {
    pub(crate) registry: &'a Registry,
    pub(crate) host: &'s Host,
    /// How many resources are observed at once.
    pub(crate) threads: usize,
    /// Per resource, whether an observation found converged may be reduced
    /// to what the verified record needs (see [`Held::Converged`]).
    pub(crate) slim: &'s (dyn Fn(&ResourceId) -> bool + Sync),
    pub(crate) sweep: Sweep,
    /// The verified records, and what [`Observations::look_alongside`]
    /// found at each resource's path: a resource whose regular file's
    /// metadata its record vouches for ([`VerifiedRecords::trusts`]) is
    /// taken as converged, unread. `None`: every resource is read.
    pub(crate) trusting: Option<(&'s VerifiedRecords, &'s [Option<Looked>])>,
}

/// What [`Observations::look_alongside`] found at a resource's one path: a
/// regular file, with its metadata.
pub(crate) struct Looked {
    path: PathBuf,
    stat: Stat,
}

impl<'a> Observations<'a> {
    /// Looks up, declares and observes every resource of `resources`
    /// (those a pass visits), as `observers` says. A declaration that does
    /// not parse is that resource's failed observation.
    /// The calling thread runs `alongside` first (work that must stay on it,
    /// such as a read of the state store) while the other observers start.
    pub(crate) fn gather_alongside<R>(
        observers: &Observers<'a, '_>,
        resources: &[&'a Resource],
        alongside: impl FnOnce() -> R,
    ) -> (Self, R) {
        let Observers {
            registry,
            host,
            threads,
            slim,
            sweep,
            trusting,
        } = *observers;
        // Each resource's folders travel with its result and are gathered
        // afterwards, in pass order, where neighbours mostly share a folder:
        // no lock and no set insertion (a path compared component by
        // component) per resource on the observer threads.
        let (done, beside) =
            in_parallel_alongside(resources, threads, alongside, |at, resource| {
                let provider = registry.lookup(&resource.id.kind)?;
                // Vouched for by its record: not read, nor declared again.
                if let Some((records, looked)) = trusting
                    && let Some(Some(looked)) = looked.get(at)
                    && let Some(meta) = records.trusts(at, resource, &looked.stat.meta)
                {
                    let (held, observed, parents) = trusted(provider, meta, &looked.path, sweep);
                    return Some((held, observed, parents, None));
                }
                let declared = match provider.declare(resource) {
                    Ok(declared) => declared,
                    Err(e) => return Some((Held::Nothing, Box::new(Err(e)), Vec::new(), None)),
                };
                let parents: Vec<PathBuf> = match (sweep, provider.paths()) {
                    (Sweep::Folders, Some(paths)) => paths
                        .managed_paths(&declared)
                        .iter()
                        .filter_map(|p| p.parent().map(Path::to_path_buf))
                        .collect(),
                    _ => Vec::new(),
                };
                let droppable = provider.batching().is_none() && provider.activation().is_none();
                let mut observed = provider.observe_declared(host, &declared);
                // Before a converged observation is slimmed of its fields.
                let identity = observed
                    .as_ref()
                    .ok()
                    .and_then(|o| provider.observed_identity(o));
                let held = match &mut observed {
                    Ok(o) if droppable => {
                        let diff = provider.plan(&declared, o);
                        let converged = !diff.action().is_change()
                            && diff.changes.is_empty()
                            && diff.content.is_none();
                        if converged {
                            let slimmed = slim(&resource.id);
                            if slimmed {
                                o.fields = Default::default();
                                o.content = None;
                            }
                            Held::Converged {
                                provider,
                                action: diff.action,
                                slimmed,
                                trusted: false,
                            }
                        } else {
                            Held::Bound(Bound { provider, declared })
                        }
                    }
                    _ => Held::Bound(Bound { provider, declared }),
                };
                Some((held, Box::new(observed), parents, identity))
            });
        let mut folders = BTreeSet::new();
        let mut last: Option<PathBuf> = None;
        let mut held = Vec::with_capacity(done.len());
        let mut slots = Vec::with_capacity(done.len());
        let mut identities = Vec::new();
        for (index, one) in done.into_iter().enumerate() {
            match one {
                Some((h, observed, parents, identity)) => {
                    if let Some(identity) = identity {
                        identities.push((index, identity));
                    }
                    for parent in parents {
                        if last.as_deref().map(Path::as_os_str) != Some(parent.as_os_str()) {
                            folders.insert(parent.clone());
                            last = Some(parent);
                        }
                    }
                    held.push(h);
                    slots.push(Mutex::new(Some(observed)));
                }
                None => {
                    held.push(Held::Nothing);
                    slots.push(Mutex::new(None));
                }
            }
        }
        (
            Self {
                held,
                slots,
                folders,
                identities,
            },
            beside,
        )
    }

    /// For a pass asked to trust metadata, before it observes: the path
    /// and `lstat` of each resource that could be taken as converged by its
    /// metadata (its kind owns one path, no batch or activation reads its
    /// declaration later, `observers.slim` allows it, and a regular file is
    /// there), in the order of `resources`; looked at on every core while
    /// the calling thread runs `alongside` (the verified records' read,
    /// which decides the rest).
    pub(crate) fn look_alongside<R>(
        observers: &Observers<'a, '_>,
        resources: &[&'a Resource],
        alongside: impl FnOnce() -> R,
    ) -> (Vec<Option<Looked>>, R) {
        let Observers {
            registry,
            host,
            threads,
            slim,
            ..
        } = *observers;
        // Not counted as observed (the progress bar's count): the
        // observers that follow count each resource once.
        datum_core::parallel::each_taken(resources, threads, alongside, |_, &resource| {
            let provider = registry.lookup(&resource.id.kind)?;
            let candidate = provider.batching().is_none()
                && provider.activation().is_none()
                && slim(&resource.id);
            let paths = provider.paths().filter(|_| candidate)?;
            let declared = provider.declare(resource).ok()?;
            let [path] = paths.managed_paths(&declared).try_into().ok()?;
            let stat = host.lstat(&path).ok()??;
            (stat.kind == FileKind::File).then_some(Looked { path, stat })
        })
    }

    /// The provider and declaration of the resource at `index` (`None`
    /// when its kind is unknown, its declaration did not parse, or it was
    /// observed converged and the pass kept no handle on its declaration:
    /// see [`Observations::converged`]).
    pub(crate) fn bound(&self, index: usize) -> Option<&Bound<'a>> {
        match self.held.get(index)? {
            Held::Bound(bound) => Some(bound),
            _ => None,
        }
    }

    /// The provider of the resource at `index`, bound or observed converged
    /// (`None` when its kind is unknown or its declaration did not parse).
    pub(crate) fn provider(&self, index: usize) -> Option<&'a dyn Provider> {
        match self.held.get(index)? {
            Held::Bound(bound) => Some(bound.provider),
            Held::Converged { provider, .. } => Some(*provider),
            Held::Nothing => None,
        }
    }

    /// The declarations of the resources whose index `pick` accepts,
    /// mutably: a batch writes into them what each must know of the others
    /// (see `Batches`).
    pub(crate) fn declared_mut(&mut self, pick: impl Fn(usize) -> bool) -> Vec<&mut Declared<'a>> {
        self.held
            .iter_mut()
            .enumerate()
            .filter(|(index, _)| pick(*index))
            .filter_map(|(_, held)| match held {
                Held::Bound(bound) => Some(&mut bound.declared),
                _ => None,
            })
            .collect()
    }

    /// For a resource observed converged, kept without its declaration
    /// ([`Held::Converged`]): the plan's action, as the plan gave it.
    pub(crate) fn converged(&self, index: usize) -> Option<Option<Action>> {
        match self.held.get(index)? {
            Held::Converged { action, .. } => Some(*action),
            _ => None,
        }
    }

    /// Whether the resource at `index` was taken as converged by its
    /// metadata, unread (see [`Observers::trusting`]).
    pub(crate) fn trusted(&self, index: usize) -> bool {
        matches!(
            self.held.get(index),
            Some(Held::Converged { trusted: true, .. })
        )
    }

    /// Whether the observation at `index` was slimmed (see
    /// [`Held::Converged`]): only the converged step may use it.
    pub(crate) fn slimmed(&self, index: usize) -> bool {
        matches!(
            self.held.get(index),
            Some(Held::Converged { slimmed: true, .. })
        )
    }

    /// The declaration of the resource at `index` observed converged (see
    /// [`Held::Converged`]), as the resource holds it (parsed again only
    /// when it holds none); `None` for any other.
    pub(crate) fn redeclare(&self, index: usize, resource: &'a Resource) -> Option<Bound<'a>> {
        match self.held.get(index)? {
            Held::Converged { provider, .. } => Some(Bound {
                provider: *provider,
                declared: provider.declare(resource).ok()?,
            }),
            _ => None,
        }
    }

    /// The resources of one kind that manage one object on the host under
    /// different names (an alias), by position: `(identity, positions)`,
    /// each group in pass order.
    pub(crate) fn shared(&self, resources: &[&Resource]) -> Vec<(String, Vec<usize>)> {
        let mut by: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
        for (index, identity) in &self.identities {
            if let Some(resource) = resources.get(*index) {
                by.entry((resource.id.kind.as_str(), identity.as_str()))
                    .or_default()
                    .push(*index);
            }
        }
        by.into_iter()
            .filter(|(_, at)| at.len() > 1)
            .map(|((_, identity), at)| (identity.to_owned(), at))
            .collect()
    }

    /// The folders holding the paths of the resources visited.
    pub(crate) fn folders(&self) -> &BTreeSet<PathBuf> {
        &self.folders
    }

    /// The fingerprint of the observation at `index` (`None` when it
    /// failed or was already taken), for saved plans: keyed with `key` for
    /// a `sensitive` resource (`select::sealed_fingerprint`).
    pub(crate) fn fingerprint(
        &self,
        index: usize,
        sensitive: bool,
        key: Option<&datum_core::DigestKey>,
    ) -> Option<String> {
        let slot = self.slots.get(index)?.lock().ok()?;
        match slot.as_deref()? {
            Ok(observed) => Some(crate::select::sealed_fingerprint(observed, sensitive, key)),
            Err(_) => None,
        }
    }

    /// Looks at the observation at `index` without taking it (`None` when
    /// it failed or was already taken).
    pub(crate) fn peek<T>(&self, index: usize, f: impl FnOnce(&Observed) -> T) -> Option<T> {
        let slot = self.slots.get(index)?.lock().ok()?;
        match slot.as_deref()? {
            Ok(observed) => Some(f(observed)),
            Err(_) => None,
        }
    }

    /// The observation of the resource at catalogue position `index`, once.
    pub(crate) fn take(&self, index: usize) -> Option<Result<Observed, ProviderError>> {
        self.slots
            .get(index)
            .and_then(|slot| slot.lock().ok().and_then(|mut s| s.take()))
            .map(|observed| *observed)
    }
}

/// What the pass keeps of a resource taken as converged by its metadata at
/// `path`, unread: a converged observation, slimmed, whose metadata and
/// content hash are its record's (`meta`), and the folder to sweep.
fn trusted<'a>(
    provider: &'a dyn Provider,
    meta: datum_core::FileMeta,
    path: &Path,
    sweep: Sweep,
) -> (Held<'a>, Box<Observation>, Vec<PathBuf>) {
    let observed = Observed {
        presence: Presence::Present,
        fields: Default::default(),
        content: None,
        meta: Some(meta),
    };
    let held = Held::Converged {
        provider,
        action: None,
        slimmed: true,
        trusted: true,
    };
    let parents = match sweep {
        Sweep::Folders => path.parent().map(Path::to_path_buf).into_iter().collect(),
        Sweep::Nothing => Vec::new(),
    };
    (held, Box::new(Ok(observed)), parents)
}

/// What a check learns of one resource: its observation and the plan
/// made from the same declaration (the one the resource holds, parsed in
/// the observer thread only at its first use),
/// with the provider that made them (so a caller asking for a capability
/// does not look the kind up again).
pub struct Inspection<'r> {
    pub provider: &'r dyn Provider,
    pub observed: Observed,
    pub diff: Diff,
}

impl std::fmt::Debug for Inspection<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspection")
            .field("kind", &self.provider.kind())
            .field("observed", &self.observed)
            .field("diff", &self.diff)
            .finish()
    }
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

/// Observes and plans `resources` the way a pass does (each looked up once
/// and handed the declaration it holds, in parallel over the available
/// cores), without applying
/// anything: `datum check` and the agent's watch.
pub fn inspect_all<'r>(
    registry: &'r Registry,
    resources: &[&Resource],
    host: &Host,
    content: ContentDiff,
) -> Vec<Result<Inspection<'r>, ProviderError>> {
    in_parallel(resources, datum_core::parallel::cores(), |_, resource| {
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

fn inspect<'r>(
    registry: &'r Registry,
    resource: &Resource,
    host: &Host,
    content: ContentDiff,
) -> Result<Inspection<'r>, ProviderError> {
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
    Ok(Inspection {
        provider,
        observed,
        diff,
    })
}

/// `work` on every resource, `threads` at a time (each taking the next
/// unclaimed one), results in the order of `resources`; `None` where `work`
/// gave none.
fn in_parallel<'r, T: Send>(
    resources: &[&'r Resource],
    threads: usize,
    work: impl Fn(usize, &'r Resource) -> Option<T> + Sync,
) -> Vec<Option<T>> {
    in_parallel_alongside(resources, threads, || (), work).0
}

/// [`in_parallel`], the calling thread running `alongside` before it takes
/// resources too (the other threads start at once).
fn in_parallel_alongside<'r, T: Send, R>(
    resources: &[&'r Resource],
    threads: usize,
    alongside: impl FnOnce() -> R,
    work: impl Fn(usize, &'r Resource) -> Option<T> + Sync,
) -> (Vec<Option<T>>, R) {
    datum_core::parallel::each_taken(resources, threads, alongside, |at, &resource| {
        let done = work(at, resource);
        datum_core::progress::observed();
        done
    })
}
