//! Who a catalogue is compiled for: the host's name and labels.
//!
//! This module owns reading the host file (`/etc/datum/host.yaml` under the
//! root by default: `name:` and `labels:`), the fallbacks when there is none
//! (`<root>/etc/hostname`, then the machine's own name) and `--label k=v`
//! overrides. It reads only those files; it must not look at the repository.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use datum_manifest::yaml::{self, Value};
use serde::{Deserialize, Serialize};

/// Who the catalogue is compiled for: the host's name and labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct HostIdentity {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// The host file's path under a root, when no other is given.
pub const DEFAULT_HOST_FILE: &str = "etc/datum/host.yaml";

/// Why the host's identity could not be established.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{}: cannot read the host file: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}", path.display())]
    Malformed {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
        /// The host file's text, so the line can be shown under the
        /// message as a manifest's is ([`HostError::diagnostics`]).
        text: std::sync::Arc<str>,
    },
    #[error("no host name: {} is missing and the machine's name cannot be read", host_file.display())]
    NoName { host_file: PathBuf },
    /// The name taken when the host file gives none (`<root>/etc/hostname`,
    /// or the kernel's) breaks the rule a host file's `name:` is held to.
    #[error(
        "`{name}`, read from {} because {} gives no name, is not a usable host name ({}): `datum server enroll` refuses it, and reports name the host by it; give the host a name with `name:` in {}",
        from.display(),
        host_file.display(),
        datum_core::host_name::RULE,
        host_file.display()
    )]
    BadFallbackName {
        /// The name, with what could drive a terminal escaped.
        name: String,
        /// Where it was read: `<root>/etc/hostname` or the kernel's name.
        from: PathBuf,
        host_file: PathBuf,
    },
    #[error("`{text}` is not a label: write --label key=value")]
    BadLabel { text: String },
}

impl HostError {
    /// A malformed host file as a diagnostic at its position, with the
    /// file's text to show the line and a caret under the column (as
    /// `Diagnostics::render` shows a manifest's error); `None` for the
    /// other errors, which have no position.
    pub fn diagnostics(&self) -> Option<crate::Diagnostics> {
        let HostError::Malformed {
            path,
            line,
            column,
            message,
            text,
        } = self
        else {
            return None;
        };
        let mut out = crate::Diagnostics::new();
        out.push(
            crate::Diagnostic::error(message.clone()).at(datum_core::Origin {
                file: path.clone(),
                line: *line,
                column: *column,
                layer: String::new(),
            }),
        );
        out.sources_mut()
            .insert(path.clone(), std::sync::Arc::clone(text));
        Some(out)
    }
}

impl HostIdentity {
    /// Establishes the host's identity.
    ///
    /// Reads `host_file` when given (as a path on this machine, not under
    /// `root`), else `<root>/etc/datum/host.yaml`. When the default file does
    /// not exist, the name comes from `<root>/etc/hostname`, then from the
    /// machine's own host name, with no labels. `overrides` (from `--label
    /// key=value`) are applied last and win.
    pub fn load(
        root: &Path,
        host_file: Option<&Path>,
        overrides: &[(String, String)],
    ) -> Result<Self, HostError> {
        let mut identity = match host_file {
            Some(path) => read_host_file(path)?,
            None => {
                // Under the root: through the boundary, like every path there.
                let path = root.join(DEFAULT_HOST_FILE);
                match in_root(root, DEFAULT_HOST_FILE) {
                    Ok(Some(text)) => parse_host_file(&path, &text)?,
                    Ok(None) => HostIdentity::default(),
                    Err(source) => return Err(HostError::Read { path, source }),
                }
            }
        };
        if identity.name.is_empty() {
            let host_file =
                host_file.map_or_else(|| root.join(DEFAULT_HOST_FILE), Path::to_path_buf);
            let Some((name, from)) = fallback_name(root) else {
                return Err(HostError::NoName { host_file });
            };
            // The rule a host file's `name:` is held to, wherever the name
            // came from.
            if !datum_core::host_name::is_valid(&name) {
                return Err(HostError::BadFallbackName {
                    name: datum_core::text::visible(&name, &[]).into_owned(),
                    from,
                    host_file,
                });
            }
            identity.name = name;
        }
        for (k, v) in overrides {
            identity.labels.insert(k.clone(), v.clone());
        }
        Ok(identity)
    }
}

