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
    let (client, base) = postgres_server().await?;
    let name = database_name();
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (prefix, _) = base.rsplit_once('/').unwrap();
    Some(format!("{prefix}/{name}"))
}

/// Names in an order that a byte comparison and a language's collation
/// disagree on (en-US: `a_b a-b ab aB B`; bytes: `B a-b aB a_b ab`).
pub const COLLATION_PROBE: [&str; 5] = ["a-b", "a_b", "aB", "ab", "B"];

/// A fresh PostgreSQL database whose default collation is not byte order
/// (`en-US` by ICU, or libc's `en_US.UTF-8`), which one it is, and its URL; `None`
/// (with a note) when there is no server, or when the server can make no
/// such database and none is required: `scripts/postgres` initialises its
/// server in the machine's locale, often `C.UTF-8`, which orders text as
/// bytes do and so hides any query that forgets to ask for byte order.
pub async fn postgres_collated() -> Option<(Fleet<PostgresBackend>, &'static str, String)> {
    let (client, base) = postgres_server().await?;
    let (prefix, _) = base.rsplit_once('/').unwrap();
    for (how, options) in [
        (
            "ICU en-US",
            "TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'",
        ),
        (
            "libc en_US.UTF-8",
            "TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'en_US.UTF-8' LC_CTYPE 'en_US.UTF-8'",
        ),
    ] {
        let name = database_name();
        if let Err(e) = client
            .batch_execute(&format!("CREATE DATABASE {name} {options}"))
            .await
        {
            eprintln!("note: cannot create a database with {how}: {e}");
            continue;
        }
        let url = format!("{prefix}/{name}");
        let (db, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let probe = COLLATION_PROBE
            .iter()
            .map(|h| format!("('{h}')"))
            .collect::<Vec<_>>()
            .join(", ");
        let row = db
            .query_one(
                &format!("SELECT string_agg(h, ' ' ORDER BY h) FROM (VALUES {probe}) AS v(h)"),
                &[],
            )
            .await
            .unwrap();
        let ordered: String = row.get(0);
        let mut bytes = COLLATION_PROBE.to_vec();
        bytes.sort();
        if ordered == bytes.join(" ") {
            eprintln!("note: a database with {how} orders text as bytes do: {ordered}");
            continue;
        }
        let fleet = Fleet::new(
            PostgresBackend::open(&url, MIGRATIONS::POSTGRES)
                .await
                .unwrap(),
        );
        return Some((fleet, how, url));
    }
    assert!(
        std::env::var("DATUM_POSTGRES_REQUIRED").as_deref() != Ok("1"),
        "DATUM_POSTGRES_REQUIRED=1 but the PostgreSQL server can make no database whose collation differs from byte order (neither ICU nor an en_US.UTF-8 locale)"
    );
    eprintln!(
        "note: no PostgreSQL database with a collation other than byte order: the PostgreSQL half of this test is skipped"
    );
    None
}

/// A client of the `DATUM_TEST_POSTGRES` server and its URL, or `None`
/// (with a note) when no server is configured and none is required.
async fn postgres_server() -> Option<(tokio_postgres::Client, String)> {
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
    Some((client, base))
}

/// A new database's name, different for every call.
fn database_name() -> String {
    static CALLS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut bytes = [0u8; 6];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (std::process::id() as u8).wrapping_add(i as u8 * 37)
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
                >> (i * 4)) as u8;
    }
    format!("fleet_test_{}{call:02x}", hex(&bytes))
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
        warnings: vec![],
        verified_except: None,
    }
}

pub fn fnv(s: &str) -> u64 {
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

/// Ingests `r` as made by the state store `store` (its `Datum-Store-Id`),
/// with a key of that store's own (two stores number alike).
pub async fn ingest_from_store<B: Backend>(f: &Fleet<B>, r: &Report, store: u128) -> bool {
    let mut r = r.clone();
    r.key = format!(
        "{:032x}",
        (r.seq as u128) << 64 | store << 32 | u128::from(fnv(&r.host))
    );
    let raw = serde_json::to_string(&r).unwrap();
    let headers = datum_server::fleet::OutboxHeaders {
        store: Some(store),
        ..Default::default()
    };
    f.ingest(&r, &raw, r.finished_at, headers, 5).await.unwrap()
}
