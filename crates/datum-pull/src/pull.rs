//! One pull, start to end: fetch, verify, check never-backwards, write the
//! checkout, lint it, switch the link, record, prune.
//!
//! The order is the point. Nothing the remote sent is checked out before
//! its signature is verified and its ancestry checked; nothing is switched
//! in before the whole checkout is written, made durable, and passed lint;
//! the switch is one rename of a link; and a refusal at any step leaves the
//! link, the deployed checkout and the state store as they were. A pull
//! killed at any moment leaves a partial checkout (`checkouts/.partial-*`),
//! a temporary link or git lock files at worst, all swept by the next pull,
//! which holds the same lock.
//!
//! On disk, under the root:
//!
//! ```text
//! var/lib/datum/pull/            0700, created without following links
//!   lock                         one pull at a time
//!   cache.git/                   the fetched objects (see `cache`)
//!   scratch/                     inputs of ssh-keygen and gpgv, short-lived
//!   checkouts/<commit>/          deployed and recent revisions, no .git
//!   checkouts/.partial-*/        a checkout being written
//! etc/datum/repository -> ../../var/lib/datum/pull/checkouts/<commit>
//! ```

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use datum_host::HostError;
use datum_host::deploy::Folder;
use datum_store::{Deployment, Store};

use crate::cache::Cache;
use crate::checkout::{self, DeployedRevision};
use crate::commit;
use crate::config::PullConfig;
use crate::error::{PullError, Reason, Refusal};
use crate::verify::{self, Refused, TrustFile, TrustRoots};

/// The pull folder, relative to the root.
pub const PULL_DIR: &str = "var/lib/datum/pull";
/// The checkouts' folder inside it.
pub const CHECKOUTS: &str = "checkouts";
/// Name prefix of checkouts being written.
const PARTIAL: &str = ".partial-";
/// The largest trust file read.
const TRUST_LIMIT: u64 = 16 << 20;

/// What a pull reports as it goes (for a progress display).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Fetching { source: String, git_ref: String },
    Fetched { revision: String },
    Verified { signer: String, key: String },
    Writing { done: u64, total: u64 },
    Linting,
    Switched,
}

/// One pull.
pub struct Request<'a> {
    pub root: &'a Path,
    pub config: &'a PullConfig,
    /// The state database.
    pub state: &'a Path,
    /// Who allowed going backwards (`--allow-rollback`), if anyone did.
    pub allow_rollback: Option<String>,
    /// How long to wait for another pull holding the lock.
    pub lock_timeout: Duration,
    /// What must hold of a checkout before it is switched in: `datum lint`.
    /// `Err(n)`: it found `n` errors (and showed them).
    pub gate: &'a dyn Fn(&Path) -> Result<(), usize>,
    pub progress: &'a mut dyn FnMut(Step),
    /// Unix seconds, for the records.
    pub now: i64,
}

/// What a pull did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The remote's revision is the one deployed: nothing changed.
    UpToDate {
        revision: String,
        warnings: Vec<String>,
    },
    Deployed(Box<Deployed>),
}

/// A revision switched in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployed {
    /// What was recorded in the state store: the revision, the one it
    /// replaced, ref, source, signer, key, and whether it was a rollback.
    pub record: Deployment,
    /// Files and links written (0 when an existing checkout was reused).
    pub files: u64,
    pub bytes: u64,
    /// The link, and the checkout it now points at (real paths).
    pub link: PathBuf,
    pub checkout: PathBuf,
    /// Checkouts removed (commit ids).
    pub pruned: Vec<String>,
    /// Things that went wrong after the switch, which did happen.
    pub warnings: Vec<String>,
}

