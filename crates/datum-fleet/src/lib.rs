//! The fleet's shared vocabulary: what a reporter (a host's `datum apply`,
//! `check` and agent, or `driftwatch --report-to`) sends to `datum server`,
//! how it finds and authenticates to the server, and how its outbox is
//! delivered.
//!
//! - [`report`]: the versioned wire model ([`Report`], [`Reply`]) and the
//!   value-free signatures findings and failures are grouped by; the
//!   sampling plan the server hands out ([`SamplingPlan`]).
//! - [`credentials`]: `report.yaml` and `admin.yaml`, and tokens.
//! - [`client`]: HTTPS with rustls, trusting only the fleet's own CA.
//! - [`delivery`]: the outbox contract ([`Queue`]) and the in-order,
//!   at-most-once-stored delivery loop with backoff ([`deliver`]).
//!
//! The server (`datum-server`) and the host side (`datum`, `driftwatch`)
//! both depend on this crate; it depends on neither, and it never touches
//! files: the outbox is a trait the state store implements, and the
//! credentials are parsed from text the caller read.

pub mod client;
pub mod credentials;
pub mod delivery;
mod random;
pub mod report;

pub use client::{Client, ClientError, SendError, Timeouts};
pub use credentials::{AdminCredentials, Credentials, CredentialsError, IdentityKind};
pub use delivery::{Backoff, Budget, Delivered, Queue, Queued, Transport, deliver};
pub use report::{
    ClassBound, FORMAT_VERSION, Failure, FieldChange, Finding, Instruction, InstructionAction,
    InstructionDone, PendingChange, Quarantined, Reply, Report, ReportKind, SamplingPlan,
    SamplingUsed, TreeFingerprint, Writer,
};
