//! The loop driven with a fake checker: ordering, watches, overflow, reload.

use std::sync::Mutex;

use super::*;
use crate::check::{CheckError, ClassReport, ClassSpec, WatchScope, WatchTarget};

#[derive(Default)]
struct Shared {
    scopes: Vec<(Instant, Scope)>,
    fail_load: bool,
    loads: usize,
    /// Checks of watched resources that fail as a whole (the root lock
    /// timed out), before they succeed again.
    fail_watch_checks: usize,
    /// Full passes that fail as a whole (the root lock timed out), before
    /// they succeed again.
    fail_full_passes: usize,
    /// How long each load takes.
    load_time: Duration,
    /// Loads that have started.
    loads_started: usize,
    /// Loads wait while this is set.
    hold_loads: bool,
    /// The inspection times reported instead of the time taken: (complete
    /// checks, watch-triggered checks).
    reported: Option<(Duration, Duration)>,
}

struct Fake {
    shared: Arc<Mutex<Shared>>,
    loaded: Loaded,
    /// How long each check takes.
    work: Duration,
}

impl ClassChecker for Fake {
    fn load(&mut self) -> Result<Loaded, LoadError> {
        let took = {
            let mut s = self.shared.lock().unwrap();
            s.loads_started += 1;
            s.load_time
        };
        while self.shared.lock().unwrap().hold_loads {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(took);
        let mut s = self.shared.lock().unwrap();
        s.loads += 1;
        if s.fail_load {
            return Err(LoadError::Lint {
                repo: "/repo".into(),
                errors: 1,
                first: "/repo/base/a.yaml:3:1: error: broken".into(),
            });
        }
        Ok(self.loaded.clone())
    }

    fn check(&mut self, scope: &Scope, cancel: &Cancel) -> Result<CheckReport, CheckError> {
        self.shared
            .lock()
            .unwrap()
            .scopes
            .push((Instant::now(), scope.clone()));
        {
            let mut s = self.shared.lock().unwrap();
            if matches!(scope, Scope::Resources { .. }) && s.fail_watch_checks > 0 {
                s.fail_watch_checks -= 1;
                return Err(CheckError {
                    scope: "critical (1 resource(s))".into(),
                    source: "another Datum pass holds the lock".into(),
                });
            }
            if *scope == Scope::All && s.fail_full_passes > 0 {
                s.fail_full_passes -= 1;
                return Err(CheckError {
                    scope: "all".into(),
                    source: "another Datum pass holds the lock".into(),
                });
            }
        }
        let t0 = Instant::now();
        while t0.elapsed() < self.work && !cancel.is_cancelled() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let classes: Vec<String> = match scope {
            Scope::All => self.loaded.classes.iter().map(|c| c.name.clone()).collect(),
            Scope::Class(c) | Scope::Resources { class: c, .. } => vec![c.clone()],
        };
        let mut report = CheckReport {
            cancelled: cancel.is_cancelled(),
            ..CheckReport::default()
        };
        let duration = match self.shared.lock().unwrap().reported {
            Some((complete, _)) if scope.complete() => complete,
            Some((_, watch)) => watch,
            None => t0.elapsed(),
        };
        for c in classes {
            report.classes.insert(
                c,
                ClassReport {
                    states: BTreeMap::from([("drifted".into(), 1)]),
                    findings: BTreeMap::from([("changed_outside".into(), 1)]),
                    acted: BTreeMap::new(),
                    duration,
                },
            );
        }
        Ok(report)
    }
}

fn class(name: &str, ms: u64, watch: bool) -> ClassSpec {
    ClassSpec {
        name: name.into(),
        interval: Duration::from_millis(ms),
        watch,
        policy: "report".into(),
    }
}

fn config(log: Arc<Mutex<Vec<String>>>) -> AgentConfig {
    AgentConfig {
        host: "test-host".into(),
        listen: None,
        full_interval: Duration::from_secs(3600),
        debounce: Duration::from_millis(100),
        version: "test".into(),
        validators: vec!["sshd".into()],
        signals: false,
        log: Arc::new(move |_, line| log.lock().unwrap().push(line.to_owned())),
    }
}

/// Runs the agent on a thread; returns its control, metrics and join handle.
fn start(
    fake: Fake,
    log: Arc<Mutex<Vec<String>>>,
) -> (
    Control,
    Arc<Metrics>,
    std::thread::JoinHandle<Result<(), AgentError>>,
) {
    let agent = Agent::new(config(log));
    let control = agent.control();
    let metrics = agent.metrics();
    let handle = std::thread::spawn(move || {
        let mut fake = fake;
        agent.run(&mut fake, |_| {})
    });
    (control, metrics, handle)
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn full_pass_first_then_each_class_on_its_interval_then_stop() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let fake = Fake {
        shared: Arc::clone(&shared),
        loaded: Loaded {
            classes: vec![class("critical", 200, false), class("normal", 500, false)],
            watch: vec![],
            resources: 2,
        },
        work: Duration::ZERO,
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    let (control, metrics, handle) = start(fake, Arc::clone(&log));
    std::thread::sleep(Duration::from_millis(1300));
    control.stop();
    handle.join().unwrap().unwrap();
    // The slots that passed: more than 1.3 s if the sleep overran.
    let ran_for = t0.elapsed().as_millis();
    let s = shared.lock().unwrap();
    assert_eq!(s.scopes[0].1, Scope::All);
    let critical = s
        .scopes
        .iter()
        .filter(|(_, sc)| *sc == Scope::Class("critical".into()))
        .count();
    let normal = s
        .scopes
        .iter()
        .filter(|(_, sc)| *sc == Scope::Class("normal".into()))
        .count();
    // 1.3 s: critical every 200 ms (~6), normal every 500 ms (~2), and
    // never more than one check per slot. On a loaded machine a check may
    // run late (fewer checks, uneven gaps: the one after a late check comes
    // at the next slot, maybe a few ms later); where the slots are is
    // schedule::tests::a_late_check_keeps_the_class_on_its_slots.
    let most = |every: u128| usize::try_from(ran_for / every + 1).unwrap();
    assert!(
        (1..=most(200)).contains(&critical),
        "critical ran {critical} times in {ran_for} ms"
    );
    assert!(
        (1..=most(500)).contains(&normal),
        "normal ran {normal} times in {ran_for} ms"
    );
    let text = metrics.encode();
    assert!(text.contains("datum_checks_total{class=\"critical\",trigger=\"interval\"}"));
    assert!(
        text.contains("datum_detection_bound_seconds{class=\"normal\"} 0.5"),
        "{text}"
    );
    assert!(log.lock().unwrap().iter().any(|l| l == "stopped"));
}

#[test]
fn a_watched_edit_is_checked_within_the_debounce() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sshd_config");
    std::fs::write(&file, "a").unwrap();
    let shared = Arc::new(Mutex::new(Shared::default()));
    let id = ResourceId::new("File", "sshd");
    let fake = Fake {
        shared: Arc::clone(&shared),
        loaded: Loaded {
            classes: vec![class("critical", 60_000, true)],
            watch: vec![WatchTarget {
                resource: id.clone(),
                class: "critical".into(),
                path: file.clone(),
                scope: WatchScope::RegularFile,
            }],
            resources: 1,
        },
        work: Duration::ZERO,
    };
    let (control, metrics, handle) = start(fake, Arc::default());
    wait_for("the first full pass", || {
        !shared.lock().unwrap().scopes.is_empty()
    });
    let edited = Instant::now();
    std::fs::write(&file, "b").unwrap();
    wait_for("the watch check", || {
        shared
            .lock()
            .unwrap()
            .scopes
            .iter()
            .any(|(_, s)| matches!(s, Scope::Resources { .. }))
    });
    let s = shared.lock().unwrap();
    let (at, scope) = s
        .scopes
        .iter()
        .find(|(_, s)| matches!(s, Scope::Resources { .. }))
        .unwrap();
    assert_eq!(
        *scope,
        Scope::Resources {
            class: "critical".into(),
            ids: vec![id]
        }
    );
    let latency = *at - edited;
    assert!(
        latency >= Duration::from_millis(90),
        "debounced: {latency:?}"
    );
    assert!(latency < Duration::from_secs(1), "{latency:?}");
    drop(s);
    // Counted once the loop has stopped: the fake notes a check as it
    // starts, before the loop counts it (and one edit's events may fall
    // in two windows under load: each check is counted).
    control.stop();
    handle.join().unwrap().unwrap();
    let checks = shared
        .lock()
        .unwrap()
        .scopes
        .iter()
        .filter(|(_, s)| matches!(s, Scope::Resources { .. }))
        .count();
    let text = metrics.encode();
    assert!(
        text.contains("datum_class_watched{class=\"critical\"} 1"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "datum_checks_total{{class=\"critical\",trigger=\"watch\"}} {checks}"
        )),
        "{text}"
    );
}

