//! `datum check` and `datum reconcile`: load the catalogue, run one check
//! of it (`datum_check::run`), print the report.
//!
//! `check` only looks: it changes nothing on the host and takes no policy
//! decision (no revert, no acceptance, no quarantine, no flap count); per
//! finding it says what the class's policy would do ("would revert"). It
//! records its history (passes, findings, inspection times) when a state
//! store exists. `reconcile` is the deliberate act: a class whose policy is
//! `revert` is reverted through the engine's normal apply pass (validators
//! included), after the drifted content is saved in the backup store. This
//! front-end owns what is the command's: compiling the repository (or
//! reusing its snapshot), the root lock, which store a run needs, and the
//! output (human, JSON, `--markdown`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use clap::Args;
use datum_catalog::snapshot::Summaries;
use datum_drift::classes::Classes;
use datum_host::lock::RootLock;

use crate::cli::GlobalArgs;
use crate::context;
use crate::exit::ExitCode;
pub use datum_check::Act;
use datum_check::{CheckError, Checked, Checking};

/// A sampling fraction: a number from 0 to 1. Anything else (1.5, NaN, a
/// typo) is refused: NaN compared false and meant "never read content".
fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        Ok(_) => Err(format!("`{text}` is not a fraction from 0 to 1")),
        Err(e) => Err(format!("`{text}` is not a number: {e}")),
    }
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Also write the report as Markdown to FILE (for an issue tracker).
    #[arg(long, value_name = "FILE", value_parser = crate::cli::absolute_path)]
    pub markdown: Option<PathBuf>,
    /// Deep-check this host only when hash(host, seed) falls under FRACTION (0..1); metadata otherwise.
    #[arg(long, value_name = "FRACTION", value_parser = parse_fraction)]
    pub sample: Option<f64>,
    /// Seed of this pass for --sample (share it across a fleet; a new one
    /// each pass). Required with a fraction between 0 and 1.
    #[arg(long)]
    pub pass_seed: Option<u64>,
    /// Check only the resources of this class.
    #[arg(long)]
    pub class: Option<String>,
    /// Where policy `accept` writes patches (default ROOT/var/lib/datum/accepted).
    #[arg(long)]
    pub patch_dir: Option<PathBuf>,
}

