//! The current state kept at ingest says what the history says: each fast
//! view equals the same view computed from the stored rows the slow way
//! (the pure functions of `views` over whole rows), on both stores, after
//! many kinds of reports; and reports arriving together share transactions
//! without losing or doubling any.

use std::collections::BTreeMap;

use datum_fleet::{Report, ReportKind, TreeFingerprint};
use datum_server::fleet::Fleet;
use datum_server::store::{Backend, MIGRATIONS, Stmt, Val};
use datum_server::views::{self, FindingRow, Staleness};

use crate::on_both;
use crate::support::{failure, finding, ingest, ingest_from_store, report};

fn at(now: i64, factor: f64) -> Staleness {
    Staleness {
        now,
        factor,
        first_report_within: 3600,
    }
}

/// Every open finding, read straight from the table.
async fn findings<B: Backend>(f: &Fleet<B>) -> Vec<FindingRow> {
    f.backend()
        .rows(Stmt::new(
            "SELECT host, signature, subject, category, class, paths, observed, first_seen, last_seen FROM findings",
            vec![],
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let t = |i: usize| r[i].text().unwrap_or("").to_owned();
            FindingRow {
                host: t(0),
                signature: t(1),
                subject: t(2),
                category: t(3),
                class: t(4),
                paths: serde_json::from_str(&t(5)).unwrap(),
                observed: Some(t(6)).filter(|o| !o.is_empty()),
                first_seen: r[7].int().unwrap(),
                last_seen: r[8].int().unwrap(),
            }
        })
        .collect()
}

/// The drift view the clusters give, and the one the findings give,
/// compared on everything but the sighting times (which the clusters keep
/// across hosts that left: see the migration's header).
async fn assert_clusters_match_findings<B: Backend>(f: &Fleet<B>, now: i64, step: &str) {
    let kept = f.drift(now).await.unwrap();
    // The overview's summary: the view's first clusters (their sample
    // hosts read per cluster) and its counts.
    for shown in [1, 2, usize::MAX] {
        assert_eq!(
            f.drift_summary(now, shown).await.unwrap(),
            views::DriftSummary::of(&kept, shown),
            "{step}: the overview's first {shown} clusters"
        );
    }
    let rows = findings(f).await;
    let total = f
        .hosts(&at(now, 3.0))
        .await
        .unwrap()
        .hosts
        .iter()
        .filter(|h| h.last_report.is_some())
        .count() as u64;
    let computed = views::drift(&rows, total, now);
    let key = |v: &views::DriftView| {
        let mut c: Vec<_> = v
            .clusters
            .iter()
            .map(|c| {
                (
                    c.signature.clone(),
                    c.observed.clone(),
                    c.hosts,
                    c.subject.clone(),
                    c.category.clone(),
                    c.paths.clone(),
                    c.sample_hosts.clone(),
                    c.variants,
                    c.spread.clone(),
                )
            })
            .collect();
        c.sort();
        (v.hosts_total, v.hosts_drifted, c)
    };
    assert_eq!(key(&kept), key(&computed), "after {step}");
}

/// A small deterministic generator (the same sequence on both stores).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

async fn clusters_follow_the_findings<B: Backend>(f: &Fleet<B>) {
    let mut rng = Lcg(7);
    let subjects = [
        "File[a]",
        "File[b]",
        "File[c]",
        "Package[nginx]",
        "File[secret]",
    ];
    let classes = ["normal", "critical"];
    let mut seq: BTreeMap<String, u64> = BTreeMap::new();
    let mut sent: Vec<Report> = Vec::new();
    for step in 0..120 {
        let host = format!("h{:02}", rng.next(12));
        let n = seq.entry(host.clone()).or_insert(0);
        *n += 1;
        let kind = if rng.next(3) == 0 {
            ReportKind::Agent
        } else {
            ReportKind::Check
        };
        let mut r = report(&host, kind, *n, 100_000 + step);
        if rng.next(3) == 0 {
            r.classes_checked = vec![classes[rng.next(2) as usize].to_owned()];
        }
        for s in subjects {
            if rng.next(2) == 0 {
                continue;
            }
            let class = if s == "File[a]" { "critical" } else { "normal" };
            if !r.classes_checked.is_empty() && r.classes_checked[0] != class {
                continue;
            }
            // Few observed values, so hosts meet in clusters.
            let mut finding = finding(s, &format!("obs-{}", rng.next(3)), class);
            if s == "File[secret]" {
                finding.observed = None;
            }
            finding.first_seen = 50_000 + rng.next(1000) as i64;
            r.findings.push(finding);
        }
        assert!(ingest(f, &r).await);
        sent.push(r);
        // Now and then, an old report delivered again (a lost reply).
        if rng.next(5) == 0 {
            let again = &sent[rng.next(sent.len() as u64) as usize];
            assert!(!ingest(f, again).await, "a repeated key is a duplicate");
        }
        if step % 10 == 9 {
            assert_clusters_match_findings(f, 200_000, &format!("step {step}")).await;
        }
    }
    // Every host comes back clean: no cluster is left.
    for (host, n) in &seq {
        ingest(f, &report(host, ReportKind::Check, n + 1, 300_000)).await;
    }
    let v = f.drift(300_000).await.unwrap();
    assert!(v.clusters.is_empty(), "{:?}", v.clusters);
    assert_eq!(v.hosts_drifted, 0);
    let left = f
        .backend()
        .rows(Stmt::new("SELECT count(*) FROM drift_clusters", vec![]))
        .await
        .unwrap();
    assert_eq!(left[0][0], Val::Int(0), "empty clusters are removed");
}

#[test]
fn drift_clusters_kept_at_ingest_equal_the_findings() {
    on_both!(clusters_follow_the_findings);
}

async fn a_cluster_remembers_its_first_sighting<B: Backend>(f: &Fleet<B>) {
    let seen = |host: &str, seq: u64, at: i64, first: i64| {
        let mut r = report(host, ReportKind::Check, seq, at);
        let mut x = finding("File[motd]", "edited", "normal");
        x.first_seen = first;
        r.findings.push(x);
        r
    };
    ingest(f, &seen("a", 1, 1_000, 100)).await;
    ingest(f, &seen("b", 1, 1_100, 200)).await;
    let first = |v: &views::DriftView| {
        (
            v.clusters[0].first_seen.clone(),
            v.clusters[0].last_seen.clone(),
        )
    };
    let v = f.drift(2_000).await.unwrap();
    assert_eq!(first(&v), (views::rfc3339(100), views::rfc3339(1_100)));
    // The first host is cleaned: the cluster is still the one first seen
    // at 100, last shown at 1,200.
    ingest(f, &report("a", ReportKind::Check, 2, 1_200)).await;
    ingest(f, &seen("b", 2, 1_300, 200)).await;
    let v = f.drift(2_000).await.unwrap();
    assert_eq!(v.clusters[0].hosts, 1);
    assert_eq!(first(&v), (views::rfc3339(100), views::rfc3339(1_300)));
    // Gone everywhere, then back: a new cluster.
    ingest(f, &report("b", ReportKind::Check, 3, 1_400)).await;
    assert!(f.drift(2_000).await.unwrap().clusters.is_empty());
    ingest(f, &seen("a", 3, 1_500, 1_450)).await;
    let v = f.drift(2_000).await.unwrap();
    assert_eq!(first(&v), (views::rfc3339(1_450), views::rfc3339(1_500)));
}

#[test]
fn cluster_sightings() {
    on_both!(a_cluster_remembers_its_first_sighting);
}

/// A cluster of more hosts than it names: the ones named are the first in
/// byte order (as the view sorts them), whatever the database's collation.
async fn sample_hosts_are_the_first_in_byte_order<B: Backend>(f: &Fleet<B>) {
    let mut names: Vec<String> = crate::support::COLLATION_PROBE
        .iter()
        .chain(&["Yak", "Zed"])
        .map(|s| (*s).to_owned())
        .collect();
    names.extend((0..views::SAMPLE_HOSTS).map(|i| format!("h{i:02}")));
    for (i, host) in names.iter().enumerate() {
        let mut r = report(host, ReportKind::Check, 1, 1_000 + i as i64);
        r.findings.push(finding("File[motd]", "edited", "normal"));
        assert!(ingest(f, &r).await);
    }
    let mut first = names.clone();
    first.sort();
    first.truncate(views::SAMPLE_HOSTS);
    // Byte order: "B" "Yak" "Zed" "a-b" "aB" "a_b" "ab" "h00"...; en-US
    // would name "a_b" "a-b" "ab" "aB" "B" "h00"... and neither "Yak" nor
    // "Zed".
    assert_eq!(first[..7], ["B", "Yak", "Zed", "a-b", "aB", "a_b", "ab"]);
    let drift = f.drift(5_000).await.unwrap();
    assert_eq!(drift.clusters[0].hosts, names.len() as u64);
    assert_eq!(drift.clusters[0].sample_hosts, first, "the drift view");
    let summary = f.drift_summary(5_000, 1).await.unwrap();
    assert_eq!(summary.clusters[0].sample_hosts, first, "the overview");
}

#[test]
fn sample_hosts_in_byte_order() {
    let rt = crate::support::runtime();
    rt.block_on(async {
        let (_dir, lite) = crate::support::sqlite();
        sample_hosts_are_the_first_in_byte_order(&lite).await;
        if let Some((pg, how, _)) = crate::support::postgres_collated().await {
            eprintln!("PostgreSQL database collated by {how}");
            sample_hosts_are_the_first_in_byte_order(&pg).await;
        }
    });
}

