//! Ingest and every view, on both stores.

use std::collections::BTreeMap;

use datum_fleet::ReportKind;
use datum_server::fleet::Fleet;
use datum_server::store::Backend;
use datum_server::views::Staleness;

use crate::on_both;
use crate::support::{failure, finding, ingest, ingest_from_store, report};

fn at(now: i64) -> Staleness {
    Staleness {
        now,
        factor: 3.0,
        first_report_within: 3600,
    }
}

async fn a_repeated_key_is_stored_once<B: Backend>(f: &Fleet<B>) {
    let r = report("web-1", ReportKind::Apply, 1, 10_000);
    assert!(ingest(f, &r).await, "first delivery stores");
    assert!(!ingest(f, &r).await, "the same key again is a duplicate");
    let hosts = f.hosts(&at(10_010)).await.unwrap();
    assert_eq!(hosts.hosts.len(), 1);
    assert_eq!(hosts.hosts[0].reports, 1);
    assert_eq!(hosts.hosts[0].state, "converged");
    let history = f.history("web-1", 10).await.unwrap().unwrap();
    assert_eq!(history.reports.len(), 1);
    assert_eq!(history.daily[0].reports, 1);
}

#[test]
fn repeated_keys() {
    on_both!(a_repeated_key_is_stored_once);
}

async fn retention_keeps_the_last_reports<B: Backend>(f: &Fleet<B>) {
    for seq in 1..=9 {
        ingest(
            f,
            &report("web-1", ReportKind::Check, seq, 10_000 + seq as i64),
        )
        .await;
    }
    let history = f.history("web-1", 100).await.unwrap().unwrap();
    let seqs: Vec<u64> = history.reports.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, vec![9, 8, 7, 6, 5], "the newest 5 (retention) stay");
    assert_eq!(f.hosts(&at(10_010)).await.unwrap().hosts[0].reports, 5);
    assert_eq!(
        history.daily[0].reports, 9,
        "the daily aggregate counts all"
    );
}

#[test]
fn retention() {
    on_both!(retention_keeps_the_last_reports);
}

async fn a_late_report_moves_the_counts_not_the_picture<B: Backend>(f: &Fleet<B>) {
    let mut newer = report("web-1", ReportKind::Check, 2, 20_000);
    newer.revision = "git:new".into();
    newer.findings.push(finding("File[motd]", "h1", "normal"));
    ingest(f, &newer).await;
    // An older report delivered late (a host's outbox drained after a
    // newer one went another way).
    let mut older = report("web-1", ReportKind::Check, 1, 10_000);
    older.revision = "git:old".into();
    older.labels.insert("role".into(), "db".into());
    older.findings.push(finding("File[issue]", "h0", "normal"));
    assert!(ingest(f, &older).await, "stored: a report of its own");
    let hosts = f.hosts(&at(20_010)).await.unwrap();
    let h = &hosts.hosts[0];
    assert_eq!(
        h.revision.as_deref(),
        Some("git:new"),
        "the newer picture stays"
    );
    assert_eq!(h.labels["role"], "web");
    assert_eq!(h.last_report.as_deref(), Some("1970-01-01T05:33:20Z"));
    assert_eq!(h.reports, 2, "but the late report is counted");
    assert_eq!(h.findings, 1);
    // Nor does it replace the newer report's findings: the drift the host
    // shows is what its newest check found.
    let subjects = |v: &datum_server::views::DriftView| {
        v.clusters
            .iter()
            .map(|c| c.subject.clone())
            .collect::<Vec<_>>()
    };
    let v = f.drift(20_010).await.unwrap();
    assert_eq!(subjects(&v), vec!["File[motd]"], "the newer findings stay");
    // A newer report still moves them.
    let mut newest = report("web-1", ReportKind::Check, 3, 30_000);
    newest.findings.push(finding("File[issue]", "h2", "normal"));
    ingest(f, &newest).await;
    let v = f.drift(30_010).await.unwrap();
    assert_eq!(subjects(&v), vec!["File[issue]"]);
}

#[test]
fn late_report() {
    on_both!(a_late_report_moves_the_counts_not_the_picture);
}

