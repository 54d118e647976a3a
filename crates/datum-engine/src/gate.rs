//! The checkpoint between staging and activation: the resource's named
//! validator, looked up by the engine in the program's registry, run on the
//! staged copy. Group validators pass a single file through: they run on the
//! assembled configuration, with the group's files laid over their live
//! paths before any is written (see `group`), and again once the group is
//! written, before a reload (see `activation`).

use std::path::PathBuf;

use datum_core::Resource;
use datum_host::Host;
use datum_host::sandbox::{self, Isolation};
use datum_providers::validators::{self, Rejection, Scope, ValidatorDef};
use datum_providers::{GateRejection, Staged};

use crate::observe::Bound;

/// The validator a resource names, if it names one. A name the registry does
/// not know never reaches the engine (the catalogue refuses it), but if it
/// did, it would be a failure, not a skip.
pub fn validator_of(resource: &Resource) -> Result<Option<&'static ValidatorDef>, GateRejection> {
    match &resource.validate {
        None => Ok(None),
        Some(name) => validators::lookup(name)
            .map(Some)
            .ok_or_else(|| GateRejection {
                summary: format!("unknown validator `{name}`"),
                detail: None,
            }),
    }
}

/// A validator's "no" as the provider reports it: a summary without output,
/// and the output as detail (the engine drops it for sensitive resources).
pub fn to_gate(rejection: Rejection) -> GateRejection {
    let detail = (!rejection.output.trim().is_empty()).then(|| rejection.output.clone());
    GateRejection {
        summary: rejection.summary(),
        detail,
    }
}

/// Runs the resource's single-file validator on a staged copy (a group
/// validator passes it through: see the module header).
pub(crate) fn check_staged(
    resource: &Resource,
    host: &Host,
    staged: &Staged<'_>,
) -> Result<(), GateRejection> {
    match validator_of(resource)? {
        Some(def) if def.scope == Scope::File => {
            validators::validate_staged(def, host, staged).map_err(to_gate)
        }
        _ => Ok(()),
    }
}

/// `datum plan`: runs the single-file validator on the changed content, so
/// the plan can say "would fail validation" before anyone applies. The
/// content is laid at the target's own path inside the validator's sandbox
/// (with the declared owner and mode, which validators such as visudo
/// judge), so nothing is written to the host, not even a scratch copy. A
/// non-root process that opted out of the sandbox gets a private scratch
/// copy with the target's file name instead.
pub(crate) fn dry_run(bound: &Bound<'_>, host: &Host) -> Result<(), GateRejection> {
    let Some(def) = validator_of(bound.resource())? else {
        return Ok(());
    };
    if def.scope != Scope::File {
        return Ok(());
    }
    let failed = |summary: String| GateRejection {
        summary,
        detail: None,
    };
    let Some(placement) = Placement::declared(bound, host).map_err(failed)? else {
        return Ok(());
    };
    let isolation = match def.check {
        validators::Check::Builtin(_) => Isolation::Unsandboxed,
        _ => sandbox::isolation().map_err(|e| failed(e.to_string()))?,
    };
    let (mode, uid, gid) = (placement.mode, placement.uid, placement.gid);
    // In the sandbox the content lies at the live path; a built-in parser
    // reads the bytes it is given and nothing else, so no copy of them is
    // written anywhere (the live path is only a name in its messages);
    // any other validator outside a sandbox reads a private scratch copy.
    let builtin = matches!(def.check, validators::Check::Builtin(_));
    let scratch = match isolation {
        Isolation::Unsandboxed if !builtin => {
            let name = placement.live.file_name().unwrap_or("content".as_ref());
            Some(
                sandbox::ScratchCopy::new(name, &placement.bytes, mode, uid, gid).map_err(|e| {
                    failed(format!(
                        "cannot prepare a scratch copy for validator {}: {e}",
                        def.name
                    ))
                })?,
            )
        }
        _ => None,
    };
    let staged = Staged {
        path: scratch
            .as_ref()
            .map_or(placement.live.as_path(), |s| s.path()),
        bytes: &placement.bytes,
        mode,
        uid,
        gid,
    };
    validators::validate_staged_in(def, host, &staged, isolation).map_err(to_gate)
}

/// A resource's declared content as it would lie at its live path (the
/// first path its kind owns): the bytes, the declared mode and owner
/// (validators such as visudo judge them).
pub(crate) struct Placement {
    /// The live path on the machine (under the root).
    pub live: PathBuf,
    pub bytes: Vec<u8>,
    pub mode: u32,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

impl Placement {
    /// `None` for a resource that declares no content or owns no path.
    pub(crate) fn declared(bound: &Bound<'_>, host: &Host) -> Result<Option<Self>, String> {
        let Some(content) = &bound.resource().content else {
            return Ok(None);
        };
        let Some(paths) = bound.provider.paths() else {
            return Ok(None);
        };
        let Some(declared) = paths.managed_paths(&bound.declared).into_iter().next() else {
            return Ok(None);
        };
        let bytes = datum_host::repo::content_bytes(content).map_err(|e| e.to_string())?;
        let meta = paths.declared_meta(host, &bound.declared)?;
        let (mode, uid, gid) = (meta.mode, meta.uid, meta.gid);
        let live = host.resolve(&declared).map_err(|e| e.to_string())?;
        Ok(Some(Self {
            live,
            bytes: bytes.into_owned(),
            mode,
            uid,
            gid,
        }))
    }
}
