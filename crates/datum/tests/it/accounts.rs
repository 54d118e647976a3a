//! User and Group on a root with its own account files: created, changed
//! and removed by the real shadow-utils (`useradd --root ...`), observed by
//! parsing the files, drift found by `check`, and the password hash never
//! shown anywhere.

use std::fs;

use crate::support::*;

const HASH: &str = "$6$saltsalt$CANARY-HASH-b81d";

/// shadow-utils chroot into the root (CAP_SYS_CHROOT): the suite runs as root.
fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// shadow-utils chroot into the root (CAP_SYS_CHROOT): whether the suite
/// runs as root; if not, the test says it is skipped.
fn shadow_utils_can_run() -> bool {
    let root = is_root();
    if !root {
        eprintln!("skipped: shadow-utils need root (CAP_SYS_CHROOT) for --root");
    }
    root
}

/// A sandbox whose root has account files of its own, `manifest` in base.
fn with_accounts(manifest: &str) -> Sandbox {
    let s = Sandbox::with_base(manifest);
    accounts_root(&s);
    s
}

/// Such a sandbox whose useradd makes a group per user and userdel takes
/// it away (`USERGROUPS_ENAB yes`, as on Debian), `docs` in base.
fn with_usergroups(docs: &[String]) -> Sandbox {
    let s = with_accounts(&docs.join("---\n"));
    s.write("root/etc/login.defs", "USERGROUPS_ENAB yes\n");
    s
}

/// Declares `docs` in base, in place of what was.
fn declare(s: &Sandbox, docs: &[String]) {
    s.write("repo/base/main.yaml", &docs.join("---\n"));
}

/// A resource whose `desired` is one flow mapping.
fn flow_doc(kind: &str, name: &str, desired: &str) -> String {
    format!("datum: v1alpha1\ntype: {kind}\nname: {name}\ndesired: {desired}\n")
}

/// A shadow-utils program run by hand on the sandbox's root; it succeeds.
fn shadow_tool(s: &Sandbox, args: &[&str]) {
    let out = std::process::Command::new(args[0])
        .arg("--root")
        .arg(s.root())
        .args(&args[1..])
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
}

fn accounts_root(s: &Sandbox) {
    s.write(
        "root/etc/passwd",
        "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    );
    s.write(
        "root/etc/group",
        "root:x:0:\nusers:x:100:\nnogroup:x:65534:\n",
    );
    s.write(
        "root/etc/shadow",
        "root:*:20000:0:99999:7:::\nnobody:*:20000:0:99999:7:::\n",
    );
    s.write("root/etc/gshadow", "root:*::\nusers:*::\nnogroup:*::\n");
    fs::set_permissions(
        s.live("/etc/shadow"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
}

fn manifest(shell: &str, ensure: &str) -> String {
    format!(
        r#"datum: v1alpha1
type: Group
name: ops
desired: {{gid: 3000}}
---
datum: v1alpha1
type: User
name: deploy
desired:
  uid: 2000
  gid: ops
  groups: [ops]
  home: /srv/deploy
  shell: {shell}
  ensure: {ensure}
  password_hash: "{HASH}"
"#
    )
}

fn file_owned_by_deploy() -> &'static str {
    r#"datum: v1alpha1
type: Directory
name: srv
desired: {path: /srv, mode: "0755"}
---
datum: v1alpha1
type: File
name: deploy-key
desired: {path: /srv/key, owner: deploy, group: ops, mode: "0600", content: "k\n"}
---
"#
}

fn line_of<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find(|l| l.split(':').next() == Some(name))
}

#[test]
fn users_and_groups_are_created_checked_and_removed_through_shadow_utils() {
    if !shadow_utils_can_run() {
        return;
    }
    // The File comes first in the manifest: it is ordered after the User
    // and the Group it names by their ordering capability, no `requires`.
    let s = with_accounts(&format!(
        "{}{}",
        file_owned_by_deploy(),
        manifest("/bin/sh", "present")
    ));
    let catalogue: serde_json::Value =
        serde_json::from_slice(&s.datum(&["catalogue"]).stdout).unwrap();
    let auto = |name: &str| {
        catalogue["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .map(|r| r["autorequires"].clone())
            .unwrap()
    };
    let key = auto("deploy-key");
    assert!(
        key.as_array().unwrap().iter().any(|v| v == "User[deploy]")
            && key.as_array().unwrap().iter().any(|v| v == "Group[ops]"),
        "{key}"
    );
    assert!(
        auto("deploy")
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "Group[ops]"),
        "{catalogue}"
    );
    let mut outputs = vec![s.datum(&["plan"]), s.datum(&["--output", "json", "plan"])];
    let apply = s.datum(&["--output", "json", "apply"]);
    assert_exit(&apply, 2);
    outputs.push(apply);

    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert_eq!(
        line_of(&passwd, "deploy"),
        Some("deploy:x:2000:3000::/srv/deploy:/bin/sh"),
        "{passwd}"
    );
    let group = fs::read_to_string(s.live("/etc/group")).unwrap();
    assert_eq!(line_of(&group, "ops"), Some("ops:x:3000:deploy"), "{group}");
    let shadow = fs::read_to_string(s.live("/etc/shadow")).unwrap();
    assert!(
        line_of(&shadow, "deploy").is_some_and(|l| l.starts_with(&format!("deploy:{HASH}:"))),
        "{shadow}"
    );
    // The File owned by the new user resolved it in the same pass.
    let key = fs::metadata(s.live("/srv/key")).unwrap();
    assert_eq!(
        (
            std::os::unix::fs::MetadataExt::uid(&key),
            std::os::unix::fs::MetadataExt::gid(&key)
        ),
        (2000, 3000)
    );
    // Nothing under the root but the account files and what was declared:
    // no home directory was made.
    assert!(!s.live("/srv/deploy").exists());

    // Converged: nothing to do.
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 0);
    outputs.push(plan);

    // A hand edit of the shell and the hash is drift, named by field; the
    // hash only as "(sensitive)".
    let edited = passwd.replace("/srv/deploy:/bin/sh", "/srv/deploy:/bin/bash");
    fs::write(s.live("/etc/passwd"), edited).unwrap();
    let shadow_edited = shadow.replace(HASH, "$6$other$CANARY-OTHER-b81d");
    fs::write(s.live("/etc/shadow"), shadow_edited).unwrap();
    let check = s.datum(&["--output", "json", "check"]);
    assert_exit(&check, 2);
    let text = stdout(&check);
    assert!(text.contains("shell"), "{text}");
    assert!(text.contains("password_hash"), "{text}");
    outputs.push(check);
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    let shown = stdout(&plan);
    assert!(
        shown.contains("/bin/bash") && shown.contains("(sensitive)"),
        "{shown}"
    );
    outputs.push(plan);
    outputs.push(s.datum(&["apply"]));
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert_eq!(
        line_of(&passwd, "deploy"),
        Some("deploy:x:2000:3000::/srv/deploy:/bin/sh")
    );
    let shadow = fs::read_to_string(s.live("/etc/shadow")).unwrap();
    assert!(line_of(&shadow, "deploy").is_some_and(|l| l.contains(HASH)));
    let catalogue = s.datum(&["catalogue"]);
    assert_exit(&catalogue, 0);
    assert!(stdout(&catalogue).contains("(sensitive)"));
    outputs.push(catalogue);

    // The hash never appears in any output, nor in Datum's state.
    for o in &outputs {
        let all = format!("{}{}", stdout(o), stderr(o));
        assert!(!all.contains("CANARY"), "the hash leaked:\n{all}");
    }
    for entry in fs::read_dir(s.live("/var/lib/datum")).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() {
            let bytes = fs::read(entry.path()).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains("CANARY"),
                "{:?} holds the hash",
                entry.path()
            );
        }
    }

    // ensure: absent removes the account (the group stays: it is declared).
    s.write("repo/base/main.yaml", &manifest("/bin/sh", "absent"));
    fs::remove_file(s.live("/srv/key")).unwrap();
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert_eq!(line_of(&passwd, "deploy"), None, "{passwd}");
    let group = fs::read_to_string(s.live("/etc/group")).unwrap();
    assert_eq!(line_of(&group, "ops"), Some("ops:x:3000:"), "{group}");
}

