//! Activation after change: services notified by the resources they
//! `reload_on`/`restart_on`, and group validation before any reload.
//!
//! The order is the spec's: write every changed file of a group, validate the
//! application's configuration as a whole, and reload only if that passed. A
//! reload that is owed is recorded in the state store as soon as the file
//! that calls for it changes, so a pass that fails or is killed before the
//! reload leaves it owed, and the next pass validates and performs it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;

use aho_corasick::AhoCorasick;

use datum_catalog::Catalogue;
use datum_core::{Action, Diff, FieldChange, Intent, Origin, Outcome, Phase, Resource, ResourceId};
use datum_providers::validators::{self, Rejection, Scope, ValidatorDef};
use datum_providers::{OnChange, Registry};
use datum_store::OwedAction;

use crate::gate::validator_of;
use crate::observe::Bound;
use crate::pass::{Mode, PassContext, Step, activation_change};
use crate::report::{ResourceReport, Withheld, WithheldReason};

/// The kind name of a group validator's pseudo-resource
/// (`ValidationGroup[nginx]`): the engine's own, never a provider's (it was
/// `Group` before the Group kind existed; the state store's schema version
/// 15 renamed the owed revalidations older stores held under that name).
pub const GROUP_KIND: &str = "ValidationGroup";

/// A resource others notify (one whose kind has the activation capability).
#[derive(Clone)]
struct Activated {
    /// What a person calls it (the unit), for reports.
    subject: String,
    /// The resources whose change it follows.
    members: Vec<ResourceId>,
    /// Where they are in the catalogue the notifications were made from
    /// (the pass's), in catalogue order, each once: the activation finds
    /// their group validators here, not by a scan of the catalogue each.
    member_at: Vec<usize>,
}

impl Activated {
    /// The distinct group validators its members name, in catalogue order
    /// (`catalogue` the one the notifications were made from).
    fn groups(&self, catalogue: &Catalogue) -> Vec<&'static ValidatorDef> {
        distinct_groups(
            self.member_at
                .iter()
                .filter_map(|&i| catalogue.resources.get(i)),
        )
    }
}

/// Which services each resource notifies, and what is owed so far.
pub(crate) struct Notifications {
    by_notifier: HashMap<ResourceId, Vec<(ResourceId, OwedAction)>>,
    services: HashMap<ResourceId, Activated>,
    /// Owed in this pass (kept in memory too, for passes without a store).
    owed: HashMap<ResourceId, Owed>,
    /// Group validator name -> its verdict in this pass (validated once).
    groups: HashMap<&'static str, Result<(), Rejection>>,
    /// Groups that could not be validated before writing, with why (see
    /// `group`): their failure report says so.
    pub(crate) not_overlaid: HashMap<&'static str, String>,
}

/// What a service owes: the action, and why, in the order the reasons
/// came, each once. The reasons are also kept in a set, so that a reason is
/// looked up, not searched for: a service notified by N changed Files was
/// N x N comparisons of reasons.
struct Owed {
    action: OwedAction,
    reasons: Vec<String>,
    seen: HashSet<String>,
}

impl Owed {
    fn new(action: OwedAction) -> Self {
        Owed {
            action,
            reasons: Vec::new(),
            seen: HashSet::new(),
        }
    }

    /// A restart settles a reload too, so the debt becomes one if `action`
    /// is; each reason not yet given is added after the others. Returns
    /// the reasons it added.
    fn merge(&mut self, action: OwedAction, reasons: &[String]) -> Vec<&String> {
        if action == OwedAction::Restart {
            self.action = OwedAction::Restart;
        }
        let before = self.reasons.len();
        for r in reasons {
            if self.seen.insert(r.clone()) {
                self.reasons.push(r.clone());
            }
        }
        self.reasons.iter().skip(before).collect()
    }
}

/// Why a service owes an activation when `id` changed (as the state store
/// keeps it).
fn changed_reason(id: &ResourceId) -> String {
    format!("{id} changed")
}

/// The host paths these resources' declarations claim, in the order given
/// (one per resource whose kind has one): the catalogue is read once, not
/// once per resource.
fn claimed_paths(catalogue: &Catalogue, registry: &Registry, ids: &[&ResourceId]) -> Vec<PathBuf> {
    if ids.is_empty() {
        return Vec::new();
    }
    let wanted: HashSet<&ResourceId> = ids.iter().copied().collect();
    let by_id: HashMap<&ResourceId, &Resource> = catalogue
        .resources
        .iter()
        .filter(|r| wanted.contains(&r.id))
        .map(|r| (&r.id, r))
        .rev()
        .collect();
    ids.iter()
        .filter_map(|id| {
            let resource = by_id.get(id)?;
            registry.path_of(resource).map(PathBuf::from)
        })
        .collect()
}

fn verb(action: OwedAction) -> &'static str {
    how(action).verb()
}

/// The provider's word for an owed action.
fn how(action: OwedAction) -> OnChange {
    match action {
        OwedAction::Reload => OnChange::Reload,
        OwedAction::Restart => OnChange::Restart,
    }
}

/// The state store's word for what a change asks.
fn owed(how: OnChange) -> OwedAction {
    match how {
        OnChange::Reload => OwedAction::Reload,
        OnChange::Restart => OwedAction::Restart,
    }
}

impl Notifications {
    pub(crate) fn from_catalogue(catalogue: &Catalogue, registry: &Registry) -> Self {
        let mut by_notifier: HashMap<ResourceId, Vec<(ResourceId, OwedAction)>> = HashMap::new();
        let mut services = HashMap::new();
        // By capability, then the kind's resources in catalogue order (no
        // lookup by name per resource).
        let activating = registry
            .iter()
            .filter_map(|p| Some((p.kind(), p.activation()?)));
        let mut with_activation: Vec<(usize, &dyn datum_providers::Activates, &Resource)> =
            Vec::new();
        for (kind, activates) in activating {
            for (i, resource) in catalogue.resources.iter().enumerate() {
                if resource.id.kind == kind {
                    with_activation.push((i, activates, resource));
                }
            }
        }
        with_activation.sort_by_key(|(i, _, _)| *i);
        let position: HashMap<&ResourceId, usize> = if with_activation.is_empty() {
            HashMap::new()
        } else {
            let mut position = HashMap::with_capacity(catalogue.resources.len());
            for (i, resource) in catalogue.resources.iter().enumerate() {
                position.entry(&resource.id).or_insert(i);
            }
            position
        };
        for (_, activates, resource) in with_activation {
            let notifiers = activates.notified_by(&|field| resource.desired.get(field));
            // Reloads first, as the declaration lists them.
            let mut members = Vec::new();
            for wanted in [OnChange::Reload, OnChange::Restart] {
                for (id, _) in notifiers.iter().filter(|(_, h)| *h == wanted) {
                    by_notifier
                        .entry(id.clone())
                        .or_default()
                        .push((resource.id.clone(), owed(wanted)));
                    members.push(id.clone());
                }
            }
            let mut member_at: Vec<usize> = members
                .iter()
                .filter_map(|id| position.get(id).copied())
                .collect();
            member_at.sort_unstable();
            member_at.dedup();
            services.insert(
                resource.id.clone(),
                Activated {
                    subject: activates.subject(resource),
                    members,
                    member_at,
                },
            );
        }
        Self {
            by_notifier,
            services,
            owed: HashMap::new(),
            groups: HashMap::new(),
            not_overlaid: HashMap::new(),
        }
    }

