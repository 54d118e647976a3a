//! No secret reaches any output: stdout, stderr, JSON, Markdown, step summary, history.
//!
//! The canary fixture plants `CANARY-7f3a-...` strings in a sensitive map (the db secret's
//! password, and a key added to that map outside), in a secret-named attribute the provider did not mark (`data.payment_token`),
//! in a sensitive variable, in prior_state and planned_values, and in a data source.

use crate::support::{driftwatch, fixture, outcome, report};

const CANARY: &str = "CANARY-7f3a";

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(CANARY), "{what} leaked a canary:\n{text}");
}

#[test]
fn no_canary_in_any_output_mode() {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("drift.md");
    let summary = dir.path().join("summary.md");
    let history = dir.path().join("history.json");
    for extra in [
        vec![],
        vec!["--json"],
        vec!["--color", "always"],
        vec!["--strict", "--fail-on-pending"],
    ] {
        for scenario in ["canary", "shop-prod"] {
            let out = outcome(
                report(scenario)
                    .args(&extra)
                    .arg("--markdown")
                    .arg(&md)
                    .arg("--step-summary")
                    .arg("--history")
                    .arg(&history)
                    .env("GITHUB_STEP_SUMMARY", &summary),
            );
            assert_eq!(out.code, 2, "{}", out.stderr);
            assert_clean("stdout", &out.stdout);
            assert_clean("stderr", &out.stderr);
            assert_clean("markdown", &std::fs::read_to_string(&md).unwrap());
            assert_clean("step summary", &std::fs::read_to_string(&summary).unwrap());
            assert_clean("history", &std::fs::read_to_string(&history).unwrap());
        }
    }
    // The secret-named attribute is still reported, just without values.
    let out = outcome(&mut report("canary"));
    assert!(
        out.stdout
            .contains("data.payment_token: (sensitive) -> (sensitive)"),
        "{}",
        out.stdout
    );
}

#[test]
fn no_canary_in_drift_only_and_single_plan_modes() {
    for args in [
        vec!["--refresh-plan", "canary/refresh_only.json", "--drift-only"],
        vec!["--plan", "canary/plan.json"],
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
        for json in [false, true] {
            let mut c = driftwatch();
            c.args(cmd.get_args());
            if json {
                c.arg("--json");
            }
            let out = outcome(&mut c);
            assert!(out.code == 0 || out.code == 2, "{}", out.stderr);
            assert_clean("stdout", &out.stdout);
            assert_clean("stderr", &out.stderr);
        }
    }
}

#[test]
fn no_canary_in_error_messages() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    // A value of the wrong type: serde's own message would quote it.
    std::fs::write(
        &bad,
        r#"{"format_version":"1.2","resource_drift":[{"address":"a.b","change":{"actions":"CANARY-7f3a-in-error"}}]}"#,
    )
    .unwrap();
    let out = outcome(driftwatch().arg("report").arg("--refresh-plan").arg(&bad));
    assert_eq!(out.code, 1);
    assert_clean("stderr", &out.stderr);
    std::fs::write(
        &bad,
        r#"{"format_version":"CANARY-7f3a-version","planned_values":{}}"#,
    )
    .unwrap();
    let out = outcome(driftwatch().arg("report").arg("--plan").arg(&bad));
    assert_eq!(out.code, 1);
    assert_clean("stderr", &out.stderr);
}

/// The `secret-copy` fixture, in the shape terraform and hashicorp/aws write it: an
/// aws_iam_role_policy's policy holds a sensitive variable (`CANARY-7f3a-declared-pw`); the
/// provider copies it, unmarked, into aws_iam_role.app's computed inline_policy, which is
/// the only drift. The policy resource did not drift: its marker is in prior_state,
/// planned_values and the normal plan's no-op resource_changes only.
#[test]
fn a_copy_of_a_secret_marked_only_in_a_resource_that_did_not_drift_is_withheld() {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("drift.md");
    let both = || report("secret-copy");
    let plan_alone = || {
        let mut c = driftwatch();
        c.arg("report")
            .arg("--plan")
            .arg(fixture("secret-copy/plan.json"));
        c
    };
    let drift_only = || {
        let mut c = driftwatch();
        c.arg("report")
            .arg("--refresh-plan")
            .arg(fixture("secret-copy/refresh_only.json"))
            .arg("--drift-only");
        c
    };
    for make in [
        &both as &dyn Fn() -> assert_cmd::Command,
        &plan_alone,
        &drift_only,
    ] {
        for format in ["human", "json", "markdown"] {
            let out = outcome(
                make()
                    .arg("--output")
                    .arg(format)
                    .arg("--markdown")
                    .arg(&md),
            );
            assert!(out.code == 0 || out.code == 2, "{}", out.stderr);
            assert_clean(format, &out.stdout);
            assert_clean("stderr", &out.stderr);
            assert_clean("markdown file", &std::fs::read_to_string(&md).unwrap());
            // Still reported, without its value.
            assert!(
                out.stdout.contains("inline_policy[0].policy"),
                "{}",
                out.stdout
            );
        }
    }
    let out = outcome(&mut both());
    assert!(
        out.stdout
            .contains("inline_policy[0].policy: (sensitive) -> (sensitive)"),
        "{}",
        out.stdout
    );
}

