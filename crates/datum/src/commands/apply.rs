//! `datum apply`: a full pass, part of one (`--target`, `--class`), or
//! exactly a saved plan (`datum apply FILE`).

use anyhow::Result;

use super::pass::{self, Request};
use super::saved_plan::SavedPlan;
use crate::cli::{ApplyArgs, GlobalArgs};
use crate::exit::ExitCode;

pub fn run(global: &GlobalArgs, args: &ApplyArgs) -> Result<ExitCode> {
    let mode = datum_engine::Mode::Apply;
    match &args.plan {
        Some(file) => {
            let saved = SavedPlan::read(file)?;
            let request = Request {
                select: saved.select_args()?,
                out: None,
                saved: Some((&saved, file)),
            };
            pass::run(global, mode, request)
        }
        None => pass::run(
            global,
            mode,
            Request {
                select: args.select.clone(),
                ..Request::default()
            },
        ),
    }
}
