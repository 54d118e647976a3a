//! The pass itself: the five phases per resource, in dependency order.
//!
//! # Writing many files (issue 17)
//!
//! A first apply of thousands of files is bound by fsync, not by CPU: each
//! staged copy must be on disk before its rename, and each rename must be
//! on disk before the state store records it. Two things keep that cost
//! down without changing the order anyone can observe:
//!
//! - **Staging ahead** (`ahead`): resources of a kind whose staging touches
//!   nothing live ([`datum_providers::Capabilities::stages_ahead`]: File), that require nothing,
//!   have no validator and are neither held, quarantined nor refused, are
//!   staged by worker threads up to `ahead::stage_ahead()` positions before
//!   the loop reaches them: each copy written, given its owner and mode and
//!   fsynced on its own thread, so the file system commits many fsyncs
//!   together, while the loop activates the ones before. The loop then runs
//!   every resource's phases in order exactly as before, with the copy
//!   already staged: evidence, the owed reload, the rename, verify, the
//!   record. A staged copy the loop does not use (the resource was blocked,
//!   or failed before its rename) is discarded, and the live file was never
//!   touched. Nothing is staged past a resource of another kind the loop
//!   has not finished (a User, a Directory, a Package may change what a
//!   later file's staging reads).
//! - **Directory fsyncs once per directory**: a File's rename leaves its
//!   parent's fsync owed to the pass's [`datum_host::Durability`], and the
//!   state store flushes it before every commit
//!   ([`datum_store::Store::set_durability`]), so no record is ever ahead of
//!   the disk. The pass also makes everything durable before a resource
//!   whose requirements changed runs, before a service is reloaded
//!   (`activation`), and at its end; a directory whose fsync failed fails
//!   the resources that wrote there ([`make_durable`]). `datum_host::durability`
//!   says why this is safe after SIGKILL and after a power cut.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Instant;

use datum_catalog::Catalogue;
use datum_core::{
    Action, Diff, FieldChange, Intent, Observed, Outcome, Phase, Presence, Resource, ResourceId,
};
use datum_host::Host;
use datum_providers::{Activated, ProviderError, Registry, Staging};
use datum_store::backup::BackupStore;
use datum_store::{Accepted, ApplyFailure, Store, VerifiedRecord};

use crate::activation::{Notifications, SensitiveOnce, outside_report};
use crate::ahead::{Ahead, AheadInputs};
use crate::evidence;
use crate::gate;
use crate::group::GroupChecks;
use crate::observe::{self, Bound, Observations};
use crate::report::{Event, PassSummary, Reporter, ResourceReport};
use crate::select::{self, PassOptions, Refused, Shared};
use crate::settled::Settled;
use crate::verified::{VerifiedRecords, same_verification};

/// Whether the pass may change the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Observe, diff and plan only (`datum plan`).
    Plan,
    /// All five phases (`datum apply`).
    Apply,
}

/// What a pass runs against.
pub struct PassContext<'a> {
    /// The resource types this pass knows (the catalogue was compiled
    /// against the same registry).
    pub registry: &'a Registry,
    pub host: &'a Host,
    pub mode: Mode,
    /// The state store, when one could be opened (intent labels, verified
    /// metadata and owed reloads need it; a pass without one still runs).
    pub store: Option<&'a mut Store>,
    pub backups: Option<&'a mut BackupStore>,
    /// Unix seconds, injected so tests control the clock.
    pub now: i64,
    /// Resources excluded from this pass (quarantined by `datum check` or a
    /// person, until `datum release`): reported
    /// as blocked by themselves (never changed), and their dependents blocked
    /// by them.
    pub skip: HashSet<ResourceId>,
    /// The sensitive paths and words of the caller's run, when it asks
    /// them again after the pass (the fleet report's warnings, the agent's
    /// log): the pass asks the same, so they are read once. `None`: the
    /// pass makes its own of its catalogue.
    pub sensitive: Option<&'a SensitiveOnce<'a>>,
}

/// How one resource's phases ended, before it becomes a report.
pub(crate) struct Step {
    pub action: Action,
    pub diff: Diff,
    pub outcome: Outcome,
    pub detail: Option<String>,
    /// Why a validator's output is not in `detail` (a group's, withheld for
    /// a sensitive resource it read).
    pub withheld: Option<crate::report::Withheld>,
}

impl Step {
    pub(crate) fn new(action: Action, diff: Diff, outcome: Outcome) -> Self {
        Self {
            action,
            diff,
            outcome,
            detail: None,
            withheld: None,
        }
    }

    pub(crate) fn failed(phase: Phase, action: Action, diff: Diff, err: &ProviderError) -> Self {
        let detail = match err {
            ProviderError::Rejected(rejection) => rejection.detail.clone(),
            _ => None,
        };
        Self {
            action,
            diff,
            outcome: Outcome::Failed {
                phase,
                reason: err.to_string(),
            },
            detail,
            withheld: None,
        }
    }
}

/// Runs one pass over the part of `catalogue` that `options` selects (all
/// of it by default) and returns what happened to every resource. When
/// `options.expect` holds a saved plan's fingerprints, it goes on only if
/// every selected resource is observed as the plan saw it: otherwise nothing is
/// changed and the differences come back as [`Refused::Stale`]. Resources
/// that manage one object under two names are refused before anything is
/// changed, in a plan too ([`Refused::Shared`]).
pub fn run_pass_with(
    catalogue: &Catalogue,
    ctx: &mut PassContext<'_>,
    reporter: &mut dyn Reporter,
    options: &PassOptions,
) -> Result<PassSummary, Refused> {
    if ctx.sensitive.is_some() {
        return pass_in(catalogue, ctx, reporter, options);
    }
    // One for the whole pass (its resources' output, its groups'
    // refusals), nothing read until one of them asks.
    let own = SensitiveOnce::new(catalogue, ctx.registry);
    let mut inner = PassContext {
        registry: ctx.registry,
        host: ctx.host,
        mode: ctx.mode,
        store: ctx.store.as_deref_mut(),
        backups: ctx.backups.as_deref_mut(),
        now: ctx.now,
        skip: std::mem::take(&mut ctx.skip),
        sensitive: Some(&own),
    };
    let done = pass_in(catalogue, &mut inner, reporter, options);
    ctx.skip = inner.skip;
    done
}

