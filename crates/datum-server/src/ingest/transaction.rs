//! The ingest transaction of a batch, in its phases (see the module
//! above): the key gate, the host locks and reads, then the writes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use datum_fleet::ReportKind;

use super::findings::{closes_findings, stored_findings};
use super::late::{Last, is_late, is_seen_before};
use super::shared::BatchState;
use super::statements::{
    daily_rows, host_lock, hosts_in, key_gate, oldest_kept, report_rows, revisions_lock,
};
use super::writes::writes;
use super::{CHUNK, Submitted};
use crate::store::{Phases, Row, Step, Stmt, StoreError, Val};

/// The ingest transaction of a batch (see the module header).
pub(super) struct Ingest {
    /// In host order.
    reports: Vec<Arc<Submitted>>,
    /// Where each report of `reports` sits in the batch as submitted.
    position: Vec<usize>,
    /// Per report (batch order): its key was new.
    pub(super) fresh: Vec<bool>,
    phase: u8,
    /// Where the reads start in phase 2's answers (after the host locks):
    /// the checking hosts' last-report times, their findings, then the
    /// applying hosts' revisions.
    reads_from: usize,
    /// How many of phase 2's reads are the hosts' oldest reports kept
    /// (first, after the host locks).
    horizon_reads: usize,
    /// How many of phase 2's reads are last-report times.
    latest_reads: usize,
    /// How many of phase 2's reads are stored findings.
    findings_reads: usize,
    /// How many of phase 2's reads are the last-report times of the hosts
    /// whose apply changed something (it closes their findings unless it
    /// is older).
    closing_reads: usize,
}

impl Ingest {
    pub(super) fn new(batch: Vec<Arc<Submitted>>) -> Self {
        let mut order: Vec<usize> = (0..batch.len()).collect();
        order.sort_by(|a, b| batch[*a].report.host.cmp(&batch[*b].report.host));
        let reports = order.iter().map(|i| Arc::clone(&batch[*i])).collect();
        Ingest {
            reports,
            fresh: vec![false; batch.len()],
            position: order,
            phase: 0,
            reads_from: 0,
            horizon_reads: 0,
            latest_reads: 0,
            findings_reads: 0,
            closing_reads: 0,
        }
    }

    /// The reports whose keys were new (indexes into `reports`).
    fn new_ones(&self) -> Vec<usize> {
        (0..self.reports.len())
            .filter(|i| self.fresh[self.position[*i]])
            .collect()
    }
}

