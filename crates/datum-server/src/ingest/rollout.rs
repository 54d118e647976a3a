//! An apply: the host's outcome of its revision and that apply's
//! failures, and the retention of the host's revisions.

use std::collections::BTreeSet;

use datum_fleet::Report;

use super::CHUNK;
use super::late::store_val;
use super::shared::BatchState;
use crate::store::{Stmt, Val, values_rows};

/// An apply: the host's outcome of the revision (with its labels now) and
/// the failures of this apply of it.
pub(super) fn rollout_writes(
    report: &Report,
    store: Option<u128>,
    labels: &str,
    failed_apply: bool,
    batch: &mut BatchState,
    stmts: &mut Vec<Stmt>,
) {
    let host = report.host.as_str();
    let revision = report.revision.as_str();
    stmts.push(Stmt::new(
        "INSERT INTO host_revisions (host, revision, first_at, last_at, outcome, changed, failed, labels, seq, store_id) \
         VALUES ($1, $2, $3, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (host, revision) DO UPDATE SET \
         last_at = excluded.last_at, outcome = excluded.outcome, changed = excluded.changed, \
         failed = excluded.failed, labels = excluded.labels, seq = excluded.seq, \
         store_id = excluded.store_id",
        vec![
            host.into(),
            revision.into(),
            report.finished_at.into(),
            if failed_apply { "failed" } else { "converged" }.into(),
            report.changed_total.max(report.changed.len() as u64).into(),
            (report.failures.len() as u64).into(),
            labels.into(),
            report.seq.into(),
            store_val(store),
        ],
    ));
    let at = batch.revisions.entry(revision.to_owned()).or_insert(0);
    *at = (*at).max(report.finished_at);
    stmts.push(Stmt::new(
        "DELETE FROM failures WHERE host = $1 AND revision = $2",
        vec![host.into(), revision.into()],
    ));
    // One failure per resource (the first, as the table's key says).
    let mut seen = BTreeSet::new();
    let failures: Vec<_> = report
        .failures
        .iter()
        .filter(|f| seen.insert(f.resource.as_str()))
        .collect();
    for chunk in failures.chunks(CHUNK) {
        let mut params = Vec::with_capacity(chunk.len() * 10);
        for f in chunk {
            params.extend([
                host.into(),
                revision.into(),
                f.resource.as_str().into(),
                f.phase.as_str().into(),
                Val::opt_text(f.validator.as_deref()),
                Val::opt_text(f.validator_version.as_deref()),
                Val::opt_int(f.exit_status.map(i64::from)),
                f.signature.as_str().into(),
                f.message.as_str().into(),
                report.finished_at.into(),
            ]);
        }
        stmts.push(Stmt::built(
            format!(
                "INSERT INTO failures (host, revision, resource, phase, validator, validator_version, \
                 exit_status, signature, message, at) VALUES {}",
                values_rows(1, 10, chunk.len())
            ),
            params,
        ));
    }
}

/// The host's revisions beyond the newest `kept` (by last apply, then
/// name in byte order): their rows in `host_revisions` and their
/// failures, as `retention.reports_per_host` keeps the host's reports
/// (each apply adds at most one revision); and the fleet's record of a
/// revision that no host keeps any more. Else every revision a host ever applied stayed
/// with all its failures, whatever the retention: one host applying a new
/// revision each time, with thousands of failures, grew the store without
/// bound.
pub(super) fn revisions_retention(host: &str, kept: u32, stmts: &mut Vec<Stmt>) {
    // Equal times are decided by name in byte order (PostgreSQL's own
    // order is the database's collation, and kept other revisions than
    // SQLite in a database collated by a language).
    const OLD: &str = "SELECT revision FROM host_revisions WHERE host = $1 \
         AND (last_at, revision COLLATE \"C\") <= \
         (SELECT last_at, revision FROM host_revisions WHERE host = $1 \
          ORDER BY last_at DESC, revision COLLATE \"C\" DESC LIMIT 1 OFFSET $2)";
    let params = || vec![host.into(), i64::from(kept.max(1)).into()];
    stmts.push(Stmt::built(
        format!("DELETE FROM failures WHERE host = $1 AND revision IN ({OLD})"),
        params(),
    ));
    // The fleet's records of those revisions locked first, by a statement
    // of their own: a server storing another host's apply of one of them
    // holds its row until it commits, and the `DELETE` below, a statement
    // begun after that, then sees that host's row. Locked by the `DELETE`
    // itself, the row was deleted after the wait on what its `NOT EXISTS`
    // had read before it (PostgreSQL reads again only the row it waited
    // for), and a revision a host had just applied left the fleet's list.
    stmts.push(Stmt::built(
        format!("UPDATE revisions SET last_at = last_at WHERE revision IN ({OLD})"),
        params(),
    ));
    stmts.push(Stmt::built(
        format!(
            "DELETE FROM revisions WHERE revision IN ({OLD}) AND NOT EXISTS \
             (SELECT 1 FROM host_revisions o WHERE o.revision = revisions.revision AND o.host <> $1)"
        ),
        params(),
    ));
    stmts.push(Stmt::built(
        format!("DELETE FROM host_revisions WHERE host = $1 AND revision IN ({OLD})"),
        params(),
    ));
}
