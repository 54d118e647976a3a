//! The HTTP API: JSON handlers over the query layer ([`crate::fleet`]),
//! with the rules every request obeys.
//!
//! - `POST /v1/reports` takes a host's (or stack's) token, and only that
//!   identity's reports: a report naming another host is refused (403)
//!   whatever its token. The body is bounded (413), its format version and
//!   shape checked (400), the identity rate-limited (429 with
//!   `Retry-After`). The answer says whether the key was new, and carries
//!   the sampling plan.
//! - Every read (`/v1/hosts`, `/v1/rollout`, `/v1/drift`, `/v1/stale`,
//!   `/v1/sampling`, `/v1/hosts/{name}/reports`, `/metrics`) takes an admin
//!   token.
//! - `/openapi.json` (the document describing all of this) and `/healthz`
//!   need none.
//!
//! Errors are `{"error": "..."}` with the status. Handlers render what the
//! query layer returns and never write SQL, so other front ends (a web
//! view) can sit beside this one on the same [`App`].
//!
//! Owns: [`App`], [`router`]. Must not: open the network (that is
//! `serve`), or hold state other server processes would need (the rate
//! limiter and the token cache are per process and only make things
//! faster or stricter).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use datum_fleet::client::{
    IDEMPOTENCY_HEADER, OUTBOX_DEPTH_HEADER, OUTBOX_DROPPED_HEADER, STORE_ID_HEADER,
};
use datum_fleet::{FORMAT_VERSION, Reply, Report, ReportKind};
use serde::Deserialize;

use crate::config::ServerConfig;
use crate::fleet::{Fleet, Identity, OutboxHeaders};
use crate::metrics::Metrics;
use crate::store::Backend;
use crate::views::Staleness;

/// How long a token's identity is remembered by one process (a revoked
/// token stops working on every server within this).
const TOKEN_CACHE_TTL: Duration = Duration::from_secs(30);

/// Everything a request needs.
pub struct App<B> {
    pub fleet: Fleet<B>,
    pub config: ServerConfig,
    pub metrics: Metrics,
    tokens: Mutex<HashMap<String, (Option<Identity>, Instant)>>,
    buckets: Mutex<HashMap<String, Bucket>>,
    /// The web view's templates and per-process limits.
    pub web: crate::web::WebState,
    /// The clock (Unix seconds); tests replace it.
    pub clock: Box<dyn Fn() -> i64 + Send + Sync>,
}

impl<B: Backend> App<B> {
    pub fn new(fleet: Fleet<B>, config: ServerConfig) -> Self {
        App {
            fleet,
            config,
            metrics: Metrics::default(),
            tokens: Mutex::new(HashMap::new()),
            buckets: Mutex::new(HashMap::new()),
            web: crate::web::WebState::new(),
            clock: Box::new(unix_now),
        }
    }

    pub fn now(&self) -> i64 {
        (self.clock)()
    }

    pub fn staleness(&self) -> Staleness {
        Staleness {
            now: self.now(),
            factor: self.config.stale_factor,
            first_report_within: self.config.first_report_within.as_secs() as i64,
        }
    }

    /// The identity of the bearer token of `headers`.
    async fn who(&self, headers: &HeaderMap) -> Result<Identity, ApiError> {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(ApiError::Unauthenticated)?;
        let hash = datum_fleet::credentials::token_hash(token.trim());
        if let Ok(cache) = self.tokens.lock()
            && let Some((who, at)) = cache.get(&hash)
            && at.elapsed() < TOKEN_CACHE_TTL
        {
            return who.clone().ok_or(ApiError::Unauthenticated);
        }
        let who = self.fleet.identity(&hash).await?;
        if let Ok(mut cache) = self.tokens.lock() {
            if cache.len() > 100_000 {
                cache.clear();
            }
            cache.insert(hash, (who.clone(), Instant::now()));
        }
        who.ok_or(ApiError::Unauthenticated)
    }

