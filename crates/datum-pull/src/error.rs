//! Why a pull did not deploy anything.
//!
//! A [`PullError::Refused`] is the revision's fault (unsigned, unknown
//! signer, expired key, altered, backwards, failing lint) and always says
//! that nothing was changed and which revision stays deployed. Every other
//! variant is the host's or the remote's (a fetch that failed, a state store
//! that cannot be read): nothing was changed either. [`Reason::word`] gives
//! each refusal a fixed word for metrics.

use std::path::PathBuf;

use crate::git::GitError;
use datum_host::HostError;

use crate::commit::short;

/// Why a fetched revision is not deployed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The commit carries no signature.
    Unsigned,
    /// The signature does not match the commit: it was altered after it was
    /// signed, or the signature is damaged.
    BadSignature { detail: String },
    /// The commit object is not one git writes (two `gpgsig` headers, a
    /// signature cut short): its signature cannot be checked, and it is
    /// refused as a bad signature is, saying what is wrong with it.
    Malformed { detail: String },
    /// The commit object is larger than Datum reads before its signature is
    /// checked (a commit is a few hundred bytes, its signature a few more):
    /// it cannot be verified, so it is refused as a bad signature is.
    TooLarge { limit: usize },
    /// Signed with a key no principal of the trust file holds.
    UnknownSigner {
        key: String,
        allowed_signers: PathBuf,
    },
    /// Signed with a key past its `valid-before` (or an expired OpenPGP key).
    ExpiredKey { key: String, detail: String },
    /// Signed with a key before its `valid-after`.
    KeyNotYetValid { key: String, detail: String },
    /// The key is in the revocation list.
    RevokedKey {
        signer: String,
        key: String,
        revoked_keys: PathBuf,
    },
    /// The key's `namespaces=` does not include `git`.
    NotForGit { signer: String, key: String },
    /// A kind of signature no trust root is configured for.
    NoTrustFor {
        kind: &'static str,
        needs: &'static str,
    },
    /// The revision does not descend from the one deployed (a force-push to
    /// an older or unrelated commit).
    Backwards { deployed: String },
    /// The revision is one a person rolled back from (recorded in the state
    /// store), built on it, or on the way to it, and the deployed revision
    /// does not hold it: serving it again would undo that person's rollback.
    RolledBackFrom { revision: String },
    /// The revision fails `datum lint`.
    Lint { errors: usize },
    /// The revision's tree cannot be written as a checkout (a path Datum
    /// refuses, such as a reserved name).
    BadTree { detail: String },
}

/// Every word [`PullError::word`] can return (the pull metrics export each
/// at zero from start-up).
pub const FAILURE_WORDS: &[&str] = &[
    "unsigned",
    "bad_signature",
    "unknown_signer",
    "expired_key",
    "key_not_yet_valid",
    "revoked_key",
    "wrong_namespace",
    "unsupported_signature",
    "backwards",
    "lint",
    "bad_tree",
    "config",
    "fetch",
    "state_store",
    "host",
];

impl Reason {
    /// A fixed word per reason (the `reason` label of the pull metrics).
    pub fn word(&self) -> &'static str {
        match self {
            Reason::Unsigned => "unsigned",
            Reason::BadSignature { .. } | Reason::Malformed { .. } | Reason::TooLarge { .. } => {
                "bad_signature"
            }
            Reason::UnknownSigner { .. } => "unknown_signer",
            Reason::ExpiredKey { .. } => "expired_key",
            Reason::KeyNotYetValid { .. } => "key_not_yet_valid",
            Reason::RevokedKey { .. } => "revoked_key",
            Reason::NotForGit { .. } => "wrong_namespace",
            Reason::NoTrustFor { .. } => "unsupported_signature",
            Reason::Backwards { .. } | Reason::RolledBackFrom { .. } => "backwards",
            Reason::Lint { .. } => "lint",
            Reason::BadTree { .. } => "bad_tree",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Unsigned => write!(f, "the commit is not signed"),
            Reason::BadSignature { detail } => write!(
                f,
                "its signature does not match its content: the commit was altered after it was signed, or the signature is damaged ({detail})"
            ),
            Reason::Malformed { detail } => {
                write!(f, "its signature cannot be checked: {detail}")
            }
            Reason::TooLarge { limit } => write!(
                f,
                "its signature cannot be checked: the commit object is larger than {} KiB (a commit is a few hundred bytes, its signature a few more)",
                limit / 1024
            ),
            Reason::UnknownSigner {
                key,
                allowed_signers,
            } => write!(
                f,
                "it is signed with a key that is not in {} ({key})",
                allowed_signers.display()
            ),
            Reason::ExpiredKey { key, detail } => {
                write!(
                    f,
                    "it is signed with a key that has expired ({key}): {detail}"
                )
            }
            Reason::KeyNotYetValid { key, detail } => {
                write!(
                    f,
                    "it is signed with a key that is not valid yet ({key}): {detail}"
                )
            }
            Reason::RevokedKey {
                signer,
                key,
                revoked_keys,
            } => write!(
                f,
                "it is signed by {signer} with a revoked key ({key}, in {})",
                revoked_keys.display()
            ),
            Reason::NotForGit { signer, key } => write!(
                f,
                "it is signed by {signer} with a key not allowed to sign git commits ({key}: its namespaces= leaves out `git`)"
            ),
            Reason::NoTrustFor { kind, needs } => {
                write!(
                    f,
                    "it carries an {kind} signature, which needs {needs} to verify"
                )
            }
            Reason::Backwards { deployed } => write!(
                f,
                "it does not descend from the deployed revision {} (a force-push to an older or unrelated commit); a person can allow it with --allow-rollback",
                short(deployed)
            ),
            Reason::RolledBackFrom { revision } => write!(
                f,
                "a person rolled back from {} (`datum pull --status` shows when and who), and this revision is that one, is built on it or leads to it; a person can allow it again with --allow-rollback",
                short(revision)
            ),
            Reason::Lint { errors } => write!(
                f,
                "`datum lint` finds {errors} error(s) in it (shown above)"
            ),
            Reason::BadTree { detail } => write!(f, "its files cannot be checked out: {detail}"),
        }
    }
}

