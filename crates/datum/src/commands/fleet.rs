//! `datum fleet --credentials admin.yaml VIEW`: the server's views, as
//! tables on a terminal (colour when it is one) or the server's JSON
//! (`--output json`, each document with its `format_version`).

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand};
use datum_fleet::{AdminCredentials, Client, Timeouts};
use datum_server::fleet::HistoryView;
use datum_server::views::{DriftView, HostsView, RolloutView, SamplingView, StaleView};

use datum_report::render::Answer;
use datum_report::style::Paint;

use crate::cli::GlobalArgs;
use crate::exit::ExitCode;

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// The admin credential (DIR/admin.yaml from `datum server init`).
    #[arg(long, env = "DATUM_FLEET_CREDENTIALS")]
    pub credentials: PathBuf,
    #[command(subcommand)]
    pub view: FleetView,
}

#[derive(Debug, Subcommand)]
pub enum FleetView {
    /// Every host and stack: state, last report, revision, counts.
    Hosts,
    /// Which hosts converged, failed or have not applied a revision yet.
    Rollout {
        /// The revision, or its start as the views show it cut short
        /// (`git:5954ab558278`) (default: the one applied most recently).
        #[arg(long)]
        revision: Option<String>,
    },
    /// Drift across hosts: the same change on many hosts vs a change on one.
    Drift,
    /// Hosts whose last report is older than their interval allows.
    Stale,
    /// The sampling plan, who deep-checked, and each class's detection bound.
    Sampling,
    /// One host's (or stack's) recent reports and daily history.
    History {
        name: String,
        /// How many reports (1 to 1000, what the server gives at most).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
}

pub fn run(global: &GlobalArgs, args: &FleetArgs) -> Result<ExitCode> {
    // Named in full in every message (docs/conventions.md: paths in
    // messages are absolute).
    let credentials = std::path::absolute(&args.credentials)
        .with_context(|| format!("cannot make {} absolute", args.credentials.display()))?;
    let bytes = datum_host::named::read(&credentials)
        .with_context(|| format!("cannot read the admin credential {}", credentials.display()))?;
    let creds = AdminCredentials::parse(&credentials, &String::from_utf8_lossy(&bytes))?;
    let client = Client::new(
        &creds.server,
        &creds.ca_pem,
        &creds.token,
        Timeouts::default(),
    )
    .with_context(|| format!("{}", credentials.display()))?
    // A server certificate the CA does not verify names the file.
    .ca_from(&credentials);
    let path = match &args.view {
        FleetView::Hosts => "/v1/hosts".to_owned(),
        FleetView::Rollout { revision: Some(r) } => {
            format!("/v1/rollout?revision={}", encode(r))
        }
        FleetView::Rollout { revision: None } => "/v1/rollout".to_owned(),
        FleetView::Drift => "/v1/drift".to_owned(),
        FleetView::Stale => "/v1/stale".to_owned(),
        FleetView::Sampling => "/v1/sampling".to_owned(),
        FleetView::History { name, limit } => {
            format!("/v1/hosts/{}/reports?limit={limit}", encode(name))
        }
    };
    let json = if matches!(args.view, FleetView::Drift) {
        drift_pages(|page| {
            let path = format!("/v1/drift?per={DRIFT_PER_PAGE}&page={page}");
            client
                .get_json(&path)
                .with_context(|| format!("{}{path}", creds.server))
        })?
    } else {
        client
            .get_json(&path)
            .with_context(|| format!("{}{path}", creds.server))?
    };
    crate::render::emit(
        &Shown {
            view: &args.view,
            json,
        },
        global,
    )?;
    Ok(ExitCode::Clean)
}

/// One of the server's views, as the server gave it.
struct Shown<'a> {
    view: &'a FleetView,
    json: serde_json::Value,
}

impl Answer for Shown<'_> {
    fn what(&self) -> &'static str {
        "datum fleet"
    }

    fn json_key(&self) -> &'static str {
        "view"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        Ok(self.json.clone())
    }

    /// A document the view's type does not read is an error (the server's
    /// JSON is printed as it came, read or not).
    fn human(&self, out: &mut dyn std::io::Write, paint: Paint) -> std::io::Result<()> {
        let text = human(self.view, self.json.clone(), paint.on).map_err(std::io::Error::other)?;
        write!(out, "{text}")
    }
}

/// Drift clusters asked for per page (the most the server gives).
const DRIFT_PER_PAGE: usize = 1000;

