//! `datum pull`: fetch the repository's signed revision, verify it and
//! switch it in (see `datum-pull` and docs/pull.md). `--status` shows what
//! is deployed and the recent deployments.
//!
//! Also what the agent's puller calls ([`settle`], [`pull_once`]): the same
//! settings, the same lint gate, never `--allow-rollback`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Args;
use datum_pull::{DeployedRevision, Outcome, Overrides, PullConfig, PullError, Step};
use datum_report::render::Answer;
use datum_report::style::Paint;
use datum_store::StoredDeployment;

use crate::cli::GlobalArgs;
use crate::context::{self, StoreNeed};
use crate::exit::ExitCode;

#[derive(Args)]
pub struct PullArgs {
    /// The git remote (https://, ssh://, git://, file://, user@host:path or a path; a `/` in credentials written %2F); default `url:` of pull.yaml.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The branch or tag to deploy (default `ref:` of pull.yaml, else main).
    #[arg(long = "ref", value_name = "BRANCH_OR_TAG")]
    pub git_ref: Option<String>,
    /// Who may sign a deployable revision (ssh-keygen's allowed_signers format).
    #[arg(long, value_name = "FILE")]
    pub allowed_signers: Option<PathBuf>,
    /// Where the agent reads the repository: a link, a host path under --root (default /etc/datum/repository).
    #[arg(long, value_name = "PATH")]
    pub deploy: Option<PathBuf>,
    /// The pull settings (default ROOT/etc/datum/pull.yaml; options win over it).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Take the revision from this bundle (made by `datum bundle`) instead of the remote.
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,
    /// Deploy a revision that does not descend from the deployed one (a person's decision; recorded).
    #[arg(long)]
    pub allow_rollback: bool,
    /// Make the link at --deploy (or deploy: of pull.yaml) though the last pull made it elsewhere, and remove that one while it is still Datum's (a person's decision).
    #[arg(long)]
    pub move_deploy: bool,
    /// Checkouts to keep, the deployed one included (default 3).
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// Revoked SSH keys (a KRL or a list of public keys).
    #[arg(long, value_name = "FILE")]
    pub revoked_keys: Option<PathBuf>,
    /// An exported OpenPGP keyring (gpg --export) whose keys may sign.
    #[arg(long, value_name = "FILE")]
    pub openpgp_keyring: Option<PathBuf>,
    /// Show the deployed revision and the recent deployments; change nothing.
    #[arg(long)]
    pub status: bool,
}

/// The options, as a debug print shows them: the URL's password never.
impl std::fmt::Debug for PullArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullArgs")
            .field("url", &self.url.as_deref().map(datum_pull::source::shown))
            .field("git_ref", &self.git_ref)
            .field("allowed_signers", &self.allowed_signers)
            .field("deploy", &self.deploy)
            .field("config", &self.config)
            .field("bundle", &self.bundle)
            .field("allow_rollback", &self.allow_rollback)
            .field("move_deploy", &self.move_deploy)
            .field("keep", &self.keep)
            .field("revoked_keys", &self.revoked_keys)
            .field("openpgp_keyring", &self.openpgp_keyring)
            .field("status", &self.status)
            .finish()
    }
}

/// The largest `pull.yaml` read.
const CONFIG_LIMIT: u64 = 1 << 20;

