//! The Package provider against real dpkg and apt.
//!
//! Every test body runs inside the test bed that `scripts/testbed` boots (a
//! Debian root under systemd-nspawn, no network): this test executable
//! re-runs itself there with `nsenter`, where `/` is the container's root, so
//! the provider runs `apt-get` and reads `/var/lib/dpkg/status` exactly as on
//! a managed machine. Packages come from small local repositories built with
//! `datum_testkit::apt` (one per test, named `datum-it-*`), and every test
//! purges what it installed. Tests take the shared `apt` lock: dpkg allows
//! one transaction at a time, and some tests edit its status file. Without a
//! test bed each test prints "skipped: no testbed (run scripts/testbed)".

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a failed step must stop the test"
)]

use std::path::Path;
use std::process::Command;

use datum_core::{Action, Diff, Observed, Resource, ResourceId};
use datum_host::Host;
use datum_providers::package::{self, PackageError, PackageProvider};
use datum_providers::{OpenGate, Provider, ProviderError};
use datum_testkit::apt::{DebPackage, LocalRepo};
use datum_testkit::testbed::within;
use datum_testkit::testbed_test;
use serde_json::{Value, json};

/// The host inside the container: the running system, so `--root /`.
fn host() -> Host {
    Host::with_name("/", "testbed")
}

fn resource(name: &str, desired: Value) -> Resource {
    Resource::new(ResourceId::new("Package", name), desired)
}

/// What a pass does to one resource: observe, diff, apply when it differs,
/// verify. Each call is a new pass (a new Host, so a fresh database read).
/// Returns the plan's diff and what verify observed.
fn pass(r: &Resource) -> Result<(Diff, Observed), ProviderError> {
    pass_on(&host(), r)
}

fn pass_on(host: &Host, r: &Resource) -> Result<(Diff, Observed), ProviderError> {
    pass_after(host, r, None)
}

/// [`pass_on`] the way the engine runs it after a batch: diffing what the
/// batch saw before it changed the package, when it did.
fn pass_after(
    host: &Host,
    r: &Resource,
    batch: Option<&package::BatchOutcome>,
) -> Result<(Diff, Observed), ProviderError> {
    let p = PackageProvider;
    let before = batch.and_then(|b| b.before.iter().find(|(id, _)| *id == r.id));
    let observed = match before {
        Some((_, observed)) => observed.clone(),
        None => p.observe(host, r)?,
    };
    let diff = p.plan(&p.declare(r).unwrap(), &observed);
    if !diff.is_empty() {
        p.apply(host, r, &observed, &diff, &mut OpenGate)?;
    }
    let (after, remaining) = p.verify(host, r)?;
    assert!(remaining.is_empty(), "still differs: {remaining:?}");
    Ok((diff, after))
}

/// `dpkg-query -W -f=FORMAT name`, or `None` when dpkg does not know it.
fn query(name: &str, format: &str) -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", &format!("-f={format}"), name])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn version_of(name: &str) -> Option<String> {
    query(name, "${Version}")
}

fn status_of(name: &str) -> Option<String> {
    query(name, "${Status}")
}

fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Purges the named packages now (a clean start even after a crashed run)
/// and again when dropped, so a failed test leaves nothing behind.
struct Purge(&'static [&'static str]);

impl Purge {
    fn new(names: &'static [&'static str]) -> Self {
        let purge = Purge(names);
        purge.run();
        purge
    }

    fn run(&self) {
        let _ = Command::new("apt-mark").arg("unhold").args(self.0).output();
        // One dpkg call for all: dpkg orders the removal of dependents.
        let _ = Command::new("dpkg")
            .args(["--purge", "--force-remove-reinstreq"])
            .args(self.0)
            .output();
    }
}

impl Drop for Purge {
    fn drop(&mut self) {
        self.run();
    }
}

/// A package with one conffile, as `dh` would build it (DEBIAN/conffiles
/// lists it; dpkg-deb takes it from the tree like any other file).
fn with_conffile(name: &str, version: &str, path: &str, text: &str) -> DebPackage {
    DebPackage::new(name, version)
        .file(path, text)
        .file("/DEBIAN/conffiles", format!("{path}\n"))
}

