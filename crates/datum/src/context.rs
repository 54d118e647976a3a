//! What every command needs before it can act: the host identity, the compiled
//! catalogue, the state and backup stores, all resolved under `--root`.
//!
//! Datum's own folder (`ROOT/var/lib/datum`, or the folder of `--state
//! FILE`) is opened once as a private folder (`datum_host::PrivateDir`:
//! reached through the boundary, 0700, owned by the user running Datum), and
//! every file of Datum's in it (state, snapshot, source hashes, backups,
//! accepted patches, the lock) is reached from that handle. The state store
//! fails closed ([`open_store`]): a command that acts on what it remembers
//! refuses to run without it and says how to recover.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use datum_catalog::snapshot::LazyCatalogue;
use datum_catalog::{AfterHashing, Catalogue, HashCacheFile, HostIdentity};
use datum_host::{Host, PrivateDir};
use datum_store::backup::BackupStore;
use datum_store::{Store, StoreError};

use crate::cli::GlobalArgs;

/// Where Datum keeps its own files under the root.
pub const STATE_DIR: &str = "var/lib/datum";

/// The source hash cache's file name, in the state store's folder.
pub const SOURCE_HASHES: &str = "source-hashes";

/// The catalogue snapshot's extension: `state.db` keeps its snapshot in
/// `state.catalogue` beside it (one per state store, so two stores in one
/// folder do not take turns overwriting one snapshot).
pub const SNAPSHOT_EXTENSION: &str = "catalogue";

/// The global options with `--repo` pinned: when it is a link, the folder
/// it points at now (see `datum_host::repo::pinned`). Every command but
/// `datum pull` (which manages the link) reads the repository through this.
pub fn pinned(global: &GlobalArgs) -> Result<GlobalArgs> {
    let repo = datum_host::repo::pinned(&global.repo)
        .with_context(|| format!("cannot read the repository {}", global.repo.display()))?;
    let repo_link = (repo != global.repo).then(|| global.repo.clone());
    Ok(GlobalArgs {
        repo,
        repo_link,
        ..global.clone()
    })
}

/// Refuses to go on when `--repo` is a link that no longer points at the
/// folder the command pinned at its start: `datum pull` switched in
/// another revision since, while this command compiled or waited for the
/// root lock. A pass that applied what it compiled from the revision
/// replaced would take the host back to it, after the new one may already
/// have been applied (by the agent, or another apply), and report it as
/// the host's latest apply: configuration never goes backwards. Called
/// with the root lock held (a switch after it is the next pass's), `what`
/// completing "nothing was ...".
pub fn still_deployed(global: &GlobalArgs, what: &str) -> Result<()> {
    let Some(link) = &global.repo_link else {
        return Ok(());
    };
    let now = datum_host::repo::pinned(link)
        .with_context(|| format!("cannot read the repository {}", link.display()))?;
    if now == global.repo {
        return Ok(());
    }
    bail!(
        "the repository {} was switched from {} to {} (`datum pull` deployed another revision) after this command read it; nothing was {what}. Run it again to use the revision deployed now",
        link.display(),
        global.repo.display(),
        now.display()
    )
}

pub fn identity(global: &GlobalArgs) -> Result<HostIdentity> {
    HostIdentity::load(&global.root, global.host_file.as_deref(), &global.labels)
        .context("cannot establish the host identity")
}

/// Whether human output gets colour: `--color always|never`, else on a
/// terminal unless `NO_COLOR` is set (the rule of both tools,
/// `datum_report::style`).
pub fn use_color(global: &GlobalArgs) -> bool {
    datum_report::style::stdout_wants_colour(global.color)
}

