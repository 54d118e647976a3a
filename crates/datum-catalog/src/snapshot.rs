//! The compiled catalogue, remembered between runs for an unchanged
//! repository, so that `datum check` on a quiet host does not parse and
//! compile 20,000 YAML documents to learn what it already knew.
//!
//! This module owns the [`Stamp`] (what "unchanged" means) and the snapshot
//! file: a header (format, program build, host identity, stamp) and the
//! catalogue with the classes of `datum.yaml`. It must not decide where the
//! file lives (the CLI does: next to the state store) and must not hold a
//! secret: a snapshot is refused for a catalogue in which a sensitive
//! resource carries rendered bytes (inline or template content), a value
//! sensitive by its kind's nature (a User's password hash), or, when it
//! says `sensitive: true` itself, any declared value but its path and its
//! content's (a File's mode, a User's uid: plan, check and `datum
//! catalogue` mask them all), and a sensitive resource's content is never
//! written (its checksum and the path of its repository file are).
//!
//! What "unchanged" means: every directory, file and link under the
//! repository root (`.git` aside, which the compiler never reads) has the
//! same size, mtime, ctime, inode and device as when the stamp was taken,
//! and nothing was added or removed. The stamp lists directories too: a
//! directory's mtime and ctime move whenever an entry is created, removed or
//! renamed in it. A stamp keeps, per directory, its key, how many entries it
//! has and a digest of their names and keys (not each entry's key: a
//! repository of 200,000 files took 18.5 MB that way, now ~0.3 MB); checking
//! it reads each directory again (one `readdir` and one `lstat` per entry,
//! relative to the open directory) and compares. Why the key can be
//! trusted, and the "racy clean" window of coarse timestamps, are explained
//! in [`crate::hashes`]: a stamp with an entry changed within
//! [`crate::hashes::RACY_WINDOW_NS`] of its taking is not saved. The stamp's
//! moment is fixed *before* the compile reads anything and its walk may run
//! beside the compile ([`RepoKey::start`]): an edit made during the compile
//! is either seen by the walk (and, later than the stamp's moment, racy: the
//! stamp is not saved) or not (the saved stamp is stale), and either way the
//! next run compiles again. The program's own executable (its key) and the
//! host identity are part of the header: a new build or new labels compile
//! again. The compiler reads
//! nothing outside the repository (sources and templates that resolve
//! outside it are refused), and the host identity is its only other input.
//! A snapshot decides what a pass writes, so it is trusted only when owned by
//! the user reading it and writable by nobody else.
//!
//! A checkout of a revision that nothing changes once it is written (the
//! folder `datum pull` writes for a commit) needs no stamp: its content is
//! the commit's tree, so the commit names it. For such a folder the caller
//! passes a [`Revision`] and the snapshot is keyed by it ([`RepoKey`])
//! instead of a stamp: loading it then costs no `lstat` of any repository
//! entry, and another commit (or no revision: the folder is no longer
//! vouched for) compiles again. This crate cannot tell such a checkout
//! from a folder someone edits (it knows nothing of `datum pull`, and must
//! not: that would pull git and the state store into the compiler's
//! dependencies), so the caller vouches for it; the binary does so only
//! for a checkout `datum_pull::immutable_checkout` accepts (written by
//! `datum pull` into Datum's private folder, owned by the user running
//! Datum and writable by nobody else, named by the commit its marker
//! records). The price, said plainly: a hand edit of such a checkout (by
//! root, or by that user) is not seen until the next pull, a new build, new
//! host labels or `--recompile`, exactly as a hand edit of the snapshot
//! itself would not be; a `source:` file's bytes are still verified against
//! their SHA-256 before anything is written.

use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use datum_core::{Resource, ResourceId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalogue::Catalogue;
use crate::hashes::{FileKey, now_ns};
use crate::host::HostIdentity;
use crate::summaries::WrittenSummaries;
pub use crate::summaries::{Summaries, Summary};

/// First bytes of a snapshot file; a file without them (or of another
/// format) is ignored and replaced. v3: a Tree's packed content is
/// `datum-tree3` (the repository folder once, not a path per file). v4: the
/// stamp packs each folder's names and keys, and carries its digest. v5: the
/// stamp keeps a digest of each folder's entries instead of their keys. v6:
/// a Tree's packed content is `datum-tree4` (its entries in tree order). v7:
/// `datum-tree5` (no payload length where the kind fixes it). v8: the
/// index's length (8 bytes, little-endian) before the index, which is then
/// read at once and decoded from memory, and every part of a summary
/// written (`nil` for an absent one: [`crate::summaries`]). v9: a checksum
/// of the index (8 bytes after its length) and of each record (in its
/// span), checked as they are read ([`checksum`]).
const MAGIC: &[u8] = b"datum catalogue snapshot v9\n";

/// Why a snapshot was not written (none of these is an error: the next run
/// compiles again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotSaved {
    /// An entry of the repository changed too recently to be trusted.
    Racy(PathBuf),
    /// A sensitive resource carries rendered bytes, which must not be stored.
    Sensitive(String),
}

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
    taken_ns: i64,
    /// [`Stamp::digest`], computed once when the stamp is taken.
    digest: String,
    dirs: Vec<StampedDir>,
}

/// One directory (relative to the root; empty for the root itself), its key
/// and what its entries were when the stamp was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StampedDir {
    #[serde(with = "serde_bytes")]
    path: Vec<u8>,
    key: FileKey,
    entries: DirEntries,
}

/// A folder's entries summed up: how many are not folders, a digest of every
/// entry's name (a folder's too) and every other entry's key, in name order,
/// and the entry changed last (what the racy rule looks at).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct DirEntries {
    count: usize,
    #[serde(with = "serde_bytes")]
    digest: [u8; 32],
    newest: Option<(Vec<u8>, FileKey)>,
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
    fn racy_entry(&self) -> Option<PathBuf> {
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
    taken_ns: i64,
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
    fn root(&self) -> &Path {
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
    fn racy_entry(&self) -> Option<PathBuf> {
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

/// The header: everything that must match before the catalogue is trusted.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    version: String,
    /// The key of the executable that wrote the snapshot.
    program: Option<FileKey>,
    host: HostIdentity,
    key: RepoKey,
}

/// The second part of a snapshot: the summaries, and where each resource's
/// own record starts and ends after it.
#[derive(Debug, Deserialize)]
struct Index {
    host: HostIdentity,
    classes: Value,
    boundary: datum_core::Boundary,
    #[serde(deserialize_with = "sized_vec")]
    autorequires: Vec<(ResourceId, ResourceId)>,
    entries: Summaries,
    /// Offset (from the start of the records), length and [`checksum`] of
    /// each record.
    #[serde(deserialize_with = "sized_vec")]
    spans: Vec<(u64, u32, u64)>,
}

/// [`Index`] as written: the same fields in the same order (the compact
/// form writes a struct as an array of its fields), borrowed.
#[derive(Serialize)]
struct IndexRef<'a> {
    host: &'a HostIdentity,
    classes: &'a Value,
    boundary: &'a datum_core::Boundary,
    autorequires: &'a [(ResourceId, ResourceId)],
    entries: WrittenSummaries<'a>,
    spans: Vec<(u64, u32, u64)>,
}

/// At most this many elements are reserved ahead for a list of the index,
/// whatever length it claims (a damaged file reserves no more).
const MOST_RESERVED: usize = 1 << 20;

/// A list of the index read into room for its whole length at once: serde's
/// own `Vec` reserves no more than 1 MiB ahead and then doubles, copying
/// 20,000 summaries (3 MB) twice and touching the pages of every copy.
fn sized_vec<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Sized<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Sized<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(MOST_RESERVED));
            while let Some(item) = seq.next_element()? {
                out.push(item);
            }
            Ok(out)
        }
    }
    deserializer.deserialize_seq(Sized(std::marker::PhantomData))
}

/// A resource with the content fields `Resource`'s own serde form leaves out,
/// its bytes borrowed from the record.
#[derive(Debug, Deserialize)]
struct StoredResource<'a> {
    resource: Resource,
    #[serde(borrow, with = "serde_bytes")]
    bytes: &'a [u8],
    source: Option<PathBuf>,
}

/// A snapshot that was valid when loaded but cannot be read now.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{}: cannot read the catalogue snapshot: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: the catalogue snapshot is damaged (resource {index})", path.display())]
    Damaged { path: PathBuf, index: usize },
}