/// Entries in apt's history log (one per apt transaction).
fn history_entries() -> usize {
    std::fs::read_to_string("/var/log/apt/history.log")
        .map(|t| t.matches("Start-Date:").count())
        .unwrap_or(0)
}

testbed_test!(installs_pins_upgrades_downgrades_and_removes, {
    let _apt = within::lock("apt");
    let _purge = Purge::new(&["datum-it-demo"]);
    let _repo = LocalRepo::publish(
        "it-lifecycle",
        &[
            with_conffile("datum-it-demo", "1.0-1", "/etc/datum-it-demo.conf", "v1\n"),
            with_conffile(
                "datum-it-demo",
                "1.1-1",
                "/etc/datum-it-demo.conf",
                "v1.1\n",
            ),
        ],
    );

    // Absent: a create, planned from the status database.
    let r = resource("demo", json!({"name": "datum-it-demo", "version": "1.0-1"}));
    let before = PackageProvider.observe(&host(), &r).unwrap();
    assert_eq!(before.fields["state"], json!("absent"));
    let (diff, after) = pass(&r).unwrap();
    assert_eq!(diff.action(), Action::Create);
    assert_eq!(diff.changed_fields(), ["state", "version"]);
    assert_eq!(after.fields["version"], json!("1.0-1"));
    assert_eq!(version_of("datum-it-demo").as_deref(), Some("1.0-1"));
    assert_eq!(
        status_of("datum-it-demo").as_deref(),
        Some("install ok installed")
    );

    // A second pass has nothing to do.
    let (diff, _) = pass(&r).unwrap();
    assert!(diff.is_empty(), "{diff:?}");

    // A prefix upgrades to the version apt picks among those matching.
    let r = resource("demo", json!({"name": "datum-it-demo", "version": "1.1-*"}));
    let (diff, _) = pass(&r).unwrap();
    assert_eq!(diff.action(), Action::Update);
    assert_eq!(diff.changes[0].before, Some(json!("1.0-1")));
    assert_eq!(version_of("datum-it-demo").as_deref(), Some("1.1-1"));
    assert_eq!(
        std::fs::read_to_string("/etc/datum-it-demo.conf").unwrap(),
        "v1.1\n",
        "an untouched conffile follows the package"
    );

    // An exact older version is a declared downgrade.
    let r = resource("demo", json!({"name": "datum-it-demo", "version": "1.0-1"}));
    pass(&r).unwrap();
    assert_eq!(version_of("datum-it-demo").as_deref(), Some("1.0-1"));

    // Absent removes (not purges): the conffile stays, dpkg keeps its record.
    let r = resource("demo", json!({"name": "datum-it-demo", "state": "absent"}));
    let (diff, after) = pass(&r).unwrap();
    assert_eq!(diff.action(), Action::Remove);
    assert_eq!(after.fields["state"], json!("absent"));
    assert_eq!(
        status_of("datum-it-demo").as_deref(),
        Some("deinstall ok config-files")
    );
    assert!(Path::new("/etc/datum-it-demo.conf").exists());
    let (diff, _) = pass(&r).unwrap();
    assert!(diff.is_empty(), "a removed package is absent: {diff:?}");
});

