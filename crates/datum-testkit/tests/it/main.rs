//! The test kit's own helpers, run inside the test bed.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a failed step must stop the test"
)]

use std::process::Command;

use datum_testkit::apt::{DebPackage, LocalRepo};
use datum_testkit::testbed::{SKIP_MESSAGE, Testbed, within};
use datum_testkit::testbed_test;

#[test]
fn files_written_from_here_are_seen_inside() {
    let Some(testbed) = Testbed::from_env() else {
        println!("{SKIP_MESSAGE}");
        return;
    };
    testbed.write("/run/datum-testkit-probe/hello", "from the host\n");
    let out = testbed.run("cat", ["/run/datum-testkit-probe/hello"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from the host\n");
    assert_eq!(
        testbed.systemctl(&["is-enabled", "nginx.service"]).trim(),
        "enabled"
    );
    std::fs::remove_dir_all(testbed.host_path("/run/datum-testkit-probe")).unwrap();
}

testbed_test!(the_body_runs_inside_the_container, {
    // Only the test bed's /etc has the marker, and PID 1 is its systemd.
    assert!(std::path::Path::new(datum_testkit::testbed::MARKER).is_file());
    let comm = std::fs::read_to_string("/proc/1/comm").unwrap();
    assert_eq!(comm.trim(), "systemd");
    let state = within::systemctl(&["is-system-running"]);
    let state = String::from_utf8_lossy(&state.stdout);
    assert!(
        ["running", "degraded"].contains(&state.trim()),
        "system state {state}"
    );
});

testbed_test!(a_local_repository_installs_without_a_network, {
    let _apt = within::lock("apt");
    let repo = LocalRepo::publish(
        "kit-selftest",
        &[DebPackage::new("datum-kit-dummy", "1.0-1")
            .file("/usr/share/datum-kit-dummy/hello", "hello\n")],
    );
    let out = Command::new("apt-get")
        .args(["install", "-y", "-qq", "datum-kit-dummy"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string("/usr/share/datum-kit-dummy/hello").unwrap(),
        "hello\n"
    );
    let version = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", "datum-kit-dummy"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&version.stdout), "1.0-1");
    let purge = Command::new("dpkg")
        .args(["--purge", "datum-kit-dummy"])
        .output()
        .unwrap();
    assert!(purge.status.success());
    drop(repo);
    assert!(
        !std::path::Path::new("/etc/apt/sources.list.d/datum-testkit-kit-selftest.list").exists()
    );
});
