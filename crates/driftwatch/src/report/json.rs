//! The JSON report, schema `driftwatch/report` version 1 (documented in
//! `docs/driftwatch.md`). Additive changes keep the version; anything that removes or
//! renames a field bumps it.

use serde::Serialize;

use crate::classify::{Category, Report};

pub const SCHEMA: &str = "driftwatch/report";
pub const VERSION: u32 = 1;

#[derive(Serialize)]
struct JsonReport<'a> {
    schema: &'static str,
    version: u32,
    stack: &'a str,
    key: &'a str,
    fingerprint: String,
    exit_code: i32,
    mode: &'static str,
    summary: Summary,
    findings: Vec<JsonFinding<'a>>,
    pending: Vec<JsonPending<'a>>,
    notes: &'a [String],
}

#[derive(Serialize)]
struct Summary {
    actionable: usize,
    replaced: usize,
    deleted_outside: usize,
    changed_outside: usize,
    ignored: usize,
    pending: usize,
}

#[derive(Serialize)]
struct JsonFinding<'a> {
    address: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    previous_address: Option<&'a str>,
    category: &'static str,
    actionable: bool,
    next_apply: Option<&'a str>,
    consequence: String,
    paths: Vec<&'a str>,
    diffs: Vec<JsonDiff<'a>>,
    replace_paths: &'a [String],
    forcing_paths: &'a [String],
    ignored_by: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    first_seen: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nights: Option<u32>,
}

#[derive(Serialize)]
struct JsonDiff<'a> {
    path: &'a str,
    before: Option<&'a str>,
    after: Option<&'a str>,
    sensitive: bool,
}

#[derive(Serialize)]
struct JsonPending<'a> {
    address: &'a str,
    action: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    paths: &'a [String],
}

/// Render the report; `exit_code` is what the process will exit with.
pub fn render(report: &Report, exit_code: i32) -> String {
    let doc = JsonReport {
        schema: SCHEMA,
        version: VERSION,
        stack: &report.stack,
        key: &report.key,
        fingerprint: report.fingerprint(),
        exit_code,
        mode: if report.with_plan {
            "full"
        } else {
            "drift-only"
        },
        summary: Summary {
            actionable: report.actionable(),
            replaced: report.count(Category::Replaced),
            deleted_outside: report.count(Category::DeletedOutside),
            changed_outside: report.count(Category::ChangedOutside),
            ignored: report.count(Category::Ignored),
            pending: report.pending.len(),
        },
        findings: report
            .findings
            .iter()
            .map(|f| JsonFinding {
                address: &f.address,
                previous_address: f.previous_address.as_deref(),
                category: f.category.id(),
                actionable: f.is_actionable(),
                next_apply: f.next_apply.as_ref().map(|a| a.as_str()),
                consequence: f.consequence(),
                paths: f.diffs.iter().map(|d| d.shown.path()).collect(),
                diffs: f
                    .diffs
                    .iter()
                    .map(|d| JsonDiff {
                        path: d.shown.path(),
                        before: d.shown.before(),
                        after: d.shown.after(),
                        sensitive: d.shown.is_sensitive(),
                    })
                    .collect(),
                replace_paths: &f.replace_paths,
                forcing_paths: &f.forcing_paths,
                ignored_by: &f.ignored_by,
                first_seen: f
                    .age
                    .as_ref()
                    .map(|a| a.first_seen.format("%Y-%m-%d").to_string()),
                nights: f.age.as_ref().map(|a| a.count),
            })
            .collect(),
        pending: report
            .pending
            .iter()
            .map(|p| JsonPending {
                address: &p.address,
                action: &p.action,
                reason: p.reason.as_deref(),
                paths: &p.paths,
            })
            .collect(),
        notes: &report.notes,
    };
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_else(|_| "{}".to_owned());
    text.push('\n');
    text
}