/// The drift samples ask for byte order; the cluster index must hold the
/// hosts in that order, or PostgreSQL sorts every host of a cluster (or
/// every finding) to pick the first few: 0.06 ms against 12 ms for a
/// cluster of 50,000 hosts, per cluster, on every overview.
#[test]
fn the_drift_samples_are_read_in_the_cluster_index_s_order() {
    let rt = crate::support::runtime();
    rt.block_on(async {
        // In a database whose collation is not byte order (a C-collated
        // one would hide a cluster index in the database's collation).
        let Some((_migrated, _, url)) = crate::support::postgres_collated().await else {
            return;
        };
        let (db, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        // A sort made as dear as the planner allows: it sorts only when no
        // index gives the order.
        db.batch_execute("SET enable_sort = off").await.unwrap();
        for (sql, values) in [
            (
                datum_server::fleet::SAMPLE_HOSTS_OF_A_CLUSTER,
                &["'s'", "'o'", "20"][..],
            ),
            (
                datum_server::fleet::SAMPLE_HOSTS_OF_EVERY_CLUSTER,
                &["20"][..],
            ),
        ] {
            let mut sql = sql.to_owned();
            for (i, value) in values.iter().enumerate() {
                sql = sql.replace(&format!("${}", i + 1), value);
            }
            let plan: Vec<String> = db
                .query(&format!("EXPLAIN {sql}"), &[])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            let plan = plan.join("\n");
            assert!(!plan.contains("Sort"), "{sql}\n{plan}");
            assert!(plan.contains("findings_by_cluster"), "{sql}\n{plan}");
        }
    });
}

/// A fleet with a bit of everything: converged, failed, drifted (findings
/// and a Tree), quarantined, a stack, a host never heard from, a stale one.
async fn a_mixed_fleet<B: Backend>(f: &Fleet<B>) {
    f.enroll("ghost", "host", "hash-ghost", 9_000)
        .await
        .unwrap();
    let web = |i: i64, kind: ReportKind, seq: u64, at: i64| {
        let mut r = report(&format!("web-{i}"), kind, seq, at);
        r.labels.insert(
            "nginx_version".into(),
            if i < 4 { "1.24" } else { "1.26" }.into(),
        );
        r
    };
    for i in 0..6 {
        let mut r = web(i, ReportKind::Apply, 1, 10_000 + i);
        r.revision = "git:r2".into();
        if i >= 4 {
            r.failures.push(failure("File[shop]", "sig-http3"));
            r.exit_code = 4;
        }
        ingest(f, &r).await;
    }
    let mut drifted = web(1, ReportKind::Check, 2, 10_100);
    drifted
        .findings
        .push(finding("File[motd]", "edited", "normal"));
    drifted.trees.push(TreeFingerprint {
        resource: "Tree[limits]".into(),
        declared: "aa".into(),
        observed: Some("bb".into()),
    });
    ingest(f, &drifted).await;
    let mut q = web(2, ReportKind::Check, 2, 10_100);
    q.quarantined.push(datum_fleet::report::Quarantined {
        target: "File[motd]".into(),
        source: "person".into(),
        reason: None,
        since: None,
    });
    ingest(f, &q).await;
    let mut old = report("db-0", ReportKind::Apply, 1, 1_000);
    old.revision = "git:r1".into();
    ingest(f, &old).await;
    let mut stack = report("prod-stack", ReportKind::Stack, 1, 10_050);
    stack
        .findings
        .push(finding("aws_s3_bucket.logs", "x", "stack"));
    f.enroll("prod-stack", "stack", "hash-stack", 9_000)
        .await
        .unwrap();
    ingest(f, &stack).await;
}

async fn the_hosts_document_is_the_hosts_view_of_the_rows<B: Backend>(f: &Fleet<B>) {
    a_mixed_fleet(f).await;
    for now in [10_200, 13_000, 20_000] {
        let staleness = at(now, 3.0);
        let rows = f.host_rows().await.unwrap();
        let slow = views::hosts(&rows, &staleness);
        let bytes = f.hosts_json(&staleness).await.unwrap();
        let raw: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(raw["format_version"], "1", "the CLI's convention");
        let fast: views::HostsView = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(fast, slow, "at {now}");
        assert_eq!(f.hosts(&staleness).await.unwrap(), slow);
    }
    let v = f.hosts(&at(10_200, 3.0)).await.unwrap();
    let state = |n: &str| v.hosts.iter().find(|h| h.name == n).unwrap().state.clone();
    assert_eq!(
        [
            state("web-0"),
            state("web-1"),
            state("web-2"),
            state("web-4"),
            state("ghost"),
            state("db-0")
        ],
        [
            "converged",
            "drifted",
            "quarantined",
            "failed",
            "new",
            "stale"
        ]
        .map(String::from)
    );
    // The rollout from the revision's rows is the rollout of every row.
    let applied = f
        .backend()
        .rows(Stmt::new(
            "SELECT host, outcome, last_at, changed, failed FROM host_revisions WHERE revision = 'git:r2'",
            vec![],
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| views::RevisionRow {
            host: r[0].text().unwrap().into(),
            outcome: r[1].text().unwrap().into(),
            last_at: r[2].int().unwrap(),
            changed: 0,
            failed: 0,
        })
        .collect::<Vec<_>>();
    let failures = f
        .backend()
        .rows(Stmt::new(
            "SELECT host, resource, phase, validator, validator_version, exit_status, signature, message \
             FROM failures WHERE revision = 'git:r2'",
            vec![],
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let t = |i: usize| r[i].text().map(str::to_owned);
            views::FailureRow {
                host: t(0).unwrap(),
                resource: t(1).unwrap(),
                phase: t(2).unwrap(),
                validator: t(3),
                validator_version: t(4),
                exit_status: r[5].int(),
                signature: t(6).unwrap(),
                message: t(7).unwrap(),
            }
        })
        .collect::<Vec<_>>();
    let fast = f.rollout(None).await.unwrap();
    let slow = views::rollout(
        Some("git:r2".into()),
        &f.host_rows().await.unwrap(),
        &applied,
        &failures,
    );
    assert_eq!(fast, slow);
    // The overview's summary (counts from grouped rows) says the same.
    assert_eq!(
        f.rollout_summary().await.unwrap(),
        views::RolloutSummary::of(&fast)
    );
    assert_eq!(fast.groups[0].labels["nginx_version"], vec!["1.26"]);
    assert_eq!(
        fast.pending.len(),
        2,
        "db-0 and the ghost: {:?}",
        fast.pending
    );
}

#[test]
fn hosts_document() {
    on_both!(the_hosts_document_is_the_hosts_view_of_the_rows);
}

/// Reports a host's outbox dropped (full, during a long outage) are
/// announced once, with the next delivery; the host's row adds them up, so
/// the report after it (announcing 0) does not wipe them out, and a
/// duplicate delivery of the announcing report does not count them twice,
/// whatever count it carries (a host repeats the count of its first
/// attempt, datum_fleet::Queue::announce: the server need not know which).
async fn dropped_reports_add_up<B: Backend>(f: &Fleet<B>) {
    let deliver = async |seq: u64, dropped: u64| {
        let r = report("web-1", ReportKind::Check, seq, 1_000 + seq as i64);
        let raw = serde_json::to_string(&r).unwrap();
        let headers = datum_server::fleet::OutboxHeaders {
            depth: 0,
            dropped,
            store: None,
        };
        f.ingest(&r, &raw, r.finished_at, headers, 5).await.unwrap()
    };
    assert!(deliver(1, 0).await);
    assert!(deliver(2, 7).await);
    assert!(!deliver(2, 7).await, "a duplicate");
    assert!(!deliver(2, 11).await, "a duplicate's count is ignored");
    assert!(deliver(3, 0).await);
    assert!(deliver(4, 2).await);
    assert!(deliver(5, 0).await);
    let row = f.host("web-1").await.unwrap().unwrap();
    assert_eq!(row.outbox_dropped, 9);
    // A count no outbox holds is bounded: the total stays an integer, and
    // the host's later reports are still taken, on both stores.
    assert!(deliver(6, u64::MAX).await);
    assert!(deliver(7, 5).await);
    let row = f.host("web-1").await.unwrap().unwrap();
    assert_eq!(row.outbox_dropped, 9 + u64::from(u32::MAX) + 5);
}

#[test]
fn dropped_reports() {
    on_both!(dropped_reports_add_up);
}

async fn stale_in_sql_is_the_rule_to_the_second<B: Backend>(f: &Fleet<B>) {
    // Interval 7 s: with factor 2.5 a host may be silent ceil(17.5) = 18 s,
    // with 2.0001 ceil(14.0007) = 15 s.
    for age in 12..=20 {
        let mut r = report(&format!("h{age}"), ReportKind::Check, 1, 1_000 - age);
        r.expected_interval_s = 7;
        ingest(f, &r).await;
    }
    for (factor, first_stale) in [(2.5, 19), (2.0001, 16), (3.0, 22)] {
        let s = at(1_000, factor);
        let v = f.stale(&s).await.unwrap();
        let mut names: Vec<String> = v.hosts.iter().map(|h| h.name.clone()).collect();
        names.sort();
        let mut expected: Vec<String> = (first_stale..=20).map(|a| format!("h{a}")).collect();
        expected.sort();
        assert_eq!(names, expected, "factor {factor}");
        assert_eq!(v, views::stale(&f.host_rows().await.unwrap(), &s));
    }
}

#[test]
fn stale_filter() {
    on_both!(stale_in_sql_is_the_rule_to_the_second);
}

async fn reports_arriving_together_share_transactions<B: Backend>(f: &Fleet<B>) {
    let mut tasks = Vec::new();
    for h in 0..40 {
        for seq in 1..=3u64 {
            let mut r = report(
                &format!("h{h:02}"),
                ReportKind::Check,
                seq,
                5_000 + seq as i64,
            );
            r.findings
                .push(finding("File[motd]", &format!("v{}", h % 3), "normal"));
            // Each report twice at once: a host retrying while its first
            // delivery is still being written.
            for _ in 0..2 {
                let (f, r) = (f.clone(), r.clone());
                tasks.push(tokio::spawn(async move { ingest(&f, &r).await }));
            }
        }
    }
    let mut stored = 0;
    for t in tasks {
        stored += u32::from(t.await.unwrap());
    }
    assert_eq!(stored, 120, "every report once, every repeat a duplicate");
    let stats = f.ingest_stats();
    assert_eq!(stats.reports, 240);
    assert!(
        stats.transactions < stats.reports,
        "reports that arrived together shared transactions: {stats:?}"
    );
    let hosts = f.hosts(&at(5_010, 3.0)).await.unwrap();
    assert_eq!(hosts.hosts.len(), 40);
    assert!(
        hosts
            .hosts
            .iter()
            .all(|h| h.reports == 3 && h.findings == 1)
    );
    let drift = f.drift(5_010).await.unwrap();
    let sizes: Vec<u64> = drift.clusters.iter().map(|c| c.hosts).collect();
    assert_eq!(sizes, vec![14, 13, 13]);
    assert_eq!(
        f.history("h07", 10).await.unwrap().unwrap().daily[0].reports,
        3
    );
}

#[test]
fn group_commit() {
    on_both!(reports_arriving_together_share_transactions);
}

/// A report PostgreSQL refuses (a NUL character in a text column) fails
/// alone: the other reports of its batch are stored.
#[test]
fn a_refused_report_fails_alone_in_its_batch() {
    let rt = crate::support::runtime();
    rt.block_on(async {
        let Some(f) = crate::support::postgres().await else {
            return;
        };
        let mut tasks = Vec::new();
        for h in 0..20 {
            let mut r = report(&format!("h{h:02}"), ReportKind::Check, 1, 7_000);
            if h == 9 {
                r.findings.push(finding("File[\u{0}odd]", "x", "normal"));
            }
            let f = f.clone();
            tasks.push(tokio::spawn(async move {
                let raw = serde_json::to_string(&r).unwrap();
                f.ingest(&r, &raw, 7_000, Default::default(), 5).await
            }));
        }
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.unwrap());
        }
        for (h, r) in results.iter().enumerate() {
            if h == 9 {
                assert!(r.is_err(), "the NUL is refused");
            } else {
                assert!(matches!(r, Ok(true)), "h{h:02}: {r:?}");
            }
        }
        assert_eq!(f.hosts(&at(7_010, 3.0)).await.unwrap().hosts.len(), 19);
    });
}