/// The names of the layers of `datum.yaml` this host gets, in order (for a
/// report's header; empty when `datum.yaml` cannot be read, which the
/// compile has already reported).
pub fn layers_used(global: &GlobalArgs, identity: &HostIdentity) -> Vec<String> {
    datum_manifest::Settings::load(&global.repo)
        .map(|settings| {
            settings
                .layers
                .iter()
                .filter(|l| l.matcher.matches(&identity.labels))
                .map(|l| l.name.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// Compiles the repository for this host. Manifest errors are printed as
/// diagnostics and turn into an error: a repository with any error is never
/// applied.
pub fn compile(global: &GlobalArgs, identity: &HostIdentity) -> Result<Catalogue> {
    compile_with(global, identity, false)
}

/// A compiled catalogue with what a fleet report needs besides: the
/// revision it was compiled from (`git:<commit>` of a `datum pull`
/// checkout, `stamp:<digest>` of any other folder; `None` when no key was
/// taken) and `datum.yaml`'s classes.
pub struct Stamped {
    pub catalogue: Catalogue,
    pub revision: Option<String>,
    pub classes: serde_json::Value,
    /// What the compile of an apply on a root with no state folder yet
    /// kept for [`Stamped::keep_compile`].
    unkept: Option<Unkept>,
}

impl Stamped {
    /// Keeps what the compile of an apply on a root with no state folder
    /// yet could not ([`Unkept`]), in the folder the apply has now made
    /// beside its store: called once the store is open (an apply that
    /// stops before, on an unknown target, a stale saved plan or a refused
    /// store, leaves nothing). Lets go of the catalogue's `autorequires`
    /// then, which a pass never reads (`into_catalogue_for_pass`) and the
    /// snapshot keeps.
    pub fn keep_compile(&mut self, global: &GlobalArgs) {
        let Some(unkept) = self.unkept.take() else {
            return;
        };
        if let Some(dir) = &StateFiles::of(global).dir {
            unkept.keep_in(dir, &self.catalogue, &self.classes);
        }
        self.catalogue.autorequires = Vec::new();
    }
}

/// The catalogue snapshot and source hashes of a compile that is to be
/// remembered where Datum's folder does not exist yet (the first apply on
/// a bare root, the agent's first load there): the compile does not make
/// the folder (a repository with errors, an unknown target leave nothing);
/// the caller keeps them there once it has made its state store
/// ([`Unkept::keep_in`]). Dropped, nothing is written.
pub struct Unkept {
    hashes: HashCacheFile,
    /// The repository's key taken before the compile (`None`: none could
    /// be taken, so no snapshot).
    stamp: Option<datum_catalog::snapshot::RepoKey>,
    snapshot_name: String,
}

impl Unkept {
    /// Writes the source hashes and the snapshot of `catalogue` (compiled
    /// with `classes`, its `autorequires` still there) in Datum's folder
    /// `dir`, committed off the caller's path like any compile's.
    pub fn keep_in(self, dir: &PrivateDir, catalogue: &Catalogue, classes: &serde_json::Value) {
        save_source_hashes_if(&self.hashes.placed_in(dir, SOURCE_HASHES.as_ref()), true);
        if let Some(stamp) = self.stamp {
            let written = datum_catalog::snapshot::write_in(
                datum_providers::registry(),
                dir,
                self.snapshot_name.as_ref(),
                stamp,
                catalogue,
                classes,
            );
            commit_later("the catalogue snapshot", written.map(Result::ok));
        }
    }
}

/// [`compile`], with the revision and classes ([`Stamped`]), for `purpose`
/// ([`Purpose::Pass`] or [`Purpose::Apply`]).
pub fn compile_stamped(
    global: &GlobalArgs,
    identity: &HostIdentity,
    purpose: Purpose,
) -> Result<Stamped> {
    let (lazy, _, unkept) = compiled_for(global, identity, "applied", purpose)?;
    let (revision, classes) = (lazy.revision.clone(), lazy.classes.clone());
    // A compile still to be remembered keeps its `autorequires` until then.
    let into_catalogue = |lazy: LazyCatalogue, unkept: &Option<Unkept>| match unkept {
        Some(_) => lazy.into_catalogue(),
        None => lazy.into_catalogue_for_pass(),
    };
    let (catalogue, unkept) = match into_catalogue(lazy, &unkept) {
        Ok(catalogue) => (catalogue, unkept),
        Err(e) => {
            eprintln!("warning: {e}; compiling the repository");
            forget_snapshot(global);
            let (lazy, _, unkept) = compiled_for(global, identity, "applied", purpose)?;
            (into_catalogue(lazy, &unkept)?, unkept)
        }
    };
    Ok(Stamped {
        catalogue,
        revision,
        classes,
        unkept,
    })
}

/// [`compile`], optionally recording where every field came from.
pub fn compile_with(
    global: &GlobalArgs,
    identity: &HostIdentity,
    explain: bool,
) -> Result<Catalogue> {
    if explain {
        require_repository(global)?;
        let state = StateFiles::of(global);
        let remembers = state.usable();
        let hashes = source_hashes_in(&state, remembers);
        let compiled = datum_catalog::compile_cached(&global.repo, identity, true, Some(&hashes));
        save_source_hashes_if(&hashes, remembers);
        return compiled.map_err(|d| repository_errors(global, d, "applied"));
    }
    match compiled_for(global, identity, "applied", Purpose::Pass)?
        .0
        .into_catalogue()
    {
        Ok(catalogue) => Ok(catalogue),
        Err(e) => {
            // Damaged after it was checked (a disk error): forget it.
            eprintln!("warning: {e}; compiling the repository");
            forget_snapshot(global);
            Ok(compiled_for(global, identity, "applied", Purpose::Pass)?
                .0
                .into_catalogue()?)
        }
    }
}

/// Where a catalogue came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// The snapshot of an earlier compile of the unchanged repository.
    Snapshot,
    /// A compile of the repository.
    Compiled,
}

/// The compiled catalogue and classes for this host: the snapshot of an
/// earlier compile when the repository has not changed since (see
/// `datum_catalog::snapshot`), else a compile, remembered for next time
/// beside a usable state store ([`StateFiles::usable`]; for
/// [`Purpose::Apply`], also where there is none yet). `what` completes
/// "nothing was ..." in the error for a repository with errors.
pub fn compiled(
    global: &GlobalArgs,
    identity: &HostIdentity,
    what: &str,
) -> Result<(LazyCatalogue, Provenance)> {
    let (lazy, provenance, _) = compiled_for(global, identity, what, Purpose::Check)?;
    Ok((lazy, provenance))
}

/// What a caller does with a [`LazyCatalogue`] it asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Reads its summaries (a check picks what to look at by them).
    Check,
    /// Only turns it into the catalogue a pass runs: a compile hands it
    /// over without summaries (see `LazyCatalogue::compiled_for_pass`).
    Pass,
    /// [`Purpose::Pass`] for an apply (and the agent's load), which makes
    /// the state store when there is none: a compile remembers its snapshot
    /// and source hashes where the state folder exists, not only beside an
    /// existing store, and on a bare root in the folder it makes for its
    /// store, once it has made it ([`Unkept`], [`Stamped::keep_compile`])
    /// (else the first apply's work is done again by the run after it), but
    /// never beside a store that exists and is refused (the apply refuses
    /// it too).
    Apply,
    /// [`Purpose::Apply`] for the agent's load, which keeps the catalogue
    /// for pass after pass: a compile makes it hold its resources' parsed
    /// declarations (`datum_catalog::Compiler::holding_declarations`); a
    /// catalogue from the snapshot holds none until the agent makes it
    /// (`Catalogue::hold_declarations`). Every other purpose's catalogue
    /// holds none: one pass parses each declaration once anyway.
    Agent,
}

/// [`compiled`] for `purpose`.
fn compiled_for(
    global: &GlobalArgs,
    identity: &HostIdentity,
    what: &str,
    purpose: Purpose,
) -> Result<(LazyCatalogue, Provenance, Option<Unkept>)> {
    require_repository(global)?;
    if global.recompile {
        forget_snapshot(global);
    }
    let state = StateFiles::of(global);
    // A compile that hashes large `source:` trees takes seconds: say so.
    let bar = crate::render::progress::compiling(global.output);
    let compiled = compile_or_reuse(&global.repo, &state, identity, purpose);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    compiled.map_err(|d| repository_errors(global, d, what))
}

/// Where Datum keeps its own files: the private folder (when it exists, or
/// `None`) and the state database's name in it.
#[derive(Debug, Clone)]
pub struct StateFiles {
    pub dir: Option<PrivateDir>,
    pub name: String,
    /// The host root, where `datum pull` keeps its checkouts (a repository
    /// that is one of them is keyed by its commit in the snapshot).
    pub root: PathBuf,
}

impl StateFiles {
    /// The state folder of `global`, opened (never created) when it exists
    /// and is private; a folder that is not private is reported once and
    /// treated as absent for caches (the store itself refuses it).
    pub fn of(global: &GlobalArgs) -> StateFiles {
        Self::at(&global.root, global.state.as_deref())
    }

    /// [`StateFiles::of`] for a root and an optional `--state FILE`.
    pub fn at(root: &Path, state: Option<&Path>) -> StateFiles {
        let dir = match state_dir_at(root, state, false) {
            Ok(dir) => dir,
            Err(e) => {
                eprintln!("warning: {e:#}");
                None
            }
        };
        StateFiles {
            dir,
            name: state_name_of(state),
            root: root.to_path_buf(),
        }
    }

    /// The file `extension` of the state database (`state.catalogue`).
    fn sibling_name(&self, extension: &str) -> String {
        match self.name.rsplit_once('.') {
            Some((stem, _)) => format!("{stem}.{extension}"),
            None => format!("{}.{extension}", self.name),
        }
    }

    /// Whether the state database exists.
    pub fn exists(&self) -> bool {
        self.dir
            .as_ref()
            .is_some_and(|d| d.lstat(&self.name).ok().flatten().is_some())
    }

    /// Whether the state database exists and opens: what a plan or a check
    /// would use. Datum's other files (the catalogue snapshot, the source
    /// hashes, the digest key) are written only beside a usable store (or
    /// where an apply is about to make one): a store that is refused (a
    /// directory, a device such as `--state /dev/null`, a FIFO, a foreign or
    /// corrupt file) leaves a read-only command read-only, and its folder
    /// as it was. Looks at the store without its integrity check
    /// (`Store::probe_in`: a fraction of a millisecond, where an open reads
    /// every page), and is asked only before a write, never on a run that
    /// reuses its snapshot; the store the command then opens is checked in
    /// full.
    pub fn usable(&self) -> bool {
        let Some(dir) = &self.dir else {
            return false;
        };
        self.exists() && Store::probe_in(dir, &self.name).is_ok()
    }

    /// Whether a digest key may be made beside this store: it is usable
    /// ([`StateFiles::usable`]) and holds no record keyed with a key now
    /// lost ([`key_lost`], said once as a warning).
    fn may_make_key(&self) -> bool {
        let Some(dir) = &self.dir else {
            return false;
        };
        if !self.usable() {
            return false;
        }
        match Store::open_in(dir, &self.name) {
            Ok(store) => match key_lost(dir, &store) {
                Ok(None) => true,
                Ok(Some(lost)) => {
                    warn_key_lost(&lost);
                    false
                }
                Err(_) => false,
            },
            Err(_) => false,
        }
    }
}

/// [`compiled`] for a repository and a state store named by path (the
/// agent's way in): the repository's problems come back as diagnostics.
/// For [`Purpose::Apply`] and [`Purpose::Agent`] where Datum's folder does
/// not exist yet, what is to be remembered comes back too ([`Unkept`]).
pub fn compile_or_reuse(
    repo: &Path,
    state: &StateFiles,
    identity: &HostIdentity,
    purpose: Purpose,
) -> Result<(LazyCatalogue, Provenance, Option<Unkept>), datum_catalog::Diagnostics> {
    use datum_catalog::snapshot::{self, RepoKey};
    let snapshot_name = state.sibling_name(SNAPSHOT_EXTENSION);
    // A checkout `datum pull` wrote is keyed by its commit: reusing its
    // snapshot reads one marker instead of an `lstat` per repository entry
    // (`datum_pull::immutable_checkout` says why that is sound). Any other
    // folder keeps its stamp of every entry.
    let revision = datum_pull::immutable_checkout(&state.root, repo)
        .and_then(|m| snapshot::Revision::new(repo, &m.commit, &m.tree).ok());
    if let Some(dir) = &state.dir {
        match snapshot::load_in(
            dir,
            snapshot_name.as_ref(),
            repo,
            revision.as_ref(),
            identity,
        ) {
            Ok(lazy) => return Ok((lazy, Provenance::Snapshot, None)),
            // Why this run compiles (`--log-level debug`).
            Err(why) => tracing::debug!(
                "compiling the repository: the catalogue snapshot is not used: {why}"
            ),
        }
    }
    // The compile builds and drops more than the rest of the run holds:
    // what it frees goes back to the system at once (crate::allocator).
    let prompt_purge = crate::allocator::PromptPurge::start();
    // Started before the compile reads anything, walked beside it (one
    // `lstat` per repository entry, a sixth of a compile's time when it ran
    // first): an edit made meanwhile leaves the stamp stale or racy (not
    // saved), never the snapshot (`RepoKey::start`).
    let started = RepoKey::start(repo, revision);
    // Remembered only beside a usable state store (a dry run on a host
    // Datum has never managed leaves no file behind, nor does a plan or a
    // check whose store is refused), or where an apply is about to make one
    // (an apply refuses a store that exists and is unusable); where Datum's
    // folder is still to be made, by the caller once it has made it
    // ([`Unkept`]).
    let remembers = match purpose {
        Purpose::Apply | Purpose::Agent => !state.exists() || state.usable(),
        Purpose::Check | Purpose::Pass => state.usable(),
    };
    let hashes = source_hashes_in(state, remembers);
    let (stamp, compiled) = std::thread::scope(|scope| {
        let stamp = scope.spawn(move || started.walk());
        let compiled = datum_catalog::load(repo).and_then(|repository| {
            let classes = repository.settings.classes.clone();
            // The compile consumes the repository: it lets each part go
            // once done with it.
            let compiler = match purpose {
                Purpose::Agent => datum_catalog::Compiler::shipped().holding_declarations(),
                Purpose::Check | Purpose::Pass | Purpose::Apply => {
                    datum_catalog::Compiler::shipped()
                }
            };
            compiler
                .compile_loaded(repository, identity, false, Some(&hashes))
                .map(|catalogue| (catalogue, classes))
        });
        let stamp = stamp
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (stamp, compiled)
    });
    if state.dir.is_some() {
        save_source_hashes_if(&hashes, remembers);
    }
    let (catalogue, classes) = compiled?;
    let revision = stamp.as_ref().ok().map(RepoKey::label);
    // Like the source hashes.
    let mut unkept = None;
    match (&state.dir, stamp, remembers) {
        (Some(dir), Ok(stamp), true) => {
            // Not remembering (a file changed just now, a sensitive resource
            // with rendered content) only costs the next run a compile.
            let written = snapshot::write_in(
                datum_providers::registry(),
                dir,
                snapshot_name.as_ref(),
                stamp,
                &catalogue,
                &classes,
            );
            // One saved before a resource became sensitive holds its
            // content's checksums: not kept beside one never saved.
            if matches!(written, Ok(Err(snapshot::NotSaved::Sensitive(_)))) {
                forget_snapshot_of(state);
            }
            commit_later("the catalogue snapshot", written.map(Result::ok));
        }
        (None, stamp, true) => {
            unkept = Some(Unkept {
                hashes,
                stamp: stamp.ok(),
                snapshot_name,
            });
        }
        _ => {}
    }
    drop(prompt_purge);
    let mut lazy = match purpose {
        Purpose::Check => LazyCatalogue::compiled(catalogue, classes),
        Purpose::Pass | Purpose::Apply | Purpose::Agent => {
            LazyCatalogue::compiled_for_pass(catalogue, classes)
        }
    };
    lazy.revision = revision;
    Ok((lazy, Provenance::Compiled, unkept))
}

/// The name of the host's digest key in the state folder.
pub const DIGEST_KEY_FILE: &str = "digest.key";

/// This host's key for sensitive resources' digests (`datum_core::digest`):
/// read from the state folder; made there (0600, never over an existing
/// file or a link) the first time it is needed, but only beside a usable
/// state store ([`StateFiles::usable`]). `None` where there is no key and
/// none may be made (no state store yet, or one Datum refuses, such as
/// `--state /dev/null`), or the key cannot be read: then outputs carry no
/// digest for sensitive content rather than a plain checksum.
///
/// A read-only run without a key gets none, not one held in memory for the
/// command: its digests would change on every run while looking like this
/// host's stable ones (a reader comparing two plans would see a secret
/// "change" that did not), and nothing saved with them could be checked
/// again. What a key serves without a store (a check's fleet report) is not
/// sent without one either.
pub fn digest_key(global: &GlobalArgs) -> Option<datum_core::DigestKey> {
    let state = StateFiles::of(global);
    digest_key_in(state.dir.as_ref()?, || state.may_make_key())
}

/// [`digest_key`] for what cannot go without one (a saved plan that
/// records a sensitive resource): the state folder is created, private, as
/// the state store makes it, when there is none yet, and the key in it
/// (the apply of the plan makes the store there and reads the key again).
/// Beside a store that exists but is refused, an existing key is read and
/// none is made: the apply of such a plan would refuse the store anyway.
/// An error says why there is no key.
pub fn digest_key_created(global: &GlobalArgs) -> Result<datum_core::DigestKey> {
    let state = StateFiles::of(global);
    if let (Some(dir), true) = (&state.dir, state.exists())
        && let Err(e) = Store::probe_in(dir, &state.name)
    {
        return digest_key_in(dir, || false).with_context(|| {
            format!(
                "the state store is unusable ({e}), and no key is made beside a store Datum refuses"
            )
        });
    }
    let dir = state_dir_at(&global.root, global.state.as_deref(), true)?
        .context("the state folder could not be created")?;
    digest_key_in(&dir, || !state.exists() || state.may_make_key()).with_context(|| {
        format!(
            "there is no usable 32-byte key at {}",
            dir.file_path(DIGEST_KEY_FILE).display()
        )
    })
}

/// The digest key in the state folder `dir`, made there (0600, never over
/// an existing file or a link) when there is none and `may_make` says so
/// (asked only then).
fn digest_key_in(
    dir: &PrivateDir,
    may_make: impl FnOnce() -> bool,
) -> Option<datum_core::DigestKey> {
    let read = |dir: &PrivateDir| -> Option<datum_core::DigestKey> {
        let bytes = dir.read(DIGEST_KEY_FILE).ok()??;
        let bytes: [u8; 32] = bytes.try_into().ok()?;
        Some(datum_core::DigestKey::from_bytes(bytes))
    };
    match dir.lstat(DIGEST_KEY_FILE) {
        Ok(Some(_)) => {
            let key = read(dir);
            if key.is_none() {
                eprintln!(
                    "warning: {} is not a 32-byte key: sensitive resources are shown without a digest",
                    dir.file_path(DIGEST_KEY_FILE).display()
                );
            }
            key
        }
        Ok(None) if may_make() => {
            let secret = datum_host::random_secret().ok()?;
            match dir.write_new(DIGEST_KEY_FILE, &secret, 0o600) {
                Ok(()) => Some(datum_core::DigestKey::from_bytes(secret)),
                // Another pass made it meanwhile: use theirs.
                Err(_) => read(dir),
            }
        }
        Ok(None) | Err(_) => None,
    }
}

/// The label whose keyed digest is the state store's check value of the
/// digest key ([`digest_key_check`]).
const DIGEST_KEY_CHECK_LABEL: &str = "datum digest key check";

/// The check value the state store keeps of the digest key its keyed
/// records are made with (`Store::digest_key_check`): a keyed digest of a
/// fixed label, which tells the key without revealing it.
fn digest_key_check(key: &datum_core::DigestKey) -> String {
    key.digest(DIGEST_KEY_CHECK_LABEL)
}

/// How the digest key beside a state store is unusable for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyLoss {
    /// No key file.
    Missing,
    /// A file that is not a 32-byte key.
    Unreadable,
    /// A 32-byte key that does not give the store's check value (a key
    /// restored from the wrong backup, or another host's).
    Replaced,
}

/// Why this host's digest key may not be made anew beside `store` (in
/// `dir`): the key file is missing, not a 32-byte key, or a key other than
/// the one the store's check value was made with (`Store::digest_key_check`),
/// while the store holds records keyed with it (`Store::keyed_records`: a
/// sensitive resource's verified record, acceptance or failed apply). No
/// other key can check them, so a new key made or taken silently would
/// forget them: an accepted change would be overwritten as if it had been
/// declared. `None` when the key is the store's (or the store has no check
/// value yet: a store made before, which gets one with the key it has), or
/// nothing depends on it (a first run, an upgrade from before keyed
/// digests): then a key is made, or its check value recorded, as always.
pub fn key_lost(dir: &PrivateDir, store: &Store) -> Result<Option<String>> {
    Ok(key_loss(dir, store)?.map(|(_, lost)| lost))
}

/// [`key_lost`], with how the key is lost.
fn key_loss(dir: &PrivateDir, store: &Store) -> Result<Option<(KeyLoss, String)>> {
    let path = dir.file_path(DIGEST_KEY_FILE);
    let loss = match dir.lstat(DIGEST_KEY_FILE) {
        Ok(None) => KeyLoss::Missing,
        Ok(Some(_)) => match dir.read(DIGEST_KEY_FILE) {
            Ok(Some(bytes)) => match <[u8; 32]>::try_from(bytes) {
                Ok(bytes) => {
                    let check = digest_key_check(&datum_core::DigestKey::from_bytes(bytes));
                    match store.digest_key_check()? {
                        Some(kept) if kept != check => KeyLoss::Replaced,
                        _ => return Ok(None),
                    }
                }
                Err(_) => KeyLoss::Unreadable,
            },
            _ => KeyLoss::Unreadable,
        },
        Err(e) => {
            return Err(anyhow::Error::from(e))
                .with_context(|| format!("cannot read {}", path.display()));
        }
    };
    let keyed = store.keyed_records()?;
    if keyed.is_empty() {
        return Ok(None);
    }
    let counted = |n: u64, one: &str, many: &str| match n {
        0 => None,
        1 => Some(format!("1 {one}")),
        n => Some(format!("{n} {many}")),
    };
    let mut counts = [
        counted(keyed.verified, "verified record", "verified records"),
        counted(keyed.accepted, "acceptance", "acceptances"),
        counted(keyed.failures, "failed apply", "failed applies"),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>();
    let last = counts.pop().unwrap_or_default();
    let counts = match counts.is_empty() {
        true => last,
        false => format!("{} and {last}", counts.join(", ")),
    };
    let named = named_resources(&keyed);
    let (what, out) = match loss {
        KeyLoss::Unreadable => (
            "is not a usable 32-byte key",
            format!(
                "replace {} with the key from a backup of this host, or remove it and run `datum apply --rebuild-state`",
                path.display()
            ),
        ),
        KeyLoss::Missing => (
            "is missing",
            format!(
                "restore {} from a backup of this host (the same host's, not another's), or run `datum apply --rebuild-state`",
                path.display()
            ),
        ),
        KeyLoss::Replaced => (
            "is not the key this state store was used with (its check value differs: a key restored from another backup, or another host's)",
            format!(
                "restore {} from a backup of this host made with this state store, or run `datum apply --rebuild-state`",
                path.display()
            ),
        ),
    };
    let lost = format!(
        "this host's digest key {} {what}, and the state store {} holds {counts} of sensitive resources keyed with it ({named}); no other key can check them, and a new key made over them would silently forget them (an accepted change would be overwritten as if it had been declared). To recover, {out} to forget those records and make a new key",
        path.display(),
        store.path().display()
    );
    Ok(Some((loss, lost)))
}

/// The resources `keyed` names, with how many more there are.
fn named_resources(keyed: &datum_store::KeyedRecords) -> String {
    let named = keyed.resources.join(", ");
    match keyed
        .resources_total
        .saturating_sub(keyed.resources.len() as u64)
    {
        0 => named,
        more => format!("{named} and {more} more"),
    }
}

/// Warns, once per run, that the digest key is lost ([`key_lost`]), for a
/// command that goes on without it (read-only).
fn warn_key_lost(lost: &str) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!(
            "warning: {lost}; going on read-only without a digest key: accepted drift and verified records of those resources are not taken into account"
        );
    }
}

