//! `datum.yaml`: the repository's settings, its ordered layers and their
//! matchers.
//!
//! This module owns reading the settings document into [`Settings`] and
//! deciding whether a layer applies to a host's labels ([`Matcher::matches`]).
//! It must not read manifest files (the repository loader walks the layer
//! folders) and must not know what a host is beyond its labels.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::API_VERSION;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::paths::resolve_inside;
use crate::span::{Place, Spanned};
use crate::yaml::{Node, Value};

/// The repository settings from `datum.yaml`.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Layers in the order written: later layers override earlier ones.
    pub layers: Vec<Layer>,
    /// Resource classes as written (`datum_drift::classes` gives them their
    /// meaning: interval, content mode, policy).
    pub classes: serde_json::Value,
    /// Where `classes:` and each class and field in it are written, keyed by
    /// the path a class error names (`""`, `critical`, `critical.interval`),
    /// so that a problem found in the parsed classes points at its line.
    pub classes_at: BTreeMap<String, datum_core::Origin>,
    /// What the repository allows beyond the strict file-system boundary
    /// (`boundary:`): parent links Datum may follow, and directories it may
    /// enter from an unprivileged user's directory.
    pub boundary: datum_core::Boundary,
}

/// One layer: a folder of manifests and the hosts it applies to.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    pub name: String,
    /// The folder, relative to the repository root.
    pub path: PathBuf,
    pub matcher: Matcher,
    /// Where the layer is declared in `datum.yaml`.
    pub origin: datum_core::Origin,
}

/// Host labels a layer requires. Every term must hold; an empty matcher
/// applies to every host.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Matcher {
    pub terms: Vec<MatchTerm>,
}

/// `role: web` (the label must equal the value) or `role: [web, api]` (any of).
#[derive(Debug, Clone, PartialEq)]
pub struct MatchTerm {
    pub label: String,
    pub any_of: Vec<String>,
}

impl Matcher {
    /// Whether a host with these labels gets the layer.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.terms.iter().all(|t| {
            labels
                .get(&t.label)
                .is_some_and(|v| t.any_of.iter().any(|want| want == v))
        })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

const SETTINGS_KEYS: &[&str] = &["datum", "layers", "classes", "boundary"];
const BOUNDARY_KEYS: &[&str] = &["follow_links", "owner_transitions"];
const LAYER_KEYS: &[&str] = &["name", "path", "match"];

