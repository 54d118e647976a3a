//! The compiled catalogue and its JSON form.
//!
//! This module owns the [`Catalogue`] value the engine runs, the declaration
//! hash that tells an intentional change from a corrective one, and the JSON
//! `datum catalogue` prints. It must never put content bytes in that JSON:
//! only content checksums leave the process.

use std::collections::{BTreeSet, HashMap};

use datum_core::{Desired, Resource, ResourceId, sha256_hex};
use datum_providers::Registry;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::host::HostIdentity;

/// The compiled, checked catalogue for one host: resources in dependency order
/// (every resource comes after everything it requires; ties keep declaration
/// order).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Catalogue {
    pub host: HostIdentity,
    pub resources: Vec<Resource>,
    /// Requirements the catalogue added (a file requires the Directory resource
    /// declaring its parent folder), as `(dependent, requirement)`. They are
    /// also in the dependent's `Resource::requires`.
    #[serde(default)]
    pub autorequires: Vec<(ResourceId, ResourceId)>,
    /// What the repository allows beyond the strict file-system boundary
    /// (`boundary:` in `datum.yaml`); the host the catalogue is applied to
    /// walks paths with it.
    #[serde(default, skip_serializing_if = "datum_core::Boundary::is_empty")]
    pub boundary: datum_core::Boundary,
}

impl Catalogue {
    /// Makes every resource hold its parsed declaration from its next use
    /// on (`datum_core::HeldDeclaration`): for a catalogue kept for many
    /// passes (the agent's), loaded from its snapshot, which holds none
    /// (a compiled one holds when its compiler was made to:
    /// [`crate::Compiler::holding_declarations`]). Declarations held
    /// already stay held; no other catalogue is affected.
    pub fn hold_declarations(&mut self) {
        for r in &mut self.resources {
            r.held.start_holding();
        }
    }

    pub fn get(&self, id: &ResourceId) -> Option<&Resource> {
        self.resources.iter().find(|r| &r.id == id)
    }

    /// The resources `targets` name plus everything they require, directly
    /// or through another requirement (the added `autorequires` included:
    /// they are in `requires` too), like `terraform -target`. Every target
    /// that names no resource of this catalogue comes back as the error,
    /// in the order given.
    pub fn with_requirements(
        &self,
        targets: &[ResourceId],
    ) -> Result<BTreeSet<ResourceId>, Vec<ResourceId>> {
        let by_id: HashMap<&ResourceId, &Resource> =
            self.resources.iter().map(|r| (&r.id, r)).collect();
        let unknown: Vec<ResourceId> = targets
            .iter()
            .filter(|t| !by_id.contains_key(t))
            .cloned()
            .collect();
        if !unknown.is_empty() {
            return Err(unknown);
        }
        let mut selected = BTreeSet::new();
        let mut todo: Vec<&ResourceId> = targets.iter().collect();
        while let Some(id) = todo.pop() {
            if !selected.insert(id.clone()) {
                continue;
            }
            if let Some(r) = by_id.get(id) {
                // A requirement the catalogue does not hold was refused at
                // compile time; skipping one here cannot widen the selection.
                todo.extend(r.requires.iter().filter(|dep| by_id.contains_key(dep)));
            }
        }
        Ok(selected)
    }

    /// The JSON `datum catalogue` prints: the host, and per resource its id,
    /// type, name, desired fields (never content), content SHA-256, explicit
    /// `requires`, added `autorequires`, class, sensitive, validate, origin
    /// (`file:line:col`) and declaration hash. With `explain`, a `fields` map
    /// says which layer and line each field came from.
    pub fn to_json(&self, registry: &Registry, explain: bool) -> Value {
        let view = JsonView::new(self, registry, explain);
        let resources: Vec<Value> = self.resources.iter().map(|r| view.resource(r)).collect();
        json!({
            "format_version": FORMAT_VERSION,
            "host": view.host(),
            "resources": resources,
        })
    }

    /// [`Catalogue::to_json`], pretty-printed to `out` one resource at a
    /// time: the same bytes as `to_string_pretty(&to_json(..))` without the
    /// whole document in memory (20,000 resources were ~200 MiB as one
    /// `Value`).
    pub fn write_json_pretty(
        &self,
        registry: &Registry,
        explain: bool,
        out: impl std::io::Write,
    ) -> serde_json::Result<()> {
        serde_json::to_writer_pretty(out, &JsonView::new(self, registry, explain))
    }

