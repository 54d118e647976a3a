//! Reports leave the host: when `ROOT/etc/datum/report.yaml` names a
//! server, every apply, check and agent pass queues its report in the state
//! store's outbox (in the same transaction that records the pass) and then
//! delivers the outbox, oldest first, within a time budget. What is not
//! delivered now stays queued for the next pass (or the agent's delivery
//! thread), with backoff; see `datum_fleet::delivery` for the guarantees.
//!
//! A `report.yaml` that cannot be read is a warning, not an error: the
//! report is still queued (nothing is lost) and goes out once the file is
//! fixed. Delivery never changes a pass's exit code.
//!
//! Owns: [`Reporting`] (finding the credentials, queueing, delivering) and
//! the class bounds a report carries. Must not: decide what a pass found.

pub mod build;
pub mod revision;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use datum_fleet::{ClassBound, Client, Credentials, Delivered, Report, Timeouts};
use datum_store::{Batch, OUTBOX_LIMIT, Store};

/// Where a host's reporting configuration lives, under the root.
pub const REPORT_FILE: &str = "etc/datum/report.yaml";

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

impl Reporting {
    /// The set-up of the host at `root`: `None` when it does not report.
    pub fn load(root: &Path) -> Option<Reporting> {
        let path = root.join(REPORT_FILE);
        let bytes = match datum_host::fs::read(&path) {
            Ok(b) => b,
            Err(_) if datum_host::fs::lstat(&path).ok().flatten().is_none() => return None,
            Err(e) => {
                eprintln!("warning: {e}; reports are kept in the outbox");
                return Some(Reporting {
                    path,
                    credentials: None,
                });
            }
        };
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

    /// The interval `report.yaml` states, if any.
    pub fn interval(&self) -> Option<Duration> {
        self.credentials.as_ref().and_then(|c| c.interval)
    }

    /// Queues `report` in `batch` (drawing its key and sequence number),
    /// with what is quarantined on the host as the batch sees it and the
    /// server's instructions it has carried out since its last report.
    pub fn enqueue(&self, batch: &Batch<'_>, mut report: Report, now: i64) -> anyhow::Result<()> {
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
        report.instructions = batch.instructions_to_confirm()?;
        report.seq = batch.next_report_seq()?;
        report.key = datum_fleet::report::new_key();
        let body = serde_json::to_vec(&report)?;
        batch.enqueue_report(&report.key, report.seq, &body, self.limit(), now)?;
        Ok(())
    }

    /// Delivers the outbox of `store` until it is empty, the server cannot
    /// be reached, or `budget` runs out; warns about what is left.
    pub fn deliver(
        &self,
        store: &mut Store,
        budget: Duration,
        respect_backoff: bool,
    ) -> Option<Delivered> {
        let creds = self.credentials.as_ref()?;
        let client = match Client::new(
            &creds.server,
            &creds.ca_pem,
            &creds.token,
            Timeouts::default(),
        ) {
            Ok(c) => c,
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
                    datum_drift::schedule::detection_bound(spec.interval, Duration::from_millis(p))
                        .as_millis() as u64
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
