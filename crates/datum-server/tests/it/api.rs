//! The HTTP API in process (the router over a real store, no socket): what
//! a report is refused for before anything reaches the store.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use datum_fleet::ReportKind;
use datum_server::api::{App, router};
use datum_server::config::ServerConfig;
use datum_server::fleet::Fleet;
use datum_server::store::Backend;
use tower::ServiceExt as _;

const TOKEN: &str = "dtm_h_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The router over `fleet`, as `datum server` builds it.
fn app<B: Backend>(fleet: &Fleet<B>) -> Arc<App<B>> {
    Arc::new(App::new(
        fleet.clone(),
        ServerConfig::new(
            "https://127.0.0.1:1".into(),
            "127.0.0.1:1".into(),
            "test".into(),
        ),
    ))
}

/// `request` through the router: its status and body.
async fn answer<B: Backend>(app: &Arc<App<B>>, request: Request<Body>) -> (StatusCode, String) {
    let response = router(Arc::clone(app)).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 22)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// A report delivered with the host's token.
async fn post<B: Backend>(app: &Arc<App<B>>, body: String) -> (StatusCode, String) {
    let request = Request::post("/v1/reports")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap();
    answer(app, request).await
}

/// A page or view asked for with `token`.
async fn get<B: Backend>(app: &Arc<App<B>>, path: &str, token: &str) -> (StatusCode, String) {
    let request = Request::get(path)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    answer(app, request).await
}

