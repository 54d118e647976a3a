//! Checking `validate:` values: a validator's *name*, never a command line.
//!
//! This module owns the rule that repository content names a validator the
//! program ships (`datum_providers::validators`), and never says what to run:
//! a field holding a command line would be root code execution driven by
//! whatever lands in the repository. It must not run anything; the engine
//! looks validators up and runs them.

/// Why a `validate:` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidatorProblem {
    #[error(
        "`validate: {value}` looks like a command line; write the name of a validator Datum ships \
         (for example `sshd`): repository content must never decide what runs as root"
    )]
    CommandLine { value: String },
    #[error("unknown validator `{value}`; known validators: {}", known().join(", "))]
    Unknown { value: String },
}

fn known() -> Vec<&'static str> {
    datum_providers::validators::all()
        .iter()
        .map(|v| v.name)
        .collect()
}

/// Checks one `validate:` value.
pub fn check(value: &str) -> Result<(), ValidatorProblem> {
    // Checked before the lookup so the message says *why* such a value can
    // never work, rather than just "unknown".
    let looks_like_command = value
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '/' | ';' | '|' | '&' | '$' | '`'))
        || value.contains("%s")
        || value.contains("{}");
    if looks_like_command {
        return Err(ValidatorProblem::CommandLine {
            value: value.to_owned(),
        });
    }
    match datum_providers::validators::lookup(value) {
        Some(_) => Ok(()),
        None => Err(ValidatorProblem::Unknown {
            value: value.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_names_pass() {
        assert_eq!(check("sshd"), Ok(()));
        assert_eq!(check("systemd-unit"), Ok(()));
    }

    #[test]
    fn command_lines_are_refused_with_the_reason() {
        for cmd in [
            "sshd -t -f %s",
            "/usr/sbin/sshd",
            "visudo -cf {}",
            "nginx%s",
            "x;rm",
            "a$(b)",
        ] {
            let err = check(cmd).unwrap_err();
            assert!(matches!(err, ValidatorProblem::CommandLine { .. }), "{cmd}");
            assert!(err.to_string().contains("never decide what runs as root"));
        }
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let err = check("sshdd").unwrap_err().to_string();
        assert!(
            err.starts_with("unknown validator `sshdd`; known validators: sshd, nginx"),
            "{err}"
        );
    }
}
