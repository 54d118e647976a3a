//! Reports leave the host: when `ROOT/etc/datum/report.yaml` names a
//! server, every apply, check and agent pass queues its report in the state
//! store's outbox (in the same transaction that records the pass), and the
//! outbox is delivered, oldest first, off the pass's path:
//!
//! - `datum apply` / `datum check` start a detached `datum outbox
//!   --background` (through `datum_host::command::spawn_detached`) and
//!   return: the pass costs the queueing (no extra commit) and one process
//!   start, not a TLS connection and two commits. The report is durable
//!   before the pass returns, so a delivery process that is killed, or a
//!   machine that goes down, loses nothing: the next delivery sends it (the
//!   server drops a repeat by its key). Since the pass no longer sees the
//!   outcome, it warns when the previous delivery failed.
//! - Under systemd (a service has `INVOCATION_ID`), whose stop would kill a
//!   detached process with the unit, the pass delivers itself, within
//!   [`PASS_BUDGET`]: nobody waits at a terminal there.
//! - `datum agent` delivers from its own thread; `datum outbox --flush`
//!   delivers now.
//!
//! One delivery of an outbox at a time: each holds a lock file beside the
//! state store, and a second one waits for it (so a report queued while
//! the first is finishing is still sent). What is not delivered stays
//! queued, with backoff; see `datum_fleet::delivery` for the guarantees.
//!
//! A `report.yaml` that cannot be read is a warning, not an error: the
//! report is still queued (nothing is lost) and goes out once the file is
//! fixed. Delivery never changes a pass's exit code.
//!
//! Owns: [`Reporting`] (finding the credentials, queueing, delivering) and
//! the class bounds a report carries. Must not: decide what a pass found.

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

pub mod build;
pub mod revision;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use datum_fleet::{ClassBound, Client, Credentials, Delivered, Report, Timeouts};
use datum_host::Host;
use datum_store::{Batch, OUTBOX_BYTES, OUTBOX_LIMIT, Store};

/// How long a delivery waits for another delivery of the same outbox.
pub use datum_store::DELIVERY_LOCK_WAIT;

/// Where a host's reporting configuration lives, under the root.
pub const REPORT_FILE: &str = "etc/datum/report.yaml";

/// [`REPORT_FILE`] as a declared path.
const REPORT_DECLARED: &str = "/etc/datum/report.yaml";

/// How long a command-line pass spends delivering before it gives up
/// (what is left goes with the next pass).
pub const PASS_BUDGET: Duration = Duration::from_secs(10);

/// A host's reporting set-up, when it has one.
#[derive(Debug, Clone)]
pub struct Reporting {
    pub path: PathBuf,
    /// `None`: the file is there but cannot be used (the warning says
    /// why); reports are queued all the same.
    pub credentials: Option<Credentials>,
}

