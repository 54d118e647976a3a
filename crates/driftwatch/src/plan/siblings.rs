//! Members another resource of the stack adds to a set: not drift.
//!
//! Some AWS resources have a computed set that other resources of the same stack fill:
//! `aws_iam_role`'s `inline_policy` holds the policy of every `aws_iam_role_policy` of the
//! role and `managed_policy_arns` every `aws_iam_role_policy_attachment`'s ARN;
//! `aws_security_group`'s `ingress` and `egress` hold every `aws_security_group_rule` and
//! `aws_vpc_security_group_ingress_rule`/`_egress_rule` of the group. The role or group
//! is created (and its state written) before those resources exist, so the first refresh
//! after a clean apply reads them as drift ("changed outside", which the next apply leaves
//! alone): `--strict` would fail on a stack nothing changed.
//!
//! A drifted set of this kind whose refreshed value only adds members (none removed or
//! changed), each of them exactly a member that the stack's own resources, read from the
//! plan's `prior_state` and `planned_values`, make, is made by the stack, and classify
//! leaves it out. A member added outside, one of these changed outside, or a member the
//! provider reads with any difference from what the stack's resources say (another
//! protocol spelling, rules of one group merged with one added outside) stays drift.
//! Only digests are kept, never values.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{Hash, Hasher};

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::flatten::{Path, Step};
use crate::mask::Hidden;

/// A drifted attribute whose refreshed value adds members to the last apply's, and
/// nothing else: the digests of the added members, as [`Claims`] keys them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub path: Path,
    pub members: Vec<u64>,
}

/// The attributes of a resource type that other resources fill.
fn filled_attributes(kind: &str) -> &'static [&'static str] {
    match kind {
        "aws_iam_role" => &["inline_policy", "managed_policy_arns"],
        "aws_security_group" => &["ingress", "egress"],
        _ => &[],
    }
}

/// Whether resources of this type fill another resource's attribute.
pub fn is_claimant(kind: &str) -> bool {
    matches!(
        kind,
        "aws_iam_role_policy"
            | "aws_iam_role_policy_attachment"
            | "aws_security_group_rule"
            | "aws_vpc_security_group_ingress_rule"
            | "aws_vpc_security_group_egress_rule"
    )
}

/// The value other resources name the resource by: a role's name, a group's id.
fn owner_of<'v>(kind: &str, values: &'v Map<String, Value>) -> Option<&'v str> {
    let key = match kind {
        "aws_iam_role" => "name",
        "aws_security_group" => "id",
        _ => return None,
    };
    values.get(key)?.as_str().filter(|s| !s.is_empty())
}

fn key(kind: &str, attribute: &str, owner: &str, member: &str) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    (kind, attribute, owner, member).hash(&mut hasher);
    hasher.finish()
}

/// The canonical texts of an array's members (see [`super::sets`]); empty members are
/// left out.
fn members(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::Array(items)) => items.iter().filter_map(super::sets::canonical).collect(),
        _ => Vec::new(),
    }
}

/// For a drifted resource of a type whose sets others fill: each such set whose refreshed
/// value adds members and removes none.
pub fn wanted(
    kind: Option<&str>,
    before: Option<&RawValue>,
    after: Option<&RawValue>,
) -> Result<Vec<Wanted>, serde_json::Error> {
    let Some(kind) = kind else {
        return Ok(Vec::new());
    };
    let attributes = filled_attributes(kind);
    let (Some(before), Some(after)) = (before, after) else {
        return Ok(Vec::new());
    };
    if attributes.is_empty() {
        return Ok(Vec::new());
    }
    let before: Value = serde_json::from_str(before.get())?;
    let after: Value = serde_json::from_str(after.get())?;
    let (Some(before), Some(after)) = (before.as_object(), after.as_object()) else {
        return Ok(Vec::new());
    };
    let Some(owner) = owner_of(kind, after).filter(|o| owner_of(kind, before) == Some(*o)) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for attribute in attributes {
        let mut left = members(before.get(*attribute));
        let mut added = Vec::new();
        for member in members(after.get(*attribute)) {
            match left.iter().position(|m| *m == member) {
                Some(at) => {
                    left.swap_remove(at);
                }
                None => added.push(key(kind, attribute, owner, &member)),
            }
        }
        if left.is_empty() && !added.is_empty() {
            out.push(Wanted {
                path: Path(vec![Step::Key((*attribute).to_owned())]),
                members: added,
            });
        }
    }
    Ok(out)
}