/// Removes the catalogue snapshot (the next run compiles).
pub fn forget_snapshot(global: &GlobalArgs) {
    forget_snapshot_of(&StateFiles::of(global));
}

/// [`forget_snapshot`] for the state files of a store named by path (the
/// agent's).
pub fn forget_snapshot_of(state: &StateFiles) {
    let Some(dir) = &state.dir else {
        return;
    };
    let name = state.sibling_name(SNAPSHOT_EXTENSION);
    if let Err(e) = dir.remove(&name) {
        eprintln!(
            "warning: cannot remove {}: {e}",
            dir.file_path(&name).display()
        );
    }
}

/// Whether `repo` holds a Datum repository (a `datum.yaml` file).
pub fn is_repository(repo: &Path) -> bool {
    datum_host::repo::metadata(&repo.join("datum.yaml")).is_ok_and(|m| m.is_file())
}

fn require_repository(global: &GlobalArgs) -> Result<()> {
    if !is_repository(&global.repo) {
        bail!(
            "{}: not a Datum repository (no datum.yaml); use --repo DIR",
            global.repo.display()
        );
    }
    Ok(())
}

/// A repository that does not compile: its diagnostics (already printed on
/// stderr, with their source lines) and what was not done. Kept whole in the
/// error, so `--output json` can carry every diagnostic with its file, line
/// and column (`crate::render::json::error`).
#[derive(Debug)]
pub struct RepositoryErrors {
    pub diagnostics: datum_catalog::Diagnostics,
    message: String,
}