testbed_test!(a_held_package_is_not_upgraded_by_apt, {
    let _apt = within::lock("apt");
    let _purge = Purge::new(&["datum-it-held"]);
    let _repo = LocalRepo::publish(
        "it-hold",
        &[
            DebPackage::new("datum-it-held", "1.0-1"),
            DebPackage::new("datum-it-held", "2.0-1"),
        ],
    );

    let r = resource(
        "held",
        json!({"name": "datum-it-held", "version": "1.0-1", "state": "held"}),
    );
    let (diff, after) = pass(&r).unwrap();
    assert_eq!(diff.action(), Action::Create);
    assert_eq!(after.fields["state"], json!("held"));
    assert_eq!(after.fields["held"], json!(true));
    assert_eq!(sh("apt-mark", &["showhold"]).trim(), "datum-it-held");

    // apt's own upgrade keeps it back.
    sh("apt-get", &["upgrade", "-y", "-q"]);
    assert_eq!(version_of("datum-it-held").as_deref(), Some("1.0-1"));

    // A declared version moves a held package, and it stays held.
    let r = resource(
        "held",
        json!({"name": "datum-it-held", "version": "2.0-1", "state": "held"}),
    );
    pass(&r).unwrap();
    assert_eq!(version_of("datum-it-held").as_deref(), Some("2.0-1"));
    assert_eq!(
        status_of("datum-it-held").as_deref(),
        Some("hold ok installed")
    );

    // `installed` does not manage the hold: an operator's hold is left alone.
    let r = resource("held", json!({"name": "datum-it-held"}));
    let (diff, _) = pass(&r).unwrap();
    assert!(diff.is_empty(), "{diff:?}");
    assert_eq!(sh("apt-mark", &["showhold"]).trim(), "datum-it-held");

    // Absent removes it and clears the hold for a later install.
    let r = resource("held", json!({"name": "datum-it-held", "state": "absent"}));
    pass(&r).unwrap();
    assert!(sh("apt-mark", &["showhold"]).trim().is_empty());
    // dpkg forgets a removed package that left no conffiles; if it still
    // lists it, the selection is deinstall, not hold.
    if let Some(status) = status_of("datum-it-held") {
        assert!(
            status.starts_with("deinstall ") && status.ends_with("not-installed"),
            "{status}"
        );
    }
});

testbed_test!(a_batch_installs_every_pending_package_in_one_transaction, {
    let _apt = within::lock("apt");
    let _purge = Purge::new(&["datum-it-batch-a", "datum-it-batch-b"]);
    let _repo = LocalRepo::publish(
        "it-batch",
        &[
            DebPackage::new("datum-it-batch-a", "1.0"),
            DebPackage::new("datum-it-batch-b", "3.1").depends("datum-it-batch-a"),
        ],
    );
    let a = resource("a", json!({"name": "datum-it-batch-a"}));
    let b = resource("b", json!({"name": "datum-it-batch-b", "version": "3.*"}));
    let file = Resource {
        id: ResourceId::new("File", "unrelated"),
        ..resource("unrelated", json!({"path": "/etc/x"}))
    };

    let host = host();
    let entries = history_entries();
    let outcome = package::install_batch(&host, &[&a, &file, &b]).unwrap();
    assert_eq!(outcome.transactions, 1);
    assert_eq!(outcome.installed, [a.id.clone(), b.id.clone()]);
    assert!(outcome.left.is_empty(), "{:?}", outcome.left);
    assert_eq!(history_entries(), entries + 1, "one apt transaction");
    let log = std::fs::read_to_string("/var/log/apt/history.log").unwrap();
    let last = log.rsplit("Start-Date:").next().unwrap();
    assert!(
        last.contains("datum-it-batch-a") && last.contains("datum-it-batch-b"),
        "{last}"
    );

    // Within the pass each resource still reports its own change, its apply
    // has nothing left to do, and its verify reads the database afresh.
    for r in [&a, &b] {
        let (diff, after) = pass_after(&host, r, Some(&outcome)).unwrap();
        assert_eq!(diff.action(), Action::Create, "{}", r.id);
        assert_eq!(after.fields["state"], json!("installed"));
    }
    assert_eq!(history_entries(), entries + 1, "no further transaction");
    // Once verified, observing shows the host as it is.
    let now = PackageProvider.observe(&host, &a).unwrap();
    assert_eq!(now.fields["state"], json!("installed"));
    assert_eq!(version_of("datum-it-batch-b").as_deref(), Some("3.1"));

    // The next pass has nothing to install.
    let outcome = package::install_batch(&self::host(), &[&a, &b]).unwrap();
    assert_eq!(outcome.transactions, 0);
    assert!(outcome.installed.is_empty());
});

