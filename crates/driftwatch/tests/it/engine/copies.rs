//! Sensitive values the AWS provider copies into attributes it does not mark, on the real
//! engine: `tags_all` beside a `tags` that holds a sensitive variable (one value, or a
//! whole map keyed by secrets), and an `aws_s3_bucket`'s computed `lifecycle_rule`, which
//! mirrors an `aws_s3_bucket_lifecycle_configuration` whose prefix is sensitive. Terraform's
//! own plan output shows these copies in plain text; no driftwatch output may. The same
//! stack has a queue the next apply forgets and one whose configuration was edited on the
//! attribute that drifted, classified as the apply then does.

use super::{Engine, Stack};
use crate::support::{categories, finding};

/// Every secret of the stack, declared or written outside, starts with this.
const CANARY: &str = "CANARY-c0p1";

const MAIN_TF: &str = r#"variable "secret" {
  type      = string
  sensitive = true
  default   = "CANARY-c0p1-var"
}

variable "secret_tags" {
  type      = map(string)
  sensitive = true
  default   = { "CANARY-c0p1-key" = "CANARY-c0p1-val" }
}

variable "prefix" {
  type      = string
  sensitive = true
  default   = "CANARY-c0p1-prefix/"
}

resource "aws_sqs_queue" "one_tag" {
  name = "{{prefix}}-one-tag"
  tags = { plain = "p", sv = var.secret }
}

resource "aws_sqs_queue" "tag_map" {
  name = "{{prefix}}-tag-map"
  tags = var.secret_tags
}

resource "aws_s3_bucket" "b" {
  bucket = "{{prefix}}-rules"
}

resource "aws_s3_bucket_lifecycle_configuration" "l" {
  bucket = aws_s3_bucket.b.id
  rule {
    id     = "plain"
    status = "Enabled"
    filter {
      prefix = "plain/"
    }
    expiration {
      days = 30
    }
  }
  rule {
    id     = "hidden"
    status = "Enabled"
    filter {
      prefix = var.prefix
    }
    expiration {
      days = 40
    }
  }
}

resource "aws_sqs_queue" "edited" {
  name                       = "{{prefix}}-edited"
  visibility_timeout_seconds = 30
}

resource "aws_sqs_queue" "forgotten" {
  name                       = "{{prefix}}-forgotten"
  visibility_timeout_seconds = 30
}
"#;

const DRIFT: &str = r#"
sqs.tag_queue(QueueUrl=queue_url(f"{P}-one-tag"), Tags={"sv": "CANARY-c0p1-outside"})
sqs.tag_queue(QueueUrl=queue_url(f"{P}-tag-map"), Tags={"CANARY-c0p1-newkey": "CANARY-c0p1-newval"})
s3.put_bucket_lifecycle_configuration(Bucket=f"{P}-rules", LifecycleConfiguration={"Rules": [
    {"ID": "hidden", "Status": "Enabled", "Filter": {"Prefix": "CANARY-c0p1-prefix/"}, "Expiration": {"Days": 40}}]})
for name in ("edited", "forgotten"):
    sqs.set_queue_attributes(QueueUrl=queue_url(f"{P}-{name}"), Attributes={"VisibilityTimeout": "45"})
"#;

