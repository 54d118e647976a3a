//! The Group resource type: a group in the root's account files.
//!
//! ```yaml
//! datum: v1alpha1
//! type: Group
//! name: ops
//! desired:
//!   gid: 3000          # optional: useradd's next free number otherwise
//!   system: false      # optional, when created: a system group (-r)
//!   ensure: present    # or absent
//! ```
//!
//! Observed from `ROOT/etc/group` (parsed once per pass, see
//! `common::account_files`), changed with `groupadd`, `groupmod` and
//! `groupdel --root ROOT`. A group with no gshadow entry (groupadd renames
//! group into place before gshadow, and one killed in between leaves it
//! so) is a change of `gshadow`, completed with `groupmod -p !`. Members
//! are the Users' business (`groups:` of a User), so a Group never rewrites
//! its member list. `system` decides only
//! how a new group's number is chosen; an existing group is never
//! re-created for it.
//!
//! A User removed whose own group is declared present keeps it from
//! `userdel` by renaming it for the while (`account_files::kept_name`); a
//! group found under that name (a pass killed in between) is this Group's
//! and is renamed back.

use std::collections::HashMap;

use datum_core::{
    Action, DeclaredFields, Diff, FieldChange, Observed, Presence, Resource, ResourceId,
};
use datum_host::Host;
use serde_json::{Value, json};

use crate::Activated;
use crate::common::account_files;
use crate::common::fields::{bool_field, name_field, type_name, unknown_fields};
use crate::common::{Ensure, all_or_nothing, ensure_change};
use crate::kind::planned;
use crate::{
    Capabilities, Exclusive, FieldError, FieldLookup, Kind, OrderingEdge, OrdersOthers, Planned,
    ProviderError, Reach, Refusal,
};

/// The manifest `type:` of this kind.
pub const KIND: &str = "Group";

const FIELDS: &[&str] = &["name", "gid", "system", "ensure"];

/// The observed `gshadow` of a group the root's gshadow file has no line
/// for (the field is absent otherwise).
const GSHADOW_MISSING: &str = "missing";

/// Where an observation names another group that holds the declared `gid`
/// of a Group declared present (groupadd and groupmod refuse a second group
/// of one number: "GID '100' already exists"). Left out when none does.
const GID_TAKEN_BY: &str = "gid_taken_by";

/// Where the observation of a group declared absent names an account whose
/// primary group it is (groupdel refuses to remove it: "cannot remove the
/// primary group of user 'deploy'"). Left out when none is.
const PRIMARY_GROUP_OF: &str = "primary_group_of";

/// Notes what groupadd, groupmod or groupdel will refuse:
/// [`GID_TAKEN_BY`] for a group declared present (a group other than the
/// one `d` manages, under any of `names`, numbered `d`'s declared gid),
/// [`PRIMARY_GROUP_OF`] for one declared absent that is found (numbered
/// `found`).
fn note_refused(
    d: &GroupDesired,
    files: &account_files::AccountFiles,
    names: &[&str],
    found: Option<u32>,
    observed: &mut Observed,
) {
    let (field, other) = match d.ensure {
        Ensure::Present => (
            GID_TAKEN_BY,
            d.gid.and_then(|n| files.other_group_with_gid(n, names)),
        ),
        Ensure::Absent => (
            PRIMARY_GROUP_OF,
            found.and_then(|gid| files.user_with_gid(gid)),
        ),
    };
    if let Some(other) = other {
        observed.fields.insert(field.to_owned(), json!(other));
    }
}

/// A Group declaration, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDesired {
    /// The group's name (default: the resource's name).
    pub name: String,
    pub gid: Option<u32>,
    pub system: bool,
    pub ensure: Ensure,
    /// The resource says `sensitive: true` itself: what the plan says it
    /// would refuse names none of its values (set by the kind's `declare`).
    hides_values: bool,
}

/// A Group's `desired` as written in a manifest (the type its JSON Schema is
/// derived from; held to [`GroupDesired::parse`] by the tests).
#[derive(schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    transform = datum_core::schema::optional_never_null,
    title = "Group",
    description = "A group in the host's /etc/group (changed with groupadd, groupmod and groupdel)."
)]
pub struct GroupDeclaration {
    /// The group's name (default: the resource's name).
    #[schemars(with = "Option<AccountName>")]
    pub name: Option<String>,
    /// The group's number.
    #[schemars(range(max = 4294967294u32))]
    pub gid: Option<u32>,
    /// When created: a system group (its number from the system range).
    pub system: Option<bool>,
    #[schemars(with = "Option<crate::common::schema::Ensure>")]
    pub ensure: Option<String>,
}