    /// [`Catalogue::write_json_pretty`] with fields the caller adds to some
    /// resources (`datum catalogue` adds each Tree's declared
    /// `fingerprint`, which needs the host's account files).
    ///
    /// A sensitive resource never shows its content's SHA-256 (nor its
    /// declaration hash, which covers it): with `key`, the host's keyed
    /// digests of both (`content_digest`, `declaration_hash`), else none.
    pub fn write_json_pretty_with(
        &self,
        registry: &Registry,
        explain: bool,
        extra: &ExtraFields<'_>,
        key: Option<&datum_core::DigestKey>,
        out: impl std::io::Write,
    ) -> serde_json::Result<()> {
        let mut view = JsonView::new(self, registry, explain);
        view.extra = Some(extra);
        view.key = key;
        serde_json::to_writer_pretty(out, &view)
    }
}

/// The `format_version` of the catalogue's JSON document (`datum catalogue`).
pub const FORMAT_VERSION: &str = "1";

/// Fields a caller adds to a resource's JSON: `(key, value)` pairs, maybe
/// none.
pub type ExtraFields<'a> = dyn Fn(&Resource) -> Vec<(String, Value)> + 'a;

/// The JSON form of a catalogue, built resource by resource as it is
/// serialised.
struct JsonView<'a> {
    catalogue: &'a Catalogue,
    /// The kinds, for the fields each calls sensitive.
    registry: &'a Registry,
    explain: bool,
    /// Added requirements by dependent.
    auto: HashMap<&'a ResourceId, Vec<String>>,
    /// Fields added by the caller.
    extra: Option<&'a ExtraFields<'a>>,
    /// The host's key for sensitive resources' digests.
    key: Option<&'a datum_core::DigestKey>,
}

impl<'a> JsonView<'a> {
    fn new(catalogue: &'a Catalogue, registry: &'a Registry, explain: bool) -> Self {
        let mut auto: HashMap<&ResourceId, Vec<String>> = HashMap::new();
        for (from, to) in &catalogue.autorequires {
            auto.entry(from).or_default().push(to.to_string());
        }
        JsonView {
            catalogue,
            registry,
            explain,
            auto,
            extra: None,
            key: None,
        }
    }

    fn host(&self) -> Value {
        let host = &self.catalogue.host;
        json!({"name": host.name, "labels": host.labels})
    }

    fn resource(&self, r: &Resource) -> Value {
        let auto = self.auto.get(&r.id).cloned().unwrap_or_default();
        let explicit: Vec<String> = r
            .requires
            .iter()
            .map(ToString::to_string)
            .filter(|s| !auto.contains(s))
            .collect();
        // A secret's plain hash would let a guess be confirmed: keyed, or none.
        let sha256 = r.content.as_ref().map(|c| c.sha256.clone());
        let (sha256, declaration_hash) = if r.sensitive {
            (None, self.key.map(|k| k.digest(&r.declaration_hash)))
        } else {
            (sha256, Some(r.declaration_hash.clone()))
        };
        let desired = masked(self.registry, r);
        let mut v = json!({
            "id": r.id.to_string(),
            "type": r.id.kind,
            "name": r.id.name,
            "desired": desired,
            "content_sha256": sha256,
            "requires": explicit,
            "autorequires": auto,
            "class": r.class,
            "sensitive": r.sensitive,
            "validate": r.validate,
            "origin": r.origin.to_string(),
            "declaration_hash": declaration_hash,
        });
        if r.sensitive
            && let Some(obj) = v.as_object_mut()
        {
            let digest = r
                .content
                .as_ref()
                .and_then(|c| self.key.map(|k| k.digest(&c.sha256)));
            obj.insert("content_digest".to_owned(), json!(digest));
        }
        if let Some(f) = self.extra
            && let Some(obj) = v.as_object_mut()
        {
            obj.extend(f(r));
        }
        if self.explain
            && let Some(obj) = v.as_object_mut()
        {
            // A field with an origin that the resource does not have was
            // removed there (set to null by a later layer); the envelope's
            // fields (`requires`, `class`, ...) are never in `desired`.
            let removed = |field: &str| match field {
                "content" => r.content.is_none(),
                "requires" | "class" | "sensitive" | "validate" => false,
                _ => r.desired.get(field).is_none(),
            };
            let fields: serde_json::Map<String, Value> = r
                .field_origins
                .iter()
                .map(|(field, o)| {
                    let mut at = json!({"layer": o.layer, "origin": o.to_string()});
                    if removed(field)
                        && let Some(at) = at.as_object_mut()
                    {
                        at.insert("removed".to_owned(), Value::Bool(true));
                    }
                    (field.clone(), at)
                })
                .collect();
            obj.insert("fields".to_owned(), Value::Object(fields));
        }
        v
    }
}

