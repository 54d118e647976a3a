//! The JSON Schema of a resource manifest, for editors: the envelope
//! (`datum_manifest::document::Envelope`) with, per registered resource type,
//! its `desired` fields (each provider's declaration type), generated from
//! those types and shipped as `schema/datum-manifest.schema.json`.
//!
//! Example manifests point at it with a modeline the YAML language server
//! reads:
//!
//! ```yaml
//! # yaml-language-server: $schema=../../schema/datum-manifest.schema.json
//! ```
//!
//! Regenerate the shipped file with
//! `cargo run -p datum-catalog --example manifest-schema > schema/datum-manifest.schema.json`;
//! a test fails while the shipped file differs from what the types say.
//! The schema helps while writing; `datum lint` stays the authority (it
//! knows the repository: sources, templates, validators, references).

use schemars::JsonSchema;
use serde_json::{Map, Value, json};

/// Where the repository ships the schema, from its top folder.
pub const SCHEMA_FILE: &str = "schema/datum-manifest.schema.json";

/// The schema of one YAML document of a layer (a resource manifest), for
/// the resource types this build ships.
pub fn manifest_schema() -> Value {
    manifest_schema_of(datum_providers::registry())
}

/// The schema of a resource manifest for the types `registry` knows.
pub fn manifest_schema_of(registry: &datum_providers::Registry) -> Value {
    let mut generator = datum_providers::common::schema::generator();
    let mut root = datum_manifest::document::Envelope::json_schema(&mut generator).to_value();
    let kinds: Vec<&str> = registry.kinds();
    root["properties"]["type"] = json!({
        "enum": kinds,
        "description": "The resource type.",
    });
    let mut per_kind = Vec::new();
    for provider in registry.iter() {
        let declaration = provider.declaration_schema(&mut generator).to_value();
        let desired = as_layer_document(declaration);
        per_kind.push(json!({
            "if": {
                "properties": {"type": {"const": provider.kind()}},
                "required": ["type"],
            },
            "then": {"properties": {"desired": desired}},
        }));
    }
    let mut top = Map::new();
    top.insert(
        "$schema".to_owned(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    if let Value::Object(envelope) = root {
        top.extend(envelope);
    }
    top.insert("allOf".to_owned(), Value::Array(per_kind));
    top.insert(
        "$defs".to_owned(),
        Value::Object(generator.take_definitions(true)),
    );
    Value::Object(top)
}

/// A kind's declaration schema (a whole declaration, as the merged resource
/// must be) as one layer's document may write it: a document may override
/// only some fields of a resource another layer declares, so no field is
/// required there (missing fields are judged on the merged resource, by
/// lint), and a field set to null removes what an earlier layer set. What
/// one document writes must still be right: each value's type, unknown
/// fields, two fields that exclude each other.
fn as_layer_document(mut declaration: Value) -> Value {
    let only_requires = |v: &Value| {
        v.as_object()
            .is_some_and(|o| o.keys().all(|k| k == "required"))
    };
    if let Some(object) = declaration.as_object_mut() {
        object.remove("required");
        // "at least one of" (Service's state or enabled).
        for key in ["anyOf", "oneOf"] {
            if object
                .get(key)
                .and_then(Value::as_array)
                .is_some_and(|items| items.iter().all(only_requires))
            {
                object.remove(key);
            }
        }
        // "needs X unless ..." (a Symlink's target).
        if object.get("then").is_some_and(only_requires) {
            object.remove("if");
            object.remove("then");
        }
        if let Some(Value::Object(properties)) = object.get_mut("properties") {
            for property in properties.values_mut() {
                let declared = property.take();
                *property = json!({"anyOf": [declared, {"type": "null"}]});
            }
        }
    }
    json!({"anyOf": [declaration, {"type": "null"}]})
}

/// [`manifest_schema`] as the shipped file holds it: pretty, one newline.
pub fn manifest_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&manifest_schema()).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_kind_has_its_desired_schema() {
        let schema = manifest_schema();
        let kinds = schema["properties"]["type"]["enum"].as_array().unwrap();
        assert_eq!(kinds.len(), datum_providers::registry().len());
        let branches = schema["allOf"].as_array().unwrap();
        assert_eq!(branches.len(), kinds.len());
        for (kind, branch) in kinds.iter().zip(branches) {
            assert_eq!(&branch["if"]["properties"]["type"]["const"], kind);
        }
        // A layer may override one field of a File, or remove one.
        let file = &branches[0]["then"]["properties"]["desired"]["anyOf"][0];
        assert!(file.get("required").is_none(), "{file:#}");
        assert_eq!(file["additionalProperties"], false);
        // The shared value types are defined once and referenced.
        assert!(schema["$defs"]["Mode"].is_object(), "{schema:#}");
        assert!(schema["$defs"]["Reference"].is_object(), "{schema:#}");
    }
}
