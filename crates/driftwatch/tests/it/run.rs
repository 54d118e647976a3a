//! `driftwatch run` end to end through the real process runner, with a fake `tofu`: a
//! shell script that answers `plan` by copying fixture JSON to the `-out` file (exiting
//! 0/1/2 as told) and `show -json` by printing it. OpenTofu itself cannot be installed on
//! the build machines.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::support::{driftwatch, fixture, outcome};

const FAKE_TOFU: &str = r#"#!/bin/sh
echo "$*" >> "$FAKE_TOFU_LOG"
case "$2" in
  plan)
    out=""; ro=0
    for a in "$@"; do
      case "$a" in
        -out=*) out="${a#-out=}" ;;
        -refresh-only) ro=1 ;;
      esac
    done
    if [ "$ro" = 1 ]; then
      cp "$FAKE_REFRESH" "$out"; echo "$FAKE_REFRESH_ERR" >&2; exit "${FAKE_REFRESH_CODE:-2}"
    else
      cp "$FAKE_PLAN" "$out"; exit "${FAKE_PLAN_CODE:-2}"
    fi ;;
  show)
    for last in "$@"; do :; done
    cat "$last" ;;
  *) echo "fake tofu: unexpected $2" >&2; exit 1 ;;
esac
"#;

fn fake_tofu(dir: &Path) -> PathBuf {
    let path = dir.join("tofu");
    std::fs::write(&path, FAKE_TOFU).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn stack_dir(dir: &Path) -> PathBuf {
    let stack = dir.join("shop-prod");
    std::fs::create_dir_all(&stack).unwrap();
    std::fs::copy(
        fixture("shop-prod/main.tf.json"),
        stack.join("main.tf.json"),
    )
    .unwrap();
    stack
}

fn run_cmd(dir: &Path) -> assert_cmd::Command {
    let mut cmd = driftwatch();
    cmd.arg("run")
        .arg("--chdir")
        .arg(stack_dir(dir))
        .arg("--binary")
        .arg(fake_tofu(dir))
        .env("FAKE_TOFU_LOG", dir.join("calls.log"))
        .env("FAKE_REFRESH", fixture("shop-prod/refresh_only.json"))
        .env("FAKE_PLAN", fixture("shop-prod/plan.json"))
        .env("FAKE_REFRESH_ERR", "");
    cmd
}

#[test]
fn run_reports_like_report_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = outcome(&mut run_cmd(dir.path()));
    assert_eq!(out.code, 2, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[1],
        "- local_file.motd deleted outside: the next apply creates it again"
    );
    assert!(lines[4].contains("covered by ignore_changes (metadata[0].labels)"));
    // The stack name defaults to the directory name.
    assert!(
        out.stderr.contains("driftwatch: shop-prod: 4 actionable"),
        "{}",
        out.stderr
    );
    let log = std::fs::read_to_string(dir.path().join("calls.log")).unwrap();
    let calls: Vec<&str> = log.lines().collect();
    assert_eq!(calls.len(), 4, "{log}");
    assert!(calls[0].contains(
        " plan -refresh-only -input=false -no-color -detailed-exitcode -lock-timeout=5m -out="
    ));
    assert!(calls[1].contains(" show -json "));
    assert!(
        calls[2].contains(" plan -input=false -no-color -detailed-exitcode -lock-timeout=5m -out=")
    );
    // Every saved plan file, and its temporary directory, is gone.
    for call in &calls {
        if let Some(out) = call.split(' ').find_map(|a| a.strip_prefix("-out=")) {
            assert!(!Path::new(out).exists(), "{out} left behind");
            assert!(!Path::new(out).parent().unwrap().exists());
        }
    }
}

#[test]
fn failed_plan_exits_1_and_removes_the_plan_dir() {
    let dir = tempfile::tempdir().unwrap();
    let out = outcome(
        run_cmd(dir.path())
            .env("FAKE_REFRESH_CODE", "1")
            .env("FAKE_REFRESH_ERR", "Error: Error acquiring the state lock"),
    );
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("refresh-only plan failed (exit 1)"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("state lock"), "{}", out.stderr);
    let log = std::fs::read_to_string(dir.path().join("calls.log")).unwrap();
    let out_file = log
        .split([' ', '\n'])
        .find_map(|a| a.strip_prefix("-out="))
        .unwrap();
    assert!(!Path::new(out_file).parent().unwrap().exists());
}

#[test]
fn drift_only_runs_one_plan_and_lock_timeout_is_passed() {
    let dir = tempfile::tempdir().unwrap();
    let out = outcome(
        run_cmd(dir.path())
            .arg("--drift-only")
            .arg("--lock-timeout")
            .arg("90s"),
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    let log = std::fs::read_to_string(dir.path().join("calls.log")).unwrap();
    assert_eq!(log.lines().count(), 2);
    assert!(log.contains("-lock-timeout=90s"));
}

#[test]
fn missing_binary_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let out = outcome(
        driftwatch()
            .arg("run")
            .arg("--chdir")
            .arg(dir.path())
            .arg("--binary")
            .arg("/nonexistent/tofu"),
    );
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("cannot run /nonexistent/tofu"),
        "{}",
        out.stderr
    );
}
