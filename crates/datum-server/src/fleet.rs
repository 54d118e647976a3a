//! The query layer: what the fleet stores and reads, over any [`Backend`].
//!
//! Every statement lives here, written once for both databases. The JSON
//! API (`api`) and a later server-rendered web view call these methods and
//! render what they return; neither writes SQL.
//!
//! Ingest is one transaction per report: its idempotency key first
//! (`report_keys`, `ON CONFLICT (host, key) DO NOTHING RETURNING host`),
//! and only when it was new, the rest: the report itself, the host's latest picture, the revision's outcome and failures
//! (apply), the open findings of the classes it covers (check), the
//! sampling round, the daily aggregate and retention. A key already stored
//! writes nothing, which is what makes a retried delivery harmless.
//!
//! Owns: [`Fleet`] and the SQL. Must not: authenticate (the API does) or
//! format anything for a person.

use std::collections::BTreeMap;

use datum_fleet::{Report, ReportKind};

use crate::store::{Backend, Row, Stmt, StoreError, Val};
use crate::views::{self, FailureRow, FindingRow, HostRow, RevisionRow, Staleness};

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
}

/// The fleet over one database.
#[derive(Debug, Clone)]
pub struct Fleet<B> {
    backend: B,
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
}

/// `GET /v1/hosts/{name}/reports`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HistoryView {
    pub format_version: u32,
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
        Fleet { backend }
    }

    pub fn backend(&self) -> &B {
        &self.backend
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
        let mut stmts = vec![
            Stmt::new(
                "DELETE FROM identities WHERE name = $1 AND kind = $2",
                vec![name.into(), kind.into()],
            ),
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
        }
        self.backend.execute(stmts).await
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
    /// key was stored before (nothing written).
    pub async fn ingest(
        &self,
        report: &Report,
        raw: &str,
        received_at: i64,
        outbox: OutboxHeaders,
        reports_kept: u32,
    ) -> Result<bool, StoreError> {
        let host = report.host.as_str();
        let first = Stmt::new(
            "INSERT INTO report_keys (host, key, at) VALUES ($1, $2, $3) \
             ON CONFLICT (host, key) DO NOTHING RETURNING host",
            vec![host.into(), report.key.as_str().into(), received_at.into()],
        );
        let mut rest = vec![Stmt::new(
            "INSERT INTO reports (host, key, seq, kind, received_at, finished_at, revision, exit_code, body) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (host, key) DO NOTHING",
            vec![
                host.into(),
                report.key.as_str().into(),
                report.seq.into(),
                report.kind.word().into(),
                received_at.into(),
                report.finished_at.into(),
                report.revision.as_str().into(),
                i64::from(report.exit_code).into(),
                raw.into(),
            ],
        )];
        // The host's row first, locked for the rest of the transaction: two
        // reports of one host (delivered to two servers at once) then take
        // their turns instead of deadlocking.
        rest.insert(
            0,
            Stmt::new(
                "INSERT INTO hosts (name, kind, enrolled_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO UPDATE SET kind = excluded.kind",
                vec![
                    host.into(),
                    if report.kind == ReportKind::Stack {
                        "stack"
                    } else {
                        "host"
                    }
                    .into(),
                    received_at.into(),
                ],
            ),
        );
        let apply = report.kind == ReportKind::Apply;
        let failed_apply = apply && !report.failures.is_empty();
        if apply {
            rest.push(Stmt::new(
                "INSERT INTO host_revisions (host, revision, first_at, last_at, outcome, changed, failed) \
                 VALUES ($1, $2, $3, $3, $4, $5, $6) ON CONFLICT (host, revision) DO UPDATE SET \
                 last_at = excluded.last_at, outcome = excluded.outcome, changed = excluded.changed, \
                 failed = excluded.failed",
                vec![
                    host.into(),
                    report.revision.as_str().into(),
                    report.finished_at.into(),
                    if failed_apply { "failed" } else { "converged" }.into(),
                    report.changed_total.max(report.changed.len() as u64).into(),
                    (report.failures.len() as u64).into(),
                ],
            ));
            rest.push(Stmt::new(
                "DELETE FROM failures WHERE host = $1 AND revision = $2",
                vec![host.into(), report.revision.as_str().into()],
            ));
            for f in &report.failures {
                rest.push(Stmt::new(
                    "INSERT INTO failures (host, revision, resource, phase, validator, validator_version, \
                     exit_status, signature, message, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                     ON CONFLICT (host, revision, resource) DO NOTHING",
                    vec![
                        host.into(),
                        report.revision.as_str().into(),
                        f.resource.as_str().into(),
                        f.phase.as_str().into(),
                        Val::opt_text(f.validator.as_deref()),
                        Val::opt_text(f.validator_version.as_deref()),
                        Val::opt_int(f.exit_status.map(i64::from)),
                        f.signature.as_str().into(),
                        f.message.as_str().into(),
                        report.finished_at.into(),
                    ],
                ));
            }
        } else {
            // A check (or a stack) replaces the open findings of what it
            // covered: every class, or the classes it names.
            if report.classes_checked.is_empty() {
                rest.push(Stmt::new(
                    "DELETE FROM findings WHERE host = $1",
                    vec![host.into()],
                ));
            } else {
                for class in &report.classes_checked {
                    rest.push(Stmt::new(
                        "DELETE FROM findings WHERE host = $1 AND class = $2",
                        vec![host.into(), class.as_str().into()],
                    ));
                }
            }
            for f in &report.findings {
                rest.push(Stmt::new(
                    "INSERT INTO findings (host, signature, subject, category, class, paths, observed, \
                     first_seen, last_seen, checks) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                     ON CONFLICT (host, signature) DO UPDATE SET observed = excluded.observed, \
                     last_seen = excluded.last_seen, checks = excluded.checks",
                    vec![
                        host.into(),
                        f.signature.as_str().into(),
                        f.subject.as_str().into(),
                        f.category.as_str().into(),
                        f.class.as_str().into(),
                        serde_json::to_string(&f.paths).unwrap_or_default().into(),
                        Val::opt_text(f.observed.as_deref()),
                        f.first_seen.into(),
                        report.finished_at.into(),
                        f.checks.unwrap_or(1).into(),
                    ],
                ));
            }
        }
        let trees_differing = report
            .trees
            .iter()
            .filter(|t| t.observed.as_deref() != Some(t.declared.as_str()))
            .count() as u64;
        let check_errors = !apply && report.exit_code == 1;
        // The host's picture. Only a report at least as recent as the last
        // one moves it (a late duplicate of an old report cannot).
        rest.push(Stmt::new(
            "UPDATE hosts SET labels = $2, last_report_at = $3, last_report_kind = $4, seq = $5, \
             revision = $6, catalogue = $7, datum_version = $8, counts = $9, resources = $10, \
             quarantined = $11, expected_interval_s = $12, outbox_depth = $13, outbox_dropped = $14, \
             classes = $15, trees = $16, trees_differing = $17, \
             last_apply_at = CASE WHEN $18 = 1 THEN $3 ELSE last_apply_at END, \
             last_apply_revision = CASE WHEN $18 = 1 THEN $6 ELSE last_apply_revision END, \
             last_apply_failed = CASE WHEN $18 = 1 THEN $19 ELSE last_apply_failed END, \
             check_errors = CASE WHEN $18 = 1 THEN check_errors ELSE $20 END \
             WHERE name = $1 AND (last_report_at IS NULL OR last_report_at <= $3)",
            vec![
                host.into(),
                serde_json::to_string(&report.labels).unwrap_or_default().into(),
                report.finished_at.into(),
                report.kind.word().into(),
                report.seq.into(),
                report.revision.as_str().into(),
                report.catalogue.as_str().into(),
                report.datum_version.as_str().into(),
                serde_json::to_string(&report.counts).unwrap_or_default().into(),
                report.resources.into(),
                (report.quarantined.len() as u64).into(),
                report.expected_interval_s.into(),
                outbox.depth.into(),
                outbox.dropped.into(),
                serde_json::to_string(&report.classes).unwrap_or_default().into(),
                (report.trees.len() as u64).into(),
                trees_differing.into(),
                apply.into(),
                failed_apply.into(),
                check_errors.into(),
            ],
        ));
        if let Some(s) = report.sampling.filter(|s| s.deep) {
            rest.push(Stmt::new(
                "INSERT INTO deep_checks (host, round, at) VALUES ($1, $2, $3) ON CONFLICT (host, round) DO NOTHING",
                vec![host.into(), s.round.into(), report.finished_at.into()],
            ));
            rest.push(Stmt::new(
                "UPDATE hosts SET last_deep_round = $2 WHERE name = $1 \
                 AND (last_deep_round IS NULL OR last_deep_round < $2)",
                vec![host.into(), s.round.into()],
            ));
        }
        rest.push(Stmt::new(
            "INSERT INTO daily (host, day, reports, applies, failed, max_findings) \
             VALUES ($1, $2, 1, $3, $4, $5) ON CONFLICT (host, day) DO UPDATE SET \
             reports = daily.reports + 1, applies = daily.applies + excluded.applies, \
             failed = daily.failed + excluded.failed, \
             max_findings = CASE WHEN excluded.max_findings > daily.max_findings \
             THEN excluded.max_findings ELSE daily.max_findings END",
            vec![
                host.into(),
                (report.finished_at.div_euclid(86_400)).into(),
                apply.into(),
                (failed_apply || check_errors).into(),
                (report.findings.len() as u64).into(),
            ],
        ));
        // Retention: the newest N reports of the host stay.
        rest.push(Stmt::new(
            "DELETE FROM reports WHERE host = $1 AND id <= \
             (SELECT id FROM reports WHERE host = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
            vec![host.into(), i64::from(reports_kept).into()],
        ));
        // Counted after the changes above, whatever order reports came in.
        rest.push(Stmt::new(
            "UPDATE hosts SET reports_held = (SELECT count(*) FROM reports WHERE reports.host = $1), \
             open_findings = (SELECT count(*) FROM findings WHERE findings.host = $1) WHERE name = $1",
            vec![host.into()],
        ));
        Ok(self.backend.gated(first, rest).await?.is_some())
    }

    /// Every host and stack.
    pub async fn host_rows(&self) -> Result<Vec<HostRow>, StoreError> {
        Ok(self
            .backend
            .rows(Stmt::new(
                // One constant: the columns and the order.
                HOST_COLUMNS,
                vec![],
            ))
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

    pub async fn hosts(&self, staleness: &Staleness) -> Result<views::HostsView, StoreError> {
        Ok(views::hosts(&self.host_rows().await?, staleness))
    }

    pub async fn stale(&self, staleness: &Staleness) -> Result<views::StaleView, StoreError> {
        Ok(views::stale(&self.host_rows().await?, staleness))
    }

    /// The revision applied most recently anywhere.
    pub async fn latest_revision(&self) -> Result<Option<String>, StoreError> {
        let rows = self
            .backend
            .rows(Stmt::new(
                "SELECT revision FROM host_revisions ORDER BY last_at DESC, revision LIMIT 1",
                vec![],
            ))
            .await?;
        Ok(rows.first().and_then(|r| text(r, 0)))
    }

    pub async fn rollout(&self, revision: Option<&str>) -> Result<views::RolloutView, StoreError> {
        let revision = match revision {
            Some(r) => Some(r.to_owned()),
            None => self.latest_revision().await?,
        };
        let hosts = self.host_rows().await?;
        let Some(rev) = revision.clone() else {
            return Ok(views::rollout(None, &hosts, &[], &[]));
        };
        let applied: Vec<RevisionRow> = self
            .backend
            .rows(Stmt::new(
                "SELECT host, outcome, last_at, changed, failed FROM host_revisions WHERE revision = $1",
                vec![rev.as_str().into()],
            ))
            .await?
            .iter()
            .map(|r| RevisionRow {
                host: text(r, 0).unwrap_or_default(),
                outcome: text(r, 1).unwrap_or_default(),
                last_at: int(r, 2).unwrap_or(0),
                changed: u(int(r, 3)),
                failed: u(int(r, 4)),
            })
            .collect();
        let failures: Vec<FailureRow> = self
            .backend
            .rows(Stmt::new(
                "SELECT host, resource, phase, validator, validator_version, exit_status, signature, message \
                 FROM failures WHERE revision = $1",
                vec![rev.as_str().into()],
            ))
            .await?
            .iter()
            .map(|r| FailureRow {
                host: text(r, 0).unwrap_or_default(),
                resource: text(r, 1).unwrap_or_default(),
                phase: text(r, 2).unwrap_or_default(),
                validator: text(r, 3),
                validator_version: text(r, 4),
                exit_status: int(r, 5),
                signature: text(r, 6).unwrap_or_default(),
                message: text(r, 7).unwrap_or_default(),
            })
            .collect();
        Ok(views::rollout(revision, &hosts, &applied, &failures))
    }

    pub async fn drift(&self, now: i64) -> Result<views::DriftView, StoreError> {
        let rows: Vec<FindingRow> = self
            .backend
            .rows(Stmt::new(
                "SELECT host, signature, subject, category, class, paths, observed, first_seen, last_seen \
                 FROM findings",
                vec![],
            ))
            .await?
            .iter()
            .map(|r| FindingRow {
                host: text(r, 0).unwrap_or_default(),
                signature: text(r, 1).unwrap_or_default(),
                subject: text(r, 2).unwrap_or_default(),
                category: text(r, 3).unwrap_or_default(),
                class: text(r, 4).unwrap_or_default(),
                paths: json(r, 5),
                observed: text(r, 6),
                first_seen: int(r, 7).unwrap_or(0),
                last_seen: int(r, 8).unwrap_or(0),
            })
            .collect();
        let total = self
            .backend
            .rows(Stmt::new(
                "SELECT count(*) FROM hosts WHERE last_report_at IS NOT NULL",
                vec![],
            ))
            .await?;
        let total = total
            .first()
            .and_then(|r| int(r, 0))
            .ok_or_else(|| shape(self.backend.name(), "count(*) gave no row"))?;
        Ok(views::drift(&rows, u(Some(total)), now))
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
            format_version: views::VIEW_FORMAT_VERSION,
            name: name.to_owned(),
            reports,
            daily,
        }))
    }

    /// Daily aggregates and remembered keys older than `days` are removed.
    pub async fn prune(&self, now: i64, days: u32) -> Result<(), StoreError> {
        self.backend
            .execute(vec![
                Stmt::new(
                    "DELETE FROM daily WHERE day < $1",
                    vec![(now.div_euclid(86_400) - i64::from(days)).into()],
                ),
                Stmt::new(
                    "DELETE FROM report_keys WHERE at < $1",
                    vec![(now - i64::from(days) * 86_400).into()],
                ),
            ])
            .await
    }
}
