//! An apply killed with SIGKILL at random moments never leaves a target empty
//! or partial, a re-run converges, and no staging directory survives.

use std::collections::HashSet;
use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

const FILES: usize = 2000;
const DIRS: usize = 20;
/// Each kill lands somewhere in a full apply (a few seconds: every file is
/// fsynced before its rename), so the count is what the test's time allows.
const KILLS: usize = 8;

/// Content of file `i` in generation `g`: sizes vary so a torn write shows.
fn content(g: usize, i: usize) -> String {
    let filler = "x".repeat(200 + (i * 37 + g * 101) % 3000);
    format!("generation {g} file {i}\n{filler}\nend {g} {i}\n")
}

fn write_generation(s: &Sandbox, g: usize) {
    let mut docs = String::new();
    for i in 0..FILES {
        s.write(&format!("repo/base/files/f{i}"), &content(g, i));
        docs.push_str(&format!(
            "---\ndatum: v1alpha1\ntype: File\nname: f{i}\ndesired:\n  path: /data/d{}/f{i}\n  source: files/f{i}\n  mode: \"0644\"\n",
            i % DIRS
        ));
    }
    s.write("repo/base/main.yaml", &docs);
}

fn no_staging_left(s: &Sandbox) -> Vec<String> {
    s.files_under_root()
        .into_iter()
        .filter(|p| p.contains(".datum.stage."))
        .collect()
}

#[test]
fn sigkill_during_apply_never_leaves_a_partial_target() {
    let s = Sandbox::with_base("");
    for d in 0..DIRS {
        fs::create_dir_all(s.live(&format!("/data/d{d}"))).unwrap();
    }
    write_generation(&s, 0);
    let bin = assert_cmd::cargo::cargo_bin("datum");
    let apply = |s: &Sandbox| {
        let mut cmd = Command::new(&bin);
        cmd.arg("--repo")
            .arg(s.repo())
            .arg("--root")
            .arg(s.root())
            .arg("--host-file")
            .arg(s.dir.path().join("host.yaml"))
            .arg("apply")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    let t0 = Instant::now();
    assert_eq!(apply(&s).status().unwrap().code(), Some(2));
    let full = t0.elapsed();

    // Deterministic pseudo-random kill times over the length of a full apply.
    let mut seed: u64 = 0x5eed_da7a;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    let mut seen_generations = HashSet::from([0usize]);
    for g in 1..=KILLS {
        write_generation(&s, g);
        seen_generations.insert(g);
        let delay = Duration::from_micros(next() % (full.as_micros() as u64 + 1));
        let mut child = apply(&s).spawn().unwrap();
        std::thread::sleep(delay);
        child.kill().ok(); // SIGKILL
        child.wait().unwrap();

        for i in 0..FILES {
            let live = s.live(&format!("/data/d{}/f{i}", i % DIRS));
            let text =
                fs::read_to_string(&live).unwrap_or_else(|e| panic!("{}: {e}", live.display()));
            assert!(
                seen_generations.iter().any(|&g| text == content(g, i)),
                "kill {g} after {delay:?}: {} is partial or empty ({} bytes)",
                live.display(),
                text.len()
            );
        }
    }
    // The next pass converges and removes staging left by the killed ones.
    let last = apply(&s).status().unwrap().code();
    assert!(matches!(last, Some(0) | Some(2)), "{last:?}");
    assert_eq!(
        apply(&s).status().unwrap().code(),
        Some(0),
        "second pass after the kills is a no-op"
    );
    assert!(no_staging_left(&s).is_empty(), "{:?}", no_staging_left(&s));
    for i in 0..FILES {
        let live = s.live(&format!("/data/d{}/f{i}", i % DIRS));
        assert_eq!(fs::read_to_string(live).unwrap(), content(KILLS, i));
    }
}

/// An owner and a mode changed in place (the content as declared) pass
/// from the old state to the new without a state between that lets
/// someone read the file whom neither lets: svc:svc 0640 to web:web 0600
/// went through web:web 0640 (chown first, then chmod), where group web
/// reads it. A pass killed between the two left it so; so does a chmod
/// that fails after the chown, which this test makes happen: without
/// CAP_FOWNER, root may change the mode only of what it owns.
#[test]
fn an_owner_and_mode_changed_in_place_never_pass_through_a_looser_mix() {
    use std::os::unix::fs::MetadataExt as _;
    if !rustix::process::geteuid().is_root() {
        println!("skipped: needs root to give files away");
        return;
    }
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: app\ndesired:\n  path: /etc/app.conf\n  content: \"secret\\n\"\n  owner: web\n  group: web\n  mode: \"0600\"\n",
    );
    s.write(
        "root/etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nsvc:x:1234:1234::/:/bin/false\nweb:x:1235:1235::/:/bin/false\n",
    );
    s.write("root/etc/group", "root:x:0:\nsvc:x:1234:\nweb:x:1235:\n");
    let live = s.write("root/etc/app.conf", "secret\n");
    rustix::fs::chown(
        &live,
        Some(rustix::fs::Uid::from_raw(1234)),
        Some(rustix::fs::Gid::from_raw(1234)),
    )
    .unwrap();
    rustix::fs::chmod(&live, rustix::fs::Mode::from_raw_mode(0o640)).unwrap();
    let state = || {
        let m = fs::metadata(&live).unwrap();
        (m.uid(), m.gid(), m.mode() & 0o7777)
    };

    let out = Command::new("setpriv")
        .arg("--bounding-set=-fowner")
        .arg(assert_cmd::cargo::cargo_bin("datum"))
        .arg("--repo")
        .arg(s.repo())
        .arg("--root")
        .arg(s.root())
        .arg("--host-file")
        .arg(s.dir.path().join("host.yaml"))
        .arg("apply")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let after = state();
    assert!(
        after == (1234, 1234, 0o640) || after == (1235, 1235, 0o600),
        "a failed change left {}:{} {:o}: neither the old state nor the new",
        after.0,
        after.1,
        after.2
    );
    // With every capability the next pass converges.
    assert_eq!(s.datum(&["apply"]).status.code(), Some(2));
    assert_eq!(state(), (1235, 1235, 0o600));
    assert_eq!(fs::read_to_string(&live).unwrap(), "secret\n");
}
