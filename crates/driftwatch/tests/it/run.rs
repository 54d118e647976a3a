//! `driftwatch run` end to end through the real process runner, with a fake `tofu`: a
//! shell script that answers `plan` by copying fixture JSON to the `-out` file (exiting
//! 0/1/2 as told) and `show -json` by printing it. OpenTofu itself cannot be installed on
//! the build machines.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::support::{assert_table, driftwatch, fixture, outcome};

/// A stack directory may hold its own answers (`fake-refresh.json`, `fake-plan.json`) or
/// `fake-fail` (the refresh-only plan then fails with its contents on stderr).
const FAKE_TOFU: &str = r#"#!/bin/sh
echo "$*" >> "$FAKE_TOFU_LOG"
dir="${1#-chdir=}"
case "$2" in
  plan)
    out=""; ro=0
    for a in "$@"; do
      case "$a" in
        -out=*) out="${a#-out=}" ;;
        -refresh-only) ro=1 ;;
      esac
    done
    refresh="$FAKE_REFRESH"; plan="$FAKE_PLAN"
    [ -f "$dir/fake-refresh.json" ] && refresh="$dir/fake-refresh.json"
    [ -f "$dir/fake-plan.json" ] && plan="$dir/fake-plan.json"
    if [ -f "$dir/fake-fail" ]; then cat "$dir/fake-fail" >&2; exit 1; fi
    if [ "$ro" = 1 ]; then
      cp "$refresh" "$out"; echo "$FAKE_REFRESH_ERR" >&2; exit "${FAKE_REFRESH_CODE:-2}"
    else
      cp "$plan" "$out"; exit "${FAKE_PLAN_CODE:-2}"
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
    // Line diffs of multi-line values are indented under their finding.
    let lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| !l.starts_with("    "))
        .collect();
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
        out.stderr
            .contains("cannot run /nonexistent/tofu: not found"),
        "{}",
        out.stderr
    );
    // The default engine missing from PATH (an operator with terraform only) is told what
    // --binary is for, not the OS's "No such file or directory", which reads like a missing
    // stack.
    let out = outcome(
        driftwatch()
            .arg("run")
            .arg("--chdir")
            .arg(dir.path())
            .env("PATH", dir.path()),
    );
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains(
            "cannot run tofu: not found (not on PATH, not at that path, or its #! interpreter is missing); --binary names the engine: tofu (the default), terraform, or a path to either"
        ),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("No such file"), "{}", out.stderr);
}

#[test]
fn a_stack_never_initialised_is_told_to_run_init() {
    // terraform 1.11 on a stack without `init` quotes only "Error: Inconsistent dependency
    // lock file / The following dependency selections recorded in the lock file are",
    // which never says what to do.
    let dir = tempfile::tempdir().unwrap();
    let stack = stack_dir(dir.path());
    std::fs::write(
        stack.join("fake-fail"),
        "Error: Inconsistent dependency lock file\n\nThe following dependency selections recorded in the lock file are\ninconsistent with the current configuration:\n",
    )
    .unwrap();
    let out = outcome(&mut run_cmd(dir.path()));
    assert_eq!(out.code, 1);
    let hint = format!(
        "({} is not initialised: it has no .terraform folder; run `{} -chdir={} init` first)",
        stack.display(),
        dir.path().join("tofu").display(),
        stack.display()
    );
    assert!(out.stderr.contains(&hint), "{}", out.stderr);
    // An initialised stack whose plan fails gets the engine's words alone.
    std::fs::create_dir(stack.join(".terraform")).unwrap();
    let out = outcome(&mut run_cmd(dir.path()));
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("Inconsistent dependency"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("not initialised"), "{}", out.stderr);
    // TF_DATA_DIR names the data directory, relative to the stack.
    let out = outcome(run_cmd(dir.path()).env("TF_DATA_DIR", "elsewhere"));
    assert!(
        out.stderr.contains("it has no elsewhere folder"),
        "{}",
        out.stderr
    );
}

