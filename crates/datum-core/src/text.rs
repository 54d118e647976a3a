//! Text from outside (a host's report, a remote's message, a value changed
//! outside) as it may reach a terminal, a CI log or a log line: one rule for
//! every front-end; and the line a byte of a file is on, for messages that
//! name `file:line`.

use std::borrow::Cow;

/// `text` with what could drive a terminal written as an escape
/// (`\u{1b}`): control characters other than those in `keep` (a view that
/// prints several lines keeps `'\n'`, a line diff keeps `'\t'`), and the
/// bidirectional overrides that make text read otherwise than it is. An
/// escape sequence then cannot move the cursor, clear the screen, retitle
/// the window, write the clipboard (OSC 52) or forge a line. Borrowed when
/// there is nothing to escape.
pub fn visible<'t>(text: &'t str, keep: &[char]) -> Cow<'t, str> {
    let hidden = |c: char| {
        (c.is_control() && !keep.contains(&c))
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The 1-based line of byte `offset` in `text` (for `file:line:`
/// messages from a parser's byte span): one more than the newlines before
/// it. An offset past the end is the last line. Bytes, not characters: a
/// prefix that is not UTF-8 (where a decoder stopped) is counted as well.
pub fn line_of(text: impl AsRef<[u8]>, offset: usize) -> usize {
    let text = text.as_ref();
    let end = offset.min(text.len());
    text[..end].iter().filter(|b| **b == b'\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_offset_is_on_the_line_its_newlines_before_it_say() {
        assert_eq!(line_of("", 0), 1);
        assert_eq!(line_of("a\nb\nc", 0), 1);
        // The newline itself ends its line.
        assert_eq!(line_of("a\nb\nc", 1), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 4), 3);
        assert_eq!(line_of("a\nb\nc", 99), 3);
        assert_eq!(line_of("a\r\nb", 3), 2);
        // Where a UTF-8 decoder stopped: counted in bytes, as it is.
        assert_eq!(line_of(b"a\n\xff\nx", 4), 3);
    }

    #[test]
    fn what_could_drive_a_terminal_is_written_as_an_escape() {
        assert_eq!(
            visible("+\u{1b}]0;pwned\u{7}\u{1b}[2Jok\rfake\u{202e}x\ty", &['\t']),
            "+\\u{1b}]0;pwned\\u{7}\\u{1b}[2Jok\\u{d}fake\\u{202e}x\ty"
        );
        assert_eq!(visible("a\nb\tc", &['\n']), "a\nb\\u{9}c");
        assert_eq!(visible("a\nb", &[]), "a\\u{a}b");
        assert!(matches!(visible("plain é", &[]), Cow::Borrowed("plain é")));
    }
}
