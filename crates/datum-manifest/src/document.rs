//! One resource document: the envelope around a provider's `desired` fields.
//!
//! This module owns reading a YAML document into a [`Document`]: `datum`,
//! `type`, `name`, `desired`, `requires`, `class`, `sensitive`, and lifting
//! `validate:` (written inside `desired`, but an engine setting) out of the
//! provider's fields. Everything else at the top level is an error.
//!
//! It must not look types up in the provider registry or check `desired`
//! fields: the catalogue does that, because it knows the providers.

use datum_core::{Origin, ResourceId};

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::settings::{check_version, required_str};
use crate::span::{Place, Span, Spanned};
use crate::yaml::{Node, Pos, Value};

/// The keys a resource document may have at its top level.
pub const ENVELOPE_KEYS: &[&str] = &[
    "datum",
    "type",
    "name",
    "desired",
    "requires",
    "class",
    "sensitive",
];

/// A resource document's envelope as written, for its JSON Schema (editor
/// support; `datum_catalog::schema` adds each kind's `desired`). `read`
/// stays the authority; a test holds this type to [`ENVELOPE_KEYS`].
#[derive(schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    transform = datum_core::schema::optional_never_null,
    title = "Datum resource document",
    description = "One resource of a Datum repository: its type and name, the provider's `desired` fields, and the engine's settings."
)]
pub struct Envelope {
    /// The format version.
    #[schemars(with = "FormatVersion")]
    pub datum: String,
    /// The resource type.
    #[schemars(rename = "type", with = "ResourceType")]
    pub kind: String,
    /// The resource's name, unique per type (`File[name]` in messages).
    #[schemars(with = "ResourceName")]
    pub name: String,
    /// The resource type's own fields (`validate:` too, for the named
    /// validator); empty (null) for none.
    #[schemars(with = "Desired")]
    pub desired: serde_json::Value,
    /// Resources this one needs first: Kind/name references.
    #[schemars(with = "Option<Vec<datum_core::ReferenceText>>")]
    pub requires: Option<Vec<String>>,
    /// The drift class (`datum.yaml`'s `classes:`; default `normal`).
    #[schemars(with = "Option<ClassName>")]
    pub class: Option<String>,
    /// Never show this resource's content or validator output anywhere.
    pub sensitive: Option<bool>,
}

/// A value of the manifest schema (see the declaration type above).
pub struct Desired;

impl schemars::JsonSchema for Desired {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Desired".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": ["object", "null"] })
    }
}

/// A value of the manifest schema (see the declaration type above).
pub struct FormatVersion;

impl schemars::JsonSchema for FormatVersion {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "FormatVersion".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "const": crate::API_VERSION })
    }
}

/// Any type name: the catalogue's schema narrows it to the registered ones.
pub struct ResourceType;

impl schemars::JsonSchema for ResourceType {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ResourceType".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "minLength": 1 })
    }
}

/// A value of the manifest schema (see the declaration type above).
pub struct ResourceName;

impl schemars::JsonSchema for ResourceName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ResourceName".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // What `name_problem` refuses: brackets and control characters.
        schemars::json_schema!({
            "type": "string",
            "minLength": 1,
            "pattern": "^[^\\[\\]\\x00-\\x1f\\x7f-\\x9f]+$",
        })
    }
}

/// A value of the manifest schema (see the declaration type above).
pub struct ClassName;

impl schemars::JsonSchema for ClassName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ClassName".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "minLength": 1, "examples": ["normal", "critical"] })
    }
}

/// The class a resource has when its documents name none.
pub use datum_core::DEFAULT_CLASS;

/// A resource declaration as written in one layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub id: ResourceId,
    /// Index of the layer in `Settings::layers`.
    pub layer: usize,
    /// Where the document starts.
    pub start: Pos,
    /// Where the `type:` value is written (for "unknown type" errors; the
    /// value is `id.kind`). Spans in this document's file ([`Document::place`]):
    /// at 20,000 documents a copy of the text and the place for each of the
    /// three was 4 MB of a compile.
    pub kind_span: Span,
    /// Where the `name:` value is written (for "duplicate name" errors).
    pub name_span: Span,
    /// The provider's fields as written, `validate` removed. Always a
    /// mapping: an empty one once a compile that owns the repository has
    /// taken it out ([`crate::Repository::take_desired`]).
    pub desired: Node,
    /// Where `desired:` is written (for problems with the whole mapping, such
    /// as a required field that is missing).
    pub desired_span: Span,
    /// `requires:` if the document sets it (an override may leave it alone).
    /// The four optional envelope fields are boxed: most documents write
    /// none of them, and a repository of 20,000 documents should not carry
    /// their room (about 300 bytes each) inline.
    pub requires: Option<Box<Spanned<Vec<Spanned<ResourceId>>>>>,
    pub class: Option<Box<Spanned<String>>>,
    pub sensitive: Option<Box<Spanned<bool>>>,
    /// `validate:` lifted out of `desired`.
    pub validate: Option<Box<Spanned<String>>>,
    pub place: Place,
}

