//! The check run and its policies on fake resource types
//! (`datum_testkit::fake`): a real temporary root, real SQLite state and
//! backup stores, the engine's real apply pass for reverts. What a policy
//! *decides* is tested in `datum_drift::policy`; these tests show that what
//! was decided is carried out (or, for `check`, only described), and the
//! detection rules that run before a policy.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use datum_agent::Conclusion;
use datum_catalog::snapshot::LazyCatalogue;
use datum_catalog::{Catalogue, HostIdentity};
use datum_core::{Resource, ResourceId};
use datum_drift::classes::Classes;
use datum_engine::{Mode, PassContext, PassOptions, SilentReporter, run_pass_with};
use datum_host::Host;
use datum_providers::{ExtraDrift, ExtraFinding, Registry};
use datum_store::Store;

use crate::detection::Trust;
use datum_store::backup::BackupStore;
use datum_testkit::fake::{Faults, Journal, fake_file, fake_registry, fake_unit, read_live};
use serde_json::json;

use crate::{Act, Checked, Checking, Options, detection};

struct Bed {
    root: tempfile::TempDir,
    state: tempfile::TempDir,
    host: Host,
    registry: Registry,
    journal: Journal,
    faults: Faults,
    store: Store,
    identity: HostIdentity,
}

fn in_class(mut r: Resource, class: &str) -> Resource {
    r.class = class.to_owned();
    r
}

fn catalogue(resources: Vec<Resource>) -> Catalogue {
    Catalogue {
        host: Default::default(),
        resources,
        autorequires: Vec::new(),
        boundary: Default::default(),
    }
}

fn classes_doc() -> serde_json::Value {
    json!({
        "guarded": {"interval": "1m", "policy": "revert"},
        "frozen": {"interval": "1m", "policy": "quarantine"},
        "watched": {"interval": "1m", "policy": "report"},
        "light": {"interval": "1m", "content": "metadata", "policy": "report"},
    })
}

impl Bed {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc/web")).unwrap();
        let state = tempfile::tempdir().unwrap();
        let host = Host::new(root.path().to_path_buf());
        let (registry, journal, faults) = fake_registry();
        let store = Store::open(&state.path().join("state.db")).unwrap();
        Bed {
            root,
            state,
            host,
            registry,
            journal,
            faults,
            store,
            identity: HostIdentity {
                name: "h".to_owned(),
                labels: BTreeMap::new(),
            },
        }
    }

    fn backups(&self) -> BackupStore {
        BackupStore::open(&self.state.path().join("backups")).unwrap()
    }

    /// Applies `catalogue` (the verified records a check trusts).
    fn apply(&mut self, catalogue: &Catalogue) {
        let mut backups = self.backups();
        let mut ctx = PassContext {
            registry: &self.registry,
            host: &self.host,
            mode: Mode::Apply,
            store: Some(&mut self.store),
            backups: Some(&mut backups),
            now: 1_000,
            skip: HashSet::new(),
            sensitive: None,
        };
        let summary = run_pass_with(
            catalogue,
            &mut ctx,
            &mut SilentReporter,
            &PassOptions::default(),
        )
        .unwrap_or_default();
        assert!(!summary.any_failed(), "{:?}", summary.resources);
    }

    fn check(&mut self, catalogue: &Catalogue, act: Act) -> Checked {
        self.try_check(catalogue, act).unwrap()
    }

    fn try_check(&mut self, catalogue: &Catalogue, act: Act) -> Result<Checked, crate::CheckError> {
        let classes = Classes::parse(&classes_doc()).unwrap();
        let state = self.state.path().to_path_buf();
        let backups = move || -> Result<BackupStore, crate::OpenerError> {
            Ok(BackupStore::open(&state.join("backups"))?)
        };
        crate::run(Checking {
            registry: &self.registry,
            repo: self.root.path(),
            layers: Vec::new(),
            options: &Options::default(),
            act,
            identity: &self.identity,
            catalogue: LazyCatalogue::compiled(catalogue.clone(), classes_doc()),
            catalogue_reused: false,
            classes: &classes,
            host: &self.host,
            store: Some(&mut self.store),
            without_store: crate::WithoutStore::NotMade,
            backups: &backups,
            started: Instant::now(),
            progress: None,
            digest_key: None,
            sensitive: None,
        })
    }

    fn write(&self, declared: &str, text: &str) {
        std::fs::write(
            self.root.path().join(declared.trim_start_matches('/')),
            text,
        )
        .unwrap();
    }

    fn live(&self, declared: &str) -> Option<String> {
        read_live(self.root.path(), declared)
    }
}

