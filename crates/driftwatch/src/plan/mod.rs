//! The plan as driftwatch sees it, after parsing.
//!
//! [`parse`] reads `tofu show -json` output into the types below. They hold what the
//! classifier needs and nothing else: addresses, actions, `replace_paths`, and for drift the
//! attribute differences with secrets already removed. Values that were marked sensitive or
//! have secret-looking names never reach these types.

pub mod parse;
mod raw;
mod sets;
mod siblings;
mod stream;
mod structural;

use serde_json::Value;

use crate::flatten::Path;

pub use parse::{PlanError, PlanRole, check_refreshed, parse_plan, parse_reader, read_plan_file};
pub use sets::ArrayDigest;

/// What a `resource_changes` or `resource_drift` entry says will happen (or happened).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    NoOp,
    Create,
    Read,
    Update,
    Delete,
    /// `["delete","create"]` or `["create","delete"]`: destroy and recreate.
    Replace,
    /// `["forget"]` and the forget+create combinations (a `removed` block).
    Forget,
    /// A combination this version does not know; reported, never guessed at.
    Other(String),
}

impl Action {
    pub fn from_actions<S: AsRef<str>>(actions: &[S]) -> Action {
        let has = |name: &str| actions.iter().any(|a| a.as_ref() == name);
        match actions {
            [one] => match one.as_ref() {
                "no-op" => Action::NoOp,
                "create" => Action::Create,
                "read" => Action::Read,
                "update" => Action::Update,
                "delete" => Action::Delete,
                "forget" => Action::Forget,
                other => Action::Other(other.to_owned()),
            },
            _ if has("delete") && has("create") => Action::Replace,
            _ if has("forget") => Action::Forget,
            _ => Action::Other(
                actions
                    .iter()
                    .map(|a| a.as_ref())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        }
    }

    /// The word used in reports and JSON.
    pub fn as_str(&self) -> &str {
        match self {
            Action::NoOp => "no-op",
            Action::Create => "create",
            Action::Read => "read",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Replace => "replace",
            Action::Forget => "forget",
            Action::Other(s) => s,
        }
    }
}

/// The value of one leaf (`null`, a bool, a number or a string), as the plan wrote it.
///
/// OpenTofu's numbers (cty) have arbitrary precision and are written with every digit.
/// A number that `serde_json` would not give back as written (beyond `u64`/`i64`, more
/// digits than `f64` holds, or out of its range) is kept as its text, so that it is
/// compared, shown and written back (codify) exactly.
#[derive(Debug, Clone, PartialEq)]
pub enum Leaf {
    Value(Value),
    /// A JSON number's text that no `Value` holds exactly.
    Number(String),
}

impl Leaf {
    pub fn null() -> Leaf {
        Leaf::Value(Value::Null)
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Leaf::Value(Value::Null))
    }

    /// The value as JSON text: strings quoted, numbers with the digits the plan wrote.
    pub fn json(&self) -> String {
        match self {
            Leaf::Value(v) => serde_json::to_string(v).unwrap_or_else(|_| "?".to_owned()),
            Leaf::Number(text) => text.clone(),
        }
    }

    /// A scalar from its JSON text (a number, string, bool or null); objects and arrays
    /// are parsed as values.
    pub fn parse(text: &str) -> Result<Leaf, serde_json::Error> {
        let text = text.trim();
        if text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
            // Rounded, or out of f64's range: the text is the value. (It is JSON: the
            // scanner has checked its syntax.) Not `v == text`: a Value equals a &str
            // when it is that string.
            let exact = serde_json::from_str::<Value>(text)
                .ok()
                .filter(|v| matches!(v, Value::Number(n) if format!("{n}") == text));
            return Ok(exact.map_or_else(|| Leaf::Number(text.to_owned()), Leaf::Value));
        }
        serde_json::from_str(text).map(Leaf::Value)
    }

    /// Whether two leaves are the same value. A number kept as text equals another
    /// number with the same decimal value however it is spelled (`1e3`, `1000`).
    pub fn same(&self, other: &Leaf) -> bool {
        match (self, other) {
            (Leaf::Value(a), Leaf::Value(b)) => a == b,
            (Leaf::Number(a), Leaf::Number(b)) => {
                a == b || (decimal(a).is_some() && decimal(a) == decimal(b))
            }
            (Leaf::Number(t), Leaf::Value(Value::Number(n)))
            | (Leaf::Value(Value::Number(n)), Leaf::Number(t)) => {
                decimal(t).is_some() && decimal(t) == decimal(&n.to_string())
            }
            _ => false,
        }
    }
}

impl From<Value> for Leaf {
    fn from(v: Value) -> Leaf {
        Leaf::Value(v)
    }
}

/// A JSON number's exact decimal value: (negative, significant digits without leading or
/// trailing zeros, exponent of the last digit). Zero is `(false, "", 0)`.
fn decimal(text: &str) -> Option<(bool, String, i64)> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = format!("{int}{frac}");
    let mut exponent = exponent.checked_sub(i64::try_from(frac.len()).ok()?)?;
    let digits = digits.trim_start_matches('0');
    let trimmed = digits.trim_end_matches('0');
    exponent = exponent.checked_add(i64::try_from(digits.len() - trimmed.len()).ok()?)?;
    if trimmed.is_empty() {
        return Some((false, String::new(), 0));
    }
    Some((negative, trimmed.to_owned(), exponent))
}

