//! The checkpoint between staging and activation: the resource's named
//! validator, looked up by the engine in the program's registry, run on the
//! staged copy. Group validators pass a single file through: they run on the
//! assembled configuration once the group is written (see `activation`).

use std::path::Path;

use datum_core::Resource;
use datum_host::Host;
use datum_providers::common::meta::MetaDesired;
use datum_providers::validators::{self, Rejection, Scope, ValidatorDef};
use datum_providers::{GateRejection, StagingGate};

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

/// Runs the resource's single-file validator on staged content.
pub struct ValidationGate<'a> {
    pub resource: &'a Resource,
    pub host: &'a Host,
}

impl StagingGate for ValidationGate<'_> {
    fn check_staged(&mut self, staged: &Path) -> Result<(), GateRejection> {
        match validator_of(self.resource)? {
            Some(def) if def.scope == Scope::File => {
                validators::validate_staged(def, self.host, staged).map_err(to_gate)
            }
            _ => Ok(()),
        }
    }
}

/// `datum plan`: renders changed content to a scratch copy (outside the
/// root: a dry run writes nothing to the host) with the target's file name,
/// owner and mode, and runs the single-file validator on it, so the plan can
/// say "would fail validation" before anyone applies.
pub fn dry_run(resource: &Resource, host: &Host) -> Result<(), GateRejection> {
    let Some(def) = validator_of(resource)? else {
        return Ok(());
    };
    if def.scope != Scope::File {
        return Ok(());
    }
    let Some(content) = &resource.content else {
        return Ok(());
    };
    let name = resource
        .desired_str("path")
        .and_then(|p| Path::new(p).file_name())
        .map(|n| n.to_owned())
        .unwrap_or_else(|| "content".into());
    let scratch_error = |e: std::io::Error| GateRejection {
        summary: format!(
            "cannot prepare a scratch copy for validator {}: {e}",
            def.name
        ),
        detail: None,
    };
    let dir = tempfile::Builder::new()
        .prefix("datum-plan-")
        .tempdir()
        .map_err(scratch_error)?;
    let scratch = dir.path().join(name);
    let bytes = datum_host::fs::content_bytes(content).map_err(|e| GateRejection {
        summary: e.to_string(),
        detail: None,
    })?;
    std::fs::write(&scratch, &bytes).map_err(scratch_error)?;
    // Validators such as visudo judge the file's owner and mode too: the
    // scratch copy gets the declared ones, parsed as the File provider does.
    if let Ok(meta) = MetaDesired::parse(&resource.desired) {
        if let Some(mode) = meta.mode {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(mode))
                .map_err(scratch_error)?;
        }
        if let Ok((uid, gid)) = meta.resolve(host) {
            let _ = std::os::unix::fs::chown(&scratch, uid, gid);
        }
    }
    validators::validate_staged(def, host, &scratch).map_err(to_gate)
}