/// (subject, category, action) of each finding.
fn actions(checked: &Checked) -> Vec<(String, String, String)> {
    checked
        .report
        .findings
        .iter()
        .map(|r| {
            (
                r.finding.finding.subject.clone(),
                r.finding.finding.category.clone(),
                r.action.clone(),
            )
        })
        .collect()
}

#[test]
fn revert_is_described_by_check_and_carried_out_by_reconcile_after_saving_the_drift() {
    let mut bed = Bed::new();
    let cat = catalogue(vec![in_class(
        fake_file("a", "/etc/a.conf", "declared\n", &[]),
        "guarded",
    )]);
    bed.apply(&cat);
    let clean = bed.check(&cat, Act::Look);
    assert!(clean.report.findings.is_empty());
    assert_eq!(clean.conclusion, Conclusion::Clean);

    bed.write("/etc/a.conf", "edited by hand\n");
    let looked = bed.check(&cat, Act::Look);
    assert_eq!(looked.conclusion, Conclusion::Drift);
    let a = actions(&looked);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].1, "changed_outside");
    assert!(a[0].2.starts_with("would revert"), "{a:?}");
    assert_eq!(bed.live("/etc/a.conf").as_deref(), Some("edited by hand\n"));
    assert!(bed.backups().list(None).unwrap().is_empty());

    let reconciled = bed.check(&cat, Act::Reconcile);
    assert_eq!(actions(&reconciled)[0].2, "reverted");
    assert_eq!(bed.live("/etc/a.conf").as_deref(), Some("declared\n"));
    // The drifted content was saved before it was replaced.
    assert!(!bed.backups().list(None).unwrap().is_empty());
    assert!(bed.check(&cat, Act::Look).report.findings.is_empty());
}

/// The services owed an activation in the store, with what is owed.
fn owed(bed: &Bed) -> Vec<(String, String)> {
    bed.store
        .owed_reloads()
        .unwrap()
        .into_iter()
        .map(|o| (o.service.to_string(), o.reasons.join(", ")))
        .collect()
}