/// Why a report could not be queued in the outbox.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    /// The state store (the outbox, its quarantines and sequence) failed.
    #[error("cannot queue the fleet report")]
    Store(#[from] datum_store::StoreError),
    /// The report could not be written as JSON.
    #[error("cannot encode the fleet report")]
    Encode(#[source] serde_json::Error),
}

impl Reporting {
    /// The set-up of `host`: `None` when it does not report. The file is
    /// read through the boundary (never through a parent link).
    pub fn load(host: &Host) -> Option<Reporting> {
        let path = host.root().join(REPORT_FILE);
        let bytes = match host.read(Path::new(REPORT_DECLARED)) {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(e) => {
                eprintln!("warning: {e}; reports are kept in the outbox");
                return Some(Reporting {
                    path,
                    credentials: None,
                });
            }
        };
        // The token lets whoever reads it report as this host (and hide its
        // drift behind clean reports): say so when others may read it.
        if let Ok(Some(st)) = host.lstat(Path::new(REPORT_DECLARED))
            && st.meta.mode & 0o077 != 0
        {
            eprintln!(
                "warning: {} is mode {:04o}: it holds this host's token, which lets whoever reads it send reports as this host; make it 0600 (chmod 600)",
                path.display(),
                st.meta.mode & 0o7777
            );
        }
        let credentials = match Credentials::parse(&path, &String::from_utf8_lossy(&bytes)) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("warning: {e}; reports are kept in the outbox until it is fixed");
                None
            }
        };
        Some(Reporting { path, credentials })
    }

    /// The outbox limit.
    pub fn limit(&self) -> u64 {
        self.credentials
            .as_ref()
            .and_then(|c| c.outbox_limit)
            .unwrap_or(OUTBOX_LIMIT)
    }

    /// Bytes of reports the outbox keeps at most.
    pub fn outbox_bytes(&self) -> u64 {
        self.credentials
            .as_ref()
            .and_then(|c| c.outbox_bytes)
            .unwrap_or(OUTBOX_BYTES)
    }

    /// The interval `report.yaml` states, if any.
    pub fn interval(&self) -> Option<Duration> {
        self.credentials.as_ref().and_then(|c| c.interval)
    }

    /// Queues `report` in `batch` (drawing its key and sequence number),
    /// with what is quarantined on the host as the batch sees it and the
    /// server's instructions it has carried out since its last report.
    pub fn enqueue(
        &self,
        batch: &Batch<'_>,
        mut report: Report,
        now: i64,
    ) -> Result<(), EnqueueError> {
        report.quarantined = batch
            .quarantined()?
            .into_iter()
            .map(|q| datum_fleet::Quarantined {
                target: datum_store::fleet_targets::word_of(&q.target),
                source: q.source.as_str().to_owned(),
                reason: Some(datum_fleet::report::bounded(
                    &q.reason,
                    datum_fleet::report::VALUE_KEPT,
                )),
                since: Some(q.since),
            })
            .collect();
        // Reports queued while host.yaml named the host otherwise than its
        // credentials do (and now does again) can never be delivered, and
        // would hold this one back for good.
        if self
            .credentials
            .as_ref()
            .is_some_and(|c| c.identity == report.host)
        {
            for (name, n) in batch.set_aside_reports_of_others(&report.host)? {
                eprintln!(
                    "warning: {n} queued report(s) of `{name}` set aside: made while host.yaml named this host `{name}`, they cannot be delivered with `{}`'s credentials ({}); `datum outbox` counts them as refused",
                    report.host,
                    self.path.display()
                );
            }
        }
        report.instructions = batch.instructions_to_confirm()?;
        // A server refuses a report holding a field it does not know: the
        // pass's warnings go only to a server whose last reply said it
        // takes them (the first report after an upgrade goes without).
        if !report.warnings.is_empty()
            && !batch.server_takes(datum_fleet::report::TAKES_WARNINGS)?
        {
            report.warnings.clear();
        }
        // Likewise what an apply verified: a server that does not say it
        // takes it closes only the findings of the resources it changed.
        if report.verified_except.is_some()
            && !batch.server_takes(datum_fleet::report::TAKES_VERIFIED_EXCEPT)?
        {
            report.verified_except = None;
        }
        report.seq = batch.next_report_seq()?;
        report.key = datum_fleet::report::new_key();
        // Within what a server takes by default (1 MiB): a larger report is
        // refused for good, and a drift large enough to make one (a Tree
        // whose thousands of entries were edited) would never be seen.
        let (body, shed) = report
            .encode_within(datum_fleet::report::REPORT_BUDGET)
            .map_err(EnqueueError::Encode)?;
        if let Some(shed) = shed {
            eprintln!("warning: {shed}; `datum check` shows everything");
        }
        batch.enqueue_report_within(
            &report.key,
            report.seq,
            &body,
            self.limit(),
            self.outbox_bytes(),
            now,
        )?;
        Ok(())
    }

    /// Delivers the outbox of `store` until it is empty, the server cannot
    /// be reached, or `budget` runs out; warns about what is left. Waits
    /// (up to [`DELIVERY_LOCK_WAIT`]) while another delivery of the same
    /// outbox runs.
    pub fn deliver(
        &self,
        store: &mut Store,
        budget: Duration,
        respect_backoff: bool,
    ) -> Option<Delivered> {
        let creds = self.credentials.as_ref()?;
        let _one_at_a_time = match store.delivery_lock(DELIVERY_LOCK_WAIT) {
            Ok(lock) => lock,
            Err(datum_host::HostError::LockTimeout { waited, .. }) => {
                eprintln!(
                    "warning: another delivery of this outbox was still running after {}s; reports stay queued",
                    waited.as_secs()
                );
                return None;
            }
            Err(e) => {
                eprintln!("warning: cannot lock the outbox for delivery: {e}; reports stay queued");
                return None;
            }
        };
        let client = match Client::new(
            &creds.server,
            &creds.ca_pem,
            &creds.token,
            Timeouts::default(),
        ) {
            Ok(c) => c.ca_from(&self.path),
            Err(e) => {
                eprintln!(
                    "warning: {}: {e}; reports are kept in the outbox",
                    self.path.display()
                );
                return None;
            }
        };
        let result = datum_fleet::deliver(
            &mut store.outbox(),
            &client,
            datum_fleet::Budget {
                until: Instant::now() + budget,
                respect_backoff,
            },
            now_ms,
        );
        match result {
            Ok(d) => {
                warn(&d, &creds.server);
                Some(d)
            }
            Err(e) => {
                eprintln!("warning: cannot deliver reports: {e}");
                None
            }
        }
    }
}

