//! Every way a [`Report`](crate::classify::Report) leaves the program.
//!
//! `text` is for a terminal or a CI log, `json` for machines (versioned schema),
//! `markdown` for a GitHub issue and the step summary. Renderers return strings and never
//! write; the CLI decides where output goes, except that `step_summary` owns the append to
//! `$GITHUB_STEP_SUMMARY`. They only ever see values that survived
//! masking at parse time, so no renderer needs to know what is secret.

pub mod json;
pub mod markdown;
pub mod step_summary;
pub mod text;

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
