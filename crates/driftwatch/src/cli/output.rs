//! Everything after the plans: classify, history, the exit code, and every output of one
//! stack or of several (stdout, stderr, Markdown files, the step summary).
//!
//! stdout carries only the report (text or JSON); notes, the summary line, errors of
//! single stacks of a multi-stack run, and timings go to stderr.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use datum_report::render::Format;
use datum_report::style::Paint;

use super::{CommonArgs, Io, OutputArgs, one_line, options};
use crate::classify::{self, Report};
use crate::error::{Error, Result};
use crate::history;
use crate::plan::Plan;
use crate::report::views::{self, RunChecked, RunReport, RunStack, StackReport};
use crate::report::{self, json, summary};
use crate::rules::Rules;
use crate::runner::Timings;
use datum_report::style::Choice;

/// What classification works on, besides the options.
pub(super) struct Inputs<'a> {
    pub stack: &'a str,
    pub refresh: &'a Plan,
    pub normal: Option<&'a Plan>,
    pub rules: &'a Rules,
}

/// One stack's result: the report and the code it alone would exit with.
pub(super) struct Checked {
    pub report: Report,
    pub code: u8,
}

/// Where one stack's time went: the engine's commands and driftwatch's own work.
#[derive(Debug, Clone, Default)]
pub(super) struct StackTiming {
    pub engine: Timings,
    pub own: Duration,
}

impl StackTiming {
    fn json(&self) -> json::Timings {
        json::Timings {
            engine_seconds: self.engine.engine().as_secs_f64(),
            driftwatch_seconds: self.own.as_secs_f64(),
            steps: self
                .engine
                .steps
                .iter()
                .map(|(step, d)| json::TimedStep {
                    step: step.clone(),
                    seconds: d.as_secs_f64(),
                })
                .collect(),
        }
    }

    /// `engine 31.20 s (refresh-only plan 14.10 s, ...), driftwatch 0.021 s (0.07 %)`
    fn line(&self) -> String {
        let engine = self.engine.engine().as_secs_f64();
        let own = self.own.as_secs_f64();
        let steps: Vec<String> = self
            .engine
            .steps
            .iter()
            .map(|(s, d)| format!("{s} {:.2} s", d.as_secs_f64()))
            .collect();
        let share = if engine + own > 0.0 {
            100.0 * own / (engine + own)
        } else {
            0.0
        };
        format!(
            "engine {engine:.2} s ({}), driftwatch {own:.3} s ({share:.2} % of {:.2} s)",
            steps.join(", "),
            engine + own
        )
    }
}

/// Classify, apply `--history`, and decide the exit code of one stack.
pub(super) fn classify_stack(
    inputs: Inputs<'_>,
    common: &CommonArgs,
    output: &OutputArgs,
    now: &DateTime<Utc>,
) -> Result<Checked> {
    finish_stack(classify_only(&inputs, common, output)?, output, now)
}

/// Classification without history (history is recorded in one place, one stack at a time).
pub(super) fn classify_only(
    inputs: &Inputs<'_>,
    common: &CommonArgs,
    output: &OutputArgs,
) -> Result<Report> {
    let options = options(common)?;
    let normal = if output.drift_only {
        None
    } else {
        inputs.normal
    };
    if let Some(normal) = normal {
        crate::plan::check_refreshed(inputs.refresh, normal)?;
    }
    Ok(classify::classify(
        inputs.stack,
        inputs.refresh,
        normal,
        inputs.rules,
        &options,
    ))
}

/// Finish a stack classified without history: record it and decide its code.
pub(super) fn finish_stack(
    mut report: Report,
    output: &OutputArgs,
    now: &DateTime<Utc>,
) -> Result<Checked> {
    if let Some(file) = &output.history {
        history::apply(&mut report, file, now)?;
    }
    let code = crate::exit::for_report(&report, output.strict, output.fail_on_pending);
    Ok(Checked { report, code })
}