/// A compiled catalogue whose resources are decoded when asked for: from a
/// snapshot (only the [`Summary`] of each is read up front) or from a
/// compile (everything already in memory).
#[derive(Debug)]
pub struct LazyCatalogue {
    pub host: HostIdentity,
    /// `datum.yaml`'s `classes:` as written.
    pub classes: Value,
    pub autorequires: Vec<(ResourceId, ResourceId)>,
    /// `datum.yaml`'s `boundary:`.
    pub boundary: datum_core::Boundary,
    /// One per resource, in the catalogue's (dependency) order.
    pub entries: Summaries,
    /// [`RepoKey::label`] of the repository this catalogue was compiled
    /// from, when a key was taken (the fleet report's revision of a
    /// repository that is not itself a git checkout).
    pub revision: Option<String>,
    resources: Resources,
}

#[derive(Debug)]
enum Resources {
    Compiled(Vec<Option<Resource>>),
    Snapshot {
        path: PathBuf,
        file: std::fs::File,
        /// Where the records start in the file.
        base: u64,
        spans: Vec<(u64, u32, u64)>,
    },
}

impl LazyCatalogue {
    /// A catalogue just compiled, with the classes of its repository.
    pub fn compiled(catalogue: Catalogue, classes: Value) -> Self {
        let mut lazy = Self::compiled_for_pass(catalogue, classes);
        if let Resources::Compiled(all) = &lazy.resources {
            lazy.entries = Summaries::of(all.iter().flatten());
        }
        lazy
    }

    /// [`LazyCatalogue::compiled`] without the summaries ([`LazyCatalogue::
    /// entries`] is empty), for a caller that only turns it into the
    /// [`Catalogue`] a pass runs ([`LazyCatalogue::into_catalogue`]): a copy
    /// of every summary was a sixth of a 100,000-File `plan --recompile`'s
    /// peak, for nothing a pass reads.
    pub fn compiled_for_pass(catalogue: Catalogue, classes: Value) -> Self {
        LazyCatalogue {
            entries: Summaries::default(),
            host: catalogue.host,
            classes,
            autorequires: catalogue.autorequires,
            boundary: catalogue.boundary,
            resources: Resources::Compiled(catalogue.resources.into_iter().map(Some).collect()),
            revision: None,
        }
    }

    /// The resources at `indices` (into [`LazyCatalogue::entries`]), in that
    /// order, each handed out once: asking again for one already taken is a
    /// programming error reported as [`SnapshotError::Damaged`].
    pub fn take(&mut self, indices: &[usize]) -> Result<Vec<Resource>, SnapshotError> {
        match &mut self.resources {
            Resources::Compiled(all) => indices
                .iter()
                .map(|&i| {
                    all.get_mut(i)
                        .and_then(Option::take)
                        .ok_or_else(|| SnapshotError::Damaged {
                            path: PathBuf::from("(compiled)"),
                            index: i,
                        })
                })
                .collect(),
            Resources::Snapshot {
                path,
                file,
                base,
                spans,
            } => {
                let records = Records {
                    path,
                    file,
                    base: *base,
                    spans,
                    len: file
                        .metadata()
                        .map_err(|source| SnapshotError::Read {
                            path: path.clone(),
                            source,
                        })?
                        .len()
                        .saturating_sub(*base),
                };
                // Many records are read a window at a time (a class's
                // resources are mostly neighbours); a few, one read each.
                let window = if indices.len() > 16 { READ_WINDOW } else { 0 };
                // Each decoded resource goes straight to its slot: no second
                // list of them, nor the records' bytes, is held beside the
                // catalogue.
                let mut slots: Vec<Option<Resource>> = indices.iter().map(|_| None).collect();
                if indices.len() >= PARALLEL_DECODE {
                    // Decoded on all cores: 20,000 records are tens of
                    // milliseconds of allocation on one.
                    let threads = std::thread::available_parallelism()
                        .map_or(1, |n| n.get())
                        .clamp(1, 8);
                    let chunk = indices.len().div_ceil(threads);
                    let records = &records;
                    std::thread::scope(|scope| {
                        let workers: Vec<_> = indices
                            .chunks(chunk)
                            .zip(slots.chunks_mut(chunk))
                            .map(|(part, slots)| {
                                scope.spawn(move || records.decode_into(part, slots, window))
                            })
                            .collect();
                        workers.into_iter().try_for_each(|worker| {
                            worker.join().map_err(|_| SnapshotError::Damaged {
                                path: path.clone(),
                                index: 0,
                            })?
                        })
                    })?;
                } else {
                    records.decode_into(indices, &mut slots, window)?;
                }
                // In place: `Option<Resource>` and `Resource` have one size.
                slots
                    .into_iter()
                    .zip(indices)
                    .map(|(slot, &index)| {
                        slot.ok_or_else(|| SnapshotError::Damaged {
                            path: path.clone(),
                            index,
                        })
                    })
                    .collect()
            }
        }
    }

    /// [`LazyCatalogue::into_catalogue`] for a pass, which never reads
    /// [`Catalogue::autorequires`]: every requirement the compile added is
    /// in its dependent's `requires` as well, and the list of them is for
    /// showing the catalogue (`datum catalogue`). Let go before the
    /// resources are decoded: two resource ids a pair, 20 MB when each of
    /// 100,000 Files requires the Directory of its folder.
    pub fn into_catalogue_for_pass(mut self) -> Result<Catalogue, SnapshotError> {
        self.autorequires = Vec::new();
        self.into_catalogue()
    }

    /// Every resource, as the [`Catalogue`] a pass runs.
    pub fn into_catalogue(mut self) -> Result<Catalogue, SnapshotError> {
        // The summaries are not part of a catalogue: let them go first.
        let count = std::mem::take(&mut self.entries).len();
        let resources = if let Resources::Compiled(all) = &mut self.resources {
            // Unwrapped where they are (an `Option<Resource>` is a
            // `Resource`'s size): a second list of every resource beside the
            // first was the peak of a 100,000-File `plan --recompile`.
            std::mem::take(all)
                .into_iter()
                .enumerate()
                .map(|(index, r)| {
                    r.ok_or_else(|| SnapshotError::Damaged {
                        path: PathBuf::from("(compiled)"),
                        index,
                    })
                })
                .collect::<Result<Vec<Resource>, SnapshotError>>()?
        } else {
            let all: Vec<usize> = (0..count).collect();
            self.take(&all)?
        };
        Ok(Catalogue {
            host: self.host,
            resources,
            autorequires: self.autorequires,
            boundary: self.boundary,
        })
    }
}

/// Requests of at least this many resources are decoded on all cores.
const PARALLEL_DECODE: usize = 2048;

/// How much of the snapshot one read brings in when many records are asked
/// for: each decoding thread holds one such window, never the whole file.
const READ_WINDOW: u64 = 256 * 1024;

/// The records of a snapshot file, read at their spans.
struct Records<'a> {
    path: &'a PathBuf,
    file: &'a std::fs::File,
    /// Where the records start in the file.
    base: u64,
    spans: &'a [(u64, u32, u64)],
    /// How many bytes the file has from `base` on.
    len: u64,
}

impl Records<'_> {
    /// Fills `buf` from the file at `offset` (from `base`).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), SnapshotError> {
        use std::os::unix::fs::FileExt as _;
        self.file
            .read_exact_at(buf, self.base + offset)
            .map_err(|source| SnapshotError::Read {
                path: self.path.clone(),
                source,
            })
    }

    /// Decodes the records at `indices` into `slots` (one each), reading
    /// `window` bytes at a time (at least a record; 0: each record alone).
    fn decode_into(
        &self,
        indices: &[usize],
        slots: &mut [Option<Resource>],
        window: u64,
    ) -> Result<(), SnapshotError> {
        let mut bytes: Vec<u8> = Vec::new();
        // The file offset (from `base`) of `bytes[0]`.
        let mut at = 0u64;
        for (&i, slot) in indices.iter().zip(slots) {
            let damaged = || SnapshotError::Damaged {
                path: self.path.clone(),
                index: i,
            };
            // A damaged index must not ask for more than the file has.
            let &(offset, len, sum) = self.spans.get(i).ok_or_else(damaged)?;
            let end = offset.checked_add(u64::from(len)).ok_or_else(damaged)?;
            if end > self.len {
                return Err(damaged());
            }
            // A record as large as a window is read alone, into a buffer
            // its content then shares: a packed tree of 200,000 files is a
            // 20 MB record, held once rather than read and then copied.
            if u64::from(len) >= window.max(1) {
                let mut alone = vec![0u8; len as usize];
                self.read_at(&mut alone, offset)?;
                if checksum(&alone) != sum {
                    return Err(damaged());
                }
                let alone = bytes::Bytes::from(alone);
                *slot = Some(decode_record(&alone, Some(&alone)).ok_or_else(damaged)?);
                continue;
            }
            let held = at + bytes.len() as u64;
            if offset < at || end > held {
                let want = window.min(self.len - offset);
                bytes.resize(usize::try_from(want).map_err(|_| damaged())?, 0);
                self.read_at(&mut bytes, offset)?;
                at = offset;
            }
            let from = usize::try_from(offset - at).map_err(|_| damaged())?;
            // A record damaged on disk (a desired field's value, a File's
            // mode) would be applied as it reads: refused, and the caller
            // compiles again.
            let record = bytes
                .get(from..from.saturating_add(len as usize))
                .filter(|record| checksum(record) == sum);
            *slot = Some(
                record
                    .and_then(|record| decode_record(record, None))
                    .ok_or_else(damaged)?,
            );
        }
        Ok(())
    }
}