/// Reads the settings document. Problems are appended to `diags`; the
/// returned settings hold every layer that could be understood.
pub(crate) fn read(
    doc: &Node,
    place: &Place,
    canonical_root: &Path,
    diags: &mut Diagnostics,
) -> Settings {
    let mut settings = Settings {
        layers: Vec::new(),
        classes: serde_json::Value::Object(Default::default()),
        classes_at: BTreeMap::new(),
        boundary: datum_core::Boundary::default(),
    };
    let Some(entries) = doc.as_map() else {
        diags.push(
            Diagnostic::error(format!(
                "datum.yaml must be a mapping with `datum`, `layers` and `classes`, found {}",
                doc.type_name()
            ))
            .at(place.origin(doc.start)),
        );
        return settings;
    };
    check_version(doc, place, diags);
    for e in entries {
        if !SETTINGS_KEYS.contains(&e.key.as_str()) {
            diags.push(
                Diagnostic::error(format!(
                    "unknown key `{}` in datum.yaml; {}",
                    e.key,
                    expected(SETTINGS_KEYS, &e.key)
                ))
                .at(place.origin(e.key_start))
                .until(e.key_end),
            );
        }
    }
    match doc.get("layers") {
        None => diags.push(
            Diagnostic::error("datum.yaml has no `layers`: list at least one layer folder")
                .at(place.origin(doc.start)),
        ),
        Some(e) => match e.value.as_seq() {
            Some(items) => {
                for item in items {
                    if let Some(layer) = read_layer(item, place, canonical_root, diags) {
                        if let Some(prev) = settings.layers.iter().find(|l| l.name == layer.name) {
                            diags.push(
                                Diagnostic::error(format!(
                                    "layer `{}` is declared twice",
                                    layer.name
                                ))
                                .at(layer.origin.clone())
                                .note(format!("first declared at {}", prev.origin)),
                            );
                            continue;
                        }
                        settings.layers.push(layer);
                    }
                }
            }
            None => diags.push(
                Diagnostic::error(format!(
                    "`layers` must be a list, found {}",
                    e.value.type_name()
                ))
                .at(place.origin(e.value.start))
                .until(e.value.end),
            ),
        },
    }
    if let Some(e) = doc.get("classes") {
        settings
            .classes_at
            .insert(String::new(), place.origin(e.key_start));
        for class in e.value.as_map().unwrap_or_default() {
            settings
                .classes_at
                .insert(class.key.clone(), place.origin(class.key_start));
            for field in class.value.as_map().unwrap_or_default() {
                settings.classes_at.insert(
                    format!("{}.{}", class.key, field.key),
                    place.origin(field.value.start),
                );
            }
        }
        match &e.value.value {
            Value::Map(_) | Value::Null => settings.classes = e.value.to_json(),
            _ => diags.push(
                Diagnostic::error(format!(
                    "`classes` must be a mapping, found {}",
                    e.value.type_name()
                ))
                .at(place.origin(e.value.start))
                .until(e.value.end),
            ),
        }
        if settings.classes.is_null() {
            settings.classes = serde_json::Value::Object(Default::default());
        }
    }
    if let Some(e) = doc.get("boundary") {
        settings.boundary = read_boundary(&e.value, place, diags);
    }
    settings
}

/// `boundary:` with `follow_links` and `owner_transitions`, each a list of
/// absolute, normalised paths as declared.
fn read_boundary(node: &Node, place: &Place, diags: &mut Diagnostics) -> datum_core::Boundary {
    let mut boundary = datum_core::Boundary::default();
    if node.is_null() {
        return boundary;
    }
    let Some(entries) = node.as_map() else {
        diags.push(
            Diagnostic::error(format!(
                "`boundary` must be a mapping with `follow_links` and `owner_transitions`, found {}",
                node.type_name()
            ))
            .at(place.origin(node.start))
            .until(node.end),
        );
        return boundary;
    };
    for e in entries {
        let list = match e.key.as_str() {
            "follow_links" => &mut boundary.follow_links,
            "owner_transitions" => &mut boundary.owner_transitions,
            other => {
                diags.push(
                    Diagnostic::error(format!(
                        "unknown key `{other}` in `boundary`; {}",
                        expected(BOUNDARY_KEYS, other)
                    ))
                    .at(place.origin(e.key_start))
                    .until(e.key_end),
                );
                continue;
            }
        };
        let Some(items) = e.value.as_seq() else {
            diags.push(
                Diagnostic::error(format!(
                    "`boundary.{}` must be a list of paths, found {}",
                    e.key,
                    e.value.type_name()
                ))
                .at(place.origin(e.value.start))
                .until(e.value.end),
            );
            continue;
        };
        for item in items {
            let problem = match item.as_str() {
                Some(text) => match datum_host::paths::check_declared(Path::new(text)) {
                    Ok(()) if text != "/" => {
                        list.push(PathBuf::from(text));
                        continue;
                    }
                    Ok(()) => "`/` cannot be allowed: name the path itself".to_owned(),
                    Err(e) => e.to_string(),
                },
                None => format!("a path must be a string, found {}", item.type_name()),
            };
            diags.push(
                Diagnostic::error(format!("`boundary.{}`: {problem}", e.key))
                    .at(place.origin(item.start))
                    .until(item.end),
            );
        }
    }
    boundary
}

