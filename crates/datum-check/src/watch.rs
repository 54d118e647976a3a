//! The agent's check (`datum agent`): one class, every class, or the few
//! resources a watch reported, on the catalogue the agent has loaded.
//!
//! A class whose policy is `report` and whose content mode is `full` is
//! checked here resource by resource (the catalogue stays compiled between
//! checks, so a watch-triggered check of one file costs one observation),
//! and what is known of each resource is kept in [`Memory`] so class-wide
//! counts stay right across partial checks. A class with another policy
//! (`revert`, `accept`, `quarantine`) or `content: metadata`, and every
//! class in a sampled metadata round, is checked by [`crate::run()`] with
//! [`Act::Reconcile`], in process, on the same loaded catalogue: the
//! policies (flap detection, backups, patches) and the metadata-first rules
//! behave exactly as `datum reconcile` documents, and a revert applies the
//! last good catalogue, never a repository edit on disk that was not
//! reloaded (or one that failed to load). Its report is folded into the
//! same counts. The check is recorded in the state store, with the fleet
//! report of the agent queued in the same transaction.
//!
//! Must not: take the root lock (the caller holds it for the whole check),
//! print (warnings go to the caller's `warn`), or put a resource name or
//! value in a metric.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use datum_agent::{
    Cancel, CheckReport, ClassReport, ClassSpec, Conclusion, Loaded, Scope, WatchScope, WatchTarget,
};
use datum_catalog::snapshot::LazyCatalogue;
use datum_catalog::{Catalogue, HostIdentity};
use datum_core::{Resource, ResourceId};
use datum_drift::check::{Handling, Inspected, findings_for};
use datum_drift::classes::{Classes, ContentMode, Policy};
use datum_engine::{ContentDiff, Inspection};
use datum_host::Host;
use datum_providers::Registry;
use datum_report::Signature;
use datum_reporting::Reporting;
use datum_store::backup::BackupStore;
use datum_store::{FindingScope, PassRecord, Store};

use crate::{Act, CheckError, Checked, Checking, Options};

/// Resources observed per batch: the cancel flag is looked at between
/// batches, so SIGTERM waits for at most this many observations.
const BATCH: usize = 256;

/// What the agent last knew about one resource (merged across partial
/// checks so class-wide counts stay right).
#[derive(Debug, Clone)]
struct Known {
    class: String,
    state: &'static str,
    kinds: Vec<String>,
    /// Its findings as the fleet report carries them (first seen filled
    /// in once the history has dated them).
    fleet: Vec<datum_fleet::Finding>,
    /// A Tree's declared and observed roots.
    tree: Option<datum_fleet::TreeFingerprint>,
}

/// What the agent knows of each resource between checks.
#[derive(Debug, Default)]
pub struct Memory {
    known: HashMap<ResourceId, Known>,
    /// Resources a policy of this agent reverted, and when the check that
    /// reverted them ended: the revert's own write is a file-change event
    /// too (see [`OWN_WRITE_WINDOW`]).
    reverted: HashMap<ResourceId, Instant>,
}

/// How long after a check reverted a resource a watch event of it may be
/// the revert's own write: such an event sets off no check when the
/// resource is still as declared. Longer than the agent's debounce (100 ms
/// by default); with a longer one the check runs, as for any event.
pub const OWN_WRITE_WINDOW: Duration = Duration::from_secs(5);

impl Memory {
    /// Forgets resources `catalogue` no longer declares (after a reload).
    pub fn keep_declared(&mut self, catalogue: &Catalogue) {
        let ids: HashSet<&ResourceId> = catalogue.resources.iter().map(|r| &r.id).collect();
        self.known.retain(|id, _| ids.contains(id));
        self.reverted.retain(|id, _| ids.contains(id));
    }
}

/// One check of the agent, on what it has loaded.
pub struct AgentCheck<'a> {
    pub registry: &'a Registry,
    /// The catalogue the agent loaded (the last good one).
    pub catalogue: &'a Catalogue,
    /// `datum.yaml`'s `classes:` as loaded (the in-process reconcile's
    /// catalogue carries them).
    pub classes_doc: &'a serde_json::Value,
    pub classes: &'a Classes,
    pub identity: &'a HostIdentity,
    pub host: &'a Host,
    /// The repository folder pinned at the last good load (accept's
    /// patches name its files).
    pub repo: &'a Path,
    /// The revision the loaded catalogue was compiled from, as its fleet
    /// reports name it (what an apply of it reports: `git:<commit>`,
    /// `stamp:<digest>`), read when it was loaded: never the repository as
    /// it is on disk now, which `datum pull` or a person may have moved on
    /// without a reload.
    pub revision: &'a str,
    /// The layers this host uses (the reconcile's report).
    pub layers: Vec<String>,
    pub backups: &'a dyn Fn() -> Result<BackupStore, crate::error::OpenerError>,
    /// The agent's state store, if it could open one.
    pub store: Option<&'a mut Store>,
    /// Without a store: why (the agent said so when it could not open it).
    pub without_store: crate::WithoutStore,
    /// `report.yaml`, when the host reports to a fleet server.
    pub reporting: Option<&'a Reporting>,
    /// Whether attribution runs (then a resource found clean forgets who
    /// changed it before).
    pub attributing: bool,
    /// Warnings not tied to a metric (a resource's error, a store write).
    pub warn: &'a dyn Fn(&str),
    pub memory: &'a mut Memory,
    /// The host's digest key: a sensitive Tree's roots reach the fleet
    /// report only as its keyed digests (none without a key).
    pub digest_key: Option<&'a datum_core::DigestKey>,
}