/// The agent's interval bound (what no watch sees, or anything while a
/// watch is lost) adds the p95 of complete checks: many short checks of the
/// few resources a watch reported must not pull it down. One p95 over every
/// check made a class whose full pass takes 2 s state 60.001 s.
#[test]
fn watch_triggered_checks_do_not_shorten_the_interval_bound() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Arc::new(Mutex::new(Shared {
        reported: Some((Duration::from_secs(2), Duration::from_millis(1))),
        ..Shared::default()
    }));
    let id = ResourceId::new("Tree", "t");
    let fake = Fake {
        shared: Arc::clone(&shared),
        loaded: Loaded {
            classes: vec![class("critical", 60_000, true)],
            // A watched folder missing when the watches are armed: the
            // class relies on its interval, its bound is interval + p95.
            watch: vec![WatchTarget {
                resource: id.clone(),
                class: "critical".into(),
                path: dir.path().join("gone"),
                scope: WatchScope::Subtree,
            }],
            resources: 1,
        },
        work: Duration::ZERO,
    };
    let (control, metrics, handle) = start(fake, Arc::default());
    let watch_checks = |shared: &Arc<Mutex<Shared>>| {
        shared
            .lock()
            .unwrap()
            .scopes
            .iter()
            .filter(|(_, s)| !s.complete())
            .count()
    };
    wait_for("the first full pass", || {
        metrics
            .encode()
            .contains("datum_checks_total{class=\"critical\",trigger=\"full\"} 1")
    });
    // 30 watch-triggered checks for the full pass's one: over all 31, the
    // p95 would be a watch-triggered check's.
    for n in 1..=30 {
        control.inject(WatchNews::Changed(BTreeMap::from([(
            "critical".to_owned(),
            BTreeSet::from([id.clone()]),
        )])));
        wait_for("the watch-triggered check", || watch_checks(&shared) >= n);
    }
    control.stop();
    handle.join().unwrap().unwrap();
    let text = metrics.encode();
    assert!(
        text.contains("datum_class_watched{class=\"critical\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("datum_detection_bound_seconds{class=\"critical\"} 62.0\n"),
        "{text}"
    );
}

