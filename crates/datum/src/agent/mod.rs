//! The binary's side of `datum agent`: [`RepoChecker`], which gives the
//! daemon (`datum-agent`) a repository to load and classes to check.
//!
//! Owns: compiling the repository for this host (keeping the last good
//! catalogue when a reload fails lint), the class table from `datum.yaml`,
//! which paths a watched class's resources live at, and one check of a class
//! or of some resources: observe once each (in parallel, through the
//! engine), diff, findings as `datum check` words them, quarantine from the
//! state store, the check recorded in the state store. Must not: print
//! anything but diagnostics and log lines (the daemon logs), or put a
//! resource name or value in a metric.
//!
//! A class whose policy is `report` and whose content mode is `full` is
//! checked here resource by resource (the catalogue stays compiled between
//! checks, so a watch-triggered check of one file costs one observation). A
//! class with another policy (`revert`, `accept`, `quarantine`) or
//! `content: metadata`, and every class in a sampled metadata round, is
//! checked by [`crate::checking`], in process, on the catalogue this agent
//! has loaded: the policies (flap detection, backups, patches) and the
//! metadata-first rules (audit every Nth check) behave exactly as `datum
//! reconcile` documents, and a revert applies the last good catalogue, never
//! a repository edit on disk that was not reloaded (or one that failed to
//! load). Its report is folded into the same counts.
//!
//! A repository reached through a link (`datum pull` deploys one) is pinned
//! at every load to the folder the link points at then: the catalogue, the
//! delegated checks and the reported revision all come from that one
//! checkout, whatever the link does meanwhile. [`puller`] pulls on an
//! interval and asks for a reload when a new revision was deployed.

mod attribution;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use datum_agent::{
    Cancel, CheckError, CheckReport, ClassChecker, ClassReport, ClassSpec, LoadError, Loaded,
    Scope, WatchTarget,
};
use datum_catalog::snapshot::LazyCatalogue;
use datum_catalog::{Catalogue, HostIdentity};
use datum_core::{Resource, ResourceId};
use datum_drift::check::{Inspected, findings_for};
use datum_drift::classes::{Classes, ContentMode, Policy};
use datum_host::Host;
use datum_host::lock::RootLock;
use datum_store::{FindingScope, FindingSignature, PassRecord, Store};

pub mod puller;
use crate::cli::GlobalArgs;
use crate::commands::check::CheckArgs;
use crate::reporting::Reporting;

/// Resources observed per batch: the cancel flag is looked at between
/// batches, so SIGTERM waits for at most this many observations.
const BATCH: usize = 256;

/// Where things are, taken from the global options once.
#[derive(Debug, Clone)]
pub struct Paths {
    pub repo: PathBuf,
    pub root: PathBuf,
    pub host_file: Option<PathBuf>,
    pub labels: Vec<(String, String)>,
    /// The `--state FILE` the operator gave (else the state store is in the
    /// root's `var/lib/datum`, reached through the boundary).
    pub state: Option<PathBuf>,
    /// How long a check waits for the root lock.
    pub lock_timeout: Duration,
}

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

/// A [`ClassChecker`] over a repository and a root.
pub struct RepoChecker {
    paths: Paths,
    identity: Option<HostIdentity>,
    catalogue: Option<Catalogue>,
    classes: Option<Classes>,
    /// `datum.yaml`'s `classes:` as loaded (the in-process reconcile's
    /// catalogue carries them).
    classes_doc: serde_json::Value,
    /// The options the agent was started with (see [`Self::pinned_global`]).
    global: GlobalArgs,
    store: Option<Store>,
    known: HashMap<ResourceId, Known>,
    /// Who changed the files of classes with `attribute: true`.
    attribution: Option<attribution::Feed>,
    warn: Box<dyn Fn(&str)>,
    info: Box<dyn Fn(&str)>,
    /// The folder the repository was read from at the last good load.
    pinned: Option<PathBuf>,
    /// The revision `datum pull` deployed there, if it did.
    revision: Option<String>,
    /// `report.yaml`, when the host reports to a fleet server (read again
    /// at each load).
    reporting: Option<Reporting>,
    /// The classes as `datum.yaml` declares them (for the report's bounds).
    class_table: Option<Classes>,
    /// The delivery thread, started with the first queued report.
    courier: Option<Courier>,
}

