//! Exit codes that mean one thing: `plan` 0 nothing to do, 2 changes
//! pending, 4 some change would fail, 6 both; `quarantine` and `release` of
//! a name the catalogue does not declare are errors (exit 1), not a
//! quarantine that protects nothing; an `--output` format a command has no
//! form in is refused (exit 1, before anything ran), never replaced by another.

use std::fs;

use super::support::{Sandbox, assert_exit, mode_of, stderr, stdout};

fn json_file(name: &str, content: &str) -> String {
    format!(
        "datum: v1alpha1\ntype: File\nname: {name}\ndesired:\n  path: /{name}.json\n  content: \"{content}\"\n  validate: json\n"
    )
}

#[test]
fn a_folder_where_a_file_or_link_is_declared_would_fail_in_plan_as_in_apply() {
    // The apply never writes a file or a link over a folder (it removes one
    // only when asked to): the plan says so, exit 4, instead of "replace".
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: conf\ndesired:\n  path: /etc/app.conf\n  content: \"x\\n\"\n\
---\ndatum: v1alpha1\ntype: Symlink\nname: current\ndesired:\n  path: /srv/current\n  target: /srv/v2\n",
    );
    fs::create_dir_all(s.live("/etc/app.conf/inside")).unwrap();
    fs::create_dir_all(s.live("/srv/current")).unwrap();
    for command in ["plan", "apply"] {
        let out = s.datum(&[command]);
        assert_exit(&out, 4);
        let text = stdout(&out) + &stderr(&out);
        for path in ["/etc/app.conf", "/srv/current"] {
            assert!(
                text.contains(&format!("{path}: a directory is in the way")),
                "{command}: {text}"
            );
        }
    }
    assert!(s.live("/etc/app.conf/inside").is_dir());
    assert!(s.live("/srv/current").is_dir());
}

/// `plan` then `apply` on `s`: both exit 4 and name `reason` (a plan as a
/// change that would fail, with declared paths; the apply with the root's),
/// and the host under the root is as it was before either ran.
fn plan_and_apply_refuse(s: &Sandbox, reasons: &[&str]) {
    let before = host_files(s);
    for command in ["plan", "apply"] {
        let out = s.datum(&[command]);
        let text = stdout(&out) + &stderr(&out);
        assert_exit(&out, 4);
        for reason in reasons {
            assert!(text.contains(reason), "{command}: {text}");
        }
        if command == "plan" {
            assert!(text.contains("would fail: "), "{text}");
            assert!(text.contains("Plan: 0 to change"), "{text}");
        }
    }
    assert_eq!(host_files(s), before);
}

/// The files under the root with their content, Datum's own state left out.
fn host_files(s: &Sandbox) -> Vec<(String, Option<String>)> {
    s.files_under_root()
        .into_iter()
        .filter(|p| !p.starts_with("var"))
        .map(|p| {
            let content = fs::read_to_string(s.root().join(&p)).ok();
            (p, content)
        })
        .collect()
}

#[test]
fn a_folder_declared_absent_that_is_not_empty_would_fail_in_plan_as_in_apply() {
    // Datum removes only empty folders: the plan says this one would fail
    // (exit 4, not "remove"), as the apply then does.
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Directory\nname: old\ndesired:\n  path: /srv/old\n  ensure: absent\n",
    );
    s.write("root/srv/old/data", "kept\n");
    plan_and_apply_refuse(
        &s,
        &["/srv/old: it is not empty (Datum removes only empty directories"],
    );
    // What is declared absent inside it goes first and may empty it: the
    // removal is pending, and done.
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: Directory\nname: old\ndesired:\n  path: /srv/old\n  ensure: absent\n\
---\ndatum: v1alpha1\ntype: File\nname: data\ndesired:\n  path: /srv/old/data\n  ensure: absent\n",
    );
    assert_exit(&s.datum(&["plan"]), 2);
    assert_exit(&s.datum(&["apply"]), 2);
    assert!(!s.live("/srv/old").exists());
}

