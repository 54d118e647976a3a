//! The Debian package `scripts/package` builds, installed with dpkg on a
//! clean Debian root (the systemd-nspawn test bed): its files where Debian
//! puts them, no unit enabled or started by the install, the agent's unit
//! started from it with `systemctl start`, the fleet server's unit running
//! as the package's system user, and a purge that takes it all away.
//!
//! The package is built once per run by `scripts/test` (a release build)
//! and named by `DATUM_TEST_DEB`; it must sit under the target directory,
//! the only part of this machine the test bed sees. Without it the test
//! skips, and fails where the test bed is required
//! (`DATUM_TESTBED_REQUIRED=1`, CI as root): CI cannot pass by skipping.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests inspect results on disk directly and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is the test failing, with its message"
)]

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use datum_testkit::testbed::{self, within};

/// Names the `.deb` under test (set by `scripts/test`).
const DEB_VAR: &str = "DATUM_TEST_DEB";

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

fn run_ok(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {}: {}\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_for(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

fn journal(unit: &str) -> String {
    let out = run("journalctl", &["--no-pager", "-u", unit, "-n", "40"]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The section names of a 64-bit little-endian ELF file (the test bed has
/// no readelf).
fn elf_sections(elf: &[u8]) -> Vec<String> {
    let u16_at = |o: usize| usize::from(u16::from_le_bytes([elf[o], elf[o + 1]]));
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(
        &elf[..6],
        b"\x7fELF\x02\x01",
        "not a 64-bit little-endian ELF file"
    );
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let names = u64_at(header(shstrndx) + 0x18);
    (0..shnum)
        .map(|i| {
            let start = names + u32_at(header(i));
            let end = start + elf[start..].iter().position(|b| *b == 0).unwrap();
            String::from_utf8_lossy(&elf[start..end]).into_owned()
        })
        .collect()
}

/// Purges the package and what the test wrote, pass or fail.
struct Purge;

impl Drop for Purge {
    fn drop(&mut self) {
        let _ = run(
            "systemctl",
            &["stop", "datum-agent.service", "datum-server.service"],
        );
        let _ = run("dpkg", &["--purge", "datum"]);
        for p in ["/etc/datum", "/var/lib/datum", "/var/lib/datum-server"] {
            let _ = std::fs::remove_dir_all(p);
        }
        let _ = run("systemctl", &["reset-failed"]);
    }
}

/// The package under test, from the environment: `None` (skip) when it is
/// not named and nothing requires it.
fn package() -> Option<String> {
    match std::env::var(DEB_VAR).ok().filter(|v| !v.is_empty()) {
        Some(deb) => Some(deb),
        None => {
            assert!(
                std::env::var_os(testbed::REQUIRED_VAR).is_none_or(|v| v != "1"),
                "{}=1 but {DEB_VAR} is unset: build the package with scripts/package and name it there",
                testbed::REQUIRED_VAR
            );
            println!("skipped: {DEB_VAR} is unset (scripts/package builds the .deb)");
            None
        }
    }
}

#[test]
fn the_package_installs_on_a_clean_debian_and_its_agent_unit_starts() {
    if !testbed::inside() && package().is_none() {
        return;
    }
    testbed::run_inside(
        &testbed::test_name(
            module_path!(),
            "the_package_installs_on_a_clean_debian_and_its_agent_unit_starts",
        ),
        inside,
    );
}

fn inside() {
    let deb = std::env::var(DEB_VAR).unwrap();
    assert!(
        Path::new(&deb).is_file(),
        "{deb} is not reachable in the test bed (only the target directory is): build it with scripts/package"
    );
    // The agent's name and port are shared with agent.rs's unit test.
    let _lock = within::lock("datum-agent-unit");
    assert!(
        run("dpkg-query", &["-W", "datum"]).stdout.is_empty(),
        "datum is installed in the test bed already"
    );
    let _purge = Purge;
    run_ok("dpkg", &["--install", &deb]);

    // Where Debian puts things.
    for path in [
        "/usr/bin/datum",
        "/usr/lib/systemd/system/datum-agent.service",
        "/usr/lib/systemd/system/datum-pull.service",
        "/usr/lib/systemd/system/datum-pull.timer",
        "/usr/lib/systemd/system/datum-server.service",
        "/usr/share/man/man1/datum.1.gz",
        "/usr/share/man/man1/datum-agent.1.gz",
        "/usr/share/bash-completion/completions/datum",
        "/usr/share/zsh/vendor-completions/_datum",
        "/usr/share/fish/vendor_completions.d/datum.fish",
        "/usr/share/datum/prometheus/datum.rules.yml",
        "/usr/share/datum/prometheus/datum-server.rules.yml",
        "/usr/share/doc/datum/agent.md",
        "/usr/share/doc/datum/copyright",
        "/etc/datum/datum.toml",
    ] {
        assert!(Path::new(path).is_file(), "{path} is not installed");
    }
    let conffiles = run_ok(
        "dpkg-query",
        &["--showformat=${Conffiles}", "--show", "datum"],
    );
    assert!(conffiles.contains("/etc/datum/datum.toml"), "{conffiles}");
    // Stripped: the debug symbols went to the -dbgsym package, and the
    // binary names them (.gnu_debuglink) instead.
    let sections = elf_sections(&std::fs::read("/usr/bin/datum").unwrap());
    assert!(
        !sections
            .iter()
            .any(|s| s == ".debug_info" || s == ".debug_line"),
        "{sections:?}"
    );
    assert!(
        sections.iter().any(|s| s == ".gnu_debuglink"),
        "{sections:?}"
    );
    let version = run_ok("/usr/bin/datum", &["--version"]);
    assert!(version.starts_with("datum "), "{version}");
    // The shipped defaults file is read (every line a comment) and accepted.
    run_ok("/usr/bin/datum", &["validators"]);
    // Completions load in bash as installed.
    let complete = run_ok(
        "bash",
        &[
            "--noprofile",
            "--norc",
            "-c",
            "source /usr/share/bash-completion/completions/datum && complete -p datum",
        ],
    );
    assert!(complete.trim_end().ends_with(" datum"), "{complete}");

    // The system user is the fleet server's only, with no login.
    let user = run_ok("getent", &["passwd", "datum"]);
    assert!(
        user.trim_end()
            .ends_with(":/var/lib/datum-server:/usr/sbin/nologin"),
        "{user}"
    );
    let server_dir = std::fs::metadata("/var/lib/datum-server").unwrap();
    let uid: u32 = user.split(':').nth(2).unwrap().parse().unwrap();
    assert_eq!(server_dir.uid(), uid);
    assert_eq!(server_dir.mode() & 0o7777, 0o700);
    // Installing enables and starts nothing: every unit needs configuration.
    for unit in [
        "datum-agent.service",
        "datum-pull.timer",
        "datum-server.service",
    ] {
        assert_eq!(
            within::property(unit, "UnitFileState"),
            "disabled",
            "{unit}"
        );
        assert_eq!(within::property(unit, "ActiveState"), "inactive", "{unit}");
    }

    // The agent, as an operator starts it: a repository where the unit
    // reads it, this host's identity, then systemctl start.
    within::write(
        "/etc/datum/repository/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
    );
    within::write(
        "/etc/datum/repository/base/motd.yaml",
        "datum: v1alpha1\ntype: File\nname: deb-motd\ndesired:\n  path: /etc/datum-deb-test.motd\n  content: \"from the package\\n\"\n",
    );
    within::write("/etc/datum/host.yaml", "name: deb-test\nlabels: {}\n");
    within::systemctl_ok(&["start", "datum-agent.service"]);
    let serving = wait_for(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", 9477)).is_ok()
    });
    assert!(
        serving,
        "the agent does not serve:\n{}",
        journal("datum-agent.service")
    );
    assert_eq!(
        within::property("datum-agent.service", "ActiveState"),
        "active"
    );
    assert_eq!(
        within::property("datum-agent.service", "ExecMainPID"),
        within::property("datum-agent.service", "MainPID")
    );
    let metrics = within::http_get(9477, "/metrics");
    assert!(
        metrics.starts_with("HTTP/1.1 200") || metrics.starts_with("HTTP/1.0 200"),
        "{metrics}"
    );
    assert!(metrics.contains("datum_resources"), "{metrics}");
    within::systemctl_ok(&["stop", "datum-agent.service"]);
    assert_eq!(within::property("datum-agent.service", "Result"), "success");

    // The fleet server, as its unit's comment says: initialised as its
    // user, started, running as that user.
    run_ok(
        "runuser",
        &[
            "-u",
            "datum",
            "--",
            "/usr/bin/datum",
            "server",
            "init",
            "--dir",
            "/var/lib/datum-server",
            "--listen",
            "127.0.0.1:18443",
        ],
    );
    within::systemctl_ok(&["start", "datum-server.service"]);
    let up = wait_for(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", 18443)).is_ok()
    });
    assert!(
        up,
        "the server does not listen:\n{}",
        journal("datum-server.service")
    );
    let pid = within::property("datum-server.service", "MainPID");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid_line
            .split_whitespace()
            .skip(1)
            .all(|u| u == uid.to_string()),
        "the server does not run as datum: {uid_line}"
    );
    within::systemctl_ok(&["stop", "datum-server.service"]);

    // A purge takes the package away, its configuration included.
    run_ok("dpkg", &["--purge", "datum"]);
    for path in [
        "/usr/bin/datum",
        "/etc/datum/datum.toml",
        "/usr/lib/systemd/system/datum-agent.service",
    ] {
        assert!(!Path::new(path).exists(), "{path} is left after a purge");
    }
}

/// The server's unit, new with the package, passes `systemd-analyze verify`
/// like the agent's (agent.rs), without warnings.
#[test]
fn the_server_unit_verifies() {
    if !datum_testkit::tools::have("systemd-analyze", "systemd") {
        return;
    }
    let unit = include_str!("../../../deploy/systemd/datum-server.service");
    for option in [
        "User=datum",
        "NoNewPrivileges=true",
        "CapabilityBoundingSet=\n",
        "ProtectSystem=strict",
    ] {
        assert!(unit.contains(option), "the unit lost {option:?}");
    }
    // `verify` checks that ExecStart's program exists: the binary under test.
    assert!(unit.contains("ExecStart=/usr/local/bin/datum server serve"));
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("datum-server.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/datum", env!("CARGO_BIN_EXE_datum")),
    )
    .unwrap();
    let out = run("systemd-analyze", &["verify", copy.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("datum-server.service:"),
        "warnings: {stderr}"
    );
}
