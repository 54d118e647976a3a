//! `/hosts`: every host and stack, filtered by label (`labels=role=web
//! nginx_version=1.26`, also `key!=value` and `key` alone), state, kind,
//! revision and name, sorted by any column, a page at a time. Every filter
//! is in the URL, so a link pasted into a ticket shows the same table.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::{frame, severity};
use crate::api::App;
use crate::store::Backend;
use crate::views::{self, HostRow};
use crate::web::auth::Operator;
use crate::web::render::{self, WebError};

/// Rows per page unless `per` says otherwise (at most [`MAX_PER_PAGE`]),
/// as every paged list has them.
pub use crate::views::{MAX_PER_PAGE, PER_PAGE};

#[derive(Debug, Default, Clone, Deserialize)]
pub struct Query {
    pub labels: Option<String>,
    pub state: Option<String>,
    pub kind: Option<String>,
    pub q: Option<String>,
    pub revision: Option<String>,
    pub sort: Option<String>,
    pub dir: Option<String>,
    pub page: Option<usize>,
    pub per: Option<usize>,
}

impl Query {
    /// The parameters that are set, in a fixed order.
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let mut push = |k: &'static str, v: &Option<String>| {
            if let Some(v) = v.as_ref().map(|v| v.trim()).filter(|v| !v.is_empty()) {
                out.push((k, v.to_owned()));
            }
        };
        push("labels", &self.labels);
        push("state", &self.state);
        push("kind", &self.kind);
        push("q", &self.q);
        push("revision", &self.revision);
        push("sort", &self.sort);
        push("dir", &self.dir);
        push("per", &self.per.map(|p| p.to_string()));
        out
    }

    /// This page's address with `changes` applied (`None` removes).
    fn link(&self, changes: &[(&str, Option<String>)]) -> String {
        let mut pairs = self.pairs();
        for (k, v) in changes {
            pairs.retain(|(key, _)| key != k);
            if let Some(v) = v {
                pairs.push((k_static(k), v.clone()));
            }
        }
        let order = [
            "labels", "state", "kind", "q", "revision", "sort", "dir", "per", "page",
        ];
        pairs.sort_by_key(|(k, _)| order.iter().position(|o| o == k).unwrap_or(order.len()));
        match serde_urlencoded::to_string(&pairs) {
            Ok(q) if !q.is_empty() => format!("/hosts?{q}"),
            _ => "/hosts".to_owned(),
        }
    }
}

fn k_static(k: &str) -> &'static str {
    match k {
        "labels" => "labels",
        "state" => "state",
        "kind" => "kind",
        "q" => "q",
        "revision" => "revision",
        "sort" => "sort",
        "dir" => "dir",
        "per" => "per",
        _ => "page",
    }
}

/// One term of a label filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    Is(String, String),
    IsNot(String, String),
    Has(String),
}

impl Term {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Term::Is(k, v) => labels.get(k) == Some(v),
            Term::IsNot(k, v) => labels.get(k) != Some(v),
            Term::Has(k) => labels.contains_key(k),
        }
    }
}

/// `role=web nginx_version!=1.26 canary` (spaces or commas between terms).
pub fn parse_labels(text: &str) -> Result<Vec<Term>, String> {
    text.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
        .map(|t| {
            let term = if let Some((k, v)) = t.split_once("!=") {
                Term::IsNot(k.to_owned(), v.to_owned())
            } else if let Some((k, v)) = t.split_once('=') {
                Term::Is(k.to_owned(), v.to_owned())
            } else {
                Term::Has(t.to_owned())
            };
            match &term {
                Term::Is(k, _) | Term::IsNot(k, _) | Term::Has(k) if k.is_empty() => Err(format!(
                    "`{t}` is not a label filter: write key=value, key!=value or key"
                )),
                _ => Ok(term),
            }
        })
        .collect()
}

/// What one row of the table shows.
#[derive(Debug, Clone, serde::Serialize)]
struct Row<'a> {
    name: &'a str,
    kind: &'a str,
    state: &'static str,
    labels: &'a BTreeMap<String, String>,
    last_report_at: Option<i64>,
    expected_interval_s: u64,
    revision: Option<&'a str>,
    findings: u64,
    quarantined: u64,
    trees_differing: u64,
    reports: u64,
}

