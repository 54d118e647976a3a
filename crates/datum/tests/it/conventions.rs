//! The conventions every command follows (README, "Conventions"): one JSON
//! document per command with `format_version` "1" and RFC 3339 UTC times,
//! `--json` the same as `--output json`, colour with `--color always` and
//! never when piped or with `NO_COLOR`, the repository named in full, and
//! the human `check` report laid out like `plan` (snapshot).

use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;

use crate::support::*;

const REPO: &str = "datum: v1alpha1\ntype: Directory\nname: app\ndesired: {path: /app, mode: \"0750\"}\n\
---\ndatum: v1alpha1\ntype: File\nname: config\ndesired:\n  path: /app/config.ini\n  mode: \"0640\"\n  content: \"[main]\\nport = 8080\\nworkers = 4\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /app/motd\n  mode: \"0644\"\n  content: \"hello\\n\"\n\
---\ndatum: v1alpha1\ntype: File\nname: token\nsensitive: true\ndesired:\n  path: /app/token\n  mode: \"0600\"\n  content: \"secret-value\\n\"\n";

/// Two layers, the second only for `role: web` (the sandbox host has it).
fn sandbox() -> Sandbox {
    let s = Sandbox::new();
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n  - name: web\n    path: web\n    match: {role: web}\n  - name: db\n    path: db\n    match: {role: db}\n",
    );
    s.write("repo/base/main.yaml", REPO);
    s.write(
        "repo/web/banner.yaml",
        "datum: v1alpha1\ntype: File\nname: banner\ndesired: {path: /app/banner, mode: \"0644\", content: \"web\\n\"}\n",
    );
    s.write("repo/db/skip.yaml", "");
    s
}

/// `datum` on the sandbox without a `--color` of the sandbox's own.
fn datum(s: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::cargo_bin("datum").expect("datum binary");
    cmd.arg("--repo")
        .arg(s.repo())
        .arg("--root")
        .arg(s.root())
        .arg("--host-file")
        .arg(s.dir.path().join("host.yaml"))
        .args(args)
        .env_remove("NO_COLOR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run datum")
}

