//! Diagnostic logging through `tracing`: what the program did, for the
//! operator's log, apart from the command's own output (tables, diffs,
//! reports), which `render/` owns.
//!
//! The level comes from `--log-level` (or `DATUM_LOG`), else `RUST_LOG`
//! (full `tracing` directives, `datum=debug,datum_agent=trace`), else `info`
//! for the agent and `warn` for everything else. The format: `text` (one
//! line per event on stderr, RFC 3339 UTC time), `json` (one JSON object per
//! line on stderr, for log shippers), `journald` (native journal fields:
//! `PRIORITY`, `MESSAGE`, the event's fields as `DATUM_*`), or `auto`:
//! journald when stderr is the journal (systemd sets `JOURNAL_STREAM`), text
//! otherwise. A journal that cannot be reached falls back to text, said once.
//!
//! Nothing sensitive is logged: events carry resource names, classes,
//! counts and error messages, which never hold declared values (see the
//! crate's sensitive tests).

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// How log events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Auto,
    Text,
    Json,
    Journald,
}

/// Installs the process's subscriber. `default_level` applies when neither
/// `--log-level` nor `RUST_LOG` says otherwise.
pub fn init(level: Option<&str>, format: LogFormat, default_level: &str) {
    let filter = match level {
        Some(l) => EnvFilter::try_new(l).ok(),
        None => EnvFilter::try_from_default_env().ok(),
    }
    .unwrap_or_else(|| EnvFilter::new(default_level));
    let format = match format {
        LogFormat::Auto if std::env::var_os("JOURNAL_STREAM").is_some() => LogFormat::Journald,
        LogFormat::Auto => LogFormat::Text,
        other => other,
    };
    let registry = tracing_subscriber::registry().with(filter);
    let text = || {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
    };
    let installed = match format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Journald => match tracing_journald::layer() {
            Ok(journal) => registry
                .with(journal.with_field_prefix(Some("DATUM".to_owned())))
                .try_init(),
            Err(e) => {
                let installed = registry.with(text()).try_init();
                tracing::warn!("cannot reach the journal ({e}): logging to stderr");
                installed
            }
        },
        LogFormat::Text | LogFormat::Auto => registry.with(text()).try_init(),
    };
    // Only fails when a subscriber is installed already (never here).
    drop(installed);
}