impl Serialize for JsonView<'_> {
    // The keys in the order `to_json`'s object prints them (sorted).
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("format_version", FORMAT_VERSION)?;
        map.serialize_entry("host", &self.host())?;
        map.serialize_entry("resources", &Resources(self))?;
        map.end()
    }
}

/// The `resources` array of a [`JsonView`].
struct Resources<'v, 'a>(&'v JsonView<'a>);

impl Serialize for Resources<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq as _;
        let resources = &self.0.catalogue.resources;
        let mut seq = serializer.serialize_seq(Some(resources.len()))?;
        for r in resources {
            seq.serialize_element(&self.0.resource(r))?;
        }
        seq.end()
    }
}

/// [`declaration_hash`] of `r`: every input taken from the resource but
/// the content checksum and the requirements, which the callers choose
/// (the snapshot's reader has the checksum from the source file, and the
/// hash covers the explicit requirements only). Every caller goes through
/// here, so a new input of the hash is added in one place.
pub(crate) fn declaration_hash_of(
    r: &Resource,
    content_sha256: Option<&str>,
    requires: &[ResourceId],
) -> String {
    declaration_hash(
        &r.id,
        &r.desired,
        content_sha256,
        r.validate.as_deref(),
        r.sensitive,
        r.sensitive_by_field_only,
        requires,
    )
}

/// SHA-256 over the canonical JSON (sorted keys, no spaces) of everything
/// declared about a resource: kind, name, desired, content checksum,
/// validate, sensitive, and its explicit requirements; and, only when it
/// is true, `sensitive_by_field_only` ([`Resource::sensitive_by_field_only`]).
///
/// `sensitive` is the resource's (true also when a field its kind calls
/// sensitive is declared), so it alone did not tell a User declaring a
/// password hash from the same User also saying `sensitive: true`, which
/// hides every field instead of the hash alone: that change read as no
/// change of the declaration. The key is written only when true so that
/// every other resource's hash is what it was; a resource sensitive
/// through a field only (a User declaring a password hash without
/// `sensitive: true`) got a new hash when the key was added, once:
/// its verified record and an acceptance of its drift, made before, no
/// longer match, and its next change is labelled intentional.
pub(crate) fn declaration_hash(
    id: &ResourceId,
    desired: &Desired,
    content_sha256: Option<&str>,
    validate: Option<&str>,
    sensitive: bool,
    sensitive_by_field_only: bool,
    requires: &[ResourceId],
) -> String {
    // Written field by field in sorted key order (the same bytes as the
    // canonical form of the equivalent object) so the desired fields are not
    // copied for every resource, and each string is escaped straight into
    // the text.
    let mut text = Vec::with_capacity(256);
    let optional = |s: Option<&str>, out: &mut Vec<u8>| match s {
        Some(s) => json_string(s, out),
        None => out.extend_from_slice(b"null"),
    };
    text.extend_from_slice(b"{\"content_sha256\":");
    optional(content_sha256, &mut text);
    text.extend_from_slice(b",\"desired\":");
    // A `Desired` holds its fields in sorted order already.
    canonical_object(desired.iter(), &mut text);
    text.extend_from_slice(b",\"kind\":");
    json_string(&id.kind, &mut text);
    text.extend_from_slice(b",\"name\":");
    json_string(&id.name, &mut text);
    text.extend_from_slice(b",\"requires\":[");
    for (i, r) in requires.iter().enumerate() {
        if i > 0 {
            text.push(b',');
        }
        json_string(&r.to_string(), &mut text);
    }
    text.extend_from_slice(b"],\"sensitive\":");
    text.extend_from_slice(if sensitive { b"true" } else { b"false" });
    if sensitive_by_field_only {
        text.extend_from_slice(b",\"sensitive_by_field_only\":true");
    }
    text.extend_from_slice(b",\"validate\":");
    optional(validate, &mut text);
    text.push(b'}');
    sha256_hex(&text)
}

