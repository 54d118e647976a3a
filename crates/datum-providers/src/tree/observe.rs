//! Observation: the host tree scanned and compared with the declared one
//! (its Merkle fingerprints), the differences as the observation's JSON and
//! as the plan's diff, an entry's content diff, and what a purge cannot
//! clear (a folder in the way that holds excluded entries).

use std::path::{Path, PathBuf};

use datum_core::{Action, Diff, FieldChange, Observed, Presence, Resource};
use datum_fingerprint::{Algorithm, Exclusions, FingerprintedTree, TreeDifference};
use datum_host::fs::FileKind;
use datum_host::tree_scan::{Prune, ScanOptions, scan_dir_pruned};
use datum_host::{Dir, Host, HostError};
use serde_json::{Value, json};

use super::apply::same_content;
use super::archive::EntryRef;
use super::compare::Differences;
use super::{Folders, TreeDesired, compare};
use crate::ProviderError;

/// What is in the way when a purge cannot clear a folder (see `Walk::clear`).
pub(super) const FOLDER_KEEPING_EXCLUDED: &str = "directory holding excluded entries";

/// Where a difference of a purging tree's observation says that the folder
/// in the way of a file or link holds excluded entries (`true`).
pub const HOLDS_EXCLUDED: &str = "holds_excluded";

/// The walk's own error for the first difference of the observed tree
/// that `refused` picks (a folder it will not remove), as `found`.
pub(super) fn folder_refused(
    d: &TreeDesired,
    observed: &Observed,
    found: &str,
    refused: impl Fn(&Value) -> bool,
) -> Option<String> {
    let items = observed
        .fields
        .get(super::entries::DIFFERENCES_FIELD)?
        .as_array()?;
    let at = items.iter().find(|i| refused(i))?;
    let path = at.get("path").and_then(Value::as_str).unwrap_or("");
    Some(
        HostError::InTheWay {
            path: d.path.join(path),
            found: found.to_owned(),
        }
        .to_string(),
    )
}

/// Whether a difference is a folder where the source has a file or a link.
pub(super) fn folder_in_the_way(item: &Value) -> bool {
    item.get("category").and_then(Value::as_str) == Some("type_changed")
        && item.get("found").and_then(Value::as_str) == Some("directory")
        && item.get("declared").and_then(Value::as_str) != Some("directory")
}

/// In a purging tree, a folder where the source has a file or a link is
/// removed when that entry goes live, unless it holds excluded entries
/// (`Walk::clear`). The scan leaves excluded entries out, so each such
/// folder (and only such a folder: a tree without one costs nothing more)
/// is looked into here, and its difference marked [`HOLDS_EXCLUDED`] for
/// `refuses_unless_changed_first`.
pub(super) fn mark_folders_keeping_excluded(
    host: &Host,
    d: &TreeDesired,
    live: &Dir,
    items: &mut [Value],
) -> Result<(), ProviderError> {
    let mut exclusions = None;
    let mut folders = Folders::new(live.clone())?;
    for item in items.iter_mut() {
        if !folder_in_the_way(item) {
            continue;
        }
        let Some(rel) = item_path(item) else {
            continue;
        };
        let exclusions = match &exclusions {
            Some(e) => e,
            None => exclusions.insert(d.exclusions_in(host, live)?),
        };
        let dir = folders.dir(&rel)?;
        if holds_excluded(&dir, &rel, exclusions, &mut Default::default())?
            && let Some(obj) = item.as_object_mut()
        {
            obj.insert(HOLDS_EXCLUDED.to_owned(), Value::Bool(true));
        }
    }
    Ok(())
}

