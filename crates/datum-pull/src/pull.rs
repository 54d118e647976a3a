//! One pull, start to end: fetch, verify, check never-backwards, write the
//! checkout, lint it, switch the link, record, prune.
//!
//! The order is the point. Nothing the remote sent is checked out before
//! its signature is verified and its ancestry checked; nothing is switched
//! in before the whole checkout is written, made durable, and passed lint;
//! the switch is one rename of a link; and a refusal at any step leaves the
//! link, the deployed checkout and the state store as they were. A pull
//! killed at any moment leaves a partial checkout (`checkouts/.partial-*`),
//! a staged link, a quarantine or git lock files at worst, all swept by the
//! next pull, which holds the same lock.
//!
//! Every folder and file here is reached through `datum-host`'s handles:
//! the pull folder is a private folder ([`PrivateDir`], reached from the
//! root one component at a time, never through a link), a checkout is
//! written beneath its open folder, the link's folder is reached by the
//! boundary's walk and the link replaced by a staged link renamed over it
//! relative to that folder. The state store is opened in its private folder
//! and, when it cannot be used, nothing is deployed (fail closed).
//!
//! On disk, under the root:
//!
//! ```text
//! var/lib/datum/pull/            0700, a private folder
//!   lock                         one pull at a time
//!   cache.git/                   the deployed revisions' objects (see `cache`)
//!   incoming.git/                the quarantine a fetch writes to, per pull
//!   scratch/                     inputs of ssh-keygen and gpgv, short-lived
//!   checkouts/<commit>/          deployed and recent revisions, no .git
//!   checkouts/.partial-*/        a checkout being written
//! etc/datum/repository -> ../../var/lib/datum/pull/checkouts/<commit>
//! ```

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use datum_host::{Dir, FileKind, Host, HostError, PrivateDir, RootLock};
use datum_store::{Deployment, Store};

use crate::cache::Cache;
use crate::checkout::{self, DeployedRevision};
use crate::commit;
use crate::config::PullConfig;
use crate::error::{PullError, Reason, Refusal};
use crate::tree::TreeWritten;
use crate::verify::{self, Refused, TrustFile, TrustRoots};

