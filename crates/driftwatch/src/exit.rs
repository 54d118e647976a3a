//! Exit codes, decided in one place.
//!
//! 0: no actionable drift. 2: actionable drift (`--strict`: any drift, ignored included;
//! `--fail-on-pending`: unapplied changes too). 1: every error, from a usage typo to a held
//! state lock, so that CI never reads a failure as "drift found".

use crate::classify::Report;
use crate::error::Error;

pub const CLEAN: u8 = 0;
pub const ERROR: u8 = 1;
pub const DRIFT: u8 = 2;

/// The code for an error: always 1, except a closed stdout (`driftwatch ... | head`), which
/// is the reader's choice and not a failure.
pub fn for_error(error: &Error) -> u8 {
    match error {
        Error::Output(io) if io.kind() == std::io::ErrorKind::BrokenPipe => CLEAN,
        _ => ERROR,
    }
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
    fn errors_are_1_but_a_closed_pipe_is_not() {
        let pipe = Error::Output(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!(for_error(&pipe), CLEAN);
        assert_eq!(for_error(&Error::Usage("bad")), ERROR);
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