/// Three stacks in one directory: shop-prod (drift), network (clean), broken (its plan fails).
fn three_stacks(dir: &Path) -> [PathBuf; 3] {
    let shop = stack_dir(dir);
    let network = dir.join("network");
    std::fs::create_dir_all(&network).unwrap();
    std::fs::copy(
        fixture("clean/refresh_only.json"),
        network.join("fake-refresh.json"),
    )
    .unwrap();
    std::fs::copy(fixture("clean/plan.json"), network.join("fake-plan.json")).unwrap();
    let broken = dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(
        broken.join("fake-fail"),
        "Error: Error acquiring the state lock\n",
    )
    .unwrap();
    [shop, network, broken]
}

fn many_cmd(dir: &Path, stacks: &[PathBuf]) -> assert_cmd::Command {
    let mut cmd = driftwatch();
    cmd.arg("run")
        .arg("--binary")
        .arg(fake_tofu(dir))
        .env("FAKE_TOFU_LOG", dir.join("calls.log"))
        .env("FAKE_REFRESH", fixture("shop-prod/refresh_only.json"))
        .env("FAKE_PLAN", fixture("shop-prod/plan.json"))
        .env("FAKE_REFRESH_ERR", "");
    for s in stacks {
        cmd.arg("--chdir").arg(s);
    }
    cmd
}

#[test]
fn several_stacks_one_report_each_a_summary_and_the_worst_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let stacks = three_stacks(dir.path());
    let out = outcome(&mut many_cmd(dir.path(), &stacks));
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    let text = &out.stdout;
    // Each stack's report under its own heading, in the order given.
    let shop = text.find("=== shop-prod (").unwrap();
    let network = text.find("=== network (").unwrap();
    let broken = text.find("=== broken (").unwrap();
    assert!(shop < network && network < broken, "{text}");
    assert!(text[shop..network].contains("- local_file.motd deleted outside"));
    assert!(
        text[broken..].contains(
            "! could not check this stack: refresh-only plan failed (exit 1): Error: Error acquiring the state lock"
        ),
        "{text}"
    );
    // The summary table: one row per stack, the failed one included.
    assert_table(
        text,
        &[
            "stack      result  exit  actionable",
            "shop-prod  drift      2           4",
            "network    clean      0           0",
            "broken     error      1           -",
        ],
    );
    assert!(
        out.stderr
            .contains("driftwatch: error: broken: refresh-only plan failed (exit 1)"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("driftwatch: shop-prod: 4 actionable"));
    assert!(out.stderr.contains("driftwatch: network: no drift"));
    // Without the broken stack, drift is the worst: 2.
    let out = outcome(&mut many_cmd(dir.path(), &stacks[..2]));
    assert_eq!(out.code, 2, "{}", out.stderr);
    let out = outcome(&mut many_cmd(dir.path(), &stacks[1..2]));
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[test]
fn several_stacks_as_json_and_markdown_files() {
    let dir = tempfile::tempdir().unwrap();
    let stacks = three_stacks(dir.path());
    let md = dir.path().join("md");
    let out = outcome(
        many_cmd(dir.path(), &stacks)
            .arg("--output")
            .arg("json")
            .arg("--markdown-dir")
            .arg(&md)
            .arg("--jobs")
            .arg("2"),
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["format_version"], "1");
    assert_eq!(doc["schema"], "driftwatch/run");
    assert_eq!(doc["generated_at"], "2026-10-28T00:00:00Z");
    assert_eq!(doc["exit_code"], 1);
    assert_eq!(
        doc["summary"],
        serde_json::json!({"stacks": 3, "clean": 1, "drift": 1, "error": 1})
    );
    let names: Vec<&str> = doc["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shop-prod", "network", "broken"]);
    assert_eq!(doc["stacks"][0]["report"]["summary"]["actionable"], 4);
    assert_eq!(doc["stacks"][0]["report"]["format_version"], "1");
    assert_eq!(doc["stacks"][1]["exit_code"], 0);
    assert!(
        doc["stacks"][2]["error"]
            .as_str()
            .unwrap()
            .contains("state lock")
    );
    for (name, key) in [
        ("shop-prod", "driftwatch-587d35c66f5f"),
        ("network", ""),
        ("broken", ""),
    ] {
        let text = std::fs::read_to_string(md.join(format!("{name}.md"))).unwrap();
        let first = text.lines().next().unwrap();
        assert!(first.starts_with("<!-- driftwatch-"), "{name}: {first}");
        assert!(first.contains(key), "{name}: {first}");
    }
    let summary = std::fs::read_to_string(md.join("summary.md")).unwrap();
    assert!(summary.contains("| `broken` | error | 1 |"), "{summary}");
}