/// The pull folder, relative to the root.
pub const PULL_DIR: &str = "var/lib/datum/pull";
/// Datum's private folder, as declared (the pull folder is `pull` in it).
const STATE_FOLDER: &str = datum_host::lock::STATE_FOLDER;
/// The state database's name in Datum's folder.
const STATE_DB: &str = "state.db";
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
    /// The state database when the operator named one (`--state FILE`);
    /// `None` for `state.db` in Datum's folder under the root.
    pub state: Option<&'a Path>,
    /// Who allowed going backwards (`--allow-rollback`), if anyone did.
    pub allow_rollback: Option<String>,
    /// A person moves the link (`--move-deploy`): `deploy` is not where the
    /// state store records the last pull's link, and that link goes (while
    /// it is still the one `datum pull` made).
    pub move_deploy: bool,
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
    let host = Host::new(req.root);
    let missing = |path: PathBuf| {
        PullError::Host(HostError::io(
            "create directory",
            path,
            std::io::ErrorKind::NotFound.into(),
        ))
    };
    // The files the settings name (the trust root, ssh's files, a bundle)
    // first: one missing or unsafe is refused before any folder of Datum's
    // is made (they need none, nor the lock).
    let roots = trust_roots(config)?;
    ssh_files(config)?;
    bundle_file(config)?;
    // Then the link's folder, as far as it is there: a refusal of it (a
    // folder others may write to on the way) leaves Datum's own folders as
    // they were, not made. A folder missing on the way is made only at the
    // switch, so a pull refused (its revision, or a change of deploy)
    // leaves none behind.
    let (link_parent_declared, link_name) = split_link(&config.deploy)?;
    let link_parent = folder_of_link(&host, &link_parent_declared, false)?.map(|(dir, _)| dir);
    // What is where the link goes, read here only to refuse what is not
    // a link before anything is made (read again under the lock).
    let link = link_parent.as_ref().map(|folder| folder.entry(&link_name));
    if let Some(link) = &link {
        link_now(link)?;
    }
    let datum_dir = PrivateDir::open_in(&host, Path::new(STATE_FOLDER), true)?
        .ok_or_else(|| missing(host.root().join(STATE_FOLDER.trim_start_matches('/'))))?;
    let pull_dir = datum_dir
        .subdir("pull", true)?
        .ok_or_else(|| missing(datum_dir.file_path("pull")))?;
    let _lock = RootLock::acquire_in(&pull_dir, "lock", req.lock_timeout)?;
    let checkouts = pull_dir
        .subdir(CHECKOUTS, true)?
        .ok_or_else(|| missing(pull_dir.file_path(CHECKOUTS)))?;

    // The link and what it points at now (read under the lock): none
    // while its folder is missing. The link's own time is when it was
    // switched (a link is made staged and renamed in place, never changed).
    let link_path = match &link {
        Some(link) => link.path().to_path_buf(),
        None => host
            .root()
            .join(config.deploy.strip_prefix("/").unwrap_or(&config.deploy)),
    };
    let (current, switched_at) = match &link {
        Some(link) => link_now(link)?.unzip(),
        None => (None, None),
    };
    let marker: Option<DeployedRevision> = match &current {
        Some(target) => deployed_marker(&config.deploy, target, &checkouts, &link_path)?,
        None => None,
    };

    // What the state store remembers; unusable is a refusal to go on.
    let (state_dir, state_name) = match req.state {
        None => (datum_dir.clone(), OsString::from(STATE_DB)),
        Some(file) => PrivateDir::open_parent_of(file, true)?
            .ok_or_else(|| missing(file.parent().unwrap_or(file).to_path_buf()))?,
    };
    let state_name = state_name.to_string_lossy().into_owned();
    let state_path = state_dir.file_path(&state_name);
    let store_error = |source| PullError::Store {
        path: state_path.clone(),
        source: Box::new(source),
    };
    // A store that does not exist yet records nothing, and is created only
    // when there is a deployment to record (a refused first pull leaves
    // none behind); there must be room to create it, or nothing is
    // deployed that could not be recorded.
    let mut warnings: Vec<String> = Vec::new();
    let mut store = match state_dir.lstat(&state_name)? {
        Some(_) => Some(Store::open_in(&state_dir, &state_name).map_err(store_error)?),
        None => {
            datum_store::require_room(&state_dir, &state_path).map_err(store_error)?;
            None
        }
    };
    let last = match &store {
        Some(s) => s.current_deployment().map_err(store_error)?,
        None => None,
    };
    let recorded = last.as_ref().map(|d| d.deployment.revision.clone());
    // Where the last pull's link is, when the store knows (schema 11 on).
    let recorded_link = last
        .as_ref()
        .and_then(|d| d.deployment.link.as_deref())
        .map(PathBuf::from);
    // `deploy` changed since: the link made before would be left behind,
    // still read by whatever reads it (an agent or a cron apply whose
    // --repo names it), pointing at the revision deployed then for good,
    // and at nothing once a later pull prunes its checkout. A person moves
    // it (`--move-deploy`), or sets `deploy` back.
    let moving_from = match (&recorded_link, &recorded) {
        (Some(old), Some(revision)) if *old != config.deploy => {
            if !req.move_deploy {
                return Err(PullError::DeployMoved {
                    recorded: host.root().join(old.strip_prefix("/").unwrap_or(old)),
                    deploy: link_path.clone(),
                    revision: revision.clone(),
                });
            }
            Some(old.clone())
        }
        _ => None,
    };
    // What people rolled back from (newest first): not deployed again
    // unasked while the deployed revision does not hold it.
    let mut rolled_back_from: Vec<String> = Vec::new();
    if let Some(s) = &store {
        for d in s.deployments(usize::MAX).map_err(store_error)? {
            if let Some(from) = d.deployment.previous.filter(|_| d.deployment.rollback)
                && !rolled_back_from.contains(&from)
            {
                rolled_back_from.push(from);
            }
        }
    }

    // Debris of killed pulls.
    for (entry, _) in checkouts.list()? {
        if entry.to_string_lossy().starts_with(PARTIAL) {
            checkouts.dir().entry(&entry).remove_all()?;
        }
    }
    if let Some(folder) = &link_parent {
        sweep_staged_links(folder, &link_name)?;
    }
    pull_dir.dir().entry(OsStr::new("scratch")).remove_all()?;

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
    // Our link names a checkout of ours that the store does not record: a
    // pull was killed (or could not write the store) between its switch
    // and its record. That deployment is recorded, as it happened (at the
    // link's time, from the checkout's marker), before anything this pull
    // deploys, and only when this pull ends well (a refusal changes
    // nothing; the next pull finds it the same way).
    let missed = marker.as_ref().filter(|m| {
        current.as_deref() == Some(relative_target(&config.deploy, &m.commit).as_path())
            && recorded.as_deref() != Some(m.commit.as_str())
    });
    let missed = match missed {
        None => None,
        Some(m) => {
            let rollback = match &recorded {
                Some(r) => !cache.descends(&m.commit, r)?,
                None => false,
            };
            Some(Deployment {
                deployed_at: switched_at.unwrap_or(req.now),
                revision: m.commit.clone(),
                previous: recorded.clone(),
                git_ref: m.git_ref.clone(),
                source: m.source.clone(),
                signer: m.signer.clone(),
                key: m.key.clone(),
                rollback,
                allowed_by: rollback.then(|| {
                    "(unknown: the pull that switched it in was interrupted before recording it)"
                        .to_owned()
                }),
                link: Some(config.deploy.display().to_string()),
            })
        }
    };
    // A rollback the store missed is a person's as much as a recorded one.
    if let Some(from) = missed
        .as_ref()
        .filter(|m| m.rollback)
        .and_then(|m| m.previous.clone())
        && !rolled_back_from.contains(&from)
    {
        rolled_back_from.push(from);
    }
    let record_missed = |store: &mut Option<Store>, warnings: &mut Vec<String>| {
        let Some(record) = &missed else { return };
        warnings.push(match record_in(store, &state_dir, &state_name, record) {
            Ok(_) => format!(
                "{} points at {}, which the state store did not record (a pull was interrupted after the switch): recorded now, as deployed at the link's time",
                link_path.display(),
                commit::short(&record.revision)
            ),
            Err(e) => format!(
                "{} points at {}, which the state store did not record, and it still cannot be recorded: {e}",
                link_path.display(),
                commit::short(&record.revision)
            ),
        });
    };
    if deployed_now.as_deref() == Some(new.as_str()) {
        // Verified when it was deployed; nothing to switch.
        if missed.is_some() {
            record_missed(&mut store, &mut warnings);
            if let Err(e) = cache.deployed(&new) {
                warnings.push(format!(
                    "cannot mark {} deployed in the cache: {e}",
                    commit::short(&new)
                ));
            }
        } else {
            if let Some(r) = recorded.as_ref().filter(|r| **r != new) {
                warnings.push(format!(
                    "the state store records {} as deployed, but {} points at {}",
                    commit::short(r),
                    link_path.display(),
                    commit::short(&new)
                ));
            }
            cache.forget_incoming()?;
        }
        // The link at `deploy` already names the remote's revision (put
        // there by hand, or by a pull whose record was lost): moving is
        // recording it there, and dealing with the old link.
        if let (Some(old), Some(m), None) = (&moving_from, &marker, &missed) {
            let record = Deployment {
                deployed_at: switched_at.unwrap_or(req.now),
                revision: m.commit.clone(),
                previous: recorded.clone(),
                git_ref: m.git_ref.clone(),
                source: m.source.clone(),
                signer: m.signer.clone(),
                key: m.key.clone(),
                rollback: false,
                allowed_by: None,
                link: Some(config.deploy.display().to_string()),
            };
            if let Err(e) = record_in(&mut store, &state_dir, &state_name, &record) {
                warnings.push(format!(
                    "the link at {} could not be recorded in the state store: {e}",
                    link_path.display()
                ));
            }
            warnings.push(move_old_link(&host, old, &link_path));
        } else if let Some(old) = &moving_from {
            warnings.push(move_old_link(&host, old, &link_path));
        }
        return Ok(Outcome::UpToDate {
            revision: new,
            warnings,
        });
    }

    // Verify the signature before anything else is looked at.
    let raw = match cache.commit(&new) {
        Ok(raw) => raw,
        Err(crate::git::GitError::TooLarge { limit, .. }) => {
            return Err(refuse(Reason::TooLarge { limit }));
        }
        Err(e) => return Err(e.into()),
    };
    let parsed = commit::parse(&raw).map_err(|e| {
        refuse(Reason::Malformed {
            detail: e.to_string(),
        })
    })?;
    // Signed over its SHA-256 form only: nothing here can verify that.
    if parsed.signed.is_none() && parsed.sha256_signature {
        return Err(refuse(Reason::NoTrustFor {
            kind: "SHA-256-form (gpgsig-sha256)",
            needs: "a signature over the commit's SHA-1 form (gpgsig) beside it",
        }));
    }
    let scratch = pull_dir
        .subdir("scratch", true)?
        .ok_or_else(|| missing(pull_dir.file_path("scratch")))?;
    let verified = verify::verify(parsed.signed.as_ref(), &roots, &scratch);
    // The tools' inputs go whatever they said (a refusal leaves nothing).
    drop(scratch);
    let swept = pull_dir.dir().entry(OsStr::new("scratch")).remove_all();
    let verified = match verified {
        Ok(v) => v,
        Err(Refused::Reason(reason)) => return Err(refuse(reason)),
        Err(Refused::Failed(e)) => {
            let _ = cache.forget_incoming();
            return Err(e);
        }
    };
    swept?;
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
    // Nor back to what a person rolled back from: forward in ancestry from
    // the revision they went back to, but serving it again (or what is
    // built on it, or a revision on the way to it) would undo their
    // decision. Once a person allows it and it is deployed, the deployed
    // revision holds it and it constrains nothing more.
    if let Some(current) = deployed_now.as_ref().or(recorded.as_ref()) {
        for from in &rolled_back_from {
            // Held by the deployed revision: settled, and asked first (a
            // rollback of long ago costs one question, not three).
            if cache.descends(current, from)? {
                continue;
            }
            if cache.descends(&new, from)? || cache.descends(from, &new)? {
                if req.allow_rollback.is_none() {
                    return Err(refuse(Reason::RolledBackFrom {
                        revision: from.clone(),
                    }));
                }
                rollback = true;
            }
        }
    }

    // The checkout: reused when a complete one of this commit is there.
    let name = OsString::from(&new);
    let reused = match checkouts.dir().open_child_dir(&name) {
        Ok(Some(f)) if checkout::read_marker(&f)?.is_some_and(|m| m.commit == new) => true,
        Ok(None) => false,
        // Incomplete, foreign, or not a folder: removed (a link itself,
        // never what it points at).
        Ok(Some(_)) | Err(HostError::NotADirectory { .. }) => {
            checkouts.dir().entry(&name).remove_all()?;
            false
        }
        Err(e) => return Err(e.into()),
    };
    let mut written = TreeWritten::default();
    if !reused {
        let partial = OsString::from(format!("{PARTIAL}{new}-{}", std::process::id()));
        checkouts
            .dir()
            .entry(&partial)
            .create_dir(0o755, None, None)?;
        let folder = checkouts
            .dir()
            .open_child_dir(&partial)?
            .ok_or_else(|| missing(checkouts.file_path(&partial)))?;
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
                let _ = checkouts.dir().entry(&partial).remove_all();
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
    let checkout_path = checkouts.file_path(&name);

    // Lint before the switch: a failure keeps the old revision.
    (req.progress)(Step::Linting);
    if let Err(errors) = (req.gate)(&checkout_path) {
        checkouts.dir().entry(&name).remove_all()?;
        return Err(refuse(Reason::Lint { errors }));
    }

    // The link's folder, made now when missing on the way (the same walk,
    // every folder judged again): a pull refused before here made none.
    let link_parent = match link_parent {
        Some(folder) => folder,
        None => match folder_of_link(&host, &link_parent_declared, true) {
            Ok(Some((folder, _))) => folder,
            // A walk that may make folders never stops at a missing one.
            Ok(None) => return Err(missing(link_path)),
            Err(e) => {
                if !reused {
                    let _ = checkouts.dir().entry(&name).remove_all();
                }
                let _ = cache.forget_incoming();
                return Err(e.into());
            }
        },
    };

    // Trusted and linted: its objects join the cache, where the ancestry
    // check of the pulls to come finds them (until here they were in the
    // quarantine only, which a refusal drops whole).
    cache.accept()?;

    // The switch: one rename of a link.
    let target = relative_target(&config.deploy, &new);
    // Staged beside it (inside the open folder) and renamed over it
    // relative to the same handle: readers see the old target or the new.
    link_parent
        .entry(&link_name)
        .stage_symlink(&target)?
        .commit()?;
    link_parent.sync()?;
    (req.progress)(Step::Switched);
    if let Some(f) = checkouts.dir().open_child_dir(&name)? {
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
        link: Some(config.deploy.display().to_string()),
    };
    // No link was there, yet the store records a deployment: the link was
    // removed by hand, or `deploy` changed since, and then the link made
    // before still points at the revision deployed then (a reader of it
    // runs that revision for good, or nothing once a later pull prunes its
    // checkout). This pull cannot know where it is: it says so.
    if moving_from.is_some() {
        // Said below, once the old link is dealt with.
    } else if let (None, Some(r), Some(_)) = (&current, &recorded, &recorded_link) {
        warnings.push(format!(
            "{} was not there, though the state store records {} deployed at it (removed by hand?): it is made anew",
            link_path.display(),
            commit::short(r)
        ));
    } else if let (None, Some(r)) = (&current, &recorded) {
        warnings.push(format!(
            "{} was not there, though the state store records {} deployed: if `deploy` (--deploy) changed, the link made before is left where it was, pointing at {} (and at nothing once a later pull prunes its checkout); remove it, and read the repository at {} (the agent's --repo)",
            link_path.display(),
            commit::short(r),
            commit::short(r),
            link_path.display()
        ));
    }
    // A switch the store missed comes first in the history.
    record_missed(&mut store, &mut warnings);
    if let Err(e) = record_in(&mut store, &state_dir, &state_name, &record) {
        warnings.push(format!(
            "{} is deployed but could not be recorded in the state store: {e}",
            commit::short(&new)
        ));
    }
    if let Some(old) = &moving_from {
        warnings.push(move_old_link(&host, old, &link_path));
    }
    let pruned = prune(
        &checkouts,
        config.keep,
        &new,
        deployed_now.as_deref(),
        &mut warnings,
    );
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

/// Records `deployment` in the state store, opening it (creating it) when
/// this pull has not yet.
fn record_in(
    store: &mut Option<Store>,
    dir: &PrivateDir,
    name: &str,
    deployment: &Deployment,
) -> Result<i64, datum_store::StoreError> {
    let mut opened = match store.take() {
        Some(s) => s,
        None => Store::open_in(dir, name)?,
    };
    let recorded = opened.record_deployment(deployment);
    *store = Some(opened);
    recorded
}

/// The trust files, read once (owner and mode checked). A file that is
/// configured but missing is an error: never fall back to trusting less.
fn trust_roots(config: &PullConfig) -> Result<TrustRoots, PullError> {
    let read = |key: &str, path: &Option<PathBuf>| -> Result<Option<TrustFile>, PullError> {
        let Some(path) = path else { return Ok(None) };
        match datum_host::named::read_trusted(path, TRUST_LIMIT)? {
            Some(bytes) => Ok(Some(TrustFile {
                path: path.clone(),
                bytes,
            })),
            None => Err(PullError::Config(crate::error::ConfigError::Missing(
                format!(
                    "{key} {}: no such file (a trust file that is configured is never done without); nothing was changed",
                    path.display()
                ),
            ))),
        }
    };
    Ok(TrustRoots {
        allowed_signers: read("allowed_signers", &config.allowed_signers)?,
        revoked_keys: read("revoked_keys", &config.revoked_keys)?,
        openpgp_keyring: read("openpgp_keyring", &config.openpgp_keyring)?,
    })
}

/// The files ssh is handed for an `ssh://` remote, checked as the trust
/// files are (root's, writable by root only, every folder on the way), and
/// the key readable by its owner only, as ssh asks: ssh leaves out a key
/// others may read and the server then refuses the connection, which would
/// say nothing of why, and a key others may read is no longer the host's
/// alone. `known_hosts` decides which server the host talks to. A file that
/// is configured but missing is an error, as for the trust files.
fn ssh_files(config: &PullConfig) -> Result<(), PullError> {
    if config.source.protocol() != crate::git::Protocol::Ssh {
        return Ok(());
    }
    let files = [
        ("ssh_key", &config.ssh_key, true),
        ("known_hosts", &config.known_hosts, false),
    ];
    for (key, path, secret) in files {
        let Some(path) = path else { continue };
        let found = if secret {
            datum_host::named::check_private_key(path)?
        } else {
            datum_host::named::check_trusted(path)?
        };
        if !found {
            return Err(PullError::Config(crate::error::ConfigError::Missing(
                format!(
                    "{key} {}: no such file (ssh is never run without a file that is configured); nothing was changed",
                    path.display()
                ),
            )));
        }
    }
    // Paths ssh could not be told literally are refused before anything
    // is fetched.
    crate::cache::ssh_command(config)?;
    Ok(())
}

/// A bundle to pull from (`--bundle FILE`) must be a file: git says of a
/// path it cannot fetch from that it 'does not appear to be a git
/// repository' and to check one's access rights, which does not say that
/// the file is not there (a typo, a medium not mounted). What is in it is
/// the remote's, checked as a fetch is.
fn bundle_file(config: &PullConfig) -> Result<(), PullError> {
    let crate::source::Source::Bundle(path) = &config.source else {
        return Ok(());
    };
    let refused = |why: &str| {
        Err(PullError::Config(crate::error::ConfigError::Missing(
            format!("--bundle {}: {why}; nothing was changed", path.display()),
        )))
    };
    match datum_host::repo::metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => refused("not a file (a bundle made by `datum bundle` is)"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => refused("no such file"),
        // Anything else is git's to say.
        Err(_) => Ok(()),
    }
}

/// Where the link points and when it was switched (its own time, in
/// seconds), `None` when nothing is there; anything but a link is refused:
/// a folder put there by hand is never replaced.
fn link_now(link: &datum_host::Located) -> Result<Option<(PathBuf, i64)>, PullError> {
    match link.lstat()? {
        None => Ok(None),
        Some(st) if st.kind == FileKind::Symlink => Ok(Some((
            link.read_link()?,
            st.meta.mtime_ns.div_euclid(1_000_000_000),
        ))),
        Some(st) => Err(PullError::NotALink {
            path: link.path().to_path_buf(),
            found: st.kind.word().to_owned(),
        }),
    }
}

/// The link's folder (declared, absolute) and its name.
fn split_link(deploy: &Path) -> Result<(PathBuf, OsString), PullError> {
    match (deploy.parent(), deploy.file_name()) {
        (Some(parent), Some(name)) if deploy.is_absolute() && parent != Path::new("/") => {
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

/// Removes all but the `keep` most recently deployed checkouts; returns the
/// commits removed. The one just deployed and the one it `replaced` (a
/// reader may still be reading it) always stay, whatever their times: a
/// checkout a killed pull wrote and never switched in is newer than the
/// one it would have replaced.
fn prune(
    checkouts: &PrivateDir,
    keep: usize,
    deployed: &str,
    replaced: Option<&str>,
    warnings: &mut Vec<String>,
) -> Vec<String> {
    let mut others: Vec<(i64, OsString)> = Vec::new();
    let entries = match checkouts.list() {
        Ok(e) => e,
        Err(e) => {
            warnings.push(format!("cannot prune old checkouts: {e}"));
            return Vec::new();
        }
    };
    for (entry, _) in entries {
        let text = entry.to_string_lossy();
        if !commit::is_commit_id(&text) || text == deployed || Some(&*text) == replaced {
            continue;
        }
        match checkouts.lstat(&entry) {
            Ok(Some(st)) => others.push((st.meta.mtime_ns, entry)),
            Ok(None) => {}
            Err(e) => warnings.push(format!("cannot prune {text}: {e}")),
        }
    }
    others.sort_by_key(|b| std::cmp::Reverse(b.0));
    let mut pruned = Vec::new();
    let kept = keep.saturating_sub(1 + usize::from(replaced.is_some_and(|r| r != deployed)));
    for (_, entry) in others.into_iter().skip(kept) {
        match checkouts.dir().entry(&entry).remove_all() {
            Ok(()) => pruned.push(entry.to_string_lossy().into_owned()),
            Err(e) => warnings.push(format!("cannot prune {}: {e}", entry.to_string_lossy())),
        }
    }
    pruned
}

/// The folder of the link, `declared`, reached through the boundary's walk
/// (never through a link, never from an unprivileged user's folder into
/// someone else's), each folder opened from the one above it, one
/// component at a time; every folder on the way below the root must be
/// owned by root (or the user running Datum) and writable by its owner only
/// ([`only_ours`]). When `may_make`, missing folders are created 0755, one
/// at a time, relative to the folder above, and returned in the order made;
/// otherwise a missing one ends the walk: `None`.
///
/// The pull walks without making first, before anything of its own is
/// made, and makes what is missing only once it switches a revision in; a
/// refusal of that walk changes nothing but the folders it made (said in
/// the message: only a folder someone else makes or changes meanwhile,
/// below one made here, can be refused after one was made).
fn folder_of_link(
    host: &Host,
    declared: &Path,
    may_make: bool,
) -> Result<Option<(Dir, Vec<PathBuf>)>, HostError> {
    let mut here = PathBuf::from("/");
    let mut current = host.root_dir()?;
    let mut made: Vec<PathBuf> = Vec::new();
    for component in declared.components() {
        let Component::Normal(name) = component else {
            continue;
        };
        here.push(name);
        let parent = current.clone();
        current = match host.dir(&here) {
            Ok(dir) => dir,
            Err(HostError::MissingParent { .. }) if !may_make => return Ok(None),
            Err(e) if may_make && e.is_missing_parent() => {
                match current.entry(name).create_dir(0o755, None, None) {
                    Ok(()) => made.push(parent.path().join(name)),
                    // Made meanwhile by someone else: the walk judges it.
                    Err(HostError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
                host.dir(&here)?
            }
            Err(e) => return Err(e),
        };
        only_ours(&parent, name, &made)?;
    }
    Ok(Some((current, made)))
}

/// Removes the link a pull made at `old` (a `deploy` since moved to
/// `new_link`) while it is still that link: a link whose target is the one
/// `datum pull` writes there (a checkout of its own, by the relative path
/// from that folder), in a folder reached from the root by the boundary's
/// walk, none of it created, every folder on the way root's and writable by
/// root only ([`only_ours`]: so nobody else can change the link between
/// its check and its removal). Anything else is left as it is. Returns what
/// was done, for the operator.
fn move_old_link(host: &Host, old: &Path, new_link: &Path) -> String {
    let shown = host.root().join(old.strip_prefix("/").unwrap_or(old));
    let left = |why: String| {
        format!(
            "deploy moved to {}; the link made before at {} is left as it is: {why}",
            new_link.display(),
            shown.display()
        )
    };
    let Ok((parent, name)) = split_link(old) else {
        return left("it is not a path datum pull makes a link at".to_owned());
    };
    let folder = match folder_of_link(host, &parent, false) {
        Ok(Some((folder, _))) => folder,
        Ok(None) => return left("it is not there".to_owned()),
        Err(e) if e.is_missing_parent() => return left("it is not there".to_owned()),
        Err(e) => return left(e.to_string()),
    };
    let entry = folder.entry(&name);
    let target = match entry.lstat() {
        Ok(None) => return left("it is not there".to_owned()),
        Ok(Some(st)) if st.kind != FileKind::Symlink => {
            return left(format!("it is a {}, not a link", st.kind.word()));
        }
        Ok(Some(_)) => match entry.read_link() {
            Ok(t) => t,
            Err(e) => return left(e.to_string()),
        },
        Err(e) => return left(e.to_string()),
    };
    let ours = target
        .file_name()
        .and_then(OsStr::to_str)
        .filter(|id| commit::is_commit_id(id) && relative_target(old, id) == target);
    if ours.is_none() {
        return left(format!(
            "it points at {}, not at a checkout of datum pull's",
            datum_core::text::visible(&target.to_string_lossy(), &[])
        ));
    }
    match entry.remove_file().and_then(|()| folder.sync()) {
        Ok(()) => format!(
            "deploy moved to {}: the link made before at {} was removed; read the repository at {} (the agent's --repo)",
            new_link.display(),
            shown.display(),
            new_link.display()
        ),
        Err(e) => left(format!("it cannot be removed: {e}")),
    }
}

/// Refuses a folder on the way to the link that another user could write
/// to (or that another user owns): they could replace the link, or the
/// folder holding it, and point it at a repository of their own, which the
/// agent would then apply as root. The same rule as for the trust files
/// (sshd's `StrictModes`), checked from the root down, so no folder
/// checked can be swapped by someone else after its check.
fn only_ours(parent: &Dir, name: &OsStr, made: &[PathBuf]) -> Result<(), HostError> {
    let Some(st) = parent.lstat_entry(name)? else {
        return Ok(());
    };
    let me = datum_host::accounts::current_ids().0;
    let why = if st.meta.uid != 0 && st.meta.uid != me {
        format!("it belongs to uid {}", st.meta.uid)
    } else if st.meta.mode & 0o022 != 0 {
        format!(
            "its mode {:04o} lets others write to it",
            st.meta.mode & 0o7777
        )
    } else {
        return Ok(());
    };
    let changed = if made.is_empty() {
        "nothing was changed".to_owned()
    } else {
        let made: Vec<String> = made.iter().map(|p| p.display().to_string()).collect();
        format!(
            "nothing was changed but the folders made on the way: {}",
            made.join(", ")
        )
    };
    Err(HostError::io(
        "deploy into",
        parent.path().join(name),
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{why}: whoever can write a folder holding the link can point it at a repository of their own, which this host would apply as root; make it owned by root and writable by its owner only ({changed})"
            ),
        ),
    ))
}

/// The marker of the checkout the link points at. A link made by `datum
/// pull` names one of its checkouts, read from the checkouts' folder handle;
/// a link put there some other way is read as it points (the operator's).
fn deployed_marker(
    deploy: &Path,
    target: &Path,
    checkouts: &PrivateDir,
    link_path: &Path,
) -> Result<Option<DeployedRevision>, PullError> {
    let ours = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|id| commit::is_commit_id(id) && relative_target(deploy, id) == target);
    match ours {
        Some(id) => match checkouts.dir().open_child_dir(OsStr::new(&id)) {
            Ok(Some(dir)) => Ok(checkout::read_marker(&dir)?),
            Ok(None) | Err(HostError::NotADirectory { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        },
        None => Ok(checkout::deployed_revision(link_path)),
    }
}

/// The revision of `repository` when it is a checkout `datum pull` wrote
/// under `root` that nothing has changed since, as far as Datum's own
/// permissions can tell: what the catalogue snapshot may be keyed by
/// instead of a stamp of every file (`datum_catalog::snapshot::Revision`).
/// `None` for anything else (a repository put somewhere by hand, a
/// checkout whose folder lets others write, anything that cannot be read):
/// then the caller stamps every entry, as for any folder.
///
/// Why a checkout that passes is unchanged: `datum pull` writes it inside
/// `var/lib/datum/pull` (a private folder: owned by the user running Datum,
/// writable by nobody else, 0700 when created, so no other user can even
/// reach into it), as a fresh folder whose files it creates with `O_EXCL`
/// (no one else holds a link or a descriptor to them), folders 0755 and
/// files 0644 or 0755; it renames it to the commit's name only once
/// complete (the marker last, then `syncfs`), and never writes into it
/// again (a later pull of the same commit reuses it as it is; pruning
/// removes it whole). So the only writers are that user and root. The
/// check below is what can be tested cheaply (a walk of the private folders
/// from the root, one `lstat`, one marker read; never a walk of the
/// checkout): each folder on the way private, the checkout a folder (not a
/// link) owned by that user and writable by nobody else, the very folder
/// `repository` names, and its marker naming the commit it is named by. A
/// person who edits a checkout by hand (root can) is outside what `datum
/// pull` promises: the edit bypassed the signature and `datum lint`, and a
/// catalogue snapshot keyed by the commit does not see it until the next
/// pull or `--recompile` (see `docs/pull.md`).
pub fn immutable_checkout(root: &Path, repository: &Path) -> Option<DeployedRevision> {
    use std::os::unix::fs::MetadataExt as _;
    let folder = datum_host::repo::canonicalize(repository).ok()?;
    let name = folder.file_name()?.to_owned();
    // Most repositories are not named by a commit: nothing more is read.
    if !commit::is_commit_id(name.to_str()?) {
        return None;
    }
    let host = Host::new(root);
    let checkouts = PrivateDir::open_in(&host, Path::new(STATE_FOLDER), false)
        .ok()??
        .subdir("pull", false)
        .ok()??
        .subdir(CHECKOUTS, false)
        .ok()??;
    let st = checkouts.lstat(&name).ok()??;
    let named = datum_host::repo::metadata(&folder).ok()?;
    if st.kind != FileKind::Directory
        || (st.meta.dev, st.meta.inode) != (named.dev(), named.ino())
        || st.meta.uid != checkouts.dir().uid()
        || st.meta.mode & 0o022 != 0
    {
        return None;
    }
    let dir = checkouts.dir().open_child_dir(&name).ok()??;
    checkout::read_marker(&dir)
        .ok()?
        .filter(|m| OsStr::new(&m.commit) == name)
}

/// Removes the staged links a switch that was killed left beside the link:
/// staging folders ([`datum_host::staging::STAGE_PREFIX`]) holding nothing
/// but a link of the link's name. Anything else staged there (an `apply`
/// of another file in that folder) is left alone.
fn sweep_staged_links(folder: &Dir, link_name: &OsStr) -> Result<usize, HostError> {
    let mut removed = 0;
    for (name, kind) in folder.list()? {
        let staged = kind == FileKind::Directory
            && name
                .as_encoded_bytes()
                .starts_with(datum_host::staging::STAGE_PREFIX.as_bytes());
        if !staged {
            continue;
        }
        let Some(stage) = folder.open_child_dir(&name)? else {
            continue;
        };
        let inside = stage.list()?;
        if matches!(inside.as_slice(), [(n, FileKind::Symlink)] if n == link_name)
            || inside.is_empty()
        {
            folder.entry(&name).remove_all()?;
            removed += 1;
        }
    }
    Ok(removed)
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
            (Path::new("/etc/datum"), OsStr::new("repository"))
        );
        assert!(split_link(Path::new("/repository")).is_err());
    }

    /// A root with a checkout of `c` where `datum pull` puts it, its
    /// marker naming `marked`.
    fn checkout_of(c: &str, marked: &str) -> (tempfile::TempDir, PathBuf) {
        use std::os::unix::fs::PermissionsExt as _;
        let root = tempfile::tempdir().unwrap();
        let checkouts = root.path().join("var/lib/datum/pull/checkouts");
        std::fs::create_dir_all(checkouts.join(c).join("base")).unwrap();
        for private in [
            "var/lib/datum",
            "var/lib/datum/pull",
            "var/lib/datum/pull/checkouts",
        ] {
            std::fs::set_permissions(
                root.path().join(private),
                std::fs::Permissions::from_mode(0o700),
            )
            .unwrap();
        }
        let folder = checkouts.join(c);
        std::fs::write(folder.join("datum.yaml"), "datum: v1alpha1\n").unwrap();
        let marker = DeployedRevision::for_test(marked);
        std::fs::write(
            folder.join(checkout::MARKER),
            serde_json::to_vec(&marker).unwrap(),
        )
        .unwrap();
        (root, folder)
    }

    #[test]
    fn only_a_checkout_datum_pull_wrote_is_taken_as_immutable() {
        use std::os::unix::fs::PermissionsExt as _;
        let c = "c".repeat(40);
        let (root, folder) = checkout_of(&c, &c);
        let found = immutable_checkout(root.path(), &folder).expect("a pull checkout");
        assert_eq!(found.commit, c);
        // Through the deploy link, as every command reads it.
        let link = root.path().join("repository");
        std::os::unix::fs::symlink(&folder, &link).unwrap();
        assert_eq!(
            immutable_checkout(root.path(), &link).map(|m| m.commit),
            Some(c.clone())
        );
        // Under another root it is not that root's checkout.
        let other = tempfile::tempdir().unwrap();
        assert_eq!(immutable_checkout(other.path(), &folder), None);
        // A sub-folder of a checkout is not a checkout.
        assert_eq!(immutable_checkout(root.path(), &folder.join("base")), None);

        // A folder others may write to.
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert_eq!(immutable_checkout(root.path(), &folder), None);
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(immutable_checkout(root.path(), &folder).is_some());
        // A pull folder others may write to.
        let pull = root.path().join("var/lib/datum/pull");
        std::fs::set_permissions(&pull, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(immutable_checkout(root.path(), &folder), None);
        std::fs::set_permissions(&pull, std::fs::Permissions::from_mode(0o700)).unwrap();

        // A marker naming another commit than the folder's name, or none.
        let d = "d".repeat(40);
        let (root, folder) = checkout_of(&c, &d);
        assert_eq!(immutable_checkout(root.path(), &folder), None);
        std::fs::remove_file(folder.join(checkout::MARKER)).unwrap();
        assert_eq!(immutable_checkout(root.path(), &folder), None);

        // A copy of a checkout elsewhere (named by its commit, with its
        // marker) is an ordinary folder.
        let (root, folder) = checkout_of(&c, &c);
        let copy = root.path().join("srv").join(&c);
        std::fs::create_dir_all(&copy).unwrap();
        std::fs::copy(folder.join(checkout::MARKER), copy.join(checkout::MARKER)).unwrap();
        assert_eq!(immutable_checkout(root.path(), &copy), None);
    }

    #[test]
    fn pruning_keeps_the_deployed_and_the_most_recent_others() {
        let dir = tempfile::tempdir().unwrap();
        let folder = PrivateDir::open_path(dir.path(), false).unwrap().unwrap();
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
        let pruned = prune(&folder, 3, &ids[0], None, &mut warnings);
        assert_eq!(pruned, vec![ids[1].clone()]);
        assert!(warnings.is_empty(), "{warnings:?}");
        for keep in [&ids[0], &ids[2], &ids[3]] {
            assert!(dir.path().join(keep).exists());
        }
        assert!(dir.path().join("not-a-checkout").exists());
    }

    #[test]
    fn pruning_keeps_the_replaced_checkout_even_when_a_newer_one_was_never_deployed() {
        let dir = tempfile::tempdir().unwrap();
        let folder = PrivateDir::open_path(dir.path(), false).unwrap().unwrap();
        let ids: Vec<String> = ["1", "2", "3", "4"].iter().map(|d| d.repeat(40)).collect();
        for (i, id) in ids.iter().enumerate() {
            std::fs::create_dir(dir.path().join(id)).unwrap();
            let t = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + i as u64);
            std::fs::File::open(dir.path().join(id))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        // 1 was replaced by 4; 3 was written by a pull killed before its
        // switch, after 1 was deployed.
        let mut warnings = Vec::new();
        let mut pruned = prune(&folder, 2, &ids[3], Some(&ids[0]), &mut warnings);
        pruned.sort();
        assert_eq!(pruned, vec![ids[1].clone(), ids[2].clone()]);
        assert!(dir.path().join(&ids[0]).exists() && dir.path().join(&ids[3]).exists());
        assert!(warnings.is_empty(), "{warnings:?}");
        // keep 3: the most recent other stays too.
        std::fs::create_dir(dir.path().join(&ids[2])).unwrap();
        let pruned = prune(&folder, 3, &ids[3], Some(&ids[0]), &mut warnings);
        assert!(pruned.is_empty(), "{pruned:?}");
        // Replaced by itself (a second deployment of it): counted once.
        let pruned = prune(&folder, 2, &ids[3], Some(&ids[3]), &mut warnings);
        assert_eq!(pruned, vec![ids[0].clone()]);
    }
}
