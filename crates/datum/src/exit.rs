//! How `datum` ends as a process: which [`ErrorKind`] an error is
//! ([`kind_of`], [`kind_of_usage`]), printing it, and `std::process::exit`.
//! The table from an [`ExitCode`] or an [`ErrorKind`] to a number is
//! [`ExitCode::code`] in `datum_core::exit` (crates/datum-core/src/exit.rs),
//! the one table for the process's exit code, the pass record and the fleet
//! report alike; a check's `datum_agent::Conclusion` maps into it beside the
//! conclusion. The README's "Exit codes" table is that one.

use std::io::Write;

pub use datum_core::exit::{ErrorKind, ExitCode};

/// The kind of a command's error.
pub fn kind_of(err: &anyhow::Error) -> ErrorKind {
    let closed = err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    });
    if closed {
        ErrorKind::ClosedOutput
    } else if err
        .downcast_ref::<datum_report::render::Unsupported>()
        .is_some()
    {
        ErrorKind::Usage
    } else {
        ErrorKind::Failed
    }
}

/// The kind of a clap error: help and version are not errors.
pub fn kind_of_usage(err: &clap::Error) -> ErrorKind {
    match err.kind() {
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
            ErrorKind::Help
        }
        _ => ErrorKind::Usage,
    }
}

/// Prints a clap error (or the help it carries) and exits; under `--output
/// json` a usage error is also the error document on stdout, as any error
/// before a command's report is.
pub fn usage_error(usage: crate::config::Usage) -> ! {
    let err = usage.error;
    let _ = err.print();
    let kind = kind_of_usage(&err);
    if usage.json && is_an_error(kind) {
        // clap's message is its first line (`error: ...`); the usage and
        // the hint after it stay on stderr.
        let text = err.to_string();
        let first = text.lines().next().unwrap_or_default();
        let message = first.strip_prefix("error: ").unwrap_or(first).to_owned();
        let _ = crate::render::json::print(
            "",
            crate::render::json::error(&usage.command, &anyhow::Error::msg(message)),
        );
    }
    std::process::exit(ExitCode::Error(kind).code())
}

/// Whether an error of `kind` ends the command as an error (exit 1): a
/// usage error or a failure, which under `--output json` is an error
/// document on stdout too; not help, a version, or a reader that closed
/// stdout (exit 0, nothing to report).
fn is_an_error(kind: ErrorKind) -> bool {
    match kind {
        ErrorKind::Usage | ErrorKind::Failed => true,
        ErrorKind::Help | ErrorKind::ClosedOutput => false,
    }
}

/// `error: MESSAGE` and each cause on its own line, except a cause the
/// text already says (an error that quotes its source in its message).
fn error_text(err: &anyhow::Error) -> String {
    // A malformed host file on its own (no context above it) reads as a
    // manifest's error does.
    if err.chain().nth(1).is_none()
        && let Some(diagnostics) = err
            .downcast_ref::<datum_catalog::HostError>()
            .and_then(datum_catalog::HostError::diagnostics)
    {
        return diagnostics.render(false).trim_end().to_owned();
    }
    let mut text = format!("error: {err}");
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(&format!("\n  caused by: {cause}"));
        }
    }
    if let Some(snippet) = host_file_snippet(err) {
        text.push('\n');
        text.push_str(snippet.trim_end());
    }
    text
}

/// The line of a malformed host file under its error, with a caret at the
/// column, as a manifest's error shows its line (the message is already
/// above: only the ` --> FILE:LINE:COL` part and what follows).
fn host_file_snippet(err: &anyhow::Error) -> Option<String> {
    let diagnostics = err
        .chain()
        .find_map(|c| c.downcast_ref::<datum_catalog::HostError>())?
        .diagnostics()?;
    let rendered = diagnostics.render(false);
    let (_, snippet) = rendered.split_once('\n')?;
    Some(snippet.to_owned())
}

