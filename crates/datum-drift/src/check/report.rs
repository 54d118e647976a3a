//! The report of one `datum check`: the model and its three renderings
//! (human, JSON, Markdown), built on `datum_report` so a bot finds a host's
//! report by its dedupe key and tells new drift from old by a fingerprint
//! that leaves values out.
//!
//! Owns: [`CheckReport`] and [`human`], [`json()`](json()), [`markdown`], and
//! its `datum_report::render::Render` implementation over them. Must not:
//! print (the binary writes the strings), read the host, or show a value of a
//! sensitive resource (the findings already carry none).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use datum_report::markdown::{Table, cell, inline_code, marker_line};
use datum_report::render::Render;
use datum_report::style::{self, Paint};
use serde_json::{Value, json};

use super::findings::CheckFinding;

/// The `format_version` of the check's JSON document (each finding's
/// `changed_by` list was added within version 1: a reader that does not know
/// it ignores it).
pub const FORMAT_VERSION: &str = "1";

/// One finding with its history and what the class's policy did about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    pub finding: CheckFinding,
    /// Unix seconds of the first check in the current unbroken run.
    pub first_seen: i64,
    /// Consecutive checks that saw it (this one included).
    pub passes: u64,
    /// `reported`, `reverted`, `revert failed: ...`, `accepted (patch ...)`,
    /// `quarantined`, `backed off`...
    pub action: String,
    /// What the action came to, for what counts it (the agent's metrics):
    /// never read back from the words.
    pub handling: Handling,
    /// The class's `on_change_by` rule that chose the policy
    /// (`on_change_by.person: quarantine`); `None`: the class's `policy`.
    pub rule: Option<String>,
}

/// What a class's policy did about a finding, as a state: the word a
/// person reads is [`Reported::action`]; this is what is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Handling {
    /// Still drifted: reported, backed off, or an act only said (`would
    /// revert`, `would quarantine`), or a resource the apply never made
    /// match.
    #[default]
    Open,
    /// Reverted to its declaration.
    Reverted,
    /// Accepted: a patch for the repository was written.
    Accepted,
    /// The revert was tried and failed.
    RevertFailed,
    /// A quarantine holds it: made now, made before, or a person's.
    Quarantined,
}

impl Handling {
    /// The state the agent's `datum_resources` gauge counts the resource
    /// in (one of `datum_agent::STATES`).
    pub fn state(self) -> &'static str {
        match self {
            Handling::Open => "drifted",
            Handling::Reverted => "changed",
            Handling::Accepted => "converged",
            Handling::RevertFailed => "failed",
            Handling::Quarantined => "quarantined",
        }
    }
}

/// Counters for the summary line and for benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckStats {
    pub resources: usize,
    /// Files trusted unread by metadata-first evaluation.
    pub metadata_only: usize,
    /// Files a metadata pass read because their record was racy or their
    /// metadata had moved, found as declared and recorded as verified again
    /// (the next pass trusts them unread).
    pub verified_again: usize,
    /// Whether content was read (false for a metadata pass of sampling).
    pub deep: bool,
    pub duration_ms: u64,
    /// Whether the catalogue was the snapshot of an earlier compile of the
    /// unchanged repository (false: compiled by this check).
    pub catalogue_reused: bool,
}

/// Everything one check found.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckReport {
    pub host: String,
    /// The host's labels (what chose its layers).
    pub labels: BTreeMap<String, String>,
    /// The layers of `datum.yaml` this host gets, in order.
    pub layers: Vec<String>,
    pub findings: Vec<Reported>,
    /// Quarantined resources (`Kind[name]` or `host`) with the reason and who.
    pub quarantined: Vec<(String, String)>,
    /// Resources that could not be inspected, with the reason.
    pub errors: Vec<(String, String)>,
    /// What the check's passes (a revert is an apply pass) said that is no
    /// resource's failure, as apply's summary says it
    /// (`datum_engine::PassSummary::warnings`: a shadow-utils program's
    /// warning on success, a staging folder moved away). Built without a
    /// sensitive value.
    pub warnings: Vec<String>,
    pub stats: CheckStats,
}

