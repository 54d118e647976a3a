//! Command-line interface: one args struct per command and one function that runs it.
//!
//! Usage errors are mapped to exit 1 here (clap's default is 2, which a CI job would read
//! as "drift found"). Output goes to the writers passed in, so tests can run commands in
//! process; only `main.rs` touches the real stdout and stderr.

use std::io::{IsTerminal as _, Write};
use std::path::{Path as FsPath, PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::classify::{self, Options, Report};
use crate::error::{Error, Result};
use crate::flatten::Path;
use crate::mask::Masker;
use crate::plan::{Plan, PlanRole, parse_plan, read_plan_file};
use crate::report;
use crate::rules::Rules;
use crate::runner::{Runner, Tofu};
use crate::{codify, exit, history};

#[derive(Debug, Parser)]
#[command(
    name = "driftwatch",
    version,
    about = "Triage OpenTofu/Terraform drift: a refresh-only plan says what changed outside, a normal plan says what the next apply does about it.",
    after_help = "Exit codes: 0 no actionable drift, 2 actionable drift, 1 any error (usage errors included)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run both plans with tofu (or terraform) and report.
    Run(RunArgs),
    /// Report from saved `show -json` files.
    Report(ReportArgs),
    /// Accept changed-outside drift: write the drifted literals into *.tf.json, apply
    /// -refresh-only, and prove the next apply is a no-op for them.
    Codify(CodifyArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Args)]
pub struct TofuArgs {
    /// The stack's root module directory.
    #[arg(long, value_name = "DIR")]
    pub chdir: PathBuf,
    /// The program to run: tofu, terraform, or a path to either.
    #[arg(long, default_value = "tofu", value_name = "PROGRAM")]
    pub binary: String,
    /// How long to wait for the state lock (passed as -lock-timeout).
    #[arg(long, default_value = "5m", value_name = "DURATION")]
    pub lock_timeout: String,
}

#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Stack name: used in reports and for the dedupe key.
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
    /// Fix "today" for --history and codify (YYYY-MM-DD); for tests and replays.
    #[arg(long, hide = true, value_name = "DATE")]
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
    /// Print the JSON report on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write the Markdown report to FILE.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Append the Markdown report to $GITHUB_STEP_SUMMARY.
    #[arg(long)]
    pub step_summary: bool,
    /// Record first-seen dates in FILE and show each finding's age.
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// Colour in the text report.
    #[arg(long, value_enum, default_value = "auto")]
    pub color: ColorChoice,
    /// Also send the report to `datum server` (the report.yaml of `datum server enroll NAME --stack`).
    #[arg(long, value_name = "FILE")]
    pub report_to: Option<PathBuf>,
    /// The outbox kept for --report-to (default FILE.outbox.db).
    #[arg(long, value_name = "FILE", requires = "report_to")]
    pub outbox: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub tofu: TofuArgs,
    /// ignore_changes source: a *.tf.json file or a directory (default: --chdir).
    #[arg(long, value_name = "FILE|DIR")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// `show -json` of the refresh-only plan.
    #[arg(long, value_name = "FILE", required_unless_present = "plan")]
    pub refresh_plan: Option<PathBuf>,
    /// `show -json` of the normal plan. Alone, drift is read from its own resource_drift.
    #[arg(long, value_name = "FILE", conflicts_with = "drift_only")]
    pub plan: Option<PathBuf>,
    /// ignore_changes source: a *.tf.json file or a directory of them.
    #[arg(long, value_name = "FILE|DIR")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct CodifyArgs {
    #[command(flatten)]
    pub tofu: TofuArgs,
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
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    exit::CLEAN
                }
                _ => exit::ERROR,
            };
            let text = e.render().to_string();
            let sink: &mut dyn Write = if code == exit::CLEAN {
                io.stdout
            } else {
                io.stderr
            };
            let _ = sink.write_all(text.as_bytes());
            return code;
        }
    };
    match execute(cli, runner, io) {
        Ok(code) => code,
        Err(e) => {
            let code = exit::for_error(&e);
            if code == exit::ERROR {
                // One line, always: some causes (regex syntax errors) span several.
                let message: Vec<String> = e
                    .to_string()
                    .lines()
                    .map(|l| l.trim().to_owned())
                    .filter(|l| !l.is_empty())
                    .collect();
                let _ = writeln!(io.stderr, "driftwatch: error: {}", message.join(" "));
            }
            code
        }
    }
}

