//! `driftwatch codify` on a real stack: changed-outside literals accepted into a `.tf`
//! file (comments and alignment kept) and into a `.tf.json` file, state refreshed with
//! `apply -refresh-only`, and a normal plan, run here independently of driftwatch, that is
//! a no-op for those resources; the refusals (a sensitive value, a replacement, a value
//! from a variable) against the same real plans.

use super::{Engine, Stack};

const MAIN_TF: &str = r#"# Queues of the shop. On-call sometimes tunes them by hand.

resource "aws_sqs_queue" "tuned" {
  name                       = "{{prefix}}-tuned"
  visibility_timeout_seconds = 30 # seconds; the worker's budget
  tags = {
    Team = "shop" # who gets paged
  }
}

variable "delay" {
  default = 0
}

resource "aws_sqs_queue" "from_var" {
  name          = "{{prefix}}-from-var"
  delay_seconds = var.delay
}

resource "aws_ssm_parameter" "secret" {
  name  = "/{{prefix}}/token"
  type  = "SecureString"
  value = "CANARY-c0d1-declared"
  tags  = { Team = "shop" }
}

resource "aws_s3_bucket" "locked" {
  bucket              = "{{prefix}}-locked"
  object_lock_enabled = false
}
"#;

const EXTRA_TF_JSON: &str = r#"{
  "resource": {
    "aws_sqs_queue": {
      "archive": {
        "name": "{{prefix}}-archive",
        "message_retention_seconds": 345600
      }
    }
  }
}
"#;

const DRIFT: &str = r#"
u = queue_url(f"{P}-tuned")
sqs.set_queue_attributes(QueueUrl=u, Attributes={"VisibilityTimeout": "60"})
sqs.tag_queue(QueueUrl=u, Tags={"Team": "payments"})
sqs.set_queue_attributes(QueueUrl=queue_url(f"{P}-from-var"), Attributes={"DelaySeconds": "7"})
sqs.set_queue_attributes(QueueUrl=queue_url(f"{P}-archive"), Attributes={"MessageRetentionPeriod": "86400"})
ssm.put_parameter(Name=f"/{P}/token", Value="CANARY-c0d1-rotated", Type="SecureString", Overwrite=True)
b = f"{P}-locked"
s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
s3.put_object_lock_configuration(Bucket=b, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
"#;

#[test]
fn codify_accepts_literals_and_the_next_apply_is_a_no_op() {
    let Some(engine) = Engine::get("codify_accepts_literals_and_the_next_apply_is_a_no_op") else {
        return;
    };
    let stack = Stack::new(
        &engine,
        "accept",
        &[("main.tf", MAIN_TF), ("archive.tf.json", EXTRA_TF_JSON)],
    );
    stack.init_and_apply();
    stack.out_of_band(DRIFT);
    let main_before = stack.read("main.tf");

    let out: super::Ran = stack
        .driftwatch()
        .args(["codify", "--binary", "terraform", "--stack", "shop"])
        .arg("--chdir")
        .arg(&stack.root)
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let said = &out.stdout;
    let main = stack.root.join("main.tf");
    let archive = stack.root.join("archive.tf.json");
    for line in [
        format!(
            "codify: aws_sqs_queue.tuned: tags.Team = \"payments\" ({})",
            main.display()
        ),
        format!(
            "codify: aws_sqs_queue.tuned: visibility_timeout_seconds = 60 ({})",
            main.display()
        ),
        format!(
            "codify: aws_sqs_queue.archive: message_retention_seconds = 86400 ({})",
            archive.display()
        ),
        "codify: refused aws_sqs_queue.from_var: delay_seconds comes from an expression or variable, not a literal".to_owned(),
        "codify: refused aws_ssm_parameter.secret: value is sensitive; accept it by hand".to_owned(),
        "codify: refused aws_s3_bucket.locked: replaced by the next apply; accepting the value would not stop the replacement".to_owned(),
        "codify: verified: the next apply is a no-op for 2 resource(s)".to_owned(),
        "branch: driftwatch/codify-shop-2026-10-28".to_owned(),
    ] {
        assert!(said.lines().any(|l| l == line), "missing {line:?} in:\n{said}");
    }
    assert!(!said.contains("CANARY") && !out.stderr.contains("CANARY"));

    // The .tf file changed in the two literals and nowhere else: comments, alignment and
    // the variable reference are as they were.
    assert_eq!(
        stack.read("main.tf"),
        main_before
            .replace(
                "visibility_timeout_seconds = 30 # seconds",
                "visibility_timeout_seconds = 60 # seconds"
            )
            .replace(
                "Team = \"shop\" # who gets paged",
                "Team = \"payments\" # who gets paged"
            )
    );
    let json: serde_json::Value = serde_json::from_str(&stack.read("archive.tf.json")).unwrap();
    assert_eq!(
        json["resource"]["aws_sqs_queue"]["archive"]["message_retention_seconds"],
        86400
    );

    // Proof independent of driftwatch: a normal plan of the real engine leaves the two
    // codified queues alone, and a refresh-only plan finds no drift on them (state took
    // reality for them alone). The refused findings are still drift.
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    stack.plan_json(false, &plan);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let action = |address: &str| -> String {
        doc["resource_changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["address"] == address)
            .map(|c| {
                c["change"]["actions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_else(|| panic!("{address} not in the plan"))
    };
    assert_eq!(action("aws_sqs_queue.tuned"), "no-op");
    assert_eq!(action("aws_sqs_queue.archive"), "no-op");
    assert_eq!(action("aws_sqs_queue.from_var"), "update");
    assert_eq!(action("aws_ssm_parameter.secret"), "update");
    assert_eq!(action("aws_s3_bucket.locked"), "delete,create");
    let refresh = dir.path().join("refresh.json");
    stack.plan_json(true, &refresh);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&refresh).unwrap()).unwrap();
    let mut drifted: Vec<&str> = doc["resource_drift"]
        .as_array()
        .map(|d| d.iter().map(|r| r["address"].as_str().unwrap()).collect())
        .unwrap_or_default();
    drifted.sort_unstable();
    assert_eq!(
        drifted,
        [
            "aws_s3_bucket.locked",
            "aws_sqs_queue.from_var",
            "aws_ssm_parameter.secret"
        ],
        "only the refused drift is left"
    );
}
