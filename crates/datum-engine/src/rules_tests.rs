//! The engine's safety rules, each tested with fake resource types
//! (`datum_testkit::fake`) the engine has never heard of: what holds here
//! holds for every kind, because nothing in the engine names one. The host
//! is a real temporary root, the state and backup stores are real SQLite.

use std::collections::HashSet;

use datum_catalog::Catalogue;
use datum_core::{Intent, Outcome, Phase, Resource, ResourceId};
use datum_host::Host;
use datum_providers::Registry;
use datum_store::Store;
use datum_store::backup::BackupStore;
use datum_testkit::fake::{
    FAKE_FILE, FAKE_UNIT, Faults, Journal, fake_file, fake_registry, fake_unit, read_live,
};

use crate::{
    ContentDiff, Mode, PassContext, PassOptions, PassSummary, SilentReporter, inspect_all,
    run_pass_with,
};

fn id(name: &str) -> ResourceId {
    ResourceId::new(FAKE_FILE, name)
}

fn unit(name: &str) -> ResourceId {
    ResourceId::new(FAKE_UNIT, name)
}

fn catalogue(resources: Vec<Resource>) -> Catalogue {
    Catalogue {
        host: Default::default(),
        resources,
        autorequires: Vec::new(),
        boundary: Default::default(),
    }
}

/// A temporary root, the fake registry, and (optionally) real stores.
struct Bed {
    root: tempfile::TempDir,
    _state: tempfile::TempDir,
    host: Host,
    registry: Registry,
    journal: Journal,
    faults: Faults,
    store: Store,
    backups: BackupStore,
}

impl Bed {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let host = Host::new(root.path().to_path_buf());
        let (registry, journal, faults) = fake_registry();
        let store = Store::open(&state.path().join("state.db")).unwrap();
        let backups = BackupStore::open(&state.path().join("backups")).unwrap();
        Self {
            root,
            _state: state,
            host,
            registry,
            journal,
            faults,
            store,
            backups,
        }
    }

    fn pass(&mut self, catalogue: &Catalogue, mode: Mode) -> PassSummary {
        let mut ctx = PassContext {
            registry: &self.registry,
            host: &self.host,
            mode,
            store: Some(&mut self.store),
            backups: Some(&mut self.backups),
            now: 1_000,
            skip: HashSet::new(),
            sensitive: None,
        };
        run_pass_with(
            catalogue,
            &mut ctx,
            &mut SilentReporter,
            &PassOptions::default(),
        )
        .unwrap_or_default()
    }

    fn live(&self, path: &str) -> Option<String> {
        read_live(self.root.path(), path)
    }

    fn write(&self, path: &str, text: &str) {
        std::fs::write(self.root.path().join(path.trim_start_matches('/')), text).unwrap();
    }
}

fn outcome<'s>(summary: &'s PassSummary, id: &ResourceId) -> &'s Outcome {
    &summary
        .resources
        .iter()
        .find(|r| &r.id == id)
        .unwrap_or_else(|| panic!("{id} not reported"))
        .outcome
}

fn words(summary: &PassSummary) -> Vec<(String, &'static str)> {
    summary
        .resources
        .iter()
        .map(|r| (r.id.to_string(), r.outcome.word()))
        .collect()
}

#[test]
fn resources_run_in_catalogue_order_and_a_changed_requirement_means_a_fresh_observation() {
    let mut bed = Bed::new();
    let cat = catalogue(vec![
        fake_file("a", "/a", "a\n", &[]),
        fake_file("b", "/b", "b\n", &[id("a")]),
        fake_file("c", "/c", "c\n", &[]),
    ]);
    let summary = bed.pass(&cat, Mode::Apply);
    assert_eq!(
        bed.journal.of("stage"),
        ["FakeFile[a]", "FakeFile[b]", "FakeFile[c]"]
    );
    assert_eq!(
        words(&summary),
        [
            ("FakeFile[a]".into(), "changed"),
            ("FakeFile[b]".into(), "changed"),
            ("FakeFile[c]".into(), "changed")
        ]
    );
    // b requires a, which changed: b is observed again after a (once up
    // front, once fresh, once by its verify); c is not.
    let observed = bed.journal.of("observe");
    let count = |name: &str| observed.iter().filter(|o| *o == name).count();
    assert_eq!(count("FakeFile[b]"), 3, "{observed:?}");
    assert_eq!(count("FakeFile[c]"), 2, "{observed:?}");
    assert_eq!(bed.live("/b").as_deref(), Some("b\n"));

    // A second pass changes nothing and applies nothing.
    bed.journal.clear();
    let summary = bed.pass(&cat, Mode::Apply);
    assert!(bed.journal.of("stage").is_empty());
    assert!(
        summary
            .resources
            .iter()
            .all(|r| r.outcome.word() == "unchanged")
    );
}

#[test]
fn a_failed_resource_blocks_its_dependents_directly_and_through_others_and_nothing_else() {
    let mut bed = Bed::new();
    bed.faults.fail_apply("FakeFile[a]");
    let cat = catalogue(vec![
        fake_file("a", "/a", "a\n", &[]),
        fake_file("b", "/b", "b\n", &[id("a")]),
        fake_file("c", "/c", "c\n", &[id("b")]),
        fake_file("d", "/d", "d\n", &[]),
    ]);
    let summary = bed.pass(&cat, Mode::Apply);
    assert!(matches!(
        outcome(&summary, &id("a")),
        Outcome::Failed { phase: Phase::Apply, reason } if reason.contains("injected apply failure")
    ));
    assert_eq!(
        outcome(&summary, &id("b")),
        &Outcome::Blocked { by: id("a") }
    );
    assert_eq!(
        outcome(&summary, &id("c")),
        &Outcome::Blocked { by: id("a") }
    );
    assert!(matches!(
        outcome(&summary, &id("d")),
        Outcome::Changed { .. }
    ));
    // Blocked resources were never applied; nothing was rolled back.
    assert_eq!(bed.journal.of("stage"), ["FakeFile[a]", "FakeFile[d]"]);
    assert_eq!(bed.live("/b"), None);
    assert_eq!(bed.live("/d").as_deref(), Some("d\n"));

    // A failed observation blocks the same way, and so does a verify that
    // finds the change did not hold.
    let mut bed = Bed::new();
    bed.faults.fail_observe("FakeFile[a]");
    bed.faults.leave_unconverged("FakeFile[c]");
    let cat = catalogue(vec![
        fake_file("a", "/a", "a\n", &[]),
        fake_file("b", "/b", "b\n", &[id("a")]),
        fake_file("c", "/c", "c\n", &[]),
        fake_file("e", "/e", "e\n", &[id("c")]),
    ]);
    let summary = bed.pass(&cat, Mode::Apply);
    assert!(matches!(
        outcome(&summary, &id("a")),
        Outcome::Failed {
            phase: Phase::Observe,
            ..
        }
    ));
    assert_eq!(
        outcome(&summary, &id("b")),
        &Outcome::Blocked { by: id("a") }
    );
    assert!(matches!(
        outcome(&summary, &id("c")),
        Outcome::Failed { phase: Phase::Verify, reason } if reason.contains("still differs after apply")
    ));
    assert_eq!(
        outcome(&summary, &id("e")),
        &Outcome::Blocked { by: id("c") }
    );
}

#[test]
fn a_refused_staged_copy_never_goes_live_and_a_plan_says_it_would_fail() {
    let mut bed = Bed::new();
    bed.write("/conf.json", "{\"old\": true}\n");
    let refused = Resource {
        validate: Some("json".to_owned()),
        ..fake_file("conf", "/conf.json", "{not json\n", &[])
    };
    let cat = catalogue(vec![refused.clone()]);

    let plan = bed.pass(&cat, Mode::Plan);
    assert!(matches!(
        outcome(&plan, &id("conf")),
        Outcome::Failed { phase: Phase::Plan, reason } if reason.starts_with("would fail: ")
    ));
    let applied = bed.pass(&cat, Mode::Apply);
    assert!(matches!(
        outcome(&applied, &id("conf")),
        Outcome::Failed { phase: Phase::Apply, reason } if reason.contains("json")
    ));
    // The live file is byte-identical, and no staged copy is left beside it.
    assert_eq!(bed.live("/conf.json").as_deref(), Some("{\"old\": true}\n"));
    let left: Vec<_> = std::fs::read_dir(bed.root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, ["conf.json"], "{left:?}");
    // The steps: the plan staged nothing; the refused apply staged once,
    // discarded that copy, and never activated it.
    assert_eq!(bed.journal.of("stage"), ["FakeFile[conf]"]);
    assert_eq!(bed.journal.of("discard"), ["FakeFile[conf]"]);
    assert!(bed.journal.of("activate").is_empty());
    bed.journal.clear();

    // Valid content passes the same gate and goes live.
    let accepted = Resource {
        validate: Some("json".to_owned()),
        ..fake_file("conf", "/conf.json", "{\"new\": true}\n", &[])
    };
    let summary = bed.pass(&catalogue(vec![accepted]), Mode::Apply);
    assert!(matches!(
        outcome(&summary, &id("conf")),
        Outcome::Changed { .. }
    ));
    assert_eq!(bed.live("/conf.json").as_deref(), Some("{\"new\": true}\n"));
    // Accepted: staged, activated, never discarded.
    assert_eq!(bed.journal.of("stage"), ["FakeFile[conf]"]);
    assert_eq!(bed.journal.of("activate"), ["FakeFile[conf]"]);
    assert!(bed.journal.of("discard").is_empty());
}

