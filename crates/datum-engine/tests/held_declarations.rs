//! In a catalogue made to hold declarations (the agent's), each
//! resource's declaration is parsed once and held beside it
//! (`datum_core::HeldDeclaration`): a compiler made to hold declares every
//! resource of the catalogue it makes, a catalogue loaded without them (a
//! snapshot) and made to hold declares each at its first use, and no pass
//! over either parses one again, however many passes run over it. A
//! resource that declares something else since is declared again. A
//! catalogue not made to hold (a one-shot command's) holds nothing, beside
//! one that does. The fake kinds of
//! `datum_testkit::fake` write `declare FakeFile[x]` (`declare FakeUnit[x]`) to their journal at
//! each parse.

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

use datum_catalog::{Catalogue, Compiler, HostIdentity};
use datum_core::Content;
use datum_engine::{Mode, PassContext, PassOptions, PassSummary, SilentReporter, run_pass_with};
use datum_host::Host;
use datum_providers::Registry;
use datum_store::Store;
use datum_store::backup::BackupStore;
use datum_testkit::fake::{Journal, fake_registry, read_live};

struct Bed {
    root: tempfile::TempDir,
    _state: tempfile::TempDir,
    repo: tempfile::TempDir,
    host: Host,
    registry: Registry,
    journal: Journal,
    store: Store,
    backups: BackupStore,
}

impl Bed {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let (registry, journal, _) = fake_registry();
        Bed {
            host: Host::new(root.path().to_path_buf()),
            store: Store::open(&state.path().join("state.db")).unwrap(),
            backups: BackupStore::open(&state.path().join("backups")).unwrap(),
            root,
            _state: state,
            repo,
            registry,
            journal,
        }
    }

    /// Compiles a repository of two FakeFiles and a FakeUnit following one.
    fn compile(&self) -> Catalogue {
        self.compile_holding(true)
    }

    /// [`Bed::compile`], its catalogue holding declarations or not.
    fn compile_holding(&self, hold: bool) -> Catalogue {
        let doc = |kind: &str, name: &str, desired: &str| {
            format!("datum: v1alpha1\ntype: {kind}\nname: {name}\ndesired:\n{desired}")
        };
        let repo = self.repo.path();
        std::fs::write(
            repo.join("datum.yaml"),
            "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
        )
        .unwrap();
        std::fs::create_dir_all(repo.join("base")).unwrap();
        let docs = [
            doc("FakeFile", "a", "  path: /a\n  content: \"a\\n\"\n"),
            doc("FakeFile", "b", "  path: /b\n  content: \"b\\n\"\n"),
            doc("FakeUnit", "web", "  reload_on: [\"FakeFile[a]\"]\n"),
        ];
        std::fs::write(repo.join("base/all.yaml"), docs.join("---\n")).unwrap();
        let host = HostIdentity {
            name: "h".to_owned(),
            labels: Default::default(),
        };
        compat::compiler(Compiler::new(&self.registry), hold)
            .compile(repo, &host)
            .unwrap()
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

    /// The parses since the journal was last cleared.
    fn declared(&self) -> Vec<String> {
        let mut all = self.journal.of("declare");
        all.sort();
        all
    }

    fn live(&self, path: &str) -> Option<String> {
        read_live(self.root.path(), path)
    }
}

/// Every resource of [`Bed::compile`]'s catalogue.
const EVERY: [&str; 3] = ["FakeFile[a]", "FakeFile[b]", "FakeUnit[web]"];

fn words(summary: &PassSummary) -> Vec<(String, &'static str)> {
    summary
        .resources
        .iter()
        .map(|r| (r.id.to_string(), r.outcome.word()))
        .collect()
}

/// `datum plan --recompile`, `datum apply` after a compile, the agent's
/// passes over the catalogue it keeps: the compiler parses each
/// declaration once, and no pass parses one again.
#[test]
fn a_compiled_catalogue_is_declared_once_by_the_compiler_and_never_by_its_passes() {
    let mut bed = Bed::new();
    let catalogue = bed.compile();
    assert_eq!(bed.declared(), EVERY, "the compile's");
    bed.journal.clear();
    for mode in [Mode::Plan, Mode::Apply, Mode::Apply, Mode::Plan] {
        let summary = bed.pass(&catalogue, mode);
        assert!(!summary.any_failed(), "{mode:?}: {:?}", words(&summary));
    }
    assert_eq!(bed.live("/a").as_deref(), Some("a\n"));
    assert_eq!(bed.journal.of("reload"), ["FakeUnit[web]"]);
    assert_eq!(bed.declared(), Vec::<String>::new(), "no pass parses again");
}

/// A catalogue loaded from its snapshot holds no declaration (they are
/// not stored): made to hold (as the agent does), each is parsed at its
/// first use and held from then on.
#[test]
fn a_loaded_catalogue_declares_each_resource_at_its_first_use_only() {
    let mut bed = Bed::new();
    let compiled = bed.compile();
    let mut loaded: Catalogue =
        serde_json::from_str(&serde_json::to_string(&compiled).unwrap()).unwrap();
    loaded.hold_declarations();
    drop(compiled);
    bed.journal.clear();
    bed.pass(&loaded, Mode::Apply);
    assert_eq!(bed.declared(), EVERY, "first use");
    bed.journal.clear();
    bed.pass(&loaded, Mode::Apply);
    bed.pass(&loaded, Mode::Plan);
    assert_eq!(bed.declared(), Vec::<String>::new(), "held since");
}

