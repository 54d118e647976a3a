//! `datum plan` and `datum apply`: compile, lock the root, run one pass,
//! record it, and report.

use std::io::Write;

use anyhow::{Context as _, Result};
use datum_engine::{Mode, PassContext};
use datum_host::lock::RootLock;

use crate::cli::{GlobalArgs, OutputFormat};
use crate::context;
use crate::exit::ExitCode;
use crate::render::{self, HumanReporter};

pub fn run(global: &GlobalArgs, mode: Mode) -> Result<ExitCode> {
    let identity = context::identity(global)?;
    // Compile before touching anything: a manifest error applies nothing.
    let catalogue = context::compile(global, &identity)?;
    let host = context::host(global, &identity, &catalogue.boundary);
    let _lock = if mode == Mode::Apply {
        Some(RootLock::acquire(&host, global.lock_timeout).context("cannot lock the root")?)
    } else {
        None
    };
    // Fail closed: an apply without its quarantines and owed reloads could
    // undo an emergency fix; a plan only reads, and says so.
    let need = match mode {
        Mode::Apply => context::StoreNeed::Required("applied"),
        Mode::Plan => context::StoreNeed::Optional("planning"),
    };
    let mut store = context::open_store(global, need)?;
    let mut backups = if mode == Mode::Apply {
        Some(context::open_backups(global)?)
    } else {
        None
    };
    let started_at = context::now();
    // Quarantined resources (by `datum check` or a person) are not applied.
    let skip = match store.as_ref().map(|s| s.quarantined()) {
        Some(Ok(q)) => datum_drift::policy::skip_set(&q, catalogue.resources.iter().map(|r| &r.id)),
        _ => Default::default(),
    };
    let mut ctx = PassContext {
        host: &host,
        mode,
        store: store.as_mut(),
        backups: backups.as_mut(),
        now: started_at,
        skip,
    };
    let color = context::use_color(global);
    let summary = match global.output {
        OutputFormat::Human => {
            let mut reporter = HumanReporter::new(mode, color, global.verbose);
            let summary = datum_engine::run_pass(&catalogue, &mut ctx, &mut reporter);
            reporter.finish(&summary)?;
            summary
        }
        OutputFormat::Json => {
            let summary =
                datum_engine::run_pass(&catalogue, &mut ctx, &mut datum_engine::SilentReporter);
            let json = render::json::pass(&identity.name, mode, &summary);
            writeln!(
                std::io::stdout(),
                "{}",
                serde_json::to_string_pretty(&json)?
            )?;
            summary
        }
    };
    // Orphan blobs and temporaries from killed passes (we hold the lock).
    if let Some(backups) = backups.as_mut() {
        let _ = backups.gc();
    }
    let code = match mode {
        Mode::Plan => plan_exit(&summary),
        Mode::Apply => ExitCode::for_apply(summary.any_changed(), summary.any_failed()),
    };
    if let Some(store) = &mut store {
        let record = datum_store::PassRecord {
            started_at,
            finished_at: context::now(),
            command: if mode == Mode::Apply { "apply" } else { "plan" }.to_owned(),
            host: identity.name.clone(),
            counts: summary.counts(),
            duration_ms: summary.duration_ms,
            exit_code: code.0,
        };
        if let Err(e) = store.record_pass(&record) {
            eprintln!("warning: could not record the pass in the state store: {e}");
        }
    }
    Ok(code)
}

/// A plan exits 2 when anything would change (a change that would fail
/// validation is still a pending change), 1 when a resource could not even be
/// observed, 0 otherwise.
fn plan_exit(summary: &datum_engine::PassSummary) -> ExitCode {
    use datum_core::{Outcome, Phase};
    let unobservable = summary.resources.iter().any(|r| {
        matches!(
            r.outcome,
            Outcome::Failed {
                phase: Phase::Observe | Phase::Diff,
                ..
            }
        )
    });
    if unobservable {
        return ExitCode::ERROR;
    }
    ExitCode::for_pending(summary.any_changed() || summary.any_failed())
}
