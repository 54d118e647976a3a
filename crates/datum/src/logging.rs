//! Diagnostic logging through `tracing`: what the program did, for the
//! operator's log, apart from the command's own output (tables, diffs,
//! reports), which `render/` owns.
//!
//! The level comes from `--log-level` (or `DATUM_LOG`), else `RUST_LOG`
//! (full `tracing` directives, `datum=debug,datum_agent=trace`), else `info`
//! for the agent (`info,notify=warn`: the watch library's info events are
//! its own bookkeeping) and `warn` for everything else. The format: `text` (one
//! line per event on stderr, RFC 3339 UTC time), `json` (one JSON object per
//! line on stderr, for log shippers), `journald` (native journal fields:
//! `PRIORITY`, `MESSAGE`, the event's fields as `DATUM_*`), or `auto`:
//! journald when stderr is the journal (systemd sets `JOURNAL_STREAM`), text
//! otherwise. A journal that cannot be reached falls back to text, said once.
//!
//! Nothing sensitive is logged: events carry resource names, classes,
//! counts and error messages, which never hold declared values (see the
//! crate's sensitive tests). Whatever the directives say, the events of
//! [`WIRE_DUMPS`] are never logged: the HTTP client's trace level dumps
//! every byte it sends and receives, the `authorization: Bearer` header
//! with a host's report token or the admin credential among them.

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::filter_fn;
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

/// Log targets whose events are raw bytes of a connection (ureq's
/// `log_data`: 16 bytes a line, headers and bodies), never logged since
/// they hold credentials.
pub const WIRE_DUMPS: &[&str] = &["ureq_proto::util"];

/// Whether an event of `target` may be logged at all (see [`WIRE_DUMPS`]).
fn loggable(target: &str) -> bool {
    !WIRE_DUMPS
        .iter()
        .any(|t| target == *t || target.strip_prefix(t).is_some_and(|r| r.starts_with("::")))
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
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(filter_fn(|meta| loggable(meta.target())));
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

#[cfg(test)]
mod tests {
    use super::loggable;

    #[test]
    fn wire_dumps_are_never_loggable() {
        assert!(!loggable("ureq_proto::util"));
        assert!(!loggable("ureq_proto::util::inner"));
        assert!(loggable("ureq_proto::utility"));
        assert!(loggable("ureq_proto::client"));
        assert!(loggable("ureq::run"));
        assert!(loggable("datum::agent"));
    }
}