/// Each call of `declare` in the journal, sorted (observers run in parallel).
fn declared(journal: &Journal) -> Vec<String> {
    let mut all = journal.of("declare");
    all.sort();
    all
}

#[test]
fn a_pass_looks_each_kind_up_once_and_parses_each_declaration_once() {
    let mut bed = Bed::new();
    bed.write("/site.json", "{\"v\": 0}\n");
    let cat = catalogue(vec![
        Resource {
            validate: Some("json".to_owned()),
            ..fake_file("site", "/site.json", "{\"v\": 1}\n", &[])
        },
        // Observed again after its requirement changed: still one parse.
        fake_file("after", "/after", "x\n", &[id("site")]),
        fake_unit("web", &[id("site")]),
    ]);
    let everyone = ["FakeFile[after]", "FakeFile[site]", "FakeUnit[web]"];
    for mode in [Mode::Plan, Mode::Apply, Mode::Apply] {
        bed.journal.clear();
        let before = bed.registry.lookups();
        bed.pass(&cat, mode);
        assert_eq!(bed.registry.lookups() - before, 3, "{mode:?}");
        assert_eq!(declared(&bed.journal), everyone, "{mode:?}");
    }
    // The changing apply (the second pass) did everything a change does:
    // validated, saved the old content, activated, reloaded.
    assert_eq!(bed.live("/site.json").as_deref(), Some("{\"v\": 1}\n"));
    assert_eq!(bed.backups.list(None).unwrap().len(), 1);
}

/// A provider that counts how often its declarations are parsed, around a
/// shipped one (every other call goes to the inner provider as it is).
struct CountingDeclares {
    inner: &'static dyn datum_providers::Provider,
    declares: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// A bed whose only kind is the shipped `File`, its declarations counted.
fn bed_counting_file_declares() -> (Bed, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let declares = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut bed = Bed::new();
    bed.registry = Registry::new(vec![Box::new(CountingDeclares {
        inner: datum_providers::registry().lookup("File").unwrap(),
        declares: declares.clone(),
    })]);
    (bed, declares)
}

mod counting {
    use datum_core::{Diff, Observed, Resource};
    use datum_host::Host;
    use datum_providers::{
        Activated, Activates, Batches, Capabilities, Declared, Exclusive, ExtraFindings,
        FieldError, FieldLookup, Fingerprints, OrdersOthers, OwnsPaths, Provider, ProviderError,
        Refusal, Staged, Staging, TakesSourceFolder,
    };

    impl Provider for super::CountingDeclares {
        fn kind(&self) -> &'static str {
            self.inner.kind()
        }
        fn check(&self, desired: &serde_json::Value) -> Result<(), Vec<FieldError>> {
            self.inner.check(desired)
        }
        fn declaration_schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
            self.inner.declaration_schema(g)
        }
        fn declare<'r>(&self, resource: &'r Resource) -> Result<Declared<'r>, ProviderError> {
            self.declares
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.inner.declare(resource)
        }
        fn observe_declared(
            &self,
            host: &Host,
            d: &Declared<'_>,
        ) -> Result<Observed, ProviderError> {
            self.inner.observe_declared(host, d)
        }
        fn plan(&self, d: &Declared<'_>, observed: &Observed) -> Diff {
            self.inner.plan(d, observed)
        }
        fn observed_identity(&self, observed: &Observed) -> Option<String> {
            self.inner.observed_identity(observed)
        }
        fn refuses(&self, d: &Declared<'_>, observed: &Observed) -> Option<String> {
            self.inner.refuses(d, observed)
        }
        fn refuses_unless_changed_first(
            &self,
            d: &Declared<'_>,
            observed: &Observed,
        ) -> Option<Refusal> {
            self.inner.refuses_unless_changed_first(d, observed)
        }
        fn stage(
            &self,
            host: &Host,
            d: &Declared<'_>,
            observed: &Observed,
            diff: &Diff,
        ) -> Result<Staging, ProviderError> {
            self.inner.stage(host, d, observed, diff)
        }
        fn validation_target<'s>(&self, staging: &'s Staging) -> Option<Staged<'s>> {
            self.inner.validation_target(staging)
        }
        fn activate(
            &self,
            host: &Host,
            d: &Declared<'_>,
            staging: Staging,
        ) -> Result<Activated, ProviderError> {
            self.inner.activate(host, d, staging)
        }
        fn discard(&self, staging: Staging) {
            self.inner.discard(staging);
        }
        fn verify_declared(
            &self,
            host: &Host,
            d: &Declared<'_>,
        ) -> Result<(Observed, Diff), ProviderError> {
            self.inner.verify_declared(host, d)
        }
    }

    // Every capability forwarded (clippy names one left to its default).
    #[deny(clippy::missing_trait_methods)]
    impl Capabilities for super::CountingDeclares {
        fn takes_content(&self) -> bool {
            self.inner.takes_content()
        }
        fn takes_validator(&self) -> bool {
            self.inner.takes_validator()
        }
        fn takes_file_validator(&self) -> bool {
            self.inner.takes_file_validator()
        }
        fn paths(&self) -> Option<&dyn OwnsPaths> {
            self.inner.paths()
        }
        fn ordering(&self) -> Option<&dyn OrdersOthers> {
            self.inner.ordering()
        }
        fn batching(&self) -> Option<&dyn Batches> {
            self.inner.batching()
        }
        fn activation(&self) -> Option<&dyn Activates> {
            self.inner.activation()
        }
        fn source_folder(&self) -> Option<&dyn TakesSourceFolder> {
            self.inner.source_folder()
        }
        fn fingerprints(&self) -> Option<&dyn Fingerprints> {
            self.inner.fingerprints()
        }
        fn entry_differences(&self) -> Option<&dyn datum_providers::EntryDifferences> {
            self.inner.entry_differences()
        }
        fn stages_ahead(&self) -> bool {
            self.inner.stages_ahead()
        }
        fn owns_subtree(&self) -> bool {
            self.inner.owns_subtree()
        }
        fn names_a_regular_file(&self) -> bool {
            self.inner.names_a_regular_file()
        }
        fn sensitive_fields(&self) -> &'static [&'static str] {
            self.inner.sensitive_fields()
        }
        fn watches_writes(&self) -> Option<&dyn datum_providers::WatchesWrites> {
            self.inner.watches_writes()
        }
        fn exclusive_claims(&self, field: FieldLookup<'_, '_>, name: &str) -> Vec<Exclusive> {
            self.inner.exclusive_claims(field, name)
        }
        fn check_resource_name(&self, field: FieldLookup<'_, '_>, name: &str) -> Option<String> {
            self.inner.check_resource_name(field, name)
        }
        fn extra_findings(&self) -> Option<&dyn ExtraFindings> {
            self.inner.extra_findings()
        }
    }
}

