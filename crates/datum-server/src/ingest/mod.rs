//! Ingest: storing reports, many in one transaction, and keeping the
//! fleet's current state (what the views read) up to date as they arrive.
//!
//! **Group commit.** Reports that arrive while a transaction is being
//! written wait in one queue; a writer takes everything waiting (at most
//! [`MAX_BATCH`], at most one report per host) into its next transaction,
//! so a durable commit is paid once per batch instead of once per report.
//! Every report is still answered only after the commit that holds it: the
//! HTTP handler awaits its own result. Writers are tasks started when work
//! arrives and ended when the queue is empty
//! ([`Backend::writers`](crate::store::Backend::writers) of them at most:
//! one on SQLite's single connection, two on PostgreSQL so one batch is
//! built while the other commits). A batch that fails (a deadlock
//! with another server, a row the database refuses) is retried report by
//! report, so one bad report fails alone.
//!
//! **The transaction, in [`Phases`](crate::store::Phases):**
//! 1. each report's idempotency key (`report_keys`, `ON CONFLICT DO NOTHING
//!    RETURNING`): a key stored before makes that report a duplicate, and
//!    it writes nothing else;
//! 2. for the new ones, in host order, the host's row (locked, so two
//!    servers storing reports of one host take turns, and always in the
//!    same order, so they cannot deadlock), then the host's oldest report
//!    kept, the checking hosts' last report times and stored findings (and
//!    those of the hosts whose apply changed something or says what it
//!    verified), and the applying
//!    hosts' last apply of the revision they report. A report
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
//!    failures (apply), the findings of the resources an apply changed or
//!    says it verified (`verified_except`) closed (unless it is older than
//!    its host's last report), the
//!    findings that changed (check: compared with the
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
//! **Parts.** `batch`: the group commit (the queue, the writers, a batch
//! written again report by report). `transaction`: the phases above.
//! `statements`: the statements of a whole batch (key gate, host locks and
//! reads, the revision records' lock, the reports' rows, the daily
//! aggregates). `late`: which reports are late or seen before. `writes`:
//! what one new report writes, its host's picture last; `rollout` (an
//! apply's outcome and failures, the revisions' retention) and `findings`
//! (a check's findings) its parts. `shared`: the rows a batch shares with
//! other transactions (revisions' last apply, drift clusters), in key
//! order.
//!
//! Owns: the ingest SQL, [`GroupCommit`]. Must not: authenticate, or read
//! anything but what the report's own host stored.

mod batch;
mod findings;
mod late;
mod rollout;
mod shared;
mod statements;
mod transaction;
mod writes;

pub use batch::{GroupCommit, IngestStats, store_together};

use datum_fleet::Report;

use crate::fleet::OutboxHeaders;

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