/// A value of the manifest schema: a user or group name.
pub struct AccountName;

impl schemars::JsonSchema for AccountName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AccountName".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[a-z_][a-z0-9_.-]{0,30}[a-z0-9_.$-]?$",
            "description": "A user or group name: a lower-case letter or `_`, then lower-case letters, digits, `_`, `-` or `.` (a final `$` allowed), at most 32 characters.",
        })
    }
}

/// What a User or Group declaration manages alone: its name (`what`:
/// "account" or "group") and, while present, its number (`number`: "uid"
/// or "gid", a number only: a User's `gid` names a group, it is not its
/// own). Values that do not parse claim nothing (their errors are the
/// field check's).
pub(crate) fn account_claims(
    field: FieldLookup<'_, '_>,
    name: &str,
    what: &str,
    number: &'static str,
) -> Vec<Exclusive> {
    let account = match field("name") {
        Some(v) => v.as_str().unwrap_or_default(),
        None => name,
    };
    let mut claims = Vec::new();
    if !account.is_empty() {
        claims.push(Exclusive {
            field: "name",
            key: format!("{what} {account}"),
            shown: format!("{what} `{account}`"),
        });
    }
    let absent = field("ensure").and_then(Value::as_str) == Some("absent");
    if let Some(n) = field(number).and_then(Value::as_u64).filter(|_| !absent) {
        claims.push(Exclusive {
            field: number,
            key: format!("{number} {n}"),
            shown: format!("{number} {n}"),
        });
    }
    claims
}

/// A declared account number: an integer below 2^32 - 1 (the "no id"
/// value of chown).
pub(crate) fn account_id(value: &Value, field: &str) -> Result<u32, FieldError> {
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n != u32::MAX)
        .ok_or_else(|| {
            FieldError::new(
                &[field],
                format!(
                    "`{field}` must be a number from 0 to 4294967294, found {}",
                    type_name(value)
                ),
            )
        })
}

impl GroupDesired {
    /// Parses `desired`; `default_name` is the resource's own name. Returns
    /// every problem found.
    pub fn parse(
        desired: &dyn DeclaredFields,
        default_name: &str,
    ) -> Result<Self, Vec<FieldError>> {
        if let Err(found) = desired.mapping() {
            return Err(vec![FieldError::new(
                &[],
                format!("`desired` of a Group must be a mapping, found {found}"),
            )]);
        }
        let mut errors = unknown_fields(KIND, desired, FIELDS);
        // Every string is checked, the empty one too (`name: ""` would
        // reach groupadd as an empty argument).
        let name = name_field(
            desired,
            default_name,
            |n| account_files::check_name(n).map(|()| n.to_owned()),
            &mut errors,
        )
        .unwrap_or_default();
        let gid = desired
            .get("gid")
            .map(|v| account_id(v, "gid"))
            .transpose()
            .map_err(|e| errors.push(e))
            .ok()
            .flatten();
        let system = bool_field(desired, "system", &mut errors).unwrap_or(false);
        let ensure = Ensure::parse(desired.get("ensure"))
            .map_err(|m| errors.push(FieldError::new(&["ensure"], m)))
            .unwrap_or(Ensure::Present);
        all_or_nothing(errors)?;
        Ok(GroupDesired {
            name,
            gid,
            system,
            ensure,
            hides_values: false,
        })
    }
}

fn desired(resource: &Resource) -> Result<GroupDesired, ProviderError> {
    let mut d = GroupDesired::parse(&resource.desired, &resource.id.name)
        .map_err(crate::common::fields::invalid)?;
    d.hides_values = resource.sensitive && !resource.sensitive_by_field_only;
    Ok(d)
}

/// The `Group` resource type.
#[derive(Debug, Default, Clone, Copy)]
pub struct GroupProvider;

/// The account name a declared, present Group resource manages.
fn declared_name(resource: &Resource) -> Option<String> {
    let d = GroupDesired::parse(&resource.desired, &resource.id.name).ok()?;
    (d.ensure == Ensure::Present).then_some(d.name)
}

