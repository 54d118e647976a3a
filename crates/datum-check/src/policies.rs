//! The classes' policies applied to one check's findings: report, revert
//! (through the engine's normal apply pass, after saving the drifted
//! content; flap detection may back off or quarantine), accept (record the
//! observation, write the patch that makes the repository follow it) and
//! quarantine (the resource or the host). `Act::Look` only says what each
//! would do. A resource a person quarantined is never reverted
//! (break-glass). Must not: observe (the check did) or print.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use datum_catalog::Catalogue;
use datum_core::{Observed, Presence, Resource, ResourceId};
use datum_drift::check::{CheckFinding, Handling};
use datum_drift::classes::{ClassSpec, Classes, Policy, Scope};
use datum_drift::policy::{Decision, Standing, decide};
use datum_engine::{Mode, PassContext};
use datum_host::Host;
use datum_providers::Registry;
use datum_store::backup::{BackupReason, BackupStore, SavedFrom};
use datum_store::{Quarantine, QuarantineSource, QuarantineTarget, Store};

use crate::error::{CheckError, Context as _};
use crate::{Act, Options};

/// The policies of the classes, applied to this check's findings.
pub(crate) struct Policies<'a> {
    pub(crate) registry: &'a Registry,
    /// The repository the catalogue came from (accept's patches name its
    /// files).
    pub(crate) repo: &'a Path,
    /// Opens the backup store, on first use.
    pub(crate) backups_opener: &'a dyn Fn() -> Result<BackupStore, crate::error::OpenerError>,
    pub(crate) args: &'a Options,
    pub(crate) catalogue: &'a Catalogue,
    pub(crate) by_id: &'a HashMap<&'a ResourceId, &'a Resource>,
    /// Loaded on first use (only `accept` needs the documents).
    pub(crate) repository: std::cell::OnceCell<datum_catalog::Repository>,
    pub(crate) classes: &'a Classes,
    pub(crate) host: &'a Host,
    pub(crate) store: &'a mut Store,
    pub(crate) observations: &'a BTreeMap<ResourceId, Observed>,
    /// What is quarantined, read once by the check and kept as the
    /// policies quarantine more.
    pub(crate) quarantines: Quarantines,
    pub(crate) now: i64,
    pub(crate) backups: Option<BackupStore>,
    pub(crate) act: Act,
    /// Why each not-converged resource is not (no policy acts on those).
    pub(crate) unconverged: &'a BTreeMap<ResourceId, String>,
    /// The drifted resources that require a quarantined one (directly or
    /// not), with that one: a revert is an apply, and apply holds them back.
    pub(crate) held_back: &'a BTreeMap<ResourceId, ResourceId>,
    /// The resources whose type changed and that own no subtree (an accept
    /// policy takes none of them): asked per finding, so a mass drift costs
    /// no scan of the findings per finding.
    pub(crate) type_changed: &'a BTreeSet<ResourceId>,
    /// What the reverts' passes said that is no resource's failure
    /// (`datum_engine::PassSummary::warnings`), for the report.
    pub(crate) warnings: Vec<String>,
    /// The caller's sensitive paths and words, asked by the reverts'
    /// passes (`datum_engine::PassContext::sensitive`); `None`: each pass
    /// makes its own of what it reverts.
    pub(crate) sensitive: Option<&'a datum_engine::SensitiveOnce<'a>>,
}

/// The quarantines in memory: read once per check (`run`), asked per
/// finding by `Policies::standing`, and told each quarantine the policies
/// add (as the store records it: a person's stays a person's).
#[derive(Debug, Default)]
pub(crate) struct Quarantines {
    /// The resources a person quarantined.
    person: HashSet<ResourceId>,
    /// The resources quarantined, by anyone.
    resources: HashSet<ResourceId>,
    /// Who quarantined the host, if anyone did.
    host: Option<QuarantineSource>,
}

impl Quarantines {
    pub(crate) fn new(all: &[Quarantine]) -> Self {
        let mut view = Self::default();
        for q in all {
            view.add(&q.target, q.source);
        }
        view
    }

    /// The resources quarantined, by anyone.
    pub(crate) fn resources(&self) -> &HashSet<ResourceId> {
        &self.resources
    }

