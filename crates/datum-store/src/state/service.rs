//! Reloads and restarts owed to services (issue 3).
//!
//! The engine records a debt before it writes a service's files and clears it
//! only after the reload succeeded, so a pass that fails or is killed in
//! between leaves the debt for the next pass to validate and pay. This is the
//! gap where other tools lose reloads: the files are new, the service still
//! runs the old configuration, and nothing remembers.

use datum_core::ResourceId;
use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::{Batch, Store, malformed, sql};
use crate::error::StoreError;

/// A service's debt can carry at most this many distinct reasons; older ones
/// are dropped so a service that never manages to reload does not grow a row
/// without bound.
const MAX_REASONS: usize = 20;

/// What a service is owed. A restart also applies a new configuration, so it
/// settles a reload too: a debt only ever grows from reload to restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OwedAction {
    Reload,
    Restart,
}

impl OwedAction {
    fn as_str(self) -> &'static str {
        match self {
            OwedAction::Reload => "reload",
            OwedAction::Restart => "restart",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "reload" => Some(OwedAction::Reload),
            "restart" => Some(OwedAction::Restart),
            _ => None,
        }
    }
}

/// One service's outstanding debt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwedReload {
    pub service: ResourceId,
    pub action: OwedAction,
    /// Why, oldest first, without duplicates (`File[nginx-site] changed`).
    pub reasons: Vec<String>,
    /// Unix seconds of the oldest unpaid debt.
    pub since: i64,
}

impl Batch<'_> {
    /// Records that `service` is owed `action` because of `reason`. An
    /// existing debt keeps its `since`, gains the reason, and becomes a
    /// restart if either is one.
    pub fn owe(
        &self,
        service: &ResourceId,
        action: OwedAction,
        reason: &str,
        at: i64,
    ) -> Result<(), StoreError> {
        let err = || sql(self.path, "cannot record owed reload");
        let key = service.to_string();
        let existing: Option<(String, String)> = {
            use rusqlite::OptionalExtension as _;
            self.tx
                .query_row(
                    "SELECT action, reasons FROM owed WHERE service = ?1",
                    [&key],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(err())?
        };
        let (action, reasons) = match existing {
            None => (action, vec![reason.to_owned()]),
            Some((old_action, old_reasons)) => {
                let old_action = OwedAction::parse(&old_action)
                    .ok_or_else(|| malformed(self.path, "owed action", &old_action))?;
                let mut reasons: Vec<String> = serde_json::from_str(&old_reasons)
                    .map_err(|e| malformed(self.path, "owed reasons", e))?;
                if !reasons.iter().any(|r| r == reason) {
                    reasons.push(reason.to_owned());
                }
                let excess = reasons.len().saturating_sub(MAX_REASONS);
                reasons.drain(..excess);
                (old_action.max(action), reasons)
            }
        };
        let reasons =
            serde_json::to_string(&reasons).map_err(|e| malformed(self.path, "owed reasons", e))?;
        self.tx
            .execute(
                "INSERT INTO owed (service, kind, name, action, reasons, since) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                 ON CONFLICT (service) DO UPDATE SET action = excluded.action, \
                 reasons = excluded.reasons",
                params![
                    key,
                    service.kind,
                    service.name,
                    action.as_str(),
                    reasons,
                    at
                ],
            )
            .map(drop)
            .map_err(err())
    }

    /// [`Batch::owe`] with [`OwedAction::Reload`].
    pub fn owe_reload(
        &self,
        service: &ResourceId,
        reason: &str,
        at: i64,
    ) -> Result<(), StoreError> {
        self.owe(service, OwedAction::Reload, reason, at)
    }

    /// The debt of `service` was paid (or the service left the catalogue).
    /// Returns whether there was one.
    pub fn clear_reload(&self, service: &ResourceId) -> Result<bool, StoreError> {
        self.tx
            .execute("DELETE FROM owed WHERE service = ?1", [service.to_string()])
            .map(|n| n > 0)
            .map_err(sql(self.path, "cannot clear owed reload"))
    }
}