/// A report is late when it is older than what it would replace: its
/// finish is earlier, or in the same second its sequence number (the
/// order the host made and sends them in) is lower. A report of the same
/// second as the last was taken as the newer whatever its number, so an
/// older one delivered late (a second outbox under one identity, a
/// restored state store) replaced the newer findings, picture and outcome.
async fn a_late_report_of_the_same_second_is_late<B: Backend>(f: &Fleet<B>) {
    let subjects = |v: &datum_server::views::DriftView| {
        v.clusters
            .iter()
            .map(|c| c.subject.clone())
            .collect::<Vec<_>>()
    };
    // (Numbered from 2: a report numbered 1 is a new state store's first,
    // see a_new_state_stores_first_report_is_not_late.)
    let mut newer = report("web-1", ReportKind::Check, 3, 20_000);
    newer.revision = "git:new".into();
    newer.findings.push(finding("File[motd]", "h1", "normal"));
    ingest(f, &newer).await;
    let mut older = report("web-1", ReportKind::Check, 2, 20_000);
    older.revision = "git:old".into();
    older.findings.push(finding("File[issue]", "h0", "normal"));
    assert!(ingest(f, &older).await, "stored: a report of its own");
    let hosts = f.hosts(&at(20_010)).await.unwrap();
    assert_eq!(hosts.hosts[0].revision.as_deref(), Some("git:new"));
    assert_eq!(hosts.hosts[0].reports, 2, "but the late report is counted");
    let v = f.drift(20_010).await.unwrap();
    assert_eq!(subjects(&v), ["File[motd]"], "the newer findings stay");
    // The next report of the same second moves them.
    let mut next = report("web-1", ReportKind::Check, 4, 20_000);
    next.revision = "git:next".into();
    next.findings.push(finding("File[issue]", "h2", "normal"));
    ingest(f, &next).await;
    let hosts = f.hosts(&at(20_010)).await.unwrap();
    assert_eq!(hosts.hosts[0].revision.as_deref(), Some("git:next"));
    let v = f.drift(20_010).await.unwrap();
    assert_eq!(subjects(&v), ["File[issue]"]);
    // An apply likewise, against the last apply of its revision.
    let mut failed = report("web-2", ReportKind::Apply, 5, 30_000);
    failed.revision = "git:r2".into();
    failed.failures.push(failure("File[shop]", "sig"));
    failed.exit_code = 4;
    ingest(f, &failed).await;
    let mut earlier = report("web-2", ReportKind::Apply, 4, 30_000);
    earlier.revision = "git:r2".into();
    ingest(f, &earlier).await;
    let v = f.rollout(Some("git:r2")).await.unwrap();
    assert_eq!(v.failed, ["web-2"], "the newer outcome stays");
    let mut fixed = report("web-2", ReportKind::Apply, 6, 30_000);
    fixed.revision = "git:r2".into();
    ingest(f, &fixed).await;
    let v = f.rollout(Some("git:r2")).await.unwrap();
    assert_eq!(v.converged, ["web-2"], "the next one moves it");
}

#[test]
fn late_report_of_the_same_second() {
    on_both!(a_late_report_of_the_same_second_is_late);
}

/// A host whose state store is made anew (`--rebuild-state`, a host
/// installed again under its name) numbers its reports from 1 again. The
/// first of them, finished in the second of the old store's last report,
/// was judged late by its lower number, so the new store's check left the
/// old findings and picture in place (and its apply the revision's old
/// outcome). A report numbered 1 is its store's first: its number says
/// nothing of its order against another store's, so it is late only when
/// finished in an earlier second; taken, it makes 1 the host's number, and
/// the new store's next reports of that second follow it.
async fn a_new_state_stores_first_report_is_not_late<B: Backend>(f: &Fleet<B>) {
    let subjects = |v: &datum_server::views::DriftView| {
        v.clusters
            .iter()
            .map(|c| c.subject.clone())
            .collect::<Vec<_>>()
    };
    let check = |seq: u64, at: i64, revision: &str, subject: &str| {
        let mut r = report("web-1", ReportKind::Check, seq, at);
        r.revision = revision.into();
        r.findings.push(finding(subject, "h1", "normal"));
        r
    };
    ingest(f, &check(5_000, 20_000, "git:old", "File[motd]")).await;
    // The new store's first and second reports, in the same second.
    ingest(f, &check(1, 20_000, "git:new", "File[issue]")).await;
    let hosts = f.hosts(&at(20_010)).await.unwrap();
    assert_eq!(hosts.hosts[0].revision.as_deref(), Some("git:new"));
    assert_eq!(subjects(&f.drift(20_010).await.unwrap()), ["File[issue]"]);
    ingest(f, &check(2, 20_000, "git:next", "File[shop]")).await;
    let hosts = f.hosts(&at(20_010)).await.unwrap();
    assert_eq!(hosts.hosts[0].revision.as_deref(), Some("git:next"));
    assert_eq!(subjects(&f.drift(20_010).await.unwrap()), ["File[shop]"]);
    // A first report finished in an earlier second is late all the same.
    ingest(f, &check(1, 19_999, "git:older", "File[old]")).await;
    let hosts = f.hosts(&at(20_010)).await.unwrap();
    assert_eq!(hosts.hosts[0].revision.as_deref(), Some("git:next"));
    // An apply against the old store's last apply of its revision.
    let mut failed = report("web-2", ReportKind::Apply, 4_999, 30_000);
    failed.revision = "git:r2".into();
    failed.failures.push(failure("File[shop]", "sig"));
    failed.exit_code = 4;
    ingest(f, &failed).await;
    let mut first = report("web-2", ReportKind::Apply, 1, 30_000);
    first.revision = "git:r2".into();
    ingest(f, &first).await;
    let v = f.rollout(Some("git:r2")).await.unwrap();
    assert_eq!(v.converged, ["web-2"], "the new store's apply moves it");
}