#[test]
fn a_folder_declared_absent_holding_only_a_killed_pass_s_staging_is_removed() {
    // A pass killed while staging a file in the folder left its staging
    // folder there. The plan does not count it (pending, not "would
    // fail"), so the apply must not either: it sweeps it, then removes the
    // folder. Before, the apply refused: "it is not empty".
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Directory\nname: old\ndesired:\n  path: /srv/old\n  ensure: absent\n",
    );
    s.write("root/srv/old/.datum.stage.k1ll3d/data", "half-written\n");
    let out = s.datum(&["plan"]);
    assert_exit(&out, 2);
    let out = s.datum(&["apply"]);
    assert_exit(&out, 2);
    assert!(!s.live("/srv/old").exists(), "{}", stdout(&out));
    // Anything else in it still stops the removal, staging or not.
    s.write("root/srv/old/.datum.stage.k1ll3d/data", "half-written\n");
    s.write("root/srv/old/kept", "kept\n");
    plan_and_apply_refuse(&s, &["/srv/old: it is not empty"]);
}

#[test]
fn a_folder_declared_absent_stays_pending_while_a_package_may_empty_it() {
    // Packages are applied before every other resource: one that would be
    // removed may take the folder's files with it, so the plan cannot say
    // the removal fails. Once the package is as declared, it can.
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Directory\nname: demo\ndesired:\n  path: /etc/demo\n  ensure: absent\n\
---\ndatum: v1alpha1\ntype: Package\nname: datum-demo\ndesired:\n  state: absent\n",
    );
    s.write("root/etc/demo/demo.conf", "x\n");
    s.write(
        "root/var/lib/dpkg/status",
        "Package: datum-demo\nStatus: install ok installed\nArchitecture: all\nVersion: 1.0-1\nDescription: test\n\n",
    );
    let out = s.datum(&["plan"]);
    assert_exit(&out, 2);
    assert!(
        stdout(&out).contains("Directory[demo]  remove"),
        "{}",
        stdout(&out)
    );
    s.write(
        "root/var/lib/dpkg/status",
        "Package: datum-demo\nStatus: deinstall ok config-files\nArchitecture: all\nVersion: 1.0-1\nDescription: test\n\n",
    );
    let out = s.datum(&["plan"]);
    assert_exit(&out, 4);
    assert!(
        stdout(&out).contains("would fail: cannot remove directory /etc/demo: it is not empty"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn an_entry_whose_parent_is_missing_or_not_a_folder_would_fail_in_plan_as_in_apply() {
    // A File, Directory, Symlink or Tree makes only itself: with no folder
    // to go in (and none declared), the plan says so, as the apply does.
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: conf\ndesired:\n  path: /srv/app/app.conf\n  content: \"x\\n\"\n\
---\ndatum: v1alpha1\ntype: Directory\nname: cache\ndesired:\n  path: /srv/cache/app\n\
---\ndatum: v1alpha1\ntype: Symlink\nname: current\ndesired:\n  path: /srv/release/current\n  target: /srv/v2\n\
---\ndatum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /srv/trees/t\n  source: tree\n",
    );
    s.write("repo/base/tree/a.conf", "a\n");
    s.write("root/srv/release", "a file, not a folder\n");
    plan_and_apply_refuse(
        &s,
        &[
            "/srv/trees/t: its parent directory",
            "/srv/trees does not exist",
            "/srv/app/app.conf: its parent directory",
            "/srv/app does not exist (create it or declare a Directory for it)",
            "/srv/cache/app: its parent directory",
            "/srv/cache does not exist",
            "/srv/release/current: ",
            "/srv/release is not a directory",
        ],
    );
    // A declared parent is made first: pending, and done.
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: File\nname: conf\ndesired:\n  path: /srv/app/app.conf\n  content: \"x\\n\"\n\
---\ndatum: v1alpha1\ntype: Directory\nname: app\ndesired:\n  path: /srv/app\n",
    );
    assert_exit(&s.datum(&["plan"]), 2);
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(
        fs::read_to_string(s.live("/srv/app/app.conf")).unwrap(),
        "x\n"
    );
}