    /// Notifications that notify nothing (for a resource planned but never
    /// written).
    pub(crate) fn none() -> Self {
        Self {
            by_notifier: HashMap::new(),
            services: HashMap::new(),
            owed: HashMap::new(),
            groups: HashMap::new(),
            not_overlaid: HashMap::new(),
        }
    }

    /// A resource changed (or would): every service it notifies now owes an
    /// activation, recorded durably before anything else happens. A record
    /// the store refused is the error (the caller fails the resource: a
    /// reload nobody remembers would never happen).
    pub(crate) fn resource_changed(
        &mut self,
        resource: &Resource,
        ctx: &mut PassContext<'_>,
    ) -> Result<(), String> {
        let Some(targets) = self.by_notifier.get(&resource.id) else {
            return Ok(());
        };
        let reason = changed_reason(&resource.id);
        for (service, action) in targets {
            self.owed
                .entry(service.clone())
                .or_insert_with(|| Owed::new(*action))
                .merge(*action, std::slice::from_ref(&reason));
            if ctx.mode == Mode::Apply
                && let Some(store) = ctx.store.as_deref_mut()
            {
                store.owe(service, *action, &reason, ctx.now).map_err(|e| {
                    let what = match action {
                        OwedAction::Reload => "reload",
                        OwedAction::Restart => "restart",
                    };
                    format!("cannot record the {what} {service} owes in the state store ({e}): not changed")
                })?;
            }
        }
        Ok(())
    }

    /// The services `resource` notifies that owe nothing yet, in this pass
    /// or from an earlier one (none when the store cannot say): what a change
    /// of it alone would make them owe.
    pub(crate) fn owing_nothing(
        &self,
        resource: &Resource,
        ctx: &PassContext<'_>,
    ) -> Vec<ResourceId> {
        let Some(targets) = self.by_notifier.get(&resource.id) else {
            return Vec::new();
        };
        let not_owed: Vec<&ResourceId> = targets
            .iter()
            .map(|(service, _)| service)
            .filter(|s| !self.owed.contains_key(*s))
            .collect();
        // The store is asked only about a service this pass owes nothing
        // yet (once a service owes, its other notifiers' changes need no
        // read), and only about that service's debt, not every one.
        let Some(store) = ctx.store.as_deref() else {
            return not_owed.into_iter().cloned().collect();
        };
        let mut fresh = Vec::new();
        for service in not_owed {
            match store.owed_reload(service) {
                Ok(None) => fresh.push(service.clone()),
                Ok(Some(_)) => {}
                Err(_) => return Vec::new(),
            }
        }
        fresh
    }

    /// A change that never went live (refused by its validator, or failed
    /// before anything was renamed): the debts it alone recorded
    /// ([`Self::owing_nothing`] before it) are withdrawn, so the service is
    /// not reloaded later for a change that did not happen. Best effort: a
    /// debt left behind costs a reload, never a lost one.
    pub(crate) fn withdraw(&mut self, services: &[ResourceId], ctx: &mut PassContext<'_>) {
        for service in services {
            self.owed.remove(service);
            if ctx.mode == Mode::Apply
                && let Some(store) = ctx.store.as_deref_mut()
            {
                let _ = store.clear_reload(service);
            }
        }
    }

    /// Runs after a Service resource's own phases: if an activation is owed
    /// (by this pass or an earlier one), validates the groups of the
    /// resources that notify it and reloads or restarts only if they passed.
    /// Returns reports for groups that failed validation.
    pub(crate) fn activate(
        &mut self,
        resource: &Resource,
        bound: Option<&Bound<'_>>,
        step: &mut Step,
        changed: &HashSet<ResourceId>,
        catalogue: &Catalogue,
        ctx: &mut PassContext<'_>,
    ) -> Vec<ResourceReport> {
        let Some(activated) = self.services.get(&resource.id).cloned() else {
            return Vec::new();
        };
        let mut owed = self.owed.remove(&resource.id);
        // The reasons only an earlier pass gave (what it changed and still
        // owes this activation for).
        let mut carried_reasons: HashSet<String> = HashSet::new();
        if let Some(store) = ctx.store.as_deref()
            && let Ok(Some(earlier)) = store.owed_reload(&resource.id)
        {
            let slot = owed.get_or_insert_with(|| Owed::new(earlier.action));
            let added = slot.merge(earlier.action, &earlier.reasons);
            carried_reasons.extend(added.into_iter().cloned());
        }
        let Some(Owed {
            action, reasons, ..
        }) = owed
        else {
            return Vec::new();
        };
        if ctx.mode == Mode::Plan {
            step.diff
                .changes
                .push(activation_change(verb(action), &reasons));
            if !step.action.is_change() {
                step.action = Action::Update;
                step.outcome = Outcome::WouldChange {
                    intent: Intent::Intentional,
                };
            }
            return Vec::new();
        }

        // Validate the assembled configuration of every group among the
        // resources that notify this service.
        let mut reports = Vec::new();
        let mut failed = Vec::new();
        for def in activated.groups(catalogue) {
            if !self.groups.contains_key(def.name) {
                let verdict = validators::validate_group(def, ctx.host);
                if let Err(rejection) = &verdict {
                    reports.push(group_report(
                        def,
                        rejection,
                        catalogue,
                        ctx,
                        changed,
                        &resource.id,
                        self.not_overlaid.get(def.name),
                    ));
                }
                self.groups.insert(def.name, verdict);
            }
            if matches!(self.groups.get(def.name), Some(Err(_))) {
                failed.push(format!("{GROUP_KIND}[{}]", def.name));
            }
        }
        if !failed.is_empty() {
            step.outcome = Outcome::Failed {
                phase: Phase::Apply,
                reason: format!(
                    "not {verb}ed: {} failed validation; the new files are on disk, {} keeps serving the configuration it loaded, and the {verb} stays owed",
                    failed.join(", "),
                    activated.subject,
                    verb = verb(action)
                ),
            };
            return reports;
        }

        // The files the service is about to load are durable first (their
        // renames' directory fsyncs, see `datum_host::durability`): a
        // service never runs on a configuration a power cut could take back.
        if let Err(e) = ctx.host.durability().flush() {
            step.outcome = Outcome::Failed {
                phase: Phase::Apply,
                reason: format!(
                    "not {verb}ed: the new files are not durable ({e}); the {verb} stays owed",
                    verb = verb(action)
                ),
            };
            return reports;
        }
        // What an earlier pass changed and still owes this activation for
        // (it was killed, or the activation failed) is noted as written, as
        // this pass's own changes were when they went live: a unit file or
        // drop-in among it is loaded before the unit acts.
        let carried: Vec<&ResourceId> = if carried_reasons.is_empty() {
            Vec::new()
        } else {
            activated
                .members
                .iter()
                .filter(|id| carried_reasons.contains(&changed_reason(id)))
                .collect()
        };
        let carried = claimed_paths(catalogue, ctx.registry, &carried);
        ctx.registry.after_writing(ctx.host, &carried);
        let done = match bound.and_then(|b| Some((b.provider.activation()?, &b.declared))) {
            Some((activates, declared)) => activates.activate(ctx.host, declared, how(action)),
            None => Ok(()),
        };
        if let Err(e) = done {
            step.outcome = Outcome::Failed {
                phase: Phase::Apply,
                reason: format!("{} failed: {e}", verb(action)),
            };
            return reports;
        }
        if let Some(bound) = bound {
            match bound.provider.verify_declared(ctx.host, &bound.declared) {
                Ok((_, remaining)) if remaining.is_empty() => {}
                Ok((_, remaining)) => {
                    step.outcome = Outcome::Failed {
                        phase: Phase::Verify,
                        reason: format!(
                            "after {}: still differs: {}",
                            verb(action),
                            remaining.changed_fields().join(", ")
                        ),
                    };
                    return reports;
                }
                Err(e) => {
                    step.outcome = Outcome::Failed {
                        phase: Phase::Verify,
                        reason: format!("after {}: {e}", verb(action)),
                    };
                    return reports;
                }
            }
        }
        if let Some(store) = ctx.store.as_deref_mut() {
            let _ = store.clear_reload(&resource.id);
        }
        step.diff.changes.push(FieldChange {
            field: "activation".to_owned(),
            before: None,
            after: Some(serde_json::Value::String(format!(
                "{}ed (after {})",
                verb(action),
                reasons.join(", ")
            ))),
        });
        if !step.action.is_change() {
            step.action = Action::Update;
        }
        if !matches!(step.outcome, Outcome::Changed { .. }) {
            step.outcome = Outcome::Changed {
                intent: Intent::Intentional,
            };
        }
        reports
    }

