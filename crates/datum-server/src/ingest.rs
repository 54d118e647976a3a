//! Ingest: storing reports, many in one transaction, and keeping the
//! fleet's current state (what the views read) up to date as they arrive.
//!
//! **Group commit.** Reports that arrive while a transaction is being
//! written wait in one queue; a writer takes everything waiting (at most
//! [`MAX_BATCH`], at most one report per host) into its next transaction,
//! so a durable commit is paid once per batch instead of once per report.
//! Every report is still answered only after the commit that holds it: the
//! HTTP handler awaits its own result. Writers are tasks started when work
//! arrives and ended when the queue is empty ([`Backend::writers`] of them
//! at most: one on SQLite's single connection, two on PostgreSQL so one
//! batch is built while the other commits). A batch that fails (a deadlock
//! with another server, a row the database refuses) is retried report by
//! report, so one bad report fails alone.
//!
//! **The transaction, in [`Phases`]:**
//! 1. each report's idempotency key (`report_keys`, `ON CONFLICT DO NOTHING
//!    RETURNING`): a key stored before makes that report a duplicate, and
//!    it writes nothing else;
//! 2. for the new ones, in host order, the host's row (locked, so two
//!    servers storing reports of one host take turns, and always in the
//!    same order, so they cannot deadlock), then the host's oldest report
//!    kept, the checking hosts' last report times and stored findings, and
//!    the applying hosts' last apply of the revision they report. A report
//!    older than the oldest kept of a host holding as many as retention
//!    keeps, and numbered before it in the same state store, may be one
//!    whose key went with it: it is taken as a duplicate (its key taken
//!    back, nothing written; see `is_seen_before`). A report older than the last
//!    (finished in an earlier second, or in the same one with a lower
//!    `seq` from the same state store, see `is_late`) is late: stored and counted, but a late check leaves the newer
//!    findings and clusters alone and a late apply the revision's newer
//!    outcome and failures;
//! 3. first the fleet's records of every revision the batch's applies
//!    report or their hosts hold, locked in key order, those not made yet
//!    made in their place (as `remove` locks them, before any drift
//!    cluster: so no two transactions deadlock);
//!    then everything else: the report itself, the revision's outcome and
//!    failures (apply), the findings that changed (check: compared with the
//!    stored ones, so an unchanged finding costs nothing; a finding the host
//!    did not have is a plain insert), the sampling round, retention, then
//!    the host's picture (its columns, the pre-rendered JSON the hosts view
//!    lists, and its counts) as the one new version of its row the report
//!    writes; the daily aggregates of the batch at once; then, for the whole
//!    batch, in key order, the revisions' last-applied times and the drift
//!    clusters' host counts (moved as by the batch's reports one after
//!    another in host order: a cluster whose last host left during the
//!    batch is gone, and the hosts that joined after start it anew), and
//!    the store's generation (so every server's kept answers are computed
//!    again, see [`crate::cache`]).
//!
//! **Rows not there yet.** Every lock of rows two transactions share is
//! one statement over the keys in their order that makes a missing row in
//! its place (the hosts' upsert, `revisions_lock`, the clusters' walk in
//! `BatchState::finish`): a row another transaction is making is waited
//! for there, as a row it holds would be, so a row that appears after a
//! batch looked for it is still taken in order. `Fleet::remove` makes
//! none: it locks only its host's records and clusters, which exist while
//! it holds the host's row.
//!
//! Owns: the ingest SQL, [`GroupCommit`]. Must not: authenticate, or read
//! anything but what the report's own host stored.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use datum_fleet::{Finding, Report, ReportKind};
use tokio::sync::oneshot;

use crate::fleet::OutboxHeaders;
use crate::store::{Backend, Phases, Row, Step, Stmt, StoreError, Val, values_rows};
use crate::views::{self, HostPicture};

/// Reports in one transaction at most.
pub const MAX_BATCH: usize = 64;

/// Rows in one multi-row statement at most.
const CHUNK: usize = 64;

/// The largest outbox depth or dropped count one report is taken to state
/// (more than any outbox holds).
const OUTBOX_COUNT_LIMIT: u64 = u32::MAX as u64;

/// One report to store, as the API handed it over.
#[derive(Debug)]
pub struct Submitted {
    pub report: Report,
    /// The report's JSON as received (stored as is).
    pub raw: String,
    pub received_at: i64,
    pub outbox: OutboxHeaders,
    /// Reports of the host the retention keeps.
    pub reports_kept: u32,
}

/// A report waiting for a writer, and where its answer goes.
struct Job {
    data: Arc<Submitted>,
    done: oneshot::Sender<Result<bool, StoreError>>,
}

/// The queue of reports waiting to be written, shared by every clone of a
/// [`crate::fleet::Fleet`].
#[derive(Default)]
pub struct GroupCommit {
    inner: Mutex<Queue>,
    transactions: AtomicU64,
    reports: AtomicU64,
}

/// What this process's writers did (for `/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IngestStats {
    /// Ingest transactions committed.
    pub transactions: u64,
    /// Reports (new or duplicate) they answered.
    pub reports: u64,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.lock();
        f.debug_struct("GroupCommit")
            .field("waiting", &q.jobs.len())
            .field("writers", &q.writers)
            .finish()
    }
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Writer tasks running.
    writers: usize,
}

impl GroupCommit {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A writer that panicked left the queue itself consistent.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stores `data` and answers once the transaction holding it committed:
    /// `Ok(false)` when its key was stored before (nothing written).
    pub async fn submit<B: Backend>(
        self: &Arc<Self>,
        backend: &B,
        data: Submitted,
    ) -> Result<bool, StoreError> {
        let (done, answer) = oneshot::channel();
        let start_writer = {
            let mut q = self.lock();
            q.jobs.push_back(Job {
                data: Arc::new(data),
                done,
            });
            let start = q.writers < backend.writers().max(1);
            if start {
                q.writers += 1;
            }
            start
        };
        if start_writer {
            let (queue, backend) = (Arc::clone(self), backend.clone());
            tokio::spawn(async move { queue.write(&backend).await });
        }
        answer.await.map_err(|_| StoreError::Database {
            backend: backend.name(),
            action: "cannot store the report",
            detail: "the writer stopped before committing it".to_owned(),
        })?
    }

