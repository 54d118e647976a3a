//! Who is asking: sessions opened with the admin credential, the CSRF
//! token of every form, and the admin credential as a bearer token for
//! scripts.
//!
//! The rules:
//! - **Sign-in** (`GET/POST /login`): the admin credential (from
//!   `admin.yaml`) and the operator's name, recorded with everything the
//!   session does. The form itself is protected by a double-submit token
//!   (a `__Host-` cookie and a hidden field that must match), and attempts
//!   are limited per client address.
//! - **Sessions** live in the store (`sessions`), keyed by the SHA-256 of
//!   the cookie's random 256-bit token: any server process on the same
//!   database knows them, signing out deletes the row (and so ends the
//!   session on every process at once), and a session ends with the admin
//!   credential it was opened with. They last [`LIFETIME`] at most and
//!   [`IDLE`] without use. The cookie is `__Host-datum_session`, `Secure;
//!   HttpOnly; SameSite=Strict; Path=/`.
//! - **CSRF**: every state-changing form carries a token derived from the
//!   session's secret (SHA-256 of a label and the cookie's token), which a
//!   page of another site cannot read; a POST whose token does not match,
//!   or whose `Origin` is another site's, is refused (403).
//! - **Bearer**: `Authorization: Bearer <admin credential>` is accepted on
//!   every page and form instead of a session (it is not sent by a browser
//!   on its own, so it needs no CSRF token).
//! - A link opened from another site (a ticket) arrives without the
//!   `SameSite=Strict` cookie; such a request gets a page that reloads the
//!   same address from this site, which the browser then sends with the
//!   cookie, so pasted links work.
//!
//! Owns: [`Operator`] (the extractor every page and action uses), the
//! `sessions` table and its SQL, the sign-in and sign-out handlers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use datum_fleet::credentials::token_hash;
use serde::Deserialize;

use super::Peer;
use super::render::{self, WebError};
use crate::api::App;
use crate::fleet::{int, text};
use crate::instructions::Requester;
use crate::store::{Backend, Stmt};

/// The session cookie's name (`__Host-`: Secure, no Domain, Path=/).
pub const SESSION_COOKIE: &str = "__Host-datum_session";
/// The sign-in form's double-submit cookie.
pub const SIGN_IN_COOKIE: &str = "__Host-datum_signin";
/// A session ends this long after sign-in at the latest.
pub const LIFETIME: i64 = 12 * 3600;
/// A session unused this long ends.
pub const IDLE: i64 = 2 * 3600;
/// Sign-in attempts allowed per client address and window.
const ATTEMPTS: u32 = 10;
const ATTEMPT_WINDOW: Duration = Duration::from_secs(300);
/// The largest form body read.
pub const FORM_BYTES: usize = 64 * 1024;

/// The person (or script) behind a request.
#[derive(Debug, Clone)]
pub struct Operator {
    /// The name given at sign-in; `script` for a bearer token.
    pub name: String,
    /// The first 12 hex digits of the admin credential's hash.
    pub credential: String,
    pub address: String,
    /// The CSRF token forms must carry (`None`: a bearer token, which needs
    /// none).
    pub csrf: Option<String>,
}

impl Operator {
    /// The part of every page's context that says who is signed in.
    pub fn frame(&self) -> serde_json::Value {
        serde_json::json!({
            "operator": self.name,
            "csrf": self.csrf,
            "bearer": self.csrf.is_none(),
        })
    }

    /// Whether a form's `token` is this session's CSRF token (a bearer
    /// request needs none).
    pub fn check_csrf(&self, token: Option<&str>) -> Result<(), WebError> {
        match &self.csrf {
            None => Ok(()),
            Some(expected) if token.is_some_and(|t| same(t, expected)) => Ok(()),
            Some(_) => Err(WebError::Forbidden(
                "the form's CSRF token does not match this session: reload the page and try again"
                    .to_owned(),
            )),
        }
    }

    /// Who to record as having asked for something; a script may name
    /// itself (`by`).
    pub fn requester(&self, by: Option<&str>) -> Requester {
        let name = match (&self.csrf, by.map(str::trim).filter(|b| !b.is_empty())) {
            (None, Some(b)) => format!("{} (script)", bounded_name(b)),
            _ => self.name.clone(),
        };
        Requester {
            name,
            credential: self.credential.clone(),
            address: self.address.clone(),
        }
    }
}

/// Equal strings, compared in time that depends only on their lengths.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The CSRF token of the session whose cookie holds `token`.
pub fn csrf_of(token: &str) -> String {
    token_hash(&format!("datum-csrf1\0{token}"))
}

