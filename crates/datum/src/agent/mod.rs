//! The binary's side of `datum agent`: [`RepoChecker`], which gives the
//! daemon (`datum-agent`) a repository to load and classes to check.
//!
//! Owns the wiring: compiling the repository for this host (keeping the
//! last good catalogue when a reload fails lint), the class table from
//! `datum.yaml`, the state store, the root lock around each check, the
//! attribution feed (`datum_check::attribution`: started at each load, what
//! it heard recorded in the store before each check) and the courier that
//! delivers fleet reports (`datum_reporting::Courier`). The check itself is
//! `datum_check::watch` (report-only classes resource by resource, the
//! others through `datum_check::run` in process, on the catalogue loaded
//! here). Must not: print anything but diagnostics and log lines (the daemon
//! logs), or put a resource name or value in a metric.
//!
//! A repository reached through a link (`datum pull` deploys one) is pinned
//! at every load to the folder the link points at then: the catalogue, the
//! in-process reconciles and the reported revision all come from that one
//! checkout, whatever the link does meanwhile. [`puller`] pulls on an
//! interval and asks for a reload when a new revision was deployed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use datum_agent::{Cancel, CheckError, CheckReport, ClassChecker, LoadError, Loaded, Scope};
use datum_catalog::{Catalogue, HostIdentity};
use datum_check::watch::{AgentCheck, Memory};
use datum_drift::classes::Classes;
use datum_host::lock::RootLock;
use datum_host::{Host, HostError};
use datum_reporting::Courier;
use datum_store::Store;

pub mod puller;

