//! The report of one `datum check`: the model and its three renderings
//! (human, JSON, Markdown), built on `datum_report` so a bot finds a host's
//! report by its dedupe key and tells new drift from old by a fingerprint
//! that leaves values out.
//!
//! Owns: [`CheckReport`] and [`human`], [`json()`](json()), [`markdown`]. Must not:
//! print (the binary writes the strings), read the host, or show a value of a
//! sensitive resource (the findings already carry none).

use std::fmt::Write as _;

use datum_report::markdown::{Table, cell, inline_code, marker_line};
use serde_json::{Value, json};

use super::findings::CheckFinding;

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
    /// The class's `on_change_by` rule that chose the policy
    /// (`on_change_by.person: quarantine`); `None`: the class's `policy`.
    pub rule: Option<String>,
}

/// Counters for the summary line and for benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckStats {
    pub resources: usize,
    /// Files trusted unread by metadata-first evaluation.
    pub metadata_only: usize,
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
    pub findings: Vec<Reported>,
    /// Quarantined resources (`Kind[name]` or `host`) with the reason and who.
    pub quarantined: Vec<(String, String)>,
    /// Resources that could not be inspected, with the reason.
    pub errors: Vec<(String, String)>,
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
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Text for a terminal; with `color`, categories are coloured.
pub fn human(report: &CheckReport, color: bool) -> String {
    let paint = |code: &str, text: &str| {
        if color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    };
    let mut out = String::new();
    for r in &report.findings {
        let f = &r.finding;
        let code = match f.finding.category.as_str() {
            "deleted_outside" | "type_changed" => "31",
            "unmanaged" => "36",
            _ => "33",
        };
        let _ = writeln!(
            out,
            "{}  {}  [{}] {} (first seen {}, {} check{})",
            paint(code, &f.finding.category),
            f.finding.subject,
            f.class,
            r.action,
            when(r.first_seen),
            r.passes,
            if r.passes == 1 { "" } else { "s" }
        );
        if let Some(target) = &f.target {
            let _ = writeln!(out, "    path: {target}");
        }
        if let Some(rule) = &r.rule {
            let _ = writeln!(out, "    rule: {rule}");
        }
        for d in &f.finding.diffs {
            let _ = writeln!(
                out,
                "    {}: {} -> {}",
                d.path(),
                d.before_display(),
                d.after_display()
            );
        }
        for w in &f.changed_by {
            let _ = writeln!(out, "    changed by: {}", w.summary());
        }
        if let Some(diff) = &f.content_diff {
            for line in diff.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    for (what, why) in &report.quarantined {
        let _ = writeln!(out, "{}  {what}: {why}", paint("35", "quarantined"));
    }
    for (what, why) in &report.errors {
        let _ = writeln!(out, "{}  {what}: {why}", paint("31;1", "error"));
    }
    let _ = writeln!(
        out,
        "Check: {} finding(s), {} quarantined, {} error(s); {} resources inspected ({}{} trusted by metadata) in {} ms.",
        report.findings.len(),
        report.quarantined.len(),
        report.errors.len(),
        report.stats.resources,
        if report.stats.deep {
            ""
        } else {
            "metadata pass, "
        },
        report.stats.metadata_only,
        report.stats.duration_ms
    );
    out
}

/// The `format_version` of [`json()`](json()) (each finding's `changed_by`
/// list was added within version 1: a reader that does not know it ignores
/// it).
pub const FORMAT_VERSION: &str = "1";

/// The JSON document of `--output json`.
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
                "first_seen": r.first_seen,
                "passes": r.passes,
                "action": r.action,
                "rule": r.rule,
            })
        })
        .collect();
    json!({
        "format_version": FORMAT_VERSION,
        "host": report.host,
        "dedupe_key": report.dedupe_key(),
        "fingerprint": report.fingerprint(),
        "drift": report.drifted(),
        "findings": findings,
        "quarantined": report.quarantined.iter().map(|(w, r)| json!({"target": w, "reason": r})).collect::<Vec<_>>(),
        "errors": report.errors.iter().map(|(w, r)| json!({"resource": w, "reason": r})).collect::<Vec<_>>(),
        "resources": report.stats.resources,
        "metadata_only": report.stats.metadata_only,
        "deep": report.stats.deep,
        "duration_ms": report.stats.duration_ms,
        "catalogue": if report.stats.catalogue_reused { "snapshot" } else { "compiled" },
    })
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
                    rule: None,
                },
            ],
            quarantined: vec![(
                "File[hosts]".to_owned(),
                "by a person: incident 42".to_owned(),
            )],
            errors: vec![],
            stats: CheckStats {
                resources: 12,
                metadata_only: 0,
                deep: true,
                duration_ms: 5,
                catalogue_reused: false,
            },
        }
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
