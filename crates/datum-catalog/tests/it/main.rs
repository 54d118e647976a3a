//! Integration tests: whole repositories built in temporary folders, linted
//! and compiled with the real providers (File, Directory, Symlink).

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly on a broken fixture"
)]

mod capabilities;
mod schema;

use std::path::{Path, PathBuf};

use datum_catalog::{HostIdentity, compile, lint};
use datum_core::ResourceId;

/// A repository in a temporary folder, written file by file.
struct Repo {
    dir: tempfile::TempDir,
}

const TWO_LAYERS: &str = "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n  - name: web\n    path: web\n    match: {role: web}\n";

impl Repo {
    fn new(settings: &str) -> Self {
        let repo = Repo {
            dir: tempfile::tempdir().unwrap(),
        };
        repo.file("datum.yaml", settings);
        std::fs::create_dir_all(repo.path().join("base")).unwrap();
        std::fs::create_dir_all(repo.path().join("web")).unwrap();
        repo
    }

    fn two_layers() -> Self {
        Self::new(TWO_LAYERS)
    }

    fn file(&self, rel: &str, text: &str) -> &Self {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// One-line diagnostics of `datum lint` without a host.
    fn lint(&self) -> Vec<String> {
        lint(self.path(), None)
            .iter()
            .map(|d| d.one_line())
            .collect()
    }

    /// The errors of a compile for `host` that must fail, one line each.
    fn compile_errors(&self, host: &HostIdentity) -> Vec<String> {
        compile(self.path(), host)
            .unwrap_err()
            .iter()
            .map(|d| d.one_line())
            .collect()
    }

    fn lint_for(&self, host: &HostIdentity) -> Vec<String> {
        lint(self.path(), Some(host))
            .iter()
            .map(|d| d.one_line())
            .collect()
    }
}

fn host(name: &str, labels: &[(&str, &str)]) -> HostIdentity {
    HostIdentity {
        name: name.to_owned(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

fn web() -> HostIdentity {
    host("web-01", &[("role", "web")])
}

fn file_doc(name: &str, path: &str, extra: &str) -> String {
    format!("datum: v1alpha1\ntype: File\nname: {name}\ndesired:\n  path: {path}\n{extra}")
}

/// A resource of `kind` whose `desired` is one flow mapping.
fn flow_doc(kind: &str, name: &str, desired: &str) -> String {
    format!("datum: v1alpha1\ntype: {kind}\nname: {name}\ndesired: {desired}\n")
}

fn ids(cat: &datum_catalog::Catalogue) -> Vec<String> {
    cat.resources.iter().map(|r| r.id.to_string()).collect()
}

fn example_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    assert!(
        dir.join("datum.yaml").is_file(),
        "the example repository is missing at {}",
        dir.display()
    );
    dir
}

mod layering {
    use super::*;

    #[test]
    fn a_later_layer_overrides_fields_and_keeps_the_rest() {
        let repo = Repo::two_layers();
        repo.file(
            "base/motd.yaml",
            &file_doc(
                "motd",
                "/etc/motd",
                "  mode: \"0644\"\n  owner: root\n  content: \"base\\n\"\n",
            ),
        )
        .file(
            "web/motd.yaml",
            &file_doc("motd", "/etc/motd", "  mode: \"0600\"\n"),
        );
        let cat = datum_catalog::compile_explained(repo.path(), &web()).unwrap();
        let r = cat.get(&ResourceId::new("File", "motd")).unwrap();
        assert_eq!(
            r.desired,
            serde_json::json!({"path": "/etc/motd", "mode": "0600", "owner": "root"})
        );
        assert_eq!(content_bytes(r.content.as_ref().unwrap()), b"base\n");
        assert_eq!(r.field_origins["mode"].layer, "web");
        assert_eq!(r.field_origins["mode"].to_string(), "web/motd.yaml:6:3");
        assert_eq!(r.field_origins["owner"].layer, "base");
        assert_eq!(r.field_origins["content"].to_string(), "base/motd.yaml:8:3");
        // The resource's origin is the last document that touched it.
        assert_eq!(r.origin.to_string(), "web/motd.yaml:1:1");
    }

    /// A field a later layer removes with `null` is explained by where it
    /// was removed, marked `removed`; one removed and written again, or
    /// null where nothing was written before, is not.
    #[test]
    fn explain_says_which_layer_removed_a_field() {
        let repo = Repo::new(
            "datum: v1alpha1\nlayers:\n  - {name: base, path: base, match: {}}\n  - {name: web, path: web, match: {role: web}}\n  - {name: late, path: late, match: {}}\n",
        );
        repo.file(
            "base/motd.yaml",
            &file_doc(
                "motd",
                "/etc/motd",
                "  mode: \"0644\"\n  owner: root\n  group: adm\n  content: \"base\\n\"\n",
            ),
        )
        .file(
            "web/motd.yaml",
            &file_doc(
                "motd",
                "/etc/motd",
                "  owner: null  # root's by default\n  group: null\n  content: null\n  ensure: null\n",
            ),
        )
        .file(
            "late/motd.yaml",
            &file_doc("motd", "/etc/motd", "  group: staff\n"),
        );
        let cat = datum_catalog::compile_explained(repo.path(), &web()).unwrap();
        let json = cat.to_json(datum_providers::registry(), true);
        let fields = &json["resources"][0]["fields"];
        assert_eq!(
            json["resources"][0]["desired"],
            serde_json::json!({"path": "/etc/motd", "mode": "0644", "group": "staff"})
        );
        assert_eq!(
            fields["owner"],
            serde_json::json!({"layer": "web", "origin": "web/motd.yaml:6:3", "removed": true}),
            "{fields:#}"
        );
        assert_eq!(
            fields["content"],
            serde_json::json!({"layer": "web", "origin": "web/motd.yaml:8:3", "removed": true}),
            "{fields:#}"
        );
        // Written again by a later layer: that layer's.
        assert_eq!(
            fields["group"],
            serde_json::json!({"layer": "late", "origin": "late/motd.yaml:6:3"}),
            "{fields:#}"
        );
        assert_eq!(fields["mode"]["layer"], "base", "{fields:#}");
        // Null where no layer wrote it: nothing was removed.
        assert!(fields.get("ensure").is_none(), "{fields:#}");
        // Without --explain, no origins at all.
        let plain = compile(repo.path(), &web()).unwrap();
        assert!(plain.resources[0].field_origins.is_empty());
    }

    #[test]
    fn hosts_outside_the_matcher_do_not_get_the_layer() {
        let repo = Repo::two_layers();
        repo.file(
            "base/motd.yaml",
            &file_doc("motd", "/etc/motd", "  mode: \"0644\"\n"),
        )
        .file(
            "web/motd.yaml",
            &file_doc("motd", "/etc/motd", "  mode: \"0600\"\n"),
        )
        .file("web/nginx.yaml", &file_doc("nginx", "/etc/nginx.conf", ""));
        let db = compile(repo.path(), &host("db-01", &[("role", "db")])).unwrap();
        assert_eq!(ids(&db), ["File[motd]"]);
        assert_eq!(db.resources[0].desired["mode"], "0644");
        let web = compile(repo.path(), &web()).unwrap();
        assert_eq!(ids(&web), ["File[motd]", "File[nginx]"]);
    }

    #[test]
    fn a_list_in_the_matcher_means_any_of() {
        let repo = Repo::new(
            "datum: v1alpha1\nlayers:\n  - {name: base, path: base, match: {}}\n  - {name: web, path: web, match: {role: [web, api]}}\n",
        );
        repo.file("web/x.yaml", &file_doc("x", "/x", ""));
        assert_eq!(
            compile(repo.path(), &host("a", &[("role", "api")]))
                .unwrap()
                .resources
                .len(),
            1
        );
        assert_eq!(
            compile(repo.path(), &host("d", &[("role", "db")]))
                .unwrap()
                .resources
                .len(),
            0
        );
    }

    #[test]
    fn a_template_in_a_later_layer_replaces_a_source_in_an_earlier_one() {
        let repo = Repo::two_layers();
        repo.file("base/files/motd", "static\n")
            .file(
                "web/templates/motd.j2",
                "hello {{ host.name }} ({{ labels.role }})\n",
            )
            .file(
                "base/motd.yaml",
                &file_doc("motd", "/etc/motd", "  source: files/motd\n"),
            )
            .file(
                "web/motd.yaml",
                &file_doc("motd", "/etc/motd", "  template: templates/motd.j2\n"),
            );
        let web = datum_catalog::compile_explained(repo.path(), &web()).unwrap();
        let r = &web.resources[0];
        assert_eq!(
            content_bytes(r.content.as_ref().unwrap()),
            b"hello web-01 (web)\n"
        );
        assert_eq!(r.field_origins["content"].layer, "web");
        // Content fields never stay in desired.
        assert_eq!(r.desired, serde_json::json!({"path": "/etc/motd"}));
        let db = compile(repo.path(), &host("db-01", &[])).unwrap();
        assert_eq!(
            content_bytes(db.resources[0].content.as_ref().unwrap()),
            b"static\n"
        );
    }

    #[test]
    fn null_in_a_later_layer_removes_a_field_or_the_content() {
        let repo = Repo::two_layers();
        repo.file("base/files/motd", "hi\n")
            .file("base/motd.yaml", &file_doc("motd", "/etc/motd", "  mode: \"0644\"\n  source: files/motd\n"))
            .file(
                "web/motd.yaml",
                "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  ensure: absent\n  source: null\n  mode: null\n",
            );
        assert_eq!(repo.lint(), Vec::<String>::new());
        let web = compile(repo.path(), &web()).unwrap();
        let r = &web.resources[0];
        assert_eq!(
            r.desired,
            serde_json::json!({"path": "/etc/motd", "ensure": "absent"})
        );
        assert!(r.content.is_none());
        let db = compile(repo.path(), &host("db-01", &[])).unwrap();
        assert_eq!(
            content_bytes(db.resources[0].content.as_ref().unwrap()),
            b"hi\n"
        );
        // Without the null, absent and content contradict each other on web
        // hosts; a db host's catalogue is still fine.
        repo.file(
            "web/motd.yaml",
            "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  ensure: absent\n",
        );
        assert!(compile(repo.path(), &host("db-01", &[])).is_ok());
        assert!(compile(repo.path(), &super::web()).is_err());
        let lines = repo.lint_for(&super::web());
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0].starts_with("base/motd.yaml:7:3: error: File[motd]: `source` makes no sense"),
            "{lines:?}"
        );
    }

    #[test]
    fn envelope_fields_are_replaced_only_when_set() {
        let repo = Repo::two_layers();
        repo.file(
            "base/a.yaml",
            &format!(
                "{}requires: [File/b]\nclass: critical\nsensitive: true\n",
                file_doc("a", "/a", "  content: x\n  validate: sshd\n")
            ),
        )
        .file("base/b.yaml", &file_doc("b", "/b", ""))
        .file(
            "web/a.yaml",
            &format!("{}class: normal\n", file_doc("a", "/a", "")),
        );
        let cat = datum_catalog::compile_explained(repo.path(), &web()).unwrap();
        let a = cat.get(&ResourceId::new("File", "a")).unwrap();
        assert_eq!(a.class, "normal");
        assert!(a.sensitive);
        assert_eq!(a.validate.as_deref(), Some("sshd"));
        assert_eq!(a.requires, [ResourceId::new("File", "b")]);
        assert_eq!(a.field_origins["class"].layer, "web");
        assert_eq!(a.field_origins["validate"].to_string(), "base/a.yaml:7:13");
    }

    /// A User that declares a password hash is sensitive, but only through
    /// that field (check masks the hash alone); one that says
    /// `sensitive: true` itself is sensitive whole.
    /// A resource one layer declares sensitive stays sensitive in every
    /// layer: a later layer's `sensitive: false` (which replaced the flag)
    /// showed the earlier layer's secret content in the plan's diff. It is
    /// now a warning at that line, and the resource stays sensitive.
    #[test]
    fn a_later_layer_cannot_unmark_a_sensitive_resource() {
        let repo = Repo::two_layers();
        repo.file(
            "base/db.yaml",
            "datum: v1alpha1\ntype: File\nname: db\nsensitive: true\ndesired:\n  path: /etc/db.conf\n  content: canary-7f3a-db\n",
        );
        repo.file(
            "web/db.yaml",
            "datum: v1alpha1\ntype: File\nname: db\nsensitive: false\ndesired:\n  mode: \"0640\"\n",
        );
        let cat = compile(repo.path(), &web()).unwrap();
        let r = cat.get(&ResourceId::new("File", "db")).unwrap();
        assert!(r.sensitive, "a later layer un-marked a secret");
        let lint = repo.lint();
        assert!(
            lint.iter()
                .any(|l| l.contains("web/db.yaml:4") && l.contains("stays sensitive")),
            "{lint:?}"
        );
    }

    #[test]
    fn a_sensitive_field_makes_a_resource_sensitive_through_that_field_only() {
        let repo = Repo::two_layers();
        let user = |name: &str, envelope: &str| {
            format!(
                "datum: v1alpha1\ntype: User\nname: {name}\n{envelope}desired: {{shell: /bin/sh, password_hash: \"$6$s$h\"}}\n"
            )
        };
        repo.file(
            "base/users.yaml",
            &[
                user("deploy", ""),
                user("vault", "sensitive: true\n"),
                "datum: v1alpha1\ntype: User\nname: plain\ndesired: {shell: /bin/sh}\n".to_owned(),
            ]
            .join("---\n"),
        );
        let cat = compile(repo.path(), &web()).unwrap();
        let flags = |name: &str| {
            let r = cat.get(&ResourceId::new("User", name)).unwrap();
            (r.sensitive, r.sensitive_by_field_only)
        };
        assert_eq!(flags("deploy"), (true, true));
        assert_eq!(flags("vault"), (true, false));
        assert_eq!(flags("plain"), (false, false));
    }

    /// Saying `sensitive: true` on a User that declares a password hash
    /// changes what is hidden (every field, not the hash alone), and its
    /// declaration hash with it: the `sensitive` the hash covered was true
    /// either way, so the change read as no change of the declaration.
    #[test]
    fn saying_sensitive_beside_a_sensitive_field_changes_the_declaration_hash() {
        let hash = |envelope: &str| {
            let repo = Repo::two_layers();
            repo.file(
                "base/users.yaml",
                &format!(
                    "datum: v1alpha1\ntype: User\nname: deploy\n{envelope}desired: {{shell: /bin/sh, password_hash: \"$6$s$h\"}}\n"
                ),
            );
            let cat = compile(repo.path(), &web()).unwrap();
            let r = cat.get(&ResourceId::new("User", "deploy")).unwrap();
            (r.sensitive, r.declaration_hash.clone())
        };
        let (by_field, by_field_hash) = hash("");
        let (whole, whole_hash) = hash("sensitive: true\n");
        assert!(by_field && whole);
        assert_ne!(by_field_hash, whole_hash);
    }
}

mod catalogue {
    use super::*;

