//! `datum agent --pull-interval D`: the repository follows its remote.
//!
//! A thread of its own pulls with the settings of `pull.yaml` (exactly what
//! `datum pull` does, lint gate included, never `--allow-rollback`) at Unix
//! times spread over the interval by a hash of the host name, so a fleet
//! does not fetch in lockstep. When a new verified revision was switched in,
//! it asks the daemon for a reload, which compiles the new checkout in
//! process (a reload that fails keeps the last good catalogue, as SIGHUP
//! does). The daemon's checks go on meanwhile: the switch is atomic and each
//! load pins one checkout. Outcomes are logged (one line, no content) and
//! counted (`datum_pulls_total`, `datum_pull_failures_total{reason}`,
//! `datum_pull_last_success_timestamp_seconds`), the pull before the first
//! load too once the metrics exist.
//!
//! Must not decide what is trusted (datum-pull does) nor touch the
//! daemon's state except through [`Control::reload`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use datum_agent::daemon::Control;
use datum_agent::{LogLevel, Metrics};
use datum_pull::{Outcome, Overrides, PullConfig};

use crate::cli::GlobalArgs;
use crate::commands::agent::AgentArgs;

/// Pulls for the agent.
pub struct Puller {
    global: GlobalArgs,
    config: PullConfig,
    interval: Duration,
    /// How the pull before the first load went, counted by [`Puller::spawn`]
    /// (the metrics do not exist yet when it runs).
    first: Option<Tally>,
}

/// A pull as the metrics count it.
#[derive(Debug, Clone, Copy)]
enum Tally {
    /// Completed (`deployed` or `up_to_date`) at this Unix time.
    Completed(&'static str, Duration),
    /// Deployed nothing, for this reason word.
    Failed(&'static str),
}

impl Tally {
    fn count(self, metrics: &Metrics) {
        match self {
            Tally::Completed(outcome, unix) => metrics.pulled(outcome, unix),
            Tally::Failed(reason) => metrics.pull_failed(reason),
        }
    }
}

/// What a pull meant for the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pulled {
    /// A new revision is deployed: reload.
    New,
    Unchanged,
    Failed,
}

impl Puller {
    /// The puller `args` ask for (`None` without `--pull-interval`).
    pub fn new(global: &GlobalArgs, args: &AgentArgs) -> Result<Option<Puller>> {
        let Some(interval) = args.pull_interval else {
            return Ok(None);
        };
        anyhow::ensure!(
            interval >= Duration::from_secs(1),
            "--pull-interval {interval:?} is too short (at least 1s)"
        );
        let config = crate::commands::pull::settle(
            global,
            args.pull_config.as_deref(),
            &Overrides::default(),
        )?;
        Ok(Some(Puller {
            global: global.clone(),
            config,
            interval,
            first: None,
        }))
    }

    /// The repository the agent reads: the deployed link, under the root.
    pub fn repository(&self) -> Result<PathBuf> {
        Ok(datum_host::paths::resolve(
            &self.global.root,
            &self.config.deploy,
        )?)
    }

    /// The pull before the first load: counted once the metrics exist.
    pub fn first_pull(&mut self, log: &dyn Fn(LogLevel, &str)) -> Pulled {
        let (pulled, tally) = self.pull_once(log);
        self.first = Some(tally);
        pulled
    }

    /// One pull now, counted in `metrics`.
    fn pull(&self, log: &dyn Fn(LogLevel, &str), metrics: &Metrics) -> Pulled {
        let (pulled, tally) = self.pull_once(log);
        tally.count(metrics);
        pulled
    }

    fn pull_once(&self, log: &dyn Fn(LogLevel, &str)) -> (Pulled, Tally) {
        let outcome =
            crate::commands::pull::pull_once(&self.global, &self.config, None, false, &mut |_| {});
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let short = datum_pull::commit::short;
        match outcome {
            Ok(Outcome::UpToDate { revision, warnings }) => {
                for w in warnings {
                    log(LogLevel::Warn, &format!("pull: {w}"));
                }
                log(
                    LogLevel::Info,
                    &format!("pull: {} is deployed already", short(&revision)),
                );
                (Pulled::Unchanged, Tally::Completed("up_to_date", unix))
            }
            Ok(Outcome::Deployed(d)) => {
                for w in &d.warnings {
                    log(LogLevel::Warn, &format!("pull: {w}"));
                }
                log(
                    LogLevel::Info,
                    &format!(
                        "pull: deployed {} ({} from {}), signed by {}{}",
                        short(&d.record.revision),
                        d.record.git_ref,
                        d.record.source,
                        d.record.signer,
                        d.record
                            .previous
                            .as_deref()
                            .map(|p| format!(", replacing {}", short(p)))
                            .unwrap_or_default()
                    ),
                );
                (Pulled::New, Tally::Completed("deployed", unix))
            }
            Err(e) => {
                log(LogLevel::Error, &format!("pull: {e}"));
                (Pulled::Failed, Tally::Failed(e.word()))
            }
        }
    }

    /// Pulls on the interval from now on, on a thread of its own, asking
    /// `control` for a reload after each new revision.
    pub fn spawn(
        self,
        host: &str,
        control: Control,
        metrics: Arc<Metrics>,
        log: datum_agent::Log,
    ) -> std::io::Result<()> {
        metrics.pulling(datum_pull::FAILURE_WORDS);
        if let Some(first) = self.first {
            first.count(&metrics);
        }
        let offset = datum_agent::jitter_offset(host, "(pull)", self.interval);
        std::thread::Builder::new()
            .name("datum-pull".to_owned())
            .spawn(move || {
                loop {
                    let unix = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default();
                    std::thread::sleep(datum_agent::schedule::until_next_slot(
                        unix,
                        self.interval,
                        offset,
                    ));
                    if self.pull(&*log, &metrics) == Pulled::New {
                        control.reload();
                    }
                }
            })?;
        Ok(())
    }
}
