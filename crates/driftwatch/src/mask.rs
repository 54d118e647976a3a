//! What must never be shown.
//!
//! Two independent reasons hide a value: OpenTofu marked it sensitive (`before_sensitive` /
//! `after_sensitive`, where `true` marks a whole subtree), or its name looks like a secret
//! (providers do not always mark one). [`Masker`] answers "may this leaf be kept?" while the
//! plan is being parsed; the parser then drops the value, so the rest of the program never
//! holds it. When a marker has a shape this module does not understand, it fails closed.

use std::cell::OnceCell;
use std::collections::BTreeSet;

use aho_corasick::AhoCorasick;
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

    /// The path a withheld leaf is shown under, or `None` when the leaf may be shown.
    ///
    /// A leaf hidden by a marker is shown at the value the marker hides as a whole (see
    /// [`sensitive_depth`]), so a sensitive map's keys never appear: `data`, not
    /// `data.alice`. A leaf hidden only by its name keeps its whole path.
    pub fn withheld_path(
        &self,
        path: &Path,
        before_marker: Option<&Value>,
        after_marker: Option<&Value>,
    ) -> Option<Path> {
        let depth = [before_marker, after_marker]
            .into_iter()
            .filter_map(|m| sensitive_depth(m, path))
            .min();
        match depth {
            Some(depth) => Some(Path(path.0[..depth].to_vec())),
            None if self.name_is_secret(path) => Some(path.clone()),
            None => None,
        }
    }
}

/// Where a marker hides `path`: the number of its steps down to the value marked
/// sensitive as a whole (at least one, the attribute's name; at most the whole path), or
/// `None` when the marker does not hide it. What lies below that value (a sensitive map's
/// keys, a sensitive object's members) is part of the secret, as OpenTofu's own plan shows
/// it (`data = (sensitive value)`). A missing marker or one of an unexpected shape hides
/// at the point where it stops making sense (fail closed); a missing marker, at the
/// attribute.
pub fn sensitive_depth(marker: Option<&Value>, path: &Path) -> Option<usize> {
    let len = path.0.len();
    let at = |depth: usize| Some(depth.max(1).min(len));
    let Some(mut current) = marker else {
        return at(1);
    };
    for (depth, step) in path.0.iter().enumerate() {
        match (current, step) {
            (Value::Bool(true), _) => return at(depth),
            (Value::Bool(false) | Value::Null, _) => return None,
            (Value::Object(map), Step::Key(k)) => match map.get(k) {
                Some(next) => current = next,
                None => return None,
            },
            (Value::Array(items), Step::Index(i)) => {
                match usize::try_from(*i).ok().and_then(|i| items.get(i)) {
                    Some(next) => current = next,
                    None => return None,
                }
            }
            // Shape mismatch: we cannot tell, so we hide from here.
            _ => return at(depth),
        }
    }
    match current {
        Value::Bool(true) => at(len),
        Value::Bool(false) | Value::Null | Value::Object(_) | Value::Array(_) => None,
        _ => at(len),
    }
}

/// What the markers of one change hide: every map key and every string or number inside
/// a value marked sensitive, on either side.
///
/// Providers copy values into attributes they do not mark: the AWS provider's `tags_all`
/// holds every tag of `tags`, so a tag from a sensitive variable (or a whole sensitive tags
/// map, keys and all) is in plain text beside its marked original. A leaf that is not
/// marked but holds one of these values, or sits under one of these keys, is a copy of the
/// secret and is withheld too (fail closed: an unrelated value that happens to be equal is
/// hidden as well).
///
/// A string is also a copy when it holds a hidden string of at least [`EMBEDDED_MIN`]
/// bytes inside it, as it is or JSON-escaped (see `embedded_forms`): a provider builds
/// one attribute from another (an ARN from a sensitive name, a policy document from a
/// sensitive condition value) and copies the result unmarked (the AWS provider's
/// `aws_iam_role.inline_policy`). Shorter hidden strings are withheld only where they are
/// a whole value, as before.
#[derive(Debug, Default)]
pub struct Hidden {
    keys: BTreeSet<String>,
    /// Strings, as their content.
    values: BTreeSet<String>,
    /// Numbers, as their digits.
    numbers: BTreeSet<String>,
    /// What a string is searched for, made from `values` when first asked and forgotten
    /// whenever `values` grows.
    embedded: OnceCell<Embedded>,
}

