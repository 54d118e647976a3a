//! `ignore_changes` rules, read from the configuration's JSON syntax.
//!
//! The plan JSON has no `lifecycle` block, so the rules come from the source: every
//! `*.tf.json` file in the root module, and, following `module` blocks whose `source` is a
//! local path, the files of those modules (their resources are keyed as
//! `module.NAME.TYPE.NAME`). HCL `.tf` files are not parsed; the documentation says so.
//!
//! Rule lookup uses configuration addresses: instance keys from `count`/`for_each` are
//! stripped (`module.a["x"].aws_instance.b[0]` is `module.a.aws_instance.b`), since one
//! block's `lifecycle` applies to all of its instances.

use std::collections::BTreeMap;
use std::path::{Path as FsPath, PathBuf};

use serde_json::Value;

use crate::flatten::Path;

/// How deep local module calls are followed; a loop of modules calling each other stops here.
const MAX_MODULE_DEPTH: usize = 8;

/// One `ignore_changes` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// As written in the configuration (`metadata[0].labels`, `all`).
    pub text: String,
    /// `None` for `all`.
    pub path: Option<Path>,
}

impl Rule {
    pub fn covers(&self, path: &Path) -> bool {
        match &self.path {
            None => true,
            Some(rule) => rule.covers(path),
        }
    }
}

/// The rules of a configuration, keyed by configuration address.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    by_address: BTreeMap<String, Vec<Rule>>,
    /// Files that were read, for the report's provenance line.
    pub files: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("{path}: cannot read configuration: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path}: invalid JSON at line {line}, column {column}")]
    Json {
        path: String,
        line: usize,
        column: usize,
    },
    #[error("{path}: {address}: ignore_changes entry {entry:?} is not a valid path: {reason}")]
    BadRule {
        path: String,
        address: String,
        entry: String,
        reason: String,
    },
}

impl Rules {
    /// Rules for the resource at `address` (an instance address from the plan).
    pub fn for_address(&self, address: &str) -> &[Rule] {
        self.by_address
            .get(&config_address(address))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.by_address.is_empty()
    }

    /// Read a `*.tf.json` file, or every `*.tf.json` file of a directory (the root module).
    pub fn load(config: &FsPath) -> Result<Rules, RulesError> {
        let mut rules = Rules::default();
        if config.is_dir() {
            rules.load_module_dir(config, "", 0)?;
        } else {
            let dir = config.parent().map(FsPath::to_owned).unwrap_or_default();
            rules.load_file(config, &dir, "", 0)?;
        }
        Ok(rules)
    }

    fn load_module_dir(
        &mut self,
        dir: &FsPath,
        prefix: &str,
        depth: usize,
    ) -> Result<(), RulesError> {
        let read_err = |error| RulesError::Read {
            path: dir.display().to_string(),
            error,
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(read_err)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.to_string_lossy().ends_with(".tf.json"))
            .collect();
        files.sort();
        for file in files {
            self.load_file(&file, dir, prefix, depth)?;
        }
        Ok(())
    }

    fn load_file(
        &mut self,
        file: &FsPath,
        dir: &FsPath,
        prefix: &str,
        depth: usize,
    ) -> Result<(), RulesError> {
        let name = file.display().to_string();
        let bytes = std::fs::read(file).map_err(|error| RulesError::Read {
            path: name.clone(),
            error,
        })?;
        let doc: Value = serde_json::from_slice(&bytes).map_err(|e| RulesError::Json {
            path: name.clone(),
            line: e.line(),
            column: e.column(),
        })?;
        self.files.push(file.to_owned());
        for (rtype, rname, body) in resource_blocks(&doc) {
            let address = format!("{prefix}{rtype}.{rname}");
            for entry in ignore_changes(body) {
                let rule = if entry == "all" || entry == "*" {
                    Rule {
                        text: "all".to_owned(),
                        path: None,
                    }
                } else {
                    let path = Path::parse(&entry).map_err(|reason| RulesError::BadRule {
                        path: name.clone(),
                        address: address.clone(),
                        entry: entry.clone(),
                        reason,
                    })?;
                    Rule {
                        text: entry,
                        path: Some(path),
                    }
                };
                self.by_address
                    .entry(address.clone())
                    .or_default()
                    .push(rule);
            }
        }
        if depth < MAX_MODULE_DEPTH {
            for (module, source) in local_module_calls(&doc) {
                let child = dir.join(&source);
                if child.is_dir() {
                    let child_prefix = format!("{prefix}module.{module}.");
                    self.load_module_dir(&child, &child_prefix, depth + 1)?;
                }
            }
        }
        Ok(())
    }
}