/// [`run_pass_with`] once `ctx.sensitive` is given.
fn pass_in(
    catalogue: &Catalogue,
    ctx: &mut PassContext<'_>,
    reporter: &mut dyn Reporter,
    options: &PassOptions,
) -> Result<PassSummary, Refused> {
    let started = Instant::now();
    let selected: Vec<&Resource> = catalogue
        .resources
        .iter()
        .filter(|r| options.selects(&r.id))
        .collect();
    reporter.event(Event::PassStarted {
        resources: selected.len(),
    });
    // The whole catalogue: a selected file notifies its service even when
    // the service is not selected (the reload is then owed, durably).
    let mut notifications = Notifications::from_catalogue(catalogue, ctx.registry);
    // Observations a reconcile accepted: not reverted while they hold.
    let accepted: HashMap<String, Accepted> = ctx
        .store
        .as_deref()
        .and_then(|s| s.all_accepted().ok())
        .unwrap_or_default();
    // A fingerprint is the hash of a whole observation: only a plan being
    // saved, or a saved one being applied, needs them. Without, a converged
    // resource's observation keeps only what its verified record needs
    // (see `observe::Held::Converged`), unless a reconcile accepted it.
    let fingerprints = options.fingerprints || options.expect.is_some();
    let slim = |id: &ResourceId| !fingerprints && !accepted.contains_key(&id.to_string());
    // An apply compares every resource with its verified record: all of
    // them in one query, instead of one per resource, read while the other
    // observers start (the store stays on this thread). A plan reads one
    // only for what it will report as a change (see `VerifiedRecords`).
    // Asked to trust metadata, a plan too reads them all, while every
    // path that could be trusted is looked at, and before the observers
    // start: the records and the paths' metadata decide what is read.
    let store = ctx.store.as_deref();
    // Every resource of the host's whole catalogue is visited (not a part
    // of it, as a revert's): the store's records of any other are of
    // resources the repository no longer declares.
    let whole = options.whole_catalogue && selected.len() == catalogue.resources.len();
    let trust = options.trust_metadata && !fingerprints;
    let mut observers = observe::Observers {
        registry: ctx.registry,
        host: ctx.host,
        threads: datum_core::parallel::cores(),
        slim: &slim,
        sweep: match ctx.mode {
            Mode::Apply => observe::Sweep::Folders,
            Mode::Plan => observe::Sweep::Nothing,
        },
        trusting: None,
    };
    let (mut observations, mut verified, undeclared) = if trust {
        let (looked, (records, left)) = Observations::look_alongside(&observers, &selected, || {
            VerifiedRecords::all_noting_undeclared(store, &selected, whole)
        });
        observers.trusting = Some((&records, &looked));
        let (observations, ()) = Observations::gather_alongside(&observers, &selected, || ());
        (observations, records, left)
    } else {
        let (observations, (records, left)) =
            Observations::gather_alongside(&observers, &selected, || match ctx.mode {
                Mode::Apply => VerifiedRecords::all_noting_undeclared(store, &selected, whole),
                Mode::Plan => (VerifiedRecords::OnDemand { asked: 0 }, Vec::new()),
            });
        (observations, records, left)
    };
    let trusted_by_metadata = trust.then(|| {
        (0..selected.len())
            .filter(|&i| observations.trusted(i))
            .count() as u64
    });
    // Two resources managing one object under two names: nothing is done.
    let shared = observations.shared(&selected);
    if !shared.is_empty() {
        return Err(Refused::Shared(Shared {
            shared: shared
                .into_iter()
                .map(|(object, at)| {
                    let ids = at
                        .iter()
                        .filter_map(|&i| selected.get(i))
                        .map(|r| (r.id.clone(), r.origin.clone()));
                    (object, ids.collect())
                })
                .collect(),
        }));
    }
    // Before anything is written (observation reads no staging directory).
    if ctx.mode == Mode::Apply {
        sweep_stale_staging(&observations, ctx.host);
    }
    let observed: Vec<(ResourceId, Option<String>)> = if fingerprints {
        selected
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let key = options.digest_key.as_ref();
                (r.id.clone(), observations.fingerprint(i, r.sensitive, key))
            })
            .collect()
    } else {
        Vec::new()
    };
    // A saved plan: nothing changes unless the host is as it was planned.
    if let Some(expected) = &options.expect {
        select::compare(&observed, expected)?;
    }
    // From here on, nothing is recorded before what it describes is
    // durable (see the module header).
    if ctx.mode == Mode::Apply
        && let Some(store) = ctx.store.as_deref_mut()
    {
        store.set_durability(Some(ctx.host.durability().clone()));
    }
    // Resources whose last apply failed: one that converges now is cleared.
    let failed_before: BTreeSet<String> = match (ctx.mode, ctx.store.as_deref()) {
        (Mode::Apply, Some(store)) => store.failed_applies().unwrap_or_default(),
        _ => BTreeSet::new(),
    };

    // Kinds that batch (Packages: one apt transaction, one dependency
    // resolution, one download, and the validators they provide are on the
    // host before the files that need them) apply their resources together
    // up front. Each resource still runs its own phases, diffing what the
    // batch saw before it changed anything (so it reports its change); one
    // the batch could not apply fails in its own apply, naming why.
    let batched = if ctx.mode == Mode::Apply {
        apply_batches(
            &selected,
            &mut observations,
            &mut notifications,
            ctx,
            options,
        )
    } else {
        HashMap::new()
    };

    // Every group with a changed file is validated as a whole, its changed
    // files laid over their live paths in the validator's view, before any
    // file is written (after the packages that install the validators): a
    // refused group writes nothing.
    let groups = GroupChecks::before_writing(catalogue, &selected, &observations, ctx, options);
    notifications.not_overlaid = groups.not_overlaid.clone();

    // Resource -> the failed resource that stopped it (itself when it failed).
    let mut stopped: HashMap<ResourceId, ResourceId> = HashMap::new();
    let mut changed: HashSet<ResourceId> = HashSet::new();
    // In a plan: what could still change the host before each resource.
    let mut settled = (ctx.mode == Mode::Plan)
        .then(|| Settled::new(&selected, &observations, ctx.host.boundary()));
    // One report per resource: sized once (grown by doubling, the list of
    // 20,000 reports held half as much again, unused, at the pass's peak).
    let mut summary = PassSummary {
        observed,
        trusted_by_metadata,
        resources: Vec::with_capacity(selected.len() + groups.reports.len()),
        ..PassSummary::default()
    };
    // The sensitive resources' paths a resource's output must not name
    // (validator output quoting an included file), made at the first
    // output: many resources may have one (accepted, held, quarantined).
    // The caller's (`run_pass_with` gives one when it has none).
    let fallback = SensitiveOnce::new(catalogue, ctx.registry);
    let sensitive_paths = ctx.sensitive.unwrap_or(&fallback);
    let emit = |summary: &mut PassSummary, report: ResourceReport, reporter: &mut dyn Reporter| {
        reporter.event(Event::ResourceFinished { report: &report });
        summary.resources.push(report);
    };
    for report in &groups.reports {
        emit(&mut summary, report.clone(), reporter);
    }
    // Copies staged ahead of the loop by worker threads (see `ahead`).
    let ahead = Ahead::new(
        &AheadInputs {
            selected: &selected,
            observations: &observations,
            options,
            groups: &groups,
            accepted: &accepted,
            batched: &batched,
            registry: ctx.registry,
        },
        &ctx.skip,
        ctx.host,
        ctx.mode == Mode::Apply,
    );
    std::thread::scope(|scope| {
        for _ in 0..ahead.threads() {
            scope.spawn(|| ahead.work());
        }
        // The workers stop when the loop ends, however it ends.
        let _stop = ahead.stop_on_drop();
        for (index, &resource) in selected.iter().enumerate() {
            reporter.event(Event::ResourceStarted { id: &resource.id });
            let t0 = Instant::now();
            let staged_ahead = ahead.take(index);
            // What this resource requires is durable before it acts.
            if ctx.mode == Mode::Apply && resource.requires.iter().any(|dep| changed.contains(dep))
            {
                for failed in make_durable(ctx, &selected, &mut summary.resources) {
                    stopped.insert(failed.clone(), failed);
                }
            }
            let blocker = resource
                .requires
                .iter()
                .find_map(|dep| stopped.get(dep).cloned());
            let quarantined = ctx.skip.contains(&resource.id);
            if quarantined {
                summary.quarantined.insert(resource.id.clone());
            }
            // Left as a reconcile accepted it (`accepted_as_is`).
            let mut kept_as_accepted = false;
            let mut step = match blocker {
                _ if quarantined => Step {
                    detail: Some(
                        "quarantined: excluded from apply until `datum release`".to_owned(),
                    ),
                    ..Step::new(
                        Action::None,
                        Diff::default(),
                        Outcome::Blocked {
                            by: resource.id.clone(),
                        },
                    )
                },
                Some(by) => Step::new(Action::None, Diff::default(), Outcome::Blocked { by }),
                None => {
                    // Observed up front, unless something it requires changed
                    // the host since then.
                    let fresh = resource.requires.iter().any(|dep| changed.contains(dep));
                    let cached = observations.take(index).filter(|_| !fresh);
                    // What a batch changed is diffed as the batch saw it before.
                    let cached = match batched.get(&resource.id) {
                        Some(before) => Some(Ok(before.clone())),
                        None => cached,
                    };
                    // Observed converged, its declaration dropped: declared
                    // again only if it is needed after all.
                    let converged = observations.converged(index);
                    let redeclared = match converged {
                        Some(_)
                            if fresh
                                || groups.refuses(&resource.id)
                                || options.hold.contains(&resource.id) =>
                        {
                            observations.redeclare(index, resource)
                        }
                        _ => None,
                    };
                    let bound = redeclared.as_ref().or_else(|| observations.bound(index));
                    // A slimmed observation serves only the converged step.
                    let cached = match &redeclared {
                        Some(_) if observations.slimmed(index) => None,
                        _ => cached,
                    };
                    if groups.refuses(&resource.id) {
                        groups.refused_step(resource, bound, cached, ctx)
                    } else if options.hold.contains(&resource.id) {
                        held(
                            resource,
                            bound,
                            cached,
                            &options.hold_reason,
                            &mut notifications,
                            ctx,
                        )
                    } else if let Some(step) = accepted_as_is(
                        resource,
                        cached.as_ref(),
                        accepted.get(&resource.id.to_string()),
                        ctx.store.as_deref(),
                    ) {
                        kept_as_accepted = true;
                        step
                    } else {
                        match (converged.filter(|_| redeclared.is_none()), cached) {
                            // Its record vouched for it (`--trust-metadata`):
                            // the record stands as it is.
                            (Some(action), Some(Ok(_))) if observations.trusted(index) => {
                                verified.forget(index);
                                trusted_step(action)
                            }
                            (Some(action), Some(Ok(observed))) => {
                                let recorded = verified.converged_is_recorded(
                                    index,
                                    resource,
                                    observed.meta.as_ref(),
                                    ctx.store.as_deref().and_then(Store::digest_key),
                                );
                                converged_step(resource, action, observed, recorded, ctx)
                            }
                            (_, cached) => run_resource_staged(
                                resource,
                                bound,
                                cached,
                                verified
                                    .take(index, &resource.id, ctx.store.as_deref(), &selected)
                                    .as_ref(),
                                &mut notifications,
                                ctx,
                                staged_ahead,
                                settled.as_ref().map(|s| (s, &changed)),
                            ),
                        }
                    }
                }
            };
            if matches!(
                step.outcome,
                Outcome::Changed { .. } | Outcome::WouldChange { .. }
            ) {
                changed.insert(resource.id.clone());
                // Recorded before the change already; a store that refuses now
                // still fails the resource, so nobody relies on the record.
                if let Err(reason) = notifications.resource_changed(resource, ctx) {
                    step.outcome = Outcome::Failed {
                        phase: Phase::Apply,
                        reason,
                    };
                }
            }
            // A service that others notify: validate their groups, then reload.
            if !matches!(
                step.outcome,
                Outcome::Failed { .. } | Outcome::Blocked { .. }
            ) {
                let bound = observations.bound(index);
                let extra =
                    notifications.activate(resource, bound, &mut step, &changed, catalogue, ctx);
                for group_report in extra {
                    emit(&mut summary, group_report, reporter);
                }
            }
            // After the activation: a reload or restart a change owes a service
            // is a change of its own, beyond any declared path (a daemon may
            // make or empty folders as it starts).
            if let Some(settled) = settled.as_mut() {
                settled.record(observations.bound(index), step.action, &step.outcome);
            }
            match &step.outcome {
                Outcome::Failed { .. } => {
                    stopped.insert(resource.id.clone(), resource.id.clone());
                }
                Outcome::Blocked { by } => {
                    stopped.insert(resource.id.clone(), by.clone());
                }
                _ => {}
            }
            if ctx.mode == Mode::Apply {
                remember_failure(resource, &step.outcome, &failed_before, ctx);
                // As declared now (changed, or found so): an acceptance of
                // another state is over, so the same change made again
                // later is drift, not accepted unseen. Only resources that
                // have one: no write for the others.
                if !kept_as_accepted
                    && matches!(step.outcome, Outcome::Changed { .. } | Outcome::Unchanged)
                    && accepted.contains_key(&resource.id.to_string())
                    && let Some(store) = ctx.store.as_deref_mut()
                {
                    let _ = store.clear_accepted(&resource.id);
                }
            }
            // A resource that says `sensitive: true` shows no field's value
            // (as `datum check` masks it); one sensitive only through a
            // field its kind hides (a User's `password_hash`) has that
            // field masked by its provider, and shows the others.
            let mut diff = step.diff;
            if resource.sensitive && !resource.sensitive_by_field_only {
                diff.mask_field_values();
            }
            // Validator output may echo a secret: never for a sensitive
            // resource, nor one that names a sensitive resource's file (an
            // `Include` the validator read and quotes) or quotes a word of
            // its content. The report says it was withheld, and for which.
            let mut withheld = step.withheld;
            let detail = match step.detail {
                Some(d) if resource.sensitive => {
                    if matches!(step.outcome, Outcome::Failed { .. }) && !d.trim().is_empty() {
                        withheld.get_or_insert_with(|| {
                            crate::report::Withheld::new(
                                crate::report::WithheldReason::SensitiveResource,
                                vec![resource.id.to_string()],
                            )
                        });
                    }
                    None
                }
                Some(d) => match sensitive_paths.paths().withheld(
                    resource
                        .validate
                        .as_deref()
                        .and_then(datum_providers::validators::lookup),
                    &d,
                ) {
                    // A note that is no validator's (quarantined,
                    // accepted) is left out without a word, as before.
                    Some(why) => {
                        if matches!(step.outcome, Outcome::Failed { .. }) {
                            withheld.get_or_insert(why);
                        }
                        None
                    }
                    None => Some(d),
                },
                None => None,
            };
            // The path its kind claims, asked of the provider the pass holds
            // (looked up again only for a declaration that did not parse).
            let provider = observations
                .provider(index)
                .or_else(|| ctx.registry.lookup(&resource.id.kind));
            let report = ResourceReport {
                id: resource.id.clone(),
                origin: resource.origin.clone(),
                target: provider
                    .and_then(|p| Registry::path_claimed(p, resource))
                    .map(str::to_owned),
                action: step.action,
                diff,
                outcome: step.outcome,
                sensitive: resource.sensitive,
                detail,
                withheld,
                duration_ms: t0.elapsed().as_millis() as u64,
            };
            emit(&mut summary, report, reporter);
        }
    });
    // A partial pass: the services outside it that its changes notify are
    // activated now, as the whole pass would at their turn.
    if options.only.is_some() {
        let t0 = Instant::now();
        let selects = |id: &ResourceId| options.selects(id);
        let outside = notifications.activate_outside(catalogue, &selects, &stopped, &changed, ctx);
        for (resource, step, group_reports) in outside {
            for report in group_reports {
                emit(&mut summary, report, reporter);
            }
            if ctx.mode == Mode::Apply {
                remember_failure(resource, &step.outcome, &failed_before, ctx);
            }
            let ms = t0.elapsed().as_millis() as u64;
            emit(
                &mut summary,
                outside_report(ctx.registry, resource, step, ms),
                reporter,
            );
        }
    }
    // Groups whose files changed but that no service activation validated.
    for report in notifications.validate_remaining_groups(catalogue, &changed, ctx) {
        emit(&mut summary, report, reporter);
    }
    if ctx.mode == Mode::Apply {
        make_durable(ctx, &selected, &mut summary.resources);
        if let Some(store) = ctx.store.as_deref_mut() {
            store.set_durability(None);
            // Only an apply reads them all, so only an apply forgets them.
            for id in &undeclared {
                let _ = store.forget(id);
            }
        }
    }
    summary.warnings = ctx.host.take_notices();
    summary.duration_ms = started.elapsed().as_millis() as u64;
    Ok(summary)
}