pub fn run(global: &GlobalArgs, args: &PullArgs) -> Result<ExitCode> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let overrides = Overrides {
        url: args.url.clone(),
        git_ref: args.git_ref.clone(),
        allowed_signers: args.allowed_signers.as_ref().map(|p| cwd.join(p)),
        revoked_keys: args.revoked_keys.as_ref().map(|p| cwd.join(p)),
        openpgp_keyring: args.openpgp_keyring.as_ref().map(|p| cwd.join(p)),
        deploy: args.deploy.clone(),
        keep: args.keep,
        bundle: args.bundle.as_ref().map(|p| cwd.join(p)),
    };
    if args.status {
        return status(global, args, &overrides);
    }
    let config = match settle(global, args.config.as_deref(), &overrides) {
        Ok(config) => config,
        Err(e) => {
            // The same document as every other pull that deploys nothing
            // (`reason` from the same words: the settings, or the host when
            // `pull.yaml` could not be read or trusted).
            crate::render::emit(&NotDeployed::Settings(&e), global)?;
            return Err(e);
        }
    };
    let who = args
        .allow_rollback
        .then(datum_host::accounts::invoking_user);
    // The step under way is drawn for a person watching the terminal only:
    // what the format changes here is what is done, not how the answer
    // looks, so it asks the format (`wants_progress`), never compares it.
    let mut progress = Progress::new(global.output.wants_progress());
    let outcome = pull_once(global, &config, who, args.move_deploy, &mut |step| {
        progress.step(step)
    });
    progress.finish();
    match outcome {
        Ok(outcome) => {
            for w in warnings(&outcome) {
                eprintln!("warning: {w}");
            }
            let deployed = matches!(outcome, Outcome::Deployed(_));
            crate::render::emit(
                &Pulled {
                    outcome,
                    config: &config,
                },
                global,
            )?;
            Ok(ExitCode::for_pending(deployed))
        }
        Err(e) => {
            let failed = NotDeployed::Failed {
                error: &e,
                root: &global.root,
                config: &config,
            };
            crate::render::emit(&failed, global)?;
            Err(e.into())
        }
    }
}

/// A pull that deployed or found its revision deployed already.
struct Pulled<'a> {
    outcome: Outcome,
    config: &'a PullConfig,
}

impl Answer for Pulled<'_> {
    fn what(&self) -> &'static str {
        "datum pull"
    }

    fn json_key(&self) -> &'static str {
        ""
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        Ok(outcome_json(&self.outcome))
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        writeln!(out, "{}", outcome_line(&self.outcome, self.config))
    }
}

/// A pull that deployed nothing, before the command fails with the error:
/// under `--output json` a document saying so (stdout holds one document
/// in every outcome); for a person, nothing more than the error, which is
/// written to stderr as every command's is.
enum NotDeployed<'a> {
    /// The settings could not be settled.
    Settings(&'a anyhow::Error),
    /// The pull refused the revision or failed.
    Failed {
        error: &'a PullError,
        root: &'a Path,
        config: &'a PullConfig,
    },
}

impl Answer for NotDeployed<'_> {
    fn what(&self) -> &'static str {
        "datum pull"
    }

    fn json_key(&self) -> &'static str {
        ""
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        Ok(match self {
            NotDeployed::Settings(e) => settings_error_json(e),
            NotDeployed::Failed {
                error,
                root,
                config,
            } => {
                // What stays deployed, for a failure too (a refusal knows):
                // the revision the link's checkout says it is.
                let link = datum_host::paths::resolve(root, &config.deploy).ok();
                let deployed = link
                    .and_then(|l| datum_pull::deployed_revision(&l))
                    .map(|d| d.commit);
                error_json(error, deployed)
            }
        })
    }

    fn human(&self, _out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        Ok(())
    }
}

/// The settings: `pull.yaml` (`file`, else `ROOT/etc/datum/pull.yaml` when it
/// exists) under the options.
pub fn settle(
    global: &GlobalArgs,
    file: Option<&Path>,
    overrides: &Overrides,
) -> Result<PullConfig> {
    let (path, explicit) = match file {
        Some(p) => (p.to_path_buf(), true),
        None => (
            datum_host::paths::resolve(&global.root, Path::new(datum_pull::config::CONFIG_FILE))?,
            false,
        ),
    };
    let bytes = datum_host::named::read_trusted(&path, CONFIG_LIMIT)
        .with_context(|| "cannot read the pull settings".to_owned())?;
    let text = match bytes {
        Some(b) => Some(
            String::from_utf8(b).with_context(|| format!("{}: not UTF-8 text", path.display()))?,
        ),
        None if explicit => anyhow::bail!("{}: no such file", path.display()),
        None => None,
    };
    let file = text.as_deref().map(|t| (path.as_path(), t));
    Ok(datum_pull::config::settle(&global.root, file, overrides)?)
}

