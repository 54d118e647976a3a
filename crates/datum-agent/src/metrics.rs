//! The agent's metrics, in the Prometheus text format (OpenMetrics) through
//! `prometheus-client`.
//!
//! Owns the metric names, their help and units, and the label sets. Labels
//! hold names from fixed vocabularies only: class names from `datum.yaml`,
//! state and finding-kind words, validator names from the registry, trigger
//! and reason words. Never a path, a resource name or content: a sensitive
//! resource must leave no trace in a scrape, and unbounded label values would
//! make memory grow with the estate.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::check::{ACTS, CheckReport, STATES, Scope};
use crate::exposition::{Format, to_prometheus_text};
use crate::watch::LOST_REASONS;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabel {
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    class: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    class: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    class: String,
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ValidatorLabel {
    validator: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabels {
    class: String,
    trigger: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RevisionLabel {
    revision: String,
}

/// The one series of a metric that has a series only under a condition
/// (a family of at most this one series, empty otherwise).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct NoLabels;

impl EncodeLabelSet for NoLabels {
    fn encode(
        &self,
        _: &mut prometheus_client::encoding::LabelSetEncoder,
    ) -> Result<(), std::fmt::Error> {
        Ok(())
    }
}

type F64Gauge = Gauge<f64, AtomicU64>;

/// Every metric the agent exports. Cheap to update from the daemon thread;
/// [`Metrics::encode`] is called by the HTTP thread.
pub struct Metrics {
    registry: Registry,
    last_check: Family<ClassLabel, F64Gauge>,
    interval: Family<ClassLabel, F64Gauge>,
    bound: Family<ClassLabel, F64Gauge>,
    watched: Family<ClassLabel, Gauge>,
    duration: Family<ClassLabel, Histogram>,
    checks: Family<TriggerLabels, Counter>,
    resources: Family<StateLabels, Gauge>,
    findings: Family<KindLabels, Gauge>,
    actions: Family<ActionLabels, Counter>,
    validation_failures: Family<ValidatorLabel, Counter>,
    watch_events: Counter,
    watch_overflows: Counter,
    watch_errors: Family<ReasonLabel, Counter>,
    fallback_passes: Family<ReasonLabel, Counter>,
    check_errors: Counter,
    unrecorded: Counter,
    degraded: Gauge,
    reload_failures: Counter,
    repository_ok: Gauge,
    last_reload: F64Gauge,
    revision: Family<RevisionLabel, Gauge>,
    pulls: Family<OutcomeLabel, Counter>,
    pull_failures: Family<ReasonLabel, Counter>,
    // Only while the agent pulls: a 0 on an agent that does not would read
    // as "last pulled in 1970" to `time() - x`.
    last_pull: Family<NoLabels, F64Gauge>,
    full_interval: F64Gauge,
    start_time: F64Gauge,
    // Serialises encoding with multi-metric updates (a check's whole report
    // appears in one scrape or not at all), and remembers which class and
    // finding kinds have series, so a class removed by a reload loses them.
    update: Mutex<BTreeMap<String, BTreeSet<String>>>,
}

fn duration_histogram() -> Histogram {
    // 1 ms .. ~131 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

impl Metrics {
    pub fn new(version: &str) -> Self {
        let mut registry = Registry::default();
        let m = Self {
            last_check: Family::default(),
            interval: Family::default(),
            bound: Family::default(),
            watched: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            checks: Family::default(),
            resources: Family::default(),
            findings: Family::default(),
            actions: Family::default(),
            validation_failures: Family::default(),
            watch_events: Counter::default(),
            watch_overflows: Counter::default(),
            watch_errors: Family::default(),
            fallback_passes: Family::default(),
            check_errors: Counter::default(),
            unrecorded: Counter::default(),
            degraded: Gauge::default(),
            reload_failures: Counter::default(),
            repository_ok: Gauge::default(),
            last_reload: F64Gauge::default(),
            revision: Family::default(),
            pulls: Family::default(),
            pull_failures: Family::default(),
            last_pull: Family::default(),
            full_interval: F64Gauge::default(),
            start_time: F64Gauge::default(),
            update: Mutex::new(BTreeMap::new()),
            registry: Registry::default(),
        };
        registry.register(
            "datum_build",
            "Build of the running datum agent",
            Info::new(BuildLabels {
                version: version.to_owned(),
            }),
        );
        registry.register(
            "datum_last_check_timestamp_seconds",
            "Unix time the last complete check of each class (a full pass or its interval check, not a watch's check of the files that changed) finished",
            m.last_check.clone(),
        );
        registry.register(
            "datum_check_interval_seconds",
            "Configured check interval of each class",
            m.interval.clone(),
        );
        registry.register(
            "datum_detection_bound_seconds",
            "Longest a change can stay unseen per class: interval (or watch debounce) plus p95 inspection time",
            m.bound.clone(),
        );
        registry.register(
            "datum_class_watched",
            "1 when every watch of the class is in place (event-driven detection), 0 when it relies on its interval",
            m.watched.clone(),
        );
        registry.register(
            "datum_check_duration_seconds",
            "Time to inspect a class in one check",
            m.duration.clone(),
        );
        registry.register(
            "datum_checks",
            "Completed checks by class and trigger (interval, watch, full)",
            m.checks.clone(),
        );
        registry.register(
            "datum_resources",
            "Resources by class and state after the last check",
            m.resources.clone(),
        );
        registry.register(
            "datum_drift_findings",
            "Open drift findings by class and kind",
            m.findings.clone(),
        );
        registry.register(
            "datum_policy_actions",
            "Resources a class's policy reverted, accepted (a patch written) or failed to revert, by class and action",
            m.actions.clone(),
        );
        registry.register(
            "datum_validation_failures",
            "Validations that failed, by validator",
            m.validation_failures.clone(),
        );
        registry.register(
            "datum_watch_events",
            "File-change notifications that concerned a declared path",
            m.watch_events.clone(),
        );
        registry.register(
            "datum_watch_overflows",
            "Times the kernel dropped file-change events (each answered by a full pass)",
            m.watch_overflows.clone(),
        );
        registry.register(
            "datum_watch_errors",
            "Watches that could not be added or were lost, by reason (limit, missing, backend)",
            m.watch_errors.clone(),
        );
        registry.register(
            "datum_fallback_full_passes",
            "Full passes run because event-driven detection could not be trusted, by reason",
            m.fallback_passes.clone(),
        );
        registry.register(
            "datum_check_errors",
            "Checks that could not run at all",
            m.check_errors.clone(),
        );
        registry.register(
            "datum_checks_unrecorded",
            "Checks (or a class's part of one) whose outcome could not be written to the state store: their history, fleet report and what a policy did are lost",
            m.unrecorded.clone(),
        );
        registry.register(
            "datum_agent_degraded",
            "Whether the last check could not be recorded in the state store (1: /healthz says degraded, /readyz answers 503) or could (0)",
            m.degraded.clone(),
        );
        registry.register(
            "datum_repository_reload_failures",
            "Reloads refused because the repository failed lint or could not be read",
            m.reload_failures.clone(),
        );
        registry.register(
            "datum_repository_loaded",
            "1 when the running catalogue is the repository's current content, 0 when a reload failed and the last good one is kept",
            m.repository_ok.clone(),
        );
        registry.register_with_unit(
            "datum_repository_last_reload_timestamp",
            "Unix time of the last successful repository load",
            Unit::Seconds,
            m.last_reload.clone(),
        );
        registry.register(
            "datum_repository_revision_info",
            "The repository revision (git commit) the running catalogue was compiled from, when datum pull deployed it: one series, value 1",
            m.revision.clone(),
        );
        registry.register(
            "datum_pulls",
            "Pulls that completed, by outcome (deployed, up_to_date)",
            m.pulls.clone(),
        );
        registry.register(
            "datum_pull_failures",
            "Pulls that deployed nothing because the revision was refused or the pull failed, by reason (unsigned, unknown_signer, expired_key, bad_signature, backwards, lint, fetch, ...)",
            m.pull_failures.clone(),
        );
        registry.register_with_unit(
            "datum_pull_last_success_timestamp",
            "Unix time of the last pull of --pull-interval that completed (deployed or up to date), 0 while none has; no series when the agent does not pull",
            Unit::Seconds,
            m.last_pull.clone(),
        );
        registry.register(
            "datum_full_pass_interval_seconds",
            "Interval of the backstop full pass",
            m.full_interval.clone(),
        );
        registry.register_with_unit(
            "datum_agent_start_time",
            "Unix time the agent started",
            Unit::Seconds,
            m.start_time.clone(),
        );
        // Every documented counter exists from start-up, at zero, so
        // `rate()` and `increase()` see the first event (per class ones
        // appear with the catalogue, per validator ones with
        // [`Metrics::validators`]).
        for reason in LOST_REASONS {
            m.watch_errors
                .get_or_create(&ReasonLabel {
                    reason: reason.to_owned(),
                })
                .inc_by(0);
        }
        for outcome in ["deployed", "up_to_date"] {
            m.pulls
                .get_or_create(&OutcomeLabel {
                    outcome: outcome.to_owned(),
                })
                .inc_by(0);
        }
        for reason in FALLBACK_REASONS {
            m.fallback_passes
                .get_or_create(&ReasonLabel {
                    reason: reason.to_owned(),
                })
                .inc_by(0);
        }
        Self { registry, ..m }
    }

    /// The validators this build knows: each gets its failure counter at 0.
    pub fn validators(&self, names: &[String]) {
        for name in names {
            self.validation_failures
                .get_or_create(&ValidatorLabel {
                    validator: name.clone(),
                })
                .inc_by(0);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, BTreeSet<String>>> {
        // A panic while holding it cannot leave the metrics inconsistent in a
        // way worth refusing to serve them.
        self.update.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The exposition in OpenMetrics, as Prometheus asks for it.
    pub fn encode(&self) -> String {
        let _guard = self.lock();
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The exposition in `format`, as served on `/metrics`.
    pub fn encode_as(&self, format: Format) -> String {
        match format {
            Format::OpenMetrics => self.encode(),
            Format::PrometheusText => to_prometheus_text(&self.encode()),
        }
    }

    pub fn set_start(&self, unix: Duration, full_interval: Duration) {
        self.start_time.set(unix.as_secs_f64());
        self.full_interval.set(full_interval.as_secs_f64());
    }

    /// A new catalogue was loaded: classes that no longer exist disappear.
    pub fn loaded(&self, classes: &[(String, Duration)], unix: Duration) {
        let mut seen = self.lock();
        self.interval.clear();
        self.bound.clear();
        self.watched.clear();
        // Per-class series of a class that was removed would otherwise
        // report it forever (and alert on it going stale).
        let gone: Vec<String> = seen
            .keys()
            .filter(|c| !classes.iter().any(|(n, _)| n == *c))
            .cloned()
            .collect();
        for class in gone {
            let kinds = seen.remove(&class).unwrap_or_default();
            self.forget(&class, &kinds);
        }
        for (name, interval) in classes {
            self.interval
                .get_or_create(&ClassLabel {
                    class: name.clone(),
                })
                .set(interval.as_secs_f64());
            // Known from now on, so a later load without it forgets it.
            seen.entry(name.clone()).or_default();
            for trigger in TRIGGERS {
                self.checks
                    .get_or_create(&TriggerLabels {
                        class: name.clone(),
                        trigger: trigger.to_owned(),
                    })
                    .inc_by(0);
            }
            for action in ACTS {
                self.actions
                    .get_or_create(&ActionLabels {
                        class: name.clone(),
                        action: action.to_owned(),
                    })
                    .inc_by(0);
            }
        }
        self.repository_ok.set(1);
        self.last_reload.set(unix.as_secs_f64());
    }

    fn forget(&self, class: &str, kinds: &BTreeSet<String>) {
        let label = ClassLabel {
            class: class.to_owned(),
        };
        self.last_check.remove(&label);
        self.duration.remove(&label);
        for state in STATES {
            self.resources.remove(&StateLabels {
                class: class.to_owned(),
                state: state.to_owned(),
            });
        }
        for kind in kinds {
            self.findings.remove(&KindLabels {
                class: class.to_owned(),
                kind: kind.clone(),
            });
        }
        for trigger in TRIGGERS {
            self.checks.remove(&TriggerLabels {
                class: class.to_owned(),
                trigger: trigger.to_owned(),
            });
        }
        for action in ACTS {
            self.actions.remove(&ActionLabels {
                class: class.to_owned(),
                action: action.to_owned(),
            });
        }
    }

    /// The running catalogue's repository revision: the one series of
    /// `datum_repository_revision_info` (none when it is not known).
    pub fn repository_revision(&self, revision: Option<&str>) {
        let _guard = self.lock();
        self.revision.clear();
        if let Some(revision) = revision {
            self.revision
                .get_or_create(&RevisionLabel {
                    revision: revision.to_owned(),
                })
                .set(1);
        }
    }

    /// The agent pulls: the words a failed pull can be counted under each
    /// get their counter at 0 (the vocabulary is datum-pull's), and the last
    /// pull's time its series, at 0 until a pull completes. Without it
    /// neither has a series.
    pub fn pulling(&self, words: &[&str]) {
        for reason in words {
            self.pull_failures
                .get_or_create(&ReasonLabel {
                    reason: (*reason).to_owned(),
                })
                .inc_by(0);
        }
        let _ = self.last_pull.get_or_create(&NoLabels);
    }

    /// A pull completed (`outcome`: `deployed` or `up_to_date`).
    pub fn pulled(&self, outcome: &str, unix: Duration) {
        self.pulls
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
        self.last_pull
            .get_or_create(&NoLabels)
            .set(unix.as_secs_f64());
    }

    /// A pull deployed nothing, for `reason` (a fixed word).
    pub fn pull_failed(&self, reason: &str) {
        self.pull_failures
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub fn reload_failed(&self) {
        self.reload_failures.inc();
        self.repository_ok.set(0);
    }

    pub fn set_detection(&self, class: &str, bound: Duration, watching: bool) {
        let label = ClassLabel {
            class: class.to_owned(),
        };
        self.bound.get_or_create(&label).set(bound.as_secs_f64());
        self.watched.get_or_create(&label).set(i64::from(watching));
    }

    /// Records a finished check of `scope` (`unix`: when it finished). Only
    /// a complete check ([`Scope::complete`]) moves the class's last check
    /// time, so a steady stream of watch events cannot hide interval checks
    /// that stopped from `DatumCheckStale`.
    pub fn checked(&self, scope: &Scope, report: &CheckReport, unix: Duration) {
        let trigger = scope.trigger();
        self.check_errors.inc_by(report.failed);
        self.unrecorded.inc_by(report.unrecorded);
        self.degraded.set(i64::from(report.unrecorded > 0));
        let mut seen = self.lock();
        for (class, r) in &report.classes {
            let label = ClassLabel {
                class: class.clone(),
            };
            self.duration
                .get_or_create(&label)
                .observe(r.duration.as_secs_f64());
            self.checks
                .get_or_create(&TriggerLabels {
                    class: class.clone(),
                    trigger: trigger.to_owned(),
                })
                .inc();
            // What a policy did happened, even in a check cut short.
            for (action, n) in &r.acted {
                self.actions
                    .get_or_create(&ActionLabels {
                        class: class.clone(),
                        action: action.clone(),
                    })
                    .inc_by(*n);
            }
            if report.cancelled {
                // A partial picture must not overwrite the last complete one.
                continue;
            }
            if scope.complete() {
                self.last_check
                    .get_or_create(&label)
                    .set(unix.as_secs_f64());
            }
            for state in STATES {
                let n = r.states.get(state).copied().unwrap_or(0);
                self.resources
                    .get_or_create(&StateLabels {
                        class: class.clone(),
                        state: state.to_owned(),
                    })
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
            // Kinds that went away go to zero rather than vanish, so a
            // `for:` clause sees the drift end.
            let kinds = seen.entry(class.clone()).or_default();
            set_kinds(&self.findings, class, &r.findings, kinds);
        }
        for (validator, n) in &report.validation_failures {
            self.validation_failures
                .get_or_create(&ValidatorLabel {
                    validator: validator.clone(),
                })
                .inc_by(*n);
        }
    }

    pub fn check_failed(&self) {
        self.check_errors.inc();
    }

    pub fn watch_event(&self) {
        self.watch_events.inc();
    }

    pub fn watch_overflow(&self) {
        self.watch_overflows.inc();
    }

    pub fn watch_error(&self, reason: &str) {
        self.watch_errors
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub fn fallback_pass(&self, reason: &str) {
        self.fallback_passes
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }
}

/// What can start a check of a class.
const TRIGGERS: [&str; 3] = ["full", "interval", "watch"];

/// Why a full pass can replace event-driven detection: a lost watch (other
/// than a missing path, which only waits for the path) or dropped events.
const FALLBACK_REASONS: [&str; 3] = ["backend", "limit", "overflow"];

/// The finding kinds every class exports even at zero, so a rule can tell
/// "no drift" from "never checked": every kind docs/agent.md lists.
const BASE_KINDS: [&str; 7] = [
    "changed_outside",
    "deleted_outside",
    "type_changed",
    "unmanaged",
    // A reload or restart owed, a live configuration its group validator
    // refuses: the host "will be wrong after its next restart".
    "activation_owed",
    "invalid_live_config",
    // Not drift: differences an apply still owes (never applied here, its
    // last apply failed, its declaration changed since).
    "not_converged",
];

fn set_kinds(
    family: &Family<KindLabels, Gauge>,
    class: &str,
    current: &BTreeMap<String, u64>,
    known: &mut BTreeSet<String>,
) {
    known.extend(BASE_KINDS.iter().map(|k| (*k).to_owned()));
    known.extend(current.keys().cloned());
    // Kinds seen before and absent now are zeroed, not dropped.
    for kind in known.iter() {
        let n = current.get(kind).copied().unwrap_or(0);
        family
            .get_or_create(&KindLabels {
                class: class.to_owned(),
                kind: kind.clone(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::ClassReport;

    fn interval() -> Scope {
        Scope::Class("critical".into())
    }

    fn watch() -> Scope {
        Scope::Resources {
            class: "critical".into(),
            ids: Vec::new(),
        }
    }

    fn report() -> CheckReport {
        let mut classes = BTreeMap::new();
        classes.insert(
            "critical".to_owned(),
            ClassReport {
                states: BTreeMap::from([("converged".into(), 3), ("drifted".into(), 1)]),
                findings: BTreeMap::from([("changed_outside".into(), 1)]),
                acted: BTreeMap::new(),
                duration: Duration::from_millis(12),
            },
        );
        CheckReport {
            classes,
            validation_failures: BTreeMap::from([("sshd".into(), 1)]),
            conclusion: crate::check::Conclusion::Drift,
            cancelled: false,
            failed: 0,
            unrecorded: 0,
            own_writes: 0,
        }
    }

    #[test]
    fn exposition_names_units_and_labels() {
        let m = Metrics::new("0.1.0");
        m.set_start(
            Duration::from_secs(1_700_000_000),
            Duration::from_secs(3600),
        );
        m.loaded(
            &[("critical".into(), Duration::from_secs(60))],
            Duration::from_secs(1_700_000_000),
        );
        m.set_detection("critical", Duration::from_millis(150), true);
        m.checked(&interval(), &report(), Duration::from_secs(1_700_000_050));
        m.checked(&watch(), &report(), Duration::from_secs(1_700_000_100));
        m.watch_event();
        m.watch_overflow();
        m.watch_error("limit");
        m.fallback_pass("overflow");
        let text = m.encode();
        for line in [
            "datum_build_info{version=\"0.1.0\"} 1",
            // The last complete check: the interval one, not the watch's.
            "datum_last_check_timestamp_seconds{class=\"critical\"} 1700000050.0",
            "datum_check_interval_seconds{class=\"critical\"} 60.0",
            "datum_detection_bound_seconds{class=\"critical\"} 0.15",
            "datum_class_watched{class=\"critical\"} 1",
            "datum_resources{class=\"critical\",state=\"drifted\"} 1",
            "datum_resources{class=\"critical\",state=\"quarantined\"} 0",
            "datum_drift_findings{class=\"critical\",kind=\"changed_outside\"} 1",
            "datum_drift_findings{class=\"critical\",kind=\"unmanaged\"} 0",
            // A host that will be wrong after its next restart shows, at 0 too.
            "datum_drift_findings{class=\"critical\",kind=\"activation_owed\"} 0",
            "datum_drift_findings{class=\"critical\",kind=\"invalid_live_config\"} 0",
            // Work an apply still owes, documented among the kinds: at 0 too.
            "datum_drift_findings{class=\"critical\",kind=\"not_converged\"} 0",
            "datum_validation_failures_total{validator=\"sshd\"} 2",
            "datum_checks_total{class=\"critical\",trigger=\"watch\"} 1",
            "datum_watch_events_total 1",
            "datum_watch_overflows_total 1",
            "datum_watch_errors_total{reason=\"limit\"} 1",
            "datum_fallback_full_passes_total{reason=\"overflow\"} 1",
            "datum_repository_loaded 1",
            "datum_agent_start_time_seconds 1700000000.0",
            "datum_checks_total{class=\"critical\",trigger=\"interval\"} 1",
            "datum_check_duration_seconds_count{class=\"critical\"} 2",
        ] {
            assert!(text.contains(line), "missing `{line}` in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn counters_exist_at_zero_before_anything_happens() {
        let m = Metrics::new("0");
        m.validators(&["sshd".into(), "nginx".into()]);
        m.loaded(
            &[("critical".into(), Duration::from_secs(60))],
            Duration::from_secs(1),
        );
        let text = m.encode_as(Format::PrometheusText);
        for line in [
            "datum_checks_total{class=\"critical\",trigger=\"full\"} 0",
            "datum_checks_total{class=\"critical\",trigger=\"interval\"} 0",
            "datum_checks_total{class=\"critical\",trigger=\"watch\"} 0",
            "datum_validation_failures_total{validator=\"nginx\"} 0",
            "datum_watch_errors_total{reason=\"backend\"} 0",
            "datum_watch_errors_total{reason=\"missing\"} 0",
            "datum_fallback_full_passes_total{reason=\"overflow\"} 0",
            "datum_watch_events_total 0",
            "datum_repository_reload_failures_total 0",
            "# TYPE datum_checks_total counter",
            "# TYPE datum_build_info gauge",
        ] {
            assert!(text.contains(line), "missing `{line}` in:\n{text}");
        }
        // A removed class takes its zeroed counters with it.
        m.loaded(&[], Duration::from_secs(2));
        assert!(!m.encode().contains("class=\"critical\""));
    }

    #[test]
    fn drift_that_ends_goes_to_zero_and_cancelled_checks_keep_the_picture() {
        let m = Metrics::new("0");
        m.checked(&interval(), &report(), Duration::from_secs(10));
        let mut clean = report();
        clean.classes.get_mut("critical").unwrap().findings.clear();
        clean.cancelled = true;
        m.checked(&interval(), &clean, Duration::from_secs(20));
        let text = m.encode();
        assert!(text.contains("kind=\"changed_outside\"} 1"), "{text}");
        assert!(text.contains("datum_last_check_timestamp_seconds{class=\"critical\"} 10.0"));
        clean.cancelled = false;
        m.checked(&interval(), &clean, Duration::from_secs(30));
        let text = m.encode();
        assert!(text.contains("kind=\"changed_outside\"} 0"), "{text}");
    }

    /// `DatumCheckStale` ages the last complete check of a class: a watch's
    /// check of the files that changed must not hide interval checks that
    /// stopped.
    #[test]
    fn only_a_complete_check_moves_the_last_check_time() {
        let m = Metrics::new("0");
        let last = |m: &Metrics| {
            m.encode().lines().find_map(|l| {
                l.strip_prefix("datum_last_check_timestamp_seconds{class=\"critical\"} ")
                    .map(str::to_owned)
            })
        };
        m.checked(&watch(), &report(), Duration::from_secs(5));
        assert_eq!(last(&m), None, "a watch check is no complete check");
        m.checked(&interval(), &report(), Duration::from_secs(10));
        assert_eq!(last(&m).as_deref(), Some("10.0"));
        m.checked(&watch(), &report(), Duration::from_secs(20));
        assert_eq!(last(&m).as_deref(), Some("10.0"));
        // It is still counted as a check.
        assert!(m.encode().contains("trigger=\"watch\"} 2"));
        m.checked(&Scope::All, &report(), Duration::from_secs(30));
        assert_eq!(last(&m).as_deref(), Some("30.0"));
    }

    #[test]
    fn a_removed_class_loses_its_series() {
        let m = Metrics::new("0");
        m.loaded(
            &[("critical".into(), Duration::from_secs(60))],
            Duration::ZERO,
        );
        m.checked(&interval(), &report(), Duration::from_secs(10));
        assert!(m.encode().contains("class=\"critical\""));
        m.loaded(
            &[("normal".into(), Duration::from_secs(60))],
            Duration::ZERO,
        );
        let text = m.encode();
        assert!(!text.contains("class=\"critical\""), "{text}");
        assert!(text.contains("datum_check_interval_seconds{class=\"normal\"} 60.0"));
    }

    #[test]
    fn the_revision_has_one_series_and_pulls_are_counted() {
        let m = Metrics::new("0");
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        m.repository_revision(Some(&a));
        m.repository_revision(Some(&b));
        m.pulled("deployed", Duration::from_secs(5));
        m.pull_failed("unsigned");
        let text = m.encode();
        assert!(
            text.contains(&format!(
                "datum_repository_revision_info{{revision=\"{b}\"}} 1"
            )),
            "{text}"
        );
        assert!(!text.contains(&a), "{text}");
        assert!(
            text.contains("datum_pulls_total{outcome=\"deployed\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("datum_pull_failures_total{reason=\"unsigned\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("datum_pull_last_success_timestamp_seconds 5.0"),
            "{text}"
        );
        m.repository_revision(None);
        assert!(!m.encode().contains("datum_repository_revision_info{"));
    }

    /// `time() - datum_pull_last_success_timestamp_seconds` on an agent
    /// that does not pull must not say it last pulled in 1970.
    #[test]
    fn the_last_pull_time_has_a_series_only_while_the_agent_pulls() {
        let sample = |m: &Metrics| {
            m.encode().lines().find_map(|l| {
                l.strip_prefix("datum_pull_last_success_timestamp_seconds")
                    .filter(|rest| rest.starts_with(' ') || rest.starts_with('{'))
                    .map(str::to_owned)
            })
        };
        let m = Metrics::new("0");
        // Not even described (as datum_pull_failures_total's reasons).
        assert!(
            !m.encode().contains("datum_pull_last_success"),
            "{}",
            m.encode()
        );
        assert!(
            m.encode_as(Format::PrometheusText)
                .lines()
                .all(|l| !l.starts_with("datum_pull_last_success_timestamp_seconds"))
        );
        m.pulling(&["unsigned", "fetch"]);
        assert_eq!(sample(&m).as_deref(), Some(" 0.0"));
        assert!(
            m.encode()
                .contains("datum_pull_failures_total{reason=\"fetch\"} 0")
        );
        m.pulled("up_to_date", Duration::from_secs(7));
        assert_eq!(sample(&m).as_deref(), Some(" 7.0"));
    }

    #[test]
    fn a_failed_reload_is_visible() {
        let m = Metrics::new("0");
        m.loaded(&[], Duration::from_secs(1));
        m.reload_failed();
        let text = m.encode();
        assert!(text.contains("datum_repository_loaded 0"));
        assert!(text.contains("datum_repository_reload_failures_total 1"));
    }

    #[test]
    fn a_class_whose_check_could_not_run_is_a_check_error() {
        let m = Metrics::new("0");
        m.checked(&Scope::All, &report(), Duration::from_secs(1));
        assert!(m.encode().contains("datum_check_errors_total 0"));
        let failed = CheckReport {
            failed: 1,
            ..report()
        };
        m.checked(&Scope::All, &failed, Duration::from_secs(2));
        assert!(m.encode().contains("datum_check_errors_total 1"));
    }

    #[test]
    fn a_check_the_state_store_did_not_take_is_counted() {
        let m = Metrics::new("0");
        assert!(m.encode().contains("datum_checks_unrecorded_total 0"));
        m.checked(&Scope::All, &report(), Duration::from_secs(1));
        assert!(m.encode().contains("datum_checks_unrecorded_total 0"));
        let lost = CheckReport {
            unrecorded: 1,
            ..report()
        };
        m.checked(&watch(), &lost, Duration::from_secs(2));
        assert!(m.encode().contains("datum_checks_unrecorded_total 1"));
    }

    /// The counter says that checks were lost, not whether the agent is
    /// losing them now: the gauge does, as `/healthz` and `/readyz` do.
    #[test]
    fn the_agent_is_degraded_while_its_last_check_went_unrecorded() {
        let m = Metrics::new("0");
        let degraded = |m: &Metrics| {
            m.encode()
                .lines()
                .find_map(|l| l.strip_prefix("datum_agent_degraded ").map(str::to_owned))
        };
        assert_eq!(degraded(&m).as_deref(), Some("0"));
        let lost = CheckReport {
            unrecorded: 1,
            ..report()
        };
        m.checked(&watch(), &lost, Duration::from_secs(1));
        assert_eq!(degraded(&m).as_deref(), Some("1"));
        m.checked(&watch(), &report(), Duration::from_secs(2));
        assert_eq!(degraded(&m).as_deref(), Some("0"));
        assert!(m.encode().contains("datum_checks_unrecorded_total 1"));
    }
}