#[test]
fn a_clear_text_password_is_refused_at_compile_time_without_being_quoted() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: User\nname: deploy\ndesired:\n  password_hash: hunter2-CANARY\n",
    );
    let o = s.datum(&["plan"]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("password_hash") && err.contains("main.yaml"),
        "{err}"
    );
    assert!(!err.contains("CANARY"), "{err}");
}

#[test]
fn a_root_without_account_files_is_a_failure_naming_the_file() {
    let s = Sandbox::with_base("datum: v1alpha1\ntype: Group\nname: ops\ndesired: {gid: 3000}\n");
    let o = s.datum(&["plan"]);
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(all.contains("/etc/passwd"), "{all}");
    assert!(!s.live("/etc/group").exists());
}

/// On a root whose useradd makes a group per user (Debian's
/// `USERGROUPS_ENAB yes`), a User without `gid` whose same-named Group is
/// declared joins that group: useradd alone refuses ("group deploy exists")
/// on every pass. And a Group removed with the User whose primary group it
/// is goes after the User: groupdel refuses a primary group.
#[test]
fn a_users_own_group_is_joined_and_a_group_is_removed_after_its_users() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_usergroups(&[
        flow_doc("Group", "ops", "{gid: 3000}"),
        flow_doc("Group", "deploy", "{gid: 3001}"),
        flow_doc("User", "deploy", "{uid: 2000}"),
        flow_doc("User", "app", "{uid: 2001, gid: ops}"),
    ]);
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    let ids = |name: &str| {
        line_of(&passwd, name).map(|l| l.split(':').skip(2).take(2).collect::<Vec<_>>())
    };
    assert_eq!(ids("deploy"), Some(vec!["2000", "3001"]), "{passwd}");
    assert_eq!(ids("app"), Some(vec!["2001", "3000"]), "{passwd}");
    assert_exit(&s.datum(&["plan"]), 0);

    // The group and the user whose primary group it is, both removed: one
    // pass, no failure, whatever order the manifest gives.
    declare(
        &s,
        &[
            flow_doc("Group", "ops", "{ensure: absent}"),
            flow_doc("User", "app", "{ensure: absent}"),
        ],
    );
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert_eq!(line_of(&passwd, "app"), None, "{passwd}");
    let group = fs::read_to_string(s.live("/etc/group")).unwrap();
    assert_eq!(line_of(&group, "ops"), None, "{group}");

    // A User removed whose own group is declared present: userdel would take
    // the group with it (USERGROUPS_ENAB); the User, after the Group, keeps
    // it from userdel, with its number.
    declare(
        &s,
        &[
            flow_doc("Group", "deploy", "{gid: 3001}"),
            flow_doc("User", "deploy", "{ensure: absent}"),
        ],
    );
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert_eq!(line_of(&passwd, "deploy"), None, "{passwd}");
    let group = fs::read_to_string(s.live("/etc/group")).unwrap();
    assert_eq!(line_of(&group, "deploy"), Some("deploy:x:3001:"), "{group}");
    assert_exit(&s.datum(&["plan"]), 0);
}

/// `datum` run with a `chpasswd` first on `PATH` that reads its input and
/// fails, as chpasswd does when it cannot take a line.
fn datum_with_failing_chpasswd(s: &Sandbox, args: &[&str]) -> std::process::Output {
    let bin = s.dir.path().join("bin");
    fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("chpasswd");
    fs::write(
        &fake,
        "#!/bin/sh\ncat >/dev/null\necho 'chpasswd: line 1: refused' >&2\nexit 1\n",
    )
    .unwrap();
    fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    assert_cmd::Command::cargo_bin("datum")
        .unwrap()
        .env("PATH", path)
        .arg("--repo")
        .arg(s.repo())
        .arg("--root")
        .arg(s.root())
        .arg("--host-file")
        .arg(s.dir.path().join("host.yaml"))
        .arg("--color")
        .arg("never")
        .args(args)
        .output()
        .unwrap()
}

/// A new account whose hash chpasswd refuses (one it cannot write: a hash
/// the compile lets through, so a fake chpasswd here): useradd made the
/// account, so the report says it was created and that the password step
/// failed, with chpasswd's status; never the hash.
#[test]
fn a_hash_chpasswd_refuses_after_useradd_reports_the_account_created() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_accounts(&format!(
        "datum: v1alpha1\ntype: User\nname: deploy\ndesired:\n  uid: 2000\n  password_hash: \"{HASH}\"\n"
    ));
    let apply = datum_with_failing_chpasswd(&s, &["--output", "json", "apply"]);
    assert_exit(&apply, 4);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert!(line_of(&passwd, "deploy").is_some(), "{passwd}");
    let report: serde_json::Value = serde_json::from_slice(&apply.stdout).unwrap();
    let user = &report["resources"][0];
    assert_eq!(user["outcome"]["status"], "failed", "{report}");
    let reason = user["outcome"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("account `deploy` created")
            && reason.contains("password hash was not set")
            && reason.contains("`chpasswd deploy` failed")
            && reason.contains("(exit 1)"),
        "{reason}"
    );
    // The human report says it too; the hash is in neither.
    s.write(
        "root/etc/passwd",
        &passwd.replace("deploy:x:2000:", "deploy:x:2001:"),
    );
    let human = datum_with_failing_chpasswd(&s, &["apply"]);
    assert_exit(&human, 4);
    assert!(
        stdout(&human).contains("uid of account `deploy` changed (usermod)"),
        "{}",
        stdout(&human)
    );
    for o in [&apply, &human] {
        let all = format!("{}{}", stdout(o), stderr(o));
        assert!(!all.contains("CANARY"), "the hash leaked:\n{all}");
    }
}

/// A hash chpasswd would refuse (a line longer than its buffer: before,
/// useradd made the account and the apply failed after it) or that no
/// crypt(3) makes (an empty last part, one part, non-ASCII) is refused when
/// the repository compiles: plan and apply exit 1 naming the file, line,
/// resource and field, and nothing is applied. The hash is in no output.
#[test]
fn a_malformed_or_overlong_hash_is_refused_at_compile_without_being_shown() {
    let hashes = [
        format!("$6$saltsalt$CANARY-LONG-{}", "a".repeat(9000)),
        format!("$6$saltsalt$CANARY-{}", "a".repeat(400)),
        "$6$CANARY-EMPTY-LAST$".to_owned(),
        "$6$CANARY-ONE-PART".to_owned(),
        "$6$salt$CANARY-\u{e9}t\u{e9}".to_owned(),
    ];
    for hash in hashes {
        let s = with_accounts(&format!(
            "datum: v1alpha1\ntype: User\nname: deploy\ndesired:\n  uid: 2000\n  password_hash: \"{hash}\"\n"
        ));
        let before = fs::read_to_string(s.live("/etc/passwd")).unwrap();
        let outputs = [
            s.datum(&["plan"]),
            s.datum(&["apply"]),
            s.datum(&["--output", "json", "plan"]),
            s.datum(&["lint"]),
        ];
        for o in &outputs {
            assert_exit(o, 1);
            let all = format!("{}{}", stdout(o), stderr(o));
            assert!(!all.contains("CANARY"), "the hash leaked:\n{all}");
            assert!(!all.contains("aaaaaaaa"), "the hash leaked:\n{all}");
        }
        let human = stderr(&outputs[0]);
        assert!(
            human.contains("base/main.yaml:6:")
                && human.contains("User[deploy]")
                && human.contains("`password_hash`"),
            "{human}"
        );
        assert_eq!(fs::read_to_string(s.live("/etc/passwd")).unwrap(), before);
    }
}