    #[test]
    fn resources_come_after_what_they_require_and_their_parent_directory() {
        let repo = Repo::two_layers();
        repo.file(
            "base/all.yaml",
            &[
                file_doc("conf", "/etc/app/app.conf", "  content: x\n"),
                format!(
                    "{}requires: [File/conf]\n",
                    file_doc("other", "/srv/other", "")
                ),
                "datum: v1alpha1\ntype: Directory\nname: app\ndesired: {path: /etc/app}\n"
                    .to_owned(),
            ]
            .join("---\n"),
        );
        let cat = compile(repo.path(), &web()).unwrap();
        assert_eq!(ids(&cat), ["Directory[app]", "File[conf]", "File[other]"]);
        let conf = cat.get(&ResourceId::new("File", "conf")).unwrap();
        assert_eq!(conf.requires, [ResourceId::new("Directory", "app")]);
        let json = cat.to_json(datum_providers::registry(), false);
        assert_eq!(
            json["resources"][1]["autorequires"],
            serde_json::json!(["Directory[app]"])
        );
        assert_eq!(json["resources"][1]["requires"], serde_json::json!([]));
        assert_eq!(
            json["resources"][2]["requires"],
            serde_json::json!(["File[conf]"])
        );
    }

    #[test]
    fn things_being_removed_get_no_parent_directory_edge() {
        // Nor does a folder being removed serve as one: it comes after
        // what is removed inside it instead (see the next test).
        let repo = Repo::two_layers();
        repo.file(
            "base/all.yaml",
            &[
                file_doc("old", "/etc/app/old.conf", "  ensure: absent\n"),
                "datum: v1alpha1\ntype: Directory\nname: app\ndesired: {path: /etc/app}\n".to_owned(),
                file_doc("gone", "/srv/gone/x", "  ensure: absent\n"),
                "datum: v1alpha1\ntype: Directory\nname: gone\ndesired: {path: /srv/gone, ensure: absent}\n".to_owned(),
            ]
            .join("---\n"),
        );
        let cat = compile(repo.path(), &web()).unwrap();
        let auto: Vec<String> = cat
            .autorequires
            .iter()
            .map(|(from, to)| format!("{from} -> {to}"))
            .collect();
        assert_eq!(auto, ["Directory[gone] -> File[gone]"]);
        assert_eq!(
            ids(&cat),
            [
                "File[old]",
                "Directory[app]",
                "File[gone]",
                "Directory[gone]"
            ]
        );
    }

