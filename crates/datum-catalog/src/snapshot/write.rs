//! Writing a snapshot: [`save`] and [`write_in`], the records encoded on
//! every core at the places their spans give them.

use std::io::{Seek as _, Write as _};
use std::path::{Path, PathBuf};

use datum_core::Resource;
use serde_json::Value;

use super::{Header, IndexRef, MAGIC, RepoKey, StoredRef, program_key};
use crate::catalogue::Catalogue;
use crate::summaries::WrittenSummaries;

/// Why a snapshot was not written (none of these is an error: the next run
/// compiles again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotSaved {
    /// An entry of the repository changed too recently to be trusted.
    Racy(PathBuf),
    /// A sensitive resource carries rendered bytes or another secret
    /// value, which must not be stored (or its declaration hash cannot be
    /// computed again without its digests).
    Sensitive(String),
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
    // Rendered bytes are the secret: refused, as is every other secret
    // value. A repository file's content is saved without its digests
    // (plain, its SHA-256 or BLAKE3 would confirm a guessed secret; the
    // state store and the outputs keep only the host's keyed digest of
    // it), filled in again when the snapshot is loaded.
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
    let mut withheld = Vec::new();
    for (at, r) in catalogue.resources.iter().enumerate() {
        if !super::withheld(r) {
            continue;
        }
        // How many of its requirements (the first) its declaration hash
        // covers, found by computing it again as a load will: none found
        // (it could not be filled in), not saved.
        let Some(explicit) = explicit_requirements(r) else {
            return Ok(Err(NotSaved::Sensitive(r.id.to_string())));
        };
        withheld.push((at as u64, explicit));
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
        withheld,
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
        out.write_all(&[0u8; 16])?;
        out.flush()?;
        let length_at = out.get_mut().stream_position()? - 16;
        // One buffer: what it writes to the file is summed as it goes (the
        // encoder's pieces of a few bytes were copied into a second buffer
        // to be summed).
        let mut summing = std::io::BufWriter::with_capacity(
            64 * 1024,
            Summing {
                file: out.get_ref(),
                written: 0,
                sum: crc32fast::Hasher::new(),
            },
        );
        rmp_serde::encode::write(&mut summing, &index).map_err(invalid)?;
        summing.flush()?;
        let (length, sum) = {
            let summed = summing.get_ref();
            (summed.written, u64::from(summed.sum.clone().finalize()))
        };
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

/// How many of `r`'s requirements (the first) its declaration hash covers:
/// the number that gives it again from its declared fields and content
/// checksum (`None`: none does).
fn explicit_requirements(r: &Resource) -> Option<u32> {
    let sha256 = r.content.as_ref().map(|c| c.sha256.as_str());
    (0..=r.requires.len())
        .find(|&n| {
            crate::catalogue::declaration_hash_of(r, sha256, &r.requires[..n]) == r.declaration_hash
        })
        .and_then(|n| u32::try_from(n).ok())
}

/// Encodes `resources` as records into `file`, the records' region
/// starting at `records_at`, each record at the offset and of the length
/// its span gives it (measured by encoding it once before): one stretch of the
/// records per core, each through a buffer of its own written at its place
/// (`pwrite`), so no stretch waits for another. A record whose encoding is
/// not the length measured is an error: nothing is saved, rather than a
/// file whose spans do not match it.
pub(super) fn write_records_at(
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
        // std's buffer, whose copy of a few bytes is a handful of
        // instructions, and its own position in the file: a buffer of our
        // own here cost 50 % more instructions than encoding the records
        // through std's buffer into the file in order (32 M more for
        // `plan --recompile` of 20,000 Files).
        let mut out = std::io::BufWriter::with_capacity(
            PLACED_BUFFER,
            Placed {
                file,
                at: records_at + first,
            },
        );
        for &(r, &(offset, len, _)) in stretch {
            let start = out.get_ref().at + out.buffer().len() as u64;
            rmp_serde::encode::write(&mut out, &StoredRef::of(r)).map_err(write_error)?;
            let end = out.get_ref().at + out.buffer().len() as u64;
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

/// The buffer each stretch of records is written through.
pub(super) const PLACED_BUFFER: usize = 64 * 1024;

/// Writes to `file` at `at` onwards (`pwrite`: several threads write one
/// file at once, each at its own place), moving `at` past what it wrote.
struct Placed<'f> {
    file: &'f std::fs::File,
    /// Where the next byte goes.
    at: u64,
}

impl std::io::Write for Placed<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt as _;
        let n = self.file.write_at(bytes, self.at)?;
        self.at += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes to `file` (at its position), counting and summing what it
/// writes: the inside of the index's one buffer.
struct Summing<'f> {
    file: &'f std::fs::File,
    written: u64,
    sum: crc32fast::Hasher,
}

impl std::io::Write for Summing<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let n = std::io::Write::write(&mut self.file, bytes)?;
        self.sum.update(bytes.get(..n).unwrap_or_default());
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An encoding error as the I/O error it is: a write that failed (a full
/// file system) says why, as `No space left on device (os error 28)`,
/// where rmp_serde's own words were only `invalid value write: error while
/// writing multi-byte MessagePack value`.
pub(super) fn write_error(e: rmp_serde::encode::Error) -> std::io::Error {
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
    /// The [`checksum`](super::checksum) of what was written.
    fn sum(&self) -> u64 {
        self.1.sum()
    }
}

/// A [`checksum`](super::checksum) fed through a small buffer: the MessagePack encoder
/// writes a record a field at a time (a few bytes each), and a hasher
/// update per write cost more than the hash itself (with BLAKE3,
/// `plan --recompile` of 20,000 Files +5 % CPU). The checksum of the bytes
/// does not depend on how they were split.
pub(super) struct Hashing {
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
    pub(super) fn update(&mut self, bytes: &[u8]) {
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

    /// The [`checksum`](super::checksum) of everything given to [`Hashing::update`].
    pub(super) fn sum(&self) -> u64 {
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
