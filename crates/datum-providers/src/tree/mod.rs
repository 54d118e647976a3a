//! `Tree`: a directory Datum owns whole, its declared content a folder of the
//! repository.
//!
//! ```yaml
//! type: Tree
//! name: nginx-conf.d
//! desired:
//!   path: /etc/nginx/conf.d
//!   source: trees/nginx-conf.d   # repository folder, relative to the layer
//!   owner: root                  # every entry (default: not managed)
//!   group: root
//!   mode: "0644"                 # files (default: not managed; 0644 when created)
//!   dir_mode: "0755"             # folders, the root included (default: not
//!                                # managed; 0755 when created)
//!   exclude: ["*.swp", "*~"]     # gitignore syntax, relative to `path`
//!   purge: false                 # remove unmanaged entries on apply
//! ```
//!
//! Observation scans the host tree and compares it with the declared one
//! through Merkle fingerprints (`datum_fingerprint`, scanned by `datum_host::tree_scan`, native algorithm):
//! an undrifted tree is proved by its root hash, and only differing subtrees
//! are entered. The differences (changed, missing, unmanaged, type changed)
//! are carried in the observation (`fields.tree`), so `diff` stays pure and
//! `datum check` can report each one in its category.
//!
//! Policy decisions: files are copied verbatim (no templating inside a tree;
//! a template belongs in a `File`); an entry that no declaration covers is
//! *unmanaged*: reported by `datum check`, and removed by apply only when the
//! Tree says `purge: true` (default false: a tree never loses a file nobody
//! declared unless asked). Excluded entries are invisible everywhere: not
//! scanned, not reported, never created, changed or removed. Content goes
//! through the same staging as `File` (`datum_host::staging`), so a validator
//! sees each new file before it goes live.
//!
//! Must not: follow a link inside the tree, remove anything outside it, or
//! decide what a difference means for a policy (that is `datum check`).

pub mod archive;

use std::path::{Path, PathBuf};

use datum_core::{Action, Diff, FieldChange, Observed, Presence, Resource};
use datum_fingerprint::{
    Algorithm, ChangedValue, ContentHash, Digest, Entry, Exclusions, FingerprintedNode,
    FingerprintedTree, HashFunction, Node, TreeDifference, compare_with_values, fingerprint_tree,
};
use datum_host::fs::FileKind;
use datum_host::tree_scan::{ScanOptions, scan_dir};
use datum_host::{Dir, Host, HostError, Located};
use serde_json::{Value, json};

use crate::common::fields::{declared_path, format_mode, parse_mode};
use crate::common::schema;
use crate::common::{FieldKind, FieldSpec, MetaDesired, all_or_nothing, check_fields};
use crate::kind::{declaration, planned};
use crate::{
    DeclaredMeta, FieldError, FieldLookup, Kind, OwnsPaths, PathClaim, Planned, ProviderError,
    StagingGate, TakesSourceFolder,
};
use archive::{DeclaredEntry, DeclaredTree};

/// The type name.
pub const KIND: &str = "Tree";

/// Mode of a declared file when none is declared.
pub const DEFAULT_FILE_MODE: u32 = 0o644;
/// Mode of a declared folder when none is declared.
pub const DEFAULT_DIR_MODE: u32 = 0o755;

/// The scalar fields; `exclude` (a list) and `purge` (a bool) are checked apart.
const FIELDS: &[FieldSpec] = &[
    FieldSpec::required("path", FieldKind::Path),
    FieldSpec::required("source", FieldKind::NonEmptyText),
    FieldSpec::optional("owner", FieldKind::Account),
    FieldSpec::optional("group", FieldKind::Account),
    FieldSpec::optional("mode", FieldKind::Mode),
    FieldSpec::optional("dir_mode", FieldKind::Mode),
    FieldSpec::VALIDATE,
];

