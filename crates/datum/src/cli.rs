//! The command line: global options shared by every command and the list of
//! commands. Parsing only; each command's own args struct lives beside its
//! function in `commands/` (jj's layout: one file per command).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
pub use datum_report::render::Format;
use datum_report::style::Choice;

use crate::commands::agent::AgentArgs;
use crate::commands::apply::ApplyArgs;
use crate::commands::backup::BackupCommand;
use crate::commands::bundle::BundleArgs;
use crate::commands::catalogue::CatalogueArgs;
use crate::commands::check::CheckArgs;
use crate::commands::fingerprint::FingerprintArgs;
use crate::commands::fleet::FleetArgs;
use crate::commands::generate::GenerateArgs;
use crate::commands::init::InitArgs;
use crate::commands::lint::LintArgs;
use crate::commands::outbox::OutboxArgs;
use crate::commands::pass::PlanArgs;
use crate::commands::pull::PullArgs;
use crate::commands::release::{QuarantineArgs, ReleaseArgs};
use crate::commands::schedule::ScheduleArgs;
use crate::commands::server::ServerCommand;

#[derive(Debug, Parser)]
#[command(
    name = "datum",
    version,
    about = "Declare a host's configuration, apply it safely, detect drift.",
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// The repository of manifests (a folder with datum.yaml).
    #[arg(long, global = true, default_value = ".", env = "DATUM_REPO")]
    pub repo: PathBuf,
    /// Resolve every managed path under this folder (demos, image builds, tests).
    #[arg(long, global = true, default_value = "/", env = "DATUM_ROOT")]
    pub root: PathBuf,
    /// Output format: human (tables, diffs, colour on a terminal), json (one
    /// document with `format_version`, times in RFC 3339 UTC) or markdown
    /// (plan, apply, check, reconcile); a command without the format refuses
    /// it (exit 1).
    #[arg(long, global = true, value_enum, default_value_t = Format::Human)]
    pub output: Format,
    /// Same as --output json.
    #[arg(long, global = true, conflicts_with = "output")]
    pub json: bool,
    /// Host identity file (default: ROOT/etc/datum/host.yaml).
    #[arg(long, global = true)]
    pub host_file: Option<PathBuf>,
    /// Override a host label (repeatable): --label role=web.
    #[arg(long = "label", global = true, value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// State database (default: ROOT/var/lib/datum/state.db).
    #[arg(long, global = true)]
    pub state: Option<PathBuf>,
    /// How long to wait for a lock another command holds: the root's lock (a pass), or datum pull's own.
    #[arg(long, global = true, default_value = "60s", value_parser = duration)]
    pub lock_timeout: Duration,
    /// When to use colour.
    #[arg(long, global = true, value_enum, default_value_t = Choice::Auto)]
    pub color: Choice,
    /// Log level or tracing directives (error, warn, info, debug, trace; default:
    /// RUST_LOG, else info for the agent and warn otherwise).
    #[arg(long, global = true, env = "DATUM_LOG", value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log format: text or json lines on stderr, the journal's fields, or auto
    /// (journald when stderr is the journal, text otherwise).
    #[arg(long, global = true, env = "DATUM_LOG_FORMAT", value_enum, default_value_t = crate::logging::LogFormat::Auto)]
    pub log_format: crate::logging::LogFormat,
    /// Also list unchanged resources.
    #[arg(long, short, global = true)]
    pub verbose: bool,
    /// Compile the repository even when the catalogue snapshot of the last
    /// compile says nothing changed (the snapshot is then written afresh).
    #[arg(long, global = true)]
    pub recompile: bool,
    /// When the state store (or the backup index) is damaged: move it aside
    /// and start with an empty one. This forgets every quarantine, accepted
    /// drift, owed reload and finding history.
    #[arg(long, global = true)]
    pub rebuild_state: bool,
    /// Not an option: the link `--repo` named when it is one, whose folder
    /// at the command's start `repo` then holds (`context::pinned`), so
    /// that a pass can tell, once it holds the root lock, whether `datum
    /// pull` switched the revision meanwhile (`context::still_deployed`).
    #[arg(skip)]
    pub repo_link: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a new repository (datum.yaml, a base and a web layer, this host's file) that lints clean.
    Init(InitArgs),
    /// Check the repository's manifests; report every error with file and line.
    Lint(LintArgs),
    /// Compile the repository for this host and print the catalogue as JSON.
    Catalogue(CatalogueArgs),
    /// Show what an apply would change; change nothing (exit 0 nothing, 2 pending, 4 would fail, 6 both, 1 error).
    Plan(PlanArgs),
    /// Make the host match the catalogue (exit 0 nothing, 2 changed, 4 failed, 6 both, 1 error).
    Apply(ApplyArgs),
    /// List the validators this build ships, the binary each needs, and whether it is installed here.
    Validators,
    /// Inspect and restore the content saved before files were replaced or removed.
    #[command(subcommand)]
    Backup(BackupCommand),
    /// Check continuously: per-class schedules, file-change watches, Prometheus metrics.
    Agent(AgentArgs),
    /// Report drift (exit 0 none, 2 drift or a quarantine, 1 error) and what each policy would do; change nothing.
    Check(CheckArgs),
    /// Check, then apply each class's policy to the drift found (revert, accept, quarantine).
    Reconcile(CheckArgs),
    /// Per class: interval, inspection time (p50/p95) and detection bound.
    Schedule(ScheduleArgs),
    /// Print a tree's Merkle fingerprint (the path as given, not under --root).
    Fingerprint(FingerprintArgs),
    /// Exclude a resource (or the host) from apply and from revert, until released.
    Quarantine(QuarantineArgs),
    /// End a quarantine.
    Release(ReleaseArgs),
    /// Fetch the repository's signed revision, verify it, switch it in atomically (exit 0 up to date, 2 deployed, 1 refused).
    Pull(PullArgs),
    /// Write a git bundle of a revision for `datum pull --bundle` on hosts without git access.
    Bundle(BundleArgs),
    /// The fleet's report server: init, enroll hosts, serve.
    #[command(subcommand)]
    Server(ServerCommand),
    /// What the fleet's hosts report: hosts, rollout, drift, stale, sampling.
    Fleet(FleetArgs),
    /// This host's fleet outbox: reports waiting for the server, backoff, totals.
    Outbox(OutboxArgs),
    /// Write the manual pages (datum.1, datum-COMMAND.1) into DIR (for packaging).
    #[command(hide = true)]
    GenerateMan(GenerateArgs),
    /// Write the bash, zsh and fish completions into DIR (for packaging).
    #[command(hide = true)]
    GenerateCompletions(GenerateArgs),
}