/// What [`run_agent_check`] returns.
pub struct AgentChecked {
    pub report: CheckReport,
    /// Whether a fleet report was queued (the caller wakes its courier).
    pub queued: bool,
}

/// Checks `scope` of what the agent has loaded (the caller holds the root
/// lock for the whole check).
pub fn run_agent_check(c: AgentCheck<'_>, scope: &Scope, cancel: &Cancel) -> AgentChecked {
    let now = Instant::now();
    c.memory
        .reverted
        .retain(|_, at| now.duration_since(*at) <= OWN_WRITE_WINDOW);
    let mut state = State {
        reverted: &mut c.memory.reverted,
        known: &mut c.memory.known,
        registry: c.registry,
        catalogue: c.catalogue,
        classes_doc: c.classes_doc,
        classes: c.classes,
        identity: c.identity,
        host: c.host,
        repo: c.repo,
        revision: c.revision,
        layers: c.layers,
        backups: c.backups,
        store: c.store,
        without_store: c.without_store,
        reporting: c.reporting,
        attributing: c.attributing,
        warn: c.warn,
        digest_key: c.digest_key,
        queued: false,
    };
    if let Scope::Resources { ids, .. } = scope
        && state.own_writes_only(ids)
    {
        return AgentChecked {
            report: CheckReport {
                own_writes: ids.len() as u64,
                ..CheckReport::default()
            },
            queued: false,
        };
    }
    let report = state.check(scope, cancel);
    AgentChecked {
        report,
        queued: state.queued,
    }
}

/// [`AgentCheck`] while it runs.
struct State<'a> {
    known: &'a mut HashMap<ResourceId, Known>,
    reverted: &'a mut HashMap<ResourceId, Instant>,
    registry: &'a Registry,
    catalogue: &'a Catalogue,
    classes_doc: &'a serde_json::Value,
    classes: &'a Classes,
    identity: &'a HostIdentity,
    host: &'a Host,
    repo: &'a Path,
    revision: &'a str,
    layers: Vec<String>,
    backups: &'a dyn Fn() -> Result<BackupStore, crate::error::OpenerError>,
    store: Option<&'a mut Store>,
    without_store: crate::WithoutStore,
    reporting: Option<&'a Reporting>,
    attributing: bool,
    warn: &'a dyn Fn(&str),
    digest_key: Option<&'a datum_core::DigestKey>,
    queued: bool,
}