/// A declared owner or group that names no account on the host cannot be
/// compared by id (the scan leaves it out): it is a difference of the
/// tree's own folder all the same, as it is for a File, so that plan shows
/// it and apply reports the unknown account (or, once a User or Group of
/// the same pass made it, sets it on every entry). Before, such a tree was
/// "unchanged" and the declaration was silently never applied.
pub(super) fn unresolved_accounts(
    host: &Host,
    d: &TreeDesired,
    (uid, gid): (u32, u32),
    root_hash: &str,
    items: &mut Vec<Value>,
) {
    let mut values = Vec::new();
    if let Some(owner) = d.meta.owner.as_deref()
        && host.lookup_user(owner).is_err()
    {
        values.push(json!({"field": "owner", "declared": owner, "observed": uid.to_string()}));
    }
    if let Some(group) = d.meta.group.as_deref()
        && host.lookup_group(group).is_err()
    {
        values.push(json!({"field": "group", "declared": group, "observed": gid.to_string()}));
    }
    if values.is_empty() {
        return;
    }
    let fields: Vec<Value> = values.iter().map(|v| v["field"].clone()).collect();
    let at_root = |i: &Value| matches!(i.get("path").and_then(Value::as_str), Some("" | "."));
    match items
        .iter_mut()
        .find(|i| at_root(i) && i.get("category").and_then(Value::as_str) == Some("changed"))
    {
        Some(item) => {
            if let Some(obj) = item.as_object_mut() {
                for (key, add) in [("fields", fields), ("values", values)] {
                    let list = obj.entry(key).or_insert_with(|| Value::Array(Vec::new()));
                    if let Some(list) = list.as_array_mut() {
                        list.extend(add);
                    }
                }
            }
        }
        None => items.insert(
            0,
            json!({
                "category": "changed",
                "path": "",
                "fields": fields,
                "observed": root_hash,
                "values": values,
            }),
        ),
    }
}

/// The differences between the declared tree and the host tree in `live`
/// (open), parents first. Owner and group that are not declared are not
/// managed: the declared node takes the observed value.
pub fn differences(
    host: &Host,
    d: &TreeDesired,
    live: &Dir,
) -> Result<Vec<TreeDifference>, ProviderError> {
    scan_and_compare(host, d, live).map(|(found, _, _)| found.into_iter().map(|(d, _)| d).collect())
}

/// Where an observation keeps the two root hashes:
/// `{"declared": ..., "observed": ...}`. `declared` is the declared tree's
/// root as the comparison saw it (undeclared owner, group or mode taken from
/// the host entry, since they are not managed), so it equals `observed`
/// exactly when the tree has not drifted.
pub(crate) const FINGERPRINT_FIELD: &str = "fingerprint";

/// The declared tree's root fingerprint computed from the catalogue alone
/// (what `datum catalogue` shows): declared owner and group resolved in the
/// root's account files; what is not declared is what apply creates (the
/// running user and group, mode 0644 for files and 0755 for folders). For a
/// tree that has not drifted and whose metadata is declared (or as Datum
/// created it), this is the host's observed fingerprint, byte for byte
/// `datum fingerprint PATH` with the Tree's exclusions.
pub fn declared_fingerprint(host: &Host, resource: &Resource) -> Result<String, ProviderError> {
    let d = TreeDesired::from_resource(resource)?;
    let (uid, gid) = d.meta.resolve(host)?;
    let (me, my_group) = datum_host::accounts::current_ids();
    let meta = d.entry_meta(Some(uid.unwrap_or(me)), Some(gid.unwrap_or(my_group)));
    let (_, root) =
        compare::compare(&d.entries, &meta, &d.exclusions()?, None, None).map_err(|e| {
            ProviderError::Invalid {
                field: "source".to_owned(),
                message: e.to_string(),
            }
        })?;
    Ok(root.to_string())
}