#[test]
fn overflow_and_lost_watches_run_a_full_pass_and_are_counted() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake {
        shared: Arc::clone(&shared),
        loaded: Loaded {
            classes: vec![class("critical", 60_000, true)],
            watch: vec![WatchTarget {
                resource: ResourceId::new("Tree", "t"),
                class: "critical".into(),
                path: dir.path().to_owned(),
                scope: WatchScope::Subtree,
            }],
            resources: 1,
        },
        work: Duration::ZERO,
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let (control, metrics, handle) = start(fake, Arc::clone(&log));
    let fulls = |shared: &Arc<Mutex<Shared>>| {
        shared
            .lock()
            .unwrap()
            .scopes
            .iter()
            .filter(|(_, s)| *s == Scope::All)
            .count()
    };
    wait_for("the first full pass", || fulls(&shared) == 1);
    control.inject(WatchNews::Overflow);
    wait_for("the overflow pass", || fulls(&shared) == 2);
    control.inject(WatchNews::Lost {
        reason: "limit",
        detail: "inotify watch limit reached".into(),
    });
    wait_for("the limit pass", || fulls(&shared) == 3);
    // A watched folder removed or renamed away while running: its removal
    // is a change, and one made again in its place is watched once re-armed.
    control.inject(WatchNews::Lost {
        reason: "missing",
        detail: "the tree was removed or renamed; its watch is gone".into(),
    });
    wait_for("the missing-folder pass", || fulls(&shared) == 4);
    control.stop();
    handle.join().unwrap().unwrap();
    let text = metrics.encode();
    for line in [
        "datum_watch_overflows_total 1",
        "datum_watch_errors_total{reason=\"limit\"} 1",
        "datum_fallback_full_passes_total{reason=\"overflow\"} 1",
        "datum_fallback_full_passes_total{reason=\"limit\"} 1",
        "datum_fallback_full_passes_total{reason=\"missing\"} 1",
        "datum_watch_errors_total{reason=\"missing\"} 1",
        "datum_checks_total{class=\"critical\",trigger=\"full\"} 4",
    ] {
        assert!(text.contains(line), "missing {line}:\n{text}");
    }
    let log = log.lock().unwrap();
    assert!(log.iter().any(|l| l.contains("queue overflow")), "{log:?}");
    assert!(
        log.iter().any(|l| l.contains("max_user_watches")),
        "{log:?}"
    );
    // The limit pass re-armed the watches first.
    assert!(log.iter().any(|l| l.contains("re-arming")), "{log:?}");
}

