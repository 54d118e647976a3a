//! Every category of the spec on one real stack written in HCL, with a local module:
//! a clean run first (exit 0), then real out-of-band changes made with boto3 and an
//! unapplied edit of the configuration, read through `run --binary terraform` and through
//! `report` on the same engine's saved plans; the state lock held by another terraform
//! process; and a SecureString whose values (the declared one and the rotated one) must
//! appear in no output, history or Markdown.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Engine, Stack};
use crate::support::{categories, finding};

/// Both SecureString values start with this; no driftwatch output may contain it.
const CANARY: &str = "CANARY-5e1f";

const MAIN_TF: &str = r#"# The shop's queues, buckets and parameters: one resource per kind of drift.

resource "aws_sqs_queue" "changed" {
  name                       = "{{prefix}}-changed"
  visibility_timeout_seconds = 30 # the worker's budget
  tags = {
    Team = "shop"
  }
}

resource "aws_sqs_queue" "deleted" {
  name = "{{prefix}}-deleted"
}

resource "aws_ssm_parameter" "deleted" {
  name  = "/{{prefix}}/deleted"
  type  = "String"
  value = "v1"
  tags  = { Team = "shop" }
}

# object_lock_enabled cannot change in place: turning object lock on outside forces a
# new bucket on the next apply.
resource "aws_s3_bucket" "replaced" {
  bucket              = "{{prefix}}-replaced"
  object_lock_enabled = false
}

resource "aws_ssm_parameter" "secret" {
  name  = "/{{prefix}}/db-password"
  type  = "SecureString"
  value = "CANARY-5e1f-declared"
  tags  = { Team = "shop" }
}

resource "aws_sqs_queue" "pending" {
  name          = "{{prefix}}-pending"
  delay_seconds = 0
}

module "tagged" {
  source = "./modules/queue"
  name   = "{{prefix}}-tagged"
}
"#;

const MODULE_TF: &str = r#"variable "name" {
  type = string
}

resource "aws_sqs_queue" "this" {
  name = var.name
  tags = { Team = "shop" }

  lifecycle {
    # The cost tool writes its own tags.
    ignore_changes = [tags]
  }
}
"#;

