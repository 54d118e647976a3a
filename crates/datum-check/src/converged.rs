//! Whether the apply loop ever made a resource match (issue 14): drift is
//! what the apply loop did not produce, so `datum check` and the agent
//! report a resource never applied, or whose last apply failed, as
//! `not_converged` (with the failure) instead of as drift.

use datum_core::ResourceId;
use datum_store::{Store, StoreError};

/// Why `id` is not converged (`None`: an apply verified it last). Read from
/// the state store: no verified apply at all means never applied; a
/// recorded failure means the last apply failed.
pub fn why_not(store: &Store, id: &ResourceId) -> Result<Option<String>, StoreError> {
    if let Some(f) = store.apply_failure(id)? {
        return Ok(Some(format!(
            "not converged: its last apply failed ({}): {}",
            f.phase, f.reason
        )));
    }
    Ok(store
        .last_verified(id)?
        .is_none()
        .then(|| "not converged: never applied (`datum apply` converges it)".to_owned()))
}
