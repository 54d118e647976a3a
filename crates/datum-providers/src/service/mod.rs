//! The Service resource type: a systemd unit that should be running or
//! stopped, enabled or disabled.
//!
//! ```yaml
//! datum: v1alpha1
//! type: Service
//! name: nginx
//! desired:
//!   state: running          # or stopped; optional
//!   enabled: true           # optional
//!   reload_on: [File/nginx-conf, File/site-default]
//!   restart_on: [Package/nginx]
//!   settle: 3s              # optional, how long verify watches the unit
//!   timeout: 2m             # optional, how long a start or stop is waited for
//! ```
//!
//! This module owns the unit's run state and boot enablement, observed with
//! `systemctl show` and changed with `systemctl start|stop|enable|disable`,
//! all through the host's command runner (no shell, no D-Bus library). It
//! also offers [`reload`] and [`restart`] for the engine, which decides when
//! a change to a resource in `reload_on`/`restart_on` is activated (after the
//! group it belongs to validated); this module only checks that those lists
//! are references and never acts on them by itself.
//!
//! # Only the running system
//!
//! systemd manages the machine it runs on. A pass with `--root DIR` other
//! than `/` is working on a directory tree that has no service manager, so
//! every Service operation there fails with a message saying so, rather than
//! silently observing the machine Datum happens to run on. To manage the
//! services of a container, run Datum inside it (the tests do exactly that
//! with `nsenter`).
//!
//! # Waiting
//!
//! A start, stop, restart or reload waits for systemd's job to finish
//! (`systemctl` without `--no-block`: the verification that follows must
//! see the unit where the job leaves it, not on its way), at most the
//! declared `timeout:` ([`desired::DEFAULT_TIMEOUT`] unless declared, at
//! most [`desired::MAX_TIMEOUT`]). The pass holds the root lock meanwhile,
//! so a unit whose stop takes long (an `ExecStop=` that drains
//! connections, `TimeoutStopSec=infinity`) holds every other apply for that
//! long; past it `systemctl` is killed and the resource fails saying how
//! long it waited and that systemd goes on with the job
//! ([`ServiceError::JobTimedOut`]). Meanwhile a progress bar on a terminal
//! says what the pass waits for, for how long so far and at most how long
//! (`waiting for systemd: restarting nginx.service (12s, up to 2m)`, through
//! `datum_core::progress::waiting`), and so does verify while it watches the
//! unit for `settle:` (up to five minutes); piped or in JSON, nothing is
//! shown.
//!
//! # Verification
//!
//! Verification is stronger than comparing fields. After a change the unit is
//! watched for the settle interval (`settle:`, default
//! [`desired::DEFAULT_SETTLE`]): a unit declared running must be active at
//! every sample, its `NRestarts` counter and `InvocationID` must not change
//! (systemd restarted it, or somebody started it anew), and its
//! `ReloadResult` (systemd 248 and later; reset on each start) must say the
//! last reload of the current run succeeded. A unit declared stopped must be
//! down at every sample. `enabled: true` means `UnitFileState` is `enabled`
//! (or `enabled-runtime`).
//!
//! Verification is not a health check. It establishes that systemd holds the
//! unit in the declared state and that the unit stayed there while watched; it
//! never connects to the service, sends a request or reads its responses, so a
//! site returning errors, an expired certificate or a slow backend are not
//! Datum's findings. A check that depended on the network would make a
//! downstream outage look like configuration drift, and one run on Datum's
//! schedule would be monitoring that only looks once per interval.

pub mod desired;
pub mod error;
pub mod settle;
pub mod systemctl;
pub mod unit_files;

use std::collections::BTreeMap;

use datum_core::{Action, Diff, FieldChange, Observed, Presence, Resource, ResourceId};
use datum_host::Host;
use serde_json::{Value, json};

pub use desired::{RunState, ServiceSpec};
pub use error::{Instability, ServiceError};