/// That `wrapper` answers every capability, and every question a kind
/// may answer beyond its steps, as `inner` does (`batching` aside when the
/// wrapper adds it): a test through a wrapper tests the kind it wraps.
/// `at` is a path in `host` where a declaration of the kind is refused (a
/// folder in the way), `missing` one whose parent is missing.
fn assert_answers_as(
    wrapper: &dyn datum_providers::Provider,
    inner: &dyn datum_providers::Provider,
    adds_batching: bool,
    host: &Host,
    at: &str,
    missing: &str,
) {
    let name = inner.kind();
    assert_eq!(wrapper.kind(), name);
    assert_eq!(wrapper.takes_content(), inner.takes_content(), "{name}");
    assert_eq!(wrapper.takes_validator(), inner.takes_validator(), "{name}");
    assert_eq!(
        wrapper.takes_file_validator(),
        inner.takes_file_validator(),
        "{name}"
    );
    assert_eq!(wrapper.stages_ahead(), inner.stages_ahead(), "{name}");
    assert_eq!(wrapper.owns_subtree(), inner.owns_subtree(), "{name}");
    assert_eq!(
        wrapper.names_a_regular_file(),
        inner.names_a_regular_file(),
        "{name}"
    );
    assert_eq!(
        wrapper.sensitive_fields(),
        inner.sensitive_fields(),
        "{name}"
    );
    assert_eq!(wrapper.paths().is_some(), inner.paths().is_some(), "{name}");
    assert_eq!(
        wrapper.ordering().is_some(),
        inner.ordering().is_some(),
        "{name}"
    );
    if !adds_batching {
        assert_eq!(
            wrapper.batching().is_some(),
            inner.batching().is_some(),
            "{name}"
        );
    }
    assert_eq!(
        wrapper.activation().is_some(),
        inner.activation().is_some(),
        "{name}"
    );
    assert_eq!(
        wrapper.source_folder().is_some(),
        inner.source_folder().is_some(),
        "{name}"
    );
    assert_eq!(
        wrapper.fingerprints().is_some(),
        inner.fingerprints().is_some(),
        "{name}"
    );
    assert_eq!(
        wrapper.extra_findings().is_some(),
        inner.extra_findings().is_some(),
        "{name}"
    );
    assert_eq!(
        wrapper.entry_differences().is_some(),
        inner.entry_differences().is_some(),
        "{name}"
    );
    let fields = serde_json::json!({"path": at, "mode": "0640"});
    let field = |f: &str| fields.get(f);
    assert_eq!(
        wrapper.exclusive_claims(&field, "x"),
        inner.exclusive_claims(&field, "x"),
        "{name}"
    );
    assert_eq!(
        wrapper.check_resource_name(&field, "x"),
        inner.check_resource_name(&field, "x"),
        "{name}"
    );
    for path in [at, missing] {
        let resource = Resource::new(
            ResourceId::new(name, "x"),
            serde_json::json!({"path": path, "mode": "0640"}),
        );
        let d = inner.declare(&resource).unwrap();
        let observed = inner.observe_declared(host, &d).unwrap();
        assert_eq!(
            wrapper.refuses(&d, &observed),
            inner.refuses(&d, &observed),
            "{name} at {path}"
        );
        assert_eq!(
            format!("{:?}", wrapper.refuses_unless_changed_first(&d, &observed)),
            format!("{:?}", inner.refuses_unless_changed_first(&d, &observed)),
            "{name} at {path}"
        );
        assert_eq!(
            wrapper.observed_identity(&observed),
            inner.observed_identity(&observed),
            "{name} at {path}"
        );
    }
}

/// The two wrappers below stand for the kinds they wrap in the tests that
/// use them: every capability they do not change is the wrapped kind's.
/// Before, each forwarded only some (the counting File answered
/// `stages_ahead` false, so its test never staged ahead; and no refusal).
#[test]
fn the_test_wrappers_answer_as_the_kind_they_wrap() {
    let (bed, _) = bed_counting_file_declares();
    std::fs::create_dir(bed.root.path().join("in-the-way")).unwrap();
    let file = datum_providers::registry().lookup("File").unwrap();
    assert!(file.stages_ahead());
    assert_answers_as(
        bed.registry.lookup("File").unwrap(),
        file,
        false,
        &bed.host,
        "/in-the-way",
        "/missing/app.json",
    );
    let bed = bed_batching(&[], &[]);
    let (fake, _, _) = datum_testkit::fake::fake_providers();
    assert!(bed.registry.lookup(FAKE_FILE).unwrap().batching().is_some());
    assert_answers_as(
        bed.registry.lookup(FAKE_FILE).unwrap(),
        fake[0].as_ref(),
        true,
        &bed.host,
        "/in-the-way",
        "/missing/site",
    );
}

#[test]
fn the_shipped_file_kind_is_declared_once_per_pass_through_validation_evidence_and_verify() {
    let (mut bed, declares) = bed_counting_file_declares();
    bed.write("/app.json", "{\"v\": 0}\n");
    let file = |text: &str| Resource {
        validate: Some("json".to_owned()),
        content: Some(datum_core::Content::new(text.as_bytes().to_vec())),
        ..Resource::new(
            ResourceId::new("File", "app"),
            serde_json::json!({"path": "/app.json", "mode": "0640"}),
        )
    };
    let count = |bed: &mut Bed, cat: &Catalogue, mode: Mode| {
        let before = declares.load(std::sync::atomic::Ordering::Relaxed);
        let lookups = bed.registry.lookups();
        let summary = bed.pass(cat, mode);
        let resources = cat.resources.len();
        assert_eq!(bed.registry.lookups() - lookups, resources, "{mode:?}");
        let parsed = declares.load(std::sync::atomic::Ordering::Relaxed) - before;
        (summary, parsed)
    };
    // Plan (with the validator's dry run), apply (stage, validate, evidence,
    // rename, verify), a converged pass, a refused change: one parse each.
    let cat = catalogue(vec![file("{\"v\": 1}\n")]);
    let (plan, parsed) = count(&mut bed, &cat, Mode::Plan);
    assert!(matches!(
        outcome(&plan, &ResourceId::new("File", "app")),
        Outcome::WouldChange { .. }
    ));
    assert_eq!(parsed, 1);
    let (applied, parsed) = count(&mut bed, &cat, Mode::Apply);
    assert!(matches!(
        outcome(&applied, &ResourceId::new("File", "app")),
        Outcome::Changed { .. }
    ));
    assert_eq!(parsed, 1);
    assert_eq!(bed.live("/app.json").as_deref(), Some("{\"v\": 1}\n"));
    assert_eq!(bed.backups.list(None).unwrap().len(), 1);
    let (_, parsed) = count(&mut bed, &cat, Mode::Apply);
    assert_eq!(parsed, 1);
    let refused = catalogue(vec![file("{broken\n")]);
    let (summary, parsed) = count(&mut bed, &refused, Mode::Apply);
    assert!(matches!(
        outcome(&summary, &ResourceId::new("File", "app")),
        Outcome::Failed {
            phase: Phase::Apply,
            ..
        }
    ));
    assert_eq!(parsed, 1);
    assert_eq!(bed.live("/app.json").as_deref(), Some("{\"v\": 1}\n"));
    // Files without a validator are staged ahead by worker threads (two at
    // least start them): still one parse each, the loop's.
    let plain = |name: &str| Resource {
        content: Some(datum_core::Content::new(format!("{name}\n").into_bytes())),
        ..Resource::new(
            ResourceId::new("File", name),
            serde_json::json!({"path": format!("/{name}.conf")}),
        )
    };
    let ahead = catalogue(vec![plain("a"), plain("b"), plain("c")]);
    let (summary, parsed) = count(&mut bed, &ahead, Mode::Apply);
    assert_eq!(words(&summary).len(), 3);
    assert!(words(&summary).iter().all(|(_, w)| *w == "changed"));
    assert_eq!(parsed, 3);
    assert_eq!(bed.live("/c.conf").as_deref(), Some("c\n"));
}

/// What `datum check` and the agent's watch use: each resource looked up
/// and declared once for its observation and its plan, the content diff's
/// two sides read only when asked (and never for a sensitive resource).
#[test]
fn inspecting_declares_each_resource_once_and_reads_content_only_when_asked() {
    let (bed, declares) = bed_counting_file_declares();
    bed.write("/a.conf", "old a\n");
    bed.write("/b.conf", "same\n");
    bed.write("/secret.conf", "old secret\n");
    let file = |name: &str, path: &str, text: &str, sensitive: bool| Resource {
        content: Some(datum_core::Content::new(text.as_bytes().to_vec())),
        sensitive,
        ..Resource::new(
            ResourceId::new("File", name),
            serde_json::json!({"path": path}),
        )
    };
    let resources = [
        file("a", "/a.conf", "new a\n", false),
        file("b", "/b.conf", "same\n", false),
        file("secret", "/secret.conf", "new secret\n", true),
    ];
    let refs: Vec<&Resource> = resources.iter().collect();
    for (content, shown) in [(ContentDiff::Read, true), (ContentDiff::Skip, false)] {
        let before = declares.load(std::sync::atomic::Ordering::Relaxed);
        let lookups = bed.registry.lookups();
        let inspected = inspect_all(&bed.registry, &refs, &bed.host, content);
        assert_eq!(
            declares.load(std::sync::atomic::Ordering::Relaxed) - before,
            3,
            "{content:?}"
        );
        assert_eq!(bed.registry.lookups() - lookups, 3, "{content:?}");
        let [a, b, secret] = &inspected[..] else {
            panic!("{inspected:?}")
        };
        let a = a.as_ref().unwrap();
        let change = a.diff.content.as_ref().expect("a's content differs");
        assert_eq!(change.before.is_some(), shown, "{content:?}: {change:?}");
        assert!(b.as_ref().unwrap().diff.is_empty(), "{content:?}");
        let secret = secret.as_ref().unwrap();
        let change = secret.diff.content.as_ref().expect("its content differs");
        assert!(change.before.is_none(), "never read back: {change:?}");
    }
}

