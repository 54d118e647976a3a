//! Lists compared as sets, to tell an apply that puts a set back from one that changes it.
//!
//! Plan JSON writes a set (`ingress` of `aws_security_group`, `inline_policy` of
//! `aws_iam_role`) as an array in the engine's own order, and says nothing of which arrays
//! are sets: that is in the provider schema, which a plan file does not carry. Leaf paths
//! are positions, so a member added outside moves the members after it, and the next
//! apply's removal of that member reads, position by position, as changes to other
//! members: not as the revert it is.
//!
//! So for every array whose text differs between the two sides of a change, at any depth,
//! a digest of each side is kept that no order changes: each member is reduced to a
//! canonical text, the texts are sorted, and the sorted list is hashed. An apply whose
//! array hashes as the last apply's did puts it back, whatever the positions say. This
//! holds for a list too (a list put back in its old order is the old multiset), so no
//! schema is needed; what it cannot tell apart is a list the configuration only reordered
//! since the last apply, which is then taken for the revert of drift at the same path.
//!
//! The canonical form drops members that are `null`, `""`, `[]` or `{}`: providers built
//! on the plugin SDK store an unset string as `""` and plan it as `null` (an
//! `aws_security_group` rule's `description`), which is the same rule to the provider.
//! `0` and `false` are kept. Only digests are kept, never values.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use serde_json::Value;
use serde_json::value::RawValue;

use crate::flatten::{Path, Step};

/// The two sides of one array that differs, each hashed as a set of members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayDigest {
    pub path: Path,
    pub before: u64,
    pub after: u64,
}