/// Prints an error with its cause chain (unless the reader closed stdout,
/// `datum plan | head`) and returns its code.
pub fn report_error(err: &anyhow::Error) -> ExitCode {
    let kind = kind_of(err);
    if kind != ErrorKind::ClosedOutput {
        let mut stderr = anstream::stderr();
        let _ = writeln!(stderr, "{}", error_text(err));
    }
    ExitCode::Error(kind)
}

/// [`report_error`], and under `--output json` (`format` is the one asked
/// for) an error that ends the command with exit 1 before it printed its
/// own document is one JSON document on stdout too
/// (`crate::render::json::error`: `format_version`, `command`, `error`,
/// `errors`, `diagnostics`), so a script reading stdout gets the diagnostics,
/// not an empty input. The human text stays on stderr, where a person or
/// a log sees it whatever the script does with stdout.
pub fn report_error_as(
    err: &anyhow::Error,
    format: datum_report::render::Format,
    command: &str,
) -> ExitCode {
    let code = report_error(err);
    if format == datum_report::render::Format::Json
        && matches!(code, ExitCode::Error(kind) if is_an_error(kind))
        && !crate::render::json::begun()
    {
        // A stdout that cannot be written changes nothing: the exit code
        // and stderr already say what happened.
        let _ = crate::render::json::print("", crate::render::json::error(command, err));
    }
    code
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;
    use datum_report::render::{Format, Unsupported};

    use super::*;

    #[test]
    fn exit_0_help_and_a_closed_pipe() {
        let pipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("cannot write the plan");
        assert_eq!(kind_of(&pipe), ErrorKind::ClosedOutput);
        assert_eq!(report_error(&pipe).code(), 0);
        let help = crate::cli::Cli::try_parse_from(["datum", "--help"]).unwrap_err();
        assert_eq!(kind_of_usage(&help), ErrorKind::Help);
        assert_eq!(ExitCode::Error(kind_of_usage(&help)).code(), 0);
        let version = crate::cli::Cli::try_parse_from(["datum", "--version"]).unwrap_err();
        assert_eq!(ExitCode::Error(kind_of_usage(&version)).code(), 0);
    }

    /// The kinds that are error documents under `--output json` are the
    /// kinds that exit 1, every one of them.
    #[test]
    fn an_error_is_a_kind_that_exits_1() {
        for kind in [
            ErrorKind::Help,
            ErrorKind::Usage,
            ErrorKind::ClosedOutput,
            ErrorKind::Failed,
        ] {
            assert_eq!(
                is_an_error(kind),
                ExitCode::Error(kind).code() == 1,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn exit_1_usage_unsupported_format_and_every_other_error() {
        let typo = crate::cli::Cli::try_parse_from(["datum", "plna"]).unwrap_err();
        assert_eq!(kind_of_usage(&typo), ErrorKind::Usage);
        assert_eq!(ExitCode::Error(kind_of_usage(&typo)).code(), 1);
        let format: anyhow::Error =
            Unsupported::new("datum lint", Format::Markdown, &[Format::Human]).into();
        assert_eq!(kind_of(&format), ErrorKind::Usage);
        assert_eq!(report_error(&format).code(), 1);
        let other = anyhow::anyhow!("base/main.yaml:3: unknown field `mdoe`");
        assert_eq!(kind_of(&other), ErrorKind::Failed);
        assert_eq!(report_error(&other).code(), 1);
    }
}

#[cfg(test)]
mod text_tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot listen on 127.0.0.1:9477: {source}")]
    struct Listen {
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn a_cause_the_message_already_says_is_not_repeated() {
        // `datum agent` on a taken port printed its reason twice.
        let taken = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let said = taken.to_string();
        let err = anyhow::Error::new(Listen { source: taken });
        assert_eq!(
            error_text(&err),
            format!("error: cannot listen on 127.0.0.1:9477: {said}")
        );
        // A cause the message does not say is still printed.
        let other = anyhow::anyhow!("no datum.yaml").context("cannot load the repository");
        assert_eq!(
            error_text(&other),
            "error: cannot load the repository\n  caused by: no datum.yaml"
        );
    }
}