#[test]
fn a_parent_made_through_a_followed_link_keeps_the_entry_pending() {
    // With `/var/run -> /run` followed, `/run/app` and `/var/run/app` are
    // one folder: the Directory made first is the File's parent, though
    // neither declared path is the other's ancestor. The plan must not call
    // the File's creation one that would fail (the apply makes it), in
    // either spelling.
    for (dir, file) in [
        ("/run/app", "/var/run/app/app.pid"),
        ("/var/run/app", "/run/app/app.pid"),
    ] {
        let s = Sandbox::with_base(&format!(
            "datum: v1alpha1\ntype: Directory\nname: app\ndesired:\n  path: {dir}\n\
---\ndatum: v1alpha1\ntype: File\nname: pid\ndesired:\n  path: {file}\n  content: \"1\\n\"\n"
        ));
        s.write(
            "repo/datum.yaml",
            "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n\
boundary:\n  follow_links: [/var/run]\n",
        );
        fs::create_dir_all(s.live("/run")).unwrap();
        fs::create_dir_all(s.live("/var")).unwrap();
        std::os::unix::fs::symlink("/run", s.live("/var/run")).unwrap();
        let out = s.datum(&["plan"]);
        assert_exit(&out, 2);
        assert!(!stdout(&out).contains("would fail"), "{}", stdout(&out));
        assert_exit(&s.datum(&["apply"]), 2);
        assert_eq!(
            fs::read_to_string(s.live("/run/app/app.pid")).unwrap(),
            "1\n"
        );
    }
    // Nothing before it: still certain, through the link too.
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: pid\ndesired:\n  path: /var/run/app/app.pid\n  content: \"1\\n\"\n",
    );
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n\
boundary:\n  follow_links: [/var/run]\n",
    );
    fs::create_dir_all(s.live("/run")).unwrap();
    fs::create_dir_all(s.live("/var")).unwrap();
    std::os::unix::fs::symlink("/run", s.live("/var/run")).unwrap();
    plan_and_apply_refuse(&s, &["/var/run/app does not exist"]);
}

#[test]
fn a_purging_tree_blocked_by_a_folder_of_excluded_entries_would_fail_in_plan_as_in_apply() {
    // The purge removes a folder where the source now has a file, but never
    // the excluded entries in it: the scan leaves those out, and the plan
    // still says the change would fail, as the apply does.
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n  purge: true\n  exclude: [\"*.local\"]\n",
    );
    s.write("repo/base/tree/held", "now a file\n");
    s.write("root/etc/t/held/mine.local", "mine\n");
    s.write("root/etc/t/held/other.conf", "other\n");
    plan_and_apply_refuse(
        &s,
        &["/etc/t/held: a directory holding excluded entries is in the way"],
    );
    // Without the excluded entry the folder goes (its file saved): pending.
    fs::remove_file(s.live("/etc/t/held/mine.local")).unwrap();
    assert_exit(&s.datum(&["plan"]), 2);
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(
        fs::read_to_string(s.live("/etc/t/held")).unwrap(),
        "now a file\n"
    );
}

/// A root whose account files know `root` and `app` (user and group), and
/// the shadow files shadow-utils lock beside them.
fn root_with_accounts(s: &Sandbox) {
    s.write(
        "root/etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\napp:x:900:900::/:/bin/false\n",
    );
    s.write("root/etc/group", "root:x:0:\napp:x:900:\n");
    s.write(
        "root/etc/shadow",
        "root:*:20000:0:99999:7:::\napp:*:20000:0:99999:7:::\n",
    );
    s.write("root/etc/gshadow", "root:*::\napp:*::\n");
}

#[test]
fn an_owner_or_group_no_account_file_knows_would_fail_in_plan_as_in_apply() {
    // A typo in an owner or group that no User or Group declares: the apply
    // fails on it, for a file to write, a folder to change and a tree to
    // make alike, and the plan says so (exit 4), not "pending".
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: conf\ndesired:\n  path: /etc/app.conf\n  content: \"x\\n\"\n  owner: aap\n\
---\ndatum: v1alpha1\ntype: Directory\nname: data\ndesired:\n  path: /srv/data\n  owner: app\n  group: apq\n\
---\ndatum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /srv/t\n  source: tree\n  owner: ppa\n",
    );
    s.write("repo/base/tree/a.conf", "a\n");
    root_with_accounts(&s);
    fs::create_dir_all(s.live("/srv/data")).unwrap();
    plan_and_apply_refuse(
        &s,
        &[
            "unknown user `aap` (not in ",
            "unknown group `apq` (not in ",
            "unknown user `ppa` (not in ",
        ],
    );
    let plan = stdout(&s.datum(&["plan"]));
    assert!(
        plan.contains("would fail: unknown user `aap` (not in /etc/passwd)")
            && plan.contains("would fail: unknown group `apq` (not in /etc/group)"),
        "{plan}"
    );
}

