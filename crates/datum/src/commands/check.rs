//! `datum check` and `datum reconcile`: observe and diff every resource,
//! report drift, and (reconcile only) apply each class's policy.
//!
//! `check` only looks: it changes nothing on the host and takes no policy
//! decision (no revert, no acceptance, no quarantine, no flap count); per
//! finding it says what the class's policy would do ("would revert"). It
//! records its history (passes, findings, inspection times) when a state
//! store exists. `reconcile` is the deliberate act: a class whose policy is
//! `revert` is reverted through the engine's normal apply pass (validators
//! included) on a catalogue holding just the drifted resources, after the
//! drifted content is saved in the backup store. A resource a person
//! quarantined is never reverted (break-glass). What the report means is
//! decided in `datum_drift::check`; this module drives the observation (the
//! engine's per-pass cache, class by class so each class's inspection time
//! is measured), metadata-first decisions, the policies and the history.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use datum_catalog::Catalogue;
use datum_catalog::snapshot::Summary;
use datum_core::{Observed, Presence, Resource, ResourceId};
use datum_drift::check::{CheckFinding, CheckReport, CheckStats, Inspected, Reported};
use datum_drift::classes::{ClassSpec, Classes, ContentMode, Policy, Scope};
use datum_drift::policy::{FlapDecision, flap_decision};
use datum_engine::{Mode, PassContext};
use datum_host::Host;
use datum_host::lock::RootLock;
use datum_store::backup::{BackupReason, BackupStore, SavedFile};
use datum_store::{FindingScope, FindingSignature, QuarantineSource, QuarantineTarget, Store};

use crate::cli::{CheckArgs, GlobalArgs, OutputFormat};
use crate::context;
use crate::exit::ExitCode;
use crate::reporting::{Reporting, build};

/// The `command` recorded in the state store for checks.
const COMMAND: &str = "check";

/// Resources observed per batch: progress advances between batches.
const BATCH: usize = 4096;

/// Whether the policies are only described (`datum check`) or applied
/// (`datum reconcile`, and the agent through it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Look,
    Reconcile,
}

