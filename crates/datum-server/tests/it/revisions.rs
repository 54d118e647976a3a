//! The rollout page's list of revisions (`queries::revisions`) reads the
//! fleet's records of its revisions and counts only the newest ones'
//! hosts; it gives what grouping the whole of `host_revisions` gave, on
//! both stores, whatever retention and removed hosts left behind.

use datum_fleet::ReportKind;
use datum_server::fleet::Fleet;
use datum_server::store::{Backend, Stmt};
use datum_server::web::queries::{self, FleetRevision};

use crate::on_both;
use crate::support::{failure, report};

/// The list as the rollout page read it before: every host's revisions
/// grouped.
async fn grouped<B: Backend>(f: &Fleet<B>, limit: i64) -> Vec<FleetRevision> {
    f.backend()
        .rows(Stmt::new(
            "SELECT revision, max(last_at), count(*), \
             sum(CASE WHEN outcome = 'failed' THEN 1 ELSE 0 END) FROM host_revisions \
             GROUP BY revision ORDER BY max(last_at) DESC, revision COLLATE \"C\" LIMIT $1",
            vec![limit.into()],
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| FleetRevision {
            revision: r[0].text().unwrap().to_owned(),
            last_at: r[1].int().unwrap(),
            hosts: r[2].int().unwrap() as u64,
            failed: r[3].int().unwrap() as u64,
        })
        .collect()
}

async fn assert_same<B: Backend>(f: &Fleet<B>, step: &str) {
    for limit in [1, 2, 3, 4, 5, 15, 40] {
        assert_eq!(
            queries::revisions(f, limit).await.unwrap(),
            grouped(f, limit).await,
            "{step}, limit {limit}"
        );
    }
}

/// Stores `r` keeping `kept` reports (and so revisions) of its host.
async fn apply<B: Backend>(f: &Fleet<B>, r: &datum_fleet::Report, kept: u32) {
    let raw = serde_json::to_string(r).unwrap();
    f.ingest(r, &raw, r.finished_at, Default::default(), kept)
        .await
        .unwrap();
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

async fn the_list_is_the_grouped_one<B: Backend>(f: &Fleet<B>) {
    assert!(queries::revisions(f, 15).await.unwrap().is_empty());
    // A revision whose record is newer than any apply its hosts still
    // hold: h-a applied r-old last, then three newer ones, and retention
    // (2 kept) let r-old go from h-a while h-b keeps it.
    let mut seq = 0;
    let mut one = |host: &str, revision: &str, at: i64| {
        seq += 1;
        let mut r = report(host, ReportKind::Apply, seq, at);
        r.revision = revision.to_owned();
        r
    };
    apply(f, &one("h-b", "r-old", 50), 2).await;
    apply(f, &one("h-a", "r-old", 100), 2).await;
    apply(f, &one("h-c", "r-mid", 70), 2).await;
    for (i, revision) in ["r-1", "r-2", "r-3"].iter().enumerate() {
        apply(f, &one("h-a", revision, 200 + i as i64), 2).await;
    }
    let listed = grouped(f, 40).await;
    let at = |name: &str| listed.iter().find(|r| r.revision == name).unwrap().last_at;
    assert_eq!((at("r-old"), at("r-mid")), (50, 70), "{listed:?}");
    assert_same(f, "a record newer than its hosts' applies").await;

    // Many hosts, revisions and seconds shared, some applies failed, a
    // host removed now and then.
    let mut rng = Lcg(11);
    let mut seqs = std::collections::BTreeMap::<String, u64>::new();
    for step in 0..400 {
        let host = format!("w{:02}", rng.next(25));
        let n = seqs.entry(host.clone()).or_insert(0);
        *n += 1;
        let mut r = report(&host, ReportKind::Apply, *n, 1_000 + step / 4);
        r.revision = format!("git:{:02}", rng.next(20));
        if rng.next(4) == 0 {
            r.failures = vec![failure("File[x]", "sig")];
            r.exit_code = 4;
        }
        apply(f, &r, 1 + rng.next(4) as u32).await;
        if rng.next(40) == 0 {
            f.remove(&host, 2_000).await.unwrap();
            seqs.remove(&host);
        }
        if step % 50 == 49 {
            assert_same(f, &format!("step {step}")).await;
        }
    }
}

#[test]
fn the_rollout_pages_revisions_are_the_grouped_ones() {
    on_both!(the_list_is_the_grouped_one);
}
