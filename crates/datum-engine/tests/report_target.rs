//! A pass's report names each resource's target, the host path its kind
//! claims (`Registry::path_of`): whatever the field that declares it is
//! named (a `FakeMount`'s `mountpoint`, a File's `path`), for a resource
//! observed converged as for one that changes, and for one whose
//! declaration does not parse (looked up again); none for a kind that owns
//! no path.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly on a broken fixture"
)]

use std::collections::HashSet;

use datum_catalog::{Catalogue, HostIdentity};
use datum_core::{Resource, ResourceId};
use datum_engine::{Mode, PassContext, PassOptions, PassSummary, SilentReporter, run_pass_with};
use datum_host::Host;
use datum_providers::Registry;
use datum_store::Store;
use datum_store::backup::BackupStore;
use datum_testkit::fake::{FakeMount, fake_file, fake_mount, fake_providers, fake_unit};

fn targets(summary: &PassSummary) -> Vec<(String, Option<String>)> {
    let mut all: Vec<(String, Option<String>)> = summary
        .resources
        .iter()
        .map(|r| (r.id.to_string(), r.target.clone()))
        .collect();
    all.sort();
    all
}

#[test]
fn a_report_names_the_path_the_kind_claims_whatever_its_field_is_named() {
    let root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let host = Host::new(root.path().to_path_buf());
    let mut store = Store::open(&state.path().join("state.db")).unwrap();
    let mut backups = BackupStore::open(&state.path().join("backups")).unwrap();
    let (mut providers, _journal, _faults) = fake_providers();
    providers.push(Box::new(FakeMount));
    providers.push(Box::new(datum_providers::file::FileProvider));
    let registry = Registry::new(providers);
    let catalogue = Catalogue {
        host: HostIdentity::default(),
        resources: vec![
            fake_mount("data", "/srv/data"),
            fake_file("a", "/a.conf", "a\n", &[]),
            fake_unit("web", &[]),
            // Its declaration does not parse: the pass holds no provider
            // for it, and its report still names its path.
            Resource::new(
                ResourceId::new("File", "bad"),
                serde_json::json!({"path": "/bad.conf", "mode": "not a mode"}),
            ),
        ],
        autorequires: Vec::new(),
        boundary: Default::default(),
    };
    let want = [
        ("FakeFile[a]", Some("/a.conf")),
        ("FakeMount[data]", Some("/srv/data")),
        ("FakeUnit[web]", None),
        ("File[bad]", Some("/bad.conf")),
    ]
    .map(|(id, target)| (id.to_owned(), target.map(str::to_owned)));
    // A plan, the apply that writes `/a.conf`, and one that finds it
    // converged.
    let mut outcomes = Vec::new();
    for mode in [Mode::Plan, Mode::Apply, Mode::Apply] {
        let mut ctx = PassContext {
            registry: &registry,
            host: &host,
            mode,
            store: Some(&mut store),
            backups: Some(&mut backups),
            now: 1_000,
            skip: HashSet::new(),
            sensitive: None,
        };
        let summary = run_pass_with(
            &catalogue,
            &mut ctx,
            &mut SilentReporter,
            &PassOptions::default(),
        )
        .unwrap();
        assert_eq!(targets(&summary), want, "{mode:?}");
        let outcome = |id: &str| {
            let r = summary.resources.iter().find(|r| r.id.to_string() == id);
            format!("{:?}", r.unwrap().outcome)
        };
        assert!(outcome("File[bad]").starts_with("Failed"), "{mode:?}");
        assert!(
            outcome("FakeMount[data]").starts_with("Unchanged"),
            "{mode:?}"
        );
        outcomes.push(outcome("FakeFile[a]"));
    }
    assert!(outcomes[1].starts_with("Changed"), "{outcomes:?}");
    assert!(outcomes[2].starts_with("Unchanged"), "{outcomes:?}");
}
