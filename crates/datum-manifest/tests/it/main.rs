//! Integration tests: repositories on disk, loaded the way `datum` loads them.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly on a broken fixture"
)]

use std::path::Path;

use datum_manifest::Repository;

const SETTINGS: &str = "datum: v1alpha1\nlayers:\n  - {name: base, path: base}\n  - {name: web, path: layers/web, match: {role: web}}\n";

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn doc(kind: &str, name: &str) -> String {
    format!("datum: v1alpha1\ntype: {kind}\nname: {name}\ndesired: {{path: /x}}\n")
}

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "datum.yaml", SETTINGS);
    std::fs::create_dir_all(dir.path().join("base")).unwrap();
    std::fs::create_dir_all(dir.path().join("layers/web")).unwrap();
    dir
}

fn names(r: &Repository) -> Vec<String> {
    r.documents.iter().map(|d| d.id.to_string()).collect()
}

/// A compile that owns the repository takes the `desired` mappings out
/// to let them go early: each comes back in document order, and each
/// document keeps an empty mapping where its own was written.
#[test]
fn the_desired_mappings_are_taken_out_in_document_order() {
    let dir = repo();
    let root = dir.path();
    write(root, "base/a.yaml", &doc("File", "a"));
    write(
        root,
        "base/b.yaml",
        "datum: v1alpha1\ntype: File\nname: b\ndesired:\n  path: /b\n  mode: '0600'\n",
    );
    let mut r = Repository::load(root, &[]).unwrap();
    let before: Vec<_> = r.documents.iter().map(|d| d.desired.clone()).collect();
    let taken = r.take_desired();
    assert_eq!(taken, before);
    assert_eq!(taken[1].get("mode").unwrap().value.as_str(), Some("0600"));
    for (d, was) in r.documents.iter().zip(&before) {
        assert_eq!(d.desired.as_map(), Some(&[][..]));
        assert_eq!((d.desired.start, d.desired.end), (was.start, was.end));
    }
}

#[test]
fn documents_load_in_layer_then_path_then_position_order() {
    let dir = repo();
    let root = dir.path();
    write(root, "layers/web/a.yaml", &doc("File", "web-a"));
    write(root, "base/z.yml", &doc("File", "z"));
    write(root, "base/b/inner.yaml", &doc("File", "inner"));
    write(
        root,
        "base/a.yaml",
        &format!("{}---\n---\n{}", doc("File", "a1"), doc("File", "a2")),
    );
    let r = Repository::load(root, &[]).unwrap();
    assert!(r.diagnostics.is_empty(), "{}", r.diagnostics);
    assert_eq!(
        names(&r),
        [
            "File[a1]",
            "File[a2]",
            "File[inner]",
            "File[z]",
            "File[web-a]"
        ]
    );
    assert_eq!(r.documents[4].layer, 1);
    assert_eq!(r.documents[4].origin().layer, "web");
    assert_eq!(r.documents[1].origin().to_string(), "base/a.yaml:7:1");
}

#[test]
fn content_folders_hidden_entries_and_other_files_are_not_manifests() {
    let dir = repo();
    let root = dir.path();
    write(root, "base/files/data.yaml", "not: a manifest\n");
    write(root, "base/templates/t.yaml", "{{ nope }}\n");
    write(root, "base/.hidden.yaml", "broken: [\n");
    write(root, "base/.git/x.yaml", "broken: [\n");
    write(root, "base/readme.md", "# hi\n");
    // Only the layer's own top-level files/ is content: deeper ones are manifests.
    write(root, "base/sub/files/deep.yaml", &doc("File", "deep"));
    write(root, "elsewhere/x.yaml", "broken: [\n");
    let r = Repository::load(root, &[]).unwrap();
    assert!(r.diagnostics.is_empty(), "{}", r.diagnostics);
    assert_eq!(names(&r), ["File[deep]"]);
}

#[test]
fn problems_in_several_files_are_all_collected() {
    let dir = repo();
    let root = dir.path();
    write(
        root,
        "base/a.yaml",
        "datum: v1alpha1\ntype: File\nname: [\n",
    );
    write(root, "base/b.yaml", "- just\n- a list\n");
    write(
        root,
        "base/c.yaml",
        &format!("{}extra: 1\n", doc("File", "c")),
    );
    write(root, "base/d.yaml", &doc("File", "d"));
    let r = Repository::load(root, &[]).unwrap();
    let lines: Vec<String> = r.diagnostics.iter().map(|d| d.one_line()).collect();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines[0].starts_with("base/a.yaml:3:8: error: YAML syntax error"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("base/b.yaml:1:1: error: a resource document must be a mapping"),
        "{lines:?}"
    );
    assert!(
        lines[2].starts_with("base/c.yaml:5:1: error: File[c]: unknown key `extra`"),
        "{lines:?}"
    );
    // The good documents are still there for the next checks.
    assert_eq!(names(&r), ["File[c]", "File[d]"]);
}

#[test]
fn a_manifest_linked_from_outside_the_repository_is_refused() {
    let dir = repo();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "evil.yaml", &doc("File", "evil"));
    std::os::unix::fs::symlink(
        outside.path().join("evil.yaml"),
        dir.path().join("base/evil.yaml"),
    )
    .unwrap();
    let r = Repository::load(dir.path(), &[]).unwrap();
    assert!(names(&r).is_empty());
    let lines: Vec<String> = r.diagnostics.iter().map(|d| d.one_line()).collect();
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with("base/evil.yaml: error: manifest link refused"),
        "{lines:?}"
    );
}

