//! The last apply of a resource that failed (issue 14): drift is what the
//! apply loop did not produce, so a resource whose last apply failed is
//! reported as not converged, with the failure, until an apply verifies it.
//!
//! This module stores what the engine recorded; it decides nothing.

use std::collections::BTreeSet;

use datum_core::ResourceId;
use rusqlite::{OptionalExtension as _, params};
use serde::{Deserialize, Serialize};

use super::{Batch, Store, sql};
use crate::error::StoreError;

/// A failed apply: the phase (`apply`, `verify`...) and the engine's one-line
/// reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyFailure {
    pub declaration_hash: String,
    pub phase: String,
    pub reason: String,
    pub failed_at: i64,
}

impl Batch<'_> {
    /// Records (replacing any earlier one) that the last apply of `id` failed.
    pub fn record_apply_failure(
        &self,
        id: &ResourceId,
        failure: &ApplyFailure,
    ) -> Result<(), StoreError> {
        self.tx
            .execute(
                "INSERT OR REPLACE INTO apply_failures (resource, kind, name, declaration_hash, \
                 phase, reason, failed_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    id.to_string(),
                    id.kind,
                    id.name,
                    failure.declaration_hash,
                    failure.phase,
                    failure.reason,
                    failure.failed_at
                ],
            )
            .map(drop)
            .map_err(sql(self.path, "cannot record a failed apply"))
    }

    /// Forgets the failure of `id` (an apply verified it since).
    pub fn clear_apply_failure(&self, id: &ResourceId) -> Result<(), StoreError> {
        self.tx
            .execute(
                "DELETE FROM apply_failures WHERE resource = ?1",
                [id.to_string()],
            )
            .map(drop)
            .map_err(sql(self.path, "cannot clear a failed apply"))
    }
}

impl Store {
    /// The last failed apply of `id`, if no apply verified it since.
    pub fn apply_failure(&self, id: &ResourceId) -> Result<Option<ApplyFailure>, StoreError> {
        self.conn
            .query_row(
                "SELECT declaration_hash, phase, reason, failed_at FROM apply_failures \
                 WHERE resource = ?1",
                [id.to_string()],
                |r| {
                    Ok(ApplyFailure {
                        declaration_hash: r.get(0)?,
                        phase: r.get(1)?,
                        reason: r.get(2)?,
                        failed_at: r.get(3)?,
                    })
                },
            )
            .optional()
            .map_err(sql(&self.path, "cannot read a failed apply"))
    }

    /// Every resource whose last apply failed (display form), for a pass
    /// that clears the ones it verifies.
    pub fn failed_applies(&self) -> Result<BTreeSet<String>, StoreError> {
        self.conn
            .prepare_cached("SELECT resource FROM apply_failures")
            .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
            .map_err(sql(&self.path, "cannot read failed applies"))
    }

    /// See [`Batch::record_apply_failure`]; one transaction.
    pub fn record_apply_failure(
        &mut self,
        id: &ResourceId,
        failure: &ApplyFailure,
    ) -> Result<(), StoreError> {
        self.write(|b| b.record_apply_failure(id, failure))
    }

    /// See [`Batch::clear_apply_failure`]; one transaction.
    pub fn clear_apply_failure(&mut self, id: &ResourceId) -> Result<(), StoreError> {
        self.write(|b| b.clear_apply_failure(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_kept_until_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        let id = ResourceId::new("File", "a");
        assert_eq!(store.apply_failure(&id).unwrap(), None);
        let failure = ApplyFailure {
            declaration_hash: "h".into(),
            phase: "apply".into(),
            reason: "validation failed (json, exit 1)".into(),
            failed_at: 5,
        };
        store.record_apply_failure(&id, &failure).unwrap();
        assert_eq!(store.apply_failure(&id).unwrap(), Some(failure));
        assert!(store.failed_applies().unwrap().contains("File[a]"));
        store.clear_apply_failure(&id).unwrap();
        assert_eq!(store.apply_failure(&id).unwrap(), None);
        assert!(store.failed_applies().unwrap().is_empty());
    }
}