/// Checks `datum: v1alpha1` at the top of a document (settings, manifests,
/// host files all carry it or, for host files, may).
pub(crate) fn check_version(doc: &Node, place: &Place, diags: &mut Diagnostics) -> bool {
    match doc.get("datum") {
        None => {
            diags.push(
                Diagnostic::error(format!(
                    "missing `datum: {API_VERSION}` (the format version)"
                ))
                .at(place.origin(doc.start)),
            );
            false
        }
        Some(e) if e.value.as_str() == Some(API_VERSION) => true,
        Some(e) => {
            let shown = e
                .value
                .scalar_text()
                .unwrap_or_else(|| e.value.type_name().to_owned());
            diags.push(
                Diagnostic::error(format!(
                    "unsupported format version `{shown}`: this Datum reads `{API_VERSION}`"
                ))
                .at(place.origin(e.value.start))
                .until(e.value.end),
            );
            false
        }
    }
}

fn read_layer(
    item: &Node,
    place: &Place,
    canonical_root: &Path,
    diags: &mut Diagnostics,
) -> Option<Layer> {
    let Some(entries) = item.as_map() else {
        diags.push(
            Diagnostic::error(format!(
                "a layer must be a mapping with `name`, `path` and `match`, found {}",
                item.type_name()
            ))
            .at(place.origin(item.start))
            .until(item.end),
        );
        return None;
    };
    let mut ok = true;
    for e in entries {
        if !LAYER_KEYS.contains(&e.key.as_str()) {
            ok = false;
            diags.push(
                Diagnostic::error(format!(
                    "unknown key `{}` in a layer; {}",
                    e.key,
                    expected(LAYER_KEYS, &e.key)
                ))
                .at(place.origin(e.key_start))
                .until(e.key_end),
            );
        }
    }
    let name = required_str(item, "name", "a layer", place, diags)?;
    let path = required_str(item, "path", "a layer", place, diags)?;
    let rel = match resolve_inside(canonical_root, Path::new(""), &path.value) {
        Ok((abs, rel)) if datum_host::repo::metadata(&abs).is_ok_and(|m| m.is_dir()) => rel,
        Ok(_) => {
            diags.push(
                Diagnostic::error(format!("layer path `{}` is not a folder", path.value))
                    .at(path.origin())
                    .until(path.end),
            );
            return None;
        }
        // A layer's path is relative to the repository, not to a layer.
        Err(crate::paths::PathProblem::Absolute { declared }) => {
            diags.push(
                Diagnostic::error(format!(
                    "layer `{}`: `{declared}` is an absolute path: write a path relative to the repository (the folder of datum.yaml)",
                    name.value
                ))
                .at(path.origin())
                .until(path.end),
            );
            return None;
        }
        Err(problem) => {
            diags.push(
                Diagnostic::error(format!("layer `{}`: {problem}", name.value))
                    .at(path.origin())
                    .until(path.end),
            );
            return None;
        }
    };
    let matcher = match item.get("match") {
        None => Matcher::default(),
        Some(e) => read_matcher(&e.value, place, diags)?,
    };
    ok.then(|| Layer {
        name: name.value,
        path: rel,
        matcher,
        origin: place.origin(item.start),
    })
}

