//! The conventions of every JSON document Datum's tools print: `format_version` in every
//! object, times as RFC 3339 UTC, pretty-printed with a final newline.
//!
//! Owns: [`FORMAT_VERSION`] of `datum`'s documents, [`document`] (the conventions applied
//! to a value) and [`pretty`] (the bytes). Must not: know any report's fields.

use serde::Serialize;
use serde_json::{Value, json};

/// The `format_version` of every JSON document `datum` prints (driftwatch versions its
/// own schema beside its `schema` name).
pub const FORMAT_VERSION: &str = "1";

/// A JSON document as `datum` prints it: an object carries `format_version` "1" (set
/// here, so a command cannot forget it; a list becomes `{"format_version", key: list}`),
/// and every time is RFC 3339 UTC: an integer under a key ending in `_at`, or named
/// `first_seen`/`last_seen`, is Unix seconds and is rewritten as one.
pub fn document(key: &str, value: Value) -> Value {
    let mut value = match value {
        Value::Object(_) => value,
        other => json!({ key: other }),
    };
    rfc3339_times(&mut value);
    if let Value::Object(map) = &mut value {
        map.insert("format_version".to_owned(), json!(FORMAT_VERSION));
    }
    value
}

/// `value` pretty-printed with a final newline; `{}` in the one case serde refuses (a map
/// whose keys are not strings, which no report has).
pub fn pretty<T: Serialize + ?Sized>(value: &T) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_else(|_| "{}".to_owned());
    text.push('\n');
    text
}

fn is_time_key(key: &str) -> bool {
    key.ends_with("_at") || key == "first_seen" || key == "last_seen"
}

fn rfc3339_times(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                match v.as_i64() {
                    Some(secs) if is_time_key(k) => {
                        *v = Value::String(crate::time::rfc3339(secs));
                    }
                    _ => rfc3339_times(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rfc3339_times),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_has_format_version_and_rfc3339_times() {
        let doc = document(
            "backups",
            json!([{"id": 1, "saved_at": 1_700_000_000, "size": 5}]),
        );
        assert_eq!(doc["format_version"], "1");
        assert_eq!(doc["backups"][0]["saved_at"], "2023-11-14T22:13:20Z");
        assert_eq!(doc["backups"][0]["size"], 5);
        let doc = document(
            "",
            json!({"format_version": 1, "oldest_queued_at": null, "last_delivered_at": 0, "first_seen": "2023-11-14T22:13:20Z", "nested": {"deployed_at": 60}}),
        );
        assert_eq!(doc["format_version"], "1");
        assert_eq!(doc["oldest_queued_at"], Value::Null);
        assert_eq!(doc["last_delivered_at"], "1970-01-01T00:00:00Z");
        assert_eq!(doc["first_seen"], "2023-11-14T22:13:20Z");
        assert_eq!(doc["nested"]["deployed_at"], "1970-01-01T00:01:00Z");
    }

    #[test]
    fn pretty_ends_with_a_newline() {
        assert_eq!(pretty(&json!({"a": 1})), "{\n  \"a\": 1\n}\n");
    }
}
