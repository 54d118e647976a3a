//! One check or reconcile of a catalogue ([`run`]).
//!
//! Owns the observation (the engine's per-pass cache, class by class so
//! each class's inspection time is measured), the history written to the
//! state store and the fleet report queued with it; the metadata-first
//! decisions are [`crate::detection`]'s, the policies [`crate::policies`]'.
//! What a finding *means* is decided in `datum_drift::check`, what a policy
//! decides in `datum_drift::policy`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use datum_agent::Conclusion;
use datum_catalog::snapshot::LazyCatalogue;
use datum_catalog::{Catalogue, HostIdentity};
use datum_core::{Observed, Resource, ResourceId};
use datum_drift::check::{CheckFinding, CheckReport, CheckStats, Inspected, Reported};
use datum_drift::classes::Classes;
use datum_engine::{ContentDiff, Inspection};
use datum_host::Host;
use datum_providers::Registry;
use datum_report::Signature;
use datum_reporting::{Reporting, build};
use datum_store::backup::BackupStore;
use datum_store::{Accepted, FindingScope, QuarantineSource, QuarantineTarget, Store};

use crate::COMMAND;
use crate::detection::{
    Trust, distrust_stamps, not_converged, reads_content, refresh_verified, seal_plain_records,
    trusted_by_metadata,
};
use crate::error::{CheckError, Context as _};
use crate::policies::{Policies, Quarantines};

/// Resources observed per batch: progress advances between batches.
const BATCH: usize = 4096;

/// Whether the policies are only described (`datum check`) or applied
/// (`datum reconcile`, and the agent's classes whose policy acts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Look,
    Reconcile,
}

/// What a person chose for one check (`datum check`'s `--class`,
/// `--sample`, `--pass-seed`, `--patch-dir`).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Check only the resources of this class.
    pub class: Option<String>,
    /// Deep-check this host only when hash(host, seed) falls under this
    /// fraction; metadata otherwise.
    pub sample: Option<f64>,
    /// The pass's seed for `sample`.
    pub pass_seed: u64,
    /// Where policy `accept` writes patches (default the root's
    /// `/var/lib/datum/accepted`).
    pub patch_dir: Option<PathBuf>,
}

/// What one check is run on.
pub struct Checking<'a> {
    /// The providers of the catalogue's kinds.
    pub registry: &'a Registry,
    /// The repository the catalogue was compiled from (pinned by the
    /// caller): accept's patches name its files, the fleet report its
    /// revision.
    pub repo: &'a Path,
    /// The layers of the repository this host uses (shown in the report).
    pub layers: Vec<String>,
    pub options: &'a Options,
    pub act: Act,
    pub identity: &'a HostIdentity,
    /// The catalogue to check (its resources decoded batch by batch).
    pub catalogue: LazyCatalogue,
    /// Whether the catalogue is a snapshot of an earlier compile (shown in
    /// the report's statistics).
    pub catalogue_reused: bool,
    pub classes: &'a Classes,
    pub host: &'a Host,
    /// The state store; `None` checks with a scratch store and records
    /// nothing (a check without a store). A policy that acts needs one: the
    /// caller refuses before.
    pub store: Option<&'a mut Store>,
    /// Without a store: why (said by the caller); the warning to a
    /// reporting host names the way back accordingly.
    pub without_store: WithoutStore,
    /// Opens the backup store (on first use: a revert or accept saves the
    /// drifted content there first).
    pub backups: &'a dyn Fn() -> Result<BackupStore, crate::error::OpenerError>,
    /// When the command started (the report's duration counts from here).
    pub started: Instant,
    /// The progress bar to advance (a terminal's front-end), if any.
    pub progress: Option<indicatif::ProgressBar>,
    /// The host's digest key: a sensitive Tree's roots reach the fleet
    /// report only as its keyed digests (none without a key).
    pub digest_key: Option<&'a datum_core::DigestKey>,
    /// The sensitive paths and words of the caller's run, of a catalogue
    /// holding every resource of `catalogue` (the agent's, which asks them
    /// again for its log): the reverts' passes and the fleet report's
    /// warnings ask these, so the run reads the sensitive sources once.
    /// `None`: the check makes its own where it needs them.
    pub sensitive: Option<&'a datum_engine::SensitiveOnce<'a>>,
}