/// A Tree declaration in typed form.
/// A Tree's `desired` as written in a manifest: the type its JSON Schema is
/// derived from (held to `FIELDS` and to `check` below).
#[derive(schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    transform = datum_core::schema::optional_never_null,
    title = "Tree",
    description = "A folder of the repository copied to `path`, every file with owner, group and mode; `purge` removes what is not declared."
)]
pub struct TreeDeclaration {
    #[schemars(with = "schema::HostPath")]
    pub path: String,
    /// The folder of the repository, relative to the layer (`trees/limits.d`).
    #[schemars(with = "schema::NonEmptyText")]
    pub source: String,
    #[schemars(with = "Option<schema::Account>")]
    pub owner: Option<String>,
    #[schemars(with = "Option<schema::Account>")]
    pub group: Option<String>,
    /// The mode of every file.
    #[schemars(with = "Option<schema::Mode>")]
    pub mode: Option<String>,
    /// The mode of every folder.
    #[schemars(with = "Option<schema::Mode>")]
    pub dir_mode: Option<String>,
    /// gitignore patterns of entries on the host that are neither managed nor purged.
    pub exclude: Option<Vec<String>>,
    /// Remove what is under `path` but not in the source (default false).
    pub purge: Option<bool>,
    #[schemars(with = "Option<schema::ValidatorName>")]
    pub validate: Option<String>,
}

#[derive(Debug, Clone)]
pub struct TreeDesired {
    pub path: PathBuf,
    pub meta: MetaDesired,
    /// Folder mode; `None`: not managed (0755 when created).
    pub dir_mode: Option<u32>,
    pub exclude: Vec<String>,
    pub purge: bool,
    /// Declared entries below the root (from the catalogue).
    pub entries: DeclaredTree,
}

impl TreeDesired {
    pub fn from_resource(resource: &Resource) -> Result<Self, ProviderError> {
        let invalid = |field: &str, message: String| ProviderError::Invalid {
            field: field.to_owned(),
            message,
        };
        let desired = &resource.desired;
        let entries = match &resource.content {
            Some(content) => {
                archive::decode(&content.bytes).map_err(|e| invalid("source", e.to_string()))?
            }
            None => return Err(invalid("source", "no declared tree".to_owned())),
        };
        Ok(TreeDesired {
            path: declared_path(desired).map_err(|m| invalid("path", m))?,
            meta: MetaDesired::parse(desired).map_err(|(f, m)| invalid(&f, m))?,
            dir_mode: desired
                .get("dir_mode")
                .map(parse_mode)
                .transpose()
                .map_err(|m| invalid("dir_mode", m))?,
            exclude: exclude_rules(desired).map_err(|m| invalid("exclude", m))?,
            purge: desired
                .get("purge")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            entries,
        })
    }

    /// The compiled exclusion rules.
    pub fn exclusions(&self) -> Result<Exclusions, ProviderError> {
        Exclusions::new(&self.exclude).map_err(|e| ProviderError::Invalid {
            field: "exclude".to_owned(),
            message: e.to_string(),
        })
    }
}

fn exclude_rules(desired: &Value) -> Result<Vec<String>, String> {
    match desired.get("exclude") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| "every `exclude` rule must be a string".to_owned())
            })
            .collect(),
        Some(_) => Err("`exclude` must be a list of gitignore patterns".to_owned()),
    }
}

/// The `Tree` resource type.
#[derive(Debug, Default)]
pub struct TreeProvider;

/// A Tree owns its folder (`path:`); files declared inside it are not
/// ordered after it (the tree writes its own folders).
impl OwnsPaths for TreeProvider {
    fn claim<'a>(&self, field: FieldLookup<'a>) -> Option<PathClaim<'a>> {
        crate::common::entry::path_claim(field, false)
    }

    fn managed_paths(&self, d: &crate::Declared<'_>) -> Vec<PathBuf> {
        declaration::<Self>(d)
            .map(|t| vec![t.path.clone()])
            .unwrap_or_default()
    }

    fn declared_meta(&self, host: &Host, d: &crate::Declared<'_>) -> Result<DeclaredMeta, String> {
        Ok(crate::common::meta::declared_meta(
            host,
            &d.resource.desired,
            DEFAULT_FILE_MODE,
        ))
    }

    /// The entries whose content an apply destroys: overwritten files,
    /// files where the declaration wants another type, and (with `purge`)
    /// unmanaged files (`true`: removed). Which of them are regular files
    /// is decided when they are read.
    fn destroyed_entries(
        &self,
        d: &crate::Declared<'_>,
        observed: &Observed,
    ) -> Option<Vec<(PathBuf, bool)>> {
        if observed.presence != Presence::Present {
            return None;
        }
        let Ok(typed) = declaration::<Self>(d) else {
            return Some(Vec::new());
        };
        let (base, purge) = (&typed.path, typed.purge);
        let items = observed
            .fields
            .get("tree")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut out = Vec::new();
        for item in items {
            let path = item.get("path").and_then(Value::as_str).unwrap_or("");
            if path.is_empty() || path == "." {
                continue;
            }
            let removed = match item.get("category").and_then(Value::as_str) {
                Some("unmanaged") if purge => true,
                Some("type_changed") => false,
                Some("changed")
                    if item
                        .get("fields")
                        .and_then(Value::as_array)
                        .is_some_and(|f| f.iter().any(|f| f.as_str() == Some("content"))) =>
                {
                    false
                }
                _ => continue,
            };
            out.push((base.join(path), removed));
        }
        Some(out)
    }
}

