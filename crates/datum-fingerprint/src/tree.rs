//! The tree model: what a directory tree is made of, declared or observed, and the same
//! tree with every node's fingerprint attached.
//!
//! Owns: [`Node`] (what the Tree provider builds from the catalogue and what `scan` builds
//! from the host), [`Entry`]/[`EntryKind`] (a node without its children), and
//! [`FingerprintedTree`]. Must not: read the file system or choose payload formats
//! (`node_hash.rs` does).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::digest::{Algorithm, ContentHash, Digest};
use crate::exclude::Exclusions;

/// One entry of a tree. Names are raw bytes (no decoding: a Unix file name is any byte
/// string without `/` and NUL); modes are the permission bits `st_mode & 0o7777`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A directory and its entries, keyed (and so ordered) by raw byte name.
    Dir {
        /// Permission bits.
        mode: u32,
        /// Owner id.
        uid: u32,
        /// Group id.
        gid: u32,
        /// Entries by raw byte name.
        children: BTreeMap<Vec<u8>, Node>,
    },
    /// A regular file.
    File {
        /// Permission bits.
        mode: u32,
        /// Owner id.
        uid: u32,
        /// Group id.
        gid: u32,
        /// Length in bytes (informational: the content hash covers it).
        size: u64,
        /// Hash of the bytes, made with the algorithm's content function.
        content: ContentHash,
    },
    /// A symbolic link (never followed).
    Symlink {
        /// Permission bits (0o777 on Linux).
        mode: u32,
        /// The link's target, raw bytes as `readlink` returns them.
        target: Vec<u8>,
    },
    /// A fifo, socket or device node.
    Other {
        /// Permission bits.
        mode: u32,
        /// Which kind of special file.
        kind: OtherKind,
    },
}

/// The special-file kinds that are neither directories, regular files nor symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OtherKind {
    /// A named pipe.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
}

/// What kind of entry a path is; what `TypeChanged` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A directory.
    Directory,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A fifo, socket or device.
    Other(OtherKind),
}

impl EntryKind {
    /// The word used in reports.
    pub fn name(self) -> &'static str {
        match self {
            EntryKind::Directory => "directory",
            EntryKind::File => "file",
            EntryKind::Symlink => "symlink",
            EntryKind::Other(OtherKind::Fifo) => "fifo",
            EntryKind::Other(OtherKind::Socket) => "socket",
            EntryKind::Other(OtherKind::CharDevice) => "character device",
            EntryKind::Other(OtherKind::BlockDevice) => "block device",
        }
    }
}

impl std::fmt::Display for EntryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A node's own attributes, without its children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory's own attributes.
    Dir {
        /// Permission bits.
        mode: u32,
        /// Owner id.
        uid: u32,
        /// Group id.
        gid: u32,
    },
    /// A regular file.
    File {
        /// Permission bits.
        mode: u32,
        /// Owner id.
        uid: u32,
        /// Group id.
        gid: u32,
        /// Length in bytes.
        size: u64,
        /// Hash of the bytes.
        content: ContentHash,
    },
    /// A symbolic link.
    Symlink {
        /// Permission bits.
        mode: u32,
        /// The link's target.
        target: Vec<u8>,
    },
    /// A fifo, socket or device node.
    Other {
        /// Permission bits.
        mode: u32,
        /// Which kind.
        kind: OtherKind,
    },
}

impl Entry {
    /// What kind of entry this is.
    pub fn kind(&self) -> EntryKind {
        match self {
            Entry::Dir { .. } => EntryKind::Directory,
            Entry::File { .. } => EntryKind::File,
            Entry::Symlink { .. } => EntryKind::Symlink,
            Entry::Other { kind, .. } => EntryKind::Other(*kind),
        }
    }
}

impl Node {
    /// An empty directory.
    pub fn dir(mode: u32, uid: u32, gid: u32) -> Node {
        Node::Dir {
            mode,
            uid,
            gid,
            children: BTreeMap::new(),
        }
    }

    /// A regular file whose bytes are `bytes`, hashed for `algorithm`.
    pub fn file_with_bytes(
        algorithm: Algorithm,
        mode: u32,
        uid: u32,
        gid: u32,
        bytes: &[u8],
    ) -> Node {
        Node::File {
            mode,
            uid,
            gid,
            size: bytes.len() as u64,
            content: algorithm.hash_content(bytes),
        }
    }

