//! Repository revisions deployed by `datum pull` (issue 16).
//!
//! One row per switch of the deployed repository: which commit, which one it
//! replaced, where it came from, who signed it, and whether a person allowed
//! it to go backwards (`--allow-rollback`). The newest row is what "never
//! backwards" compares a new revision with. Refused pulls change nothing on
//! the host, so they leave no row either.
//!
//! Identities only: a commit id, a ref name, a source with any credentials
//! already removed by the caller, a signer's principal and key fingerprint.

use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::{Batch, Store, sql};
use crate::error::StoreError;

/// One deployment, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployment {
    /// Unix seconds of the switch.
    pub deployed_at: i64,
    /// The commit now deployed (40 hex digits).
    pub revision: String,
    /// The commit it replaced, when one was deployed.
    pub previous: Option<String>,
    /// The branch or tag it was pulled from.
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// The remote (without credentials) or `bundle:FILE`.
    pub source: String,
    /// The signer's principal from `allowed_signers` (or OpenPGP user id).
    pub signer: String,
    /// The signing key's fingerprint.
    pub key: String,
    /// Whether it replaced a revision it does not descend from, allowed by a
    /// person with `--allow-rollback`.
    pub rollback: bool,
    /// Who allowed the rollback (user name and uid), when one was allowed.
    pub allowed_by: Option<String>,
    /// The link the switch made (`deploy`, a host path such as
    /// `/etc/datum/repository`); `None` when not recorded (deployments
    /// recorded before schema version 11).
    #[serde(default)]
    pub link: Option<String>,
}

/// A recorded deployment and its row id (newest has the highest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredDeployment {
    pub id: i64,
    #[serde(flatten)]
    pub deployment: Deployment,
}

/// How many deployments are kept; older rows are deleted.
pub const DEPLOYMENTS_KEPT: i64 = 1000;

impl Batch<'_> {
    /// Records a switch; returns its id.
    pub fn record_deployment(&self, d: &Deployment) -> Result<i64, StoreError> {
        let err = || sql(self.path, "cannot record the deployment");
        self.tx
            .execute(
                "INSERT INTO deployments (deployed_at, revision, previous, git_ref, source, \
                 signer, key, rollback, allowed_by, link) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    d.deployed_at,
                    d.revision,
                    d.previous,
                    d.git_ref,
                    d.source,
                    d.signer,
                    d.key,
                    d.rollback,
                    d.allowed_by,
                    d.link
                ],
            )
            .map_err(err())?;
        let id = self.tx.last_insert_rowid();
        self.tx
            .execute(
                "DELETE FROM deployments WHERE id <= ?1",
                [id - DEPLOYMENTS_KEPT],
            )
            .map_err(err())?;
        Ok(id)
    }
}

impl Store {
    /// Records a switch in its own transaction; returns its id.
    pub fn record_deployment(&mut self, d: &Deployment) -> Result<i64, StoreError> {
        self.write(|b| b.record_deployment(d))
    }

    /// The newest deployment: what is deployed, as far as the store knows.
    pub fn current_deployment(&self) -> Result<Option<StoredDeployment>, StoreError> {
        Ok(self.deployments(1)?.into_iter().next())
    }

    /// The newest `limit` deployments, newest first.
    pub fn deployments(&self, limit: usize) -> Result<Vec<StoredDeployment>, StoreError> {
        let err = || sql(&self.path, "cannot read the deployments");
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, deployed_at, revision, previous, git_ref, source, signer, key, \
                 rollback, allowed_by, link FROM deployments ORDER BY id DESC LIMIT ?1",
            )
            .map_err(err())?;
        let rows = stmt
            .query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                Ok(StoredDeployment {
                    id: r.get(0)?,
                    deployment: Deployment {
                        deployed_at: r.get(1)?,
                        revision: r.get(2)?,
                        previous: r.get(3)?,
                        git_ref: r.get(4)?,
                        source: r.get(5)?,
                        signer: r.get(6)?,
                        key: r.get(7)?,
                        rollback: r.get(8)?,
                        allowed_by: r.get(9)?,
                        link: r.get(10)?,
                    },
                })
            })
            .map_err(err())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(revision: &str, previous: Option<&str>, rollback: bool) -> Deployment {
        Deployment {
            deployed_at: 1_764_000_000,
            revision: revision.to_owned(),
            previous: previous.map(str::to_owned),
            git_ref: "main".to_owned(),
            source: "https://git.example.com/infra.git".to_owned(),
            signer: "alice@example.com".to_owned(),
            key: "SHA256:abc".to_owned(),
            rollback,
            allowed_by: rollback.then(|| "alice (uid 1000)".to_owned()),
            link: Some("/etc/datum/repository".to_owned()),
        }
    }

    #[test]
    fn the_newest_deployment_is_current_and_rollbacks_are_kept_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("state.db")).unwrap();
        assert_eq!(store.current_deployment().unwrap(), None);
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        store
            .record_deployment(&deployment(&a, None, false))
            .unwrap();
        store
            .record_deployment(&deployment(&b, Some(&a), false))
            .unwrap();
        store
            .record_deployment(&deployment(&a, Some(&b), true))
            .unwrap();
        let current = store.current_deployment().unwrap().unwrap();
        assert_eq!(current.deployment, deployment(&a, Some(&b), true));
        let all = store.deployments(10).unwrap();
        assert_eq!(all.len(), 3);
        assert!(all[0].id > all[1].id && all[1].id > all[2].id);
        assert_eq!(all[1].deployment.revision, b);

        // Survives reopening.
        drop(store);
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        assert!(
            store
                .current_deployment()
                .unwrap()
                .unwrap()
                .deployment
                .rollback
        );
    }
}
