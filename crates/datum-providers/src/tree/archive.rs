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
//! Owns: the format (`datum-tree2\n`, then per entry in path byte order a kind
//! byte `d`/`f`/`l`, a `u32` path length, the path relative to the folder, a
//! `u64` payload length and the payload: for a file its 32-byte hash, `u64`
//! size and repository path; for a link its target) and [`read_source_dir`].
//! Must not: read the managed host (this reads the repository only), follow
//! a symbolic link (a link in the folder is declared as that link, so it can
//! never pull in a file from outside the repository), or render templates:
//! files are taken verbatim (a `.j2` file is a file named `.j2`).

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use datum_fingerprint::{Algorithm, Entry};
use datum_host::tree_scan::{ScanOptions, scan};

const MAGIC: &[u8] = b"datum-tree2\n";

/// One declared entry below the tree's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclaredEntry {
    Dir,
    File {
        /// BLAKE3 of the bytes (the native fingerprint's content hash).
        blake3: [u8; 32],
        size: u64,
        /// The repository file holding the bytes (absolute).
        source: PathBuf,
    },
    /// The link's target, raw bytes.
    Symlink(Vec<u8>),
}

/// Declared entries by path relative to the root (raw bytes, `/`-separated).
pub type DeclaredTree = BTreeMap<Vec<u8>, DeclaredEntry>;

/// Bytes that are not a packed tree (a catalogue from another build).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the declared tree is damaged at byte {offset}")]
pub struct ArchiveError {
    pub offset: usize,
}

/// Packs `tree` (see the module header for the format).
pub fn encode(tree: &DeclaredTree) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    for (path, entry) in tree {
        let mut file_payload = Vec::new();
        let (kind, payload): (u8, &[u8]) = match entry {
            DeclaredEntry::Dir => (b'd', &[]),
            DeclaredEntry::File {
                blake3,
                size,
                source,
            } => {
                file_payload.extend_from_slice(blake3);
                file_payload.extend_from_slice(&size.to_le_bytes());
                file_payload.extend_from_slice(source.as_os_str().as_bytes());
                (b'f', &file_payload)
            }
            DeclaredEntry::Symlink(target) => (b'l', target),
        };
        out.push(kind);
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(path);
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        out.extend_from_slice(payload);
    }
    out
}