#[test]
fn a_broken_settings_file_stops_loading_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "datum.yaml", "datum: v1alpha1\nlayers: [\n");
    let err = Repository::load(dir.path(), &[]).unwrap_err();
    let lines: Vec<String> = err.iter().map(|d| d.one_line()).collect();
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with("datum.yaml:2:10: error: YAML syntax error"),
        "{lines:?}"
    );
    // The renderer can show the settings file's text.
    assert!(err.sources().get(Path::new("datum.yaml")).is_some());
}

#[test]
fn diagnostics_render_the_offending_line_from_the_loaded_sources() {
    let dir = repo();
    write(
        dir.path(),
        "base/a.yaml",
        "datum: v1alpha1\ntype: File\nname: a\ndesired: {}\nsensitive: maybe\n",
    );
    let r = Repository::load(dir.path(), &[]).unwrap();
    let text = r.diagnostics.render(false);
    assert_eq!(
        text,
        "error: File[a]: `sensitive` must be true or false, found a string\n --> base/a.yaml:5:12\n  |\n5 | sensitive: maybe\n  |            ^^^^^\n"
    );
}

#[test]
fn a_layer_at_the_repository_root_does_not_read_datum_yaml() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "datum.yaml",
        "datum: v1alpha1\nlayers:\n  - {name: all, path: .}\n",
    );
    write(dir.path(), "a.yaml", &doc("File", "a"));
    let r = Repository::load(dir.path(), &[]).unwrap();
    assert!(r.diagnostics.is_empty(), "{}", r.diagnostics);
    assert_eq!(names(&r), ["File[a]"]);
    assert_eq!(r.documents[0].origin().to_string(), "a.yaml:1:1");
}

/// A layer's folder inside another layer's folder belongs to its own layer
/// only: the outer layer, which may match every host, must not read it too,
/// or a host the inner layer's matcher leaves out gets its resources (the
/// database's password on a web host). The same for a layer at the
/// repository's root.
#[test]
fn a_layer_folder_inside_another_layer_belongs_to_that_layer_alone() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "datum.yaml",
        "datum: v1alpha1\nlayers:\n  - {name: all, path: .}\n  - {name: base, path: base}\n  - {name: db, path: base/db, match: {role: db}}\n  - {name: web, path: web, match: {role: web}}\n",
    );
    write(root, "top.yaml", &doc("File", "top"));
    write(root, "base/a.yaml", &doc("File", "a"));
    write(root, "base/sub/b.yaml", &doc("File", "b"));
    write(root, "base/db/secret.yaml", &doc("File", "dbpass"));
    write(root, "base/db/deep/more.yaml", &doc("File", "dbmore"));
    write(root, "web/site.yaml", &doc("File", "site"));
    let r = Repository::load(root, &[]).unwrap();
    assert!(r.diagnostics.is_empty(), "{}", r.diagnostics);
    let by_layer: Vec<(String, String)> = r
        .documents
        .iter()
        .map(|d| (d.origin().layer.clone(), d.id.to_string()))
        .collect();
    let want: Vec<(String, String)> = [
        ("all", "File[top]"),
        ("base", "File[a]"),
        ("base", "File[b]"),
        ("db", "File[dbmore]"),
        ("db", "File[dbpass]"),
        ("web", "File[site]"),
    ]
    .iter()
    .map(|(l, n)| ((*l).to_owned(), (*n).to_owned()))
    .collect();
    assert_eq!(by_layer, want);
}

/// A layer's folder may be named through a link inside the repository (the
/// settings accept it): its manifests are read from the folder the link
/// names, and reported under the path as written.
#[test]
fn a_layer_named_through_a_link_inside_the_repository_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "datum.yaml",
        "datum: v1alpha1\nlayers:\n  - {name: web, path: current, match: {role: web}}\n",
    );
    write(root, "releases/2/site.yaml", &doc("File", "site"));
    std::os::unix::fs::symlink("releases/2", root.join("current")).unwrap();
    let r = Repository::load(root, &[]).unwrap();
    assert!(r.diagnostics.is_empty(), "{}", r.diagnostics);
    assert_eq!(names(&r), ["File[site]"]);
    assert_eq!(r.documents[0].origin().to_string(), "current/site.yaml:1:1");
}

/// The loader knows no kind: the fields sensitive by nature are its
/// caller's (every kind's in its registry). A file that cannot be parsed
/// and names one shows where its errors are, never its lines; a field no
/// caller named is shown as any other.
#[test]
fn a_broken_line_of_a_field_the_caller_calls_sensitive_is_never_shown() {
    let dir = repo();
    let root = dir.path();
    write(
        root,
        "base/a.yaml",
        "datum: v1alpha1\ntype: Keyed\nname: k\ndesired:\n  api_key: s3cr3t: x\n",
    );
    let shown = Repository::load(root, &["api_key"])
        .unwrap()
        .diagnostics
        .render(false);
    assert!(shown.contains("base/a.yaml:5:18"), "{shown}");
    assert!(!shown.contains("s3cr3t"), "{shown}");
    let shown = Repository::load(root, &[])
        .unwrap()
        .diagnostics
        .render(false);
    assert!(shown.contains("s3cr3t"), "{shown}");
}