#[test]
fn the_old_content_is_saved_before_it_is_replaced_and_refused_content_leaves_no_backup() {
    let mut bed = Bed::new();
    bed.write("/plain", "old plain\n");
    bed.write("/checked.json", "{\"old\": 1}\n");
    let cat = catalogue(vec![
        fake_file("plain", "/plain", "new plain\n", &[]),
        Resource {
            validate: Some("json".to_owned()),
            ..fake_file("checked", "/checked.json", "{broken\n", &[])
        },
    ]);
    bed.pass(&cat, Mode::Apply);
    let entries = bed.backups.list(None).unwrap();
    let saved: Vec<(String, String)> = entries
        .iter()
        .map(|e| (e.resource.clone(), e.path.display().to_string()))
        .collect();
    // Only the replaced file; the validated one whose new content was
    // refused kept its old content, so there is nothing to keep evidence of.
    assert_eq!(saved, [("FakeFile[plain]".into(), "/plain".into())]);
    let (_, bytes) = bed.backups.get(entries[0].id).unwrap();
    assert_eq!(bytes, b"old plain\n");
    assert_eq!(bed.live("/plain").as_deref(), Some("new plain\n"));
}

#[test]
fn a_change_that_keeps_failing_after_its_evidence_was_saved_keeps_the_older_backups() {
    let mut bed = Bed::new();
    bed.write("/hosts", "hand-written original\n");
    bed.pass(
        &catalogue(vec![fake_file("hosts", "/hosts", "v1\n", &[])]),
        Mode::Apply,
    );
    // The live file then stops taking writes (in the field, a bind mount
    // over it: the rename fails with EBUSY). Every attempt saves the live
    // file first, then fails; more attempts than the ten versions kept.
    bed.write("/hosts", "v1-bind\n");
    bed.faults.fail_apply("FakeFile[hosts]");
    let v2 = catalogue(vec![fake_file("hosts", "/hosts", "v2\n", &[])]);
    for _ in 0..12 {
        let summary = bed.pass(&v2, Mode::Apply);
        assert!(matches!(
            outcome(&summary, &id("hosts")),
            Outcome::Failed {
                phase: Phase::Apply,
                ..
            }
        ));
    }
    assert_eq!(bed.live("/hosts").as_deref(), Some("v1-bind\n"));
    let kept: Vec<String> = bed
        .backups
        .list(None)
        .unwrap()
        .iter()
        .map(|e| String::from_utf8_lossy(&bed.backups.get(e.id).unwrap().1).into_owned())
        .collect();
    assert_eq!(
        kept,
        ["v1-bind\n", "hand-written original\n"],
        "the live file saved once, and the original still there"
    );
}

#[test]
fn a_change_makes_its_notified_resource_owe_an_activation_until_one_succeeds() {
    let mut bed = Bed::new();
    bed.faults.fail_activate("FakeUnit[web]");
    let cat = catalogue(vec![
        fake_file("site", "/site", "v1\n", &[]),
        fake_unit("web", &[id("site")]),
    ]);
    // The plan shows the pending reload and performs nothing.
    let plan = bed.pass(&cat, Mode::Plan);
    assert!(matches!(
        outcome(&plan, &unit("web")),
        Outcome::WouldChange { .. }
    ));
    assert!(bed.journal.of("reload").is_empty());

    let first = bed.pass(&cat, Mode::Apply);
    assert!(matches!(
        outcome(&first, &unit("web")),
        Outcome::Failed { phase: Phase::Apply, reason } if reason.starts_with("reload failed: ")
    ));
    // Owed durably, naming why.
    let owed = bed.store.owed_reloads().unwrap();
    assert_eq!(owed.len(), 1);
    assert_eq!(owed[0].service, unit("web"));
    assert_eq!(owed[0].reasons, ["FakeFile[site] changed"]);

    // Nothing changes in the next pass, but the reload is still owed: it
    // is performed, and once it succeeds it is no longer owed.
    bed.faults.clear();
    let second = bed.pass(&cat, Mode::Apply);
    assert!(matches!(outcome(&second, &id("site")), Outcome::Unchanged));
    assert!(matches!(
        outcome(&second, &unit("web")),
        Outcome::Changed { .. }
    ));
    assert_eq!(bed.journal.of("reload"), ["FakeUnit[web]", "FakeUnit[web]"]);
    assert!(bed.store.owed_reloads().unwrap().is_empty());

    // In sync and owing nothing: no activation.
    let third = bed.pass(&cat, Mode::Apply);
    assert!(matches!(outcome(&third, &unit("web")), Outcome::Unchanged));
    assert_eq!(bed.journal.of("reload").len(), 2);
}

/// A plan calls a Directory whose parent is missing a change that would
/// fail only when nothing before it could make that parent. A reload a
/// change owes a service is such a thing (a daemon may make its folders as
/// it starts): the Directory after it stays pending, for the apply to
/// decide. Before, the plan noted what could change before the Directory
/// ahead of the activation, so the reload went unseen and the plan said
/// "would fail" where the apply may succeed.
#[test]
fn a_missing_parent_stays_pending_after_a_reload_a_change_owes() {
    let mut bed = Bed::new();
    let (mut providers, journal, faults) = datum_testkit::fake::fake_providers();
    providers.push(Box::new(datum_providers::directory::DirectoryProvider));
    bed.registry = Registry::new(providers);
    bed.journal = journal;
    bed.faults = faults;
    let data = ResourceId::new("Directory", "data");
    let cat = catalogue(vec![
        fake_file("site", "/site", "v1\n", &[]),
        Resource {
            requires: vec![id("site")],
            ..fake_unit("web", &[id("site")])
        },
        Resource {
            requires: vec![unit("web")],
            ..Resource::new(data.clone(), serde_json::json!({"path": "/srv/data/sub"}))
        },
    ]);
    let plan = bed.pass(&cat, Mode::Plan);
    assert!(matches!(
        outcome(&plan, &unit("web")),
        Outcome::WouldChange { .. }
    ));
    assert!(
        matches!(outcome(&plan, &data), Outcome::WouldChange { .. }),
        "{:?}",
        outcome(&plan, &data)
    );
    // Nothing owed, nothing changes before it: the refusal is certain.
    bed.write("/site", "v1\n");
    let plan = bed.pass(&cat, Mode::Plan);
    assert!(matches!(outcome(&plan, &unit("web")), Outcome::Unchanged));
    assert!(
        matches!(
            outcome(&plan, &data),
            Outcome::Failed { reason, .. } if reason.contains("/srv/data does not exist")
        ),
        "{:?}",
        outcome(&plan, &data)
    );
}

/// A change that never went live (it failed before its rename) leaves its
/// service owing nothing: before, the reload recorded ahead of the write
/// stayed owed, and once the declaration went back to what is live the
/// next pass reloaded the service although nothing had changed.
#[test]
fn a_change_that_never_went_live_leaves_no_reload_owed() {
    let mut bed = Bed::new();
    bed.write("/site", "v1\n");
    // As compiled: the unit runs after what it reloads on.
    let web = Resource {
        requires: vec![id("site")],
        ..fake_unit("web", &[id("site")])
    };
    let cat =
        |content: &str| catalogue(vec![fake_file("site", "/site", content, &[]), web.clone()]);
    bed.faults.fail_apply("FakeFile[site]");
    let first = bed.pass(&cat("v2\n"), Mode::Apply);
    assert!(matches!(
        outcome(&first, &id("site")),
        Outcome::Failed { .. }
    ));
    assert!(matches!(
        outcome(&first, &unit("web")),
        Outcome::Blocked { .. }
    ));
    assert_eq!(bed.live("/site").as_deref(), Some("v1\n"));
    assert!(bed.store.owed_reloads().unwrap().is_empty());
    // The declaration goes back to what is live: nothing to reload.
    bed.faults.clear();
    let second = bed.pass(&cat("v1\n"), Mode::Apply);
    assert!(matches!(outcome(&second, &id("site")), Outcome::Unchanged));
    assert!(matches!(outcome(&second, &unit("web")), Outcome::Unchanged));
    assert!(bed.journal.of("reload").is_empty());
    // A debt from before is kept: a change that failed does not settle it.
    bed.store
        .owe(
            &unit("web"),
            datum_store::OwedAction::Reload,
            "FakeFile[site] changed",
            1,
        )
        .unwrap();
    bed.faults.fail_apply("FakeFile[site]");
    bed.pass(&cat("v3\n"), Mode::Apply);
    assert_eq!(bed.store.owed_reloads().unwrap().len(), 1);
}

/// The fake file kind applied in a batch before the loop, as Packages are
/// (one apt transaction): the batch writes every member that differs and
/// returns what each was before.
struct BatchedFakeFile {
    inner: Box<dyn datum_providers::Provider>,
    /// Members the batch writes but does not report (a transaction that
    /// failed part-way), and members it leaves alone.
    unreported: Vec<ResourceId>,
    skipped: Vec<ResourceId>,
}

/// A bed whose fake file kind batches (see [`BatchedFakeFile`]).
fn bed_batching(unreported: &[ResourceId], skipped: &[ResourceId]) -> Bed {
    let mut bed = Bed::new();
    let (mut providers, journal, faults) = datum_testkit::fake::fake_providers();
    let file = providers.remove(0);
    assert_eq!(file.kind(), FAKE_FILE);
    providers.insert(
        0,
        Box::new(BatchedFakeFile {
            inner: file,
            unreported: unreported.to_vec(),
            skipped: skipped.to_vec(),
        }),
    );
    bed.registry = Registry::new(providers);
    bed.journal = journal;
    bed.faults = faults;
    bed
}