/// A reverted file that notifies a service makes the revert reload it, as
/// a whole apply would: before (e6c0092), the reload was only owed, so the
/// service kept running what the revert undid until the next apply. A
/// service that is not as declared itself is left alone: the reload stays
/// owed, a warning says why, and the next check reports `activation_owed`.
#[test]
fn a_revert_reloads_the_service_its_file_notifies() {
    // The file is reverted alone (the unit is in a report class and did
    // not drift): the unit it notifies is outside the revert, as a service
    // outside a partial apply's selection.
    let mut bed = Bed::new();
    let file = fake_file("x", "/etc/x.conf", "declared\n", &[]);
    let cat = catalogue(vec![
        in_class(file.clone(), "guarded"),
        in_class(fake_unit("x", std::slice::from_ref(&file.id)), "watched"),
    ]);
    bed.apply(&cat);
    assert_eq!(bed.journal.of("reload"), vec!["FakeUnit[x]".to_owned()]);
    assert!(owed(&bed).is_empty());
    bed.journal.clear();

    bed.write("/etc/x.conf", "edited by hand\n");
    let reconciled = bed.check(&cat, Act::Reconcile);
    assert_eq!(actions(&reconciled)[0].2, "reverted");
    assert_eq!(bed.live("/etc/x.conf").as_deref(), Some("declared\n"));
    // Reloaded after the revert, nothing else of the unit applied, nothing
    // owed, and the next check finds nothing.
    assert_eq!(
        bed.journal.of("reload"),
        vec!["FakeUnit[x]".to_owned()],
        "{:?}",
        bed.journal.lines()
    );
    assert!(
        !bed.journal
            .of("activate")
            .contains(&"FakeUnit[x]".to_owned())
    );
    assert!(owed(&bed).is_empty());
    assert!(reconciled.report.warnings.is_empty());
    let looked = bed.check(&cat, Act::Look);
    assert!(looked.report.findings.is_empty(), "{:?}", actions(&looked));
    assert_eq!(looked.conclusion, Conclusion::Clean);

    // The unit is not as declared (stopped): the revert leaves it alone,
    // the reload owed, and says so.
    bed.faults.leave_unconverged("FakeUnit[x]");
    bed.journal.clear();
    bed.write("/etc/x.conf", "edited by hand\n");
    let reconciled = bed.check(&cat, Act::Reconcile);
    let reverted: Vec<_> = actions(&reconciled)
        .into_iter()
        .filter(|a| a.0 == "FakeFile[x]")
        .collect();
    assert_eq!(reverted[0].2, "reverted");
    assert!(bed.journal.of("reload").is_empty());
    assert!(
        !bed.journal
            .of("activate")
            .contains(&"FakeUnit[x]".to_owned())
    );
    assert_eq!(
        owed(&bed),
        vec![("FakeUnit[x]".to_owned(), "FakeFile[x] changed".to_owned())]
    );
    let warnings = &reconciled.report.warnings;
    assert!(
        warnings.len() == 1
            && warnings[0].contains("FakeUnit[x] was not reloaded")
            && warnings[0].contains("not as declared (state)"),
        "{warnings:?}"
    );
    // And the next check says so.
    let looked = bed.check(&cat, Act::Look);
    assert!(
        actions(&looked)
            .iter()
            .any(|a| a.0 == "FakeUnit[x]" && a.1 == "activation_owed"),
        "{:?}",
        actions(&looked)
    );

    // A reload that fails: said as a warning, still owed.
    bed.faults.clear();
    bed.faults.fail_activate("FakeUnit[x]");
    bed.write("/etc/x.conf", "edited by hand\n");
    let reconciled = bed.check(&cat, Act::Reconcile);
    assert_eq!(actions(&reconciled)[0].2, "reverted");
    let warnings = &reconciled.report.warnings;
    assert!(
        warnings.len() == 1
            && warnings[0].starts_with("FakeUnit[x], notified by the revert: reload failed: "),
        "{warnings:?}"
    );
    assert_eq!(owed(&bed).len(), 1);

    // The apply that comes next pays it.
    bed.faults.clear();
    bed.journal.clear();
    bed.apply(&cat);
    assert_eq!(bed.journal.of("reload"), vec!["FakeUnit[x]".to_owned()]);
    assert!(owed(&bed).is_empty());
}

/// A quarantined service is not reloaded by a revert of a file that
/// notifies it (an apply holds it back too): the reload stays owed, and a
/// warning says why.
#[test]
fn a_revert_leaves_a_quarantined_service_it_notifies_alone() {
    let mut bed = Bed::new();
    let file = fake_file("x", "/etc/x.conf", "declared\n", &[]);
    let cat = catalogue(vec![
        in_class(file.clone(), "guarded"),
        in_class(fake_unit("x", std::slice::from_ref(&file.id)), "watched"),
    ]);
    bed.apply(&cat);
    let unit = ResourceId::new(datum_testkit::fake::FAKE_UNIT, "x");
    bed.store
        .quarantine(
            &datum_store::QuarantineTarget::Resource(unit.clone()),
            "a person's",
            datum_store::QuarantineSource::Person,
            1_000,
        )
        .unwrap();
    bed.journal.clear();
    bed.write("/etc/x.conf", "edited by hand\n");
    let reconciled = bed.check(&cat, Act::Reconcile);
    let reverted = actions(&reconciled);
    assert!(
        reverted
            .iter()
            .any(|a| a.0 == "FakeFile[x]" && a.2 == "reverted"),
        "{reverted:?}"
    );
    assert_eq!(bed.live("/etc/x.conf").as_deref(), Some("declared\n"));
    assert!(
        bed.journal.of("reload").is_empty(),
        "{:?}",
        bed.journal.lines()
    );
    assert_eq!(owed(&bed).len(), 1);
    let warnings = &reconciled.report.warnings;
    assert!(
        warnings.len() == 1
            && warnings[0].contains("FakeUnit[x] was not reloaded")
            && warnings[0].contains("quarantined"),
        "{warnings:?}"
    );
}

