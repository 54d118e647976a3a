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

async fn post<B: Backend>(app: &Arc<App<B>>, body: String) -> (StatusCode, String) {
    let request = Request::post("/v1/reports")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = router(Arc::clone(app)).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// PostgreSQL's text cannot hold a NUL character: a report holding one is
/// refused with 400 on every store (not a 503 the host would retry
/// forever), nothing of it is stored, and the host's next clean report is.
async fn a_report_holding_nul_is_refused_and_stores_nothing<B: Backend>(fleet: &Fleet<B>) {
    let now = 1_800_000_000;
    let hash = datum_fleet::credentials::token_hash(TOKEN);
    fleet.enroll("web-1", "host", &hash, now).await.unwrap();
    let app = Arc::new(App::new(
        fleet.clone(),
        ServerConfig::new(
            "https://127.0.0.1:1".into(),
            "127.0.0.1:1".into(),
            "test".into(),
        ),
    ));
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