/// How long (in bytes) a hidden string must be to be looked for inside longer strings.
/// Shorter ones are ordinary words far more often than secrets (`true`, `default`,
/// `enabled`, `Allow`, a region's `1`), and a marker that hides a whole object hides all of
/// them: searched for inside every string they would withhold most of a report. Eight is
/// the usual shortest password a service accepts.
pub const EMBEDDED_MIN: usize = 8;

/// The hidden strings of at least [`EMBEDDED_MIN`] bytes in every form they are searched
/// for, and one automaton that looks for all of them at once.
#[derive(Debug, Default)]
struct Embedded {
    patterns: Vec<String>,
    /// `None` when there is nothing to look for, or the automaton could not be built
    /// (past its limits): then each pattern is searched for on its own, same answers.
    matcher: Option<AhoCorasick>,
}

impl Embedded {
    fn of(values: &BTreeSet<String>) -> Embedded {
        let mut patterns: Vec<String> = values
            .iter()
            .filter(|v| v.len() >= EMBEDDED_MIN)
            .flat_map(|v| embedded_forms(v))
            .collect();
        patterns.sort();
        patterns.dedup();
        let matcher = if patterns.is_empty() {
            None
        } else {
            AhoCorasick::new(&patterns).ok()
        };
        Embedded { patterns, matcher }
    }

    fn found_in(&self, text: &str) -> bool {
        match &self.matcher {
            Some(matcher) => matcher.is_match(text),
            None => self.patterns.iter().any(|p| text.contains(p.as_str())),
        }
    }
}

/// The forms a string takes inside another: as it is, and inside JSON text held by the
/// string (a policy document built with `jsonencode`, which the provider copies), escaped
/// as JSON (`"` and `\` and control characters) and as Go's encoder escapes it (also `<`,
/// `>`, `&`, U+2028 and U+2029 as `\u003c` ...: terraform's `jsonencode` and the AWS
/// provider's policy normalisation), once or twice (JSON text inside a string of JSON
/// text). A string with nothing to escape has one form.
fn embedded_forms(text: &str) -> Vec<String> {
    let mut forms = vec![text.to_owned()];
    for html in [false, true] {
        let once = json_escaped(text, html);
        let twice = json_escaped(&once, html);
        forms.push(once);
        forms.push(twice);
    }
    forms.sort();
    forms.dedup();
    forms
}

