//! One Datum pass over a compiled catalogue.
//!
//! The engine owns the safety rules every resource type shares, so providers do
//! not have to get them right one by one:
//! - resources run in dependency order, and a failed resource blocks everything
//!   that requires it (directly or through another blocked resource), while
//!   independent resources continue; nothing is rolled back;
//! - content is offered to the resource's named validator while it is staged,
//!   and a rejected copy never goes live;
//! - the old content of a file is saved in the backup store before it is
//!   replaced or removed;
//! - every change is labelled intentional or corrective from the state store;
//! - a sensitive resource's content and validator output never reach a report.
//!
//! The engine never prints: it emits [`Event`]s to a [`Reporter`] and returns a
//! [`PassSummary`].

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

mod activation;
mod ahead;
mod evidence;
mod gate;
mod group;
mod observe;
mod pass;
mod report;
mod select;
mod settled;
mod verified;

#[cfg(test)]
mod rules_tests;
#[cfg(test)]
mod trust_tests;
#[cfg(test)]
mod write_tests;

pub use activation::{GROUP_KIND, SensitiveOnce, SensitivePaths};
pub use observe::{ContentDiff, Inspection, inspect_all};
pub use pass::{DIFF_CONTENT_LIMIT, Mode, PassContext, run_pass_with};
pub use report::{
    Event, PassSummary, Reporter, ResourceReport, SilentReporter, Withheld, WithheldReason,
};
pub use select::{PassOptions, Refused, Shared, Stale};
