//! `datum bundle`: a revision and its history in one file, for hosts that
//! cannot reach the remote (`datum pull --bundle FILE` takes it, verified the
//! same way as a fetch).
//!
//! Runs `git bundle create` in the operator's repository with the same
//! minimal configuration as every other git command (no hooks, no
//! configuration but the repository's own). A bundle may leave out history
//! the host already has (`--since`): the host's cache then needs those
//! commits, and a fetch from the bundle says which ones it lacks. Must not
//! sign or verify: signing is the author's, verifying the host's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::git::Git;

use crate::commit;
use crate::error::PullError;

/// What to bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleRequest {
    /// A git repository: a work tree (with `.git`) or a bare one.
    pub repository: PathBuf,
    pub git_ref: String,
    /// Leave out what this revision already has (the host has it).
    pub since: Option<String>,
    /// The bundle file to write (absolute).
    pub output: PathBuf,
}

/// A bundle written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundled {
    pub revision: String,
    pub git_ref: String,
    pub output: PathBuf,
    pub bytes: u64,
}

/// The git folder of a repository: `DIR/.git` for a work tree, `DIR` itself
/// for a bare repository.
fn git_dir(repository: &Path) -> PathBuf {
    let dot_git = repository.join(".git");
    // The repository is the operator's (`--from DIR`): looked at, not read.
    match datum_host::repo::symlink_metadata(&dot_git) {
        Ok(m) if m.is_dir() => dot_git,
        _ => repository.to_path_buf(),
    }
}

/// Writes the bundle.
pub fn create(req: &BundleRequest) -> Result<Bundled, PullError> {
    let git = Git::new(git_dir(&req.repository));
    let resolve = |name: &str| -> Result<String, PullError> {
        let out = git.output(
            [
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &format!("{name}^{{commit}}"),
            ],
            4096,
        );
        let id = out.map(|o| String::from_utf8_lossy(&o).trim().to_owned());
        match id {
            Ok(id) if commit::is_commit_id(&id) => Ok(id),
            _ => Err(PullError::NotACommit {
                git_ref: name.to_owned(),
                remote: req.repository.display().to_string(),
            }),
        }
    };
    let revision = resolve(&req.git_ref)?;
    let mut args: Vec<OsString> = ["bundle", "create", "--quiet"].map(OsString::from).to_vec();
    args.push(req.output.clone().into_os_string());
    match &req.since {
        Some(since) => {
            let base = resolve(since)?;
            args.push(format!("{base}..{}", full_ref(&git, &req.git_ref)).into());
        }
        None => args.push(full_ref(&git, &req.git_ref).into()),
    }
    git.output(args, 1 << 20)?;
    // git wrote the file the operator named; its size is for the message.
    let bytes = datum_host::named::size(&req.output).unwrap_or(0);
    Ok(Bundled {
        revision,
        git_ref: req.git_ref.clone(),
        output: req.output.clone(),
        bytes,
    })
}

/// The full name of a branch or tag (`main` -> `refs/heads/main`), so the
/// bundle names it the way `datum pull --ref` asks for it.
fn full_ref(git: &Git, name: &str) -> String {
    git.output(
        [
            "rev-parse",
            "--symbolic-full-name",
            "--end-of-options",
            name,
        ],
        4096,
    )
    .ok()
    .map(|o| String::from_utf8_lossy(&o).trim().to_owned())
    .filter(|full| full.starts_with("refs/"))
    .unwrap_or_else(|| name.to_owned())
}