/// [`differences`], with the scanned host tree and the declared root hash.
/// The host tree is scanned, and each folder, as the scan finishes it, is
/// compared with its declaration ([`compare::proves`]): a folder equal to it
/// keeps only its own hash, so the tree kept is the part that differs and
/// the folders above it. Then that tree is walked once beside the declared
/// entries ([`compare::compare`]); no declared tree is built.
pub(super) fn scan_and_compare(
    host: &Host,
    d: &TreeDesired,
    live: &Dir,
) -> Result<(Differences, FingerprintedTree, String), ProviderError> {
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex, PoisonError};
    let exclusions = d.exclusions_in(host, live)?;
    // Unknown accounts are an apply-time error (as for File): here they are
    // simply not compared.
    let uid = d
        .meta
        .owner
        .as_deref()
        .and_then(|o| host.lookup_user(o).ok());
    let gid = d
        .meta
        .group
        .as_deref()
        .and_then(|g| host.lookup_group(g).ok());
    let meta = d.entry_meta(uid, gid);
    let proved = Arc::new(Mutex::new(HashSet::<PathBuf>::new()));
    // The folders found to differ whose folder is not finished yet.
    let differ = Arc::new(Mutex::new(HashSet::<PathBuf>::new()));
    let prune = {
        let (entries, exclusions, proved, differ) = (
            Arc::clone(&d.entries),
            exclusions.clone(),
            Arc::clone(&proved),
            Arc::clone(&differ),
        );
        Prune(Arc::new(
            move |rel: &Path, node: &datum_fingerprint::FingerprintedNode| {
                let mut proved = proved.lock().unwrap_or_else(PoisonError::into_inner);
                let mut differ = differ.lock().unwrap_or_else(PoisonError::into_inner);
                // A folder holding one found to differ differs: its hash
                // holds that folder's, which is not the host's. Not walked
                // again (the folders above a difference D deep were each
                // compared down to the bottom: cubic in D).
                let mut below_differs = false;
                for (name, child) in &node.children {
                    if child.entry.kind() == datum_fingerprint::EntryKind::Directory {
                        below_differs |= differ.remove(&rel.join(bytes_path(name)));
                    }
                }
                let equal = !below_differs
                    && compare::proves(&entries, &meta, &exclusions, &proved, rel, node);
                if equal {
                    proved.insert(rel.to_path_buf());
                } else {
                    differ.insert(rel.to_path_buf());
                }
                equal
            },
        ))
    };
    let scanned = scan_dir_pruned(
        live.fd(),
        live.path(),
        &ScanOptions {
            algorithm: Algorithm::Native,
            exclude: Some(exclusions.clone()),
            threads: 0,
            progress: None,
        },
        prune,
    )
    .map_err(|e| {
        ProviderError::Host(HostError::io(
            "scan",
            live.path(),
            std::io::Error::other(e.to_string()),
        ))
    })?;
    let proved = std::mem::take(&mut *proved.lock().unwrap_or_else(PoisonError::into_inner));
    let compare = |kept: Option<&KeptFolders>| {
        compare::compare_keeping(
            &d.entries,
            &meta,
            &exclusions,
            Some(&scanned.tree.root),
            Some(&proved),
            kept,
        )
        .map_err(|e| ProviderError::Invalid {
            field: "source".to_owned(),
            message: e.to_string(),
        })
    };
    let (mut found, mut declared_root) = compare(None)?;
    // The scan does not see excluded entries: an undeclared folder holding
    // one is looked into, and kept (only what else it holds is unmanaged),
    // so that a purge never takes an excluded entry with its folder.
    let mut kept = KeptFolders::default();
    let mut folders = Folders::new(live.clone())?;
    for (difference, _) in &found {
        if let TreeDifference::Unmanaged { path } = difference
            && scanned
                .tree
                .root
                .get(path)
                .is_some_and(|n| n.entry.kind() == datum_fingerprint::EntryKind::Directory)
        {
            let dir = folders.dir(path)?;
            holds_excluded(&dir, path, &exclusions, &mut kept)?;
        }
    }
    if !kept.is_empty() {
        (found, declared_root) = compare(Some(&kept))?;
    }
    Ok((found, scanned.tree, declared_root.to_string()))
}

/// The undeclared folders found holding an excluded entry (by
/// [`holds_excluded`]), by path relative to the tree's root, as a trie:
/// each folder known is a key of its parent's index and its own name, so
/// the memory is linear in the number of folders and their names' bytes
/// (a set of full paths held the folders of a chain D deep as D paths of
/// lengths 1..D, about D² bytes: some 400 MB for a local user's 20,000-deep
/// chain with an excluded entry at its bottom). Known besides the kept
/// ones: their parent folders (from the tree's root down), and while
/// [`holds_excluded`] walks, the folders on its way.
pub(super) struct KeptFolders {
    /// Whether each folder known is kept, by index (0: the tree's root).
    kept: Vec<bool>,
    /// Each folder known but the root, by its key: its parent's index (8
    /// bytes, little endian), then its name.
    index: std::collections::HashMap<Vec<u8>, usize>,
    /// How many folders are kept.
    count: usize,
}

