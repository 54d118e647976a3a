//! `--step-summary`: append the Markdown report to the file GitHub Actions names in
//! `GITHUB_STEP_SUMMARY`. The only writer in `report/`, kept here so the rule "append, never
//! truncate: other steps write there too" lives in one place.

use std::io::Write as _;
use std::path::PathBuf;

/// The variable GitHub Actions sets for each step.
pub const ENV: &str = "GITHUB_STEP_SUMMARY";

#[derive(Debug, thiserror::Error)]
pub enum StepSummaryError {
    #[error("--step-summary: {ENV} is not set (it is only set inside GitHub Actions)")]
    NotSet,
    #[error("{path}: cannot append the step summary: {error}")]
    Write { path: String, error: std::io::Error },
}

/// The step summary file, or why there is none.
pub fn path() -> Result<PathBuf, StepSummaryError> {
    std::env::var_os(ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .ok_or(StepSummaryError::NotSet)
}

/// Append `markdown` (and a blank line) to the step summary file.
pub fn append(markdown: &str) -> Result<PathBuf, StepSummaryError> {
    let path = path()?;
    let err = |error| StepSummaryError::Write {
        path: path.display().to_string(),
        error,
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(err)?;
    file.write_all(markdown.as_bytes()).map_err(err)?;
    file.write_all(b"\n").map_err(err)?;
    Ok(path)
}
