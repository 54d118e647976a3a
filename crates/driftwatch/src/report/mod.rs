//! Every way a [`Report`](crate::classify::Report) leaves the program.
//!
//! `text` is for a terminal or a CI log, `json` for machines (versioned schema),
//! `markdown` for a GitHub issue and the step summary. Renderers return strings and never
//! write; the CLI decides where output goes. They only ever see values that survived
//! masking at parse time, so no renderer needs to know what is secret.

pub mod json;
pub mod markdown;
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