impl Default for KeptFolders {
    fn default() -> Self {
        KeptFolders {
            kept: vec![false],
            index: std::collections::HashMap::new(),
            count: 0,
        }
    }
}

impl KeptFolders {
    /// How many folders are kept (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.count
    }

    pub(super) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether the folder at `path` (relative to the tree's root, its
    /// components compared as a set of paths compares them) is kept.
    pub(super) fn contains(&self, path: &Path) -> bool {
        let mut key = Vec::new();
        let mut at = 0;
        for component in path.components() {
            match self.child(at, component.as_os_str(), &mut key) {
                Some(child) => at = child,
                None => return false,
            }
        }
        self.kept.get(at).copied().unwrap_or(false)
    }

    /// The folder `name` in the folder `parent` (indices), if known.
    fn child(&self, parent: usize, name: &std::ffi::OsStr, key: &mut Vec<u8>) -> Option<usize> {
        Self::key(parent, name, key);
        self.index.get(key.as_slice()).copied()
    }

    fn key(parent: usize, name: &std::ffi::OsStr, key: &mut Vec<u8>) {
        key.clear();
        key.extend_from_slice(&(parent as u64).to_le_bytes());
        key.extend_from_slice(name.as_encoded_bytes());
    }

    /// The folder `name` in the folder `parent`, known from now on: its
    /// index, and whether it is new.
    fn add(&mut self, parent: usize, name: &std::ffi::OsStr) -> (usize, bool) {
        let mut key = Vec::new();
        if let Some(known) = self.child(parent, name, &mut key) {
            return (known, false);
        }
        let at = self.kept.len();
        self.kept.push(false);
        self.index.insert(key, at);
        (at, true)
    }

    /// Forgets the folder `name` in `parent`, added new and not kept, when
    /// it is the last one known (as it is once every folder added after it
    /// is forgotten); else it stays known, not kept.
    fn forget(&mut self, parent: usize, name: &std::ffi::OsStr) {
        let mut key = Vec::new();
        if let Some(at) = self.child(parent, name, &mut key)
            && at + 1 == self.kept.len()
            && !self.kept[at]
        {
            self.index.remove(key.as_slice());
            self.kept.pop();
        }
    }

    /// Keeps the folder at index `at`.
    fn keep(&mut self, at: usize) {
        if let Some(kept) = self.kept.get_mut(at)
            && !*kept
        {
            *kept = true;
            self.count += 1;
        }
    }

    /// Keeps the folder at `path` (tests).
    #[cfg(test)]
    pub(super) fn insert(&mut self, path: &Path) {
        let mut at = 0;
        for component in path.components() {
            at = self.add(at, component.as_os_str()).0;
        }
        self.keep(at);
    }

    /// The bytes held (tests): the flags, the index's table, its keys.
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        self.kept.capacity()
            + self.index.capacity() * (std::mem::size_of::<(Vec<u8>, usize)>() + 1)
            + self.index.keys().map(Vec::capacity).sum::<usize>()
    }
}