/// Why a check runs without the state store ([`Checking::store`] is
/// `None`), as the caller found it: each has its own way back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WithoutStore {
    /// There is none yet: `datum apply` makes it.
    #[default]
    NotMade,
    /// It is there but cannot be used (damaged, foreign, unreadable):
    /// restored from a backup, or moved aside by `--rebuild-state`.
    Unusable,
    /// The file system holding it is full: nothing is damaged, room is the
    /// way back (a restore or a rebuild would be refused the same way, and
    /// would forget what it holds).
    Full,
}

/// What one check found and did.
pub struct Checked {
    pub report: CheckReport,
    /// Clean, drift or quarantines open, or something could not be checked
    /// (the pass is recorded with the number of its
    /// [`Conclusion::exit_code`], the one `datum check` exits with).
    pub conclusion: Conclusion,
    /// `report.yaml`, when the host reports to a fleet server (the report
    /// was queued; the caller delivers).
    pub reporting: Option<Reporting>,
}

/// Observes, diffs, applies the policies (`Act::Reconcile`) or describes
/// them (`Act::Look`), records the history; returns the report.
pub fn run(c: Checking<'_>) -> Result<Checked, CheckError> {
    let Checking {
        registry,
        repo,
        layers,
        options: args,
        act,
        identity,
        catalogue: mut lazy,
        catalogue_reused,
        classes,
        host,
        store: opened,
        without_store,
        backups,
        started,
        progress: bar,
        digest_key,
        sensitive: given,
    } = c;
    // A report queued in a scratch store goes nowhere: nothing to deliver.
    let persistent = opened.is_some();
    // Without a store (report only): nothing remembered, nothing recorded.
    let mut scratch_store;
    let store: &mut Store = match opened {
        Some(store) => store,
        None => {
            scratch_store = Store::open_in_memory().context("cannot open an in-memory store")?;
            &mut scratch_store
        }
    };
    let now = crate::now();

    // A host that reports to a fleet server follows the server's sampling
    // plan (unless told otherwise): it deep-checks in its own round of
    // every period, and checks metadata in the others.
    let reporting = Reporting::load(host);
    if let Some(r) = reporting.as_ref().filter(|_| !persistent) {
        // Said, not silent: else an enrolled host that only checks stays
        // "new" (then stale) on the server with no word on the host.
        let why = match without_store {
            WithoutStore::Unusable => {
                "the state store is unusable, as said above): its report is not queued for the server until the store is usable again; `datum apply` refuses a damaged store: restore it from a backup, or `datum apply --rebuild-state` moves it aside and starts an empty one, which forgets every quarantine, accepted drift and finding history"
            }
            WithoutStore::Full => {
                "the file system holding the state store is full, as said above): its report is not queued for the server until there is room again; nothing is damaged: make room on that file system (no need to restore the store or to rebuild it)"
            }
            WithoutStore::NotMade => {
                "there is none yet): its report is not queued for the server; `datum apply` once creates the store"
            }
        };
        eprintln!(
            "warning: {} is set up, but this check runs without the state store ({why}",
            r.path.display()
        );
    }
    let plan = match (&reporting, args.sample) {
        (Some(_), None) => store.sampling_plan().unwrap_or(None),
        _ => None,
    };
    let sampled = plan.map(|p| datum_fleet::SamplingUsed {
        round: p.round_at(now),
        deep: p.deep_at(&identity.name, now),
    });
    let deep = match (args.sample, sampled) {
        (Some(fraction), _) => {
            datum_drift::sampling::deep_check(&identity.name, args.pass_seed, fraction)
        }
        (None, Some(s)) => s.deep,
        (None, None) => true,
    };
    // Read once: the policies ask per finding. The resources a quarantine
    // names: plan and apply hold back what requires one, and so does a
    // revert. Only then are the requirements of what this check decodes
    // kept (ids only).
    let quarantines = Quarantines::new(&store.quarantined().context("cannot read quarantines")?);
    let mut requirements: HashMap<ResourceId, Vec<ResourceId>> = HashMap::new();
    // Acceptances hold while the host stays as accepted: one whose resource
    // is found as declared again is over (below), so the same change made
    // later is drift again, not silently accepted. Read once, with their
    // hashes, by resource (display form): the retain below compares each
    // finding's with them.
    let mut acceptances: HashMap<String, Accepted> = store
        .all_accepted()
        .context("cannot read accepted observations")?;

    // Class by class: the inspection time of each is what `datum schedule`
    // turns into a detection bound.
    let mut by_class: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, entry) in lazy.entries.iter().enumerate() {
        if args.class.as_deref().is_none_or(|c| c == entry.class) {
            by_class.entry(entry.class.to_owned()).or_default().push(i);
        }
    }
    let mut progress = Progress { bar };
    let mut stats = CheckStats {
        deep,
        catalogue_reused,
        ..CheckStats::default()
    };
    let mut findings: Vec<CheckFinding> = Vec::new();
    let mut observations: BTreeMap<ResourceId, Observed> = BTreeMap::new();
    let mut errors: Vec<(String, String)> = Vec::new();
    let mut timings: Vec<(String, u64, bool)> = Vec::new();
    // Each inspected Tree's declared and observed root (the fleet report).
    let mut trees: Vec<datum_fleet::TreeFingerprint> = Vec::new();
    // The inspected resources that drifted, and the packages (whose
    // configuration files are checked after the policies).
    let mut inspected: Vec<Resource> = Vec::new();
    // The sensitive resources decoded, and which were: the fleet report
    // sends the words of a warning only when it can tell that none names
    // a sensitive resource (`build::pass_warnings`).
    let mut sensitive_decoded: Vec<Resource> = Vec::new();
    let mut decoded = vec![false; lazy.entries.len()];
    // What each observation manages on the host, by kind
    // (`Provider::observed_identity`): two resources sharing one (a unit
    // and an alias of it) are refused, as plan and apply refuse them.
    let mut identities: BTreeMap<(String, String), Vec<(ResourceId, datum_core::Origin)>> =
        BTreeMap::new();
    // What the inspection would record (an acceptance over, a verification
    // recorded again), recorded only once no two resources are found to
    // share one object (below): a check refused for that records nothing.
    let mut acceptances_over: Vec<ResourceId> = Vec::new();
    let mut refreshes: Vec<crate::detection::Refresh> = Vec::new();
    for (class, indices) in &by_class {
        let spec = classes.get(class);
        let t0 = Instant::now();
        let full = reads_content(spec, deep, store)?;
        let trusted = if full {
            vec![Trust::Read; indices.len()]
        } else {
            trusted_by_metadata(registry, &lazy.entries, indices, host, store)
                .context("cannot read the last verified applies")?
        };
        let to_observe: Vec<usize> = indices
            .iter()
            .zip(&trusted)
            .filter(|(_, trusted)| **trusted != Trust::Trusted)
            .map(|(i, _)| *i)
            .collect();
        // Read because the record was racy or the metadata moved: found as
        // declared, recorded again (`datum_core::trust`).
        let refreshable: std::collections::HashSet<usize> = indices
            .iter()
            .zip(&trusted)
            .filter(|(_, trusted)| trusted.refreshable())
            .map(|(i, _)| *i)
            .collect();
        let unread = indices.len() - to_observe.len();
        stats.metadata_only += unread;
        progress.advance(unread as u64);
        // A batch at a time, decoded, observed, and dropped unless a policy
        // or the package check needs it: a check of 20,000 files never
        // holds 20,000 decoded resources.
        for batch in to_observe.chunks(BATCH) {
            let resources = match lazy.take(batch) {
                Ok(resources) => resources,
                Err(e) => return Err(CheckError::Snapshot(e.to_string())),
            };
            for &i in batch {
                if let Some(d) = decoded.get_mut(i) {
                    *d = true;
                }
            }
            sensitive_decoded.extend(resources.iter().filter(|r| r.sensitive).cloned());
            if !quarantines.resources().is_empty() {
                for r in &resources {
                    requirements.insert(r.id.clone(), r.requires.clone());
                }
            }
            let refs: Vec<&Resource> = resources.iter().collect();
            let results = datum_engine::inspect_all(registry, &refs, host, ContentDiff::Read);
            let mut keep = vec![false; resources.len()];
            for (((r, result), keep), index) in
                resources.iter().zip(results).zip(&mut keep).zip(batch)
            {
                match result {
                    Ok(Inspection {
                        provider,
                        mut observed,
                        diff,
                    }) => {
                        if let Some(identity) = provider.observed_identity(&observed) {
                            identities
                                .entry((r.id.kind.clone(), identity))
                                .or_default()
                                .push((r.id.clone(), r.origin.clone()));
                        }
                        // Kept for the kind's extra findings (checked after the
                        // policies), and a service a revert may notify (see
                        // `notifiable`).
                        *keep = provider.extra_findings().is_some()
                            || (act == Act::Reconcile && provider.activation().is_some());
                        if let Some(t) = build::tree_fingerprint(r, provider, &observed, digest_key)
                        {
                            trees.push(t);
                        }
                        // Kept for `accept`'s patch (never for a sensitive
                        // resource: the engine leaves those empty).
                        if let Some(before) = diff.content.as_ref().and_then(|c| c.before.clone()) {
                            observed.content = Some(before);
                        }
                        let entries = provider.entry_differences().map(|e| e.entries(&observed));
                        let found = datum_drift::check::findings_for(&Inspected {
                            id: &r.id,
                            class: &r.class,
                            sensitive: r.sensitive,
                            masked_only: r
                                .sensitive_by_field_only
                                .then(|| provider.sensitive_fields()),
                            owns_subtree: provider.owns_subtree(),
                            entries: entries.as_deref(),
                            target: Registry::path_claimed(provider, r),
                            observed: &observed,
                            diff: &diff,
                        });
                        if found.is_empty()
                            && !acceptances.is_empty()
                            && acceptances.remove(&r.id.to_string()).is_some()
                        {
                            acceptances_over.push(r.id.clone());
                        }
                        if !found.is_empty() {
                            observations.insert(r.id.clone(), observed);
                            *keep = true;
                        } else if refreshable.contains(index) {
                            refreshes.extend(refresh_verified(r, &observed, now));
                        }
                        findings.extend(found);
                    }
                    Err(e) => errors.push((r.id.to_string(), e.to_string())),
                }
            }
            drop(refs);
            inspected.extend(
                resources
                    .into_iter()
                    .zip(keep)
                    .filter_map(|(r, keep)| keep.then_some(r)),
            );
            progress.advance(batch.len() as u64);
        }
        stats.resources += indices.len();
        timings.push((class.clone(), t0.elapsed().as_millis() as u64, full));
    }
    progress.finish();
    // Before any policy acts or anything is recorded: a revert would start
    // and stop one unit in turn, and the report would show one object twice.
    let shared: Vec<(String, Vec<(ResourceId, datum_core::Origin)>)> = identities
        .into_iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|((_, identity), ids)| (identity, ids))
        .collect();
    if !shared.is_empty() {
        return Err(CheckError::Shared(datum_engine::Shared { shared }));
    }
    for id in &acceptances_over {
        store
            .clear_accepted(id)
            .with_context(|| format!("cannot end the acceptance of {id}"))?;
    }
    for refresh in &refreshes {
        // Like an apply's record: a store that refuses only costs the next
        // check a read.
        if refresh.record(store).is_ok() {
            stats.verified_again += 1;
        }
    }
    drop(refreshes);
    // What the policies act on: the drifted resources, and the services a
    // revert of them may notify.
    let checked = inspected.len();
    if act == Act::Reconcile && !findings.is_empty() {
        let more = notifiable(registry, &mut lazy, &mut decoded)?;
        sensitive_decoded.extend(more.iter().filter(|r| r.sensitive).cloned());
        if !quarantines.resources().is_empty() {
            for r in &more {
                requirements.insert(r.id.clone(), r.requires.clone());
            }
        }
        inspected.extend(more);
    }
    let catalogue = Catalogue {
        host: lazy.host.clone(),
        resources: inspected,
        autorequires: Vec::new(),
        boundary: lazy.boundary.clone(),
    };
    // By id: a mass drift (a package upgrade touching thousands of files)
    // must not cost a scan of the catalogue per finding.
    let by_id: HashMap<&ResourceId, &Resource> =
        catalogue.resources.iter().map(|r| (&r.id, r)).collect();

    // A type change of a resource that owns no subtree is never accepted
    // (`Policies::apply`, which is handed this set): an acceptance of one
    // (made before that rule) records the type alone, so it is over.
    let type_changed: BTreeSet<ResourceId> = findings
        .iter()
        .filter(|f| {
            f.finding.category == "type_changed" && !crate::owns_subtree(registry, &f.id.kind)
        })
        .map(|f| f.id.clone())
        .collect();
    for id in &type_changed {
        if acceptances.remove(&id.to_string()).is_some() {
            store
                .clear_accepted(id)
                .with_context(|| format!("cannot end the acceptance of {id}"))?;
        }
    }
    // Accepted observations are not drift until the declaration or the
    // observation changes (as read above: nothing between accepts or
    // changes one this keeps).
    if !acceptances.is_empty() {
        // Acceptances of sensitive resources still holding plain hashes
        // (written before they were keyed), to record again keyed.
        let mut plain: Vec<(ResourceId, String, String, i64, String)> = Vec::new();
        findings.retain(|f| {
            if type_changed.contains(&f.id) {
                return true;
            }
            let Some(resource) = by_id.get(&f.id) else {
                return true;
            };
            let Some(observed) = observations.get(&f.id) else {
                return true;
            };
            match acceptances.get(&f.id.to_string()) {
                // A sensitive resource's acceptance holds keyed digests.
                Some(a) => {
                    let observation = observed.acceptance_hash();
                    let held = store.records(&a.declaration_hash, &resource.declaration_hash)
                        && store.records(&a.observation_hash, &observation);
                    if held
                        && resource.sensitive
                        && a.observation_hash == observation
                        && let (Some(d), Some(o), Some(patch)) = (
                            store.recorded_hash(true, &resource.declaration_hash),
                            store.recorded_hash(true, &observation),
                            a.patch.as_ref(),
                        )
                    {
                        plain.push((f.id.clone(), d, o, a.accepted_at, patch.clone()));
                    }
                    !held
                }
                None => true,
            }
        });
        for (id, declaration_hash, observation_hash, at, patch) in &plain {
            store
                .accept(id, declaration_hash, observation_hash, *at, patch)
                .with_context(|| format!("cannot record the acceptance of {id} keyed"))?;
        }
    }

    // Who changed each drifted resource, as the agent's attribution recorded
    // it (before the policies: a class's `on_change_by` rules decide on it).
    for f in &mut findings {
        f.changed_by = store
            .writers(&f.id)
            .with_context(|| format!("cannot read who changed {}", f.id))?;
    }

    // Drift is what the apply loop did not produce: a resource never
    // applied, whose last apply failed, or whose declaration changed since
    // its last verified apply, is not converged (with the reason), whatever
    // its differences look like; no policy acts on it.
    let unconverged = not_converged(&mut findings, store, |id| by_id.get(id).copied())?;

    // A metadata-first class does not trust a stamp again once the content
    // behind it was seen to differ: the stamp is dropped (the declaration
    // and time of the last verified apply kept), so every following pass,
    // metadata or audit, reads the file until an apply verifies it. The
    // finding stays open and its history continues.
    if persistent {
        distrust_stamps(registry, &findings, classes, store)?;
        seal_plain_records(&sensitive_decoded, store);
    }

    let held_back = held_back_by_quarantine(
        &catalogue,
        quarantines.resources(),
        &mut requirements,
        &mut lazy,
    )?;
    let mut policies = Policies {
        registry,
        repo,
        backups_opener: backups,
        args,
        catalogue: &catalogue,
        by_id: &by_id,
        repository: std::cell::OnceCell::new(),
        classes,
        host,
        store,
        observations: &observations,
        quarantines,
        now,
        backups: None,
        act,
        unconverged: &unconverged,
        held_back: &held_back,
        type_changed: &type_changed,
        warnings: Vec::new(),
        sensitive: given,
    };
    let mut actions = policies.apply(&findings)?;
    let mut warnings = std::mem::take(&mut policies.warnings);

    // What the kinds add (a Package's configuration files changed after it
    // installed them). Report only, whatever the class's policy: nothing
    // declares their content, so there is nothing to revert to.
    let declared = || {
        crate::extra::Declared::new(
            registry,
            lazy.entries
                .iter()
                .filter_map(|e| Some((e.id.kind.as_str(), e.path?))),
        )
    };
    let (extra, failed) = crate::extra::findings(
        registry,
        declared,
        catalogue.resources.iter().take(checked),
        host,
    );
    actions.extend(extra.iter().map(|_| crate::policies::Handled::reported()));
    findings.extend(extra);
    errors.extend(failed);
    // Reloads owed and live configurations their group validator refuses
    // (report only).
    let (activation, failed) = crate::activation::findings(
        lazy.entries
            .iter()
            .filter(|e| args.class.as_deref().is_none_or(|c| c == e.class))
            .map(|e| crate::activation::Checked {
                id: e.id,
                class: e.class,
                validate: e.validate,
            }),
        Some(&*store),
        host,
    );
    actions.extend(
        activation
            .iter()
            .map(|_| crate::policies::Handled::reported()),
    );
    findings.extend(activation);
    errors.extend(failed);
    // And what the host noted outside the reverts' passes (the
    // observations' own): taken, so that none is lost.
    warnings.extend(host.take_notices());

    let quarantined: Vec<(String, String)> = store
        .quarantined()
        .context("cannot read quarantines")?
        .into_iter()
        .map(|q| {
            let what = match q.target {
                QuarantineTarget::Resource(id) => id.to_string(),
                QuarantineTarget::Host => "host".to_owned(),
            };
            let who = match q.source {
                QuarantineSource::Person => "by a person",
                QuarantineSource::Policy => "by policy",
                QuarantineSource::Flapping => "flapping",
            };
            (what, format!("{who}: {}", q.reason))
        })
        .collect();

    stats.duration_ms = started.elapsed().as_millis() as u64;
    let conclusion = Conclusion::of(
        !errors.is_empty(),
        !findings.is_empty() || !quarantined.is_empty(),
    );

    // History: first seen and passes per finding, inspection time per class.
    let signatures: Vec<Signature> = findings.iter().map(|f| f.finding.signature()).collect();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for f in &findings {
        *counts.entry(f.finding.category.clone()).or_default() += 1;
    }
    let record = datum_store::PassRecord {
        started_at: now,
        finished_at: crate::now(),
        command: COMMAND.to_owned(),
        host: identity.name.clone(),
        counts,
        duration_ms: stats.duration_ms,
        exit_code: conclusion.exit_code().code(),
    };
    // The subjects a check of some classes speaks for (a check of every
    // class speaks for all, and names none).
    let subjects: Vec<String>;
    let scope = if args.class.is_some() {
        subjects = by_class
            .values()
            .flatten()
            .map(|&i| lazy.entries.at(i).id.to_string())
            .collect();
        FindingScope::Subjects(&subjects)
    } else {
        FindingScope::All
    };
    let clean_writers: Vec<ResourceId> = {
        let written = store
            .written_resources()
            .context("cannot read who changed what")?;
        let written: HashSet<&str> = written.iter().map(String::as_str).collect();
        let failed: HashSet<&str> = errors.iter().map(|(w, _)| w.as_str()).collect();
        let drifted: HashSet<&ResourceId> = findings.iter().map(|f| &f.id).collect();
        if written.is_empty() {
            Vec::new()
        } else {
            by_class
                .values()
                .flatten()
                .map(|&i| lazy.entries.at(i).id)
                .filter(|id| !drifted.contains(id))
                .filter(|id| {
                    let shown = id.to_string();
                    written.contains(shown.as_str()) && !failed.contains(shown.as_str())
                })
                .cloned()
                .collect()
        }
    };
    // What the fleet report says besides the findings (read before the
    // history's transaction: class bounds come from the store).
    let fleet_report = match &reporting {
        Some(r) => Some(check_report(
            repo,
            &lazy,
            identity,
            &record,
            classes,
            store,
            r.interval(),
            args.class.iter().cloned().collect(),
        )?),
        None => None,
    };
    let ages = {
        let batch = store.batch().context("cannot write the check history")?;
        let pass_id = batch.record_pass(&record)?;
        for (class, ms, full) in &timings {
            batch.record_class_inspection_full(pass_id, class, *ms, *full)?;
        }
        let ages =
            batch.record_findings_scoped(pass_id, &identity.name, &signatures, now, scope)?;
        // A resource found clean forgets who changed it before: the next
        // drift is somebody else's doing.
        for id in &clean_writers {
            batch.forget_writers(id)?;
        }
        // The fleet report, queued with the check it describes.
        if let (Some(r), Some(mut report)) = (&reporting, fleet_report) {
            report.trees = std::mem::take(&mut trees);
            report.sampling = sampled;
            let mut drifted: HashSet<&ResourceId> = HashSet::new();
            for (i, f) in findings.iter().enumerate() {
                drifted.insert(&f.id);
                let sensitive = by_id.get(&f.id).is_some_and(|r| r.sensitive);
                let first_seen = ages.get(i).map_or(now, |a| a.first_seen);
                let mut finding = build::check_finding(
                    registry,
                    f,
                    observations.get(&f.id),
                    sensitive,
                    first_seen,
                );
                finding.checks = ages.get(i).map(|a| a.passes);
                report.findings.push(finding);
            }
            let failed: HashSet<&str> = errors.iter().map(|(id, _)| id.as_str()).collect();
            report.counts = BTreeMap::from([
                ("drifted".to_owned(), drifted.len() as u64),
                ("failed".to_owned(), failed.len() as u64),
                ("quarantined".to_owned(), report.quarantined.len() as u64),
                (
                    "converged".to_owned(),
                    (stats.resources as u64)
                        .saturating_sub(drifted.len() as u64 + failed.len() as u64),
                ),
                ("metadata_only".to_owned(), stats.metadata_only as u64),
            ]);
            // Which resources are sensitive is known once every declaration
            // is read: the ones the check left unread (trusted by their
            // metadata, other classes) are decoded now, when there is a
            // warning to send; failing that, only how many go.
            let sensitive = if warnings.is_empty() || given.is_some() {
                None
            } else {
                let unread: Vec<usize> = (0..decoded.len()).filter(|&i| !decoded[i]).collect();
                lazy.take(&unread).ok().map(|rest| {
                    sensitive_decoded.extend(rest.into_iter().filter(|r| r.sensitive));
                    Catalogue {
                        host: lazy.host.clone(),
                        resources: std::mem::take(&mut sensitive_decoded),
                        autorequires: Vec::new(),
                        boundary: lazy.boundary.clone(),
                    }
                })
            };
            let own = sensitive
                .as_ref()
                .map(|c| datum_engine::SensitiveOnce::new(c, registry));
            report.warnings = build::pass_warnings(&warnings, given.or(own.as_ref()));
            r.enqueue(&batch, report, record.finished_at)?;
        }
        batch.commit()?;
        ages
    };

    let report = CheckReport {
        host: identity.name.clone(),
        labels: identity.labels.clone(),
        layers,
        findings: findings
            .into_iter()
            .zip(actions)
            .enumerate()
            .map(|(i, (finding, handled))| {
                let age = ages.get(i);
                Reported {
                    finding,
                    first_seen: age.map_or(now, |a| a.first_seen),
                    passes: age.map_or(1, |a| a.passes),
                    action: handled.action,
                    handling: handled.handling,
                    rule: handled.rule,
                }
            })
            .collect(),
        quarantined,
        errors,
        warnings,
        stats,
    };
    Ok(Checked {
        report,
        conclusion,
        reporting: reporting.filter(|_| persistent),
    })
}