    /// After a partial pass's loop (a revert's, `datum apply --target` or
    /// `--class`): every service outside the selection that a change of
    /// this pass made owe an activation is activated now, as a whole pass
    /// would at its turn and with the same gates ([`Self::activate`]: the
    /// groups of the resources that notify it validated, the files durable,
    /// the activation's own verify), and nothing else of its declaration is
    /// applied (no start, enable or unit file). Only a service that is
    /// itself as declared (observed and planned now: no difference), not
    /// quarantined, and requires nothing this pass failed or blocked: any
    /// other is left as it is, its activation stays owed (the next check's
    /// `activation_owed`, paid by a pass that includes it), and a warning
    /// of the pass says why; a partial pass changes nothing it was not
    /// asked to beyond the activation its change calls for. Returns each
    /// service tried (catalogue order) with its step and the reports of
    /// the groups that failed validation for it.
    pub(crate) fn activate_outside<'c>(
        &mut self,
        catalogue: &'c Catalogue,
        selected: &dyn Fn(&ResourceId) -> bool,
        stopped: &HashMap<ResourceId, ResourceId>,
        changed: &HashSet<ResourceId>,
        ctx: &mut PassContext<'_>,
    ) -> Vec<(&'c Resource, Step, Vec<ResourceReport>)> {
        if self.owed.is_empty() {
            return Vec::new();
        }
        let outside: Vec<&'c Resource> = catalogue
            .resources
            .iter()
            .filter(|r| {
                !selected(&r.id)
                    && self.owed.contains_key(&r.id)
                    && self.services.contains_key(&r.id)
            })
            .collect();
        let mut tried = Vec::new();
        for resource in outside {
            let Some(action) = self.owed.get(&resource.id).map(|o| o.action) else {
                continue;
            };
            let registry = ctx.registry;
            let why_not = match Self::outside_as_declared(resource, registry, stopped, ctx) {
                Ok(bound) => {
                    let mut step = Step::new(Action::None, Diff::default(), Outcome::Unchanged);
                    let groups =
                        self.activate(resource, Some(&bound), &mut step, changed, catalogue, ctx);
                    tried.push((resource, step, groups));
                    continue;
                }
                Err(why) => why,
            };
            let verb = verb(action);
            let (was, until) = match ctx.mode {
                Mode::Apply => ("was not", "performs it"),
                Mode::Plan => ("would not be", "would perform it"),
            };
            ctx.host.notice(format!(
                "{} {was} {verb}ed: it is outside this pass's selection, and {why_not}, so nothing of it was touched; the {verb} stays owed until a pass that includes it (`datum apply`) {until}",
                resource.id
            ));
        }
        tried
    }

    /// A service outside the selection, bound for its activation, when it
    /// may be activated (see [`Self::activate_outside`]); otherwise why not.
    fn outside_as_declared<'b>(
        resource: &'b Resource,
        registry: &'b Registry,
        stopped: &HashMap<ResourceId, ResourceId>,
        ctx: &PassContext<'_>,
    ) -> Result<Bound<'b>, String> {
        if ctx.skip.contains(&resource.id) {
            return Err("it is quarantined".to_owned());
        }
        if let Some(by) = resource.requires.iter().find_map(|dep| stopped.get(dep)) {
            return Err(format!("{by}, which it requires, failed or was blocked"));
        }
        // A sensitive resource's errors are not repeated.
        let error = |e: &dyn std::fmt::Display| {
            if resource.sensitive {
                String::new()
            } else {
                format!(" ({e})")
            }
        };
        let Some(provider) = registry.lookup(&resource.id.kind) else {
            return Err(format!("no provider knows `{}`", resource.id.kind));
        };
        let declared = provider
            .declare(resource)
            .map_err(|e| format!("its declaration could not be read{}", error(&e)))?;
        let observed = provider
            .observe_declared(ctx.host, &declared)
            .map_err(|e| format!("it could not be observed{}", error(&e)))?;
        let diff = provider.plan(&declared, &observed);
        if diff.action().is_change() || !diff.changes.is_empty() || diff.content.is_some() {
            return Err(format!(
                "it is not as declared ({})",
                diff.changed_fields().join(", ")
            ));
        }
        Ok(Bound { provider, declared })
    }

    /// Groups whose files changed in this pass but were not validated by a
    /// service activation: validated now, so a broken group is reported even
    /// when nothing is reloaded.
    pub(crate) fn validate_remaining_groups(
        &mut self,
        catalogue: &Catalogue,
        changed: &HashSet<ResourceId>,
        ctx: &mut PassContext<'_>,
    ) -> Vec<ResourceReport> {
        if ctx.mode != Mode::Apply {
            return Vec::new();
        }
        // Groups with a change in this pass, and groups that failed in an
        // earlier pass: the files on disk are still wrong until a pass
        // validates them, so every pass says so again.
        let mut candidates: Vec<&ResourceId> = changed.iter().collect();
        let still_failing: Vec<String> = ctx
            .store
            .as_deref()
            .and_then(|s| s.owed_reloads().ok())
            .unwrap_or_default()
            .into_iter()
            .filter(|o| o.service.kind == GROUP_KIND)
            .map(|o| o.service.name)
            .collect();
        for resource in &catalogue.resources {
            if resource
                .validate
                .as_deref()
                .is_some_and(|v| still_failing.iter().any(|f| f == v))
            {
                candidates.push(&resource.id);
            }
        }
        let mut reports = Vec::new();
        for def in group_validators(catalogue, &candidates) {
            if self.groups.contains_key(def.name) {
                continue;
            }
            let verdict = validators::validate_group(def, ctx.host);
            if let Err(rejection) = &verdict {
                let none = ResourceId::new(GROUP_KIND, def.name);
                reports.push(group_report(
                    def,
                    rejection,
                    catalogue,
                    ctx,
                    changed,
                    &none,
                    self.not_overlaid.get(def.name),
                ));
            }
            self.groups.insert(def.name, verdict);
        }
        // Remember failing groups (and forget fixed ones) durably.
        if let Some(store) = ctx.store.as_deref_mut() {
            for (name, verdict) in &self.groups {
                let id = ResourceId::new(GROUP_KIND, *name);
                match verdict {
                    Err(_) => {
                        let _ = store.owe(&id, OwedAction::Reload, "failed validation", ctx.now);
                    }
                    Ok(()) => {
                        let _ = store.clear_reload(&id);
                    }
                }
            }
        }
        reports
    }
}

