//! Exit codes, decided in one place.
//!
//! 0: no actionable drift. 2: actionable drift (`--strict`: any drift, ignored included;
//! `--fail-on-pending`: unapplied changes too). 1: every error, from a usage typo to a held
//! state lock, so that CI never reads a failure as "drift found".

use crate::classify::Report;

pub const CLEAN: u8 = 0;
pub const ERROR: u8 = 1;
pub const DRIFT: u8 = 2;

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