impl Document {
    /// Where the document starts, as an origin.
    pub fn origin(&self) -> Origin {
        self.place.origin(self.start)
    }

    /// Origin and end of a field path inside `desired` (`["mode"]`): from the
    /// key to the end of its value. `None` when the document does not write it.
    pub fn field_span(&self, path: &[String]) -> Option<(Origin, Pos)> {
        self.field_span_in(&self.desired, path)
    }

    /// [`Document::field_span`] in this document's `desired` mapping held
    /// elsewhere (taken out by [`crate::Repository::take_desired`]).
    pub fn field_span_in(&self, desired: &Node, path: &[String]) -> Option<(Origin, Pos)> {
        let loc = desired.entry_at(path)?;
        Some((self.place.origin(loc.start), loc.end))
    }

    /// The top-level `desired` entries as written, with where each key
    /// starts (turn it into an origin with [`Document::origin_at`] only when
    /// needed: most fields never appear in a message).
    pub fn desired_fields(&self) -> impl Iterator<Item = (&str, &Node, Pos)> {
        self.desired.entries()
    }

    /// A position in this document's file, as an origin.
    pub fn origin_at(&self, pos: Pos) -> Origin {
        self.place.origin(pos)
    }

    /// Where `desired:` is written, as an origin, and where it ends.
    pub fn desired_location(&self) -> (Origin, Pos) {
        (
            self.origin_at(self.desired_span.start),
            self.desired_span.end,
        )
    }
}