/// A host that applied, then drifted in three ways (content, mode, gone).
fn drifted() -> Sandbox {
    let s = sandbox();
    assert_exit(&s.datum(&["apply"]), 2);
    std::fs::write(
        s.live("/app/config.ini"),
        "[main]\nport = 9090\nworkers = 4\n",
    )
    .unwrap();
    std::fs::set_permissions(
        s.live("/app/motd"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::fs::remove_file(s.live("/app/banner")).unwrap();
    std::fs::write(s.live("/app/token"), "hand-edited\n").unwrap();
    s
}

fn is_rfc3339_utc(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// Every time in a document (a key ending in `_at`, `first_seen`,
/// `last_seen`, `saved`) is an RFC 3339 UTC string or null.
fn assert_times(doc: &Value, what: &str) {
    match doc {
        Value::Object(map) => {
            for (k, v) in map {
                if k.ends_with("_at") || k == "first_seen" || k == "last_seen" {
                    assert!(
                        v.is_null() || v.as_str().is_some_and(is_rfc3339_utc),
                        "{what}: {k} = {v} is not RFC 3339 UTC"
                    );
                } else {
                    assert_times(v, what);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| assert_times(v, what)),
        _ => {}
    }
}

/// What differs between two runs of the same command by nature: durations
/// and the history's pass count.
fn steady(mut doc: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.remove("duration_ms");
                map.remove("passes");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut doc);
    doc
}

fn json_of(o: &Output, what: &str) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}{}", stdout(o), stderr(o)))
}

#[test]
fn every_json_document_has_format_version_rfc3339_times_and_json_is_output_json() {
    let s = drifted();
    let commands: &[&[&str]] = &[
        &["lint"],
        &["catalogue"],
        &["plan"],
        &["check"],
        &["schedule"],
        &["validators"],
        &["backup", "list"],
        &["pull", "--status"],
    ];
    for args in commands {
        let what = args.join(" ");
        let long: Vec<&str> = ["--output", "json"]
            .iter()
            .chain(args.iter())
            .copied()
            .collect();
        let short: Vec<&str> = ["--json"].iter().chain(args.iter()).copied().collect();
        let a = datum(&s, &long, &[]);
        let b = datum(&s, &short, &[]);
        assert_eq!(code(&a), code(&b), "{what}: {}", stderr(&a));
        let (a, b) = (json_of(&a, &what), json_of(&b, &what));
        assert_eq!(a["format_version"], "1", "{what}: {a}");
        assert_times(&a, &what);
        assert_eq!(
            steady(a),
            steady(b),
            "{what}: --json differs from --output json"
        );
    }
    // After an apply that replaced drifted files: their backups, dated.
    assert_exit(&s.datum(&["apply"]), 2);
    let list = json_of(
        &datum(&s, &["--json", "backup", "list"], &[]),
        "backup list",
    );
    let backups = list["backups"].as_array().expect("backups");
    assert!(!backups.is_empty(), "{list}");
    assert!(
        backups
            .iter()
            .all(|b| b["saved_at"].as_str().is_some_and(is_rfc3339_utc)),
        "{list}"
    );
    // The check's findings are dated, and its header's facts are fields.
    let check = json_of(&datum(&s, &["--json", "check"], &[]), "check");
    assert_eq!(check["labels"]["role"], "web", "{check}");
    assert_eq!(
        check["layers"],
        serde_json::json!(["base", "web"]),
        "{check}"
    );
    // --json and --output human together are a usage error.
    assert_exit(&datum(&s, &["--json", "--output", "human", "plan"], &[]), 1);
}

#[test]
fn quarantine_release_and_fingerprint_answer_json_when_asked() {
    let s = drifted();
    let q = datum(
        &s,
        &["--json", "quarantine", "--reason", "looking", "File/motd"],
        &[],
    );
    assert_exit(&q, 0);
    let q = json_of(&q, "quarantine");
    assert_eq!(q["format_version"], "1", "{q}");
    assert_eq!(q["resource"], "File[motd]", "{q}");
    assert_eq!(q["reason"], "looking", "{q}");
    assert_eq!(q["quarantined"], true, "{q}");
    let r = datum(&s, &["--output", "json", "release", "File/motd"], &[]);
    assert_exit(&r, 0);
    let r = json_of(&r, "release");
    assert_eq!(r["resource"], "File[motd]", "{r}");
    assert_eq!(r["released"], true, "{r}");
    let tree = s.repo();
    let tree = tree.to_str().expect("utf-8 path");
    let f = datum(&s, &["--json", "-v", "fingerprint", tree], &[]);
    assert_exit(&f, 0);
    let f = json_of(&f, "fingerprint");
    let human = datum(&s, &["fingerprint", tree], &[]);
    assert_eq!(
        f["fingerprint"].as_str(),
        Some(stdout(&human).trim()),
        "the same root hash in both forms: {f}"
    );
    let entries = f["entries"].as_array().expect("entries with -v");
    assert_eq!(entries[0]["path"], ".", "{f}");
    assert!(entries.iter().any(|e| e["path"] == "base/main.yaml"), "{f}");
}

#[test]
fn colour_with_color_always_and_none_when_piped_or_with_no_color() {
    let s = drifted();
    assert_exit(&s.datum(&["apply"]), 2);
    std::fs::write(s.live("/app/motd"), "changed\n").unwrap();
    for args in [
        &["check"][..],
        &["plan"],
        &["schedule"],
        &["backup", "list"],
        &["validators"],
    ] {
        let what = args.join(" ");
        let always: Vec<&str> = ["--color", "always"].iter().chain(args).copied().collect();
        let coloured = datum(&s, &always, &[]);
        assert!(
            stdout(&coloured).contains("\x1b["),
            "{what} --color always: no colour:\n{}{}",
            stdout(&coloured),
            stderr(&coloured)
        );
        // An explicit choice wins over NO_COLOR.
        let still = datum(&s, &always, &[("NO_COLOR", "1")]);
        assert!(stdout(&still).contains("\x1b["), "{what}");
        // Piped (auto), with or without NO_COLOR: plain.
        for env in [&[][..], &[("NO_COLOR", "1")]] {
            let plain = datum(&s, args, env);
            assert!(
                !stdout(&plain).contains('\x1b') && !stderr(&plain).contains('\x1b'),
                "{what} piped {env:?}: colour:\n{}",
                stdout(&plain)
            );
        }
        let never: Vec<&str> = ["--color", "never"].iter().chain(args).copied().collect();
        assert!(!stdout(&datum(&s, &never, &[])).contains('\x1b'), "{what}");
    }
}

#[test]
fn the_check_report_names_host_labels_layers_and_groups_findings() {
    let s = drifted();
    let out = s.datum(&["check"]);
    assert_exit(&out, 2);
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "[TIME]");
    settings.add_filter(r"in \d+ ms", "in N ms");
    settings.add_filter(
        &regex_escape(&s.dir.path().display().to_string()),
        "[SANDBOX]",
    );
    settings.bind(|| {
        insta::assert_snapshot!("check_report", stdout(&out));
    });
    let text = stdout(&out);
    assert!(text.starts_with("Check of test-host\n"), "{text}");
    assert!(text.contains("labels  env=test, role=web"), "{text}");
    assert!(text.contains("layers  base, web\n"), "{text}");
    assert!(
        !text.contains("secret-value") && !text.contains("hand-edited"),
        "{text}"
    );
}

#[test]
fn messages_name_the_repository_in_full() {
    let s = sandbox();
    let out = Command::cargo_bin("datum")
        .unwrap()
        .current_dir(s.repo())
        .args(["--repo", ".", "--root"])
        .arg(s.root())
        .arg("--host-file")
        .arg(s.dir.path().join("host.yaml"))
        .arg("lint")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let repo = std::fs::canonicalize(s.repo()).unwrap();
    let said = stdout(&out);
    assert!(
        said.starts_with(&format!("{}: no errors", repo.display()))
            || said.starts_with(&format!("{}: no errors", s.repo().display())),
        "{said}"
    );
}

#[test]
fn an_agent_reload_error_is_one_line_with_the_full_file_and_line() {
    let s = sandbox();
    s.write(
        "repo/base/broken.yaml",
        "datum: v1alpha1\ntype: File\nname: x\ndesired: {path: /x, mdoe: \"0644\"}\n",
    );
    let out = datum(&s, &["--log-format", "text", "agent", "--once"], &[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    let file = s.repo().join("base/broken.yaml");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(&format!("{}:4:", file.display())))
        .collect();
    assert!(!lines.is_empty(), "no FILE:LINE line:\n{err}");
    assert!(lines.iter().all(|l| l.contains("error")), "{err}");
    // No rendered excerpt (`-->`, `|` gutters) spread over lines.
    assert!(!err.contains(" --> "), "{err}");
}

/// The allocator is built to commit its arena as it is used (.cargo/config.toml):
/// committed all at once, every command's peak memory was 2-13 MiB higher
/// (docs/benchmarks.md, "Issue 12's sixth round"). mimalloc prints its options
/// when asked to be verbose.
#[test]
fn the_allocator_commits_its_arena_as_it_is_used() {
    let out = Command::cargo_bin("datum")
        .expect("datum binary")
        .arg("--version")
        .env("MIMALLOC_VERBOSE", "1")
        .env_remove("MIMALLOC_ARENA_EAGER_COMMIT")
        .output()
        .expect("run datum");
    assert_exit(&out, 0);
    let err = stderr(&out);
    assert!(
        err.contains("option 'arena_eager_commit': 0"),
        "mimalloc's options:\n{err}"
    );
}

/// A manifest error at `base/main.yaml:4:41` (`mode: 644`, unquoted), and a
/// sensitive resource with the same error whose line must never be shown.
const UNQUOTED_MODE: &str = "datum: v1alpha1\ntype: File\nname: a\ndesired: {path: /etc/a, content: \"x\\n\", mode: 644}\n\
---\ndatum: v1alpha1\ntype: File\nname: token\nsensitive: true\ndesired: {path: /etc/token, content: \"s3cret-value\\n\", mode: 600}\n";

/// The error document of `command` (`--output json`, exit 1): one JSON
/// document on stdout with `format_version`, the command, the error and its
/// diagnostics; the human text still on stderr.
#[track_caller]
fn error_document(o: &Output, command: &str) -> Value {
    assert_exit(o, 1);
    let doc = json_of(o, command);
    assert_eq!(doc["format_version"], "1", "{command}: {doc:#}");
    assert_eq!(doc["command"], command, "{doc:#}");
    assert!(
        doc["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{command}: {doc:#}"
    );
    assert!(doc["errors"].as_u64().is_some_and(|n| n >= 1), "{doc:#}");
    assert!(!stderr(o).is_empty(), "{command}: nothing on stderr");
    doc
}

#[test]
fn a_manifest_error_under_json_is_a_document_with_every_diagnostic() {
    let s = Sandbox::with_base(UNQUOTED_MODE);
    for command in ["plan", "apply", "check", "catalogue"] {
        for format in [&["--json"][..], &["--output", "json"]] {
            let args: Vec<&str> = format.iter().copied().chain([command]).collect();
            let o = s.datum(&args);
            let doc = error_document(&o, command);
            assert_eq!(doc["errors"], 2, "{command}: {doc:#}");
            let first = &doc["diagnostics"][0];
            assert_eq!(first["severity"], "error", "{doc:#}");
            assert_eq!(first["resource"], "File[a]", "{doc:#}");
            assert_eq!(first["origin"]["file"], "base/main.yaml", "{doc:#}");
            assert_eq!(first["origin"]["line"], 4, "{doc:#}");
            assert_eq!(first["origin"]["column"], 41, "{doc:#}");
            assert_eq!(first["origin"]["layer"], "base", "{doc:#}");
            assert!(
                first["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("quoted octal")),
                "{doc:#}"
            );
            let token = &doc["diagnostics"][1];
            assert_eq!(token["resource"], "File[token]", "{doc:#}");
            assert_eq!(token["origin"]["line"], 10, "{doc:#}");
            // The sensitive resource's line is shown nowhere.
            assert!(!stdout(&o).contains("s3cret"), "{}", stdout(&o));
            assert!(!stderr(&o).contains("s3cret"), "{}", stderr(&o));
            // The human diagnostics are still on stderr.
            assert!(stderr(&o).contains("base/main.yaml:4:41"), "{}", stderr(&o));
        }
    }
    assert!(
        !s.live("/etc/a").exists(),
        "a repository with errors was applied"
    );
    // lint's own document is unchanged: errors counted, no `error` field.
    let lint = s.datum(&["--json", "lint"]);
    assert_exit(&lint, 1);
    let lint = json_of(&lint, "lint");
    assert_eq!(lint["errors"], 2, "{lint:#}");
    assert!(lint.get("error").is_none(), "{lint:#}");
    assert!(lint.get("repository").is_some(), "{lint:#}");
    // --all-hosts on a repository that does not load (datum.yaml): the
    // error document.
    s.write("repo/hosts/web-01.yaml", "name: web-01\nlabels: {}\n");
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - {name: base, path: base, match: {}\n",
    );
    let all = s.datum(&["--json", "lint", "--all-hosts"]);
    let doc = error_document(&all, "lint");
    assert_eq!(
        doc["diagnostics"][0]["origin"]["file"], "datum.yaml",
        "{doc:#}"
    );
    assert_eq!(doc["diagnostics"][0]["origin"]["line"], 3, "{doc:#}");
}

#[test]
fn a_host_file_error_under_json_is_a_document_with_its_position() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\ndesired: {path: /etc/a, content: \"x\\n\", mode: \"0644\"}\n",
    );
    let host = s.write("host.yaml", "name: h1\nname: h2\n");
    for command in ["lint", "plan", "apply", "check", "catalogue"] {
        let o = s.datum(&["--json", command]);
        let doc = error_document(&o, command);
        let d = &doc["diagnostics"][0];
        assert_eq!(
            d["origin"]["file"],
            host.display().to_string(),
            "{command}: {doc:#}"
        );
        assert_eq!(d["origin"]["line"], 2, "{command}: {doc:#}");
        assert_eq!(d["origin"]["column"], 1, "{command}: {doc:#}");
        assert!(
            d["message"]
                .as_str()
                .is_some_and(|m| m.contains("duplicate key `name`")),
            "{doc:#}"
        );
        assert!(stderr(&o).contains("duplicate key"), "{}", stderr(&o));
    }
}

#[test]
fn a_damaged_state_store_under_json_is_a_document_with_the_message() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\ndesired: {path: /a, content: \"x\\n\", mode: \"0644\"}\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    let db = s.live("/var/lib/datum/state.db");
    drop(datum_store::Store::open(&db).unwrap());
    let mut bad = std::fs::read(&db).unwrap();
    bad[..100].fill(0x5a);
    std::fs::write(&db, &bad).unwrap();
    let o = s.datum(&["--json", "apply"]);
    let doc = error_document(&o, "apply");
    assert!(
        doc["error"]
            .as_str()
            .is_some_and(|e| e.contains("not a database") && e.contains("--rebuild-state")),
        "{doc:#}"
    );
    // No position to give: one diagnostic, its message the error's.
    let d = &doc["diagnostics"][0];
    assert_eq!(d["message"], doc["error"], "{doc:#}");
    assert!(d["origin"].is_null(), "{doc:#}");
    assert_eq!(doc["diagnostics"].as_array().map(Vec::len), Some(1));
    // A command that printed its own document does not add a second one:
    // a plan goes on read-only and reports as usual.
    let plan = s.datum(&["--json", "plan"]);
    let plan = json_of(&plan, "plan");
    assert_eq!(plan["command"], "plan", "{plan:#}");
    assert!(plan.get("error").is_none(), "{plan:#}");
}

/// A usage error is an error before the report too: under `--json` (or
/// `--output json`) it is the error document on stdout, the usage on stderr.
#[test]
fn a_usage_error_under_json_is_a_document() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\ndesired: {path: /etc/a, content: \"x\\n\", mode: \"0644\"}\n",
    );
    for args in [
        &["--json", "plan", "--bogus"][..],
        &["--output", "json", "plan", "--bogus"],
        &["plan", "--output=json", "--label", "role"],
    ] {
        let o = s.datum(args);
        let doc = error_document(&o, "plan");
        assert_eq!(doc["errors"], 1, "{args:?}: {doc:#}");
        assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));
    }
    // Without JSON asked for, stdout stays empty.
    let o = s.datum(&["plan", "--bogus"]);
    assert_exit(&o, 1);
    assert!(o.stdout.is_empty(), "{}", stdout(&o));
    // Help is no error: it prints help, never a document.
    let o = s.datum(&["--json", "plan", "--help"]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).starts_with("Show what an apply would change"),
        "{}",
        stdout(&o)
    );
}

