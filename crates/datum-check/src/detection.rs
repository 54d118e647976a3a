//! Which resources a check reads, and what it concludes from the store
//! before a policy runs: content read or trusted by metadata (a regular file
//! a path-owning kind declares, whose metadata equals its last verified
//! apply), findings of resources the
//! apply loop never made match folded into one `not_converged` each, and
//! stamps no longer trusted once the content behind them differed. Must
//! not: decide a policy (that is [`crate::policies`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use datum_catalog::snapshot::Summaries;
use datum_core::{Resource, ResourceId};
use datum_drift::check::CheckFinding;
use datum_drift::classes::{ClassSpec, Classes, ContentMode};
use datum_host::Host;
use datum_store::Store;

use datum_providers::Registry;

use crate::COMMAND;
use crate::error::{CheckError, Context as _};

/// Whether this check reads content for `spec`'s resources: a full class
/// does unless sampling made this a metadata pass; a metadata class does
/// when its audit is due.
pub fn reads_content(spec: &ClassSpec, deep: bool, store: &Store) -> Result<bool, CheckError> {
    if spec.content == ContentMode::Full {
        return Ok(deep);
    }
    let Some(every) = spec.audit_every else {
        return Ok(false);
    };
    let since = store
        .inspections_since_full_content(COMMAND, &spec.name)
        .context("cannot read the inspection history")?;
    Ok(match since {
        None => true,
        Some(n) => n + 1 >= every,
    })
}

/// Whether a resource of `kind` can be trusted by its metadata: its kind
/// owns a path (`Capabilities::paths`), so when that path is a regular file
/// whose metadata equals what the last verified apply recorded, nothing it
/// declares can have changed. The store records metadata per kind; what
/// sits at the path decides the rest (a folder, a link is never trusted).
pub fn metadata_first(registry: &Registry, kind: &str) -> bool {
    registry.lookup(kind).is_some_and(|p| p.paths().is_some())
}

pub use datum_core::trust::Trust;

/// Which of the resources at `indices` are regular files whose metadata
/// equals what their last verified apply recorded (and whose declaration has
/// not changed since): those are trusted without being read (or even
/// decoded), unless the record is racy. One `lstat` each, batched per
/// directory on all cores (20,000 of them are most of a metadata pass). The
/// result is aligned with `indices`.
pub fn trusted_by_metadata(
    registry: &Registry,
    entries: &Summaries,
    indices: &[usize],
    host: &Host,
    store: &mut Store,
) -> Result<Vec<Trust>, datum_store::StoreError> {
    // Every resource of a metadata-first kind with a path is looked at (one
    // `lstat` each, batched per directory on all cores) while the store is
    // read for the records of the same declaration: the two take about as
    // long, and one without a usable record is simply not trusted.
    // Per kind (a handful), the resources by name: one string hashed per
    // resource and per store row.
    let mut kinds: Vec<(&str, HashMap<&str, usize>)> = Vec::new();
    // Which of `indices` are looked at, and their declared paths borrowed
    // from the summaries (no copy per file). A path the boundary refuses
    // (relative, not normalised) is not checked here: its `lstat` is an
    // error, so it is not trusted.
    let mut looked_at: Vec<usize> = Vec::new();
    let mut paths: Vec<&Path> = Vec::new();
    for (at, &i) in indices.iter().enumerate() {
        let Some(entry) = entries
            .get(i)
            .filter(|e| metadata_first(registry, &e.id.kind))
        else {
            continue;
        };
        let Some(declared) = entry.path else {
            continue;
        };
        let kind = entry.id.kind.as_str();
        let k = match kinds.iter().position(|(k, _)| *k == kind) {
            Some(k) => k,
            None => {
                // Room for every resource looked at (one kind, usually): a
                // map grown by doubling copies itself a dozen times.
                kinds.push((kind, HashMap::with_capacity(indices.len() - at)));
                kinds.len() - 1
            }
        };
        kinds[k].1.insert(entry.id.name.as_str(), at);
        looked_at.push(at);
        paths.push(Path::new(declared));
    }
    let mut recorded: Vec<Option<(datum_core::FileMeta, i64)>> = vec![None; indices.len()];
    // A sensitive resource's record holds its declaration hash keyed.
    let key = store.digest_key().cloned();
    let (stats, visited) = std::thread::scope(|scope| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let paths = &paths;
        // Through the boundary: a File behind a parent link is not
        // trusted (and its observation reports the link).
        let looking = scope.spawn(move || host.lstat_many(paths, threads));
        let mut visited = Ok(());
        for (kind, by_name) in &kinds {
            visited = store.visit_verified_meta(kind, |name, declaration_hash, meta, when| {
                if let Some(&at) = by_name.get(name)
                    && let declared = entries.at(indices[at]).declaration_hash
                    && (declared == declaration_hash
                        || datum_store::is_sealed_form(key.as_ref(), declaration_hash, declared))
                {
                    recorded[at] = Some((meta, when));
                }
            });
            if visited.is_err() {
                break;
            }
        }
        (looking.join().unwrap_or_default(), visited)
    });
    visited?;
    let mut trusted = vec![Trust::Read; indices.len()];
    for (&at, stat) in looked_at.iter().zip(stats) {
        trusted[at] = match (stat, &recorded[at]) {
            (Ok(Some(stat)), Some((recorded, verified_at)))
                if stat.kind == datum_host::fs::FileKind::File =>
            {
                datum_core::trust::trust(recorded, *verified_at, &stat.meta)
            }
            _ => Trust::Read,
        };
    }
    Ok(trusted)
}

