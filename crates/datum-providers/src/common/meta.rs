//! Owner, group and mode: declared, observed, compared and resolved.
//!
//! Observed owners are written the way the declaration spells them whenever
//! they are the same account (`0` stays `0`, `root` stays `root`), so the
//! pure diff can compare text; otherwise as the account's name, or its number
//! when it has none. Only declared fields are compared: an undeclared owner is
//! not managed. Unknown users are an apply-time error, not an observe-time
//! one, so `datum plan` can still show what would change when a package that
//! creates the user comes first in the same pass; the observation notes them
//! ([`UNKNOWN_ACCOUNTS_FIELD`]), and the plan calls the change one that would
//! fail only when nothing earlier may make the account.

use std::collections::BTreeMap;

use datum_core::{DeclaredFields, FieldChange, FileMeta, Observed};
use datum_host::{Host, HostError};
use serde_json::Value;

use super::fields::{format_mode, parse_account, parse_mode};
use super::text_change;
use crate::{Reach, Refusal};

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

/// How an observed account is written: as declared when it is that account
/// (`declared_id`, the declared name's number), else its name, else its
/// number.
fn spell(
    declared: Option<&str>,
    declared_id: Option<u32>,
    id: u32,
    name: Option<String>,
) -> String {
    if let Some(declared) = declared
        && declared_id == Some(id)
    {
        return declared.to_owned();
    }
    name.unwrap_or_else(|| id.to_string())
}

/// Adds `owner`, `group` and `mode` as observed on `meta`, and which
/// declared accounts the host does not know ([`UNKNOWN_ACCOUNTS_FIELD`],
/// from the same lookups).
pub fn observe_meta(
    host: &Host,
    meta: &FileMeta,
    desired: &MetaDesired,
    fields: &mut BTreeMap<String, Value>,
) {
    let (owner_id, group_id) = declared_ids(host, desired);
    let owner = spell(
        desired.owner.as_deref(),
        owner_id.as_ref().and_then(|r| r.as_ref().ok().copied()),
        meta.uid,
        host.user_name(meta.uid),
    );
    let group = spell(
        desired.group.as_deref(),
        group_id.as_ref().and_then(|r| r.as_ref().ok().copied()),
        meta.gid,
        host.group_name(meta.gid),
    );
    fields.insert("owner".to_owned(), Value::String(owner));
    fields.insert("group".to_owned(), Value::String(group));
    fields.insert("mode".to_owned(), Value::String(format_mode(meta.mode)));
    note_unknown(owner_id.as_ref(), group_id.as_ref(), fields);
}

/// Where an observation lists the declared `owner` and `group` that the
/// host's account files do not know (`["owner"]`, `["group"]` or both;
/// left out when they know them): staging fails on them, naming the
/// account, unless an earlier change of the pass makes it (see
/// [`unknown_account_refusal`]).
pub const UNKNOWN_ACCOUNTS_FIELD: &str = "unknown_accounts";

/// The account files a declared owner and group are looked up in, as
/// declared paths (see `datum_host::accounts`).
pub const ACCOUNT_FILES: &[&str] = &["/etc/passwd", "/etc/group"];

/// The declared owner's and group's numbers, each looked up once.
type DeclaredIds = (
    Option<Result<u32, HostError>>,
    Option<Result<u32, HostError>>,
);

fn declared_ids(host: &Host, desired: &MetaDesired) -> DeclaredIds {
    (
        desired.owner.as_deref().map(|o| host.lookup_user(o)),
        desired.group.as_deref().map(|g| host.lookup_group(g)),
    )
}

/// Records [`UNKNOWN_ACCOUNTS_FIELD`] from the lookups of the declared
/// owner and group (an account file that could not be read is not an
/// unknown name: the apply reports that error instead).
fn note_unknown(
    owner: Option<&Result<u32, HostError>>,
    group: Option<&Result<u32, HostError>>,
    fields: &mut BTreeMap<String, Value>,
) {
    let unknown: Vec<Value> = [("owner", owner), ("group", group)]
        .into_iter()
        .filter(|(_, found)| {
            matches!(
                found,
                Some(Err(
                    HostError::UnknownUser { .. } | HostError::UnknownGroup { .. }
                ))
            )
        })
        .map(|(field, _)| Value::from(field))
        .collect();
    if !unknown.is_empty() {
        fields.insert(UNKNOWN_ACCOUNTS_FIELD.to_owned(), Value::Array(unknown));
    }
}