/// Paths in messages are absolute: a host file given relative to the folder
/// Datum runs in is named in full in its errors.
#[test]
fn a_relative_host_file_is_named_in_full() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\ndesired: {path: /etc/a, content: \"x\\n\", mode: \"0644\"}\n",
    );
    let host = s.write("hosts/h.yaml", "name: h1\nlabel: {}\n");
    let o = Command::cargo_bin("datum")
        .expect("datum binary")
        .current_dir(s.dir.path())
        .arg("--repo")
        .arg(s.repo())
        .arg("--root")
        .arg(s.root())
        .args(["--host-file", "hosts/h.yaml", "plan"])
        .output()
        .expect("run datum");
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains(&format!("{}:2:1: unknown key `label`", host.display())),
        "{err}"
    );
}

/// `datum fleet --credentials FILE` names the file it could not read, in
/// full: it said only 'cannot read the admin credential', caused by 'No
/// such file or directory', which file left to guess.
#[test]
fn an_admin_credential_that_cannot_be_read_is_named_in_full() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\ndesired: {path: /etc/a, content: \"x\\n\", mode: \"0644\"}\n",
    );
    let o = Command::cargo_bin("datum")
        .expect("datum binary")
        .current_dir(s.dir.path())
        .args(["fleet", "--credentials", "srv/admin.yaml", "hosts"])
        .output()
        .expect("run datum");
    assert_exit(&o, 1);
    let err = stderr(&o);
    let full = s.dir.path().join("srv/admin.yaml");
    assert!(
        err.contains(&format!(
            "cannot read the admin credential {}",
            full.display()
        )),
        "{err}"
    );
}

