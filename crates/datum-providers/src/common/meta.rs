//! Owner, group and mode: declared, observed, compared and resolved.
//!
//! Observed owners are written the way the declaration spells them whenever
//! they are the same account (`0` stays `0`, `root` stays `root`), so the
//! pure diff can compare text; otherwise as the account's name, or its number
//! when it has none. Only declared fields are compared: an undeclared owner is
//! not managed. Unknown users are an apply-time error, not an observe-time
//! one, so `datum plan` can still show what would change when a package that
//! creates the user comes first in the same pass.

use std::collections::BTreeMap;

use datum_core::{DeclaredFields, FieldChange, FileMeta, Observed};
use datum_host::{Host, HostError};
use serde_json::Value;

use super::fields::{format_mode, parse_account, parse_mode};
use super::text_change;

/// The ownership and mode a resource declares (each optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaDesired {
    pub owner: Option<String>,
    pub group: Option<String>,
    pub mode: Option<u32>,
}

impl MetaDesired {
    /// Reads `owner`, `group` and `mode`; the error names the bad field.
    pub fn parse(desired: &dyn DeclaredFields) -> Result<Self, (String, String)> {
        let account = |field: &str| -> Result<Option<String>, (String, String)> {
            desired
                .get(field)
                .map(|v| parse_account(field, v))
                .transpose()
                .map_err(|m| (field.to_owned(), m))
        };
        Ok(MetaDesired {
            owner: account("owner")?,
            group: account("group")?,
            mode: desired
                .get("mode")
                .map(parse_mode)
                .transpose()
                .map_err(|m| ("mode".to_owned(), m))?,
        })
    }

    /// The declared owner and group as numbers. Unknown names fail here, with
    /// the account file named.
    pub fn resolve(&self, host: &Host) -> Result<(Option<u32>, Option<u32>), HostError> {
        let uid = self
            .owner
            .as_deref()
            .map(|o| host.lookup_user(o))
            .transpose()?;
        let gid = self
            .group
            .as_deref()
            .map(|g| host.lookup_group(g))
            .transpose()?;
        Ok((uid, gid))
    }
}

/// How an observed account is written: as declared when it is that account,
/// else its name, else its number.
fn spell(
    declared: Option<&str>,
    id: u32,
    lookup: impl Fn(&str) -> Option<u32>,
    name: Option<String>,
) -> String {
    if let Some(declared) = declared
        && lookup(declared) == Some(id)
    {
        return declared.to_owned();
    }
    name.unwrap_or_else(|| id.to_string())
}

/// Adds `owner`, `group` and `mode` as observed on `meta`.
pub fn observe_meta(
    host: &Host,
    meta: &FileMeta,
    desired: &MetaDesired,
    fields: &mut BTreeMap<String, Value>,
) {
    let owner = spell(
        desired.owner.as_deref(),
        meta.uid,
        |n| host.lookup_user(n).ok(),
        host.user_name(meta.uid),
    );
    let group = spell(
        desired.group.as_deref(),
        meta.gid,
        |n| host.lookup_group(n).ok(),
        host.group_name(meta.gid),
    );
    fields.insert("owner".to_owned(), Value::String(owner));
    fields.insert("group".to_owned(), Value::String(group));
    fields.insert("mode".to_owned(), Value::String(format_mode(meta.mode)));
}

/// Appends a change for every declared owner, group or mode that differs.
pub fn compare_meta(desired: &MetaDesired, observed: &Observed, changes: &mut Vec<FieldChange>) {
    let seen = |field: &str| observed.fields.get(field).and_then(Value::as_str);
    for (field, want) in [("owner", &desired.owner), ("group", &desired.group)] {
        if let Some(want) = want
            && seen(field) != Some(want.as_str())
        {
            changes.push(text_change(field, seen(field), Some(want)));
        }
    }
    if let Some(want) = desired.mode {
        let have = seen("mode").and_then(|m| u32::from_str_radix(m, 8).ok());
        if have != Some(want) {
            changes.push(text_change("mode", seen("mode"), Some(&format_mode(want))));
        }
    }
}

