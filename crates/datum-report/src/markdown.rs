//! Markdown building blocks that keep arbitrary values from breaking a report.
//!
//! Values in drift reports are hostile to Markdown: startup scripts contain newlines and
//! pipes, shell snippets contain backticks. Every table cell goes through [`cell`] and every
//! value shown as code goes through [`inline_code`]. The last line of a report that a bot
//! updates is [`marker_line`].

/// Escape text for one cell of a pipe table: `|` becomes `\|`, line breaks become `<br>`,
/// and what could drive a terminal is written as an escape (`\u{1b}`, as
/// [`datum_core::text::visible`] writes it): a report that quotes what a host or a cloud API
/// holds is printed as well as posted.
pub fn cell(text: &str) -> String {
    let text = datum_core::text::visible(text, &['\t', '\n', '\r']);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '|' => out.push_str("\\|"),
            '\r' => {
                // A CRLF pair is one break, not two.
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                out.push_str("<br>");
            }
            '\n' => out.push_str("<br>"),
            _ => out.push(c),
        }
    }
    out
}

/// Wrap `text` as inline code that survives any backticks inside it.
///
/// CommonMark closes a code span with a backtick run of the same length as the opening one,
/// so the fence is one backtick longer than the longest run inside. A space pads the content
/// when it starts or ends with a backtick (the parser strips one space on each side).
/// Newlines are flattened to spaces, because a code span cannot hold a line break in a
/// table. Pipes are escaped so the span can sit in a table cell.
pub fn inline_code(text: &str) -> String {
    let flat: String = datum_core::text::visible(text, &['\t', '\n', '\r'])
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    let longest = longest_backtick_run(&flat);
    let fence = "`".repeat(longest + 1);
    let pad = flat.starts_with('`') || flat.ends_with('`') || flat.is_empty();
    let body = flat.replace('|', "\\|");
    if pad {
        format!("{fence} {body} {fence}")
    } else {
        format!("{fence}{body}{fence}")
    }
}

fn longest_backtick_run(text: &str) -> usize {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    longest
}

/// The HTML comment a bot searches for to find the issue of a stack or host.
pub fn marker_line(key: &str) -> String {
    format!("<!-- {key} -->")
}

/// A pipe table built row by row; every cell is escaped with [`cell`] unless the caller
/// says it is already Markdown (for example an [`inline_code`] span).
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|h| cell(h)).collect(),
            rows: Vec::new(),
        }
    }

    /// Add a row of cells that are already valid Markdown (escaped by the caller).
    pub fn row_markdown(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Render the table, ending with a newline.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!("| {} |\n", self.header.join(" | ")));
        let rule: Vec<&str> = self.header.iter().map(|_| "---").collect();
        out.push_str(&format!("| {} |\n", rule.join(" | ")));
        for row in &self.rows {
            out.push_str(&format!("| {} |\n", row.join(" | ")));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_would_drive_a_terminal_is_written_as_an_escape_in_a_cell_and_in_code() {
        // A tag value a cloud API returned, a live line: clear the screen,
        // write the clipboard (OSC 52), reorder the text (U+202E).
        let hostile = "a\u{1b}[2J\u{1b}]52;c;eA==\u{7}b\u{202e}c\td";
        for shown in [cell(hostile), inline_code(hostile)] {
            assert!(
                !shown
                    .chars()
                    .any(|c| c == '\u{1b}' || c == '\u{7}' || c == '\u{202e}'),
                "{}",
                shown.escape_debug()
            );
            assert!(
                shown.contains("a\\u{1b}[2J\\u{1b}]52;c;eA==\\u{7}b\\u{202e}c\td"),
                "{shown}"
            );
        }
    }

    #[test]
    fn cell_escapes_pipes_and_newlines() {
        assert_eq!(cell("a|b\nc\r\nd"), "a\\|b<br>c<br>d");
    }

    #[test]
    fn inline_code_plain() {
        assert_eq!(inline_code("blue"), "`blue`");
    }

    #[test]
    fn inline_code_with_backticks_uses_a_longer_fence() {
        assert_eq!(inline_code("echo `date`"), "`` echo `date` ``");
        assert_eq!(inline_code("a``b"), "```a``b```");
        assert_eq!(inline_code("`x"), "`` `x ``");
    }

    #[test]
    fn inline_code_flattens_newlines_and_escapes_pipes() {
        assert_eq!(inline_code("a|b\nc"), "`a\\|b c`");
    }

    #[test]
    fn table_renders_rows() {
        let mut t = Table::new(&["a", "b|c"]);
        t.row_markdown(vec![cell("1"), inline_code("x|y")]);
        assert_eq!(
            t.render(),
            "| a | b\\|c |\n| --- | --- |\n| 1 | `x\\|y` |\n"
        );
    }

    #[test]
    fn marker_is_an_html_comment() {
        assert_eq!(
            marker_line("driftwatch-0123456789ab"),
            "<!-- driftwatch-0123456789ab -->"
        );
    }
}