mod batched_fake_file {
    use datum_core::{Diff, Observed};
    use datum_host::Host;
    use datum_providers::{
        Activated, Activates, Batched, Batches, Capabilities, Declared, Exclusive, ExtraFindings,
        FieldError, FieldLookup, Fingerprints, OrdersOthers, OwnsPaths, Provider, ProviderError,
        Refusal, Staged, Staging, TakesSourceFolder,
    };

    impl Batches for super::BatchedFakeFile {
        fn apply_batch(&self, host: &Host, declared: &mut [&mut Declared<'_>]) -> Batched {
            let mut batched = Batched::default();
            for d in declared.iter() {
                if self.skipped.contains(&d.resource.id) {
                    continue;
                }
                let Ok(before) = self.inner.observe_declared(host, d) else {
                    continue;
                };
                let diff = self.inner.plan(d, &before);
                if diff.is_empty() {
                    continue;
                }
                let Ok(mut staging) = self.inner.stage(host, d, &before, &diff) else {
                    continue;
                };
                while let Ok(Activated::Next(next)) = self.inner.activate(host, d, staging) {
                    staging = next;
                }
                if !self.unreported.contains(&d.resource.id) {
                    batched.before.push((d.resource.id.clone(), before));
                }
            }
            batched
        }
    }

    impl Provider for super::BatchedFakeFile {
        fn kind(&self) -> &'static str {
            self.inner.kind()
        }
        fn check(&self, desired: &serde_json::Value) -> Result<(), Vec<FieldError>> {
            self.inner.check(desired)
        }
        fn declaration_schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
            self.inner.declaration_schema(g)
        }
        fn declare<'r>(
            &self,
            resource: &'r datum_core::Resource,
        ) -> Result<Declared<'r>, ProviderError> {
            self.inner.declare(resource)
        }
        fn observe_declared(
            &self,
            host: &Host,
            d: &Declared<'_>,
        ) -> Result<Observed, ProviderError> {
            self.inner.observe_declared(host, d)
        }
        fn plan(&self, d: &Declared<'_>, observed: &Observed) -> Diff {
            self.inner.plan(d, observed)
        }
        fn observed_identity(&self, observed: &Observed) -> Option<String> {
            self.inner.observed_identity(observed)
        }
        fn refuses(&self, d: &Declared<'_>, observed: &Observed) -> Option<String> {
            self.inner.refuses(d, observed)
        }
        fn refuses_unless_changed_first(
            &self,
            d: &Declared<'_>,
            observed: &Observed,
        ) -> Option<Refusal> {
            self.inner.refuses_unless_changed_first(d, observed)
        }
        fn stage(
            &self,
            host: &Host,
            d: &Declared<'_>,
            observed: &Observed,
            diff: &Diff,
        ) -> Result<Staging, ProviderError> {
            self.inner.stage(host, d, observed, diff)
        }
        fn validation_target<'s>(&self, staging: &'s Staging) -> Option<Staged<'s>> {
            self.inner.validation_target(staging)
        }
        fn activate(
            &self,
            host: &Host,
            d: &Declared<'_>,
            staging: Staging,
        ) -> Result<Activated, ProviderError> {
            self.inner.activate(host, d, staging)
        }
        fn discard(&self, staging: Staging) {
            self.inner.discard(staging);
        }
        fn verify_declared(
            &self,
            host: &Host,
            d: &Declared<'_>,
        ) -> Result<(Observed, Diff), ProviderError> {
            self.inner.verify_declared(host, d)
        }
    }

    // Every capability forwarded but batching (clippy names one left to
    // its default).
    #[deny(clippy::missing_trait_methods)]
    impl Capabilities for super::BatchedFakeFile {
        fn takes_content(&self) -> bool {
            self.inner.takes_content()
        }
        fn takes_validator(&self) -> bool {
            self.inner.takes_validator()
        }
        fn takes_file_validator(&self) -> bool {
            self.inner.takes_file_validator()
        }
        fn paths(&self) -> Option<&dyn OwnsPaths> {
            self.inner.paths()
        }
        fn ordering(&self) -> Option<&dyn OrdersOthers> {
            self.inner.ordering()
        }
        fn batching(&self) -> Option<&dyn Batches> {
            Some(self)
        }
        fn activation(&self) -> Option<&dyn Activates> {
            self.inner.activation()
        }
        fn source_folder(&self) -> Option<&dyn TakesSourceFolder> {
            self.inner.source_folder()
        }
        fn fingerprints(&self) -> Option<&dyn Fingerprints> {
            self.inner.fingerprints()
        }
        fn entry_differences(&self) -> Option<&dyn datum_providers::EntryDifferences> {
            self.inner.entry_differences()
        }
        fn stages_ahead(&self) -> bool {
            self.inner.stages_ahead()
        }
        fn owns_subtree(&self) -> bool {
            self.inner.owns_subtree()
        }
        fn names_a_regular_file(&self) -> bool {
            self.inner.names_a_regular_file()
        }
        fn sensitive_fields(&self) -> &'static [&'static str] {
            self.inner.sensitive_fields()
        }
        fn watches_writes(&self) -> Option<&dyn datum_providers::WatchesWrites> {
            self.inner.watches_writes()
        }
        fn exclusive_claims(&self, field: FieldLookup<'_, '_>, name: &str) -> Vec<Exclusive> {
            self.inner.exclusive_claims(field, name)
        }
        fn check_resource_name(&self, field: FieldLookup<'_, '_>, name: &str) -> Option<String> {
            self.inner.check_resource_name(field, name)
        }
        fn extra_findings(&self) -> Option<&dyn ExtraFindings> {
            self.inner.extra_findings()
        }
    }
}

/// A batch (Packages: one apt transaction before the loop) changes its
/// members before their own steps; the services they notify owe their
/// activation from then on. Before, the debt was recorded only when the
/// member's own step came, so a member the batch changed and that was then
/// blocked (what it requires failed its verify), or a pass killed before
/// its step, left the reload owed nowhere: the next pass found the member
/// converged and never reloaded.
#[test]
fn a_batch_members_change_is_owed_to_its_service_even_when_its_own_step_is_blocked() {
    let mut bed = bed_batching(&[], &[]);
    // As compiled: the unit runs after what it reloads on.
    let cat = catalogue(vec![
        fake_file("base", "/base", "v1\n", &[]),
        fake_file("site", "/site", "v1\n", &[id("base")]),
        Resource {
            requires: vec![id("site")],
            ..fake_unit("web", &[id("site")])
        },
    ]);
    bed.faults.leave_unconverged("FakeFile[base]");
    let first = bed.pass(&cat, Mode::Apply);
    assert!(matches!(
        outcome(&first, &id("base")),
        Outcome::Failed { .. }
    ));
    assert!(matches!(
        outcome(&first, &id("site")),
        Outcome::Blocked { .. }
    ));
    // The batch wrote it all the same.
    assert_eq!(bed.live("/site").as_deref(), Some("v1\n"));
    let owed = bed.store.owed_reloads().unwrap();
    assert_eq!(
        owed.iter().map(|o| &o.service).collect::<Vec<_>>(),
        [&unit("web")],
        "the reload the batch's change owes is recorded"
    );
    // Once nothing fails, the reload is performed, though nothing changes.
    bed.faults.clear();
    let second = bed.pass(&cat, Mode::Apply);
    assert!(matches!(outcome(&second, &id("site")), Outcome::Unchanged));
    assert!(matches!(
        outcome(&second, &unit("web")),
        Outcome::Changed { .. }
    ));
    assert_eq!(bed.journal.of("reload"), ["FakeUnit[web]"]);
    assert!(bed.store.owed_reloads().unwrap().is_empty());
    // A member the batch leaves alone owes nothing for it.
    let third = bed.pass(&cat, Mode::Apply);
    assert!(matches!(outcome(&third, &unit("web")), Outcome::Unchanged));
    assert!(bed.store.owed_reloads().unwrap().is_empty());
}

