//! The declared content of a `Tree`, as one byte string the catalogue carries.
//!
//! The catalogue scans the repository folder named by `source:` (the same
//! parallel Merkle scan as the host side, native algorithm) and packs the
//! result here into [`datum_core::Content`] bytes: per file its BLAKE3 hash,
//! size and repository path, never its bytes, so a 20,000-file tree costs a
//! few megabytes, not its size. The content checksum of the pack is what the
//! declaration hash follows, so any change to any file changes it. The Tree
//! provider unpacks it; apply reads a file's bytes from the repository when
//! it writes it, and refuses a file whose hash is no longer the packed one.
//! Packing keeps `datum_core::Resource` unchanged: a tree is content with
//! structure.
//!
//! Owns: the format (`datum-tree5\n`, a `u32` length and the repository
//! folder's absolute path, then per entry in tree order ([`tree_order`]: a
//! folder's entries right after it) a kind byte `d`/`f`/`l`, a `u32` path
//! length, the path relative to the folder and what the kind declares: a
//! folder nothing, a file its 32-byte hash and `u64` size, a link a `u32`
//! length and its target), [`pack_source_dir`] (which packs each folder as
//! the scan finishes it), and the unpacked form ([`DeclaredTree`]: the
//! packed bytes themselves, shared with the catalogue, and each entry's
//! `u32` offset, so a 200,000-file tree unpacks into 0.8 MB beside its
//! packed 18 MB, rather than a copy of it). `datum-tree4` also gave every
//! entry a `u64` payload length (1.6 MB at 200,000 files, though a folder's
//! and a file's kind fix it); `datum-tree3` held the entries in path byte
//! order; `datum-tree2` also carried each file's absolute repository path.
//! The catalogue snapshot's format version was bumped with each.
//! Must not: read the managed host (this reads the repository only), follow
//! a symbolic link (a link in the folder is declared as that link, so it can
//! never pull in a file from outside the repository), or render templates:
//! files are taken verbatim (a `.j2` file is a file named `.j2`).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex, PoisonError};

use datum_fingerprint::{Algorithm, Entry, FingerprintedNode};
use datum_host::tree_scan::{Prune, ScanOptions, scan_pruned};

const MAGIC: &[u8] = b"datum-tree5\n";
/// The previous format's magic: what the checksum is computed over (see [`content_of`]).
const MAGIC_V2: &[u8] = b"datum-tree2\n";

/// One declared entry below the tree's root, as read from the repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclaredEntry {
    Dir,
    File {
        /// BLAKE3 of the bytes (the native fingerprint's content hash).
        blake3: [u8; 32],
        size: u64,
    },
    /// The link's target, raw bytes.
    Symlink(Vec<u8>),
}

/// Declared entries by path relative to the root (raw bytes, `/`-separated):
/// what a repository folder declares (the tests' oracle for packing).
pub type DeclaredEntries = BTreeMap<Vec<u8>, DeclaredEntry>;

/// A declared entry of an unpacked [`DeclaredTree`], borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryRef<'a> {
    Dir,
    File { blake3: &'a [u8; 32], size: u64 },
    Symlink(&'a [u8]),
}

impl EntryRef<'_> {
    /// The owned form.
    pub fn to_owned_entry(self) -> DeclaredEntry {
        match self {
            EntryRef::Dir => DeclaredEntry::Dir,
            EntryRef::File { blake3, size } => DeclaredEntry::File {
                blake3: *blake3,
                size,
            },
            EntryRef::Symlink(t) => DeclaredEntry::Symlink(t.to_vec()),
        }
    }
}

/// An unpacked declared tree: the repository folder, the packed bytes
/// (shared with the catalogue's content, not copied) and where each entry
/// starts in them, in tree order (parents first, siblings by raw byte name,
/// a folder's entries right after it: [`tree_order`]), so a walk beside a
/// scanned host tree is one pass and a lookup is a binary search. Holding
/// `u32` offsets rather than decoded entries, a tree of 200,000 files costs
/// 0.8 MB beside its packed bytes (decoded into lists, it cost 20 MB); a
/// packed tree is at most [`MAX_PACKED`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredTree {
    source: PathBuf,
    packed: bytes::Bytes,
    /// Each entry's offset in `packed`, in tree order.
    order: Vec<u32>,
}

/// The most bytes a packed tree may have (its offsets are `u32`): about 45
/// million files with paths of 50 bytes. [`pack_source_dir`] refuses a
/// larger folder by name.
pub const MAX_PACKED: usize = u32::MAX as usize;

