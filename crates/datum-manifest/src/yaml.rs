//! A YAML tree in which every key and value remembers where it was written.
//!
//! This module owns turning YAML text into [`Node`]s with 1-based line and
//! column positions, and converting them to `serde_json::Value` for the
//! providers. It resolves plain scalars with the YAML 1.2 core schema (so `0600`
//! is the integer 600 and `"0600"` is a string: a provider can tell them apart).
//!
//! It must not know about Datum's document envelope or layers: it only parses.
//! Anything the envelope needs (duplicate keys, unsupported tags) is reported
//! here as a [`YamlError`] with a position, never by panicking.

use std::collections::HashMap;

use saphyr_parser::{Event, Marker, Parser, ScalarStyle, Span, Tag};

/// A position in a text: 1-based line and 1-based column, counted in
/// characters (so carets line up under non-ASCII text too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pos {
    /// `u32`, not `usize`: a repository's tree holds four positions per
    /// mapping entry, and no manifest has four billion lines.
    pub line: u32,
    pub column: u32,
}

impl Pos {
    /// A position from `usize` line and column (saturating).
    pub fn at(line: usize, column: usize) -> Self {
        Self {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
        }
    }

    fn from_marker(m: Marker) -> Self {
        Self {
            line: u32::try_from(m.line()).unwrap_or(u32::MAX),
            column: u32::try_from(m.col() + 1).unwrap_or(u32::MAX),
        }
    }
}

/// One YAML value with the span it was written at.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub start: Pos,
    pub end: Pos,
}

/// A mapping entry: the key's text and span, and the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub key_start: Pos,
    pub key_end: Pos,
    pub value: Node,
}

/// YAML values after core-schema resolution.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in the order written; keys are unique (duplicates are errors).
    Map(Vec<Entry>),
}

/// A problem in the YAML text itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    pub message: String,
    pub start: Pos,
    pub end: Pos,
}

/// Every document of one file, and the problems found while reading it. A
/// syntax error ends the file (the parser cannot resynchronise), but the
/// documents completed before it are kept.
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    pub documents: Vec<Node>,
    pub errors: Vec<YamlError>,
}

impl Node {
    /// The name of the value's type, for messages (`expected a string, found a list`).
    pub fn type_name(&self) -> &'static str {
        match self.value {
            Value::Null => "nothing (null)",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[Entry]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// A mapping's entries as `(key, value, where the key starts)`; none for
    /// anything else.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Node, Pos)> {
        self.as_map()
            .unwrap_or(&[])
            .iter()
            .map(|e| (e.key.as_str(), &e.value, e.key_start))
    }

    /// The entry for `key` when this is a mapping.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.as_map()?.iter().find(|e| e.key == key)
    }

    /// A scalar written as text (labels and matchers accept `role: 1` as "1").
    pub fn scalar_text(&self) -> Option<String> {
        match &self.value {
            Value::Str(s) => Some(s.clone()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Int(i) => Some(i.to_string()),
            Value::Float(f) => Some(f.to_string()),
            Value::Null | Value::Seq(_) | Value::Map(_) => None,
        }
    }

    /// Whether the node is an empty document (`---` followed by nothing).
    pub fn is_null(&self) -> bool {
        matches!(self.value, Value::Null)
    }

    /// The value as JSON, positions dropped.
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Seq(items) => {
                serde_json::Value::Array(items.iter().map(Node::to_json).collect())
            }
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|e| (e.key.clone(), e.value.to_json()))
                    .collect(),
            ),
        }
    }

    /// Finds the entry at a field path (`["mode"]`, `["env", "PATH"]`); list
    /// items are addressed by their index written as a number.
    pub fn entry_at(&self, path: &[String]) -> Option<Located> {
        let (first, rest) = path.split_first()?;
        match &self.value {
            Value::Map(entries) => {
                let e = entries.iter().find(|e| &e.key == first)?;
                if rest.is_empty() {
                    Some(Located {
                        start: e.key_start,
                        end: e.value.end.max(e.key_end),
                    })
                } else {
                    e.value.entry_at(rest)
                }
            }
            Value::Seq(items) => {
                let index: usize = first.parse().ok()?;
                let item = items.get(index)?;
                if rest.is_empty() {
                    Some(Located {
                        start: item.start,
                        end: item.end,
                    })
                } else {
                    item.entry_at(rest)
                }
            }
            _ => None,
        }
    }
}