impl CheckReport {
    /// `datum-` + 12 hex digits of the host name.
    pub fn dedupe_key(&self) -> String {
        datum_report::dedupe_key("datum", &self.host)
    }

    /// Value-free fingerprint of the findings (`clean` when there are none).
    pub fn fingerprint(&self) -> String {
        let sigs: Vec<_> = self
            .findings
            .iter()
            .map(|r| r.finding.finding.signature())
            .collect();
        datum_report::fingerprint(&sigs)
    }

    /// Drift (or a quarantine) was found.
    pub fn drifted(&self) -> bool {
        !self.findings.is_empty() || !self.quarantined.is_empty()
    }
}

fn when(secs: i64) -> String {
    datum_report::time::rfc3339(secs)
}

/// The categories in the order a report lists them (worst first), with the
/// plan marker and colour of each; an unknown category comes last, as `~`.
const CATEGORIES: &[(&str, &str, &str)] = &[
    ("invalid_live_config", "!", style::RED),
    ("activation_owed", "!", style::RED),
    ("deleted_outside", "-", style::RED),
    ("type_changed", "-/+", style::MAGENTA),
    ("changed_outside", "~", style::YELLOW),
    ("unmanaged", "+", style::CYAN),
];

fn category_rank(category: &str) -> (usize, &'static str, &'static str) {
    CATEGORIES
        .iter()
        .position(|(c, _, _)| *c == category)
        .map_or((CATEGORIES.len(), "~", style::YELLOW), |i| {
            (i, CATEGORIES[i].1, CATEGORIES[i].2)
        })
}

