//! `datum plan` and `datum apply`: compile, lock the root, run one pass,
//! record it, and report.

use std::io::Write;
use std::path::Path;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;
use datum_engine::{Mode, PassContext};
use datum_host::lock::RootLock;

use super::saved_plan::SavedPlan;
use super::selection::Selection;
use datum_report::render::Format;

use super::selection::SelectArgs;
use crate::cli::GlobalArgs;
use crate::context;
use crate::exit::ExitCode;
use crate::render::pass::PassReport;
use crate::render::{self, HumanReporter};
use crate::reporting::Reporting;

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub select: SelectArgs,
    /// Save the plan to FILE (mode 0600) for `datum apply FILE`, which
    /// applies exactly it and refuses if anything changed since.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "trust_metadata",
        value_parser = crate::cli::absolute_path
    )]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub trust: TrustArgs,
}

/// `--trust-metadata`, for `datum plan` and `datum apply`.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct TrustArgs {
    /// Do not read a file whose size, mtime, ctime, inode, mode and owner are
    /// what its last verified apply recorded (made while the file was
    /// quiet) and whose declaration has not changed since: take it as
    /// converged, as a `content: metadata` class of `datum check` does. Only
    /// a change that keeps all of these (ctime too, which needs the clock
    /// or the disk tampered with) goes unseen; off by default.
    #[arg(long)]
    pub trust_metadata: bool,
}

/// What a plan or an apply is asked to do besides a full pass.
#[derive(Default)]
pub struct Request<'a> {
    /// `--target`, `--class`.
    pub select: SelectArgs,
    /// `datum plan --out FILE`.
    pub out: Option<&'a Path>,
    /// `datum apply FILE`: the plan and its file.
    pub saved: Option<(&'a SavedPlan, &'a Path)>,
    /// `--trust-metadata`.
    pub trust: TrustArgs,
}

/// `datum plan`.
pub fn plan(global: &GlobalArgs, args: &PlanArgs) -> Result<ExitCode> {
    run(
        global,
        Mode::Plan,
        Request {
            select: args.select.clone(),
            out: args.out.as_deref(),
            saved: None,
            trust: args.trust,
        },
    )
}