/// Where something was found: from the key (or item) start to the value end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    pub start: Pos,
    pub end: Pos,
}

/// Parses every document in `text`.
pub fn parse(text: &str) -> Parsed {
    let mut builder = Builder {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
        depth: 0,
        nodes: 0,
        expanded: 0,
        errors: Vec::new(),
    };
    let mut parsed = Parsed::default();
    loop {
        match builder.next() {
            Ok(None) => break,
            Ok(Some((Event::DocumentStart(_), span))) => {
                // Anchors and the alias budget are per document (YAML's
                // anchors do not cross `---`), so a long file of plain
                // documents is never refused for its length.
                builder.anchors.clear();
                builder.expanded = 0;
                match builder.document(span) {
                    Ok(doc) => parsed.documents.push(doc),
                    Err(e) => {
                        builder.errors.push(e);
                        break;
                    }
                }
            }
            Ok(Some((Event::StreamStart, _))) => {}
            Ok(Some((Event::StreamEnd, _))) => break,
            Ok(Some((_, span))) => {
                builder
                    .errors
                    .push(error_at(span, "unexpected YAML event outside a document"));
                break;
            }
            Err(e) => {
                builder.errors.push(e);
                break;
            }
        }
    }
    parsed.errors = builder.errors;
    parsed
}

fn error_at(span: Span, message: impl Into<String>) -> YamlError {
    YamlError {
        message: message.into(),
        start: Pos::from_marker(span.start),
        end: Pos::from_marker(span.end),
    }
}

/// Deeper nesting than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 200;
/// More values than this copied by aliases into one document is refused: a
/// few nested aliases can otherwise expand to gigabytes. Values written out
/// in the file are not counted (the file's size bounds them).
const MAX_EXPANDED: usize = 1_000_000;

struct Builder<'a> {
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
    /// Anchored values and how many values each holds.
    anchors: HashMap<usize, (Node, usize)>,
    depth: usize,
    /// Values built so far in the current document (to size anchors).
    nodes: usize,
    /// Values copied by aliases in the current document.
    expanded: usize,
    /// Problems that do not stop the file (duplicate keys, unknown tags).
    errors: Vec<YamlError>,
}

impl<'a> Builder<'a> {
    fn next(&mut self) -> Result<Option<(Event<'a>, Span)>, YamlError> {
        match self.parser.next_event() {
            None => Ok(None),
            Some(Ok(ev)) => Ok(Some(ev)),
            Some(Err(e)) => {
                let pos = Pos::from_marker(*e.marker());
                Err(YamlError {
                    message: format!("YAML syntax error: {}", e.info()),
                    start: pos,
                    end: pos,
                })
            }
        }
    }

    fn next_required(&mut self) -> Result<(Event<'a>, Span), YamlError> {
        self.next()?.ok_or_else(|| YamlError {
            message: "YAML syntax error: the file ends in the middle of a value".to_owned(),
            start: Pos::default(),
            end: Pos::default(),
        })
    }

    fn document(&mut self, start: Span) -> Result<Node, YamlError> {
        let (ev, span) = self.next_required()?;
        let node = match ev {
            // `---` followed directly by `---` or the end: an empty document.
            Event::DocumentEnd => {
                return Ok(Node {
                    value: Value::Null,
                    start: Pos::from_marker(start.start),
                    end: Pos::from_marker(span.end),
                });
            }
            ev => self.node(ev, span)?,
        };
        let (ev, span) = self.next_required()?;
        if ev != Event::DocumentEnd {
            return Err(error_at(
                span,
                "YAML syntax error: expected the end of the document",
            ));
        }
        Ok(node)
    }

