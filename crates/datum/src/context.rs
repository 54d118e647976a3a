//! What every command needs before it can act: the host identity, the compiled
//! catalogue, the state and backup stores, all resolved under `--root`.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use datum_catalog::{Catalogue, HashCacheFile, HostIdentity};
use datum_host::Host;
use datum_store::Store;
use datum_store::backup::BackupStore;

use crate::cli::{ColorChoice, GlobalArgs};

/// Where Datum keeps its own files under the root.
pub const STATE_DIR: &str = "var/lib/datum";

/// The source hash cache's file name, in the state store's folder.
pub const SOURCE_HASHES: &str = "source-hashes";

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

/// [`compile`], optionally recording where every field came from.
pub fn compile_with(
    global: &GlobalArgs,
    identity: &HostIdentity,
    explain: bool,
) -> Result<Catalogue> {
    if !global.repo.join("datum.yaml").is_file() {
        bail!(
            "{}: not a Datum repository (no datum.yaml); use --repo DIR",
            global.repo.display()
        );
    }
    let hashes = source_hashes(global);
    let compiled = datum_catalog::compile_cached(&global.repo, identity, explain, Some(&hashes));
    save_source_hashes(global, &hashes);
    match compiled {
        Ok(catalogue) => Ok(catalogue),
        Err(diagnostics) => {
            eprint!("{}", diagnostics.render(use_color(global)));
            bail!(
                "the repository has {} error(s); nothing was applied",
                diagnostics.error_count()
            )
        }
    }
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
    if !state_path(global).exists() {
        return;
    }
    if let Err(e) = hashes.save() {
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
