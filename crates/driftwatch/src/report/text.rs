//! One line per finding, like a plan: `-/+`, `-`, `~`, `=` for drift and `+`/`~`/`-` for
//! unapplied changes. A multi-line value (a startup script, a policy) also gets a line
//! diff under its finding, indented, from state to observed (`-` what the last apply
//! recorded, `+` what is there now), with a header that names both sides.
//! [`summary_line`] is printed apart (on stderr), so stdout holds only the report. Colour
//! only when asked (the CLI asks when stdout is a terminal and `NO_COLOR` is unset).

use super::{excerpt_pair, line_diff};
use crate::classify::{Category, Finding, Report};

/// Longest value shown on one line; the Markdown and JSON reports carry more.
const MAX_VALUE_CHARS: usize = 60;
/// Diffs listed per line before "(+N more)".
const MAX_DIFFS: usize = 4;

/// The painter both tools share (`datum_report::style`).
pub(crate) use datum_report::style::Paint;

/// The line diffs of a finding's multi-line values, indented under its line.
fn diff_blocks(finding: &Finding, paint: &Paint) -> String {
    let mut out = String::new();
    for d in finding.diffs.iter().filter(|d| !d.shown.is_sensitive()) {
        let (Some(before), Some(after)) = (d.shown.before(), d.shown.after()) else {
            continue;
        };
        if let Some(diff) = line_diff(d.shown.path(), before, after) {
            for line in diff.lines() {
                out.push_str("    ");
                out.push_str(&paint.diff_line(&visible(line)));
                out.push('\n');
            }
        }
    }
    out
}

/// A line of a value as it may reach a terminal or a CI log
/// (`datum_core::text::visible`): a value changed outside cannot clear the
/// screen, retitle the window or draw text that is not there. Tabs stay.
fn visible(line: &str) -> std::borrow::Cow<'_, str> {
    datum_core::text::visible(line, &['\t'])
}

fn diff_list(finding: &Finding) -> String {
    let mut parts: Vec<String> = finding
        .diffs
        .iter()
        .take(MAX_DIFFS)
        .map(|d| {
            let (before, after) = excerpt_pair(
                d.shown.before_display(),
                d.shown.after_display(),
                MAX_VALUE_CHARS,
            );
            format!("{}: {before} -> {after}", d.shown.path())
        })
        .collect();
    if finding.diffs.len() > MAX_DIFFS {
        parts.push(format!("(+{} more)", finding.diffs.len() - MAX_DIFFS));
    }
    parts.join(", ")
}

/// The line for one finding, without colour.
pub fn finding_line(finding: &Finding) -> String {
    finding_line_painted(finding, &Paint { on: false })
}

fn finding_line_painted(finding: &Finding, paint: &Paint) -> String {
    let diffs = diff_list(finding);
    let mut details: Vec<String> = Vec::new();
    match finding.category {
        Category::Replaced => {
            let forcing = if finding.forcing_paths.is_empty() {
                &finding.replace_paths
            } else {
                &finding.forcing_paths
            };
            if !diffs.is_empty() {
                details.push(diffs);
            }
            if !forcing.is_empty() {
                let verb = if forcing.len() == 1 {
                    "forces"
                } else {
                    "force"
                };
                details.push(format!("{} {verb} replacement", forcing.join(", ")));
            }
            details.push(finding.consequence());
        }
        Category::DeletedOutside => details.push(finding.consequence()),
        Category::ChangedOutside => {
            details.push(finding.consequence());
            if !diffs.is_empty() {
                details.push(diffs);
            }
        }
        Category::Ignored => {
            if !diffs.is_empty() {
                details.push(diffs);
            }
            details.push(finding.consequence());
        }
    }
    let mut line = format!(
        "{} {} {}: {}",
        paint.marker(finding.category.marker()),
        finding.address,
        finding.category.phrase(),
        details.join("; ")
    );
    if let Some(prev) = &finding.previous_address {
        line.push_str(&format!(" (moved from {prev})"));
    }
    if let Some(age) = &finding.age {
        line.push_str(&format!(" ({})", age.describe("night", "nights")));
    }
    line
}

/// The text report: one finding per line, then pending changes.
pub fn render(report: &Report, colour: bool) -> String {
    let paint = Paint { on: colour };
    let mut out = String::new();
    for finding in &report.findings {
        out.push_str(&finding_line_painted(finding, &paint));
        out.push('\n');
        out.push_str(&diff_blocks(finding, &paint));
    }
    for pending in &report.pending {
        out.push_str(&format!(
            "{} {} {} (an unapplied change, not drift)",
            paint.marker(pending.marker()),
            pending.address,
            pending.action
        ));
        if !pending.paths.is_empty() {
            let shown: Vec<&str> = pending
                .paths
                .iter()
                .take(MAX_DIFFS)
                .map(String::as_str)
                .collect();
            out.push_str(&format!(": {}", shown.join(", ")));
            if pending.paths.len() > MAX_DIFFS {
                out.push_str(&format!(" (+{} more)", pending.paths.len() - MAX_DIFFS));
            }
        }
        out.push('\n');
    }
    out
}

/// `shop-prod: 4 actionable (...), 1 ignored, 1 pending; fingerprint ...`
pub fn summary_line(report: &Report) -> String {
    if report.findings.is_empty() && report.pending.is_empty() {
        return format!("{}: no drift; fingerprint clean", report.stack);
    }
    let mut parts = Vec::new();
    for category in [
        Category::Replaced,
        Category::DeletedOutside,
        Category::ChangedOutside,
    ] {
        let n = report.count(category);
        if n > 0 {
            parts.push(format!("{n} {}", category.phrase()));
        }
    }
    let breakdown = if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    };
    format!(
        "{}: {} actionable{breakdown}, {} ignored, {} pending; fingerprint {}",
        report.stack,
        report.actionable(),
        report.count(Category::Ignored),
        report.pending.len(),
        report.fingerprint()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_sent() {
        assert_eq!(visible("plain\ttext é"), "plain\ttext é");
        assert_eq!(
            visible("+\u{1b}]0;pwned\u{7}\u{1b}[2Jok\rfake\u{202e}x"),
            "+\\u{1b}]0;pwned\\u{7}\\u{1b}[2Jok\\u{d}fake\\u{202e}x"
        );
    }
}