/// Whether the host folder `dir` (at `rel` in the tree) holds an excluded
/// entry, at any depth; every folder that does is added to `kept`. Links
/// are never followed. The folders below `dir` are walked depth first from
/// a stack kept here, not by a call per level (a local user's chain of
/// folders 3,000 deep overflowed the stack and aborted the pass), holding
/// at most a walk's share of descriptors
/// ([`datum_host::descriptors::Budget::walk`], see [`datum_host::way`]).
pub(super) fn holds_excluded(
    dir: &Dir,
    rel: &Path,
    exclusions: &Exclusions,
    kept: &mut KeptFolders,
) -> Result<bool, ProviderError> {
    /// A folder being looked into: its entries not looked at yet, whether
    /// one of those looked at is or holds an excluded entry, its index in
    /// `kept` and its parent's, and whether `kept` knew it before.
    struct Open {
        entries: std::vec::IntoIter<(std::ffi::OsString, FileKind)>,
        holds: bool,
        node: usize,
        parent: usize,
        new: bool,
    }
    let mut way = datum_host::way::Way::new(
        dir.clone(),
        datum_host::descriptors::Budget::of_this_process().walk,
    )?;
    // The folders from the tree's root down to `rel`, known in `kept`
    // while it is looked into (each: its parent's index, its name, and
    // whether it is new).
    let mut above = Vec::new();
    let mut node = 0;
    for component in rel.components() {
        let name = component.as_os_str();
        let (child, new) = kept.add(node, name);
        above.push((node, name, new));
        node = child;
    }
    let mut path = rel.to_path_buf();
    let mut stack = vec![Open {
        entries: dir.list()?.into_iter(),
        holds: false,
        node,
        parent: 0,
        new: false,
    }];
    while let Some(top) = stack.last_mut() {
        let Some((name, kind)) = top.entries.next() else {
            let Open {
                holds,
                node,
                parent,
                new,
                ..
            } = *top;
            if holds {
                kept.keep(node);
            } else if new && let Some(name) = path.file_name() {
                // Nothing below it is kept either: it is the last known.
                kept.forget(parent, name);
            }
            stack.pop();
            match stack.last_mut() {
                None => {
                    if !holds {
                        for (parent, name, new) in above.into_iter().rev() {
                            if new {
                                kept.forget(parent, name);
                            }
                        }
                    }
                    return Ok(holds);
                }
                Some(parent) => {
                    parent.holds |= holds;
                    // Back in the folder above.
                    way.leave();
                    path.pop();
                }
            }
            continue;
        };
        let is_dir = kind == FileKind::Directory;
        // A killed pass's staging folder is litter, not something excluded
        // to keep: it goes with its folder (else it would hold that folder
        // in the way of the next pass, or keep it from its purge forever).
        if is_dir
            && name
                .as_encoded_bytes()
                .starts_with(datum_host::staging::STAGE_PREFIX.as_bytes())
        {
            continue;
        }
        path.push(&name);
        if exclusions.is_excluded(&path, is_dir) {
            top.holds = true;
        } else if is_dir && let Some(sub) = way.here()?.open_child_dir(&name)? {
            // Looked into next; its name stays on `path` until it is done.
            let entries = sub.list()?.into_iter();
            way.enter(&name, sub)?;
            let parent = top.node;
            let (node, new) = kept.add(parent, &name);
            stack.push(Open {
                entries,
                holds: false,
                node,
                parent,
                new,
            });
            continue;
        }
        path.pop();
    }
    // The stack is left only by returning from the first folder.
    Ok(false)
}

pub(super) fn bytes_path(bytes: &[u8]) -> &Path {
    use std::os::unix::ffi::OsStrExt;
    Path::new(std::ffi::OsStr::from_bytes(bytes))
}

/// Largest entry whose content a check diffs (either side).
const ENTRY_DIFF_LIMIT: u64 = 1024 * 1024;

/// The unified diff from an entry's declared text to the live one (what
/// changed on the host), when both are text of at most [`ENTRY_DIFF_LIMIT`].
/// The live file is read through the boundary, never through a link, and
/// only when everyone may read it (else a line saying why).
pub(super) fn entry_content_diff(host: &Host, d: &TreeDesired, rel: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let EntryRef::File { size, blake3 } = d.entries.get(rel.as_os_str().as_bytes())? else {
        return None;
    };
    if size > ENTRY_DIFF_LIMIT {
        return None;
    }
    let live_path = d.path.join(rel);
    // Not readable by everyone (a key in the folder, 0600): never its
    // lines, which whoever reads the report may not read on the host.
    if !host.readable_by_everyone(&live_path).unwrap_or(false) {
        return Some(datum_core::diff::withheld_note(
            &live_path.display().to_string(),
        ));
    }
    // Never more than the limit read (a live file someone made huge), and
    // asked again of the very file read (the name may hold another since).
    let live = match host.read_shown(&live_path, ENTRY_DIFF_LIMIT).ok()? {
        datum_host::Shown::Bytes(bytes) => bytes,
        datum_host::Shown::Withheld => {
            return Some(datum_core::diff::withheld_note(
                &live_path.display().to_string(),
            ));
        }
        datum_host::Shown::Absent | datum_host::Shown::TooLarge => return None,
    };
    let declared = datum_host::repo::read(&d.entries.source_of(rel.as_os_str().as_bytes())).ok()?;
    // Only the bytes the catalogue declared: the repository file edited
    // since the compile holds others, which nothing would ever write (a
    // File's diff refuses them alike, `datum_host::repo::content_bytes`).
    if !same_content(&declared, blake3) {
        return Some(datum_core::diff::unread_note(
            &live_path.display().to_string(),
        ));
    }
    let (declared, live) = (
        std::str::from_utf8(&declared).ok()?,
        std::str::from_utf8(&live).ok()?,
    );
    let name = live_path.display();
    Some(
        similar::TextDiff::configure()
            .timeout(datum_core::diff::TEXT_DIFF_TIMEOUT)
            .diff_lines(declared, live)
            .unified_diff()
            .context_radius(2)
            .header(&format!("{name} (declared)"), &format!("{name} (live)"))
            .to_string(),
    )
}