    pub fn stats(&self) -> IngestStats {
        IngestStats {
            transactions: self.transactions.load(Ordering::Relaxed),
            reports: self.reports.load(Ordering::Relaxed),
        }
    }

    /// A writer: batches until the queue is empty.
    async fn write<B: Backend>(&self, backend: &B) {
        let mut slot = WriterSlot {
            queue: self,
            held: true,
        };
        loop {
            let batch = {
                let mut q = self.lock();
                if q.jobs.is_empty() {
                    q.writers -= 1;
                    slot.held = false;
                    return;
                }
                take_batch(&mut q.jobs)
            };
            let results = commit(backend, &batch).await;
            self.reports
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            self.transactions.fetch_add(
                if results.iter().all(Result::is_ok) && batch.len() > 1 {
                    1
                } else {
                    results.len() as u64
                },
                Ordering::Relaxed,
            );
            for (job, result) in batch.into_iter().zip(results) {
                // A client that went away still had its report stored.
                let _ = job.done.send(result);
            }
        }
    }
}

/// Gives a writer's place back if it ends abnormally (a panic), so later
/// reports still find a writer.
struct WriterSlot<'a> {
    queue: &'a GroupCommit,
    held: bool,
}

impl Drop for WriterSlot<'_> {
    fn drop(&mut self) {
        if self.held {
            self.queue.lock().writers -= 1;
        }
    }
}

/// The oldest waiting jobs, at most one per host (a host's next report
/// waits for the next batch: it is compared with what this one stores).
fn take_batch(jobs: &mut VecDeque<Job>) -> Vec<Job> {
    let mut hosts = BTreeSet::new();
    let mut batch = Vec::new();
    let mut rest = VecDeque::new();
    while let Some(job) = jobs.pop_front() {
        if batch.len() < MAX_BATCH && hosts.insert(job.data.report.host.clone()) {
            batch.push(job);
        } else {
            rest.push_back(job);
        }
    }
    *jobs = rest;
    batch
}

/// Writes `batch` in one transaction; when that fails, each report alone.
async fn commit<B: Backend>(backend: &B, batch: &[Job]) -> Vec<Result<bool, StoreError>> {
    let data: Vec<Arc<Submitted>> = batch.iter().map(|j| Arc::clone(&j.data)).collect();
    match backend.phased(Ingest::new(data.clone())).await {
        Ok(done) => return done.fresh.into_iter().map(Ok).collect(),
        Err(e) if data.len() == 1 => return vec![Err(e)],
        Err(_) => {}
    }
    let mut out = Vec::with_capacity(data.len());
    for d in data {
        out.push(
            backend
                .phased(Ingest::new(vec![d]))
                .await
                .map(|done| done.fresh.first().copied().unwrap_or(false)),
        );
    }
    out
}

/// Stores `batch` (at most one report per host) in one transaction, as the
/// group commit stores reports that arrive together; whether each key was
/// new. For tests, which cannot time reports to arrive together.
#[doc(hidden)]
pub async fn store_together<B: Backend>(
    backend: &B,
    batch: Vec<Submitted>,
) -> Result<Vec<bool>, StoreError> {
    let data = batch.into_iter().map(Arc::new).collect();
    backend
        .phased(Ingest::new(data))
        .await
        .map(|done| done.fresh)
}

/// The ingest transaction of a batch (see the module header).
struct Ingest {
    /// In host order.
    reports: Vec<Arc<Submitted>>,
    /// Where each report of `reports` sits in the batch as submitted.
    position: Vec<usize>,
    /// Per report (batch order): its key was new.
    fresh: Vec<bool>,
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
}