/// Changes that creating the object makes: every declared field, and the
/// default mode when none is declared (so a plan shows what will be set).
pub fn create_meta_changes(
    desired: &MetaDesired,
    default_mode: u32,
    changes: &mut Vec<FieldChange>,
) {
    if let Some(owner) = &desired.owner {
        changes.push(text_change("owner", None, Some(owner)));
    }
    if let Some(group) = &desired.group {
        changes.push(text_change("group", None, Some(group)));
    }
    let mode = desired.mode.unwrap_or(default_mode);
    changes.push(text_change("mode", None, Some(&format_mode(mode))));
}

/// The owner and mode content declared in `desired` would have on `host`
/// (`default_mode` when none is declared; an owner or group the host does
/// not know, or a field that does not parse, leaves it unset: the apply
/// then fails naming it).
pub fn declared_meta(
    host: &Host,
    desired: &dyn DeclaredFields,
    default_mode: u32,
) -> crate::DeclaredMeta {
    let meta = MetaDesired::parse(desired).ok();
    let mode = meta.as_ref().and_then(|m| m.mode).unwrap_or(default_mode);
    let (uid, gid) = meta
        .as_ref()
        .and_then(|m| m.resolve(host).ok())
        .unwrap_or((None, None));
    crate::DeclaredMeta { mode, uid, gid }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn observed(owner: &str, group: &str, mode: &str) -> Observed {
        let mut o = Observed::absent();
        o.presence = datum_core::Presence::Present;
        o.fields.insert("owner".into(), json!(owner));
        o.fields.insert("group".into(), json!(group));
        o.fields.insert("mode".into(), json!(mode));
        o
    }

    #[test]
    fn only_declared_fields_are_compared() {
        let cases: [(Value, Vec<&str>); 5] = [
            (json!({}), vec![]),
            (json!({"owner": "root", "mode": "644"}), vec![]),
            (json!({"owner": "app"}), vec!["owner"]),
            (
                json!({"group": "adm", "mode": "0600"}),
                vec!["group", "mode"],
            ),
            (json!({"mode": "4644"}), vec!["mode"]),
        ];
        for (desired, want) in cases {
            let d = MetaDesired::parse(&desired).unwrap();
            let mut changes = Vec::new();
            compare_meta(&d, &observed("root", "root", "0644"), &mut changes);
            let got: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
            assert_eq!(got, want, "{desired}");
        }
    }

    #[test]
    fn mode_changes_show_both_sides_in_four_digits() {
        let d = MetaDesired::parse(&json!({"mode": "600"})).unwrap();
        let mut changes = Vec::new();
        compare_meta(&d, &observed("root", "root", "0644"), &mut changes);
        assert_eq!(
            changes,
            vec![text_change("mode", Some("0644"), Some("0600"))]
        );
    }

    #[test]
    fn observed_owners_follow_the_declared_spelling_when_equal() {
        let host = Host::with_name("/nonexistent-datum-root", "t");
        // Numbers always resolve; the machine's passwd knows root as 0.
        assert_eq!(
            spell(
                Some("0"),
                0,
                |n| host.lookup_user(n).ok(),
                Some("root".into())
            ),
            "0"
        );
        assert_eq!(
            spell(
                Some("root"),
                0,
                |n| host.lookup_user(n).ok(),
                Some("root".into())
            ),
            "root"
        );
        assert_eq!(
            spell(
                Some("5"),
                0,
                |n| host.lookup_user(n).ok(),
                Some("root".into())
            ),
            "root"
        );
        assert_eq!(spell(None, 4242, |_| None, None), "4242");
    }

    #[test]
    fn bad_meta_names_its_field() {
        let (field, message) = MetaDesired::parse(&json!({"mode": 644})).unwrap_err();
        assert_eq!(field, "mode");
        assert!(message.contains("quoted"));
    }
}
