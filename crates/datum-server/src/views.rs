//! What the fleet shows: the views behind `datum fleet hosts | rollout |
//! drift | stale | sampling`, computed from rows without touching a
//! database, so they are tested as plain functions and are the same
//! whichever store the rows came from.
//!
//! The rules, stated once:
//! - **state** of a host: `stale` when its last report is older than its
//!   own expected interval × the server's factor (or it never reported
//!   within `first_report_within` of enrolling), else `quarantined` when
//!   anything on it is quarantined, `failed` when its last apply had
//!   failures or its last check could not inspect something, `drifted`
//!   when findings are open or a Tree's observed fingerprint differs from
//!   the declared one, `converged` otherwise; `new` while an enrolled host
//!   has not reported yet.
//! - **rollout** of a revision: hosts whose last apply of it converged,
//!   failed, or that have not applied it; failures grouped by resource,
//!   validator and value-free message signature, each group with the label
//!   values that separate its hosts from every other host that applied the
//!   revision (`nginx_version=1.26`).
//! - **drift** clusters: open findings grouped by value-free signature and
//!   observed hash, so one change on many hosts is one line with a count,
//!   and a change on one host stands alone.
//! - **sampling**: the plan, which hosts deep-checked in the current period,
//!   who is overdue, and per class the detection bound under sampling.
//!
//! Owns: the row and view types and their computation. Must not: run SQL or
//! know about HTTP.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

/// The version of every view document: the string "1", as in every JSON
/// document `datum` and `driftwatch` print (one convention for the CLI and
/// the HTTP API; the host-to-server report keeps its own integer version).
pub const VIEW_FORMAT_VERSION: &str = "1";

/// One `hosts` row, as stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostRow {
    pub name: String,
    pub kind: String,
    pub enrolled_at: i64,
    pub labels: BTreeMap<String, String>,
    pub last_report_at: Option<i64>,
    pub last_report_kind: Option<String>,
    pub revision: Option<String>,
    pub datum_version: Option<String>,
    pub counts: BTreeMap<String, u64>,
    pub resources: u64,
    pub open_findings: u64,
    pub quarantined: u64,
    pub last_apply_at: Option<i64>,
    pub last_apply_revision: Option<String>,
    pub last_apply_failed: bool,
    pub check_errors: bool,
    pub expected_interval_s: u64,
    pub outbox_depth: u64,
    pub outbox_dropped: u64,
    pub classes: Vec<datum_fleet::ClassBound>,
    pub trees: u64,
    pub trees_differing: u64,
    pub reports_held: u64,
    pub last_deep_round: Option<u64>,
}

/// How staleness is judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Staleness {
    pub now: i64,
    pub factor: f64,
    /// Seconds an enrolled host may take to send its first report.
    pub first_report_within: i64,
}

impl Staleness {
    /// Seconds a host may go without reporting.
    pub fn allowed(&self, row: &HostRow) -> i64 {
        match row.last_report_at {
            None => self.first_report_within,
            Some(_) if row.expected_interval_s == 0 => self.first_report_within,
            Some(_) => (row.expected_interval_s as f64 * self.factor).ceil() as i64,
        }
    }

    /// How many seconds past its allowance the host is (`None`: on time).
    pub fn overdue(&self, row: &HostRow) -> Option<i64> {
        let since = row.last_report_at.unwrap_or(row.enrolled_at);
        let late = self.now - since - self.allowed(row);
        (late > 0).then_some(late)
    }
}

/// The state word of a host (see the module header).
pub fn host_state(row: &HostRow, staleness: &Staleness) -> &'static str {
    if staleness.overdue(row).is_some() {
        "stale"
    } else if row.last_report_at.is_none() {
        "new"
    } else if row.quarantined > 0 {
        "quarantined"
    } else if row.last_apply_failed || row.check_errors {
        "failed"
    } else if row.open_findings > 0 || row.trees_differing > 0 {
        "drifted"
    } else {
        "converged"
    }
}

/// Every state word, in the order a person wants to see them.
pub const STATES: [&str; 6] = [
    "stale",
    "failed",
    "quarantined",
    "drifted",
    "new",
    "converged",
];

/// RFC 3339 (UTC, seconds) of a Unix time.
pub fn rfc3339(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// `GET /v1/hosts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostsView {
    pub format_version: String,
    pub generated_at: String,
    /// Hosts per state.
    pub states: BTreeMap<String, u64>,
    pub hosts: Vec<HostView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostView {
    pub name: String,
    /// `host` or `stack`.
    pub kind: String,
    pub labels: BTreeMap<String, String>,
    pub state: String,
    /// RFC 3339 of the last report, `null` before the first.
    pub last_report: Option<String>,
    /// Seconds since the last report.
    pub age_s: Option<i64>,
    pub last_report_kind: Option<String>,
    /// The revision of its last report, a check's included.
    pub revision: Option<String>,
    /// The revision of its last apply (`null` before one, and from a
    /// server that predates the field): a host that only checked a newer
    /// revision has not applied it (the rollout lists it so).
    #[serde(default)]
    pub last_applied_revision: Option<String>,
    /// Reports the server holds for this host.
    pub reports: u64,
    pub counts: BTreeMap<String, u64>,
    pub resources: u64,
    pub findings: u64,
    pub quarantined: u64,
    pub trees: u64,
    pub trees_differing: u64,
    pub expected_interval_s: u64,
    pub outbox_depth: u64,
    pub datum_version: Option<String>,
}

/// The hosts view of `rows` at `staleness.now`, sorted by name.
pub fn hosts(rows: &[HostRow], staleness: &Staleness) -> HostsView {
    let mut states: BTreeMap<String, u64> = STATES.iter().map(|s| ((*s).to_owned(), 0)).collect();
    let mut rows: Vec<&HostRow> = rows.iter().collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    let hosts: Vec<HostView> = rows
        .into_iter()
        .map(|r| {
            let state = host_state(r, staleness);
            *states.entry(state.to_owned()).or_insert(0) += 1;
            HostView {
                name: r.name.clone(),
                kind: r.kind.clone(),
                labels: r.labels.clone(),
                state: state.to_owned(),
                last_report: r.last_report_at.map(rfc3339),
                age_s: r.last_report_at.map(|t| (staleness.now - t).max(0)),
                last_report_kind: r.last_report_kind.clone(),
                revision: r.revision.clone(),
                last_applied_revision: r.last_apply_revision.clone(),
                reports: r.reports_held,
                counts: r.counts.clone(),
                resources: r.resources,
                findings: r.open_findings,
                quarantined: r.quarantined,
                trees: r.trees,
                trees_differing: r.trees_differing,
                expected_interval_s: r.expected_interval_s,
                outbox_depth: r.outbox_depth,
                datum_version: r.datum_version.clone(),
            }
        })
        .collect();
    HostsView {
        format_version: VIEW_FORMAT_VERSION.to_owned(),
        generated_at: rfc3339(staleness.now),
        states,
        hosts,
    }
}

/// What of a host's view only its reports change: rendered when a report
/// is stored (the members of a JSON object, without the braces) and kept
/// with the host, so listing the fleet decodes nothing.
#[derive(Debug, Serialize)]
pub struct HostPicture<'a> {
    pub labels: &'a BTreeMap<String, String>,
    pub last_report: Option<String>,
    pub last_report_kind: Option<&'a str>,
    pub revision: Option<&'a str>,
    pub counts: &'a BTreeMap<String, u64>,
    pub resources: u64,
    pub quarantined: u64,
    pub trees: u64,
    pub trees_differing: u64,
    pub expected_interval_s: u64,
    pub outbox_depth: u64,
    pub datum_version: Option<&'a str>,
}

