//! `datum bundle`: a revision and its history in one file, carried to a host
//! without git access and deployed there with `datum pull --bundle FILE`,
//! which verifies it like any fetch.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use datum_pull::bundle::BundleRequest;

use datum_report::render::Answer;
use datum_report::style::Paint;

use crate::cli::GlobalArgs;
use crate::exit::ExitCode;

#[derive(Debug, Args)]
pub struct BundleArgs {
    /// The git repository to bundle from (a work tree or a bare repository).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub from: PathBuf,
    /// The branch or tag to bundle (the host pulls it with the same --ref).
    #[arg(long = "ref", value_name = "BRANCH_OR_TAG", default_value = "main")]
    pub git_ref: String,
    /// Leave out the history of this revision (one the host has deployed).
    #[arg(long, value_name = "REVISION")]
    pub since: Option<String>,
    /// The bundle file to write.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

pub fn run(global: &GlobalArgs, args: &BundleArgs) -> Result<ExitCode> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let made = datum_pull::bundle::create(&BundleRequest {
        // Components drop the `.` of `--from .`, so messages name the folder.
        repository: cwd.join(&args.from).components().collect(),
        git_ref: args.git_ref.clone(),
        since: args.since.clone(),
        output: cwd.join(&args.file),
    })?;
    crate::render::emit(&Written(made), global)?;
    Ok(ExitCode::Clean)
}

/// The bundle written.
struct Written(datum_pull::bundle::Bundled);

impl Answer for Written {
    fn what(&self) -> &'static str {
        "datum bundle"
    }

    fn json_key(&self) -> &'static str {
        "bundle"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        let made = &self.0;
        Ok(serde_json::json!({
            "revision": made.revision,
            "ref": made.git_ref,
            "output": made.output,
            "bytes": made.bytes,
        }))
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        let made = &self.0;
        writeln!(
            out,
            "wrote {} ({} at {}, {} bytes); on the host: datum pull --bundle FILE --ref {}",
            made.output.display(),
            made.git_ref,
            datum_pull::commit::short(&made.revision),
            made.bytes,
            made.git_ref
        )
    }
}