/// The resource one record holds (`None`: not a record). Its content's
/// bytes are a slice of `shared` when the record is that buffer, a copy
/// otherwise (a record among others in a window: the window is reused).
fn decode_record(record: &[u8], shared: Option<&bytes::Bytes>) -> Option<Resource> {
    let stored: StoredResource = rmp_serde::from_slice(record).ok()?;
    let mut r = stored.resource;
    if let Some(content) = r.content.as_mut() {
        // Where the borrowed bytes lie in the record (they always lie in it:
        // the decoder borrows from what it reads).
        let within = (stored.bytes.as_ptr() as usize)
            .checked_sub(record.as_ptr() as usize)
            .filter(|from| from + stored.bytes.len() <= record.len());
        content.bytes = match (shared, within) {
            (Some(shared), Some(from)) if shared.as_ptr() == record.as_ptr() => {
                shared.slice(from..from + stored.bytes.len())
            }
            _ => bytes::Bytes::copy_from_slice(stored.bytes),
        };
        content.source = stored.source.map(Into::into);
    }
    Some(r)
}

/// The key of the running executable (`None` when it cannot be found: then
/// no snapshot is ever trusted).
fn program_key() -> Option<FileKey> {
    let exe = std::env::current_exe().ok()?;
    datum_host::repo::metadata(&exe)
        .ok()
        .map(|m| FileKey::of(&m))
}

/// Reads the snapshot at `path` and returns its catalogue when it was written
/// by this very program, for `host`, from `repo` as it is now. Anything else
/// (no file, another format, another build, another host, any change in the
/// repository) is an error saying which ([`Unused`]). Only the summaries are
/// decoded here.
///
/// `revision` is the caller's word that `repo` is that revision's
/// immutable checkout (see the module documentation): then the snapshot
/// must have been keyed by the same revision, and no entry is looked at;
/// without it, the snapshot must carry a stamp that still holds.
pub fn load(
    path: &Path,
    repo: &Path,
    revision: Option<&Revision>,
    host: &HostIdentity,
) -> Result<LazyCatalogue, Unused> {
    let (dir, name) = datum_host::PrivateDir::open_parent_of(path, false)
        .map_err(|_| Unused::Unreadable)?
        .ok_or(Unused::Missing)?;
    load_in(&dir, &name, repo, revision, host)
}

/// Why a snapshot was not used (the repository is compiled instead): for
/// a log line, so that a compile nobody expected can be explained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unused {
    #[error("there is none yet")]
    Missing,
    #[error("it cannot be read")]
    Unreadable,
    #[error("it is not owned by this user or is writable by others")]
    NotPrivate,
    #[error("it is in another format or damaged")]
    Format,
    #[error("another build of datum wrote it")]
    OtherProgram,
    #[error("it was compiled for another host identity")]
    OtherHost,
    #[error("it was compiled from another repository folder")]
    OtherFolder,
    #[error("a file or folder of the repository changed since it was compiled")]
    RepositoryChanged,
    #[error("it was compiled from another revision, or the checkout is no longer vouched for")]
    OtherRevision,
}

/// [`load`] of the snapshot `name` in Datum's private folder `dir` (opened
/// without following a link: a link there is never read).
pub fn load_in(
    dir: &datum_host::PrivateDir,
    name: &std::ffi::OsStr,
    repo: &Path,
    revision: Option<&Revision>,
    host: &HostIdentity,
) -> Result<LazyCatalogue, Unused> {
    use std::io::BufReader;
    use std::os::unix::fs::MetadataExt as _;
    let path = dir.file_path(name);
    let path = path.as_path();
    let file = dir
        .open_read(name)
        .map_err(|_| Unused::Unreadable)?
        .ok_or(Unused::Missing)?;
    // A catalogue decides what a pass writes: trusted only when written by
    // this user and writable by nobody else (like the state store beside it).
    let meta = file.metadata().map_err(|_| Unused::Unreadable)?;
    if meta.uid() != rustix::process::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
        return Err(Unused::NotPrivate);
    }
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut magic = vec![0u8; MAGIC.len()];
    reader.read_exact(&mut magic).map_err(|_| Unused::Format)?;
    if magic != MAGIC {
        return Err(Unused::Format);
    }
    let header: Header = rmp_serde::from_read(&mut reader).map_err(|_| Unused::Format)?;
    let program = program_key();
    if header.version != env!("CARGO_PKG_VERSION") || program.is_none() || header.program != program
    {
        return Err(Unused::OtherProgram);
    }
    if &header.host != host {
        return Err(Unused::OtherHost);
    }
    if datum_host::repo::canonicalize(repo).ok().as_deref() != Some(header.key.root()) {
        return Err(Unused::OtherFolder);
    }
    let (holds, index) = match (&header.key, revision) {
        // The same commit at the same folder, vouched for again now: the
        // same files, without looking at one.
        (RepoKey::Revision(then), Some(now)) => {
            if then != now {
                return Err(Unused::OtherRevision);
            }
            (true, read_index(&mut reader, meta.len()))
        }
        // The repository is checked while the index is decoded: both take
        // a while, and a changed repository only wastes the decoding.
        (RepoKey::Stamp(stamp), None) => std::thread::scope(|scope| {
            let check = scope.spawn(|| stamp.still_holds());
            let index = read_index(&mut reader, meta.len());
            (check.join().unwrap_or(false), index)
        }),
        // A revision no longer vouched for (its checkout may be edited
        // now), or a folder that became a checkout: compiled again.
        (RepoKey::Revision(_), None) | (RepoKey::Stamp(_), Some(_)) => {
            return Err(Unused::OtherRevision);
        }
    };
    if !holds {
        return Err(Unused::RepositoryChanged);
    }
    let index = index
        .filter(|i| i.spans.len() == i.entries.len())
        .ok_or(Unused::Format)?;
    let base = reader.stream_position().map_err(|_| Unused::Unreadable)?;
    Ok(LazyCatalogue {
        revision: Some(header.key.label()),
        host: index.host,
        classes: index.classes,
        boundary: index.boundary,
        autorequires: index.autorequires,
        entries: index.entries,
        resources: Resources::Snapshot {
            path: path.to_owned(),
            file: reader.into_inner(),
            base,
            spans: index.spans,
        },
    })
}

/// Reads the index (its length first) whole and decodes it from memory:
/// decoded from the file's reader, each of its 100,000 strings was a
/// `read_to_end` of its own (a sixth of a metadata pass).
/// A length past the file's size (`file_size`) is damage, refused before
/// anything is reserved for it.
fn read_index(reader: &mut impl std::io::Read, file_size: u64) -> Option<Index> {
    let mut length = [0u8; 8];
    reader.read_exact(&mut length).ok()?;
    let length = u64::from_le_bytes(length);
    if length > file_size {
        return None;
    }
    let mut sum = [0u8; 8];
    reader.read_exact(&mut sum).ok()?;
    let mut bytes = vec![0u8; usize::try_from(length).ok()?];
    reader.read_exact(&mut bytes).ok()?;
    // Damage there (a class, the boundary's links, a summary) is not used.
    if checksum(&bytes) != u64::from_le_bytes(sum) {
        return None;
    }
    rmp_serde::from_slice(&bytes).ok()
}

/// The checksum of an index or a record: its CRC-32 (in a `u64` field).
/// It finds a snapshot damaged on disk after it was written (its desired
/// fields decide what a pass writes; dc0b402 and the Tree's check cover
/// only content), not one written on purpose: whoever may write the
/// snapshot may write the state store beside it. CRC-32, not a
/// cryptographic hash: every record of every pass is checked, and a
/// BLAKE3 per record of a few hundred bytes cost a no-op apply of 20,000
/// Files 6 % of its CPU; CRC-32 finds every burst of up to 32 bits and all
/// but one in 2^32 other damages.
fn checksum(bytes: &[u8]) -> u64 {
    u64::from(crc32fast::hash(bytes))
}

