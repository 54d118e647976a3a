//! Turning a page's context into HTML: the template environment (every
//! template embedded at build time), its filters, and the headers every
//! page carries.
//!
//! Escaping is minijinja's HTML auto-escaping (on for every `.html`
//! template); the only markup made outside a template is `when`'s
//! `<time>` element, from numbers.
//!
//! Headers: a Content-Security-Policy that allows the server's own scripts,
//! styles, images and forms and nothing else (`default-src 'none'`), no
//! framing, no referrer, no caching of pages (they hold the fleet's data).
//!
//! Owns: [`templates`], [`page`], [`WebError`]. Must not: read the store.

use std::sync::LazyLock;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use minijinja::value::{Serde, Value, ValueKind};
use minijinja::{Environment, State};

use crate::store::StoreError;

/// Every template, by name.
const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("../../templates/base.html")),
    ("macros.html", include_str!("../../templates/macros.html")),
    ("login.html", include_str!("../../templates/login.html")),
    (
        "overview.html",
        include_str!("../../templates/overview.html"),
    ),
    ("hosts.html", include_str!("../../templates/hosts.html")),
    ("host.html", include_str!("../../templates/host.html")),
    ("rollout.html", include_str!("../../templates/rollout.html")),
    ("failure.html", include_str!("../../templates/failure.html")),
    ("drift.html", include_str!("../../templates/drift.html")),
    ("stacks.html", include_str!("../../templates/stacks.html")),
    ("error.html", include_str!("../../templates/error.html")),
    (
        "redirect.html",
        include_str!("../../templates/redirect.html"),
    ),
];

/// The Content-Security-Policy of every page: nothing from anywhere but
/// this server, no inline script, no framing.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

static ENVIRONMENT: LazyLock<Environment<'static>> = LazyLock::new(build);

/// The template environment (built once per process).
pub fn templates() -> &'static Environment<'static> {
    &ENVIRONMENT
}

/// A fresh environment (tests).
pub fn environment() -> Environment<'static> {
    build()
}

fn build() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Chainable);
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
    {
        env.set_syntax(syntax);
    }
    for (name, source) in TEMPLATES {
        // The templates are part of the program: one that does not parse
        // fails the unit test below, never a request. Should it happen
        // anyway, the page answers with the error instead.
        let _ = env.add_template(name, source);
    }
    env.add_filter("when", when);
    env.add_filter("utc", utc);
    env.add_filter("span", span);
    env.add_filter("num", num);
    env.add_filter("rev", rev);
    env.add_filter("pct", pct);
    env.add_global("asset_version", crate::web::assets::VERSION);
    env.add_global("datum_version", env!("CARGO_PKG_VERSION"));
    env
}

/// Unix seconds from an integer or an RFC 3339 string.
fn seconds(v: &Value) -> Option<i64> {
    match v.kind() {
        ValueKind::Number => i64::try_from(v.clone()).ok(),
        ValueKind::String => chrono::DateTime::parse_from_rfc3339(v.as_str()?)
            .ok()
            .map(|t| t.timestamp()),
        _ => None,
    }
}

/// "YYYY-MM-DD HH:MM:SS UTC".
pub fn utc_text(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

fn utc(v: Value) -> String {
    seconds(&v).map(utc_text).unwrap_or_default()
}

/// "4 min ago", "in 3 h", "just now".
pub fn ago_text(t: i64, now: i64) -> String {
    // Saturating: `t` is what a host said (any i64).
    let d = now.saturating_sub(t);
    if d.unsigned_abs() < 10 {
        return "just now".to_owned();
    }
    let s = span_text(d.unsigned_abs());
    if d > 0 {
        format!("{s} ago")
    } else {
        format!("in {s}")
    }
}

/// A duration for a person: "45 s", "4 min", "2 h 5 min", "3 d 4 h".
pub fn span_text(secs: u64) -> String {
    let (d, h, m) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60);
    match () {
        _ if secs < 60 => format!("{secs} s"),
        _ if secs < 3600 => format!("{m} min"),
        _ if secs < 10 * 3600 && m > 0 => format!("{h} h {m} min"),
        _ if secs < 86_400 => format!("{h} h"),
        _ if d < 10 && h > 0 => format!("{d} d {h} h"),
        _ => format!("{d} d"),
    }
}

/// `<time datetime="…" title="… UTC">4 min ago</time>`; "never" for none.
fn when(state: &State, v: Value) -> Value {
    let Some(t) = seconds(&v) else {
        return Value::from("never");
    };
    let now = state
        .lookup("now")
        .and_then(|n| i64::try_from(n).ok())
        .unwrap_or(t);
    Value::from_safe_string(format!(
        "<time datetime=\"{}\" title=\"{}\" data-t=\"{t}\">{}</time>",
        crate::views::rfc3339(t),
        utc_text(t),
        ago_text(t, now)
    ))
}

fn span(v: Value) -> String {
    i64::try_from(v)
        .ok()
        .map(|s| span_text(s.unsigned_abs()))
        .unwrap_or_default()
}