/// A member the batch did not report changed owes nothing for it only when
/// it is found as it was: a transaction that failed part-way may have
/// changed it, and withdrawing that debt would lose the reload when the
/// member's own step is then blocked.
#[test]
fn a_batch_withdraws_a_debt_only_for_a_member_it_left_as_it_was() {
    let site = id("site");
    let catalogue = || {
        catalogue(vec![
            fake_file("base", "/base", "v1\n", &[]),
            fake_file("site", "/site", "v1\n", &[id("base")]),
            Resource {
                requires: vec![id("site")],
                ..fake_unit("web", &[id("site")])
            },
        ])
    };
    // Written, not reported: the debt stays.
    let mut bed = bed_batching(std::slice::from_ref(&site), &[]);
    bed.faults.leave_unconverged("FakeFile[base]");
    let first = bed.pass(&catalogue(), Mode::Apply);
    assert!(matches!(outcome(&first, &site), Outcome::Blocked { .. }));
    assert_eq!(bed.live("/site").as_deref(), Some("v1\n"));
    assert_eq!(bed.store.owed_reloads().unwrap().len(), 1);
    // Left alone: withdrawn (nothing changed; the next pass writes it and
    // owes the reload then).
    let mut bed = bed_batching(&[], std::slice::from_ref(&site));
    bed.faults.leave_unconverged("FakeFile[base]");
    let first = bed.pass(&catalogue(), Mode::Apply);
    assert!(matches!(outcome(&first, &site), Outcome::Blocked { .. }));
    assert_eq!(bed.live("/site"), None);
    assert!(bed.store.owed_reloads().unwrap().is_empty());
}

#[test]
fn a_sensitive_resource_keeps_validator_output_and_live_content_out_of_its_report() {
    const CANARY: &str = "CANARY-7f3a9";
    let bad = format!("{{\"key\": {CANARY}}}\n");
    for sensitive in [false, true] {
        let mut bed = Bed::new();
        bed.write("/secret.json", &format!("{{\"old\": \"{CANARY}-live\"}}\n"));
        let resource = Resource {
            validate: Some("json".to_owned()),
            sensitive,
            ..fake_file("secret", "/secret.json", &bad, &[])
        };
        let cat = catalogue(vec![resource]);
        for mode in [Mode::Plan, Mode::Apply] {
            let summary = bed.pass(&cat, mode);
            let report = &summary.resources[0];
            assert!(matches!(report.outcome, Outcome::Failed { .. }));
            let detail = report.detail.clone().unwrap_or_default();
            let live_shown = report
                .diff
                .content
                .as_ref()
                .and_then(|c| c.before.as_deref())
                .is_some_and(|b| String::from_utf8_lossy(b).contains(CANARY));
            if sensitive {
                assert!(report.sensitive);
                assert!(!detail.contains(CANARY), "{mode:?}: {detail}");
                assert!(
                    !live_shown,
                    "{mode:?}: the live content was read for display"
                );
            } else {
                // The canary is really there for a plain resource: the
                // sensitive case above could fail.
                assert!(detail.contains(CANARY), "{mode:?}: {detail}");
                assert!(live_shown, "{mode:?}");
            }
        }
    }
}

#[test]
fn a_change_is_intentional_when_the_declaration_moved_and_corrective_when_the_host_did() {
    let mut bed = Bed::new();
    let v1 = catalogue(vec![fake_file("f", "/f", "one\n", &[])]);
    let first = bed.pass(&v1, Mode::Apply);
    assert_eq!(
        outcome(&first, &id("f")),
        &Outcome::Changed {
            intent: Intent::Intentional
        }
    );
    // Someone edits the file: putting it back is corrective (planned and
    // applied alike).
    bed.write("/f", "edited by hand\n");
    let plan = bed.pass(&v1, Mode::Plan);
    assert_eq!(
        outcome(&plan, &id("f")),
        &Outcome::WouldChange {
            intent: Intent::Corrective
        }
    );
    let second = bed.pass(&v1, Mode::Apply);
    assert_eq!(
        outcome(&second, &id("f")),
        &Outcome::Changed {
            intent: Intent::Corrective
        }
    );
    // The repository changes the declaration: intentional again.
    let v2 = catalogue(vec![Resource {
        declaration_hash: "v2".to_owned(),
        ..fake_file("f", "/f", "two\n", &[])
    }]);
    let third = bed.pass(&v2, Mode::Apply);
    assert_eq!(
        outcome(&third, &id("f")),
        &Outcome::Changed {
            intent: Intent::Intentional
        }
    );
    assert_eq!(bed.live("/f").as_deref(), Some("two\n"));
}

/// A plan reads the verified record only of what it reports as changing,
/// one at a time, and all of them once it has asked for more than
/// `ON_DEMAND_MOST`: the intent is right on either side of the switch, and
/// for a declaration that moved.
#[test]
fn a_plan_tells_corrective_from_intentional_reading_records_one_by_one_or_all() {
    let mut bed = Bed::new();
    let count = super::verified::ON_DEMAND_MOST + 8;
    let files: Vec<Resource> = (0..count)
        .map(|i| fake_file(&format!("f{i:05}"), &format!("/f{i:05}"), "one\n", &[]))
        .collect();
    bed.pass(&catalogue(files.clone()), Mode::Apply);
    for i in 0..count {
        bed.write(&format!("/f{i:05}"), "edited by hand\n");
    }
    // The last one's declaration moved: intentional, whichever way its
    // record was read.
    let mut moved = files;
    if let Some(last) = moved.last_mut() {
        last.declaration_hash = "moved".to_owned();
    }
    let plan = bed.pass(&catalogue(moved), Mode::Plan);
    for i in 0..count {
        let expected = if i + 1 == count {
            Intent::Intentional
        } else {
            Intent::Corrective
        };
        assert_eq!(
            outcome(&plan, &id(&format!("f{i:05}"))),
            &Outcome::WouldChange { intent: expected },
            "f{i:05}"
        );
    }
}

/// A pass over a quiet host does not hold every parsed declaration: a
/// resource observed converged keeps only its observation, and is declared
/// again only when it needs its declaration after all (here: observed again
/// because its requirement changed). Its folder is still swept of staging
/// leftovers, and it is still recorded as verified.
#[test]
fn a_converged_resource_holds_no_declaration_and_is_declared_again_only_when_needed() {
    let mut bed = Bed::new();
    std::fs::create_dir(bed.root.path().join("quiet")).unwrap();
    bed.write("/site", "v0\n");
    bed.write("/after", "x\n");
    bed.write("/quiet/plain", "p\n");
    let leftover = bed.root.path().join("quiet/.datum.stage.killed");
    std::fs::create_dir(&leftover).unwrap();
    let cat = catalogue(vec![
        fake_file("site", "/site", "v1\n", &[]),
        fake_file("after", "/after", "x\n", &[id("site")]),
        fake_file("plain", "/quiet/plain", "p\n", &[]),
    ]);
    let selected: Vec<&Resource> = cat.resources.iter().collect();
    let observations = crate::observe::Observations::gather_alongside(
        &crate::observe::Observers {
            registry: &bed.registry,
            host: &bed.host,
            threads: 2,
            slim: &|_| true,
            sweep: crate::observe::Sweep::Folders,
            trusting: None,
        },
        &selected,
        || (),
    )
    .0;
    assert!(
        observations.bound(0).is_some(),
        "a change keeps its declaration"
    );
    for converged in [1, 2] {
        assert!(observations.bound(converged).is_none());
        assert!(observations.converged(converged).is_some());
        // Reduced to what the verified record needs.
        assert_eq!(
            observations.peek(converged, |o| (o.fields.is_empty(), o.meta.is_some())),
            Some((true, true))
        );
    }
    assert_eq!(observations.peek(0, |o| o.fields.is_empty()), Some(false));
    drop(observations);
    // Kept whole when the caller says so (a plan being saved, an accepted
    // observation).
    let observations = crate::observe::Observations::gather_alongside(
        &crate::observe::Observers {
            registry: &bed.registry,
            host: &bed.host,
            threads: 2,
            slim: &|_| false,
            sweep: crate::observe::Sweep::Folders,
            trusting: None,
        },
        &selected,
        || (),
    )
    .0;
    assert_eq!(observations.peek(1, |o| o.fields.is_empty()), Some(false));
    assert!(!observations.slimmed(1));
    assert!(
        observations
            .folders()
            .contains(std::path::Path::new("/quiet")),
        "the folders of converged resources are still known"
    );
    drop(observations);

    bed.journal.clear();
    let summary = bed.pass(&cat, Mode::Apply);
    assert_eq!(
        words(&summary),
        [
            ("FakeFile[site]".into(), "changed"),
            ("FakeFile[after]".into(), "unchanged"),
            ("FakeFile[plain]".into(), "unchanged"),
        ]
    );
    // `after` is declared again for its fresh observation; `plain` never.
    assert_eq!(
        declared(&bed.journal),
        [
            "FakeFile[after]",
            "FakeFile[after]",
            "FakeFile[plain]",
            "FakeFile[site]"
        ]
    );
    assert!(!leftover.exists(), "staging leftovers swept");
    let verified: Vec<ResourceId> = bed
        .store
        .all_verified()
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    for name in ["site", "after", "plain"] {
        assert!(verified.contains(&id(name)), "{name} recorded as verified");
    }
}

