//! Talking to systemd: `systemctl` run through the host's command runner, and
//! the parsing of `systemctl show`.
//!
//! Every call goes through [`datum_host::command::run`] with an argument
//! vector (no shell), and unit names arrive here already checked by
//! [`super::desired::unit_name`] and are still placed after `--`, so a name
//! can never become an option. This module must not decide what a state
//! means for a resource (the provider and [`super::settle`] do); it only
//! reads and requests.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use datum_host::Host;
use datum_host::command::{self, CommandSpec};

use super::error::ServiceError;

/// The properties read for every observation. `ReloadResult` exists since
/// systemd 248 (Debian 12 has 252); it is reset when the unit starts and set
/// by every reload, so it answers "did the last reload of this run fail".
/// `NRestarts` counts restarts systemd made on its own (`Restart=`), and
/// `InvocationID` changes on every start, so together they show a unit that
/// was restarted while it was watched.
pub const PROPERTIES: &[&str] = &[
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "Result",
    "ReloadResult",
    "NRestarts",
    "ExecMainStatus",
    "InvocationID",
    "NeedDaemonReload",
    "CanReload",
];

/// `show`, `enable`, `disable`: quick, but `enable` reloads the manager.
const QUERY_TIMEOUT: Duration = Duration::from_secs(60);

/// One reading of a unit, from `systemctl show`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnitStatus {
    /// The unit's own name (`Id`): the one asked for, or the unit it is an
    /// alias of (`sshd.service` is `ssh.service` on Debian).
    pub id: String,
    /// `loaded`, `not-found`, `bad-setting`, `error`, `masked`.
    pub load_state: String,
    /// `active`, `reloading`, `inactive`, `failed`, `activating`, `deactivating`.
    pub active_state: String,
    pub sub_state: String,
    /// `enabled`, `disabled`, `static`, `masked`, ... or empty when unknown.
    pub unit_file_state: String,
    /// How the last run ended (`success`, `exit-code`, `signal`, ...).
    pub result: String,
    /// How the last reload of the current run ended; `None` on systemd
    /// versions or unit types without it.
    pub reload_result: Option<String>,
    /// Automatic restarts so far; `None` for unit types without a counter.
    pub restarts: Option<u64>,
    pub exec_main_status: Option<i32>,
    /// Empty while the unit has never run.
    pub invocation_id: String,
    /// The unit file changed on disk since systemd read it.
    pub need_daemon_reload: bool,
    pub can_reload: bool,
}

impl UnitStatus {
    /// Parses `systemctl show` output (`Key=value` lines). `LoadState` and
    /// `ActiveState` are required; everything else is optional because older
    /// systemd versions and other unit types leave some out.
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        let map: BTreeMap<&str, &str> = text
            .lines()
            .filter_map(|line| line.split_once('='))
            .collect();
        let get = |key: &str| map.get(key).map(|v| (*v).to_owned());
        Ok(UnitStatus {
            id: get("Id").unwrap_or_default(),
            load_state: get("LoadState").ok_or("LoadState")?,
            active_state: get("ActiveState").ok_or("ActiveState")?,
            sub_state: get("SubState").unwrap_or_default(),
            unit_file_state: get("UnitFileState").unwrap_or_default(),
            result: get("Result").unwrap_or_default(),
            reload_result: get("ReloadResult").filter(|v| !v.is_empty()),
            restarts: map.get("NRestarts").and_then(|v| v.parse().ok()),
            exec_main_status: map.get("ExecMainStatus").and_then(|v| v.parse().ok()),
            invocation_id: get("InvocationID").unwrap_or_default(),
            need_daemon_reload: map.get("NeedDaemonReload") == Some(&"yes"),
            can_reload: map.get("CanReload") == Some(&"yes"),
        })
    }

    /// The unit is up (a reload in progress counts: the old configuration is
    /// still being served).
    pub fn is_active(&self) -> bool {
        matches!(self.active_state.as_str(), "active" | "reloading")
    }

    /// The unit's processes are gone (a failed unit is not running either).
    pub fn is_down(&self) -> bool {
        matches!(self.active_state.as_str(), "inactive" | "failed")
    }

    /// Starts at boot (persistently or for this boot only).
    pub fn is_enabled(&self) -> bool {
        matches!(self.unit_file_state.as_str(), "enabled" | "enabled-runtime")
    }

    /// Masked (`systemctl mask`, persistently or for this boot only):
    /// systemd will neither start nor enable it.
    pub fn is_masked(&self) -> bool {
        self.load_state == "masked"
            || matches!(self.unit_file_state.as_str(), "masked" | "masked-runtime")
    }

    /// `enable`/`disable` mean something for this unit file.
    pub fn enablement_applies(&self) -> bool {
        matches!(
            self.unit_file_state.as_str(),
            "enabled" | "enabled-runtime" | "disabled" | "linked" | "linked-runtime" | "alias"
        )
    }

    /// The word observations and plans use for the run state.
    pub fn state_word(&self) -> &'static str {
        match self.active_state.as_str() {
            "active" | "reloading" => "running",
            "inactive" => "stopped",
            "failed" => "failed",
            "activating" => "starting",
            "deactivating" => "stopping",
            _ => "unknown",
        }
    }
}

