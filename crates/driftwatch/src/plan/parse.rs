//! From bytes to a [`Plan`], refusing anything that would make the report lie.
//!
//! Refused, each with its own error: state JSON (no plan at all), a `format_version` whose
//! major version is not 1, an errored plan (its drift list is partial), HCP/TFC "redacted"
//! plan JSON (a different format), and a normal plan given as the refresh-only plan (it
//! proposes changes, which a refresh-only plan never does): its own `resource_drift` only
//! holds the drift that touches a planned change, so reading it as the drift list would
//! hide the rest. Data sources and ephemeral resources in
//! `resource_drift` are skipped: a data source changing is the point of a data source.
//!
//! Secrets are removed here, before anything else sees the plan: every changed leaf is
//! checked against both sensitivity markers and the [`Masker`]'s secret names, and a secret
//! leaf keeps its path but loses its values. Error messages carry a file name and a
//! position, never serde's own text, which can quote the input.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path as FsPath;

use serde_json::Value;
use serde_json::value::RawValue;

use super::raw::{RawChange, RawCheck, RawDocument};
use super::{Action, ChangeEntry, DriftEntry, LeafDiff, Plan};
use crate::flatten::{Path, flatten};
use crate::mask::Masker;

/// Which of the two plans a document is supposed to be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PlanRole {
    /// `plan -refresh-only`: drift is read from it, with values.
    RefreshOnly,
    /// The normal plan: what the next apply does. Its own drift list is not used.
    #[default]
    Normal,
    /// A normal plan that is the only input: drift is read from its own `resource_drift`
    /// (which OpenTofu filters to drift that matters to the plan) and changes from its
    /// `resource_changes`.
    Combined,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{source_name}: cannot read: {error}")]
    Read {
        source_name: String,
        error: std::io::Error,
    },
    #[error("{source_name}: {what} at line {line}, column {column}")]
    Json {
        source_name: String,
        what: &'static str,
        line: usize,
        column: usize,
    },
    #[error(
        "{source_name}: this is state JSON, not a plan (save a plan with -out and read it with `show -json PLANFILE`)"
    )]
    State { source_name: String },
    #[error(
        "{source_name}: this is HCP/TFC redacted plan JSON, not `show -json` output; export the plan and run `show -json` on it"
    )]
    Redacted { source_name: String },
    #[error("{source_name}: not plan JSON (no format_version)")]
    NoFormatVersion { source_name: String },
    #[error("{source_name}: plan format_version {found} is not supported (driftwatch reads 1.x)")]
    FormatVersion { source_name: String, found: String },
    #[error(
        "{source_name}: the plan is errored (\"errored\": true); its drift list is incomplete, so there is nothing trustworthy to report"
    )]
    Errored { source_name: String },
    #[error(
        "{source_name}: given as the refresh-only plan, but it is a normal plan (it proposes changes: {address}: {action}); pass it with --plan, or save the refresh-only plan with `plan -refresh-only -out` (were the two plans swapped?)"
    )]
    NotRefreshOnly {
        source_name: String,
        address: String,
        action: String,
    },
}

/// Read a plan file into memory once and parse it.
pub fn read_plan_file(path: &FsPath, role: PlanRole, masker: &Masker) -> Result<Plan, PlanError> {
    let source_name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|error| PlanError::Read {
        source_name: source_name.clone(),
        error,
    })?;
    parse_plan(&bytes, &source_name, role, masker)
}

