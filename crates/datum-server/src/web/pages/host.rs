//! `/hosts/{name}`: one host (or stack). Its labels, revision, classes with
//! their detection bounds, open findings with their diffs (a sensitive
//! resource's values are never in a report, so the page says
//! `(sensitive)`), Tree fingerprints, what its last apply did, the
//! revisions it applied, what its recent passes warned of, its recent
//! reports and days, what is quarantined,
//! and the quarantine and release forms with every instruction ever given
//! to it (who, why, when, and when the host confirmed it).

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use datum_fleet::Finding;
use serde::Deserialize;
use serde_json::json;

use super::frame;
use crate::api::App;
use crate::store::Backend;
use crate::views;
use crate::web::auth::Operator;
use crate::web::queries::{self, StoredReport};
use crate::web::render::{self, WebError};

/// Reports read for the diffs of open findings (the newest report that
/// carried a finding has its diff).
const REPORTS_READ: i64 = 50;

/// The newest reports (of those read) whose warnings the page shows.
const WARNING_REPORTS: usize = 5;

/// A Tree root as the page shows it: its first 16 characters, or for a
/// sensitive Tree's keyed digest (`keyed-blake3:...`, the host's MAC of
/// the root, see `datum_fleet::TreeFingerprint`) `keyed ` and the first 12
/// of the digest, so the prefix does not take the whole column.
fn short_root(root: &str) -> String {
    match root.strip_prefix(datum_fleet::report::KEYED_PREFIX) {
        Some(digest) => format!("keyed {}", digest.chars().take(12).collect::<String>()),
        None => root.chars().take(16).collect(),
    }
}

#[derive(Debug, Default, Deserialize)]
struct Query {
    /// The key of an instruction just asked for (the page says so).
    asked: Option<String>,
}

/// A unified diff as lines a template can colour.
pub fn diff_lines(diff: &str) -> Vec<serde_json::Value> {
    diff.lines()
        .map(|l| {
            let kind = if l.starts_with("+++") || l.starts_with("---") {
                "head"
            } else if l.starts_with("@@") {
                "hunk"
            } else if l.starts_with('+') {
                "add"
            } else if l.starts_with('-') {
                "del"
            } else {
                "ctx"
            };
            json!({"kind": kind, "text": l})
        })
        .collect()
}

/// The newest report's copy of the finding signed `signature`.
fn newest<'r>(reports: &'r [StoredReport], signature: &str) -> Option<(&'r Finding, u64)> {
    reports.iter().find_map(|r| {
        r.report
            .findings
            .iter()
            .find(|f| f.signature == signature)
            .map(|f| (f, r.report.seq))
    })
}

