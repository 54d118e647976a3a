//! `datum`: the host side of Datum.
//!
//! This file is the table of contents: parse the command line, run one
//! command, turn its result into an exit code. Each command is an args struct
//! plus one function in `commands/`; everything a person reads is produced in
//! `render/`; exit codes are decided in `exit.rs` only.

mod agent;
mod cli;
mod commands;
mod context;
mod exit;
mod render;

use clap::Parser;

fn main() {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => exit::usage_error(e),
    };
    let code = match commands::run(&cli) {
        Ok(code) => code,
        Err(err) => exit::report_error(&err),
    };
    std::process::exit(code.into());
}
