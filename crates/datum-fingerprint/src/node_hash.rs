//! The payload formats: how a node and its children's fingerprints become the node's
//! fingerprint, for each [`Algorithm`]; and fingerprinting a whole [`Node`] tree.
//!
//! Owns: the byte layout of every hashed payload (changing one changes every stored
//! fingerprint, so each format is versioned, documented on [`Algorithm`] and pinned by
//! golden values in the tests below). Must not: read the
//! file system; a declared tree and a scanned tree go through the very same functions,
//! which is what makes "one equal root hash" a proof.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::Digest as _;

use crate::digest::{Algorithm, ContentHash, Digest};
use crate::error::FingerprintError;
use crate::tree::{Entry, FingerprintedNode, FingerprintedTree, Node, OtherKind, bytes_as_path};

/// Fingerprints a whole tree (consuming it), keeping every node's hash.
///
/// Fails only when a file's content hash was made with a different function than the
/// algorithm's (e.g. SHA-256 checksums from the catalogue fingerprinted as native).
pub fn fingerprint_tree(
    node: Node,
    algorithm: Algorithm,
) -> Result<FingerprintedTree, FingerprintError> {
    let mut path = PathBuf::new();
    let root = fingerprint_owned(node, algorithm, &mut path)?;
    Ok(FingerprintedTree { algorithm, root })
}

/// The root fingerprint of a declared tree (built from the catalogue), without copying it.
///
/// Equal to the root hash that `datum_host::tree_scan::scan` returns for a host tree that
/// matches the declaration in every attribute the algorithm covers.
pub fn fingerprint_declared(node: &Node, algorithm: Algorithm) -> Result<Digest, FingerprintError> {
    let mut path = PathBuf::new();
    fingerprint_borrowed(node, algorithm, &mut path)
}

fn fingerprint_owned(
    node: Node,
    algorithm: Algorithm,
    path: &mut PathBuf,
) -> Result<FingerprintedNode, FingerprintError> {
    let entry = node.entry();
    match node {
        Node::Dir { children, .. } => {
            let mut done = BTreeMap::new();
            for (name, child) in children {
                path.push(bytes_as_path(&name));
                let fingerprinted = fingerprint_owned(child, algorithm, path)?;
                path.pop();
                done.insert(name, fingerprinted);
            }
            let hash = dir_hash(
                algorithm,
                &entry,
                done.len(),
                done.iter()
                    .map(|(name, child)| (name.as_slice(), &child.hash)),
            );
            Ok(FingerprintedNode {
                hash,
                entry,
                children: done,
            })
        }
        _ => Ok(FingerprintedNode {
            hash: leaf_hash(algorithm, &entry, path)?,
            entry,
            children: BTreeMap::new(),
        }),
    }
}

fn fingerprint_borrowed(
    node: &Node,
    algorithm: Algorithm,
    path: &mut PathBuf,
) -> Result<Digest, FingerprintError> {
    let entry = node.entry();
    match node {
        Node::Dir { children, .. } => {
            let mut hashes = Vec::with_capacity(children.len());
            for (name, child) in children {
                path.push(bytes_as_path(name));
                hashes.push((
                    name.as_slice(),
                    fingerprint_borrowed(child, algorithm, path)?,
                ));
                path.pop();
            }
            Ok(dir_hash(
                algorithm,
                &entry,
                hashes.len(),
                hashes.iter().map(|(name, hash)| (*name, hash)),
            ))
        }
        _ => leaf_hash(algorithm, &entry, path),
    }
}

const NATIVE_FILE: &[u8] = b"datum-fp1:f";
const NATIVE_LINK: &[u8] = b"datum-fp1:l";
const NATIVE_OTHER: &[u8] = b"datum-fp1:o";
const NATIVE_DIR: &[u8] = b"datum-fp1:d";