fn execute(cli: Cli, runner: &dyn Runner, io: &mut Io<'_>) -> Result<u8> {
    match cli.command {
        Command::Report(args) => cmd_report(args, io),
        Command::Run(args) => cmd_run(args, runner, io),
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

/// Parse two documents on two threads: the big plans are read-bound and independent.
pub(crate) fn parse_pair(
    refresh: (&[u8], &str, PlanRole),
    normal: Option<(&[u8], &str)>,
    masker: &Masker,
) -> Result<(Plan, Option<Plan>)> {
    std::thread::scope(|scope| {
        let handle = normal.map(|(bytes, name)| {
            scope.spawn(move || parse_plan(bytes, name, PlanRole::Normal, masker))
        });
        let first = parse_plan(refresh.0, refresh.1, refresh.2, masker)?;
        let second = match handle {
            Some(h) => Some(h.join().map_err(|_| Error::Thread)??),
            None => None,
        };
        Ok((first, second))
    })
}

fn cmd_report(args: ReportArgs, io: &mut Io<'_>) -> Result<u8> {
    let masker = masker(&args.common)?;
    let mut notes = Vec::new();
    let (refresh, normal) = match (&args.refresh_plan, &args.plan) {
        (Some(r), Some(p)) if same_file(r, p) => {
            // One file as both plans: drift and changes both come from it.
            let plan = read_plan_file(r, PlanRole::Combined, &masker)?;
            (plan.clone(), Some(plan))
        }
        (Some(r), Some(p)) => {
            let (r, p) = (r.clone(), p.clone());
            std::thread::scope(|scope| -> Result<(Plan, Option<Plan>)> {
                let m = &masker;
                let other = scope.spawn(move || read_plan_file(&p, PlanRole::Normal, m));
                let first = read_plan_file(&r, PlanRole::RefreshOnly, m)?;
                let second = other.join().map_err(|_| Error::Thread)??;
                Ok((first, Some(second)))
            })?
        }
        (Some(r), None) => {
            let plan = read_plan_file(r, PlanRole::Combined, &masker)?;
            if proposes_changes(&plan) && !args.output.drift_only {
                // A normal plan given alone: its own changes are the best evidence there is.
                notes.push(format!(
                    "{}: proposes resource changes, so it was read as a normal plan",
                    r.display()
                ));
                (plan.clone(), Some(plan))
            } else {
                (plan, None)
            }
        }
        (None, Some(p)) => {
            // One normal plan: drift from its own resource_drift, changes from itself.
            let plan = read_plan_file(p, PlanRole::Combined, &masker)?;
            (plan.clone(), Some(plan))
        }
        (None, None) => return Err(Error::Usage("give --refresh-plan, --plan or both")),
    };
    let stack = args
        .common
        .stack
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let rules = load_rules(args.config.as_deref())?;
    finish(
        Inputs {
            stack: &stack,
            refresh: &refresh,
            normal: normal.as_ref(),
            rules: &rules,
            notes,
        },
        &args.common,
        &args.output,
        io,
    )
}

fn same_file(a: &FsPath, b: &FsPath) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn proposes_changes(plan: &Plan) -> bool {
    plan.changes.iter().any(|c| {
        !matches!(
            c.action,
            crate::plan::Action::NoOp | crate::plan::Action::Read
        )
    })
}

/// What `finish` works on, besides the options.
struct Inputs<'a> {
    stack: &'a str,
    refresh: &'a Plan,
    normal: Option<&'a Plan>,
    rules: &'a Rules,
    /// Notes found before classification (how the inputs were read).
    notes: Vec<String>,
}

fn cmd_run(args: RunArgs, runner: &dyn Runner, io: &mut Io<'_>) -> Result<u8> {
    let masker = masker(&args.common)?;
    let tofu = tofu_of(&args.tofu);
    let refresh_json = tofu.plan_json(runner, true)?;
    let normal_json = if args.output.drift_only {
        None
    } else {
        Some(tofu.plan_json(runner, false)?)
    };
    let (refresh, normal) = parse_pair(
        (&refresh_json, "refresh-only plan", PlanRole::RefreshOnly),
        normal_json.as_deref().map(|b| (b, "plan")),
        &masker,
    )?;
    drop(refresh_json);
    drop(normal_json);
    let stack = stack_name(&args.common, &args.tofu.chdir);
    let config = args
        .config
        .clone()
        .unwrap_or_else(|| args.tofu.chdir.clone());
    let rules = load_rules(Some(&config))?;
    finish(
        Inputs {
            stack: &stack,
            refresh: &refresh,
            normal: normal.as_ref(),
            rules: &rules,
            notes: Vec::new(),
        },
        &args.common,
        &args.output,
        io,
    )
}

pub(crate) fn tofu_of(args: &TofuArgs) -> Tofu {
    Tofu {
        binary: args.binary.clone(),
        chdir: args.chdir.display().to_string(),
        lock_timeout: args.lock_timeout.clone(),
    }
}

pub(crate) fn stack_name(common: &CommonArgs, chdir: &FsPath) -> String {
    common.stack.clone().unwrap_or_else(|| {
        std::fs::canonicalize(chdir)
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "default".to_owned())
    })
}