/// Orders `/`-separated paths as a tree walk meets them: component by
/// component, so `a/b` comes before `a-c` (byte order puts `a-c` first)
/// and a folder's entries follow it directly.
pub fn tree_order(a: &[u8], b: &[u8]) -> Ordering {
    let key = |c: &u8| if *c == b'/' { 0u16 } else { u16::from(*c) + 1 };
    a.iter().map(key).cmp(b.iter().map(key))
}

impl DeclaredTree {
    /// How many entries (the root not counted).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The checksum of the packed entries, as the compile recorded it in
    /// the catalogue's content (`content_of`): computed again, it tells
    /// whether the packed bytes are still the ones the compile made.
    pub fn checksum(&self) -> String {
        checksum_of(&self.packed)
    }

    /// The repository folder the files are read from.
    pub fn source_dir(&self) -> &Path {
        &self.source
    }

    /// The repository file holding the declared bytes of the entry at `path`.
    pub fn source_of(&self, path: &[u8]) -> PathBuf {
        self.source.join(std::ffi::OsStr::from_bytes(path))
    }

    /// The entry at position `i` of the tree order, with its path.
    pub fn at(&self, i: usize) -> Option<(&[u8], EntryRef<'_>)> {
        let raw = read_entry(&self.packed, *self.order.get(i)? as usize)?;
        Some((raw.path, raw.entry))
    }

    /// Every entry in tree order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], EntryRef<'_>)> {
        (0..self.order.len()).filter_map(|i| self.at(i))
    }

    /// The entry at `path`.
    pub fn get(&self, path: &[u8]) -> Option<EntryRef<'_>> {
        self.at(self.find(path)?).map(|(_, e)| e)
    }

    /// The position of the entry at `path` in the tree order.
    pub fn find(&self, path: &[u8]) -> Option<usize> {
        self.order
            .binary_search_by(|at| tree_order(path_of(&self.packed, *at as usize), path))
            .ok()
    }
}

/// Bytes that are not a packed tree (a catalogue from another build).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the declared tree is damaged at byte {offset}")]
pub struct ArchiveError {
    pub offset: usize,
}

fn push_entry(out: &mut Vec<u8>, path: &[u8], entry: &DeclaredEntry) {
    let head = |out: &mut Vec<u8>, kind: u8| {
        out.push(kind);
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(path);
    };
    match entry {
        DeclaredEntry::Dir => head(out, b'd'),
        DeclaredEntry::File { blake3, size } => {
            head(out, b'f');
            out.extend_from_slice(blake3);
            out.extend_from_slice(&size.to_le_bytes());
        }
        DeclaredEntry::Symlink(target) => {
            head(out, b'l');
            out.extend_from_slice(&(target.len() as u32).to_le_bytes());
            out.extend_from_slice(target);
        }
    }
}

/// Packs `entries`, read from the repository folder `source` (see the
/// module header for the format), in tree order: the whole list at once,
/// which the tests use as [`pack_source_dir`]'s oracle.
#[cfg(test)]
pub fn encode(source: &Path, entries: &DeclaredEntries) -> Vec<u8> {
    let folder = source.as_os_str().as_bytes();
    let mut in_tree_order: Vec<(&[u8], &DeclaredEntry)> =
        entries.iter().map(|(p, e)| (p.as_slice(), e)).collect();
    in_tree_order.sort_by(|a, b| tree_order(a.0, b.0));
    // Sized first: a 200,000-file tree is ~20 MB, and a vector grown by
    // doubling would hold up to twice that.
    let size = in_tree_order
        .iter()
        .fold(MAGIC.len() + 4 + folder.len(), |n, (path, e)| {
            n + entry_len(path, e)
        });
    let mut out = Vec::with_capacity(size);
    push_header(&mut out, folder);
    for (path, entry) in in_tree_order {
        push_entry(&mut out, path, entry);
    }
    out
}

fn push_header(out: &mut Vec<u8>, folder: &[u8]) {
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(folder.len() as u32).to_le_bytes());
    out.extend_from_slice(folder);
}

/// How many bytes [`push_entry`] writes for an entry.
fn entry_len(path: &[u8], entry: &DeclaredEntry) -> usize {
    let payload = match entry {
        DeclaredEntry::Dir => 0,
        DeclaredEntry::File { .. } => FILE_PAYLOAD,
        DeclaredEntry::Symlink(t) => 4 + t.len(),
    };
    1 + 4 + path.len() + payload
}