#[test]
fn a_new_state_stores_first_report() {
    on_both!(a_new_state_stores_first_report_is_not_late);
}

/// 11820e8's rule takes a new state store's report numbered 1 as its
/// first, so when that one never reached the server (dropped from a full
/// outbox, refused) the new store's report 2, finished in the second of
/// the old store's last report, was judged late by its number: the new
/// store's check left the old findings and picture in place, and its apply
/// the revision's old outcome. A host now says which store made a report
/// (the `Datum-Store-Id` header, drawn when the store is made): one from
/// another store than the host's last starts a numbering of its own and is
/// late only when finished in an earlier second; within one store the
/// numbers order reports of a second as before.
async fn a_report_of_another_store_is_not_late_by_its_number<B: Backend>(f: &Fleet<B>) {
    const OLD: u128 = 0xa1;
    const NEW: u128 = 0xb2;
    let send = async |r: &datum_fleet::Report, store: u128| ingest_from_store(f, r, store).await;
    let revision = async || {
        let hosts = f.hosts(&at(20_010)).await.unwrap();
        hosts.hosts[0].revision.clone().unwrap_or_default()
    };
    let check = |seq: u64, at: i64, revision: &str, subject: &str| {
        let mut r = report("web-1", ReportKind::Check, seq, at);
        r.revision = revision.into();
        r.findings.push(finding(subject, "h1", "normal"));
        r
    };
    let subjects = async || {
        let v = f.drift(20_010).await.unwrap();
        v.clusters
            .iter()
            .map(|c| c.subject.clone())
            .collect::<Vec<_>>()
    };
    assert!(send(&check(5_000, 20_000, "git:old", "File[motd]"), OLD).await);
    // The new store's report 1 was lost; its report 2, same second.
    assert!(send(&check(2, 20_000, "git:new", "File[issue]"), NEW).await);
    assert_eq!(revision().await, "git:new", "not late: another store");
    assert_eq!(subjects().await, ["File[issue]"]);
    // Within the new store, its numbers order the second: its report 1
    // coming after 2 is late, 3 moves the picture.
    assert!(send(&check(1, 20_000, "git:one", "File[one]"), NEW).await);
    assert_eq!(revision().await, "git:new", "late within its store");
    assert_eq!(subjects().await, ["File[issue]"]);
    assert!(send(&check(3, 20_000, "git:three", "File[shop]"), NEW).await);
    assert_eq!(revision().await, "git:three");
    assert_eq!(subjects().await, ["File[shop]"]);
    // Another store's report of an earlier second is late all the same.
    assert!(send(&check(7, 19_999, "git:older", "File[old]"), OLD).await);
    assert_eq!(revision().await, "git:three");
    // An apply against the old store's last apply of its revision.
    let apply = |seq: u64, failed: bool| {
        let mut r = report("web-2", ReportKind::Apply, seq, 30_000);
        r.revision = "git:r2".into();
        if failed {
            r.failures.push(failure("File[shop]", "sig"));
            r.exit_code = 4;
        }
        r
    };
    assert!(send(&apply(4_999, true), OLD).await);
    assert!(send(&apply(2, false), NEW).await);
    let v = f.rollout(Some("git:r2")).await.unwrap();
    assert_eq!(v.converged, ["web-2"], "the new store's apply moves it");
    assert!(send(&apply(1, true), NEW).await);
    let v = f.rollout(Some("git:r2")).await.unwrap();
    assert_eq!(v.converged, ["web-2"], "its own earlier apply is late");
}

