//! The Service kind's declared fields: checking them and parsing them into a
//! [`ServiceSpec`].
//!
//! Pure: no host access. Everything a repository can put in `desired` for a
//! Service is checked here, so a unit name can never reach `systemctl` as an
//! option (`--root=...`) and a notification list is a list of resource
//! references, never anything the engine would have to guess at.

use std::collections::HashSet;
use std::time::Duration;

use datum_core::{DeclaredFields, ResourceId};
use serde_json::Value;

use crate::FieldError;
use crate::common::fields::{bool_field, name_field, type_name, unknown_fields};

/// How long verification watches a unit when `settle:` is not declared.
///
/// Three seconds, because what it must catch happens within that time on a
/// healthy machine: a service that dies on a bad configuration usually exits
/// within its first second, and systemd's default `RestartSec=100ms` means a
/// `Restart=on-failure` unit that crash-loops has moved its restart counter
/// several times within three seconds (its start limit of 5 in 10 s has not
/// even been reached). Longer would add seconds to every pass for every
/// changed service; shorter would miss a service that reads its configuration
/// lazily. A unit known to fail later sets `settle:` itself.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(3);

/// The longest `settle:` accepted: verification holds the pass while it
/// watches, and anything this long is a health check in disguise.
pub const MAX_SETTLE: Duration = Duration::from_secs(300);

/// How long a start, stop, restart or reload waits for systemd's job when
/// `timeout:` is not declared: systemd's own default start and stop
/// timeouts are 90 s, so a unit that keeps to them is done before this.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The longest `timeout:` accepted: the pass holds the root lock while it
/// waits, and every other apply on the machine waits for it.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// Unit types a Service may name. A name without one of these suffixes is a
/// service (`nginx` means `nginx.service`), as `systemctl` itself assumes.
const UNIT_SUFFIXES: &[&str] = &[
    ".service",
    ".socket",
    ".timer",
    ".path",
    ".target",
    ".mount",
    ".automount",
];

/// Whether the unit should be running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Running,
    Stopped,
}

impl RunState {
    pub fn word(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Stopped => "stopped",
        }
    }
}

/// A Service declaration, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    /// The full unit name, suffix included (`nginx.service`).
    pub unit: String,
    /// `None`: whether it runs is not managed.
    pub state: Option<RunState>,
    /// `None`: whether it starts at boot is not managed.
    pub enabled: Option<bool>,
    /// Resources whose change means this unit must reload (engine-level).
    pub reload_on: Vec<ResourceId>,
    /// Resources whose change means this unit must restart (engine-level).
    pub restart_on: Vec<ResourceId>,
    /// How long verification watches the unit.
    pub settle: Duration,
    /// How long a start, stop, restart or reload waits for systemd's job.
    pub timeout: Duration,
}

/// A Service's `desired` as written in a manifest: the type its JSON Schema
/// is derived from (held to `FIELDS` and to `ServiceSpec::parse` below).
#[derive(schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    transform = datum_core::schema::optional_never_null,
    title = "Service",
    description = "A systemd unit: whether it runs and starts at boot, and which resources reload or restart it when they change.",
    extend("anyOf" = [{"required": ["state"]}, {"required": ["enabled"]}])
)]
pub struct ServiceDeclaration {
    /// The unit (default: the resource's name); `.service` is added when no
    /// suffix is given.
    #[schemars(with = "Option<UnitName>")]
    pub name: Option<String>,
    /// Whether the unit runs now (not managed when left out).
    #[schemars(with = "Option<RunStateWord>")]
    pub state: Option<String>,
    /// Whether the unit starts at boot.
    pub enabled: Option<bool>,
    /// Resources whose change reloads the unit (after their group validated).
    #[schemars(with = "Option<UniqueReferences>")]
    pub reload_on: Option<Vec<String>>,
    /// Resources whose change restarts the unit.
    #[schemars(with = "Option<UniqueReferences>")]
    pub restart_on: Option<Vec<String>>,
    /// How long verification watches the unit stay up (default 3s).
    #[schemars(with = "Option<crate::common::schema::Duration>")]
    pub settle: Option<String>,
    /// How long a start, stop, restart or reload waits for systemd to finish
    /// the job (default 120s, at most 1h); the pass holds the root lock
    /// meanwhile.
    #[schemars(with = "Option<crate::common::schema::Duration>")]
    pub timeout: Option<String>,
}

