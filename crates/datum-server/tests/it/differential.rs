//! The two stores side by side: the same reports delivered, in the same
//! order and at the same (test) clock, to a server on the embedded SQLite
//! and to one on PostgreSQL (its default database, and one whose collation
//! is a language's rather than byte order), then every read the router
//! serves asked of each, answers compared byte for byte.
//!
//! The reports are made deterministically from a seed and meant to find
//! where the two databases differ: names and revisions that differ only by
//! case, a trailing space or an accent, or that a language's collation and
//! byte order sort apart (`a-b a_b aB ab B`); `%`, `_` and `\` (LIKE's
//! special characters); control characters other than NUL; very long and
//! empty strings; equal timestamps everywhere (ties in every ordering);
//! integers at the ends of their types; findings in many classes, some of
//! them sensitive (their values carry a canary that must appear in no
//! answer); rollouts of several revisions with failures whose messages
//! differ between hosts of one group; stale and never-seen hosts; sampling
//! rounds; quarantines asked through the web view and confirmed by the
//! hosts; retention cutting reports and revisions.
//!
//! What is taken out before comparing, and why (nothing else is):
//! - the store's name, which the pages' footer and `/healthz` print;
//! - instruction keys, drawn at random when an operator asks (each replaced
//!   by its rank of first appearance, so the same key is still the same);
//! - the order of the samples of a metric family in `/metrics`, which the
//!   exposition library writes from a hash map (the lines are sorted);
//! - the `Server-Timing` header (headers are not compared at all: only the
//!   status and the body).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use axum::body::Body;
use axum::http::{Request, header};
use datum_fleet::{
    ClassBound, Failure, FieldChange, Finding, InstructionDone, PendingChange, Quarantined, Report,
    ReportKind, SamplingUsed, TreeFingerprint, Writer,
};
use datum_server::api::{App, router};
use datum_server::config::{Sampling, ServerConfig};
use datum_server::fleet::Fleet;
use datum_server::store::Backend;
use tower::ServiceExt as _;

const ADMIN: &str = "dtm_a_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// The start of the scenario's clock.
const T0: i64 = 1_800_000_000;

/// Text that a report marks sensitive: no answer may hold it.
const CANARY: &str = "CANARY-SENSITIVE-7f3a";

/// The hosts and stacks: names a byte comparison and a collation order
/// apart, names differing only by case, a trailing space or an accent,
/// LIKE's special characters, a control character, a long name.
fn names() -> Vec<(String, &'static str)> {
    let mut v: Vec<(String, &'static str)> = [
        "web-01",
        "Web-01",
        "web-01 ",
        "web-02",
        "WEB-02",
        "a-b",
        "a_b",
        "aB",
        "ab",
        "B",
        "b",
        "Zed",
        "zed",
        "émile",
        "Émile",
        "emile",
        "straße",
        "STRASSE",
        "日本-01",
        "host%1",
        "host_1",
        "host\\1",
        "hostx1",
        "tab\tname",
        "bell\u{7}name",
        "space name",
        "ﬁle",
        "ⅷ",
        "db-10",
        "db-9",
        "db-100",
    ]
    .iter()
    .map(|n| ((*n).to_owned(), "host"))
    .collect();
    v.push(("x".repeat(300), "host"));
    v.push(("stack-Prod".to_owned(), "stack"));
    v.push(("stack-prod".to_owned(), "stack"));
    v.push(("stack_%".to_owned(), "stack"));
    // Enrolled, never heard from.
    v.push(("silent".to_owned(), "host"));
    v.push(("Silent".to_owned(), "host"));
    v
}

fn token(i: usize) -> String {
    format!("dtm_h_{i:064x}")
}

/// splitmix64: the scenario's randomness, the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len())]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

const REVISIONS: [&str; 10] = [
    "git:aaaa",
    "git:AAAA",
    "git:aaaa ",
    "git:a-b",
    "git:a_b",
    "git:aB",
    "git:B",
    "stamp:ß",
    "stamp:%_\\",
    "",
];