/// `datum plan` and `datum apply` of a User that says `sensitive: true`
/// show none of its fields' values, as `datum check` masks them (before,
/// the plan showed its uid, home and shell), in the human, JSON and
/// Markdown forms; nor does `datum catalogue`. A User sensitive only
/// through its `password_hash` still shows its shell.
#[test]
fn plan_and_apply_mask_every_field_of_a_user_that_is_sensitive_itself() {
    let s = with_accounts(&format!(
        "datum: v1alpha1\ntype: User\nname: vault\nsensitive: true\ndesired:\n  uid: 47213\n  home: /srv/CANARY-HOME-3c9e\n  shell: /bin/CANARY-SHELL-3c9e\n---\n\
         datum: v1alpha1\ntype: User\nname: deploy\ndesired:\n  uid: 2000\n  shell: /bin/deploy-shell\n  password_hash: \"{HASH}\"\n"
    ));
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    let text = stdout(&plan);
    assert!(
        text.contains("/bin/deploy-shell") && text.contains("    uid: 2000"),
        "{text}"
    );
    let vault = &text[text.find("User[vault]").unwrap()..text.find("User[deploy]").unwrap()];
    // The bare marker, never a quoted string that reads as a declared
    // value: the masked fields of the sensitive User and the hash of the
    // other alike.
    assert!(vault.contains("    shell: (sensitive)\n"), "{text}");
    assert!(text.contains("    password_hash: (sensitive)\n"), "{text}");
    assert!(!text.contains("\"(sensitive)\""), "{text}");
    let json = s.datum(&["--output", "json", "plan"]);
    assert_exit(&json, 2);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let vault = doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "User[vault]")
        .unwrap();
    let fields: Vec<&str> = vault["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["ensure", "uid", "home", "shell"], "{doc}");
    let md = s.datum(&["--output", "markdown", "plan"]);
    assert_exit(&md, 2);
    let catalogue = s.datum(&["catalogue"]);
    assert_exit(&catalogue, 0);
    let mut outputs = vec![plan, json, md, catalogue];
    if is_root() {
        let apply = s.datum(&["apply"]);
        assert_exit(&apply, 2);
        assert!(
            stdout(&apply).contains("/bin/deploy-shell"),
            "{}",
            stdout(&apply)
        );
        let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
        assert!(passwd.contains("vault:x:47213:"), "{passwd}");
        fs::write(
            s.live("/etc/passwd"),
            passwd.replace("/bin/CANARY-SHELL-3c9e", "/bin/sh"),
        )
        .unwrap();
        let again = s.datum(&["--output", "json", "apply"]);
        assert_exit(&again, 2);
        outputs.extend([apply, again]);
    }
    for o in &outputs {
        let all = format!("{}{}", stdout(o), stderr(o));
        for canary in ["CANARY", "47213"] {
            assert!(!all.contains(canary), "{canary} shown:\n{all}");
        }
    }
}

/// useradd and groupadd quote what they refuse ("UID 47213 is not
/// unique"): the failure of a User or Group that says `sensitive: true`
/// keeps their status and leaves their words out; another's keeps them.
#[test]
fn a_sensitive_accounts_tool_output_is_not_shown() {
    if !shadow_utils_can_run() {
        return;
    }
    let doc = |kind: &str, name: &str, envelope: &str, desired: &str| {
        format!("datum: v1alpha1\ntype: {kind}\nname: {name}\n{envelope}desired: {desired}\n")
    };
    for sensitive in [true, false] {
        let envelope = if sensitive { "sensitive: true\n" } else { "" };
        let s = with_accounts(
            &[
                doc("User", "vault", envelope, "{uid: 47213}"),
                doc("Group", "vaultg", envelope, "{gid: 47214}"),
            ]
            .join("---\n"),
        );
        // Taken by accounts no resource declares.
        let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
        s.write(
            "root/etc/passwd",
            &format!("{passwd}other:x:47213:100::/nonexistent:/bin/sh\n"),
        );
        let group = fs::read_to_string(s.live("/etc/group")).unwrap();
        s.write("root/etc/group", &format!("{group}otherg:x:47214:\n"));
        let apply = s.datum(&["apply"]);
        assert_exit(&apply, 4);
        let json = s.datum(&["--output", "json", "apply"]);
        assert_exit(&json, 4);
        for o in [&apply, &json] {
            let all = format!("{}{}", stdout(o), stderr(o));
            assert!(all.contains("`useradd vault` failed"), "{all}");
            assert!(all.contains("`groupadd vaultg` failed"), "{all}");
            for canary in ["47213", "47214", "not unique"] {
                assert_eq!(all.contains(canary), !sensitive, "{canary}:\n{all}");
            }
            assert_eq!(all.contains("its output is not shown"), sensitive, "{all}");
        }
    }
}

/// `datum check` of a User that declares a hash masks the hash only: its
/// shell's drift shows the shells, as `datum plan` does. A User that is
/// `sensitive: true` itself keeps every field masked. The hash is in no
/// output and not in the state store.
#[test]
fn check_masks_only_the_hash_of_a_user_unless_the_user_is_sensitive() {
    if !shadow_utils_can_run() {
        return;
    }
    let user = |name: &str, uid: u32, envelope: &str| {
        format!(
            "datum: v1alpha1\ntype: User\nname: {name}\n{envelope}desired:\n  uid: {uid}\n  shell: /bin/sh\n  password_hash: \"{HASH}\"\n"
        )
    };
    let s = with_accounts(&format!(
        "{}---\n{}",
        user("deploy", 2000, ""),
        user("vault", 2001, "sensitive: true\n")
    ));
    let mut outputs = vec![s.datum(&["apply"])];
    assert_exit(&outputs[0], 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    fs::write(
        s.live("/etc/passwd"),
        passwd.replace(":/bin/sh\n", ":/bin/dash\n"),
    )
    .unwrap();
    let shadow = fs::read_to_string(s.live("/etc/shadow")).unwrap();
    fs::write(
        s.live("/etc/shadow"),
        shadow.replace(HASH, "$6$other$CANARY-OTHER-b81d"),
    )
    .unwrap();
    let markdown = s.root().join("check.md");
    let check = s.datum(&["check", "--markdown", markdown.to_str().unwrap()]);
    assert_exit(&check, 2);
    let json = s.datum(&["--output", "json", "check"]);
    assert_exit(&json, 2);
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);

    // The plan and the check both show deploy's shells.
    let text = stdout(&check);
    let block = |text: &str, id: &str| -> String {
        let start = text
            .find(id)
            .unwrap_or_else(|| panic!("{id} missing:\n{text}"));
        let rest = &text[start + id.len()..];
        let end = rest.find("User[").unwrap_or(rest.len());
        rest[..end].to_owned()
    };
    for shown in [
        block(&stdout(&plan), "User[deploy]"),
        block(&text, "User[deploy]"),
    ] {
        assert!(
            shown.contains("/bin/dash") && shown.contains("/bin/sh"),
            "{shown}\n---\n{text}"
        );
        assert!(shown.contains("password_hash"), "{shown}");
    }
    // Not vault's: it is sensitive itself.
    let vault = block(&text, "User[vault]");
    assert!(
        vault.contains("shell") && !vault.contains("/bin/"),
        "{vault}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let changes = |id: &str| -> Vec<serde_json::Value> {
        doc["findings"]
            .as_array()
            .unwrap_or_else(|| panic!("{doc}"))
            .iter()
            .filter(|f| f["subject"] == id || f["id"] == id)
            .flat_map(|f| f["diffs"].as_array().cloned().unwrap_or_default())
            .collect()
    };
    let deploy = serde_json::to_string(&changes("User[deploy]")).unwrap();
    assert!(deploy.contains("/bin/dash"), "{doc}");
    let vault = serde_json::to_string(&changes("User[vault]")).unwrap();
    assert!(vault.contains("shell") && !vault.contains("/bin/"), "{doc}");

    outputs.extend([check, json, plan]);
    for o in &outputs {
        let all = format!("{}{}", stdout(o), stderr(o));
        assert!(!all.contains("CANARY"), "the hash leaked:\n{all}");
    }
    let md = fs::read_to_string(&markdown).unwrap();
    assert!(!md.contains("CANARY"), "{md}");
    for entry in fs::read_dir(s.live("/var/lib/datum")).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() {
            let bytes = fs::read(entry.path()).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains("CANARY"),
                "{:?} holds the hash",
                entry.path()
            );
        }
    }
}

/// userdel takes a user's own group with it (`USERGROUPS_ENAB`): a Group of
/// that name declared without a gid, still present, keeps the number it
/// had (the User keeps it from userdel), or the files owned by it would
/// belong to no group (or a group made later).
#[test]
fn a_group_named_like_a_removed_user_keeps_its_gid() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_usergroups(&[
        flow_doc("Group", "web", "{}"),
        flow_doc("User", "web", "{uid: 2000}"),
        // Made after `web`: a group made again would get a new number.
        flow_doc("Group", "ops", "{}"),
    ]);
    assert_exit(&s.datum(&["apply"]), 2);
    let group = fs::read_to_string(s.live("/etc/group")).unwrap();
    let web = line_of(&group, "web").map(str::to_owned);
    assert!(web.is_some(), "{group}");
    assert_ne!(line_of(&group, "ops"), None, "{group}");

    declare(
        &s,
        &[
            flow_doc("Group", "web", "{}"),
            flow_doc("User", "web", "{ensure: absent}"),
            flow_doc("Group", "ops", "{}"),
        ],
    );
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert_eq!(line_of(&passwd, "web"), None, "{passwd}");
    let group = fs::read_to_string(s.live("/etc/group")).unwrap();
    assert_eq!(line_of(&group, "web"), web.as_deref(), "{group}");
    assert_exit(&s.datum(&["plan"]), 0);
}