/// A file's payload: its BLAKE3 hash and `u64` size.
const FILE_PAYLOAD: usize = 40;

/// The whole list `entries` packed as content ([`content_of`]): the tests'
/// oracle for [`pack_source_dir`].
#[cfg(test)]
pub fn pack(source: &Path, entries: &DeclaredEntries) -> datum_core::Content {
    content_of(encode(source, entries))
}

/// Packed bytes as the catalogue's content, with a checksum over everything
/// but the repository folder (hashes, sizes, names, link targets), so the
/// declaration hash does not change when the repository is checked out
/// elsewhere. The checksum is computed over the entries in path byte order
/// after the magic of `datum-tree2`, each entry as that format encoded it
/// (its repository path empty: a kind byte, a `u32` path length, the path,
/// a `u64` payload length and the payload), as it always was: a new build
/// does not see every Tree as changed. Each entry is hashed from where the
/// packed bytes hold it, piece by piece; only its offset is sorted.
fn content_of(packed: Vec<u8>) -> datum_core::Content {
    datum_core::Content {
        sha256: checksum_of(&packed),
        size: packed.len() as u64,
        bytes: packed.into(),
        source: None,
        // A packed tree is compared entry by entry, never as one file.
        blake3: None,
    }
}

/// The checksum of packed bytes ([`content_of`] says what it covers).
fn checksum_of(packed: &[u8]) -> String {
    use sha2::Digest as _;
    let first = len_at(packed, MAGIC.len(), 4).map_or(packed.len(), |n| MAGIC.len() + 4 + n);
    let mut offsets = Vec::new();
    let mut at = first;
    while let Some(raw) = read_entry(packed, at) {
        offsets.push(at);
        at = raw.next;
    }
    offsets.sort_unstable_by(|a, b| path_of(packed, *a).cmp(path_of(packed, *b)));
    let mut hasher = sha2::Sha256::new();
    hasher.update(MAGIC_V2);
    for at in offsets {
        if let Some(raw) = read_entry(packed, at) {
            hasher.update([raw.kind]);
            hasher.update((raw.path.len() as u32).to_le_bytes());
            hasher.update(raw.path);
            hasher.update((raw.payload.len() as u64).to_le_bytes());
            hasher.update(raw.payload);
        }
    }
    format!("{:x}", hasher.finalize())
}