/// What records again, at `now`, the verification of a resource whose
/// record was racy or whose metadata moved since ([`Trust::refreshable`])
/// and which this check read and found matching its declaration: a fresh
/// verification, as an apply's would be (the metadata observed before the
/// read, the content read matching), so the next metadata pass trusts it
/// without an apply in between. Only when that metadata is quiet at `now`,
/// the check's start: else the new record would be racy too. `None` when
/// there is nothing to record; the caller records it with
/// [`Refresh::record`] once the check may record anything.
pub fn refresh_verified(
    resource: &datum_core::Resource,
    observed: &datum_core::Observed,
    now: i64,
) -> Option<Refresh> {
    let meta = observed.meta.as_ref().filter(|m| m.sha256.is_some())?;
    meta.quiet_at(now).then(|| Refresh {
        id: resource.id.clone(),
        sensitive: resource.sensitive,
        declaration_hash: resource.declaration_hash.clone(),
        meta: meta.clone(),
        at: now,
    })
}

/// A verification to record again ([`refresh_verified`]).
#[derive(Debug, Clone)]
pub struct Refresh {
    id: ResourceId,
    /// Recorded keyed ([`Store::record_verified_of`]).
    sensitive: bool,
    declaration_hash: String,
    meta: datum_core::FileMeta,
    at: i64,
}

impl Refresh {
    /// Records it in `store`.
    pub fn record(&self, store: &mut Store) -> Result<(), datum_store::StoreError> {
        store.record_verified_of(
            &self.id,
            self.sensitive,
            &self.declaration_hash,
            Some(&self.meta),
            self.at,
        )
    }
}