/// The fingerprint of a non-directory entry (`path`, relative to the tree root, names it
/// in the error). What [`fingerprint_tree`] computes for every leaf; public so that a scan
/// can hash leaves as it meets them and keep no tree (`datum_host::tree_scan::scan_root`).
///
/// Fails only when a file's content hash was made with another function than the
/// algorithm's.
pub fn leaf_hash(
    algorithm: Algorithm,
    entry: &Entry,
    path: &Path,
) -> Result<Digest, FingerprintError> {
    if let Entry::File { content, .. } = entry {
        check_content_function(algorithm, content, path)?;
    }
    Ok(match algorithm {
        Algorithm::Compat => {
            let payload = match entry {
                Entry::File {
                    mode,
                    uid,
                    gid,
                    content,
                    ..
                } => {
                    let hex = content.digest.hex_bytes();
                    let mut text = format!("f:{:o}:{uid}:{gid}:", mode & 0o7777).into_bytes();
                    text.extend_from_slice(&hex);
                    text
                }
                Entry::Symlink { mode, .. } | Entry::Other { mode, .. } => {
                    format!("o:{:o}", mode & 0o7777).into_bytes()
                }
                // Directories never come here, but the spec's leaf rule would apply.
                Entry::Dir { mode, .. } => format!("o:{:o}", mode & 0o7777).into_bytes(),
            };
            Digest(sha2::Sha256::digest(&payload).into())
        }
        Algorithm::Native => {
            let mut h = blake3::Hasher::new();
            match entry {
                Entry::File {
                    mode,
                    uid,
                    gid,
                    content,
                    ..
                } => {
                    h.update(NATIVE_FILE);
                    h.update(&mode.to_le_bytes());
                    h.update(&uid.to_le_bytes());
                    h.update(&gid.to_le_bytes());
                    h.update(&content.digest.0);
                }
                Entry::Symlink { mode, target } => {
                    h.update(NATIVE_LINK);
                    h.update(&mode.to_le_bytes());
                    h.update(&(target.len() as u64).to_le_bytes());
                    h.update(target);
                }
                Entry::Other { mode, kind } => {
                    h.update(NATIVE_OTHER);
                    h.update(&[other_tag(*kind)]);
                    h.update(&mode.to_le_bytes());
                }
                // Directories never come here; hashing one as an empty directory keeps the
                // function total.
                Entry::Dir { .. } => return Ok(dir_hash(algorithm, entry, 0, std::iter::empty())),
            }
            Digest(*h.finalize().as_bytes())
        }
    })
}

/// The fingerprint of a directory from its own attributes and its children's hashes,
/// which must come in raw byte order of their names; `count` is how many there are.
/// What [`fingerprint_tree`] computes for every directory; public for the same reason as
/// [`leaf_hash`].
pub fn dir_hash<'a>(
    algorithm: Algorithm,
    entry: &Entry,
    count: usize,
    children: impl Iterator<Item = (&'a [u8], &'a Digest)>,
) -> Digest {
    match algorithm {
        Algorithm::Compat => {
            let mut h = sha2::Sha256::new();
            for (i, (name, child)) in children.enumerate() {
                if i > 0 {
                    h.update(b"\n");
                }
                h.update(name);
                h.update(b"=");
                h.update(child.hex_bytes());
            }
            Digest(h.finalize().into())
        }
        Algorithm::Native => {
            let (mode, uid, gid) = match entry {
                Entry::Dir { mode, uid, gid } => (*mode, *uid, *gid),
                _ => (0, 0, 0),
            };
            let mut h = blake3::Hasher::new();
            h.update(NATIVE_DIR);
            h.update(&mode.to_le_bytes());
            h.update(&uid.to_le_bytes());
            h.update(&gid.to_le_bytes());
            h.update(&(count as u64).to_le_bytes());
            for (name, child) in children {
                h.update(&(name.len() as u64).to_le_bytes());
                h.update(name);
                h.update(&child.0);
            }
            Digest(*h.finalize().as_bytes())
        }
    }
}

fn other_tag(kind: OtherKind) -> u8 {
    match kind {
        OtherKind::Fifo => 1,
        OtherKind::Socket => 2,
        OtherKind::CharDevice => 3,
        OtherKind::BlockDevice => 4,
    }
}

