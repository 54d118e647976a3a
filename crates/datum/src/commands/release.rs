//! `datum quarantine Kind/name --reason TEXT` and `datum release Kind/name`
//! (or `--host`): a person's break-glass switch. A quarantined resource is
//! skipped by apply (its dependents blocked) and never reverted by a check;
//! a person's quarantine is never downgraded by an automatic one.
//!
//! Must not: touch the host (only the state store).

use anyhow::{Context as _, Result, bail};
use datum_core::ResourceId;
use datum_store::{QuarantineSource, QuarantineTarget};

use crate::cli::{GlobalArgs, OutputFormat, QuarantineArgs, ReleaseArgs};
use crate::context;
use crate::exit::ExitCode;

fn target(name: Option<&str>, host: bool) -> Result<QuarantineTarget> {
    match (name, host) {
        (Some(_), true) => bail!("name a resource or give --host, not both"),
        (None, false) => bail!("name a resource (Kind/name) or give --host"),
        (None, true) => Ok(QuarantineTarget::Host),
        (Some(n), false) => Ok(QuarantineTarget::Resource(ResourceId::parse(n)?)),
    }
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
    if store.release(&target)? {
        if global.output == OutputFormat::Json {
            let mut doc = target_json(&target);
            doc["released"] = serde_json::json!(true);
            crate::render::json::print("release", doc)?;
        } else {
            println!("released {}", shown(&target));
        }
        Ok(ExitCode::CLEAN)
    } else {
        bail!("{} is not quarantined", shown(&target))
    }
}

pub fn quarantine(global: &GlobalArgs, args: &QuarantineArgs) -> Result<ExitCode> {
    let target = target(args.name.as_deref(), args.host)?;
    let mut store = context::open_store(global, context::StoreNeed::Required("quarantined"))?
        .context("the state store could not be opened")?;
    store.quarantine(
        &target,
        &args.reason,
        QuarantineSource::Person,
        context::now(),
    )?;
    if global.output == OutputFormat::Json {
        let mut doc = target_json(&target);
        doc["quarantined"] = serde_json::json!(true);
        doc["reason"] = serde_json::json!(args.reason);
        doc["source"] = serde_json::json!("person");
        crate::render::json::print("quarantine", doc)?;
    } else {
        println!(
            "quarantined {}: excluded from apply and never reverted until `datum release`",
            shown(&target)
        );
    }
    Ok(ExitCode::CLEAN)
}
