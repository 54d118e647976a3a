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
mod compare;

use std::path::{Path, PathBuf};

use datum_core::{Action, Diff, FieldChange, Observed, Presence, Resource};
use datum_fingerprint::{Algorithm, Exclusions, FingerprintedTree, TreeDifference};
use datum_host::fs::{FileKind, Stat};
use datum_host::tree_scan::{Prune, ScanOptions, scan_dir_pruned};
use datum_host::{Dir, Host, HostError, Located};
use serde_json::{Value, json};

use crate::common::fields::{declared_path, format_mode, parse_mode};
use crate::common::schema;
use crate::common::{
    FieldKind, FieldSpec, MetaDesired, all_or_nothing, check_fields, note_unknown_accounts,
    unknown_account_refusal,
};
use crate::kind::{declaration, planned};
use crate::{
    Activated, DeclaredMeta, FieldError, FieldLookup, Kind, OwnsPaths, PathClaim, Planned,
    ProviderError, Refusal, Staged, TakesSourceFolder,
};
use archive::{DeclaredTree, EntryRef};
use compare::{Differences, EntryMeta};

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
    description = "A folder of the repository copied to `path`, every file with owner, group and mode; `purge` removes what is not declared. Another resource may be declared below `path` only where `exclude` leaves it out."
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
    /// Declared entries below the root (from the catalogue); shared with
    /// the scan, which compares each folder as it finishes it.
    pub entries: std::sync::Arc<DeclaredTree>,
}

impl TreeDesired {
    pub fn from_resource(resource: &Resource) -> Result<Self, ProviderError> {
        let invalid = |field: &str, message: String| ProviderError::Invalid {
            field: field.to_owned(),
            message,
        };
        let desired = &resource.desired;
        let entries = match &resource.content {
            Some(content) => archive::decode(content.bytes.clone())
                .map_err(|e| invalid("source", e.to_string()))?,
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
            entries: std::sync::Arc::new(entries),
        })
    }

    /// The metadata declared for every entry, owner and group as resolved ids.
    fn entry_meta(&self, uid: Option<u32>, gid: Option<u32>) -> EntryMeta {
        EntryMeta {
            file_mode: self.meta.mode,
            dir_mode: self.dir_mode,
            uid,
            gid,
        }
    }

    /// The compiled exclusion rules, Datum's own staging folders
    /// (`STAGING_RULE`) and, in a tree above them, Datum's own folders
    /// (`own_folder_rule`).
    pub fn exclusions(&self) -> Result<Exclusions, ProviderError> {
        self.exclusions_at(None)
    }

    /// [`TreeDesired::exclusions`] for the tree as the walk reached it:
    /// `live` is its open folder on `host`. Through a link
    /// `boundary.follow_links` lists (`/etc/x -> /var`, a tree at
    /// `/etc/x/lib`) the folder's real place is above Datum's own folders
    /// though its spelling is not, and they are left out all the same.
    pub fn exclusions_in(&self, host: &Host, live: &Dir) -> Result<Exclusions, ProviderError> {
        let real = live
            .path()
            .strip_prefix(host.root())
            .ok()
            .map(|rel| Path::new("/").join(rel));
        self.exclusions_at(real.as_deref())
    }

    fn exclusions_at(&self, real: Option<&Path>) -> Result<Exclusions, ProviderError> {
        let mut own: Vec<String> = Vec::new();
        for folder in DATUMS_OWN_FOLDERS.iter().map(Path::new) {
            for at in [Some(self.path.as_path()), real].into_iter().flatten() {
                if let Some(rule) = own_folder_rule(at, folder)
                    && !own.contains(&rule)
                {
                    own.push(rule);
                }
            }
        }
        let rules = self.exclude.iter().map(String::as_str);
        let rules = rules
            .chain([STAGING_RULE])
            .chain(own.iter().map(String::as_str));
        Exclusions::new(rules).map_err(|e| ProviderError::Invalid {
            field: "exclude".to_owned(),
            message: e.to_string(),
        })
    }
}

/// The staging folders Datum makes beside each file it writes
/// (`datum_host::staging::STAGE_PREFIX`), left behind when a pass is killed
/// between staging and the rename: never part of the tree (not unmanaged
/// drift, never purged), and swept by the next staging in their folder.
const STAGING_RULE: &str = ".datum.stage.*/";

/// Datum's own folders: `/var/lib/datum` (the state store, the backups, the
/// lock) and `/etc/datum` (the host's identity and labels, the fleet
/// server's token, the pull trust files and the link to the repository a
/// pass reads).
const DATUMS_OWN_FOLDERS: [&str; 2] = [datum_host::lock::STATE_FOLDER, "/etc/datum"];

/// The rule leaving Datum's own `folder` out of a tree whose path is above
/// it, anchored at the tree's root. Without it a purging Tree at `/var/lib`
/// or `/var` removed the state store and the backups (the evidence it had
/// just saved) in the middle of its own pass, and again on every pass; one
/// at `/etc` the host's identity and the repository's link.
fn own_folder_rule(tree: &Path, folder: &Path) -> Option<String> {
    let below = folder.strip_prefix(tree).ok()?;
    (!below.as_os_str().is_empty()).then(|| format!("/{}/", below.display()))
}