impl Phases for Ingest {
    fn next(&mut self, rows: Vec<Vec<Row>>) -> Result<Step, StoreError> {
        self.phase += 1;
        Ok(match self.phase {
            1 => Step::Run(self.reports.chunks(CHUNK).map(key_gate).collect()),
            2 => {
                // One report per host in a batch: the hosts whose key was
                // new name the new reports.
                let new_hosts: BTreeSet<&str> = rows
                    .iter()
                    .flatten()
                    .filter_map(|r| r.first().and_then(Val::text))
                    .collect();
                for (i, s) in self.reports.iter().enumerate() {
                    self.fresh[self.position[i]] = new_hosts.contains(s.report.host.as_str());
                }
                if !self.fresh.iter().any(|f| *f) {
                    return Ok(Step::Commit);
                }
                let new: Vec<&Submitted> = self
                    .new_ones()
                    .into_iter()
                    .map(|i| &*self.reports[i])
                    .collect();
                // The hosts' rows (in host order, so two servers lock them
                // in the same order), then the stored findings of the
                // checking ones.
                let mut stmts: Vec<Stmt> = new.chunks(CHUNK).map(host_lock).collect();
                self.reads_from = stmts.len();
                stmts.extend(new.chunks(CHUNK).map(oldest_kept));
                self.horizon_reads = stmts.len() - self.reads_from;
                let (applying, checking): (Vec<&Submitted>, Vec<&Submitted>) =
                    new.iter().partition(|s| s.report.kind == ReportKind::Apply);
                // Read under the lock: a report older than what it would
                // replace is late (its outbox drained after a newer one
                // went another way, a restored state store) and must not
                // replace newer state. A check is judged by the host's last
                // report, an apply by the last apply of its revision. (One
                // statement of hosts LEFT JOIN findings instead of the
                // first two made PostgreSQL's CPU per report 2.7 times
                // greater at 64 reports a batch: docs/benchmarks.md.)
                stmts.extend(checking.chunks(CHUNK).map(|c| {
                    hosts_in(
                        "SELECT name, last_report_at, seq, store_id FROM hosts WHERE name IN",
                        c,
                    )
                }));
                self.latest_reads = stmts.len() - self.reads_from - self.horizon_reads;
                // An apply that changed something, or says what it
                // verified, closes those resources' findings
                // (`applied_writes`): its host's findings too, and its last
                // report, which the apply must not be older than.
                let closing: Vec<&Submitted> = applying
                    .iter()
                    .copied()
                    .filter(|s| closes_findings(&s.report))
                    .collect();
                let with_findings: Vec<&Submitted> =
                    checking.iter().chain(&closing).copied().collect();
                stmts.extend(with_findings.chunks(CHUNK).map(|c| {
                    hosts_in(
                        "SELECT signature, observed, class, changed_by, host, subject, category \
                         FROM findings WHERE host IN",
                        c,
                    )
                }));
                self.findings_reads =
                    stmts.len() - self.reads_from - self.horizon_reads - self.latest_reads;
                stmts.extend(closing.chunks(CHUNK).map(|c| {
                    hosts_in(
                        "SELECT name, last_report_at, seq, store_id FROM hosts WHERE name IN",
                        c,
                    )
                }));
                self.closing_reads = stmts.len()
                    - self.reads_from
                    - self.horizon_reads
                    - self.latest_reads
                    - self.findings_reads;
                stmts.extend(applying.chunks(CHUNK).map(|c| {
                    hosts_in(
                        "SELECT host, revision, last_at, seq, store_id FROM host_revisions \
                         WHERE host IN",
                        c,
                    )
                }));
                Step::Run(stmts)
            }
            3 => {
                let mut answers = rows.into_iter().skip(self.reads_from);
                // Host -> its oldest report kept (finish, sequence number,
                // store) and how many it holds.
                let horizon: HashMap<String, (Last, i64)> = answers
                    .by_ref()
                    .take(self.horizon_reads)
                    .flatten()
                    .filter_map(|r| {
                        Some((
                            r.first()?.text()?.to_owned(),
                            (
                                Last::of(
                                    r.get(1)?.int()?,
                                    r.get(2)?.int()?,
                                    r.get(4).and_then(Val::text),
                                ),
                                r.get(3)?.int()?,
                            ),
                        ))
                    })
                    .collect();
                // A report older than every one retention keeps of a host
                // that holds all it keeps may be one whose key went with
                // it (a restored state store sending its outbox again):
                // taken as already seen, its key taken back. Only if it is
                // also numbered before the oldest kept: one numbered after
                // it came later from its store, whatever its finish says
                // (the host's clock set back), so no kept report came
                // after it and its key cannot have gone: it is new. And
                // only if it comes from the oldest kept's store, when it
                // says which made it: another store (one made anew, its
                // numbers from 1 again) shares neither its numbering nor
                // its clock, so its reports are new (`seen_before`).
                let mut seen_before = Vec::new();
                for i in self.new_ones() {
                    let s = &self.reports[i];
                    if horizon.get(&s.report.host).is_some_and(|(oldest, held)| {
                        *held >= i64::from(s.reports_kept)
                            && is_seen_before(&s.report, s.outbox.store, oldest)
                    }) {
                        self.fresh[self.position[i]] = false;
                        seen_before.push(Stmt::new(
                            "DELETE FROM report_keys WHERE host = $1 AND key = $2",
                            vec![s.report.host.as_str().into(), s.report.key.as_str().into()],
                        ));
                    }
                }
                // Host -> the finish, sequence number and store of the
                // report a new one must not be older than.
                let mut latest = Last::by_host(answers.by_ref().take(self.latest_reads).flatten());
                let mut by_host: HashMap<String, Vec<Row>> = HashMap::new();
                for row in answers.by_ref().take(self.findings_reads).flatten() {
                    let host = row.get(4).and_then(Val::text).unwrap_or("").to_owned();
                    by_host.entry(host).or_default().push(row);
                }
                // Host -> its last report, for the applies that close findings.
                let last_report =
                    Last::by_host(answers.by_ref().take(self.closing_reads).flatten());
                // Host, revision, its last apply: only the revision each
                // applying report names counts.
                let reported: HashMap<&str, &str> = self
                    .reports
                    .iter()
                    .filter(|s| s.report.kind == ReportKind::Apply)
                    .map(|s| (s.report.host.as_str(), s.report.revision.as_str()))
                    .collect();
                for row in answers.flatten() {
                    if let (Some(host), Some(revision), Some(last), Some(seq)) = (
                        row.first().and_then(Val::text),
                        row.get(1).and_then(Val::text),
                        row.get(2).and_then(Val::int),
                        row.get(3).and_then(Val::int),
                    ) && reported.get(host) == Some(&revision)
                    {
                        let store = row.get(4).and_then(Val::text);
                        latest.insert(host.to_owned(), Last::of(last, seq, store));
                    }
                }
                let mut batch = BatchState::default();
                let new: Vec<&Submitted> = self
                    .new_ones()
                    .into_iter()
                    .map(|i| &*self.reports[i])
                    .collect();
                if new.is_empty() {
                    return Ok(Step::Run(seen_before));
                }
                // The reports themselves first: retention and the counts
                // below see them.
                let mut stmts = seen_before;
                stmts.extend(new.chunks(CHUNK).map(report_rows));
                // The fleet's records of the revisions this batch's applies
                // write or may forget, locked first and in key order (each
                // host's retention below locks its own, in host order, and
                // the batch's applied revisions come last: two servers
                // deadlocked, one host moving from x to y while another
                // moved from y to x).
                stmts.extend(revisions_lock(&new));
                for s in &new {
                    let stored = by_host
                        .get(&s.report.host)
                        .map(|r| stored_findings(r))
                        .unwrap_or_default();
                    let late = latest
                        .get(&s.report.host)
                        .is_some_and(|last| is_late(&s.report, s.outbox.store, last));
                    let older = last_report
                        .get(&s.report.host)
                        .is_some_and(|last| is_late(&s.report, s.outbox.store, last));
                    writes(s, &stored, late, older, &mut batch, &mut stmts);
                }
                stmts.extend(new.chunks(CHUNK).map(daily_rows));
                batch.finish(&mut stmts);
                // Last, so the slot's row is held only until the commit.
                stmts.push(crate::cache::bump());
                Step::Run(stmts)
            }
            _ => Step::Commit,
        })
    }
}
