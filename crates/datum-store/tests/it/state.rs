//! The state store through its public API: creation, reopening, refusing a
//! damaged database (and rebuilding it only when asked), and each family of
//! records.

use std::collections::BTreeMap;
use std::fs;

use datum_core::{FileMeta, ResourceId};
use datum_report::Signature;
use datum_store::{
    OwedAction, PassRecord, QuarantineSource, QuarantineTarget, STATE_DB_PATH, Store, StoreError,
};

fn db_path(root: &std::path::Path) -> std::path::PathBuf {
    root.join(STATE_DB_PATH)
}

fn pass(command: &str, duration_ms: u64) -> PassRecord {
    PassRecord {
        started_at: 1_000,
        finished_at: 1_001,
        command: command.to_owned(),
        host: "web1".to_owned(),
        counts: BTreeMap::from([("changed".to_owned(), 2), ("unchanged".to_owned(), 5)]),
        duration_ms,
        exit_code: 2,
    }
}

fn meta() -> FileMeta {
    FileMeta {
        size: 812,
        mtime_ns: 1_764_000_000_000_000_001,
        ctime_ns: 1_764_000_000_000_000_002,
        inode: 393_219,
        dev: 64_769,
        mode: 0o100_600,
        uid: 0,
        gid: 0,
        sha256: Some("5e".repeat(32)),
    }
}

#[test]
fn missing_store_is_created_silently_and_reopens_with_its_data() {
    let root = tempfile::tempdir().unwrap();
    let path = db_path(root.path());
    let sshd = ResourceId::new("File", "sshd-config");
    {
        let mut store = Store::open(&path).unwrap();
        store
            .record_verified(&sshd, "decl-1", Some(&meta()), 1_700)
            .unwrap();
    }
    assert!(path.is_file());
    let store = Store::open(&path).unwrap();
    let got = store.last_verified(&sshd).unwrap().unwrap();
    assert_eq!(got.declaration_hash, "decl-1");
    assert_eq!(got.meta, Some(meta()));
    assert_eq!(got.verified_at, 1_700);
    assert_eq!(
        store
            .last_verified(&ResourceId::new("File", "other"))
            .unwrap(),
        None
    );
}

/// The store's folder, as the CLI opens it.
fn folder(path: &std::path::Path) -> datum_host::PrivateDir {
    datum_host::PrivateDir::open_path(path.parent().unwrap(), true)
        .unwrap()
        .unwrap()
}

#[test]
fn garbage_store_is_refused_left_alone_and_rebuilt_only_when_asked() {
    let root = tempfile::tempdir().unwrap();
    let path = db_path(root.path());
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let garbage = b"this is not a database, just some bytes that got here somehow\n".repeat(100);
    fs::write(&path, &garbage).unwrap();

    for _ in 0..2 {
        match Store::open(&path) {
            Err(StoreError::Unusable { path: p, reason }) => {
                assert_eq!(p, path);
                assert!(reason.contains("not a database"), "{reason}");
            }
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("a garbage store was opened"),
        }
        // Never replaced: the file is exactly what it was, nothing beside it.
        assert_eq!(fs::read(&path).unwrap(), garbage);
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
    }

    let (mut store, moved_to) = Store::rebuild_in(&folder(&path), "state.db").unwrap();
    let moved_to = moved_to.unwrap();
    let name = moved_to.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("state.db.corrupt-"), "{name}");
    // The evidence is kept byte for byte.
    assert_eq!(fs::read(&moved_to).unwrap(), garbage);
    // And the new store works.
    let id = ResourceId::new("File", "motd");
    store.record_verified(&id, "h", None, 5).unwrap();
    assert_eq!(
        store.last_verified(&id).unwrap().unwrap().declaration_hash,
        "h"
    );
}

#[test]
fn a_refused_store_keeps_its_quarantine_for_whoever_restores_it() {
    let root = tempfile::tempdir().unwrap();
    let path = db_path(root.path());
    let fix = ResourceId::new("File", "emergency-fix");
    {
        let mut store = Store::open(&path).unwrap();
        store
            .quarantine(
                &QuarantineTarget::Resource(fix.clone()),
                "hand fix during the outage",
                QuarantineSource::Person,
                10,
            )
            .unwrap();
    }
    // Damaged: a stray byte in the header.
    let good = fs::read(&path).unwrap();
    let mut bad = good.clone();
    bad[0] = b'X';
    fs::write(&path, &bad).unwrap();
    assert!(matches!(
        Store::open(&path),
        Err(StoreError::Unusable { .. })
    ));
    // Restored from a backup: the quarantine is still there.
    fs::write(&path, &good).unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.quarantined().unwrap().len(), 1);
}

