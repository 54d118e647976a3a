//! Whether the apply loop ever made a resource match (issue 14): drift is
//! what the apply loop did not produce, so `datum check` and the agent
//! report a resource never applied, whose last apply failed, or whose
//! declaration changed since its last verified apply, as `not_converged`
//! (with the reason) instead of as drift.

use datum_core::Resource;
use datum_store::{Store, StoreError};

/// Why `resource` is not converged (`None`: an apply verified its current
/// declaration last). Read from the state store: no verified apply at all
/// means never applied; a recorded failure means the last apply failed; a
/// verified apply of another declaration means the repository changed since
/// (the differences are the change `datum apply` still owes, not something
/// that happened to the host: a policy acting on them would accept or
/// quarantine the repository's own edit, or "revert" it into place).
pub fn why_not(store: &Store, resource: &Resource) -> Result<Option<String>, StoreError> {
    if let Some(f) = store.apply_failure(&resource.id)? {
        return Ok(Some(format!(
            "not converged: its last apply failed ({}): {}",
            f.phase, f.reason
        )));
    }
    Ok(match store.last_verified(&resource.id)? {
        None => Some("not converged: never applied (`datum apply` converges it)".to_owned()),
        Some(last) if last.declaration_hash != resource.declaration_hash => Some(
            "not converged: its declaration changed since its last verified apply (`datum apply` converges it)"
                .to_owned(),
        ),
        Some(_) => None,
    })
}
