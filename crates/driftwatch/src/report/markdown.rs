//! The Markdown report: a summary table, one state/observed table per finding, unapplied
//! changes apart, and the dedupe-key marker on the first line (as in every Markdown report of
//! Datum's) so the nightly job can find and edit the issue of this stack. Sized for a GitHub issue body (65,536 characters):
//! long values are shortened and very large reports list the rest as a count.

use datum_report::markdown::{Table, cell, inline_code, marker_line};

use super::{AFTER_SIDE, BEFORE_SIDE, line_diff, truncate};
use crate::classify::{Category, Report};

const MAX_VALUE_CHARS: usize = 200;
const MAX_SUMMARY_ROWS: usize = 150;
const MAX_DETAIL_SECTIONS: usize = 40;
const MAX_PENDING_ROWS: usize = 100;

fn code_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|i| inline_code(i))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Render the report; `generated_at` is the RFC 3339 time of the run.
pub fn render(report: &Report, generated_at: &str) -> String {
    let mut out = String::new();
    out.push_str(&marker_line(&report.key));
    out.push('\n');
    // The stack's name is the folder's when --stack does not give one.
    out.push_str(&format!(
        "## Drift report: {}\n\n",
        outside_text(&report.stack)
    ));
    out.push_str(&format!("Checked at {}.\n\n", inline_code(generated_at)));
    if report.findings.is_empty() && report.pending.is_empty() {
        out.push_str("No drift and no unapplied changes.\n\n");
    } else {
        let mut parts = Vec::new();
        for c in [
            Category::Replaced,
            Category::DeletedOutside,
            Category::ChangedOutside,
        ] {
            let n = report.count(c);
            if n > 0 {
                parts.push(format!("{n} {}", c.phrase()));
            }
        }
        out.push_str(&format!(
            "**{} actionable finding{}**{}, {} ignored, {} unapplied change{}.",
            report.actionable(),
            if report.actionable() == 1 { "" } else { "s" },
            if parts.is_empty() {
                String::new()
            } else {
                format!(" ({})", parts.join(", "))
            },
            report.count(Category::Ignored),
            report.pending.len(),
            if report.pending.len() == 1 { "" } else { "s" },
        ));
        if !report.with_plan {
            out.push_str(" Drift only: no normal plan was read, so the next apply is unknown.");
        }
        out.push_str("\n\n");
    }

    if !report.findings.is_empty() {
        let mut table = Table::new(&[
            "",
            "Address",
            "Finding",
            "Next apply",
            "Changed attributes",
            "Age",
        ]);
        for f in report.findings.iter().take(MAX_SUMMARY_ROWS) {
            let paths: Vec<&str> = f.diffs.iter().map(|d| d.shown.path()).collect();
            table.row_markdown(vec![
                inline_code(f.category.marker()),
                inline_code(&f.address),
                cell(f.category.phrase()),
                cell(
                    f.next_apply
                        .as_ref()
                        .map(|a| a.as_str())
                        .unwrap_or("unknown"),
                ),
                code_list(&paths),
                cell(
                    &f.age
                        .as_ref()
                        .map(|a| a.describe("night", "nights"))
                        .unwrap_or_default(),
                ),
            ]);
        }
        out.push_str(&table.render());
        if report.findings.len() > MAX_SUMMARY_ROWS {
            out.push_str(&format!(
                "\n…and {} more findings (see the JSON report).\n",
                report.findings.len() - MAX_SUMMARY_ROWS
            ));
        }
        out.push('\n');

        for f in report.findings.iter().take(MAX_DETAIL_SECTIONS) {
            out.push_str(&format!(
                "### {} {}: {}\n\n",
                inline_code(f.category.marker()),
                inline_code(&f.address),
                f.category.phrase()
            ));
            let mut sentence = capitalise(&f.consequence());
            if !f.forcing_paths.is_empty() || !f.replace_paths.is_empty() {
                let forcing = if f.forcing_paths.is_empty() {
                    &f.replace_paths
                } else {
                    &f.forcing_paths
                };
                let items: Vec<&str> = forcing.iter().map(String::as_str).collect();
                sentence.push_str(&format!(". Forces replacement: {}", code_list(&items)));
            }
            if let Some(prev) = &f.previous_address {
                sentence.push_str(&format!(". Moved from {}", inline_code(prev)));
            }
            if let Some(age) = &f.age {
                sentence.push_str(&format!(
                    ". {}",
                    capitalise(&age.describe("night", "nights"))
                ));
            }
            out.push_str(&sentence);
            out.push_str(".\n\n");
            if !f.diffs.is_empty() {
                let before_header = capitalise(BEFORE_SIDE);
                let after_header = capitalise(AFTER_SIDE);
                let mut table = Table::new(&["Attribute", &before_header, &after_header]);
                for d in &f.diffs {
                    let show = |v: &str| {
                        if d.shown.is_sensitive() {
                            cell(v)
                        } else {
                            inline_code(&truncate(v, MAX_VALUE_CHARS))
                        }
                    };
                    table.row_markdown(vec![
                        inline_code(d.shown.path()),
                        show(d.shown.before_display()),
                        show(d.shown.after_display()),
                    ]);
                }
                out.push_str(&table.render());
                out.push('\n');
                for d in f.diffs.iter().filter(|d| !d.shown.is_sensitive()) {
                    if let (Some(before), Some(after)) = (d.shown.before(), d.shown.after())
                        && let Some(block) = line_diff_block(d.shown.path(), before, after)
                    {
                        out.push_str(&block);
                    }
                }
            }
        }
        if report.findings.len() > MAX_DETAIL_SECTIONS {
            out.push_str(&format!(
                "…details of {} more findings are in the JSON report.\n\n",
                report.findings.len() - MAX_DETAIL_SECTIONS
            ));
        }
    }

    if !report.pending.is_empty() {
        out.push_str("### Unapplied changes (not drift)\n\n");
        out.push_str(
            "The configuration is ahead of state here; these are not changes made outside.\n\n",
        );
        let mut table = Table::new(&["", "Address", "Action", "Attributes"]);
        for p in report.pending.iter().take(MAX_PENDING_ROWS) {
            let paths: Vec<&str> = p.paths.iter().map(String::as_str).collect();
            table.row_markdown(vec![
                inline_code(p.marker()),
                inline_code(&p.address),
                outside_text(&p.action),
                code_list(&paths),
            ]);
        }
        out.push_str(&table.render());
        if report.pending.len() > MAX_PENDING_ROWS {
            out.push_str(&format!(
                "\n…and {} more.\n",
                report.pending.len() - MAX_PENDING_ROWS
            ));
        }
        out.push('\n');
    }

    if !report.notes.is_empty() {
        out.push_str("### Notes\n\n");
        for note in &report.notes {
            out.push_str(&format!("- {}\n", outside_text(note)));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "Fingerprint: {}\n\n",
        inline_code(&report.fingerprint())
    ));
    out
}