/// The `secret-variable` fixture: a variable declared sensitive (`CANARY-7f3a-unstored-pw`,
/// used only where nothing stores it) and a sensitive output (`CANARY-7f3a-output-token`)
/// are copied, unmarked, into tags of a bucket that drifted; no resource marks anything.
/// Their values are only in the plan's `variables` (with `configuration` declaring which
/// are sensitive, after the drift) and in the outputs.
#[test]
fn copies_of_a_sensitive_variable_and_output_in_unmarked_drift_are_withheld() {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("drift.md");
    let both = || report("secret-variable");
    let plan_alone = || {
        let mut c = driftwatch();
        c.arg("report")
            .arg("--plan")
            .arg(fixture("secret-variable/plan.json"));
        c
    };
    let drift_only = || {
        let mut c = driftwatch();
        c.arg("report")
            .arg("--refresh-plan")
            .arg(fixture("secret-variable/refresh_only.json"))
            .arg("--drift-only");
        c
    };
    for make in [
        &both as &dyn Fn() -> assert_cmd::Command,
        &plan_alone,
        &drift_only,
    ] {
        for format in ["human", "json", "markdown"] {
            let out = outcome(
                make()
                    .arg("--output")
                    .arg(format)
                    .arg("--markdown")
                    .arg(&md),
            );
            assert!(out.code == 0 || out.code == 2, "{}", out.stderr);
            assert_clean(format, &out.stdout);
            assert_clean("stderr", &out.stderr);
            assert_clean("markdown file", &std::fs::read_to_string(&md).unwrap());
            // A variable not declared sensitive is still shown.
            assert!(out.stdout.contains("eu-west-1"), "{}", out.stdout);
        }
    }
    let out = outcome(both().arg("--output").arg("json"));
    for path in [
        "tags.Owner",
        "tags.Token",
        "tags_all.Owner",
        "tags_all.Token",
    ] {
        assert!(out.stdout.contains(path), "{path}: {}", out.stdout);
    }
}

/// The `secret-embedded` fixture, written by terraform 1.11.4 and hashicorp/aws 5.100.0
/// against moto: a queue named `h124-${var.secret}` and tagged with `var.quoted` (both
/// sensitive variables, `CANARY-7f3a-embedded-plain` and `CANARY-7f3a-embedded-q"<&>\x`);
/// a role policy built with `jsonencode` from the queue's computed `arn` and `tags_all`,
/// which the provider leaves unmarked, so nothing marks the policy. The provider copies it
/// into the role's computed `inline_policy` (drift right after a clean apply): a longer
/// string holding both secrets, the second JSON-escaped as Go writes it
/// (`q\"\u003c\u0026\u003e\\x`). No hidden string equals it.
#[test]
fn a_secret_inside_a_longer_unmarked_string_is_withheld() {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("drift.md");
    let both = || report("secret-embedded");
    let plan_alone = || {
        let mut c = driftwatch();
        c.arg("report")
            .arg("--plan")
            .arg(fixture("secret-embedded/plan.json"));
        c
    };
    let drift_only = || {
        let mut c = driftwatch();
        c.arg("report")
            .arg("--refresh-plan")
            .arg(fixture("secret-embedded/refresh_only.json"))
            .arg("--drift-only");
        c
    };
    for make in [
        &both as &dyn Fn() -> assert_cmd::Command,
        &plan_alone,
        &drift_only,
    ] {
        for format in ["human", "json", "markdown"] {
            let out = outcome(
                make()
                    .arg("--output")
                    .arg(format)
                    .arg("--markdown")
                    .arg(&md),
            );
            assert!(out.code == 0 || out.code == 2, "{}", out.stderr);
            assert_clean(format, &out.stdout);
            assert_clean("stderr", &out.stderr);
            assert_clean("markdown file", &std::fs::read_to_string(&md).unwrap());
            // Still reported, without its value; the name beside it is shown.
            assert!(
                out.stdout.contains("inline_policy[0].policy"),
                "{}",
                out.stdout
            );
            assert!(out.stdout.contains("h124-app"), "{}", out.stdout);
        }
    }
    let out = outcome(&mut both());
    assert!(
        out.stdout
            .contains("inline_policy[0].policy: (sensitive) -> (sensitive)"),
        "{}",
        out.stdout
    );
}