/// Reads one YAML document. Returns `None` (with diagnostics) when the
/// document cannot be identified (no usable `type` or `name`) or is not a
/// mapping; otherwise returns the document even if some envelope fields were
/// wrong, so later checks still run on the rest.
pub(crate) fn read(
    mut node: Node,
    place: &Place,
    layer: usize,
    diags: &mut Diagnostics,
) -> Option<Document> {
    // `desired` is moved out rather than copied: a repository of 20,000
    // resources should not hold each one twice.
    let desired_entry = match &mut node.value {
        Value::Map(entries) => entries
            .iter()
            .position(|e| e.key == "desired")
            .map(|i| entries.remove(i)),
        _ => None,
    };
    let node = &node;
    let Some(entries) = node.as_map() else {
        diags.push(
            Diagnostic::error(format!(
                "a resource document must be a mapping with `datum`, `type`, `name` and `desired`, found {}",
                node.type_name()
            ))
            .at(place.origin(node.start))
            .until(node.end),
        );
        return None;
    };
    let kind = required_str(node, "type", "the document", place, diags);
    let name = required_str(node, "name", "the document", place, diags);
    let (kind, name) = (kind?, name?);
    let (kind_span, name_span) = (kind.span(), name.span());
    let mut local = Diagnostics::new();
    check_version(node, place, &mut local);
    if let Some(problem) = name_problem(&name.value) {
        local.push(Diagnostic::error(problem).at(name.origin()).until(name.end));
    }
    let id = ResourceId::new(kind.value, name.value);
    for e in entries {
        if ENVELOPE_KEYS.contains(&e.key.as_str()) {
            continue;
        }
        let hint = if e.key == "validate" {
            " (`validate` is written inside `desired`)".to_owned()
        } else if let Some(close) = crate::suggest::closest(&e.key, ENVELOPE_KEYS.iter().copied()) {
            format!("; did you mean `{close}`?")
        } else {
            format!("; expected one of: {}", ENVELOPE_KEYS.join(", "))
        };
        local.push(
            Diagnostic::error(format!("unknown key `{}` in the document{hint}", e.key))
                .at(place.origin(e.key_start))
                .until(e.key_end),
        );
    }

    let (desired, desired_span, validate) = match desired_entry {
        None => {
            local.push(
                Diagnostic::error("the document has no `desired` (write `desired: {}` for none)")
                    .at(place.origin(node.start)),
            );
            let empty = Node {
                value: Value::Map(Vec::new()),
                start: node.start,
                end: node.start,
            };
            (empty, Span::of(node), None)
        }
        Some(e) => {
            let span = Span::of_key(&e);
            match e.value.value {
                Value::Map(mut fields) => {
                    let mut validate = None;
                    if let Some(i) = fields.iter().position(|f| f.key == "validate") {
                        let f = fields.remove(i);
                        match f.value.as_str() {
                            Some(v) => {
                                validate = Some(Box::new(place.spanned(v.to_owned(), &f.value)))
                            }
                            None => local.push(
                                Diagnostic::error(format!(
                                    "`validate` must name a validator (a string), found {}",
                                    f.value.type_name()
                                ))
                                .at(place.origin(f.value.start))
                                .until(f.value.end),
                            ),
                        }
                    }
                    let desired = Node {
                        value: Value::Map(fields),
                        start: e.value.start,
                        end: e.value.end,
                    };
                    (desired, span, validate)
                }
                Value::Null => {
                    let empty = Node {
                        value: Value::Map(Vec::new()),
                        start: e.value.start,
                        end: e.value.end,
                    };
                    (empty, span, None)
                }
                ref other => {
                    let found = Node {
                        value: other.clone(),
                        start: e.value.start,
                        end: e.value.end,
                    };
                    local.push(
                        Diagnostic::error(format!(
                            "`desired` must be a mapping, found {}",
                            found.type_name()
                        ))
                        .at(place.origin(e.value.start))
                        .until(e.value.end),
                    );
                    let empty = Node {
                        value: Value::Map(Vec::new()),
                        start: e.value.start,
                        end: e.value.end,
                    };
                    (empty, span, None)
                }
            }
        }
    };

    let requires = node.get("requires").map(|e| {
        let items = match &e.value.value {
            Value::Seq(items) => items
                .iter()
                .filter_map(|item| read_reference(item, place, &mut local))
                .collect(),
            Value::Null => Vec::new(),
            _ => {
                local.push(
                    Diagnostic::error(format!(
                        "`requires` must be a list of references (`[File/sshd-config]`), found {}",
                        e.value.type_name()
                    ))
                    .at(place.origin(e.value.start))
                    .until(e.value.end),
                );
                Vec::new()
            }
        };
        Box::new(place.key(items, e))
    });

    let class = node.get("class").and_then(|e| match e.value.as_str() {
        Some(c) if !c.is_empty() => Some(Box::new(place.spanned(c.to_owned(), &e.value))),
        _ => {
            local.push(
                Diagnostic::error(format!(
                    "`class` must be a class name, found {}",
                    e.value.type_name()
                ))
                .at(place.origin(e.value.start))
                .until(e.value.end),
            );
            None
        }
    });

    let sensitive = node.get("sensitive").and_then(|e| match e.value.value {
        Value::Bool(b) => Some(Box::new(place.spanned(b, &e.value))),
        _ => {
            local.push(
                Diagnostic::error(format!(
                    "`sensitive` must be true or false, found {}",
                    e.value.type_name()
                ))
                .at(place.origin(e.value.start))
                .until(e.value.end),
            );
            None
        }
    });

    // Every envelope problem belongs to the resource once we know its name.
    for mut d in local {
        d.resource = Some(id.clone());
        diags.push(d);
    }
    Some(Document {
        id,
        layer,
        start: node.start,
        kind_span,
        name_span,
        desired,
        desired_span,
        requires,
        class,
        sensitive,
        validate,
        place: place.clone(),
    })
}

fn read_reference(
    item: &Node,
    place: &Place,
    diags: &mut Diagnostics,
) -> Option<Spanned<ResourceId>> {
    let Some(text) = item.as_str() else {
        diags.push(
            Diagnostic::error(format!(
                "a `requires` entry must be a reference like `File/sshd-config`, found {}",
                item.type_name()
            ))
            .at(place.origin(item.start))
            .until(item.end),
        );
        return None;
    };
    match ResourceId::parse(text) {
        Ok(id) => Some(place.spanned(id, item)),
        Err(e) => {
            diags.push(
                Diagnostic::error(e.to_string())
                    .at(place.origin(item.start))
                    .until(item.end),
            );
            None
        }
    }
}

