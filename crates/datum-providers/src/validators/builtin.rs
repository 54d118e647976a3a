//! Validators built into Datum: parsers that check a staged file is well
//! formed, without running any program. They read bytes and nothing else.

/// Well-formed JSON.
pub fn json(bytes: &[u8]) -> Result<(), String> {
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
        .map_err(|e| format!("invalid TOML: {}", e.message()))
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
        assert!(toml(b"a = \n").is_err());
        assert!(json(&[0xff, 0xfe]).is_err());
    }
}
