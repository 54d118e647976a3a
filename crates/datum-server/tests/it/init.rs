//! `datum server init`'s URL for hosts, as docs/fleet.md's commands use it.

use datum_server::InitOptions;
use datum_server::init::{InitError, init};

fn listening_on(listen: &str, names: &[&str]) -> InitOptions {
    InitOptions {
        listen: listen.into(),
        names: names.iter().map(|n| (*n).to_owned()).collect(),
        url: None,
        store: "sqlite".into(),
        sampling: None,
    }
}

/// `--listen 0.0.0.0:8443` without a name hosts know the server by is
/// refused before the folder is made; with `--name fleet.example.org`
/// (docs/fleet.md's command) the credentials and server.yaml name it.
#[test]
fn every_address_needs_a_name_to_report_to_and_nothing_is_written_without() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("srv");
    let err = init(&dir, &listening_on("0.0.0.0:8443", &[])).unwrap_err();
    assert!(matches!(err, InitError::NoReportUrl { .. }), "{err}");
    assert!(!dir.exists(), "init wrote its folder before refusing");
    let made = init(&dir, &listening_on("0.0.0.0:8443", &["fleet.example.org"])).unwrap();
    assert_eq!(made.admin.server, "https://fleet.example.org:8443");
    let yaml = std::fs::read_to_string(dir.join("server.yaml")).unwrap();
    assert!(
        yaml.contains("url: https://fleet.example.org:8443"),
        "{yaml}"
    );
    assert!(yaml.contains("listen: \"0.0.0.0:8443\""), "{yaml}");
}

/// Each error of `e` and its sources, as `datum` prints them.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// docs/fleet.md: a PostgreSQL store that cannot be reached (down, a
/// mistyped URL, a database not created yet) leaves no folder behind, and
/// init can be run again once it is fixed; the error says which it was.
/// It said only "postgres: cannot get a connection: Error occurred while
/// creating a new object: db error" (or "...: error connecting to server"),
/// the pool's words for any of them, the server's own reason dropped.
#[test]
fn a_store_that_cannot_be_reached_is_named_why() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("srv");
    let mut options = listening_on("127.0.0.1:8443", &[]);
    // Nothing listens on port 1 of this machine's loopback.
    options.store = "postgres://datum:PWCANARY@127.0.0.1:1/fleet".into();
    let err = chain(&datum_server::serve::init_command(&dir, &options).unwrap_err());
    assert!(!dir.exists(), "init wrote its folder: {err}");
    assert!(
        err.to_lowercase().contains("connection refused"),
        "the reason: {err}"
    );
    assert!(!err.contains("PWCANARY"), "{err}");

    let Ok(base) = std::env::var("DATUM_TEST_POSTGRES") else {
        eprintln!("note: DATUM_TEST_POSTGRES is not set: the missing database is not tried");
        return;
    };
    let Some((server, _)) = base.rsplit_once('/') else {
        panic!("DATUM_TEST_POSTGRES names no database: {base}");
    };
    options.store = format!("{server}/datum_never_created");
    let err = chain(&datum_server::serve::init_command(&dir, &options).unwrap_err());
    assert!(!dir.exists(), "init wrote its folder: {err}");
    assert!(
        err.contains("database \"datum_never_created\" does not exist"),
        "the reason: {err}"
    );
}