/// Records [`UNKNOWN_ACCOUNTS_FIELD`] for an object whose owner and mode
/// were not observed (nothing there, or something of another type), which
/// the apply creates with the declared owner and group. One lookup per
/// declared account, in the account files the pass parsed once.
pub fn note_unknown_accounts(
    host: &Host,
    desired: &MetaDesired,
    fields: &mut BTreeMap<String, Value>,
) {
    if desired.owner.is_none() && desired.group.is_none() {
        return;
    }
    let (owner, group) = declared_ids(host, desired);
    note_unknown(owner.as_ref(), group.as_ref(), fields);
}

/// The apply's error for a declared owner (first, as [`MetaDesired::resolve`]
/// looks it up first) or group that the observation found in no account
/// file, with the file's declared path. Only a change to the account files
/// (a User or Group made, a Package's, the files themselves) may make it
/// known first.
pub fn unknown_account_refusal(desired: &MetaDesired, observed: &Observed) -> Option<Refusal> {
    let listed = observed.fields.get(UNKNOWN_ACCOUNTS_FIELD)?.as_array()?;
    let lists = |field: &str| listed.iter().any(|v| v.as_str() == Some(field));
    let error = match (&desired.owner, &desired.group) {
        (Some(name), _) if lists("owner") => HostError::UnknownUser {
            name: name.clone(),
            database: ACCOUNT_FILES[0].into(),
        },
        (_, Some(name)) if lists("group") => HostError::UnknownGroup {
            name: name.clone(),
            database: ACCOUNT_FILES[1].into(),
        },
        _ => return None,
    };
    Some(Refusal {
        why: error.to_string(),
        reach: Reach::AlsoAround(ACCOUNT_FILES),
    })
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

/// Whether setting `uid`, `gid` and `mode` (each `None` or as it is: left
/// as it is) in place on a file of `before` could leave someone holding it
/// open for writing who may not write it afterwards: a descriptor opened
/// for writing keeps writing through a chown or chmod, so their bytes would
/// land in a file the pass reports as the new owner's and closed to them.
/// Those who could open it before are its owner, its group when the mode
/// lets the group write (an ACL granting a user or group writing shows in
/// the group bits, its mask), and everyone when the mode lets others
/// write; each keeps that right when its owner was root or stays, the
/// group stays and may still write, or everyone may still write. A change
/// that only adds or removes read or execute bits, or takes writing away
/// from root or the owner it keeps, strands nobody. One rule for a File
/// that declares its content and a Tree's entry: where it says so, the
/// declared bytes are written afresh and renamed over the name instead,
/// leaving the old descriptor on a file no name holds.
pub(crate) fn in_place_strands_a_writer(
    before: &FileMeta,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
) -> bool {
    let after = mode.unwrap_or(before.mode);
    let everyone_may_write = after & 0o002 != 0;
    let owner_keeps = before.uid == 0 || uid.is_none_or(|u| u == before.uid);
    let group_keeps = before.mode & 0o020 == 0
        || everyone_may_write
        || (after & 0o020 != 0 && gid.is_none_or(|g| g == before.gid));
    let others_keep = before.mode & 0o002 == 0 || everyone_may_write;
    !(owner_keeps && group_keeps && others_keep)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Who could open a file for writing before a change made in place and
    /// may not write it after it: a writer's descriptor outlives the chown
    /// or chmod, so the change is stranding them.
    #[test]
    fn a_change_in_place_strands_whoever_loses_writing() {
        let meta = |uid: u32, gid: u32, mode: u32| FileMeta {
            uid,
            gid,
            mode,
            ..FileMeta::default()
        };
        for (case, before, uid, gid, mode, strands) in [
            (
                "other write taken away",
                meta(0, 0, 0o666),
                None,
                None,
                Some(0o644),
                true,
            ),
            (
                "group write taken away",
                meta(0, 0, 0o664),
                None,
                None,
                Some(0o644),
                true,
            ),
            (
                "group write, only the mask",
                meta(0, 0, 0o660),
                None,
                None,
                Some(0o640),
                true,
            ),
            (
                "other write alone taken",
                meta(0, 0, 0o642),
                None,
                None,
                Some(0o644),
                true,
            ),
            (
                "group write, new group",
                meta(0, 0, 0o664),
                None,
                Some(100),
                None,
                true,
            ),
            (
                "a user's file made root's",
                meta(1000, 0, 0o644),
                Some(0),
                None,
                None,
                true,
            ),
            (
                "group write kept",
                meta(0, 0, 0o664),
                None,
                None,
                Some(0o660),
                false,
            ),
            (
                "everyone may still write",
                meta(0, 0, 0o666),
                None,
                Some(100),
                Some(0o646),
                false,
            ),
            (
                "read bits",
                meta(0, 0, 0o600),
                None,
                None,
                Some(0o644),
                false,
            ),
            (
                "execute bits",
                meta(0, 0, 0o755),
                None,
                None,
                Some(0o644),
                false,
            ),
            (
                "owner write taken away",
                meta(0, 0, 0o644),
                None,
                None,
                Some(0o444),
                false,
            ),
            (
                "a user's own write",
                meta(1000, 0, 0o644),
                None,
                None,
                Some(0o444),
                false,
            ),
            (
                "root's file given away",
                meta(0, 0, 0o644),
                Some(1000),
                Some(100),
                None,
                false,
            ),
            (
                "unchanged numbers",
                meta(1000, 5, 0o664),
                Some(1000),
                Some(5),
                None,
                false,
            ),
            ("nothing set", meta(1000, 5, 0o666), None, None, None, false),
        ] {
            assert_eq!(
                in_place_strands_a_writer(&before, uid, gid, mode),
                strands,
                "{case}"
            );
        }
    }

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
        let id = |n: &str| host.lookup_user(n).ok();
        assert_eq!(spell(Some("0"), id("0"), 0, Some("root".into())), "0");
        assert_eq!(
            spell(Some("root"), id("root"), 0, Some("root".into())),
            "root"
        );
        assert_eq!(spell(Some("5"), id("5"), 0, Some("root".into())), "root");
        assert_eq!(spell(None, None, 4242, None), "4242");
    }

    #[test]
    fn unknown_declared_accounts_are_noted_and_refused_with_the_account_file() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(
            root.path().join("etc/passwd"),
            "app:x:900:901::/:/bin/false\n",
        )
        .unwrap();
        std::fs::write(root.path().join("etc/group"), "app:x:901:\n").unwrap();
        let host = Host::with_name(root.path(), "t");
        let cases = [
            (json!({"owner": "app", "group": "app"}), None),
            (
                json!({"owner": "aap", "group": "app"}),
                Some("unknown user `aap` (not in /etc/passwd)"),
            ),
            (
                json!({"owner": "app", "group": "apq"}),
                Some("unknown group `apq` (not in /etc/group)"),
            ),
            (
                json!({"owner": "aap", "group": "apq"}),
                Some("unknown user `aap` (not in /etc/passwd)"),
            ),
        ];
        for (desired, want) in cases {
            let d = MetaDesired::parse(&desired).unwrap();
            let meta = FileMeta {
                uid: 900,
                gid: 901,
                mode: 0o644,
                ..FileMeta::default()
            };
            for present in [true, false] {
                let mut o = observed("app", "app", "0644");
                o.fields.clear();
                if present {
                    observe_meta(&host, &meta, &d, &mut o.fields);
                } else {
                    note_unknown_accounts(&host, &d, &mut o.fields);
                }
                let got = unknown_account_refusal(&d, &o);
                assert_eq!(got.as_ref().map(|r| r.why.as_str()), want, "{desired}");
                if let Some(r) = got {
                    assert_eq!(r.reach, Reach::AlsoAround(ACCOUNT_FILES));
                }
            }
        }
    }

    #[test]
    fn bad_meta_names_its_field() {
        let (field, message) = MetaDesired::parse(&json!({"mode": 644})).unwrap_err();
        assert_eq!(field, "mode");
        assert!(message.contains("quoted"));
    }
}