/// The report of a service [`Notifications::activate_outside`] tried, as
/// the pass's loop makes one: a sensitive resource's field values masked
/// (the activation sets no validator output of its own), its target the
/// path its kind claims.
pub(crate) fn outside_report(
    registry: &Registry,
    resource: &Resource,
    step: Step,
    duration_ms: u64,
) -> ResourceReport {
    let mut diff = step.diff;
    if resource.sensitive && !resource.sensitive_by_field_only {
        diff.mask_field_values();
    }
    ResourceReport {
        id: resource.id.clone(),
        origin: resource.origin.clone(),
        target: registry.path_of(resource).map(str::to_owned),
        action: step.action,
        diff,
        outcome: step.outcome,
        sensitive: resource.sensitive,
        detail: None,
        withheld: step.withheld,
        duration_ms,
    }
}

/// The distinct group validators named by these resources, in catalogue order.
fn group_validators(catalogue: &Catalogue, ids: &[&ResourceId]) -> Vec<&'static ValidatorDef> {
    let wanted: HashSet<&ResourceId> = ids.iter().copied().collect();
    distinct_groups(
        catalogue
            .resources
            .iter()
            .filter(|r| wanted.contains(&r.id)),
    )
}

/// The distinct group validators these resources name, in the order given.
fn distinct_groups<'r>(
    resources: impl Iterator<Item = &'r Resource>,
) -> Vec<&'static ValidatorDef> {
    let mut defs: Vec<&'static ValidatorDef> = Vec::new();
    for resource in resources {
        if let Ok(Some(def)) = validator_of(resource)
            && def.scope == Scope::Group
            && !defs.iter().any(|d| d.name == def.name)
        {
            defs.push(def);
        }
    }
    defs
}

/// Whether a group's validator output may echo something sensitive: a
/// sensitive member, any sensitive resource under the configuration's
/// folder (the validator reads the whole configuration, not only the files
/// that name it: an included file holding a credential), or an `output`
/// that names a sensitive resource's path ([`SensitivePaths`]: a
/// file included from elsewhere), asked of the pass's `sensitive` (one
/// made of `catalogue` when there is none).
pub(crate) fn group_sensitive(
    def: &ValidatorDef,
    catalogue: &Catalogue,
    registry: &Registry,
    sensitive: Option<&SensitiveOnce<'_>>,
    output: &str,
) -> Option<Withheld> {
    let config_dir = def
        .main_config
        .and_then(|c| std::path::Path::new(c).parent())
        .map(|d| d.to_path_buf());
    let read: Vec<String> = catalogue
        .resources
        .iter()
        .filter(|r| {
            r.sensitive
                && (r.validate.as_deref() == Some(def.name)
                    || config_dir.as_ref().is_some_and(|dir| {
                        registry
                            .path_of(r)
                            .is_some_and(|p| std::path::Path::new(p).starts_with(dir))
                    }))
        })
        .map(|r| r.id.to_string())
        .collect();
    if !read.is_empty() {
        return Some(Withheld::new(WithheldReason::SensitiveResource, read));
    }
    let own;
    let sensitive = match sensitive {
        Some(s) => s,
        None => {
            own = SensitiveOnce::new(catalogue, registry);
            &own
        }
    };
    sensitive.paths().withheld(Some(def), output)
}

/// How long a word of a sensitive content must be to be looked for in an
/// output: shorter ones (`on`, `yes`, `22`) are in every validator's words.
pub(crate) const SENSITIVE_WORD_MIN: usize = 4;

/// The largest sensitive content whose words are looked for; a larger one
/// withholds every output (nothing could tell it is not quoted).
const SENSITIVE_CONTENT_MAX: u64 = 1024 * 1024;

/// A validator's output is withheld when it names the path of a resource that is
/// sensitive (a File, or anything in a Tree's folder), or quotes a word of
/// a sensitive File's content: validators read the files the checked one
/// includes (sshd's `Include`, nginx's `include`) and echo their offending
/// lines, with the file's name as they were given it (relative, through a
/// link, `/./`) or with none (sshd's `Bad configuration option: VALUE`),
/// so the output of a resource that is not sensitive itself can quote one
/// that is, which everyone may read on the host but whose value must not
/// leave it. The test is by text: the declared path
/// anywhere in the output (under `--root` the validator names it below the
/// root, which still holds it), or any word of a sensitive content.
///
/// What an output must not hold:
/// the declared paths of the catalogue's sensitive resources (a trailing
/// `/` left out; the root, which every path names, never), and every word
/// of at least four bytes (`SENSITIVE_WORD_MIN`) of a sensitive resource's
/// declared content (its lines split at white space, quotes and the
/// punctuation configuration files put around a value: `= : ; , { } ( ) [
/// ] < >`), so that a validator quoting a secret without naming its file is
/// caught too. The fixed words of a line the validator is known to print
/// ([`ValidatorDef::own_lines`], beside each validator's definition:
/// nginx's "configuration file ... test failed", sshd's "line N: Bad
/// configuration option:"; and Datum's own "offending line:" header) are
/// not searched, only the text that varies between them; a word a
/// sensitive file shares with any other text of the output (a line of
/// another shape, a path, a quoted line, a longer word holding it)
/// withholds it where nothing secret was quoted: the price of failing
/// closed (read it on the host); the report says it was withheld
/// and for which sensitive resources ([`Withheld`]), never the words that
/// matched. Made once by a pass that asks for
/// many resources' output, not once per resource, and searched for all at
/// once (one Aho-Corasick automaton reads an output once, where a search
/// per path read it once per sensitive resource: 20,000 quarantined
/// resources' notes against 20,000 sensitive paths were 4 x 10^8 searches).
pub struct SensitivePaths<'a> {
    paths: Vec<std::borrow::Cow<'a, str>>,
    /// For each of `paths` (same index): whether it is a declared path (not
    /// a word), and the sensitive resources it is of.
    owners: Vec<(bool, BTreeSet<String>)>,
    /// `None` when there is nothing to look for, or the automaton could not
    /// be built (past its limits): then each is searched for on its own,
    /// with the same answers.
    matcher: Option<AhoCorasick>,
    /// The sensitive resources whose content could not be read (its
    /// repository file changed or is gone) or is too large to look
    /// through: when there is one, every output that is not empty is
    /// withheld.
    unread: BTreeSet<String>,
}

