//! The agent's HTTP endpoint: `/metrics` (Prometheus scrape) and `/healthz`
//! (liveness). Default address `127.0.0.1:9477`, loopback only.
//!
//! Owns the listening socket and one thread that answers requests. It must
//! not change anything: both endpoints read shared state only. A scrape never
//! waits for a check; it sees the last completed one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::metrics::Metrics;

/// Default `--listen` address: loopback only, so metrics are not exposed to
/// the network unless an operator says so. Port 9477 is not taken by any
/// exporter on Prometheus's default port allocation list.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9477";

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What `/healthz` reports: `200 ok` while the daemon loop makes progress;
/// `503` once it is stopping, or when one check has run longer than the
/// stuck limit (a read hanging on a dead mount, a lock never released), so
/// a supervisor probing liveness can restart it.
#[derive(Debug, Default)]
pub struct Health {
    stopping: AtomicBool,
    /// Unix seconds the check in flight started; 0 between checks.
    busy_since: AtomicU64,
    /// Seconds one check may take before the agent calls itself stuck; 0
    /// disables the limit.
    stuck_after: AtomicU64,
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

    /// `(healthy, text)` at `now` (Unix seconds).
    fn verdict(&self, now: u64) -> (bool, String) {
        if self.stopping.load(Ordering::SeqCst) {
            return (false, "stopping\n".to_owned());
        }
        let since = self.busy_since.load(Ordering::SeqCst);
        let limit = self.stuck_after.load(Ordering::SeqCst);
        let running = if since == 0 {
            0
        } else {
            now.saturating_sub(since)
        };
        if limit > 0 && running > limit {
            return (false, format!("stuck: one check has run for {running} s\n"));
        }
        (true, "ok\n".to_owned())
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
    server: Arc<tiny_http::Server>,
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
        let server = tiny_http::Server::http(addr).map_err(|source| HttpError {
            addr: addr.to_owned(),
            source,
        })?;
        let bound = server.server_addr().to_ip().ok_or_else(|| HttpError {
            addr: addr.to_owned(),
            source: "not an IP address".into(),
        })?;
        let server = Arc::new(server);
        let serving = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("datum-agent-http".into())
            .spawn(move || {
                for request in serving.incoming_requests() {
                    answer(request, &metrics, &health);
                }
            })
            .map_err(|e| HttpError {
                addr: addr.to_owned(),
                source: Box::new(e),
            })?;
        Ok(Self {
            server,
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
        self.server.unblock();
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

fn header(name: &str, value: &str) -> Option<tiny_http::Header> {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn answer(request: tiny_http::Request, metrics: &Metrics, health: &Health) {
    use tiny_http::{Method, Response};
    let get = matches!(request.method(), Method::Get | Method::Head);
    // The query string does not select anything.
    let path = request.url().split('?').next().unwrap_or("").to_owned();
    let response = match (get, path.as_str()) {
        (true, "/metrics") => {
            let mut r = Response::from_string(metrics.encode());
            if let Some(h) = header("Content-Type", OPENMETRICS) {
                r = r.with_header(h);
            }
            r
        }
        (true, "/healthz") => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            match health.verdict(now) {
                (true, text) => Response::from_string(text),
                (false, text) => Response::from_string(text).with_status_code(503),
            }
        }
        (true, "/") => Response::from_string("datum agent: /metrics, /healthz\n"),
        (false, _) => Response::from_string("method not allowed\n").with_status_code(405),
        (true, _) => Response::from_string("not found\n").with_status_code(404),
    };
    // A client that hung up is not our problem.
    let _ = request.respond(response);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_metrics_and_health_then_stops() {
        let metrics = Arc::new(Metrics::new("9.9.9"));
        let health = Arc::new(Health::default());
        let server =
            HttpServer::start("127.0.0.1:0", Arc::clone(&metrics), Arc::clone(&health)).unwrap();
        let addr = server.addr();
        let m = get(addr, "/metrics");
        assert!(
            m.starts_with("HTTP/1.1 200") || m.starts_with("HTTP/1.0 200"),
            "{m}"
        );
        assert!(m.contains("application/openmetrics-text"));
        assert!(m.contains("datum_build_info{version=\"9.9.9\"} 1"));
        assert!(get(addr, "/healthz").contains("ok"));
        assert!(get(addr, "/nope").contains(" 404 "));
        health.stopping();
        assert!(get(addr, "/healthz").contains(" 503 "));
        server.stop();
        // tiny_http closes its listener from its own acceptor thread, a
        // moment after the server is dropped.
        let closed = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            std::net::TcpStream::connect(addr).is_err()
        });
        assert!(closed, "still listening on {addr}");
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