/// How a difference travels in `Observed::fields["tree"]`.
pub fn difference_json(d: &TreeDifference) -> Value {
    let path = d.path().to_string_lossy().into_owned();
    let mut item = match d {
        TreeDifference::Changed { fields, .. } => {
            json!({"category": "changed", "path": path, "fields": fields})
        }
        TreeDifference::Missing { .. } => json!({"category": "missing", "path": path}),
        TreeDifference::Unmanaged { .. } => json!({"category": "unmanaged", "path": path}),
        TreeDifference::TypeChanged {
            declared, found, ..
        } => json!({
            "category": "type_changed",
            "path": path,
            "declared": declared.name(),
            "found": found.name(),
        }),
    };
    // A name that is not UTF-8 reads lossily in `path` (for people); its
    // bytes travel beside it, so what reaches the host is that very entry.
    if d.path().to_str().is_none()
        && let Some(obj) = item.as_object_mut()
    {
        use std::os::unix::ffi::OsStrExt;
        let bytes = d.path().as_os_str().as_bytes();
        obj.insert(PATH_BYTES.to_owned(), json!(bytes));
    }
    item
}

/// Where a difference whose path is not UTF-8 keeps its bytes.
const PATH_BYTES: &str = "path_bytes";

/// The path of a difference as [`difference_json`] wrote it (its bytes
/// when they are not UTF-8).
pub(super) fn item_path(item: &Value) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if let Some(bytes) = item.get(PATH_BYTES).and_then(Value::as_array) {
        let bytes: Option<Vec<u8>> = bytes
            .iter()
            .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
            .collect();
        return Some(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes?)));
    }
    item.get("path").and_then(Value::as_str).map(PathBuf::from)
}

/// The pure comparison behind the `Tree` kind's plan: unmanaged entries are
/// a change only when the tree purges them.
pub fn diff(purge: bool, observed: &Observed) -> Diff {
    let mut out = Diff::default();
    match &observed.presence {
        Presence::Absent => {
            out.action = Some(Action::Create);
            out.changes.push(change(".", None, "create"));
        }
        Presence::OtherType(kind) => {
            out.action = Some(Action::Replace);
            out.changes.push(change(".", Some(kind), "directory"));
        }
        Presence::Present => {
            let items = observed
                .fields
                .get(super::entries::DIFFERENCES_FIELD)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for item in items {
                let category = item.get("category").and_then(Value::as_str).unwrap_or("");
                let path = item.get("path").and_then(Value::as_str).unwrap_or(".");
                let path = if path.is_empty() { "." } else { path };
                let (before, after) = match category {
                    "unmanaged" if !purge => continue,
                    "unmanaged" => ("unmanaged".to_owned(), "removed".to_owned()),
                    "missing" => ("missing".to_owned(), "as declared".to_owned()),
                    "type_changed" => (
                        item.get("found")
                            .and_then(Value::as_str)
                            .unwrap_or("?")
                            .to_owned(),
                        item.get("declared")
                            .and_then(Value::as_str)
                            .unwrap_or("?")
                            .to_owned(),
                    ),
                    _ => {
                        let fields: Vec<&str> = item
                            .get("fields")
                            .and_then(Value::as_array)
                            .map(|f| f.iter().filter_map(Value::as_str).collect())
                            .unwrap_or_default();
                        (
                            format!("changed ({})", fields.join(", ")),
                            "as declared".to_owned(),
                        )
                    }
                };
                out.changes.push(change(path, Some(&before), &after));
            }
            if !out.changes.is_empty() {
                out.action = Some(Action::Update);
            }
        }
    }
    out
}

