//! Errors of fingerprinting: every variant names the path (or pattern) it is about.
//!
//! Owns: [`FingerprintError`]. Must not: format for people beyond the `Display` text
//! (reports are the caller's).

use std::path::PathBuf;

use crate::digest::{Algorithm, HashFunction};

/// Why a scan, a fingerprint or a comparison failed.
#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    /// A system call on `path` failed.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The path concerned.
        path: PathBuf,
        /// What was being done (`lstat`, `open`, `read`, `readdir`, `readlink`).
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An entry changed type while it was being scanned (e.g. a file replaced by a
    /// directory between the directory listing and the open); rerunning gives a
    /// consistent picture.
    #[error("{path}: changed while it was being scanned")]
    Unstable {
        /// The path concerned.
        path: PathBuf,
    },
    /// A hashing worker stopped without finishing its share (a bug: it panicked).
    #[error("{path}: a hashing worker stopped before finishing its files")]
    WorkerFailed {
        /// The root of the scan.
        path: PathBuf,
    },
    /// An exclusion rule is not valid gitignore syntax.
    #[error("exclude rule {pattern:?}: {source}")]
    Pattern {
        /// The rule as written.
        pattern: String,
        /// What the glob parser said.
        #[source]
        source: ignore::Error,
    },
    /// A file's content hash was made with another function than the algorithm uses.
    #[error("{path}: content hash is {found}, but the {algorithm} fingerprint needs {expected}")]
    ContentFunction {
        /// The file's path relative to the tree root.
        path: PathBuf,
        /// The algorithm asked for.
        algorithm: Algorithm,
        /// The content function it uses.
        expected: HashFunction,
        /// The function the node's hash was made with.
        found: HashFunction,
    },
    /// The two trees of a comparison were fingerprinted with different algorithms.
    #[error("cannot compare a {declared} fingerprint with a {observed} one")]
    AlgorithmMismatch {
        /// The declared tree's algorithm.
        declared: Algorithm,
        /// The observed tree's algorithm.
        observed: Algorithm,
    },
}