use crate::cli::GlobalArgs;
use crate::reporting::Reporting;

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
    /// Without a store: why the last open failed (a full file system has
    /// another way back than a damaged store).
    without_store: datum_check::WithoutStore,
    /// The state database's file `store` was opened from (device, inode).
    store_file: Option<(u64, u64)>,
    /// What the checks know of each resource between checks.
    memory: Memory,
    /// Who changed the files of classes with `attribute: true`.
    attribution: Option<datum_check::attribution::Feed>,
    warn: Box<dyn Fn(&str)>,
    info: Box<dyn Fn(&str)>,
    /// The folder the repository was read from at the last good load.
    pinned: Option<PathBuf>,
    /// The revision `datum pull` deployed there, if it did.
    revision: Option<String>,
    /// The revision the loaded catalogue was compiled from, as its fleet
    /// reports name it (`git:<commit>`, `stamp:<digest>`).
    reported_revision: String,
    /// `report.yaml`, when the host reports to a fleet server (read again
    /// at each load).
    reporting: Option<Reporting>,
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
            without_store: datum_check::WithoutStore::NotMade,
            store_file: None,
            memory: Memory::default(),
            attribution: None,
            warn,
            info: Box::new(|_| {}),
            pinned: None,
            revision: None,
            reported_revision: "unknown".to_owned(),
            reporting: None,
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
    ///
    /// A store the agent holds open is opened again when the file at its
    /// path is another one (`datum apply --rebuild-state` moved a damaged
    /// store aside and made a new one, or a person put a copy in its
    /// place): else the agent went on recording its checks, quarantines
    /// and reports in the file moved aside, which nothing else reads, until
    /// it was restarted.
    fn open_store(&mut self) {
        if self.store.is_some() {
            if self.store_file.is_none() || self.store_file_now() == self.store_file {
                return;
            }
            (self.warn)(
                "the state store was replaced since the agent opened it (datum apply --rebuild-state, or a copy put in its place): opening it again",
            );
            self.store = None;
            self.courier = None;
        }
        let opened = crate::context::open_store_at(
            &self.paths.root,
            self.paths.state.as_deref(),
            false,
            crate::context::StoreNeed::Required("recorded"),
        );
        match opened {
            Ok(store) => {
                self.store = store;
                self.store_file = self.store_file_now();
            }
            Err(e) => {
                let full = e.chain().any(|cause| {
                    matches!(
                        cause.downcast_ref::<datum_store::StoreError>(),
                        Some(datum_store::StoreError::Full { .. })
                    )
                });
                self.without_store = if full {
                    datum_check::WithoutStore::Full
                } else {
                    datum_check::WithoutStore::Unusable
                };
                (self.warn)(&format!(
                    "state store unavailable, checking without history (policies are refused): {e:#}"
                ));
            }
        }
    }

    /// The device and inode of the state database's file now (`None`:
    /// there is none, or it cannot be read).
    fn store_file_now(&self) -> Option<(u64, u64)> {
        let state = self.state_files();
        let stat = state.dir.as_ref()?.lstat(&state.name).ok()??;
        Some((stat.meta.dev, stat.meta.inode))
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
        // the decoded catalogue is all that stays in memory). A compile is
        // remembered as an apply's is: the agent makes the state store where
        // there is none (`open_store`, below), so its first load on a root
        // Datum never managed keeps its compile too, once it has.
        let state = self.state_files();
        let (lazy, _, unkept) = crate::context::compile_or_reuse(
            &paths.repo,
            &state,
            &identity,
            crate::context::Purpose::Agent,
        )
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
        let mut compiled_from = lazy.revision.clone();
        let (mut catalogue, unkept) = match lazy.into_catalogue() {
            Ok(catalogue) => (catalogue, unkept),
            Err(e) => {
                // Damaged after it was checked (a disk error): forget it and
                // compile.
                (self.warn)(&format!("{e}; compiling the repository"));
                crate::context::forget_snapshot_of(&state);
                let (lazy, _, unkept) = crate::context::compile_or_reuse(
                    &paths.repo,
                    &state,
                    &identity,
                    crate::context::Purpose::Agent,
                )
                .map_err(|d| self.lint_error(&d))?;
                compiled_from = lazy.revision.clone();
                (lazy.into_catalogue().map_err(|e| self.other(e))?, unkept)
            }
        };
        // Kept for pass after pass: its resources hold their parsed
        // declarations (a compile's are held already; a snapshot's are
        // declared at their first use and held from then on).
        catalogue.hold_declarations();
        let host = Host::with_name(self.paths.root.clone(), identity.name.clone())
            .with_boundary(catalogue.boundary.clone());
        let loaded =
            datum_check::watch::loaded(datum_providers::registry(), &catalogue, &classes, &host);
        // Forget resources that are no longer declared.
        self.memory.keep_declared(&catalogue);
        datum_check::attribution::restart(
            &mut self.attribution,
            &classes,
            &loaded.watch,
            &*self.info,
            &*self.warn,
        );
        self.revision = datum_pull::deployed_revision(&paths.repo).map(|d| d.commit);
        self.reported_revision =
            crate::reporting::revision::repository_revision(&paths.repo, compiled_from.as_deref());
        self.pinned = Some(paths.repo.clone());
        self.identity = Some(identity);
        self.catalogue = Some(catalogue);
        self.classes_doc = classes_doc;
        self.classes = Some(classes);
        self.reporting = Reporting::load(&host);
        self.courier = None;
        self.open_store();
        // Kept in the folder the store was just made in (never without it).
        if let (Some(unkept), Some(_), Some(catalogue)) = (unkept, &self.store, &self.catalogue)
            && let Some(dir) = &self.state_files().dir
        {
            unkept.keep_in(dir, catalogue, &self.classes_doc);
        }
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
        let (Some(catalogue), Some(identity), Some(_)) = (
            self.catalogue.as_ref(),
            self.identity.as_ref(),
            self.classes.as_ref(),
        ) else {
            return Err(CheckError {
                scope: scope_word,
                source: Box::new(RepoProblem::NotLoaded),
            });
        };
        let host = Host::with_name(self.paths.root.clone(), identity.name.clone())
            .with_boundary(catalogue.boundary.clone());
        // One writer per root for the whole check: no apply changes files
        // under it, and the state store is written by one process at a time.
        let Some(lock) = self.lock_root(&host, cancel).map_err(|e| CheckError {
            scope: scope_word.clone(),
            source: Box::new(e),
        })?
        else {
            // Stopped while another pass held the root: nothing was checked.
            return Ok(CheckReport {
                cancelled: true,
                ..CheckReport::default()
            });
        };
        // Under the lock, the store the checks record into is the one at
        // its path (an apply may have replaced it since the last check).
        self.open_store();
        let (Some(catalogue), Some(identity), Some(classes)) = (
            self.catalogue.as_ref(),
            self.identity.as_ref(),
            self.classes.as_ref(),
        ) else {
            return Err(CheckError {
                scope: scope_word,
                source: Box::new(RepoProblem::NotLoaded),
            });
        };
        // The in-process reconciles name the repository pinned at the last
        // good load (patches' sources, the layers shown).
        let global = self.pinned_global();
        let backups = || crate::context::open_backups(&global).map_err(Into::into);
        // Read each check: a key made after the agent started is used.
        let key = crate::context::digest_key(&global);
        let checked = datum_check::watch::run_agent_check(
            AgentCheck {
                registry: datum_providers::registry(),
                catalogue,
                classes_doc: &self.classes_doc,
                classes,
                identity,
                host: &host,
                repo: &global.repo,
                revision: &self.reported_revision,
                layers: crate::context::layers_used(&global, identity),
                backups: &backups,
                store: self.store.as_mut(),
                without_store: self.without_store,
                reporting: self.reporting.as_ref(),
                attributing: self.attribution.is_some(),
                warn: &*self.warn,
                memory: &mut self.memory,
                digest_key: key.as_ref(),
            },
            scope,
            cancel,
        );
        if checked.queued {
            self.wake_courier();
        }
        drop(lock);
        Ok(checked.report)
    }
}