/// Makes every rename of the pass so far durable (the directory fsyncs it
/// owes, see the module header). A directory whose fsync failed fails the
/// resources reported changed there: their change may not survive a power
/// cut, so they are recorded as failed, not verified, and the next pass
/// writes them again. Returns the resources it failed.
fn make_durable(
    ctx: &mut PassContext<'_>,
    selected: &[&Resource],
    reports: &mut [ResourceReport],
) -> Vec<ResourceId> {
    if ctx.host.durability().flush().is_ok() {
        return Vec::new();
    }
    let failures = ctx.host.durability().take_failures();
    let mut failed = Vec::new();
    for report in reports.iter_mut() {
        if !matches!(report.outcome, Outcome::Changed { .. }) {
            continue;
        }
        let Some(target) = report.target.as_deref().map(std::path::Path::new) else {
            continue;
        };
        // The target's own folder, or a folder inside it (a Tree).
        let Some(failure) = failures.iter().find(|f| {
            target.parent() == Some(f.declared.as_path()) || f.declared.starts_with(target)
        }) else {
            continue;
        };
        let reason = format!(
            "changed, but the change may not survive a power cut: {}",
            failure.error()
        );
        report.outcome = Outcome::Failed {
            phase: Phase::Verify,
            reason: reason.clone(),
        };
        failed.push(report.id.clone());
        if let Some(store) = ctx.store.as_deref_mut() {
            // Not verified after all (a buffered record is dropped).
            let _ = store.forget(&report.id);
            // A sensitive resource's only keyed (see `record_verified_of`).
            let declaration_hash = selected
                .iter()
                .find(|r| r.id == report.id)
                .map_or(Some(String::new()), |r| {
                    store.recorded_hash(r.sensitive, &r.declaration_hash)
                });
            let Some(declaration_hash) = declaration_hash else {
                continue;
            };
            let _ = store.record_apply_failure(
                &report.id,
                &ApplyFailure {
                    declaration_hash,
                    phase: Phase::Verify.to_string(),
                    reason,
                    failed_at: ctx.now,
                },
            );
        }
    }
    failed
}

