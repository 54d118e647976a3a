//! The spec's Step 7 stack, the three report formats, and `--ignore-attr`.

use crate::support::{categories, driftwatch, find_finding, finding, outcome, report};

/// Line `i` starts with `start` and also says `says`.
#[track_caller]
fn assert_line(lines: &[&str], i: usize, start: &str, says: &str) {
    let line = lines.get(i).copied().unwrap_or_default();
    assert!(line.starts_with(start), "line {i}: {line}");
    assert!(line.contains(says), "line {i}: {line}");
}

#[test]
fn step7_text_lines_and_exit_2() {
    let out = outcome(&mut report("shop-prod"));
    assert_eq!(out.code, 2, "{}", out.stderr);
    // Line diffs of multi-line values are indented under their finding.
    let lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| !l.starts_with("    "))
        .collect();
    assert_line(
        &lines,
        0,
        "-/+ google_compute_instance.worker replaced by the next apply: ",
        "metadata_startup_script forces replacement",
    );
    assert_eq!(
        lines[1],
        "- local_file.motd deleted outside: the next apply creates it again"
    );
    assert_line(
        &lines,
        2,
        "~ kubernetes_config_map_v1.flags changed outside: ",
        r#"data.color: "blue" -> "red""#,
    );
    assert_line(
        &lines,
        3,
        "~ kubernetes_secret_v1.db changed outside: ",
        "data: (sensitive) -> (sensitive)",
    );
    assert_line(
        &lines,
        4,
        "= kubernetes_config_map_v1.routing ignored: ",
        "covered by ignore_changes (metadata[0].labels)",
    );
    assert_eq!(
        lines[5],
        "+ local_file.banner create (an unapplied change, not drift)"
    );
    assert_eq!(lines.len(), 6, "{}", out.stdout);
    // The startup script's line diff reads from state to observed: the line added outside
    // is a `+` line, and the header says which side is which.
    // (The line diff ends a line at the carriage return, which now shows as \u{d}.)
    assert!(
        out.stdout.contains(
            "\n    --- metadata_startup_script: state (last apply)\n    +++ metadata_startup_script: observed (refresh)\n    @@ "
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("\n    +apt-get install -y libpq5 | tee")
    );
    assert!(!out.stdout.contains("\n    -apt-get"));
    // The summary goes to stderr, so stdout is only the finding lines.
    assert!(
        out.stderr.contains("driftwatch: shop-prod: 4 actionable"),
        "{}",
        out.stderr
    );
    // The data source's drift is skipped, not reported.
    assert!(!out.stdout.contains("google_client_config"));
}

#[test]
fn piped_output_has_no_colour_but_always_does() {
    let plain = outcome(&mut report("shop-prod"));
    assert!(!plain.stdout.contains('\x1b'));
    let coloured = outcome(report("shop-prod").arg("--color").arg("always"));
    assert!(coloured.stdout.contains("\x1b[35m-/+\x1b[0m"));
}

#[test]
fn markdown_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("drift.md");
    let out = outcome(report("shop-prod").arg("--markdown").arg(&md));
    assert_eq!(out.code, 2);
    let text = std::fs::read_to_string(&md).unwrap();
    // The marker on the first line, as in every Markdown report of Datum's.
    assert!(text.lines().next().unwrap().starts_with("<!-- driftwatch-"));
    insta::assert_snapshot!("shop_prod_markdown", text);
    // `--output markdown` prints the same document on stdout.
    let out = outcome(report("shop-prod").args(["--output", "markdown"]));
    assert_eq!(out.code, 2);
    assert_eq!(out.stdout, std::fs::read_to_string(&md).unwrap());
}