#[test]
fn damaged_pages_are_detected_and_refused() {
    let root = tempfile::tempdir().unwrap();
    let path = db_path(root.path());
    {
        let mut store = Store::open(&path).unwrap();
        let batch = store.batch().unwrap();
        for i in 0..500 {
            let id = ResourceId::new("File", format!("f{i}"));
            batch
                .record_verified(&id, &"ab".repeat(32), Some(&meta()), i)
                .unwrap();
        }
        batch.commit().unwrap();
    }
    // Fold the WAL into the main file, then overwrite a few pages in the
    // middle with noise: the header stays valid, the b-tree does not.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
    }
    let mut bytes = fs::read(&path).unwrap();
    assert!(bytes.len() > 8 * 4096, "database too small for the test");
    for b in &mut bytes[2 * 4096..6 * 4096] {
        *b = 0xA5;
    }
    fs::write(&path, &bytes).unwrap();

    match Store::open(&path) {
        Err(StoreError::Unusable { reason, .. }) => {
            assert!(
                reason.contains("integrity") || reason.contains("malformed"),
                "{reason}"
            );
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a damaged store was opened"),
    }
    assert_eq!(fs::read(&path).unwrap(), bytes, "left as it was");
}

#[test]
fn store_from_a_future_version_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let path = db_path(root.path());
    drop(Store::open(&path).unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA user_version = 999;").unwrap();
    }
    match Store::open(&path) {
        Err(StoreError::Unusable { reason, .. }) => assert!(reason.contains("999"), "{reason}"),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a newer store was opened"),
    }
}

#[test]
fn pass_history_and_inspection_percentiles() {
    let root = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db_path(root.path())).unwrap();
    assert_eq!(
        store.inspection_percentiles("check", None, 20).unwrap(),
        None
    );

    // 20 checks of 1..=20 ms with a "critical" class taking ten times that,
    // and applies that must not mix in.
    for ms in 1..=20u64 {
        let id = store.record_pass(&pass("check", ms)).unwrap();
        store
            .record_class_inspection(id, "critical", ms * 10)
            .unwrap();
        store.record_pass(&pass("apply", 10_000)).unwrap();
    }
    let all = store
        .inspection_percentiles("check", None, 100)
        .unwrap()
        .unwrap();
    assert_eq!((all.p50_ms, all.p95_ms, all.samples), (10, 19, 20));
    // Only the last 4 checks: 17, 18, 19, 20 ms.
    let recent = store
        .inspection_percentiles("check", None, 4)
        .unwrap()
        .unwrap();
    assert_eq!((recent.p50_ms, recent.p95_ms, recent.samples), (18, 20, 4));
    let class = store
        .inspection_percentiles("check", Some("critical"), 100)
        .unwrap()
        .unwrap();
    assert_eq!((class.p50_ms, class.p95_ms), (100, 190));
    assert_eq!(
        store
            .inspection_percentiles("check", Some("normal"), 100)
            .unwrap(),
        None
    );

    let passes = store.recent_passes(3).unwrap();
    assert_eq!(passes.len(), 3);
    assert!(passes[0].id > passes[1].id, "newest first");
    assert_eq!(passes[0].pass, pass("apply", 10_000));
    assert_eq!(passes[1].pass.counts.get("unchanged"), Some(&5));
}

