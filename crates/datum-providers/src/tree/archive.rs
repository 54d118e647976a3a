//! The declared content of a `Tree`, as one byte string the catalogue carries.
//!
//! The catalogue reads the repository folder named by `source:` and packs it
//! here into [`datum_core::Content`] bytes (never serialised, never printed,
//! hashed like any content so the declaration hash follows every byte). The
//! Tree provider unpacks it. Packing keeps `datum_core::Resource` unchanged:
//! a tree is content with structure.
//!
//! Owns: the format (`datum-tree1\n`, then per entry in path byte order a kind
//! byte `d`/`f`/`l`, a `u32` path length, the path relative to the folder, a
//! `u64` payload length and the payload: file bytes or link target) and
//! [`read_source_dir`], which reads a repository folder. Must not: read the
//! managed host (this reads the repository only), follow a symbolic link
//! (a link in the folder is declared as that link, so it can never pull in
//! a file from outside the repository), or render templates: files are taken
//! verbatim (a `.j2` file is a file named `.j2`).

use std::collections::BTreeMap;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

const MAGIC: &[u8] = b"datum-tree1\n";

/// One declared entry below the tree's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclaredEntry {
    Dir,
    File(Vec<u8>),
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
        let (kind, payload): (u8, &[u8]) = match entry {
            DeclaredEntry::Dir => (b'd', &[]),
            DeclaredEntry::File(bytes) => (b'f', bytes),
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
        let payload = take(&mut at, usize::try_from(plen).map_err(|_| err.clone())?)
            .ok_or(err.clone())?
            .to_vec();
        let entry = match kind {
            b'd' => DeclaredEntry::Dir,
            b'f' => DeclaredEntry::File(payload),
            b'l' => DeclaredEntry::Symlink(payload),
            _ => return Err(err),
        };
        tree.insert(path, entry);
    }
    Ok(tree)
}

/// Reads the repository folder `dir` into a declared tree: regular files with
/// their bytes, folders (empty ones too), links as links. Other entries
/// (fifos, sockets) are refused: they cannot be declared.
pub fn read_source_dir(dir: &Path) -> Result<DeclaredTree, std::io::Error> {
    let mut tree = DeclaredTree::new();
    read_into(dir, &PathBuf::new(), &mut tree)?;
    Ok(tree)
}

fn read_into(base: &Path, rel: &Path, tree: &mut DeclaredTree) -> Result<(), std::io::Error> {
    let dir = base.join(rel);
    for entry in std::fs::read_dir(&dir)? {
        let entry = entry?;
        let child_rel = rel.join(entry.file_name());
        let key = child_rel.as_os_str().as_bytes().to_vec();
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            let target = std::fs::read_link(&path)?;
            tree.insert(
                key,
                DeclaredEntry::Symlink(target.into_os_string().into_vec()),
            );
        } else if kind.is_dir() {
            tree.insert(key, DeclaredEntry::Dir);
            read_into(base, &child_rel, tree)?;
        } else if kind.is_file() {
            tree.insert(key, DeclaredEntry::File(std::fs::read(&path)?));
        } else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} is neither a file, a folder nor a link", path.display()),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_every_entry() {
        let mut t = DeclaredTree::new();
        t.insert(b"a.conf".to_vec(), DeclaredEntry::File(b"x = 1\n".to_vec()));
        t.insert(b"sub".to_vec(), DeclaredEntry::Dir);
        t.insert(
            b"sub/link".to_vec(),
            DeclaredEntry::Symlink(b"../a.conf".to_vec()),
        );
        t.insert(b"odd name\n".to_vec(), DeclaredEntry::File(Vec::new()));
        assert_eq!(decode(&encode(&t)).unwrap(), t);
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_panic() {
        let t: DeclaredTree = [(b"a".to_vec(), DeclaredEntry::File(b"xyz".to_vec()))].into();
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
    fn reads_a_folder_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"A").unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", dir.path().join("l")).unwrap();
        let t = read_source_dir(dir.path()).unwrap();
        assert_eq!(t.get(&b"a"[..]), Some(&DeclaredEntry::File(b"A".to_vec())));
        assert_eq!(t.get(&b"empty"[..]), Some(&DeclaredEntry::Dir));
        assert_eq!(
            t.get(&b"l"[..]),
            Some(&DeclaredEntry::Symlink(b"/etc/shadow".to_vec()))
        );
    }
}