/// A duration as the options take it (humantime's syntax), with an error
/// that says what one looks like.
pub fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("`{text}` is not a duration such as 60s, 500ms or 1m30s ({e})"))
}

/// A path the command names in its messages, made absolute against the
/// folder it runs in (docs/conventions.md: paths in messages are absolute):
/// `--out p.plan` is reported as the file it is.
pub fn absolute_path(text: &str) -> Result<PathBuf, String> {
    std::path::absolute(text).map_err(|e| format!("cannot make `{text}` absolute: {e}"))
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    /// humantime's own words ("expected number at 0") do not say what a
    /// duration looks like.
    #[test]
    fn a_bad_duration_or_backup_id_says_what_one_looks_like() {
        for args in [
            &["datum", "--lock-timeout", "soon", "plan"][..],
            &["datum", "agent", "--debounce", "1 minute-ish"],
        ] {
            let err = Cli::try_parse_from(args).unwrap_err().to_string();
            assert!(
                err.contains("is not a duration such as 60s, 500ms or 1m30s"),
                "{args:?}: {err}"
            );
        }
        for command in ["show", "restore"] {
            let err = Cli::try_parse_from(["datum", "backup", command, "abc"])
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("`abc` is not a backup id: a number as `datum backup list` shows it"),
                "{command}: {err}"
            );
        }
        let cli = Cli::try_parse_from(["datum", "--lock-timeout", "1m30s", "plan"]).unwrap();
        assert_eq!(cli.global.lock_timeout, Duration::from_secs(90));
    }
}
