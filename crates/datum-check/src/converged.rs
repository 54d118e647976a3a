//! Whether the apply loop ever made a resource match (issue 14): drift is
//! what the apply loop did not produce, so `datum check` and the agent
//! report a resource never applied, whose last apply failed, or whose
//! declaration changed since its last verified apply, as `not_converged`
//! (with the reason) instead of as drift.

use datum_core::Resource;
use datum_store::{Store, StoreError};

/// Why `resource` is not converged (`None`: an apply verified its current
/// declaration). Read from the state store: an apply of this declaration
/// that failed and none verified says how it failed; otherwise no verified
/// apply at all means never applied, and a verified apply of another
/// declaration means the repository changed since (the differences are the
/// change `datum apply` still owes, not something that happened to the
/// host: a policy acting on them would accept or quarantine the
/// repository's own edit, or "revert" it into place).
///
/// A resource verified as declared now stays converged when a later apply
/// of the same declaration failed (a revert or corrective apply): what
/// differs is still drift, and its class's policy acts on it again (a
/// revert is retried, its flap limits bounding the retries) rather than
/// never again until someone runs `datum apply`.
pub fn why_not(store: &Store, resource: &Resource) -> Result<Option<String>, StoreError> {
    let verified = store.last_verified(&resource.id)?;
    if verified
        .as_ref()
        .is_some_and(|v| store.records(&v.declaration_hash, &resource.declaration_hash))
    {
        return Ok(None);
    }
    if let Some(f) = store.apply_failure(&resource.id)?
        && store.records(&f.declaration_hash, &resource.declaration_hash)
    {
        return Ok(Some(format!(
            "not converged: its last apply failed ({}): {}",
            f.phase, f.reason
        )));
    }
    Ok(Some(match verified {
        None => "not converged: never applied (`datum apply` converges it)".to_owned(),
        Some(_) => "not converged: its declaration changed since its last verified apply (`datum apply` converges it)"
            .to_owned(),
    }))
}