const LABEL_VALUES: [&str; 10] = [
    "web", "Web", "web ", "", "ß", "ss", "a_b", "a%b", "a\\b", "日本",
];

const CLASSES: [&str; 7] = ["critical", "normal", "Normal", "slow", "ünï", "", "a_b"];

const SUBJECTS: [&str; 12] = [
    "File[motd]",
    "File[Motd]",
    "File[motd ]",
    "File[a-b]",
    "File[a_b]",
    "File[aB]",
    "File[B]",
    "Tree[www]",
    "File[ünï]",
    "File[%_\\]",
    "Service[nginx]",
    "File[\u{1b}[31mred]",
];

/// One finding of `subject` in `class` with `observed` (`None`: a
/// sensitive resource), its values carrying the canary when sensitive.
fn finding(rng: &mut Rng, subject: &str, class: &str, observed: Option<&str>, at: i64) -> Finding {
    let sensitive = observed.is_none();
    let paths: Vec<String> = match rng.below(4) {
        0 => vec!["content".to_owned()],
        1 => vec!["mode".to_owned(), "owner".to_owned()],
        2 => vec![],
        _ => (0..30).map(|i| format!("entries/{i:03}/ünï %_")).collect(),
    };
    let category = *rng.pick(&["changed_outside", "deleted_outside", "Changed_outside"]);
    let changes = paths
        .iter()
        .take(3)
        .map(|p| FieldChange {
            path: p.clone(),
            observed: Some(if sensitive {
                format!("{CANARY}-observed")
            } else {
                format!("live {p}")
            }),
            declared: Some(if sensitive {
                format!("{CANARY}-declared")
            } else {
                String::new()
            }),
            sensitive,
        })
        .collect();
    let first_seen = match rng.below(6) {
        0 => i64::MIN,
        1 => i64::MAX,
        2 => 0,
        _ => at - 60 * rng.below(3) as i64,
    };
    let unchanged = paths.is_empty();
    Finding {
        signature: datum_fleet::report::finding_signature(subject, category, &paths),
        subject: subject.to_owned(),
        category: category.to_owned(),
        class: class.to_owned(),
        paths,
        observed: observed.map(str::to_owned),
        first_seen,
        checks: Some(*rng.pick(&[1, 2, 7, u64::MAX])),
        changes,
        // A sensitive finding's diff is marked so by its sensitive changes
        // (a finding without changes has no diff to withhold).
        content_diff: match (sensitive, unchanged) {
            (true, true) => None,
            (true, false) => Some(format!(
                "--- declared\n+++ live\n@@ -1 +1 @@\n-{CANARY}\n+{CANARY}2\n"
            )),
            (false, _) => {
                Some("--- declared\n+++ live\n@@ -1 +1 @@\n-old ünï\n+new %_\\\n".to_owned())
            }
        },
        changed_by: if rng.chance(30) {
            vec![Writer {
                kind: "login".into(),
                via: (*rng.pick(&["sshd", "SSHD", "cron"])).to_owned(),
                user: Some((*rng.pick(&["alice", "Alice", "bob "])).to_owned()),
                login_user: None,
                unit: Some("session-1.scope".into()),
                at: *rng.pick(&[at, i64::MIN, 0]),
            }]
        } else {
            vec![]
        },
    }
}

fn failure(rng: &mut Rng, resource: &str, host: &str) -> Failure {
    Failure {
        resource: resource.to_owned(),
        phase: (*rng.pick(&["validate", "apply", "verify"])).to_owned(),
        validator: Some((*rng.pick(&["nginx", "sshd", "Nginx"])).to_owned()),
        validator_version: Some((*rng.pick(&["nginx/1.24.0", "nginx/1.26.0", ""])).to_owned()),
        exit_status: Some(*rng.pick(&[1, 2, i32::MIN, i32::MAX])),
        // The message names the host: hosts of one group differ in it.
        message: format!("validation failed on {host}\nline 2 %_\\ ünï"),
        signature: format!("sig-{}", rng.below(2)),
    }
}

