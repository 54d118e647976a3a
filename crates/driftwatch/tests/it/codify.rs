//! `driftwatch codify` with the in-process fake runner.

use std::path::Path;

use driftwatch::cli::{Io, main_with};
use driftwatch::runner::FakeRunner;

use crate::support::fixture;

fn read(rel: &str) -> String {
    std::fs::read_to_string(fixture(rel)).unwrap()
}

/// The normal plan after codify: flags is now a no-op (state and config agree).
fn verified_plan(flags_action: &str) -> String {
    let mut doc: serde_json::Value = serde_json::from_str(&read("shop-prod/plan.json")).unwrap();
    for change in doc["resource_changes"].as_array_mut().unwrap() {
        if change["address"] == "kubernetes_config_map_v1.flags" {
            change["change"]["actions"] = serde_json::json!([flags_action]);
        }
    }
    doc.to_string()
}

struct Run {
    code: u8,
    stdout: String,
    stderr: String,
}

fn codify(chdir: &Path, fake: &FakeRunner) -> Run {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let code = {
        let mut io = Io {
            stdout: &mut stdout,
            stderr: &mut stderr,
            stdout_is_terminal: false,
        };
        let args = [
            "driftwatch",
            "codify",
            "--chdir",
            &chdir.display().to_string(),
            "--stack",
            "shop-prod",
            "--now",
            "2026-10-28",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        main_with(args, fake, &mut io)
    };
    Run {
        code,
        stdout: String::from_utf8(stdout).unwrap(),
        stderr: String::from_utf8(stderr).unwrap(),
    }
}

/// The two plans codify reads, then the plan that checks the written values (before
/// `apply -refresh-only`) and the one after it.
fn queue(fake: &FakeRunner, check_action: &str, final_action: &str) {
    fake.push_refresh(2, read("shop-prod/refresh_only.json"));
    fake.push_plan(2, read("shop-prod/plan.json"));
    fake.push_plan(2, verified_plan(check_action));
    fake.push_apply(0);
    fake.push_plan(2, verified_plan(final_action));
}

#[test]
fn a_drifted_attribute_the_configuration_changed_since_is_refused() {
    // data.color was blue at the last apply, is red outside, and the configuration now says
    // green: writing red would make the plan a no-op and undo the unapplied edit.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("main.tf.json");
    std::fs::copy(fixture("shop-prod/main.tf.json"), &config).unwrap();
    let before = std::fs::read_to_string(&config).unwrap();
    let mut plan: serde_json::Value = serde_json::from_str(&read("shop-prod/plan.json")).unwrap();
    for change in plan["resource_changes"].as_array_mut().unwrap() {
        if change["address"] == "kubernetes_config_map_v1.flags" {
            change["change"]["after"]["data"]["color"] = "green".into();
        }
    }
    let fake = FakeRunner::new();
    fake.push_refresh(2, read("shop-prod/refresh_only.json"));
    fake.push_plan(2, plan.to_string());
    let run = codify(dir.path(), &fake);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(
            "codify: refused kubernetes_config_map_v1.flags: the configuration sets a drifted attribute to a new value"
        ),
        "{}",
        run.stdout
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), before);
    assert!(
        !fake.calls().iter().any(|c| c[2] == "apply"),
        "{:?}",
        fake.calls()
    );
}

#[test]
fn codifies_literals_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("main.tf.json");
    std::fs::copy(fixture("shop-prod/main.tf.json"), &config).unwrap();
    let fake = FakeRunner::new();
    queue(&fake, "no-op", "no-op");
    let run = codify(dir.path(), &fake);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let out = &run.stdout;
    assert!(
        out.contains("codify: kubernetes_config_map_v1.flags: data.color = \"red\""),
        "{out}"
    );
    assert!(
        out.contains("codify: refused google_compute_instance.worker: replaced by the next apply"),
        "{out}"
    );
    assert!(
        out.contains("codify: refused kubernetes_secret_v1.db: data is sensitive"),
        "{out}"
    );
    assert!(
        out.contains("codify: refused local_file.motd: deleted outside"),
        "{out}"
    );
    assert!(
        !out.contains("routing"),
        "ignored drift is not a candidate: {out}"
    );
    assert!(out.contains("codify: verified: the next apply is a no-op for 1 resource(s)"));
    assert!(out.contains("branch: driftwatch/codify-shop-prod-2026-10-28"));
    assert!(out.contains("gh pr create --head 'driftwatch/codify-shop-prod-2026-10-28'"));
    assert!(!out.contains("CANARY"));
    // The literal is written; everything else, key order included, is untouched.
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let flags = &written["resource"]["kubernetes_config_map_v1"]["flags"];
    assert_eq!(flags["data"]["color"], "red");
    assert_eq!(flags["data"]["checkout"], "on");
    assert!(
        flags["metadata"].get("resource_version").is_none(),
        "computed attributes are not written"
    );
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.find("google_compute_instance").unwrap()
            < text.find("kubernetes_config_map_v1").unwrap()
    );
    // apply -refresh-only -auto-approve ran between the plans.
    let calls = fake.calls();
    let subs: Vec<&str> = calls.iter().map(|c| c[2].as_str()).collect();
    assert_eq!(
        subs,
        [
            "plan", "show", "plan", "show", "plan", "show", "apply", "plan", "show"
        ]
    );
    assert!(
        calls[6].contains(&"-refresh-only".to_owned())
            && calls[6].contains(&"-auto-approve".to_owned())
    );
    // State takes reality for the codified resource only.
    let targets: Vec<&String> = calls[6]
        .iter()
        .filter(|a| a.starts_with("-target="))
        .collect();
    assert_eq!(targets, ["-target=kubernetes_config_map_v1.flags"]);
}