use crate::Activated;
use crate::kind::{declaration, planned};
use crate::{
    Activates, Capabilities, Declared, Exclusive, FieldError, FieldLookup, Kind, OnChange, Planned,
    ProviderError,
};
use systemctl::{UnitStatus, Verb};

/// The Service provider. Stateless: everything it knows comes from systemd
/// at the moment it asks.
#[derive(Debug, Default, Clone, Copy)]
pub struct ServiceProvider;

/// What [`reload`] or [`restart`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Reloaded,
    Restarted,
    /// The unit was not running, so there was no loaded configuration to
    /// replace; it reads the new one when it next starts. (A unit declared
    /// running has been started by its own apply before the engine activates.)
    NotRunning,
    /// The unit's own apply started it in this pass, after the changes that
    /// owe the activation (a Service runs after what it reloads or restarts
    /// on), and it has run since: it loaded the new configuration as it
    /// started, so a reload or restart now would only repeat that.
    StartedWithIt,
}

/// The units a Service's own apply started in this pass, each with the
/// invocation it started (`InvocationID`), kept in the pass's cache.
#[derive(Debug, Default)]
struct Started(std::sync::Mutex<BTreeMap<String, String>>);

/// Notes that this pass started `unit` as `invocation`.
fn note_started(host: &Host, unit: &str, invocation: &str) {
    if invocation.is_empty() {
        return;
    }
    let started = host.pass_cache::<Started>();
    let mut map = started.0.lock().unwrap_or_else(|p| p.into_inner());
    map.insert(unit.to_owned(), invocation.to_owned());
}

/// Whether this pass started `unit` and it still runs that invocation.
fn started_by_this_pass(host: &Host, unit: &str, status: &UnitStatus) -> bool {
    let started = host.pass_cache::<Started>();
    let map = started.0.lock().unwrap_or_else(|p| p.into_inner());
    map.get(unit).is_some_and(|invocation| {
        !status.invocation_id.is_empty() && *invocation == status.invocation_id
    })
}

/// The parsed declaration of a Service resource (the unit defaults to the
/// resource's name). The engine uses it for `reload_on`/`restart_on` and to
/// call [`reload`] or [`restart`].
pub fn spec(resource: &Resource) -> Result<ServiceSpec, ProviderError> {
    ServiceSpec::parse(&resource.desired, &resource.id.name).map_err(crate::common::fields::invalid)
}

/// Reloads a running unit (`systemctl reload`) so it reads its changed
/// configuration. Call it only after the configuration validated; follow it
/// with [`crate::Provider::verify`], which checks that the reload did not fail and
/// that the unit stayed up.
pub fn reload(host: &Host, spec: &ServiceSpec) -> Result<Activation, ServiceError> {
    let status = current_status(host, &spec.unit)?;
    if !status.is_active() {
        return Ok(Activation::NotRunning);
    }
    if started_by_this_pass(host, &spec.unit, &status) {
        return Ok(Activation::StartedWithIt);
    }
    if !status.can_reload {
        return Err(ServiceError::CannotReload {
            unit: spec.unit.clone(),
            host: host.name().to_owned(),
        });
    }
    systemctl::request(host, Verb::Reload, &spec.unit, spec.timeout)?;
    Ok(Activation::Reloaded)
}

/// Restarts a running unit (`systemctl restart`); a unit that is not running
/// is left alone. Follow it with [`crate::Provider::verify`].
pub fn restart(host: &Host, spec: &ServiceSpec) -> Result<Activation, ServiceError> {
    let status = current_status(host, &spec.unit)?;
    if !status.is_active() {
        return Ok(Activation::NotRunning);
    }
    if started_by_this_pass(host, &spec.unit, &status) {
        return Ok(Activation::StartedWithIt);
    }
    systemctl::request(host, Verb::Restart, &spec.unit, spec.timeout)?;
    Ok(Activation::Restarted)
}

