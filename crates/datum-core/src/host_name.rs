//! What a host's name may be: one rule for the host file (every command
//! reads it), `datum init --host` and the fleet server's enrolment.
//!
//! A host is named by it in reports, the fleet's store and pages, the
//! Markdown report's dedupe marker and the check report's header, so a name
//! is a word of letters, digits, `.`, `-` and `_`, as long as a DNS name at
//! most: no blank, no control character, nothing a line or a page reads
//! otherwise.

/// The longest name (a DNS name's limit).
pub const MAX_LEN: usize = 253;

/// The rule, as messages state it.
pub const RULE: &str = "letters, digits, `.`, `-`, `_`; at most 253";

/// Whether `name` may name a host.
pub fn is_valid(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_word_of_letters_digits_dots_dashes_and_underscores() {
        for good in ["web-01", "db_2.example.org", "a", &"x".repeat(MAX_LEN)] {
            assert!(is_valid(good), "{good}");
        }
        for bad in [
            "",
            "web 01",
            "web\n+ File[x]",
            "web\t01",
            "wéb",
            "a/b",
            "x-->",
            &"x".repeat(MAX_LEN + 1),
        ] {
            assert!(!is_valid(bad), "{bad:?}");
        }
    }
}
