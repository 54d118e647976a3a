//! The declared tree beside the scanned host tree, in one walk.
//!
//! The declared entries come in tree order ([`super::archive::tree_order`]),
//! which is the order a walk of the host tree meets its entries, so the two
//! are merged folder by folder: each declared entry is hashed as it is
//! reached (its folder's hash when the folder's last entry is done) and
//! compared with the host entry of the same name. No second tree is built:
//! what the walk holds is the open folders' children's hashes. It names the
//! same differences, in the same order, with the same values, and gives the
//! same declared root hash as building the declared tree as a
//! [`datum_fingerprint::Node`] tree, fingerprinting it and comparing the two
//! with [`datum_fingerprint::compare_with_values`] (the tests below keep that
//! as the oracle): equal hashes mean equal in every covered attribute, so a
//! subtree that the recursion would skip has no difference to name here
//! either.
//!
//! Owns: which observed attributes stand in for undeclared ones (an owner,
//! group or mode that is not declared is not managed, so the host entry of
//! the same kind at the same path lends its own). Must not: read the host
//! (the host tree comes scanned).

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use datum_fingerprint::{
    Algorithm, ChangedValue, ContentHash, Digest, Entry, EntryKind, Exclusions, FingerprintError,
    FingerprintedNode, HashFunction, TreeDifference, changed_values, dir_hash, leaf_hash,
};

use super::archive::{DeclaredTree, EntryRef};
use super::observe::KeptFolders;
use super::{DEFAULT_DIR_MODE, DEFAULT_FILE_MODE, bytes_path};

/// Every difference with its declared and observed values.
pub type Differences = Vec<(TreeDifference, Vec<ChangedValue>)>;

/// The metadata a Tree declares for all its entries (`None`: not managed).
#[derive(Debug, Clone, Copy, Default)]
pub struct EntryMeta {
    pub file_mode: Option<u32>,
    pub dir_mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// The differences between `declared` (less what `exclusions` leave out)
/// and the host tree `observed` (scanned with the same exclusions), parents
/// first and siblings in byte order, and the declared root hash as compared
/// (undeclared metadata lent by the host). With no `observed` tree: no
/// differences, and the root hash of the declaration alone (undeclared modes
/// the defaults, undeclared owner and group 0). The host folders in `proved`
/// were found equal to their declaration by [`proves`] as the scan went (and
/// their entries were not kept): each is taken as its own hash.
pub fn compare(
    declared: &DeclaredTree,
    meta: &EntryMeta,
    exclusions: &Exclusions,
    observed: Option<&FingerprintedNode>,
    proved: Option<&HashSet<PathBuf>>,
) -> Result<(Differences, Digest), FingerprintError> {
    compare_keeping(declared, meta, exclusions, observed, proved, None)
}

/// [`compare`], where the undeclared host folders in `kept` hold excluded
/// entries (which the scan does not see): such a folder is not unmanaged
/// (a purge would take the excluded entries with it), only what it holds
/// that is neither excluded nor kept is; it stands in the declared tree as
/// it is on the host, so a tree whose only extra folders hold excluded
/// entries is proved by its root hash.
pub fn compare_keeping(
    declared: &DeclaredTree,
    meta: &EntryMeta,
    exclusions: &Exclusions,
    observed: Option<&FingerprintedNode>,
    proved: Option<&HashSet<PathBuf>>,
    kept: Option<&KeptFolders>,
) -> Result<(Differences, Digest), FingerprintError> {
    let mut walk = Walker {
        declared,
        meta,
        exclusions,
        proved,
        kept,
        next: 0,
        found: Vec::new(),
    };
    let mut path = PathBuf::new();
    let hash = walk.child(&[], EntryRef::Dir, observed.is_some(), observed, &mut path)?;
    Ok((walk.found, hash))
}

/// Whether the host folder `observed`, at `rel` below the root, equals its
/// declaration in every covered attribute (its declared hash, undeclared
/// metadata lent by the host as in [`compare`], is its own). Folders below it
/// already in `proved` are taken as proved. What a scan asks of each folder
/// as it finishes it, so that it keeps only the folders that differ.
pub fn proves(
    declared: &DeclaredTree,
    meta: &EntryMeta,
    exclusions: &Exclusions,
    proved: &HashSet<PathBuf>,
    rel: &Path,
    observed: &FingerprintedNode,
) -> bool {
    let at = rel.as_os_str().as_bytes();
    let next = if at.is_empty() {
        0
    } else {
        match declared.find(at) {
            Some(i) if declared.at(i).is_some_and(|(_, e)| e == EntryRef::Dir) => i + 1,
            _ => return false,
        }
    };
    let mut walk = Walker {
        declared,
        meta,
        exclusions,
        proved: Some(proved),
        kept: None,
        next,
        found: Vec::new(),
    };
    let own = walk.own_entry(EntryRef::Dir, Some(&observed.entry));
    let mut path = rel.to_path_buf();
    walk.folder(at, &own, Some(observed), &mut path)
        .is_ok_and(|hash| hash == observed.hash)
}

struct Walker<'a> {
    declared: &'a DeclaredTree,
    meta: &'a EntryMeta,
    exclusions: &'a Exclusions,
    proved: Option<&'a HashSet<PathBuf>>,
    /// Undeclared host folders holding excluded entries (see [`compare_keeping`]).
    kept: Option<&'a KeptFolders>,
    /// The next declared entry, in tree order.
    next: usize,
    found: Differences,
}

