//! The web view: the fleet in a browser, served by `datum server` at `/`.
//!
//! Server-rendered pages (minijinja templates from `templates/`, embedded
//! at build time), plain HTML and one CSS file, with a little JavaScript
//! that only adds to what works without it (relative times kept fresh,
//! keyboard shortcuts). Every asset is served by the server itself
//! (`/assets/...`) and the Content-Security-Policy allows nothing else, so
//! a page never makes a request to another host.
//!
//! The rooms:
//! - [`auth`]: who is asking. A sign-in form takes the admin credential and
//!   the operator's name and opens a session kept in the store (so any
//!   server process on the same database knows it, and signing out ends it
//!   everywhere); the cookie is `Secure; HttpOnly; SameSite=Strict`. Every
//!   form that changes something carries a CSRF token bound to the
//!   session. Scripts send `Authorization: Bearer <admin credential>`
//!   instead, on any page or API route.
//! - [`render`]: the template environment, its filters (times as "4 min
//!   ago" with the exact UTC time on hover), and the headers of every page.
//! - [`queries`]: the reads only the pages need (one host's reports,
//!   findings and revisions, a failure's captured output); everything
//!   fleet-wide comes from the query layer ([`crate::fleet`]) and the pure
//!   views ([`crate::views`]).
//! - [`pages`]: one module per page (overview, hosts, host, rollout, drift,
//!   stacks) and [`actions`]: quarantine and release.
//! - [`assets`]: the stylesheet, the script and the icon.
//!
//! Owns: [`routes`], [`WebState`], [`Peer`]. Must not: write SQL for the
//! fleet's own tables (the query layer does) or show a value a report did
//! not carry (reports never carry a sensitive value; the pages print
//! `(sensitive)` where one was withheld).

pub mod actions;
pub mod assets;
pub mod auth;
pub mod pages;
pub mod queries;
pub mod render;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::routing::{get, post};

use crate::api::App;
use crate::store::Backend;

/// The client's address, put on every request by the accept loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub SocketAddr);

/// What the web view keeps per process: the sign-in attempts per client
/// address (a limit that only makes one process stricter; sessions
/// themselves live in the store).
pub struct WebState {
    pub(crate) sign_ins: Mutex<HashMap<String, (u32, Instant)>>,
}

impl WebState {
    pub fn new() -> Self {
        WebState {
            sign_ins: Mutex::new(HashMap::new()),
        }
    }
}

impl Default for WebState {
    fn default() -> Self {
        Self::new()
    }
}

/// The web view's routes (merged into the API's router).
pub fn routes<B: Backend>() -> axum::Router<Arc<App<B>>> {
    axum::Router::new()
        .route("/", get(pages::overview::page::<B>))
        .route("/hosts", get(pages::hosts::page::<B>))
        .route("/hosts/{name}", get(pages::host::page::<B>))
        .route("/hosts/{name}/quarantine", post(actions::quarantine::<B>))
        .route("/hosts/{name}/release", post(actions::release::<B>))
        .route("/rollout", get(pages::rollout::page::<B>))
        .route("/rollout/failure", get(pages::rollout::failure::<B>))
        .route("/drift", get(pages::drift::page::<B>))
        .route("/stacks", get(pages::stacks::page::<B>))
        .route("/login", get(auth::form::<B>).post(auth::sign_in::<B>))
        .route("/logout", post(auth::sign_out::<B>))
        .route("/assets/{file}", get(assets::serve))
        .route("/favicon.ico", get(assets::favicon))
        .layer(axum::middleware::from_fn(server_timing))
}

/// Every page says how long the server took to answer it (reading the
/// store and rendering), as `Server-Timing: app;dur=<ms>`: the browser's
/// developer tools and the benchmark (`bench/web.sh`) read it from the
/// Navigation Timing entry.
async fn server_timing(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let started = Instant::now();
    let mut res = next.run(req).await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if let Ok(v) = axum::http::HeaderValue::from_str(&format!("app;dur={ms:.1}")) {
        res.headers_mut().insert("server-timing", v);
    }
    res
}