    async fn admin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        match self.who(headers).await? {
            who if who.kind == "admin" => Ok(()),
            _ => Err(ApiError::Forbidden(
                "this needs the admin credential (admin.yaml)".to_owned(),
            )),
        }
    }

    /// One more report from `name`; `Err(seconds to wait)` over the limit.
    fn take_token(&self, name: &str) -> Result<(), u64> {
        let per_minute = f64::from(self.config.limits.reports_per_minute.max(1));
        let Ok(mut buckets) = self.buckets.lock() else {
            return Ok(());
        };
        if buckets.len() > 1_000_000 {
            buckets.clear();
        }
        let bucket = buckets.entry(name.to_owned()).or_insert(Bucket {
            tokens: per_minute,
            at: Instant::now(),
        });
        let refill = bucket.at.elapsed().as_secs_f64() * per_minute / 60.0;
        bucket.tokens = (bucket.tokens + refill).min(per_minute);
        bucket.at = Instant::now();
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - bucket.tokens) * 60.0 / per_minute).ceil() as u64)
        }
    }
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Why a request failed, and its status.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing or unknown bearer token")]
    Unauthenticated,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("the report is larger than {0} bytes")]
    TooLarge(usize),
    #[error("too many reports: try again in {0} s")]
    RateLimited(u64),
    #[error("{0}")]
    NotFound(String),
    #[error("the store failed: {0}")]
    Store(#[from] crate::store::StoreError),
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthenticated => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `reason` label of the rejected-reports counter.
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::Unauthenticated => "unauthenticated",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::BadRequest(_) => "malformed",
            ApiError::TooLarge(_) => "too_large",
            ApiError::RateLimited(_) => "rate_limited",
            ApiError::NotFound(_) => "not_found",
            ApiError::Store(_) => "store",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = (
            status,
            Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response();
        if let ApiError::RateLimited(s) = &self
            && let Ok(v) = header::HeaderValue::from_str(&s.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        if matches!(self, ApiError::Unauthenticated) {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// The routes, over `app`.
pub fn router<B: Backend>(app: Arc<App<B>>) -> axum::Router {
    let timeout = app.config.limits.request_timeout;
    axum::Router::new()
        .route("/v1/reports", post(post_report::<B>))
        .route("/v1/hosts", get(hosts::<B>))
        .route("/v1/hosts/{name}/reports", get(history::<B>))
        .route("/v1/rollout", get(rollout::<B>))
        .route("/v1/drift", get(drift::<B>))
        .route("/v1/stale", get(stale::<B>))
        .route("/v1/sampling", get(sampling::<B>))
        .route("/metrics", get(metrics::<B>))
        .route("/openapi.json", get(openapi))
        .route("/healthz", get(healthz::<B>))
        .merge(crate::web::routes::<B>())
        .fallback(|| async { ApiError::NotFound("no such endpoint".to_owned()) })
        .layer(axum::middleware::from_fn(
            move |req: Request, next: axum::middleware::Next| bounded(timeout, req, next),
        ))
        .layer(axum::middleware::from_fn(no_nul))
        .with_state(app)
}

/// A NUL character (`%00`) in the path or the query is refused (400)
/// before any handler reads it: no name, revision or filter holds one,
/// and PostgreSQL's text cannot (it answered 503, "the store failed",
/// where SQLite found nothing).
async fn no_nul(req: Request, next: axum::middleware::Next) -> Response {
    let uri = req.uri();
    if uri.path().contains("%00") || uri.query().is_some_and(|q| q.contains("%00")) {
        return ApiError::BadRequest(
            "the address holds a NUL character (%00), which no name or parameter may contain"
                .to_owned(),
        )
        .into_response();
    }
    next.run(req).await
}

/// Bounds the time of one request: 408 past `limit`.
async fn bounded(limit: Duration, req: Request, next: axum::middleware::Next) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(r) => r,
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            Json(serde_json::json!({"error": "the request took too long"})),
        )
            .into_response(),
    }
}

fn header_u64(headers: &HeaderMap, name: &str) -> u64 {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The `Datum-Store-Id` header: 32 hex digits, else none (the report is
/// then judged as an older host's, by the seq-1 rule).
fn store_id(headers: &HeaderMap) -> Option<u128> {
    let v = headers.get(STORE_ID_HEADER)?.to_str().ok()?.trim();
    if v.len() != 32 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u128::from_str_radix(v, 16).ok()
}

async fn post_report<B: Backend>(
    State(app): State<Arc<App<B>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match take_report(&app, &headers, body).await {
        Ok(reply) => Json(reply).into_response(),
        Err(e) => {
            app.metrics.rejected(e.reason());
            e.into_response()
        }
    }
}

/// How much of a body over the limit is still read (and dropped) so that
/// its sender, still writing, can read the 413: a server that answers and
/// closes while the host writes leaves it only "Broken pipe", which reads
/// as a network fault, and the report stays queued, refused again at every
/// attempt. Past this the connection is cut.
const DRAINED_PAST_LIMIT: usize = 64 * 1024 * 1024;

/// The body, at most `limit` bytes; past it, [`ApiError::TooLarge`] once the
/// rest has been read (within [`DRAINED_PAST_LIMIT`]).
async fn read_bounded(body: Body, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut kept: Vec<u8> = Vec::new();
    let mut dropped = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::BadRequest(format!("the report could not be read: {e}")))?;
        if dropped == 0 && kept.len() + chunk.len() <= limit {
            kept.extend_from_slice(&chunk);
            continue;
        }
        dropped = dropped.saturating_add(chunk.len());
        kept = Vec::new();
        if dropped > DRAINED_PAST_LIMIT {
            break;
        }
    }
    if dropped > 0 {
        return Err(ApiError::TooLarge(limit));
    }
    Ok(kept.into())
}

async fn take_report<B: Backend>(
    app: &App<B>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Reply, ApiError> {
    let who = app.who(headers).await?;
    if who.kind == "admin" {
        return Err(ApiError::Forbidden(
            "reports are sent with a host's token, not the admin's".to_owned(),
        ));
    }
    let limit = app.config.limits.report_bytes;
    let bytes = read_bounded(body, limit).await?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| ApiError::BadRequest("the report is not UTF-8".to_owned()))?;
    let mut report = parse_report(text)?;
    check_numbers(&report)?;
    if holds_nul(text) {
        // PostgreSQL's text cannot hold it: refused on every store alike.
        return Err(ApiError::BadRequest(
            "the report holds a NUL character (\\u0000), which no field may contain".to_owned(),
        ));
    }
    if report.host != who.name {
        return Err(ApiError::Forbidden(format!(
            "this token belongs to `{}`: it cannot write reports of `{}`",
            who.name, report.host
        )));
    }
    let stack = report.kind == ReportKind::Stack;
    if stack != (who.kind == "stack") {
        return Err(ApiError::Forbidden(format!(
            "`{}` is enrolled as a {}: it cannot send {} reports",
            who.name,
            who.kind,
            report.kind.word()
        )));
    }
    if report.key.len() != 32 || !report.key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::BadRequest(
            "the idempotency key must be 32 hex digits".to_owned(),
        ));
    }
    if let Some(k) = headers
        .get(IDEMPOTENCY_HEADER)
        .and_then(|v| v.to_str().ok())
        && k != report.key
    {
        return Err(ApiError::BadRequest(
            "the Idempotency-Key header differs from the report's key".to_owned(),
        ));
    }
    if let Err(wait) = app.take_token(&who.name) {
        return Err(ApiError::RateLimited(wait));
    }
    let outbox = OutboxHeaders {
        depth: header_u64(headers, OUTBOX_DEPTH_HEADER),
        dropped: header_u64(headers, OUTBOX_DROPPED_HEADER),
        store: store_id(headers),
    };
    // A value the report marks sensitive is neither stored nor shown, even
    // if a host's builder sent it (the stored body is the report as taken);
    // warnings past what a host sends are cut (`bound_warnings`).
    let cut = bound_warnings(&mut report.warnings);
    let withheld;
    let text = if report.withhold_sensitive() | cut {
        withheld = serde_json::to_string(&report)
            .map_err(|e| ApiError::BadRequest(format!("the report cannot be encoded: {e}")))?;
        withheld.as_str()
    } else {
        text
    };
    let now = app.now();
    // A host's clock may run ahead of the server's (a machine booted with
    // a wrong clock, before NTP): a report is never taken as newer than its
    // arrival. Else one report dated next year made every later report of
    // the host "late" until then (its state, findings and drift clusters
    // frozen, the fleet's latest revision stuck on it) and kept the host
    // from ever going stale in between. The stored body keeps the host's
    // own time.
    report.finished_at = report.finished_at.min(now);
    // Likewise the sampling round it says it deep-checked in: one still to
    // come counted the host as deep-checked in every period until then,
    // and never overdue, whatever it did meanwhile.
    if let (Some(used), Some(plan)) = (report.sampling.as_mut(), app.config.sampling_plan(now)) {
        used.round = used.round.min(plan.round);
    }
    let fresh = app
        .fleet
        .ingest(
            &report,
            text,
            now,
            outbox,
            app.config.retention.reports_per_host,
        )
        .await?;
    app.metrics.ingested(report.kind.word(), fresh);
    // What the host says it did with the instructions it had, then what it
    // still has to do (repeated until a report confirms it).
    crate::instructions::confirm(&app.fleet, &report.host, report.seq, &report.instructions)
        .await?;
    let instructions = crate::instructions::for_reply(&app.fleet, &report.host, now).await?;
    Ok(Reply {
        format_version: FORMAT_VERSION,
        accepted: true,
        duplicate: !fresh,
        sampling: app.config.sampling_plan(now),
        instructions,
        // A host sends its pass's warnings, and what its apply verified,
        // only to a server that says it takes them: a server that predates
        // a field refuses a report holding it (unknown field).
        takes: vec![
            datum_fleet::report::TAKES_WARNINGS.to_owned(),
            datum_fleet::report::TAKES_VERIFIED_EXCEPT.to_owned(),
        ],
    })
}

