//! Sets on the real engine: a security group's `ingress` (a set of objects in the
//! provider schema, written by position in plan JSON) with a rule added outside through
//! the AWS API, as the stop 55 walkthrough did. The added rule sorts first, so every
//! member moves; the next apply removes it, and nothing of that is an unapplied change.

use super::{Engine, Stack};
use crate::support::finding;

const MAIN_TF: &str = r#"resource "aws_vpc" "main" {
  cidr_block = "10.0.0.0/16"
}

resource "aws_security_group" "web" {
  name   = "{{prefix}}-web"
  vpc_id = aws_vpc.main.id
  ingress {
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = ["10.0.0.0/8"]
  }
  ingress {
    from_port   = 80
    to_port     = 80
    protocol    = "tcp"
    cidr_blocks = ["10.0.0.0/8"]
  }
}
"#;

const ADD_RULE: &str = r#"
ec2 = boto3.client("ec2", **kw)
sg = ec2.describe_security_groups(
    Filters=[{"Name": "group-name", "Values": [P + "-web"]}])["SecurityGroups"][0]
ec2.authorize_security_group_ingress(GroupId=sg["GroupId"], IpPermissions=[
    {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}])
"#;

#[test]
fn a_rule_added_outside_is_what_the_next_apply_reverts() {
    let Some(engine) = Engine::get("a_rule_added_outside_is_what_the_next_apply_reverts") else {
        return;
    };
    let stack = Stack::new(&engine, "sets", &[("main.tf", MAIN_TF)]);
    stack.init_and_apply();
    let clean = stack.run(&["--strict"]);
    assert_eq!(clean.code, 0, "{}\n{}", clean.stdout, clean.stderr);

    stack.out_of_band(ADD_RULE);
    let run = stack.run(&["--json", "--fail-on-pending"]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let sg = finding(&doc, "aws_security_group.web");
    assert_eq!(sg["category"], "changed_outside", "{doc:#}");
    assert_eq!(sg["consequence"], "the next apply reverts it", "{doc:#}");
    // Before sets were compared as sets: an unapplied update of ingress[0].description
    // and ingress[1].description, members that did not drift.
    assert_eq!(doc["pending"], serde_json::json!([]), "{doc:#}");

    // And the apply does just that: the rule added outside is gone, nothing else changed.
    let apply = stack.terraform(&["apply", "-auto-approve", "-input=false", "-no-color"]);
    assert_eq!(apply.code, 0, "{}\n{}", apply.stdout, apply.stderr);
    assert!(
        apply.stdout.contains("0 added, 1 changed, 0 destroyed"),
        "{}",
        apply.stdout
    );
    // The apply planned each rule's description as null and the provider reads "": not
    // drift, so the stack is clean again, --strict included.
    let after = stack.run(&["--strict", "--fail-on-pending"]);
    assert_eq!(after.code, 0, "{}\n{}", after.stdout, after.stderr);
}

const FRESH_TF: &str = r#"resource "aws_sqs_queue" "plain" {
  name = "{{prefix}}-plain"
}

resource "aws_sqs_queue" "tagged" {
  name                       = "{{prefix}}-tagged"
  visibility_timeout_seconds = 45
  tags                       = { Team = "shop", Marker = "" }
}

resource "aws_iam_role" "app" {
  name = "{{prefix}}-app"
  assume_role_policy = jsonencode({
    Version   = "2012-10-17"
    Statement = [{ Effect = "Allow", Principal = { Service = "ec2.amazonaws.com" }, Action = "sts:AssumeRole" }]
  })
  tags = { Team = "shop" }
}

resource "aws_iam_role_policy" "app" {
  name = "{{prefix}}-inline"
  role = aws_iam_role.app.id
  policy = jsonencode({
    Version   = "2012-10-17"
    Statement = [{ Effect = "Allow", Action = ["sqs:SendMessage"], Resource = aws_sqs_queue.plain.arn }]
  })
}

resource "aws_vpc" "main" {
  cidr_block = "10.7.0.0/16"
}

resource "aws_security_group" "web" {
  name   = "{{prefix}}-web"
  vpc_id = aws_vpc.main.id
  ingress {
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = ["10.0.0.0/8"]
  }
}

resource "aws_security_group" "bare" {
  name   = "{{prefix}}-bare"
  vpc_id = aws_vpc.main.id
}

resource "aws_security_group_rule" "ssh" {
  type              = "ingress"
  from_port         = 22
  to_port           = 22
  protocol          = "tcp"
  cidr_blocks       = ["10.1.0.0/16"]
  security_group_id = aws_security_group.bare.id
}

resource "aws_vpc_security_group_ingress_rule" "https" {
  security_group_id = aws_security_group.bare.id
  cidr_ipv4         = "10.2.0.0/16"
  from_port         = 443
  to_port           = 443
  ip_protocol       = "tcp"
}

resource "aws_vpc_security_group_egress_rule" "all" {
  security_group_id = aws_security_group.bare.id
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
}
"#;

/// A stack applied and checked at once: nothing changed outside, so `--strict
/// --fail-on-pending` exits 0. Terraform reads the role's `inline_policy` and the bare
/// group's `ingress` and `egress`, which the policy and rule resources filled after the
/// role and group were written to state, as changed outside; untagged resources read
/// `tags` back as `{}`; `default_tags` fill every `tags_all`. Then a rule added outside to
/// the bare group is drift again.
#[test]
fn a_fresh_stack_is_clean_under_strict() {
    let Some(engine) = Engine::get("a_fresh_stack_is_clean_under_strict") else {
        return;
    };
    let stack = Stack::new(&engine, "fresh", &[("main.tf", FRESH_TF)]);
    let provider = stack.read("provider.tf");
    let tagged = provider.replace(
        "  endpoints {",
        "  default_tags {\n    tags = { Env = \"test\", Owner = \"platform\" }\n  }\n\n  endpoints {",
    );
    assert_ne!(tagged, provider);
    stack.write("provider.tf", &tagged);
    stack.init_and_apply();
    let clean = stack.run(&["--strict", "--fail-on-pending"]);
    assert_eq!(clean.code, 0, "{}\n{}", clean.stdout, clean.stderr);
    assert_eq!(clean.stdout, "", "{}", clean.stderr);

    stack.out_of_band(
        r#"
ec2 = boto3.client("ec2", **kw)
sg = ec2.describe_security_groups(
    Filters=[{"Name": "group-name", "Values": [P + "-bare"]}])["SecurityGroups"][0]
ec2.authorize_security_group_ingress(GroupId=sg["GroupId"], IpPermissions=[
    {"IpProtocol": "tcp", "FromPort": 8080, "ToPort": 8080, "IpRanges": [{"CidrIp": "10.9.0.0/16"}]}])
"#,
    );
    let run = stack.run(&["--json", "--strict"]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let addresses: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["address"].as_str().unwrap())
        .collect();
    assert_eq!(addresses, ["aws_security_group.bare"], "{doc:#}");
}