impl<'a> SensitivePaths<'a> {
    /// The catalogue's sensitive resources' declared paths and the words of
    /// their declared content (read from the repository for a `source:`).
    pub fn of(catalogue: &'a Catalogue, registry: &Registry) -> Self {
        #[cfg(test)]
        BUILT.with(|n| n.set(n.get() + 1));
        let mut seen: HashMap<std::borrow::Cow<'a, str>, (bool, BTreeSet<String>)> = HashMap::new();
        let mut unread = BTreeSet::new();
        for r in catalogue.resources.iter().filter(|r| r.sensitive) {
            let id = r.id.to_string();
            let mut add = |p: std::borrow::Cow<'a, str>, path: bool| {
                let entry = seen.entry(p).or_insert_with(|| (path, BTreeSet::new()));
                entry.0 |= path;
                entry.1.insert(id.clone());
            };
            let provider = registry.lookup(&r.id.kind);
            if let Some(p) = provider
                .and_then(|p| Registry::path_claimed(p, r))
                .filter(|p| p.len() > 1)
            {
                add(p.trim_end_matches('/').into(), true);
            }
            let Some(content) = &r.content else {
                continue;
            };
            // A kind that packs a folder of the repository as its content
            // (a Tree's): the words are its files'.
            if let Some(folder) = provider.and_then(|p| p.source_folder()) {
                match folder.files_again(content, SENSITIVE_CONTENT_MAX) {
                    Some(files) => {
                        for bytes in files {
                            let text = String::from_utf8_lossy(&bytes);
                            sensitive_words(&text).for_each(|w| add(w.to_owned().into(), false));
                        }
                    }
                    None => {
                        unread.insert(id.clone());
                    }
                }
                continue;
            }
            if content.size > SENSITIVE_CONTENT_MAX {
                unread.insert(id.clone());
                continue;
            }
            match content.inline().map(std::str::from_utf8) {
                Some(Ok(text)) => sensitive_words(text).for_each(|w| add(w.into(), false)),
                _ => match datum_host::repo::content_bytes(content) {
                    Ok(bytes) => {
                        let text = String::from_utf8_lossy(&bytes);
                        sensitive_words(&text).for_each(|w| add(w.to_owned().into(), false));
                    }
                    Err(_) => {
                        unread.insert(id.clone());
                    }
                },
            }
        }
        let (paths, owners) = seen.into_iter().unzip();
        let mut searched = Self::with_owners(paths, owners);
        searched.unread = unread;
        searched
    }

    #[cfg(test)]
    fn new(paths: Vec<std::borrow::Cow<'a, str>>) -> Self {
        let owners = paths
            .iter()
            .map(|p| (true, BTreeSet::from([format!("File[{p}]")])))
            .collect();
        Self::with_owners(paths, owners)
    }

    fn with_owners(
        paths: Vec<std::borrow::Cow<'a, str>>,
        owners: Vec<(bool, BTreeSet<String>)>,
    ) -> Self {
        let matcher = if paths.is_empty() {
            None
        } else {
            AhoCorasick::new(paths.iter().map(|p| p.as_bytes())).ok()
        };
        SensitivePaths {
            paths,
            owners,
            matcher,
            unread: BTreeSet::new(),
        }
    }

    /// The same, holding its own copy of every path and word: kept beside
    /// the catalogue rather than borrowing it ([`SensitiveOnce`]).
    fn into_owned(self) -> SensitivePaths<'static> {
        SensitivePaths {
            paths: self
                .paths
                .into_iter()
                .map(|p| std::borrow::Cow::Owned(p.into_owned()))
                .collect(),
            owners: self.owners,
            matcher: self.matcher,
            unread: self.unread,
        }
    }

    /// Whether `output` holds one of the paths or words.
    pub fn named_in(&self, output: &str) -> bool {
        if output.is_empty() {
            return false;
        }
        if !self.unread.is_empty() {
            return true;
        }
        if self.paths.is_empty() {
            return false;
        }
        match &self.matcher {
            Some(matcher) => matcher.is_match(output),
            None => self.paths.iter().any(|p| output.contains(p.as_ref())),
        }
    }

    /// Why the output of `validator` is withheld, if it is: the sensitive
    /// resources whose paths or words it holds (a path before a word), or
    /// those that could not be read. As [`Self::named_in`], but the fixed
    /// words of a line the validator is known to print are not searched
    /// ([`ValidatorDef::own_lines`], and Datum's own header of the lines it
    /// quotes below them).
    pub fn withheld(&self, validator: Option<&ValidatorDef>, output: &str) -> Option<Withheld> {
        if output.is_empty() {
            return None;
        }
        let output = searched_text(validator, output);
        let output = output.as_ref();
        if !self.named_in(output) {
            return None;
        }
        if !self.unread.is_empty() {
            return Some(Withheld::new(
                WithheldReason::SensitiveContentUnread,
                self.unread.iter().cloned().collect(),
            ));
        }
        let hits: Vec<usize> = match &self.matcher {
            Some(matcher) => matcher
                .find_overlapping_iter(output)
                .map(|m| m.pattern().as_usize())
                .collect(),
            None => (0..self.paths.len())
                .filter(|&i| output.contains(self.paths[i].as_ref()))
                .collect(),
        };
        let named_path = hits.iter().any(|&i| self.owners[i].0);
        let mut resources = BTreeSet::new();
        for i in hits {
            let (path, owners) = &self.owners[i];
            if *path == named_path {
                resources.extend(owners.iter().cloned());
            }
        }
        let reason = if named_path {
            WithheldReason::NamesSensitivePath
        } else {
            WithheldReason::QuotesSensitiveContent
        };
        Some(Withheld::new(reason, resources.into_iter().collect()))
    }
}

#[cfg(test)]
thread_local! {
    /// How many times [`SensitivePaths::of`] read the sensitive resources
    /// on this thread (tests count the reads of a run).
    static BUILT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many times [`SensitivePaths::of`] ran on this thread.
#[cfg(test)]
pub(crate) fn sensitive_builds() -> usize {
    BUILT.with(std::cell::Cell::get)
}

/// The [`SensitivePaths`] of one run, made at the first question and
/// never again: a pass (validator output, a group's refusal), the fleet
/// report's warnings and the agent's log all ask the same one, so a run
/// reads the sensitive `source:` files and a sensitive Tree's files at
/// most once (none when nothing prints and nothing warns), and every
/// answer of the run comes from the same reading: the repository changed
/// meanwhile cannot make one withhold by one set of words and another by
/// another.
///
/// `catalogue` holds at least every sensitive resource of what is asked
/// about: a pass over a part of it (a check's revert) is asked with the
/// whole catalogue's, which withholds at least what the part's would.
pub struct SensitiveOnce<'c> {
    catalogue: &'c Catalogue,
    registry: &'c Registry,
    paths: std::cell::OnceCell<SensitivePaths<'static>>,
    ids: std::cell::OnceCell<Vec<String>>,
}

impl<'c> SensitiveOnce<'c> {
    /// Nothing is read until the first question.
    pub fn new(catalogue: &'c Catalogue, registry: &'c Registry) -> Self {
        Self {
            catalogue,
            registry,
            paths: std::cell::OnceCell::new(),
            ids: std::cell::OnceCell::new(),
        }
    }

    /// The catalogue whose sensitive resources these are.
    pub fn catalogue(&self) -> &'c Catalogue {
        self.catalogue
    }

    /// The sensitive paths and words ([`SensitivePaths::of`]), read on the
    /// first call.
    pub fn paths(&self) -> &SensitivePaths<'static> {
        self.paths
            .get_or_init(|| SensitivePaths::of(self.catalogue, self.registry).into_owned())
    }

    /// Whether a text (a pass's warning) names a sensitive resource: by its
    /// id (`File[token]`), or as [`SensitivePaths::named_in`] says (its
    /// declared path, a word of its content, or one that could not be read).
    pub fn names_sensitive(&self, text: &str) -> bool {
        let ids = self.ids.get_or_init(|| {
            self.catalogue
                .resources
                .iter()
                .filter(|r| r.sensitive)
                .map(|r| r.id.to_string())
                .collect()
        });
        self.paths().named_in(text) || ids.iter().any(|id| text.contains(id.as_str()))
    }
}