impl RepositoryErrors {
    /// `diagnostics`, said as `message`.
    pub fn new(diagnostics: datum_catalog::Diagnostics, message: String) -> Self {
        Self {
            diagnostics,
            message,
        }
    }
}

impl std::fmt::Display for RepositoryErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RepositoryErrors {}

/// Prints a repository's diagnostics and says nothing was done.
pub fn repository_errors(
    global: &GlobalArgs,
    diagnostics: datum_catalog::Diagnostics,
    what: &str,
) -> anyhow::Error {
    eprint!("{}", diagnostics.render(use_color(global)));
    let message = format!(
        "the repository has {} error(s); nothing was {what}",
        diagnostics.error_count()
    );
    RepositoryErrors::new(diagnostics, message).into()
}

/// The content hashes of the repository's source files remembered by earlier
/// passes (`datum_catalog::hashes` says why they can be trusted; a File's
/// bytes are hashed again before they are written either way). Kept next to
/// the state store, and written only beside a usable one
/// ([`StateFiles::usable`]).
///
/// Saved as soon as the compile has hashed every source when they are to
/// be `remembered` (see [`save_source_hashes_if`]), so the compile does not
/// carry them through building its catalogue; forgotten there otherwise.
/// Where Datum's folder is still to be made (an apply on a bare root),
/// kept for the caller, which writes them once it has made it
/// ([`Unkept`]).
fn source_hashes_in(state: &StateFiles, remembered: bool) -> HashCacheFile {
    let (cache, after) = match &state.dir {
        Some(dir) => (
            HashCacheFile::load_in(dir, SOURCE_HASHES.as_ref()),
            AfterHashing::Save,
        ),
        None => (
            HashCacheFile::load(Path::new("/nonexistent").join(SOURCE_HASHES).as_path()),
            AfterHashing::Keep,
        ),
    };
    cache.after_hashing(if remembered {
        after
    } else {
        AfterHashing::Forget
    })
}

