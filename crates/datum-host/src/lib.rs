//! Machine access for Datum: the only crate that touches the machine.
//!
//! Everything a pass does to a host goes through here: mapping declared paths
//! under `--root` ([`paths`]), users and groups ([`accounts`]), file-system
//! operations whose errors carry the path ([`fs`]), atomic replacement through
//! a staged copy ([`staging`]), Datum's own files outside a root ([`own`]), running programs without a shell
//! ([`command`]) and the per-root lock ([`lock`]).
//!
//! This crate must not know about resources, manifests or reports: it offers
//! operations, and the providers decide which to perform. Errors are
//! [`HostError`] values that name what they were about, never bare strings.

pub mod accounts;
mod cache;
pub mod command;
mod error;
pub mod fs;
pub mod lock;
pub mod own;
pub mod paths;
pub mod staging;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

pub use accounts::Accounts;
pub use cache::PassCache;
pub use command::{CommandOutput, CommandSpec};
pub use error::HostError;
pub use fs::{FileKind, Stat};
pub use lock::RootLock;
pub use staging::{StagedFile, StagedSymlink};

/// The machine a pass runs against, seen through `--root`.
///
/// Holds per-pass caches (the parsed account files, the directories already
/// swept for stale staging), so create one per pass. Clones share the caches.
#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
    name: String,
    accounts: Arc<OnceLock<Accounts>>,
    swept: Arc<Mutex<HashSet<PathBuf>>>,
    canonical_root: Arc<OnceLock<PathBuf>>,
    pass_cache: PassCache,
}

