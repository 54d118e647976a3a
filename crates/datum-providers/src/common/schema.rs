//! The JSON Schema of the values declarations share (paths, owners, modes,
//! `ensure`, references, durations), for the declaration types each kind
//! derives its schema on (`FileDeclaration`, `ServiceDeclaration`, ...).
//!
//! Editors use the schema the repository ships
//! (`schema/datum-manifest.schema.json`) to complete and check manifests
//! while they are written; Datum's own checks (`Provider::check`) stay the
//! authority and say more (a path's `..`, a template's syntax). Each kind's
//! tests hold its declaration type to its field table, so the two cannot
//! drift apart. The schema describes what is written in a manifest, not the
//! typed form the later phases read.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// Declares a value type by its schema.
macro_rules! value_schema {
    ($(#[$doc:meta])* $name:ident, $schema:tt) => {
        $(#[$doc])*
        pub struct $name;

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!($schema)
            }
        }
    };
}

value_schema!(
    /// An absolute host path below `/` (`FieldKind::Path`).
    HostPath,
    {
        "type": "string",
        // One or more components, none empty, `.` or `..`, no NUL.
        "pattern": "^(/([^/.\\x00][^/\\x00]*|\\.[^/.\\x00][^/\\x00]*|\\.\\.[^/\\x00]+))+$",
        "description": "An absolute, normalised path on the managed host, below / (no empty, `.` or `..` components).",
    }
);

value_schema!(
    /// A string that must not be empty (`FieldKind::NonEmptyText`).
    NonEmptyText,
    { "type": "string", "minLength": 1 }
);

value_schema!(
    /// A user or group, by name or number (`FieldKind::Account`).
    Account,
    {
        "description": "A user or group: a name (no spaces, colons or control characters) or a numeric id.",
        "oneOf": [
            { "type": "string", "minLength": 1, "pattern": "^[^:\\s\\x00-\\x1f\\x7f]+$" },
            { "type": "integer", "minimum": 0, "maximum": 4294967295u64 }
        ]
    }
);

value_schema!(
    /// A quoted octal mode (`FieldKind::Mode`): 3 or 4 significant digits.
    Mode,
    {
        "type": "string",
        "pattern": "^0?[0-7]{3,4}$",
        "description": "A quoted octal mode such as \"0644\" or \"4755\" (unquoted, YAML reads a number and the octal meaning is lost).",
    }
);

value_schema!(
    /// `present` or `absent` (`FieldKind::Ensure`).
    Ensure,
    {
        "enum": ["present", "absent"],
        "description": "Whether the thing should exist (default present).",
    }
);

value_schema!(
    /// A duration as humantime reads it (`3s`, `500ms`, `1m30s`).
    Duration,
    {
        "type": "string",
        "minLength": 1,
        "description": "A duration such as \"3s\", \"500ms\" or \"1m30s\".",
    }
);

value_schema!(
    /// `validate:`: the name of a validator the program ships or the
    /// administrator installed (never a command).
    ValidatorName,
    {
        "type": "string",
        "minLength": 1,
        "description": "The name of a validator Datum runs on the staged content before it goes live (`datum validators` lists them); never a command line.",
        "examples": ["sshd", "nginx", "sudoers"],
    }
);

/// The generator every declaration schema is made with: JSON Schema
/// 2020-12. (An optional field may be left out but is never `null`: each
/// declaration type says so with `datum_core::schema::optional_never_null`.)
pub fn generator() -> SchemaGenerator {
    schemars::generate::SchemaSettings::draft2020_12().into_generator()
}

/// The property names and required properties of a declaration's schema,
/// for the tests that hold a declaration type to its kind's field table.
#[cfg(test)]
pub(crate) fn fields_of(schema: &Schema) -> (Vec<String>, Vec<String>) {
    let value = schema.as_value();
    let mut names: Vec<String> = value["properties"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    names.sort();
    let mut required: Vec<String> = value["required"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    required.sort();
    (names, required)
}

/// Checks a table of declarations two ways, Datum's `check` and the
/// schema, and fails on every one where they disagree.
#[cfg(test)]
pub(crate) fn agrees_with_check(
    provider: &dyn crate::Provider,
    cases: &[serde_json::Value],
) -> Result<(), String> {
    let mut generator = generator();
    let mut schema = provider.declaration_schema(&mut generator).to_value();
    schema["$defs"] = serde_json::Value::Object(generator.take_definitions(true));
    let validator = jsonschema::validator_for(&schema)
        .map_err(|e| format!("{}: the schema does not compile: {e}", provider.kind()))?;
    let mut disagreements = Vec::new();
    for case in cases {
        let by_check = provider.check(case).is_ok();
        let by_schema = validator.is_valid(case);
        if by_check != by_schema {
            disagreements.push(format!(
                "{case}: check says {}, the schema says {}",
                if by_check { "valid" } else { "invalid" },
                if by_schema { "valid" } else { "invalid" }
            ));
        }
    }
    if disagreements.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            provider.kind(),
            disagreements.join("\n  ")
        ))
    }
}
