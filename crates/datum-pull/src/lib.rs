//! Getting the repository onto a host: `datum pull`.
//!
//! A host runs repository content as root, so delivery is part of the trust
//! story: a revision is deployed only if a person the host trusts signed it,
//! only if it moves forward from what is deployed, and only whole. This
//! crate fetches a git remote (or reads a `git bundle`) into a private cache
//! ([`cache`]), verifies the new head's signature before anything is
//! checked out ([`verify`]: SSH signatures against `allowed_signers`,
//! optionally OpenPGP), refuses a revision that does not descend from the
//! deployed one unless a person allows it, writes the revision into a new
//! checkout folder with no `.git` in it ([`checkout`], through [`tree`],
//! from `datum-host`'s directory handles), runs the caller's
//! gate (`datum lint`) on it, and switches it in with one rename of a
//! symlink ([`mod@pull`]). `docs/pull.md` has the threat model.
//!
//! git is the Debian `git` CLI, run through [`git`] (on `datum-host`'s
//! command runner) with a minimal, explicit configuration: it is what operators already have and
//! audit, it needs no C library built into Datum (libgit2) and no second
//! implementation of the protocols (gitoxide), and signature checking needs
//! an external program (`ssh-keygen`) either way.
//!
//! Other code finds the deployed revision with [`deployed_revision`]: the
//! commit a checkout was made from, read from the checkout itself.
//!
//! ```
//! use std::path::Path;
//! // The link the agent reads, or the checkout folder a catalogue was
//! // compiled from (pinned): `None` when `datum pull` did not deploy it.
//! match datum_pull::deployed_revision(Path::new("/nonexistent/etc/datum/repository")) {
//!     Some(deployed) => println!("repository revision {}", deployed.commit),
//!     None => println!("not a revision datum pull deployed"),
//! }
//! ```
//!
//! This crate must not print (progress goes to the caller's [`pull::Step`]
//! callback), must not touch the machine except through `datum-host`, and
//! must never let configuration allow going backwards: only
//! [`pull::Request::allow_rollback`], which the command line sets from a
//! person's flag, does.

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

pub mod bundle;
pub mod cache;
pub mod checkout;
pub mod commit;
pub mod config;
mod error;
pub mod git;
pub mod pull;
pub mod source;
pub mod tree;
pub mod verify;

pub use checkout::{DeployedRevision, deployed_revision};
pub use config::{Overrides, PullConfig};
pub use error::{ConfigError, FAILURE_WORDS, PullError, Reason, Refusal};
pub use pull::{Deployed, Outcome, Request, Step, immutable_checkout, pull};
pub use source::Source;