pub async fn page<B: Backend>(
    State(app): State<Arc<App<B>>>,
    op: Operator,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, WebError> {
    let q: Query = serde_urlencoded::from_str(raw.as_deref().unwrap_or("")).unwrap_or_default();
    let Some(row) = app.fleet.host(&name).await? else {
        return Err(WebError::NotFound(format!(
            "no host or stack named `{name}` is enrolled"
        )));
    };
    let staleness = app.staleness();
    let fleet = &app.fleet;
    let (reports, last_apply, open, revisions, history, instructions) = tokio::try_join!(
        queries::reports(fleet, &name, REPORTS_READ),
        queries::last_apply(fleet, &name),
        queries::findings(fleet, &name),
        queries::host_revisions(fleet, &name, 20),
        fleet.history(&name, 25),
        crate::instructions::of_host(fleet, &name, 100),
    )?;
    let state = views::host_state(&row, &staleness);
    let latest = reports.first().map(|r| &r.report);

    let findings: Vec<_> = open
        .iter()
        .map(|f| {
            let found = newest(&reports, &f.signature);
            let (changes, diff, seq, checks, changed_by) = match found {
                Some((finding, seq)) => (
                    finding.changes.clone(),
                    finding.content_diff.as_deref().map(diff_lines),
                    Some(seq),
                    finding.checks.unwrap_or(f.checks),
                    finding
                        .changed_by
                        .iter()
                        .map(|w| json!({"line": w.line(), "kind": w.kind, "at": w.at}))
                        .collect(),
                ),
                None => (Vec::new(), None, None, f.checks, Vec::new()),
            };
            json!({
                "subject": f.subject,
                "category": f.category,
                "class": f.class,
                "paths": f.paths,
                "first_seen": f.first_seen,
                "last_seen": f.last_seen,
                "checks": checks,
                "observed": f.observed,
                "changes": changes,
                "diff": diff,
                "seq": seq,
                "sensitive": changes.iter().any(|c| c.sensitive),
                "changed_by": changed_by,
            })
        })
        .collect();

    let apply = last_apply.as_ref().map(|a| {
        let r = &a.report;
        json!({
            "seq": r.seq,
            "finished_at": r.finished_at,
            "received_at": a.received_at,
            "revision": r.revision,
            "exit_code": r.exit_code,
            "duration_ms": r.duration_ms,
            "counts": r.counts,
            "trusted_by_metadata": r.trusted_by_metadata,
            "changed": r.changed,
            "changed_total": r.changed_total,
            "validators": r.validators,
            "failures": r.failures,
        })
    });

    // What the host's recent passes warned of (a report carries them only
    // for a server that takes them: `datum_fleet::Reply::takes`), newest
    // first.
    let warnings: Vec<_> = reports
        .iter()
        .filter(|r| !r.report.warnings.is_empty())
        .take(WARNING_REPORTS)
        .map(|r| {
            // Bounded as ingest bounds them, for reports stored before.
            let mut shown = r.report.warnings.clone();
            crate::api::bound_warnings(&mut shown);
            json!({
                "seq": r.report.seq,
                "kind": r.report.kind.word(),
                "finished_at": r.report.finished_at,
                "warnings": shown,
            })
        })
        .collect();

    // Resource ids this page knows of, offered when quarantining.
    let mut targets: BTreeSet<String> = BTreeSet::new();
    for f in &open {
        targets.insert(f.subject.clone());
    }
    if let Some(a) = &last_apply {
        targets.extend(a.report.changed.iter().cloned());
        targets.extend(a.report.failures.iter().map(|f| f.resource.clone()));
    }
    if let Some(l) = latest {
        targets.extend(l.trees.iter().map(|t| t.resource.clone()));
    }
    let quarantined = latest.map(|l| l.quarantined.clone()).unwrap_or_default();
    for q in &quarantined {
        targets.remove(&q.target);
    }
    let pending: Vec<_> = instructions
        .iter()
        .filter(|i| i.done_at.is_none())
        .collect();

    let classes: Vec<_> = row
        .classes
        .iter()
        .map(|c| {
            json!({
                "class": c.class,
                "interval_s": c.interval_s,
                "bound_s": c.bound_ms.map(|b| b.div_ceil(1000)),
                "resources": c.resources,
                "policy": c.policy,
            })
        })
        .collect();
    let trees: Vec<_> = latest
        .map(|l| {
            l.trees
                .iter()
                .map(|t| {
                    json!({
                        "resource": t.resource,
                        "declared": t.declared,
                        "observed": t.observed,
                        "declared_short": short_root(&t.declared),
                        "observed_short": t.observed.as_deref().map(short_root),
                        "same": t.observed.as_deref() == Some(t.declared.as_str()),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let max_daily = history
        .as_ref()
        .and_then(|h| h.daily.iter().map(|d| d.reports).max())
        .unwrap_or(0);
    render::page(
        "host.html",
        frame(
            &app,
            &op,
            if row.kind == "stack" {
                "stacks"
            } else {
                "hosts"
            },
            json!({
                "host": {
                    "name": row.name,
                    "kind": row.kind,
                    "state": state,
                    "labels": row.labels,
                    "enrolled_at": row.enrolled_at,
                    "last_report_at": row.last_report_at,
                    "last_report_kind": row.last_report_kind,
                    "revision": row.revision,
                    "last_apply_revision": row.last_apply_revision,
                    "datum_version": row.datum_version,
                    "expected_interval_s": row.expected_interval_s,
                    "allowed_s": staleness.allowed(&row),
                    "overdue_s": staleness.overdue(&row),
                    "outbox_depth": row.outbox_depth,
                    "outbox_dropped": row.outbox_dropped,
                    "reports_held": row.reports_held,
                    "resources": row.resources,
                    "counts": row.counts,
                    "findings": row.open_findings,
                    "trees": row.trees,
                    "trees_differing": row.trees_differing,
                },
                "classes": classes,
                "findings": findings,
                "trees": trees,
                "warnings": warnings,
                "pending_changes": latest.map(|l| l.pending.clone()).unwrap_or_default(),
                "quarantined": quarantined,
                "apply": apply,
                "revisions": revisions,
                "history": history.as_ref().map(|h| &h.reports),
                "daily": history.as_ref().map(|h| h.daily.iter().take(30).rev().collect::<Vec<_>>()),
                "max_daily": max_daily,
                "instructions": instructions,
                "pending": pending,
                "targets": targets,
                "asked": q.asked,
            }),
        ),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn diff_lines_are_told_apart() {
        let lines =
            super::diff_lines("--- a (live)\n+++ a (declared)\n@@ -1 +1 @@\n-old\n+new\n same");
        let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["head", "head", "hunk", "del", "add", "ctx"]);
    }

    /// A sensitive Tree's keyed root shows as `keyed` and its digest, not
    /// as the prefix cut at 16 characters; any text a host sent is cut on
    /// character boundaries.
    #[test]
    fn tree_roots_are_shortened_keyed_or_plain() {
        let keyed = format!("keyed-blake3:{}", "0123456789abcdef".repeat(4));
        assert_eq!(super::short_root(&keyed), "keyed 0123456789ab");
        assert_eq!(super::short_root(&"ab".repeat(32)), "abababababababab");
        assert_eq!(super::short_root("ééééééééééééééééé"), "é".repeat(16));
        assert_eq!(super::short_root("keyed-blake3:"), "keyed ");
    }
}