/// The whole drift document from its pages (`fetch(n)` answers page `n`):
/// the first page's document with every page's clusters, without the
/// paging fields (`page`, `pages`, `per`), so `--output json` prints one
/// document as before paging. A cluster a report moved onto the next page
/// between two requests is kept once. A server that predates paging says
/// no `pages`: its one answer holds every cluster.
fn drift_pages(
    mut fetch: impl FnMut(u64) -> Result<serde_json::Value>,
) -> Result<serde_json::Value> {
    let mut doc = fetch(1)?;
    let pages = |d: &serde_json::Value| d.get("pages").and_then(serde_json::Value::as_u64);
    let Some(mut last) = pages(&doc) else {
        return Ok(doc);
    };
    let key = |c: &serde_json::Value| {
        let text = |k: &str| {
            c.get(k)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        (text("signature"), text("observed"))
    };
    let mut clusters: Vec<serde_json::Value> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut take = |d: &mut serde_json::Value| {
        if let Some(serde_json::Value::Array(list)) = d.get_mut("clusters").map(std::mem::take) {
            for c in list {
                if seen.insert(key(&c)) {
                    clusters.push(c);
                }
            }
        }
    };
    take(&mut doc);
    let mut page = 1;
    while page < last {
        page += 1;
        let mut next = fetch(page)?;
        take(&mut next);
        // A report stored meanwhile may have added or removed a page.
        last = pages(&next).unwrap_or(page);
    }
    if let Some(map) = doc.as_object_mut() {
        for k in ["page", "pages", "per"] {
            map.remove(k);
        }
        map.insert("clusters".to_owned(), clusters.into());
    }
    Ok(doc)
}

/// The view as text for a person. What hosts reported (labels, revisions,
/// categories, messages) is theirs to word: its control characters are
/// shown escaped, never sent to the terminal, so a host cannot move the
/// cursor, retitle the window, write the clipboard of whoever reads it or
/// print a line of its own (line breaks stay in validator output only).
fn human(view: &FleetView, mut json: serde_json::Value, color: bool) -> Result<String> {
    defuse(&mut json);
    Ok(match view {
        FleetView::Hosts => {
            let unsaid = applied_unsaid(&json);
            hosts(&serde_json::from_value(json)?, &unsaid, color)
        }
        FleetView::Rollout { .. } => rollout(&serde_json::from_value(json)?, color),
        FleetView::Drift => drift(&serde_json::from_value(json)?, color),
        FleetView::Stale => stale(&serde_json::from_value(json)?),
        FleetView::Sampling => sampling(&serde_json::from_value(json)?),
        FleetView::History { .. } => history(&serde_json::from_value(json)?),
    })
}

/// Every string of `json` (keys too) with its control characters written
/// as escapes (`\u{1b}`), line breaks included: a label, revision, name or
/// category is one line of the view, and a line break in it would print a
/// row the host forged. A failure's `message` (validator output) keeps its
/// line breaks; the view indents its lines under the group.
fn defuse(json: &mut serde_json::Value) {
    defuse_keeping(json, &[]);
}

fn defuse_keeping(json: &mut serde_json::Value, keep: &[char]) {
    fn text(s: &str, keep: &[char]) -> Option<String> {
        match datum_core::text::visible(s, keep) {
            std::borrow::Cow::Owned(t) => Some(t),
            std::borrow::Cow::Borrowed(_) => None,
        }
    }
    match json {
        serde_json::Value::String(s) => {
            if let Some(t) = text(s, keep) {
                *s = t;
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| defuse_keeping(v, keep)),
        serde_json::Value::Object(map) => {
            let fields = std::mem::take(map);
            for (k, mut v) in fields {
                let keep: &[char] = if k == "message" { &['\n'] } else { &[] };
                defuse_keeping(&mut v, keep);
                map.insert(text(&k, &[]).unwrap_or(k), v);
            }
        }
        _ => {}
    }
}

/// Percent-encodes a query or path value.
fn encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b':') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn paint(color: bool, code: &str, text: &str) -> String {
    datum_report::style::Paint::new(color).wrap(code, text)
}

fn state_colour(state: &str) -> &'static str {
    match state {
        "converged" => "32",
        "drifted" => "33",
        "failed" | "stale" => "31",
        "quarantined" => "35",
        _ => "36",
    }
}

/// `3m`, `2h 5m`, `4d`: an age for a table.
fn age(secs: Option<i64>) -> String {
    let Some(s) = secs else {
        return "never".to_owned();
    };
    let s = s.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Rows of cells laid out in columns (the last column is not padded).
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(visible_len(c));
            }
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<String>, out: &mut String| {
        let n = cells.len();
        for (i, c) in cells.into_iter().enumerate() {
            if i + 1 == n {
                out.push_str(&c);
            } else {
                let pad = widths[i].saturating_sub(visible_len(&c));
                let _ = write!(out, "{c}{}  ", " ".repeat(pad));
            }
        }
        out.push('\n');
    };
    line(header.iter().map(|h| (*h).to_owned()).collect(), &mut out);
    for r in rows {
        line(r.clone(), &mut out);
    }
    out
}