/// Reads the unit as its files on disk define it now, and refuses one
/// systemd does not know or could not load. The change that owes the
/// activation may be the unit's own file or a drop-in (`restart_on` a File
/// in `nginx.service.d/`): without a `daemon-reload` first, systemd restarts
/// the unit with the definition it loaded before, and nothing later reloads
/// it (the unit runs, so every later pass finds it converged). systemd's
/// `NeedDaemonReload` misses a file rewritten within one tick of the file
/// system's clock, so a unit file this pass wrote is reloaded whatever it
/// says (see [`unit_files`]).
fn current_status(host: &Host, unit: &str) -> Result<UnitStatus, ServiceError> {
    let status = systemctl::show(host, unit)?;
    if !status.need_daemon_reload && !unit_files::owed(host) {
        check_loaded(host, unit, &status)?;
        return Ok(status);
    }
    daemon_reload(host, unit)?;
    loaded_status(host, unit)
}

/// `systemctl daemon-reload`, which loads every unit file written so far.
fn daemon_reload(host: &Host, unit: &str) -> Result<(), ServiceError> {
    systemctl::daemon_reload(host, unit)?;
    unit_files::reloaded(host);
    Ok(())
}

/// Reads the unit and refuses one systemd does not know or could not load.
fn loaded_status(host: &Host, unit: &str) -> Result<UnitStatus, ServiceError> {
    let status = systemctl::show(host, unit)?;
    check_loaded(host, unit, &status)?;
    Ok(status)
}

fn check_loaded(host: &Host, unit: &str, status: &UnitStatus) -> Result<(), ServiceError> {
    match status.load_state.as_str() {
        // A masked unit is loaded as far as systemd is concerned; starting or
        // enabling it fails with systemctl's own clear message.
        "loaded" | "masked" => Ok(()),
        "not-found" => Err(ServiceError::UnitNotFound {
            unit: unit.to_owned(),
            host: host.name().to_owned(),
        }),
        other => Err(ServiceError::UnitNotLoaded {
            unit: unit.to_owned(),
            host: host.name().to_owned(),
            load_state: other.to_owned(),
        }),
    }
}

/// The observation for a status: the declared fields under their declared
/// names, and the systemd properties behind them for reports.
fn observation(unit: &str, status: &UnitStatus) -> Observed {
    let presence = if status.load_state == "not-found" {
        Presence::Absent
    } else {
        Presence::Present
    };
    let mut fields = BTreeMap::new();
    fields.insert("unit".to_owned(), json!(unit));
    // Only for an alias (see the masked field below for why only then).
    if !status.id.is_empty() && status.id != unit {
        fields.insert("id".to_owned(), json!(status.id));
    }
    fields.insert("state".to_owned(), json!(status.state_word()));
    fields.insert("enabled".to_owned(), json!(status.is_enabled()));
    // Only when masked: an observation's fields are what an accepted one
    // is compared by, so a field every Service gained would reopen them all.
    if status.is_masked() {
        fields.insert("masked".to_owned(), json!(true));
    }
    fields.insert("load_state".to_owned(), json!(status.load_state));
    fields.insert("active_state".to_owned(), json!(status.active_state));
    fields.insert("sub_state".to_owned(), json!(status.sub_state));
    fields.insert("unit_file_state".to_owned(), json!(status.unit_file_state));
    fields.insert("result".to_owned(), json!(status.result));
    if let Some(reload) = &status.reload_result {
        fields.insert("reload_result".to_owned(), json!(reload));
    }
    if let Some(restarts) = status.restarts {
        fields.insert("restarts".to_owned(), json!(restarts));
    }
    Observed {
        presence,
        fields,
        content: None,
        meta: None,
    }
}

