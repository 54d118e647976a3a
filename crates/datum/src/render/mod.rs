//! Everything a person or a program reads about a pass: human text (colour on
//! a terminal, plain when piped), JSON and Markdown, through
//! `datum_report::render` ([`print()`] is where every report leaves `datum`).
//! Sensitive content is replaced by `(sensitive)` here, at the last step, and
//! validator output for sensitive resources never reaches this module at all
//! (the engine drops it).

pub mod diff;
pub mod json;
pub mod pass;
pub mod progress;

use std::io::Write;

use datum_core::{Action, Outcome};
use datum_engine::{Event, Mode, PassSummary, Reporter, ResourceReport};
use datum_report::render::{Answer, Format, Render, Unsupported};
use datum_report::style::{self, Paint};

use crate::cli::GlobalArgs;

/// Writes `report` to stdout in the format `--output` chose (colour as
/// `--color` and the terminal say): the one way a report leaves `datum`. A
/// format the report has no form in is an error, never another format.
pub fn print(report: &(impl Render + ?Sized), global: &GlobalArgs) -> anyhow::Result<()> {
    let paint = Paint::new(crate::context::use_color(global));
    let text = datum_report::render::render(report, global.output, paint)?;
    json::begin();
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// Writes a command's own answer (a listing, a status, a confirmation) to
/// stdout in the format `--output` chose: the one place such a command's
/// format is looked at. Every format is matched (no wildcard): a new one is
/// refused here until [`Answer`] has a method for it. `commands::formats`
/// refuses Markdown before the command runs; this says the same if it is
/// reached.
pub fn emit(answer: &(impl Answer + ?Sized), global: &GlobalArgs) -> anyhow::Result<()> {
    match global.output {
        Format::Human => {
            let paint = Paint::new(crate::context::use_color(global));
            let mut stdout = std::io::stdout().lock();
            answer.human(&mut stdout, paint)?;
            stdout.flush()?;
        }
        Format::Json => json::print(answer.json_key(), answer.json()?)?,
        Format::Markdown => {
            return Err(
                Unsupported::new(answer.what(), global.output, crate::commands::OWN).into(),
            );
        }
    }
    Ok(())
}

/// Prints each resource as it finishes, then a summary line: the human form
/// of [`pass::PassReport`], streamed (the same bytes, from the same
/// functions; a test holds them equal). On a terminal, a progress bar on
/// stderr counts resources while the pass runs.
pub struct HumanReporter {
    mode: Mode,
    color: bool,
    verbose: bool,
    out: Vec<u8>,
    progress: Option<indicatif::ProgressBar>,
    write_error: Option<std::io::Error>,
    sink: Box<dyn Write>,
}

impl HumanReporter {
    /// Streams to stdout.
    pub fn new(mode: Mode, color: bool, verbose: bool) -> Self {
        Self::to(mode, color, verbose, Box::new(std::io::stdout()))
    }

    /// Streams to `sink`.
    fn to(mode: Mode, color: bool, verbose: bool, sink: Box<dyn Write>) -> Self {
        Self {
            mode,
            color,
            verbose,
            out: Vec::new(),
            progress: None,
            write_error: None,
            sink,
        }
    }

    /// Writes what `resource` collected, above the progress bar if there is one.
    fn flush_lines(&mut self) {
        if self.out.is_empty() || self.write_error.is_some() {
            return;
        }
        let bytes = std::mem::take(&mut self.out);
        let sink = &mut self.sink;
        let mut write = || sink.write_all(&bytes).and_then(|()| sink.flush());
        let result = match &self.progress {
            Some(bar) => bar.suspend(write),
            None => write(),
        };
        if let Err(e) = result {
            self.write_error = Some(e);
        }
    }

    fn resource(&mut self, r: &ResourceReport) {
        if let Some(text) = resource_text(r, Paint::new(self.color), self.verbose) {
            self.out.extend_from_slice(text.as_bytes());
        }
    }

    /// Writes the summary line (and reports a write error from the way).
    pub fn finish(mut self, summary: &PassSummary) -> std::io::Result<()> {
        if let Some(bar) = self.progress.take() {
            bar.finish_and_clear();
        }
        if let Some(e) = self.write_error.take() {
            return Err(e);
        }
        let line = summary_line(self.mode, summary, Paint::new(self.color));
        self.out.extend_from_slice(line.as_bytes());
        self.sink.write_all(&self.out)?;
        self.sink.flush()
    }
}

/// What a person reads about one resource: its marker, id and status, the
/// changed fields and content diff, and the detail (validator output); `None`
/// for an unchanged resource nobody asked to see (`--verbose` shows them).
pub fn resource_text(r: &ResourceReport, paint: Paint, verbose: bool) -> Option<String> {
    let (marker, sgr) = match (&r.outcome, r.action) {
        (Outcome::Failed { .. }, _) => ("!", style::RED_BOLD),
        (Outcome::Blocked { .. }, _) => ("#", style::YELLOW),
        (Outcome::Unchanged, _) => ("=", style::DIM),
        (_, Action::Create) => ("+", style::GREEN),
        (_, Action::Remove) => ("-", style::RED),
        (_, Action::Replace) => ("-/+", style::MAGENTA),
        _ => ("~", style::YELLOW),
    };
    // Unchanged with a reason (an accepted observation) is shown: it is
    // left as it is on purpose.
    if matches!(r.outcome, Outcome::Unchanged) && !verbose && r.detail.is_none() {
        return None;
    }
    let mut out = String::new();
    let head = format!("{marker} {}", r.id);
    // A reason or a validator's output may quote what the host holds (a
    // live path, a line of a configuration a local user can write): a
    // control character in it is written as an escape, never sent to the
    // terminal.
    let status = status(r);
    let status = datum_core::text::visible(&status, &[]);
    out.push_str(&format!("{}  {status}\n", paint.wrap(sgr, &head)));
    out.push_str(&diff::field_lines(r, paint.on));
    if let Some(detail) = r
        .detail
        .as_ref()
        .filter(|_| r.outcome != Outcome::Unchanged)
    {
        for l in detail.lines() {
            let l = datum_core::text::visible(l, &['\t']);
            out.push_str(&format!("    | {l}\n"));
        }
    }
    // Said, so that a failure without its validator's words is never a
    // mystery: which sensitive resources, never the words that matched.
    if let Some(withheld) = &r.withheld {
        let sentence = withheld.sentence();
        let why = datum_core::text::visible(&sentence, &[]);
        out.push_str(&format!("    {why}\n"));
    }
    Some(out)
}

/// A resource's outcome in words: `create (intentional)`, `failed (validate): ...`.
pub fn status(r: &ResourceReport) -> String {
    match &r.outcome {
        Outcome::Unchanged => match &r.detail {
            Some(why) => format!("unchanged: {}", why.lines().next().unwrap_or("")),
            None => "unchanged".to_owned(),
        },
        Outcome::WouldChange { intent } => {
            format!("{} ({})", r.action.word(), intent_word(*intent))
        }
        Outcome::Changed { intent } => {
            format!("{} ({}), done", r.action.word(), intent_word(*intent))
        }
        Outcome::Failed { phase, reason } => {
            // Point at the declaration, as every error does.
            let at = if r.origin.line > 0 {
                format!(" (declared at {})", r.origin)
            } else {
                String::new()
            };
            format!("failed ({phase}): {reason}{at}")
        }
        // Held back by its own state, not by a requirement: say which.
        Outcome::Blocked { by } if *by == r.id => {
            if r.detail
                .as_deref()
                .is_some_and(|d| d.starts_with("quarantined"))
            {
                "quarantined (not applied)".to_owned()
            } else {
                "held (not selected; it would change)".to_owned()
            }
        }
        Outcome::Blocked { by } => format!("blocked (by {by})"),
    }
}

/// The last line of a plan or an apply, with its newline:
/// `Plan: 1 to change, 3 unchanged, 0 failed, 0 blocked (12 ms).`
pub fn summary_line(mode: Mode, summary: &PassSummary, paint: Paint) -> String {
    let counts = summary.counts();
    let n = |k: &str| counts.get(k).copied().unwrap_or(0);
    // `--trust-metadata`: how many of the unchanged were not read.
    let unread = summary
        .trusted_by_metadata
        .map(|trusted| format!(" ({trusted} by their metadata, not read)"))
        .unwrap_or_default();
    // Held by a person's quarantine (and what requires it): a decision, not
    // a blocked change, so counted apart, and only when there is one.
    let held = summary
        .resources
        .iter()
        .filter(|r| summary.held_by_quarantine(r))
        .count() as u64;
    let blocked = n("blocked").saturating_sub(held);
    let held = if held > 0 {
        format!(", {held} held by a quarantine")
    } else {
        String::new()
    };
    let line = match mode {
        Mode::Plan => format!(
            "Plan: {} to change, {} unchanged{unread}, {} failed, {blocked} blocked{held} ({} ms).",
            n("would_change"),
            n("unchanged"),
            n("failed"),
            summary.duration_ms
        ),
        Mode::Apply => format!(
            "Apply: {} changed, {} unchanged{unread}, {} failed, {blocked} blocked{held} ({} ms).",
            n("changed"),
            n("unchanged"),
            n("failed"),
            summary.duration_ms
        ),
    };
    let mut out = paint.wrap(style::BOLD, &line) + "\n";
    // What is no resource's failure but must be said (a path a local user
    // chose is in it: escaped, as every name from the host is).
    for warning in &summary.warnings {
        out.push_str(&format!(
            "{}: {}\n",
            paint.wrap(style::YELLOW, "warning"),
            datum_core::text::visible(warning, &[])
        ));
    }
    out
}

fn intent_word(intent: datum_core::Intent) -> &'static str {
    match intent {
        datum_core::Intent::Intentional => "intentional",
        datum_core::Intent::Corrective => "corrective",
    }
}