/// Whether any string or key in `value` is, or holds, a hidden string.
fn holds_hidden(value: &Value, hidden: &Hidden) -> bool {
    match value {
        Value::String(s) => hidden.holds_string(s),
        Value::Array(items) => items.iter().any(|v| holds_hidden(v, hidden)),
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| hidden.holds_string(k) || holds_hidden(v, hidden)),
        _ => false,
    }
}

/// A security group's rules that the provider reads as one member: same direction,
/// protocol, ports and description.
type RuleGroup = (String, String, String, String, String, String);

/// A group's `from_port`, `to_port` and sources (each tagged with the field it goes to:
/// 0 `cidr_blocks`, 1 `ipv6_cidr_blocks`, 2 `prefix_list_ids`, 3 `security_groups`, 4
/// `self`), gathered from its rules.
type RuleSources = (Value, Value, Vec<(u8, String)>);

/// The sources of one member of a group's `ingress` or `egress`.
#[derive(Default)]
struct Sources {
    cidr_blocks: BTreeSet<String>,
    ipv6_cidr_blocks: BTreeSet<String>,
    prefix_list_ids: BTreeSet<String>,
    security_groups: BTreeSet<String>,
    own_group: bool,
}

/// The members the stack's own resources add to other resources' sets. Read only from
/// resources whose markers hide nothing and whose values hold no string marked anywhere
/// in the plan (known once the whole plan is read: until then they wait in
/// `candidates`); never part of the plan.
#[derive(Default)]
pub struct Claims {
    candidates: Vec<(String, Value)>,
    keys: HashSet<u64>,
    rules: BTreeMap<RuleGroup, RuleSources>,
}

impl Claims {
    /// Keep a claimant resource (by [`is_claimant`]) whose markers hide nothing, until
    /// [`Claims::settle`].
    pub fn consider(&mut self, kind: String, values: Value) {
        self.candidates.push((kind, values));
    }

    /// Take what each kept resource makes, but for one whose values hold a hidden string
    /// (a copy of a secret: an `aws_iam_role_policy` built from a queue's `arn` that holds
    /// a sensitive name): driftwatch decides nothing from a secret's value, and the drift
    /// it would explain stays, withheld.
    pub fn settle(&mut self, hidden: &Hidden) {
        for (kind, values) in std::mem::take(&mut self.candidates) {
            if !holds_hidden(&values, hidden) {
                self.add(&kind, &values);
            }
        }
    }