/// The fleet report of a check, without its findings and trees (added
/// once the history has dated them).
#[expect(
    clippy::too_many_arguments,
    reason = "one call site; a struct would only rename them"
)]
fn check_report(
    repo: &Path,
    lazy: &datum_catalog::snapshot::LazyCatalogue,
    identity: &datum_catalog::HostIdentity,
    record: &datum_store::PassRecord,
    classes: &Classes,
    store: &Store,
    stated: Option<Duration>,
    classes_checked: Vec<String>,
) -> Result<datum_fleet::Report, CheckError> {
    let mut per_class: BTreeMap<String, u64> = BTreeMap::new();
    for e in lazy.entries.iter() {
        match per_class.get_mut(e.class) {
            Some(n) => *n += 1,
            None => {
                per_class.insert(e.class.to_owned(), 1);
            }
        }
    }
    let (bounds, expected) =
        datum_reporting::class_bounds(classes, &per_class, Some(store), stated);
    let common = build::Common {
        kind: datum_fleet::ReportKind::Check,
        host: identity.name.clone(),
        labels: identity.labels.clone(),
        revision: datum_reporting::revision::repository_revision(repo, lazy.revision.as_deref()),
        catalogue: build::catalogue_hash(
            lazy.entries
                .iter()
                .map(|e| (e.id.to_string(), e.declaration_hash)),
        ),
        started_at: record.started_at,
        finished_at: record.finished_at,
        duration_ms: record.duration_ms,
        exit_code: record.exit_code,
        resources: lazy.entries.len() as u64,
        classes: bounds,
        expected_interval_s: expected,
    };
    let mut report = common.report();
    report.classes_checked = classes_checked;
    // What is quarantined is added when the report is queued.
    Ok(report)
}