/// A collapsible line diff (state -> observed) for two multi-line strings (startup
/// scripts, config files), or `None` when the values are not both multi-line JSON strings.
fn line_diff_block(path: &str, before: &str, after: &str) -> Option<String> {
    let body = line_diff(path, before, after)?;
    // A fence longer than any backtick run inside, so the content cannot close it.
    let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    Some(format!(
        "<details><summary>line diff of <code>{}</code>: {BEFORE_SIDE} → {AFTER_SIDE}</summary>\n\n{fence}diff\n{body}{fence}\n\n</details>\n\n",
        html_text(path)
    ))
}

/// Text inside HTML (the `<summary>` line): Markdown is not read there, so `<`, `>` and `&`
/// are escaped as HTML. A path holds map keys, which anyone who can change the resource
/// outside chooses (a tag key `<img src=…>` would otherwise be markup in the issue).
fn html_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// Text from outside as Markdown text in a paragraph, a list item or a table cell: why a
/// stack could not be checked (the engine's error: what terraform printed, which holds a
/// provider's message or a name from the configuration), a note (which names addresses,
/// whose `for_each` keys come from data, and failed checks), an action the plan names.
/// `html_text`, so `<script>` or `<img …>` is text and not markup in the issue; backticks
/// as `&#96;`, since a pair would open a code span and show the escapes inside it as
/// written; then `cell` (`|`, line breaks).
pub(crate) fn outside_text(text: &str) -> String {
    cell(&html_text(text).replace('`', "&#96;"))
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().collect::<String>() + chars.as_str(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_diff_block_fences_backticks() {
        let block = line_diff_block("s", r#""one\ntwo\n""#, r#""one\n```x```\n""#).unwrap();
        assert!(
            block.contains(
                "````diff\n--- s: state (last apply)\n+++ s: observed (refresh)\n@@ -1,2 +1,2 @@\n one\n-two\n+```x```\n"
            ),
            "{block}"
        );
        assert!(block.ends_with("````\n\n</details>\n\n"), "{block}");
        assert!(line_diff_block("s", r#""a""#, r#""b""#).is_none());
        // A map key chosen outside is text in the summary line, never markup.
        let block = line_diff_block(
            r#"tags["<img src=x>&</summary>"]"#,
            r#""a\nb""#,
            r#""a\nc""#,
        )
        .unwrap();
        assert!(
            block.starts_with(
                "<details><summary>line diff of <code>tags[&quot;&lt;img src=x&gt;&amp;&lt;/summary&gt;&quot;]</code>: "
            ),
            "{block}"
        );
        assert!(line_diff_block("s", "1", "2").is_none());
    }

    #[test]
    fn notes_and_actions_from_the_plan_are_text_not_markup() {
        // A note names addresses (a `for_each` key comes from data) and failed checks; an
        // action the engine does not know is shown as the plan wrote it.
        let key = r#"aws_s3_bucket.b["<img src=x onerror=y>`k`|"]"#;
        let report = Report {
            stack: "shop".to_owned(),
            key: "k".to_owned(),
            findings: Vec::new(),
            pending: vec![crate::classify::Pending {
                address: "a.b".to_owned(),
                action: "<script>x</script>".to_owned(),
                reason: None,
                paths: Vec::new(),
            }],
            notes: vec![
                format!("{key} moved from a.c (not drift)"),
                format!("plan.json: check failed: {key} (fail)"),
            ],
            with_plan: true,
        };
        let md = render(&report, "2026-01-01T00:00:00Z");
        for raw in ["<img", "<script", "`k`", "\"|"] {
            assert!(!md.contains(raw), "holds {raw:?}: {md}");
        }
        let shown = "aws_s3_bucket.b[&quot;&lt;img src=x onerror=y&gt;&#96;k&#96;\\|&quot;]";
        assert!(
            md.contains(&format!("- {shown} moved from a.c (not drift)\n")),
            "{md}"
        );
        assert!(
            md.contains(&format!("- plan.json: check failed: {shown} (fail)\n")),
            "{md}"
        );
        assert!(md.contains("| &lt;script&gt;x&lt;/script&gt; |"), "{md}");
    }

    #[test]
    fn a_stack_named_after_its_folder_is_text_in_the_heading() {
        // Without --stack the name is the folder's, which nothing checks.
        let report = Report {
            stack: "<img src=x onerror=y>`k`".to_owned(),
            key: "k".to_owned(),
            findings: Vec::new(),
            pending: Vec::new(),
            notes: Vec::new(),
            with_plan: true,
        };
        let md = render(&report, "2026-01-01T00:00:00Z");
        assert!(
            md.contains("\n## Drift report: &lt;img src=x onerror=y&gt;&#96;k&#96;\n"),
            "{md}"
        );
    }
}
