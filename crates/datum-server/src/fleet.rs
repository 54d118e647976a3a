//! The query layer: what the fleet stores and reads, over any [`Backend`].
//!
//! Every read statement lives here, written once for both databases (the
//! ingest statements are in [`crate::ingest`]). The JSON API (`api`) and a
//! server-rendered web view call these methods and render what they
//! return; neither writes SQL.
//!
//! Each view reads the current state ingest keeps, not the history: at
//! 10,000 hosts a view must not decode 10,000 hosts' reports.
//! - `hosts`: one narrow row per host with its picture pre-rendered as JSON
//!   ([`Fleet::hosts_json`] writes the document without decoding it);
//! - `stale`: the hosts past their allowance, filtered in SQL;
//! - `rollout`: the revision's own outcome rows (with the labels each host
//!   had when it applied it), the hosts without one, and its failures; the
//!   latest revision is one index lookup (`revisions`);
//! - `drift`: one row per cluster (`drift_clusters`, counted at ingest)
//!   and the first hosts of each from the `(signature, observed, host)`
//!   index.
//!
//! Ingest ([`Fleet::ingest`]): a report's idempotency key decides whether
//! it writes anything (a retried delivery is harmless); reports arriving
//! together share a transaction (group commit), each answered after its
//! commit.
//!
//! Owns: [`Fleet`] and the read SQL. Must not: authenticate (the API does)
//! or format anything for a person.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;

use datum_fleet::Report;

use crate::cache::{self, ViewCache};
use crate::ingest::{GroupCommit, Submitted};
use crate::store::{Backend, Row, Stmt, StoreError, Val};
use crate::views::{
    self, Applied, ClusterRow, FailureRow, HostListing, HostRow, PendingHost, Staleness,
};

/// Who a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    /// `host`, `stack` or `admin`.
    pub kind: String,
}

/// What the delivering host said about its outbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboxHeaders {
    pub depth: u64,
    pub dropped: u64,
    /// The state store the report was made in (`Datum-Store-Id`), when
    /// the host says: a report of another store than the host's last one
    /// is never late by its number (see `ingest::late::is_late`).
    pub store: Option<u128>,
}

/// The fleet over one database.
#[derive(Debug, Clone)]
pub struct Fleet<B> {
    backend: B,
    /// Reports waiting to be written (shared by every clone).
    commit: Arc<GroupCommit>,
    /// Answers kept while the store's generation is unchanged.
    cache: Arc<ViewCache>,
}

fn shape(backend: &'static str, what: &str) -> StoreError {
    StoreError::Shape {
        backend,
        detail: what.to_owned(),
    }
}

/// Column `i` of `row` as an integer (NULL: `None`).
pub(crate) fn int(row: &Row, i: usize) -> Option<i64> {
    row.get(i).and_then(Val::int)
}

pub(crate) fn text(row: &Row, i: usize) -> Option<String> {
    row.get(i).and_then(Val::text).map(str::to_owned)
}

pub(crate) fn json<T: serde::de::DeserializeOwned + Default>(row: &Row, i: usize) -> T {
    row.get(i)
        .and_then(Val::text)
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

pub(crate) fn u(v: Option<i64>) -> u64 {
    v.and_then(|v| u64::try_from(v).ok()).unwrap_or(0)
}

/// The drift clusters kept at ingest that have hosts.
const CLUSTERS: &str = "SELECT signature, observed, hosts, subject, category, class, paths, first_seen, \
     last_seen FROM drift_clusters WHERE hosts > 0";

/// The first hosts of one cluster in byte order (the overview's sample):
/// `$1` signature, `$2` observed, `$3` how many. The cluster index holds
/// its hosts in byte order too, so this reads those few rows from it
/// rather than sorting every host of the cluster.
pub const SAMPLE_HOSTS_OF_A_CLUSTER: &str = "SELECT host FROM findings WHERE signature = $1 AND observed = $2 \
     ORDER BY host COLLATE \"C\" LIMIT $3";

/// The first hosts of every cluster in byte order (the drift view's
/// samples): `$1` how many. Read in the cluster index's order.
pub const SAMPLE_HOSTS_OF_EVERY_CLUSTER: &str = "SELECT signature, observed, host FROM (SELECT signature, observed, host, \
     row_number() OVER (PARTITION BY signature, observed ORDER BY host COLLATE \"C\") AS n \
     FROM findings) AS ranked WHERE n <= $1";

/// Hosts that reported, and how many of them have open findings.
const DRIFT_COUNTS: &str = "SELECT count(*), CAST(coalesce(sum(CASE WHEN open_findings > 0 THEN 1 ELSE 0 END), 0) \
     AS BIGINT) FROM hosts WHERE last_report_at IS NOT NULL";

/// A row of [`CLUSTERS`].
fn cluster_of(r: &Row, now: i64) -> ClusterRow {
    ClusterRow {
        signature: text(r, 0).unwrap_or_default(),
        observed: text(r, 1).filter(|o| !o.is_empty()),
        hosts: u(int(r, 2)),
        subject: text(r, 3).unwrap_or_default(),
        category: text(r, 4).unwrap_or_default(),
        class: text(r, 5).unwrap_or_default(),
        paths: json(r, 6),
        first_seen: int(r, 7).unwrap_or(now),
        last_seen: int(r, 8).unwrap_or(now),
    }
}

/// A failure row: host, resource, phase, validator, validator_version,
/// exit_status, signature, message.
fn failure_of(r: &Row) -> FailureRow {
    FailureRow {
        host: text(r, 0).unwrap_or_default(),
        resource: text(r, 1).unwrap_or_default(),
        phase: text(r, 2).unwrap_or_default(),
        validator: text(r, 3),
        validator_version: text(r, 4),
        exit_status: int(r, 5),
        signature: text(r, 6).unwrap_or_default(),
        message: text(r, 7).unwrap_or_default(),
    }
}

pub(crate) const HOST_COLUMNS: &str = "SELECT name, kind, enrolled_at, labels, last_report_at, last_report_kind, \
     revision, datum_version, counts, resources, open_findings, quarantined, last_apply_at, \
     last_apply_revision, last_apply_failed, check_errors, expected_interval_s, outbox_depth, \
     outbox_dropped, classes, trees, trees_differing, reports_held, last_deep_round FROM hosts";

pub(crate) fn host_row(r: &Row) -> HostRow {
    HostRow {
        name: text(r, 0).unwrap_or_default(),
        kind: text(r, 1).unwrap_or_default(),
        enrolled_at: int(r, 2).unwrap_or(0),
        labels: json(r, 3),
        last_report_at: int(r, 4),
        last_report_kind: text(r, 5),
        revision: text(r, 6),
        datum_version: text(r, 7),
        counts: json(r, 8),
        resources: u(int(r, 9)),
        open_findings: u(int(r, 10)),
        quarantined: u(int(r, 11)),
        last_apply_at: int(r, 12),
        last_apply_revision: text(r, 13),
        last_apply_failed: int(r, 14).unwrap_or(0) != 0,
        check_errors: int(r, 15).unwrap_or(0) != 0,
        expected_interval_s: u(int(r, 16)),
        outbox_depth: u(int(r, 17)),
        outbox_dropped: u(int(r, 18)),
        classes: json(r, 19),
        trees: u(int(r, 20)),
        trees_differing: u(int(r, 21)),
        reports_held: u(int(r, 22)),
        last_deep_round: int(r, 23).and_then(|v| u64::try_from(v).ok()),
    }
}

/// What a revision given by a person names (`Fleet::revision_named`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevisionName {
    /// A revision some host applied: the given one, or the one it begins.
    One(String),
    /// Several applied revisions begin with it (at most six, the shortest
    /// first, then in byte order).
    Several(Vec<String>),
    /// No host applied a revision beginning with it.
    None,
}