/// The group names a declaration uses: its `group` (a File's, a
/// Directory's), `gid` and `groups` (a User's), numbers left out.
fn groups_named(desired: &dyn DeclaredFields) -> Vec<&str> {
    groups_named_in(desired)
        .into_iter()
        .map(|(_, name)| name)
        .collect()
}

/// [`groups_named`], each with the field that names it.
fn groups_named_in(desired: &dyn DeclaredFields) -> Vec<(&'static str, &str)> {
    let mut names: Vec<(&'static str, &str)> = ["group", "gid"]
        .into_iter()
        .filter_map(|f| Some((f, desired.get(f).and_then(Value::as_str)?)))
        .collect();
    if let Some(items) = desired.get("groups").and_then(Value::as_array) {
        names.extend(
            items
                .iter()
                .filter_map(Value::as_str)
                .map(|n| ("groups", n)),
        );
    }
    names.retain(|(_, n)| n.parse::<u32>().is_err());
    names
}

/// The warnings for the resources that name, in one of the fields `named`
/// gives (by name), an account or group (`what`) that a resource of the
/// repository declares absent (`removed`: each name with its remover): the
/// two contradict each other. A File owned by a User removed fails once
/// userdel ran (unknown user) or, applied first, keeps a file owned by a
/// number no account has; a User joining a Group removed fails once
/// groupdel ran. Resources declared absent themselves are left out. Only
/// fields and resource names are quoted, never a declared value.
pub(crate) fn naming_removed<'r>(
    resources: &'r [Resource],
    removed: &HashMap<String, &Resource>,
    what: &str,
    named: impl Fn(&'r Resource) -> Vec<(&'static str, &'r str)>,
) -> Vec<(ResourceId, String)> {
    if removed.is_empty() {
        return Vec::new();
    }
    let mut warnings = Vec::new();
    for r in resources {
        if r.desired.get("ensure").and_then(Value::as_str) == Some("absent") {
            continue;
        }
        let mut seen = Vec::new();
        for (field, name) in named(r) {
            let Some(remover) = removed.get(name) else {
                continue;
            };
            if remover.id == r.id || seen.contains(&field) {
                continue;
            }
            seen.push(field);
            warnings.push((
                r.id.clone(),
                format!(
                    "`{field}` names the {what} {} removes (ensure: absent, {}): they contradict each other, and one of them fails or leaves something owned by a number no {what} has; declare it present, or name another",
                    remover.id, remover.origin
                ),
            ));
        }
    }
    warnings
}

/// Whatever names a declared Group (a file's group, a user's primary or
/// supplementary group) comes after it: the group exists before anything
/// is chowned to it or joins it.
impl OrdersOthers for GroupProvider {
    fn edges(&self, resources: &[Resource]) -> Vec<OrderingEdge> {
        // By name, the first declaration of a name first (a second is a
        // conflict reported elsewhere): every other resource looks its
        // groups up here.
        let mut groups: HashMap<String, &Resource> = HashMap::new();
        // And by number: a `gid` (a User's primary group) may name its
        // group by number, and useradd -g NUMBER needs the group as much as
        // -g NAME does. Only the field says so, never the other's kind (a
        // file's `group` by number is not looked up: chown takes any
        // number).
        let mut numbers: HashMap<u32, &Resource> = HashMap::new();
        for r in resources.iter().filter(|r| r.id.kind == KIND) {
            if let Some(name) = declared_name(r) {
                groups.entry(name).or_insert(r);
                if let Some(gid) = r.desired.get("gid").and_then(Value::as_u64)
                    && let Ok(gid) = u32::try_from(gid)
                {
                    numbers.entry(gid).or_insert(r);
                }
            }
        }
        let mut edges = around_users_removed(resources);
        if groups.is_empty() {
            return edges;
        }
        for r in resources.iter().filter(|r| r.id.kind != KIND) {
            let by_number = r
                .desired
                .get("gid")
                .and_then(Value::as_u64)
                .and_then(|gid| numbers.get(&u32::try_from(gid).ok()?));
            let by_name = groups_named(&r.desired)
                .into_iter()
                .filter_map(|name| groups.get(name));
            for group in by_name.chain(by_number) {
                edges.push(OrderingEdge {
                    from: r.id.clone(),
                    after: group.id.clone(),
                });
            }
        }
        edges
    }

    /// What names a group a Group declares absent (a File's `group`, a
    /// User's `gid` or `groups`): see `naming_removed`.
    fn warnings(&self, resources: &[Resource]) -> Vec<(ResourceId, String)> {
        let removed: HashMap<String, &Resource> = resources
            .iter()
            .filter(|r| r.id.kind == KIND)
            .filter_map(|r| {
                let d = GroupDesired::parse(&r.desired, &r.id.name).ok()?;
                (d.ensure == Ensure::Absent).then_some((d.name, r))
            })
            .collect();
        naming_removed(resources, &removed, "group", |r| {
            if r.id.kind == KIND {
                Vec::new()
            } else {
                groups_named_in(&r.desired)
            }
        })
    }
}

/// The edges between Groups and the Users declared absent:
///
/// - a Group declared absent comes after every one of them: groupdel
///   refuses to remove a user's primary group ("cannot remove the primary
///   group of user 'deploy'"), and a User removed is declared by its name
///   alone, so which group was its primary one is not known before the
///   pass. Removing the users first never stops a group's removal;
/// - the User removing the account named like a Group declared present
///   comes after that Group: userdel would take the group with it
///   (`USERGROUPS_ENAB`), and the User keeps it only when it knows the
///   group is declared, which the Group's observation notes (see
///   `account_files::declared_group`). So `--target` of the User takes the
///   Group too, and a group a killed pass left renamed is renamed back
///   before the User acts again.
fn around_users_removed(resources: &[Resource]) -> Vec<OrderingEdge> {
    let removed = crate::user::removed(resources);
    if removed.is_empty() {
        return Vec::new();
    }
    let mut edges = Vec::new();
    for r in resources.iter().filter(|r| r.id.kind == KIND) {
        let Ok(d) = GroupDesired::parse(&r.desired, &r.id.name) else {
            continue;
        };
        for (user, name) in &removed {
            if d.ensure == Ensure::Absent {
                edges.push(OrderingEdge {
                    from: r.id.clone(),
                    after: user.id.clone(),
                });
            } else if *name == d.name {
                edges.push(OrderingEdge {
                    from: user.id.clone(),
                    after: r.id.clone(),
                });
            }
        }
    }
    edges
}

impl Kind for GroupProvider {
    const KIND: &'static str = KIND;
    type Declaration = GroupDesired;
    type Written = GroupDeclaration;
    type Staging = Planned;

    fn declare(&self, resource: &Resource) -> Result<GroupDesired, ProviderError> {
        desired(resource)
    }

    fn check_fields(&self, desired: &Value) -> Result<(), Vec<FieldError>> {
        // The resource's own name stands in when `name:` is absent; it is
        // checked by `check_resource_name`, which the catalogue is given it
        // for.
        GroupDesired::parse(desired, "group").map(drop)
    }

    fn observe(
        &self,
        host: &Host,
        _resource: &Resource,
        d: &GroupDesired,
    ) -> Result<Observed, ProviderError> {
        if d.ensure == Ensure::Present {
            account_files::declared_group(host, &d.name);
        }
        let files = account_files::current(host, false).map_err(account_files::account_failure)?;
        // Under its own name, or else under the name a User's removal gives
        // it for the while (a pass killed then left it so): the same group.
        let kept = account_files::kept_name(&d.name);
        let (group, renamed) = match files.group(&d.name) {
            Some(group) => (group, false),
            None => match files.group(&kept) {
                Some(group) => (group, true),
                None => {
                    let mut observed = Observed::absent();
                    note_refused(d, &files, &[&d.name, &kept], None, &mut observed);
                    return Ok(observed);
                }
            },
        };
        let mut observed = Observed::absent();
        observed.presence = Presence::Present;
        observed.fields.insert("gid".to_owned(), json!(group.gid));
        if renamed {
            observed.fields.insert("name".to_owned(), json!(kept));
        }
        note_refused(d, &files, &[&d.name, &kept], Some(group.gid), &mut observed);
        if files.lacks_gshadow_entry(&group.name) {
            observed
                .fields
                .insert("gshadow".to_owned(), json!(GSHADOW_MISSING));
        }
        Ok(observed)
    }

    fn plan(&self, _resource: &Resource, d: &GroupDesired, observed: &Observed) -> Diff {
        diff(d, observed)
    }

    /// A `gid` another group holds: groupadd and groupmod refuse it; a
    /// group declared absent that is an account's primary group: groupdel
    /// refuses it. Unless an earlier change of the account files (that
    /// group renumbered, that account removed) comes first.
    fn refuses_unless_changed_first(
        &self,
        d: &GroupDesired,
        observed: &Observed,
    ) -> Option<Refusal> {
        let diff = diff(d, observed);
        let taken = observed.fields.get(GID_TAKEN_BY).and_then(Value::as_str);
        let primary = observed
            .fields
            .get(PRIMARY_GROUP_OF)
            .and_then(Value::as_str);
        let why = match (diff.action, taken, primary, d.gid) {
            (Some(Action::Remove), _, Some(user), _) => {
                if d.hides_values {
                    "the group is an account's primary group: groupdel refuses to remove it (remove that account or give it another group first)".to_owned()
                } else {
                    format!(
                        "group `{}` is the primary group of account `{user}`: groupdel refuses to remove it (remove `{user}` or give it another group first)",
                        d.name
                    )
                }
            }
            (Some(_), Some(other), _, Some(gid))
                if diff.changes.iter().any(|c| c.field == "gid") =>
            {
                let program = if observed.presence == Presence::Present {
                    "groupmod"
                } else {
                    "groupadd"
                };
                if d.hides_values {
                    format!(
                        "the declared gid belongs to another group: {program} refuses a second group of one number"
                    )
                } else {
                    format!(
                        "gid {gid} belongs to group `{other}`: {program} refuses a second group of one number (declare another gid, or change `{other}` first)"
                    )
                }
            }
            _ => return None,
        };
        Some(Refusal {
            why,
            reach: Reach::AlsoAround(crate::common::meta::ACCOUNT_FILES),
        })
    }

    fn stage(
        &self,
        _host: &Host,
        _resource: &Resource,
        _d: &GroupDesired,
        observed: &Observed,
        diff: &Diff,
    ) -> Result<Planned, ProviderError> {
        Ok(planned(observed, diff))
    }

    fn activate(
        &self,
        host: &Host,
        resource: &Resource,
        d: &GroupDesired,
        staging: Planned,
    ) -> Result<Activated<Planned>, ProviderError> {
        let (observed, diff) = (&staging.observed, &staging.diff);
        let failure = account_files::activation_failure(resource);
        let run = |program, args: Vec<String>| {
            account_files::run_tool(host, resource, program, args, &d.name).map_err(&failure)
        };
        // The group's name on the host: its own, or the one a killed pass
        // left it under (see `observe`).
        let current = observed
            .fields
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or(&d.name)
            .to_owned();
        let done = match diff.action {
            Some(Action::Remove) => run("groupdel", vec!["--".into(), current]),
            Some(Action::Create) => {
                let mut args = Vec::new();
                if let Some(gid) = d.gid {
                    args.extend(["-g".to_owned(), gid.to_string()]);
                }
                if d.system {
                    args.push("-r".to_owned());
                }
                args.extend(["--".to_owned(), d.name.clone()]);
                run("groupadd", args)
            }
            Some(_) if observed.presence == Presence::Present => {
                let mut args = Vec::new();
                if current != d.name {
                    args.extend(["-n".to_owned(), d.name.clone()]);
                }
                if let Some(gid) = d.gid
                    && observed.fields.get("gid") != Some(&json!(gid))
                {
                    args.extend(["-g".to_owned(), gid.to_string()]);
                }
                if diff.changes.iter().any(|c| c.field == "gshadow") {
                    // groupmod makes the missing entry, locked.
                    args.extend(["-p".to_owned(), "!".to_owned()]);
                }
                if args.is_empty() {
                    Ok(())
                } else {
                    args.extend(["--".to_owned(), current]);
                    run("groupmod", args)
                }
            }
            _ => Ok(()),
        };
        done.map(|()| Activated::Done)
    }
}

impl Capabilities for GroupProvider {
    fn watches_writes(&self) -> Option<&dyn crate::WatchesWrites> {
        Some(&account_files::WATCH)
    }

    fn ordering(&self) -> Option<&dyn OrdersOthers> {
        Some(self)
    }

    fn takes_validator(&self) -> bool {
        false
    }

    /// The group's name (whatever `ensure` says), and its gid while present.
    fn exclusive_claims(&self, field: FieldLookup<'_, '_>, name: &str) -> Vec<Exclusive> {
        account_claims(field, name, "group", "gid")
    }

    /// The resource's name when `name:` is not written: the group's name.
    fn check_resource_name(&self, field: FieldLookup<'_, '_>, name: &str) -> Option<String> {
        crate::common::fields::name_as_field(field, name, "group", account_files::check_name)
    }
}

/// The pure comparison behind the `Group` kind's plan.
pub fn diff(d: &GroupDesired, observed: &Observed) -> Diff {
    let mut out = Diff::default();
    let present = observed.presence == Presence::Present;
    match (d.ensure, present) {
        (Ensure::Absent, true) => {
            out.action = Some(Action::Remove);
            out.changes.push(ensure_change("present", "absent"));
        }
        (Ensure::Absent, false) => {}
        (Ensure::Present, false) => {
            out.action = Some(Action::Create);
            out.changes.push(ensure_change("absent", "present"));
            if let Some(gid) = d.gid {
                out.changes.push(FieldChange {
                    field: "gid".to_owned(),
                    before: None,
                    after: Some(json!(gid)),
                });
            }
        }
        (Ensure::Present, true) => {
            // Found under the name a User's removal gives it for the while.
            if let Some(kept) = observed.fields.get("name") {
                out.changes.push(FieldChange {
                    field: "name".to_owned(),
                    before: Some(kept.clone()),
                    after: Some(json!(d.name)),
                });
            }
            if let Some(gid) = d.gid {
                let seen = observed.fields.get("gid");
                if seen != Some(&json!(gid)) {
                    out.changes.push(FieldChange {
                        field: "gid".to_owned(),
                        before: seen.cloned(),
                        after: Some(json!(gid)),
                    });
                }
            }
            // groupadd renames group into place before gshadow: killed in
            // between, it left a group grpck calls broken. Its entry is
            // added (`!`, as groupadd makes it).
            if let Some(missing) = observed
                .fields
                .get("gshadow")
                .filter(|v| *v == &json!(GSHADOW_MISSING))
            {
                out.changes.push(FieldChange {
                    field: "gshadow".to_owned(),
                    before: Some(missing.clone()),
                    after: Some(json!("present")),
                });
            }
            if !out.changes.is_empty() {
                out.action = Some(Action::Update);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::schema;

    fn observed(gid: u32) -> Observed {
        let mut o = Observed::absent();
        o.presence = Presence::Present;
        o.fields.insert("gid".into(), json!(gid));
        o
    }

    #[test]
    fn declarations_parse_and_every_problem_is_named() {
        let d = GroupDesired::parse(&json!({"gid": 3000, "system": true}), "ops").unwrap();
        assert_eq!(d.name, "ops");
        assert_eq!(d.gid, Some(3000));
        assert!(d.system);
        assert_eq!(d.ensure, Ensure::Present);
        let errors = GroupDesired::parse(
            &json!({"gid": -1, "system": "yes", "ensure": "gone", "members": []}),
            "Bad Name",
        )
        .unwrap_err();
        let fields: Vec<String> = errors.iter().map(|e| e.path.join(".")).collect();
        assert_eq!(
            fields,
            ["members", "name", "gid", "system", "ensure"],
            "{errors:?}"
        );
        assert!(GroupDesired::parse(&json!({"gid": 4294967295u64}), "ops").is_err());
        let errors = GroupDesired::parse(&json!({"name": ""}), "ops").unwrap_err();
        assert_eq!(errors[0].path, ["name"], "{errors:?}");
    }

    #[test]
    fn diff_creates_renumbers_and_removes() {
        let d = GroupDesired::parse(&json!({"gid": 3000}), "ops").unwrap();
        let create = diff(&d, &Observed::absent());
        assert_eq!(create.action, Some(Action::Create));
        assert_eq!(diff(&d, &observed(3000)).action, None);
        let renumber = diff(&d, &observed(3001));
        assert_eq!(renumber.action, Some(Action::Update));
        assert_eq!(renumber.changes[0].before, Some(json!(3001)));
        let free = GroupDesired::parse(&json!({}), "ops").unwrap();
        assert_eq!(diff(&free, &observed(12)).action, None);
        let gone = GroupDesired::parse(&json!({"ensure": "absent"}), "ops").unwrap();
        assert_eq!(diff(&gone, &observed(3000)).action, Some(Action::Remove));
        assert_eq!(diff(&gone, &Observed::absent()).action, None);
        // Found under the name a User's removal gave it: renamed back.
        let mut kept = observed(12);
        kept.fields.insert("name".into(), json!("ops.datum-kept"));
        let back = diff(&free, &kept);
        assert_eq!(back.action, Some(Action::Update));
        assert_eq!(back.changes[0].field, "name");
        assert_eq!(back.changes[0].before, Some(json!("ops.datum-kept")));
        assert_eq!(diff(&d, &kept).changes.len(), 2);
    }

    /// A group in `group` (`x`) without a line in a gshadow file that was
    /// read is half-made: a change of `gshadow`. Not when gshadow was not
    /// read, nor for a group whose line holds no `x`.
    #[test]
    fn a_group_without_its_gshadow_entry_is_a_change() {
        let files =
            account_files::AccountFiles::parse("", "ops:x:3000:\nold::3001:\nfine:x:3002:\n");
        let half = files.clone().with_gshadow("fine:!::\n");
        assert!(half.lacks_gshadow_entry("ops"));
        assert!(!half.lacks_gshadow_entry("old"));
        assert!(!half.lacks_gshadow_entry("fine"));
        assert!(!half.lacks_gshadow_entry("nobody"));
        assert!(!files.lacks_gshadow_entry("ops"));
        let d = GroupDesired::parse(&json!({"gid": 3000}), "ops").unwrap();
        let mut o = observed(3000);
        o.fields.insert("gshadow".into(), json!(GSHADOW_MISSING));
        let change = diff(&d, &o);
        assert_eq!(change.action, Some(Action::Update));
        assert_eq!(change.changes[0].field, "gshadow");
        assert_eq!(change.changes[0].after, Some(json!("present")));
    }

    #[test]
    fn what_names_a_declared_group_is_ordered_after_it() {
        use datum_core::ResourceId;
        let r = |kind: &str, name: &str, desired: Value| {
            Resource::new(ResourceId::new(kind, name), desired)
        };
        let resources = [
            r("File", "key", json!({"path": "/k", "group": "ops"})),
            r(
                "User",
                "deploy",
                json!({"gid": "web", "groups": ["ops", "adm"]}),
            ),
            r("File", "numeric", json!({"path": "/n", "group": "3000"})),
            r("Group", "ops", json!({"gid": 3000})),
            r("Group", "web-group", json!({"name": "web"})),
            r("Group", "adm", json!({"ensure": "absent"})),
            // A primary group by number: useradd -g 3000 needs the group
            // (a file's group by number does not: chown takes any number).
            r("User", "by-number", json!({"gid": 3000})),
            r("User", "no-group", json!({"gid": 3999})),
        ];
        let edges: Vec<(String, String)> = GroupProvider
            .edges(&resources)
            .into_iter()
            .map(|e| (e.from.to_string(), e.after.to_string()))
            .collect();
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            edges,
            [
                pair("File[key]", "Group[ops]"),
                pair("User[deploy]", "Group[web-group]"),
                pair("User[deploy]", "Group[ops]"),
                pair("User[by-number]", "Group[ops]"),
            ]
        );
    }

    #[test]
    fn a_group_removed_comes_after_the_users_removed_and_one_kept_before_its_user() {
        use datum_core::ResourceId;
        let r = |kind: &str, name: &str, desired: Value| {
            Resource::new(ResourceId::new(kind, name), desired)
        };
        let resources = [
            r("Group", "ops", json!({"ensure": "absent"})),
            r("Group", "kept", json!({})),
            r("Group", "own", json!({"name": "deploy", "gid": 3001})),
            r("User", "deploy", json!({"ensure": "absent"})),
            r("User", "app", json!({})),
        ];
        let edges: Vec<(String, String)> = GroupProvider
            .edges(&resources)
            .into_iter()
            .map(|e| (e.from.to_string(), e.after.to_string()))
            .collect();
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            edges,
            [
                pair("Group[ops]", "User[deploy]"),
                pair("User[deploy]", "Group[own]"),
            ]
        );
    }

    #[test]
    fn the_schema_agrees_with_check() {
        let cases = [
            json!({}),
            json!({"gid": 3000, "system": true, "ensure": "absent", "name": "ops"}),
            json!({"gid": "3000"}),
            json!({"gid": -1}),
            json!({"members": ["a"]}),
            json!({"name": "Ops"}),
            json!({"name": ""}),
            json!({"system": 1}),
        ];
        schema::agrees_with_check(&GroupProvider, &cases).unwrap();
    }
}
