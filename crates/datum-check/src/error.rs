//! Why a check could not run to its end ([`CheckError`]), and the
//! [`Context`] its modules use to say what they were doing.
//!
//! Owns: the error type of the crate. Every variant keeps its source, so the
//! binary prints the whole chain.

use datum_host::HostError;
use datum_store::StoreError;

/// What an opener the caller hands in may fail with (the caller's own
/// error, kept whole as the source).
pub type OpenerError = Box<dyn std::error::Error + Send + Sync>;

/// Why a check could not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The catalogue snapshot could not be decoded: the caller forgets it
    /// (the next check compiles).
    #[error("{0}; nothing was checked (run the check again)")]
    Snapshot(String),
    /// Policy `accept` needs the repository's documents (to name the file
    /// that declares a resource's content), and they do not load.
    #[error("the repository has {} error(s); nothing was checked", .0.error_count())]
    Repository(datum_catalog::Diagnostics),
    /// Two resources of one kind manage one object on the host under two
    /// names (a unit and an alias of it), as plan and apply refuse them.
    #[error("{0}; nothing was reported, reconciled or recorded")]
    Shared(datum_engine::Shared),
    /// The state store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The state store could not be read or written, saying for what.
    #[error("{what}")]
    State {
        what: String,
        #[source]
        source: Box<StoreError>,
    },
    /// A file of Datum's own (an accepted patch, its summary) could not be
    /// written.
    #[error("{what}")]
    Host {
        what: String,
        #[source]
        source: Box<HostError>,
    },
    /// Writing to a file already open failed.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The caller's opener of the backup store failed (its error as it
    /// gave it).
    #[error("the backup store could not be opened")]
    Backups(#[source] OpenerError),
    /// The fleet report could not be queued with the check's history.
    #[error(transparent)]
    Report(#[from] datum_reporting::EnqueueError),
    /// The folder for accepted patches is missing and could not be made
    /// (its parent is missing).
    #[error("the folder for accepted patches could not be created")]
    NoPatchFolder,
    /// A class whose policy acts (revert, accept, quarantine) is not
    /// checked without a state store to record what it did.
    #[error("the state store is unusable: a class whose policy acts is not checked without one")]
    NoStore,
}

/// An error of a step, with what the step was.
pub(crate) trait WithWhat {
    fn with_what(self, what: String) -> CheckError;
}

impl WithWhat for StoreError {
    fn with_what(self, what: String) -> CheckError {
        CheckError::State {
            what,
            source: Box::new(self),
        }
    }
}

impl WithWhat for HostError {
    fn with_what(self, what: String) -> CheckError {
        CheckError::Host {
            what,
            source: Box::new(self),
        }
    }
}

impl WithWhat for std::io::Error {
    fn with_what(self, what: String) -> CheckError {
        CheckError::Io { what, source: self }
    }
}

/// Says what a failed step was doing (as `anyhow::Context` would, into a
/// typed [`CheckError`]).
pub(crate) trait Context<T> {
    fn context(self, what: &str) -> Result<T, CheckError>;
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T, CheckError>;
}

impl<T, E: WithWhat> Context<T> for Result<T, E> {
    fn context(self, what: &str) -> Result<T, CheckError> {
        self.map_err(|e| e.with_what(what.to_owned()))
    }

    fn with_context(self, what: impl FnOnce() -> String) -> Result<T, CheckError> {
        self.map_err(|e| e.with_what(what()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_is_the_message_and_the_cause_its_source() {
        let e: Result<(), _> = Err(std::io::Error::other("disk full"));
        let e = e.context("cannot write SUMMARY.md").unwrap_err();
        assert_eq!(e.to_string(), "cannot write SUMMARY.md");
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.to_string(), "disk full");
    }
}