/// The check's progress bar, if it draws one: resources advance between
/// batches.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn advance(&mut self, resources: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(resources);
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// The resources of a kind that is activated (a Service) this check did
/// not decode (another class than the one checked), decoded now
/// (`decoded` marks them); those it decoded are kept by a reconcile.
/// A revert's pass must see the services its reverted files notify, to
/// reload them (or leave the reload owed), and the policies' catalogue
/// holds only what this check kept. Before, a service that did not drift
/// itself was missing from it (dropped after its inspection, or never
/// decoded: the agent checks one class at a time), and the reload its
/// reverted file called for was dropped: neither performed nor owed.
fn notifiable(
    registry: &Registry,
    lazy: &mut LazyCatalogue,
    decoded: &mut [bool],
) -> Result<Vec<Resource>, CheckError> {
    let wanted: Vec<usize> = lazy
        .entries
        .iter()
        .enumerate()
        .filter(|(i, e)| {
            !decoded.get(*i).copied().unwrap_or(true)
                && registry
                    .lookup(&e.id.kind)
                    .is_some_and(|p| p.activation().is_some())
        })
        .map(|(i, _)| i)
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let more = lazy
        .take(&wanted)
        .map_err(|e| CheckError::Snapshot(e.to_string()))?;
    for &i in &wanted {
        if let Some(d) = decoded.get_mut(i) {
            *d = true;
        }
    }
    Ok(more)
}