/// Writes the remembered hashes back when they are to be `remembered`. A
/// cache that cannot be written costs time, not correctness.
fn save_source_hashes_if(hashes: &HashCacheFile, remembered: bool) {
    if !remembered {
        return;
    }
    commit_later("the source hash cache", hashes.write_unsynced());
}

/// A cache written in full (the catalogue snapshot, the source hashes),
/// made durable and put in place while the run goes on (see
/// `crate::background`); `None`: nothing to save. A user who may read but
/// not write Datum's state (a plan by a non-root operator) simply does not
/// remember: no warning for that.
fn commit_later(what: &'static str, written: std::io::Result<Option<datum_host::Unsynced>>) {
    match written {
        Ok(Some(written)) => crate::background::spawn(what, move || {
            written
                .commit()
                .map_err(|e| format!("cannot save {what}: {e}"))
        }),
        Ok(None) => {}
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
        Err(e) => eprintln!("warning: cannot save {what}: {e}"),
    }
}

fn state_path_of(root: &Path, state: Option<&Path>) -> PathBuf {
    state.map_or_else(|| root.join(STATE_DIR).join("state.db"), Path::to_path_buf)
}

/// The state database's file name.
fn state_name_of(state: Option<&Path>) -> String {
    state.and_then(Path::file_name).map_or_else(
        || "state.db".to_owned(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Datum's private folder for the state store: the folder of `--state FILE`
/// (a path the operator named), else `ROOT/var/lib/datum` reached through
/// the boundary. Created (0700) when `create`; `None` when missing.
fn state_dir_at(root: &Path, state: Option<&Path>, create: bool) -> Result<Option<PrivateDir>> {
    let opened = match state {
        Some(file) => {
            let parent = file.parent().filter(|p| !p.as_os_str().is_empty());
            PrivateDir::open_path(parent.unwrap_or(Path::new(".")), create)
        }
        None => PrivateDir::open_in(&Host::new(root), Path::new(STATE_FOLDER), create),
    };
    opened.context("cannot open Datum's state folder")
}

/// Datum's folder under the root, as declared.
pub const STATE_FOLDER: &str = "/var/lib/datum";

/// What [`open_optional_store`] found: the store, none yet (an apply makes
/// it), one there but unusable (an apply refuses it unless given
/// --rebuild-state), or one it could not open because the file system
/// holding it is full (nothing damaged: room is the way back); the warning
/// saying why is already written.
pub enum OptionalStore {
    Open(Store),
    Missing,
    Unusable,
    Full,
}

impl OptionalStore {
    pub fn into_store(self) -> Option<Store> {
        match self {
            OptionalStore::Open(store) => Some(store),
            OptionalStore::Missing | OptionalStore::Unusable | OptionalStore::Full => None,
        }
    }

    /// Without a store: why, for the check's warning to a reporting host.
    pub fn without_store(&self) -> datum_check::WithoutStore {
        match self {
            OptionalStore::Unusable => datum_check::WithoutStore::Unusable,
            OptionalStore::Full => datum_check::WithoutStore::Full,
            OptionalStore::Open(_) | OptionalStore::Missing => datum_check::WithoutStore::NotMade,
        }
    }
}

/// [`open_store`] with [`StoreNeed::Optional`], saying whether a store it
/// goes without was there: a command that goes on without the store, `doing`
/// what it says, warns when the store is unusable.
pub fn open_optional_store(global: &GlobalArgs, doing: &str) -> OptionalStore {
    open_optional_store_at(&global.root, global.state.as_deref(), doing)
}

fn open_optional_store_at(root: &Path, state: Option<&Path>, doing: &str) -> OptionalStore {
    let name = state_name_of(state);
    let unusable = |e: anyhow::Error| {
        eprintln!(
            "warning: the state store is unusable ({e:#}); {doing} without it, read-only: quarantines, accepted drift and history are not taken into account (see `datum apply --rebuild-state` in docs/boundary.md)"
        );
        OptionalStore::Unusable
    };
    let dir = match state_dir_at(root, state, false) {
        Ok(Some(dir)) => dir,
        Ok(None) => return OptionalStore::Missing,
        Err(e) => return unusable(e),
    };
    match dir.lstat(&name) {
        Ok(Some(_)) => {}
        Ok(None) => return OptionalStore::Missing,
        Err(e) => return unusable(e.into()),
    }
    let refused = match Store::open_in(&dir, &name) {
        Ok(mut store) => {
            // Read, never made here: what the store records of a sensitive
            // resource is keyed with it (`Store::record_verified_of`).
            // A key that is not the store's is not used: what it would
            // check, it would take for changed.
            match key_lost(&dir, &store) {
                Ok(Some(lost)) => {
                    warn_key_lost(&lost);
                    store.set_digest_key(None);
                }
                _ => store.set_digest_key(digest_key_in(&dir, || false)),
            }
            return OptionalStore::Open(store);
        }
        Err(e) => e,
    };
    // A full file system fails the open with an I/O error that reads like
    // damage (SQLite's xShmMap), and the advice for a damaged store
    // (restore it, or --rebuild-state) is wrong then: nothing is damaged,
    // and a rebuild is refused the same way. Said as what it is.
    if let Err(full @ StoreError::Full { .. }) =
        datum_store::require_room(&dir, &dir.file_path(&name))
    {
        eprintln!(
            "warning: the state store cannot be opened: {full}; {doing} without it, read-only: quarantines, accepted drift and history are not taken into account. Nothing is damaged: make room on the file system that holds it (no need to restore the store or to rebuild it)"
        );
        return OptionalStore::Full;
    }
    unusable(refused.into())
}

/// What a command does with the state store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreNeed {
    /// It acts on what the store remembers (quarantines, owed reloads,
    /// policies): it refuses to run without a usable store, and creates one
    /// where there is none.
    Required(&'static str),
    /// It only reads (plan, a report-only check, schedule): without a
    /// usable store it goes on, read-only, with a warning, and it never
    /// creates one.
    Optional(&'static str),
}

/// Opens the state store for `need`. A store that is corrupt, foreign,
/// unreadable, on a full file system or behind a link is never replaced:
/// `Required` refuses (exit 1) with what is wrong and how to recover, unless
/// the operator passed `--rebuild-state`, which moves a damaged store aside
/// and starts empty, saying what that forgets; `Optional` warns and runs
/// without it.
pub fn open_store(global: &GlobalArgs, need: StoreNeed) -> Result<Option<Store>> {
    open_store_at(
        &global.root,
        global.state.as_deref(),
        global.rebuild_state,
        need,
    )
}

/// [`open_store`] for a root, an optional `--state FILE` and whether the
/// operator asked for `--rebuild-state` (the agent's way in).
pub fn open_store_at(
    root: &Path,
    state: Option<&Path>,
    rebuild: bool,
    need: StoreNeed,
) -> Result<Option<Store>> {
    let name = state_name_of(state);
    let path = state_path_of(root, state);
    match need {
        StoreNeed::Optional(doing) => Ok(open_optional_store_at(root, state, doing).into_store()),
        StoreNeed::Required(doing) => {
            let refuse = |e: anyhow::Error| -> anyhow::Error {
                e.context(format!(
                    "the state store {} cannot be used, so nothing was {doing}: Datum keeps quarantines (fixes a person told it not to touch) and owed service reloads there, and acting without them could undo them. To recover, restore {} from a backup (the damaged file is left exactly as it is), or run again with --rebuild-state to move it aside and start with an empty store, which forgets every quarantine, accepted drift, owed reload and finding history",
                    path.display(),
                    path.display()
                ))
            };
            let dir = state_dir_at(root, state, true)
                .and_then(|d| d.context("the state folder could not be created"))
                .map_err(refuse)?;
            // A full file system first: SQLite would fail on it with a less
            // helpful I/O error, or open and then fail to record the pass.
            // Nothing is damaged then: restoring the store or
            // --rebuild-state (refused the same way) is not the way out.
            datum_store::require_room(&dir, &path).map_err(|e| match e {
                StoreError::Full { .. } => anyhow::Error::from(e).context(format!(
                    "the state store {} cannot be used, so nothing was {doing}: Datum keeps quarantines (fixes a person told it not to touch) and owed service reloads there, and could not record what it does. Make room on the file system that holds it and run again: the store is not damaged (no need to restore it or to rebuild it)",
                    path.display()
                )),
                e => refuse(e.into()),
            })?;
            let store = match Store::open_in(&dir, &name) {
                Ok(store) => store,
                Err(e @ StoreError::Unusable { .. }) if rebuild => {
                    let (store, moved) =
                        Store::rebuild_in(&dir, &name).map_err(|e| refuse(e.into()))?;
                    eprintln!(
                        "warning: {e}; --rebuild-state: moved it aside{} and started an empty state store. Every quarantine, accepted drift, owed reload, verified record and finding history is forgotten.",
                        moved
                            .map(|m| format!(" to {}", m.display()))
                            .unwrap_or_default()
                    );
                    store
                }
                Err(e) => return Err(refuse(e.into())),
            };
            let mut store = store;
            // A key lost beside records keyed with it is never made anew
            // silently: refused (nothing is written), or with
            // --rebuild-state those records are forgotten first, saying so.
            if let Some((loss, lost)) = key_loss(&dir, &store).map_err(refuse)? {
                if !(rebuild && matches!(loss, KeyLoss::Missing | KeyLoss::Replaced)) {
                    bail!("{lost}; nothing was {doing}");
                }
                let forgotten = store.forget_keyed_records().map_err(|e| refuse(e.into()))?;
                // Another store's key (or another host's) is not kept: a
                // new one is made below, as for a missing key.
                if loss == KeyLoss::Replaced {
                    dir.remove(DIGEST_KEY_FILE).map_err(|e| refuse(e.into()))?;
                }
                eprintln!(
                    "warning: {} {}; --rebuild-state: forgot the {} records of sensitive resources keyed with it ({}) and made a new key: those resources are as if never verified, and their accepted drift is no longer accepted",
                    dir.file_path(DIGEST_KEY_FILE).display(),
                    match loss {
                        KeyLoss::Replaced => "was not the key this state store was used with",
                        _ => "is missing",
                    },
                    forgotten.total(),
                    named_resources(&forgotten),
                );
            }
            // What the store records of a sensitive resource is keyed with
            // this host's key, made beside it if need be
            // (`Store::record_verified_of`). The store keeps the key's
            // check value, recorded the first time a key is used with it
            // (a store made before one was kept gets the key it has: nothing
            // better is known) or when a new key replaced one nothing was
            // keyed with.
            let key = digest_key_in(&dir, || true);
            if let Some(key) = &key {
                let check = digest_key_check(key);
                if store
                    .digest_key_check()
                    .map_err(|e| refuse(e.into()))?
                    .as_deref()
                    != Some(check.as_str())
                {
                    store
                        .set_digest_key_check(&check)
                        .map_err(|e| refuse(e.into()))?;
                }
            }
            store.set_digest_key(key);
            Ok(Some(store))
        }
    }
}

/// The backup store, in `backups/` of Datum's private folder under the
/// root. Fails closed like the state store: a damaged index is refused
/// unless `--rebuild-state` (which keeps every blob as a recovered entry).
///
/// A file system with no room left is said to be full, before the index is
/// opened: SQLite fails on it with an I/O error that reads like damage
/// (`xShmMap`), and the advice for a damaged index (restore an older one,
/// or rebuild it) is wrong for a full disk: an older index restored
/// forgets the entries saved since, and their blobs go as orphans.
pub fn open_backups(global: &GlobalArgs) -> Result<BackupStore> {
    open_backups_to(global, true)
}

/// [`open_backups`]; `writes` when the caller saves or restores (a full
/// file system is refused first), not for `backup list` and `show`.
fn open_backups_to(global: &GlobalArgs, writes: bool) -> Result<BackupStore> {
    let host = Host::new(global.root.clone());
    let dir = PrivateDir::open_in(&host, &Path::new(STATE_FOLDER).join("backups"), true)
        .context("cannot open the backup folder")?
        .context("the backup folder could not be created")?;
    let cannot_open = || format!("cannot open the backup store {}", dir.path().display());
    if writes {
        datum_store::require_room(&dir, &dir.file_path(datum_store::backup::INDEX))
            .with_context(cannot_open)?;
    }
    match BackupStore::open_in(&dir) {
        Ok(store) => Ok(store),
        Err(e @ StoreError::Unusable { .. }) if global.rebuild_state => {
            let (store, warnings) = BackupStore::rebuild_in(&dir)
                .with_context(|| format!("cannot rebuild the backup store {}", dir.path().display()))?;
            eprintln!("warning: {e}; --rebuild-state: rebuilt the backup index");
            for w in warnings {
                eprintln!("warning: {w}");
            }
            Ok(store)
        }
        Err(e) if e.is_corruption() => Err(anyhow::Error::from(e).context(format!(
            "cannot open the backup store {}: restore its index.db from a backup, or run again with --rebuild-state to rebuild the index (every saved file is kept, as a recovered entry)",
            dir.path().display()
        ))),
        Err(e) => Err(anyhow::Error::from(e).context(cannot_open())),
    }
}

/// [`open_backups`] for a command that only reads it (`datum backup list`,
/// `show`): `None` where there is no backup store yet (no backup folder,
/// or no index in it), which makes neither. A store that exists opens as
/// [`open_backups`] opens it, without asking for room (it writes nothing).
pub fn open_backups_if_present(global: &GlobalArgs) -> Result<Option<BackupStore>> {
    let host = Host::new(global.root.clone());
    let dir = PrivateDir::open_in(&host, &Path::new(STATE_FOLDER).join("backups"), false)
        .context("cannot open the backup folder")?;
    match dir {
        Some(dir) if dir.lstat(datum_store::backup::INDEX)?.is_some() => {
            open_backups_to(global, false).map(Some)
        }
        _ => Ok(None),
    }
}

/// The host a pass runs against, walking paths with what the repository
/// allows beyond the strict boundary.
pub fn host(global: &GlobalArgs, identity: &HostIdentity, boundary: &datum_core::Boundary) -> Host {
    Host::with_name(global.root.clone(), identity.name.clone()).with_boundary(boundary.clone())
}

/// Makes `--root` (and `--state`) absolute once, at start-up, so every path
/// Datum hands a validator or prints is absolute: the root's own links are
/// resolved (it is the operator's choice), a root that does not exist yet
/// is made absolute as written.
pub fn absolutize(global: &mut GlobalArgs) -> Result<()> {
    let absolute = |p: &Path| -> Result<PathBuf> {
        match datum_host::repo::canonicalize(p) {
            Ok(c) => Ok(c),
            Err(_) => std::path::absolute(p)
                .with_context(|| format!("cannot make {} absolute", p.display())),
        }
    };
    global.root = absolute(&global.root)?;
    // Absolute, never resolved: messages name the repository in full (not
    // `.`), and a link `datum pull` manages stays a link (pinned later).
    global.repo = std::path::absolute(&global.repo)
        .with_context(|| format!("cannot make {} absolute", global.repo.display()))?;
    if let Some(state) = &global.state {
        global.state = Some(
            std::path::absolute(state)
                .with_context(|| format!("cannot make {} absolute", state.display()))?,
        );
    }
    // The host file too: its errors name it in full.
    if let Some(host_file) = &global.host_file {
        global.host_file = Some(
            std::path::absolute(host_file)
                .with_context(|| format!("cannot make {} absolute", host_file.display()))?,
        );
    }
    Ok(())
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