/// The most warnings of one report the server keeps and shows: what a
/// host sends at most (`datum_reporting`'s `pass_warnings`: the first
/// [`datum_fleet::report::WARNINGS_KEPT`], then a line counting the rest
/// and one counting those naming a sensitive resource).
pub const WARNINGS_TAKEN: usize = datum_fleet::report::WARNINGS_KEPT + 2;

/// The longest warning the server keeps, in bytes: what a host sends at
/// most ([`datum_fleet::report::WARNING_KEPT`] and the `…` of its cut).
pub const WARNING_TAKEN: usize = datum_fleet::report::WARNING_KEPT + '…'.len_utf8();

/// Cuts a report's warnings to what a host sends at most (at most
/// [`WARNINGS_TAKEN`] of [`WARNING_TAKEN`] bytes, the last then counting
/// those left out), whatever the host sent: they are words to read, not
/// worth refusing the report (and the drift it tells of) over, but a
/// modified host could otherwise fill the report's whole size limit with
/// them, stored and shown on the host's page. Whether it cut anything.
pub fn bound_warnings(warnings: &mut Vec<String>) -> bool {
    let mut cut = false;
    if warnings.len() > WARNINGS_TAKEN {
        let left_out = warnings.len() - (WARNINGS_TAKEN - 1);
        warnings.truncate(WARNINGS_TAKEN - 1);
        warnings.push(format!(
            "{left_out} more warning(s) left out by the server (a host sends at most {WARNINGS_TAKEN})"
        ));
        cut = true;
    }
    for warning in warnings.iter_mut() {
        if warning.len() > WARNING_TAKEN {
            *warning = datum_fleet::report::bounded(warning, datum_fleet::report::WARNING_KEPT);
            cut = true;
        }
    }
    cut
}