impl State<'_> {
    /// Whether the watch events of `ids` are this agent's own revert
    /// writes and nothing since: each was reverted by a check that ended
    /// within [`OWN_WRITE_WINDOW`], and each is, observed now, as declared
    /// (no finding). A change made after the revert shows in the
    /// observation (or, made after it, sets off an event of its own), so it
    /// is never skipped; anything else runs the check.
    fn own_writes_only(&self, ids: &[ResourceId]) -> bool {
        if ids.is_empty() || !ids.iter().all(|id| self.reverted.contains_key(id)) {
            return false;
        }
        let wanted: HashSet<&ResourceId> = ids.iter().collect();
        let resources: Vec<&Resource> = self
            .catalogue
            .resources
            .iter()
            .filter(|r| wanted.contains(&r.id))
            .collect();
        if resources.len() != wanted.len() {
            return false;
        }
        let inspections =
            datum_engine::inspect_all(self.registry, &resources, self.host, ContentDiff::Skip);
        resources.iter().zip(inspections).all(|(r, inspection)| {
            let known = inspect(
                self.registry,
                r,
                inspection,
                &HashSet::new(),
                None,
                &mut Vec::new(),
                None,
            );
            known.state == "converged" && known.kinds.is_empty()
        })
    }

    /// Checks `scope` (the caller holds the root lock); `cancel` is looked
    /// at between classes and batches.
    fn check(&mut self, scope: &Scope, cancel: &Cancel) -> CheckReport {
        let (catalogue, identity, host) = (self.catalogue, self.identity, self.host);
        let started_at = crate::now();
        let wanted: Option<HashSet<&ResourceId>> = match scope {
            Scope::Resources { ids, .. } => Some(ids.iter().collect()),
            _ => None,
        };
        let in_scope = |r: &Resource| match scope {
            Scope::All => true,
            Scope::Class(c) => r.class == *c,
            Scope::Resources { class, .. } => {
                r.class == *class && wanted.as_ref().is_some_and(|w| w.contains(&r.id))
            }
        };
        // Resources grouped by class, in catalogue order.
        let mut by_class: BTreeMap<String, Vec<&Resource>> = BTreeMap::new();
        match scope {
            Scope::All => {
                for name in self.classes.classes.keys() {
                    by_class.entry(name.clone()).or_default();
                }
            }
            Scope::Class(c) | Scope::Resources { class: c, .. } => {
                by_class.entry(c.clone()).or_default();
            }
        }
        for r in catalogue.resources.iter().filter(|r| in_scope(r)) {
            by_class.entry(r.class.clone()).or_default().push(r);
        }
        let quarantined: HashSet<ResourceId> = match self.store.as_deref().map(Store::quarantined) {
            Some(Ok(q)) => {
                datum_drift::policy::skip_set(&q, catalogue.resources.iter().map(|r| &r.id))
            }
            _ => HashSet::new(),
        };

        let mut report = CheckReport::default();
        let mut signatures: Vec<Signature> = Vec::new();
        let mut subjects: Vec<String> = Vec::new();
        let mut inspections: Vec<(String, u64)> = Vec::new();
        let mut any_drift = false;
        let mut any_error = false;
        let mut delegated: Vec<String> = Vec::new();
        // Resources found clean here: whoever changed them before is
        // forgotten (the next drift is somebody else's doing).
        let mut clean: Vec<ResourceId> = Vec::new();
        // `datum reconcile` runs a class whose policy acts on drift, and one
        // checked metadata-first (its audit cadence lives in check's
        // history); this process checks the rest by full content.
        // Under the fleet's sampling plan, a round that is not this host's
        // deep round is a metadata check: `datum check` applies the plan.
        let shallow = self.reporting.is_some()
            && self
                .store
                .as_ref()
                .and_then(|s| s.sampling_plan().ok().flatten())
                .is_some_and(|p| !p.deep_at(&identity.name, started_at));
        let delegate_of = |class: &str| {
            let spec = self.classes.get(class);
            (
                shallow || spec.acts() || spec.content == ContentMode::Metadata,
                spec.policy,
            )
        };
        // Classes whose policy acts first (as `datum check` orders nothing,
        // this only keeps the log readable).
        let mut order: Vec<(&String, &Vec<&Resource>, bool, Policy)> = by_class
            .iter()
            .map(|(c, rs)| {
                let (delegate, policy) = delegate_of(c);
                (c, rs, delegate, policy)
            })
            .collect();
        order.sort_by_key(|(_, _, delegate, _)| !*delegate);
        // Whether an in-process reconcile queued a fleet report.
        let mut queued = false;
        // The sensitive paths and words of this check, read at the first
        // question, once: the reconciles' passes, their fleet reports'
        // warnings and the log below all ask these.
        let sensitive = datum_engine::SensitiveOnce::new(catalogue, self.registry);
        'classes: for (class, resources, delegate, policy) in order {
            if cancel.is_cancelled() {
                report.cancelled = true;
                break;
            }
            let t0 = Instant::now();
            if delegate {
                let checked = if self.classes.get(class).acts() && self.store.is_none() {
                    Err(CheckError::NoStore)
                } else {
                    self.reconcile_class(class, &sensitive)
                };
                // The reconcile covers the whole class, even when a watch
                // named a few of its files: its picture is of every
                // resource of the class, and what the resource-by-resource
                // path knew of any of them is stale.
                let resources: Vec<&Resource> = catalogue
                    .resources
                    .iter()
                    .filter(|r| r.class == *class)
                    .collect();
                for r in &resources {
                    self.known.remove(&r.id);
                }
                match checked {
                    Ok(checked) => {
                        let ended = Instant::now();
                        for reported in &checked.report.findings {
                            if reported.handling == Handling::Reverted {
                                self.reverted.insert(reported.finding.id.clone(), ended);
                            }
                        }
                        any_drift |= checked.conclusion == Conclusion::Drift;
                        any_error |= checked.conclusion == Conclusion::Errors;
                        self.say_failed(&checked.report.errors);
                        self.say_warnings(&checked.report.warnings, &sensitive);
                        let picture = picture_from_report(
                            &resources,
                            &checked.report,
                            &mut report.validation_failures,
                        );
                        report.classes.insert(
                            class.clone(),
                            ClassReport {
                                duration: t0.elapsed(),
                                ..picture
                            },
                        );
                        queued |= checked.reporting.is_some();
                    }
                    Err(e) => {
                        any_error = true;
                        report.failed += 1;
                        // The state store refused a read or a write: the
                        // check's history is not recorded (a revert whose
                        // flap record it refused was not made).
                        if store_failure(&e) {
                            report.unrecorded += 1;
                        }
                        (self.warn)(&format!(
                            "check of class {class} (policy {}) failed: {e:#}",
                            policy.word()
                        ));
                    }
                }
                delegated.push(class.clone());
                continue;
            }
            for chunk in resources.chunks(BATCH) {
                if cancel.is_cancelled() {
                    report.cancelled = true;
                    break 'classes;
                }
                let inspections =
                    datum_engine::inspect_all(self.registry, chunk, host, ContentDiff::Skip);
                for (resource, inspection) in chunk.iter().zip(inspections) {
                    subjects.push(resource.id.to_string());
                    let known = inspect(
                        self.registry,
                        resource,
                        inspection,
                        &quarantined,
                        self.store.as_deref(),
                        &mut signatures,
                        self.digest_key,
                    );
                    if known.state == "converged" {
                        clean.push(resource.id.clone());
                    }
                    // As `datum check`: drift, or a quarantine holding it
                    // (exit 2 with or without drift under it).
                    any_drift |= known.state == "drifted" || known.state == "quarantined";
                    any_error |= known.state == "failed";
                    self.known.insert(resource.id.clone(), known);
                }
            }
            // Configuration files the class's packages installed, edited
            // since: findings of the Package, as `datum check` reports them.
            let declared = || {
                crate::extra::Declared::new(
                    self.registry,
                    catalogue
                        .resources
                        .iter()
                        .filter_map(|r| Some((r.id.kind.as_str(), self.registry.path_of(r)?))),
                )
            };
            let (mut package_files, mut failed) =
                crate::extra::findings(self.registry, declared, resources.iter().copied(), host);
            // Reloads owed, live configurations their group validator refuses.
            let (activation, activation_failed) = crate::activation::findings(
                resources.iter().map(|r| (*r).into()),
                self.store.as_deref(),
                host,
            );
            package_files.extend(activation);
            failed.extend(activation_failed);
            any_error |= !failed.is_empty();
            self.say_failed(&failed);
            for f in package_files {
                any_drift = true;
                signatures.push(f.finding.signature());
                if let Some(known) = self.known.get_mut(&f.id) {
                    known.kinds.push(f.finding.category.clone());
                    if known.state == "converged" {
                        known.state = "drifted";
                    }
                }
            }
            let took = t0.elapsed();
            inspections.push((
                class.clone(),
                u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            ));
            report
                .classes
                .insert(class.clone(), self.class_picture(class, took));
        }
        report.conclusion = Conclusion::of(any_error, any_drift);
        if !report.cancelled {
            // A delegated class recorded its own history: clearing "all"
            // findings here would erase its findings.
            let all = matches!(scope, Scope::All) && delegated.is_empty();
            let recorded: Vec<(String, u64)> = inspections
                .into_iter()
                .filter(|(c, _)| !delegated.contains(c))
                .collect();
            if !recorded.is_empty()
                && !self.record(
                    command_for(scope),
                    all,
                    started_at,
                    &report,
                    &signatures,
                    &subjects,
                    &recorded,
                )
            {
                report.unrecorded += 1;
            }
        }
        if let (Some(store), false) = (self.store.as_deref_mut(), clean.is_empty())
            && self.attributing
            && let Err(e) = store.forget_writers(&clean)
        {
            (self.warn)(&format!(
                "could not forget who changed clean resources: {e}"
            ));
        }
        self.queued |= queued;
        report
    }

    /// Logs a resource that could not be checked, by name with the reason,
    /// unless it is sensitive: its name can say what it protects and the
    /// reason names its path, and the log is read by more people than the
    /// host's secrets are meant for. `datum check` names it.
    fn say_failed(&self, failed: &[(String, String)]) {
        if failed.is_empty() {
            return;
        }
        let sensitive: HashSet<String> = self
            .catalogue
            .resources
            .iter()
            .filter(|r| r.sensitive)
            .map(|r| r.id.to_string())
            .collect();
        for (id, reason) in failed {
            if sensitive.contains(id) {
                (self.warn)(
                    "a sensitive resource could not be checked (its name and the reason are left out of the log; `datum check` shows them)",
                );
            } else {
                (self.warn)(&format!("{id}: {reason}"));
            }
        }
    }

    /// Logs what the reconcile's passes said that is no resource's failure
    /// (a revert's warnings: shadow-utils' words on success, a staging
    /// folder moved away), one event each, as `datum reconcile` shows them.
    /// One that names a sensitive resource or its path is logged without
    /// its words, as [`Self::say_failed`] leaves such a resource out.
    /// `sensitive` is the check's, of this catalogue.
    fn say_warnings(&self, warnings: &[String], sensitive: &datum_engine::SensitiveOnce<'_>) {
        // Paths as the engine withholds a validator's output naming them
        // (datum_engine::SensitivePaths); ids as say_failed leaves them out.
        for warning in warnings {
            if sensitive.names_sensitive(warning) {
                (self.warn)(
                    "a revert of a sensitive resource said a warning (its name and the words are left out of the log)",
                );
            } else {
                // A path a local user chose may be in it: escaped, never a
                // sequence the terminal reading the journal obeys.
                (self.warn)(&format!(
                    "revert: {}",
                    datum_core::text::visible(warning, &[])
                ));
            }
        }
    }

    /// `datum reconcile --class CLASS` in process, on the loaded catalogue.
    /// `sensitive`: the check's (of the same catalogue), which the
    /// reconcile's passes and its report's warnings ask.
    fn reconcile_class(
        &mut self,
        class: &str,
        sensitive: &datum_engine::SensitiveOnce<'_>,
    ) -> Result<Checked, CheckError> {
        let options = Options {
            class: Some(class.to_owned()),
            ..Options::default()
        };
        crate::run(Checking {
            registry: self.registry,
            repo: self.repo,
            layers: self.layers.clone(),
            options: &options,
            act: Act::Reconcile,
            identity: self.identity,
            // The whole catalogue: the extra findings of a class leave out
            // the paths any resource declares.
            catalogue: LazyCatalogue::compiled(self.catalogue.clone(), self.classes_doc.clone()),
            catalogue_reused: true,
            classes: self.classes,
            host: self.host,
            // No store: the agent could not open it, and said why.
            without_store: self.without_store,
            store: self.store.as_deref_mut(),
            backups: self.backups,
            started: Instant::now(),
            progress: None,
            digest_key: self.digest_key,
            sensitive: Some(sensitive),
        })
    }

    /// The class-wide picture from everything known so far.
    fn class_picture(&self, class: &str, took: Duration) -> ClassReport {
        let mut picture = ClassReport {
            duration: took,
            ..ClassReport::default()
        };
        for k in self.known.values().filter(|k| k.class == class) {
            *picture.states.entry(k.state.to_owned()).or_insert(0) += 1;
            for kind in &k.kinds {
                *picture.findings.entry(kind.clone()).or_insert(0) += 1;
            }
        }
        picture
    }

    /// Records the check in the state store (one transaction), like `datum
    /// check` does, so `datum schedule` sees the agent's inspection times and
    /// finding history continues across agent restarts. Whether it was
    /// recorded with its fleet report (false: logged here, counted by the
    /// caller).
    #[expect(
        clippy::too_many_arguments,
        reason = "one call site; a struct would only rename them"
    )]
    fn record(
        &mut self,
        command: &str,
        all: bool,
        started_at: i64,
        report: &CheckReport,
        signatures: &[Signature],
        subjects: &[String],
        inspections: &[(String, u64)],
    ) -> bool {
        let host = self.identity.name.clone();
        let fleet_report = self.fleet_common(started_at, report);
        // No store: the agent could not open it (a full file system, a
        // damaged file) and said so; the check goes unrecorded.
        let Some(store) = self.store.as_deref_mut() else {
            return false;
        };
        let mut queued = true;
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for class in report.classes.values() {
            for (state, n) in &class.states {
                *counts.entry(state.clone()).or_insert(0) += n;
            }
        }
        let finished_at = crate::now();
        let result = (|| {
            let batch = store.batch()?;
            let pass_id = batch.record_pass(&PassRecord {
                started_at,
                finished_at,
                command: command.to_owned(),
                host: host.clone(),
                counts,
                duration_ms: inspections.iter().map(|(_, ms)| ms).sum(),
                exit_code: report.conclusion.exit_code().code(),
            })?;
            for (class, ms) in inspections {
                batch.record_class_inspection(pass_id, class, *ms)?;
            }
            let finding_scope = if all {
                FindingScope::All
            } else {
                FindingScope::Subjects(subjects)
            };
            let ages = batch.record_findings_scoped(
                pass_id,
                &host,
                signatures,
                finished_at,
                finding_scope,
            )?;
            // Date the fleet findings by the history, then queue the
            // report in the same transaction.
            for (sig, age) in signatures.iter().zip(&ages) {
                let id = datum_fleet::report::finding_signature(&sig.subject, &sig.category, &{
                    let mut p = sig.paths.clone();
                    p.sort();
                    p.dedup();
                    p
                });
                for k in self.known.values_mut() {
                    for f in k.fleet.iter_mut().filter(|f| f.signature == id) {
                        f.first_seen = age.first_seen;
                    }
                }
            }
            if let (Some(r), Some(report)) = (self.reporting, fleet_report) {
                let report = fill_agent_report(report, self.known, inspections, finished_at);
                if let Err(e) = r.enqueue(&batch, report, finished_at) {
                    (self.warn)(&format!("could not queue the fleet report: {e}"));
                    queued = false;
                }
            }
            batch.commit()
        })();
        if let Err(e) = result {
            (self.warn)(&format!(
                "could not record the check in the state store: {e}"
            ));
            return false;
        }
        if self.reporting.is_some() && queued {
            self.queued = true;
        }
        queued
    }

    /// The parts of an agent report known before the check is recorded:
    /// who, what revision, class bounds, counts of the classes inspected.
    fn fleet_common(&self, started_at: i64, report: &CheckReport) -> Option<datum_fleet::Report> {
        let reporting = self.reporting?;
        let (identity, catalogue, classes) = (self.identity, self.catalogue, self.classes);
        let mut per_class: BTreeMap<String, u64> = BTreeMap::new();
        for r in &catalogue.resources {
            *per_class.entry(r.class.clone()).or_insert(0) += 1;
        }
        let (bounds, expected) = datum_reporting::class_bounds(
            classes,
            &per_class,
            self.store.as_deref(),
            reporting.interval(),
        );
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for class in report.classes.values() {
            for (state, n) in &class.states {
                *counts.entry(state.clone()).or_insert(0) += n;
            }
        }
        let finished = crate::now();
        let common = datum_reporting::build::Common {
            kind: datum_fleet::ReportKind::Agent,
            host: identity.name.clone(),
            labels: identity.labels.clone(),
            // The agent keeps its catalogue compiled: the revision is the
            // one it was loaded from.
            revision: self.revision.to_owned(),
            catalogue: datum_reporting::build::catalogue_hash(
                catalogue
                    .resources
                    .iter()
                    .map(|r| (r.id.to_string(), r.declaration_hash.as_str())),
            ),
            started_at,
            finished_at: finished,
            duration_ms: u64::try_from(finished - started_at).unwrap_or(0) * 1000,
            exit_code: report.conclusion.exit_code().code(),
            resources: catalogue.resources.len() as u64,
            classes: bounds,
            expected_interval_s: expected,
        };
        let mut out = common.report();
        out.counts = counts;
        Some(out)
    }
}