#[test]
fn a_report_of_another_store() {
    on_both!(a_report_of_another_store_is_not_late_by_its_number);
}

async fn a_late_apply_leaves_the_revisions_newer_outcome<B: Backend>(f: &Fleet<B>) {
    // The newer apply of git:r2 failed; an older, converged apply of it
    // arrives late.
    let mut newer = report("web-1", ReportKind::Apply, 2, 20_000);
    newer.revision = "git:r2".into();
    newer.failures.push(failure("File[shop]", "sig-new"));
    newer.exit_code = 4;
    ingest(f, &newer).await;
    let mut older = report("web-1", ReportKind::Apply, 1, 10_000);
    older.revision = "git:r2".into();
    assert!(ingest(f, &older).await, "stored: a report of its own");
    let v = f.rollout(Some("git:r2")).await.unwrap();
    assert_eq!(v.failed, vec!["web-1"], "the newer outcome stays");
    assert!(v.converged.is_empty(), "{:?}", v.converged);
    let hosts = f.hosts(&at(20_010)).await.unwrap();
    assert_eq!(hosts.hosts[0].reports, 2, "but the late report is counted");
    // A late failed apply of another host's converged revision adds no
    // failure either.
    let mut good = report("web-2", ReportKind::Apply, 2, 20_000);
    good.revision = "git:r2".into();
    ingest(f, &good).await;
    let mut bad = report("web-2", ReportKind::Apply, 1, 15_000);
    bad.revision = "git:r2".into();
    bad.failures.push(failure("File[shop]", "sig-old"));
    bad.exit_code = 4;
    ingest(f, &bad).await;
    let v = f.rollout(Some("git:r2")).await.unwrap();
    assert_eq!(v.converged, vec!["web-2"]);
    assert_eq!(v.failed, vec!["web-1"]);
    // A newer apply still moves it.
    let mut fixed = report("web-1", ReportKind::Apply, 3, 30_000);
    fixed.revision = "git:r2".into();
    ingest(f, &fixed).await;
    let v = f.rollout(Some("git:r2")).await.unwrap();
    assert_eq!(v.converged, vec!["web-1", "web-2"]);
    assert!(v.failed.is_empty(), "{:?}", v.failed);
}

#[test]
fn late_apply() {
    on_both!(a_late_apply_leaves_the_revisions_newer_outcome);
}

async fn a_partial_rollout_groups_failures_by_label<B: Backend>(f: &Fleet<B>) {
    for i in 0..6 {
        let version = if i < 4 { "1.24" } else { "1.26" };
        let mut r = report(&format!("web-{i}"), ReportKind::Apply, 1, 20_000 + i);
        r.labels.insert("nginx_version".into(), version.into());
        r.revision = "git:r2".into();
        if version == "1.26" {
            r.failures.push(failure("File[shop]", "sig-http3"));
            r.exit_code = 4;
        }
        ingest(f, &r).await;
    }
    let mut db = report("db-0", ReportKind::Apply, 1, 19_000);
    db.revision = "git:r1".into();
    db.labels = BTreeMap::from([("role".to_owned(), "db".to_owned())]);
    ingest(f, &db).await;
    let v = f.rollout(None).await.unwrap();
    assert_eq!(v.revision.as_deref(), Some("git:r2"));
    let summary = f.rollout_summary().await.unwrap();
    assert_eq!(
        (summary.converged, summary.failed, summary.pending),
        (4, 2, 1),
        "the overview's counts: db-0 has not applied git:r2"
    );
    assert_eq!(summary.groups, v.groups);
    assert_eq!(v.converged, vec!["web-0", "web-1", "web-2", "web-3"]);
    assert_eq!(v.failed, vec!["web-4", "web-5"]);
    assert_eq!(v.pending.len(), 1);
    assert_eq!(v.pending[0].revision.as_deref(), Some("git:r1"));
    assert_eq!(v.groups.len(), 1, "one line per group, not per host");
    assert_eq!(v.groups[0].labels["nginx_version"], vec!["1.26"]);
    assert_eq!(v.converged_labels["nginx_version"], vec!["1.24"]);
    let hosts = f.hosts(&at(20_010)).await.unwrap();
    let state = |n: &str| {
        hosts
            .hosts
            .iter()
            .find(|h| h.name == n)
            .unwrap()
            .state
            .clone()
    };
    assert_eq!(state("web-5"), "failed");
    assert_eq!(state("web-0"), "converged");
    // A later good apply of the same revision clears the failure.
    let mut fixed = report("web-5", ReportKind::Apply, 2, 20_100);
    fixed.revision = "git:r2".into();
    fixed.labels.insert("nginx_version".into(), "1.26".into());
    ingest(f, &fixed).await;
    let v = f.rollout(Some("git:r2")).await.unwrap();
    assert_eq!(v.failed, vec!["web-4"]);
}

