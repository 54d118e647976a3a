//! `datum init` and `datum lint --all-hosts`: a new user's first steps.

use std::fs;

use crate::support::{Sandbox, assert_exit, stderr, stdout};

/// `datum init` into `repo/new` of a fresh sandbox.
fn initialised() -> Sandbox {
    let s = Sandbox::new();
    let out = s.datum(&[
        "init",
        s.repo().join("new").to_str().unwrap(),
        "--host",
        "web-01",
    ]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("hosts/web-01.yaml"),
        "{}",
        stdout(&out)
    );
    s
}

#[test]
fn init_writes_a_repository_that_lints_plans_applies_and_checks_clean() {
    let s = initialised();
    let repo = s.repo().join("new");
    for f in [
        "datum.yaml",
        "base/note.yaml",
        "web/README",
        "hosts/web-01.yaml",
    ] {
        assert!(repo.join(f).is_file(), "{f} missing");
    }
    let host_file = repo.join("hosts/web-01.yaml");
    let run = |args: &[&str]| {
        assert_cmd::Command::cargo_bin("datum")
            .unwrap()
            .arg("--repo")
            .arg(&repo)
            .arg("--root")
            .arg(s.root())
            .arg("--host-file")
            .arg(&host_file)
            .args(["--color", "never"])
            .args(args)
            .output()
            .unwrap()
    };
    let lint = run(&["lint", "--all-hosts"]);
    assert_exit(&lint, 0);
    assert!(stdout(&lint).contains("web-01"), "{}", stdout(&lint));
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&run(&["plan"]), 2);
    assert_exit(&run(&["apply"]), 2);
    assert!(s.live("/etc/datum/MANAGED").is_file());
    assert_exit(&run(&["apply"]), 0);
    assert_exit(&run(&["check"]), 0);
}

#[test]
fn init_never_overwrites_and_writes_nothing_when_it_refuses() {
    let s = initialised();
    let repo = s.repo().join("new");
    fs::write(repo.join("datum.yaml"), "mine\n").unwrap();
    let out = s.datum(&["init", repo.to_str().unwrap()]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("already a Datum repository"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        fs::read_to_string(repo.join("datum.yaml")).unwrap(),
        "mine\n"
    );

    // One of the files exists already (no datum.yaml yet): nothing is written.
    let other = s.repo().join("other");
    fs::create_dir_all(other.join("base")).unwrap();
    fs::write(other.join("base/note.yaml"), "kept\n").unwrap();
    let out = s.datum(&["init", other.to_str().unwrap(), "--host", "h"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("exists already"), "{}", stderr(&out));
    assert!(!other.join("datum.yaml").exists());
    assert!(!other.join("hosts").exists());
    assert_eq!(
        fs::read_to_string(other.join("base/note.yaml")).unwrap(),
        "kept\n"
    );

    // A link where a file goes is refused, never written through.
    let linked = s.repo().join("linked");
    fs::create_dir_all(&linked).unwrap();
    let victim = s.dir.path().join("victim");
    fs::write(&victim, "precious\n").unwrap();
    std::os::unix::fs::symlink(&victim, linked.join("datum.yaml")).unwrap();
    let out = s.datum(&["init", linked.to_str().unwrap(), "--host", "h"]);
    assert_exit(&out, 1);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(!linked.join("base").exists());
}

/// Without --host, init names the host as every command does; a name taken
/// from ROOT/etc/hostname that breaks the host-name rule is refused with
/// --host as the way out, and nothing is written.
#[test]
fn init_refuses_a_fallback_host_name_and_asks_for_host() {
    let s = Sandbox::new();
    s.write("host.yaml", "labels: {}\n");
    let hostname = s.write("root/etc/hostname", "web 01\n");
    let new = s.repo().join("new");
    let out = s.datum(&["init", new.to_str().unwrap()]);
    assert_exit(&out, 1);
    let want = format!(
        "`web 01` (read from {}) cannot name a host: give --host NAME",
        hostname.display()
    );
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));
    assert!(!new.exists());
}

