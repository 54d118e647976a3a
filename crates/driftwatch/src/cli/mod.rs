//! Command-line interface: one args struct per command and one function that runs it
//! (`report` for `report`, `run` for `run`, [`crate::codify`] for `codify`), and
//! `output` for everything that leaves the process.
//!
//! Usage errors are mapped to exit 1 by [`crate::exit`] (clap's default is 2, which a CI job
//! would read as "drift found"). Output goes to the writers passed in, so tests can run commands in
//! process; only `main.rs` touches the real stdout and stderr.

mod output;
mod report;
mod run;

use std::io::{IsTerminal as _, Write};
use std::num::NonZeroUsize;
use std::path::{Path as FsPath, PathBuf};

use clap::{Args, Parser, Subcommand};
use datum_report::render::Format;
use datum_report::style::Choice;

use crate::classify::Options;
use crate::error::{Error, Result};
use crate::flatten::Path;
use crate::mask::Masker;
use crate::plan::{Plan, PlanError, PlanRole, parse_reader};
use crate::rules::Rules;
use crate::runner::{Runner, Tofu};
use crate::{codify, exit};

#[derive(Debug, Parser)]
#[command(
    name = "driftwatch",
    version,
    about = "Triage OpenTofu/Terraform drift: a refresh-only plan says what changed outside, a normal plan says what the next apply does about it.",
    after_help = "Exit codes: 0 no actionable drift, 2 actionable drift, 1 any error (usage errors included). With several stacks, the worst of them: 1, else 2, else 0."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run both plans with tofu (or terraform) and report, for one stack or several.
    Run(RunArgs),
    /// Report from saved `show -json` files.
    Report(ReportArgs),
    /// Accept changed-outside drift: write the drifted literals into the configuration
    /// (*.tf or *.tf.json), prove with a plan that the next apply leaves them alone, then
    /// apply -refresh-only and prove it again.
    Codify(CodifyArgs),
}

#[derive(Debug, Args)]
pub struct EngineArgs {
    /// The program to run: tofu, terraform, or a path to either.
    #[arg(long, default_value = "tofu", value_name = "PROGRAM")]
    pub binary: String,
    /// How long to wait for the state lock (passed as -lock-timeout).
    #[arg(long, default_value = "5m", value_name = "DURATION")]
    pub lock_timeout: String,
}

#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Stack name: used in reports and for the dedupe key (one stack only).
    #[arg(long, value_name = "NAME")]
    pub stack: Option<String>,
    /// Also mask attributes whose names match this regex (repeatable).
    #[arg(long = "secret-pattern", value_name = "REGEX")]
    pub secret_patterns: Vec<String>,
    // The help text is an attribute, not a doc comment: rustdoc would read `[0]` as a link.
    #[arg(
        long = "ignore-attr",
        value_name = "PATH",
        help = "Drop this path (and everything under it) from every diff (repeatable), e.g. metadata[0].resource_version"
    )]
    pub ignore_attrs: Vec<String>,
    /// Fix "now" (YYYY-MM-DD or RFC 3339) for timestamps, --history and codify; for tests
    /// and replays.
    #[arg(long, hide = true, value_name = "TIME")]
    pub now: Option<String>,
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Only the refresh-only plan: "ignored" then needs ignore_changes to cover every path.
    #[arg(long)]
    pub drift_only: bool,
    /// Exit 2 for any drift, ignored drift included.
    #[arg(long)]
    pub strict: bool,
    /// Exit 2 when there are unapplied changes, even without drift.
    #[arg(long)]
    pub fail_on_pending: bool,
    /// The report on stdout: human (text), json or markdown.
    #[arg(long, value_enum, default_value = "human", value_name = "FORMAT")]
    pub output: Format,
    /// Same as --output json.
    #[arg(long, conflicts_with = "output")]
    pub json: bool,
    /// Write the Markdown report to FILE (one stack).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Append the Markdown report to $GITHUB_STEP_SUMMARY, which must be set (`run` checks it before any plan).
    #[arg(long)]
    pub step_summary: bool,
    /// Record first-seen dates in FILE and show each finding's age.
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// Colour in the text report (auto: on a terminal, unless NO_COLOR is set).
    #[arg(long, value_enum, default_value = "auto")]
    pub color: Choice,
    /// Also send the report to `datum server` (the report.yaml of `datum server enroll NAME --stack`; one stack).
    #[arg(long, value_name = "FILE")]
    pub report_to: Option<PathBuf>,
    /// The outbox kept for --report-to (default FILE.outbox.db).
    #[arg(long, value_name = "FILE", requires = "report_to")]
    pub outbox: Option<PathBuf>,
}