#[test]
fn a_failed_reload_keeps_the_last_good_catalogue_and_says_so() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let fake = Fake {
        shared: Arc::clone(&shared),
        loaded: Loaded {
            classes: vec![class("critical", 60_000, false)],
            watch: vec![],
            resources: 1,
        },
        work: Duration::ZERO,
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let (control, metrics, handle) = start(fake, Arc::clone(&log));
    wait_for("the first pass", || {
        !shared.lock().unwrap().scopes.is_empty()
    });
    shared.lock().unwrap().fail_load = true;
    control.reload();
    wait_for("the reload", || shared.lock().unwrap().loads == 2);
    wait_for("the metric", || {
        metrics.encode().contains("datum_repository_loaded 0")
    });
    assert!(
        metrics
            .encode()
            .contains("datum_check_interval_seconds{class=\"critical\"}")
    );
    // A good reload runs a full pass with the new catalogue.
    shared.lock().unwrap().fail_load = false;
    control.reload();
    wait_for("the second full pass", || {
        shared
            .lock()
            .unwrap()
            .scopes
            .iter()
            .filter(|(_, s)| *s == Scope::All)
            .count()
            == 2
    });
    control.stop();
    handle.join().unwrap().unwrap();
    assert!(metrics.encode().contains("datum_repository_loaded 1"));
    assert!(
        metrics
            .encode()
            .contains("datum_repository_reload_failures_total 1")
    );
    let log = log.lock().unwrap();
    assert!(
        log.iter()
            .any(|l| l.contains("reload refused") && l.contains("1 error(s)")),
        "{log:?}"
    );
}

#[test]
fn stop_cancels_the_check_in_flight() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let fake = Fake {
        shared: Arc::clone(&shared),
        loaded: Loaded {
            classes: vec![class("critical", 60_000, false)],
            watch: vec![],
            resources: 1,
        },
        work: Duration::from_secs(30),
    };
    let (control, metrics, handle) = start(fake, Arc::default());
    wait_for("the pass to start", || {
        !shared.lock().unwrap().scopes.is_empty()
    });
    let t0 = Instant::now();
    control.stop();
    handle.join().unwrap().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2));
    // The cancelled pass did not publish a partial picture as complete.
    assert!(
        !metrics
            .encode()
            .contains("datum_last_check_timestamp_seconds{")
    );
}

#[test]
fn once_returns_the_check_exit_code_and_a_bad_repository_fails() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let mut fake = Fake {
        shared: Arc::clone(&shared),
        loaded: Loaded {
            classes: vec![class("critical", 60_000, false)],
            watch: vec![],
            resources: 1,
        },
        work: Duration::ZERO,
    };
    let agent = Agent::new(config(Arc::default()));
    assert_eq!(agent.run_once(&mut fake).unwrap(), Conclusion::Clean);
    assert_eq!(shared.lock().unwrap().scopes.len(), 1);
    shared.lock().unwrap().fail_load = true;
    let agent = Agent::new(config(Arc::default()));
    assert!(matches!(
        agent.run_once(&mut fake),
        Err(AgentError::Load(_))
    ));
}

