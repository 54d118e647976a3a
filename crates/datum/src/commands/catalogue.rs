//! `datum catalogue`: the compiled catalogue for this host, as JSON.

use std::io::Write;

use anyhow::Result;
use clap::Args;

use crate::cli::GlobalArgs;
use crate::context;
use crate::exit::ExitCode;

#[derive(Debug, Args)]
pub struct CatalogueArgs {
    /// Say which layer and file each field came from.
    #[arg(long)]
    pub explain: bool,
}

pub fn run(global: &GlobalArgs, args: &CatalogueArgs) -> Result<ExitCode> {
    let identity = context::identity(global)?;
    let catalogue = context::compile_with(global, &identity, args.explain)?;
    // Streamed: a catalogue of 20,000 resources is never one JSON value.
    crate::render::json::begin();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    // A Tree's declared Merkle root: what `datum fingerprint PATH` prints
    // for the tree once applied (and what its fleet reports compare).
    let host = context::host(global, &identity, &catalogue.boundary);
    // The kinds this binary ships: the one registry every command uses.
    let registry = datum_providers::registry();
    let key = context::digest_key(global);
    let fingerprint = |r: &datum_core::Resource| {
        let Some(fingerprints) = registry.lookup(&r.id.kind).and_then(|p| p.fingerprints()) else {
            return Vec::new();
        };
        let declared = fingerprints.declared(&host, r).ok();
        if r.sensitive {
            // The root of a secret's tree is a checksum of its content:
            // `datum fingerprint` of a guessed folder would confirm the
            // guess. Keyed with the host's key (as a File's
            // `content_digest`), or nothing.
            let digest = declared.and_then(|hash| key.as_ref().map(|k| k.digest(&hash)));
            vec![
                ("fingerprint".to_owned(), serde_json::Value::Null),
                ("fingerprint_digest".to_owned(), serde_json::json!(digest)),
            ]
        } else {
            vec![("fingerprint".to_owned(), serde_json::json!(declared))]
        }
    };
    catalogue.write_json_pretty_with(
        registry,
        args.explain,
        &fingerprint,
        key.as_ref(),
        &mut out,
    )?;
    writeln!(out)?;
    out.flush()?;
    Ok(ExitCode::Clean)
}