impl Store {
    /// Every outstanding debt, oldest first.
    pub fn owed_reloads(&self) -> Result<Vec<OwedReload>, StoreError> {
        let rows: Vec<(String, String, String, String, i64)> = self
            .conn
            .prepare_cached(
                "SELECT kind, name, action, reasons, since FROM owed ORDER BY since, service",
            )
            .and_then(|mut stmt| {
                stmt.query_map([], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })?
                .collect()
            })
            .map_err(sql(&self.path, "cannot read owed reloads"))?;
        rows.into_iter()
            .map(|(kind, name, action, reasons, since)| {
                self.owed_row(ResourceId::new(kind, name), &action, &reasons, since)
            })
            .collect()
    }

    /// The outstanding debt of `service`, if it has one: what
    /// [`Store::owed_reloads`] holds for it, one row read (a pass asks
    /// about each service it activates, and reading every debt each time
    /// made a pass over S services read S x S rows).
    pub fn owed_reload(&self, service: &ResourceId) -> Result<Option<OwedReload>, StoreError> {
        use rusqlite::OptionalExtension as _;
        let row: Option<(String, String, i64)> = self
            .conn
            .prepare_cached("SELECT action, reasons, since FROM owed WHERE service = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([service.to_string()], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()
            })
            .map_err(sql(&self.path, "cannot read owed reloads"))?;
        row.map(|(action, reasons, since)| self.owed_row(service.clone(), &action, &reasons, since))
            .transpose()
    }

    fn owed_row(
        &self,
        service: ResourceId,
        action: &str,
        reasons: &str,
        since: i64,
    ) -> Result<OwedReload, StoreError> {
        Ok(OwedReload {
            service,
            action: OwedAction::parse(action)
                .ok_or_else(|| malformed(&self.path, "owed action", action))?,
            reasons: serde_json::from_str(reasons)
                .map_err(|e| malformed(&self.path, "owed reasons", e))?,
            since,
        })
    }

    /// See [`Batch::owe`]; one transaction.
    pub fn owe(
        &mut self,
        service: &ResourceId,
        action: OwedAction,
        reason: &str,
        at: i64,
    ) -> Result<(), StoreError> {
        self.write(|b| b.owe(service, action, reason, at))
    }

    /// See [`Batch::owe_reload`]; one transaction.
    pub fn owe_reload(
        &mut self,
        service: &ResourceId,
        reason: &str,
        at: i64,
    ) -> Result<(), StoreError> {
        self.write(|b| b.owe_reload(service, reason, at))
    }

    /// See [`Batch::clear_reload`]; one transaction.
    pub fn clear_reload(&mut self, service: &ResourceId) -> Result<bool, StoreError> {
        self.write(|b| b.clear_reload(service))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debts_merge_reasons_keep_since_and_escalate_to_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        let nginx = ResourceId::new("Service", "nginx");
        store.owe_reload(&nginx, "File[site] changed", 10).unwrap();
        store
            .owe(&nginx, OwedAction::Restart, "File[unit] changed", 20)
            .unwrap();
        store.owe_reload(&nginx, "File[site] changed", 30).unwrap();
        let owed = store.owed_reloads().unwrap();
        assert_eq!(owed.len(), 1);
        assert_eq!(owed[0].action, OwedAction::Restart);
        assert_eq!(owed[0].since, 10);
        assert_eq!(
            owed[0].reasons,
            ["File[site] changed", "File[unit] changed"]
        );
        assert_eq!(store.owed_reload(&nginx).unwrap().as_ref(), owed.first());
        assert_eq!(
            store
                .owed_reload(&ResourceId::new("Service", "other"))
                .unwrap(),
            None
        );
        assert!(store.clear_reload(&nginx).unwrap());
        assert!(store.owed_reloads().unwrap().is_empty());
        assert_eq!(store.owed_reload(&nginx).unwrap(), None);
    }

    #[test]
    fn reasons_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        let svc = ResourceId::new("Service", "x");
        for i in 0..(MAX_REASONS + 5) {
            store.owe_reload(&svc, &format!("r{i}"), 1).unwrap();
        }
        let owed = store.owed_reloads().unwrap();
        assert_eq!(owed[0].reasons.len(), MAX_REASONS);
        assert_eq!(
            owed[0].reasons.last().unwrap(),
            &format!("r{}", MAX_REASONS + 4)
        );
    }
}
