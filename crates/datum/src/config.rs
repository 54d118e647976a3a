//! `/etc/datum/datum.toml`: this machine's defaults for the command line.
//!
//! Every option keeps one precedence, highest first: the flag, its
//! environment variable (where it has one: `DATUM_REPO`, `DATUM_LOG`, ...),
//! this file, the built-in default. The file only replaces built-in
//! defaults: it becomes the default clap falls back to, so clap's own
//! order (flag, then environment, then default) does the rest, and
//! `--help` shows the defaults in force.
//!
//! The file belongs to the machine running Datum, not to the tree `--root`
//! names (a demo or image build under `--root` still runs with this
//! machine's defaults, and a root cannot change how it is itself read). It
//! is `/etc/datum/datum.toml` unless `DATUM_CONFIG` names another one (tests
//! do, so they never read the real `/etc`); a missing default file means
//! built-in defaults, a missing named one is an error.
//!
//! A root process trusts it (it says which repository to apply), so it is
//! read as a trust file: owned by root or by the user running Datum, and
//! writable by its owner only, as every folder on the way to it must be
//! (`datum_host::named::read_trusted`). An
//! unknown key, a value of the wrong type or one the option refuses is an
//! error naming the file and line, and nothing runs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, FromArgMatches};
use serde::Deserialize;
use toml::Spanned;

use crate::cli::Cli;

/// Where the defaults are read from unless [`PATH_VAR`] says otherwise.
pub const DEFAULT_PATH: &str = "/etc/datum/datum.toml";

/// Names another defaults file (tests, a second installation).
pub const PATH_VAR: &str = "DATUM_CONFIG";

/// The largest file read: defaults are a few lines.
const LIMIT: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the defaults file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: datum_host::HostError,
    },
    #[error("{PATH_VAR} names {}, which does not exist", path.display())]
    Missing { path: PathBuf },
    #[error("{}:{line}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// The file's keys: the global options a machine sets once, and the agent's.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    repo: Option<Spanned<String>>,
    state: Option<Spanned<String>>,
    host_file: Option<Spanned<String>>,
    output: Option<Spanned<String>>,
    color: Option<Spanned<String>>,
    lock_timeout: Option<Spanned<String>>,
    log_level: Option<Spanned<String>>,
    log_format: Option<Spanned<String>>,
    #[serde(default)]
    agent: AgentDefaults,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentDefaults {
    listen: Option<Spanned<String>>,
    full_interval: Option<Spanned<String>>,
    debounce: Option<Spanned<String>>,
    pull_interval: Option<Spanned<String>>,
}

/// How a value is checked before it becomes a default.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// An absolute path (a relative one would depend on where Datum runs).
    Path,
    /// One of the option's possible values (`color = "never"`) but those
    /// listed: a flag may ask for them in one run, a machine's default may
    /// not be one (`output = "markdown"` would make every command without
    /// that form refuse to run).
    Choice(&'static [&'static str]),
    /// A duration as the option takes it (`60s`, `1m30s`).
    Duration,
    /// Anything the option itself checks later (a log filter, an address).
    Text,
}

/// One value the file sets: the option it is the default of (`subcommand`
/// `None` for a global option), and where in the file it was.
struct Setting<'a> {
    key: &'static str,
    subcommand: Option<&'static str>,
    arg: &'static str,
    kind: Kind,
    value: &'a Spanned<String>,
}

impl Defaults {
    fn settings(&self) -> Vec<Setting<'_>> {
        let global = [
            ("repo", &self.repo, Kind::Path),
            ("state", &self.state, Kind::Path),
            ("host_file", &self.host_file, Kind::Path),
            ("output", &self.output, Kind::Choice(&["markdown"])),
            ("color", &self.color, Kind::Choice(&[])),
            ("lock_timeout", &self.lock_timeout, Kind::Duration),
            ("log_level", &self.log_level, Kind::Text),
            ("log_format", &self.log_format, Kind::Choice(&[])),
        ];
        let agent = [
            ("listen", &self.agent.listen, Kind::Text),
            ("full_interval", &self.agent.full_interval, Kind::Duration),
            ("debounce", &self.agent.debounce, Kind::Duration),
            ("pull_interval", &self.agent.pull_interval, Kind::Duration),
        ];
        let global = global.into_iter().filter_map(|(key, value, kind)| {
            Some(Setting {
                key,
                subcommand: None,
                arg: key,
                kind,
                value: value.as_ref()?,
            })
        });
        let agent = agent.into_iter().filter_map(|(key, value, kind)| {
            Some(Setting {
                key,
                subcommand: Some("agent"),
                arg: key,
                kind,
                value: value.as_ref()?,
            })
        });
        // `datum schedule` states a watched class's bound with the agent's
        // debounce: the same value is its `--debounce`'s default (checked
        // as the agent's first, so an error names `[agent] debounce`).
        let schedule = self.agent.debounce.as_ref().map(|value| Setting {
            key: "debounce",
            subcommand: Some("schedule"),
            arg: "debounce",
            kind: Kind::Duration,
            value,
        });
        global.chain(agent).chain(schedule).collect()
    }
}