/// Why an `exclude` rule can never match an entry of the tree at `tree`
/// (its declared path), if it cannot: it would leave out nothing, and a
/// purging Tree would remove what the rule was written to keep.
fn never_matches(rule: &str, tree: Option<&str>) -> Option<String> {
    let trimmed = rule.trim();
    if trimmed.is_empty() {
        return Some(format!(
            "`exclude` rule {rule:?} is empty: it matches nothing"
        ));
    }
    if trimmed.starts_with('#') {
        return Some(format!(
            "`exclude` rule {rule:?} is a comment in gitignore syntax and matches nothing (write \\# for a name that starts with #)"
        ));
    }
    let pattern = trimmed.strip_prefix('!').unwrap_or(trimmed);
    if let Some(tree) = tree
        && let Some(below) = pattern.strip_prefix(tree)
        && below.starts_with('/')
    {
        return Some(format!(
            "`exclude` rule {rule:?} names the tree's own path: rules are relative to the tree's own folder ({tree}), so write {:?}",
            format!("{}{below}", &trimmed[..trimmed.len() - pattern.len()])
        ));
    }
    let inner = pattern.trim_start_matches('/').trim_end_matches('/');
    if inner.is_empty() || inner.split('/').any(|c| c == "." || c == "..") {
        return Some(format!(
            "`exclude` rule {rule:?} can never match: the tree's entries are named relative to its folder, without `.` or `..`"
        ));
    }
    None
}

