//! Every way a [`Report`](crate::classify::Report) leaves the program.
//!
//! `text` is for a terminal or a CI log, `json` for machines (versioned schema),
//! `markdown` for a GitHub issue and the step summary; `views` puts them behind
//! `datum_report::render::Render`, the interface every Datum report is shown through. Renderers return strings and never
//! write; the CLI decides where output goes, except that `step_summary` owns the append to
//! `$GITHUB_STEP_SUMMARY`. They only ever see values that survived
//! masking at parse time, so no renderer needs to know what is secret.

pub mod json;
pub mod markdown;
pub mod step_summary;
pub mod summary;
pub mod text;
pub mod views;

/// The two sides of every drift diff, named once so that every format says the same.
/// Drift reads in the direction reality moved: from what the last apply recorded in state
/// to what the provider reports now, so a line added outside is a `+` line.
pub const BEFORE_SIDE: &str = "state (last apply)";
pub const AFTER_SIDE: &str = "observed (refresh)";

/// Longest multi-line value (in lines, per side) that gets a line diff.
const MAX_DIFF_LINES: usize = 2000;

/// A unified line diff, state -> observed, of two values rendered as JSON text: only when
/// both are strings and at least one of them spans several lines (startup scripts,
/// policies, configuration files). The header names both sides.
pub(crate) fn line_diff(path: &str, before: &str, after: &str) -> Option<String> {
    let old: String = serde_json::from_str(before).ok()?;
    let new: String = serde_json::from_str(after).ok()?;
    if !old.contains('\n') && !new.contains('\n') {
        return None;
    }
    if old.lines().count() > MAX_DIFF_LINES || new.lines().count() > MAX_DIFF_LINES {
        return None;
    }
    let diff = similar::TextDiff::configure()
        .timeout(std::time::Duration::from_millis(250))
        .diff_lines(&old, &new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("{path}: {BEFORE_SIDE}"),
            &format!("{path}: {AFTER_SIDE}"),
        )
        .to_string();
    Some(text)
}

/// Shorten a rendered value for one-line displays, on a character boundary.
pub(crate) fn truncate(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Shorten two values so that where they differ stays visible: when both are long, the
/// shared beginning is cut to a few characters before the first difference.
pub(crate) fn excerpt_pair(before: &str, after: &str, max_chars: usize) -> (String, String) {
    let b: Vec<char> = before.chars().collect();
    let a: Vec<char> = after.chars().collect();
    if b.len() <= max_chars && a.len() <= max_chars {
        return (before.to_owned(), after.to_owned());
    }
    let common = b.iter().zip(&a).take_while(|(x, y)| x == y).count();
    // Keep a little context before the first difference.
    let start = common.saturating_sub(12);
    let cut = |chars: &[char]| -> String {
        let body: String = chars.iter().skip(start).collect();
        let body = truncate(&body, max_chars);
        if start > 0 {
            format!("…{body}")
        } else {
            body
        }
    };
    (cut(&b), cut(&a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_diff_reads_from_state_to_observed() {
        let d = line_diff(
            "user_data",
            r##""#!/bin/sh\napt-get install -y nginx\n""##,
            r##""#!/bin/sh\napt-get install -y nginx\napt-get install -y libpq5\n""##,
        )
        .unwrap();
        assert_eq!(
            d,
            "--- user_data: state (last apply)\n+++ user_data: observed (refresh)\n@@ -1,2 +1,3 @@\n #!/bin/sh\n apt-get install -y nginx\n+apt-get install -y libpq5\n"
        );
        assert!(line_diff("p", r#""a""#, r#""b""#).is_none());
        assert!(line_diff("p", "1", "2").is_none());
        assert!(line_diff("p", r#""a\nb""#, "null").is_none());
    }

    #[test]
    fn excerpt_shows_the_difference() {
        let old = format!("{}nginx", "x".repeat(100));
        let new = format!("{}nginx libpq5", "x".repeat(100));
        let (b, a) = excerpt_pair(&old, &new, 30);
        assert!(b.starts_with('…') && b.ends_with("nginx"), "{b}");
        assert!(a.contains("libpq5"), "{a}");
        assert_eq!(excerpt_pair("a", "b", 30), ("a".to_owned(), "b".to_owned()));
        assert_eq!(truncate("héllo", 3), "hé…");
    }
}
