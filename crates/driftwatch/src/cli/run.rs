//! `driftwatch run`: both plans through the engine, for one stack or several.
//!
//! One stack behaves exactly as it always has (its report, its exit code, its errors as
//! `driftwatch: error: ...`). Several stacks (`--chdir` repeated, or `--stacks FILE`) are
//! checked side by side, at most `--jobs` at a time; each gets its own report, a stack
//! that fails is reported as failed without hiding the others, a summary table closes the
//! run, and the exit code is the worst of them (1, else 2, else 0). History is recorded
//! after all stacks finished, one stack at a time, so the file is never written twice at
//! once.

use std::path::PathBuf;
use std::time::Instant;

use super::output::{self, Inputs, StackResult, StackTiming};
use super::{Io, RunArgs, load_rules, masker, parse_saved, tofu_of};
use crate::classify::Report;
use crate::error::{Error, Result};
use crate::mask::Masker;
use crate::runner::{Runner, Timings};
use crate::stacks::{self, StackSpec};

pub(super) fn cmd_run(args: RunArgs, runner: &dyn Runner, io: &mut Io<'_>) -> Result<u8> {
    let masker = masker(&args.common)?;
    // Options are checked once, before any plan runs.
    super::options(&args.common)?;
    if args.output.step_summary {
        // Not after minutes of plans: the report would be lost to this error.
        crate::report::step_summary::path()?;
    }
    let now = crate::history::now(args.common.now.as_deref())?;
    let specs = stack_specs(&args)?;
    if args.markdown_dir.is_some() {
        stacks::check_markdown_names(&specs)?;
    }
    let many = specs.len() > 1;
    if many {
        if args.common.stack.is_some() {
            return Err(Error::Usage(
                "--stack names one stack; with several, name them in a stacks file (NAME=DIR)",
            ));
        }
        if args.config.is_some() {
            return Err(Error::Usage(
                "--config applies to one stack; with several, each stack's rules come from its own directory",
            ));
        }
        if args.output.markdown.is_some() {
            return Err(Error::Usage(
                "--markdown writes one stack's report; with several, use --markdown-dir DIR",
            ));
        }
    }
    let jobs = args.jobs.map_or_else(stacks::default_jobs, usize::from);
    let checked = stacks::run_bounded(&specs, jobs, |spec| {
        check_stack(spec, &args, &masker, runner)
    });

    if !many {
        let (spec, (result, timing)) = specs
            .into_iter()
            .zip(checked)
            .next()
            .ok_or(Error::Usage("no stack to check"))?;
        let mut single = StackResult {
            name: spec.name,
            chdir: spec.chdir,
            result: result.and_then(|report| output::finish_stack(report, &args.output, &now)),
            timing: args.timings.then_some(timing),
        };
        if let Some(dir) = &args.markdown_dir {
            // A failed stack gets its page too (saying why), as with several stacks.
            output::write_markdown_dir(std::slice::from_mut(&mut single), &now, dir)?;
        }
        let checked = single.result?;
        let single_timing = single.timing;
        output::emit_single(&checked, &now, &args.output, single_timing, io)?;
        return Ok(checked.code);
    }

    let mut results: Vec<StackResult> = specs
        .iter()
        .zip(checked)
        .map(|(spec, (result, timing))| StackResult {
            name: spec.name.clone(),
            chdir: spec.chdir.clone(),
            // History in listing order, one stack at a time.
            result: result.and_then(|report| output::finish_stack(report, &args.output, &now)),
            timing: args.timings.then_some(timing),
        })
        .collect();
    output::emit_many(
        &mut results,
        &now,
        &args.output,
        args.markdown_dir.as_deref(),
        io,
    )
}

/// The stacks to check, from `--chdir` (repeatable) and `--stacks FILE`, in that order.
fn stack_specs(args: &RunArgs) -> Result<Vec<StackSpec>> {
    let mut specs: Vec<StackSpec> = args
        .chdir
        .iter()
        .map(|dir| StackSpec {
            name: stacks::default_name(dir),
            chdir: dir.clone(),
        })
        .collect();
    if let Some(file) = &args.stacks {
        specs.extend(stacks::from_file(file)?);
    }
    if let (Some(name), [one]) = (&args.common.stack, specs.as_mut_slice()) {
        one.name = name.clone();
    }
    stacks::check_unique(&specs)?;
    Ok(specs)
}

/// Both plans and the classification of one stack (history comes later).
fn check_stack(
    spec: &StackSpec,
    args: &RunArgs,
    masker: &Masker,
    runner: &dyn Runner,
) -> (Result<Report>, StackTiming) {
    let started = Instant::now();
    let mut engine = Timings::default();
    let result = plans_and_classify(spec, args, masker, runner, &mut engine);
    let own = started.elapsed().saturating_sub(engine.engine());
    (result, StackTiming { engine, own })
}

fn plans_and_classify(
    spec: &StackSpec,
    args: &RunArgs,
    masker: &Masker,
    runner: &dyn Runner,
    engine: &mut Timings,
) -> Result<Report> {
    let tofu = tofu_of(&args.engine, &spec.chdir);
    let refresh_saved = tofu.plan(runner, true, engine)?;
    let normal_saved = if args.output.drift_only {
        None
    } else {
        Some(tofu.plan(runner, false, engine)?)
    };
    let (refresh, normal) = parse_saved(&refresh_saved, normal_saved.as_ref(), masker)?;
    // The saved plans and their JSON (secrets in plain text) go now.
    drop(refresh_saved);
    drop(normal_saved);
    let config: PathBuf = args.config.clone().unwrap_or_else(|| spec.chdir.clone());
    let rules = load_rules(Some(&config))?;
    output::classify_only(
        &Inputs {
            stack: &spec.name,
            refresh: &refresh,
            normal: normal.as_ref(),
            rules: &rules,
        },
        &args.common,
        &args.output,
    )
}
