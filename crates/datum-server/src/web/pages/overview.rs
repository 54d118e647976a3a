//! `/`: the fleet at a glance. Hosts by state (numbers and a bar), the
//! current revision's rollout, the hosts that went quiet (first: nothing
//! else about them can be trusted), the newest failure groups and drift
//! clusters, and what people asked of hosts lately. An empty fleet says
//! how to enroll the first host.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::json;

use super::{first_line, frame};
use crate::api::App;
use crate::store::Backend;
use crate::views;
use crate::web::auth::Operator;
use crate::web::queries;
use crate::web::render::{self, WebError};

/// How many of each list the overview shows (the pages behind show all).
const SHOWN: usize = 8;

pub async fn page<B: Backend>(
    State(app): State<Arc<App<B>>>,
    op: Operator,
) -> Result<Response, WebError> {
    let staleness = app.staleness();
    let now = app.now();
    let (rows, rollout, drift, recent) = tokio::try_join!(
        queries::state_rows(&app.fleet),
        app.fleet.rollout_summary(),
        app.fleet.drift_summary(now, SHOWN),
        crate::instructions::recent(&app.fleet, SHOWN as i64),
    )?;
    let mut by_state: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for r in &rows {
        *by_state
            .entry(views::host_state(r, &staleness))
            .or_insert(0) += 1;
    }
    let stale = views::stale(&rows, &staleness);
    let machines = rows.iter().filter(|r| r.kind == "host").count();
    let stacks = rows.len() - machines;
    let reported = rows.iter().filter(|r| r.last_report_at.is_some()).count();
    let states: Vec<_> = views::STATES
        .iter()
        .map(|s| {
            let count = by_state.get(*s).copied().unwrap_or(0);
            json!({
                "state": s,
                "count": count,
                // What the bar draws.
                "pair": [s, count],
            })
        })
        .collect();
    let groups: Vec<_> = rollout
        .groups
        .iter()
        .take(SHOWN)
        .map(|g| {
            json!({
                "resource": g.resource,
                "phase": g.phase,
                "validator": g.validator,
                "message": first_line(&g.message),
                "hosts": g.hosts.len(),
                "first_host": g.hosts.first(),
                "labels": g.labels,
                "signature": g.signature,
            })
        })
        .collect();
    let stale_list: Vec<_> = stale.hosts.iter().take(SHOWN).collect();
    render::page(
        "overview.html",
        frame(
            &app,
            &op,
            "overview",
            json!({
                "empty": rows.is_empty(),
                "silent": reported == 0,
                "enrolled": rows.len(),
                "machines": machines,
                "stacks": stacks,
                "total": rows.len(),
                "states": states,
                "rollout": {
                    "revision": rollout.revision,
                    "converged": rollout.converged,
                    "failed": rollout.failed,
                    "pending": rollout.pending,
                    "total": rollout.converged + rollout.failed + rollout.pending,
                    "groups": groups,
                    "group_count": rollout.groups.len(),
                },
                "stale": stale_list,
                "stale_count": stale.hosts.len(),
                "drift": {
                    "clusters": drift.clusters,
                    "count": drift.count,
                    "many": drift.many,
                    "single": drift.count - drift.many,
                    "hosts_drifted": drift.hosts_drifted,
                    "hosts_total": drift.hosts_total,
                },
                "recent": recent,
            }),
        ),
    )
}
