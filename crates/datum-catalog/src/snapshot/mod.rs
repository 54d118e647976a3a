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
//! catalogue` mask them all). A sensitive resource whose content stays in
//! a repository file (`source:`) is saved without its content's digests
//! (SHA-256, BLAKE3, size) and without its declaration hash, which covers
//! the SHA-256: plain, either would let whoever reads the snapshot confirm
//! a guessed secret. The index lists those resources (`Withheld`) and
//! [`load`] fills them in by hashing their source files again (the few a
//! compile would have read anyway) and computing the declaration hash over
//! the resource's explicit requirements, whose number the index keeps.
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
//! their SHA-256 before anything is written, and a sensitive resource's
//! `source:` file is hashed again at each load (its digests are not kept),
//! so an edit of that one file is seen.
//!
//! Its parts: `stamp.rs` (the [`Stamp`] and the [`RepoKey`]: what
//! "unchanged" means), `read.rs` ([`load`] and the [`LazyCatalogue`] it
//! returns, whose records are decoded when asked for), `write.rs` ([`save`]
//! and [`write_in`]), and this file: the snapshot's format, which both
//! sides share (the header, the index, a record, the checksum).

use std::path::{Path, PathBuf};

use datum_core::{Resource, ResourceId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hashes::FileKey;
use crate::host::HostIdentity;
use crate::summaries::WrittenSummaries;
pub use crate::summaries::{Summaries, Summary};

mod read;
mod stamp;
#[cfg(test)]
mod tests;
mod write;

pub use read::{LazyCatalogue, SnapshotError, Unused, load, load_in};
pub use stamp::{RepoKey, Revision, Stamp, StartedKey};
pub use write::{NotSaved, save, save_in, write_in};

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
/// span), checked as they are read ([`checksum`]). v10: the index lists
/// the sensitive resources saved without their digests ([`Withheld`]).
const MAGIC: &[u8] = b"datum catalogue snapshot v10\n";

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
    withheld: Vec<Withheld>,
}

/// A sensitive resource saved without its content's digests and its
/// declaration hash: its position in the catalogue and how many of its
/// `requires` (the first) are explicit, which its declaration hash covers
/// (the compile adds the rest after hashing).
type Withheld = (u64, u32);

/// A withheld declaration hash's place in the index's summaries: as long
/// as a real one (so it is replaced where it lies) and never equal to one.
pub(crate) const WITHHELD_HASH: &str =
    "----------------------------------------------------------------";

/// Whether `r`'s digests are left out of its record and summary: a
/// sensitive resource whose content is a repository file's (no bytes).
pub(crate) fn withheld(r: &Resource) -> bool {
    r.sensitive
        && r.content
            .as_ref()
            .is_some_and(|c| c.bytes.is_empty() && c.source.is_some())
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
    withheld: Vec<Withheld>,
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
        let resource = if withheld(r) {
            // Its digests are filled in again when it is loaded.
            let mut bare = Resource {
                field_origins: Default::default(),
                declaration_hash: String::new(),
                ..r.clone()
            };
            if let Some(c) = bare.content.as_mut() {
                c.sha256 = String::new();
                c.blake3 = None;
                c.size = 0;
            }
            std::borrow::Cow::Owned(bare)
        } else if r.field_origins.is_empty() {
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

/// The key of the running executable (`None` when it cannot be found: then
/// no snapshot is ever trusted).
fn program_key() -> Option<FileKey> {
    let exe = std::env::current_exe().ok()?;
    datum_host::repo::metadata(&exe)
        .ok()
        .map(|m| FileKey::of(&m))
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