/// A change in several parts (a kind that returns `Activated::Next`, as a
/// Tree does): the engine runs the validator on every staged part before
/// it goes live; a refused part is discarded, never written, and nothing
/// after it is staged; the parts accepted before it are live and the
/// resource fails naming the validator.
#[test]
fn every_part_of_a_change_in_parts_is_judged_before_it_goes_live() {
    let mut bed = Bed::new();
    bed.write("/a.json", "{\"v\": 0}\n");
    let parts = |b: &str, c: &str| Resource {
        validate: Some("json".to_owned()),
        desired: serde_json::json!({"path": "/a.json", "also": {"/b.json": b, "/c.json": c}})
            .into(),
        ..fake_file("parts", "/a.json", "{\"v\": 1}\n", &[])
    };
    let summary = bed.pass(
        &catalogue(vec![parts("{\"b\": 1}\n", "{broken\n")]),
        Mode::Apply,
    );
    assert!(matches!(
        outcome(&summary, &id("parts")),
        Outcome::Failed { phase: Phase::Apply, reason } if reason.contains("json")
    ));
    assert_eq!(bed.live("/a.json").as_deref(), Some("{\"v\": 1}\n"));
    assert_eq!(bed.live("/b.json").as_deref(), Some("{\"b\": 1}\n"));
    assert_eq!(bed.live("/c.json"), None, "refused: never written");
    // Three parts staged, two went live, the refused one was discarded.
    assert_eq!(bed.journal.of("activate").len(), 2);
    assert_eq!(bed.journal.of("discard"), ["FakeFile[parts]"]);
    // The old content of the first part was kept once it was accepted.
    assert_eq!(bed.backups.list(None).unwrap().len(), 1);
    let left: Vec<_> = std::fs::read_dir(bed.root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".datum.stage."))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // A refused first part: nothing of the change goes live.
    bed.journal.clear();
    let first_refused = Resource {
        content: Some(datum_core::Content::new(b"{nope\n".to_vec())),
        ..parts("{\"b\": 2}\n", "{\"c\": 2}\n")
    };
    bed.pass(&catalogue(vec![first_refused]), Mode::Apply);
    assert_eq!(bed.live("/a.json").as_deref(), Some("{\"v\": 1}\n"));
    assert_eq!(bed.live("/b.json").as_deref(), Some("{\"b\": 1}\n"));
    assert!(bed.journal.of("activate").is_empty());

    // All accepted: every part is live.
    bed.journal.clear();
    let all_good = Resource {
        content: Some(datum_core::Content::new(b"{\"v\": 3}\n".to_vec())),
        ..parts("{\"b\": 3}\n", "{\"c\": 3}\n")
    };
    let summary = bed.pass(&catalogue(vec![all_good]), Mode::Apply);
    assert!(matches!(
        outcome(&summary, &id("parts")),
        Outcome::Changed { .. }
    ));
    assert_eq!(bed.live("/c.json").as_deref(), Some("{\"c\": 3}\n"));
    assert_eq!(bed.journal.of("activate").len(), 3);
}

/// The folders an apply sweeps of staging leftovers: every resource's, once
/// each, whatever the order (a folder coming back after another is kept once),
/// and none for a plan.
#[test]
fn the_folders_to_sweep_are_every_resources_once_each() {
    let bed = Bed::new();
    for folder in ["a", "b"] {
        std::fs::create_dir(bed.root.path().join(folder)).unwrap();
    }
    let cat = catalogue(vec![
        fake_file("a1", "/a/1", "x\n", &[]),
        fake_file("a2", "/a/2", "x\n", &[]),
        fake_file("b1", "/b/1", "x\n", &[]),
        fake_file("a3", "/a/3", "x\n", &[]),
        fake_file("top", "/top", "x\n", &[]),
    ]);
    let selected: Vec<&Resource> = cat.resources.iter().collect();
    let gather = |sweep| {
        crate::observe::Observations::gather_alongside(
            &crate::observe::Observers {
                registry: &bed.registry,
                host: &bed.host,
                threads: 2,
                slim: &|_| true,
                sweep,
                trusting: None,
            },
            &selected,
            || (),
        )
        .0
        .folders()
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
    };
    assert_eq!(gather(crate::observe::Sweep::Folders), ["/", "/a", "/b"]);
    assert!(gather(crate::observe::Sweep::Nothing).is_empty());
}

/// A killed apply's staging leftovers are removed by the next apply from
/// every folder it manages (the folders are listed on several threads past
/// a few hundred), and a plan removes none; anything else in a folder stays.
#[test]
fn an_apply_sweeps_staging_leftovers_from_every_folder_and_a_plan_from_none() {
    let mut bed = Bed::new();
    let folders: Vec<String> = (0..300).map(|i| format!("d{i:03}")).collect();
    let mut resources = Vec::new();
    for f in &folders {
        let dir = bed.root.path().join(f);
        std::fs::create_dir(&dir).unwrap();
        std::fs::create_dir(dir.join(format!("{}left", datum_host::staging::STAGE_PREFIX)))
            .unwrap();
        std::fs::write(dir.join("keep"), "mine\n").unwrap();
        // Converged already: nothing is staged, so only the sweep removes
        // the leftovers.
        std::fs::write(dir.join("file"), "x\n").unwrap();
        resources.push(fake_file(f, &format!("/{f}/file"), "x\n", &[]));
    }
    let cat = catalogue(resources);
    let left = |bed: &Bed| {
        folders
            .iter()
            .filter(|f| {
                let dir = bed.root.path().join(f);
                dir.join(format!("{}left", datum_host::staging::STAGE_PREFIX))
                    .exists()
            })
            .count()
    };
    bed.pass(&cat, Mode::Plan);
    assert_eq!(left(&bed), 300, "a plan writes nothing");
    let summary = bed.pass(&cat, Mode::Apply);
    let words = words(&summary);
    assert!(words.iter().all(|(_, w)| *w == "unchanged"), "{words:?}");
    assert_eq!(left(&bed), 0, "every folder swept");
    for f in &folders {
        assert_eq!(bed.live(&format!("/{f}/keep")).as_deref(), Some("mine\n"));
        assert_eq!(bed.live(&format!("/{f}/file")).as_deref(), Some("x\n"));
    }
}

/// The reasons a service owes an activation for are kept once each, in the
/// order they came: this pass's changes in the pass's order, then what an
/// earlier pass owed and this one did not repeat; a File listed under both
/// `reload_on` and `restart_on` is one reason and a restart. So the plan,
/// the apply's report and the state store say them.
#[test]
fn an_activation_gives_each_reason_once_in_the_order_it_came() {
    let mut bed = Bed::new();
    let web = Resource::new(
        unit("web"),
        serde_json::json!({
            "reload_on": ["FakeFile[c]", "FakeFile[a]", "FakeFile[b]"],
            "restart_on": ["FakeFile[b]"],
        }),
    );
    let cat = |content: &str| {
        catalogue(vec![
            fake_file("a", "/a", content, &[]),
            fake_file("b", "/b", content, &[]),
            fake_file("c", "/c", content, &[]),
            Resource {
                requires: vec![id("a"), id("b"), id("c")],
                ..web.clone()
            },
        ])
    };
    // An earlier pass owes a reload for b and for a File no longer declared.
    for reason in ["FakeFile[b] changed", "FakeFile[gone] changed"] {
        bed.store
            .owe(&unit("web"), datum_store::OwedAction::Reload, reason, 1)
            .unwrap();
    }
    let activation = |summary: &PassSummary| -> Vec<String> {
        summary
            .resources
            .iter()
            .find(|r| r.id == unit("web"))
            .unwrap()
            .diff
            .changes
            .iter()
            .filter(|c| c.field == "activation")
            .map(|c| c.after.as_ref().unwrap().as_str().unwrap().to_owned())
            .collect()
    };
    let plan = bed.pass(&cat("v1\n"), Mode::Plan);
    assert_eq!(
        activation(&plan),
        [
            "restart (after FakeFile[a] changed, FakeFile[b] changed, FakeFile[c] changed, FakeFile[gone] changed)"
        ]
    );
    // The restart fails: the store keeps its own order (the earlier
    // reasons first), each once.
    bed.faults.fail_activate("FakeUnit[web]");
    let failed = bed.pass(&cat("v1\n"), Mode::Apply);
    assert!(matches!(
        outcome(&failed, &unit("web")),
        Outcome::Failed { reason, .. } if reason.starts_with("restart failed")
    ));
    let owed = bed.store.owed_reloads().unwrap();
    assert_eq!(owed.len(), 1);
    assert_eq!(owed[0].action, datum_store::OwedAction::Restart);
    assert_eq!(
        owed[0].reasons,
        [
            "FakeFile[b] changed",
            "FakeFile[gone] changed",
            "FakeFile[a] changed",
            "FakeFile[c] changed"
        ]
    );
    // A pass that changes c again: c first, then the store's others.
    bed.faults.clear();
    bed.write("/c", "v0\n");
    let paid = bed.pass(&cat("v1\n"), Mode::Apply);
    assert!(matches!(
        outcome(&paid, &unit("web")),
        Outcome::Changed { .. }
    ));
    assert_eq!(
        activation(&paid),
        [
            "restarted (after FakeFile[c] changed, FakeFile[b] changed, FakeFile[gone] changed, FakeFile[a] changed)"
        ]
    );
    assert_eq!(
        bed.journal.of("restart"),
        ["FakeUnit[web]", "FakeUnit[web]"]
    );
    assert!(bed.store.owed_reloads().unwrap().is_empty());
}

