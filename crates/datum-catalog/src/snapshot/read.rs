//! Reading a snapshot: [`load`] checks its header and key and decodes the
//! index; the [`LazyCatalogue`] it returns decodes records when asked for.

use std::io::{Read as _, Seek as _};
use std::path::{Path, PathBuf};

use datum_core::{Resource, ResourceId};
use serde_json::Value;

use super::{Header, Index, MAGIC, StoredResource, checksum, program_key};
use super::{RepoKey, Revision, Summaries};
use crate::catalogue::Catalogue;
use crate::host::HostIdentity;

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
/// snapshot (only the [`Summary`](super::Summary) of each is read up front) or from a
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
    pub(super) resources: Resources,
    /// The digests of the resources a snapshot was saved without
    /// ([`super::Withheld`]), computed again when it was loaded, by
    /// position (ascending): given back to each as it is decoded.
    pub(super) filled: Vec<(usize, Filled)>,
}

/// What a withheld resource's record lacks, computed again at load.
#[derive(Debug)]
pub(super) struct Filled {
    sha256: String,
    blake3: String,
    size: u64,
    declaration_hash: String,
}

impl Filled {
    /// Gives `r` (decoded from its record) what it was saved without.
    fn fill(&self, r: &mut Resource) {
        if let Some(c) = r.content.as_mut() {
            c.sha256.clone_from(&self.sha256);
            c.blake3 = Some(self.blake3.clone());
            c.size = self.size;
        }
        r.declaration_hash.clone_from(&self.declaration_hash);
    }
}

#[derive(Debug)]
pub(super) enum Resources {
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
            filled: Vec::new(),
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
                let filled = &self.filled;
                slots
                    .into_iter()
                    .zip(indices)
                    .map(|(slot, &index)| {
                        let mut r = slot.ok_or_else(|| SnapshotError::Damaged {
                            path: path.clone(),
                            index,
                        })?;
                        if let Ok(at) = filled.binary_search_by_key(&index, |(i, _)| *i) {
                            filled[at].1.fill(&mut r);
                        }
                        Ok(r)
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
pub(super) const PARALLEL_DECODE: usize = 2048;

/// How much of the snapshot one read brings in when many records are asked
/// for: each decoding thread holds one such window, never the whole file.
pub(super) const READ_WINDOW: u64 = 256 * 1024;

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
pub(super) fn decode_record(record: &[u8], shared: Option<&bytes::Bytes>) -> Option<Resource> {
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
    #[error("a sensitive resource's source file cannot be hashed again")]
    SourceUnreadable,
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
    let file = reader.into_inner();
    let mut entries = index.entries;
    let filled = fill_withheld(
        path,
        &file,
        base,
        &index.spans,
        &index.withheld,
        &mut entries,
    )?;
    Ok(LazyCatalogue {
        revision: Some(header.key.label()),
        host: index.host,
        classes: index.classes,
        boundary: index.boundary,
        autorequires: index.autorequires,
        entries,
        resources: Resources::Snapshot {
            path: path.to_owned(),
            file,
            base,
            spans: index.spans,
        },
        filled,
    })
}

/// The digests of the resources saved without them ([`super::Withheld`]):
/// each one's source file hashed again (never through the source hash
/// cache: nothing of it is remembered) and its declaration hash computed
/// over its explicit requirements, which its summary in `entries` takes.
/// A source that cannot be read now, or a list that does not fit the
/// records, leaves the snapshot unused (the compile says why).
fn fill_withheld(
    path: &Path,
    file: &std::fs::File,
    base: u64,
    spans: &[(u64, u32, u64)],
    withheld: &[super::Withheld],
    entries: &mut Summaries,
) -> Result<Vec<(usize, Filled)>, Unused> {
    if withheld.is_empty() {
        return Ok(Vec::new());
    }
    let path = path.to_owned();
    let records = Records {
        path: &path,
        file,
        base,
        spans,
        len: file
            .metadata()
            .map_err(|_| Unused::Unreadable)?
            .len()
            .saturating_sub(base),
    };
    let mut filled = Vec::with_capacity(withheld.len());
    for &(at, explicit) in withheld {
        let at = usize::try_from(at).map_err(|_| Unused::Format)?;
        // Ascending and each once, as written.
        if filled.last().is_some_and(|(last, _)| *last >= at) {
            return Err(Unused::Format);
        }
        let mut slot = [None];
        records
            .decode_into(&[at], &mut slot, 0)
            .map_err(|_| Unused::Format)?;
        let [Some(r)] = slot else {
            return Err(Unused::Format);
        };
        let source = r
            .content
            .as_ref()
            .filter(|_| r.sensitive)
            .and_then(|c| c.source.clone())
            .ok_or(Unused::Format)?;
        let requires = r.requires.get(..explicit as usize).ok_or(Unused::Format)?;
        let (digests, size) =
            crate::content::hash_file(&source).map_err(|_| Unused::SourceUnreadable)?;
        let sha256 = digests.sha256_hex();
        let declaration_hash = crate::catalogue::declaration_hash_of(&r, Some(&sha256), requires);
        if !entries.set_declaration_hash(at, &declaration_hash) {
            return Err(Unused::Format);
        }
        filled.push((
            at,
            Filled {
                sha256,
                blake3: digests.blake3_hex(),
                size,
                declaration_hash,
            },
        ));
    }
    Ok(filled)
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
