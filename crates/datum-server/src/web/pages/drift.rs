//! `/drift`: open findings across the fleet, the same change on many hosts
//! (a package upgrade, a bad declaration: one line with a count) apart
//! from changes on one host (a person), each with when it was first seen,
//! how many consecutive checks saw it, and the policy its class has.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::json;

use super::frame;
use crate::api::App;
use crate::store::Backend;
use crate::web::auth::Operator;
use crate::web::queries;
use crate::web::render::{self, WebError};

pub async fn page<B: Backend>(
    State(app): State<Arc<App<B>>>,
    op: Operator,
) -> Result<Response, WebError> {
    let (view, checks, class_lists) = tokio::try_join!(
        app.fleet.drift(app.now()),
        queries::cluster_checks(&app.fleet),
        queries::class_lists(&app.fleet),
    )?;
    // The policies hosts state for each class (normally one).
    let mut policies: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for classes in &class_lists {
        for c in classes {
            if let Some(p) = &c.policy {
                policies.entry(c.class.as_str()).or_default().insert(p);
            }
        }
    }
    let cluster = |c: &crate::views::DriftCluster| {
        json!({
            "subject": c.subject,
            "category": c.category,
            "class": c.class,
            "policy": policies.get(c.class.as_str()).map(|p| p.iter().copied().collect::<Vec<_>>().join(", ")),
            "paths": c.paths,
            "signature": c.signature,
            "observed": c.observed,
            "hosts": c.hosts,
            "sample_hosts": c.sample_hosts,
            "more": c.hosts.saturating_sub(c.sample_hosts.len() as u64),
            "variants": c.variants,
            "first_seen": c.first_seen,
            "last_seen": c.last_seen,
            "checks": checks.get(&(c.signature.clone(), c.observed.clone())).copied(),
        })
    };
    let many: Vec<_> = view
        .clusters
        .iter()
        .filter(|c| c.hosts > 1)
        .map(cluster)
        .collect();
    let single: Vec<_> = view
        .clusters
        .iter()
        .filter(|c| c.hosts <= 1)
        .map(cluster)
        .collect();
    render::page(
        "drift.html",
        frame(
            &app,
            &op,
            "drift",
            json!({
                "hosts_total": view.hosts_total,
                "hosts_drifted": view.hosts_drifted,
                "many": many,
                "single": single,
            }),
        ),
    )
}