#[test]
fn json_snapshot_and_schema_fields() {
    let out = outcome(report("shop-prod").arg("--output").arg("json"));
    assert_eq!(out.code, 2);
    // --json is the same as --output json.
    assert_eq!(
        outcome(report("shop-prod").arg("--json")).stdout,
        out.stdout
    );
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["format_version"], "1");
    assert_eq!(doc["schema"], "driftwatch/report");
    assert_eq!(doc["version"], 1);
    // RFC 3339, UTC (the fixed clock of the tests is midnight of 2026-10-28).
    assert_eq!(doc["generated_at"], "2026-10-28T00:00:00Z");
    assert_eq!(doc["diff_sides"]["before"], "state (last apply)");
    assert_eq!(doc["diff_sides"]["after"], "observed (refresh)");
    let script = &doc["findings"][0]["diffs"][1];
    assert_eq!(script["path"], "metadata_startup_script");
    let line_diff = script["line_diff"].as_str().unwrap();
    assert!(
        line_diff.starts_with(
            "--- metadata_startup_script: state (last apply)\n+++ metadata_startup_script: observed (refresh)\n"
        ),
        "{line_diff}"
    );
    assert!(
        line_diff.contains("\n+apt-get install -y libpq5"),
        "{line_diff}"
    );
    // One-line values have no line diff.
    assert!(doc["findings"][0]["diffs"][0].get("line_diff").is_none());
    assert_eq!(doc["key"], "driftwatch-587d35c66f5f");
    assert_eq!(doc["fingerprint"].as_str().unwrap().len(), 16);
    assert_eq!(
        categories(&doc),
        vec![
            ("google_compute_instance.worker", "replaced"),
            ("local_file.motd", "deleted_outside"),
            ("kubernetes_config_map_v1.flags", "changed_outside"),
            ("kubernetes_secret_v1.db", "changed_outside"),
            ("kubernetes_config_map_v1.routing", "ignored"),
        ]
    );
    assert_eq!(doc["pending"][0]["address"], "local_file.banner");
    assert_eq!(doc["pending"][0]["action"], "create");
    insta::assert_snapshot!("shop_prod_json", out.stdout);
}

#[test]
fn step_summary_appends() {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("summary.md");
    std::fs::write(&summary, "earlier step\n").unwrap();
    let out = outcome(
        report("shop-prod")
            .arg("--step-summary")
            .env("GITHUB_STEP_SUMMARY", &summary),
    );
    assert_eq!(out.code, 2);
    let text = std::fs::read_to_string(&summary).unwrap();
    // Appended after the earlier step, marker line first.
    assert!(
        text.starts_with("earlier step\n<!-- driftwatch-")
            && text.contains("-->\n## Drift report: shop-prod"),
        "{text}"
    );
    let missing = outcome(report("shop-prod").arg("--step-summary"));
    assert_eq!(missing.code, 1);
    assert!(missing.stderr.contains("GITHUB_STEP_SUMMARY"));
}

#[test]
fn ignore_attr_drops_computed_paths_and_empty_findings() {
    let base = outcome(report("computed").arg("--json"));
    let with = outcome(
        report("computed")
            .arg("--json")
            .arg("--ignore-attr")
            .arg("metadata[0].resource_version")
            .arg("--ignore-attr")
            .arg("metadata_fingerprint"),
    );
    let base: serde_json::Value = serde_json::from_str(&base.stdout).unwrap();
    let with: serde_json::Value = serde_json::from_str(&with.stdout).unwrap();
    // Without the option the cache map shows up (as ignored: the next apply is a no-op).
    assert!(find_finding(&base, "kubernetes_config_map_v1.cache").is_some());
    // With it, the resource whose only drift was the computed attribute disappears...
    assert!(find_finding(&with, "kubernetes_config_map_v1.cache").is_none());
    // ...and the patched flags map reports data.color and only that.
    let flags = finding(&with, "kubernetes_config_map_v1.flags");
    assert_eq!(flags["paths"], serde_json::json!(["data.color"]));
    // The fingerprint no longer covers the dropped paths.
    assert_ne!(base["fingerprint"], with["fingerprint"]);
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("d.md");
    outcome(
        report("computed")
            .arg("--ignore-attr")
            .arg("metadata[0].resource_version")
            .arg("--markdown")
            .arg(&md),
    );
    let text = std::fs::read_to_string(md).unwrap();
    assert!(!text.contains("resource_version"));
}

