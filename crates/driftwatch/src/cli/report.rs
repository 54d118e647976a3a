//! `driftwatch report`: the same triage from saved `show -json` files.
//!
//! How inputs pair up: `--refresh-plan` and `--plan` are the two plans; `--plan` alone
//! reads drift from the normal plan's own `resource_drift`. A document given as
//! `--refresh-plan` that has `resource_changes` is a normal plan and is refused (also when
//! the same file is given as both): the plans were probably swapped. A normal plan made
//! with `-refresh=false` cannot see drift; given with a refresh-only plan that found some,
//! it is refused too ([`crate::plan::check_refreshed`]).

use super::output::{self, Inputs};
use super::{Io, ReportArgs, load_rules, masker};
use crate::error::{Error, Result};
use crate::plan::{Plan, PlanRole, read_plan_file};
use crate::rules::Rules;

pub(super) fn cmd_report(args: ReportArgs, io: &mut Io<'_>) -> Result<u8> {
    let masker = masker(&args.common)?;
    let (refresh, normal, rules) = match (&args.refresh_plan, &args.plan) {
        (Some(r), Some(p)) => {
            let (r, p) = (r.clone(), p.clone());
            std::thread::scope(|scope| -> Result<(Plan, Option<Plan>, Result<Rules>)> {
                let m = &masker;
                let other = scope.spawn(move || read_plan_file(&p, PlanRole::Normal, m));
                let first = read_plan_file(&r, PlanRole::RefreshOnly, m)?;
                // The refresh-only plan is the smaller job (its changes are no-ops): the
                // configuration is read here while the normal plan is still being read,
                // and its errors still come after both plans' (as when read last).
                let rules = load_rules(args.config.as_deref());
                let second = other.join().map_err(|_| Error::Thread)??;
                Ok((first, Some(second), rules))
            })?
        }
        (Some(r), None) => (
            read_plan_file(r, PlanRole::RefreshOnly, &masker)?,
            None,
            load_rules(args.config.as_deref()),
        ),
        (None, Some(p)) => {
            // One normal plan: drift from its own resource_drift, changes from itself.
            let plan = read_plan_file(p, PlanRole::Combined, &masker)?;
            (plan.clone(), Some(plan), load_rules(args.config.as_deref()))
        }
        (None, None) => return Err(Error::Usage("give --refresh-plan, --plan or both")),
    };
    let stack = args
        .common
        .stack
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let rules = rules?;
    let now = crate::history::now(args.common.now.as_deref())?;
    let checked = output::classify_stack(
        Inputs {
            stack: &stack,
            refresh: &refresh,
            normal: normal.as_ref(),
            rules: &rules,
        },
        &args.common,
        &args.output,
        &now,
    )?;
    output::emit_single(&checked, &now, &args.output, None, io)?;
    Ok(checked.code)
}