fn read_matcher(node: &Node, place: &Place, diags: &mut Diagnostics) -> Option<Matcher> {
    let entries = match &node.value {
        Value::Null => return Some(Matcher::default()),
        Value::Map(entries) => entries,
        _ => {
            diags.push(
                Diagnostic::error(format!(
                    "`match` must be a mapping of label to value (`{{role: web}}`), found {}",
                    node.type_name()
                ))
                .at(place.origin(node.start))
                .until(node.end),
            );
            return None;
        }
    };
    let mut terms = Vec::new();
    let mut ok = true;
    for e in entries {
        // A label is text, and a host file's number is taken as written: a
        // decimal read as a number here (`1.10` as 1.1) would never match
        // the host that wrote it, so it must be quoted.
        let float = |n: &Node| matches!(n.value, Value::Float(_));
        let floats = match &e.value.value {
            Value::Seq(items) => items.iter().any(float),
            _ => float(&e.value),
        };
        if floats {
            ok = false;
            diags.push(
                Diagnostic::error(format!(
                    "label `{}` in `match` is a decimal number as written: quote it (`{}: \"1.10\"`), a label is text and YAML would read 1.10 as 1.1",
                    e.key, e.key
                ))
                .at(place.origin(e.value.start))
                .until(e.value.end),
            );
            continue;
        }
        let values: Option<Vec<String>> = match &e.value.value {
            Value::Seq(items) => items.iter().map(Node::scalar_text).collect(),
            _ => e.value.scalar_text().map(|v| vec![v]),
        };
        match values {
            Some(any_of) if !any_of.is_empty() => terms.push(MatchTerm {
                label: e.key.clone(),
                any_of,
            }),
            _ => {
                ok = false;
                diags.push(
                    Diagnostic::error(format!(
                        "label `{}` in `match` must be a value or a non-empty list of values",
                        e.key
                    ))
                    .at(place.origin(e.value.start))
                    .until(e.value.end),
                );
            }
        }
    }
    ok.then_some(Matcher { terms })
}

/// "did you mean `x`?" for a near miss, else the list of accepted keys.
fn expected(keys: &[&str], key: &str) -> String {
    match crate::suggest::closest(key, keys.iter().copied()) {
        Some(close) => format!("did you mean `{close}`?"),
        None => format!("expected one of: {}", keys.join(", ")),
    }
}