fn check_content_function(
    algorithm: Algorithm,
    content: &ContentHash,
    path: &Path,
) -> Result<(), FingerprintError> {
    if content.function == algorithm.content_function() {
        Ok(())
    } else {
        Err(FingerprintError::ContentFunction {
            path: path.to_path_buf(),
            algorithm,
            expected: algorithm.content_function(),
            found: content.function,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex_sha256(bytes: &[u8]) -> String {
        Digest(sha2::Sha256::digest(bytes).into()).to_string()
    }

    #[test]
    fn compat_file_leaf_is_the_spec_payload() {
        let node = Node::file_with_bytes(Algorithm::Compat, 0o4755, 7, 8, b"hi\n");
        let payload = "f:4755:7:8:98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4";
        assert_eq!(
            fingerprint_declared(&node, Algorithm::Compat)
                .unwrap()
                .to_string(),
            hex_sha256(payload.as_bytes())
        );
    }

    /// The bench README's tree (`a` = "hi\n" 0644, `b` -> `a`, empty `d` and `e`, all
    /// 0755/0:0 where it applies) in the native format. These values were computed
    /// independently from the layout documented on `Algorithm` (Python + `b3sum`), so a
    /// change here is a change of format: bump the `datum-fp1` tag, never the values.
    #[test]
    fn native_golden_values_pin_the_documented_format() {
        let file = Node::file_with_bytes(Algorithm::Native, 0o644, 0, 0, b"hi\n");
        assert_eq!(
            fingerprint_declared(&file, Algorithm::Native)
                .unwrap()
                .to_string(),
            "37c74fb5600c1eaf47831c59a9dd1949421b770c528b46b81330d6f354d5f3a3"
        );
        assert_eq!(
            fingerprint_declared(&Node::symlink("a"), Algorithm::Native)
                .unwrap()
                .to_string(),
            "9a72743427467eb35293a588d72b0aa6327fe8f88e8496e31934e3ae9504e6d8"
        );
        let mut root = Node::dir(0o755, 0, 0);
        for (name, child) in [
            ("a", file),
            ("b", Node::symlink("a")),
            ("d", Node::dir(0o755, 0, 0)),
            ("e", Node::dir(0o755, 0, 0)),
        ] {
            assert!(root.insert(name, child).is_ok());
        }
        assert_eq!(
            fingerprint_declared(&root, Algorithm::Native)
                .unwrap()
                .to_string(),
            "e7f4a3dd6b3b24a4c9d57336f3f1246a031e83955434cd049f7ed3cb2c8875df"
        );
    }

    #[test]
    fn compat_ignores_symlink_target_and_directory_owner_native_does_not() {
        let a = Node::symlink("one");
        let b = Node::symlink("two");
        assert_eq!(
            fingerprint_declared(&a, Algorithm::Compat).unwrap(),
            fingerprint_declared(&b, Algorithm::Compat).unwrap()
        );
        assert_eq!(
            fingerprint_declared(&a, Algorithm::Compat)
                .unwrap()
                .to_string(),
            hex_sha256(b"o:777")
        );
        assert_ne!(
            fingerprint_declared(&a, Algorithm::Native).unwrap(),
            fingerprint_declared(&b, Algorithm::Native).unwrap()
        );
        let d1 = Node::dir(0o755, 0, 0);
        let d2 = Node::dir(0o700, 1, 0);
        assert_eq!(
            fingerprint_declared(&d1, Algorithm::Compat)
                .unwrap()
                .to_string(),
            hex_sha256(b"")
        );
        assert_eq!(
            fingerprint_declared(&d1, Algorithm::Compat).unwrap(),
            fingerprint_declared(&d2, Algorithm::Compat).unwrap()
        );
        assert_ne!(
            fingerprint_declared(&d1, Algorithm::Native).unwrap(),
            fingerprint_declared(&d2, Algorithm::Native).unwrap()
        );
    }

    #[test]
    fn native_distinguishes_a_fifo_from_a_socket_and_an_empty_file_from_a_dir() {
        let fifo = Node::Other {
            mode: 0o644,
            kind: OtherKind::Fifo,
        };
        let sock = Node::Other {
            mode: 0o644,
            kind: OtherKind::Socket,
        };
        assert_ne!(
            fingerprint_declared(&fifo, Algorithm::Native).unwrap(),
            fingerprint_declared(&sock, Algorithm::Native).unwrap()
        );
        // The spec's function cannot tell them apart.
        assert_eq!(
            fingerprint_declared(&fifo, Algorithm::Compat).unwrap(),
            fingerprint_declared(&sock, Algorithm::Compat).unwrap()
        );
    }

    #[test]
    fn native_names_are_length_prefixed_so_equals_signs_cannot_collide() {
        // Compat: "a=" + hex(x) joined with "\n" could be forged by a name containing "=";
        // native: the two layouts below differ.
        let leaf = Node::symlink("t");
        let mut one = Node::dir(0o755, 0, 0);
        assert!(one.insert("a=b", leaf.clone()).is_ok());
        let mut two = Node::dir(0o755, 0, 0);
        assert!(two.insert("a", leaf).is_ok());
        assert_ne!(
            fingerprint_declared(&one, Algorithm::Native).unwrap(),
            fingerprint_declared(&two, Algorithm::Native).unwrap()
        );
    }

    #[test]
    fn owned_and_borrowed_fingerprints_agree() {
        for algorithm in [Algorithm::Compat, Algorithm::Native] {
            let mut root = Node::dir(0o755, 0, 0);
            let mut sub = Node::dir(0o700, 0, 0);
            assert!(
                sub.insert("f", Node::file_with_bytes(algorithm, 0o600, 0, 0, b"abc"))
                    .is_ok()
            );
            assert!(root.insert("sub", sub).is_ok());
            assert!(root.insert("l", Node::symlink("sub/f")).is_ok());
            let borrowed = fingerprint_declared(&root, algorithm).unwrap();
            let owned = fingerprint_tree(root, algorithm).unwrap();
            assert_eq!(owned.root_hash(), borrowed);
            assert_eq!(owned.walk().len(), 4);
        }
    }

    #[test]
    fn a_content_hash_of_the_wrong_function_is_refused_with_its_path() {
        let mut root = Node::dir(0o755, 0, 0);
        assert!(
            root.insert(
                "f",
                Node::file_with_bytes(Algorithm::Compat, 0o644, 0, 0, b"x")
            )
            .is_ok()
        );
        let err = fingerprint_declared(&root, Algorithm::Native).unwrap_err();
        assert!(err.to_string().contains("f"), "{err}");
        assert!(
            matches!(err, FingerprintError::ContentFunction { ref path, .. } if path == Path::new("f"))
        );
    }
}