impl OutputArgs {
    /// The format of the report on stdout: `--output`, or json with `--json`.
    pub fn format(&self) -> Format {
        if self.json { Format::Json } else { self.output }
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// A stack's root module directory; repeat it to check several stacks in one run.
    #[arg(long, value_name = "DIR", required_unless_present = "stacks")]
    pub chdir: Vec<PathBuf>,
    /// A file listing stacks, one `DIR` or `NAME=DIR` per line (relative to the file).
    #[arg(long, value_name = "FILE")]
    pub stacks: Option<PathBuf>,
    /// How many stacks to check at the same time (default: one per CPU).
    #[arg(long, value_name = "N")]
    pub jobs: Option<NonZeroUsize>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// ignore_changes source: a configuration file or a directory (default: --chdir).
    #[arg(long, value_name = "FILE|DIR")]
    pub config: Option<PathBuf>,
    /// Write STACK.md for every stack and summary.md into DIR (a stack named summary is refused: rename it with NAME=DIR).
    #[arg(long, value_name = "DIR")]
    pub markdown_dir: Option<PathBuf>,
    /// Say how long the engine took and how long driftwatch itself took (stderr; JSON
    /// `timings`).
    #[arg(long)]
    pub timings: bool,
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// `show -json` of the refresh-only plan (a normal plan here is refused).
    #[arg(long, value_name = "FILE", required_unless_present = "plan")]
    pub refresh_plan: Option<PathBuf>,
    /// `show -json` of the normal plan. Alone, drift is read from its own resource_drift.
    #[arg(long, value_name = "FILE", conflicts_with = "drift_only")]
    pub plan: Option<PathBuf>,
    /// ignore_changes source: a *.tf or *.tf.json file, or a directory of them.
    #[arg(long, value_name = "FILE|DIR")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct CodifyArgs {
    /// The stack's root module directory.
    #[arg(long, value_name = "DIR")]
    pub chdir: PathBuf,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Where output goes; `main` passes the real streams, tests pass buffers.
pub struct Io<'a> {
    pub stdout: &'a mut dyn Write,
    pub stderr: &'a mut dyn Write,
    /// Whether stdout is a terminal (colour in `auto` mode).
    pub stdout_is_terminal: bool,
}

/// Parse arguments and run; returns the exit code. Never panics on bad input.
pub fn main_with(args: Vec<String>, runner: &dyn Runner, io: &mut Io<'_>) -> u8 {
    let json_usage = usage_json_command(&args);
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let kind = exit::kind_of_usage(&e);
            let text = e.render().to_string();
            let sink: &mut dyn Write = if kind == exit::ErrorKind::Help {
                io.stdout
            } else {
                io.stderr
            };
            let _ = sink.write_all(text.as_bytes());
            // A usage error under `--output json` is the error document on stdout too, as
            // any error before a command's report is (and as `datum`'s are): clap's first
            // line, without its `error: `; the usage and the hint stay on stderr.
            if kind != exit::ErrorKind::Help
                && let Some(command) = json_usage
            {
                let first = text.lines().next().unwrap_or_default();
                let message = first.strip_prefix("error: ").unwrap_or(first);
                let _ = writeln!(io.stdout, "{}", error_document(command, message));
            }
            return exit::for_kind(kind);
        }
    };
    // A command asked for JSON that fails before its document still prints
    // one, the error document (docs/conventions.md), so a script piping to
    // `jq` reads what went wrong instead of an empty input.
    let json_command = match &cli.command {
        Command::Report(args) => (args.output.format() == Format::Json).then_some("report"),
        Command::Run(args) => (args.output.format() == Format::Json).then_some("run"),
        Command::Codify(_) => None,
    };
    let mut counted = Counted {
        inner: &mut *io.stdout,
        written: 0,
    };
    let mut inner_io = Io {
        stdout: &mut counted,
        stderr: &mut *io.stderr,
        stdout_is_terminal: io.stdout_is_terminal,
    };
    let result = execute(cli, runner, &mut inner_io);
    let began_document = counted.written > 0;
    match result {
        Ok(code) => code,
        Err(e) => {
            let kind = exit::kind_of(&e);
            if kind != exit::ErrorKind::ClosedOutput {
                let _ = writeln!(io.stderr, "driftwatch: error: {}", one_line(&e));
                if let Some(command) = json_command.filter(|_| !began_document) {
                    let _ = writeln!(io.stdout, "{}", error_document(command, &one_line(&e)));
                }
            }
            exit::for_kind(kind)
        }
    }
}

