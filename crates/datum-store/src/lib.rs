//! Datum's local memory: the state database and the backup store of one root.
//!
//! - [`Store`] (`<root>/var/lib/datum/state.db`, SQLite): per resource, the
//!   hash of the last verified declaration and the file metadata seen then;
//!   per pass, a summary and inspection times; drift history for `datum
//!   check`; reloads owed to services; accepted observations, quarantine and
//!   the revert log; the repository revisions `datum pull` deployed.
//! - [`backup::BackupStore`] (`<root>/var/lib/datum/backups`): the previous
//!   content of every file an apply replaced or removed, content-addressed,
//!   with bounded retention.
//!
//! # Sensitive values never reach the state database
//!
//! The [`Store`] API takes hashes, metadata, identities, counts and times,
//! never file content or a declared value, and no table has a column that
//! could hold one. Drift history is keyed by signatures (subject, category,
//! changed paths), not by values. Keep it that way: a state database is
//! copied into bug reports, and it must be safe to share.
//!
//! The backup store is the one exception by design: it keeps old content so
//! an apply never destroys the evidence of what was there. Entries of
//! sensitive resources are flagged ([`backup::BackupEntry::sensitive`]) so the
//! CLI shows `(sensitive)` instead of their bytes; blobs are mode 0600 in a
//! 0700 folder.
//!
//! # What this crate must not do
//!
//! It never decides policy (what is drift, when to revert or quarantine), never
//! prints, and never touches managed files: restoring a backup is done by the
//! caller through the host's atomic staging. Both stores assume one writer per
//! root at a time, which the engine's root lock provides; readers may run
//! alongside.
//!
//! # Crash safety
//!
//! Every write is a SQLite transaction (WAL, `synchronous = FULL`), so a
//! process killed at any moment leaves each [`Batch`] wholly applied or not at
//! all. [`Store::record_verified`] and [`Store::forget`] are the one
//! exception to "committed when the call returns": they are buffered and
//! written together (see [`Store::flush`]), because a pass records every
//! resource and one fsync each would cost more than the pass. Owed reloads,
//! quarantine and everything else commit before the call returns. A
//! database that is corrupt, foreign or from a newer Datum is an error
//! ([`StoreError::Unusable`]) and is never replaced silently: it holds
//! quarantines and owed reloads, and acting without them could undo them.
//! Only the operator's `--rebuild-state` moves it aside (`<file>.corrupt-<unix-ts>`,
//! with a [`StoreWarning`]) and starts empty (see `db`).
//!
//! All times are Unix seconds (`i64`), passed in by the caller so tests and
//! replays control the clock; durations are milliseconds.
//!
//! # Example: one pass's writes
//!
//! ```
//! use std::collections::BTreeMap;
//! use datum_core::{FileMeta, ResourceId};
//! use datum_store::{PassRecord, Store};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let root = tempfile::tempdir()?;
//! let mut store = Store::open(&root.path().join(datum_store::STATE_DB_PATH))?;
//! let motd = ResourceId::new("File", "motd");
//! let intentional = store
//!     .last_verified(&motd)?
//!     .is_none_or(|last| last.declaration_hash != "sha256-of-declaration");
//! assert!(intentional, "never verified: any change is intentional");
//!
//! // One transaction, one fsync, for the whole pass.
//! let batch = store.batch()?;
//! batch.record_verified(&motd, "sha256-of-declaration", Some(&FileMeta::default()), 1_764_000_000)?;
//! let pass_id = batch.record_pass(&PassRecord {
//!     started_at: 1_764_000_000,
//!     finished_at: 1_764_000_001,
//!     command: "apply".into(),
//!     host: "web1".into(),
//!     counts: BTreeMap::from([("changed".to_owned(), 1)]),
//!     duration_ms: 840,
//!     exit_code: 2,
//! })?;
//! batch.record_class_inspection(pass_id, "normal", 610)?;
//! batch.commit()?;
//!
//! let p = store.inspection_percentiles("apply", Some("normal"), 50)?.expect("one sample");
//! assert_eq!((p.p50_ms, p.p95_ms), (610, 610));
//! # Ok(())
//! # }
//! ```

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

mod db;
mod error;
mod state;

pub mod backup;

pub use error::{StoreError, StoreWarning};
pub use state::{
    Accepted, ApplyFailure, Batch, DELIVERY_LOCK_WAIT, DEPLOYMENTS_KEPT, Deployment, FLUSH_AFTER,
    FLUSH_AFTER_RECORDS, FindingAge, FindingRecord, FindingScope, KeyedRecords, MIN_FREE,
    OUTBOX_BYTES, OUTBOX_LIMIT, Outbox, OutboxStatus, OwedAction, OwedReload, PASSES_KEPT,
    PassRecord, Percentiles, Quarantine, QuarantineSource, QuarantineTarget, ReceivedInstruction,
    Store, StoredDeployment, StoredPass, VerifiedRecord, VerifiedView, is_sealed_form,
    require_room,
};
/// How the fleet server names quarantine targets (`host`, `Kind[name]`).
pub mod fleet_targets {
    pub use crate::state::{target_of, word_of};
}

/// Where the state database lives, relative to the root.
pub const STATE_DB_PATH: &str = "var/lib/datum/state.db";

/// Where the backup store lives, relative to the root.
pub const BACKUP_DIR_PATH: &str = "var/lib/datum/backups";
