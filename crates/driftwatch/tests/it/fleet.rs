//! `--report-to`: the stack's report reaches a real `datum server` (run
//! here in-process on a free loopback port, SQLite store), with its
//! categories and history, and without a sensitive value.

use std::path::Path;
use std::time::Duration;

use datum_fleet::IdentityKind;

use crate::support::{outcome, report};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server folder with the stack `shop-prod` enrolled; the server serves
/// from a thread until the test process ends.
fn server(dir: &Path) -> (datum_fleet::AdminCredentials, std::path::PathBuf) {
    let port = free_port();
    let made = datum_server::init_command(
        &dir.join("srv"),
        &datum_server::InitOptions {
            listen: format!("127.0.0.1:{port}"),
            names: vec![],
            url: None,
            store: "sqlite".into(),
            sampling: None,
        },
    )
    .unwrap();
    let creds =
        datum_server::enroll_command(&dir.join("srv"), "shop-prod", IdentityKind::Stack, None)
            .unwrap();
    let report_to = dir.join("report.yaml");
    datum_server::init::write_credentials(&report_to, &creds).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let srv = dir.join("srv");
    std::thread::spawn(move || {
        let _ = datum_server::serve(&srv, &datum_server::ServeOptions::default(), |_, _, _| {
            let _ = tx.send(());
        });
    });
    rx.recv_timeout(Duration::from_secs(30)).unwrap();
    (made.admin, report_to)
}

#[test]
fn a_stack_reports_beside_hosts_without_its_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let (admin, report_to) = server(dir.path());
    for _ in 0..2 {
        let out = outcome(report("canary").arg("--report-to").arg(&report_to));
        assert!(
            out.stderr.contains("reported to https://127.0.0.1:"),
            "{}",
            out.stderr
        );
    }
    let client = datum_fleet::Client::new(
        &admin.server,
        &admin.ca_pem,
        &admin.token,
        datum_fleet::Timeouts::default(),
    )
    .unwrap();
    let hosts = client.get_json("/v1/hosts").unwrap();
    let stack = &hosts["hosts"][0];
    assert_eq!(stack["name"], "shop-prod");
    assert_eq!(stack["kind"], "stack");
    assert_eq!(stack["reports"], 2, "its history");
    assert!(
        stack["counts"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k == "changed_outside"),
        "{stack}"
    );
    let history = client.get_json("/v1/hosts/shop-prod/reports").unwrap();
    assert_eq!(history["reports"].as_array().unwrap().len(), 2);
    let drift = client.get_json("/v1/drift").unwrap();
    assert!(!drift["clusters"].as_array().unwrap().is_empty(), "{drift}");
    for text in [hosts.to_string(), history.to_string(), drift.to_string()] {
        assert!(
            !text.contains("CANARY-7f3a"),
            "a secret reached the server: {text}"
        );
    }
    // The outbox is empty once delivered.
    let mut store =
        datum_store::Store::open(&driftwatch::fleet::default_outbox(&report_to)).unwrap();
    assert_eq!(store.outbox_status().unwrap().depth, 0);
    assert_eq!(store.outbox_status().unwrap().delivered_total, 2);
    let _ = &mut store;
}

