//! Everything one new report writes besides the batch's statements: its
//! apply's or check's writes, sampling, retention and the host's picture.

use std::collections::HashMap;

use datum_fleet::ReportKind;

use super::findings::{Stored, applied_writes, finding_writes};
use super::late::store_val;
use super::rollout::{revisions_retention, rollout_writes};
use super::shared::BatchState;
use super::{OUTBOX_COUNT_LIMIT, Submitted};
use crate::store::Stmt;
use crate::views::{self, HostPicture};

/// Everything one new report writes besides its key, its host's lock, its
/// own row and its daily aggregate (written for the batch at once);
/// `stored` is the host's findings before it (checks, and applies that
/// changed something). A `late` report is kept and counted, but a late
/// check (older than the host's last report) leaves the host's findings
/// and the drift clusters as the newer report left them, and a late apply
/// (older than the host's last apply of that revision) the revision's
/// outcome and failures. An apply closes the findings of the resources it
/// changed unless it is `older` than the host's last report (a check after
/// it may have seen them drift again).
pub(super) fn writes(
    s: &Submitted,
    stored: &HashMap<String, Stored>,
    late: bool,
    older: bool,
    batch: &mut BatchState,
    stmts: &mut Vec<Stmt>,
) {
    let report = &s.report;
    let host = report.host.as_str();
    let apply = report.kind == ReportKind::Apply;
    let failed_apply = apply && !report.failures.is_empty();
    let labels = serde_json::to_string(&report.labels).unwrap_or_default();
    // A late report is older than what it would replace: stored and counted only.
    if apply && !older {
        applied_writes(report, stored, batch, stmts);
    }
    if !late {
        if apply {
            rollout_writes(report, s.outbox.store, &labels, failed_apply, batch, stmts);
            revisions_retention(host, s.reports_kept, stmts);
        } else {
            finding_writes(report, stored, batch, stmts);
        }
    }
    let trees_differing = report
        .trees
        .iter()
        .filter(|t| t.observed.as_deref() != Some(t.declared.as_str()))
        .count() as u64;
    let check_errors = !apply && report.exit_code == 1;
    let picture = HostPicture {
        labels: &report.labels,
        last_report: Some(views::rfc3339(report.finished_at)),
        last_report_kind: Some(report.kind.word()),
        revision: Some(report.revision.as_str()),
        counts: &report.counts,
        resources: report.resources,
        quarantined: report.quarantined.len() as u64,
        trees: report.trees.len() as u64,
        trees_differing,
        expected_interval_s: report.expected_interval_s,
        outbox_depth: s.outbox.depth,
        datum_version: Some(report.datum_version.as_str()),
    };
    if let Some(sampling) = report.sampling.filter(|s| s.deep) {
        stmts.push(Stmt::new(
            "INSERT INTO deep_checks (host, round, at) VALUES ($1, $2, $3) ON CONFLICT (host, round) DO NOTHING",
            vec![host.into(), sampling.round.into(), report.finished_at.into()],
        ));
        stmts.push(Stmt::new(
            "UPDATE hosts SET last_deep_round = $2 WHERE name = $1 \
             AND (last_deep_round IS NULL OR last_deep_round < $2)",
            vec![host.into(), sampling.round.into()],
        ));
    }
    // Retention: the newest N reports of the host stay.
    stmts.push(Stmt::new(
        "DELETE FROM reports WHERE host = $1 AND id <= \
         (SELECT id FROM reports WHERE host = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
        vec![host.into(), i64::from(s.reports_kept).into()],
    ));
    // The host's picture and its counts, one new version of its row, last:
    // the counts see the changes above, whatever order reports came in.
    stmts.push(Stmt::new(
        PICTURE.as_str(),
        vec![
            host.into(),
            labels.into(),
            report.finished_at.into(),
            report.kind.word().into(),
            report.seq.into(),
            report.revision.as_str().into(),
            report.catalogue.as_str().into(),
            report.datum_version.as_str().into(),
            serde_json::to_string(&report.counts)
                .unwrap_or_default()
                .into(),
            report.resources.into(),
            (report.quarantined.len() as u64).into(),
            report.expected_interval_s.into(),
            // Counts a host states: bounded, so that adding them up (the
            // dropped reports are a running total) stays an integer on
            // both stores; PostgreSQL failed every later report of a host
            // that once sent i64::MAX ('bigint out of range'), SQLite
            // turned the total into a REAL.
            s.outbox.depth.min(OUTBOX_COUNT_LIMIT).into(),
            s.outbox.dropped.min(OUTBOX_COUNT_LIMIT).into(),
            serde_json::to_string(&report.classes)
                .unwrap_or_default()
                .into(),
            (report.trees.len() as u64).into(),
            trees_differing.into(),
            apply.into(),
            failed_apply.into(),
            check_errors.into(),
            picture.members().into(),
            store_val(s.outbox.store),
        ],
    ));
}

/// The host picture's columns a report sets (`column = $n`): only a report
/// at least as recent as the last one moves them (a late duplicate of an
/// old report cannot), and its counts (reports held, findings open) are
/// taken whatever order reports came in.
static PICTURE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    // Not late (`is_late`): finished after the last report, or in its
    // second with a number at least as high, or from another store than
    // the last ($22, when the report says), or, when it does not say, a
    // new store's first.
    const FRESH: &str = "(last_report_at IS NULL OR last_report_at < $3 \
         OR (last_report_at = $3 AND (seq <= $5 \
         OR (CAST($22 AS TEXT) IS NULL AND $5 = 1) \
         OR (CAST($22 AS TEXT) IS NOT NULL AND (store_id IS NULL OR store_id <> CAST($22 AS TEXT))))))";
    let set = [
        ("labels", "$2"),
        ("last_report_at", "$3"),
        ("last_report_kind", "$4"),
        ("seq", "$5"),
        ("revision", "$6"),
        ("catalogue", "$7"),
        ("datum_version", "$8"),
        ("counts", "$9"),
        ("resources", "$10"),
        ("quarantined", "$11"),
        ("expected_interval_s", "$12"),
        ("outbox_depth", "$13"),
        ("classes", "$15"),
        ("trees", "$16"),
        ("trees_differing", "$17"),
        (
            "last_apply_at",
            "CASE WHEN $18 = 1 THEN $3 ELSE last_apply_at END",
        ),
        (
            "last_apply_revision",
            "CASE WHEN $18 = 1 THEN $6 ELSE last_apply_revision END",
        ),
        (
            "last_apply_failed",
            "CASE WHEN $18 = 1 THEN $19 ELSE last_apply_failed END",
        ),
        (
            "check_errors",
            "CASE WHEN $18 = 1 THEN check_errors ELSE $20 END",
        ),
        ("view_json", "$21"),
        ("store_id", "$22"),
    ]
    .iter()
    .map(|(column, value)| format!("{column} = CASE WHEN {FRESH} THEN {value} ELSE {column} END"))
    .collect::<Vec<_>>()
    .join(", ");
    // Reports the host's outbox dropped (full) are announced once, with
    // the next delivery: they add up, whatever order reports came in (the
    // next report's 0 must not wipe them out).
    format!(
        "UPDATE hosts SET {set}, \
         outbox_dropped = outbox_dropped + $14, \
         reports_held = (SELECT count(*) FROM reports WHERE reports.host = $1), \
         open_findings = (SELECT count(*) FROM findings WHERE findings.host = $1) \
         WHERE name = $1"
    )
});