    fn add(&mut self, target: &QuarantineTarget, source: QuarantineSource) {
        let person = source == QuarantineSource::Person;
        match target {
            QuarantineTarget::Resource(id) => {
                if person {
                    self.person.insert(id.clone());
                }
                self.resources.insert(id.clone());
            }
            QuarantineTarget::Host => {
                if person || self.host != Some(QuarantineSource::Person) {
                    self.host = Some(source);
                }
            }
        }
    }
}

/// What a class's policy did about one finding: the words a person reads,
/// what they come to, and the `on_change_by` rule that chose the policy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Handled {
    pub(crate) action: String,
    pub(crate) handling: Handling,
    pub(crate) rule: Option<String>,
}

impl Handled {
    fn new(action: String, handling: Handling) -> Self {
        Self {
            action,
            handling,
            rule: None,
        }
    }

    /// Reported only (no policy acts on it).
    pub(crate) fn reported() -> Self {
        Self::new("reported".to_owned(), Handling::Open)
    }
}

impl Policies<'_> {
    /// The start of the longest flap window of any class (a class not
    /// declared has the default's): reverts older than that are read by
    /// no class's flap detection.
    fn revert_log_since(&self) -> i64 {
        let longest = self
            .classes
            .classes
            .values()
            .map(|c| c.flap_window)
            .chain([ClassSpec::default_named("").flap_window])
            .max()
            .unwrap_or_default();
        self.now
            .saturating_sub(i64::try_from(longest.as_secs()).unwrap_or(i64::MAX))
    }

    /// What was done about each finding, in order.
    pub(crate) fn apply(&mut self, findings: &[CheckFinding]) -> Result<Vec<Handled>, CheckError> {
        let mut actions: Vec<Handled> = vec![Handled::reported(); findings.len()];
        let mut rules: BTreeMap<ResourceId, Option<String>> = BTreeMap::new();
        let mut to_revert: Vec<ResourceId> = Vec::new();
        let mut handled: BTreeMap<ResourceId, Handled> = BTreeMap::new();
        if let Err(e) = self.decide_each(findings, &mut rules, &mut to_revert, &mut handled) {
            // Stopped before any revert: the reverts logged for flap
            // detection were not made.
            for id in &to_revert {
                let _ = self.store.withdraw_revert(id, self.now);
            }
            return Err(e);
        }
        if !to_revert.is_empty() {
            let outcomes = self.revert(&to_revert, findings);
            let reverted: HashSet<&ResourceId> = match &outcomes {
                Ok(outcomes) => outcomes
                    .iter()
                    .filter(|(_, o)| o.handling == Handling::Reverted)
                    .map(|(id, _)| id)
                    .collect(),
                Err(_) => HashSet::new(),
            };
            // What was not reverted (failed, blocked, or the evidence could
            // not be saved first): its entry, logged above, is withdrawn. A
            // store that refuses leaves it, which only counts a revert too
            // many: flap detection errs toward backing off, never toward
            // reverting without end.
            for id in to_revert.iter().filter(|id| !reverted.contains(id)) {
                let _ = self.store.withdraw_revert(id, self.now);
            }
            for (id, outcome) in outcomes? {
                handled.insert(id, outcome);
            }
        }
        for (i, f) in findings.iter().enumerate() {
            if let Some(done) = handled.get(&f.id) {
                actions[i] = Handled {
                    rule: rules.get(&f.id).cloned().flatten(),
                    ..done.clone()
                };
            }
        }
        Ok(actions)
    }

    /// Decides what each finding's policy does, carrying out all but the
    /// reverts (returned in `to_revert`, each already logged for flap
    /// detection).
    fn decide_each(
        &mut self,
        findings: &[CheckFinding],
        rules: &mut BTreeMap<ResourceId, Option<String>>,
        to_revert: &mut Vec<ResourceId>,
        handled: &mut BTreeMap<ResourceId, Handled>,
    ) -> Result<(), CheckError> {
        // Each resource's first `type_changed` finding, looked up by id: a
        // scan of every finding for each such resource was findings x
        // findings (20,000 Files turned into links in a class that accepts).
        let mut type_changed: HashMap<&ResourceId, &CheckFinding> = HashMap::new();
        if !self.type_changed.is_empty() {
            for o in findings {
                if o.finding.category == "type_changed" {
                    type_changed.entry(&o.id).or_insert(o);
                }
            }
        }
        for f in findings {
            if handled.contains_key(&f.id) {
                continue;
            }
            if let Some(why) = self.unconverged.get(&f.id) {
                handled.insert(f.id.clone(), Handled::new(why.clone(), Handling::Open));
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
            if policy == Policy::Accept
                && self.type_changed.contains(&f.id)
                && let Some(&changed) = type_changed.get(&f.id)
            {
                // Nothing in a declaration of this kind says what is there
                // now (a File cannot say "a link to X"), and the acceptance
                // would record only the type: whatever became of it next
                // (the link pointed elsewhere) would go unreported. A Tree
                // can follow an entry's new type (its source folder), and
                // its observation carries the tree's root hash, which sees
                // what becomes of it.
                let what: Vec<String> = changed
                    .finding
                    .diffs
                    .iter()
                    .map(|d| {
                        format!(
                            "{}: {} -> {}",
                            d.path(),
                            d.before_display(),
                            d.after_display()
                        )
                    })
                    .collect();
                handled.insert(
                    f.id.clone(),
                    Handled::new(
                        format!(
                            "{}: its type changed ({}), which its declaration cannot follow; declare what is there instead, or revert it",
                            if look { "would not accept" } else { "not accepted" },
                            what.join(", ")
                        ),
                        Handling::Open,
                    ),
                );
                continue;
            }
            let standing = self.standing(policy, spec, &f.id);
            if policy == Policy::Revert
                && !standing.person_quarantined
                && !standing.quarantined
                && let Some(by) = self.held_back.get(&f.id)
            {
                // Not a revert decision: nothing counts toward flapping.
                handled.insert(
                    f.id.clone(),
                    Handled::new(
                        format!("not reverted: blocked (by {by}, quarantined)"),
                        Handling::Quarantined,
                    ),
                );
                continue;
            }
            let window_start = self.now - spec.flap_window.as_secs() as i64;
            let log_since = self.revert_log_since();
            let store = &mut *self.store;
            let (id, now) = (&f.id, self.now);
            // Both count this decision among the reverts of the window. A
            // reconcile logs it before it acts: a back-off or an escalation,
            // and a revert before it is made, so no revert is ever made that
            // flap detection does not count (logged after, a store that
            // refused the write lost it, and a resource reverted again and
            // again while the store refuses was never taken for flapping).
            // A log the store refuses stops the check before anything is
            // reverted. A revert that then fails changed nothing, so the
            // resource did not drift *again*: its entry is withdrawn
            // (below) and it is retried, never taken for flapping.
            let decision = decide(policy, spec, look, standing, || {
                store.reverts_since(id, window_start).map(|n| n + 1)
            })?;
            if matches!(
                decision,
                Decision::BackOff { would: false, .. }
                    | Decision::Escalate { would: false }
                    | Decision::Revert { would: false }
            ) {
                store
                    .record_revert(id, now, window_start, log_since)
                    .with_context(|| {
                        format!(
                            "cannot log the revert of {id} for flap detection in the state store: nothing was reverted"
                        )
                    })?;
            }
            let handling = decision.handling();
            let action = match &decision {
                Decision::Revert { would: false } => {
                    to_revert.push(f.id.clone());
                    Handled::new("reverting".to_owned(), handling)
                }
                Decision::Escalate { would: false } => {
                    let target = QuarantineTarget::Resource(f.id.clone());
                    self.store.quarantine(
                        &target,
                        &Decision::flapping_reason(spec),
                        QuarantineSource::Flapping,
                        self.now,
                    )?;
                    self.quarantines.add(&target, QuarantineSource::Flapping);
                    Handled::new("quarantined: flapping".to_owned(), handling)
                }
                Decision::Accept { would: false } => self.accept(&f.id, findings)?,
                Decision::Quarantine { would: false, host } => {
                    let target = if *host {
                        QuarantineTarget::Host
                    } else {
                        QuarantineTarget::Resource(f.id.clone())
                    };
                    self.store.quarantine(
                        &target,
                        &format!("drift{drift_by}: {}", f.finding.category),
                        QuarantineSource::Policy,
                        self.now,
                    )?;
                    self.quarantines.add(&target, QuarantineSource::Policy);
                    Handled::new("quarantined".to_owned(), handling)
                }
                other => Handled::new(
                    other.word().unwrap_or_else(|| "reported".to_owned()),
                    handling,
                ),
            };
            handled.insert(f.id.clone(), action);
        }
        Ok(())
    }

    /// Whether a quarantine holds `id` (read for a `revert` policy, which
    /// never reverts what is quarantined, a `quarantine` policy, which does
    /// not quarantine again, and an `accept` policy, which accepts nothing
    /// a person quarantined; `report` does not depend on it). A revert
    /// is held by the resource's quarantine and by the host's, whoever made
    /// it. A `quarantine` policy of resource scope asks about the resource alone:
    /// a person's quarantine of the host does not stand in for the
    /// resource's own, which must outlast the host's release.
    fn standing(&self, policy: Policy, spec: &ClassSpec, id: &ResourceId) -> Standing {
        let q = &self.quarantines;
        let host_by_person = q.host == Some(QuarantineSource::Person);
        if policy == Policy::Quarantine && spec.scope == Scope::Host {
            return Standing {
                person_quarantined: host_by_person,
                quarantined: !host_by_person && q.host.is_some(),
            };
        }
        // What counts: break-glass (what a person quarantined, the resource
        // or for a revert or an accept the host, stays as the person left
        // it: not reverted, not accepted as the new normal); for a revert
        // or a quarantine, the resource's quarantine by anyone; for a
        // revert, the host's too (a revert is an apply, and a quarantined
        // host is excluded from apply whole).
        let (person_host, resource, host) = match policy {
            Policy::Revert => (true, true, true),
            Policy::Accept => (true, false, false),
            Policy::Quarantine => (false, true, false),
            Policy::Report => {
                return Standing {
                    person_quarantined: false,
                    quarantined: false,
                };
            }
        };
        let person_quarantined = q.person.contains(id) || (person_host && host_by_person);
        let quarantined = !person_quarantined
            && ((resource && q.resources.contains(id)) || (host && q.host.is_some()));
        Standing {
            person_quarantined,
            quarantined,
        }
    }

    fn backups(&mut self) -> Result<&mut BackupStore, CheckError> {
        let store = match self.backups.take() {
            Some(store) => store,
            None => (self.backups_opener)().map_err(CheckError::Backups)?,
        };
        Ok(self.backups.insert(store))
    }

    /// Saves the drifted content of `id` (regular files it manages, or the
    /// changed and unmanaged files inside a Tree) with `reason`.
    fn save_evidence(
        &mut self,
        id: &ResourceId,
        findings: &[CheckFinding],
        reason: BackupReason,
    ) -> Result<(), CheckError> {
        let Some(&resource) = self.by_id.get(id) else {
            return Ok(());
        };
        let Some(provider) = self.registry.lookup(&id.kind) else {
            return Ok(());
        };
        let Some(base) = Registry::path_claimed(provider, resource).map(PathBuf::from) else {
            return Ok(());
        };
        let mut paths: Vec<PathBuf> = Vec::new();
        if provider.owns_subtree() {
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
            // Streamed into the store, never read whole: a file larger
            // than the store keeps is recorded by its size and digest.
            // Owner and mode are those of the file opened, whose bytes are
            // saved (the name may hold another since the look above).
            let Ok((mut file, stat)) = at.open_file_stat() else {
                continue;
            };
            let len = stat.meta.size;
            backups.save_from(
                &SavedFrom {
                    resource: id,
                    declared_path: &declared,
                    len,
                    mode: stat.meta.mode,
                    uid: stat.meta.uid,
                    gid: stat.meta.gid,
                    reason,
                    sensitive,
                    at: now,
                },
                &mut file,
            )?;
        }
        Ok(())
    }

    /// Applies the declaration to `ids` only, through the engine (staging,
    /// validators, verify), after saving what drifted.
    fn revert(
        &mut self,
        ids: &[ResourceId],
        findings: &[CheckFinding],
    ) -> Result<Vec<(ResourceId, Handled)>, CheckError> {
        for id in ids {
            self.save_evidence(id, findings, BackupReason::Revert)?;
        }
        let wanted: HashSet<&ResourceId> = ids.iter().collect();
        // The whole catalogue, the pass visiting only the reverted
        // resources (as a partial apply visits its selection): it still
        // tells which services a reverted file notifies, and the engine
        // reloads (or restarts) each after the revert, with the gates of a
        // whole pass (its group validated), when the service is itself as
        // declared; otherwise the activation stays owed, durably (the
        // check's `activation_owed` until an apply pays it), and a warning
        // says why. A catalogue of the reverted resources alone hid the
        // services, and the debt was dropped: the service kept running
        // what the revert undid. Not `whole_catalogue`: a revert forgets no
        // other resource's record.
        let options = datum_engine::PassOptions {
            only: Some(ids.iter().cloned().collect()),
            ..datum_engine::PassOptions::default()
        };
        let mut ctx = PassContext {
            registry: self.registry,
            host: self.host,
            mode: Mode::Apply,
            store: Some(&mut *self.store),
            backups: self.backups.as_mut(),
            now: self.now,
            // What a quarantine holds, as an apply's pass is given it: a
            // quarantined service the reverted file notifies is not
            // reloaded (the reload stays owed, and the pass says why).
            skip: self.quarantines.resources().clone(),
            sensitive: self.sensitive,
        };
        // Two resources managing one object (`Refused::Shared`) leave an
        // empty summary: neither has an outcome.
        let summary = datum_engine::run_pass_with(
            self.catalogue,
            &mut ctx,
            &mut datum_engine::SilentReporter,
            &options,
        )
        .unwrap_or_default();
        self.warnings.extend(summary.warnings);
        // A service the revert notified whose activation failed (its group
        // refused, the reload failed): no finding of this check is its, so
        // the failure is said as a warning; the activation stays owed.
        for r in summary.resources.iter().filter(|r| !wanted.contains(&r.id)) {
            if let datum_core::Outcome::Failed { reason, .. } = &r.outcome {
                self.warnings
                    .push(format!("{}, notified by the revert: {reason}", r.id));
            }
        }
        Ok(summary
            .resources
            .into_iter()
            .filter(|r| wanted.contains(&r.id))
            .map(|r| {
                let done = match &r.outcome {
                    datum_core::Outcome::Changed { .. } | datum_core::Outcome::Unchanged => {
                        Handled::new("reverted".to_owned(), Handling::Reverted)
                    }
                    datum_core::Outcome::Failed { reason, .. } => {
                        Handled::new(format!("revert failed: {reason}"), Handling::RevertFailed)
                    }
                    o => Handled::new(format!("revert {}", o.word()), Handling::Open),
                };
                (r.id, done)
            })
            .collect())
    }

    /// Writes the patch that makes the repository follow the observation,
    /// then records the observation as accepted.
    fn accept(
        &mut self,
        id: &ResourceId,
        findings: &[CheckFinding],
    ) -> Result<Handled, CheckError> {
        let (Some(&resource), Some(observed)) = (self.by_id.get(id), self.observations.get(id))
        else {
            return Ok(Handled::reported());
        };
        // A sensitive resource's acceptance is recorded only keyed (its
        // declaration hash covers its content, the observation's its live
        // content's hash): without this host's key it is not accepted.
        let (Some(declaration_hash), Some(observation_hash)) = (
            self.store
                .recorded_hash(resource.sensitive, &resource.declaration_hash),
            self.store
                .recorded_hash(resource.sensitive, &observed.acceptance_hash()),
        ) else {
            return Ok(Handled::new(
                "reported, not accepted: this host's digest key cannot be read, and a sensitive resource's acceptance is recorded only by its keyed digests".to_owned(),
                Handling::Open,
            ));
        };
        self.save_evidence(id, findings, BackupReason::Drift)?;
        // A private folder, opened once: every patch and the summary are
        // written relative to it without following a link.
        let dir = match &self.args.patch_dir {
            Some(dir) => datum_host::PrivateDir::open_path(dir, true),
            None => datum_host::PrivateDir::open_in(
                self.host,
                &Path::new(datum_host::lock::STATE_FOLDER).join("accepted"),
                true,
            ),
        }
        .context("cannot open the folder for accepted patches")?
        .ok_or(CheckError::NoPatchFolder)?;
        let repository = match self.repository.get() {
            Some(repository) => repository,
            None => {
                let loaded = datum_catalog::Compiler::new(self.registry)
                    .load(self.repo)
                    .map_err(CheckError::Repository)?;
                self.repository.get_or_init(|| loaded)
            }
        };
        let resource = &with_field_origins(repository, resource, &self.catalogue.host.labels);
        let written = write_accept_patch(
            self.registry,
            repository,
            resource,
            observed,
            findings,
            &dir,
        )?;
        // Recorded only once its patch is written, with the patch's path
        // (plan and apply point at it while the repository has not
        // followed): an acceptance whose patch could not be written (a
        // full or read-only folder) would hide the change from every later
        // check and plan with nothing to carry into the repository. Until
        // then the change stays reported and the next reconcile tries again.
        self.store.accept(
            id,
            &declaration_hash,
            &observation_hash,
            self.now,
            &written.display().to_string(),
        )?;
        Ok(Handled::new(
            format!("accepted (patch: {})", written.display()),
            Handling::Accepted,
        ))
    }
}