/// One changed leaf. `before`/`after` are `None` when the leaf is secret, and `null` when
/// the leaf is absent on that side.
#[derive(Debug, Clone, PartialEq)]
pub struct LeafDiff {
    pub path: Path,
    pub before: Option<Leaf>,
    pub after: Option<Leaf>,
    pub sensitive: bool,
    /// The side written `null` has no such key or element at all (a map key added or
    /// removed: a tag holding `""`), rather than the key with an explicit `null`; set only
    /// for a leaf that is `""` on the other side. Such a leaf is a change, not a different
    /// way of writing an absent value.
    pub missing: bool,
}

/// A managed resource instance that changed outside OpenTofu (`resource_drift`).
#[derive(Debug, Clone, PartialEq)]
pub struct DriftEntry {
    pub address: String,
    pub previous_address: Option<String>,
    pub action: Action,
    /// Empty for deletes; for updates, every leaf whose value differs.
    pub diffs: Vec<LeafDiff>,
    /// For updates read with values, every array that differs, each side hashed as a set
    /// (see [`ArrayDigest`]): the last apply's value and the refreshed one.
    pub arrays: Vec<ArrayDigest>,
    /// Sets whose refreshed value only adds members that other resources of the plan make
    /// (an `aws_iam_role_policy`'s policy in its role's `inline_policy`): not drift (see
    /// `plan::siblings`).
    pub made_by_others: Vec<Path>,
    /// While parsing: the sets that only add members, and the digests of those members.
    pub(crate) wanted: Vec<siblings::Wanted>,
}

/// What the plan will do to one managed resource instance (`resource_changes`).
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeEntry {
    pub address: String,
    pub previous_address: Option<String>,
    pub action: Action,
    pub action_reason: Option<String>,
    /// Set when the entry is about a deposed object left by `create_before_destroy`.
    pub deposed: bool,
    /// An `import` block adopts this object.
    pub importing: bool,
    pub replace_paths: Vec<Path>,
    /// Paths whose value changes (updates and replaces only; values are not kept).
    pub changed_paths: Vec<Path>,
    /// Paths whose value is known only after apply (`after_unknown`; updates and replaces
    /// only). They are left out of `changed_paths`, but the apply does set them.
    pub unknown_paths: Vec<Path>,
    /// For each changed leaf that may be shown (not below a value marked sensitive), a
    /// digest of the value the apply sets there, so that the classifier can tell an apply
    /// that sets a drifted attribute back to the last apply's value from one that sets a
    /// new value from the configuration, without keeping the value.
    pub changed_to: Vec<(Path, u64)>,
    /// Updates and replaces: every array that differs, each side hashed as a set (see
    /// [`ArrayDigest`]), so that an apply that puts a set back as the last apply left it is
    /// told from one that changes it, whatever positions its members have.
    pub arrays: Vec<ArrayDigest>,
}

/// The digest of a leaf's value kept in [`ChangeEntry::changed_to`] (`None`: absent or
/// null).
pub fn leaf_digest(leaf: Option<&Leaf>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    match leaf {
        None => "null".hash(&mut hasher),
        Some(leaf) => leaf.json().hash(&mut hasher),
    }
    hasher.finish()
}

/// A parsed plan: only managed resources, secrets removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The file name or label used in messages.
    pub source: String,
    /// Which of the two plans it was read as.
    pub role: PlanRole,
    pub format_version: String,
    /// Terraform's `complete: false` (a partial plan by design).
    pub incomplete: bool,
    pub drift: Vec<DriftEntry>,
    pub changes: Vec<ChangeEntry>,
    /// Data sources and ephemeral resources found in `resource_drift` and skipped.
    pub skipped_drift: usize,
    /// No-op `resource_changes` entries of a document read as the refresh-only plan (real
    /// refresh-only plans have none); counted, not kept.
    pub listed_no_ops: usize,
    /// Checkable objects whose status is `fail` or `error` (addresses only).
    pub failed_checks: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(text: &str) -> Leaf {
        Leaf::parse(text).unwrap()
    }

    #[test]
    fn numbers_keep_the_digits_no_value_holds() {
        assert_eq!(leaf("42"), Leaf::Value(Value::from(42)));
        assert_eq!(leaf("-7"), Leaf::Value(Value::from(-7)));
        assert_eq!(leaf("0.1"), Leaf::Value(Value::from(0.1)));
        assert_eq!(leaf("\"x\""), Leaf::Value(Value::from("x")));
        for text in [
            "18446744073709551616",
            "9007199254740993.5",
            "0.1000000000000000055511151231257827",
            "1e400",
            "-1e-400",
        ] {
            assert_eq!(leaf(text), Leaf::Number(text.to_owned()));
            assert_eq!(leaf(text).json(), text);
        }
        // The same decimal value, however it is spelled.
        assert!(leaf("1e21").same(&leaf("1000000000000000000000")));
        assert!(leaf("1180591620717411303424").same(&leaf("1.180591620717411303424e21")));
        assert!(!leaf("1180591620717411303424").same(&leaf("1180591620717411303425")));
        assert!(!leaf("18446744073709551616").same(&leaf("-18446744073709551616")));
        assert!(leaf("1e400").same(&leaf("10e399")));
        assert!(!leaf("1e400").same(&leaf("\"1e400\"")));
        assert!(leaf("-0.0e500").same(&leaf("0")));
        // An exponent beyond i64 has no decimal value here, but equals its own spelling.
        assert!(leaf("1e99999999999999999999").same(&leaf("1e99999999999999999999")));
    }
}
