//! `/rollout?revision=R`: one revision across the fleet (default: the one
//! applied most recently). Converged, failed and not-yet-applied hosts as a
//! bar and as lists; failures grouped by resource, validator and message
//! signature, each group with the label values that separate its hosts
//! (`nginx_version=1.26`); every host of a group links to
//! `/rollout/failure`, the validator's captured output on that host.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::frame;
use crate::api::App;
use crate::store::Backend;
use crate::web::auth::Operator;
use crate::web::queries;
use crate::web::render::{self, WebError};

/// Hosts listed per group or state before "and N more".
const LISTED: usize = 60;

#[derive(Debug, Default, Deserialize)]
struct Query {
    revision: Option<String>,
}

pub async fn page<B: Backend>(
    State(app): State<Arc<App<B>>>,
    op: Operator,
    RawQuery(raw): RawQuery,
) -> Result<Response, WebError> {
    let q: Query = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
        .map_err(|e| WebError::BadRequest(format!("bad query string: {e}")))?;
    let wanted = match q.revision.filter(|r| !r.is_empty()) {
        Some(r) => Some(
            app.fleet
                .revision_named(&r)
                .await?
                .pick(&r)
                .map_err(WebError::BadRequest)?,
        ),
        None => None,
    };
    let (view, revisions) = tokio::try_join!(
        app.fleet.rollout(wanted.as_deref()),
        queries::revisions(&app.fleet, 15),
    )?;
    let groups: Vec<_> = view
        .groups
        .iter()
        .map(|g| {
            json!({
                "resource": g.resource,
                "phase": g.phase,
                "validator": g.validator,
                "validator_versions": g.validator_versions,
                "exit_status": g.exit_status,
                "signature": g.signature,
                "message": g.message,
                "headline": super::first_line(&g.message),
                "labels": g.labels,
                "count": g.hosts.len(),
                "hosts": g.hosts.iter().take(LISTED).collect::<Vec<_>>(),
                "more": g.hosts.len().saturating_sub(LISTED),
            })
        })
        .collect();
    let pending = view.pending.len();
    render::page(
        "rollout.html",
        frame(
            &app,
            &op,
            "rollout",
            json!({
                "revision": view.revision,
                "revisions": revisions,
                "hosts_total": view.hosts_total,
                "converged": view.converged.len(),
                "converged_hosts": view.converged.iter().take(LISTED).collect::<Vec<_>>(),
                "converged_more": view.converged.len().saturating_sub(LISTED),
                "converged_labels": view.converged_labels,
                "failed": view.failed.len(),
                "pending": pending,
                "pending_hosts": view.pending.iter().take(LISTED).collect::<Vec<_>>(),
                "pending_more": pending.saturating_sub(LISTED),
                "total": view.converged.len() + view.failed.len() + pending,
                "groups": groups,
            }),
        ),
    )
}

#[derive(Debug, Default, Deserialize)]
struct FailureQuery {
    revision: String,
    host: String,
    resource: String,
}

/// `/rollout/failure?revision=R&host=H&resource=X`: what the validator
/// said on that host (`R` as the rollout takes it: whole or cut short).
pub async fn failure<B: Backend>(
    State(app): State<Arc<App<B>>>,
    op: Operator,
    RawQuery(raw): RawQuery,
) -> Result<Response, WebError> {
    let q: FailureQuery = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
        .map_err(|e| WebError::BadRequest(format!("bad query string: {e}")))?;
    // The revision as the views show it, cut short, names the one it
    // begins, as for the rollout itself.
    let revision = app
        .fleet
        .revision_named(&q.revision)
        .await?
        .pick(&q.revision)
        .map_err(WebError::BadRequest)?;
    let Some(f) = queries::failure(&app.fleet, &q.host, &revision, &q.resource).await? else {
        return Err(WebError::NotFound(format!(
            "{} did not fail {} in revision {revision}",
            q.host, q.resource
        )));
    };
    let host = app.fleet.host(&q.host).await?;
    render::page(
        "failure.html",
        frame(
            &app,
            &op,
            "rollout",
            json!({
                "f": f,
                "labels": host.map(|h| h.labels),
            }),
        ),
    )
}