/// The accept note for one field of a finding: where to set it, to what.
fn field_note(
    registry: &Registry,
    resource: &Resource,
    category: &str,
    d: &datum_report::AttrDiff,
) -> String {
    // A deletion's difference is named `presence`; the field that declares
    // it is `ensure`.
    let field = match d.path() {
        "presence" => "ensure",
        other => other,
    };
    let at = resource
        .field_origins
        .get(field)
        .map_or_else(|| resource.origin.to_string(), ToString::to_string);
    // A value withheld (sensitive, or not recorded) is no value to set:
    // `(sensitive)` written into the manifest would be a wrong one (a
    // User's shell, its hash).
    match d.after().filter(|_| !d.is_sensitive()) {
        // What the host shows that no declaration sets (a Service's
        // `masked`): no value to write into the manifest either.
        Some(value) if !declares_field(registry, &resource.id.kind, field) => format!(
            "{at}: `{field}` is `{value}` on the host ({category}), which no declaration sets: the notes for the other fields carry what it leaves, or undo it on the host"
        ),
        Some(value) => format!("{at}: set `{field}` to `{value}` ({category})"),
        None => format!(
            "{at}: `{field}` changed on the host ({category}); its value is {} here: read it on the host and carry it into the repository by hand",
            if d.is_sensitive() {
                "sensitive and not shown"
            } else {
                "not recorded"
            }
        ),
    }
}

