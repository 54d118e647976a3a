//! The one error type of machine access.
//!
//! Every variant names what it was about (a path, a user, a program), so a
//! caller can print it as one line without adding context. This module owns the
//! wording; it must not decide how an error is reported or which exit code it
//! maps to.

use std::path::PathBuf;
use std::time::Duration;

/// A directory on the way to a managed path is a symbolic link. Datum never
/// follows one unless the repository names it in `boundary.follow_links`.
#[derive(Debug, thiserror::Error)]
#[error("refusing to reach {}: {} on its way is a symbolic link (to {}); Datum does not follow links in parent directories (declare the path it points to, or list {} under `boundary.follow_links` in datum.yaml)", path.display(), link.display(), target.display(), declared_link.display())]
pub struct ParentLink {
    pub path: PathBuf,
    pub link: PathBuf,
    /// What the link points at, as stored.
    pub target: PathBuf,
    /// The link as declared (the spelling `follow_links` takes).
    pub declared_link: PathBuf,
}

/// systemd's CHASE_SAFE rule: a directory owned by an unprivileged user leads
/// into one owned by someone else, so that user could swap what Datum is
/// about to write into.
#[derive(Debug, thiserror::Error)]
#[error("refusing to reach {}: {} is owned by uid {from_uid}, who could replace {} (owned by uid {into_uid}) at any moment (unsafe ownership transition; list {} under `boundary.owner_transitions` in datum.yaml if that user is trusted)", path.display(), from.display(), into.display(), declared_into.display())]
pub struct UnsafeTransition {
    pub path: PathBuf,
    pub from: PathBuf,
    pub from_uid: u32,
    pub into: PathBuf,
    pub into_uid: u32,
    pub declared_into: PathBuf,
}

