//! Exit codes, decided in one place (the same shape as `datum`'s `exit.rs`): a report's
//! code in [`for_report`], an error's by its [`ErrorKind`] in [`for_kind`], the only table
//! from a kind to a number. `docs/driftwatch.md` ("Exit codes") is this table.
//!
//! 0: no actionable drift; `--help`, `--version`; a reader that closed stdout before any
//! report (once a report is made, a closed stdout leaves its code as it is). 2: actionable
//! drift (`--strict`: any drift, ignored included; `--fail-on-pending`: unapplied changes
//! too). 1: every error, from a usage typo (clap's own 2 would read as drift) or an
//! `--output` format a report has no form in, to a held state lock, so that CI never reads a
//! failure as "drift found".

use crate::classify::Report;
use crate::error::Error;

pub const CLEAN: u8 = 0;
pub const ERROR: u8 = 1;
pub const DRIFT: u8 = 2;

/// The kinds of error, each with its code in [`for_kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// `--help` or `--version`: clap's "errors" that are not errors.
    Help,
    /// The command line: an unknown option, a bad value, a format without a form.
    Usage,
    /// The reader closed stdout (`driftwatch ... | head`): their choice, not a failure.
    ClosedOutput,
    /// Anything else: the engine, a lock, a file, the plan JSON.
    Failed,
}

/// The code of each kind of error: the one table.
pub fn for_kind(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Help | ErrorKind::ClosedOutput => CLEAN,
        ErrorKind::Usage | ErrorKind::Failed => ERROR,
    }
}

/// The kind of an error of the library.
pub fn kind_of(error: &Error) -> ErrorKind {
    match error {
        Error::Output(io) if io.kind() == std::io::ErrorKind::BrokenPipe => ErrorKind::ClosedOutput,
        Error::Usage(_) | Error::Format(_) => ErrorKind::Usage,
        _ => ErrorKind::Failed,
    }
}

/// The kind of a command-line error.
pub fn kind_of_usage(error: &clap::Error) -> ErrorKind {
    match error.kind() {
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
            ErrorKind::Help
        }
        _ => ErrorKind::Usage,
    }
}

/// The code for an error: 1, except a closed stdout.
pub fn for_error(error: &Error) -> u8 {
    for_kind(kind_of(error))
}

/// The code for a successfully produced report.
pub fn for_report(report: &Report, strict: bool, fail_on_pending: bool) -> u8 {
    let drift = if strict {
        !report.findings.is_empty()
    } else {
        report.actionable() > 0
    };
    if drift || (fail_on_pending && !report.pending.is_empty()) {
        DRIFT
    } else {
        CLEAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{Category, Finding, Pending};

    fn report(categories: &[Category], pending: usize) -> Report {
        Report {
            stack: "s".into(),
            key: "k".into(),
            findings: categories
                .iter()
                .map(|c| Finding {
                    address: "t.a".into(),
                    previous_address: None,
                    category: *c,
                    next_apply: None,
                    diffs: Vec::new(),
                    replace_paths: Vec::new(),
                    forcing_paths: Vec::new(),
                    ignored_by: Vec::new(),
                    left_alone_by_update: false,
                    overwritten: false,
                    replace_reason: None,
                    plan_checked: false,
                    age: None,
                })
                .collect(),
            pending: (0..pending)
                .map(|_| Pending {
                    address: "t.p".into(),
                    action: "create".into(),
                    reason: None,
                    paths: Vec::new(),
                })
                .collect(),
            notes: Vec::new(),
            with_plan: true,
        }
    }

    #[test]
    fn errors_are_1_but_a_closed_pipe_and_help_are_not() {
        use clap::Parser as _;
        let pipe = Error::Output(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!(kind_of(&pipe), ErrorKind::ClosedOutput);
        assert_eq!(for_error(&pipe), CLEAN);
        assert_eq!(kind_of(&Error::Usage("bad")), ErrorKind::Usage);
        assert_eq!(for_error(&Error::Usage("bad")), ERROR);
        let format = Error::Format(datum_report::render::Unsupported::new(
            "the report",
            datum_report::render::Format::Markdown,
            &[],
        ));
        assert_eq!(for_error(&format), ERROR);
        let other = Error::Output(std::io::Error::other("disk full"));
        assert_eq!(kind_of(&other), ErrorKind::Failed);
        assert_eq!(for_error(&other), ERROR);
        let help = crate::cli::Cli::try_parse_from(["driftwatch", "--help"]).unwrap_err();
        assert_eq!(for_kind(kind_of_usage(&help)), CLEAN);
        let typo = crate::cli::Cli::try_parse_from(["driftwatch", "reprot"]).unwrap_err();
        assert_eq!(for_kind(kind_of_usage(&typo)), ERROR);
    }

    #[test]
    fn codes() {
        assert_eq!(for_report(&report(&[], 0), false, false), CLEAN);
        assert_eq!(
            for_report(&report(&[Category::Ignored], 1), false, false),
            CLEAN
        );
        assert_eq!(
            for_report(&report(&[Category::Ignored], 0), true, false),
            DRIFT
        );
        assert_eq!(for_report(&report(&[], 1), false, true), DRIFT);
        for c in [
            Category::Replaced,
            Category::DeletedOutside,
            Category::ChangedOutside,
        ] {
            assert_eq!(for_report(&report(&[c], 0), false, false), DRIFT);
        }
    }
}
