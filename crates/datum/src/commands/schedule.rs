//! `datum schedule`: per class, the check interval, the inspection time
//! measured over recent checks (p50/p95 from the state store) and the
//! detection bound = interval + p95: how long drift can go unnoticed. A
//! metadata-first class states its second bound on a line of its own: an
//! edit that keeps size and times waits for the content audit
//! (`audit_every` × interval + p95), or is never seen without one. A
//! watched class states the agent's debounce + p95 for what a watch sees,
//! with the debounce `datum agent` takes from the defaults file
//! (`[agent] debounce`) unless `--debounce` says otherwise.
//!
//! Must not: inspect the host (it reads the catalogue and the store).

use std::io::Write;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use datum_drift::classes::Classes;
use datum_drift::schedule::{ScheduleRow, format_ms};
use datum_report::render::Answer;
use datum_report::style::{self, Paint};

use crate::cli::GlobalArgs;
use crate::context;
use crate::exit::ExitCode;

/// Checks the percentiles are taken over.
const RECENT: usize = 50;

#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// The agent's debounce, added to a watched class's bound. Its default is the agent's: datum.toml's `[agent] debounce`, else 100ms; give the agent's --debounce when it runs with one (its command line is not read).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "100ms",
        value_parser = crate::cli::duration
    )]
    pub debounce: Duration,
}

pub fn run(global: &GlobalArgs, args: &ScheduleArgs) -> Result<ExitCode> {
    let identity = context::identity(global)?;
    let catalogue = context::compile(global, &identity)?;
    let settings = match datum_manifest::Settings::load(&global.repo) {
        Ok(settings) => settings,
        Err(_) => anyhow::bail!("{}: cannot read datum.yaml", global.repo.display()),
    };
    let classes = Classes::parse(&settings.classes).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        anyhow::anyhow!(lines.join("\n"))
    })?;
    let store = context::open_store(global, context::StoreNeed::Optional("scheduling"))?;
    let rows: Vec<ScheduleRow> = classes
        .classes
        .values()
        .map(|spec| {
            let count = catalogue
                .resources
                .iter()
                .filter(|r| classes.get(&r.class).name == spec.name)
                .count();
            let p = store
                .as_ref()
                .and_then(|s| {
                    s.inspection_percentiles("check", Some(&spec.name), RECENT)
                        .ok()
                })
                .flatten()
                .map(|p| (p.p50_ms, p.p95_ms, p.samples));
            // Under `datum agent` a watched class is checked within the
            // watch's debounce of a change: its bound takes the inspection
            // time of watch-triggered checks.
            let watch_p95 = if spec.watch {
                store
                    .as_ref()
                    .and_then(|s| {
                        s.inspection_percentiles("agent-watch", Some(&spec.name), RECENT)
                            .ok()
                    })
                    .flatten()
                    .map(|p| p.p95_ms)
            } else {
                None
            };
            ScheduleRow::new(spec, count, p, args.debounce, watch_p95)
        })
        .collect();
    crate::render::emit(&Scheduled { rows }, global)?;
    Ok(ExitCode::Clean)
}

/// One row per class.
struct Scheduled {
    rows: Vec<ScheduleRow>,
}

impl Answer for Scheduled {
    fn what(&self) -> &'static str {
        "datum schedule"
    }

    fn json_key(&self) -> &'static str {
        "classes"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(&self.rows)
    }

    fn human(&self, out: &mut dyn Write, paint: Paint) -> std::io::Result<()> {
        let header = format!(
            "{:<12} {:>9} {:>16} {:<10} {:<10} {:>9} {:>9} {:>16}",
            "CLASS",
            "RESOURCES",
            "INTERVAL/WATCH",
            "CONTENT",
            "POLICY",
            "P50",
            "P95",
            "DETECTED WITHIN"
        );
        writeln!(out, "{}", paint.wrap(style::BOLD, &header))?;
        for r in &self.rows {
            let content = match (r.content, r.audit_every) {
                (datum_drift::classes::ContentMode::Full, _) => "full".to_owned(),
                (_, Some(n)) => format!("meta/{n}"),
                (_, None) => "metadata".to_owned(),
            };
            let ms = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), format_ms);
            let policy = r.policy.word();
            let policy_sgr = match policy {
                "revert" => style::YELLOW,
                "quarantine" => style::MAGENTA,
                "accept" => style::CYAN,
                _ => "",
            };
            let bound = match r.detection_bound_ms {
                Some(b) => format!("{:>16}", format_ms(b)),
                None => paint.wrap(style::DIM, &format!("{:>16}", "(no check yet)")),
            };
            writeln!(
                out,
                "{} {:>9} {:>16} {:<10} {} {:>9} {:>9} {bound}",
                paint.padded(style::BOLD, &r.class, 12),
                r.resources,
                if r.watched {
                    format!("{} +watch", format_ms(r.interval_s * 1000))
                } else {
                    format_ms(r.interval_s * 1000)
                },
                content,
                if policy_sgr.is_empty() {
                    format!("{policy:<10}")
                } else {
                    paint.padded(policy_sgr, policy, 10)
                },
                ms(r.p50_ms),
                ms(r.p95_ms),
            )?;
        }
        // Metadata-first classes: the bound for what metadata cannot show.
        for r in self
            .rows
            .iter()
            .filter(|r| r.content == datum_drift::classes::ContentMode::Metadata)
        {
            let visible = r
                .detection_bound_ms
                .map_or_else(|| "(no check yet)".to_owned(), format_ms);
            let hidden = match (r.audit_every, r.stamp_preserving_bound_ms) {
                (None, _) => "never (no audit_every: add one to bound it)".to_owned(),
                (Some(n), Some(b)) => format!(
                    "within {} (audit every {n} checks × {} + p95)",
                    format_ms(b),
                    format_ms(r.interval_s * 1000)
                ),
                (Some(n), None) => format!(
                    "at the audit, every {n} checks × {} + inspection (no check yet)",
                    format_ms(r.interval_s * 1000)
                ),
            };
            writeln!(
                out,
                "{}: metadata-visible changes within {visible}; edits that keep size and times: {hidden}",
                r.class
            )?;
        }
        // Watched classes: the bound for what a watch cannot see.
        for r in self.rows.iter().filter(|r| r.watched) {
            let bound = r.unwatched_bound_ms.map_or_else(
                || "(no check yet)".to_owned(),
                |b| format!("within {}", format_ms(b)),
            );
            writeln!(
                out,
                "{}: a change no watch sees (a write through another hard link of a file replaced since the watches were armed or of a file in a Tree, or while a watch is lost) waits for the interval: {bound}",
                r.class
            )?;
        }
        // Who-changed-it rules, one line per class that has any.
        for r in self.rows.iter().filter(|r| r.attributed) {
            let said = match r.on_change_by {
                None => format!("every change: {}", r.policy.word()),
                Some(w) if w.other.is_some() => format!("changes by {}", w.describe()),
                Some(w) => format!(
                    "changes by {}; by anyone else: {}",
                    w.describe(),
                    r.policy.word()
                ),
            };
            writeln!(
                out,
                "{}: writers attributed (fanotify, under datum agent); {said}",
                r.class
            )?;
        }
        Ok(())
    }
}
