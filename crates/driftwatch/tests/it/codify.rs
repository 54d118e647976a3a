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

fn queue(fake: &FakeRunner, verify_action: &str) {
    fake.push_refresh(2, read("shop-prod/refresh_only.json"));
    fake.push_plan(2, read("shop-prod/plan.json"));
    fake.push_apply(0);
    fake.push_plan(2, verified_plan(verify_action));
}

#[test]
fn codifies_literals_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("main.tf.json");
    std::fs::copy(fixture("shop-prod/main.tf.json"), &config).unwrap();
    let fake = FakeRunner::new();
    queue(&fake, "no-op");
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
        out.contains("codify: refused kubernetes_secret_v1.db: data.password is sensitive"),
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
        ["plan", "show", "plan", "show", "apply", "plan", "show"]
    );
    assert!(
        calls[4].contains(&"-refresh-only".to_owned())
            && calls[4].contains(&"-auto-approve".to_owned())
    );
}

#[test]
fn fails_when_the_next_apply_is_not_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("shop-prod/main.tf.json"),
        dir.path().join("main.tf.json"),
    )
    .unwrap();
    let fake = FakeRunner::new();
    queue(&fake, "update");
    let run = codify(dir.path(), &fake);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains("still changes: kubernetes_config_map_v1.flags"),
        "{}",
        run.stderr
    );
}

#[test]
fn refuses_values_from_expressions() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&read("shop-prod/main.tf.json")).unwrap();
    doc["resource"]["kubernetes_config_map_v1"]["flags"]["data"]["color"] = "${var.color}".into();
    std::fs::write(dir.path().join("main.tf.json"), doc.to_string()).unwrap();
    let fake = FakeRunner::new();
    queue(&fake, "no-op");
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