impl RevisionName {
    /// The revision whose rollout to show for `wanted`: the applied one it
    /// names, or `wanted` itself when no host applied one; several are
    /// refused, naming them.
    pub fn pick(self, wanted: &str) -> Result<String, String> {
        match self {
            RevisionName::One(revision) => Ok(revision),
            RevisionName::None => Ok(wanted.to_owned()),
            RevisionName::Several(all) => Err(format!(
                "`{wanted}` begins more than one revision hosts applied ({}{}): give more of it",
                all.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                if all.len() > 5 { ", ..." } else { "" }
            )),
        }
    }
}

/// One report as the history lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReportSummary {
    pub seq: u64,
    pub kind: String,
    pub received_at: String,
    pub finished_at: String,
    pub revision: String,
    pub exit_code: i64,
    pub counts: BTreeMap<String, u64>,
    pub findings: u64,
    pub failures: u64,
    /// An apply that trusted metadata: how many unchanged resources it did
    /// not read (see `datum_fleet::Report::trusted_by_metadata`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_by_metadata: Option<u64>,
    /// What the pass warned of although it went on (see
    /// `datum_fleet::Report::warnings`); absent when nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `GET /v1/hosts/{name}/reports`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HistoryView {
    pub format_version: String,
    pub name: String,
    pub reports: Vec<ReportSummary>,
    /// Per day (`YYYY-MM-DD`): reports, applies, failed reports, most
    /// findings seen.
    pub daily: Vec<DailyRow>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DailyRow {
    pub day: String,
    pub reports: u64,
    pub applies: u64,
    pub failed: u64,
    pub max_findings: u64,
}