/// `canonical` as a new string: the form to hash a JSON value by (a saved
/// plan's observation fingerprints use it too).
pub fn canonical_json(v: &Value) -> String {
    let mut out = Vec::new();
    canonical(v, &mut out);
    // serde_json writes UTF-8 only.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// `s` as a JSON string (quoted and escaped as serde_json does).
fn json_string(s: &str, out: &mut Vec<u8>) {
    // Writing a string into memory cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// `{"key":value,...}` for fields already in key order, each value canonical.
fn canonical_object<'v>(fields: impl Iterator<Item = (&'v str, &'v Value)>, out: &mut Vec<u8>) {
    out.push(b'{');
    for (i, (k, v)) in fields.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        json_string(k, out);
        out.push(b':');
        canonical(v, out);
    }
    out.push(b'}');
}

/// Canonical JSON: object keys sorted whatever map type serde_json was built
/// with, so the hash cannot change with a dependency's feature flags.
fn canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(map) => {
            let mut fields: Vec<(&str, &Value)> =
                map.iter().map(|(k, v)| (k.as_str(), v)).collect();
            fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
            canonical_object(fields.into_iter(), out);
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(item, out);
            }
            out.push(b']');
        }
        // A scalar as serde_json writes it (into memory: cannot fail).
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

/// The fields of `desired` whose values are sensitive by their kind's
/// nature (a User's `password_hash`), as far as they are declared.
pub fn declared_sensitive_fields<'a>(
    registry: &'a Registry,
    kind: &str,
    desired: &'a Desired,
) -> impl Iterator<Item = &'static str> + 'a {
    registry
        .lookup(kind)
        .map_or(&[][..], |p| p.sensitive_fields())
        .iter()
        .copied()
        .filter(move |f| desired.get(f).is_some())
}

/// The declared fields of `r` whose values are secret: those its kind
/// calls sensitive (a User's `password_hash`), or, when the resource says
/// `sensitive: true` itself, every one but the path it manages (which plan
/// and check show as its target).
pub fn secret_fields<'a>(registry: &Registry, r: &'a Resource) -> Vec<&'a str> {
    if r.sensitive && !r.sensitive_by_field_only {
        let field = |k: &str| r.desired.get(k);
        let path = registry
            .lookup(&r.id.kind)
            .and_then(|p| p.paths())
            .and_then(|p| p.claim(&field))
            .map(|c| c.field);
        r.desired
            .iter()
            .map(|(name, _)| name)
            .filter(|name| Some(*name) != path)
            .collect()
    } else {
        declared_sensitive_fields(registry, &r.id.kind, &r.desired).collect()
    }
}