/// Each resource of a plan or apply report (`--output json`), with what
/// would be or was done: `(id, action, outcome status)`.
fn steps(out: &std::process::Output) -> Vec<(String, String, String)> {
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    report["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or("").to_owned();
            (
                text(&r["id"]),
                text(&r["action"]),
                text(&r["outcome"]["status"]),
            )
        })
        .collect()
}

/// A User removed whose own group a Group declares present (without a gid):
/// the plan says what the apply does, resource by resource. The group is
/// kept from userdel (renamed for the while), so both leave the Group
/// unchanged; the apply used to remove it with the user and make it again,
/// reported changed, where the plan said unchanged.
#[test]
fn plan_and_apply_agree_on_a_group_kept_from_userdel() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_usergroups(&[
        flow_doc("Group", "web", "{}"),
        flow_doc("User", "web", "{uid: 2000}"),
        flow_doc("Group", "ops", "{}"),
    ]);
    assert_exit(&s.datum(&["apply"]), 2);
    let before = fs::read_to_string(s.live("/etc/group")).unwrap();

    declare(
        &s,
        &[
            flow_doc("Group", "web", "{}"),
            flow_doc("User", "web", "{ensure: absent}"),
            flow_doc("Group", "ops", "{}"),
        ],
    );
    let plan = s.datum(&["--output", "json", "plan"]);
    assert_exit(&plan, 2);
    let apply = s.datum(&["--output", "json", "apply"]);
    assert_exit(&apply, 2);
    let (planned, applied) = (steps(&plan), steps(&apply));
    let group = |steps: &[(String, String, String)]| {
        steps
            .iter()
            .find(|(id, ..)| id == "Group[web]")
            .cloned()
            .unwrap()
    };
    assert_eq!(group(&planned).2, "unchanged", "{planned:?}");
    assert_eq!(group(&applied).2, "unchanged", "{applied:?}");
    // Resource by resource: the same action, and a change where one would be.
    let done = |steps: &[(String, String, String)]| {
        let mut v: Vec<(String, String, bool)> = steps
            .iter()
            .map(|(id, action, status)| {
                (
                    id.clone(),
                    action.clone(),
                    matches!(status.as_str(), "would_change" | "changed"),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(done(&planned), done(&applied), "{planned:?}\n{applied:?}");
    let group = fs::read_to_string(s.live("/etc/group")).unwrap();
    assert_eq!(line_of(&group, "web"), line_of(&before, "web"), "{group}");
    assert!(!group.contains("datum-kept"), "{group}");
    assert_exit(&s.datum(&["plan"]), 0);
}

/// A pass killed while a User's removal keeps its declared group from
/// userdel (renamed `NAME.datum-kept` for the while) leaves the group under
/// that name, with its number: the next pass renames it back, so it keeps
/// the number, whatever groupadd would give a new group (here 1003, after
/// `ops` and `late`). Both kill points, made by hand with the programs the
/// pass runs, in its order: `web` killed after userdel, before the name is
/// given back; `api` killed after the rename, before userdel.
#[test]
fn a_group_left_renamed_by_a_killed_pass_keeps_its_gid() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_usergroups(&[
        flow_doc("Group", "web", "{}"),
        flow_doc("User", "web", "{uid: 2000}"),
        flow_doc("Group", "api", "{}"),
        flow_doc("User", "api", "{uid: 2001}"),
        flow_doc("Group", "ops", "{}"),
    ]);
    assert_exit(&s.datum(&["apply"]), 2);
    let before = fs::read_to_string(s.live("/etc/group")).unwrap();
    assert!(line_of(&before, "web").is_some(), "{before}");
    assert!(line_of(&before, "api").is_some(), "{before}");

    shadow_tool(&s, &["groupmod", "-n", "web.datum-kept", "--", "web"]);
    shadow_tool(&s, &["userdel", "--", "web"]);
    shadow_tool(&s, &["groupmod", "-n", "api.datum-kept", "--", "api"]);
    // A group made meanwhile: the next free number is past it.
    shadow_tool(&s, &["groupadd", "--", "late"]);

    declare(
        &s,
        &[
            flow_doc("Group", "web", "{}"),
            flow_doc("User", "web", "{ensure: absent}"),
            flow_doc("Group", "api", "{}"),
            flow_doc("User", "api", "{ensure: absent}"),
            flow_doc("Group", "ops", "{}"),
        ],
    );
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert_eq!(line_of(&passwd, "web"), None, "{passwd}");
    assert_eq!(line_of(&passwd, "api"), None, "{passwd}");
    let group = fs::read_to_string(s.live("/etc/group")).unwrap();
    assert_eq!(line_of(&group, "web"), line_of(&before, "web"), "{group}");
    assert_eq!(line_of(&group, "api"), line_of(&before, "api"), "{group}");
    assert!(!group.contains("datum-kept"), "{group}");
    let gshadow = fs::read_to_string(s.live("/etc/gshadow")).unwrap();
    assert!(!gshadow.contains("datum-kept"), "{gshadow}");
    assert_exit(&s.datum(&["plan"]), 0);
}

/// The name a User's removal keeps its declared group under
/// (`NAME.datum-kept`) taken by another group: the removal fails before
/// anything runs, saying why Datum would rename a group to remove a user
/// and what to do, and the user, both groups and gshadow stay as they were
/// (groupmod's own refusal said only that the name exists).
#[test]
fn a_kept_name_another_group_holds_fails_the_removal_saying_why() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_usergroups(&[
        flow_doc("Group", "web", "{}"),
        flow_doc("User", "web", "{uid: 2000}"),
    ]);
    assert_exit(&s.datum(&["apply"]), 2);
    shadow_tool(&s, &["groupadd", "-g", "4321", "--", "web.datum-kept"]);
    let files = |name: &str| fs::read_to_string(s.live(name)).unwrap();
    let before = [
        files("/etc/passwd"),
        files("/etc/group"),
        files("/etc/gshadow"),
    ];

    declare(
        &s,
        &[
            flow_doc("Group", "web", "{}"),
            flow_doc("User", "web", "{ensure: absent}"),
        ],
    );
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 4);
    let err = stdout(&apply) + &stderr(&apply);
    assert!(
        err.contains("`web.datum-kept` the group is kept under meanwhile is taken by another group (gid 4321)"),
        "{err}"
    );
    assert!(err.contains("rename or remove that group"), "{err}");
    assert_eq!(
        [
            files("/etc/passwd"),
            files("/etc/group"),
            files("/etc/gshadow")
        ],
        before
    );
}