    /// A symbolic link to `target` (mode 0o777, as Linux creates them).
    pub fn symlink(target: impl Into<Vec<u8>>) -> Node {
        Node::Symlink {
            mode: 0o777,
            target: target.into(),
        }
    }

    /// What kind of entry this is.
    pub fn kind(&self) -> EntryKind {
        match self {
            Node::Dir { .. } => EntryKind::Directory,
            Node::File { .. } => EntryKind::File,
            Node::Symlink { .. } => EntryKind::Symlink,
            Node::Other { kind, .. } => EntryKind::Other(*kind),
        }
    }

    /// Adds or replaces the entry `name` of a directory; returns the replaced one.
    /// On a node that is not a directory nothing changes and `child` comes back as `Err`.
    pub fn insert(&mut self, name: impl Into<Vec<u8>>, child: Node) -> Result<Option<Node>, Node> {
        match self {
            Node::Dir { children, .. } => Ok(children.insert(name.into(), child)),
            _ => Err(child),
        }
    }

    /// The entry at `rel` (a relative path; empty = this node), following directories only.
    pub fn get(&self, rel: &Path) -> Option<&Node> {
        let mut node = self;
        for part in rel.components() {
            let name = component_bytes(&part)?;
            match node {
                Node::Dir { children, .. } => node = children.get(name)?,
                _ => return None,
            }
        }
        Some(node)
    }

    /// Removes every entry that `exclusions` match (paths relative to this node), so a
    /// declared tree leaves out exactly what a scan with the same rules leaves out.
    pub fn prune(&mut self, exclusions: &Exclusions) {
        let mut path = PathBuf::new();
        prune_into(self, exclusions, &mut path);
    }

    /// This node's attributes without its children.
    pub fn entry(&self) -> Entry {
        match self {
            Node::Dir { mode, uid, gid, .. } => Entry::Dir {
                mode: *mode,
                uid: *uid,
                gid: *gid,
            },
            Node::File {
                mode,
                uid,
                gid,
                size,
                content,
            } => Entry::File {
                mode: *mode,
                uid: *uid,
                gid: *gid,
                size: *size,
                content: *content,
            },
            Node::Symlink { mode, target } => Entry::Symlink {
                mode: *mode,
                target: target.clone(),
            },
            Node::Other { mode, kind } => Entry::Other {
                mode: *mode,
                kind: *kind,
            },
        }
    }
}

fn prune_into(node: &mut Node, exclusions: &Exclusions, path: &mut PathBuf) {
    if let Node::Dir { children, .. } = node {
        children.retain(|name, child| {
            path.push(bytes_as_path(name));
            let keep = !exclusions.is_excluded(path, matches!(child, Node::Dir { .. }));
            if keep {
                prune_into(child, exclusions, path);
            }
            path.pop();
            keep
        });
    }
}

/// A raw file name as a path component (Unix: names are bytes).
pub(crate) fn bytes_as_path(name: &[u8]) -> &Path {
    use std::os::unix::ffi::OsStrExt;
    Path::new(std::ffi::OsStr::from_bytes(name))
}

fn component_bytes<'a>(part: &std::path::Component<'a>) -> Option<&'a [u8]> {
    use std::os::unix::ffi::OsStrExt;
    match part {
        std::path::Component::Normal(name) => Some(name.as_bytes()),
        _ => None,
    }
}

/// A node with its fingerprint, and its children's (for a directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FingerprintedNode {
    /// This node's fingerprint under the tree's algorithm.
    pub hash: Digest,
    /// The node's own attributes.
    pub entry: Entry,
    /// A directory's entries by raw byte name; empty for every other kind.
    pub children: BTreeMap<Vec<u8>, FingerprintedNode>,
}

impl FingerprintedNode {
    /// The entry at `rel` (relative path; empty = this node).
    pub fn get(&self, rel: &Path) -> Option<&FingerprintedNode> {
        let mut node = self;
        for part in rel.components() {
            node = node.children.get(component_bytes(&part)?)?;
        }
        Some(node)
    }
}