    #[test]
    fn a_folder_declared_absent_is_removed_after_what_is_removed_inside_it() {
        // Declared folder first: before, it was removed first, failed on
        // "not empty", and only a third pass converged.
        let repo = Repo::two_layers();
        repo.file(
            "base/all.yaml",
            &[
                "datum: v1alpha1\ntype: Directory\nname: gone\ndesired: {path: /srv/gone, ensure: absent}\n".to_owned(),
                "datum: v1alpha1\ntype: Directory\nname: sub\ndesired: {path: /srv/gone/sub, ensure: absent}\n".to_owned(),
                file_doc("x", "/srv/gone/sub/x", "  ensure: absent\n"),
                "datum: v1alpha1\ntype: Symlink\nname: ln\ndesired: {path: /srv/gone/ln, ensure: absent}\n".to_owned(),
            ]
            .join("---\n"),
        );
        let cat = compile(repo.path(), &web()).unwrap();
        assert_eq!(
            ids(&cat),
            [
                "File[x]",
                "Directory[sub]",
                "Symlink[ln]",
                "Directory[gone]"
            ]
        );
        // What is inside requiring the folder it is removed from is a cycle.
        repo.file(
            "base/all.yaml",
            &[
                "datum: v1alpha1\ntype: Directory\nname: gone\ndesired: {path: /srv/gone, ensure: absent}\n".to_owned(),
                file_doc("x", "/srv/gone/x", "  ensure: absent\n")
                    .replace("desired:", "requires: [Directory/gone]\ndesired:"),
            ]
            .join("---\n"),
        );
        let lines = repo.compile_errors(&web());
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0].contains("File[x]: dependency cycle: File[x] requires Directory[gone], which is declared absent"),
            "{lines:#?}"
        );
    }

    #[test]
    fn something_present_inside_a_folder_declared_absent_is_an_error() {
        let repo = Repo::two_layers();
        repo.file(
            "base/all.yaml",
            &[
                file_doc("x", "/srv/gone/sub/x", ""),
                "datum: v1alpha1\ntype: Directory\nname: gone\ndesired: {path: /srv/gone, ensure: absent}\n".to_owned(),
            ]
            .join("---\n"),
        );
        let lines = repo.compile_errors(&web());
        assert_eq!(
            lines,
            [
                "base/all.yaml:5:3: error: File[x]: `/srv/gone/sub/x` is declared present inside Directory[gone], which is declared absent"
            ]
        );
    }

    #[test]
    fn a_folder_requiring_what_is_inside_it_is_a_cycle() {
        // Directly, and through another resource.
        let repo = Repo::two_layers();
        repo.file(
            "base/all.yaml",
            &[
                "datum: v1alpha1\ntype: Directory\nname: app\nrequires: [File/conf]\ndesired: {path: /etc/app}\n".to_owned(),
                file_doc("conf", "/etc/app/app.conf", "  content: \"y\\n\"\n"),
                "datum: v1alpha1\ntype: Directory\nname: srv\nrequires: [File/other]\ndesired: {path: /srv/x}\n".to_owned(),
                file_doc("other", "/etc/other", "").replace("desired:", "requires: [File/inner]\ndesired:"),
                file_doc("inner", "/srv/x/inner", ""),
            ]
            .join("---\n"),
        );
        let lines = repo.compile_errors(&web());
        assert_eq!(
            lines,
            [
                "base/all.yaml:11:3: error: File[conf]: dependency cycle: Directory[app] requires File[conf], which is inside its folder (a folder is made before what is in it): remove that requirement",
                "base/all.yaml:31:3: error: File[inner]: dependency cycle: Directory[srv] requires File[inner], which is inside its folder (a folder is made before what is in it): remove that requirement",
            ]
        );
    }

    #[test]
    fn a_tree_entry_whose_host_path_is_longer_than_the_system_allows_is_refused() {
        // The tree's path and an entry's path in it, together, past
        // PATH_MAX (4095 bytes): the walk could make it, one name at a
        // time, but the first change to it failed for good (its old
        // content cannot be saved under that path), after the rest of the
        // tree was written. Refused at the source, naming the entry.
        let repo = Repo::two_layers();
        let rel: Vec<String> = (0..4).map(|i| format!("q{i}{}", "y".repeat(98))).collect();
        repo.file(
            &format!("base/trees/deep/{}/deep.conf", rel.join("/")),
            "x\n",
        );
        let tree_path = |levels: usize| {
            let parts: Vec<String> = (0..levels)
                .map(|i| format!("p{i:02}{}", "x".repeat(246)))
                .collect();
            format!("/{}/app", parts.join("/"))
        };
        let doc = |path: &str| {
            format!(
                "datum: v1alpha1\ntype: Tree\nname: deep\ndesired:\n  path: {path}\n  source: trees/deep\n"
            )
        };
        // 15 folders of 249 bytes, the tree, the entry: 4168 bytes.
        repo.file("base/all.yaml", &doc(&tree_path(15)));
        let lines = repo.compile_errors(&web());
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("base/all.yaml:6:3: error: Tree[deep]: the tree source: ")
                && lines[0].contains(&format!("\"{}/deep.conf\" is too deep", rel.join("/")))
                && lines[0].contains("would be 4168 bytes, more than the 4095"),
            "{lines:?}"
        );
        // Two folders fewer, it fits: compiled.
        repo.file("base/all.yaml", &doc(&tree_path(13)));
        assert!(compile(repo.path(), &web()).is_ok());
    }

    #[test]
    fn paths_inside_a_file_or_a_tree_are_errors_unless_the_tree_excludes_them() {
        // A Tree ships and (with purge) removes everything below its path but
        // what `exclude` leaves out; a File holds nothing. Another resource
        // there would be undone on every pass.
        let repo = Repo::two_layers();
        repo.file("base/trees/t/shipped.conf", "a = 1\n");
        repo.file(
            "base/all.yaml",
            &[
                file_doc("app", "/etc/app", "  content: \"x\\n\"\n"),
                file_doc("conf", "/etc/app/conf", ""),
                "datum: v1alpha1\ntype: Tree\nname: t\ndesired: {path: /etc/t, source: trees/t, purge: true, exclude: [\"local/\", \"*.local\"]}\n".to_owned(),
                file_doc("shipped", "/etc/t/shipped.conf", ""),
                file_doc("mine", "/etc/t/x.local", ""),
                "datum: v1alpha1\ntype: Directory\nname: local\ndesired: {path: /etc/t/local}\n".to_owned(),
                file_doc("deeper", "/etc/t/local/y", ""),
                "datum: v1alpha1\ntype: Tree\nname: nested\ndesired: {path: /etc/t/sub, source: trees/t}\n".to_owned(),
                file_doc("elsewhere", "/etc/tt/z", ""),
            ]
            .join("---\n"),
        );
        let lines = repo.compile_errors(&web());
        assert_eq!(
            lines,
            [
                "base/all.yaml:12:3: error: File[conf]: `/etc/app/conf` is declared inside File[app], a file, not a folder",
                "base/all.yaml:23:3: error: File[shipped]: `/etc/t/shipped.conf` is declared inside Tree[t], which manages everything below its path: ship `shipped.conf` in the tree's source, or leave it to this resource with the tree's `exclude`",
                "base/all.yaml:45:11: error: Tree[nested]: `/etc/t/sub` is declared inside Tree[t], which manages everything below its path: ship `sub` in the tree's source, or leave it to this resource with the tree's `exclude`",
            ]
        );
    }

    #[test]
    fn a_path_through_a_declared_link_is_refused_unless_the_boundary_follows_it() {
        // The walk never follows a link in a parent folder unless
        // `boundary.follow_links` lists it: a File below a declared Symlink
        // failed every apply while plan called it a create. Listed, the link
        // is a folder to what is below it: made first, whatever the order
        // of the documents.
        let docs = [
            file_doc("inside", "/etc/app/conf", "  content: \"x\\n\"\n"),
            "datum: v1alpha1\ntype: Symlink\nname: link\ndesired: {path: /etc/app, target: /etc/real}\n".to_owned(),
        ]
        .join("---\n");
        let repo = Repo::two_layers();
        repo.file("base/all.yaml", &docs);
        assert_eq!(
            repo.compile_errors(&web()),
            [
                "base/all.yaml:5:3: error: File[inside]: `/etc/app/conf` is declared inside Symlink[link], a symbolic link, and Datum does not follow links in parent folders: declare the path where the link points, or list `/etc/app` under `boundary.follow_links` in datum.yaml"
            ]
        );
        let followed = Repo::new(
            &TWO_LAYERS.replace("layers:", "boundary:\n  follow_links: [/etc/app]\nlayers:"),
        );
        followed.file("base/all.yaml", &docs);
        let cat = compile(followed.path(), &web()).unwrap();
        let auto: Vec<String> = cat
            .autorequires
            .iter()
            .map(|(from, to)| format!("{from} -> {to}"))
            .collect();
        assert_eq!(auto, ["File[inside] -> Symlink[link]"]);
        let order = ids(&cat);
        let at = |id: &str| order.iter().position(|x| x == id).unwrap();
        assert!(at("Symlink[link]") < at("File[inside]"), "{order:?}");
    }

    #[test]
    fn a_followed_link_comes_after_the_folder_declared_where_it_points() {
        // What is below a followed link is written in its target: the
        // Directory declared there (or above it) is made before the link,
        // so before what is below it, whatever the documents' order; an
        // absolute target from the root, a relative one from the link's
        // folder.
        for (target, dir) in [("/opt/real", "/opt/real"), ("../opt/real/sub", "/opt/real")] {
            let docs = [
                file_doc("inside", "/etc/app/conf", "  content: \"x\\n\"\n"),
                format!("datum: v1alpha1\ntype: Symlink\nname: link\ndesired: {{path: /etc/app, target: \"{target}\"}}\n"),
                format!("datum: v1alpha1\ntype: Directory\nname: real\ndesired: {{path: {dir}}}\n"),
            ]
            .join("---\n");
            let followed = Repo::new(
                &TWO_LAYERS.replace("layers:", "boundary:\n  follow_links: [/etc/app]\nlayers:"),
            );
            followed.file("base/all.yaml", &docs);
            let cat = compile(followed.path(), &web()).unwrap();
            let auto: Vec<String> = cat
                .autorequires
                .iter()
                .map(|(from, to)| format!("{from} -> {to}"))
                .collect();
            assert_eq!(
                auto,
                [
                    "File[inside] -> Symlink[link]",
                    "Symlink[link] -> Directory[real]"
                ],
                "{target}"
            );
            let order = ids(&cat);
            assert_eq!(
                order,
                ["Directory[real]", "Symlink[link]", "File[inside]"],
                "{target}"
            );
        }
    }

    #[test]
    fn a_path_present_below_a_link_declared_absent_is_refused_followed_or_not() {
        // The link is removed, so nothing can stay at a path through it:
        // written through it first (followed) it is gone with the link, and
        // unfollowed the walk refuses it; either way every pass fails it.
        let docs = [
            file_doc("inside", "/etc/app/conf", "  content: \"x\\n\"\n"),
            "datum: v1alpha1\ntype: Symlink\nname: link\ndesired: {path: /etc/app, ensure: absent}\n".to_owned(),
        ]
        .join("---\n");
        let want = "base/all.yaml:5:3: error: File[inside]: `/etc/app/conf` is declared present inside Symlink[link], which is declared absent";
        let repo = Repo::two_layers();
        repo.file("base/all.yaml", &docs);
        assert_eq!(repo.compile_errors(&web()), [want]);
        let followed = Repo::new(
            &TWO_LAYERS.replace("layers:", "boundary:\n  follow_links: [/etc/app]\nlayers:"),
        );
        followed.file("base/all.yaml", &docs);
        assert_eq!(followed.compile_errors(&web()), [want]);
    }

    #[test]
    fn what_a_tree_excludes_for_others_is_ordered_after_the_tree() {
        // The Tree makes its own folder: a resource declared in what its
        // `exclude` leaves out (a file, a folder, a Tree at an excluded
        // folder, matched by a folder-only rule) needs that folder first.
        // Unordered, a fresh host's first apply failed them on a missing
        // parent.
        let repo = Repo::two_layers();
        repo.file("base/trees/t/shipped.conf", "a = 1\n");
        repo.file(
            "base/all.yaml",
            &[
                file_doc("mine", "/etc/t/x.local", ""),
                "datum: v1alpha1\ntype: Directory\nname: local\ndesired: {path: /etc/t/local}\n".to_owned(),
                "datum: v1alpha1\ntype: Tree\nname: cache\ndesired: {path: /etc/t/cache, source: trees/t}\n".to_owned(),
                "datum: v1alpha1\ntype: Tree\nname: t\ndesired: {path: /etc/t, source: trees/t, purge: true, exclude: [\"local/\", \"*.local\", \"cache/\"]}\n".to_owned(),
            ]
            .join("---\n"),
        );
        assert!(repo.lint().is_empty(), "{:#?}", repo.lint());
        let cat = compile(repo.path(), &web()).unwrap();
        let mut auto: Vec<String> = cat
            .autorequires
            .iter()
            .map(|(from, to)| format!("{from} -> {to}"))
            .collect();
        auto.sort();
        assert_eq!(
            auto,
            [
                "Directory[local] -> Tree[t]",
                "File[mine] -> Tree[t]",
                "Tree[cache] -> Tree[t]"
            ]
        );
        assert_eq!(ids(&cat)[0], "Tree[t]");
    }

    #[test]
    fn each_path_inside_an_absent_folder_is_found_whatever_came_before_it() {
        // Files of one folder in a row, another folder's between them, then
        // the first folder again: each answer is about its own folder.
        let repo = Repo::two_layers();
        repo.file(
            "base/all.yaml",
            &[
                file_doc("a", "/srv/gone/sub/a", ""),
                file_doc("b", "/srv/gone/sub/b", ""),
                file_doc("c", "/srv/kept/c", ""),
                file_doc("d", "/srv/gone/sub/d", ""),
                file_doc("e", "/srv/kept/e", ""),
                "datum: v1alpha1\ntype: Directory\nname: gone\ndesired: {path: /srv/gone, ensure: absent}\n".to_owned(),
                "datum: v1alpha1\ntype: Directory\nname: kept\ndesired: {path: /srv/kept}\n".to_owned(),
            ]
            .join("---\n"),
        );
        let lines = repo.compile_errors(&web());
        let inside = |name: &str| {
            format!(
                "File[{name}]: `/srv/gone/sub/{name}` is declared present inside Directory[gone]"
            )
        };
        assert_eq!(lines.len(), 3, "{lines:#?}");
        for (line, name) in lines.iter().zip(["a", "b", "d"]) {
            assert!(line.contains(&inside(name)), "{line}");
        }
    }

    #[test]
    fn json_shows_checksums_never_content_and_explains_fields() {
        let repo = Repo::two_layers();
        repo.file(
            "base/secret.yaml",
            &format!(
                "{}sensitive: true\n",
                file_doc(
                    "token",
                    "/etc/token",
                    "  content: CANARY-s3cret\n  mode: \"0600\"\n"
                )
            ),
        );
        let cat = datum_catalog::compile_explained(repo.path(), &web()).unwrap();
        let plain =
            serde_json::to_string(&cat.to_json(datum_providers::registry(), false)).unwrap();
        let explained = cat.to_json(datum_providers::registry(), true);
        // Without asking for explanations, none are recorded.
        let lean = compile(repo.path(), &web()).unwrap();
        assert!(lean.resources[0].field_origins.is_empty());
        assert!(!plain.contains("CANARY"));
        assert!(!explained.to_string().contains("CANARY"));
        let r = &explained["resources"][0];
        assert_eq!(r["id"], "File[token]");
        // A sensitive file's checksum would confirm a guessed secret: none
        // without the host's key (the CLI passes it; see datum_core::digest).
        assert!(r["content_sha256"].is_null(), "{r}");
        assert!(r["content_digest"].is_null(), "{r}");
        let sha = datum_core::sha256_hex(b"CANARY-s3cret");
        assert!(!plain.contains(&sha) && !explained.to_string().contains(&sha));
        assert_eq!(r["origin"], "base/secret.yaml:1:1");
        assert_eq!(
            r["fields"]["mode"],
            serde_json::json!({"layer": "base", "origin": "base/secret.yaml:7:3"})
        );
        assert_eq!(r["fields"]["sensitive"]["origin"], "base/secret.yaml:8:12");
        assert!(
            plain.contains("\"host\":{\"labels\":{\"role\":\"web\"},\"name\":\"web-01\"}")
                || plain.contains("\"name\":\"web-01\"")
        );
        assert!(
            r.get("fields").is_some()
                && cat.to_json(datum_providers::registry(), false)["resources"][0]
                    .get("fields")
                    .is_none()
        );
    }

    #[test]
    fn the_same_repository_always_gives_byte_identical_json() {
        let build = |reverse: bool| {
            let repo = Repo::two_layers();
            let mut files: Vec<(String, String)> = (0..20)
                .map(|i| {
                    (
                        format!("base/f{i:02}.yaml"),
                        file_doc(
                            &format!("f{i}"),
                            &format!("/etc/d{}/f{i}", i % 3),
                            "  content: x\n  mode: \"0644\"\n",
                        ),
                    )
                })
                .collect();
            files.push((
                "base/dirs.yaml".to_owned(),
                (0..3)
                    .map(|d| format!("datum: v1alpha1\ntype: Directory\nname: d{d}\ndesired: {{path: /etc/d{d}}}\n"))
                    .collect::<Vec<_>>()
                    .join("---\n"),
            ));
            if reverse {
                files.reverse();
            }
            for (p, t) in &files {
                repo.file(p, t);
            }
            let cat = datum_catalog::compile_explained(repo.path(), &web()).unwrap();
            let pretty =
                serde_json::to_string_pretty(&cat.to_json(datum_providers::registry(), true))
                    .unwrap();
            // Streamed one resource at a time: the very same bytes, with
            // explanations and without.
            for explain in [true, false] {
                let mut streamed = Vec::new();
                cat.write_json_pretty(datum_providers::registry(), explain, &mut streamed)
                    .unwrap();
                let whole = serde_json::to_string_pretty(
                    &cat.to_json(datum_providers::registry(), explain),
                )
                .unwrap();
                assert_eq!(String::from_utf8(streamed).unwrap(), whole);
            }
            pretty.replace(&repo.path().display().to_string(), "")
        };
        let a = build(false);
        assert_eq!(a, build(false));
        assert_eq!(a, build(true));
    }

    #[test]
    fn two_thousand_files_compile_with_each_after_its_directory() {
        let repo = Repo::two_layers();
        let mut docs = Vec::new();
        for d in 0..20 {
            docs.push(format!(
                "datum: v1alpha1\ntype: Directory\nname: d{d}\ndesired: {{path: /srv/d{d}}}\n"
            ));
        }
        for i in 0..2000 {
            docs.push(file_doc(
                &format!("f{i}"),
                &format!("/srv/d{}/f{i}", i % 20),
                &format!("  content: \"file {i}\\n\"\n  mode: \"0644\"\n"),
            ));
        }
        // Directories declared last: ordering must still put them first.
        docs.rotate_left(20);
        repo.file("base/all.yaml", &docs.join("---\n"));
        let cat = compile(repo.path(), &web()).unwrap();
        assert_eq!(cat.resources.len(), 2020);
        assert_eq!(cat.autorequires.len(), 2000);
        // Ties keep declaration order, so each directory comes just in time:
        // Directory[d0], then the files in it that were declared first.
        assert_eq!(ids(&cat)[..3], ["Directory[d0]", "File[f0]", "File[f20]"]);
        let at = |id: &ResourceId| cat.resources.iter().position(|r| &r.id == id).unwrap();
        for (i, r) in cat.resources.iter().enumerate() {
            for req in &r.requires {
                assert!(at(req) < i, "{} before {req}", r.id);
            }
        }
        assert_eq!(
            content_bytes(cat.resources[1].content.as_ref().unwrap()),
            b"file 0\n"
        );
    }

    #[test]
    fn declaration_hash_follows_the_declaration_not_the_layout() {
        let one = Repo::two_layers();
        one.file("base/a.yaml", &file_doc("a", "/a", "  content: x\n"));
        let two = Repo::two_layers();
        two.file(
            "base/sub/z.yaml",
            &format!("# moved\n{}", file_doc("a", "/a", "  content: x\n")),
        );
        let h = |r: &Repo| {
            compile(r.path(), &web()).unwrap().resources[0]
                .declaration_hash
                .clone()
        };
        assert_eq!(h(&one), h(&two));
        let three = Repo::two_layers();
        three.file("base/a.yaml", &file_doc("a", "/a", "  content: y\n"));
        assert_ne!(h(&one), h(&three));
    }

    #[test]
    fn the_shipped_example_lints_clean_and_compiles_for_both_hosts() {
        let dir = example_dir();
        let diags = lint(&dir, None);
        assert!(diags.is_empty(), "{}", diags.render(false));
        for host_file in ["hosts/web-01.yaml", "hosts/db-01.yaml"] {
            let host =
                HostIdentity::load(Path::new("/nonexistent"), Some(&dir.join(host_file)), &[])
                    .unwrap();
            let cat = compile(&dir, &host).unwrap_or_else(|d| panic!("{}", d.render(false)));
            assert!(!cat.resources.is_empty());
            // Every resource comes after everything it requires.
            for (i, r) in cat.resources.iter().enumerate() {
                for req in &r.requires {
                    let at = cat.resources.iter().position(|x| &x.id == req).unwrap();
                    assert!(at < i, "{} before its requirement {req}", r.id);
                }
            }
        }
    }
}