const DRIFT: &str = r#"
u = queue_url(f"{P}-changed")
sqs.set_queue_attributes(QueueUrl=u, Attributes={"VisibilityTimeout": "45"})
sqs.tag_queue(QueueUrl=u, Tags={"Owner": "oncall"})
sqs.delete_queue(QueueUrl=queue_url(f"{P}-deleted"))
ssm.delete_parameter(Name=f"/{P}/deleted")
b = f"{P}-replaced"
s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
s3.put_object_lock_configuration(Bucket=b, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
ssm.put_parameter(Name=f"/{P}/db-password", Value="CANARY-5e1f-rotated", Type="SecureString", Overwrite=True)
sqs.tag_queue(QueueUrl=queue_url(f"{P}-tagged"), Tags={"CostCenter": "42"})
"#;

#[track_caller]
fn assert_no_canary(what: &str, text: &str) {
    assert!(
        !text.contains(CANARY),
        "{what} shows a SecureString value:\n{text}"
    );
}

fn paths(f: &serde_json::Value) -> Vec<&str> {
    f["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect()
}

/// What every categorised report of this stack must say, whichever way it was produced.
#[track_caller]
fn assert_categories(doc: &serde_json::Value) {
    assert_eq!(
        categories(doc),
        [
            ("aws_s3_bucket.replaced", "replaced"),
            ("aws_sqs_queue.deleted", "deleted_outside"),
            ("aws_ssm_parameter.deleted", "deleted_outside"),
            ("aws_sqs_queue.changed", "changed_outside"),
            ("aws_ssm_parameter.secret", "changed_outside"),
            ("module.tagged.aws_sqs_queue.this", "ignored"),
        ],
        "{doc:#}"
    );
    let replaced = finding(doc, "aws_s3_bucket.replaced");
    assert_eq!(replaced["next_apply"], "replace");
    assert_eq!(
        replaced["forcing_paths"],
        serde_json::json!(["object_lock_enabled"])
    );
    let changed = finding(doc, "aws_sqs_queue.changed");
    assert_eq!(changed["next_apply"], "update");
    assert_eq!(
        paths(changed),
        ["tags.Owner", "tags_all.Owner", "visibility_timeout_seconds"]
    );
    let timeout = &changed["diffs"][2];
    assert_eq!(
        (timeout["before"].as_str(), timeout["after"].as_str()),
        (Some("30"), Some("45"))
    );
    let secret = finding(doc, "aws_ssm_parameter.secret");
    let value = secret["diffs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["path"] == "value")
        .unwrap();
    assert_eq!(value["sensitive"], true);
    assert!(value["before"].is_null() && value["after"].is_null());
    let tagged = finding(doc, "module.tagged.aws_sqs_queue.this");
    assert_eq!(tagged["next_apply"], "no-op");
    assert_eq!(tagged["ignored_by"], serde_json::json!(["tags"]));
    assert_eq!(
        finding(doc, "aws_sqs_queue.deleted")["next_apply"],
        "create"
    );
    let pending: Vec<(&str, &str)> = doc["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["address"].as_str().unwrap(),
                p["action"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(pending, [("aws_sqs_queue.pending", "update")]);
    assert_eq!(
        doc["pending"][0]["paths"],
        serde_json::json!(["delay_seconds"])
    );
    assert_eq!(doc["summary"]["actionable"], 5);
    assert_eq!(doc["exit_code"], 2);
}

/// A real state lock held by another process: `terraform console` takes the lock of the
/// local backend and keeps it while its input stays open.
struct HeldLock {
    child: std::process::Child,
}

impl HeldLock {
    fn take(stack: &Stack<'_>) -> HeldLock {
        let mut cmd = Command::new(&stack.engine.terraform);
        cmd.arg(format!("-chdir={}", stack.root.display()))
            .arg("console")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        stack.env(&mut cmd);
        let child = cmd.spawn().expect("terraform console starts");
        let info = stack.root.join(".terraform.tfstate.lock.info");
        let started = Instant::now();
        while !info.exists() {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "terraform console did not take the state lock"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        HeldLock { child }
    }

    /// Close the console's input: it exits and releases the lock.
    fn release(mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.write_all(b"exit\n");
        }
        let _ = self.child.wait();
    }
}

#[test]
fn every_category_on_a_real_stack() {
    let Some(engine) = Engine::get("every_category_on_a_real_stack") else {
        return;
    };
    let stack = Stack::new(
        &engine,
        "shop",
        &[("main.tf", MAIN_TF), ("modules/queue/main.tf", MODULE_TF)],
    );
    stack.init_and_apply();

    // Clean: nothing changed outside, nothing to apply; `--binary terraform` from PATH.
    let clean = stack.run(&["--strict", "--fail-on-pending"]);
    assert_eq!(clean.code, 0, "{}\n{}", clean.stdout, clean.stderr);
    assert_eq!(clean.stdout, "");
    assert!(
        clean
            .stderr
            .ends_with("driftwatch: shop: no drift; fingerprint clean\n"),
        "{}",
        clean.stderr
    );

    // The on-call engineer's night, and a configuration edit nobody applied.
    stack.out_of_band(DRIFT);
    stack.write(
        "main.tf",
        &MAIN_TF.replace("delay_seconds = 0", "delay_seconds = 5"),
    );

    let dir = tempfile::tempdir().unwrap();
    let refresh = dir.path().join("refresh.json");
    let plan = dir.path().join("plan.json");
    stack.plan_json(true, &refresh);
    stack.plan_json(false, &plan);
    // The engine's own JSON has the secret in plain text; everything driftwatch writes
    // from it must not.
    assert!(std::fs::read_to_string(&refresh).unwrap().contains(CANARY));

    let report = |extra: &[&str]| -> super::Ran {
        stack
            .driftwatch()
            .arg("report")
            .arg("--refresh-plan")
            .arg(&refresh)
            .arg("--plan")
            .arg(&plan)
            .arg("--config")
            .arg(&stack.root)
            .arg("--stack")
            .arg("shop")
            .args(extra)
            .output()
            .unwrap()
            .into()
    };

    // Text: one line per finding, like a plan.
    let md = dir.path().join("drift.md");
    let history = dir.path().join("history.json");
    let summary = dir.path().join("summary.md");
    let text = stack
        .driftwatch()
        .arg("report")
        .arg("--refresh-plan")
        .arg(&refresh)
        .arg("--plan")
        .arg(&plan)
        .arg("--config")
        .arg(&stack.root)
        .arg("--stack")
        .arg("shop")
        .arg("--markdown")
        .arg(&md)
        .arg("--history")
        .arg(&history)
        .arg("--step-summary")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    let text: super::Ran = text.into();
    assert_eq!(text.code, 2, "{}", text.stderr);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert!(
        lines[0].starts_with("-/+ aws_s3_bucket.replaced replaced by the next apply: ")
            && lines[0].contains("object_lock_enabled: false -> true")
            && lines[0].contains("; object_lock_enabled forces replacement; "),
        "{}",
        text.stdout
    );
    assert!(
        lines[1].starts_with(
            "- aws_sqs_queue.deleted deleted outside: the next apply creates it again"
        )
    );
    assert!(lines[2].starts_with(
        "- aws_ssm_parameter.deleted deleted outside: the next apply creates it again"
    ));
    assert!(
        lines[3].starts_with(
            "~ aws_sqs_queue.changed changed outside: the next apply reverts it; tags.Owner: null -> \"oncall\", tags_all.Owner: null -> \"oncall\", visibility_timeout_seconds: 30 -> 45"
        ),
        "{}",
        text.stdout
    );
    assert!(
        lines[4].starts_with(
            "~ aws_ssm_parameter.secret changed outside: the next apply reverts it; value: (sensitive) -> (sensitive)"
        ),
        "{}",
        text.stdout
    );
    assert!(
        lines[5].starts_with("= module.tagged.aws_sqs_queue.this ignored: ")
            && lines[5].contains("covered by ignore_changes (tags)"),
        "{}",
        text.stdout
    );
    assert_eq!(
        lines[6],
        "~ aws_sqs_queue.pending update (an unapplied change, not drift): delay_seconds"
    );
    assert_eq!(lines.len(), 7, "{}", text.stdout);
    for (what, out) in [
        ("text stdout", text.stdout.clone()),
        ("text stderr", text.stderr.clone()),
        ("Markdown", std::fs::read_to_string(&md).unwrap()),
        ("history", std::fs::read_to_string(&history).unwrap()),
        ("step summary", std::fs::read_to_string(&summary).unwrap()),
    ] {
        assert_no_canary(what, &out);
    }
    let markdown = std::fs::read_to_string(&md).unwrap();
    assert!(
        markdown.contains("| `value` | (sensitive) | (sensitive) |"),
        "{markdown}"
    );
    // The dedupe-key marker is the first line, as in every Markdown report.
    let first = markdown.lines().next().unwrap_or_default();
    assert!(first.starts_with("<!-- driftwatch-"), "{first}");

    let json = report(&["--output", "json"]);
    assert_no_canary("JSON", &json.stdout);
    assert_no_canary("JSON stderr", &json.stderr);
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_categories(&doc);

    // The module's ignore_changes is read from its .tf file: without the normal plan, the
    // rule alone makes the tagged queue "ignored" (tags_all is the provider's copy of
    // tags, dropped with --ignore-attr), while the unruled queue stays changed outside.
    let drift_only: super::Ran = stack
        .driftwatch()
        .args([
            "report",
            "--drift-only",
            "--output",
            "json",
            "--ignore-attr",
            "tags_all",
        ])
        .arg("--refresh-plan")
        .arg(&refresh)
        .arg("--config")
        .arg(&stack.root)
        .output()
        .unwrap()
        .into();
    assert_eq!(drift_only.code, 2, "{}", drift_only.stderr);
    let doc: serde_json::Value = serde_json::from_str(&drift_only.stdout).unwrap();
    let tagged = finding(&doc, "module.tagged.aws_sqs_queue.this");
    assert_eq!(tagged["category"], "ignored");
    assert_eq!(tagged["ignored_by"], serde_json::json!(["tags"]));
    assert_eq!(
        finding(&doc, "aws_sqs_queue.changed")["category"],
        "changed_outside"
    );

    // A real normal plan given as the refresh-only plan is refused.
    let swapped: super::Ran = stack
        .driftwatch()
        .arg("report")
        .arg("--refresh-plan")
        .arg(&plan)
        .output()
        .unwrap()
        .into();
    assert_eq!(swapped.code, 1);
    assert!(
        swapped
            .stderr
            .contains("given as the refresh-only plan, but it is a normal plan"),
        "{}",
        swapped.stderr
    );

    // The state lock, held by another terraform process. A short timeout gives up with
    // exit 1 and says why; a long one waits until the lock is released, then reports.
    let lock = HeldLock::take(&stack);
    let started = Instant::now();
    let refused = stack.run(&["--lock-timeout", "2s"]);
    assert_eq!(refused.code, 1, "{}", refused.stdout);
    assert!(
        refused.stderr.contains(
            "driftwatch: error: refresh-only plan failed (exit 1): Error: Error acquiring the state lock"
        ),
        "{}",
        refused.stderr
    );
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(refused.stdout, "");
    let hold = Duration::from_secs(8);
    let waited = std::thread::scope(|scope| {
        let run = scope.spawn(|| {
            let started = Instant::now();
            (
                stack.run(&["--lock-timeout", "10m", "--output", "json"]),
                started.elapsed(),
            )
        });
        std::thread::sleep(hold);
        lock.release();
        run.join().unwrap()
    });
    let (json, elapsed) = waited;
    assert_eq!(json.code, 2, "{}", json.stderr);
    assert!(
        elapsed >= hold,
        "driftwatch did not wait for the lock ({elapsed:?})"
    );
    assert_no_canary("run JSON", &json.stdout);
    assert_no_canary("run stderr", &json.stderr);
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_categories(&doc);
    assert_eq!(doc["stack"], "shop");
}
