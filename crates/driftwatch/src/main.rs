//! The `driftwatch` binary: real arguments, real processes, real streams. Everything else
//! is in the library so tests can drive it.

#![allow(
    clippy::disallowed_methods,
    reason = "driftwatch reads OpenTofu/Terraform plan JSON and writes the reports and history files its operator names, runs tofu/terraform on a CI runner, and never manages a host's files as root: the host boundary that clippy.toml enforces is not its concern"
)]

use std::process::ExitCode;

// `report` on a big plan pair allocates and frees an entry's strings and vectors by the
// hundred thousand, on two threads at once: with mimalloc the 100,000-resource pair took
// 1.44 CPU s against 1.68 with the system allocator (docs/benchmarks.md, "driftwatch").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Small pages, before the first allocation: with mimalloc's huge pages the
    // 100,000-resource pair took 158 MiB and 0.99 s, without 148 MiB and 0.82 s (median
    // of 5 alternating runs, docs/benchmarks.md "driftwatch"). Ignored where the kernel
    // lacks the flag.
    let _ = datum_host::memory::avoid_huge_pages();
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let mut out = stdout.lock();
    let mut err = stderr.lock();
    let mut io = driftwatch::cli::Io {
        stdout: &mut out,
        stderr: &mut err,
        stdout_is_terminal: driftwatch::cli::stdout_is_terminal(),
    };
    let code = driftwatch::cli::main_with(
        std::env::args().collect(),
        &driftwatch::runner::ProcessRunner,
        &mut io,
    );
    ExitCode::from(code)
}