/// A value of the manifest schema (see the declaration type above).
pub struct UnitName;

impl schemars::JsonSchema for UnitName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "UnitName".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[A-Za-z0-9:_@\\\\][A-Za-z0-9:_.@\\\\-]{0,254}$",
            "description": "A systemd unit name (letters, digits and `:-_.@\\`), such as nginx or getty@tty1.service.",
        })
    }
}

/// A value of the manifest schema (see the declaration type above).
pub struct RunStateWord;

impl schemars::JsonSchema for RunStateWord {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RunState".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "enum": ["running", "stopped"] })
    }
}

/// A value of the manifest schema (see the declaration type above).
pub struct UniqueReferences;

impl schemars::JsonSchema for UniqueReferences {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "UniqueReferences".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let item = generator.subschema_for::<datum_core::ReferenceText>();
        schemars::json_schema!({ "type": "array", "items": item, "uniqueItems": true })
    }
}

const FIELDS: &[&str] = &[
    "name",
    "state",
    "enabled",
    "reload_on",
    "restart_on",
    "settle",
    "timeout",
];

impl ServiceSpec {
    /// Parses `desired`. `default_name` (the resource's own name) is the unit
    /// when `desired.name` is absent. Returns every problem found.
    pub fn parse(
        desired: &dyn DeclaredFields,
        default_name: &str,
    ) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        if desired.mapping().is_err() {
            return Err(vec![FieldError::new(
                &[],
                "a Service's `desired` must be a mapping with at least `state` or `enabled`",
            )]);
        }
        errors.extend(unknown_fields("Service", desired, FIELDS));

        let unit = name_field(desired, default_name, unit_name, &mut errors);

        let state = match desired.get("state") {
            None => None,
            Some(Value::String(s)) if s == "running" => Some(RunState::Running),
            Some(Value::String(s)) if s == "stopped" => Some(RunState::Stopped),
            Some(Value::String(s)) => {
                errors.push(FieldError::new(
                    &["state"],
                    format!("`state` must be `running` or `stopped`, not `{s}`"),
                ));
                None
            }
            Some(other) => {
                errors.push(FieldError::new(
                    &["state"],
                    format!(
                        "`state` must be `running` or `stopped`, found {}",
                        type_name(other)
                    ),
                ));
                None
            }
        };

        let enabled = bool_field(desired, "enabled", &mut errors);

        let reload_on = references(desired.get("reload_on"), "reload_on", &mut errors);
        let restart_on = references(desired.get("restart_on"), "restart_on", &mut errors);
        for id in reload_on.iter().filter(|id| restart_on.contains(id)) {
            errors.push(FieldError::new(
                &["reload_on"],
                format!(
                    "{id} is in both `reload_on` and `restart_on`: a restart already reloads, list it once"
                ),
            ));
        }

        let settle = match desired.get("settle") {
            None => Some(DEFAULT_SETTLE),
            Some(Value::String(s)) => parse_duration(s)
                .map_err(|m| errors.push(FieldError::new(&["settle"], m)))
                .ok(),
            Some(other) => {
                errors.push(FieldError::new(
                    &["settle"],
                    format!(
                        "`settle` must be a duration such as \"3s\" or \"500ms\", found {}",
                        type_name(other)
                    ),
                ));
                None
            }
        };

        let timeout = match desired.get("timeout") {
            None => Some(DEFAULT_TIMEOUT),
            Some(Value::String(s)) => parse_timeout(s)
                .map_err(|m| errors.push(FieldError::new(&["timeout"], m)))
                .ok(),
            Some(other) => {
                errors.push(FieldError::new(
                    &["timeout"],
                    format!(
                        "`timeout` must be a duration such as \"2m\" or \"30s\", found {}",
                        type_name(other)
                    ),
                ));
                None
            }
        };

        if state.is_none() && enabled.is_none() && errors.is_empty() {
            errors.push(FieldError::new(
                &[],
                "a Service declares nothing to manage: give it `state` (running or stopped), `enabled` (true or false), or both",
            ));
        }

