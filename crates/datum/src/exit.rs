//! Exit codes, decided in one place: every way `datum` ends is an
//! [`ExitCode`] (what the command concluded) or an [`ErrorKind`] (what kind
//! of error stopped it), and [`ExitCode::code`] is the only table from either
//! to a number. The table in the README ("Exit codes") is this one.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | nothing to do, nothing changed, no drift; `--help`, `--version`; a reader that closed stdout (`datum plan \| head`) |
//! | 2 | changes: pending (`plan`), applied (`apply`), drift or quarantine (`check`), a new revision deployed (`pull`), reports queued (`outbox`) |
//! | 4 | failures: some change failed (`apply`) or would fail (`plan`: validation, a missing validator binary); an apply the state store could not record (its fleet report is lost with the record) |
//! | 6 | both 2 and 4 |
//! | 1 | an error: a usage error (clap's own exit code 2 would read as "changes" to a script), a format the command has no form in, or any failure before or outside the resources (a manifest error, a lock, the state store, a resource that could not be checked) |
//!
//! `apply` and `plan` follow Puppet's detailed exit codes.

use std::io::Write;

/// What a command concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Nothing to do, nothing changed, no drift.
    Clean,
    /// Changes pending or made, drift found, a revision deployed.
    Changes,
    /// Some change failed or would fail.
    Failures,
    /// [`ExitCode::Changes`] and [`ExitCode::Failures`].
    ChangesAndFailures,
    /// An error of this kind.
    Error(ErrorKind),
}

/// The kinds of error, each with its exit code (in [`ExitCode::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// `--help` or `--version`: clap's "errors" that are not errors.
    Help,
    /// The command line: an unknown option, a bad value, a format the
    /// command has no form in.
    Usage,
    /// The reader closed stdout: their choice, not a failure.
    ClosedOutput,
    /// Anything else that stopped the command (input, state, a lock, a
    /// check that could not run), with nothing applied.
    Failed,
}

impl ExitCode {
    /// Shorthand for the most common error.
    pub const ERROR: ExitCode = ExitCode::Error(ErrorKind::Failed);

    /// The number the process exits with: the one table (see the module).
    pub fn code(self) -> i32 {
        match self {
            ExitCode::Clean => 0,
            ExitCode::Changes => 2,
            ExitCode::Failures => 4,
            ExitCode::ChangesAndFailures => 6,
            ExitCode::Error(kind) => match kind {
                ErrorKind::Help | ErrorKind::ClosedOutput => 0,
                ErrorKind::Usage | ErrorKind::Failed => 1,
            },
        }
    }

    /// Puppet-style code for an apply (and a plan: failures that would happen).
    pub fn for_apply(changed: bool, failed: bool) -> ExitCode {
        match (changed, failed) {
            (false, false) => ExitCode::Clean,
            (true, false) => ExitCode::Changes,
            (false, true) => ExitCode::Failures,
            (true, true) => ExitCode::ChangesAndFailures,
        }
    }

    /// The code of an apply whose pass the state store could not record (a
    /// full file system, a store that failed mid-pass): nothing says the
    /// host changed but this run (the fleet report is queued with the
    /// record, so the server never hears of it, and what it verified is
    /// observed again), so the loss counts as a failure: 4, or 6 with
    /// changes, never a clean 0 or 2.
    pub fn unrecorded(self) -> ExitCode {
        match self {
            ExitCode::Clean | ExitCode::Failures => ExitCode::Failures,
            ExitCode::Changes | ExitCode::ChangesAndFailures => ExitCode::ChangesAndFailures,
            error @ ExitCode::Error(_) => error,
        }
    }

    /// Code for a dry run or a drift check.
    pub fn for_pending(pending: bool) -> ExitCode {
        if pending {
            ExitCode::Changes
        } else {
            ExitCode::Clean
        }
    }
}

/// A check's conclusion (`datum check`, `datum agent --once`): drift is 2, as
/// changes pending are; anything that could not be checked is an error, 1.
impl From<datum_agent::Conclusion> for ExitCode {
    fn from(conclusion: datum_agent::Conclusion) -> ExitCode {
        match conclusion {
            datum_agent::Conclusion::Clean => ExitCode::Clean,
            datum_agent::Conclusion::Drift => ExitCode::Changes,
            datum_agent::Conclusion::Errors => ExitCode::ERROR,
        }
    }
}

impl From<ExitCode> for i32 {
    fn from(code: ExitCode) -> i32 {
        code.code()
    }
}

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
    let code = ExitCode::Error(kind_of_usage(&err));
    if usage.json && code.code() == 1 {
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
    std::process::exit(code.code())
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
        && code.code() == 1
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
    use datum_agent::Conclusion;
    use datum_report::render::{Format, Unsupported};

    use super::*;

    #[test]
    fn exit_0_nothing_to_do_help_and_a_closed_pipe() {
        assert_eq!(ExitCode::Clean.code(), 0);
        assert_eq!(ExitCode::for_apply(false, false).code(), 0);
        assert_eq!(ExitCode::for_pending(false).code(), 0);
        assert_eq!(ExitCode::from(Conclusion::Clean).code(), 0);
        let pipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("cannot write the plan");
        assert_eq!(report_error(&pipe).code(), 0);
        let help = crate::cli::Cli::try_parse_from(["datum", "--help"]).unwrap_err();
        assert_eq!(ExitCode::Error(kind_of_usage(&help)).code(), 0);
        let version = crate::cli::Cli::try_parse_from(["datum", "--version"]).unwrap_err();
        assert_eq!(ExitCode::Error(kind_of_usage(&version)).code(), 0);
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
        assert_eq!(ExitCode::ERROR.code(), 1);
        assert_eq!(ExitCode::from(Conclusion::Errors).code(), 1);
    }

    #[test]
    fn a_check_exits_with_the_number_its_pass_is_recorded_with() {
        // The state store's pass record and the fleet report carry a
        // check's conclusion as `Conclusion::code`; the process exits with
        // this table's number: the two agree for every conclusion.
        for conclusion in [Conclusion::Clean, Conclusion::Drift, Conclusion::Errors] {
            assert_eq!(ExitCode::from(conclusion).code(), conclusion.code());
        }
    }

    #[test]
    fn exit_2_changes_or_drift() {
        assert_eq!(ExitCode::for_apply(true, false).code(), 2);
        assert_eq!(ExitCode::for_pending(true).code(), 2);
        assert_eq!(ExitCode::from(Conclusion::Drift).code(), 2);
    }

    #[test]
    fn exit_4_failures() {
        assert_eq!(ExitCode::for_apply(false, true).code(), 4);
        // An apply the state store could not record.
        assert_eq!(ExitCode::for_apply(false, false).unrecorded().code(), 4);
        assert_eq!(ExitCode::for_apply(false, true).unrecorded().code(), 4);
    }

    #[test]
    fn exit_6_changes_and_failures() {
        assert_eq!(ExitCode::for_apply(true, true).code(), 6);
        assert_eq!(ExitCode::for_apply(true, false).unrecorded().code(), 6);
        assert_eq!(ExitCode::ERROR.unrecorded().code(), 1);
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
