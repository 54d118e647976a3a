//! `datum validators`: what `validate:` may name, and whether each validator
//! can run on this host.

use std::io::Write;

use anyhow::Result;
use datum_providers::validators::{self, Scope};
use serde_json::json;

use crate::cli::{GlobalArgs, OutputFormat};
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
    if global.output == OutputFormat::Json {
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
        let doc = json!({"format_version": "1", "validators": list});
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(ExitCode::CLEAN);
    }
    writeln!(
        out,
        "{:<16} {:<6} {:<16} {:<15} {:<24} WHAT",
        "NAME", "SCOPE", "BINARY", "PACKAGE", "HERE"
    )?;
    for (v, found) in rows {
        let here = match &found {
            None => "built in".to_owned(),
            Some(Some(path)) => path.display().to_string(),
            Some(None) => "not installed".to_owned(),
        };
        writeln!(
            out,
            "{:<16} {:<6} {:<16} {:<15} {:<24} {}",
            v.name,
            if v.scope == Scope::Group {
                "group"
            } else {
                "file"
            },
            v.binary.unwrap_or("-"),
            v.package.unwrap_or("-"),
            here,
            if validators::is_admin(v) {
                format!("{} (from {})", v.summary, validators::admin::ADMIN_DIR)
            } else {
                v.summary.to_owned()
            }
        )?;
    }
    Ok(ExitCode::CLEAN)
}
