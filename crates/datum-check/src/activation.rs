//! A host that "will be wrong after its next restart": a reload or restart
//! an apply owes and has not performed (`activation_owed`), and a live
//! configuration that its group validator refuses (`invalid_live_config`,
//! `nginx -t` on what is on disk now). One finding each, for `datum check`
//! and the agent's own checks alike, so exit 2 and the metrics say so.
//!
//! Report only, whatever the class's policy: nothing a policy reverts pays
//! a debt left over (a revert of a file performs the reload it calls for
//! itself, when it can: the engine's partial pass), and the fix for a
//! refused configuration is a repository change or a person. Findings carry the validator's one-line summary (validator,
//! host, version, status), never its output, which may echo a secret.
//!
//! Must not write to the host or the store: it reads the store's owed
//! activations and runs group validators in their throwaway sandbox.

use std::collections::BTreeMap;

use datum_core::{Resource, ResourceId};
use datum_drift::check::CheckFinding;
use datum_host::Host;
use datum_providers::validators::{self, RejectionKind, Scope};
use datum_report::AttrDiff;
use datum_store::{OwedAction, Store};

/// The finding categories this module adds.
pub const ACTIVATION_OWED: &str = "activation_owed";
pub const INVALID_LIVE_CONFIG: &str = "invalid_live_config";

/// A resource a check covers, as far as this module needs it.
#[derive(Debug, Clone, Copy)]
pub struct Checked<'a> {
    pub id: &'a ResourceId,
    pub class: &'a str,
    /// The validator it names, if any.
    pub validate: Option<&'a str>,
}

impl<'a> From<&'a Resource> for Checked<'a> {
    fn from(r: &'a Resource) -> Self {
        Checked {
            id: &r.id,
            class: &r.class,
            validate: r.validate.as_deref(),
        }
    }
}

/// Findings for the services among `checked` that are owed an activation,
/// and for the groups among `checked` whose live configuration fails its
/// validator. Errors (the store cannot be read, a validator could not give
/// a verdict) come back as (resource, reason) pairs.
pub fn findings<'a>(
    checked: impl IntoIterator<Item = Checked<'a>>,
    store: Option<&Store>,
    host: &Host,
) -> (Vec<CheckFinding>, Vec<(String, String)>) {
    let checked: Vec<Checked<'a>> = checked.into_iter().collect();
    let mut findings = Vec::new();
    let mut errors = Vec::new();

    if let Some(store) = store {
        match store.owed_reloads() {
            Ok(owed) => {
                // Looked up by id only when something is owed (most checks:
                // nothing, and 20,000 ids are not worth a map then).
                let by_id: BTreeMap<&ResourceId, &Checked<'a>> = if owed.is_empty() {
                    BTreeMap::new()
                } else {
                    checked.iter().map(|r| (r.id, r)).collect()
                };
                for o in owed {
                    let Some(service) = by_id.get(&o.service) else {
                        continue;
                    };
                    let verb = match o.action {
                        OwedAction::Reload => "reload",
                        OwedAction::Restart => "restart",
                    };
                    findings.push(CheckFinding {
                        finding: datum_report::Finding {
                            subject: service.id.to_string(),
                            category: ACTIVATION_OWED.to_owned(),
                            // Declared -> observed, like every check finding.
                            diffs: vec![AttrDiff::plain(
                                "activation",
                                "performed",
                                format!(
                                    "{verb} owed since {} (after {})",
                                    datum_report::time::rfc3339(o.since),
                                    o.reasons.join(", ")
                                ),
                            )],
                        },
                        id: service.id.clone(),
                        class: service.class.to_owned(),
                        target: None,
                        content_diff: None,
                        changed_by: Vec::new(),
                    });
                }
            }
            Err(e) => {
                if let Some(first) = checked.first() {
                    errors.push((first.id.to_string(), e.to_string()));
                }
            }
        }
    }

    // The group validators the checked files name, each with its first member.
    let mut groups: Vec<(&'static validators::ValidatorDef, &Checked<'a>)> = Vec::new();
    for r in &checked {
        if let Some(def) = r.validate.and_then(validators::lookup)
            && def.scope == Scope::Group
            && !groups.iter().any(|(d, _)| d.name == def.name)
        {
            groups.push((def, r));
        }
    }
    for (def, member) in groups {
        let Err(rejection) = validators::validate_group(def, host) else {
            continue;
        };
        let subject = format!("{}[{}]", datum_engine::GROUP_KIND, def.name);
        if !matches!(rejection.kind, RejectionKind::Invalid { .. }) {
            errors.push((subject, rejection.summary()));
            continue;
        }
        findings.push(CheckFinding {
            finding: datum_report::Finding {
                subject,
                category: INVALID_LIVE_CONFIG.to_owned(),
                diffs: vec![AttrDiff::plain("validation", "passes", rejection.summary())],
            },
            id: member.id.clone(),
            class: member.class.to_owned(),
            target: def.main_config.map(str::to_owned),
            content_diff: None,
            changed_by: Vec::new(),
        });
    }
    (findings, errors)
}