#[test]
fn an_owner_or_group_a_user_or_group_of_the_pass_makes_stays_pending() {
    // The same names, declared by a User and a Group of the catalogue: they
    // are made earlier in the pass (the File, Directory and Tree are ordered
    // after them), so the plan keeps the changes pending, and the apply
    // makes them.
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: conf\ndesired:\n  path: /etc/app.conf\n  content: \"x\\n\"\n  owner: aap\n\
---\ndatum: v1alpha1\ntype: Directory\nname: data\ndesired:\n  path: /srv/data\n  owner: app\n  group: apq\n\
---\ndatum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /srv/t\n  source: tree\n  owner: aap\n\
---\ndatum: v1alpha1\ntype: User\nname: aap\ndesired: {uid: 2001, home: /, shell: /bin/false}\n\
---\ndatum: v1alpha1\ntype: Group\nname: apq\ndesired: {gid: 3001}\n",
    );
    s.write("repo/base/tree/a.conf", "a\n");
    root_with_accounts(&s);
    fs::create_dir_all(s.live("/srv/data")).unwrap();
    let out = s.datum(&["plan"]);
    assert_exit(&out, 2);
    assert!(!stdout(&out).contains("would fail"), "{}", stdout(&out));
    if !rustix::process::geteuid().is_root() {
        eprintln!("apply skipped: shadow-utils need root (CAP_SYS_CHROOT) for --root");
        return;
    }
    let out = s.datum(&["apply"]);
    assert_exit(&out, 2);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(s.live("/etc/app.conf")).unwrap().uid(), 2001);
    assert_eq!(fs::metadata(s.live("/srv/data")).unwrap().gid(), 3001);
    assert_eq!(fs::metadata(s.live("/srv/t/a.conf")).unwrap().uid(), 2001);
}

#[test]
fn an_owner_a_file_earlier_in_the_pass_adds_to_passwd_stays_pending_and_is_set() {
    // The account files written by a File before one owned by the account
    // it adds: the plan keeps the change pending (the account may exist by
    // then), and the apply reads the account files again once written, so
    // the owner resolves (the names are parsed at observation).
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: passwd\ndesired:\n  path: /etc/passwd\n  content: \"root:x:0:0:root:/root:/bin/sh\\napp:x:900:900::/:/bin/false\\nsvc:x:901:900::/:/bin/false\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: conf\ndesired:\n  path: /srv/svc.conf\n  content: \"x\\n\"\n  owner: svc\n",
    );
    root_with_accounts(&s);
    fs::create_dir_all(s.live("/srv")).unwrap();
    let out = s.datum(&["plan"]);
    assert_exit(&out, 2);
    assert!(!stdout(&out).contains("would fail"), "{}", stdout(&out));
    let out = s.datum(&["apply"]);
    assert_exit(&out, 2);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(s.live("/srv/svc.conf")).unwrap().uid(), 901);
}

#[test]
fn an_owner_a_tree_earlier_in_the_pass_adds_to_passwd_stays_pending_and_is_set() {
    // The same with a Tree whose entry is etc/passwd: every kind that
    // writes a path makes the pass read the account files again when what
    // it wrote is one of them or a folder above one, not only a File.
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: etc\ndesired:\n  path: /etc\n  source: etc\n\
---\ndatum: v1alpha1\ntype: File\nname: conf\ndesired:\n  path: /srv/svc.conf\n  content: \"x\\n\"\n  owner: svc\n",
    );
    s.write(
        "repo/base/etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\napp:x:900:900::/:/bin/false\nsvc:x:901:900::/:/bin/false\n",
    );
    root_with_accounts(&s);
    fs::create_dir_all(s.live("/srv")).unwrap();
    let out = s.datum(&["plan"]);
    assert_exit(&out, 2);
    assert!(!stdout(&out).contains("would fail"), "{}", stdout(&out));
    let out = s.datum(&["apply"]);
    assert_exit(&out, 2);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(s.live("/srv/svc.conf")).unwrap().uid(), 901);
}

