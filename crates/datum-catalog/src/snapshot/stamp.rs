//! The [`Stamp`] of a repository folder and the [`RepoKey`] a snapshot is
//! keyed by: what "unchanged" means (see the module documentation of
//! [`crate::snapshot`]).

use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use crate::hashes::{FileKey, now_ns};

/// Every folder under a repository root, in path order, with its key and a
/// digest of its entries' names and keys.
///
/// A folder's entries are summed up, not listed: a repository of 200,000
/// files costs its folders (about 150 bytes each), not 60 bytes a file,
/// whether taken, saved or loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    root: PathBuf,
    /// When the stamp was taken (nanoseconds since the epoch).
    pub(super) taken_ns: i64,
    /// [`Stamp::digest`], computed once when the stamp is taken.
    digest: String,
    pub(super) dirs: Vec<StampedDir>,
}

/// One directory (relative to the root; empty for the root itself), its key
/// and what its entries were when the stamp was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct StampedDir {
    #[serde(with = "serde_bytes")]
    pub(super) path: Vec<u8>,
    key: FileKey,
    pub(super) entries: DirEntries,
}

/// A folder's entries summed up: how many are not folders, a digest of every
/// entry's name (a folder's too) and every other entry's key, in name order,
/// and the entry changed last (what the racy rule looks at).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct DirEntries {
    pub(super) count: usize,
    #[serde(with = "serde_bytes")]
    digest: [u8; 32],
    pub(super) newest: Option<(Vec<u8>, FileKey)>,
}

/// Reads the folder `rel` below `root`: its key, its entries summed up, and
/// the folders in it (relative to `root`; `.git` at the root is skipped).
fn read_stamped_dir(
    root: &Path,
    rel: &[u8],
) -> std::io::Result<(FileKey, DirEntries, Vec<Vec<u8>>)> {
    use sha2::Digest as _;
    let open = datum_host::repo::Folder::open(&join(root, rel))?;
    let key = FileKey::from(open.key()?);
    // Names in one buffer, each entry a span of it and its key (none for a
    // folder): a few allocations a folder, none an entry.
    let mut names: Vec<u8> = Vec::new();
    let mut entries: Vec<((usize, usize), Option<FileKey>)> = Vec::new();
    open.each_entry(|name, entry| {
        let is_dir = entry.kind == datum_host::repo::EntryKind::Folder;
        if is_dir && rel.is_empty() && name == b".git" {
            return;
        }
        let key = (!is_dir).then(|| FileKey::from(entry.key));
        entries.push(((names.len(), name.len()), key));
        names.extend_from_slice(name);
    })?;
    let name_of = |(at, len): (usize, usize)| names.get(at..at + len).unwrap_or_default();
    entries.sort_unstable_by(|a, b| name_of(a.0).cmp(name_of(b.0)));
    let mut hasher = sha2::Sha256::new();
    let mut count = 0;
    let mut newest: Option<(&[u8], FileKey)> = None;
    let mut dirs = Vec::new();
    for &(span, key) in &entries {
        let name = name_of(span);
        // A name never holds a NUL: it ends each one.
        hasher.update(name);
        hasher.update([0]);
        match key {
            Some(key) => {
                count += 1;
                for n in [
                    key.size,
                    key.mtime_ns as u64,
                    key.ctime_ns as u64,
                    key.inode,
                    key.device,
                ] {
                    hasher.update(n.to_le_bytes());
                }
                let time = |k: &FileKey| k.ctime_ns.max(k.mtime_ns);
                if newest.is_none_or(|(_, n)| time(&key) > time(&n)) {
                    newest = Some((name, key));
                }
            }
            None => {
                hasher.update(b"/");
                let mut child = rel.to_vec();
                if !child.is_empty() {
                    child.push(b'/');
                }
                child.extend_from_slice(name);
                dirs.push(child);
            }
        }
    }
    let entries = DirEntries {
        count,
        digest: hasher.finalize().into(),
        newest: newest.map(|(name, key)| (name.to_vec(), key)),
    };
    Ok((key, entries, dirs))
}

/// 16 hex digits of SHA-256 over `value`'s MessagePack encoding, fed to the
/// hasher as it is encoded (a large value's encoding is never held).
fn short_digest(value: &impl Serialize) -> String {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    // Writing to a hasher cannot fail; a value that cannot be encoded
    // (none here) digests what was written of it.
    let _ = rmp_serde::encode::write(&mut hasher, value);
    hex::encode(&hasher.finalize()[..8])
}

impl Stamp {
    /// Walks `root` (links are recorded, never followed; `.git` is skipped).
    pub fn take(root: &Path) -> std::io::Result<Stamp> {
        Self::take_since(root, now_ns())
    }

