//! What every command needs before it can act: the host identity, the compiled
//! catalogue, the state and backup stores, all resolved under `--root`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use datum_catalog::snapshot::LazyCatalogue;
use datum_catalog::{Catalogue, HashCacheFile, HostIdentity};
use datum_host::Host;
use datum_store::Store;
use datum_store::backup::BackupStore;

use crate::cli::{ColorChoice, GlobalArgs};

/// Where Datum keeps its own files under the root.
pub const STATE_DIR: &str = "var/lib/datum";

/// The source hash cache's file name, in the state store's folder.
pub const SOURCE_HASHES: &str = "source-hashes";

/// The catalogue snapshot's extension: `state.db` keeps its snapshot in
/// `state.catalogue` beside it (one per state store, so two stores in one
/// folder do not take turns overwriting one snapshot).
pub const SNAPSHOT_EXTENSION: &str = "catalogue";

pub fn identity(global: &GlobalArgs) -> Result<HostIdentity> {
    HostIdentity::load(&global.root, global.host_file.as_deref(), &global.labels)
        .context("cannot establish the host identity")
}

/// Whether human output gets colour: on a terminal unless told otherwise.
pub fn use_color(global: &GlobalArgs) -> bool {
    match global.color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::env::var_os("NO_COLOR").is_none()
                && std::io::IsTerminal::is_terminal(&std::io::stdout())
        }
    }
}

/// Compiles the repository for this host. Manifest errors are printed as
/// diagnostics and turn into an error: a repository with any error is never
/// applied.
pub fn compile(global: &GlobalArgs, identity: &HostIdentity) -> Result<Catalogue> {
    compile_with(global, identity, false)
}

/// A compiled catalogue with what a fleet report needs besides: the digest
/// of the repository stamp it was compiled under (`None` when no stamp was
/// taken) and `datum.yaml`'s classes.
pub struct Stamped {
    pub catalogue: Catalogue,
    pub stamp_digest: Option<String>,
    pub classes: serde_json::Value,
}

