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
//!
//! The kind's fields, checks and provider are here; `observe` scans the host
//! tree, compares it and turns the differences into the plan's diff, `apply`
//! walks the declared entries from `stage` through each `activate`,
//! `archive` packs the declared tree and `compare` compares it with the
//! host's.

mod apply;
pub mod archive;
mod compare;
mod entries;
mod observe;

use std::path::{Path, PathBuf};

use datum_core::{Diff, Observed, Presence, Resource};
use datum_fingerprint::Exclusions;
use datum_host::fs::FileKind;
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
    Activated, Capabilities, DeclaredMeta, FieldError, FieldLookup, Kind, OwnsPaths, PathClaim,
    ProviderError, Refusal, Staged, TakesSourceFolder,
};
pub use apply::TreeStaging;
use apply::Walk;
use archive::DeclaredTree;
use compare::EntryMeta;
use entries::DIFFERENCES_FIELD;
use observe::{
    FINGERPRINT_FIELD, FOLDER_KEEPING_EXCLUDED, bytes_path, entry_content_diff, folder_in_the_way,
    folder_refused, item_path, mark_folders_keeping_excluded, scan_and_compare,
    unresolved_accounts,
};
pub use observe::{HOLDS_EXCLUDED, declared_fingerprint, diff, difference_json, differences};

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
            .get(DIFFERENCES_FIELD)
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
            .get(DIFFERENCES_FIELD)
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

    fn roots(&self, observed: &Observed) -> Option<crate::FingerprintRoots> {
        let pair = observed.fields.get(FINGERPRINT_FIELD)?;
        Some(crate::FingerprintRoots {
            declared: pair.get("declared")?.as_str()?.to_owned(),
            observed: pair
                .get("observed")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }
}

/// Keeps a Tree's two root hashes in `observed` (`host`: `None` when only
/// the declared one is known), where [`crate::Fingerprints::roots`] reads
/// them back: how a Tree's observation carries them, and how a test
/// outside this crate makes an observation that does.
pub fn keep_roots(observed: &mut Observed, declared: &str, host: Option<&str>) {
    let mut pair = serde_json::Map::new();
    pair.insert("declared".to_owned(), Value::String(declared.to_owned()));
    if let Some(host) = host {
        pair.insert("observed".to_owned(), Value::String(host.to_owned()));
    }
    observed
        .fields
        .insert(FINGERPRINT_FIELD.to_owned(), Value::Object(pair));
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

    fn files_again(&self, content: &datum_core::Content, most: u64) -> Option<Vec<Vec<u8>>> {
        let tree = archive::decode(content.bytes.clone()).ok()?;
        let mut total: u64 = 0;
        let mut files = Vec::new();
        for (path, entry) in tree.iter() {
            let archive::EntryRef::File { blake3, size } = entry else {
                continue;
            };
            total = total.saturating_add(size);
            if total > most {
                return None;
            }
            let bytes = datum_host::repo::read(&tree.source_of(path)).ok()?;
            // Still the bytes the compile packed.
            if !apply::same_content(&bytes, blake3) {
                return None;
            }
            files.push(bytes);
        }
        Some(files)
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
        keep_roots(
            &mut observed,
            &declared_root,
            Some(&tree.root_hash().to_string()),
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
            .insert(DIFFERENCES_FIELD.to_owned(), Value::Array(items));
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

impl Capabilities for TreeProvider {
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

    fn entry_differences(&self) -> Option<&dyn crate::EntryDifferences> {
        Some(self)
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

/// The folders of a tree on the way to the last one reached, by path
/// relative to its root: the tree's root and that folder's parents, as a
/// [`datum_host::way::Way`]. Only those are kept: a walk in tree order
/// (parents first, a folder's entries together) needs no other again, and
/// each open folder is a descriptor (before, every folder reached stayed
/// open to the end of the walk, and a tree of a thousand folders failed
/// under the usual limit of 1,024 descriptors: 'Too many open files'). Of
/// those, at most this process's share for a walk's folders stay open
/// ([`datum_host::descriptors::Budget::walk`]): past it some are let go
/// (the way keeps the tree's root, the folder it is in, and others spaced
/// out along it, closer near the bottom), and a folder on the way reached again is
/// opened again from the nearest one still open, one component at a time,
/// and must be the folder first met there (same device and inode), else
/// an error: before, a let-go folder was reopened by name only, so a local
/// user who renamed folders on the way meanwhile (swapped `a/b` with
/// another, or moved one in from elsewhere) had the walk go on in a folder
/// it had not met there.
struct Folders {
    way: datum_host::way::Way,
    /// The names of the folders on the way below the root (the way's own,
    /// which it does not show), memory bounded by the walk's depth.
    names: Vec<std::ffi::OsString>,
}

impl Folders {
    fn new(root: Dir) -> Result<Self, ProviderError> {
        Self::with_most(
            root,
            datum_host::descriptors::Budget::of_this_process().walk,
        )
    }

    fn with_most(root: Dir, most: usize) -> Result<Self, ProviderError> {
        Ok(Folders {
            way: datum_host::way::Way::new(root, most.max(2))?,
            names: Vec::new(),
        })
    }

    /// The folder `rel` (relative to the tree's root): the way goes back up
    /// to the deepest folder it shares with `rel` (that one opened again if
    /// it was let go: it must be the folder first met there), then down to
    /// `rel`, one component at a time without following a link, in a loop,
    /// not by a call per level (a chain of folders thousands deep, which a
    /// local user may make below a kept folder of a purged Tree, overflowed
    /// the stack).
    fn dir(&mut self, rel: &Path) -> Result<Dir, ProviderError> {
        let invalid = || {
            ProviderError::from(HostError::io(
                "reach",
                rel,
                std::io::Error::from(std::io::ErrorKind::InvalidInput),
            ))
        };
        let mut names = Vec::new();
        for component in rel.components() {
            match component {
                std::path::Component::Normal(name) => names.push(name),
                std::path::Component::CurDir => {}
                _ => return Err(invalid()),
            }
        }
        let shared = self
            .names
            .iter()
            .zip(&names)
            .take_while(|(on, to)| on.as_os_str() == **to)
            .count();
        while self.names.len() > shared {
            self.way.leave();
            self.names.pop();
        }
        let mut dir = self.way.here()?;
        for name in &names[shared..] {
            let Some(next) = dir.open_child_dir(name)? else {
                return Err(HostError::MissingParent {
                    path: dir.path().join(name),
                    parent: dir.path().to_path_buf(),
                }
                .into());
            };
            self.way.enter(name, next.clone())?;
            self.names.push((*name).to_owned());
            dir = next;
        }
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

/// Formats a mode for reports (re-exported for `datum check`).
pub fn mode_text(mode: u32) -> String {
    format_mode(mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Provider;
    use datum_fingerprint::Algorithm;

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
            held: Default::default(),
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

    /// A deep tree held one open folder per level of the way down, whatever
    /// the descriptor limit: at most the walk's share stay open now, the
    /// shallowest let go first (the root kept), and a folder reached again
    /// is opened anew from the nearest one open.
    #[test]
    fn at_most_the_walks_share_of_folders_stay_open_on_a_deep_way() {
        let root = tempfile::tempdir().unwrap();
        let deep: PathBuf = (0..40).map(|i| format!("d{i}")).collect();
        std::fs::create_dir_all(root.path().join("t").join(&deep)).unwrap();
        std::fs::create_dir_all(root.path().join("t/d0/d1/side")).unwrap();
        let host = Host::with_name(root.path(), "test-host");
        let live = host
            .locate(Path::new("/t"))
            .unwrap()
            .open_dir()
            .unwrap()
            .unwrap();
        let mut folders = Folders::with_most(live, 5).unwrap();
        let bottom = folders.dir(&deep).unwrap();
        assert_eq!(bottom.path(), root.path().join("t").join(&deep));
        assert_eq!(folders.way.held(), 5);
        assert_eq!(folders.way.depth(), 40);
        assert_eq!(folders.names.iter().collect::<PathBuf>(), deep);
        let entry = folders.entry(&deep.join("x")).unwrap();
        assert_eq!(entry.path(), root.path().join("t").join(&deep).join("x"));
        // Back near the top: opened again from the root.
        let side = folders.dir(Path::new("d0/d1/side")).unwrap();
        assert_eq!(side.path(), root.path().join("t/d0/d1/side"));
        assert!(folders.way.held() <= 5, "{}", folders.way.held());
        assert_eq!(folders.way.depth(), 3);
    }

    /// A folder at the bottom of a chain far deeper than a thread's stack
    /// allows a call per level (3,000, as a local user may make below a
    /// kept folder of a purged Tree) is reached on a 256 KiB thread, from
    /// the root and again from the nearest folder open, at most 5 held.
    #[test]
    fn a_chain_of_folders_deeper_than_the_stack_allows_calls_is_reached() {
        const DEPTH: usize = 3000;
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("t")).unwrap();
        let host = Host::with_name(root.path(), "test-host");
        let live = host
            .locate(Path::new("/t"))
            .unwrap()
            .open_dir()
            .unwrap()
            .unwrap();
        let bottom = observe::tests::chain(&live, DEPTH);
        bottom
            .entry("s".as_ref())
            .create_dir(0o755, None, None)
            .unwrap();
        let deep: PathBuf = std::iter::repeat_n("d", DEPTH).collect();
        let (reached, side, open) = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let mut folders = Folders::with_most(live, 5).unwrap();
                let reached = folders.dir(&deep).unwrap();
                let side = folders.entry(&deep.join("s/x")).unwrap();
                (reached, side, folders.way.held())
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(reached.path(), bottom.path());
        assert_eq!(side.path(), bottom.path().join("s/x"));
        assert!(open <= 5, "{open}");
    }

    /// A folder let go on a deep way and reached again must be the folder
    /// first met at that path: a local user who can rename folders in the
    /// tree swapped one on the way for another between the let-go and the
    /// reopen, and the walk went on in a folder it had never listed (Folders
    /// walked names from the nearest open folder, checking nothing).
    #[test]
    fn a_folder_reached_again_must_be_the_one_first_met_there() {
        let root = tempfile::tempdir().unwrap();
        let t = root.path().join("t");
        for folder in ["a/b/c/d/e/f/g", "a/other/c/d/e/f", "elsewhere/c/d"] {
            std::fs::create_dir_all(t.join(folder)).unwrap();
        }
        let host = Host::with_name(root.path(), "test-host");
        let open = || {
            host.locate(Path::new("/t"))
                .unwrap()
                .open_dir()
                .unwrap()
                .unwrap()
        };
        // Not swapped: reached again, from the root, as it was.
        let mut folders = Folders::with_most(open(), 3).unwrap();
        folders.dir(Path::new("a/b/c/d")).unwrap();
        folders.dir(Path::new("a/b/c/d/e/f/g")).unwrap();
        let again = folders.dir(Path::new("a/b/c/d")).unwrap();
        assert_eq!(again.path(), t.join("a/b/c/d"));
        // a/b swapped with a/other while a/b/c/d was let go (only the root
        // and the two deepest stay open): refused, not walked into.
        let mut folders = Folders::with_most(open(), 3).unwrap();
        folders.dir(Path::new("a/b/c/d")).unwrap();
        folders.dir(Path::new("a/b/c/d/e/f/g")).unwrap();
        std::fs::rename(t.join("a/b"), t.join("a/swap")).unwrap();
        std::fs::rename(t.join("a/other"), t.join("a/b")).unwrap();
        std::fs::rename(t.join("a/swap"), t.join("a/other")).unwrap();
        let err = folders
            .dir(Path::new("a/b/c/d"))
            .map(|d| d.path().to_path_buf())
            .unwrap_err()
            .to_string();
        assert!(err.contains("moved or replaced"), "{err}");
        assert!(err.contains("a/b"), "{err}");
        // A folder moved in from elsewhere in its place: refused alike.
        let mut folders = Folders::with_most(open(), 3).unwrap();
        folders.dir(Path::new("a/b/c/d")).unwrap();
        folders.dir(Path::new("a/b/c/d/e")).unwrap();
        folders.dir(Path::new("a/b/c/d/e/f")).unwrap();
        std::fs::rename(t.join("a/b/c"), t.join("gone")).unwrap();
        std::fs::rename(t.join("elsewhere/c"), t.join("a/b/c")).unwrap();
        let err = folders
            .entry(Path::new("a/b/c/d/x"))
            .map(|e| e.path().to_path_buf())
            .unwrap_err()
            .to_string();
        assert!(err.contains("moved or replaced"), "{err}");
    }

    #[test]
    fn only_the_folders_on_the_way_stay_open() {
        // Each open folder is a descriptor: the walk keeps the tree's root
        // and the parents of where it is, not every folder it reached.
        let root = tempfile::tempdir().unwrap();
        for folder in ["t/a/b/c", "t/d"] {
            std::fs::create_dir_all(root.path().join(folder)).unwrap();
        }
        let host = Host::with_name(root.path(), "test-host");
        let live = host
            .locate(Path::new("/t"))
            .unwrap()
            .open_dir()
            .unwrap()
            .unwrap();
        let mut folders = Folders::new(live).unwrap();
        // The folders on the way (all held: the share is not reached).
        let open = |folders: &Folders| {
            assert_eq!(folders.way.held(), folders.way.depth() + 1);
            let mut at = PathBuf::new();
            let mut open = vec![String::new()];
            for name in &folders.names {
                at.push(name);
                open.push(at.display().to_string());
            }
            open
        };
        let c = folders.dir(Path::new("a/b/c")).unwrap();
        assert_eq!(c.path(), root.path().join("t/a/b/c"));
        assert_eq!(open(&folders), ["", "a", "a/b", "a/b/c"]);
        folders.entry(Path::new("a/b/x")).unwrap();
        assert_eq!(open(&folders), ["", "a", "a/b"]);
        let d = folders.entry(Path::new("d/y")).unwrap();
        assert_eq!(d.path(), root.path().join("t/d/y"));
        assert_eq!(open(&folders), ["", "d"]);
        folders.entry(Path::new("z")).unwrap();
        assert_eq!(open(&folders), [""]);
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
}
