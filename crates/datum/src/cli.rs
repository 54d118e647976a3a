//! The command line: global options shared by every command, one subcommand
//! each. Parsing only; behaviour lives in `commands/`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
pub use datum_report::render::Format;

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
    /// (plan, apply, check); a command without the format refuses it (exit 1).
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
    /// How long to wait for another pass holding the root's lock.
    #[arg(long, global = true, default_value = "60s", value_parser = humantime::parse_duration)]
    pub lock_timeout: Duration,
    /// When to use colour.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a new repository (datum.yaml, a base and a web layer, this host's file) that lints clean.
    Init(InitArgs),
    /// Check the repository's manifests; report every error with file and line.
    Lint(LintArgs),
    /// Compile the repository for this host and print the catalogue as JSON.
    Catalogue(CatalogueArgs),
    /// Show what an apply would change; change nothing (exit 2 when changes are pending).
    Plan(PlanArgs),
    /// Make the host match the catalogue (exit 0 nothing, 2 changed, 4 failed, 6 both).
    Apply(ApplyArgs),
    /// List the validators this build ships, the binary each needs, and whether it is installed here.
    Validators,
    /// Inspect and restore the content saved before files were replaced or removed.
    #[command(subcommand)]
    Backup(BackupCommand),
    /// Check continuously: per-class schedules, file-change watches, Prometheus metrics.
    Agent(AgentArgs),
    /// Report drift (exit 0 none, 2 drift, 1 error) and what each policy would do; change nothing.
    Check(CheckArgs),
    /// Check, then apply each class's policy to the drift found (revert, accept, quarantine).
    Reconcile(CheckArgs),
    /// Per class: interval, inspection time (p50/p95) and detection bound.
    Schedule,
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

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The folder to write into (created when missing; existing files are refused).
    pub dir: PathBuf,
}

/// Which part of the catalogue a plan or an apply covers (all of it by default).
#[derive(Debug, Clone, Default, Args)]
pub struct SelectArgs {
    /// Only this resource and everything it requires, like terraform -target
    /// (repeatable): --target File/sshd-config.
    #[arg(long = "target", value_name = "KIND/NAME", value_parser = parse_target)]
    pub targets: Vec<datum_core::ResourceId>,
    /// Only resources of this drift class; what they require from other
    /// classes is checked, never changed (not in sync: they are blocked).
    #[arg(long, value_name = "NAME")]
    pub class: Option<String>,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Save the plan to FILE (mode 0600) for `datum apply FILE`, which
    /// applies exactly it and refuses if anything changed since.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// A plan saved by `datum plan --out FILE`: apply exactly that plan,
    /// refused if the catalogue or anything it observed changed since.
    #[arg(value_name = "PLAN", conflicts_with_all = ["targets", "class"])]
    pub plan: Option<PathBuf>,
}

fn parse_target(text: &str) -> Result<datum_core::ResourceId, String> {
    datum_core::ResourceId::parse(text).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// The git remote (https://, ssh://, git://, file:// or a path); default `url:` of pull.yaml.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The branch or tag to deploy (default `ref:` of pull.yaml, else main).
    #[arg(long = "ref", value_name = "BRANCH_OR_TAG")]
    pub git_ref: Option<String>,
    /// Who may sign a deployable revision (ssh-keygen's allowed_signers format).
    #[arg(long, value_name = "FILE")]
    pub allowed_signers: Option<PathBuf>,
    /// Where the agent reads the repository: a link, a host path under --root (default /etc/datum/repository).
    #[arg(long, value_name = "PATH")]
    pub deploy: Option<PathBuf>,
    /// The pull settings (default ROOT/etc/datum/pull.yaml; options win over it).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Take the revision from this bundle (made by `datum bundle`) instead of the remote.
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,
    /// Deploy a revision that does not descend from the deployed one (a person's decision; recorded).
    #[arg(long)]
    pub allow_rollback: bool,
    /// Checkouts to keep, the deployed one included (default 3).
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// Revoked SSH keys (a KRL or a list of public keys).
    #[arg(long, value_name = "FILE")]
    pub revoked_keys: Option<PathBuf>,
    /// An exported OpenPGP keyring (gpg --export) whose keys may sign.
    #[arg(long, value_name = "FILE")]
    pub openpgp_keyring: Option<PathBuf>,
    /// Show the deployed revision and the recent deployments; change nothing.
    #[arg(long)]
    pub status: bool,
}

#[derive(Debug, Args)]
pub struct BundleArgs {
    /// The git repository to bundle from (a work tree or a bare repository).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub from: PathBuf,
    /// The branch or tag to bundle (the host pulls it with the same --ref).
    #[arg(long = "ref", value_name = "BRANCH_OR_TAG", default_value = "main")]
    pub git_ref: String,
    /// Leave out the history of this revision (one the host has deployed).
    #[arg(long, value_name = "REVISION")]
    pub since: Option<String>,
    /// The bundle file to write.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct OutboxArgs {
    /// Deliver what is queued now, whatever the backoff says.
    #[arg(long)]
    pub flush: bool,
    /// Deliver quietly, respecting the backoff: what a pass starts in the
    /// background after queueing its report.
    #[arg(long, hide = true, conflicts_with = "flush")]
    pub background: bool,
}

#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// Create a server folder: CA and certificate, admin credential, configuration.
    Init(ServerInitArgs),
    /// Issue a host (or stack) its token and write its report.yaml.
    Enroll(ServerEnrollArgs),
    /// Serve: take reports over HTTPS and answer the fleet's queries.
    Serve(ServerServeArgs),
}