/// The text of a validator's `output` an output is searched in: each line,
/// or only the variable text (holes) of one the validator is known to
/// print ([`ValidatorDef::own_lines`]) or Datum prints below it
/// ([`validators::quote::OWN_LINES`]), each hole on a line of its own.
fn searched_text<'o>(
    validator: Option<&ValidatorDef>,
    output: &'o str,
) -> std::borrow::Cow<'o, str> {
    let own = validator.map_or(&[][..], |v| v.own_lines);
    let mut searched = String::with_capacity(output.len());
    let mut changed = false;
    for line in output.split('\n') {
        // sshd ends its lines with CR LF.
        let line = line.strip_suffix('\r').unwrap_or(line);
        let holes = validators::own_line_holes(own, line)
            .or_else(|| validators::own_line_holes(validators::quote::OWN_LINES, line));
        match holes {
            Some(holes) => {
                changed = true;
                for hole in holes {
                    searched.push_str(hole);
                    searched.push('\n');
                }
            }
            None => {
                searched.push_str(line);
                searched.push('\n');
            }
        }
    }
    if changed {
        searched.into()
    } else {
        output.into()
    }
}

/// The words of a sensitive content an output is searched for (see
/// [`SensitivePaths`]).
fn sensitive_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '"' | '\''
                    | '`'
                    | '='
                    | ':'
                    | ';'
                    | ','
                    | '{'
                    | '}'
                    | '('
                    | ')'
                    | '['
                    | ']'
                    | '<'
                    | '>'
            )
    })
    .filter(|w| w.len() >= SENSITIVE_WORD_MIN)
}

fn group_report(
    def: &ValidatorDef,
    rejection: &Rejection,
    catalogue: &Catalogue,
    ctx: &PassContext<'_>,
    changed: &HashSet<ResourceId>,
    service: &ResourceId,
    not_overlaid: Option<&String>,
) -> ResourceReport {
    let written: Vec<String> = catalogue
        .resources
        .iter()
        .filter(|r| r.validate.as_deref() == Some(def.name))
        .filter(|r| changed.contains(&r.id))
        .map(|r| r.id.to_string())
        .collect();
    let withheld = group_sensitive(
        def,
        catalogue,
        ctx.registry,
        ctx.sensitive,
        &rejection.output,
    );
    let not_reloaded = if service.kind != GROUP_KIND {
        format!("; {service} not reloaded")
    } else {
        String::new()
    };
    // Written first only where the group could not be laid over its live
    // paths (see `group`): the report says why.
    let why = not_overlaid
        .filter(|_| !written.is_empty())
        .map(|why| format!(" (written before validation: {why})"))
        .unwrap_or_default();
    let reason = format!(
        "{}; files written: {}{why}{not_reloaded}",
        rejection.summary(),
        if written.is_empty() {
            "none in this pass".to_owned()
        } else {
            written.join(", ")
        }
    );
    group_failure(def, rejection, withheld, Phase::Apply, reason)
}

