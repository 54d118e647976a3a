//! `datum validators`: what `validate:` may name, and whether each validator
//! can run on this host.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use datum_providers::validators::{self, Scope, ValidatorDef};
use datum_report::render::Answer;
use datum_report::style::{self, Paint};
use serde_json::json;

use crate::cli::GlobalArgs;
use crate::exit::ExitCode;

pub fn run(global: &GlobalArgs) -> Result<ExitCode> {
    let rows = validators::all()
        .into_iter()
        .map(|v| {
            let found = v.binary.map(datum_host::command::which);
            (v, found)
        })
        .collect();
    crate::render::emit(&Listing { rows }, global)?;
    Ok(ExitCode::Clean)
}

/// Every validator, with where its binary was found: `None` for one built
/// in, `Some(None)` for a binary not installed.
struct Listing {
    rows: Vec<(&'static ValidatorDef, Option<Option<PathBuf>>)>,
}

impl Answer for Listing {
    fn what(&self) -> &'static str {
        "datum validators"
    }

    fn json_key(&self) -> &'static str {
        "validators"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        let list: Vec<_> = self
            .rows
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
        Ok(json!(list))
    }

    fn human(&self, out: &mut dyn Write, paint: Paint) -> std::io::Result<()> {
        let header = format!(
            "{:<16} {:<6} {:<16} {:<15} {:<24} WHAT",
            "NAME", "SCOPE", "BINARY", "PACKAGE", "HERE"
        );
        writeln!(out, "{}", paint.wrap(style::BOLD, &header))?;
        for (v, found) in &self.rows {
            let (here, sgr) = match found {
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
        Ok(())
    }
}
