//! Watching a unit after a change: does it hold the declared state for the
//! settle interval?
//!
//! `systemctl start` returning 0 means systemd accepted and finished the start
//! job, which for a `Type=simple` unit is the moment the process was forked.
//! A service that reads a bad configuration and exits a second later, or one
//! that systemd keeps restarting, passed that test. This module samples the
//! unit several times over the interval and judges the samples; the judging is
//! a pure function so every rule is tested without a host. It must not probe
//! the service itself (ports, HTTP): that would be a health check, which
//! verification is not.

use std::time::{Duration, Instant};

use datum_host::Host;

use super::desired::RunState;
use super::error::{Instability, ServiceError};
use super::systemctl::{self, UnitStatus};

/// One reading and when it was taken, relative to the first.
#[derive(Debug, Clone)]
pub struct Sample {
    pub after: Duration,
    pub status: UnitStatus,
}

/// The time between samples: about six per interval, but never more often
/// than every 100 ms (each sample is a `systemctl` run) nor less often than
/// every second (a unit restarting after `RestartSec=100ms` is active again
/// before a slower poll would look).
pub fn interval(settle: Duration) -> Duration {
    (settle / 6).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// Judges samples taken in order. The first violation in time is reported,
/// because it is the cause; later ones are usually its consequences.
pub fn judge(state: RunState, samples: &[Sample]) -> Result<(), Instability> {
    let Some(first) = samples.first() else {
        return Ok(());
    };
    for sample in samples {
        let s = &sample.status;
        match state {
            RunState::Running => {
                if !s.is_active() {
                    return Err(Instability::NotActive {
                        after: sample.after,
                        active_state: s.active_state.clone(),
                        sub_state: s.sub_state.clone(),
                        result: s.result.clone(),
                    });
                }
                if let (Some(before), Some(now)) = (first.status.restarts, s.restarts)
                    && now != before
                {
                    return Err(Instability::Restarted { before, after: now });
                }
                if s.invocation_id != first.status.invocation_id {
                    return Err(Instability::Reinvoked);
                }
            }
            RunState::Stopped => {
                if !s.is_down() {
                    return Err(Instability::NotStopped {
                        after: sample.after,
                        active_state: s.active_state.clone(),
                    });
                }
            }
        }
    }
    if state == RunState::Running
        && let Some(reload) = samples.last().and_then(|s| s.status.reload_result.as_ref())
        && reload != "success"
    {
        return Err(Instability::ReloadFailed {
            reload_result: reload.clone(),
        });
    }
    Ok(())
}

/// Samples `unit` for `settle` and judges it against `state`, stopping at
/// the first violation. Returns the last reading.
pub fn watch(
    host: &Host,
    unit: &str,
    state: RunState,
    settle: Duration,
) -> Result<UnitStatus, ServiceError> {
    let started = Instant::now();
    let step = interval(settle);
    let mut samples: Vec<Sample> = Vec::new();
    // `settle:` may be up to five minutes: a progress bar says what the
    // pass waits for meanwhile.
    let words = format!("verifying {unit} stays {}", state.word());
    let _waiting = datum_core::progress::waiting(words, Some(settle));
    loop {
        let status = systemctl::show(host, unit)?;
        samples.push(Sample {
            after: started.elapsed(),
            status,
        });
        judge(state, &samples).map_err(|why| ServiceError::Unsettled {
            unit: unit.to_owned(),
            host: host.name().to_owned(),
            settle,
            why: Box::new(why),
        })?;
        let elapsed = started.elapsed();
        if elapsed >= settle {
            break;
        }
        // The last sample lands at the end of the interval, not before it.
        std::thread::sleep(step.min(settle - elapsed));
    }
    samples
        .pop()
        .map(|s| s.status)
        .ok_or_else(|| ServiceError::Unreadable {
            unit: unit.to_owned(),
            host: host.name().to_owned(),
            property: "ActiveState",
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(active: &str, restarts: u64, invocation: &str, reload: &str) -> UnitStatus {
        UnitStatus {
            load_state: "loaded".into(),
            active_state: active.into(),
            sub_state: if active == "active" {
                "running"
            } else {
                "auto-restart"
            }
            .into(),
            unit_file_state: "enabled".into(),
            result: if active == "active" {
                "success"
            } else {
                "exit-code"
            }
            .into(),
            reload_result: Some(reload.into()),
            restarts: Some(restarts),
            invocation_id: invocation.into(),
            ..UnitStatus::default()
        }
    }

    fn samples(statuses: Vec<UnitStatus>) -> Vec<Sample> {
        statuses
            .into_iter()
            .enumerate()
            .map(|(i, status)| Sample {
                after: Duration::from_millis(500 * i as u64),
                status,
            })
            .collect()
    }

    #[test]
    fn a_unit_that_stays_up_is_settled() {
        let s = samples(vec![status("active", 4, "a", "success"); 4]);
        assert_eq!(judge(RunState::Running, &s), Ok(()));
        assert_eq!(judge(RunState::Running, &[]), Ok(()));
    }

    #[test]
    fn a_unit_that_dropped_out_is_not() {
        let s = samples(vec![
            status("active", 0, "a", "success"),
            status("activating", 0, "a", "success"),
        ]);
        match judge(RunState::Running, &s) {
            Err(Instability::NotActive {
                after,
                active_state,
                result,
                ..
            }) => {
                assert_eq!(after, Duration::from_millis(500));
                assert_eq!(active_state, "activating");
                assert_eq!(result, "exit-code");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_restart_between_samples_is_caught_even_when_every_sample_is_active() {
        let s = samples(vec![
            status("active", 0, "a", "success"),
            status("active", 1, "b", "success"),
        ]);
        assert_eq!(
            judge(RunState::Running, &s),
            Err(Instability::Restarted {
                before: 0,
                after: 1
            })
        );
        // A start from outside does not move NRestarts but is a new invocation.
        let s = samples(vec![
            status("active", 0, "a", "success"),
            status("active", 0, "b", "success"),
        ]);
        assert_eq!(judge(RunState::Running, &s), Err(Instability::Reinvoked));
    }

    #[test]
    fn a_failed_reload_fails_even_though_the_unit_is_active() {
        let s = samples(vec![status("active", 0, "a", "exit-code"); 3]);
        assert_eq!(
            judge(RunState::Running, &s),
            Err(Instability::ReloadFailed {
                reload_result: "exit-code".into()
            })
        );
    }

    #[test]
    fn stopped_means_down_at_every_sample() {
        let down = status("inactive", 0, "", "success");
        let failed = status("failed", 0, "", "success");
        assert_eq!(
            judge(RunState::Stopped, &samples(vec![down.clone(), failed])),
            Ok(())
        );
        assert!(matches!(
            judge(
                RunState::Stopped,
                &samples(vec![down, status("active", 0, "c", "success")])
            ),
            Err(Instability::NotStopped { .. })
        ));
    }

    #[test]
    fn sampling_is_frequent_but_bounded() {
        assert_eq!(interval(Duration::from_secs(3)), Duration::from_millis(500));
        assert_eq!(interval(Duration::ZERO), Duration::from_millis(100));
        assert_eq!(interval(Duration::from_secs(60)), Duration::from_secs(1));
    }
}