mod lint_errors {
    use super::*;

    fn single(repo: &Repo) -> String {
        let lines = repo.lint();
        assert_eq!(lines.len(), 1, "{lines:#?}");
        lines.into_iter().next().unwrap()
    }

    /// The errors of a compile for web-01 that must fail, rendered as
    /// `datum` prints them: none shows any of `hidden`, each of `places`
    /// is named.
    #[track_caller]
    fn errors_hiding(repo: &Repo, hidden: &[&str], places: &[&str]) -> String {
        let text = compile(repo.path(), &web()).unwrap_err().render(false);
        for secret in hidden {
            assert!(!text.contains(secret), "{secret} shown:\n{text}");
        }
        for place in places {
            assert!(text.contains(place), "{place} missing:\n{text}");
        }
        text
    }

    /// A File `pin` declared sensitive in base, and `web`'s `override_` of it.
    fn sensitive_pin_overridden(override_: &str) -> Repo {
        let repo = Repo::two_layers();
        repo.file(
            "base/pin.yaml",
            "datum: v1alpha1\ntype: File\nname: pin\nsensitive: true\ndesired:\n  path: /etc/pin\n  content: x\n",
        );
        repo.file("web/pin.yaml", override_);
        repo
    }

    /// A class problem points at the line of what is wrong (the field's
    /// value; its message names the key too).
    #[test]
    fn class_errors_point_at_their_line_in_datum_yaml() {
        let repo = Repo::new(
            "datum: v1alpha1\nlayers:\n  - {name: base, path: base, match: {}}\nclasses:\n  critical:\n    interval: banana\n  other: {policy: revert, colour: red}\n",
        );
        repo.file("base/ok.yaml", &file_doc("ok", "/etc/ok", ""));
        let lines = repo.lint();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines[0].starts_with("datum.yaml:6:15: error: datum.yaml: classes.critical.interval"),
            "{lines:#?}"
        );
        assert!(
            lines[1].starts_with("datum.yaml:7:35: error: datum.yaml: classes.other.colour"),
            "{lines:#?}"
        );
    }

    /// A manifest, or a folder of them, whose name is not UTF-8 is refused
    /// by name: skipped, its resources were left out of every catalogue
    /// with a clean lint. Other such files (not manifests) stay ignored.
    #[test]
    fn names_that_are_not_utf8_are_refused_where_manifests_would_be_left_out() {
        use std::os::unix::ffi::OsStrExt as _;
        let repo = Repo::two_layers();
        repo.file("base/ok.yaml", &file_doc("ok", "/etc/ok", ""));
        let base = repo.path().join("base");
        let name = |bytes: &[u8]| base.join(std::ffi::OsStr::from_bytes(bytes));
        std::fs::write(name(b"caf\xe9.yaml"), file_doc("a", "/etc/a", "")).unwrap();
        std::fs::create_dir(name(b"sub\xe9")).unwrap();
        std::fs::write(name(b"sub\xe9").join("m.yaml"), file_doc("b", "/etc/b", "")).unwrap();
        std::fs::write(name(b"notes\xe9.txt"), "not a manifest\n").unwrap();
        let lines = repo.lint();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines
                .iter()
                .any(|l| l.contains("manifest base/caf\u{fffd}.yaml has a name that is not UTF-8")),
            "{lines:#?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("folder base/sub\u{fffd} has a name that is not UTF-8")),
            "{lines:#?}"
        );
        assert!(compile(repo.path(), &web()).is_err());
    }

    /// A sensitive resource's template or content may hold the secret on
    /// the very line an error is about: the error says where, never shows
    /// the line. The same errors of an ordinary resource show it.
    #[test]
    fn a_sensitive_resources_template_and_content_errors_point_at_lines_never_show_them() {
        let repo = Repo::two_layers();
        let template = |name: &str, sensitive: bool, file: &str| {
            format!(
                "datum: v1alpha1\ntype: File\nname: {name}\nsensitive: {sensitive}\ndesired:\n  path: /etc/{name}.conf\n  template: templates/{file}\n"
            )
        };
        repo.file(
            "base/templates/db.j2",
            "db_password=CANARY-RENDER region={{ host.labels.region }}\n",
        );
        repo.file("base/templates/broken.j2", "token=CANARY-SYNTAX {{ oops \n");
        repo.file(
            "base/templates/open.j2",
            "VISIBLE-LINE region={{ host.labels.region }}\n",
        );
        repo.file(
            "base/all.yaml",
            &[
                template("db", true, "db.j2"),
                template("broken", true, "broken.j2"),
                "datum: v1alpha1\ntype: File\nname: pin\nsensitive: true\ndesired:\n  path: /etc/pin\n  content: 918273645546\n".to_owned(),
                template("open", false, "open.j2"),
            ]
            .join("---\n"),
        );
        // Each is still reported where it is.
        let text = errors_hiding(
            &repo,
            &["CANARY-RENDER", "CANARY-SYNTAX", "918273645546"],
            &[
                "base/templates/db.j2:1:",
                "base/templates/broken.j2:1:",
                "base/all.yaml:23:",
            ],
        );
        assert!(text.contains("VISIBLE-LINE"), "{text}");
    }

    /// A User's password hash makes the whole resource sensitive: an error
    /// about another field written on the hash's line (a flow mapping), in
    /// the merged resource or in a layer's override, and a syntax error in a
    /// file that holds a hash, point at their lines and never show them. An
    /// ordinary resource's flow mapping still shows its line.
    #[test]
    fn a_password_hash_on_the_line_of_another_error_is_never_shown() {
        let repo = Repo::two_layers();
        repo.file(
            "base/users.yaml",
            "datum: v1alpha1\ntype: User\nname: deploy\ndesired: {password_hash: \"$6$s$CANARY-FLOW\", uid: x}\n---\ndatum: v1alpha1\ntype: User\nname: ops\ndesired: {password_hash: \"$6$s$CANARY-BASE\"}\n---\ndatum: v1alpha1\ntype: Group\nname: open\ndesired: {gid: VISIBLE-LINE}\n",
        );
        repo.file(
            "web/users.yaml",
            "datum: v1alpha1\ntype: User\nname: ops\ndesired: {password_hash: \"$6$s$CANARY-OVERRIDE\", shell: rel}\n",
        );
        repo.file(
            "base/broken.yaml",
            "datum: v1alpha1\ntype: User\nname: broken\ndesired:\n  password_hash: \"$6$s$CANARY-SYNTAX\" x\n",
        );
        let text = errors_hiding(
            &repo,
            &["CANARY-FLOW", "CANARY-OVERRIDE", "CANARY-SYNTAX"],
            &[
                "base/users.yaml:4:",
                "web/users.yaml:4:",
                "base/broken.yaml:5:",
            ],
        );
        assert!(text.contains("VISIBLE-LINE"), "{text}");
    }

    /// A path error (two resources at one path, a path in Datum's own
    /// folder, a removal cycle) points at the path field: a sensitive
    /// resource written as a flow mapping holds its content on that line,
    /// so the line is never shown; an ordinary resource's still is.
    #[test]
    fn a_path_error_never_shows_the_line_of_a_sensitive_resource() {
        let repo = Repo::two_layers();
        repo.file(
            "base/paths.yaml",
            &[
                "datum: v1alpha1\ntype: File\nname: own\nsensitive: true\ndesired: {path: /var/lib/datum/x, content: canary-7f3a-own}\n".to_owned(),
                "datum: v1alpha1\ntype: File\nname: first\ndesired:\n  path: /etc/twice\n  content: x\n".to_owned(),
                "datum: v1alpha1\ntype: File\nname: twice\nsensitive: true\ndesired: {path: /etc/twice, content: canary-7f3a-twice}\n".to_owned(),
                "datum: v1alpha1\ntype: User\nname: deploy\ndesired: {password_hash: \"$6$s$canary-7f3a-hash\", home: /var/lib/datum/h}\n".to_owned(),
                "datum: v1alpha1\ntype: File\nname: open\ndesired: {path: /var/lib/datum/VISIBLE-LINE, content: y}\n".to_owned(),
            ]
            .join("---\n"),
        );
        let text = errors_hiding(
            &repo,
            &["canary-7f3a"],
            &["base/paths.yaml:5:", "base/paths.yaml:18:"],
        );
        assert!(text.contains("content: y}"), "{text}");
    }

    /// Every value of a resource declared sensitive is hidden, not only its
    /// content: a field error names the field and the line, never the
    /// value, in the message as well as in the source line (the message
    /// quoted it: `` `mode` "canary…" is not an octal mode ``). A resource
    /// sensitive through one field (a User's `password_hash`) still has its
    /// other values quoted.
    #[test]
    fn a_field_error_of_a_sensitive_resource_never_quotes_its_value() {
        let repo = Repo::two_layers();
        repo.file(
            "base/secret.yaml",
            &[
                "datum: v1alpha1\ntype: File\nname: s\nsensitive: true\ndesired:\n  path: /etc/s\n  mode: \"canary-7f3a-mode\"\n  owner: \"canary-7f3a owner\"\n  content: x\n".to_owned(),
                "datum: v1alpha1\ntype: User\nname: u\ndesired:\n  password_hash: \"$6$s$canary-7f3a-hash\"\n  gid: \"VISIBLE grp\"\n".to_owned(),
            ]
            .join("---\n"),
        );
        let text = errors_hiding(
            &repo,
            &["canary-7f3a"],
            &[
                "`mode`",
                "`owner`",
                "base/secret.yaml:7:",
                "base/secret.yaml:8:",
            ],
        );
        assert!(text.contains("`VISIBLE grp`"), "{text}");
    }

    /// An override in another layer of a resource its base declares
    /// sensitive is sensitive too: an error on its flow mapping's line
    /// never shows the content written beside it.
    #[test]
    fn an_override_of_a_sensitive_resource_never_shows_its_line() {
        let repo = sensitive_pin_overridden(
            "datum: v1alpha1\ntype: File\nname: pin\ndesired: {content: canary-7f3a-override, mode: bad}\n",
        );
        errors_hiding(&repo, &["canary-7f3a"], &["web/pin.yaml:4:"]);
    }

    /// A sensitive resource written as one flow mapping holds its content
    /// on the line of every one of its errors (an unknown requirement, a
    /// bad class): none shows that line.
    #[test]
    fn a_sensitive_resource_on_one_line_never_shows_it() {
        let repo = Repo::two_layers();
        repo.file(
            "base/one.yaml",
            "{datum: v1alpha1, type: File, name: one, sensitive: true, requires: [File/nope], desired: {path: /etc/one, content: canary-7f3a-one}}\n",
        );
        repo.file(
            "base/user.yaml",
            "{datum: v1alpha1, type: User, name: u, requires: [File/gone], desired: {password_hash: \"$6$s$canary-7f3a-hash\"}}\n",
        );
        errors_hiding(
            &repo,
            &["canary-7f3a"],
            &["base/one.yaml:1:", "base/user.yaml:1:"],
        );
    }

    /// A file that cannot be parsed may be another layer's override of a
    /// resource declared sensitive elsewhere: its syntax error points at
    /// its line and never shows it. A broken file naming nothing sensitive
    /// still shows its line.
    #[test]
    fn a_broken_override_of_a_sensitive_resource_never_shows_its_line() {
        let repo = sensitive_pin_overridden(
            "datum: v1alpha1\ntype: File\nname: pin\ndesired:\n  content: \"canary-7f3a-syntax\" x\n",
        );
        repo.file(
            "web/open.yaml",
            "datum: v1alpha1\ntype: File\nname: open\ndesired:\n  content: \"VISIBLE-LINE\" x\n",
        );
        let text = errors_hiding(&repo, &["canary-7f3a"], &["web/pin.yaml:5:"]);
        assert!(text.contains("VISIBLE-LINE"), "{text}");
    }

    /// Datum's own folder is not for the repository: a Directory there (its
    /// mode would open the private folder), a File over the state store, a
    /// Tree at the folder are refused at their path; a folder beside it, or
    /// `/var/lib` itself, is not.
    #[test]
    fn nothing_may_be_declared_in_datums_own_folder() {
        let repo = Repo::two_layers();
        repo.file(
            "base/own.yaml",
            &[
                "datum: v1alpha1\ntype: Directory\nname: own\ndesired:\n  path: /var/lib/datum\n  mode: \"0755\"\n".to_owned(),
                file_doc("store", "/var/lib/datum/state.db", "  content: x\n"),
                file_doc("beside", "/var/lib/datum-other/x", "  content: x\n"),
                "datum: v1alpha1\ntype: Directory\nname: lib\ndesired:\n  path: /var/lib\n".to_owned(),
            ]
            .join("---\n"),
        );
        let lines = repo.compile_errors(&web());
        let refused: Vec<&str> = lines
            .iter()
            .filter(|l| l.contains("Datum's own folder"))
            .map(|l| {
                l.split("error: ")
                    .nth(1)
                    .unwrap()
                    .split(']')
                    .next()
                    .unwrap()
            })
            .collect();
        assert_eq!(refused, ["Directory[own", "File[store"], "{lines:#?}");
        assert_eq!(lines.len(), 2, "{lines:#?}");
    }

    /// A content field that is not a string is one mistake: one error, at
    /// the value, without its line (the value may be a secret), whether the
    /// resource is declared once or overridden by another layer. The
    /// provider's own wording of it used to follow, with the line.
    #[test]
    fn content_that_is_not_a_string_is_one_error_without_its_line() {
        let repo = Repo::two_layers();
        repo.file(
            "base/files.yaml",
            &[
                file_doc("once", "/etc/once", "  content: 424242\n"),
                file_doc("twice", "/etc/twice", "  content: ok\n"),
            ]
            .join("---\n"),
        );
        repo.file(
            "web/files.yaml",
            &file_doc("twice", "/etc/twice", "  content: [717171]\n"),
        );
        let text = errors_hiding(&repo, &["424242", "717171"], &[]);
        assert_eq!(
            text.matches("`content` must be a string").count(),
            2,
            "{text}"
        );
        assert!(
            text.contains("File[once]: `content` must be a string, found an integer"),
            "{text}"
        );
        assert!(
            text.contains("File[twice]: `content` must be a string, found a list"),
            "{text}"
        );
    }

    /// Enough resources that they are checked in stretches on every core:
    /// every problem is found once, at its line, whichever stretch had it
    /// (and printed in the order of the file, as every diagnostic is).
    #[test]
    fn field_problems_of_many_resources_are_each_found_once_at_their_line() {
        let repo = Repo::two_layers();
        let bad = [7, 150, 299, 300];
        let docs: Vec<String> = (0..400)
            .map(|i| {
                let mode = if bad.contains(&i) {
                    "  mode: \"banana\"\n"
                } else {
                    ""
                };
                file_doc(
                    &format!("f{i}"),
                    &format!("/etc/f{i}"),
                    &format!("  content: x\n{mode}"),
                )
            })
            .collect();
        repo.file("base/many.yaml", &docs.join("---\n"));
        for lines in [repo.lint(), repo.lint_for(&web())] {
            let named: Vec<&str> = lines
                .iter()
                .map(|l| {
                    assert!(l.contains("is not an octal mode"), "{l}");
                    l.split("File[")
                        .nth(1)
                        .and_then(|r| r.split(']').next())
                        .unwrap()
                })
                .collect();
            assert_eq!(named, ["f7", "f150", "f299", "f300"], "{lines:#?}");
            // Each at its own document's `mode:` line: 150 documents of 7 lines
            // before it (`---` included), f7's one more, and its 7th line.
            let at = format!("base/many.yaml:{}:3:", 150 * 7 + 1 + 7);
            assert!(lines[1].starts_with(&at), "{}", lines[1]);
        }
    }

    #[test]
    fn yaml_syntax_errors() {
        let repo = Repo::two_layers();
        repo.file("base/a.yaml", "datum: v1alpha1\ntype: File\nname: [a\n");
        let line = single(&repo);
        assert!(
            line.starts_with("base/a.yaml:3:9: error: YAML syntax error"),
            "{line}"
        );
    }

    #[test]
    fn missing_and_unknown_versions() {
        let repo = Repo::two_layers();
        repo.file("base/a.yaml", "type: File\nname: a\ndesired: {path: /a}\n")
            .file(
                "base/b.yaml",
                "datum: v1\ntype: File\nname: b\ndesired: {path: /b}\n",
            );
        assert_eq!(
            repo.lint(),
            [
                "base/a.yaml:1:1: error: File[a]: missing `datum: v1alpha1` (the format version)",
                "base/b.yaml:1:8: error: File[b]: unsupported format version `v1`: this Datum reads `v1alpha1`",
            ]
        );
    }

    #[test]
    fn unknown_types_suggest_the_right_spelling() {
        let repo = Repo::two_layers();
        repo.file(
            "base/a.yaml",
            "datum: v1alpha1\ntype: file\nname: a\ndesired: {path: /a}\n",
        );
        assert_eq!(
            single(&repo),
            "base/a.yaml:2:7: error: file[a]: unknown type `file`; did you mean `File`?"
        );
    }

    #[test]
    fn unknown_fields_point_at_the_key() {
        let repo = Repo::two_layers();
        repo.file(
            "base/ssh.yaml",
            "datum: v1alpha1\ntype: File\nname: sshd-config\ndesired:\n    path: /etc/ssh/sshd_config\n    mode: \"0600\"\n    mdoe: \"0600\"\n",
        );
        let line = single(&repo);
        assert!(
            line.starts_with("base/ssh.yaml:7:5: error: File[sshd-config]: unknown field `mdoe`"),
            "{line}"
        );
        let rendered = lint(repo.path(), None).render(false);
        assert!(rendered.contains(" --> base/ssh.yaml:7:5\n"), "{rendered}");
        assert!(
            rendered.contains("7 |     mdoe: \"0600\"\n  |     ^^^^^^^^^^^^\n"),
            "{rendered}"
        );
    }

    #[test]
    fn wrong_value_types_and_bad_modes_point_at_the_field() {
        let repo = Repo::two_layers();
        repo.file(
            "base/a.yaml",
            &file_doc("a", "/a", "  mode: \"0999\"\n  ensure: [present]\n"),
        );
        let lines = repo.lint();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines[0].starts_with("base/a.yaml:6:3: error: File[a]: `mode`"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("base/a.yaml:7:3: error: File[a]: `ensure`"),
            "{lines:?}"
        );
    }

    #[test]
    fn every_bad_field_of_many_resources_is_reported_once_at_its_line() {
        // 600 resources (more than the compile's per-core stretches start
        // at): every bad mode is reported once, at its own line, by lint and
        // by the host's compile alike.
        let repo = Repo::two_layers();
        let docs: Vec<String> = (0..600)
            .map(|i| {
                let mode = if i % 100 == 42 { "0999" } else { "0644" };
                file_doc(
                    &format!("f{i:03}"),
                    &format!("/f{i}"),
                    &format!("  mode: \"{mode}\"\n"),
                )
            })
            .collect();
        repo.file("base/all.yaml", &docs.join("---\n"));
        let compiled: Vec<String> = compile(repo.path(), &web())
            .unwrap_err()
            .iter()
            .map(|d| d.one_line())
            .collect();
        for lines in [repo.lint(), compiled] {
            assert_eq!(lines.len(), 6, "{lines:#?}");
            for (k, line) in lines.iter().enumerate() {
                let i = k * 100 + 42;
                // Seven lines a document with its separator; `mode` on the sixth.
                let at = format!(
                    "base/all.yaml:{}:3: error: File[f{i:03}]: `mode`",
                    i * 7 + 6
                );
                assert!(line.starts_with(&at), "{line} (wanted {at})");
            }
        }
    }

    #[test]
    fn missing_required_fields_point_at_desired() {
        let repo = Repo::two_layers();
        repo.file(
            "base/a.yaml",
            "datum: v1alpha1\ntype: File\nname: a\ndesired:\n  mode: \"0644\"\n",
        );
        let line = single(&repo);
        assert!(
            line.starts_with("base/a.yaml:4:1: error: File[a]: "),
            "{line}"
        );
        assert!(line.contains("`path`"), "{line}");
    }

    #[test]
    fn an_override_may_leave_required_fields_to_an_earlier_layer() {
        let repo = Repo::two_layers();
        repo.file("base/a.yaml", &file_doc("a", "/a", "")).file(
            "web/a.yaml",
            "datum: v1alpha1\ntype: File\nname: a\ndesired: {mode: \"0600\"}\n",
        );
        assert_eq!(repo.lint(), Vec::<String>::new());
    }

    #[test]
    fn layers_that_never_meet_may_contradict_each_other() {
        let repo = Repo::new(
            "datum: v1alpha1\nlayers:\n  - {name: base, path: base}\n  - {name: web, path: web, match: {role: web}}\n  - {name: db, path: db, match: {role: db}}\n",
        );
        repo.file("base/a.yaml", &file_doc("a", "/a", ""))
            .file(
                "web/a.yaml",
                "datum: v1alpha1\ntype: File\nname: a\ndesired: {ensure: absent}\n",
            )
            .file(
                "db/a.yaml",
                "datum: v1alpha1\ntype: File\nname: a\ndesired: {content: x}\n",
            );
        assert_eq!(repo.lint(), Vec::<String>::new());
        assert!(compile(repo.path(), &web()).is_ok());
        assert!(compile(repo.path(), &host("db-01", &[("role", "db")])).is_ok());
    }

    #[test]
    fn duplicate_names_in_one_layer() {
        let repo = Repo::two_layers();
        repo.file("base/a.yaml", &file_doc("a", "/a", "")).file(
            "base/b.yaml",
            &format!("# two\n{}", file_doc("a", "/b", "")),
        );
        assert_eq!(
            single(&repo),
            "base/b.yaml:4:7: error: File[a]: duplicate name: File[a] is already declared in layer `base` at base/a.yaml:3:7"
        );
    }

    #[test]
    fn requires_naming_nothing() {
        let repo = Repo::two_layers();
        repo.file(
            "base/a.yaml",
            &format!("{}requires:\n  - File/nope\n", file_doc("a", "/a", "")),
        );
        assert_eq!(
            single(&repo),
            "base/a.yaml:7:5: error: File[a]: requires File[nope], which is not declared anywhere in the repository"
        );
    }

    #[test]
    fn misspelt_references_and_keys_get_a_suggestion() {
        let repo = Repo::two_layers();
        repo.file(
            "base/ssh.yaml",
            &file_doc("sshd-config", "/etc/ssh/sshd_config", ""),
        )
        .file(
            "base/a.yaml",
            &format!(
                "{}requries: [File/sshd_config]\nrequires: [Fiel/sshd-config]\n",
                file_doc("a", "/a", "")
            ),
        );
        let lines = repo.lint();
        assert_eq!(
            lines,
            [
                "base/a.yaml:6:1: error: File[a]: unknown key `requries` in the document; did you mean `requires`?",
                "base/a.yaml:7:12: error: File[a]: requires Fiel[sshd-config], which is not declared anywhere in the repository; did you mean File[sshd-config]?",
            ]
        );
    }

    #[test]
    fn requires_of_another_hosts_layer_fail_to_compile_for_this_host() {
        let repo = Repo::two_layers();
        repo.file("web/n.yaml", &file_doc("nginx", "/n", "")).file(
            "base/a.yaml",
            &format!("{}requires: [File/nginx]\n", file_doc("a", "/a", "")),
        );
        assert!(repo.lint().is_empty());
        assert_eq!(
            repo.compile_errors(&host("db-01", &[])),
            [
                "base/a.yaml:6:12: error: File[a]: requires File[nginx], which is not in the catalogue of host `db-01` (its layers do not match this host)"
            ]
        );
    }

    #[test]
    fn dependency_cycles_are_named() {
        let repo = Repo::two_layers();
        repo.file(
            "base/a.yaml",
            &format!("{}requires: [File/b]\n", file_doc("a", "/a", "")),
        )
        .file(
            "base/b.yaml",
            &format!("{}requires: [File/a]\n", file_doc("b", "/b", "")),
        );
        assert_eq!(
            single(&repo),
            "base/a.yaml:6:12: error: File[a]: dependency cycle: File[a] -> File[b] -> File[a]"
        );
        assert!(compile(repo.path(), &web()).is_err());
    }

    #[test]
    fn content_paths_that_escape_the_repository() {
        let repo = Repo::two_layers();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("shadow"), "root:x").unwrap();
        std::fs::create_dir_all(repo.path().join("base/files")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("shadow"),
            repo.path().join("base/files/link"),
        )
        .unwrap();
        repo.file(
            "base/a.yaml",
            &file_doc("a", "/a", "  source: ../../etc/shadow\n"),
        )
        .file(
            "base/b.yaml",
            &file_doc("b", "/b", "  source: /etc/shadow\n"),
        )
        .file(
            "base/c.yaml",
            &file_doc("c", "/c", "  template: files/link\n"),
        )
        .file(
            "base/d.yaml",
            &file_doc("d", "/d", "  source: files/nope\n"),
        );
        let lines = repo.lint();
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert_eq!(
            lines[0],
            "base/a.yaml:6:11: error: File[a]: `source`: `../../etc/shadow` leaves the repository through `..`"
        );
        assert_eq!(
            lines[1],
            "base/b.yaml:6:11: error: File[b]: `source`: `/etc/shadow` is an absolute path: write a path relative to the layer folder"
        );
        assert!(
            lines[2].starts_with(
                "base/c.yaml:6:13: error: File[c]: `template`: `files/link` resolves to "
            ),
            "{}",
            lines[2]
        );
        assert!(
            lines[2].ends_with("through a symbolic link, outside the repository"),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].starts_with(
                "base/d.yaml:6:11: error: File[d]: `source`: `files/nope` does not exist"
            ),
            "{}",
            lines[3]
        );
    }

    #[test]
    fn content_paths_checked_in_parallel_are_each_reported_at_their_document() {
        // 600 documents: their content paths are resolved in a stretch per
        // core, each with its own folder caches; every problem is still
        // found, once, at its own document, and the good paths resolve.
        let repo = Repo::two_layers();
        for d in 0..3 {
            repo.file(&format!("base/files/d{d}/ok"), "fine\n");
        }
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("x"), "secret").unwrap();
        std::os::unix::fs::symlink(outside.path(), repo.path().join("base/files/out")).unwrap();
        let source = |i: usize| match i % 100 {
            7 => "files/d1/nope".to_owned(),
            51 => "files/out/x".to_owned(),
            99 => "../../x".to_owned(),
            _ => format!("files/d{}/ok", i % 3),
        };
        let docs: Vec<String> = (0..600)
            .map(|i| {
                file_doc(
                    &format!("f{i:03}"),
                    &format!("/f{i}"),
                    &format!("  source: {}\n", source(i)),
                )
            })
            .collect();
        repo.file("base/all.yaml", &docs.join("---\n"));
        let lines = repo.lint();
        assert_eq!(lines.len(), 18, "{lines:#?}");
        for (i, line) in (0..600)
            .filter(|i| [7, 51, 99].contains(&(i % 100)))
            .zip(&lines)
        {
            // Each document is 7 lines with its separator; `source` is on
            // its sixth.
            let at = format!(
                "base/all.yaml:{}:11: error: File[f{i:03}]: `source`: ",
                i * 7 + 6
            );
            assert!(line.starts_with(&at), "{line} (wanted {at})");
            let why = match i % 100 {
                7 => "does not exist",
                51 => "outside the repository",
                _ => "leaves the repository",
            };
            assert!(line.contains(why), "{line}");
        }
        repo.file(
            "base/all.yaml",
            &(0..600)
                .map(|i| {
                    file_doc(
                        &format!("f{i:03}"),
                        &format!("/f{i}"),
                        &format!("  source: files/d{}/ok\n", i % 3),
                    )
                })
                .collect::<Vec<_>>()
                .join("---\n"),
        );
        let cat = compile(repo.path(), &web()).unwrap();
        assert_eq!(cat.resources.len(), 600);
        for r in &cat.resources {
            let source = r
                .content
                .as_ref()
                .and_then(|c| c.source.as_deref())
                .unwrap();
            assert!(
                source.ends_with("ok") && source.starts_with(repo.path().canonicalize().unwrap()),
                "{}",
                source.display()
            );
        }
    }

    #[test]
    fn template_syntax_errors_without_a_host_and_undefined_variables_with_one() {
        let repo = Repo::two_layers();
        repo.file("base/templates/bad.j2", "ok\n{% if %}\n")
            .file(
                "base/templates/motd.j2",
                "{{ host.name }}\n{{ host.labels.colour }}\n",
            )
            .file(
                "base/a.yaml",
                &file_doc("a", "/a", "  template: templates/bad.j2\n"),
            )
            .file(
                "base/b.yaml",
                &file_doc("b", "/b", "  template: templates/motd.j2\n"),
            );
        let lines = repo.lint();
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0].starts_with("base/templates/bad.j2:2:"),
            "{lines:?}"
        );
        assert!(
            lines[0].contains("File[a]: template syntax error"),
            "{lines:?}"
        );

        let with_host = repo.lint_for(&web());
        assert_eq!(with_host.len(), 2, "{with_host:#?}");
        assert!(
            with_host[1].starts_with("base/templates/motd.j2:2:"),
            "{with_host:?}"
        );
        assert!(
            with_host[1].contains("File[b]: template error: undefined value"),
            "{with_host:?}"
        );
        // compile reports the same, and renders the template line with a note.
        let err = compile(repo.path(), &web()).unwrap_err();
        let rendered = err.render(false);
        assert!(
            rendered.contains("2 | {{ host.labels.colour }}"),
            "{rendered}"
        );
        assert!(
            rendered.contains("note: rendering for host `web-01`, declared at base/b.yaml:6:3"),
            "{rendered}"
        );
    }

    #[test]
    fn template_errors_found_in_parallel_are_all_reported() {
        let repo = Repo::two_layers();
        repo.file("base/templates/t.j2", "{{ labels.missing }}\n");
        let docs: Vec<String> = (0..300)
            .map(|i| {
                file_doc(
                    &format!("f{i:03}"),
                    &format!("/f{i}"),
                    "  template: templates/t.j2\n",
                )
            })
            .collect();
        repo.file("base/all.yaml", &docs.join("---\n"));
        let err = compile(repo.path(), &web()).unwrap_err();
        assert_eq!(err.error_count(), 300);
        let first = err.iter().next().unwrap();
        assert_eq!(first.resource.as_ref().unwrap().to_string(), "File[f000]");
    }

    #[test]
    fn validators_are_names_never_command_lines() {
        let repo = Repo::two_layers();
        repo.file(
            "base/a.yaml",
            &file_doc("a", "/a", "  validate: sshd -t -f %s\n"),
        )
        .file("base/b.yaml", &file_doc("b", "/b", "  validate: shd\n"));
        let lines = repo.lint();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines[0].starts_with("base/a.yaml:6:13: error: File[a]: `validate: sshd -t -f %s` looks like a command line"),
            "{lines:?}"
        );
        assert!(lines[0].contains("repository content must never decide what runs as root"));
        assert!(
            lines[1].starts_with("base/b.yaml:6:13: error: File[b]: unknown validator `shd`"),
            "{lines:?}"
        );
    }

    #[test]
    fn a_directory_refuses_validate_it_could_never_run() {
        let repo = Repo::two_layers();
        repo.file(
            "base/d.yaml",
            "datum: v1alpha1\ntype: Directory\nname: d\ndesired:\n  path: /etc/nginx\n  validate: nginx\n",
        );
        let lines = repo.lint();
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0]
                .starts_with("base/d.yaml:6:13: error: Directory[d]: `validate` on a Directory"),
            "{lines:?}"
        );
    }

    /// A Service or a Package stages nothing a validator could check, so a
    /// `validate:` on one never ran: it is refused, as on a Directory,
    /// rather than read as validation that never happens.
    #[test]
    fn a_service_or_a_package_refuses_validate_it_could_never_run() {
        for (kind, field) in [
            ("Service", "state: running"),
            ("Package", "state: installed"),
        ] {
            let repo = Repo::two_layers();
            repo.file(
                "base/x.yaml",
                &format!(
                    "datum: v1alpha1\ntype: {kind}\nname: nginx\ndesired:\n  {field}\n  validate: json\n"
                ),
            );
            let lines = repo.lint();
            assert_eq!(lines.len(), 1, "{kind}: {lines:#?}");
            assert!(
                lines[0].starts_with(&format!(
                    "base/x.yaml:6:13: error: {kind}[nginx]: `validate` on a {kind}: a {kind} stages no content"
                )),
                "{lines:?}"
            );
        }
    }

    /// A Symlink stages a link, no content: a file validator on one never
    /// ran (the link to an invalid file was made). A group validator, which
    /// checks the configuration the link takes part in, is kept.
    #[test]
    fn a_symlink_refuses_a_file_validator_and_keeps_a_group_one() {
        let repo = Repo::two_layers();
        repo.file(
            "base/l.yaml",
            "datum: v1alpha1\ntype: Symlink\nname: l\ndesired:\n  path: /etc/l.json\n  target: x.json\n  validate: json\n---\ndatum: v1alpha1\ntype: Symlink\nname: site\ndesired:\n  path: /etc/nginx/sites-enabled/site\n  target: ../sites-available/site\n  validate: nginx\n",
        );
        let lines = repo.lint();
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0].starts_with(
                "base/l.yaml:7:13: error: Symlink[l]: `validate: json` on a Symlink: json checks staged content, and a Symlink stages none"
            ),
            "{lines:?}"
        );
    }

    /// A duplicate key inside a document that is read all the same names its
    /// resource, as every other problem of a document does; a syntax error
    /// that stops a later document names none (not the one before it).
    #[test]
    fn a_duplicate_key_names_its_resource() {
        let repo = Repo::two_layers();
        repo.file(
            "base/a.yaml",
            "datum: v1alpha1\ntype: File\nname: a\ndesired:\n  path: /a\n  owner: root\n  owner: daemon\n---\ndatum: v1alpha1\ntype: File\nname: b\ndesired:\n  path: [/b\n",
        );
        let lines = repo.lint();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines[0].starts_with("base/a.yaml:7:3: error: File[a]: duplicate key `owner`"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("base/a.yaml:") && !lines[1].contains("File["),
            "{lines:?}"
        );
    }

    #[test]
    fn unknown_envelope_and_settings_keys() {
        let repo = Repo::new(&format!("{TWO_LAYERS}colour: red\n"));
        repo.file(
            "base/a.yaml",
            &format!("{}owner: root\n", file_doc("a", "/a", "")),
        );
        assert_eq!(
            repo.lint(),
            [
                "base/a.yaml:6:1: error: File[a]: unknown key `owner` in the document; expected one of: datum, type, name, desired, requires, class, sensitive",
                "datum.yaml:9:1: error: unknown key `colour` in datum.yaml; expected one of: datum, layers, classes, boundary",
            ]
        );
    }

    #[test]
    fn every_error_is_collected_across_layers_and_blocks_compilation() {
        let repo = Repo::two_layers();
        repo.file("base/a.yaml", &file_doc("a", "/a", "  mdoe: x\n"))
            .file("web/b.yaml", &file_doc("b", "/b", "  validate: nope\n"))
            .file(
                "web/c.yaml",
                "datum: v1alpha1\ntype: Nope\nname: c\ndesired: {}\n",
            );
        assert_eq!(repo.lint().len(), 3);
        // A host outside the web layer still may not compile a broken repository.
        let err = compile(repo.path(), &host("db-01", &[])).unwrap_err();
        assert_eq!(err.error_count(), 3);
        assert_eq!(err.summary(), "3 errors, 0 warnings");
    }

    /// Two Users naming one account, or two present Users (Groups) with one
    /// uid (gid), would fight on every pass or fail half-way through an
    /// apply: each is an error at the second one's field. A number used by
    /// a User and a Group, or by a resource declared absent, is not.
    #[test]
    fn two_resources_managing_one_account_or_number() {
        let repo = Repo::two_layers();
        repo.file(
            "base/accounts.yaml",
            &[
                flow_doc("User", "deploy", "{uid: 2000}"),
                flow_doc("User", "deploy-again", "{name: deploy}"),
                flow_doc("User", "web", "{uid: 2000, password_hash: \"$6$s$CANARY\"}"),
                flow_doc("User", "gone", "{uid: 2000, ensure: absent}"),
                flow_doc("Group", "ops", "{gid: 2000}"),
                flow_doc("Group", "ops2", "{gid: 2000}"),
                flow_doc("Group", "deploy", "{}"),
            ]
            .join("---\n"),
        );
        let err = compile(repo.path(), &web()).unwrap_err();
        let lines: Vec<String> = err.iter().map(|d| d.one_line()).collect();
        assert_eq!(
            lines,
            [
                "base/accounts.yaml:9:11: error: User[deploy-again]: account `deploy` is also managed by User[deploy]",
                "base/accounts.yaml:14:11: error: User[web]: uid 2000 is also managed by User[deploy]",
                "base/accounts.yaml:29:11: error: Group[ops2]: gid 2000 is also managed by Group[ops]",
            ]
        );
        assert!(!err.render(false).contains("CANARY"));
    }

    /// A User, Group, Package or Service without `name:` manages what its
    /// resource name says (the account, the package, the unit), which
    /// reaches useradd, apt-get and systemctl: a resource name those refuse
    /// (`-ou`, `Ng.inx`, `a/b`) is an error at the `name:` line when the
    /// repository compiles, as the same value written in `desired.name`
    /// is. Before, lint said nothing and every plan failed the resource
    /// when it was observed. With `name:` written, the resource name is
    /// only a label and may be anything a resource name may be.
    #[test]
    fn a_resource_name_that_stands_for_a_field_is_checked_as_that_field() {
        let repo = Repo::two_layers();
        let doc = |kind: &str, name: &str, desired: &str| {
            format!("datum: v1alpha1\ntype: {kind}\nname: \"{name}\"\ndesired: {desired}\n")
        };
        repo.file(
            "base/names.yaml",
            &[
                doc("User", "-ou", "{uid: 2000}"),
                doc("Group", "Ops Team", "{}"),
                doc("Package", "-oAPT::x=1", "{}"),
                doc("Service", "foo.service --root=/", "{state: running}"),
                doc("User", "Deploy Account", "{name: deploy}"),
                doc("Package", "Web Server", "{name: nginx}"),
                doc("Service", "web/unit", "{name: nginx, state: running}"),
                doc("Group", "ops", "{}"),
            ]
            .join("---\n"),
        );
        let expected = [
            "base/names.yaml:3:7: error: User[-ou]: the resource's name is the account's name (no `name:` is written): `-ou` is not a usable account name (a lower-case letter or `_`, then lower-case letters, digits, `_`, `-` or `.`, at most 32 characters)",
            "base/names.yaml:8:7: error: Group[Ops Team]: the resource's name is the group's name (no `name:` is written): `Ops Team` is not a usable account name (a lower-case letter or `_`, then lower-case letters, digits, `_`, `-` or `.`, at most 32 characters)",
            "base/names.yaml:13:7: error: Package[-oAPT::x=1]: the resource's name is the package's name (no `name:` is written): package name `-oAPT::x=1` must start with a lower-case letter or a digit",
            "base/names.yaml:18:7: error: Service[foo.service --root=/]: the resource's name is the unit's name (no `name:` is written): unit name `foo.service --root=/` contains ` `: systemd unit names use letters, digits and `:-_.@\\` only",
        ];
        assert_eq!(repo.lint(), expected);
        assert_eq!(repo.compile_errors(&web()), expected);
    }

    /// A claim two resources share is a value of both: when either says
    /// `sensitive: true`, the error names the field, never the value (a
    /// uid, an account's name), and shows no line of either (the other's
    /// line holds the same value). Before or after the sensitive one.
    #[test]
    fn a_claim_shared_with_a_sensitive_resource_never_shows_its_value() {
        let repo = Repo::two_layers();
        let doc = |name: &str, envelope: &str, desired: &str| {
            format!("datum: v1alpha1\ntype: User\nname: {name}\n{envelope}desired: {desired}\n")
        };
        repo.file(
            "base/accounts.yaml",
            &[
                doc(
                    "vault",
                    "sensitive: true\n",
                    "{uid: 47213, name: canaryacct}",
                ),
                doc("web", "", "{uid: 47213}"),
                doc("web2", "", "{name: canaryacct}"),
                doc("db", "", "{uid: 47214}"),
                doc("db-vault", "sensitive: true\n", "{uid: 47214}"),
            ]
            .join("---\n"),
        );
        let err = compile(repo.path(), &web()).unwrap_err();
        let lines: Vec<String> = err.iter().map(|d| d.one_line()).collect();
        assert_eq!(
            lines,
            [
                "base/accounts.yaml:10:11: error: User[web]: the same `uid` is also managed by User[vault] (its value is not shown: User[vault] is sensitive)",
                "base/accounts.yaml:15:11: error: User[web2]: the same `name` is also managed by User[vault] (its value is not shown: User[vault] is sensitive)",
                "base/accounts.yaml:26:11: error: User[db-vault]: the same `uid` is also managed by User[db] (its value is not shown: User[db-vault] is sensitive)",
            ]
        );
        let shown = err.render(false);
        for canary in ["47213", "47214", "canaryacct"] {
            assert!(!shown.contains(canary), "{canary} shown:\n{shown}");
        }
    }

    /// Two Packages of one package, or two Services of one unit (`nginx`
    /// is `nginx.service`), would undo each other on every pass.
    #[test]
    fn two_resources_managing_one_package_or_unit() {
        let repo = Repo::two_layers();
        repo.file(
            "base/system.yaml",
            &[
                flow_doc("Package", "nginx", "{}"),
                flow_doc("Package", "no-nginx", "{name: nginx, state: absent}"),
                flow_doc("Service", "nginx", "{state: running}"),
                flow_doc("Service", "web", "{name: nginx.service, state: stopped}"),
                flow_doc("Service", "getty", "{name: getty@tty1, enabled: true}"),
            ]
            .join("---\n"),
        );
        assert_eq!(
            repo.compile_errors(&web()),
            [
                "base/system.yaml:9:11: error: Package[no-nginx]: package `nginx` is also managed by Package[nginx]",
                "base/system.yaml:19:11: error: Service[web]: unit `nginx.service` is also managed by Service[nginx]",
            ]
        );
    }

    #[test]
    fn two_resources_managing_one_path() {
        let repo = Repo::two_layers();
        repo.file("base/a.yaml", &file_doc("a", "/etc/x", ""))
            .file("base/b.yaml", &file_doc("b", "/etc/x", ""));
        assert_eq!(
            repo.compile_errors(&web()),
            ["base/b.yaml:5:3: error: File[b]: path `/etc/x` is also managed by File[a]"]
        );
    }

    /// A compile takes each document's `desired` mapping out of the
    /// repository and lets it go before it renders; a lint keeps them. Both
    /// must report the same problems at the same places, those found after
    /// the mappings are gone included (a Tree folder that cannot be packed,
    /// a template with an undefined variable).
    #[test]
    fn a_compile_reports_what_a_lint_reports_where_it_does_after_letting_the_fields_go() {
        use std::os::unix::net::UnixListener;
        let repo = Repo::two_layers();
        repo.file("base/a.yaml", &file_doc("a", "/etc/x", ""))
            .file("base/b.yaml", &file_doc("b", "/etc/x", ""))
            .file("base/c.yaml", &file_doc("c", "/etc/c", "  mode: '0644'\n"))
            .file("web/c.yaml", &file_doc("c", "/etc/c", "  mode: 9\n  owner: [x]\n"))
            .file("base/templates/t.j2", "{{ labels.missing }}\n")
            .file(
                "base/d.yaml",
                &file_doc("d", "/etc/d", "  template: templates/t.j2\n"),
            )
            .file("base/trees/t/ok", "ok\n")
            .file(
                "base/t.yaml",
                "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /srv/t\n  owner: root\n  source: trees/t\n",
            );
        // A socket: a Tree cannot declare it, so packing its folder fails
        // while rendering.
        let _socket = UnixListener::bind(repo.path().join("base/trees/t/sock")).unwrap();
        // A host outside the web layer: the merge of every layer runs first
        // and must still see every value the host's merge then takes.
        let db = host("db-01", &[]);
        let err = compile(repo.path(), &db).unwrap_err();
        let compiled: Vec<String> = err.iter().map(|d| d.one_line()).collect();
        assert_eq!(compiled, repo.lint_for(&db));
        let err = compile(repo.path(), &web()).unwrap_err();
        let compiled: Vec<String> = err.iter().map(|d| d.one_line()).collect();
        assert_eq!(compiled, repo.lint_for(&web()));
        assert!(
            compiled
                .iter()
                .any(|l| l
                    .starts_with("base/t.yaml:7:3: error: Tree[t]: cannot read the tree source:")),
            "{compiled:#?}"
        );
        for expected in [
            "base/b.yaml:5:3: error: File[b]: path `/etc/x` is also managed by File[a]",
            "base/templates/t.j2:1:4: error: File[d]: template error",
            "web/c.yaml:6:3: error: File[c]:",
        ] {
            assert!(
                compiled.iter().any(|l| l.starts_with(expected)),
                "{expected} in {compiled:#?}"
            );
        }
    }

    /// The compile that takes the `desired` mappings (and moves their text
    /// values into the catalogue) builds what a compile that leaves them in
    /// the repository builds, for a host with every layer and one without.
    #[test]
    fn taking_the_written_fields_changes_no_catalogue() {
        let repo = Repo::two_layers();
        repo.file(
            "base/a.yaml",
            &file_doc(
                "a",
                "/etc/a",
                "  mode: '0644'\n  owner: root\n  content: \"hi\\n\"\n",
            ),
        )
        .file(
            "web/a.yaml",
            &file_doc("a", "/etc/a", "  mode: '0600'\n  owner: null\n"),
        )
        .file(
            "base/d.yaml",
            "datum: v1alpha1\ntype: Directory\nname: etc\ndesired:\n  path: /etc\n  mode: '0755'\n",
        );
        let registry = datum_providers::registry();
        for h in [web(), host("db-01", &[])] {
            let loaded = datum_catalog::load(repo.path()).unwrap();
            let kept = datum_catalog::compile_repository(&loaded, &h).unwrap();
            let taken = compile(repo.path(), &h).unwrap();
            assert_eq!(
                taken.to_json(registry, false),
                kept.to_json(registry, false),
                "{}",
                h.name
            );
            let a = taken.resources.iter().find(|r| r.id.name == "a").unwrap();
            let mode = if h.name == "web-01" { "0600" } else { "0644" };
            assert_eq!(a.desired.get("mode").unwrap(), mode);
            assert_eq!(a.desired.get("owner").is_some(), h.name != "web-01");
        }
    }

    #[test]
    fn a_repository_without_datum_yaml() {
        let dir = tempfile::tempdir().unwrap();
        let lines: Vec<String> = lint(dir.path(), None)
            .iter()
            .map(|d| d.one_line())
            .collect();
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].ends_with("is not a Datum repository: it has no datum.yaml"),
            "{lines:?}"
        );
    }
}

