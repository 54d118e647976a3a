//! Machine access for Datum: the only crate that touches the machine.
//!
//! Everything a pass does to a host goes through here: mapping declared paths
//! under `--root` ([`paths`]), reaching them through the file-system
//! boundary ([`boundary`]: from a handle on the root, one component at a
//! time, never through a parent link) and operating on what was reached
//! ([`Located`], errors carrying the path), atomic replacement through a
//! staged copy ([`staging`]), Datum's own private folders ([`private`]),
//! reading the repository ([`repo`]), users and groups ([`accounts`]),
//! running programs without a shell ([`command`]) and validators in a
//! throwaway sandbox ([`sandbox`]), the per-root lock ([`lock`]), and who
//! changed a watched file (fanotify and `/proc`, [`attribution`]), and the
//! process-wide settings the binaries make before they start a thread
//! ([`memory`], [`descriptors`]).
//! `datum pull` writes its checkouts and switches its link with the same
//! handles (a checkout is written with [`Located::create_new`] beneath a
//! [`PrivateDir`], the link swapped by [`Located::stage_symlink`]).
//!
//! This crate must not know about resources, manifests or reports: it offers
//! operations, and the providers decide which to perform. Errors are
//! [`HostError`] values that name what they were about, never bare strings.

#![allow(
    clippy::disallowed_methods,
    reason = "the one crate that touches the machine: the boundary, the private folders, the repository reads and the command runner are built from these calls (clippy.toml forbids them everywhere else)"
)]

pub mod accounts;
pub mod admin;
pub mod attribution;
pub mod boundary;
mod cache;
pub mod command;
pub mod confine;
pub mod descriptors;
mod dir_cache;
pub mod durability;
mod error;
pub mod fs;
mod located;
pub mod lock;
pub mod memory;
pub mod named;
pub mod paths;
pub mod private;
#[cfg(test)]
mod race;
pub mod repo;
pub mod sandbox;
pub mod staging;
pub mod tree_scan;
pub mod way;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

pub use accounts::Accounts;
pub use boundary::{Boundary, Dir};
pub use cache::PassCache;
pub use command::{CommandOutput, CommandSpec};
pub use durability::{Durability, NotDurable};
pub use error::{HostError, ParentLink, UnsafeLink, UnsafeTransition};
pub use fs::{FileKind, Stat};
pub use located::{Holding, Located};
pub use lock::RootLock;
pub use private::{PrivateDir, Unsynced};
pub use staging::{StagedFile, StagedSymlink};

