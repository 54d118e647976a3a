//! A corpus of broken repositories: each kind of manifest error is reported
//! with its file and line, exits 1, and nothing is written under the root.

use std::os::unix::fs::symlink;

use crate::support::*;

const HEAD: &str = "datum: v1alpha1\ntype: File\nname: f\ndesired:\n  path: /etc/f.conf\n";

/// (case, manifest for base/main.yaml, expected position, expected words)
fn corpus() -> Vec<(&'static str, String, &'static str, &'static str)> {
    vec![
        ("unknown type", "datum: v1alpha1\ntype: Fiel\nname: f\ndesired: {path: /x}\n".into(), "base/main.yaml:2:", "Fiel"),
        ("unknown field", format!("{HEAD}  mdoe: \"0644\"\n"), "base/main.yaml:6:", "mdoe"),
        ("wrong value type", format!("{HEAD}  owner: [root]\n"), "base/main.yaml:6:", "owner"),
        ("bad mode", format!("{HEAD}  mode: \"0999\"\n"), "base/main.yaml:6:", "mode"),
        ("unquoted mode", format!("{HEAD}  mode: 644\n"), "base/main.yaml:6:", "mode"),
        ("duplicate name", format!("{HEAD}  content: a\n---\n{HEAD}  content: b\n"), "base/main.yaml:", "duplicate"),
        ("requires naming nothing", "datum: v1alpha1\ntype: File\nname: f\nrequires: [File/nope]\ndesired: {path: /x, content: a}\n".into(), "base/main.yaml:4:", "File/nope"),
        (
            "dependency cycle",
            "datum: v1alpha1\ntype: File\nname: a\nrequires: [File/b]\ndesired: {path: /a, content: a}\n---\ndatum: v1alpha1\ntype: File\nname: b\nrequires: [File/a]\ndesired: {path: /b, content: b}\n".into(),
            "base/main.yaml:",
            "cycle",
        ),
        ("source escaping the repository", format!("{HEAD}  source: ../../etc/shadow\n"), "base/main.yaml:6:", "../../etc/shadow"),
        ("absolute source", format!("{HEAD}  source: /etc/shadow\n"), "base/main.yaml:6:", "/etc/shadow"),
        ("source symlink out of the repository", format!("{HEAD}  source: files/escape\n"), "base/main.yaml:6:", "files/escape"),
        ("missing source", format!("{HEAD}  source: files/nope\n"), "base/main.yaml:6:", "files/nope"),
        ("unknown validator", format!("{HEAD}  content: a\n  validate: sshdd\n"), "base/main.yaml:7:", "sshdd"),
        ("validator as a command line", format!("{HEAD}  content: a\n  validate: \"sshd -t -f %s\"\n"), "base/main.yaml:7:", "command"),
        ("template with an undefined variable", format!("{HEAD}  template: templates/t.j2\n"), "base/templates/t.j2:", "nope"),
        ("yaml syntax error", "datum: v1alpha1\ntype: File\nname: [unclosed\n".into(), "base/main.yaml:", "error"),
    ]
}

#[test]
fn every_kind_of_manifest_error_is_reported_with_file_and_line_and_applies_nothing() {
    for (case, manifest, position, words) in corpus() {
        let s = Sandbox::with_base(&manifest);
        s.write("repo/base/templates/t.j2", "{{ host.labels.nope }}\n");
        std::fs::create_dir_all(s.repo().join("base/files")).unwrap();
        symlink("/etc/passwd", s.repo().join("base/files/escape")).unwrap();

        let lint = s.datum(&["lint"]);
        let err = stderr(&lint);
        assert_eq!(code(&lint), 1, "{case}: lint exit\n{err}");
        assert!(
            err.contains(position),
            "{case}: expected {position} in\n{err}"
        );
        assert!(err.contains(words), "{case}: expected `{words}` in\n{err}");

        let apply = s.datum(&["apply"]);
        assert_eq!(code(&apply), 1, "{case}: apply exit\n{}", stderr(&apply));
        assert!(
            s.files_under_root().is_empty(),
            "{case}: wrote {:?}",
            s.files_under_root()
        );
    }
}

