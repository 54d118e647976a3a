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
//! Policies other than `report` are applied by `datum check` (issue 5); until
//! its check function can be called from here, a class with another policy
//! is checked and reported, and the agent says so when it loads.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use datum_agent::{
    Cancel, CheckError, CheckReport, ClassChecker, ClassReport, ClassSpec, LoadError, Loaded,
    Scope, WatchTarget,
};
use datum_catalog::{Catalogue, HostIdentity, Repository};
use datum_core::{Resource, ResourceId};
use datum_drift::check::{Inspected, findings_for};
use datum_drift::classes::Classes;
use datum_host::Host;
use datum_store::{FindingScope, FindingSignature, PassRecord, Store};

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
    pub state: PathBuf,
    pub color: bool,
}

/// What the agent last knew about one resource (merged across partial
/// checks so class-wide counts stay right).
#[derive(Debug, Clone)]
struct Known {
    class: String,
    state: &'static str,
    kinds: Vec<String>,
}

/// A [`ClassChecker`] over a repository and a root.
pub struct RepoChecker {
    paths: Paths,
    identity: Option<HostIdentity>,
    catalogue: Option<Catalogue>,
    classes: Option<Classes>,
    store: Option<Store>,
    known: HashMap<ResourceId, Known>,
    warn: Box<dyn Fn(&str)>,
}

impl RepoChecker {
    /// `warn` receives warnings that are not tied to one check (a state
    /// store that could not be opened).
    pub fn new(paths: Paths, warn: Box<dyn Fn(&str)>) -> Self {
        Self {
            paths,
            identity: None,
            catalogue: None,
            classes: None,
            store: None,
            known: HashMap::new(),
            warn,
        }
    }

    fn open_store(&mut self) {
        if self.store.is_some() {
            return;
        }
        match Store::open(&self.paths.state) {
            Ok((store, warnings)) => {
                for w in warnings {
                    (self.warn)(&format!("state store: {w}"));
                }
                self.store = Some(store);
            }
            Err(e) => (self.warn)(&format!(
                "state store unavailable, checking without history: {e}"
            )),
        }
    }

    fn lint_error(&self, diagnostics: &datum_catalog::Diagnostics) -> LoadError {
        eprint!("{}", diagnostics.render(self.paths.color));
        LoadError::Lint {
            repo: self.paths.repo.clone(),
            errors: diagnostics.error_count().max(1),
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
}

impl ClassChecker for RepoChecker {
    fn load(&mut self) -> Result<Loaded, LoadError> {
        let paths = &self.paths;
        if !paths.repo.join("datum.yaml").is_file() {
            return Err(self.other(RepoProblem::NoSettings));
        }
        let identity = HostIdentity::load(&paths.root, paths.host_file.as_deref(), &paths.labels)
            .map_err(|e| self.other(e))?;
        let repository = Repository::load(&paths.repo).map_err(|d| self.lint_error(&d))?;
        let classes = match Classes::parse(&repository.settings.classes) {
            Ok(c) => c,
            Err(errors) => {
                for e in &errors {
                    eprintln!("error: {e}");
                }
                return Err(LoadError::Lint {
                    repo: paths.repo.clone(),
                    errors: errors.len(),
                });
            }
        };
        let catalogue = datum_catalog::compile_repository(&repository, &identity)
            .map_err(|d| self.lint_error(&d))?;
        let host = Host::with_name(self.paths.root.clone(), identity.name.clone());
        let loaded = loaded(&catalogue, &classes, &host);
        // Forget resources that are no longer declared.
        let ids: HashSet<&ResourceId> = catalogue.resources.iter().map(|r| &r.id).collect();
        self.known.retain(|id, _| ids.contains(id));
        self.identity = Some(identity);
        self.catalogue = Some(catalogue);
        self.classes = Some(classes);
        self.open_store();
        Ok(loaded)
    }

    fn check(&mut self, scope: &Scope, cancel: &Cancel) -> Result<CheckReport, CheckError> {
        let scope_word = match scope {
            Scope::All => "all".to_owned(),
            Scope::Class(c) => c.clone(),
            Scope::Resources { class, ids } => format!("{class} ({} resources)", ids.len()),
        };
        let (Some(catalogue), Some(identity)) = (self.catalogue.as_ref(), self.identity.as_ref())
        else {
            return Err(CheckError {
                scope: scope_word,
                source: Box::new(RepoProblem::NotLoaded),
            });
        };
        let host = Host::with_name(self.paths.root.clone(), identity.name.clone());
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
        'classes: for (class, resources) in &by_class {
            let t0 = Instant::now();
            for chunk in resources.chunks(BATCH) {
                if cancel.is_cancelled() {
                    report.cancelled = true;
                    break 'classes;
                }
                let observations = datum_engine::observe_all(chunk, &host);
                for (resource, observed) in chunk.iter().zip(observations) {
                    subjects.push(resource.id.to_string());
                    let known = inspect(resource, observed, &quarantined, &mut signatures);
                    any_drift |= known.state == "drifted";
                    any_error |= known.state == "failed";
                    self.known.insert(resource.id.clone(), known);
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
            self.record(
                scope,
                started_at,
                &report,
                &signatures,
                &subjects,
                &inspections,
            );
        }
        Ok(report)
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
    fn record(
        &mut self,
        scope: &Scope,
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
                command: command_for(scope).to_owned(),
                host: host.clone(),
                counts,
                duration_ms: inspections.iter().map(|(_, ms)| ms).sum(),
                exit_code: report.exit_code,
            })?;
            for (class, ms) in inspections {
                batch.record_class_inspection(pass_id, class, *ms)?;
            }
            let finding_scope = match scope {
                Scope::All => FindingScope::All,
                _ => FindingScope::Subjects(subjects),
            };
            batch.record_findings_scoped(pass_id, &host, signatures, finished_at, finding_scope)?;
            batch.commit()
        })();
        if let Err(e) = result {
            (self.warn)(&format!(
                "could not record the check in the state store: {e}"
            ));
        }
    }
}

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
    signatures: &mut Vec<FindingSignature>,
) -> Known {
    let mut known = Known {
        class: resource.class.clone(),
        state: "converged",
        kinds: Vec::new(),
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
    for f in &findings {
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
                subtree: r.id.kind == "Tree",
            })
        })
        .collect();
    Loaded {
        classes: specs,
        watch,
        resources: catalogue.resources.len(),
    }
}