    /// [`Stamp::take`] for a stamp that counts from `taken_ns` (nanoseconds
    /// since the epoch), a moment before the walk: an entry changed after it
    /// is racy, so the stamp can be walked while the compile reads.
    fn take_since(root: &Path, taken_ns: i64) -> std::io::Result<Stamp> {
        // The repository's own folder, not a link to it: below it, links
        // are entries like any other.
        let root = &datum_host::repo::canonicalize(root)?;
        let mut dirs = Vec::new();
        let mut pending: Vec<Vec<u8>> = vec![Vec::new()];
        while let Some(rel) = pending.pop() {
            let (key, entries, children) = read_stamped_dir(root, &rel)?;
            pending.extend(children);
            dirs.push(StampedDir {
                path: rel,
                key,
                entries,
            });
        }
        dirs.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Stamp {
            digest: short_digest(&(root, &dirs)),
            root: root.to_owned(),
            taken_ns,
            dirs,
        })
    }

    /// How many entries (directories included) the stamp covers.
    pub fn len(&self) -> usize {
        self.dirs.iter().map(|d| 1 + d.entries.count).sum()
    }

    /// 16 hex digits of SHA-256 over what the stamp records of the
    /// repository (every folder and entry, with its identity and times; not
    /// when the stamp was taken): equal for two stamps of an unchanged
    /// repository.
    pub fn digest(&self) -> String {
        self.digest.clone()
    }

    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// The first entry that changed within the racy window before the stamp
    /// was taken, if any.
    pub(super) fn racy_entry(&self) -> Option<PathBuf> {
        for dir in &self.dirs {
            if dir.key.is_racy(self.taken_ns) {
                return Some(join(&self.root, &dir.path));
            }
            // The entry changed last is racy if any is.
            if let Some((name, key)) = &dir.entries.newest
                && key.is_racy(self.taken_ns)
            {
                return Some(join(&join(&self.root, &dir.path), name));
            }
        }
        None
    }

    /// Whether every entry still has its key (so nothing was added, removed
    /// or changed). Directories are read again in parallel, each entry with
    /// one `lstat` relative to its open directory.
    pub fn still_holds(&self) -> bool {
        let changed = AtomicBool::new(false);
        let next = AtomicUsize::new(0);
        let threads = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, 8)
            .min(self.dirs.len().max(1));
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    while !changed.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(dir) = self.dirs.get(i) else { break };
                        if !dir_holds(&self.root, dir) {
                            changed.store(true, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        !changed.load(Ordering::Relaxed)
    }
}

/// A checkout of one revision, vouched for by its deployer as unchanged
/// since it was written (see the module documentation for who may vouch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    /// The checkout's own folder (canonical).
    root: PathBuf,
    /// The commit it was written from, and that commit's tree.
    commit: String,
    tree: String,
}

impl Revision {
    /// The checkout at `folder` (a link to it is resolved) of `commit`,
    /// whose tree is `tree`.
    pub fn new(folder: &Path, commit: &str, tree: &str) -> std::io::Result<Revision> {
        Ok(Revision {
            root: datum_host::repo::canonicalize(folder)?,
            commit: commit.to_owned(),
            tree: tree.to_owned(),
        })
    }
}

/// What a snapshot's repository was, for telling whether it is the same now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RepoKey {
    /// An ordinary folder: every entry's key ([`Stamp::still_holds`]).
    Stamp(Stamp),
    /// An immutable checkout: the same exactly when the caller vouches for
    /// the same revision at the same folder (no entry is looked at).
    Revision(Revision),
}

/// A [`RepoKey`] whose moment is fixed and whose walk is still to do
/// ([`RepoKey::start`]).
#[derive(Debug)]
pub struct StartedKey {
    repo: PathBuf,
    revision: Option<Revision>,
    pub(super) taken_ns: i64,
}

impl StartedKey {
    /// Walks the repository (nothing for a revision). May run on another
    /// thread while the compile reads the repository.
    pub fn walk(self) -> std::io::Result<RepoKey> {
        match self.revision {
            Some(r) => Ok(RepoKey::Revision(r)),
            None => Stamp::take_since(&self.repo, self.taken_ns).map(RepoKey::Stamp),
        }
    }
}

impl RepoKey {
    /// The key of the repository at `repo` (`revision` when the caller
    /// vouches for one, else a [`Stamp`] of every entry), in two steps: the
    /// moment the key counts from now, the walk when [`StartedKey::walk`] is
    /// called. Start it before the
    /// compile reads anything; the walk may then run beside the compile: an
    /// entry changed after the start is racy whenever the walk sees it (its
    /// ctime is later than the start, and no one can set a ctime), so such a
    /// stamp is never saved, and one changed after the walk saw it leaves the
    /// stamp stale. Either way the next run compiles again.
    pub fn start(repo: &Path, revision: Option<Revision>) -> StartedKey {
        StartedKey {
            repo: repo.to_owned(),
            revision,
            taken_ns: now_ns(),
        }
    }

    /// The repository's folder (canonical).
    pub(super) fn root(&self) -> &Path {
        match self {
            RepoKey::Stamp(s) => &s.root,
            RepoKey::Revision(r) => &r.root,
        }
    }

    /// 16 hex digits naming what the catalogue was compiled from: the
    /// [`Stamp::digest`], or for a revision the same hash over its folder,
    /// commit and tree (equal while the same checkout is deployed).
    pub fn digest(&self) -> String {
        match self {
            RepoKey::Stamp(s) => s.digest(),
            RepoKey::Revision(r) => short_digest(r),
        }
    }

    /// What a fleet report names as the revision compiled: `git:<commit>`
    /// for a revision (the same on every host that deployed it), else
    /// `stamp:<digest>`.
    pub fn label(&self) -> String {
        match self {
            RepoKey::Revision(r) => format!("git:{}", r.commit),
            RepoKey::Stamp(s) => format!("stamp:{}", s.digest()),
        }
    }

    /// The entry changed too recently to be trusted, if any (never for a
    /// revision: nothing changes it).
    pub(super) fn racy_entry(&self) -> Option<PathBuf> {
        match self {
            RepoKey::Stamp(s) => s.racy_entry(),
            RepoKey::Revision(_) => None,
        }
    }
}

/// One directory of a stamp: its own key and its entries, read again.
fn dir_holds(root: &Path, dir: &StampedDir) -> bool {
    matches!(read_stamped_dir(root, &dir.path),
        Ok((key, entries, _)) if key == dir.key && entries == dir.entries)
}

fn join(root: &Path, rel: &[u8]) -> PathBuf {
    if rel.is_empty() {
        root.to_owned()
    } else {
        root.join(std::ffi::OsStr::from_bytes(rel))
    }
}
