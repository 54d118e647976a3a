//! `--history FILE`: attach an age to each finding; and the one clock driftwatch reads.
//!
//! The model lives in `datum_report::history`; this module only chooses the time (the
//! hidden `--now` flag or `DRIFTWATCH_NOW`, for tests and replays, else the system clock,
//! always UTC) and copies the result onto the findings. The history stores signatures
//! (addresses, categories, paths), never values.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use datum_report::history::{FixedClock, History, HistoryError};

use crate::classify::{Finding, Report};

/// The environment variable that fixes "now" (tests and replays).
pub const NOW_ENV: &str = "DRIFTWATCH_NOW";

#[derive(Debug, thiserror::Error)]
#[error("invalid time {0:?} (expected YYYY-MM-DD or an RFC 3339 timestamp)")]
pub struct BadDate(pub String);

/// The time of this run: `--now`, else `DRIFTWATCH_NOW`, else the system clock. A date
/// alone means midnight UTC.
pub fn now(fixed: Option<&str>) -> Result<DateTime<Utc>, BadDate> {
    let fixed = match fixed {
        Some(n) => Some(n.to_owned()),
        None => std::env::var(NOW_ENV).ok().filter(|v| !v.is_empty()),
    };
    let Some(text) = fixed else {
        return Ok(Utc::now());
    };
    if let Ok(t) = DateTime::parse_from_rfc3339(&text) {
        return Ok(t.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(&text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .ok_or(BadDate(text))
}

/// A timestamp as every driftwatch output writes it: RFC 3339, UTC, whole seconds.
pub fn rfc3339(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Record tonight's findings in the history file and copy each finding's age onto it.
pub fn apply(report: &mut Report, file: &Path, now: &DateTime<Utc>) -> Result<(), HistoryError> {
    let clock = FixedClock(now.date_naive());
    let mut history = load(file)?;
    let signatures: Vec<_> = report.findings.iter().map(Finding::signature).collect();
    let seen = history.record(&report.key, &report.stack, &signatures, &clock);
    for (finding, age) in report.findings.iter_mut().zip(seen) {
        finding.age = Some(age);
    }
    save(&history, file)
}

/// Read the history file; a missing file is an empty history (the first night).
fn load(path: &Path) -> Result<History, HistoryError> {
    match std::fs::read(path) {
        Ok(bytes) => History::from_json(&bytes, path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(History::default()),
        Err(source) => Err(HistoryError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Write the file atomically: a temporary file beside it, then a rename, so a job
/// killed halfway leaves yesterday's history rather than half of today's.
fn save(history: &History, path: &Path) -> Result<(), HistoryError> {
    let err = |source| HistoryError::Write {
        path: path.to_owned(),
        source,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let body = history.to_json().map_err(|e| err(e.into()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(&dir).map_err(err)?;
    tmp.write_all(&body).map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_times() {
        assert_eq!(
            rfc3339(&now(Some("2026-10-28")).unwrap()),
            "2026-10-28T00:00:00Z"
        );
        assert_eq!(
            rfc3339(&now(Some("2026-10-28T03:17:09+02:00")).unwrap()),
            "2026-10-28T01:17:09Z"
        );
        assert!(now(Some("yesterday")).is_err());
    }

    #[test]
    fn save_and_load_round_trip() {
        use datum_report::Signature;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.json");
        assert_eq!(load(&path).unwrap(), History::default());
        let mut h = History::default();
        let sig = Signature::new("k.flags".into(), "changed_outside".into(), vec!["a".into()]);
        h.record(
            "k",
            "n",
            &[sig],
            &FixedClock(NaiveDate::from_ymd_opt(2026, 1, 3).unwrap()),
        );
        save(&h, &path).unwrap();
        assert_eq!(load(&path).unwrap(), h);
        std::fs::write(&path, "{\"version\": CANARY-in-history").unwrap();
        let msg = load(&path).unwrap_err().to_string();
        assert!(
            !msg.contains("CANARY") && msg.contains("history.json"),
            "{msg}"
        );
    }
}