/// Characters shown (colour codes left out).
fn visible_len(text: &str) -> usize {
    let mut n = 0;
    let mut escape = false;
    for c in text.chars() {
        if c == '\x1b' {
            escape = true;
        } else if escape {
            if c == 'm' {
                escape = false;
            }
        } else {
            n += 1;
        }
    }
    n
}

fn short_revision(r: Option<&str>) -> String {
    match r {
        None => "-".to_owned(),
        Some(r) => match r.split_once(':') {
            // Cut by characters: the revision is the host's word.
            Some((kind, id)) if id.chars().nth(12).is_some() => {
                format!("{kind}:{}", id.chars().take(12).collect::<String>())
            }
            _ => r.to_owned(),
        },
    }
}

fn labels_text(labels: &std::collections::BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// For each host of a hosts document, whether it leaves out
/// `last_applied_revision`: a server that predates the field does not say
/// which revision a host applied, which is not `null` (never applied).
fn applied_unsaid(json: &serde_json::Value) -> Vec<bool> {
    json.get("hosts")
        .and_then(serde_json::Value::as_array)
        .map(|hosts| {
            hosts
                .iter()
                .map(|h| h.get("last_applied_revision").is_none())
                .collect()
        })
        .unwrap_or_default()
}

/// The hosts table; `unsaid[i]`: the server did not say which revision
/// host `i` applied (APPLIED `?`, not `-`).
fn hosts(v: &HostsView, unsaid: &[bool], color: bool) -> String {
    let rows: Vec<Vec<String>> = v
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let applied = if unsaid.get(i).copied().unwrap_or(false) {
                "?".to_owned()
            } else {
                short_revision(h.last_applied_revision.as_deref())
            };
            vec![
                h.name.clone(),
                h.kind.clone(),
                paint(color, state_colour(&h.state), &h.state),
                age(h.age_s),
                short_revision(h.revision.as_deref()),
                applied,
                h.findings.to_string(),
                h.reports.to_string(),
                labels_text(&h.labels),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "NAME",
            "KIND",
            "STATE",
            "LAST REPORT",
            "REVISION",
            "APPLIED",
            "FINDINGS",
            "REPORTS",
            "LABELS",
        ],
        &rows,
    );
    let summary: Vec<String> = v
        .states
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(s, n)| format!("{n} {s}"))
        .collect();
    let _ = writeln!(out, "{} host(s): {}.", v.hosts.len(), summary.join(", "));
    out
}

fn group_labels(labels: &std::collections::BTreeMap<String, Vec<String>>) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = labels
        .iter()
        .map(|(k, vs)| format!("{k}={}", vs.join("|")))
        .collect();
    format!(" ({})", parts.join(", "))
}

fn names(hosts: &[String]) -> String {
    const SHOWN: usize = 8;
    let mut text = hosts
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if hosts.len() > SHOWN {
        let _ = write!(text, ", ... ({} more)", hosts.len() - SHOWN);
    }
    text
}

fn rollout(v: &RolloutView, color: bool) -> String {
    let mut out = String::new();
    let Some(rev) = &v.revision else {
        let _ = writeln!(out, "No host has applied a revision yet.");
        return out;
    };
    let _ = writeln!(
        out,
        "Revision {rev}: {} converged, {} failed, {} not applied yet (of {} host(s)).",
        v.converged.len(),
        v.failed.len(),
        v.pending.len(),
        v.hosts_total
    );
    if !v.converged.is_empty() {
        let _ = writeln!(
            out,
            "  {}  {} host(s){}: {}",
            paint(color, "32", "converged"),
            v.converged.len(),
            group_labels(&v.converged_labels),
            names(&v.converged)
        );
    }
    // The failed hosts once, counted as the header counts them; then what
    // failed, each failure with how many of those hosts it is on (a host
    // that failed two resources is in two groups, so the groups' counts
    // add up to more than the failed hosts: a group line that began
    // "failed  2 host(s)" read as two more failed hosts).
    if !v.failed.is_empty() {
        let _ = writeln!(
            out,
            "  {}  {} host(s): {}",
            paint(color, "31", "failed"),
            v.failed.len(),
            names(&v.failed)
        );
    }
    if !v.groups.is_empty() {
        let _ = writeln!(
            out,
            "    {} distinct failure(s) among them (a host may have several):",
            v.groups.len()
        );
    }
    for g in &v.groups {
        let validator = match (&g.validator, g.validator_versions.as_slice()) {
            (Some(name), []) => format!(" [{name}]"),
            (Some(name), versions) => format!(" [{name}: {}]", versions.join("; ")),
            (None, _) => String::new(),
        };
        let first_line = g.message.lines().next().unwrap_or_default();
        let _ = writeln!(
            out,
            "    - {}{validator} {}, on {} of the {} failed host(s){}: {first_line}",
            g.resource,
            g.phase,
            g.hosts.len(),
            v.failed.len(),
            group_labels(&g.labels),
        );
        for line in g.message.lines().skip(1).take(3) {
            let _ = writeln!(out, "        {line}");
        }
        let _ = writeln!(out, "        hosts: {}", names(&g.hosts));
    }
    if !v.pending.is_empty() {
        let shown: Vec<String> = v
            .pending
            .iter()
            .map(|p| format!("{} ({})", p.name, short_revision(p.revision.as_deref())))
            .collect();
        let _ = writeln!(
            out,
            "  {}  {} host(s): {}",
            paint(color, "36", "pending"),
            v.pending.len(),
            names(&shown)
        );
    }
    out
}