pub(super) fn change(path: &str, before: Option<&str>, after: &str) -> FieldChange {
    FieldChange {
        field: format!("tree:{path}"),
        before: before.map(|b| Value::String(b.to_owned())),
        after: Some(Value::String(after.to_owned())),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::tree::archive;

    fn observed_with(items: Value) -> Observed {
        let mut o = Observed::absent();
        o.presence = Presence::Present;
        o.fields
            .insert(crate::tree::entries::DIFFERENCES_FIELD.into(), items);
        o
    }

    #[test]
    fn unmanaged_entries_are_a_change_only_with_purge() {
        let o = observed_with(json!([{"category": "unmanaged", "path": "a~"}]));
        assert!(diff(false, &o).is_empty());
        let d = diff(true, &o);
        assert_eq!(d.action(), Action::Update);
        assert_eq!(d.changed_fields(), vec!["tree:a~"]);
    }

    #[test]
    fn each_difference_is_one_change() {
        let o = observed_with(json!([
            {"category": "changed", "path": "a.conf", "fields": ["content", "mode"]},
            {"category": "missing", "path": "b.conf"},
            {"category": "type_changed", "path": "c.conf", "declared": "file", "found": "symlink"},
        ]));
        let d = diff(false, &o);
        assert_eq!(
            d.changed_fields(),
            vec!["tree:a.conf", "tree:b.conf", "tree:c.conf"]
        );
        assert_eq!(d.changes[2].before, Some(json!("symlink")));
        assert!(diff(false, &Observed::absent()).action() == Action::Create);
    }

    /// A changed entry's diff read its repository file as it is now: edited
    /// between the compile and the check's diff, it showed bytes the
    /// catalogue never declared (and nothing would write), as if they were
    /// what the host drifted from. Those bytes are refused, as a File's
    /// diff refuses them (`DECLARED_UNREAD`).
    #[test]
    fn an_entry_is_diffed_only_against_the_bytes_the_catalogue_declared() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let (repo, root) = (dir.path().join("repo/t"), dir.path().join("root"));
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::create_dir_all(root.join("etc/t")).unwrap();
        for p in [dir.path(), &root, &root.join("etc"), &root.join("etc/t")] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(repo.join("a"), "declared\n").unwrap();
        std::fs::write(root.join("etc/t/a"), "by hand\n").unwrap();
        std::fs::set_permissions(root.join("etc/t/a"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let entries: archive::DeclaredEntries = [(
            b"a".to_vec(),
            archive::DeclaredEntry::File {
                blake3: Algorithm::Native.hash_content(b"declared\n").digest.0,
                size: 9,
            },
        )]
        .into();
        let resource = Resource {
            id: datum_core::ResourceId::new("Tree", "t"),
            desired: json!({"path": "/etc/t", "source": "t"}).into(),
            content: Some(archive::pack(&repo, &entries)),
            requires: vec![],
            class: "normal".to_owned(),
            sensitive: false,
            sensitive_by_field_only: false,
            validate: None,
            origin: datum_core::Origin::default(),
            field_origins: Default::default(),
            declaration_hash: String::new(),
            held: Default::default(),
        };
        let d = TreeDesired::from_resource(&resource).unwrap();
        let host = Host::with_name(&root, "test-host");
        let diff = entry_content_diff(&host, &d, Path::new("a")).unwrap();
        assert!(diff.contains("-declared\n+by hand\n"), "{diff}");
        // The repository file edited after the compile.
        std::fs::write(repo.join("a"), "written after the compile\n").unwrap();
        let diff = entry_content_diff(&host, &d, Path::new("a")).unwrap();
        assert!(!diff.contains("written after"), "{diff}");
        assert_eq!(diff, datum_core::diff::unread_note("/etc/t/a"));
    }

    /// A chain of `depth` folders `d` below `top`, made one level at a time
    /// from the folder above (a path that long could not be named); the
    /// deepest is returned.
    pub(in crate::tree) fn chain(top: &Dir, depth: usize) -> Dir {
        let mut here = top.clone();
        for _ in 0..depth {
            let d = std::ffi::OsStr::new("d");
            here.entry(d).create_dir(0o755, None, None).unwrap();
            here = here.open_child_dir(d).unwrap().unwrap();
        }
        here
    }

    /// A chain of folders far deeper than a thread's stack allows a call per
    /// level (3,000, as a local user may make below an unmanaged folder),
    /// with an excluded entry at the bottom, is looked into on a 256 KiB
    /// thread: every folder of it is kept, and a folder beside it holding
    /// nothing excluded is not.
    #[test]
    fn a_chain_of_folders_deeper_than_the_stack_allows_calls_is_looked_into() {
        const DEPTH: usize = 3000;
        let tmp = tempfile::tempdir().unwrap();
        let top = Dir::open_path(tmp.path()).unwrap();
        let bottom = chain(&top, DEPTH);
        bottom
            .entry(std::ffi::OsStr::new("x.log"))
            .create_dir(0o755, None, None)
            .unwrap();
        chain(&top.open_child_dir("d".as_ref()).unwrap().unwrap(), 0)
            .entry("s".as_ref())
            .create_dir(0o755, None, None)
            .unwrap();
        let (holds, kept) = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let exclusions = Exclusions::new(["*.log"]).unwrap();
                let mut kept = KeptFolders::default();
                let holds = holds_excluded(&top, Path::new("u"), &exclusions, &mut kept).unwrap();
                (holds, kept)
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(holds);
        assert_eq!(kept.len(), DEPTH + 1);
        let mut way = PathBuf::from("u");
        for _ in 0..DEPTH {
            assert!(kept.contains(&way), "{}", way.display());
            way.push("d");
        }
        assert!(kept.contains(&way));
        assert!(!kept.contains(Path::new("u/d/s")));
    }

    /// The kept set of a chain of folders `DEPTH` deep with an excluded
    /// entry at its bottom holds each folder once, in memory linear in the
    /// depth: a set of full paths held the D paths of lengths 1..D, about
    /// D² bytes (a local user's 20,000-deep chain made the root process
    /// hold about 400 MB).
    #[test]
    fn the_folders_kept_for_a_deep_chain_take_memory_linear_in_its_depth() {
        const DEPTH: usize = 3000;
        let tmp = tempfile::tempdir().unwrap();
        let top = Dir::open_path(tmp.path()).unwrap();
        chain(&top, DEPTH)
            .entry(std::ffi::OsStr::new("x.log"))
            .create_dir(0o755, None, None)
            .unwrap();
        let exclusions = Exclusions::new(["*.log"]).unwrap();
        let mut kept = Default::default();
        assert!(holds_excluded(&top, Path::new("u/v"), &exclusions, &mut kept).unwrap());
        assert_eq!(kept.len(), DEPTH + 1);
        let bytes = held_bytes(&kept);
        // A folder's share: its index entry, and a key of its parent's
        // index and its one-byte name.
        assert!(
            bytes <= 200 * (DEPTH + 1),
            "{bytes} bytes for {} folders",
            DEPTH + 1
        );
        // The members: u/v and each folder of the chain below it; not u,
        // nor the excluded entry, nor anything past the chain.
        let mut way = PathBuf::from("u/v");
        for _ in 0..DEPTH {
            assert!(kept.contains(&way), "{}", way.display());
            way.push("d");
        }
        assert!(kept.contains(&way));
        assert!(!kept.contains(&way.join("x.log")));
        assert!(!kept.contains(&way.join("d")));
        assert!(!kept.contains(Path::new("u")));
        assert!(!kept.contains(Path::new("")));
        assert!(!kept.contains(Path::new("u/d")));
        // A chain holding nothing excluded leaves nothing known (the
        // folders on the way are forgotten as the walk leaves them).
        let other = tempfile::tempdir().unwrap();
        let top = Dir::open_path(other.path()).unwrap();
        chain(&top, DEPTH)
            .entry(std::ffi::OsStr::new("x.conf"))
            .create_dir(0o755, None, None)
            .unwrap();
        let mut kept = KeptFolders::default();
        assert!(!holds_excluded(&top, Path::new("u/w"), &exclusions, &mut kept).unwrap());
        assert!(kept.is_empty());
        assert_eq!((kept.kept.len(), kept.index.len()), (1, 0));
    }

    fn held_bytes(kept: &KeptFolders) -> usize {
        kept.held_bytes()
    }
}
