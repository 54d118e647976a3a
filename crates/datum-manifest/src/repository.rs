//! Loading a repository from disk: `datum.yaml`, then every manifest file of
//! every layer, in a fixed order.
//!
//! This module owns the walk (which files are manifests, in what order) and
//! collecting every problem on the way. It reads the repository only; it must
//! not touch the managed machine, and it must not drop a document silently:
//! anything it cannot read becomes a diagnostic.

use std::path::{Path, PathBuf};

use crate::diagnostic::{Diagnostic, Diagnostics, SourceMap};
use crate::document::{self, Document};
use crate::settings::{self, Settings};
use crate::span::Place;
use crate::yaml;

/// The settings file at the root of every repository.
pub const SETTINGS_FILE: &str = "datum.yaml";

/// Folders at the top of a layer that hold content, not manifests.
pub const CONTENT_DIRS: &[&str] = &["files", "templates", "trees"];

/// A repository as read from disk: settings, every document of every layer
/// in declaration order, the text of every file read (for diagnostics), and
/// the problems found while reading.
#[derive(Debug, Clone)]
pub struct Repository {
    /// The root as given by the caller.
    pub root: PathBuf,
    /// The root with symbolic links resolved: content paths must stay under it.
    pub canonical_root: PathBuf,
    pub settings: Settings,
    /// Documents in declaration order: layer order, then file path (byte
    /// order), then position in the file.
    pub documents: Vec<Document>,
    pub sources: SourceMap,
    /// Problems found while loading. The repository is still returned so that
    /// later checks can report their problems too.
    pub diagnostics: Diagnostics,
}

/// Reads `datum.yaml` alone: the repository's canonical root, its settings,
/// and the problems found so far. Fails as [`Repository::load`] does when it
/// cannot be read or parsed at all.
fn read_settings(root: &Path) -> Result<(PathBuf, Settings, Diagnostics), Diagnostics> {
    let mut diags = Diagnostics::new();
    let settings_place = Place::new(SETTINGS_FILE, "");
    let canonical_root = match datum_host::repo::canonicalize(root) {
        Ok(p) => p,
        Err(e) => {
            diags.push(Diagnostic::error(format!(
                "cannot open the repository {}: {e}",
                root.display()
            )));
            return Err(diags);
        }
    };
    let settings_path = canonical_root.join(SETTINGS_FILE);
    let text = match datum_host::repo::read_to_string(&settings_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            diags.push(Diagnostic::error(format!(
                "{} is not a Datum repository: it has no {SETTINGS_FILE}",
                root.display()
            )));
            return Err(diags);
        }
        Err(e) => {
            diags.push(
                Diagnostic::error(format!("cannot read {SETTINGS_FILE}: {e}"))
                    .at(settings_place.whole_file()),
            );
            return Err(diags);
        }
    };
    diags.sources_mut().insert(SETTINGS_FILE, text.as_str());
    let parsed = yaml::parse(&text);
    let had_syntax_errors = !parsed.errors.is_empty();
    for e in parsed.errors {
        diags.push(
            Diagnostic::error(e.message)
                .at(settings_place.origin(e.start))
                .until(e.end),
        );
    }
    let mut docs = parsed.documents.into_iter().filter(|d| !d.is_null());
    let Some(settings_doc) = docs.next() else {
        if !had_syntax_errors {
            diags.push(
                Diagnostic::error(format!("{SETTINGS_FILE} is empty: it must list the layers"))
                    .at(settings_place.whole_file()),
            );
        }
        return Err(diags);
    };
    if let Some(extra) = docs.next() {
        diags.push(
            Diagnostic::error(format!("{SETTINGS_FILE} must hold one document"))
                .at(settings_place.origin(extra.start)),
        );
    }
    let settings = settings::read(&settings_doc, &settings_place, &canonical_root, &mut diags);
    Ok((canonical_root, settings, diags))
}

impl Settings {
    /// `datum.yaml` of the repository at `root`, without reading any
    /// manifest (what a report header needs: the layers and their matchers).
    pub fn load(root: &Path) -> Result<Settings, Diagnostics> {
        read_settings(root).map(|(_, settings, _)| settings)
    }
}

