//! The reads only the pages need, over any [`Backend`]: one host's recent
//! reports (whole, for its diffs, apply outcomes and quarantines), its open
//! findings and its revisions; the revisions applied across the fleet; one
//! failure's captured output; how many checks saw each drift cluster.
//!
//! Everything fleet-wide that the API also shows comes from the query
//! layer ([`crate::fleet`]) instead, so the two front ends cannot disagree.
//!
//! Owns: these statements. Must not: write.

use std::collections::HashMap;

use datum_fleet::Report;

use crate::fleet::{Fleet, int, json, text, u};
use crate::store::{Backend, Stmt, StoreError, values_rows};
use crate::views::HostRow;

/// Every host and stack with only what the lists show (state, labels, age,
/// revision, counts): the overview and the hosts table read this instead
/// of whole rows, so 10,000 hosts cost one narrow scan and one small JSON
/// decode (the labels) each.
pub async fn list_rows<B: Backend>(fleet: &Fleet<B>) -> Result<Vec<HostRow>, StoreError> {
    narrow_rows(
        fleet,
        "SELECT name, kind, enrolled_at, labels, last_report_at, revision, open_findings, \
         quarantined, last_apply_failed, check_errors, expected_interval_s, trees_differing, \
         reports_held FROM hosts",
    )
    .await
}

/// Every host and stack with only what its state and staleness need (no
/// labels, revision or held reports: the overview counts states and lists
/// the stale by name).
pub async fn state_rows<B: Backend>(fleet: &Fleet<B>) -> Result<Vec<HostRow>, StoreError> {
    narrow_rows(
        fleet,
        "SELECT name, kind, enrolled_at, CAST(NULL AS TEXT), last_report_at, CAST(NULL AS TEXT), \
         open_findings, quarantined, last_apply_failed, check_errors, expected_interval_s, \
         trees_differing, CAST(0 AS BIGINT) FROM hosts",
    )
    .await
}

/// The rows of `sql`, whose columns are those of [`list_rows`].
async fn narrow_rows<B: Backend>(
    fleet: &Fleet<B>,
    sql: &'static str,
) -> Result<Vec<HostRow>, StoreError> {
    Ok(fleet
        .backend()
        .rows(Stmt::new(sql, vec![]))
        .await?
        .into_iter()
        .map(|mut r| {
            let mut take = |i: usize| match r.get_mut(i) {
                Some(crate::store::Val::Text(t)) => Some(std::mem::take(t)),
                _ => None,
            };
            let (name, kind, revision) = (take(0), take(1), take(5));
            HostRow {
                name: name.unwrap_or_default(),
                kind: kind.unwrap_or_default(),
                revision,
                enrolled_at: int(&r, 2).unwrap_or(0),
                labels: json(&r, 3),
                last_report_at: int(&r, 4),
                open_findings: u(int(&r, 6)),
                quarantined: u(int(&r, 7)),
                last_apply_failed: int(&r, 8).unwrap_or(0) != 0,
                check_errors: int(&r, 9).unwrap_or(0) != 0,
                expected_interval_s: u(int(&r, 10)),
                trees_differing: u(int(&r, 11)),
                reports_held: u(int(&r, 12)),
                ..HostRow::default()
            }
        })
        .collect())
}

/// One stored report of a host, parsed.
#[derive(Debug, Clone)]
pub struct StoredReport {
    pub received_at: i64,
    pub report: Report,
}

/// The newest `limit` reports of `host`, newest first (a body that no
/// longer parses is skipped).
pub async fn reports<B: Backend>(
    fleet: &Fleet<B>,
    host: &str,
    limit: i64,
) -> Result<Vec<StoredReport>, StoreError> {
    Ok(fleet
        .backend()
        .rows(Stmt::new(
            "SELECT body, received_at FROM reports WHERE host = $1 ORDER BY id DESC LIMIT $2",
            vec![host.into(), limit.into()],
        ))
        .await?
        .iter()
        .filter_map(|r| {
            Some(StoredReport {
                report: serde_json::from_str(&text(r, 0)?).ok()?,
                received_at: int(r, 1).unwrap_or(0),
            })
        })
        .collect())
}

/// The newest apply report of `host`.
pub async fn last_apply<B: Backend>(
    fleet: &Fleet<B>,
    host: &str,
) -> Result<Option<StoredReport>, StoreError> {
    Ok(fleet
        .backend()
        .rows(Stmt::new(
            "SELECT body, received_at FROM reports WHERE host = $1 AND kind = 'apply' \
             ORDER BY id DESC LIMIT 1",
            vec![host.into()],
        ))
        .await?
        .first()
        .and_then(|r| {
            Some(StoredReport {
                report: serde_json::from_str(&text(r, 0)?).ok()?,
                received_at: int(r, 1).unwrap_or(0),
            })
        }))
}

