//! The stylesheet, the script and the icon, embedded at build time and
//! served by the server itself: pages load nothing from anywhere else.
//! Addresses carry [`VERSION`] so they can be cached for a long time.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("../../assets/datum.css");
const JS: &str = include_str!("../../assets/datum.js");
const ICON: &str = include_str!("../../assets/favicon.svg");

/// Changes whenever an asset does (FNV-1a of their bytes), for `?v=` in
/// the pages' links.
pub const VERSION: u64 = fnv(CSS.as_bytes()) ^ fnv(JS.as_bytes()).rotate_left(21);

const fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=86400"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// `GET /assets/{file}`.
pub async fn serve(Path(file): Path<String>) -> Response {
    match file.as_str() {
        "datum.css" => asset("text/css; charset=utf-8", CSS),
        "datum.js" => asset("text/javascript; charset=utf-8", JS),
        "favicon.svg" => asset("image/svg+xml", ICON),
        _ => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}

/// `GET /favicon.ico` (browsers ask for it whatever the page says).
pub async fn favicon() -> Response {
    asset("image/svg+xml", ICON)
}
