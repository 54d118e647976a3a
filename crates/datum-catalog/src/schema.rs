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

/// The schema of one YAML document of a layer (a resource manifest).
pub fn manifest_schema() -> Value {
    let mut generator = datum_providers::common::schema::generator();
    let mut root = datum_manifest::document::Envelope::json_schema(&mut generator).to_value();
    let kinds: Vec<&str> = datum_providers::registry()
        .iter()
        .map(|p| p.kind())
        .collect();
    root["properties"]["type"] = json!({
        "enum": kinds,
        "description": "The resource type.",
    });
    let mut per_kind = Vec::new();
    for provider in datum_providers::registry() {
        let mut desired = provider.declaration_schema(&mut generator).to_value();
        // `desired:` left empty is an empty mapping, which some kinds take
        // (a Package named by its resource name).
        if provider.check(&json!({})).is_ok() {
            desired = json!({"anyOf": [desired, {"type": "null"}]});
        }
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
        // The shared value types are defined once and referenced.
        assert!(schema["$defs"]["Mode"].is_object(), "{schema:#}");
        assert!(schema["$defs"]["Reference"].is_object(), "{schema:#}");
    }
}
