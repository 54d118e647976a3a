//! What must never be shown.
//!
//! Two independent reasons hide a value: OpenTofu marked it sensitive (`before_sensitive` /
//! `after_sensitive`, where `true` marks a whole subtree), or its name looks like a secret
//! (providers do not always mark one). [`Masker`] answers "may this leaf be kept?" while the
//! plan is being parsed; the parser then drops the value, so the rest of the program never
//! holds it. When a marker has a shape this module does not understand, it fails closed.

use regex::Regex;
use serde_json::Value;

use crate::flatten::{Path, Step};

/// Names that look secret, matched case-insensitively against every key of a path.
pub const DEFAULT_SECRET_PATTERN: &str = r"(?i)password|secret|token|private_key";

/// Decides which leaves are secret.
#[derive(Debug, Clone)]
pub struct Masker {
    default: Regex,
    extra: Vec<Regex>,
}

impl Masker {
    /// A masker with the default names plus each `--secret-pattern` regex.
    pub fn new(extra_patterns: &[String]) -> Result<Masker, regex::Error> {
        let default = Regex::new(DEFAULT_SECRET_PATTERN)?;
        let extra = extra_patterns
            .iter()
            .map(|p| Regex::new(p))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Masker { default, extra })
    }

    /// Whether any attribute name or map key on the path looks like a secret.
    pub fn name_is_secret(&self, path: &Path) -> bool {
        path.0.iter().any(|step| match step {
            Step::Key(k) => self.default.is_match(k) || self.extra.iter().any(|r| r.is_match(k)),
            Step::Index(_) => false,
        })
    }

    /// Whether the leaf at `path` must be withheld, given both sensitivity markers.
    ///
    /// `None` means "no usable marker" and hides everything (fail closed). The parser
    /// passes `Some(false)` for a missing marker whose value is null, which has nothing to
    /// hide.
    pub fn is_secret(
        &self,
        path: &Path,
        before_marker: Option<&Value>,
        after_marker: Option<&Value>,
    ) -> bool {
        self.name_is_secret(path) || marked(before_marker, path) || marked(after_marker, path)
    }
}

/// Whether a sensitivity marker marks `path` (or one of its ancestors) as sensitive.
///
/// A missing marker fails closed. Objects leave out members that are not sensitive, so a
/// missing key is "not sensitive"; a missing list position is too (the two sides of a
/// diff can have lists of different lengths).
pub fn marked(marker: Option<&Value>, path: &Path) -> bool {
    let Some(mut current) = marker else {
        return true;
    };
    for step in &path.0 {
        match (current, step) {
            (Value::Bool(b), _) => return *b,
            (Value::Null, _) => return false,
            (Value::Object(map), Step::Key(k)) => match map.get(k) {
                Some(next) => current = next,
                None => return false,
            },
            (Value::Array(items), Step::Index(i)) => {
                match usize::try_from(*i).ok().and_then(|i| items.get(i)) {
                    Some(next) => current = next,
                    None => return false,
                }
            }
            // Shape mismatch (an object indexed by position, a list by name, a number or a
            // string where a marker should be): we cannot tell, so we hide.
            _ => return true,
        }
    }
    match current {
        Value::Bool(b) => *b,
        Value::Null | Value::Object(_) | Value::Array(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(text: &str) -> Path {
        Path::parse(text).unwrap()
    }

    #[test]
    fn subtree_marker() {
        let m = json!({"data": true, "metadata": [{"labels": {}}]});
        assert!(marked(Some(&m), &p("data.password")));
        assert!(marked(Some(&m), &p("data")));
        assert!(!marked(Some(&m), &p("metadata[0].labels.app")));
        assert!(!marked(Some(&m), &p("other")));
    }

    #[test]
    fn list_markers_line_up_by_index() {
        let m = json!({"list": [false, true, {}]});
        assert!(!marked(Some(&m), &p("list[0]")));
        assert!(marked(Some(&m), &p("list[1]")));
        assert!(!marked(Some(&m), &p("list[2].id")));
        assert!(!marked(Some(&m), &p("list[7]")));
    }

    #[test]
    fn top_level_false_and_malformed() {
        assert!(!marked(Some(&json!(false)), &p("a")));
        assert!(marked(Some(&json!(true)), &p("a")));
        assert!(marked(None, &p("a")));
        assert!(marked(Some(&json!("weird")), &p("a")));
        assert!(marked(Some(&json!({"a": [true]})), &p("a.b")));
    }

    #[test]
    fn secret_names() {
        let m = Masker::new(&["(?i)^connection_string$".to_owned()]).unwrap();
        assert!(m.name_is_secret(&p("data.password")));
        assert!(m.name_is_secret(&p("metadata.Token")));
        assert!(m.name_is_secret(&p("tls[0].private_key_pem")));
        assert!(m.name_is_secret(&p("client_secret")));
        assert!(m.name_is_secret(&p("connection_string")));
        assert!(!m.name_is_secret(&p("data.color")));
    }
}