#[derive(Debug, Args)]
pub struct ServerInitArgs {
    /// The server's folder (created, mode 0700).
    #[arg(long)]
    pub dir: PathBuf,
    /// Where the server listens (HOST:PORT).
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: String,
    /// The URL hosts report to (default: https:// and the listen address).
    #[arg(long)]
    pub url: Option<String>,
    /// Another name or address the certificate is valid for (repeatable).
    #[arg(long = "name")]
    pub names: Vec<String>,
    /// `sqlite` (embedded, in DIR) or postgres://user:password@host:port/db.
    #[arg(long, default_value = "sqlite")]
    pub store: String,
    /// Host sampling: the share of hosts deep-checked per round (0..1].
    #[arg(long, value_name = "FRACTION")]
    pub sampling: Option<f64>,
    /// The length of a sampling round.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub round: Duration,
}

#[derive(Debug, Args)]
pub struct ServerEnrollArgs {
    /// The host's name, as its host.yaml says (or the stack's name).
    pub name: String,
    /// The server's folder.
    #[arg(long)]
    pub dir: PathBuf,
    /// Where to write the host's report.yaml (install it as ROOT/etc/datum/report.yaml).
    #[arg(long)]
    pub out: PathBuf,
    /// Enroll a driftwatch stack instead of a host.
    #[arg(long)]
    pub stack: bool,
    /// The longest gap between two of its reports (default: its shortest class interval).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub interval: Option<Duration>,
    /// Use this store instead of the one server.yaml names.
    #[arg(long)]
    pub store: Option<String>,
}

#[derive(Debug, Args)]
pub struct ServerServeArgs {
    /// The server's folder.
    #[arg(long)]
    pub dir: PathBuf,
    /// Listen here instead of server.yaml's address (port 0: any free port).
    #[arg(long)]
    pub listen: Option<String>,
    /// Use this store instead of the one server.yaml names.
    #[arg(long)]
    pub store: Option<String>,
}

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// The admin credential (DIR/admin.yaml from `datum server init`).
    #[arg(long, env = "DATUM_FLEET_CREDENTIALS")]
    pub credentials: PathBuf,
    #[command(subcommand)]
    pub view: FleetView,
}

#[derive(Debug, Subcommand)]
pub enum FleetView {
    /// Every host and stack: state, last report, revision, counts.
    Hosts,
    /// Which hosts converged, failed or have not applied a revision yet.
    Rollout {
        /// The revision (default: the one applied most recently).
        #[arg(long)]
        revision: Option<String>,
    },
    /// Drift across hosts: the same change on many hosts vs a change on one.
    Drift,
    /// Hosts whose last report is older than their interval allows.
    Stale,
    /// The sampling plan, who deep-checked, and each class's detection bound.
    Sampling,
    /// One host's (or stack's) recent reports and daily history.
    History {
        name: String,
        /// How many reports.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where to create it (default: --repo). Created if missing; an existing repository is refused.
    pub dir: Option<PathBuf>,
    /// The host file to write, hosts/NAME.yaml (default: this host's name).
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
}

#[derive(Debug, Args)]
pub struct LintArgs {
    /// Also render the repository for every host file in REPO/hosts/*.yaml (templates included).
    #[arg(long)]
    pub all_hosts: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Also write the report as Markdown to FILE (for an issue tracker).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Deep-check this host only when hash(host, seed) falls under FRACTION (0..1); metadata otherwise.
    #[arg(long, value_name = "FRACTION")]
    pub sample: Option<f64>,
    /// Seed of this pass for --sample (share it across a fleet).
    #[arg(long, default_value_t = 0)]
    pub pass_seed: u64,
    /// Check only the resources of this class.
    #[arg(long)]
    pub class: Option<String>,
    /// Where policy `accept` writes patches (default ROOT/var/lib/datum/accepted).
    #[arg(long)]
    pub patch_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct FingerprintArgs {
    /// The tree to fingerprint.
    pub path: PathBuf,
    /// The specification's reference algorithm (SHA-256), byte for byte.
    #[arg(long)]
    pub compat: bool,
    /// Leave out entries matching this gitignore rule (repeatable).
    #[arg(long)]
    pub exclude: Vec<String>,
    /// Hashing threads (0: automatic).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

#[derive(Debug, Args)]
pub struct QuarantineArgs {
    /// The resource, as Kind/name.
    pub name: Option<String>,
    /// Quarantine the whole host instead.
    #[arg(long)]
    pub host: bool,
    /// Why (shown by every check until release).
    #[arg(long)]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The resource, as Kind/name.
    pub name: Option<String>,
    /// Release the host's quarantine.
    #[arg(long)]
    pub host: bool,
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Check every class once, then exit with `datum check`'s code (for cron).
    #[arg(long)]
    pub once: bool,
    /// Where to serve /metrics and /healthz (loopback by default).
    #[arg(long, value_name = "ADDR", default_value = datum_agent::http::DEFAULT_LISTEN)]
    pub listen: String,
    /// Interval of the backstop pass over every class.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub full_interval: Duration,
    /// How long file-change events are gathered before a watched class is checked.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub debounce: Duration,
    /// Also pull the repository this often (settings from pull.yaml) and reload on a new verified revision.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub pull_interval: Option<Duration>,
    /// The pull settings for --pull-interval (default ROOT/etc/datum/pull.yaml).
    #[arg(long, value_name = "FILE", requires = "pull_interval")]
    pub pull_config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CatalogueArgs {
    /// Say which layer and file each field came from.
    #[arg(long)]
    pub explain: bool,
}

#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// List saved versions, newest first.
    List {
        /// Only versions of this path (as declared, e.g. /etc/ssh/sshd_config).
        path: Option<PathBuf>,
    },
    /// Print one saved version.
    Show { id: u64 },
    /// Put a saved version back in place (atomically).
    Restore { id: u64 },
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}