/// Every array (or array on one side, absent or `null` on the other) whose text differs
/// between `before` and `after`, with both sides' digests, in path order. Objects are
/// followed key by key and arrays position by position, to find the arrays inside them.
pub fn array_digests(
    before: Option<&RawValue>,
    after: Option<&RawValue>,
) -> Result<Vec<ArrayDigest>, serde_json::Error> {
    let mut out = Vec::new();
    walk(before, after, &mut Vec::new(), &mut out)?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn first_byte(raw: &RawValue) -> u8 {
    raw.get().trim_start().bytes().next().unwrap_or(b'n')
}

fn walk(
    before: Option<&RawValue>,
    after: Option<&RawValue>,
    prefix: &mut Vec<Step>,
    out: &mut Vec<ArrayDigest>,
) -> Result<(), serde_json::Error> {
    let before = before.filter(|r| first_byte(r) != b'n');
    let after = after.filter(|r| first_byte(r) != b'n');
    let shape = |r: Option<&RawValue>| r.map(first_byte);
    match (shape(before), shape(after)) {
        (None, None) => Ok(()),
        _ if before.map(RawValue::get) == after.map(RawValue::get) => Ok(()),
        (Some(b'['), None | Some(b'[')) | (None, Some(b'[')) => {
            out.push(ArrayDigest {
                path: Path(prefix.clone()),
                before: digest(before)?,
                after: digest(after)?,
            });
            let a: Vec<&RawValue> = before.map(parse).transpose()?.unwrap_or_default();
            let b: Vec<&RawValue> = after.map(parse).transpose()?.unwrap_or_default();
            for i in 0..a.len().max(b.len()) {
                prefix.push(Step::Index(i as u64));
                walk(a.get(i).copied(), b.get(i).copied(), prefix, out)?;
                prefix.pop();
            }
            Ok(())
        }
        (Some(b'{'), None | Some(b'{')) | (None, Some(b'{')) => {
            let a: BTreeMap<String, &RawValue> = before.map(parse).transpose()?.unwrap_or_default();
            let b: BTreeMap<String, &RawValue> = after.map(parse).transpose()?.unwrap_or_default();
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort_unstable();
            keys.dedup();
            for key in keys {
                prefix.push(Step::Key(key.clone()));
                walk(a.get(key).copied(), b.get(key).copied(), prefix, out)?;
                prefix.pop();
            }
            Ok(())
        }
        // A leaf, or different shapes: no array to compare below it.
        _ => Ok(()),
    }
}

fn parse<'a, T: serde::Deserialize<'a>>(raw: &'a RawValue) -> Result<T, serde_json::Error> {
    serde_json::from_str(raw.get())
}

/// The order-free digest of one side (absent, `null` and `[]` are the same).
fn digest(raw: Option<&RawValue>) -> Result<u64, serde_json::Error> {
    let value: Value = raw.map(parse).transpose()?.unwrap_or(Value::Null);
    let mut hasher = std::hash::DefaultHasher::new();
    canonical(&value).unwrap_or_default().hash(&mut hasher);
    Ok(hasher.finish())
}

/// A text for `value` that does not depend on the order of any array in it, nor on the
/// order of object keys; `None` for `null`, `""` and (once reduced) `[]` and `{}`.
pub(super) fn canonical(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(items) => {
            let mut texts: Vec<String> = items
                .iter()
                .map(|v| canonical(v).unwrap_or_else(|| "null".to_owned()))
                .collect();
            if texts.is_empty() {
                return None;
            }
            texts.sort_unstable();
            Some(format!("[{}]", texts.join(",")))
        }
        Value::Object(map) => {
            let members: BTreeMap<&String, String> = map
                .iter()
                .filter_map(|(k, v)| canonical(v).map(|text| (k, text)))
                .collect();
            if members.is_empty() {
                return None;
            }
            let members: Vec<String> = members
                .into_iter()
                .map(|(k, text)| format!("{}:{text}", Value::from(k.as_str())))
                .collect();
            Some(format!("{{{}}}", members.join(",")))
        }
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digests(before: &str, after: &str) -> Vec<ArrayDigest> {
        let before: Box<RawValue> = serde_json::from_str(before).unwrap();
        let after: Box<RawValue> = serde_json::from_str(after).unwrap();
        array_digests(Some(&before), Some(&after)).unwrap()
    }

    fn rule(port: u16, description: &str) -> String {
        format!(
            r#"{{"cidr_blocks":["10.0.0.0/8"],"description":{description},"from_port":{port},"ipv6_cidr_blocks":[],"protocol":"tcp","self":false,"to_port":{port}}}"#
        )
    }

    /// The walkthrough's security group: the last apply's two rules, a third added
    /// outside (sorted first), and the next apply's two rules with `description` planned
    /// as null. The apply's side hashes as the last apply's; the refreshed one does not.
    #[test]
    fn a_set_put_back_hashes_as_before_whatever_the_positions() {
        let applied = format!(
            "{{\"ingress\":[{},{}]}}",
            rule(443, "\"\""),
            rule(80, "\"\"")
        );
        let refreshed = format!(
            "{{\"ingress\":[{},{},{}]}}",
            rule(22, "\"\""),
            rule(443, "\"\""),
            rule(80, "\"\"")
        );
        let planned = format!(
            "{{\"ingress\":[{},{}]}}",
            rule(80, "null"),
            rule(443, "null")
        );
        let drift = digests(&applied, &refreshed);
        let next = digests(&refreshed, &planned);
        let root = |d: &[ArrayDigest]| d.iter().find(|a| a.path.is_empty()).cloned();
        assert!(root(&drift).is_none(), "the resource is an object");
        let ingress = Path::parse("ingress").unwrap();
        let drift = drift.iter().find(|a| a.path == ingress).unwrap();
        let next = next.iter().find(|a| a.path == ingress).unwrap();
        assert_ne!(drift.before, drift.after);
        assert_eq!(next.before, drift.after);
        assert_eq!(next.after, drift.before);
        // A rule the apply sets to a new port is not the last apply's set.
        let changed = format!(
            "{{\"ingress\":[{},{}]}}",
            rule(8443, "null"),
            rule(80, "null")
        );
        let changed = digests(&refreshed, &changed);
        let changed = changed.iter().find(|a| a.path == ingress).unwrap();
        assert_ne!(changed.after, drift.before);
    }

    #[test]
    fn only_arrays_that_differ_are_kept_nested_ones_too() {
        let found = digests(
            r#"{"a":[1,2],"b":{"c":[{"d":["x"]}]},"e":"same","f":[]}"#,
            r#"{"a":[1,2],"b":{"c":[{"d":["y"]}]},"e":"other","f":null}"#,
        );
        let paths: Vec<String> = found.iter().map(|a| a.path.to_string()).collect();
        // `[]` against `null` is listed, with the same digest on both sides.
        assert_eq!(paths, ["b.c", "b.c[0].d", "f"]);
        assert_eq!(found[2].before, found[2].after);
        // An array against absent, and 0 and false kept apart from null.
        let found = digests(r#"{"g":[0]}"#, r#"{"g":[false]}"#);
        assert_eq!(found.len(), 1);
        assert_ne!(found[0].before, found[0].after);
        let found = digests(r#"{"g":[]}"#, r#"{"h":[{"k":""}]}"#);
        let paths: Vec<String> = found.iter().map(|a| a.path.to_string()).collect();
        assert_eq!(paths, ["g", "h"]);
        assert_eq!(found[0].before, found[0].after, "[] against absent");
        assert_ne!(
            found[1].after, found[1].before,
            "a member of empty values is a member"
        );
    }
}
