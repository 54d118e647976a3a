//! Benchmark (not a test): what the throwaway sandbox costs a validator call.
//!
//! For every shipped validator that runs a program, a valid configuration
//! under a temporary root is validated `RUNS` times sandboxed and `RUNS` times
//! unsandboxed, interleaved (so a change in the machine's load hits both
//! alike), in this process (no start-up of `datum` in either number). Prints
//! per validator the median and min-max of both, and the median overhead.
//! Run by `bench/validators.sh` (as root: the sandbox needs it).
//!
//!     cargo run --release -p datum-providers --example validator_sandbox -- [RUNS]

#![allow(
    clippy::disallowed_methods,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that builds its fixtures on disk and stops at the first surprise"
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use datum_host::Host;
use datum_host::sandbox::{Isolation, Sandbox};
use datum_providers::Staged;
use datum_providers::validators::{self, Scope, validate_group_in, validate_staged_in};

/// A validator and the configuration it is timed on.
struct Case {
    name: &'static str,
    /// File validators: the declared path and the content; group ones:
    /// files to write under the root (`{r}` is the root's path).
    files: Vec<(&'static str, String, u32)>,
}

fn cases() -> Vec<Case> {
    let nginx = "pid {r}/run/nginx.pid;\nerror_log {r}/var/log/nginx/error.log;\nevents { worker_connections 64; }\nhttp {\n  access_log {r}/var/log/nginx/access.log;\n  client_body_temp_path {r}/var/lib/nginx/body;\n  include {r}/etc/nginx/sites-enabled/*.conf;\n}\n";
    vec![
        Case {
            name: "sshd",
            files: vec![("/etc/ssh/sshd_config", "Port 22\nPermitRootLogin no\n".into(), 0o600)],
        },
        Case {
            name: "sudoers",
            files: vec![("/etc/sudoers.d/ops", "%ops ALL=(root) /usr/bin/apt-get\n".into(), 0o440)],
        },
        Case {
            name: "systemd-unit",
            files: vec![(
                "/etc/systemd/system/datum-bench.service",
                "[Unit]\nDescription=bench\n\n[Service]\nExecStart=/bin/true\n".into(),
                0o644,
            )],
        },
        Case {
            name: "nftables",
            files: vec![(
                "/etc/nftables.conf",
                "table inet datum_bench {\n  chain input {\n    type filter hook input priority 0; policy accept;\n  }\n}\n".into(),
                0o644,
            )],
        },
        Case {
            name: "haproxy",
            files: vec![(
                "/etc/haproxy/haproxy.cfg",
                "global\n  maxconn 100\ndefaults\n  mode http\n  timeout connect 1s\n  timeout client 1s\n  timeout server 1s\nfrontend web\n  bind 127.0.0.1:8089\n  default_backend app\nbackend app\n  server a1 127.0.0.1:8090\n".into(),
                0o644,
            )],
        },
        Case {
            name: "logrotate",
            files: vec![(
                "/etc/logrotate.d/app",
                "/var/log/datum-bench/*.log {\n  daily\n  rotate 2\n  missingok\n}\n".into(),
                0o644,
            )],
        },
        Case {
            name: "nginx",
            files: vec![
                ("/etc/nginx/nginx.conf", nginx.into(), 0o644),
                (
                    "/etc/nginx/sites-enabled/shop.conf",
                    "server {\n  listen 127.0.0.1:8099;\n  location / { return 200 \"ok\"; }\n}\n".into(),
                    0o644,
                ),
            ],
        },
        Case {
            name: "apache2",
            files: vec![
                (
                    "/etc/apache2/apache2.conf",
                    "ServerName localhost\nListen 127.0.0.1:8098\nPidFile {r}/run/apache2.pid\nErrorLog {r}/var/log/apache2/error.log\nLoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so\nIncludeOptional conf-enabled/*.conf\n".into(),
                    0o644,
                ),
                ("/etc/apache2/conf-enabled/site.conf", "Timeout 30\n".into(), 0o644),
            ],
        },
    ]
}

fn write(root: &Path, declared: &str, text: &str, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = root.join(declared.trim_start_matches('/'));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(15);
    assert!(
        matches!(datum_host::sandbox::isolation(), Ok(Isolation::Sandboxed)),
        "run as root: the sandbox needs it"
    );
    println!(
        "| validator | unsandboxed ms, median [min-max] | sandboxed ms, median [min-max] | overhead ms (median of pairs) |"
    );
    println!("| --- | --- | --- | --- |");
    for case in cases() {
        let def = validators::lookup(case.name).unwrap();
        let Some(binary) = def.binary else { continue };
        if datum_host::command::which(binary).is_none() {
            println!("| {} | (not installed) | | |", case.name);
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let r = root.display().to_string();
        let mut staged = Vec::new();
        for (declared, text, mode) in &case.files {
            let text = text.replace("{r}", &r);
            staged.push((write(&root, declared, &text, *mode), text, *mode));
        }
        for d in [
            "run",
            "var/log/nginx",
            "var/lib/nginx/body",
            "var/log/apache2",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let host = Host::with_name(&root, "bench");
        let once = |isolation: Isolation| -> Duration {
            let t0 = Instant::now();
            let verdict = match def.scope {
                Scope::File => {
                    let (path, text, mode) = &staged[0];
                    let s = Staged {
                        path,
                        bytes: text.as_bytes(),
                        mode: *mode,
                        uid: None,
                        gid: None,
                    };
                    validate_staged_in(def, &host, &s, isolation)
                }
                Scope::Group => validate_group_in(def, &host, isolation, &Sandbox::new()),
            };
            let took = t0.elapsed();
            if let Err(r) = verdict {
                panic!("{}: {}\n{}", case.name, r.summary(), r.output);
            }
            took
        };
        for _ in 0..2 {
            once(Isolation::Sandboxed);
            once(Isolation::Unsandboxed);
        }
        let (mut plain, mut boxed, mut diff) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let p = once(Isolation::Unsandboxed);
            let b = once(Isolation::Sandboxed);
            diff.push(b.saturating_sub(p));
            plain.push(p);
            boxed.push(b);
        }
        let (pmin, pmax) = (*plain.iter().min().unwrap(), *plain.iter().max().unwrap());
        let (bmin, bmax) = (*boxed.iter().min().unwrap(), *boxed.iter().max().unwrap());
        println!(
            "| {} | {} [{}-{}] | {} [{}-{}] | {} |",
            case.name,
            ms(median(&mut plain)),
            ms(pmin),
            ms(pmax),
            ms(median(&mut boxed)),
            ms(bmin),
            ms(bmax),
            ms(median(&mut diff)),
        );
    }
}