#[test]
fn a_revert_of_a_file_that_notifies_nothing_touches_nothing_else() {
    let mut bed = Bed::new();
    let noisy = fake_file("n", "/etc/n.conf", "declared\n", &[]);
    let cat = catalogue(vec![
        in_class(fake_file("q", "/etc/q.conf", "declared\n", &[]), "guarded"),
        in_class(noisy.clone(), "watched"),
        in_class(fake_unit("n", std::slice::from_ref(&noisy.id)), "watched"),
    ]);
    bed.apply(&cat);
    bed.journal.clear();

    bed.write("/etc/q.conf", "edited by hand\n");
    let reconciled = bed.check(&cat, Act::Reconcile);
    assert_eq!(actions(&reconciled)[0].2, "reverted");
    assert_eq!(bed.live("/etc/q.conf").as_deref(), Some("declared\n"));
    assert!(owed(&bed).is_empty());
    let lines = bed.journal.lines();
    assert!(bed.journal.of("reload").is_empty(), "{lines:?}");
    // Only the reverted file was written; the others were at most read.
    for line in &lines {
        let read = line.starts_with("observe ") || line.starts_with("declare ");
        assert!(read || line.ends_with(" FakeFile[q]"), "{lines:?}");
    }
    assert!(bed.check(&cat, Act::Look).report.findings.is_empty());
}

#[test]
fn quarantine_holds_the_resource_and_a_report_class_only_reports() {
    let mut bed = Bed::new();
    let cat = catalogue(vec![
        in_class(fake_file("q", "/etc/q.conf", "declared\n", &[]), "frozen"),
        in_class(fake_file("r", "/etc/r.conf", "declared\n", &[]), "watched"),
    ]);
    bed.apply(&cat);
    bed.write("/etc/q.conf", "x\n");
    bed.write("/etc/r.conf", "y\n");
    let looked = bed.check(&cat, Act::Look);
    let by_subject: BTreeMap<String, String> = actions(&looked)
        .into_iter()
        .map(|(s, _, a)| (s, a))
        .collect();
    assert!(
        by_subject["FakeFile[q]"].starts_with("would quarantine"),
        "{by_subject:?}"
    );
    assert_eq!(by_subject["FakeFile[r]"], "reported");
    assert!(bed.store.quarantined().unwrap().is_empty());

    let reconciled = bed.check(&cat, Act::Reconcile);
    let by_subject: BTreeMap<String, String> = actions(&reconciled)
        .into_iter()
        .map(|(s, _, a)| (s, a))
        .collect();
    assert_eq!(by_subject["FakeFile[q]"], "quarantined");
    assert_eq!(by_subject["FakeFile[r]"], "reported");
    let held: Vec<datum_store::QuarantineTarget> = bed
        .store
        .quarantined()
        .unwrap()
        .into_iter()
        .map(|q| q.target)
        .collect();
    assert_eq!(
        held,
        vec![datum_store::QuarantineTarget::Resource(ResourceId::new(
            datum_testkit::fake::FAKE_FILE,
            "q"
        ))]
    );
    // Nothing was put back: a quarantine is not a revert.
    assert_eq!(bed.live("/etc/q.conf").as_deref(), Some("x\n"));
    assert_eq!(reconciled.report.quarantined.len(), 1);
}

#[test]
fn a_resource_never_applied_is_not_converged_and_no_policy_acts_on_it() {
    let mut bed = Bed::new();
    let cat = catalogue(vec![in_class(
        fake_file("n", "/etc/n.conf", "declared\n", &[]),
        "guarded",
    )]);
    bed.write("/etc/n.conf", "whatever was there\n");
    let reconciled = bed.check(&cat, Act::Reconcile);
    let a = actions(&reconciled);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].1, "not_converged");
    assert!(a[0].2.contains("never applied"), "{a:?}");
    assert_eq!(
        bed.live("/etc/n.conf").as_deref(),
        Some("whatever was there\n")
    );
}