    /// Add what a claimant resource makes, from its values.
    fn add(&mut self, kind: &str, values: &Value) {
        let Some(values) = values.as_object() else {
            return;
        };
        let text = |key: &str| values.get(key).and_then(Value::as_str).unwrap_or_default();
        match kind {
            "aws_iam_role_policy" if !text("role").is_empty() => {
                let member = serde_json::json!({"name": text("name"), "policy": text("policy")});
                if let Some(member) = super::sets::canonical(&member) {
                    self.keys
                        .insert(key("aws_iam_role", "inline_policy", text("role"), &member));
                }
            }
            "aws_iam_role_policy_attachment" if !text("role").is_empty() => {
                let member = Value::from(text("policy_arn"));
                if let Some(member) = super::sets::canonical(&member) {
                    self.keys.insert(key(
                        "aws_iam_role",
                        "managed_policy_arns",
                        text("role"),
                        &member,
                    ));
                }
            }
            "aws_security_group_rule" => {
                let mut sources = Vec::new();
                for (tag, field) in [
                    (0, "cidr_blocks"),
                    (1, "ipv6_cidr_blocks"),
                    (2, "prefix_list_ids"),
                ] {
                    for item in values
                        .get(field)
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(s) = item.as_str() {
                            sources.push((tag, s.to_owned()));
                        }
                    }
                }
                if !text("source_security_group_id").is_empty() {
                    sources.push((3, text("source_security_group_id").to_owned()));
                }
                if values.get("self") == Some(&Value::Bool(true)) {
                    sources.push((4, String::new()));
                }
                self.rule(
                    text("type"),
                    text("security_group_id"),
                    values,
                    "protocol",
                    sources,
                );
            }
            "aws_vpc_security_group_ingress_rule" | "aws_vpc_security_group_egress_rule" => {
                let direction = if kind.ends_with("_ingress_rule") {
                    "ingress"
                } else {
                    "egress"
                };
                let owner = text("security_group_id");
                let mut sources = Vec::new();
                for (tag, field) in [(0, "cidr_ipv4"), (1, "cidr_ipv6"), (2, "prefix_list_id")] {
                    if !text(field).is_empty() {
                        sources.push((tag, text(field).to_owned()));
                    }
                }
                match text("referenced_security_group_id") {
                    "" => {}
                    group if group == owner => sources.push((4, String::new())),
                    group => sources.push((3, group.to_owned())),
                }
                self.rule(direction, owner, values, "ip_protocol", sources);
            }
            _ => {}
        }
    }

    /// One rule of a security group, merged with the others the provider reads as the
    /// same member.
    fn rule(
        &mut self,
        direction: &str,
        owner: &str,
        values: &Map<String, Value>,
        protocol: &str,
        sources: Vec<(u8, String)>,
    ) {
        if !matches!(direction, "ingress" | "egress") || owner.is_empty() || sources.is_empty() {
            return;
        }
        let protocol = values
            .get(protocol)
            .and_then(Value::as_str)
            .unwrap_or_default();
        // An `aws_vpc_security_group_*_rule` of all protocols has no ports; the group
        // reads them as 0.
        let port = |key: &str| match values.get(key) {
            Some(Value::Null) | None if protocol == "-1" => Value::from(0),
            Some(v) => v.clone(),
            None => Value::Null,
        };
        let (from, to) = (port("from_port"), port("to_port"));
        let description = values
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let group = (
            direction.to_owned(),
            owner.to_owned(),
            protocol.to_owned(),
            from.to_string(),
            to.to_string(),
            description.to_owned(),
        );
        self.rules
            .entry(group)
            .or_insert_with(|| (from, to, Vec::new()))
            .2
            .extend(sources);
    }

    /// Whether the stack's resources make every member `wanted` lists.
    pub fn make_all(&mut self, wanted: &Wanted) -> bool {
        if !self.rules.is_empty() {
            self.merge_rules();
        }
        wanted.members.iter().all(|m| self.keys.contains(m))
    }

    /// Turn the security group rules read so far into members' digests.
    fn merge_rules(&mut self) {
        for ((direction, owner, protocol, _, _, description), (from, to, sources)) in
            std::mem::take(&mut self.rules)
        {
            let mut merged = Sources::default();
            for (tag, source) in sources {
                match tag {
                    0 => merged.cidr_blocks.insert(source),
                    1 => merged.ipv6_cidr_blocks.insert(source),
                    2 => merged.prefix_list_ids.insert(source),
                    3 => merged.security_groups.insert(source),
                    _ => {
                        merged.own_group = true;
                        true
                    }
                };
            }
            let member = serde_json::json!({
                "cidr_blocks": merged.cidr_blocks,
                "description": description,
                "from_port": from,
                "ipv6_cidr_blocks": merged.ipv6_cidr_blocks,
                "prefix_list_ids": merged.prefix_list_ids,
                "protocol": protocol,
                "security_groups": merged.security_groups,
                "self": merged.own_group,
                "to_port": to,
            });
            if let Some(member) = super::sets::canonical(&member) {
                self.keys
                    .insert(key("aws_security_group", &direction, &owner, &member));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(value: Value) -> Box<RawValue> {
        RawValue::from_string(value.to_string()).unwrap()
    }

    fn rule(cidrs: &[&str], port: u16) -> Value {
        json!({"cidr_blocks": cidrs, "description": "", "from_port": port,
               "ipv6_cidr_blocks": [], "prefix_list_ids": [], "protocol": "tcp",
               "security_groups": [], "self": false, "to_port": port})
    }

    fn group_wants(ingress: Vec<Value>) -> Vec<Wanted> {
        let before = raw(json!({"id": "sg-1", "ingress": [rule(&["10.0.0.0/8"], 80)]}));
        let after = raw(json!({"id": "sg-1", "ingress": ingress}));
        wanted(Some("aws_security_group"), Some(&before), Some(&after)).unwrap()
    }

    fn vpc_rule(cidr: &str, port: u16) -> Value {
        json!({"security_group_id": "sg-1", "cidr_ipv4": cidr, "from_port": port,
               "to_port": port, "ip_protocol": "tcp", "description": null})
    }

    #[test]
    fn rules_the_provider_reads_as_one_member_make_it_and_nothing_else() {
        let mut claims = Claims::default();
        claims.add(
            "aws_vpc_security_group_ingress_rule",
            &vpc_rule("10.1.0.0/16", 443),
        );
        claims.add(
            "aws_vpc_security_group_ingress_rule",
            &vpc_rule("10.2.0.0/16", 443),
        );
        // Another group's rule makes nothing in this one.
        let mut other = vpc_rule("10.3.0.0/16", 22);
        other["security_group_id"] = json!("sg-2");
        claims.add("aws_vpc_security_group_ingress_rule", &other);

        let kept = rule(&["10.0.0.0/8"], 80);
        let made = group_wants(vec![
            kept.clone(),
            rule(&["10.2.0.0/16", "10.1.0.0/16"], 443),
        ]);
        assert_eq!(made.len(), 1);
        assert!(claims.make_all(&made[0]));
        // A cidr added outside to the same member, a rule of the other group, a member
        // the stack does not make: drift.
        for ingress in [
            vec![
                kept.clone(),
                rule(&["10.1.0.0/16", "10.2.0.0/16", "10.9.0.0/16"], 443),
            ],
            vec![kept.clone(), rule(&["10.3.0.0/16"], 22)],
            vec![
                kept.clone(),
                rule(&["10.1.0.0/16", "10.2.0.0/16"], 443),
                rule(&["0.0.0.0/0"], 22),
            ],
        ] {
            let wanted = group_wants(ingress);
            assert_eq!(wanted.len(), 1);
            assert!(!claims.make_all(&wanted[0]));
        }
        // A member of the last apply removed or changed: never made by others.
        assert!(group_wants(vec![rule(&["10.0.0.0/8"], 81)]).is_empty());
        assert!(group_wants(vec![]).is_empty());
    }

    #[test]
    fn a_role_policy_makes_its_own_member_only() {
        let mut claims = Claims::default();
        claims.add(
            "aws_iam_role_policy",
            &json!({"role": "app", "name": "inline", "policy": "{\"a\":1}"}),
        );
        let want = |name: &str, policy: &str| {
            let before = raw(json!({"name": "app", "inline_policy": []}));
            let after = raw(json!({"name": "app",
                "inline_policy": [{"name": name, "policy": policy}]}));
            wanted(Some("aws_iam_role"), Some(&before), Some(&after)).unwrap()
        };
        assert!(claims.make_all(&want("inline", "{\"a\":1}")[0]));
        assert!(!claims.make_all(&want("inline", "{\"a\":2}")[0]));
        assert!(!claims.make_all(&want("outside", "{\"a\":1}")[0]));
        // Only the types whose sets others fill.
        assert!(
            wanted(
                Some("aws_sqs_queue"),
                Some(&raw(json!({"name": "q"}))),
                Some(&raw(json!({"name": "q", "x": [1]})))
            )
            .unwrap()
            .is_empty()
        );
    }
}
