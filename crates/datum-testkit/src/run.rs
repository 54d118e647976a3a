//! What one run of a built binary did, for CLI tests: its exit code and
//! streams as text, and an exit-code assertion that prints both streams when
//! it fails (a bare `assert_eq!` on the code hides why).

use std::process::Output;

/// The exit code (`-1` when the process was killed by a signal).
pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts an exit code, printing both streams when it differs.
#[track_caller]
pub fn assert_exit(o: &Output, expected: i32) {
    assert_eq!(
        code(o),
        expected,
        "unexpected exit code\n--- stdout\n{}\n--- stderr\n{}",
        stdout(o),
        stderr(o)
    );
}

/// An [`Output`] with the functions above as methods.
pub struct Run(pub Output);

impl Run {
    pub fn code(&self) -> i32 {
        code(&self.0)
    }

    pub fn stdout(&self) -> String {
        stdout(&self.0)
    }

    pub fn stderr(&self) -> String {
        stderr(&self.0)
    }

    #[track_caller]
    pub fn assert_exit(&self, expected: i32) {
        assert_exit(&self.0, expected);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_and_codes_read_as_text() {
        let out = std::process::Command::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .output()
            .unwrap();
        let run = Run(out);
        assert_eq!(
            (run.code(), run.stdout(), run.stderr()),
            (3, "out\n".to_owned(), "err\n".to_owned())
        );
        run.assert_exit(3);
        let failed = std::panic::catch_unwind(|| run.assert_exit(0));
        assert!(failed.is_err(), "a wrong code must fail the assertion");
    }
}