#[test]
fn an_owner_whose_uid_a_file_earlier_in_the_pass_changes_gets_the_new_uid() {
    // A File rewriting /etc/passwd (svc: 901 -> 902) before a File owned by
    // svc: the later File must not be staged ahead (another File, on a
    // worker, before the loop wrote passwd) with the uid read before the
    // account files were written.
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: passwd\ndesired:\n  path: /etc/passwd\n  content: \"root:x:0:0:root:/root:/bin/sh\\napp:x:900:900::/:/bin/false\\nsvc:x:902:900::/:/bin/false\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: conf\ndesired:\n  path: /srv/svc.conf\n  content: \"x\\n\"\n  owner: svc\n",
    );
    root_with_accounts(&s);
    s.write(
        "root/etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\napp:x:900:900::/:/bin/false\nsvc:x:901:900::/:/bin/false\n",
    );
    fs::create_dir_all(s.live("/srv")).unwrap();
    let out = s.datum(&["plan"]);
    assert_exit(&out, 2);
    let out = s.datum(&["apply"]);
    // Exit 6 before: File[conf] staged ahead with uid 901, 'failed
    // (verify): still differs after apply: owner'.
    assert_exit(&out, 2);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(s.live("/srv/svc.conf")).unwrap().uid(), 902);
    assert_exit(&s.datum(&["plan"]), 0);
}

#[test]
fn an_owner_added_to_passwd_through_a_followed_link_stays_pending_and_is_set() {
    // /etc is a link the boundary follows (to /etc-real), and the File
    // writing the account file declares the link's target: the plan keeps
    // the owner pending (through a followed link, a path's spelling does
    // not say what it reaches), and the apply reads the account files again
    // after it as it does after /etc/passwd itself.
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: passwd\ndesired:\n  path: /etc-real/passwd\n  content: \"root:x:0:0:root:/root:/bin/sh\\napp:x:900:900::/:/bin/false\\nsvc:x:901:900::/:/bin/false\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: conf\ndesired:\n  path: /srv/svc.conf\n  content: \"x\\n\"\n  owner: svc\n",
    );
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n\
boundary:\n  follow_links: [/etc]\n",
    );
    root_with_accounts(&s);
    fs::rename(s.live("/etc"), s.live("/etc-real")).unwrap();
    std::os::unix::fs::symlink("/etc-real", s.live("/etc")).unwrap();
    fs::create_dir_all(s.live("/srv")).unwrap();
    let out = s.datum(&["plan"]);
    assert_exit(&out, 2);
    assert!(!stdout(&out).contains("would fail"), "{}", stdout(&out));
    let out = s.datum(&["apply"]);
    assert_exit(&out, 2);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(s.live("/srv/svc.conf")).unwrap().uid(), 901);
}

#[test]
fn a_hard_linked_file_without_content_whose_mode_must_change_would_fail_in_plan_as_in_apply() {
    // A File without content whose file has another name: its mode is not
    // changed in place, nor its bytes copied (6f364d3). The plan says the
    // change would fail (exit 4), as the apply does, with the apply's reason.
    use std::os::unix::fs::PermissionsExt;
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: app\ndesired:\n  path: /etc/app.conf\n  mode: \"0644\"\n",
    );
    s.write("root/etc/other", "other\n");
    fs::set_permissions(s.live("/etc/other"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::hard_link(s.live("/etc/other"), s.live("/etc/app.conf")).unwrap();
    plan_and_apply_refuse(
        &s,
        &[
            "content: /etc/app.conf has 2 hard links: its owner and mode are not changed in place (that would reach every other name), and bytes Datum was not given are not copied (they may be another file's); declare its content, or remove the other links",
        ],
    );
    assert_eq!(mode_of(&s.live("/etc/other")), 0o600);
    // The other name removed earlier in the pass (it may be anywhere, not
    // only near this one): pending, and done in place.
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: File\nname: other\ndesired:\n  path: /etc/other\n  ensure: absent\n\
---\ndatum: v1alpha1\ntype: File\nname: app\ndesired:\n  path: /etc/app.conf\n  mode: \"0644\"\n",
    );
    assert_exit(&s.datum(&["plan"]), 2);
    assert_exit(&s.datum(&["apply"]), 2);
    assert!(!s.live("/etc/other").exists());
    assert_eq!(mode_of(&s.live("/etc/app.conf")), 0o644);
    assert_eq!(
        fs::read_to_string(s.live("/etc/app.conf")).unwrap(),
        "other\n"
    );
}

