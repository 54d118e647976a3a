//! `/drift`: open findings across the fleet, the same change on many hosts
//! (a package upgrade, a bad declaration: one line with a count) apart
//! from changes on one host (a person), each with when it was first seen,
//! how many consecutive checks saw it, and the policy its class has.
//! A page at a time (`page`, `per`: as the hosts table and `GET
//! /v1/drift` take them), in the view's order, so most hosts first.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::frame;
use crate::api::App;
use crate::store::Backend;
use crate::views::Paging;
use crate::web::auth::Operator;
use crate::web::queries;
use crate::web::render::{self, WebError};

#[derive(Debug, Default, Deserialize)]
struct Query {
    page: Option<usize>,
    per: Option<usize>,
}

impl Query {
    /// The address of page `page`, keeping `per`.
    fn link(&self, page: usize) -> String {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        if let Some(per) = self.per {
            pairs.push(("per", per.to_string()));
        }
        if page > 1 {
            pairs.push(("page", page.to_string()));
        }
        match serde_urlencoded::to_string(&pairs) {
            Ok(q) if !q.is_empty() => format!("/drift?{q}"),
            _ => "/drift".to_owned(),
        }
    }
}

pub async fn page<B: Backend>(
    State(app): State<Arc<App<B>>>,
    op: Operator,
    RawQuery(raw): RawQuery,
) -> Result<Response, WebError> {
    let q: Query = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
        .map_err(|e| WebError::BadRequest(format!("bad query string: {e}")))?;
    let (whole, checks, class_lists) = tokio::try_join!(
        app.fleet.drift_kept(app.now()),
        queries::cluster_checks(&app.fleet),
        queries::class_lists(&app.fleet),
    )?;
    let paging = Paging::of(whole.clusters.len(), q.page, q.per);
    let many_total = whole.clusters.iter().filter(|c| c.hosts > 1).count();
    let single_total = whole.clusters.len() - many_total;
    let view = whole.page(paging);
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
            "changed_by": c.changed_by,
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
                "many_total": many_total,
                "single_total": single_total,
                "total": whole.clusters.len(),
                "first": if view.clusters.is_empty() { 0 } else { paging.start + 1 },
                "last": paging.start + view.clusters.len(),
                "page": paging.page,
                "pages": paging.pages,
                "prev": (paging.page > 1).then(|| q.link(paging.page - 1)),
                "next": (paging.page < paging.pages).then(|| q.link(paging.page + 1)),
            }),
        ),
    )
}