testbed_test!(unknown_packages_and_versions_fail_naming_them, {
    let _apt = within::lock("apt");
    let _purge = Purge::new(&["datum-it-known"]);
    let _repo = LocalRepo::publish("it-unknown", &[DebPackage::new("datum-it-known", "1.0")]);

    let unknown = resource("nosuch", json!({"name": "datum-it-nosuch"}));
    let err = pass(&unknown).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err.kind_error::<PackageError>(),
            Some(PackageError::Unknown { .. })
        ),
        "{err:?}"
    );
    assert!(
        text.contains("package datum-it-nosuch cannot be installed on testbed"),
        "{text}"
    );
    assert!(
        text.contains("E: Unable to locate package datum-it-nosuch"),
        "{text}"
    );

    let bad_version = resource("v", json!({"name": "datum-it-known", "version": "9.9"}));
    let text = pass(&bad_version).unwrap_err().to_string();
    assert!(
        text.contains("E: Version '9.9' for 'datum-it-known' was not found"),
        "{text}"
    );
    assert_eq!(version_of("datum-it-known"), None, "nothing was installed");

    // In a batch, the unknown package is dropped and the rest installed.
    let known = resource("known", json!({"name": "datum-it-known"}));
    let host = host();
    let outcome = package::install_batch(&host, &[&unknown, &known]).unwrap();
    assert_eq!(outcome.transactions, 2);
    assert_eq!(outcome.installed, std::slice::from_ref(&known.id));
    assert_eq!(outcome.left.len(), 1);
    assert_eq!(outcome.left[0].0, unknown.id);
    assert_eq!(version_of("datum-it-known").as_deref(), Some("1.0"));
    // ... and fails on its own when the pass reaches it.
    let text = pass_on(&host, &unknown).unwrap_err().to_string();
    assert!(
        text.contains("Unable to locate package datum-it-nosuch"),
        "{text}"
    );
});

testbed_test!(a_half_configured_package_fails_verify, {
    let _apt = within::lock("apt");
    let _purge = Purge::new(&["datum-it-broken"]);
    let _repo = LocalRepo::publish("it-broken", &[DebPackage::new("datum-it-broken", "1.0")]);
    let r = resource("broken", json!({"name": "datum-it-broken"}));
    pass(&r).unwrap();

    // What an interrupted `dpkg --configure` leaves behind.
    let status_path = "/var/lib/dpkg/status";
    let original = std::fs::read_to_string(status_path).unwrap();
    let stanza = "Package: datum-it-broken\nStatus: install ok installed\n";
    assert!(original.contains(stanza));
    std::fs::write(
        status_path,
        original.replace(
            stanza,
            "Package: datum-it-broken\nStatus: install ok half-configured\n",
        ),
    )
    .unwrap();

    let p = PackageProvider;
    let observed = p.observe(&host(), &r).unwrap();
    assert_eq!(observed.fields["state"], json!("half-configured"));
    assert_eq!(
        p.plan(&p.declare(&r).unwrap(), &observed).changed_fields(),
        ["state"]
    );

    // Verify names the package and what dpkg --audit says.
    let (_, diff) = p.verify(&host(), &r).unwrap();
    assert_eq!(
        diff.changed_fields(),
        ["state"],
        "the field already differs"
    );
    // A package that is fine itself still fails verify while another is
    // broken: the database as a whole is not consistent.
    let _ok_purge = Purge::new(&["datum-it-fine"]);
    let _repo2 = LocalRepo::publish("it-fine", &[DebPackage::new("datum-it-fine", "1.0")]);
    let fine = resource("fine", json!({"name": "datum-it-fine"}));
    // apt refuses to work on an interrupted database; install by hand.
    let deb = _repo2.dir().join("datum-it-fine_1.0_all.deb");
    sh("dpkg", &["-i", deb.to_str().unwrap()]);
    let err = p.verify(&host(), &fine).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err.kind_error::<PackageError>(),
            Some(PackageError::Inconsistent { .. })
        ),
        "{err:?}"
    );
    assert!(text.contains("not consistent"), "{text}");
    assert!(text.contains("datum-it-broken"), "{text}");

    // Once dpkg finishes the job, both verify.
    sh("dpkg", &["--configure", "-a"]);
    assert!(p.verify(&host(), &r).unwrap().1.is_empty());
    assert!(p.verify(&host(), &fine).unwrap().1.is_empty());
});

