//! Plan and apply end to end: the example repository on an empty root, hand
//! edits, failures blocking dependents, intent labels, the root lock.

use std::fs;
use std::os::unix::fs::MetadataExt;

use crate::support::*;

fn example_sandbox() -> Sandbox {
    let s = Sandbox::new();
    s.write(
        "host.yaml",
        &fs::read_to_string(examples_dir().join("hosts/web-01.yaml")).unwrap(),
    );
    s
}

#[test]
fn example_applies_to_an_empty_root_then_converges_then_repairs_a_hand_edit() {
    let s = example_sandbox();
    let repo = examples_dir();

    let plan = s.datum_repo(&repo, &["plan"]);
    assert_exit(&plan, 2);
    assert!(
        s.files_under_root().is_empty(),
        "plan wrote: {:?}",
        s.files_under_root()
    );

    let first = s.datum_repo(&repo, &["apply"]);
    assert_exit(&first, 2);

    // Every declared file with its owner, group, mode and content.
    let expect = [
        ("/etc/motd", 0o644),
        ("/etc/ssh/sshd_config", 0o600),
        ("/etc/sudoers.d/ops", 0o440),
        ("/etc/nginx/nginx.conf", 0o644),
        ("/etc/nginx/sites-enabled/shop.conf", 0o644),
        ("/etc/app-secrets", 0o700),
        ("/etc/sudoers.d", 0o750),
    ];
    for (path, mode) in expect {
        let live = s.live(path);
        let meta = fs::symlink_metadata(&live).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(mode_of(&live), mode, "{path} mode");
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{path} owner");
    }
    let motd = fs::read_to_string(s.live("/etc/motd")).unwrap();
    assert!(
        motd.starts_with("web-01 is managed by Datum.\nRole: web. Environment: prod."),
        "{motd}"
    );
    assert_eq!(
        fs::read(s.live("/etc/ssh/sshd_config")).unwrap(),
        fs::read(repo.join("base/files/sshd_config")).unwrap()
    );
    let site = fs::read_to_string(s.live("/etc/nginx/sites-enabled/shop.conf")).unwrap();
    assert!(
        site.contains("server_name web-01.example.internal;"),
        "{site}"
    );

    let second = s.datum_repo(&repo, &["apply"]);
    assert_exit(&second, 0);
    assert!(stdout(&second).contains("0 changed"), "{}", stdout(&second));

    // A hand edit: plan shows exactly that file, with a diff, and exits 2.
    fs::write(s.live("/etc/motd"), "hello from a hand edit\n").unwrap();
    let plan = s.datum_repo(&repo, &["plan"]);
    assert_exit(&plan, 2);
    let out = stdout(&plan);
    assert!(out.contains("~ File[motd]"), "{out}");
    assert!(out.contains("-hello from a hand edit"), "{out}");
    assert!(out.contains("+web-01 is managed by Datum."), "{out}");
    assert!(out.contains("corrective"), "{out}");
    let changed: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with(['~', '+', '-', '!', '#']))
        .filter(|l| !l.starts_with("---") && !l.starts_with("+++"))
        .collect();
    assert_eq!(changed, vec!["~ File[motd]  update (corrective)"], "{out}");

    let repair = s.datum_repo(&repo, &["apply"]);
    assert_exit(&repair, 2);
    assert_eq!(fs::read_to_string(s.live("/etc/motd")).unwrap(), motd);
    assert_exit(&s.datum_repo(&repo, &["plan"]), 0);
}

#[test]
fn a_failed_resource_blocks_its_dependents_and_independent_ones_continue() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: orphan\ndesired:\n  path: /missing-dir/a.conf\n  content: \"a\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: dependent\nrequires: [File/orphan]\ndesired:\n  path: /b.conf\n  content: \"b\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: independent\ndesired:\n  path: /c.conf\n  content: \"c\\n\"\n",
    );
    let out = s.datum(&["apply"]);
    assert_exit(&out, 6);
    let text = stdout(&out);
    assert!(text.contains("! File[orphan]  failed (apply)"), "{text}");
    assert!(
        text.contains("# File[dependent]  blocked (by File[orphan])"),
        "{text}"
    );
    assert!(!s.live("/b.conf").exists());
    assert_eq!(fs::read_to_string(s.live("/c.conf")).unwrap(), "c\n");
}

#[test]
fn a_manifest_error_applies_nothing() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: good\ndesired:\n  path: /good.conf\n  content: \"ok\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: bad\ndesired:\n  path: /bad.conf\n  mdoe: \"0644\"\n",
    );
    let out = s.datum(&["apply"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("base/main.yaml:13:"),
        "{}",
        stderr(&out)
    );
    assert!(
        s.files_under_root().is_empty(),
        "{:?}",
        s.files_under_root()
    );
}

#[test]
fn intent_is_intentional_for_a_new_declaration_and_corrective_for_a_hand_edit() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: f\ndesired:\n  path: /f.conf\n  content: \"one\\n\"\n",
    );
    let json = |o: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let first = s.datum(&["--output", "json", "apply"]);
    assert_exit(&first, 2);
    assert_eq!(
        json(&first)["resources"][0]["outcome"]["intent"],
        "intentional"
    );

    fs::write(s.live("/f.conf"), "tampered\n").unwrap();
    let second = s.datum(&["--output", "json", "apply"]);
    assert_exit(&second, 2);
    assert_eq!(
        json(&second)["resources"][0]["outcome"]["intent"],
        "corrective"
    );

    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: File\nname: f\ndesired:\n  path: /f.conf\n  content: \"two\\n\"\n",
    );
    let third = s.datum(&["--output", "json", "apply"]);
    assert_exit(&third, 2);
    let v = json(&third);
    assert_eq!(v["resources"][0]["outcome"]["intent"], "intentional");
    assert_eq!(v["resources"][0]["action"], "update");
    assert!(
        v["resources"][0]["content"]["diff"]
            .as_str()
            .unwrap()
            .contains("+two")
    );
}

#[test]
fn a_second_pass_waits_for_the_root_lock_and_gives_up_after_its_timeout() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: f\ndesired:\n  path: /f.conf\n  content: \"x\\n\"\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    let lock = s.live("/var/lib/datum/lock");
    assert!(lock.exists(), "the first apply created its lock file");
    // Another pass holds the root's lock.
    let held = datum_host::RootLock::acquire(
        &datum_host::Host::new(s.root()),
        std::time::Duration::from_secs(1),
    )
    .unwrap();
    let t0 = std::time::Instant::now();
    let out = s.datum(&["--lock-timeout", "1s", "apply"]);
    drop(held);
    assert_exit(&out, 1);
    assert!(
        t0.elapsed() >= std::time::Duration::from_millis(900),
        "did not wait"
    );
    assert!(stderr(&out).contains("lock"), "{}", stderr(&out));
}