impl<B: Backend> Fleet<B> {
    pub fn new(backend: B) -> Self {
        Fleet {
            backend,
            commit: Arc::default(),
            cache: Arc::default(),
        }
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// How this process's ingest batched so far.
    pub fn ingest_stats(&self) -> crate::ingest::IngestStats {
        self.commit.stats()
    }

    /// Records a token (only its hash) for `name`. A host enrolled again
    /// gets the new token and loses the old one.
    pub async fn enroll(
        &self,
        name: &str,
        kind: &str,
        token_hash: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        // A host or stack enrolled again loses its old token, whichever
        // kind it had (one name is one row of `hosts`): a host's token must
        // not outlive the name's enrolment as a stack, nor the other way.
        let forget = if kind == "admin" {
            Stmt::new(
                "DELETE FROM identities WHERE name = $1 AND kind = $2",
                vec![name.into(), kind.into()],
            )
        } else {
            Stmt::new(
                "DELETE FROM identities WHERE name = $1 AND kind <> 'admin'",
                vec![name.into()],
            )
        };
        let mut stmts = vec![
            forget,
            Stmt::new(
                "INSERT INTO identities (token_hash, name, kind, created_at) VALUES ($1, $2, $3, $4)",
                vec![token_hash.into(), name.into(), kind.into(), now.into()],
            ),
        ];
        if kind != "admin" {
            stmts.push(Stmt::new(
                "INSERT INTO hosts (name, kind, enrolled_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO UPDATE SET kind = excluded.kind",
                vec![name.into(), kind.into(), now.into()],
            ));
            stmts.push(cache::bump());
        }
        self.backend.execute(stmts).await
    }

    /// Takes host or stack `name` out of the fleet (decommissioned, or
    /// renamed and enrolled under its new name): its token ends (within
    /// the token cache's 30 s on other servers), and what it reported goes
    /// (its row, reports, findings, with the drift clusters they were
    /// counted in, its revisions' outcomes and failures, daily aggregates,
    /// deep checks, and the record of a revision no other host holds).
    /// Instructions asked of it stay in the audit log; those it never
    /// confirmed are closed as `host removed`. One transaction; `false`
    /// when no host or stack has that name.
    pub async fn remove(&self, name: &str, now: i64) -> Result<bool, StoreError> {
        if self.host(name).await?.is_none() {
            return Ok(false);
        }
        let host = || -> Vec<Val> { vec![name.into()] };
        let stmts = vec![
            // The host's row first, as ingest locks it: a report of this
            // host another server is storing commits before anything below
            // reads, so its findings, its report and its cluster counts go
            // too (else each statement, reading what was committed when it
            // began, missed them, and they outlived the host).
            Stmt::new("UPDATE hosts SET kind = kind WHERE name = $1", host()),
            // Its revisions' records locked before the `DELETE` below reads
            // who else holds them, as ingest's revision retention does; in
            // key order, as ingest locks them (an `UPDATE` took them in its
            // plan's order, and deadlocked with an apply of a host holding
            // two of them); and before its clusters, as a batch takes its
            // revisions before its clusters (taken after them, a batch with
            // an apply of one and a check joining one deadlocked): an
            // upsert of each as it is, sorted.
            Stmt::new(
                "INSERT INTO revisions (revision, first_at, last_at) \
                 SELECT revision, first_at, last_at FROM revisions WHERE revision IN \
                 (SELECT revision FROM host_revisions WHERE host = $1) \
                 ORDER BY revision COLLATE \"C\" \
                 ON CONFLICT (revision) DO UPDATE SET last_at = revisions.last_at",
                host(),
            ),
            // Then its clusters, by a statement of their own: a
            // server storing a report of another host joining one holds its
            // row until it commits, and the `UPDATE` below, a statement
            // begun after that, then sees that host's finding. Locked by
            // that `UPDATE` itself, the class was set after the wait from
            // the findings it had read before (PostgreSQL reads again only
            // the row it waited for): the joining host's class was lost.
            // Locked in key order, as ingest locks them (an `UPDATE` locks
            // rows in the order its plan finds them, on a large store the
            // table's, and deadlocked with a report of a host joining two
            // of them): an upsert of each as it is, sorted, which finds
            // its row there (the host is in it) and locks it in turn.
            Stmt::new(
                "INSERT INTO drift_clusters (signature, observed, hosts, subject, category, \
                 class, paths, first_seen, last_seen, checks) \
                 SELECT signature, observed, hosts, subject, category, class, paths, \
                 first_seen, last_seen, checks FROM drift_clusters c WHERE EXISTS \
                 (SELECT 1 FROM findings f WHERE f.host = $1 AND f.signature = c.signature \
                 AND COALESCE(f.observed, '') = c.observed) \
                 ORDER BY c.signature COLLATE \"C\", c.observed COLLATE \"C\" \
                 ON CONFLICT (signature, observed) DO UPDATE SET hosts = drift_clusters.hosts",
                host(),
            ),
            // Its clusters lose it, and the class it gave them: the first
            // in byte order of the hosts left (as ingest keeps it).
            Stmt::new(
                "UPDATE drift_clusters SET hosts = hosts - 1, class = COALESCE((SELECT \
                 min(o.class COLLATE \"C\") FROM findings o WHERE o.host <> $1 \
                 AND o.signature = drift_clusters.signature \
                 AND COALESCE(o.observed, '') = drift_clusters.observed), class) \
                 WHERE EXISTS (SELECT 1 FROM findings f \
                 WHERE f.host = $1 AND f.signature = drift_clusters.signature \
                 AND COALESCE(f.observed, '') = drift_clusters.observed)",
                host(),
            ),
            Stmt::new("DELETE FROM drift_clusters WHERE hosts <= 0", vec![]),
            Stmt::new(
                "DELETE FROM revisions WHERE revision IN \
                 (SELECT revision FROM host_revisions WHERE host = $1) AND NOT EXISTS \
                 (SELECT 1 FROM host_revisions o WHERE o.revision = revisions.revision AND o.host <> $1)",
                host(),
            ),
            Stmt::new("DELETE FROM findings WHERE host = $1", host()),
            Stmt::new("DELETE FROM failures WHERE host = $1", host()),
            Stmt::new("DELETE FROM host_revisions WHERE host = $1", host()),
            Stmt::new("DELETE FROM reports WHERE host = $1", host()),
            Stmt::new("DELETE FROM daily WHERE host = $1", host()),
            Stmt::new("DELETE FROM deep_checks WHERE host = $1", host()),
            Stmt::new(
                "UPDATE instructions SET done_at = $2, outcome = 'host removed' \
                 WHERE host = $1 AND done_at IS NULL",
                vec![name.into(), now.into()],
            ),
            Stmt::new(
                "DELETE FROM identities WHERE name = $1 AND kind <> 'admin'",
                host(),
            ),
            Stmt::new("DELETE FROM hosts WHERE name = $1", host()),
            cache::bump(),
        ];
        self.backend.execute(stmts).await?;
        Ok(true)
    }

    /// Makes `token_hash` the only admin token: every other one ends at
    /// once (within the token cache's 30 s on a server already running),
    /// and so does every web session, which was opened with one.
    pub async fn replace_admins(&self, token_hash: &str, now: i64) -> Result<(), StoreError> {
        self.backend
            .execute(vec![
                Stmt::new("DELETE FROM sessions", vec![]),
                Stmt::new("DELETE FROM identities WHERE kind = 'admin'", vec![]),
                Stmt::new(
                    "INSERT INTO identities (token_hash, name, kind, created_at) \
                     VALUES ($1, 'admin', 'admin', $2)",
                    vec![token_hash.into(), now.into()],
                ),
            ])
            .await
    }

    /// Adds an admin token (several may exist: one per operator).
    pub async fn add_admin(&self, token_hash: &str, now: i64) -> Result<(), StoreError> {
        self.backend
            .execute(vec![Stmt::new(
                "INSERT INTO identities (token_hash, name, kind, created_at) VALUES ($1, 'admin', 'admin', $2) \
                 ON CONFLICT (token_hash) DO NOTHING",
                vec![token_hash.into(), now.into()],
            )])
            .await
    }

    /// Who holds the token whose hash is `token_hash`.
    pub async fn identity(&self, token_hash: &str) -> Result<Option<Identity>, StoreError> {
        let rows = self
            .backend
            .rows(Stmt::new(
                "SELECT name, kind FROM identities WHERE token_hash = $1",
                vec![token_hash.into()],
            ))
            .await?;
        Ok(rows.first().map(|r| Identity {
            name: text(r, 0).unwrap_or_default(),
            kind: text(r, 1).unwrap_or_default(),
        }))
    }

    /// Stores `report` (already checked to be `who`'s): `Ok(false)` when its
    /// key was stored before (nothing written). Answers once the
    /// transaction holding it committed; reports arriving meanwhile share
    /// that transaction (see [`crate::ingest`]).
    pub async fn ingest(
        &self,
        report: &Report,
        raw: &str,
        received_at: i64,
        outbox: OutboxHeaders,
        reports_kept: u32,
    ) -> Result<bool, StoreError> {
        self.commit
            .submit(
                &self.backend,
                Submitted {
                    report: report.clone(),
                    raw: raw.to_owned(),
                    received_at,
                    outbox,
                    reports_kept,
                },
            )
            .await
    }

    /// Stores `batch` (at most one report per host) in one transaction, as
    /// reports that arrive together are; whether each key was new. For
    /// tests, which cannot time reports to arrive together.
    #[doc(hidden)]
    pub async fn ingest_together(
        &self,
        batch: Vec<crate::ingest::Submitted>,
    ) -> Result<Vec<bool>, StoreError> {
        crate::ingest::store_together(&self.backend, batch).await
    }

    /// Every host and stack, by name in byte order (the order the store
    /// holds its rows in differs between SQLite and PostgreSQL, and the
    /// stacks page lists them so).
    pub async fn host_rows(&self) -> Result<Vec<HostRow>, StoreError> {
        static ALL: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| format!("{HOST_COLUMNS} ORDER BY name COLLATE \"C\""));
        Ok(self
            .backend
            .rows(Stmt::new(ALL.as_str(), vec![]))
            .await?
            .iter()
            .map(host_row)
            .collect())
    }