#[test]
fn findings_history_keeps_first_seen_and_restarts_when_it_changes() {
    let root = tempfile::tempdir().unwrap();
    let mut store = Store::open(&db_path(root.path())).unwrap();
    let chmod = Signature {
        subject: "File[sshd-config]".into(),
        category: "changed_outside".into(),
        paths: vec!["mode".into()],
    };
    let deleted = Signature {
        subject: "File[motd]".into(),
        category: "deleted_outside".into(),
        paths: vec![],
    };

    let ages = store
        .record_findings(1, "web1", std::slice::from_ref(&chmod), 100)
        .unwrap();
    assert_eq!((ages[0].first_seen, ages[0].passes), (100, 1));

    let ages = store
        .record_findings(2, "web1", &[deleted.clone(), chmod.clone()], 200)
        .unwrap();
    assert_eq!(
        (ages[0].first_seen, ages[0].passes),
        (200, 1),
        "new finding"
    );
    assert_eq!(
        (ages[1].first_seen, ages[1].passes),
        (100, 2),
        "kept its first-seen"
    );

    // Same file, one more changed path: a different signature, a new clock.
    let grown = Signature {
        paths: vec!["mode".into(), "content".into()],
        ..chmod.clone()
    };
    let ages = store
        .record_findings(3, "web1", &[grown.clone(), deleted.clone()], 300)
        .unwrap();
    assert_eq!((ages[0].first_seen, ages[0].passes), (300, 1));
    assert_eq!((ages[1].first_seen, ages[1].passes), (200, 2));
    let current = store.current_findings("web1").unwrap();
    assert_eq!(current.len(), 2, "the mode-only signature was cleared");
    assert_eq!(current[0].signature.subject, "File[motd]");
    assert_eq!(
        current[1].signature.paths,
        ["content", "mode"],
        "stored sorted"
    );

    // Another host's history is separate.
    store
        .record_findings(4, "web2", std::slice::from_ref(&chmod), 400)
        .unwrap();

    // A clean check clears this host, and a reappearance starts over.
    assert!(
        store
            .record_findings(5, "web1", &[], 500)
            .unwrap()
            .is_empty()
    );
    assert!(store.current_findings("web1").unwrap().is_empty());
    assert_eq!(store.current_findings("web2").unwrap().len(), 1);
    let ages = store.record_findings(6, "web1", &[deleted], 600).unwrap();
    assert_eq!((ages[0].first_seen, ages[0].passes), (600, 1));
}

#[test]
fn owed_reloads_survive_reopening() {
    let root = tempfile::tempdir().unwrap();
    let path = db_path(root.path());
    let nginx = ResourceId::new("Service", "nginx");
    let sshd = ResourceId::new("Service", "sshd");
    {
        let mut store = Store::open(&path).unwrap();
        store
            .owe_reload(&nginx, "File[nginx-site] changed", 10)
            .unwrap();
        store
            .owe_reload(&sshd, "File[sshd-config] changed", 20)
            .unwrap();
    }
    let mut store = Store::open(&path).unwrap();
    let owed = store.owed_reloads().unwrap();
    assert_eq!(owed.len(), 2);
    assert_eq!(owed[0].service, nginx);
    assert_eq!(owed[0].action, OwedAction::Reload);
    assert_eq!(owed[0].reasons, ["File[nginx-site] changed"]);
    assert!(store.clear_reload(&nginx).unwrap());
    drop(store);
    let store = Store::open(&path).unwrap();
    let owed = store.owed_reloads().unwrap();
    assert_eq!(owed.len(), 1);
    assert_eq!(owed[0].service, sshd);
}

#[test]
fn a_batch_commits_everything_or_nothing() {
    let root = tempfile::tempdir().unwrap();
    let path = db_path(root.path());
    let mut store = Store::open(&path).unwrap();
    let svc = ResourceId::new("Service", "nginx");
    {
        let batch = store.batch().unwrap();
        let id = batch.record_pass(&pass("apply", 5)).unwrap();
        batch.record_class_inspection(id, "normal", 3).unwrap();
        batch.owe_reload(&svc, "File[x] changed", 1).unwrap();
        // Not committed: as if the process died here.
    }
    assert!(store.recent_passes(10).unwrap().is_empty());
    assert!(store.owed_reloads().unwrap().is_empty());
}

#[test]
fn readers_are_not_blocked_by_an_open_batch() {
    let root = tempfile::tempdir().unwrap();
    let path = db_path(root.path());
    let mut writer = Store::open(&path).unwrap();
    writer.record_pass(&pass("check", 4)).unwrap();
    let batch = writer.batch().unwrap();
    batch.record_pass(&pass("apply", 9)).unwrap();
    // A `datum schedule` in another process while a pass is writing: it
    // opens, reads the committed state, and does not wait.
    let started = std::time::Instant::now();
    let reader = Store::open(&path).unwrap();
    let seen = reader.recent_passes(10).unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].pass.command, "check");
    batch.commit().unwrap();
    assert_eq!(reader.recent_passes(10).unwrap().len(), 2);
}

#[test]
fn stores_can_move_to_another_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<Store>();
    assert_send::<datum_store::backup::BackupStore>();
}