#[test]
fn plan_exits_0_2_4_or_6() {
    let good = json_file("good", "{}\\n");
    let s = Sandbox::with_base(&good);
    assert_exit(&s.datum(&["plan"]), 2);
    assert_exit(&s.datum(&["apply"]), 2);
    assert_exit(&s.datum(&["plan"]), 0);

    // Only a change that would fail validation: 4.
    let bad = json_file("bad", "{ not json\\n");
    s.write("repo/base/main.yaml", &format!("{good}---\n{bad}"));
    let out = s.datum(&["plan"]);
    assert_exit(&out, 4);
    assert!(
        stdout(&out).contains("would fail: validation failed (json on test-host, exit 1)"),
        "{}",
        stdout(&out)
    );
    // A failing change and a pending one: 6.
    let other = json_file("other", "[1]\\n");
    s.write(
        "repo/base/main.yaml",
        &format!("{good}---\n{bad}---\n{other}"),
    );
    assert_exit(&s.datum(&["plan"]), 6);
    assert_exit(&s.datum(&["--output", "json", "plan"]), 6);
    // A plan never writes.
    assert!(!s.live("/bad.json").exists());
    assert!(!s.live("/other.json").exists());
}

#[test]
fn quarantine_and_release_of_an_undeclared_name_are_refused() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  content: \"declared\\n\"\n",
    );
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);

    let out = s.datum(&["quarantine", "File/mtod", "--reason", "typo"]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("File[mtod] is not declared in the catalogue for host test-host"),
        "{err}"
    );
    assert!(err.contains("did you mean File[motd]?"), "{err}");
    // Nothing was quarantined: apply still manages everything.
    fs::write(s.live("/etc/motd"), "edited\n").unwrap();
    assert_exit(&s.datum(&["apply"]), 2);

    let out = s.datum(&["release", "Service/nope"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("Service[nope] is not declared in the catalogue"),
        "{}",
        stderr(&out)
    );

    // A declared name works, and a quarantine that outlived its declaration
    // can still be released.
    assert_exit(
        &s.datum(&["quarantine", "File/motd", "--reason", "hand fix"]),
        0,
    );
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: File\nname: other\ndesired:\n  path: /etc/other\n  content: \"x\\n\"\n",
    );
    let out = s.datum(&["release", "File/motd"]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("released File[motd]"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_format_a_command_lacks_is_refused_not_replaced() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  content: \"declared\\n\"\n",
    );
    fs::create_dir_all(s.live("/etc")).unwrap();
    for (args, command) in [
        (
            &["--output", "markdown", "validators"][..],
            "datum validators",
        ),
        (&["--output", "markdown", "lint"][..], "datum lint"),
        (
            &["--output", "markdown", "backup", "list"][..],
            "datum backup",
        ),
        (&["--output", "markdown", "apply"][..], ""),
    ] {
        let out = s.datum(args);
        if command.is_empty() {
            // apply has a Markdown form: it ran.
            assert_exit(&out, 2);
            assert!(
                stdout(&out).starts_with("## Apply: test-host"),
                "{}",
                stdout(&out)
            );
            continue;
        }
        assert_exit(&out, 1);
        assert_eq!(
            stderr(&out),
            format!(
                "error: {command} cannot be shown as markdown (--output markdown); it can be shown as: human, json\n"
            )
        );
        assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    }
    // The agent prints log lines, no document: JSON is refused, not an
    // empty stdout (the refusal itself is the JSON error document).
    let out = s.datum(&["--output", "json", "agent", "--once"]);
    assert_exit(&out, 1);
    assert_eq!(
        stderr(&out),
        "error: datum agent cannot be shown as json (--output json); it can be shown as: human\n"
    );
    let refusal: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON document");
    assert!(refusal["format_version"].is_string(), "{refusal}");
    // A check's Markdown on stdout is the report `--markdown FILE` writes.
    fs::write(s.live("/etc/motd"), "edited\n").unwrap();
    let file = s.dir.path().join("report.md");
    let out = s.datum(&[
        "--output",
        "markdown",
        "check",
        "--markdown",
        file.to_str().unwrap(),
    ]);
    assert_exit(&out, 2);
    let written = fs::read_to_string(&file).unwrap();
    assert!(written.contains("File[motd]"), "{written}");
    assert_eq!(stdout(&out), written);
}