/// `text` as it is inside a JSON string, without the quotes; with `html`, as Go's
/// `encoding/json` writes it (`<`, `>`, `&`, U+2028, U+2029 as `\u` escapes).
fn json_escaped(text: &str, html: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c < ' ' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if html => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

impl Hidden {
    /// Add what `marker` hides in `value` (one side of a change). A missing marker hides
    /// the whole value from the attribute down already, so nothing is collected for it.
    pub fn add(&mut self, value: &Value, marker: Option<&Value>) {
        let Some(marker) = marker else {
            return;
        };
        match (value, marker) {
            (Value::Null, _) | (_, Value::Bool(false) | Value::Null) => {}
            (_, Value::Bool(true)) => self.add_all(value),
            (Value::Object(values), Value::Object(markers)) => {
                for (key, value) in values {
                    if let Some(marker) = markers.get(key) {
                        self.add(value, Some(marker));
                    }
                }
            }
            (Value::Array(values), Value::Array(markers)) => {
                for (value, marker) in values.iter().zip(markers) {
                    self.add(value, Some(marker));
                }
            }
            // A leaf under a container marker is not hidden (see sensitive_depth).
            (
                Value::Bool(_) | Value::Number(_) | Value::String(_),
                Value::Object(_) | Value::Array(_),
            ) => {}
            // Any other shape hides from here (see sensitive_depth).
            _ => self.add_all(value),
        }
    }

    fn add_all(&mut self, value: &Value) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    self.keys.insert(key.clone());
                    self.add_all(value);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| self.add_all(v)),
            Value::String(s) if !s.is_empty() && self.values.insert(s.clone()) => {
                self.embedded.take();
            }
            Value::Number(n) => {
                self.numbers.insert(n.to_string());
            }
            _ => {}
        }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.values.is_empty() && self.numbers.is_empty()
    }

    /// Take the strings `other` hides, and the keys that cannot be an attribute's name:
    /// what a whole document's markers hide, to withhold copies of them in other
    /// resources. Numbers and the keys that could be an attribute's name (lower-case
    /// snake_case, as every provider schema names them) stay within their own resource,
    /// where a sibling of a marked value is most likely a copy; across a whole plan they
    /// would hide every equal port, count or attribute name. Any other key of a value
    /// marked whole is a map's key, the user's data (`tags = sensitive({...})`), which the
    /// AWS provider copies unmarked into `tags_all`, and from there a configuration can
    /// copy it into any other resource.
    pub fn add_strings_of(&mut self, other: &Hidden) {
        let before = self.values.len();
        self.values.extend(other.values.iter().cloned());
        self.values.extend(
            other
                .keys
                .iter()
                .filter(|k| !k.is_empty() && !could_be_attribute_name(k))
                .cloned(),
        );
        if self.values.len() != before {
            self.embedded.take();
        }
    }

    /// [`Hidden::add_strings_of`], with `other`'s keys taken as strings too: for a value
    /// declared sensitive whole by the user (a sensitive variable's, a literal given to a
    /// module's sensitive variable, a sensitive output's), whose keys are the user's data,
    /// as secret as its strings. The AWS provider copies the keys of a `default_tags` map
    /// into every resource's `tags_all`, unmarked, where they are shown as paths.
    pub fn add_strings_and_keys_of(&mut self, other: &Hidden) {
        self.add_strings_of(other);
        let before = self.values.len();
        self.values
            .extend(other.keys.iter().filter(|k| !k.is_empty()).cloned());
        if self.values.len() != before {
            self.embedded.take();
        }
    }

    /// Where `path` goes under a hidden key: the number of steps before the first such key
    /// past the attribute's name (an attribute's own name is the schema's, not a secret),
    /// or `None`.
    pub fn key_depth(&self, path: &Path) -> Option<usize> {
        path.0
            .iter()
            .enumerate()
            .skip(1)
            .find(|(_, step)| matches!(step, Step::Key(k) if self.keys.contains(k)))
            .map(|(depth, _)| depth)
    }

    /// Whether a string (its content) is a hidden string, or holds one of at least
    /// [`EMBEDDED_MIN`] bytes (as it is or JSON-escaped) inside it.
    pub fn holds_string(&self, text: &str) -> bool {
        if text.is_empty() {
            return false;
        }
        if self.values.contains(text) {
            return true;
        }
        text.len() >= EMBEDDED_MIN
            && self
                .embedded
                .get_or_init(|| Embedded::of(&self.values))
                .found_in(text)
    }

    /// Whether a number (its digits) is a hidden number. A string and a number are never
    /// the same value: an SSM parameter's value "30" (marked by the provider whatever its
    /// type) does not hide every 30.
    pub fn holds_number(&self, digits: &str) -> bool {
        self.numbers.contains(digits)
    }
}

/// Whether `key` could be the name of an attribute or block in a provider's schema
/// (`[a-z0-9_]+`), rather than only a map's key.
fn could_be_attribute_name(key: &str) -> bool {
    key.bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Whether a marker hides anything at all (a `true` somewhere in it), or has a shape that
/// hides by failing closed.
pub fn hides_anything(marker: Option<&Value>) -> bool {
    match marker {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Null) => false,
        Some(Value::Object(map)) => map.values().any(|v| hides_anything(Some(v))),
        Some(Value::Array(items)) => items.iter().any(|v| hides_anything(Some(v))),
        Some(_) => true,
    }
}

