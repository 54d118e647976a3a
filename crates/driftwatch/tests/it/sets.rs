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