/// Writes `catalogue` (with the repository's `classes`) to `path` under
/// `key` (taken before the compile), to a temporary file renamed into
/// place (mode 0600), unless the key is a racy stamp or a sensitive
/// resource carries rendered bytes.
pub fn save(
    registry: &datum_providers::Registry,
    path: &Path,
    key: RepoKey,
    catalogue: &Catalogue,
    classes: &Value,
) -> std::io::Result<Result<(), NotSaved>> {
    let Some((dir, name)) =
        datum_host::PrivateDir::open_parent_of(path, true).map_err(std::io::Error::other)?
    else {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    };
    save_in(registry, &dir, &name, key, catalogue, classes)
}

/// [`save`] as `name` in Datum's private folder `dir` (a fresh temporary
/// file renamed into place; a link there is refused, never written through).
pub fn save_in(
    registry: &datum_providers::Registry,
    dir: &datum_host::PrivateDir,
    name: &std::ffi::OsStr,
    key: RepoKey,
    catalogue: &Catalogue,
    classes: &Value,
) -> std::io::Result<Result<(), NotSaved>> {
    match write_in(registry, dir, name, key, catalogue, classes)? {
        Ok(written) => written.commit().map(Ok).map_err(std::io::Error::other),
        Err(not) => Ok(Err(not)),
    }
}

/// [`save_in`] but for its last step: the snapshot is written in full to a
/// temporary file, and becomes durable and takes its name when the
/// [`datum_host::Unsynced`] is committed, which the caller may leave to
/// another thread (its fsync waits for the disk, and nothing in the run
/// that compiled reads the snapshot).
pub fn write_in(
    registry: &datum_providers::Registry,
    dir: &datum_host::PrivateDir,
    name: &std::ffi::OsStr,
    key: RepoKey,
    catalogue: &Catalogue,
    classes: &Value,
) -> std::io::Result<Result<datum_host::Unsynced, NotSaved>> {
    if let Some(entry) = key.racy_entry() {
        return Ok(Err(NotSaved::Racy(entry)));
    }
    // The content keys hold the repository file's path or, inline, bytes
    // the first condition refuses; every other secret value is refused.
    if let Some(r) = catalogue.resources.iter().find(|r| {
        r.sensitive
            && (r
                .content
                .as_ref()
                .is_some_and(|c| !c.bytes.is_empty() || c.source.is_none())
                || crate::catalogue::secret_fields(registry, r)
                    .iter()
                    .any(|f| !crate::content::CONTENT_KEYS.contains(f)))
    }) {
        return Ok(Err(NotSaved::Sensitive(r.id.to_string())));
    }
    let invalid = write_error;
    // Each record's length first (encoded into a counter), so the index can
    // precede the records; then everything is encoded again straight into
    // the file. Nothing is held whole: a Tree of 200,000 files is a 15 MB
    // record, which a buffer (and a copy per resource) used to hold twice.
    // The lengths are counted on every core (the records are encoded
    // twice; this is the half nothing else waits on).
    let lengths = datum_core::parallel::each_stretch(&catalogue.resources, |stretch| {
        stretch
            .iter()
            .map(|r| {
                let mut counter = Counter(0, Hashing::default());
                rmp_serde::encode::write(&mut counter, &StoredRef::of(r)).map_err(invalid)?;
                let len = u32::try_from(counter.0).map_err(|_| {
                    std::io::Error::other(format!("{} is too large to remember", r.id))
                })?;
                Ok((len, counter.sum()))
            })
            .collect::<std::io::Result<Vec<(u32, u64)>>>()
    });
    let mut spans = Vec::with_capacity(catalogue.resources.len());
    let mut offset = 0u64;
    for stretch in lengths {
        for (len, sum) in stretch? {
            spans.push((offset, len, sum));
            offset += u64::from(len);
        }
    }
    let header = Header {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        program: program_key(),
        host: catalogue.host.clone(),
        key,
    };
    // Written as [`Index`] is read, from borrowed parts: a copy of every
    // summary was a third of a 100,000-File catalogue, held beside it.
    let index = IndexRef {
        host: &catalogue.host,
        classes,
        boundary: &catalogue.boundary,
        autorequires: &catalogue.autorequires,
        entries: WrittenSummaries(&catalogue.resources),
        spans,
    };
    // Compact form (structs as arrays): the program that reads it is the
    // one that wrote it (the header says so), so field names add nothing.
    // A fresh temporary file named after what it becomes (a write killed
    // half-way leaves a file that says what it was), renamed into place.
    let written = dir.write_unsynced(name, |file| {
        let mut out = std::io::BufWriter::with_capacity(64 * 1024, file);
        out.write_all(MAGIC)?;
        rmp_serde::encode::write(&mut out, &header).map_err(invalid)?;
        // The index's length and checksum go before it, patched in once the
        // index is written (streamed: it is not held whole to be measured).
        out.flush()?;
        let length_at = out.get_mut().stream_position()?;
        out.write_all(&[0u8; 16])?;
        let mut summing = Summing(&mut out, Hashing::default());
        rmp_serde::encode::write(&mut summing, &index).map_err(invalid)?;
        let sum = summing.1.sum();
        out.flush()?;
        let length = out.get_mut().stream_position()? - length_at - 16;
        // The records go where their spans say, each stretch written on a
        // core of its own (this second encoding was 20-30 ms of one core
        // while the other idled, between the compile and the pass).
        let records_at = length_at + 16 + length;
        write_records_at(
            out.get_ref(),
            records_at,
            &catalogue.resources,
            &index.spans,
        )?;
        use std::os::unix::fs::FileExt as _;
        let mut patch = [0u8; 16];
        patch[..8].copy_from_slice(&length.to_le_bytes());
        patch[8..].copy_from_slice(&sum.to_le_bytes());
        out.get_ref().write_all_at(&patch, length_at)
    });
    written.map(Ok).map_err(std::io::Error::other)
}

/// Encodes `resources` as records into `file`, the records' region
/// starting at `records_at`, each record at the offset and of the length
/// its span gives it (measured by encoding it once before): one stretch of the
/// records per core, each through a buffer of its own written at its place
/// (`pwrite`), so no stretch waits for another. A record whose encoding is
/// not the length measured is an error: nothing is saved, rather than a
/// file whose spans do not match it.
fn write_records_at(
    file: &std::fs::File,
    records_at: u64,
    resources: &[Resource],
    spans: &[(u64, u32, u64)],
) -> std::io::Result<()> {
    let paired: Vec<(&Resource, &(u64, u32, u64))> = resources.iter().zip(spans).collect();
    if paired.len() != resources.len() {
        return Err(std::io::Error::other(
            "the snapshot's spans do not match its records",
        ));
    }
    datum_core::parallel::each_stretch(&paired, |stretch| {
        let Some(&(_, &(first, _, _))) = stretch.first() else {
            return Ok(());
        };
        let mut out = Placed {
            file,
            at: records_at + first,
            buffer: Vec::with_capacity(PLACED_BUFFER),
        };
        for &(r, &(offset, len, _)) in stretch {
            let start = out.at + out.buffer.len() as u64;
            rmp_serde::encode::write(&mut out, &StoredRef::of(r)).map_err(write_error)?;
            let end = out.at + out.buffer.len() as u64;
            if start != records_at + offset || end - start != u64::from(len) {
                return Err(std::io::Error::other(format!(
                    "{} encoded to another length than measured",
                    r.id
                )));
            }
        }
        out.flush()
    })
    .into_iter()
    .collect()
}

/// What [`Placed`] gathers before it writes.
const PLACED_BUFFER: usize = 64 * 1024;

/// Writes to `file` at `at` onwards, through a buffer (`pwrite`: several
/// threads write one file at once, each at its own place).
struct Placed<'f> {
    file: &'f std::fs::File,
    /// Where the buffer's first byte goes.
    at: u64,
    buffer: Vec<u8>,
}

impl std::io::Write for Placed<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.buffer.len() + bytes.len() > PLACED_BUFFER {
            self.flush()?;
        }
        if bytes.len() >= PLACED_BUFFER {
            use std::os::unix::fs::FileExt as _;
            self.file.write_all_at(bytes, self.at)?;
            self.at += bytes.len() as u64;
        } else {
            self.buffer.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt as _;
        self.file.write_all_at(&self.buffer, self.at)?;
        self.at += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }
}

/// Writes through to `.0`, hashing what it writes.
struct Summing<'w, W>(&'w mut W, Hashing);

