//! `ignore_changes` and module calls from a `*.tf.json` file (JSON syntax).
//!
//! JSON syntax allows a block to be an object or an array of objects at every level, and
//! an entry to be a string with a traversal in it (`"metadata[0].labels"`) or, in old
//! configurations, an interpolation (`"${labels}"`). serde_json keeps no positions, so
//! errors name the file but not the line.

use serde_json::Value;

use super::{BlockRules, FileRules, Rule, RulesError};

pub(super) fn read(name: &str, bytes: &[u8]) -> Result<FileRules, RulesError> {
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| RulesError::Json {
        path: name.to_owned(),
        line: e.line(),
        column: e.column(),
    })?;
    let mut out = FileRules::default();
    for (rtype, rname, body) in resource_blocks(&doc) {
        let rules = match ignore_changes(body) {
            None => None,
            Some(entries) => Some(
                entries
                    .into_iter()
                    .map(|entry| {
                        Rule::parse(&entry).map_err(|reason| RulesError::BadRule {
                            at: name.to_owned(),
                            address: format!("{rtype}.{rname}"),
                            entry,
                            reason,
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        out.blocks.push(BlockRules {
            rtype: rtype.to_owned(),
            rname: rname.to_owned(),
            rules,
        });
    }
    out.modules = module_calls(&doc);
    Ok(out)
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
fn resource_blocks(doc: &Value) -> Vec<(&str, &str, &serde_json::Map<String, Value>)> {
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

/// The entries of `lifecycle.ignore_changes`, or `None` when the block sets none.
fn ignore_changes(body: &serde_json::Map<String, Value>) -> Option<Vec<String>> {
    let lifecycle = body.get("lifecycle")?;
    let mut found = None;
    for lc in objects(lifecycle) {
        match lc.get("ignore_changes") {
            Some(Value::String(s)) => found.get_or_insert_with(Vec::new).push(s.clone()),
            Some(Value::Array(items)) => found
                .get_or_insert_with(Vec::new)
                .extend(items.iter().filter_map(Value::as_str).map(str::to_owned)),
            _ => {}
        }
    }
    found
}

fn module_calls(doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for top in objects(doc) {
        let Some(modules) = top.get("module") else {
            continue;
        };
        for by_name in objects(modules) {
            for (name, body) in by_name {
                for body in objects(body) {
                    if let Some(source) = body.get("source").and_then(Value::as_str) {
                        out.push((name.clone(), source.to_owned()));
                    }
                }
            }
        }
    }
    out
}
