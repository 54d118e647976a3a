//! The backup store through its public API: saving, deduplication, listing,
//! reading back, retention, sweeping, permissions and index recovery.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use datum_core::ResourceId;
use datum_store::backup::{BackupReason, BackupStore, Retention, SavedFile};
use datum_store::{BACKUP_DIR_PATH, StoreError, StoreWarning};

fn open(root: &Path) -> BackupStore {
    BackupStore::open(&root.join(BACKUP_DIR_PATH)).unwrap()
}

fn file<'a>(id: &'a ResourceId, path: &'a Path, bytes: &'a [u8], at: i64) -> SavedFile<'a> {
    SavedFile {
        resource: id,
        declared_path: path,
        bytes,
        mode: 0o100_640,
        uid: 0,
        gid: 4,
        reason: BackupReason::Update,
        sensitive: false,
        at,
    }
}

/// Every regular file under `objects/`, as (path, mode).
fn blobs(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    for fan in fs::read_dir(dir.join("objects")).unwrap() {
        for blob in fs::read_dir(fan.unwrap().path()).unwrap() {
            let blob = blob.unwrap();
            out.push((
                blob.path(),
                blob.metadata().unwrap().permissions().mode() & 0o777,
            ));
        }
    }
    out.sort();
    out
}

fn mode_of(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn saves_are_deduplicated_private_and_listed_newest_first() {
    let root = tempfile::tempdir().unwrap();
    let mut store = open(root.path());
    let sshd = ResourceId::new("File", "sshd-config");
    let motd = ResourceId::new("File", "motd");
    let sshd_path = Path::new("/etc/ssh/sshd_config");
    let motd_path = Path::new("/etc/motd");

    let a = store
        .save(&file(&sshd, sshd_path, b"Port 22\n", 100))
        .unwrap();
    let b = store
        .save(&file(&motd, motd_path, b"Port 22\n", 200))
        .unwrap();
    let c = store
        .save(&file(&sshd, sshd_path, b"Port 2222\n", 300))
        .unwrap();
    assert_eq!(a.sha256, b.sha256, "same bytes, same digest");
    assert!(a.id < b.id && b.id < c.id);
    assert_eq!(a.size, 8);

    let dir = root.path().join(BACKUP_DIR_PATH);
    let stored = blobs(&dir);
    assert_eq!(stored.len(), 2, "equal content stored once: {stored:?}");
    for (path, mode) in &stored {
        assert_eq!(*mode, 0o600, "{}", path.display());
        assert_eq!(mode_of(path.parent().unwrap()), 0o700);
        let name = path.file_name().unwrap().to_str().unwrap();
        let fan = path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        assert_eq!(&name[..2], fan);
    }
    assert_eq!(mode_of(&dir), 0o700);
    assert_eq!(mode_of(&dir.join("objects")), 0o700);
    assert_eq!(mode_of(&dir.join("index.db")), 0o600);

    let all: Vec<u64> = store.list(None).unwrap().iter().map(|e| e.id).collect();
    assert_eq!(all, [c.id, b.id, a.id]);
    let only_sshd: Vec<u64> = store
        .list(Some(sshd_path))
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(only_sshd, [c.id, a.id]);

    let (entry, bytes) = store.get(a.id).unwrap();
    assert_eq!(entry, a);
    assert_eq!(bytes, b"Port 22\n");
    assert_eq!((entry.mode, entry.uid, entry.gid), (0o100_640, 0, 4));
    assert_eq!(entry.resource, "File[sshd-config]");
}

#[test]
fn entries_survive_reopening_and_unknown_ids_are_errors() {
    let root = tempfile::tempdir().unwrap();
    let id = ResourceId::new("File", "motd");
    let saved = {
        let mut store = open(root.path());
        store
            .save(&SavedFile {
                reason: BackupReason::Remove,
                sensitive: true,
                ..file(&id, Path::new("/etc/motd"), b"secret=hunter2", 7)
            })
            .unwrap()
    };
    let store = open(root.path());
    let (entry, bytes) = store.get(saved.id).unwrap();
    assert!(
        entry.sensitive,
        "the flag is what lets the CLI print (sensitive)"
    );
    assert_eq!(entry.reason, BackupReason::Remove);
    assert_eq!(
        bytes, b"secret=hunter2",
        "sensitive bytes are kept for restore"
    );
    match store.get(saved.id + 1) {
        Err(StoreError::NoSuchBackup { id, .. }) => assert_eq!(id, saved.id + 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn tampered_blob_is_refused_not_returned() {
    let root = tempfile::tempdir().unwrap();
    let mut store = open(root.path());
    let id = ResourceId::new("File", "x");
    let entry = store
        .save(&file(&id, Path::new("/x"), b"original", 1))
        .unwrap();
    let (blob, _) = blobs(&root.path().join(BACKUP_DIR_PATH)).remove(0);
    fs::write(&blob, b"forged").unwrap();
    assert!(matches!(
        store.get(entry.id),
        Err(StoreError::DamagedBackup { .. })
    ));
}

#[test]
fn retention_keeps_n_per_path_and_deletes_only_unreferenced_blobs() {
    let root = tempfile::tempdir().unwrap();
    let mut store = open(root.path());
    let a = ResourceId::new("File", "a");
    let b = ResourceId::new("File", "b");
    let a_path = Path::new("/etc/a");
    let b_path = Path::new("/etc/b");
    // /etc/a goes through versions v0..v4; /etc/b holds v0's bytes, so that
    // blob must survive when /etc/a's v0 entry is pruned.
    for v in 0..5 {
        store
            .save(&file(&a, a_path, format!("v{v}").as_bytes(), 100 + v))
            .unwrap();
    }
    store.save(&file(&b, b_path, b"v0", 50)).unwrap();
    let dir = root.path().join(BACKUP_DIR_PATH);
    assert_eq!(blobs(&dir).len(), 5);

    let policy = Retention {
        keep_per_path: 2,
        ..Retention::default()
    };
    let report = store.prune(&policy, 1_000).unwrap();
    assert_eq!(report.entries_removed, 3, "v0, v1, v2 of /etc/a");
    assert_eq!(report.blobs_removed, 2, "v1 and v2; v0 is still /etc/b's");
    assert_eq!(report.bytes_freed, 4);

    let left: Vec<String> = store
        .list(None)
        .unwrap()
        .iter()
        .map(|e| format!("{}@{}", e.path.display(), e.saved_at))
        .collect();
    assert_eq!(left, ["/etc/a@104", "/etc/a@103", "/etc/b@50"]);
    assert_eq!(blobs(&dir).len(), 3);
    for entry in store.list(None).unwrap() {
        store.get(entry.id).unwrap();
    }

    // Age: everything saved before day 1 of the clock goes, even the newest.
    let policy = Retention {
        max_age_days: Some(1),
        ..Retention::default()
    };
    let now = 86_400 + 200;
    let report = store.prune(&policy, now).unwrap();
    assert_eq!(report.entries_removed, 3);
    assert!(store.list(None).unwrap().is_empty());
    assert!(blobs(&dir).is_empty());
}

#[test]
fn default_retention_keeps_ten_versions() {
    let root = tempfile::tempdir().unwrap();
    let mut store = open(root.path());
    let id = ResourceId::new("File", "a");
    for v in 0..15 {
        store
            .save(&file(&id, Path::new("/a"), format!("{v}").as_bytes(), v))
            .unwrap();
        store.prune(&Retention::default(), v).unwrap();
    }
    let left = store.list(None).unwrap();
    assert_eq!(left.len(), 10);
    assert_eq!(left[0].saved_at, 14);
    assert_eq!(left[9].saved_at, 5);
}

#[test]
fn saving_what_the_newest_entry_holds_refreshes_it_instead_of_pushing_older_versions_out() {
    let root = tempfile::tempdir().unwrap();
    let mut store = open(root.path());
    let id = ResourceId::new("File", "hosts");
    let path = Path::new("/etc/hosts");
    let original = store
        .save(&file(&id, path, b"hand-written original\n", 100))
        .unwrap();
    store.prune(&Retention::default(), 100).unwrap();

    // A write that keeps failing after its evidence was saved: the same
    // live file is saved before every attempt, more often than the ten
    // versions a path keeps.
    let attempts: Vec<_> = (200..215)
        .map(|at| {
            let entry = store.save(&file(&id, path, b"v1-bind\n", at)).unwrap();
            store.prune(&Retention::default(), at).unwrap();
            entry
        })
        .collect();
    assert!(
        attempts.iter().all(|e| e.id == attempts[0].id),
        "one entry, reused: {attempts:?}"
    );
    assert_eq!(attempts[14].saved_at, 214, "its time is the last save's");
    let kept: Vec<(u64, i64)> = store
        .list(Some(path))
        .unwrap()
        .iter()
        .map(|e| (e.id, e.saved_at))
        .collect();
    assert_eq!(kept, [(attempts[0].id, 214), (original.id, 100)]);
    assert_eq!(
        store.get(original.id).unwrap().1,
        b"hand-written original\n",
        "the only copy of the original is still there"
    );
    // A clock set back does not make the reused entry older.
    let again = store.save(&file(&id, path, b"v1-bind\n", 150)).unwrap();
    assert_eq!((again.id, again.saved_at), (attempts[0].id, 214));

    // Whatever tells two versions apart makes a new entry: other content,
    // content that comes back after it (A, B, A keeps all three), another
    // mode, owner, sensitivity or resource.
    let newest = |store: &BackupStore| store.list(Some(path)).unwrap()[0].id;
    let mut ids = vec![attempts[0].id];
    let variants = [
        file(&id, path, b"other\n", 300),
        file(&id, path, b"v1-bind\n", 301),
        SavedFile {
            mode: 0o100_600,
            ..file(&id, path, b"v1-bind\n", 302)
        },
        SavedFile {
            uid: 1,
            mode: 0o100_600,
            ..file(&id, path, b"v1-bind\n", 303)
        },
        SavedFile {
            sensitive: true,
            uid: 1,
            mode: 0o100_600,
            ..file(&id, path, b"v1-bind\n", 304)
        },
    ];
    for variant in &variants {
        let entry = store.save(variant).unwrap();
        assert!(!ids.contains(&entry.id), "{variant:?} reused {entry:?}");
        assert_eq!(newest(&store), entry.id);
        ids.push(entry.id);
    }
    let renamed = ResourceId::new("File", "etc-hosts");
    let entry = store
        .save(&SavedFile {
            resource: &renamed,
            ..variants[4]
        })
        .unwrap();
    assert!(
        !ids.contains(&entry.id),
        "another resource reused {entry:?}"
    );
    assert_eq!(store.list(Some(path)).unwrap().len(), 8);
}

#[test]
fn gc_sweeps_old_orphans_and_debris_but_not_fresh_ones() {
    let root = tempfile::tempdir().unwrap();
    let mut store = open(root.path());
    let dir = root.path().join(BACKUP_DIR_PATH);
    let id = ResourceId::new("File", "kept");
    store
        .save(&file(&id, Path::new("/kept"), b"kept", 1))
        .unwrap();

    // An orphan as a crash between blob and entry would leave it, a
    // temporary of a killed save, and a fresh orphan of a save in progress.
    let orphan_sha = hex_sha(b"orphan");
    let orphan = dir.join("objects").join(&orphan_sha[..2]).join(&orphan_sha);
    fs::create_dir_all(orphan.parent().unwrap()).unwrap();
    fs::write(&orphan, b"orphan").unwrap();
    let debris = orphan.parent().unwrap().join(".tmp-abc123");
    fs::write(&debris, b"half").unwrap();
    let fresh_sha = hex_sha(b"fresh");
    let fresh = dir.join("objects").join(&fresh_sha[..2]).join(&fresh_sha);
    fs::create_dir_all(fresh.parent().unwrap()).unwrap();
    fs::write(&fresh, b"fresh").unwrap();
    let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
    for old in [&orphan, &debris] {
        fs::File::options()
            .write(true)
            .open(old)
            .unwrap()
            .set_modified(two_hours_ago)
            .unwrap();
    }

    let report = store.gc().unwrap();
    assert_eq!(report.blobs_removed, 2);
    assert!(!orphan.exists());
    assert!(!debris.exists());
    assert!(fresh.exists(), "inside the grace period");
    let (_, bytes) = store.get(store.list(None).unwrap()[0].id).unwrap();
    assert_eq!(bytes, b"kept");
}

#[test]
fn a_corrupt_index_is_refused_and_a_rebuild_keeps_its_blobs_as_recovered_sensitive_entries() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(BACKUP_DIR_PATH);
    {
        let mut store = open(root.path());
        let id = ResourceId::new("File", "a");
        store.save(&file(&id, Path::new("/a"), b"one", 1)).unwrap();
        store.save(&file(&id, Path::new("/a"), b"two", 2)).unwrap();
    }
    for suffix in ["-wal", "-shm"] {
        let _ = fs::remove_file(dir.join(format!("index.db{suffix}")));
    }
    fs::write(dir.join("index.db"), b"garbage garbage garbage garbage").unwrap();

    // Refused as it is; rebuilt only on request.
    assert!(matches!(
        BackupStore::open(&dir),
        Err(StoreError::Unusable { .. })
    ));
    let folder = datum_host::PrivateDir::open_path(&dir, false)
        .unwrap()
        .unwrap();
    let (mut store, warnings) = BackupStore::rebuild_in(&folder).unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(matches!(
        warnings[0],
        StoreWarning::CorruptMovedAside { .. }
    ));
    assert!(matches!(
        warnings[1],
        StoreWarning::RecoveredBlobs { count: 2, .. }
    ));

    let entries = store.list(None).unwrap();
    assert_eq!(entries.len(), 2);
    let mut contents = Vec::new();
    for entry in &entries {
        assert!(entry.sensitive);
        assert_eq!(entry.reason, BackupReason::Recovered);
        contents.push(store.get(entry.id).unwrap().1);
    }
    contents.sort();
    assert_eq!(contents, [b"one".to_vec(), b"two".to_vec()]);
    // Default retention does not collapse them into one path.
    store.prune(&Retention::default(), 10).unwrap();
    assert_eq!(store.list(None).unwrap().len(), 2);
}

fn hex_sha(bytes: &[u8]) -> String {
    datum_core::sha256_hex(bytes)
}

#[test]
fn content_lives_only_in_blobs_never_in_the_index() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(BACKUP_DIR_PATH);
    let canary = b"CANARY-7f3a9c-db-password=hunter2";
    {
        let mut store = open(root.path());
        let id = ResourceId::new("File", "secret");
        store
            .save(&SavedFile {
                sensitive: true,
                ..file(&id, Path::new("/etc/secret"), canary, 1)
            })
            .unwrap();
    }
    let mut index_files = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().starts_with("index.db") {
            index_files += 1;
            let bytes = fs::read(entry.path()).unwrap();
            assert!(
                !bytes.windows(canary.len()).any(|w| w == canary),
                "{} holds the content",
                entry.path().display()
            );
        }
    }
    assert!(index_files >= 1);
    let (blob, _) = blobs(&dir).remove(0);
    assert_eq!(fs::read(blob).unwrap(), canary);
}
