//! `datum outbox [--flush]`: the reports this host has not delivered yet,
//! the delivery's backoff and totals; `--flush` delivers now, whatever the
//! backoff says (after fixing report.yaml, or once the server is back).
//! `--background` (hidden) is the delivery a pass starts after queueing its
//! report: quiet, and respecting the backoff.

use std::io::Write;

use anyhow::{Context as _, Result};
use clap::Args;
use datum_report::render::Answer;
use datum_report::style::Paint;
use datum_store::OutboxStatus;
use serde_json::json;

use crate::cli::GlobalArgs;
use crate::context;
use crate::exit::ExitCode;
use crate::reporting::Reporting;

#[derive(Debug, Args)]
pub struct OutboxArgs {
    /// Deliver what is queued now, whatever the backoff says.
    #[arg(long)]
    pub flush: bool,
    /// Deliver quietly, respecting the backoff: what a pass starts in the
    /// background after queueing its report.
    #[arg(long, hide = true, conflicts_with = "flush")]
    pub background: bool,
}

pub fn run(global: &GlobalArgs, args: &OutboxArgs) -> Result<ExitCode> {
    let host = datum_host::Host::new(&global.root);
    let reporting = Reporting::load(&host);
    if args.background {
        // Started by a pass (stdout and stderr go nowhere): deliver, quietly.
        let store = context::open_store(global, context::StoreNeed::Optional("delivering"));
        if let (Some(r), Ok(Some(mut store))) = (&reporting, store) {
            r.deliver(&mut store, crate::reporting::PASS_BUDGET, true);
        }
        return Ok(ExitCode::Clean);
    }
    let mut store =
        context::open_store(global, context::StoreNeed::Optional("showing the outbox"))?
            .context("no state store here: nothing was ever queued")?;
    let mut delivered = None;
    if args.flush {
        let r = reporting.as_ref().with_context(|| {
            format!(
                "{} does not exist: this host reports to no server",
                global.root.join(crate::reporting::REPORT_FILE).display()
            )
        })?;
        delivered = r.deliver(&mut store, crate::reporting::PASS_BUDGET * 6, false);
    }
    let status = store.outbox_status()?;
    let server = reporting
        .as_ref()
        .and_then(|r| r.credentials.as_ref())
        .map(|c| c.server.clone());
    let pending = status.depth > 0;
    let answer = Queued {
        server,
        status,
        delivered_now: delivered.as_ref().map(|d| d.delivered + d.duplicates),
    };
    crate::render::emit(&answer, global)?;
    Ok(ExitCode::for_pending(pending))
}

/// The outbox, and what `--flush` delivered.
struct Queued {
    /// The server report.yaml names.
    server: Option<String>,
    status: OutboxStatus,
    /// Delivered (or found there already) by `--flush`.
    delivered_now: Option<u64>,
}

impl Answer for Queued {
    fn what(&self) -> &'static str {
        "datum outbox"
    }

    fn json_key(&self) -> &'static str {
        "outbox"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        let status = &self.status;
        Ok(json!({
            "server": self.server,
            "depth": status.depth,
            "oldest_queued_at": status.oldest_queued_at,
            "failures": status.backoff.failures,
            "next_attempt_ms": status.backoff.next_attempt_ms,
            "last_error": status.backoff.last_error,
            "delivered_total": status.delivered_total,
            "last_delivered_at": status.last_delivered_at,
            "dropped_total": status.dropped_total,
            "refused_total": status.refused_total,
            "last_refused": status.last_refused,
            "delivered_now": self.delivered_now,
        }))
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        let status = &self.status;
        writeln!(
            out,
            "Outbox: {} report(s) queued for {}; {} delivered in all{}.",
            status.depth,
            self.server.as_deref().unwrap_or("(no report.yaml)"),
            status.delivered_total,
            if status.dropped_total > 0 || status.refused_total > 0 {
                format!(
                    ", {} dropped (outbox full), {} refused by the server",
                    status.dropped_total, status.refused_total
                )
            } else {
                String::new()
            }
        )?;
        if let Some(e) = &status.backoff.last_error {
            writeln!(
                out,
                "Last attempt failed ({} in a row): {e}",
                status.backoff.failures
            )?;
        }
        if let Some(why) = &status.last_refused {
            writeln!(out, "Last refusal: {why}")?;
        }
        Ok(())
    }
}