#[test]
fn a_declaration_changed_since_its_last_apply_is_owed_by_apply_and_no_policy_acts_on_it() {
    // The repository changed, the host did not: what differs is the change
    // `datum apply` owes, not drift. A quarantine class would hold the
    // repository's own edit back, a revert class would "revert" it into
    // place (counted as a revert, flapping included).
    let mut bed = Bed::new();
    let declared = |name: &str, class: &str, content: &str, hash: &str| {
        let mut r = in_class(
            fake_file(name, &format!("/etc/{name}.conf"), content, &[]),
            class,
        );
        r.declaration_hash = hash.to_owned();
        r
    };
    let before = catalogue(vec![
        declared("g", "guarded", "one\n", "g1"),
        declared("f", "frozen", "one\n", "f1"),
        declared("s", "guarded", "one\n", "s1"),
    ]);
    bed.apply(&before);
    let after = catalogue(vec![
        declared("g", "guarded", "two\n", "g2"),
        declared("f", "frozen", "two\n", "f2"),
        declared("s", "guarded", "one\n", "s1"),
    ]);
    // The host moved only where the declaration did not.
    bed.write("/etc/s.conf", "edited by hand\n");
    let reconciled = bed.check(&after, Act::Reconcile);
    let by_subject: BTreeMap<String, (String, String)> = actions(&reconciled)
        .into_iter()
        .map(|(s, c, a)| (s, (c, a)))
        .collect();
    for owed in ["FakeFile[g]", "FakeFile[f]"] {
        let (category, action) = &by_subject[owed];
        assert_eq!(category, "not_converged", "{by_subject:?}");
        assert!(
            action.contains("declaration changed since its last verified apply"),
            "{by_subject:?}"
        );
    }
    assert_eq!(
        by_subject["FakeFile[s]"],
        ("changed_outside".to_owned(), "reverted".to_owned())
    );
    assert_eq!(bed.live("/etc/g.conf").as_deref(), Some("one\n"));
    assert_eq!(bed.live("/etc/f.conf").as_deref(), Some("one\n"));
    assert_eq!(bed.live("/etc/s.conf").as_deref(), Some("one\n"));
    assert!(bed.store.quarantined().unwrap().is_empty());
    // Once applied, the new declarations are verified: nothing is open.
    bed.apply(&after);
    assert!(bed.check(&after, Act::Look).report.findings.is_empty());
}

#[test]
fn a_failed_revert_of_a_verified_declaration_is_retried_not_given_up() {
    // Verified as declared, drifted, and the revert failed: what differs is
    // still drift, and the next reconcile reverts it again (the agent would
    // otherwise never revert it until someone ran `datum apply`).
    let mut bed = Bed::new();
    let cat = catalogue(vec![in_class(
        fake_file("g", "/etc/g.conf", "declared\n", &[]),
        "guarded",
    )]);
    bed.apply(&cat);
    bed.write("/etc/g.conf", "edited by hand\n");
    bed.faults.fail_apply("FakeFile[g]");
    let failed = bed.check(&cat, Act::Reconcile);
    assert!(
        actions(&failed)[0].2.starts_with("revert failed"),
        "{:?}",
        actions(&failed)
    );
    assert_eq!(bed.live("/etc/g.conf").as_deref(), Some("edited by hand\n"));
    let looked = bed.check(&cat, Act::Look);
    let a = actions(&looked);
    assert_eq!(a[0].1, "changed_outside", "{a:?}");
    assert!(a[0].2.starts_with("would revert"), "{a:?}");
    bed.faults.clear();
    let reconciled = bed.check(&cat, Act::Reconcile);
    assert_eq!(actions(&reconciled)[0].2, "reverted");
    assert_eq!(bed.live("/etc/g.conf").as_deref(), Some("declared\n"));
}

