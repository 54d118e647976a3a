//! The JSON form of a pass (`--output json`). Stable field names; content only
//! as checksums and, for non-sensitive text, a unified diff.

use datum_core::SENSITIVE_PLACEHOLDER;
use datum_engine::{Mode, PassSummary};
use serde_json::{Value, json};

use super::diff::content_diff;

/// The `format_version` of every JSON document `datum` prints.
pub const FORMAT_VERSION: &str = "1";

/// A JSON document as `datum` prints it (the conventions of every command,
/// in one place): an object carries `format_version` "1" (set here, so a
/// command cannot forget it; a list becomes `{"format_version", key: list}`),
/// and every time is RFC 3339 UTC: an integer under a key ending in `_at`, or
/// named `first_seen`/`last_seen`, is Unix seconds and is rewritten as one.
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

/// Writes [`document`] of `value`, pretty-printed, with a final newline.
pub fn print(key: &str, value: Value) -> std::io::Result<()> {
    use std::io::Write as _;
    let text = serde_json::to_string_pretty(&document(key, value))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()
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
                        *v = Value::String(datum_report::time::rfc3339(secs));
                    }
                    _ => rfc3339_times(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rfc3339_times),
        _ => {}
    }
}

/// A pass (plan or apply) as JSON. A sensitive resource's content shows no
/// SHA-256 (a guessed secret could be confirmed against it): the host's
/// keyed digests (`before_digest`, `after_digest`) when `key` is given, else
/// nothing.
pub fn pass(
    host: &str,
    mode: Mode,
    summary: &PassSummary,
    key: Option<&datum_core::DigestKey>,
) -> Value {
    let resources: Vec<Value> = summary
        .resources
        .iter()
        .map(|r| {
            let content = r.diff.content.as_ref().map(|c| {
                if r.sensitive {
                    let keyed = |sha: &str| key.map(|k| k.digest(sha));
                    return json!({
                        "before_sha256": null,
                        "after_sha256": null,
                        "before_digest": c.before_sha256.as_deref().and_then(keyed),
                        "after_digest": keyed(&c.after_sha256),
                        "diff": SENSITIVE_PLACEHOLDER,
                    });
                }
                json!({
                    "before_sha256": c.before_sha256,
                    "after_sha256": c.after_sha256,
                    "diff": content_diff(c, r.target.as_deref().unwrap_or(&r.id.to_string()), false),
                })
            });
            json!({
                "id": r.id.to_string(),
                "type": r.id.kind,
                "name": r.id.name,
                "origin": r.origin.to_string(),
                "action": r.action,
                "outcome": r.outcome,
                "changes": r.diff.changes,
                "content": content,
                "sensitive": r.sensitive,
                "detail": r.detail,
                "duration_ms": r.duration_ms,
            })
        })
        .collect();
    json!({
        "format_version": FORMAT_VERSION,
        "command": if mode == Mode::Apply { "apply" } else { "plan" },
        "host": host,
        "resources": resources,
        "counts": summary.counts(),
        "duration_ms": summary.duration_ms,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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
}