    fn node(&mut self, ev: Event<'a>, span: Span) -> Result<Node, YamlError> {
        if self.depth >= MAX_DEPTH {
            return Err(error_at(
                span,
                format!("values nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        self.depth += 1;
        let nodes_before = self.nodes;
        let result = self.node_inner(ev, span);
        self.depth -= 1;
        let (anchor, node) = result?;
        self.nodes += 1;
        if anchor != 0 {
            self.anchors
                .insert(anchor, (node.clone(), self.nodes - nodes_before));
        }
        Ok(node)
    }

    fn node_inner(&mut self, ev: Event<'a>, span: Span) -> Result<(usize, Node), YamlError> {
        let start = Pos::from_marker(span.start);
        Ok(match ev {
            Event::Scalar(text, style, anchor, tag) => {
                let value = self.scalar(&text, style, tag.as_deref(), span);
                (
                    anchor,
                    Node {
                        value,
                        start,
                        end: Pos::from_marker(span.end),
                    },
                )
            }
            Event::Alias(id) => {
                let Some((target, count)) = self.anchors.get(&id) else {
                    return Err(error_at(span, "YAML alias refers to an unknown anchor"));
                };
                // The copy counts as many values as it holds (minus itself,
                // which the caller counts).
                self.nodes += count.saturating_sub(1);
                self.expanded += count;
                // Checked before copying, so a bomb never allocates.
                if self.expanded > MAX_EXPANDED {
                    return Err(error_at(
                        span,
                        format!(
                            "aliases in this document expand to more than {MAX_EXPANDED} values"
                        ),
                    ));
                }
                // The alias's own position is more useful in messages than
                // the anchor's: that is where the value is used.
                let mut copy = target.clone();
                copy.start = start;
                copy.end = Pos::from_marker(span.end);
                (0, copy)
            }
            Event::SequenceStart(anchor, tag) => {
                self.reject_tag(tag.as_deref(), "seq", span);
                let mut items = Vec::new();
                loop {
                    let (ev, span) = self.next_required()?;
                    if ev == Event::SequenceEnd {
                        // Trees live as long as the repository: no spare room.
                        items.shrink_to_fit();
                        let node = Node {
                            value: Value::Seq(items),
                            start,
                            end: Pos::from_marker(span.end),
                        };
                        break (anchor, node);
                    }
                    items.push(self.node(ev, span)?);
                }
            }
            Event::MappingStart(anchor, tag) => {
                self.reject_tag(tag.as_deref(), "map", span);
                let mut entries: Vec<Entry> = Vec::new();
                loop {
                    let (ev, kspan) = self.next_required()?;
                    if ev == Event::MappingEnd {
                        entries.shrink_to_fit();
                        let node = Node {
                            value: Value::Map(entries),
                            start,
                            end: Pos::from_marker(kspan.end),
                        };
                        break (anchor, node);
                    }
                    let key_node = self.node(ev, kspan)?;
                    let (vev, vspan) = self.next_required()?;
                    let value = self.node(vev, vspan)?;
                    let Some(key) = key_node.scalar_text() else {
                        self.errors.push(YamlError {
                            message: format!(
                                "a mapping key must be a plain word, found {}",
                                key_node.type_name()
                            ),
                            start: key_node.start,
                            end: key_node.end,
                        });
                        continue;
                    };
                    if entries.iter().any(|e| e.key == key) {
                        self.errors.push(YamlError {
                            message: format!("duplicate key `{key}`"),
                            start: key_node.start,
                            end: key_node.end,
                        });
                        continue;
                    }
                    entries.push(Entry {
                        key,
                        key_start: key_node.start,
                        key_end: key_node.end,
                        value,
                    });
                }
            }
            _ => {
                return Err(error_at(span, "YAML syntax error: unexpected event"));
            }
        })
    }

    fn reject_tag(&mut self, tag: Option<&Tag>, expected: &str, span: Span) {
        if let Some(tag) = tag
            && !(tag.is_yaml_core_schema() && tag.suffix == expected)
        {
            self.errors
                .push(error_at(span, format!("unsupported YAML tag `{tag}`")));
        }
    }

    fn scalar(&mut self, text: &str, style: ScalarStyle, tag: Option<&Tag>, span: Span) -> Value {
        if let Some(tag) = tag {
            if !tag.is_yaml_core_schema() {
                self.errors
                    .push(error_at(span, format!("unsupported YAML tag `{tag}`")));
                return Value::Str(text.to_string());
            }
            return match tag.suffix.as_str() {
                "str" => Value::Str(text.to_string()),
                "null" | "bool" | "int" | "float" => {
                    let v = resolve_plain(text);
                    let ok = matches!(
                        (tag.suffix.as_str(), &v),
                        ("null", Value::Null)
                            | ("bool", Value::Bool(_))
                            | ("int", Value::Int(_))
                            | ("float", Value::Float(_) | Value::Int(_))
                    );
                    if !ok {
                        self.errors
                            .push(error_at(span, format!("`{text}` is not a valid `{tag}`")));
                    }
                    v
                }
                _ => {
                    self.errors
                        .push(error_at(span, format!("unsupported YAML tag `{tag}`")));
                    Value::Str(text.to_string())
                }
            };
        }
        match style {
            ScalarStyle::Plain => resolve_plain(text),
            _ => Value::Str(text.to_string()),
        }
    }
}

/// YAML 1.2 core schema resolution of a plain (unquoted) scalar.
fn resolve_plain(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Some(v) = resolve_int(text) {
        return v;
    }
    if is_float(text)
        && let Ok(f) = text.parse::<f64>()
        && f.is_finite()
    {
        return Value::Float(f);
    }
    // `.inf` and `.nan` have no JSON form; they stay text.
    Value::Str(text.to_owned())
}

fn resolve_int(text: &str) -> Option<Value> {
    if let Some(oct) = text.strip_prefix("0o") {
        return i64::from_str_radix(oct, 8).ok().map(Value::Int);
    }
    if let Some(hex) = text.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok().map(Value::Int);
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Too large for i64: keep it as a number if it fits a float.
    Some(match text.parse::<i64>() {
        Ok(i) => Value::Int(i),
        Err(_) => text
            .parse::<f64>()
            .map(Value::Float)
            .unwrap_or_else(|_| Value::Str(text.to_owned())),
    })
}

fn is_float(text: &str) -> bool {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let (int_part, frac_part) = match mantissa.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (mantissa, None),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match frac_part {
        Some(frac) => digits(int_part) && digits(frac) && !(int_part.is_empty() && frac.is_empty()),
        None => !int_part.is_empty() && digits(int_part),
    };
    let exponent_ok = match exponent {
        None => true,
        Some(e) => {
            let e = e.strip_prefix(['-', '+']).unwrap_or(e);
            !e.is_empty() && digits(e)
        }
    };
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Node {
        let p = parse(text);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        assert_eq!(p.documents.len(), 1);
        p.documents.into_iter().next().unwrap()
    }

    #[test]
    fn keys_and_values_carry_one_based_positions() {
        let doc = one("type: File\ndesired:\n    mode: \"0600\"\n");
        let desired = doc.get("desired").unwrap();
        assert_eq!(desired.key_start, Pos { line: 2, column: 1 });
        let mode = desired.value.get("mode").unwrap();
        assert_eq!(mode.key_start, Pos { line: 3, column: 5 });
        assert_eq!(
            mode.value.start,
            Pos {
                line: 3,
                column: 11
            }
        );
        assert_eq!(mode.value.as_str(), Some("0600"));
    }

    #[test]
    fn plain_scalars_follow_the_core_schema_and_quoted_ones_stay_text() {
        let doc = one("a: 0600\nb: '0600'\nc: true\nd: ~\ne: 1.5\nf: 0o644\ng: yes\nh: .inf\n");
        let j = doc.to_json();
        assert_eq!(j["a"], serde_json::json!(600));
        assert_eq!(j["b"], serde_json::json!("0600"));
        assert_eq!(j["c"], serde_json::json!(true));
        assert_eq!(j["d"], serde_json::Value::Null);
        assert_eq!(j["e"], serde_json::json!(1.5));
        assert_eq!(j["f"], serde_json::json!(420));
        // YAML 1.1's yes/no booleans are plain text in 1.2.
        assert_eq!(j["g"], serde_json::json!("yes"));
        assert_eq!(j["h"], serde_json::json!(".inf"));
    }

    #[test]
    fn several_documents_and_empty_ones_are_kept_in_order() {
        let p = parse("a: 1\n---\n---\nb: 2\n");
        assert!(p.errors.is_empty());
        assert_eq!(p.documents.len(), 3);
        assert!(p.documents[1].is_null());
        assert_eq!(p.documents[2].get("b").unwrap().key_start.line, 4);
    }

    #[test]
    fn syntax_errors_keep_earlier_documents_and_point_at_the_line() {
        let p = parse("a: 1\n---\nb: [1, 2\nc: 3\n");
        assert_eq!(p.documents.len(), 1);
        assert_eq!(p.errors.len(), 1);
        assert!(
            p.errors[0].message.starts_with("YAML syntax error"),
            "{:?}",
            p.errors
        );
        assert!(p.errors[0].start.line >= 3);
    }

    #[test]
    fn duplicate_keys_are_errors_at_the_second_key() {
        let p = parse("a: 1\nb: 2\na: 3\n");
        assert_eq!(p.errors.len(), 1);
        assert_eq!(p.errors[0].message, "duplicate key `a`");
        assert_eq!(p.errors[0].start, Pos { line: 3, column: 1 });
    }

    #[test]
    fn aliases_copy_the_anchored_value() {
        let doc = one("a: &x {k: v}\nb: *x\n");
        assert_eq!(doc.to_json()["b"], serde_json::json!({"k": "v"}));
        assert_eq!(doc.get("b").unwrap().value.start.line, 2);
    }

    #[test]
    fn str_tag_forces_text_and_unknown_tags_are_errors() {
        let p = parse("a: !!str 0600\nb: !custom x\n");
        assert_eq!(p.documents[0].to_json()["a"], serde_json::json!("0600"));
        assert_eq!(p.errors.len(), 1);
        assert!(p.errors[0].message.contains("unsupported YAML tag"));
        assert_eq!(p.errors[0].start.line, 2);
    }

    #[test]
    fn entry_at_spans_key_to_value() {
        let doc = one("desired:\n  env:\n    - x\n    - yy\n");
        let loc = doc
            .entry_at(&["desired".into(), "env".into(), "1".into()])
            .unwrap();
        assert_eq!(loc.start, Pos { line: 4, column: 7 });
        assert_eq!(loc.end, Pos { line: 4, column: 9 });
        assert!(doc.entry_at(&["desired".into(), "nope".into()]).is_none());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        // Ours stops at 200 levels; the parser's own limit a little later.
        for depth in [220, 5000] {
            let text = format!("a: {}{}\n", "[".repeat(depth), "]".repeat(depth));
            let p = parse(&text);
            assert_eq!(p.errors.len(), 1);
            let m = &p.errors[0].message;
            assert!(
                m.contains("nested deeper") || m.contains("recursion limit"),
                "{m}"
            );
        }
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = i - 1;
            text.push_str(&format!("a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"));
        }
        let p = parse(&text);
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        assert!(p.errors[0].message.contains("more than"), "{:?}", p.errors);
    }

    #[test]
    fn a_long_file_of_plain_documents_is_not_refused_for_its_length() {
        // 60,000 documents of 21 values: 1.26 million values in one file,
        // more than the alias budget, but no alias anywhere.
        let mut text = String::new();
        for i in 0..60_000 {
            text.push_str(&format!(
                "---\ntype: File\nname: f{i}\npath: /srv/f/{i}\nmode: \"0644\"\nowner: root\ngroup: root\nlabels: {{a: b, c: d}}\ncontent: x\nclass: normal\n"
            ));
        }
        let p = parse(&text);
        assert!(p.errors.is_empty(), "{:?}", p.errors.first());
        assert_eq!(p.documents.len(), 60_000);
    }

    #[test]
    fn the_alias_budget_is_per_document() {
        // Each document expands its aliases to 10,000 values: 200 of them
        // are two million in the file, fine; one document past the budget
        // is refused, and named by its alias's line.
        let mut doc = String::from("---\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..4 {
            let prev = i - 1;
            doc.push_str(&format!("a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"));
        }
        let text = doc.repeat(200);
        let p = parse(&text);
        assert!(p.errors.is_empty(), "{:?}", p.errors.first());
        assert_eq!(p.documents.len(), 200);
        let mut bomb = doc.clone();
        for i in 4..7 {
            let prev = i - 1;
            bomb.push_str(&format!("a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"));
        }
        let p = parse(&format!("{doc}{bomb}"));
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        assert!(
            p.errors[0].message.contains("expand to more than"),
            "{:?}",
            p.errors
        );
        assert_eq!(p.errors[0].start.line, 12, "{:?}", p.errors);
    }

    #[test]
    fn non_ascii_columns_count_characters() {
        let doc = one("é: ü\nk: v\n");
        assert_eq!(doc.get("é").unwrap().value.start.column, 4);
    }
}