/// A resource's declared fields as shown: the values of its
/// [`secret_fields`] replaced by `(sensitive)`.
fn masked<'a>(registry: &Registry, r: &'a Resource) -> std::borrow::Cow<'a, Desired> {
    let fields = secret_fields(registry, r);
    if fields.is_empty() {
        return std::borrow::Cow::Borrowed(&r.desired);
    }
    let mut shown = r.desired.clone();
    for f in fields {
        if let Some(v) = shown.get_mut(f) {
            *v = Value::String("(sensitive)".to_owned());
        }
    }
    std::borrow::Cow::Owned(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalogue(edges: &[(&str, &[&str])]) -> Catalogue {
        let resources = edges
            .iter()
            .map(|(name, requires)| Resource {
                requires: requires
                    .iter()
                    .map(|r| ResourceId::new("File", *r))
                    .collect(),
                ..Resource::new(ResourceId::new("File", *name), json!({}))
            })
            .collect();
        Catalogue {
            host: HostIdentity::default(),
            resources,
            autorequires: Vec::new(),
            boundary: Default::default(),
        }
    }

    #[test]
    fn a_target_brings_everything_it_requires_and_nothing_else() {
        // d -> c -> a, c -> b; e is independent; f requires d (a dependent).
        let c = catalogue(&[
            ("a", &[]),
            ("b", &[]),
            ("c", &["a", "b"]),
            ("d", &["c"]),
            ("e", &[]),
            ("f", &["d"]),
        ]);
        let names = |ids: BTreeSet<ResourceId>| -> Vec<String> {
            ids.into_iter().map(|i| i.name).collect()
        };
        let got = c
            .with_requirements(&[ResourceId::new("File", "d")])
            .unwrap();
        assert_eq!(names(got), ["a", "b", "c", "d"]);
        let got = c
            .with_requirements(&[ResourceId::new("File", "e"), ResourceId::new("File", "b")])
            .unwrap();
        assert_eq!(names(got), ["b", "e"]);
    }

    #[test]
    fn unknown_targets_are_named_all_at_once() {
        let c = catalogue(&[("a", &[])]);
        let err = c
            .with_requirements(&[
                ResourceId::new("File", "x"),
                ResourceId::new("File", "a"),
                ResourceId::new("Directory", "a"),
            ])
            .unwrap_err();
        assert_eq!(
            err,
            [
                ResourceId::new("File", "x"),
                ResourceId::new("Directory", "a")
            ]
        );
    }

    #[test]
    fn canonical_json_sorts_nested_keys() {
        let s = canonical_json(&json!({"b": {"y": 1.5, "x": [true, null]}, "a": "t\"q\u{1}é"}));
        assert_eq!(s, r#"{"a":"t\"q\u0001é","b":{"x":[true,null],"y":1.5}}"#);
    }

    #[test]
    fn the_hash_is_over_the_canonical_json_of_the_declaration() {
        let id = ResourceId::new("File", "a");
        // Nested keys out of order and a key that needs escaping.
        let desired = json!({"path": "/a", "mode": "0600", "e\"v": {"z": 1, "a": [2]}});
        let requires = [ResourceId::new("Directory", "d")];
        let whole = json!({
            "kind": "File", "name": "a", "desired": desired, "content_sha256": "00",
            "validate": "sshd", "sensitive": true, "requires": ["Directory[d]"],
        });
        let text = canonical_json(&whole);
        assert_eq!(
            declaration_hash(
                &id,
                &Desired::from(desired.clone()),
                Some("00"),
                Some("sshd"),
                true,
                false,
                &requires
            ),
            sha256_hex(text.as_bytes())
        );
        // Sensitive through a field only: the key is there, and only then
        // (every other resource's hash is what it was before the key).
        let mut by_field = whole;
        by_field["sensitive_by_field_only"] = json!(true);
        assert_eq!(
            declaration_hash(
                &id,
                &Desired::from(desired),
                Some("00"),
                Some("sshd"),
                true,
                true,
                &requires
            ),
            sha256_hex(canonical_json(&by_field).as_bytes())
        );
    }

    #[test]
    fn the_hash_changes_with_every_declared_part() {
        let id = ResourceId::new("File", "a");
        let d = Desired::from(json!({"path": "/a"}));
        let base = declaration_hash(&id, &d, Some("00"), None, false, false, &[]);
        assert_eq!(
            base,
            declaration_hash(&id, &d, Some("00"), None, false, false, &[])
        );
        assert_ne!(
            base,
            declaration_hash(
                &id,
                &Desired::from(json!({"path": "/b"})),
                Some("00"),
                None,
                false,
                false,
                &[]
            )
        );
        assert_ne!(
            base,
            declaration_hash(&id, &d, Some("01"), None, false, false, &[])
        );
        assert_ne!(
            base,
            declaration_hash(&id, &d, Some("00"), Some("sshd"), false, false, &[])
        );
        let sensitive = declaration_hash(&id, &d, Some("00"), None, true, false, &[]);
        assert_ne!(base, sensitive);
        assert_ne!(
            sensitive,
            declaration_hash(&id, &d, Some("00"), None, true, true, &[])
        );
        assert_ne!(
            base,
            declaration_hash(
                &id,
                &d,
                Some("00"),
                None,
                false,
                false,
                &[ResourceId::new("File", "b")]
            )
        );
    }
}