/// A resource changed after it was declared (its content and hash, as a
/// compile or a snapshot load sets them) is declared again, and the pass
/// applies what it declares now, never the declaration held for what it
/// declared before; one without a hash (built by hand) holds nothing and
/// is parsed at each pass, as before.
#[test]
fn a_resource_that_declares_something_else_is_declared_again() {
    let mut bed = Bed::new();
    let mut catalogue = bed.compile();
    bed.pass(&catalogue, Mode::Apply);
    assert_eq!(bed.live("/b").as_deref(), Some("b\n"));
    let b = catalogue
        .resources
        .iter_mut()
        .find(|r| r.id.name == "b")
        .unwrap();
    b.content = Some(Content::new(b"b2\n".to_vec()));
    b.declaration_hash = "b2".to_owned();
    bed.journal.clear();
    let summary = bed.pass(&catalogue, Mode::Apply);
    assert!(
        words(&summary).contains(&("FakeFile[b]".to_owned(), "changed")),
        "{:?}",
        words(&summary)
    );
    assert_eq!(bed.live("/b").as_deref(), Some("b2\n"));
    assert_eq!(bed.declared(), ["FakeFile[b]"], "only the changed one");
    bed.journal.clear();
    bed.pass(&catalogue, Mode::Apply);
    assert_eq!(bed.declared(), Vec::<String>::new(), "held again");

    // Without a hash: parsed at every pass, whatever it held.
    for r in &mut catalogue.resources {
        r.declaration_hash = String::new();
    }
    let b = &mut catalogue
        .resources
        .iter_mut()
        .find(|r| r.id.name == "b")
        .unwrap();
    b.content = Some(Content::new(b"b3\n".to_vec()));
    bed.journal.clear();
    bed.pass(&catalogue, Mode::Apply);
    bed.pass(&catalogue, Mode::Apply);
    assert_eq!(bed.live("/b").as_deref(), Some("b3\n"));
    assert_eq!(
        bed.declared(),
        [
            "FakeFile[a]",
            "FakeFile[a]",
            "FakeFile[b]",
            "FakeFile[b]",
            "FakeUnit[web]",
            "FakeUnit[web]"
        ]
    );
}

/// Whether a catalogue holds its declarations is its own (set when it is
/// made: compiled holding, or loaded and then made holding), not the
/// process's: beside a catalogue that holds, one made not to (a one-shot
/// command's, a library user's) is not declared by its compile and parses
/// each declaration at each pass, and the holding one, compiled or loaded,
/// parses none after its compile or first use, whatever was made after it.
#[test]
fn a_catalogue_that_holds_and_one_that_does_not_live_side_by_side() {
    let mut holding = Bed::new();
    let mut one_shot = Bed::new();
    let compiled = holding.compile_holding(true);
    assert_eq!(holding.declared(), EVERY, "the holding compile declares");
    let plain = one_shot.compile_holding(false);
    assert_eq!(
        one_shot.declared(),
        Vec::<String>::new(),
        "a compile that does not hold declares nothing"
    );
    let roundtrip = |c: &Catalogue| -> Catalogue {
        serde_json::from_str(&serde_json::to_string(c).unwrap()).unwrap()
    };
    let mut loaded = roundtrip(&compiled);
    compat::make_holding(&mut loaded, true);
    let mut loaded_plain = roundtrip(&plain);
    compat::make_holding(&mut loaded_plain, false);
    holding.journal.clear();
    one_shot.journal.clear();

    for round in 0..2 {
        holding.pass(&compiled, Mode::Apply);
        one_shot.pass(&plain, Mode::Apply);
        one_shot.pass(&loaded_plain, Mode::Plan);
        holding.pass(&loaded, Mode::Plan);
        let expected: &[&str] = if round == 0 { &EVERY } else { &[] };
        assert_eq!(
            holding.declared(),
            expected,
            "round {round}: the holding catalogues (the compiled one held since its compile, the loaded one since its first use)"
        );
        let mut twice: Vec<&str> = EVERY.iter().chain(&EVERY).copied().collect();
        twice.sort();
        assert_eq!(
            one_shot.declared(),
            twice,
            "round {round}: the catalogues that do not hold parse at each pass"
        );
        assert!(
            plain
                .resources
                .iter()
                .chain(&loaded_plain.resources)
                .all(|r| !r.held.is_held(&r.declaration_hash)),
            "round {round}: nothing held by a catalogue that does not hold"
        );
        holding.journal.clear();
        one_shot.journal.clear();
    }
    assert_eq!(holding.live("/a").as_deref(), Some("a\n"));
    assert_eq!(one_shot.live("/a").as_deref(), Some("a\n"));
}

/// Making catalogues hold, as this version of the code can (before, the
/// process-wide `datum_core::hold_declarations(hold)` in both: with it,
/// `a_catalogue_that_holds_and_one_that_does_not_live_side_by_side`
/// failed).
mod compat {
    use datum_catalog::{Catalogue, Compiler};

    /// A compiler whose catalogues hold declarations or not.
    pub fn compiler(compiler: Compiler<'_>, hold: bool) -> Compiler<'_> {
        if hold {
            compiler.holding_declarations()
        } else {
            compiler
        }
    }

    /// Makes a loaded catalogue hold declarations from its first use.
    pub fn make_holding(catalogue: &mut Catalogue, hold: bool) {
        if hold {
            catalogue.hold_declarations();
        }
    }
}