/// The file named by [`PATH_VAR`], else [`DEFAULT_PATH`]; whether it was
/// named (a named file must exist).
pub fn location() -> (PathBuf, bool) {
    match std::env::var_os(PATH_VAR).filter(|v| !v.is_empty()) {
        Some(path) => (PathBuf::from(path), true),
        None => (PathBuf::from(DEFAULT_PATH), false),
    }
}

/// A command line clap refused (or `--help`, `--version`), with what the
/// error needs to be told as the command asked: under `--output json` a
/// usage error is the error document on stdout too.
pub struct Usage {
    pub error: clap::Error,
    /// Whether JSON was asked for (a flag, else the file's `output`).
    pub json: bool,
    /// The subcommand as typed (`plan`), `datum` when none was.
    pub command: String,
}

/// Whether `args` (the program's name first) ask for JSON output: `--json`,
/// or the last `--output` given says `json`; `default` when none says.
pub fn asks_for_json(args: &[OsString], default: bool) -> bool {
    let mut json = default;
    let mut args = args.iter().skip(1).map(|a| a.to_string_lossy());
    while let Some(arg) = args.next() {
        match arg.as_ref() {
            "--" => break,
            "--json" => return true,
            "--output" => json = args.next().is_some_and(|v| v == "json"),
            other => {
                if let Some(value) = other.strip_prefix("--output=") {
                    json = value == "json";
                }
            }
        }
    }
    json
}

/// Parses this process's command line with the defaults file applied.
pub fn parse() -> Result<Result<Cli, Usage>, ConfigError> {
    let (path, named) = location();
    let text = match datum_host::named::read_trusted(&path, LIMIT) {
        Ok(Some(bytes)) => String::from_utf8(bytes).map_err(|_| ConfigError::Invalid {
            path: path.clone(),
            line: 1,
            message: "not UTF-8 text".to_owned(),
        })?,
        Ok(None) if named => return Err(ConfigError::Missing { path }),
        Ok(None) => String::new(),
        Err(source) => return Err(ConfigError::Read { path, source }),
    };
    let command = with_defaults(Cli::command(), &path, &text)?;
    let args: Vec<OsString> = std::env::args_os().collect();
    let file_json = command
        .get_arguments()
        .find(|a| a.get_id() == "output")
        .and_then(|a| a.get_default_values().first())
        .is_some_and(|v| v == "json");
    let json = asks_for_json(&args, file_json);
    let typed = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy())
        .find(|a| {
            command
                .get_subcommands()
                .any(|c| c.get_name() == a.as_ref())
        })
        .map_or_else(|| "datum".to_owned(), |a| a.into_owned());
    Ok(parse_from(command, args).map_err(|error| Usage {
        error,
        json,
        command: typed,
    }))
}

fn parse_from(
    command: clap::Command,
    args: impl IntoIterator<Item = OsString>,
) -> Result<Cli, clap::Error> {
    let mut command = command;
    let matches = command.try_get_matches_from_mut(args)?;
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))
}

