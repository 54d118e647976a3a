//! Exit codes: 0 clean, 2 actionable drift, 1 for every error (usage errors included).

use crate::support::{driftwatch, fixture, outcome, report};

#[test]
fn clean_stack_exits_0() {
    let out = outcome(&mut report("clean"));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        "driftwatch: shop-prod: no drift; fingerprint clean\n"
    );
}

#[test]
fn usage_errors_exit_1_not_2() {
    for args in [
        vec!["report", "--no-such-flag"],
        vec!["report"],
        vec![],
        vec!["frobnicate"],
        vec!["report", "--plan"],
    ] {
        let out = outcome(driftwatch().args(&args));
        assert_eq!(out.code, 1, "{args:?}: {}", out.stderr);
    }
    assert_eq!(outcome(driftwatch().arg("--help")).code, 0);
    assert_eq!(outcome(driftwatch().arg("--version")).code, 0);
}

/// `--json` is `--output json`; given with `--output` too it is a usage
/// error, as in `datum` (docs/conventions.md). driftwatch took both and let
/// `--json` win, so `--output markdown --json` printed JSON, exit 2.
#[test]
fn json_and_output_together_are_a_usage_error() {
    for extra in [
        &["--json", "--output", "markdown"][..],
        &["--output", "human", "--json"][..],
    ] {
        let out = outcome(report("shop-prod").args(extra));
        assert_eq!(out.code, 1, "{extra:?}: {}", out.stderr);
        let said = out.stderr.lines().next().unwrap_or_default();
        assert!(
            said.contains("cannot be used with")
                && said.contains("'--json'")
                && said.contains("'--output <FORMAT>'"),
            "{extra:?}: {}",
            out.stderr
        );
    }
    assert_eq!(outcome(report("shop-prod").arg("--json")).code, 2);
}

#[test]
fn strict_counts_ignored_drift_and_fail_on_pending_counts_pending() {
    // Only the ignored routing drift and the pending banner: build that from the computed
    // scenario by ignoring everything else? Simpler: a stack with only ignored drift.
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro.json");
    let pl = dir.path().join("pl.json");
    std::fs::write(
        &ro,
        r#"{"format_version":"1.2","planned_values":{"root_module":{}},"resource_drift":[
        {"address":"k.routing","mode":"managed","type":"k","name":"routing","provider_name":"p","change":{"actions":["update"],
         "before":{"labels":{"app":"shop"}},"after":{"labels":{"app":"shop","owner":"oncall"}},"after_unknown":{},
         "before_sensitive":{},"after_sensitive":{}}}],"errored":false}"#,
    )
    .unwrap();
    std::fs::write(
        &pl,
        r#"{"format_version":"1.2","planned_values":{"root_module":{}},"resource_drift":[
        {"address":"k.routing","mode":"managed","type":"k","name":"routing","provider_name":"p","change":{"actions":["update"],
         "before":{"labels":{"app":"shop"}},"after":{"labels":{"app":"shop","owner":"oncall"}},"after_unknown":{},
         "before_sensitive":{},"after_sensitive":{}}}],"resource_changes":[
        {"address":"k.routing","mode":"managed","type":"k","name":"routing","provider_name":"p","change":{"actions":["no-op"],"before":{},"after":{},"after_unknown":{},"before_sensitive":{},"after_sensitive":{}}},
        {"address":"local_file.banner","mode":"managed","type":"local_file","name":"banner","provider_name":"p","change":{"actions":["create"],"before":null,"after":{"content":"x"},"after_unknown":{},"before_sensitive":false,"after_sensitive":{}}}
        ],"errored":false}"#,
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut cmd = driftwatch();
        cmd.arg("report")
            .arg("--refresh-plan")
            .arg(&ro)
            .arg("--plan")
            .arg(&pl)
            .args(extra);
        outcome(&mut cmd).code
    };
    assert_eq!(run(&[]), 0);
    assert_eq!(run(&["--strict"]), 2);
    assert_eq!(run(&["--fail-on-pending"]), 2);
}