/// How long one attempt at the root lock waits before the stop flag is
/// looked at again.
const LOCK_SLICE: Duration = Duration::from_millis(200);

impl RepoChecker {
    /// Takes the root lock, waiting up to `--lock-timeout` for another pass
    /// (an apply) to finish, as `datum check` does; `None` when a stop was
    /// asked for meanwhile (SIGTERM must not wait out the timeout: systemd
    /// kills a service that does not stop within its `TimeoutStopSec`). The
    /// wait is logged once, so the journal says why a check is late.
    fn lock_root(&self, host: &Host, cancel: &Cancel) -> Result<Option<RootLock>, HostError> {
        let timeout = self.paths.lock_timeout;
        let started = Instant::now();
        let mut said = false;
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            match RootLock::acquire(host, left.min(LOCK_SLICE)) {
                Ok(lock) => return Ok(Some(lock)),
                Err(HostError::LockTimeout { path, .. }) => {
                    let waited = started.elapsed();
                    if waited >= timeout {
                        return Err(HostError::LockTimeout { path, waited });
                    }
                    if cancel.is_cancelled() {
                        return Ok(None);
                    }
                    if !said {
                        said = true;
                        (self.info)(&format!(
                            "waiting for the root lock {}: another Datum pass holds it (up to {})",
                            path.display(),
                            humantime::format_duration(timeout)
                        ));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Moves what attribution heard into the state store, where the check
    /// (this one's and `datum check`'s) reports it with the findings.
    fn record_writers(&mut self, scope: &Scope) {
        let Some(feed) = self.attribution.as_ref() else {
            return;
        };
        let writers = feed.writers(scope, self.catalogue.as_ref(), &*self.info);
        if writers.is_empty() {
            return;
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

    /// Starts the delivery thread if needed and tells it a report is queued.
    fn wake_courier(&mut self) {
        let (root, state) = (self.paths.root.clone(), self.paths.state.clone());
        let reporting = self.reporting.clone();
        self.courier
            .get_or_insert_with(|| {
                Courier::start(
                    move || {
                        // Never creates one; an unusable store is warned
                        // about by the checks.
                        crate::context::open_store_at(
                            &root,
                            state.as_deref(),
                            false,
                            crate::context::StoreNeed::Optional("delivering"),
                        )
                        .ok()
                        .flatten()
                    },
                    reporting,
                )
            })
            .wake();
    }
}