/// One pull of `config` with `datum lint` (for this host, when its identity
/// is declared) as the gate before the switch.
pub fn pull_once(
    global: &GlobalArgs,
    config: &PullConfig,
    allow_rollback: Option<String>,
    move_deploy: bool,
    progress: &mut dyn FnMut(Step),
) -> Result<Outcome, PullError> {
    let identity = datum_catalog::HostIdentity::load_if_declared(
        &global.root,
        global.host_file.as_deref(),
        &global.labels,
    )
    .ok()
    .flatten();
    let color = context::use_color(global);
    let gate = |path: &Path| -> Result<(), usize> {
        let diagnostics = datum_catalog::lint(path, identity.as_ref());
        match diagnostics.error_count() {
            0 => Ok(()),
            n => {
                eprint!("{}", diagnostics.render(color));
                Err(n)
            }
        }
    };
    datum_pull::pull(datum_pull::Request {
        root: &global.root,
        config,
        state: global.state.as_deref(),
        allow_rollback,
        move_deploy,
        lock_timeout: global.lock_timeout,
        gate: &gate,
        progress,
        now: context::now(),
    })
}

fn warnings(outcome: &Outcome) -> &[String] {
    match outcome {
        Outcome::UpToDate { warnings, .. } => warnings,
        Outcome::Deployed(d) => &d.warnings,
    }
}

fn short(id: &str) -> &str {
    datum_pull::commit::short(id)
}

/// What a person reads after a pull.
fn outcome_line(outcome: &Outcome, config: &PullConfig) -> String {
    match outcome {
        Outcome::UpToDate { revision, .. } => format!(
            "{} ({} from {}) is deployed already; nothing changed",
            short(revision),
            config.git_ref,
            config.source.display()
        ),
        Outcome::Deployed(d) => {
            let mut text = format!(
                "deployed {} ({} from {}), signed by {} ({})",
                short(&d.record.revision),
                d.record.git_ref,
                d.record.source,
                d.record.signer,
                d.record.key
            );
            match &d.record.previous {
                // Its link was made anew (it was missing, or `deploy` moved).
                Some(p) if *p == d.record.revision => {
                    text.push_str("; the state store had it deployed already, its link is new");
                }
                Some(p) => text.push_str(&format!("; it replaces {}", short(p))),
                None => text.push_str("; the first revision deployed here"),
            }
            if d.record.rollback {
                text.push_str(" (a rollback, allowed with --allow-rollback and recorded)");
            }
            text.push_str(&format!(
                "\n  {} -> {}",
                d.link.display(),
                d.checkout.display()
            ));
            if d.files > 0 {
                text.push_str(&format!(
                    "\n  {} files, {:.1} MiB written",
                    d.files,
                    d.bytes as f64 / 1048576.0
                ));
            } else {
                text.push_str("\n  its checkout was already here");
            }
            if !d.pruned.is_empty() {
                let pruned: Vec<&str> = d.pruned.iter().map(|p| short(p)).collect();
                text.push_str(&format!("\n  removed old checkouts: {}", pruned.join(", ")));
            }
            text
        }
    }
}

fn outcome_json(outcome: &Outcome) -> serde_json::Value {
    match outcome {
        Outcome::UpToDate { revision, warnings } => serde_json::json!({
            "outcome": "up_to_date",
            "revision": revision,
            "warnings": warnings,
        }),
        Outcome::Deployed(d) => serde_json::json!({
            "outcome": "deployed",
            "revision": d.record.revision,
            "previous": d.record.previous,
            "ref": d.record.git_ref,
            "source": d.record.source,
            "signer": d.record.signer,
            "key": d.record.key,
            "rollback": d.record.rollback,
            "files": d.files,
            "bytes": d.bytes,
            "link": d.link,
            "checkout": d.checkout,
            "pruned": d.pruned,
            "warnings": d.warnings,
        }),
    }
}

/// `deployed`: the revision the link points at, for a failure (a refusal
/// names what stays deployed itself).
fn error_json(e: &PullError, deployed: Option<String>) -> serde_json::Value {
    let refusal = e.refusal();
    serde_json::json!({
        "outcome": if refusal.is_some() { "refused" } else { "failed" },
        "reason": e.word(),
        "revision": refusal.map(|r| r.revision.clone()),
        "deployed": match (refusal, e) {
            (Some(r), _) => r.deployed.clone(),
            // The link asked for is not made: what the recorded one names
            // stays deployed.
            (None, PullError::DeployMoved { revision, .. }) => Some(revision.clone()),
            (None, _) => deployed,
        },
        "message": e.to_string(),
    })
}

