//! `datum init [DIR]`: a new repository that lints clean, with the next steps.
//!
//! Writes `datum.yaml` (a `base` layer for every host and a `web` layer for
//! hosts labelled `role: web`, one class), a base layer with one harmless
//! resource (a note in `/etc/datum`, Datum's own folder, and that folder), a web layer
//! with nothing in it yet, and `hosts/NAME.yaml` for this machine. Nothing is
//! overwritten: an existing file stops it before anything is written.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;

use datum_report::render::Answer;
use datum_report::style::Paint;

use crate::cli::GlobalArgs;
use crate::exit::ExitCode;

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where to create it (default: --repo). Created if missing; an existing repository is refused.
    pub dir: Option<PathBuf>,
    /// The host file to write, hosts/NAME.yaml (default: this host's name).
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
}

const DATUM_YAML: &str = "\
# A Datum repository. Layers apply in order, later ones override earlier
# ones; a host gets every layer whose `match` its labels satisfy.
# Reference: the Manifest reference in Datum's README.
datum: v1alpha1
layers:
  - name: base
    path: base
    match: {}           # every host
  - name: web
    path: web
    match: {role: web}  # hosts labelled role=web
classes:
  # `datum check` looks at a class on its own schedule; `watch: true`
  # notices changes within a second under `datum agent`.
  critical: {interval: 5m, watch: true, policy: report}
";

const BASE_NOTE: &str = "\
# The base layer: every host gets what is declared here.
datum: v1alpha1
type: Directory
name: datum-etc
desired:
  path: /etc/datum
  owner: root
  group: root
  mode: \"0755\"
---
datum: v1alpha1
type: File
name: datum-note
class: critical
requires: [Directory/datum-etc]
desired:
  path: /etc/datum/MANAGED
  owner: root
  group: root
  mode: \"0644\"
  content: |
    This host is managed by Datum. Change the repository, not this file:
    `datum check` reports a change made here, and its class's policy decides
    what happens to it.
";

const WEB_README: &str = "\
# The web layer: hosts labelled `role: web` get what is declared here, on
# top of the base layer. Add manifests (*.yaml) next to this file, e.g. a
# File with `validate: nginx`.
";

/// The repository's files, relative to its folder.
fn files(host: &str) -> Vec<(String, String)> {
    vec![
        ("datum.yaml".into(), DATUM_YAML.into()),
        ("base/note.yaml".into(), BASE_NOTE.into()),
        ("web/README".into(), WEB_README.into()),
        (
            format!("hosts/{host}.yaml"),
            format!(
                "# This machine's identity: install it as /etc/datum/host.yaml, or pass\n\
                 # --host-file. Labels choose layers; `datum lint --all-hosts` renders\n\
                 # every host in this folder.\n\
                 # Add `role: web` to the labels to get the web layer.\n\
                 name: {host}\nlabels: {{}}\n"
            ),
        ),
    ]
}

pub fn run(global: &GlobalArgs, args: &InitArgs) -> Result<ExitCode> {
    let dir: PathBuf = args.dir.clone().unwrap_or_else(|| global.repo.clone());
    // Named in full in every message, as `git init` names its folder: a
    // relative DIR read back later, or in a log, says nothing of where.
    let dir = std::path::absolute(&dir)
        .with_context(|| format!("cannot make {} absolute", dir.display()))?;
    if crate::context::is_repository(&dir) {
        bail!(
            "{}: already a Datum repository (datum.yaml exists); nothing was written",
            dir.display()
        );
    }
    let host = match &args.host {
        Some(h) => h.clone(),
        None => match crate::context::identity(global) {
            Ok(identity) => identity.name,
            // This machine's name breaks the rule: --host is the way out
            // here, not a host file.
            Err(e) => match e.downcast_ref::<datum_catalog::HostError>() {
                Some(datum_catalog::HostError::BadFallbackName { name, from, .. }) => bail!(
                    "`{name}` (read from {}) cannot name a host: give --host NAME ({}); nothing was written",
                    from.display(),
                    datum_core::host_name::RULE
                ),
                _ => return Err(e),
            },
        },
    };
    // The rule the host file is read with (and `datum server enroll`).
    if !datum_core::host_name::is_valid(&host) {
        bail!(
            "`{}` cannot name a host: give --host NAME ({})",
            datum_core::text::visible(&host, &[]),
            datum_core::host_name::RULE
        );
    }
    let files = files(&host);
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    datum_host::named::create_new_files(&dir, &refs)
        .with_context(|| format!("cannot create the repository in {}", dir.display()))?;
    // The folder exists now: its real path, without `..` or links on the way.
    let dir = datum_host::repo::canonicalize(&dir).unwrap_or(dir);
    // What was written must lint clean, for this host too.
    let identity = datum_catalog::HostIdentity::load(
        Path::new("/"),
        Some(&dir.join(format!("hosts/{host}.yaml"))),
        &[],
    )?;
    let diagnostics = datum_catalog::lint(&dir, Some(&identity));
    if diagnostics.error_count() != 0 {
        eprint!("{}", diagnostics.render(false));
        bail!("the new repository does not lint clean (a bug in datum init)");
    }
    let answer = Created {
        dir: &dir,
        host: &host,
        files: &files,
    };
    crate::render::emit(&answer, global)?;
    Ok(ExitCode::Clean)
}

/// The repository made, and the next steps.
struct Created<'a> {
    dir: &'a Path,
    host: &'a str,
    /// Its files (path, text), relative to `dir`.
    files: &'a [(String, String)],
}

impl Answer for Created<'_> {
    fn what(&self) -> &'static str {
        "datum init"
    }

    fn json_key(&self) -> &'static str {
        ""
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        Ok(serde_json::json!({
            "repository": self.dir,
            "host": self.host,
            "files": self.files.iter().map(|(p, _)| p).collect::<Vec<_>>(),
        }))
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        let (d, host) = (self.dir.display(), self.host);
        writeln!(out, "created a Datum repository in {d}:")?;
        for (p, _) in self.files {
            writeln!(out, "  {p}")?;
        }
        writeln!(
            out,
            "\nnext:\n  datum --repo {d} lint --all-hosts\n  \
             datum --repo {d} --host-file {d}/hosts/{host}.yaml plan\n  \
             sudo datum --repo {d} --host-file {d}/hosts/{host}.yaml apply\n  \
             sudo datum --repo {d} --host-file {d}/hosts/{host}.yaml check"
        )
    }
}