/// What [`Walker::child_start`] leaves to do for an entry.
enum Step<'a> {
    /// Its hash: nothing below it to walk.
    Done(Digest),
    /// A folder to walk: its own entry and its host folder, if any.
    Folder(Entry, Option<&'a FingerprintedNode>),
}

/// The host entries of a folder, in name order.
type HostEntries<'a> = std::iter::Peekable<
    std::iter::Flatten<
        std::option::IntoIter<std::collections::btree_map::Iter<'a, Vec<u8>, FingerprintedNode>>,
    >,
>;

/// A folder being walked by [`Walker::folder`].
struct Open<'a> {
    /// Its path bytes.
    at: &'a [u8],
    /// Its name in its parent.
    name: &'a [u8],
    /// Its own entry.
    own: Entry,
    /// Whether it is on the host (its declared entries are then compared).
    observed: bool,
    /// Its host entries not merged yet.
    host: HostEntries<'a>,
    /// The hashes of its entries so far, in name order.
    hashes: Vec<(&'a [u8], Digest)>,
}

impl<'a> Open<'a> {
    fn new(
        at: &'a [u8],
        name: &'a [u8],
        own: Entry,
        observed: Option<&'a FingerprintedNode>,
    ) -> Open<'a> {
        Open {
            at,
            name,
            own,
            observed: observed.is_some(),
            host: observed
                .map(|o| o.children.iter())
                .into_iter()
                .flatten()
                .peekable(),
            hashes: Vec::new(),
        }
    }
}

fn kind_of(entry: EntryRef<'_>) -> EntryKind {
    match entry {
        EntryRef::Dir => EntryKind::Directory,
        EntryRef::File { .. } => EntryKind::File,
        EntryRef::Symlink(_) => EntryKind::Symlink,
    }
}

/// `path`'s name when it is inside the folder `dir` (empty: the root).
fn name_in<'p>(dir: &[u8], path: &'p [u8]) -> Option<&'p [u8]> {
    if dir.is_empty() {
        return Some(path);
    }
    match path.strip_prefix(dir)? {
        [b'/', name @ ..] => Some(name),
        _ => None,
    }
}

impl<'a> Walker<'a> {
    /// The declared attributes of an entry; what is not declared is taken
    /// from `seen` (the host entry of the same kind at the same path), or is
    /// the default when there is none.
    fn own_entry(&self, entry: EntryRef<'_>, seen: Option<&Entry>) -> Entry {
        let (mode, uid, gid) = match seen {
            Some(Entry::Dir { mode, uid, gid } | Entry::File { mode, uid, gid, .. }) => {
                (*mode, *uid, *gid)
            }
            _ if entry == EntryRef::Dir => (DEFAULT_DIR_MODE, 0, 0),
            _ => (DEFAULT_FILE_MODE, 0, 0),
        };
        let uid = self.meta.uid.unwrap_or(uid);
        let gid = self.meta.gid.unwrap_or(gid);
        match entry {
            EntryRef::Dir => Entry::Dir {
                mode: self.meta.dir_mode.unwrap_or(mode),
                uid,
                gid,
            },
            EntryRef::File { blake3, size } => Entry::File {
                mode: self.meta.file_mode.unwrap_or(mode),
                uid,
                gid,
                size,
                content: ContentHash {
                    function: HashFunction::Blake3,
                    digest: Digest(*blake3),
                },
            },
            EntryRef::Symlink(target) => Entry::Symlink {
                mode: 0o777,
                target: target.to_vec(),
            },
        }
    }