/// Whether a check failed because the state store refused it (its outcome,
/// and what a policy did before, then go unrecorded).
fn store_failure(e: &CheckError) -> bool {
    matches!(
        e,
        CheckError::Store(_) | CheckError::State { .. } | CheckError::Report(_)
    )
}

/// The agent report of the classes this process inspected: their whole
/// picture (every open finding and Tree root the agent knows in them, not
/// only those of the resources a watch just looked at).
fn fill_agent_report(
    mut report: datum_fleet::Report,
    known: &HashMap<ResourceId, Known>,
    inspections: &[(String, u64)],
    finished_at: i64,
) -> datum_fleet::Report {
    let classes: BTreeSet<&str> = inspections.iter().map(|(c, _)| c.as_str()).collect();
    report.classes_checked = classes.iter().map(|c| (*c).to_owned()).collect();
    report.finished_at = finished_at;
    let mut ids: Vec<&ResourceId> = known
        .iter()
        .filter(|(_, k)| classes.contains(k.class.as_str()))
        .map(|(id, _)| id)
        .collect();
    ids.sort();
    for id in ids {
        let k = &known[id];
        report.findings.extend(k.fleet.iter().cloned());
        report.trees.extend(k.tree.clone());
    }
    report
}

/// A class picture from the in-process reconcile of the whole class:
/// reverted resources count as changed, accepted ones as converged, those
/// with open findings as drifted, quarantined and erroring ones as such;
/// what the policy did (reverted, accepted, a revert that failed) is
/// counted apart, per resource.
fn picture_from_report(
    resources: &[&Resource],
    checked: &datum_drift::check::CheckReport,
    validation_failures: &mut BTreeMap<String, u64>,
) -> ClassReport {
    let by_id: HashMap<&ResourceId, &Resource> = resources.iter().map(|r| (&r.id, *r)).collect();
    let by_name: HashMap<String, &ResourceId> = resources
        .iter()
        .map(|r| (r.id.to_string(), &r.id))
        .collect();
    let mut state: HashMap<&ResourceId, &'static str> = HashMap::new();
    // Each resource once per act, whatever its number of findings.
    let mut acted: BTreeMap<&'static str, HashSet<&ResourceId>> = BTreeMap::new();
    let mut picture = ClassReport::default();
    for reported in &checked.findings {
        let f = &reported.finding;
        let Some((id, r)) = by_id.get_key_value(&f.id) else {
            continue;
        };
        let action = reported.action.as_str();
        let s = reported.handling.state();
        let act = match reported.handling {
            Handling::Reverted => Some("reverted"),
            Handling::Accepted => Some("accepted"),
            Handling::RevertFailed => Some("revert_failed"),
            Handling::Open | Handling::Quarantined => None,
        };
        if let Some(act) = act {
            acted.entry(act).or_default().insert(*id);
        }
        if reported.handling == Handling::RevertFailed
            && action.contains("validat")
            && let Some(v) = &r.validate
        {
            *validation_failures.entry(v.clone()).or_insert(0) += 1;
        }
        if s == "drifted" || s == "quarantined" || s == "failed" {
            *picture
                .findings
                .entry(f.finding.category.clone())
                .or_insert(0) += 1;
        }
        // The worst state of a resource with several findings wins.
        let rank = |s: &str| STATE_RANK.iter().position(|x| *x == s).unwrap_or(0);
        let entry = state.entry(*id).or_insert(s);
        if rank(s) > rank(entry) {
            *entry = s;
        }
    }
    for (target, _) in &checked.quarantined {
        if target == "host" {
            for r in resources {
                state.insert(&r.id, "quarantined");
            }
        } else if let Some(id) = by_name.get(target) {
            state.insert(*id, "quarantined");
        }
    }
    for (resource, _) in &checked.errors {
        if let Some(id) = by_name.get(resource) {
            state.insert(*id, "failed");
        }
    }
    for r in resources {
        let s = state.get(&r.id).copied().unwrap_or("converged");
        *picture.states.entry(s.to_owned()).or_insert(0) += 1;
    }
    for (act, ids) in acted {
        picture.acted.insert(act.to_owned(), ids.len() as u64);
    }
    picture
}

