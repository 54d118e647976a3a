//! Sets compared as sets: real `terraform show -json` plans (terraform 1.11.4,
//! hashicorp/aws 5.100.0, moto) of a security group with two ingress rules, and a third
//! rule added outside with the AWS API. Plan JSON writes `ingress` (a set) by position, the
//! added rule sorts first, and the normal plan's removal of it moves every other member.

use crate::support::{driftwatch, finding, fixture, outcome, report};

const SG: &str = "aws_security_group.web";

fn json(cmd: &mut assert_cmd::Command) -> serde_json::Value {
    let out = outcome(cmd.arg("--json"));
    assert_eq!(out.code, 2, "{}", out.stderr);
    serde_json::from_str(&out.stdout).expect("a JSON report")
}

/// The normal plan removes the rule added outside and plans the other two with
/// `description` null (stored as ""): that is the last apply's set, so the update is the
/// revert of the drift, and nothing of it is an unapplied change. Before sets were
/// compared as sets, `ingress[0].description` and `ingress[1].description` were listed as
/// an unapplied update.
#[test]
fn a_rule_added_outside_is_reverted_not_an_unapplied_change() {
    let doc = json(&mut report("set-member"));
    let sg = finding(&doc, SG);
    assert_eq!(sg["category"], "changed_outside", "{doc:#}");
    assert_eq!(sg["consequence"], "the next apply reverts it", "{doc:#}");
    let pending = doc["pending"].as_array().expect("pending");
    assert!(
        pending.iter().all(|p| p["address"] != SG),
        "the revert is listed as an unapplied change: {doc:#}"
    );
    assert_eq!(doc["summary"]["pending"], 0, "{doc:#}");
}

/// The same drift, with the configuration's port 80 rule edited to 8080: the apply's set
/// is not the last apply's, so the drift is overwritten from the configuration and the
/// update is pending.
#[test]
fn a_rule_added_outside_beside_an_edited_rule_leaves_the_edit_pending() {
    let doc = json(
        driftwatch()
            .arg("report")
            .arg("--refresh-plan")
            .arg(fixture("set-member/refresh_only.json"))
            .arg("--plan")
            .arg(fixture("set-member/plan_edited.json")),
    );
    let sg = finding(&doc, SG);
    assert_eq!(sg["category"], "changed_outside", "{doc:#}");
    assert_eq!(
        sg["consequence"],
        "the next apply sets a new value from the configuration, not the last apply's",
        "{doc:#}"
    );
    let pending = doc["pending"].as_array().expect("pending");
    assert!(
        pending
            .iter()
            .any(|p| p["address"] == SG && p["action"] == "update"),
        "{doc:#}"
    );
}

/// A stack applied once and read again at once (`made-by-stack`: real plans of its
/// `main.tf`, terraform 1.11.4, hashicorp/aws 5.100.0, moto; queues, roles, a VPC, a
/// parameter, a bucket, tags and `default_tags`). The role's `inline_policy` holds the
/// policy its `aws_iam_role_policy` put there, and the bare security group's `ingress`
/// and `egress` the rules of an `aws_security_group_rule`, an
/// `aws_vpc_security_group_ingress_rule` and an `_egress_rule`: all made after the role
/// and the group were written to state, so terraform reads them as changed outside.
/// Nothing changed outside: `--strict --fail-on-pending` is clean. Then a policy and a
/// rule added outside with the AWS API (`made-by-stack-outside`): both sets are drift
/// again, the stack's own members listed with them.
#[test]
fn members_the_stack_itself_adds_to_a_set_are_not_drift() {
    let clean = outcome(report("made-by-stack").args(["--json", "--strict", "--fail-on-pending"]));
    assert_eq!(clean.code, 0, "{}\n{}", clean.stdout, clean.stderr);
    let doc: serde_json::Value = serde_json::from_str(&clean.stdout).unwrap();
    assert_eq!(doc["findings"], serde_json::json!([]), "{doc:#}");
    assert_eq!(doc["pending"], serde_json::json!([]), "{doc:#}");

    let outside = outcome(report("made-by-stack-outside").args(["--json", "--strict"]));
    assert_eq!(outside.code, 2, "{}", outside.stderr);
    let doc: serde_json::Value = serde_json::from_str(&outside.stdout).unwrap();
    let addresses: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["address"].as_str().unwrap())
        .collect();
    assert_eq!(
        addresses,
        ["aws_iam_role.app", "aws_security_group.bare"],
        "{doc:#}"
    );
    let paths = |address: &str| -> Vec<String> {
        finding(&doc, address)["paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_owned())
            .collect()
    };
    assert!(
        paths("aws_iam_role.app")
            .iter()
            .all(|p| p.starts_with("inline_policy")),
        "{doc:#}"
    );
    // The rule added outside and the stack's two: three members where state had none.
    let ingress = paths("aws_security_group.bare");
    assert!(ingress.iter().all(|p| p.starts_with("ingress[")), "{doc:#}");
    assert!(
        ingress.iter().any(|p| p.starts_with("ingress[2].")),
        "{doc:#}"
    );
    assert_eq!(doc["pending"], serde_json::json!([]), "{doc:#}");
}
