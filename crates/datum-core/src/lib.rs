//! The vocabulary every other Datum crate speaks.
//!
//! This crate owns the plain data that flows between the manifest loader, the
//! catalogue compiler, the providers, the engine and the reporters: resource
//! identities, where a declaration came from, what a provider observed, the
//! difference between declared and observed state, the planned action, and how
//! each resource ended its pass.
//!
//! It must not touch the machine, the network, a database or a terminal: it is
//! plain data with pure functions, so everything here is testable without a host.

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

pub mod bound;
pub mod boundary;
pub mod changed_by;
pub mod content;
pub mod desired;
pub mod diff;
pub mod digest;
pub mod exit;
pub mod host_name;
pub mod id;
pub mod observed;
pub mod origin;
pub mod outcome;
pub mod parallel;
pub mod progress;
pub mod quarantine;
pub mod resource;
pub mod schema;
pub mod suggest;
pub mod text;
pub mod trust;

pub use boundary::Boundary;
pub use changed_by::{ChangedBy, WriterKind};
pub use content::{Content, sha256_hex};
pub use desired::{DeclaredFields, Desired};
pub use diff::{Action, ContentChange, Diff, FieldChange};
pub use digest::DigestKey;
pub use id::{ParseIdError, ReferenceText, ResourceId};
pub use observed::{FileMeta, Observed, Presence};
pub use origin::Origin;
pub use outcome::{Intent, Outcome, Phase};
pub use quarantine::{Quarantine, QuarantineSource, QuarantineTarget};
pub use resource::{AnyDeclaration, DEFAULT_CLASS, HeldDeclaration, Resource};

/// How a value from a resource marked `sensitive: true` is written wherever a
/// person or a machine could read it.
pub const SENSITIVE_PLACEHOLDER: &str = "(sensitive)";
