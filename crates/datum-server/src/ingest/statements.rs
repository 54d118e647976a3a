//! The statements of a whole batch: the key gate, the host locks and
//! reads, the revision records' lock, the reports' rows and the daily
//! aggregates.

use std::sync::Arc;

use datum_fleet::ReportKind;

use super::Submitted;
use super::late::store_val;
use crate::store::{Stmt, Val, values_rows};

/// The reports' idempotency keys: a host back means its report was new.
pub(super) fn key_gate(reports: &[Arc<Submitted>]) -> Stmt {
    let mut params = Vec::with_capacity(reports.len() * 3);
    for s in reports {
        params.extend([
            s.report.host.as_str().into(),
            s.report.key.as_str().into(),
            s.received_at.into(),
        ]);
    }
    Stmt::built(
        format!(
            "INSERT INTO report_keys (host, key, at) VALUES {} \
             ON CONFLICT (host, key) DO NOTHING RETURNING host",
            values_rows(1, 3, reports.len())
        ),
        params,
    )
}

/// The oldest report kept (by arrival) of each host of `reports` that has
/// one: host, its finish and sequence number, how many the host holds, and
/// the store it said it came from (one entry of the `(host, id)` index per
/// host).
pub(super) fn oldest_kept(reports: &[&Submitted]) -> Stmt {
    Stmt::built(
        format!(
            "SELECT h.name, r.finished_at, r.seq, h.reports_held, r.store_id FROM hosts h \
             JOIN reports r ON r.id = (SELECT o.id FROM reports o WHERE o.host = h.name \
             ORDER BY o.id LIMIT 1) WHERE h.name IN {}",
            values_rows(1, reports.len(), 1)
        ),
        reports
            .iter()
            .map(|s| Val::from(s.report.host.as_str()))
            .collect(),
    )
}

/// `select` (ending in `IN`) for the hosts of `reports`.
pub(super) fn hosts_in(select: &str, reports: &[&Submitted]) -> Stmt {
    Stmt::built(
        format!("{select} {}", values_rows(1, reports.len(), 1)),
        reports
            .iter()
            .map(|s| Val::from(s.report.host.as_str()))
            .collect(),
    )
}

