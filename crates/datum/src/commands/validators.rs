//! `datum validators`: what `validate:` may name, and whether each validator
//! can run on this host.

use std::io::Write;

use anyhow::Result;
use datum_providers::validators::{self, Scope};
use datum_report::style::{self, Paint};
use serde_json::json;

use crate::cli::{Format, GlobalArgs};
use crate::exit::ExitCode;

pub fn run(global: &GlobalArgs) -> Result<ExitCode> {
    let mut out = std::io::stdout();
    let rows: Vec<_> = validators::all()
        .into_iter()
        .map(|v| {
            let found = v.binary.map(datum_host::command::which);
            (v, found)
        })
        .collect();
    if global.output == Format::Json {
        let list: Vec<_> = rows
            .iter()
            .map(|(v, found)| {
                json!({
                    "name": v.name,
                    "scope": if v.scope == Scope::Group { "group" } else { "file" },
                    "binary": v.binary,
                    "package": v.package,
                    "installed": found.as_ref().is_none_or(|f| f.is_some()),
                    "path": found.as_ref().and_then(|f| f.as_ref()).map(|p| p.display().to_string()),
                    "summary": v.summary,
                    "source": if validators::is_admin(v) { "administrator" } else { "shipped" },
                })
            })
            .collect();
        crate::render::json::print("validators", json!(list))?;
        return Ok(ExitCode::Clean);
    }
    let paint = Paint::new(crate::context::use_color(global));
    let header = format!(
        "{:<16} {:<6} {:<16} {:<15} {:<24} WHAT",
        "NAME", "SCOPE", "BINARY", "PACKAGE", "HERE"
    );
    writeln!(out, "{}", paint.wrap(style::BOLD, &header))?;
    for (v, found) in rows {
        let (here, sgr) = match &found {
            None => ("built in".to_owned(), style::GREEN),
            Some(Some(path)) => (path.display().to_string(), style::GREEN),
            Some(None) => ("not installed".to_owned(), style::RED),
        };
        writeln!(
            out,
            "{} {:<6} {:<16} {:<15} {} {}",
            paint.padded(style::BOLD, v.name, 16),
            if v.scope == Scope::Group {
                "group"
            } else {
                "file"
            },
            v.binary.unwrap_or("-"),
            v.package.unwrap_or("-"),
            paint.padded(sgr, &here, 24),
            if validators::is_admin(v) {
                format!("{} (from {})", v.summary, validators::admin::ADMIN_DIR)
            } else {
                v.summary.to_owned()
            }
        )?;
    }
    Ok(ExitCode::Clean)
}
