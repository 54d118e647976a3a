//! `/stacks`: the OpenTofu/Terraform stacks driftwatch reports on, beside
//! the hosts: each with its state, its drift in driftwatch's four
//! categories (replaced by the next apply, deleted outside, changed
//! outside, ignored) and its pending changes, from its newest report.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::json;

use super::frame;
use crate::api::App;
use crate::store::Backend;
use crate::views;
use crate::web::auth::Operator;
use crate::web::queries;
use crate::web::render::{self, WebError};

/// driftwatch's categories, in the order it lists them.
pub const CATEGORIES: [(&str, &str); 4] = [
    ("replaced", "replaced by the next apply"),
    ("deleted_outside", "deleted outside"),
    ("changed_outside", "changed outside"),
    ("ignored", "ignored"),
];

pub async fn page<B: Backend>(
    State(app): State<Arc<App<B>>>,
    op: Operator,
) -> Result<Response, WebError> {
    let staleness = app.staleness();
    let rows = app.fleet.host_rows().await?;
    let mut stacks = Vec::new();
    for r in rows.iter().filter(|r| r.kind == "stack") {
        let newest = queries::reports(&app.fleet, &r.name, 1).await?;
        let report = newest.first().map(|s| &s.report);
        stacks.push(json!({
            "name": r.name,
            "state": views::host_state(r, &staleness),
            "labels": r.labels,
            "last_report_at": r.last_report_at,
            "revision": r.revision,
            "reports": r.reports_held,
            "categories": CATEGORIES.iter().map(|(id, phrase)| json!({
                "id": id,
                "phrase": phrase,
                "count": r.counts.get(*id).copied().unwrap_or(0),
            })).collect::<Vec<_>>(),
            "pending_count": r.counts.get("pending").copied().unwrap_or(0),
            "pending": report.map(|x| x.pending.clone()).unwrap_or_default(),
            "findings": report.map(|x| x.findings.clone()).unwrap_or_default(),
        }));
    }
    render::page(
        "stacks.html",
        frame(&app, &op, "stacks", json!({ "stacks": stacks })),
    )
}