impl<'a> HostPicture<'a> {
    /// The picture of a stored row.
    pub fn of_row(r: &'a HostRow) -> Self {
        HostPicture {
            labels: &r.labels,
            last_report: r.last_report_at.map(rfc3339),
            last_report_kind: r.last_report_kind.as_deref(),
            revision: r.revision.as_deref(),
            counts: &r.counts,
            resources: r.resources,
            quarantined: r.quarantined,
            trees: r.trees,
            trees_differing: r.trees_differing,
            expected_interval_s: r.expected_interval_s,
            outbox_depth: r.outbox_depth,
            datum_version: r.datum_version.as_deref(),
        }
    }

    /// The JSON object's members, without its braces.
    pub fn members(&self) -> String {
        let whole = serde_json::to_string(self).unwrap_or_default();
        whole
            .strip_prefix('{')
            .and_then(|m| m.strip_suffix('}'))
            .unwrap_or_default()
            .to_owned()
    }
}

/// One host as the hosts document is written from: the facts its state and
/// age follow from (the rest of `row` may be empty), and its picture's
/// members as rendered at ingest (`None` before its first report).
#[derive(Debug, Clone)]
pub struct HostListing {
    pub row: HostRow,
    pub members: Option<String>,
}

/// The hosts document (`GET /v1/hosts`), written straight from listings:
/// the same JSON document as [`hosts`] over the same hosts (its members in
/// another order), without building a [`HostView`] per host or decoding
/// anything stored.
pub fn hosts_document(listings: &[HostListing], staleness: &Staleness) -> Vec<u8> {
    let mut listings: Vec<&HostListing> = listings.iter().collect();
    listings.sort_by(|a, b| a.row.name.cmp(&b.row.name));
    let mut states: BTreeMap<&str, u64> = STATES.iter().map(|s| (*s, 0)).collect();
    let words: Vec<&'static str> = listings
        .iter()
        .map(|l| {
            let state = host_state(&l.row, staleness);
            *states.entry(state).or_insert(0) += 1;
            state
        })
        .collect();
    let empty = HostPicture::of_row(&HostRow::default()).members();
    let size: usize = listings
        .iter()
        .map(|l| 160 + l.members.as_ref().map_or(empty.len(), String::len))
        .sum();
    let mut out: Vec<u8> = Vec::with_capacity(size + 256);
    out.extend_from_slice(b"{\"format_version\":");
    put(&mut out, &VIEW_FORMAT_VERSION);
    out.extend_from_slice(b",\"generated_at\":");
    put(&mut out, &rfc3339(staleness.now));
    out.extend_from_slice(b",\"states\":");
    put(&mut out, &states);
    out.extend_from_slice(b",\"hosts\":[");
    for (i, (l, state)) in listings.iter().zip(words).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let r = &l.row;
        out.extend_from_slice(b"{\"name\":");
        put(&mut out, &r.name);
        out.extend_from_slice(b",\"kind\":");
        put(&mut out, &r.kind);
        out.extend_from_slice(b",\"state\":\"");
        out.extend_from_slice(state.as_bytes());
        out.extend_from_slice(b"\",\"age_s\":");
        put(
            &mut out,
            &r.last_report_at.map(|t| (staleness.now - t).max(0)),
        );
        out.extend_from_slice(b",\"reports\":");
        put(&mut out, &r.reports_held);
        out.extend_from_slice(b",\"findings\":");
        put(&mut out, &r.open_findings);
        out.extend_from_slice(b",\"last_applied_revision\":");
        put(&mut out, &r.last_apply_revision);
        out.push(b',');
        out.extend_from_slice(l.members.as_deref().unwrap_or(&empty).as_bytes());
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    out
}

/// `v` as JSON at the end of `out` (writing to a `Vec` cannot fail, and
/// these values always serialise).
fn put<T: Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    let _ = serde_json::to_writer(out, v);
}

/// `GET /v1/stale`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaleView {
    pub format_version: String,
    pub generated_at: String,
    pub factor: f64,
    pub hosts: Vec<StaleHost>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaleHost {
    pub name: String,
    pub kind: String,
    pub labels: BTreeMap<String, String>,
    pub last_report: Option<String>,
    pub age_s: i64,
    /// The interval the host said to expect (0: not said).
    pub expected_interval_s: u64,
    /// The silence allowed before stale: interval × factor.
    pub allowed_s: i64,
    pub overdue_s: i64,
    /// Enrolled and never heard from.
    pub never_reported: bool,
}

pub fn stale(rows: &[HostRow], staleness: &Staleness) -> StaleView {
    let mut hosts: Vec<StaleHost> = rows
        .iter()
        .filter_map(|r| {
            let overdue = staleness.overdue(r)?;
            Some(StaleHost {
                name: r.name.clone(),
                kind: r.kind.clone(),
                labels: r.labels.clone(),
                last_report: r.last_report_at.map(rfc3339),
                age_s: staleness.now - r.last_report_at.unwrap_or(r.enrolled_at),
                expected_interval_s: r.expected_interval_s,
                allowed_s: staleness.allowed(r),
                overdue_s: overdue,
                never_reported: r.last_report_at.is_none(),
            })
        })
        .collect();
    hosts.sort_by(|a, b| b.overdue_s.cmp(&a.overdue_s).then(a.name.cmp(&b.name)));
    StaleView {
        format_version: VIEW_FORMAT_VERSION.to_owned(),
        generated_at: rfc3339(staleness.now),
        factor: staleness.factor,
        hosts,
    }
}