/// The command (`run` or `report`, the two with a JSON form) a command line that clap
/// refuses asked for JSON from: `--json`, or the last `--output` (`--output json` or
/// `--output=json`) says `json`. None for `codify`, no command, or another format.
fn usage_json_command(args: &[String]) -> Option<&'static str> {
    let command = match args.iter().skip(1).find(|a| !a.starts_with('-'))?.as_str() {
        "run" => "run",
        "report" => "report",
        _ => return None,
    };
    let mut json = false;
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--" => break,
            "--json" => return Some(command),
            "--output" => json = rest.next().is_some_and(|v| v == "json"),
            other => {
                if let Some(value) = other.strip_prefix("--output=") {
                    json = value == "json";
                }
            }
        }
    }
    json.then_some(command)
}

/// The error document of a failed command (see docs/conventions.md): its
/// message, as on stderr, as one diagnostic with no resource or position.
fn error_document(command: &str, message: &str) -> serde_json::Value {
    serde_json::json!({
        "format_version": crate::report::json::FORMAT_VERSION,
        "command": command,
        "error": message,
        "errors": 1,
        "diagnostics": [{
            "severity": "error",
            "message": message,
            "resource": null,
            "origin": null,
        }],
    })
}

/// A writer that counts what went through it (whether a command began its
/// own document on stdout).
struct Counted<'a> {
    inner: &'a mut dyn Write,
    written: usize,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// An error as one line, always: some causes (regex syntax errors) span several.
pub(crate) fn one_line(e: &Error) -> String {
    let message: Vec<String> = e
        .to_string()
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    message.join(" ")
}

fn execute(cli: Cli, runner: &dyn Runner, io: &mut Io<'_>) -> Result<u8> {
    match cli.command {
        Command::Report(args) => report::cmd_report(args, io),
        Command::Run(args) => run::cmd_run(args, runner, io),
        Command::Codify(args) => codify::cmd_codify(args, runner, io),
    }
}

pub(crate) fn masker(common: &CommonArgs) -> Result<Masker> {
    Ok(Masker::new(&common.secret_patterns)?)
}

pub(crate) fn options(common: &CommonArgs) -> Result<Options> {
    let ignore_attrs = common
        .ignore_attrs
        .iter()
        .map(|p| {
            Path::parse(p).map_err(|reason| Error::IgnoreAttr {
                text: p.clone(),
                reason,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Options { ignore_attrs })
}

pub(crate) fn load_rules(config: Option<&FsPath>) -> Result<Rules> {
    match config {
        Some(path) => Ok(Rules::load(path)?),
        None => Ok(Rules::default()),
    }
}

/// Parse the two saved plans on two threads (they are big and independent), streaming
/// each from its file.
pub(crate) fn parse_saved(
    refresh: &crate::runner::SavedPlan,
    normal: Option<&crate::runner::SavedPlan>,
    masker: &Masker,
) -> Result<(Plan, Option<Plan>)> {
    let open = |saved: &crate::runner::SavedPlan, label: &str, role: PlanRole| -> Result<Plan> {
        let file = std::fs::File::open(&saved.json).map_err(|error| PlanError::Read {
            source_name: label.to_owned(),
            error,
        })?;
        Ok(parse_reader(file, label, role, masker)?)
    };
    std::thread::scope(|scope| {
        let handle = normal.map(|saved| scope.spawn(move || open(saved, "plan", PlanRole::Normal)));
        let first = open(refresh, "refresh-only plan", PlanRole::RefreshOnly)?;
        let second = match handle {
            Some(h) => Some(h.join().map_err(|_| Error::Thread)??),
            None => None,
        };
        Ok((first, second))
    })
}

pub(crate) fn tofu_of(engine: &EngineArgs, chdir: &FsPath) -> Tofu {
    Tofu {
        binary: engine.binary.clone(),
        chdir: chdir.display().to_string(),
        lock_timeout: engine.lock_timeout.clone(),
    }
}

pub(crate) fn stack_name(common: &CommonArgs, chdir: &FsPath) -> String {
    common
        .stack
        .clone()
        .unwrap_or_else(|| crate::stacks::default_name(chdir))
}

/// Whether the process's stdout is a terminal (for `main`).
pub fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}