/// The `n`th report of host `h` (deterministic in `rng`), finished at `at`.
#[allow(clippy::too_many_arguments)]
fn report(
    rng: &mut Rng,
    h: usize,
    name: &str,
    stack: bool,
    seq: u64,
    at: i64,
    confirm: Vec<InstructionDone>,
) -> Report {
    let kind = if stack {
        ReportKind::Stack
    } else if rng.chance(40) {
        ReportKind::Apply
    } else {
        ReportKind::Check
    };
    let mut labels = BTreeMap::new();
    labels.insert("role".to_owned(), (*rng.pick(&LABEL_VALUES)).to_owned());
    if rng.chance(60) {
        labels.insert(
            "dc".to_owned(),
            (*rng.pick(&["fra", "FRA", "ams"])).to_owned(),
        );
    }
    if rng.chance(30) {
        labels.insert(
            (*rng.pick(&["ünï", "Role", "a_b", ""])).to_owned(),
            "x".to_owned(),
        );
    }
    if h == 3 {
        labels.insert("long".to_owned(), "ł".repeat(5_000));
    }
    let mut r = crate::support::report(name, kind, seq, at);
    r.key = format!("{:016x}{:016x}", h as u64 + 1, seq);
    r.labels = labels;
    r.revision = (*rng.pick(&REVISIONS)).to_owned();
    r.catalogue = format!("c{}", rng.below(3));
    r.exit_code = *rng.pick(&[0, 0, 1, 2, i32::MIN]);
    r.duration_ms = *rng.pick(&[0, 30, u64::MAX]);
    r.resources = *rng.pick(&[0, 12, u64::MAX]);
    r.counts = BTreeMap::from([
        ("unchanged".to_owned(), rng.next() % 50),
        ("changed".to_owned(), *rng.pick(&[0, 1, u64::MAX])),
    ]);
    r.expected_interval_s = *rng.pick(&[0, 60, 600, 3_600, datum_server::api::INTERVAL_MAX_S]);
    r.classes = CLASSES
        .iter()
        .take(1 + rng.below(CLASSES.len()))
        .map(|c| ClassBound {
            class: (*c).to_owned(),
            interval_s: *rng.pick(&[60, 600, 7_200]),
            bound_ms: *rng.pick(&[None, Some(600_040), Some(u64::MAX)]),
            resources: rng.next() % 20,
            policy: (*rng.pick(&[None, Some("report"), Some("revert"), Some("quarantine")]))
                .map(str::to_owned),
        })
        .collect();
    r.validators = BTreeMap::from([("nginx".to_owned(), "nginx/1.26.0".to_owned())]);
    r.trees = (0..rng.below(3))
        .map(|i| TreeFingerprint {
            resource: format!("Tree[t{i}]"),
            declared: "blake3:aaaa".into(),
            observed: Some((*rng.pick(&["blake3:aaaa", "blake3:bbbb"])).to_owned()),
        })
        .collect();
    if kind == ReportKind::Apply {
        let resources = [
            "File[nginx.conf]",
            "File[Nginx.conf]",
            "File[sshd ]",
            "File[ß]",
        ];
        r.failures = (0..rng.below(3))
            .map(|_| {
                let resource = *rng.pick(&resources);
                failure(rng, resource, name)
            })
            .collect();
        r.changed = (0..rng.below(4)).map(|i| format!("File[c{i}]")).collect();
        r.changed_total = *rng.pick(&[0, 3, u64::MAX]);
        r.trusted_by_metadata = *rng.pick(&[None, Some(0), Some(u64::MAX)]);
        if !r.failures.is_empty() {
            r.exit_code = 1;
        }
    } else {
        // Checks (and stacks): findings from a small pool, so hosts share
        // clusters, and a check covering only some classes now and then.
        let n = rng.below(5);
        let mut findings = Vec::new();
        for _ in 0..n {
            let subject = *rng.pick(&SUBJECTS);
            let class = *rng.pick(&CLASSES);
            let observed = *rng.pick(&[Some("sha256:1111"), Some("sha256:2222"), None]);
            findings.push(finding(rng, subject, class, observed, at));
        }
        r.findings = findings;
        if rng.chance(20) {
            r.classes_checked = vec![(*rng.pick(&CLASSES)).to_owned()];
        }
        if stack {
            r.pending = vec![PendingChange {
                address: "aws_instance.web[\"a_b\"]".into(),
                action: "update".into(),
            }];
        }
    }
    if rng.chance(20) {
        r.quarantined = vec![Quarantined {
            target: "File[motd]".into(),
            source: "policy".into(),
            reason: Some("drift %_\\".into()),
            since: Some(*rng.pick(&[i64::MIN, at, i64::MAX])),
        }];
    }
    if rng.chance(50) {
        r.sampling = Some(SamplingUsed {
            round: *rng.pick(&[
                (at / 3_600) as u64,
                (at / 3_600) as u64 - 1,
                (at / 3_600) as u64 - 7,
                u64::MAX,
            ]),
            deep: rng.chance(50),
        });
    }
    r.instructions = confirm;
    r
}