/// Scans the repository folder `dir` and packs it (the bytes and checksum
/// of packing the whole list of its entries, without holding that list): regular files by
/// hash (hashed in parallel, read once, not kept), folders (empty ones too),
/// links as links; other entries (fifos, sockets) are refused, the first in
/// path byte order named. Each
/// folder is packed as the scan finishes it (its entries in name order, so
/// a folder's own bytes are one piece of the tree order), and the pieces
/// are joined in tree order, each freed once copied. At 200,000 files the
/// list of entries was 23 MB beside the 20 MB it was packed into.
pub fn pack_source_dir(dir: &Path) -> Result<datum_core::Content, std::io::Error> {
    // Each finished folder's entries, packed, by the folder's path.
    type Found = (
        std::collections::HashMap<Vec<u8>, Vec<u8>>,
        Option<(Vec<u8>, Refused)>,
    );
    let found: Arc<Mutex<Found>> = Arc::default();
    let folder_len = dir.as_os_str().len();
    let prune = {
        let found = found.clone();
        Prune(Arc::new(move |rel: &Path, node: &FingerprintedNode| {
            let rel = rel.as_os_str().as_bytes();
            // Each entry's path is built in one buffer, reused.
            let mut path = rel.to_vec();
            fn at<'p>(path: &'p mut Vec<u8>, rel: &[u8], name: &[u8]) -> &'p [u8] {
                path.truncate(rel.len());
                if !rel.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(name);
                path
            }
            let mut size = 0;
            for (name, child) in &node.children {
                if let Some(entry) = declared_entry(&child.entry) {
                    size += entry_len(at(&mut path, rel, name), &entry);
                }
            }
            let mut piece = Vec::with_capacity(size);
            let mut undeclarable: Option<(Vec<u8>, Refused)> = None;
            for (name, child) in &node.children {
                // No managed path may hold a control character (the backup
                // store refuses one; a newline in a plan's field is a line).
                let why = if name.iter().any(|&b| b < 0x20 || b == 0x7f) {
                    Some(Refused::ControlInName)
                } else if matches!(child.entry, Entry::File { .. })
                    && folder_len + 1 + at(&mut path, rel, name).len() > MAX_READ_PATH
                {
                    // The apply reads the file by its repository path.
                    Some(Refused::TooLong)
                } else {
                    None
                };
                match (why, declared_entry(&child.entry)) {
                    (None, Some(entry)) => push_entry(&mut piece, at(&mut path, rel, name), &entry),
                    // Children come in name order: the first is the least.
                    (why, _) if undeclarable.is_none() => {
                        undeclarable = Some((
                            at(&mut path, rel, name).to_vec(),
                            why.unwrap_or(Refused::Kind),
                        ))
                    }
                    _ => {}
                }
            }
            let mut found = found.lock().unwrap_or_else(PoisonError::into_inner);
            let (pieces, other) = &mut *found;
            // The first in byte order is named, whichever folder the scan
            // finished first.
            if let Some((path, why)) = undeclarable
                && other.as_ref().is_none_or(|(o, _)| path < *o)
            {
                *other = Some((path, why));
            }
            pieces.insert(rel.to_vec(), piece);
            true
        }))
    };
    let options = ScanOptions {
        algorithm: Algorithm::Native,
        exclude: None,
        threads: 0,
        progress: None,
    };
    scan_pruned(dir, &options, prune).map_err(|e| std::io::Error::other(e.to_string()))?;
    let (mut pieces, other) =
        std::mem::take(&mut *found.lock().unwrap_or_else(PoisonError::into_inner));
    if let Some((rel, why)) = other {
        return Err(not_declarable(dir, &rel, why));
    }
    let folder = dir.as_os_str().as_bytes();
    let size = pieces
        .values()
        .fold(MAGIC.len() + 4 + folder.len(), |n, p| n + p.len());
    if size > MAX_PACKED {
        return Err(std::io::Error::other(format!(
            "{} is too large a Tree: its entries pack into {size} bytes, more than {MAX_PACKED} \
             (about 45 million files); declare its sub-folders as Trees of their own",
            dir.display()
        )));
    }
    let mut out = Vec::with_capacity(size);
    push_header(&mut out, folder);
    let missing = |rel: &[u8]| {
        std::io::Error::other(format!(
            "the scan of {} left the folder {} out",
            dir.display(),
            String::from_utf8_lossy(rel)
        ))
    };
    // Tree order: a folder's piece, each sub-folder's piece right after the
    // sub-folder's own entry.
    let root = pieces.remove(&b""[..]).ok_or_else(|| missing(b""))?;
    let mut open: Vec<(Vec<u8>, usize)> = vec![(root, 0)];
    while let Some((piece, at)) = open.last_mut() {
        let Some(raw) = read_entry(piece, *at) else {
            open.pop();
            continue;
        };
        out.extend_from_slice(piece.get(*at..raw.next).unwrap_or_default());
        *at = raw.next;
        if raw.entry == EntryRef::Dir {
            let path = raw.path.to_vec();
            let sub = pieces.remove(&path).ok_or_else(|| missing(&path))?;
            open.push((sub, 0));
        }
    }
    Ok(content_of(out))
}

/// One packed entry as its header says, borrowed from the packed bytes.
struct RawEntry<'a> {
    /// The kind byte and the payload as packed (what the checksum hashes).
    kind: u8,
    payload: &'a [u8],
    path: &'a [u8],
    /// What the entry declares.
    entry: EntryRef<'a>,
    /// Where the next entry starts.
    next: usize,
}

/// The `n`-byte little-endian length at `at`.
fn len_at(bytes: &[u8], at: usize, n: usize) -> Option<usize> {
    let b = bytes.get(at..at.checked_add(n)?)?;
    let mut le = [0u8; 8];
    le.get_mut(..n)?.copy_from_slice(b);
    usize::try_from(u64::from_le_bytes(le)).ok()
}

