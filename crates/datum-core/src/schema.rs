//! Helpers for the JSON Schemas of manifests (editor support), shared by the
//! crates whose declaration types derive them.

use schemars::Schema;
use serde_json::Value;

/// A schemars transform for declaration types: an optional field may be left
/// out, but is never `null` (Datum refuses `mode: null` or `class: null`),
/// so the `null` schemars allows for an `Option` field is taken out again.
pub fn optional_never_null(schema: &mut Schema) {
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for property in properties.values_mut() {
        let Some(object) = property.as_object_mut() else {
            continue;
        };
        if let Some(Value::Array(types)) = object.get_mut("type") {
            types.retain(|t| t != "null");
            if types.len() == 1 {
                let only = types.remove(0);
                object.insert("type".to_owned(), only);
            }
        }
        let single = match object.get_mut("anyOf") {
            Some(Value::Array(options)) => {
                options.retain(|o| o.get("type").and_then(Value::as_str) != Some("null"));
                (options.len() == 1).then(|| options.remove(0))
            }
            _ => None,
        };
        if let Some(Value::Object(inner)) = single {
            object.remove("anyOf");
            for (k, v) in inner {
                object.entry(k).or_insert(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nulls_go_and_everything_else_stays() {
        let mut schema: Schema = serde_json::from_value(json!({
            "type": "object",
            "properties": {
                "a": {"type": ["string", "null"], "minLength": 1},
                "b": {"anyOf": [{"$ref": "#/$defs/Mode"}, {"type": "null"}], "description": "b"},
                "c": {"type": "boolean"},
                "d": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            }
        }))
        .unwrap();
        optional_never_null(&mut schema);
        assert_eq!(
            schema.as_value()["properties"],
            json!({
                "a": {"type": "string", "minLength": 1},
                "b": {"$ref": "#/$defs/Mode", "description": "b"},
                "c": {"type": "boolean"},
                "d": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            })
        );
    }
}