fn bounded_name(name: &str) -> String {
    name.chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect::<String>()
        .trim()
        .to_owned()
}

/// The value of cookie `name` in `headers`.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

fn address(parts: &Parts) -> String {
    parts
        .extensions
        .get::<Peer>()
        .map_or_else(|| "unknown".to_owned(), |p| p.0.ip().to_string())
}

/// Why a request was not let through, as the browser should see it.
pub enum Refused {
    /// Not signed in: to the sign-in form, coming back here after.
    SignIn(String),
    /// Arrived from another site without the cookie: reload from here.
    Reload,
    Error(WebError),
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::SignIn(next) => {
                let target = format!("/login?next={}", urlencode(&next));
                Redirect::to(&target).into_response()
            }
            Refused::Reload => render::page("redirect.html", serde_json::json!({}))
                .unwrap_or_else(IntoResponse::into_response),
            Refused::Error(e) => e.into_response(),
        }
    }
}

fn urlencode(s: &str) -> String {
    serde_urlencoded::to_string([("", s)])
        .map(|e| e.trim_start_matches('=').to_owned())
        .unwrap_or_default()
}

/// Only a path of this server is a place to go back to after sign-in.
/// Every character must be printable ASCII, as in a request's own path: a
/// browser drops tabs and line breaks from a `Location` before reading it,
/// so `/<TAB>/evil.example` would lead to another site, and a character
/// outside ASCII cannot be put in the header at all.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && n.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            n.to_owned()
        }
        _ => "/".to_owned(),
    }
}

impl<B: Backend> FromRequestParts<Arc<App<B>>> for Operator {
    type Rejection = Refused;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<App<B>>,
    ) -> Result<Self, Self::Rejection> {
        let changes = parts.method != Method::GET && parts.method != Method::HEAD;
        if changes {
            cross_site_refused(&parts.headers).map_err(Refused::Error)?;
        }
        let address = address(parts);
        if let Some(auth) = parts.headers.get(header::AUTHORIZATION) {
            let token = auth
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or_else(|| {
                    Refused::Error(WebError::Unauthorized(
                        "the Authorization header must be `Bearer <admin credential>`".to_owned(),
                    ))
                })?;
            let hash = token_hash(token.trim());
            return match app.fleet.identity(&hash).await {
                Ok(Some(who)) if who.kind == "admin" => Ok(Operator {
                    name: "script".to_owned(),
                    credential: hash[..12].to_owned(),
                    address,
                    csrf: None,
                }),
                Ok(_) => Err(Refused::Error(WebError::Unauthorized(
                    "the bearer token is not this server's admin credential".to_owned(),
                ))),
                Err(e) => Err(Refused::Error(e.into())),
            };
        }
        let here = parts
            .uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
        let Some(token) = cookie(&parts.headers, SESSION_COOKIE) else {
            let cross_site = parts
                .headers
                .get("sec-fetch-site")
                .is_some_and(|v| v.as_bytes() == b"cross-site");
            return Err(if changes {
                Refused::Error(WebError::SignedOut(
                    "not signed in: this needs a session (sign in at /login) or the admin credential as a bearer token".to_owned(),
                ))
            } else if cross_site {
                Refused::Reload
            } else {
                Refused::SignIn(here)
            });
        };
        match session(app, token).await.map_err(Refused::Error)? {
            Some((name, credential)) => Ok(Operator {
                name,
                credential: credential.chars().take(12).collect(),
                address,
                csrf: Some(csrf_of(token)),
            }),
            None if changes => Err(Refused::Error(WebError::SignedOut(
                "the session has ended: sign in again".to_owned(),
            ))),
            None => Err(Refused::SignIn(here)),
        }
    }
}

/// A state-changing request from another site's page is refused whatever
/// it carries (`Origin` of another host, or `Sec-Fetch-Site: cross-site`).
fn cross_site_refused(headers: &HeaderMap) -> Result<(), WebError> {
    let refused =
        || WebError::Forbidden("a form of another site cannot change anything here".to_owned());
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site")
    {
        return Err(refused());
    }
    if let (Some(origin), Some(host)) = (
        headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()),
        headers.get(header::HOST).and_then(|v| v.to_str().ok()),
    ) && origin != "null"
        && origin.strip_prefix("https://") != Some(host)
    {
        return Err(refused());
    }
    Ok(())
}

