//! The JSON form of a pass (`--output json`). Stable field names; content only
//! as checksums and, for non-sensitive text, a unified diff.

use datum_core::SENSITIVE_PLACEHOLDER;
use datum_engine::{Mode, PassSummary};
use serde_json::{Value, json};

use super::diff::content_diff;

pub fn pass(host: &str, mode: Mode, summary: &PassSummary) -> Value {
    let resources: Vec<Value> = summary
        .resources
        .iter()
        .map(|r| {
            let content = r.diff.content.as_ref().map(|c| {
                json!({
                    "before_sha256": c.before_sha256,
                    "after_sha256": c.after_sha256,
                    "diff": if r.sensitive {
                        SENSITIVE_PLACEHOLDER.to_owned()
                    } else {
                        content_diff(c, r.target.as_deref().unwrap_or(&r.id.to_string()), false)
                    },
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
        "format_version": "1",
        "command": if mode == Mode::Apply { "apply" } else { "plan" },
        "host": host,
        "resources": resources,
        "counts": summary.counts(),
        "duration_ms": summary.duration_ms,
    })
}