#[test]
fn refused_inputs_exit_1_with_one_line_naming_the_file() {
    for (file, needle) in [
        ("refused/errored.json", "errored"),
        ("refused/state.json", "state JSON"),
        ("refused/format-0.2.json", "format_version \"0.2\""),
        ("refused/redacted.json", "redacted"),
    ] {
        let path = fixture(file);
        for as_refresh in [true, false] {
            let mut cmd = driftwatch();
            cmd.arg("report");
            if as_refresh {
                cmd.arg("--refresh-plan")
                    .arg(&path)
                    .arg("--plan")
                    .arg(fixture("shop-prod/plan.json"));
            } else {
                cmd.arg("--refresh-plan")
                    .arg(fixture("shop-prod/refresh_only.json"))
                    .arg("--plan")
                    .arg(&path);
            }
            let out = outcome(&mut cmd);
            assert_eq!(out.code, 1, "{file}");
            assert!(out.stdout.is_empty(), "{file}: {}", out.stdout);
            assert_eq!(out.stderr.lines().count(), 1, "{file}: {}", out.stderr);
            assert!(
                out.stderr.contains(&path.display().to_string()),
                "{file}: {}",
                out.stderr
            );
            assert!(out.stderr.contains(needle), "{file}: {}", out.stderr);
        }
    }
}

#[test]
fn swapped_plans_and_missing_files_exit_1() {
    let mut cmd = driftwatch();
    cmd.arg("report")
        .arg("--refresh-plan")
        .arg(fixture("shop-prod/plan.json"))
        .arg("--plan")
        .arg(fixture("shop-prod/refresh_only.json"));
    let out = outcome(&mut cmd);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("swapped"), "{}", out.stderr);
    let out = outcome(driftwatch().args(["report", "--refresh-plan", "/nonexistent/ro.json"]));
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("/nonexistent/ro.json"));
    let out = outcome(report("shop-prod").args(["--secret-pattern", "("]));
    assert_eq!(out.code, 1);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("--secret-pattern"), "{}", out.stderr);
}

#[test]
fn help_snapshots() {
    let out = outcome(driftwatch().arg("--help"));
    insta::assert_snapshot!("help", out.stdout);
    let out = outcome(driftwatch().args(["report", "--help"]));
    insta::assert_snapshot!("report_help", out.stdout);
}

#[test]
fn a_normal_plan_given_as_the_refresh_plan_is_refused() {
    for args in [
        vec!["--refresh-plan", "shop-prod/plan.json"],
        vec![
            "--refresh-plan",
            "shop-prod/plan.json",
            "--plan",
            "shop-prod/plan.json",
        ],
        vec!["--refresh-plan", "shop-prod/plan.json", "--drift-only"],
    ] {
        let mut cmd = driftwatch();
        cmd.arg("report");
        for a in &args {
            if a.ends_with(".json") {
                cmd.arg(fixture(a));
            } else {
                cmd.arg(a);
            }
        }
        let out = outcome(&mut cmd);
        assert_eq!(out.code, 1, "{args:?}: {}", out.stdout);
        assert!(out.stdout.is_empty());
        assert!(
            out.stderr
                .contains("given as the refresh-only plan, but it is a normal plan"),
            "{args:?}: {}",
            out.stderr
        );
    }
    // A plan whose entries are all no-ops proves less: read, with a note saying why that
    // may be wrong.
    let mut cmd = driftwatch();
    cmd.arg("report")
        .arg("--refresh-plan")
        .arg(fixture("clean/plan.json"));
    let out = outcome(&mut cmd);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("lists resource_changes (all no-op), which a refresh-only plan"),
        "{}",
        out.stderr
    );
    // --plan alone is the way to read one normal plan.
    let mut cmd = driftwatch();
    cmd.arg("report")
        .arg("--plan")
        .arg(fixture("shop-prod/plan.json"));
    assert_eq!(outcome(&mut cmd).code, 2);
}

/// A stdout whose reader is gone (`driftwatch … | head` once head has its lines).
struct ClosedPipe;

impl std::io::Write for ClosedPipe {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::BrokenPipe.into())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Err(std::io::ErrorKind::BrokenPipe.into())
    }
}

#[test]
fn a_reader_that_leaves_early_does_not_turn_drift_into_exit_0() {
    // Under `set -o pipefail`, `driftwatch run … | head` exits with driftwatch's code: a
    // closed stdout must not make actionable drift a passing gate.
    let fake = driftwatch::runner::FakeRunner::new();
    for output in ["human", "json"] {
        let mut stderr = Vec::new();
        let mut stdout = ClosedPipe;
        let mut io = driftwatch::cli::Io {
            stdout: &mut stdout,
            stderr: &mut stderr,
            stdout_is_terminal: false,
        };
        let args = [
            "driftwatch".to_owned(),
            "report".to_owned(),
            "--refresh-plan".to_owned(),
            fixture("shop-prod/refresh_only.json").display().to_string(),
            "--plan".to_owned(),
            fixture("shop-prod/plan.json").display().to_string(),
            "--output".to_owned(),
            output.to_owned(),
        ];
        let code = driftwatch::cli::main_with(args.to_vec(), &fake, &mut io);
        let stderr = String::from_utf8(stderr).unwrap();
        assert_eq!(code, 2, "{output}: {stderr}");
        // The summary still reaches stderr.
        assert!(stderr.contains("4 actionable"), "{stderr}");
    }
}