/// A revert whose flap record the state store then refused (a full file
/// system, its write lock held past the busy timeout) was made and its
/// record lost: the check failed only after the revert, and a resource
/// reverted again at every check while the store refuses was never taken
/// for flapping. The record is now written before the revert: refused, the
/// check stops with nothing reverted; a revert that fails withdraws it.
#[test]
fn no_revert_is_made_that_flap_detection_does_not_count() {
    let mut bed = Bed::new();
    let id = ResourceId::new("FakeFile", "g");
    let cat = catalogue(vec![in_class(
        fake_file("g", "/etc/g.conf", "declared\n", &[]),
        "guarded",
    )]);
    bed.apply(&cat);
    bed.write("/etc/g.conf", "edited by hand\n");
    // The store refuses to log reverts (as a full disk refuses a write).
    let db = rusqlite::Connection::open(bed.state.path().join("state.db")).unwrap();
    db.execute_batch(
        "CREATE TRIGGER refuse BEFORE INSERT ON reverts \
         BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;",
    )
    .unwrap();
    let err = match bed.try_check(&cat, Act::Reconcile) {
        Ok(checked) => panic!("the check went through: {:?}", actions(&checked)),
        Err(e) => e,
    };
    let reverted = bed.live("/etc/g.conf").as_deref() == Some("declared\n");
    let logged = bed.store.reverts_since(&id, 0).unwrap();
    assert!(
        !reverted || logged == 1,
        "reverted with no flap record ({err})"
    );
    assert!(!reverted, "reverted though its flap record was refused");
    assert!(
        matches!(err, crate::CheckError::State { .. }),
        "a state store failure (the agent counts it unrecorded): {err:?}"
    );
    assert!(err.to_string().contains("nothing was reverted"), "{err}");
    // A revert that fails withdraws its record: not flapping.
    db.execute_batch("DROP TRIGGER refuse").unwrap();
    bed.faults.fail_apply("FakeFile[g]");
    let failed = bed.check(&cat, Act::Reconcile);
    assert!(actions(&failed)[0].2.starts_with("revert failed"));
    assert_eq!(bed.store.reverts_since(&id, 0).unwrap(), 0);
    // The store takes writes again: reverted, and counted.
    bed.faults.clear();
    let reconciled = bed.check(&cat, Act::Reconcile);
    assert_eq!(actions(&reconciled)[0].2, "reverted");
    assert_eq!(bed.live("/etc/g.conf").as_deref(), Some("declared\n"));
    assert_eq!(bed.store.reverts_since(&id, 0).unwrap(), 1);
}

/// A check stopped by the store before its reverts (here the second
/// revert's flap record refused) made none of them: the first one's
/// record, written before, is withdrawn, else it counted toward flapping a
/// revert that never happened.
#[test]
fn reverts_logged_before_a_check_stopped_are_withdrawn() {
    let mut bed = Bed::new();
    let cat = catalogue(vec![
        in_class(fake_file("a", "/etc/a.conf", "declared\n", &[]), "guarded"),
        in_class(fake_file("b", "/etc/b.conf", "declared\n", &[]), "guarded"),
    ]);
    bed.apply(&cat);
    bed.write("/etc/a.conf", "edited by hand\n");
    bed.write("/etc/b.conf", "edited by hand\n");
    let db = rusqlite::Connection::open(bed.state.path().join("state.db")).unwrap();
    db.execute_batch(
        "CREATE TRIGGER refuse_second BEFORE INSERT ON reverts \
         WHEN (SELECT count(*) FROM reverts) >= 1 \
         BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;",
    )
    .unwrap();
    let err = bed.try_check(&cat, Act::Reconcile).err().expect("stopped");
    assert!(err.to_string().contains("nothing was reverted"), "{err}");
    for name in ["a", "b"] {
        let id = ResourceId::new("FakeFile", name);
        assert_eq!(
            bed.store.reverts_since(&id, 0).unwrap(),
            0,
            "{id}: a revert counted that was not made"
        );
        assert_eq!(
            bed.live(&format!("/etc/{name}.conf")).as_deref(),
            Some("edited by hand\n")
        );
    }
}