impl<W: std::io::Write> std::io::Write for Summing<'_, W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(bytes)?;
        self.1.update(bytes.get(..n).unwrap_or_default());
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// An encoding error as the I/O error it is: a write that failed (a full
/// file system) says why, as `No space left on device (os error 28)`,
/// where rmp_serde's own words were only `invalid value write: error while
/// writing multi-byte MessagePack value`.
fn write_error(e: rmp_serde::encode::Error) -> std::io::Error {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return std::io::Error::new(io.kind(), io.to_string());
        }
        cause = c.source();
    }
    std::io::Error::other(e.to_string())
}

/// Counts and hashes what is written to it.
struct Counter(u64, Hashing);

impl Counter {
    /// The [`checksum`] of what was written.
    fn sum(&self) -> u64 {
        self.1.sum()
    }
}

/// A [`checksum`] fed through a small buffer: the MessagePack encoder
/// writes a record a field at a time (a few bytes each), and a hasher
/// update per write cost more than the hash itself (with BLAKE3,
/// `plan --recompile` of 20,000 Files +5 % CPU). The checksum of the bytes
/// does not depend on how they were split.
struct Hashing {
    hasher: crc32fast::Hasher,
    pending: Vec<u8>,
}

/// What [`Hashing`] gathers before it hashes.
const HASH_BUFFER: usize = 4096;

impl Default for Hashing {
    fn default() -> Self {
        Hashing {
            hasher: crc32fast::Hasher::new(),
            pending: Vec::with_capacity(HASH_BUFFER),
        }
    }
}

impl Hashing {
    fn update(&mut self, bytes: &[u8]) {
        if self.pending.len() + bytes.len() > HASH_BUFFER {
            self.hasher.update(&self.pending);
            self.pending.clear();
        }
        if bytes.len() >= HASH_BUFFER {
            self.hasher.update(bytes);
        } else {
            self.pending.extend_from_slice(bytes);
        }
    }

    /// The [`checksum`] of everything given to [`Hashing::update`].
    fn sum(&self) -> u64 {
        let mut hasher = self.hasher.clone();
        hasher.update(&self.pending);
        u64::from(hasher.finalize())
    }
}

impl std::io::Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len() as u64;
        self.1.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A [`StoredResource`] as written: the resource without its content's
/// bytes (which `Content` never serialises) or field origins, and the bytes
/// borrowed. Encodes exactly as a `StoredResource` does.
#[derive(Serialize)]
struct StoredRef<'a> {
    /// The resource itself (borrowed) unless it has field origins to leave
    /// out (only an `--explain` compile records them).
    resource: std::borrow::Cow<'a, Resource>,
    #[serde(with = "serde_bytes")]
    bytes: &'a [u8],
    source: Option<&'a Path>,
}