/// The password hash never reaches a command line (readable by every local
/// user in `/proc/PID/cmdline` and `ps` while the program runs) nor an
/// environment: every shadow-utils program Datum starts is a wrapper first
/// on `PATH` that logs its arguments and environment, then runs the real
/// one. A User created with a hash, then its hash and shell changed by
/// hand and put back: the log shows each program (chpasswd given `-e`
/// only) and the hash in none of them.
#[test]
fn the_password_hash_is_on_no_command_line_nor_environment() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_accounts(&manifest("/bin/sh", "present"));
    let bin = s.dir.path().join("bin");
    fs::create_dir_all(&bin).unwrap();
    // In the root: the tools run confined to it (`datum_host::confine`),
    // where nothing else of the machine is writable.
    let log = s.root().join("argv.log");
    for program in [
        "useradd", "usermod", "userdel", "groupadd", "groupmod", "groupdel", "chpasswd",
    ] {
        let real = ["/usr/sbin", "/sbin", "/usr/bin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(program))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("{program} not installed"));
        let wrapper = bin.join(program);
        fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\n{{ printf '%s' {program}; for a in \"$@\"; do printf ' [%s]' \"$a\"; done; echo; env | sed 's/^/  env: /'; }} >>'{log}'\nexec {real} \"$@\"\n",
                log = log.display(),
                real = real.display()
            ),
        )
        .unwrap();
        fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
    }
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let datum = |args: &[&str]| {
        assert_cmd::Command::cargo_bin("datum")
            .unwrap()
            .env("PATH", &path)
            .arg("--repo")
            .arg(s.repo())
            .arg("--root")
            .arg(s.root())
            .arg("--host-file")
            .arg(s.dir.path().join("host.yaml"))
            .arg("--color")
            .arg("never")
            .args(args)
            .output()
            .unwrap()
    };
    assert_exit(&datum(&["apply"]), 2);
    let shadow = fs::read_to_string(s.live("/etc/shadow")).unwrap();
    assert!(shadow.contains(HASH), "the hash was not set:\n{shadow}");
    // Drift of the hash and the shell: usermod and chpasswd again.
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    fs::write(
        s.live("/etc/passwd"),
        passwd.replace(":/bin/sh\n", ":/bin/bash\n"),
    )
    .unwrap();
    fs::write(
        s.live("/etc/shadow"),
        shadow.replace(HASH, "$6$other$not-the-declared-one"),
    )
    .unwrap();
    assert_exit(&datum(&["apply"]), 2);
    assert!(
        fs::read_to_string(s.live("/etc/shadow"))
            .unwrap()
            .contains(HASH)
    );
    let logged = fs::read_to_string(&log).unwrap();
    let programs: Vec<&str> = logged
        .lines()
        .filter(|l| !l.starts_with("  env: "))
        .collect();
    for expected in ["groupadd", "useradd", "usermod"] {
        assert!(
            programs
                .iter()
                .any(|l| l.starts_with(&format!("{expected} "))),
            "{expected} was not run through the wrapper:\n{logged}"
        );
    }
    let chpasswd: Vec<&&str> = programs
        .iter()
        .filter(|l| l.starts_with("chpasswd"))
        .collect();
    assert_eq!(chpasswd.len(), 2, "{logged}");
    for line in chpasswd {
        assert!(line.starts_with("chpasswd [-e] [--root]"), "{line}");
    }
    for secret in [HASH, "CANARY", "saltsalt"] {
        assert!(
            !logged.contains(secret),
            "{secret} reached a program's arguments or environment:\n{logged}"
        );
    }
}

/// useradd writes `/etc/passwd` before `/etc/shadow` (each renamed into
/// place in turn): killed in between, it leaves an account with no shadow
/// entry, which every tool reading shadow calls broken (`pwck`: "no
/// matching password file entry in /etc/shadow") and nothing can log in
/// as. The next plan must not call it converged: it shows the missing
/// entry, the apply adds it locked (`!`, as useradd would have), and the
/// plan after that is clean. A User that declares a hash gets it set.
#[test]
fn an_account_useradd_left_without_its_shadow_entry_is_completed() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_accounts(&format!(
        "datum: v1alpha1\ntype: User\nname: deploy\ndesired: {{uid: 2000, shell: /bin/sh}}\n---\n\
         datum: v1alpha1\ntype: User\nname: web\ndesired:\n  uid: 2001\n  shell: /bin/sh\n  password_hash: \"{HASH}\"\n"
    ));
    // What a useradd killed between its two renames leaves.
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    s.write(
        "root/etc/passwd",
        &format!(
            "{passwd}deploy:x:2000:100::/home/deploy:/bin/sh\nweb:x:2001:100::/home/web:/bin/sh\n"
        ),
    );
    let shadow_before = fs::read_to_string(s.live("/etc/shadow")).unwrap();
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    let text = stdout(&plan);
    assert!(
        text.contains("~ User[deploy]") && text.contains("shadow: \"missing\" -> \"present\""),
        "{text}"
    );
    assert_eq!(
        fs::read_to_string(s.live("/etc/shadow")).unwrap(),
        shadow_before
    );
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 2);
    let shadow = fs::read_to_string(s.live("/etc/shadow")).unwrap();
    assert!(
        line_of(&shadow, "deploy").is_some_and(|l| l.starts_with("deploy:!:")),
        "{shadow}"
    );
    assert!(
        line_of(&shadow, "web").is_some_and(|l| l.starts_with(&format!("web:{HASH}:"))),
        "{shadow}"
    );
    let again = s.datum(&["plan"]);
    assert_exit(&again, 0);
    for o in [&plan, &apply, &again] {
        assert!(!format!("{}{}", stdout(o), stderr(o)).contains("CANARY"));
    }
}

/// groupadd renames `group` into place before `gshadow`: killed in
/// between, it leaves a group with no gshadow entry (`grpck`: "no matching
/// group file entry in /etc/gshadow"). The next plan shows it, the apply
/// adds the entry (`!`, as groupadd would have), and the plan after that
/// is clean.
#[test]
fn a_group_groupadd_left_without_its_gshadow_entry_is_completed() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_accounts("datum: v1alpha1\ntype: Group\nname: ops\ndesired: {gid: 3000}\n");
    let group = fs::read_to_string(s.live("/etc/group")).unwrap();
    s.write("root/etc/group", &format!("{group}ops:x:3000:\n"));
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    let text = stdout(&plan);
    assert!(
        text.contains("~ Group[ops]") && text.contains("gshadow: \"missing\" -> \"present\""),
        "{text}"
    );
    assert_exit(&s.datum(&["apply"]), 2);
    let gshadow = fs::read_to_string(s.live("/etc/gshadow")).unwrap();
    assert_eq!(line_of(&gshadow, "ops"), Some("ops:!::"), "{gshadow}");
    assert_exit(&s.datum(&["plan"]), 0);
}

/// Copies `program` and the libraries `ldd` names for it into the root, at
/// their own paths (a root that can run it in a chroot).
fn copy_with_libraries(root: &std::path::Path, program: &str) {
    let ldd = std::process::Command::new("ldd")
        .arg(program)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&ldd.stdout).into_owned();
    let mut files = vec![program.to_owned()];
    for line in listed.lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(path) = path.filter(|p| p.starts_with('/')) {
            files.push(path.to_owned());
        }
    }
    for file in files {
        let to = root.join(file.trim_start_matches('/'));
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::copy(&file, &to).unwrap();
    }
}