/// States from least to most in need of attention.
const STATE_RANK: [&str; 6] = [
    "converged",
    "changed",
    "drifted",
    "blocked",
    "failed",
    "quarantined",
];

/// The `command` a check is recorded under. A check of the few resources a
/// watch reported is not an inspection of the class: recorded as `check`,
/// its tiny duration would pull down the p95 `datum schedule` adds to a
/// class's interval.
fn command_for(scope: &Scope) -> &'static str {
    match scope {
        Scope::Resources { .. } => WATCH_COMMAND,
        _ => "check",
    }
}

/// The `command` of watch-triggered checks in the state store; `datum
/// schedule` can read a watched class's inspection time from these.
pub const WATCH_COMMAND: &str = "agent-watch";

/// Observes-and-diffs one resource into what the agent keeps.
fn inspect(
    registry: &Registry,
    resource: &Resource,
    inspection: Result<Inspection, datum_providers::ProviderError>,
    quarantined: &HashSet<ResourceId>,
    store: Option<&datum_store::Store>,
    signatures: &mut Vec<Signature>,
    digest_key: Option<&datum_core::DigestKey>,
) -> Known {
    let mut known = Known {
        class: resource.class.clone(),
        state: "converged",
        kinds: Vec::new(),
        fleet: Vec::new(),
        tree: None,
    };
    let Ok(Inspection {
        provider,
        observed,
        diff,
    }) = inspection
    else {
        known.state = "failed";
        return known;
    };
    let entries = provider.entry_differences().map(|e| e.entries(&observed));
    let findings = findings_for(&Inspected {
        id: &resource.id,
        class: &resource.class,
        sensitive: resource.sensitive,
        masked_only: resource
            .sensitive_by_field_only
            .then(|| provider.sensitive_fields()),
        owns_subtree: provider.owns_subtree(),
        entries: entries.as_deref(),
        target: Registry::path_claimed(provider, resource),
        observed: &observed,
        diff: &diff,
    });
    // Never applied, its last apply failed, or its declaration changed
    // since: not drift (see `converged`).
    // Without a readable store nothing is known, and the findings stand.
    let unconverged = !findings.is_empty()
        && store
            .is_some_and(|s| crate::converged::why_not(s, resource).is_ok_and(|why| why.is_some()));
    let findings = if unconverged {
        datum_drift::check::not_converged(findings)
            .into_iter()
            .collect()
    } else {
        findings
    };
    known.tree =
        datum_reporting::build::tree_fingerprint(resource, provider, &observed, digest_key);
    for f in &findings {
        known.fleet.push(datum_reporting::build::check_finding(
            registry,
            f,
            Some(&observed),
            resource.sensitive,
            0,
        ));
        known.kinds.push(f.finding.category.clone());
        signatures.push(f.finding.signature());
    }
    if quarantined.contains(&resource.id) {
        known.state = "quarantined";
    } else if !findings.is_empty() {
        known.state = "drifted";
    }
    known
}