/// Refuses anything but the running system: systemd manages the machine it
/// runs on, and a directory tree under `--root` has no service manager to ask.
pub fn ensure_running_system(host: &Host, unit: &str) -> Result<(), ServiceError> {
    if host.root() == Path::new("/") {
        Ok(())
    } else {
        Err(ServiceError::NotRunningSystem {
            unit: unit.to_owned(),
            root: host.root().to_path_buf(),
        })
    }
}

/// Reads a unit's state.
pub fn show(host: &Host, unit: &str) -> Result<UnitStatus, ServiceError> {
    ensure_running_system(host, unit)?;
    let spec = CommandSpec::new("systemctl")
        .args(["show", "--no-pager"])
        .arg(format!("--property={}", PROPERTIES.join(",")))
        .args(["--", unit])
        .timeout(QUERY_TIMEOUT);
    let out = run(host, "show", unit, &spec)?;
    UnitStatus::parse(&out).map_err(|property| ServiceError::Unreadable {
        unit: unit.to_owned(),
        host: host.name().to_owned(),
        property,
    })
}

/// A request `systemctl` makes of systemd for one unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Start,
    Stop,
    Restart,
    Reload,
    Enable,
    Disable,
}

impl Verb {
    pub fn word(self) -> &'static str {
        match self {
            Verb::Start => "start",
            Verb::Stop => "stop",
            Verb::Restart => "restart",
            Verb::Reload => "reload",
            Verb::Enable => "enable",
            Verb::Disable => "disable",
        }
    }

    /// What a person reads while it is waited for (`restarting`).
    fn doing(self) -> &'static str {
        match self {
            Verb::Start => "starting",
            Verb::Stop => "stopping",
            Verb::Restart => "restarting",
            Verb::Reload => "reloading",
            Verb::Enable => "enabling",
            Verb::Disable => "disabling",
        }
    }

    /// How long to wait: a job (start, stop, restart, reload) as long as
    /// the Service's `timeout:` says, anything else [`QUERY_TIMEOUT`].
    fn timeout(self, job: Duration) -> Duration {
        match self {
            Verb::Start | Verb::Stop | Verb::Restart | Verb::Reload => job,
            Verb::Enable | Verb::Disable => QUERY_TIMEOUT,
        }
    }
}

/// Asks systemd to do `verb` to `unit` and waits for the job to finish, a
/// job at most `job_timeout` (the Service's `timeout:`): then `systemctl` is
/// killed and the error says so ([`ServiceError::JobTimedOut`]); systemd
/// itself goes on with the job until the unit's own timeouts end it.
pub fn request(
    host: &Host,
    verb: Verb,
    unit: &str,
    job_timeout: Duration,
) -> Result<(), ServiceError> {
    ensure_running_system(host, unit)?;
    // --quiet for enable/disable only: they list the links they made on
    // stderr, which is noise in a report (their failures still print). For
    // a job (start, stop, restart, reload) it also silences the one line
    // that says why the job failed ("Job for x.service failed because the
    // control process exited with error code", "... a timeout was
    // exceeded", "a dependency job ... failed"), which leaves the report
    // with an exit status alone.
    let mut spec =
        CommandSpec::new("systemctl").args([verb.word(), "--no-pager", "--no-ask-password"]);
    if matches!(verb, Verb::Enable | Verb::Disable) {
        spec = spec.arg("--quiet");
    }
    let spec = spec.arg("--").arg(unit).timeout(verb.timeout(job_timeout));
    // A job may take up to the Service's `timeout:` (two minutes unless
    // declared): a progress bar says what the pass waits for meanwhile.
    let words = format!("waiting for systemd: {} {unit}", verb.doing());
    let _waiting = datum_core::progress::waiting(words, Some(spec.timeout));
    run(host, verb.word(), unit, &spec).map(drop)
}

/// Makes systemd re-read unit files (a File resource may have just changed
/// one this unit uses).
pub fn daemon_reload(host: &Host, unit: &str) -> Result<(), ServiceError> {
    ensure_running_system(host, unit)?;
    let spec = CommandSpec::new("systemctl")
        .args(["daemon-reload", "--no-ask-password"])
        .timeout(QUERY_TIMEOUT);
    // systemd runs every generator and re-reads every unit file: seconds
    // on a host with many units, up to a minute before it is given up. The
    // bar says what the pass waits for, as it does for a restart.
    let words = format!("waiting for systemd: reloading unit files (daemon-reload, for {unit})");
    let _waiting = datum_core::progress::waiting(words, Some(spec.timeout));
    run(host, "daemon-reload", unit, &spec).map(drop)
}

/// The verbs whose wait is the Service's `timeout:` ([`Verb::timeout`]):
/// only their timing out is [`ServiceError::JobTimedOut`], whose words
/// point at `timeout:`; a `show`, `enable`, `disable` or `daemon-reload`
/// that took longer than [`QUERY_TIMEOUT`] is a [`ServiceError::Systemctl`]
/// saying it timed out (no declaration changes that wait).
const JOB_WORDS: &[&str] = &["start", "stop", "restart", "reload"];