/// One open finding of a host.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OpenFinding {
    pub signature: String,
    pub subject: String,
    pub category: String,
    pub class: String,
    pub paths: Vec<String>,
    pub observed: Option<String>,
    pub first_seen: i64,
    pub last_seen: i64,
    pub checks: u64,
}

/// The open findings of `host`, by subject (in byte order, as SQLite and
/// the views sort; PostgreSQL's own order is the database's collation).
pub async fn findings<B: Backend>(
    fleet: &Fleet<B>,
    host: &str,
) -> Result<Vec<OpenFinding>, StoreError> {
    Ok(fleet
        .backend()
        .rows(Stmt::new(
            "SELECT signature, subject, category, class, paths, observed, first_seen, last_seen, checks \
             FROM findings WHERE host = $1 \
             ORDER BY subject COLLATE \"C\", category COLLATE \"C\", signature COLLATE \"C\"",
            vec![host.into()],
        ))
        .await?
        .iter()
        .map(|r| OpenFinding {
            signature: text(r, 0).unwrap_or_default(),
            subject: text(r, 1).unwrap_or_default(),
            category: text(r, 2).unwrap_or_default(),
            class: text(r, 3).unwrap_or_default(),
            paths: json(r, 4),
            observed: text(r, 5),
            first_seen: int(r, 6).unwrap_or(0),
            last_seen: int(r, 7).unwrap_or(0),
            checks: u(int(r, 8)),
        })
        .collect())
}

/// How one host's apply of one revision ended.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HostRevision {
    pub revision: String,
    pub first_at: i64,
    pub last_at: i64,
    pub outcome: String,
    pub changed: u64,
    pub failed: u64,
}

/// The revisions `host` applied, newest first (equal times in byte order).
pub async fn host_revisions<B: Backend>(
    fleet: &Fleet<B>,
    host: &str,
    limit: i64,
) -> Result<Vec<HostRevision>, StoreError> {
    Ok(fleet
        .backend()
        .rows(Stmt::new(
            "SELECT revision, first_at, last_at, outcome, changed, failed FROM host_revisions \
             WHERE host = $1 ORDER BY last_at DESC, revision COLLATE \"C\" LIMIT $2",
            vec![host.into(), limit.into()],
        ))
        .await?
        .iter()
        .map(|r| HostRevision {
            revision: text(r, 0).unwrap_or_default(),
            first_at: int(r, 1).unwrap_or(0),
            last_at: int(r, 2).unwrap_or(0),
            outcome: text(r, 3).unwrap_or_default(),
            changed: u(int(r, 4)),
            failed: u(int(r, 5)),
        })
        .collect())
}

/// A revision as applied across the fleet.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FleetRevision {
    pub revision: String,
    pub last_at: i64,
    pub hosts: u64,
    pub failed: u64,
}

/// The revisions applied most recently anywhere, newest first (equal
/// times in byte order), with how many hosts hold each and how many of
/// them failed it: what grouping the whole of `host_revisions` gives
/// (which every page load did: 0.39 s at 10,000 hosts of 30 revisions
/// each on SQLite), read instead from the fleet's
/// records of its revisions, newest first, counting only those revisions'
/// hosts, from the `host_revisions_rollout` index alone.
///
/// A record's `last_at` is the last apply of its revision ever stored,
/// which is never before the last one its hosts still hold (a host removed
/// or whose retention let the revision go may have applied it last), so
/// the records are read in pages until no revision not read yet can come
/// before the `limit`th found.
pub async fn revisions<B: Backend>(
    fleet: &Fleet<B>,
    limit: i64,
) -> Result<Vec<FleetRevision>, StoreError> {
    let Ok(wanted) = usize::try_from(limit) else {
        return Ok(Vec::new());
    };
    if wanted == 0 {
        return Ok(Vec::new());
    }
    let key = |r: &FleetRevision| (std::cmp::Reverse(r.last_at), r.revision.clone());
    let mut found: Vec<FleetRevision> = Vec::new();
    let mut offset: i64 = 0;
    let mut page: i64 = limit.saturating_add(1).min(REVISIONS_PAGE);
    loop {
        let records = fleet
            .backend()
            .rows(Stmt::new(
                "SELECT revision, last_at FROM revisions \
                 ORDER BY last_at DESC, revision COLLATE \"C\" LIMIT $1 OFFSET $2",
                vec![page.into(), offset.into()],
            ))
            .await?;
        let names: Vec<String> = records.iter().filter_map(|r| text(r, 0)).collect();
        if !names.is_empty() {
            let params = names.iter().map(|n| n.as_str().into()).collect();
            let counted = fleet
                .backend()
                .rows(Stmt::built(
                    format!(
                        "SELECT revision, max(last_at), count(*), \
                         sum(CASE WHEN outcome = 'failed' THEN 1 ELSE 0 END) FROM host_revisions \
                         WHERE revision IN {} GROUP BY revision",
                        values_rows(1, names.len(), 1)
                    ),
                    params,
                ))
                .await?;
            found.extend(counted.iter().map(|r| FleetRevision {
                revision: text(r, 0).unwrap_or_default(),
                last_at: int(r, 1).unwrap_or(0),
                hosts: u(int(r, 2)),
                failed: u(int(r, 3)),
            }));
            found.sort_by_key(key);
            found.truncate(wanted);
        }
        // The last record read bounds every one after it: its time or
        // earlier, or the same time and a name after it.
        let last = records.last().and_then(|r| Some((int(r, 1)?, text(r, 0)?)));
        let (Some((bound, name)), true) = (last, records.len() as i64 == page) else {
            return Ok(found);
        };
        if found.len() == wanted
            && found
                .last()
                .is_some_and(|k| k.last_at > bound || (k.last_at == bound && k.revision <= name))
        {
            return Ok(found);
        }
        offset = offset.saturating_add(page);
        page = page.saturating_mul(2).min(REVISIONS_PAGE);
    }
}