pub fn run(global: &GlobalArgs, mode: Mode, request: Request<'_>) -> Result<ExitCode> {
    let identity = context::identity(global)?;
    // Compile before touching anything: a manifest error applies nothing.
    let purpose = match mode {
        Mode::Apply => context::Purpose::Apply,
        Mode::Plan => context::Purpose::Pass,
    };
    let mut stamped = context::compile_stamped(global, &identity, purpose)?;
    let catalogue = &stamped.catalogue;
    // An unknown target, or a saved plan made for another catalogue,
    // stops here: nothing was locked, observed or changed.
    let selection = Selection::resolve(catalogue, &request.select)?;
    let mut options = selection.options();
    options.fingerprints = request.out.is_some();
    options.trust_metadata = request.trust.trust_metadata;
    // A saved plan records a sensitive resource only by keyed digests.
    options.digest_key = plan_key(global, catalogue, &request)?;
    if let Some((saved, file)) = request.saved {
        saved.check_same(catalogue, &global.root, file, options.digest_key.as_ref())?;
        options.expect = Some(saved.expected()?);
    }
    let host = context::host(global, &identity, &catalogue.boundary);
    // An apply on a host that reports to a fleet server queues its report.
    let mut cost = crate::reporting::Cost::default();
    let reporting = if mode == Mode::Apply {
        cost.time("load", || Reporting::load(&host))
    } else {
        None
    };
    let lock = if mode == Mode::Apply {
        Some(RootLock::acquire(&host, global.lock_timeout).context("cannot lock the root")?)
    } else {
        None
    };
    // Compiled before the lock: a revision switched in meanwhile is not
    // taken back by applying the one it replaced.
    if mode == Mode::Apply {
        context::still_deployed(global, "applied")?;
    }
    // Fail closed: an apply without its quarantines and owed reloads could
    // undo an emergency fix; a plan only reads, and says so.
    let need = match mode {
        Mode::Apply => context::StoreNeed::Required("applied"),
        Mode::Plan => context::StoreNeed::Optional("planning"),
    };
    let mut store = context::open_store(global, need)?;
    // On a root Datum had no folder on, the compile is kept now that the
    // apply has made it beside its store (nothing before: an unknown target
    // or a stale saved plan leaves the root as it was).
    stamped.keep_compile(global);
    let catalogue = &stamped.catalogue;
    let mut backups = if mode == Mode::Apply {
        Some(context::open_backups(global)?)
    } else {
        None
    };
    let started_at = context::now();
    // Quarantined resources (by `datum check` or a person) are not applied.
    // An apply that cannot read them stops: it would apply what they hold.
    let skip = match store.as_ref().map(|s| s.quarantined()) {
        Some(Ok(q)) => datum_drift::policy::skip_set(&q, catalogue.resources.iter().map(|r| &r.id)),
        Some(Err(e)) if mode == Mode::Apply => {
            return Err(anyhow::Error::from(e)
                .context("cannot read the quarantines, so nothing was applied"));
        }
        Some(Err(e)) => {
            eprintln!(
                "warning: cannot read the quarantines ({e}); planning as if nothing were quarantined"
            );
            Default::default()
        }
        None => Default::default(),
    };
    // The sensitive paths and words the pass withholds output by, read at
    // the first output or warning, once: the fleet report's warnings ask
    // the same after the pass.
    let sensitive = datum_engine::SensitiveOnce::new(catalogue, datum_providers::registry());
    let mut ctx = PassContext {
        registry: datum_providers::registry(),
        host: &host,
        mode,
        store: store.as_mut(),
        backups: backups.as_mut(),
        now: started_at,
        skip,
        sensitive: Some(&sensitive),
    };
    let color = context::use_color(global);
    let stale = |e: datum_engine::Refused| -> anyhow::Error {
        match e {
            datum_engine::Refused::Stale(e) => {
                let file = request.saved.map_or(Path::new(""), |(_, f)| f);
                anyhow::anyhow!(
                    "the saved plan {} is stale: {e}; nothing was applied. Make a new plan with `datum plan --out FILE` and review it",
                    file.display()
                )
            }
            datum_engine::Refused::Shared(e) => anyhow::anyhow!(
                "{e}; nothing was {}",
                match mode {
                    Mode::Plan => "planned",
                    Mode::Apply => "applied",
                }
            ),
        }
    };
    let summary = match global.output {
        // Streamed resource by resource while the pass runs: the same text
        // `PassReport` renders, printed as it becomes known.
        Format::Human => {
            if let Some(banner) = selection.banner(mode) {
                writeln!(std::io::stdout(), "{banner}")?;
            }
            let mut reporter = HumanReporter::new(mode, color, global.verbose);
            let summary = datum_engine::run_pass_with(catalogue, &mut ctx, &mut reporter, &options)
                .map_err(stale)?;
            reporter.finish(&summary)?;
            if let Some(footer) = selection.footer(mode) {
                writeln!(std::io::stdout(), "{footer}")?;
            }
            if let Some(out) = request.out {
                save_plan(catalogue, global, &selection, &summary, &options, out)?;
                writeln!(
                    std::io::stdout(),
                    "Saved the plan to {}: `datum apply {}` applies exactly this plan, and refuses if the catalogue or anything it observed has changed.",
                    out.display(),
                    out.display()
                )?;
            }
            summary
        }
        // One document once the pass is over.
        Format::Json | Format::Markdown => {
            let summary = datum_engine::run_pass_with(
                catalogue,
                &mut ctx,
                &mut datum_engine::SilentReporter,
                &options,
            )
            .map_err(stale)?;
            if let Some(out) = request.out {
                save_plan(catalogue, global, &selection, &summary, &options, out)?;
            }
            let key = context::digest_key(global);
            let report = PassReport {
                host: &identity.name,
                mode,
                summary: &summary,
                key: key.as_ref(),
                verbose: global.verbose,
                selection: selection.json(),
                banner: selection.banner(mode),
                footer: selection.footer(mode),
                saved_plan: request.out,
            };
            render::print(&report, global)?;
            summary
        }
    };
    // Orphan blobs and temporaries from killed passes (we hold the lock).
    if let Some(backups) = backups.as_mut() {
        let _ = backups.gc();
    }
    let mut code = match mode {
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
            exit_code: code.code(),
        };
        let report = reporting.as_ref().map(|r| {
            cost.time("build", || {
                let mut report =
                    apply_report(global, r, &stamped, &identity, &record, &summary, store);
                // Queued only for a server that takes them
                // (`Reporting::enqueue`).
                report.warnings =
                    crate::reporting::build::pass_warnings(&summary.warnings, Some(&sensitive));
                // An apply of the whole catalogue says what it did not
                // verify: the server closes the findings of the rest
                // (queued only for a server that takes it).
                if !selection.is_partial() {
                    report.verified_except = crate::reporting::build::verified_except(
                        &summary,
                        &stamped.catalogue.resources,
                    );
                }
                report
            })
        });
        // The pass and its report in one transaction: a recorded pass has
        // its report queued, and a pass that was not recorded has none.
        let recorded = (|| -> Result<()> {
            let batch = store.batch()?;
            batch.record_pass(&record)?;
            if let (Some(r), Some(report)) = (&reporting, report) {
                cost.time("queue", || r.enqueue(&batch, report, record.finished_at))?;
            }
            batch.commit()?;
            Ok(())
        })();
        match (recorded, mode) {
            (Ok(()), _) => {}
            (Err(e), Mode::Plan) => {
                eprintln!("warning: could not record the pass in the state store: {e}");
            }
            // What this apply did is known to this run alone: the exit code
            // says so (`ExitCode::unrecorded`), not only a warning.
            (Err(e), Mode::Apply) => {
                eprintln!(
                    "error: this apply could not be recorded in the state store ({e}), so nothing keeps what it did: {}what it verified is observed as unverified again. Make room for the state store (or mend it) and run `datum apply` again",
                    if reporting.is_some() {
                        "its fleet report was not queued either, so the server does not hear of it; "
                    } else {
                        ""
                    }
                );
                code = code.unrecorded();
            }
        }
    }
    // Delivery needs no lock: another pass may start meanwhile.
    drop(lock);
    if let (Some(r), Some(store)) = (&reporting, &mut store) {
        cost.time("hand_off", || {
            crate::reporting::after_pass(r, global, store)
        });
        cost.log();
    }
    // The catalogue and the pass's summary go with the process, which ends
    // next (`main`): freed one allocation at a time, 20,000 Files' took
    // 5-6 ms nobody waits for. Plain data both, nothing to close or flush.
    drop(sensitive);
    std::mem::forget(summary);
    std::mem::forget(stamped);
    Ok(code)
}

