//! The JSON report, schema `driftwatch/report`, `format_version` "1" (documented in
//! `docs/driftwatch.md`). Additive changes keep the version; anything that removes or
//! renames a field bumps it. Times are RFC 3339 in UTC, like every Datum JSON document.

use serde::Serialize;

use super::{AFTER_SIDE, BEFORE_SIDE, line_diff};
use crate::classify::{Category, Report};

pub const SCHEMA: &str = "driftwatch/report";
/// The `format_version` every driftwatch JSON document carries (as Datum's do).
pub const FORMAT_VERSION: &str = "1";
/// The older numeric field, kept so existing readers keep working.
pub const VERSION: u32 = 1;

/// What a JSON report says besides the report itself.
#[derive(Debug, Clone, Copy)]
pub struct Meta<'a> {
    /// The code the process exits with.
    pub exit_code: i32,
    /// RFC 3339 UTC time of the run.
    pub generated_at: &'a str,
    /// Present with `--timings`.
    pub timings: Option<&'a Timings>,
}

/// Where the time of one stack went (`--timings`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Timings {
    /// Waiting for the engine: both plans and both `show -json`.
    pub engine_seconds: f64,
    /// Everything else driftwatch did for this stack: parsing, classifying, rendering.
    pub driftwatch_seconds: f64,
    pub steps: Vec<TimedStep>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimedStep {
    pub step: String,
    pub seconds: f64,
}

#[derive(Serialize)]
struct DiffSides {
    before: &'static str,
    after: &'static str,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    format_version: &'static str,
    schema: &'static str,
    version: u32,
    generated_at: &'a str,
    stack: &'a str,
    key: &'a str,
    fingerprint: String,
    exit_code: i32,
    mode: &'static str,
    /// What `before` and `after` of every diff are.
    diff_sides: DiffSides,
    summary: Summary,
    findings: Vec<JsonFinding<'a>>,
    pending: Vec<JsonPending<'a>>,
    notes: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    timings: Option<&'a Timings>,
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
    /// A unified diff, state -> observed, when a value spans several lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    line_diff: Option<String>,
}

#[derive(Serialize)]
struct JsonPending<'a> {
    address: &'a str,
    action: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    paths: &'a [String],
}

/// Render the report as one JSON document.
pub fn render(report: &Report, meta: Meta<'_>) -> String {
    let mut text =
        serde_json::to_string_pretty(&document(report, meta)).unwrap_or_else(|_| "{}".to_owned());
    text.push('\n');
    text
}

/// The report as a JSON value (a multi-stack document holds one per stack).
pub fn value(report: &Report, meta: Meta<'_>) -> serde_json::Value {
    serde_json::to_value(document(report, meta)).unwrap_or_default()
}

fn document<'a>(report: &'a Report, meta: Meta<'a>) -> JsonReport<'a> {
    let exit_code = meta.exit_code;
    JsonReport {
        format_version: FORMAT_VERSION,
        schema: SCHEMA,
        version: VERSION,
        generated_at: meta.generated_at,
        stack: &report.stack,
        key: &report.key,
        fingerprint: report.fingerprint(),
        exit_code,
        mode: if report.with_plan {
            "full"
        } else {
            "drift-only"
        },
        diff_sides: DiffSides {
            before: BEFORE_SIDE,
            after: AFTER_SIDE,
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
                        line_diff: match (d.shown.before(), d.shown.after()) {
                            (Some(b), Some(a)) => line_diff(d.shown.path(), b, a),
                            _ => None,
                        },
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
        timings: meta.timings,
    }
}