/// Whether process `pid` has the file `path` open (it reached the root
/// lock's wait: it opens the lock file before it waits for it).
fn has_open(pid: u32, path: &std::path::Path) -> bool {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten()
                .any(|fd| fs::read_link(fd.path()).is_ok_and(|target| target == path))
        })
        .unwrap_or(false)
}

/// `datum ARGS` on the sandbox's root with `repo`, started in the background.
fn spawn_datum(s: &Sandbox, repo: &std::path::Path, args: &[&str]) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("datum"))
        .arg("--repo")
        .arg(repo)
        .arg("--root")
        .arg(s.root())
        .arg("--host-file")
        .arg(s.dir.path().join("host.yaml"))
        .args(["--color", "never"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Returns once `child` has opened the lock file (it waits for the lock
/// the test holds); fails when it ends first.
fn wait_for_the_lock(child: &mut std::process::Child, lock_file: &std::path::Path, what: &str) {
    let waited = std::time::Instant::now();
    while !has_open(child.id(), lock_file) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "{what} ended without waiting for the root lock the test holds"
        );
        assert!(waited.elapsed().as_secs() < 60, "{what} never waited");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `datum quarantine` (a person's break-glass) recorded the quarantine and
/// returned at once, while a pass that began before it (an apply, the
/// agent's reconcile: each reads the quarantines when it begins) could
/// still write the resource; the person, told it was excluded from apply
/// and never reverted, changed it by hand, and that pass could overwrite
/// the change. The quarantine is still recorded at once (every later pass
/// skips it), and the command then waits for the root lock, so it returns
/// once the pass in flight has ended, or warns that it has not.
#[test]
fn a_quarantine_returns_once_the_pass_already_running_has_ended() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: f\ndesired:\n  path: /f.conf\n  content: \"x\\n\"\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    let lock_file = fs::canonicalize(s.live("/var/lib/datum/lock")).unwrap();
    let hold = || {
        datum_host::RootLock::acquire(
            &datum_host::Host::new(s.root()),
            std::time::Duration::from_secs(1),
        )
        .unwrap()
    };
    let held = hold();
    let mut child = spawn_datum(
        &s,
        &s.repo(),
        &["quarantine", "File/f", "--reason", "incident 42"],
    );
    wait_for_the_lock(&mut child, &lock_file, "datum quarantine");
    drop(held);
    let out = child.wait_with_output().unwrap();
    assert_exit(&out, 0);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    // A pass that outlasts --lock-timeout: recorded all the same, and said.
    let held = hold();
    let out = s.datum(&[
        "--lock-timeout",
        "200ms",
        "quarantine",
        "--host",
        "--reason",
        "incident 43",
    ]);
    drop(held);
    assert_exit(&out, 0);
    assert!(
        stderr(&out)
            .contains("quarantined the host, but a pass that began before it may still change it"),
        "{}",
        stderr(&out)
    );
    fs::write(s.live("/f.conf"), "by hand\n").unwrap();
    assert_exit(&s.datum(&["apply"]), 0);
    assert_eq!(fs::read_to_string(s.live("/f.conf")).unwrap(), "by hand\n");
}

/// An apply compiles the repository (a link `datum pull` switches is
/// pinned to the folder it points at then) before it takes the root lock.
/// When `datum pull` switched in another revision meanwhile (while the
/// apply compiled or waited for another pass), the apply went on with the
/// revision replaced: it took the host back to it (after the agent, or
/// another apply, may have applied the new one) and reported it as the
/// host's latest apply. Once it holds the lock it now refuses, nothing
/// applied, when the link points elsewhere; so does a reconcile that acts.
/// Deterministic: the test holds the root lock, and switches the link once
/// the apply has opened the lock file (it has compiled and waits).
#[test]
fn an_apply_refuses_a_revision_switched_out_while_it_waited_for_the_lock() {
    let file = |content: &str| {
        format!(
            "datum: v1alpha1\ntype: File\nname: f\nclass: critical\ndesired:\n  path: /f.conf\n  content: \"{content}\\n\"\n"
        )
    };
    let s = Sandbox::with_base(&file("old"));
    let settings = "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n\
                    classes:\n  critical: {interval: 60s, policy: revert}\n";
    for repo in ["repo", "repo-new"] {
        s.write(&format!("{repo}/datum.yaml"), settings);
    }
    s.write("repo-new/base/main.yaml", &file("new"));
    let link = s.dir.path().join("deployed");
    std::os::unix::fs::symlink(s.repo(), &link).unwrap();
    let switch_to = |target: &std::path::Path| {
        let staged = s.dir.path().join("deployed.next");
        std::os::unix::fs::symlink(target, &staged).unwrap();
        fs::rename(&staged, &link).unwrap();
    };
    // The first apply makes the lock file; the host is at the old revision.
    assert_exit(&s.datum_repo(&link, &["apply"]), 2);
    let lock_file = fs::canonicalize(s.live("/var/lib/datum/lock")).unwrap();
    for command in ["apply", "reconcile"] {
        // Edited on the host: the old revision's apply, or its revert, would
        // write the old content back.
        s.write("root/f.conf", "edited\n");
        switch_to(&s.repo());
        let held = datum_host::RootLock::acquire(
            &datum_host::Host::new(s.root()),
            std::time::Duration::from_secs(1),
        )
        .unwrap();
        let mut child = spawn_datum(&s, &link, &["--lock-timeout", "60s", command]);
        wait_for_the_lock(&mut child, &lock_file, command);
        // `datum pull` deploys the new revision; the pass holding the lock ends.
        switch_to(&s.dir.path().join("repo-new"));
        drop(held);
        let out = child.wait_with_output().unwrap();
        assert_exit(&out, 1);
        let err = stderr(&out);
        assert!(
            err.contains("was switched from") && err.contains("repo-new"),
            "{command}: {err}"
        );
        assert_eq!(
            fs::read_to_string(s.live("/f.conf")).unwrap(),
            "edited\n",
            "{command} changed the host after its revision was switched out"
        );
    }
    // Run again, it applies the revision deployed now.
    assert_exit(&s.datum_repo(&link, &["apply"]), 2);
    assert_eq!(fs::read_to_string(s.live("/f.conf")).unwrap(), "new\n");
}

#[test]
fn usage_errors_exit_1_not_2() {
    let s = Sandbox::new();
    let out = s.datum(&["apply", "--no-such-flag"]);
    assert_exit(&out, 1);
}

#[test]
fn a_corrupt_state_store_stops_apply_until_restored_or_rebuilt_on_request() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: f\ndesired:\n  path: /f.conf\n  content: \"x\\n\"\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    let db = s.live("/var/lib/datum/state.db");
    fs::write(&db, "this is not a database").unwrap();
    for wal in ["state.db-wal", "state.db-shm"] {
        let _ = fs::remove_file(s.live(&format!("/var/lib/datum/{wal}")));
    }
    fs::write(s.live("/f.conf"), "tampered\n").unwrap();
    // Fail closed: nothing applied, the store left as it is, and the error
    // says what is wrong and the two ways out.
    let out = s.datum(&["apply"]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    for word in [
        "state.db",
        "not a database",
        "restore",
        "--rebuild-state",
        "quarantine",
    ] {
        assert!(err.contains(word), "{word} missing from {err}");
    }
    assert_eq!(fs::read_to_string(s.live("/f.conf")).unwrap(), "tampered\n");
    assert_eq!(fs::read(&db).unwrap(), b"this is not a database");
    // A plan only reads: it goes on, saying so.
    let out = s.datum(&["plan"]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("without it, read-only"),
        "{}",
        stderr(&out)
    );
    // Rebuilt only when asked, saying what that forgets.
    let out = s.datum(&["apply", "--rebuild-state"]);
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("forgotten"), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(s.live("/f.conf")).unwrap(), "x\n");
    let moved: Vec<String> = fs::read_dir(s.live("/var/lib/datum"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("state.db.corrupt-"))
        .collect();
    assert_eq!(moved.len(), 1, "the damaged store is kept aside: {moved:?}");
    assert_exit(&s.datum(&["apply"]), 0);
}

#[test]
fn a_service_is_ordered_after_the_resources_it_reloads_on() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Service\nname: nginx\ndesired:\n  state: running\n  reload_on: [File/site]\n\
---\ndatum: v1alpha1\ntype: File\nname: site\ndesired:\n  path: /site.conf\n  content: \"x\\n\"\n",
    );
    let out = s.datum(&["catalogue"]);
    assert_exit(&out, 0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["File[site]", "Service[nginx]"], "{v}");
}

#[test]
fn schedule_states_a_watched_class_bound_as_debounce_plus_inspection() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\nclass: critical\ndesired: {path: /a, content: x}\n\
---\ndatum: v1alpha1\ntype: File\nname: b\ndesired: {path: /b, content: y}\n",
    );
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nclasses:\n  critical: {interval: 60s, content: full, policy: report, watch: true}\n  normal: {interval: 1h, content: full, policy: report}\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    assert_exit(&s.datum(&["check"]), 0);
    let out = s.datum(&["--output", "json", "schedule"]);
    assert_exit(&out, 0);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |name: &str| {
        rows["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["class"] == name)
            .unwrap()
            .clone()
    };
    let critical = row("critical");
    assert_eq!(critical["watched"], true);
    assert!(
        critical["detection_bound_ms"].as_u64().unwrap() < 1_000,
        "{critical}"
    );
    let normal = row("normal");
    assert_eq!(normal["watched"], false);
    assert!(
        normal["detection_bound_ms"].as_u64().unwrap() >= 3_600_000,
        "{normal}"
    );
}