testbed_test!(a_hand_edited_conffile_is_reported_and_kept_on_upgrade, {
    let _apt = within::lock("apt");
    let _purge = Purge::new(&["datum-it-conf"]);
    let conf = "/etc/datum-it-conf.conf";
    let _repo = LocalRepo::publish(
        "it-conf",
        &[
            with_conffile("datum-it-conf", "1.0", conf, "packaged 1.0\n"),
            with_conffile("datum-it-conf", "2.0", conf, "packaged 2.0\n"),
        ],
    );
    pass(&resource(
        "conf",
        json!({"name": "datum-it-conf", "version": "1.0"}),
    ))
    .unwrap();
    let names = ["datum-it-conf".to_owned()];
    assert!(
        package::changed_conffiles(&host(), Some(&names))
            .unwrap()
            .is_empty()
    );

    std::fs::write(conf, "edited by hand\n").unwrap();
    let drift = package::changed_conffiles(&host(), Some(&names)).unwrap();
    assert_eq!(drift.len(), 1, "{drift:?}");
    assert_eq!(drift[0].package, "datum-it-conf");
    assert_eq!(drift[0].path, Path::new(conf));
    assert!(drift[0].conffile);
    let expected = sh("md5sum", &[conf]);
    assert_eq!(
        drift[0].actual_md5.as_deref(),
        expected.split_whitespace().next()
    );
    assert_ne!(
        drift[0].actual_md5.as_deref(),
        Some(drift[0].expected_md5.as_str())
    );
    // The whole-system scan finds it too.
    assert!(
        package::changed_conffiles(&host(), None)
            .unwrap()
            .iter()
            .any(|d| d.path == Path::new(conf))
    );

    // An upgrade keeps the edited file (--force-confold), and it is still
    // reported against the new packaged version.
    pass(&resource(
        "conf",
        json!({"name": "datum-it-conf", "version": "2.0"}),
    ))
    .unwrap();
    assert_eq!(std::fs::read_to_string(conf).unwrap(), "edited by hand\n");
    assert_eq!(
        package::changed_conffiles(&host(), Some(&names))
            .unwrap()
            .len(),
        1
    );

    std::fs::remove_file(conf).unwrap();
    let drift = package::changed_conffiles(&host(), Some(&names)).unwrap();
    assert!(drift[0].is_missing(), "{drift:?}");
});

/// A package with its own control file (for `Conflicts:`, which the test
/// kit's builder does not write): files are written after the generated
/// control, so this one replaces it.
fn with_control(name: &str, version: &str, extra: &str) -> DebPackage {
    DebPackage::new(name, version).file(
        "/DEBIAN/control",
        format!(
            "Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: Datum tests <tests@datum.invalid>\nDescription: Datum test package {name}\n{extra}"
        ),
    )
}

testbed_test!(
    a_conflicting_package_is_replaced_only_when_declared_absent,
    {
        let _apt = within::lock("apt");
        let _purge = Purge::new(&["datum-it-flavour-a", "datum-it-flavour-b"]);
        let _repo = LocalRepo::publish(
            "it-flavour",
            &[
                with_control(
                    "datum-it-flavour-a",
                    "1.0",
                    "Conflicts: datum-it-flavour-b\n",
                ),
                with_control(
                    "datum-it-flavour-b",
                    "1.0",
                    "Conflicts: datum-it-flavour-a\n",
                ),
            ],
        );
        let a = resource("a", json!({"name": "datum-it-flavour-a"}));
        pass(&a).unwrap();
        let b = resource("b", json!({"name": "datum-it-flavour-b"}));

        // Not declared absent: apt would have to remove it, so nothing changes.
        let err = pass(&b).unwrap_err().to_string();
        assert!(
            err.contains(
                "installing datum-it-flavour-b on testbed would also remove datum-it-flavour-a"
            ),
            "{err}"
        );
        let outcome = package::install_batch(&host(), &[&b]).unwrap();
        assert!(
            outcome.installed.is_empty() && outcome.left.len() == 1,
            "{outcome:?}"
        );
        assert_eq!(version_of("datum-it-flavour-a").as_deref(), Some("1.0"));
        assert!(
            !status_of("datum-it-flavour-b")
                .unwrap_or_default()
                .ends_with(" installed")
        );

        // Declared absent: one transaction swaps them, and both resources report it.
        let a_absent = resource(
            "a",
            json!({"name": "datum-it-flavour-a", "state": "absent"}),
        );
        let host = host();
        let entries = history_entries();
        let outcome = package::install_batch(&host, &[&b, &a_absent]).unwrap();
        assert_eq!(outcome.installed, std::slice::from_ref(&b.id));
        assert_eq!(outcome.removed, std::slice::from_ref(&a_absent.id));
        assert_eq!(history_entries(), entries + 1);
        let (diff, _) = pass_after(&host, &a_absent, Some(&outcome)).unwrap();
        assert_eq!(diff.action(), Action::Remove);
        let (diff, _) = pass_after(&host, &b, Some(&outcome)).unwrap();
        assert_eq!(diff.action(), Action::Create);
        assert_eq!(
            status_of("datum-it-flavour-b").as_deref(),
            Some("install ok installed")
        );
        assert!(
            !status_of("datum-it-flavour-a")
                .unwrap_or_default()
                .ends_with(" installed")
        );
    }
);