impl HostIdentity {
    /// [`HostIdentity::load`] only when something declares the host: a host
    /// file given or present under the root, or label overrides. `None`
    /// otherwise. For `datum lint`: a repository linted without a declared
    /// host has its templates parsed but not rendered (the machine's name and
    /// no labels would make every `host.labels.x` look undefined).
    pub fn load_if_declared(
        root: &Path,
        host_file: Option<&Path>,
        overrides: &[(String, String)],
    ) -> Result<Option<Self>, HostError> {
        let declared = host_file.is_some()
            || !overrides.is_empty()
            || matches!(in_root(root, DEFAULT_HOST_FILE), Ok(Some(_)) | Err(_));
        if declared {
            Self::load(root, host_file, overrides).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// Parses `key=value` as given to `--label`.
pub fn parse_label(text: &str) -> Result<(String, String), HostError> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(HostError::BadLabel {
            text: text.to_owned(),
        }),
    }
}

fn read_host_file(path: &Path) -> Result<HostIdentity, HostError> {
    // A file the operator named (`--host-file`): read as given.
    let text = datum_host::named::read_to_string(path).map_err(|source| HostError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_host_file(path, &text)
}

/// The text of `relative` under `root`, read through the host's boundary
/// (no parent link followed); `None` when it is not there.
fn in_root(root: &Path, relative: &str) -> std::io::Result<Option<String>> {
    let host = datum_host::Host::with_name(root, "");
    let declared = Path::new("/").join(relative);
    match host.read(&declared) {
        Ok(found) => Ok(found.map(|b| String::from_utf8_lossy(&b).into_owned())),
        Err(datum_host::HostError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(None)
        }
        Err(e) => Err(std::io::Error::other(e)),
    }
}

const HOST_KEYS: &[&str] = &["datum", "name", "labels"];

/// The text a scalar written on one line was written as (`None` for one
/// spanning lines, or a position outside `text`).
fn written_text<'t>(text: &'t str, node: &yaml::Node) -> Option<&'t str> {
    if node.start.line != node.end.line {
        return None;
    }
    // The parser counts columns after a byte order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let line = text
        .lines()
        .nth(usize::try_from(node.start.line).ok()?.checked_sub(1)?)?;
    let column = |c: u32| usize::try_from(c).ok()?.checked_sub(1);
    let (from, to) = (column(node.start.column)?, column(node.end.column)?);
    let at = |chars: usize| {
        line.char_indices()
            .map(|(i, _)| i)
            .chain(std::iter::once(line.len()))
            .nth(chars)
    };
    line.get(at(from)?..at(to)?)
}