/// Everything after the plans: classify, history, exit code, outputs.
fn finish(
    inputs: Inputs<'_>,
    common: &CommonArgs,
    output: &OutputArgs,
    io: &mut Io<'_>,
) -> Result<u8> {
    let options = options(common)?;
    let normal = if output.drift_only {
        None
    } else {
        inputs.normal
    };
    let mut report: Report =
        classify::classify(inputs.stack, inputs.refresh, normal, inputs.rules, &options);
    report.notes.splice(0..0, inputs.notes);
    if let Some(file) = &output.history {
        let clock = history::clock(common.now.as_deref())?;
        history::apply(&mut report, file, clock.as_ref())?;
    }
    let code = exit::for_report(&report, output.strict, output.fail_on_pending);
    write_outputs(&report, code, output, io)?;
    if let Some(file) = &output.report_to {
        let outbox = output
            .outbox
            .clone()
            .unwrap_or_else(|| crate::fleet::default_outbox(file));
        crate::fleet::send(&report, code, file, &outbox, io.stderr)?;
    }
    Ok(code)
}

fn write_outputs(report: &Report, code: u8, output: &OutputArgs, io: &mut Io<'_>) -> Result<()> {
    if output.markdown.is_some() || output.step_summary {
        let md = report::markdown::render(report);
        if let Some(file) = &output.markdown {
            std::fs::write(file, &md)
                .map_err(|e| Error::file(file, "cannot write the Markdown report", e))?;
        }
        if output.step_summary {
            report::step_summary::append(&md)?;
        }
    }
    if output.json {
        io.stdout
            .write_all(report::json::render(report, i32::from(code)).as_bytes())?;
    } else {
        let colour = match output.color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => io.stdout_is_terminal && std::env::var_os("NO_COLOR").is_none(),
        };
        io.stdout
            .write_all(report::text::render(report, colour).as_bytes())?;
    }
    for note in &report.notes {
        writeln!(io.stderr, "driftwatch: note: {note}")?;
    }
    // The summary is for the person watching the log; stdout stays one line per finding.
    writeln!(
        io.stderr,
        "driftwatch: {}",
        report::text::summary_line(report)
    )?;
    io.stdout.flush()?;
    Ok(())
}

/// Whether the process's stdout is a terminal (for `main`).
pub fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}