/// `datum schedule` stated a watched class's bound with the built-in
/// debounce (100 ms) while the agent took `[agent] debounce` from the
/// defaults file: with another one the two disagreed. It takes the agent's
/// (and `--debounce` over it, for an agent started with its own flag).
#[test]
fn schedule_states_a_watched_class_bound_with_the_agent_s_configured_debounce() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\nclass: critical\ndesired: {path: /a, content: x}\n",
    );
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nclasses:\n  critical: {interval: 60s, content: full, policy: report, watch: true}\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    assert_exit(&s.datum(&["check"]), 0);
    let config = s.write("etc/datum/datum.toml", "[agent]\ndebounce = \"2s\"\n");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&config, fs::Permissions::from_mode(0o644)).unwrap();
    let schedule = |args: &[&str]| {
        let out = assert_cmd::Command::cargo_bin("datum")
            .unwrap()
            .env("DATUM_CONFIG", &config)
            .arg("--repo")
            .arg(s.repo())
            .arg("--root")
            .arg(s.root())
            .arg("--host-file")
            .arg(s.dir.path().join("host.yaml"))
            .args(["--output", "json", "schedule"])
            .args(args)
            .output()
            .unwrap();
        assert_exit(&out, 0);
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        rows["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["class"] == "critical")
            .unwrap()
            .clone()
    };
    let critical = schedule(&[]);
    assert_eq!(critical["watched"], true);
    // No watch-triggered check recorded: the checks' p95 stands in.
    let p95 = critical["p95_ms"].as_u64().unwrap();
    assert_eq!(
        critical["detection_bound_ms"].as_u64(),
        Some(2_000 + p95),
        "{critical}"
    );
    let critical = schedule(&["--debounce", "250ms"]);
    let p95 = critical["p95_ms"].as_u64().unwrap();
    assert_eq!(
        critical["detection_bound_ms"].as_u64(),
        Some(250 + p95),
        "{critical}"
    );
}

/// `lines` numbered lines of a configuration file.
fn numbered(lines: usize) -> String {
    (0..lines)
        .map(|i| format!("line {i} of the configuration\n"))
        .collect()
}

#[test]
fn a_two_megabyte_source_diffs_line_by_line_and_a_huge_one_says_it_is_too_large() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: big\ndesired:\n  path: /big.conf\n  source: files/big.conf\n",
    );
    let two_mb = numbered(70_000);
    assert!(two_mb.len() > 2_000_000);
    s.write("repo/base/files/big.conf", &two_mb);
    assert_exit(&s.datum(&["apply"]), 2);
    fs::write(
        s.live("/big.conf"),
        two_mb.replace("line 500 of", "line 500 EDITED of"),
    )
    .unwrap();
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    let text = stdout(&plan);
    assert!(
        text.contains("-line 500 EDITED of the configuration"),
        "{text}"
    );
    assert!(text.contains("+line 500 of the configuration"), "{text}");
    assert!(
        text.lines()
            .filter(|l| l.trim_start().starts_with('-'))
            .count()
            <= 2,
        "only the edited line (and the header) is removed: {text}"
    );
    // Past the limit on either side: checksums and the reason, never a
    // diff against an empty side.
    let huge = numbered(400_000);
    assert!(huge.len() as u64 > 8 * 1024 * 1024);
    s.write("repo/base/files/big.conf", &huge);
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    let text = stdout(&plan);
    assert!(text.contains("too large to diff"), "{text}");
    assert!(!text.contains("+line 1 of"), "{text}");
}

