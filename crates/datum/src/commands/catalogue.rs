//! `datum catalogue`: the compiled catalogue for this host, as JSON.

use std::io::Write;

use anyhow::Result;

use crate::cli::{CatalogueArgs, GlobalArgs};
use crate::context;
use crate::exit::ExitCode;

pub fn run(global: &GlobalArgs, args: &CatalogueArgs) -> Result<ExitCode> {
    let identity = context::identity(global)?;
    let catalogue = context::compile_with(global, &identity, args.explain)?;
    let json = catalogue.to_json(args.explain);
    writeln!(
        std::io::stdout(),
        "{}",
        serde_json::to_string_pretty(&json)?
    )?;
    Ok(ExitCode::CLEAN)
}
