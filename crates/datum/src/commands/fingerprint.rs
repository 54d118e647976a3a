//! `datum fingerprint PATH`: a tree's Merkle root hash (native by default;
//! `--compat` is byte for byte the specification's reference function).
//!
//! The path is taken as given, not under `--root`: it fingerprints any tree
//! (a host's, a repository folder, a benchmark estate). Must not: contain
//! fingerprint logic (that is `datum_fingerprint` and `datum_host::tree_scan`).

use std::io::Write;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Args;
use datum_fingerprint::{Algorithm, Digest, Exclusions};
use datum_host::tree_scan::{ScanOptions, ScannedTree, scan_dir, scan_root_dir};
use datum_report::render::Answer;
use datum_report::style::Paint;

use crate::cli::GlobalArgs;
use crate::exit::ExitCode;

#[derive(Debug, Args)]
pub struct FingerprintArgs {
    /// The tree to fingerprint.
    pub path: PathBuf,
    /// The specification's reference algorithm (SHA-256), byte for byte.
    #[arg(long)]
    pub compat: bool,
    /// Leave out entries matching this gitignore rule (repeatable).
    #[arg(long)]
    pub exclude: Vec<String>,
    /// Hashing threads (0: automatic).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

pub fn run(global: &GlobalArgs, args: &FingerprintArgs) -> Result<ExitCode> {
    let exclude = if args.exclude.is_empty() {
        None
    } else {
        Some(Exclusions::new(&args.exclude).context("bad --exclude rule")?)
    };
    let opts = ScanOptions {
        algorithm: if args.compat {
            Algorithm::Compat
        } else {
            Algorithm::Native
        },
        exclude,
        threads: args.threads,
        progress: None,
    };
    // The tree the path names, a link there followed as the reference
    // function's `os.listdir` does (entries inside are never followed); a
    // path that is not a folder has no tree, and the reference fails on it.
    let root = datum_host::named::open_dir(&args.path).with_context(|| {
        format!(
            "cannot fingerprint {}: not a directory (or not readable as one)",
            args.path.display()
        )
    })?;
    let bar = crate::render::progress::hashing(global.output);
    // Without -v only the root hash is printed: `scan_root_dir` keeps no tree, so memory
    // does not grow with the number of files. Listing every entry (parents first) needs
    // every hash before the first line, so -v keeps the whole fingerprinted tree.
    let scanned = if global.verbose {
        scan_dir(root.as_fd(), &args.path, &opts).map(|tree| (tree.root_hash(), Some(tree)))
    } else {
        scan_root_dir(root.as_fd(), &args.path, &opts).map(|root| (root.hash, None))
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let (root_hash, tree) =
        scanned.with_context(|| format!("cannot fingerprint {}", args.path.display()))?;
    let answer = Fingerprinted {
        path: &args.path,
        compat: args.compat,
        root_hash,
        tree,
    };
    crate::render::emit(&answer, global)?;
    Ok(ExitCode::Clean)
}

/// A tree's root hash, and with -v every entry's.
struct Fingerprinted<'a> {
    path: &'a Path,
    compat: bool,
    root_hash: Digest,
    tree: Option<ScannedTree>,
}

impl Answer for Fingerprinted<'_> {
    fn what(&self) -> &'static str {
        "datum fingerprint"
    }

    fn json_key(&self) -> &'static str {
        "fingerprint"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        let mut doc = serde_json::json!({
            "path": self.path,
            "algorithm": if self.compat { "compat" } else { "native" },
            "fingerprint": self.root_hash.to_string(),
        });
        if let Some(scanned) = &self.tree {
            let entries: Vec<serde_json::Value> = scanned
                .tree
                .walk()
                .into_iter()
                .map(|(path, node)| {
                    let shown = if path.as_os_str().is_empty() {
                        ".".to_owned()
                    } else {
                        path.display().to_string()
                    };
                    serde_json::json!({"path": shown, "hash": node.hash.to_string()})
                })
                .collect();
            doc["entries"] = serde_json::json!(entries);
        }
        Ok(doc)
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        if let Some(scanned) = &self.tree {
            for (path, node) in scanned.tree.walk() {
                // A name is shown, never obeyed by the terminal.
                let shown = if path.as_os_str().is_empty() {
                    ".".to_owned()
                } else {
                    datum_core::text::visible(&path.display().to_string(), &[]).into_owned()
                };
                writeln!(out, "{}  {shown}", node.hash)?;
            }
        }
        writeln!(out, "{}", self.root_hash)
    }
}