#[test]
fn a_finding_the_check_plan_still_changes_is_taken_back_and_nothing_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("main.tf.json");
    std::fs::copy(fixture("shop-prod/main.tf.json"), &config).unwrap();
    let before = std::fs::read(&config).unwrap();
    let fake = FakeRunner::new();
    queue(&fake, "update", "no-op");
    let run = codify(dir.path(), &fake);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains(
            "codify: refused kubernetes_config_map_v1.flags: with the drifted values written, the next apply still changes it (update"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("nothing could be codified"),
        "{}",
        run.stderr
    );
    // The file is byte for byte what it was, and state was not touched.
    assert_eq!(std::fs::read(&config).unwrap(), before);
    assert!(fake.calls().iter().all(|c| c[2] != "apply"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn a_failing_final_plan_restores_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("main.tf.json");
    std::fs::copy(fixture("shop-prod/main.tf.json"), &config).unwrap();
    let before = std::fs::read(&config).unwrap();
    let fake = FakeRunner::new();
    queue(&fake, "no-op", "update");
    let run = codify(dir.path(), &fake);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains("still changes: kubernetes_config_map_v1.flags"),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read(&config).unwrap(), before);
}

#[test]
fn codifies_native_syntax_keeping_comments() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("main.tf");
    // The shop-prod stack's flags map, written in HCL with comments and alignment.
    let text = r#"# Feature flags for checkout.
resource "kubernetes_config_map_v1" "flags" {
  metadata {
    name      = "flags"
    namespace = "shop" # fixed
    labels    = { app = "shop" }
  }

  data = {
    checkout = "on"
    color    = "blue" # on-call may flip this
  }
}
"#;
    std::fs::write(&config, text).unwrap();
    let fake = FakeRunner::new();
    queue(&fake, "no-op", "no-op");
    let run = codify(dir.path(), &fake);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(&format!(
            "codify: kubernetes_config_map_v1.flags: data.color = \"red\" ({})",
            config.display()
        )),
        "{}",
        run.stdout
    );
    // The other findings are not declared here.
    assert!(
        run.stdout
            .contains("codify: refused kubernetes_secret_v1.db: data is sensitive")
    );
    assert!(
        run.stdout
            .contains("codify: refused google_compute_instance.worker: replaced by the next apply")
    );
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        text.replace(
            r#"color    = "blue" # on-call"#,
            r#"color    = "red" # on-call"#
        )
    );
}

#[test]
fn refuses_values_from_expressions() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&read("shop-prod/main.tf.json")).unwrap();
    doc["resource"]["kubernetes_config_map_v1"]["flags"]["data"]["color"] = "${var.color}".into();
    std::fs::write(dir.path().join("main.tf.json"), doc.to_string()).unwrap();
    let fake = FakeRunner::new();
    queue(&fake, "no-op", "no-op");
    let run = codify(dir.path(), &fake);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout
            .contains("data.color comes from an expression or variable"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("nothing could be codified"),
        "{}",
        run.stderr
    );
    // Nothing was applied.
    assert!(fake.calls().iter().all(|c| c[2] != "apply"));
}

#[test]
fn a_symlinked_file_is_neither_followed_out_of_the_stack_nor_replaced() {
    // The stack's main.tf.json is a link to a file shared from outside the stack.
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let stack = root.path().join("stack");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&stack).unwrap();
    let target = shared.join("main.tf.json");
    std::fs::copy(fixture("shop-prod/main.tf.json"), &target).unwrap();
    let before = std::fs::read(&target).unwrap();
    let link = stack.join("main.tf.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fake = FakeRunner::new();
    queue(&fake, "no-op", "no-op");
    let run = codify(&stack, &fake);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(&format!(
            "codify: refused kubernetes_config_map_v1.flags: {} is a symbolic link",
            link.display()
        )),
        "{}",
        run.stdout
    );
    // The link is still a link, its target is untouched, and nothing was applied.
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), before);
    assert!(fake.calls().iter().all(|c| c[2] != "apply"));
    assert_eq!(std::fs::read_dir(&stack).unwrap().count(), 1);
}

