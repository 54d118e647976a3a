//! Exit codes, decided in one place: every way `datum` ends is an
//! [`ExitCode`] (what the command concluded) or an [`ErrorKind`] (what kind
//! of error stopped it), and [`ExitCode::code`] is the only table from either
//! to a number. The process's exit code, the state store's pass record and
//! the fleet report's `exit_code` all go through it: a check's
//! `datum_agent::Conclusion` becomes an [`ExitCode`] (`From`, beside the
//! conclusion) and has no number of its own. The binary's `exit.rs` keeps
//! what belongs to a process: which kind an error is, printing it, exiting.
//! The table in the README ("Exit codes") is this one.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | nothing to do, nothing changed, no drift; `--help`, `--version`; a reader that closed stdout (`datum plan \| head`) |
//! | 2 | changes: pending (`plan`), applied (`apply`), drift or quarantine (`check`), a new revision deployed (`pull`), reports queued (`outbox`) |
//! | 4 | failures: some change failed (`apply`) or would fail (`plan`: validation, a missing validator binary); an apply the state store could not record (its fleet report is lost with the record) |
//! | 6 | both 2 and 4 |
//! | 1 | an error: a usage error (clap's own exit code 2 would read as "changes" to a script), a format the command has no form in, or any failure before or outside the resources (a manifest error, a lock, the state store, a resource that could not be checked) |
//!
//! `apply` and `plan` follow Puppet's detailed exit codes.

/// What a command concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Nothing to do, nothing changed, no drift.
    Clean,
    /// Changes pending or made, drift found, a revision deployed.
    Changes,
    /// Some change failed or would fail.
    Failures,
    /// [`ExitCode::Changes`] and [`ExitCode::Failures`].
    ChangesAndFailures,
    /// An error of this kind.
    Error(ErrorKind),
}

/// The kinds of error, each with its exit code (in [`ExitCode::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// `--help` or `--version`: clap's "errors" that are not errors.
    Help,
    /// The command line: an unknown option, a bad value, a format the
    /// command has no form in.
    Usage,
    /// The reader closed stdout: their choice, not a failure.
    ClosedOutput,
    /// Anything else that stopped the command (input, state, a lock, a
    /// check that could not run), with nothing applied.
    Failed,
}

impl ExitCode {
    /// Shorthand for the most common error.
    pub const ERROR: ExitCode = ExitCode::Error(ErrorKind::Failed);

    /// The number the process exits with, and the one a pass is recorded
    /// and reported with: the one table (see the module).
    pub fn code(self) -> i32 {
        match self {
            ExitCode::Clean => 0,
            ExitCode::Changes => 2,
            ExitCode::Failures => 4,
            ExitCode::ChangesAndFailures => 6,
            ExitCode::Error(kind) => match kind {
                ErrorKind::Help | ErrorKind::ClosedOutput => 0,
                ErrorKind::Usage | ErrorKind::Failed => 1,
            },
        }
    }

    /// Puppet-style code for an apply (and a plan: failures that would happen).
    pub fn for_apply(changed: bool, failed: bool) -> ExitCode {
        match (changed, failed) {
            (false, false) => ExitCode::Clean,
            (true, false) => ExitCode::Changes,
            (false, true) => ExitCode::Failures,
            (true, true) => ExitCode::ChangesAndFailures,
        }
    }

    /// The code of an apply whose pass the state store could not record (a
    /// full file system, a store that failed mid-pass): nothing says the
    /// host changed but this run (the fleet report is queued with the
    /// record, so the server never hears of it, and what it verified is
    /// observed again), so the loss counts as a failure: 4, or 6 with
    /// changes, never a clean 0 or 2.
    pub fn unrecorded(self) -> ExitCode {
        match self {
            ExitCode::Clean | ExitCode::Failures => ExitCode::Failures,
            ExitCode::Changes | ExitCode::ChangesAndFailures => ExitCode::ChangesAndFailures,
            error @ ExitCode::Error(_) => error,
        }
    }

    /// Code for a dry run or a drift check.
    pub fn for_pending(pending: bool) -> ExitCode {
        if pending {
            ExitCode::Changes
        } else {
            ExitCode::Clean
        }
    }
}

impl From<ExitCode> for i32 {
    fn from(code: ExitCode) -> i32 {
        code.code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_0_nothing_to_do_help_and_a_closed_pipe() {
        assert_eq!(ExitCode::Clean.code(), 0);
        assert_eq!(ExitCode::for_apply(false, false).code(), 0);
        assert_eq!(ExitCode::for_pending(false).code(), 0);
        assert_eq!(ExitCode::Error(ErrorKind::Help).code(), 0);
        assert_eq!(ExitCode::Error(ErrorKind::ClosedOutput).code(), 0);
    }

    #[test]
    fn exit_1_usage_and_every_other_error() {
        assert_eq!(ExitCode::Error(ErrorKind::Usage).code(), 1);
        assert_eq!(ExitCode::Error(ErrorKind::Failed).code(), 1);
        assert_eq!(ExitCode::ERROR.code(), 1);
        assert_eq!(i32::from(ExitCode::ERROR), 1);
    }

    #[test]
    fn exit_2_changes_or_drift() {
        assert_eq!(ExitCode::Changes.code(), 2);
        assert_eq!(ExitCode::for_apply(true, false).code(), 2);
        assert_eq!(ExitCode::for_pending(true).code(), 2);
    }

    #[test]
    fn exit_4_failures() {
        assert_eq!(ExitCode::for_apply(false, true).code(), 4);
        // An apply the state store could not record.
        assert_eq!(ExitCode::for_apply(false, false).unrecorded().code(), 4);
        assert_eq!(ExitCode::for_apply(false, true).unrecorded().code(), 4);
    }

    #[test]
    fn exit_6_changes_and_failures() {
        assert_eq!(ExitCode::for_apply(true, true).code(), 6);
        assert_eq!(ExitCode::for_apply(true, false).unrecorded().code(), 6);
        assert_eq!(ExitCode::for_apply(true, true).unrecorded().code(), 6);
        // An error stays the error it was.
        assert_eq!(ExitCode::ERROR.unrecorded().code(), 1);
        assert_eq!(ExitCode::Error(ErrorKind::Usage).unrecorded().code(), 1);
    }
}