testbed_test!(
    a_virtual_package_name_is_refused_before_apt_installs_a_provider,
    {
        // A name other packages `Provides:`, with one provider: apt-get
        // installs the provider and succeeds, dpkg knows no package of the
        // declared name, and every pass used to fail its verify with "still
        // differs: state" (after another apt-get run), never saying why;
        // 4933319 made each pass fail saying so, but only after the first
        // had installed the provider. Now nothing is installed, alone or in
        // the pass's shared transaction (with what requires it).
        let _apt = within::lock("apt");
        let _purge = Purge::new(&["datum-it-provider", "datum-it-real"]);
        let _repo = LocalRepo::publish(
            "it-virtual",
            &[
                with_control("datum-it-provider", "1.0", "Provides: datum-it-virtual\n"),
                DebPackage::new("datum-it-real", "1.0"),
            ],
        );
        let r = resource("v", json!({"name": "datum-it-virtual"}));
        for pass in ["first", "second"] {
            let p = PackageProvider;
            let host = host();
            let observed = p.observe(&host, &r).unwrap();
            let diff = p.plan(&p.declare(&r).unwrap(), &observed);
            assert_eq!(diff.action(), Action::Create, "{pass}");
            let err = match p.apply(&host, &r, &observed, &diff, &mut OpenGate) {
                Err(e) => e.to_string(),
                Ok(()) => format!(
                    "applied; verify: {:?}",
                    p.verify(&host, &r).map(|(_, d)| d.changed_fields())
                ),
            };
            assert!(
                err.contains("datum-it-virtual is a virtual package")
                    && err.contains("datum-it-provider provides it")
                    && err.contains("nothing was installed"),
                "{pass} pass: {err}"
            );
            assert_eq!(status_of("datum-it-provider"), None, "{pass} pass");
        }
        // In the shared transaction: left out, with what requires it; the
        // rest is installed.
        let mut requires = resource("needs", json!({"name": "datum-it-real"}));
        requires.requires.push(r.id.clone());
        let real = resource("real", json!({"name": "datum-it-real"}));
        let outcome = package::install_batch(&host(), &[&r, &requires]).unwrap();
        assert!(outcome.installed.is_empty(), "{outcome:?}");
        let left: Vec<String> = outcome.left.iter().map(|(id, _)| id.to_string()).collect();
        assert_eq!(left, ["Package[v]", "Package[needs]"]);
        assert_eq!(status_of("datum-it-provider"), None);
        let outcome = package::install_batch(&host(), &[&r, &real]).unwrap();
        assert_eq!(outcome.installed, std::slice::from_ref(&real.id));
        assert_eq!(status_of("datum-it-provider"), None);
        assert_eq!(
            status_of("datum-it-real").as_deref(),
            Some("install ok installed")
        );
    }
);

