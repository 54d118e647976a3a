//! `datum agent`: the detection loop as a daemon (or one pass with
//! `--once`). Wires the global options to [`crate::agent::RepoChecker`] and
//! the daemon in `datum-agent`; log lines go to stderr (the journal under
//! systemd), one per check, with counts only. With `--pull-interval`, the
//! repository is the link `datum pull` deploys, pulled once before the first
//! load and then on the interval (`crate::agent::puller`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use datum_agent::{Agent, AgentConfig, Log, LogLevel};

use crate::agent::puller::{Pulled, Puller};
use crate::agent::{Paths, RepoChecker};
use crate::cli::GlobalArgs;
use crate::context;
use crate::exit::ExitCode;

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Check every class once, then exit with `datum check`'s code (for cron).
    #[arg(long)]
    pub once: bool,
    /// Where to serve /metrics and /healthz (loopback by default).
    #[arg(long, value_name = "ADDR", default_value = datum_agent::http::DEFAULT_LISTEN)]
    pub listen: String,
    /// Interval of the backstop pass over every class.
    #[arg(long, default_value = "1h", value_parser = crate::cli::duration)]
    pub full_interval: Duration,
    /// How long file-change events are gathered before a watched class is checked.
    #[arg(long, default_value = "100ms", value_parser = crate::cli::duration)]
    pub debounce: Duration,
    /// Also pull the repository this often (settings from pull.yaml) and reload on a new verified revision.
    #[arg(long, value_name = "DURATION", value_parser = crate::cli::duration)]
    pub pull_interval: Option<Duration>,
    /// The pull settings for --pull-interval (default ROOT/etc/datum/pull.yaml).
    #[arg(long, value_name = "FILE", requires = "pull_interval")]
    pub pull_config: Option<PathBuf>,
}

/// The agent's log lines, as `tracing` events (see `logging`).
fn line(level: LogLevel, text: &str) {
    match level {
        LogLevel::Info => tracing::info!(target: "datum::agent", "{text}"),
        LogLevel::Warn => tracing::warn!(target: "datum::agent", "{text}"),
        LogLevel::Error => tracing::error!(target: "datum::agent", "{text}"),
    }
}

pub fn run(global: &GlobalArgs, args: &AgentArgs) -> Result<ExitCode> {
    let mut puller = Puller::new(global, args)?;
    let global = &match &mut puller {
        Some(p) => {
            let link = p.repository()?;
            // Pulls deploy to the link; the agent reads nothing else.
            // `--repo` left at its default (`.`, made absolute at start-up).
            let default_repo = std::path::absolute(".").ok();
            if Some(&global.repo) != default_repo.as_ref() && global.repo != link {
                anyhow::bail!(
                    "--pull-interval deploys the repository to {} but --repo is {}: leave --repo out (or give that path)",
                    link.display(),
                    global.repo.display()
                );
            }
            // Before the first load, so a fresh host starts with a revision.
            if p.first_pull(&line) == Pulled::Failed && !crate::context::is_repository(&link) {
                anyhow::bail!(
                    "the first pull failed and nothing is deployed at {}",
                    link.display()
                );
            }
            GlobalArgs {
                repo: link,
                ..global.clone()
            }
        }
        None => global.clone(),
    };
    // The host name seeds each class's phase; a host without an identity
    // cannot be checked anyway.
    let identity = context::identity(global)?;
    let paths = Paths {
        repo: global.repo.clone(),
        root: global.root.clone(),
        host_file: global.host_file.clone(),
        labels: global.labels.clone(),
        state: global.state.clone(),
        lock_timeout: global.lock_timeout,
    };
    let log: Log = Arc::new(line);
    let mut checker =
        RepoChecker::new(paths, global.clone(), Box::new(|w| line(LogLevel::Warn, w)))
            .with_info(Box::new(|w| line(LogLevel::Info, w)));
    let agent = Agent::new(AgentConfig {
        host: identity.name.clone(),
        listen: (!args.once).then(|| args.listen.clone()),
        full_interval: args.full_interval,
        debounce: args.debounce,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        validators: datum_providers::validators::all()
            .iter()
            .map(|v| v.name.to_owned())
            .collect(),
        signals: true,
        log,
    });
    if args.once {
        let conclusion = agent.run_once(&mut checker)?;
        // The process ends now: deliver here rather than in the
        // background.
        checker.deliver_now();
        return Ok(ExitCode::from(conclusion));
    }
    if let Some(p) = puller {
        p.spawn(
            &identity.name,
            agent.control(),
            agent.metrics(),
            Arc::new(line),
        )?;
    }
    agent.run(&mut checker, |_| {})?;
    Ok(ExitCode::Clean)
}