#[test]
fn partial_rollout() {
    on_both!(a_partial_rollout_groups_failures_by_label);
}

async fn the_same_drift_on_many_hosts_is_one_cluster<B: Backend>(f: &Fleet<B>) {
    for i in 0..30 {
        let mut r = report(&format!("h{i:02}"), ReportKind::Check, 1, 30_000);
        r.findings
            .push(finding("File[nginx-conf]", "upgrade-obs", "normal"));
        if i == 7 {
            r.findings
                .push(finding("File[motd]", "person-obs", "normal"));
        }
        r.exit_code = 2;
        ingest(f, &r).await;
    }
    ingest(f, &report("clean", ReportKind::Check, 1, 30_000)).await;
    let v = f.drift(30_010).await.unwrap();
    assert_eq!(v.hosts_total, 31);
    assert_eq!(v.hosts_drifted, 30);
    assert_eq!(v.clusters.len(), 2);
    assert_eq!(
        (v.clusters[0].hosts, v.clusters[0].spread.as_str()),
        (30, "many hosts")
    );
    assert_eq!(v.clusters[1].subject, "File[motd]");
    assert_eq!(v.clusters[1].sample_hosts, vec!["h07"]);
    // A later clean check of h07 closes its findings.
    ingest(f, &report("h07", ReportKind::Check, 2, 30_100)).await;
    let v = f.drift(30_110).await.unwrap();
    assert_eq!(v.clusters.len(), 1);
    assert_eq!(v.clusters[0].hosts, 29);
}

#[test]
fn drift_clusters() {
    on_both!(the_same_drift_on_many_hosts_is_one_cluster);
}

fn writer(kind: &str, via: &str, user: Option<&str>, at: i64) -> datum_fleet::Writer {
    datum_fleet::Writer {
        kind: kind.into(),
        via: via.into(),
        user: user.map(str::to_owned),
        login_user: user.map(str::to_owned),
        unit: None,
        at,
    }
}

async fn the_drift_view_says_who_changed_it<B: Backend>(f: &Fleet<B>) {
    // The same upgrade on two hosts, by dpkg on one and not attributed on
    // the other; a person's edit on a third.
    for (host, by) in [
        (
            "h1",
            Some(writer(
                "package_manager",
                "dpkg (package upgrade)",
                Some("root"),
                50_000,
            )),
        ),
        ("h2", None),
    ] {
        let mut r = report(host, ReportKind::Check, 1, 50_000);
        let mut conf = finding("File[nginx-conf]", "upgrade-obs", "normal");
        conf.changed_by.extend(by);
        r.findings.push(conf);
        ingest(f, &r).await;
    }
    let mut r = report("h3", ReportKind::Check, 1, 50_000);
    let mut motd = finding("File[motd]", "person-obs", "normal");
    motd.changed_by.push(writer(
        "person",
        "sshd session from 10.0.0.7 port 51234",
        Some("alice"),
        49_990,
    ));
    r.findings.push(motd);
    ingest(f, &r).await;

    let v = f.drift(50_010).await.unwrap();
    let by = |subject: &str| {
        v.clusters
            .iter()
            .find(|c| c.subject == subject)
            .unwrap()
            .changed_by
            .clone()
    };
    assert_eq!(
        by("File[nginx-conf]"),
        vec!["root via dpkg (package upgrade)"]
    );
    assert_eq!(
        by("File[motd]"),
        vec!["alice via sshd session from 10.0.0.7 port 51234"]
    );
    // The API's JSON carries it too.
    let json = serde_json::to_value(&v).unwrap();
    assert!(
        json.to_string().contains("alice via sshd session"),
        "{json}"
    );

    // A later check of the same open finding with another writer replaces it.
    let mut r = report("h3", ReportKind::Check, 2, 50_100);
    let mut motd = finding("File[motd]", "person-obs", "normal");
    motd.changed_by
        .push(writer("person", "terminal /dev/pts/3", Some("bob"), 50_090));
    r.findings.push(motd);
    ingest(f, &r).await;
    let v = f.drift(50_110).await.unwrap();
    let motd = v
        .clusters
        .iter()
        .find(|c| c.subject == "File[motd]")
        .unwrap();
    assert_eq!(motd.changed_by, vec!["bob via terminal /dev/pts/3"]);
    // Findings nobody attributed say nothing.
    ingest(f, &report("h1", ReportKind::Check, 2, 50_200)).await;
    let v = f.drift(50_210).await.unwrap();
    let conf = v
        .clusters
        .iter()
        .find(|c| c.subject == "File[nginx-conf]")
        .unwrap();
    assert_eq!(conf.hosts, 1);
    assert!(conf.changed_by.is_empty(), "{:?}", conf.changed_by);
}