/// JSON syntax allows a block to be an object or an array of objects at every level.
fn objects(value: &Value) -> Vec<&serde_json::Map<String, Value>> {
    match value {
        Value::Object(map) => vec![map],
        Value::Array(items) => items.iter().filter_map(Value::as_object).collect(),
        _ => Vec::new(),
    }
}

/// `(type, name, body)` for every `resource` block of a `.tf.json` document.
pub(crate) fn resource_blocks(doc: &Value) -> Vec<(&str, &str, &serde_json::Map<String, Value>)> {
    let mut out = Vec::new();
    for top in objects(doc) {
        let Some(resources) = top.get("resource") else {
            continue;
        };
        for by_type in objects(resources) {
            for (rtype, by_name) in by_type {
                for names in objects(by_name) {
                    for (rname, body) in names {
                        for body in objects(body) {
                            out.push((rtype.as_str(), rname.as_str(), body));
                        }
                    }
                }
            }
        }
    }
    out
}

fn ignore_changes(body: &serde_json::Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    let Some(lifecycle) = body.get("lifecycle") else {
        return out;
    };
    for lc in objects(lifecycle) {
        match lc.get("ignore_changes") {
            Some(Value::String(s)) => out.push(strip_interpolation(s)),
            Some(Value::Array(items)) => {
                out.extend(
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(strip_interpolation),
                );
            }
            _ => {}
        }
    }
    out
}

/// Old configurations wrap traversals as `"${metadata[0].labels}"`.
fn strip_interpolation(s: &str) -> String {
    let t = s.trim();
    t.strip_prefix("${")
        .and_then(|r| r.strip_suffix('}'))
        .unwrap_or(t)
        .trim()
        .to_owned()
}

fn local_module_calls(doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for top in objects(doc) {
        let Some(modules) = top.get("module") else {
            continue;
        };
        for by_name in objects(modules) {
            for (name, body) in by_name {
                for body in objects(body) {
                    if let Some(source) = body.get("source").and_then(Value::as_str)
                        && (source.starts_with("./") || source.starts_with("../"))
                    {
                        out.push((name.clone(), source.to_owned()));
                    }
                }
            }
        }
    }
    out
}

/// Strip instance keys: `module.a["x"].module.b[0].t.n["k"]` -> `module.a.module.b.t.n`.
pub fn config_address(address: &str) -> String {
    let mut out = String::with_capacity(address.len());
    let mut chars = address.chars();
    while let Some(c) = chars.next() {
        if c != '[' {
            out.push(c);
            continue;
        }
        // Skip to the matching ']', honouring quoted keys that may contain ']' or '\"'.
        let mut in_string = false;
        while let Some(k) = chars.next() {
            match (in_string, k) {
                (true, '\\') => {
                    chars.next();
                }
                (true, '"') => in_string = false,
                (false, '"') => in_string = true,
                (false, ']') => break,
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_addresses() {
        assert_eq!(config_address("aws_instance.a"), "aws_instance.a");
        assert_eq!(config_address("aws_instance.a[3]"), "aws_instance.a");
        assert_eq!(
            config_address(r#"module.a["x.y]"].module.b[0].local_file.foo["file1.txt"]"#),
            "module.a.module.b.local_file.foo"
        );
        assert_eq!(config_address(r#"t.n["q\"]"]"#), "t.n");
    }

    #[test]
    fn loads_rules_from_dir_and_local_modules() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("main.tf.json"),
            r#"{"resource":{"kubernetes_config_map_v1":{"routing":{"lifecycle":{"ignore_changes":["metadata[0].labels"]}}},
                "local_file":[{"boot":{"lifecycle":[{"ignore_changes":"all"}]}}]},
               "module":{"net":{"source":"./modules/net"}}}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.json"), "not json at all").unwrap();
        std::fs::create_dir_all(dir.path().join("modules/net")).unwrap();
        std::fs::write(
            dir.path().join("modules/net/net.tf.json"),
            r#"{"resource":{"google_compute_network":{"main":{"lifecycle":{"ignore_changes":["${labels}"]}}}}}"#,
        )
        .unwrap();
        let rules = Rules::load(dir.path()).unwrap();
        let r = rules.for_address("kubernetes_config_map_v1.routing");
        assert_eq!(r[0].text, "metadata[0].labels");
        assert!(r[0].covers(&Path::parse("metadata[0].labels.owner").unwrap()));
        assert!(rules.for_address("local_file.boot")[0].covers(&Path::parse("anything").unwrap()));
        let m = rules.for_address(r#"module.net.google_compute_network.main"#);
        assert_eq!(m[0].text, "labels");
        assert!(rules.for_address("local_file.other").is_empty());
    }

    #[test]
    fn bad_config_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.tf.json");
        std::fs::write(&f, "{").unwrap();
        let msg = Rules::load(&f).unwrap_err().to_string();
        assert!(msg.contains("x.tf.json"), "{msg}");
    }
}