        match (unit, settle, timeout) {
            (Some(unit), Some(settle), Some(timeout)) if errors.is_empty() => Ok(ServiceSpec {
                unit,
                state,
                enabled,
                reload_on,
                restart_on,
                settle,
                timeout,
            }),
            _ => Err(errors),
        }
    }
}

/// The full unit name for a declared one: checked, `.service` added when the
/// name has no unit suffix.
///
/// Only the characters systemd allows in unit names are accepted, and a name
/// may not start with `-`, so it can never be read by `systemctl` as an
/// option.
pub fn unit_name(declared: &str) -> Result<String, String> {
    if declared.is_empty() {
        return Err("the unit name must not be empty".to_owned());
    }
    if declared.starts_with('-') || declared.starts_with('.') {
        return Err(format!(
            "unit name `{declared}` must start with a letter or digit"
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || ":-_.@\\".contains(c);
    if let Some(bad) = declared.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "unit name `{declared}` contains `{}`: systemd unit names use letters, digits and `:-_.@\\` only",
            bad.escape_default()
        ));
    }
    // systemd's own limit on unit names.
    if declared.len() > 255 {
        return Err(format!(
            "unit name `{declared}` is longer than 255 characters"
        ));
    }
    let full = if UNIT_SUFFIXES.iter().any(|s| declared.ends_with(s)) {
        declared.to_owned()
    } else {
        let full = format!("{declared}.service");
        if full.len() > 255 {
            return Err(format!("unit name `{full}` is longer than 255 characters"));
        }
        full
    };
    // A template (`getty@.service`) is no unit systemd can show, start or
    // stop (`systemctl show` refuses its name): only its instances are.
    let stem = full
        .rsplit_once('.')
        .map_or(full.as_str(), |(stem, _)| stem);
    if let Some((prefix, instance)) = stem.split_once('@') {
        if prefix.is_empty() {
            return Err(format!("unit name `{full}` has nothing before `@`"));
        }
        if instance.is_empty() {
            return Err(format!(
                "unit `{full}` is a template: systemd runs, starts and reports only its instances; name one (`{prefix}@NAME`)"
            ));
        }
    }
    Ok(full)
}

/// Parses `500ms`, `3s`, `1m30s` (humantime's syntax), between 0 and
/// [`MAX_SETTLE`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    // The same syntax as a class's `interval` and the command line's
    // durations (`500ms`, `3s`, `1m30s`).
    let duration = humantime::parse_duration(text).map_err(|e| {
        format!("`settle` \"{text}\" is not a duration ({e}): write it like \"3s\", \"500ms\" or \"1m30s\"")
    })?;
    if duration > MAX_SETTLE {
        return Err(format!(
            "`settle` \"{text}\" is longer than {}s: verification is not monitoring",
            MAX_SETTLE.as_secs()
        ));
    }
    Ok(duration)
}

/// Parses a `timeout:` (humantime's syntax), more than 0 and at most
/// [`MAX_TIMEOUT`].
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| {
        format!("`timeout` \"{text}\" is not a duration ({e}): write it like \"2m\", \"30s\" or \"1m30s\"")
    })?;
    if duration.is_zero() {
        return Err(format!(
            "`timeout` \"{text}\" is zero: no job finishes in no time"
        ));
    }
    if duration > MAX_TIMEOUT {
        return Err(format!(
            "`timeout` \"{text}\" is longer than {}: the pass holds the root lock while it waits",
            humantime::format_duration(MAX_TIMEOUT)
        ));
    }
    Ok(duration)
}