/// 12345 -> "12,345".
pub fn num_text(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn num(v: Value) -> String {
    i64::try_from(v.clone())
        .map(num_text)
        .unwrap_or_else(|_| v.to_string())
}

/// A revision short enough for a table: `git:8c1e3f4a`. Cut by
/// characters: the revision is the host's word, not always hex.
pub fn rev_text(r: &str) -> String {
    match r.split_once(':') {
        Some((kind, id)) if id.chars().nth(10).is_some() => {
            format!("{kind}:{}", id.chars().take(10).collect::<String>())
        }
        _ => r.to_owned(),
    }
}

fn rev(v: Value) -> String {
    v.as_str().map(rev_text).unwrap_or_default()
}

/// `part` as a percentage of `whole`, for widths ("12.50").
fn pct(part: Value, whole: Value) -> String {
    let (p, w) = (
        f64::try_from(part).unwrap_or(0.0),
        f64::try_from(whole).unwrap_or(0.0),
    );
    if w <= 0.0 {
        return "0".to_owned();
    }
    format!("{:.2}", (p / w * 100.0).clamp(0.0, 100.0))
}

/// Why a page could not be shown.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Forbidden(String),
    /// Refused for want of a session (403): the one error whose page
    /// offers to sign in. Every other error answers a client that signed
    /// in or sent a bearer token (a script), or whose token is the problem.
    #[error("{0}")]
    SignedOut(String),
    /// A bearer token that is no admin credential (401).
    #[error("{0}")]
    Unauthorized(String),
    #[error("the store failed: {0}")]
    Store(#[from] StoreError),
    #[error("the page could not be rendered: {0}")]
    Template(#[from] minijinja::Error),
}

impl WebError {
    fn status(&self) -> StatusCode {
        match self {
            WebError::NotFound(_) => StatusCode::NOT_FOUND,
            WebError::BadRequest(_) => StatusCode::BAD_REQUEST,
            WebError::Forbidden(_) | WebError::SignedOut(_) => StatusCode::FORBIDDEN,
            WebError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            WebError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            WebError::Template(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = templates()
            .get_template("error.html")
            .and_then(|t| {
                t.render(Value::from(Serde(serde_json::json!({
                    "status": status.as_u16(),
                    "reason": status.canonical_reason().unwrap_or(""),
                    "message": self.to_string(),
                    "sign_in": matches!(self, WebError::SignedOut(_)),
                }))))
            })
            .unwrap_or_else(|_| format!("{status}\n"));
        let mut r = html(status, body);
        if matches!(self, WebError::Unauthorized(_)) {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

/// An HTML response with the headers every page has.
pub fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Renders `template` with `context` (a JSON object; `now` and the frame
/// are added by the caller) into a 200 page.
pub fn page(template: &str, context: serde_json::Value) -> Result<Response, WebError> {
    let body = templates()
        .get_template(template)?
        .render(Value::from(Serde(context)))?;
    Ok(html(StatusCode::OK, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_parses() {
        let env = environment();
        for (name, _) in TEMPLATES {
            env.get_template(name)
                .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
    }

    #[test]
    fn times_read_as_a_person_says_them() {
        assert_eq!(ago_text(1_000, 1_004), "just now");
        assert_eq!(ago_text(1_000, 1_000 + 240), "4 min ago");
        assert_eq!(ago_text(0, 2 * 3600 + 300), "2 h 5 min ago");
        assert_eq!(ago_text(0, 3 * 86_400), "3 d ago");
        assert_eq!(ago_text(600, 0), "in 10 min");
        // A time is what a host says it is (a finding's first sighting, a
        // writer's, a quarantine's): any i64 reaches here and is said, not
        // a panic (debug) or a wrapped difference (release).
        assert_eq!(ago_text(i64::MIN, 1_000), "106751991167300 d ago");
        assert_eq!(ago_text(i64::MAX, -1_000), "in 106751991167300 d");
        assert_eq!(utc_text(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(num_text(10_000), "10,000");
        assert_eq!(num_text(999), "999");
        assert_eq!(num_text(-1_234_567), "-1,234,567");
        assert_eq!(rev_text("git:8c1e3f4a5b6c7d8e"), "git:8c1e3f4a5b");
        assert_eq!(rev_text("stamp:ab"), "stamp:ab");
        // A host sends its revision as it likes: a multi-byte character at
        // the cut is kept whole (a byte slice there panicked every page
        // that listed the host).
        assert_eq!(rev_text("git:aaaaaaaaaéé"), "git:aaaaaaaaaé");
        assert_eq!(rev_text("git:ééééééééééé"), "git:éééééééééé");
    }

    #[test]
    fn when_renders_a_time_element_with_the_utc_time_on_hover() {
        let mut env = Environment::new();
        env.add_filter("when", when);
        env.add_template("t.html", "{{ t|when }}").unwrap();
        let out = env
            .get_template("t.html")
            .unwrap()
            .render(minijinja::context! { t => 1_000, now => 1_240 })
            .unwrap();
        assert_eq!(
            out,
            "<time datetime=\"1970-01-01T00:16:40Z\" title=\"1970-01-01 00:16:40 UTC\" data-t=\"1000\">4 min ago</time>"
        );
    }
}