/// [`compile`], with the stamp digest and classes ([`Stamped`]).
pub fn compile_stamped(global: &GlobalArgs, identity: &HostIdentity) -> Result<Stamped> {
    let (lazy, _) = compiled(global, identity, "applied")?;
    let (digest, classes) = (lazy.stamp_digest.clone(), lazy.classes.clone());
    let catalogue = match lazy.into_catalogue() {
        Ok(catalogue) => catalogue,
        Err(e) => {
            eprintln!("warning: {e}; compiling the repository");
            forget_snapshot(global);
            compiled(global, identity, "applied")?.0.into_catalogue()?
        }
    };
    Ok(Stamped {
        catalogue,
        stamp_digest: digest,
        classes,
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
        let hashes = source_hashes(global);
        let compiled = datum_catalog::compile_cached(&global.repo, identity, true, Some(&hashes));
        save_source_hashes(global, &hashes);
        return compiled.map_err(|d| repository_errors(global, &d, "applied"));
    }
    match compiled(global, identity, "applied")?.0.into_catalogue() {
        Ok(catalogue) => Ok(catalogue),
        Err(e) => {
            // Damaged after it was checked (a disk error): forget it.
            eprintln!("warning: {e}; compiling the repository");
            forget_snapshot(global);
            Ok(compiled(global, identity, "applied")?.0.into_catalogue()?)
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
/// where a state store already exists. `what` completes "nothing was ..."
/// in the error for a repository with errors.
pub fn compiled(
    global: &GlobalArgs,
    identity: &HostIdentity,
    what: &str,
) -> Result<(LazyCatalogue, Provenance)> {
    require_repository(global)?;
    if global.recompile {
        forget_snapshot(global);
    }
    compile_or_reuse(&global.repo, &state_path(global), identity)
        .map_err(|d| repository_errors(global, &d, what))
}

/// [`compiled`] for a repository and a state store named by path (the
/// agent's way in): the repository's problems come back as diagnostics.
pub fn compile_or_reuse(
    repo: &Path,
    state: &Path,
    identity: &HostIdentity,
) -> Result<(LazyCatalogue, Provenance), datum_catalog::Diagnostics> {
    use datum_catalog::snapshot::{self, Stamp};
    let snapshot_path = state.with_extension(SNAPSHOT_EXTENSION);
    if let Some(lazy) = snapshot::load(&snapshot_path, repo, identity) {
        return Ok((lazy, Provenance::Snapshot));
    }
    // Taken before the compile reads anything: an edit made meanwhile
    // leaves the stamp stale, never the snapshot.
    let stamp = Stamp::take(repo);
    let repository = datum_catalog::Repository::load(repo)?;
    let hashes = HashCacheFile::load(&state.with_file_name(SOURCE_HASHES));
    let catalogue = datum_catalog::compile_repository_cached(&repository, identity, Some(&hashes));
    save_source_hashes_at(state, &hashes);
    let catalogue = catalogue?;
    let classes = repository.settings.classes.clone();
    drop(repository);
    let stamp_digest = stamp.as_ref().ok().map(Stamp::digest);
    // Like the source hashes: only where Datum already keeps state.
    if let (Ok(stamp), true) = (stamp, state.exists()) {
        // Not remembering (a file changed just now, a sensitive resource
        // with rendered content) only costs the next run a compile.
        if let Err(e) = snapshot::save(&snapshot_path, stamp, &catalogue, &classes)
            && e.kind() != std::io::ErrorKind::PermissionDenied
        {
            eprintln!("warning: cannot save the catalogue snapshot: {e}");
        }
    }
    let mut lazy = LazyCatalogue::compiled(catalogue, classes);
    lazy.stamp_digest = stamp_digest;
    Ok((lazy, Provenance::Compiled))
}

/// Removes the catalogue snapshot (the next run compiles).
pub fn forget_snapshot(global: &GlobalArgs) {
    let path = snapshot_path(global);
    if let Err(e) = std::fs::remove_file(&path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        eprintln!("warning: cannot remove {}: {e}", path.display());
    }
}

/// Where the catalogue snapshot of this state store is kept.
pub fn snapshot_path(global: &GlobalArgs) -> PathBuf {
    state_path(global).with_extension(SNAPSHOT_EXTENSION)
}

fn require_repository(global: &GlobalArgs) -> Result<()> {
    if !global.repo.join("datum.yaml").is_file() {
        bail!(
            "{}: not a Datum repository (no datum.yaml); use --repo DIR",
            global.repo.display()
        );
    }
    Ok(())
}

/// Prints a repository's diagnostics and says nothing was done.
fn repository_errors(
    global: &GlobalArgs,
    diagnostics: &datum_catalog::Diagnostics,
    what: &str,
) -> anyhow::Error {
    eprint!("{}", diagnostics.render(use_color(global)));
    anyhow::anyhow!(
        "the repository has {} error(s); nothing was {what}",
        diagnostics.error_count()
    )
}

/// The content hashes of the repository's source files remembered by earlier
/// passes (`datum_catalog::hashes` says why they can be trusted; a File's
/// bytes are hashed again before they are written either way). Kept next to
/// the state store.
pub fn source_hashes(global: &GlobalArgs) -> HashCacheFile {
    HashCacheFile::load(&state_path(global).with_file_name(SOURCE_HASHES))
}

/// Writes the remembered hashes back, only where a state store already
/// exists: a dry run on a host Datum has never managed leaves no file
/// behind. A cache that cannot be written costs time, not correctness.
pub fn save_source_hashes(global: &GlobalArgs, hashes: &HashCacheFile) {
    save_source_hashes_at(&state_path(global), hashes);
}

/// [`save_source_hashes`] beside the state store at `state`.
fn save_source_hashes_at(state: &Path, hashes: &HashCacheFile) {
    if !state.exists() {
        return;
    }
    // A user who may read but not write Datum's state (a plan by a
    // non-root operator) simply does not remember: no warning for that.
    if let Err(e) = hashes.save()
        && e.kind() != std::io::ErrorKind::PermissionDenied
    {
        eprintln!("warning: cannot save the source hash cache: {e}");
    }
}

pub fn state_path(global: &GlobalArgs) -> PathBuf {
    global
        .state
        .clone()
        .unwrap_or_else(|| global.root.join(STATE_DIR).join("state.db"))
}

/// Opens the state store; a store that cannot be opened at all is reported
/// and the pass runs without it (observation is the source of truth).
pub fn open_store(global: &GlobalArgs, create: bool) -> Option<Store> {
    let path = state_path(global);
    // A dry run must not write to the host, not even a new state database.
    if !create && !path.exists() {
        return None;
    }
    match Store::open(&path) {
        Ok((store, warnings)) => {
            for w in warnings {
                eprintln!("warning: {w}");
            }
            Some(store)
        }
        Err(e) => {
            eprintln!("warning: state store unavailable, continuing without it: {e}");
            None
        }
    }
}

pub fn open_backups(global: &GlobalArgs) -> Result<BackupStore> {
    let dir = global.root.join(STATE_DIR).join("backups");
    let (store, warnings) = BackupStore::open(&dir)
        .with_context(|| format!("cannot open the backup store {}", dir.display()))?;
    for w in warnings {
        eprintln!("warning: {w}");
    }
    Ok(store)
}

pub fn host(global: &GlobalArgs, identity: &HostIdentity) -> Host {
    Host::with_name(global.root.clone(), identity.name.clone())
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