/// shadow-utils given `--root ROOT` chroot into it as root and there run
/// code the root holds (`ROOT/usr/sbin/nscd -i` after a change, the name
/// service modules `ROOT/etc/nsswitch.conf` names). A repository can put
/// that code there itself (a File at `/usr/sbin/nscd`, mode 0755), and a
/// chroot does not hold root: the program ran with every capability, so it
/// could mount file systems (a `/proc`, through which every process's root
/// is reached) and make device nodes (the machine's disk). The tools now
/// run confined: a root of their own holding nothing of the machine's but
/// `/usr` (read-only) and the target root, without the capabilities to
/// mount or make devices, no network, their own processes.
#[test]
fn code_a_root_holds_never_reaches_the_machine_through_shadow_utils() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_accounts(&manifest("/bin/sh", "present"));
    let root = s.root();
    copy_with_libraries(&root, "/bin/sh");
    copy_with_libraries(&root, "/bin/mount");
    copy_with_libraries(&root, "/bin/mknod");
    fs::create_dir_all(root.join("proc")).unwrap();
    s.write(
        "root/usr/sbin/nscd",
        "#!/bin/sh\necho \"ran $*\" >> /nscd.log\n\
         mount -t proc proc /proc 2>>/nscd.log && echo MOUNTED >> /nscd.log\n\
         mknod /disk b 8 0 2>>/nscd.log && echo MKNOD >> /nscd.log\n\
         exit 0\n",
    );
    fs::set_permissions(
        s.live("/usr/sbin/nscd"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert!(line_of(&passwd, "deploy").is_some(), "{passwd}");
    // The root's program did run (inside the root: the test is live) ...
    let log = fs::read_to_string(root.join("nscd.log")).unwrap_or_default();
    assert!(
        log.contains("ran -i passwd"),
        "the root's nscd was not run: {log}"
    );
    // ... and could neither mount nor make a device node.
    assert!(
        !log.contains("MOUNTED") && !log.contains("MKNOD"),
        "code the root holds ran with the machine's capabilities:\n{log}"
    );
}

/// What shadow-utils are certain to refuse is a change that would fail in
/// the plan (exit 4, naming why and the resource), as the apply fails: a
/// User naming in `groups` or `gid` a group no account file has and no
/// resource makes first, a `uid` another account holds, a Group's `gid`
/// another group holds. A group a Group of the same pass makes, or a number
/// another User of the pass gives up, stays pending (exit 2): the apply
/// decides.
#[test]
fn what_shadow_utils_refuse_for_certain_is_a_plan_that_would_fail() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_accounts("");
    let plan_of = |docs: &[String]| {
        declare(&s, docs);
        s.datum(&["plan"])
    };
    let cases = [
        (
            flow_doc("User", "deploy", "{uid: 2000, groups: [users, nosuch]}"),
            "User[deploy]",
            "would fail: group `nosuch` (named in `groups`) is in no account file",
        ),
        (
            flow_doc("User", "deploy", "{uid: 2000, gid: nosuch}"),
            "User[deploy]",
            "would fail: group `nosuch` (named in `gid`) is in no account file",
        ),
        (
            flow_doc("User", "deploy", "{uid: 2000, gid: 4242}"),
            "User[deploy]",
            "would fail: group `4242` (named in `gid`) is in no account file",
        ),
        (
            flow_doc("User", "deploy", "{uid: 65534}"),
            "User[deploy]",
            "would fail: uid 65534 belongs to account `nobody`",
        ),
        (
            flow_doc("Group", "ops", "{gid: 100}"),
            "Group[ops]",
            "would fail: gid 100 belongs to group `users`",
        ),
    ];
    for (doc, id, why) in &cases {
        let plan = plan_of(std::slice::from_ref(doc));
        assert_exit(&plan, 4);
        let text = stdout(&plan);
        assert!(text.contains(id) && text.contains(why), "{doc}:\n{text}");
        // The apply fails as the plan said, and the root stays as it was.
        let apply = s.datum(&["apply"]);
        assert_exit(&apply, 4);
        let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
        assert_eq!(line_of(&passwd, "deploy"), None, "{passwd}");
    }
    // An account changed: the same for a new uid another holds, or a group
    // added that nobody has.
    declare(&s, &[flow_doc("User", "deploy", "{uid: 2000}")]);
    assert_exit(&s.datum(&["apply"]), 2);
    for (desired, why) in [
        ("{uid: 0}", "would fail: uid 0 belongs to account `root`"),
        (
            "{uid: 2000, groups: [nosuch]}",
            "would fail: group `nosuch` (named in `groups`) is in no account file",
        ),
    ] {
        let plan = plan_of(&[flow_doc("User", "deploy", desired)]);
        assert_exit(&plan, 4);
        assert!(stdout(&plan).contains(why), "{desired}:\n{}", stdout(&plan));
    }
    // A User or Group that says `sensitive: true` itself: the reason names
    // none of its values (nor the account holding its number).
    for (doc, values) in [
        (
            "datum: v1alpha1\ntype: User\nname: deploy\nsensitive: true\ndesired: {uid: 65534, groups: [zzsecret]}\n",
            &["65534", "nobody", "zzsecret"][..],
        ),
        (
            "datum: v1alpha1\ntype: User\nname: deploy\nsensitive: true\ndesired: {groups: [zzsecret]}\n",
            &["zzsecret"][..],
        ),
        (
            "datum: v1alpha1\ntype: Group\nname: ops\nsensitive: true\ndesired: {gid: 100}\n",
            &["gid 100", "users"][..],
        ),
    ] {
        s.write("repo/base/main.yaml", doc);
        let plan = s.datum(&["plan"]);
        assert_exit(&plan, 4);
        let text = format!("{}{}", stdout(&plan), stderr(&plan));
        assert!(text.contains("would fail: "), "{text}");
        for value in values {
            assert!(!text.contains(value), "{value} shown:\n{text}");
        }
    }
    // Made or given up earlier in the pass: pending, and the apply works.
    let docs = [
        flow_doc("Group", "ops", "{gid: 3000}"),
        flow_doc("User", "deploy", "{uid: 2000, gid: ops, groups: [ops]}"),
        flow_doc("User", "nobody", "{ensure: absent}"),
        flow_doc("User", "late", "{uid: 65534}"),
    ];
    let plan = plan_of(&docs);
    assert_exit(&plan, 2);
    assert!(!stdout(&plan).contains("would fail"), "{}", stdout(&plan));
}

/// A resource naming an account that another declaration of the repository
/// removes contradicts it: a File owned by a User declared absent fails
/// once userdel ran (unknown user) or, applied first, is left owned by a
/// number no account has; a User joining or grouped under a Group declared
/// absent fails once groupdel ran (or groupdel refuses a primary group).
/// `datum lint` warns at the resource's line, naming the remover and
/// where it is declared (lint passes: a warning); a name no removal
/// touches is not warned about.
#[test]
fn naming_an_account_the_repository_removes_is_a_warning_at_its_line() {
    let s = Sandbox::with_base(
        &[
            flow_doc("User", "gone", "{ensure: absent}"),
            flow_doc("Group", "old", "{ensure: absent}"),
            flow_doc(
                "File",
                "key",
                "{path: /key, owner: gone, group: old, content: k}",
            ),
            flow_doc("User", "app", "{gid: old, groups: [users, old]}"),
            flow_doc(
                "File",
                "fine",
                "{path: /fine, owner: root, group: users, content: k}",
            ),
        ]
        .join("---\n"),
    );
    let lint = s.datum(&["lint"]);
    assert_exit(&lint, 0);
    let text = stderr(&lint);
    for (id, field, what, at) in [
        (
            "File[key]",
            "owner",
            "account User[gone]",
            "base/main.yaml:1:1",
        ),
        (
            "File[key]",
            "group",
            "group Group[old]",
            "base/main.yaml:6:1",
        ),
        ("User[app]", "gid", "group Group[old]", "base/main.yaml:6:1"),
        (
            "User[app]",
            "groups",
            "group Group[old]",
            "base/main.yaml:6:1",
        ),
    ] {
        let wanted =
            format!("warning: {id}: `{field}` names the {what} removes (ensure: absent, {at})");
        assert!(text.contains(&wanted), "{wanted}\n{text}");
    }
    assert!(!text.contains("File[fine]"), "{text}");
}

/// groupdel refuses to remove a group that is an account's primary group
/// ("cannot remove the primary group of user 'nobody'"): the plan says the
/// removal would fail, naming the account, unless that account's removal
/// (a User declared absent, ordered first) comes before it; then the plan
/// is pending and the apply removes both.
#[test]
fn removing_an_accounts_primary_group_is_a_plan_that_would_fail() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_accounts(&flow_doc("Group", "nogroup", "{ensure: absent}"));
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 4);
    assert!(
        stdout(&plan).contains(
            "would fail: group `nogroup` is the primary group of account `nobody`: groupdel refuses"
        ),
        "{}",
        stdout(&plan)
    );
    assert_exit(&s.datum(&["apply"]), 4);
    let group = fs::read_to_string(s.live("/etc/group")).unwrap();
    assert!(line_of(&group, "nogroup").is_some(), "{group}");
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: Group\nname: nogroup\nsensitive: true\ndesired: {ensure: absent}\n",
    );
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 4);
    assert!(!stdout(&plan).contains("nobody"), "{}", stdout(&plan));
    declare(
        &s,
        &[
            flow_doc("Group", "nogroup", "{ensure: absent}"),
            flow_doc("User", "nobody", "{ensure: absent}"),
        ],
    );
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    assert_exit(&s.datum(&["apply"]), 2);
    let group = fs::read_to_string(s.live("/etc/group")).unwrap();
    assert_eq!(line_of(&group, "nogroup"), None, "{group}");
}

/// A User whose `gid` names by number the group a Group of the repository
/// makes comes after that Group, as one naming it by name does: useradd
/// -g 3000 refuses a number no group has. Before, nothing ordered them,
/// and the first apply failed when the User came first.
#[test]
fn a_primary_group_by_number_is_made_before_its_user() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_accounts(
        &[
            flow_doc("User", "deploy", "{uid: 2000, gid: 3000}"),
            flow_doc("Group", "ops", "{gid: 3000}"),
        ]
        .join("---\n"),
    );
    assert_exit(&s.datum(&["plan"]), 2);
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert!(
        line_of(&passwd, "deploy").is_some_and(|l| l.starts_with("deploy:x:2000:3000:")),
        "{passwd}"
    );
    assert_exit(&s.datum(&["plan"]), 0);
}