/// A resource whose observation a reconcile accepted (policy `accept`), with
/// the same declaration and the same observation still: left as it is, not
/// reverted nor called corrective, until the declaration follows (or the
/// host moves again). `None`: run it as usual. A sensitive resource's
/// acceptance holds keyed digests (`Store::records` compares).
fn accepted_as_is(
    resource: &Resource,
    cached: Option<&Result<Observed, ProviderError>>,
    accepted: Option<&Accepted>,
    store: Option<&Store>,
) -> Option<Step> {
    let records = |recorded: &str, plain: &str| {
        store.map_or(recorded == plain, |s| s.records(recorded, plain))
    };
    let accepted = accepted.filter(|a| records(&a.declaration_hash, &resource.declaration_hash))?;
    let observed = cached?.as_ref().ok()?;
    if !records(&accepted.observation_hash, &observed.acceptance_hash()) {
        return None;
    }
    let patch = accepted
        .patch
        .as_deref()
        .map_or_else(String::new, |p| format!(" (patch: {p})"));
    Some(Step {
        detail: Some(format!("accepted, not yet in the repository{patch}")),
        ..Step::new(Action::None, Diff::default(), Outcome::Unchanged)
    })
}

/// A held resource (see [`PassOptions::hold`]): planned, never applied; one
/// that would change is blocked by itself, and so blocks its dependents.
fn held(
    resource: &Resource,
    bound: Option<&Bound<'_>>,
    cached: Option<Result<Observed, ProviderError>>,
    reason: &str,
    notifications: &mut Notifications,
    ctx: &mut PassContext<'_>,
) -> Step {
    let mode = ctx.mode;
    ctx.mode = Mode::Plan;
    let mut step = run_resource(resource, bound, cached, None, notifications, ctx);
    ctx.mode = mode;
    if matches!(step.outcome, Outcome::WouldChange { .. }) {
        step.outcome = Outcome::Blocked {
            by: resource.id.clone(),
        };
        step.detail = Some(format!("{reason}: not applied"));
    }
    step
}