#[test]
fn a_kinds_extra_findings_are_reported_whatever_the_policy() {
    let mut bed = Bed::new();
    let unit = in_class(fake_unit("web", &[]), "guarded");
    let cat = catalogue(vec![
        unit.clone(),
        in_class(
            fake_file("a", "/etc/web/declared.conf", "x\n", &[]),
            "guarded",
        ),
    ]);
    bed.apply(&cat);
    for path in ["/etc/web/edited.conf", "/etc/web/declared.conf"] {
        bed.faults.report_extra(ExtraFinding {
            owner: unit.id.clone(),
            path: path.into(),
            drift: ExtraDrift::Deleted,
        });
    }
    let reconciled = bed.check(&cat, Act::Reconcile);
    // The declared path is the File's (clean here), not the unit's.
    assert_eq!(
        actions(&reconciled),
        vec![(
            "FakeUnit[web]:/etc/web/edited.conf".to_owned(),
            "deleted_outside".to_owned(),
            "reported".to_owned()
        )]
    );
    assert_eq!(reconciled.conclusion, Conclusion::Drift);
    bed.faults.fail_extra();
    let failed = bed.check(&cat, Act::Look);
    assert_eq!(failed.conclusion, Conclusion::Errors);
    assert_eq!(failed.report.errors.len(), 1);
}

#[test]
fn metadata_first_trusts_an_unchanged_path_of_a_path_owning_kind_only() {
    let mut bed = Bed::new();
    let file = in_class(fake_file("m", "/etc/m.conf", "declared\n", &[]), "light");
    let unit = in_class(fake_unit("u", &[]), "light");
    let cat = catalogue(vec![file.clone(), unit.clone()]);
    bed.apply(&cat);
    // The fake records no real metadata: record what is on disk, as an
    // apply of a real file would.
    let stat = bed
        .host
        .lstat(std::path::Path::new("/etc/m.conf"))
        .unwrap()
        .unwrap();
    let meta = datum_core::FileMeta {
        sha256: Some(datum_core::sha256_hex(b"declared\n")),
        ..stat.meta
    };
    // Verified once the file had been quiet (seconds after its ctime): a
    // record of a file that had just changed is not trusted.
    let quiet = stat.meta.ctime_ns / 1_000_000_000 + 3;
    bed.store
        .record_verified(&file.id, &file.declaration_hash, Some(&meta), quiet)
        .unwrap();
    let lazy = LazyCatalogue::compiled(cat.clone(), classes_doc());
    let trusted = |bed: &mut Bed| {
        detection::trusted_by_metadata(
            &bed.registry,
            &lazy.entries,
            &[0, 1],
            &bed.host,
            &mut bed.store,
        )
        .unwrap()
    };
    assert!(detection::metadata_first(&bed.registry, &file.id.kind));
    assert!(!detection::metadata_first(&bed.registry, &unit.id.kind));
    assert_eq!(trusted(&mut bed), [Trust::Trusted, Trust::Read]);
    // The same record made in the second the file changed: racy, read.
    bed.store
        .record_verified(&file.id, &file.declaration_hash, Some(&meta), quiet - 3)
        .unwrap();
    assert_eq!(trusted(&mut bed), [Trust::Racy, Trust::Read]);
    bed.store
        .record_verified(&file.id, &file.declaration_hash, Some(&meta), quiet)
        .unwrap();
    assert_eq!(trusted(&mut bed), [Trust::Trusted, Trust::Read]);

    // Touched: read again, and the drift it shows makes the stamp
    // untrusted until an apply verifies it.
    std::thread::sleep(std::time::Duration::from_millis(20));
    bed.write("/etc/m.conf", "changed!\n");
    assert_eq!(trusted(&mut bed), [Trust::Moved, Trust::Read]);
    let looked = bed.check(&cat, Act::Look);
    assert_eq!(actions(&looked)[0].1, "changed_outside");
    assert!(
        bed.store
            .last_verified(&file.id)
            .unwrap()
            .unwrap()
            .meta
            .is_none()
    );
    // Put back by hand: without the stamp it is still not trusted.
    bed.write("/etc/m.conf", "declared\n");
    assert_eq!(trusted(&mut bed), [Trust::Read, Trust::Read]);
}

#[test]
fn reads_content_follows_the_class_and_sampling() {
    let bed = Bed::new();
    let classes = Classes::parse(&classes_doc()).unwrap();
    let full = classes.get("guarded");
    let light = classes.get("light");
    assert!(detection::reads_content(full, true, &bed.store).unwrap());
    assert!(!detection::reads_content(full, false, &bed.store).unwrap());
    // A metadata class without `audit_every` never reads content.
    assert!(!detection::reads_content(light, true, &bed.store).unwrap());
}