/// Declared content as bytes, whether held in memory or left in its
/// repository file.
fn content_bytes(c: &datum_core::Content) -> Vec<u8> {
    match &c.source {
        Some(path) => std::fs::read(path).unwrap(),
        None => c.bytes.to_vec(),
    }
}

mod source_hashes {
    use super::*;
    use datum_catalog::hashes::{FileKey, HashCacheFile, SourceHashes};

    fn sha_of(cat: &datum_catalog::Catalogue) -> String {
        cat.resources[0].content.as_ref().unwrap().sha256.clone()
    }

    fn compile_with(repo: &Repo, cache: &HashCacheFile) -> datum_catalog::Catalogue {
        datum_catalog::compile_cached(repo.path(), &web(), false, Some(cache)).unwrap()
    }

    #[test]
    fn a_remembered_hash_stands_while_the_key_holds_and_falls_when_the_file_changes() {
        let repo = Repo::two_layers();
        repo.file("base/files/motd", "hello\n").file(
            "base/motd.yaml",
            &file_doc("motd", "/etc/motd", "  source: files/motd\n"),
        );
        let cache_dir = tempfile::tempdir().unwrap();
        let cache = HashCacheFile::load(&cache_dir.path().join("source-hashes"));
        let plain = compile(repo.path(), &web()).unwrap();
        assert_eq!(sha_of(&compile_with(&repo, &cache)), sha_of(&plain));
        assert_eq!(
            plain.resources[0]
                .content
                .as_ref()
                .unwrap()
                .blake3
                .as_deref(),
            Some(blake3::hash(b"hello\n").to_hex().as_str()),
            "both digests from the one read"
        );
        // Just written: racy, so not remembered yet.
        assert!(cache.is_empty());

        // Plant a different digest under the file's real key: a cached pass
        // must take it without reading the file (which proves the lookup).
        let abs = repo.path().canonicalize().unwrap().join("base/files/motd");
        let key = FileKey::of(&std::fs::metadata(&abs).unwrap());
        let planted = "00".repeat(32);
        cache.put(
            &abs,
            key,
            datum_catalog::SourceDigests {
                sha256: [0; 32],
                blake3: [1; 32],
            },
        );
        cache.save().unwrap();
        let cache = HashCacheFile::load(&cache_dir.path().join("source-hashes"));
        let cached = compile_with(&repo, &cache);
        assert_eq!(sha_of(&cached), planted);
        assert_eq!(
            cached.resources[0].content.as_ref().unwrap().blake3,
            Some("01".repeat(32))
        );

        // Same size, new bytes: ctime moves, the planted digest no longer
        // applies, and the file is hashed again.
        std::thread::sleep(std::time::Duration::from_millis(20));
        repo.file("base/files/motd", "HELLO\n");
        let fresh = compile(repo.path(), &web()).unwrap();
        assert_ne!(sha_of(&fresh), sha_of(&plain));
        assert_eq!(sha_of(&compile_with(&repo, &cache)), sha_of(&fresh));
    }
}