#[test]
fn drift_changed_by() {
    on_both!(the_drift_view_says_who_changed_it);
}

async fn a_class_check_replaces_only_its_class<B: Backend>(f: &Fleet<B>) {
    let mut r = report("h", ReportKind::Check, 1, 40_000);
    r.findings.push(finding("File[a]", "x", "critical"));
    r.findings.push(finding("File[b]", "y", "normal"));
    ingest(f, &r).await;
    let mut critical = report("h", ReportKind::Agent, 2, 40_100);
    critical.classes_checked = vec!["critical".into()];
    ingest(f, &critical).await;
    let v = f.drift(40_200).await.unwrap();
    let subjects: Vec<&str> = v.clusters.iter().map(|c| c.subject.as_str()).collect();
    assert_eq!(subjects, vec!["File[b]"]);
    assert_eq!(f.hosts(&at(40_200)).await.unwrap().hosts[0].findings, 1);
}

#[test]
fn class_scoped_findings() {
    on_both!(a_class_check_replaces_only_its_class);
}

async fn silent_and_never_seen_hosts_are_stale<B: Backend>(f: &Fleet<B>) {
    f.enroll("ghost", "host", "hash-ghost", 50_000)
        .await
        .unwrap();
    ingest(f, &report("quiet", ReportKind::Check, 1, 50_000)).await;
    ingest(f, &report("busy", ReportKind::Check, 1, 50_000)).await;
    ingest(f, &report("busy", ReportKind::Check, 2, 53_000)).await;
    // interval 600 s × 3 = 1800 s allowed.
    let v = f.stale(&at(54_000)).await.unwrap();
    let names: Vec<&str> = v.hosts.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, vec!["quiet", "ghost"], "most overdue first");
    assert_eq!(v.hosts[0].overdue_s, 4_000 - 1_800);
    assert!(v.hosts[1].never_reported);
    let hosts = f.hosts(&at(54_000)).await.unwrap();
    assert_eq!(hosts.states["stale"], 2);
    assert_eq!(hosts.states["converged"], 1);
    // The token's identity is known; another is not.
    assert_eq!(
        f.identity("hash-ghost").await.unwrap().unwrap().name,
        "ghost"
    );
    assert!(f.identity("forged").await.unwrap().is_none());
}

#[test]
fn staleness() {
    on_both!(silent_and_never_seen_hosts_are_stale);
}

async fn deep_checks_are_recorded_per_round<B: Backend>(f: &Fleet<B>) {
    let plan = datum_fleet::SamplingPlan {
        fraction: 0.5,
        round_s: 100,
        seed: 3,
        round: 10,
    };
    for (host, round) in [("a", 10), ("b", 9), ("c", 6)] {
        let mut r = report(host, ReportKind::Check, 1, 1_000);
        r.sampling = Some(datum_fleet::SamplingUsed { round, deep: true });
        ingest(f, &r).await;
    }
    let v = f.sampling(Some(&plan)).await.unwrap();
    assert_eq!(v.period_rounds, Some(2));
    assert_eq!(v.deep_in_period, 2);
    assert_eq!(v.overdue, vec!["c"]);
    assert_eq!(
        v.classes[0].bound_guaranteed_s, None,
        "interval 600 s > round 100 s"
    );
}