/// A Tree is fingerprinted as a Merkle tree (see [`declared_fingerprint`]).
impl crate::Fingerprints for TreeProvider {
    fn declared(&self, host: &Host, resource: &Resource) -> Result<String, ProviderError> {
        declared_fingerprint(host, resource)
    }

    fn observed_entries(&self, observed: &Observed) -> std::collections::BTreeMap<String, String> {
        observed
            .fields
            .get("tree")
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| {
                        Some((
                            i.get("path")?.as_str()?.to_owned(),
                            i.get("observed")
                                .and_then(Value::as_str)
                                .unwrap_or("missing")
                                .to_owned(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A Tree's `source:` is a folder of the repository, packed as its content.
impl TakesSourceFolder for TreeProvider {
    fn field(&self) -> &'static str {
        "source"
    }

    fn pack(&self, dir: &Path) -> Result<datum_core::Content, std::io::Error> {
        archive::read_source_dir(dir).map(|tree| archive::pack(&tree))
    }
}

impl Kind for TreeProvider {
    const KIND: &'static str = KIND;
    type Declaration = TreeDesired;
    type Written = TreeDeclaration;
    type Staging = Planned;

    fn declare(&self, resource: &Resource) -> Result<TreeDesired, ProviderError> {
        TreeDesired::from_resource(resource)
    }

    fn check_fields(&self, desired: &Value) -> Result<(), Vec<FieldError>> {
        let mut scalar = desired.clone();
        let mut errors = Vec::new();
        if let Some(map) = scalar.as_object_mut() {
            if let Some(exclude) = map.remove("exclude") {
                let as_obj = json!({ "exclude": exclude });
                match exclude_rules(&as_obj) {
                    Err(m) => errors.push(FieldError::new(&["exclude"], m)),
                    Ok(rules) => {
                        if let Err(e) = Exclusions::new(&rules) {
                            errors.push(FieldError::new(&["exclude"], e.to_string()));
                        }
                    }
                }
            }
            if let Some(purge) = map.remove("purge")
                && !purge.is_boolean()
            {
                errors.push(FieldError::new(&["purge"], "`purge` must be true or false"));
            }
        }
        errors.extend(check_fields("Tree", &scalar, FIELDS));
        all_or_nothing(errors)
    }

    fn paths(&self) -> Option<&dyn OwnsPaths> {
        Some(self)
    }

    fn owns_subtree(&self) -> bool {
        true
    }

    fn source_folder(&self) -> Option<&dyn TakesSourceFolder> {
        Some(self)
    }

    fn fingerprints(&self) -> Option<&dyn crate::Fingerprints> {
        Some(self)
    }

    fn observe(
        &self,
        host: &Host,
        resource: &Resource,
        d: &TreeDesired,
    ) -> Result<Observed, ProviderError> {
        // Through the boundary: a tree behind a parent link is an error
        // naming the link, never a listing of where it points.
        let Some(at) = host.try_locate(&d.path)? else {
            return Ok(Observed::absent());
        };
        let Some(stat) = at.lstat()? else {
            return Ok(Observed::absent());
        };
        let mut observed = Observed::absent();
        observed.meta = Some(stat.meta);
        if stat.kind != FileKind::Directory {
            observed.presence = Presence::OtherType(stat.kind.word().to_owned());
            return Ok(observed);
        }
        let Some(live) = at.open_dir()? else {
            return Ok(Observed::absent());
        };
        let (differences, tree, declared_root) = scan_and_compare(host, d, &live)?;
        observed.presence = Presence::Present;
        // Both root hashes, for the fleet report: an undrifted tree proves
        // itself by their equality (one hash), see [`FINGERPRINT_FIELD`].
        observed.fields.insert(
            FINGERPRINT_FIELD.to_owned(),
            json!({"declared": declared_root, "observed": tree.root_hash().to_string()}),
        );
        // Each difference carries the host entry's fingerprint, so an
        // observation that changes again is a new observation (what `accept`
        // compares), while the findings stay value-free.
        let items = differences
            .iter()
            .map(|(diff, values)| {
                let mut item = difference_json(diff);
                if let (Some(node), Some(obj)) = (tree.root.get(diff.path()), item.as_object_mut())
                {
                    obj.insert("observed".to_owned(), Value::String(node.hash.to_string()));
                    // Declared and observed mode, owner, group, link target
                    // (`mode: 0644 -> 0777`); content by its diff, never a hash.
                    let shown: Vec<Value> = values
                        .iter()
                        .filter(|v| v.field != "content")
                        .map(|v| json!({"field": v.field, "declared": v.declared, "observed": v.observed}))
                        .collect();
                    if !shown.is_empty() {
                        obj.insert("values".to_owned(), Value::Array(shown));
                    }
                    // A text diff of a changed entry's content, as for a
                    // File (never for a sensitive resource).
                    if !resource.sensitive
                        && values.iter().any(|v| v.field == "content")
                        && let Some(text) = entry_content_diff(host, d, diff.path())
                    {
                        obj.insert("content_diff".to_owned(), Value::String(text));
                    }
                }
                item
            })
            .collect();
        observed
            .fields
            .insert("tree".to_owned(), Value::Array(items));
        Ok(observed)
    }

    fn plan(&self, _resource: &Resource, d: &TreeDesired, observed: &Observed) -> Diff {
        diff(d.purge, observed)
    }

    fn stage(
        &self,
        _host: &Host,
        _resource: &Resource,
        _d: &TreeDesired,
        observed: &Observed,
        diff: &Diff,
    ) -> Result<Planned, ProviderError> {
        // Entries are staged and offered to the gate one at a time, as
        // `activate` writes them (parents first): see `converge`.
        Ok(planned(observed, diff))
    }

    fn activate(
        &self,
        host: &Host,
        _resource: &Resource,
        d: &TreeDesired,
        staging: Planned,
        gate: &mut dyn StagingGate,
    ) -> Result<(), ProviderError> {
        if !staging.diff.action().is_change() {
            return Ok(());
        }
        let at = host.locate(&d.path)?;
        converge(host, d, &at, gate)
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
pub const FINGERPRINT_FIELD: &str = "fingerprint";

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
    let (uid, gid) = (uid.unwrap_or(me), gid.unwrap_or(my_group));
    let mut node = declared_node(&d, Some(uid), Some(gid), None);
    node.prune(&d.exclusions()?);
    let tree = fingerprint_tree(node, Algorithm::Native).map_err(|e| ProviderError::Invalid {
        field: "source".to_owned(),
        message: e.to_string(),
    })?;
    Ok(tree.root_hash().to_string())
}

/// Each difference with its declared and observed values.
type Differences = Vec<(TreeDifference, Vec<ChangedValue>)>;

/// [`differences`], with the scanned host tree and the declared root hash.
fn scan_and_compare(
    host: &Host,
    d: &TreeDesired,
    live: &Dir,
) -> Result<(Differences, FingerprintedTree, String), ProviderError> {
    let exclusions = d.exclusions()?;
    let scanned = scan_dir(
        live.fd(),
        live.path(),
        &ScanOptions {
            algorithm: Algorithm::Native,
            exclude: Some(exclusions.clone()),
            threads: 0,
            progress: None,
        },
    )
    .map_err(|e| {
        ProviderError::Host(HostError::io(
            "scan",
            live.path(),
            std::io::Error::other(e.to_string()),
        ))
    })?;
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
    let mut declared = declared_node(d, uid, gid, Some(&scanned.tree.root));
    declared.prune(&exclusions);
    let declared =
        fingerprint_tree(declared, Algorithm::Native).map_err(|e| ProviderError::Invalid {
            field: "source".to_owned(),
            message: e.to_string(),
        })?;
    let found =
        compare_with_values(&declared, &scanned.tree).map_err(|e| ProviderError::Invalid {
            field: "source".to_owned(),
            message: e.to_string(),
        })?;
    let declared_root = declared.root_hash().to_string();
    Ok((found, scanned.tree, declared_root))
}

/// The declared tree as a fingerprint node. Where owner or group are not
/// declared, the observed node at the same path (if any) lends its own.
pub fn declared_node(
    d: &TreeDesired,
    uid: Option<u32>,
    gid: Option<u32>,
    observed: Option<&FingerprintedNode>,
) -> Node {
    // What is not declared is not managed: the observed entry of the same
    // kind at the same path lends its mode, owner or group.
    let meta_at = |rel: &Path, dir: bool| -> (u32, u32, u32) {
        let default = if dir {
            DEFAULT_DIR_MODE
        } else {
            DEFAULT_FILE_MODE
        };
        let declared_mode = if dir { d.dir_mode } else { d.meta.mode };
        let seen = observed
            .and_then(|o| o.get(rel))
            .and_then(|n| match &n.entry {
                Entry::Dir { mode, uid, gid } if dir => Some((*mode, *uid, *gid)),
                Entry::File { mode, uid, gid, .. } if !dir => Some((*mode, *uid, *gid)),
                _ => None,
            });
        let (sm, su, sg) = seen.unwrap_or((default, 0, 0));
        (
            declared_mode.unwrap_or(sm),
            uid.unwrap_or(su),
            gid.unwrap_or(sg),
        )
    };
    let (rm, ru, rg) = meta_at(Path::new(""), true);
    let mut root = Node::dir(rm, ru, rg);
    for (path, entry) in &d.entries {
        let rel = bytes_path(path);
        let node = match entry {
            DeclaredEntry::Dir => {
                let (m, u, g) = meta_at(rel, true);
                Node::dir(m, u, g)
            }
            DeclaredEntry::File { blake3, size, .. } => {
                let (m, u, g) = meta_at(rel, false);
                Node::File {
                    mode: m,
                    uid: u,
                    gid: g,
                    size: *size,
                    content: ContentHash {
                        function: HashFunction::Blake3,
                        digest: Digest(*blake3),
                    },
                }
            }
            DeclaredEntry::Symlink(target) => Node::symlink(target.clone()),
        };
        insert_at(&mut root, path, node);
    }
    root
}

/// Inserts `node` at the `/`-separated `path` (parents come first in byte
/// order, so they exist already; a missing one is created as a folder).
fn insert_at(root: &mut Node, path: &[u8], node: Node) {
    let mut parts: Vec<&[u8]> = path
        .split(|b| *b == b'/')
        .filter(|p| !p.is_empty())
        .collect();
    let Some(last) = parts.pop() else { return };
    let mut here = root;
    for part in parts {
        let Node::Dir {
            children,
            mode,
            uid,
            gid,
        } = here
        else {
            return;
        };
        let fresh = Node::dir(*mode, *uid, *gid);
        here = children.entry(part.to_vec()).or_insert(fresh);
    }
    let _ = here.insert(last.to_vec(), node);
}

fn bytes_path(bytes: &[u8]) -> &Path {
    use std::os::unix::ffi::OsStrExt;
    Path::new(std::ffi::OsStr::from_bytes(bytes))
}

/// Largest entry whose content a check diffs (either side).
const ENTRY_DIFF_LIMIT: u64 = 1024 * 1024;

/// The unified diff from an entry's declared text to the live one (what
/// changed on the host), when both are text of at most [`ENTRY_DIFF_LIMIT`].
/// The live file is read through the boundary, never through a link.
fn entry_content_diff(host: &Host, d: &TreeDesired, rel: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let archive::DeclaredEntry::File { size, source, .. } =
        d.entries.get(rel.as_os_str().as_bytes())?
    else {
        return None;
    };
    if *size > ENTRY_DIFF_LIMIT {
        return None;
    }
    let live_path = d.path.join(rel);
    let live = host.read(&live_path).ok()??;
    if live.len() as u64 > ENTRY_DIFF_LIMIT {
        return None;
    }
    let declared = datum_host::repo::read(source).ok()?;
    let (declared, live) = (
        std::str::from_utf8(&declared).ok()?,
        std::str::from_utf8(&live).ok()?,
    );
    let name = live_path.display();
    Some(
        similar::TextDiff::from_lines(declared, live)
            .unified_diff()
            .context_radius(2)
            .header(&format!("{name} (declared)"), &format!("{name} (live)"))
            .to_string(),
    )
}

/// How a difference travels in `Observed::fields["tree"]`.
pub fn difference_json(d: &TreeDifference) -> Value {
    let path = d.path().to_string_lossy().into_owned();
    match d {
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
    }
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
                .get("tree")
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

fn change(path: &str, before: Option<&str>, after: &str) -> FieldChange {
    FieldChange {
        field: format!("tree:{path}"),
        before: before.map(|b| Value::String(b.to_owned())),
        after: Some(Value::String(after.to_owned())),
    }
}

/// Makes the host tree match the declaration: the root, then every declared
/// entry in path order (parents first), then (with `purge`) the unmanaged
/// entries. Every check is made afresh on the live entry, and every entry is
/// reached from the tree's own handle, one folder at a time, without
/// following a link.
fn converge(
    host: &Host,
    d: &TreeDesired,
    root: &Located,
    gate: &mut dyn StagingGate,
) -> Result<(), ProviderError> {
    let (uid, gid) = d.meta.resolve(host)?;
    let exclusions = d.exclusions()?;
    ensure_dir(host, root, uid, gid, d.dir_mode)?;
    let Some(live) = root.open_dir()? else {
        return Err(HostError::MissingParent {
            path: root.path().to_path_buf(),
            parent: root.path().to_path_buf(),
        }
        .into());
    };
    let mut folders = Folders::new(live.clone());
    for (path, entry) in &d.entries {
        let rel = bytes_path(path);
        let is_dir = matches!(entry, DeclaredEntry::Dir);
        if excluded(&exclusions, rel, is_dir) {
            continue;
        }
        let target = folders.entry(rel)?;
        match entry {
            DeclaredEntry::Dir => ensure_dir(host, &target, uid, gid, d.dir_mode)?,
            DeclaredEntry::File { blake3, source, .. } => {
                let want = Declared {
                    blake3,
                    source: source.as_path(),
                };
                ensure_file(host, &target, want, uid, gid, d.meta.mode, gate)?;
            }
            DeclaredEntry::Symlink(to) => ensure_link(&target, to)?,
        }
    }
    if d.purge {
        for difference in differences(host, d, &live)? {
            if let TreeDifference::Unmanaged { path } = difference {
                folders.entry(&path)?.remove_all()?;
            }
        }
    }
    Ok(())
}

/// The folders of a tree opened so far, by path relative to its root.
struct Folders {
    open: std::collections::HashMap<PathBuf, Dir>,
}

impl Folders {
    fn new(root: Dir) -> Self {
        Folders {
            open: std::collections::HashMap::from([(PathBuf::new(), root)]),
        }
    }

    /// The folder `rel` (relative to the tree's root), opened one component
    /// at a time without following a link.
    fn dir(&mut self, rel: &Path) -> Result<Dir, ProviderError> {
        if let Some(dir) = self.open.get(rel) {
            return Ok(dir.clone());
        }
        let (parent, name) = match (rel.parent(), rel.file_name()) {
            (Some(parent), Some(name)) => (parent, name),
            _ => {
                return Err(HostError::io(
                    "reach",
                    rel,
                    std::io::Error::from(std::io::ErrorKind::InvalidInput),
                )
                .into());
            }
        };
        let parent = self.dir(parent)?;
        let Some(dir) = parent.open_child_dir(name)? else {
            return Err(HostError::MissingParent {
                path: parent.path().join(name),
                parent: parent.path().to_path_buf(),
            }
            .into());
        };
        self.open.insert(rel.to_path_buf(), dir.clone());
        Ok(dir)
    }

    /// The entry `rel` (relative to the tree's root), its folder open.
    fn entry(&mut self, rel: &Path) -> Result<Located, ProviderError> {
        let parent = rel.parent().unwrap_or(Path::new(""));
        let Some(name) = rel.file_name() else {
            return Err(HostError::io(
                "reach",
                rel,
                std::io::Error::from(std::io::ErrorKind::InvalidInput),
            )
            .into());
        };
        Ok(self.dir(parent)?.entry(name))
    }
}

/// True when `rel` or one of its parent folders is excluded.
fn excluded(exclusions: &Exclusions, rel: &Path, is_dir: bool) -> bool {
    if exclusions.is_excluded(rel, is_dir) {
        return true;
    }
    rel.ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .any(|a| exclusions.is_excluded(a, true))
}

fn ensure_dir(
    host: &Host,
    at: &Located,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Result<(), ProviderError> {
    match at.lstat()? {
        Some(stat) if stat.kind == FileKind::Directory => {
            fix_meta(at, &stat.meta, uid, gid, mode)?;
            return Ok(());
        }
        // A file or link where a folder is declared: inside an owned tree it
        // is replaced.
        Some(_) => at.remove_file()?,
        None => {}
    }
    host.forget_dirs_under(&at.declared());
    at.create_dir(mode.unwrap_or(DEFAULT_DIR_MODE), uid, gid)?;
    Ok(())
}

/// Sets the declared owner, group and mode where they differ. A chown clears
/// set-id bits, so the mode (declared, or as it was) is set again after one.
fn fix_meta(
    at: &Located,
    meta: &datum_core::FileMeta,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Result<(), ProviderError> {
    let uid = uid.filter(|u| *u != meta.uid);
    let gid = gid.filter(|g| *g != meta.gid);
    let owner_changes = uid.is_some() || gid.is_some();
    let mode = match mode {
        Some(m) if m != meta.mode || owner_changes => Some(m),
        None if owner_changes => Some(meta.mode),
        _ => None,
    };
    if owner_changes || mode.is_some() {
        at.set_metadata(uid, gid, mode)?;
    }
    Ok(())
}

/// A declared file: its hash and the repository file holding its bytes.
#[derive(Clone, Copy)]
struct Declared<'a> {
    blake3: &'a [u8; 32],
    source: &'a Path,
}

fn same_content(bytes: &[u8], blake3: &[u8; 32]) -> bool {
    Algorithm::Native.hash_content(bytes).digest.0 == *blake3
}

fn ensure_file(
    host: &Host,
    at: &Located,
    want: Declared<'_>,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
    gate: &mut dyn StagingGate,
) -> Result<(), ProviderError> {
    let current = at.lstat()?;
    let mut kept_mode = None;
    if let Some(stat) = &current {
        match stat.kind {
            FileKind::Directory => {
                return Err(HostError::InTheWay {
                    path: at.path().to_path_buf(),
                    found: "directory".to_owned(),
                }
                .into());
            }
            FileKind::File => {
                if same_content(&at.read()?, want.blake3) {
                    return fix_meta(at, &stat.meta, uid, gid, mode);
                }
                // An undeclared mode carries over to the rewritten file.
                kept_mode = Some(stat.meta.mode);
            }
            _ => {}
        }
    }
    // The bytes come from the repository now: refuse a source that changed
    // since the catalogue hashed it (it would not be what was checked).
    let bytes =
        datum_host::repo::read(want.source).map_err(|e| HostError::io("read", want.source, e))?;
    if !same_content(&bytes, want.blake3) {
        return Err(ProviderError::Invalid {
            field: "source".to_owned(),
            message: format!(
                "{} changed since the catalogue was compiled; compile again",
                want.source.display()
            ),
        });
    }
    let mode = mode.or(kept_mode).unwrap_or(DEFAULT_FILE_MODE);
    crate::file::write_staged(host, at, bytes, uid, gid, mode, gate)
}

fn ensure_link(at: &Located, to: &[u8]) -> Result<(), ProviderError> {
    let target = bytes_path(to);
    match at.lstat()? {
        Some(stat) if stat.kind == FileKind::Symlink => {
            if at.read_link()? == target {
                return Ok(());
            }
            at.remove_file()?;
        }
        Some(stat) if stat.kind == FileKind::Directory => {
            return Err(HostError::InTheWay {
                path: at.path().to_path_buf(),
                found: "directory".to_owned(),
            }
            .into());
        }
        Some(_) => at.remove_file()?,
        None => {}
    }
    at.symlink(target)?;
    Ok(())
}

/// Formats a mode for reports (re-exported for `datum check`).
pub fn mode_text(mode: u32) -> String {
    format_mode(mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Provider;
    use datum_fingerprint::compare;

    #[test]
    fn the_declaration_type_has_the_field_table_and_agrees_with_check() {
        use crate::common::schema;
        let p = TreeProvider;
        let schema = crate::Provider::declaration_schema(&p, &mut schema::generator());
        let (names, required) = schema::fields_of(&schema);
        let mut want: Vec<&str> = FIELDS
            .iter()
            .map(|f| f.name)
            .chain(["exclude", "purge"])
            .collect();
        want.sort();
        assert_eq!(names, want);
        assert_eq!(required, ["path", "source"]);
        let cases = [
            serde_json::json!({"path": "/etc/limits.d", "source": "trees/limits.d"}),
            serde_json::json!({"path": "/etc/limits.d", "source": "t", "owner": "root", "group": "adm", "mode": "0640", "dir_mode": "0750", "exclude": ["*.local"], "purge": true}),
            serde_json::json!({"path": "/etc/limits.d"}),
            serde_json::json!({"path": "/etc/limits.d", "source": "t", "purge": "yes"}),
            serde_json::json!({"path": "/etc/limits.d", "source": "t", "exclude": "*.local"}),
            serde_json::json!({"path": "/etc/limits.d", "source": "t", "exclude": [1]}),
            serde_json::json!({"path": "/etc/limits.d", "source": "t", "dir_mode": 755}),
            serde_json::json!({"path": "/etc/limits.d", "source": "t", "ensure": "absent"}),
        ];
        schema::agrees_with_check(&p, &cases).unwrap();
    }

    fn observed_with(items: Value) -> Observed {
        let mut o = Observed::absent();
        o.presence = Presence::Present;
        o.fields.insert("tree".into(), items);
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

    #[test]
    fn check_refuses_bad_exclude_and_purge() {
        let p = TreeProvider;
        assert!(p.check(&json!({"path": "/etc/x", "source": "t"})).is_ok());
        let errs = p
            .check(&json!({"path": "/etc/x", "source": "t", "exclude": "*.swp", "purge": "yes"}))
            .unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.path[0].as_str()).collect();
        assert_eq!(fields, vec!["exclude", "purge"]);
        assert!(p.check(&json!({"path": "/etc/x"})).is_err());
    }

    #[test]
    fn undeclared_mode_and_owner_are_taken_from_the_host() {
        let entries: DeclaredTree = [(
            b"a".to_vec(),
            DeclaredEntry::File {
                blake3: Algorithm::Native.hash_content(b"x").digest.0,
                size: 1,
                source: PathBuf::from("/repo/a"),
            },
        )]
        .into();
        let mut d = TreeDesired {
            path: PathBuf::from("/etc/t"),
            meta: MetaDesired::default(),
            dir_mode: None,
            exclude: Vec::new(),
            purge: false,
            entries,
        };
        let mut host = Node::dir(0o750, 7, 8);
        let _ = host.insert(
            "a",
            Node::file_with_bytes(Algorithm::Native, 0o600, 7, 8, b"x"),
        );
        let host = fingerprint_tree(host, Algorithm::Native).unwrap();
        let declared = fingerprint_tree(
            declared_node(&d, None, None, Some(&host.root)),
            Algorithm::Native,
        )
        .unwrap();
        assert!(compare(&declared, &host).unwrap().is_empty());
        // Declared: compared.
        d.meta.mode = Some(0o644);
        let declared = fingerprint_tree(
            declared_node(&d, Some(0), None, Some(&host.root)),
            Algorithm::Native,
        )
        .unwrap();
        let found = compare(&declared, &host).unwrap();
        let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(shown, vec!["changed . (owner)", "changed a (mode, owner)"]);
    }

    #[test]
    fn nested_entries_land_under_their_parents() {
        let mut root = Node::dir(0o755, 0, 0);
        insert_at(&mut root, b"sub", Node::dir(0o700, 0, 0));
        insert_at(&mut root, b"sub/a", Node::symlink("x"));
        assert!(root.get(Path::new("sub/a")).is_some());
        assert!(matches!(
            root.get(Path::new("sub")),
            Some(Node::Dir { mode: 0o700, .. })
        ));
    }
}