/// Whether a sensitivity marker marks `path` (or one of its ancestors) as sensitive.
///
/// A missing marker fails closed. Objects leave out members that are not sensitive, so a
/// missing key is "not sensitive"; a missing list position is too (the two sides of a
/// diff can have lists of different lengths).
pub fn marked(marker: Option<&Value>, path: &Path) -> bool {
    // Shape mismatches (an object indexed by position, a list by name, a number or a
    // string where a marker should be) hide: see sensitive_depth.
    sensitive_depth(marker, path).is_some()
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
    fn withheld_paths_stop_at_the_sensitive_value() {
        let m = Masker::new(&[]).unwrap();
        let marker =
            json!({"data": true, "list": [false, true], "blk": [{"pw": true}], "tags": {}});
        let at = |path: &str| {
            m.withheld_path(&p(path), Some(&marker), Some(&json!(false)))
                .map(|p| p.to_string())
        };
        // A sensitive map's keys are part of its value.
        assert_eq!(at("data[\"CANARY-key\"]").as_deref(), Some("data"));
        assert_eq!(at("list[1]").as_deref(), Some("list[1]"));
        assert_eq!(at("blk[0].pw").as_deref(), Some("blk[0].pw"));
        assert_eq!(at("tags.owner"), None);
        // A secret name keeps its path; a missing marker hides from the attribute down.
        assert_eq!(at("tags.password").as_deref(), Some("tags.password"));
        assert_eq!(
            m.withheld_path(&p("m.k"), None, Some(&json!(false)))
                .map(|p| p.to_string())
                .as_deref(),
            Some("m")
        );
        // The whole object marked sensitive: shown at its attributes.
        assert_eq!(
            m.withheld_path(&p("m.k"), Some(&json!(true)), None)
                .map(|p| p.to_string())
                .as_deref(),
            Some("m")
        );
    }

    #[test]
    fn a_hidden_string_inside_a_longer_one_is_found_as_it_is_or_json_escaped() {
        let mut hidden = Hidden::default();
        hidden.add(
            &json!({"pw": "CANARY-q\"<&>\\x", "plain": "CANARY-plain", "short": "true1"}),
            Some(&json!(true)),
        );
        // Whole values, whatever their length.
        for whole in ["CANARY-q\"<&>\\x", "CANARY-plain", "true1"] {
            assert!(hidden.holds_string(whole), "{whole}");
        }
        // Inside longer strings: as it is, JSON-escaped, as Go escapes it, twice.
        for longer in [
            "arn:aws:sqs:eu-central-1:123456789012:h-CANARY-plain",
            r#"{"k":"CANARY-q\"<&>\\x"}"#,
            r#"{"k":"CANARY-q\"\u003c\u0026\u003e\\x"}"#,
            r#"{\"k\":\"CANARY-q\\\"\\u003c\\u0026\\u003e\\\\x\"}"#,
            r#"{\"k\":\"CANARY-q\\\"<&>\\\\x\"}"#,
            "x CANARY-q\"<&>\\x y",
        ] {
            assert!(hidden.holds_string(longer), "{longer}");
        }
        // A short one (under EMBEDDED_MIN bytes) only as a whole value.
        assert!(!hidden.holds_string("true1 and true12"));
        // Unrelated and partial strings are shown.
        for shown in [
            "",
            "CANARY-pla",
            "CANARY-q\"<&>",
            r#"{"k":"CANARY-q\"<&>x"}"#,
        ] {
            assert!(!hidden.holds_string(shown), "{shown}");
        }
        // Strings learned after a first search are searched for too.
        let mut more = Hidden::default();
        more.add(&json!("CANARY-later"), Some(&json!(true)));
        hidden.add_strings_of(&more);
        assert!(hidden.holds_string("prefix-CANARY-later-suffix"));
        hidden.add(&json!(["CANARY-third"]), Some(&json!([true])));
        assert!(hidden.holds_string("prefix-CANARY-third"));
    }

    #[test]
    fn embedded_forms_escape_as_json_and_go_do() {
        assert_eq!(embedded_forms("CANARY-plain"), ["CANARY-plain"]);
        assert_eq!(
            embedded_forms("a\"<\n\u{1}\u{2028}"),
            [
                "a\"<\n\u{1}\u{2028}".to_owned(),
                r#"a\"<\n\u0001"#.to_owned() + "\u{2028}",
                r#"a\"\u003c\n\u0001\u2028"#.to_owned(),
                r#"a\\\"<\\n\\u0001"#.to_owned() + "\u{2028}",
                r#"a\\\"\\u003c\\n\\u0001\\u2028"#.to_owned(),
            ]
        );
        // The JSON form is serde_json's (and Go's, but for the HTML escapes).
        let text = "q\"\\\t\u{8}\u{c}\u{1f}<";
        let serde = serde_json::to_string(text).unwrap();
        assert!(embedded_forms(text).contains(&serde[1..serde.len() - 1].to_owned()));
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