#[test]
fn a_file_below_a_followed_link_to_a_declared_directory_is_made_after_both() {
    // A Symlink listed under follow_links points at a Directory declared
    // after it, and a File is declared below the link first: the plan
    // calls all three creates, so the apply must make the Directory, the
    // link, then the File (before, the File came before the Directory and
    // failed on a missing parent).
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: inside\ndesired:\n  path: /etc/app/conf\n  content: \"x\\n\"\n\
---\ndatum: v1alpha1\ntype: Symlink\nname: link\ndesired: {path: /etc/app, target: /etc/real}\n\
---\ndatum: v1alpha1\ntype: Directory\nname: real\ndesired: {path: /etc/real}\n",
    );
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n\
boundary:\n  follow_links: [/etc/app]\n",
    );
    fs::create_dir_all(s.live("/etc")).unwrap();
    let out = s.datum(&["plan"]);
    assert_exit(&out, 2);
    assert!(!stdout(&out).contains("would fail"), "{}", stdout(&out));
    let out = s.datum(&["apply"]);
    assert_exit(&out, 2);
    assert_eq!(fs::read_to_string(s.live("/etc/real/conf")).unwrap(), "x\n");
    assert_exit(&s.datum(&["plan"]), 0);
}

#[test]
fn a_check_refused_for_two_names_of_one_package_records_nothing() {
    // 0edd8a4's refusal says 'nothing was reported, reconciled or
    // recorded', but the inspection before it recorded again the
    // verification of a file it had read and found as declared (and would
    // have ended an acceptance), and that record outlived the refusal: the
    // next check trusted the file by its metadata. Now the next check still
    // finds it to record.
    let file = "datum: v1alpha1\ntype: File\nname: motd\nclass: cheap\ndesired: {path: /etc/motd, content: \"hi\\n\"}\n";
    let s = Sandbox::with_base(file);
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nclasses:\n  cheap: {interval: 5m, content: metadata}\n",
    );
    s.write(
        "root/var/lib/dpkg/status",
        "Package: dpkg\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1.21.22\nDescription: x\n\n",
    );
    fs::create_dir_all(s.live("/etc")).unwrap();
    let racy_window = std::time::Duration::from_millis(3_200);
    assert_exit(&s.datum(&["apply"]), 2);
    // Recorded once quiet, then its ctime moved (a hard link), not its
    // content: a metadata check reads it and records it again.
    std::thread::sleep(racy_window);
    assert_exit(&s.datum(&["apply"]), 0);
    fs::hard_link(s.live("/etc/motd"), s.dir.path().join("motd-link")).unwrap();
    std::thread::sleep(racy_window);
    s.write(
        "repo/base/main.yaml",
        &format!(
            "{file}---\ndatum: v1alpha1\ntype: Package\nname: tool\ndesired: {{state: installed}}\n\
---\ndatum: v1alpha1\ntype: Package\nname: tool-arch\ndesired: {{name: \"tool:amd64\", state: absent}}\n"
        ),
    );
    let refused = s.datum(&["check"]);
    assert_exit(&refused, 1);
    assert!(
        stderr(&refused).contains("nothing was reported, reconciled or recorded"),
        "{}",
        stderr(&refused)
    );
    s.write("repo/base/main.yaml", file);
    let out = s.datum(&["check", "--output", "json"]);
    assert_exit(&out, 0);
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (&json["metadata_only"], &json["verified_again"]),
        (&serde_json::json!(0), &serde_json::json!(1)),
        "the refused check recorded it: {json:#}"
    );
}