impl Reporter for HumanReporter {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::PassStarted { resources } => {
                self.progress = progress::resources(crate::cli::Format::Human, resources as u64);
            }
            Event::ResourceStarted { id } => {
                if let Some(bar) = &self.progress {
                    bar.set_message(id.to_string());
                }
            }
            Event::ResourceFinished { report } => {
                self.resource(report);
                self.flush_lines();
                if let Some(bar) = &self.progress {
                    bar.inc(1);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use datum_core::{Intent, ResourceId};
    use datum_engine::{Mode, PassSummary};

    use super::*;

    /// A sink a test reads back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn report(name: &str, action: Action, outcome: Outcome) -> ResourceReport {
        ResourceReport {
            id: ResourceId::new("File", name),
            origin: Default::default(),
            target: Some(format!("/etc/{name}")),
            action,
            diff: Default::default(),
            outcome,
            sensitive: false,
            detail: None,
            withheld: None,
            duration_ms: 1,
        }
    }

    /// What a person sees while a pass runs is, byte for byte, the human
    /// form of the finished report (`--output human` streams it; the other
    /// formats render the report once it is over).
    #[test]
    fn the_streamed_text_is_the_reports_human_form() {
        let summary = PassSummary {
            resources: vec![
                report(
                    "a",
                    Action::Create,
                    Outcome::Changed {
                        intent: Intent::Intentional,
                    },
                ),
                report("b", Action::None, Outcome::Unchanged),
                report(
                    "c",
                    Action::Update,
                    Outcome::Failed {
                        phase: datum_core::Phase::Apply,
                        reason: "validation failed".to_owned(),
                    },
                ),
                report(
                    "d",
                    Action::None,
                    Outcome::Blocked {
                        by: ResourceId::new("File", "c"),
                    },
                ),
            ],
            duration_ms: 12,
            ..PassSummary::default()
        };
        for (color, verbose) in [(false, false), (true, false), (false, true)] {
            let sink = Shared::default();
            let mut streamed =
                HumanReporter::to(Mode::Apply, color, verbose, Box::new(sink.clone()));
            for r in &summary.resources {
                streamed.event(Event::ResourceFinished { report: r });
            }
            streamed.finish(&summary).unwrap();
            let rendered = pass::PassReport {
                host: "h",
                mode: Mode::Apply,
                summary: &summary,
                key: None,
                verbose,
                selection: serde_json::Value::Null,
                banner: None,
                footer: None,
                saved_plan: None,
            }
            .human(Paint::new(color));
            let streamed = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
            assert_eq!(streamed, rendered, "color {color}, verbose {verbose}");
            assert!(streamed.contains("File[c]"), "{streamed}");
        }
    }

    /// A staging folder a local user moved away is left where they put it
    /// and said under the summary, in every form (the place they chose is
    /// escaped: it is a name from the host).
    #[test]
    fn a_pass_says_its_warnings_under_the_summary() {
        let summary = PassSummary {
            resources: vec![report(
                "keys",
                Action::Update,
                Outcome::Changed {
                    intent: Intent::Intentional,
                },
            )],
            warnings: vec![
                "the staging folder .datum.stage.x ... (it is now at /home/a/x\u{1b}[2J)"
                    .to_owned(),
            ],
            ..PassSummary::default()
        };
        let human = summary_line(Mode::Apply, &summary, Paint::new(false));
        assert_eq!(
            human.lines().nth(1),
            Some(
                "warning: the staging folder .datum.stage.x ... (it is now at /home/a/x\\u{1b}[2J)"
            ),
            "{human}"
        );
        let json = json::pass("h", Mode::Apply, &summary, None);
        assert_eq!(json["warnings"][0], summary.warnings[0].as_str());
        let quiet = PassSummary {
            warnings: Vec::new(),
            ..summary
        };
        assert_eq!(
            summary_line(Mode::Apply, &quiet, Paint::new(false))
                .lines()
                .count(),
            1
        );
        assert!(
            json::pass("h", Mode::Apply, &quiet, None)
                .get("warnings")
                .is_none()
        );
    }
}
