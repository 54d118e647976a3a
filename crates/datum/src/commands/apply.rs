//! `datum apply`: a full pass.

use anyhow::Result;

use crate::cli::GlobalArgs;
use crate::exit::ExitCode;

pub fn run(global: &GlobalArgs) -> Result<ExitCode> {
    super::pass::run(global, datum_engine::Mode::Apply)
}
