//! A provider's field errors as diagnostics, with what is sensitive kept
//! out of them (the source line hidden, secret values never quoted).

use crate::content::CONTENT_KEYS;
use datum_core::{Origin, ResourceId};
use datum_manifest::Diagnostic;
use datum_manifest::yaml::Pos;
use datum_providers::{FieldError, Provider};

/// Whether a provider's field error is about a content field whose value
/// is not a string: `content::declared` has reported that already, at the
/// value and without its line (it may be a secret), so the provider's
/// wording of the same mistake would repeat it and show the line.
pub(super) fn reported_as_content(
    provider: &dyn Provider,
    e: &FieldError,
    desired: &serde_json::Value,
) -> bool {
    provider.takes_content()
        && e.path.len() == 1
        && e.path.first().is_some_and(|k| {
            CONTENT_KEYS.contains(&k.as_str())
                && desired
                    .get(k)
                    .is_some_and(|v| !v.is_string() && !v.is_null())
        })
}

/// Whether a field error is about a value sensitive by its kind's nature.
fn is_sensitive_field(provider: &dyn Provider, e: &FieldError) -> bool {
    e.path
        .first()
        .is_some_and(|f| provider.sensitive_fields().contains(&f.as_str()))
}

/// Whether `desired` declares a field its kind calls sensitive (a User's
/// `password_hash`): that makes the whole resource sensitive, so no line of
/// it is shown, not even another field's (`desired: {password_hash: ...,
/// uid: x}` holds the hash on the line of the `uid` error).
fn declares_sensitive_field(provider: &dyn Provider, desired: &serde_json::Value) -> bool {
    provider
        .sensitive_fields()
        .iter()
        .any(|f| desired.get(f).is_some_and(|v| !v.is_null()))
}

/// A provider's field error as a diagnostic, with what is sensitive kept
/// out of it: the source line hidden when the resource is sensitive
/// (`secret`, its own or another layer's `sensitive: true`) or the error
/// is about, or the resource declares, a field its kind calls sensitive;
/// and the values it must not quote replaced in the message ([`unquoted`]).
pub(super) fn field_error(
    provider: &dyn Provider,
    e: FieldError,
    desired: &serde_json::Value,
    secret: bool,
    id: &ResourceId,
    origin: Origin,
    end: Option<Pos>,
) -> Diagnostic {
    let hide =
        secret || is_sensitive_field(provider, &e) || declares_sensitive_field(provider, desired);
    let e = unquoted(e, &secret_values(provider, desired, secret));
    field_diagnostic(&e, id, origin, end).hiding_source(hide)
}

/// The values of `desired` an error must not quote: every string in it
/// for a resource declared sensitive (`secret`), else those of the fields
/// its kind calls sensitive.
fn secret_values(
    provider: &dyn Provider,
    desired: &serde_json::Value,
    secret: bool,
) -> Vec<String> {
    fn strings(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::String(s) if !s.is_empty() => out.push(s.clone()),
            serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
            serde_json::Value::Object(fields) => fields.values().for_each(|v| strings(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if secret {
        strings(desired, &mut out);
    } else {
        for field in provider.sensitive_fields() {
            if let Some(value) = desired.get(field) {
                strings(value, &mut out);
            }
        }
    }
    // The longest first: a value that holds a shorter one is replaced whole.
    out.sort_by_key(|v| std::cmp::Reverse(v.len()));
    out
}

/// `e` with every quoted occurrence of `values` in its message replaced by
/// `(sensitive)` (providers quote a bad value: `` `mode` "0x9" is not an
/// octal mode ``); a value still found in it after that (written some
/// other way) gives a message that names the field only. The source line
/// is hidden separately ([`Diagnostic::hiding_source`]).
fn unquoted(mut e: FieldError, values: &[String]) -> FieldError {
    if values.is_empty() {
        return e;
    }
    let mut message = e.message.clone();
    for v in values {
        for quoted in [
            format!("\"{v}\""),
            format!("`{v}`"),
            format!("'{v}'"),
            format!("{v:?}"),
        ] {
            message = message.replace(&quoted, datum_core::SENSITIVE_PLACEHOLDER);
        }
    }
    // Values of one or two characters are words of the message as often as
    // they are a value; nothing secret is that short.
    if values
        .iter()
        .any(|v| v.len() > 2 && message.contains(v.as_str()))
    {
        let dotted = e.path.join(".");
        message =
            format!("`{dotted}` is not valid (its value is not shown: the resource is sensitive)");
    }
    e.message = message;
    e
}

fn field_diagnostic(
    e: &FieldError,
    id: &ResourceId,
    origin: Origin,
    end: Option<Pos>,
) -> Diagnostic {
    let dotted = e.path.join(".");
    // Providers usually name the field; when they do not, say which it is.
    let message = if dotted.is_empty() || e.message.contains(&format!("`{dotted}`")) {
        e.message.clone()
    } else {
        format!("`{dotted}`: {}", e.message)
    };
    let mut d = Diagnostic::error(message).resource(id).at(origin);
    if let Some(end) = end {
        d = d.until(end);
    }
    d
}