/// Locks, in key order, the fleet's records (`revisions`) of every
/// revision `reports`' applies report or their hosts hold, which is all
/// their writes and retention can touch: an upsert of each as it is,
/// sorted, which finds its row and locks it in turn. `None` without an
/// apply.
///
/// A revision applied for the first time in the fleet has no record yet:
/// it is made here, in its place in the order (its first and last apply
/// the batch's latest, as the batch's own upsert of it would write), so
/// that from here on the batch holds every record it will write. Left to
/// that upsert at the end of the batch, it was taken out of order: another
/// server could store the first apply of that revision meanwhile, and a
/// third batch then lock it in its place and wait for a record this batch
/// held, while this one waited for it (PostgreSQL: 'deadlock detected').
/// Made by a statement of their own before this one, the missing records
/// would be taken before the others, out of order just the same; made by
/// this one, a record another transaction is making is waited for (as for
/// a row it holds) in its place, and then locked.
pub(super) fn revisions_lock(reports: &[&Submitted]) -> Option<Stmt> {
    let applies: Vec<&Submitted> = reports
        .iter()
        .copied()
        .filter(|s| s.report.kind == ReportKind::Apply)
        .collect();
    if applies.is_empty() {
        return None;
    }
    // One revision, its finish, per apply (as many parameters whatever the
    // revisions, so one prepared statement per number of applies), then
    // the applying hosts.
    let n = applies.len();
    let mut params: Vec<Val> = Vec::with_capacity(n * 3);
    for s in &applies {
        params.extend([
            Val::from(s.report.revision.as_str()),
            Val::from(s.report.finished_at),
        ]);
    }
    params.extend(applies.iter().map(|s| Val::from(s.report.host.as_str())));
    let revision = |i: usize| format!("${}", 2 * i + 1);
    let applied = (0..n)
        .map(|i| {
            format!(
                "SELECT CAST({} AS TEXT) AS revision, CAST(${} AS BIGINT) AS at",
                revision(i),
                2 * i + 2
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let applied_in = (0..n).map(revision).collect::<Vec<_>>().join(", ");
    Some(Stmt::built(
        format!(
            "INSERT INTO revisions (revision, first_at, last_at) \
             SELECT revision, first_at, last_at FROM (\
             SELECT revision, max(at) AS first_at, max(at) AS last_at \
             FROM ({applied}) AS a GROUP BY revision \
             UNION ALL SELECT revision, first_at, last_at FROM revisions \
             WHERE revision IN (SELECT revision FROM host_revisions WHERE host IN {}) \
             AND revision NOT IN ({applied_in})) AS l \
             ORDER BY revision COLLATE \"C\" \
             ON CONFLICT (revision) DO UPDATE SET last_at = revisions.last_at",
            values_rows(2 * n + 1, n, 1)
        ),
        params,
    ))
}

/// The hosts' rows (in the order given), created if need be and locked for
/// the transaction. An existing row of the same kind is locked without
/// being written (PostgreSQL locks every conflicting row of `ON CONFLICT DO
/// UPDATE`, even those its `WHERE` leaves as they are): the picture below
/// is the report's one new version of its host's row.
pub(super) fn host_lock(reports: &[&Submitted]) -> Stmt {
    let mut params = Vec::with_capacity(reports.len() * 3);
    for s in reports {
        params.extend([
            s.report.host.as_str().into(),
            if s.report.kind == ReportKind::Stack {
                "stack"
            } else {
                "host"
            }
            .into(),
            s.received_at.into(),
        ]);
    }
    Stmt::built(
        format!(
            "INSERT INTO hosts (name, kind, enrolled_at) VALUES {} \
             ON CONFLICT (name) DO UPDATE SET kind = excluded.kind \
             WHERE hosts.kind <> excluded.kind",
            values_rows(1, 3, reports.len())
        ),
        params,
    )
}

/// The reports as stored (one row each), with the store each said it came
/// from.
pub(super) fn report_rows(reports: &[&Submitted]) -> Stmt {
    let mut params = Vec::with_capacity(reports.len() * 10);
    for s in reports {
        let report = &s.report;
        params.extend([
            report.host.as_str().into(),
            report.key.as_str().into(),
            report.seq.into(),
            report.kind.word().into(),
            s.received_at.into(),
            report.finished_at.into(),
            report.revision.as_str().into(),
            i64::from(report.exit_code).into(),
            s.raw.as_str().into(),
            store_val(s.outbox.store),
        ]);
    }
    Stmt::built(
        format!(
            "INSERT INTO reports (host, key, seq, kind, received_at, finished_at, revision, exit_code, body, store_id) \
             VALUES {} ON CONFLICT (host, key) DO NOTHING",
            values_rows(1, 10, reports.len())
        ),
        params,
    )
}

/// The reports counted in their hosts' daily aggregates (one host per
/// report in a batch, so one row per key).
pub(super) fn daily_rows(reports: &[&Submitted]) -> Stmt {
    let mut params = Vec::with_capacity(reports.len() * 5);
    for s in reports {
        let report = &s.report;
        let apply = report.kind == ReportKind::Apply;
        let failed_apply = apply && !report.failures.is_empty();
        let check_errors = !apply && report.exit_code == 1;
        params.extend([
            report.host.as_str().into(),
            (report.finished_at.div_euclid(86_400)).into(),
            apply.into(),
            (failed_apply || check_errors).into(),
            (report.findings.len() as u64).into(),
        ]);
    }
    Stmt::built(
        format!(
            "INSERT INTO daily (host, day, applies, failed, max_findings, reports) \
             VALUES {} ON CONFLICT (host, day) DO UPDATE SET \
             reports = daily.reports + 1, applies = daily.applies + excluded.applies, \
             failed = daily.failed + excluded.failed, \
             max_findings = CASE WHEN excluded.max_findings > daily.max_findings \
             THEN excluded.max_findings ELSE daily.max_findings END",
            (0..reports.len())
                .map(|r| {
                    let n = |c: usize| 1 + r * 5 + c;
                    format!("(${}, ${}, ${}, ${}, ${}, 1)", n(0), n(1), n(2), n(3), n(4))
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        params,
    )
}