impl Host {
    /// A host at `root`, named after this machine (`uname -n`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let name = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        Self::with_name(root, name)
    }

    /// A host at `root` with the name reports use for it (from the host file).
    pub fn with_name(root: impl Into<PathBuf>, name: impl Into<String>) -> Self {
        Self {
            root: root.into(),
            name: name.into(),
            accounts: Arc::new(OnceLock::new()),
            swept: Arc::new(Mutex::new(HashSet::new())),
            canonical_root: Arc::new(OnceLock::new()),
            pass_cache: PassCache::default(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The host's name, as failure reports show it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where a declared absolute path is under the root (`/tmp/r` +
    /// `/etc/motd` = `/tmp/r/etc/motd`). Relative or unnormalised paths are
    /// refused.
    pub fn resolve(&self, declared: &Path) -> Result<PathBuf, HostError> {
        paths::resolve(&self.root, declared)
    }

    /// [`Host::resolve`] for a path about to be changed: also refuses one
    /// whose parent leads outside the root through a symlink. Under `--root`,
    /// a link such as `<root>/etc/nginx/sites-enabled -> /etc/nginx/...`
    /// (declared for the real machine) would otherwise make a write land on
    /// the machine running the pass instead of inside the root.
    pub fn resolve_for_change(&self, declared: &Path) -> Result<PathBuf, HostError> {
        let real = self.resolve(declared)?;
        let root = match self.canonical_root.get() {
            Some(root) => root,
            None => {
                let canonical = std::fs::canonicalize(&self.root)
                    .map_err(|e| HostError::io("resolve the root", &self.root, e))?;
                self.canonical_root.get_or_init(|| canonical)
            }
        };
        if root == Path::new("/") {
            return Ok(real);
        }
        let Some(parent) = real.parent() else {
            return Ok(real);
        };
        match std::fs::canonicalize(parent) {
            Ok(resolved) if resolved.starts_with(root) => Ok(real),
            Ok(resolved) => Err(HostError::OutsideRoot {
                path: real,
                root: self.root.clone(),
                resolved,
            }),
            // Nothing there yet: the change itself reports the missing parent.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                Ok(real)
            }
            Err(e) => Err(HostError::io("resolve", parent, e)),
        }
    }

    /// This pass's cache of type `T` (created empty on first use, shared by
    /// clones of this host): where a provider keeps what it reads once per
    /// pass, such as the parsed package database. See [`PassCache`].
    pub fn pass_cache<T>(&self) -> Arc<T>
    where
        T: std::any::Any + Send + Sync + Default,
    {
        self.pass_cache.get_or_default()
    }

    /// The parsed account files, read on first use.
    pub fn accounts(&self) -> Result<&Accounts, HostError> {
        if let Some(accounts) = self.accounts.get() {
            return Ok(accounts);
        }
        let loaded = Accounts::load(&self.root)?;
        Ok(self.accounts.get_or_init(|| loaded))
    }

    /// A user's number from a name or a decimal number.
    pub fn lookup_user(&self, name_or_number: &str) -> Result<u32, HostError> {
        let db = &self.accounts()?.users;
        db.lookup(name_or_number)
            .ok_or_else(|| HostError::UnknownUser {
                name: name_or_number.to_owned(),
                database: db.path.clone(),
            })
    }

    /// A group's number from a name or a decimal number.
    pub fn lookup_group(&self, name_or_number: &str) -> Result<u32, HostError> {
        let db = &self.accounts()?.groups;
        db.lookup(name_or_number)
            .ok_or_else(|| HostError::UnknownGroup {
                name: name_or_number.to_owned(),
                database: db.path.clone(),
            })
    }

    pub fn user_name(&self, uid: u32) -> Option<String> {
        self.accounts().ok()?.users.name(uid).map(str::to_owned)
    }

    pub fn group_name(&self, gid: u32) -> Option<String> {
        self.accounts().ok()?.groups.name(gid).map(str::to_owned)
    }

    /// Removes stale staging directories from `dir` (a real path), once per
    /// pass per directory: after the first sweep any staging there is our own.
    pub fn sweep_stale_staging(&self, dir: &Path) -> Result<usize, HostError> {
        {
            let swept = self.swept.lock().unwrap_or_else(|p| p.into_inner());
            if swept.contains(dir) {
                return Ok(0);
            }
        }
        let removed = staging::cleanup_stale(dir)?;
        self.swept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(dir.to_path_buf());
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_come_from_the_root_and_are_cached() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(
            root.path().join("etc/passwd"),
            "app:x:900:901::/:/bin/false\n",
        )
        .unwrap();
        std::fs::write(root.path().join("etc/group"), "appgrp:x:901:\n").unwrap();
        let host = Host::with_name(root.path(), "web-001");
        assert_eq!(host.name(), "web-001");
        assert_eq!(host.lookup_user("app").unwrap(), 900);
        assert_eq!(host.lookup_group("appgrp").unwrap(), 901);
        assert_eq!(host.user_name(900).as_deref(), Some("app"));
        assert_eq!(host.group_name(901).as_deref(), Some("appgrp"));
        assert_eq!(host.lookup_user("77").unwrap(), 77);

        // Parsed once: a later edit is not seen within the same pass.
        std::fs::write(
            root.path().join("etc/passwd"),
            "other:x:5:5::/:/bin/false\n",
        )
        .unwrap();
        assert_eq!(host.lookup_user("app").unwrap(), 900);

        let err = host.lookup_user("nosuch").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("`nosuch`") && text.contains("etc/passwd"),
            "{text}"
        );
        assert!(matches!(
            host.lookup_group("nogroup"),
            Err(HostError::UnknownGroup { .. })
        ));
    }

    #[test]
    fn changes_through_a_link_leading_out_of_the_root_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::create_dir(root.path().join("etc/real")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("etc/out")).unwrap();
        std::os::unix::fs::symlink("real", root.path().join("etc/in")).unwrap();
        let host = Host::new(root.path());

        let err = host
            .resolve_for_change(Path::new("/etc/out/x.conf"))
            .unwrap_err();
        assert!(matches!(err, HostError::OutsideRoot { .. }), "{err}");
        assert!(err.to_string().contains("outside the root"), "{err}");
        // A link that stays inside, the link itself, and missing parents are fine.
        host.resolve_for_change(Path::new("/etc/in/x.conf"))
            .unwrap();
        host.resolve_for_change(Path::new("/etc/out")).unwrap();
        host.resolve_for_change(Path::new("/etc/missing/x.conf"))
            .unwrap();
        // With / as the root there is nothing to escape from.
        Host::new("/")
            .resolve_for_change(&outside.path().join("x"))
            .unwrap();
    }

    #[test]
    fn stale_staging_is_swept_once_per_pass() {
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path());
        assert!(!host.name().is_empty());
        std::fs::create_dir(root.path().join(".datum.stage.x")).unwrap();
        assert_eq!(host.sweep_stale_staging(root.path()).unwrap(), 1);
        std::fs::create_dir(root.path().join(".datum.stage.y")).unwrap();
        assert_eq!(host.sweep_stale_staging(root.path()).unwrap(), 0);
    }
}