/// An unapplied change (not drift) whose map key holds a string the state marks: the
/// normal plan's paths are shown as pending changes, so `tags.x-q-CANARY-7f3a-name-y` is
/// cut at `tags` there as a drifted leaf's path is. Nothing drifted, so the refresh-only
/// plan learns nothing: the normal plan learns from its own `prior_state`.
#[test]
fn a_map_key_holding_a_marked_string_in_an_unapplied_change_is_withheld() {
    let dir = tempfile::tempdir().unwrap();
    let (refresh, plan, md) = (
        dir.path().join("refresh_only.json"),
        dir.path().join("plan.json"),
        dir.path().join("drift.md"),
    );
    let state = r#""prior_state":{"values":{"root_module":{"resources":[
        {"address":"aws_sqs_queue.q","mode":"managed","type":"aws_sqs_queue","name":"q",
         "values":{"name":"q-CANARY-7f3a-name"},"sensitive_values":{"name":true}}]}}}"#;
    std::fs::write(
        &refresh,
        format!(r#"{{"format_version":"1.2","resource_drift":[],{state}}}"#),
    )
    .unwrap();
    std::fs::write(
        &plan,
        format!(
            r#"{{"format_version":"1.2","resource_changes":[
          {{"address":"aws_iam_role.app","mode":"managed","type":"aws_iam_role","name":"app",
            "change":{{"actions":["update"],
            "before":{{"tags":{{}}}},"after":{{"tags":{{"x-q-CANARY-7f3a-name-y":"1","plain":"2"}}}},
            "before_sensitive":{{"tags":{{}}}},"after_sensitive":{{"tags":{{}}}}}}}},
          {{"address":"aws_sqs_queue.q","mode":"managed","type":"aws_sqs_queue","name":"q",
            "change":{{"actions":["no-op"],
            "before":{{"name":"q-CANARY-7f3a-name"}},"after":{{"name":"q-CANARY-7f3a-name"}},
            "before_sensitive":{{"name":true}},"after_sensitive":{{"name":true}}}}}}],{state}}}"#
        ),
    )
    .unwrap();
    let both = || {
        let mut c = driftwatch();
        c.arg("report")
            .arg("--refresh-plan")
            .arg(&refresh)
            .arg("--plan")
            .arg(&plan);
        c
    };
    let plan_alone = || {
        let mut c = driftwatch();
        c.arg("report").arg("--plan").arg(&plan);
        c
    };
    for make in [&both as &dyn Fn() -> assert_cmd::Command, &plan_alone] {
        for format in ["human", "json", "markdown"] {
            let out = outcome(
                make()
                    .arg("--output")
                    .arg(format)
                    .arg("--markdown")
                    .arg(&md),
            );
            assert!(out.code == 0 || out.code == 2, "{}", out.stderr);
            assert_clean(format, &out.stdout);
            assert_clean("stderr", &out.stderr);
            assert_clean("markdown file", &std::fs::read_to_string(&md).unwrap());
            // The pending change is still shown, cut at the map.
            assert!(out.stdout.contains("aws_iam_role.app"), "{}", out.stdout);
            assert!(out.stdout.contains("tags.plain"), "{}", out.stdout);
        }
    }
}

/// The `secret-key` fixture: an unapplied change adds two tags (and their `tags_all`
/// copies) keyed by strings the normal plan knows only before its `resource_changes`: the
/// value of a variable declared sensitive (`k-CANARY-7f3a-var-key`, in `variables`) and
/// the value of a parameter being created, marked in `planned_values` and the create's
/// `after_sensitive` (`k-CANARY-7f3a-planned-key`). Neither is in the state, and the
/// refresh-only plan has no drift (it reads no state).
#[test]
fn a_sensitive_variable_or_planned_value_used_as_a_map_key_in_an_unapplied_change_is_withheld() {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("drift.md");
    let both = || report("secret-key");
    let plan_alone = || {
        let mut c = driftwatch();
        c.arg("report")
            .arg("--plan")
            .arg(fixture("secret-key/plan.json"));
        c
    };
    for make in [&both as &dyn Fn() -> assert_cmd::Command, &plan_alone] {
        for format in ["human", "json", "markdown"] {
            let out = outcome(
                make()
                    .arg("--output")
                    .arg(format)
                    .arg("--markdown")
                    .arg(&md),
            );
            assert_eq!(out.code, 0, "{}", out.stderr);
            assert_clean(format, &out.stdout);
            assert_clean("stderr", &out.stderr);
            assert_clean("markdown file", &std::fs::read_to_string(&md).unwrap());
            // The pending change is still shown, cut at the maps.
            assert!(out.stdout.contains("aws_iam_role.app"), "{}", out.stdout);
            assert!(out.stdout.contains("tags.Team"), "{}", out.stdout);
            assert!(out.stdout.contains("tags_all.Team"), "{}", out.stdout);
        }
    }
}