impl<'a> StoredRef<'a> {
    fn of(r: &'a Resource) -> Self {
        let content = r.content.as_ref();
        let resource = if r.field_origins.is_empty() {
            std::borrow::Cow::Borrowed(r)
        } else {
            std::borrow::Cow::Owned(Resource {
                field_origins: Default::default(),
                ..r.clone()
            })
        };
        StoredRef {
            resource,
            bytes: content.map_or(&[], |c| &c.bytes[..]),
            source: content.and_then(|c| c.source.as_deref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checksum_does_not_depend_on_how_its_bytes_were_written() {
        // Records reach the hasher a field at a time, the index in writes
        // of every size: gathered or not, the checksum is the one the
        // reader computes over the whole.
        let bytes: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for sizes in [&[1usize][..], &[3, 1, 7], &[4095, 1], &[4096], &[9000, 2]] {
            let mut hashing = Hashing::default();
            let (mut at, mut k) = (0, 0);
            while at < bytes.len() {
                let n = sizes[k % sizes.len()].min(bytes.len() - at);
                hashing.update(&bytes[at..at + n]);
                at += n;
                k += 1;
            }
            assert_eq!(hashing.sum(), checksum(&bytes), "{sizes:?}");
        }
        assert_eq!(Hashing::default().sum(), checksum(&[]));
    }
    use crate::hashes::RACY_WINDOW_NS;
    use std::fs;

    /// Timestamps come from a coarse clock: a change in the same tick as the
    /// stamp can keep every key (the racy case, which `save` refuses).
    fn past_the_clock_tick() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    /// A snapshot that could not be written on a full file system was
    /// warned about as 'invalid value write: error while writing
    /// multi-byte MessagePack value', which does not say the disk is full.
    #[test]
    fn a_failed_write_says_why() {
        struct Full;
        impl std::io::Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::from_raw_os_error(28))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let e = rmp_serde::encode::write(&mut Full, &("a", 1u64)).unwrap_err();
        let e = write_error(e);
        assert_eq!(e.kind(), std::io::ErrorKind::StorageFull);
        assert!(e.to_string().contains("No space left on device"), "{e}");
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("base/files")).unwrap();
        fs::write(dir.path().join("datum.yaml"), "datum: v1alpha1\n").unwrap();
        fs::write(dir.path().join("base/files/motd"), "hello\n").unwrap();
        std::os::unix::fs::symlink("motd", dir.path().join("base/files/link")).unwrap();
        fs::create_dir_all(dir.path().join(".git/objects")).unwrap();
        dir
    }

    #[test]
    fn a_stamp_sums_up_each_folder_and_its_digest_names_the_repository_as_it_is() {
        let dir = tree();
        // motd written again last: the folder's newest entry.
        past_the_clock_tick();
        fs::write(dir.path().join("base/files/motd"), "hello\n").unwrap();
        let stamp = Stamp::take(dir.path()).unwrap();
        // Every folder (`.git` aside) with how many other entries it has;
        // no entry's key is kept.
        let folders: Vec<(String, usize)> = stamp
            .dirs
            .iter()
            .map(|d| {
                (
                    String::from_utf8_lossy(&d.path).into_owned(),
                    d.entries.count,
                )
            })
            .collect();
        let want = [("", 1), ("base", 0), ("base/files", 2)];
        let want: Vec<(String, usize)> = want.iter().map(|(d, n)| ((*d).into(), *n)).collect();
        assert_eq!(folders, want);
        let files = &stamp.dirs[2].entries;
        let (name, key) = files.newest.as_ref().unwrap();
        assert_eq!(
            (&name[..], key.size),
            (&b"motd"[..], 6),
            "the newest entry, its own key"
        );
        // Saved and loaded: the same stamp, still holding, the same digest.
        let back: Stamp = rmp_serde::from_slice(&rmp_serde::to_vec(&stamp).unwrap()).unwrap();
        assert_eq!(back, stamp);
        assert!(back.still_holds());
        assert_eq!(Stamp::take(dir.path()).unwrap().digest(), stamp.digest());
        past_the_clock_tick();
        fs::write(dir.path().join("base/files/motd"), "hellO\n").unwrap();
        assert_ne!(Stamp::take(dir.path()).unwrap().digest(), stamp.digest());
    }

    #[test]
    fn a_stamp_holds_until_something_changes() {
        let dir = tree();
        let stamp = Stamp::take(dir.path()).unwrap();
        // root, base, base/files, and datum.yaml, motd, link.
        assert_eq!(stamp.len(), 6, "{stamp:#?}");
        assert!(stamp.still_holds());

        // Anything inside .git is not the compiler's input.
        fs::write(dir.path().join(".git/HEAD"), "ref").unwrap();
        assert!(stamp.still_holds());

        type Change = Box<dyn Fn(&Path)>;
        let cases: Vec<Change> = vec![
            Box::new(|p| fs::write(p.join("base/files/motd"), "hellO\n").unwrap()),
            Box::new(|p| fs::write(p.join("base/files/new"), "").unwrap()),
            Box::new(|p| fs::remove_file(p.join("base/files/link")).unwrap()),
            Box::new(|p| {
                fs::remove_file(p.join("base/files/link")).unwrap();
                std::os::unix::fs::symlink("other", p.join("base/files/link")).unwrap();
            }),
            Box::new(|p| fs::create_dir(p.join("base/more")).unwrap()),
            Box::new(|p| {
                use std::os::unix::fs::PermissionsExt as _;
                fs::set_permissions(p.join("datum.yaml"), fs::Permissions::from_mode(0o600))
                    .unwrap();
            }),
            Box::new(|p| fs::rename(p.join("base"), p.join("moved")).unwrap()),
        ];
        for (i, change) in cases.iter().enumerate() {
            let dir = tree();
            let stamp = Stamp::take(dir.path()).unwrap();
            past_the_clock_tick();
            change(dir.path());
            assert!(!stamp.still_holds(), "change {i} went unseen");
        }
    }

    #[test]
    fn a_repository_reached_through_a_link_is_stamped_as_its_folder() {
        let dir = tree();
        let outer = tempfile::tempdir().unwrap();
        let link = outer.path().join("repo");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        let stamp = Stamp::take(&link).unwrap();
        assert!(stamp.still_holds());
        past_the_clock_tick();
        fs::write(dir.path().join("new.yaml"), "x").unwrap();
        assert!(!stamp.still_holds(), "a new top-level file is seen");
    }

    #[test]
    fn an_edit_that_restores_size_and_mtime_is_still_seen() {
        let dir = tree();
        let motd = dir.path().join("base/files/motd");
        let before = fs::metadata(&motd).unwrap().modified().unwrap();
        let stamp = Stamp::take(dir.path()).unwrap();
        past_the_clock_tick();
        fs::write(&motd, "HELLO\n").unwrap();
        fs::File::options()
            .write(true)
            .open(&motd)
            .unwrap()
            .set_modified(before)
            .unwrap();
        assert!(!stamp.still_holds(), "ctime moved, the stamp must fail");
    }

    #[test]
    fn a_fresh_stamp_is_racy_and_an_old_one_is_not() {
        let dir = tree();
        let mut stamp = Stamp::take(dir.path()).unwrap();
        assert!(stamp.racy_entry().is_some(), "just written: racy");
        stamp.taken_ns += RACY_WINDOW_NS + 1;
        assert_eq!(stamp.racy_entry(), None);
    }

    #[test]
    fn a_stamp_walked_after_its_start_counts_from_the_start() {
        let dir = tree();
        // Started long before the tree was written (the walk ran while
        // something changed it): every entry is later than the start, racy.
        let hour = 3_600_000_000_000;
        let mut started = RepoKey::start(dir.path(), None);
        started.taken_ns -= hour;
        let RepoKey::Stamp(stamp) = started.walk().unwrap() else {
            panic!("an ordinary folder is stamped")
        };
        assert!(
            stamp.racy_entry().is_some(),
            "changed after the start: racy"
        );
        // Started well after: nothing in the window.
        let mut started = RepoKey::start(dir.path(), None);
        started.taken_ns += hour;
        let RepoKey::Stamp(stamp) = started.walk().unwrap() else {
            panic!("an ordinary folder is stamped")
        };
        assert_eq!(stamp.racy_entry(), None);
    }

    fn resource(name: &str, sensitive: bool, bytes: &[u8]) -> Resource {
        Resource {
            id: ResourceId::new("File", name),
            desired: serde_json::json!({"path": format!("/etc/{name}"), "mode": "0644"}).into(),
            content: Some(datum_core::Content::new(bytes.to_vec())),
            requires: vec![],
            class: "normal".to_owned(),
            sensitive,
            sensitive_by_field_only: false,
            validate: None,
            origin: datum_core::Origin::default(),
            field_origins: Default::default(),
            declaration_hash: format!("decl-{name}"),
        }
    }

    /// The records written a stretch per core, each at its span, are the
    /// very bytes of encoding them one after the other: enough records for
    /// every core, some larger than a writer's buffer (written straight
    /// through), the region starting past a header.
    #[test]
    fn records_written_on_every_core_are_the_bytes_written_in_order() {
        let resources: Vec<Resource> = (0..700)
            .map(|i| {
                let size = match i % 97 {
                    0 => PLACED_BUFFER + 1000,
                    1 => PLACED_BUFFER - 3,
                    n => n * 7,
                };
                resource(&format!("f{i}"), false, &vec![(i % 251) as u8; size])
            })
            .collect();
        let mut expected = Vec::new();
        let mut at = Vec::new();
        for r in &resources {
            let before = expected.len() as u64;
            rmp_serde::encode::write(&mut expected, &StoredRef::of(r)).unwrap();
            at.push((before, (expected.len() as u64 - before) as u32, 0));
        }
        let dir = tempfile::tempdir().unwrap();
        let file = fs::File::create_new(dir.path().join("records")).unwrap();
        write_records_at(&file, 100, &resources, &at).unwrap();
        let written = fs::read(dir.path().join("records")).unwrap();
        assert_eq!(written.len(), 100 + expected.len());
        assert!(written[..100].iter().all(|&b| b == 0));
        assert!(written[100..] == expected[..], "the records differ");
        // A span that does not match its record's encoding: refused.
        let mut wrong = at.clone();
        wrong[350].1 += 1;
        let file = fs::File::create_new(dir.path().join("wrong")).unwrap();
        assert!(write_records_at(&file, 0, &resources, &wrong).is_err());
    }

    fn catalogue(sensitive: bool, bytes: &[u8]) -> Catalogue {
        let mut from_source = resource("hosts", false, b"");
        from_source.content = Some(datum_core::Content::from_source(
            PathBuf::from("/repo/base/files/hosts"),
            "ab".repeat(32),
            Some("cd".repeat(32)),
            12,
        ));
        Catalogue {
            host: HostIdentity {
                name: "web1".to_owned(),
                labels: [("role".to_owned(), "web".to_owned())].into(),
            },
            resources: vec![resource("motd", sensitive, bytes), from_source],
            autorequires: vec![],
            boundary: datum_core::Boundary::default(),
        }
    }

    #[test]
    fn a_compiled_catalogue_is_handed_over_in_the_list_it_was_compiled_into() {
        let lazy = LazyCatalogue::compiled(catalogue(false, b"hello\n"), classes());
        let Resources::Compiled(all) = &lazy.resources else {
            panic!("compiled");
        };
        let (at, ids): (usize, Vec<ResourceId>) = (
            all.as_ptr() as usize,
            all.iter().flatten().map(|r| r.id.clone()).collect(),
        );
        let handed = lazy.into_catalogue().unwrap();
        // The same allocation: the resources were not copied into a second.
        assert_eq!(handed.resources.as_ptr() as usize, at);
        let handed: Vec<ResourceId> = handed.resources.into_iter().map(|r| r.id).collect();
        assert_eq!(handed, ids);
    }

    fn classes() -> Value {
        serde_json::json!({"critical": {"interval": "5m"}})
    }

    fn settled_stamp(repo: &Path) -> RepoKey {
        let mut stamp = Stamp::take(repo).unwrap();
        stamp.taken_ns += RACY_WINDOW_NS + 1;
        RepoKey::Stamp(stamp)
    }

    /// A repository, a state folder, and where its snapshot goes.
    struct Setup {
        repo: tempfile::TempDir,
        _state: tempfile::TempDir,
        path: PathBuf,
    }

    impl Setup {
        fn new() -> Self {
            let state = tempfile::tempdir().unwrap();
            let path = state.path().join("state.catalogue");
            Setup {
                repo: tree(),
                _state: state,
                path,
            }
        }

        /// Saves `c` under a settled stamp of the repository.
        fn save(&self, c: &Catalogue) {
            save(
                datum_providers::registry(),
                &self.path,
                settled_stamp(self.repo.path()),
                c,
                &classes(),
            )
            .unwrap()
            .unwrap();
        }

        fn load(&self, host: &HostIdentity) -> Result<LazyCatalogue, Unused> {
            load(&self.path, self.repo.path(), None, host)
        }
    }

    #[test]
    fn a_saved_snapshot_loads_back_whole_while_nothing_changes() {
        let t = Setup::new();
        let (repo, path) = (&t.repo, &t.path);
        let c = catalogue(false, b"hello\n");
        t.save(&c);
        let host = c.host.clone();

        let lazy = t.load(&host).expect("an unchanged repository reuses it");
        assert_eq!(lazy.classes, classes());
        assert_eq!(lazy.host, host);
        assert_eq!(lazy.entries, Summaries::of(&c.resources));
        assert_eq!(lazy.entries.at(0).path, Some("/etc/motd"));
        let back = lazy.into_catalogue().unwrap();
        assert_eq!(back.resources.len(), 2);
        for (got, want) in back.resources.iter().zip(&c.resources) {
            assert_eq!(got.id, want.id);
            assert_eq!(got.desired, want.desired);
            assert_eq!(got.content, want.content);
            assert_eq!(
                got.content.as_ref().unwrap().source,
                want.content.as_ref().unwrap().source
            );
            assert_eq!(got.declaration_hash, want.declaration_hash);
        }
        assert_eq!(
            &back.resources[0].content.as_ref().unwrap().bytes[..],
            b"hello\n"
        );

        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            fs::metadata(path).unwrap().permissions().mode() & 0o777,
            0o600
        );

        // Another host identity, another repository path, a changed file:
        // each compiles again.
        let mut other = host.clone();
        other.labels.insert("role".to_owned(), "db".to_owned());
        // Each says why (the binary logs it).
        assert_eq!(t.load(&other).err(), Some(Unused::OtherHost));
        assert_eq!(
            load(path, &repo.path().join("base"), None, &host).err(),
            Some(Unused::OtherFolder)
        );
        assert_eq!(
            load(&path.with_extension("none"), repo.path(), None, &host).err(),
            Some(Unused::Missing)
        );
        past_the_clock_tick();
        fs::write(repo.path().join("base/files/motd"), "changed\n").unwrap();
        assert_eq!(t.load(&host).err(), Some(Unused::RepositoryChanged));
    }