/// The digest key a saved plan needs: none unless one is saved or applied
/// and the catalogue has a sensitive resource (whose hash and observed
/// fingerprint the plan records only keyed, see `saved_plan`).
///
/// Saving one, the key is made where there is none yet, with the state
/// folder if need be: a plan is saved to be applied on this host, whose
/// key the apply reads again. When no key can be had (a root this user
/// cannot write), the plan is refused, before anything is observed,
/// rather than saved with checksums a guessed secret could be tested
/// against. Applying one, the key must be there: one made since the plan
/// was saved makes the sensitive resources "changed" (refused as stale).
fn plan_key(
    global: &GlobalArgs,
    catalogue: &datum_catalog::Catalogue,
    request: &Request<'_>,
) -> Result<Option<datum_core::DigestKey>> {
    if request.out.is_none() && request.saved.is_none() {
        return Ok(None);
    }
    let sensitive = super::saved_plan::sensitive_ids(catalogue);
    let Some(first) = sensitive.first() else {
        return Ok(None);
    };
    let more = match sensitive.len() {
        1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    if let Some(out) = request.out {
        return context::digest_key_created(global).map(Some).with_context(|| {
            format!(
                "no plan was saved to {}: {first}{more} is sensitive, and a saved plan records a sensitive resource only by this host's keyed digest (a plain checksum would let whoever reads the file confirm a guessed secret), but this host's digest key cannot be read or made",
                out.display()
            )
        });
    }
    match context::digest_key(global) {
        Some(key) => Ok(Some(key)),
        None => {
            let file = request.saved.map_or(Path::new(""), |(_, f)| f);
            anyhow::bail!(
                "the saved plan {} cannot be checked: {first}{more} is sensitive, recorded only by this host's keyed digest, and this host's digest key cannot be read; nothing was applied. Make a new plan with `datum plan --out FILE` and review it",
                file.display()
            )
        }
    }
}

/// Writes `datum plan --out FILE`. A plan that could not observe some
/// resource (exit 1) is not saved: there is nothing exact to apply.
fn save_plan(
    catalogue: &datum_catalog::Catalogue,
    global: &GlobalArgs,
    selection: &Selection,
    summary: &datum_engine::PassSummary,
    options: &datum_engine::PassOptions,
    out: &Path,
) -> Result<()> {
    if plan_exit(summary) == ExitCode::ERROR {
        anyhow::bail!(
            "some resources could not be observed, so no plan was saved to {}",
            out.display()
        );
    }
    SavedPlan::new(
        catalogue,
        &global.root,
        selection,
        summary,
        std::time::SystemTime::now(),
        options.digest_key.as_ref(),
    )?
    .write(out)
}

/// The fleet report of an apply.
fn apply_report(
    global: &GlobalArgs,
    reporting: &Reporting,
    stamped: &context::Stamped,
    identity: &datum_catalog::HostIdentity,
    record: &datum_store::PassRecord,
    summary: &datum_engine::PassSummary,
    store: &datum_store::Store,
) -> datum_fleet::Report {
    use crate::reporting::build;
    let catalogue = &stamped.catalogue;
    let classes = datum_drift::classes::Classes::parse(&stamped.classes)
        .or_else(|_| datum_drift::classes::Classes::parse(&serde_json::Value::Null));
    let mut per_class = std::collections::BTreeMap::new();
    for r in &catalogue.resources {
        *per_class.entry(r.class.clone()).or_insert(0u64) += 1;
    }
    let stated = reporting.interval();
    let (bounds, expected) = match &classes {
        Ok(c) => crate::reporting::class_bounds(c, &per_class, Some(store), stated),
        Err(_) => (Vec::new(), stated.map_or(3600, |d| d.as_secs())),
    };
    let common = build::Common {
        kind: datum_fleet::ReportKind::Apply,
        host: identity.name.clone(),
        labels: identity.labels.clone(),
        revision: crate::reporting::revision::repository_revision(
            &global.repo,
            stamped.revision.as_deref(),
        ),
        catalogue: build::catalogue_hash(
            catalogue
                .resources
                .iter()
                .map(|r| (r.id.to_string(), r.declaration_hash.as_str())),
        ),
        started_at: record.started_at,
        finished_at: record.finished_at,
        duration_ms: record.duration_ms,
        exit_code: record.exit_code,
        resources: catalogue.resources.len() as u64,
        classes: bounds,
        expected_interval_s: expected,
    };
    // The versions of the validators that ran (a pass that changed or
    // failed nothing ran none, and asks no binary for its version).
    let mut versions = std::collections::BTreeMap::new();
    let by_id: std::collections::HashMap<&datum_core::ResourceId, &datum_core::Resource> =
        catalogue.resources.iter().map(|r| (&r.id, r)).collect();
    for r in &summary.resources {
        if !matches!(
            r.outcome,
            datum_core::Outcome::Changed { .. } | datum_core::Outcome::Failed { .. }
        ) {
            continue;
        }
        if let Some(name) = by_id.get(&r.id).and_then(|x| x.validate.as_deref())
            && !versions.contains_key(name)
            && let Some(def) = datum_providers::validators::lookup(name)
        {
            let version = datum_providers::validators::validator_version(def)
                .unwrap_or_else(|| "built in".to_owned());
            versions.insert(name.to_owned(), version);
        }
    }
    build::apply_report(
        &common,
        summary,
        &catalogue.resources,
        versions,
        &global.root.to_string_lossy(),
    )
}

/// A plan's exit code says one thing each: 0 nothing to do, 2 changes
/// pending, 4 some change would fail (validation, a missing validator
/// binary, what the apply is certain to refuse, a resource blocked by one
/// that would fail), 6 both; 1 when a resource could not even be observed
/// (nothing exact to plan). A quarantine, and what it holds back, is no
/// failure.
fn plan_exit(summary: &datum_engine::PassSummary) -> ExitCode {
    use datum_core::{Outcome, Phase};
    let unobservable = summary.resources.iter().any(|r| {
        matches!(
            r.outcome,
            Outcome::Failed {
                phase: Phase::Observe,
                ..
            }
        )
    });
    if unobservable {
        return ExitCode::ERROR;
    }
    ExitCode::for_apply(summary.any_changed(), summary.any_failed())
}