/// A path segment or query value, every byte but the unreserved ones
/// escaped.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// What one run answered: each request (method and address) with its
/// status and body, normalised as the module's header says.
type Transcript = Vec<(String, u16, String)>;

struct Run<B: Backend> {
    app: Arc<App<B>>,
    clock: Arc<AtomicI64>,
    out: Transcript,
    /// Instruction keys in order of first appearance.
    keys: Vec<String>,
}

impl<B: Backend> Run<B> {
    async fn send(&mut self, what: String, request: Request<Body>) -> String {
        let response = router(Arc::clone(&self.app))
            .oneshot(request)
            .await
            .unwrap();
        let status = response.status().as_u16();
        let location = response
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 26)
            .await
            .unwrap();
        let mut body = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(l) = location {
            body = format!("Location: {l}\n{body}");
        }
        let raw = body.clone();
        let body = self.normalise(&what, body);
        self.out.push((what, status, body));
        raw
    }

    fn normalise(&mut self, what: &str, body: String) -> String {
        let mut body = body;
        // Instruction keys (32 hex digits after `"key":"` or `asked=`).
        for marker in ["\"key\":\"", "asked="] {
            let mut from = 0;
            while let Some(i) = body[from..].find(marker).map(|i| i + from + marker.len()) {
                let key: String = body[i..].chars().take(32).collect();
                if key.len() == 32
                    && key.bytes().all(|b| b.is_ascii_hexdigit())
                    && !self.keys.contains(&key)
                {
                    self.keys.push(key);
                }
                from = i;
            }
        }
        for (n, k) in self.keys.iter().enumerate() {
            body = body.replace(k.as_str(), &format!("INSTRUCTION-KEY-{n}"));
        }
        let store = self.app.fleet.backend().name();
        if what.starts_with("GET /healthz") {
            body = body.replace(&format!("\"store\":\"{store}\""), "\"store\":\"STORE\"");
        } else if what.starts_with("GET /metrics") {
            let mut lines: Vec<&str> = body.lines().collect();
            lines.sort_unstable();
            body = lines.join("\n");
        } else {
            body = body.replace(&format!("Store: {store} ·"), "Store: STORE ·");
        }
        body
    }

    async fn get(&mut self, path: &str) {
        let request = Request::get(path)
            .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
            .body(Body::empty())
            .unwrap();
        self.send(format!("GET {path}"), request).await;
    }

    async fn post_report(&mut self, h: usize, report: &Report, dropped: u64) -> String {
        let body = serde_json::to_string(report).unwrap();
        let request = Request::post("/v1/reports")
            .header(header::AUTHORIZATION, format!("Bearer {}", token(h)))
            .header(header::CONTENT_TYPE, "application/json")
            .header(
                datum_fleet::client::OUTBOX_DROPPED_HEADER,
                dropped.to_string(),
            )
            .header(datum_fleet::client::OUTBOX_DEPTH_HEADER, "3")
            .body(Body::from(body))
            .unwrap();
        self.send(
            format!("POST /v1/reports {} seq {}", report.host, report.seq),
            request,
        )
        .await
    }
}