/// Runs one systemctl command; stdout on success, a [`ServiceError`] naming
/// the verb and the unit otherwise.
fn run(
    host: &Host,
    verb: &'static str,
    unit: &str,
    spec: &CommandSpec,
) -> Result<String, ServiceError> {
    let out = command::run(spec).map_err(|source| ServiceError::Host {
        unit: unit.to_owned(),
        source,
    })?;
    if out.success() {
        Ok(out.stdout.text())
    } else if out.timed_out && JOB_WORDS.contains(&verb) {
        Err(ServiceError::JobTimedOut {
            verb,
            unit: unit.to_owned(),
            host: host.name().to_owned(),
            waited: spec.timeout,
        })
    } else {
        Err(ServiceError::Systemctl {
            verb,
            unit: unit.to_owned(),
            host: host.name().to_owned(),
            status: out.status,
            timed_out: out.timed_out,
            stderr: out.stderr.text(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from systemd 252 in the test container (nginx, running).
    const NGINX: &str = "Id=nginx.service\nMainPID=36\nResult=success\nReloadResult=success\nNRestarts=0\nExecMainStatus=0\nLoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\nInvocationID=2618f1a5e60c49568d9dc64e4df962ae\nNeedDaemonReload=no\nCanReload=yes\n";

    #[test]
    fn show_output_parses_into_a_status() {
        let s = UnitStatus::parse(NGINX).unwrap();
        assert_eq!(s.load_state, "loaded");
        assert!(s.is_active() && !s.is_down());
        assert!(s.is_enabled() && s.enablement_applies());
        assert_eq!(s.reload_result.as_deref(), Some("success"));
        assert_eq!(s.restarts, Some(0));
        assert_eq!(s.invocation_id, "2618f1a5e60c49568d9dc64e4df962ae");
        assert!(s.can_reload && !s.need_daemon_reload);
        assert_eq!(s.state_word(), "running");
    }

    #[test]
    fn a_missing_unit_and_a_sparse_unit_type_parse() {
        let s = UnitStatus::parse(
            "LoadState=not-found\nActiveState=inactive\nUnitFileState=\nReloadResult=\n",
        )
        .unwrap();
        assert_eq!(s.load_state, "not-found");
        assert_eq!(s.state_word(), "stopped");
        assert_eq!(s.reload_result, None);
        assert_eq!(s.restarts, None);
        assert!(!s.enablement_applies());
    }

    #[test]
    fn output_without_the_required_keys_is_refused() {
        assert_eq!(UnitStatus::parse("ActiveState=active\n"), Err("LoadState"));
        assert_eq!(UnitStatus::parse(""), Err("LoadState"));
        assert_eq!(UnitStatus::parse("LoadState=loaded\n"), Err("ActiveState"));
    }

    #[test]
    fn values_may_contain_equals_signs() {
        let s = UnitStatus::parse("LoadState=loaded\nActiveState=active\nResult=a=b\n").unwrap();
        assert_eq!(s.result, "a=b");
    }

    /// 5b45a6c's error for a job that outlasted the Service's `timeout:`
    /// was given to any systemctl that timed out, so a `show` or an
    /// `enable` past its fixed 60 s pointed at `timeout:` ("(120s unless
    /// declared) is how long its start, stop, restart or reload is waited
    /// for"), which does not change that wait.
    #[test]
    fn only_a_job_that_timed_out_points_at_the_services_timeout() {
        let host = Host::with_name("/", "h");
        let slow = || {
            CommandSpec::new("sleep")
                .arg("10")
                .timeout(Duration::from_millis(200))
        };
        for word in ["show", "enable", "disable", "daemon-reload"] {
            let err = run(&host, word, "x.service", &slow()).unwrap_err();
            assert!(
                matches!(
                    err,
                    ServiceError::Systemctl {
                        timed_out: true,
                        ..
                    }
                ),
                "{word}: {err}"
            );
            assert!(!err.to_string().contains("timeout:"), "{word}: {err}");
        }
        for (verb, word) in [
            (Verb::Start, "start"),
            (Verb::Stop, "stop"),
            (Verb::Restart, "restart"),
            (Verb::Reload, "reload"),
        ] {
            assert_eq!(verb.word(), word);
            let err = run(&host, word, "x.service", &slow()).unwrap_err();
            assert!(
                matches!(err, ServiceError::JobTimedOut { .. }),
                "{word}: {err}"
            );
        }
    }

    #[test]
    fn only_the_running_system_is_managed() {
        let err = show(&Host::with_name("/tmp/some-root", "h"), "nginx.service").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("--root /tmp/some-root"), "{text}");
        assert!(text.contains("nginx.service"), "{text}");
        assert!(matches!(
            request(
                &Host::with_name("/tmp/r", "h"),
                Verb::Start,
                "x.service",
                Duration::from_secs(1)
            ),
            Err(ServiceError::NotRunningSystem { .. })
        ));
    }
}
