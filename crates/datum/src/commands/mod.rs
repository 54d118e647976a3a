//! One module per command: an args struct plus one function; which
//! `--output` formats each has ([`formats`]).

pub mod agent;
pub mod apply;
pub mod backup;
pub mod bundle;
pub mod catalogue;
pub mod check;
pub mod fingerprint;
pub mod fleet;
pub mod generate;
pub mod init;
pub mod lint;
pub mod outbox;
pub mod pass;
pub mod pull;
pub mod release;
pub mod saved_plan;
pub mod schedule;
pub mod selection;
pub mod server;
pub mod validators;

use anyhow::{Context, Result};

use datum_report::render::{Format, Unsupported};

use crate::cli::{Cli, Command};
use crate::exit::ExitCode;

/// The formats of the commands whose output is a report (`datum_report::render`).
const REPORT: &[Format] = &Format::ALL;
/// The formats of the commands that print their own lines or document
/// (each through `crate::render::emit`).
pub const OWN: &[Format] = &[Format::Human, Format::Json];
/// The agent: log lines on stderr (`--log-format json` for machines), no
/// document; `datum check --output json` is the one-shot report.
const LOG_ONLY: &[Format] = &[Format::Human];

/// Which `--output` formats each command has: the one place a format is
/// accepted or refused. Exhaustive, so a new command states its formats; a
/// new format is refused by every command until it is listed here (and
/// every report implements it: `datum_report::render::Render` has one
/// method per format).
fn formats(command: &Command) -> &'static [Format] {
    match command {
        Command::Plan(_) | Command::Apply(_) | Command::Check(_) | Command::Reconcile(_) => REPORT,
        Command::Agent(_) => LOG_ONLY,
        // `catalogue` prints JSON whatever `--output` says: it has no other form.
        Command::Init(_)
        | Command::Lint(_)
        | Command::Catalogue(_)
        | Command::Validators
        | Command::Backup(_)
        | Command::Schedule(_)
        | Command::Fingerprint(_)
        | Command::Quarantine(_)
        | Command::Release(_)
        | Command::Pull(_)
        | Command::Bundle(_)
        | Command::Server(_)
        | Command::Fleet(_)
        | Command::Outbox(_)
        | Command::GenerateMan(_)
        | Command::GenerateCompletions(_) => OWN,
    }
}

/// The command's name as typed (`datum backup`), for errors.
pub fn name(command: &Command) -> String {
    use clap::Subcommand as _;
    let debug = format!("{command:?}");
    let variant = debug.split(['(', ' ', '{']).next().unwrap_or_default();
    let name = Command::augment_subcommands(clap::Command::new("datum"))
        .get_subcommands()
        .find(|c| c.get_name().replace('-', "").eq_ignore_ascii_case(variant))
        .map_or_else(|| variant.to_lowercase(), |c| c.get_name().to_owned());
    format!("datum {name}")
}

pub fn run(cli: &Cli) -> Result<ExitCode> {
    // A repository reached through a link (`datum pull` deploys one) is
    // pinned to the folder the link points at now, so a switch during this
    // command cannot mix two revisions in what it reads.
    let supported = formats(&cli.command);
    if !supported.contains(&cli.global.output) {
        return Err(Unsupported::new(name(&cli.command), cli.global.output, supported).into());
    }
    if matches!(
        &cli.command,
        Command::Plan(_)
            | Command::Apply(_)
            | Command::Check(_)
            | Command::Reconcile(_)
            | Command::Agent(_)
    ) {
        // A pass shares its soft limit of open files (datum never raises
        // it); one too low to share fails closed here, before anything is
        // read or written, not part of the way through the writes.
        datum_host::descriptors::enough_for_a_pass()?;
    }
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
        Command::Schedule(args) => schedule::run(global, args),
        Command::Fingerprint(args) => fingerprint::run(global, args),
        Command::Quarantine(args) => release::quarantine(global, args),
        Command::Release(args) => release::release(global, args),
        Command::Pull(args) => pull::run(&cli.global, args),
        Command::Bundle(args) => bundle::run(global, args),
        Command::Server(cmd) => server::run(global, cmd),
        Command::Fleet(args) => fleet::run(global, args),
        Command::Outbox(args) => outbox::run(global, args),
        Command::GenerateMan(args) => generate::man(global, &args.dir),
        Command::GenerateCompletions(args) => generate::completions(global, &args.dir),
    }
}