/// `CHASE_SAFE` for a link the repository lets the walk follow
/// (`boundary.follow_links`): the link sits in a folder an unprivileged user
/// owns (or is that user's own), so that user could point it anywhere at any
/// moment, and it leads into a directory they do not own.
#[derive(Debug, thiserror::Error)]
#[error("refusing to reach {}: the link {} can be changed at any moment by uid {from_uid} (the owner of its folder, or of the link), and it leads to {} (owned by uid {into_uid}) (unsafe ownership transition; list {} under `boundary.owner_transitions` in datum.yaml if that user is trusted)", path.display(), link.display(), into.display(), declared_link.display())]
pub struct UnsafeLink {
    pub path: PathBuf,
    pub link: PathBuf,
    pub from_uid: u32,
    pub into: PathBuf,
    pub into_uid: u32,
    /// The link as declared (the spelling `owner_transitions` takes).
    pub declared_link: PathBuf,
}

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
    /// it: applying it would write content nobody planned. The next pass
    /// compiles the edit by itself (the catalogue snapshot's stamp and the
    /// source-hash cache's key hold the file's ctime), except from a
    /// checkout `datum pull` wrote, whose catalogue is keyed by its commit:
    /// an edit there was made by hand after the signed commit was checked
    /// out, so the message does not offer `--recompile` as the cure (it
    /// would apply the unsigned edit) without saying so. The checksum
    /// compiled is not quoted: the file may be a sensitive resource's, whose
    /// plain SHA-256 no output shows (a guessable secret is found from it).
    #[error("{} changed since the catalogue was compiled; run the pass again. In a checkout `datum pull` wrote, nothing is ever edited: such an edit skips the signature and is refused at every pass until a pull deploys another revision (`--recompile` would apply it as it is; see docs/pull.md)", path.display())]
    ContentChanged { path: PathBuf },

    #[error("path `{}` must be normalised (no `..`, `.`, `//` or trailing /): write `{}`", path.display(), suggestion.display())]
    NotNormalised { path: PathBuf, suggestion: PathBuf },

    #[error("path `{}` contains a NUL byte", path.display())]
    NulInPath { path: PathBuf },

    /// Shown escaped: a newline in a path would split every line that
    /// names it (diff headers, reports, logs).
    #[error(
        "path {path:?} contains a control character (a newline, a tab, ...): no managed path may"
    )]
    ControlInPath { path: PathBuf },

    #[error("path `{}` is longer than the system allows ({max} bytes for a path, 255 for each of its names)", path.display())]
    PathTooLong { path: PathBuf, max: usize },

    /// A managed path that leads, through a link `boundary.follow_links`
    /// lists, to Datum's own folder (the state store, the backups, the
    /// lock), which the catalogue refuses by its spelling.
    /// (Two paths: the folder is always [`crate::lock::STATE_FOLDER`], and a
    /// third would make every `Result` carrying a `HostError` larger.)
    #[error("refusing to reach {}: it is {} or inside it, Datum's own folder (the state store, the backups, the lock), reached as {} through a link `boundary.follow_links` lists: nothing may be declared there", path.display(), crate::lock::STATE_FOLDER, declared.display())]
    OwnFolder { path: PathBuf, declared: PathBuf },

    #[error("refusing to reach {}: its parent leads outside the root {} (to {}) through a symlink", path.display(), root.display(), resolved.display())]
    OutsideRoot {
        path: PathBuf,
        root: PathBuf,
        resolved: PathBuf,
    },

    /// A directory on the way to a managed path is a symbolic link (boxed:
    /// four paths would make every `Result` carrying a `HostError` large).
    #[error(transparent)]
    ParentLink(Box<ParentLink>),

    /// An unsafe ownership transition on the way (boxed like `ParentLink`).
    #[error(transparent)]
    UnsafeTransition(Box<UnsafeTransition>),

    /// An allowed link an unprivileged user controls leads out of what they
    /// own (boxed like `ParentLink`).
    #[error(transparent)]
    UnsafeLink(Box<UnsafeLink>),

    /// A parent on the way is something other than a directory.
    #[error("cannot reach {}: {} is not a directory", path.display(), parent.display())]
    NotADirectory { path: PathBuf, parent: PathBuf },

    /// One of Datum's own folders (state, backups, accepted patches) is not
    /// private to the user running Datum, or a link sits where one of its
    /// files belongs.
    #[error("refusing to use {}: {problem}", path.display())]
    NotPrivate { path: PathBuf, problem: String },

    /// A validator could not be run in its throwaway sandbox.
    #[error("cannot build the validator sandbox: {what}: {source}")]
    Sandbox {
        what: String,
        #[source]
        source: std::io::Error,
    },

    /// A file was to be laid into a validator's view where a program, a
    /// library or what loads them is read from: it would run as the
    /// validator, as root (see `sandbox::not_placeable`).
    #[error("{} is never laid into a validator's view: {why}", path.display())]
    NotPlaceable { path: PathBuf, why: String },

    /// Validators run sandboxed, which needs root; a non-root run must opt
    /// out explicitly.
    #[error(
        "validators run in a throwaway mount namespace, which needs root (CAP_SYS_ADMIN), and this process runs as uid {uid}; as a non-root user set {env}=off to run them unsandboxed with your own rights"
    )]
    SandboxNeedsRoot { uid: u32, env: &'static str },

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

    #[error("refusing to change the owner or mode of {} in place: it has {links} hard links, and the change would reach every one of them (one may be outside what Datum manages); the file must be rewritten instead", path.display())]
    HardLinked { path: PathBuf, links: u64 },

    /// The entry at the path is not the one the caller looked at and
    /// decided on (another was put in its place since, by whoever can
    /// write to its folder): nothing was changed.
    #[error("refusing to change the owner or mode of {}: the {seen} Datum looked at was replaced since by {found}; nothing was changed", path.display())]
    Replaced {
        path: PathBuf,
        seen: &'static str,
        found: String,
    },

    /// A folder Datum had just made (`mkdirat`, 0700) was not what it
    /// found at its name when it opened it: whoever can write to the folder
    /// above swapped it in between. Nothing was changed in what is there.
    #[error("refusing to use {}: Datum had just made a private folder there, and found {found} at its name instead (whoever can write to the folder above may swap it); nothing was changed in it", path.display())]
    NotMade { path: PathBuf, found: String },

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

    /// Whether this error is the boundary refusing a path (a parent link,
    /// an unsafe ownership transition, a parent leading out of the root):
    /// a finding about the host, not an I/O failure.
    pub fn is_boundary(&self) -> bool {
        matches!(
            self,
            HostError::OutsideRoot { .. }
                | HostError::OwnFolder { .. }
                | HostError::ParentLink(_)
                | HostError::UnsafeTransition(_)
                | HostError::UnsafeLink(_)
        )
    }

    /// Whether nothing can be at the path because a parent is missing or
    /// not a directory (an observation reads that as "absent").
    pub fn is_missing_parent(&self) -> bool {
        matches!(
            self,
            HostError::MissingParent { .. } | HostError::NotADirectory { .. }
        )
    }

    /// The path the error is about, where there is one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            HostError::Io { path, .. }
            | HostError::NotAbsolute { path }
            | HostError::ContentChanged { path, .. }
            | HostError::NotNormalised { path, .. }
            | HostError::NulInPath { path }
            | HostError::ControlInPath { path }
            | HostError::PathTooLong { path, .. }
            | HostError::OutsideRoot { path, .. }
            | HostError::OwnFolder { path, .. }
            | HostError::NotADirectory { path, .. }
            | HostError::NotPrivate { path, .. }
            | HostError::MissingParent { path, .. }
            | HostError::InTheWay { path, .. }
            | HostError::DirectoryNotEmpty { path }
            | HostError::HardLinked { path, .. }
            | HostError::Replaced { path, .. }
            | HostError::NotMade { path, .. }
            | HostError::LockTimeout { path, .. } => Some(path),
            HostError::ParentLink(e) => Some(&e.path),
            HostError::UnsafeTransition(e) => Some(&e.path),
            HostError::UnsafeLink(e) => Some(&e.path),
            HostError::UnknownUser { .. }
            | HostError::UnknownGroup { .. }
            | HostError::ProgramNotFound { .. }
            | HostError::Spawn { .. }
            | HostError::Sandbox { .. }
            | HostError::SandboxNeedsRoot { .. } => None,
            HostError::NotPlaceable { path, .. } => Some(path),
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