/// Findings per category, in report order.
fn counts(report: &CheckReport) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    let mut sorted: Vec<&str> = report
        .findings
        .iter()
        .map(|r| r.finding.finding.category.as_str())
        .collect();
    sorted.sort_by_key(|c| (category_rank(c).0, *c));
    for c in sorted {
        match counts.last_mut() {
            Some((last, n)) if last == c => *n += 1,
            _ => counts.push((c.to_owned(), 1)),
        }
    }
    counts
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Text for a terminal, laid out like `datum plan`: a header naming the host,
/// its labels and the layers used; the findings grouped by category (worst
/// first), one aligned line each with the plan's marker, its details
/// indented under it; quarantines and errors; a summary line with the
/// counts. With `color`, markers and categories are coloured.
pub fn human(report: &CheckReport, color: bool) -> String {
    let paint = Paint::new(color);
    let mut out = String::new();
    let labels: Vec<String> = report
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(
        out,
        "{}",
        paint.wrap(style::BOLD, &format!("Check of {}", report.host))
    );
    let _ = writeln!(
        out,
        "  labels  {}",
        if labels.is_empty() {
            "(none)".to_owned()
        } else {
            labels.join(", ")
        }
    );
    let _ = writeln!(
        out,
        "  layers  {}",
        if report.layers.is_empty() {
            "(none)".to_owned()
        } else {
            report.layers.join(", ")
        }
    );
    let mut rows: Vec<&Reported> = report.findings.iter().collect();
    rows.sort_by_key(|r| {
        let category = &r.finding.finding.category;
        (category_rank(category).0, category.clone())
    });
    let subject_width = rows
        .iter()
        .map(|r| r.finding.finding.subject.chars().count())
        .chain(report.quarantined.iter().map(|(w, _)| w.chars().count()))
        .chain(report.errors.iter().map(|(w, _)| w.chars().count()))
        .max()
        .unwrap_or(0);
    let class_width = rows
        .iter()
        .map(|r| r.finding.class.chars().count() + 2)
        .max()
        .unwrap_or(0);
    let action_width = rows
        .iter()
        .map(|r| shown(&r.action).chars().count())
        .max()
        .unwrap_or(0);
    let mut current: Option<&str> = None;
    for r in rows {
        let f = &r.finding;
        let category = f.finding.category.as_str();
        let (_, marker, sgr) = category_rank(category);
        if current != Some(category) {
            let n = report
                .findings
                .iter()
                .filter(|o| o.finding.finding.category == category)
                .count();
            let _ = writeln!(out);
            let _ = writeln!(out, "{} ({n})", paint.wrap(sgr, category));
            current = Some(category);
        }
        let class = format!("[{}]", f.class);
        let _ = writeln!(
            out,
            "  {} {}  {class:<class_width$}  {:<action_width$}  first seen {}, {}",
            paint.padded(sgr, marker, 3),
            paint.padded(style::BOLD, &f.finding.subject, subject_width),
            shown(&r.action),
            when(r.first_seen),
            plural(r.passes as usize, "check", "checks"),
        );
        if let Some(target) = &f.target {
            let _ = writeln!(out, "        path: {}", shown(target));
        }
        if let Some(rule) = &r.rule {
            let _ = writeln!(out, "    rule: {}", shown(rule));
        }
        for d in &f.finding.diffs {
            let _ = writeln!(
                out,
                "        {}: {} -> {}",
                shown(d.path()),
                shown(d.before_display()),
                shown(d.after_display())
            );
        }
        for w in &f.changed_by {
            let _ = writeln!(out, "    changed by: {}", shown(&w.summary()));
        }
        if let Some(diff) = &f.content_diff {
            for line in diff.lines() {
                // The live side is what the host holds: a line is shown,
                // never obeyed (a tab stays a tab).
                let line = datum_core::text::visible(line, &['\t']);
                let sgr = if line.starts_with("+++") || line.starts_with("---") {
                    style::BOLD
                } else if line.starts_with('+') {
                    style::GREEN
                } else if line.starts_with('-') {
                    style::RED
                } else if line.starts_with("@@") {
                    style::CYAN
                } else {
                    ""
                };
                let line = if sgr.is_empty() {
                    line.into_owned()
                } else {
                    paint.wrap(sgr, &line)
                };
                let _ = writeln!(out, "        {line}");
            }
        }
    }
    if !report.quarantined.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{} ({})",
            paint.wrap(style::MAGENTA, "quarantined"),
            report.quarantined.len()
        );
        for (what, why) in &report.quarantined {
            // A reason is a person's words (`datum quarantine --reason`): one
            // line of the report, never a sequence the terminal obeys.
            let _ = writeln!(
                out,
                "  {} {:<subject_width$}  {}",
                paint.padded(style::MAGENTA, "#", 3),
                what,
                datum_core::text::visible(why, &[])
            );
        }
    }
    if !report.errors.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{} ({})",
            paint.wrap(style::RED_BOLD, "not inspected"),
            report.errors.len()
        );
        for (what, why) in &report.errors {
            let _ = writeln!(
                out,
                "  {} {:<subject_width$}  {}",
                paint.padded(style::RED_BOLD, "!", 3),
                what,
                shown(why)
            );
        }
    }
    let by_category: Vec<String> = counts(report)
        .iter()
        .map(|(c, n)| format!("{n} {c}"))
        .collect();
    let findings = if by_category.is_empty() {
        "no drift".to_owned()
    } else {
        format!(
            "{} ({})",
            plural(report.findings.len(), "finding", "findings"),
            by_category.join(", ")
        )
    };
    let _ = writeln!(out);
    let line = format!(
        "Check: {findings}, {} quarantined, {}; {} inspected ({}{} trusted by metadata{}) in {} ms.",
        report.quarantined.len(),
        plural(report.errors.len(), "error", "errors"),
        plural(report.stats.resources, "resource", "resources"),
        if report.stats.deep {
            ""
        } else {
            "metadata pass, "
        },
        report.stats.metadata_only,
        match report.stats.verified_again {
            0 => String::new(),
            n => format!(", {n} verified again"),
        },
        report.stats.duration_ms
    );
    let _ = writeln!(out, "{}", paint.wrap(style::BOLD, &line));
    // As apply's summary says them (a path a local user chose is in it:
    // escaped, as every name from the host is).
    for warning in &report.warnings {
        let _ = writeln!(
            out,
            "{}: {}",
            paint.wrap(style::YELLOW, "warning"),
            shown(warning)
        );
    }
    out
}