impl Repository {
    /// Loads the repository at `root`. Fails only when `datum.yaml` cannot be
    /// read or parsed at all (without it there are no layers to read); every
    /// other problem is recorded in [`Repository::diagnostics`].
    ///
    /// `sensitive_fields` are the fields of `desired` whose value is
    /// sensitive whatever a resource says (every kind's, from the caller's
    /// registry: a User's `password_hash`): a file that cannot be parsed
    /// and names one never shows its lines. This crate knows no kind.
    pub fn load(root: &Path, sensitive_fields: &[&str]) -> Result<Repository, Diagnostics> {
        let (canonical_root, settings, mut diags) = read_settings(root)?;

        let mut repo = Repository {
            root: root.to_owned(),
            canonical_root,
            settings,
            documents: Vec::new(),
            sources: SourceMap::default(),
            diagnostics: Diagnostics::new(),
        };
        // Files that could not be parsed and whose syntax errors still show
        // their lines (with their text): see `hide_broken_overrides`.
        let mut broken: Vec<(std::sync::Arc<Path>, String)> = Vec::new();
        // Each layer's folder as the file system knows it: a folder that is
        // another layer's belongs to that layer alone, so the walk of a
        // layer above it (one matching every host) leaves it out.
        let folders: Vec<Option<PathBuf>> = repo
            .settings
            .layers
            .iter()
            .map(|l| datum_host::repo::canonicalize(&repo.canonical_root.join(&l.path)).ok())
            .collect();
        for (index, layer) in repo.settings.layers.clone().iter().enumerate() {
            let mut files = Vec::new();
            let own = folders.get(index).and_then(Option::as_deref);
            let others: Vec<&Path> = folders
                .iter()
                .filter_map(Option::as_deref)
                .filter(|f| Some(*f) != own)
                .collect();
            collect_manifests(
                &repo.canonical_root,
                &layer.path,
                own.map(|c| (c, &others[..])),
                true,
                &mut files,
                &mut diags,
            );
            files.sort();
            for (rel, canonical) in files {
                let place = Place::new(rel.clone(), layer.name.clone());
                repo.load_file(
                    &place,
                    &canonical,
                    index,
                    sensitive_fields,
                    &mut diags,
                    &mut broken,
                );
            }
        }
        repo.hide_broken_overrides(&broken, sensitive_fields, &mut diags);
        repo.sources.extend(diags.sources());
        *diags.sources_mut() = repo.sources.clone();
        repo.diagnostics = diags;
        Ok(repo)
    }

    /// A file that could not be parsed may be another layer's override of
    /// a resource declared sensitive elsewhere (`desired: {content: ...}`
    /// with no `sensitive` of its own): once every file is read, the lines
    /// of a broken file that mentions the name of a resource any document
    /// calls sensitive (or gives one of `sensitive_fields`, a User's
    /// `password_hash`) are hidden too (a word search: it errs towards
    /// hiding).
    fn hide_broken_overrides(
        &self,
        broken: &[(std::sync::Arc<Path>, String)],
        sensitive_fields: &[&str],
        diags: &mut Diagnostics,
    ) {
        if broken.is_empty() {
            return;
        }
        let secret_names: Vec<&str> = self
            .documents
            .iter()
            .filter(|d| {
                d.sensitive.as_ref().is_some_and(|s| s.value)
                    || sensitive_fields.iter().any(|f| d.desired.get(f).is_some())
            })
            .map(|d| d.id.name.as_str())
            .collect();
        for (file, text) in broken {
            if !secret_names.iter().any(|name| text.contains(name)) {
                continue;
            }
            for d in diags.iter_mut() {
                if d.origin.as_ref().is_some_and(|o| *o.file == **file) {
                    d.hide_source = true;
                }
            }
        }
    }