pub(crate) fn run_resource(
    resource: &Resource,
    bound: Option<&Bound<'_>>,
    cached: Option<Result<Observed, ProviderError>>,
    known: Option<&VerifiedRecord>,
    notifications: &mut Notifications,
    ctx: &mut PassContext<'_>,
) -> Step {
    run_resource_staged(
        resource,
        bound,
        cached,
        known,
        notifications,
        ctx,
        None,
        None,
    )
}

/// A resource observed converged whose declaration the pass dropped (see
/// `observe::Held::Converged`): what [`run_resource`] does for a
/// converged resource, from the observation alone.
fn converged_step(
    resource: &Resource,
    action: Option<Action>,
    observed: Observed,
    recorded: bool,
    ctx: &mut PassContext<'_>,
) -> Step {
    let diff = Diff {
        action,
        ..Diff::default()
    };
    unchanged(resource, diff, &observed, recorded, ctx)
}

/// A resource taken as converged by its metadata, unread: its verified
/// record vouched for exactly what is on the host, so nothing is recorded.
fn trusted_step(action: Option<Action>) -> Step {
    let diff = Diff {
        action,
        ..Diff::default()
    };
    Step::new(diff.action(), diff, Outcome::Unchanged)
}

/// A resource that matches its declaration: recorded as verified in an
/// apply unless the store already holds this very verification (`recorded`:
/// see [`same_verification`]).
fn unchanged(
    resource: &Resource,
    diff: Diff,
    observed: &Observed,
    recorded: bool,
    ctx: &mut PassContext<'_>,
) -> Step {
    if ctx.mode == Mode::Apply && !recorded {
        record_verified(resource, observed, ctx);
    }
    Step::new(diff.action(), diff, Outcome::Unchanged)
}