/// Two deliveries of one outbox (a nightly job and a run by hand) would
/// send, count and trim the same reports: the second waits for the first.
/// The test holds the outbox's delivery lock, as a running delivery does;
/// driftwatch queues its report, then waits, and delivers once the lock is
/// let go.
#[test]
fn a_delivery_waits_while_another_delivers_the_same_outbox() {
    let dir = tempfile::tempdir().unwrap();
    let (admin, report_to) = server(dir.path());
    let outbox = driftwatch::fleet::default_outbox(&report_to);
    let store = datum_store::Store::open(&outbox).unwrap();
    let held = store.delivery_lock(Duration::ZERO).unwrap();
    let run = {
        let report_to = report_to.clone();
        std::thread::spawn(move || outcome(report("canary").arg("--report-to").arg(&report_to)))
    };
    // Queued first (before any delivery is tried).
    let started = std::time::Instant::now();
    while store.outbox_status().unwrap().depth == 0 {
        assert!(started.elapsed() < Duration::from_secs(60), "never queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = datum_fleet::Client::new(
        &admin.server,
        &admin.ca_pem,
        &admin.token,
        datum_fleet::Timeouts::default(),
    )
    .unwrap();
    let reports = |client: &datum_fleet::Client| -> u64 {
        let hosts = client.get_json("/v1/hosts").unwrap();
        hosts["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["reports"].as_u64().unwrap_or(0))
            .sum()
    };
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(reports(&client), 0, "delivered while another delivery ran");
    assert_eq!(store.outbox_status().unwrap().depth, 1);
    assert!(!run.is_finished(), "did not wait for the other delivery");
    drop(held);
    let out = run.join().unwrap();
    assert!(
        out.stderr.contains("reported to https://127.0.0.1:"),
        "{}",
        out.stderr
    );
    assert_eq!(reports(&client), 1);
    assert_eq!(store.outbox_status().unwrap().depth, 0);
}

/// A lock that cannot be taken for another reason than a running delivery
/// (here a folder where its file belongs) is said as it is, and the report
/// stays queued, undelivered; the exit code is the report's.
#[test]
fn an_outbox_lock_that_cannot_be_taken_is_named_and_the_report_stays_queued() {
    let dir = tempfile::tempdir().unwrap();
    let (admin, report_to) = server(dir.path());
    let outbox = driftwatch::fleet::default_outbox(&report_to);
    let mut lock = outbox.clone().into_os_string();
    lock.push(".delivery-lock");
    std::fs::create_dir(&lock).unwrap();
    let out = outcome(report("canary").arg("--report-to").arg(&report_to));
    assert!(
        out.stderr.contains("cannot lock") && out.stderr.contains("stays queued"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("still running"), "{}", out.stderr);
    let store = datum_store::Store::open(&outbox).unwrap();
    assert_eq!(store.outbox_status().unwrap().depth, 1);
    let client = datum_fleet::Client::new(
        &admin.server,
        &admin.ca_pem,
        &admin.token,
        datum_fleet::Timeouts::default(),
    )
    .unwrap();
    let hosts = client.get_json("/v1/hosts").unwrap();
    assert_eq!(
        hosts["hosts"][0]["reports"], 0,
        "delivered without its lock: {hosts}"
    );
}

/// A stack with thousands of drifted resources made a report over the
/// server's 1 MiB (a finding each): refused for good with 413, night after
/// night, so the fleet never saw that stack's drift. The report sheds
/// detail until it fits, as a host's does.
#[test]
fn a_stack_with_thousands_of_drifted_resources_still_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (admin, report_to) = server(dir.path());
    let many = |name: &str| {
        let mut doc: serde_json::Value = serde_json::from_slice(
            &std::fs::read(crate::support::fixture(&format!("canary/{name}"))).unwrap(),
        )
        .unwrap();
        let base = doc["resource_drift"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["address"] == "kubernetes_config_map_v1.flags")
            .unwrap()
            .clone();
        let drift: Vec<serde_json::Value> = (0..3000)
            .map(|i| {
                let mut r = base.clone();
                let name =
                    format!("flags_{i:05}_with_a_rather_long_resource_name_to_pass_the_limit");
                r["address"] = format!("kubernetes_config_map_v1.{name}").into();
                r["name"] = name.into();
                r
            })
            .collect();
        doc["resource_drift"] = drift.into();
        let path = dir.path().join(name);
        std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
        path
    };
    let (refresh, plan) = (many("refresh_only.json"), many("plan.json"));
    let out = outcome(
        crate::support::driftwatch()
            .arg("report")
            .arg("--refresh-plan")
            .arg(&refresh)
            .arg("--plan")
            .arg(&plan)
            .arg("--stack")
            .arg("shop-prod")
            .arg("--report-to")
            .arg(&report_to),
    );
    assert!(!out.stderr.contains("refused"), "{}", out.stderr);
    let client = datum_fleet::Client::new(
        &admin.server,
        &admin.ca_pem,
        &admin.token,
        datum_fleet::Timeouts::default(),
    )
    .unwrap();
    let hosts = client.get_json("/v1/hosts").unwrap();
    assert_eq!(hosts["hosts"][0]["reports"], 1, "{hosts}");
}

/// The report body (the outbox, and what the server stores) of a stack whose drift holds
/// an unmarked copy of a secret marked only in a resource that did not drift (the
/// `secret-copy` fixture, see canary.rs) does not hold the secret.
#[test]
fn a_copied_secret_reaches_neither_the_outbox_nor_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let (admin, report_to) = server(dir.path());
    let out = outcome(report("secret-copy").arg("--report-to").arg(&report_to));
    assert!(
        out.stderr.contains("reported to https://127.0.0.1:"),
        "{}",
        out.stderr
    );
    let client = datum_fleet::Client::new(
        &admin.server,
        &admin.ca_pem,
        &admin.token,
        datum_fleet::Timeouts::default(),
    )
    .unwrap();
    let history = client.get_json("/v1/hosts/shop-prod/reports").unwrap();
    assert_eq!(history["reports"].as_array().unwrap().len(), 1, "{history}");
    let drift = client.get_json("/v1/drift").unwrap();
    assert!(!drift["clusters"].as_array().unwrap().is_empty(), "{drift}");
    for text in [history.to_string(), drift.to_string()] {
        assert!(
            !text.contains("CANARY-7f3a"),
            "a secret reached the server: {text}"
        );
    }
    // Every byte the outbox and the server's store hold (databases, journals, WAL).
    let mut files = vec![dir.path().to_path_buf()];
    let mut read = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                files.push(entry.unwrap().path());
            }
        } else {
            let bytes = std::fs::read(&path).unwrap();
            read += 1;
            assert!(
                !bytes.windows(11).any(|w| w == b"CANARY-7f3a"),
                "a secret is in {}",
                path.display()
            );
        }
    }
    assert!(read > 2, "{read} files");
}