/// Whether an observed run state satisfies a declared one. A failed unit is
/// stopped: none of its processes run, and `systemctl stop` would not change
/// that.
fn state_satisfied(declared: RunState, observed: Option<&str>) -> bool {
    match declared {
        RunState::Running => observed == Some("running"),
        RunState::Stopped => matches!(observed, Some("stopped" | "failed")),
    }
}

/// What a masked unit cannot be that the declaration asks of it (`None`:
/// the mask is in nothing's way, as for a unit declared stopped and
/// disabled, which a mask keeps so). systemd refuses to start or enable a
/// masked unit; stopping it works.
fn mask_forbids(spec: &ServiceSpec, masked: bool, running: bool) -> Option<&'static str> {
    if !masked {
        return None;
    }
    let start = spec.state == Some(RunState::Running) && !running;
    let enable = spec.enabled == Some(true);
    match (start, enable) {
        (true, true) => Some("started or enabled"),
        (true, false) => Some("started"),
        (false, true) => Some("enabled"),
        (false, false) => None,
    }
}

/// [`mask_forbids`] for an observation.
fn mask_forbids_observed(spec: &ServiceSpec, observed: &Observed) -> Option<&'static str> {
    if observed.presence == Presence::Absent {
        return None;
    }
    let masked = observed.fields.get("masked") == Some(&json!(true));
    let running = observed.fields.get("state").and_then(Value::as_str) == Some("running");
    mask_forbids(spec, masked, running)
}

/// Whether a unit systemd does not know satisfies the declaration: one that
/// asks only that it not run (`state: stopped`) and not start at boot
/// (`enabled: false`), what a unit whose package was removed is (`systemctl
/// is-active` says inactive, `is-enabled` not enabled). Declaring the
/// package absent beside its service stopped and disabled would otherwise
/// fail every pass after the removal, and `datum check` call the unit
/// deleted outside. A unit declared running or enabled must exist.
fn missing_satisfies(spec: &ServiceSpec) -> bool {
    spec.state != Some(RunState::Running) && spec.enabled != Some(true)
}

/// A Service is reloaded or restarted when a resource it names in
/// `reload_on`/`restart_on` changes.
impl Activates for ServiceProvider {
    fn notified_by(&self, field: FieldLookup<'_, '_>) -> Vec<(ResourceId, OnChange)> {
        let mut out = Vec::new();
        for (name, how) in [
            ("reload_on", OnChange::Reload),
            ("restart_on", OnChange::Restart),
        ] {
            let Some(list) = field(name).and_then(Value::as_array) else {
                continue;
            };
            for text in list.iter().filter_map(Value::as_str) {
                if let Ok(id) = ResourceId::parse(text) {
                    out.push((id, how));
                }
            }
        }
        out
    }

    fn activate(&self, host: &Host, d: &Declared<'_>, how: OnChange) -> Result<(), ProviderError> {
        let spec = declaration::<Self>(d)?;
        match how {
            OnChange::Reload => reload(host, spec)?,
            OnChange::Restart => restart(host, spec)?,
        };
        Ok(())
    }

    fn subject(&self, resource: &Resource) -> String {
        spec(resource).map_or_else(|_| resource.id.name.clone(), |s| s.unit)
    }
}

impl Kind for ServiceProvider {
    const KIND: &'static str = "Service";
    type Declaration = ServiceSpec;
    type Written = desired::ServiceDeclaration;
    type Staging = Planned;

    fn declare(&self, resource: &Resource) -> Result<ServiceSpec, ProviderError> {
        spec(resource)
    }

    fn check_fields(&self, desired: &Value) -> Result<(), Vec<FieldError>> {
        // The resource's own name stands in for `name:` when that is absent;
        // it is not known here, so a placeholder keeps the other checks going
        // and the name itself is checked by `check_resource_name`.
        ServiceSpec::parse(desired, "service").map(drop)
    }

    fn observe(
        &self,
        host: &Host,
        _resource: &Resource,
        spec: &ServiceSpec,
    ) -> Result<Observed, ProviderError> {
        let status = systemctl::show(host, &spec.unit)?;
        Ok(observation(&spec.unit, &status))
    }