/// The packed entry starting at `at` (`None`: an unknown kind, or its
/// header or its lengths run past the bytes).
fn read_entry(bytes: &[u8], at: usize) -> Option<RawEntry<'_>> {
    let kind = *bytes.get(at)?;
    let path_len = len_at(bytes, at.checked_add(1)?, 4)?;
    let path_at = at.checked_add(5)?;
    let path_end = path_at.checked_add(path_len)?;
    // What follows the path: fixed by the kind, or (a link) a `u32` length.
    let (payload_at, payload_len) = match kind {
        b'd' => (path_end, 0),
        b'f' => (path_end, FILE_PAYLOAD),
        b'l' => (path_end.checked_add(4)?, len_at(bytes, path_end, 4)?),
        _ => return None,
    };
    let next = payload_at.checked_add(payload_len)?;
    let payload = bytes.get(payload_at..next)?;
    let entry = match kind {
        b'd' => EntryRef::Dir,
        b'f' => {
            let (blake3, size) = payload.split_first_chunk::<32>()?;
            EntryRef::File {
                blake3,
                size: u64::from_le_bytes(size.try_into().ok()?),
            }
        }
        _ => EntryRef::Symlink(payload),
    };
    Some(RawEntry {
        kind,
        payload,
        path: bytes.get(path_at..path_end)?,
        entry,
        next,
    })
}

/// The path of the (already read once) entry at `at`.
fn path_of(bytes: &[u8], at: usize) -> &[u8] {
    read_entry(bytes, at).map_or(&[], |raw| raw.path)
}

/// Unpacks what [`pack_source_dir`] packed: checks every entry once (in tree order,
/// each path once), keeping `packed` itself (see [`DeclaredTree`]). Refuses
/// an entry whose parent folder is not declared before it (a packed tree
/// from [`pack_source_dir`] always declares every folder).
pub fn decode(packed: bytes::Bytes) -> Result<DeclaredTree, ArchiveError> {
    let bytes = &packed[..];
    if bytes.get(..MAGIC.len()) != Some(MAGIC) {
        return Err(ArchiveError { offset: 0 });
    }
    let header = ArchiveError {
        offset: MAGIC.len(),
    };
    let folder_len = len_at(bytes, MAGIC.len(), 4).ok_or(header.clone())?;
    let first = (MAGIC.len() + 4)
        .checked_add(folder_len)
        .ok_or(header.clone())?;
    let folder = bytes.get(MAGIC.len() + 4..first).ok_or(header)?;
    let source = PathBuf::from(std::ffi::OsStr::from_bytes(folder));
    // Counted first, so the list is sized once (grown by doubling, a tree of
    // 200,000 entries held a third more than it used).
    let mut count = 0usize;
    let mut at = first;
    while at < bytes.len() {
        let raw = read_entry(bytes, at).ok_or(ArchiveError { offset: at })?;
        count += 1;
        at = raw.next;
    }
    let mut order = Vec::with_capacity(count);
    let mut previous: Option<&[u8]> = None;
    // The open folders above the current entry: every entry's parent folder
    // is declared (and so comes right before its first entry, in tree
    // order), which a walk of the tree relies on.
    let mut parents: Vec<&[u8]> = Vec::new();
    let mut at = first;
    while at < bytes.len() {
        let err = ArchiveError { offset: at };
        let raw = read_entry(bytes, at).ok_or(err.clone())?;
        // (`read_entry` knows the kind and its payload.) Tree order, each path
        // once, no empty or absolute component.
        let path = raw.path;
        if path.is_empty() || path.split(|b| *b == b'/').any(<[u8]>::is_empty) {
            return Err(err);
        }
        if previous.is_some_and(|prev| tree_order(prev, path) != Ordering::Less) {
            return Err(err);
        }
        let parent = path
            .iter()
            .rposition(|b| *b == b'/')
            .map_or(&[][..], |i| &path[..i]);
        while parents.last().is_some_and(|p| *p != parent) {
            parents.pop();
        }
        if !parent.is_empty() && parents.is_empty() {
            return Err(err);
        }
        if raw.entry == EntryRef::Dir {
            parents.push(path);
        }
        previous = Some(path);
        order.push(u32::try_from(at).map_err(|_| err)?);
        at = raw.next;
    }
    Ok(DeclaredTree {
        source,
        packed,
        order,
    })
}

/// Why an entry of a repository folder cannot be declared.
#[derive(Debug, Clone, Copy)]
enum Refused {
    /// A FIFO, a socket, a device node.
    Kind,
    /// Its name holds a control character.
    ControlInName,
    /// A file whose path in the repository is longer than a read allows.
    TooLong,
}

/// The longest path the kernel opens (PATH_MAX less its NUL): the apply
/// reads each declared file by its path in the repository.
const MAX_READ_PATH: usize = 4095;