/// One host's last apply of a revision.
#[derive(Debug, Clone, PartialEq)]
pub struct RevisionRow {
    pub host: String,
    pub outcome: String,
    pub last_at: i64,
    pub changed: u64,
    pub failed: u64,
}

/// One failure of a host's last apply of a revision.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureRow {
    pub host: String,
    pub resource: String,
    pub phase: String,
    pub validator: Option<String>,
    pub validator_version: Option<String>,
    pub exit_status: Option<i64>,
    pub signature: String,
    pub message: String,
}

/// `GET /v1/rollout`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutView {
    pub format_version: String,
    /// `None` when no host has applied anything yet.
    pub revision: Option<String>,
    pub hosts_total: u64,
    pub converged: Vec<String>,
    /// Label values shared by every converged host and no failed one.
    pub converged_labels: BTreeMap<String, Vec<String>>,
    pub failed: Vec<String>,
    /// Hosts that have not applied this revision, with what they run.
    pub pending: Vec<PendingHost>,
    /// Failures, one entry per resource + validator + message signature.
    pub groups: Vec<FailureGroup>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingHost {
    pub name: String,
    pub revision: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureGroup {
    pub resource: String,
    pub phase: String,
    pub validator: Option<String>,
    /// Versions of the validator on the group's hosts.
    pub validator_versions: Vec<String>,
    pub exit_status: Option<i64>,
    pub signature: String,
    /// The message of one host of the group (they differ only in numbers
    /// and temporary names).
    pub message: String,
    pub hosts: Vec<String>,
    /// Label values every host of the group has and no other host that
    /// applied the revision has: what separates this group.
    pub labels: BTreeMap<String, Vec<String>>,
}

/// The rollout of `revision` from its rows; `hosts` gives every host's
/// labels and current revision. (The query layer reads only the revision's
/// own rows and calls [`rollout_of`]; this form, over whole host rows, is
/// the same computation.)
pub fn rollout(
    revision: Option<String>,
    hosts: &[HostRow],
    applied: &[RevisionRow],
    failures: &[FailureRow],
) -> RolloutView {
    let index: HashMap<&str, usize> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.name.as_str(), i))
        .collect();
    let mut label_sets: Vec<BTreeMap<String, String>> =
        hosts.iter().map(|h| h.labels.clone()).collect();
    let none = label_sets.len();
    label_sets.push(BTreeMap::new());
    let reporters: Vec<Applied> = applied
        .iter()
        .map(|a| Applied {
            host: a.host.clone(),
            failed: a.outcome == "failed",
            labels: index.get(a.host.as_str()).copied().unwrap_or(none),
        })
        .collect();
    let reported: BTreeSet<&str> = applied.iter().map(|a| a.host.as_str()).collect();
    let pending: Vec<PendingHost> = hosts
        .iter()
        .filter(|h| h.kind == "host" && !reported.contains(h.name.as_str()))
        .map(|h| PendingHost {
            name: h.name.clone(),
            revision: h.last_apply_revision.clone(),
        })
        .collect();
    let hosts_total = hosts.iter().filter(|h| h.kind == "host").count() as u64;
    rollout_of(
        revision,
        hosts_total,
        reporters,
        &label_sets,
        pending,
        failures,
    )
}

/// A host that applied the revision: how its last apply of it ended, and
/// its labels then (an index into the label sets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub host: String,
    pub failed: bool,
    pub labels: usize,
}

/// The rollout from the revision's own rows: every host that applied it
/// (`applied`, with `label_sets` their distinct label sets), the hosts that
/// have not (`pending`), how many hosts there are, and the failures.
pub fn rollout_of(
    revision: Option<String>,
    hosts_total: u64,
    applied: Vec<Applied>,
    label_sets: &[BTreeMap<String, String>],
    mut pending: Vec<PendingHost>,
    failures: &[FailureRow],
) -> RolloutView {
    let counts = LabelCounts::new(label_sets, applied.iter().map(|a| a.labels));
    let set_of: HashMap<&str, usize> = applied
        .iter()
        .map(|a| (a.host.as_str(), a.labels))
        .collect();
    let mut converged: Vec<&Applied> = applied.iter().filter(|a| !a.failed).collect();
    converged.sort_by(|a, b| a.host.cmp(&b.host));
    let mut failed: Vec<String> = applied
        .iter()
        .filter(|a| a.failed)
        .map(|a| a.host.clone())
        .collect();
    failed.sort();
    pending.sort_by(|a, b| a.name.cmp(&b.name));

    let groups = failure_groups(&counts, &set_of, failures);
    let converged_labels = counts.separating(converged.iter().map(|a| a.labels), converged.len());
    RolloutView {
        format_version: VIEW_FORMAT_VERSION.to_owned(),
        revision,
        hosts_total,
        converged: converged.into_iter().map(|a| a.host.clone()).collect(),
        converged_labels,
        failed,
        pending,
        groups,
    }
}

/// Failures grouped by (resource, validator, signature), largest group
/// first, each with the label values that separate its hosts (`set_of`: a
/// host that applied the revision -> its label set; other hosts' failures
/// are not the rollout's).
fn failure_groups(
    counts: &LabelCounts<'_>,
    set_of: &HashMap<&str, usize>,
    failures: &[FailureRow],
) -> Vec<FailureGroup> {
    // Group by (resource, validator, signature).
    let mut by_key: BTreeMap<(&str, Option<&str>, &str), Vec<&FailureRow>> = BTreeMap::new();
    for f in failures
        .iter()
        .filter(|f| set_of.contains_key(f.host.as_str()))
    {
        by_key
            .entry((
                f.resource.as_str(),
                f.validator.as_deref(),
                f.signature.as_str(),
            ))
            .or_default()
            .push(f);
    }
    let mut groups: Vec<FailureGroup> = by_key
        .into_values()
        .filter_map(|rows| {
            let mut names: Vec<String> = rows.iter().map(|r| r.host.clone()).collect();
            names.sort();
            names.dedup();
            let versions: BTreeSet<String> = rows
                .iter()
                .filter_map(|r| r.validator_version.clone())
                .collect();
            // What the group shows of one host (its hosts' messages may
            // differ): the first host's by name, not the first row the
            // store returned (SQLite's and PostgreSQL's orders differ).
            let first = rows.iter().copied().min_by(|a, b| {
                a.host
                    .cmp(&b.host)
                    .then(a.phase.cmp(&b.phase))
                    .then(a.message.cmp(&b.message))
            })?;
            let sets = names.iter().filter_map(|n| set_of.get(n.as_str()).copied());
            Some(FailureGroup {
                resource: first.resource.clone(),
                phase: first.phase.clone(),
                validator: first.validator.clone(),
                validator_versions: versions.into_iter().collect(),
                exit_status: first.exit_status,
                signature: first.signature.clone(),
                message: first.message.clone(),
                labels: counts.separating(sets, names.len()),
                hosts: names,
            })
        })
        .collect();
    groups.sort_by(|a, b| {
        b.hosts
            .len()
            .cmp(&a.hosts.len())
            .then(a.resource.cmp(&b.resource))
    });
    groups
}