    fn plan(&self, _resource: &Resource, spec: &ServiceSpec, observed: &Observed) -> Diff {
        let mut changes = Vec::new();
        let absent = observed.presence == Presence::Absent;
        if absent && missing_satisfies(spec) {
            return Diff::default();
        }
        // Said first, as what stands in the way of the rest: the apply will
        // not lift it (see `refuses`).
        if mask_forbids_observed(spec, observed).is_some() {
            changes.push(FieldChange {
                field: "masked".to_owned(),
                before: Some(json!(true)),
                after: Some(json!(false)),
            });
        }
        if absent {
            changes.push(FieldChange {
                field: "unit".to_owned(),
                before: None,
                after: Some(json!(spec.unit)),
            });
        }
        let field = |name: &str| {
            if absent {
                None
            } else {
                observed.fields.get(name)
            }
        };
        if let Some(state) = spec.state {
            let seen = field("state");
            if !state_satisfied(state, seen.and_then(Value::as_str)) {
                changes.push(FieldChange {
                    field: "state".to_owned(),
                    before: seen.cloned(),
                    after: Some(json!(state.word())),
                });
            }
        }
        if let Some(enabled) = spec.enabled {
            let seen = field("enabled");
            if seen.and_then(Value::as_bool) != Some(enabled) {
                changes.push(FieldChange {
                    field: "enabled".to_owned(),
                    before: seen.cloned(),
                    after: Some(json!(enabled)),
                });
            }
        }
        Diff {
            action: (!changes.is_empty()).then_some(Action::Update),
            changes,
            content: None,
        }
    }

    /// The unit systemd manages under the declared name (its `Id`): an
    /// alias's is the unit it stands for, which another Service may manage
    /// under its own name. A unit systemd does not know has none.
    fn observed_identity(&self, observed: &Observed) -> Option<String> {
        if observed.presence == Presence::Absent {
            return None;
        }
        let id = observed
            .fields
            .get("id")
            .or_else(|| observed.fields.get("unit"))?
            .as_str()?;
        Some(format!("unit {id}"))
    }

    /// A masked unit declared running or enabled: the apply refuses it (see
    /// [`ServiceError::Masked`]), so the plan says it would fail.
    fn refuses(&self, spec: &ServiceSpec, observed: &Observed) -> Option<String> {
        let wanted = mask_forbids_observed(spec, observed)?;
        let unit = observed
            .fields
            .get("unit")
            .and_then(Value::as_str)
            .unwrap_or(&spec.unit);
        Some(format!("unit {unit} {}", error::masked_words(unit, wanted)))
    }

    fn stage(
        &self,
        _host: &Host,
        _resource: &Resource,
        _spec: &ServiceSpec,
        observed: &Observed,
        diff: &Diff,
    ) -> Result<Planned, ProviderError> {
        Ok(planned(observed, diff))
    }

