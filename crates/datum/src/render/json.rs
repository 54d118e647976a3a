//! The JSON form of a pass (`--output json`). Stable field names; content only
//! as checksums and, for non-sensitive text, a unified diff. The conventions of
//! every document (`format_version`, RFC 3339 times) are `datum_report::json`'s.

use std::sync::atomic::{AtomicBool, Ordering};

use datum_catalog::{Diagnostic, HostError, Severity};
use datum_core::SENSITIVE_PLACEHOLDER;
use datum_engine::{Mode, PassSummary};
use serde_json::{Value, json};

use super::diff::content_diff;

pub use datum_report::json::{FORMAT_VERSION, document};

/// Whether this process has begun its document on stdout ([`begin`]).
static BEGUN: AtomicBool = AtomicBool::new(false);

/// Notes that the command's own output starts on stdout now: an error after
/// this point gets no [`error`] document (stdout holds one document, never
/// two). Every way a document leaves `datum` calls it: [`print()`],
/// `crate::render::print`, and `datum catalogue`, which streams its own.
pub fn begin() {
    BEGUN.store(true, Ordering::Relaxed);
}

/// Whether [`begin`] was called.
pub fn begun() -> bool {
    BEGUN.load(Ordering::Relaxed)
}

/// Writes [`document`] of `value`, pretty-printed, with a final newline.
pub fn print(key: &str, value: Value) -> std::io::Result<()> {
    use std::io::Write as _;
    begin();
    let mut out = std::io::stdout().lock();
    out.write_all(datum_report::json::pretty(&document(key, value)).as_bytes())?;
    out.flush()
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
            let mut resource = json!({
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
            });
            // Only when a validator's output was withheld: why, and for
            // which sensitive resources (never the words that matched).
            if let (Some(withheld), Some(fields)) = (&r.withheld, resource.as_object_mut()) {
                fields.insert(
                    "output_withheld".to_owned(),
                    json!({
                        "reason": withheld.reason.word(),
                        "resources": withheld.resources,
                    }),
                );
            }
            resource
        })
        .collect();
    let mut document = json!({
        "format_version": FORMAT_VERSION,
        "command": if mode == Mode::Apply { "apply" } else { "plan" },
        "host": host,
        "resources": resources,
        "counts": summary.counts(),
        "duration_ms": summary.duration_ms,
    });
    // Only when asked (`--trust-metadata`): how many unchanged were not read.
    if let (Some(trusted), Some(fields)) = (summary.trusted_by_metadata, document.as_object_mut()) {
        fields.insert("trusted_by_metadata".to_owned(), trusted.into());
    }
    // Only when there is one (a staging folder a local user moved away).
    if let (false, Some(fields)) = (summary.warnings.is_empty(), document.as_object_mut()) {
        fields.insert("warnings".to_owned(), summary.warnings.clone().into());
    }
    document
}

/// The document of `command` (`plan`, `backup`...) when it failed (exit 1)
/// before printing its own: the error with its causes (`error`, as on
/// stderr), the number of errors (`errors`, at least 1) and `diagnostics`,
/// each as `datum lint` gives them (`severity`, `message`, `resource`,
/// `origin` with `file`, `line`, `column` and `layer`). A repository that
/// does not compile gives every diagnostic; a malformed host file gives its
/// position (`layer` empty: the file is not in the repository); any other
/// error is one diagnostic with its message and no position. Like `datum
/// lint --output json`, never a source line: a diagnostic's position is
/// all it shows of a sensitive resource.
pub fn error(command: &str, err: &anyhow::Error) -> Value {
    let message = format!("{err:#}");
    let diagnostics =
        diagnostics_of(err).unwrap_or_else(|| vec![Diagnostic::error(message.clone())]);
    let errors = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count()
        .max(1);
    json!({
        "command": command,
        "error": message,
        "errors": errors,
        "diagnostics": diagnostics,
    })
}

/// The diagnostics `err` (or one of its causes) carries, with positions.
fn diagnostics_of(err: &anyhow::Error) -> Option<Vec<Diagnostic>> {
    err.chain().find_map(|cause| {
        if let Some(repository) = cause.downcast_ref::<crate::context::RepositoryErrors>() {
            let all: Vec<Diagnostic> = repository.diagnostics.iter().cloned().collect();
            return (!all.is_empty()).then_some(all);
        }
        // A malformed host file: its position (`layer` empty), never its
        // line.
        cause
            .downcast_ref::<HostError>()
            .and_then(HostError::diagnostics)
            .map(|d| d.into_iter().collect())
    })
}
