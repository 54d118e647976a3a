//! The daemon loop: one thread that blocks on a single channel until the
//! next deadline or the next message (a signal, file-change news), then runs
//! what is due: the full pass, a class whose slot came, or the resources a
//! watch reported after the debounce.
//!
//! Owns ordering and bookkeeping (what ran, what is pending, whether the
//! watches can be trusted). It must not decide drift or policy (the
//! [`ClassChecker`] does) nor print (it logs through [`Log`]). Checks run on
//! this thread one at a time, so a check never overlaps another and a stop
//! request is acted on between checks; the cancel flag lets the check in
//! flight stop after its current resource.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use datum_core::ResourceId;

use crate::check::{Cancel, CheckReport, ClassChecker, Conclusion, LoadError, Loaded, Scope};
use crate::http::{Health, HttpError, HttpServer};
use crate::metrics::Metrics;
use crate::schedule::{Detection, Due, Inspection, Schedule, detection_bound};
use crate::signals::{self, Signal};
use crate::watch::{WatchNews, WatchPlan, Watcher};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Info,
    Warn,
    Error,
}

/// Where the agent's log lines go (the binary writes them to stderr, which
/// systemd's journal keeps).
pub type Log = Arc<dyn Fn(LogLevel, &str) + Send + Sync>;

/// How to run the agent.
#[derive(Clone)]
pub struct AgentConfig {
    /// The host name: seeds each class's phase.
    pub host: String,
    /// Where to serve `/metrics` and `/healthz`; `None` serves nothing.
    pub listen: Option<String>,
    pub full_interval: Duration,
    pub debounce: Duration,
    /// Reported as `datum_build_info{version}`.
    pub version: String,
    /// Names of the validators this build ships: each one's failure counter
    /// is exported at 0 from start-up.
    pub validators: Vec<String>,
    /// Whether to install the SIGTERM/SIGINT/SIGHUP handlers (tests that run
    /// in-process drive the agent through [`Control`] instead).
    pub signals: bool,
    pub log: Log,
}

/// Errors that stop the agent before or instead of running.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The first load failed: there is no last good catalogue to keep.
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] std::io::Error),
}

enum Wake {
    Signal(Signal),
    Watch(WatchNews),
}

/// Drives a running agent from another thread (tests, embedding).
#[derive(Clone)]
pub struct Control {
    tx: Sender<Wake>,
    cancel: Cancel,
    reload_wanted: Arc<AtomicBool>,
}

impl Control {
    /// Like SIGTERM.
    pub fn stop(&self) {
        self.cancel.cancel();
        let _ = self.tx.send(Wake::Signal(Signal::Stop));
    }

    /// Like SIGHUP.
    pub fn reload(&self) {
        ask_reload(&self.reload_wanted, &self.tx);
    }

    /// Feeds watch news as if the kernel had sent it (overflow tests).
    pub fn inject(&self, news: WatchNews) {
        let _ = self.tx.send(Wake::Watch(news));
    }
}

/// The first wait before watched resources whose check could not run are
/// checked again, and the longest (it doubles with each failure in a row).
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// Asks for a reload. Requests that arrive before the loop starts one are
/// the same request: a reload reads the repository as it is when it starts,
/// so one made during a reload is followed by exactly one more.
fn ask_reload(wanted: &AtomicBool, tx: &Sender<Wake>) {
    if !wanted.swap(true, Ordering::SeqCst) {
        let _ = tx.send(Wake::Signal(Signal::Reload));
    }
}

/// The shortest stuck limit for `/healthz`, however short the full interval.
const STUCK_AFTER_MIN: Duration = Duration::from_secs(3600);

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// The agent. Build it with [`Agent::new`], then [`Agent::run`] (daemon) or
/// [`Agent::run_once`] (`--once`).
pub struct Agent {
    cfg: AgentConfig,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    cancel: Cancel,
    tx: Sender<Wake>,
    rx: Receiver<Wake>,
    bound_addr: Option<std::net::SocketAddr>,
    /// A reload was asked for and has not started yet (see [`ask_reload`]).
    reload_wanted: Arc<AtomicBool>,
}

