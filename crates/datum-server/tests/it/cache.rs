//! Kept answers (`crate::cache`): two servers on one store each keep
//! their own, and a report stored through either one is seen by both on
//! the next request; the clock still moves a kept hosts document.

use datum_fleet::ReportKind;
use datum_server::fleet::Fleet;
use datum_server::store::Backend;
use datum_server::views::{DriftView, HostsView, RolloutView, Staleness};

use crate::on_both;
use crate::support::{failure, finding, ingest, report};

fn at(now: i64) -> Staleness {
    Staleness {
        now,
        factor: 3.0,
        first_report_within: 3600,
    }
}

async fn views<B: Backend>(f: &Fleet<B>, now: i64) -> (HostsView, RolloutView, DriftView) {
    let hosts = f.hosts_json(&at(now)).await.unwrap();
    let rollout = f.rollout_json(None).await.unwrap();
    let drift = f.drift_json(now, None, None).await.unwrap();
    (
        serde_json::from_slice(&hosts).unwrap(),
        serde_json::from_slice(&rollout).unwrap(),
        serde_json::from_slice(&drift).unwrap(),
    )
}

async fn a_write_through_one_server_is_seen_by_the_other<B: Backend>(a: &Fleet<B>) {
    // A second server process on the same database: its own kept answers.
    let b = Fleet::new(a.backend().clone());
    for h in ["web-1", "web-2"] {
        assert!(ingest(a, &report(h, ReportKind::Apply, 1, 10_000)).await);
    }
    let (hosts, rollout, drift) = views(&b, 10_010).await;
    assert!(hosts.hosts.iter().all(|h| h.state == "converged"));
    assert_eq!(rollout.converged.len(), 2);
    assert!(drift.clusters.is_empty());
    // Asked again at the same generation: the same answers (kept).
    assert_eq!(views(&b, 10_010).await, (hosts, rollout, drift));
    let before = b.generation().await.unwrap();

    // Server a stores a failed apply of web-1 and a drifted check of web-2.
    let mut failed = report("web-1", ReportKind::Apply, 2, 10_020);
    failed.failures = vec![failure("File[nginx.conf]", "sig-1")];
    assert!(ingest(a, &failed).await);
    let mut drifted = report("web-2", ReportKind::Check, 2, 10_021);
    drifted.findings = vec![finding("File[motd]", "sha256:x", "normal")];
    assert!(ingest(a, &drifted).await);
    assert!(
        b.generation().await.unwrap() > before,
        "each store moves it"
    );

    let (hosts, rollout, drift) = views(&b, 10_030).await;
    let state = |n: &str| {
        hosts
            .hosts
            .iter()
            .find(|h| h.name == n)
            .unwrap()
            .state
            .clone()
    };
    assert_eq!(state("web-1"), "failed");
    assert_eq!(state("web-2"), "drifted");
    assert_eq!(rollout.failed.len(), 1, "{rollout:?}");
    assert_eq!(drift.clusters.len(), 1);
    assert_eq!(drift.clusters[0].sample_hosts, ["web-2"]);

    // A duplicate writes nothing and keeps the answers.
    let g = b.generation().await.unwrap();
    assert!(!ingest(a, &drifted).await);
    assert_eq!(b.generation().await.unwrap(), g);

    // Enrolling a host is a write the views show.
    a.enroll("web-3", "host", "hash-of-web-3", 10_040)
        .await
        .unwrap();
    let (hosts, rollout, _) = views(&b, 10_050).await;
    assert_eq!(hosts.hosts.len(), 3);
    assert_eq!(rollout.pending.len(), 1, "{rollout:?}");

    // No write, but the clock moved: ages and staleness follow it.
    let later: HostsView =
        serde_json::from_slice(&b.hosts_json(&at(10_000 + 3 * 600 + 5)).await.unwrap()).unwrap();
    assert_eq!(
        later.generated_at,
        datum_server::views::rfc3339(10_000 + 3 * 600 + 5)
    );
    let web2 = later.hosts.iter().find(|h| h.name == "web-2").unwrap();
    assert_eq!(web2.age_s, Some(3 * 600 + 5 - 21));
    let drift_later: DriftView =
        serde_json::from_slice(&b.drift_json(10_099, None, None).await.unwrap()).unwrap();
    assert_eq!(
        drift_later.generated_at,
        datum_server::views::rfc3339(10_099)
    );
    assert_eq!(drift_later.clusters, drift.clusters);
}

#[test]
fn two_servers_keep_their_own_answers_and_see_each_others_writes() {
    on_both!(a_write_through_one_server_is_seen_by_the_other);
}
