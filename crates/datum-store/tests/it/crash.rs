//! A writer killed with SIGKILL in the middle of its passes leaves a database
//! that opens without warnings and holds whole batches only.
//!
//! The writer is this same test binary, re-run with the ignored
//! `crash::child_writer` test selected and the database path in an
//! environment variable.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use datum_core::{FileMeta, ResourceId};
use datum_report::Signature;
use datum_store::{PassRecord, Store};

const ENV: &str = "DATUM_STORE_CRASH_DB";
const RESOURCES: usize = 40;
const CLASSES: usize = 6;

/// One pass of the fake engine: everything in one batch, tagged with `n` so
/// a torn batch would show as mixed tags.
fn write_pass(store: &mut Store, n: u64) {
    let batch = store.batch().unwrap();
    let pass_id = batch
        .record_pass(&PassRecord {
            started_at: 1_000 + n as i64,
            finished_at: 1_001 + n as i64,
            command: "apply".into(),
            host: "h".into(),
            counts: [("changed".to_owned(), n)].into_iter().collect(),
            duration_ms: n,
            exit_code: 2,
        })
        .unwrap();
    for c in 0..CLASSES {
        batch
            .record_class_inspection(pass_id, &format!("class{c}"), n)
            .unwrap();
    }
    for r in 0..RESOURCES {
        let id = ResourceId::new("File", format!("f{r}"));
        let meta = FileMeta {
            size: n,
            ..FileMeta::default()
        };
        batch
            .record_verified(&id, &format!("pass-{n}"), Some(&meta), n as i64)
            .unwrap();
    }
    let findings: Vec<Signature> = (0..(n % 7))
        .map(|i| Signature {
            subject: format!("File[f{i}]"),
            category: "changed_outside".into(),
            paths: vec!["mode".into()],
        })
        .collect();
    batch
        .record_findings(pass_id, "h", &findings, n as i64)
        .unwrap();
    batch.commit().unwrap();
}

#[test]
#[ignore = "child process of killed_writer_leaves_only_whole_batches"]
fn child_writer() {
    // Only meaningful as the child of the test below; run on its own (for
    // example with --include-ignored) it has nothing to do.
    let Some(path) = std::env::var_os(ENV) else {
        return;
    };
    let mut store = Store::open(Path::new(&path)).unwrap();
    let start = store
        .recent_passes(1)
        .unwrap()
        .first()
        .map_or(0, |p| p.pass.duration_ms + 1);
    let mut out = std::io::stdout().lock();
    for n in start.. {
        write_pass(&mut store, n);
        writeln!(out, "committed {n}").unwrap();
        out.flush().unwrap();
    }
}

/// Checks that every batch in the database is whole; returns the last pass.
fn assert_consistent(path: &Path) -> u64 {
    // A killed writer must not look like corruption.
    let store = Store::open(path).unwrap();
    let passes = store.recent_passes(usize::MAX).unwrap();
    let last = passes[0].pass.duration_ms;
    assert_eq!(passes.len() as u64, last + 1, "no pass lost or torn");
    for c in 0..CLASSES {
        let p = store
            .inspection_percentiles("apply", Some(&format!("class{c}")), usize::MAX)
            .unwrap()
            .unwrap();
        assert_eq!(p.samples, passes.len(), "class timings are whole per pass");
    }
    let verified = store.all_verified().unwrap();
    assert_eq!(verified.len(), RESOURCES);
    for (id, record) in &verified {
        assert_eq!(
            record.declaration_hash,
            format!("pass-{last}"),
            "{id} from another batch"
        );
        assert_eq!(record.meta.as_ref().unwrap().size, last);
    }
    let findings = store.current_findings("h").unwrap();
    assert_eq!(findings.len() as u64, last % 7);
    last
}

#[test]
fn killed_writer_leaves_only_whole_batches() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let exe = std::env::current_exe().unwrap();
    let mut expected_at_least = 0;
    // Kill at a different moment each round: after 3, 8, 13... commits, then
    // a little later, so the kill lands inside a batch or a commit's fsync.
    for round in 0..4u64 {
        let mut child = Command::new(&exe)
            .args(["crash::child_writer", "--exact", "--ignored", "--nocapture"])
            .env(ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = 0;
        while seen < 3 + round * 5 {
            let line = lines.next().expect("child writer stopped early").unwrap();
            if line.starts_with("committed ") {
                seen += 1;
            }
            assert!(Instant::now() < deadline, "child writer too slow");
        }
        std::thread::sleep(Duration::from_micros(300 * round));
        child.kill().unwrap();
        child.wait().unwrap();
        let last = assert_consistent(&path);
        assert!(
            last + 1 >= expected_at_least + seen,
            "committed passes were lost"
        );
        expected_at_least = last + 1;
    }
}