/// Parse `tofu show -json` output. `source_name` names the input in errors.
pub fn parse_plan(
    bytes: &[u8],
    source_name: &str,
    role: PlanRole,
    masker: &Masker,
) -> Result<Plan, PlanError> {
    let name = || source_name.to_owned();
    let doc: RawDocument<'_> = serde_json::from_slice(bytes).map_err(|e| PlanError::Json {
        source_name: name(),
        what: match e.classify() {
            serde_json::error::Category::Data => "unexpected plan JSON structure",
            serde_json::error::Category::Eof => "truncated JSON",
            _ => "invalid JSON",
        },
        line: e.line(),
        column: e.column(),
    })?;

    if doc.plan_format_version.is_some() || doc.provider_schemas.is_some() {
        return Err(PlanError::Redacted {
            source_name: name(),
        });
    }
    let looks_like_plan = doc.resource_drift.is_some()
        || doc.resource_changes.is_some()
        || doc.planned_values.is_some();
    if !looks_like_plan && (doc.values.is_some() || doc.lineage.is_some() || doc.serial.is_some()) {
        return Err(PlanError::State {
            source_name: name(),
        });
    }
    let Some(version) = doc.format_version.as_deref() else {
        return Err(PlanError::NoFormatVersion {
            source_name: name(),
        });
    };
    if version.split('.').next() != Some("1") {
        return Err(PlanError::FormatVersion {
            source_name: name(),
            found: printable_version(version),
        });
    }
    if doc.errored == Some(true) {
        return Err(PlanError::Errored {
            source_name: name(),
        });
    }

    let mut plan = Plan {
        source: name(),
        role,
        format_version: version.to_owned(),
        incomplete: doc.complete == Some(false),
        failed_checks: failed_checks(doc.checks),
        ..Plan::default()
    };

    for raw in doc.resource_drift.unwrap_or_default() {
        if !is_current_managed(&raw) {
            plan.skipped_drift += 1;
            continue;
        }
        let action = Action::from_actions(&raw.change.actions);
        let diffs = if role != PlanRole::Normal && action == Action::Update {
            drift_diffs(&raw, masker, source_name)?
        } else {
            Vec::new()
        };
        plan.drift.push(DriftEntry {
            address: raw.address.into_owned(),
            previous_address: raw.previous_address.map(Cow::into_owned),
            action,
            diffs,
        });
    }

    for raw in doc.resource_changes.unwrap_or_default() {
        if raw.mode.as_deref().is_some_and(|m| m != "managed") {
            continue;
        }
        let action = Action::from_actions(&raw.change.actions);
        // OpenTofu and Terraform write no resource_changes at all in a refresh-only plan
        // (they refuse one that proposes any change): a proposed change means this is a
        // normal plan. An entry that is a no-op proves less (generated plans list them),
        // so it is only noted, by the classifier.
        if role == PlanRole::RefreshOnly && action != Action::NoOp {
            return Err(PlanError::NotRefreshOnly {
                source_name: name(),
                address: raw.address.into_owned(),
                action: action.as_str().to_owned(),
            });
        }
        let changed_paths = if matches!(action, Action::Update | Action::Replace) {
            changed_paths(&raw, source_name)?
        } else {
            Vec::new()
        };
        let replace_paths = raw
            .change
            .replace_paths
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter_map(|steps| Path::from_json_steps(steps))
            .collect();
        plan.changes.push(ChangeEntry {
            address: raw.address.into_owned(),
            previous_address: raw.previous_address.map(Cow::into_owned),
            action,
            action_reason: raw.action_reason.map(Cow::into_owned),
            deposed: raw.deposed.is_some(),
            importing: raw.change.importing.is_some(),
            replace_paths,
            changed_paths,
        });
    }
    Ok(plan)
}

/// Addresses of failed or errored checks; anything unreadable is skipped, not fatal.
fn failed_checks(raw: Option<&RawValue>) -> Vec<String> {
    let Some(raw) = raw else { return Vec::new() };
    let Ok(checks) = serde_json::from_str::<Vec<RawCheck>>(raw.get()) else {
        return Vec::new();
    };
    checks
        .into_iter()
        .filter(|c| matches!(c.status.as_deref(), Some("fail" | "error")))
        .map(|c| {
            let address = c
                .address
                .and_then(|a| a.to_display)
                .unwrap_or_else(|| "(unnamed)".to_owned());
            format!("{address} ({})", c.status.unwrap_or_default())
        })
        .collect()
}

fn is_current_managed(raw: &RawChange<'_>) -> bool {
    raw.mode.as_deref().is_none_or(|m| m == "managed") && raw.deposed.is_none()
}

/// A version string is echoed only when it looks like one; anything else could be content.
fn printable_version(version: &str) -> String {
    if !version.is_empty()
        && version.len() <= 16
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    {
        format!("\"{version}\"")
    } else {
        "(unrecognised)".to_owned()
    }
}

fn value_of(raw: Option<&RawValue>, source_name: &str) -> Result<Value, PlanError> {
    match raw {
        None => Ok(Value::Null),
        Some(raw) => serde_json::from_str(raw.get()).map_err(|e| PlanError::Json {
            source_name: source_name.to_owned(),
            what: "invalid value inside a change",
            line: e.line(),
            column: e.column(),
        }),
    }
}

/// The marker to use for one side: a missing marker is harmless only when the value on
/// that side is null (nothing to hide); otherwise it is treated as "hide everything".
fn marker_of(
    raw: Option<&RawValue>,
    value: &Value,
    source_name: &str,
) -> Result<Option<Value>, PlanError> {
    match raw {
        Some(_) => Ok(Some(value_of(raw, source_name)?)),
        None if value.is_null() => Ok(Some(Value::Bool(false))),
        None => Ok(None),
    }
}