/// Pulls, verifies and (when there is a new trusted revision) deploys.
pub fn pull(req: Request<'_>) -> Result<Outcome, PullError> {
    let config = req.config;
    let root = Folder::open(req.root)?;
    let pull_dir = root.private(Path::new(PULL_DIR))?;
    let _lock = pull_dir.lock(OsStr::new("lock"), req.lock_timeout)?;
    let roots = trust_roots(config)?;

    // The link and what it points at now.
    let (link_parent_rel, link_name) = split_link(&config.deploy)?;
    let link_parent = root
        .descend(&link_parent_rel, Some(0o755))?
        .ok_or_else(|| {
            HostError::io(
                "create directory",
                req.root.join(&link_parent_rel),
                std::io::ErrorKind::NotFound.into(),
            )
        })?;
    let link_path = link_parent.path().join(&link_name);
    let current = link_parent.read_link(&link_name).map_err(|e| match e {
        HostError::InTheWay { path, found } => PullError::NotALink { path, found },
        e => PullError::Host(e),
    })?;
    let marker: Option<DeployedRevision> = match current {
        Some(_) => checkout::deployed_revision(&link_path),
        None => None,
    };

    // What the state store remembers; unusable is a refusal to go on.
    let store_error = |source| PullError::Store {
        path: req.state.to_path_buf(),
        source: Box::new(source),
    };
    // A store that does not exist yet records nothing, and is created only
    // when there is a deployment to record (a refused first pull leaves
    // none behind).
    let mut warnings: Vec<String> = Vec::new();
    let mut store = match datum_host::fs::lstat(req.state)? {
        Some(_) => {
            let (store, store_warnings) = Store::open(req.state).map_err(store_error)?;
            warnings.extend(store_warnings.iter().map(ToString::to_string));
            Some(store)
        }
        None => None,
    };
    let recorded = match &store {
        Some(s) => s
            .current_deployment()
            .map_err(store_error)?
            .map(|d| d.deployment.revision),
        None => None,
    };

    // Debris of killed pulls.
    let checkouts = pull_dir
        .descend(Path::new(CHECKOUTS), Some(0o700))?
        .ok_or_else(|| {
            HostError::io(
                "create directory",
                pull_dir.path().join(CHECKOUTS),
                std::io::ErrorKind::NotFound.into(),
            )
        })?;
    for entry in checkouts.entries()? {
        if entry.to_string_lossy().starts_with(PARTIAL) {
            checkouts.remove_all(&entry)?;
        }
    }
    link_parent.sweep_link_temporaries(&link_name)?;
    pull_dir.remove_all(OsStr::new("scratch"))?;

    // Fetch.
    (req.progress)(Step::Fetching {
        source: config.source.display(),
        git_ref: config.git_ref.clone(),
    });
    let (cache, _swept) = Cache::open(&pull_dir, config.timeout)?;
    let new = cache.fetch(config)?;
    (req.progress)(Step::Fetched {
        revision: new.clone(),
    });
    let deployed_now = marker.as_ref().map(|m| m.commit.clone());
    let refuse = |reason: Reason| {
        let _ = cache.forget_incoming();
        PullError::Refused(Box::new(Refusal {
            revision: new.clone(),
            git_ref: config.git_ref.clone(),
            source: config.source.display(),
            deployed: deployed_now.clone().or_else(|| recorded.clone()),
            reason,
        }))
    };
    if deployed_now.as_deref() == Some(new.as_str()) {
        // Verified when it was deployed; nothing to do.
        if let Some(r) = recorded.as_ref().filter(|r| **r != new) {
            warnings.push(format!(
                "the state store records {} as deployed, but {} points at {}",
                commit::short(r),
                link_path.display(),
                commit::short(&new)
            ));
        }
        cache.forget_incoming()?;
        return Ok(Outcome::UpToDate {
            revision: new,
            warnings,
        });
    }

    // Verify the signature before anything else is looked at.
    let raw = cache.commit(&new)?;
    let parsed = commit::parse(&raw).map_err(|e| {
        refuse(Reason::BadSignature {
            detail: e.to_string(),
        })
    })?;
    let scratch = pull_dir.private(Path::new("scratch"))?;
    let verified = match verify::verify(parsed.signed.as_ref(), &roots, &scratch) {
        Ok(v) => v,
        Err(Refused::Reason(reason)) => return Err(refuse(reason)),
        Err(Refused::Failed(e)) => {
            let _ = cache.forget_incoming();
            return Err(e);
        }
    };
    drop(scratch);
    pull_dir.remove_all(OsStr::new("scratch"))?;
    (req.progress)(Step::Verified {
        signer: verified.signer.clone(),
        key: verified.key.clone(),
    });

    // Never backwards: it must descend from everything known deployed.
    let mut constraints: Vec<&String> = recorded.iter().chain(deployed_now.iter()).collect();
    constraints.dedup();
    let mut rollback = false;
    for deployed in constraints {
        if !cache.descends(&new, deployed)? {
            if req.allow_rollback.is_none() {
                return Err(refuse(Reason::Backwards {
                    deployed: deployed.clone(),
                }));
            }
            rollback = true;
        }
    }

    // The checkout: reused when a complete one of this commit is there.
    let name = OsString::from(&new);
    let reused = match checkouts.open_dir(&name)? {
        Some(f) if checkout::read_marker(&f)?.is_some_and(|m| m.commit == new) => true,
        Some(_) => {
            checkouts.remove_all(&name)?;
            false
        }
        None => false,
    };
    let mut written = datum_host::deploy::TreeWritten::default();
    if !reused {
        let partial = OsString::from(format!("{PARTIAL}{new}-{}", std::process::id()));
        let folder = checkouts.create_dir(&partial, 0o755)?;
        let marker = DeployedRevision {
            format_version: 1,
            commit: new.clone(),
            tree: parsed.tree.clone(),
            git_ref: config.git_ref.clone(),
            source: config.source.display(),
            signer: verified.signer.clone(),
            key: verified.key.clone(),
            checked_out_at: req.now,
        };
        let progress = &mut *req.progress;
        let result = checkout::write(&cache, &new, &marker, folder, &mut |done, total| {
            progress(Step::Writing { done, total })
        });
        match result {
            Ok(w) => written = w,
            Err(e) => {
                let _ = checkouts.remove_all(&partial);
                return Err(match e {
                    PullError::Refused(r) => refuse(r.reason),
                    other => {
                        let _ = cache.forget_incoming();
                        other
                    }
                });
            }
        }
        checkouts.rename_new(&partial, &name)?;
        checkouts.sync()?;
    }
    let checkout_path = checkouts.path().join(&name);

    // Lint before the switch: a failure keeps the old revision.
    (req.progress)(Step::Linting);
    if let Err(errors) = (req.gate)(&checkout_path) {
        checkouts.remove_all(&name)?;
        return Err(refuse(Reason::Lint { errors }));
    }

    // The switch: one rename of a link.
    let target = relative_target(&config.deploy, &new);
    link_parent.replace_link(&link_name, &target)?;
    (req.progress)(Step::Switched);
    if let Some(f) = checkouts.open_dir(&name)? {
        // Pruning keeps the most recently deployed.
        f.touch()?;
    }

    // Remember it: the cache keeps its history, the store the record.
    if let Err(e) = cache.deployed(&new) {
        warnings.push(format!(
            "cannot mark {} deployed in the cache: {e}",
            commit::short(&new)
        ));
    }
    let record = Deployment {
        deployed_at: req.now,
        revision: new.clone(),
        previous: deployed_now.clone().or_else(|| recorded.clone()),
        git_ref: config.git_ref.clone(),
        source: config.source.display(),
        signer: verified.signer.clone(),
        key: verified.key.clone(),
        rollback,
        allowed_by: if rollback {
            req.allow_rollback.clone()
        } else {
            None
        },
    };
    let stored = match store.take() {
        Some(s) => Ok(s),
        None => Store::open(req.state).map(|(s, w)| {
            warnings.extend(w.iter().map(ToString::to_string));
            s
        }),
    };
    if let Err(e) = stored.and_then(|mut s| s.record_deployment(&record)) {
        warnings.push(format!(
            "{} is deployed but could not be recorded in the state store: {e}",
            commit::short(&new)
        ));
    }
    let pruned = prune(&checkouts, config.keep, &new, &mut warnings);
    if let Err(e) = cache.maintain() {
        warnings.push(format!("git gc in the cache failed: {e}"));
    }
    Ok(Outcome::Deployed(Box::new(Deployed {
        record,
        files: written.files,
        bytes: written.bytes,
        link: link_path,
        checkout: checkout_path,
        pruned,
        warnings,
    })))
}

