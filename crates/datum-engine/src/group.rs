//! Group validation before anything is written.
//!
//! A group validator (`nginx -t`, `apachectl -t`) judges an application's
//! whole configuration, so one file of a group cannot be judged alone. Before
//! the pass writes any file, every changed member of each group is laid over
//! its live path in the validator's throwaway view (`datum_host::sandbox`:
//! an overlay whose lower layer is the machine, whose upper layer is a
//! private tmpfs) and the group validator runs on the configuration as it
//! would be after the apply. Only a group that passes is written; a group
//! that fails changes no file, so the service it notifies owes nothing and
//! reloads nothing. `datum plan` runs the same check ("would fail validation
//! (nginx)").
//!
//! Where a group cannot be laid over its live paths (validators run
//! unsandboxed, a member is a Tree or is to be removed), the spec's older
//! order stays: the files are written, the group is validated on disk, and
//! the reload is withheld if it fails; the failure report says why the group
//! was not validated first (see `activation`).
//!
//! This module must not write to the host: it only observes, places files in
//! the view and runs the validator.

use std::collections::{HashMap, HashSet};

use datum_catalog::Catalogue;
use datum_core::{Action, Observed, Outcome, Phase, Resource, ResourceId};
use datum_host::sandbox::{self, Isolation, Sandbox};
use datum_providers::validators::{self, Rejection, RejectionKind, Scope, ValidatorDef};
use datum_providers::{ProviderError, Registry};

use crate::activation::{GROUP_KIND, Notifications, group_failure, group_sensitive};
use crate::gate::{Placement, validator_of};
use crate::observe::{Bound, Observations};
use crate::pass::{Mode, PassContext, Step, run_resource};
use crate::report::{ResourceReport, Withheld};
use crate::select::PassOptions;

/// What the check before writing decided for this pass.
#[derive(Default)]
pub(crate) struct GroupChecks {
    /// A changed member -> the group validator that refused its group.
    refused: HashMap<ResourceId, &'static str>,
    /// A refused group's validator output, for each member's failure too (a
    /// person who opens the member's failure reads why), or why it is
    /// withheld (the group touches anything sensitive); `None` when the
    /// validator said nothing.
    outputs: HashMap<&'static str, Option<Result<String, Withheld>>>,
    /// Groups that could not be laid over their live paths, with why.
    pub(crate) not_overlaid: HashMap<&'static str, String>,
    /// One report per refused group.
    pub(crate) reports: Vec<ResourceReport>,
}

/// The changed members of one group, in catalogue order.
struct Group<'a> {
    def: &'static ValidatorDef,
    changed: Vec<(&'a Resource, Action)>,
    /// Each changed member's provider and declaration, as `changed`.
    bound: Vec<&'a Bound<'a>>,
}