fn drift(v: &DriftView, color: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} of {} host(s) drifted; {} distinct change(s).",
        v.hosts_drifted,
        v.hosts_total,
        v.clusters.len()
    );
    if v.clusters.is_empty() {
        return out;
    }
    let rows: Vec<Vec<String>> = v
        .clusters
        .iter()
        .map(|c| {
            let spread = if c.hosts > 1 && c.observed.is_none() {
                // A sensitive resource's findings carry no observed hash:
                // its hosts share the change's place, not a value.
                paint(
                    color,
                    "33",
                    &format!("on {} hosts (sensitive: values not compared)", c.hosts),
                )
            } else if c.hosts > 1 {
                paint(color, "33", &format!("same on {} hosts", c.hosts))
            } else {
                paint(
                    color,
                    "36",
                    &format!("one host ({})", c.sample_hosts.join(",")),
                )
            };
            vec![
                c.hosts.to_string(),
                c.subject.clone(),
                c.category.clone(),
                c.paths.join(","),
                c.first_seen.clone(),
                spread,
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "HOSTS",
            "RESOURCE",
            "CATEGORY",
            "WHAT",
            "FIRST SEEN",
            "SPREAD",
        ],
        &rows,
    ));
    out
}

fn stale(v: &StaleView) -> String {
    let mut out = String::new();
    if v.hosts.is_empty() {
        let _ = writeln!(
            out,
            "No stale host: every host reported within its interval × {}.",
            v.factor
        );
        return out;
    }
    let rows: Vec<Vec<String>> = v
        .hosts
        .iter()
        .map(|h| {
            vec![
                h.name.clone(),
                if h.never_reported {
                    "never (enrolled)".to_owned()
                } else {
                    h.last_report.clone().unwrap_or_default()
                },
                age(Some(h.age_s)),
                // A host never heard from stated no interval: it was due
                // within first_report_within of its enrolment.
                if h.never_reported {
                    format!("none (first report due within {})", age(Some(h.allowed_s)))
                } else {
                    age(Some(h.expected_interval_s as i64))
                },
                age(Some(h.overdue_s)),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "NAME",
            "LAST REPORT",
            "SILENT FOR",
            "INTERVAL",
            "OVERDUE BY",
        ],
        &rows,
    ));
    let _ = writeln!(
        out,
        "{} stale host(s) (silent for longer than their own interval × {}).",
        v.hosts.len(),
        v.factor
    );
    out
}

fn sampling(v: &SamplingView) -> String {
    let mut out = String::new();
    if !v.enabled {
        let _ = writeln!(
            out,
            "Sampling is off: every host deep-checks on every pass."
        );
    } else {
        let _ = writeln!(
            out,
            "Sampling: fraction {} per round of {}; every host deep-checks once every {} round(s). Round {}: {} of {} host(s) deep-checked within the period.",
            v.fraction.unwrap_or(1.0),
            age(v.round_s.map(|s| s as i64)),
            v.period_rounds.unwrap_or(1),
            v.current_round.unwrap_or(0),
            v.deep_in_period,
            v.hosts_total
        );
        if !v.overdue.is_empty() {
            let _ = writeln!(out, "Overdue for a deep check: {}", names(&v.overdue));
        }
    }
    // Without sampling there are no sampled bounds (the server sends them
    // null, which under sampling means "not guaranteed"): only the one
    // bound every host's deep checks give.
    let rows: Vec<Vec<String>> = v
        .classes
        .iter()
        .map(|c| {
            let mut row = vec![
                c.class.clone(),
                age(Some(c.interval_s as i64)),
                c.hosts.to_string(),
                age(Some(c.bound_unsampled_s as i64)),
            ];
            if v.enabled {
                row.push(c.bound_guaranteed_s.map_or_else(
                    || "not guaranteed (interval > round)".to_owned(),
                    |s| age(Some(s as i64)),
                ));
                row.push(
                    c.bound_expected_s
                        .map_or_else(|| "-".to_owned(), |s| age(Some(s as i64))),
                );
            }
            row
        })
        .collect();
    if !rows.is_empty() {
        let header: &[&str] = if v.enabled {
            &[
                "CLASS",
                "INTERVAL",
                "HOSTS",
                "BOUND (ALL HOSTS)",
                "BOUND SAMPLED (GUARANTEED)",
                "EXPECTED",
            ]
        } else {
            &["CLASS", "INTERVAL", "HOSTS", "BOUND"]
        };
        out.push_str(&table(header, &rows));
    }
    out
}