/// The operator and admin credential hash of the live session whose cookie
/// holds `token` (and marks it used); `None` when there is none, it ended,
/// or its admin credential is gone.
async fn session<B: Backend>(
    app: &App<B>,
    token: &str,
) -> Result<Option<(String, String)>, WebError> {
    let id = token_hash(token);
    let now = app.now();
    let rows = app
        .fleet
        .backend()
        .rows(Stmt::new(
            "SELECT s.operator, s.last_seen, s.expires_at, s.token_hash FROM sessions s \
             JOIN identities i ON i.token_hash = s.token_hash AND i.kind = 'admin' \
             WHERE s.id_hash = $1",
            vec![id.as_str().into()],
        ))
        .await?;
    let Some(r) = rows.first() else {
        return Ok(None);
    };
    let (last_seen, expires) = (int(r, 1).unwrap_or(0), int(r, 2).unwrap_or(0));
    if expires <= now || last_seen + IDLE <= now {
        return Ok(None);
    }
    if now - last_seen >= 60 {
        app.fleet
            .backend()
            .execute(vec![Stmt::new(
                "UPDATE sessions SET last_seen = $2 WHERE id_hash = $1",
                vec![id.as_str().into(), now.into()],
            )])
            .await?;
    }
    Ok(text(r, 0).zip(text(r, 3)))
}

#[derive(Debug, Deserialize)]
struct FormQuery {
    next: Option<String>,
}

fn cookie_header(name: &str, value: &str, max_age: i64) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{name}={value}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={max_age}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `GET /login`: the form (or, already signed in, where `next` says).
pub async fn form<B: Backend>(
    State(app): State<Arc<App<B>>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let q: FormQuery = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
        .unwrap_or(FormQuery { next: None });
    let next = safe_next(q.next.as_deref());
    if let Some(token) = cookie(&headers, SESSION_COOKIE)
        && let Ok(Some(_)) = session(&app, token).await
    {
        return Redirect::to(&next).into_response();
    }
    sign_in_page(&app, &next, None, StatusCode::OK)
}

fn sign_in_page<B: Backend>(
    app: &App<B>,
    next: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let nonce = datum_fleet::report::new_key();
    let mut r = match render::page(
        "login.html",
        serde_json::json!({
            "now": app.now(),
            "next": next,
            "signin": nonce,
            "error": error,
            "url": app.config.url,
        }),
    ) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    *r.status_mut() = status;
    r.headers_mut().append(
        header::SET_COOKIE,
        cookie_header(SIGN_IN_COOKIE, &nonce, 600),
    );
    r
}

#[derive(Debug, Deserialize)]
struct SignInForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    credential: String,
    #[serde(default)]
    signin: String,
    next: Option<String>,
}

/// Reads a form body (at most [`FORM_BYTES`]).
pub async fn read_form<T: serde::de::DeserializeOwned>(
    body: axum::body::Body,
) -> Result<T, WebError> {
    let bytes = axum::body::to_bytes(body, FORM_BYTES)
        .await
        .map_err(|_| WebError::BadRequest(format!("the form is larger than {FORM_BYTES} bytes")))?;
    serde_urlencoded::from_bytes(&bytes)
        .map_err(|e| WebError::BadRequest(format!("the form is malformed: {e}")))
}

/// `POST /login`.
pub async fn sign_in<B: Backend>(
    State(app): State<Arc<App<B>>>,
    headers: HeaderMap,
    peer: Option<axum::Extension<Peer>>,
    body: axum::body::Body,
) -> Response {
    if let Err(e) = cross_site_refused(&headers) {
        return e.into_response();
    }
    let form: SignInForm = match read_form(body).await {
        Ok(f) => f,
        Err(e) => return e.into_response(),
    };
    let next = safe_next(form.next.as_deref());
    // The double-submit token: a page of another site can post this form
    // but cannot read or set the cookie.
    if !cookie(&headers, SIGN_IN_COOKIE)
        .is_some_and(|c| !form.signin.is_empty() && same(c, &form.signin))
    {
        return sign_in_page(
            &app,
            &next,
            Some("The sign-in form expired. Please try again."),
            StatusCode::FORBIDDEN,
        );
    }
    let address = peer.map_or_else(|| "unknown".to_owned(), |p| p.0.0.ip().to_string());
    if !app.web.attempt(&address) {
        return sign_in_page(
            &app,
            &next,
            Some("Too many attempts from this address: wait a few minutes."),
            StatusCode::TOO_MANY_REQUESTS,
        );
    }
    let name = bounded_name(&form.name);
    if name.is_empty() {
        return sign_in_page(
            &app,
            &next,
            Some("Say who you are: the name is recorded with what you do."),
            StatusCode::BAD_REQUEST,
        );
    }
    let credential = token_hash(form.credential.trim());
    match app.fleet.identity(&credential).await {
        Ok(Some(who)) if who.kind == "admin" => {}
        Ok(_) => {
            return sign_in_page(
                &app,
                &next,
                Some("That is not an admin credential of this server (see admin.yaml)."),
                StatusCode::UNAUTHORIZED,
            );
        }
        Err(e) => return WebError::from(e).into_response(),
    }
    let token = format!(
        "{}{}",
        datum_fleet::report::new_key(),
        datum_fleet::report::new_key()
    );
    let now = app.now();
    let opened = app
        .fleet
        .backend()
        .execute(vec![
            Stmt::new(
                "DELETE FROM sessions WHERE expires_at <= $1 OR last_seen <= $2",
                vec![now.into(), (now - IDLE).into()],
            ),
            Stmt::new(
                "INSERT INTO sessions (id_hash, token_hash, operator, address, created_at, last_seen, \
                 expires_at) VALUES ($1, $2, $3, $4, $5, $5, $6)",
                vec![
                    token_hash(&token).into(),
                    credential.into(),
                    name.into(),
                    address.into(),
                    now.into(),
                    (now + LIFETIME).into(),
                ],
            ),
        ])
        .await;
    if let Err(e) = opened {
        return WebError::from(e).into_response();
    }
    let mut r = Redirect::to(&next).into_response();
    r.headers_mut().append(
        header::SET_COOKIE,
        cookie_header(SESSION_COOKIE, &token, LIFETIME),
    );
    r.headers_mut()
        .append(header::SET_COOKIE, cookie_header(SIGN_IN_COOKIE, "", 0));
    r
}