/// Parses a list of `Kind/name` references; problems go to `errors`.
fn references(value: Option<&Value>, field: &str, errors: &mut Vec<FieldError>) -> Vec<ResourceId> {
    let Some(value) = value else {
        return Vec::new();
    };
    let Some(items) = value.as_array() else {
        errors.push(FieldError::new(
            &[field],
            format!(
                "`{field}` must be a list of resource references such as [File/nginx-conf], found {}",
                type_name(value)
            ),
        ));
        return Vec::new();
    };
    let mut ids = Vec::new();
    // The ids listed so far, for the duplicate check: looking in `ids` was
    // quadratic in the list (a Service reloaded on 20,000 Files, parsed by
    // the compile's check, the pass's declaration and its notifications).
    let mut seen: HashSet<ResourceId> = HashSet::new();
    for (index, item) in items.iter().enumerate() {
        let position = index.to_string();
        match item.as_str().map(ResourceId::parse) {
            Some(Ok(id)) if !seen.insert(id.clone()) => errors.push(FieldError::new(
                &[field, &position],
                format!("{id} is listed twice in `{field}`"),
            )),
            Some(Ok(id)) => ids.push(id),
            Some(Err(e)) => errors.push(FieldError::new(&[field, &position], e.to_string())),
            None => errors.push(FieldError::new(
                &[field, &position],
                format!(
                    "each `{field}` entry must be a reference such as File/nginx-conf, found {}",
                    type_name(item)
                ),
            )),
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(|e| e.path.join(".")).collect()
    }

    #[test]
    fn the_declaration_type_has_the_field_table_and_agrees_with_check() {
        use crate::common::schema;
        let p = crate::service::ServiceProvider;
        let schema = crate::Provider::declaration_schema(&p, &mut schema::generator());
        let (names, required) = schema::fields_of(&schema);
        let mut want: Vec<&str> = FIELDS.to_vec();
        want.sort();
        assert_eq!(names, want);
        assert_eq!(required, [] as [&str; 0]);
        let cases = [
            json!({"state": "running"}),
            json!({"enabled": false}),
            json!({"name": "getty@tty1", "state": "stopped", "enabled": true, "settle": "1s"}),
            json!({"state": "running", "reload_on": ["File/nginx-conf", "File[site]"], "restart_on": ["Package/nginx"]}),
            json!({}),
            json!({"name": "nginx"}),
            json!({"state": "started"}),
            json!({"state": "running", "enabled": "yes"}),
            json!({"state": "running", "name": "-x"}),
            json!({"state": "running", "name": "a b"}),
            json!({"state": "running", "reload_on": "File/x"}),
            json!({"state": "running", "reload_on": ["nope"]}),
            json!({"state": "running", "reload_on": ["File/a", "File/a"]}),
            json!({"state": "running", "settle": 3}),
            json!({"state": "running", "user": "root"}),
        ];
        schema::agrees_with_check(&p, &cases).unwrap();
    }

    #[test]
    fn a_full_declaration_parses() {
        let spec = ServiceSpec::parse(
            &json!({
                "name": "nginx",
                "state": "running",
                "enabled": true,
                "reload_on": ["File/nginx-conf", "File[site]"],
                "restart_on": ["Package/nginx"],
                "settle": "500ms",
            }),
            "web",
        )
        .unwrap();
        assert_eq!(spec.unit, "nginx.service");
        assert_eq!(spec.state, Some(RunState::Running));
        assert_eq!(spec.enabled, Some(true));
        assert_eq!(
            spec.reload_on,
            vec![
                ResourceId::new("File", "nginx-conf"),
                ResourceId::new("File", "site")
            ]
        );
        assert_eq!(spec.restart_on, vec![ResourceId::new("Package", "nginx")]);
        assert_eq!(spec.settle, Duration::from_millis(500));
    }

    #[test]
    fn the_resource_name_is_the_unit_when_name_is_absent() {
        let spec = ServiceSpec::parse(&json!({"enabled": false}), "ssh.socket").unwrap();
        assert_eq!(spec.unit, "ssh.socket");
        assert_eq!(spec.state, None);
        assert_eq!(spec.settle, DEFAULT_SETTLE);
        assert_eq!(spec.timeout, DEFAULT_TIMEOUT);
    }

    /// How long a job is waited for: a duration, more than zero, at most an
    /// hour (the pass holds the root lock meanwhile).
    #[test]
    fn timeout_is_a_bounded_duration() {
        let parse = |t: Value| ServiceSpec::parse(&json!({"state": "stopped", "timeout": t}), "x");
        assert_eq!(
            parse(json!("5m")).unwrap().timeout,
            Duration::from_secs(300)
        );
        for (bad, says) in [
            (json!("0s"), "is zero"),
            (json!("2h"), "longer than 1h"),
            (json!("soon"), "is not a duration"),
            (json!(30), "must be a duration"),
        ] {
            let errors = parse(bad.clone()).unwrap_err();
            assert!(
                errors.iter().any(|e| e.to_string().contains(says)),
                "{bad}: {errors:?}"
            );
        }
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let errors = ServiceSpec::parse(
            &json!({
                "name": "--root=/tmp",
                "state": "started",
                "enabled": "yes",
                "reload_on": ["nginx.conf", 3],
                "restart_on": "File/x",
                "settle": "soon",
                "user": "root",
            }),
            "x",
        )
        .unwrap_err();
        let mut got = paths(&errors);
        got.sort();
        assert_eq!(
            got,
            [
                "enabled",
                "name",
                "reload_on.0",
                "reload_on.1",
                "restart_on",
                "settle",
                "state",
                "user"
            ]
        );
    }

    #[test]
    fn a_declaration_that_manages_nothing_is_refused() {
        let errors = ServiceSpec::parse(&json!({"name": "nginx"}), "x").unwrap_err();
        assert!(errors[0].message.contains("declares nothing"), "{errors:?}");
        assert!(ServiceSpec::parse(&json!("running"), "x").is_err());
    }

    #[test]
    fn a_reference_in_both_lists_is_refused() {
        let errors = ServiceSpec::parse(
            &json!({"state": "running", "reload_on": ["File/a"], "restart_on": ["File/a"]}),
            "x",
        )
        .unwrap_err();
        assert!(errors[0].message.contains("File[a]"), "{errors:?}");
        let errors = ServiceSpec::parse(
            &json!({"state": "running", "reload_on": ["File/a", "File[a]"]}),
            "x",
        )
        .unwrap_err();
        assert_eq!(paths(&errors), ["reload_on.1"]);
    }

    #[test]
    fn unit_names_get_a_suffix_and_never_look_like_options() {
        assert_eq!(unit_name("nginx").unwrap(), "nginx.service");
        assert_eq!(unit_name("getty@tty1").unwrap(), "getty@tty1.service");
        assert_eq!(unit_name("apt-daily.timer").unwrap(), "apt-daily.timer");
        assert_eq!(unit_name("php8.2-fpm").unwrap(), "php8.2-fpm.service");
        for bad in ["", "-H", "--now", "a b", "a/b", "x;rm", ".hidden", "é"] {
            assert!(unit_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(unit_name(&"a".repeat(250)).is_err());
    }

    /// `systemctl show getty@.service` fails ("neither a valid invocation ID
    /// nor unit name"), so a template passed lint and then failed every
    /// plan, apply and check at observe.
    #[test]
    fn a_template_without_an_instance_is_refused_naming_what_to_write() {
        for template in ["getty@", "getty@.service", "getty@.timer"] {
            let err = unit_name(template).unwrap_err();
            assert!(
                err.contains("is a template") && err.contains("`getty@NAME`"),
                "{template}: {err}"
            );
        }
        assert!(
            unit_name("@tty1")
                .unwrap_err()
                .contains("nothing before `@`")
        );
        assert_eq!(
            unit_name("openvpn@site-a.b").unwrap(),
            "openvpn@site-a.b.service"
        );
        assert_eq!(
            unit_name("systemd-fsck@dev-disk-by\\x2duuid-1.service").unwrap(),
            "systemd-fsck@dev-disk-by\\x2duuid-1.service"
        );
    }

    #[test]
    fn durations_parse_with_a_unit_and_a_ceiling() {
        assert_eq!(parse_duration("3s").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        // As `interval` accepts it.
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        for bad in ["3", "s", "-1s", "soon", "1h", "10m", "5m1s", ""] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    /// A long `reload_on` (checked for duplicates through a set of the ids
    /// seen, not the list: 4276bb8) keeps its order, and a
    /// duplicate is still named at its position.
    #[test]
    fn a_long_list_of_references_names_its_duplicate_at_its_position() {
        const N: usize = 40_000;
        let mut list: Vec<String> = (0..N).map(|i| format!("File/f{i}")).collect();
        list.push("File/f7".to_owned());
        let value = json!(list);
        let mut errors = Vec::new();
        let ids = references(Some(&value), "reload_on", &mut errors);
        assert_eq!(ids.len(), N);
        assert_eq!(ids[7], ResourceId::new("File", "f7"));
        assert_eq!(paths(&errors), [format!("reload_on.{N}")]);
        assert_eq!(errors[0].message, "File[f7] is listed twice in `reload_on`");
    }
}