/// The machine a pass runs against, seen through `--root`.
///
/// Every path is reached through the boundary ([`boundary`]): from a handle
/// on the root, one component at a time, never following a link in a
/// parent. Holds per-pass caches (the directories opened so far, at most a
/// bounded number of them kept open, as `dir_cache.rs` says; the parsed account
/// files, the directories already swept for stale staging), so create one
/// per pass. Clones share the caches.
#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
    name: String,
    boundary: Arc<Boundary>,
    root_dir: Arc<OnceLock<Dir>>,
    dirs: Arc<Mutex<dir_cache::DirCache>>,
    /// The parsed account files, read on first use and dropped when a
    /// provider changed them ([`Host::forget_accounts`]).
    accounts: Arc<Mutex<Option<Arc<Accounts>>>>,
    swept: Arc<Mutex<HashSet<PathBuf>>>,
    pass_cache: PassCache,
    /// Directory fsyncs owed by deferred commits (see [`durability`]).
    durability: Durability,
    /// What the pass must tell the operator (see [`Host::take_notices`]).
    notices: boundary::Notices,
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
            boundary: Arc::new(Boundary::default()),
            root_dir: Arc::new(OnceLock::new()),
            dirs: Arc::new(Mutex::new(dir_cache::DirCache::for_this_process())),
            accounts: Arc::new(Mutex::new(None)),
            swept: Arc::new(Mutex::new(HashSet::new())),
            pass_cache: PassCache::default(),
            durability: Durability::default(),
            notices: boundary::Notices::default(),
        }
    }

    /// The same host with what the repository allows beyond the strict
    /// walk (`boundary:` in `datum.yaml`). Set before the first use.
    pub fn with_boundary(mut self, boundary: Boundary) -> Self {
        self.boundary = Arc::new(boundary);
        // A cache of its own, empty: a folder reached under another
        // boundary (through a link this one refuses, or refused where this
        // one allows) is never handed to this host, nor one of its folders
        // to a clone taken before, which keeps the boundary it had.
        self.dirs = Arc::new(Mutex::new(dir_cache::DirCache::for_this_process()));
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The host's name, as failure reports show it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the repository allows beyond the strict walk.
    pub fn boundary(&self) -> &Boundary {
        &self.boundary
    }

    /// Where a declared absolute path is under the root (`/tmp/r` +
    /// `/etc/motd` = `/tmp/r/etc/motd`), as text: for messages and for
    /// programs that take paths. Relative or unnormalised paths are
    /// refused. Never open what this returns: use [`Host::locate`].
    pub fn resolve(&self, declared: &Path) -> Result<PathBuf, HostError> {
        paths::resolve(&self.root, declared)
    }

    /// The root, opened once per pass (the operator named it, so links in
    /// the root's own path are followed as given).
    pub fn root_dir(&self) -> Result<Dir, HostError> {
        if let Some(dir) = self.root_dir.get() {
            return Ok(dir.clone());
        }
        let opened = Dir::open_path(&self.root).map_err(|e| match e {
            HostError::Io { path, source, .. } => HostError::Io {
                path,
                op: "open the root",
                source,
            },
            other => other,
        })?;
        let opened = opened.with_notices(self.notices.clone());
        Ok(self.root_dir.get_or_init(|| opened).clone())
    }

    /// What the pass must tell the operator that is no resource's failure
    /// (a staging folder a local user moved away, left where they put it),
    /// in the order noted; the list is emptied.
    pub fn take_notices(&self) -> Vec<String> {
        self.notices.take()
    }

    /// Notes something the pass must tell the operator that is no
    /// resource's failure (a program's warning on success), shown under the
    /// pass's summary with the rest ([`Host::take_notices`]). The caller
    /// keeps sensitive values out of it.
    pub fn notice(&self, text: String) {
        self.notices.push(text);
    }

    /// The declared directory `declared`, opened through the boundary
    /// (remembered while the pass's cache keeps it open: at most a bounded
    /// number of folders are, the least recently used let go first).
    pub fn dir(&self, declared: &Path) -> Result<Dir, HostError> {
        paths::check_declared(declared)?;
        let dir = self.walk_to(declared, &|| self.real(declared))?;
        self.not_own_folder(declared, &dir, None)?;
        Ok(dir)
    }

    /// Refuses a managed path that is Datum's own folder, or inside it,
    /// where it is not spelled so (the catalogue refuses the spelling): a
    /// link `boundary.follow_links` lists led there (`/etc/app ->
    /// /var/lib/datum`). `dir` is where the walk to `declared` (or to its
    /// parent, with `name` the entry) arrived.
    fn not_own_folder(
        &self,
        declared: &Path,
        dir: &Dir,
        name: Option<&std::ffi::OsStr>,
    ) -> Result<(), HostError> {
        use std::os::unix::ffi::OsStrExt as _;
        // Compared as bytes: this runs for every path a pass reaches (the
        // walk's paths are joined name by name, so never `//` or `.`), and
        // `Path`'s component parsing cost the metadata pass 7 % of its CPU.
        let own = Path::new(lock::STATE_FOLDER);
        let path = dir.path().as_os_str().as_bytes();
        let root = self.root.as_os_str().as_bytes();
        let Some(real) = path.strip_prefix(root) else {
            return Ok(());
        };
        let real = match real.strip_prefix(b"/") {
            Some(rest) => rest,
            None if real.is_empty() || root.ends_with(b"/") => real,
            // Another folder whose name starts with the root's.
            None => return Ok(()),
        };
        let own_text = lock::STATE_FOLDER.trim_start_matches('/');
        let own_relative = own_text.as_bytes();
        let at_or_below = |p: &[u8], folder: &[u8]| {
            p.strip_prefix(folder)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(b"/"))
        };
        let inside = at_or_below(real, own_relative)
            || name.is_some_and(|n| {
                own_text.rsplit_once('/').is_some_and(|(parent, file)| {
                    real == parent.as_bytes() && n.as_bytes() == file.as_bytes()
                })
            });
        if inside && !declared.starts_with(own) {
            return Err(HostError::OwnFolder {
                path: name.map_or_else(|| dir.path().to_path_buf(), |n| dir.path().join(n)),
                declared: declared.to_path_buf(),
            });
        }
        Ok(())
    }

    /// `declared` under the root, as text (checked already).
    fn real(&self, declared: &Path) -> PathBuf {
        paths::resolve(&self.root, declared).unwrap_or_else(|_| self.root.join(declared))
    }

    fn walk_to(&self, declared_dir: &Path, target: &dyn Fn() -> PathBuf) -> Result<Dir, HostError> {
        let root = self.root_dir()?;
        let cached = |p: &Path| self.dirs.lock().unwrap_or_else(|e| e.into_inner()).get(p);
        let remember = |p: &Path, d: &Dir| {
            self.dirs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(p, d);
        };
        let walker = boundary::Walker {
            root: &root,
            boundary: &self.boundary,
            cached: &cached,
            remember: &remember,
        };
        walker.dir(declared_dir, target)
    }

    /// The entry at a declared path, its parent opened through the
    /// boundary: what every read and change of a managed path starts from.
    /// A missing parent is [`HostError::MissingParent`]; a parent link or
    /// an unsafe ownership transition is refused (see [`boundary`]).
    pub fn locate(&self, declared: &Path) -> Result<Located, HostError> {
        paths::check_declared(declared)?;
        let (Some(parent), Some(name)) = (declared.parent(), declared.file_name()) else {
            return Err(HostError::io(
                "reach",
                self.real(declared),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "the root has no parent"),
            ));
        };
        let dir = self.walk_to(parent, &|| self.real(declared))?;
        self.not_own_folder(declared, &dir, Some(name))?;
        Ok(dir.entry(name))
    }

    /// [`Host::locate`] for reading: `None` when a parent is missing or is
    /// not a directory (then nothing can be at the path). A boundary
    /// refusal is still an error: observation never reads through it.
    pub fn try_locate(&self, declared: &Path) -> Result<Option<Located>, HostError> {
        match self.locate(declared) {
            Ok(located) => Ok(Some(located)),
            Err(e) if e.is_missing_parent() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `lstat` of the entry at a declared path: `None` when nothing is there
    /// (a missing parent included).
    pub fn lstat(&self, declared: &Path) -> Result<Option<Stat>, HostError> {
        match self.try_locate(declared)? {
            Some(located) => located.lstat(),
            None => Ok(None),
        }
    }

    /// Reads a regular file at a declared path; `None` when nothing is there.
    pub fn read(&self, declared: &Path) -> Result<Option<Vec<u8>>, HostError> {
        let Some(located) = self.try_locate(declared)? else {
            return Ok(None);
        };
        match located.lstat()? {
            None => Ok(None),
            Some(_) => located.read().map(Some),
        }
    }

    /// Whether everyone on the machine may read what is at a declared path,
    /// as the rule for what output may show of the host goes (a validator's,
    /// a content diff's; see `docs/boundary.md`): it has the read bit for
    /// others, and every folder on its real way from the root (the root
    /// itself aside: `--root` is the operator's) has the search bit for
    /// others. `/etc/shadow` (0640) is not, nor is a 0644 key in a 0700
    /// folder. Nothing there is (there is nothing to read). Decided from
    /// the entry's `lstat` and `fstat` of the folders reached by the
    /// boundary's walk: no link is followed but those the repository
    /// allows, whose target's own folders are the ones looked at. An error
    /// is an error; a caller that shows content takes it as "no".
    pub fn readable_by_everyone(&self, declared: &Path) -> Result<bool, HostError> {
        let Some(located) = self.try_locate(declared)? else {
            return Ok(true);
        };
        let Some(stat) = located.lstat()? else {
            return Ok(true);
        };
        if stat.meta.mode & 0o004 == 0 {
            return Ok(false);
        }
        self.searchable_by_everyone(located.parent())
    }

    /// Reads the regular file at a declared path for a person to see (a
    /// content diff), at most `limit` bytes, only when everyone may read
    /// it ([`Host::readable_by_everyone`]'s rule), decided on the file
    /// opened, whose bytes are the ones read: a name swapped between a
    /// look and the read (for a hard link to `/etc/shadow`, or another
    /// user's private file in a folder the swapper owns) is never shown.
    pub fn read_shown(&self, declared: &Path, limit: u64) -> Result<Shown, HostError> {
        let Some(located) = self.try_locate(declared)? else {
            return Ok(Shown::Absent);
        };
        if located.lstat()?.is_none() {
            return Ok(Shown::Absent);
        }
        let (file, stat) = located.open_file_stat()?;
        if stat.meta.mode & 0o004 == 0 || !self.searchable_by_everyone(located.parent())? {
            return Ok(Shown::Withheld);
        }
        Ok(
            match located.read_open_up_to(file, stat.meta.size, limit)? {
                Some(bytes) => Shown::Bytes(bytes),
                None => Shown::TooLarge,
            },
        )
    }

    /// Whether every folder on `parent`'s real way from the root (the root
    /// itself aside) has the search bit for others.
    fn searchable_by_everyone(&self, parent: &Dir) -> Result<bool, HostError> {
        // The folder the entry is really in, under the root: a path no link
        // is in (a followed link's target is known by its real path).
        let Ok(real) = parent.path().strip_prefix(&self.root) else {
            return Ok(false);
        };
        let mut folder = PathBuf::from("/");
        for name in boundary::components(real) {
            folder.push(name);
            let dir = self.dir(&folder)?;
            let st = rustix::fs::fstat(dir.fd())
                .map_err(|e| HostError::io("inspect", dir.path(), boundary::errno(e)))?;
            if st.st_mode & 0o001 == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// [`Host::lstat`] of many declared paths on `threads` threads: each
    /// parent is walked once (and then served from the pass's cache), each
    /// entry looked up relative to it (`fstatat`), so a metadata pass over
    /// 20,000 files costs one system call per file. Results are in the
    /// order of `declared`.
    pub fn lstat_many(
        &self,
        declared: &[&Path],
        threads: usize,
    ) -> Vec<Result<Option<Stat>, HostError>> {
        // Consecutive runs of one parent, in the order first declared:
        // declarations are usually written folder by folder already (a walk
        // of a tree is, though not in byte order: `a/x` comes before `a-2/y`,
        // and sorting 100,000 paths to get there cost an eighth of a
        // metadata pass), so most of the time nothing moves.
        let grouped = grouped_by_parent(declared);
        let in_order = grouped.is_none();
        let mut order: Vec<usize> = grouped.unwrap_or_else(|| (0..declared.len()).collect());
        let threads = threads.clamp(1, 64);
        let chunk = order.len().div_ceil(threads).max(512);
        // One list of results, in `order`'s order: each worker fills its own
        // stretch (no list per worker joined into another, 2 MB each at
        // 20,000 paths), then the results are moved to the declared order
        // in place when they were sorted.
        let mut results: Vec<Result<Option<Stat>, HostError>> = Vec::with_capacity(order.len());
        results.resize_with(order.len(), || Ok(None));
        let failed: Vec<usize> = std::thread::scope(|scope| {
            let workers: Vec<_> = order
                .chunks(chunk)
                .zip(results.chunks_mut(chunk))
                .map(|(part, out)| scope.spawn(move || self.lstat_sorted(declared, part, out)))
                .collect();
            workers
                .into_iter()
                .enumerate()
                .filter_map(|(n, worker)| worker.join().is_err().then_some(n))
                .collect()
        });
        // A worker cannot panic on input; should it, each of its paths is
        // asked again on this thread.
        for n in failed {
            let from = n * chunk;
            for (j, &i) in order.iter().enumerate().skip(from).take(chunk) {
                results[j] = self.lstat(declared[i]);
            }
        }
        if !in_order {
            // `results[j]` belongs at `order[j]`: follow each cycle of the
            // permutation, every swap putting one result in its place.
            for j in 0..results.len() {
                while order[j] != j {
                    let to = order[j];
                    results.swap(j, to);
                    order.swap(j, to);
                }
            }
        }
        results
    }

    /// The entries `indices` of `declared` (sorted, so one parent's run
    /// together), their results into `out` (aligned with `indices`): each
    /// parent walked once, each entry an `fstatat`.
    fn lstat_sorted(
        &self,
        declared: &[&Path],
        indices: &[usize],
        out: &mut [Result<Option<Stat>, HostError>],
    ) {
        let mut open: Option<(&Path, Result<Option<Dir>, HostError>)> = None;
        for (&i, slot) in indices.iter().zip(out.iter_mut()) {
            let path = declared[i];
            let split = paths::check_declared(path)
                .ok()
                .and_then(|()| paths::split_declared(path));
            let Some((parent, name)) = split else {
                // `/`, or a path refused: the plain lookup says why.
                *slot = self.lstat(path);
                continue;
            };
            if open.as_ref().is_none_or(|(p, _)| *p != parent) {
                let dir = match self.dir(parent) {
                    Ok(dir) => Ok(Some(dir)),
                    Err(e) if e.is_missing_parent() => Ok(None),
                    Err(e) => Err(e),
                };
                open = Some((parent, dir));
            }
            *slot = match open.as_ref().map(|(_, d)| d) {
                Some(Ok(Some(dir))) => match self.not_own_folder(path, dir, Some(name)) {
                    Ok(()) => dir.lstat_entry(name),
                    Err(e) => Err(e),
                },
                Some(Ok(None)) => Ok(None),
                // The parent was refused (a link, an unsafe owner): the
                // plain lookup says so, naming this path.
                _ => self.lstat(path),
            };
        }
    }

    /// Forgets the directories opened at or below `declared` (after Datum
    /// removed one, so a later resource creating it again is not handed
    /// the removed directory).
    pub fn forget_dirs_under(&self, declared: &Path) {
        self.dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget_under(declared);
    }

    /// The directory fsyncs this pass owes (see [`durability`]): what a
    /// deferred commit ([`StagedFile::commit_deferred`]) adds to, and what
    /// the state store flushes before it records anything.
    pub fn durability(&self) -> &Durability {
        &self.durability
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

    /// The parsed account files, read on first use (and again after
    /// [`Host::forget_accounts`]).
    pub fn accounts(&self) -> Result<Arc<Accounts>, HostError> {
        let mut slot = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(accounts) = slot.as_ref() {
            return Ok(Arc::clone(accounts));
        }
        let loaded = Arc::new(Accounts::load(self)?);
        *slot = Some(Arc::clone(&loaded));
        Ok(loaded)
    }

    /// Forgets the parsed account files: a provider that just added or
    /// changed a user or group calls this, so that a file owned by that
    /// user, applied later in the same pass, resolves the new name.
    pub fn forget_accounts(&self) {
        *self.accounts.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// A user's number from a name or a decimal number.
    pub fn lookup_user(&self, name_or_number: &str) -> Result<u32, HostError> {
        let accounts = self.accounts()?;
        let db = &accounts.users;
        db.lookup(name_or_number)
            .ok_or_else(|| HostError::UnknownUser {
                name: name_or_number.to_owned(),
                database: db.path.clone(),
            })
    }

    /// A group's number from a name or a decimal number.
    pub fn lookup_group(&self, name_or_number: &str) -> Result<u32, HostError> {
        let accounts = self.accounts()?;
        let db = &accounts.groups;
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

    /// Removes stale staging directories from `dir`, once per pass per
    /// directory: after the first sweep any staging there is our own.
    /// The lock is held while sweeping: files are staged on several
    /// threads, and a sweep running beside another thread's fresh staging
    /// directory in the same folder would remove it. Known by its real
    /// path, which no link is in: a folder a followed link gives two
    /// spellings (`/var/run/app`, `/run/app`) is one folder.
    pub fn sweep_stale_staging(&self, dir: &Dir) -> Result<usize, HostError> {
        let mut swept = self.swept.lock().unwrap_or_else(|p| p.into_inner());
        if swept.contains(dir.path()) {
            return Ok(0);
        }
        let removed = staging::cleanup_stale(dir)?;
        swept.insert(dir.path().to_path_buf());
        Ok(removed)
    }
}

/// What [`Host::read_shown`] found at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    /// Nothing is there.
    Absent,
    /// Not everyone may read it: its bytes were not read.
    Withheld,
    /// Longer than the limit.
    TooLarge,
    Bytes(Vec<u8>),
}

/// 32 bytes from the kernel's random pool (`getrandom(2)`), for secrets such
/// as the host's digest key. Fails rather than returning weaker bytes.
pub fn random_secret() -> std::io::Result<[u8; 32]> {
    let mut bytes = [0u8; 32];
    let mut done = 0;
    while done < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[done..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(bytes)
}

/// A random hex suffix for names that must not collide (staging
/// directories, temporary files in Datum's own folders).
pub(crate) fn random_suffix() -> String {
    let mut bytes = [0u8; 8];
    match rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()) {
        Ok(8) => hex::encode(bytes),
        // No randomness: pid and clock are unique enough for one directory.
        _ => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            format!("{:x}{:x}", std::process::id(), nanos)
        }
    }
}

/// The indices of `declared` in an order where the paths of one parent
/// folder are consecutive (each folder where it first appears, each folder's
/// paths in their declared order), or `None` when the declared order already
/// is (the usual case: nothing to move back afterwards). Linear: a folder is
/// hashed when a run of it starts, not per path.
fn grouped_by_parent(declared: &[&Path]) -> Option<Vec<usize>> {
    fn parent(p: &Path) -> &[u8] {
        use std::os::unix::ffi::OsStrExt as _;
        let bytes = p.as_os_str().as_bytes();
        &bytes[..bytes.iter().rposition(|b| *b == b'/').unwrap_or(0)]
    }
    // Each run's folder, numbered in the order first seen.
    let mut groups: HashMap<&[u8], usize> = HashMap::new();
    let mut group_of_run: Vec<usize> = Vec::new();
    let mut run_starts: Vec<usize> = Vec::new();
    let mut scattered = false;
    let mut last: Option<&[u8]> = None;
    for (i, p) in declared.iter().enumerate() {
        let folder = parent(p);
        if last == Some(folder) {
            continue;
        }
        last = Some(folder);
        let next = groups.len();
        let group = *groups.entry(folder).or_insert(next);
        scattered |= group != next;
        group_of_run.push(group);
        run_starts.push(i);
    }
    if !scattered {
        return None;
    }
    // Every run of a folder after the first joins it: a stable sort of the
    // runs by folder number, then the runs' indices in that order.
    let mut runs: Vec<usize> = (0..run_starts.len()).collect();
    runs.sort_by_key(|&r| group_of_run[r]);
    let mut order = Vec::with_capacity(declared.len());
    for r in runs {
        let end = run_starts.get(r + 1).copied().unwrap_or(declared.len());
        order.extend(run_starts[r]..end);
    }
    Some(order)
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
    fn parent_links_are_refused_unless_the_repository_allows_them() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("x.conf"), "outside canary").unwrap();
        std::fs::create_dir_all(root.path().join("etc/real")).unwrap();
        std::fs::write(root.path().join("etc/real/x.conf"), "inside").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("etc/out")).unwrap();
        std::os::unix::fs::symlink("real", root.path().join("etc/in")).unwrap();
        std::os::unix::fs::symlink("/etc/real", root.path().join("etc/abs")).unwrap();
        let host = Host::new(root.path());

        for declared in ["/etc/out/x.conf", "/etc/in/x.conf"] {
            let err = host.locate(Path::new(declared)).unwrap_err();
            assert!(matches!(err, HostError::ParentLink(_)), "{err}");
            assert!(err.to_string().contains("symbolic link"), "{err}");
            assert!(host.read(Path::new(declared)).is_err());
        }
        // The link itself, and missing parents, are fine.
        assert!(host.locate(Path::new("/etc/out")).is_ok());
        assert!(
            host.try_locate(Path::new("/etc/missing/x.conf"))
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            host.locate(Path::new("/etc/missing/x.conf")),
            Err(HostError::MissingParent { .. })
        ));

        // Allowed links are resolved inside the root, once: an absolute
        // target starts at the root, and one that would leave it cannot.
        let allowed = Host::new(root.path()).with_boundary(Boundary {
            follow_links: ["/etc/in", "/etc/abs", "/etc/out"]
                .map(PathBuf::from)
                .to_vec(),
            owner_transitions: Vec::new(),
        });
        for declared in ["/etc/in/x.conf", "/etc/abs/x.conf"] {
            let bytes = allowed.read(Path::new(declared)).unwrap().unwrap();
            assert_eq!(bytes, b"inside", "{declared}");
        }
        // `/etc/out` points at an absolute path outside: inside the root
        // that path does not exist.
        assert_eq!(allowed.read(Path::new("/etc/out/x.conf")).unwrap(), None);
    }

    /// What output may show of a host file: only what everyone may read
    /// (the read bit for others, every folder on its real way searchable
    /// by others; the root itself is the operator's and not looked at).
    #[test]
    fn readable_by_everyone_needs_the_bit_and_searchable_folders() {
        use std::os::unix::fs::PermissionsExt as _;
        let root = tempfile::tempdir().unwrap();
        let mode = |rel: &str, m: u32| {
            std::fs::set_permissions(root.path().join(rel), std::fs::Permissions::from_mode(m))
                .unwrap();
        };
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        for dir in ["etc", "vault", "etc/open"] {
            std::fs::create_dir(root.path().join(dir)).unwrap();
            mode(dir, 0o755);
        }
        mode("vault", 0o700);
        for (file, m) in [
            ("etc/motd", 0o644),
            ("etc/shadow", 0o640),
            ("vault/key", 0o644),
            ("etc/open/x", 0o604),
        ] {
            std::fs::write(root.path().join(file), "x").unwrap();
            mode(file, m);
        }
        std::os::unix::fs::symlink("/vault", root.path().join("etc/linked")).unwrap();
        let host = Host::new(root.path()).with_boundary(Boundary {
            follow_links: vec![PathBuf::from("/etc/linked")],
            owner_transitions: Vec::new(),
        });
        let readable = |p: &str| host.readable_by_everyone(Path::new(p)).unwrap();
        // Reading to show goes by the same rule, decided on the file read.
        let shown = |p: &str| host.read_shown(Path::new(p), 1).unwrap();
        assert_eq!(shown("/etc/motd"), Shown::Bytes(b"x".to_vec()));
        assert_eq!(shown("/etc/shadow"), Shown::Withheld);
        assert_eq!(shown("/vault/key"), Shown::Withheld);
        assert_eq!(shown("/etc/missing"), Shown::Absent);
        assert_eq!(
            host.read_shown(Path::new("/etc/motd"), 0).unwrap(),
            Shown::TooLarge
        );
        assert!(readable("/etc/motd"));
        assert!(readable("/etc/open/x"));
        assert!(readable("/etc/missing"));
        assert!(!readable("/etc/shadow"));
        assert!(!readable("/vault/key"));
        // Through a link the repository allows: the target's folders count.
        assert!(!readable("/etc/linked/key"));
        mode("vault", 0o711);
        let host = Host::new(root.path()).with_boundary(host.boundary().clone());
        assert!(host.readable_by_everyone(Path::new("/vault/key")).unwrap());
        assert!(
            host.readable_by_everyone(Path::new("/etc/linked/key"))
                .unwrap()
        );
        // A link in the way that the repository does not allow: an error.
        assert!(
            Host::new(root.path())
                .readable_by_everyone(Path::new("/etc/linked/key"))
                .is_err()
        );
    }

    #[test]
    fn a_relative_link_target_is_resolved_where_the_link_is() {
        // /a -> deep/x, and in there b -> ../y: the kernel reads /a/b/f as
        // /deep/y/f (b sits in /deep/x), so the walk must too, not /y/f (as
        // if b sat where /a is spelled).
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("deep/x")).unwrap();
        std::fs::create_dir_all(root.path().join("deep/y")).unwrap();
        std::fs::create_dir_all(root.path().join("y")).unwrap();
        std::fs::write(root.path().join("deep/y/f"), "where the kernel goes").unwrap();
        std::fs::write(root.path().join("y/f"), "elsewhere").unwrap();
        std::os::unix::fs::symlink("deep/x", root.path().join("a")).unwrap();
        std::os::unix::fs::symlink("../y", root.path().join("deep/x/b")).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.path().join("a/b/f")).unwrap(),
            "where the kernel goes"
        );
        let host = Host::new(root.path()).with_boundary(Boundary {
            follow_links: ["/a", "/a/b"].map(PathBuf::from).to_vec(),
            owner_transitions: Vec::new(),
        });
        let bytes = host.read(Path::new("/a/b/f")).unwrap().unwrap();
        assert_eq!(String::from_utf8(bytes).unwrap(), "where the kernel goes");
    }

    #[test]
    fn a_loop_of_followed_links_names_the_link_and_the_setting() {
        // /a -> /b and /b -> a: the kernel's words alone ('Too many levels
        // of symbolic links') named neither link nor why they are followed.
        let root = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/b", root.path().join("a")).unwrap();
        std::os::unix::fs::symlink("a", root.path().join("b")).unwrap();
        let host = Host::new(root.path()).with_boundary(Boundary {
            follow_links: ["/a", "/b"].map(PathBuf::from).to_vec(),
            owner_transitions: Vec::new(),
        });
        let err = host.locate(Path::new("/a/conf")).unwrap_err().to_string();
        assert!(
            err.contains(&*root.path().join("a/conf").to_string_lossy()),
            "{err}"
        );
        assert!(err.contains("/b -> a") || err.contains("/a -> /b"), "{err}");
        assert!(err.contains("boundary.follow_links"), "{err}");
    }

    #[test]
    fn a_relative_link_target_below_a_followed_link_is_resolved_where_it_is() {
        // /a -> deep/x, a real folder c in there, and in it b -> ../../y:
        // the kernel reads /a/c/b/f as /deep/x/c/../../y/f = /deep/y/f, so
        // the walk must too, not /y/f (as if c sat where /a/c is spelled).
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("deep/x/c")).unwrap();
        std::fs::create_dir_all(root.path().join("deep/y")).unwrap();
        std::fs::create_dir_all(root.path().join("y")).unwrap();
        std::fs::write(root.path().join("deep/y/f"), "where the kernel goes").unwrap();
        std::fs::write(root.path().join("y/f"), "elsewhere").unwrap();
        std::os::unix::fs::symlink("deep/x", root.path().join("a")).unwrap();
        std::os::unix::fs::symlink("../../y", root.path().join("deep/x/c/b")).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.path().join("a/c/b/f")).unwrap(),
            "where the kernel goes"
        );
        let host = Host::new(root.path()).with_boundary(Boundary {
            follow_links: ["/a", "/a/c/b"].map(PathBuf::from).to_vec(),
            owner_transitions: Vec::new(),
        });
        let bytes = host.read(Path::new("/a/c/b/f")).unwrap().unwrap();
        assert_eq!(String::from_utf8(bytes).unwrap(), "where the kernel goes");
        // Written there too, and what is located below the link says where.
        let at = host.locate(Path::new("/a/c/b/g")).unwrap();
        assert_eq!(at.path(), root.path().join("deep/y/g"));
    }

    #[test]
    fn a_swapped_parent_cannot_redirect_a_located_entry() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        let host = Host::new(root.path());
        let at = host.locate(Path::new("/d/f")).unwrap();
        std::fs::rename(root.path().join("d"), root.path().join("gone")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("d")).unwrap();
        at.create_dir(0o755, None, None).unwrap();
        assert!(root.path().join("gone/f").is_dir());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        // A new pass walks again and refuses the link.
        assert!(Host::new(root.path()).locate(Path::new("/d/f")).is_err());
    }

    #[test]
    fn an_unsafe_ownership_transition_is_refused() {
        if rustix::process::geteuid().as_raw() != 0 {
            println!("skipped: needs root to chown");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let user_dir = root.path().join("srv/app");
        std::fs::create_dir_all(user_dir.join("conf")).unwrap();
        // /srv/app belongs to an unprivileged user, conf to root.
        std::os::unix::fs::chown(&user_dir, Some(65534), Some(65534)).unwrap();
        let host = Host::new(root.path());
        let err = host.locate(Path::new("/srv/app/conf/x")).unwrap_err();
        assert!(
            matches!(&err, HostError::UnsafeTransition(t) if t.from_uid == 65534 && t.into_uid == 0),
            "{err}"
        );
        // The user's own files below their own folder are fine.
        assert!(host.locate(Path::new("/srv/app/x")).is_ok());
        // Root into anything is fine, and an allowed path is allowed.
        let allowed = Host::new(root.path()).with_boundary(Boundary {
            follow_links: Vec::new(),
            owner_transitions: vec![PathBuf::from("/srv/app/conf")],
        });
        assert!(allowed.locate(Path::new("/srv/app/conf/x")).is_ok());
    }

    #[test]
    fn an_allowed_link_an_unprivileged_user_controls_leads_only_into_their_own() {
        if rustix::process::geteuid().as_raw() != 0 {
            println!("skipped: needs root to chown");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let app = root.path().join("srv/app");
        std::fs::create_dir_all(app.join("releases/1")).unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::create_dir_all(root.path().join("opt/shared")).unwrap();
        std::os::unix::fs::chown(&app, Some(65534), Some(65534)).unwrap();
        std::os::unix::fs::chown(app.join("releases"), Some(65534), Some(65534)).unwrap();
        std::os::unix::fs::chown(app.join("releases/1"), Some(65534), Some(65534)).unwrap();
        // The deploy pattern: /srv/app/current -> releases/1, all the user's.
        std::os::unix::fs::symlink("releases/1", app.join("current")).unwrap();
        // A root-owned link in a sticky world-writable folder that the user
        // made their own: the link's owner can change it (as /tmp allows).
        let tmp = root.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
            .unwrap();
        std::os::unix::fs::symlink("/etc", tmp.join("link")).unwrap();
        std::os::unix::fs::lchown(tmp.join("link"), Some(65534), Some(65534)).unwrap();
        // A link root keeps, in root's folder, may lead anywhere.
        std::os::unix::fs::symlink("/etc", root.path().join("opt/conf")).unwrap();
        let boundary = Boundary {
            follow_links: ["/srv/app/current", "/tmp/link", "/opt/conf"]
                .map(PathBuf::from)
                .to_vec(),
            owner_transitions: Vec::new(),
        };
        let host = Host::new(root.path()).with_boundary(boundary.clone());
        assert!(host.locate(Path::new("/srv/app/current/app.conf")).is_ok());
        assert!(host.locate(Path::new("/opt/conf/x")).is_ok());
        // The user points their link at a folder of root's: the walk would
        // write where they chose.
        std::fs::remove_file(app.join("current")).unwrap();
        std::os::unix::fs::symlink("/etc", app.join("current")).unwrap();
        let host = Host::new(root.path()).with_boundary(boundary.clone());
        for declared in ["/srv/app/current/app.conf", "/tmp/link/x"] {
            let err = host.locate(Path::new(declared)).unwrap_err();
            assert!(
                matches!(&err, HostError::UnsafeLink(t) if t.from_uid == 65534 && t.into_uid == 0),
                "{declared}: {err}"
            );
            assert!(err.is_boundary());
            assert!(host.read(Path::new(declared)).is_err());
        }
        // Trusted by name, the user may.
        let trusted = Host::new(root.path()).with_boundary(Boundary {
            owner_transitions: vec![PathBuf::from("/srv/app/current")],
            ..boundary
        });
        assert!(
            trusted
                .locate(Path::new("/srv/app/current/app.conf"))
                .is_ok()
        );
    }

    #[test]
    fn an_allowed_link_two_users_control_leads_only_into_what_both_own() {
        // A folder of uid 65534 others may write to (sticky, as a shared
        // drop folder is), and in it a link of uid 65533 to a folder of
        // 65534's: the link's owner chose where it leads, into a folder
        // that is not theirs.
        if rustix::process::geteuid().as_raw() != 0 {
            println!("skipped: needs root to chown");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let shared = root.path().join("srv/shared");
        std::fs::create_dir_all(shared.join("own")).unwrap();
        std::fs::set_permissions(
            &shared,
            std::os::unix::fs::PermissionsExt::from_mode(0o1777),
        )
        .unwrap();
        std::os::unix::fs::chown(&shared, Some(65534), Some(65534)).unwrap();
        std::os::unix::fs::chown(shared.join("own"), Some(65534), Some(65534)).unwrap();
        std::os::unix::fs::symlink("own", shared.join("link")).unwrap();
        std::os::unix::fs::lchown(shared.join("link"), Some(65533), Some(65533)).unwrap();
        let boundary = Boundary {
            follow_links: vec![PathBuf::from("/srv/shared/link")],
            owner_transitions: Vec::new(),
        };
        let host = Host::new(root.path()).with_boundary(boundary.clone());
        let err = host.locate(Path::new("/srv/shared/link/x")).unwrap_err();
        assert!(
            matches!(&err, HostError::UnsafeLink(t) if t.from_uid == 65533 && t.into_uid == 65534),
            "{err}"
        );
        // The folder's owner's own link there leads into their own.
        std::os::unix::fs::lchown(shared.join("link"), Some(65534), Some(65534)).unwrap();
        let host = Host::new(root.path()).with_boundary(boundary);
        assert!(host.locate(Path::new("/srv/shared/link/x")).is_ok());
    }

    #[test]
    fn the_link_whose_owner_is_checked_is_the_link_whose_target_is_followed() {
        // A root-owned link in a folder others may write to (no sticky bit)
        // is swapped, between the walk's fstat and its readlink, for a link
        // of uid 65534 pointing at /etc: the owner must be the one of the
        // link whose target is read, or the user's /etc is followed as
        // root's.
        if rustix::process::geteuid().as_raw() != 0 {
            println!("skipped: needs root to chown");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let srv = root.path().join("srv");
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::create_dir_all(root.path().join("opt/ok")).unwrap();
        std::fs::create_dir(&srv).unwrap();
        std::fs::set_permissions(&srv, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        std::os::unix::fs::symlink("/opt/ok", srv.join("current")).unwrap();
        std::os::unix::fs::symlink("/etc", srv.join("evil")).unwrap();
        std::os::unix::fs::lchown(srv.join("evil"), Some(65534), Some(65534)).unwrap();
        let boundary = Boundary {
            follow_links: vec![PathBuf::from("/srv/current")],
            owner_transitions: Vec::new(),
        };
        let stop = std::sync::atomic::AtomicBool::new(false);
        let escaped = std::thread::scope(|scope| {
            let swapper = scope.spawn(|| {
                let dir = rustix::fs::open(
                    &srv,
                    rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
                    rustix::fs::Mode::empty(),
                )
                .unwrap();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    rustix::fs::renameat_with(
                        &dir,
                        "current",
                        &dir,
                        "evil",
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                }
            });
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
            let mut escaped = 0;
            while std::time::Instant::now() < deadline {
                let host = Host::new(root.path()).with_boundary(boundary.clone());
                if let Ok(at) = host.locate(Path::new("/srv/current/x"))
                    && at.path().starts_with(root.path().join("etc"))
                {
                    escaped += 1;
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            swapper.join().unwrap();
            escaped
        });
        assert_eq!(escaped, 0, "the user's link was followed as root's");
    }

    #[test]
    fn lstat_many_agrees_with_lstat() {
        let root = tempfile::tempdir().unwrap();
        let d = root.path();
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join("a/f"), b"abc").unwrap();
        std::os::unix::fs::symlink("f", d.join("a/l")).unwrap();
        std::os::unix::fs::symlink("a/b", d.join("via")).unwrap();
        let mut declared: Vec<PathBuf> = [
            "/a/f",
            "/a/l",
            "/a/b",
            "/a/missing",
            "/nowhere/missing",
            "/a/f/under-a-file",
        ]
        .map(PathBuf::from)
        .to_vec();
        for i in 0..1500 {
            std::fs::write(d.join(format!("a/b/n{i}")), i.to_string()).unwrap();
            declared.push(PathBuf::from(format!("/a/b/n{i}")));
        }
        let host = Host::new(root.path());
        let refs: Vec<&Path> = declared.iter().map(PathBuf::as_path).collect();
        // Also sorted by parent (grouped, as lstat_many needs them, and
        // then does not scatter): each answer must stay with its path.
        let mut grouped = refs.clone();
        grouped.sort_by_key(|p| {
            use std::os::unix::ffi::OsStrExt as _;
            let parent = p.parent().map(|q| q.as_os_str().as_bytes().to_vec());
            (parent, p.file_name().map(|n| n.as_bytes().to_vec()))
        });
        assert_ne!(grouped, refs, "the declared order is not sorted");
        // And scattered (each result is moved to its place along the
        // permutation's cycles, here long ones).
        let scattered: Vec<&Path> = (0..refs.len())
            .map(|i| refs[(i * 7 + 3) % refs.len()])
            .collect();
        assert_eq!(refs.len() % 7, 1, "the stride visits every path once");
        assert!(grouped_by_parent(&scattered).is_some());
        for order in [&refs, &grouped, &scattered] {
            for threads in [1, 3] {
                let many = host.lstat_many(order, threads);
                assert_eq!(many.len(), order.len());
                for (p, got) in order.iter().zip(&many) {
                    assert_eq!(
                        got.as_ref().unwrap(),
                        &host.lstat(p).unwrap(),
                        "{}",
                        p.display()
                    );
                }
            }
        }
        let many = host.lstat_many(&refs, 2);
        assert_eq!(
            many[1].as_ref().unwrap().as_ref().unwrap().kind,
            FileKind::Symlink
        );
        assert!(many[3].as_ref().unwrap().is_none());
        assert!(many[5].as_ref().unwrap().is_none());
        // Through a parent link: an error, not an answer.
        assert!(host.lstat(Path::new("/via/n1")).is_err());
    }

    #[test]
    fn paths_are_grouped_by_folder_only_when_they_are_not_already() {
        let paths = |list: &[&'static str]| -> Vec<&'static Path> {
            list.iter().map(|p| Path::new(*p)).collect()
        };
        // A walk's order, folder by folder but not in byte order (`-` sorts
        // before `/`): already grouped, nothing to move.
        let walked = paths(&["/a/x", "/a/y", "/a/x/z", "/a-2/y", "/b", "/c"]);
        assert_eq!(grouped_by_parent(&walked), None);
        // Scattered: each folder's paths together, where the folder first
        // appears, in their declared order.
        let scattered = paths(&["/a/x", "/b/1", "/a/y", "/c", "/b/2", "/a/z", "/d"]);
        let order = grouped_by_parent(&scattered).expect("scattered");
        let folders: Vec<&Path> = order
            .iter()
            .map(|&i| scattered[i].parent().unwrap())
            .collect();
        assert_eq!(
            folders,
            paths(&["/a", "/a", "/a", "/b", "/b", "/", "/"]),
            "{order:?}"
        );
        assert_eq!(order, vec![0, 2, 5, 1, 4, 3, 6]);
        assert_eq!(grouped_by_parent(&[]), None);
    }

    #[test]
    fn stale_staging_is_swept_once_per_pass() {
        let root = tempfile::tempdir().unwrap();
        let host = Host::new(root.path());
        assert!(!host.name().is_empty());
        std::fs::create_dir(root.path().join(".datum.stage.x")).unwrap();
        let dir = host.root_dir().unwrap();
        assert_eq!(host.sweep_stale_staging(&dir).unwrap(), 1);
        std::fs::create_dir(root.path().join(".datum.stage.y")).unwrap();
        assert_eq!(host.sweep_stale_staging(&dir).unwrap(), 0);
    }

    #[test]
    fn a_folder_two_spellings_reach_is_swept_once() {
        // /var/run -> /run, followed: /var/run/app and /run/app are one
        // folder, and the pass's own staging made there after the first
        // sweep (by either spelling) must not be swept away by the other.
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("run/app")).unwrap();
        std::fs::create_dir_all(root.path().join("var")).unwrap();
        std::os::unix::fs::symlink("/run", root.path().join("var/run")).unwrap();
        let host = Host::new(root.path()).with_boundary(Boundary {
            follow_links: vec![PathBuf::from("/var/run")],
            owner_transitions: Vec::new(),
        });
        for (first, second) in [("/var/run", "/run"), ("/var/run/app", "/run/app")] {
            let folder = root.path().join(first.trim_start_matches("/var/"));
            std::fs::create_dir(folder.join(".datum.stage.old")).unwrap();
            let dir = host.dir(Path::new(first)).unwrap();
            assert_eq!(host.sweep_stale_staging(&dir).unwrap(), 1, "{first}");
            std::fs::create_dir(folder.join(".datum.stage.ours")).unwrap();
            let dir = host.dir(Path::new(second)).unwrap();
            assert_eq!(host.sweep_stale_staging(&dir).unwrap(), 0, "{second}");
            assert!(folder.join(".datum.stage.ours").exists(), "{second}");
        }
    }
}