/// The longest interval a report may state (a century): the stale
/// arithmetic adds interval × factor to a time, which overflows
/// PostgreSQL's bigint (an error for the whole `stale` view) long before
/// SQLite's (which turns it into a float) on larger ones.
pub const INTERVAL_MAX_S: u64 = 100 * 366 * 86_400;

/// Refuses numbers no host's clock or configuration makes, which the views'
/// arithmetic cannot take: a finish before 1970, an interval over a century.
fn check_numbers(report: &Report) -> Result<(), ApiError> {
    if report.finished_at < 0 {
        return Err(ApiError::BadRequest(format!(
            "finished_at {} is before 1970: the host's clock is wrong",
            report.finished_at
        )));
    }
    let mut intervals = std::iter::once(report.expected_interval_s)
        .chain(report.classes.iter().map(|c| c.interval_s));
    if let Some(i) = intervals.find(|i| *i > INTERVAL_MAX_S) {
        return Err(ApiError::BadRequest(format!(
            "an interval of {i} s is longer than a century ({INTERVAL_MAX_S} s)"
        )));
    }
    Ok(())
}

/// Whether JSON text holds the escape of a NUL character (`\u0000`; JSON
/// cannot hold a raw one): an escape is one when an odd number of
/// backslashes leads to it (`\\u0000` is a backslash and `u0000`).
fn holds_nul(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find("u0000").map(|i| i + from) {
        let backslashes = bytes[..i].iter().rev().take_while(|b| **b == b'\\').count();
        if backslashes % 2 == 1 {
            return true;
        }
        from = i + 1;
    }
    false
}

/// A report's JSON, parsed once. Only when that fails is it read again,
/// for the better message: another format version, or not JSON at all.
fn parse_report(text: &str) -> Result<Report, ApiError> {
    let unsupported = |version: Option<u64>| {
        ApiError::BadRequest(format!(
            "report format_version {} is not supported (this server takes {FORMAT_VERSION})",
            version.map_or_else(|| "(missing)".to_owned(), |v| v.to_string())
        ))
    };
    match serde_json::from_str::<Report>(text) {
        Ok(r) if r.format_version == FORMAT_VERSION => Ok(r),
        Ok(r) => Err(unsupported(Some(u64::from(r.format_version)))),
        Err(e) => {
            let version = serde_json::from_str::<serde_json::Value>(text)
                .map_err(|not_json| {
                    ApiError::BadRequest(format!("the report is not JSON: {not_json}"))
                })?
                .get("format_version")
                .and_then(serde_json::Value::as_u64);
            if version != Some(u64::from(FORMAT_VERSION)) {
                return Err(unsupported(version));
            }
            Err(ApiError::BadRequest(format!(
                "the report is malformed: {e}"
            )))
        }
    }
}

