//! One module per command: an args struct (in `cli.rs`) plus one function.

mod agent;
mod apply;
mod backup;
mod catalogue;
mod lint;
mod pass;
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
    }
}