/// [`run_resource`], with the copy `ahead` staged from the same
/// observation, if it did (used instead of staging again; dropped, which
/// removes it, when the resource stops before its rename). `settled`: in
/// the plan's loop, what could change the host before this resource and
/// what would change so far, for a refusal that holds only if nothing does
/// (see [`Settled`]).
#[allow(
    clippy::too_many_arguments,
    reason = "the one loop's call site; each argument is one piece of the pass's state for this resource"
)]
fn run_resource_staged(
    resource: &Resource,
    bound: Option<&Bound<'_>>,
    cached: Option<Result<Observed, ProviderError>>,
    known: Option<&VerifiedRecord>,
    notifications: &mut Notifications,
    ctx: &mut PassContext<'_>,
    staged_ahead: Option<Staging>,
    settled: Option<(&Settled, &HashSet<ResourceId>)>,
) -> Step {
    let Some(bound) = bound else {
        // A declaration that did not parse failed its observation; the
        // catalogue refuses unknown types, so the rest guards a programming
        // error.
        let reason = match cached {
            Some(Err(e)) => return Step::failed(Phase::Observe, Action::None, Diff::default(), &e),
            _ => format!("no provider for type `{}`", resource.id.kind),
        };
        return Step::new(
            Action::None,
            Diff::default(),
            Outcome::Failed {
                phase: Phase::Plan,
                reason,
            },
        );
    };
    let (provider, declared) = (bound.provider, &bound.declared);
    let observed = match cached.unwrap_or_else(|| provider.observe_declared(ctx.host, declared)) {
        Ok(o) => o,
        Err(e) => return Step::failed(Phase::Observe, Action::None, Diff::default(), &e),
    };
    let mut diff = provider.plan(declared, &observed);
    fill_content(bound, &observed, &mut diff, ctx.host);
    let action = diff.action();
    if !action.is_change() {
        let recorded = known.is_some_and(|k| {
            same_verification(k, &resource.declaration_hash, observed.meta.as_ref())
        });
        return unchanged(resource, diff, &observed, recorded, ctx);
    }
    let intent = intent_of(resource, known);
    if ctx.mode == Mode::Plan {
        // What the apply is certain to refuse (a folder where a file is
        // declared) is a change that would fail, not a pending one; so is
        // what it refuses around the resource (a missing parent, a folder
        // to remove that is not empty, an owner no account file knows, a
        // hard-linked file it may not rewrite) once nothing before it would
        // change that.
        let refused = provider.refuses(declared, &observed).or_else(|| {
            let (settled, changed) = settled?;
            let refusal = provider.refuses_unless_changed_first(declared, &observed)?;
            let paths = provider
                .paths()
                .map(|p| p.managed_paths(declared))
                .unwrap_or_default();
            settled
                .holds_for(resource, &paths, refusal.reach, changed)
                .then_some(refusal.why)
        });
        if let Some(why) = refused {
            return Step::new(
                action,
                diff,
                Outcome::Failed {
                    phase: Phase::Plan,
                    reason: format!("would fail: {why}"),
                },
            );
        }
        // Validators run in the dry run too, on changed content only.
        if diff.content.is_some()
            && let Err(rejection) = gate::dry_run(bound, ctx.host)
        {
            return Step {
                action,
                diff,
                outcome: Outcome::Failed {
                    phase: Phase::Plan,
                    reason: format!("would fail: {}", rejection.summary),
                },
                detail: rejection.detail,
                withheld: None,
            };
        }
        // A plan records nothing: this cannot fail.
        if let Err(e) = notifications.resource_changed(resource, ctx) {
            return failed_step(action, diff, e);
        }
        return Step::new(action, diff, Outcome::WouldChange { intent });
    }
    // Evidence first (see `evidence`): what the change destroys is saved
    // before it happens, or, for a content update a validator checks, once
    // the validator accepted the staged copy. A save that fails stops it.
    let files = evidence::to_save(bound, &observed, &diff);
    let after_validation =
        resource.validate.is_some() && action == Action::Update && diff.content.is_some();
    let host = ctx.host;
    if !after_validation
        && !files.is_empty()
        && let Some(backups) = ctx.backups.as_deref_mut()
        && let Err(e) = evidence::save(host, backups, resource, &files, ctx.now)
    {
        return failed_step(action, diff, e.to_string());
    }
    // The services this resource notifies owe an activation from the moment
    // the change is about to happen: recorded durably before the write, so a
    // pass killed after the write still leaves the reload owed. A record
    // that cannot be written stops the change (the reload would be lost).
    // If nothing goes live after all, the debts this change alone made are
    // withdrawn (see `Notifications::withdraw`).
    let fresh = notifications.owing_nothing(resource, ctx);
    if let Err(e) = notifications.resource_changed(resource, ctx) {
        return failed_step(action, diff, e);
    }
    // Stage; the validator judges the staged copy; evidence; activate. A
    // refusal (or evidence that cannot be kept) discards the staged copy,
    // and the live object was never touched.
    let staged = match staged_ahead {
        Some(staging) => Ok(staging),
        None => provider.stage(host, declared, &observed, &diff),
    };
    let staging = match staged {
        Ok(staging) => staging,
        Err(e) => {
            notifications.withdraw(&fresh, ctx);
            return Step::failed(Phase::Apply, action, diff, &e);
        }
    };
    // Each staged part (one for most kinds; entry by entry for a Tree) is
    // judged by the validator, the evidence is kept once the first part is
    // accepted, and only then does `activate` make it live (and stage the
    // next part, if any). A refusal discards the staged part.
    let mut files_after = if after_validation { files } else { Vec::new() };
    let mut staging = staging;
    // Whether a part may have gone live (a Tree's first `activate` makes
    // folders before it stages a file).
    let mut activated = false;
    // What each part may write, told to every kind that watches writes
    // (`Registry::after_writing`), whatever the resource's kind: an account
    // file or a folder above one is read again (a later File owned by an
    // account the new passwd defines); a unit file or drop-in is loaded
    // before the next unit acts.
    let written = provider
        .paths()
        .map(|p| p.managed_paths(declared))
        .unwrap_or_default();
    loop {
        if let Some(target) = provider.validation_target(&staging)
            && let Err(e) = judge_part(resource, &target, &mut files_after, ctx)
        {
            provider.discard(staging);
            if !activated {
                notifications.withdraw(&fresh, ctx);
            }
            return Step::failed(Phase::Apply, action, diff, &e);
        }
        activated = true;
        let part = provider.activate(host, declared, staging);
        ctx.registry.after_writing(host, &written);
        match part {
            Ok(Activated::Done) => break,
            Ok(Activated::Next(next)) => staging = next,
            Err(e) => return Step::failed(Phase::Apply, action, diff, &e),
        }
    }
    match provider.verify_declared(ctx.host, declared) {
        Err(e) => Step::failed(Phase::Verify, action, diff, &e),
        Ok((_, remaining)) if !remaining.is_empty() => {
            let fields = remaining.changed_fields().join(", ");
            Step::new(
                action,
                diff,
                Outcome::Failed {
                    phase: Phase::Verify,
                    reason: format!("still differs after apply: {fields}"),
                },
            )
        }
        Ok((after, _)) => {
            record_verified(resource, &after, ctx);
            Step::new(action, diff, Outcome::Changed { intent })
        }
    }
}

