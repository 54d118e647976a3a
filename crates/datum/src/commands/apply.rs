//! `datum apply`: a full pass, part of one (`--target`, `--class`), or
//! exactly a saved plan (`datum apply FILE`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::pass::{self, Request, TrustArgs};
use super::saved_plan::SavedPlan;
use super::selection::SelectArgs;
use crate::cli::GlobalArgs;
use crate::exit::ExitCode;

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// A plan saved by `datum plan --out FILE`: apply exactly that plan,
    /// refused if the catalogue or anything it observed changed since.
    #[arg(
        value_name = "PLAN",
        conflicts_with_all = ["targets", "class", "trust_metadata"],
        value_parser = crate::cli::absolute_path
    )]
    pub plan: Option<PathBuf>,
    #[command(flatten)]
    pub trust: TrustArgs,
}

pub fn run(global: &GlobalArgs, args: &ApplyArgs) -> Result<ExitCode> {
    let mode = datum_engine::Mode::Apply;
    match &args.plan {
        Some(file) => {
            let saved = SavedPlan::read(file)?;
            let request = Request {
                select: saved.select_args()?,
                out: None,
                saved: Some((&saved, file)),
                trust: TrustArgs::default(),
            };
            pass::run(global, mode, request)
        }
        None => pass::run(
            global,
            mode,
            Request {
                select: args.select.clone(),
                trust: args.trust,
                ..Request::default()
            },
        ),
    }
}