impl GroupChecks {
    /// Validates every group with a changed member among `selected`, with
    /// its changed files laid over their live paths.
    pub(crate) fn before_writing<'a>(
        catalogue: &Catalogue,
        selected: &[&'a Resource],
        observations: &'a Observations<'a>,
        ctx: &PassContext<'_>,
        options: &PassOptions,
    ) -> Self {
        let mut checks = GroupChecks::default();
        let mut groups: Vec<Group<'a>> = Vec::new();
        for (index, &resource) in selected.iter().enumerate() {
            let Ok(Some(def)) = validator_of(resource) else {
                continue;
            };
            if def.scope != Scope::Group
                || ctx.skip.contains(&resource.id)
                || options.hold.contains(&resource.id)
            {
                continue;
            }
            let Some(bound) = observations.bound(index) else {
                continue;
            };
            let action = observations
                .peek(index, |observed| {
                    bound.provider.plan(&bound.declared, observed).action()
                })
                .unwrap_or(Action::None);
            if !action.is_change() {
                continue;
            }
            match groups.iter_mut().find(|g| g.def.name == def.name) {
                Some(group) => {
                    group.changed.push((resource, action));
                    group.bound.push(bound);
                }
                None => groups.push(Group {
                    def,
                    changed: vec![(resource, action)],
                    bound: vec![bound],
                }),
            }
        }
        for group in groups {
            match overlay(&group, ctx) {
                Overlay::Cannot(why) => {
                    checks.not_overlaid.insert(group.def.name, why);
                }
                Overlay::Ready(view) => {
                    let verdict = validators::validate_group_in(
                        group.def,
                        ctx.host,
                        Isolation::Sandboxed,
                        &view,
                    );
                    match verdict {
                        Ok(()) => {}
                        // A plan on a host where this pass's packages would
                        // install the validator first cannot run it yet.
                        Err(Rejection {
                            kind:
                                RejectionKind::MissingBinary {
                                    binary,
                                    package: Some(package),
                                },
                            ..
                        }) if ctx.mode == Mode::Plan
                            && let Some(installer) =
                                installer_of(ctx.registry, catalogue, &group, package) =>
                        {
                            checks.not_overlaid.insert(
                                group.def.name,
                                format!(
                                    "`{binary}` is not installed yet ({installer} installs it)"
                                ),
                            );
                        }
                        Err(rejection) => checks.refuse(&group, &rejection, catalogue, ctx),
                    }
                }
                Overlay::Refused(rejection) => {
                    checks.refuse(&group, &rejection, catalogue, ctx);
                }
            }
        }
        checks
    }

    /// Whether `id`'s group was refused before writing.
    pub(crate) fn refuses(&self, id: &ResourceId) -> bool {
        self.refused.contains_key(id)
    }

    /// The step of a member whose group was refused ([`Self::refuses`]):
    /// planned (so the diff shows what was refused), never written, failed.
    pub(crate) fn refused_step(
        &self,
        resource: &Resource,
        bound: Option<&Bound<'_>>,
        cached: Option<Result<Observed, ProviderError>>,
        ctx: &mut PassContext<'_>,
    ) -> Step {
        let name = self.refused.get(&resource.id).copied().unwrap_or_default();
        let mode = ctx.mode;
        ctx.mode = Mode::Plan;
        // Notifies nothing: a file that is not written owes no reload.
        let mut silent = Notifications::none();
        let mut step = run_resource(resource, bound, cached, None, &mut silent, ctx);
        ctx.mode = mode;
        if matches!(step.outcome, Outcome::WouldChange { .. }) {
            match self.outputs.get(name).cloned().flatten() {
                Some(Ok(output)) => step.detail = Some(output),
                Some(Err(withheld)) => step.withheld = Some(withheld),
                None => {}
            }
            step.outcome = Outcome::Failed {
                phase: phase(mode),
                reason: match mode {
                    Mode::Plan => format!(
                        "would fail validation ({name}): the assembled configuration with this file is refused (see {GROUP_KIND}[{name}])"
                    ),
                    Mode::Apply => format!(
                        "not written: {GROUP_KIND}[{name}] failed validation with this file laid over its live path; no file of the group was written"
                    ),
                },
            };
        }
        step
    }

    fn refuse(
        &mut self,
        group: &Group<'_>,
        rejection: &Rejection,
        catalogue: &Catalogue,
        ctx: &PassContext<'_>,
    ) {
        let mode = ctx.mode;
        let def = group.def;
        for (resource, _) in &group.changed {
            self.refused.insert(resource.id.clone(), def.name);
        }
        let members: Vec<String> = group
            .changed
            .iter()
            .map(|(r, _)| r.id.to_string())
            .collect();
        let services = notified(ctx.registry, catalogue, &group.changed);
        let not_reloaded = if services.is_empty() {
            String::new()
        } else {
            let verb = if mode == Mode::Plan {
                "would not be reloaded"
            } else {
                "not reloaded"
            };
            format!("; {} {verb}", services.join(", "))
        };
        let laid = match mode {
            Mode::Plan => "would fail validation",
            Mode::Apply => "no file written",
        };
        let withheld = group_sensitive(
            def,
            catalogue,
            ctx.registry,
            ctx.sensitive,
            &rejection.output,
        );
        let output = match &withheld {
            _ if rejection.output.trim().is_empty() => None,
            Some(withheld) => Some(Err(withheld.clone())),
            None => Some(Ok(rejection.output.clone())),
        };
        self.outputs.insert(def.name, output);
        let reason = format!(
            "{}; {laid} ({}): validated with {} laid over the live configuration{not_reloaded}",
            rejection.summary(),
            def.name,
            members.join(", ")
        );
        self.reports
            .push(group_failure(def, rejection, withheld, phase(mode), reason));
    }
}

