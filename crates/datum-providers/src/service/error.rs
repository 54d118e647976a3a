//! What can go wrong managing a unit, in words an operator can act on.
//!
//! Every variant names the unit and, where the host matters, the host. This
//! module owns the wording only; it must not decide what a pass does about a
//! failure (the engine does).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use datum_host::HostError;

/// A failure of the Service provider.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// `--root` is a directory tree, not a running system.
    #[error(
        "cannot manage {unit} under --root {}: services can only be managed on the running system (--root /) or from inside it",
        root.display()
    )]
    NotRunningSystem { unit: String, root: PathBuf },

    #[error(
        "unit {unit} does not exist on {host} (systemd: LoadState=not-found); install what provides it and add that to `requires`"
    )]
    UnitNotFound { unit: String, host: String },

    #[error(
        "unit {unit} on {host} could not be loaded (systemd: LoadState={load_state}); see `systemctl status {unit}`"
    )]
    UnitNotLoaded {
        unit: String,
        host: String,
        load_state: String,
    },

    #[error(
        "unit {unit} on {host} is {unit_file_state}: it cannot be enabled or disabled{}",
        enable_hint(unit_file_state)
    )]
    CannotChangeEnablement {
        unit: String,
        host: String,
        unit_file_state: String,
    },

    /// Masked by someone (`systemctl mask`): systemd refuses to start or
    /// enable it, and Datum does not lift a mask a person put there.
    #[error("unit {unit} on {host} {}", masked_words(unit, wanted))]
    Masked {
        unit: String,
        host: String,
        /// What the declaration asks that the mask forbids: `started`,
        /// `enabled` or `started or enabled`.
        wanted: &'static str,
    },

    #[error(
        "unit {unit} on {host} cannot reload (it has no ExecReload=): list the resource in `restart_on` instead"
    )]
    CannotReload { unit: String, host: String },

    /// `systemctl` ran and said no.
    #[error("`systemctl {verb} {unit}` failed on {host} ({}){}", status_words(*status, *timed_out), stderr_suffix(stderr))]
    Systemctl {
        verb: &'static str,
        unit: String,
        host: String,
        status: Option<i32>,
        timed_out: bool,
        stderr: String,
    },

    /// `systemctl` did not return within the time allowed (a job: the
    /// Service's `timeout:`), and was killed; systemd goes on with the job.
    #[error(
        "`systemctl {verb} {unit}` did not finish within {} on {host}, and Datum stopped waiting: systemd may still be running the job (`systemctl list-jobs`) until the unit's own timeouts (TimeoutStartSec=, TimeoutStopSec=) end it; a Service's `timeout:` ({} unless declared) is how long its start, stop, restart or reload is waited for",
        fmt_duration(*waited),
        fmt_duration(super::desired::DEFAULT_TIMEOUT)
    )]
    JobTimedOut {
        verb: &'static str,
        unit: String,
        host: String,
        waited: Duration,
    },

    /// `systemctl show` printed something this provider does not understand.
    #[error("cannot read the state of {unit} on {host}: `systemctl show` printed no {property}")]
    Unreadable {
        unit: String,
        host: String,
        property: &'static str,
    },

    /// The unit reached the declared state but did not hold it.
    #[error("{unit} on {host} did not settle within {}: {why}", fmt_duration(*settle))]
    Unsettled {
        unit: String,
        host: String,
        settle: Duration,
        /// Boxed to keep every `Result` of this module small.
        why: Box<Instability>,
    },

    /// `systemctl` could not be run at all.
    #[error("cannot run systemctl for {unit}: {source}")]
    Host {
        unit: String,
        #[source]
        source: HostError,
    },
}

impl From<ServiceError> for crate::ProviderError {
    fn from(err: ServiceError) -> Self {
        crate::ProviderError::Kind(crate::KindError::new(err))
    }
}

/// Why verification refused a unit that systemd had accepted a request for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instability {
    /// Declared running, but at some sample it was not active.
    NotActive {
        after: Duration,
        active_state: String,
        sub_state: String,
        result: String,
    },
    /// Declared stopped, but it was active (something started it again).
    NotStopped {
        after: Duration,
        active_state: String,
    },
    /// systemd restarted it (Restart=) while it was watched.
    Restarted { before: u64, after: u64 },
    /// It was started anew (another invocation) while it was watched.
    Reinvoked,
    /// The last reload of the current run failed.
    ReloadFailed { reload_result: String },
}