fn parse_host_file(path: &Path, text: &str) -> Result<HostIdentity, HostError> {
    let shown: std::sync::Arc<str> = std::sync::Arc::from(text);
    let malformed = |pos: yaml::Pos, message: String| HostError::Malformed {
        path: path.to_owned(),
        line: pos.line as usize,
        column: pos.column as usize,
        message,
        text: std::sync::Arc::clone(&shown),
    };
    let mut parsed = yaml::parse(text);
    if let Some(e) = parsed.errors.first() {
        return Err(malformed(e.start, e.message.clone()));
    }
    let docs: Vec<_> = parsed
        .documents
        .drain(..)
        .filter(|d| !d.is_null())
        .collect();
    let Some(doc) = docs.first() else {
        // An empty host file: the name falls back like a missing one.
        return Ok(HostIdentity::default());
    };
    if docs.len() > 1 {
        return Err(malformed(
            docs[1].start,
            "a host file holds one document".to_owned(),
        ));
    }
    let Some(entries) = doc.as_map() else {
        return Err(malformed(
            doc.start,
            format!(
                "a host file must be a mapping with `name` and `labels`, found {}",
                doc.type_name()
            ),
        ));
    };
    let mut identity = HostIdentity::default();
    for e in entries {
        match e.key.as_str() {
            "datum" => {
                if e.value.as_str() != Some(datum_manifest::API_VERSION) {
                    return Err(malformed(
                        e.value.start,
                        format!(
                            "unsupported format version: this Datum reads `{}`",
                            datum_manifest::API_VERSION
                        ),
                    ));
                }
            }
            "name" => match e.value.as_str() {
                // The rule `datum server enroll` applies: a name it would
                // refuse could never report, and reports, the fleet and the
                // check report's header name the host by it.
                Some(n) if !n.trim().is_empty() && !datum_core::host_name::is_valid(n.trim()) => {
                    return Err(malformed(
                        e.value.start,
                        format!(
                            "`{}` is not a usable host name ({}): `datum server enroll` refuses it, and reports name the host by it",
                            datum_core::text::visible(n.trim(), &[]),
                            datum_core::host_name::RULE
                        ),
                    ));
                }
                Some(n) if !n.trim().is_empty() => identity.name = n.trim().to_owned(),
                _ => {
                    return Err(malformed(
                        e.value.start,
                        format!(
                            "`name` must be a non-empty string, found {}",
                            e.value.type_name()
                        ),
                    ));
                }
            },
            "labels" => match &e.value.value {
                Value::Null => {}
                Value::Map(labels) => {
                    for l in labels {
                        // A label is text: a number is taken as written, and
                        // one whose digits YAML would change (`1.10` read as
                        // 1.1, `007` as 7, twenty digits rounded) must be
                        // quoted, or the host would match other layers
                        // than the one its file names.
                        if matches!(l.value.value, Value::Int(_) | Value::Float(_)) {
                            let written = written_text(text, &l.value);
                            let read = l.value.scalar_text().unwrap_or_default();
                            if written != Some(read.as_str()) {
                                let shown = written.unwrap_or(read.as_str());
                                return Err(malformed(
                                    l.value.start,
                                    format!(
                                        "label `{}` is written {shown}, which YAML reads as the number {read}: quote it (`{}: \"{shown}\"`), a label is text",
                                        l.key, l.key
                                    ),
                                ));
                            }
                        }
                        let Some(v) = l.value.scalar_text() else {
                            return Err(malformed(
                                l.value.start,
                                format!(
                                    "label `{}` must be a single value, found {}",
                                    l.key,
                                    l.value.type_name()
                                ),
                            ));
                        };
                        identity.labels.insert(l.key.clone(), v);
                    }
                }
                _ => {
                    return Err(malformed(
                        e.value.start,
                        format!(
                            "`labels` must be a mapping of label to value, found {}",
                            e.value.type_name()
                        ),
                    ));
                }
            },
            other => {
                return Err(malformed(
                    e.key_start,
                    match datum_manifest::suggest::closest(other, HOST_KEYS.iter().copied()) {
                        Some(close) => {
                            format!(
                                "unknown key `{other}` in the host file; did you mean `{close}`?"
                            )
                        }
                        None => format!(
                            "unknown key `{other}` in the host file; expected one of: {}",
                            HOST_KEYS.join(", ")
                        ),
                    },
                ));
            }
        }
    }
    Ok(identity)
}