/// Folds the findings of every resource the apply loop never made match as
/// declared now (no verified apply in the store, a failed last apply, or a
/// verified apply of an earlier declaration) into one `not_converged`
/// finding each; returns what to tell a person about each. `declared` gives
/// each finding's resource as the catalogue declares it.
pub fn not_converged<'r>(
    findings: &mut Vec<CheckFinding>,
    store: &Store,
    declared: impl Fn(&ResourceId) -> Option<&'r Resource>,
) -> Result<BTreeMap<ResourceId, String>, CheckError> {
    let mut why: BTreeMap<ResourceId, String> = BTreeMap::new();
    for id in findings.iter().map(|f| &f.id) {
        if why.contains_key(id) {
            continue;
        }
        // A finding always comes from a catalogue resource.
        let Some(resource) = declared(id) else {
            continue;
        };
        let Some(text) = crate::converged::why_not(store, resource)
            .with_context(|| format!("cannot read the last apply of {id}"))?
        else {
            continue;
        };
        why.insert(id.clone(), text);
    }
    if why.is_empty() {
        return Ok(why);
    }
    let mut folded: Vec<CheckFinding> = Vec::with_capacity(findings.len());
    let mut pending: BTreeMap<ResourceId, Vec<CheckFinding>> = BTreeMap::new();
    // In order, each not-converged resource at the place of its first finding.
    let mut order: Vec<Result<CheckFinding, ResourceId>> = Vec::new();
    for f in findings.drain(..) {
        if why.contains_key(&f.id) {
            if !pending.contains_key(&f.id) {
                order.push(Err(f.id.clone()));
            }
            pending.entry(f.id.clone()).or_default().push(f);
        } else {
            order.push(Ok(f));
        }
    }
    for item in order {
        match item {
            Ok(f) => folded.push(f),
            Err(id) => {
                if let Some(f) = pending
                    .remove(&id)
                    .and_then(datum_drift::check::not_converged)
                {
                    folded.push(f);
                }
            }
        }
    }
    *findings = folded;
    Ok(why)
}

/// Seals a sensitive resource's verified record that holds plain hashes
/// (recorded by a build before such records were keyed, or while the
/// resource was not yet marked sensitive): its keyed digests instead
/// (`Store::record_verified_of`), the same verification to whoever holds
/// the key, so a copy of the store no longer confirms a guessed secret.
/// Left as it was, only an apply would have replaced it, never the
/// checks and reverts of an agent. Without a key it is left as it is (a
/// check makes none; forgetting it would leave the resource not converged
/// until an apply, which makes the key and records it keyed). A store that
/// refuses only leaves it for the next check. Only resources the check
/// read are given (one trusted by its metadata unread is sealed later).
pub fn seal_plain_records<'r>(
    resources: impl IntoIterator<Item = &'r Resource>,
    store: &mut Store,
) {
    if store.digest_key().is_none() {
        return;
    }
    for resource in resources.into_iter().filter(|r| r.sensitive) {
        let Ok(Some(record)) = store.last_verified(&resource.id) else {
            continue;
        };
        let keyed = |h: &str| h.starts_with(datum_core::digest::KEYED_PREFIX);
        let plain = !keyed(&record.declaration_hash)
            || record
                .meta
                .as_ref()
                .and_then(|m| m.sha256.as_deref())
                .is_some_and(|h| !keyed(h));
        if plain {
            let _ = store.record_verified_of(
                &resource.id,
                true,
                &record.declaration_hash,
                record.meta.as_ref(),
                record.verified_at,
            );
        }
    }
}

/// Drops the verified stamp (metadata) of every drifted resource of a
/// metadata-first kind in a metadata-first class, keeping its declaration hash and time: metadata
/// passes never trust it again, and the next verified apply records a new
/// one.
pub fn distrust_stamps(
    registry: &Registry,
    findings: &[CheckFinding],
    classes: &Classes,
    store: &mut Store,
) -> Result<(), CheckError> {
    let mut done: HashSet<&ResourceId> = HashSet::new();
    for f in findings {
        if !metadata_first(registry, &f.id.kind)
            || classes.get(&f.class).content != ContentMode::Metadata
            || !done.insert(&f.id)
        {
            continue;
        }
        let Some(rec) = store
            .last_verified(&f.id)
            .with_context(|| format!("cannot read the last apply of {}", f.id))?
        else {
            continue;
        };
        if rec.meta.is_some() {
            store
                .record_verified(&f.id, &rec.declaration_hash, None, rec.verified_at)
                .with_context(|| format!("cannot drop the stamp of {}", f.id))?;
        }
    }
    Ok(())
}
