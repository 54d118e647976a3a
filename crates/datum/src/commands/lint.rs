//! `datum lint`: every manifest error, with file and line, like a compiler;
//! `--all-hosts` renders the repository for every host file in `hosts/`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use datum_catalog::{Diagnostics, HostIdentity};

use datum_report::render::Answer;
use datum_report::style::Paint;

use crate::cli::GlobalArgs;
use crate::context::use_color;
use crate::exit::ExitCode;

#[derive(Debug, Args)]
pub struct LintArgs {
    /// Also render the repository for every host file in REPO/hosts/*.yaml (templates included).
    #[arg(long)]
    pub all_hosts: bool,
}

pub fn run(global: &GlobalArgs, args: &LintArgs) -> Result<ExitCode> {
    if !crate::context::is_repository(&global.repo) {
        bail!(
            "{}: not a Datum repository (no datum.yaml); use --repo DIR",
            global.repo.display()
        );
    }
    if args.all_hosts {
        return all_hosts(global);
    }
    // With a declared host identity (a host file or labels), templates are
    // rendered for this host too; without one they are parsed only.
    let identity = datum_catalog::HostIdentity::load_if_declared(
        &global.root,
        global.host_file.as_deref(),
        &global.labels,
    )?;
    let diagnostics = datum_catalog::lint(&global.repo, identity.as_ref());
    let answer = Linted {
        repo: &global.repo,
        diagnostics: &diagnostics,
        host_checked: identity.is_some(),
    };
    crate::render::emit(&answer, global)?;
    Ok(if diagnostics.error_count() == 0 {
        ExitCode::Clean
    } else {
        ExitCode::ERROR
    })
}

/// The repository's diagnostics (for this host when it has an identity).
struct Linted<'a> {
    repo: &'a Path,
    diagnostics: &'a Diagnostics,
    /// Templates were rendered and host checks run for a host identity.
    host_checked: bool,
}

impl Answer for Linted<'_> {
    fn what(&self) -> &'static str {
        "datum lint"
    }

    fn json_key(&self) -> &'static str {
        ""
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        Ok(serde_json::json!({
            "repository": self.repo,
            "errors": self.diagnostics.error_count(),
            "host_checked": self.host_checked,
            "diagnostics": self.diagnostics,
        }))
    }

    /// The diagnostics on stderr, as a compiler writes them; "no errors" on
    /// stdout.
    fn human(&self, out: &mut dyn Write, paint: Paint) -> std::io::Result<()> {
        eprint!("{}", self.diagnostics.render(paint.on));
        if !self.host_checked {
            eprintln!("{}", NO_HOST_CHECKS);
        }
        if self.diagnostics.error_count() == 0 {
            writeln!(out, "{}: no errors", self.repo.display())?;
        } else {
            eprintln!("error: {} error(s) found", self.diagnostics.error_count());
        }
        Ok(())
    }
}

/// Said when lint has no host to compile for: what depends on the host
/// (the layers it takes, so two resources claiming one path, an account
/// used and removed, templates rendered) is then not looked at, and a
/// plain "no errors" would promise what `plan` may refuse.
const NO_HOST_CHECKS: &str = "note: no host identity (no ROOT/etc/datum/host.yaml, --host-file or --label), so what depends on a host was not checked (the layers it takes, resources claiming one path, accounts used and removed, templates rendered); `datum lint --all-hosts` or `datum plan` checks them";

/// The host files of the repository: `hosts/*.yaml` (and `*.yml`), sorted.
fn host_files(repo: &Path) -> Result<Vec<PathBuf>> {
    let dir = repo.join("hosts");
    let entries = datum_host::repo::read_dir(&dir).with_context(|| {
        format!(
            "{}: cannot list the host files (--all-hosts renders every hosts/*.yaml)",
            dir.display()
        )
    })?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let path = entry.path();
        let yaml = path.extension().is_some_and(|e| e == "yaml" || e == "yml");
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if yaml && !hidden {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        bail!("{}: no host files (*.yaml) to render", dir.display());
    }
    Ok(files)
}