#[test]
fn values_the_provider_copies_unmarked_stay_hidden() {
    let Some(engine) = Engine::get("values_the_provider_copies_unmarked_stay_hidden") else {
        return;
    };
    let stack = Stack::new(&engine, "copies", &[("main.tf", MAIN_TF)]);
    stack.init_and_apply();
    stack.out_of_band(DRIFT);
    // Unapplied edits: the drifted queue's timeout now 60, the other queue removed from the
    // configuration without destroying it.
    let edited = MAIN_TF
        .replace(
            "name                       = \"{{prefix}}-edited\"\n  visibility_timeout_seconds = 30",
            "name                       = \"{{prefix}}-edited\"\n  visibility_timeout_seconds = 60",
        )
        .replace(
            "resource \"aws_sqs_queue\" \"forgotten\" {\n  name                       = \"{{prefix}}-forgotten\"\n  visibility_timeout_seconds = 30\n}",
            "removed {\n  from = aws_sqs_queue.forgotten\n  lifecycle {\n    destroy = false\n  }\n}",
        );
    assert_ne!(edited, MAIN_TF);
    stack.write("main.tf", &edited);

    let out_dir = tempfile::tempdir().unwrap();
    let (md, history, summary, md_dir) = (
        out_dir.path().join("drift.md"),
        out_dir.path().join("history.json"),
        out_dir.path().join("summary.md"),
        out_dir.path().join("pages"),
    );
    std::fs::write(&summary, "").unwrap();
    let md_text = md.display().to_string();
    let history_text = history.display().to_string();
    let json = stack
        .driftwatch()
        .args(["run", "--binary", "terraform", "--chdir"])
        .arg(&stack.root)
        .args(["--json", "--step-summary", "--markdown", &md_text])
        .args(["--history", &history_text])
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    let json: super::Ran = json.into();
    assert_eq!(json.code, 2, "{}", json.stderr);
    let text: super::Ran = stack
        .driftwatch()
        .args(["run", "--binary", "terraform", "--chdir"])
        .arg(&stack.root)
        .arg("--markdown-dir")
        .arg(&md_dir)
        .output()
        .unwrap()
        .into();
    assert_eq!(text.code, 2, "{}", text.stderr);

    let mut outputs = vec![
        ("JSON", json.stdout.clone()),
        ("stderr of the JSON run", json.stderr.clone()),
        ("text", text.stdout.clone()),
        ("stderr", text.stderr.clone()),
    ];
    for path in [&md, &history, &summary] {
        outputs.push(("a written file", std::fs::read_to_string(path).unwrap()));
    }
    for page in std::fs::read_dir(&md_dir).unwrap() {
        let page = page.unwrap().path();
        outputs.push(("a Markdown page", std::fs::read_to_string(page).unwrap()));
    }
    for (what, out) in &outputs {
        assert!(!out.contains(CANARY), "{what} shows a secret:\n{out}");
    }

    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let paths = |address: &str| -> Vec<String> {
        finding(&doc, address)["paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(paths("aws_sqs_queue.one_tag"), ["tags.sv", "tags_all.sv"]);
    assert_eq!(paths("aws_sqs_queue.tag_map"), ["tags", "tags_all"]);
    assert_eq!(
        categories(&doc),
        [
            ("aws_s3_bucket_lifecycle_configuration.l", "changed_outside"),
            ("aws_sqs_queue.edited", "changed_outside"),
            ("aws_sqs_queue.one_tag", "changed_outside"),
            ("aws_sqs_queue.tag_map", "changed_outside"),
            ("aws_s3_bucket.b", "ignored"),
            ("aws_sqs_queue.forgotten", "ignored"),
        ],
        "{doc:#}"
    );
    assert_eq!(
        finding(&doc, "aws_sqs_queue.edited")["consequence"],
        "the next apply sets a new value from the configuration, not the last apply's"
    );
    assert_eq!(
        finding(&doc, "aws_sqs_queue.forgotten")["consequence"],
        "the next apply stops managing it (forget) and leaves it as it is"
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
    assert_eq!(
        pending,
        [
            ("aws_sqs_queue.edited", "update"),
            ("aws_sqs_queue.forgotten", "forget")
        ],
        "{doc:#}"
    );
    assert!(
        !text.stderr.contains("undone between the two plans"),
        "{}",
        text.stderr
    );

    // What terraform then does: the edited queue gets 60 (not the last apply's 30), the
    // forgotten one keeps its drift and leaves the state.
    let applied = stack.terraform(&["apply", "-auto-approve", "-input=false", "-no-color"]);
    assert_eq!(applied.code, 0, "{}\n{}", applied.stdout, applied.stderr);
    stack.out_of_band(
        r#"
for name, want in (("edited", "60"), ("forgotten", "45")):
    got = sqs.get_queue_attributes(QueueUrl=queue_url(f"{P}-{name}"), AttributeNames=["VisibilityTimeout"])["Attributes"]["VisibilityTimeout"]
    assert got == want, (name, got, want)
"#,
    );
    let listed = stack.terraform(&["state", "list"]);
    assert!(!listed.stdout.contains("forgotten"), "{}", listed.stdout);
}

const ROLE_TF: &str = r#"variable "db_password" {
  type      = string
  sensitive = true
  default   = "CANARY-c0p1-declared-pw"
}

resource "aws_iam_role" "app" {
  name = "{{prefix}}-app"
  assume_role_policy = jsonencode({
    Version   = "2012-10-17"
    Statement = [{ Effect = "Allow", Principal = { Service = "ec2.amazonaws.com" }, Action = "sts:AssumeRole" }]
  })
}

resource "aws_iam_role_policy" "app" {
  name = "{{prefix}}-inline"
  role = aws_iam_role.app.id
  policy = jsonencode({
    Version   = "2012-10-17"
    Statement = [{ Effect = "Allow", Action = ["s3:GetObject"], Resource = "*", Condition = { StringEquals = { "aws:PrincipalTag/key" = var.db_password } } }]
  })
}
"#;

/// The AWS provider copies an aws_iam_role_policy's policy (built from a sensitive
/// variable, and marked) unmarked into the role's computed `inline_policy`, which shows as
/// drift right after a clean apply; the policy resource does not drift, so its marker is
/// only in the plans' prior_state, planned_values and no-op changes.
#[test]
fn a_policy_copied_into_a_role_that_drifted_stays_hidden() {
    let Some(engine) = Engine::get("a_policy_copied_into_a_role_that_drifted_stays_hidden") else {
        return;
    };
    let stack = Stack::new(&engine, "rolecopy", &[("main.tf", ROLE_TF)]);
    stack.init_and_apply();
    let out_dir = tempfile::tempdir().unwrap();
    let md = out_dir.path().join("drift.md");
    let md_text = md.display().to_string();
    let mut outputs = Vec::new();
    for extra in [
        &["--json"][..],
        &["--output", "markdown"],
        &["--drift-only"],
    ] {
        let ran: super::Ran = stack
            .driftwatch()
            .args(["run", "--binary", "terraform", "--chdir"])
            .arg(&stack.root)
            .args(extra)
            .args(["--markdown", &md_text])
            .output()
            .unwrap()
            .into();
        assert!(ran.code == 0 || ran.code == 2, "{}", ran.stderr);
        outputs.push((format!("stdout of {extra:?}"), ran.stdout));
        outputs.push((format!("stderr of {extra:?}"), ran.stderr));
        outputs.push((
            format!("Markdown file of {extra:?}"),
            std::fs::read_to_string(&md).unwrap(),
        ));
    }
    for (what, out) in &outputs {
        assert!(!out.contains(CANARY), "{what} shows a secret:\n{out}");
    }
    // The role's drift is still reported, the copy without its value.
    let doc: serde_json::Value = serde_json::from_str(&outputs[0].1).unwrap();
    let paths: Vec<&str> = finding(&doc, "aws_iam_role.app")["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(paths.contains(&"inline_policy[0].policy"), "{doc:#}");
}

const EMBEDDED_TF: &str = r#"variable "secret" {
  type      = string
  sensitive = true
  default   = "CANARY-c0p1-inside"
}

variable "quoted" {
  type      = string
  sensitive = true
  default   = "CANARY-c0p1-q\"<&>\\x"
}

resource "aws_sqs_queue" "q" {
  name = "{{prefix}}-${var.secret}"
  tags = { k = var.quoted }
}

resource "aws_iam_role" "app" {
  name = "{{prefix}}-embedded"
  assume_role_policy = jsonencode({
    Version   = "2012-10-17"
    Statement = [{ Effect = "Allow", Principal = { Service = "ec2.amazonaws.com" }, Action = "sts:AssumeRole" }]
  })
}

resource "aws_iam_role_policy" "app" {
  name = "{{prefix}}-embedded"
  role = aws_iam_role.app.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{ Effect = "Allow", Action = ["sqs:SendMessage"], Resource = aws_sqs_queue.q.arn,
    Condition = { StringEquals = { "aws:PrincipalTag/k" = aws_sqs_queue.q.tags_all["k"] } } }]
  })
}
"#;

