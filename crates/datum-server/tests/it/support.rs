//! Stores to run a test body on, and reports to feed them.

use std::collections::BTreeMap;

use datum_fleet::{Failure, Finding, Report, ReportKind};
use datum_server::fleet::Fleet;
use datum_server::store::postgres::PostgresBackend;
use datum_server::store::sqlite::SqliteBackend;
use datum_server::store::{Backend, MIGRATIONS};

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A fresh SQLite store in a temporary folder.
pub fn sqlite() -> (tempfile::TempDir, Fleet<SqliteBackend>) {
    let dir = tempfile::tempdir().unwrap();
    let b = SqliteBackend::open(&dir.path().join("fleet.db"), MIGRATIONS::SQLITE).unwrap();
    (dir, Fleet::new(b))
}

/// The URL of a fresh PostgreSQL database, or `None` (with a note) when no
/// server is configured and none is required.
pub async fn postgres_url() -> Option<String> {
    let Ok(base) = std::env::var("DATUM_TEST_POSTGRES") else {
        assert!(
            std::env::var("DATUM_POSTGRES_REQUIRED").as_deref() != Ok("1"),
            "DATUM_POSTGRES_REQUIRED=1 but DATUM_TEST_POSTGRES is not set (scripts/postgres start)"
        );
        eprintln!(
            "note: DATUM_TEST_POSTGRES is not set: the PostgreSQL half of this test is skipped"
        );
        return None;
    };
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .expect("connect to DATUM_TEST_POSTGRES");
    tokio::spawn(conn);
    let mut bytes = [0u8; 6];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (std::process::id() as u8).wrapping_add(i as u8 * 37)
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
                >> (i * 4)) as u8;
    }
    let name = format!("fleet_test_{}", hex(&bytes));
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (prefix, _) = base.rsplit_once('/').unwrap();
    Some(format!("{prefix}/{name}"))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub async fn postgres() -> Option<Fleet<PostgresBackend>> {
    let url = postgres_url().await?;
    Some(Fleet::new(
        PostgresBackend::open(&url, MIGRATIONS::POSTGRES)
            .await
            .unwrap(),
    ))
}

/// Runs `body` on SQLite, then on PostgreSQL when there is one.
#[macro_export]
macro_rules! on_both {
    ($body:ident) => {{
        let rt = $crate::support::runtime();
        rt.block_on(async {
            let (_dir, lite) = $crate::support::sqlite();
            $body(&lite).await;
            if let Some(pg) = $crate::support::postgres().await {
                $body(&pg).await;
            }
        });
    }};
}

/// A small valid report.
pub fn report(host: &str, kind: ReportKind, seq: u64, at: i64) -> Report {
    Report {
        format_version: datum_fleet::FORMAT_VERSION,
        key: format!("{:032x}", (seq as u128) << 64 | u128::from(fnv(host))),
        seq,
        kind,
        host: host.to_owned(),
        labels: BTreeMap::from([("role".to_owned(), "web".to_owned())]),
        datum_version: "0.1.0".into(),
        revision: "git:aaaa".into(),
        catalogue: "c1".into(),
        started_at: at - 1,
        finished_at: at,
        duration_ms: 30,
        exit_code: 0,
        classes_checked: vec![],
        counts: BTreeMap::from([("unchanged".to_owned(), 12)]),
        resources: 12,
        classes: vec![datum_fleet::ClassBound {
            class: "normal".into(),
            interval_s: 600,
            bound_ms: Some(600_040),
            resources: 12,
            policy: Some("report".into()),
        }],
        expected_interval_s: 600,
        validators: BTreeMap::new(),
        trees: vec![],
        failures: vec![],
        findings: vec![],
        changed: vec![],
        changed_total: 0,
        quarantined: vec![],
        sampling: None,
        trusted_by_metadata: None,
        instructions: vec![],
        pending: vec![],
    }
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

pub fn failure(resource: &str, signature: &str) -> Failure {
    Failure {
        resource: resource.into(),
        phase: "apply".into(),
        validator: Some("nginx".into()),
        validator_version: Some("nginx version: nginx/1.26.0".into()),
        exit_status: Some(1),
        message: "validation failed (nginx, exit 1)\nnginx: [emerg] unknown directive \"http3\""
            .into(),
        signature: signature.into(),
    }
}

pub fn finding(subject: &str, observed: &str, class: &str) -> Finding {
    let paths = vec!["content".to_owned()];
    Finding {
        signature: datum_fleet::report::finding_signature(subject, "changed_outside", &paths),
        subject: subject.into(),
        category: "changed_outside".into(),
        class: class.into(),
        paths,
        observed: Some(observed.into()),
        first_seen: 1_000,
        checks: Some(2),
        changes: vec![],
        content_diff: None,
        changed_by: vec![],
    }
}

/// Ingests `r` as the server would.
pub async fn ingest<B: Backend>(f: &Fleet<B>, r: &Report) -> bool {
    let raw = serde_json::to_string(r).unwrap();
    f.ingest(r, &raw, r.finished_at, Default::default(), 5)
        .await
        .unwrap()
}