#[test]
fn sampling() {
    on_both!(deep_checks_are_recorded_per_round);
}

/// Two server processes on one PostgreSQL: the same reports delivered to
/// both at once (a host retrying against the other instance) are stored
/// once each. Each host's reports go in order, as its outbox sends them (a
/// report older than the five kept of a host is taken as already seen).
#[test]
fn two_servers_on_one_postgres_store_each_report_once() {
    let rt = crate::support::runtime();
    rt.block_on(async {
        let Some(url) = crate::support::postgres_url().await else {
            return;
        };
        use datum_server::store::{MIGRATIONS, postgres::PostgresBackend};
        let (a, b) = tokio::join!(
            PostgresBackend::open(&url, MIGRATIONS::POSTGRES),
            PostgresBackend::open(&url, MIGRATIONS::POSTGRES)
        );
        let (a, b) = (Fleet::new(a.unwrap()), Fleet::new(b.unwrap()));
        let mut tasks = Vec::new();
        for host in 0..10 {
            let (a, b) = (a.clone(), b.clone());
            tasks.push(tokio::spawn(async move {
                let mut stored = Vec::new();
                for seq in 1..=10u64 {
                    let r = report(
                        &format!("h{host}"),
                        ReportKind::Check,
                        seq,
                        60_000 + seq as i64,
                    );
                    let (x, y) = tokio::join!(ingest(&a, &r), ingest(&b, &r));
                    stored.push(u32::from(x) + u32::from(y));
                }
                stored
            }));
        }
        let mut stored = 0;
        for t in tasks {
            for n in t.await.unwrap() {
                assert_eq!(n, 1, "exactly one of the two stores a report");
                stored += n;
            }
        }
        assert_eq!(stored, 100);
        let hosts = b.hosts(&at(60_020)).await.unwrap();
        assert_eq!(hosts.hosts.len(), 10);
        assert!(hosts.hosts.iter().all(|h| h.reports == 5));
        let history = a.history("h3", 100).await.unwrap().unwrap();
        assert_eq!(history.daily[0].reports, 10);
    });
}

/// What the pages list in order follows byte order on every store, also
/// when times tie: a PostgreSQL database collated by a language (`a_b a-b
/// ab aB B`) must not list otherwise than SQLite (`B a-b aB a_b ab`).
async fn pages_list_ties_in_byte_order<B: Backend>(f: &Fleet<B>) {
    use datum_server::web::queries;
    let probe = crate::support::COLLATION_PROBE;
    let mut bytes = probe.to_vec();
    bytes.sort_unstable();
    // One host's findings on subjects the collations order apart.
    let mut check = report("h", ReportKind::Check, 1, 10_000);
    check.findings = probe.iter().map(|s| finding(s, "obs", "normal")).collect();
    assert!(ingest(f, &check).await);
    let subjects: Vec<String> = queries::findings(f, "h")
        .await
        .unwrap()
        .into_iter()
        .map(|x| x.subject)
        .collect();
    assert_eq!(subjects, bytes, "the host page's findings");
    // The host applies every revision in the same second.
    for (seq, revision) in probe.iter().enumerate() {
        let mut apply = report("h", ReportKind::Apply, 2 + seq as u64, 10_060);
        apply.revision = (*revision).to_owned();
        assert!(ingest(f, &apply).await);
    }
    let listed: Vec<String> = queries::host_revisions(f, "h", 20)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.revision)
        .collect();
    assert_eq!(listed, bytes, "the host page's revisions");
    let listed: Vec<String> = queries::revisions(f, 15)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.revision)
        .collect();
    assert_eq!(listed, bytes, "the rollout page's revisions");
}

#[test]
fn pages_list_in_byte_order() {
    let rt = crate::support::runtime();
    rt.block_on(async {
        let (_dir, lite) = crate::support::sqlite();
        pages_list_ties_in_byte_order(&lite).await;
        if let Some((pg, how, _)) = crate::support::postgres_collated().await {
            eprintln!("PostgreSQL database collated by {how}");
            pages_list_ties_in_byte_order(&pg).await;
        }
    });
}