    /// One declared entry at `path` (`at`: its path bytes), compared with
    /// `seen` when `compared` (its parent folder is on the host); returns its
    /// hash. A folder's own entries are consumed with it.
    fn child(
        &mut self,
        at: &'a [u8],
        entry: EntryRef<'a>,
        compared: bool,
        seen: Option<&'a FingerprintedNode>,
        path: &mut PathBuf,
    ) -> Result<Digest, FingerprintError> {
        match self.child_start(at, entry, compared, seen, path)? {
            Step::Done(hash) => Ok(hash),
            Step::Folder(own, same) => self.folder(at, &own, same, path),
        }
    }

    /// [`Walker::child`] up to the walk of a folder's entries: the entry's
    /// hash, or the folder to walk (its own entry and its host folder).
    fn child_start(
        &mut self,
        at: &'a [u8],
        entry: EntryRef<'a>,
        compared: bool,
        seen: Option<&'a FingerprintedNode>,
        path: &Path,
    ) -> Result<Step<'a>, FingerprintError> {
        let want = kind_of(entry);
        let same = seen.filter(|o| o.entry.kind() == want);
        if let Some(o) = same
            && want == EntryKind::Directory
            && self.proved.is_some_and(|p| p.contains(path))
        {
            // Found equal as it was scanned: nothing in it differs.
            self.skip_below(at);
            return Ok(Step::Done(o.hash));
        }
        match seen {
            None if compared => self.found.push((
                TreeDifference::Missing {
                    path: path.to_path_buf(),
                },
                Vec::new(),
            )),
            Some(o) if same.is_none() => self.found.push((
                TreeDifference::TypeChanged {
                    path: path.to_path_buf(),
                    declared: want,
                    found: o.entry.kind(),
                },
                Vec::new(),
            )),
            _ => {}
        }
        // Lent metadata only from an entry of the same kind (a link lends
        // nothing: its mode is always 0777).
        let lends = same.filter(|o| matches!(o.entry, Entry::Dir { .. } | Entry::File { .. }));
        let own = self.own_entry(entry, lends.map(|o| &o.entry));
        if let Some(o) = same {
            let values = changed_values(Algorithm::Native, &own, &o.entry);
            if !values.is_empty() {
                self.found.push((
                    TreeDifference::Changed {
                        path: path.to_path_buf(),
                        fields: values.iter().map(|v| v.field).collect(),
                    },
                    values,
                ));
            }
        }
        match entry {
            EntryRef::Dir => Ok(Step::Folder(own, same)),
            _ => leaf_hash(Algorithm::Native, &own, path).map(Step::Done),
        }
    }

    /// The entries of the declared folder `at` (its own entry `own`),
    /// merged with those of the host folder `observed` (when it is one). The
    /// folders below it are walked depth first from a stack kept here, not by
    /// recursion, so a chain of folders of any depth is compared in the same
    /// bounded stack (600 levels overflowed a scan worker's 2 MiB in a debug
    /// build when each level was a call).
    fn folder(
        &mut self,
        at: &'a [u8],
        own: &Entry,
        observed: Option<&'a FingerprintedNode>,
        path: &mut PathBuf,
    ) -> Result<Digest, FingerprintError> {
        let mut stack = vec![Open::new(at, &[], own.clone(), observed)];
        while let Some(top) = stack.last_mut() {
            let next = self
                .declared
                .at(self.next)
                .and_then(|(child_at, entry)| Some((child_at, entry, name_in(top.at, child_at)?)));
            let Some((child_at, entry, name)) = next else {
                // This folder's declared entries are done: what is left on the
                // host is not declared.
                for (n, o) in top.host.by_ref() {
                    if let Some(hash) = self.unmanaged(path, n, o) {
                        top.hashes.push((n, hash));
                    }
                }
                let hash = dir_hash(
                    Algorithm::Native,
                    &top.own,
                    top.hashes.len(),
                    top.hashes.iter().map(|(n, h)| (*n, h)),
                );
                let name = top.name;
                stack.pop();
                match stack.last_mut() {
                    None => return Ok(hash),
                    Some(parent) => {
                        // The finished folder's own name, pushed by its parent.
                        path.pop();
                        parent.hashes.push((name, hash));
                    }
                }
                continue;
            };
            self.next += 1;
            path.push(bytes_path(name));
            let excluded = self.exclusions.is_excluded(path, entry == EntryRef::Dir);
            path.pop();
            if excluded {
                // Left out with everything below it.
                self.skip_below(child_at);
                continue;
            }
            // Host entries before this one are not declared.
            while let Some((n, o)) = top.host.next_if(|(n, _)| n.as_slice() < name) {
                if let Some(hash) = self.unmanaged(path, n, o) {
                    top.hashes.push((n, hash));
                }
            }
            let seen = top
                .host
                .next_if(|(n, _)| n.as_slice() == name)
                .map(|(_, o)| o);
            path.push(bytes_path(name));
            let step = self.child_start(child_at, entry, top.observed, seen, path);
            match step {
                Ok(Step::Done(hash)) => {
                    path.pop();
                    top.hashes.push((name, hash));
                }
                // Walked next; its name stays on `path` until it is done.
                Ok(Step::Folder(own, same)) => {
                    stack.push(Open::new(child_at, name, own, same));
                }
                Err(e) => {
                    path.pop();
                    return Err(e);
                }
            }
        }
        // The stack is left only by returning the first folder's hash.
        Err(FingerprintError::WorkerFailed { path: path.clone() })
    }

    /// Moves past the declared entries below the folder `at`, which come
    /// together from the next one (tree order): the first after them is
    /// found by halving, not by looking at each (a proved folder at depth
    /// k of a chain D deep compared its path with the D - k entries below
    /// it, for every folder of the chain each time the scan finished one).
    fn skip_below(&mut self, at: &[u8]) {
        if at.is_empty() {
            self.next = self.declared.len();
            return;
        }
        let (mut below, mut after) = (self.next, self.declared.len());
        while below < after {
            let mid = below + (after - below) / 2;
            match self.declared.at(mid) {
                Some((p, _)) if name_in(at, p).is_some() => below = mid + 1,
                _ => after = mid,
            }
        }
        self.next = below;
    }

    /// A host entry named `name` in `folder` that nothing declares:
    /// unmanaged, unless it is a folder kept for the excluded entries it
    /// holds; then what it holds is looked at, and its hash (as on the host,
    /// less its unmanaged entries) is returned. The kept folders below it
    /// are walked depth first from a stack kept here, not by a call per
    /// level (a local user's chain of folders thousands deep holding an
    /// excluded entry overflowed the stack and aborted the check).
    fn unmanaged(
        &mut self,
        folder: &Path,
        name: &'a [u8],
        observed: &'a FingerprintedNode,
    ) -> Option<Digest> {
        /// A kept folder being looked at: its own entry and name, its
        /// entries not looked at yet, and the hashes of those kept so far.
        struct Kept<'a> {
            name: &'a [u8],
            entry: &'a Entry,
            entries: std::collections::btree_map::Iter<'a, Vec<u8>, FingerprintedNode>,
            hashes: Vec<(&'a [u8], Digest)>,
        }
        let mut path = folder.join(bytes_path(name));
        if !self.is_kept(&path, observed) {
            self.found
                .push((TreeDifference::Unmanaged { path }, Vec::new()));
            return None;
        }
        let mut stack = vec![Kept {
            name,
            entry: &observed.entry,
            entries: observed.children.iter(),
            hashes: Vec::new(),
        }];
        while let Some(top) = stack.last_mut() {
            if let Some((n, o)) = top.entries.next() {
                path.push(bytes_path(n));
                if self.is_kept(&path, o) {
                    // Looked at next; its name stays on `path` until it is done.
                    stack.push(Kept {
                        name: n,
                        entry: &o.entry,
                        entries: o.children.iter(),
                        hashes: Vec::new(),
                    });
                } else {
                    self.found
                        .push((TreeDifference::Unmanaged { path: path.clone() }, Vec::new()));
                    path.pop();
                }
                continue;
            }
            let hash = dir_hash(
                Algorithm::Native,
                top.entry,
                top.hashes.len(),
                top.hashes.iter().map(|(n, h)| (*n, h)),
            );
            let name = top.name;
            stack.pop();
            match stack.last_mut() {
                None => return Some(hash),
                Some(parent) => {
                    path.pop();
                    parent.hashes.push((name, hash));
                }
            }
        }
        // The stack is left only by returning the first folder's hash.
        None
    }

    /// Whether the host entry `observed` at `path` is a folder kept for the
    /// excluded entries it holds.
    fn is_kept(&self, path: &Path, observed: &FingerprintedNode) -> bool {
        observed.entry.kind() == EntryKind::Directory && self.kept.is_some_and(|k| k.contains(path))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datum_fingerprint::{FingerprintedTree, Node, compare_with_values, fingerprint_tree};

    use super::*;
    use crate::tree::archive::{self, DeclaredEntries, DeclaredEntry};

    /// The comparison as it was before the walk: the declared tree built as
    /// a `Node` tree (what is not declared lent by the host entry of the
    /// same kind at the same path), pruned, fingerprinted and compared.
    fn oracle(
        declared: &DeclaredTree,
        meta: &EntryMeta,
        exclusions: &Exclusions,
        observed: Option<&FingerprintedTree>,
    ) -> (Differences, Digest) {
        let root_seen = observed.map(|o| &o.root);
        let meta_at = |rel: &Path, dir: bool| -> (u32, u32, u32) {
            let default = if dir {
                DEFAULT_DIR_MODE
            } else {
                DEFAULT_FILE_MODE
            };
            let declared_mode = if dir { meta.dir_mode } else { meta.file_mode };
            let seen = root_seen
                .and_then(|o| o.get(rel))
                .and_then(|n| match &n.entry {
                    Entry::Dir { mode, uid, gid } if dir => Some((*mode, *uid, *gid)),
                    Entry::File { mode, uid, gid, .. } if !dir => Some((*mode, *uid, *gid)),
                    _ => None,
                });
            let (sm, su, sg) = seen.unwrap_or((default, 0, 0));
            (
                declared_mode.unwrap_or(sm),
                meta.uid.unwrap_or(su),
                meta.gid.unwrap_or(sg),
            )
        };
        let (rm, ru, rg) = meta_at(Path::new(""), true);
        let mut root = Node::dir(rm, ru, rg);
        for (path, entry) in declared.iter() {
            let rel = bytes_path(path);
            let node = match entry {
                EntryRef::Dir => {
                    let (m, u, g) = meta_at(rel, true);
                    Node::dir(m, u, g)
                }
                EntryRef::File { blake3, size } => {
                    let (m, u, g) = meta_at(rel, false);
                    Node::File {
                        mode: m,
                        uid: u,
                        gid: g,
                        size,
                        content: ContentHash {
                            function: HashFunction::Blake3,
                            digest: Digest(*blake3),
                        },
                    }
                }
                EntryRef::Symlink(target) => Node::symlink(target.to_vec()),
            };
            insert_at(&mut root, path, node);
        }
        root.prune(exclusions);
        let tree = fingerprint_tree(root, Algorithm::Native).unwrap();
        let found = observed
            .map(|o| compare_with_values(&tree, o).unwrap())
            .unwrap_or_default();
        (found, tree.root_hash())
    }

    fn insert_at(root: &mut Node, path: &[u8], node: Node) {
        let mut parts: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
        let Some(last) = parts.pop() else { return };
        let mut here = root;
        for part in parts {
            let Node::Dir { children, .. } = here else {
                return;
            };
            here = children.get_mut(part).unwrap();
        }
        let _ = here.insert(last.to_vec(), node);
    }

    /// xorshift64*: deterministic trees without a dependency.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) % n
        }
        fn pick<T: Copy>(&mut self, from: &[T]) -> T {
            from[self.below(from.len() as u64) as usize]
        }
    }

    /// Names whose byte order differs from tree order (`a-` and `a.b` sort
    /// between `a` and `a/...`).
    const NAMES: [&str; 5] = ["a", "a-", "a.b", "b", "b0"];

    #[derive(Clone)]
    enum G {
        Dir(BTreeMap<&'static str, G>),
        File(u8),
        Link(u8),
    }

    fn generate(rng: &mut Rng, depth: u32) -> BTreeMap<&'static str, G> {
        let mut out = BTreeMap::new();
        for name in NAMES {
            if rng.below(2) == 0 {
                continue;
            }
            let g = match rng.below(if depth == 0 { 2 } else { 4 }) {
                0 => G::File(rng.pick(b"xy")),
                1 => G::Link(rng.pick(b"st")),
                _ => G::Dir(generate(rng, depth - 1)),
            };
            out.insert(name, g);
        }
        out
    }

    /// The host's version of a declared folder: mostly the same, some
    /// entries dropped, replaced, edited or added.
    fn drift(
        rng: &mut Rng,
        declared: &BTreeMap<&'static str, G>,
        depth: u32,
    ) -> BTreeMap<&'static str, G> {
        let mut out = BTreeMap::new();
        for name in NAMES {
            let g = match declared.get(name) {
                None if rng.below(6) == 0 => generate(rng, depth.saturating_sub(1))
                    .into_values()
                    .next()
                    .unwrap_or(G::File(b'z')),
                None => continue,
                Some(g) => match (rng.below(10), g) {
                    (0, _) => continue,
                    (1, _) => G::Dir(generate(rng, depth.saturating_sub(1))),
                    (2, _) => G::File(rng.pick(b"xyz")),
                    (3, _) => G::Link(rng.pick(b"stu")),
                    (_, G::Dir(sub)) => G::Dir(drift(rng, sub, depth.saturating_sub(1))),
                    (_, other) => other.clone(),
                },
            };
            out.insert(name, g);
        }
        out
    }

    fn entries(map: &BTreeMap<&'static str, G>, prefix: &str, out: &mut DeclaredEntries) {
        for (name, g) in map {
            let path = format!("{prefix}{name}");
            let entry = match g {
                G::Dir(sub) => {
                    entries(sub, &format!("{path}/"), out);
                    DeclaredEntry::Dir
                }
                G::File(c) => DeclaredEntry::File {
                    blake3: Algorithm::Native.hash_content(&[*c]).digest.0,
                    size: 1,
                },
                G::Link(t) => DeclaredEntry::Symlink(vec![*t]),
            };
            out.insert(path.into_bytes(), entry);
        }
    }

    /// The host tree: metadata random, or (`clean`) what a declared Tree
    /// gets (modes 0644 and 0755, owner 0, group 8).
    fn host_node(rng: &mut Rng, map: &BTreeMap<&'static str, G>, clean: bool) -> Node {
        let mut pick = |from: &[u32]| if clean { from[0] } else { rng.pick(from) };
        let mut dir = Node::dir(pick(&[0o755, 0o700]), pick(&[0, 7]), pick(&[8, 0]));
        for (name, g) in map {
            let node = match g {
                G::Dir(sub) => host_node(rng, sub, clean),
                G::File(c) => {
                    let (mode, uid, gid) = if clean {
                        (0o644, 0, 8)
                    } else {
                        (
                            rng.pick(&[0o644, 0o600]),
                            rng.pick(&[0, 7]),
                            rng.pick(&[8, 0]),
                        )
                    };
                    Node::file_with_bytes(Algorithm::Native, mode, uid, gid, &[*c])
                }
                G::Link(t) => Node::symlink(vec![*t]),
            };
            let _ = dir.insert(*name, node);
        }
        dir
    }

    /// What `scan_dir_pruned` does with [`proves`]: folders bottom-up.
    fn prune(
        declared: &DeclaredTree,
        meta: &EntryMeta,
        exclusions: &Exclusions,
        proved: &mut HashSet<PathBuf>,
        path: &mut PathBuf,
        node: &mut FingerprintedNode,
    ) {
        if !matches!(node.entry, Entry::Dir { .. }) {
            return;
        }
        for (name, child) in &mut node.children {
            path.push(bytes_path(name));
            prune(declared, meta, exclusions, proved, path, child);
            path.pop();
        }
        if proves(declared, meta, exclusions, proved, path, node) {
            proved.insert(path.clone());
            node.children.clear();
        }
    }

    #[test]
    fn the_walk_agrees_with_building_and_comparing_the_declared_tree() {
        let rules: [&[&str]; 4] = [&[], &["*.b"], &["b/"], &["a-", "b0/a"]];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut differing = 0;
        for round in 0..3000 {
            let declared = generate(&mut rng, 3);
            // One round in four, the host is as declared.
            let clean = round % 4 == 0;
            let host = if clean {
                declared.clone()
            } else {
                drift(&mut rng, &declared, 3)
            };
            let mut map = DeclaredEntries::new();
            entries(&declared, "", &mut map);
            let tree = archive::decode(archive::encode(Path::new("/r"), &map).into()).unwrap();
            let exclusions = Exclusions::new(rng.pick(&rules).iter().copied()).unwrap();
            let mut host = host_node(&mut rng, &host, clean);
            host.prune(&exclusions);
            let host = fingerprint_tree(host, Algorithm::Native).unwrap();
            let meta = EntryMeta {
                file_mode: rng.pick(&[None, Some(0o644)]),
                dir_mode: rng.pick(&[None, Some(0o755)]),
                uid: rng.pick(&[None, Some(0)]),
                gid: rng.pick(&[None, Some(8)]),
            };
            let walked = compare(&tree, &meta, &exclusions, Some(&host.root), None).unwrap();
            let want = oracle(&tree, &meta, &exclusions, Some(&host));
            assert_eq!(walked, want, "round {round}");
            // As the scan does it: each folder, once finished, kept without
            // its entries when it is proved equal.
            let mut proved = HashSet::new();
            let mut pruned = host.root.clone();
            prune(
                &tree,
                &meta,
                &exclusions,
                &mut proved,
                &mut PathBuf::new(),
                &mut pruned,
            );
            let kept = compare(&tree, &meta, &exclusions, Some(&pruned), Some(&proved)).unwrap();
            assert_eq!(kept, want, "round {round}, pruned");
            if want.0.is_empty() {
                assert!(proved.contains(Path::new("")), "round {round}");
            }
            if clean {
                assert_eq!(walked.0, vec![], "round {round}");
                assert_eq!(walked.1, host.root_hash(), "round {round}");
            }
            differing += usize::from(!walked.0.is_empty());
            // The declaration alone (what `datum catalogue` shows).
            let alone = EntryMeta {
                uid: Some(0),
                gid: Some(0),
                ..meta
            };
            assert_eq!(
                compare(&tree, &alone, &exclusions, None, None).unwrap(),
                oracle(&tree, &alone, &exclusions, None),
                "round {round}, declared alone"
            );
        }
        // Both kinds of case were generated: clean trees and drifted ones.
        assert!((1000..2250).contains(&differing), "{differing}");
    }
    /// A chain of folders far deeper than a scan worker's stack allows one
    /// call per level (about 4 KiB a level in a debug build: 600 levels
    /// overflowed a 2 MiB worker and aborted `datum check`) is compared in a
    /// small stack, and its one drifted file at the bottom found; the trees
    /// are built and dropped on a thread with room for their own recursion.
    #[test]
    fn a_chain_of_folders_deeper_than_the_stack_allows_calls_is_compared() {
        const DEPTH: usize = 1000;
        let build = || {
            let mut map = DeclaredEntries::new();
            let mut at = String::new();
            for _ in 0..DEPTH {
                at.push_str(if at.is_empty() { "d" } else { "/d" });
                map.insert(at.clone().into_bytes(), DeclaredEntry::Dir);
            }
            let file = format!("{at}/f");
            map.insert(
                file.clone().into_bytes(),
                DeclaredEntry::File {
                    blake3: Algorithm::Native.hash_content(b"x").digest.0,
                    size: 1,
                },
            );
            let tree = archive::decode(archive::encode(Path::new("/r"), &map).into()).unwrap();
            let mut node = Node::dir(0o755, 0, 0);
            let _ = node.insert(
                "f",
                Node::file_with_bytes(Algorithm::Native, 0o644, 0, 0, b"y"),
            );
            for _ in 0..DEPTH {
                let mut up = Node::dir(0o755, 0, 0);
                let _ = up.insert("d", node);
                node = up;
            }
            let host = fingerprint_tree(node, Algorithm::Native).unwrap();
            (tree, host, file)
        };
        let big = || std::thread::Builder::new().stack_size(256 << 20);
        let (tree, host, file) = big().spawn(build).unwrap().join().unwrap();
        let (tree, host, found) = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let none = Exclusions::new(Vec::<String>::new()).unwrap();
                let found = compare(&tree, &EntryMeta::default(), &none, Some(&host.root), None)
                    .unwrap()
                    .0;
                (tree, host, found)
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0.path(), Path::new(&file));
        assert!(
            matches!(found[0].0, TreeDifference::Changed { .. }),
            "{found:?}"
        );
        big()
            .spawn(move || drop((tree, host)))
            .unwrap()
            .join()
            .unwrap();
    }

    /// An undeclared folder kept for the excluded entries it holds is not
    /// unmanaged: only what else it holds is; once that is gone, the tree is
    /// proved by its root hash (the kept folder stands in the declaration as
    /// it is on the host).
    #[test]
    fn a_kept_folder_is_not_unmanaged_and_stands_in_the_declaration() {
        let mut map = DeclaredEntries::new();
        map.insert(
            b"a".to_vec(),
            DeclaredEntry::File {
                blake3: Algorithm::Native.hash_content(b"x").digest.0,
                size: 1,
            },
        );
        let tree = archive::decode(archive::encode(Path::new("/r"), &map).into()).unwrap();
        let none = Exclusions::new(Vec::<String>::new()).unwrap();
        let host = |stray: bool| {
            let mut root = Node::dir(0o755, 0, 0);
            let _ = root.insert(
                "a",
                Node::file_with_bytes(Algorithm::Native, 0o644, 0, 0, b"x"),
            );
            // `p/k` held only excluded entries (the scan does not see them).
            let mut p = Node::dir(0o700, 0, 0);
            let _ = p.insert("k", Node::dir(0o755, 0, 0));
            if stray {
                let _ = p.insert(
                    "u",
                    Node::file_with_bytes(Algorithm::Native, 0o644, 0, 0, b"u"),
                );
            }
            let _ = root.insert("p", p);
            fingerprint_tree(root, Algorithm::Native).unwrap()
        };
        let mut kept = KeptFolders::default();
        kept.insert(Path::new("p"));
        kept.insert(Path::new("p/k"));
        let meta = EntryMeta::default();
        let shown = |found: &Differences| -> Vec<String> {
            found.iter().map(|(d, _)| d.to_string()).collect()
        };
        let (found, _) = compare(&tree, &meta, &none, Some(&host(true).root), None).unwrap();
        assert_eq!(shown(&found), ["unmanaged p"]);
        let (found, root) = compare_keeping(
            &tree,
            &meta,
            &none,
            Some(&host(true).root),
            None,
            Some(&kept),
        )
        .unwrap();
        assert_eq!(shown(&found), ["unmanaged p/u"]);
        assert_ne!(root, host(true).root_hash());
        let (found, root) = compare_keeping(
            &tree,
            &meta,
            &none,
            Some(&host(false).root),
            None,
            Some(&kept),
        )
        .unwrap();
        assert!(found.is_empty(), "{:?}", shown(&found));
        assert_eq!(root, host(false).root_hash());
    }

    /// A chain of undeclared folders far deeper than a scan worker's stack
    /// allows a call per level, each kept for the excluded entry at its
    /// bottom, is compared on a 256 KiB thread: only the stray beside that
    /// entry is unmanaged; without it, the tree is proved by its root hash.
    /// The trees are built and dropped on a thread with room for their own
    /// recursion.
    #[test]
    fn a_chain_of_kept_folders_deeper_than_the_stack_allows_calls_is_compared() {
        const DEPTH: usize = 3000;
        let mut map = DeclaredEntries::new();
        map.insert(
            b"a".to_vec(),
            DeclaredEntry::File {
                blake3: Algorithm::Native.hash_content(b"x").digest.0,
                size: 1,
            },
        );
        let tree = archive::decode(archive::encode(Path::new("/r"), &map).into()).unwrap();
        let host = |stray: bool| {
            let mut node = Node::dir(0o755, 0, 0);
            if stray {
                let _ = node.insert(
                    "u",
                    Node::file_with_bytes(Algorithm::Native, 0o644, 0, 0, b"u"),
                );
            }
            for _ in 0..DEPTH {
                let mut up = Node::dir(0o755, 0, 0);
                let _ = up.insert("d", node);
                node = up;
            }
            let mut root = Node::dir(0o755, 0, 0);
            let _ = root.insert(
                "a",
                Node::file_with_bytes(Algorithm::Native, 0o644, 0, 0, b"x"),
            );
            let _ = root.insert("p", node);
            fingerprint_tree(root, Algorithm::Native).unwrap()
        };
        let mut kept = KeptFolders::default();
        let mut at = PathBuf::from("p");
        for _ in 0..DEPTH {
            at.push("d");
            kept.insert(&at);
        }
        kept.insert(Path::new("p"));
        let stray = at.join("u");
        let big = || std::thread::Builder::new().stack_size(256 << 20);
        let hosts = big()
            .spawn(move || [host(true), host(false)])
            .unwrap()
            .join()
            .unwrap();
        let (hosts, found) = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let none = Exclusions::new(Vec::<String>::new()).unwrap();
                let meta = EntryMeta::default();
                let found = hosts
                    .iter()
                    .map(|h| {
                        compare_keeping(&tree, &meta, &none, Some(&h.root), None, Some(&kept))
                            .unwrap()
                    })
                    .collect::<Vec<_>>();
                (hosts, found)
            })
            .unwrap()
            .join()
            .unwrap();
        let paths: Vec<&Path> = found[0].0.iter().map(|(d, _)| d.path()).collect();
        assert_eq!(paths, [stray.as_path()]);
        assert!(matches!(found[0].0[0].0, TreeDifference::Unmanaged { .. }));
        assert!(found[1].0.is_empty(), "{:?}", found[1].0);
        assert_eq!(found[1].1, hosts[1].root_hash());
        big().spawn(move || drop(hosts)).unwrap().join().unwrap();
    }
}
