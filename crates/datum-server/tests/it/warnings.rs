//! A pass's warnings (`datum_fleet::Report::warnings`): the server says it
//! takes them, keeps them with the report, and shows them in the history
//! (`/v1/hosts/{name}/reports`) and on the host's page.

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
const ADMIN: &str = "dtm_a_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

async fn answer<B: Backend>(app: &Arc<App<B>>, request: Request<Body>) -> (StatusCode, String) {
    let response = router(Arc::clone(app)).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 22)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn post<B: Backend>(app: &Arc<App<B>>, body: String) -> (StatusCode, String) {
    let request = Request::post("/v1/reports")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap();
    answer(app, request).await
}

async fn get<B: Backend>(app: &Arc<App<B>>, path: &str) -> (StatusCode, String) {
    let request = Request::get(path)
        .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
        .body(Body::empty())
        .unwrap();
    answer(app, request).await
}

/// Every reply says the server takes warnings; a report without them (a
/// host that has not heard so yet, or predates them) is taken and shows
/// none; one with them has them in the history and on the host page,
/// escaped there as every text a host sent.
async fn warnings_are_taken_kept_and_shown<B: Backend>(fleet: &Fleet<B>) {
    let now = 1_800_000_000;
    let hash = datum_fleet::credentials::token_hash(TOKEN);
    fleet.enroll("web-1", "host", &hash, now).await.unwrap();
    let admin = datum_fleet::credentials::token_hash(ADMIN);
    fleet.enroll("ops", "admin", &admin, now).await.unwrap();
    let app = Arc::new(App::new(
        fleet.clone(),
        ServerConfig::new(
            "https://127.0.0.1:1".into(),
            "127.0.0.1:1".into(),
            "test".into(),
        ),
    ));

    let without = crate::support::report("web-1", ReportKind::Apply, 1, now);
    let json = serde_json::to_string(&without).unwrap();
    assert!(!json.contains("warnings"), "{json}");
    let (status, body) = post(&app, json).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let reply: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        reply["takes"],
        serde_json::json!(["warnings", "verified_except"]),
        "{reply}"
    );
    let (status, html) = get(&app, "/hosts/web-1").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(!html.contains("id=\"warnings\""), "no warning, no card");

    let mut with = crate::support::report("web-1", ReportKind::Check, 2, now + 60);
    with.warnings = vec![
        "User[w1]: usermod succeeded and said: usermod: Warning: missing or non-executable shell '/bin/nope'".to_owned(),
        "<script>alert(1)</script>".to_owned(),
    ];
    let (status, body) = post(&app, serde_json::to_string(&with).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (status, history) = get(&app, "/v1/hosts/web-1/reports").await;
    assert_eq!(status, StatusCode::OK, "{history}");
    let history: serde_json::Value = serde_json::from_str(&history).unwrap();
    let by_seq = |seq: u64| {
        history["reports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["seq"] == seq)
            .unwrap_or_else(|| panic!("{seq} in {history}"))
            .clone()
    };
    assert!(by_seq(1).get("warnings").is_none(), "{history}");
    assert_eq!(by_seq(2)["warnings"], serde_json::json!(with.warnings));

    let (status, html) = get(&app, "/hosts/web-1").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let at = html
        .find("id=\"warnings\"")
        .expect("the host page shows them");
    let card = &html[at..];
    // Escaped as every text of a host is (quotes and slashes too).
    assert!(
        card.contains(
            "User[w1]: usermod succeeded and said: usermod: Warning: missing or non-executable shell &#x27;&#x2f;bin&#x2f;nope&#x27;"
        ),
        "{card}"
    );
    assert!(card.contains("report #2"), "{card}");
    assert!(!html.contains("<script>alert(1)"), "escaped");
    assert!(card.contains("&lt;script&gt;"), "{card}");
}

#[test]
fn warnings_of_a_pass() {
    crate::on_both!(warnings_are_taken_kept_and_shown);
}

/// A host sends at most 20 warnings of 1 KiB and two lines counting the
/// rest; a modified host could send many more, up to the report's size
/// limit. The server takes the report (its drift is what matters) but
/// keeps and shows only what a host sends at most, saying how many it
/// left out.
async fn warnings_past_what_a_host_sends_are_cut<B: Backend>(fleet: &Fleet<B>) {
    let now = 1_800_000_000;
    let hash = datum_fleet::credentials::token_hash(TOKEN);
    fleet.enroll("web-1", "host", &hash, now).await.unwrap();
    let admin = datum_fleet::credentials::token_hash(ADMIN);
    fleet.enroll("ops", "admin", &admin, now).await.unwrap();
    let app = Arc::new(App::new(
        fleet.clone(),
        ServerConfig::new(
            "https://127.0.0.1:1".into(),
            "127.0.0.1:1".into(),
            "test".into(),
        ),
    ));

    let mut many = crate::support::report("web-1", ReportKind::Check, 1, now);
    many.warnings = (0..330)
        .map(|i| format!("w{i} {}", "x".repeat(3000)))
        .collect();
    let body = serde_json::to_string(&many).unwrap();
    assert!(body.len() > 900 * 1024 && body.len() < 1024 * 1024);
    let (status, reply) = post(&app, body).await;
    assert_eq!(status, StatusCode::OK, "{reply}");

    let (status, history) = get(&app, "/v1/hosts/web-1/reports").await;
    assert_eq!(status, StatusCode::OK);
    let history: serde_json::Value = serde_json::from_str(&history).unwrap();
    let kept = history["reports"][0]["warnings"].as_array().unwrap();
    assert_eq!(kept.len(), 22, "at most 22 kept, not {}", kept.len());
    assert!(kept[..21].iter().all(|w| w.as_str().unwrap().len() <= 1027));
    assert!(kept[0].as_str().unwrap().starts_with("w0 xxx"));
    assert!(kept[0].as_str().unwrap().ends_with('…'));
    assert_eq!(
        kept[21],
        "309 more warning(s) left out by the server (a host sends at most 22)"
    );

    let (status, html) = get(&app, "/hosts/web-1").await;
    assert_eq!(status, StatusCode::OK);
    let card = &html[html.find("id=\"warnings\"").expect("a card")..];
    assert_eq!(
        card.matches("<li><code>w").count(),
        21,
        "shown: 21 and the count"
    );
    assert!(card.len() < 64 * 1024, "the card is {} bytes", card.len());

    // A host's own bounded warnings are kept as they are.
    let mut bounded = crate::support::report("web-1", ReportKind::Check, 2, now + 60);
    bounded.warnings = (0..20)
        .map(|i| datum_fleet::report::bounded(&format!("v{i} {}", "é".repeat(900)), 1024))
        .chain(["3 more warning(s) of the pass (read them on the host)".to_owned()])
        .collect();
    let (status, reply) = post(&app, serde_json::to_string(&bounded).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let (_, history) = get(&app, "/v1/hosts/web-1/reports").await;
    let history: serde_json::Value = serde_json::from_str(&history).unwrap();
    let second = history["reports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["seq"] == 2)
        .unwrap();
    assert_eq!(second["warnings"], serde_json::json!(bounded.warnings));
}

#[test]
fn a_hosts_warnings_are_bounded_by_the_server() {
    crate::on_both!(warnings_past_what_a_host_sends_are_cut);
}
