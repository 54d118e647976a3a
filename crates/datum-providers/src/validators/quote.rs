//! The offending lines, quoted: a validator's output names a file and a line
//! (`x.conf:4`, `[x.cfg:5]`, `x line 1:`, `on line 2 of x`, `x:1:32:`); the
//! failure report shows that line of the content Datum was about to write,
//! so a person sees the mistake without opening anything.
//!
//! Only for content the caller hands in (the staged copy, the files of a
//! group laid into the view) or may read; whether the result may be shown
//! at all is the engine's decision, as for the rest of the validator's
//! output (never for a sensitive resource).

use std::path::Path;

/// Lines quoted at most per report.
const MAX_QUOTED: usize = 10;
/// Characters of one quoted line kept.
const MAX_LINE: usize = 200;

/// The numbers of the lines of `path` that `output` points at, in order of
/// first mention.
pub fn lines_named(output: &str, path: &str) -> Vec<usize> {
    let mut found = Vec::new();
    if path.is_empty() {
        return found;
    }
    for (at, _) in output.match_indices(path) {
        let rest = &output[at + path.len()..];
        let before = &output[..at];
        // A longer name that merely starts with this one (`x.conf.bak`).
        if rest
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
        {
            continue;
        }
        let after = [": line ", ":", " line ", ", line ", "\", line "]
            .iter()
            .find_map(|sep| rest.strip_prefix(sep).and_then(leading_number));
        let line = after.or_else(|| {
            // Apache: `Syntax error on line 2 of /etc/apache2/x.conf:`.
            let head = before.strip_suffix(" of ")?;
            let digits: String = head
                .chars()
                .rev()
                .take_while(char::is_ascii_digit)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            head[..head.len() - digits.len()]
                .ends_with("line ")
                .then(|| digits.parse().ok())
                .flatten()
        });
        if let Some(n) = line
            && n > 0
            && !found.contains(&n)
        {
            found.push(n);
        }
    }
    found
}

fn leading_number(text: &str) -> Option<usize> {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Line `n` (1-based) of `bytes`, bounded, if it exists.
pub fn line_of(bytes: &[u8], n: usize) -> Option<String> {
    let line = bytes.split(|b| *b == b'\n').nth(n.checked_sub(1)?)?;
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches('\r');
    let mut kept: String = text.chars().take(MAX_LINE).collect();
    if kept.len() < text.len() {
        kept.push('…');
    }
    Some(kept)
}

/// The block appended to a failure's output: every line of `files` that
/// `output` names, as `path:N: text`. Empty when it names none.
pub fn offending(output: &str, files: &[(&Path, &[u8])]) -> String {
    let mut quoted = Vec::new();
    for (path, bytes) in files {
        let shown = path.display().to_string();
        for n in lines_named(output, &shown) {
            if let Some(text) = line_of(bytes, n) {
                quoted.push(format!("  {shown}:{n}: {text}"));
            }
        }
    }
    block(quoted)
}

/// The same block for content without a path (the built-in parsers, which
/// give the line themselves).
pub fn offending_at(bytes: &[u8], line: usize) -> String {
    block(
        line_of(bytes, line)
            .map(|text| vec![format!("  line {line}: {text}")])
            .unwrap_or_default(),
    )
}

/// The header of the block [`offending`] makes, Datum's own words under
/// every validator's output (see [`super::ValidatorDef::own_lines`]).
pub const OWN_LINES: &[super::OwnLine] = &[&["offending line:"], &["offending lines:"]];

fn block(mut quoted: Vec<String>) -> String {
    if quoted.is_empty() {
        return String::new();
    }
    quoted.truncate(MAX_QUOTED);
    let noun = if quoted.len() == 1 { "line" } else { "lines" };
    format!("offending {noun}:\n{}", quoted.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_validators_way_of_naming_a_line_is_understood() {
        let p = "/etc/x.conf";
        for (output, line) in [
            // nginx
            ("nginx: [emerg] unknown directive \"x\" in /etc/x.conf:4", 4),
            // visudo
            ("/etc/x.conf:3:32: syntax error", 3),
            // haproxy
            (
                "[ALERT] config : parsing [/etc/x.conf:5] : unknown keyword",
                5,
            ),
            // sshd
            ("/etc/x.conf line 2: unsupported option \"y\".", 2),
            ("/etc/x.conf: line 2: Bad configuration option: y", 2),
            // apache2
            ("AH00526: Syntax error on line 7 of /etc/x.conf:", 7),
            // systemd-analyze, nft, logrotate
            ("/etc/x.conf:6: Unknown key name 'Foo'", 6),
            ("/etc/x.conf:8:1-5: Error: syntax error", 8),
            ("error: /etc/x.conf:9 unknown option 'y'", 9),
        ] {
            assert_eq!(lines_named(output, p), [line], "{output}");
        }
        assert!(lines_named("/etc/x.conf.bak:3: no", p).is_empty());
        assert!(lines_named("test failed", p).is_empty());
    }

    #[test]
    fn the_named_lines_are_quoted_from_the_content() {
        let content = b"events {}\nhttp {\n  bad_directive on;\n}\n";
        let out = offending(
            "unknown directive \"bad_directive\" in /etc/n.conf:3\n/etc/n.conf:3 again, /etc/n.conf:99",
            &[(Path::new("/etc/n.conf"), content)],
        );
        assert_eq!(out, "offending line:\n  /etc/n.conf:3:   bad_directive on;");
        assert_eq!(offending("nothing", &[(Path::new("/a"), b"x")]), "");
        assert_eq!(offending_at(b"a\nb\n", 2), "offending line:\n  line 2: b");
    }
}