/// A pass asks the run's `SensitiveOnce` when the caller gives one, so the
/// sensitive resources are read once in a run: by the pass when a
/// resource's output is looked at, never again by the warnings' filters
/// after it (the fleet report, the agent's log); a pass where nothing
/// prints reads nothing.
#[test]
fn a_pass_asks_the_runs_sensitive_paths_so_they_are_read_once() {
    use crate::SensitiveOnce;
    use crate::activation::sensitive_builds;
    const CANARY: &str = "CANARY-5e1d0";
    let secret = || Resource {
        sensitive: true,
        ..fake_file("secret", "/secret", &format!("{CANARY}\n"), &[])
    };
    let cat = catalogue(vec![
        // Not sensitive, but its validator quotes a word of the secret.
        Resource {
            validate: Some("json".to_owned()),
            ..fake_file("app", "/app.json", &format!("{{\"key\": {CANARY}}}\n"), &[])
        },
        secret(),
    ]);
    let (registry, _, _) = fake_registry();
    let mut bed = Bed::new();
    let pass = |bed: &mut Bed, cat: &Catalogue, sensitive: Option<&SensitiveOnce<'_>>| {
        let mut ctx = PassContext {
            registry: &bed.registry,
            host: &bed.host,
            mode: Mode::Plan,
            store: Some(&mut bed.store),
            backups: Some(&mut bed.backups),
            now: 1_000,
            skip: HashSet::new(),
            sensitive,
        };
        run_pass_with(cat, &mut ctx, &mut SilentReporter, &PassOptions::default())
            .unwrap_or_default()
    };
    let before = sensitive_builds();
    let sensitive = SensitiveOnce::new(&cat, &registry);
    let summary = pass(&mut bed, &cat, Some(&sensitive));
    let app = summary
        .resources
        .iter()
        .find(|r| r.id == id("app"))
        .unwrap();
    assert!(matches!(app.outcome, Outcome::Failed { .. }));
    assert!(app.detail.is_none(), "{:?}", app.detail);
    assert!(app.withheld.is_some());
    assert_eq!(sensitive_builds() - before, 1, "the pass read them");
    // The warnings after the pass: the same answers, nothing read again.
    assert!(sensitive.names_sensitive(&format!("useradd said '{CANARY}'")));
    assert!(sensitive.names_sensitive("FakeFile[secret]: said something"));
    assert!(sensitive.names_sensitive("a shell at /secret"));
    assert!(!sensitive.names_sensitive("User[w2]: usermod said '/bin/nope'"));
    assert_eq!(sensitive_builds() - before, 1, "read again after the pass");

    // Without one from the caller, the pass makes its own: once.
    let summary = pass(&mut bed, &cat, None);
    assert!(summary.resources.iter().any(|r| r.withheld.is_some()));
    assert_eq!(sensitive_builds() - before, 2);

    // Nothing prints: nothing is read.
    let quiet = catalogue(vec![fake_file("plain", "/plain", "x\n", &[]), secret()]);
    let sensitive = SensitiveOnce::new(&quiet, &registry);
    let summary = pass(&mut bed, &quiet, Some(&sensitive));
    assert!(!summary.any_failed());
    assert_eq!(sensitive_builds() - before, 2, "nothing printed");
}

/// A pass over part of the catalogue (a revert's, `datum apply --target`)
/// whose change notifies a service outside it performs that service's
/// activation, as a whole pass would, and no more of its declaration:
/// before, the reload was only recorded as owed, so the service kept
/// running what the change undid until the next whole apply. A service
/// that is not as declared itself is not touched: its activation stays
/// owed and a warning says why; one whose activation fails stays owed and
/// is reported failed.
#[test]
fn a_partial_pass_activates_the_service_outside_it_that_its_change_notifies() {
    let mut bed = Bed::new();
    let cat = catalogue(vec![
        fake_file("site", "/site", "v1\n", &[]),
        Resource {
            requires: vec![id("site")],
            ..fake_unit("web", &[id("site")])
        },
    ]);
    bed.pass(&cat, Mode::Apply);
    assert_eq!(bed.journal.of("reload"), ["FakeUnit[web]"]);
    let only_site = crate::PassOptions {
        only: Some(std::collections::BTreeSet::from([id("site")])),
        ..crate::PassOptions::default()
    };
    let partial = |bed: &mut Bed, mode: Mode| {
        let mut ctx = PassContext {
            registry: &bed.registry,
            host: &bed.host,
            mode,
            store: Some(&mut bed.store),
            backups: Some(&mut bed.backups),
            now: 2_000,
            skip: HashSet::new(),
            sensitive: None,
        };
        crate::run_pass_with(&cat, &mut ctx, &mut SilentReporter, &only_site).unwrap()
    };

    // Converged: the plan says it would reload, the apply reloads it, and
    // nothing else of its declaration is applied; nothing stays owed.
    bed.write("/site", "by hand\n");
    bed.journal.clear();
    let plan = partial(&mut bed, Mode::Plan);
    assert!(
        matches!(outcome(&plan, &unit("web")), Outcome::WouldChange { .. }),
        "{:?}",
        words(&plan)
    );
    assert!(bed.journal.of("reload").is_empty());
    let applied = partial(&mut bed, Mode::Apply);
    assert_eq!(
        words(&applied),
        [
            ("FakeFile[site]".to_owned(), "changed"),
            ("FakeUnit[web]".to_owned(), "changed")
        ]
    );
    let web = applied
        .resources
        .iter()
        .find(|r| r.id == unit("web"))
        .unwrap();
    assert_eq!(web.diff.changes[0].field, "activation");
    assert_eq!(bed.live("/site").as_deref(), Some("v1\n"));
    assert_eq!(bed.journal.of("reload"), ["FakeUnit[web]"]);
    // The unit's own apply (its `activate`) never ran: only its reload.
    assert!(
        !bed.journal
            .of("activate")
            .contains(&"FakeUnit[web]".to_owned()),
        "{:?}",
        bed.journal.lines()
    );
    assert!(bed.store.owed_reloads().unwrap().is_empty());
    assert!(applied.warnings.is_empty(), "{:?}", applied.warnings);

    // Not as declared (stopped): left alone, the reload owed, and said.
    bed.faults.leave_unconverged("FakeUnit[web]");
    bed.write("/site", "by hand\n");
    bed.journal.clear();
    let applied = partial(&mut bed, Mode::Apply);
    assert_eq!(words(&applied), [("FakeFile[site]".to_owned(), "changed")]);
    assert!(bed.journal.of("reload").is_empty());
    assert!(
        !bed.journal
            .of("activate")
            .contains(&"FakeUnit[web]".to_owned())
    );
    let owed = bed.store.owed_reloads().unwrap();
    assert_eq!(owed.len(), 1);
    assert_eq!(owed[0].service, unit("web"));
    assert_eq!(applied.warnings.len(), 1, "{:?}", applied.warnings);
    let warning = &applied.warnings[0];
    assert!(
        warning.contains("FakeUnit[web]")
            && warning.contains("not reloaded")
            && warning.contains("state")
            && warning.contains("stays owed"),
        "{warning}"
    );

    // Its activation fails: reported failed, still owed.
    bed.faults.clear();
    bed.faults.fail_activate("FakeUnit[web]");
    bed.write("/site", "by hand\n");
    bed.journal.clear();
    let applied = partial(&mut bed, Mode::Apply);
    assert!(
        matches!(
            outcome(&applied, &unit("web")),
            Outcome::Failed { reason, .. } if reason.starts_with("reload failed: ")
        ),
        "{:?}",
        words(&applied)
    );
    assert_eq!(bed.store.owed_reloads().unwrap().len(), 1);

    // The file fails (after its write): the service it requires is not
    // touched, as a whole pass would block it.
    bed.faults.clear();
    bed.faults.leave_unconverged("FakeFile[site]");
    bed.write("/site", "by hand\n");
    bed.journal.clear();
    let applied = partial(&mut bed, Mode::Apply);
    assert!(matches!(
        outcome(&applied, &id("site")),
        Outcome::Failed { .. }
    ));
    assert!(bed.journal.of("reload").is_empty());
    assert_eq!(bed.store.owed_reloads().unwrap().len(), 1);

    // Everything fine again: the owed reload is performed, once.
    bed.faults.clear();
    bed.write("/site", "by hand\n");
    bed.journal.clear();
    partial(&mut bed, Mode::Apply);
    assert_eq!(bed.journal.of("reload"), ["FakeUnit[web]"]);
    assert!(bed.store.owed_reloads().unwrap().is_empty());
}