/// Whether `kind`'s declaration has `field` (its declaration schema names
/// it); an unknown kind is taken to.
fn declares_field(registry: &Registry, kind: &str, field: &str) -> bool {
    let Some(provider) = registry.lookup(kind) else {
        return true;
    };
    let schema = provider.declaration_schema(&mut datum_providers::common::schema::generator());
    schema.as_value()["properties"]
        .as_object()
        .is_none_or(|properties| properties.contains_key(field))
}

/// Writes `<dir>/<Kind>-<name>.patch` (content, against the repository
/// source when it is a `source:` file) or `.content` (the observed bytes, for
/// inline content and templates), and appends to `<dir>/SUMMARY.md` what to
/// commit. Returns the file written.
fn write_accept_patch(
    registry: &Registry,
    repository: &datum_catalog::Repository,
    resource: &Resource,
    observed: &Observed,
    findings: &[CheckFinding],
    dir: &datum_host::PrivateDir,
) -> Result<PathBuf, CheckError> {
    let id = &resource.id;
    let mut notes: Vec<String> = Vec::new();
    let mut name = datum_drift::policy::patch_file_name(id, "txt");
    let mut written = dir.file_path(&name);
    // Whether a patch or content file took the notes' place.
    let mut carried = false;
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
                    carried = true;
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
                carried = true;
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
    if crate::owns_subtree(registry, &id.kind) {
        // A Tree's entries: what to copy into (or remove from) its source
        // folder. The live files are in the backup store (reason `drift`).
        let base = registry.path_of(resource).unwrap_or("");
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
                notes.push(field_note(registry, resource, &f.finding.category, d));
            }
            // Content that changed but was not carried: the live file's
            // bytes were not at hand (a sensitive resource's are never
            // copied out of the host; a file not readable by everyone is
            // never read for a diff; one too large is not diffed). Said,
            // never dropped, and never with a byte of it.
            if !carried && f.finding.diffs.iter().any(|d| d.path() == "content") {
                let at = ["source", "template", "content"]
                    .iter()
                    .find_map(|key| resource.field_origins.get(*key))
                    .map_or_else(|| resource.origin.to_string(), ToString::to_string);
                let why = if resource.sensitive {
                    "the resource is sensitive: its content is never copied out of the host"
                } else {
                    "the live file is not readable by everyone, or too large to diff"
                };
                notes.push(format!(
                    "{at}: `content` changed on the host ({}); it is not copied here ({why}): read it on the host and carry it into the repository by hand",
                    f.finding.category
                ));
            }
        }
    }
    if notes.is_empty() {
        notes.push("nothing to carry into the repository".to_owned());
    }
    // No patch or content file (metadata only, a Tree, nothing to carry):
    // the `.txt` named in the report, plan and apply holds the notes, so
    // the path they point at exists.
    if !carried {
        let mut text = notes.join("\n");
        text.push('\n');
        dir.write_atomic(&name, text.as_bytes())
            .with_context(|| format!("cannot write {}", written.display()))?;
    }
    let mut section = format!("## {id} (declared at {})\n", resource.origin);
    for n in notes {
        section.push_str("- ");
        section.push_str(&n);
        section.push('\n');
    }
    section.push('\n');
    let old = dir
        .read(SUMMARY)
        .with_context(|| format!("cannot read {}", dir.file_path(SUMMARY).display()))?
        .unwrap_or_default();
    let mut summary = summary_without(&old, id);
    summary.extend_from_slice(section.as_bytes());
    dir.write_atomic(SUMMARY, &summary)
        .with_context(|| format!("cannot write {}", dir.file_path(SUMMARY).display()))?;
    Ok(written)
}