/// What reporting cost one pass, phase by phase (reading `report.yaml`,
/// building the report, queueing it, handing the delivery off), logged at
/// debug level for `datum::reporting` (`DATUM_LOG=datum::reporting=debug`):
/// reporting's share of a pass, measured inside it, apart from the noise
/// of the whole pass's time. `bench/fleet.sh` reads it.
#[derive(Debug, Default)]
pub struct Cost {
    phases: Vec<(&'static str, Duration)>,
}

impl Cost {
    /// Runs `f` as `phase`.
    pub fn time<T>(&mut self, phase: &'static str, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        self.phases.push((phase, start.elapsed()));
        out
    }

    /// Logs the phases and their sum (nothing unless debug is on for
    /// `datum::reporting`).
    pub fn log(&self) {
        if !tracing::enabled!(target: "datum::reporting", tracing::Level::DEBUG) {
            return;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|(p, d)| format!("{p}={:.3}", ms(*d)))
            .collect();
        let total: Duration = self.phases.iter().map(|(_, d)| *d).sum();
        tracing::debug!(
            target: "datum::reporting",
            total_ms = ms(total),
            phases = %phases.join(" "),
            "what reporting cost this pass"
        );
    }
}

fn warn(d: &Delivered, server: &str) {
    for why in &d.refused {
        eprintln!("warning: {server} refused a report for good and it was set aside: {why}");
    }
    if d.waiting {
        eprintln!(
            "warning: {} report(s) queued for {server}; the last attempt failed ({}); retried after the backoff (`datum outbox --flush` now)",
            d.remaining,
            d.error.as_deref().unwrap_or("unknown error")
        );
        return;
    }
    if let Some(e) = &d.error {
        eprintln!(
            "warning: {} report(s) queued for {server}: {e}; delivery is retried with backoff",
            d.remaining
        );
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Each class's interval and detection bound (interval + p95 of recent
/// inspections), as the host knows them; and the expected interval between
/// two reports: `report.yaml`'s, else the shortest class interval.
///
/// A watched class's bound here is interval + p95 too, the bound that holds
/// for every change (`datum schedule` states it as `unwatched_bound_ms`):
/// what no watch sees waits for the interval, a report of `datum check` or
/// `datum apply` cannot know whether an agent's watches are in place, and
/// the server takes the bound as what its sampling view guarantees. The
/// shorter bound of what a watch sees is `datum schedule`'s and the agent's
/// `datum_detection_bound_seconds`.
pub fn class_bounds(
    classes: &datum_drift::classes::Classes,
    counts: &std::collections::BTreeMap<String, u64>,
    store: Option<&Store>,
    stated: Option<Duration>,
) -> (Vec<ClassBound>, u64) {
    let mut names: Vec<&String> = counts.keys().collect();
    for n in classes.classes.keys() {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names.sort();
    let bounds: Vec<ClassBound> = names
        .into_iter()
        .map(|name| {
            let spec = classes.get(name);
            let p95 = store
                .and_then(|s| {
                    s.inspection_percentiles("check", Some(name), 50)
                        .ok()
                        .flatten()
                })
                .map(|p| p.p95_ms);
            ClassBound {
                class: name.clone(),
                policy: Some(spec.policy.word().to_owned()),
                interval_s: spec.interval.as_secs(),
                bound_ms: p95.map(|p| {
                    let bound = datum_drift::schedule::detection_bound(
                        spec.interval,
                        datum_drift::schedule::Detection::Interval,
                        Duration::from_millis(p),
                    );
                    u64::try_from(bound.as_millis()).unwrap_or(u64::MAX)
                }),
                resources: counts.get(name).copied().unwrap_or(0),
            }
        })
        .collect();
    let expected = stated.map(|d| d.as_secs()).unwrap_or_else(|| {
        bounds
            .iter()
            .filter(|b| b.resources > 0)
            .map(|b| b.interval_s)
            .min()
            .unwrap_or(3600)
    });
    (bounds, expected)
}

/// The agent's delivery thread: delivers the outbox whenever a report is
/// queued, and again when the backoff allows, on its own connection to the
/// state store, so a server that is down never delays a check.
pub struct Courier {
    wake: std::sync::mpsc::Sender<()>,
}

impl Courier {
    /// Starts the thread; `open` opens the state store (never creating
    /// one; `None` when it is unusable, tried again a minute later).
    pub fn start(
        open: impl FnMut() -> Option<Store> + Send + 'static,
        reporting: Option<Reporting>,
    ) -> Courier {
        let mut open = open;
        let (wake, rx) = std::sync::mpsc::channel::<()>();
        let _ = std::thread::Builder::new()
            .name("datum-courier".to_owned())
            .spawn(move || {
                let Some(reporting) = reporting else { return };
                let mut store: Option<Store> = None;
                let mut wait = Duration::from_secs(0);
                loop {
                    match rx.recv_timeout(wait) {
                        Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                    while rx.try_recv().is_ok() {}
                    if store.is_none() {
                        // Never creates one; an unusable store is warned
                        // about by the checks.
                        store = open();
                    }
                    let Some(s) = store.as_mut() else {
                        wait = Duration::from_secs(60);
                        continue;
                    };
                    let outcome = reporting.deliver(s, Duration::from_secs(60), true);
                    // Sleep until the backoff allows the next attempt (or a
                    // new report arrives); idle for a minute when empty.
                    let next = s
                        .outbox_status()
                        .map(|st| (st.depth, st.backoff.next_attempt_ms));
                    wait = match (outcome, next) {
                        (_, Ok((0, _))) => Duration::from_secs(3600),
                        (_, Ok((_, at))) => {
                            let ms = (at - now_ms()).clamp(100, 300_000);
                            Duration::from_millis(ms as u64)
                        }
                        _ => Duration::from_secs(60),
                    };
                }
            });
        Courier { wake }
    }

    /// Tells the thread a report is queued.
    pub fn wake(&self) {
        let _ = self.wake.send(());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]
    use super::*;

    /// A server refuses a report holding a field it does not know (its
    /// `Report` denies unknown fields), so the pass's warnings are queued
    /// only after the server's reply said it takes them: before any reply,
    /// and after a reply of a server that predates them, the report has no
    /// `warnings` at all, as servers of every version read it.
    #[test]
    fn warnings_are_queued_only_for_a_server_that_takes_them() {
        use datum_fleet::delivery::Queue as _;
        let text = format!(
            "datum: v1alpha1\nserver: https://127.0.0.1:8443\nidentity: web-1\nkind: host\n\
             token: {}\nca: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\n",
            datum_fleet::credentials::new_token(datum_fleet::credentials::HOST_TOKEN_PREFIX)
        );
        let reporting = Reporting {
            path: PathBuf::from("/etc/datum/report.yaml"),
            credentials: Some(
                Credentials::parse(Path::new("/etc/datum/report.yaml"), &text).unwrap(),
            ),
        };
        let mut report = build::Common {
            kind: datum_fleet::ReportKind::Apply,
            host: "web-1".to_owned(),
            labels: Default::default(),
            revision: "r".to_owned(),
            catalogue: "c".to_owned(),
            started_at: 1,
            finished_at: 2,
            duration_ms: 1000,
            exit_code: 2,
            resources: 1,
            classes: Vec::new(),
            expected_interval_s: 600,
        }
        .report();
        report.warnings = vec!["User[w1]: usermod succeeded and said: shell".to_owned()];
        report.verified_except = Some(vec!["File[bad]".to_owned()]);
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("state.db")).unwrap();
        // Queues the report, delivers it with `reply`, gives the body sent.
        let mut round = |reply: &str| -> serde_json::Value {
            let batch = store.batch().unwrap();
            reporting.enqueue(&batch, report.clone(), 100).unwrap();
            batch.commit().unwrap();
            let mut outbox = store.outbox();
            let head = outbox.oldest().unwrap().unwrap();
            let reply: datum_fleet::Reply = serde_json::from_str(reply).unwrap();
            outbox.delivered(head.id, &reply).unwrap();
            serde_json::from_slice(&head.body).unwrap()
        };
        let old =
            r#"{"format_version": 1, "accepted": true, "duplicate": false, "sampling": null}"#;
        let new = r#"{"format_version": 1, "accepted": true, "duplicate": false, "sampling": null, "takes": ["warnings", "verified_except"]}"#;
        // A server that takes warnings but predates `verified_except`.
        let warnings_only = r#"{"format_version": 1, "accepted": true, "duplicate": false, "sampling": null, "takes": ["warnings"]}"#;
        let first = round(new);
        assert!(first.get("warnings").is_none(), "no reply yet: {first}");
        assert!(
            first.get("verified_except").is_none(),
            "no reply yet: {first}"
        );
        let second = round(old);
        assert_eq!(
            second["warnings"],
            serde_json::json!(["User[w1]: usermod succeeded and said: shell"])
        );
        assert_eq!(second["verified_except"], serde_json::json!(["File[bad]"]));
        let third = round(warnings_only);
        assert!(
            third.get("warnings").is_none(),
            "an older server's reply: {third}"
        );
        assert!(third.get("verified_except").is_none(), "{third}");
        let fourth = round(new);
        assert!(fourth.get("warnings").is_some());
        assert!(fourth.get("verified_except").is_none(), "{fourth}");
        let fifth = round(new);
        assert!(fifth.get("verified_except").is_some(), "{fifth}");
    }

    /// The outbox's byte budget was fixed at 128 MiB: a host whose
    /// `/var` cannot spare that while the server is down had no way to
    /// ask for less. `report.yaml`'s `outbox_bytes` sets it: past it the
    /// oldest reports are dropped and counted, as past `outbox_limit`.
    #[test]
    fn report_yaml_sets_the_outboxs_byte_budget() {
        let text = |extra: &str| {
            format!(
                "datum: v1alpha1\nserver: https://127.0.0.1:8443\nidentity: web-1\nkind: host\n\
                 token: {}\n{extra}ca: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\n",
                datum_fleet::credentials::new_token(datum_fleet::credentials::HOST_TOKEN_PREFIX)
            )
        };
        let reporting = |extra: &str| Reporting {
            path: PathBuf::from("/etc/datum/report.yaml"),
            credentials: Some(
                Credentials::parse(Path::new("/etc/datum/report.yaml"), &text(extra)).unwrap(),
            ),
        };
        assert_eq!(reporting("").outbox_bytes(), OUTBOX_BYTES);
        let small = reporting("outbox_bytes: 4000\n");
        assert_eq!(small.outbox_bytes(), 4000);
        let report = build::Common {
            kind: datum_fleet::ReportKind::Check,
            host: "web-1".to_owned(),
            labels: Default::default(),
            revision: "r".to_owned(),
            catalogue: "c".to_owned(),
            started_at: 1,
            finished_at: 2,
            duration_ms: 1000,
            exit_code: 0,
            resources: 1,
            classes: Vec::new(),
            expected_interval_s: 600,
        }
        .report();
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("state.db")).unwrap();
        let size = serde_json::to_vec(&report).unwrap().len() as u64;
        for at in 0..10 {
            let batch = store.batch().unwrap();
            small.enqueue(&batch, report.clone(), 100 + at).unwrap();
            batch.commit().unwrap();
        }
        let status = store.outbox_status().unwrap();
        let kept = status.depth;
        assert!(
            kept >= 1 && kept * size <= 4000 + size,
            "{status:?}, {size} B each"
        );
        assert!(kept < 10, "nothing dropped: {status:?}, {size} B each");
        assert_eq!(status.dropped_total, 10 - kept, "{status:?}");
        // The newest are kept (the oldest queued is among the last ones).
        assert_eq!(status.oldest_queued_at, Some(100 + 10 - kept as i64));
    }

    /// The fleet report states the bound that holds for every change: for a
    /// watched class interval + p95, what `datum schedule` states for what
    /// no watch sees, computed by the same formula; for a polled class the
    /// schedule's one bound.
    #[test]
    fn a_classs_bound_is_the_schedules_bound_for_every_change() {
        use datum_drift::schedule::ScheduleRow;
        use std::collections::BTreeMap;
        let classes = datum_drift::classes::Classes::parse(&serde_json::json!({
            "critical": {"interval": "60s", "watch": true},
            "normal": {"interval": "1h"},
        }))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("state.db")).unwrap();
        let batch = store.batch().unwrap();
        for (command, ms) in [("check", 250), ("agent-watch", 20)] {
            let id = batch
                .record_pass(&datum_store::PassRecord {
                    started_at: 1,
                    finished_at: 2,
                    command: command.to_owned(),
                    host: "web-1".to_owned(),
                    counts: BTreeMap::new(),
                    duration_ms: ms,
                    exit_code: 0,
                })
                .unwrap();
            for class in ["critical", "normal"] {
                batch.record_class_inspection(id, class, ms).unwrap();
            }
        }
        batch.commit().unwrap();
        let counts = BTreeMap::from([("critical".to_owned(), 3), ("normal".to_owned(), 5)]);
        let (bounds, _) = class_bounds(&classes, &counts, Some(&store), None);
        let row = |name: &str| {
            let spec = classes.get(name);
            ScheduleRow::new(
                spec,
                0,
                Some((250, 250, 1)),
                Duration::from_millis(100),
                Some(20),
            )
        };
        let critical = bounds.iter().find(|b| b.class == "critical").unwrap();
        assert_eq!(critical.bound_ms, Some(60_250));
        assert_eq!(critical.bound_ms, row("critical").unwatched_bound_ms);
        assert_eq!(row("critical").detection_bound_ms, Some(120));
        let normal = bounds.iter().find(|b| b.class == "normal").unwrap();
        assert_eq!(normal.bound_ms, Some(3_600_250));
        assert_eq!(normal.bound_ms, row("normal").detection_bound_ms);
    }
}