/// A file or folder named relative to where the command runs, in a folder
/// that is not there: the error names it in full (docs/conventions.md:
/// paths in messages are absolute), every line of it.
#[track_caller]
fn named_in_full(s: &Sandbox, args: &[&str], relative: &str) {
    let o = Command::cargo_bin("datum")
        .expect("datum binary")
        .current_dir(s.dir.path())
        .arg("--repo")
        .arg(s.repo())
        .arg("--root")
        .arg(s.root())
        .args(args)
        .output()
        .expect("run datum");
    assert_exit(&o, 1);
    let err = stderr(&o);
    let full = s.dir.path().join(relative);
    assert!(err.contains(&full.display().to_string()), "{err}");
    let first = std::path::Path::new(relative)
        .components()
        .next()
        .expect("a relative path")
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    for line in err.lines() {
        assert!(
            !line.contains(&format!(" {first}")),
            "`{relative}` named as typed: {line}\n{err}"
        );
    }
}

#[test]
fn a_relative_plan_file_is_named_in_full() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\ndesired: {path: /etc/a, content: \"x\\n\", mode: \"0644\"}\n",
    );
    named_in_full(&s, &["plan", "--out", "nodir/p.plan"], "nodir/p.plan");
}

#[test]
fn a_relative_saved_plan_to_apply_is_named_in_full() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\ndesired: {path: /etc/a, content: \"x\\n\", mode: \"0644\"}\n",
    );
    named_in_full(&s, &["apply", "nodir/p.plan"], "nodir/p.plan");
}