/// Which revisions retention keeps of a host's (the newest
/// `reports_per_host`, equal times by name) is decided in byte order on
/// every store: a PostgreSQL database collated by a language kept others
/// than SQLite when applies shared a second.
async fn retention_breaks_ties_in_byte_order<B: Backend>(f: &Fleet<B>) {
    use datum_server::web::queries;
    for (seq, revision) in crate::support::COLLATION_PROBE.iter().enumerate() {
        let mut apply = report("h", ReportKind::Apply, 1 + seq as u64, 10_060);
        apply.revision = (*revision).to_owned();
        apply.failures = vec![failure("File[x]", "sig")];
        let raw = serde_json::to_string(&apply).unwrap();
        assert!(
            f.ingest(&apply, &raw, 10_060, Default::default(), 2)
                .await
                .unwrap()
        );
    }
    // The last two in byte order (B a-b aB a_b ab), whatever the database.
    let kept: Vec<String> = queries::host_revisions(f, "h", 20)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.revision)
        .collect();
    assert_eq!(kept, ["a_b", "ab"], "the revisions retention keeps");
    for (revision, failed) in [("a_b", true), ("ab", true), ("aB", false), ("B", false)] {
        let found = queries::failure(f, "h", revision, "File[x]").await.unwrap();
        assert_eq!(found.is_some(), failed, "the failures of {revision}");
    }
}

#[test]
fn retention_in_byte_order() {
    let rt = crate::support::runtime();
    rt.block_on(async {
        let (_dir, lite) = crate::support::sqlite();
        retention_breaks_ties_in_byte_order(&lite).await;
        if let Some((pg, how, _)) = crate::support::postgres_collated().await {
            eprintln!("PostgreSQL database collated by {how}");
            retention_breaks_ties_in_byte_order(&pg).await;
        }
    });
}

/// The latest revision (the rollout view's default, the overview's and
/// the metrics') among revisions applied in the same second is the first
/// in byte order on every store, not in the database's collation.
async fn the_latest_revision_of_a_tie_in_byte_order<B: Backend>(f: &Fleet<B>) {
    for (i, revision) in crate::support::COLLATION_PROBE.iter().enumerate() {
        let mut apply = report(&format!("h{i}"), ReportKind::Apply, 1, 10_060);
        apply.revision = (*revision).to_owned();
        assert!(ingest(f, &apply).await);
    }
    assert_eq!(f.latest_revision().await.unwrap().as_deref(), Some("B"));
    let rollout = f.rollout(None).await.unwrap();
    assert_eq!(rollout.revision.as_deref(), Some("B"));
    assert_eq!(rollout.converged, ["h4"]);
}

#[test]
fn the_latest_revision_in_byte_order() {
    let rt = crate::support::runtime();
    rt.block_on(async {
        let (_dir, lite) = crate::support::sqlite();
        the_latest_revision_of_a_tie_in_byte_order(&lite).await;
        if let Some((pg, how, _)) = crate::support::postgres_collated().await {
            eprintln!("PostgreSQL database collated by {how}");
            the_latest_revision_of_a_tie_in_byte_order(&pg).await;
        }
    });
}

/// Every host and stack (the stacks page lists them so) comes by name in
/// byte order, not in the order the store holds its rows (PostgreSQL's
/// moves a row that is written again to the end).
async fn host_rows_come_by_name<B: Backend>(f: &Fleet<B>) {
    let mut names: Vec<&str> = crate::support::COLLATION_PROBE.to_vec();
    names.reverse();
    for (i, name) in names.iter().enumerate() {
        f.enroll(name, "stack", &format!("hash-{i}"), 10_000)
            .await
            .unwrap();
    }
    // The first enrolled reports last: its row is written again.
    for (seq, name) in names.iter().rev().enumerate() {
        assert!(ingest(f, &report(name, ReportKind::Stack, 1 + seq as u64, 10_060)).await);
    }
    names.sort_unstable();
    let rows: Vec<String> = f
        .host_rows()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(rows, names);
}

#[test]
fn host_rows_by_name() {
    let rt = crate::support::runtime();
    rt.block_on(async {
        let (_dir, lite) = crate::support::sqlite();
        host_rows_come_by_name(&lite).await;
        if let Some((pg, how, _)) = crate::support::postgres_collated().await {
            eprintln!("PostgreSQL database collated by {how}");
            host_rows_come_by_name(&pg).await;
        }
    });
}