impl RepoChecker {
    /// `warn` receives warnings that are not tied to one check (a state
    /// store that could not be opened).
    pub fn new(paths: Paths, global: GlobalArgs, warn: Box<dyn Fn(&str)>) -> Self {
        Self {
            paths,
            identity: None,
            catalogue: None,
            classes: None,
            classes_doc: serde_json::Value::Null,
            global,
            store: None,
            known: HashMap::new(),
            attribution: None,
            warn,
            info: Box::new(|_| {}),
            pinned: None,
            revision: None,
            reporting: None,
            class_table: None,
            courier: None,
        }
    }

    /// The global options of the in-process reconcile: the repository pinned
    /// at the last good load (it names the patches' sources and the fleet
    /// report's revision), the rest as the agent was started.
    fn pinned_global(&self) -> GlobalArgs {
        let mut global = self.global.clone();
        global.repo = self
            .pinned
            .clone()
            .unwrap_or_else(|| self.paths.repo.clone());
        global
    }

    /// Delivers what is queued now, in this thread (for `--once`, whose
    /// process ends right after its check).
    pub fn deliver_now(&mut self) {
        self.courier = None;
        if let (Some(r), Some(store)) = (&self.reporting, self.store.as_mut()) {
            r.deliver(store, crate::reporting::PASS_BUDGET, false);
        }
    }

    /// `info` receives what the agent reports as it goes (who changed a
    /// watched file).
    pub fn with_info(mut self, info: Box<dyn Fn(&str)>) -> Self {
        self.info = info;
        self
    }

    /// A report-only class is checked without history when the store is
    /// unusable (said every time it is tried again; it is never replaced);
    /// a class whose policy acts is refused without one, like `datum
    /// reconcile`.
    fn open_store(&mut self) {
        if self.store.is_some() {
            return;
        }
        let opened = crate::context::open_store_at(
            &self.paths.root,
            self.paths.state.as_deref(),
            false,
            crate::context::StoreNeed::Required("recorded"),
        );
        match opened {
            Ok(store) => self.store = store,
            Err(e) => (self.warn)(&format!(
                "state store unavailable, checking without history (policies are refused): {e:#}"
            )),
        }
    }

    fn state_files(&self) -> crate::context::StateFiles {
        crate::context::StateFiles::at(&self.paths.root, self.paths.state.as_deref())
    }

    /// Each error on one line (`FILE:LINE:COL: error: ...`, the file's full
    /// path), logged, and the first of them in the error the reload reports:
    /// a journal or a JSON log gets one event per error, never a rendered
    /// excerpt spread over lines.
    fn lint_error(&self, diagnostics: &datum_catalog::Diagnostics) -> LoadError {
        let errors: Vec<String> = diagnostics
            .iter()
            .filter(|d| d.severity == datum_catalog::Severity::Error)
            .map(|d| d.one_line_in(&self.paths.repo))
            .collect();
        for line in &errors {
            tracing::error!("{line}");
        }
        LoadError::Lint {
            repo: self.paths.repo.clone(),
            errors: errors.len().max(1),
            first: errors
                .first()
                .cloned()
                .unwrap_or_else(|| "(not located)".to_owned()),
        }
    }

    fn other(&self, e: impl std::error::Error + Send + Sync + 'static) -> LoadError {
        LoadError::Other {
            repo: self.paths.repo.clone(),
            source: Box::new(e),
        }
    }
}

/// A repository-level problem that is not a diagnostic.
#[derive(Debug, thiserror::Error)]
enum RepoProblem {
    #[error("not a Datum repository (no datum.yaml)")]
    NoSettings,
    #[error("the catalogue is not loaded")]
    NotLoaded,
    #[error("the state store is unusable: a class whose policy acts is not checked without one")]
    NoStore,
}