/// Whether to colour: `always`, `never`, or on a terminal unless `NO_COLOR` is set (the
/// rule of both tools, `datum_report::style::wants_colour`).
pub(super) fn colour(choice: Choice, io: &Io<'_>) -> bool {
    datum_report::style::wants_colour(
        choice,
        io.stdout_is_terminal,
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

fn write_file(path: &Path, text: &str, what: &'static str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::file(path, what, e))
}

/// Every output of a run over one stack.
pub(super) fn emit_single(
    checked: &Checked,
    now: &DateTime<Utc>,
    output: &OutputArgs,
    mut timing: Option<StackTiming>,
    io: &mut Io<'_>,
) -> Result<()> {
    let started = std::time::Instant::now();
    let report = &checked.report;
    let at = history::rfc3339(now);
    if output.markdown.is_some() || output.step_summary {
        let md = report::markdown::render(report, &at);
        if let Some(file) = &output.markdown {
            write_file(file, &md, "cannot write the Markdown report")?;
        }
        if output.step_summary {
            report::step_summary::append(&md)?;
        }
    }
    let format = output.format();
    if format == Format::Json {
        // The JSON carries the timings: they end here.
        if let Some(t) = timing.as_mut() {
            t.own += started.elapsed();
        }
    }
    let timings = timing.as_ref().map(StackTiming::json);
    let view = StackReport {
        report,
        meta: json::Meta {
            exit_code: i32::from(checked.code),
            generated_at: &at,
            timings: timings.as_ref(),
        },
    };
    let paint = Paint::new(colour(output.color, io));
    reader_may_leave(
        io.stdout
            .write_all(datum_report::render::render(&view, format, paint)?.as_bytes()),
    )?;
    for note in &report.notes {
        writeln!(io.stderr, "driftwatch: note: {note}")?;
    }
    // The summary is for the person watching the log; stdout stays the report.
    writeln!(
        io.stderr,
        "driftwatch: {}",
        report::text::summary_line(report)
    )?;
    if let Some(mut t) = timing {
        if format != Format::Json {
            t.own += started.elapsed();
        }
        writeln!(
            io.stderr,
            "driftwatch: {}: timings: {}",
            report.stack,
            t.line()
        )?;
    }
    reader_may_leave(io.stdout.flush())?;
    if let Some(file) = &output.report_to {
        let outbox = output
            .outbox
            .clone()
            .unwrap_or_else(|| crate::fleet::default_outbox(file));
        crate::fleet::send(report, checked.code, file, &outbox, io.stderr)?;
    }
    Ok(())
}

/// One stack of a run over several.
pub(super) struct StackResult {
    pub name: String,
    pub chdir: PathBuf,
    pub result: Result<Checked>,
    pub timing: Option<StackTiming>,
}

fn stack_markdowns(
    stacks: &mut [StackResult],
    messages: &[Option<String>],
    at: &str,
) -> Vec<String> {
    stacks
        .iter_mut()
        .zip(messages)
        .map(|(s, message)| {
            let started = std::time::Instant::now();
            let md = match (&s.result, message) {
                (Ok(checked), _) => report::markdown::render(&checked.report, at),
                (Err(_), m) => views::error_markdown(&s.name, m.as_deref().unwrap_or("error"), at),
            };
            if let Some(t) = s.timing.as_mut() {
                t.own += started.elapsed();
            }
            md
        })
        .collect()
}

fn rows_of<'a>(stacks: &'a [StackResult], messages: &'a [Option<String>]) -> Vec<summary::Row<'a>> {
    stacks
        .iter()
        .zip(messages)
        .map(|(s, message)| summary::Row {
            name: &s.name,
            outcome: match (&s.result, message) {
                (Ok(c), _) => Ok((&c.report, c.code)),
                (Err(_), m) => Err(m.as_deref().unwrap_or("error")),
            },
        })
        .collect()
}

fn write_markdowns(
    dir: &Path,
    stacks: &[StackResult],
    markdowns: &[String],
    summary_md: &str,
) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::file(dir, "cannot create the Markdown folder", e))?;
    for (s, md) in stacks.iter().zip(markdowns) {
        write_file(
            &dir.join(format!("{}.md", s.name)),
            md,
            "cannot write the Markdown report",
        )?;
    }
    write_file(
        &dir.join("summary.md"),
        summary_md,
        "cannot write the Markdown summary",
    )
}