/// Text from the host (an entry's name, a value, an error naming a live
/// path, an attributed writer) as one line of the terminal report: a
/// control character in it is written as an escape, never obeyed.
fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    datum_core::text::visible(text, &[])
}

/// The check's report in every format of `datum_report::render`: the
/// renderings below, behind the one interface every report is shown through.
impl Render for CheckReport {
    fn what(&self) -> String {
        "the check report".to_owned()
    }

    fn human(&self, paint: Paint) -> String {
        human(self, paint.on)
    }

    fn json(&self) -> String {
        datum_report::json::pretty(&datum_report::json::document("", json(self)))
    }

    fn markdown(&self) -> Option<String> {
        Some(markdown(self))
    }
}

/// The JSON document of `--output json` (every time RFC 3339 UTC).
pub fn json(report: &CheckReport) -> Value {
    let findings: Vec<Value> = report
        .findings
        .iter()
        .map(|r| {
            let f = &r.finding;
            json!({
                "subject": f.finding.subject,
                "category": f.finding.category,
                "class": f.class,
                "target": f.target,
                "diffs": f.finding.diffs,
                "content_diff": f.content_diff,
                "changed_by": f.changed_by,
                "first_seen": when(r.first_seen),
                "passes": r.passes,
                "action": r.action,
                "rule": r.rule,
            })
        })
        .collect();
    let counts: serde_json::Map<String, Value> = counts(report)
        .into_iter()
        .map(|(c, n)| (c, json!(n)))
        .collect();
    let mut document = json!({
        "format_version": FORMAT_VERSION,
        "host": report.host,
        "labels": report.labels,
        "layers": report.layers,
        "dedupe_key": report.dedupe_key(),
        "fingerprint": report.fingerprint(),
        "drift": report.drifted(),
        "counts": counts,
        "findings": findings,
        "quarantined": report.quarantined.iter().map(|(w, r)| json!({"target": w, "reason": r})).collect::<Vec<_>>(),
        "errors": report.errors.iter().map(|(w, r)| json!({"resource": w, "reason": r})).collect::<Vec<_>>(),
        "resources": report.stats.resources,
        "metadata_only": report.stats.metadata_only,
        "verified_again": report.stats.verified_again,
        "deep": report.stats.deep,
        "duration_ms": report.stats.duration_ms,
        "catalogue": if report.stats.catalogue_reused { "snapshot" } else { "compiled" },
    });
    // Only when there is one, as in apply's document.
    if let (false, Some(fields)) = (report.warnings.is_empty(), document.as_object_mut()) {
        fields.insert("warnings".to_owned(), report.warnings.clone().into());
    }
    document
}