#[test]
fn a_normal_plan_made_without_refresh_is_refused() {
    // `plan -refresh=false` compares the configuration with the state as stored: it cannot
    // see drift, so every drifted resource is a no-op in it and would read as "ignored: the
    // next apply leaves it alone", and a resource deleted outside as gone from the
    // configuration, while the next (refreshing) apply reverts and recreates them. Such a
    // plan has no resource_drift at all; a refreshing one lists every drifted instance.
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro.json");
    let stale = dir.path().join("stale.json");
    let refreshed = dir.path().join("refreshed.json");
    let drift = r#"[
        {"address":"aws_sqs_queue.jobs","mode":"managed","type":"aws_sqs_queue","name":"jobs","provider_name":"p","change":{"actions":["update"],
         "before":{"visibility_timeout_seconds":30},"after":{"visibility_timeout_seconds":45},"after_unknown":{},
         "before_sensitive":{},"after_sensitive":{}}},
        {"address":"aws_sqs_queue.gone","mode":"managed","type":"aws_sqs_queue","name":"gone","provider_name":"p","change":{"actions":["delete"],
         "before":{"visibility_timeout_seconds":30},"after":null,"after_unknown":{},
         "before_sensitive":{},"after_sensitive":false}}]"#;
    std::fs::write(
        &ro,
        format!(
            r#"{{"format_version":"1.2","planned_values":{{"root_module":{{}}}},"resource_drift":{drift},"errored":false}}"#
        ),
    )
    .unwrap();
    let no_ops = r#"[
        {"address":"aws_sqs_queue.jobs","mode":"managed","type":"aws_sqs_queue","name":"jobs","provider_name":"p","change":{"actions":["no-op"],"before":{},"after":{},"after_unknown":{},"before_sensitive":{},"after_sensitive":{}}},
        {"address":"aws_sqs_queue.gone","mode":"managed","type":"aws_sqs_queue","name":"gone","provider_name":"p","change":{"actions":["no-op"],"before":{},"after":{},"after_unknown":{},"before_sensitive":{},"after_sensitive":{}}}]"#;
    std::fs::write(
        &stale,
        format!(
            r#"{{"format_version":"1.2","planned_values":{{"root_module":{{}}}},"resource_changes":{no_ops},"errored":false}}"#
        ),
    )
    .unwrap();
    let mut cmd = driftwatch();
    cmd.arg("report")
        .arg("--refresh-plan")
        .arg(&ro)
        .arg("--plan")
        .arg(&stale);
    let out = outcome(&mut cmd);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(&stale.display().to_string())
            && out.stderr.contains("-refresh=false")
            && out.stderr.contains("aws_sqs_queue.gone"),
        "{}",
        out.stderr
    );
    // --drift-only does not read the normal plan, so there is nothing to refuse.
    let mut cmd = driftwatch();
    cmd.arg("report")
        .arg("--refresh-plan")
        .arg(&ro)
        .arg("--drift-only");
    assert_eq!(outcome(&mut cmd).code, 2);
    // The same plan made with refresh: it lists the drift it saw and the revert.
    let changes = r#"[
        {"address":"aws_sqs_queue.jobs","mode":"managed","type":"aws_sqs_queue","name":"jobs","provider_name":"p","change":{"actions":["update"],
         "before":{"visibility_timeout_seconds":45},"after":{"visibility_timeout_seconds":30},"after_unknown":{},"before_sensitive":{},"after_sensitive":{}}},
        {"address":"aws_sqs_queue.gone","mode":"managed","type":"aws_sqs_queue","name":"gone","provider_name":"p","change":{"actions":["create"],
         "before":null,"after":{"visibility_timeout_seconds":30},"after_unknown":{},"before_sensitive":false,"after_sensitive":{}}}]"#;
    std::fs::write(
        &refreshed,
        format!(
            r#"{{"format_version":"1.2","planned_values":{{"root_module":{{}}}},"resource_drift":{drift},"resource_changes":{changes},"errored":false}}"#
        ),
    )
    .unwrap();
    let mut cmd = driftwatch();
    cmd.arg("report")
        .arg("--refresh-plan")
        .arg(&ro)
        .arg("--plan")
        .arg(&refreshed);
    let out = outcome(&mut cmd);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("aws_sqs_queue.jobs changed outside: the next apply reverts it")
            && out
                .stdout
                .contains("aws_sqs_queue.gone deleted outside: the next apply creates it again"),
        "{}",
        out.stdout
    );
}