#[test]
fn trust_metadata_leaves_unread_only_files_a_quiet_record_vouches_for() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\ndesired:\n  path: /a.conf\n  content: \"a\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: b\ndesired:\n  path: /b.conf\n  content: \"b\\n\"\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    // Records made within 2 s of a file's change vouch for nothing: the
    // first trusting pass reads both.
    let out = s.datum(&["apply", "--trust-metadata"]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("2 unchanged (0 by their metadata, not read)"),
        "{}",
        stdout(&out)
    );
    // Once the files have been quiet that long (a record's time is in
    // whole seconds: 3 s to be sure), a pass that reads records them
    // again, and the next trusting pass reads neither.
    std::thread::sleep(std::time::Duration::from_millis(3_100));
    assert_exit(&s.datum(&["apply"]), 0);
    let out = s.datum(&["apply", "--trust-metadata"]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("2 unchanged (2 by their metadata, not read)"),
        "{}",
        stdout(&out)
    );
    let plan = s.datum(&["plan", "--trust-metadata", "--json"]);
    assert_exit(&plan, 0);
    let doc: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(doc["trusted_by_metadata"], 2, "{doc}");
    // Not asked: every file read, and no such count.
    let plan = s.datum(&["plan", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert!(doc.get("trusted_by_metadata").is_none(), "{doc}");
    assert!(!stdout(&s.datum(&["apply"])).contains("by their metadata"));

    // A hand edit moves the file's metadata: read, and put right.
    fs::write(s.live("/a.conf"), "hand edit\n").unwrap();
    let out = s.datum(&["apply", "--trust-metadata"]);
    assert_exit(&out, 2);
    assert!(
        stdout(&out).contains("~ File[a]  update (corrective), done"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("1 unchanged (1 by their metadata, not read)"),
        "{}",
        stdout(&out)
    );
    assert_eq!(fs::read_to_string(s.live("/a.conf")).unwrap(), "a\n");

    // A saved plan holds every observation whole: not with this flag.
    let saved = s.dir.path().join("plan.json");
    let saved = saved.to_str().unwrap();
    for args in [
        vec!["plan", "--out", saved, "--trust-metadata"],
        vec!["apply", saved, "--trust-metadata"],
    ] {
        let out = s.datum(&args);
        assert_exit(&out, 1);
        assert!(
            stderr(&out).contains("cannot be used with"),
            "{}",
            stderr(&out)
        );
    }
}

/// A purge takes what no declaration covers, never an excluded entry: an
/// undeclared folder holding one (at any depth) is kept with it, only what
/// else it holds is removed, and the next pass has nothing to do. Before, the
/// folder was purged whole, the excluded files with it, contrary to
/// `exclude` ("never created, changed or removed").
#[test]
fn a_purge_keeps_excluded_entries_inside_an_undeclared_folder() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n  purge: true\n  exclude: [\"*.local\", \"cache/\"]\n",
    );
    s.write("repo/base/tree/a.conf", "a = 1\n");
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    for (path, text) in [
        ("/etc/t/plugin/site.local", "mine\n"),
        ("/etc/t/plugin/stray.conf", "stray\n"),
        ("/etc/t/plugin/deep/cache/blob", "cached\n"),
        ("/etc/t/plugin/deep/other", "other\n"),
        ("/etc/t/plugin/gone/x", "x\n"),
        ("/etc/t/extra/y", "y\n"),
    ] {
        s.write(&format!("root{path}"), text);
    }
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    let text = stdout(&plan);
    for path in [
        "plugin/stray.conf",
        "plugin/deep/other",
        "plugin/gone",
        "extra",
    ] {
        assert!(
            text.contains(&format!("tree:{path}: \"unmanaged\"")),
            "{text}"
        );
    }
    assert!(!text.contains("tree:plugin:"), "{text}");
    assert_exit(&s.datum(&["apply"]), 2);
    let left: Vec<String> = s
        .files_under_root()
        .into_iter()
        .filter(|p| p.starts_with("etc/t/"))
        .collect();
    assert_eq!(
        left,
        [
            "etc/t/a.conf",
            "etc/t/plugin",
            "etc/t/plugin/deep",
            "etc/t/plugin/deep/cache",
            "etc/t/plugin/deep/cache/blob",
            "etc/t/plugin/site.local",
        ]
    );
    assert_eq!(
        fs::read_to_string(s.live("/etc/t/plugin/site.local")).unwrap(),
        "mine\n"
    );
    assert_exit(&s.datum(&["apply"]), 0);
    assert_exit(&s.datum(&["check"]), 0);
}

/// A purging Tree whose source turns a folder into a file (or a link)
/// replaces the folder it shipped: its files are saved, then it is removed
/// as the new entry goes live, and the next pass has nothing to do. Before,
/// every apply failed with "a directory is in the way" and never converged.
/// A folder holding an excluded entry is never removed: that entry fails.
#[test]
fn a_purging_tree_replaces_a_folder_its_source_made_a_file_or_a_link() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n  purge: true\n  exclude: [\"*.local\"]\n",
    );
    s.write("repo/base/tree/sub/b.conf", "b = 1\n");
    s.write("repo/base/tree/ln/c.conf", "c = 1\n");
    s.write("repo/base/tree/held/d.conf", "d = 1\n");
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    s.write("root/etc/t/held/mine.local", "mine\n");
    for folder in ["sub", "ln", "held"] {
        fs::remove_dir_all(s.repo().join("base/tree").join(folder)).unwrap();
    }
    s.write("repo/base/tree/sub", "now a file\n");
    s.write("repo/base/tree/held", "held\n");
    std::os::unix::fs::symlink("sub", s.repo().join("base/tree/ln")).unwrap();
    let out = s.datum(&["apply"]);
    assert_exit(&out, 4);
    assert!(
        stdout(&out).contains("a directory holding excluded entries is in the way"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        fs::read_to_string(s.live("/etc/t/held/mine.local")).unwrap(),
        "mine\n"
    );
    fs::remove_file(s.live("/etc/t/held/mine.local")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(
        fs::read_to_string(s.live("/etc/t/sub")).unwrap(),
        "now a file\n"
    );
    assert_eq!(
        fs::read_link(s.live("/etc/t/ln")).unwrap().to_str(),
        Some("sub")
    );
    assert_eq!(fs::read_to_string(s.live("/etc/t/held")).unwrap(), "held\n");
    assert_exit(&s.datum(&["apply"]), 0);
    let list = stdout(&s.datum(&["backup", "list"]));
    for path in [
        "/etc/t/sub/b.conf",
        "/etc/t/ln/c.conf",
        "/etc/t/held/d.conf",
    ] {
        assert!(list.contains(path), "{list}");
    }
}

/// A pass killed between staging a Tree entry and its rename leaves its
/// staging folder inside the tree: that is Datum's own, not drift. Before,
/// `datum check` reported it as an unmanaged entry on every check (and a
/// purge removed it as one); now it is never part of the tree, and the next
/// staging in its folder sweeps it.
#[test]
fn a_killed_passs_staging_folder_inside_a_tree_is_not_drift_and_is_swept() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n",
    );
    s.write("repo/base/tree/sub/b.conf", "b = 1\n");
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    s.write(
        "root/etc/t/sub/.datum.stage.0123456789abcdef/b.conf",
        "b = 2\n",
    );
    assert_exit(&s.datum(&["check"]), 0);
    assert_exit(&s.datum(&["plan"]), 0);
    s.write("repo/base/tree/sub/b.conf", "b = 2\n");
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(
        s.files_under_root()
            .into_iter()
            .filter(|p| p.starts_with("etc/t"))
            .collect::<Vec<_>>(),
        ["etc/t", "etc/t/sub", "etc/t/sub/b.conf"]
    );
    assert_exit(&s.datum(&["check"]), 0);
}

