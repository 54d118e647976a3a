//! The manifest reference page (`docs/manifests.md`), generated from the same
//! declaration types as the JSON Schema ([`crate::schema`]): the envelope,
//! every registered kind's fields (value, required, what it means) and the
//! shared value types. A new kind, or a new field of one, appears here by
//! being declared; a test fails while the shipped page differs.
//!
//! Regenerate it with
//! `cargo run -p datum-catalog --example manifest-reference > docs/manifests.md`.

use std::fmt::Write as _;

use schemars::JsonSchema;
use serde_json::{Map, Value};

/// Where the repository ships the page, from its top folder.
pub const REFERENCE_FILE: &str = "docs/manifests.md";

const REGENERATE: &str =
    "cargo run -p datum-catalog --example manifest-reference > docs/manifests.md";

/// The page, as the shipped file holds it.
pub fn reference_markdown() -> String {
    let mut generator = datum_providers::common::schema::generator();
    let envelope = datum_manifest::document::Envelope::json_schema(&mut generator).to_value();
    let kinds: Vec<(&'static str, Value)> = datum_providers::registry()
        .iter()
        .map(|p| (p.kind(), p.declaration_schema(&mut generator).to_value()))
        .collect();
    let defs = generator.take_definitions(true);

    let mut out = String::new();
    out.push_str("# Manifest reference\n\n");
    let _ = writeln!(
        out,
        "<!-- Generated from the declaration types; do not edit. Regenerate with `{REGENERATE}`. -->\n"
    );
    out.push_str(
        "Every YAML document of a layer declares one resource: the envelope below, with the\n\
         type's own fields under `desired:`. Fields not declared are not managed. The same\n\
         types give the JSON Schema editors use (`schema/datum-manifest.schema.json`);\n\
         `datum lint` stays the authority (it also knows sources, templates, validators and\n\
         references).\n\n",
    );
    out.push_str("## The envelope\n\n");
    fields_table(
        &mut out,
        &envelope,
        &defs,
        &["datum", "type", "name", "desired"],
    );
    out.push_str("\n## Resource types\n\n");
    let list: Vec<String> = kinds
        .iter()
        .map(|(k, _)| format!("[`{k}`](#{})", k.to_lowercase()))
        .collect();
    let _ = writeln!(out, "{}\n", list.join(", "));
    for (kind, schema) in &kinds {
        let _ = writeln!(out, "### {kind}\n");
        if let Some(text) = schema.get("description").and_then(Value::as_str) {
            let _ = writeln!(out, "{}\n", one_line(text));
        }
        fields_table(&mut out, schema, &defs, &[]);
        out.push('\n');
    }
    out.push_str("## Values\n\n");
    for (name, def) in &defs {
        let _ = writeln!(out, "### {name}\n");
        let mut lines = Vec::new();
        if let Some(text) = def.get("description").and_then(Value::as_str) {
            lines.push(one_line(text));
        }
        lines.push(format!("Value: {}.", value_text(def)));
        if let Some(pattern) = def.get("pattern").and_then(Value::as_str) {
            lines.push(format!("Pattern: `{pattern}`."));
        }
        let _ = writeln!(out, "{}\n", lines.join(" "));
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `| field | value | required | description |` for a schema's properties.
fn fields_table(out: &mut String, schema: &Value, defs: &Map<String, Value>, first: &[&str]) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        out.push_str("No fields.\n");
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&String> = properties.keys().collect();
    // The schema's order is alphabetical; a few fields read better first.
    names.sort_by_key(|n| {
        (
            !first.contains(&n.as_str()),
            first.iter().position(|f| f == n),
        )
    });
    out.push_str("| field | value | required | description |\n| --- | --- | --- | --- |\n");
    for name in names {
        let property = &properties[name.as_str()];
        let description = property
            .get("description")
            .or_else(|| referenced(property, defs).and_then(|d| d.get("description")))
            .and_then(Value::as_str)
            .map(one_line)
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| `{name}` | {} | {} | {} |",
            value_text(property),
            if required.contains(&name.as_str()) {
                "yes"
            } else {
                ""
            },
            description.replace('|', "\\|")
        );
    }
}

fn referenced<'a>(schema: &Value, defs: &'a Map<String, Value>) -> Option<&'a Value> {
    let name = schema.get("$ref")?.as_str()?.strip_prefix("#/$defs/")?;
    defs.get(name)
}

/// A short text for what a schema accepts: `[HostPath](#hostpath)`,
/// `list of Reference`, `` `running` or `stopped` ``, `integer (at most 10)`.
fn value_text(schema: &Value) -> String {
    if let Some(name) = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
    {
        return format!("[{name}](#{})", name.to_lowercase());
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let words: Vec<String> = values.iter().map(|v| format!("`{}`", plain(v))).collect();
        return words.join(" or ");
    }
    if let Some(value) = schema.get("const") {
        return format!("`{}`", plain(value));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(items) = schema.get(key).and_then(Value::as_array) {
            let texts: Vec<String> = items
                .iter()
                .filter(|i| i.get("type").and_then(Value::as_str) != Some("null"))
                .map(value_text)
                .collect();
            if !texts.is_empty() {
                return texts.join(" or ");
            }
        }
    }
    let range = |schema: &Value| match (
        schema.get("minimum").and_then(Value::as_u64),
        schema.get("maximum").and_then(Value::as_u64),
    ) {
        (Some(lo), Some(hi)) => format!(" ({lo} to {hi})"),
        (None, Some(hi)) => format!(" (at most {hi})"),
        _ => String::new(),
    };
    match schema.get("type") {
        Some(Value::String(t)) if t == "array" => {
            let item = schema
                .get("items")
                .map(value_text)
                .unwrap_or_else(|| "values".to_owned());
            let unique = if schema.get("uniqueItems") == Some(&Value::Bool(true)) {
                ", each once"
            } else {
                ""
            };
            format!("list of {item}{unique}")
        }
        Some(Value::String(t)) if t == "boolean" => "`true` or `false`".to_owned(),
        Some(Value::String(t)) if t == "integer" => format!("integer{}", range(schema)),
        Some(Value::String(t)) if t == "object" => "mapping".to_owned(),
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter(|t| t.as_str() != Some("null"))
            .map(plain)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_owned(),
    }
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_and_its_fields_are_on_the_page() {
        let page = reference_markdown();
        for provider in datum_providers::registry().iter() {
            let heading = format!("\n### {}\n", provider.kind());
            assert!(page.contains(&heading), "{heading} missing");
        }
        // A field, its value type and whether it is required.
        assert!(
            page.contains("| `path` | [HostPath](#hostpath) | yes |"),
            "{page}"
        );
        assert!(page.contains("| `password_hash` | [PasswordHash](#passwordhash) |"));
        assert!(page.contains("\n### HostPath\n"));
        assert!(page.ends_with('\n') && !page.ends_with("\n\n"));
    }
}
