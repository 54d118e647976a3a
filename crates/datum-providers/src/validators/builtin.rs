//! Validators built into Datum: parsers that check a staged file is well
//! formed, without running any program. They read bytes and nothing else.

/// Well-formed JSON.
pub fn json(bytes: &[u8]) -> Result<(), String> {
    // JSON is UTF-8 (RFC 8259); skipping a value does not look inside its
    // strings, so invalid bytes in one would pass unchecked.
    std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
        .map(drop)
        .map_err(|e| {
            format!(
                "invalid JSON at line {}, column {}: {e}",
                e.line(),
                e.column()
            )
        })
}

/// Well-formed YAML (every document of a multi-document file).
pub fn yaml(bytes: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut parser = saphyr_parser::Parser::new_from_str(text);
    while let Some(event) = parser.next_event() {
        if let Err(e) = event {
            let m = e.marker();
            return Err(format!(
                "invalid YAML at line {}, column {}: {}",
                m.line(),
                m.col() + 1,
                e.info()
            ));
        }
    }
    Ok(())
}

/// Well-formed TOML.
pub fn toml(bytes: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    text.parse::<toml::Table>()
        .map(drop)
        .map_err(|e| match e.span() {
            Some(span) => {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!(
                    "invalid TOML at line {line}, column {column}: {}",
                    e.message().trim()
                )
            }
            None => format!("invalid TOML: {}", e.message().trim()),
        })
}

/// The line a parser's message names (`... at line N, ...`), for quoting it.
pub fn line_in(message: &str) -> Option<usize> {
    let rest = &message[message.find(" at line ")? + " at line ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_parser_accepts_good_and_rejects_bad_input() {
        assert!(json(br#"{"a": [1, 2]}"#).is_ok());
        assert!(json(br#"{"a": [1, 2}"#).unwrap_err().contains("line 1"));
        assert!(yaml(b"a: 1\nb: [x, y]\n---\nc: 2\n").is_ok());
        assert!(
            yaml(b"a: [1, 2\nb: 3\n")
                .unwrap_err()
                .contains("invalid YAML")
        );
        assert!(toml(b"a = 1\n[t]\nb = \"x\"\n").is_ok());
        let err = toml(b"a = 1\nb = \n").unwrap_err();
        assert!(err.starts_with("invalid TOML at line 2"), "{err}");
        assert_eq!(line_in(&err), Some(2));
        assert!(json(&[0xff, 0xfe]).is_err());
        // Invalid UTF-8 inside a string of otherwise well-formed JSON.
        assert!(
            json(b"{\"a\": \"caf\xff\"}")
                .unwrap_err()
                .contains("not UTF-8")
        );
    }
}