/// Each drifted resource of `catalogue` that requires a quarantined
/// resource, directly or through others (what plan and apply show as
/// `blocked (by ...)`), with the quarantined one that holds it back.
/// `requirements` holds the requirements of every resource this check
/// decoded; one it never decoded (another class, trusted by its metadata)
/// is decoded now, once.
fn held_back_by_quarantine(
    catalogue: &Catalogue,
    quarantined: &HashSet<ResourceId>,
    requirements: &mut HashMap<ResourceId, Vec<ResourceId>>,
    lazy: &mut LazyCatalogue,
) -> Result<BTreeMap<ResourceId, ResourceId>, CheckError> {
    let mut held = BTreeMap::new();
    if quarantined.is_empty() {
        return Ok(held);
    }
    let mut index: Option<HashMap<ResourceId, usize>> = None;
    for resource in &catalogue.resources {
        let mut seen: HashSet<ResourceId> = HashSet::new();
        let mut queue: std::collections::VecDeque<ResourceId> =
            resource.requires.iter().cloned().collect();
        while let Some(id) = queue.pop_front() {
            if !seen.insert(id.clone()) {
                continue;
            }
            if quarantined.contains(&id) {
                held.insert(resource.id.clone(), id);
                break;
            }
            if !requirements.contains_key(&id) {
                let index = index.get_or_insert_with(|| {
                    lazy.entries
                        .iter()
                        .enumerate()
                        .map(|(i, e)| (e.id.clone(), i))
                        .collect()
                });
                let Some(&at) = index.get(&id) else {
                    // Not in this catalogue: nothing to hold it back.
                    continue;
                };
                let decoded = lazy
                    .take(&[at])
                    .map_err(|e| CheckError::Snapshot(e.to_string()))?;
                for r in decoded {
                    requirements.insert(r.id, r.requires);
                }
            }
            if let Some(next) = requirements.get(&id) {
                queue.extend(next.iter().cloned());
            }
        }
    }
    Ok(held)
}