/// The Markdown report (`--markdown FILE`), for an issue tracker: the marker
/// line with the dedupe key first, so a bot finds its issue again.
pub fn markdown(report: &CheckReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", marker_line(&report.dedupe_key()));
    let _ = writeln!(out, "## Drift on {}", inline_code(&report.host));
    let _ = writeln!(out);
    if !report.drifted() && report.errors.is_empty() {
        let _ = writeln!(out, "No drift: the host matches its catalogue.");
        return out;
    }
    let _ = writeln!(
        out,
        "{} finding(s), fingerprint {}.",
        report.findings.len(),
        inline_code(&report.fingerprint())
    );
    let _ = writeln!(out);
    if !report.findings.is_empty() {
        let mut table = Table::new(&[
            "Resource",
            "Category",
            "Class",
            "What differs",
            "First seen",
            "Checks",
            "Action",
        ]);
        for r in &report.findings {
            let f = &r.finding;
            let what: Vec<String> = f
                .finding
                .diffs
                .iter()
                .map(|d| {
                    format!(
                        "{}: {} → {}",
                        d.path(),
                        d.before_display(),
                        d.after_display()
                    )
                })
                .collect();
            table.row_markdown(vec![
                inline_code(&f.finding.subject),
                cell(&f.finding.category),
                cell(&f.class),
                cell(&what.join("; ")),
                cell(&when(r.first_seen)),
                r.passes.to_string(),
                cell(&r.action),
            ]);
        }
        out.push_str(&table.render());
    }
    for r in &report.findings {
        if let Some(diff) = &r.finding.content_diff {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "<details><summary>{}</summary>\n\n```diff\n{}```\n</details>",
                inline_code(&r.finding.finding.subject),
                diff.replace("```", "`\u{200b}``")
            );
        }
    }
    let attributed: Vec<&Reported> = report
        .findings
        .iter()
        .filter(|r| !r.finding.changed_by.is_empty())
        .collect();
    if !attributed.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "Changed by:");
        for r in attributed {
            for w in &r.finding.changed_by {
                let _ = writeln!(
                    out,
                    "- {}: {}",
                    inline_code(&r.finding.finding.subject),
                    cell(&w.summary())
                );
            }
            if let Some(rule) = &r.rule {
                let _ = writeln!(
                    out,
                    "- {}: rule {} ({})",
                    inline_code(&r.finding.finding.subject),
                    inline_code(rule),
                    cell(&r.action)
                );
            }
        }
    }
    if !report.quarantined.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Quarantined (excluded from apply until `datum release`):"
        );
        for (what, why) in &report.quarantined {
            let _ = writeln!(out, "- {}: {}", inline_code(what), cell(why));
        }
    }
    if !report.errors.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "Not inspected:");
        for (what, why) in &report.errors {
            let _ = writeln!(out, "- {}: {}", inline_code(what), cell(why));
        }
    }
    if !report.warnings.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "Warnings:");
        for warning in &report.warnings {
            let _ = writeln!(out, "- {}", cell(warning));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use datum_core::ResourceId;
    use datum_report::{AttrDiff, Finding};

    use super::*;

    fn sample() -> CheckReport {
        let finding = |subject: &str, category: &str, diffs, content_diff| CheckFinding {
            finding: Finding {
                subject: subject.to_owned(),
                category: category.to_owned(),
                diffs,
            },
            id: ResourceId::parse(subject).unwrap(),
            class: "normal".to_owned(),
            target: Some("/etc/motd".to_owned()),
            content_diff,
            changed_by: Vec::new(),
        };
        CheckReport {
            host: "web-01".to_owned(),
            labels: BTreeMap::from([
                ("env".to_owned(), "prod".to_owned()),
                ("role".to_owned(), "web".to_owned()),
            ]),
            layers: vec!["base".to_owned(), "web".to_owned()],
            findings: vec![
                Reported {
                    finding: finding(
                        "File[motd]",
                        "changed_outside",
                        vec![AttrDiff::plain("mode", "0600", "0644")],
                        Some("--- a\n+++ b\n@@ -1 +1 @@\n-x | y\n+hello\n".to_owned()),
                    ),
                    first_seen: 1_700_000_000,
                    passes: 3,
                    action: "reported".to_owned(),
                    handling: Handling::Open,
                    rule: None,
                },
                Reported {
                    finding: finding(
                        "Tree[conf]",
                        "unmanaged",
                        vec![AttrDiff::plain("a.conf~", "present", "undeclared")],
                        None,
                    ),
                    first_seen: 1_700_000_060,
                    passes: 1,
                    action: "reported".to_owned(),
                    handling: Handling::Open,
                    rule: None,
                },
                Reported {
                    finding: finding(
                        "File[secret]",
                        "changed_outside",
                        vec![AttrDiff::sensitive("content")],
                        None,
                    ),
                    first_seen: 1_700_000_060,
                    passes: 1,
                    action: "reverted".to_owned(),
                    handling: Handling::Reverted,
                    rule: None,
                },
            ],
            quarantined: vec![(
                "File[hosts]".to_owned(),
                "by a person: incident 42".to_owned(),
            )],
            errors: vec![],
            warnings: vec![],
            stats: CheckStats {
                resources: 12,
                metadata_only: 0,
                verified_again: 0,
                deep: true,
                duration_ms: 5,
                catalogue_reused: false,
            },
        }
    }

    #[test]
    fn human_report() {
        insta::assert_snapshot!(human(&sample(), false));
    }

    #[test]
    fn a_quarantine_reason_is_one_line_that_drives_no_terminal() {
        let mut r = sample();
        r.quarantined = vec![(
            "File[motd]".to_owned(),
            "incident 42\nFile[x]  fake row\u{1b}[2J".to_owned(),
        )];
        let text = human(&r, false);
        assert!(
            text.contains("incident 42\\u{a}File[x]  fake row\\u{1b}[2J"),
            "{text}"
        );
    }

    #[test]
    fn the_summary_says_how_many_were_verified_again_only_when_some_were() {
        let mut r = sample();
        r.stats.deep = false;
        r.stats.metadata_only = 7;
        assert!(human(&r, false).contains("(metadata pass, 7 trusted by metadata) in 5 ms."));
        r.stats.verified_again = 3;
        assert!(
            human(&r, false)
                .contains("(metadata pass, 7 trusted by metadata, 3 verified again) in 5 ms.")
        );
        assert_eq!(json(&r)["verified_again"], 3);
    }

    #[test]
    fn json_document() {
        insta::assert_json_snapshot!(json(&sample()));
    }

    #[test]
    fn markdown_report() {
        insta::assert_snapshot!(markdown(&sample()));
    }

    #[test]
    fn clean_markdown_says_so() {
        let mut r = sample();
        r.findings.clear();
        r.quarantined.clear();
        let text = markdown(&r);
        assert!(text.starts_with("<!-- datum-"));
        assert!(text.contains("No drift"));
        assert_eq!(r.fingerprint(), "clean");
    }

    #[test]
    fn fingerprint_ignores_values_and_history() {
        let a = sample();
        let mut b = sample();
        b.findings[0].passes = 9;
        b.findings[0].finding.finding.diffs = vec![AttrDiff::plain("mode", "0700", "0644")];
        assert_eq!(a.fingerprint(), b.fingerprint());
        b.findings.pop();
        assert_ne!(a.fingerprint(), b.fingerprint());
    }

    #[test]
    fn human_is_plain_without_colour_and_never_shows_secrets() {
        let text = human(&sample(), false);
        assert!(!text.contains('\x1b'));
        assert!(text.contains("content: (sensitive) -> (sensitive)"));
        assert!(human(&sample(), true).contains("\x1b[33m"));
        assert!(!json(&sample()).to_string().contains('\x1b'));
        let j = json(&sample());
        assert_eq!(j["findings"].as_array().unwrap().len(), 3);
        assert_eq!(j["dedupe_key"], datum_report::dedupe_key("datum", "web-01"));
        assert_eq!(j["format_version"], FORMAT_VERSION);
    }

    #[test]
    fn every_rendering_names_who_changed_it() {
        let mut r = sample();
        let mut w = datum_core::ChangedBy::unknown("/etc/motd", "modified", 5, Some(77), "x");
        w.kind = datum_core::WriterKind::Person;
        w.reason = None;
        w.via = "sshd session from 10.0.0.7 port 5555".to_owned();
        w.uid = Some(1001);
        w.user = Some("alice".to_owned());
        w.process = Some("vim /etc/motd".to_owned());
        // On the sensitive one too: attribution is metadata.
        r.findings[2].finding.changed_by = vec![w.clone()];
        r.findings[2].rule = Some("on_change_by.person: quarantine".to_owned());
        let line =
            "alice (uid 1001) via sshd session from 10.0.0.7 port 5555: vim /etc/motd (pid 77)";
        assert!(human(&r, false).contains(&format!("    changed by: {line}")));
        assert!(markdown(&r).contains(&format!("- `File[secret]`: {line}")));
        assert!(
            markdown(&r)
                .contains("- `File[secret]`: rule `on_change_by.person: quarantine` (reverted)")
        );
        assert!(human(&r, false).contains("    rule: on_change_by.person: quarantine\n"));
        assert_eq!(
            json(&r)["findings"][2]["rule"],
            "on_change_by.person: quarantine"
        );
        let j = json(&r);
        assert_eq!(j["findings"][2]["changed_by"][0]["user"], "alice");
        assert_eq!(j["findings"][2]["changed_by"][0]["kind"], "person");
        assert_eq!(j["findings"][0]["changed_by"], serde_json::json!([]));
        assert!(!markdown(&sample()).contains("Changed by"));
    }
}
