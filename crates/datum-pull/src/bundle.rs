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

/// The git folder of a repository: `DIR/.git` for a work tree, the folder
/// its `.git` file names for a linked work tree or a submodule (`gitdir:
/// PATH`, relative to `DIR` unless absolute), `DIR` itself for a bare
/// repository.
fn git_dir(repository: &Path) -> PathBuf {
    let dot_git = repository.join(".git");
    // The repository is the operator's (`--from DIR`): looked at, and its
    // `.git` file read, as git itself would.
    match datum_host::repo::symlink_metadata(&dot_git) {
        Ok(m) if m.is_dir() => dot_git,
        Ok(m) if m.is_file() && m.len() <= 4096 => datum_host::named::read_to_string(&dot_git)
            .ok()
            .and_then(|text| {
                let named = text.trim_end().strip_prefix("gitdir: ")?.to_owned();
                Some(repository.join(named))
            })
            .unwrap_or(dot_git),
        _ => repository.to_path_buf(),
    }
}

/// The git folder of `--from`, which must be a folder, as must the git
/// folder it names: git runs in it, and a missing one would fail as
/// "cannot run git" (its working folder cannot be entered).
fn checked_git_dir(repository: &Path) -> Result<PathBuf, PullError> {
    let refused = |why: String| {
        PullError::Config(crate::error::ConfigError::Missing(format!(
            "--from {}: {why}; nothing was written",
            repository.display()
        )))
    };
    match datum_host::repo::metadata(repository) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(refused("not a folder (a git repository is)".to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refused("no such folder".to_owned()));
        }
        Err(e) => return Err(refused(format!("cannot be read: {e}"))),
    }
    let dir = git_dir(repository);
    if !datum_host::repo::metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return Err(refused(format!(
            "its .git names {}, which is not a folder (a linked work tree whose git folder was removed?)",
            dir.display()
        )));
    }
    // Its real path: git runs in it with it as --git-dir, and tells that
    // it is inside the git folder (not at the top of a work tree) only
    // when the two paths are the same. Spelled with `..` or through a link
    // (`--from ..`), git took the branch's full name for a file too (a
    // loose ref is one there: `ambiguous argument 'refs/heads/main': both
    // revision and filename`).
    datum_host::repo::canonicalize(&dir).map_err(|e| refused(format!("cannot be read: {e}")))
}

/// Writes the bundle.
pub fn create(req: &BundleRequest) -> Result<Bundled, PullError> {
    let git = Git::new(checked_git_dir(&req.repository)?);
    // Not a repository at all: git's own message, not "not a commit".
    git.output(["rev-parse", "--git-dir"], 4096)?;
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
    // The host pulls a name (`--ref`), so the bundle must carry one.
    let Some(name) = full_ref(&git, &req.git_ref) else {
        return Err(PullError::Config(crate::error::ConfigError::Missing(
            format!(
                "--ref {}: name a branch or a tag (the bundle carries it under that name, and the host pulls it with the same --ref), not a commit",
                req.git_ref
            ),
        )));
    };
    let mut args: Vec<OsString> = ["bundle", "create", "--quiet"].map(OsString::from).to_vec();
    args.push(req.output.clone().into_os_string());
    match &req.since {
        Some(since) => {
            let base = resolve(since)?;
            if base == revision {
                return Err(PullError::Config(crate::error::ConfigError::Missing(
                    format!(
                        "--since {since}: {} is already at {}; there is nothing to bundle",
                        req.git_ref,
                        commit::short(&revision)
                    ),
                )));
            }
            args.push(format!("{base}..{name}").into());
        }
        None => args.push(name.clone().into()),
    }
    // The name the host pulls it by: `--ref HEAD` bundles the branch HEAD
    // is on, under that branch's name.
    let pulled_as = name
        .strip_prefix("refs/heads/")
        .or_else(|| name.strip_prefix("refs/tags/"))
        .unwrap_or(&name)
        .to_owned();
    git.output(args, 1 << 20)?;
    // git wrote the file the operator named; its size is for the message.
    let bytes = datum_host::named::size(&req.output).unwrap_or(0);
    Ok(Bundled {
        revision,
        git_ref: pulled_as,
        output: req.output.clone(),
        bytes,
    })
}

/// The full name of a branch or tag (`main` -> `refs/heads/main`), so the
/// bundle names it the way `datum pull --ref` asks for it; `None` for what
/// is not one (a commit id).
fn full_ref(git: &Git, name: &str) -> Option<String> {
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
    .and_then(|o| {
        // git rev-parse echoes `--end-of-options` on a line of its own.
        String::from_utf8_lossy(&o)
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("refs/"))
            .map(str::to_owned)
    })
}