#[test]
fn a_relative_markdown_report_is_named_in_full() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\ndesired: {path: /etc/a, content: \"x\\n\", mode: \"0644\"}\n",
    );
    named_in_full(&s, &["check", "--markdown", "nodir/x.md"], "nodir/x.md");
}

#[test]
fn a_relative_server_folder_is_named_in_full() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: a\ndesired: {path: /etc/a, content: \"x\\n\", mode: \"0644\"}\n",
    );
    named_in_full(
        &s,
        &["server", "enroll", "x", "--dir", "nodir", "--out", "r.yaml"],
        "nodir",
    );
}

/// Every command that prints its own answer (not a report) prints it in the
/// format asked for, through one function (`render::emit`): under `--output
/// json` one JSON document with `format_version`, else text that is not
/// JSON. A command that chose its format itself with `if output == Json`
/// gave any other format its human text; one that forgot `--output` gave
/// JSON to a person, or text to a program.
#[test]
fn each_command_of_its_own_output_answers_in_the_format_asked_for() {
    let s = drifted();
    assert_exit(&s.datum(&["apply"]), 2);
    let tree = s.repo();
    let tree = tree.to_str().expect("utf-8 path");
    let new_repo = s.dir.path().join("new");
    let new_repo = new_repo.to_str().expect("utf-8 path");
    let git = s.dir.path().join("git");
    let git_dir = git.to_str().expect("utf-8 path");
    let bundle = s.dir.path().join("one.bundle");
    let bundle = bundle.to_str().expect("utf-8 path");
    let generated = s.dir.path().join("generated");
    let generated = generated.to_str().expect("utf-8 path");
    let has_git = std::process::Command::new("git")
        .args(["init", "-q", "-b", "main", git_dir])
        .status()
        .is_ok_and(|s| s.success())
        && {
            std::fs::write(git.join("a"), "a\n").unwrap();
            std::process::Command::new("git")
                .args(["-C", git_dir, "add", "a"])
                .status()
                .is_ok_and(|s| s.success())
                && std::process::Command::new("git")
                    .args([
                        "-C",
                        git_dir,
                        "-c",
                        "user.name=t",
                        "-c",
                        "user.email=t@t",
                        "-c",
                        "commit.gpgsign=false",
                        "commit",
                        "-qm",
                        "a",
                    ])
                    .status()
                    .is_ok_and(|s| s.success())
        };
    let list = json_of(
        &datum(&s, &["--json", "backup", "list"], &[]),
        "backup list",
    );
    let id = list["backups"][0]["id"].to_string();
    s.write(
        "repo/hosts/test-host.yaml",
        "name: test-host\nlabels:\n  role: web\n",
    );
    // (arguments, exit): each once as JSON, then once for a person.
    let mut commands: Vec<(Vec<&str>, i32)> = vec![
        (vec!["lint"], 0),
        (vec!["validators"], 0),
        (vec!["schedule"], 0),
        (vec!["fingerprint", tree], 0),
        (vec!["-v", "fingerprint", tree], 0),
        (vec!["backup", "list"], 0),
        (vec!["backup", "show", &id], 0),
        (vec!["backup", "restore", &id], 0),
        (vec!["outbox"], 0),
        (vec!["pull", "--status"], 0),
        (vec!["quarantine", "--reason", "looking", "File/motd"], 0),
        (vec!["release", "File/motd"], 0),
        (vec!["init", new_repo, "--host", "h1"], 0),
        (vec!["lint", "--all-hosts"], 0),
        (vec!["generate-man", generated], 0),
        (vec!["generate-completions", generated], 0),
    ];
    if has_git {
        commands.push((vec!["bundle", "--from", git_dir, bundle], 0));
    }
    for json in [true, false] {
        for (args, exit) in &commands {
            let what = args.join(" ");
            if args[0] == "init" {
                let _ = std::fs::remove_dir_all(new_repo);
            }
            if args[0].starts_with("generate-") {
                let _ = std::fs::remove_dir_all(generated);
            }
            let format = if json { "json" } else { "human" };
            let all: Vec<&str> = ["--output", format]
                .iter()
                .chain(args.iter())
                .copied()
                .collect();
            let out = datum(&s, &all, &[]);
            assert_exit(&out, *exit);
            let text = stdout(&out);
            let parsed = serde_json::from_str::<Value>(&text);
            if json {
                let doc = parsed.unwrap_or_else(|e| {
                    panic!("{what} --output json: not one JSON document ({e}):\n{text}")
                });
                assert_eq!(doc["format_version"], "1", "{what}: {doc}");
            } else {
                assert!(
                    !text.trim().is_empty() && parsed.is_err(),
                    "{what} --output human: not text for a person:\n{text}"
                );
            }
        }
    }
}