    fn load_file(
        &mut self,
        place: &Place,
        canonical: &Path,
        layer: usize,
        sensitive_fields: &[&str],
        diags: &mut Diagnostics,
        broken: &mut Vec<(std::sync::Arc<Path>, String)>,
    ) {
        // The canonical path of the manifest (a link to one inside the
        // repository was resolved when it was listed): read without
        // following any link, so one swapped in since cannot redirect it.
        let bytes = match datum_host::repo::read(canonical) {
            Ok(b) => b,
            Err(e) => {
                diags.push(
                    Diagnostic::error(format!("cannot read the manifest: {e}"))
                        .at(place.whole_file()),
                );
                return;
            }
        };
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                let (offset, pos) = first_invalid_byte(e.as_bytes(), e.utf8_error());
                diags.push(
                    Diagnostic::error(format!(
                        "the manifest is not UTF-8 text: byte {offset} is not part of a UTF-8 character (save the file as UTF-8)"
                    ))
                    .at(place.origin(pos)),
                );
                return;
            }
        };
        self.sources
            .insert_on_disk(place.file.to_path_buf(), canonical, &text);
        // Each document read on the thread that parsed it (a long file is
        // parsed in pieces on every core), with its own problems.
        let parsed = yaml::parse_each(&text, |node| {
            // `---` separators with nothing between them are allowed.
            if node.is_null() {
                return (None, Vec::new(), None);
            }
            let extent = (node.start, node.end);
            let mut own = Diagnostics::new();
            let doc = document::read(node, place, layer, &mut own);
            (doc, own.into_vec(), Some(extent))
        });
        // A file that could not be parsed cannot say which of its lines are
        // secret: one that mentions a sensitive field or `sensitive` shows
        // where its syntax errors are, never their lines.
        let secret = !parsed.errors.is_empty() && may_hold_secret(&text, sensitive_fields);
        if !parsed.errors.is_empty() && !secret {
            broken.push((place.file.clone(), text.clone()));
        }
        for e in parsed.errors {
            // A problem inside a document that was read all the same (a
            // duplicate key, an unknown tag) names its resource, as every
            // other problem of a document does.
            let within = parsed.documents.iter().find_map(|(doc, _, extent)| {
                let (start, end) = (*extent)?;
                let inside = (start.line, start.column) <= (e.start.line, e.start.column)
                    && (e.start.line, e.start.column) <= (end.line, end.column);
                doc.as_ref().filter(|_| inside)
            });
            let mut diagnostic = Diagnostic::error(e.message)
                .at(place.origin(e.start))
                .until(e.end)
                .hiding_source(secret);
            if let Some(doc) = within {
                diagnostic = diagnostic.resource(&doc.id);
            }
            diags.push(diagnostic);
        }
        // Room for this file's documents in one step: growing by doubling
        // would leave up to half of a large repository's documents' room
        // unused (and copy it on every step).
        self.documents.reserve(parsed.documents.len());
        for (doc, problems, _) in parsed.documents {
            for d in problems {
                diags.push(d);
            }
            if let Some(doc) = doc {
                self.documents.push(doc);
            }
        }
    }

    /// Takes every document's `desired` mapping out, in document order,
    /// leaving an empty mapping at the same place in each. For a compile
    /// that owns the repository: the mappings are the largest part of a
    /// loaded repository, and it can let them go as soon as nothing more
    /// is reported about them, while it still needs the rest.
    pub fn take_desired(&mut self) -> Vec<yaml::Node> {
        self.documents
            .iter_mut()
            .map(|d| {
                let empty = yaml::Node {
                    value: yaml::Value::Map(Vec::new()),
                    start: d.desired.start,
                    end: d.desired.end,
                };
                std::mem::replace(&mut d.desired, empty)
            })
            .collect()
    }

    /// Document `doc`'s `desired` mapping as written, parsed again from its
    /// file: for a compile that let the mapping go (after
    /// [`Repository::take_desired`]) and must still point into it. `None`
    /// when the file cannot be read or no longer holds what was parsed.
    pub fn desired_as_written(&self, doc: &Document) -> Option<yaml::Node> {
        let file = &doc.place.file;
        let rest = self.sources.from_line(file, doc.start.line as usize)?;
        let node = yaml::document_at(rest, doc.start, self.sources.has_directive(file))?;
        let yaml::Value::Map(entries) = node.value else {
            return None;
        };
        entries
            .into_iter()
            .find(|e| e.key == "desired")
            .map(|e| e.value)
    }

    /// The layer a document belongs to.
    pub fn layer_of(&self, doc: &Document) -> Option<&settings::Layer> {
        self.settings.layers.get(doc.layer)
    }
}

/// Whether a manifest's text may hold a secret a syntax error's line would
/// show: a field sensitive by nature (`sensitive_fields`, a User's
/// `password_hash`), or a resource's `sensitive` (a word search, since the
/// file could not be parsed; it errs towards hiding).
fn may_hold_secret(text: &str, sensitive_fields: &[&str]) -> bool {
    text.contains("sensitive") || sensitive_fields.iter().any(|f| text.contains(f))
}

fn is_manifest(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml")
}