/// The tree as declared content for the catalogue: the packed bytes, with a
/// checksum over everything but the repository paths (hashes, sizes, names,
/// link targets), so the declaration hash does not change when the
/// repository is checked out elsewhere.
pub fn pack(tree: &DeclaredTree) -> datum_core::Content {
    let bytes = encode(tree);
    let located: DeclaredTree = tree
        .iter()
        .map(|(k, v)| {
            let v = match v {
                DeclaredEntry::File { blake3, size, .. } => DeclaredEntry::File {
                    blake3: *blake3,
                    size: *size,
                    source: PathBuf::new(),
                },
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect();
    datum_core::Content {
        sha256: datum_core::sha256_hex(&encode(&located)),
        size: bytes.len() as u64,
        bytes,
        source: None,
        // A packed tree is compared entry by entry, never as one file.
        blake3: None,
    }
}

/// Unpacks what [`encode`] packed.
pub fn decode(bytes: &[u8]) -> Result<DeclaredTree, ArchiveError> {
    let mut at = MAGIC.len();
    if bytes.get(..at) != Some(MAGIC) {
        return Err(ArchiveError { offset: 0 });
    }
    let mut tree = DeclaredTree::new();
    while at < bytes.len() {
        let err = ArchiveError { offset: at };
        let kind = bytes[at];
        at += 1;
        let take = |at: &mut usize, n: usize| -> Option<&[u8]> {
            let s = bytes.get(*at..at.checked_add(n)?)?;
            *at += n;
            Some(s)
        };
        let len = take(&mut at, 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or(err.clone())? as usize;
        let path = take(&mut at, len).ok_or(err.clone())?.to_vec();
        let plen = take(&mut at, 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or(err.clone())?;
        let payload =
            take(&mut at, usize::try_from(plen).map_err(|_| err.clone())?).ok_or(err.clone())?;
        let entry = match kind {
            b'd' => DeclaredEntry::Dir,
            b'f' => {
                let blake3: [u8; 32] = payload
                    .get(..32)
                    .and_then(|b| b.try_into().ok())
                    .ok_or(err.clone())?;
                let size = payload
                    .get(32..40)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes)
                    .ok_or(err.clone())?;
                let source = PathBuf::from(std::ffi::OsStr::from_bytes(
                    payload.get(40..).ok_or(err.clone())?,
                ));
                DeclaredEntry::File {
                    blake3,
                    size,
                    source,
                }
            }
            b'l' => DeclaredEntry::Symlink(payload.to_vec()),
            _ => return Err(err),
        };
        tree.insert(path, entry);
    }
    Ok(tree)
}

/// Scans the repository folder `dir` into a declared tree: regular files by
/// hash (hashed in parallel, read once, not kept), folders (empty ones too),
/// links as links. Other entries (fifos, sockets) are refused: they cannot be
/// declared.
pub fn read_source_dir(dir: &Path) -> Result<DeclaredTree, std::io::Error> {
    let scanned = scan(
        dir,
        &ScanOptions {
            algorithm: Algorithm::Native,
            exclude: None,
            threads: 0,
            progress: None,
        },
    )
    .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut tree = DeclaredTree::new();
    for (rel, node) in scanned.tree.walk() {
        if rel.as_os_str().is_empty() {
            continue;
        }
        let key = rel.as_os_str().as_bytes().to_vec();
        let entry = match &node.entry {
            Entry::Dir { .. } => DeclaredEntry::Dir,
            Entry::File { size, content, .. } => DeclaredEntry::File {
                blake3: content.digest.0,
                size: *size,
                source: dir.join(&rel),
            },
            Entry::Symlink { target, .. } => DeclaredEntry::Symlink(target.clone()),
            Entry::Other { .. } => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "{} is neither a file, a folder nor a link",
                        dir.join(&rel).display()
                    ),
                ));
            }
        };
        tree.insert(key, entry);
    }
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(bytes: &[u8], source: &str) -> DeclaredEntry {
        DeclaredEntry::File {
            blake3: *blake3_of(bytes),
            size: bytes.len() as u64,
            source: PathBuf::from(source),
        }
    }

    fn blake3_of(bytes: &[u8]) -> Box<[u8; 32]> {
        Box::new(Algorithm::Native.hash_content(bytes).digest.0)
    }

    #[test]
    fn round_trip_keeps_every_entry() {
        let mut t = DeclaredTree::new();
        t.insert(b"a.conf".to_vec(), file(b"x = 1\n", "/repo/t/a.conf"));
        t.insert(b"sub".to_vec(), DeclaredEntry::Dir);
        t.insert(
            b"sub/link".to_vec(),
            DeclaredEntry::Symlink(b"../a.conf".to_vec()),
        );
        t.insert(b"odd name\n".to_vec(), file(b"", "/repo/t/odd name\n"));
        assert_eq!(decode(&encode(&t)).unwrap(), t);
    }

    #[test]
    fn the_checksum_ignores_where_the_repository_is() {
        let here: DeclaredTree = [(b"a".to_vec(), file(b"x", "/one/a"))].into();
        let there: DeclaredTree = [(b"a".to_vec(), file(b"x", "/two/a"))].into();
        let other: DeclaredTree = [(b"a".to_vec(), file(b"y", "/one/a"))].into();
        assert_eq!(pack(&here).sha256, pack(&there).sha256);
        assert_ne!(pack(&here).sha256, pack(&other).sha256);
        assert_eq!(decode(&pack(&here).bytes).unwrap(), here);
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_panic() {
        let t: DeclaredTree = [(b"a".to_vec(), file(b"xyz", "/r/a"))].into();
        let bytes = encode(&t);
        for cut in 0..bytes.len() {
            if cut == MAGIC.len() {
                continue; // an empty tree is valid
            }
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(decode(b"something else").is_err());
    }

    #[test]
    fn reads_a_folder_by_hash_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"A").unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", dir.path().join("l")).unwrap();
        let t = read_source_dir(dir.path()).unwrap();
        assert_eq!(
            t.get(&b"a"[..]),
            Some(&DeclaredEntry::File {
                blake3: *blake3_of(b"A"),
                size: 1,
                source: dir.path().join("a"),
            })
        );
        assert_eq!(t.get(&b"empty"[..]), Some(&DeclaredEntry::Dir));
        assert_eq!(
            t.get(&b"l"[..]),
            Some(&DeclaredEntry::Symlink(b"/etc/shadow".to_vec()))
        );
        assert_eq!(t.len(), 3);
    }
}