fn exclude_rules(desired: &dyn datum_core::DeclaredFields) -> Result<Vec<String>, String> {
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

/// A Tree owns its folder (`path:`). What is declared inside it (only
/// where `exclude` leaves it out) is ordered after it, as inside a
/// Directory: the tree makes that folder. A Tree is a folder, too, for a
/// tree it is declared in (a folder-only rule such as `cache/` leaves it
/// out).
impl OwnsPaths for TreeProvider {
    fn claim<'a>(&self, field: FieldLookup<'_, 'a>) -> Option<PathClaim<'a>> {
        crate::common::entry::path_claim(field, true)
    }

    /// Only what `exclude` leaves out: the rest the tree ships (and with
    /// `purge` removes when its source does not have it).
    fn leaves_inside(
        &self,
        field: FieldLookup<'_, '_>,
        below: &Path,
        is_dir: bool,
    ) -> Result<(), String> {
        let rules: Vec<&str> = field("exclude")
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        // Rules that do not compile are the tree's own error, reported by
        // its check; nothing is left out by them.
        let left_out = Exclusions::new(rules).is_ok_and(|e| excluded(&e, below, is_dir));
        if left_out {
            return Ok(());
        }
        Err(format!(
            "which manages everything below its path: ship `{}` in the tree's source, or leave it to this resource with the tree's `exclude`",
            below.display()
        ))
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
            // By its bytes: a name that is not UTF-8 is saved too.
            let path = item_path(item).unwrap_or_default();
            if path.as_os_str().is_empty() || path == Path::new(".") {
                continue;
            }
            let removed = match item.get("category").and_then(Value::as_str) {
                Some("unmanaged") if purge => true,
                // A folder where a file or link is declared: a purge
                // removes it (every file below it saved).
                Some("type_changed") => {
                    purge
                        && item.get("found").and_then(Value::as_str) == Some("directory")
                        && item.get("declared").and_then(Value::as_str) != Some("directory")
                }
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
        archive::pack_source_dir(dir)
    }

    /// An entry whose path on the host (the tree's `path:` and the entry's
    /// path in it) is longer than PATH_MAX: the walk reaches it one name at
    /// a time, so it could be made, but nothing that names a managed file
    /// by its declared path takes it (the backup of its old content, a
    /// `backup restore`, a File there), and the first change to it would
    /// fail for good, after the rest of the tree was written.
    fn check_packed(&self, content: &datum_core::Content, path: &str) -> Result<(), String> {
        let tree = archive::decode(content.bytes.clone()).map_err(|e| e.to_string())?;
        let base = path.trim_end_matches('/').len();
        let longest = tree.iter().map(|(rel, _)| rel).max_by_key(|rel| rel.len());
        match longest {
            Some(rel) if base + 1 + rel.len() > MAX_HOST_PATH => Err(format!(
                "{:?} is too deep for `path: {path}`: its path on the host would be {} bytes, more than the {MAX_HOST_PATH} the system allows for a path; move the folder up or shorten its names",
                String::from_utf8_lossy(rel),
                base + 1 + rel.len()
            )),
            _ => Ok(()),
        }
    }
}

/// The longest path the system takes (PATH_MAX less its NUL), which
/// `datum_host::paths::check_declared` holds every declared path to.
const MAX_HOST_PATH: usize = 4095;

impl Kind for TreeProvider {
    const KIND: &'static str = KIND;
    type Declaration = TreeDesired;
    type Written = TreeDeclaration;
    type Staging = TreeStaging;

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
                        let tree = desired.get("path").and_then(Value::as_str);
                        if let Some(m) = rules.iter().find_map(|r| never_matches(r, tree)) {
                            errors.push(FieldError::new(&["exclude"], m));
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
        // naming the link, never a listing of where it points. A missing
        // parent: nothing is there, and the observation says why.
        let at = match host.locate(&d.path) {
            Ok(at) => at,
            Err(e) if e.is_missing_parent() => {
                return Ok(crate::common::entry::absent_behind(host, &e));
            }
            Err(e) => return Err(e.into()),
        };
        // The tree's folder is made or changed with the declared owner and
        // group: one the account files do not know is noted (once per tree).
        let mut observed = Observed::absent();
        note_unknown_accounts(host, &d.meta, &mut observed.fields);
        let Some(stat) = at.lstat()? else {
            return Ok(observed);
        };
        let root_ids = (stat.meta.uid, stat.meta.gid);
        observed.meta = Some(stat.meta);
        if stat.kind != FileKind::Directory {
            observed.presence = Presence::OtherType(stat.kind.word().to_owned());
            return Ok(observed);
        }
        let Some(live) = at.open_dir()? else {
            observed.meta = None;
            return Ok(observed);
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
        let mut items: Vec<Value> = differences
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
        unresolved_accounts(host, d, root_ids, &tree.root_hash().to_string(), &mut items);
        if d.purge {
            mark_folders_keeping_excluded(host, d, &live, &mut items)?;
        }
        observed
            .fields
            .insert("tree".to_owned(), Value::Array(items));
        Ok(observed)
    }

    fn plan(&self, _resource: &Resource, d: &TreeDesired, observed: &Observed) -> Diff {
        diff(d.purge, observed)
    }

    /// A folder where the source has a file or a link, in a tree that does
    /// not purge: the walk refuses to remove it (see `Walk::clear`), so
    /// `datum plan` says the change would fail, as the apply will.
    fn refuses(&self, d: &TreeDesired, observed: &Observed) -> Option<String> {
        if d.purge {
            return None;
        }
        folder_refused(d, observed, "directory", folder_in_the_way)
    }

    /// A tree whose parent folder is missing (or is not a folder): the tree
    /// makes only its own folder. A folder where the source has a file or a
    /// link, in a tree that purges, holding excluded entries: the walk
    /// keeps those, so it refuses to remove the folder (see `Walk::clear`).
    /// Either unless an earlier change of the pass makes or clears it first.
    /// A declared owner or group no account file knows (the walk resolves
    /// them before anything else), unless an earlier change makes it.
    fn refuses_unless_changed_first(
        &self,
        d: &TreeDesired,
        observed: &Observed,
    ) -> Option<Refusal> {
        if let Some(why) = crate::common::entry::parent_refusal(&d.path, observed) {
            return Some(Refusal::around(why));
        }
        if let Some(refusal) = unknown_account_refusal(&d.meta, observed) {
            return Some(refusal);
        }
        if !d.purge {
            return None;
        }
        folder_refused(d, observed, FOLDER_KEEPING_EXCLUDED, |i| {
            folder_in_the_way(i) && i.get(HOLDS_EXCLUDED).and_then(Value::as_bool) == Some(true)
        })
        .map(Refusal::around)
    }

    fn stage(
        &self,
        _host: &Host,
        resource: &Resource,
        d: &TreeDesired,
        observed: &Observed,
        diff: &Diff,
    ) -> Result<TreeStaging, ProviderError> {
        // The packed entries may have been read back from the catalogue
        // snapshot, a file a damaged disk can alter after the compile: a
        // link target, a name or a file's hash changed there would be made
        // live (a file's bytes are checked against its packed hash, which
        // is no help when that hash is what changed). Checked against the
        // checksum the compile recorded before anything is written, as a
        // File's bytes are; not quoted (it is the content's checksum).
        if diff.action().is_change() {
            packed_as_compiled(resource, d)?;
        }
        // Entries are staged one at a time, as `activate` reaches them
        // (parents first): each is handed back to the engine to check
        // before it replaces the live one (see `TreeStaging`).
        Ok(TreeStaging {
            planned: planned(observed, diff),
            walk: None,
        })
    }

    fn validation_target<'s>(&self, staging: &'s TreeStaging) -> Option<Staged<'s>> {
        staging.walk.as_ref()?.pending.as_ref().map(|p| p.target())
    }

    fn activate(
        &self,
        host: &Host,
        _resource: &Resource,
        d: &TreeDesired,
        staging: TreeStaging,
    ) -> Result<Activated<TreeStaging>, ProviderError> {
        if !staging.planned.diff.action().is_change() {
            return Ok(Activated::Done);
        }
        let mut walk = match staging.walk {
            Some(walk) => walk,
            None => Walk::start(host, d)?,
        };
        // The entry the engine has just checked goes live (over a folder
        // in its way that the purge takes: see `Walk::clear`).
        if let Some(pending) = walk.pending.take() {
            if let Some(folder) = walk.in_the_way.take() {
                folder.remove_all()?;
            }
            pending.commit(host)?;
        }
        match walk.advance(host, d)? {
            true => Ok(Activated::Next(TreeStaging {
                planned: staging.planned,
                walk: Some(walk),
            })),
            false => Ok(Activated::Done),
        }
    }

    fn discard(&self, staging: TreeStaging) {
        if let Some(pending) = staging.walk.and_then(|w| w.pending) {
            pending.discard();
        }
    }
}

/// Refuses a Tree whose packed entries are not those the compile recorded
/// the checksum of (see `stage`).
fn packed_as_compiled(resource: &Resource, d: &TreeDesired) -> Result<(), ProviderError> {
    if resource
        .content
        .as_ref()
        .is_some_and(|c| c.sha256 == d.entries.checksum())
    {
        return Ok(());
    }
    Err(ProviderError::Invalid {
        field: "source".to_owned(),
        message: "the declared tree does not match the checksum recorded when the catalogue was compiled (a damaged catalogue snapshot?); nothing was written: run again with --recompile".to_owned(),
    })
}

/// What a Tree carries from `stage` through each `activate`: the plan, and
/// where the walk over the declared entries stands. A Tree's change is many
/// entries; folders, links, owners and modes are set as the walk reaches
/// them, and each file whose content changes is staged beside its target
/// and handed back to the engine ([`Activated::Next`]), which runs the
/// Tree's validator on it and keeps the evidence before the next
/// `activate` renames it over the live file. An entry the engine refuses
/// is discarded; the entries before it are live (a Tree is not one atomic
/// change; `datum plan` runs the validator on every changed entry first).
pub struct TreeStaging {
    planned: Planned,
    walk: Option<Walk>,
}

/// The walk of one Tree's activation, between two calls of `activate`.
struct Walk {
    uid: Option<u32>,
    gid: Option<u32>,
    exclusions: Exclusions,
    live: Dir,
    folders: Folders,
    /// The next declared entry to handle (its position in tree order).
    next: usize,
    /// The file staged for the engine to check, not yet live.
    pending: Option<crate::file::StagedContent>,
    /// A folder where `pending` goes, removed just before it goes live.
    in_the_way: Option<Located>,
}

impl Walk {
    /// Owner, exclusions, and the tree's own folder, made as declared.
    fn start(host: &Host, d: &TreeDesired) -> Result<Walk, ProviderError> {
        let root = host.locate(&d.path)?;
        let (uid, gid) = d.meta.resolve(host)?;
        // Checked before anything is made; then made for where the
        // folder really is.
        d.exclusions()?;
        ensure_dir(host, &root, uid, gid, d.dir_mode)?;
        let Some(live) = root.open_dir()? else {
            return Err(HostError::MissingParent {
                path: root.path().to_path_buf(),
                parent: root.path().to_path_buf(),
            }
            .into());
        };
        let exclusions = d.exclusions_in(host, &live)?;
        Ok(Walk {
            uid,
            gid,
            exclusions,
            folders: Folders::new(live.clone()),
            live,
            next: 0,
            pending: None,
            in_the_way: None,
        })
    }

    /// Makes each declared entry after the last one handled match, in path
    /// order (parents first), until a file's new content is staged (`true`:
    /// it is in `pending`) or the declared entries are done; then (with
    /// `purge`) removes the unmanaged entries (`false`). Every check is made
    /// afresh on the live entry, and every entry is reached from the tree's
    /// own handle, one folder at a time, without following a link.
    fn advance(&mut self, host: &Host, d: &TreeDesired) -> Result<bool, ProviderError> {
        while let Some((path, entry)) = d.entries.at(self.next) {
            self.next += 1;
            let rel = bytes_path(path);
            let is_dir = matches!(entry, EntryRef::Dir);
            if excluded(&self.exclusions, rel, is_dir) {
                continue;
            }
            let target = self.folders.entry(rel)?;
            match entry {
                EntryRef::Dir => ensure_dir(host, &target, self.uid, self.gid, d.dir_mode)?,
                EntryRef::File { blake3, size } => {
                    let source = d.entries.source_of(path);
                    let want = Declared {
                        blake3,
                        size,
                        source: &source,
                    };
                    // A folder in the way is found by the staging's own
                    // look at the entry (no second one per file).
                    let mut in_the_way = false;
                    let staged =
                        match stage_file(host, &target, want, self.uid, self.gid, d.meta.mode) {
                            Err(ProviderError::Host(HostError::InTheWay { .. }))
                                if self.clear(d, &target, rel)? =>
                            {
                                in_the_way = true;
                                Some(stage_new_file(
                                    host,
                                    &target,
                                    want,
                                    self.uid,
                                    self.gid,
                                    d.meta.mode,
                                )?)
                            }
                            other => other?,
                        };
                    if let Some(staged) = staged {
                        self.pending = Some(staged);
                        self.in_the_way = in_the_way.then_some(target);
                        return Ok(true);
                    }
                }
                EntryRef::Symlink(to) => {
                    if self.clear(d, &target, rel)? {
                        target.remove_all()?;
                    }
                    ensure_link(host, &target, to)?;
                }
            }
        }
        if d.purge {
            for difference in differences(host, d, &self.live)? {
                if let TreeDifference::Unmanaged { path } = difference {
                    self.folders.entry(&path)?.remove_all()?;
                }
            }
        }
        Ok(false)
    }

    /// Whether `target` (at `rel`) is a folder where a file or link is
    /// declared that a purging tree removes (`true`: when the new entry
    /// goes live). Its entries are unmanaged, which `purge: true` asks to
    /// remove (the engine saved its files first), unless one is excluded:
    /// then it stays, and the entry fails. Without `purge` a folder in the
    /// way is a failure, as ever.
    fn clear(&self, d: &TreeDesired, target: &Located, rel: &Path) -> Result<bool, ProviderError> {
        if !d.purge
            || target
                .lstat()?
                .is_none_or(|s| s.kind != FileKind::Directory)
        {
            return Ok(false);
        }
        let Some(dir) = target.open_dir()? else {
            return Ok(false);
        };
        if holds_excluded(&dir, rel, &self.exclusions, &mut Default::default())? {
            return Err(HostError::InTheWay {
                path: target.path().to_path_buf(),
                found: FOLDER_KEEPING_EXCLUDED.to_owned(),
            }
            .into());
        }
        Ok(true)
    }
}

/// What is in the way when a purge cannot clear a folder (see `Walk::clear`).
const FOLDER_KEEPING_EXCLUDED: &str = "directory holding excluded entries";

/// Where a difference of a purging tree's observation says that the folder
/// in the way of a file or link holds excluded entries (`true`).
pub const HOLDS_EXCLUDED: &str = "holds_excluded";

/// The walk's own error for the first difference of the observed tree
/// that `refused` picks (a folder it will not remove), as `found`.
fn folder_refused(
    d: &TreeDesired,
    observed: &Observed,
    found: &str,
    refused: impl Fn(&Value) -> bool,
) -> Option<String> {
    let items = observed.fields.get("tree")?.as_array()?;
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
fn folder_in_the_way(item: &Value) -> bool {
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
fn mark_folders_keeping_excluded(
    host: &Host,
    d: &TreeDesired,
    live: &Dir,
    items: &mut [Value],
) -> Result<(), ProviderError> {
    let mut exclusions = None;
    let mut folders = Folders::new(live.clone());
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
fn unresolved_accounts(
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
fn scan_and_compare(
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
    let prune = {
        let (entries, exclusions, proved) = (
            Arc::clone(&d.entries),
            exclusions.clone(),
            Arc::clone(&proved),
        );
        Prune(Arc::new(
            move |rel: &Path, node: &datum_fingerprint::FingerprintedNode| {
                let mut proved = proved.lock().unwrap_or_else(PoisonError::into_inner);
                let equal = compare::proves(&entries, &meta, &exclusions, &proved, rel, node);
                if equal {
                    proved.insert(rel.to_path_buf());
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
    let compare = |kept: Option<&HashSet<PathBuf>>| {
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
    let mut kept = HashSet::new();
    let mut folders = Folders::new(live.clone());
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

/// Whether the host folder `dir` (at `rel` in the tree) holds an excluded
/// entry, at any depth; every folder that does is added to `kept`. Links
/// are never followed.
fn holds_excluded(
    dir: &Dir,
    rel: &Path,
    exclusions: &Exclusions,
    kept: &mut std::collections::HashSet<PathBuf>,
) -> Result<bool, ProviderError> {
    let mut holds = false;
    for (name, kind) in dir.list()? {
        let child = rel.join(&name);
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
        if exclusions.is_excluded(&child, is_dir) {
            holds = true;
        } else if is_dir
            && let Some(sub) = dir.open_child_dir(&name)?
            && holds_excluded(&sub, &child, exclusions, kept)?
        {
            holds = true;
        }
    }
    if holds {
        kept.insert(rel.to_path_buf());
    }
    Ok(holds)
}

fn bytes_path(bytes: &[u8]) -> &Path {
    use std::os::unix::ffi::OsStrExt;
    Path::new(std::ffi::OsStr::from_bytes(bytes))
}

/// Largest entry whose content a check diffs (either side).
const ENTRY_DIFF_LIMIT: u64 = 1024 * 1024;

/// The unified diff from an entry's declared text to the live one (what
/// changed on the host), when both are text of at most [`ENTRY_DIFF_LIMIT`].
/// The live file is read through the boundary, never through a link, and
/// only when everyone may read it (else a line saying why).
fn entry_content_diff(host: &Host, d: &TreeDesired, rel: &Path) -> Option<String> {
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
fn item_path(item: &Value) -> Option<PathBuf> {
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
            fix_meta(at, &stat, uid, gid, mode)?;
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

/// Sets the declared owner, group and mode where they differ from `seen`
/// (the entry's `lstat`), on that very entry or on nothing. A chown clears
/// set-id bits, so the mode (declared, or as it was) is set again after one.
fn fix_meta(
    at: &Located,
    seen: &Stat,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Result<(), ProviderError> {
    if let Some(set) = meta_changes(&seen.meta, uid, gid, mode) {
        at.set_metadata(seen, set.uid, set.gid, set.mode)?;
    }
    Ok(())
}

/// What [`meta_changes`] found must be set: each `None` is left as it is.
struct MetaToSet {
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
}

/// What [`fix_meta`] would set (owner, group, mode), or `None` when
/// everything declared is as observed.
fn meta_changes(
    meta: &datum_core::FileMeta,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Option<MetaToSet> {
    let uid = uid.filter(|u| *u != meta.uid);
    let gid = gid.filter(|g| *g != meta.gid);
    let owner_changes = uid.is_some() || gid.is_some();
    let mode = match mode {
        Some(m) if m != meta.mode || owner_changes => Some(m),
        None if owner_changes => Some(meta.mode),
        _ => None,
    };
    (owner_changes || mode.is_some()).then_some(MetaToSet { uid, gid, mode })
}

/// A declared file: its hash and the repository file holding its bytes.
#[derive(Clone, Copy)]
struct Declared<'a> {
    blake3: &'a [u8; 32],
    size: u64,
    source: &'a Path,
}

fn same_content(bytes: &[u8], blake3: &[u8; 32]) -> bool {
    Algorithm::Native.hash_content(bytes).digest.0 == *blake3
}

/// Whether the live regular file at `at` (of `len` bytes by its `lstat`)
/// holds the declared content: sizes first, then its BLAKE3 streamed
/// through a fixed buffer, so a live file of any size costs the same
/// memory.
fn live_holds(at: &Located, seen: &Stat, want: &Declared<'_>) -> Result<bool, HostError> {
    if seen.meta.size != want.size {
        return Ok(false);
    }
    // The file opened must be the one looked at (`seen`, the lstat the
    // change in place is then tied to): the folder's owner may swap the
    // name between the two, to have another file's bytes compared and
    // their own file (a root-owned secret) given the mode.
    let (mut file, opened) = at.open_file_stat()?;
    if opened.meta.dev != seen.meta.dev
        || opened.meta.inode != seen.meta.inode
        || opened.meta.size != want.size
    {
        return Ok(false);
    }
    let mut hasher = Algorithm::Native.content_hasher();
    datum_host::fs::read_through(&mut file, at.path(), |chunk| hasher.update(chunk))?;
    Ok(hasher.finish().digest.0 == *want.blake3)
}

/// A declared file's new content staged beside `at` (with owner, group and
/// mode), or `None` when the live file already holds it (its owner, group
/// and mode are then set as declared).
fn stage_file(
    host: &Host,
    at: &Located,
    want: Declared<'_>,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Result<Option<crate::file::StagedContent>, ProviderError> {
    let current = at.lstat()?;
    let mut kept_mode = None;
    let mut kept_owner = (None, None);
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
                // A hard-linked file whose owner or mode must change is
                // rewritten instead: a change in place would reach its other
                // names (the host refuses it).
                // So is one to be made set-id: that bit goes only to the
                // bytes written from the repository (the live ones may be
                // swapped between the comparison and the change). And one
                // whose owner or group changes: the old owner may hold it
                // open for writing, and write their bytes into it once it
                // is the new owner's (root's, which some root-run programs
                // take as a sign of trust); a new file has no such writer.
                let rewrite = meta_changes(&stat.meta, uid, gid, mode).is_some_and(|set| {
                    stat.links > 1
                        || set.mode.unwrap_or(stat.meta.mode) & 0o6000 != 0
                        || set.uid.is_some()
                        || set.gid.is_some()
                });
                if !rewrite && live_holds(at, stat, &want)? {
                    fix_meta(at, stat, uid, gid, mode)?;
                    return Ok(None);
                }
                if rewrite {
                    // The new file keeps what was not declared, as the
                    // change in place would have.
                    kept_owner = (Some(stat.meta.uid), Some(stat.meta.gid));
                }
                // An undeclared mode carries over to the rewritten file.
                kept_mode = Some(stat.meta.mode);
            }
            _ => {}
        }
    }
    // The bytes come from the repository now (see `stage_content`).
    let bytes =
        datum_host::repo::read(want.source).map_err(|e| HostError::io("read", want.source, e))?;
    let mode = mode.or(kept_mode).unwrap_or(DEFAULT_FILE_MODE);
    let (uid, gid) = (uid.or(kept_owner.0), gid.or(kept_owner.1));
    stage_content(host, at, want, bytes, uid, gid, mode).map(Some)
}

/// A declared file's content staged beside `at`, whatever is there now (a
/// folder the purge removes before the rename).
fn stage_new_file(
    host: &Host,
    at: &Located,
    want: Declared<'_>,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> Result<crate::file::StagedContent, ProviderError> {
    let bytes =
        datum_host::repo::read(want.source).map_err(|e| HostError::io("read", want.source, e))?;
    let mode = mode.unwrap_or(DEFAULT_FILE_MODE);
    stage_content(host, at, want, bytes, uid, gid, mode)
}

/// `bytes`, read from the repository now, staged beside `at`; refused when
/// the source changed since the catalogue hashed it (it would not be what
/// was checked).
fn stage_content(
    host: &Host,
    at: &Located,
    want: Declared<'_>,
    bytes: Vec<u8>,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: u32,
) -> Result<crate::file::StagedContent, ProviderError> {
    if !same_content(&bytes, want.blake3) {
        return Err(ProviderError::Invalid {
            field: "source".to_owned(),
            message: format!(
                "{} changed since the catalogue was compiled; compile again",
                want.source.display()
            ),
        });
    }
    crate::file::StagedContent::write(host, at, bytes, uid, gid, mode)
}

/// Makes `at` a link to `to`. A link or file already there is replaced as
/// the Symlink kind replaces it: the new link staged beside it and renamed
/// over it, so there is no moment (and no killed pass) without one.
fn ensure_link(host: &Host, at: &Located, to: &[u8]) -> Result<(), ProviderError> {
    let target = bytes_path(to);
    match at.lstat()? {
        Some(stat) if stat.kind == FileKind::Symlink && at.read_link()? == target => Ok(()),
        Some(stat) if stat.kind == FileKind::Directory => Err(HostError::InTheWay {
            path: at.path().to_path_buf(),
            found: "directory".to_owned(),
        }
        .into()),
        Some(_) => {
            host.sweep_stale_staging(at.parent())?;
            at.stage_symlink(target)?.commit()?;
            Ok(())
        }
        None => Ok(at.symlink(target)?),
    }
}

/// Formats a mode for reports (re-exported for `datum check`).
pub fn mode_text(mode: u32) -> String {
    format_mode(mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Provider;

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

    /// A rule that can never match leaves out nothing, so a purging Tree
    /// removes what it was written to keep: the host path written out
    /// (`/srv/app/cache/` for the tree at `/srv/app`, which gitignore reads
    /// as `srv/app/cache` inside it), an empty rule or a gitignore comment,
    /// a `.` or `..` component. Each is refused at `exclude`, saying why.
    #[test]
    fn an_exclude_rule_that_can_never_match_is_refused() {
        let p = TreeProvider;
        for (rule, says) in [
            ("/srv/app/cache/", "relative to the tree's own folder"),
            ("!/srv/app/cache/keep", "relative to the tree's own folder"),
            ("", "matches nothing"),
            ("   ", "matches nothing"),
            ("# cache", "comment"),
            ("/", "can never match"),
            ("../etc/", "can never match"),
            ("cache/./x", "can never match"),
        ] {
            let errs = p
                .check(&json!({"path": "/srv/app", "source": "t", "exclude": ["*.swp", rule], "purge": true}))
                .unwrap_err();
            assert_eq!(errs.len(), 1, "{rule:?}: {errs:?}");
            assert_eq!(errs[0].path, ["exclude"], "{rule:?}");
            assert!(
                errs[0].message.contains(says),
                "{rule:?}: {}",
                errs[0].message
            );
        }
        for rule in [
            "/cache/",
            "cache/",
            "!keep.conf",
            "**/tmp",
            "\\#x",
            ".#*",
            "srv/app/x",
        ] {
            assert!(
                p.check(&json!({"path": "/srv/app", "source": "t", "exclude": [rule]}))
                    .is_ok(),
                "{rule:?}"
            );
        }
    }

    /// The checksum a Tree is staged against is the compile's: packed
    /// entries that are not what it was computed over (a link target
    /// damaged in a snapshot record whose own checksum was made with it)
    /// are refused before anything is written.
    #[test]
    fn packed_entries_are_staged_only_as_compiled() {
        let entries = |target: &[u8]| -> archive::DeclaredEntries {
            [(
                b"ln".to_vec(),
                archive::DeclaredEntry::Symlink(target.to_vec()),
            )]
            .into()
        };
        let compiled = archive::pack(Path::new("/repo/t"), &entries(b"declared"));
        let mut resource = Resource {
            id: datum_core::ResourceId::new("Tree", "t"),
            desired: json!({"path": "/etc/t", "source": "t"}).into(),
            content: Some(compiled.clone()),
            requires: vec![],
            class: "normal".to_owned(),
            sensitive: false,
            sensitive_by_field_only: false,
            validate: None,
            origin: datum_core::Origin::default(),
            field_origins: Default::default(),
            declaration_hash: String::new(),
        };
        let d = TreeDesired::from_resource(&resource).unwrap();
        assert!(packed_as_compiled(&resource, &d).is_ok());
        let damaged = archive::pack(Path::new("/repo/t"), &entries(b"DAMAGED!"));
        resource.content = Some(datum_core::Content {
            sha256: compiled.sha256.clone(),
            ..damaged
        });
        let d = TreeDesired::from_resource(&resource).unwrap();
        let err = packed_as_compiled(&resource, &d).unwrap_err().to_string();
        assert!(err.contains("run again with --recompile"), "{err}");
        assert!(
            !err.contains(&compiled.sha256),
            "the checksum is not quoted"
        );
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

    #[test]
    fn undeclared_mode_and_owner_are_taken_from_the_host() {
        use datum_fingerprint::{Node, fingerprint_tree};
        let entries: archive::DeclaredEntries = [(
            b"a".to_vec(),
            archive::DeclaredEntry::File {
                blake3: Algorithm::Native.hash_content(b"x").digest.0,
                size: 1,
            },
        )]
        .into();
        let entries =
            archive::decode(archive::encode(Path::new("/repo"), &entries).into()).unwrap();
        let mut host = Node::dir(0o750, 7, 8);
        let _ = host.insert(
            "a",
            Node::file_with_bytes(Algorithm::Native, 0o600, 7, 8, b"x"),
        );
        let host = fingerprint_tree(host, Algorithm::Native).unwrap();
        let none = Exclusions::new(Vec::<String>::new()).unwrap();
        let (found, root) = compare::compare(
            &entries,
            &EntryMeta::default(),
            &none,
            Some(&host.root),
            None,
        )
        .unwrap();
        assert!(found.is_empty());
        assert_eq!(root, host.root_hash());
        // Declared: compared.
        let meta = EntryMeta {
            file_mode: Some(0o644),
            uid: Some(0),
            ..EntryMeta::default()
        };
        let (found, root) =
            compare::compare(&entries, &meta, &none, Some(&host.root), None).unwrap();
        let shown: Vec<String> = found.iter().map(|(d, _)| d.to_string()).collect();
        assert_eq!(shown, vec!["changed . (owner)", "changed a (mode, owner)"]);
        assert_ne!(root, host.root_hash());
    }
    /// A Tree's link whose target changes is replaced by a rename, as the
    /// Symlink kind does: a reader never finds it missing. Before, it was
    /// removed and made again, and a pass killed between the two (or a
    /// reader in that moment) found no link at all.
    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the reader looks at the link directly, as any program would"
    )]
    fn a_retargeted_link_is_never_missing() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let host = Host::with_name(dir.path(), "test-host");
        let at = host.locate(Path::new("/ln")).unwrap();
        ensure_link(&host, &at, b"a").unwrap();
        let (path, stop) = (dir.path().join("ln"), Arc::new(AtomicBool::new(false)));
        let reader = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut missing = 0;
                while !stop.load(Ordering::Relaxed) {
                    missing += usize::from(std::fs::symlink_metadata(&path).is_err());
                }
                missing
            })
        };
        for i in 0..400 {
            let to: &[u8] = if i % 2 == 0 { b"b" } else { b"a" };
            ensure_link(&host, &at, to).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert_eq!(reader.join().unwrap(), 0, "the link was missing");
        assert_eq!(at.read_link().unwrap(), Path::new("a"));
        // A file in the way is replaced the same way; a folder is refused.
        let file = host.locate(Path::new("/f")).unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        ensure_link(&host, &file, b"a").unwrap();
        assert_eq!(file.read_link().unwrap(), Path::new("a"));
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let folder = host.locate(Path::new("/d")).unwrap();
        assert!(ensure_link(&host, &folder, b"a").is_err());
    }

    #[test]
    fn a_set_id_mode_goes_only_to_bytes_written_afresh() {
        // An entry holding its declared bytes that only lacks a set-id
        // mode: the bit is never set in place (the bytes compared may be
        // swapped by the folder's owner before the change, or written by
        // whoever holds the file open); the declared bytes are staged anew.
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let host = Host::with_name(root.path(), "test-host");
        let source = repo.path().join("tool");
        std::fs::write(&source, b"declared\n").unwrap();
        let live = root.path().join("tool");
        std::fs::write(&live, b"declared\n").unwrap();
        std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o755)).unwrap();
        let blake3 = Algorithm::Native.hash_content(b"declared\n").digest.0;
        let want = Declared {
            blake3: &blake3,
            size: 9,
            source: &source,
        };
        let at = host.locate(Path::new("/tool")).unwrap();
        let staged = stage_file(&host, &at, want, None, None, Some(0o2755)).unwrap();
        let mode = || std::fs::metadata(&live).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(), 0o755, "set in place");
        let staged = staged.expect("the declared bytes staged anew");
        staged.commit(&host).unwrap();
        assert_eq!(mode(), 0o2755);
        assert_eq!(std::fs::read(&live).unwrap(), b"declared\n");
        // A mode without a set-id bit is still set in place.
        let at = host.locate(Path::new("/tool")).unwrap();
        assert!(
            stage_file(&host, &at, want, None, None, Some(0o750))
                .unwrap()
                .is_none()
        );
        assert_eq!(mode(), 0o750);
    }

    #[test]
    fn a_mode_goes_only_to_the_file_whose_bytes_were_compared() {
        // An entry holding its declared bytes whose mode alone changes
        // (0600 -> 0644), in a folder whose owner swaps it, again and
        // again, with a root-owned 0600 file of theirs holding a secret
        // (RENAME_EXCHANGE from another thread): the mode is set in place
        // only on the file whose bytes were just compared, never on the
        // secret.
        use std::os::unix::fs::PermissionsExt as _;
        use std::sync::atomic::{AtomicBool, Ordering};
        let root = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let host = Host::with_name(root.path(), "test-host");
        let source = repo.path().join("app.conf");
        std::fs::write(&source, b"declared\n").unwrap();
        let (live, secret) = (root.path().join("app.conf"), root.path().join("secret"));
        std::fs::write(&live, b"declared\n").unwrap();
        std::fs::write(&secret, b"secret!!\n").unwrap();
        let blake3 = Algorithm::Native.hash_content(b"declared\n").digest.0;
        let want = Declared {
            blake3: &blake3,
            size: 9,
            source: &source,
        };
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let swapper = {
            let (done, live, secret) = (done.clone(), live.clone(), secret.clone());
            let aside = live.with_file_name("aside");
            std::thread::spawn(move || {
                // Three renames swap the two names (std has no exchange).
                while !done.load(Ordering::Relaxed) {
                    let _ = std::fs::rename(&live, &aside);
                    let _ = std::fs::rename(&secret, &live);
                    let _ = std::fs::rename(&aside, &secret);
                }
            })
        };
        let (mut opened_up, mut tries) = (0, 0);
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(6) {
            tries += 1;
            let names = [live.clone(), secret.clone(), live.with_file_name("aside")];
            // A rewrite renames the declared bytes over whatever holds the
            // name: the secret again, where it was lost.
            if !names
                .iter()
                .any(|p| std::fs::read(p).is_ok_and(|b| b == b"secret!!\n"))
            {
                use std::io::Write as _;
                use std::os::unix::fs::OpenOptionsExt as _;
                let fresh = secret.with_file_name("fresh");
                let _ = std::fs::remove_file(&fresh);
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&fresh)
                    .unwrap();
                f.write_all(b"secret!!\n").unwrap();
                std::fs::rename(&fresh, &secret).unwrap();
            }
            for p in &names {
                let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600));
            }
            let at = host.locate(Path::new("/app.conf")).unwrap();
            // Refused, rewritten or set: what matters is where the mode went.
            if let Ok(Some(staged)) = stage_file(&host, &at, want, None, None, Some(0o644)) {
                let _ = staged.commit(&host);
            }
            // Bytes and mode from one open (the names keep moving).
            for p in &names {
                use std::io::Read as _;
                let Ok(mut f) = std::fs::File::open(p) else {
                    continue;
                };
                let mut bytes = Vec::new();
                let _ = f.read_to_end(&mut bytes);
                if bytes == b"secret!!\n"
                    && f.metadata().unwrap().permissions().mode() & 0o7777 != 0o600
                {
                    opened_up += 1;
                }
            }
        }
        done.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        eprintln!("{tries} tries, {opened_up} opened up");
        assert_eq!(
            opened_up, 0,
            "the secret was opened up {opened_up} times in {tries} tries"
        );
    }

    #[test]
    fn an_owner_goes_only_to_bytes_written_afresh() {
        // An entry holding its declared bytes, owned by a user who keeps it
        // open for writing, to be made root's: given in place, the user
        // writes their bytes into a root-owned file afterwards. The
        // declared bytes are staged anew, and the user's descriptor is left
        // on a file no name holds any more.
        use std::io::Write as _;
        let root = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let host = Host::with_name(root.path(), "test-host");
        let source = repo.path().join("app.conf");
        std::fs::write(&source, b"declared\n").unwrap();
        let live = root.path().join("app.conf");
        std::fs::write(&live, b"declared\n").unwrap();
        std::os::unix::fs::chown(&live, Some(1000), Some(1000)).unwrap();
        let mut held = std::fs::OpenOptions::new().write(true).open(&live).unwrap();
        let blake3 = Algorithm::Native.hash_content(b"declared\n").digest.0;
        let want = Declared {
            blake3: &blake3,
            size: 9,
            source: &source,
        };
        let at = host.locate(Path::new("/app.conf")).unwrap();
        if let Some(staged) = stage_file(&host, &at, want, Some(0), Some(0), Some(0o644)).unwrap() {
            staged.commit(&host).unwrap();
        }
        held.write_all(b"theirs!!!").unwrap();
        drop(held);
        crate::testing::assert_declared_bytes_are_roots(
            &live,
            b"declared\n",
            "written through the old owner's descriptor into",
        );
    }
}
