//! The fleet benchmark's load generator and query timer (`bench/fleet.sh`
//! runs it; it is not a test). A small compiled client, so the machine's
//! two cores go to the server and the database, not to the generator.
//!
//! ```text
//! fleet-load ingest URL CA --hosts N --count C [--concurrency 64] [--fresh-connections]
//!                          [--pid SERVER_PID] [--seq-offset K] [--max-seconds 600]
//! fleet-load query URL CA --admin TOKEN [--requests 200] [--max-seconds 180]
//! ```
//!
//! `ingest`: `--concurrency` simulated hosts deliver at once, each on its own
//! keep-alive HTTPS connection (or a new connection and TLS handshake per
//! report with `--fresh-connections`, as a one-shot `datum apply` does),
//! each waiting for its answer before sending the next report, as a host's
//! outbox does. Reports are realistic for a drifted host (500 resources as
//! counts, 20 findings, 5 Trees, 8 classes, labels: about 5.8 KB), for
//! hosts `host-00000`... with the tokens `fleet-load.py tokens` enrolled.
//! `query`: sequential requests of each view with the admin token, the
//! whole answer read. Both print one JSON line; every loop is bounded by
//! count and time, and only loopback targets are accepted.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark tool: a failure to set up is a panic with its message"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        usage();
    };
    let opts = Opts::parse(rest);
    match cmd.as_str() {
        "ingest" => ingest(&opts),
        "query" => query(&opts),
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: fleet-load ingest URL CA --hosts N --count C [--concurrency N] [--fresh-connections] [--pid P] [--seq-offset K]\n       fleet-load query URL CA --admin TOKEN [--requests N] [--ingest-between]"
    );
    std::process::exit(2)
}

#[derive(Debug)]
struct Opts {
    url: String,
    ca: String,
    hosts: u64,
    count: u64,
    concurrency: usize,
    fresh: bool,
    pid: Option<u32>,
    seq_offset: u64,
    max_seconds: u64,
    admin: String,
    requests: usize,
    /// Query mode: store one report (untimed) before each request, so no
    /// answer is served from what the server kept.
    ingest_between: bool,
}

impl Opts {
    fn parse(args: &[String]) -> Opts {
        let mut o = Opts {
            url: String::new(),
            ca: String::new(),
            hosts: 10_000,
            count: 10_000,
            concurrency: 64,
            fresh: false,
            pid: None,
            seq_offset: 0,
            max_seconds: 600,
            admin: String::new(),
            requests: 200,
            ingest_between: false,
        };
        let mut positional = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = || it.next().cloned().unwrap_or_else(|| usage());
            match a.as_str() {
                "--hosts" => o.hosts = value().parse().unwrap_or_else(|_| usage()),
                "--count" => o.count = value().parse().unwrap_or_else(|_| usage()),
                "--concurrency" => o.concurrency = value().parse().unwrap_or_else(|_| usage()),
                "--fresh-connections" => o.fresh = true,
                "--pid" => o.pid = Some(value().parse().unwrap_or_else(|_| usage())),
                "--seq-offset" => o.seq_offset = value().parse().unwrap_or_else(|_| usage()),
                "--max-seconds" => o.max_seconds = value().parse().unwrap_or_else(|_| usage()),
                "--admin" => o.admin = value(),
                "--requests" => o.requests = value().parse().unwrap_or_else(|_| usage()),
                "--ingest-between" => o.ingest_between = true,
                _ if a.starts_with("--") => usage(),
                _ => positional.push(a.clone()),
            }
        }
        let [url, ca] = <[String; 2]>::try_from(positional).unwrap_or_else(|_| usage());
        let host = url
            .strip_prefix("https://")
            .and_then(|r| r.split(['/', ':']).next())
            .unwrap_or("");
        if !matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
            eprintln!("fleet-load: refusing a non-loopback target {url}");
            std::process::exit(2);
        }
        o.url = url.trim_end_matches('/').to_owned();
        o.ca = ca;
        o
    }
}