/// A Tree-wide change of owner and group of root's files, holding their
/// declared bytes, is made in place: every file keeps its inode. Before,
/// each entry was staged afresh and renamed in (a few thousand files: 3,000
/// renames and a full copy written). An entry someone else could have
/// opened for writing (group-writable, or owned by another user) is still
/// rewritten, as is a content change; a link planted in place of an entry
/// is replaced, never followed.
#[test]
fn a_tree_wide_owner_change_of_roots_files_is_made_in_place() {
    use std::os::unix::fs::PermissionsExt as _;
    if !rustix::process::geteuid().is_root() {
        println!("skipped: needs root (chown)");
        return;
    }
    let manifest = |owner: &str, group: &str| {
        format!(
            "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n  owner: \"{owner}\"\n  group: \"{group}\"\n  mode: \"0644\"\n"
        )
    };
    let s = Sandbox::with_base(&manifest("0", "0"));
    for i in 0..40 {
        s.write(
            &format!("repo/base/tree/d{}/f{i}.conf", i % 4),
            &format!("f{i}\n"),
        );
    }
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    let entry = |i: usize| s.live(&format!("/etc/t/d{}/f{i}.conf", i % 4));
    let inode = |i: usize| fs::symlink_metadata(entry(i)).unwrap().ino();
    let before: Vec<u64> = (0..40).map(inode).collect();

    // f0: a link to a root-owned secret outside the root; f1: group-writable;
    // f2: another user's.
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret");
    fs::write(&secret, "secret\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(entry(0)).unwrap();
    std::os::unix::fs::symlink(&secret, entry(0)).unwrap();
    fs::set_permissions(entry(1), fs::Permissions::from_mode(0o664)).unwrap();
    std::os::unix::fs::chown(entry(2), Some(2000), Some(2000)).unwrap();

    s.write("repo/base/main.yaml", &manifest("1000", "100"));
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 2);
    assert!(
        stdout(&plan).contains("tree:d3/f3.conf: \"changed (owner, group)\""),
        "{}",
        stdout(&plan)
    );
    assert_exit(&s.datum(&["apply"]), 2);
    for (i, &was) in before.iter().enumerate() {
        let meta = fs::symlink_metadata(entry(i)).unwrap();
        assert!(meta.is_file(), "f{i} is not a file");
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o7777),
            (1000, 100, 0o644),
            "f{i}"
        );
        assert_eq!(fs::read_to_string(entry(i)).unwrap(), format!("f{i}\n"));
        let rewritten = i < 3;
        assert_eq!(
            meta.ino() != was,
            rewritten,
            "f{i}: rewritten should be {rewritten}"
        );
    }
    let secret_meta = fs::metadata(&secret).unwrap();
    assert_eq!(
        (
            secret_meta.uid(),
            secret_meta.gid(),
            secret_meta.mode() & 0o7777
        ),
        (0, 0, 0o600),
        "the link was followed"
    );
    assert_eq!(fs::read_to_string(&secret).unwrap(), "secret\n");
    assert_exit(&s.datum(&["plan"]), 0);

    // A content change still writes the new bytes afresh.
    let kept = inode(5);
    s.write("repo/base/tree/d1/f5.conf", "new\n");
    assert_exit(&s.datum(&["apply"]), 2);
    assert_ne!(inode(5), kept);
    assert_eq!(fs::read_to_string(entry(5)).unwrap(), "new\n");
    assert_eq!(inode(9), before[9]);
}

/// A mode that takes writing away from a file's group or others is given
/// with the declared bytes written afresh, for a File and a Tree's entry:
/// whoever opened the file for writing while they could keeps that
/// descriptor through a chmod, and set in place (as before) their later
/// write landed in the file now reported 0644 and converged. A mode that
/// only adds or removes read or execute bits, or writing of the owner only,
/// is still set in place (the inode kept).
#[test]
fn a_mode_taking_writing_away_leaves_no_writer_in_the_file() {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: f\ndesired:\n  path: /etc/f.conf\n  content: \"declared\\n\"\n  mode: \"0644\"\n---\ndatum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n  mode: \"0644\"\n",
    );
    s.write("repo/base/tree/e.conf", "declared\n");
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    let files = [s.live("/etc/f.conf"), s.live("/etc/t/e.conf")];
    for (was, rewritten) in [
        (0o666, true),
        (0o664, true),
        (0o660, true),
        (0o642, true),
        (0o600, false),
        (0o755, false),
        (0o444, false),
    ] {
        let mut held = Vec::new();
        for live in &files {
            fs::set_permissions(live, fs::Permissions::from_mode(was)).unwrap();
            let inode = fs::symlink_metadata(live).unwrap().ino();
            let file = fs::OpenOptions::new().append(true).open(live).unwrap();
            held.push((live, inode, file));
        }
        assert_exit(&s.datum(&["apply"]), 2);
        for (live, inode, mut file) in held {
            file.write_all(b"theirs\n").unwrap();
            drop(file);
            let meta = fs::symlink_metadata(live).unwrap();
            let case = format!("{} {was:o}", live.display());
            assert_eq!(meta.mode() & 0o7777, 0o644, "{case}");
            if rewritten {
                assert_eq!(
                    fs::read_to_string(live).unwrap(),
                    "declared\n",
                    "{case}: written through a descriptor opened while it could"
                );
            } else {
                fs::write(live, "declared\n").unwrap();
            }
            assert_eq!(meta.ino() != inode, rewritten, "{case}: rewritten");
        }
        assert_exit(&s.datum(&["plan"]), 0);
    }
}