/// The file in the patch folder that says, per accepted resource, what to
/// carry into the repository.
const SUMMARY: &str = "SUMMARY.md";

/// `summary` (SUMMARY.md's bytes) without the sections of `id`: each
/// acceptance replaces its resource's section (moved to the end), so the
/// file holds one section per resource accepted, the latest, instead of
/// one more at every acceptance of a file that keeps changing. A section
/// runs from its `## ` line to the next one.
fn summary_without(summary: &[u8], id: &ResourceId) -> Vec<u8> {
    let header = format!("## {id} (declared at ");
    let mut kept = Vec::with_capacity(summary.len());
    let mut dropping = false;
    for line in summary.split_inclusive(|b| *b == b'\n') {
        if line.starts_with(b"## ") {
            dropping = line.starts_with(header.as_bytes());
        }
        if !dropping {
            kept.extend_from_slice(line);
        }
    }
    kept
}

/// `resource` with the place each of its fields is declared, for the
/// notes of an acceptance (`file:line: set `mode` to ...`). A compile
/// records them only when explaining (they cost most of a large
/// catalogue's memory), and a catalogue snapshot never keeps them, so they
/// are read here from the documents declaring the resource in the layers
/// this host gets: the last one writing a field sets it, as the compile
/// layers them; `source`, `template` and `content` are the field `content`.
fn with_field_origins<'r>(
    repository: &datum_catalog::Repository,
    resource: &'r Resource,
    labels: &BTreeMap<String, String>,
) -> std::borrow::Cow<'r, Resource> {
    if !resource.field_origins.is_empty() {
        return std::borrow::Cow::Borrowed(resource);
    }
    let mut origins = BTreeMap::new();
    for doc in repository.documents.iter().filter(|d| d.id == resource.id) {
        if !repository
            .layer_of(doc)
            .is_some_and(|layer| layer.matcher.matches(labels))
        {
            continue;
        }
        for (key, _, pos) in doc.desired_fields() {
            let field = match key {
                "source" | "template" => "content",
                other => other,
            };
            origins.insert(field.to_owned(), doc.origin_at(pos));
        }
    }
    std::borrow::Cow::Owned(Resource {
        field_origins: origins,
        ..resource.clone()
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use datum_report::AttrDiff;

    /// `systemctl mask` on a unit declared running: accepting it must not
    /// write `masked` into the manifest (no Service declares it), while
    /// `state` and `enabled` are still values to set.
    #[test]
    fn an_accept_note_sets_declared_fields_only() {
        let registry = datum_providers::registry();
        let resource = Resource::new(
            ResourceId::new("Service", "web"),
            serde_json::json!({"state": "running"}),
        );
        let note = field_note(
            registry,
            &resource,
            "changed_outside",
            &AttrDiff::plain("masked", "false", "true"),
        );
        assert!(!note.contains("set `masked`"), "{note}");
        assert!(note.contains("`masked` is `true` on the host"), "{note}");
        let note = field_note(
            registry,
            &resource,
            "changed_outside",
            &AttrDiff::plain("state", "running", "stopped"),
        );
        assert!(note.contains("set `state` to `stopped`"), "{note}");
    }
}