/// Every leaf that differs between `before` and `after`, secrets without values.
fn drift_diffs(
    raw: &RawChange<'_>,
    masker: &Masker,
    source_name: &str,
) -> Result<Vec<LeafDiff>, PlanError> {
    let before = value_of(raw.change.before, source_name)?;
    let after = value_of(raw.change.after, source_name)?;
    let before_marker = marker_of(raw.change.before_sensitive, &before, source_name)?;
    let after_marker = marker_of(raw.change.after_sensitive, &after, source_name)?;
    let mut out = Vec::new();
    for (path, old, new) in leaf_changes(&before, &after) {
        let secret = masker.is_secret(&path, before_marker.as_ref(), after_marker.as_ref());
        out.push(if secret {
            LeafDiff {
                path,
                before: None,
                after: None,
                sensitive: true,
            }
        } else {
            LeafDiff {
                path,
                before: Some(old.cloned().unwrap_or(Value::Null)),
                after: Some(new.cloned().unwrap_or(Value::Null)),
                sensitive: false,
            }
        });
    }
    Ok(out)
}

/// Paths that differ, without values (for pending changes in the normal plan).
///
/// Attributes that are unknown until apply (`after_unknown` true) are left out: they are
/// "known after apply", not a value the apply sets back, and OpenTofu leaves them out of
/// `after`, which would otherwise look like "set to null".
fn changed_paths(raw: &RawChange<'_>, source_name: &str) -> Result<Vec<Path>, PlanError> {
    let before = value_of(raw.change.before, source_name)?;
    let after = value_of(raw.change.after, source_name)?;
    let unknown = value_of(raw.change.after_unknown, source_name).unwrap_or(Value::Null);
    let unknown_paths: Vec<Path> = flatten(&unknown)
        .into_iter()
        .filter(|(_, v)| **v == Value::Bool(true))
        .map(|(p, _)| p)
        .collect();
    let whole_unknown = unknown == Value::Bool(true);
    Ok(leaf_changes(&before, &after)
        .into_iter()
        .map(|(path, _, _)| path)
        .filter(|path| !whole_unknown && !unknown_paths.iter().any(|u| u.covers(path)))
        .collect())
}

type Change<'v> = (Path, Option<&'v Value>, Option<&'v Value>);