fn history(v: &HistoryView) -> String {
    let mut out = String::new();
    // The server keeps at least one report of every host that sent one
    // (retention.reports_per_host >= 1): none is a host never heard from.
    if v.reports.is_empty() && v.daily.is_empty() {
        let _ = writeln!(
            out,
            "{}: no report yet (enrolled, never heard from)",
            v.name
        );
        return out;
    }
    let rows: Vec<Vec<String>> = v
        .reports
        .iter()
        .map(|r| {
            let counts: Vec<String> = r.counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
            let mut counts = counts.join(", ");
            // As the trusting apply's own summary says it.
            if let Some(n) = r.trusted_by_metadata {
                let _ = write!(counts, " ({n} by their metadata, not read)");
            }
            vec![
                r.seq.to_string(),
                r.kind.clone(),
                r.finished_at.clone(),
                short_revision(Some(&r.revision)),
                r.exit_code.to_string(),
                r.findings.to_string(),
                r.failures.to_string(),
                counts,
            ]
        })
        .collect();
    let _ = writeln!(out, "{}: {} recent report(s)", v.name, v.reports.len());
    out.push_str(&table(
        &[
            "SEQ", "KIND", "FINISHED", "REVISION", "EXIT", "FINDINGS", "FAILURES", "COUNTS",
        ],
        &rows,
    ));
    // What the passes warned of, newest first (escaped like every text a
    // host sent: `defuse`).
    for r in v.reports.iter().filter(|r| !r.warnings.is_empty()) {
        let _ = writeln!(out, "\nwarnings of report {} ({}):", r.seq, r.kind);
        for w in &r.warnings {
            let _ = writeln!(out, "  warning: {w}");
        }
    }
    if !v.daily.is_empty() {
        let rows: Vec<Vec<String>> = v
            .daily
            .iter()
            .take(14)
            .map(|d| {
                vec![
                    d.day.clone(),
                    d.reports.to_string(),
                    d.applies.to_string(),
                    d.failed.to_string(),
                    d.max_findings.to_string(),
                ]
            })
            .collect();
        out.push_str(&table(
            &["DAY", "REPORTS", "APPLIES", "FAILED", "MOST FINDINGS"],
            &rows,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{FleetView, defuse, drift_pages, human, short_revision};

    /// A host enrolled and never heard from has no report: its history
    /// printed the header of an empty table, and nothing said why.
    #[test]
    fn the_history_of_a_host_never_heard_from_says_so() {
        let json = serde_json::json!({
            "format_version": "1", "name": "web-05", "reports": [], "daily": []
        });
        let view = FleetView::History {
            name: "web-05".into(),
            limit: 20,
        };
        let text = human(&view, json, false).unwrap();
        assert_eq!(text, "web-05: no report yet (enrolled, never heard from)\n");
    }

    /// A host's words reach the terminal without their control characters:
    /// an escape sequence in a label or a revision (OSC 52 writes the
    /// reader's clipboard, others retitle the window or move the cursor)
    /// is shown escaped.
    #[test]
    fn what_a_host_reported_cannot_drive_the_terminal() {
        let json = serde_json::json!({
            "format_version": "1", "generated_at": "2026-12-06T06:00:00Z",
            "states": {"converged": 1},
            "hosts": [{
                "name": "web-1", "kind": "host", "state": "converged", "age_s": 3,
                "reports": 1, "findings": 0,
                "labels": {"role\u{1b}[2J": "web\u{1b}]52;c;cm0gLXJmIH4=\u{7}"},
                "last_report": "2026-12-06T06:00:00Z", "last_report_kind": "check",
                "revision": "git:\u{1b}]0;pwned\u{7}abc", "counts": {}, "resources": 1,
                "quarantined": 0, "trees": 0, "trees_differing": 0,
                "expected_interval_s": 600, "outbox_depth": 0, "datum_version": "0.1.0"
            }]
        });
        let text = human(&FleetView::Hosts, json, false).unwrap();
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains("role\\u{1b}[2J=web\\u{1b}]52;c;"), "{text}");
    }

    /// A sensitive resource's findings carry no observed hash, so its hosts
    /// form one cluster whatever each changed the value to: it was shown as
    /// "same on 2 hosts" for two hosts that wrote two different secrets.
    #[test]
    fn a_sensitive_cluster_is_not_said_to_be_the_same_change() {
        let cluster = |subject: &str, observed: serde_json::Value| {
            serde_json::json!({
                "subject": subject, "category": "changed_outside", "class": "normal",
                "paths": ["content"], "signature": "s", "observed": observed,
                "hosts": 2, "sample_hosts": ["db-01", "web-02"], "variants": 0,
                "spread": "many hosts", "first_seen": "2026-12-07T10:16:34Z",
                "last_seen": "2026-12-07T10:16:34Z", "changed_by": []
            })
        };
        let json = serde_json::json!({
            "format_version": "1", "generated_at": "2026-12-07T10:17:00Z",
            "hosts_total": 2, "hosts_drifted": 2,
            "clusters": [cluster("File[secret]", serde_json::Value::Null), cluster("File[app]", "24b2593f12e2627e".into())]
        });
        let text = human(&FleetView::Drift, json, false).unwrap();
        let line = |subject: &str| {
            text.lines()
                .find(|l| l.contains(subject))
                .unwrap_or_else(|| panic!("{subject} in {text}"))
                .to_owned()
        };
        assert!(
            line("File[secret]").contains("on 2 hosts (sensitive: values not compared)"),
            "{text}"
        );
        assert!(!line("File[secret]").contains("same on"), "{text}");
        assert!(line("File[app]").contains("same on 2 hosts"), "{text}");
    }

    /// REVISION is the last report's, a check's included: a host that only
    /// checked r2 showed r2, while the rollout lists it as not applied yet.
    /// APPLIED is its last apply's revision (`-` before one), as the host
    /// page's "Last applied" says.
    #[test]
    fn the_hosts_table_says_which_revision_was_applied() {
        let host = |name: &str, revision: &str, applied: serde_json::Value| {
            serde_json::json!({
                "name": name, "kind": "host", "state": "converged", "age_s": 3,
                "reports": 2, "findings": 0, "labels": {},
                "last_report": "2026-12-06T06:00:00Z", "last_report_kind": "check",
                "revision": revision, "last_applied_revision": applied,
                "counts": {}, "resources": 1, "quarantined": 0, "trees": 0,
                "trees_differing": 0, "expected_interval_s": 600, "outbox_depth": 0,
                "datum_version": "0.1.0"
            })
        };
        let json = serde_json::json!({
            "format_version": "1", "generated_at": "2026-12-06T06:00:00Z",
            "states": {"converged": 2},
            "hosts": [host("web-01", "stamp:r2", "stamp:r1".into()),
                      host("web-02", "stamp:r2", serde_json::Value::Null)]
        });
        let text = human(&FleetView::Hosts, json.clone(), false).unwrap();
        // The cell under a header word (the table pads its columns).
        let header = text.lines().next().unwrap();
        let cell = |host: &str, column: &str| -> String {
            let at = header.find(column).unwrap();
            let line = text.lines().find(|l| l.starts_with(host)).unwrap();
            line[at..].split_whitespace().next().unwrap().to_owned()
        };
        assert_eq!(cell("web-01", "REVISION"), "stamp:r2", "{text}");
        assert_eq!(cell("web-01", "APPLIED"), "stamp:r1", "{text}");
        assert_eq!(cell("web-02", "APPLIED"), "-", "{text}");

        // A server that predates the field does not say which revision a
        // host applied: not `-`, which says it never applied one.
        let mut old = json.clone();
        for h in old["hosts"].as_array_mut().unwrap() {
            h.as_object_mut().unwrap().remove("last_applied_revision");
        }
        let text = human(&FleetView::Hosts, old, false).unwrap();
        let header = text.lines().next().unwrap();
        let at = header.find("APPLIED").unwrap();
        for host in ["web-01", "web-02"] {
            let line = text.lines().find(|l| l.starts_with(host)).unwrap();
            let applied = line[at..].split_whitespace().next().unwrap();
            assert_eq!(applied, "?", "{text}");
        }
    }

    /// The server gives 1 to 1000 reports and took any other count as the
    /// nearest: `history web-01 --limit 0` listed one report, `--limit
    /// 5000` a thousand, neither saying so. Such a count is refused.
    #[test]
    fn a_history_limit_the_server_cannot_give_is_refused() {
        use clap::Parser as _;
        let parse = |limit: &str| {
            crate::cli::Cli::try_parse_from([
                "datum",
                "fleet",
                "--credentials",
                "admin.yaml",
                "history",
                "web-01",
                "--limit",
                limit,
            ])
        };
        for bad in ["0", "1001", "5000"] {
            let err = parse(bad)
                .err()
                .unwrap_or_else(|| panic!("--limit {bad} was taken"));
            assert!(err.to_string().contains("1..=1000"), "{bad}: {err}");
        }
        for good in ["1", "20", "1000"] {
            assert!(parse(good).is_ok(), "--limit {good}");
        }
    }

    /// A host enrolled and never heard from states no interval: the stale
    /// view gave it "0s", as if it were due every instant, where it was due
    /// within the server's first_report_within.
    #[test]
    fn a_host_never_heard_from_has_no_interval_of_zero() {
        let json = serde_json::json!({
            "format_version": "1", "generated_at": "2026-12-07T10:52:00Z", "factor": 3.0,
            "hosts": [
                {"name": "web-05", "kind": "host", "labels": {}, "last_report": null,
                 "age_s": 1980, "expected_interval_s": 0, "allowed_s": 60,
                 "overdue_s": 1920, "never_reported": true},
                {"name": "web-04", "kind": "host", "labels": {}, "last_report": "2026-12-07T10:16:34Z",
                 "age_s": 2160, "expected_interval_s": 20, "allowed_s": 60,
                 "overdue_s": 2100, "never_reported": false}
            ]
        });
        let text = human(&FleetView::Stale, json, false).unwrap();
        let line = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_default()
        };
        assert!(
            line("web-05").contains("none (first report due within 1m)"),
            "{text}"
        );
        assert!(!line("web-05").contains(" 0s "), "{text}");
        assert!(line("web-04").contains("20s"), "{text}");
    }

    /// A line break in a one-line field (a label, a category) would print a
    /// row the host forged: it is shown escaped; a failure's message keeps
    /// its lines, indented under its group.
    #[test]
    fn a_host_cannot_print_a_row_of_its_own() {
        let mut json = serde_json::json!({
            "labels": {"role": "web\nweb-9    converged"},
            "groups": [{"category": "normal\nfake", "message": "line 1\nline 2"}]
        });
        defuse(&mut json);
        assert_eq!(json["labels"]["role"], "web\\u{a}web-9    converged");
        assert_eq!(json["groups"][0]["category"], "normal\\u{a}fake");
        assert_eq!(json["groups"][0]["message"], "line 1\nline 2");
    }

    /// With sampling off every host deep-checks on every pass: the view says
    /// so and gives each class's one bound, with no sampled bounds (the
    /// server sends them as null, which under sampling means "not
    /// guaranteed"); with sampling on, both.
    #[test]
    fn sampling_off_shows_no_sampled_bounds() {
        let class = serde_json::json!({
            "class": "critical", "interval_s": 7200, "hosts": 3,
            "bound_unsampled_s": 7260, "bound_guaranteed_s": null, "bound_expected_s": null
        });
        let off = serde_json::json!({
            "format_version": "1", "enabled": false, "fraction": null, "round_s": null,
            "period_rounds": null, "current_round": null, "hosts_total": 3,
            "deep_in_period": 3, "overdue": [], "rounds": [], "classes": [class]
        });
        let text = human(&FleetView::Sampling, off, false).unwrap();
        assert!(text.starts_with("Sampling is off"), "{text}");
        assert!(
            text.contains("critical") && text.contains("2h 1m"),
            "{text}"
        );
        for absent in ["guaranteed", "SAMPLED", "EXPECTED"] {
            assert!(
                !text.contains(absent),
                "`{absent}` with sampling off:\n{text}"
            );
        }
        let on = serde_json::json!({
            "format_version": "1", "enabled": true, "fraction": 0.25, "round_s": 3600,
            "period_rounds": 4, "current_round": 9, "hosts_total": 3,
            "deep_in_period": 3, "overdue": [], "rounds": [], "classes": [class]
        });
        let text = human(&FleetView::Sampling, on, false).unwrap();
        assert!(
            text.contains("SAMPLED") && text.contains("not guaranteed (interval > round)"),
            "{text}"
        );
    }

    /// The revision is what a host reported: a multi-byte character at the
    /// cut is kept whole (a byte slice there made `datum fleet hosts` and
    /// `rollout` panic for the whole fleet).
    #[test]
    fn a_revision_is_cut_between_characters() {
        assert_eq!(
            short_revision(Some("git:8c1e3f4a5b6c7d8e")),
            "git:8c1e3f4a5b6c"
        );
        assert_eq!(short_revision(Some("stamp:ab")), "stamp:ab");
        assert_eq!(short_revision(None), "-");
        assert_eq!(
            short_revision(Some("git:aaaaaaaaaaaéé")),
            "git:aaaaaaaaaaaé"
        );
    }

    /// The server gives the drift clusters a page at a time: `datum fleet
    /// drift` follows every page and prints one document of them all (a
    /// cluster moved onto the next page between two requests once), and
    /// takes an older server's single answer as it is.
    #[test]
    fn the_drift_view_follows_every_page() {
        let cluster = |n: u32| {
            serde_json::json!({"signature": format!("s{n}"), "observed": "o", "subject": format!("File[f{n}]"),
                "category": "changed_outside", "class": "normal", "paths": [], "hosts": 1,
                "sample_hosts": ["web-1"], "variants": 0, "spread": "one host",
                "first_seen": "2026-01-01T00:00:00Z", "last_seen": "2026-01-01T00:00:00Z"})
        };
        let page = |n: u64, clusters: Vec<serde_json::Value>| {
            serde_json::json!({"format_version": "1", "generated_at": "2026-01-01T00:00:00Z",
                "hosts_total": 3, "hosts_drifted": 1, "clusters_total": 5, "page": n, "pages": 3,
                "per": 2, "clusters": clusters})
        };
        let mut asked = Vec::new();
        let doc = drift_pages(|n| {
            asked.push(n);
            Ok(match n {
                1 => page(1, vec![cluster(1), cluster(2)]),
                // s2 moved onto page 2 while it was asked for.
                2 => page(2, vec![cluster(2), cluster(3)]),
                _ => page(3, vec![cluster(4), cluster(5)]),
            })
        })
        .unwrap();
        assert_eq!(asked, [1, 2, 3]);
        let subjects: Vec<&str> = doc["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["subject"].as_str().unwrap())
            .collect();
        assert_eq!(
            subjects,
            ["File[f1]", "File[f2]", "File[f3]", "File[f4]", "File[f5]"]
        );
        assert!(
            doc.get("page").is_none() && doc.get("pages").is_none(),
            "{doc}"
        );
        assert_eq!(doc["clusters_total"], 5);
        let text = human(&FleetView::Drift, doc, false).unwrap();
        assert!(text.contains("5 distinct change(s)"), "{text}");

        // A server that predates paging: one answer, every cluster.
        let mut old = page(1, vec![cluster(1), cluster(2), cluster(3)]);
        for k in ["clusters_total", "page", "pages", "per"] {
            old.as_object_mut().unwrap().remove(k);
        }
        let mut asked = 0;
        let doc = drift_pages(|_| {
            asked += 1;
            Ok(old.clone())
        })
        .unwrap();
        assert_eq!((asked, doc), (1, old));
    }

    /// The rollout's failure groups: a host that failed two resources is
    /// in two groups, and each group's line began "failed  2 host(s)", so
    /// two failed hosts read as four. The failed hosts are now one line,
    /// counted as the header counts them, and each group says how many of
    /// them it is on.
    #[test]
    fn the_rollouts_failure_groups_are_not_read_as_more_failed_hosts() {
        let group = |resource: &str, message: &str| {
            serde_json::json!({"resource": resource, "phase": "apply", "validator": "nginx",
                "validator_versions": ["nginx version: nginx/1.26.0"], "exit_status": 1,
                "signature": "s", "message": message, "hosts": ["web-3", "web-4"],
                "labels": {"nginx_version": ["1.26"]}})
        };
        let view = serde_json::json!({
            "format_version": "1", "revision": "git:8c1e", "hosts_total": 5,
            "converged": ["web-1", "web-2"], "converged_labels": {"nginx_version": ["1.24"]},
            "failed": ["web-3", "web-4"],
            "pending": [{"name": "web-5", "revision": "git:7b0d"}],
            "groups": [
                group("ValidationGroup[nginx]", "validation failed (nginx, exit 1)\nnginx: [emerg] unknown directive \"http3\""),
                group("File[nginx-conf]", "not written: ValidationGroup[nginx] failed validation"),
            ],
        });
        let text = human(&FleetView::Rollout { revision: None }, view, false).unwrap();
        assert_eq!(
            text,
            "Revision git:8c1e: 2 converged, 2 failed, 1 not applied yet (of 5 host(s)).
  converged  2 host(s) (nginx_version=1.24): web-1, web-2
  failed  2 host(s): web-3, web-4
    2 distinct failure(s) among them (a host may have several):
    - ValidationGroup[nginx] [nginx: nginx version: nginx/1.26.0] apply, on 2 of the 2 failed host(s) (nginx_version=1.26): validation failed (nginx, exit 1)
        nginx: [emerg] unknown directive \"http3\"
        hosts: web-3, web-4
    - File[nginx-conf] [nginx: nginx version: nginx/1.26.0] apply, on 2 of the 2 failed host(s) (nginx_version=1.26): not written: ValidationGroup[nginx] failed validation
        hosts: web-3, web-4
  pending  1 host(s): web-5 (git:7b0d)
"
        );
    }
}
