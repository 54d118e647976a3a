//! A plan or an apply as a report: [`PassReport`], shown through
//! `datum_report::render` like every other report.
//!
//! The human form is also what [`super::HumanReporter`] prints while the pass
//! runs (resource by resource, above a progress bar), from the same
//! functions ([`super::resource_text`], [`super::summary_line`]), so the
//! streamed and the rendered text are the same bytes.
//!
//! Must not: show a sensitive value (field values never reach the Markdown
//! form at all; content is `(sensitive)` in every form).

use datum_core::Outcome;
use datum_engine::{Mode, PassSummary};
use datum_report::markdown::{Table, cell, inline_code};
use datum_report::render::Render;
use datum_report::style::Paint;
use serde_json::Value;

/// One finished pass and what was said around it.
pub struct PassReport<'a> {
    pub host: &'a str,
    pub mode: Mode,
    pub summary: &'a PassSummary,
    /// The host's key for sensitive resources' digests (JSON).
    pub key: Option<&'a datum_core::DigestKey>,
    /// Also list unchanged resources.
    pub verbose: bool,
    /// What part of the catalogue the pass covered, as JSON.
    pub selection: Value,
    /// The line before and after the resources (`--target`, `--class`).
    pub banner: Option<String>,
    pub footer: Option<String>,
    /// Where the plan was saved (`datum plan --out FILE`).
    pub saved_plan: Option<&'a std::path::Path>,
}

impl PassReport<'_> {
    fn command(&self) -> &'static str {
        match self.mode {
            Mode::Plan => "plan",
            Mode::Apply => "apply",
        }
    }
}

impl Render for PassReport<'_> {
    fn what(&self) -> String {
        format!("the {}", self.command())
    }

    fn human(&self, paint: Paint) -> String {
        let mut out = String::new();
        if let Some(banner) = &self.banner {
            out.push_str(banner);
            out.push('\n');
        }
        for r in &self.summary.resources {
            if let Some(text) = super::resource_text(r, paint, self.verbose) {
                out.push_str(&text);
            }
        }
        out.push_str(&super::summary_line(self.mode, self.summary, paint));
        if let Some(footer) = &self.footer {
            out.push_str(footer);
            out.push('\n');
        }
        out
    }

    fn json(&self) -> String {
        let mut json = super::json::pass(self.host, self.mode, self.summary, self.key);
        if let Some(obj) = json.as_object_mut() {
            obj.insert("selection".to_owned(), self.selection.clone());
            if let Some(out) = self.saved_plan {
                obj.insert(
                    "saved_plan".to_owned(),
                    Value::String(out.display().to_string()),
                );
            }
        }
        datum_report::json::pretty(&super::json::document("", json))
    }

    /// A table of what changes (or failed, or was held back) for a pull
    /// request or a change ticket: fields by name only, never their values.
    fn markdown(&self) -> Option<String> {
        let title = match self.mode {
            Mode::Plan => "Plan",
            Mode::Apply => "Apply",
        };
        let mut out = format!("## {title}: {}\n\n", cell(self.host));
        if let Some(banner) = &self.banner {
            out.push_str(&format!("{}\n\n", cell(banner)));
        }
        let mut table = Table::new(&["", "Resource", "Outcome", "Fields"]);
        let mut rows = 0;
        for r in &self.summary.resources {
            if r.outcome == Outcome::Unchanged && !self.verbose && r.detail.is_none() {
                continue;
            }
            let mut fields: Vec<String> = r
                .diff
                .changes
                .iter()
                .map(|c| inline_code(&c.field))
                .collect();
            if r.diff.content.is_some() {
                fields.push(if r.sensitive {
                    format!("content {}", datum_core::SENSITIVE_PLACEHOLDER)
                } else {
                    "content".to_owned()
                });
            }
            table.row_markdown(vec![
                inline_code(marker(r)),
                inline_code(&r.id.to_string()),
                cell(&match &r.withheld {
                    // Said, as in the human form (no output is in this
                    // table, but a failure's reason is).
                    Some(withheld) => format!("{}; {}", super::status(r), withheld.sentence()),
                    None => super::status(r),
                }),
                fields.join(", "),
            ]);
            rows += 1;
        }
        if rows > 0 {
            out.push_str(&table.render());
            out.push('\n');
        }
        out.push_str(&format!(
            "{}\n",
            super::summary_line(self.mode, self.summary, Paint::new(false)).trim_end()
        ));
        if let Some(footer) = &self.footer {
            out.push_str(&format!("\n{}\n", cell(footer)));
        }
        if let Some(saved) = self.saved_plan {
            out.push_str(&format!(
                "\nSaved to {}: `datum apply` of it applies exactly this plan.\n",
                inline_code(&saved.display().to_string())
            ));
        }
        Some(out)
    }
}

/// The marker of the human form, without colour.
fn marker(r: &datum_engine::ResourceReport) -> &'static str {
    use datum_core::Action;
    match (&r.outcome, r.action) {
        (Outcome::Failed { .. }, _) => "!",
        (Outcome::Blocked { .. }, _) => "#",
        (Outcome::Unchanged, _) => "=",
        (_, Action::Create) => "+",
        (_, Action::Remove) => "-",
        (_, Action::Replace) => "-/+",
        _ => "~",
    }
}