/// A Tree of more folders than the usual limit of 1,024 descriptors is
/// written under that limit. Before, the walk kept every folder it had
/// reached open, and the pass every folder it had renamed a file into until
/// its fsync, so the apply failed part-way: 'cannot list
/// .../d550/.datum.stage.…: Too many open files'.
#[test]
fn a_tree_of_more_folders_than_descriptors_is_written() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n",
    );
    for i in 0..1100 {
        s.write(&format!("repo/base/tree/d{i}/f.conf"), &format!("{i}\n"));
    }
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&datum_with_ulimit(&s, "-n 1024", &["apply"]), 2);
    for i in [0, 549, 1099] {
        assert_eq!(
            fs::read_to_string(s.live(&format!("/etc/t/d{i}/f.conf"))).unwrap(),
            format!("{i}\n")
        );
    }
    assert_exit(&s.datum(&["plan"]), 0);
}

/// `datum ARGS` on the sandbox's repository and root, started by `sh` after
/// `ulimit LIMIT` (`-n 1024`: the soft and hard limits of open files), so
/// that the limit holds for datum alone.
fn datum_with_ulimit(s: &Sandbox, limit: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit {limit} && exec \"$0\" \"$@\""))
        .arg(assert_cmd::cargo::cargo_bin("datum"))
        .arg("--repo")
        .arg(s.repo())
        .arg("--root")
        .arg(s.root())
        .arg("--host-file")
        .arg(s.dir.path().join("host.yaml"))
        .args(["--color", "never"])
        .args(args)
        .output()
        .unwrap()
}

/// Files in more folders than a limit of 1,024 descriptors, soft and hard
/// (a shell's `ulimit -n 1024`, a container's or a systemd unit's hard
/// limit), are written, checked and planned. A pass kept a handle on every
/// folder it reached until it ended, so the writes past the thousandth
/// folder failed with "Too many open files" (exit 4); datum raising its own
/// soft limit (1d15824) helped only where the hard limit was higher. The
/// host's folder cache now keeps at most a quarter of the soft limit open.
#[test]
fn files_in_more_folders_than_the_descriptor_limit_are_written() {
    let folders = 1500;
    let manifest: Vec<String> = (0..folders)
        .map(|i| {
            format!(
                "datum: v1alpha1\ntype: File\nname: f{i}\ndesired:\n  path: /etc/d{i}/f.conf\n  content: \"{i}\\n\"\n"
            )
        })
        .collect();
    let s = Sandbox::with_base(&manifest.join("---\n"));
    for i in 0..folders {
        fs::create_dir_all(s.live(&format!("/etc/d{i}"))).unwrap();
    }
    let apply = datum_with_ulimit(&s, "-n 1024", &["apply"]);
    assert_exit(&apply, 2);
    for i in [0, 1023, folders - 1] {
        assert_eq!(
            fs::read_to_string(s.live(&format!("/etc/d{i}/f.conf"))).unwrap(),
            format!("{i}\n")
        );
    }
    assert_exit(&datum_with_ulimit(&s, "-n 1024", &["check"]), 0);
    assert_exit(&datum_with_ulimit(&s, "-n 1024", &["plan"]), 0);
    // A hand edit in the last folder is seen and repaired under the limit.
    fs::write(s.live(&format!("/etc/d{}/f.conf", folders - 1)), "edited\n").unwrap();
    assert_exit(&datum_with_ulimit(&s, "-n 1024", &["check"]), 2);
    assert_exit(&datum_with_ulimit(&s, "-n 1024", &["apply"]), 2);
    assert_eq!(
        fs::read_to_string(s.live(&format!("/etc/d{}/f.conf", folders - 1))).unwrap(),
        format!("{}\n", folders - 1)
    );
}

/// Files in more folders than a limit of 512 or 256 descriptors, soft and
/// hard, are written and checked. The folder cache was bounded at a quarter
/// of the soft limit, but the folders owed an fsync (up to 256) and the
/// copies staged ahead (up to 128, two descriptors each) were not: at 512,
/// 45 of 1,501 writes failed with "Too many open files" (exit 6), at 256,
/// 596. All three now share one budget of the soft limit (descriptors.rs).
#[test]
fn files_in_more_folders_than_a_small_descriptor_limit_are_written() {
    let folders = 1500;
    let manifest: Vec<String> = (0..folders)
        .map(|i| {
            format!(
                "datum: v1alpha1\ntype: File\nname: f{i}\ndesired:\n  path: /etc/d{i}/f.conf\n  content: \"{i}\\n\"\n"
            )
        })
        .collect();
    for limit in ["-n 512", "-n 256"] {
        let s = Sandbox::with_base(&manifest.join("---\n"));
        for i in 0..folders {
            fs::create_dir_all(s.live(&format!("/etc/d{i}"))).unwrap();
        }
        let apply = datum_with_ulimit(&s, limit, &["apply"]);
        assert_exit(&apply, 2);
        for i in [0, 511, folders - 1] {
            assert_eq!(
                fs::read_to_string(s.live(&format!("/etc/d{i}/f.conf"))).unwrap(),
                format!("{i}\n"),
                "{limit}"
            );
        }
        assert_exit(&datum_with_ulimit(&s, limit, &["check"]), 0);
    }
}