fn settings_error_json(e: &anyhow::Error) -> serde_json::Value {
    let host = e
        .chain()
        .any(|c| c.downcast_ref::<datum_host::HostError>().is_some());
    serde_json::json!({
        "outcome": "failed",
        "reason": if host { "host" } else { "config" },
        "revision": null,
        "deployed": null,
        "message": format!("{e:#}"),
    })
}

/// `datum pull --status`: what the link points at and what the state store
/// recorded.
fn status(global: &GlobalArgs, args: &PullArgs, overrides: &Overrides) -> Result<ExitCode> {
    let deploy = match settle(global, args.config.as_deref(), overrides) {
        Ok(c) => c.deploy,
        Err(_) => args
            .deploy
            .clone()
            .unwrap_or_else(|| PathBuf::from(datum_pull::config::DEFAULT_DEPLOY)),
    };
    let link = datum_host::paths::resolve(&global.root, &deploy)?;
    let deployed = datum_pull::deployed_revision(&link);
    let history = match context::open_store(global, StoreNeed::Optional("showing the status"))? {
        Some(store) => store.deployments(20)?,
        None => Vec::new(),
    };
    crate::render::emit(
        &Status {
            link,
            deployed,
            history,
        },
        global,
    )?;
    Ok(ExitCode::Clean)
}

/// `datum pull --status`.
struct Status {
    /// The link the agent reads the repository through.
    link: PathBuf,
    deployed: Option<DeployedRevision>,
    /// The recent deployments, newest first.
    history: Vec<StoredDeployment>,
}

impl Answer for Status {
    fn what(&self) -> &'static str {
        "datum pull --status"
    }

    fn json_key(&self) -> &'static str {
        "status"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        Ok(serde_json::json!({
            "link": self.link,
            "deployed": self.deployed,
            "history": self.history,
        }))
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        let link = &self.link;
        match &self.deployed {
            Some(d) => writeln!(
                out,
                "{}: {} ({} from {}), signed by {} ({})",
                link.display(),
                d.commit,
                d.git_ref,
                d.source,
                d.signer,
                d.key
            )?,
            None => writeln!(
                out,
                "{}: no revision deployed by datum pull",
                link.display()
            )?,
        }
        if self.history.is_empty() {
            writeln!(out, "no deployments recorded")?;
        }
        for h in &self.history {
            let d = &h.deployment;
            let at = humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + Duration::from_secs(d.deployed_at.max(0) as u64),
            );
            let mut line = format!(
                "{at}  {}  {} signed by {}",
                short(&d.revision),
                d.git_ref,
                d.signer
            );
            if let Some(p) = &d.previous {
                line.push_str(&format!(", replacing {}", short(p)));
            }
            if d.rollback {
                line.push_str(&format!(
                    "  ROLLBACK allowed by {}",
                    d.allowed_by.as_deref().unwrap_or("(unknown)")
                ));
            }
            writeln!(out, "{line}")?;
        }
        Ok(())
    }
}

/// A spinner with the step on stderr, on a terminal only.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn new(human: bool) -> Self {
        let bar = if human {
            crate::render::progress::steps()
        } else {
            None
        };
        Progress { bar }
    }

    fn step(&mut self, step: Step) {
        let Some(bar) = &self.bar else { return };
        let text = match step {
            Step::Fetching { source, git_ref } => format!("fetching {git_ref} from {source}"),
            Step::Fetched { revision } => {
                format!("verifying the signature of {}", short(&revision))
            }
            Step::Verified { signer, .. } => format!("signed by {signer}; checking out"),
            Step::Writing { done, total } => format!("checking out: {done}/{total} files"),
            Step::Linting => "linting the new revision".to_owned(),
            Step::Switched => "switched".to_owned(),
        };
        bar.set_message(text);
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_debug_form_hides_the_urls_password() {
        let args = PullArgs {
            url: Some("https://deploy:canary-pw@git.example/x.git".to_owned()),
            git_ref: None,
            allowed_signers: None,
            deploy: None,
            config: None,
            bundle: None,
            allow_rollback: false,
            move_deploy: false,
            keep: None,
            revoked_keys: None,
            openpgp_keyring: None,
            status: false,
        };
        let shown = format!("{args:?}");
        assert!(!shown.contains("canary-pw"), "{shown}");
        assert!(shown.contains("git.example"), "{shown}");
    }
}