testbed_test!(a_name_apt_could_read_as_a_pattern_installs_nothing_else, {
    // A name no package has, but with `.` or `+` in it: apt-get falls back
    // to an unanchored regular expression (or fnmatch) when no package has
    // the exact name, so `datum-it.pattern` would install every package
    // whose name contains a match (`datum-it-pattern`,
    // `datum-it-pattern-extra`) while the plan showed one package that does
    // not exist.
    let _apt = within::lock("apt");
    let _purge = Purge::new(&["datum-it-pattern", "datum-it-pattern-extra"]);
    let _repo = LocalRepo::publish(
        "it-pattern",
        &[
            DebPackage::new("datum-it-pattern", "1.0"),
            DebPackage::new("datum-it-pattern-extra", "1.0"),
        ],
    );
    for declared in ["datum-it.pattern", "datum-it-pat.ern", "datum-it-pattern.+"] {
        let r = resource("p", json!({"name": declared}));
        let p = PackageProvider;
        let host = host();
        let observed = p.observe(&host, &r).unwrap();
        let diff = p.plan(&p.declare(&r).unwrap(), &observed);
        let applied = p.apply(&host, &r, &observed, &diff, &mut OpenGate);
        for real in ["datum-it-pattern", "datum-it-pattern-extra"] {
            assert_eq!(
                status_of(real),
                None,
                "{declared} installed {real}, which no declaration names (apply: {applied:?})"
            );
        }
        // Not found (apt reads the final `+` of the third as "install" and
        // looks for the rest, which is no package either).
        let err = applied.unwrap_err();
        assert!(
            matches!(
                err.kind_error::<PackageError>(),
                Some(PackageError::Unknown { .. } | PackageError::Apt { .. })
            ) && err.to_string().contains("Unable to locate package"),
            "{declared}: {err}"
        );
        let batch = package::install_batch(&self::host(), &[&r]).unwrap();
        assert!(batch.installed.is_empty(), "{declared}: {batch:?}");
        for real in ["datum-it-pattern", "datum-it-pattern-extra"] {
            assert_eq!(
                status_of(real),
                None,
                "{declared} installed {real}, which no declaration names"
            );
        }
    }
});

testbed_test!(
    an_interrupted_dpkg_makes_the_plan_say_the_change_would_fail,
    {
        // dpkg killed mid-way (a maintainer script, a power cut) leaves its
        // journal in /var/lib/dpkg/updates, and apt-get then refuses every
        // install and removal ("E: dpkg was interrupted, you must manually run
        // 'dpkg --configure -a'"); Datum never runs that itself (it would run
        // whatever maintainer scripts are pending). The plan must say the
        // change would fail, as the apply will, not that it is pending.
        let _apt = within::lock("apt");
        let _purge = Purge::new(&["datum-it-interrupted"]);
        let _repo = LocalRepo::publish(
            "it-interrupted",
            &[DebPackage::new("datum-it-interrupted", "1.0")],
        );
        struct Journal(&'static str);
        impl Drop for Journal {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(self.0);
            }
        }
        let journal = Journal("/var/lib/dpkg/updates/0999");
        std::fs::write(journal.0, "").unwrap();
        let r = resource("i", json!({"name": "datum-it-interrupted"}));
        let p = PackageProvider;
        let declared = p.declare(&r).unwrap();
        let observed = p.observe(&host(), &r).unwrap();
        assert_eq!(p.plan(&declared, &observed).action(), Action::Create);
        let why = p.refuses(&declared, &observed);
        assert!(
            why.as_deref().is_some_and(
                |w| w.contains("dpkg was interrupted") && w.contains("dpkg --configure -a")
            ),
            "{why:?}"
        );
        // The apply fails the same way, and installs nothing.
        let err = p
            .apply(
                &host(),
                &r,
                &observed,
                &p.plan(&declared, &observed),
                &mut OpenGate,
            )
            .unwrap_err();
        assert!(err.to_string().contains("dpkg was interrupted"), "{err}");
        assert_eq!(status_of("datum-it-interrupted"), None);
        // Without the journal, nothing refuses and the install goes through.
        drop(journal);
        let observed = p.observe(&host(), &r).unwrap();
        assert_eq!(p.refuses(&declared, &observed), None);
        pass(&r).unwrap();
    }
);