/// The whole scenario on `fleet`: what every request answered.
async fn scenario<B: Backend>(fleet: &Fleet<B>) -> Transcript {
    let names = names();
    for (i, (name, kind)) in names.iter().enumerate() {
        let hash = datum_fleet::credentials::token_hash(&token(i));
        fleet.enroll(name, kind, &hash, T0 - 86_400).await.unwrap();
    }
    fleet
        .enroll(
            "admin",
            "admin",
            &datum_fleet::credentials::token_hash(ADMIN),
            T0,
        )
        .await
        .unwrap();
    let mut config = ServerConfig::new(
        "https://127.0.0.1:1".into(),
        "127.0.0.1:1".into(),
        "test".into(),
    );
    config.retention.reports_per_host = 4;
    config.sampling = Some(Sampling {
        fraction: 0.25,
        round: std::time::Duration::from_secs(3_600),
        seed: 8611,
    });
    let clock = Arc::new(AtomicI64::new(T0));
    let mut app = App::new(fleet.clone(), config);
    let read = Arc::clone(&clock);
    app.clock = Box::new(move || read.load(Ordering::SeqCst));
    let mut run = Run {
        app: Arc::new(app),
        clock,
        out: Vec::new(),
        keys: Vec::new(),
    };

    let mut rng = Rng(0x5eed_d1ff);
    let mut seq = vec![0u64; names.len()];
    let mut confirm: Vec<Vec<InstructionDone>> = vec![Vec::new(); names.len()];
    let reporting = names.len() - 2; // the last two never report
    // Many reports share their time (ties), a few are dated ahead.
    let mut at = T0;
    for step in 0..360 {
        if step % 120 == 60 {
            snapshot(&mut run, &names, false).await;
        }
        if rng.chance(35) {
            at += *rng.pick(&[1, 60, 600, 3_600]);
        }
        // Hosts 28..31 stop early and go stale.
        let h = loop {
            let h = rng.below(reporting);
            if !(28..31).contains(&h) || step < 100 {
                break h;
            }
        };
        let (name, kind) = &names[h];
        seq[h] += 1;
        let finished = if rng.chance(3) { at + 86_400 } else { at };
        let r = report(
            &mut rng,
            h,
            name,
            *kind == "stack",
            seq[h],
            finished,
            std::mem::take(&mut confirm[h]),
        );
        run.clock.store(at, Ordering::SeqCst);
        let dropped = *rng.pick(&[0, 0, 2, u64::MAX]);
        let reply = run.post_report(h, &r, dropped).await;
        if rng.chance(5) {
            // A retried delivery: a duplicate.
            run.post_report(h, &r, 1).await;
        }
        if let Ok(reply) = serde_json::from_str::<datum_fleet::Reply>(&reply) {
            confirm[h] = reply
                .instructions
                .iter()
                .map(|i| InstructionDone {
                    key: i.key.clone(),
                    outcome: format!("done {}", i.action.word()),
                    at,
                })
                .collect();
        }
        // Now and then an operator quarantines or releases a host.
        if *kind == "host" && rng.chance(4) {
            let action = *rng.pick(&["quarantine", "release"]);
            let target = *rng.pick(&["host", "File[motd]", "File[a_b %]"]);
            let form = serde_urlencoded::to_string([
                ("target", target),
                ("reason", "ticket #42: ünï %_\\"),
                ("by", "ci"),
            ])
            .unwrap();
            let path = format!("/hosts/{}/{action}", enc(name));
            let request = Request::post(path.as_str())
                .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(form))
                .unwrap();
            run.send(format!("POST {path}"), request).await;
        }
    }
    // A burst of applies in one second: hosts applying every revision in
    // turn, so the latest revision, each host's list of revisions and the
    // ones retention keeps are all decided by ties.
    at += 60;
    run.clock.store(at, Ordering::SeqCst);
    for h in [0, 5, 6, 7, 8, 9, 13, 15] {
        let (name, _) = &names[h];
        let mut order: Vec<&str> = REVISIONS.to_vec();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        for revision in order {
            seq[h] += 1;
            let mut r = report(&mut rng, h, name, false, seq[h], at, Vec::new());
            r.kind = ReportKind::Apply;
            r.findings.clear();
            r.revision = revision.to_owned();
            run.post_report(h, &r, 0).await;
        }
    }
    // Hours later: some hosts are stale by now.
    run.clock.store(at + 5 * 3_600, Ordering::SeqCst);
    snapshot(&mut run, &names, true).await;
    run.out
}

