//! `datum quarantine Kind/name --reason TEXT` and `datum release Kind/name`
//! (or `--host`): a person's break-glass switch. A quarantined resource is
//! skipped by apply (its dependents blocked) and never reverted by a check;
//! a person's quarantine is never downgraded by an automatic one.
//!
//! A name the catalogue does not declare is refused (exit 1, naming it and
//! the closest declared name): a typo must not look like a quarantine that
//! protects something. Releasing a quarantine that outlived its
//! declaration (the resource left the repository) stays possible.
//!
//! A quarantine is recorded at once, then waits (up to `--lock-timeout`)
//! for the root lock: a pass already running read the quarantines before
//! it and may still write the resource, so the command returns once it
//! has ended (or warns that it has not).
//!
//! Must not: touch the host (only the state store, and the root lock).

use std::io::Write;

use anyhow::{Context as _, Result, bail};
use clap::Args;
use datum_core::ResourceId;
use datum_host::lock::RootLock;
use datum_report::render::Answer;
use datum_report::style::Paint;
use datum_store::{QuarantineSource, QuarantineTarget};

use crate::cli::GlobalArgs;
use crate::context;
use crate::exit::ExitCode;

#[derive(Debug, Args)]
pub struct QuarantineArgs {
    /// The resource, as Kind/name.
    pub name: Option<String>,
    /// Quarantine the whole host instead.
    #[arg(long)]
    pub host: bool,
    /// Why (shown by every check until release).
    #[arg(long)]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The resource, as Kind/name.
    pub name: Option<String>,
    /// Release the host's quarantine.
    #[arg(long)]
    pub host: bool,
}

fn target(name: Option<&str>, host: bool) -> Result<QuarantineTarget> {
    match (name, host) {
        (Some(_), true) => bail!("name a resource or give --host, not both"),
        (None, false) => bail!("name a resource (Kind/name) or give --host"),
        (None, true) => Ok(QuarantineTarget::Host),
        (Some(n), false) => Ok(QuarantineTarget::Resource(ResourceId::parse(n)?)),
    }
}

/// Refuses a resource the catalogue for this host does not declare.
fn declared(global: &GlobalArgs, id: &ResourceId) -> Result<()> {
    let identity = context::identity(global)?;
    let catalogue = context::compile(global, &identity)
        .with_context(|| format!("cannot check that {id} is declared"))?;
    if catalogue.resources.iter().any(|r| &r.id == id) {
        return Ok(());
    }
    let names: Vec<String> = catalogue
        .resources
        .iter()
        .map(|r| r.id.to_string())
        .collect();
    let wanted = id.to_string();
    let hint = datum_manifest::suggest::closest(&wanted, names.iter().map(String::as_str))
        .map(|c| format!("; did you mean {c}?"))
        .unwrap_or_default();
    bail!(
        "{id} is not declared in the catalogue for host {}{hint}",
        identity.name
    )
}

/// The JSON form of a target: `{"host": true}` or `{"resource": "File[x]"}`.
fn target_json(t: &QuarantineTarget) -> serde_json::Value {
    match t {
        QuarantineTarget::Host => serde_json::json!({"host": true, "resource": null}),
        QuarantineTarget::Resource(id) => {
            serde_json::json!({"host": false, "resource": id.to_string()})
        }
    }
}

fn shown(t: &QuarantineTarget) -> String {
    match t {
        QuarantineTarget::Host => "the host".to_owned(),
        QuarantineTarget::Resource(id) => id.to_string(),
    }
}

pub fn release(global: &GlobalArgs, args: &ReleaseArgs) -> Result<ExitCode> {
    let target = target(args.name.as_deref(), args.host)?;
    if !context::StateFiles::of(global).exists() {
        bail!("no state store: nothing is quarantined");
    }
    let mut store = context::open_store(global, context::StoreNeed::Required("released"))?
        .context("the state store could not be opened")?;
    if let QuarantineTarget::Resource(id) = &target
        && store.quarantine_of(&target)?.is_none()
    {
        declared(global, id)?;
    }
    if store.release(&target)? {
        crate::render::emit(&Released(target), global)?;
        Ok(ExitCode::Clean)
    } else {
        bail!("{} is not quarantined", shown(&target))
    }
}

pub fn quarantine(global: &GlobalArgs, args: &QuarantineArgs) -> Result<ExitCode> {
    let target = target(args.name.as_deref(), args.host)?;
    if let QuarantineTarget::Resource(id) = &target {
        declared(global, id)?;
    }
    let mut store = context::open_store(global, context::StoreNeed::Required("quarantined"))?
        .context("the state store could not be opened")?;
    store.quarantine(
        &target,
        &args.reason,
        QuarantineSource::Person,
        context::now(),
    )?;
    drop(store);
    // Every pass that starts from now on skips it; one already running
    // (an apply, the agent's reconcile) read the quarantines when it began
    // and may still write it. Waiting for the root lock waits for that
    // pass, so that once this returns, nothing Datum runs changes what the
    // person is about to change by hand.
    let host = datum_host::Host::new(global.root.clone());
    if let Err(e) = RootLock::acquire(&host, global.lock_timeout) {
        eprintln!(
            "warning: quarantined {}, but a pass that began before it may still change it: {e}; wait until it ends before changing it by hand",
            shown(&target)
        );
    }
    let answer = Quarantined {
        target,
        reason: &args.reason,
    };
    crate::render::emit(&answer, global)?;
    Ok(ExitCode::Clean)
}

/// A quarantine a person recorded.
struct Quarantined<'a> {
    target: QuarantineTarget,
    reason: &'a str,
}

impl Answer for Quarantined<'_> {
    fn what(&self) -> &'static str {
        "datum quarantine"
    }

    fn json_key(&self) -> &'static str {
        "quarantine"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        let mut doc = target_json(&self.target);
        doc["quarantined"] = serde_json::json!(true);
        doc["reason"] = serde_json::json!(self.reason);
        doc["source"] = serde_json::json!("person");
        Ok(doc)
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        writeln!(
            out,
            "quarantined {}: excluded from apply and never reverted until `datum release`",
            shown(&self.target)
        )
    }
}

/// A quarantine released.
struct Released(QuarantineTarget);

impl Answer for Released {
    fn what(&self) -> &'static str {
        "datum release"
    }

    fn json_key(&self) -> &'static str {
        "release"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        let mut doc = target_json(&self.0);
        doc["released"] = serde_json::json!(true);
        Ok(doc)
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        writeln!(out, "released {}", shown(&self.0))
    }
}