/// Records of revisions read at most at once by [`revisions`].
const REVISIONS_PAGE: i64 = 512;

/// One failure of one host's apply of one revision, with the validator's
/// captured output (as the host sent it: bounded, and never a sensitive
/// resource's).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FailureDetail {
    pub host: String,
    pub revision: String,
    pub resource: String,
    pub phase: String,
    pub validator: Option<String>,
    pub validator_version: Option<String>,
    pub exit_status: Option<i64>,
    pub signature: String,
    pub message: String,
    pub at: i64,
}

const FAILURE_COLUMNS: &str = "SELECT host, revision, resource, phase, validator, validator_version, \
     exit_status, signature, message, at FROM failures";

fn failure_row(r: &crate::store::Row) -> FailureDetail {
    FailureDetail {
        host: text(r, 0).unwrap_or_default(),
        revision: text(r, 1).unwrap_or_default(),
        resource: text(r, 2).unwrap_or_default(),
        phase: text(r, 3).unwrap_or_default(),
        validator: text(r, 4),
        validator_version: text(r, 5),
        exit_status: int(r, 6),
        signature: text(r, 7).unwrap_or_default(),
        message: text(r, 8).unwrap_or_default(),
        at: int(r, 9).unwrap_or(0),
    }
}

/// The failure of `resource` in `host`'s last apply of `revision`.
pub async fn failure<B: Backend>(
    fleet: &Fleet<B>,
    host: &str,
    revision: &str,
    resource: &str,
) -> Result<Option<FailureDetail>, StoreError> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("{FAILURE_COLUMNS} WHERE host = $1 AND revision = $2 AND resource = $3")
    });
    Ok(fleet
        .backend()
        .rows(Stmt::new(
            SQL.as_str(),
            vec![host.into(), revision.into(), resource.into()],
        ))
        .await?
        .first()
        .map(failure_row))
}

/// Per drift cluster (signature, observed hash): the most consecutive
/// checks any of its hosts saw it in (kept at ingest).
pub async fn cluster_checks<B: Backend>(
    fleet: &Fleet<B>,
) -> Result<HashMap<(String, Option<String>), u64>, StoreError> {
    Ok(fleet
        .backend()
        .rows(Stmt::new(
            "SELECT signature, observed, checks FROM drift_clusters WHERE hosts > 0",
            vec![],
        ))
        .await?
        .iter()
        .map(|r| {
            (
                (
                    text(r, 0).unwrap_or_default(),
                    text(r, 1).filter(|o| !o.is_empty()),
                ),
                u(int(r, 2)),
            )
        })
        .collect())
}

/// The classes hosts state, each distinct list once (most hosts share a
/// few), decoded: what the drift page needs for the policy of a class
/// without reading every host's row.
pub async fn class_lists<B: Backend>(
    fleet: &Fleet<B>,
) -> Result<Vec<Vec<datum_fleet::ClassBound>>, StoreError> {
    Ok(fleet
        .backend()
        .rows(Stmt::new(
            "SELECT DISTINCT classes FROM hosts WHERE classes IS NOT NULL",
            vec![],
        ))
        .await?
        .iter()
        .map(|r| json(r, 0))
        .collect())
}