/// A relative DIR is named in full, as `git init` names its folder: in the
/// first line, the next steps, the JSON document and a refusal.
#[test]
fn init_names_a_relative_folder_in_full() {
    let s = Sandbox::new();
    let init = |args: &[&str]| {
        assert_cmd::Command::cargo_bin("datum")
            .unwrap()
            .current_dir(s.dir.path())
            .args(["--color", "never", "init"])
            .args(args)
            .args(["--host", "web-01"])
            .output()
            .unwrap()
    };
    let full = s.dir.path().canonicalize().unwrap().join("new");
    let out = init(&["new"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        format!("created a Datum repository in {}:", full.display()),
        "{text}"
    );
    let lint = format!("datum --repo {} lint --all-hosts", full.display());
    assert!(text.contains(&lint), "{text}");
    let plan = format!("--host-file {}/hosts/web-01.yaml plan", full.display());
    assert!(text.contains(&plan), "{text}");
    // `..` and the way there resolved, in JSON too.
    fs::create_dir(s.dir.path().join("sub")).unwrap();
    let out = init(&["--json", "sub/../other"]);
    assert_exit(&out, 0);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let other = s.dir.path().canonicalize().unwrap().join("other");
    assert_eq!(doc["repository"], other.display().to_string(), "{doc}");
    // Refused: the folder in full as well.
    let out = init(&["new"]);
    assert_exit(&out, 1);
    let refused = format!("{}: already a Datum repository", full.display());
    assert!(stderr(&out).contains(&refused), "{}", stderr(&out));
}

#[test]
fn lint_all_hosts_renders_every_host_file_and_names_the_ones_that_fail() {
    let s = initialised();
    let repo = s.repo().join("new");
    // A template that renders for one host and fails for another.
    fs::write(
        repo.join("base/motd.yaml"),
        "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  template: templates/motd.j2\n",
    )
    .unwrap();
    fs::create_dir_all(repo.join("base/templates")).unwrap();
    fs::write(
        repo.join("base/templates/motd.j2"),
        "{% if host.labels.env is undefined %}{{ fail_here() }}{% endif %}env {{ host.labels.env }}\n",
    )
    .unwrap();
    fs::write(
        repo.join("hosts/web-01.yaml"),
        "name: web-01\nlabels: {env: prod}\n",
    )
    .unwrap();
    fs::write(repo.join("hosts/db-01.yaml"), "name: db-01\nlabels: {}\n").unwrap();
    let out = assert_cmd::Command::cargo_bin("datum")
        .unwrap()
        .arg("--repo")
        .arg(&repo)
        .args(["--color", "never", "lint", "--all-hosts"])
        .output()
        .unwrap();
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("db-01 ("), "{err}");
    assert!(err.contains("1 of 2 host(s) do not compile"), "{err}");
    assert!(stdout(&out).contains("web-01 ("), "{}", stdout(&out));

    let json = assert_cmd::Command::cargo_bin("datum")
        .unwrap()
        .arg("--repo")
        .arg(&repo)
        .args(["--output", "json", "lint", "--all-hosts"])
        .output()
        .unwrap();
    assert_exit(&json, 1);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["format_version"], "1");
    assert_eq!(doc["failed"], 1);
    let hosts = doc["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2);
    assert_eq!(hosts[0]["host"], "db-01");
    assert!(hosts[0]["errors"].as_u64().unwrap() >= 1);
    assert_eq!(hosts[1]["host"], "web-01");
    assert_eq!(hosts[1]["errors"], 0);
}

/// A host file that does not parse is named once, as what it is (not "cannot
/// read"), and counts as an error in the JSON, as every other failure does.
#[test]
fn lint_all_hosts_names_a_malformed_host_file_once_and_counts_it() {
    let s = initialised();
    let repo = s.repo().join("new");
    fs::write(
        repo.join("hosts/db-01.yaml"),
        "name: db-01\nlabels: {role: [db]}\n",
    )
    .unwrap();
    let run = |format: &str| {
        assert_cmd::Command::cargo_bin("datum")
            .unwrap()
            .arg("--repo")
            .arg(&repo)
            .args([
                "--color",
                "never",
                "--output",
                format,
                "lint",
                "--all-hosts",
            ])
            .output()
            .unwrap()
    };
    let out = run("human");
    assert_exit(&out, 1);
    let err = stderr(&out);
    let file = repo.join("hosts/db-01.yaml");
    let file = file.to_str().unwrap();
    assert!(
        err.contains(&format!(
            "error: label `role` must be a single value, found a list\n --> {file}:2:16\n  |\n2 | labels: {{role: [db]}}\n"
        )),
        "{err}"
    );
    assert_eq!(err.matches(file).count(), 1, "{err}");
    assert!(!err.contains("cannot read"), "{err}");

    let json = run("json");
    assert_exit(&json, 1);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["failed"], 1);
    let bad = doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["file"] == file)
        .unwrap();
    assert_eq!(bad["errors"], 1, "{bad}");
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .contains("must be a single value")
    );
}