/// What the overview shows of a rollout: the counts and the failure
/// groups, without the host lists (at 10,000 hosts those are most of the
/// work of [`RolloutView`]). The same numbers as the view's list lengths.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RolloutSummary {
    pub revision: Option<String>,
    pub converged: u64,
    pub failed: u64,
    pub pending: u64,
    pub groups: Vec<FailureGroup>,
}

impl RolloutSummary {
    /// The summary of a whole view (what [`rollout_summary_of`] computes
    /// from counts).
    pub fn of(view: &RolloutView) -> Self {
        RolloutSummary {
            revision: view.revision.clone(),
            converged: view.converged.len() as u64,
            failed: view.failed.len() as u64,
            pending: view.pending.len() as u64,
            groups: view.groups.clone(),
        }
    }
}

/// The rollout summary from counts: per distinct label set of the hosts
/// that applied the revision, how many did and how many of them failed
/// (`applied`: `(set, hosts, failed)`); the failed hosts' label sets
/// (`failed_sets`); how many hosts have not applied it; the failures.
pub fn rollout_summary_of(
    revision: Option<String>,
    label_sets: &[BTreeMap<String, String>],
    applied: &[(usize, u64, u64)],
    failed_sets: &HashMap<&str, usize>,
    pending: u64,
    failures: &[FailureRow],
) -> RolloutSummary {
    let counts = LabelCounts::weighted(label_sets, applied.iter().map(|&(set, n, _)| (set, n)));
    let hosts: u64 = applied.iter().map(|a| a.1).sum();
    let failed: u64 = applied.iter().map(|a| a.2).sum();
    RolloutSummary {
        revision,
        converged: hosts - failed.min(hosts),
        failed,
        pending,
        groups: failure_groups(&counts, failed_sets, failures),
    }
}

/// How many hosts of a population carry each label value, counted once so
/// that the labels separating any group of them cost the group's size, not
/// the population's.
struct LabelCounts<'a> {
    sets: &'a [BTreeMap<String, String>],
    /// Hosts per `(key, value)`.
    totals: HashMap<(&'a str, &'a str), u64>,
    hosts: u64,
}

impl<'a> LabelCounts<'a> {
    /// The counts over hosts whose label sets are `members` (indexes into
    /// `sets`; an index out of range is a host without labels).
    fn new(sets: &'a [BTreeMap<String, String>], members: impl Iterator<Item = usize>) -> Self {
        let mut per_set: HashMap<usize, u64> = HashMap::new();
        for m in members {
            *per_set.entry(m).or_insert(0) += 1;
        }
        Self::weighted(sets, per_set.into_iter())
    }

    /// The counts over `n` hosts per label set `(set, n)`.
    fn weighted(
        sets: &'a [BTreeMap<String, String>],
        per_set: impl Iterator<Item = (usize, u64)>,
    ) -> Self {
        let mut hosts = 0;
        let mut totals = HashMap::new();
        for (set, n) in per_set {
            hosts += n;
            for (k, v) in sets.get(set).into_iter().flatten() {
                *totals.entry((k.as_str(), v.as_str())).or_insert(0) += n;
            }
        }
        LabelCounts {
            sets,
            totals,
            hosts,
        }
    }

    /// The label values of a group of `size` hosts (their label sets
    /// `members`) that no host outside the group has: for each key every
    /// host of the group carries, the group's values, when none of them
    /// occurs outside it. Nothing when nobody is outside the group.
    fn separating(
        &self,
        members: impl Iterator<Item = usize>,
        size: usize,
    ) -> BTreeMap<String, Vec<String>> {
        let mut out = BTreeMap::new();
        if size == 0 || self.hosts <= size as u64 {
            return out;
        }
        let inside = LabelCounts::new(self.sets, members);
        // key -> (hosts of the group carrying it, its values in the group)
        let mut keys: BTreeMap<&str, (u64, Vec<&str>)> = BTreeMap::new();
        for (&(k, v), &n) in &inside.totals {
            let e = keys.entry(k).or_insert((0, Vec::new()));
            e.0 += n;
            e.1.push(v);
        }
        for (key, (carrying, mut values)) in keys {
            if carrying != inside.hosts {
                continue;
            }
            let outside_has = values
                .iter()
                .any(|v| self.totals.get(&(key, *v)) != inside.totals.get(&(key, *v)));
            if !outside_has {
                values.sort_unstable();
                out.insert(
                    key.to_owned(),
                    values.into_iter().map(str::to_owned).collect(),
                );
            }
        }
        out
    }
}

/// Label values of `group` that no host of `all` outside the group has:
/// for each label key every host of the group carries, the group's values,
/// when none of them occurs outside it.
pub fn separating_labels(
    group: &[String],
    all: &[&str],
    labels: &HashMap<&str, &BTreeMap<String, String>>,
) -> BTreeMap<String, Vec<String>> {
    let sets: Vec<BTreeMap<String, String>> = all
        .iter()
        .map(|h| labels.get(h).map(|l| (*l).clone()).unwrap_or_default())
        .collect();
    let index: HashMap<&str, usize> = all.iter().enumerate().map(|(i, h)| (*h, i)).collect();
    let counts = LabelCounts::new(&sets, 0..sets.len());
    let inside: BTreeSet<usize> = group
        .iter()
        .filter_map(|h| index.get(h.as_str()).copied())
        .collect();
    counts.separating(inside.iter().copied(), inside.len())
}

