//! The agent's HTTP endpoint: `/metrics` (Prometheus scrape), `/healthz`
//! (liveness) and `/readyz` (readiness: alive, every class checked once since
//! start, and recording its checks). Default address `127.0.0.1:9477`,
//! loopback only.
//!
//! Owns the listening socket and one thread that answers requests. It must
//! not change anything: the endpoints read shared state only. A scrape never
//! waits for a check; it sees the last completed one.
//!
//! Any local user can connect, and the agent runs as root, so every request
//! is bounded before it costs anything: hyper 1 (on a one-thread tokio
//! runtime of its own, next to the agent's blocking loop) reads the request
//! line and headers into one buffer of [`HEAD_LIMIT`] bytes and answers
//! `431` (or `414` for a request line alone that long) the moment it is full;
//! at most [`MAX_HEADERS`] headers; a body announced larger than
//! [`BODY_LIMIT`] is answered `413` without being read; a request that is not
//! complete within [`REQUEST_TIME`] is answered `408` and closed; at most
//! [`MAX_CONNECTIONS`] are served at once (more wait in the kernel's
//! backlog); one request per connection. A 100 MB header therefore costs the
//! agent one 8 KiB buffer, not 100 MB (tests/agent.rs measures its RSS).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING, VARY};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::{Semaphore, watch};

use crate::exposition::Format;
use crate::metrics::Metrics;

/// Default `--listen` address: loopback only, so metrics are not exposed to
/// the network unless an operator says so. Port 9477 is not taken by any
/// exporter on Prometheus's default port allocation list.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9477";

/// Request line plus headers, at most (hyper's smallest buffer). A scrape's
/// request is a few hundred bytes.
pub const HEAD_LIMIT: usize = 8 * 1024;

/// Headers per request, at most.
pub const MAX_HEADERS: usize = 64;

/// Largest request body accepted (and then ignored: no endpoint reads one).
pub const BODY_LIMIT: u64 = 1024;

/// Time from accepting a connection to a complete response.
pub const REQUEST_TIME: Duration = Duration::from_secs(10);

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;

/// What `/healthz` reports: `200 ok` while the daemon loop makes progress;
/// `503` once it is stopping, or when one check has run longer than the
/// stuck limit (a read hanging on a dead mount, a lock never released), so
/// a supervisor probing liveness can restart it. While the last check could
/// not be recorded in the state store it stays `200` (a restart would not
/// free a full disk or a lock another holds) and says so: `degraded: ...`;
/// `/readyz` answers `503` then, with the same words, for a probe that asks
/// whether the agent does its whole job (a load balancer's or a monitoring
/// system's HTTP check), not whether to restart it. It answers `503`
/// (`starting: ...`) too until every class has had a complete check since
/// start, so a deploy waiting for the agent, or a readiness probe, does not
/// take an agent that has not looked at the host yet (the first check waits
/// for an apply holding the root lock, or reads a large estate) for one
/// whose metrics say the host is clean.
#[derive(Debug, Default)]
pub struct Health {
    stopping: AtomicBool,
    /// Unix seconds the check in flight started; 0 between checks.
    busy_since: AtomicU64,
    /// Seconds one check may take before the agent calls itself stuck; 0
    /// disables the limit.
    stuck_after: AtomicU64,
    /// Checks whose outcome the state store did not take, since start.
    unrecorded: AtomicU64,
    /// Whether the last check was one of them.
    last_unrecorded: AtomicBool,
    /// Whether a check has completed since start.
    first_done: AtomicBool,
    /// Classes of the loaded catalogue not checked since start (until
    /// every class has been, and a check completed: then ready for good).
    unchecked: Mutex<BTreeSet<String>>,
    /// Whether the last check could not run (its error is in the log).
    last_failed: AtomicBool,
}

impl Health {
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    pub fn set_stuck_after(&self, limit: Duration) {
        self.stuck_after.store(limit.as_secs(), Ordering::SeqCst);
    }

    /// A check starts (`Some(unix seconds)`) or ends (`None`).
    pub fn busy(&self, since: Option<u64>) {
        self.busy_since.store(since.unwrap_or(0), Ordering::SeqCst);
    }

