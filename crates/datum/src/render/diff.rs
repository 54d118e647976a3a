//! Field differences and unified content diffs, as text.

use datum_core::diff::{DECLARED_UNREAD, LIVE_WITHHELD};
use datum_core::text::visible;
use datum_core::{ContentChange, SENSITIVE_PLACEHOLDER};
use datum_engine::ResourceReport;
use datum_report::style::{self, Paint};
use similar::{ChangeTag, TextDiff};

/// The indented lines under a resource: one per changed field, then the
/// content diff (or `(sensitive)`).
pub fn field_lines(r: &ResourceReport, color: bool) -> String {
    let mut out = String::new();
    let value_text = |v| value_text(v, r.sensitive);
    for change in &r.diff.changes {
        // A Tree entry's name as found on the host: a newline in it would
        // print a line of its own, an escape sequence drive the terminal.
        let field = datum_core::text::visible(&change.field, &[]);
        if change.before.is_none() {
            // Something new: its value, not "(absent) -> value".
            out.push_str(&format!(
                "    {}: {}\n",
                field,
                value_text(change.after.as_ref())
            ));
        } else {
            out.push_str(&format!(
                "    {}: {} -> {}\n",
                field,
                value_text(change.before.as_ref()),
                value_text(change.after.as_ref())
            ));
        }
    }
    if let Some(content) = &r.diff.content {
        if r.sensitive {
            out.push_str(&format!("    content: {SENSITIVE_PLACEHOLDER}\n"));
        } else {
            out.push_str(&content_diff(
                content,
                r.target.as_deref().unwrap_or(&r.id.to_string()),
                color,
            ));
        }
    }
    out
}

/// A field's value as text: a string quoted, other JSON as it is. A value
/// masked in a sensitive resource's report (the engine's, or its kind's
/// for a field such as `password_hash`) is the bare marker, never a
/// quoted string that reads as if it had been declared.
fn value_text(v: Option<&serde_json::Value>, sensitive: bool) -> String {
    match v {
        None => "(absent)".to_owned(),
        Some(serde_json::Value::String(s)) if sensitive && s == SENSITIVE_PLACEHOLDER => {
            SENSITIVE_PLACEHOLDER.to_owned()
        }
        Some(serde_json::Value::String(s)) => format!("{s:?}"),
        Some(other) => other.to_string(),
    }
}

/// SHA-256 of no bytes: declared content that is really empty.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// A unified diff of text content, or a checksum line for binary content
/// and for a live file not everyone may read (its lines never shown).
pub fn content_diff(change: &ContentChange, label: &str, color: bool) -> String {
    if change.live_withheld {
        return format!(
            "    content: {} -> {} ({LIVE_WITHHELD})\n",
            change.before_sha256.as_deref().unwrap_or("(none)"),
            change.after_sha256
        );
    }
    if change.declared_unread {
        return format!(
            "    content: {} -> {} ({DECLARED_UNREAD})\n",
            change.before_sha256.as_deref().unwrap_or("(none)"),
            change.after_sha256
        );
    }
    let before = change.before.as_deref().unwrap_or_default();
    let (Some(old), Some(new)) = (text(before), text(&change.after)) else {
        return format!(
            "    content: {} -> {} (binary)\n",
            change.before_sha256.as_deref().unwrap_or("(none)"),
            change.after_sha256
        );
    };
    let declared_missing = change.after.is_empty() && change.after_sha256 != EMPTY_SHA256;
    if (change.before.is_none() && change.before_sha256.is_some()) || declared_missing {
        return format!(
            "    content: {} -> {} (too large to diff: over {})\n",
            change.before_sha256.as_deref().unwrap_or("(none)"),
            change.after_sha256,
            indicatif::HumanBytes(datum_engine::DIFF_CONTENT_LIMIT)
        );
    }
    let diff = TextDiff::configure()
        .timeout(datum_core::diff::TEXT_DIFF_TIMEOUT)
        .diff_lines(old, new);
    // The label is a path; a Tree entry's name in it is as found on the
    // host: a control character is written as an escape, never sent.
    let label = visible(label, &[]);
    let mut out = format!("    --- {label} (live)\n    +++ {label} (declared)\n");
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        out.push_str(&format!("    {}\n", hunk.header()));
        for change in hunk.iter_changes() {
            let (sign, sgr) = match change.tag() {
                ChangeTag::Delete => ("-", style::RED),
                ChangeTag::Insert => ("+", style::GREEN),
                ChangeTag::Equal => (" ", ""),
            };
            // The live side is whatever the file holds: its control
            // characters (but a tab) are written as escapes, as `datum
            // check` writes them.
            // A line ends in a newline (CRLF's carriage return is part of
            // the ending), or in a lone carriage return, which `similar`
            // also ends a line at: shown as its escape.
            let value = change.value();
            let body = value
                .strip_suffix("\r\n")
                .or_else(|| value.strip_suffix('\n'))
                .unwrap_or(value);
            let mut line = format!("{sign}{}", datum_core::text::visible(body, &['\t']));
            if body.len() < value.len() || body.ends_with('\r') {
                line.push('\n');
            }
            if !line.ends_with('\n') {
                line.push_str("\n\\ No newline at end of file\n");
            }
            for l in line.lines() {
                if sign != " " {
                    out.push_str(&format!("    {}\n", Paint::new(color).wrap(sgr, l)));
                } else {
                    out.push_str(&format!("    {l}\n"));
                }
            }
        }
    }
    out
}