    fn activate(
        &self,
        host: &Host,
        _resource: &Resource,
        spec: &ServiceSpec,
        _staging: Planned,
    ) -> Result<Activated<Planned>, ProviderError> {
        let unit = spec.unit.as_str();
        // Act on a fresh reading, not the plan's: time passed since then.
        let mut status = systemctl::show(host, unit)?;
        // A unit file written earlier in this pass (or a unit installed by a
        // package just now) is only seen after systemd re-reads its files.
        if status.need_daemon_reload || status.load_state == "not-found" || unit_files::owed(host) {
            daemon_reload(host, unit)?;
            status = systemctl::show(host, unit)?;
        }
        if status.load_state == "not-found" && missing_satisfies(spec) {
            return Ok(Activated::Done);
        }
        check_loaded(host, unit, &status)?;
        if let Some(wanted) = mask_forbids(spec, status.is_masked(), status.is_active()) {
            return Err(ServiceError::Masked {
                unit: unit.to_owned(),
                host: host.name().to_owned(),
                wanted,
            }
            .into());
        }

        // Stop before disabling, enable before starting: the unit is never
        // started in a state it would not come back to after a reboot.
        if spec.state == Some(RunState::Stopped) && !status.is_down() {
            systemctl::request(host, Verb::Stop, unit, spec.timeout)?;
        }
        if let Some(enabled) = spec.enabled
            && status.is_enabled() != enabled
        {
            if !status.enablement_applies() {
                return Err(ServiceError::CannotChangeEnablement {
                    unit: unit.to_owned(),
                    host: host.name().to_owned(),
                    unit_file_state: status.unit_file_state.clone(),
                }
                .into());
            }
            let verb = if enabled { Verb::Enable } else { Verb::Disable };
            systemctl::request(host, verb, unit, spec.timeout)?;
        }
        if spec.state == Some(RunState::Running) && !status.is_active() {
            systemctl::request(host, Verb::Start, unit, spec.timeout)?;
            // An activation owed to it in this pass is met by this start
            // (see `Activation::StartedWithIt`).
            if let Ok(now) = systemctl::show(host, unit) {
                note_started(host, unit, &now.invocation_id);
            }
        }
        Ok(Activated::Done)
    }

    /// Watches the unit for the settle interval when `state` is declared (see
    /// the module documentation), then compares fields. Instability is an
    /// error naming what moved; a field that differs is the returned diff.
    fn verify(
        &self,
        host: &Host,
        resource: &Resource,
        spec: &ServiceSpec,
    ) -> Result<(Observed, Diff), ProviderError> {
        let status = systemctl::show(host, &spec.unit)?;
        if status.load_state == "not-found" && missing_satisfies(spec) {
            let observed = observation(&spec.unit, &status);
            return Ok((observed, Diff::default()));
        }
        check_loaded(host, &spec.unit, &status)?;
        let status = match spec.state {
            Some(state) => settle::watch(host, &spec.unit, state, spec.settle)?,
            None => status,
        };
        let observed = observation(&spec.unit, &status);
        let diff = Kind::plan(self, resource, spec, &observed);
        Ok((observed, diff))
    }
}

impl Capabilities for ServiceProvider {
    fn watches_writes(&self) -> Option<&dyn crate::WatchesWrites> {
        Some(self)
    }

    /// A unit stages nothing a validator could check: `validate:` belongs on
    /// the File or Tree holding its configuration (the catalogue refuses it
    /// here rather than ignore it).
    fn takes_validator(&self) -> bool {
        false
    }

    fn activation(&self) -> Option<&dyn Activates> {
        Some(self)
    }

    /// The unit (`nginx` and `nginx.service` are one): two Services of one
    /// unit would start and stop it in turn.
    fn exclusive_claims(&self, field: FieldLookup<'_, '_>, name: &str) -> Vec<Exclusive> {
        let declared = match field("name") {
            Some(v) => v.as_str().unwrap_or_default(),
            None => name,
        };
        desired::unit_name(declared)
            .map(|unit| Exclusive {
                field: "name",
                key: format!("unit {unit}"),
                shown: format!("unit `{unit}`"),
            })
            .into_iter()
            .collect()
    }

    /// The resource's name when `name:` is not written: the unit's name.
    fn check_resource_name(&self, field: FieldLookup<'_, '_>, name: &str) -> Option<String> {
        crate::common::fields::name_as_field(field, name, "unit", |n| {
            desired::unit_name(n).map(drop)
        })
    }
}

