//! The one error type of the driftwatch library.
//!
//! Each module keeps its own `thiserror` enum with the file or command it is about; this
//! type only gathers them so the CLI can map every failure to exit 1 in
//! [`crate::exit::for_error`]. Messages are one line and never quote plan contents.

use crate::history::BadDate;
use crate::plan::PlanError;
use crate::report::step_summary::StepSummaryError;
use crate::rules::RulesError;
use crate::runner::RunError;
use crate::stacks::StacksError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Rules(#[from] RulesError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Stacks(#[from] StacksError),
    #[error(transparent)]
    History(#[from] datum_report::history::HistoryError),
    #[error(transparent)]
    StepSummary(#[from] StepSummaryError),
    #[error(transparent)]
    Date(#[from] BadDate),
    #[error("invalid --secret-pattern: {0}")]
    SecretPattern(#[from] regex::Error),
    #[error("invalid --ignore-attr {text:?}: {reason}")]
    IgnoreAttr { text: String, reason: String },
    /// A file driftwatch reads or writes itself (reports, configuration for codify).
    #[error("{path}: {what}: {error}")]
    File {
        path: String,
        what: &'static str,
        error: std::io::Error,
    },
    #[error("{path}: invalid JSON at line {line}, column {column}")]
    Json {
        path: String,
        line: usize,
        column: usize,
    },
    /// Writing to stdout or stderr failed (a closed pipe is not an error; see `exit`).
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
    #[error("{0}")]
    Usage(&'static str),
    /// `--output` names a format the report has no form in.
    #[error(transparent)]
    Format(#[from] datum_report::render::Unsupported),
    #[error("codify: {0}")]
    Codify(String),
    #[error("a plan parser thread panicked")]
    Thread,
    /// `--report-to`: the credentials or the outbox cannot be used.
    #[error("{0}")]
    Fleet(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn file(path: &std::path::Path, what: &'static str, error: std::io::Error) -> Self {
        Error::File {
            path: path.display().to_string(),
            what,
            error,
        }
    }
}
