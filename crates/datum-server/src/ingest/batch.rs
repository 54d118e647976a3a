//! The group commit: reports waiting for a writer, taken a batch at a
//! time (at most one report per host), each answered after the commit that
//! holds it; a batch that fails is written again report by report.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use super::transaction::Ingest;
use super::{MAX_BATCH, Submitted};
use crate::store::{Backend, StoreError};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::OutboxHeaders;
    use datum_fleet::Report;

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
