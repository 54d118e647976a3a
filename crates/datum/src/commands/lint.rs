//! `datum lint`: every manifest error, with file and line, like a compiler.

use std::io::Write;

use anyhow::{Result, bail};

use crate::cli::{GlobalArgs, OutputFormat};
use crate::context::use_color;
use crate::exit::ExitCode;

pub fn run(global: &GlobalArgs) -> Result<ExitCode> {
    if !crate::context::is_repository(&global.repo) {
        bail!(
            "{}: not a Datum repository (no datum.yaml); use --repo DIR",
            global.repo.display()
        );
    }
    // With a declared host identity (a host file or labels), templates are
    // rendered for this host too; without one they are parsed only.
    let identity = datum_catalog::HostIdentity::load_if_declared(
        &global.root,
        global.host_file.as_deref(),
        &global.labels,
    )?;
    let diagnostics = datum_catalog::lint(&global.repo, identity.as_ref());
    let mut out = anstream::stdout();
    match global.output {
        OutputFormat::Json => {
            writeln!(out, "{}", serde_json::to_string_pretty(&diagnostics)?)?;
        }
        OutputFormat::Human => {
            if diagnostics.error_count() == 0 {
                eprint!("{}", diagnostics.render(use_color(global)));
                writeln!(out, "{}: no errors", global.repo.display())?;
            } else {
                eprint!("{}", diagnostics.render(use_color(global)));
                eprintln!("error: {} error(s) found", diagnostics.error_count());
            }
        }
    }
    Ok(if diagnostics.error_count() == 0 {
        ExitCode::CLEAN
    } else {
        ExitCode::ERROR
    })
}