    /// A check ended; `unrecorded` of its parts could not be recorded in
    /// the state store.
    pub fn recorded(&self, unrecorded: u64) {
        self.unrecorded.fetch_add(unrecorded, Ordering::SeqCst);
        self.last_unrecorded.store(unrecorded > 0, Ordering::SeqCst);
    }

    /// The classes of the catalogue just loaded: until each has had a
    /// complete check, the agent is not ready. Once it has been ready, a
    /// reload changes nothing (a reload that adds a class does not make
    /// the agent unready while the full pass after it runs).
    pub fn expect_classes<'a>(&self, classes: impl IntoIterator<Item = &'a str>) {
        if self.is_started() {
            return;
        }
        let mut unchecked = self.unchecked.lock().unwrap_or_else(|p| p.into_inner());
        *unchecked = classes.into_iter().map(str::to_owned).collect();
    }

    /// A check completed (not cut short) and covered `classes`.
    pub fn checked<'a>(&self, classes: impl IntoIterator<Item = &'a str>) {
        let mut unchecked = self.unchecked.lock().unwrap_or_else(|p| p.into_inner());
        for class in classes {
            unchecked.remove(class);
        }
        self.first_done.store(true, Ordering::SeqCst);
    }

    /// A check ran (`false`) or could not run at all (`true`: a lock
    /// timeout, a catalogue that cannot be read, a state store that cannot
    /// be opened; the daemon logs why).
    pub fn failed(&self, failed: bool) {
        self.last_failed.store(failed, Ordering::SeqCst);
    }

    /// Whether every class has had a complete check since start.
    fn is_started(&self) -> bool {
        self.first_done.load(Ordering::SeqCst)
            && self
                .unchecked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
    }

    /// `(healthy, text)` at `now` (Unix seconds): what `/healthz` answers.
    fn verdict(&self, now: u64) -> (bool, String) {
        let (live, _, text) = self.verdicts(now);
        (live, text)
    }

    /// `(ready, text)` at `now`: what `/readyz` answers, alive, every
    /// class checked since start, and not degraded.
    fn readiness(&self, now: u64) -> (bool, String) {
        let (_, ready, text) = self.verdicts(now);
        if !ready || self.is_started() {
            return (ready, text);
        }
        // Alive and well, but it has not looked at the host yet (`/healthz`
        // says ok: a restart would only start the wait again).
        let unchecked = self.unchecked.lock().unwrap_or_else(|p| p.into_inner());
        let which = if unchecked.is_empty() {
            String::new()
        } else {
            let names: Vec<&str> = unchecked.iter().map(String::as_str).collect();
            format!(" (not checked yet: {})", names.join(", "))
        };
        // Why it may never start: the error itself stays in the log (any
        // local user can ask).
        let failed = if self.last_failed.load(Ordering::SeqCst) {
            "; the last check could not run: the log says why"
        } else {
            ""
        };
        (
            false,
            format!(
                "starting: the first check of the host has not completed{which}; until it has, the metrics say nothing about drift{failed}\n"
            ),
        )
    }

    /// `(alive, ready, text)` at `now`.
    fn verdicts(&self, now: u64) -> (bool, bool, String) {
        if self.stopping.load(Ordering::SeqCst) {
            return (false, false, "stopping\n".to_owned());
        }
        let since = self.busy_since.load(Ordering::SeqCst);
        let limit = self.stuck_after.load(Ordering::SeqCst);
        let running = if since == 0 {
            0
        } else {
            now.saturating_sub(since)
        };
        if limit > 0 && running > limit {
            return (
                false,
                false,
                format!("stuck: one check has run for {running} s\n"),
            );
        }
        if self.last_unrecorded.load(Ordering::SeqCst) {
            let n = self.unrecorded.load(Ordering::SeqCst);
            return (
                true,
                false,
                format!(
                    "degraded: the last check could not be recorded in the state store ({n} unrecorded since the agent started): its history and fleet report are lost; the log says why\n"
                ),
            );
        }
        (true, true, "ok\n".to_owned())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct HttpError {
    pub addr: String,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// The running server; [`HttpServer::stop`] (or drop) closes it.
pub struct HttpServer {
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl HttpServer {
    /// Binds `addr` and answers on a background thread.
    pub fn start(
        addr: &str,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Result<Self, HttpError> {
        Self::start_timed(addr, metrics, health, REQUEST_TIME)
    }

    /// [`HttpServer::start`] with another time limit per request.
    fn start_timed(
        addr: &str,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        request_time: Duration,
    ) -> Result<Self, HttpError> {
        let failed = |source: std::io::Error| HttpError {
            addr: addr.to_owned(),
            source: Box::new(source),
        };
        // Bound here, so a taken address is an error of `start`.
        let listener = std::net::TcpListener::bind(addr).map_err(failed)?;
        listener.set_nonblocking(true).map_err(failed)?;
        let bound = listener.local_addr().map_err(failed)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(failed)?;
        let (stop, stopped) = watch::channel(false);
        let thread = std::thread::Builder::new()
            .name("datum-agent-http".into())
            .spawn(move || {
                runtime.block_on(serve(listener, metrics, health, stopped, request_time));
            })
            .map_err(failed)?;
        Ok(Self {
            stop,
            thread: Some(thread),
            addr: bound,
        })
    }

    /// The address actually bound (port 0 picks a free one).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The accept loop: one task per connection, at most [`MAX_CONNECTIONS`].
async fn serve(
    listener: std::net::TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    mut stopped: watch::Receiver<bool>,
    request_time: Duration,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        // A free slot first: beyond the limit, connections wait in the
        // kernel's backlog, costing the agent nothing.
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot,
            _ = stopped.changed() => return,
        };
        let Ok(slot) = slot else { return };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors or a connection reset before accept:
                // try the next one a moment later.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped.changed() => return,
        };
        let metrics = Arc::clone(&metrics);
        let health = Arc::clone(&health);
        tokio::spawn(async move {
            connection(stream, metrics, health, request_time).await;
            drop(slot);
        });
    }
}

/// One connection, one request, within [`REQUEST_TIME`].
async fn connection(
    stream: tokio::net::TcpStream,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    request_time: Duration,
) {
    use tokio::io::AsyncWriteExt as _;
    // A second handle on the socket, to answer 408 once hyper is dropped.
    let Ok(std_stream) = stream.into_std() else {
        return;
    };
    let (Ok(for_hyper), Ok(for_timeout)) = (
        std_stream
            .try_clone()
            .and_then(tokio::net::TcpStream::from_std),
        tokio::net::TcpStream::from_std(std_stream),
    ) else {
        return;
    };
    let answered = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&answered);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        seen.store(true, Ordering::SeqCst);
        let response = answer(&request, &metrics, &health);
        async move { Ok::<_, std::convert::Infallible>(response) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .max_buf_size(HEAD_LIMIT)
        .max_headers(MAX_HEADERS)
        .keep_alive(false);
    let serving = builder.serve_connection(TokioIo::new(for_hyper), service);
    if tokio::time::timeout(request_time, serving).await.is_err()
        && !answered.load(Ordering::SeqCst)
    {
        // The request never arrived whole: say so, then close.
        let mut late = for_timeout;
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            late.write_all(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            ),
        )
        .await;
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
}

/// The response to one request (no body is ever read).
fn answer(
    request: &Request<Incoming>,
    metrics: &Metrics,
    health: &Health,
) -> Response<Full<Bytes>> {
    let announced = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if announced.is_some_and(|n| n > BODY_LIMIT)
        || request.headers().contains_key(TRANSFER_ENCODING)
    {
        return text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n");
    }
    let get = matches!(*request.method(), Method::GET | Method::HEAD);
    // The query string does not select anything.
    match (get, request.uri().path()) {
        (true, "/metrics") => {
            let format =
                Format::negotiate(request.headers().get(ACCEPT).and_then(|v| v.to_str().ok()));
            let mut r = text(StatusCode::OK, metrics.encode_as(format));
            r.headers_mut().insert(
                CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(format.content_type()),
            );
            r.headers_mut()
                .insert(VARY, hyper::header::HeaderValue::from_static("Accept"));
            r
        }
        (true, "/healthz") => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            match health.verdict(now) {
                (true, body) => text(StatusCode::OK, body),
                (false, body) => text(StatusCode::SERVICE_UNAVAILABLE, body),
            }
        }
        (true, "/readyz") => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            match health.readiness(now) {
                (true, body) => text(StatusCode::OK, body),
                (false, body) => text(StatusCode::SERVICE_UNAVAILABLE, body),
            }
        }
        (true, "/") => text(StatusCode::OK, "datum agent: /metrics, /healthz, /readyz\n"),
        (false, _) => text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n"),
        (true, _) => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let _ = s.write_all(request);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    fn get(addr: SocketAddr, path: &str) -> String {
        exchange(
            addr,
            format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes(),
        )
    }

    fn server() -> (HttpServer, Arc<Metrics>, Arc<Health>) {
        let metrics = Arc::new(Metrics::new("9.9.9"));
        let health = Arc::new(Health::default());
        let server =
            HttpServer::start("127.0.0.1:0", Arc::clone(&metrics), Arc::clone(&health)).unwrap();
        (server, metrics, health)
    }

    #[test]
    fn serves_metrics_and_health_then_stops() {
        let (server, _metrics, health) = server();
        let addr = server.addr();
        let m = get(addr, "/metrics");
        assert!(
            m.starts_with("HTTP/1.1 200") || m.starts_with("HTTP/1.0 200"),
            "{m}"
        );
        // No Accept header: the classic text format, which promtool reads.
        assert!(m.contains("text/plain; version=0.0.4"), "{m}");
        assert!(m.contains("# TYPE datum_build_info gauge"), "{m}");
        assert!(m.contains("datum_build_info{version=\"9.9.9\"} 1"));
        assert!(!m.contains("# EOF"), "{m}");
        let om = exchange(
            addr,
            b"GET /metrics HTTP/1.0\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n",
        );
        assert!(om.contains("application/openmetrics-text"), "{om}");
        assert!(om.contains("# TYPE datum_build info"), "{om}");
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(get(addr, "/healthz").contains("ok"));
        // Alive, but not ready before its first check.
        let starting = get(addr, "/readyz");
        assert!(
            starting.contains(" 503 ") && starting.contains("starting: "),
            "{starting}"
        );
        health.checked([]);
        assert!(get(addr, "/readyz").contains(" 200 "));
        assert!(get(addr, "/nope").contains(" 404 "));
        assert!(exchange(addr, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n").contains(" 405 "));
        // A check the state store did not take: alive, not ready.
        health.recorded(1);
        let (live, ready) = (get(addr, "/healthz"), get(addr, "/readyz"));
        assert!(
            live.contains(" 200 ") && live.contains("degraded: "),
            "{live}"
        );
        assert!(
            ready.contains(" 503 ") && ready.contains("degraded: "),
            "{ready}"
        );
        health.stopping();
        assert!(get(addr, "/healthz").contains(" 503 "));
        assert!(get(addr, "/readyz").contains(" 503 "));
        server.stop();
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "still listening on {addr}"
        );
    }

    #[test]
    fn oversized_heads_and_bodies_are_refused() {
        let (server, _, _) = server();
        let addr = server.addr();
        let big = format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(HEAD_LIMIT * 4)
        );
        assert!(exchange(addr, big.as_bytes()).starts_with("HTTP/1.1 431"));
        let many: String = (0..MAX_HEADERS + 10)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect();
        let many = format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{many}\r\n");
        assert!(exchange(addr, many.as_bytes()).starts_with("HTTP/1.1 431"));
        let body = b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nxx";
        assert!(exchange(addr, body).starts_with("HTTP/1.1 413"));
    }

    #[test]
    fn a_request_that_never_completes_gets_408() {
        let limit = Duration::from_millis(500);
        let server = HttpServer::start_timed(
            "127.0.0.1:0",
            Arc::new(Metrics::new("0")),
            Arc::default(),
            limit,
        )
        .unwrap();
        let mut s = std::net::TcpStream::connect(server.addr()).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        s.set_read_timeout(Some(limit * 20)).unwrap();
        let started = std::time::Instant::now();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 408"), "{out:?}");
        assert!(started.elapsed() < limit * 10);
    }

    #[test]
    fn a_check_running_past_the_limit_is_unhealthy() {
        let h = Health::default();
        assert!(h.verdict(1000).0);
        h.busy(Some(900));
        // No limit set: a long check is not an illness.
        assert!(h.verdict(1000).0);
        h.set_stuck_after(Duration::from_secs(60));
        let (ok, text) = h.verdict(1000);
        assert!(!ok);
        assert_eq!(text, "stuck: one check has run for 100 s\n");
        assert!(h.verdict(950).0);
        h.busy(None);
        assert!(h.verdict(5000).0);
    }

    /// A check the state store did not take leaves the agent alive (200)
    /// but degraded, saying so, until a check is recorded again.
    #[test]
    fn an_unrecorded_check_is_degraded_until_one_is_recorded() {
        let h = Health::default();
        h.checked([]);
        h.recorded(0);
        assert_eq!(h.verdict(1000), (true, "ok\n".to_owned()));
        h.recorded(1);
        h.recorded(1);
        let (ok, text) = h.verdict(1000);
        assert!(ok);
        assert!(
            text.starts_with(
                "degraded: the last check could not be recorded in the state store (2 unrecorded"
            ),
            "{text}"
        );
        h.recorded(0);
        assert_eq!(h.verdict(1000), (true, "ok\n".to_owned()));
        assert_eq!(h.readiness(1000), (true, "ok\n".to_owned()));
        h.recorded(1);
        // Alive, not ready: `/readyz` says why.
        let (ready, text) = h.readiness(1000);
        assert!(!ready);
        assert!(text.starts_with("degraded: "), "{text}");
        h.stopping();
        assert!(!h.verdict(1000).0);
        assert!(!h.readiness(1000).0);
    }

    /// `/readyz` answered `200 ok` from the moment the endpoint was up,
    /// before the first check had looked at anything (a first check
    /// waiting for an apply's root lock, or reading a large estate): a
    /// deploy or a probe waiting for readiness took an agent that had not
    /// checked the host for one that had. Not ready until every class of
    /// the catalogue has had a complete check; alive meanwhile.
    #[test]
    fn not_ready_until_every_class_has_been_checked() {
        let h = Health::default();
        h.expect_classes(["critical", "normal"]);
        let (ready, text) = h.readiness(1000);
        assert!(!ready);
        assert_eq!(
            text,
            "starting: the first check of the host has not completed (not checked yet: critical, normal); until it has, the metrics say nothing about drift\n"
        );
        assert_eq!(h.verdict(1000), (true, "ok\n".to_owned()));
        h.checked(["normal"]);
        let (ready, text) = h.readiness(1000);
        assert!(!ready);
        assert!(text.contains("(not checked yet: critical)"), "{text}");
        // A reload before then: its classes are the ones waited for.
        h.expect_classes(["critical", "web"]);
        h.checked(["critical"]);
        assert!(h.readiness(1000).1.contains("(not checked yet: web)"));
        h.checked(["web"]);
        assert_eq!(h.readiness(1000), (true, "ok\n".to_owned()));
        // Ready for good: a reload adding a class changes nothing.
        h.expect_classes(["critical", "web", "new"]);
        assert_eq!(h.readiness(1000), (true, "ok\n".to_owned()));
        // Degraded or stopping still say so.
        h.recorded(1);
        assert!(h.readiness(1000).1.starts_with("degraded: "));
        // Degraded before the first check is degraded, not starting.
        let fresh = Health::default();
        fresh.expect_classes(["a"]);
        fresh.recorded(1);
        assert!(fresh.readiness(1000).1.starts_with("degraded: "));
    }

    /// An agent whose checks could not run (not a lock timeout only: a
    /// state store it cannot open, a catalogue it cannot read) answered
    /// `starting: ...` for ever without a word of why. Once one has failed
    /// the answer says so and points to the log (never the error itself);
    /// a check that runs drops the words again.
    #[test]
    fn starting_says_when_the_last_check_failed() {
        let h = Health::default();
        h.expect_classes(["normal"]);
        h.failed(true);
        let (ready, text) = h.readiness(1000);
        assert!(!ready);
        assert_eq!(
            text,
            "starting: the first check of the host has not completed (not checked yet: normal); until it has, the metrics say nothing about drift; the last check could not run: the log says why\n"
        );
        assert_eq!(h.verdict(1000), (true, "ok\n".to_owned()));
        h.failed(false);
        assert!(!h.readiness(1000).1.contains("could not run"));
        h.failed(true);
        h.checked(["normal"]);
        h.failed(false);
        assert_eq!(h.readiness(1000), (true, "ok\n".to_owned()));
    }

    #[test]
    fn a_taken_address_is_an_error_naming_it() {
        let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = first.local_addr().unwrap().to_string();
        let metrics = Arc::new(Metrics::new("0"));
        let err = HttpServer::start(&addr, metrics, Arc::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains(&addr), "{err}");
    }
}
