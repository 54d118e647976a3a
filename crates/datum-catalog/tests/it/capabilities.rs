//! The compiler is handed its registry and asks each kind's capabilities,
//! never its name: kinds it has never heard of (the fakes of
//! `datum_testkit::fake`) get path conflict checks, parent-folder ordering
//! and activation ordering from what they declare they can do.

use datum_catalog::{Compiler, HostIdentity};
use datum_providers::Registry;
use datum_providers::directory::DirectoryProvider;
use datum_testkit::fake::fake_providers;

use super::{Repo, ids};

fn registry() -> Registry {
    let (mut providers, _, _) = fake_providers();
    providers.push(Box::new(DirectoryProvider));
    Registry::new(providers)
}

fn doc(kind: &str, name: &str, desired: &str) -> String {
    format!("datum: v1alpha1\ntype: {kind}\nname: {name}\ndesired:\n{desired}")
}

fn one_host() -> HostIdentity {
    HostIdentity {
        name: "h".to_owned(),
        labels: Default::default(),
    }
}

#[test]
fn a_kind_the_compiler_never_heard_of_is_ordered_by_its_capabilities() {
    let repo =
        Repo::new("datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n");
    repo.file(
        "base/all.yaml",
        &[
            doc("FakeUnit", "web", "  reload_on: [\"FakeFile[site]\"]\n"),
            doc(
                "FakeFile",
                "site",
                "  path: /etc/app/site\n  content: \"x\\n\"\n",
            ),
            doc("Directory", "app", "  path: /etc/app\n"),
        ]
        .join("---\n"),
    );
    let registry = registry();
    let compiler = Compiler::new(&registry);
    let cat = compiler.compile(repo.path(), &one_host()).unwrap();
    // The file after its folder (paths), the unit after the file it
    // follows (activation), whatever the order written.
    assert_eq!(
        ids(&cat),
        ["Directory[app]", "FakeFile[site]", "FakeUnit[web]"]
    );
    let auto: Vec<(String, String)> = cat
        .autorequires
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert!(
        auto.contains(&("FakeFile[site]".into(), "Directory[app]".into())),
        "{auto:?}"
    );
    assert!(
        auto.contains(&("FakeUnit[web]".into(), "FakeFile[site]".into())),
        "{auto:?}"
    );

    // The shipped registry does not know these kinds at all.
    let shipped = datum_catalog::lint(repo.path(), None);
    assert!(
        shipped
            .iter()
            .any(|d| d.one_line().contains("unknown type `FakeFile`")),
        "{shipped:?}"
    );
}

#[test]
fn two_kinds_claiming_one_path_conflict_and_nothing_lives_in_an_absent_folder() {
    let repo =
        Repo::new("datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n");
    repo.file(
        "base/all.yaml",
        &[
            doc("FakeFile", "a", "  path: /srv/x\n  content: \"a\\n\"\n"),
            doc("Directory", "x", "  path: /srv/x/\n"),
            doc("Directory", "gone", "  path: /opt/gone\n  ensure: absent\n"),
            doc(
                "FakeFile",
                "inside",
                "  path: /opt/gone/f\n  content: \"f\\n\"\n",
            ),
        ]
        .join("---\n"),
    );
    let registry = registry();
    let diags = Compiler::new(&registry).lint(repo.path(), Some(&one_host()));
    let lines: Vec<String> = diags.iter().map(|d| d.one_line()).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("path `/srv/x/` is also managed by FakeFile[a]")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains(
            "`/opt/gone/f` is declared present inside Directory[gone], which is declared absent"
        )),
        "{lines:#?}"
    );
}

/// A kind whose fields check but whose declaration never parses (what a
/// kind's `declare` refuses beyond `check_fields`): the pass would fail it.
struct Unparsed;

impl datum_providers::Capabilities for Unparsed {}

impl datum_providers::Kind for Unparsed {
    const KIND: &'static str = "Unparsed";
    type Declaration = ();
    type Written = serde_json::Value;
    type Staging = datum_providers::Planned;