/// Join the flattened sides on path and keep the leaves that differ, in path order.
pub(crate) fn leaf_changes<'v>(before: &'v Value, after: &'v Value) -> Vec<Change<'v>> {
    let mut joined: BTreeMap<Path, (Option<&Value>, Option<&Value>)> = BTreeMap::new();
    for (path, value) in flatten(before) {
        joined.entry(path).or_default().0 = Some(value);
    }
    for (path, value) in flatten(after) {
        joined.entry(path).or_default().1 = Some(value);
    }
    joined
        .into_iter()
        .filter(|(_, (old, new))| old != new)
        .map(|(path, (old, new))| (path, old, new))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masker() -> Masker {
        Masker::new(&[]).unwrap()
    }

    fn parse(text: &str, role: PlanRole) -> Result<Plan, PlanError> {
        parse_plan(text.as_bytes(), "t.json", role, &masker())
    }

    #[test]
    fn refuses_state_errored_and_old_versions() {
        let state =
            r#"{"format_version":"1.0","terraform_version":"1.8.0","values":{"root_module":{}}}"#;
        assert!(matches!(
            parse(state, PlanRole::Normal),
            Err(PlanError::State { .. })
        ));
        let raw_state = r#"{"version":4,"serial":3,"lineage":"x","resources":[]}"#;
        assert!(matches!(
            parse(raw_state, PlanRole::Normal),
            Err(PlanError::State { .. })
        ));
        let old = r#"{"format_version":"0.2","planned_values":{}}"#;
        let err = parse(old, PlanRole::Normal).unwrap_err();
        assert!(err.to_string().contains("\"0.2\""), "{err}");
        let errored =
            r#"{"format_version":"1.2","errored":true,"planned_values":{"root_module":{}}}"#;
        assert!(matches!(
            parse(errored, PlanRole::Normal),
            Err(PlanError::Errored { .. })
        ));
        let redacted = r#"{"plan_format_version":"1.0","resource_drift":[]}"#;
        assert!(matches!(
            parse(redacted, PlanRole::Normal),
            Err(PlanError::Redacted { .. })
        ));
        assert!(matches!(
            parse("{", PlanRole::Normal),
            Err(PlanError::Json { .. })
        ));
    }

    #[test]
    fn json_errors_do_not_quote_the_input() {
        let text = r#"{"format_version":"1.2","resource_drift":[{"address":"a","change":{"actions":"CANARY-x"}}]}"#;
        let msg = parse(text, PlanRole::RefreshOnly).unwrap_err().to_string();
        assert!(!msg.contains("CANARY"), "{msg}");
        assert!(msg.starts_with("t.json: "), "{msg}");
    }

    #[test]
    fn drift_is_diffed_and_masked_at_parse_time() {
        let text = r#"{"format_version":"1.2","resource_drift":[
          {"address":"k.db","mode":"managed","change":{"actions":["update"],
            "before":{"data":{"password":"old-pw","user":"app"},"note":"a"},
            "after":{"data":{"password":"new-pw","user":"app"},"note":"b"},
            "before_sensitive":{"data":true},"after_sensitive":{"data":true}}},
          {"address":"data.x.y","mode":"data","change":{"actions":["update"],"before":{},"after":{}}}
        ]}"#;
        let plan = parse(text, PlanRole::RefreshOnly).unwrap();
        assert_eq!(plan.skipped_drift, 1);
        let diffs = &plan.drift[0].diffs;
        assert_eq!(diffs.len(), 2);
        assert_eq!(diffs[0].path.to_string(), "data.password");
        assert!(diffs[0].sensitive && diffs[0].before.is_none() && diffs[0].after.is_none());
        assert_eq!(diffs[1].path.to_string(), "note");
        assert_eq!(diffs[1].after, Some(Value::String("b".into())));
        assert!(!format!("{plan:?}").contains("-pw"));
    }

    #[test]
    fn missing_markers_fail_closed() {
        let text = r#"{"format_version":"1.2","resource_drift":[
          {"address":"a.b","change":{"actions":["update"],"before":{"x":"1"},"after":{"x":"2"}}}]}"#;
        let plan = parse(text, PlanRole::RefreshOnly).unwrap();
        assert!(plan.drift[0].diffs[0].sensitive);
    }

    #[test]
    fn unknown_after_values_are_not_changed_paths() {
        let text = r#"{"format_version":"1.2","resource_changes":[
          {"address":"a.b","mode":"managed","change":{"actions":["update"],
           "before":{"id":"1","v":"x","tags":["a"]},"after":{"v":"y","tags":[null]},
           "after_unknown":{"id":true,"tags":[true]}}}]}"#;
        let plan = parse(text, PlanRole::Normal).unwrap();
        let paths: Vec<String> = plan.changes[0]
            .changed_paths
            .iter()
            .map(Path::to_string)
            .collect();
        assert_eq!(paths, vec!["v"]);
    }

    #[test]
    fn damaged_input_is_an_error_never_a_panic() {
        let whole: &[u8] = include_bytes!("../../tests/fixtures/shop-prod/refresh_only.json");
        for cut in (0..whole.len()).step_by(61) {
            assert!(parse_plan(&whole[..cut], "t", PlanRole::RefreshOnly, &masker()).is_err());
        }
        // Flip bytes here and there: any outcome but a panic is fine.
        let mut damaged = whole.to_vec();
        for (n, at) in (0..damaged.len()).step_by(89).enumerate() {
            damaged[at] = b"{}[]\",:0tn"[n % 10];
            if let Ok(plan) = parse_plan(&damaged, "t", PlanRole::Combined, &masker()) {
                // Whatever parses must also classify and render.
                let rules = crate::rules::Rules::default();
                let options = crate::classify::Options::default();
                let report = crate::classify::classify("s", &plan, Some(&plan), &rules, &options);
                let _ = crate::report::text::render(&report, true);
                let meta = crate::report::json::Meta {
                    exit_code: 2,
                    generated_at: "2026-10-28T00:00:00Z",
                    timings: None,
                };
                let _ = crate::report::json::render(&report, meta);
                let _ = crate::report::markdown::render(&report, "2026-10-28T00:00:00Z");
            }
        }
    }

    #[test]
    fn refresh_only_with_changes_is_refused() {
        let text = r#"{"format_version":"1.2","resource_changes":[
          {"address":"a.b","mode":"managed","change":{"actions":["create"],"before":null,"after":{}}}]}"#;
        assert!(matches!(
            parse(text, PlanRole::RefreshOnly),
            Err(PlanError::NotRefreshOnly { .. })
        ));
        // No-op entries alone are kept (the classifier notes them).
        let quiet = r#"{"format_version":"1.2","resource_changes":[
          {"address":"a.b","mode":"managed","change":{"actions":["no-op"],"before":{},"after":{}}}]}"#;
        let plan = parse(quiet, PlanRole::RefreshOnly).unwrap();
        assert_eq!(plan.changes.len(), 1);
        assert_eq!(plan.role, PlanRole::RefreshOnly);
        assert_eq!(
            parse(text, PlanRole::Normal).unwrap().changes[0].action,
            Action::Create
        );
    }
}