/// The loop's mutable state.
struct State {
    loaded: Loaded,
    schedule: Schedule,
    plan: WatchPlan,
    watcher: Option<Watcher>,
    /// A watch could not be added or was lost since the watcher was armed:
    /// watched classes fall back to their interval until it is re-armed.
    degraded: bool,
    pending: BTreeMap<String, BTreeSet<ResourceId>>,
    pending_deadline: Option<Instant>,
    /// Checks in a row that could not run at all (the root lock timed out):
    /// the wait before pending watched resources are tried again doubles.
    retries: u32,
    stop: bool,
}

impl Agent {
    pub fn new(cfg: AgentConfig) -> Self {
        let (tx, rx) = channel();
        let metrics = Arc::new(Metrics::new(&cfg.version));
        metrics.validators(&cfg.validators);
        Self {
            cfg,
            metrics,
            health: Arc::default(),
            cancel: Cancel::new(),
            tx,
            rx,
            bound_addr: None,
            reload_wanted: Arc::default(),
        }
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    pub fn control(&self) -> Control {
        Control {
            tx: self.tx.clone(),
            cancel: self.cancel.clone(),
            reload_wanted: Arc::clone(&self.reload_wanted),
        }
    }

    fn log(&self, level: LogLevel, msg: &str) {
        (self.cfg.log)(level, msg);
    }

    /// One check of every class, then return what it concluded (`--once`,
    /// for cron: the binary makes its exit code). SIGTERM still stops it
    /// after the resource in flight, and a check cut short concludes
    /// [`Conclusion::Errors`]: its result is not "clean".
    pub fn run_once(self, checker: &mut dyn ClassChecker) -> Result<Conclusion, AgentError> {
        let _signals = if self.cfg.signals {
            Some(signals::spawn(self.cancel.flag(), |_| {}).map_err(AgentError::Signals)?)
        } else {
            None
        };
        checker.load()?;
        match checker.check(&Scope::All, &self.cancel) {
            Ok(report) => {
                let (level, line) = summary("full", &Scope::All, &report);
                self.log(level, &line);
                if report.cancelled {
                    // What was not checked is unknown: 0 would tell cron
                    // "no drift" about a host it never finished looking at.
                    self.log(
                        LogLevel::Error,
                        "stopped before the check completed: exit 1 (the classes not checked are unknown)",
                    );
                    return Ok(Conclusion::Errors);
                }
                Ok(report.conclusion)
            }
            Err(e) => {
                self.log(LogLevel::Error, &e.to_string());
                Ok(Conclusion::Errors)
            }
        }
    }

    /// Runs until SIGTERM/SIGINT (or [`Control::stop`]). `on_ready` receives
    /// the bound HTTP address once the first load succeeded and the endpoint
    /// is up (before the first pass).
    pub fn run(
        mut self,
        checker: &mut dyn ClassChecker,
        on_ready: impl FnOnce(Option<std::net::SocketAddr>),
    ) -> Result<(), AgentError> {
        let _signals = if self.cfg.signals {
            let tx = self.tx.clone();
            let reload_wanted = Arc::clone(&self.reload_wanted);
            Some(
                signals::spawn(self.cancel.flag(), move |s| match s {
                    Signal::Reload => ask_reload(&reload_wanted, &tx),
                    Signal::Stop => {
                        let _ = tx.send(Wake::Signal(s));
                    }
                })
                .map_err(AgentError::Signals)?,
            )
        } else {
            None
        };
        let loaded = checker.load()?;
        let now = Instant::now();
        let unix = unix_now();
        self.metrics.set_start(unix, self.cfg.full_interval);
        self.metrics
            .repository_revision(checker.revision().as_deref());
        // A check may take long on a big estate, but not longer than the
        // backstop interval twice over.
        self.health
            .set_stuck_after((self.cfg.full_interval * 2).max(STUCK_AFTER_MIN));
        let server = match &self.cfg.listen {
            Some(addr) => Some(HttpServer::start(
                addr,
                Arc::clone(&self.metrics),
                Arc::clone(&self.health),
            )?),
            None => None,
        };
        self.bound_addr = server.as_ref().map(HttpServer::addr);
        if let Some(addr) = self.bound_addr {
            self.log(
                LogLevel::Info,
                &format!("serving /metrics, /healthz and /readyz on http://{addr}"),
            );
        }
        let schedule = Schedule::new(
            &self.cfg.host,
            &loaded.classes,
            self.cfg.full_interval,
            now,
            unix,
        );
        let mut state = State {
            plan: WatchPlan::default(),
            loaded,
            schedule,
            watcher: None,
            degraded: false,
            pending: BTreeMap::new(),
            pending_deadline: None,
            retries: 0,
            stop: false,
        };
        self.adopt(&mut state, unix);
        self.log(
            LogLevel::Info,
            &format!(
                "started: {} resources in {} classes ({})",
                state.loaded.resources,
                state.loaded.classes.len(),
                describe_classes(&state)
            ),
        );
        on_ready(self.bound_addr);
        self.event_loop(&mut state, checker);
        self.health.stopping();
        self.log(LogLevel::Info, "stopped");
        drop(server);
        Ok(())
    }

    fn event_loop(&self, state: &mut State, checker: &mut dyn ClassChecker) {
        loop {
            while let Ok(wake) = self.rx.try_recv() {
                self.handle(state, checker, wake);
            }
            if state.stop {
                return;
            }
            let now = Instant::now();
            if let Some(due) = state.schedule.due(now) {
                match due {
                    Due::Full => self.full_pass(state, checker),
                    Due::Class(class) => self.class_check(state, checker, class),
                }
                continue;
            }
            if state.pending_deadline.is_some_and(|t| t <= now) {
                self.watch_check(state, checker);
                continue;
            }
            let mut deadline = state.schedule.next_deadline();
            if let Some(t) = state.pending_deadline {
                deadline = deadline.min(t);
            }
            // The one place the agent waits: no polling.
            match self
                .rx
                .recv_timeout(deadline.saturating_duration_since(now))
            {
                Ok(wake) => self.handle(state, checker, wake),
                Err(RecvTimeoutError::Timeout) => {}
                // We hold a sender ourselves, so this cannot happen; stop
                // rather than spin if it ever does.
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn handle(&self, state: &mut State, checker: &mut dyn ClassChecker, wake: Wake) {
        match wake {
            Wake::Signal(Signal::Stop) => {
                if !state.stop {
                    self.log(LogLevel::Info, "stop requested: finishing");
                }
                state.stop = true;
                self.health.stopping();
            }
            Wake::Signal(Signal::Reload) => {
                // Cleared before the load reads anything: a request that
                // arrives during it asks for one more.
                self.reload_wanted.store(false, Ordering::SeqCst);
                self.reload(state, checker);
            }
            Wake::Watch(WatchNews::Changed(map)) => {
                self.metrics.watch_event();
                for (class, ids) in map {
                    state.pending.entry(class).or_default().extend(ids);
                }
                // The window opens with the first event and is not extended,
                // so a file written continuously is still checked within the
                // debounce.
                if state.pending_deadline.is_none() {
                    state.pending_deadline = Some(Instant::now() + self.cfg.debounce);
                }
            }
            Wake::Watch(WatchNews::Overflow) => {
                self.metrics.watch_overflow();
                self.metrics.fallback_pass("overflow");
                self.log(
                    LogLevel::Warn,
                    "file-change events were dropped by the kernel (queue overflow): running a full pass",
                );
                state.schedule.request_full(Instant::now());
            }
            // Every loss while running, a watched folder removed or renamed
            // away included (that removal is itself a change, and a folder
            // made again in its place is watched only once re-armed): a full
            // pass, which re-arms the watches first. A folder missing when
            // the watches are armed is only counted (`arm`), so a folder
            // that stays missing never loops.
            Wake::Watch(WatchNews::Lost { reason, detail }) => {
                self.lost(state, reason, &detail);
                self.metrics.fallback_pass(reason);
                state.schedule.request_full(Instant::now());
            }
        }
    }

    fn lost(&self, state: &mut State, reason: &str, detail: &str) {
        self.metrics.watch_error(reason);
        let hint = if reason == "limit" {
            " (raise fs.inotify.max_user_watches)"
        } else {
            ""
        };
        self.log(
            LogLevel::Warn,
            &format!(
                "watch lost ({reason}): {detail}{hint}; watched classes fall back to their interval until the next full pass re-arms it"
            ),
        );
        state.degraded = true;
        self.update_bounds(state);
    }

    fn reload(&self, state: &mut State, checker: &mut dyn ClassChecker) {
        self.log(LogLevel::Info, "reloading the repository");
        match checker.load() {
            Ok(loaded) => {
                let now = Instant::now();
                let unix = unix_now();
                self.metrics
                    .repository_revision(checker.revision().as_deref());
                state.loaded = loaded;
                state.schedule.set_classes(&state.loaded.classes, now, unix);
                self.adopt(state, unix);
                state.pending.clear();
                state.pending_deadline = None;
                // The new declarations may make anything drift or converge.
                state.schedule.request_full(now);
                self.log(
                    LogLevel::Info,
                    &format!(
                        "reloaded: {} resources in {} classes ({})",
                        state.loaded.resources,
                        state.loaded.classes.len(),
                        describe_classes(state)
                    ),
                );
            }
            Err(e) => {
                self.metrics.reload_failed();
                self.log(LogLevel::Error, &format!("reload refused: {e}"));
            }
        }
    }

    /// Takes a freshly loaded catalogue into use: metrics, watches, bounds.
    fn adopt(&self, state: &mut State, unix: Duration) {
        let classes: Vec<(String, Duration)> = state
            .loaded
            .classes
            .iter()
            .map(|c| (c.name.clone(), c.interval))
            .collect();
        self.metrics.loaded(&classes, unix);
        // Not ready until each class has had a complete check.
        self.health
            .expect_classes(classes.iter().map(|(name, _)| name.as_str()));
        state.plan = WatchPlan::new(&state.loaded.watch);
        self.arm(state);
    }

    /// (Re)starts the watcher on the current plan. Failures are counted and
    /// logged; the caller runs (or is about to run) a full pass.
    fn arm(&self, state: &mut State) {
        state.watcher = None;
        state.degraded = false;
        if state.plan.is_empty() {
            self.update_bounds(state);
            return;
        }
        let tx = self.tx.clone();
        match Watcher::start(&state.plan, move |news| {
            let _ = tx.send(Wake::Watch(news));
        }) {
            Ok((watcher, failures)) => {
                state.watcher = Some(watcher);
                for news in failures {
                    if let WatchNews::Lost { reason, detail } = news {
                        self.lost(state, reason, &detail);
                    }
                }
            }
            Err(e) => {
                self.lost(state, "backend", &e.to_string());
            }
        }
        self.update_bounds(state);
    }

    fn update_bounds(&self, state: &State) {
        let watching = state.watcher.is_some() && !state.degraded;
        for class in state.schedule.classes() {
            let watched = class.watch && watching;
            // Each bound with the p95 of the checks that find its changes:
            // the watch-triggered ones for what a watch sees, the complete
            // ones for what waits for the interval.
            let (detection, inspection) = if watched {
                let debounce = self.cfg.debounce;
                (Detection::Watch { debounce }, Inspection::Watch)
            } else {
                (Detection::Interval, Inspection::Scheduled)
            };
            let bound = detection_bound(
                class.interval,
                detection,
                state.schedule.inspection_p95(&class.name, inspection),
            );
            self.metrics.set_detection(&class.name, bound, watched);
        }
    }

    fn full_pass(&self, state: &mut State, checker: &mut dyn ClassChecker) {
        // Watches lost earlier are re-armed before the pass, so the pass
        // covers whatever changed while they were missing.
        if state.degraded {
            self.log(
                LogLevel::Info,
                "re-arming file watches before the full pass",
            );
            self.arm(state);
        }
        let taken = std::mem::take(&mut state.pending);
        state.pending_deadline = None;
        let ran = self.run_check(state, checker, &Scope::All);
        state.schedule.ran_full(Instant::now(), unix_now());
        if !ran {
            // The backstop did not run (the root lock timed out), nor, at
            // start, the check `/readyz` waits for: again after the same
            // doubling wait as a watched change's, not `--full-interval`
            // later (a class with a day's interval would wait for it).
            let (wait, failed_before) = (retry_wait(state.retries), state.retries);
            // The watched changes it took are pending again (counting one
            // more failure in a row), checked by it at the latest.
            self.retry(state, taken);
            if state.retries == failed_before {
                state.retries = state.retries.saturating_add(1);
            }
            state.schedule.request_full(Instant::now() + wait);
            self.log(
                LogLevel::Warn,
                &format!(
                    "the full pass could not run: it runs again in {}s",
                    wait.as_secs()
                ),
            );
        }
    }

    fn class_check(&self, state: &mut State, checker: &mut dyn ClassChecker, class: String) {
        let taken = state.pending.remove(&class);
        if state.pending.is_empty() {
            state.pending_deadline = None;
        }
        let ran = self.run_check(state, checker, &Scope::Class(class.clone()));
        state.schedule.ran_class(&class, Instant::now(), unix_now());
        if let (false, Some(ids)) = (ran, taken) {
            self.retry(state, BTreeMap::from([(class, ids)]));
        }
    }

    fn watch_check(&self, state: &mut State, checker: &mut dyn ClassChecker) {
        state.pending_deadline = None;
        let pending = std::mem::take(&mut state.pending);
        let mut not_run = BTreeMap::new();
        for (class, ids) in pending {
            if state.stop || self.cancel.is_cancelled() {
                return;
            }
            let scope = Scope::Resources {
                class: class.clone(),
                ids: ids.iter().cloned().collect(),
            };
            if !self.run_check(state, checker, &scope) {
                not_run.insert(class, ids);
            }
        }
        self.retry(state, not_run);
    }

    /// Watched resources whose change was taken for a check that could not
    /// run (the root lock timed out while an apply ran): they are pending
    /// again, checked after a wait that doubles with each failure in a row,
    /// rather than left to their class's interval (a revert class would
    /// stay drifted that long, while the detection bound says debounce).
    fn retry(&self, state: &mut State, not_run: BTreeMap<String, BTreeSet<ResourceId>>) {
        let count: usize = not_run.values().map(BTreeSet::len).sum();
        if count == 0 {
            return;
        }
        for (class, ids) in not_run {
            state.pending.entry(class).or_default().extend(ids);
        }
        let wait = retry_wait(state.retries);
        state.retries = state.retries.saturating_add(1);
        state.pending_deadline = Some(Instant::now() + wait);
        self.log(
            LogLevel::Warn,
            &format!(
                "{count} changed watched resource(s) could not be checked: checked again in {}s",
                wait.as_secs()
            ),
        );
    }

    /// Runs one check; whether it ran (a check that could not run at all is
    /// counted and logged here).
    fn run_check(&self, state: &mut State, checker: &mut dyn ClassChecker, scope: &Scope) -> bool {
        self.health.busy(Some(unix_now().as_secs().max(1)));
        let result = checker.check(scope, &self.cancel);
        self.health.busy(None);
        self.health.failed(result.is_err());
        match result {
            Ok(report) => {
                // The events were the agent's own revert writes, the files
                // still as it left them: no check was made, none is counted
                // or logged (the revert's check said what it did).
                if report.own_writes > 0 && report.classes.is_empty() {
                    state.retries = 0;
                    return true;
                }
                if !report.cancelled {
                    let kind = if scope.complete() {
                        Inspection::Scheduled
                    } else {
                        Inspection::Watch
                    };
                    for (class, r) in &report.classes {
                        state.schedule.record_inspection(class, r.duration, kind);
                    }
                    // What `/readyz` waits for at start: a complete check
                    // of every class (a watch's check is none).
                    match scope {
                        Scope::All => self
                            .health
                            .checked(state.loaded.classes.iter().map(|c| c.name.as_str())),
                        Scope::Class(class) => self.health.checked([class.as_str()]),
                        Scope::Resources { .. } => {}
                    }
                }
                self.metrics.checked(scope, &report, unix_now());
                self.health.recorded(report.unrecorded);
                let (level, line) = summary(scope.trigger(), scope, &report);
                self.log(level, &line);
                state.retries = 0;
                self.update_bounds(state);
                true
            }
            Err(e) => {
                self.metrics.check_failed();
                self.log(LogLevel::Error, &e.to_string());
                self.update_bounds(state);
                false
            }
        }
    }
}

/// How long a check that could not run waits before it runs again, after
/// `retries` such failures in a row: doubling from [`RETRY_FIRST`] up to
/// [`RETRY_MAX`].
fn retry_wait(retries: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1 << retries.min(8))
        .min(RETRY_MAX)
}

fn describe_classes(state: &State) -> String {
    let watching = state.watcher.is_some() && !state.degraded;
    state
        .loaded
        .classes
        .iter()
        .map(|c| {
            let how = if c.watch && watching {
                "watched"
            } else {
                "polled"
            };
            format!(
                "{} every {}s, {how}, policy {}",
                c.name,
                c.interval.as_secs_f64(),
                c.policy
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// One log line per check: counts only, never resource names (a sensitive
/// resource's name can say what it is). Besides the open findings, what the
/// policies did (reverted, failed, quarantined: drift a revert undid or a
/// quarantine holds is no open finding, and the line would otherwise read
/// "0 open finding(s), exit 2"); a warning when something failed, which
/// `datum check` then names.
fn summary(trigger: &str, scope: &Scope, report: &CheckReport) -> (LogLevel, String) {
    let what = match scope {
        Scope::All => "all classes".to_owned(),
        Scope::Class(c) => format!("class {c}"),
        Scope::Resources { class, ids } => format!("class {class} ({} resource(s))", ids.len()),
    };
    let findings: u64 = report
        .classes
        .values()
        .flat_map(|c| c.findings.values())
        .sum();
    let ms: u128 = report
        .classes
        .values()
        .map(|c| c.duration.as_millis())
        .sum();
    let state = |word: &str| -> u64 {
        report
            .classes
            .values()
            .filter_map(|c| c.states.get(word))
            .sum()
    };
    let mut line = format!("check ({trigger}) of {what}: {findings} open finding(s)");
    for (word, said) in [
        ("changed", "reverted"),
        ("failed", "failed"),
        ("quarantined", "quarantined"),
    ] {
        let n = state(word);
        if n > 0 {
            line.push_str(&format!(", {n} {said}"));
        }
    }
    let accepted: u64 = report
        .classes
        .values()
        .filter_map(|c| c.acted.get("accepted"))
        .sum();
    if accepted > 0 {
        line.push_str(&format!(", {accepted} accepted"));
    }
    line.push_str(&format!(
        ", exit {}, {ms} ms",
        report.conclusion.exit_code().code()
    ));
    if report.cancelled {
        line.push_str(", stopped early");
    }
    let level = if state("failed") > 0 || report.conclusion == Conclusion::Errors {
        LogLevel::Warn
    } else {
        LogLevel::Info
    };
    (level, line)
}

#[cfg(test)]
mod tests;
