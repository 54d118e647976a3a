//! `--history FILE`: attach an age to each finding.
//!
//! The model lives in `datum_report::history`; this module only chooses the clock (the
//! hidden `--now DATE` flag or `DRIFTWATCH_NOW`, for tests) and copies the result onto the
//! findings. The history stores signatures (addresses, categories, paths), never values.

use std::path::Path;

use chrono::NaiveDate;
use datum_report::history::{Clock, FixedClock, History, HistoryError, SystemClock};

use crate::classify::{Finding, Report};

/// The environment variable that fixes "today" (tests and replays).
pub const NOW_ENV: &str = "DRIFTWATCH_NOW";

#[derive(Debug, thiserror::Error)]
#[error("invalid date {0:?} (expected YYYY-MM-DD)")]
pub struct BadDate(pub String);

/// The clock to use: `--now`, else `DRIFTWATCH_NOW`, else the system clock (UTC).
pub fn clock(now: Option<&str>) -> Result<Box<dyn Clock>, BadDate> {
    let fixed = match now {
        Some(n) => Some(n.to_owned()),
        None => std::env::var(NOW_ENV).ok().filter(|v| !v.is_empty()),
    };
    match fixed {
        Some(text) => NaiveDate::parse_from_str(&text, "%Y-%m-%d")
            .map(|d| Box::new(FixedClock(d)) as Box<dyn Clock>)
            .map_err(|_| BadDate(text)),
        None => Ok(Box::new(SystemClock)),
    }
}

/// Record tonight's findings in the history file and copy each finding's age onto it.
pub fn apply(report: &mut Report, file: &Path, clock: &dyn Clock) -> Result<(), HistoryError> {
    let mut history = History::load(file)?;
    let signatures: Vec<_> = report.findings.iter().map(Finding::signature).collect();
    let seen = history.record(&report.key, &report.stack, &signatures, clock);
    for (finding, age) in report.findings.iter_mut().zip(seen) {
        finding.age = Some(age);
    }
    history.save(file)
}