/// `command` with the file's values (`text`, read from `path`) as its
/// defaults.
fn with_defaults(
    mut command: clap::Command,
    path: &Path,
    text: &str,
) -> Result<clap::Command, ConfigError> {
    let invalid = |span: Option<std::ops::Range<usize>>, message: String| ConfigError::Invalid {
        path: path.to_path_buf(),
        line: span.map_or(1, |s| datum_core::text::line_of(text, s.start)),
        message,
    };
    let defaults: Defaults =
        toml::from_str(text).map_err(|e| invalid(e.span(), e.message().to_owned()))?;
    for setting in defaults.settings() {
        let value = setting.value.get_ref().as_str();
        let name = match setting.subcommand {
            Some(sub) => format!("[{sub}] {}", setting.key),
            None => setting.key.to_owned(),
        };
        let fail = |why: String| invalid(Some(setting.value.span()), format!("{name}: {why}"));
        let arg = match setting.subcommand {
            Some(sub) => command
                .find_subcommand(sub)
                .and_then(|s| s.get_arguments().find(|a| a.get_id() == setting.arg)),
            None => command.get_arguments().find(|a| a.get_id() == setting.arg),
        };
        let Some(arg) = arg else {
            // The table above names an option the command line lost.
            return Err(fail("this build has no such option".to_owned()));
        };
        match setting.kind {
            Kind::Path if !Path::new(value).is_absolute() => {
                return Err(fail(format!("`{value}` is not an absolute path")));
            }
            Kind::Choice(not_a_default) => {
                let possible: Vec<String> = arg
                    .get_possible_values()
                    .iter()
                    .map(|p| p.get_name().to_owned())
                    .filter(|p| !not_a_default.contains(&p.as_str()))
                    .collect();
                if !possible.iter().any(|p| p == value) {
                    let why = if not_a_default.contains(&value) {
                        format!(
                            " ({value} is a report form of some commands only: ask for it with --{} {value})",
                            setting.arg
                        )
                    } else {
                        String::new()
                    };
                    return Err(fail(format!(
                        "`{value}` is not one of {}{why}",
                        possible.join(", ")
                    )));
                }
            }
            Kind::Duration => {
                humantime::parse_duration(value)
                    .map_err(|e| fail(format!("`{value}` is not a duration ({e})")))?;
            }
            Kind::Path | Kind::Text => {}
        }
        let value = value.to_owned();
        command = match setting.subcommand {
            Some(sub) => {
                command.mut_subcommand(sub, |s| s.mut_arg(setting.arg, |a| a.default_value(value)))
            }
            None => command.mut_arg(setting.arg, |a| a.default_value(value)),
        };
    }
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Command;
    use datum_report::style::Choice;

    fn parse_with(text: &str, args: &[&str]) -> Result<Cli, String> {
        let command = with_defaults(Cli::command(), Path::new("/etc/datum/datum.toml"), text)
            .map_err(|e| e.to_string())?;
        let args = std::iter::once("datum").chain(args.iter().copied());
        parse_from(command, args.map(OsString::from)).map_err(|e| e.to_string())
    }

    #[test]
    fn the_file_replaces_built_in_defaults_and_flags_win_over_it() {
        let text = "repo = \"/srv/repo\"\ncolor = \"never\"\nlock_timeout = \"5s\"\n\
                    [agent]\nlisten = \"127.0.0.1:9999\"\n";
        let cli = parse_with(text, &["agent"]).unwrap();
        assert_eq!(cli.global.repo, Path::new("/srv/repo"));
        assert_eq!(cli.global.color, Choice::Never);
        assert_eq!(cli.global.lock_timeout, std::time::Duration::from_secs(5));
        let Command::Agent(agent) = &cli.command else {
            panic!("not the agent")
        };
        assert_eq!(agent.listen, "127.0.0.1:9999");
        let cli = parse_with(
            text,
            &[
                "--repo", "/x", "--color", "always", "agent", "--listen", "[::1]:1",
            ],
        )
        .unwrap();
        assert_eq!(cli.global.repo, Path::new("/x"));
        assert_eq!(cli.global.color, Choice::Always);
        let Command::Agent(agent) = &cli.command else {
            panic!("not the agent")
        };
        assert_eq!(agent.listen, "[::1]:1");
        // Without the file: the built-in defaults.
        let cli = parse_with("", &["plan"]).unwrap();
        assert_eq!(cli.global.repo, Path::new("."));
        assert_eq!(cli.global.color, Choice::Auto);
    }

    #[test]
    fn an_unknown_key_names_the_file_and_line() {
        let err =
            parse_with("color = \"never\"\n\nrepository = \"/srv\"\n", &["plan"]).unwrap_err();
        assert!(err.starts_with("/etc/datum/datum.toml:3: "), "{err}");
        assert!(err.contains("unknown field `repository`"), "{err}");
        let err = parse_with("[agent]\nlisten = \"x:1\"\nport = 1\n", &["plan"]).unwrap_err();
        assert!(err.starts_with("/etc/datum/datum.toml:3: "), "{err}");
        assert!(err.contains("`port`"), "{err}");
    }

    /// Markdown is a report form of a few commands (plan, apply, check):
    /// as every command's default it would make the others refuse to run
    /// (`datum lint cannot be shown as markdown`), so the file takes human
    /// or json, as docs/install.md and the shipped file say.
    #[test]
    fn the_output_default_is_human_or_json() {
        let err = parse_with("color = \"never\"\noutput = \"markdown\"\n", &["lint"]).unwrap_err();
        assert_eq!(
            err,
            "/etc/datum/datum.toml:2: output: `markdown` is not one of human, json \
             (markdown is a report form of some commands only: ask for it with --output markdown)"
        );
        let cli = parse_with("output = \"json\"\n", &["plan", "--output", "markdown"]).unwrap();
        assert_eq!(cli.global.output, datum_report::render::Format::Markdown);
    }

    #[test]
    fn a_bad_value_names_the_key_and_line() {
        let err = parse_with("\ncolor = \"sometimes\"\n", &["plan"]).unwrap_err();
        assert_eq!(
            err,
            "/etc/datum/datum.toml:2: color: `sometimes` is not one of auto, always, never"
        );
        let err = parse_with("lock_timeout = \"soon\"\n", &["plan"]).unwrap_err();
        assert!(
            err.starts_with("/etc/datum/datum.toml:1: lock_timeout: `soon` is not a duration"),
            "{err}"
        );
        let err = parse_with("repo = \"repo\"\n", &["plan"]).unwrap_err();
        assert!(
            err.contains("repo: `repo` is not an absolute path"),
            "{err}"
        );
        let err = parse_with("repo = 1\n", &["plan"]).unwrap_err();
        assert!(err.starts_with("/etc/datum/datum.toml:1: "), "{err}");
        let err = parse_with("[agent]\npull_interval = \"often\"\n", &["plan"]).unwrap_err();
        assert!(
            err.starts_with("/etc/datum/datum.toml:2: [agent] pull_interval:"),
            "{err}"
        );
    }
}