#[test]
fn drift_only_needs_rules_to_cover_every_path() {
    let out = outcome(report("shop-prod").arg("--json").arg("--drift-only"));
    // --plan conflicts with --drift-only: a usage error, exit 1.
    assert_eq!(out.code, 1);
    let mut cmd = crate::support::driftwatch();
    cmd.arg("report")
        .arg("--refresh-plan")
        .arg(crate::support::fixture("shop-prod/refresh_only.json"))
        .arg("--config")
        .arg(crate::support::fixture("shop-prod/main.tf.json"))
        .arg("--drift-only")
        .arg("--json");
    let out = outcome(&mut cmd);
    assert_eq!(out.code, 2);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["mode"], "drift-only");
    let routing = finding(&doc, "kubernetes_config_map_v1.routing");
    // resource_version is not under the rule, so without the normal plan it is not "ignored".
    assert_eq!(routing["category"], "changed_outside");
    let mut cmd = crate::support::driftwatch();
    cmd.arg("report")
        .arg("--refresh-plan")
        .arg(crate::support::fixture("shop-prod/refresh_only.json"))
        .arg("--config")
        .arg(crate::support::fixture("shop-prod/main.tf.json"))
        .arg("--drift-only")
        .arg("--ignore-attr")
        .arg("metadata[0].resource_version")
        .arg("--json");
    let doc: serde_json::Value = serde_json::from_str(&outcome(&mut cmd).stdout).unwrap();
    let routing = finding(&doc, "kubernetes_config_map_v1.routing");
    assert_eq!(routing["category"], "ignored");
    assert_eq!(
        routing["ignored_by"],
        serde_json::json!(["metadata[0].labels"])
    );
}

/// Exit code, stdout and stderr in one snapshot, as a person sees them.
fn transcript(out: &crate::support::Outcome) -> String {
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.code, out.stdout, out.stderr
    )
}

#[test]
fn text_transcripts() {
    insta::assert_snapshot!(
        "shop_prod_text",
        transcript(&outcome(&mut report("shop-prod")))
    );
    insta::assert_snapshot!(
        "computed_text_ignore_attr",
        transcript(&outcome(
            report("computed")
                .arg("--ignore-attr")
                .arg("metadata[0].resource_version")
                .arg("--ignore-attr")
                .arg("metadata_fingerprint")
        ))
    );
    insta::assert_snapshot!("clean_text", transcript(&outcome(&mut report("clean"))));
}

#[test]
fn a_line_diff_never_sends_control_characters_to_the_terminal() {
    // A startup script changed outside to clear the screen, retitle the window and print a
    // fake all-clear; a carriage return would overwrite the line it is on.
    let dir = tempfile::tempdir().unwrap();
    let change = |actions: &str, before: &str, after: &str| {
        format!(
            r#"{{"address":"t.a","mode":"managed","change":{{"actions":["{actions}"],"before":{before},"after":{after},"before_sensitive":{{}},"after_sensitive":{{}}}}}}"#
        )
    };
    let script = r#"{"script":"set -eu\nrun\n"}"#;
    let hostile =
        r#"{"script":"set -eu\nrun\n\u001b]0;pwned\u0007\u001b[2Jall clear\rrm -rf /srv\n"}"#;
    let refresh = dir.path().join("refresh.json");
    let plan = dir.path().join("plan.json");
    std::fs::write(
        &refresh,
        format!(
            r#"{{"format_version":"1.2","resource_drift":[{}]}}"#,
            change("update", script, hostile)
        ),
    )
    .unwrap();
    std::fs::write(
        &plan,
        format!(
            r#"{{"format_version":"1.2","resource_drift":[{}],"resource_changes":[{}]}}"#,
            change("update", script, hostile),
            change("update", hostile, script)
        ),
    )
    .unwrap();
    let out = outcome(
        driftwatch()
            .arg("report")
            .arg("--refresh-plan")
            .arg(&refresh)
            .arg("--plan")
            .arg(&plan),
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        !out.stdout.contains(['\u{1b}', '\u{7}', '\r']),
        "{:?}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("    +\\u{1b}]0;pwned\\u{7}\\u{1b}[2Jall clear\\u{d}+rm -rf /srv\n"),
        "{}",
        out.stdout
    );
}