/// A sensitive value inside a longer string nothing marks: the queue's computed `arn`
/// (which holds its sensitive name) and `tags_all` (which holds a sensitive tag) are not
/// marked, so neither is the policy built from them with `jsonencode`; the provider copies
/// the policy into the role's `inline_policy`, where the tag is JSON-escaped as Go writes
/// it (`q\"\u003c\u0026\u003e\\x`). No marked string equals the copy; it holds them.
#[test]
fn a_secret_inside_a_policy_nothing_marks_stays_hidden() {
    let Some(engine) = Engine::get("a_secret_inside_a_policy_nothing_marks_stays_hidden") else {
        return;
    };
    let stack = Stack::new(&engine, "embedded", &[("main.tf", EMBEDDED_TF)]);
    stack.init_and_apply();
    let dir = tempfile::tempdir().unwrap();
    let (refresh, plan) = (
        dir.path().join("refresh.json"),
        dir.path().join("plan.json"),
    );
    stack.plan_json(true, &refresh);
    stack.plan_json(false, &plan);
    // terraform's own plan holds the secrets unmarked inside the copy.
    let raw = std::fs::read_to_string(&refresh).unwrap();
    assert!(
        raw.contains(r#"CANARY-c0p1-q\\\"\\u003c\\u0026\\u003e\\\\x"#),
        "{raw}"
    );
    let mut outputs = Vec::new();
    for format in ["human", "json", "markdown"] {
        let ran: super::Ran = stack
            .driftwatch()
            .arg("report")
            .arg("--refresh-plan")
            .arg(&refresh)
            .arg("--plan")
            .arg(&plan)
            .args(["--output", format])
            .output()
            .unwrap()
            .into();
        assert!(ran.code == 0 || ran.code == 2, "{}", ran.stderr);
        outputs.push((format, ran.stdout));
        outputs.push(("stderr", ran.stderr));
    }
    for (what, out) in &outputs {
        assert!(!out.contains(CANARY), "{what} shows a secret:\n{out}");
    }
    let doc: serde_json::Value = serde_json::from_str(&outputs[2].1).unwrap();
    let paths: Vec<&str> = finding(&doc, "aws_iam_role.app")["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(paths.contains(&"inline_policy[0].policy"), "{doc:#}");
}

/// A sensitive variable as the key of the provider's `default_tags`: terraform takes it
/// (the provider's configuration is given to it unmarked), and the AWS provider copies the
/// key into every resource's `tags_all`, unmarked, in the normal plan's update of each
/// (terraform 1.11.4, hashicorp/aws 5.100.0). No resource marks the key: in the normal
/// plan it is only the value of `variables`, which comes before `resource_changes`. The
/// refresh-only plan has no drift.
#[test]
fn a_sensitive_default_tags_key_in_an_unapplied_change_stays_hidden() {
    let Some(engine) =
        Engine::get("a_sensitive_default_tags_key_in_an_unapplied_change_stays_hidden")
    else {
        return;
    };
    let main = r#"variable "secret" {
  type      = string
  sensitive = true
  default   = "k-CANARY-c0p1-default-tag"
}

resource "aws_sqs_queue" "q" {
  name = "{{prefix}}-default-tags"
  tags = { plain = "p" }
}
"#;
    let stack = Stack::new(&engine, "default-tags", &[("main.tf", main)]);
    stack.init_and_apply();
    let provider = stack.read("provider.tf");
    let tagged = provider.replace(
        "  endpoints {",
        "  default_tags {\n    tags = { (var.secret) = \"x\", team = \"ops\" }\n  }\n\n  endpoints {",
    );
    assert_ne!(tagged, provider);
    stack.write("provider.tf", &tagged);

    let dir = tempfile::tempdir().unwrap();
    let (refresh, plan, md) = (
        dir.path().join("refresh.json"),
        dir.path().join("plan.json"),
        dir.path().join("drift.md"),
    );
    stack.plan_json(true, &refresh);
    stack.plan_json(false, &plan);
    assert!(
        std::fs::read_to_string(&plan).unwrap().contains(CANARY),
        "the plan holds the key (in `variables` and tags_all)"
    );
    let mut outputs = Vec::new();
    for both in [true, false] {
        for format in ["human", "json", "markdown"] {
            let mut cmd = stack.driftwatch();
            cmd.arg("report");
            if both {
                cmd.arg("--refresh-plan").arg(&refresh);
            }
            let ran: super::Ran = cmd
                .arg("--plan")
                .arg(&plan)
                .args(["--output", format])
                .arg("--markdown")
                .arg(&md)
                .output()
                .unwrap()
                .into();
            assert_eq!(ran.code, 0, "{}", ran.stderr);
            // The pending update is still shown, cut at the map.
            assert!(ran.stdout.contains("tags_all"), "{}", ran.stdout);
            assert!(ran.stdout.contains("tags_all.team"), "{}", ran.stdout);
            outputs.push((format, ran.stdout));
            outputs.push(("stderr", ran.stderr));
            outputs.push(("the Markdown file", std::fs::read_to_string(&md).unwrap()));
        }
    }
    // driftwatch making both plans itself.
    let ran = stack.run(&["--output", "json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.stdout.contains("tags_all.team"), "{}", ran.stdout);
    outputs.push(("run", ran.stdout));
    outputs.push(("stderr of run", ran.stderr));
    for (what, out) in &outputs {
        assert!(!out.contains(CANARY), "{what} shows a secret:\n{out}");
    }
}

const KEYS_TF: &str = r#"resource "aws_sqs_queue" "a" {
  name = "{{prefix}}-a"
  tags = sensitive({ "CANARY-c0p1-key" = "CANARY-c0p1-val", plain = "p" })
}

resource "aws_sqs_queue" "b" {
  name = "{{prefix}}-b"
  tags = aws_sqs_queue.a.tags_all
}

resource "aws_sqs_queue" "c" {
  name = "{{prefix}}-c"
  tags = { for k, v in aws_sqs_queue.a.tags_all : "copy-${k}" => "x" }
}
"#;

/// The keys of a map a resource marks whole (`sensitive({...})`, not a variable): the
/// AWS provider copies them unmarked into the queue's `tags_all`, and the configuration
/// copies that into queues that mark nothing, as keys (`b`) and inside keys (`c`). A tag
/// under such a key changed outside is drift there, and its path must not show the key.
#[test]
fn keys_of_a_map_marked_in_another_resource_stay_hidden() {
    let Some(engine) = Engine::get("keys_of_a_map_marked_in_another_resource_stay_hidden") else {
        return;
    };
    let stack = Stack::new(&engine, "keys", &[("main.tf", KEYS_TF)]);
    stack.init_and_apply();
    stack.out_of_band(
        r#"
sqs.tag_queue(QueueUrl=queue_url(f"{P}-b"), Tags={"CANARY-c0p1-key": "y"})
sqs.tag_queue(QueueUrl=queue_url(f"{P}-c"), Tags={"copy-CANARY-c0p1-key": "y", "copy-plain": "z"})
"#,
    );
    let out_dir = tempfile::tempdir().unwrap();
    let md = out_dir.path().join("drift.md");
    let json: super::Ran = stack
        .driftwatch()
        .args(["run", "--binary", "terraform", "--chdir"])
        .arg(&stack.root)
        .arg("--json")
        .arg("--markdown")
        .arg(&md)
        .output()
        .unwrap()
        .into();
    assert_eq!(json.code, 2, "{}", json.stderr);
    let text = stack.run(&[]);
    assert_eq!(text.code, 2, "{}", text.stderr);
    for (what, out) in [
        ("JSON", &json.stdout),
        ("stderr of the JSON run", &json.stderr),
        ("text", &text.stdout),
        ("stderr", &text.stderr),
        ("Markdown", &std::fs::read_to_string(&md).unwrap()),
    ] {
        assert!(!out.contains(CANARY), "{what} shows a secret key:\n{out}");
    }
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let paths = |address: &str| -> Vec<String> {
        finding(&doc, address)["paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(paths("aws_sqs_queue.b"), ["tags", "tags_all"], "{doc:#}");
    assert_eq!(
        paths("aws_sqs_queue.c"),
        ["tags", "tags.copy-plain", "tags_all", "tags_all.copy-plain"],
        "{doc:#}"
    );
}