pub async fn page<B: Backend>(
    State(app): State<Arc<App<B>>>,
    op: Operator,
    RawQuery(raw): RawQuery,
) -> Result<Response, WebError> {
    let q: Query = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
        .map_err(|e| WebError::BadRequest(format!("bad query string: {e}")))?;
    let staleness = app.staleness();
    let rows = crate::web::queries::list_rows(&app.fleet).await?;
    let (mut error, terms) = match parse_labels(q.labels.as_deref().unwrap_or("")) {
        Ok(t) => (None, t),
        Err(e) => (Some(e), Vec::new()),
    };
    let states_wanted: Vec<&str> = q
        .state
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(bad) = states_wanted.iter().find(|s| !views::STATES.contains(s)) {
        error = Some(format!(
            "`{bad}` is not a state (one of {})",
            views::STATES.join(", ")
        ));
    }
    let needle = q.q.as_deref().unwrap_or("").trim().to_lowercase();
    let kind = q.kind.as_deref().filter(|k| !k.is_empty());
    let revision = q.revision.as_deref().filter(|r| !r.is_empty());
    let all: Vec<(&HostRow, &'static str)> = rows
        .iter()
        .map(|r| (r, views::host_state(r, &staleness)))
        .collect();
    // The states of the hosts the other filters let through (the chips'
    // counts), then the state filter itself.
    let mut shown: Vec<&(&HostRow, &'static str)> = all
        .iter()
        .filter(|(r, _)| terms.iter().all(|t| t.matches(&r.labels)))
        .filter(|(r, _)| kind.is_none_or(|k| r.kind == k))
        .filter(|(r, _)| needle.is_empty() || r.name.to_lowercase().contains(&needle))
        .filter(|(r, _)| revision.is_none_or(|v| r.revision.as_deref() == Some(v)))
        .collect();
    let mut state_counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, s) in &shown {
        *state_counts.entry(s).or_insert(0) += 1;
    }
    shown.retain(|(_, s)| states_wanted.is_empty() || states_wanted.contains(s));

    let sort = q.sort.as_deref().unwrap_or("state");
    let descending = q.dir.as_deref() == Some("desc");
    shown.sort_by(|(a, sa), (b, sb)| {
        let by = match sort {
            "name" => a.name.cmp(&b.name),
            "age" => b
                .last_report_at
                .unwrap_or(i64::MIN)
                .cmp(&a.last_report_at.unwrap_or(i64::MIN)),
            "revision" => a.revision.cmp(&b.revision),
            "findings" => b.open_findings.cmp(&a.open_findings),
            "reports" => b.reports_held.cmp(&a.reports_held),
            _ => severity(sa).cmp(&severity(sb)),
        };
        let by = if descending { by.reverse() } else { by };
        by.then_with(|| a.name.cmp(&b.name))
    });

    let views::Paging {
        page,
        pages,
        per,
        start,
    } = views::Paging::of(shown.len(), q.page, q.per);
    let table: Vec<Row<'_>> = shown
        .iter()
        .skip(start)
        .take(per)
        .map(|(r, s)| Row {
            name: &r.name,
            kind: &r.kind,
            state: s,
            labels: &r.labels,
            last_report_at: r.last_report_at,
            expected_interval_s: r.expected_interval_s,
            revision: r.revision.as_deref(),
            findings: r.open_findings,
            quarantined: r.quarantined,
            trees_differing: r.trees_differing,
            reports: r.reports_held,
        })
        .collect();

    // Label values among the hosts shown, most common first: one click
    // narrows the table to them.
    let mut facets: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for (r, _) in &shown {
        for (k, v) in &r.labels {
            *facets.entry(k).or_default().entry(v).or_insert(0) += 1;
        }
    }
    let current = q.labels.clone().unwrap_or_default();
    let mut facets: Vec<_> = facets
        .into_iter()
        .map(|(k, values)| {
            let mut values: Vec<_> = values.into_iter().collect();
            values.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            let covered: usize = values.iter().map(|v| v.1).sum();
            let values: Vec<_> = values
                .into_iter()
                .take(8)
                .map(|(v, n)| {
                    let term = format!("{k}={v}");
                    let active = terms.contains(&Term::Is(k.to_owned(), v.to_owned()));
                    let labels = if active {
                        current
                            .split(|c: char| c.is_whitespace() || c == ',')
                            .filter(|t| !t.is_empty() && *t != term)
                            .collect::<Vec<_>>()
                            .join(" ")
                    } else {
                        format!("{current} {term}").trim().to_owned()
                    };
                    json!({
                        "value": v,
                        "count": n,
                        "active": active,
                        "link": q.link(&[("labels", Some(labels).filter(|l| !l.is_empty())), ("page", None)]),
                    })
                })
                .collect();
            (covered, k, values)
        })
        .collect();
    facets.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let facets: Vec<_> = facets
        .into_iter()
        .take(6)
        .map(|(_, k, values)| json!({"key": k, "values": values}))
        .collect();

    let column = |key: &str, label: &str| {
        let active = sort == key;
        let dir = if active && !descending { "desc" } else { "asc" };
        // Counts are listed most first (`dir=asc`, the first click): the
        // numbers then descend, and the header says so (aria-sort, ▼).
        let most_first = matches!(key, "findings" | "reports");
        json!({
            "key": key,
            "label": label,
            "active": active,
            "descending": active && descending != most_first,
            "link": q.link(&[("sort", Some(key.to_owned())), ("dir", Some(dir.to_owned())), ("page", None)]),
        })
    };
    let state_chips: Vec<_> = views::STATES
        .iter()
        .map(|s| {
            let active = states_wanted.contains(s);
            json!({
                "state": s,
                "count": state_counts.get(s).copied().unwrap_or(0),
                "active": active,
                "link": q.link(&[("state", (!active).then(|| (*s).to_owned())), ("page", None)]),
            })
        })
        .collect();
    let page_link = |p: usize| q.link(&[("page", (p > 1).then(|| p.to_string()))]);
    render::page(
        "hosts.html",
        frame(
            &app,
            &op,
            "hosts",
            json!({
                "q": {
                    "labels": q.labels,
                    "state": q.state,
                    "kind": q.kind,
                    "q": q.q,
                    "revision": q.revision,
                    "sort": q.sort,
                    "dir": q.dir,
                    "per": q.per,
                },
                "error": error,
                "rows": table,
                "matching": shown.len(),
                "total": rows.len(),
                "first": if shown.is_empty() { 0 } else { start + 1 },
                "last": start + table.len(),
                "page": page,
                "pages": pages,
                "prev": (page > 1).then(|| page_link(page - 1)),
                "next": (page < pages).then(|| page_link(page + 1)),
                "columns": [
                    column("name", "Host"),
                    column("state", "State"),
                    column("age", "Last report"),
                    column("revision", "Revision"),
                    column("findings", "Findings"),
                    column("reports", "Reports"),
                ],
                "facets": facets,
                "states": state_chips,
                "clear": (!q.pairs().is_empty()).then_some("/hosts"),
            }),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_filters_read_as_written() {
        assert_eq!(
            parse_labels("role=web, nginx_version!=1.26 canary").unwrap(),
            vec![
                Term::Is("role".into(), "web".into()),
                Term::IsNot("nginx_version".into(), "1.26".into()),
                Term::Has("canary".into()),
            ]
        );
        assert!(parse_labels("=web").is_err());
        let labels = BTreeMap::from([("role".to_owned(), "web".to_owned())]);
        assert!(Term::Is("role".into(), "web".into()).matches(&labels));
        assert!(!Term::Is("role".into(), "db".into()).matches(&labels));
        assert!(Term::IsNot("role".into(), "db".into()).matches(&labels));
        assert!(!Term::Has("dc".into()).matches(&labels));
    }

    #[test]
    fn links_keep_every_filter_and_change_one() {
        let q = Query {
            labels: Some("role=web".into()),
            state: Some("failed".into()),
            page: Some(3),
            ..Query::default()
        };
        assert_eq!(
            q.link(&[("sort", Some("age".into()))]),
            "/hosts?labels=role%3Dweb&state=failed&sort=age"
        );
        assert_eq!(q.link(&[("state", None)]), "/hosts?labels=role%3Dweb");
        assert_eq!(Query::default().link(&[]), "/hosts");
    }
}
