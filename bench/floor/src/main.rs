//! The bare work under issue 17's goals, one pass per run (bench/floors.sh
//! times each run with timecmd.py, as it times datum):
//!
//!   datum-bench-floor read LIST          open and read every file named in
//!                                         LIST (one path per line)
//!   datum-bench-floor read-hash LIST     the same, and BLAKE3 of each file
//!   datum-bench-floor yaml PARSER FILE   every YAML event of FILE, with
//!                                         PARSER: saphyr (Datum's), yaml-rust2
//!                                         or libyaml-safer (a libyaml port)
//!
//! One thread, a 128 KiB buffer reused for every file (as Datum's observer
//! does); nothing is kept. Prints what it counted, so a run that did less
//! than asked shows.
// The workspace's rule that only datum-host touches the machine (clippy.toml,
// found from here too) is for Datum; this measuring tool is not part of it and
// reads the files it times itself.
#![allow(clippy::disallowed_methods)]

use std::io::Read as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["read", list] => read(list, false),
        ["read-hash", list] => read(list, true),
        ["yaml", parser, file] => yaml(parser, file),
        _ => Err("usage: datum-bench-floor read|read-hash LIST | yaml PARSER FILE".into()),
    };
    match result {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("datum-bench-floor: {e}");
            ExitCode::FAILURE
        }
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn read(list: &str, hash: bool) -> Result<String> {
    let list = std::fs::read_to_string(list)?;
    let mut buf = vec![0u8; 128 * 1024];
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut digest = [0u8; 32];
    for path in list.lines().filter(|l| !l.is_empty()) {
        let mut file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
        let mut hasher = blake3::Hasher::new();
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
            if hash {
                hasher.update(&buf[..n]);
            }
        }
        if hash {
            // Folded together so the hashing cannot be optimised away.
            for (d, b) in digest.iter_mut().zip(hasher.finalize().as_bytes()) {
                *d ^= b;
            }
        }
        files += 1;
    }
    Ok(format!(
        "{files} files, {bytes} bytes, xor of digests {}",
        hex(&digest)
    ))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn yaml(parser: &str, file: &str) -> Result<String> {
    let text = std::fs::read_to_string(file)?;
    let events = match parser {
        "saphyr" => {
            let mut p = saphyr_parser::Parser::new_from_str(&text);
            let mut n = 0u64;
            while let Some(event) = p.next_event() {
                event?;
                n += 1;
            }
            n
        }
        "yaml-rust2" => {
            let mut p = yaml_rust2::parser::Parser::new_from_str(&text);
            let mut n = 0u64;
            loop {
                let (event, _) = p.next_token()?;
                n += 1;
                if event == yaml_rust2::parser::Event::StreamEnd {
                    break n;
                }
            }
        }
        "libyaml-safer" => {
            let mut input = text.as_bytes();
            let mut p = libyaml_safer::Parser::new();
            p.set_input_string(&mut input);
            let mut n = 0u64;
            for event in &mut p {
                event?;
                n += 1;
            }
            n
        }
        other => return Err(format!("unknown parser {other}").into()),
    };
    Ok(format!("{parser}: {events} events in {} bytes", text.len()))
}