fn text(bytes: &[u8]) -> Option<&str> {
    if bytes.contains(&0) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use datum_core::{Action, Diff, FieldChange, Outcome, ResourceId};
    use serde_json::json;

    use super::*;

    fn report(sensitive: bool, changes: Vec<FieldChange>) -> ResourceReport {
        ResourceReport {
            id: ResourceId::new("User", "vault"),
            origin: Default::default(),
            target: None,
            action: Action::Update,
            diff: Diff {
                changes,
                ..Diff::default()
            },
            outcome: Outcome::Unchanged,
            sensitive,
            detail: None,
            withheld: None,
            duration_ms: 1,
        }
    }

    fn change(field: &str, before: Option<&str>, after: &str) -> FieldChange {
        FieldChange {
            field: field.to_owned(),
            before: before.map(|b| json!(b)),
            after: Some(json!(after)),
        }
    }

    /// A masked value prints as the bare marker, not as a quoted string
    /// that reads like a declared value; the same text declared by a
    /// resource that is not sensitive is a value, and stays quoted.
    #[test]
    fn a_masked_value_is_the_bare_marker() {
        let masked = report(
            true,
            vec![
                change("shell", Some(SENSITIVE_PLACEHOLDER), SENSITIVE_PLACEHOLDER),
                change("home", None, SENSITIVE_PLACEHOLDER),
            ],
        );
        assert_eq!(
            field_lines(&masked, false),
            "    shell: (sensitive) -> (sensitive)\n    home: (sensitive)\n"
        );
        let declared = report(false, vec![change("comment", Some("x"), "(sensitive)")]);
        assert_eq!(
            field_lines(&declared, false),
            "    comment: \"x\" -> \"(sensitive)\"\n"
        );
    }

    /// A field's name (a Tree entry's, as found on the host) and a content
    /// diff's lines (the live file's) come from outside: their control
    /// characters are written as escapes, as `datum check` writes them, so
    /// a name or a line cannot forge a line of the plan or drive the
    /// terminal reading it.
    #[test]
    fn names_and_lines_from_the_host_cannot_forge_a_line_or_drive_the_terminal() {
        let r = report(
            false,
            vec![change(
                "tree:evil\n+ File[fake]  create\u{1b}[31m",
                Some("unmanaged"),
                "removed",
            )],
        );
        assert_eq!(
            field_lines(&r, false),
            "    tree:evil\\u{a}+ File[fake]  create\\u{1b}[31m: \"unmanaged\" -> \"removed\"\n"
        );
        let change = ContentChange {
            before: Some(b"a\tb\n\x1b]0;title\x07\x1b[2J\rPlan: 0 to change\n".to_vec()),
            after: b"a\tb\n".to_vec(),
            before_sha256: Some("x".to_owned()),
            after_sha256: "y".to_owned(),
            live_withheld: false,
            declared_unread: false,
        };
        let text = content_diff(&change, "/etc/motd", false);
        assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
        assert!(
            text.contains("    -\\u{1b}]0;title\\u{7}\\u{1b}[2J\\u{d}\n    -Plan: 0 to change\n"),
            "{text:?}"
        );
        assert!(!text.contains("No newline"), "{text:?}");
        assert!(text.contains(" a\tb\n"), "a tab stays: {text:?}");
    }

    /// A live file not everyone may read shows checksums and why, never a
    /// line, even were its bytes at hand.
    #[test]
    fn a_withheld_live_file_shows_checksums_and_why() {
        let change = ContentChange {
            before: Some(b"root:$6$hash:19000::::::\n".to_vec()),
            after: b"x\n".to_vec(),
            before_sha256: Some("aa".to_owned()),
            after_sha256: "bb".to_owned(),
            live_withheld: true,
            declared_unread: false,
        };
        assert_eq!(
            content_diff(&change, "/etc/shadow", false),
            format!("    content: aa -> bb ({LIVE_WITHHELD})\n")
        );
    }

    /// Declared bytes refused for the diff (their repository file no
    /// longer holds what the catalogue recorded) are said to be so, not
    /// called too large, whatever their size.
    #[test]
    fn declared_bytes_refused_are_said_to_be_so() {
        let change = ContentChange {
            before: Some(b"by hand\n".to_vec()),
            after: Vec::new(),
            before_sha256: Some("aa".to_owned()),
            after_sha256: "bb".to_owned(),
            live_withheld: false,
            declared_unread: true,
        };
        assert_eq!(
            content_diff(&change, "/etc/motd", false),
            format!("    content: aa -> bb ({DECLARED_UNREAD})\n")
        );
    }
}