/// One open finding of one host.
#[derive(Debug, Clone, PartialEq)]
pub struct FindingRow {
    pub host: String,
    pub signature: String,
    pub subject: String,
    pub category: String,
    pub class: String,
    pub paths: Vec<String>,
    pub observed: Option<String>,
    pub first_seen: i64,
    pub last_seen: i64,
}

/// Rows a paged list shows unless `per` says otherwise: the hosts table,
/// the drift page and `GET /v1/drift`.
pub const PER_PAGE: usize = 100;
/// The most rows one page of a paged list holds (`per` above is taken as
/// this).
pub const MAX_PER_PAGE: usize = 1000;

/// Which rows of a list one page shows: `page` (from 1) of `pages` pages
/// of `per` rows, starting at row `start` (from 0). A page past the last
/// is the last, a page before the first the first, and `per` is taken
/// between 1 and [`MAX_PER_PAGE`] ([`PER_PAGE`] when not given), as the
/// hosts table always did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paging {
    pub page: usize,
    pub pages: usize,
    pub per: usize,
    pub start: usize,
}

impl Paging {
    /// The page `page` of `per` rows of a list of `total` rows.
    pub fn of(total: usize, page: Option<usize>, per: Option<usize>) -> Self {
        let per = per.unwrap_or(PER_PAGE).clamp(1, MAX_PER_PAGE);
        let pages = total.div_ceil(per).max(1);
        let page = page.unwrap_or(1).clamp(1, pages);
        Paging {
            page,
            pages,
            per,
            start: (page - 1) * per,
        }
    }
}

/// `GET /v1/drift`: one page of the clusters (in the view's order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftView {
    pub format_version: String,
    pub generated_at: String,
    /// Hosts the fleet has (that have reported at least once).
    pub hosts_total: u64,
    pub hosts_drifted: u64,
    /// Clusters in all, on every page (a server that predates paging
    /// does not say: `None`, and `clusters` is all of them).
    #[serde(default)]
    pub clusters_total: Option<u64>,
    /// This page (from 1), how many there are and the clusters a page
    /// holds at most (`None`, and left out: the whole view, not paged,
    /// asked for without `page` or `per`, or a server that predates
    /// paging).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per: Option<u64>,
    pub clusters: Vec<DriftCluster>,
}

impl DriftView {
    /// This (whole) view as one unpaged answer: every cluster, the total
    /// said, no page.
    pub fn whole(&self) -> DriftView {
        DriftView {
            clusters_total: Some(self.clusters.len() as u64),
            page: None,
            pages: None,
            per: None,
            ..self.clone()
        }
    }

    /// The page `paging` says of this (whole) view: its clusters, with the
    /// counts of the whole.
    pub fn page(&self, paging: Paging) -> DriftView {
        DriftView {
            format_version: self.format_version.clone(),
            generated_at: self.generated_at.clone(),
            hosts_total: self.hosts_total,
            hosts_drifted: self.hosts_drifted,
            clusters_total: Some(self.clusters.len() as u64),
            page: Some(paging.page as u64),
            pages: Some(paging.pages as u64),
            per: Some(paging.per as u64),
            clusters: self
                .clusters
                .iter()
                .skip(paging.start)
                .take(paging.per)
                .cloned()
                .collect(),
        }
    }
}

/// What the overview shows of drift: the first clusters of the view (in
/// its order) and its counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DriftSummary {
    pub clusters: Vec<DriftCluster>,
    /// Clusters in all.
    pub count: u64,
    /// Clusters on more than one host.
    pub many: u64,
    pub hosts_drifted: u64,
    pub hosts_total: u64,
}

