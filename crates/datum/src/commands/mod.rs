//! One module per command: an args struct (in `cli.rs`) plus one function.

mod agent;
mod apply;
mod backup;
mod catalogue;
mod check;
mod fingerprint;
mod fleet;
mod lint;
mod outbox;
mod pass;
mod release;
mod schedule;
mod server;
mod validators;

use anyhow::Result;

use crate::cli::{Cli, Command};
use crate::exit::ExitCode;

pub fn run(cli: &Cli) -> Result<ExitCode> {
    let global = &cli.global;
    match &cli.command {
        Command::Lint => lint::run(global),
        Command::Catalogue(args) => catalogue::run(global, args),
        Command::Plan => pass::run(global, datum_engine::Mode::Plan),
        Command::Apply => apply::run(global),
        Command::Backup(cmd) => backup::run(global, cmd),
        Command::Validators => validators::run(global),
        Command::Agent(args) => agent::run(global, args),
        Command::Check(args) => check::run(global, args),
        Command::Schedule => schedule::run(global),
        Command::Fingerprint(args) => fingerprint::run(global, args),
        Command::Quarantine(args) => release::quarantine(global, args),
        Command::Release(args) => release::release(global, args),
        Command::Server(cmd) => server::run(global, cmd),
        Command::Fleet(args) => fleet::run(global, args),
        Command::Outbox(args) => outbox::run(global, args),
    }
}
