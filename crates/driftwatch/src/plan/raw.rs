//! The wire format of one entry of `resource_drift` or `resource_changes`, borrowed from
//! the scanner's buffer (the document itself is walked by [`super::stream`], which never
//! parses `planned_values`, `prior_state`, `configuration` or `variables`: they are the
//! bulk of a big plan and hold plain-text secrets).
//!
//! Only the fields driftwatch uses are declared; serde skips every other key without
//! building it. Values inside changes stay as borrowed [`RawValue`] slices until the parser
//! decides which of them to look at. Every key is optional, because OpenTofu omits empty
//! ones; unknown keys are tolerated, as the format's minor-version promise requires.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

#[derive(Deserialize)]
pub(super) struct RawChange<'a> {
    #[serde(borrow)]
    pub address: Cow<'a, str>,
    #[serde(borrow, default)]
    pub previous_address: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub mode: Option<Cow<'a, str>>,
    /// The resource type (`aws_iam_role`).
    #[serde(borrow, default, rename = "type")]
    pub kind: Option<Cow<'a, str>>,
    #[serde(default)]
    pub deposed: Option<IgnoredAny>,
    #[serde(borrow, default)]
    pub action_reason: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub change: RawChangeBody<'a>,
}

/// The `change` object. Hand-written so that, once `actions` says `no-op` (it comes first
/// in every plan OpenTofu and Terraform write), the values after it are skipped without
/// being captured: a big plan is mostly no-op entries whose `before` and `after` are the
/// whole resource.
#[derive(Default)]
pub(super) struct RawChangeBody<'a> {
    pub actions: Vec<Cow<'a, str>>,
    pub before: Option<&'a RawValue>,
    pub after: Option<&'a RawValue>,
    pub before_sensitive: Option<&'a RawValue>,
    pub after_sensitive: Option<&'a RawValue>,
    pub after_unknown: Option<&'a RawValue>,
    pub replace_paths: Option<Vec<Vec<serde_json::Value>>>,
    pub importing: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum BodyField {
    Actions,
    Before,
    After,
    BeforeSensitive,
    AfterSensitive,
    AfterUnknown,
    ReplacePaths,
    Importing,
    #[serde(other)]
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for RawChangeBody<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Body<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Body<'a> {
            type Value = RawChangeBody<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a change object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<RawChangeBody<'a>, M::Error> {
                let mut body = RawChangeBody::default();
                let mut no_op = false;
                while let Some(field) = map.next_key::<BodyField>()? {
                    match field {
                        BodyField::Actions => {
                            body.actions = map.next_value::<Vec<Cow<'a, str>>>()?;
                            no_op = matches!(body.actions.as_slice(), [one] if one == "no-op");
                        }
                        BodyField::Importing => body.importing = map.next_value()?,
                        // A no-op needs nothing else.
                        _ if no_op => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        BodyField::Before => body.before = map.next_value()?,
                        BodyField::After => body.after = map.next_value()?,
                        BodyField::BeforeSensitive => body.before_sensitive = map.next_value()?,
                        BodyField::AfterSensitive => body.after_sensitive = map.next_value()?,
                        BodyField::AfterUnknown => body.after_unknown = map.next_value()?,
                        BodyField::ReplacePaths => body.replace_paths = map.next_value()?,
                        BodyField::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(body)
            }
        }
        d.deserialize_map(Body(std::marker::PhantomData))
    }
}

/// An entry read for its address and actions alone (the normal plan's own drift list,
/// which driftwatch only compares with the refresh-only plan's): everything else in it is
/// skipped unparsed.
#[derive(Deserialize)]
pub(super) struct RawHead<'a> {
    #[serde(borrow)]
    pub address: Cow<'a, str>,
    #[serde(borrow, default)]
    pub previous_address: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub mode: Option<Cow<'a, str>>,
    #[serde(default)]
    pub deposed: Option<IgnoredAny>,
    #[serde(borrow)]
    pub change: RawActions<'a>,
}