/// What shadow-utils print on success (useradd's and usermod's warnings:
/// a shell the root does not have, a uid outside UID_MIN..UID_MAX) is
/// passed on as a warning of the pass: under the summary, in JSON's
/// `warnings`. A User that is `sensitive: true` itself gets the fact
/// without the words (they quote its values).
#[test]
fn what_shadow_utils_warn_of_on_success_is_a_warning_of_the_pass() {
    if !shadow_utils_can_run() {
        return;
    }
    let user = |envelope: &str, shell: &str| {
        format!(
            "datum: v1alpha1\ntype: User\nname: w1\n{envelope}desired: {{uid: 70000, shell: {shell}}}\n"
        )
    };
    for sensitive in [false, true] {
        let envelope = if sensitive { "sensitive: true\n" } else { "" };
        let s = with_accounts(&user(envelope, "/bin/nonexistent"));
        let apply = s.datum(&["apply"]);
        assert_exit(&apply, 2);
        let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
        assert!(line_of(&passwd, "w1").is_some(), "{passwd}");
        let human = format!("{}{}", stdout(&apply), stderr(&apply));
        let warnings: Vec<&str> = human
            .lines()
            .filter(|l| l.starts_with("warning: User[w1]: useradd"))
            .collect();
        if sensitive {
            assert_eq!(warnings.len(), 1, "{human}");
            assert!(
                warnings[0].contains("its output is not shown: the resource is sensitive"),
                "{human}"
            );
            for canary in ["70000", "nonexistent", "UID_MIN"] {
                assert!(!human.contains(canary), "{canary}:\n{human}");
            }
        } else {
            assert!(
                warnings
                    .iter()
                    .any(|w| w.contains("missing or non-executable shell '/bin/nonexistent'")),
                "{human}"
            );
            assert!(
                warnings
                    .iter()
                    .any(|w| w.contains("uid 70000 outside of the UID_MIN")),
                "{human}"
            );
        }
        // usermod's, as JSON's warnings.
        declare(&s, &[user(envelope, "/bin/nope")]);
        let json = s.datum(&["--output", "json", "apply"]);
        assert_exit(&json, 2);
        let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        let said = doc["warnings"].to_string();
        assert!(said.contains("User[w1]: usermod"), "{said}");
        assert_eq!(said.contains("/bin/nope"), !sensitive, "{said}");
        // Nothing said, no warning.
        let again = s.datum(&["--output", "json", "apply"]);
        assert_exit(&again, 0);
        let doc: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
        assert!(doc.get("warnings").is_none(), "{doc}");
    }
}