async fn hosts<B: Backend>(
    State(app): State<Arc<App<B>>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    app.admin(&headers).await?;
    // The document is written from pre-rendered rows, not built and then
    // serialised (10,000 hosts: a few MB).
    let body = app.fleet.hosts_json(&app.staleness()).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

async fn stale<B: Backend>(
    State(app): State<Arc<App<B>>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    app.admin(&headers).await?;
    Ok(Json(app.fleet.stale(&app.staleness()).await?).into_response())
}

/// The query string's parameters (a malformed one is a 400 in JSON, like
/// every other error).
fn query<T: serde::de::DeserializeOwned>(raw: Option<&str>) -> Result<T, ApiError> {
    serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| ApiError::BadRequest(format!("bad query string: {e}")))
}

#[derive(Debug, Deserialize)]
struct RolloutQuery {
    revision: Option<String>,
}

async fn rollout<B: Backend>(
    State(app): State<Arc<App<B>>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    app.admin(&headers).await?;
    let q: RolloutQuery = query(raw.as_deref())?;
    let revision = match q.revision.filter(|r| !r.is_empty()) {
        Some(r) => Some(
            app.fleet
                .revision_named(&r)
                .await?
                .pick(&r)
                .map_err(ApiError::BadRequest)?,
        ),
        None => None,
    };
    let body = app.fleet.rollout_json(revision.as_deref()).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// A page of a paged list, as the web view's hosts table and drift page
/// take it (`views::Paging::of`).
#[derive(Debug, Deserialize)]
struct PageQuery {
    page: Option<usize>,
    per: Option<usize>,
}

async fn drift<B: Backend>(
    State(app): State<Arc<App<B>>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    app.admin(&headers).await?;
    let q: PageQuery = query(raw.as_deref())?;
    let body = app.fleet.drift_json(app.now(), q.page, q.per).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

async fn sampling<B: Backend>(
    State(app): State<Arc<App<B>>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    app.admin(&headers).await?;
    let plan = app.config.sampling_plan(app.now());
    Ok(Json(app.fleet.sampling(plan.as_ref()).await?).into_response())
}

#[derive(Debug, Deserialize)]
struct HistoryQuery {
    limit: Option<u32>,
}

async fn history<B: Backend>(
    State(app): State<Arc<App<B>>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    app.admin(&headers).await?;
    let q: HistoryQuery = query(raw.as_deref())?;
    let limit = q.limit.unwrap_or(20).clamp(1, 1000);
    match app.fleet.history(&name, limit).await? {
        Some(h) => Ok(Json(h).into_response()),
        None => Err(ApiError::NotFound(format!(
            "no host or stack named `{name}`"
        ))),
    }
}

async fn metrics<B: Backend>(
    State(app): State<Arc<App<B>>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    app.admin(&headers).await?;
    let text = app.metrics.render(&app).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document().to_string(),
    )
        .into_response()
}

async fn healthz<B: Backend>(State(app): State<Arc<App<B>>>) -> Response {
    match app.fleet.latest_revision().await {
        Ok(_) => Json(serde_json::json!({"status": "ok", "store": app.fleet.backend().name()}))
            .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "unavailable", "error": e.to_string()})),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::holds_nul;

    #[test]
    fn a_nul_escape_is_found_and_an_escaped_backslash_is_not_one() {
        assert!(holds_nul(r#"{"a": "x\u0000y"}"#));
        assert!(holds_nul(r#"{"a": "\\\u0000"}"#), "a backslash, then NUL");
        assert!(!holds_nul(r#"{"a": "\\u0000"}"#), "a backslash, then u0000");
        assert!(!holds_nul(r#"{"a": "u0000", "b": "\u0001"}"#));
        // What serde_json writes for a NUL is found.
        let json = serde_json::to_string(&serde_json::json!({"a": "x\0y"})).unwrap();
        assert!(holds_nul(&json), "{json}");
        let json = serde_json::to_string(&serde_json::json!({"a": "\\u0000"})).unwrap();
        assert!(!holds_nul(&json), "{json}");
    }
}