/// The trust files, read once (owner and mode checked). A file that is
/// configured but missing is an error: never fall back to trusting less.
fn trust_roots(config: &PullConfig) -> Result<TrustRoots, PullError> {
    let read = |path: &Option<PathBuf>| -> Result<Option<TrustFile>, PullError> {
        let Some(path) = path else { return Ok(None) };
        match datum_host::deploy::read_trusted(path, TRUST_LIMIT)? {
            Some(bytes) => Ok(Some(TrustFile {
                path: path.clone(),
                bytes,
            })),
            None => Err(PullError::Host(HostError::io(
                "read",
                path,
                std::io::ErrorKind::NotFound.into(),
            ))),
        }
    };
    Ok(TrustRoots {
        allowed_signers: read(&config.allowed_signers)?,
        revoked_keys: read(&config.revoked_keys)?,
        openpgp_keyring: read(&config.openpgp_keyring)?,
    })
}

/// The link's folder (relative to the root) and its name.
fn split_link(deploy: &Path) -> Result<(PathBuf, OsString), PullError> {
    let rel = deploy.strip_prefix("/").unwrap_or(deploy);
    match (rel.parent(), rel.file_name()) {
        (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => {
            Ok((parent.to_path_buf(), name.to_os_string()))
        }
        _ => Err(PullError::Config(crate::error::ConfigError::Missing(
            format!(
                "--deploy {}: the link must be in a folder below /",
                deploy.display()
            ),
        ))),
    }
}

/// The link's target, relative to the link's folder, so it holds under any
/// `--root` (both paths are reached without links, so `..` means what it
/// says).
fn relative_target(deploy: &Path, revision: &str) -> PathBuf {
    let from: Vec<Component> = deploy
        .parent()
        .map(|p| p.components().collect())
        .unwrap_or_default();
    let to_path = Path::new("/").join(PULL_DIR).join(CHECKOUTS).join(revision);
    let to: Vec<Component> = to_path.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut target = PathBuf::new();
    for _ in common..from.len() {
        target.push("..");
    }
    for c in &to[common..] {
        target.push(c);
    }
    target
}

/// Removes all but the `keep` most recently deployed checkouts (the one
/// just deployed always stays); returns the commits removed.
fn prune(
    checkouts: &Folder,
    keep: usize,
    deployed: &str,
    warnings: &mut Vec<String>,
) -> Vec<String> {
    let mut others: Vec<(std::time::SystemTime, OsString)> = Vec::new();
    let entries = match checkouts.entries() {
        Ok(e) => e,
        Err(e) => {
            warnings.push(format!("cannot prune old checkouts: {e}"));
            return Vec::new();
        }
    };
    for entry in entries {
        let text = entry.to_string_lossy();
        if !commit::is_commit_id(&text) || text == deployed {
            continue;
        }
        match checkouts.modified(&entry) {
            Ok(t) => others.push((t, entry)),
            Err(e) => warnings.push(format!("cannot prune {text}: {e}")),
        }
    }
    others.sort_by_key(|b| std::cmp::Reverse(b.0));
    let mut pruned = Vec::new();
    for (_, entry) in others.into_iter().skip(keep.saturating_sub(1)) {
        match checkouts.remove_all(&entry) {
            Ok(()) => pruned.push(entry.to_string_lossy().into_owned()),
            Err(e) => warnings.push(format!("cannot prune {}: {e}", entry.to_string_lossy())),
        }
    }
    pruned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_target_is_relative_to_the_links_folder() {
        let c = "c".repeat(40);
        assert_eq!(
            relative_target(Path::new("/etc/datum/repository"), &c),
            PathBuf::from(format!("../../var/lib/datum/pull/checkouts/{c}"))
        );
        assert_eq!(
            relative_target(Path::new("/var/lib/datum/repo"), &c),
            PathBuf::from(format!("pull/checkouts/{c}"))
        );
        assert_eq!(
            relative_target(Path::new("/srv/repo"), &c),
            PathBuf::from(format!("../var/lib/datum/pull/checkouts/{c}"))
        );
        let (parent, name) = split_link(Path::new("/etc/datum/repository")).unwrap();
        assert_eq!(
            (parent.as_path(), name.as_os_str()),
            (Path::new("etc/datum"), OsStr::new("repository"))
        );
        assert!(split_link(Path::new("/repository")).is_err());
    }

    #[test]
    fn pruning_keeps_the_deployed_and_the_most_recent_others() {
        let dir = tempfile::tempdir().unwrap();
        let folder = Folder::open(dir.path()).unwrap();
        let ids: Vec<String> = ["1", "2", "3", "4"].iter().map(|d| d.repeat(40)).collect();
        for (i, id) in ids.iter().enumerate() {
            std::fs::create_dir(dir.path().join(id)).unwrap();
            std::fs::write(dir.path().join(id).join("f"), b"x").unwrap();
            let t = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + i as u64);
            std::fs::File::open(dir.path().join(id))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        std::fs::create_dir(dir.path().join("not-a-checkout")).unwrap();
        let mut warnings = Vec::new();
        // The oldest is the deployed one (a rollback): it stays anyway.
        let pruned = prune(&folder, 3, &ids[0], &mut warnings);
        assert_eq!(pruned, vec![ids[1].clone()]);
        assert!(warnings.is_empty(), "{warnings:?}");
        for keep in [&ids[0], &ids[2], &ids[3]] {
            assert!(dir.path().join(keep).exists());
        }
        assert!(dir.path().join("not-a-checkout").exists());
    }
}
