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