impl Ingest {
    fn new(batch: Vec<Arc<Submitted>>) -> Self {
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
                stmts.extend(checking.chunks(CHUNK).map(|c| {
                    hosts_in(
                        "SELECT signature, observed, class, changed_by, host FROM findings \
                         WHERE host IN",
                        c,
                    )
                }));
                self.findings_reads =
                    stmts.len() - self.reads_from - self.horizon_reads - self.latest_reads;
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
                let mut latest: HashMap<String, Last> = answers
                    .by_ref()
                    .take(self.latest_reads)
                    .flatten()
                    .filter_map(|r| {
                        Some((
                            r.first()?.text()?.to_owned(),
                            Last::of(
                                r.get(1)?.int()?,
                                r.get(2)?.int()?,
                                r.get(3).and_then(Val::text),
                            ),
                        ))
                    })
                    .collect();
                let mut by_host: HashMap<String, Vec<Row>> = HashMap::new();
                for row in answers.by_ref().take(self.findings_reads).flatten() {
                    let host = row.get(4).and_then(Val::text).unwrap_or("").to_owned();
                    by_host.entry(host).or_default().push(row);
                }
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
                    writes(s, &stored, late, &mut batch, &mut stmts);
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

/// Whether `report` is older than the report it would replace, finished at
/// `last.0` with sequence number `last.1`: it finished before, or in the
/// same second with a lower number (the host numbers its reports in the
/// order it makes and sends them). A report numbered 1 is the first of a
/// state store made anew (`--rebuild-state`, a host installed again under
/// its name), whose numbers start again: they say nothing of its order
/// against the old store's reports, so it is late only when it finished
/// before; taken, it makes 1 the host's number, which the new store's next
/// reports follow. That rule is for reports that do not say which store
/// made them (hosts older than `Datum-Store-Id`): a report that does, from
/// another store than `last`'s (or than a report that did not say), starts
/// a numbering of its own and is late only when it finished in an earlier
/// second, whatever its number; one from `last`'s store is judged by its
/// number in the second. So a new store's report 2 whose report 1 never
/// arrived is not late either. The picture's `FRESH` is the same rule.
fn is_late(report: &Report, store: Option<u128>, last: &Last) -> bool {
    let seq = i64::try_from(report.seq).unwrap_or(i64::MAX);
    let numbered = (report.finished_at, seq) < (last.at, last.seq);
    match store {
        Some(id) if last.store.as_deref() == Some(store_hex(id).as_str()) => numbered,
        Some(_) => report.finished_at < last.at,
        None if report.seq == FIRST_SEQ => report.finished_at < last.at,
        None => numbered,
    }
}

/// Whether `report` (of `store`, when it says) is one the host sent before
/// and whose key went with it, judged against `oldest`, the oldest report
/// kept of a host holding all that retention keeps: it is late against it
/// ([`is_late`]) and numbered before it. A report that says which store
/// made it is judged only against a report of that store: one of another
/// store (made anew, numbered from 1 again, perhaps with its host's clock
/// set back) or against a report that did not say is new. One that does
/// not say (an older host) is judged as before the stores were known,
/// the seq-1 rule included.
fn is_seen_before(report: &Report, store: Option<u128>, oldest: &Last) -> bool {
    let seq = i64::try_from(report.seq).unwrap_or(i64::MAX);
    let same_store = match store {
        Some(id) => oldest.store.as_deref() == Some(store_hex(id).as_str()),
        None => true,
    };
    same_store && is_late(report, store, oldest) && seq < oldest.seq
}

/// The report a new one is judged against ([`is_late`]): its finish, its
/// number and the store it said it came from.
struct Last {
    at: i64,
    seq: i64,
    store: Option<String>,
}

impl Last {
    fn of(at: i64, seq: i64, store: Option<&str>) -> Last {
        Last {
            at,
            seq,
            store: store.map(str::to_owned),
        }
    }
}

/// A store id as the server keeps it: 32 lowercase hex digits.
fn store_hex(id: u128) -> String {
    format!("{id:032x}")
}

/// A report's store id as a statement's parameter (NULL when unsaid).
fn store_val(id: Option<u128>) -> Val {
    id.map_or(Val::NullText, |id| Val::Text(store_hex(id)))
}

/// The number of a state store's first report (its outbox's `next_seq`
/// starts there).
const FIRST_SEQ: u64 = 1;

/// A finding as stored for a host.
struct Stored {
    observed: String,
    class: String,
    /// Its writers as stored (JSON, `[]` when none).
    changed_by: String,
}

fn stored_findings(rows: &[Row]) -> HashMap<String, Stored> {
    rows.iter()
        .filter_map(|r| {
            Some((
                r.first()?.text()?.to_owned(),
                Stored {
                    observed: r.get(1).and_then(Val::text).unwrap_or("").to_owned(),
                    class: r.get(2).and_then(Val::text).unwrap_or("").to_owned(),
                    changed_by: r.get(3).and_then(Val::text).unwrap_or("[]").to_owned(),
                },
            ))
        })
        .collect()
}

/// How the batch moves the shared rows (written last, in key order).
#[derive(Default)]
struct BatchState {
    /// Revision -> when it was last applied in this batch.
    revisions: BTreeMap<String, i64>,
    clusters: BTreeMap<(String, String), ClusterMove>,
}

/// One drift cluster's change in a batch, its reports taken one after
/// another in host order (as separate batches would store them).
#[derive(Default)]
struct ClusterMove {
    /// Hosts joining minus hosts leaving.
    delta: i64,
    /// The lowest `delta` reached (0 or less): when the cluster's stored
    /// host count plus this is 0, its last host left during the batch and
    /// the cluster starts again with the hosts that joined after.
    low: i64,
    /// What the batch's hosts showing it say of it.
    all: Sighting,
    /// The same, of the hosts after `delta` last reached `low` (what a
    /// cluster started again is made of).
    since_low: Sighting,
    /// A host left it, or one staying in it gives it another class now:
    /// its class is read again from the findings of the hosts it has (the
    /// class that host gave it may be no other host's).
    reclass: bool,
}

/// What the hosts of a batch showing one drift cluster say of it.
struct Sighting {
    /// The earliest first sighting of the hosts joining.
    first_seen: i64,
    /// The latest report showing it.
    last_seen: i64,
    /// A finding of it (for a cluster that did not exist yet).
    sample: Option<Finding>,
    /// The most consecutive checks a host of this batch saw it in.
    checks: u64,
    /// The first in byte order of the classes they give it (hosts may
    /// class one resource differently).
    class: Option<String>,
}

impl Default for Sighting {
    fn default() -> Self {
        Sighting {
            first_seen: i64::MAX,
            last_seen: 0,
            sample: None,
            checks: 0,
            class: None,
        }
    }
}

impl Sighting {
    fn see(&mut self, f: &Finding, finished_at: i64, joins: bool) {
        self.last_seen = self.last_seen.max(finished_at);
        self.checks = self.checks.max(f.checks.unwrap_or(1));
        if joins {
            self.first_seen = self.first_seen.min(f.first_seen);
        }
        if self.sample.is_none() {
            self.sample = Some(f.clone());
        }
        if self.class.as_ref().is_none_or(|c| f.class < *c) {
            self.class = Some(f.class.clone());
        }
    }
}

impl ClusterMove {
    /// A host of the batch left the cluster.
    fn leave(&mut self) {
        self.reclass = true;
        self.delta -= 1;
        if self.delta <= self.low {
            self.low = self.delta;
            self.since_low = Sighting::default();
        }
    }

    /// A host of the batch shows it (`joins`: it did not before).
    fn see(&mut self, f: &Finding, finished_at: i64, joins: bool) {
        if joins {
            self.delta += 1;
        }
        self.all.see(f, finished_at, joins);
        self.since_low.see(f, finished_at, joins);
    }
}

/// A cluster's columns from what the batch saw (`subject`, `category` and
/// `paths` from its sample, the first class in byte order; empty when it
/// has none).
fn cluster_columns(seen: &Sighting) -> [Val; 7] {
    let (subject, category, paths) = match &seen.sample {
        Some(f) => (
            f.subject.as_str(),
            f.category.as_str(),
            serde_json::to_string(&f.paths).unwrap_or_default(),
        ),
        None => ("", "", "[]".to_owned()),
    };
    [
        subject.into(),
        category.into(),
        seen.class.as_deref().unwrap_or("").into(),
        paths.into(),
        seen.first_seen.into(),
        seen.last_seen.into(),
        seen.checks.into(),
    ]
}

/// The upsert of a cluster no host left in the batch, and of one that
/// starts again (`DO UPDATE` only when it lives on).
const CLUSTER_UPSERT: &str = "INSERT INTO drift_clusters (signature, observed, hosts, subject, \
     category, class, paths, first_seen, last_seen, checks) VALUES";

/// The upserts of clusters no host of the batch left (added to, or made),
/// in the order given, [`CHUNK`] a statement.
fn cluster_upserts(moves: &[(&(String, String), &ClusterMove)], stmts: &mut Vec<Stmt>) {
    for chunk in moves.chunks(CHUNK) {
        let mut params = Vec::with_capacity(chunk.len() * 10);
        for ((signature, observed), m) in chunk {
            params.extend([
                signature.as_str().into(),
                observed.as_str().into(),
                m.delta.into(),
            ]);
            params.extend(cluster_columns(&m.all));
        }
        stmts.push(Stmt::built(
            format!(
                "{CLUSTER_UPSERT} {} ON CONFLICT (signature, observed) \
                 DO UPDATE SET hosts = drift_clusters.hosts + excluded.hosts, class = CASE \
                 WHEN excluded.class COLLATE \"C\" < drift_clusters.class COLLATE \"C\" \
                 THEN excluded.class ELSE drift_clusters.class END, first_seen = CASE \
                 WHEN excluded.first_seen < drift_clusters.first_seen THEN excluded.first_seen \
                 ELSE drift_clusters.first_seen END, last_seen = CASE \
                 WHEN excluded.last_seen > drift_clusters.last_seen THEN excluded.last_seen \
                 ELSE drift_clusters.last_seen END, checks = CASE \
                 WHEN excluded.checks > drift_clusters.checks THEN excluded.checks \
                 ELSE drift_clusters.checks END",
                values_rows(1, 10, chunk.len())
            ),
            params,
        ));
    }
}

impl BatchState {
    fn cluster(&mut self, signature: &str, observed: &str) -> &mut ClusterMove {
        self.clusters
            .entry((signature.to_owned(), observed.to_owned()))
            .or_default()
    }

    /// The shared rows' statements.
    fn finish(self, stmts: &mut Vec<Stmt>) {
        for (revision, at) in &self.revisions {
            stmts.push(Stmt::new(
                "INSERT INTO revisions (revision, first_at, last_at) VALUES ($1, $2, $2) \
                 ON CONFLICT (revision) DO UPDATE SET last_at = CASE \
                 WHEN excluded.last_at > revisions.last_at THEN excluded.last_at \
                 ELSE revisions.last_at END",
                vec![revision.as_str().into(), (*at).into()],
            ));
        }
        // The clusters in key order, whatever the batch does to each: two
        // servers' batches lock the rows they share in the same order, so
        // they cannot deadlock (a batch that first took the clusters its
        // hosts joined, then those they left, did with one moving hosts
        // the other way). The clusters no host of the batch left, between
        // two that one left, go in multi-row upserts.
        let mut run: Vec<(&(String, String), &ClusterMove)> = Vec::new();
        for (key, m) in &self.clusters {
            if m.low == 0 {
                run.push((key, m));
                continue;
            }
            cluster_upserts(&run, stmts);
            run.clear();
            // A cluster a host of the batch left. One whose last host left
            // (its count plus the lowest the batch took it to is 0) is
            // gone, and the hosts that joined after make it anew, with
            // their first sighting, as when the leaving and the joining
            // reports come in batches of their own; else it lives on,
            // moved by all of them.
            let (signature, observed) = key;
            let key = || -> Vec<Val> { vec![signature.as_str().into(), observed.as_str().into()] };
            let mut params = key();
            params.push(m.low.into());
            stmts.push(Stmt::new(
                "DELETE FROM drift_clusters WHERE signature = $1 AND observed = $2 \
                 AND hosts + $3 <= 0",
                params,
            ));
            let mut lives_on = key();
            lives_on.extend([
                m.delta.into(),
                m.all.first_seen.into(),
                m.all.last_seen.into(),
                m.all.checks.into(),
                Val::opt_text(m.all.class.as_deref()),
            ]);
            if m.delta > m.low {
                // Hosts joined after the lowest point: they make the
                // cluster if it went, else it lives on.
                let mut params = key();
                params.push((m.delta - m.low).into());
                params.extend(cluster_columns(&m.since_low));
                params.extend(lives_on.split_off(2));
                stmts.push(Stmt::new(
                    "INSERT INTO drift_clusters (signature, observed, hosts, subject, category, \
                     class, paths, first_seen, last_seen, checks) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                     ON CONFLICT (signature, observed) DO UPDATE SET \
                     hosts = drift_clusters.hosts + $11, first_seen = CASE \
                     WHEN $12 < drift_clusters.first_seen THEN $12 ELSE drift_clusters.first_seen END, \
                     last_seen = CASE WHEN $13 > drift_clusters.last_seen THEN $13 \
                     ELSE drift_clusters.last_seen END, checks = CASE \
                     WHEN $14 > drift_clusters.checks THEN $14 ELSE drift_clusters.checks END, \
                     class = CASE WHEN drift_clusters.class COLLATE \"C\" > $15 \
                     THEN $15 ELSE drift_clusters.class END",
                    params,
                ));
            } else {
                stmts.push(Stmt::new(
                    "UPDATE drift_clusters SET hosts = hosts + $3, first_seen = CASE \
                     WHEN $4 < first_seen THEN $4 ELSE first_seen END, last_seen = CASE \
                     WHEN $5 > last_seen THEN $5 ELSE last_seen END, checks = CASE \
                     WHEN $6 > checks THEN $6 ELSE checks END, class = CASE \
                     WHEN class COLLATE \"C\" > $7 THEN $7 ELSE class END \
                     WHERE signature = $1 AND observed = $2",
                    lives_on,
                ));
            }
            if m.delta < 0 {
                // A cluster whose last host left is gone.
                stmts.push(Stmt::new(
                    "DELETE FROM drift_clusters WHERE signature = $1 AND observed = $2 AND hosts <= 0",
                    key(),
                ));
            }
        }
        cluster_upserts(&run, stmts);
        // The class of a cluster a host left, or whose host now classes it
        // otherwise, when no host it has gives it that class any more: the
        // first in byte order of its hosts' (the findings are written
        // above). Any class a host gives it was folded in as it came, so
        // while one host still gives it its class that is the first; the
        // check stops at that host, and only a class no host gives reads
        // the cluster's findings whole.
        for (signature, observed) in self
            .clusters
            .iter()
            .filter(|(_, m)| m.reclass)
            .map(|(key, _)| key)
        {
            stmts.push(Stmt::new(
                "UPDATE drift_clusters SET class = COALESCE((SELECT min(f.class COLLATE \"C\") \
                 FROM findings f WHERE f.signature = $1 AND COALESCE(f.observed, '') = $2), class) \
                 WHERE signature = $1 AND observed = $2 AND NOT EXISTS (SELECT 1 FROM findings f \
                 WHERE f.signature = $1 AND COALESCE(f.observed, '') = $2 \
                 AND f.class = drift_clusters.class)",
                vec![signature.as_str().into(), observed.as_str().into()],
            ));
        }
    }
}

/// The reports' idempotency keys: a host back means its report was new.
fn key_gate(reports: &[Arc<Submitted>]) -> Stmt {
    let mut params = Vec::with_capacity(reports.len() * 3);
    for s in reports {
        params.extend([
            s.report.host.as_str().into(),
            s.report.key.as_str().into(),
            s.received_at.into(),
        ]);
    }
    Stmt::built(
        format!(
            "INSERT INTO report_keys (host, key, at) VALUES {} \
             ON CONFLICT (host, key) DO NOTHING RETURNING host",
            values_rows(1, 3, reports.len())
        ),
        params,
    )
}

/// The oldest report kept (by arrival) of each host of `reports` that has
/// one: host, its finish and sequence number, how many the host holds, and
/// the store it said it came from (one entry of the `(host, id)` index per
/// host).
fn oldest_kept(reports: &[&Submitted]) -> Stmt {
    Stmt::built(
        format!(
            "SELECT h.name, r.finished_at, r.seq, h.reports_held, r.store_id FROM hosts h \
             JOIN reports r ON r.id = (SELECT o.id FROM reports o WHERE o.host = h.name \
             ORDER BY o.id LIMIT 1) WHERE h.name IN {}",
            values_rows(1, reports.len(), 1)
        ),
        reports
            .iter()
            .map(|s| Val::from(s.report.host.as_str()))
            .collect(),
    )
}

/// `select` (ending in `IN`) for the hosts of `reports`.
fn hosts_in(select: &str, reports: &[&Submitted]) -> Stmt {
    Stmt::built(
        format!("{select} {}", values_rows(1, reports.len(), 1)),
        reports
            .iter()
            .map(|s| Val::from(s.report.host.as_str()))
            .collect(),
    )
}

/// Locks, in key order, the fleet's records (`revisions`) of every
/// revision `reports`' applies report or their hosts hold, which is all
/// their writes and retention can touch: an upsert of each as it is,
/// sorted, which finds its row and locks it in turn. `None` without an
/// apply.
///
/// A revision applied for the first time in the fleet has no record yet:
/// it is made here, in its place in the order (its first and last apply
/// the batch's latest, as the batch's own upsert of it would write), so
/// that from here on the batch holds every record it will write. Left to
/// that upsert at the end of the batch, it was taken out of order: another
/// server could store the first apply of that revision meanwhile, and a
/// third batch then lock it in its place and wait for a record this batch
/// held, while this one waited for it (PostgreSQL: 'deadlock detected').
/// Made by a statement of their own before this one, the missing records
/// would be taken before the others, out of order just the same; made by
/// this one, a record another transaction is making is waited for (as for
/// a row it holds) in its place, and then locked.
fn revisions_lock(reports: &[&Submitted]) -> Option<Stmt> {
    let applies: Vec<&Submitted> = reports
        .iter()
        .copied()
        .filter(|s| s.report.kind == ReportKind::Apply)
        .collect();
    if applies.is_empty() {
        return None;
    }
    // One revision, its finish, per apply (as many parameters whatever the
    // revisions, so one prepared statement per number of applies), then
    // the applying hosts.
    let n = applies.len();
    let mut params: Vec<Val> = Vec::with_capacity(n * 3);
    for s in &applies {
        params.extend([
            Val::from(s.report.revision.as_str()),
            Val::from(s.report.finished_at),
        ]);
    }
    params.extend(applies.iter().map(|s| Val::from(s.report.host.as_str())));
    let revision = |i: usize| format!("${}", 2 * i + 1);
    let applied = (0..n)
        .map(|i| {
            format!(
                "SELECT CAST({} AS TEXT) AS revision, CAST(${} AS BIGINT) AS at",
                revision(i),
                2 * i + 2
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let applied_in = (0..n).map(revision).collect::<Vec<_>>().join(", ");
    Some(Stmt::built(
        format!(
            "INSERT INTO revisions (revision, first_at, last_at) \
             SELECT revision, first_at, last_at FROM (\
             SELECT revision, max(at) AS first_at, max(at) AS last_at \
             FROM ({applied}) AS a GROUP BY revision \
             UNION ALL SELECT revision, first_at, last_at FROM revisions \
             WHERE revision IN (SELECT revision FROM host_revisions WHERE host IN {}) \
             AND revision NOT IN ({applied_in})) AS l \
             ORDER BY revision COLLATE \"C\" \
             ON CONFLICT (revision) DO UPDATE SET last_at = revisions.last_at",
            values_rows(2 * n + 1, n, 1)
        ),
        params,
    ))
}

/// The hosts' rows (in the order given), created if need be and locked for
/// the transaction. An existing row of the same kind is locked without
/// being written (PostgreSQL locks every conflicting row of `ON CONFLICT DO
/// UPDATE`, even those its `WHERE` leaves as they are): the picture below
/// is the report's one new version of its host's row.
fn host_lock(reports: &[&Submitted]) -> Stmt {
    let mut params = Vec::with_capacity(reports.len() * 3);
    for s in reports {
        params.extend([
            s.report.host.as_str().into(),
            if s.report.kind == ReportKind::Stack {
                "stack"
            } else {
                "host"
            }
            .into(),
            s.received_at.into(),
        ]);
    }
    Stmt::built(
        format!(
            "INSERT INTO hosts (name, kind, enrolled_at) VALUES {} \
             ON CONFLICT (name) DO UPDATE SET kind = excluded.kind \
             WHERE hosts.kind <> excluded.kind",
            values_rows(1, 3, reports.len())
        ),
        params,
    )
}

/// The reports as stored (one row each), with the store each said it came
/// from.
fn report_rows(reports: &[&Submitted]) -> Stmt {
    let mut params = Vec::with_capacity(reports.len() * 10);
    for s in reports {
        let report = &s.report;
        params.extend([
            report.host.as_str().into(),
            report.key.as_str().into(),
            report.seq.into(),
            report.kind.word().into(),
            s.received_at.into(),
            report.finished_at.into(),
            report.revision.as_str().into(),
            i64::from(report.exit_code).into(),
            s.raw.as_str().into(),
            store_val(s.outbox.store),
        ]);
    }
    Stmt::built(
        format!(
            "INSERT INTO reports (host, key, seq, kind, received_at, finished_at, revision, exit_code, body, store_id) \
             VALUES {} ON CONFLICT (host, key) DO NOTHING",
            values_rows(1, 10, reports.len())
        ),
        params,
    )
}

/// The reports counted in their hosts' daily aggregates (one host per
/// report in a batch, so one row per key).
fn daily_rows(reports: &[&Submitted]) -> Stmt {
    let mut params = Vec::with_capacity(reports.len() * 5);
    for s in reports {
        let report = &s.report;
        let apply = report.kind == ReportKind::Apply;
        let failed_apply = apply && !report.failures.is_empty();
        let check_errors = !apply && report.exit_code == 1;
        params.extend([
            report.host.as_str().into(),
            (report.finished_at.div_euclid(86_400)).into(),
            apply.into(),
            (failed_apply || check_errors).into(),
            (report.findings.len() as u64).into(),
        ]);
    }
    Stmt::built(
        format!(
            "INSERT INTO daily (host, day, applies, failed, max_findings, reports) \
             VALUES {} ON CONFLICT (host, day) DO UPDATE SET \
             reports = daily.reports + 1, applies = daily.applies + excluded.applies, \
             failed = daily.failed + excluded.failed, \
             max_findings = CASE WHEN excluded.max_findings > daily.max_findings \
             THEN excluded.max_findings ELSE daily.max_findings END",
            (0..reports.len())
                .map(|r| {
                    let n = |c: usize| 1 + r * 5 + c;
                    format!("(${}, ${}, ${}, ${}, ${}, 1)", n(0), n(1), n(2), n(3), n(4))
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        params,
    )
}

/// Everything one new report writes besides its key, its host's lock, its
/// own row and its daily aggregate (written for the batch at once);
/// `stored` is the host's findings before it (checks). A `late` report is
/// kept and counted, but a late check (older than the host's last report)
/// leaves the host's findings and the drift clusters as the newer report
/// left them, and a late apply (older than the host's last apply of that
/// revision) the revision's outcome and failures.
fn writes(
    s: &Submitted,
    stored: &HashMap<String, Stored>,
    late: bool,
    batch: &mut BatchState,
    stmts: &mut Vec<Stmt>,
) {
    let report = &s.report;
    let host = report.host.as_str();
    let apply = report.kind == ReportKind::Apply;
    let failed_apply = apply && !report.failures.is_empty();
    let labels = serde_json::to_string(&report.labels).unwrap_or_default();
    // A late report is older than what it would replace: stored and counted only.
    if !late {
        if apply {
            rollout_writes(report, s.outbox.store, &labels, failed_apply, batch, stmts);
            revisions_retention(host, s.reports_kept, stmts);
        } else {
            finding_writes(report, stored, batch, stmts);
        }
    }
    let trees_differing = report
        .trees
        .iter()
        .filter(|t| t.observed.as_deref() != Some(t.declared.as_str()))
        .count() as u64;
    let check_errors = !apply && report.exit_code == 1;
    let picture = HostPicture {
        labels: &report.labels,
        last_report: Some(views::rfc3339(report.finished_at)),
        last_report_kind: Some(report.kind.word()),
        revision: Some(report.revision.as_str()),
        counts: &report.counts,
        resources: report.resources,
        quarantined: report.quarantined.len() as u64,
        trees: report.trees.len() as u64,
        trees_differing,
        expected_interval_s: report.expected_interval_s,
        outbox_depth: s.outbox.depth,
        datum_version: Some(report.datum_version.as_str()),
    };
    if let Some(sampling) = report.sampling.filter(|s| s.deep) {
        stmts.push(Stmt::new(
            "INSERT INTO deep_checks (host, round, at) VALUES ($1, $2, $3) ON CONFLICT (host, round) DO NOTHING",
            vec![host.into(), sampling.round.into(), report.finished_at.into()],
        ));
        stmts.push(Stmt::new(
            "UPDATE hosts SET last_deep_round = $2 WHERE name = $1 \
             AND (last_deep_round IS NULL OR last_deep_round < $2)",
            vec![host.into(), sampling.round.into()],
        ));
    }
    // Retention: the newest N reports of the host stay.
    stmts.push(Stmt::new(
        "DELETE FROM reports WHERE host = $1 AND id <= \
         (SELECT id FROM reports WHERE host = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
        vec![host.into(), i64::from(s.reports_kept).into()],
    ));
    // The host's picture and its counts, one new version of its row, last:
    // the counts see the changes above, whatever order reports came in.
    stmts.push(Stmt::new(
        PICTURE.as_str(),
        vec![
            host.into(),
            labels.into(),
            report.finished_at.into(),
            report.kind.word().into(),
            report.seq.into(),
            report.revision.as_str().into(),
            report.catalogue.as_str().into(),
            report.datum_version.as_str().into(),
            serde_json::to_string(&report.counts)
                .unwrap_or_default()
                .into(),
            report.resources.into(),
            (report.quarantined.len() as u64).into(),
            report.expected_interval_s.into(),
            // Counts a host states: bounded, so that adding them up (the
            // dropped reports are a running total) stays an integer on
            // both stores; PostgreSQL failed every later report of a host
            // that once sent i64::MAX ('bigint out of range'), SQLite
            // turned the total into a REAL.
            s.outbox.depth.min(OUTBOX_COUNT_LIMIT).into(),
            s.outbox.dropped.min(OUTBOX_COUNT_LIMIT).into(),
            serde_json::to_string(&report.classes)
                .unwrap_or_default()
                .into(),
            (report.trees.len() as u64).into(),
            trees_differing.into(),
            apply.into(),
            failed_apply.into(),
            check_errors.into(),
            picture.members().into(),
            store_val(s.outbox.store),
        ],
    ));
}

/// The host picture's columns a report sets (`column = $n`): only a report
/// at least as recent as the last one moves them (a late duplicate of an
/// old report cannot), and its counts (reports held, findings open) are
/// taken whatever order reports came in.
static PICTURE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    // Not late (`is_late`): finished after the last report, or in its
    // second with a number at least as high, or from another store than
    // the last ($22, when the report says), or, when it does not say, a
    // new store's first.
    const FRESH: &str = "(last_report_at IS NULL OR last_report_at < $3 \
         OR (last_report_at = $3 AND (seq <= $5 \
         OR (CAST($22 AS TEXT) IS NULL AND $5 = 1) \
         OR (CAST($22 AS TEXT) IS NOT NULL AND (store_id IS NULL OR store_id <> CAST($22 AS TEXT))))))";
    let set = [
        ("labels", "$2"),
        ("last_report_at", "$3"),
        ("last_report_kind", "$4"),
        ("seq", "$5"),
        ("revision", "$6"),
        ("catalogue", "$7"),
        ("datum_version", "$8"),
        ("counts", "$9"),
        ("resources", "$10"),
        ("quarantined", "$11"),
        ("expected_interval_s", "$12"),
        ("outbox_depth", "$13"),
        ("classes", "$15"),
        ("trees", "$16"),
        ("trees_differing", "$17"),
        (
            "last_apply_at",
            "CASE WHEN $18 = 1 THEN $3 ELSE last_apply_at END",
        ),
        (
            "last_apply_revision",
            "CASE WHEN $18 = 1 THEN $6 ELSE last_apply_revision END",
        ),
        (
            "last_apply_failed",
            "CASE WHEN $18 = 1 THEN $19 ELSE last_apply_failed END",
        ),
        (
            "check_errors",
            "CASE WHEN $18 = 1 THEN check_errors ELSE $20 END",
        ),
        ("view_json", "$21"),
        ("store_id", "$22"),
    ]
    .iter()
    .map(|(column, value)| format!("{column} = CASE WHEN {FRESH} THEN {value} ELSE {column} END"))
    .collect::<Vec<_>>()
    .join(", ");
    // Reports the host's outbox dropped (full) are announced once, with
    // the next delivery: they add up, whatever order reports came in (the
    // next report's 0 must not wipe them out).
    format!(
        "UPDATE hosts SET {set}, \
         outbox_dropped = outbox_dropped + $14, \
         reports_held = (SELECT count(*) FROM reports WHERE reports.host = $1), \
         open_findings = (SELECT count(*) FROM findings WHERE findings.host = $1) \
         WHERE name = $1"
    )
});

/// An apply: the host's outcome of the revision (with its labels now) and
/// the failures of this apply of it.
fn rollout_writes(
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
fn revisions_retention(host: &str, kept: u32, stmts: &mut Vec<Stmt>) {
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

/// A check (or a stack): its findings replace the host's open findings of
/// the classes it covers (every class, or those it names). Only what
/// changed is written, and each drift cluster moves by the hosts that
/// joined or left it.
fn finding_writes(
    report: &Report,
    stored: &HashMap<String, Stored>,
    batch: &mut BatchState,
    stmts: &mut Vec<Stmt>,
) {
    let host = report.host.as_str();
    let covered = |class: &str| {
        report.classes_checked.is_empty() || report.classes_checked.iter().any(|c| c == class)
    };
    // What the host has after this report: the findings of classes it did
    // not cover, and its own (by signature; the last of a repeated one).
    let mut now: BTreeMap<&str, &Finding> = BTreeMap::new();
    for f in &report.findings {
        now.insert(f.signature.as_str(), f);
    }
    let mut gone: Vec<&str> = Vec::new();
    for (signature, old) in stored {
        match now.get(signature.as_str()) {
            None if covered(&old.class) => {
                gone.push(signature);
                batch.cluster(signature, &old.observed).leave();
            }
            None => {}
            Some(f) => {
                let observed = f.observed.as_deref().unwrap_or("");
                if observed != old.observed {
                    batch.cluster(signature, &old.observed).leave();
                }
            }
        }
    }
    gone.sort_unstable();
    // Findings the host did not have (plain inserts: its stored findings
    // were read under its row's lock, so none of these is there) and
    // findings it had that changed (upserts).
    let mut opened: Vec<(&Finding, String)> = Vec::new();
    let mut written: Vec<(&Finding, String)> = Vec::new();
    for (signature, f) in &now {
        let observed = f.observed.as_deref().unwrap_or("");
        let old = stored.get(*signature);
        let joins = old.is_none_or(|o| o.observed != observed);
        let cluster = batch.cluster(signature, observed);
        cluster.see(f, report.finished_at, joins);
        if !joins && old.is_some_and(|o| o.class != f.class) {
            cluster.reclass = true;
        }
        // Who changed it: a finding already open is written again when the
        // host's attribution names other writers.
        let changed_by = serde_json::to_string(&f.changed_by).unwrap_or_else(|_| "[]".into());
        if old.is_none() {
            opened.push((f, changed_by));
        } else if joins || old.is_some_and(|o| o.class != f.class || o.changed_by != changed_by) {
            written.push((f, changed_by));
        }
    }
    for chunk in gone.chunks(CHUNK) {
        let mut params: Vec<Val> = vec![host.into()];
        params.extend(chunk.iter().map(|s| Val::from(*s)));
        stmts.push(Stmt::built(
            format!(
                "DELETE FROM findings WHERE host = $1 AND signature IN {}",
                values_rows(2, chunk.len(), 1)
            ),
            params,
        ));
    }
    for chunk in opened.chunks(CHUNK) {
        stmts.push(Stmt::built(
            format!(
                "{FINDING_INSERT} VALUES {}",
                values_rows(1, 11, chunk.len())
            ),
            finding_params(host, report.finished_at, chunk),
        ));
    }
    for chunk in written.chunks(CHUNK) {
        stmts.push(Stmt::built(
            format!(
                "{FINDING_INSERT} VALUES {} ON CONFLICT (host, signature) DO UPDATE SET \
                 subject = excluded.subject, category = excluded.category, class = excluded.class, \
                 paths = excluded.paths, observed = excluded.observed, first_seen = excluded.first_seen, \
                 last_seen = excluded.last_seen, checks = excluded.checks, changed_by = excluded.changed_by",
                values_rows(1, 11, chunk.len())
            ),
            finding_params(host, report.finished_at, chunk),
        ));
    }
}

const FINDING_INSERT: &str = "INSERT INTO findings (host, signature, subject, category, class, \
     paths, observed, first_seen, last_seen, checks, changed_by)";

/// The parameters of findings rows, as [`FINDING_INSERT`] lists the columns.
fn finding_params(host: &str, finished_at: i64, chunk: &[(&Finding, String)]) -> Vec<Val> {
    let mut params = Vec::with_capacity(chunk.len() * 11);
    for (f, changed_by) in chunk {
        params.extend([
            host.into(),
            f.signature.as_str().into(),
            f.subject.as_str().into(),
            f.category.as_str().into(),
            f.class.as_str().into(),
            serde_json::to_string(&f.paths).unwrap_or_default().into(),
            f.observed.as_deref().unwrap_or("").into(),
            f.first_seen.into(),
            finished_at.into(),
            f.checks.unwrap_or(1).into(),
            changed_by.as_str().into(),
        ]);
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_takes_one_report_per_host_in_arrival_order() {
        let mut jobs: VecDeque<Job> = ["a", "b", "a", "c", "b"]
            .iter()
            .map(|h| {
                let mut report: Report = serde_json::from_value(serde_json::json!({
                    "format_version": 1, "key": "k", "seq": 1, "kind": "check", "host": h,
                    "labels": {}, "datum_version": "0", "revision": "r", "catalogue": "c",
                    "started_at": 0, "finished_at": 0, "duration_ms": 0, "exit_code": 0,
                    "counts": {}, "resources": 0, "expected_interval_s": 0
                }))
                .unwrap();
                report.host = (*h).to_owned();
                Job {
                    data: Arc::new(Submitted {
                        report,
                        raw: String::new(),
                        received_at: 0,
                        outbox: OutboxHeaders::default(),
                        reports_kept: 1,
                    }),
                    done: oneshot::channel().0,
                }
            })
            .collect();
        let hosts =
            |b: &[Job]| -> Vec<String> { b.iter().map(|j| j.data.report.host.clone()).collect() };
        let first = take_batch(&mut jobs);
        assert_eq!(hosts(&first), ["a", "b", "c"]);
        let second = take_batch(&mut jobs);
        assert_eq!(hosts(&second), ["a", "b"], "the second report of each");
        assert!(jobs.is_empty());
    }
}