/// Names appear in `Kind[name]` everywhere; brackets and control characters
/// would make that form ambiguous or unprintable.
fn name_problem(name: &str) -> Option<String> {
    if name.chars().any(|c| c.is_control() || c == '[' || c == ']') {
        return Some(format!(
            "resource name {name:?} may not contain brackets or control characters"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_one(text: &str) -> (Option<Document>, Vec<String>) {
        let node = crate::yaml::parse(text).documents.remove(0);
        let mut diags = Diagnostics::new();
        let doc = read(node, &Place::new("base/a.yaml", "base"), 0, &mut diags);
        (doc, diags.iter().map(|d| d.one_line()).collect())
    }

    #[test]
    fn the_envelope_type_has_exactly_the_envelope_keys() {
        let schema = schemars::SchemaGenerator::default().into_root_schema_for::<Envelope>();
        let mut names: Vec<&str> = schema.as_value()["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        names.sort();
        let mut want = ENVELOPE_KEYS.to_vec();
        want.sort();
        assert_eq!(names, want);
        let required: Vec<&str> = schema.as_value()["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert_eq!(required, ["datum", "type", "name", "desired"]);
    }

    #[test]
    fn a_full_document_reads_every_envelope_field() {
        let (doc, errs) = read_one(
            "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  validate: sshd\nrequires: [Directory/etc, 'File[x]']\nclass: critical\nsensitive: true\n",
        );
        assert!(errs.is_empty(), "{errs:?}");
        let doc = doc.unwrap();
        assert_eq!(doc.id, ResourceId::new("File", "motd"));
        assert_eq!(doc.validate.as_ref().unwrap().value, "sshd");
        assert_eq!(doc.validate.as_ref().unwrap().origin().line, 6);
        // validate is an envelope field: the provider never sees it.
        assert!(doc.desired.get("validate").is_none());
        assert_eq!(
            doc.desired.to_json(),
            serde_json::json!({"path": "/etc/motd"})
        );
        let req: Vec<String> = doc
            .requires
            .unwrap()
            .value
            .iter()
            .map(|r| r.value.to_string())
            .collect();
        assert_eq!(req, ["Directory[etc]", "File[x]"]);
        assert_eq!(doc.class.unwrap().value, "critical");
        assert!(doc.sensitive.unwrap().value);
    }

    #[test]
    fn unknown_keys_wrong_types_and_versions_are_reported_with_positions() {
        let (doc, errs) = read_one(
            "datum: v2\ntype: File\nname: motd\ndesired: {}\nrequires: [nope]\nsensitive: yes\nvalidate: sshd\nowner: root\n",
        );
        assert!(doc.is_some());
        assert_eq!(
            errs,
            [
                "base/a.yaml:1:8: error: File[motd]: unsupported format version `v2`: this Datum reads `v1alpha1`",
                "base/a.yaml:7:1: error: File[motd]: unknown key `validate` in the document (`validate` is written inside `desired`)",
                "base/a.yaml:8:1: error: File[motd]: unknown key `owner` in the document; expected one of: datum, type, name, desired, requires, class, sensitive",
                "base/a.yaml:5:12: error: File[motd]: `nope` is not a resource reference: write Kind/name, for example File/sshd-config",
                "base/a.yaml:6:12: error: File[motd]: `sensitive` must be true or false, found a string",
            ]
        );
    }

    #[test]
    fn documents_without_type_or_name_are_skipped_with_an_error() {
        let (doc, errs) = read_one("datum: v1alpha1\ntype: File\ndesired: {}\n");
        assert!(doc.is_none());
        assert_eq!(errs, ["base/a.yaml:1:1: error: the document has no `name`"]);
    }

    #[test]
    fn field_span_runs_from_key_to_value() {
        let (doc, _) =
            read_one("datum: v1alpha1\ntype: File\nname: m\ndesired:\n    mdoe: \"0600\"\n");
        let (origin, end) = doc.unwrap().field_span(&["mdoe".to_owned()]).unwrap();
        assert_eq!(origin.to_string(), "base/a.yaml:5:5");
        assert_eq!(
            end,
            Pos {
                line: 5,
                column: 17
            }
        );
    }
}
