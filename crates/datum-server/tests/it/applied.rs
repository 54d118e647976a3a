//! What an apply report does to its host's open findings: an apply
//! verifies every resource it changed, so the findings of those resources
//! close at once (the host is no longer drifted by them, and they leave
//! their drift clusters), on both stores; a finding of another subject (a
//! Package's conffile, which no apply reverts) stays, and a late apply
//! (older than the host's last report) closes nothing a newer check opened.

use datum_fleet::ReportKind;
use datum_server::fleet::Fleet;
use datum_server::store::{Backend, Stmt};
use datum_server::views::{self, Staleness};

use crate::on_both;
use crate::support::{finding, ingest, report};

/// The host's open findings' subjects, sorted.
async fn open<B: Backend>(f: &Fleet<B>, host: &str) -> Vec<String> {
    let mut subjects: Vec<String> = f
        .backend()
        .rows(Stmt::new(
            "SELECT subject FROM findings WHERE host = $1",
            vec![host.into()],
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| r[0].text().unwrap_or("").to_owned())
        .collect();
    subjects.sort();
    subjects
}

/// The drift view's clusters: (subject, hosts).
async fn clusters<B: Backend>(f: &Fleet<B>) -> Vec<(String, u64)> {
    let mut c: Vec<(String, u64)> = f
        .drift(10_000)
        .await
        .unwrap()
        .clusters
        .iter()
        .map(|c| (c.subject.clone(), c.hosts))
        .collect();
    c.sort();
    c
}

async fn host<B: Backend>(f: &Fleet<B>, name: &str) -> views::HostView {
    let at = Staleness {
        now: 5_000,
        factor: 100.0,
        first_report_within: 3600,
    };
    f.hosts(&at)
        .await
        .unwrap()
        .hosts
        .into_iter()
        .find(|h| h.name == name)
        .unwrap()
}

async fn an_apply_closes_what_it_converged<B: Backend>(f: &Fleet<B>) {
    let conffile = "Package[nginx]:/etc/nginx/mime.types";
    let mut check = report("web-03", ReportKind::Check, 1, 1_000);
    for s in ["File[a]", "File[b]", conffile] {
        check.findings.push(finding(s, "obs-1", "normal"));
    }
    assert!(ingest(f, &check).await);
    let mut other = report("web-04", ReportKind::Agent, 1, 1_000);
    other.findings.push(finding("File[a]", "obs-1", "normal"));
    assert!(ingest(f, &other).await);
    assert_eq!(host(f, "web-03").await.state, "drifted");

    // web-03 applies r2: File[a] and File[b] changed (and verified), none failed.
    let mut apply = report("web-03", ReportKind::Apply, 2, 2_000);
    apply.revision = "git:r2".into();
    apply.changed = vec!["File[a]".into(), "File[b]".into(), "Service[nginx]".into()];
    apply.changed_total = 3;
    assert!(ingest(f, &apply).await);
    assert_eq!(
        open(f, "web-03").await,
        [conffile],
        "the applied ones close"
    );
    assert_eq!(host(f, "web-03").await.findings, 1);
    assert_eq!(
        clusters(f).await,
        [("File[a]".to_owned(), 1), (conffile.to_owned(), 1)],
        "web-03 left File[a]'s cluster; File[b]'s is gone"
    );

    // A newer check opens File[a] again; an apply older than it (late,
    // delivered after it) must not close it.
    let mut again = report("web-03", ReportKind::Check, 3, 3_000);
    again.findings.push(finding("File[a]", "obs-2", "normal"));
    again.findings.push(finding(conffile, "obs-1", "normal"));
    assert!(ingest(f, &again).await);
    let mut late = report("web-03", ReportKind::Apply, 4, 2_500);
    late.revision = "git:r3".into();
    late.changed = vec!["File[a]".into()];
    late.changed_total = 1;
    assert!(ingest(f, &late).await);
    assert_eq!(open(f, "web-03").await, ["File[a]", conffile], "late apply");
    assert_eq!(host(f, "web-03").await.findings, 2);

    // A clean apply with nothing changed closes nothing; one that changed
    // File[a] closes it, and the host is clean but for the conffile.
    let nothing = report("web-03", ReportKind::Apply, 5, 4_000);
    assert!(ingest(f, &nothing).await);
    assert_eq!(open(f, "web-03").await, ["File[a]", conffile]);
    let mut fixed = report("web-03", ReportKind::Apply, 6, 4_100);
    fixed.changed = vec!["File[a]".into()];
    fixed.changed_total = 1;
    assert!(ingest(f, &fixed).await);
    assert_eq!(open(f, "web-03").await, [conffile]);
    assert_eq!(
        clusters(f).await,
        [("File[a]".to_owned(), 1), (conffile.to_owned(), 1)],
        "web-04 alone in File[a]'s cluster (obs-1), web-03's obs-2 gone"
    );
}

#[test]
fn an_apply_closes_the_findings_of_the_resources_it_changed() {
    on_both!(an_apply_closes_what_it_converged);
}

/// An apply of the whole catalogue says which declared resources it did
/// not verify (`verified_except`): the host's open findings of every other
/// resource close, a resource a hand fix converged before the apply (found
/// unchanged, so not in `changed`) among them; a failed one's stays, and
/// so does a conffile's; an apply older than the host's last report closes
/// nothing; without the field only the changed ones close, as before.
async fn an_apply_closes_what_it_verified<B: Backend>(f: &Fleet<B>) {
    let conffile = "Package[nginx]:/etc/nginx/mime.types";
    let mut check = report("web-07", ReportKind::Check, 1, 1_000);
    for s in ["File[fixed]", "File[broken]", "User[u]", conffile] {
        check.findings.push(finding(s, "obs-1", "normal"));
    }
    assert!(ingest(f, &check).await);
    let mut other = report("web-08", ReportKind::Check, 1, 1_000);
    other
        .findings
        .push(finding("File[fixed]", "obs-1", "normal"));
    assert!(ingest(f, &other).await);

    // File[fixed] was fixed by hand: the apply found it as declared (not
    // changed); File[broken] failed; User[u] too was found unchanged.
    let mut apply = report("web-07", ReportKind::Apply, 2, 2_000);
    apply.verified_except = Some(vec!["File[broken]".into()]);
    assert!(ingest(f, &apply).await);
    assert_eq!(
        open(f, "web-07").await,
        ["File[broken]", conffile],
        "the verified ones close"
    );
    assert_eq!(host(f, "web-07").await.findings, 2);
    assert_eq!(
        clusters(f).await,
        [
            ("File[broken]".to_owned(), 1),
            ("File[fixed]".to_owned(), 1),
            (conffile.to_owned(), 1)
        ],
        "web-07 left File[fixed]'s cluster (web-08 still in it); User[u]'s is gone"
    );

    // A newer check opens File[fixed] again; an apply older than it
    // (delivered late) that verified everything closes nothing.
    let mut again = report("web-07", ReportKind::Check, 3, 3_000);
    for s in ["File[fixed]", "File[broken]", conffile] {
        again.findings.push(finding(s, "obs-2", "normal"));
    }
    assert!(ingest(f, &again).await);
    let mut late = report("web-07", ReportKind::Apply, 4, 2_500);
    late.verified_except = Some(vec![]);
    assert!(ingest(f, &late).await);
    assert_eq!(
        open(f, "web-07").await,
        ["File[broken]", "File[fixed]", conffile],
        "late apply"
    );

    // An apply without the field (an older host, a partial apply) and
    // nothing changed closes nothing; one verifying all closes every
    // resource's finding, never the conffile's.
    let partial = report("web-07", ReportKind::Apply, 5, 4_000);
    assert!(ingest(f, &partial).await);
    assert_eq!(open(f, "web-07").await.len(), 3);
    let mut all = report("web-07", ReportKind::Apply, 6, 4_100);
    all.verified_except = Some(vec![]);
    assert!(ingest(f, &all).await);
    assert_eq!(open(f, "web-07").await, [conffile]);
    assert_eq!(host(f, "web-07").await.findings, 1);
}

#[test]
fn an_apply_closes_the_findings_of_the_resources_it_verified() {
    on_both!(an_apply_closes_what_it_verified);
}

/// A finding an apply does not resolve stays open though its subject is
/// verified: a Tree's `unmanaged` entry (kept unless the Tree purges, so
/// the Tree is found as declared with the entry still there), a group's
/// `invalid_live_config` (`ValidationGroup[nginx]` is no declared
/// resource, so never in `verified_except`, and an apply that changes
/// nothing in the group runs no validator) and an `activation_owed` of a
/// service it did not change; a Tree's changed entry closes. A changed Tree
/// too leaves its `unmanaged` finding open. An apply that lists the
/// service as changed closes its `activation_owed` (it performed it).
async fn an_apply_keeps_what_it_does_not_resolve<B: Backend>(f: &Fleet<B>) {
    let of = |subject: &str, category: &str| {
        let mut x = finding(subject, "obs-1", "normal");
        x.category = category.into();
        x.signature = datum_fleet::report::finding_signature(subject, category, &x.paths);
        x
    };
    let mut check = report("web-09", ReportKind::Check, 1, 1_000);
    check.findings = vec![
        of("Tree[site]", "changed_outside"),
        of("Tree[site]", "unmanaged"),
        of("ValidationGroup[nginx]", "invalid_live_config"),
        of("Service[nginx]", "activation_owed"),
        of("File[gone]", "deleted_outside"),
    ];
    assert!(ingest(f, &check).await);
    let mut all = report("web-09", ReportKind::Apply, 2, 2_000);
    all.verified_except = Some(vec![]);
    assert!(ingest(f, &all).await);
    assert_eq!(
        open(f, "web-09").await,
        ["Service[nginx]", "Tree[site]", "ValidationGroup[nginx]"],
        "only the changed and deleted ones close"
    );
    let mut changed = report("web-09", ReportKind::Apply, 3, 3_000);
    changed.changed = vec!["Tree[site]".into()];
    changed.changed_total = 1;
    assert!(ingest(f, &changed).await);
    assert_eq!(
        open(f, "web-09").await,
        ["Service[nginx]", "Tree[site]", "ValidationGroup[nginx]"],
        "a changed Tree keeps its unmanaged entry"
    );
    // An apply that changed the service performed the reload it owed (the
    // engine fails a service whose owed activation fails): its
    // activation_owed closes; a group's finding does not.
    let mut reloaded = report("web-09", ReportKind::Apply, 4, 4_000);
    reloaded.changed = vec!["Service[nginx]".into(), "ValidationGroup[nginx]".into()];
    reloaded.changed_total = 2;
    assert!(ingest(f, &reloaded).await);
    assert_eq!(
        open(f, "web-09").await,
        ["Tree[site]", "ValidationGroup[nginx]"],
        "the changed service's activation_owed closes"
    );
}

#[test]
fn an_apply_leaves_open_what_it_does_not_resolve() {
    on_both!(an_apply_keeps_what_it_does_not_resolve);
}

/// A host's last report may be a check of a revision it has not applied:
/// the hosts view says both, as the host page does ("Revision", "Last
/// applied"), and the rollout lists it as not applied yet.
async fn the_last_applied_revision_is_told_apart<B: Backend>(f: &Fleet<B>) {
    let mut apply = report("web-05", ReportKind::Apply, 1, 1_000);
    apply.revision = "git:r1".into();
    assert!(ingest(f, &apply).await);
    let mut check = report("web-05", ReportKind::Check, 2, 1_100);
    check.revision = "git:r2".into();
    assert!(ingest(f, &check).await);
    let mut never = report("web-06", ReportKind::Check, 1, 1_100);
    never.revision = "git:r2".into();
    assert!(ingest(f, &never).await);
    let h = host(f, "web-05").await;
    assert_eq!(h.revision.as_deref(), Some("git:r2"));
    assert_eq!(h.last_applied_revision.as_deref(), Some("git:r1"));
    assert_eq!(host(f, "web-06").await.last_applied_revision, None);
    // The document the API serves says the same.
    let at = Staleness {
        now: 2_000,
        factor: 100.0,
        first_report_within: 3600,
    };
    let doc: serde_json::Value = serde_json::from_slice(&f.hosts_json(&at).await.unwrap()).unwrap();
    let applied: Vec<&serde_json::Value> = doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h["last_applied_revision"])
        .collect();
    assert_eq!(
        applied,
        [&serde_json::json!("git:r1"), &serde_json::Value::Null]
    );
}

#[test]
fn the_hosts_view_says_the_last_applied_revision() {
    on_both!(the_last_applied_revision_is_told_apart);
}
