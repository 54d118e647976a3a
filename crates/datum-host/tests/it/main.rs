//! Integration tests for machine access that need more than one process.
//!
//! The crash test re-runs this test binary as a child that keeps replacing a
//! file through staging, kills it with SIGKILL at varying moments, and checks
//! the guarantee staging exists for: the target is always one complete
//! version, never empty or partial, and the next pass removes the leftovers.
//! [`fingerprint`] scans real trees for their Merkle fingerprints.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly at the first surprise"
)]

mod fingerprint;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use datum_host::Host;
use datum_host::staging::{STAGE_PREFIX, cleanup_stale};

const CHILD_ENV: &str = "DATUM_HOST_CRASH_CHILD";
const SIZE: usize = 256 * 1024;

fn version(n: u8) -> Vec<u8> {
    vec![b'a' + n % 26; SIZE]
}

/// In the child: replace the target forever, alternating versions.
fn write_forever(target: &Path) -> ! {
    let host = Host::new(target.parent().unwrap());
    let at = host
        .locate(&Path::new("/").join(target.file_name().unwrap()))
        .unwrap();
    let mut n: u8 = 1;
    loop {
        let mut staged = at.stage_file().unwrap();
        // Written in pieces, so a kill can land mid-write.
        for chunk in version(n).chunks(4096) {
            staged.write_all(chunk).unwrap();
        }
        staged.set_mode(0o644).unwrap();
        staged.commit().unwrap();
        n = n.wrapping_add(1);
    }
}

#[test]
fn a_killed_writer_never_leaves_a_partial_target() {
    if let Some(target) = std::env::var_os(CHILD_ENV) {
        write_forever(Path::new(&target));
    }
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("big.conf");
    std::fs::write(&target, version(0)).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut seen = std::collections::BTreeSet::new();

    for round in 0..15u64 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "a_killed_writer_never_leaves_a_partial_target",
                "--nocapture",
            ])
            .env(CHILD_ENV, &target)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Varying moments: start-up, mid-write, mid-rename.
        std::thread::sleep(Duration::from_millis(5 + (round * 7) % 40));
        child.kill().unwrap();
        child.wait().unwrap();

        let bytes = std::fs::read(&target).unwrap();
        assert_eq!(bytes.len(), SIZE, "round {round}: partial target");
        assert!(
            bytes.iter().all(|b| *b == bytes[0]),
            "round {round}: mixed versions"
        );
        seen.insert(bytes[0]);
    }
    assert!(
        seen.len() > 1,
        "the child never replaced the file: {seen:?}"
    );

    cleanup_stale(&datum_host::Dir::open_path(dir.path()).unwrap()).unwrap();
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(STAGE_PREFIX))
        .collect();
    assert!(left.is_empty(), "staging left after cleanup: {left:?}");
}