/// The class table and watch targets of a catalogue.
pub fn loaded(
    registry: &Registry,
    catalogue: &Catalogue,
    classes: &Classes,
    host: &Host,
) -> Loaded {
    let mut specs: Vec<ClassSpec> = classes
        .classes
        .values()
        .map(|c| ClassSpec {
            name: c.name.clone(),
            interval: c.interval,
            watch: c.watch,
            policy: c.policy.word().to_owned(),
        })
        .collect();
    // A class a resource names but datum.yaml does not declare gets the
    // defaults (lint reports unknown names; this guards the agent).
    let used: BTreeSet<&str> = catalogue
        .resources
        .iter()
        .map(|r| r.class.as_str())
        .collect();
    for name in used {
        if !specs.iter().any(|s| s.name == name) {
            let c = classes.get(name);
            specs.push(ClassSpec {
                name: name.to_owned(),
                interval: c.interval,
                watch: c.watch,
                policy: c.policy.word().to_owned(),
            });
        }
    }
    let watched: HashSet<&str> = specs
        .iter()
        .filter(|s| s.watch)
        .map(|s| s.name.as_str())
        .collect();
    let watch = catalogue
        .resources
        .iter()
        .filter(|r| watched.contains(r.class.as_str()))
        .filter_map(|r| {
            let provider = registry.lookup(&r.id.kind)?;
            let declared = Registry::path_claimed(provider, r)?;
            let path = host.resolve(Path::new(declared)).ok()?;
            Some(WatchTarget {
                resource: r.id.clone(),
                class: r.class.clone(),
                path,
                scope: if provider.owns_subtree() {
                    WatchScope::Subtree
                } else if provider.names_a_regular_file() {
                    WatchScope::RegularFile
                } else {
                    WatchScope::Entry
                },
            })
        })
        .collect();
    Loaded {
        classes: specs,
        watch,
        resources: catalogue.resources.len(),
    }
}

