//! `/metrics`: the fleet for Prometheus, so staleness, failed rollouts and
//! drift clusters alert from outside every host (the signal that a host is
//! no longer managed cannot come from the host).
//!
//! From the store, at each scrape (the same for every server process):
//! - `datum_fleet_hosts{state}`: hosts per state;
//! - `datum_fleet_host_last_report_timestamp_seconds{host}`,
//!   `datum_fleet_host_expected_interval_seconds{host}` and
//!   `datum_fleet_host_stale{host}` (0/1, by the server's factor): the
//!   per-host staleness alert;
//! - `datum_fleet_host_outbox_depth{host}`: reports waiting on the host
//!   when it last delivered;
//! - `datum_fleet_rollout_hosts{state}` for the latest revision
//!   (`converged`, `failed`, `pending`) and
//!   `datum_fleet_rollout_failure_groups`;
//! - `datum_fleet_drift_cluster_hosts{signature,category}`: hosts in each
//!   of the largest drift clusters (at most [`CLUSTERS_EXPORTED`]).
//!
//! Of this process: `datum_fleet_reports_ingested_total{kind}`,
//! `datum_fleet_reports_duplicate_total`,
//! `datum_fleet_reports_rejected_total{reason}`, and how ingest batched:
//! `datum_fleet_ingest_transactions_total` and
//! `datum_fleet_ingest_transaction_reports_total` (their ratio is the
//! mean batch size).
//!
//! Labels carry host names, states, kinds, value-free signatures and
//! categories, never a resource's value. Owns: [`Metrics`]. Must not: be
//! reachable without the admin credential (host names are inventory).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::api::App;
use crate::store::{Backend, StoreError};
use crate::views::host_state;

/// Drift clusters exported at most (the largest).
pub const CLUSTERS_EXPORTED: usize = 50;

type Labels = Vec<(String, String)>;

/// The process's own counters.
#[derive(Debug, Default, Clone)]
pub struct Metrics {
    ingested: Family<Labels, Counter>,
    duplicates: Counter,
    rejected: Family<Labels, Counter>,
}

fn label(k: &str, v: &str) -> Labels {
    vec![(k.to_owned(), v.to_owned())]
}

impl Metrics {
    pub fn ingested(&self, kind: &str, fresh: bool) {
        if fresh {
            self.ingested.get_or_create(&label("kind", kind)).inc();
        } else {
            self.duplicates.inc();
        }
    }

    pub fn rejected(&self, reason: &str) {
        self.rejected.get_or_create(&label("reason", reason)).inc();
    }

    /// The OpenMetrics text for a scrape now.
    pub async fn render<B: Backend>(&self, app: &App<B>) -> Result<String, StoreError> {
        let staleness = app.staleness();
        let rows = app.fleet.host_rows().await?;
        let mut registry = Registry::default();
        let hosts: Family<Labels, Gauge> = Family::default();
        for s in crate::views::STATES {
            hosts.get_or_create(&label("state", s)).set(0);
        }
        let last: Family<Labels, Gauge> = Family::default();
        let interval: Family<Labels, Gauge> = Family::default();
        let stale: Family<Labels, Gauge> = Family::default();
        let depth: Family<Labels, Gauge> = Family::default();
        for r in &rows {
            let state = host_state(r, &staleness);
            hosts.get_or_create(&label("state", state)).inc();
            let h = label("host", &r.name);
            if let Some(t) = r.last_report_at {
                last.get_or_create(&h).set(t);
            }
            interval
                .get_or_create(&h)
                .set(i64::try_from(r.expected_interval_s).unwrap_or(i64::MAX));
            stale.get_or_create(&h).set(i64::from(state == "stale"));
            depth
                .get_or_create(&h)
                .set(i64::try_from(r.outbox_depth).unwrap_or(i64::MAX));
        }
        registry.register("datum_fleet_hosts", "Hosts and stacks per state", hosts);
        registry.register(
            "datum_fleet_host_last_report_timestamp_seconds",
            "When each host's last report finished (Unix seconds)",
            last,
        );
        registry.register(
            "datum_fleet_host_expected_interval_seconds",
            "The longest gap each host said to expect between two reports",
            interval,
        );
        registry.register(
            "datum_fleet_host_stale",
            "1 when the host is past its interval times the server's stale factor",
            stale,
        );
        registry.register(
            "datum_fleet_host_outbox_depth",
            "Reports waiting in the host's outbox when it last delivered",
            depth,
        );

        let rollout = app.fleet.rollout(None).await?;
        let by_state: Family<Labels, Gauge> = Family::default();
        by_state
            .get_or_create(&label("state", "converged"))
            .set(rollout.converged.len() as i64);
        by_state
            .get_or_create(&label("state", "failed"))
            .set(rollout.failed.len() as i64);
        by_state
            .get_or_create(&label("state", "pending"))
            .set(rollout.pending.len() as i64);
        registry.register(
            "datum_fleet_rollout_hosts",
            "Hosts of the latest revision's rollout per outcome",
            by_state,
        );
        let groups: Gauge = Gauge::default();
        groups.set(rollout.groups.len() as i64);
        registry.register(
            "datum_fleet_rollout_failure_groups",
            "Distinct failures (resource, validator, message) in the latest revision's rollout",
            groups,
        );

        let drift = app.fleet.drift(staleness.now).await?;
        let clusters: Family<Labels, Gauge> = Family::default();
        for c in drift.clusters.iter().take(CLUSTERS_EXPORTED) {
            let id = match &c.observed {
                Some(o) => format!("{}-{}", c.signature, o),
                None => c.signature.clone(),
            };
            clusters
                .get_or_create(&vec![
                    ("signature".to_owned(), id),
                    ("category".to_owned(), c.category.clone()),
                ])
                .set(i64::try_from(c.hosts).unwrap_or(i64::MAX));
        }
        registry.register(
            "datum_fleet_drift_cluster_hosts",
            "Hosts showing the same drift (value-free signature and observed hash)",
            clusters,
        );

        registry.register(
            "datum_fleet_reports_ingested",
            "Reports stored by this server process",
            self.ingested.clone(),
        );
        registry.register(
            "datum_fleet_reports_duplicate",
            "Reports whose key was already stored (a retried delivery)",
            self.duplicates.clone(),
        );
        registry.register(
            "datum_fleet_reports_rejected",
            "Reports refused by this server process, by reason",
            self.rejected.clone(),
        );
        let stats = app.fleet.ingest_stats();
        registry.register(
            "datum_fleet_ingest_transactions",
            "Ingest transactions this server process committed",
            ConstCounter::new(stats.transactions),
        );
        registry.register(
            "datum_fleet_ingest_transaction_reports",
            "Reports those transactions answered (group commit: several per transaction)",
            ConstCounter::new(stats.reports),
        );
        let mut out = String::new();
        encode(&mut out, &registry).map_err(|e| StoreError::Shape {
            backend: "metrics",
            detail: e.to_string(),
        })?;
        Ok(out)
    }
}