/// Adds the manifests under `dir` (relative to the root) to `out`. Hidden
/// entries are skipped (`.git`, editor files); folders reached through a
/// symbolic link are not followed, so the walk stays inside the repository.
/// `layers`: the canonical path of `dir` and the other layers' folders
/// (canonical); a folder that is another layer's is left to that layer.
fn collect_manifests(
    root: &Path,
    dir: &Path,
    layers: Option<(&Path, &[&Path])>,
    layer_top: bool,
    out: &mut Vec<(PathBuf, PathBuf)>,
    diags: &mut Diagnostics,
) {
    let entries = match datum_host::repo::read_dir(&root.join(dir)) {
        Ok(e) => e,
        Err(e) => {
            diags.push(Diagnostic::error(format!(
                "cannot list {}: {e}",
                dir.display()
            )));
            return;
        }
    };
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                diags.push(Diagnostic::error(format!(
                    "cannot list {}: {e}",
                    dir.display()
                )));
                continue;
            }
        };
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            // A folder (never a content folder: theirs are ASCII names) or a
            // manifest by its suffix, named in bytes that are not UTF-8:
            // refused, not skipped, so that no part of the repository is
            // left out without a word.
            let bytes = name.as_encoded_bytes();
            let hidden = bytes.starts_with(b".");
            let folder = entry.file_type().is_ok_and(|t| t.is_dir());
            let manifest = [&b".yaml"[..], b".yml"].iter().any(|s| bytes.ends_with(s));
            if !hidden && (folder || manifest) {
                let what = if folder { "folder" } else { "manifest" };
                diags.push(
                    Diagnostic::error(format!(
                        "{what} {} has a name that is not UTF-8: rename it (its {} would be left out)",
                        dir.join(&name).display(),
                        if folder { "manifests" } else { "resources" }
                    ))
                    .at(Place::new(dir.join(&name), "").whole_file()),
                );
            }
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let rel = dir.join(name);
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        if file_type.is_dir() {
            if layer_top && CONTENT_DIRS.contains(&name) {
                continue;
            }
            // No link is followed below a layer's folder, so a folder's
            // canonical path is its parent's and its name.
            let canonical = layers.map(|(c, _)| c.join(name));
            if let (Some(c), Some((_, others))) = (&canonical, layers)
                && others.contains(&c.as_path())
            {
                continue;
            }
            let below = canonical.as_deref().zip(layers.map(|(_, o)| o));
            collect_manifests(root, &rel, below, false, out, diags);
        } else if is_manifest(name) && rel != Path::new(SETTINGS_FILE) {
            // (A layer at the repository root must not read the settings
            // file as a manifest.)
            if file_type.is_symlink() {
                // A link to a manifest must not read YAML from outside the
                // repository.
                match crate::paths::resolve_inside(root, dir, name) {
                    Ok((abs, _)) if datum_host::repo::metadata(&abs).is_ok_and(|m| m.is_file()) => {
                        out.push((rel, abs));
                    }
                    Ok(_) => {}
                    Err(problem) => diags.push(
                        Diagnostic::error(format!("manifest link refused: {problem}"))
                            .at(Place::new(rel, "").whole_file()),
                    ),
                }
            } else if file_type.is_file() {
                // Read from the folder's canonical path: the layer's own
                // path may name its folder through a link, which the read
                // (no link followed) would refuse.
                let canonical = layers.map_or_else(|| root.join(&rel), |(c, _)| c.join(name));
                out.push((rel, canonical));
            }
        }
    }
}

/// The byte offset of the first byte that is not UTF-8, and its line and
/// column (1-based; the column counts the characters before it on its line).
fn first_invalid_byte(bytes: &[u8], error: std::str::Utf8Error) -> (usize, crate::yaml::Pos) {
    let offset = error.valid_up_to();
    let valid = &bytes[..offset];
    let line_start = valid.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let line = 1 + valid.iter().filter(|b| **b == b'\n').count();
    // The prefix is valid UTF-8, so its characters can be counted.
    let column = 1 + std::str::from_utf8(&valid[line_start..]).map_or(0, |t| t.chars().count());
    (offset, crate::yaml::Pos::at(line, column))
}

#[cfg(test)]
mod utf8_tests {
    use super::*;

    #[test]
    fn the_first_byte_that_is_not_utf8_has_a_line_and_column() {
        let bytes = "datum: v1alpha1\nname: é\ncontent: \"caf"
            .as_bytes()
            .to_vec();
        let mut bytes = bytes;
        bytes.extend_from_slice(b"\xe9\"\n");
        let e = String::from_utf8(bytes.clone()).unwrap_err();
        let (offset, pos) = first_invalid_byte(&bytes, e.utf8_error());
        assert_eq!(offset, bytes.len() - 3);
        assert_eq!((pos.line, pos.column), (3, 14), "after `content: \"caf`");
    }
}