    /// One host or stack, by name.
    pub async fn host(&self, name: &str) -> Result<Option<HostRow>, StoreError> {
        static ONE: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| format!("{HOST_COLUMNS} WHERE name = $1"));
        Ok(self
            .backend
            .rows(Stmt::new(ONE.as_str(), vec![name.into()]))
            .await?
            .first()
            .map(host_row))
    }

    /// The hosts view (every host, by name).
    pub async fn hosts(&self, staleness: &Staleness) -> Result<views::HostsView, StoreError> {
        let doc = self.hosts_json(staleness).await?;
        serde_json::from_slice(&doc).map_err(|e| shape(self.backend.name(), &e.to_string()))
    }

    /// The store's generation (see [`crate::cache`]): unchanged, nothing a
    /// view shows has changed.
    pub async fn generation(&self) -> Result<i64, StoreError> {
        let rows = self
            .backend
            .rows(Stmt::new(cache::GENERATION, vec![]))
            .await?;
        Ok(rows.first().and_then(|r| int(r, 0)).unwrap_or(0))
    }

    /// The hosts view as its JSON document, written from one narrow row per
    /// host and the picture each report left pre-rendered (nothing stored
    /// is decoded): what `GET /v1/hosts` sends. The rows are kept while the
    /// store's generation is unchanged, the document for one second.
    pub async fn hosts_json(&self, staleness: &Staleness) -> Result<Bytes, StoreError> {
        let generation = self.generation().await?;
        if let Some(doc) = self.cache.hosts_doc(generation, staleness) {
            return Ok(doc);
        }
        let listings = match self.cache.hosts(generation) {
            Some(kept) => kept,
            None => {
                let listings = Arc::new(self.host_listings().await?);
                self.cache.keep_hosts(generation, Arc::clone(&listings));
                listings
            }
        };
        let doc = Bytes::from(views::hosts_document(&listings, staleness));
        self.cache
            .keep_hosts_doc(generation, *staleness, doc.clone());
        Ok(doc)
    }

    /// One narrow row per host with its pre-rendered picture, by name.
    async fn host_listings(&self) -> Result<Vec<HostListing>, StoreError> {
        let rows = self
            .backend
            .rows(Stmt::new(
                "SELECT name, kind, enrolled_at, last_report_at, expected_interval_s, quarantined, \
                 last_apply_failed, check_errors, open_findings, trees_differing, reports_held, \
                 view_json, last_apply_revision FROM hosts",
                vec![],
            ))
            .await?;
        let mut listings: Vec<HostListing> = rows
            .into_iter()
            .map(|mut r| {
                let members = match r.get_mut(11) {
                    Some(Val::Text(t)) => Some(std::mem::take(t)),
                    _ => None,
                };
                let name = match r.get_mut(0) {
                    Some(Val::Text(t)) => std::mem::take(t),
                    _ => String::new(),
                };
                HostListing {
                    row: HostRow {
                        name,
                        kind: text(&r, 1).unwrap_or_default(),
                        enrolled_at: int(&r, 2).unwrap_or(0),
                        last_report_at: int(&r, 3),
                        expected_interval_s: u(int(&r, 4)),
                        quarantined: u(int(&r, 5)),
                        last_apply_failed: int(&r, 6).unwrap_or(0) != 0,
                        check_errors: int(&r, 7).unwrap_or(0) != 0,
                        open_findings: u(int(&r, 8)),
                        trees_differing: u(int(&r, 9)),
                        reports_held: u(int(&r, 10)),
                        last_apply_revision: text(&r, 12),
                        ..HostRow::default()
                    },
                    members,
                }
            })
            .collect();
        listings.sort_by(|a, b| a.row.name.cmp(&b.row.name));
        Ok(listings)
    }

    /// Hosts whose last report (or enrolment) is older than they allow.
    /// SQL keeps the candidates (an allowance rounded down to the
    /// thousandth of the factor, so never one too few); the view applies
    /// the exact rule.
    pub async fn stale(&self, staleness: &Staleness) -> Result<views::StaleView, StoreError> {
        let milli = (staleness.factor * 1000.0).floor().max(0.0) as i64;
        let rows = self
            .backend
            .rows(Stmt::new(
                "SELECT name, kind, enrolled_at, labels, last_report_at, expected_interval_s FROM hosts \
                 WHERE CASE WHEN last_report_at IS NULL THEN enrolled_at + $2 < $1 \
                 WHEN expected_interval_s = 0 THEN last_report_at + $2 < $1 \
                 ELSE last_report_at + expected_interval_s * $3 / 1000 < $1 END",
                vec![
                    staleness.now.into(),
                    staleness.first_report_within.into(),
                    milli.into(),
                ],
            ))
            .await?;
        let rows: Vec<HostRow> = rows
            .iter()
            .map(|r| HostRow {
                name: text(r, 0).unwrap_or_default(),
                kind: text(r, 1).unwrap_or_default(),
                enrolled_at: int(r, 2).unwrap_or(0),
                labels: json(r, 3),
                last_report_at: int(r, 4),
                expected_interval_s: u(int(r, 5)),
                ..HostRow::default()
            })
            .collect();
        Ok(views::stale(&rows, staleness))
    }

    /// The revision applied most recently anywhere (of several applied in
    /// the same second, the first in byte order, whatever the database's
    /// collation).
    pub async fn latest_revision(&self) -> Result<Option<String>, StoreError> {
        let rows = self
            .backend
            .rows(Stmt::new(
                "SELECT revision FROM revisions ORDER BY last_at DESC, revision COLLATE \"C\" LIMIT 1",
                vec![],
            ))
            .await?;
        Ok(rows.first().and_then(|r| text(r, 0)))
    }

    /// Which applied revision `wanted` names: a revision is shown cut short
    /// (`git:5954ab558278` in `datum fleet hosts`, `git:5954ab5582` on the
    /// web pages), and a person gives it back so. A revision some host
    /// applied is itself; else the one applied revision beginning with
    /// `wanted`, or several; none when no host applied one (a revision
    /// still to come: its rollout is every host not applied yet).
    pub async fn revision_named(&self, wanted: &str) -> Result<RevisionName, StoreError> {
        let rows = self
            .backend
            .rows(Stmt::new(
                "SELECT revision FROM revisions WHERE substr(revision, 1, $2) = $1 \
                 ORDER BY length(revision), revision COLLATE \"C\" LIMIT 6",
                vec![wanted.into(), (wanted.chars().count() as i64).into()],
            ))
            .await?;
        let mut found: Vec<String> = rows.iter().filter_map(|r| text(r, 0)).collect();
        Ok(match found.len() {
            0 => RevisionName::None,
            _ if found[0] == wanted => RevisionName::One(found.swap_remove(0)),
            1 => RevisionName::One(found.swap_remove(0)),
            _ => RevisionName::Several(found),
        })
    }

    /// The rollout of `revision` (default: the latest), from its own rows.
    pub async fn rollout(&self, revision: Option<&str>) -> Result<views::RolloutView, StoreError> {
        let revision = match revision {
            Some(r) => Some(r.to_owned()),
            None => self.latest_revision().await?,
        };
        let rev = revision.clone().unwrap_or_default();
        let mut answers = self
            .backend
            .read(vec![
                Stmt::new(
                    "SELECT host, outcome, labels FROM host_revisions WHERE revision = $1",
                    vec![rev.as_str().into()],
                ),
                Stmt::new(
                    "SELECT name, last_apply_revision FROM hosts h WHERE kind = 'host' AND NOT EXISTS \
                     (SELECT 1 FROM host_revisions r WHERE r.revision = $1 AND r.host = h.name)",
                    vec![rev.as_str().into()],
                ),
                Stmt::new(
                    "SELECT host, resource, phase, validator, validator_version, exit_status, signature, message \
                     FROM failures WHERE revision = $1",
                    vec![rev.as_str().into()],
                ),
                Stmt::new("SELECT count(*) FROM hosts WHERE kind = 'host'", vec![]),
            ])
            .await?
            .into_iter();
        let mut next = || answers.next().unwrap_or_default();
        let (applied_rows, pending_rows, failure_rows, total) = (next(), next(), next(), next());
        // Hosts share a few label sets: each distinct one is decoded once.
        let mut sets: Vec<BTreeMap<String, String>> = Vec::new();
        let mut set_of: HashMap<String, usize> = HashMap::new();
        let applied: Vec<Applied> = applied_rows
            .into_iter()
            .map(|mut r| {
                let labels = match r.get_mut(2) {
                    Some(Val::Text(t)) => std::mem::take(t),
                    _ => String::new(),
                };
                let index = *set_of.entry(labels).or_insert_with_key(|text| {
                    sets.push(serde_json::from_str(text).unwrap_or_default());
                    sets.len() - 1
                });
                Applied {
                    failed: r.get(1).and_then(Val::text) == Some("failed"),
                    host: match r.get_mut(0) {
                        Some(Val::Text(t)) => std::mem::take(t),
                        _ => String::new(),
                    },
                    labels: index,
                }
            })
            .collect();
        let pending: Vec<PendingHost> = pending_rows
            .iter()
            .map(|r| PendingHost {
                name: text(r, 0).unwrap_or_default(),
                revision: text(r, 1),
            })
            .collect();
        let failures: Vec<FailureRow> = failure_rows.iter().map(failure_of).collect();
        let hosts_total = u(total.first().and_then(|r| int(r, 0)));
        Ok(views::rollout_of(
            revision,
            hosts_total,
            applied,
            &sets,
            pending,
            &failures,
        ))
    }

    /// The rollout document (`GET /v1/rollout`), kept while the store's
    /// generation is unchanged (it does not depend on the clock).
    pub async fn rollout_json(&self, revision: Option<&str>) -> Result<Bytes, StoreError> {
        let generation = self.generation().await?;
        if let Some(doc) = self.cache.rollout(generation, revision) {
            return Ok(doc);
        }
        let view = self.rollout(revision).await?;
        let doc = Bytes::from(
            serde_json::to_vec(&view).map_err(|e| shape(self.backend.name(), &e.to_string()))?,
        );
        self.cache.keep_rollout(generation, revision, doc.clone());
        Ok(doc)
    }

    /// The whole drift view, kept while the store's generation is
    /// unchanged (its `generated_at` is the time it was computed at).
    pub async fn drift_kept(&self, now: i64) -> Result<Arc<views::DriftView>, StoreError> {
        let generation = self.generation().await?;
        self.drift_at(generation, now).await
    }

    /// The whole drift view kept at `generation` (read before), computed
    /// and kept when none is.
    async fn drift_at(
        &self,
        generation: i64,
        now: i64,
    ) -> Result<Arc<views::DriftView>, StoreError> {
        if let Some(kept) = self.cache.drift(generation) {
            return Ok(kept);
        }
        let view = Arc::new(self.drift(now).await?);
        self.cache.keep_drift(generation, Arc::clone(&view));
        Ok(view)
    }

    /// One page of the drift document (`GET /v1/drift?page=N&per=M`,
    /// pages as [`views::Paging::of`] takes them): the clusters of the
    /// view kept while the store's generation is unchanged, the document
    /// for one second.
    pub async fn drift_json(
        &self,
        now: i64,
        page: Option<usize>,
        per: Option<usize>,
    ) -> Result<Bytes, StoreError> {
        let generation = self.generation().await?;
        let view = self.drift_at(generation, now).await?;
        // Asked for no page, the whole view, unpaged, as before paging: a
        // client that predates it asks so and reads `clusters` as all of
        // them (it would miss the rest without a word). Pages are asked
        // for by `page` or `per` (`datum fleet drift` and the web view do).
        let paging = if page.is_none() && per.is_none() {
            None
        } else {
            Some(views::Paging::of(view.clusters.len(), page, per))
        };
        if let Some(doc) = self.cache.drift_doc(generation, now, paging) {
            return Ok(doc);
        }
        let doc = serde_json::to_vec(&views::DriftView {
            generated_at: views::rfc3339(now),
            ..match paging {
                Some(paging) => view.page(paging),
                None => view.whole(),
            }
        })
        .map_err(|e| shape(self.backend.name(), &e.to_string()))?;
        let doc = Bytes::from(doc);
        self.cache
            .keep_drift_doc(generation, now, paging, doc.clone());
        Ok(doc)
    }

    /// What the overview shows of the rollout of the latest revision: its
    /// counts and failure groups, from a row per distinct label set and
    /// the failed hosts' rows (not a row per host, as [`Fleet::rollout`]).
    pub async fn rollout_summary(&self) -> Result<views::RolloutSummary, StoreError> {
        let revision = self.latest_revision().await?;
        let rev = revision.clone().unwrap_or_default();
        let mut answers = self
            .backend
            .read(vec![
                Stmt::new(
                    "SELECT labels, count(*), CAST(coalesce(sum(CASE WHEN outcome = 'failed' THEN 1 ELSE 0 END), 0) \
                     AS BIGINT) FROM host_revisions WHERE revision = $1 GROUP BY labels",
                    vec![rev.as_str().into()],
                ),
                Stmt::new(
                    "SELECT count(*) FROM hosts h WHERE kind = 'host' AND NOT EXISTS \
                     (SELECT 1 FROM host_revisions r WHERE r.revision = $1 AND r.host = h.name)",
                    vec![rev.as_str().into()],
                ),
                Stmt::new(
                    "SELECT f.host, f.resource, f.phase, f.validator, f.validator_version, f.exit_status, \
                     f.signature, f.message, r.labels FROM failures f JOIN host_revisions r \
                     ON r.revision = f.revision AND r.host = f.host WHERE f.revision = $1",
                    vec![rev.as_str().into()],
                ),
            ])
            .await?
            .into_iter();
        let mut next = || answers.next().unwrap_or_default();
        let (set_rows, pending, failure_rows) = (next(), next(), next());
        let mut sets: Vec<BTreeMap<String, String>> = Vec::new();
        let mut set_of: HashMap<String, usize> = HashMap::new();
        let mut index = |text: String, sets: &mut Vec<BTreeMap<String, String>>| {
            *set_of.entry(text).or_insert_with_key(|text| {
                sets.push(serde_json::from_str(text).unwrap_or_default());
                sets.len() - 1
            })
        };
        let applied: Vec<(usize, u64, u64)> = set_rows
            .into_iter()
            .map(|r| {
                let set = index(text(&r, 0).unwrap_or_default(), &mut sets);
                (set, u(int(&r, 1)), u(int(&r, 2)))
            })
            .collect();
        let failed_sets: Vec<(String, usize)> = failure_rows
            .iter()
            .map(|r| {
                (
                    text(r, 0).unwrap_or_default(),
                    index(text(r, 8).unwrap_or_default(), &mut sets),
                )
            })
            .collect();
        let failed_sets: HashMap<&str, usize> =
            failed_sets.iter().map(|(h, s)| (h.as_str(), *s)).collect();
        let failures: Vec<FailureRow> = failure_rows.iter().map(failure_of).collect();
        Ok(views::rollout_summary_of(
            revision,
            &sets,
            &applied,
            &failed_sets,
            u(pending.first().and_then(|r| int(r, 0))),
            &failures,
        ))
    }

    /// What the overview shows of drift: the first `shown` clusters of
    /// [`Fleet::drift`] and its counts, with sample hosts read for those
    /// clusters only (one index range each), not for every finding.
    pub async fn drift_summary(
        &self,
        now: i64,
        shown: usize,
    ) -> Result<views::DriftSummary, StoreError> {
        let mut answers = self
            .backend
            .read(vec![
                Stmt::new(CLUSTERS, vec![]),
                Stmt::new(DRIFT_COUNTS, vec![]),
            ])
            .await?
            .into_iter();
        let mut next = || answers.next().unwrap_or_default();
        let (cluster_rows, counts) = (next(), next());
        let counts = counts.first();
        let view = views::drift_of(
            cluster_rows.iter().map(|r| cluster_of(r, now)).collect(),
            HashMap::new(),
            u(counts.and_then(|r| int(r, 0))),
            u(counts.and_then(|r| int(r, 1))),
            now,
        );
        let mut summary = views::DriftSummary::of(&view, shown);
        if summary.clusters.is_empty() {
            return Ok(summary);
        }
        let samples = self
            .backend
            .read(
                summary
                    .clusters
                    .iter()
                    .map(|c| {
                        Stmt::new(
                            SAMPLE_HOSTS_OF_A_CLUSTER,
                            vec![
                                c.signature.as_str().into(),
                                c.observed.clone().unwrap_or_default().into(),
                                (views::SAMPLE_HOSTS as i64).into(),
                            ],
                        )
                    })
                    .collect(),
            )
            .await?;
        for (c, rows) in summary.clusters.iter_mut().zip(samples) {
            c.sample_hosts = rows.iter().filter_map(|r| text(r, 0)).collect();
        }
        self.attach_writers(&mut summary.clusters).await?;
        Ok(summary)
    }

    /// Who changed each cluster's findings: the distinct writer lines over
    /// its hosts, at most [`views::SAMPLE_HOSTS`] (only attributed
    /// findings are read).
    async fn attach_writers(&self, clusters: &mut [views::DriftCluster]) -> Result<(), StoreError> {
        let rows = self
            .backend
            .rows(Stmt::new(
                "SELECT DISTINCT signature, observed, changed_by FROM findings WHERE changed_by <> '[]'",
                vec![],
            ))
            .await?;
        let mut by_cluster: HashMap<(String, String), BTreeSet<String>> = HashMap::new();
        for r in &rows {
            let writers: Vec<datum_fleet::Writer> = json(r, 2);
            by_cluster
                .entry((
                    text(r, 0).unwrap_or_default(),
                    text(r, 1).unwrap_or_default(),
                ))
                .or_default()
                .extend(writers.iter().map(datum_fleet::Writer::line));
        }
        for c in clusters {
            let key = (c.signature.clone(), c.observed.clone().unwrap_or_default());
            if let Some(lines) = by_cluster.remove(&key) {
                c.changed_by = lines.into_iter().take(views::SAMPLE_HOSTS).collect();
            }
        }
        Ok(())
    }

    /// The drift clusters kept at ingest, with the first hosts of each.
    pub async fn drift(&self, now: i64) -> Result<views::DriftView, StoreError> {
        let mut answers = self
            .backend
            .read(vec![
                Stmt::new(CLUSTERS, vec![]),
                Stmt::new(
                    SAMPLE_HOSTS_OF_EVERY_CLUSTER,
                    vec![(views::SAMPLE_HOSTS as i64).into()],
                ),
                Stmt::new(DRIFT_COUNTS, vec![]),
            ])
            .await?
            .into_iter();
        let mut next = || answers.next().unwrap_or_default();
        let (cluster_rows, sample_rows, counts) = (next(), next(), next());
        let clusters: Vec<ClusterRow> = cluster_rows.iter().map(|r| cluster_of(r, now)).collect();
        let mut samples: HashMap<(String, String), Vec<String>> = HashMap::new();
        for mut r in sample_rows {
            let mut take = |i: usize| match r.get_mut(i) {
                Some(Val::Text(t)) => std::mem::take(t),
                _ => String::new(),
            };
            let (signature, observed, host) = (take(0), take(1), take(2));
            samples.entry((signature, observed)).or_default().push(host);
        }
        let counts = counts.first();
        let mut view = views::drift_of(
            clusters,
            samples,
            u(counts.and_then(|r| int(r, 0))),
            u(counts.and_then(|r| int(r, 1))),
            now,
        );
        self.attach_writers(&mut view.clusters).await?;
        Ok(view)
    }

    /// Renders the pre-rendered picture of hosts stored before it existed
    /// (a store migrated from schema 1). Run once when a server opens its
    /// store; does nothing afterwards.
    pub async fn backfill(&self) -> Result<u64, StoreError> {
        let missing = self
            .backend
            .rows(Stmt::new(
                "SELECT count(*) FROM hosts WHERE view_json IS NULL AND last_report_at IS NOT NULL",
                vec![],
            ))
            .await?;
        if u(missing.first().and_then(|r| int(r, 0))) == 0 {
            return Ok(0);
        }
        let mut stmts: Vec<Stmt> = self
            .host_rows()
            .await?
            .iter()
            .filter(|h| h.last_report_at.is_some())
            .map(|h| {
                Stmt::new(
                    "UPDATE hosts SET view_json = $2 WHERE name = $1 AND view_json IS NULL",
                    vec![
                        h.name.as_str().into(),
                        views::HostPicture::of_row(h).members().into(),
                    ],
                )
            })
            .collect();
        let n = stmts.len() as u64;
        stmts.push(cache::bump());
        self.backend.execute(stmts).await?;
        Ok(n)
    }

    pub async fn sampling(
        &self,
        plan: Option<&datum_fleet::SamplingPlan>,
    ) -> Result<views::SamplingView, StoreError> {
        let hosts = self.host_rows().await?;
        let mut rounds = Vec::new();
        if let Some(p) = plan {
            let since = p.round.saturating_sub(p.period().max(1) * 2);
            rounds = self
                .backend
                .rows(Stmt::new(
                    "SELECT round, count(*) FROM deep_checks WHERE round >= $1 GROUP BY round ORDER BY round DESC",
                    vec![since.into()],
                ))
                .await?
                .iter()
                .map(|r| (u(int(r, 0)), u(int(r, 1))))
                .collect();
        }
        Ok(views::sampling(plan, &hosts, &rounds))
    }

    /// A host's history: its newest reports and its daily aggregates.
    pub async fn history(&self, name: &str, limit: u32) -> Result<Option<HistoryView>, StoreError> {
        let known = self
            .backend
            .rows(Stmt::new(
                "SELECT name FROM hosts WHERE name = $1",
                vec![name.into()],
            ))
            .await?;
        if known.is_empty() {
            return Ok(None);
        }
        let reports = self
            .backend
            .rows(Stmt::new(
                "SELECT body, received_at FROM reports WHERE host = $1 ORDER BY id DESC LIMIT $2",
                vec![name.into(), i64::from(limit).into()],
            ))
            .await?
            .iter()
            .filter_map(|r| {
                let body: Report = serde_json::from_str(r.first()?.text()?).ok()?;
                Some(ReportSummary {
                    seq: body.seq,
                    kind: body.kind.word().to_owned(),
                    received_at: views::rfc3339(int(r, 1).unwrap_or(0)),
                    finished_at: views::rfc3339(body.finished_at),
                    revision: body.revision,
                    exit_code: i64::from(body.exit_code),
                    counts: body.counts,
                    findings: body.findings.len() as u64,
                    failures: body.failures.len() as u64,
                    trusted_by_metadata: body.trusted_by_metadata,
                    warnings: body.warnings,
                })
            })
            .collect();
        let daily = self
            .backend
            .rows(Stmt::new(
                "SELECT day, reports, applies, failed, max_findings FROM daily WHERE host = $1 ORDER BY day DESC LIMIT 400",
                vec![name.into()],
            ))
            .await?
            .iter()
            .map(|r| DailyRow {
                day: views::rfc3339(int(r, 0).unwrap_or(0) * 86_400)
                    .get(..10)
                    .unwrap_or_default()
                    .to_owned(),
                reports: u(int(r, 1)),
                applies: u(int(r, 2)),
                failed: u(int(r, 3)),
                max_findings: u(int(r, 4)),
            })
            .collect();
        Ok(Some(HistoryView {
            format_version: views::VIEW_FORMAT_VERSION.to_owned(),
            name: name.to_owned(),
            reports,
            daily,
        }))
    }

    /// Daily aggregates and recorded deep checks older than `days` are
    /// removed, and the idempotency keys of reports no longer kept.
    ///
    /// A key is there to recognise a retried delivery. A host's outbox
    /// sends its reports in order, one at a time, and removes each once the
    /// server holds it, so what comes again is the host's newest report
    /// (its reply was lost), which retention keeps (`reports_per_host` is
    /// at least 1): a key is kept as long as its report. Kept `days` (400)
    /// instead, a host reporting every minute held about 576,000 of them.
    /// A report older than those kept that comes again (a state store
    /// restored from a backup) is taken as already seen once the host
    /// holds all that retention keeps (see [`crate::ingest`]).
    ///
    /// The keys go in transactions of at most [`PRUNE_BATCH`] with a pause
    /// between them ([`PRUNE_PAUSE`]): the first prune of a store that kept
    /// every key (before keys went with their reports) removes nearly all
    /// of them, and in one transaction that held SQLite's one connection
    /// (every report and view waiting) for the whole backlog.
    pub async fn prune(&self, now: i64, days: u32) -> Result<Pruned, StoreError> {
        self.prune_in_batches(now, days, PRUNE_BATCH).await
    }

    /// [`Fleet::prune`] removing at most `batch` keys per transaction.
    pub async fn prune_in_batches(
        &self,
        now: i64,
        days: u32,
        batch: usize,
    ) -> Result<Pruned, StoreError> {
        let cutoff = now - i64::from(days) * 86_400;
        self.backend
            .execute(vec![
                Stmt::new(
                    "DELETE FROM daily WHERE day < $1",
                    vec![(now.div_euclid(86_400) - i64::from(days)).into()],
                ),
                Stmt::new("DELETE FROM deep_checks WHERE at < $1", vec![cutoff.into()]),
            ])
            .await?;
        let mut pruned = Pruned {
            keys: 0,
            transactions: 1,
        };
        let mut from = None;
        loop {
            let done = self
                .backend
                .phased(KeyBatch {
                    from: from.take(),
                    batch: batch.max(1),
                    phase: 0,
                    to: None,
                    removed: 0,
                })
                .await?;
            pruned.keys += done.removed;
            pruned.transactions += 1;
            match done.to {
                Some(to) => from = Some(to),
                None => return Ok(pruned),
            }
            tokio::time::sleep(PRUNE_PAUSE).await;
        }
    }
}