/// A revision refused, and what stays deployed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub revision: String,
    pub git_ref: String,
    /// The source as shown (credentials removed).
    pub source: String,
    /// The revision that stays deployed, if any.
    pub deployed: Option<String>,
    pub reason: Reason,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "refusing {} ({} from {}): {}; nothing was changed",
            short(&self.revision),
            self.git_ref,
            self.source,
            self.reason
        )?;
        match &self.deployed {
            Some(d) => write!(f, ", {} stays deployed", short(d)),
            None => write!(f, ", nothing is deployed"),
        }
    }
}

/// A problem in `pull.yaml` or the options.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{}:{line}:{column}: {message}", path.display())]
    At {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{0}")]
    Missing(String),
    #[error(transparent)]
    Url(#[from] crate::source::BadUrl),
}

/// Why `datum pull` deployed nothing.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Refused(Box<Refusal>),
    #[error("cannot fetch {git_ref} from {remote}; nothing was changed: {error}")]
    Fetch {
        git_ref: String,
        remote: String,
        #[source]
        error: GitError,
    },
    #[error("{git_ref} is not a commit at {remote}; nothing was changed")]
    NotACommit { git_ref: String, remote: String },
    /// git fetched it but would not take the ref (exit 0, a warning): the
    /// remote is a shallow clone, whose history would have to be taken
    /// shallow, which the ancestry check cannot trust.
    #[error(
        "{git_ref} at {remote} was not taken: the remote is a shallow clone (made with --depth), and datum pull never takes shallow history, which would let a revision pass for a descendant of the deployed one; fetch from a full clone; nothing was changed"
    )]
    Shallow { git_ref: String, remote: String },
    #[error("cannot run {tool}: {detail}; nothing was changed")]
    Tool { tool: String, detail: String },
    #[error("{} is a {found}, not a link datum pull manages: move it away (datum pull puts a link there) or choose another --deploy; nothing was changed", path.display())]
    NotALink { path: PathBuf, found: String },
    /// `deploy` is not where the state store records the last pull's link:
    /// a pull would leave that link behind, pointing at the revision
    /// deployed then. A person moves it with `--move-deploy`.
    #[error(
        "deploy (--deploy) is {}, but the state store records the link the last pull made at {}, pointing at {}: deploying at the new place would leave that link behind, still read by whatever reads it (an agent or a cron apply whose --repo names it) at that revision for good, and at nothing once its checkout is pruned. Run `datum pull --move-deploy` once to make the link at {} and remove the one at {} (only while it is still the link datum pull made), then read the repository at {} (the agent's --repo); or set deploy back to {}; nothing was changed",
        deploy.display(),
        recorded.display(),
        short(revision),
        deploy.display(),
        recorded.display(),
        deploy.display(),
        recorded.display(),
    )]
    DeployMoved {
        /// The link the state store records (under the root).
        recorded: PathBuf,
        /// The link asked for now (under the root).
        deploy: PathBuf,
        /// What the recorded link pointed at when it was made.
        revision: String,
    },
    #[error("the state store {} is unusable, so the deployed revision cannot be checked (never backwards); nothing was changed: {source}", path.display())]
    Store {
        path: PathBuf,
        #[source]
        source: Box<datum_store::StoreError>,
    },
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Git(#[from] GitError),
}

impl PullError {
    /// The fixed word of a refusal or failure, for metrics.
    pub fn word(&self) -> &'static str {
        match self {
            PullError::Refused(r) => r.reason.word(),
            PullError::Config(_) | PullError::DeployMoved { .. } => "config",
            PullError::Fetch { .. } | PullError::NotACommit { .. } | PullError::Shallow { .. } => {
                "fetch"
            }
            PullError::Store { .. } => "state_store",
            PullError::Tool { .. }
            | PullError::NotALink { .. }
            | PullError::Host(_)
            | PullError::Git(_) => "host",
        }
    }

    /// The refusal, when the revision was refused.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            PullError::Refused(r) => Some(r),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_what_stays_deployed() {
        let r = Refusal {
            revision: "1".repeat(40),
            git_ref: "main".into(),
            source: "file:///srv/r.git".into(),
            deployed: Some("2".repeat(40)),
            reason: Reason::Unsigned,
        };
        assert_eq!(
            r.to_string(),
            "refusing 111111111111 (main from file:///srv/r.git): the commit is not signed; nothing was changed, 222222222222 stays deployed"
        );
        let back = Reason::Backwards {
            deployed: "2".repeat(40),
        };
        assert!(back.to_string().contains("--allow-rollback"));
        assert_eq!(back.word(), "backwards");
    }
}