#[derive(Debug, Deserialize)]
struct SignOutForm {
    csrf: Option<String>,
}

/// `POST /logout`: the session ends on every server process.
pub async fn sign_out<B: Backend>(
    State(app): State<Arc<App<B>>>,
    operator: Operator,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Response, WebError> {
    let form: SignOutForm = read_form(body).await?;
    operator.check_csrf(form.csrf.as_deref())?;
    if let Some(token) = cookie(&headers, SESSION_COOKIE) {
        app.fleet
            .backend()
            .execute(vec![Stmt::new(
                "DELETE FROM sessions WHERE id_hash = $1",
                vec![token_hash(token).into()],
            )])
            .await?;
    }
    let mut r = Redirect::to("/login?next=%2F").into_response();
    r.headers_mut()
        .append(header::SET_COOKIE, cookie_header(SESSION_COOKIE, "", 0));
    Ok(r)
}

impl super::WebState {
    /// One more sign-in attempt from `address`: false over the limit.
    fn attempt(&self, address: &str) -> bool {
        let Ok(mut map) = self.sign_ins.lock() else {
            return true;
        };
        if map.len() > 10_000 {
            map.retain(|_, (_, at)| at.elapsed() < ATTEMPT_WINDOW);
        }
        let entry = map.entry(address.to_owned()).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= ATTEMPT_WINDOW {
            *entry = (0, Instant::now());
        }
        entry.0 += 1;
        entry.0 <= ATTEMPTS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_places_to_return_to() {
        assert_eq!(
            safe_next(Some("/hosts?state=failed")),
            "/hosts?state=failed"
        );
        assert_eq!(safe_next(Some("//evil.example/")), "/");
        assert_eq!(safe_next(Some("https://evil.example/")), "/");
        assert_eq!(safe_next(Some("/\\evil.example")), "/");
        // A browser drops tabs and line breaks from a Location it reads:
        // these would be `//evil.example`.
        assert_eq!(safe_next(Some("/\t/evil.example/")), "/");
        assert_eq!(safe_next(Some("/\n/evil.example/")), "/");
        assert_eq!(safe_next(Some("/\r/evil.example/")), "/");
        // Not a header value: the redirect would be a 500.
        assert_eq!(safe_next(Some("/hosts/é")), "/");
        assert_eq!(safe_next(Some("/hosts?q=a b")), "/");
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn cookies_and_tokens() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; __Host-datum_session=abc ; b=2"),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "c"), None);
        assert_ne!(csrf_of("abc"), csrf_of("abd"));
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
        let s = Operator {
            name: "alice".into(),
            credential: String::new(),
            address: String::new(),
            csrf: Some(csrf_of("abc")),
        };
        assert!(s.check_csrf(Some(&csrf_of("abc"))).is_ok());
        assert!(s.check_csrf(Some("forged")).is_err());
        assert!(s.check_csrf(None).is_err());
    }

    #[test]
    fn a_form_of_another_site_changes_nothing() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8443"));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://127.0.0.1:8443"),
        );
        assert!(cross_site_refused(&h).is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(cross_site_refused(&h).is_err());
        h.remove(header::ORIGIN);
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(cross_site_refused(&h).is_err());
    }
}