/// A command asked for JSON that fails before its report prints the error
/// document on stdout (docs/conventions.md), not nothing: a script piping to
/// `jq` read an empty input.
#[test]
fn a_json_command_that_fails_prints_the_error_document() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nonexistent.json");
    for flags in [&["--json"][..], &["--output", "json"][..]] {
        let out = outcome(
            driftwatch()
                .arg("report")
                .arg("--refresh-plan")
                .arg(&missing)
                .args(flags),
        );
        assert_eq!(out.code, 1, "{}", out.stderr);
        let doc: serde_json::Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{flags:?}: not one JSON document ({e}): {:?}", out.stdout));
        assert_eq!(doc["format_version"], "1", "{doc}");
        assert_eq!(doc["command"], "report", "{doc}");
        assert_eq!(doc["errors"], 1, "{doc}");
        let error = doc["error"].as_str().unwrap();
        assert!(error.contains("nonexistent.json"), "{doc}");
        assert!(
            out.stderr.contains(error),
            "the same message as on stderr: {}",
            out.stderr
        );
        assert_eq!(doc["diagnostics"][0]["message"], error, "{doc}");
    }
    // Human output: stdout stays empty.
    let out = outcome(
        driftwatch()
            .arg("report")
            .arg("--refresh-plan")
            .arg(&missing),
    );
    assert_eq!(out.code, 1);
    assert_eq!(out.stdout, "");
}

/// A usage error (clap's) under `--output json` is the error document on stdout too, as
/// `datum plan --bogus --output json` prints one; driftwatch printed nothing, so a script
/// piping `driftwatch run ... --output json` to `jq` read an empty input.
#[test]
fn a_usage_error_under_json_prints_the_error_document() {
    for (args, command, said) in [
        (
            &["run", "--chdir", ".", "--bogus", "--output", "json"][..],
            "run",
            "unexpected argument '--bogus' found",
        ),
        (
            &["report", "--output=json", "--plan", "p.json", "--jobs", "2"][..],
            "report",
            "unexpected argument '--jobs' found",
        ),
        (
            &["run", "--chdir", ".", "--output", "json", "--json"][..],
            "run",
            "cannot be used with",
        ),
        (
            &["run", "--chdir", ".", "--json", "--lock-timeout"][..],
            "run",
            "a value is required for '--lock-timeout <DURATION>'",
        ),
    ] {
        let out = outcome(driftwatch().args(args));
        assert_eq!(out.code, 1, "{args:?}: {}", out.stderr);
        let doc: serde_json::Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not one JSON document ({e}): {:?}", out.stdout));
        assert_eq!(doc["format_version"], "1", "{doc}");
        assert_eq!(doc["command"], command, "{doc}");
        assert_eq!(doc["errors"], 1, "{doc}");
        let error = doc["error"].as_str().unwrap();
        assert!(error.contains(said), "{args:?}: {doc}");
        assert!(!error.starts_with("error:"), "{doc}");
        assert_eq!(doc["diagnostics"][0]["message"], error, "{doc}");
        assert!(out.stderr.contains(error), "{}", out.stderr);
    }
    // Human output (and markdown, and codify, which has no JSON): stdout stays empty.
    for args in [
        &["run", "--chdir", ".", "--bogus"][..],
        &["run", "--chdir", ".", "--bogus", "--output", "markdown"][..],
        &[
            "run", "--chdir", ".", "--output", "json", "--output", "human", "--bogus",
        ][..],
        &["codify", "--chdir", ".", "--bogus", "--json"][..],
        &["--bogus", "--json"][..],
    ] {
        let out = outcome(driftwatch().args(args));
        assert_eq!(out.code, 1, "{args:?}: {}", out.stderr);
        assert_eq!(out.stdout, "", "{args:?}");
    }
    // Help stays help, on stdout, exit 0.
    let out = outcome(driftwatch().args(["run", "--help", "--json"]));
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("Usage:"), "{}", out.stdout);
}