fn phase(mode: Mode) -> Phase {
    match mode {
        Mode::Plan => Phase::Plan,
        Mode::Apply => Phase::Apply,
    }
}

enum Overlay {
    /// The view with every changed member at its live path.
    Ready(Sandbox),
    /// Validators cannot run at all here (fail closed).
    Refused(Rejection),
    /// The group cannot be shown in a view: why.
    Cannot(String),
}

fn overlay(group: &Group<'_>, ctx: &PassContext<'_>) -> Overlay {
    match sandbox::isolation() {
        Ok(Isolation::Sandboxed) => {}
        Ok(Isolation::Unsandboxed) => {
            return Overlay::Cannot(format!(
                "validators run unsandboxed here ({}=off), so the group could not be laid over its live paths before writing",
                sandbox::ENV
            ));
        }
        // The same refusal a validation after writing would give.
        Err(_) => {
            return match validators::validate_group(group.def, ctx.host) {
                Err(rejection) => Overlay::Refused(rejection),
                Ok(()) => Overlay::Cannot("the validator sandbox is unavailable".to_owned()),
            };
        }
    }
    let mut view = Sandbox::new();
    for ((resource, action), bound) in group.changed.iter().zip(&group.bound) {
        let single_file = bound.provider.takes_content();
        if !single_file {
            return Overlay::Cannot(format!(
                "{} is not a single file, so the group could not be laid over its live paths before writing",
                resource.id
            ));
        }
        if *action == Action::Remove {
            return Overlay::Cannot(format!(
                "{} is to be removed, which the validator's view cannot show, so the group was not validated before writing",
                resource.id
            ));
        }
        match Placement::declared(bound, ctx.host) {
            Ok(Some(p)) => {
                view.place(p.live, p.bytes, p.mode, p.uid, p.gid);
            }
            // Owner or mode only: the live content is what the group has.
            Ok(None) => {}
            Err(why) => {
                return Overlay::Cannot(format!(
                    "{}'s content could not be read ({why}), so the group was not validated before writing",
                    resource.id
                ));
            }
        }
    }
    Overlay::Ready(view)
}

/// The resources that reload or restart on a change of these members
/// (those whose kind has the activation capability and names one of them).
fn notified(
    registry: &Registry,
    catalogue: &Catalogue,
    members: &[(&Resource, Action)],
) -> Vec<String> {
    let ids: HashSet<&ResourceId> = members.iter().map(|(r, _)| &r.id).collect();
    catalogue
        .resources
        .iter()
        .filter(|r| {
            registry
                .lookup(&r.id.kind)
                .and_then(|p| p.activation())
                .is_some_and(|a| {
                    a.notified_by(&|field| r.desired.get(field))
                        .iter()
                        .any(|(id, _)| ids.contains(id))
                })
        })
        .map(|r| r.id.to_string())
        .collect()
}

/// The resource of the catalogue that installs `package` (the validator's
/// package) before a changed member of `group`, by the ordering capability
/// of its kind (a declared Package), if there is one.
fn installer_of(
    registry: &Registry,
    catalogue: &Catalogue,
    group: &Group<'_>,
    package: &str,
) -> Option<ResourceId> {
    let members: HashSet<&ResourceId> = group.changed.iter().map(|(r, _)| &r.id).collect();
    registry
        .iter()
        .filter_map(|p| p.ordering())
        .flat_map(|o| o.edges(&catalogue.resources))
        .find(|edge| members.contains(&edge.from) && edge.after.name == package)
        .map(|edge| edge.after)
}