impl DriftSummary {
    /// The summary of a whole view, its first `shown` clusters.
    pub fn of(view: &DriftView, shown: usize) -> Self {
        DriftSummary {
            clusters: view.clusters.iter().take(shown).cloned().collect(),
            count: view.clusters.len() as u64,
            many: view.clusters.iter().filter(|c| c.hosts > 1).count() as u64,
            hosts_drifted: view.hosts_drifted,
            hosts_total: view.hosts_total,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftCluster {
    pub subject: String,
    pub category: String,
    pub class: String,
    pub paths: Vec<String>,
    /// The value-free signature (same change, whatever the values).
    pub signature: String,
    /// The observed hash every host of the cluster shares (`null`: a
    /// sensitive resource, compared by signature only).
    pub observed: Option<String>,
    /// How many hosts show exactly this.
    pub hosts: u64,
    /// Up to 20 of them, by name.
    pub sample_hosts: Vec<String>,
    /// Who changed it, one line per distinct writer the hosts' attribution
    /// named (`alice via sshd session from …`, `dpkg (package upgrade)`);
    /// empty when no host of the cluster attributed it.
    #[serde(default)]
    pub changed_by: Vec<String>,
    /// Other clusters with the same signature but another observed value
    /// (hosts changed in the same place, to different things).
    pub variants: u64,
    /// `many hosts` or `one host`.
    pub spread: String,
    /// Earliest first sighting across the fleet.
    pub first_seen: String,
    pub last_seen: String,
}

/// Hosts a cluster names at most.
pub const SAMPLE_HOSTS: usize = 20;

/// The drift view of open findings, one row per host and finding. (The
/// query layer reads the clusters kept at ingest and calls [`drift_of`];
/// this form, over every finding, is the same computation.)
pub fn drift(rows: &[FindingRow], hosts_total: u64, now: i64) -> DriftView {
    let mut by_key: BTreeMap<(&str, Option<&str>), Vec<&FindingRow>> = BTreeMap::new();
    for r in rows {
        by_key
            .entry((r.signature.as_str(), r.observed.as_deref()))
            .or_default()
            .push(r);
    }
    let drifted: BTreeSet<&str> = rows.iter().map(|r| r.host.as_str()).collect();
    let mut samples = HashMap::new();
    let clusters = by_key
        .into_iter()
        .map(|((sig, observed), rows)| {
            let mut names: Vec<String> = rows.iter().map(|r| r.host.clone()).collect();
            names.sort();
            names.dedup();
            let first = rows[0];
            let cluster = ClusterRow {
                signature: sig.to_owned(),
                observed: observed.map(str::to_owned),
                hosts: names.len() as u64,
                subject: first.subject.clone(),
                category: first.category.clone(),
                // Hosts may class one resource differently: the first
                // class in byte order, as ingest keeps it.
                class: rows
                    .iter()
                    .map(|r| r.class.as_str())
                    .min()
                    .unwrap_or_default()
                    .to_owned(),
                paths: first.paths.clone(),
                first_seen: rows.iter().map(|r| r.first_seen).min().unwrap_or(now),
                last_seen: rows.iter().map(|r| r.last_seen).max().unwrap_or(now),
            };
            names.truncate(SAMPLE_HOSTS);
            samples.insert(cluster.key(), names);
            cluster
        })
        .collect();
    drift_of(clusters, samples, hosts_total, drifted.len() as u64, now)
}

/// One drift cluster as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterRow {
    pub signature: String,
    pub observed: Option<String>,
    pub hosts: u64,
    pub subject: String,
    pub category: String,
    pub class: String,
    pub paths: Vec<String>,
    pub first_seen: i64,
    pub last_seen: i64,
}

impl ClusterRow {
    /// Its key: signature and observed hash (`""` for none).
    pub fn key(&self) -> (String, String) {
        (
            self.signature.clone(),
            self.observed.clone().unwrap_or_default(),
        )
    }
}

/// The drift view from its clusters, `samples` naming some hosts of each
/// (by cluster key; sorted and cut to [`SAMPLE_HOSTS`] here), with the
/// fleet's host counts.
pub fn drift_of(
    clusters: Vec<ClusterRow>,
    mut samples: HashMap<(String, String), Vec<String>>,
    hosts_total: u64,
    hosts_drifted: u64,
    now: i64,
) -> DriftView {
    let clusters: Vec<ClusterRow> = clusters.into_iter().filter(|c| c.hosts > 0).collect();
    let mut variants: HashMap<&str, u64> = HashMap::new();
    for c in &clusters {
        *variants.entry(c.signature.as_str()).or_insert(0) += 1;
    }
    let variants: HashMap<String, u64> = variants
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let mut out: Vec<DriftCluster> = clusters
        .into_iter()
        .map(|c| {
            let mut names = samples.remove(&c.key()).unwrap_or_default();
            names.sort();
            names.dedup();
            names.truncate(SAMPLE_HOSTS);
            DriftCluster {
                variants: variants
                    .get(&c.signature)
                    .copied()
                    .unwrap_or(1)
                    .saturating_sub(1),
                subject: c.subject,
                category: c.category,
                class: c.class,
                paths: c.paths,
                signature: c.signature,
                observed: c.observed,
                hosts: c.hosts,
                sample_hosts: names,
                changed_by: Vec::new(),
                spread: if c.hosts > 1 {
                    "many hosts"
                } else {
                    "one host"
                }
                .to_owned(),
                first_seen: rfc3339(c.first_seen),
                last_seen: rfc3339(c.last_seen),
            }
        })
        .collect();
    // Most hosts first, then the oldest, then by subject; the cluster's
    // key last, so that clusters alike in all three (one change to two
    // values, or two changes of one resource) keep one order: the store
    // returns them in no particular one (SQLite by insertion, PostgreSQL
    // as its rows were last rewritten).
    out.sort_by(|a, b| {
        b.hosts
            .cmp(&a.hosts)
            .then(a.first_seen.cmp(&b.first_seen))
            .then(a.subject.cmp(&b.subject))
            .then(a.signature.cmp(&b.signature))
            .then(a.observed.cmp(&b.observed))
    });
    DriftView {
        format_version: VIEW_FORMAT_VERSION.to_owned(),
        generated_at: rfc3339(now),
        hosts_total,
        hosts_drifted,
        clusters_total: Some(out.len() as u64),
        page: None,
        pages: None,
        per: None,
        clusters: out,
    }
}

/// `GET /v1/sampling`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingView {
    pub format_version: String,
    pub enabled: bool,
    pub fraction: Option<f64>,
    pub round_s: Option<u64>,
    /// `⌈1/fraction⌉`: every host deep-checks once in this many rounds.
    pub period_rounds: Option<u64>,
    pub current_round: Option<u64>,
    pub hosts_total: u64,
    /// Hosts that deep-checked within the last `period_rounds` rounds.
    pub deep_in_period: u64,
    /// Hosts whose last deep round ended without a deep check of theirs (a
    /// host that stopped checking, or a new one). A host whose own round is
    /// the current one is not overdue until that round ends.
    pub overdue: Vec<String>,
    /// Deep checks recorded per recent round, newest first.
    pub rounds: Vec<RoundCount>,
    pub classes: Vec<ClassSampling>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundCount {
    pub round: u64,
    pub deep_hosts: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassSampling {
    pub class: String,
    /// The longest interval any host gives the class.
    pub interval_s: u64,
    pub hosts: u64,
    /// Without sampling: interval plus the slowest inspection reported.
    pub bound_unsampled_s: u64,
    /// Under sampling, guaranteed: a change on one host is deep-checked
    /// within `period × round + interval` (`None` when the interval is
    /// longer than a round: a host may then skip its deep round; `None`
    /// too with sampling off, where `bound_unsampled_s` is the bound).
    pub bound_guaranteed_s: Option<u64>,
    /// In expectation: about `(period + 1) / 2` rounds plus the interval
    /// (`None` with sampling off).
    pub bound_expected_s: Option<u64>,
}

/// The sampling view. `deep` is, per host name, the rounds it deep-checked
/// in, newest first (the recent ones suffice).
pub fn sampling(
    plan: Option<&datum_fleet::SamplingPlan>,
    hosts: &[HostRow],
    deep_rounds: &[(u64, u64)],
) -> SamplingView {
    let hosts: Vec<&HostRow> = hosts
        .iter()
        .filter(|h| h.kind == "host" && h.last_report_at.is_some())
        .collect();
    let mut classes: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    for h in &hosts {
        for c in &h.classes {
            let e = classes.entry(c.class.as_str()).or_insert((0, 0, 0));
            e.0 = e.0.max(c.interval_s);
            e.1 += 1;
            e.2 =
                e.2.max(c.bound_ms.unwrap_or(c.interval_s * 1000).div_ceil(1000));
        }
    }
    let Some(plan) = plan else {
        return SamplingView {
            format_version: VIEW_FORMAT_VERSION.to_owned(),
            enabled: false,
            fraction: None,
            round_s: None,
            period_rounds: None,
            current_round: None,
            hosts_total: hosts.len() as u64,
            deep_in_period: hosts.len() as u64,
            overdue: Vec::new(),
            rounds: Vec::new(),
            classes: classes
                .into_iter()
                .map(|(c, (i, n, b))| ClassSampling {
                    class: c.to_owned(),
                    interval_s: i,
                    hosts: n,
                    bound_unsampled_s: b,
                    bound_guaranteed_s: None,
                    bound_expected_s: None,
                })
                .collect(),
        };
    };
    let k = plan.period();
    let current = plan.round;
    let oldest_in_period = current.saturating_sub(k - 1);
    let deep_in_period = hosts
        .iter()
        .filter(|h| h.last_deep_round.is_some_and(|r| r >= oldest_in_period))
        .count() as u64;
    // Overdue: the host's own round (its slot) came and ended without a
    // deep check. The round in progress does not count yet: a host whose
    // slot it is has until its end (else a k-th of the fleet read as
    // overdue at the start of every round, on schedule).
    let mut overdue: Vec<String> = hosts
        .iter()
        .filter(|h| {
            let slot = datum_fleet::report::slot(&h.name, plan.seed, k);
            // The last round before the current one that is this host's.
            let Some(due) = current
                .checked_sub(1)
                .and_then(|last| last.checked_sub((last % k + k - slot) % k))
            else {
                return false;
            };
            h.last_deep_round.is_none_or(|r| r < due)
        })
        .map(|h| h.name.clone())
        .collect();
    overdue.sort();
    SamplingView {
        format_version: VIEW_FORMAT_VERSION.to_owned(),
        enabled: true,
        fraction: Some(plan.fraction),
        round_s: Some(plan.round_s),
        period_rounds: Some(k),
        current_round: Some(current),
        hosts_total: hosts.len() as u64,
        deep_in_period,
        overdue,
        rounds: deep_rounds
            .iter()
            .map(|(round, n)| RoundCount {
                round: *round,
                deep_hosts: *n,
            })
            .collect(),
        classes: classes
            .into_iter()
            .map(|(c, (interval, n, bound))| {
                let fits = interval <= plan.round_s;
                ClassSampling {
                    class: c.to_owned(),
                    interval_s: interval,
                    hosts: n,
                    bound_unsampled_s: bound,
                    bound_guaranteed_s: fits.then(|| k * plan.round_s + interval),
                    bound_expected_s: fits.then(|| (k + 1) * plan.round_s / 2 + interval),
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, labels: &[(&str, &str)]) -> HostRow {
        HostRow {
            name: name.into(),
            kind: "host".into(),
            enrolled_at: 0,
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            last_report_at: Some(1_000),
            expected_interval_s: 60,
            ..HostRow::default()
        }
    }

    fn at(now: i64) -> Staleness {
        Staleness {
            now,
            factor: 3.0,
            first_report_within: 600,
        }
    }

    #[test]
    fn states_follow_the_rules() {
        let mut h = host("a", &[]);
        assert_eq!(host_state(&h, &at(1_100)), "converged");
        assert_eq!(host_state(&h, &at(1_181)), "stale");
        h.open_findings = 2;
        assert_eq!(host_state(&h, &at(1_100)), "drifted");
        h.last_apply_failed = true;
        assert_eq!(host_state(&h, &at(1_100)), "failed");
        h.quarantined = 1;
        assert_eq!(host_state(&h, &at(1_100)), "quarantined");
        let fresh = HostRow {
            last_report_at: None,
            enrolled_at: 1_000,
            ..host("b", &[])
        };
        assert_eq!(host_state(&fresh, &at(1_500)), "new");
        assert_eq!(host_state(&fresh, &at(1_601)), "stale");
        let v = stale(&[h, fresh], &at(2_000));
        assert_eq!(v.hosts.len(), 2);
        assert_eq!(v.hosts[0].name, "a", "the most overdue first");
        assert_eq!(v.hosts[0].overdue_s, 2_000 - 1_000 - 180);
        assert!(v.hosts[1].never_reported);
    }

    #[test]
    fn a_partial_rollout_reads_as_one_group_with_its_label() {
        let hosts: Vec<HostRow> = (0..6)
            .map(|i| {
                let v = if i < 4 { "1.22" } else { "1.26" };
                host(
                    &format!("web-{i}"),
                    &[("role", "web"), ("nginx_version", v)],
                )
            })
            .chain([host("db-0", &[("role", "db")])])
            .collect();
        let applied: Vec<RevisionRow> = hosts
            .iter()
            .filter(|h| h.name.starts_with("web"))
            .map(|h| RevisionRow {
                host: h.name.clone(),
                outcome: if h.labels["nginx_version"] == "1.26" {
                    "failed"
                } else {
                    "converged"
                }
                .into(),
                last_at: 5,
                changed: 1,
                failed: 0,
            })
            .collect();
        let failures: Vec<FailureRow> = ["web-4", "web-5"]
            .iter()
            .map(|h| FailureRow {
                host: (*h).into(),
                resource: "File[shop-http2]".into(),
                phase: "apply".into(),
                validator: Some("nginx".into()),
                validator_version: Some("1.26.0".into()),
                exit_status: Some(1),
                signature: "s1".into(),
                message: "unknown directive".into(),
            })
            .collect();
        let v = rollout(Some("git:abc".into()), &hosts, &applied, &failures);
        assert_eq!(v.failed, vec!["web-4", "web-5"]);
        assert_eq!(v.converged.len(), 4);
        assert_eq!(v.pending.len(), 1);
        assert_eq!(v.groups.len(), 1);
        let g = &v.groups[0];
        assert_eq!(g.hosts, vec!["web-4", "web-5"]);
        assert_eq!(
            g.labels,
            BTreeMap::from([("nginx_version".to_owned(), vec!["1.26".to_owned()])]),
            "role=web is shared with converged hosts, so it does not separate"
        );
        assert_eq!(v.converged_labels["nginx_version"], vec!["1.22"]);
    }

    /// A failure group shows one host's phase, exit status and message
    /// (its hosts' may differ: the message names the host, a path): the
    /// first host's by name, whatever order the store returned the
    /// failures in (SQLite and PostgreSQL return them differently, a join
    /// in any order).
    #[test]
    fn a_failure_group_shows_its_first_host_s_message_whatever_the_order() {
        let failure = |host: &str, exit: i64| FailureRow {
            host: host.into(),
            resource: "File[nginx.conf]".into(),
            phase: format!("phase of {host}"),
            validator: Some("nginx".into()),
            validator_version: None,
            exit_status: Some(exit),
            signature: "sig".into(),
            message: format!("failed on {host}"),
        };
        let applied: Vec<Applied> = ["b", "a", "c"]
            .iter()
            .map(|h| Applied {
                host: (*h).into(),
                failed: true,
                labels: 0,
            })
            .collect();
        let rows = vec![failure("b", 2), failure("a", 1), failure("c", 3)];
        let group = |rows: &[FailureRow]| {
            rollout_of(
                Some("r".into()),
                3,
                applied.clone(),
                &[BTreeMap::new()],
                vec![],
                rows,
            )
            .groups
        };
        let forward = group(&rows);
        let reversed: Vec<FailureRow> = rows.iter().rev().cloned().collect();
        assert_eq!(group(&reversed), forward);
        assert_eq!(forward.len(), 1);
        assert_eq!(
            (
                forward[0].message.as_str(),
                forward[0].phase.as_str(),
                forward[0].exit_status
            ),
            ("failed on a", "phase of a", Some(1))
        );
    }

    /// Clusters alike in hosts, first sighting and subject (one change to
    /// two values, two changes of one resource) come out in one order,
    /// whatever order the store returned them in: SQLite and PostgreSQL
    /// return the table's rows in different orders.
    #[test]
    fn clusters_alike_keep_one_order_whatever_the_stores_order() {
        let cluster = |signature: &str, observed: Option<&str>| ClusterRow {
            signature: signature.into(),
            observed: observed.map(str::to_owned),
            hosts: 1,
            subject: "File[B]".into(),
            category: "changed_outside".into(),
            class: "normal".into(),
            paths: vec![],
            first_seen: 0,
            last_seen: 100,
        };
        let rows = vec![
            cluster("sig-b", Some("obs-2")),
            cluster("sig-a", None),
            cluster("sig-b", Some("obs-1")),
            cluster("sig-a", Some("obs-1")),
        ];
        let order = |rows: Vec<ClusterRow>| {
            drift_of(rows, HashMap::new(), 4, 4, 200)
                .clusters
                .into_iter()
                .map(|c| (c.signature, c.observed))
                .collect::<Vec<_>>()
        };
        let forward = order(rows.clone());
        assert_eq!(order(rows.into_iter().rev().collect()), forward);
        assert_eq!(
            forward,
            vec![
                ("sig-a".to_owned(), None),
                ("sig-a".to_owned(), Some("obs-1".to_owned())),
                ("sig-b".to_owned(), Some("obs-1".to_owned())),
                ("sig-b".to_owned(), Some("obs-2".to_owned())),
            ]
        );
    }

    #[test]
    fn the_same_change_on_many_hosts_is_one_cluster() {
        let mut rows = Vec::new();
        for i in 0..50 {
            rows.push(FindingRow {
                host: format!("h{i:02}"),
                signature: "sig-pkg".into(),
                subject: "File[nginx-conf]".into(),
                category: "changed_outside".into(),
                class: "normal".into(),
                paths: vec!["content".into()],
                observed: Some("obs-upgrade".into()),
                first_seen: 100 + i,
                last_seen: 200,
            });
        }
        rows.push(FindingRow {
            host: "h07".into(),
            signature: "sig-motd".into(),
            subject: "File[motd]".into(),
            category: "changed_outside".into(),
            class: "normal".into(),
            paths: vec!["content".into()],
            observed: Some("obs-person".into()),
            first_seen: 150,
            last_seen: 200,
        });
        rows.push(FindingRow {
            observed: Some("obs-other".into()),
            host: "h08".into(),
            ..rows[0].clone()
        });
        let v = drift(&rows, 60, 300);
        assert_eq!(v.clusters.len(), 3);
        assert_eq!(v.clusters[0].hosts, 50);
        assert_eq!(v.clusters[0].spread, "many hosts");
        assert_eq!(v.clusters[0].variants, 1);
        assert_eq!(v.clusters[0].first_seen, rfc3339(100));
        assert_eq!(v.clusters[0].sample_hosts.len(), SAMPLE_HOSTS);
        let person = v
            .clusters
            .iter()
            .find(|c| c.subject == "File[motd]")
            .unwrap();
        assert_eq!((person.hosts, person.spread.as_str()), (1, "one host"));
        assert_eq!(v.hosts_drifted, 50);
    }

    #[test]
    fn sampling_states_a_bound_and_who_is_overdue() {
        let plan = datum_fleet::SamplingPlan {
            fraction: 0.25,
            round_s: 600,
            seed: 1,
            round: 100,
        };
        let mut a = host("a", &[]);
        a.last_deep_round = Some(98);
        a.classes = vec![datum_fleet::ClassBound {
            class: "normal".into(),
            interval_s: 300,
            bound_ms: Some(301_000),
            resources: 3,
            policy: None,
        }];
        let mut b = host("b", &[]);
        b.last_deep_round = Some(96);
        b.classes = vec![datum_fleet::ClassBound {
            class: "slow".into(),
            interval_s: 3600,
            bound_ms: None,
            resources: 1,
            policy: None,
        }];
        // The last round before the current one that is each host's own.
        let due = |name: &str| {
            let slot = datum_fleet::report::slot(name, 1, 4);
            (96..100).find(|r| r % 4 == slot).unwrap()
        };
        a.last_deep_round = Some(due("a"));
        b.last_deep_round = Some(due("b") - 4);
        // Its own round is the current one and it has not checked yet: on
        // schedule, not overdue (it was, before the round ended).
        let name = (0..100)
            .map(|i| format!("c{i}"))
            .find(|n| datum_fleet::report::slot(n, 1, 4) == 100 % 4)
            .unwrap();
        let mut c = host(&name, &[]);
        c.last_deep_round = Some(96);
        let v = sampling(Some(&plan), &[a, b, c], &[(100, 3)]);
        assert_eq!(v.period_rounds, Some(4));
        assert_eq!(v.overdue, vec!["b"]);
        assert_eq!(v.deep_in_period, u64::from(due("a") >= 97));
        let normal = &v.classes[0];
        assert_eq!(normal.bound_guaranteed_s, Some(4 * 600 + 300));
        assert_eq!(normal.bound_expected_s, Some(5 * 600 / 2 + 300));
        assert_eq!(v.classes[1].bound_guaranteed_s, None, "interval > round");
    }
}
