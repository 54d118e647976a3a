//! Exit codes, decided in one place.
//!
//! `plan`: 0 nothing to do, 2 changes pending, 4 some change would fail
//! (validation, a missing validator binary), 6 both.
//! `check`: 0 nothing to do, 2 drift found.
//! `pull`: 0 the deployed revision is current, 2 a new revision was
//! deployed, 1 refused or failed (nothing changed).
//! `apply`: Puppet's detailed exit codes: 0 nothing changed, 2 changes
//! applied, 4 failures, 6 changes and failures.
//! 1 for every error before any resource ran, usage errors included (clap's
//! own exit code 2 would read as "changes" to a script).

use std::io::Write;

/// A process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitCode(pub i32);

impl ExitCode {
    pub const CLEAN: ExitCode = ExitCode(0);
    pub const ERROR: ExitCode = ExitCode(1);
    pub const CHANGES: ExitCode = ExitCode(2);

    /// Puppet-style code for an apply.
    pub fn for_apply(changed: bool, failed: bool) -> ExitCode {
        ExitCode(i32::from(changed) * 2 + i32::from(failed) * 4)
    }

    /// Code for a dry run or a drift check.
    pub fn for_pending(pending: bool) -> ExitCode {
        if pending { Self::CHANGES } else { Self::CLEAN }
    }
}

impl From<ExitCode> for i32 {
    fn from(code: ExitCode) -> i32 {
        code.0
    }
}

/// Prints a clap error; help and version are not errors.
pub fn usage_error(err: clap::Error) -> ! {
    let _ = err.print();
    let code = match err.kind() {
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
        _ => 1,
    };
    std::process::exit(code)
}

/// Prints an error with its cause chain and returns exit 1. A broken pipe
/// (`datum plan | head`) is not an error.
pub fn report_error(err: &anyhow::Error) -> ExitCode {
    let broken_pipe = err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    });
    if broken_pipe {
        return ExitCode::CLEAN;
    }
    let mut stderr = anstream::stderr();
    let mut text = format!("error: {err}");
    for cause in err.chain().skip(1) {
        text.push_str(&format!("\n  caused by: {cause}"));
    }
    let _ = writeln!(stderr, "{text}");
    ExitCode::ERROR
}