#[cfg(test)]
mod tests {
    use datum_drift::check::{CheckFinding, Reported};

    use super::*;

    #[test]
    fn only_a_path_that_names_a_regular_file_is_watched_on_its_own() {
        // The agent watches a File's own inode (a write through another hard
        // link), never a Symlink's (the watch would follow it), a
        // Directory's or a Tree's: the providers say which, not a kind name.
        let root = tempfile::tempdir().unwrap();
        let host = Host::with_name(root.path(), "h");
        let with_path = |kind: &str, name: &str| Resource {
            class: "watched".into(),
            ..Resource::new(
                ResourceId::new(kind, name),
                serde_json::json!({"path": format!("/etc/{name}")}),
            )
        };
        let catalogue = Catalogue {
            host: Default::default(),
            resources: vec![
                with_path("File", "f"),
                with_path("Symlink", "l"),
                with_path("Directory", "d"),
                with_path("Tree", "t"),
            ],
            autorequires: Vec::new(),
            boundary: Default::default(),
        };
        let classes =
            Classes::parse(&serde_json::json!({"watched": {"interval": "1m", "watch": true}}))
                .unwrap();
        let loaded = loaded(datum_providers::registry(), &catalogue, &classes, &host);
        let scopes: Vec<(String, WatchScope)> = loaded
            .watch
            .iter()
            .map(|t| (t.resource.name.clone(), t.scope))
            .collect();
        assert_eq!(
            scopes,
            [
                ("f".to_owned(), WatchScope::RegularFile),
                ("l".to_owned(), WatchScope::Entry),
                ("d".to_owned(), WatchScope::Entry),
                ("t".to_owned(), WatchScope::Subtree),
            ]
        );
    }