#[test]
fn an_arch_all_package_and_its_native_or_all_name_are_refused_as_one() {
    // An `Architecture: all` package is one of the native architecture's for
    // apt (`apt-get install adduser:amd64` is adduser; `bash:all` is bash),
    // though dpkg names its record adduser:all: `adduser` beside
    // `adduser:amd64` or `adduser:all` is one package, refused as one
    // whichever spellings meet, installed or not; and `adduser:amd64` alone
    // is the installed adduser, nothing to do.
    let manifest = |one: &str, other: &str| {
        format!(
            "datum: v1alpha1\ntype: Package\nname: tool\ndesired:\n  name: \"{one}\"\n  state: installed\n\
---\ndatum: v1alpha1\ntype: Package\nname: tool-arch\ndesired:\n  name: \"{other}\"\n  state: absent\n"
        )
    };
    let dpkg = "Package: dpkg\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1.21.22\nDescription: x\n\n";
    let adduser = "Package: adduser\nStatus: install ok installed\nArchitecture: all\nVersion: 3.134\nDescription: x\n\n";
    for status in [dpkg.to_owned(), format!("{dpkg}{adduser}")] {
        let installed = status.contains("adduser");
        for (one, other) in [
            ("adduser", "adduser:amd64"),
            ("adduser", "adduser:all"),
            ("adduser:all", "adduser:native"),
        ] {
            let s = Sandbox::with_base(&manifest(one, other));
            s.write("root/var/lib/dpkg/status", &status);
            let one_package = if installed {
                "manage one package adduser:all on this host"
            } else {
                "manage one package adduser:amd64 on this host"
            };
            for (command, done) in [
                ("plan", "nothing was planned"),
                ("apply", "nothing was applied"),
                ("check", "nothing was reported, reconciled or recorded"),
            ] {
                let out = s.datum(&[command]);
                assert_exit(&out, 1);
                let err = stderr(&out);
                for part in [
                    "Package[tool] (base/main.yaml:1:1) and Package[tool-arch] (base/main.yaml:8:1)",
                    one_package,
                    done,
                ] {
                    assert!(
                        err.contains(part),
                        "{one} and {other}, {command}: lacks {part:?}: {err}"
                    );
                }
            }
        }
    }
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Package\nname: tool\ndesired:\n  name: adduser:amd64\n  state: installed\n",
    );
    s.write("root/var/lib/dpkg/status", &format!("{dpkg}{adduser}"));
    assert_exit(&s.datum(&["plan"]), 0);
}

#[test]
fn a_package_and_its_name_with_the_native_architecture_are_refused_as_one() {
    // `tool` and `tool:amd64` pass lint as two Packages (lint does not know
    // the host's architecture), but on an amd64 host (dpkg's own
    // architecture) they are one package, which one pass would install and
    // remove in turn. Plan, apply and check refuse them, installed or not,
    // naming both and where each is declared; `tool:i386` is another
    // package.
    let manifest = |other: &str| {
        format!(
            "datum: v1alpha1\ntype: Package\nname: tool\ndesired:\n  state: installed\n\
---\ndatum: v1alpha1\ntype: Package\nname: tool-arch\ndesired:\n  name: \"{other}\"\n  state: absent\n"
        )
    };
    let dpkg = "Package: dpkg\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1.21.22\nDescription: x\n\n";
    let tool = "Package: tool\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1.0\nDescription: x\n\n";
    for status in [dpkg.to_owned(), format!("{dpkg}{tool}")] {
        let s = Sandbox::with_base(&manifest("tool:amd64"));
        s.write("root/var/lib/dpkg/status", &status);
        assert_exit(&s.datum(&["lint"]), 0);
        for (command, done) in [
            ("plan", "nothing was planned"),
            ("apply", "nothing was applied"),
            ("check", "nothing was reported, reconciled or recorded"),
        ] {
            let out = s.datum(&[command]);
            assert_exit(&out, 1);
            let err = stderr(&out);
            for part in [
                "Package[tool] (base/main.yaml:1:1) and Package[tool-arch] (base/main.yaml:7:1)",
                "manage one package tool:amd64 on this host",
                done,
            ] {
                assert!(err.contains(part), "{command} lacks {part:?}: {err}");
            }
        }
        let s = Sandbox::with_base(&manifest("tool:i386"));
        s.write("root/var/lib/dpkg/status", &status);
        let out = s.datum(&["plan"]);
        assert!(
            !stderr(&out).contains("manage one package"),
            "{}",
            stderr(&out)
        );
    }
}