/// A unit file or drop-in any resource writes is loaded (systemd reloads)
/// before the next unit starts, restarts or reloads:
/// [`unit_files::after_writing`].
impl crate::WatchesWrites for ServiceProvider {
    fn after_writing(&self, host: &Host, written: &[std::path::PathBuf]) {
        unit_files::after_writing(host, written);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Provider;
    use datum_core::ResourceId;

    fn resource(desired: Value) -> Resource {
        Resource::new(ResourceId::new("Service", "web"), desired)
    }

    fn observed(active: &str, unit_file: &str) -> Observed {
        let status = UnitStatus {
            load_state: "loaded".into(),
            active_state: active.into(),
            unit_file_state: unit_file.into(),
            ..UnitStatus::default()
        };
        observation("web.service", &status)
    }

    fn changed(diff: &Diff) -> Vec<String> {
        diff.changed_fields()
    }

    #[test]
    fn a_unit_in_the_declared_state_has_no_diff() {
        let p = ServiceProvider;
        let r = resource(json!({"state": "running", "enabled": true}));
        assert!(crate::testing::diff(&p, &r, &observed("active", "enabled")).is_empty());
        let r = resource(json!({"state": "stopped", "enabled": false}));
        assert!(crate::testing::diff(&p, &r, &observed("inactive", "disabled")).is_empty());
        assert!(crate::testing::diff(&p, &r, &observed("failed", "static")).is_empty());
    }

    #[test]
    fn state_and_enablement_differences_are_fields() {
        let p = ServiceProvider;
        let r = resource(json!({"state": "running", "enabled": true}));
        let d = crate::testing::diff(&p, &r, &observed("failed", "disabled"));
        assert_eq!(d.action(), Action::Update);
        assert_eq!(changed(&d), ["state", "enabled"]);
        assert_eq!(d.changes[0].before, Some(json!("failed")));
        assert_eq!(d.changes[0].after, Some(json!("running")));

        let r = resource(json!({"state": "stopped"}));
        let d = crate::testing::diff(&p, &r, &observed("activating", "enabled"));
        assert_eq!(changed(&d), ["state"], "enabled is not managed here");
    }

    #[test]
    fn a_missing_unit_shows_as_a_unit_change() {
        let p = ServiceProvider;
        let r = resource(json!({"name": "nosuch", "state": "running"}));
        let status = UnitStatus {
            load_state: "not-found".into(),
            active_state: "inactive".into(),
            ..UnitStatus::default()
        };
        let o = observation("nosuch.service", &status);
        assert_eq!(o.presence, Presence::Absent);
        let d = crate::testing::diff(&p, &r, &o);
        assert_eq!(changed(&d), ["unit", "state"]);
        assert_eq!(d.changes[0].after, Some(json!("nosuch.service")));
        assert_eq!(d.changes[1].before, None);
    }

    /// A package declared absent takes its unit with it: the Service
    /// declared stopped and disabled beside it is in sync without the unit
    /// (before, every pass after the removal failed with 'unit ... does not
    /// exist' and check called it deleted outside). Running or enabled still
    /// need it.
    #[test]
    fn a_missing_unit_is_stopped_and_disabled_but_neither_running_nor_enabled() {
        let p = ServiceProvider;
        let status = UnitStatus {
            load_state: "not-found".into(),
            active_state: "inactive".into(),
            ..UnitStatus::default()
        };
        let o = observation("gone.service", &status);
        for desired in [
            json!({"state": "stopped", "enabled": false}),
            json!({"state": "stopped"}),
            json!({"enabled": false}),
        ] {
            let r = resource(desired.clone());
            assert!(crate::testing::diff(&p, &r, &o).is_empty(), "{desired}");
        }
        for (desired, fields) in [
            (
                json!({"state": "stopped", "enabled": true}),
                vec!["unit", "state", "enabled"],
            ),
            (
                json!({"state": "running", "enabled": false}),
                vec!["unit", "state", "enabled"],
            ),
        ] {
            let r = resource(desired.clone());
            assert_eq!(
                changed(&crate::testing::diff(&p, &r, &o)),
                fields,
                "{desired}"
            );
        }
    }

    /// `systemctl mask --now` on a unit declared running and enabled: the
    /// observation says masked, the plan shows it first, and the change is
    /// one the apply refuses (it does not unmask). Declared stopped and
    /// disabled, a masked unit is in sync.
    #[test]
    fn a_masked_unit_is_shown_masked_and_refused_not_promised() {
        let p = ServiceProvider;
        let status = UnitStatus {
            load_state: "masked".into(),
            active_state: "inactive".into(),
            unit_file_state: "masked".into(),
            ..UnitStatus::default()
        };
        let o = observation("web.service", &status);
        assert_eq!(o.fields["masked"], json!(true));
        let r = resource(json!({"state": "running", "enabled": true}));
        let d = crate::testing::diff(&p, &r, &o);
        assert_eq!(changed(&d), ["masked", "state", "enabled"]);
        let declared = Provider::declare(&p, &r).unwrap();
        let why = Provider::refuses(&p, &declared, &o).expect("refused");
        assert!(why.contains("web.service is masked"), "{why}");
        assert!(why.contains("systemctl unmask web.service"), "{why}");

        let r = resource(json!({"state": "stopped", "enabled": false}));
        assert!(crate::testing::diff(&p, &r, &o).is_empty());
        assert!(Provider::refuses(&p, &Provider::declare(&p, &r).unwrap(), &o).is_none());

        // Not masked: no such field (an accepted observation stays equal).
        let o = observed("inactive", "disabled");
        assert!(!o.fields.contains_key("masked"));
        let r = resource(json!({"state": "running", "enabled": true}));
        assert!(Provider::refuses(&p, &Provider::declare(&p, &r).unwrap(), &o).is_none());
    }

    /// systemd's `Id` names the unit an alias stands for (`sshd.service`
    /// is `ssh.service`): that is what two Services must not share.
    #[test]
    fn the_identity_is_the_unit_an_alias_stands_for() {
        let p = ServiceProvider;
        let status = |id: &str| UnitStatus {
            id: id.into(),
            load_state: "loaded".into(),
            active_state: "active".into(),
            ..UnitStatus::default()
        };
        let alias = observation("sshd.service", &status("ssh.service"));
        let own = observation("ssh.service", &status("ssh.service"));
        assert_eq!(alias.fields["id"], json!("ssh.service"));
        assert!(!own.fields.contains_key("id"), "only an alias has one");
        for o in [&alias, &own] {
            assert_eq!(
                Provider::observed_identity(&p, o).as_deref(),
                Some("unit ssh.service")
            );
        }
        let missing = UnitStatus {
            load_state: "not-found".into(),
            ..status("nosuch.service")
        };
        let o = observation("nosuch.service", &missing);
        assert_eq!(Provider::observed_identity(&p, &o), None);
    }

    #[test]
    fn check_accepts_a_declaration_without_a_name() {
        let p = ServiceProvider;
        assert!(p.check(&json!({"state": "running"})).is_ok());
        assert!(p.check(&json!({"state": "up"})).is_err());
    }

    #[test]
    fn an_unusable_resource_name_is_a_field_error_at_observe() {
        let mut r = resource(json!({"state": "running"}));
        r.id.name = "my web".into();
        match spec(&r) {
            Err(ProviderError::Invalid { field, message }) => {
                assert_eq!(field, "name");
                assert!(message.contains("my web"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn nothing_is_observed_or_changed_under_another_root() {
        let p = ServiceProvider;
        let host = Host::with_name("/tmp/not-a-system", "h");
        let r = resource(json!({"state": "running"}));
        let err = Provider::observe(&p, &host, &r).unwrap_err();
        assert!(
            err.to_string()
                .contains("only be managed on the running system"),
            "{err}"
        );
        let spec = spec(&r).unwrap();
        assert!(matches!(
            reload(&host, &spec),
            Err(ServiceError::NotRunningSystem { .. })
        ));
        assert!(Provider::verify(&p, &host, &r).is_err());
    }
}