    #[test]
    fn the_agent_watches_the_path_a_kind_claims_whatever_its_field_is_named() {
        // A FakeMount declares its path in `mountpoint`: the agent asks the
        // kind for it, as for a File's `path`.
        use datum_testkit::fake::{FakeMount, fake_mount};
        let root = tempfile::tempdir().unwrap();
        let host = Host::with_name(root.path(), "h");
        let registry = Registry::new(vec![
            Box::new(FakeMount),
            Box::new(datum_providers::file::FileProvider),
        ]);
        let watched = |r: Resource| Resource {
            class: "watched".into(),
            ..r
        };
        let catalogue = Catalogue {
            host: Default::default(),
            resources: vec![
                watched(fake_mount("data", "/srv/data")),
                watched(Resource::new(
                    ResourceId::new("File", "f"),
                    serde_json::json!({"path": "/etc/f"}),
                )),
            ],
            autorequires: Vec::new(),
            boundary: Default::default(),
        };
        let classes =
            Classes::parse(&serde_json::json!({"watched": {"interval": "1m", "watch": true}}))
                .unwrap();
        let loaded = loaded(&registry, &catalogue, &classes, &host);
        let targets: Vec<(String, std::path::PathBuf, WatchScope)> = loaded
            .watch
            .iter()
            .map(|t| (t.resource.to_string(), t.path.clone(), t.scope))
            .collect();
        assert_eq!(
            targets,
            [
                (
                    "FakeMount[data]".to_owned(),
                    root.path().join("srv/data"),
                    WatchScope::Entry
                ),
                (
                    "File[f]".to_owned(),
                    root.path().join("etc/f"),
                    WatchScope::RegularFile
                ),
            ]
        );
    }

    fn resource(kind: &str, name: &str, validate: Option<&str>) -> Resource {
        Resource {
            class: "critical".into(),
            validate: validate.map(str::to_owned),
            ..Resource::new(ResourceId::new(kind, name), serde_json::json!({}))
        }
    }

    #[test]
    fn a_reconciled_class_report_becomes_counts() {
        let rs = [
            resource("File", "a", None),
            resource("File", "b", Some("sshd")),
            resource("File", "c", None),
            resource("File", "d", None),
            resource("File", "e", None),
        ];
        let refs: Vec<&Resource> = rs.iter().collect();
        let found = |name: &str, category: &str, action: &str, handling| Reported {
            finding: CheckFinding {
                finding: datum_report::Finding {
                    subject: format!("File[{name}]"),
                    category: category.to_owned(),
                    diffs: Vec::new(),
                },
                id: ResourceId::new("File", name),
                class: "critical".to_owned(),
                target: None,
                content_diff: None,
                changed_by: Vec::new(),
            },
            first_seen: 0,
            passes: 1,
            action: action.to_owned(),
            handling,
            rule: None,
        };
        let checked = datum_drift::check::CheckReport {
            warnings: Vec::new(),
            host: "h".to_owned(),
            labels: BTreeMap::new(),
            layers: Vec::new(),
            findings: vec![
                found("a", "changed_outside", "reverted", Handling::Reverted),
                found(
                    "b",
                    "changed_outside",
                    "revert failed: validation failed (sshd, exit 255)",
                    Handling::RevertFailed,
                ),
                // The words do not decide: "reverted" in them is not a revert.
                found(
                    "c",
                    "deleted_outside",
                    "backed off: reverted 4 times within 1h",
                    Handling::Open,
                ),
                // Nor is "quarantined" in a reason a quarantine.
                found(
                    "e",
                    "changed_outside",
                    "not converged: its last apply was held, quarantined by a person",
                    Handling::Open,
                ),
                found("zz", "changed_outside", "reported", Handling::Open),
            ],
            quarantined: vec![("File[d]".to_owned(), "by policy: drift".to_owned())],
            errors: Vec::new(),
            stats: datum_drift::check::CheckStats::default(),
        };
        let mut validation = BTreeMap::new();
        let p = picture_from_report(&refs, &checked, &mut validation);
        let state = |s: &str| p.states.get(s).copied().unwrap_or(0);
        assert_eq!(
            (
                state("changed"),
                state("failed"),
                state("drifted"),
                state("quarantined"),
                state("converged")
            ),
            (1, 1, 2, 1, 0)
        );
        // Open findings only: the reverted one is closed; a subject outside
        // the class is ignored.
        assert_eq!(p.findings.get("changed_outside"), Some(&2));
        assert_eq!(p.findings.get("deleted_outside"), Some(&1));
        assert_eq!(validation.get("sshd"), Some(&1));
    }

    #[test]
    fn every_handling_is_a_state_the_agent_counts() {
        for handling in [
            Handling::Open,
            Handling::Reverted,
            Handling::Accepted,
            Handling::RevertFailed,
            Handling::Quarantined,
        ] {
            assert!(
                datum_agent::STATES.contains(&handling.state()),
                "{handling:?}"
            );
        }
    }
}
