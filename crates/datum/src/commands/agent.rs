//! `datum agent`: the detection loop as a daemon (or one pass with
//! `--once`). Wires the global options to [`crate::agent::RepoChecker`] and
//! the daemon in `datum-agent`; log lines go to stderr (the journal under
//! systemd), one per check, with counts only.

use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Result;
use datum_agent::{Agent, AgentConfig, Log, LogLevel};

use crate::agent::{Paths, RepoChecker};
use crate::cli::{AgentArgs, GlobalArgs};
use crate::context;
use crate::exit::ExitCode;

fn line(level: LogLevel, text: &str) {
    let word = match level {
        LogLevel::Info => "info",
        LogLevel::Warn => "warning",
        LogLevel::Error => "error",
    };
    let at = humantime::format_rfc3339_millis(SystemTime::now());
    eprintln!("{at} datum agent: {word}: {text}");
}

pub fn run(global: &GlobalArgs, args: &AgentArgs) -> Result<ExitCode> {
    // The host name seeds each class's phase; a host without an identity
    // cannot be checked anyway.
    let identity = context::identity(global)?;
    let paths = Paths {
        repo: global.repo.clone(),
        root: global.root.clone(),
        host_file: global.host_file.clone(),
        labels: global.labels.clone(),
        state: global.state.clone(),
        color: context::use_color(global),
        lock_timeout: global.lock_timeout,
    };
    let log: Log = Arc::new(line);
    let mut checker = RepoChecker::new(paths, Box::new(|w| line(LogLevel::Warn, w)))
        .with_info(Box::new(|w| line(LogLevel::Info, w)));
    let agent = Agent::new(AgentConfig {
        host: identity.name,
        listen: (!args.once).then(|| args.listen.clone()),
        full_interval: args.full_interval,
        debounce: args.debounce,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        signals: true,
        log,
    });
    if args.once {
        let code = agent.run_once(&mut checker)?;
        return Ok(ExitCode(code));
    }
    agent.run(&mut checker, |_| {})?;
    Ok(ExitCode::CLEAN)
}
