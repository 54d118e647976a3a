//! One module per command: an args struct (in `cli.rs`) plus one function.

mod agent;
mod apply;
mod backup;
mod bundle;
mod catalogue;
mod check;
mod fingerprint;
mod fleet;
mod generate;
mod init;
mod lint;
mod outbox;
mod pass;
pub mod pull;
mod release;
mod saved_plan;
mod schedule;
mod selection;
mod server;
mod validators;

use anyhow::{Context, Result};

use crate::cli::{Cli, Command};
use crate::exit::ExitCode;

pub fn run(cli: &Cli) -> Result<ExitCode> {
    // A repository reached through a link (`datum pull` deploys one) is
    // pinned to the folder the link points at now, so a switch during this
    // command cannot mix two revisions in what it reads.
    let global = &crate::context::pinned(&cli.global)?;
    let uses_validators = matches!(
        &cli.command,
        Command::Lint(_)
            | Command::Catalogue(_)
            | Command::Plan(_)
            | Command::Apply(_)
            | Command::Validators
            | Command::Agent(_)
            | Command::Check(_)
            | Command::Reconcile(_)
    );
    if uses_validators {
        // Read once, before anything runs; a definition that cannot be
        // trusted or understood stops the command (fail closed).
        let dir = global
            .root
            .join(datum_providers::validators::admin::ADMIN_DIR);
        let defs = datum_providers::validators::admin::load(&global.root).with_context(|| {
            format!(
                "cannot use the administrator's validators in {}",
                dir.display()
            )
        })?;
        datum_providers::validators::install_admin(defs);
    }
    match &cli.command {
        Command::Init(args) => init::run(global, args),
        Command::Lint(args) => lint::run(global, args),
        Command::Catalogue(args) => catalogue::run(global, args),
        Command::Plan(args) => pass::plan(global, args),
        Command::Apply(args) => apply::run(global, args),
        Command::Backup(cmd) => backup::run(global, cmd),
        Command::Validators => validators::run(global),
        // The agent pins the repository at every (re)load itself.
        Command::Agent(args) => agent::run(&cli.global, args),
        Command::Check(args) => check::run(global, args, check::Act::Look),
        Command::Reconcile(args) => check::run(global, args, check::Act::Reconcile),
        Command::Schedule => schedule::run(global),
        Command::Fingerprint(args) => fingerprint::run(global, args),
        Command::Quarantine(args) => release::quarantine(global, args),
        Command::Release(args) => release::release(global, args),
        Command::Pull(args) => pull::run(&cli.global, args),
        Command::Bundle(args) => bundle::run(global, args),
        Command::Server(cmd) => server::run(global, cmd),
        Command::Fleet(args) => fleet::run(global, args),
        Command::Outbox(args) => outbox::run(global, args),
        Command::GenerateMan(args) => generate::man(&args.dir),
        Command::GenerateCompletions(args) => generate::completions(&args.dir),
    }
}
