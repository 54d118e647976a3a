//! `POST /hosts/{name}/quarantine` and `/release`: a person's action on a
//! host, from its page (or a script with the admin token). Each records an
//! instruction with who asked, from which address, with which credential
//! and why ([`crate::instructions::request`]); the host carries it out when
//! the reply to its next report brings it, and confirms it in the report
//! after. Both need a reason: the audit log is only as good as its why.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use datum_fleet::InstructionAction;
use serde::Deserialize;

use super::auth::{Operator, read_form};
use super::render::WebError;
use crate::api::App;
use crate::store::Backend;

/// The longest reason recorded.
pub const REASON_CHARS: usize = 500;

#[derive(Debug, Deserialize)]
struct ActionForm {
    csrf: Option<String>,
    #[serde(default)]
    target: String,
    #[serde(default)]
    reason: String,
    /// A script may say who it is (a session is its operator).
    by: Option<String>,
}

/// `host`, or a resource id written `Kind[name]`.
pub fn valid_target(target: &str) -> bool {
    if target == datum_fleet::report::HOST_TARGET {
        return true;
    }
    let Some((kind, rest)) = target.split_once('[') else {
        return false;
    };
    kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && kind.chars().all(|c| c.is_ascii_alphanumeric())
        && rest.len() > 1
        && rest.ends_with(']')
        && !target.chars().any(char::is_control)
        && target.len() <= 512
}

async fn act<B: Backend>(
    app: &App<B>,
    op: &Operator,
    name: &str,
    action: InstructionAction,
    body: axum::body::Body,
) -> Result<Response, WebError> {
    let form: ActionForm = read_form(body).await?;
    op.check_csrf(form.csrf.as_deref())?;
    let Some(host) = app.fleet.host(name).await? else {
        return Err(WebError::NotFound(format!(
            "no host named `{name}` is enrolled"
        )));
    };
    if host.kind != "host" {
        return Err(WebError::BadRequest(format!(
            "`{name}` is a stack: only hosts carry out quarantines"
        )));
    }
    let target = form.target.trim();
    if !valid_target(target) {
        return Err(WebError::BadRequest(format!(
            "`{target}` is not a target: name a resource as Kind[name], or `host`"
        )));
    }
    let reason: String = form
        .reason
        .chars()
        .filter(|c| !c.is_control() || *c == '\n')
        .take(REASON_CHARS)
        .collect();
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(WebError::BadRequest(
            "say why: the reason is recorded with the instruction and shown on the host".to_owned(),
        ));
    }
    let key = crate::instructions::request(
        &app.fleet,
        name,
        action,
        target,
        reason,
        &op.requester(form.by.as_deref()),
        app.now(),
    )
    .await?;
    Ok(Redirect::to(&format!("/hosts/{name}?asked={key}#instructions")).into_response())
}

pub async fn quarantine<B: Backend>(
    State(app): State<Arc<App<B>>>,
    op: Operator,
    Path(name): Path<String>,
    body: axum::body::Body,
) -> Result<Response, WebError> {
    act(&app, &op, &name, InstructionAction::Quarantine, body).await
}

pub async fn release<B: Backend>(
    State(app): State<Arc<App<B>>>,
    op: Operator,
    Path(name): Path<String>,
    body: axum::body::Body,
) -> Result<Response, WebError> {
    act(&app, &op, &name, InstructionAction::Release, body).await
}

#[cfg(test)]
mod tests {
    #[test]
    fn targets_are_resources_or_the_host() {
        for ok in [
            "host",
            "File[motd]",
            "Tree[www]",
            "ValidationGroup[nginx]",
            "File[a b]",
        ] {
            assert!(super::valid_target(ok), "{ok}");
        }
        for bad in [
            "",
            "motd",
            "file[motd]",
            "File[]",
            "File[x",
            "Fi le[x]",
            "File[a\n]",
        ] {
            assert!(!super::valid_target(bad), "{bad:?}");
        }
    }
}