    fn check_fields(
        &self,
        _desired: &serde_json::Value,
    ) -> Result<(), Vec<datum_providers::FieldError>> {
        Ok(())
    }
    fn declare(&self, r: &datum_core::Resource) -> Result<(), datum_providers::ProviderError> {
        Err(datum_providers::ProviderError::Invalid {
            field: "word".to_owned(),
            message: format!(
                "`{}` is not a word here",
                r.desired_str("word").unwrap_or("")
            ),
        })
    }
    fn observe(
        &self,
        _: &datum_host::Host,
        _: &datum_core::Resource,
        _: &(),
    ) -> Result<datum_core::Observed, datum_providers::ProviderError> {
        Ok(datum_core::Observed::absent())
    }
    fn plan(&self, _: &datum_core::Resource, _: &(), _: &datum_core::Observed) -> datum_core::Diff {
        datum_core::Diff::default()
    }
    fn stage(
        &self,
        _: &datum_host::Host,
        _: &datum_core::Resource,
        _: &(),
        observed: &datum_core::Observed,
        diff: &datum_core::Diff,
    ) -> Result<datum_providers::Planned, datum_providers::ProviderError> {
        Ok(datum_providers::kind::planned(observed, diff))
    }
    fn activate(
        &self,
        _: &datum_host::Host,
        _: &datum_core::Resource,
        _: &(),
        _: datum_providers::Planned,
    ) -> Result<datum_providers::Activated<datum_providers::Planned>, datum_providers::ProviderError>
    {
        Ok(datum_providers::Activated::Done)
    }
}

/// A compiler whose catalogues hold declarations (the agent's) declares
/// every resource of the catalogue it makes (each is held for every pass,
/// see `datum_core::HeldDeclaration`): one whose declaration does not
/// parse is a compile error naming its file, line and resource, and no
/// catalogue is made (before, the compile passed and each pass failed the
/// resource); a sensitive one's error quotes none of its values and shows
/// no line. A compiler whose catalogues do not hold (a one-shot
/// command's) declares nothing, so it makes the catalogue (its pass
/// refuses the resource), in the same process, after the holding one.
#[test]
fn a_declaration_that_does_not_parse_is_a_compile_error_at_its_resource() {
    let repo =
        Repo::new("datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n");
    repo.file(
        "base/all.yaml",
        &[
            doc(
                "FakeFile",
                "fine",
                "  path: /srv/fine\n  content: \"a\\n\"\n",
            ),
            doc("Unparsed", "odd", "  word: plain\n"),
            format!(
                "{}sensitive: true\n",
                doc("Unparsed", "hidden", "  word: s3cret\n")
            ),
        ]
        .join("---\n"),
    );
    let (mut providers, _, _) = fake_providers();
    providers.push(Box::new(Unparsed));
    let registry = Registry::new(providers);
    let diags = Compiler::new(&registry)
        .holding_declarations()
        .compile(repo.path(), &one_host())
        .unwrap_err();
    let lines: Vec<String> = diags.iter().map(|d| d.one_line()).collect();
    assert_eq!(
        lines,
        [
            "base/all.yaml:8:1: error: Unparsed[odd]: Unparsed[odd] does not parse as its type declares: word: `plain` is not a word here",
            "base/all.yaml:14:1: error: Unparsed[hidden]: Unparsed[hidden] does not parse as its type declares",
        ],
    );
    let hidden: Vec<bool> = diags.iter().map(|d| d.hide_source).collect();
    assert_eq!(hidden, [false, true]);
    let shown = format!("{diags:?}");
    assert!(!shown.contains("s3cret"), "{shown}");

    let catalogue = Compiler::new(&registry)
        .compile(repo.path(), &one_host())
        .expect("a compile that does not hold declares nothing");
    assert_eq!(catalogue.resources.len(), 3);
    assert!(
        catalogue.resources.iter().all(|r| !r.held.holds()),
        "its resources do not hold"
    );
}