/// Every read the router serves, with their parameters varied.
async fn snapshot<B: Backend>(run: &mut Run<B>, names: &[(String, &'static str)], all: bool) {
    for path in [
        "/v1/hosts",
        "/v1/stale",
        "/v1/drift",
        "/v1/drift?per=2",
        "/v1/drift?per=2&page=2",
        "/v1/drift?per=3&page=99",
        "/v1/sampling",
        "/v1/rollout",
    ] {
        run.get(path).await;
    }
    let mut revisions: Vec<&str> = REVISIONS.to_vec();
    revisions.push("nope");
    for r in &revisions {
        run.get(&format!("/v1/rollout?revision={}", enc(r))).await;
    }
    for (name, _) in names {
        for q in ["", "?limit=1", "?limit=3", "?limit=1000"] {
            run.get(&format!("/v1/hosts/{}/reports{q}", enc(name)))
                .await;
        }
    }
    run.get("/v1/hosts/nobody/reports").await;
    if !all {
        return;
    }
    for path in [
        "/metrics",
        "/healthz",
        "/openapi.json",
        "/",
        "/drift",
        "/drift?per=2&page=2",
        "/stacks",
        "/rollout",
    ] {
        run.get(path).await;
    }
    for r in &revisions {
        run.get(&format!("/rollout?revision={}", enc(r))).await;
    }
    let mut hosts_queries: Vec<String> = Vec::new();
    for sort in [
        "", "name", "state", "age", "revision", "findings", "reports",
    ] {
        for dir in ["", "asc", "desc"] {
            hosts_queries.push(format!("sort={sort}&dir={dir}"));
        }
    }
    for page in 1..=7 {
        hosts_queries.push(format!("sort=revision&per=6&page={page}"));
        hosts_queries.push(format!("sort=findings&dir=desc&per=5&page={page}"));
    }
    for needle in [
        "web", "WEB", "web-01 ", "ß", "STRASSE", "É", "%", "_", "\\", "h%1", "", " ",
    ] {
        hosts_queries.push(format!("q={}", enc(needle)));
    }
    for labels in [
        "role=web",
        "role=Web",
        "role!=web",
        "dc",
        "ünï=x",
        "role=a_b",
        "role=a%b",
        "role=",
        "=x",
    ] {
        hosts_queries.push(format!("labels={}", enc(labels)));
    }
    for state in crate_states() {
        hosts_queries.push(format!("state={state}"));
    }
    hosts_queries.push("kind=stack".into());
    hosts_queries.push("kind=host&state=stale,failed".into());
    for r in &revisions {
        hosts_queries.push(format!("revision={}", enc(r)));
    }
    for q in &hosts_queries {
        run.get(&format!("/hosts?{q}")).await;
    }
    for (name, _) in names {
        run.get(&format!("/hosts/{}", enc(name))).await;
    }
    // Every failure's captured output, as the rollout page links them.
    let mut failures = Vec::new();
    for (name, _) in names {
        for r in REVISIONS {
            for res in [
                "File[nginx.conf]",
                "File[Nginx.conf]",
                "File[sshd ]",
                "File[ß]",
            ] {
                failures.push(format!(
                    "/rollout/failure?revision={}&host={}&resource={}",
                    enc(r),
                    enc(name),
                    enc(res)
                ));
            }
        }
    }
    for f in &failures {
        run.get(f).await;
    }
}

fn crate_states() -> Vec<&'static str> {
    datum_server::views::STATES.to_vec()
}

/// Every request whose answers differ, each shown around where the two
/// bodies part.
fn differences(what: &str, left: &Transcript, right: &Transcript) -> Vec<String> {
    assert_eq!(
        left.len(),
        right.len(),
        "{what}: a different number of requests"
    );
    let mut differing = Vec::new();
    for (l, r) in left.iter().zip(right) {
        assert_eq!(l.0, r.0, "{what}: the runs asked different things");
        if l.1 != r.1 || l.2 != r.2 {
            let at =
                l.2.bytes()
                    .zip(r.2.bytes())
                    .position(|(a, b)| a != b)
                    .unwrap_or(l.2.len().min(r.2.len()));
            let window = |s: &str| {
                let mut from = at.saturating_sub(300).min(s.len());
                while !s.is_char_boundary(from) {
                    from -= 1;
                }
                let mut to = (at + 300).min(s.len());
                while !s.is_char_boundary(to) {
                    to += 1;
                }
                s[from..to].to_owned()
            };
            differing.push(format!(
                "{what}: {}: status {} vs {}, bodies part at byte {at}:\n  SQLite:     {:?}\n  PostgreSQL: {:?}",
                l.0,
                l.1,
                r.1,
                window(&l.2),
                window(&r.2)
            ));
        }
    }
    differing
}

fn check_no_canary(what: &str, t: &Transcript) {
    for (request, _, body) in t {
        assert!(
            !body.contains(CANARY),
            "{what}: a sensitive value in the answer to {request}"
        );
    }
}

/// The same reports into SQLite and PostgreSQL (its default database, and
/// one collated by a language): every answer the same.
#[test]
fn the_two_stores_answer_alike() {
    let rt = crate::support::runtime();
    rt.block_on(async {
        let (dir, lite) = crate::support::sqlite();
        let lite = scenario(&lite).await;
        check_no_canary("SQLite", &lite);
        // The scenario does what it says: operators asked, hosts confirmed,
        // deliveries were repeated.
        let holds = |needle: &str| lite.iter().any(|(_, _, body)| body.contains(needle));
        assert!(
            lite.iter()
                .any(|(what, status, _)| what.starts_with("POST /hosts/") && *status == 303),
            "no quarantine was asked"
        );
        assert!(
            holds("done quarantine") && holds("done release"),
            "no instruction was confirmed"
        );
        assert!(holds("\"duplicate\":true"), "no delivery was repeated");
        // Nor does the store hold it (the database and its journal).
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes.windows(CANARY.len()).any(|w| w == CANARY.as_bytes()),
                "a sensitive value in {}",
                path.display()
            );
        }
        let ok = lite.iter().filter(|e| e.1 == 200).count();
        assert!(ok > 500, "the scenario reads little: {ok} answers of 200");
        let mut differing = Vec::new();
        if let Some(pg) = crate::support::postgres().await {
            let pg = scenario(&pg).await;
            check_no_canary("PostgreSQL", &pg);
            differing.extend(differences("PostgreSQL (default database)", &lite, &pg));
        }
        if let Some((pg, how, _)) = crate::support::postgres_collated().await {
            let pg = scenario(&pg).await;
            differing.extend(differences(&format!("PostgreSQL ({how})"), &lite, &pg));
        }
        assert!(
            differing.is_empty(),
            "{} answers differ from SQLite's (of {} requests):\n{}",
            differing.len(),
            lite.len(),
            differing.join("\n\n")
        );
    });
}