/// A required string field of a mapping, or an error naming `what`.
pub(crate) fn required_str(
    node: &Node,
    key: &str,
    what: &str,
    place: &Place,
    diags: &mut Diagnostics,
) -> Option<Spanned<String>> {
    match node.get(key) {
        None => {
            diags.push(
                Diagnostic::error(format!("{what} has no `{key}`")).at(place.origin(node.start)),
            );
            None
        }
        Some(e) => match e.value.as_str() {
            Some(s) if !s.is_empty() => Some(place.spanned(s.to_owned(), &e.value)),
            _ => {
                diags.push(
                    Diagnostic::error(format!(
                        "`{key}` must be a non-empty string, found {}",
                        e.value.type_name()
                    ))
                    .at(place.origin(e.value.start))
                    .until(e.value.end),
                );
                None
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn matcher(terms: &[(&str, &[&str])]) -> Matcher {
        Matcher {
            terms: terms
                .iter()
                .map(|(k, vs)| MatchTerm {
                    label: (*k).to_owned(),
                    any_of: vs.iter().map(|v| (*v).to_owned()).collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn empty_matcher_matches_every_host() {
        assert!(Matcher::default().matches(&labels(&[])));
        assert!(Matcher::default().matches(&labels(&[("role", "db")])));
    }

    #[test]
    fn every_term_must_hold_and_a_list_means_any_of() {
        let m = matcher(&[("role", &["web", "api"]), ("env", &["prod"])]);
        assert!(m.matches(&labels(&[("role", "api"), ("env", "prod")])));
        assert!(!m.matches(&labels(&[("role", "api"), ("env", "dev")])));
        assert!(!m.matches(&labels(&[("role", "db"), ("env", "prod")])));
        // A label the host does not have never matches.
        assert!(!m.matches(&labels(&[("role", "web")])));
    }

    #[test]
    fn boundary_allowances_are_absolute_normalised_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("base")).unwrap();
        let text = "datum: v1alpha1\nlayers:\n  - {name: base, path: base, match: {}}\nboundary:\n  follow_links: [/var/run, var/x, /a/../b]\n  owner_transitions: [/srv/app]\n  other: []\n";
        let doc = crate::yaml::parse(text).documents.remove(0);
        let mut diags = Diagnostics::new();
        let s = read(&doc, &Place::new("datum.yaml", ""), &root, &mut diags);
        assert_eq!(s.boundary.follow_links, [PathBuf::from("/var/run")]);
        assert_eq!(s.boundary.owner_transitions, [PathBuf::from("/srv/app")]);
        let lines: Vec<String> = diags.iter().map(|d| d.one_line()).collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("datum.yaml:5:"), "{lines:?}");
        assert!(lines[0].contains("must be absolute"), "{lines:?}");
        assert!(lines[1].contains("normalised"), "{lines:?}");
        assert!(
            lines[2].contains("unknown key `other` in `boundary`"),
            "{lines:?}"
        );
    }

    #[test]
    fn a_decimal_in_a_match_must_be_quoted() {
        let text = "datum: v1alpha1\nlayers:\n  - {name: a, path: a, match: {v: 1.10}}\n  - {name: b, path: b, match: {v: [\"1.10\", 2.0]}}\n  - {name: c, path: c, match: {v: \"1.10\", n: 7}}\n";
        let doc = crate::yaml::parse(text).documents.remove(0);
        let place = Place::new("datum.yaml", "");
        let mut diags = Diagnostics::new();
        let dir = tempfile::tempdir().unwrap();
        for l in ["a", "b", "c"] {
            std::fs::create_dir(dir.path().join(l)).unwrap();
        }
        read(&doc, &place, dir.path(), &mut diags);
        let lines: Vec<String> = diags.iter().map(|d| d.one_line()).collect();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines.iter().all(
                |l| l.contains("label `v` in `match` is a decimal number as written: quote it")
            ),
            "{lines:#?}"
        );
        assert!(lines[0].starts_with("datum.yaml:3:"), "{lines:#?}");
        assert!(lines[1].starts_with("datum.yaml:4:"), "{lines:#?}");
    }

    #[test]
    fn settings_read_layers_in_order_and_report_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("base")).unwrap();
        std::fs::create_dir(root.join("web")).unwrap();
        let text = "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n  - name: web\n    path: web\n    match: {role: [web, 1]}\n    colour: red\nclasses: {}\nextra: 1\n";
        let doc = crate::yaml::parse(text).documents.remove(0);
        let mut diags = Diagnostics::new();
        let s = read(&doc, &Place::new("datum.yaml", ""), &root, &mut diags);
        let lines: Vec<String> = diags.iter().map(|d| d.one_line()).collect();
        assert_eq!(
            lines,
            [
                "datum.yaml:11:1: error: unknown key `extra` in datum.yaml; expected one of: datum, layers, classes, boundary",
                "datum.yaml:9:5: error: unknown key `colour` in a layer; expected one of: name, path, match",
            ]
        );
        // The layer with the bad key is dropped, the good one kept.
        assert_eq!(s.layers.len(), 1);
        assert_eq!(s.layers[0].name, "base");
    }

    #[test]
    fn an_absolute_layer_path_is_told_to_be_relative_to_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        let text = "datum: v1alpha1\nlayers:\n  - {name: base, path: /etc}\n";
        let doc = crate::yaml::parse(text).documents.remove(0);
        let mut diags = Diagnostics::new();
        read(&doc, &Place::new("datum.yaml", ""), dir.path(), &mut diags);
        let lines: Vec<String> = diags.iter().map(|d| d.one_line()).collect();
        assert_eq!(
            lines,
            [
                "datum.yaml:3:24: error: layer `base`: `/etc` is an absolute path: write a path relative to the repository (the folder of datum.yaml)"
            ]
        );
    }

    #[test]
    fn layer_paths_must_exist_and_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let text =
            "datum: v1alpha1\nlayers:\n  - {name: a, path: missing}\n  - {name: b, path: ../x}\n";
        let doc = crate::yaml::parse(text).documents.remove(0);
        let mut diags = Diagnostics::new();
        let s = read(&doc, &Place::new("datum.yaml", ""), &root, &mut diags);
        assert!(s.layers.is_empty());
        let lines: Vec<String> = diags.iter().map(|d| d.one_line()).collect();
        assert!(
            lines[0].starts_with("datum.yaml:3:21: error: layer `a`: `missing` does not exist"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("datum.yaml:4:21: error: layer `b`: `../x` leaves the repository"),
            "{lines:?}"
        );
    }
}