fn not_declarable(dir: &Path, rel: &[u8], why: Refused) -> std::io::Error {
    let message = match why {
        Refused::Kind => format!(
            "{} is neither a file, a folder nor a link",
            dir.join(std::ffi::OsStr::from_bytes(rel)).display()
        ),
        // Shown escaped: the raw name would be a line of its own.
        Refused::TooLong => format!(
            "{:?} in {} is too deep: its path in the repository is {} bytes, more than the {MAX_READ_PATH} a file can be read by; move the folder up or shorten its names",
            String::from_utf8_lossy(rel),
            dir.display(),
            dir.as_os_str().len() + 1 + rel.len()
        ),
        Refused::ControlInName => format!(
            "{:?} in {} has a control character (a newline, a tab, ...) in its name, which no managed path may hold: rename it",
            String::from_utf8_lossy(rel),
            dir.display()
        ),
    };
    std::io::Error::new(std::io::ErrorKind::InvalidInput, message)
}

/// What an entry of a repository folder declares (`None`: a kind that
/// cannot be declared).
fn declared_entry(entry: &Entry) -> Option<DeclaredEntry> {
    match entry {
        Entry::Dir { .. } => Some(DeclaredEntry::Dir),
        Entry::File { size, content, .. } => Some(DeclaredEntry::File {
            blake3: content.digest.0,
            size: *size,
        }),
        Entry::Symlink { target, .. } => Some(DeclaredEntry::Symlink(target.clone())),
        Entry::Other { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(bytes: &[u8]) -> DeclaredEntry {
        DeclaredEntry::File {
            blake3: *blake3_of(bytes),
            size: bytes.len() as u64,
        }
    }

    fn blake3_of(bytes: &[u8]) -> Box<[u8; 32]> {
        Box::new(Algorithm::Native.hash_content(bytes).digest.0)
    }

    fn entries_of(t: &DeclaredTree) -> DeclaredEntries {
        t.iter()
            .map(|(p, e)| (p.to_vec(), e.to_owned_entry()))
            .collect()
    }

    #[test]
    fn round_trip_keeps_every_entry_in_tree_order() {
        let mut t = DeclaredEntries::new();
        t.insert(b"a.conf".to_vec(), file(b"x = 1\n"));
        t.insert(b"sub".to_vec(), DeclaredEntry::Dir);
        t.insert(b"sub-x".to_vec(), DeclaredEntry::Dir);
        t.insert(
            b"sub/link".to_vec(),
            DeclaredEntry::Symlink(b"../a.conf".to_vec()),
        );
        t.insert(b"odd name\n".to_vec(), file(b""));
        let bytes = encode(Path::new("/repo/t"), &t);
        assert_eq!(bytes.capacity(), bytes.len(), "sized before it is written");
        let shared = bytes::Bytes::from(bytes);
        let back = decode(shared.clone()).unwrap();
        assert_eq!(entries_of(&back), t);
        // The packed bytes are kept, not copied; the order is sized exactly
        // (5 entries, not a power of two).
        assert_eq!(back.packed.as_ptr(), shared.as_ptr());
        assert_eq!(back.order.capacity(), 5);
        let order: Vec<&[u8]> = back.iter().map(|(p, _)| p).collect();
        let want: [&[u8]; 5] = [b"a.conf", b"odd name\n", b"sub", b"sub/link", b"sub-x"];
        assert_eq!(order, want);
        assert_eq!(back.source_of(b"sub/link"), Path::new("/repo/t/sub/link"));
        assert_eq!(back.get(b"sub-x"), Some(EntryRef::Dir));
        assert_eq!(back.get(b"sub/none"), None);
        assert_eq!(
            back.get(b"odd name\n"),
            Some(EntryRef::File {
                blake3: &blake3_of(b""),
                size: 0
            })
        );
    }

    #[test]
    fn the_checksum_ignores_where_the_repository_is() {
        let here: DeclaredEntries = [(b"a".to_vec(), file(b"x"))].into();
        let other: DeclaredEntries = [(b"a".to_vec(), file(b"y"))].into();
        let (one, two) = (Path::new("/one"), Path::new("/two"));
        assert_eq!(pack(one, &here).sha256, pack(two, &here).sha256);
        assert_ne!(pack(one, &here).sha256, pack(one, &other).sha256);
        assert_eq!(entries_of(&decode(pack(one, &here).bytes).unwrap()), here);
    }

    /// A file `a`, a folder `d` and in it a link `d/l` to `../a`.
    fn file_folder_link() -> DeclaredEntries {
        [
            (b"a".to_vec(), file(b"x")),
            (b"d".to_vec(), DeclaredEntry::Dir),
            (b"d/l".to_vec(), DeclaredEntry::Symlink(b"../a".to_vec())),
        ]
        .into()
    }

    /// The checksum (and so every Tree's declaration hash) is what the
    /// previous format gave: a catalogue compiled by an older build does not
    /// see its Trees as changed.
    #[test]
    fn the_checksum_is_the_one_the_previous_format_gave() {
        let t = file_folder_link();
        // `datum-tree2`, each file's repository path left empty, written out
        // by hand.
        let mut v2 = b"datum-tree2\n".to_vec();
        v2.extend_from_slice(b"f\x01\0\0\0a\x28\0\0\0\0\0\0\0");
        v2.extend_from_slice(&*blake3_of(b"x"));
        v2.extend_from_slice(&1u64.to_le_bytes());
        v2.extend_from_slice(b"d\x01\0\0\0d\0\0\0\0\0\0\0\0");
        v2.extend_from_slice(b"l\x03\0\0\0d/l\x04\0\0\0\0\0\0\0../a");
        assert_eq!(
            pack(Path::new("/r"), &t).sha256,
            datum_core::sha256_hex(&v2)
        );
    }

    #[test]
    fn a_kind_that_fixes_its_payload_packs_no_length() {
        let t = file_folder_link();
        let mut want = b"datum-tree5\n\x02\0\0\0/r".to_vec();
        want.extend_from_slice(b"f\x01\0\0\0a");
        want.extend_from_slice(&*blake3_of(b"x"));
        want.extend_from_slice(&1u64.to_le_bytes());
        want.extend_from_slice(b"d\x01\0\0\0d");
        want.extend_from_slice(b"l\x03\0\0\0d/l\x04\0\0\0../a");
        let bytes = encode(Path::new("/r"), &t);
        assert_eq!(bytes, want);
        assert_eq!(entries_of(&decode(bytes.into()).unwrap()), t);
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_panic() {
        let t: DeclaredEntries = [
            (b"a".to_vec(), file(b"xyz")),
            (b"l".to_vec(), DeclaredEntry::Symlink(b"a".to_vec())),
        ]
        .into();
        let bytes = encode(Path::new("/r"), &t);
        let header = MAGIC.len() + 4 + 2;
        let second = header + 1 + 4 + 1 + FILE_PAYLOAD;
        for cut in 0..bytes.len() {
            if cut == header || cut == second {
                continue; // an empty tree, or the file alone, is valid
            }
            assert!(
                decode(bytes::Bytes::copy_from_slice(&bytes[..cut])).is_err(),
                "cut at {cut}"
            );
        }
        // A kind this format does not know.
        let mut unknown = bytes.clone();
        unknown[header] = b'x';
        assert!(decode(unknown.into()).is_err());
        // A link whose length runs past the end.
        let mut long = bytes.clone();
        long[second + 1 + 4 + 1] = 9;
        assert!(decode(long.into()).is_err());
        assert!(decode(bytes::Bytes::from_static(b"something else")).is_err());
    }

    #[test]
    fn an_entry_without_its_folder_is_refused() {
        let orphan: DeclaredEntries = [(b"d/a".to_vec(), file(b"x"))].into();
        assert!(decode(encode(Path::new("/r"), &orphan).into()).is_err());
        let under_a_file: DeclaredEntries =
            [(b"d".to_vec(), file(b"x")), (b"d/a".to_vec(), file(b"x"))].into();
        assert!(decode(encode(Path::new("/r"), &under_a_file).into()).is_err());
        let empty_part: DeclaredEntries = [(b"/a".to_vec(), file(b"x"))].into();
        assert!(decode(encode(Path::new("/r"), &empty_part).into()).is_err());
    }

    #[test]
    fn reads_a_folder_by_hash_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"A").unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", dir.path().join("l")).unwrap();
        let t = entries_of(&decode(pack_source_dir(dir.path()).unwrap().bytes).unwrap());
        assert_eq!(t.get(&b"a"[..]), Some(&file(b"A")));
        assert_eq!(t.get(&b"empty"[..]), Some(&DeclaredEntry::Dir));
        assert_eq!(
            t.get(&b"l"[..]),
            Some(&DeclaredEntry::Symlink(b"/etc/shadow".to_vec()))
        );
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn a_deep_folder_reads_as_the_whole_scan_says_and_a_socket_is_named() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["a/b/c", "a/b-x", "z", "a-b"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        for (f, bytes) in [
            ("a/b/c/deep", "1"),
            ("a/b/f", "2"),
            ("a/top", "3"),
            ("r", "4"),
        ] {
            std::fs::write(dir.path().join(f), bytes).unwrap();
        }
        std::os::unix::fs::symlink("../r", dir.path().join("a/b/l")).unwrap();
        // The oracle: every entry of the whole scanned tree.
        let options = ScanOptions {
            algorithm: Algorithm::Native,
            exclude: None,
            threads: 0,
            progress: None,
        };
        let whole = datum_host::tree_scan::scan(dir.path(), &options).unwrap();
        let want: DeclaredEntries = whole
            .tree
            .walk()
            .into_iter()
            .filter(|(rel, _)| !rel.as_os_str().is_empty())
            .map(|(rel, node)| {
                let entry = declared_entry(&node.entry).unwrap();
                (rel.as_os_str().as_bytes().to_vec(), entry)
            })
            .collect();
        assert_eq!(want.len(), 11);
        // Packed folder by folder as the scan finishes them, joined in tree
        // order: the very bytes and checksum of packing the whole list.
        let got = pack_source_dir(dir.path()).unwrap();
        let whole = pack(dir.path(), &want);
        assert_eq!(entries_of(&decode(got.bytes.clone()).unwrap()), want);
        assert_eq!(got.bytes, whole.bytes);
        assert_eq!(got.sha256, whole.sha256);
        assert_eq!(got.size, whole.size);

        // Two sockets: the first in byte order is the one named.
        let _sockets: Vec<_> = ["a/b/c/zz-sock", "a/b/a-sock"]
            .iter()
            .map(|s| std::os::unix::net::UnixListener::bind(dir.path().join(s)).unwrap())
            .collect();
        let err = pack_source_dir(dir.path()).unwrap_err().to_string();
        let first = dir.path().join("a/b/a-sock");
        assert!(err.contains(&first.display().to_string()), "{err}");
    }

    /// The apply reads each declared file by its path in the repository,
    /// which the kernel refuses past PATH_MAX: a folder deep enough that an
    /// entry's path is longer is refused when it is read, naming the
    /// entry, rather than by the apply after the folders above it were made.
    #[test]
    fn an_entry_whose_repository_path_is_too_long_to_read_is_refused() {
        // Built from the bottom up, each step a rename of short paths: the
        // whole path is too long for any one call.
        let dir = tempfile::tempdir().unwrap();
        let level = |i: usize| dir.path().join(format!("c{i}"));
        std::fs::create_dir(level(0)).unwrap();
        std::fs::write(level(0).join("deep.conf"), b"x").unwrap();
        let mut depth = 0;
        while level(depth).as_os_str().len() + depth * 201 + "/deep.conf".len() <= 4095 {
            depth += 1;
            std::fs::create_dir(level(depth)).unwrap();
            std::fs::rename(level(depth - 1), level(depth).join("d".repeat(200))).unwrap();
        }
        let err = pack_source_dir(&level(depth)).unwrap_err().to_string();
        assert!(err.contains("deep.conf"), "{err}");
        assert!(err.contains("4095"), "{err}");
        // One level less is read.
        std::fs::rename(level(depth).join("d".repeat(200)), level(depth - 1)).unwrap();
        assert!(pack_source_dir(&level(depth - 1)).is_ok());
    }

    /// No managed path may hold a control character (the backup store
    /// refuses one, and a newline in a plan's field forges a line): a tree
    /// source declaring such a name is refused when it is read, naming the
    /// entry with the character escaped, rather than created by the first
    /// apply and failing every change after it.
    #[test]
    fn a_name_with_a_control_character_is_refused_and_named_escaped() {
        for name in ["new\nline", "tab\there", "esc\u{1b}[2J", "del\u{7f}"] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("sub")).unwrap();
            std::fs::write(dir.path().join("ok"), b"1").unwrap();
            std::fs::write(dir.path().join("sub").join(name), b"2").unwrap();
            let err = pack_source_dir(dir.path()).unwrap_err().to_string();
            assert!(err.contains("control character"), "{name:?}: {err}");
            let shown = format!("{:?}", format!("sub/{name}"));
            assert!(err.contains(&shown), "{name:?}: {err}");
            assert!(!err.contains(name), "{name:?} shown raw: {err}");
        }
    }
}