impl fmt::Display for Instability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Instability::NotActive {
                after,
                active_state,
                sub_state,
                result,
            } => write!(
                f,
                "after {} it was {active_state} ({sub_state}), not active; last result: {result}",
                fmt_duration(*after)
            ),
            Instability::NotStopped {
                after,
                active_state,
            } => write!(
                f,
                "after {} it was {active_state} again although declared stopped (is it started by a socket, timer or another unit?)",
                fmt_duration(*after)
            ),
            Instability::Restarted { before, after } => write!(
                f,
                "systemd restarted it {} time(s) while it was watched (NRestarts {before} -> {after}): it keeps exiting",
                after.saturating_sub(*before)
            ),
            Instability::Reinvoked => {
                f.write_str("it was started anew while it was watched (its invocation ID changed)")
            }
            Instability::ReloadFailed { reload_result } => write!(
                f,
                "its last reload failed (systemd: ReloadResult={reload_result}); it still runs the configuration it loaded before"
            ),
        }
    }
}

/// What follows "unit X (on HOST)" when a mask forbids what is declared:
/// the apply's error and the plan's "would fail" say the same.
pub(crate) fn masked_words(unit: &str, wanted: &str) -> String {
    format!(
        "is masked (`systemctl mask`): it cannot be {wanted} while the mask stands, and Datum does not unmask it (a mask is a person's decision): run `systemctl unmask {unit}` to let Datum manage it again, or declare it `state: stopped` and `enabled: false`"
    )
}

fn enable_hint(unit_file_state: &str) -> &'static str {
    match unit_file_state {
        "static" => " (it has no [Install] section; it starts only when another unit wants it)",
        "masked" | "masked-runtime" => " (unmask it first)",
        "generated" => " (a generator creates it at boot from other configuration)",
        "transient" => " (it was created at runtime and has no unit file)",
        "indirect" => " (it is enabled through another unit listed in its Also=)",
        _ => "",
    }
}

fn status_words(status: Option<i32>, timed_out: bool) -> String {
    match (timed_out, status) {
        (true, _) => "timed out".to_owned(),
        (false, Some(code)) => format!("exit {code}"),
        (false, None) => "killed by a signal".to_owned(),
    }
}

fn stderr_suffix(stderr: &str) -> String {
    let trimmed = stderr.trim();
    if trimmed.is_empty() {
        String::new()
    } else {
        format!(": {}", trimmed.replace('\n', " / "))
    }
}

/// `3s`, `500ms`, `2.5s`: short and exact enough for a message.
pub(crate) fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_unit_and_host_on_one_line() {
        let err = ServiceError::Systemctl {
            verb: "start",
            unit: "web.service".into(),
            host: "web-001".into(),
            status: Some(1),
            timed_out: false,
            stderr: "Job for web.service failed.\nSee \"systemctl status\".\n".into(),
        };
        let text = err.to_string();
        assert_eq!(
            text,
            "`systemctl start web.service` failed on web-001 (exit 1): Job for web.service failed. / See \"systemctl status\"."
        );
        let err = ServiceError::UnitNotFound {
            unit: "nosuch.service".into(),
            host: "web-001".into(),
        };
        assert!(
            err.to_string()
                .starts_with("unit nosuch.service does not exist on web-001")
        );
    }

    #[test]
    fn unsettled_says_what_moved() {
        let err = ServiceError::Unsettled {
            unit: "flappy.service".into(),
            host: "h".into(),
            settle: Duration::from_millis(3000),
            why: Box::new(Instability::Restarted {
                before: 0,
                after: 2,
            }),
        };
        let text = err.to_string();
        assert!(text.contains("within 3s"), "{text}");
        assert!(text.contains("NRestarts 0 -> 2"), "{text}");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(fmt_duration(Duration::from_secs(3)), "3s");
        assert_eq!(fmt_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(fmt_duration(Duration::from_millis(2500)), "2.5s");
    }
}