#[derive(Deserialize)]
pub(super) struct RawActions<'a> {
    #[serde(borrow, default)]
    pub actions: Vec<Cow<'a, str>>,
}

/// One entry of `checks`: only the address and the status are read. Problem messages are
/// left alone, because a condition's message can interpolate any value.
#[derive(Deserialize)]
pub(super) struct RawCheck {
    #[serde(default)]
    pub address: Option<RawCheckAddress>,
    #[serde(default)]
    pub status: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct RawCheckAddress {
    #[serde(default)]
    pub to_display: Option<String>,
}

/// A `resource_changes` entry at the start of `entry` whose change is a no-op (and how
/// many bytes it took), read without parsing the change's
/// values (for a big plan, almost every entry, and most of its bytes): the members are
/// found by structure ([`super::structural::object_prefix`]), and everything that
/// [`RawChange`]'s own deserialization would use or check is given to serde_json: the
/// entry's own members, and in `change` the `actions` (which must come first, as in every
/// plan OpenTofu and Terraform write) and `importing`. The values after `actions` in a
/// no-op's change, which that deserialization skips, are checked for structure only (like
/// the document's skipped members). `None` for anything else (not a no-op, a key written
/// with escapes, a repeated member, a value serde refuses...): the caller then reads the
/// entry with [`RawChange`]'s deserialization, which gives the same result or the error.
pub(super) fn quick_no_op(entry: &[u8]) -> Option<(RawChange<'_>, usize)> {
    let (top, used) = super::structural::object_prefix(entry, b"change")?;
    let body = top.inner?;
    let mut address = None;
    let mut previous_address = None;
    let mut mode = None;
    let mut deposed = None;
    let mut action_reason = None;
    let mut change = None;
    for (key, value) in top.members {
        let slot = match key {
            b"\"address\"" => &mut address,
            b"\"previous_address\"" => &mut previous_address,
            b"\"mode\"" => &mut mode,
            b"\"deposed\"" => &mut deposed,
            b"\"action_reason\"" => &mut action_reason,
            b"\"change\"" => &mut change,
            _ if key.contains(&b'\\') => return None,
            _ => {
                // Unknown members: checked as serde would skip them.
                serde_json::from_slice::<IgnoredAny>(key).ok()?;
                serde_json::from_slice::<IgnoredAny>(value).ok()?;
                continue;
            }
        };
        if slot.replace(value).is_some() {
            return None;
        }
    }
    let text = |v: Option<&[u8]>| -> Option<Option<Cow<'_, str>>> {
        match v {
            None => Some(None),
            Some(v) => serde_json::from_slice::<Option<String>>(v)
                .ok()
                .map(|s| s.map(Cow::Owned)),
        }
    };
    // `change` must be there, and an object (then `body` holds its members).
    change?;
    let mut body = body.into_iter();
    let (key, actions) = body.next()?;
    if key != b"\"actions\"" {
        return None;
    }
    let actions: Vec<String> = serde_json::from_slice(actions).ok()?;
    if actions != ["no-op"] {
        return None;
    }
    let mut importing = None;
    for (key, value) in body {
        match key {
            b"\"importing\"" => {
                importing = serde_json::from_slice::<Option<IgnoredAny>>(value).ok()?;
            }
            b"\"actions\"" => return None,
            _ if key.contains(&b'\\') => return None,
            b"\"before\""
            | b"\"after\""
            | b"\"before_sensitive\""
            | b"\"after_sensitive\""
            | b"\"after_unknown\""
            | b"\"replace_paths\"" => {}
            _ => {
                serde_json::from_slice::<IgnoredAny>(key).ok()?;
            }
        }
    }
    let raw = RawChange {
        address: text(Some(address?))??,
        previous_address: text(previous_address)?,
        mode: text(mode)?,
        // A no-op's type is not needed (only drift reads it).
        kind: None,
        deposed: match deposed {
            None => None,
            Some(v) => serde_json::from_slice::<Option<IgnoredAny>>(v).ok()?,
        },
        action_reason: text(action_reason)?,
        change: RawChangeBody {
            actions: actions.into_iter().map(Cow::Owned).collect(),
            importing,
            ..RawChangeBody::default()
        },
    };
    Some((raw, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What both readings of an entry say, side by side.
    fn seen(raw: &RawChange<'_>) -> String {
        format!(
            "{} {:?} {:?} {} {:?} {:?} {} {}",
            raw.address,
            raw.previous_address,
            raw.mode,
            raw.deposed.is_some(),
            raw.action_reason,
            raw.change.actions,
            raw.change.importing.is_some(),
            raw.change.before.is_some() || raw.change.replace_paths.is_some(),
        )
    }

    fn slow(entry: &str) -> Option<String> {
        serde_json::from_str::<RawChange<'_>>(entry)
            .ok()
            .map(|raw| seen(&raw))
    }

    #[test]
    fn a_quick_no_op_reads_as_serde_does() {
        for entry in [
            r#"{"address":"a.b","mode":"managed","type":"a","change":{"actions":["no-op"],"before":{"x":[1,"]"]},"after":{"x":[1,"]"]},"after_unknown":{},"before_sensitive":false,"after_sensitive":{"x":true}}}"#,
            r#" { "address" : "a.b[\"k\"]" , "previous_address":"a.c", "index": "k",
                 "change": {"actions": ["no-op"], "importing": {"id": "i-1"}, "replace_paths": [["x"]]},
                 "action_reason": "because", "deposed": null } "#,
            r#"{"change":{"actions":["no-op"]},"address":"x.y","deposed":"0001","mode":"data"}"#,
            r#"{"address":"a.b","change":{"actions":["no-op"],"importing":null}}"#,
        ] {
            let (raw, used) = quick_no_op(entry.as_bytes()).unwrap_or_else(|| panic!("{entry}"));
            assert_eq!(used, entry.trim_end().len(), "{entry}");
            assert_eq!(Some(seen(&raw)), slow(entry), "{entry}");
            assert!(raw.change.before.is_none() && raw.change.replace_paths.is_none());
        }
    }

    #[test]
    fn anything_else_is_left_to_serde() {
        for entry in [
            // Not a no-op, or actions not first, or given twice.
            r#"{"address":"a.b","change":{"actions":["update"],"before":{},"after":{}}}"#,
            r#"{"address":"a.b","change":{"before":{},"actions":["no-op"]}}"#,
            r#"{"address":"a.b","change":{"actions":["no-op"],"actions":["update"]}}"#,
            r#"{"address":"a.b","change":{"actions":["no-op","create"]}}"#,
            // Keys with escapes, repeated members, missing or mistyped ones.
            r#"{"addr\u0065ss":"a.b","change":{"actions":["no-op"]}}"#,
            r#"{"address":"a.b","change":{"\u0061ctions":["no-op"]}}"#,
            r#"{"address":"a.b","address":"a.c","change":{"actions":["no-op"]}}"#,
            r#"{"change":{"actions":["no-op"]}}"#,
            r#"{"address":"a.b"}"#,
            r#"{"address":"a.b","change":null}"#,
            r#"{"address":null,"change":{"actions":["no-op"]}}"#,
            r#"{"address":"a.b","mode":1,"change":{"actions":["no-op"]}}"#,
            r#"{"address":"a.b","change":{"actions":["no-op"],"importing":tru}}"#,
            // Broken JSON in members serde reads or checks.
            r#"{"address":"a.b","type":tru,"change":{"actions":["no-op"]}}"#,
            r#"{"address":"a.b","change":{"actions":["no-op"],"extra\u00":1}}"#,
            r#"{"address":"a.b","change":{"actions":["no-op"]}"#,
            r#"{"address":"a.b","change":{"actions":["no-op"]]}"#,
            r#"["address"]"#,
        ] {
            assert!(quick_no_op(entry.as_bytes()).is_none(), "{entry}");
        }
    }
}