/// The `secret-key` fixture (see canary.rs): the pending change whose tags are keyed by a
/// sensitive variable's value and by a value marked only in the planned values reaches
/// the server and the outbox by its address, and neither key with it.
#[test]
fn a_secret_used_as_a_pending_changes_key_reaches_neither_the_outbox_nor_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let (admin, report_to) = server(dir.path());
    let out = outcome(report("secret-key").arg("--report-to").arg(&report_to));
    assert!(
        out.stderr.contains("reported to https://127.0.0.1:"),
        "{}",
        out.stderr
    );
    let client = datum_fleet::Client::new(
        &admin.server,
        &admin.ca_pem,
        &admin.token,
        datum_fleet::Timeouts::default(),
    )
    .unwrap();
    let history = client.get_json("/v1/hosts/shop-prod/reports").unwrap();
    assert_eq!(history["reports"].as_array().unwrap().len(), 1, "{history}");
    let hosts = client.get_json("/v1/hosts").unwrap();
    let drift = client.get_json("/v1/drift").unwrap();
    for text in [history.to_string(), hosts.to_string(), drift.to_string()] {
        assert!(
            !text.contains("CANARY-7f3a"),
            "a secret reached the server: {text}"
        );
    }
    assert_eq!(history["reports"][0]["counts"]["pending"], 2, "{history}");
    // Every byte the outbox and the server's store hold (databases, journals, WAL).
    let mut files = vec![dir.path().to_path_buf()];
    let (mut read, mut pending_seen) = (0, false);
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                files.push(entry.unwrap().path());
            }
        } else {
            let bytes = std::fs::read(&path).unwrap();
            read += 1;
            assert!(
                !bytes.windows(11).any(|w| w == b"CANARY-7f3a"),
                "a secret is in {}",
                path.display()
            );
            pending_seen |= bytes.windows(16).any(|w| w == b"aws_iam_role.app");
        }
    }
    assert!(read > 2, "{read} files");
    // The pending change itself was stored.
    assert!(pending_seen);
}

/// A `report.yaml` whose CA did not sign the server's certificate (another
/// server's, or one initialised again: every `datum server init` names
/// its CA alike, so rustls says BadSignature): the warning names the file
/// the CA came from, which it did not ("the CA the credentials names"),
/// and the report stays queued.
#[test]
fn a_report_to_of_another_ca_is_named_in_the_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (_admin, report_to) = server(dir.path());
    let other = datum_server::init_command(
        &dir.path().join("other"),
        &datum_server::InitOptions {
            listen: format!("127.0.0.1:{}", free_port()),
            names: vec![],
            url: None,
            store: "sqlite".into(),
            sampling: None,
        },
    )
    .unwrap();
    // The stack's own credentials, with the other server's CA.
    let mut creds =
        datum_fleet::Credentials::parse(&report_to, &std::fs::read_to_string(&report_to).unwrap())
            .unwrap();
    creds.ca_pem = other.admin.ca_pem;
    datum_server::init::write_credentials(&report_to, &creds).unwrap();
    let out = outcome(report("canary").arg("--report-to").arg(&report_to));
    assert!(
        out.stderr.contains(&format!(
            "the server's certificate is not signed by the CA {} names",
            report_to.display()
        )) && out.stderr.contains("BadSignature"),
        "{}",
        out.stderr
    );
    let store = datum_store::Store::open(&driftwatch::fleet::default_outbox(&report_to)).unwrap();
    assert_eq!(store.outbox_status().unwrap().depth, 1, "kept queued");
}
