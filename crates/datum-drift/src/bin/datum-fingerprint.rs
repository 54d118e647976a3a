//! `datum-fingerprint`: prints a tree's Merkle fingerprint; the benchmark's entry point
//! until `datum fingerprint` exposes the same function.
//!
//! Owns: argument parsing and output for this one tool. Must not: contain fingerprint
//! logic (that is `datum_drift::fingerprint`).
//!
//! ```text
//! datum-fingerprint [--compat] [--threads N] [--exclude RULE]... [-v] [--stats] PATH
//! ```
//! Exit 0 with the root hash on stdout; 1 on an error (printed with its cause chain);
//! 2 on a usage error.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use datum_drift::fingerprint::{Algorithm, Exclusions, ScanOptions, scan};

const USAGE: &str =
    "usage: datum-fingerprint [--compat] [--threads N] [--exclude RULE]... [-v] [--stats] PATH";

struct Args {
    path: PathBuf,
    algorithm: Algorithm,
    threads: usize,
    exclude: Vec<String>,
    verbose: bool,
    stats: bool,
}

fn parse(mut argv: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut path = None;
    let mut args = Args {
        path: PathBuf::new(),
        algorithm: Algorithm::Native,
        threads: 0,
        exclude: Vec::new(),
        verbose: false,
        stats: false,
    };
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "--compat" => args.algorithm = Algorithm::Compat,
            "--native" => args.algorithm = Algorithm::Native,
            "-v" | "--verbose" => args.verbose = true,
            "--stats" => args.stats = true,
            "--threads" | "-j" => {
                let n = argv.next().ok_or("--threads needs a number")?;
                args.threads = n
                    .parse()
                    .map_err(|_| format!("--threads: not a number: {n}"))?;
            }
            "--exclude" => args
                .exclude
                .push(argv.next().ok_or("--exclude needs a rule")?),
            "-h" | "--help" => return Err(String::new()),
            other if other.starts_with('-') && other != "-" => {
                return Err(format!("unknown option {other}"));
            }
            other => {
                if path.replace(PathBuf::from(other)).is_some() {
                    return Err("only one PATH".into());
                }
            }
        }
    }
    args.path = path.ok_or("missing PATH")?;
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("datum-fingerprint: {msg}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = format!("datum-fingerprint: {e}");
            let mut cause = std::error::Error::source(&*e);
            while let Some(c) = cause {
                msg.push_str(&format!(": {c}"));
                cause = c.source();
            }
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let exclude = if args.exclude.is_empty() {
        None
    } else {
        Some(Exclusions::new(&args.exclude)?)
    };
    let opts = ScanOptions {
        algorithm: args.algorithm,
        exclude,
        threads: args.threads,
        progress: None,
    };
    let started = std::time::Instant::now();
    let scanned = scan(&args.path, &opts)?;
    let elapsed = started.elapsed();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let written = (|| -> std::io::Result<()> {
        if args.verbose {
            for (path, node) in scanned.tree.walk() {
                let shown = if path.as_os_str().is_empty() {
                    std::path::Path::new(".")
                } else {
                    path.as_path()
                };
                out.write_all(node.hash.to_string().as_bytes())?;
                out.write_all(b"  ")?;
                out.write_all(std::os::unix::ffi::OsStrExt::as_bytes(shown.as_os_str()))?;
                out.write_all(b"\n")?;
            }
        }
        writeln!(out, "{}", scanned.root_hash())?;
        out.flush()
    })();
    match written {
        Ok(()) => {}
        // A closed pipe (`| head`) is the reader's choice, not a failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    if args.stats {
        let s = scanned.stats;
        eprintln!(
            "{} files, {} dirs, {} other, {} excluded, {} bytes in {:.3} s ({} algorithm)",
            s.files,
            s.dirs,
            s.others,
            s.excluded,
            s.bytes,
            elapsed.as_secs_f64(),
            args.algorithm
        );
    }
    Ok(())
}