/// A Tree whose source is deep (a chain of 200 nested folders) and wide
/// (300 folders of a file each), between Files in 300 folders before and
/// after it in the same pass, is written and checked under a limit of 512
/// or 256 descriptors, soft and hard. The Tree's walks kept their own bound
/// on open folders (half the soft limit less 256) outside the budget the
/// folder cache, the fsync backlog and the copies staged ahead share, and
/// held one folder per level of depth whatever the bound.
#[test]
fn a_deep_and_wide_tree_among_files_in_many_folders_is_written_under_a_small_limit() {
    let files = 300;
    let depth = 200;
    let mut manifest: Vec<String> = (0..files)
        .map(|i| {
            format!(
                "datum: v1alpha1\ntype: File\nname: a{i}\ndesired:\n  path: /etc/a{i}/f.conf\n  content: \"{i}\\n\"\n"
            )
        })
        .collect();
    manifest.push(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n"
            .to_owned(),
    );
    manifest.extend((0..files).map(|i| {
        format!(
            "datum: v1alpha1\ntype: File\nname: z{i}\ndesired:\n  path: /etc/z{i}/f.conf\n  content: \"{i}\\n\"\n"
        )
    }));
    let deep: String = (0..depth).map(|_| "d/").collect();
    for limit in ["-n 512", "-n 256"] {
        let s = Sandbox::with_base(&manifest.join("---\n"));
        for i in 0..files {
            s.write(&format!("repo/base/tree/w{i}/f.conf"), &format!("{i}\n"));
            fs::create_dir_all(s.live(&format!("/etc/a{i}"))).unwrap();
            fs::create_dir_all(s.live(&format!("/etc/z{i}"))).unwrap();
        }
        s.write(&format!("repo/base/tree/{deep}f.conf"), "deep\n");
        let apply = datum_with_ulimit(&s, limit, &["apply"]);
        assert_exit(&apply, 2);
        assert_eq!(
            fs::read_to_string(s.live(&format!("/etc/t/{deep}f.conf"))).unwrap(),
            "deep\n",
            "{limit}"
        );
        for i in [0, files - 1] {
            for at in [
                format!("/etc/t/w{i}/f.conf"),
                format!("/etc/a{i}/f.conf"),
                format!("/etc/z{i}/f.conf"),
            ] {
                assert_eq!(
                    fs::read_to_string(s.live(&at)).unwrap(),
                    format!("{i}\n"),
                    "{limit} {at}"
                );
            }
        }
        assert_exit(&datum_with_ulimit(&s, limit, &["check"]), 0);
        // A hand edit at the bottom of the chain is seen and repaired.
        fs::write(s.live(&format!("/etc/t/{deep}f.conf")), "edited\n").unwrap();
        assert_exit(&datum_with_ulimit(&s, limit, &["check"]), 2);
        assert_exit(&datum_with_ulimit(&s, limit, &["apply"]), 2);
        assert_eq!(
            fs::read_to_string(s.live(&format!("/etc/t/{deep}f.conf"))).unwrap(),
            "deep\n",
            "{limit}"
        );
    }
}

/// A soft limit of open files too low for a pass is refused before anything
/// is read or written, naming the limit and what is needed (exit 1); from
/// 128 on a pass works. Below, the shares' floors took more than the limit
/// left, and a pass ran out part-way: under 48, 6 of 601 resources failed
/// with "Too many open files" and the rest were written (exit 6).
#[test]
fn a_pass_refuses_a_limit_of_open_files_too_low_and_works_from_128() {
    let count = 100;
    let mut manifest: Vec<String> = (0..count)
        .map(|i| {
            format!(
                "datum: v1alpha1\ntype: File\nname: a{i}\ndesired:\n  path: /etc/a{i}/f.conf\n  content: \"{i}\\n\"\n"
            )
        })
        .collect();
    manifest.push(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n"
            .to_owned(),
    );
    manifest.extend((0..count).map(|i| {
        format!(
            "datum: v1alpha1\ntype: File\nname: z{i}\ndesired:\n  path: /etc/z{i}/f.conf\n  content: \"{i}\\n\"\n"
        )
    }));
    let deep: String = (0..50).map(|_| "d/").collect();
    let sandbox = || {
        let s = Sandbox::with_base(&manifest.join("---\n"));
        for i in 0..count {
            s.write(&format!("repo/base/tree/w{i}/f.conf"), &format!("{i}\n"));
            fs::create_dir_all(s.live(&format!("/etc/a{i}"))).unwrap();
            fs::create_dir_all(s.live(&format!("/etc/z{i}"))).unwrap();
        }
        s.write(&format!("repo/base/tree/{deep}f.conf"), "deep\n");
        s
    };
    for soft in [127, 64, 32] {
        let s = sandbox();
        let limit = format!("-n {soft}");
        for command in ["apply", "plan", "check"] {
            let out = datum_with_ulimit(&s, &limit, &[command]);
            assert_exit(&out, 1);
            let said = stderr(&out);
            assert!(
                said.contains(&format!(
                    "the soft limit of open files is {soft}, below the 128 a pass needs"
                )) && said.contains("ulimit -n 128"),
                "{command} {limit}: {said}"
            );
        }
        assert!(!s.live("/etc/a0/f.conf").exists(), "{limit}");
        assert!(!s.live("/etc/t").exists(), "{limit}");
        assert!(!s.live("/var/lib/datum").exists(), "{limit}");
    }
    let s = sandbox();
    assert_exit(&datum_with_ulimit(&s, "-n 128", &["apply"]), 2);
    assert_eq!(
        fs::read_to_string(s.live(&format!("/etc/t/{deep}f.conf"))).unwrap(),
        "deep\n"
    );
    for at in ["/etc/a99/f.conf", "/etc/z99/f.conf", "/etc/t/w99/f.conf"] {
        assert_eq!(fs::read_to_string(s.live(at)).unwrap(), "99\n", "{at}");
    }
    assert_exit(&datum_with_ulimit(&s, "-n 128", &["check"]), 0);
}

/// The programs a pass starts inherit the limit of open files datum was
/// started with: 1d15824 had datum raise its own soft limit to 65,536 (or the
/// hard limit) at start for its folder handles, and every validator,
/// systemctl, apt-get and useradd it ran inherited the raised limit (some
/// close every descriptor up to it before they exec). The folder cache is
/// bounded now, so datum keeps the limit it was given.
#[test]
fn a_validator_is_given_the_limit_of_open_files_datum_was_given() {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: needs root (a validator definition must be root's)");
        return;
    }
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: app\ndesired:\n  path: /app.conf\n  content: \"x\\n\"\n  validate: limits\n",
    );
    s.with_admin_validator(
        "[validator.limits]\nprogram = \"/usr/bin/dash\"\n\
         args = [\"-c\", \"echo open-files-soft-limit=$(ulimit -Sn) >&2; exit 1\", \"limits\", \"{staged}\"]\n\
         package = \"dash\"\ninvalid_exit = [1]\nsummary = \"says its limit\"\n",
    );
    let out = datum_with_ulimit(&s, "-Sn 1000", &["apply"]);
    assert_exit(&out, 4);
    assert!(
        stdout(&out).contains("open-files-soft-limit=1000\n"),
        "{}",
        stdout(&out)
    );
}