#[test]
fn one_failed_stack_still_gets_its_markdown_page() {
    // --markdown-dir writes every stack's page, a failed one included (its issue says why),
    // also when the run checks a single stack.
    let dir = tempfile::tempdir().unwrap();
    let [_, _, broken] = three_stacks(dir.path());
    let md = dir.path().join("md");
    let out = outcome(
        many_cmd(dir.path(), &[broken])
            .arg("--markdown-dir")
            .arg(&md),
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr
            .starts_with("driftwatch: error: refresh-only plan failed (exit 1): "),
        "{}",
        out.stderr
    );
    let page = std::fs::read_to_string(md.join("broken.md")).unwrap();
    assert!(page.starts_with("<!-- driftwatch-"), "{page}");
    assert!(page.contains("state lock"), "{page}");
    let summary = std::fs::read_to_string(md.join("summary.md")).unwrap();
    assert!(summary.contains("| `broken` | error | 1 |"), "{summary}");
}

#[test]
fn a_failed_stack_s_engine_error_is_text_in_its_markdown() {
    // The engine's error is whatever terraform printed (a provider's message, a name from
    // the configuration): in the Markdown pages it is text, never markup, a table cell
    // break or a code span.
    let dir = tempfile::tempdir().unwrap();
    let [_, _, broken] = three_stacks(dir.path());
    std::fs::write(
        broken.join("fake-fail"),
        "Error: <script>alert(1)</script> in `main.tf` | col & \"x\" <img src=x onerror=y>\n",
    )
    .unwrap();
    let md = dir.path().join("md");
    let out = outcome(
        many_cmd(dir.path(), &[broken])
            .arg("--markdown-dir")
            .arg(&md),
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    let shown = "Error: &lt;script&gt;alert(1)&lt;/script&gt; in &#96;main.tf&#96; \\| col &amp; \
                 &quot;x&quot; &lt;img src=x onerror=y&gt;";
    let page = std::fs::read_to_string(md.join("broken.md")).unwrap();
    let summary = std::fs::read_to_string(md.join("summary.md")).unwrap();
    for (what, text) in [("broken.md", &page), ("summary.md", &summary)] {
        assert!(text.contains(shown), "{what}: {text}");
        for raw in ["<script", "<img", "`main.tf`", " | col"] {
            assert!(!text.contains(raw), "{what} holds {raw:?}: {text}");
        }
    }
    // The summary's row keeps its columns: its one unescaped `|` per cell boundary.
    let row = summary.lines().find(|l| l.contains("`broken`")).unwrap();
    let header = summary.lines().find(|l| l.starts_with('|')).unwrap();
    let boundaries = |l: &str| l.replace("\\|", "").matches('|').count();
    assert_eq!(boundaries(row), boundaries(header), "{summary}");
}

#[test]
fn a_stack_named_summary_is_refused_with_a_markdown_dir() {
    // Its page and the summary table would both be summary.md, one overwriting the other.
    let dir = tempfile::tempdir().unwrap();
    let [shop, network, _] = three_stacks(dir.path());
    let summary = dir.path().join("summary");
    std::fs::rename(&network, &summary).unwrap();
    let md = dir.path().join("md");
    for stacks in [vec![shop.clone(), summary.clone()], vec![summary.clone()]] {
        let out = outcome(many_cmd(dir.path(), &stacks).arg("--markdown-dir").arg(&md));
        assert_eq!(out.code, 1, "{}", out.stderr);
        assert!(
            out.stderr.contains(&format!(
                "a stack is named \"summary\" ({})",
                summary.display()
            )),
            "{}",
            out.stderr
        );
        assert!(!md.exists());
    }
    // Named otherwise in a stacks file, it gets its own page beside the summary.
    let list = dir.path().join("stacks.txt");
    std::fs::write(&list, "shop-prod\nsummary-stack=summary\n").unwrap();
    let out = outcome(
        many_cmd(dir.path(), &[])
            .arg("--stacks")
            .arg(&list)
            .arg("--markdown-dir")
            .arg(&md),
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(md.join("summary-stack.md").is_file() && md.join("summary.md").is_file());
    // Without --markdown-dir the name is free.
    let out = outcome(&mut many_cmd(dir.path(), &[shop, summary]));
    assert_eq!(out.code, 2, "{}", out.stderr);
}

#[test]
fn a_stacks_file_names_stacks_and_usage_errors_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let [shop, network, _] = three_stacks(dir.path());
    let list = dir.path().join("stacks.txt");
    std::fs::write(&list, "# nightly\nprod=shop-prod\nnetwork\n").unwrap();
    let mut cmd = many_cmd(dir.path(), &[]);
    cmd.arg("--stacks").arg(&list);
    let out = outcome(&mut cmd);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stdout.contains("=== prod ("), "{}", out.stdout);
    assert!(out.stderr.contains("driftwatch: prod: 4 actionable"));
    // Two stacks with one name, --stack or --markdown with several: usage errors, exit 1.
    let twice = dir.path().join("twice.txt");
    std::fs::write(&twice, "shop-prod\nx=network\nx=shop-prod\n").unwrap();
    let mut cmd = many_cmd(dir.path(), &[]);
    cmd.arg("--stacks").arg(&twice);
    let out = outcome(&mut cmd);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("two stacks are named \"x\""),
        "{}",
        out.stderr
    );
    for extra in [["--stack", "x"], ["--markdown", "x.md"]] {
        let out = outcome(many_cmd(dir.path(), &[shop.clone(), network.clone()]).args(extra));
        assert_eq!(out.code, 1, "{extra:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    }
    // No plan ran for any of them.
    let log = std::fs::read_to_string(dir.path().join("calls.log")).unwrap_or_default();
    assert_eq!(log.lines().count(), 8, "{log}");
}

#[test]
fn timings_split_engine_and_driftwatch_time() {
    let dir = tempfile::tempdir().unwrap();
    let out = outcome(run_cmd(dir.path()).arg("--timings"));
    assert_eq!(out.code, 2, "{}", out.stderr);
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("driftwatch: shop-prod: timings: engine "))
        .unwrap_or_else(|| panic!("{}", out.stderr));
    for step in [
        "refresh-only plan ",
        "show -json of the refresh-only plan ",
        ", plan ",
        "show -json of the plan ",
        "), driftwatch ",
    ] {
        assert!(line.contains(step), "{line}");
    }
    let out = outcome(run_cmd(dir.path()).arg("--timings").arg("--json"));
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let t = &doc["timings"];
    assert_eq!(t["steps"].as_array().unwrap().len(), 4);
    let engine = t["engine_seconds"].as_f64().unwrap();
    let steps: f64 = t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["seconds"].as_f64().unwrap())
        .sum();
    assert!((engine - steps).abs() < 1e-6, "{t}");
    assert!(t["driftwatch_seconds"].as_f64().unwrap() > 0.0);
    // Without the flag, the JSON has no timings (it stays byte-stable).
    let out = outcome(run_cmd(dir.path()).arg("--json"));
    assert!(!out.stdout.contains("timings"));
}

#[test]
fn step_summary_without_its_variable_fails_before_any_plan() {
    let dir = tempfile::tempdir().unwrap();
    let out = outcome(
        run_cmd(dir.path())
            .arg("--step-summary")
            .env_remove("GITHUB_STEP_SUMMARY"),
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("GITHUB_STEP_SUMMARY is not set"),
        "{}",
        out.stderr
    );
    let log = std::fs::read_to_string(dir.path().join("calls.log")).unwrap_or_default();
    assert_eq!(log, "", "no plan ran");
}