#[test]
fn a_pending_move_is_refused_before_anything_is_written() {
    // The configuration moves local_file.old_readme to local_file.readme (a moved block not
    // applied yet): terraform refuses `apply -refresh-only -target=...` until the move is
    // made ("Moved resource instances excluded by targeting").
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("main.tf.json");
    std::fs::copy(fixture("shop-prod/main.tf.json"), &config).unwrap();
    let before = std::fs::read(&config).unwrap();
    let mut plan: serde_json::Value = serde_json::from_str(&read("shop-prod/plan.json")).unwrap();
    for change in plan["resource_changes"].as_array_mut().unwrap() {
        if change["address"] == "local_file.readme" {
            change["previous_address"] = "local_file.old_readme".into();
        }
    }
    let fake = FakeRunner::new();
    fake.push_refresh(2, read("shop-prod/refresh_only.json"));
    fake.push_plan(2, plan.to_string());
    let run = codify(dir.path(), &fake);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains(
            "the configuration has moves the next apply has yet to make (local_file.readme (from local_file.old_readme))"
        ),
        "{}",
        run.stderr
    );
    // Only the two plans ran: no file was written, no verification plan, no apply.
    assert_eq!(std::fs::read(&config).unwrap(), before);
    let subs: Vec<String> = fake.calls().iter().map(|c| c[2].clone()).collect();
    assert_eq!(subs, ["plan", "show", "plan", "show"]);
}

#[test]
fn numbers_are_written_with_the_digits_the_plan_wrote() {
    // 2^70+3 does not fit in f64: written from a parsed f64 it would be
    // 1180591620717411303424 (or 1.1805916207174113e21), another value. The configuration
    // must get the plan's digits, and a .tf.json file must keep the digits of every other
    // number in it (it is written back whole).
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("main.tf"),
        "resource \"aws_x\" \"hcl\" {\n  limit = 1 # per day\n}\n",
    )
    .unwrap();
    let json_config = r#"{
  "resource": {
    "aws_x": {
      "js": {
        "limit": 1,
        "other": 12345678901234567890123456789,
        "ratio": 0.1000000000000000055511151231257827,
        "round": 1.50
      }
    }
  }
}
"#;
    std::fs::write(dir.path().join("x.tf.json"), json_config).unwrap();
    let big = "1180591620717411303427";
    let entry = |address: &str, actions: &str, before: &str, after: &str| {
        let name = address.split_once('.').unwrap().1;
        format!(
            r#"{{"address":"{address}","mode":"managed","type":"aws_x","name":"{name}","provider_name":"p","change":{{"actions":["{actions}"],"before":{{"limit":{before}}},"after":{{"limit":{after}}},"after_unknown":{{}},"before_sensitive":{{}},"after_sensitive":{{}}}}}}"#
        )
    };
    let drift = [
        entry("aws_x.hcl", "update", "1", big),
        entry("aws_x.js", "update", "1", big),
    ]
    .join(",");
    let reverts = [
        entry("aws_x.hcl", "update", big, "1"),
        entry("aws_x.js", "update", big, "1"),
    ]
    .join(",");
    let quiet = [
        entry("aws_x.hcl", "no-op", big, big),
        entry("aws_x.js", "no-op", big, big),
    ]
    .join(",");
    let fake = FakeRunner::new();
    fake.push_refresh(
        2,
        format!(r#"{{"format_version":"1.2","resource_drift":[{drift}]}}"#),
    );
    fake.push_plan(
        2,
        format!(
            r#"{{"format_version":"1.2","resource_drift":[{drift}],"resource_changes":[{reverts}]}}"#
        ),
    );
    for _ in 0..2 {
        fake.push_plan(
            0,
            format!(
                r#"{{"format_version":"1.2","resource_drift":[{drift}],"resource_changes":[{quiet}]}}"#
            ),
        );
    }
    fake.push_apply(0);
    fake.calls();
    let run = codify(dir.path(), &fake);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains(&format!("codify: aws_x.hcl: limit = {big} (")),
        "{}",
        run.stdout
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("main.tf")).unwrap(),
        format!("resource \"aws_x\" \"hcl\" {{\n  limit = {big} # per day\n}}\n")
    );
    let written = std::fs::read_to_string(dir.path().join("x.tf.json")).unwrap();
    assert_eq!(
        written,
        json_config.replace("\"limit\": 1,", &format!("\"limit\": {big},")),
    );
}