/// An HTTPS agent that trusts only `ca` (one keep-alive connection).
fn agent(ca: &str) -> ureq::Agent {
    let pem = std::fs::read(ca).unwrap();
    let roots: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
        .filter_map(|i| match i {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    let tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .new_agent()
}

fn token(host: &str) -> String {
    format!(
        "dtm_h_{}",
        hex(&Sha256::digest(format!("bench-{host}").as_bytes()))
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn host_name(i: u64) -> String {
    format!("host-{i:05}")
}

/// The report of a drifted host (the same shape as `fleet-load.py`'s), with
/// `@KEY@`, `@HOST@`, `@SEQ@`, `@STARTED@` and `@FINISHED@` to fill in.
fn template() -> String {
    let findings: Vec<serde_json::Value> = (0..20)
        .map(|n| {
            let subject = format!("File[conf-{n:03}]");
            serde_json::json!({
                "subject": subject, "category": "changed_outside", "class": "normal",
                "paths": ["content", "mode"],
                "signature": &hex(&Sha256::digest(subject.as_bytes()))[..16],
                "observed": &hex(&Sha256::digest(format!("obs{}", n % 7).as_bytes()))[..16],
                "first_seen": 1_764_000_000,
            })
        })
        .collect();
    let trees: Vec<serde_json::Value> = (0..5)
        .map(|t| {
            serde_json::json!({"resource": format!("Tree[t{t}]"), "declared": "b3".repeat(32),
                "observed": if t > 0 { "b3".repeat(32) } else { "c4".repeat(32) }})
        })
        .collect();
    let classes: Vec<serde_json::Value> = (0..8)
        .map(|c| serde_json::json!({"class": format!("c{c}"), "interval_s": 1800, "bound_ms": 1_800_400, "resources": 62}))
        .collect();
    let v = serde_json::json!({
        "format_version": 1, "key": "@KEY@", "seq": "@SEQ@", "kind": "check", "host": "@HOST@",
        "labels": {"role": "web", "env": "prod", "nginx_version": "1.24", "dc": "fra1"},
        "datum_version": "0.1.0", "revision": format!("git:{}", "ab".repeat(20)), "catalogue": "cd".repeat(16),
        "started_at": "@STARTED@", "finished_at": "@FINISHED@", "duration_ms": 412, "exit_code": 2,
        "classes_checked": [], "resources": 500,
        "counts": {"converged": 480, "drifted": 20, "failed": 0, "quarantined": 0, "metadata_only": 0},
        "classes": classes, "expected_interval_s": 1800,
        "validators": {}, "trees": trees, "failures": [], "findings": findings,
        "changed": [], "changed_total": 0, "quarantined": [], "sampling": null,
    });
    serde_json::to_string(&v).unwrap()
}

fn fill(template: &str, key: &str, host: &str, seq: u64, now: i64) -> String {
    template
        .replacen("\"@KEY@\"", &format!("\"{key}\""), 1)
        .replacen("\"@HOST@\"", &format!("\"{host}\""), 1)
        .replacen("\"@SEQ@\"", &seq.to_string(), 1)
        .replacen("\"@STARTED@\"", &(now - 1).to_string(), 1)
        .replacen("\"@FINISHED@\"", &now.to_string(), 1)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// A `/proc/PID/status` figure in KiB (0 if gone).
fn status_kib(pid: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// User + system CPU seconds of a process so far (`self` for this one).
fn cpu_s(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name (which may hold spaces), fields 14 and 15.
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum::<u64>() as f64 / 100.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
    (sorted[i] * 100.0).round() / 100.0
}

/// Posts one report of host number `i`; exits on anything but a 200.
fn post_one(agent: &ureq::Agent, template: &str, url: &str, i: u64, seq: u64) {
    let host = host_name(i);
    let key = hex(&Sha256::digest(format!("{host}/{seq}/between"))[..16]);
    let body = fill(template, &key, &host, seq, unix_now());
    let status = agent
        .post(&format!("{url}/v1/reports"))
        .header("Authorization", &format!("Bearer {}", token(&host)))
        .content_type("application/json")
        .send(body.as_bytes())
        .map(|r| r.status().as_u16());
    if !matches!(status, Ok(200)) {
        eprintln!("posting a report of {host} between queries: {status:?}");
        std::process::exit(1);
    }
}

fn ingest(o: &Opts) {
    let template = Arc::new(template());
    let next = Arc::new(AtomicU64::new(0));
    let stored = Arc::new(AtomicU64::new(0));
    let duplicates = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let latencies = Arc::new(Mutex::new(Vec::<f64>::new()));
    let deadline = Instant::now() + Duration::from_secs(o.max_seconds);
    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = o.pid.map(|pid| {
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(status_kib(&pid.to_string(), "VmRSS:"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    });
    let server_cpu0 = o.pid.map(|p| cpu_s(&p.to_string()));
    let load_start = load1();
    let started = Instant::now();
    let workers: Vec<_> = (0..o.concurrency)
        .map(|_| {
            let (template, next, stored, duplicates, errors, latencies) = (
                Arc::clone(&template),
                Arc::clone(&next),
                Arc::clone(&stored),
                Arc::clone(&duplicates),
                Arc::clone(&errors),
                Arc::clone(&latencies),
            );
            let (url, ca, hosts, count, fresh, seq_offset) = (
                format!("{}/v1/reports", o.url),
                o.ca.clone(),
                o.hosts,
                o.count,
                o.fresh,
                o.seq_offset,
            );
            std::thread::spawn(move || {
                let mut kept = agent(&ca);
                let mut mine = Vec::new();
                while Instant::now() < deadline {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    let host = host_name(i % hosts);
                    let seq = i / hosts + 1 + seq_offset;
                    let key = hex(&Sha256::digest(format!("{host}/{seq}/{seq_offset}"))[..16]);
                    let body = fill(&template, &key, &host, seq, unix_now());
                    if fresh {
                        kept = agent(&ca);
                    }
                    let t0 = Instant::now();
                    let answer = kept
                        .post(&url)
                        .header("Authorization", &format!("Bearer {}", token(&host)))
                        .header("Idempotency-Key", &key)
                        .content_type("application/json")
                        .send(body.as_bytes())
                        .and_then(|mut r| {
                            let status = r.status().as_u16();
                            r.body_mut().read_to_string().map(|t| (status, t))
                        });
                    mine.push(t0.elapsed().as_secs_f64() * 1000.0);
                    match answer {
                        Ok((200, text)) if text.contains("\"duplicate\":true") => {
                            duplicates.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok((200, _)) => {
                            stored.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok((status, text)) => {
                            let mut e = errors.lock().unwrap();
                            if e.len() < 5 {
                                e.push(format!("HTTP {status}: {}", &text[..text.len().min(200)]));
                            }
                            e.push(String::new());
                        }
                        Err(err) => {
                            let mut e = errors.lock().unwrap();
                            if e.len() < 5 {
                                e.push(err.to_string());
                            }
                            e.push(String::new());
                            kept = agent(&ca);
                        }
                    }
                }
                latencies.lock().unwrap().extend(mine);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let seconds = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    if let Some(s) = sampler {
        s.join().unwrap();
    }
    let mut lat = latencies.lock().unwrap().clone();
    lat.sort_by(f64::total_cmp);
    let errors = errors.lock().unwrap();
    let n_errors = errors.iter().filter(|e| e.is_empty()).count();
    let samples: Vec<&String> = errors.iter().filter(|e| !e.is_empty()).collect();
    let ok = stored.load(Ordering::Relaxed);
    let out = serde_json::json!({
        "reports": ok,
        "duplicates": duplicates.load(Ordering::Relaxed),
        "errors": n_errors,
        "error_samples": samples,
        "seconds": (seconds * 100.0).round() / 100.0,
        "reports_per_s": ((ok as f64 / seconds) * 10.0).round() / 10.0,
        "post_p50_ms": percentile(&lat, 0.5),
        "post_p99_ms": percentile(&lat, 0.99),
        "report_bytes": template.len() - 40,
        "concurrency": o.concurrency,
        "fresh_connections": o.fresh,
        "server_peak_rss_mib": o.pid.map(|p| {
            let hwm = status_kib(&p.to_string(), "VmHWM:");
            (peak.load(Ordering::Relaxed).max(hwm) as f64 / 1024.0 * 10.0).round() / 10.0
        }),
        "server_cpu_s": o.pid.zip(server_cpu0).map(|(p, c0)| ((cpu_s(&p.to_string()) - c0) * 100.0).round() / 100.0),
        "client_cpu_s": (cpu_s("self") * 100.0).round() / 100.0,
        "load1_start": load_start,
        "load1_end": load1(),
    });
    println!("{out}");
}

fn query(o: &Opts) {
    let mut out = serde_json::Map::new();
    let (poster, template) = (agent(&o.ca), template());
    // Above any sequence number a populated or ingested host holds.
    let mut seq = 1_000_000 + unix_now() as u64 % 1_000_000;
    for (name, path) in [
        ("hosts", "/v1/hosts"),
        ("rollout", "/v1/rollout"),
        ("drift", "/v1/drift"),
        ("stale", "/v1/stale"),
    ] {
        let agent = agent(&o.ca);
        let deadline = Instant::now() + Duration::from_secs(o.max_seconds);
        let mut times = Vec::new();
        let mut bytes = 0;
        let load_start = load1();
        for i in 0..o.requests + 5 {
            if Instant::now() > deadline {
                break;
            }
            if o.ingest_between {
                post_one(&poster, &template, &o.url, i as u64 % o.hosts, seq);
                seq += 1;
            }
            let t0 = Instant::now();
            let mut r = agent
                .get(&format!("{}{path}", o.url))
                .header("Authorization", &format!("Bearer {}", o.admin))
                .call()
                .unwrap();
            let status = r.status().as_u16();
            let body = r
                .body_mut()
                .with_config()
                .limit(1 << 30)
                .read_to_vec()
                .unwrap();
            let dt = t0.elapsed().as_secs_f64() * 1000.0;
            if status != 200 {
                eprintln!("{path}: HTTP {status}: {}", String::from_utf8_lossy(&body));
                std::process::exit(1);
            }
            bytes = body.len();
            // The first five warm the connection and the caches.
            if i >= 5 {
                times.push(dt);
            }
        }
        times.sort_by(f64::total_cmp);
        out.insert(
            name.to_owned(),
            serde_json::json!({
                "p50_ms": percentile(&times, 0.5),
                "p99_ms": percentile(&times, 0.99),
                "max_ms": percentile(&times, 1.0),
                "requests": times.len(),
                "bytes": bytes,
                "load1_start": load_start,
                "load1_end": load1(),
            }),
        );
    }
    println!("{}", serde_json::Value::Object(out));
}