impl ClassChecker for RepoChecker {
    fn load(&mut self) -> Result<Loaded, LoadError> {
        let repo = datum_host::repo::pinned(&self.paths.repo).map_err(|e| self.other(e))?;
        let paths = &Paths {
            repo,
            ..self.paths.clone()
        };
        if !crate::context::is_repository(&paths.repo) {
            return Err(self.other(RepoProblem::NoSettings));
        }
        let identity = HostIdentity::load(&paths.root, paths.host_file.as_deref(), &paths.labels)
            .map_err(|e| self.other(e))?;
        // The snapshot of the last compile when the repository has not
        // changed (a restart or SIGHUP with nothing new costs no compile, and
        // the decoded catalogue is all that stays in memory).
        let state = self.state_files();
        let (lazy, _) = crate::context::compile_or_reuse(&paths.repo, &state, &identity)
            .map_err(|d| self.lint_error(&d))?;
        let classes = match Classes::parse(&lazy.classes) {
            Ok(c) => c,
            Err(errors) => {
                let lines: Vec<String> = errors
                    .iter()
                    .map(|e| format!("{}: error: {e}", paths.repo.join("datum.yaml").display()))
                    .collect();
                for line in &lines {
                    tracing::error!("{line}");
                }
                return Err(LoadError::Lint {
                    repo: paths.repo.clone(),
                    errors: errors.len(),
                    first: lines.first().cloned().unwrap_or_default(),
                });
            }
        };
        let classes_doc = lazy.classes.clone();
        let catalogue = match lazy.into_catalogue() {
            Ok(catalogue) => catalogue,
            Err(e) => {
                // Damaged after it was checked (a disk error): forget it and
                // compile.
                (self.warn)(&format!("{e}; compiling the repository"));
                crate::context::forget_snapshot_of(&state);
                crate::context::compile_or_reuse(&paths.repo, &state, &identity)
                    .map_err(|d| self.lint_error(&d))?
                    .0
                    .into_catalogue()
                    .map_err(|e| self.other(e))?
            }
        };
        let host = Host::with_name(self.paths.root.clone(), identity.name.clone())
            .with_boundary(catalogue.boundary.clone());
        let loaded = loaded(&catalogue, &classes, &host);
        // Forget resources that are no longer declared.
        let ids: HashSet<&ResourceId> = catalogue.resources.iter().map(|r| &r.id).collect();
        self.known.retain(|id, _| ids.contains(id));
        self.restart_attribution(&classes, &loaded);
        self.revision = datum_pull::deployed_revision(&paths.repo).map(|d| d.commit);
        self.pinned = Some(paths.repo.clone());
        self.identity = Some(identity);
        self.catalogue = Some(catalogue);
        self.class_table = Some(classes.clone());
        self.classes_doc = classes_doc;
        self.classes = Some(classes);
        self.reporting = Reporting::load(&host);
        self.courier = None;
        self.open_store();
        Ok(loaded)
    }

    fn revision(&self) -> Option<String> {
        self.revision.clone()
    }

