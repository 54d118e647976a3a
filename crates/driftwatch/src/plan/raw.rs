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