    #[test]
    fn resources_are_decoded_one_at_a_time_on_request() {
        let t = Setup::new();
        let (repo, path) = (&t.repo, &t.path);
        let c = catalogue(false, b"hello\n");
        t.save(&c);
        // The compiled form and the snapshot hand out the same resources;
        // with many resources, one is read alone.
        let mut many = c.clone();
        for i in 0..30 {
            many.resources
                .push(resource(&format!("extra{i}"), false, b"e"));
        }
        let mut lazy = {
            save(
                datum_providers::registry(),
                path,
                settled_stamp(repo.path()),
                &many,
                &classes(),
            )
            .unwrap()
            .unwrap();
            t.load(&c.host).unwrap()
        };
        let one = lazy.take(&[20]).unwrap();
        assert_eq!(one[0].id, ResourceId::new("File", "extra18"));
        assert_eq!(&one[0].content.as_ref().unwrap().bytes[..], b"e");
        t.save(&c);
        for mut lazy in [
            t.load(&c.host).unwrap(),
            LazyCatalogue::compiled(c.clone(), classes()),
        ] {
            let second = lazy.take(&[1]).unwrap();
            assert_eq!(second[0].id, ResourceId::new("File", "hosts"));
            let first = lazy.take(&[0]).unwrap();
            assert_eq!(&first[0].content.as_ref().unwrap().bytes[..], b"hello\n");
            assert!(lazy.take(&[7]).is_err(), "no such resource");
        }
    }

    #[test]
    fn a_damaged_index_cannot_ask_for_more_than_the_file_holds() {
        let t = Setup::new();
        let mut many = catalogue(false, b"x");
        for i in 0..40 {
            many.resources.push(resource(&format!("n{i}"), false, b"y"));
        }
        t.save(&many);
        // Cut the records short: the index still decodes, its spans now
        // reach past the end, for a range read and for a single record.
        let bytes = fs::read(&t.path).unwrap();
        fs::write(&t.path, &bytes[..bytes.len() - 40]).unwrap();
        let mut lazy = t.load(&many.host).unwrap();
        assert!(matches!(
            lazy.take(&(0..42).collect::<Vec<_>>()),
            Err(SnapshotError::Damaged { .. })
        ));
        assert!(matches!(
            lazy.take(&[41]),
            Err(SnapshotError::Damaged { .. })
        ));
        assert_eq!(
            lazy.take(&[0]).unwrap()[0].id,
            ResourceId::new("File", "motd")
        );
    }

    #[test]
    fn a_snapshot_others_can_write_is_not_trusted() {
        use std::os::unix::fs::PermissionsExt as _;
        let t = Setup::new();
        let path = &t.path;
        let c = catalogue(false, b"x");
        t.save(&c);
        assert!(t.load(&c.host).is_ok());
        fs::set_permissions(path, fs::Permissions::from_mode(0o620)).unwrap();
        assert_eq!(
            t.load(&c.host).err(),
            Some(Unused::NotPrivate),
            "group-writable"
        );
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(t.load(&c.host).is_ok());
    }

    /// A record read alone lends its buffer to its content (a packed tree
    /// is held once, not read and then copied); a record among others in a
    /// window gets its own copy (the window is reused for the next records).
    #[test]
    fn a_record_read_alone_shares_its_buffer_with_its_content() {
        let r = resource("big", false, &[7u8; 4096]);
        let record = rmp_serde::to_vec(&StoredRef::of(&r)).unwrap();
        let alone = bytes::Bytes::from(record.clone());
        let within = |b: &bytes::Bytes| {
            let (start, end) = (
                alone.as_ptr() as usize,
                alone.as_ptr() as usize + alone.len(),
            );
            (start..end).contains(&(b.as_ptr() as usize))
        };
        let shared = decode_record(&alone, Some(&alone)).unwrap();
        let shared = &shared.content.as_ref().unwrap().bytes;
        assert_eq!(&shared[..], &[7u8; 4096][..]);
        assert!(within(shared), "a slice of the record's buffer");
        let copied = decode_record(&record, None).unwrap();
        let copied = &copied.content.as_ref().unwrap().bytes;
        assert_eq!(copied, shared);
        assert!(!within(copied), "its own copy");
    }

    #[test]
    fn records_are_read_a_window_at_a_time_in_any_order_and_size() {
        let t = Setup::new();
        let mut many = catalogue(false, b"x");
        // Records larger than a read window, between small ones.
        let big = |i: usize| vec![b'a' + (i % 26) as u8; READ_WINDOW as usize + 1000 * i];
        for i in 0..40 {
            let bytes = if i % 10 == 3 {
                big(i)
            } else {
                i.to_string().into_bytes()
            };
            many.resources
                .push(resource(&format!("w{i}"), false, &bytes));
        }
        t.save(&many);
        // Backwards, then forwards past the big ones: each record is read
        // again where the window does not hold it.
        let mut wanted: Vec<usize> = (20..many.resources.len()).rev().collect();
        wanted.extend(2..20);
        let got = t.load(&many.host).unwrap().take(&wanted).unwrap();
        assert_eq!(got.len(), wanted.len());
        for (r, &i) in got.iter().zip(&wanted) {
            assert_eq!(r.id, many.resources[i].id);
            assert_eq!(
                r.content.as_ref().unwrap().bytes,
                many.resources[i].content.as_ref().unwrap().bytes,
                "{}",
                r.id
            );
        }
    }

    #[test]
    fn a_pass_is_handed_the_requirements_the_compile_added_only_in_requires() {
        let mut c = catalogue(false, b"x");
        let (motd, hosts) = (c.resources[0].id.clone(), c.resources[1].id.clone());
        c.resources[1].requires.push(motd.clone());
        c.autorequires = vec![(hosts.clone(), motd.clone())];
        let t = Setup::new();
        t.save(&c);
        for lazy in [
            LazyCatalogue::compiled(c.clone(), classes()),
            t.load(&c.host).unwrap(),
        ] {
            let pass = lazy.into_catalogue_for_pass().unwrap();
            assert!(pass.autorequires.is_empty());
            assert_eq!(pass.resources[1].requires, std::slice::from_ref(&motd));
        }
        // Shown by whatever shows the catalogue.
        let shown = t.load(&c.host).unwrap().into_catalogue().unwrap();
        assert_eq!(shown.autorequires, [(hosts, motd)]);
    }

    #[test]
    fn a_large_request_is_decoded_on_all_cores_in_order() {
        let t = Setup::new();
        let mut many = catalogue(false, b"x");
        for i in 0..PARALLEL_DECODE + 100 {
            many.resources
                .push(resource(&format!("n{i}"), false, i.to_string().as_bytes()));
        }
        t.save(&many);
        let mut lazy = t.load(&many.host).unwrap();
        // Every second one, from the third: a range read, decoded in parts.
        let wanted: Vec<usize> = (2..many.resources.len()).step_by(2).collect();
        assert!(wanted.len() >= PARALLEL_DECODE / 2);
        let got = lazy.take(&wanted).unwrap();
        let ids: Vec<&ResourceId> = got.iter().map(|r| &r.id).collect();
        let want: Vec<&ResourceId> = wanted.iter().map(|&i| &many.resources[i].id).collect();
        assert_eq!(ids, want);
        let all = t.load(&many.host).unwrap().into_catalogue().unwrap();
        assert_eq!(all.resources.len(), many.resources.len());
        let last = all.resources.last().unwrap();
        let n = PARALLEL_DECODE + 99;
        assert_eq!(last.id, ResourceId::new("File", format!("n{n}")));
        assert_eq!(
            last.content.as_ref().unwrap().bytes,
            n.to_string().as_bytes()
        );
    }