/// `--markdown-dir` for a run whose other outputs are written elsewhere (one stack).
pub(super) fn write_markdown_dir(
    stacks: &mut [StackResult],
    now: &DateTime<Utc>,
    dir: &Path,
) -> Result<()> {
    let at = history::rfc3339(now);
    let messages = messages_of(stacks);
    let markdowns = stack_markdowns(stacks, &messages, &at);
    let rows = rows_of(stacks, &messages);
    write_markdowns(
        dir,
        stacks,
        &markdowns,
        &views::summary_markdown(&rows, &at),
    )
}

fn messages_of(stacks: &[StackResult]) -> Vec<Option<String>> {
    stacks
        .iter()
        .map(|s| s.result.as_ref().err().map(one_line))
        .collect()
}

/// Every output of a run over several stacks: each stack's report (or its error), then the
/// summary table; `--markdown-dir` gets one file per stack and `summary.md`.
pub(super) fn emit_many(
    stacks: &mut [StackResult],
    now: &DateTime<Utc>,
    output: &OutputArgs,
    markdown_dir: Option<&Path>,
    io: &mut Io<'_>,
) -> Result<u8> {
    if output.report_to.is_some() {
        // A stack's credentials name that one stack.
        return Err(Error::Usage(
            "--report-to sends one stack's report (its credentials name that stack): run each stack on its own",
        ));
    }
    let at = history::rfc3339(now);
    let paint = colour(output.color, io);
    let messages = messages_of(stacks);
    let markdowns = if markdown_dir.is_some() || output.step_summary {
        stack_markdowns(stacks, &messages, &at)
    } else {
        Vec::new()
    };
    let rows = rows_of(stacks, &messages);
    let worst = summary::worst_exit(&rows);
    let summary_md = views::summary_markdown(&rows, &at);
    if let Some(dir) = markdown_dir {
        write_markdowns(dir, stacks, &markdowns, &summary_md)?;
    }
    if output.step_summary {
        let mut all = summary_md.clone();
        for md in &markdowns {
            all.push('\n');
            all.push_str(md);
        }
        report::step_summary::append(&all)?;
    }

    let run = RunReport {
        stacks: stacks
            .iter()
            .zip(&messages)
            .map(|(s, message)| RunStack {
                name: &s.name,
                chdir: &s.chdir,
                outcome: match (&s.result, message) {
                    (Ok(c), _) => Ok(RunChecked {
                        report: &c.report,
                        code: c.code,
                        timings: s.timing.as_ref().map(StackTiming::json),
                    }),
                    (Err(_), m) => Err(m.as_deref().unwrap_or("error")),
                },
            })
            .collect(),
        generated_at: &at,
    };
    let text = datum_report::render::render(&run, output.format(), Paint::new(paint))?;
    reader_may_leave(io.stdout.write_all(text.as_bytes()))?;
    for (s, message) in stacks.iter().zip(&messages) {
        match (&s.result, message) {
            (Ok(c), _) => {
                for note in &c.report.notes {
                    writeln!(io.stderr, "driftwatch: note: {}: {note}", s.name)?;
                }
                writeln!(
                    io.stderr,
                    "driftwatch: {}",
                    report::text::summary_line(&c.report)
                )?;
            }
            (Err(_), m) => writeln!(
                io.stderr,
                "driftwatch: error: {}: {}",
                s.name,
                m.as_deref().unwrap_or("error")
            )?,
        }
        if let Some(t) = &s.timing {
            writeln!(io.stderr, "driftwatch: {}: timings: {}", s.name, t.line())?;
        }
    }
    reader_may_leave(io.stdout.flush())?;
    Ok(worst)
}

/// A write of the report to stdout, where a reader that closed it early
/// (`driftwatch … | head`) is not an error: it has read what it wanted, and the run goes
/// on (stderr, `--report-to`) to exit with the report's code. Mapping the closed pipe to
/// exit 0 turned actionable drift into a passing gate under `set -o pipefail`.
fn reader_may_leave(written: std::io::Result<()>) -> Result<()> {
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
