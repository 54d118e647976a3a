//! Whether a program a test drives is installed: a test prints "skipped"
//! without it, and fails instead when `DATUM_VALIDATORS_REQUIRED` is set
//! (CI sets it, and `scripts/deps` installs every such program), so CI can
//! never pass by skipping.

use std::process::{Command, Stdio};

/// Whether `program` (from Debian package `package`) can be run. A program
/// that exists but rejects `--version` counts as present.
pub fn have(program: &str, package: &str) -> bool {
    let found = Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            std::env::var_os("DATUM_VALIDATORS_REQUIRED").is_none(),
            "`{program}` (Debian package {package}) is required (DATUM_VALIDATORS_REQUIRED): run scripts/deps"
        );
        println!("skipped: `{program}` not installed (Debian package {package})");
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_program_is_found_and_a_missing_one_is_not() {
        assert!(have("sh", "dash"));
        if std::env::var_os("DATUM_VALIDATORS_REQUIRED").is_none() {
            assert!(!have("datum-no-such-program", "none"));
        }
    }
}