    #[test]
    fn racy_or_sensitive_catalogues_are_not_saved() {
        let t = Setup::new();
        let (repo, path) = (&t.repo, &t.path);
        let fresh = Stamp::take(repo.path()).unwrap();
        let got = save(
            datum_providers::registry(),
            path,
            RepoKey::Stamp(fresh),
            &catalogue(false, b"x"),
            &classes(),
        )
        .unwrap();
        assert!(matches!(got, Err(NotSaved::Racy(_))), "{got:?}");
        assert!(!path.exists());

        let canary = b"CANARY-5f2d9 secret";
        let stamp = settled_stamp(repo.path());
        let got = save(
            datum_providers::registry(),
            path,
            stamp,
            &catalogue(true, canary),
            &classes(),
        )
        .unwrap();
        assert_eq!(got, Err(NotSaved::Sensitive("File[motd]".to_owned())));
        assert!(!path.exists());

        // Content from a repository file (kept as its checksum and path):
        // saved, unless the resource, sensitive itself, declares another
        // value (its mode: plan, check and `datum catalogue` mask it).
        let mut c = catalogue(false, b"x");
        c.resources[1].sensitive = true;
        let mut desired = serde_json::json!({"path": "/etc/hosts", "source": "files/hosts"});
        c.resources[1].desired = desired.clone().into();
        let got = save(
            datum_providers::registry(),
            path,
            settled_stamp(repo.path()),
            &c,
            &classes(),
        )
        .unwrap();
        assert!(got.is_ok(), "{got:?}");
        fs::remove_file(path).unwrap();
        desired["mode"] = serde_json::json!("0640");
        c.resources[1].desired = desired.into();
        let got = save(
            datum_providers::registry(),
            path,
            settled_stamp(repo.path()),
            &c,
            &classes(),
        )
        .unwrap();
        assert_eq!(got, Err(NotSaved::Sensitive("File[hosts]".to_owned())));
        assert!(!path.exists());
    }

    fn commit(c: char) -> String {
        c.to_string().repeat(40)
    }

    #[test]
    fn a_vouched_revision_is_reused_without_looking_at_a_file() {
        let t = Setup::new();
        let c = catalogue(false, b"x");
        let at = |commit: &str| Revision::new(t.repo.path(), commit, &"e".repeat(40)).unwrap();
        let load_at = |r: Option<&Revision>| load(&t.path, t.repo.path(), r, &c.host);
        // Saved right after the files were written: a stamp that fresh is
        // refused as racy, a revision is not (nothing changes its files).
        let key = RepoKey::start(t.repo.path(), Some(at(&commit('a'))))
            .walk()
            .unwrap();
        save(datum_providers::registry(), &t.path, key, &c, &classes())
            .unwrap()
            .unwrap();
        assert!(load_at(Some(&at(&commit('a')))).is_ok());

        // An edit that a stamp would see (size, mtime, ctime all move; a
        // new file): the revision's snapshot does not look, so it loads.
        past_the_clock_tick();
        fs::write(t.repo.path().join("base/files/motd"), "edited by hand\n").unwrap();
        fs::write(t.repo.path().join("base/new.yaml"), "x").unwrap();
        let lazy = load_at(Some(&at(&commit('a')))).expect("keyed by the commit alone");
        assert_eq!(lazy.revision, Some(format!("git:{}", commit('a'))));

        // Another commit, or no longer vouched for: compiled again.
        assert_eq!(
            load_at(Some(&at(&commit('b')))).err(),
            Some(Unused::OtherRevision)
        );
        assert_eq!(
            load_at(None).err(),
            Some(Unused::OtherRevision),
            "not a checkout now: the stamp rules"
        );
        let other_tree = Revision::new(t.repo.path(), &commit('a'), &"f".repeat(40)).unwrap();
        assert_eq!(
            load_at(Some(&other_tree)).err(),
            Some(Unused::OtherRevision)
        );
    }

    #[test]
    fn a_stamped_snapshot_is_not_taken_for_a_revision() {
        let t = Setup::new();
        let c = catalogue(false, b"x");
        t.save(&c);
        assert!(t.load(&c.host).is_ok());
        let r = Revision::new(t.repo.path(), &commit('a'), &"e".repeat(40)).unwrap();
        assert_eq!(
            load(&t.path, t.repo.path(), Some(&r), &c.host).err(),
            Some(Unused::OtherRevision)
        );
        // Two keys of one folder differ, and two revisions' digests too.
        assert_ne!(
            settled_stamp(t.repo.path()).digest(),
            RepoKey::Revision(r.clone()).digest()
        );
        let b = Revision::new(t.repo.path(), &commit('b'), &"e".repeat(40)).unwrap();
        assert_ne!(RepoKey::Revision(r).digest(), RepoKey::Revision(b).digest());
    }

    #[test]
    fn the_index_is_read_by_its_length_and_a_damaged_length_compiles_again() {
        let t = Setup::new();
        let c = catalogue(false, b"x");
        t.save(&c);
        let bytes = fs::read(&t.path).unwrap();
        // The length and the checksum follow the header.
        let mut after_header = std::io::Cursor::new(&bytes[MAGIC.len()..]);
        let _: Header = rmp_serde::from_read(&mut after_header).unwrap();
        let at = MAGIC.len() + usize::try_from(after_header.position()).unwrap();
        let length = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let index_end = at + 16 + usize::try_from(length).unwrap();
        let index: Index = rmp_serde::from_slice(&bytes[at + 16..index_end]).unwrap();
        assert_eq!(index.entries.len(), c.resources.len());
        assert_eq!(
            u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap()),
            checksum(&bytes[at + 16..index_end])
        );
        for (damaged, why) in [
            (u64::MAX, "more than any file holds"),
            (bytes.len() as u64 + 1, "past the file's end"),
            (length - 1, "the index cut short"),
        ] {
            let mut copy = bytes.clone();
            copy[at..at + 8].copy_from_slice(&damaged.to_le_bytes());
            fs::write(&t.path, &copy).unwrap();
            assert_eq!(t.load(&c.host).err(), Some(Unused::Format), "{why}");
        }
        // Put back, it loads and its records are where the index says.
        fs::write(&t.path, &bytes).unwrap();
        let mut lazy = t.load(&c.host).unwrap();
        assert_eq!(lazy.take(&[0]).unwrap()[0].id, c.resources[0].id);
    }

    /// A byte of the snapshot damaged on disk after it was written went
    /// live when it was one of a resource's desired values: a File's mode
    /// 0640 read back as 0666 was applied (seen with the binary: motd made
    /// world-writable), as a class or a link the boundary follows would
    /// have been in the index. Each record and the index carry a checksum,
    /// checked as they are read: a damaged record is not decoded (the
    /// caller compiles again), a damaged index is not used.
    #[test]
    fn a_byte_damaged_in_a_record_or_the_index_is_never_used() {
        let t = Setup::new();
        let mut c = catalogue(false, b"x");
        c.resources[0].desired = serde_json::json!({"path": "/etc/motd", "mode": "0640"})
            .as_object()
            .unwrap()
            .clone()
            .into();
        t.save(&c);
        let bytes = fs::read(&t.path).unwrap();
        let at = bytes
            .windows(4)
            .rposition(|w| w == b"0640")
            .expect("the mode is in the record");
        let mut copy = bytes.clone();
        copy[at..at + 4].copy_from_slice(b"0666");
        fs::write(&t.path, &copy).unwrap();
        let mut lazy = t.load(&c.host).unwrap();
        assert!(
            matches!(
                lazy.take(&[0]),
                Err(SnapshotError::Damaged { index: 0, .. })
            ),
            "a damaged record was decoded"
        );
        let all = t.load(&c.host).unwrap().into_catalogue();
        assert!(matches!(all, Err(SnapshotError::Damaged { .. })));
        // The index: a host label's value (the header holds it first).
        let at = bytes
            .windows(3)
            .rposition(|w| w == b"web")
            .expect("a label in the index");
        let mut copy = bytes.clone();
        copy[at] = b'X';
        fs::write(&t.path, &copy).unwrap();
        assert!(t.load(&c.host).is_err(), "a damaged index was used");
        fs::write(&t.path, &bytes).unwrap();
        assert_eq!(
            t.load(&c.host).unwrap().take(&[0]).unwrap()[0].desired,
            c.resources[0].desired
        );
    }

    #[test]
    fn a_damaged_or_foreign_file_is_ignored() {
        let t = Setup::new();
        let path = &t.path;
        let c = catalogue(false, b"x");
        fs::write(path, b"something else entirely").unwrap();
        assert_eq!(t.load(&c.host).err(), Some(Unused::Format));
        t.save(&c);
        let mut bytes = fs::read(path).unwrap();
        let keep = bytes.len() - 5;
        bytes.truncate(keep);
        fs::write(path, &bytes).unwrap();
        // The index still reads; the truncated record does not.
        let lazy = t.load(&c.host).unwrap();
        let err = lazy.into_catalogue().unwrap_err();
        assert!(err.to_string().contains("catalogue snapshot"), "{err}");
    }
}