/// Drops the entries below a node from a stack kept here, not by the derived
/// drop's call per level: a host folder chain 20,000 deep (a local user can make
/// one in seconds), kept as it was scanned because it differs, overflowed the 8
/// MiB main thread's stack as `datum check` dropped the scanned tree (about six
/// calls a level in a debug build) and aborted the pass.
impl Drop for FingerprintedNode {
    fn drop(&mut self) {
        let mut below: Vec<FingerprintedNode> =
            std::mem::take(&mut self.children).into_values().collect();
        while let Some(mut node) = below.pop() {
            below.extend(std::mem::take(&mut node.children).into_values());
            // `node` goes here with no entries left to drop.
        }
    }
}

/// A whole tree with every node's fingerprint, and the algorithm that produced them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FingerprintedTree {
    /// The algorithm every hash in the tree was computed with.
    pub algorithm: Algorithm,
    /// The root node (the scanned path itself).
    pub root: FingerprintedNode,
}

impl FingerprintedTree {
    /// The root fingerprint: equal for two trees exactly when they are equal in every
    /// attribute the algorithm covers.
    pub fn root_hash(&self) -> Digest {
        self.root.hash
    }

    /// Every node, parents before children, children in byte order, with its path
    /// relative to the root (the root itself has the empty path).
    pub fn walk(&self) -> Vec<(PathBuf, &FingerprintedNode)> {
        let mut out = Vec::new();
        let mut stack = vec![(PathBuf::new(), &self.root)];
        while let Some((path, node)) = stack.pop() {
            // Pushed in reverse so they pop in byte order.
            for (name, child) in node.children.iter().rev() {
                stack.push((path.join(bytes_as_path(name)), child));
            }
            out.push((path, node));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Node {
        let mut root = Node::dir(0o755, 0, 0);
        let mut sub = Node::dir(0o750, 0, 0);
        assert_eq!(
            sub.insert(
                "x.conf",
                Node::file_with_bytes(Algorithm::Native, 0o644, 0, 0, b"x")
            ),
            Ok(None)
        );
        assert_eq!(root.insert("sub", sub), Ok(None));
        assert_eq!(root.insert("link", Node::symlink("sub")), Ok(None));
        root
    }

    #[test]
    fn get_follows_directories_only() {
        let root = sample();
        assert_eq!(
            root.get(Path::new("sub/x.conf")).map(Node::kind),
            Some(EntryKind::File)
        );
        assert_eq!(
            root.get(Path::new("")).map(Node::kind),
            Some(EntryKind::Directory)
        );
        assert!(root.get(Path::new("link/x.conf")).is_none());
        assert!(root.get(Path::new("../etc")).is_none());
    }

    #[test]
    fn insert_into_a_file_gives_the_child_back() {
        let mut file = Node::file_with_bytes(Algorithm::Compat, 0o644, 0, 0, b"");
        assert!(file.insert("a", Node::symlink("b")).is_err());
    }

    /// A chain of nodes far deeper than a thread's stack allows a call per
    /// level is dropped on a 256 KiB thread (built here without recursion).
    #[test]
    fn a_chain_of_nodes_deeper_than_the_stack_allows_calls_is_dropped() {
        let leaf = |children| FingerprintedNode {
            hash: Digest([0; 32]),
            entry: Entry::Dir {
                mode: 0o755,
                uid: 0,
                gid: 0,
            },
            children,
        };
        let mut node = leaf(BTreeMap::new());
        for _ in 0..100_000 {
            node = leaf(BTreeMap::from([(b"d".to_vec(), node)]));
        }
        let depth = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let mut depth = 0;
                let mut at = &node;
                while let Some(below) = at.children.get(b"d".as_slice()) {
                    at = below;
                    depth += 1;
                }
                drop(node);
                depth
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(depth, 100_000);
    }

    #[test]
    fn prune_removes_matching_entries_and_their_subtrees() {
        let mut root = sample();
        let rules = Exclusions::new(["*.conf", "link"]).unwrap();
        root.prune(&rules);
        assert!(root.get(Path::new("sub")).is_some());
        assert!(root.get(Path::new("sub/x.conf")).is_none());
        assert!(root.get(Path::new("link")).is_none());
    }
}
