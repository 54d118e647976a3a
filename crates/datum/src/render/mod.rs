//! Everything a person or a program reads about a pass: human text (colour on
//! a terminal, plain when piped) and JSON. Sensitive content is replaced by
//! `(sensitive)` here, at the last step, and validator output for sensitive
//! resources never reaches this module at all (the engine drops it).

pub mod diff;
pub mod json;

use std::io::Write;

use anstyle::{AnsiColor, Style};
use datum_core::{Action, Outcome};
use datum_engine::{Event, Mode, PassSummary, Reporter, ResourceReport};

/// Prints each resource as it finishes, then a summary line.
pub struct HumanReporter {
    mode: Mode,
    color: bool,
    verbose: bool,
    out: Vec<u8>,
}

impl HumanReporter {
    pub fn new(mode: Mode, color: bool, verbose: bool) -> Self {
        Self {
            mode,
            color,
            verbose,
            out: Vec::new(),
        }
    }

    fn paint(&self, style: Style, text: &str) -> String {
        if self.color {
            format!("{}{text}{}", style.render(), style.render_reset())
        } else {
            text.to_owned()
        }
    }

    fn resource(&mut self, r: &ResourceReport) {
        let (marker, style) = match (&r.outcome, r.action) {
            (Outcome::Failed { .. }, _) => ("!", AnsiColor::Red.on_default().bold()),
            (Outcome::Blocked { .. }, _) => ("#", AnsiColor::Yellow.on_default()),
            (Outcome::Unchanged, _) => ("=", Style::new().dimmed()),
            (_, Action::Create) => ("+", AnsiColor::Green.on_default()),
            (_, Action::Remove) => ("-", AnsiColor::Red.on_default()),
            (_, Action::Replace) => ("-/+", AnsiColor::Magenta.on_default()),
            _ => ("~", AnsiColor::Yellow.on_default()),
        };
        if matches!(r.outcome, Outcome::Unchanged) && !self.verbose {
            return;
        }
        let status = match &r.outcome {
            Outcome::Unchanged => "unchanged".to_owned(),
            Outcome::WouldChange { intent } => {
                format!("{} ({})", r.action.word(), intent_word(*intent))
            }
            Outcome::Changed { intent } => {
                format!("{} ({}), done", r.action.word(), intent_word(*intent))
            }
            Outcome::Failed { phase, reason } => format!("failed ({phase}): {reason}"),
            Outcome::Blocked { by } => format!("blocked (by {by})"),
        };
        let head = format!("{marker} {}", r.id);
        let line = format!("{}  {}\n", self.paint(style, &head), status);
        self.out.extend_from_slice(line.as_bytes());
        let body = diff::field_lines(r, self.color);
        self.out.extend_from_slice(body.as_bytes());
        if let Some(detail) = &r.detail {
            for l in detail.lines() {
                self.out
                    .extend_from_slice(format!("    | {l}\n").as_bytes());
            }
        }
    }

    /// Writes everything collected and the summary line.
    pub fn finish(mut self, summary: &PassSummary) -> std::io::Result<()> {
        let counts = summary.counts();
        let n = |k: &str| counts.get(k).copied().unwrap_or(0);
        let line = match self.mode {
            Mode::Plan => format!(
                "Plan: {} to change, {} unchanged, {} failed, {} blocked ({} ms).\n",
                n("would_change"),
                n("unchanged"),
                n("failed"),
                n("blocked"),
                summary.duration_ms
            ),
            Mode::Apply => format!(
                "Apply: {} changed, {} unchanged, {} failed, {} blocked ({} ms).\n",
                n("changed"),
                n("unchanged"),
                n("failed"),
                n("blocked"),
                summary.duration_ms
            ),
        };
        let line = self.paint(Style::new().bold(), line.trim_end()) + "\n";
        self.out.extend_from_slice(line.as_bytes());
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(&self.out)?;
        stdout.flush()
    }
}

fn intent_word(intent: datum_core::Intent) -> &'static str {
    match intent {
        datum_core::Intent::Intentional => "intentional",
        datum_core::Intent::Corrective => "corrective",
    }
}

impl Reporter for HumanReporter {
    fn event(&mut self, event: Event<'_>) {
        if let Event::ResourceFinished { report } = event {
            self.resource(report);
        }
    }
}
