//! The one error type of machine access.
//!
//! Every variant names what it was about (a path, a user, a program), so a
//! caller can print it as one line without adding context. This module owns the
//! wording; it must not decide how an error is reported or which exit code it
//! maps to.

use std::path::PathBuf;
use std::time::Duration;

/// A failed operation on the host, always naming what it was done to.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A file-system call failed. `op` is a verb phrase ("read", "create
    /// directory") so the message reads `cannot read /etc/motd: ...`.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("path `{}` must be absolute (start with /)", path.display())]
    NotAbsolute { path: PathBuf },

    /// A repository file changed between compiling the catalogue and using
    /// it: applying it would write content nobody planned.
    #[error("{} changed since the catalogue was compiled (sha256 {expected} expected); run the pass again", path.display())]
    ContentChanged { path: PathBuf, expected: String },

    #[error("path `{}` must be normalised (no `..`, `.`, `//` or trailing /): write `{}`", path.display(), suggestion.display())]
    NotNormalised { path: PathBuf, suggestion: PathBuf },

    #[error("path `{}` contains a NUL byte", path.display())]
    NulInPath { path: PathBuf },

    #[error("refusing to change {}: its parent leads outside the root {} (to {}) through a symlink", path.display(), root.display(), resolved.display())]
    OutsideRoot {
        path: PathBuf,
        root: PathBuf,
        resolved: PathBuf,
    },

    #[error("unknown user `{name}` (not in {})", database.display())]
    UnknownUser { name: String, database: PathBuf },

    #[error("unknown group `{name}` (not in {})", database.display())]
    UnknownGroup { name: String, database: PathBuf },

    #[error("cannot create {}: its parent directory {} does not exist (create it or declare a Directory for it)", path.display(), parent.display())]
    MissingParent { path: PathBuf, parent: PathBuf },

    #[error("cannot replace {}: a {found} is in the way, and Datum never removes one it was not asked to remove", path.display())]
    InTheWay { path: PathBuf, found: String },

    #[error("cannot remove directory {}: it is not empty (Datum removes only empty directories, never recursively)", path.display())]
    DirectoryNotEmpty { path: PathBuf },

    #[error("program `{program}` not found in PATH or the standard system directories")]
    ProgramNotFound { program: String },

    #[error("cannot run {}: {source}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("another Datum pass holds the lock {} (waited {waited:?})", path.display())]
    LockTimeout { path: PathBuf, waited: Duration },
}

impl HostError {
    /// Wraps an I/O error with the path and the operation it came from.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        HostError::Io {
            path: path.into(),
            op,
            source,
        }
    }

    /// The path the error is about, where there is one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            HostError::Io { path, .. }
            | HostError::NotAbsolute { path }
            | HostError::ContentChanged { path, .. }
            | HostError::NotNormalised { path, .. }
            | HostError::NulInPath { path }
            | HostError::OutsideRoot { path, .. }
            | HostError::MissingParent { path, .. }
            | HostError::InTheWay { path, .. }
            | HostError::DirectoryNotEmpty { path }
            | HostError::LockTimeout { path, .. } => Some(path),
            HostError::UnknownUser { .. }
            | HostError::UnknownGroup { .. }
            | HostError::ProgramNotFound { .. }
            | HostError::Spawn { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_read_as_one_line_naming_the_path() {
        let err = HostError::io(
            "read",
            "/r/etc/motd",
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        );
        let text = err.to_string();
        assert!(text.starts_with("cannot read /r/etc/motd: "), "{text}");
        assert!(!text.contains('\n'));
        assert_eq!(err.path(), Some(std::path::Path::new("/r/etc/motd")));
    }
}
