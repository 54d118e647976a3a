//! Attribute paths in the syntax a person writes in `ignore_changes`.
//!
//! A [`Path`] is a list of steps (attribute or map key, list index). This module turns
//! nested JSON into `(Path, leaf)` pairs, renders paths as
//! `metadata[0].labels["app.kubernetes.io/name"]`, and parses the same syntax back (for
//! `ignore_changes` entries, `--ignore-attr` and `replace_paths`). It knows nothing about
//! sensitivity; [`crate::mask`] decides what may be kept.

use std::fmt;

use serde_json::Value;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// An attribute name or a map key (HCL does not distinguish them in traversals).
    Key(String),
    /// A list, tuple or set position (sets are rendered like lists by OpenTofu).
    Index(u64),
}

/// A path from the top of a resource object to one value.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Path(pub Vec<Step>);

impl Path {
    /// Whether `self` is `other` or an ancestor of it (`labels` covers `labels.owner`).
    pub fn covers(&self, other: &Path) -> bool {
        other.0.len() >= self.0.len() && other.0[..self.0.len()] == self.0[..]
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Build a path from the JSON form of `replace_paths` / `relevant_attributes`:
    /// strings are keys, integers are indexes. Anything else is rejected.
    pub fn from_json_steps(steps: &[Value]) -> Option<Path> {
        steps
            .iter()
            .map(|s| match s {
                Value::String(k) => Some(Step::Key(k.clone())),
                Value::Number(n) => n.as_u64().map(Step::Index),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(Path)
    }

    /// Parse `metadata[0].labels["app.kubernetes.io/name"]`, `tags["Cost Center"]`,
    /// `labels.owner` or the legacy `metadata.0.labels`.
    pub fn parse(text: &str) -> Result<Path, String> {
        let mut steps = Vec::new();
        let mut chars = text.trim().chars().peekable();
        let mut expect_name = true;
        while let Some(&c) = chars.peek() {
            match c {
                '.' => {
                    chars.next();
                    expect_name = true;
                }
                '[' => {
                    chars.next();
                    if chars.peek() == Some(&'"') {
                        chars.next();
                        let mut key = String::new();
                        loop {
                            match chars.next() {
                                Some('\\') => match chars.next() {
                                    Some('n') => key.push('\n'),
                                    Some('t') => key.push('\t'),
                                    Some('r') => key.push('\r'),
                                    Some(other) => key.push(other),
                                    None => return Err(format!("unterminated key in {text:?}")),
                                },
                                Some('"') => break,
                                Some(other) => key.push(other),
                                None => return Err(format!("unterminated key in {text:?}")),
                            }
                        }
                        steps.push(Step::Key(key));
                    } else {
                        let mut digits = String::new();
                        while let Some(&d) = chars.peek() {
                            if d == ']' {
                                break;
                            }
                            digits.push(d);
                            chars.next();
                        }
                        let index = digits
                            .trim()
                            .parse::<u64>()
                            .map_err(|_| format!("bad index [{digits}] in {text:?}"))?;
                        steps.push(Step::Index(index));
                    }
                    if chars.next() != Some(']') {
                        return Err(format!("missing ] in {text:?}"));
                    }
                    expect_name = false;
                }
                _ => {
                    if !expect_name {
                        return Err(format!("expected . or [ in {text:?}"));
                    }
                    let mut name = String::new();
                    while let Some(&n) = chars.peek() {
                        if n == '.' || n == '[' {
                            break;
                        }
                        name.push(n);
                        chars.next();
                    }
                    let name = name.trim().to_owned();
                    match name.parse::<u64>() {
                        Ok(index) if !steps.is_empty() => steps.push(Step::Index(index)),
                        _ => steps.push(Step::Key(name)),
                    }
                    expect_name = false;
                }
            }
        }
        if steps.is_empty() {
            return Err("empty path".to_owned());
        }
        Ok(Path(steps))
    }
}

/// Whether a key can be written after a dot, or needs `["..."]`.
fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            match step {
                Step::Key(k) if is_identifier(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Step::Key(k) => {
                    // serde_json's string escaping is the same as HCL's for the characters
                    // that matter here (quotes, backslashes, control characters).
                    let quoted = serde_json::to_string(k).map_err(|_| fmt::Error)?;
                    write!(f, "[{quoted}]")?;
                }
                Step::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// Every non-null leaf of `value` with its path, keys in sorted order.
///
/// `null` leaves are left out (an absent attribute and a null one mean the same to a
/// reader), and so are empty objects and lists: only values that can differ are paths.
pub fn flatten(value: &Value) -> Vec<(Path, &Value)> {
    let mut out = Vec::new();
    let mut prefix = Vec::new();
    walk(value, &mut prefix, &mut out);
    out
}

fn walk<'v>(value: &'v Value, prefix: &mut Vec<Step>, out: &mut Vec<(Path, &'v Value)>) {
    match value {
        Value::Null => {}
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for key in keys {
                prefix.push(Step::Key(key.clone()));
                walk(&map[key.as_str()], prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                prefix.push(Step::Index(i as u64));
                walk(item, prefix, out);
                prefix.pop();
            }
        }
        leaf => out.push((Path(prefix.clone()), leaf)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(k: &str) -> Step {
        Step::Key(k.into())
    }

    #[test]
    fn renders_ignore_changes_syntax() {
        let p = Path(vec![
            key("metadata"),
            Step::Index(0),
            key("labels"),
            key("app.kubernetes.io/name"),
        ]);
        assert_eq!(
            p.to_string(),
            "metadata[0].labels[\"app.kubernetes.io/name\"]"
        );
        assert_eq!(
            Path(vec![key("tags"), key("Cost Center")]).to_string(),
            "tags[\"Cost Center\"]"
        );
        assert_eq!(
            Path(vec![key("data"), key("color")]).to_string(),
            "data.color"
        );
    }

    #[test]
    fn parse_round_trips() {
        for text in [
            "metadata[0].labels[\"app.kubernetes.io/name\"]",
            "tags[\"Cost Center\"]",
            "data.color",
            "list[1].id",
            "a[\"q\\\"uote\"]",
        ] {
            assert_eq!(Path::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            Path::parse("metadata.0.labels").unwrap(),
            Path::parse("metadata[0].labels").unwrap()
        );
        assert_eq!(
            Path::parse("labels[\"owner\"]").unwrap(),
            Path::parse("labels.owner").unwrap()
        );
        assert!(Path::parse("a[x]").is_err());
        assert!(Path::parse("").is_err());
    }

    #[test]
    fn covers_is_prefix() {
        let rule = Path::parse("metadata[0].labels").unwrap();
        assert!(rule.covers(&Path::parse("metadata[0].labels.owner").unwrap()));
        assert!(rule.covers(&rule));
        assert!(!rule.covers(&Path::parse("metadata[0].resource_version").unwrap()));
        assert!(!rule.covers(&Path::parse("metadata").unwrap()));
    }

    #[test]
    fn flatten_sorted_leaves_without_nulls() {
        let v = json!({"b": [1, null, {"x": true}], "a": {"k": "v"}, "n": null, "e": {}});
        let flat: Vec<String> = flatten(&v)
            .iter()
            .map(|(p, v)| format!("{p}={v}"))
            .collect();
        assert_eq!(flat, vec!["a.k=\"v\"", "b[0]=1", "b[2].x=true"]);
    }
}