#[test]
fn numbers_are_shown_with_the_digits_the_plan_wrote() {
    // cty numbers have arbitrary precision, and OpenTofu writes every digit. Read as f64,
    // 2^70+1 and 2^70+3 are the same number (the drift was lost) and a long decimal or a
    // big integer is shown rounded.
    let dir = tempfile::tempdir().unwrap();
    let entry = |actions: &str, before: &str, after: &str| {
        format!(
            r#"{{"address":"t.big","mode":"managed","change":{{"actions":["{actions}"],"before":{before},"after":{after},"after_unknown":{{}},"before_sensitive":{{}},"after_sensitive":{{}}}}}}"#
        )
    };
    let stored = r#"{"huge":1180591620717411303425,"id":"a","nested":[{"n":12345678901234567890123}],"ratio":0.1000000000000000055511151231257827,"small":9007199254740993,"tiny":1e-400}"#;
    let observed = r#"{"huge":1180591620717411303427,"id":"a","nested":[{"n":12345678901234567890124}],"ratio":0.1000000000000000055511151231257828,"small":9007199254740995,"tiny":2e-400}"#;
    let refresh = dir.path().join("refresh.json");
    let plan = dir.path().join("plan.json");
    std::fs::write(
        &refresh,
        format!(
            r#"{{"format_version":"1.2","resource_drift":[{}]}}"#,
            entry("update", stored, observed)
        ),
    )
    .unwrap();
    std::fs::write(
        &plan,
        format!(
            r#"{{"format_version":"1.2","resource_drift":[{}],"resource_changes":[{}]}}"#,
            entry("update", stored, observed),
            entry("update", observed, stored)
        ),
    )
    .unwrap();
    let run = |format: &str| {
        outcome(
            driftwatch()
                .arg("report")
                .arg("--refresh-plan")
                .arg(&refresh)
                .arg("--plan")
                .arg(&plan)
                .arg("--output")
                .arg(format),
        )
    };
    let text = run("human");
    assert_eq!(text.code, 2, "{}", text.stderr);
    for shown in [
        "huge: 1180591620717411303425 -> 1180591620717411303427",
        "nested[0].n: 12345678901234567890123 -> 12345678901234567890124",
        "ratio: 0.1000000000000000055511151231257827 -> 0.1000000000000000055511151231257828",
        "small: 9007199254740993 -> 9007199254740995",
    ] {
        assert!(text.stdout.contains(shown), "{shown}: {}", text.stdout);
    }
    let json = run("json");
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let diffs: Vec<(&str, &str, &str)> = doc["findings"][0]["diffs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap(),
                d["before"].as_str().unwrap(),
                d["after"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        diffs,
        [
            ("huge", "1180591620717411303425", "1180591620717411303427"),
            (
                "nested[0].n",
                "12345678901234567890123",
                "12345678901234567890124"
            ),
            (
                "ratio",
                "0.1000000000000000055511151231257827",
                "0.1000000000000000055511151231257828"
            ),
            ("small", "9007199254740993", "9007199254740995"),
            ("tiny", "1e-400", "2e-400"),
        ]
    );
    let markdown = run("markdown");
    assert!(
        markdown.stdout.contains("`1180591620717411303427`"),
        "{}",
        markdown.stdout
    );
}

#[test]
fn drift_the_normal_plan_did_not_see_is_noted() {
    // The queue was put back between the two plans: the normal plan's refresh no longer
    // sees its drift, so "the next apply leaves it alone (no-op)" is about a resource that
    // is no longer drifted. The reader is told, as for drift seen only by the normal plan.
    let dir = tempfile::tempdir().unwrap();
    let entry = |address: &str, actions: &str, before: &str, after: &str| {
        format!(
            r#"{{"address":"{address}","mode":"managed","change":{{"actions":["{actions}"],"before":{before},"after":{after},"after_unknown":{{}},"before_sensitive":{{}},"after_sensitive":{{}}}}}}"#
        )
    };
    let refresh = dir.path().join("refresh.json");
    let plan = dir.path().join("plan.json");
    std::fs::write(
        &refresh,
        format!(
            r#"{{"format_version":"1.2","resource_drift":[{},{}]}}"#,
            entry("aws_sqs_queue.a", "update", r#"{"v":1}"#, r#"{"v":2}"#),
            entry("aws_sqs_queue.b", "update", r#"{"v":1}"#, r#"{"v":2}"#)
        ),
    )
    .unwrap();
    std::fs::write(
        &plan,
        format!(
            r#"{{"format_version":"1.2","resource_drift":[{}],"resource_changes":[{},{}]}}"#,
            entry("aws_sqs_queue.b", "update", r#"{"v":1}"#, r#"{"v":2}"#),
            entry("aws_sqs_queue.a", "no-op", r#"{"v":1}"#, r#"{"v":1}"#),
            entry("aws_sqs_queue.b", "update", r#"{"v":2}"#, r#"{"v":1}"#)
        ),
    )
    .unwrap();
    let out = outcome(
        driftwatch()
            .arg("report")
            .arg("--refresh-plan")
            .arg(&refresh)
            .arg("--plan")
            .arg(&plan),
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "note: aws_sqs_queue.a drifted in the refresh-only plan but not in the normal plan's refresh (undone between the two plans?)"
        ),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("aws_sqs_queue.b drifted"),
        "{}",
        out.stderr
    );
}