/// A Tree whose owner or group names no account on the host fails like a
/// File does (plan shows the difference and says it would fail, apply names
/// the unknown account, exit 4 both). Before, the scan compares ids and
/// left an unknown name out, so an existing tree was "unchanged" (exit 0)
/// and the owner never applied.
#[test]
fn a_tree_owned_by_an_unknown_account_is_a_failure_not_in_sync() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n",
    );
    s.write("repo/base/tree/a.conf", "a = 1\n");
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n  owner: no-such-user\n  group: no-such-group\n",
    );
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 4);
    assert!(
        stdout(&plan).contains("tree:.: \"changed (owner, group)\"")
            && stdout(&plan).contains("would fail: unknown user `no-such-user`"),
        "{}",
        stdout(&plan)
    );
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 4);
    assert!(
        stdout(&apply).contains("unknown user `no-such-user`"),
        "{}",
        stdout(&apply)
    );
}

/// A folder where a Tree that does not purge declares a file: the apply
/// refuses to remove it, and `datum plan` now says so (exit 4, "would
/// fail") instead of promising the change (exit 2).
#[test]
fn a_folder_in_the_way_of_a_tree_that_does_not_purge_is_a_plan_failure() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n",
    );
    s.write("repo/base/tree/a.conf", "a = 1\n");
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    fs::remove_file(s.live("/etc/t/a.conf")).unwrap();
    s.write("root/etc/t/a.conf/inner", "mine\n");
    let plan = s.datum(&["plan"]);
    assert_exit(&plan, 4);
    assert!(
        stdout(&plan)
            .contains("would fail: cannot replace /etc/t/a.conf: a directory is in the way"),
        "{}",
        stdout(&plan)
    );
    assert_exit(&s.datum(&["apply"]), 4);
    assert!(s.live("/etc/t/a.conf/inner").is_file());
}

/// A purging Tree above Datum's own folder (`/var/lib/datum`: state store,
/// backups, lock) leaves it alone: not part of the tree, never purged.
/// Before, a Tree at `/var` removed the state store and the backups it had
/// just saved in the middle of its own pass, and did again on every pass
/// (never converging).
#[test]
fn a_purging_tree_above_datums_own_folder_leaves_it_alone() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: var\ndesired:\n  path: /var\n  source: tree\n  purge: true\n",
    );
    s.write("repo/base/tree/www/index.html", "hello\n");
    s.write("root/var/cache/stale", "stale\n");
    s.write("root/var/lib/other/o", "other\n");
    assert_exit(&s.datum(&["apply"]), 2);
    assert!(!s.live("/var/cache").exists());
    assert!(!s.live("/var/lib/other").exists());
    assert!(s.live("/var/lib/datum/state.db").is_file());
    // The evidence of what the purge removed is still there.
    let list = stdout(&s.datum(&["backup", "list"]));
    assert!(list.contains("/var/cache/stale"), "{list}");
    assert_exit(&s.datum(&["apply"]), 0);
    assert_exit(&s.datum(&["check"]), 0);
}

/// The same for `/etc/datum` (the host's identity, the fleet token, the
/// pull trust files, the repository's link): a purging Tree at `/etc`
/// leaves it out.
#[test]
fn a_purging_tree_at_etc_leaves_datums_configuration_alone() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: etc\ndesired:\n  path: /etc\n  source: tree\n  purge: true\n",
    );
    s.write("repo/base/tree/motd", "hello\n");
    s.write("root/etc/stale.conf", "stale\n");
    // (The tests give the host file with --host-file: this one is not read.)
    s.write("root/etc/datum/host.yaml", "name: kept\n");
    assert_exit(&s.datum(&["apply"]), 2);
    assert!(!s.live("/etc/stale.conf").exists());
    assert_eq!(
        fs::read_to_string(s.live("/etc/datum/host.yaml")).unwrap(),
        "name: kept\n"
    );
    assert_exit(&s.datum(&["apply"]), 0);
}

/// A killed pass's staging folder inside a folder a purging Tree must
/// remove is litter, not an excluded entry: it goes with its folder. Found
/// by killing applies of a Tree whose source turns folders into files:
/// with staging folders left out of the tree (0cf87f5), the litter counted
/// as an excluded entry and held the folder in the way on every pass.
#[test]
fn staging_litter_never_holds_a_folder_a_purging_tree_removes() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n  purge: true\n  exclude: [\"*.local\"]\n",
    );
    s.write("repo/base/tree/sub/in", "in\n");
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    s.write("root/etc/t/sub/.datum.stage.0123456789abcdef/in", "half\n");
    s.write("root/etc/t/gone/.datum.stage.fedcba9876543210/x", "half\n");
    fs::remove_dir_all(s.repo().join("base/tree/sub")).unwrap();
    s.write("repo/base/tree/sub", "now a file\n");
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(
        fs::read_to_string(s.live("/etc/t/sub")).unwrap(),
        "now a file\n"
    );
    assert!(!s.live("/etc/t/gone").exists());
    assert_exit(&s.datum(&["apply"]), 0);
}

/// What a local user writes into a managed file reaches the operator's
/// terminal through the plan's and the apply's content diff: an escape
/// sequence there could clear the screen, move the cursor over a line
/// (hiding a change), retitle the window or write the clipboard (OSC 52).
/// Both show it as text.
#[test]
fn a_plan_and_an_apply_never_pass_a_terminal_sequence_from_the_host_through() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: app\ndesired:\n  path: /etc/app.conf\n  content: \"hello\\n\"\n",
    );
    fs::create_dir_all(s.live("/etc")).unwrap();
    fs::write(
        s.live("/etc/app.conf"),
        "kept\n\u{1b}[2J\u{1b}]52;c;cm0gLXJmIH4=\u{7}\u{1b}[1A\u{1b}[2Khidden\tx\n",
    )
    .unwrap();
    for command in ["plan", "apply"] {
        let o = s.datum(&[command]);
        assert_exit(&o, 2);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{7}'),
            "{command}: a control character reached the terminal:\n{}",
            out.escape_debug()
        );
        assert!(out.contains("-\\u{1b}[2J\\u{1b}]52;c;"), "{command}: {out}");
        assert!(out.contains("hidden\tx"), "{command}: a tab is kept: {out}");
    }
}