pub fn run(global: &GlobalArgs, args: &CheckArgs, act: Act) -> Result<ExitCode> {
    let started = Instant::now();
    let identity = context::identity(global)?;
    // The snapshot of the last compile when the repository has not changed
    // since (a quiet host's check does not parse 20,000 documents again);
    // resources are decoded only when they are inspected. The store is
    // opened (or created) only once the repository has compiled, so that a
    // check of a broken repository leaves nothing behind.
    let (mut lazy, provenance) = context::compiled(global, &identity, "checked")?;
    let host = context::host(global, &identity, &lazy.boundary);
    let _lock = RootLock::acquire(&host, global.lock_timeout).context("cannot lock the root")?;
    let classes = load_classes(&lazy.classes, &lazy.entries)?;
    // A reconcile that would act (revert, accept, quarantine) needs the
    // store and refuses without it, like apply; a check (or a reconcile of
    // report-only classes) goes on read-only without one, recording nothing.
    let acts = act == Act::Reconcile
        && lazy
            .entries
            .iter()
            .filter(|e| args.class.as_deref().is_none_or(|c| c == e.class))
            .any(|e| classes.get(&e.class).acts());
    let need = if acts {
        context::StoreNeed::Required("reconciled")
    } else {
        context::StoreNeed::Optional("checking (report only)")
    };
    let mut opened = context::open_store(global, need)?;
    // A report queued in a scratch store goes nowhere: nothing to deliver.
    let persistent = opened.is_some();
    // Without a store (report only): nothing remembered, nothing recorded.
    let mut scratch_store;
    let store: &mut Store = match opened.as_mut() {
        Some(store) => store,
        None => {
            scratch_store = Store::open_in_memory().context("cannot open an in-memory store")?;
            &mut scratch_store
        }
    };
    let now = context::now();

    // A host that reports to a fleet server follows the server's sampling
    // plan (unless told otherwise): it deep-checks in its own round of
    // every period, and checks metadata in the others.
    let reporting = Reporting::load(&host);
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
    let quarantines = store.quarantined().context("cannot read quarantines")?;
    let person_quarantined: HashSet<String> = quarantines
        .iter()
        .filter(|q| q.source == QuarantineSource::Person)
        .map(|q| match &q.target {
            QuarantineTarget::Resource(id) => id.to_string(),
            QuarantineTarget::Host => "host".to_owned(),
        })
        .collect();

    // Class by class: the inspection time of each is what `datum schedule`
    // turns into a detection bound.
    let mut by_class: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, entry) in lazy.entries.iter().enumerate() {
        if args.class.as_deref().is_none_or(|c| c == entry.class) {
            by_class.entry(entry.class.clone()).or_default().push(i);
        }
    }
    let selected: usize = by_class.values().map(Vec::len).sum();
    let mut progress = Progress::new(selected);
    let mut stats = CheckStats {
        deep,
        catalogue_reused: provenance == context::Provenance::Snapshot,
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
    for (class, indices) in &by_class {
        let spec = classes.get(class);
        let t0 = Instant::now();
        let full = reads_content(spec, deep, store)?;
        let trusted = if full {
            vec![false; indices.len()]
        } else {
            trusted_by_metadata(&lazy.entries, indices, &host, store)
                .context("cannot read the last verified applies")?
        };
        let to_observe: Vec<usize> = indices
            .iter()
            .zip(&trusted)
            .filter(|(_, trusted)| !**trusted)
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
                Err(e) => {
                    context::forget_snapshot(global);
                    bail!("{e}; nothing was checked (run the check again)");
                }
            };
            let refs: Vec<&Resource> = resources.iter().collect();
            let results = datum_engine::observe_all(datum_providers::registry(), &refs, &host);
            let mut keep = vec![false; resources.len()];
            for ((r, result), keep) in resources.iter().zip(results).zip(&mut keep) {
                *keep = r.id.kind == datum_providers::package::KIND;
                match result {
                    Ok(mut observed) => {
                        if let Some(t) = build::tree_fingerprint(&r.id.to_string(), &observed) {
                            trees.push(t);
                        }
                        let Some(provider) = datum_providers::lookup(&r.id.kind) else {
                            continue;
                        };
                        let mut diff = provider.diff(r, &observed);
                        datum_engine::fill_content_for_display(
                            provider, r, &observed, &mut diff, &host,
                        );
                        // Kept for `accept`'s patch (never for a sensitive
                        // resource: the engine leaves those empty).
                        if let Some(before) = diff.content.as_ref().and_then(|c| c.before.clone()) {
                            observed.content = Some(before);
                        }
                        let found = datum_drift::check::findings_for(&Inspected {
                            id: &r.id,
                            class: &r.class,
                            sensitive: r.sensitive,
                            target: r.desired_str("path"),
                            observed: &observed,
                            diff: &diff,
                        });
                        if !found.is_empty() {
                            observations.insert(r.id.clone(), observed);
                            *keep = true;
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
    // What the policies act on: the drifted resources.
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

    // Accepted observations are not drift until the declaration or the
    // observation changes.
    findings.retain(|f| {
        let Some(resource) = by_id.get(&f.id) else {
            return true;
        };
        let Some(observed) = observations.get(&f.id) else {
            return true;
        };
        match store.accepted(&f.id) {
            Ok(Some(a)) => {
                a.declaration_hash != resource.declaration_hash
                    || a.observation_hash != observed.acceptance_hash()
            }
            _ => true,
        }
    });

    // Who changed each drifted resource, as the agent's attribution recorded
    // it (before the policies: a class's `on_change_by` rules decide on it).
    for f in &mut findings {
        f.changed_by = store
            .writers(&f.id)
            .with_context(|| format!("cannot read who changed {}", f.id))?;
    }

    // Drift is what the apply loop did not produce: a resource never
    // applied, or whose last apply failed, is not converged (with the
    // failure), whatever its differences look like; no policy acts on it.
    let unconverged = not_converged(&mut findings, store)?;

    // A metadata-first class does not trust a stamp again once the content
    // behind it was seen to differ: the stamp is dropped (the declaration
    // and time of the last verified apply kept), so every following pass,
    // metadata or audit, reads the file until an apply verifies it. The
    // finding stays open and its history continues.
    if persistent {
        distrust_stamps(&findings, &classes, store)?;
    }

    let mut policies = Policies {
        global,
        args,
        catalogue: &catalogue,
        by_id: &by_id,
        repository: std::cell::OnceCell::new(),
        classes: &classes,
        host: &host,
        store,
        observations: &observations,
        person_quarantined: &person_quarantined,
        now,
        backups: None,
        act,
        unconverged: &unconverged,
    };
    let mut actions = policies.apply(&findings)?;

    // Configuration files of the declared packages changed after the
    // package installed them. Report only, whatever the class's policy:
    // nothing declares their content, so there is nothing to revert to.
    let declared = lazy
        .entries
        .iter()
        .filter_map(|e| Some((e.id.kind.as_str(), e.path.as_deref()?)));
    let (package_files, failed) = crate::conffiles::findings(declared, &catalogue.resources, &host);
    actions.extend(package_files.iter().map(|_| ("reported".to_owned(), None)));
    findings.extend(package_files);
    errors.extend(failed);
    // Reloads owed and live configurations their group validator refuses
    // (report only).
    let (activation, failed) = crate::activation_findings::findings(
        lazy.entries
            .iter()
            .filter(|e| args.class.as_deref().is_none_or(|c| c == e.class))
            .map(|e| crate::activation_findings::Checked {
                id: &e.id,
                class: &e.class,
                validate: e.validate.as_deref(),
            }),
        Some(&*store),
        &host,
    );
    actions.extend(activation.iter().map(|_| ("reported".to_owned(), None)));
    findings.extend(activation);
    errors.extend(failed);

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
    let exit = if !errors.is_empty() {
        ExitCode::ERROR
    } else {
        ExitCode::for_pending(!findings.is_empty() || !quarantined.is_empty())
    };

    // History: first seen and passes per finding, inspection time per class.
    let signatures: Vec<FindingSignature> = findings
        .iter()
        .map(|f| {
            let s = f.finding.signature();
            FindingSignature {
                subject: s.subject,
                category: s.category,
                paths: s.paths,
            }
        })
        .collect();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for f in &findings {
        *counts.entry(f.finding.category.clone()).or_default() += 1;
    }
    let record = datum_store::PassRecord {
        started_at: now,
        finished_at: context::now(),
        command: COMMAND.to_owned(),
        host: identity.name.clone(),
        counts,
        duration_ms: stats.duration_ms,
        exit_code: exit.0,
    };
    let subjects: Vec<String> = by_class
        .values()
        .flatten()
        .map(|&i| lazy.entries[i].id.to_string())
        .collect();
    let scope = if args.class.is_some() {
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
                .map(|&i| &lazy.entries[i].id)
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
            global,
            &lazy,
            &identity,
            &record,
            &classes,
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
                let mut finding =
                    build::check_finding(f, observations.get(&f.id), sensitive, first_seen);
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
            r.enqueue(&batch, report, record.finished_at)?;
        }
        batch.commit()?;
        ages
    };

    let report = CheckReport {
        host: identity.name.clone(),
        labels: identity.labels.clone(),
        layers: context::layers_used(global, &identity),
        findings: findings
            .into_iter()
            .zip(actions)
            .enumerate()
            .map(|(i, (finding, (action, rule)))| {
                let age = ages.get(i);
                Reported {
                    finding,
                    first_seen: age.map_or(now, |a| a.first_seen),
                    passes: age.map_or(1, |a| a.passes),
                    action,
                    rule,
                }
            })
            .collect(),
        quarantined,
        errors,
        stats,
    };
    if let Some(path) = &args.markdown {
        // Never through a link planted at the report's name.
        datum_host::named::write_report(path, datum_drift::check::markdown(&report).as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut out = std::io::stdout();
    match global.output {
        OutputFormat::Human => {
            write!(
                out,
                "{}",
                datum_drift::check::human(&report, context::use_color(global))
            )?;
        }
        OutputFormat::Json => {
            crate::render::json::print("", datum_drift::check::json(&report))?;
        }
    }
    // Delivery needs no lock: another pass may start meanwhile.
    drop(_lock);
    if let Some(r) = &reporting
        && persistent
    {
        r.after_pass(global, store);
    }
    Ok(exit)
}

/// The fleet report of a check, without its findings and trees (added
/// once the history has dated them).
#[expect(
    clippy::too_many_arguments,
    reason = "one call site; a struct would only rename them"
)]
fn check_report(
    global: &GlobalArgs,
    lazy: &datum_catalog::snapshot::LazyCatalogue,
    identity: &datum_catalog::HostIdentity,
    record: &datum_store::PassRecord,
    classes: &Classes,
    store: &Store,
    stated: Option<Duration>,
    classes_checked: Vec<String>,
) -> Result<datum_fleet::Report> {
    let mut per_class: BTreeMap<String, u64> = BTreeMap::new();
    for e in &lazy.entries {
        *per_class.entry(e.class.clone()).or_insert(0) += 1;
    }
    let (bounds, expected) =
        crate::reporting::class_bounds(classes, &per_class, Some(store), stated);
    let common = build::Common {
        kind: datum_fleet::ReportKind::Check,
        host: identity.name.clone(),
        labels: identity.labels.clone(),
        revision: crate::reporting::revision::repository_revision(
            &global.repo,
            lazy.stamp_digest.as_deref(),
        ),
        catalogue: build::catalogue_hash(
            lazy.entries
                .iter()
                .map(|e| (e.id.to_string(), e.declaration_hash.as_str())),
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

/// The repository's documents, for `accept`'s patches (which name the file
/// that declares a resource's content).
fn load_repository(global: &GlobalArgs) -> Result<datum_catalog::Repository> {
    match datum_catalog::Repository::load(&global.repo) {
        Ok(r) => Ok(r),
        Err(diagnostics) => {
            eprint!("{}", diagnostics.render(context::use_color(global)));
            bail!(
                "the repository has {} error(s); nothing was checked",
                diagnostics.error_count()
            )
        }
    }
}

/// The classes of `datum.yaml`, and every resource's class checked against
/// them.
fn load_classes(settings: &serde_json::Value, entries: &[Summary]) -> Result<Classes> {
    let classes = match Classes::parse(settings) {
        Ok(c) => c,
        Err(errors) => {
            let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
            bail!("{}", lines.join("\n"));
        }
    };
    let unknown =
        classes.unknown_classes(entries.iter().map(|e| (e.id.to_string(), e.class.as_str())));
    if !unknown.is_empty() {
        let lines: Vec<String> = unknown
            .iter()
            .map(|(at, class)| {
                format!("{at}: class `{class}` is not declared in datum.yaml `classes:`")
            })
            .collect();
        bail!("{}", lines.join("\n"));
    }
    Ok(classes)
}

/// Whether this check reads content for `spec`'s resources: a full class
/// does unless sampling made this a metadata pass; a metadata class does
/// when its audit is due.
fn reads_content(spec: &ClassSpec, deep: bool, store: &Store) -> Result<bool> {
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

/// Which of the resources at `indices` are Files whose metadata equals what
/// their last verified apply recorded (and whose declaration has not changed
/// since): those are trusted without being read (or even decoded). One
/// `lstat` each, batched per directory on all cores (20,000 of them are most
/// of a metadata pass). The result is aligned with `indices`.
fn trusted_by_metadata(
    entries: &[Summary],
    indices: &[usize],
    host: &Host,
    store: &mut Store,
) -> Result<Vec<bool>, datum_store::StoreError> {
    // Every File with a path is looked at (one `lstat` each, batched per
    // directory on all cores) while the store is read for the records of
    // the same declaration: the two take about as long, and a File without
    // a usable record is simply not trusted.
    let files: Vec<(usize, PathBuf)> = indices
        .iter()
        .enumerate()
        .filter_map(|(at, &i)| {
            let entry = entries.get(i).filter(|e| e.id.kind == "File")?;
            let declared = PathBuf::from(entry.path.as_deref()?);
            datum_host::paths::check_declared(&declared).ok()?;
            Some((at, declared))
        })
        .collect();
    let by_name: HashMap<&str, usize> = files
        .iter()
        .map(|(at, _)| (entries[indices[*at]].id.name.as_str(), *at))
        .collect();
    let paths: Vec<&Path> = files.iter().map(|(_, p)| p.as_path()).collect();
    let mut recorded: Vec<Option<datum_core::FileMeta>> = vec![None; indices.len()];
    let (stats, visited) = std::thread::scope(|scope| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let paths = &paths;
        // Through the boundary: a File behind a parent link is not
        // trusted (and its observation reports the link).
        let looking = scope.spawn(move || host.lstat_many(paths, threads));
        let visited = store.visit_verified_meta("File", |name, declaration_hash, meta| {
            if let Some(&at) = by_name.get(name)
                && entries[indices[at]].declaration_hash == declaration_hash
            {
                recorded[at] = Some(meta);
            }
        });
        (looking.join().unwrap_or_default(), visited)
    });
    visited?;
    let mut trusted = vec![false; indices.len()];
    for ((at, _), stat) in files.iter().zip(stats) {
        trusted[*at] = match (stat, &recorded[*at]) {
            (Ok(Some(stat)), Some(recorded)) if stat.kind == datum_host::fs::FileKind::File => {
                datum_drift::metadata::unchanged_since_verified(recorded, &stat.meta)
            }
            _ => false,
        };
    }
    Ok(trusted)
}

/// Folds the findings of every resource the apply loop never made match
/// (no verified apply in the store, or a failed last apply) into one
/// `not_converged` finding each; returns what to tell a person about each.
fn not_converged(
    findings: &mut Vec<CheckFinding>,
    store: &Store,
) -> Result<BTreeMap<ResourceId, String>> {
    let mut why: BTreeMap<ResourceId, String> = BTreeMap::new();
    for id in findings.iter().map(|f| &f.id) {
        if why.contains_key(id) {
            continue;
        }
        let Some(text) = crate::converged::why_not(store, id)
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

/// Drops the verified stamp (metadata) of every drifted File of a
/// metadata-first class, keeping its declaration hash and time: metadata
/// passes never trust it again, and the next verified apply records a new
/// one.
fn distrust_stamps(findings: &[CheckFinding], classes: &Classes, store: &mut Store) -> Result<()> {
    let mut done: HashSet<&ResourceId> = HashSet::new();
    for f in findings {
        if f.id.kind != "File"
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

/// The policies of the classes, applied to this check's findings.
struct Policies<'a> {
    global: &'a GlobalArgs,
    args: &'a CheckArgs,
    catalogue: &'a Catalogue,
    by_id: &'a HashMap<&'a ResourceId, &'a Resource>,
    /// Loaded on first use (only `accept` needs the documents).
    repository: std::cell::OnceCell<datum_catalog::Repository>,
    classes: &'a Classes,
    host: &'a Host,
    store: &'a mut Store,
    observations: &'a BTreeMap<ResourceId, Observed>,
    person_quarantined: &'a HashSet<String>,
    now: i64,
    backups: Option<BackupStore>,
    act: Act,
    /// Why each not-converged resource is not (no policy acts on those).
    unconverged: &'a BTreeMap<ResourceId, String>,
}

impl Policies<'_> {
    /// One action word per finding, in order.
    fn apply(&mut self, findings: &[CheckFinding]) -> Result<Vec<(String, Option<String>)>> {
        let mut actions: Vec<(String, Option<String>)> =
            vec![("reported".to_owned(), None); findings.len()];
        let mut rules: BTreeMap<ResourceId, Option<String>> = BTreeMap::new();
        let mut to_revert: Vec<ResourceId> = Vec::new();
        let mut handled: BTreeMap<ResourceId, String> = BTreeMap::new();
        for f in findings {
            if handled.contains_key(&f.id) {
                continue;
            }
            if let Some(why) = self.unconverged.get(&f.id) {
                handled.insert(f.id.clone(), why.clone());
                continue;
            }
            let spec = self.classes.get(&f.class);
            let (policy, rule) = spec.policy_for(&f.changed_by);
            let drift_by = if rule.is_some() {
                match f.changed_by.first() {
                    Some(w) => format!(" by {}", w.via),
                    None => " by a writer not identified".to_owned(),
                }
            } else {
                String::new()
            };
            rules.insert(f.id.clone(), rule);
            let look = self.act == Act::Look;
            let action = match policy {
                Policy::Report => "reported".to_owned(),
                Policy::Revert => self.decide_revert(spec, &f.id, &mut to_revert)?,
                Policy::Accept if look => "would accept".to_owned(),
                Policy::Accept => self.accept(&f.id, findings)?,
                Policy::Quarantine if look => match spec.scope {
                    Scope::Host => "would quarantine the host".to_owned(),
                    Scope::Resource => "would quarantine".to_owned(),
                },
                Policy::Quarantine => {
                    let target = match spec.scope {
                        Scope::Host => QuarantineTarget::Host,
                        Scope::Resource => QuarantineTarget::Resource(f.id.clone()),
                    };
                    self.store.quarantine(
                        &target,
                        &format!("drift{drift_by}: {}", f.finding.category),
                        QuarantineSource::Policy,
                        self.now,
                    )?;
                    "quarantined".to_owned()
                }
            };
            handled.insert(f.id.clone(), action);
        }
        if !to_revert.is_empty() {
            for (id, outcome) in self.revert(&to_revert, findings)? {
                handled.insert(id, outcome);
            }
        }
        for (i, f) in findings.iter().enumerate() {
            if let Some(a) = handled.get(&f.id) {
                actions[i] = (a.clone(), rules.get(&f.id).cloned().flatten());
            }
        }
        Ok(actions)
    }

    fn decide_revert(
        &mut self,
        spec: &ClassSpec,
        id: &ResourceId,
        to_revert: &mut Vec<ResourceId>,
    ) -> Result<String> {
        // Break-glass: what a person quarantined stays as the person left it.
        if self.person_quarantined.contains(&id.to_string())
            || self.person_quarantined.contains("host")
        {
            return Ok("not reverted: quarantined by a person".to_owned());
        }
        if self
            .store
            .quarantine_of(&QuarantineTarget::Resource(id.clone()))?
            .is_some()
        {
            return Ok("not reverted: quarantined".to_owned());
        }
        let window_start = self.now - spec.flap_window.as_secs() as i64;
        if self.act == Act::Look {
            // What a reconcile now would decide, without logging a revert.
            let count = self.store.reverts_since(id, window_start)? + 1;
            return Ok(match flap_decision(count, spec.flap_limit) {
                FlapDecision::Revert => "would revert".to_owned(),
                FlapDecision::BackOff => format!(
                    "would back off: reverted {} times within {}",
                    count - 1,
                    humantime::format_duration(spec.flap_window)
                ),
                FlapDecision::Escalate => "would quarantine: flapping".to_owned(),
            });
        }
        let count = self.store.record_revert(id, self.now, window_start)?;
        Ok(match flap_decision(count, spec.flap_limit) {
            FlapDecision::Revert => {
                to_revert.push(id.clone());
                "reverting".to_owned()
            }
            FlapDecision::BackOff => format!(
                "backed off: reverted {} times within {}",
                count - 1,
                humantime::format_duration(spec.flap_window)
            ),
            FlapDecision::Escalate => {
                self.store.quarantine(
                    &QuarantineTarget::Resource(id.clone()),
                    // Shown after the source word ("flapping: drifted
                    // again ..."), so the reason does not repeat it. Every
                    // decision is logged, so the reverts done are the limit
                    // (the one after it backed off), not `count - 1`.
                    &format!(
                        "drifted again after {} revert{} within {}",
                        spec.flap_limit,
                        if spec.flap_limit == 1 { "" } else { "s" },
                        humantime::format_duration(spec.flap_window)
                    ),
                    QuarantineSource::Flapping,
                    self.now,
                )?;
                "quarantined: flapping".to_owned()
            }
        })
    }

    fn backups(&mut self) -> Result<&mut BackupStore> {
        if self.backups.is_none() {
            self.backups = Some(context::open_backups(self.global)?);
        }
        self.backups
            .as_mut()
            .context("the backup store could not be opened")
    }

    /// Saves the drifted content of `id` (regular files it manages, or the
    /// changed and unmanaged files inside a Tree) with `reason`.
    fn save_evidence(
        &mut self,
        id: &ResourceId,
        findings: &[CheckFinding],
        reason: BackupReason,
    ) -> Result<()> {
        let Some(&resource) = self.by_id.get(id) else {
            return Ok(());
        };
        let Some(base) = resource.desired_str("path").map(PathBuf::from) else {
            return Ok(());
        };
        let mut paths: Vec<PathBuf> = Vec::new();
        if id.kind == "Tree" {
            for f in findings.iter().filter(|f| &f.id == id) {
                if matches!(f.finding.category.as_str(), "changed_outside" | "unmanaged") {
                    paths.extend(f.finding.diffs.iter().map(|d| base.join(d.path())));
                }
            }
        } else {
            paths.push(base);
        }
        let host = self.host;
        let now = self.now;
        let sensitive = resource.sensitive;
        let backups = self.backups()?;
        for declared in paths {
            // Through the boundary: never evidence read through a link.
            let Ok(Some(at)) = host.try_locate(&declared) else {
                continue;
            };
            let Ok(Some(stat)) = at.lstat() else {
                continue;
            };
            if stat.kind != datum_host::fs::FileKind::File {
                continue;
            }
            let Ok(bytes) = at.read() else {
                continue;
            };
            backups.save(&SavedFile {
                resource: id,
                declared_path: &declared,
                bytes: &bytes,
                mode: stat.meta.mode,
                uid: stat.meta.uid,
                gid: stat.meta.gid,
                reason,
                sensitive,
                at: now,
            })?;
        }
        Ok(())
    }

    /// Applies the declaration to `ids` only, through the engine (staging,
    /// validators, verify), after saving what drifted.
    fn revert(
        &mut self,
        ids: &[ResourceId],
        findings: &[CheckFinding],
    ) -> Result<Vec<(ResourceId, String)>> {
        for id in ids {
            self.save_evidence(id, findings, BackupReason::Revert)?;
        }
        let wanted: HashSet<&ResourceId> = ids.iter().collect();
        let filtered = Catalogue {
            host: self.catalogue.host.clone(),
            boundary: self.catalogue.boundary.clone(),
            resources: self
                .catalogue
                .resources
                .iter()
                .filter(|r| wanted.contains(&r.id))
                .cloned()
                .collect(),
            autorequires: Vec::new(),
        };
        let mut ctx = PassContext {
            registry: datum_providers::registry(),
            host: self.host,
            mode: Mode::Apply,
            store: Some(&mut *self.store),
            backups: self.backups.as_mut(),
            now: self.now,
            skip: HashSet::new(),
        };
        let summary =
            datum_engine::run_pass(&filtered, &mut ctx, &mut datum_engine::SilentReporter);
        Ok(summary
            .resources
            .into_iter()
            .filter(|r| wanted.contains(&r.id))
            .map(|r| {
                let word = match &r.outcome {
                    datum_core::Outcome::Changed { .. } | datum_core::Outcome::Unchanged => {
                        "reverted".to_owned()
                    }
                    other => match other {
                        datum_core::Outcome::Failed { reason, .. } => {
                            format!("revert failed: {reason}")
                        }
                        o => format!("revert {}", o.word()),
                    },
                };
                (r.id, word)
            })
            .collect())
    }

    /// Records the observation as accepted and writes the patch that makes
    /// the repository follow it.
    fn accept(&mut self, id: &ResourceId, findings: &[CheckFinding]) -> Result<String> {
        let (Some(&resource), Some(observed)) = (self.by_id.get(id), self.observations.get(id))
        else {
            return Ok("reported".to_owned());
        };
        self.save_evidence(id, findings, BackupReason::Drift)?;
        self.store.accept(
            id,
            &resource.declaration_hash,
            &observed.acceptance_hash(),
            self.now,
        )?;
        // A private folder, opened once: every patch and the summary are
        // written relative to it without following a link.
        let dir = match &self.args.patch_dir {
            Some(dir) => datum_host::PrivateDir::open_path(dir, true),
            None => datum_host::PrivateDir::open_in(
                self.host,
                &Path::new(context::STATE_FOLDER).join("accepted"),
                true,
            ),
        }
        .context("cannot open the folder for accepted patches")?
        .context("the folder for accepted patches could not be created")?;
        if self.repository.get().is_none() {
            let loaded = load_repository(self.global)?;
            let _ = self.repository.set(loaded);
        }
        let repository = self
            .repository
            .get()
            .context("the repository could not be loaded")?;
        let written = write_accept_patch(repository, resource, observed, findings, &dir)?;
        // Plan and apply point at it while the repository has not followed.
        self.store
            .set_accepted_patch(id, &written.display().to_string())?;
        Ok(format!("accepted (patch: {})", written.display()))
    }
}

/// Writes `<dir>/<Kind>-<name>.patch` (content, against the repository
/// source when it is a `source:` file) or `.content` (the observed bytes, for
/// inline content and templates), and appends to `<dir>/SUMMARY.md` what to
/// commit. Returns the file written.
fn write_accept_patch(
    repository: &datum_catalog::Repository,
    resource: &Resource,
    observed: &Observed,
    findings: &[CheckFinding],
    dir: &datum_host::PrivateDir,
) -> Result<PathBuf> {
    let id = &resource.id;
    let mut notes: Vec<String> = Vec::new();
    let mut name = datum_drift::policy::patch_file_name(id, "txt");
    let mut written = dir.file_path(&name);
    let source = declared_source(repository, id);
    let declared = resource
        .content
        .as_ref()
        .and_then(|c| datum_host::repo::content_bytes(c).ok());
    if observed.presence == Presence::Present
        && let (Some(live), Some(declared)) = (&observed.content, declared)
        && !resource.sensitive
        && live.as_slice() != declared.as_ref()
    {
        match &source {
            Some((key, rel)) if key == "source" => {
                if let Some(patch) = datum_drift::policy::content_patch(rel, &declared, live) {
                    name = datum_drift::policy::patch_file_name(id, "patch");
                    written = dir.file_path(&name);
                    dir.write_atomic(&name, patch.as_bytes())
                        .with_context(|| format!("cannot write {}", written.display()))?;
                    notes.push(format!(
                        "apply `{}` to the repository (`patch -p1` or `git apply`): it updates `{rel}`",
                        written.display()
                    ));
                }
            }
            other => {
                name = datum_drift::policy::patch_file_name(id, "content");
                written = dir.file_path(&name);
                dir.write_atomic(&name, live)
                    .with_context(|| format!("cannot write {}", written.display()))?;
                let what = match other {
                    Some((key, rel)) => format!("`{key}: {rel}`"),
                    None => "the inline `content:`".to_owned(),
                };
                notes.push(format!(
                    "the observed content is in `{}`; carry it into {what} by hand",
                    written.display()
                ));
            }
        }
    }
    if id.kind == "Tree" {
        // A Tree's entries: what to copy into (or remove from) its source
        // folder. The live files are in the backup store (reason `drift`).
        let base = resource.desired_str("path").unwrap_or("");
        let folder = source.as_ref().map_or_else(
            || "(the Tree's source folder)".to_owned(),
            |(_, rel)| rel.clone(),
        );
        for f in findings.iter().filter(|f| &f.id == id) {
            for d in &f.finding.diffs {
                let entry = d.path();
                notes.push(match f.finding.category.as_str() {
                    "deleted_outside" => {
                        format!("remove `{folder}/{entry}` (deleted on the host)")
                    }
                    "type_changed" => format!(
                        "`{base}/{entry}` is now a {}: make `{folder}/{entry}` one",
                        d.after_display()
                    ),
                    _ => format!(
                        "copy `{base}/{entry}` from the host to `{folder}/{entry}` (`datum backup list {base}/{entry}`)"
                    ),
                });
            }
        }
    } else {
        for f in findings.iter().filter(|f| &f.id == id) {
            for d in f.finding.diffs.iter().filter(|d| d.path() != "content") {
                let at = resource
                    .field_origins
                    .get(d.path())
                    .map_or_else(|| resource.origin.to_string(), ToString::to_string);
                notes.push(format!(
                    "{at}: set `{}` to `{}` ({})",
                    d.path(),
                    d.after_display(),
                    f.finding.category
                ));
            }
        }
    }
    if notes.is_empty() {
        notes.push("nothing to carry (sensitive or no declared content)".to_owned());
        dir.write_atomic(&name, b"")
            .with_context(|| format!("cannot write {}", written.display()))?;
    }
    let mut summary = dir
        .append("SUMMARY.md")
        .with_context(|| format!("cannot write {}", dir.file_path("SUMMARY.md").display()))?;
    writeln!(summary, "## {id} (declared at {})", resource.origin)?;
    for n in notes {
        writeln!(summary, "- {n}")?;
    }
    writeln!(summary)?;
    Ok(written)
}

/// The content key (`source`, `template`) of the document that declares
/// `id`'s content, and its path relative to the repository.
fn declared_source(
    repository: &datum_catalog::Repository,
    id: &ResourceId,
) -> Option<(String, String)> {
    let mut found = None;
    for doc in repository.documents.iter().filter(|d| &d.id == id) {
        for (key, value, _) in doc.desired_fields() {
            if matches!(key, "source" | "template") {
                let text = value.as_str()?;
                let layer = repository.layer_of(doc)?;
                let rel = layer.path.join(text);
                found = Some((key.to_owned(), rel.to_string_lossy().into_owned()));
            } else if key == "content" {
                found = None;
            }
        }
    }
    found
}

/// The check's progress bar (the shared style, `render::progress`): resources
/// advance between batches; files and bytes hashed move inside them.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn new(total: usize) -> Self {
        Progress {
            bar: crate::render::progress::resources(total as u64),
        }
    }

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