/// Keys [`Fleet::prune`] removes in one transaction at most.
pub const PRUNE_BATCH: usize = 5_000;

/// The pause between two of [`Fleet::prune`]'s transactions, in which
/// reports and reads waiting for the store get it.
pub const PRUNE_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// What [`Fleet::prune`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Idempotency keys removed.
    pub keys: u64,
    /// Transactions it took.
    pub transactions: u64,
}

/// A key of a report no longer kept: a key this statement sees without
/// its report is of a report removed (its transaction wrote the key with
/// the report).
const STALE_KEY: &str = "NOT EXISTS (SELECT 1 FROM reports r \
     WHERE r.host = report_keys.host AND r.key = report_keys.key)";

/// One transaction of the key prune: the stale keys from `from` (the
/// table's order; its start when `None`) up to the one `batch` further,
/// which is where the next transaction starts (`to`; `None` when no more).
/// Walking the table in its own order from where the last one stopped,
/// each key is read once or twice in all, not once per transaction.
struct KeyBatch {
    from: Option<(String, String)>,
    batch: usize,
    phase: u8,
    to: Option<(String, String)>,
    removed: u64,
}

impl crate::store::Phases for KeyBatch {
    fn next(&mut self, rows: Vec<Vec<Row>>) -> Result<crate::store::Step, StoreError> {
        use crate::store::Step;
        self.phase += 1;
        let from = |first: usize| -> (String, Vec<Val>) {
            match &self.from {
                Some((host, key)) => (
                    format!("(host, key) >= (${first}, ${}) AND ", first + 1),
                    vec![host.as_str().into(), key.as_str().into()],
                ),
                None => (String::new(), Vec::new()),
            }
        };
        Ok(match self.phase {
            1 => {
                let (bound, mut params) = from(2);
                params.insert(0, i64::try_from(self.batch).unwrap_or(i64::MAX).into());
                Step::Run(vec![Stmt::built(
                    format!(
                        "SELECT host, key FROM report_keys WHERE {bound}{STALE_KEY} \
                         ORDER BY host, key LIMIT 1 OFFSET $1"
                    ),
                    params,
                )])
            }
            2 => {
                self.to = rows
                    .first()
                    .and_then(|r| r.first())
                    .and_then(|r| Some((text(r, 0)?, text(r, 1)?)));
                let (bound, mut params) = from(1);
                let upper = match &self.to {
                    Some((host, key)) => {
                        let n = params.len() + 1;
                        params.extend([host.as_str().into(), key.as_str().into()]);
                        format!("(host, key) < (${n}, ${}) AND ", n + 1)
                    }
                    None => String::new(),
                };
                Step::Run(vec![Stmt::built(
                    format!(
                        "DELETE FROM report_keys WHERE {bound}{upper}{STALE_KEY} RETURNING host"
                    ),
                    params,
                )])
            }
            _ => {
                self.removed = rows.first().map_or(0, |r| r.len() as u64);
                Step::Commit
            }
        })
    }
}