/// The validator's verdict on one staged part, then, once it is accepted,
/// the evidence still owed (`files`, taken the first time).
fn judge_part(
    resource: &Resource,
    target: &datum_providers::Staged<'_>,
    files: &mut Vec<evidence::ToSave>,
    ctx: &mut PassContext<'_>,
) -> Result<(), ProviderError> {
    gate::check_staged(resource, ctx.host, target)?;
    let files = std::mem::take(files);
    match ctx.backups.as_deref_mut() {
        Some(backups) if !files.is_empty() => {
            evidence::save(ctx.host, backups, resource, &files, ctx.now).map_err(|e| {
                ProviderError::from(datum_providers::GateRejection {
                    summary: e.to_string(),
                    detail: None,
                })
            })
        }
        _ => Ok(()),
    }
}

/// Largest content read back for a text diff (either side).
pub const DIFF_CONTENT_LIMIT: u64 = 8 * 1024 * 1024;

/// Observation keeps checksums, not bytes: for the few resources whose
/// content differs, read both sides (bounded) so a person gets a text diff.
/// Never for a sensitive resource: its content is never shown. `datum check`
/// has it done through [`crate::inspect_all`], for the findings it reports.
pub(crate) fn fill_content(bound: &Bound<'_>, observed: &Observed, diff: &mut Diff, host: &Host) {
    let (provider, resource) = (bound.provider, bound.resource());
    let Some(change) = diff.content.as_mut() else {
        return;
    };
    if resource.sensitive {
        return;
    }
    // A live file not everyone may read (`/etc/shadow`, a private key, a
    // file in a 0700 home) is never shown: its lines in a plan's diff would
    // let whoever writes the repository read it in the CI log. Its bytes
    // are not kept, whatever read them; checksums only. A question the
    // host cannot answer is a no.
    if observed.presence == Presence::Present
        && let Some(paths) = provider.paths()
        && let Some(declared) = paths.managed_paths(&bound.declared).first()
        && !host.readable_by_everyone(declared).unwrap_or(false)
    {
        change.before = None;
        change.live_withheld = true;
        return;
    }
    let small = |size: u64| size <= DIFF_CONTENT_LIMIT;
    // Both sides or neither: a diff against one side left empty would show
    // every line as removed (or added), which is not what changed.
    let live_small = observed.presence != Presence::Present
        || observed.meta.as_ref().is_some_and(|m| small(m.size));
    let declared_small = resource.content.as_ref().is_none_or(|c| small(c.size));
    if !(live_small && declared_small) {
        change.before = None;
        if resource
            .content
            .as_ref()
            .is_some_and(|c| c.source.is_some())
        {
            change.after.clear();
        }
        return;
    }
    if change.before.is_none()
        && observed.presence == Presence::Present
        && observed.meta.as_ref().is_some_and(|m| small(m.size))
        && let Some(paths) = provider.paths()
        && let Some(declared) = paths.managed_paths(&bound.declared).first()
    {
        // Through the boundary: never content reached through a link; and
        // never more than the limit read, though the file grew since it
        // was observed (someone else's, made huge meanwhile). Whether
        // everyone may read it is asked again of the very file read: the
        // name may hold another since the look above.
        match host.read_shown(declared, DIFF_CONTENT_LIMIT) {
            Ok(datum_host::Shown::Bytes(bytes)) => change.before = Some(bytes),
            Ok(datum_host::Shown::Withheld) => {
                change.before = None;
                change.live_withheld = true;
                return;
            }
            _ => {}
        }
    }
    if change.after.is_empty()
        && let Some(content) = &resource.content
        && content.source.is_some()
        && small(content.size)
    {
        // Refused when the repository file no longer holds what the
        // catalogue recorded: said as such, never diffed against nothing.
        match datum_host::repo::content_bytes(content) {
            Ok(bytes) => change.after = bytes.into_owned(),
            Err(_) => change.declared_unread = true,
        }
    }
}

/// A resource the pass did not change, because what must happen before the
/// change (saving the evidence, recording an owed reload) failed.
fn failed_step(action: Action, diff: Diff, reason: String) -> Step {
    Step::new(
        action,
        diff,
        Outcome::Failed {
            phase: Phase::Apply,
            reason,
        },
    )
}

/// Intentional when the declaration differs from the one last verified.
fn intent_of(resource: &Resource, known: Option<&VerifiedRecord>) -> Intent {
    match known {
        Some(rec) if rec.declaration_hash == resource.declaration_hash => Intent::Corrective,
        _ => Intent::Intentional,
    }
}

fn record_verified(resource: &Resource, observed: &Observed, ctx: &mut PassContext<'_>) {
    let now = ctx.now;
    if let Some(store) = ctx.store.as_deref_mut() {
        // A store write failing must not fail the resource: the host is
        // converged; the next pass simply labels its changes less precisely.
        let _ = store.record_verified_of(
            &resource.id,
            resource.sensitive,
            &resource.declaration_hash,
            observed.meta.as_ref(),
            now,
        );
    }
}

