//! `datum catalogue`: the compiled catalogue for this host, as JSON.

use std::io::Write;

use anyhow::Result;

use crate::cli::{CatalogueArgs, GlobalArgs};
use crate::context;
use crate::exit::ExitCode;

pub fn run(global: &GlobalArgs, args: &CatalogueArgs) -> Result<ExitCode> {
    let identity = context::identity(global)?;
    let catalogue = context::compile_with(global, &identity, args.explain)?;
    // Streamed: a catalogue of 20,000 resources is never one JSON value.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    catalogue.write_json_pretty(args.explain, &mut out)?;
    writeln!(out)?;
    out.flush()?;
    Ok(ExitCode::CLEAN)
}