pub fn run(global: &GlobalArgs, args: &CheckArgs, act: Act) -> Result<ExitCode> {
    let started = Instant::now();
    // One seed at every pass would read the same hosts at every pass, and a
    // host outside the sample never: each pass needs its own.
    let pass_seed = match (args.sample, args.pass_seed) {
        (Some(fraction), None) if fraction > 0.0 && fraction < 1.0 => bail!(
            "--sample {fraction} needs --pass-seed N, a new seed for each pass (shared across the fleet): with one seed every pass reads the same hosts, and a host outside the sample is never read"
        ),
        (_, seed) => seed.unwrap_or(0),
    };
    let identity = context::identity(global)?;
    // The snapshot of the last compile when the repository has not changed
    // since (a quiet host's check does not parse 20,000 documents again);
    // resources are decoded only when they are inspected. The store is
    // opened (or created) only once the repository has compiled, so that a
    // check of a broken repository leaves nothing behind.
    let (lazy, provenance) = context::compiled(global, &identity, "checked")?;
    let host = context::host(global, &identity, &lazy.boundary);
    let classes = load_classes(&lazy.classes, &lazy.entries)?;
    // A class no one has (a typo) would check nothing and say "no drift".
    if let Some(wanted) = args.class.as_deref()
        && !classes.classes.contains_key(wanted)
        && !lazy.entries.iter().any(|e| e.class == wanted)
    {
        let known: Vec<&str> = classes.classes.keys().map(String::as_str).collect();
        bail!(
            "--class {wanted}: no class of that name is declared in datum.yaml `classes:` and no resource names it (classes: {})",
            known.join(", ")
        );
    }
    // A reconcile that would act (revert, accept, quarantine) needs the
    // store and refuses without it, like apply; a check (or a reconcile of
    // report-only classes) goes on read-only without one, recording nothing.
    let acts = act == Act::Reconcile
        && lazy
            .entries
            .iter()
            .filter(|e| args.class.as_deref().is_none_or(|c| c == e.class))
            .any(|e| classes.get(e.class).acts());
    let take_lock = |create: bool| -> Result<Option<RootLock>> {
        let taken = if create {
            RootLock::acquire(&host, global.lock_timeout).map(Some)
        } else {
            RootLock::acquire_if_present(&host, global.lock_timeout)
        };
        taken.context("cannot lock the root")
    };
    let (lock, mut store, without_store) = if acts {
        // Locked first, as an apply, which may make the store.
        let lock = take_lock(true)?;
        // Compiled before the lock: a revert must not take the host back
        // to a revision `datum pull` replaced meanwhile.
        context::still_deployed(global, "reconciled")?;
        let store = context::open_store(global, context::StoreNeed::Required("reconciled"))?;
        (lock, store, datum_check::WithoutStore::NotMade)
    } else {
        // Read-only without a usable store, and then it writes nothing: not
        // the lock, nor Datum's folder for it, on a root Datum never set up
        // or beside a store it refuses (the lock is still taken where an
        // apply made it, so no apply runs under the check). Locked before
        // the store is opened, as an apply: a store opened while an apply
        // runs may be the one it moves aside (`--rebuild-state`), and the
        // check would record into that.
        let lock = take_lock(false)?;
        let store = context::open_optional_store(global, "checking (report only)");
        let lock = match (lock, &store) {
            // A store without the lock file (removed by hand): made, as
            // beside any store in use.
            (None, context::OptionalStore::Open(_)) => take_lock(true)?,
            (lock, _) => lock,
        };
        let without = store.without_store();
        (lock, store.into_store(), without)
    };
    let lazy_len = lazy
        .entries
        .iter()
        .filter(|e| args.class.as_deref().is_none_or(|c| c == e.class))
        .count() as u64;
    let options = datum_check::Options {
        class: args.class.clone(),
        sample: args.sample,
        pass_seed,
        patch_dir: args.patch_dir.clone(),
    };
    let key = context::digest_key(global);
    let checked = datum_check::run(Checking {
        registry: datum_providers::registry(),
        repo: &global.repo,
        layers: context::layers_used(global, &identity),
        options: &options,
        act,
        identity: &identity,
        catalogue: lazy,
        catalogue_reused: provenance == context::Provenance::Snapshot,
        classes: &classes,
        host: &host,
        without_store,
        store: store.as_mut(),
        backups: &|| context::open_backups(global).map_err(Into::into),
        started,
        progress: crate::render::progress::resources(global.output, lazy_len),
        digest_key: key.as_ref(),
        // Which resources are sensitive is known only as the check decodes
        // them: it makes its own.
        sensitive: None,
    });
    let Checked {
        report,
        conclusion,
        reporting,
    } = match checked {
        Ok(checked) => checked,
        Err(CheckError::Snapshot(e)) => {
            // Damaged after it was checked: the next check compiles.
            context::forget_snapshot(global);
            bail!("{}", CheckError::Snapshot(e));
        }
        Err(CheckError::Repository(diagnostics)) => {
            return Err(context::repository_errors(global, diagnostics, "checked"));
        }
        Err(e) => return Err(e.into()),
    };
    let exit = ExitCode::from(conclusion);
    if let Some(path) = &args.markdown {
        // Never through a link planted at the report's name.
        datum_host::named::write_report(path, datum_drift::check::markdown(&report).as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    crate::render::print(&report, global)?;
    // Delivery needs no lock: another pass may start meanwhile.
    drop(lock);
    if let (Some(r), Some(store)) = (&reporting, store.as_mut()) {
        crate::reporting::after_pass(r, global, store);
    }
    Ok(exit)
}

/// The classes of `datum.yaml`, and every resource's class checked against
/// them.
fn load_classes(settings: &serde_json::Value, entries: &Summaries) -> Result<Classes> {
    let classes = match Classes::parse(settings) {
        Ok(c) => c,
        Err(errors) => {
            let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
            bail!("{}", lines.join("\n"));
        }
    };
    let unknown = classes.unknown_classes(entries.iter().map(|e| (e.id.to_string(), e.class)));
    if !unknown.is_empty() {
        let lines: Vec<String> = unknown
            .iter()
            .map(|(at, class)| {
                format!("{at}: class `{class}` is not declared in datum.yaml `classes:`")
            })
            .collect();
        bail!("{}", lines.join("\n"));
    }
    Ok(classes)
}

#[cfg(test)]
mod tests {
    use super::parse_fraction;

    #[test]
    fn a_sample_is_a_fraction_from_0_to_1() {
        for ok in ["0", "1", "0.25", "1.0"] {
            assert!(parse_fraction(ok).is_ok(), "{ok}");
        }
        for bad in ["1.5", "7", "-0.1", "nan", "NaN", "inf", "0,5", ""] {
            assert!(parse_fraction(bad).is_err(), "{bad}");
        }
    }
}