/// Records a failed apply for `datum check` (which reports the resource as
/// not converged, with this failure, rather than as drift), and forgets it
/// once an apply converges the resource. A store write failing does not
/// fail the resource (like a verified record): the check then reports what
/// it observes without the failure.
fn remember_failure(
    resource: &Resource,
    outcome: &Outcome,
    failed_before: &BTreeSet<String>,
    ctx: &mut PassContext<'_>,
) {
    let now = ctx.now;
    let Some(store) = ctx.store.as_deref_mut() else {
        return;
    };
    match outcome {
        Outcome::Failed { phase, reason } => {
            // A sensitive resource's only keyed (see `record_verified_of`).
            let Some(declaration_hash) =
                store.recorded_hash(resource.sensitive, &resource.declaration_hash)
            else {
                return;
            };
            let _ = store.record_apply_failure(
                &resource.id,
                &ApplyFailure {
                    declaration_hash,
                    phase: phase.to_string(),
                    reason: reason.clone(),
                    failed_at: now,
                },
            );
        }
        Outcome::Changed { .. } | Outcome::Unchanged
            if !failed_before.is_empty() && failed_before.contains(&resource.id.to_string()) =>
        {
            let _ = store.clear_apply_failure(&resource.id);
        }
        _ => {}
    }
}

/// Runs every batching kind's batch over the resources of that kind the
/// pass may change (selected, neither quarantined nor held), in registry
/// order; returns what each changed resource was before.
fn apply_batches(
    selected: &[&Resource],
    observations: &mut Observations<'_>,
    notifications: &mut Notifications,
    ctx: &mut PassContext<'_>,
    options: &PassOptions,
) -> HashMap<ResourceId, Observed> {
    let mut before = HashMap::new();
    let registry = ctx.registry;
    for provider in registry.iter() {
        let Some(batches) = provider.batching() else {
            continue;
        };
        let is_member: Vec<bool> = selected
            .iter()
            .map(|r| {
                r.id.kind == provider.kind()
                    && !ctx.skip.contains(&r.id)
                    && !options.hold.contains(&r.id)
            })
            .collect();
        let member = |index: usize| is_member.get(index).copied().unwrap_or(false);
        // The services a member notifies owe their activation before the
        // batch changes it, as before a File's write: the member's own step
        // comes later in the loop, and a pass killed in between, or a
        // member blocked there (what it requires failed its verify) after
        // the batch installed it, would otherwise leave the restart owed
        // nowhere, and the next pass finds the member converged. Every
        // member whose plan is a change may be changed by the batch; the
        // debts of one it did not change are withdrawn after it (its own
        // apply records them again), but only when it is observed as it
        // was: a transaction that failed part-way may have changed it
        // (a debt left behind costs a reload, never a lost one). One whose
        // debt cannot be recorded stays out of the batch and fails in its
        // own apply.
        let mut owing: Vec<(usize, Observed, Vec<ResourceId>)> = Vec::new();
        let mut unrecorded: HashSet<usize> = HashSet::new();
        for (index, resource) in selected.iter().enumerate() {
            if !member(index) {
                continue;
            }
            let changes = observations.bound(index).and_then(|b| {
                observations.peek(index, |o| !b.provider.plan(&b.declared, o).is_empty())
            });
            if changes != Some(true) {
                continue;
            }
            let fresh = notifications.owing_nothing(resource, ctx);
            match notifications.resource_changed(resource, ctx) {
                Ok(()) if fresh.is_empty() => {}
                Ok(()) => {
                    if let Some(observed) = observations.peek(index, Observed::clone) {
                        owing.push((index, observed, fresh));
                    }
                }
                Err(_) => {
                    notifications.withdraw(&fresh, ctx);
                    unrecorded.insert(index);
                }
            }
        }
        // The declarations the pass holds (one that did not parse fails
        // in its own apply).
        let mut members =
            observations.declared_mut(|index| member(index) && !unrecorded.contains(&index));
        if members.is_empty() {
            continue;
        }
        let changed = batches.apply_batch(ctx.host, &mut members).before;
        drop(members);
        for (index, before, fresh) in &owing {
            let Some(resource) = selected.get(*index) else {
                continue;
            };
            if changed.iter().any(|(c, _)| *c == resource.id) {
                continue;
            }
            let unchanged = observations.bound(*index).is_some_and(|b| {
                b.provider
                    .observe_declared(ctx.host, &b.declared)
                    .is_ok_and(|now| now == *before)
            });
            if unchanged {
                notifications.withdraw(fresh, ctx);
            }
        }
        before.extend(changed);
    }
    before
}

/// A pass killed between staging and rename leaves a hidden staging directory
/// beside its target; remove those before anything is written.
/// The folders are listed on every core, each taken by the next free
/// thread however few there are (a thousand folders took 10 ms of a 0.25 s
/// no-op apply on one; the standard estate's 200 folders of 100 files, 8 ms
/// of a 0.19 s one, which a stretch per core left on one thread below 256
/// items).
fn sweep_stale_staging(observations: &Observations<'_>, host: &Host) {
    let folders: Vec<&std::path::PathBuf> = observations.folders().iter().collect();
    let threads = datum_core::parallel::cores();
    datum_core::parallel::each_taken(
        &folders,
        threads,
        || (),
        |_, declared| {
            if let Ok(dir) = host.dir(declared) {
                let _ = host.sweep_stale_staging(&dir);
            }
        },
    );
}

/// A field change that says an activation is pending (for plans).
pub(crate) fn activation_change(what: &str, because: &[String]) -> FieldChange {
    FieldChange {
        field: "activation".to_owned(),
        before: None,
        after: Some(serde_json::Value::String(format!(
            "{what} (after {})",
            because.join(", ")
        ))),
    }
}