#[test]
fn all_errors_are_collected_not_just_the_first() {
    let s = Sandbox::with_base(&format!(
        "{HEAD}  mdoe: \"0644\"\n---\ndatum: v1alpha1\ntype: Fiel\nname: g\ndesired: {{path: /g}}\n---\ndatum: v1alpha1\ntype: File\nname: h\nrequires: [File/nope]\ndesired: {{path: /h, content: a}}\n"
    ));
    let out = s.datum(&["lint"]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    for expected in [
        "base/main.yaml:6:",
        "base/main.yaml:9:",
        "base/main.yaml:16:",
    ] {
        assert!(err.contains(expected), "missing {expected} in\n{err}");
    }
}

#[test]
fn a_clean_repository_lints_clean() {
    let s = Sandbox::new();
    let out = s.datum_repo(&examples_dir(), &["lint"]);
    assert_exit(&out, 0);
    // Every host of the example lints without a warning (they are the first
    // thing a new user runs).
    let all = s.datum_repo(&examples_dir(), &["lint", "--all-hosts"]);
    assert_exit(&all, 0);
    let text = format!("{}{}", stdout(&all), stderr(&all));
    assert!(text.contains("4 host(s), no errors"), "{text}");
    assert!(!text.contains("warning"), "{text}");
}

/// Without a host identity lint cannot compile a host's view, so two
/// Files claiming one path linted "no errors" while `plan` refused them.
/// It still exits 0 (nothing it checked is wrong), but says what it did not
/// check, and JSON says `host_checked: false`; with a host file it finds the
/// conflict and says nothing of the kind.
#[test]
fn lint_without_a_host_says_what_it_did_not_check() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\ndesired: {path: /a, content: a}\n---\ndatum: v1alpha1\ntype: File\nname: b\ndesired: {path: /a, content: b}\n",
    );
    let bare = |args: &[&str]| {
        assert_cmd::Command::cargo_bin("datum")
            .expect("datum binary")
            .arg("--repo")
            .arg(s.repo())
            .arg("--root")
            .arg(s.root())
            .arg("--color")
            .arg("never")
            .args(args)
            .output()
            .expect("run datum")
    };
    let out = bare(&["lint"]);
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("no errors"), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no host identity") && err.contains("resources claiming one path"),
        "{err}"
    );
    let json = bare(&["lint", "--output", "json"]);
    assert_exit(&json, 0);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(doc["host_checked"], false, "{doc}");

    let with_host = s.datum(&["lint"]);
    assert_exit(&with_host, 1);
    let err = stderr(&with_host);
    assert!(err.contains("also managed by File[a]"), "{err}");
    assert!(!err.contains("no host identity"), "{err}");
    let json = s.datum(&["lint", "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(doc["host_checked"], true, "{doc}");
}

/// A host file without `name:` takes the name in ROOT/etc/hostname (then
/// the kernel's): that name is held to the rule a host file's `name:` is
/// (ca02779), so `web 01` is refused by lint and plan alike, naming the
/// file it came from, and nothing is written under the root.
#[test]
fn a_fallback_host_name_enrolment_would_refuse_is_refused_naming_where_it_came_from() {
    let s = Sandbox::with_base(&format!("{HEAD}  content: x\n"));
    let host_file = s.write("host.yaml", "labels: {role: web}\n");
    let hostname = s.write("root/etc/hostname", "web 01\n");
    let before = s.files_under_root();
    for command in ["lint", "plan", "apply"] {
        let out = s.datum(&[command]);
        assert_exit(&out, 1);
        let err = stderr(&out);
        let want = format!(
            "`web 01`, read from {} because {} gives no name, is not a usable host name",
            hostname.display(),
            host_file.display()
        );
        assert!(err.contains(&want), "{command}: {want}\nnot in\n{err}");
        assert_eq!(
            s.files_under_root(),
            before,
            "{command} wrote under the root"
        );
    }
    // A usable name there is taken as before.
    s.write("root/etc/hostname", "web-01\n");
    let out = s.datum(&["--output", "json", "catalogue"]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("\"name\": \"web-01\""),
        "{}",
        stdout(&out)
    );
}