    fn check(&mut self, scope: &Scope, cancel: &Cancel) -> Result<CheckReport, CheckError> {
        self.record_writers(scope);
        let scope_word = match scope {
            Scope::All => "all".to_owned(),
            Scope::Class(c) => c.clone(),
            Scope::Resources { class, ids } => format!("{class} ({} resource(s))", ids.len()),
        };
        let (Some(catalogue), Some(identity)) = (self.catalogue.as_ref(), self.identity.as_ref())
        else {
            return Err(CheckError {
                scope: scope_word,
                source: Box::new(RepoProblem::NotLoaded),
            });
        };
        let host = Host::with_name(self.paths.root.clone(), identity.name.clone())
            .with_boundary(catalogue.boundary.clone());
        let started_at = crate::context::now();
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
                if let Some(classes) = &self.classes {
                    for name in classes.classes.keys() {
                        by_class.entry(name.clone()).or_default();
                    }
                }
            }
            Scope::Class(c) | Scope::Resources { class: c, .. } => {
                by_class.entry(c.clone()).or_default();
            }
        }
        for r in catalogue.resources.iter().filter(|r| in_scope(r)) {
            by_class.entry(r.class.clone()).or_default().push(r);
        }
        let quarantined: HashSet<ResourceId> = match self.store.as_ref().map(Store::quarantined) {
            Some(Ok(q)) => {
                datum_drift::policy::skip_set(&q, catalogue.resources.iter().map(|r| &r.id))
            }
            _ => HashSet::new(),
        };

        let mut report = CheckReport::default();
        let mut signatures: Vec<FindingSignature> = Vec::new();
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
            self.classes.as_ref().map_or((false, Policy::Report), |c| {
                let spec = c.get(class);
                (
                    shallow || spec.acts() || spec.content == ContentMode::Metadata,
                    spec.policy,
                )
            })
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
        let global = self.pinned_global();
        // Whether an in-process reconcile queued a fleet report.
        let mut queued = false;
        // One writer per root for the whole check: no apply changes files
        // under it, and the state store is written by one process at a time.
        let lock = RootLock::acquire(&host, self.paths.lock_timeout).map_err(|e| CheckError {
            scope: scope_word.clone(),
            source: Box::new(e),
        })?;
        'classes: for (class, resources, delegate, policy) in order {
            if cancel.is_cancelled() {
                report.cancelled = true;
                break;
            }
            let t0 = Instant::now();
            if delegate {
                let checked = match self.classes.as_ref() {
                    Some(classes) if classes.get(class).acts() && self.store.is_none() => {
                        Err(anyhow::Error::new(RepoProblem::NoStore))
                    }
                    Some(classes) => reconcile_class(&mut ReconcileClass {
                        global: &global,
                        class,
                        identity,
                        catalogue,
                        classes_doc: &self.classes_doc,
                        classes,
                        host: &host,
                        store: self.store.as_mut(),
                    }),
                    None => Err(anyhow::Error::new(RepoProblem::NotLoaded)),
                };
                // What the resource-by-resource path knew of these resources
                // is stale.
                for r in resources {
                    self.known.remove(&r.id);
                }
                match checked {
                    Ok(checked) => {
                        let exit = checked.exit.code();
                        any_drift |= exit == 2;
                        any_error |= exit != 0 && exit != 2;
                        for (id, reason) in &checked.report.errors {
                            (self.warn)(&format!("{id}: {reason}"));
                        }
                        let picture = picture_from_report(
                            resources,
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
                let observations =
                    datum_engine::observe_all(datum_providers::registry(), chunk, &host);
                for (resource, observed) in chunk.iter().zip(observations) {
                    subjects.push(resource.id.to_string());
                    let known = inspect(
                        resource,
                        observed,
                        &quarantined,
                        self.store.as_ref(),
                        &mut signatures,
                    );
                    if known.state == "converged" {
                        clean.push(resource.id.clone());
                    }
                    any_drift |= known.state == "drifted";
                    any_error |= known.state == "failed";
                    self.known.insert(resource.id.clone(), known);
                }
            }
            // Configuration files the class's packages installed, edited
            // since: findings of the Package, as `datum check` reports them.
            let declared = catalogue
                .resources
                .iter()
                .filter_map(|r| Some((r.id.kind.as_str(), r.desired_str("path")?)));
            let (mut package_files, mut failed) =
                crate::conffiles::findings(declared, resources.iter().copied(), &host);
            // Reloads owed, live configurations their group validator refuses.
            let (activation, activation_failed) = crate::activation_findings::findings(
                resources.iter().map(|r| (*r).into()),
                self.store.as_ref(),
                &host,
            );
            package_files.extend(activation);
            failed.extend(activation_failed);
            for (id, reason) in failed {
                any_error = true;
                (self.warn)(&format!("{id}: {reason}"));
            }
            for f in package_files {
                any_drift = true;
                let sig = f.finding.signature();
                signatures.push(FindingSignature {
                    subject: sig.subject,
                    category: sig.category,
                    paths: sig.paths,
                });
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
        report.exit_code = if any_error {
            1
        } else if any_drift {
            2
        } else {
            0
        };
        if !report.cancelled {
            // A delegated class recorded its own history: clearing "all"
            // findings here would erase its findings.
            let all = matches!(scope, Scope::All) && delegated.is_empty();
            let recorded: Vec<(String, u64)> = inspections
                .into_iter()
                .filter(|(c, _)| !delegated.contains(c))
                .collect();
            if !recorded.is_empty() {
                self.record(
                    command_for(scope),
                    all,
                    started_at,
                    &report,
                    &signatures,
                    &subjects,
                    &recorded,
                );
            }
        }
        if let (Some(store), false) = (self.store.as_mut(), clean.is_empty())
            && self.attribution.is_some()
            && let Err(e) = store.forget_writers(&clean)
        {
            (self.warn)(&format!(
                "could not forget who changed clean resources: {e}"
            ));
        }
        if queued {
            self.wake_courier();
        }
        drop(lock);
        Ok(report)
    }
}

impl RepoChecker {
    /// Starts attribution for the classes that ask (`attribute: true` and
    /// watched), keeping the running one when nothing it marks changed.
    fn restart_attribution(&mut self, classes: &Classes, loaded: &Loaded) {
        let asking: BTreeSet<String> = classes
            .classes
            .values()
            .filter(|c| c.attribute && c.watch)
            .map(|c| c.name.clone())
            .collect();
        let plan = attribution::AttributionPlan::new(&loaded.watch, &asking);
        if plan.is_empty() {
            self.attribution = None;
            return;
        }
        if self.attribution.as_ref().is_some_and(|f| *f.plan() == plan) {
            return;
        }
        // The old marks go before the new ones are made.
        self.attribution = None;
        let classes: Vec<&str> = plan.classes.iter().map(String::as_str).collect();
        (self.info)(&format!(
            "attribution: reading who changes the files of class(es) {}",
            classes.join(", ")
        ));
        self.attribution = Some(attribution::Feed::start(plan, &*self.warn));
    }

    /// Moves what attribution heard into the state store, where `datum
    /// check` (this process's or a delegated one) reports it with the
    /// findings. A watched change of an attributing class while fanotify is
    /// unusable gets the audit log's writers, or unknown with the reason.
    fn record_writers(&mut self, scope: &Scope) {
        let Some(feed) = self.attribution.as_ref() else {
            return;
        };
        let mut writers = feed.drain();
        if let Scope::Resources { class, ids } = scope
            && feed.plan().classes.contains(class)
        {
            let at = crate::context::now();
            if feed.is_broken() {
                let lookup = datum_host::attribution::audit::Fallback::system().recent(None);
                for id in ids {
                    for w in feed.unavailable(id, at, &lookup) {
                        writers.push((id.clone(), w));
                    }
                }
            }
        }
        if writers.is_empty() {
            return;
        }
        for (id, w) in &writers {
            (self.info)(&format!("attribution: {id} {} by {}", w.event, w.summary()));
        }
        self.open_store();
        let Some(store) = self.store.as_mut() else {
            (self.warn)(&format!(
                "attribution: {} writer(s) not recorded: no state store",
                writers.len()
            ));
            return;
        };
        if let Err(e) = store.record_writers(&writers) {
            (self.warn)(&format!("attribution: could not record writers: {e}"));
        }
    }
}

impl RepoChecker {
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
    /// finding history continues across agent restarts.
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
        signatures: &[FindingSignature],
        subjects: &[String],
        inspections: &[(String, u64)],
    ) {
        let host = self
            .identity
            .as_ref()
            .map(|i| i.name.clone())
            .unwrap_or_default();
        let fleet_report = self.fleet_common(started_at, report);
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for class in report.classes.values() {
            for (state, n) in &class.states {
                *counts.entry(state.clone()).or_insert(0) += n;
            }
        }
        let finished_at = crate::context::now();
        let result = (|| {
            let batch = store.batch()?;
            let pass_id = batch.record_pass(&PassRecord {
                started_at,
                finished_at,
                command: command.to_owned(),
                host: host.clone(),
                counts,
                duration_ms: inspections.iter().map(|(_, ms)| ms).sum(),
                exit_code: report.exit_code,
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
            if let (Some(r), Some(report)) = (&self.reporting, fleet_report) {
                let report = fill_agent_report(report, &self.known, inspections, finished_at);
                if let Err(e) = r.enqueue(&batch, report, finished_at) {
                    (self.warn)(&format!("could not queue the fleet report: {e}"));
                }
            }
            batch.commit()
        })();
        if let Err(e) = result {
            (self.warn)(&format!(
                "could not record the check in the state store: {e}"
            ));
        } else if self.reporting.is_some() {
            self.wake_courier();
        }
    }

    /// Starts the delivery thread if needed and tells it a report is queued.
    fn wake_courier(&mut self) {
        self.courier
            .get_or_insert_with(|| {
                Courier::start(
                    self.paths.root.clone(),
                    self.paths.state.clone(),
                    self.reporting.clone(),
                )
            })
            .wake();
    }
}

impl RepoChecker {
    /// The parts of an agent report known before the check is recorded:
    /// who, what revision, class bounds, counts of the classes inspected.
    fn fleet_common(&self, started_at: i64, report: &CheckReport) -> Option<datum_fleet::Report> {
        let reporting = self.reporting.as_ref()?;
        let identity = self.identity.as_ref()?;
        let catalogue = self.catalogue.as_ref()?;
        let classes = self.class_table.as_ref()?;
        let mut per_class: BTreeMap<String, u64> = BTreeMap::new();
        for r in &catalogue.resources {
            *per_class.entry(r.class.clone()).or_insert(0) += 1;
        }
        let (bounds, expected) = crate::reporting::class_bounds(
            classes,
            &per_class,
            self.store.as_ref(),
            reporting.interval(),
        );
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for class in report.classes.values() {
            for (state, n) in &class.states {
                *counts.entry(state.clone()).or_insert(0) += n;
            }
        }
        let finished = crate::context::now();
        let common = crate::reporting::build::Common {
            kind: datum_fleet::ReportKind::Agent,
            host: identity.name.clone(),
            labels: identity.labels.clone(),
            // The agent keeps its catalogue compiled; the revision is that
            // of the repository as it is now (git) or as it was stamped.
            revision: crate::reporting::revision::repository_revision(&self.paths.repo, None),
            catalogue: crate::reporting::build::catalogue_hash(
                catalogue
                    .resources
                    .iter()
                    .map(|r| (r.id.to_string(), r.declaration_hash.as_str())),
            ),
            started_at,
            finished_at: finished,
            duration_ms: u64::try_from(finished - started_at).unwrap_or(0) * 1000,
            exit_code: report.exit_code,
            resources: catalogue.resources.len() as u64,
            classes: bounds,
            expected_interval_s: expected,
        };
        let mut out = common.report();
        out.counts = counts;
        Some(out)
    }
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

/// The agent's delivery thread: delivers the outbox whenever a report is
/// queued, and again when the backoff allows, on its own connection to the
/// state store, so a server that is down never delays a check.
struct Courier {
    wake: std::sync::mpsc::Sender<()>,
}

impl Courier {
    fn start(root: PathBuf, state: Option<PathBuf>, reporting: Option<Reporting>) -> Courier {
        let (wake, rx) = std::sync::mpsc::channel::<()>();
        let _ = std::thread::Builder::new()
            .name("datum-courier".to_owned())
            .spawn(move || {
                let Some(reporting) = reporting else { return };
                let mut store: Option<Store> = None;
                let mut wait = Duration::from_secs(0);
                loop {
                    match rx.recv_timeout(wait) {
                        Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                    while rx.try_recv().is_ok() {}
                    if store.is_none() {
                        // Never creates one; an unusable store is warned
                        // about by the checks.
                        store = crate::context::open_store_at(
                            &root,
                            state.as_deref(),
                            false,
                            crate::context::StoreNeed::Optional("delivering"),
                        )
                        .ok()
                        .flatten();
                    }
                    let Some(s) = store.as_mut() else {
                        wait = Duration::from_secs(60);
                        continue;
                    };
                    let outcome = reporting.deliver(s, Duration::from_secs(60), true);
                    // Sleep until the backoff allows the next attempt (or a
                    // new report arrives); idle for a minute when empty.
                    let next = s
                        .outbox_status()
                        .map(|st| (st.depth, st.backoff.next_attempt_ms));
                    wait = match (outcome, next) {
                        (_, Ok((0, _))) => Duration::from_secs(3600),
                        (_, Ok((_, at))) => {
                            let ms = (at - crate::reporting::now_ms()).clamp(100, 300_000);
                            Duration::from_millis(ms as u64)
                        }
                        _ => Duration::from_secs(60),
                    };
                }
            });
        Courier { wake }
    }

    fn wake(&self) {
        let _ = self.wake.send(());
    }
}

/// A class picture from the in-process reconcile of the whole class:
/// reverted resources count as changed, accepted ones as converged, those
/// with open findings as drifted, quarantined and erroring ones as such.
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
    let mut picture = ClassReport::default();
    for reported in &checked.findings {
        let f = &reported.finding;
        let Some((id, r)) = by_id.get_key_value(&f.id) else {
            continue;
        };
        let action = reported.action.as_str();
        let s = if action.starts_with("reverted") {
            "changed"
        } else if action.starts_with("accepted") {
            "converged"
        } else if action.starts_with("revert failed") {
            if action.contains("validat")
                && let Some(v) = &r.validate
            {
                *validation_failures.entry(v.clone()).or_insert(0) += 1;
            }
            "failed"
        } else if action.starts_with("quarantined") {
            "quarantined"
        } else {
            "drifted"
        };
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
    picture
}

/// What [`reconcile_class`] runs on: the agent's loaded catalogue and its
/// open store.
struct ReconcileClass<'a> {
    global: &'a GlobalArgs,
    class: &'a str,
    identity: &'a HostIdentity,
    catalogue: &'a Catalogue,
    classes_doc: &'a serde_json::Value,
    classes: &'a Classes,
    host: &'a Host,
    store: Option<&'a mut Store>,
}

/// `datum reconcile --class CLASS` in process, on the loaded catalogue (the
/// caller holds the root lock).
fn reconcile_class(c: &mut ReconcileClass<'_>) -> anyhow::Result<crate::checking::Checked> {
    let args = CheckArgs {
        markdown: None,
        sample: None,
        pass_seed: 0,
        class: Some(c.class.to_owned()),
        patch_dir: None,
    };
    crate::checking::run(crate::checking::Checking {
        global: c.global,
        args: &args,
        act: crate::checking::Act::Reconcile,
        identity: c.identity,
        // The whole catalogue: the check of a class's packages leaves out
        // the configuration files any resource declares.
        catalogue: LazyCatalogue::compiled(c.catalogue.clone(), c.classes_doc.clone()),
        catalogue_reused: true,
        classes: c.classes,
        host: c.host,
        store: c.store.as_deref_mut(),
        started: Instant::now(),
        progress: false,
    })
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
    resource: &Resource,
    observed: Result<datum_core::Observed, datum_providers::ProviderError>,
    quarantined: &HashSet<ResourceId>,
    store: Option<&datum_store::Store>,
    signatures: &mut Vec<FindingSignature>,
) -> Known {
    let mut known = Known {
        class: resource.class.clone(),
        state: "converged",
        kinds: Vec::new(),
        fleet: Vec::new(),
        tree: None,
    };
    let (Ok(observed), Some(provider)) = (observed, datum_providers::lookup(&resource.id.kind))
    else {
        known.state = "failed";
        return known;
    };
    let diff = provider.diff(resource, &observed);
    let findings = findings_for(&Inspected {
        id: &resource.id,
        class: &resource.class,
        sensitive: resource.sensitive,
        target: resource.desired_str("path"),
        observed: &observed,
        diff: &diff,
    });
    // Never applied, or its last apply failed: not drift (see `converged`).
    // Without a readable store nothing is known, and the findings stand.
    let unconverged = !findings.is_empty()
        && store.is_some_and(|s| {
            crate::converged::why_not(s, &resource.id).is_ok_and(|why| why.is_some())
        });
    let findings = if unconverged {
        datum_drift::check::not_converged(findings)
            .into_iter()
            .collect()
    } else {
        findings
    };
    known.tree = crate::reporting::build::tree_fingerprint(&resource.id.to_string(), &observed);
    for f in &findings {
        known.fleet.push(crate::reporting::build::check_finding(
            f,
            Some(&observed),
            resource.sensitive,
            0,
        ));
        known.kinds.push(f.finding.category.clone());
        let sig = f.finding.signature();
        signatures.push(FindingSignature {
            subject: sig.subject,
            category: sig.category,
            paths: sig.paths,
        });
    }
    if quarantined.contains(&resource.id) {
        known.state = "quarantined";
    } else if !findings.is_empty() {
        known.state = "drifted";
    }
    known
}

/// The class table and watch targets of a catalogue.
fn loaded(catalogue: &Catalogue, classes: &Classes, host: &Host) -> Loaded {
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
            let declared = r.desired_str("path")?;
            let path = host.resolve(Path::new(declared)).ok()?;
            Some(WatchTarget {
                resource: r.id.clone(),
                class: r.class.clone(),
                path,
                subtree: crate::checking::owns_subtree(&r.id.kind),
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
        let found = |name: &str, category: &str, action: &str| Reported {
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
            rule: None,
        };
        let checked = datum_drift::check::CheckReport {
            host: "h".to_owned(),
            labels: BTreeMap::new(),
            layers: Vec::new(),
            findings: vec![
                found("a", "changed_outside", "reverted"),
                found(
                    "b",
                    "changed_outside",
                    "revert failed: validation failed (sshd, exit 255)",
                ),
                found(
                    "c",
                    "deleted_outside",
                    "backed off: reverted 4 times within 1h",
                ),
                found("zz", "changed_outside", "reported"),
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
            (1, 1, 1, 1, 1)
        );
        // Open findings only: the reverted one is closed; a subject outside
        // the class is ignored.
        assert_eq!(p.findings.get("changed_outside"), Some(&1));
        assert_eq!(p.findings.get("deleted_outside"), Some(&1));
        assert_eq!(validation.get("sshd"), Some(&1));
    }
}