/// The report of a group that failed validation: `ValidationGroup[name]`, failed in
/// `phase` for `reason`, with the validator's output unless it is
/// `withheld` (then marked sensitive, and saying so when there was output).
pub(crate) fn group_failure(
    def: &ValidatorDef,
    rejection: &Rejection,
    withheld: Option<Withheld>,
    phase: Phase,
    reason: String,
) -> ResourceReport {
    let sensitive = withheld.is_some();
    let quiet = rejection.output.trim().is_empty();
    ResourceReport {
        id: ResourceId::new(GROUP_KIND, def.name),
        origin: Origin::default(),
        target: None,
        action: Action::None,
        diff: Default::default(),
        outcome: Outcome::Failed { phase, reason },
        sensitive,
        detail: if sensitive || quiet {
            None
        } else {
            Some(rejection.output.clone())
        },
        withheld: withheld.filter(|_| !quiet),
        duration_ms: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::{Notifications, Owed, OwedAction, SensitivePaths, group_validators};
    use std::collections::BTreeSet;

    use datum_catalog::Catalogue;
    use datum_core::{Resource, ResourceId};
    use datum_testkit::fake::{FAKE_FILE, FAKE_UNIT, fake_file, fake_registry};

    /// The groups an activation validates are those its members name, in
    /// catalogue order, each once: what a scan of the catalogue for the
    /// members found, now from their positions found once per pass.
    #[test]
    fn a_services_groups_are_its_members_in_catalogue_order() {
        let (registry, _, _) = fake_registry();
        let file = |name: &str, validate: Option<&str>| Resource {
            validate: validate.map(str::to_owned),
            ..fake_file(name, &format!("/{name}"), "x\n", &[])
        };
        let unit = |name: &str, reload_on: &[&str], restart_on: &[&str]| {
            let ids = |names: &[&str]| -> Vec<String> {
                names
                    .iter()
                    .map(|n| ResourceId::new(FAKE_FILE, *n).to_string())
                    .collect()
            };
            Resource::new(
                ResourceId::new(FAKE_UNIT, name),
                serde_json::json!({"reload_on": ids(reload_on), "restart_on": ids(restart_on)}),
            )
        };
        let catalogue = Catalogue {
            host: Default::default(),
            resources: vec![
                file("plain", None),
                file("a", Some("apache2")),
                file("c", Some("nginx")),
                file("d", Some("nginx")),
                file("e", Some("apache2")),
                file("own", Some("sudoers")),
                unit("web", &["d", "c", "missing"], &["a", "d"]),
                unit("other", &["plain", "own"], &[]),
                unit("none", &[], &[]),
            ],
            autorequires: Vec::new(),
            boundary: Default::default(),
        };
        let notifications = Notifications::from_catalogue(&catalogue, &registry);
        for (name, expected) in [
            ("web", vec!["apache2", "nginx"]),
            ("other", vec![]),
            ("none", vec![]),
        ] {
            let activated = &notifications.services[&ResourceId::new(FAKE_UNIT, name)];
            let found: Vec<&str> = activated
                .groups(&catalogue)
                .iter()
                .map(|d| d.name)
                .collect();
            assert_eq!(found, expected, "{name}");
            let members: Vec<&ResourceId> = activated.members.iter().collect();
            let scanned: Vec<&str> = group_validators(&catalogue, &members)
                .iter()
                .map(|d| d.name)
                .collect();
            assert_eq!(found, scanned, "{name}");
        }
    }

    #[test]
    fn a_debt_keeps_each_reason_once_in_order_and_says_which_it_added() {
        let texts = |v: &[&str]| v.iter().map(|t| (*t).to_owned()).collect::<Vec<String>>();
        let mut owed = Owed::new(OwedAction::Reload);
        assert_eq!(
            owed.merge(OwedAction::Reload, &texts(&["a", "b", "a"])),
            ["a", "b"]
        );
        // What an earlier pass owed: only what this one did not give is new.
        assert_eq!(
            owed.merge(OwedAction::Restart, &texts(&["b", "c", "gone", "c"])),
            ["c", "gone"]
        );
        assert_eq!(owed.action, OwedAction::Restart);
        assert!(owed.merge(OwedAction::Reload, &texts(&["a"])).is_empty());
        assert_eq!(owed.action, OwedAction::Restart);
        assert_eq!(owed.reasons, ["a", "b", "c", "gone"]);
        assert_eq!(owed.seen.len(), owed.reasons.len());
    }

    /// The search every path on its own made before the automaton.
    fn path_by_path(output: &str, paths: &[&str]) -> bool {
        !output.is_empty() && paths.iter().any(|p| output.contains(p))
    }

    #[test]
    fn an_output_names_a_sensitive_path_exactly_when_it_holds_one() {
        let paths = vec![
            "/etc/secrets/ssh.conf",
            "/etc/secrets",
            "/srv/clé/key.pem",
            "relative/x",
        ];
        let outputs = [
            "",
            "/etc/secrets/ssh.conf: line 1: Bad configuration option: CNRY",
            "/root/etc/secrets/ssh.conf line 2",
            "/etc/secret is not it",
            "/etc/secretsx",
            "at /srv/clé/key.pem:3",
            "/srv/cle/key.pem",
            "see relative/x",
            "quarantined: excluded from apply until `datum release`",
            "/etc/ssh/sshd_config: line 7: Include /etc/secrets",
            "é/etc/secrets/é",
        ];
        let cows = || paths.iter().map(|p| (*p).into()).collect();
        let searched = SensitivePaths::new(cows());
        assert!(searched.matcher.is_some());
        let unbuilt = SensitivePaths {
            matcher: None,
            ..SensitivePaths::new(cows())
        };
        let none = SensitivePaths::new(Vec::new());
        for output in outputs {
            let expected = path_by_path(output, &paths);
            assert_eq!(searched.named_in(output), expected, "{output:?}");
            assert_eq!(unbuilt.named_in(output), expected, "{output:?}");
            assert!(!none.named_in(output), "{output:?}");
        }
        assert!(searched.named_in("/etc/secrets/ssh.conf"));
        assert!(!searched.named_in("/etc/secret"));
    }

    /// A sensitive content's words are what a validator may quote of it:
    /// split where configuration files put a value apart, the short ones
    /// (in every validator's own words) left out.
    #[test]
    fn an_output_quoting_a_word_of_a_sensitive_content_is_withheld() {
        let text =
            "# token file\npassword=\"hunter2\";\nPermitRootLogin yes\n  key: {CNRY-1f}, [ab]\n";
        let words: Vec<&str> = super::sensitive_words(text).collect();
        assert_eq!(
            words,
            [
                "token",
                "file",
                "password",
                "hunter2",
                "PermitRootLogin",
                "CNRY-1f"
            ]
        );
        let searched = SensitivePaths::new(words.iter().map(|w| (*w).into()).collect());
        for (output, named) in [
            ("sshd: Bad configuration option: hunter2", true),
            (
                "unknown directive \"CNRY-1f\" in /r/secrets/./x.conf:1",
                true,
            ),
            ("bad yes/no argument: yes", false),
            ("", false),
        ] {
            assert_eq!(searched.named_in(output), named, "{output}");
        }
        // A sensitive content it could not read withholds every output.
        let unread = SensitivePaths {
            unread: BTreeSet::from(["File[big]".to_owned()]),
            ..SensitivePaths::new(Vec::new())
        };
        assert!(unread.named_in("nginx: configuration file test failed"));
        assert!(!unread.named_in(""));
    }

    /// A withheld output says why and for which sensitive resources (each
    /// once, sorted), the path before a word, never the words themselves;
    /// with or without the automaton alike.
    #[test]
    fn a_withheld_output_says_why_and_for_which_resources() {
        use crate::report::{Withheld, WithheldReason::*};
        let set = |ids: &[&str]| ids.iter().map(|i| (*i).to_owned()).collect::<BTreeSet<_>>();
        let searched = SensitivePaths::with_owners(
            vec!["/etc/secret.conf".into(), "hunter2".into(), "token".into()],
            vec![
                (true, set(&["File[secret]"])),
                (false, set(&["File[secret]", "File[other]"])),
                (false, set(&["File[other]"])),
            ],
        );
        let unbuilt = SensitivePaths {
            matcher: None,
            ..SensitivePaths::with_owners(searched.paths.clone(), searched.owners.clone())
        };
        let withheld = |reason, ids: &[&str]| {
            Some(Withheld::new(
                reason,
                ids.iter().map(|i| (*i).to_owned()).collect(),
            ))
        };
        for (output, expected) in [
            // A secret printed inside a longer word is still printed:
            // found as a substring, never only at word boundaries.
            (
                "unknown directive \"hunter2token\"",
                withheld(QuotesSensitiveContent, &["File[other]", "File[secret]"]),
            ),
            (
                "bad option: token",
                withheld(QuotesSensitiveContent, &["File[other]"]),
            ),
            (
                "/etc/secret.conf:1: hunter2",
                withheld(NamesSensitivePath, &["File[secret]"]),
            ),
            ("nginx: configuration file test failed", None),
            ("", None),
        ] {
            assert_eq!(searched.withheld(None, output), expected, "{output}");
            assert_eq!(unbuilt.withheld(None, output), expected, "{output}");
        }
        let unread = SensitivePaths {
            unread: BTreeSet::from(["Tree[keys]".to_owned()]),
            ..SensitivePaths::with_owners(searched.paths.clone(), searched.owners.clone())
        };
        assert_eq!(
            unread.withheld(
                datum_providers::validators::lookup("nginx"),
                "nginx: configuration file /x test failed"
            ),
            withheld(SensitiveContentUnread, &["Tree[keys]"])
        );
        assert_eq!(unread.withheld(None, ""), None);
    }

    /// The fixed words of a line a validator is known to print are its own,
    /// whatever a sensitive file holds: not searched; what varies (paths,
    /// quoted directives, values) is, and so is every other line.
    #[test]
    fn a_validators_own_words_withhold_nothing_what_it_quotes_does() {
        use crate::report::{Withheld, WithheldReason::*};
        let words = [
            "configuration",
            "file",
            "unknown",
            "directive",
            "failed",
            "line",
            "option",
            "S3cr3tZZq",
        ];
        let searched = SensitivePaths::with_owners(
            words.iter().map(|w| (*w).into()).collect(),
            words
                .iter()
                .map(|_| (false, BTreeSet::from(["File[secret]".to_owned()])))
                .collect(),
        );
        let quoted = Some(Withheld::new(
            QuotesSensitiveContent,
            vec!["File[secret]".to_owned()],
        ));
        for (validator, output, expected) in [
            (
                "nginx",
                "2026/12/07 11:17:58 [emerg] 1#1: unknown directive \"bogus\" in /r/etc/nginx/nginx.conf:3\nnginx: configuration file /r/etc/nginx/nginx.conf test failed\noffending line:\n  /r/etc/nginx/nginx.conf:3:   bogus on;",
                None,
            ),
            (
                "nginx",
                "nginx: [emerg] unknown directive \"S3cr3tZZq\" in /r/x.conf:1",
                quoted.clone(),
            ),
            (
                "nginx",
                "nginx: [emerg] unknown directive \"x\" in /r/file/x.conf:1",
                quoted.clone(),
            ),
            // A line of another shape is searched whole.
            (
                "nginx",
                "nginx: [emerg] invalid number of arguments in \"listen\" directive in /r/x:2",
                quoted.clone(),
            ),
            (
                "sshd",
                "/r/sshd_config: line 2: Bad configuration option: Prot\n/r/sshd_config: terminating, 1 bad configuration options",
                None,
            ),
            // As sshd prints them: CR LF.
            (
                "sshd",
                "/r/sshd_config: line 2: Bad configuration option: Prot\r\n/r/sshd_config: terminating, 1 bad configuration options\r\n",
                None,
            ),
            (
                "sshd",
                "/r/sshd_config: line 2: Bad configuration option: S3cr3tZZq\r\n",
                quoted.clone(),
            ),
            (
                "sshd",
                "/r/sshd_config: line 2: Bad configuration option: S3cr3tZZq",
                quoted.clone(),
            ),
            // Quoted under the offending line: searched.
            (
                "sshd",
                "offending line:\n  /r/inc.conf:1: unknown yes",
                quoted.clone(),
            ),
            // nginx's lines are not sshd's own.
            (
                "sshd",
                "nginx: configuration file /r/x test failed",
                quoted.clone(),
            ),
        ] {
            assert_eq!(
                searched.withheld(datum_providers::validators::lookup(validator), output),
                expected,
                "{validator}: {output}"
            );
        }
        assert_eq!(
            searched.withheld(None, "nginx: configuration file /r/x test failed"),
            quoted
        );
    }

    /// The lines each validator prints itself, success and failure, whose
    /// every fixed word a sensitive file holds: nothing withheld, while a
    /// secret in a hole still is. The lines as the programs printed them
    /// (see datum-providers' each_validators_own_lines_are_what_it_prints).
    #[test]
    fn a_sensitive_file_sharing_a_validators_own_words_withholds_none_of_them() {
        use crate::report::WithheldReason::*;
        let lines: &[(&str, &str)] = &[
            (
                "nginx",
                "nginx: the configuration file /r/etc/nginx/nginx.conf syntax is ok",
            ),
            (
                "nginx",
                "nginx: configuration file /r/etc/nginx/nginx.conf test is successful",
            ),
            (
                "nginx",
                "nginx: configuration file /r/etc/nginx/nginx.conf test failed",
            ),
            ("sudoers", "/r/etc/sudoers.d/ops: parsed OK"),
            (
                "sudoers",
                "/r/etc/sudoers.d/ops:1:18: unknown defaults entry \"bogusopt\"",
            ),
            ("sudoers", "/r/etc/sudoers.d/ops:2:12: syntax error"),
            ("haproxy", "Configuration file is valid"),
            ("haproxy", "Warnings were found."),
            (
                "haproxy",
                "Configuration file has no error but will not start (no listener) => exit(2).",
            ),
            (
                "haproxy",
                "[NOTICE]   (28913) : haproxy version is 2.6.12-1+deb12u4",
            ),
            (
                "haproxy",
                "[NOTICE]   (28913) : path to executable is /usr/sbin/haproxy",
            ),
            (
                "haproxy",
                "[ALERT]    (28913) : config : parsing [/r/h.cfg:2] : unknown keyword 'bogusword' in 'global' section",
            ),
            (
                "haproxy",
                "[ALERT]    (28913) : config : Error(s) found in configuration file : /r/h.cfg",
            ),
            (
                "haproxy",
                "[ALERT]    (28913) : config : Fatal errors found in configuration.",
            ),
            ("apache2", "Syntax OK"),
            (
                "apache2",
                "AH00526: Syntax error on line 8 of /r/etc/apache2/apache2.conf:",
            ),
            (
                "apache2",
                "Invalid command 'Bogusdirective', perhaps misspelled or defined by a module not included in the server configuration",
            ),
            (
                "apache2",
                "Action '-t -d /r/etc/apache2 -f /r/etc/apache2/apache2.conf' failed.",
            ),
            ("apache2", "The Apache error log may have more information."),
            (
                "systemd-unit",
                "/r/x.service:4: Neither a valid executable name nor an absolute path: relative/path",
            ),
            (
                "systemd-unit",
                "x.service: Unit configuration has fatal error, unit will not be started.",
            ),
            (
                "systemd-unit",
                "Unit x.service has a bad unit file setting.",
            ),
            (
                "systemd-unit",
                "/r/x.service:3: Unknown key 'BogusKey' in section [Unit], ignoring.",
            ),
            (
                "nftables",
                "/r/n.conf:3:21-21: Error: syntax error, unexpected newline",
            ),
            (
                "nftables",
                "/r/n.conf:3:3-11: Error: No symbol type information",
            ),
            (
                "logrotate",
                "warning: logrotate in debug mode does nothing except printing debug messages!  Consider using verbose mode (-v) instead if this is not what you want.",
            ),
            ("logrotate", "reading config file /r/etc/logrotate.d/app"),
            (
                "logrotate",
                "error: /r/etc/logrotate.d/app:2 bad rotation count 'abc'",
            ),
            (
                "logrotate",
                "error: found error in /var/log/x.log , skipping",
            ),
            ("logrotate", "Handling 0 logs"),
        ];
        for &(name, line) in lines {
            let def = datum_providers::validators::lookup(name).unwrap();
            // Every word of the line's fixed text (not its holes) is a
            // word of the sensitive file.
            let holes = datum_providers::validators::own_line_holes(def.own_lines, line)
                .unwrap_or_else(|| panic!("{name}: {line:?} is not its own"));
            let mut fixed = line.to_owned();
            for hole in holes.iter().filter(|h| !h.is_empty()) {
                fixed = fixed.replacen(hole, " ", 1);
            }
            // (A fixed word a hole holds too, `nginx` in nginx's path, is
            // found there: left out.)
            let words: Vec<String> = super::sensitive_words(&fixed)
                .filter(|w| !holes.iter().any(|h| h.contains(*w)))
                .map(str::to_owned)
                .collect();
            assert!(!words.is_empty() || fixed.len() < 20, "{name}: {line}");
            let mut all = words.clone();
            all.push("S3cr3tZZq".to_owned());
            let searched = SensitivePaths::with_owners(
                all.iter().map(|w| w.clone().into()).collect(),
                all.iter()
                    .map(|_| (false, BTreeSet::from(["File[secret]".to_owned()])))
                    .collect(),
            );
            assert_eq!(searched.withheld(Some(def), line), None, "{name}: {line}");
            assert_eq!(
                searched.withheld(Some(def), &format!("{line}\r\n")),
                None,
                "{name}: {line}"
            );
            // Another validator's line is searched whole.
            if !words.is_empty() {
                let other = datum_providers::validators::lookup("json");
                assert!(searched.withheld(other, line).is_some(), "{name}: {line}");
            }
            // A secret in a hole is still found.
            if let Some(hole) = holes
                .iter()
                .find(|h| h.trim().len() >= super::SENSITIVE_WORD_MIN)
            {
                let leaked = line.replacen(hole.trim(), "S3cr3tZZq", 1);
                assert_eq!(
                    searched.withheld(Some(def), &leaked).map(|w| w.reason),
                    Some(QuotesSensitiveContent),
                    "{name}: {leaked}"
                );
            }
        }
    }

    #[test]
    fn many_outputs_against_many_sensitive_paths_name_only_the_one_that_holds_one() {
        // 20,000 resources with a note (a class held by a quarantine)
        // against 100,000 sensitive paths (a search per path was 2 x 10^9
        // substring searches; how long it takes is a benchmark's to say,
        // not a test's): only the output that holds one is named.
        let owned: Vec<String> = (0..100_000)
            .map(|i| format!("/etc/app/secrets/key-{i:06}.pem"))
            .collect();
        let paths = SensitivePaths::new(owned.iter().map(|p| p.as_str().into()).collect());
        let mut named = 0;
        for i in 0..20_000 {
            let note = format!("quarantined: excluded from apply until `datum release` ({i})");
            named += usize::from(paths.named_in(&note));
        }
        named += usize::from(paths.named_in("sshd: /etc/app/secrets/key-099999.pem: line 1"));
        assert_eq!(named, 1);
    }
}