#[test]
fn once_cut_short_by_a_stop_is_not_clean() {
    // SIGTERM (or Ctrl-C) during `--once`: the classes not checked yet are
    // unknown, so cron must not read the exit as "no drift" (0).
    let shared = Arc::new(Mutex::new(Shared::default()));
    let mut fake = Fake {
        shared: Arc::clone(&shared),
        loaded: Loaded {
            classes: vec![class("critical", 60_000, false)],
            watch: vec![],
            resources: 1,
        },
        work: Duration::from_secs(30),
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::new(config(Arc::clone(&log)));
    let control = agent.control();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        control.stop();
    });
    let t0 = Instant::now();
    assert_eq!(agent.run_once(&mut fake).unwrap(), Conclusion::Errors);
    assert!(t0.elapsed() < Duration::from_secs(5));
    stopper.join().unwrap();
    let log = log.lock().unwrap();
    assert!(
        log.iter()
            .any(|l| l.contains("stopped before the check completed")),
        "{log:?}"
    );
}

#[test]
fn a_watched_change_whose_check_could_not_run_is_checked_again() {
    // The root lock timed out (an apply ran longer than --lock-timeout):
    // the change is still unchecked, and a revert class must not wait for
    // its interval to be reverted.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sshd_config");
    std::fs::write(&file, "a").unwrap();
    let shared = Arc::new(Mutex::new(Shared {
        fail_watch_checks: 1,
        ..Shared::default()
    }));
    let id = ResourceId::new("File", "sshd");
    let fake = Fake {
        shared: Arc::clone(&shared),
        loaded: Loaded {
            classes: vec![class("critical", 600_000, true)],
            watch: vec![WatchTarget {
                resource: id.clone(),
                class: "critical".into(),
                path: file.clone(),
                scope: WatchScope::RegularFile,
            }],
            resources: 1,
        },
        work: Duration::ZERO,
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let (control, metrics, handle) = start(fake, Arc::clone(&log));
    wait_for("the first full pass", || {
        !shared.lock().unwrap().scopes.is_empty()
    });
    std::fs::write(&file, "b").unwrap();
    let watch_checks = |shared: &Arc<Mutex<Shared>>| {
        shared
            .lock()
            .unwrap()
            .scopes
            .iter()
            .filter(|(_, s)| {
                *s == Scope::Resources {
                    class: "critical".into(),
                    ids: vec![id.clone()],
                }
            })
            .map(|(t, _)| *t)
            .collect::<Vec<_>>()
    };
    wait_for("the retry", || watch_checks(&shared).len() >= 2);
    let times = watch_checks(&shared);
    // Not at once (the lock is still held), nor an interval later.
    let gap = times[1] - times[0];
    assert!(gap >= Duration::from_millis(500), "{gap:?}");
    control.stop();
    handle.join().unwrap().unwrap();
    // Every check but the first ran (one edit's events may fall in two
    // windows on a loaded machine: a third check).
    let ran = watch_checks(&shared).len() - 1;
    let text = metrics.encode();
    assert!(text.contains("datum_check_errors_total 1"), "{text}");
    assert!(
        text.contains(&format!(
            "datum_checks_total{{class=\"critical\",trigger=\"watch\"}} {ran}"
        )),
        "{text}"
    );
    let log = log.lock().unwrap();
    assert!(
        log.iter().any(|l| l.contains("checked again in")),
        "{log:?}"
    );
}

/// A full pass that could not run (the root lock timed out: an apply ran
/// longer than `--lock-timeout`) was next tried a whole `--full-interval`
/// later (1 h by default), so an agent whose first pass met a long apply
/// answered `/readyz` `503 starting` and exported no check for up to an
/// hour after the apply ended (a day's class is covered only by the full
/// pass). It runs again after the doubling wait of any check that could
/// not run.
#[test]
fn a_full_pass_that_could_not_run_runs_again_soon() {
    let shared = Arc::new(Mutex::new(Shared {
        fail_full_passes: 2,
        ..Shared::default()
    }));
    let fake = Fake {
        shared: Arc::clone(&shared),
        loaded: Loaded {
            classes: vec![class("daily", 86_400_000, false)],
            watch: vec![],
            resources: 1,
        },
        work: Duration::ZERO,
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let (control, metrics, handle) = start(fake, Arc::clone(&log));
    let full_passes = |shared: &Arc<Mutex<Shared>>| {
        shared
            .lock()
            .unwrap()
            .scopes
            .iter()
            .filter(|(_, s)| *s == Scope::All)
            .map(|(t, _)| *t)
            .collect::<Vec<_>>()
    };
    wait_for("three full passes", || full_passes(&shared).len() == 3);
    let times = full_passes(&shared);
    // Not at once (the lock is still held), and longer the second time.
    let (first, second) = (times[1] - times[0], times[2] - times[1]);
    assert!(first >= Duration::from_millis(900), "{first:?}");
    assert!(second >= first + Duration::from_millis(500), "{second:?}");
    // The third ran (a stop before it ends would cut it short).
    wait_for("the third pass to be counted", || {
        metrics
            .encode()
            .contains("datum_checks_total{class=\"daily\",trigger=\"full\"} 1")
    });
    control.stop();
    handle.join().unwrap().unwrap();
    assert_eq!(full_passes(&shared).len(), 3);
    let text = metrics.encode();
    assert!(text.contains("datum_check_errors_total 2"), "{text}");
    assert!(
        text.contains("datum_checks_total{class=\"daily\",trigger=\"full\"} 1"),
        "{text}"
    );
    let log = log.lock().unwrap();
    assert!(
        log.iter()
            .any(|l| l.contains("the full pass could not run: it runs again in 1s")),
        "{log:?}"
    );
}

#[test]
fn the_check_line_says_what_the_policy_did() {
    // A revert that worked, one that failed, a flapping file quarantined:
    // no finding stays open, and the line used to say only "0 open
    // finding(s), exit 2".
    let report = CheckReport {
        classes: BTreeMap::from([(
            "critical".to_owned(),
            ClassReport {
                states: BTreeMap::from([
                    ("converged".to_owned(), 4),
                    ("changed".to_owned(), 1),
                    ("failed".to_owned(), 1),
                    ("quarantined".to_owned(), 1),
                ]),
                findings: BTreeMap::new(),
                acted: BTreeMap::from([("accepted".to_owned(), 2)]),
                duration: Duration::from_millis(3),
            },
        )]),
        conclusion: Conclusion::Errors,
        ..CheckReport::default()
    };
    let scope = Scope::Class("critical".into());
    let (level, line) = summary("interval", &scope, &report);
    assert_eq!(
        line,
        "check (interval) of class critical: 0 open finding(s), 1 reverted, 1 failed, 1 quarantined, 2 accepted, exit 1, 3 ms"
    );
    // A failure needs a person: not an info line.
    assert_eq!(level, LogLevel::Warn);
    let quiet = CheckReport {
        classes: BTreeMap::from([("critical".to_owned(), ClassReport::default())]),
        ..CheckReport::default()
    };
    assert_eq!(
        summary("interval", &scope, &quiet),
        (
            LogLevel::Info,
            "check (interval) of class critical: 0 open finding(s), exit 0, 0 ms".to_owned()
        )
    );
}

#[test]
fn a_burst_of_reloads_is_one_reload_not_one_each() {
    // `systemctl reload` from every hook of a deploy script: each reload
    // reads the repository as it is when it starts, so the ones that
    // arrived before it add nothing, while each would cost a compile and
    // hold up the checks behind it.
    let shared = Arc::new(Mutex::new(Shared {
        load_time: Duration::from_millis(500),
        ..Shared::default()
    }));
    let fake = Fake {
        shared: Arc::clone(&shared),
        loaded: Loaded {
            classes: vec![class("critical", 60_000, false)],
            watch: vec![],
            resources: 1,
        },
        work: Duration::ZERO,
    };
    let (control, _metrics, handle) = start(fake, Arc::default());
    wait_for("the first pass", || {
        !shared.lock().unwrap().scopes.is_empty()
    });
    // The first request's reload is held until the other 19 are in (it
    // took 500 ms while the burst took 100 ms, which a loaded machine
    // stretched past the reload: 4 loads).
    shared.lock().unwrap().hold_loads = true;
    control.reload();
    wait_for("the reload to start", || {
        shared.lock().unwrap().loads_started == 2
    });
    for _ in 0..19 {
        control.reload();
    }
    shared.lock().unwrap().hold_loads = false;
    // A stop is handled after every request sent before it: the reload
    // they asked for has run by the time the loop ends.
    control.stop();
    handle.join().unwrap().unwrap();
    let s = shared.lock().unwrap();
    // The first load, the reload running when the burst came, and one
    // after it.
    assert_eq!(s.loads, 3, "{} loads", s.loads);
}