/// A store made by schema 1 (before the current-state tables) and filled
/// the way that schema's server filled it: after the migration and the
/// backfill, the views show what was there.
#[test]
fn a_store_from_schema_1_is_migrated_and_backfilled() {
    let rt = crate::support::runtime();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.db");
        let old = datum_server::store::sqlite::SqliteBackend::open(&path, &MIGRATIONS::SQLITE[..1]).unwrap();
        old.execute(vec![
            Stmt::new(
                "INSERT INTO hosts (name, kind, enrolled_at, labels, last_report_at, last_report_kind, revision, \
                 counts, resources, open_findings, expected_interval_s, reports_held, last_apply_revision) \
                 VALUES ('web-1', 'host', 1, '{\"role\":\"web\"}', 1000, 'check', 'git:r1', '{\"converged\":3}', 3, 1, 600, 2, 'git:r1')",
                vec![],
            ),
            Stmt::new(
                "INSERT INTO findings (host, signature, subject, category, class, paths, observed, first_seen, last_seen) \
                 VALUES ('web-1', 'sig', 'File[key]', 'changed_outside', 'normal', '[\"content\"]', NULL, 900, 1000)",
                vec![],
            ),
            Stmt::new(
                "INSERT INTO host_revisions (host, revision, first_at, last_at, outcome, changed, failed) \
                 VALUES ('web-1', 'git:r1', 500, 500, 'converged', 1, 0)",
                vec![],
            ),
        ])
        .await
        .unwrap();
        drop(old);
        let f = match datum_server::open_store(dir.path(), "sqlite").await.unwrap() {
            datum_server::AnyFleet::Sqlite(f) => f,
            datum_server::AnyFleet::Postgres(_) => unreachable!(),
        };
        let hosts = f.hosts(&at(1_100, 3.0)).await.unwrap();
        assert_eq!(hosts.hosts[0].labels["role"], "web");
        assert_eq!(hosts.hosts[0].revision.as_deref(), Some("git:r1"));
        assert_eq!(hosts.hosts[0].state, "drifted");
        let drift = f.drift(1_100).await.unwrap();
        assert_eq!(drift.clusters.len(), 1);
        assert_eq!(drift.clusters[0].observed, None, "a sensitive finding");
        assert_eq!(drift.clusters[0].sample_hosts, vec!["web-1"]);
        let rollout = f.rollout(None).await.unwrap();
        assert_eq!(rollout.revision.as_deref(), Some("git:r1"));
        assert_eq!(rollout.converged, vec!["web-1"]);
        assert_eq!(f.backfill().await.unwrap(), 0, "once is enough");
    });
}

/// How many rows `sql` counts.
async fn count<B: Backend>(f: &Fleet<B>, sql: &'static str) -> i64 {
    f.backend().rows(Stmt::new(sql, vec![])).await.unwrap()[0][0]
        .int()
        .unwrap()
}