/// A revert is an apply pass: what shadow-utils say although they succeed
/// (525b3ea's warnings of the pass) was shown by `datum apply` only;
/// `datum reconcile` reverted the account without a word of it. Now its
/// report says it as apply does: a `warning:` line under the summary, and
/// JSON's `warnings`.
#[test]
fn what_shadow_utils_warn_of_in_a_revert_is_a_warning_of_the_reconcile() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_accounts(
        "datum: v1alpha1\ntype: User\nname: w1\nclass: critical\ndesired: {uid: 1500, shell: /bin/nonexistent}\n",
    );
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n\
         classes:\n  critical: {interval: 60s, policy: revert}\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    let drift = |s: &Sandbox| {
        let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
        assert!(passwd.contains(":/bin/nonexistent\n"), "{passwd}");
        s.write(
            "root/etc/passwd",
            &passwd.replace(":/bin/nonexistent\n", ":/bin/sh\n"),
        );
    };
    drift(&s);
    let out = s.datum(&["reconcile"]);
    let human = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("warning: User[w1]: usermod")
                && l.contains("missing or non-executable shell '/bin/nonexistent'")),
        "{human}"
    );
    drift(&s);
    let json = s.datum(&["--output", "json", "reconcile"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let said = doc["warnings"].to_string();
    assert!(said.contains("User[w1]: usermod"), "{said}\n{doc}");
    // Nothing reverted, nothing said.
    let quiet = s.datum(&["--output", "json", "reconcile"]);
    let doc: serde_json::Value = serde_json::from_slice(&quiet.stdout).unwrap();
    assert!(doc.get("warnings").is_none(), "{doc}");
}

/// `comment` (passwd's fifth field, GECOS; Puppet's and Ansible's
/// `comment`) is made by useradd, drift of it is found by `check` and
/// undone by `apply` (usermod -c), an empty one is managed too, and one
/// with `:` or a line break is refused at compile time naming the file,
/// the line and the resource, nothing written.
#[test]
fn the_comment_is_made_checked_and_changed_through_shadow_utils() {
    if !shadow_utils_can_run() {
        return;
    }
    let user = |comment: &str| {
        flow_doc(
            "User",
            "alice",
            &format!("{{uid: 2001, comment: {comment}}}"),
        )
    };
    let s = with_accounts(&user("\"Alice Liddell,Room 4,,\""));
    assert_exit(&s.datum(&["apply"]), 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert_eq!(
        line_of(&passwd, "alice").map(|l| l.split(':').nth(4)),
        Some(Some("Alice Liddell,Room 4,,")),
        "{passwd}"
    );
    assert_exit(&s.datum(&["plan"]), 0);
    // Changed by hand (chfn's way): drift, named by field, both values.
    s.write(
        "root/etc/passwd",
        &passwd.replace("Alice Liddell,Room 4,,", "Alice L."),
    );
    let check = s.datum(&["--output", "json", "check"]);
    assert_exit(&check, 2);
    let text = stdout(&check);
    assert!(text.contains("\"comment\""), "{text}");
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    let shown = stdout(&plan);
    assert!(
        shown.contains("comment: \"Alice L.\" -> \"Alice Liddell,Room 4,,\""),
        "{shown}"
    );
    assert_exit(&s.datum(&["apply"]), 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert_eq!(
        line_of(&passwd, "alice").map(|l| l.split(':').nth(4)),
        Some(Some("Alice Liddell,Room 4,,")),
        "{passwd}"
    );
    // An empty comment is declared as such and made so.
    declare(&s, &[user("\"\"")]);
    assert_exit(&s.datum(&["apply"]), 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    assert_eq!(
        line_of(&passwd, "alice").map(|l| l.split(':').nth(4)),
        Some(Some("")),
        "{passwd}"
    );
    assert_exit(&s.datum(&["plan"]), 0);
    // A colon or a line break is refused before anything runs.
    for bad in ["\"a:b\"", "\"a\\nb\""] {
        declare(&s, &[user(bad)]);
        let before = fs::read_to_string(s.live("/etc/passwd")).unwrap();
        for command in ["lint", "plan", "apply"] {
            let o = s.datum(&[command]);
            assert_exit(&o, 1);
            let err = stderr(&o);
            assert!(
                err.contains("User[alice]")
                    && err.contains("`comment` must be text without `:`")
                    && err.contains("main.yaml:4"),
                "{command} {bad}: {err}"
            );
        }
        assert_eq!(fs::read_to_string(s.live("/etc/passwd")).unwrap(), before);
    }
}

/// `update_password: on_create` (Ansible's word): the hash is set when
/// Datum makes the account and never compared after, so a user who changed
/// their own password is no drift (plan and check exit 0) and neither
/// apply nor a `revert` class sets it back (before, with no such choice,
/// `reconcile` undid the user's new password). `always` compares it again.
#[test]
fn an_initial_password_is_set_when_the_account_is_made_and_then_left_alone() {
    if !shadow_utils_can_run() {
        return;
    }
    let user = |when: &str| {
        format!(
            "datum: v1alpha1\ntype: User\nname: alice\nclass: critical\ndesired: {{uid: 2001, password_hash: \"{HASH}\", update_password: {when}}}\n"
        )
    };
    let s = with_accounts(&user("on_create"));
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n\
         classes:\n  critical: {interval: 60s, policy: revert}\n",
    );
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    assert!(
        stdout(&plan).contains("password_hash: (sensitive)"),
        "{}",
        stdout(&plan)
    );
    assert_exit(&s.datum(&["apply"]), 2);
    let shadow = fs::read_to_string(s.live("/etc/shadow")).unwrap();
    assert!(
        line_of(&shadow, "alice").is_some_and(|l| l.starts_with(&format!("alice:{HASH}:"))),
        "{shadow}"
    );
    // The user sets their own password.
    let mine = "$6$mysalt$CANARY-USERS-OWN-b81d";
    let mut chpasswd = std::process::Command::new("chpasswd")
        .args(["-e", "--root"])
        .arg(s.root())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        chpasswd.stdin.as_mut().unwrap(),
        format!("alice:{mine}\n").as_bytes(),
    )
    .unwrap();
    assert!(chpasswd.wait().unwrap().success());
    let users_own = |s: &Sandbox| {
        let shadow = fs::read_to_string(s.live("/etc/shadow")).unwrap();
        line_of(&shadow, "alice").is_some_and(|l| l.starts_with(&format!("alice:{mine}:")))
    };
    assert!(users_own(&s));
    let mut outputs = Vec::new();
    for command in ["plan", "check", "reconcile", "apply"] {
        let o = s.datum(&["--output", "json", command]);
        assert_exit(&o, 0);
        let text = stdout(&o);
        assert!(!text.contains("password_hash"), "{command}: {text}");
        assert!(users_own(&s), "{command} set the password back");
        outputs.push(o);
    }
    // `always` keeps the declared hash again.
    declare(&s, &[user("always")]);
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    assert!(
        stdout(&plan).contains("password_hash: (sensitive) -> (sensitive)"),
        "{}",
        stdout(&plan)
    );
    outputs.push(plan);
    assert_exit(&s.datum(&["apply"]), 2);
    assert!(!users_own(&s));
    // chpasswd failing after useradd: no later pass compares the hash, so
    // the failure says so (and the next plan has nothing to do).
    let s = with_accounts(&user("on_create"));
    let apply = datum_with_failing_chpasswd(&s, &["apply"]);
    assert_exit(&apply, 4);
    let said = format!("{}{}", stdout(&apply), stderr(&apply));
    assert!(
        said.contains("account `alice` created")
            && said.contains("update_password: on_create: no later pass sets it"),
        "{said}"
    );
    outputs.push(apply);
    assert_exit(&s.datum(&["plan"]), 0);
    for o in &outputs {
        let all = format!("{}{}", stdout(o), stderr(o));
        assert!(!all.contains("CANARY"), "a hash leaked:\n{all}");
    }
}

/// `expiry` (Puppet's `expiry`, Ansible's `expires`; shadow's eighth
/// field, `chage -E`) is made by useradd, a date unquoted in YAML as well;
/// drift of it (`chage -E` by hand) is found by `check` as dates and undone
/// by `apply` (usermod -e), `never` clears it; a day that is no date is
/// refused at compile time naming the file, line and resource.
#[test]
fn the_expiry_is_made_checked_and_changed_through_shadow_utils() {
    if !shadow_utils_can_run() {
        return;
    }
    let user =
        |expiry: &str| flow_doc("User", "alice", &format!("{{uid: 2001, expiry: {expiry}}}"));
    let expiry_field = |s: &Sandbox| {
        let shadow = fs::read_to_string(s.live("/etc/shadow")).unwrap();
        line_of(&shadow, "alice").map(|l| l.split(':').nth(7).unwrap_or("?").to_owned())
    };
    let s = with_accounts(&user("2027-03-31"));
    assert_exit(&s.datum(&["apply"]), 2);
    // 2027-03-31 is day 20,908 since 1970-01-01.
    assert_eq!(expiry_field(&s).as_deref(), Some("20908"));
    assert_exit(&s.datum(&["plan"]), 0);
    shadow_tool(&s, &["chage", "-E", "2028-01-01", "alice"]);
    let check = s.datum(&["check"]);
    assert_exit(&check, 2);
    let text = stdout(&check);
    assert!(text.contains("expiry: 2027-03-31 -> 2028-01-01"), "{text}");
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    assert!(
        stdout(&plan).contains("expiry: \"2028-01-01\" -> \"2027-03-31\""),
        "{}",
        stdout(&plan)
    );
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(expiry_field(&s).as_deref(), Some("20908"));
    declare(&s, &[user("never")]);
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(expiry_field(&s).as_deref(), Some(""));
    assert_exit(&s.datum(&["plan"]), 0);
    for bad in ["2027-02-30", "\"1970-01-01\"", "tomorrow"] {
        declare(&s, &[user(bad)]);
        for command in ["lint", "plan"] {
            let o = s.datum(&[command]);
            assert_exit(&o, 1);
            let err = stderr(&o);
            assert!(
                err.contains("User[alice]")
                    && err.contains("`expiry` must be")
                    && err.contains("main.yaml:4"),
                "{command} {bad}: {err}"
            );
        }
    }
}

/// 7c9c2b0 made a missing account with the number owning its home
/// directory whenever no account held it, though /etc/subuid may give that
/// number to another account's user namespaces (files their root made are
/// owned by it): such an account would be one they act as. Such a number
/// is not taken (nor when /etc/subuid cannot be read); a warning says why.
#[test]
fn a_homes_number_another_accounts_user_namespaces_hold_is_not_taken() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_accounts(&flow_doc("User", "alice", "{groups: []}"));
    s.write("root/etc/subuid", "bob:100000:65536\n");
    fs::create_dir_all(s.live("/home/alice")).unwrap();
    std::os::unix::fs::chown(s.live("/home/alice"), Some(100_005), None).unwrap();
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    let said = format!("{}{}", stdout(&plan), stderr(&plan));
    assert!(!said.contains("uid: 100005"), "{said}");
    assert!(
        said.contains("warning: User[alice]: its home directory /home/alice is owned by uid 100005, one of the subordinate ids /etc/subuid gives `bob`"),
        "{said}"
    );
    assert_exit(&s.datum(&["apply"]), 2);
    let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
    let uid = line_of(&passwd, "alice").map(|l| l.split(':').nth(2).unwrap().to_owned());
    assert!(uid.is_some_and(|u| u != "100005"), "{passwd}");
    // Unreadable (a link at its name): not taken either.
    fs::remove_file(s.live("/etc/subuid")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", s.live("/etc/subuid")).unwrap();
    shadow_tool(&s, &["userdel", "alice"]);
    let plan = s.datum(&["plan"]);
    let said = format!("{}{}", stdout(&plan), stderr(&plan));
    assert!(!said.contains("uid: 100005"), "{said}");
    assert!(said.contains("/etc/subuid cannot be read"), "{said}");
}

/// A User without `uid` whose account was removed by hand (`userdel`
/// without `-r`) was made again with useradd's next number, leaving its
/// home directory and files owned by a number no account holds. It is now
/// made again with the home's owner when that number is free (plan shows
/// `uid`, a warning says why); when another account took the number, it
/// is made as before and the warning names that account.
#[test]
fn an_account_removed_by_hand_is_made_again_with_its_homes_number() {
    if !shadow_utils_can_run() {
        return;
    }
    let s = with_accounts(&flow_doc("User", "alice", "{groups: []}"));
    assert_exit(&s.datum(&["apply"]), 2);
    let uid_of = |s: &Sandbox, name: &str| {
        let passwd = fs::read_to_string(s.live("/etc/passwd")).unwrap();
        line_of(&passwd, name).map(|l| l.split(':').nth(2).unwrap().parse::<u32>().unwrap())
    };
    let first = uid_of(&s, "alice").unwrap();
    fs::create_dir_all(s.live("/home/alice")).unwrap();
    std::os::unix::fs::chown(s.live("/home/alice"), Some(first), None).unwrap();
    shadow_tool(&s, &["userdel", "alice"]);
    // Something else is made meanwhile: useradd's next number moves on.
    shadow_tool(
        &s,
        &["useradd", "-M", "-u", &(first + 1).to_string(), "carol"],
    );
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    let said = format!("{}{}", stdout(&plan), stderr(&plan));
    assert!(said.contains(&format!("    uid: {first}\n")), "{said}");
    assert!(
        said.contains(&format!(
            "warning: User[alice]: account `alice` is made with uid {first}, the owner of its home directory /home/alice, which no account holds"
        )),
        "{said}"
    );
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(uid_of(&s, "alice"), Some(first));
    assert_exit(&s.datum(&["plan"]), 0);
    // Removed again, and its number given to another account by hand.
    shadow_tool(&s, &["userdel", "alice"]);
    shadow_tool(&s, &["useradd", "-M", "-u", &first.to_string(), "bob"]);
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 2);
    let said = format!("{}{}", stdout(&apply), stderr(&apply));
    assert!(
        said.contains(&format!(
            "warning: User[alice]: its home directory /home/alice is owned by uid {first}, account `bob`'s: useradd gives `alice` another number, so if uid {first} was `alice`'s before, what it owns is `bob`'s now"
        )),
        "{said}"
    );
    assert!(uid_of(&s, "alice").is_some_and(|n| n != first));
}
