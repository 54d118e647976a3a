//! `/etc/datum/datum.toml` (here a file named by `DATUM_CONFIG`, never the
//! machine's): each level of flag > environment > file > built-in, and the
//! file's errors.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use crate::support::{Sandbox, assert_exit, stderr, stdout};

/// A sandbox with four repositories, each declaring one File named after
/// it: `default` (the current folder: the built-in default), `file`, `env`
/// and `flag`.
fn four_repositories() -> Sandbox {
    let s = Sandbox::new();
    for name in ["default", "file", "env", "flag"] {
        s.write(
            &format!("{name}/datum.yaml"),
            "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
        );
        s.write(
            &format!("{name}/base/main.yaml"),
            &format!(
                "datum: v1alpha1\ntype: File\nname: from-{name}\ndesired:\n  path: /etc/{name}\n  content: \"x\\n\"\n"
            ),
        );
    }
    s
}

/// `datum catalogue` run in the `default` repository, with the defaults
/// file `config` (when given), `DATUM_REPO` set to `env` (when given), and
/// `args` before the command.
fn catalogue(s: &Sandbox, config: Option<&Path>, env: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = assert_cmd::Command::cargo_bin("datum").unwrap();
    cmd.current_dir(s.dir.path().join("default"))
        .env_remove("DATUM_REPO")
        .env_remove("DATUM_CONFIG")
        .args(["--root", s.root().to_str().unwrap()])
        .args([
            "--host-file",
            s.dir.path().join("host.yaml").to_str().unwrap(),
        ])
        .args(args)
        .arg("catalogue");
    if let Some(config) = config {
        cmd.env("DATUM_CONFIG", config);
    }
    if let Some(env) = env {
        cmd.env("DATUM_REPO", s.dir.path().join(env));
    }
    cmd.output().unwrap()
}

/// Which of the four repositories the catalogue came from.
fn came_from(out: &Output) -> String {
    assert_exit(out, 0);
    let text = stdout(out);
    let names: Vec<&str> = ["default", "file", "env", "flag"]
        .into_iter()
        .filter(|n| text.contains(&format!("\"from-{n}\"")))
        .collect();
    assert_eq!(names.len(), 1, "{text}");
    names[0].to_owned()
}

fn defaults_file(s: &Sandbox, text: &str) -> std::path::PathBuf {
    let path = s.write("etc/datum/datum.toml", text);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    path
}

#[test]
fn each_precedence_level_wins_over_the_ones_below() {
    let s = four_repositories();
    let file = defaults_file(
        &s,
        &format!(
            "# the machine's defaults\nrepo = \"{}\"\n",
            s.dir.path().join("file").display()
        ),
    );
    let flag = s.dir.path().join("flag");
    let flag = flag.to_str().unwrap();
    // Built-in: the current folder (an empty defaults file sets nothing).
    let empty = s.write("etc/datum/empty.toml", "");
    assert_eq!(
        came_from(&catalogue(&s, Some(&empty), None, &[])),
        "default"
    );
    // The file over the built-in default.
    assert_eq!(came_from(&catalogue(&s, Some(&file), None, &[])), "file");
    // The environment over the file.
    assert_eq!(
        came_from(&catalogue(&s, Some(&file), Some("env"), &[])),
        "env"
    );
    // The flag over the environment and the file.
    assert_eq!(
        came_from(&catalogue(&s, Some(&file), Some("env"), &["--repo", flag])),
        "flag"
    );
    // And over the file alone.
    assert_eq!(
        came_from(&catalogue(&s, Some(&file), None, &["--repo", flag])),
        "flag"
    );
}

#[test]
fn an_unknown_key_or_bad_value_stops_before_anything_runs_naming_file_and_line() {
    let s = four_repositories();
    let file = defaults_file(&s, "color = \"never\"\n\nrepository = \"/srv\"\n");
    let out = catalogue(&s, Some(&file), None, &[]);
    assert_exit(&out, 1);
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    let expected = format!("{}:3: unknown field `repository`", file.display());
    assert!(stderr(&out).contains(&expected), "{}", stderr(&out));

    let file = defaults_file(&s, "[agent]\nfull_interval = \"hourly\"\n");
    let out = catalogue(&s, Some(&file), None, &[]);
    assert_exit(&out, 1);
    let expected = format!(
        "{}:2: [agent] full_interval: `hourly` is not a duration",
        file.display()
    );
    assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
}

#[test]
fn a_named_file_must_exist_and_be_writable_by_its_owner_only() {
    let s = four_repositories();
    let missing = s.dir.path().join("etc/datum/none.toml");
    let out = catalogue(&s, Some(&missing), None, &[]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("DATUM_CONFIG names") && stderr(&out).contains("none.toml"),
        "{}",
        stderr(&out)
    );
    // Whoever may write it decides which repository a root process applies.
    let file = defaults_file(&s, "repo = \"/srv/elsewhere\"\n");
    fs::set_permissions(&file, fs::Permissions::from_mode(0o664)).unwrap();
    let out = catalogue(&s, Some(&file), None, &[]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("datum.toml") && stderr(&out).contains("writable by group or others"),
        "{}",
        stderr(&out)
    );
}