/// PostgreSQL's text cannot hold a NUL character: a report holding one is
/// refused with 400 on every store (not a 503 the host would retry
/// forever), nothing of it is stored, and the host's next clean report is.
async fn a_report_holding_nul_is_refused_and_stores_nothing<B: Backend>(fleet: &Fleet<B>) {
    let now = 1_800_000_000;
    let hash = datum_fleet::credentials::token_hash(TOKEN);
    fleet.enroll("web-1", "host", &hash, now).await.unwrap();
    let app = app(fleet);
    let mut report = crate::support::report("web-1", ReportKind::Check, 1, now);
    report.labels.insert("role".into(), "web\u{0}db".into());
    let (status, body) = post(&app, serde_json::to_string(&report).unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("NUL character"), "{body}");
    let history = fleet.history("web-1", 10).await.unwrap().unwrap();
    assert!(history.reports.is_empty(), "nothing stored: {history:?}");

    report.labels.insert("role".into(), "web".into());
    let (status, body) = post(&app, serde_json::to_string(&report).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let history = fleet.history("web-1", 10).await.unwrap().unwrap();
    assert_eq!(history.reports.len(), 1, "{history:?}");
}

#[test]
fn a_report_holding_nul() {
    crate::on_both!(a_report_holding_nul_is_refused_and_stores_nothing);
}

/// An apply that trusted metadata (`datum apply --trust-metadata`) says how
/// many resources it did not read; the server keeps it with the report and
/// shows it in the history and on the host page, so a converged host whose
/// content was not compared is told from one whose content was. An apply
/// that read everything says nothing of it.
async fn a_trusting_apply_is_told_apart<B: Backend>(fleet: &Fleet<B>) {
    const ADMIN: &str = "dtm_a_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    let now = 1_800_000_000;
    let hash = datum_fleet::credentials::token_hash(TOKEN);
    fleet.enroll("web-1", "host", &hash, now).await.unwrap();
    let admin = datum_fleet::credentials::token_hash(ADMIN);
    fleet.enroll("ops", "admin", &admin, now).await.unwrap();
    let app = app(fleet);
    let page = async || {
        let (status, html) = get(&app, "/hosts/web-1", ADMIN).await;
        assert_eq!(status, StatusCode::OK, "{html}");
        html
    };

    let reading = crate::support::report("web-1", ReportKind::Apply, 1, now);
    let json = serde_json::to_string(&reading).unwrap();
    assert!(!json.contains("trusted_by_metadata"), "{json}");
    let (status, body) = post(&app, json).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!page().await.contains("Trusted metadata"));

    let mut trusting = crate::support::report("web-1", ReportKind::Apply, 2, now + 60);
    trusting.trusted_by_metadata = Some(12_345);
    let (status, body) = post(&app, serde_json::to_string(&trusting).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let history = fleet.history("web-1", 10).await.unwrap().unwrap();
    let by_seq = |seq| {
        history
            .reports
            .iter()
            .find(|r| r.seq == seq)
            .unwrap_or_else(|| panic!("{seq} in {history:?}"))
            .trusted_by_metadata
    };
    assert_eq!((by_seq(1), by_seq(2)), (None, Some(12_345)));
    let html = page().await;
    let at = html
        .find("Trusted metadata")
        .expect("the host page says so");
    assert!(html[at..].contains("12,345"), "{}", &html[at..]);
}

#[test]
fn a_trusting_apply() {
    crate::on_both!(a_trusting_apply_is_told_apart);
}

/// The host's clock is not the server's. One report dated a year ahead (a
/// machine booted with a wrong clock) is taken as received now, so the
/// host's next reports are not "late": its findings show, and it goes
/// stale when it falls silent. Numbers the stale arithmetic cannot take
/// (an interval of 2^64 - 1 s, a finish before 1970) are refused with 400
/// rather than stored, where they broke `/v1/stale` on PostgreSQL (bigint
/// out of range) but not on SQLite.
async fn the_hosts_clock_and_numbers_are_bounded<B: Backend>(fleet: &Fleet<B>) {
    const ADMIN: &str = "dtm_a_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    let now = 1_800_000_000;
    fleet
        .enroll(
            "web-1",
            "host",
            &datum_fleet::credentials::token_hash(TOKEN),
            now,
        )
        .await
        .unwrap();
    fleet
        .enroll(
            "ops",
            "admin",
            &datum_fleet::credentials::token_hash(ADMIN),
            now,
        )
        .await
        .unwrap();
    let mut app = App::new(
        fleet.clone(),
        ServerConfig::new(
            "https://127.0.0.1:1".into(),
            "127.0.0.1:1".into(),
            "test".into(),
        ),
    );
    app.clock = Box::new(move || now);
    let app = Arc::new(app);

    let ahead = crate::support::report("web-1", ReportKind::Check, 1, now + 365 * 86_400);
    let (status, body) = post(&app, serde_json::to_string(&ahead).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut drifted = crate::support::report("web-1", ReportKind::Check, 2, now);
    drifted.exit_code = 2;
    drifted
        .findings
        .push(crate::support::finding("File[motd]", "h1", "normal"));
    let (status, body) = post(&app, serde_json::to_string(&drifted).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = get(&app, "/v1/hosts", ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let hosts: serde_json::Value = serde_json::from_str(&body).unwrap();
    let host = &hosts["hosts"][0];
    assert_eq!(host["state"], "drifted", "{host}");
    assert_eq!(host["findings"], 1, "{host}");
    assert_eq!(host["last_report"], "2027-01-15T08:00:00Z", "{host}");

    let mut huge = crate::support::report("web-1", ReportKind::Check, 3, now);
    huge.expected_interval_s = u64::MAX;
    let (status, body) = post(&app, serde_json::to_string(&huge).unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let mut huge_class = crate::support::report("web-1", ReportKind::Check, 4, now);
    huge_class.classes[0].interval_s = u64::MAX;
    let (status, body) = post(&app, serde_json::to_string(&huge_class).unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let mut before_1970 = crate::support::report("web-1", ReportKind::Check, 5, now);
    before_1970.finished_at = i64::MIN;
    let (status, body) = post(&app, serde_json::to_string(&before_1970).unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Silent for longer than 600 s × 3: stale, on both stores.
    let staleness = datum_server::views::Staleness {
        now: now + 2_000,
        factor: 3.0,
        first_report_within: 3600,
    };
    let stale = fleet.stale(&staleness).await.unwrap();
    let names: Vec<&str> = stale.hosts.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["web-1"], "{stale:?}");
}

#[test]
fn the_hosts_clock_and_numbers() {
    crate::on_both!(the_hosts_clock_and_numbers_are_bounded);
}

/// A name enrolled again loses its old token whatever kind it had: a host
/// re-enrolled as a stack (or back) cannot keep reporting with the token
/// of its first enrolment. Admin tokens of the same name are not touched.
async fn enrolling_again_as_another_kind_ends_the_old_token<B: Backend>(fleet: &Fleet<B>) {
    let now = 1_800_000_000;
    let token = |t: &str| datum_fleet::credentials::token_hash(t);
    fleet
        .enroll("web-1", "host", &token("old-host"), now)
        .await
        .unwrap();
    fleet
        .enroll("web-1", "stack", &token("new-stack"), now)
        .await
        .unwrap();
    assert_eq!(fleet.identity(&token("old-host")).await.unwrap(), None);
    let stack = fleet.identity(&token("new-stack")).await.unwrap().unwrap();
    assert_eq!(
        (stack.name.as_str(), stack.kind.as_str()),
        ("web-1", "stack")
    );
    fleet
        .enroll("web-1", "host", &token("host-again"), now)
        .await
        .unwrap();
    assert_eq!(fleet.identity(&token("new-stack")).await.unwrap(), None);
    assert!(
        fleet
            .identity(&token("host-again"))
            .await
            .unwrap()
            .is_some()
    );
    // A host named `admin` leaves the admin credentials alone.
    fleet.add_admin(&token("the-admin"), now).await.unwrap();
    fleet
        .enroll("admin", "host", &token("admin-host"), now)
        .await
        .unwrap();
    let admin = fleet.identity(&token("the-admin")).await.unwrap().unwrap();
    assert_eq!(admin.kind, "admin");
}

#[test]
fn enrolling_again_as_another_kind() {
    crate::on_both!(enrolling_again_as_another_kind_ends_the_old_token);
}

/// A NUL character in the address is a bad request on both stores alike
/// (PostgreSQL's text cannot hold one: it answered 503, "the store failed",
/// where SQLite answered 404 or 200).
async fn a_nul_in_the_address_is_a_bad_request<B: Backend>(fleet: &Fleet<B>) {
    const ADMIN: &str = "dtm_a_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    let now = 1_800_000_000;
    let admin = datum_fleet::credentials::token_hash(ADMIN);
    fleet.enroll("ops", "admin", &admin, now).await.unwrap();
    let app = app(fleet);
    for path in [
        "/v1/hosts/%00/reports",
        "/v1/rollout?revision=%00",
        "/hosts/web%001",
        "/rollout?revision=git%3A%00",
        "/rollout/failure?host=%00&resource=x&revision=y",
    ] {
        let (status, body) = get(&app, path, ADMIN).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(body.contains("NUL"), "{path}: {body}");
    }
    let (status, body) = get(&app, "/v1/rollout?revision=git%3Aabc", ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[test]
fn a_nul_in_the_address() {
    crate::on_both!(a_nul_in_the_address_is_a_bad_request);
}

/// A report says itself which values are sensitive, and the host leaves
/// them out. Should one carry them anyway (a host's bug, an older or
/// foreign builder), the server does not hold or show them: a change marked
/// sensitive loses its values, and a finding with one loses its content
/// diff, before the report is stored; the page reads `(sensitive)`.
async fn values_a_report_marks_sensitive_are_not_stored_or_shown<B: Backend>(fleet: &Fleet<B>) {
    const ADMIN: &str = "dtm_a_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    let now = 1_800_000_000;
    let hash = datum_fleet::credentials::token_hash(TOKEN);
    fleet.enroll("web-1", "host", &hash, now).await.unwrap();
    let admin = datum_fleet::credentials::token_hash(ADMIN);
    fleet.enroll("ops", "admin", &admin, now).await.unwrap();
    let app = app(fleet);
    let mut report = crate::support::report("web-1", ReportKind::Check, 1, now);
    let mut secret = crate::support::finding("File[vault-key]", "o1", "normal");
    secret.observed = None;
    secret.changes = vec![
        datum_fleet::FieldChange {
            path: "content".into(),
            observed: Some("CANARY-LIVE-VALUE".into()),
            declared: Some("CANARY-DECLARED-VALUE".into()),
            sensitive: true,
        },
        datum_fleet::FieldChange {
            path: "mode".into(),
            observed: Some("0644".into()),
            declared: Some("0600".into()),
            sensitive: false,
        },
    ];
    secret.content_diff = Some("-CANARY-DIFF-OLD\n+CANARY-DIFF-NEW\n".into());
    let mut plain = crate::support::finding("File[motd]", "o2", "normal");
    plain.changes = vec![datum_fleet::FieldChange {
        path: "content".into(),
        observed: Some("hello".into()),
        declared: Some("welcome".into()),
        sensitive: false,
    }];
    plain.content_diff = Some("-hello\n+welcome\n".into());
    report.findings = vec![secret, plain];
    let (status, body) = post(&app, serde_json::to_string(&report).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let stored = fleet
        .backend()
        .rows(datum_server::store::Stmt::new(
            "SELECT body FROM reports",
            vec![],
        ))
        .await
        .unwrap();
    let bodies: Vec<String> = stored
        .iter()
        .map(|r| match &r[0] {
            datum_server::store::Val::Text(t) => t.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(bodies.len(), 1);
    let (status, html) = get(&app, "/hosts/web-1", ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let (status, history) = get(&app, "/v1/hosts/web-1/reports", ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{history}");
    for (what, text) in [
        ("stored", &bodies[0]),
        ("page", &html),
        ("history", &history),
    ] {
        assert!(!text.contains("CANARY"), "{what}: {text}");
    }
    assert!(html.contains("(sensitive)"), "{html}");
    // What was not marked sensitive is kept and shown.
    assert!(
        bodies[0].contains("+welcome") && html.contains("welcome"),
        "{html}"
    );
    assert!(bodies[0].contains("0600"), "{}", bodies[0]);
}

#[test]
fn values_a_report_marks_sensitive() {
    crate::on_both!(values_a_report_marks_sensitive_are_not_stored_or_shown);
}

/// The sampling round a report says it deep-checked in is the host's
/// word: a host whose clock ran ahead (or a bad one) said a round far in
/// the future, and from then on it counted as deep-checked in every period
/// and was never overdue, whether it read content again or not. A round is
/// taken as at most the server's current one.
async fn a_deep_check_is_not_counted_in_rounds_still_to_come<B: Backend>(fleet: &Fleet<B>) {
    let now: i64 = 1_800_000_000;
    let hash = datum_fleet::credentials::token_hash(TOKEN);
    fleet.enroll("web-1", "host", &hash, now).await.unwrap();
    let mut config = ServerConfig::new(
        "https://127.0.0.1:1".into(),
        "127.0.0.1:1".into(),
        "test".into(),
    );
    config.sampling = Some(datum_server::config::Sampling {
        fraction: 0.5,
        round: std::time::Duration::from_secs(3600),
        seed: 1,
    });
    let clock = Arc::new(std::sync::atomic::AtomicI64::new(now));
    let mut app = App::new(fleet.clone(), config);
    let read = Arc::clone(&clock);
    app.clock = Box::new(move || read.load(std::sync::atomic::Ordering::SeqCst));
    let app = Arc::new(app);
    let mut report = crate::support::report("web-1", ReportKind::Check, 1, now);
    let current = now as u64 / 3600;
    report.sampling = Some(datum_fleet::SamplingUsed {
        round: current + 1_000,
        deep: true,
    });
    let (status, body) = post(&app, serde_json::to_string(&report).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Ten periods (of two rounds) later, without another deep check.
    clock.store(now + 20 * 3600, std::sync::atomic::Ordering::SeqCst);
    let plan = app.config.sampling_plan(app.now());
    let view = fleet.sampling(plan.as_ref()).await.unwrap();
    assert_eq!(view.overdue, ["web-1"], "{view:?}");
    assert_eq!(view.deep_in_period, 0, "{view:?}");
}

#[test]
fn a_deep_check_in_rounds_to_come() {
    crate::on_both!(a_deep_check_is_not_counted_in_rounds_still_to_come);
}

/// The rollout's bar (overview and rollout page) draws the hosts that have
/// not applied the revision in the colour of `new`, and said so on hover
/// ("1 new") beside tiles and a label saying "not applied yet", though
/// they are hosts that reported, only not this revision.
async fn the_rollout_bar_names_hosts_not_applied_yet_so<B: Backend>(fleet: &Fleet<B>) {
    const ADMIN: &str = "dtm_a_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    let now = 1_800_000_000;
    let admin = datum_fleet::credentials::token_hash(ADMIN);
    fleet.enroll("ops", "admin", &admin, now).await.unwrap();
    for (host, revision) in [("web-1", "git:r2"), ("web-2", "git:r1")] {
        let mut r = crate::support::report(host, ReportKind::Apply, 1, now);
        r.revision = revision.into();
        crate::support::ingest(fleet, &r).await;
    }
    let app = app(fleet);
    for path in ["/", "/rollout"] {
        let (status, html) = get(&app, path, ADMIN).await;
        assert_eq!(status, StatusCode::OK, "{path}: {html}");
        let label = "aria-label=\"1 converged, 0 failed, 1 not applied yet\"";
        let bar = &html[html.find(label).unwrap_or_else(|| panic!("{path}: {html}"))..];
        let bar = &bar[..bar.find("</svg>").unwrap_or(bar.len())];
        assert!(
            bar.contains("<title>1 not applied yet</title>") && !bar.contains("1 new"),
            "{path}: the segment of web-2 on hover: {bar}"
        );
    }
}

#[test]
fn the_rollout_bar() {
    crate::on_both!(the_rollout_bar_names_hosts_not_applied_yet_so);
}

/// A revision is shown cut short (`git:5954ab558278` in `datum fleet
/// hosts`, `git:5954ab5582` on the pages), and a person asks for its
/// rollout by what they see: the applied revision it begins is the one
/// shown, not a revision nobody applied ("0 converged, 0 failed, 3 not
/// applied yet" while two hosts list it). Several revisions beginning so
/// are a bad request naming them; a revision no host applied yet (a
/// commit still to roll out) is every host not applied yet.
async fn a_revision_cut_short_names_the_applied_one<B: Backend>(fleet: &Fleet<B>) {
    const ADMIN: &str = "dtm_a_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    const R2: &str = "git:5954ab558278624b6554fac4dc2fad3ee4ebab55";
    let now = 1_800_000_000;
    let admin = datum_fleet::credentials::token_hash(ADMIN);
    fleet.enroll("ops", "admin", &admin, now).await.unwrap();
    for (host, revision, failed) in [
        ("web-1", R2, false),
        ("web-2", R2, true),
        (
            "web-3",
            "git:7c6cc512649a298a3bde2f2ef78cd8614a780248",
            false,
        ),
        ("db-1", "git:aaaa1111", false),
        ("db-2", "git:aaaa2222", false),
    ] {
        let mut r = crate::support::report(host, ReportKind::Apply, 1, now);
        r.revision = revision.into();
        if failed {
            r.failures
                .push(crate::support::failure("File[shop]", "sig-http3"));
            r.exit_code = 4;
        }
        crate::support::ingest(fleet, &r).await;
    }
    let app = app(fleet);
    for cut in ["git:5954ab558278", "git%3A5954ab5582", R2] {
        let (status, body) = get(&app, &format!("/v1/rollout?revision={cut}"), ADMIN).await;
        assert_eq!(status, StatusCode::OK, "{cut}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["revision"], R2, "{cut}: {body}");
        assert_eq!(
            v["converged"],
            serde_json::json!(["web-1"]),
            "{cut}: {body}"
        );
        assert_eq!(v["failed"], serde_json::json!(["web-2"]), "{cut}: {body}");
        assert_eq!(v["pending"].as_array().map(Vec::len), Some(3), "{body}");
    }
    let (status, html) = get(&app, "/rollout?revision=git%3A5954ab5582", ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(
        html.contains(&format!("title=\"{R2}\""))
            && html.contains("1 converged, 1 failed, 3 not applied yet"),
        "the page of the revision begun: {html}"
    );
    // The failure's page takes the revision as the views show it, as the
    // rollout does (it was a 404 'did not fail').
    for cut in ["git%3A5954ab5582", "git:5954ab558278", R2] {
        let path = format!("/rollout/failure?revision={cut}&host=web-2&resource=File%5Bshop%5D");
        let (status, html) = get(&app, &path, ADMIN).await;
        assert_eq!(status, StatusCode::OK, "{path}: {html}");
        assert!(html.contains("File[shop]"), "{path}: {html}");
    }
    let (status, body) = get(
        &app,
        "/rollout/failure?revision=git:aaaa&host=db-1&resource=File%5Bshop%5D",
        ADMIN,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("git:aaaa1111"), "{body}");

    for path in [
        "/v1/rollout?revision=git:aaaa",
        "/rollout?revision=git:aaaa",
    ] {
        let (status, body) = get(&app, path, ADMIN).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(
            body.contains("git:aaaa1111") && body.contains("git:aaaa2222"),
            "{path}: {body}"
        );
    }
    let (status, body) = get(&app, "/v1/rollout?revision=git:future", ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["revision"], "git:future");
    assert_eq!(v["pending"].as_array().map(Vec::len), Some(5), "{body}");
}

#[test]
fn a_revision_cut_short() {
    crate::on_both!(a_revision_cut_short_names_the_applied_one);
}

/// An enrolled host that never reported has told nothing: its page said
/// "No open findings: web-9 matches its declaration (as of its last
/// check)" and "Nothing is quarantined on web-9 (as of its last report)",
/// of a host with no check and no report, beside "Last report never".
async fn a_host_never_heard_from_is_not_said_to_match<B: Backend>(fleet: &Fleet<B>) {
    const ADMIN: &str = "dtm_a_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    let now = 1_800_000_000;
    let admin = datum_fleet::credentials::token_hash(ADMIN);
    fleet.enroll("ops", "admin", &admin, now).await.unwrap();
    let hash = datum_fleet::credentials::token_hash(TOKEN);
    fleet.enroll("web-1", "host", &hash, now).await.unwrap();
    let app = app(fleet);
    let (status, html) = get(&app, "/hosts/web-1", ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(
        !html.contains("matches its declaration") && !html.contains("as of its last report"),
        "a host never heard from: {html}"
    );
    assert!(html.contains("web-1 has not reported yet"), "{html}");

    let (status, body) = post(
        &app,
        serde_json::to_string(&crate::support::report("web-1", ReportKind::Check, 1, now)).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, html) = get(&app, "/hosts/web-1", ADMIN).await;
    assert!(
        html.contains("No open findings: web-1 matches its declaration"),
        "once it checked: {html}"
    );
    assert!(!html.contains("has not reported yet"), "{html}");
}

#[test]
fn a_host_never_heard_from() {
    crate::on_both!(a_host_never_heard_from_is_not_said_to_match);
}

/// The hosts table sorted by findings (or reports) lists the most first on
/// the first click (`dir=asc`), so the numbers descend; the header said
/// `aria-sort="ascending"` and ▲ over 3, 1, 0 (a screen reader read the
/// opposite of the table).
async fn a_count_column_says_which_way_it_is_sorted<B: Backend>(fleet: &Fleet<B>) {
    const ADMIN: &str = "dtm_a_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    let now = 1_800_000_000;
    let admin = datum_fleet::credentials::token_hash(ADMIN);
    fleet.enroll("ops", "admin", &admin, now).await.unwrap();
    for (host, findings) in [("web-1", 1), ("web-2", 3), ("web-3", 0)] {
        let mut r = crate::support::report(host, ReportKind::Check, 1, now);
        for i in 0..findings {
            r.findings.push(crate::support::finding(
                &format!("File[f{i}]"),
                "obs",
                "normal",
            ));
        }
        crate::support::ingest(fleet, &r).await;
    }
    let app = app(fleet);
    for (dir, order, aria, arrow) in [
        ("asc", ["web-2", "web-1", "web-3"], "descending", "▼"),
        ("desc", ["web-3", "web-1", "web-2"], "ascending", "▲"),
    ] {
        let path = format!("/hosts?sort=findings&dir={dir}");
        let (status, html) = get(&app, &path, ADMIN).await;
        assert_eq!(status, StatusCode::OK, "{html}");
        let at = |h: &str| {
            html.find(&format!("href=\"/hosts/{h}\""))
                .unwrap_or_else(|| panic!("{h} in {html}"))
        };
        assert!(
            at(order[0]) < at(order[1]) && at(order[1]) < at(order[2]),
            "{path}: {order:?}"
        );
        let header = &html[html.find("aria-sort=").unwrap()..];
        let header = &header[..header.find("</th>").unwrap()];
        assert!(
            header.contains(&format!("aria-sort=\"{aria}\"")) && header.contains(arrow),
            "{path}: the numbers are in {aria} order: {header}"
        );
    }
}

#[test]
fn a_count_column_sorted() {
    crate::on_both!(a_count_column_says_which_way_it_is_sorted);
}

/// A sensitive resource's findings carry no observed hash, so every host
/// that changed it is in one cluster whatever it wrote: the drift page and
/// the overview said "2 same change" of two hosts that wrote two different
/// secrets. They now say the hosts changed it and the values were not
/// compared; a cluster of one shared value still says "same change".
async fn a_sensitive_cluster_is_not_called_the_same_change<B: Backend>(fleet: &Fleet<B>) {
    const ADMIN: &str = "dtm_a_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    let now = 1_800_000_000;
    let admin = datum_fleet::credentials::token_hash(ADMIN);
    fleet.enroll("ops", "admin", &admin, now).await.unwrap();
    for host in ["web-1", "web-2"] {
        let mut r = crate::support::report(host, ReportKind::Check, 1, now);
        let mut secret = crate::support::finding("File[secret]", "unused", "normal");
        secret.observed = None;
        r.findings.push(secret);
        r.findings
            .push(crate::support::finding("File[app]", "24b2593f", "normal"));
        r.exit_code = 2;
        crate::support::ingest(fleet, &r).await;
    }
    let app = app(fleet);
    for path in ["/drift", "/"] {
        let (status, html) = get(&app, path, ADMIN).await;
        assert_eq!(status, StatusCode::OK, "{html}");
        let row = |subject: &str| {
            let at = html
                .find(subject)
                .unwrap_or_else(|| panic!("{path}: {subject} in {html}"));
            let row = &html[at..];
            row[..row.find("</tr>").unwrap()].to_owned()
        };
        let secret = row("File[secret]");
        assert!(
            secret.contains("values not compared") && !secret.contains("same change"),
            "{path}: {secret}"
        );
        assert!(row("File[app]").contains("same change"), "{path}");
    }
}

#[test]
fn a_sensitive_cluster() {
    crate::on_both!(a_sensitive_cluster_is_not_called_the_same_change);
}

/// An error page offers "Sign in" only when signing in is what is missing:
/// a client that sent the admin credential as a bearer token (a script
/// asking for a page) was told to sign in on a 404, and one whose bearer
/// token is no admin credential was not told that its token is the
/// problem.
async fn an_error_page_offers_sign_in_only_when_it_helps<B: Backend>(fleet: &Fleet<B>) {
    const ADMIN: &str = "dtm_a_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    let now = 1_800_000_000;
    fleet
        .enroll(
            "ops",
            "admin",
            &datum_fleet::credentials::token_hash(ADMIN),
            now,
        )
        .await
        .unwrap();
    fleet
        .enroll(
            "web-1",
            "host",
            &datum_fleet::credentials::token_hash(TOKEN),
            now,
        )
        .await
        .unwrap();
    let app = app(fleet);
    let sign_in = "href=\"/login\"";

    for path in [
        "/hosts/nobody",
        "/rollout/failure?revision=r&host=h&resource=x",
    ] {
        let (status, html) = get(&app, path, ADMIN).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {html}");
        assert!(
            !html.contains(sign_in),
            "{path}: a bearer client is told to sign in: {html}"
        );
    }

    for token in [TOKEN, "dtm_a_unknown"] {
        let (status, html) = get(&app, "/hosts", token).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{html}");
        assert!(
            html.contains("the bearer token is not this server&#x27;s admin credential"),
            "{html}"
        );
        assert!(!html.contains(sign_in), "{html}");
    }

    // Without any credential, a form's answer is to sign in.
    let request = Request::post("/hosts/web-1/quarantine")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from("reason=x"))
        .unwrap();
    let (status, html) = answer(&app, request).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
    assert!(
        html.contains("not signed in") && html.contains(sign_in),
        "{html}"
    );
}

#[test]
fn an_error_page_offers_sign_in() {
    crate::on_both!(an_error_page_offers_sign_in_only_when_it_helps);
}

/// The drift clusters a page at a time, as the hosts table pages (`page`,
/// `per`): `/v1/drift` and `/drift` returned every cluster at once, 10,000
/// hosts' distinct drifts in one answer. Pages are disjoint, together the
/// whole view in its order, the same when asked again, and the page says
/// how many there are; the web page links to the next.
async fn the_drift_clusters_come_a_page_at_a_time<B: Backend>(fleet: &Fleet<B>) {
    const ADMIN: &str = "dtm_a_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    let now = 1_800_000_000;
    let admin = datum_fleet::credentials::token_hash(ADMIN);
    fleet.enroll("ops", "admin", &admin, now).await.unwrap();
    // 130 clusters: three shared by several hosts (one change to two
    // values among them, alike in hosts, first sighting and subject), and
    // a person's edits on one host each, many first seen alike.
    for (i, host) in ["web-1", "web-2", "web-3", "web-4"].iter().enumerate() {
        let mut r = crate::support::report(host, ReportKind::Check, 1, now);
        r.findings
            .push(crate::support::finding("File[app]", "same", "normal"));
        let value = if i % 2 == 0 { "even" } else { "odd" };
        r.findings
            .push(crate::support::finding("File[motd]", value, "normal"));
        let singles = if i == 0 { 124 } else { 1 };
        for n in 0..singles {
            let mut f = crate::support::finding(&format!("File[{host}-{n:03}]"), "x", "normal");
            f.first_seen = 1_000 + (n % 3) as i64;
            r.findings.push(f);
        }
        r.exit_code = 2;
        assert!(crate::support::ingest(fleet, &r).await);
    }
    let app = app(fleet);
    let whole: Vec<(String, Option<String>)> = fleet
        .drift(now)
        .await
        .unwrap()
        .clusters
        .iter()
        .map(|c| (c.signature.clone(), c.observed.clone()))
        .collect();
    assert_eq!(whole.len(), 130);
    let doc = |path: String| {
        let app = Arc::clone(&app);
        async move {
            let (status, body) = get(&app, &path, ADMIN).await;
            assert_eq!(status, StatusCode::OK, "{path}: {body}");
            serde_json::from_str::<serde_json::Value>(&body).unwrap()
        }
    };
    let keys = |d: &serde_json::Value| -> Vec<(String, Option<String>)> {
        d["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["signature"].as_str().unwrap().to_owned(),
                    c["observed"].as_str().map(str::to_owned),
                )
            })
            .collect()
    };

    // Asked with neither `page` nor `per` (a client that predates
    // paging): every cluster, unpaged, the total said.
    let unpaged = doc("/v1/drift".into()).await;
    assert_eq!(keys(&unpaged), whole, "{unpaged}");
    assert_eq!(unpaged["clusters_total"], 130);
    for field in ["page", "pages", "per"] {
        assert!(unpaged.get(field).is_none(), "{field}: {unpaged}");
    }
    // A page asked for: 100 unless `per` says.
    let first = doc("/v1/drift?page=1".into()).await;
    assert_eq!(first["clusters"].as_array().unwrap().len(), 100, "{first}");
    assert_eq!(
        (
            &first["clusters_total"],
            &first["page"],
            &first["pages"],
            &first["per"]
        ),
        (
            &serde_json::json!(130),
            &serde_json::json!(1),
            &serde_json::json!(2),
            &serde_json::json!(100)
        )
    );
    assert_eq!(first["hosts_drifted"], 4);

    for per in [1, 7, 64, 129, 130, 1000] {
        let mut all = Vec::new();
        let pages = 130_usize.div_ceil(per);
        for page in 1..=pages {
            let path = format!("/v1/drift?page={page}&per={per}");
            let d = doc(path.clone()).await;
            assert_eq!(d["pages"], pages, "{path}");
            assert_eq!(d["page"], page, "{path}");
            let got = keys(&d);
            assert_eq!(got.len(), per.min(130 - (page - 1) * per), "{path}");
            assert_eq!(keys(&doc(path.clone()).await), got, "{path}: asked again");
            all.extend(got);
        }
        assert_eq!(
            all, whole,
            "per={per}: the pages in order are the whole view"
        );
    }
    // Past the last page: the last; more than 1000 a page: 1000.
    assert_eq!(
        keys(&doc("/v1/drift?page=99&per=50".into()).await),
        whole[100..]
    );
    assert_eq!(doc("/v1/drift?per=5000".into()).await["per"], 1000);
    let (status, _) = get(&app, "/v1/drift?page=-1", ADMIN).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // The web page: the first 100, the changes on many hosts first, and a
    // link to the rest.
    let (status, html) = get(&app, "/drift", ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(
        html.contains("drift?page=2\" rel=\"next\""),
        "a next page: {html}"
    );
    assert!(html.contains("1–100 of 130 changes"), "{html}");
    let (status, second) = get(&app, "/drift?page=2", ADMIN).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert!(
        !second.contains("rel=\"next\"") && second.contains("drift\" rel=\"prev\""),
        "{second}"
    );
    assert!(second.contains("On an earlier page."), "{second}");
    for n in 0..124 {
        let subject = format!("File[web-1-{n:03}]");
        let on = [&html, &second]
            .iter()
            .filter(|p| p.contains(&subject))
            .count();
        assert_eq!(on, 1, "{subject} on one page");
    }
    let (_, small) = get(&app, "/drift?per=10&page=3", ADMIN).await;
    assert!(
        small.contains("drift?per=10&amp;page=4\" rel=\"next\"")
            && small.contains("drift?per=10&amp;page=2\" rel=\"prev\""),
        "{small}"
    );
}

#[test]
fn the_drift_clusters_are_paged() {
    crate::on_both!(the_drift_clusters_come_a_page_at_a_time);
}