/// A host's outcome and failures of each revision it applied were kept for
/// ever, outside `retention.reports_per_host`: an enrolled host applying a
/// new revision each time with thousands of failures grew the store without
/// bound (60 such reports of 2,000 failures: 120,000 rows, 56 MB, while its
/// reports were cut to 100). A host keeps the revisions of its newest
/// `reports_per_host` (here 5) applies; the fleet forgets a revision no
/// host keeps, and keeps one another host still holds.
async fn a_hosts_revisions_are_kept_as_its_reports_are<B: Backend>(f: &Fleet<B>) {
    let now = 1_800_000_000;
    f.enroll("web-1", "host", "h1", now).await.unwrap();
    f.enroll("web-2", "host", "h2", now).await.unwrap();
    let mut shared = report("web-2", ReportKind::Apply, 1, now);
    shared.revision = "git:r00".into();
    ingest(f, &shared).await;
    for i in 0..12u64 {
        let at = now + 60 * i as i64;
        let mut r = report("web-1", ReportKind::Apply, i + 1, at);
        r.revision = format!("git:r{i:02}");
        r.exit_code = 4;
        r.failures = (0..3)
            .map(|j| failure(&format!("File[f{j}]"), &format!("s{j}")))
            .collect();
        ingest(f, &r).await;
    }
    let kept = f
        .backend()
        .rows(Stmt::new(
            "SELECT revision FROM host_revisions WHERE host = 'web-1' ORDER BY revision",
            vec![],
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| r[0].text().unwrap().to_owned())
        .collect::<Vec<_>>();
    assert_eq!(
        kept,
        ["git:r07", "git:r08", "git:r09", "git:r10", "git:r11"]
    );
    assert_eq!(
        count(f, "SELECT count(*) FROM failures WHERE host = 'web-1'").await,
        15
    );
    // r00 is still web-2's; r01 to r06 are nobody's.
    let revisions = f
        .backend()
        .rows(Stmt::new(
            "SELECT revision FROM revisions ORDER BY revision",
            vec![],
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| r[0].text().unwrap().to_owned())
        .collect::<Vec<_>>();
    assert_eq!(
        revisions,
        [
            "git:r00", "git:r07", "git:r08", "git:r09", "git:r10", "git:r11"
        ]
    );
    let rollout = f.rollout(Some("git:r00")).await.unwrap();
    assert_eq!(rollout.converged.len(), 1, "{rollout:?}");
}

#[test]
fn revisions_retention() {
    on_both!(a_hosts_revisions_are_kept_as_its_reports_are);
}

/// Each deep check a host reports is a row of `deep_checks` (one per host
/// and sampling round), which the sampling view reads only for the last
/// two periods; nothing removed them, so they grew by a row per host and
/// round for ever (and by whatever rounds a host states). They go with the
/// daily aggregates, after `retention.daily_days`.
async fn deep_checks_go_with_the_daily_aggregates<B: Backend>(f: &Fleet<B>) {
    let now = 1_800_000_000;
    f.enroll("web-1", "host", "h1", now).await.unwrap();
    for (seq, at, round) in [(1, now - 10 * 86_400, 499_760u64), (2, now, 500_000)] {
        let mut r = report("web-1", ReportKind::Check, seq, at);
        r.sampling = Some(datum_fleet::SamplingUsed { round, deep: true });
        ingest(f, &r).await;
    }
    assert_eq!(count(f, "SELECT count(*) FROM deep_checks").await, 2);
    f.prune(now, 3).await.unwrap();
    assert_eq!(count(f, "SELECT count(*) FROM deep_checks").await, 1);
}

#[test]
fn deep_checks_retention() {
    on_both!(deep_checks_go_with_the_daily_aggregates);
}

/// Reports stored in one transaction, as the group commit stores reports
/// that arrive together.
async fn together<B: Backend>(f: &Fleet<B>, reports: &[Report]) {
    let fresh = f
        .ingest_together(reports.iter().map(submitted).collect())
        .await
        .unwrap();
    assert!(fresh.iter().all(|n| *n), "{fresh:?}");
}

/// `r` as the API hands it to ingest (retention keeping 5 reports a host).
fn submitted(r: &Report) -> datum_server::ingest::Submitted {
    datum_server::ingest::Submitted {
        report: r.clone(),
        raw: serde_json::to_string(r).unwrap(),
        received_at: r.finished_at,
        outbox: Default::default(),
        reports_kept: 5,
    }
}

/// A drift cluster whose last host leaves is gone, and a host showing the
/// same drift later starts it again (its first sighting, its checks). When
/// the host leaving and the host joining reported in one batch, the
/// cluster lived on: it kept the first sighting and checks of a host that
/// no longer had the drift. A batch now moves a cluster as its reports
/// stored one after another in host order would.
async fn a_cluster_that_moves_to_another_host_in_one_batch_starts_again<B: Backend>(f: &Fleet<B>) {
    let with = |host: &str, seq: u64, at: i64, first_seen: i64, checks: u64| {
        let mut r = report(host, ReportKind::Check, seq, at);
        let mut drift = finding("File[motd]", "o1", "normal");
        drift.first_seen = first_seen;
        drift.checks = Some(checks);
        r.findings.push(drift);
        r
    };
    let without = |host: &str, seq: u64, at: i64| report(host, ReportKind::Check, seq, at);
    let cluster = |f: &Fleet<B>| {
        let f = f.clone();
        async move {
            let rows = f
                .backend()
                .rows(Stmt::new(
                    "SELECT hosts, first_seen, checks FROM drift_clusters",
                    vec![],
                ))
                .await
                .unwrap();
            rows.iter()
                .map(|r| r.iter().map(|v| v.int().unwrap()).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        }
    };
    // Host b had it since 100 (9 checks); in one batch b is rid of it and
    // c (after b in host order) shows it since 5,000: it starts again.
    ingest(f, &with("b", 1, 1_000, 100, 9)).await;
    assert_eq!(cluster(f).await, [[1, 100, 9]]);
    together(f, &[without("b", 2, 5_000), with("c", 1, 5_000, 5_000, 1)]).await;
    assert_eq!(cluster(f).await, [[1, 5_000, 1]], "started again by c");
    // a (before c in host order) shows it since 6,000, then c is rid of
    // it: it lives on, as it would with a's report first.
    together(f, &[with("a", 1, 7_000, 6_000, 1), without("c", 2, 7_000)]).await;
    assert_eq!(cluster(f).await, [[1, 5_000, 1]], "lives on with a");
    // Both hosts showing it leave, and one comes back in the same batch.
    ingest(f, &with("b", 3, 8_000, 8_000, 1)).await;
    assert_eq!(cluster(f).await, [[2, 5_000, 1]]);
    together(
        f,
        &[
            without("a", 2, 9_000),
            without("b", 4, 9_000),
            with("c", 3, 9_000, 9_000, 1),
        ],
    )
    .await;
    assert_eq!(cluster(f).await, [[1, 9_000, 1]], "started again by c");
    // Everyone leaves: gone.
    together(f, &[without("c", 4, 10_000)]).await;
    assert!(cluster(f).await.is_empty());
    // The fast view agrees with the one computed from every finding.
    let rows = findings(f).await;
    assert!(rows.is_empty(), "{rows:?}");
}

#[test]
fn a_cluster_moving_in_one_batch() {
    on_both!(a_cluster_that_moves_to_another_host_in_one_batch_starts_again);
}

/// Hosts may class one resource differently (a host's own layer puts it
/// in `critical`, the others' in `normal`). A drift cluster took the class
/// of the host that opened it, so the same reports arriving in another
/// order (or batched otherwise) showed another class. It is now the first
/// in byte order of the classes the hosts showing it since it started
/// give it, whatever their order.
async fn a_clusters_class_does_not_depend_on_who_reported_first<B: Backend>(f: &Fleet<B>) {
    let with = |host: &str, observed: &str, class: &str| {
        let mut r = report(host, ReportKind::Check, 1, 5_000);
        r.findings.push(finding("File[motd]", observed, class));
        r
    };
    // o1: normal first, then critical; o2: critical first; o3: in one batch.
    ingest(f, &with("a", "o1", "normal")).await;
    ingest(f, &with("b", "o1", "critical")).await;
    ingest(f, &with("c", "o2", "critical")).await;
    ingest(f, &with("d", "o2", "normal")).await;
    together(f, &[with("e", "o3", "normal"), with("f", "o3", "critical")]).await;
    let v = f.drift(5_010).await.unwrap();
    let classes: Vec<(Option<&str>, &str)> = v
        .clusters
        .iter()
        .map(|c| (c.observed.as_deref(), c.class.as_str()))
        .collect();
    assert_eq!(
        classes,
        [
            (Some("o1"), "critical"),
            (Some("o2"), "critical"),
            (Some("o3"), "critical")
        ]
    );
    let slow = views::drift(&findings(f).await, 6, 5_010);
    assert_eq!(v.clusters, slow.clusters, "as computed from every finding");
}

#[test]
fn a_clusters_class() {
    on_both!(a_clusters_class_does_not_depend_on_who_reported_first);
}

/// A cluster's class is the first in byte order of the classes its hosts
/// give it. It kept the class of a host that had left it (or that classes
/// the resource otherwise now), so a cluster of hosts that all say
/// `normal` showed `critical` until it started again, unlike the view
/// computed from every finding. When a host leaves a cluster, or one that
/// stays in it changes its class, the class is that of the hosts it has.
async fn a_clusters_class_follows_the_hosts_it_has<B: Backend>(f: &Fleet<B>) {
    let check = |host: &str, seq: u64, at: i64, class: Option<&str>| {
        let mut r = report(host, ReportKind::Check, seq, at);
        if let Some(class) = class {
            r.findings.push(finding("File[motd]", "o1", class));
        }
        r
    };
    let classes = |f: &Fleet<B>, now: i64| {
        let f = f.clone();
        async move {
            let of = |v: views::DriftView| {
                v.clusters
                    .iter()
                    .map(|c| (c.hosts, c.class.clone()))
                    .collect::<Vec<_>>()
            };
            let fast = of(f.drift(now).await.unwrap());
            let slow = of(views::drift(&findings(&f).await, 6, now));
            assert_eq!(fast, slow, "as computed from every finding");
            fast
        }
    };
    let both = |class: &str| vec![(2, class.to_owned())];
    ingest(f, &check("a", 1, 1_000, Some("critical"))).await;
    ingest(f, &check("b", 1, 1_000, Some("normal"))).await;
    assert_eq!(classes(f, 1_010).await, both("critical"));
    // a is rid of it: b's class.
    ingest(f, &check("a", 2, 2_000, None)).await;
    assert_eq!(classes(f, 2_010).await, [(1, "normal".to_owned())]);
    // a shows it again as critical, then classes it normal too.
    ingest(f, &check("a", 3, 3_000, Some("critical"))).await;
    assert_eq!(classes(f, 3_010).await, both("critical"));
    ingest(f, &check("a", 4, 4_000, Some("normal"))).await;
    assert_eq!(classes(f, 4_010).await, both("normal"));
    // In one batch: c joins as critical while a leaves.
    together(
        f,
        &[
            check("a", 5, 5_000, None),
            check("c", 1, 5_000, Some("critical")),
        ],
    )
    .await;
    assert_eq!(classes(f, 5_010).await, both("critical"));
    together(
        f,
        &[
            check("b", 2, 6_000, Some("normal")),
            check("c", 2, 6_000, None),
        ],
    )
    .await;
    assert_eq!(classes(f, 6_010).await, [(1, "normal".to_owned())]);
}

#[test]
fn a_clusters_class_after_a_host_leaves() {
    on_both!(a_clusters_class_follows_the_hosts_it_has);
}

/// A host taken out of the fleet (`datum server remove`) leaves its drift
/// clusters too: the class it gave one went on showing, as when a host
/// was rid of the drift (a_clusters_class_after_a_host_leaves).
async fn a_removed_hosts_class_leaves_its_clusters<B: Backend>(f: &Fleet<B>) {
    let now = 1_800_000_000;
    for (host, token, class) in [("a", "ha", "critical"), ("b", "hb", "normal")] {
        f.enroll(host, "host", token, now).await.unwrap();
        let mut r = report(host, ReportKind::Check, 1, now);
        r.findings.push(finding("File[motd]", "o1", class));
        ingest(f, &r).await;
    }
    let classes = |v: views::DriftView| {
        v.clusters
            .iter()
            .map(|c| (c.hosts, c.class.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        classes(f.drift(now).await.unwrap()),
        [(2, "critical".to_owned())]
    );
    assert!(f.remove("a", now + 1).await.unwrap());
    let fast = classes(f.drift(now + 1).await.unwrap());
    assert_eq!(fast, [(1, "normal".to_owned())]);
    assert_eq!(
        fast,
        classes(views::drift(&findings(f).await, 6, now + 1)),
        "as computed from every finding"
    );
}

#[test]
fn a_clusters_class_after_a_host_is_removed() {
    on_both!(a_removed_hosts_class_leaves_its_clusters);
}

/// Every report's idempotency key was kept `retention.daily_days` (400)
/// days, apart from the report: about 576,000 rows for a host reporting
/// every minute. A key is there to recognise a retried delivery, and a
/// host's outbox sends its reports in order, one at a time, each removed
/// once the server holds it: what comes again is the host's newest report
/// (its reply lost), whose report is kept. So a key is kept as long as
/// its report (`reports_per_host`), and the hourly prune removes the rest
/// (the keys of a removed host's reports too).
async fn report_keys_are_kept_as_long_as_their_reports<B: Backend>(f: &Fleet<B>) {
    let now = 1_800_000_000;
    f.enroll("web-1", "host", "h1", now).await.unwrap();
    f.enroll("web-2", "host", "h2", now).await.unwrap();
    for seq in 1..=20 {
        ingest(
            f,
            &report("web-1", ReportKind::Check, seq, now + seq as i64 * 60),
        )
        .await;
    }
    ingest(f, &report("web-2", ReportKind::Check, 1, now)).await;
    assert!(f.remove("web-2", now + 1).await.unwrap());
    f.prune(now + 1_300, 400).await.unwrap();
    assert_eq!(
        count(f, "SELECT count(*) FROM report_keys WHERE host = 'web-1'").await,
        5,
        "the keys of the 5 reports kept"
    );
    assert_eq!(count(f, "SELECT count(*) FROM report_keys").await, 5);
    assert!(
        !ingest(f, &report("web-1", ReportKind::Check, 20, now + 20 * 60)).await,
        "the newest report sent again is a duplicate"
    );
    assert!(
        !ingest(f, &report("web-1", ReportKind::Check, 16, now + 16 * 60)).await,
        "so is any report kept"
    );
}

#[test]
fn report_keys_retention() {
    on_both!(report_keys_are_kept_as_long_as_their_reports);
}

/// The first prune after d8e7265 (keys kept as long as their reports)
/// removes nearly every key a store ever took: about 576,000 per host
/// reporting every minute. Removed by one `DELETE`, that was one
/// transaction holding SQLite's one connection (every report and every
/// view waiting) for the whole backlog. The keys now go in bounded
/// transactions with a pause between them, and a report arriving
/// meanwhile is stored while the prune goes on.
async fn a_backlog_of_keys_is_pruned_in_bounded_transactions<B: Backend>(f: &Fleet<B>) {
    const STALE: usize = 30_000;
    const BATCH: usize = 500;
    let now = 1_800_000_000;
    f.enroll("web-1", "host", "h1", now).await.unwrap();
    for seq in 1..=3 {
        ingest(
            f,
            &report("web-1", ReportKind::Check, seq, now + seq as i64),
        )
        .await;
    }
    // Keys of reports removed long ago, before and after the kept ones in
    // the table's order.
    for chunk in (0..STALE).collect::<Vec<_>>().chunks(500) {
        let mut params: Vec<Val> = Vec::new();
        for i in chunk {
            params.extend([
                Val::from(if i % 2 == 0 { "web-1" } else { "web-0" }),
                Val::from(format!("{:032x}", i * 7_919)),
                Val::from(now - 86_400),
            ]);
        }
        let rows = (0..chunk.len())
            .map(|r| format!("(${}, ${}, ${})", 3 * r + 1, 3 * r + 2, 3 * r + 3))
            .collect::<Vec<_>>()
            .join(", ");
        f.backend()
            .execute(vec![Stmt::built(
                format!("INSERT INTO report_keys (host, key, at) VALUES {rows}"),
                params,
            )])
            .await
            .unwrap();
    }
    let all = count(f, "SELECT count(*) FROM report_keys").await;
    assert_eq!(all, STALE as i64 + 3);
    let prune = tokio::spawn({
        let f = f.clone();
        async move { f.prune_in_batches(now + 60, 400, BATCH).await.unwrap() }
    });
    // Others get the store between the prune's transactions: the count
    // is seen part-way.
    let seen = loop {
        let n = count(f, "SELECT count(*) FROM report_keys").await;
        if n < all || prune.is_finished() {
            break n;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    };
    assert!(
        seen > 3,
        "the backlog went in one transaction: {all} keys, then {seen}"
    );
    assert!(
        ingest(f, &report("web-1", ReportKind::Check, 4, now + 4)).await,
        "a report arriving meanwhile is stored"
    );
    assert!(
        !prune.is_finished(),
        "the report waited for the whole backlog"
    );
    let pruned = prune.await.unwrap();
    assert_eq!(pruned.keys, STALE as u64);
    assert!(pruned.transactions >= (STALE / BATCH) as u64, "{pruned:?}");
    assert_eq!(count(f, "SELECT count(*) FROM report_keys").await, 4);
    assert!(
        !ingest(f, &report("web-1", ReportKind::Check, 2, now + 2)).await,
        "a kept report's key stays"
    );
}

#[test]
fn report_keys_pruned_in_batches() {
    on_both!(a_backlog_of_keys_is_pruned_in_bounded_transactions);
}

/// A report older than every report retention keeps of its host, sent
/// again once its key had gone with it (a state store restored from a
/// backup delivers its outbox again), was stored again as a late report:
/// counted twice in the day's aggregate and the history, and, stored last,
/// it pushed out the oldest report kept (retention keeps the newest by
/// arrival). Once a host holds as many reports as retention keeps, a
/// report older than the oldest of them is taken as one already seen:
/// answered as a duplicate, nothing written. A host holding fewer still
/// has every key it sent, so its late reports are stored as before.
async fn a_report_older_than_those_kept_is_taken_as_seen<B: Backend>(f: &Fleet<B>) {
    let now = 1_800_000_000;
    f.enroll("web-1", "host", "h1", now).await.unwrap();
    f.enroll("web-2", "host", "h2", now).await.unwrap();
    let at = |seq: u64| now + seq as i64 * 60;
    for seq in 1..=20 {
        ingest(f, &report("web-1", ReportKind::Check, seq, at(seq))).await;
    }
    f.prune(at(21), 400).await.unwrap();
    let daily = "SELECT CAST(sum(reports) AS BIGINT) FROM daily WHERE host = 'web-1'";
    assert_eq!(count(f, daily).await, 20);
    // The third report again (its key went with it), and an apply as old.
    let mut apply = report("web-1", ReportKind::Apply, 3, at(3));
    apply.key = format!("{:032x}", 3_000);
    for old in [report("web-1", ReportKind::Check, 3, at(3)), apply] {
        assert!(
            !ingest(f, &old).await,
            "{:?}: taken as already seen",
            old.kind
        );
    }
    assert_eq!(count(f, daily).await, 20, "not counted twice");
    let kept: Vec<i64> = f
        .backend()
        .rows(Stmt::new(
            "SELECT seq FROM reports WHERE host = 'web-1' ORDER BY seq",
            vec![],
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| r[0].int().unwrap())
        .collect();
    assert_eq!(kept, [16, 17, 18, 19, 20]);
    assert_eq!(
        count(f, "SELECT count(*) FROM report_keys WHERE host = 'web-1'").await,
        5
    );
    assert!(
        ingest(f, &report("web-1", ReportKind::Check, 21, at(21))).await,
        "a newer one is stored"
    );
    // The host's clock set back: its next report, numbered after every one
    // kept, finished before them. No kept report came after it, so its key
    // cannot have gone with it: it is new, stored (as late), not dropped.
    assert!(
        ingest(f, &report("web-1", ReportKind::Check, 22, at(2))).await,
        "a report numbered after those kept is not taken as already seen"
    );
    assert_eq!(count(f, daily).await, 22);
    // web-2 holds 2 of the 5 kept: a late report is stored as before.
    for seq in [5, 6, 4] {
        assert!(ingest(f, &report("web-2", ReportKind::Check, seq, at(seq))).await);
    }
    assert_eq!(
        count(f, "SELECT count(*) FROM reports WHERE host = 'web-2'").await,
        3
    );
}

#[test]
fn a_report_older_than_the_retention() {
    on_both!(a_report_older_than_those_kept_is_taken_as_seen);
}

/// The retention rule above judged a report against the oldest kept
/// whatever state store made either (report rows held no store). A host
/// whose store was made anew (`--rebuild-state`, installed again under its
/// name: numbered from 1 again) with its clock also set back (below the
/// old store's oldest kept report) had every report of its new store
/// answered "duplicate" and dropped until its numbers passed the old
/// store's, though none of them had been sent before. Reports now keep the
/// store they say they came from, and the rule holds only within one
/// store: a report of another store than the oldest kept is new.
async fn a_new_stores_reports_are_not_taken_as_seen_by_the_old_stores<B: Backend>(f: &Fleet<B>) {
    const OLD: u128 = 0xa1;
    const NEW: u128 = 0xb2;
    let now = 1_800_000_000;
    f.enroll("web-1", "host", "h1", now).await.unwrap();
    let send = async |seq: u64, at: i64, store: u128| {
        ingest_from_store(f, &report("web-1", ReportKind::Check, seq, at), store).await
    };
    let at = |seq: u64| now + seq as i64 * 60;
    for seq in 1..=20 {
        assert!(send(seq, at(seq), OLD).await);
    }
    f.prune(at(21), 400).await.unwrap();
    // The old store's third report again: still taken as seen.
    assert!(!send(3, at(3), OLD).await, "the old store's own resend");
    // The new store, its clock an hour behind the old one's oldest kept.
    let back = |seq: u64| at(seq) - 3_600;
    for seq in 1..=3 {
        assert!(
            send(seq, back(seq), NEW).await,
            "the new store's report {seq} is new"
        );
    }
    let daily = "SELECT CAST(sum(reports) AS BIGINT) FROM daily WHERE host = 'web-1'";
    assert_eq!(count(f, daily).await, 23);
    let history = f.history("web-1", 10).await.unwrap().unwrap();
    assert_eq!(
        history.reports.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [3, 2, 1, 20, 19],
        "newest first: the new store's three, then the old store's"
    );
    // Within the new store the rule holds: once its own reports are the
    // oldest kept, its resend of one gone with its key is a duplicate.
    for seq in 4..=8 {
        assert!(send(seq, back(seq), NEW).await);
    }
    assert!(!send(2, back(2), NEW).await, "the new store's own resend");
    assert_eq!(count(f, daily).await, 28);
}

#[test]
fn a_new_store_with_its_clock_set_back() {
    on_both!(a_new_stores_reports_are_not_taken_as_seen_by_the_old_stores);
}

/// Migration 10 added the store to report rows, NULL for those stored
/// before it, and a report that says its store is taken as seen only
/// against an oldest kept report of that same store: on a store upgraded
/// with its hosts' reports kept, no resend was taken as seen (its key gone
/// with retention) until retention had replaced every report of the host
/// kept from before, so each was stored and counted again. Migration 11
/// gives those rows their host's last store (`hosts.store_id`, which
/// reports have carried since migration 9): a resend of a report gone is
/// seen again, and a new store's reports are still new.
async fn reports_kept_from_before_migration_10_keep_their_store<B: Backend>(f: &Fleet<B>) {
    const OLD: u128 = 0xa1;
    const NEW: u128 = 0xb2;
    let now = 1_800_000_000;
    f.enroll("web-1", "host", "h1", now).await.unwrap();
    f.enroll("web-2", "host", "h2", now).await.unwrap();
    let send = async |host: &str, seq: u64, at: i64, store: u128| {
        ingest_from_store(f, &report(host, ReportKind::Check, seq, at), store).await
    };
    let at = |seq: u64| now + seq as i64 * 60;
    for seq in 1..=20 {
        assert!(send("web-1", seq, at(seq), OLD).await);
        assert!(send("web-2", seq, at(seq), OLD).await);
    }
    f.prune(at(21), 400).await.unwrap();
    // The rows as a server before migration 10 stored them, then the
    // migrations after it.
    f.backend()
        .execute(vec![Stmt::new(
            "UPDATE reports SET store_id = NULL",
            vec![],
        )])
        .await
        .unwrap();
    let migrations = match f.backend().name() {
        "sqlite" => MIGRATIONS::SQLITE,
        _ => MIGRATIONS::POSTGRES,
    };
    for (_, _, sql) in migrations.iter().filter(|m| m.0 > 10) {
        f.backend()
            .execute(vec![Stmt::new(sql, vec![])])
            .await
            .unwrap();
    }
    let daily = "SELECT CAST(sum(reports) AS BIGINT) FROM daily";
    assert!(
        !send("web-1", 3, at(3), OLD).await,
        "a resend of a report gone with its key is seen"
    );
    assert_eq!(count(f, daily).await, 40);
    // Another store's, its clock set back, is new.
    assert!(send("web-2", 1, at(1) - 3_600, NEW).await);
    assert_eq!(count(f, daily).await, 41);
}

#[test]
fn a_store_upgraded_to_report_stores_keeps_its_seen_before_rule() {
    on_both!(reports_kept_from_before_migration_10_keep_their_store);
}

/// A host taken out of the fleet (decommissioned, or renamed and enrolled
/// under its new name) could not be removed: it stayed in every view and
/// went stale for ever (DatumHostStale firing), its token kept working, its
/// findings kept their drift clusters. `Fleet::remove` ends its token and
/// takes out everything it reported, the clusters following; the
/// instructions' audit log keeps what was asked of it.
async fn a_removed_host_leaves_no_trace_in_the_views<B: Backend>(f: &Fleet<B>) {
    let now = 1_800_000_000;
    f.enroll("web-1", "host", "h1", now).await.unwrap();
    f.enroll("web-2", "host", "h2", now).await.unwrap();
    for (seq, host) in [(1, "web-1"), (1, "web-2")] {
        let mut apply = report(host, ReportKind::Apply, seq, now);
        apply.exit_code = 4;
        apply.failures = vec![failure("File[a]", "s1")];
        apply.revision = format!("git:{host}");
        ingest(f, &apply).await;
        let mut check = report(host, ReportKind::Check, seq + 1, now + 60);
        check.findings = vec![finding("File[motd]", "o1", "normal")];
        check.sampling = Some(datum_fleet::SamplingUsed {
            round: 7,
            deep: true,
        });
        ingest(f, &check).await;
    }
    let hosts_of = |v: &views::DriftView| v.clusters.iter().map(|c| c.hosts).collect::<Vec<_>>();
    assert_eq!(hosts_of(&f.drift(now + 60).await.unwrap()), [2]);
    assert!(f.remove("web-1", now + 120).await.unwrap());
    assert_eq!(f.identity("h1").await.unwrap(), None, "its token ends");
    assert!(f.identity("h2").await.unwrap().is_some());
    assert!(f.host("web-1").await.unwrap().is_none());
    assert!(f.history("web-1", 10).await.unwrap().is_none());
    assert_eq!(hosts_of(&f.drift(now + 120).await.unwrap()), [1]);
    let hosts = f.hosts(&at(now + 120, 3.0)).await.unwrap();
    assert_eq!(
        hosts
            .hosts
            .iter()
            .map(|h| h.name.as_str())
            .collect::<Vec<_>>(),
        ["web-2"]
    );
    for table in [
        "SELECT count(*) FROM findings WHERE host = 'web-1'",
        "SELECT count(*) FROM failures WHERE host = 'web-1'",
        "SELECT count(*) FROM host_revisions WHERE host = 'web-1'",
        "SELECT count(*) FROM reports WHERE host = 'web-1'",
        "SELECT count(*) FROM daily WHERE host = 'web-1'",
        "SELECT count(*) FROM deep_checks WHERE host = 'web-1'",
        "SELECT count(*) FROM revisions WHERE revision = 'git:web-1'",
    ] {
        assert_eq!(count(f, table).await, 0, "{table}");
    }
    assert_eq!(
        count(
            f,
            "SELECT count(*) FROM revisions WHERE revision = 'git:web-2'"
        )
        .await,
        1
    );
    assert!(!f.remove("web-1", now + 180).await.unwrap(), "gone already");
}

#[test]
fn removing_a_host() {
    on_both!(a_removed_host_leaves_no_trace_in_the_views);
}

/// The batch's lock of its revision records makes those not made yet: once
/// each, with the batch's latest apply of it, as its upsert at the end of
/// the batch made them (two applies of one new revision in a batch, one
/// row each in the lock, failed the batch on PostgreSQL: 'ON CONFLICT DO
/// UPDATE command cannot affect row a second time').
async fn new_revisions_applied_together_are_recorded_once<B: Backend>(f: &Fleet<B>) {
    together(
        f,
        &[
            apply("h1", 1, "git:n", 1_000),
            apply("h2", 1, "git:n", 1_200),
            apply("h3", 1, "git:m", 1_100),
        ],
    )
    .await;
    let rows: Vec<(String, i64, i64)> = f
        .backend()
        .rows(Stmt::new(
            "SELECT revision, first_at, last_at FROM revisions ORDER BY revision",
            vec![],
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r[0].text().unwrap().to_owned(),
                r[1].int().unwrap(),
                r[2].int().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("git:m".to_owned(), 1_100, 1_100),
            ("git:n".to_owned(), 1_200, 1_200)
        ]
    );
}

#[test]
fn new_revisions_applied_in_one_batch() {
    on_both!(new_revisions_applied_together_are_recorded_once);
}

/// `host`'s apply of `revision` (its `seq`th report), finished at `at`.
fn apply(host: &str, seq: u64, revision: &str, at: i64) -> Report {
    let mut r = report(host, ReportKind::Apply, seq, at);
    r.revision = revision.into();
    r
}

type Pg = Fleet<datum_server::store::postgres::PostgresBackend>;

/// What a transaction of [`TwoServers::interleave`] gives: whether the
/// report was new (or the host there to remove), or why it failed.
type Outcome = Result<bool, datum_server::store::StoreError>;

/// A transaction for [`TwoServers::interleave`] to run.
type Step = std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>>;

/// `f` stores `r`, retention keeping `kept` reports (and revisions) of a
/// host.
fn storing(f: &Pg, r: Report, kept: u32) -> Step {
    let f = f.clone();
    Box::pin(async move {
        let raw = serde_json::to_string(&r).unwrap();
        f.ingest(&r, &raw, r.finished_at, Default::default(), kept)
            .await
    })
}

/// `f` stores `reports` in one transaction: whether every one was new.
fn storing_together(f: &Pg, reports: Vec<Report>) -> Step {
    let f = f.clone();
    Box::pin(async move {
        let batch = reports.iter().map(submitted).collect();
        Ok(f.ingest_together(batch).await?.iter().all(|n| *n))
    })
}

/// `f` removes `host` (`datum server remove`).
fn removing(f: &Pg, host: &str, now: i64) -> Step {
    let (f, host) = (f.clone(), host.to_owned());
    Box::pin(async move { f.remove(&host, now).await })
}

/// Every step of an interleaving done: each report new, each host there to
/// remove (a deadlock fails one: 'deadlock detected').
#[track_caller]
fn assert_all_done(outcomes: &[Outcome]) {
    assert!(
        outcomes.iter().all(|o| matches!(o, Ok(true))),
        "every step done: {outcomes:?}"
    );
}

/// Holds every slot of the store's generation: each transaction that
/// changes a view bumps one slot last, so one that starts while the hold
/// lasts stops at its last statement with everything else written and
/// locked, uncommitted.
const HOLD_GENERATION: &str = "INSERT INTO generation (slot, n) \
     SELECT s, 0 FROM generate_series(0, 15) AS s ON CONFLICT (slot) DO NOTHING; \
     BEGIN; SELECT * FROM generation FOR UPDATE";

/// Two servers on one PostgreSQL database, a connection that holds a lock
/// and one that watches who waits for one: what makes the interleaving of
/// two servers' transactions deterministic ([`TwoServers::interleave`]).
struct TwoServers {
    first: Pg,
    second: Pg,
    holder: tokio_postgres::Client,
    watcher: tokio_postgres::Client,
}

impl TwoServers {
    async fn on(url: &str) -> Self {
        use datum_server::store::postgres::PostgresBackend;
        let open = || async {
            Fleet::new(
                PostgresBackend::open(url, MIGRATIONS::POSTGRES)
                    .await
                    .unwrap(),
            )
        };
        TwoServers {
            first: open().await,
            second: open().await,
            holder: connect(url).await,
            watcher: connect(url).await,
        }
    }

    /// The same, the database planning as for a large store: no nested
    /// loops, so a join reads a table whole and matches it by hash, in
    /// the table's order (a small store's plan walks an index, in key
    /// order, which hides a lock taken in the plan's order).
    async fn on_large_store_plans(url: &str) -> Self {
        connect(url)
            .await
            .batch_execute(
                "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET enable_nestloop = off', \
                 current_database()); END $$",
            )
            .await
            .unwrap();
        Self::on(url).await
    }

    /// Runs `steps` as concurrent transactions, in the order given, while
    /// the holder keeps what `hold` locks (SQL that begins a transaction
    /// and takes a lock: [`HOLD_GENERATION`], a row `FOR UPDATE`): each
    /// step starts once every step before it waits for a lock or is done,
    /// so the first stops at the hold, the next at what the ones before
    /// it hold or at the hold, and so on. Then the hold is let go: each
    /// step's outcome, in order.
    async fn interleave(&self, hold: &str, steps: Vec<Step>) -> Vec<Outcome> {
        self.holder.batch_execute(hold).await.unwrap();
        let mut tasks = Vec::new();
        for step in steps {
            tasks.push(tokio::spawn(step));
            self.settled(&tasks).await;
        }
        self.holder.batch_execute("COMMIT").await.unwrap();
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        outcomes
    }

    /// Returns once every one of `tasks` not done waits for a lock.
    async fn settled(&self, tasks: &[tokio::task::JoinHandle<Outcome>]) {
        for _ in 0..600 {
            let running = tasks.iter().filter(|t| !t.is_finished()).count();
            let row = self
                .watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .unwrap();
            if row.get::<_, i64>(0) >= running as i64 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("a transaction neither waiting nor done after 12 s");
    }
}

/// A connection to `url`.
async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// Runs `body` on a fresh PostgreSQL database, when there is a server.
macro_rules! on_postgres {
    ($body:ident) => {{
        let rt = crate::support::runtime();
        rt.block_on(async {
            if let Some(url) = crate::support::postgres_url().await {
                $body(&url).await;
            }
        });
    }};
}

/// `datum server remove` while another server is storing a report of that
/// host (PostgreSQL, several servers on one database): the removal did not
/// wait for the report's transaction, so its statements, each reading what
/// was committed when it began, missed the findings and the report that
/// transaction was writing, and the host's row was deleted only once that
/// transaction committed. The report's findings, its row and its drift
/// cluster were left behind: a cluster naming a host no longer in the
/// fleet, for ever. The removal now locks the host's row first, as ingest
/// does, so the two take turns.
async fn a_host_removed_while_a_report_of_it_is_stored_leaves_nothing(url: &str) {
    let servers = TwoServers::on(url).await;
    let now = 1_800_000_000;
    let f = &servers.first;
    f.enroll("web-1", "host", "h1", now).await.unwrap();
    ingest(f, &report("web-1", ReportKind::Apply, 1, now)).await;
    let mut check = report("web-1", ReportKind::Check, 2, now + 60);
    check.findings = vec![finding("File[motd]", "o1", "normal")];
    // The report stops before its commit; the removal waits for it.
    let outcomes = servers
        .interleave(
            HOLD_GENERATION,
            vec![
                storing(f, check, 5),
                removing(&servers.second, "web-1", now + 120),
            ],
        )
        .await;
    assert_all_done(&outcomes);
    let f = &servers.second;
    assert!(f.host("web-1").await.unwrap().is_none());
    for table in [
        "SELECT count(*) FROM findings WHERE host = 'web-1'",
        "SELECT count(*) FROM reports WHERE host = 'web-1'",
        "SELECT count(*) FROM daily WHERE host = 'web-1'",
        "SELECT count(*) FROM drift_clusters",
    ] {
        assert_eq!(count(f, table).await, 0, "{table}");
    }
    assert!(f.drift(now + 120).await.unwrap().clusters.is_empty());
}

#[test]
fn removing_a_host_while_another_server_stores_its_report() {
    on_postgres!(a_host_removed_while_a_report_of_it_is_stored_leaves_nothing);
}

/// `datum server remove` of a host while another server stores a report
/// of another host joining one of its drift clusters (PostgreSQL, two
/// servers): the cluster's class must count the joining host's finding.
/// The removal's `UPDATE` waits for the storing transaction's lock on the
/// cluster's row; it must not then set the class from findings read
/// before that transaction committed.
async fn a_host_removed_while_another_joins_its_cluster_keeps_the_joiners_class(url: &str) {
    let servers = TwoServers::on(url).await;
    let now = 1_800_000_000;
    let f = &servers.first;
    for (host, token, class) in [("a", "ha", "normal"), ("b", "hb", "normal")] {
        f.enroll(host, "host", token, now).await.unwrap();
        let mut r = report(host, ReportKind::Check, 1, now);
        r.findings.push(finding("File[motd]", "o1", class));
        ingest(f, &r).await;
    }
    f.enroll("c", "host", "hc", now).await.unwrap();
    let mut joining = report("c", ReportKind::Check, 1, now + 60);
    joining.findings = vec![finding("File[motd]", "o1", "critical")];
    let outcomes = servers
        .interleave(
            HOLD_GENERATION,
            vec![
                storing(f, joining, 5),
                removing(&servers.second, "a", now + 120),
            ],
        )
        .await;
    assert_all_done(&outcomes);
    let classes = |v: views::DriftView| {
        v.clusters
            .iter()
            .map(|c| (c.hosts, c.class.clone()))
            .collect::<Vec<_>>()
    };
    let fast = classes(f.drift(now + 120).await.unwrap());
    assert_eq!(
        fast,
        classes(views::drift(&findings(f).await, 6, now + 120)),
        "as computed from every finding"
    );
    assert_eq!(fast, [(2, "critical".to_owned())]);
}

#[test]
fn removing_a_host_while_another_joins_its_cluster() {
    on_postgres!(a_host_removed_while_another_joins_its_cluster_keeps_the_joiners_class);
}

/// A host's revision retention forgets the fleet's record of a revision
/// (`revisions`, what the rollout's latest revision is read from) when no
/// other host holds it. Decided by a `NOT EXISTS` inside the `DELETE`, it
/// was wrong while another server was storing the first apply of that
/// revision by another host: the `DELETE` waited for that transaction's
/// lock on the revision's row, then went on with what it had read before
/// (the other host's row not committed yet), and removed the record of a
/// revision a host had just applied: the rollout's latest revision was
/// another one until some host applied it again. The rows are now locked
/// by a statement of their own first, so the `DELETE` reads after the
/// other transaction committed.
async fn a_revision_another_server_is_recording_is_not_forgotten(url: &str) {
    let servers = TwoServers::on(url).await;
    let now = 1_800_000_000;
    // Retention keeps one revision per host.
    storing(&servers.first, apply("web-1", 1, "git:r1", now), 1)
        .await
        .unwrap();
    // web-2 applies r1 (its first apply of it), on the first server, while
    // web-1 moves on to r2 on the second, which forgets its r1.
    let outcomes = servers
        .interleave(
            HOLD_GENERATION,
            vec![
                storing(&servers.first, apply("web-2", 1, "git:r1", now + 120), 1),
                storing(&servers.second, apply("web-1", 2, "git:r2", now + 60), 1),
            ],
        )
        .await;
    assert_all_done(&outcomes);
    let f = &servers.second;
    assert_eq!(
        count(
            f,
            "SELECT count(*) FROM revisions WHERE revision = 'git:r1'"
        )
        .await,
        1,
        "web-2 holds r1"
    );
    assert_eq!(
        f.latest_revision().await.unwrap().as_deref(),
        Some("git:r1")
    );
    assert_eq!(
        count(
            f,
            "SELECT count(*) FROM host_revisions WHERE host = 'web-1'"
        )
        .await,
        1
    );
}

#[test]
fn revision_retention_while_another_server_records_the_revision() {
    on_postgres!(a_revision_another_server_is_recording_is_not_forgotten);
}

/// Two servers storing reports of two hosts that swap drift clusters (a
/// host moving from one observed content to the other, another host the
/// other way) must lock the clusters' rows in one order. Ingest locked
/// first the clusters its batch joined, then those it left, each in key
/// order: `h1` joining A and leaving B took A then B, `h2` joining B and
/// leaving A took B then A, a deadlock: PostgreSQL undid one, and that
/// report was refused ('deadlock detected'). The clusters are now locked
/// in key order whatever the batch does to them.
async fn two_hosts_swapping_clusters_do_not_deadlock(url: &str) {
    let servers = TwoServers::on(url).await;
    let now = 1_800_000_000;
    let f = &servers.first;
    // h1 and h3 show B (observed oB), h2 and h4 show A (oA): A < B.
    for (host, observed) in [("h1", "oB"), ("h2", "oA"), ("h3", "oB"), ("h4", "oA")] {
        let mut r = report(host, ReportKind::Check, 1, now);
        r.findings = vec![finding("File[motd]", observed, "normal")];
        ingest(f, &r).await;
    }
    let moving = |host: &str, observed: &str| {
        let mut r = report(host, ReportKind::Check, 2, now + 60);
        r.findings = vec![finding("File[motd]", observed, "normal")];
        r
    };
    // A held, so h1's batch stops at it, and h2's takes B and then waits
    // for A behind h1's.
    let outcomes = servers
        .interleave(
            "BEGIN; SELECT 1 FROM drift_clusters WHERE observed = 'oA' FOR UPDATE",
            vec![
                storing(f, moving("h1", "oA"), 5),
                storing(&servers.second, moving("h2", "oB"), 5),
            ],
        )
        .await;
    assert_all_done(&outcomes);
    let mut hosts: Vec<(String, i64)> = servers
        .watcher
        .query(
            "SELECT observed, hosts FROM drift_clusters ORDER BY observed",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    hosts.sort();
    assert_eq!(hosts, [("oA".to_owned(), 2), ("oB".to_owned(), 2)]);
}

#[test]
fn two_servers_moving_hosts_between_clusters() {
    on_postgres!(two_hosts_swapping_clusters_do_not_deadlock);
}

/// `datum server remove` locks the clusters of the host it removes, and a
/// server storing a report of a host joining them locks them too: both
/// must take them in one order, key order as ingest does. The removal
/// locked them in the order its `UPDATE` found them (the table's, where
/// the row last written is last), so with the clusters written last in
/// the other order the two deadlocked and PostgreSQL undid one.
async fn a_host_removed_while_another_joins_two_of_its_clusters(url: &str) {
    let servers = TwoServers::on_large_store_plans(url).await;
    let now = 1_800_000_000;
    let f = &servers.first;
    let both = vec![
        finding("File[x]", "o", "normal"),
        finding("File[y]", "o", "normal"),
    ];
    let mut r = report("r", ReportKind::Check, 1, now);
    r.findings = both.clone();
    ingest(f, &r).await;
    // The first cluster in key order written last: the table holds it
    // after the other.
    let first = [&both[0], &both[1]]
        .into_iter()
        .min_by(|a, b| a.signature.cmp(&b.signature))
        .unwrap()
        .clone();
    let mut q = report("q", ReportKind::Check, 1, now);
    q.findings = vec![first.clone()];
    ingest(f, &q).await;
    // That cluster held, so j's report of both stops at it, holding
    // neither; the removal of r takes what it takes and waits for it.
    let mut joining = report("j", ReportKind::Check, 1, now + 60);
    joining.findings = both;
    let outcomes = servers
        .interleave(
            &format!(
                "BEGIN; SELECT 1 FROM drift_clusters WHERE signature = '{}' FOR UPDATE",
                first.signature
            ),
            vec![
                storing(f, joining, 5),
                removing(&servers.second, "r", now + 120),
            ],
        )
        .await;
    assert_all_done(&outcomes);
    let hosts: Vec<i64> = servers
        .watcher
        .query("SELECT hosts FROM drift_clusters ORDER BY signature", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(hosts, [2, 1], "x and y: j in both, q in the first");
}

#[test]
fn removing_a_host_while_another_joins_two_of_its_clusters() {
    on_postgres!(a_host_removed_while_another_joins_two_of_its_clusters);
}

/// Two servers storing applies of two hosts that swap revisions (one
/// moving from x to y, the other from y to x, retention keeping one
/// revision a host) must lock the fleet's records of them in one order.
/// Each host's retention locked the records of the revisions it forgets,
/// and the batch then those it applied: x then y for one, y then x for
/// the other, a deadlock, and PostgreSQL refused one report ('deadlock
/// detected'). The batch now locks them all first, in key order.
async fn two_hosts_swapping_revisions_do_not_deadlock(url: &str) {
    let servers = TwoServers::on(url).await;
    let now = 1_800_000_000;
    let f = &servers.first;
    storing(f, apply("h1", 1, "git:x", now), 1).await.unwrap();
    storing(f, apply("h2", 1, "git:y", now), 1).await.unwrap();
    // x held, so h1's batch stops at it and h2's, holding y, waits for it
    // behind h1's.
    let outcomes = servers
        .interleave(
            "BEGIN; SELECT 1 FROM revisions WHERE revision = 'git:x' FOR UPDATE",
            vec![
                storing(f, apply("h1", 2, "git:y", now + 60), 1),
                storing(&servers.second, apply("h2", 2, "git:x", now + 60), 1),
            ],
        )
        .await;
    assert_all_done(&outcomes);
    assert_eq!(
        count(
            &servers.second,
            "SELECT count(*) FROM revisions WHERE revision IN ('git:x', 'git:y')"
        )
        .await,
        2,
        "each held by a host"
    );
}

#[test]
fn two_servers_moving_hosts_between_revisions() {
    on_postgres!(two_hosts_swapping_revisions_do_not_deadlock);
}

/// A batch locks the fleet's records of its revisions first, in key
/// order, but only those it finds: the record of a revision no host had
/// applied yet was written (and so locked) at the end, out of order. When
/// another server stored the first apply of that revision in between, a
/// third batch could lock it in its place and wait for a record the first
/// holds: h1 applying x (new) held y and then waited for x, h2 applying x
/// held x and waited for y, a deadlock ('deadlock detected'). The missing
/// records are now made by the same sorted statement that locks the others.
async fn a_revision_recorded_after_a_batch_looked_for_it_keeps_the_order(url: &str) {
    let servers = TwoServers::on(url).await;
    let now = 1_800_000_000;
    let f = &servers.first;
    // h1 and h2 hold y; x is no host's yet (x < y).
    storing(f, apply("h1", 1, "git:y", now), 5).await.unwrap();
    storing(f, apply("h2", 1, "git:y", now), 5).await.unwrap();
    // h1's daily row held, so h1's apply of x stops after its revision
    // records' lock (y, and x missing) and before the rest. h0's first
    // apply of x is stored meanwhile: x is recorded (since h1's batch
    // makes x's record with its lock, h0's waits for it instead). h2's
    // apply of x then finds both records: it locks x, then waits for y.
    let outcomes = servers
        .interleave(
            "BEGIN; SELECT 1 FROM daily WHERE host = 'h1' FOR UPDATE",
            vec![
                storing(f, apply("h1", 2, "git:x", now + 2), 5),
                storing(f, apply("h0", 3, "git:x", now + 3), 5),
                storing(&servers.second, apply("h2", 4, "git:x", now + 4), 5),
            ],
        )
        .await;
    // (Deadlocked: 'deadlock detected' for h1's or h2's.)
    assert_all_done(&outcomes);
    assert_eq!(
        count(
            &servers.second,
            "SELECT count(*) FROM host_revisions WHERE revision = 'git:x'"
        )
        .await,
        3
    );
    assert_eq!(
        count(
            &servers.second,
            "SELECT count(*) FROM revisions WHERE revision IN ('git:x', 'git:y')"
        )
        .await,
        2
    );
}

#[test]
fn a_revision_recorded_between_a_batchs_lock_and_its_write() {
    on_postgres!(a_revision_recorded_after_a_batch_looked_for_it_keeps_the_order);
}

/// `datum server remove` locks the fleet's records of the revisions the
/// removed host holds, and a server storing an apply locks those its host
/// holds or applies, in key order: both must take them in one order. The
/// removal locked them in the order its `UPDATE` found them (on a large
/// store the table's, where the row written last is last), so it
/// deadlocked with an apply of a host holding the same two revisions.
async fn a_host_removed_while_another_applies_one_of_its_revisions(url: &str) {
    let servers = TwoServers::on_large_store_plans(url).await;
    let now = 1_800_000_000;
    let f = &servers.first;
    let apply = |host: &str, seq: u64, revision: &str| apply(host, seq, revision, now + seq as i64);
    // r holds x and y, j holds y; x written last (each apply writes the
    // records of its host's revisions), so the table holds y before x.
    ingest(f, &apply("r", 1, "git:y")).await;
    ingest(f, &apply("j", 2, "git:y")).await;
    ingest(f, &apply("r", 3, "git:x")).await;
    // x held, so j's apply of x stops at it, holding neither; the removal
    // of r takes what it takes and waits for it.
    let outcomes = servers
        .interleave(
            "BEGIN; SELECT 1 FROM revisions WHERE revision = 'git:x' FOR UPDATE",
            vec![
                storing(f, apply("j", 4, "git:x"), 5),
                removing(&servers.second, "r", now + 120),
            ],
        )
        .await;
    assert_all_done(&outcomes);
    assert_eq!(
        count(
            &servers.second,
            "SELECT count(*) FROM revisions WHERE revision IN ('git:x', 'git:y')"
        )
        .await,
        2,
        "j holds both"
    );
}

#[test]
fn removing_a_host_while_another_applies_one_of_its_revisions() {
    on_postgres!(a_host_removed_while_another_applies_one_of_its_revisions);
}

/// A batch takes the fleet's revision records first and the drift
/// clusters last; `datum server remove` took the removed host's clusters
/// first and its revision records after, so a removal and a batch holding
/// an apply of one of its revisions and a check joining one of its
/// clusters deadlocked. The removal now takes them in the batch's order.
async fn a_host_removed_while_a_batch_touches_its_revision_and_cluster(url: &str) {
    let servers = TwoServers::on(url).await;
    let now = 1_800_000_000;
    let f = &servers.first;
    let mut r = report("r", ReportKind::Check, 1, now);
    r.findings = vec![finding("File[motd]", "o", "normal")];
    ingest(f, &r).await;
    ingest(f, &apply("r", 2, "git:x", now + 1)).await;
    // x held, so the batch stops at it, holding neither; the removal of r
    // takes its cluster and waits for x.
    let mut joining = report("h2", ReportKind::Check, 1, now + 60);
    joining.findings = vec![finding("File[motd]", "o", "critical")];
    let outcomes = servers
        .interleave(
            "BEGIN; SELECT 1 FROM revisions WHERE revision = 'git:x' FOR UPDATE",
            vec![
                storing_together(f, vec![apply("h1", 1, "git:x", now + 60), joining]),
                removing(&servers.second, "r", now + 120),
            ],
        )
        .await;
    assert_all_done(&outcomes);
    let clusters: Vec<(i64, String)> = servers
        .watcher
        .query("SELECT hosts, class FROM drift_clusters", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(clusters, [(1, "critical".to_owned())]);
}

#[test]
fn removing_a_host_while_a_batch_touches_its_revision_and_cluster() {
    on_postgres!(a_host_removed_while_a_batch_touches_its_revision_and_cluster);
}
