//! One module per command: an args struct (in `cli.rs`) plus one function.

mod agent;
mod apply;
mod backup;
mod bundle;
mod catalogue;
mod check;
mod fingerprint;
mod lint;
mod pass;
pub mod pull;
mod release;
mod schedule;
mod validators;

use anyhow::Result;

use crate::cli::{Cli, Command};
use crate::exit::ExitCode;

pub fn run(cli: &Cli) -> Result<ExitCode> {
    // A repository reached through a link (`datum pull` deploys one) is
    // pinned to the folder the link points at now, so a switch during this
    // command cannot mix two revisions in what it reads.
    let global = &crate::context::pinned(&cli.global)?;
    match &cli.command {
        Command::Lint => lint::run(global),
        Command::Catalogue(args) => catalogue::run(global, args),
        Command::Plan => pass::run(global, datum_engine::Mode::Plan),
        Command::Apply => apply::run(global),
        Command::Backup(cmd) => backup::run(global, cmd),
        Command::Validators => validators::run(global),
        // The agent pins the repository at every (re)load itself.
        Command::Agent(args) => agent::run(&cli.global, args),
        Command::Check(args) => check::run(global, args),
        Command::Schedule => schedule::run(global),
        Command::Fingerprint(args) => fingerprint::run(global, args),
        Command::Quarantine(args) => release::quarantine(global, args),
        Command::Release(args) => release::release(global, args),
        Command::Pull(args) => pull::run(&cli.global, args),
        Command::Bundle(args) => bundle::run(global, args),
    }
}
