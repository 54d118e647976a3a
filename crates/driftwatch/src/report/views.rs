//! The reports driftwatch prints, behind `datum_report::render::Render`: one stack
//! ([`StackReport`]) and a run over several ([`RunReport`]). The format is chosen once
//! (`--output`) and each view renders it from the modules beside this one.
//!
//! Must not: write anywhere (the CLI writes what these return), or see a secret (the
//! reports hold only values that survived masking).

use std::path::Path;

use datum_report::markdown::{inline_code, marker_line};
use datum_report::render::Render;
use datum_report::style::Paint;

use super::{json, summary, text};
use crate::classify::{self, Report};

/// One stack's report with what its JSON says besides (exit code, time, timings).
pub struct StackReport<'a> {
    pub report: &'a Report,
    pub meta: json::Meta<'a>,
}

impl Render for StackReport<'_> {
    fn what(&self) -> String {
        format!("the drift report of {}", self.report.stack)
    }

    fn human(&self, paint: Paint) -> String {
        text::render(self.report, paint.on)
    }

    fn json(&self) -> String {
        json::render(self.report, self.meta)
    }

    fn markdown(&self) -> Option<String> {
        Some(super::markdown::render(self.report, self.meta.generated_at))
    }
}

/// One stack of a run over several: its report, or why it could not be checked.
pub struct RunStack<'a> {
    pub name: &'a str,
    pub chdir: &'a Path,
    pub outcome: Result<RunChecked<'a>, &'a str>,
}

/// A stack of a run that was checked.
pub struct RunChecked<'a> {
    pub report: &'a Report,
    pub code: u8,
    pub timings: Option<json::Timings>,
}

/// A run over several stacks: each stack's report (or its error), then the summary table.
pub struct RunReport<'a> {
    pub stacks: Vec<RunStack<'a>>,
    /// RFC 3339 UTC time of the run.
    pub generated_at: &'a str,
}

impl RunReport<'_> {
    fn rows(&self) -> Vec<summary::Row<'_>> {
        self.stacks
            .iter()
            .map(|s| summary::Row {
                name: s.name,
                outcome: match &s.outcome {
                    Ok(c) => Ok((c.report, c.code)),
                    Err(m) => Err(m),
                },
            })
            .collect()
    }

    /// Each stack's Markdown report (or its error), in order.
    fn stack_markdowns(&self) -> Vec<String> {
        self.stacks
            .iter()
            .map(|s| match &s.outcome {
                Ok(c) => super::markdown::render(c.report, self.generated_at),
                Err(m) => error_markdown(s.name, m, self.generated_at),
            })
            .collect()
    }
}

/// The Markdown summary table of a run with its heading.
pub fn summary_markdown(rows: &[summary::Row<'_>], at: &str) -> String {
    format!(
        "## Drift summary\n\nChecked at {}.\n\n{}",
        inline_code(at),
        summary::markdown(rows)
    )
}

/// The Markdown of a stack that could not be checked.
pub fn error_markdown(name: &str, message: &str, at: &str) -> String {
    format!(
        "{}\n## Drift report: {}\n\nChecked at {}.\n\n**driftwatch could not check this stack:** {}\n",
        marker_line(&datum_report::dedupe_key(classify::TOOL, name)),
        super::markdown::outside_text(name),
        inline_code(at),
        super::markdown::outside_text(message),
    )
}

impl Render for RunReport<'_> {
    fn what(&self) -> String {
        "the report of several stacks".to_owned()
    }

    fn human(&self, paint: Paint) -> String {
        let mut out = String::new();
        for s in &self.stacks {
            let title = format!("=== {} ({})", s.name, s.chdir.display());
            out.push_str(&paint.wrap("1", &title));
            out.push('\n');
            match &s.outcome {
                Ok(c) => out.push_str(&text::render(c.report, paint.on)),
                Err(m) => {
                    out.push_str(&paint.wrap("31", &format!("! could not check this stack: {m}")));
                    out.push('\n');
                }
            }
            out.push('\n');
        }
        out.push_str(&summary::text(&self.rows(), paint.on));
        out
    }

    fn json(&self) -> String {
        let rows = self.rows();
        let docs: Vec<serde_json::Value> = self
            .stacks
            .iter()
            .map(|s| {
                let mut entry = serde_json::json!({
                    "name": s.name,
                    "chdir": s.chdir.display().to_string(),
                });
                match &s.outcome {
                    Ok(c) => {
                        let meta = json::Meta {
                            exit_code: i32::from(c.code),
                            generated_at: self.generated_at,
                            timings: c.timings.as_ref(),
                        };
                        entry["exit_code"] = c.code.into();
                        entry["report"] = json::value(c.report, meta);
                    }
                    Err(m) => {
                        entry["exit_code"] = crate::exit::ERROR.into();
                        entry["error"] = (*m).into();
                    }
                }
                entry
            })
            .collect();
        let count = |code: u8| rows.iter().filter(|r| r.exit() == code).count();
        let doc = serde_json::json!({
            "format_version": json::FORMAT_VERSION,
            "schema": "driftwatch/run",
            "generated_at": self.generated_at,
            "exit_code": summary::worst_exit(&rows),
            "summary": {
                "stacks": rows.len(),
                "clean": count(crate::exit::CLEAN),
                "drift": count(crate::exit::DRIFT),
                "error": count(crate::exit::ERROR),
            },
            "stacks": docs,
        });
        datum_report::json::pretty(&doc)
    }

    /// The summary table, then each stack's report (what the step summary gets).
    fn markdown(&self) -> Option<String> {
        let mut all = summary_markdown(&self.rows(), self.generated_at);
        for md in self.stack_markdowns() {
            all.push('\n');
            all.push_str(&md);
        }
        Some(all)
    }
}