/// `<root>/etc/hostname`, then the running machine's name; with where it
/// was read.
fn fallback_name(root: &Path) -> Option<(String, PathBuf)> {
    let first_line = |text: String| {
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
    };
    if let Some(name) = in_root(root, "etc/hostname")
        .ok()
        .flatten()
        .and_then(first_line)
    {
        return Some((name, root.join("etc/hostname")));
    }
    // The kernel's view of the name, without a libc call.
    let kernel = Path::new("/proc/sys/kernel/hostname");
    datum_host::named::read_to_string(kernel)
        .ok()
        .and_then(first_line)
        .map(|name| (name, kernel.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn numbers_are_labels_as_written_and_those_yaml_would_change_must_be_quoted() {
        let path = Path::new("/etc/datum/host.yaml");
        let id = parse_host_file(
            path,
            "name: w\nlabels:\n  tier: 1\n  ratio: 0.5\n  canary: true\n  v: \"1.10\"\n",
        )
        .unwrap();
        assert_eq!(id.labels["tier"], "1");
        assert_eq!(id.labels["ratio"], "0.5");
        assert_eq!(id.labels["canary"], "true");
        assert_eq!(id.labels["v"], "1.10");
        // Columns count after a byte order mark: a number on its first line
        // is still read where it is written.
        let id = parse_host_file(path, "\u{feff}{name: w, labels: {tier: 1, v: 0.5}}\n").unwrap();
        assert_eq!(
            (id.labels["tier"].as_str(), id.labels["v"].as_str()),
            ("1", "0.5")
        );
        for (text, label, shown, read) in [
            (
                "name: w\nlabels:\n  nginx_version: 1.10\n",
                "nginx_version",
                "1.10",
                "1.1",
            ),
            ("name: w\nlabels: {rack: 007, x: y}\n", "rack", "007", "7"),
            (
                "name: w\nlabels: {build: 20261206000000000001}\n",
                "build",
                "20261206000000000001",
                "20261206000000000000",
            ),
        ] {
            let e = parse_host_file(path, text).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "label `{label}` is written {shown}, which YAML reads as the number {read}: quote it (`{label}: \"{shown}\"`)"
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn default_host_file_under_the_root_gives_name_and_labels() {
        let root = root_with(&[(
            DEFAULT_HOST_FILE,
            "name: web-01\nlabels:\n  role: web\n  tier: 1\n",
        )]);
        let id = HostIdentity::load(root.path(), None, &[]).unwrap();
        assert_eq!(id.name, "web-01");
        assert_eq!(id.labels["role"], "web");
        assert_eq!(id.labels["tier"], "1");
    }

    #[test]
    fn only_a_declared_host_is_loaded_for_lint() {
        let empty = root_with(&[("etc/hostname", "box\n")]);
        assert_eq!(
            HostIdentity::load_if_declared(empty.path(), None, &[]).unwrap(),
            None
        );
        let labelled =
            HostIdentity::load_if_declared(empty.path(), None, &[("role".into(), "web".into())])
                .unwrap();
        assert_eq!(labelled.unwrap().name, "box");
        let with_file = root_with(&[(DEFAULT_HOST_FILE, "name: web-01\n")]);
        assert_eq!(
            HostIdentity::load_if_declared(with_file.path(), None, &[])
                .unwrap()
                .unwrap()
                .name,
            "web-01"
        );
    }

    #[test]
    fn label_overrides_win() {
        let root = root_with(&[(DEFAULT_HOST_FILE, "name: web-01\nlabels: {role: web}\n")]);
        let id = HostIdentity::load(
            root.path(),
            None,
            &[
                parse_label("role=db").unwrap(),
                parse_label("env=prod").unwrap(),
            ],
        )
        .unwrap();
        assert_eq!(id.labels["role"], "db");
        assert_eq!(id.labels["env"], "prod");
        assert!(parse_label("noequals").is_err());
        assert!(parse_label("=x").is_err());
    }

    #[test]
    fn without_a_host_file_the_name_comes_from_etc_hostname() {
        let root = root_with(&[("etc/hostname", "\nbox-7\n")]);
        let id = HostIdentity::load(root.path(), None, &[]).unwrap();
        assert_eq!(id.name, "box-7");
        assert!(id.labels.is_empty());
    }

    /// The name taken when no host file gives one is held to the rule a
    /// host file's `name:` is, and the error says where it was read.
    #[test]
    fn a_fallback_name_enrolment_would_refuse_is_refused_naming_its_file() {
        for (text, shown) in [
            ("web 01\n", "`web 01`"),
            ("# a comment\nweb/01\n", "`web/01`"),
            ("web\u{1b}[31m\n", "`web\\u{1b}[31m`"),
        ] {
            let root = root_with(&[("etc/hostname", text)]);
            let e = HostIdentity::load(root.path(), None, &[])
                .unwrap_err()
                .to_string();
            let want = format!(
                "{shown}, read from {} because {} gives no name, is not a usable host name",
                root.path().join("etc/hostname").display(),
                root.path().join(DEFAULT_HOST_FILE).display()
            );
            assert!(e.starts_with(&want), "{e}");
            assert!(e.contains("`datum server enroll` refuses it"), "{e}");
        }
        // A host file without a name falls back too, and is the file named.
        let root = root_with(&[("etc/hostname", "web 01\n"), ("h.yaml", "labels: {}\n")]);
        let file = root.path().join("h.yaml");
        let e = HostIdentity::load(root.path(), Some(&file), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("because {} gives no name", file.display())),
            "{e}"
        );
    }

    #[test]
    fn an_explicit_host_file_is_read_from_its_own_path() {
        let root = root_with(&[("elsewhere/h.yaml", "name: db-01\n")]);
        let id = HostIdentity::load(
            Path::new("/nonexistent-root"),
            Some(&root.path().join("elsewhere/h.yaml")),
            &[],
        )
        .unwrap();
        assert_eq!(id.name, "db-01");
        let missing = HostIdentity::load(root.path(), Some(&root.path().join("nope.yaml")), &[]);
        assert!(matches!(missing, Err(HostError::Read { .. })));
    }

    /// A name `datum server enroll` would refuse is refused where it is
    /// written, by the same rule (a blank, a line break: escaped).
    #[test]
    fn a_host_name_enrolment_would_refuse_is_refused_at_its_line() {
        for (text, shown) in [
            ("labels: {}\nname: \"web 01\"\n", "`web 01`"),
            (
                "labels: {}\nname: \"web\\n+ File[x]\"\n",
                "`web\\u{a}+ File[x]`",
            ),
            ("labels: {}\nname: a/b\n", "`a/b`"),
        ] {
            let root = root_with(&[(DEFAULT_HOST_FILE, text)]);
            let err = HostIdentity::load(root.path(), None, &[])
                .unwrap_err()
                .to_string();
            assert!(
                err.ends_with(&format!(
                    "etc/datum/host.yaml:2:7: {shown} is not a usable host name (letters, digits, `.`, `-`, `_`; at most 253): `datum server enroll` refuses it, and reports name the host by it"
                )),
                "{err}"
            );
        }
        // Blanks around a good name are not part of it, as before.
        let root = root_with(&[(DEFAULT_HOST_FILE, "name: \" web-01 \"\n")]);
        assert_eq!(
            HostIdentity::load(root.path(), None, &[]).unwrap().name,
            "web-01"
        );
    }

    #[test]
    fn malformed_host_files_name_the_line_and_column() {
        let root = root_with(&[(DEFAULT_HOST_FILE, "name: web-01\nlabels:\n  role: [web]\n")]);
        let err = HostIdentity::load(root.path(), None, &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with(
                "etc/datum/host.yaml:3:9: label `role` must be a single value, found a list"
            ),
            "{err}"
        );

        let root = root_with(&[(DEFAULT_HOST_FILE, "name: web-01\nlable: {}\n")]);
        let err = HostIdentity::load(root.path(), None, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("host.yaml:2:1: unknown key `lable`"), "{err}");

        let root = root_with(&[(DEFAULT_HOST_FILE, "name: [web\n")]);
        let err = HostIdentity::load(root.path(), None, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("YAML syntax error"), "{err}");
    }
}
