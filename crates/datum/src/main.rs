//! `datum`: the host side of Datum.
//!
//! This file is the table of contents: parse the command line, run one
//! command, turn its result into an exit code. Each command is an args struct
//! plus one function in `commands/`; a pass's and a check's reports leave
//! through `render::print` (`render/`), while the other commands (`lint`,
//! `backup`, `pull`, `fleet`, `server`, `schedule`, ...) still write their own
//! text and JSON, each choosing between them after `commands::formats` has
//! accepted the format; exit codes are decided in `exit.rs` only.

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

mod agent;
mod allocator;
mod background;
mod cli;
mod commands;
mod config;
mod context;
mod exit;
mod logging;
mod render;
mod reporting;

fn main() {
    // Small pages for the whole process, before the first allocation:
    // mimalloc advises its arena for transparent huge pages, and each 2 MiB
    // region touched would then stay resident whole. Without them the peak
    // memory of every command falls by 7-37% (docs/benchmarks.md, "Small
    // pages"), for a few per cent more page faults. A kernel without the
    // flag changes nothing, so a failure is ignored.
    let _ = datum_host::memory::avoid_huge_pages();
    // Room for a pass's folder handles, made while this is the only thread
    // (see the function: growing it later makes the threads wait).
    datum_host::descriptors::make_room_before_threads(datum_host::descriptors::ROOM);
    // The soft limit of open files is left as it came (no raise): the
    // programs a pass starts inherit it, and a pass shares it, less a
    // reserve, between its folder handles, the folders owed an fsync and
    // the copies staged ahead (datum_host::descriptors::Budget).
    // Freed memory back to the system within 10 ms (see allocator.rs).
    allocator::configure();
    // The command line, with this machine's /etc/datum/datum.toml as its
    // defaults (flag > environment > file > built-in).
    let mut cli = match config::parse() {
        Ok(Ok(cli)) => cli,
        Ok(Err(usage)) => exit::usage_error(usage),
        // The defaults file is unusable: JSON only when a flag asks for it.
        Err(e) => {
            let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
            let format = if config::asks_for_json(&args, false) {
                cli::Format::Json
            } else {
                cli::Format::Human
            };
            std::process::exit(exit::report_error_as(&e.into(), format, "datum").into())
        }
    };
    if cli.global.json {
        cli.global.output = cli::Format::Json;
    }
    let default_level = if matches!(cli.command, cli::Command::Agent(_)) {
        // The watch library's info events are its own bookkeeping (a watch
        // of a replaced inode that is gone already), not the operator's.
        "info,notify=warn"
    } else {
        "warn"
    };
    logging::init(
        cli.global.log_level.as_deref(),
        cli.global.log_format,
        default_level,
    );
    // Under `--output json` an error is also one JSON document on stdout
    // (`exit::report_error_as`).
    let command = commands::name(&cli.command);
    let command = command.strip_prefix("datum ").unwrap_or(&command);
    if let Err(err) = context::absolutize(&mut cli.global) {
        std::process::exit(exit::report_error_as(&err, cli.global.output, command).into());
    }
    let code = match commands::run(&cli) {
        Ok(code) => code,
        Err(err) => exit::report_error_as(&err, cli.global.output, command),
    };
    // What the command left to finish (a snapshot's commit), before exiting.
    background::finish();
    allocator::before_exit();
    std::process::exit(code.into());
}
