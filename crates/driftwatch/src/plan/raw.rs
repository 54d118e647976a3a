//! The wire format of `tofu show -json`, borrowed from the input buffer.
//!
//! Only the fields driftwatch uses are declared; serde skips every other key without
//! building it (`planned_values`, `prior_state`, `configuration` and `variables` are the
//! bulk of a big plan and hold plain-text secrets, so not materialising them is both faster
//! and safer). Values inside changes stay as borrowed [`RawValue`] slices until the parser
//! decides which of them to look at. Every key is optional, because OpenTofu omits empty
//! ones; unknown keys are tolerated, as the format's minor-version promise requires.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

#[derive(Deserialize)]
pub(super) struct RawDocument<'a> {
    #[serde(borrow, default)]
    pub format_version: Option<Cow<'a, str>>,
    #[serde(default)]
    pub errored: Option<bool>,
    #[serde(default)]
    pub complete: Option<bool>,
    #[serde(borrow, default)]
    pub resource_drift: Option<Vec<RawChange<'a>>>,
    #[serde(borrow, default)]
    pub resource_changes: Option<Vec<RawChange<'a>>>,
    #[serde(default)]
    pub planned_values: Option<IgnoredAny>,
    /// Kept raw and read leniently: a check result of an unexpected shape must not make a
    /// valid plan unreadable.
    #[serde(borrow, default)]
    pub checks: Option<&'a RawValue>,
    // Marks of documents that are not plans.
    #[serde(default)]
    pub plan_format_version: Option<IgnoredAny>,
    #[serde(default)]
    pub provider_schemas: Option<IgnoredAny>,
    #[serde(default)]
    pub values: Option<IgnoredAny>,
    #[serde(default)]
    pub lineage: Option<IgnoredAny>,
    #[serde(default)]
    pub serial: Option<IgnoredAny>,
}

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

#[derive(Deserialize)]
pub(super) struct RawChangeBody<'a> {
    #[serde(borrow, default)]
    pub actions: Vec<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub before: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub after: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub before_sensitive: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub after_sensitive: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub after_unknown: Option<&'a RawValue>,
    #[serde(default)]
    pub replace_paths: Option<Vec<Vec<serde_json::Value>>>,
    #[serde(default)]
    pub importing: Option<IgnoredAny>,
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