/// One host's result.
struct HostLint {
    file: PathBuf,
    host: Option<String>,
    /// The host file itself could not be read.
    unreadable: Option<String>,
    /// A malformed host file's error with its line, to show.
    shown: Option<Diagnostics>,
    diagnostics: Diagnostics,
}

/// `--all-hosts`: each host file's result.
struct HostsLinted<'a> {
    repo: &'a Path,
    results: &'a [HostLint],
    /// Hosts whose file could not be read or whose catalogue has errors.
    failed: usize,
}

impl Answer for HostsLinted<'_> {
    fn what(&self) -> &'static str {
        "datum lint"
    }

    fn json_key(&self) -> &'static str {
        ""
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        let hosts: Vec<serde_json::Value> = self
            .results
            .iter()
            .map(|r| {
                serde_json::json!({
                    "file": r.file,
                    "host": r.host,
                    "error": r.unreadable,
                    // A host file that could not be read or parsed is
                    // one error, as it is one failed host.
                    "errors": r.diagnostics.error_count() + usize::from(r.unreadable.is_some()),
                    "diagnostics": r.diagnostics,
                })
            })
            .collect();
        Ok(serde_json::json!({
            "repository": self.repo,
            "hosts": hosts,
            "failed": self.failed,
        }))
    }

    /// Each host's diagnostics on stderr, its "no errors" on stdout.
    fn human(&self, out: &mut dyn Write, paint: Paint) -> std::io::Result<()> {
        let color = paint.on;
        for r in self.results {
            let file = r.file.display();
            match (&r.unreadable, &r.host) {
                // The error names the file (and the line, when it
                // was read but is malformed) itself.
                (Some(e), _) => match &r.shown {
                    Some(shown) => eprint!("{}", shown.render(color)),
                    None => eprintln!("error: {e}"),
                },
                (None, Some(host)) if r.diagnostics.error_count() == 0 => {
                    eprint!("{}", r.diagnostics.render(color));
                    writeln!(out, "{host} ({file}): no errors")?;
                }
                (None, host) => {
                    eprintln!(
                        "{} ({file}): {} error(s)",
                        host.as_deref().unwrap_or("?"),
                        r.diagnostics.error_count()
                    );
                    eprint!("{}", r.diagnostics.render(color));
                }
            }
        }
        if self.failed == 0 {
            writeln!(
                out,
                "{}: {} host(s), no errors",
                self.repo.display(),
                self.results.len()
            )?;
        } else {
            eprintln!(
                "error: {} of {} host(s) do not compile",
                self.failed,
                self.results.len()
            );
        }
        Ok(())
    }
}

fn all_hosts(global: &GlobalArgs) -> Result<ExitCode> {
    let files = host_files(&global.repo)?;
    let repository = match datum_catalog::load(&global.repo) {
        Ok(r) => r,
        Err(diagnostics) => {
            // Nothing host-specific can be said about a repository that
            // does not load: the plain lint's answer (exit 1; under
            // `--output json`, the error document with every diagnostic).
            eprint!("{}", diagnostics.render(use_color(global)));
            let message = format!("{} error(s) found", diagnostics.error_count());
            return Err(crate::context::RepositoryErrors::new(diagnostics, message).into());
        }
    };
    let results: Vec<HostLint> = files
        .into_iter()
        .map(
            |file| match HostIdentity::load(&global.root, Some(&file), &global.labels) {
                Ok(identity) => HostLint {
                    diagnostics: datum_catalog::lint_repository(&repository, Some(&identity)),
                    host: Some(identity.name),
                    unreadable: None,
                    shown: None,
                    file,
                },
                Err(e) => HostLint {
                    host: None,
                    unreadable: Some(format!("{e:#}")),
                    // A malformed host file is shown as a manifest's
                    // error is: its line under the message.
                    shown: e.diagnostics(),
                    diagnostics: Diagnostics::default(),
                    file,
                },
            },
        )
        .collect();
    let failed = results
        .iter()
        .filter(|r| r.unreadable.is_some() || r.diagnostics.error_count() > 0)
        .count();
    let answer = HostsLinted {
        repo: &global.repo,
        results: &results,
        failed,
    };
    crate::render::emit(&answer, global)?;
    Ok(if failed == 0 {
        ExitCode::Clean
    } else {
        ExitCode::ERROR
    })
}
