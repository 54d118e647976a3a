//! A value marked sensitive never appears in any output: plan, apply, JSON,
//! catalogue, backups, the state store.

use std::fs;

use crate::support::*;

const CANARY: &str = "CANARY-9c1e-do-not-print";

#[test]
fn sensitive_content_never_appears_in_any_output_or_the_state_store() {
    let manifest = |v: &str| {
        format!(
            "datum: v1alpha1\ntype: File\nname: token\nsensitive: true\ndesired:\n  path: /token\n  mode: \"0600\"\n  content: \"token={CANARY}-{v}\\n\"\n"
        )
    };
    let s = Sandbox::with_base(&manifest("v1"));
    let mut outputs = Vec::new();
    for args in [
        &["plan"][..],
        &["--output", "json", "plan"],
        &["apply"],
        &["catalogue"],
        &["catalogue", "--explain"],
    ] {
        outputs.push(s.datum(args));
    }
    // Change the declaration and the live file: diffs and backups get involved.
    s.write("repo/base/main.yaml", &manifest("v2"));
    fs::write(s.live("/token"), format!("token={CANARY}-hand-edit\n")).unwrap();
    for args in [
        &["plan"][..],
        &["--output", "json", "plan"],
        &["--output", "json", "apply"],
        &["backup", "list"],
        &["--output", "json", "backup", "list"],
    ] {
        outputs.push(s.datum(args));
    }
    for o in &outputs {
        let all = format!("{}{}", stdout(o), stderr(o));
        assert!(!all.contains(CANARY), "canary leaked:\n{all}");
    }
    assert!(outputs.iter().any(|o| stdout(o).contains("(sensitive)")));
    // The backup exists (restore works) but `show` does not print it.
    let list: serde_json::Value =
        serde_json::from_slice(&s.datum(&["--output", "json", "backup", "list"]).stdout).unwrap();
    let id = list["backups"][0]["id"]
        .to_string()
        .trim_matches('"')
        .to_owned();
    let show = s.datum(&["backup", "show", &id]);
    assert_exit(&show, 0);
    assert!(!stdout(&show).contains(CANARY));
    let show = s.datum(&["--output", "json", "backup", "show", &id]);
    assert_exit(&show, 0);
    assert!(!stdout(&show).contains(CANARY));
    let doc: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert!(doc["content"].is_null() && doc["sha256"].is_null(), "{doc}");
    // The state store never holds the value.
    let db = fs::read(s.live("/var/lib/datum/state.db")).unwrap();
    assert!(!String::from_utf8_lossy(&db).contains(CANARY));
    for entry in fs::read_dir(s.live("/var/lib/datum")).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("state.db") {
            let bytes = fs::read(entry.path()).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(CANARY),
                "{:?}",
                entry.path()
            );
        }
    }
}

/// SHA-256 hex of `bytes`, as `sha256sum` prints it.
fn sha256sum(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex_of(&sha2::Sha256::digest(bytes))
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_sensitive_files_checksum_is_keyed_never_the_plain_sha256() {
    let content = "password=hunter2\n";
    let plain = sha256sum(content.as_bytes());
    let s = Sandbox::with_base(&format!(
        "datum: v1alpha1\ntype: File\nname: token\nsensitive: true\ndesired:\n  path: /token\n  mode: \"0600\"\n  content: {content:?}\n"
    ));
    // Before any state folder: no key, so no digest at all.
    let first = s.datum(&["catalogue"]);
    assert_exit(&first, 0);
    assert!(!stdout(&first).contains(&plain), "{}", stdout(&first));
    let doc: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert!(doc["resources"][0]["content_sha256"].is_null(), "{doc}");
    assert!(doc["resources"][0]["content_digest"].is_null(), "{doc}");
    assert!(doc["resources"][0]["declaration_hash"].is_null(), "{doc}");
    assert_exit(&s.datum(&["apply"]), 2);
    fs::write(s.live("/token"), "password=guess\n").unwrap();
    let guessed = sha256sum(b"password=guess\n");
    // With the state folder: keyed digests, the same on every run.
    let catalogue = |s: &Sandbox| -> serde_json::Value {
        let o = s.datum(&["catalogue"]);
        assert_exit(&o, 0);
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let a = catalogue(&s);
    let digest = a["resources"][0]["content_digest"]
        .as_str()
        .expect("digest")
        .to_owned();
    assert!(digest.starts_with("keyed-blake3:"), "{digest}");
    assert!(!digest.contains(&plain));
    assert_eq!(
        catalogue(&s)["resources"][0]["content_digest"],
        digest.as_str()
    );
    let plan = s.datum(&["--output", "json", "plan"]);
    assert_exit(&plan, 2);
    let text = stdout(&plan);
    assert!(!text.contains(&plain) && !text.contains(&guessed), "{text}");
    let doc: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let c = &doc["resources"][0]["content"];
    assert_eq!(c["after_digest"], digest.as_str(), "{doc}");
    assert!(
        c["before_digest"].as_str().is_some_and(|d| d != digest),
        "{doc}"
    );
    assert!(
        c["after_sha256"].is_null() && c["before_sha256"].is_null(),
        "{doc}"
    );
    // The key: 32 bytes, mode 0600, in the state folder.
    let key = s.live("/var/lib/datum/digest.key");
    let meta = fs::symlink_metadata(&key).unwrap();
    assert_eq!(meta.len(), 32);
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    // A link planted where the key goes is never followed: no digest.
    fs::remove_file(&key).unwrap();
    let elsewhere = s.dir.path().join("attacker-key");
    fs::write(&elsewhere, [0u8; 32]).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &key).unwrap();
    let linked = catalogue(&s);
    assert!(
        linked["resources"][0]["content_digest"].is_null(),
        "{linked}"
    );
}

/// `backup list --json` showed a sensitive entry's `sha256`: the plain
/// checksum of the replaced secret. It shows the host's keyed digest
/// instead (`content_digest`, as the catalogue's), and `sha256` is null.
#[test]
fn a_sensitive_backup_is_listed_without_its_plain_sha256() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: sec\nsensitive: true\ndesired:\n  path: /sec.conf\n  mode: \"0600\"\n  content: \"password=declared\\n\"\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    fs::write(s.live("/sec.conf"), "password=hunter2\n").unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    let plain = sha256sum(b"password=hunter2\n");
    for args in [
        &["--output", "json", "backup", "list"][..],
        &["backup", "list"],
    ] {
        let o = s.datum(args);
        assert_exit(&o, 0);
        let all = format!("{}{}", stdout(&o), stderr(&o));
        assert!(!all.contains(&plain), "{all}");
    }
    let list: serde_json::Value =
        serde_json::from_slice(&s.datum(&["--output", "json", "backup", "list"]).stdout).unwrap();
    let entry = &list["backups"][0];
    assert_eq!(entry["sensitive"], true, "{list}");
    assert!(entry["sha256"].is_null(), "{list}");
    let digest = entry["content_digest"].as_str().expect("a keyed digest");
    assert!(digest.starts_with("keyed-blake3:"), "{digest}");
    // The catalogue's digest of the same content on the same host.
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: File\nname: sec\nsensitive: true\ndesired:\n  path: /sec.conf\n  mode: \"0600\"\n  content: \"password=hunter2\\n\"\n",
    );
    let cat: serde_json::Value = serde_json::from_slice(&s.datum(&["catalogue"]).stdout).unwrap();
    assert_eq!(cat["resources"][0]["content_digest"], digest, "{cat}");
    // Restore still works from the entry.
    let id = entry["id"].to_string();
    assert_exit(&s.datum(&["backup", "restore", &id]), 0);
    assert_eq!(
        fs::read_to_string(s.live("/sec.conf")).unwrap(),
        "password=hunter2\n"
    );
}

/// A File that is not sensitive, declared over a host file not everyone
/// may read (`/etc/shadow` 0640, a 0644 key in a 0700 folder), showed the
/// live lines (the password hashes, the key) as `-` lines of the plan's
/// diff, the apply's, and as `+` lines of `datum check`'s: repository
/// content was a way to read any file on the host, in a merge request's
/// CI log. Their lines are never shown now, only checksums and why; a
/// 0644 file in searchable folders still shows its diff.
#[test]
fn a_live_file_not_everyone_may_read_is_never_shown() {
    use std::os::unix::fs::PermissionsExt as _;
    const SHADOW: &str = "CANARY-shadow-5e2a";
    const KEY: &str = "CANARY-key-b71d";
    const TREE_KEY: &str = "CANARY-tree-key-03c9";
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: shadow\ndesired:\n  path: /etc/shadow\n  content: \"x\\n\"\n---\n\
         datum: v1alpha1\ntype: File\nname: key\ndesired:\n  path: /vault/key\n  content: \"x\\n\"\n---\n\
         datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  content: \"welcome\\n\"\n---\n\
         datum: v1alpha1\ntype: Tree\nname: keys\ndesired:\n  path: /etc/keys\n  source: trees/keys\n  mode: \"0600\"\n  dir_mode: \"0755\"\n",
    );
    s.write("repo/base/trees/keys/host.key", "declared\n");
    let mode = |p: &std::path::Path, m: u32| {
        fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
    };
    fs::create_dir_all(s.live("/etc")).unwrap();
    mode(&s.live("/etc"), 0o755);
    fs::write(
        s.live("/etc/shadow"),
        format!("root:{SHADOW}:19000::::::\n"),
    )
    .unwrap();
    mode(&s.live("/etc/shadow"), 0o640);
    fs::write(s.live("/etc/motd"), "visible-old-line\n").unwrap();
    mode(&s.live("/etc/motd"), 0o644);
    // A Tree's entry (`datum check` diffs those).
    fs::create_dir_all(s.live("/etc/keys")).unwrap();
    mode(&s.live("/etc/keys"), 0o755);
    fs::write(s.live("/etc/keys/host.key"), format!("{TREE_KEY}\n")).unwrap();
    mode(&s.live("/etc/keys/host.key"), 0o600);
    fs::create_dir_all(s.live("/vault")).unwrap();
    mode(&s.live("/vault"), 0o700);
    fs::write(s.live("/vault/key"), format!("{KEY}\n")).unwrap();
    mode(&s.live("/vault/key"), 0o644);
    let markdown = s.dir.path().join("check.md");
    let mut outputs = Vec::new();
    for args in [
        &["plan"][..],
        &["--output", "json", "plan"],
        &["check", "--markdown", markdown.to_str().unwrap()],
        &["--output", "json", "check"],
    ] {
        outputs.push((args.join(" "), s.datum(args)));
    }
    let markdown = fs::read_to_string(&markdown).unwrap();
    outputs.push(("apply".to_owned(), s.datum(&["apply"])));
    for (args, o) in &outputs {
        let all = format!("{}{}", stdout(o), stderr(o));
        assert!(
            !all.contains(SHADOW) && !all.contains(KEY) && !all.contains(TREE_KEY),
            "{args}: a live line not everyone may read was shown:\n{all}"
        );
        // The world-readable file's diff is still there, and the others
        // say why theirs is not.
        assert!(all.contains("visible-old-line"), "{args}:\n{all}");
        assert!(all.contains("not readable by everyone"), "{args}:\n{all}");
    }
    assert!(
        !markdown.contains(SHADOW) && !markdown.contains(KEY) && !markdown.contains(TREE_KEY),
        "{markdown}"
    );
    assert!(markdown.contains("visible-old-line"), "{markdown}");
    let plan = &outputs[0].1;
    let shadow_sum = sha256sum(format!("root:{SHADOW}:19000::::::\n").as_bytes());
    assert!(
        stdout(plan).contains(&format!(
            "content: {shadow_sum} -> {} (the live file is not readable by everyone, so its lines are not shown)",
            sha256sum(b"x\n")
        )),
        "{}",
        stdout(plan)
    );
}

/// Whether everyone may read the live file was decided by a look at its
/// name, and its bytes for the diff read by opening the name again: the
/// owner of the folder holding a managed file (here a shared drop folder,
/// where another user keeps a private 0600 file) swaps the two names in a
/// loop, and the private file's lines were shown in the plan whenever the
/// swap fell between the look and the read. The decision is now made on
/// the file opened, whose bytes are the ones shown.
#[test]
fn a_private_file_swapped_in_after_the_look_is_never_shown() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    const PRIVATE: &str = "CANARY-private-swap-7d41";
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: notes\ndesired:\n  path: /srv/drop/notes\n  content: \"declared\\n\"\n",
    );
    let drop = s.live("/srv/drop");
    fs::create_dir_all(&drop).unwrap();
    fs::set_permissions(&drop, fs::Permissions::from_mode(0o755)).unwrap();
    let (notes, private, aside) = (drop.join("notes"), drop.join("private"), drop.join("aside"));
    fs::write(&notes, "public-line\n").unwrap();
    fs::set_permissions(&notes, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&private, format!("{PRIVATE}\n")).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o600)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = fs::rename(&notes, &aside);
                let _ = fs::rename(&private, &notes);
                let _ = fs::rename(&aside, &private);
            }
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (mut runs, mut public, mut shown) = (0, 0, 0);
    while std::time::Instant::now() < deadline {
        let o = s.datum(&["plan"]);
        let out = stdout(&o);
        runs += 1;
        public += usize::from(out.contains("public-line"));
        shown += usize::from(out.contains(PRIVATE));
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(
        public > 0,
        "the public file's diff was never shown in {runs} plans"
    );
    assert_eq!(
        shown, 0,
        "the private file's lines were shown in {shown} of {runs} plans"
    );
}

/// `sqlite3 FILE .dump`, or `None` where there is no sqlite3 to run.
fn sqlite_dump(db: &std::path::Path, sql: &str) -> Option<String> {
    let o = std::process::Command::new("sqlite3")
        .arg(db)
        .arg(sql)
        .output()
        .ok()?;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The verified record of a sensitive File held the plain SHA-256 of its
/// content, and a declaration hash covering it, so a copy of state.db alone
/// let anyone test a guessed secret offline. It holds the host's keyed
/// digests instead (digest.key, a separate file), which still say
/// "unchanged since verified" (a second apply is a no-op, and trusts the
/// file's metadata), and a record the key does not vouch for (a new key)
/// costs a read, never a rewrite or a drift report.
#[test]
fn the_state_store_holds_no_plain_hash_of_a_sensitive_file() {
    let secret = format!("password={CANARY}\n");
    let content = datum_core::Content::new(secret.clone().into_bytes());
    let sha = content.sha256.clone();
    let b3 = content.blake3.clone().expect("blake3");
    let s = Sandbox::with_base(&format!(
        "datum: v1alpha1\ntype: File\nname: token\nclass: cheap\nsensitive: true\ndesired:\n  path: /token\n  mode: \"0600\"\n  content: {secret:?}\n"
    ));
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nclasses:\n  cheap: {interval: 5m, content: metadata}\n",
    );
    let db = s.live("/var/lib/datum/state.db");
    let forbidden = |what: &str| {
        let dump = sqlite_dump(&db, ".dump").unwrap_or_default();
        for (name, needle) in [("canary", CANARY), ("sha256", &sha), ("blake3", &b3)] {
            assert!(
                !dump.contains(needle),
                "{what}: {name} in the dump:\n{dump}"
            );
        }
        // Every file of the state folder but the key, raw: hex and bytes.
        let raw = |h: &str| hex::decode(h).unwrap();
        for entry in fs::read_dir(s.live("/var/lib/datum")).unwrap().flatten() {
            if entry.file_name() == "digest.key" || entry.path().is_dir() {
                continue;
            }
            let bytes = fs::read(entry.path()).unwrap();
            for needle in [
                CANARY.as_bytes().to_vec(),
                sha.as_bytes().to_vec(),
                b3.as_bytes().to_vec(),
                raw(&sha),
                raw(&b3),
            ] {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle.as_slice()),
                    "{what}: {:?} holds {needle:?}",
                    entry.path()
                );
            }
        }
    };
    assert_exit(&s.datum(&["apply"]), 2);
    forbidden("apply");
    let check = s.datum(&["--output", "json", "check"]);
    assert_exit(&check, 0);
    forbidden("check");
    let row = || sqlite_dump(&db, "SELECT declaration_hash, sha256 FROM verified").unwrap();
    let recorded = row();
    assert!(
        recorded.starts_with("keyed-blake3:") && recorded.contains("|keyed-blake3:"),
        "{recorded}"
    );
    // Once the file is quiet (past the racy window, against a record made
    // in whole seconds), the record vouches for
    // it: an apply is a no-op that need not even read it.
    std::thread::sleep(std::time::Duration::from_millis(3_200));
    let again = s.datum(&["apply"]);
    assert_exit(&again, 0);
    assert!(
        stdout(&again).contains("0 changed, 1 unchanged"),
        "{}",
        stdout(&again)
    );
    let trusted = s.datum(&["apply", "--trust-metadata"]);
    assert_exit(&trusted, 0);
    assert!(
        stdout(&trusted).contains("(1 by their metadata, not read)"),
        "{}",
        stdout(&trusted)
    );
    let check = s.datum(&["--output", "json", "check"]);
    assert_exit(&check, 0);
    let doc: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(doc["metadata_only"], 1, "{doc}");
    forbidden("second apply and check");
    // A store from before records were keyed (its content hash plain): the
    // record is not used, so the file is read again, found as declared
    // (not rewritten, no drift), and recorded again, keyed.
    let live = fs::symlink_metadata(s.live("/token")).unwrap();
    sqlite_dump(&db, &format!("UPDATE verified SET sha256 = '{sha}'")).unwrap();
    let check = s.datum(&["--output", "json", "check"]);
    assert_exit(&check, 0);
    let upgraded = s.datum(&["apply", "--trust-metadata"]);
    assert_exit(&upgraded, 0);
    assert!(
        stdout(&upgraded).contains("0 changed, 1 unchanged (0 by their metadata"),
        "{}",
        stdout(&upgraded)
    );
    assert_eq!(row(), recorded, "keyed again");
    let now = fs::symlink_metadata(s.live("/token")).unwrap();
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!(
        (live.ino(), live.mtime_nsec(), live.ctime_nsec()),
        (now.ino(), now.mtime_nsec(), now.ctime_nsec()),
        "rewritten"
    );
    forbidden("a store from before");
    // The key lost: a check goes on without one (the record vouches for
    // nothing); an apply makes a new one only with --rebuild-state, which
    // forgets the record; the file is read again and found as declared:
    // not rewritten, no drift, recorded again under the new key.
    let live = fs::symlink_metadata(s.live("/token")).unwrap();
    fs::remove_file(s.live("/var/lib/datum/digest.key")).unwrap();
    let check = s.datum(&["--output", "json", "check"]);
    assert_exit(&check, 0);
    let doc: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(doc["metadata_only"], 0, "read, not trusted: {doc}");
    assert_exit(&s.datum(&["apply", "--trust-metadata"]), 1);
    let rekeyed = s.datum(&["apply", "--trust-metadata", "--rebuild-state"]);
    assert_exit(&rekeyed, 0);
    assert!(
        stdout(&rekeyed).contains("0 changed, 1 unchanged (0 by their metadata"),
        "{}",
        stdout(&rekeyed)
    );
    let now = fs::symlink_metadata(s.live("/token")).unwrap();
    assert_eq!(
        (live.ino(), live.mtime_nsec(), live.ctime_nsec()),
        (now.ino(), now.mtime_nsec(), now.ctime_nsec()),
        "rewritten"
    );
    let record = row();
    assert!(
        record.starts_with("keyed-blake3:") && record != recorded,
        "{record}"
    );
    let trusted = s.datum(&["apply", "--trust-metadata"]);
    assert!(
        stdout(&trusted).contains("(1 by their metadata, not read)"),
        "{}",
        stdout(&trusted)
    );
    forbidden("a new key");
}

/// An accepted drift of a sensitive File was recorded with the plain
/// declaration hash (which covers the declared secret) and the plain hash
/// of the observation (which covers the live content's SHA-256): both
/// confirm a guess to whoever has a copy of state.db. Both are the host's
/// keyed digests now, and still keep the accepted change in place.
#[test]
fn an_accepted_sensitive_drift_is_recorded_only_keyed() {
    let s = Sandbox::with_base(&format!(
        "datum: v1alpha1\ntype: File\nname: token\nclass: acc\nsensitive: true\ndesired:\n  path: /token\n  mode: \"0600\"\n  content: \"password={CANARY}-declared\\n\"\n"
    ));
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nclasses:\n  acc: {interval: 5m, policy: accept}\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    let live = format!("password={CANARY}-live\n");
    fs::write(s.live("/token"), &live).unwrap();
    let reconcile = s.datum(&["reconcile"]);
    assert_exit(&reconcile, 2);
    assert!(
        stdout(&reconcile).contains("accepted (patch: "),
        "{}",
        stdout(&reconcile)
    );
    let db = s.live("/var/lib/datum/state.db");
    let Some(row) = sqlite_dump(
        &db,
        "SELECT declaration_hash, observation_hash FROM accepted",
    ) else {
        return;
    };
    let (declaration, observation) = row.trim().split_once('|').expect("one row");
    assert!(
        declaration.starts_with("keyed-blake3:") && observation.starts_with("keyed-blake3:"),
        "{row}"
    );
    // Still accepted: reported as such, not reverted by an apply.
    assert_exit(&s.datum(&["check"]), 0);
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 0);
    assert!(
        stdout(&apply).contains("0 changed, 1 unchanged"),
        "{}",
        stdout(&apply)
    );
    assert_eq!(fs::read_to_string(s.live("/token")).unwrap(), live);
    let dump = sqlite_dump(&db, ".dump").unwrap();
    let sha = sha256sum(live.as_bytes());
    assert!(!dump.contains(CANARY) && !dump.contains(&sha), "{dump}");
}

/// Every file of the state folder but the key, `what` said on failure:
/// none holds any of `needles`.
fn state_folder_holds_none(s: &Sandbox, what: &str, needles: &[Vec<u8>]) {
    for entry in fs::read_dir(s.live("/var/lib/datum")).unwrap().flatten() {
        if entry.file_name() == "digest.key" || entry.path().is_dir() {
            continue;
        }
        let bytes = fs::read(entry.path()).unwrap();
        for needle in needles {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_slice()),
                "{what}: {:?} holds {:?}",
                entry.path(),
                String::from_utf8_lossy(needle)
            );
        }
    }
}

/// A sensitive File's `source:` was remembered in the clear beside the
/// state store: the source hash cache (`source-hashes`) kept its SHA-256
/// and BLAKE3, and the catalogue snapshot (`state.catalogue`) its SHA-256
/// and declaration hash, so a copy of the state folder confirmed a guessed
/// secret. Neither remembers a sensitive resource's content now (the
/// cache drops what it had of the file; the snapshot is saved without the
/// file's checksums and the declaration hash, computed again at each load).
#[test]
fn a_sensitive_source_is_remembered_nowhere_in_the_clear() {
    let secret = format!("password={CANARY}-source\n");
    let content = datum_core::Content::new(secret.clone().into_bytes());
    let (sha, b3) = (content.sha256.clone(), content.blake3.clone().unwrap());
    let needles = [
        CANARY.as_bytes().to_vec(),
        sha.as_bytes().to_vec(),
        b3.as_bytes().to_vec(),
        hex::decode(&sha).unwrap(),
        hex::decode(&b3).unwrap(),
    ];
    let manifest = |sensitive: bool| {
        format!(
            "datum: v1alpha1\ntype: File\nname: token\nsensitive: {sensitive}\ndesired:\n  path: /token\n  source: secret.txt\n"
        )
    };
    let s = Sandbox::with_base(&manifest(false));
    s.write("repo/base/secret.txt", &secret);
    let settle = || std::thread::sleep(std::time::Duration::from_millis(2_200));
    // Not sensitive: remembered (what the assertions below look for).
    settle();
    assert_exit(&s.datum(&["apply"]), 2);
    settle();
    assert_exit(&s.datum(&["check"]), 0);
    let cache = fs::read_to_string(s.live("/var/lib/datum/source-hashes")).unwrap();
    assert!(cache.contains(&sha), "{cache}");
    // Sensitive: nothing of it remembered, the cached entry dropped.
    s.write("repo/base/main.yaml", &manifest(true));
    settle();
    for args in [&["apply"][..], &["check"], &["check"], &["apply"]] {
        let o = s.datum(args);
        assert!(o.status.code().is_some_and(|c| c == 0 || c == 2), "{o:?}");
    }
    state_folder_holds_none(&s, "sensitive", &needles);
    // Saved all the same (a catalogue compiled on every run was twice the
    // time of a check), without its digests.
    assert!(s.live("/var/lib/datum/state.catalogue").exists());
    // Not sensitive again: remembered again (the test can fail).
    s.write("repo/base/main.yaml", &manifest(false));
    settle();
    assert_exit(&s.datum(&["check"]), 0);
    assert!(s.live("/var/lib/datum/state.catalogue").exists());
}

/// An acceptance of a sensitive File's drift written before acceptances
/// were keyed (plain hashes) still holds, and the next check records it
/// again keyed.
#[test]
fn an_acceptance_from_before_keyed_digests_holds_and_is_keyed_again() {
    let manifest = |sensitive: bool| {
        format!(
            "datum: v1alpha1\ntype: File\nname: token\nclass: acc\nsensitive: {sensitive}\ndesired:\n  path: /token\n  mode: \"0600\"\n  content: \"password={CANARY}-declared\\n\"\n"
        )
    };
    let s = Sandbox::with_base(&manifest(false));
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nclasses:\n  acc: {interval: 5m, policy: accept}\n",
    );
    // The plain declaration hash of the sensitive declaration, as the
    // catalogue computes it (checked against the one it shows while the
    // resource is not sensitive).
    let shown: serde_json::Value = serde_json::from_slice(&s.datum(&["catalogue"]).stdout).unwrap();
    let r = &shown["resources"][0];
    let declaration = |sensitive: bool| {
        let canonical = serde_json::json!({
            "content_sha256": r["content_sha256"],
            "desired": r["desired"],
            "kind": "File",
            "name": "token",
            "requires": [],
            "sensitive": sensitive,
            "validate": null,
        });
        sha256sum(serde_json::to_string(&canonical).unwrap().as_bytes())
    };
    assert_eq!(r["declaration_hash"], declaration(false).as_str(), "{r}");
    // An acceptance with plain hashes (its observation's is the same
    // whether the resource is sensitive or not).
    assert_exit(&s.datum(&["apply"]), 2);
    let live = format!("password={CANARY}-live\n");
    fs::write(s.live("/token"), &live).unwrap();
    assert_exit(&s.datum(&["reconcile"]), 2);
    s.write("repo/base/main.yaml", &manifest(true));
    let db = s.live("/var/lib/datum/state.db");
    let plain = declaration(true);
    let Some(observation) = sqlite_dump(&db, "SELECT observation_hash FROM accepted") else {
        return;
    };
    let observation = observation.trim().to_owned();
    assert_eq!(observation.len(), 64, "{observation}");
    sqlite_dump(
        &db,
        &format!("UPDATE accepted SET declaration_hash = '{plain}'"),
    )
    .unwrap();
    // Still accepted, and keyed again.
    assert_exit(&s.datum(&["check"]), 0);
    let row = sqlite_dump(
        &db,
        "SELECT declaration_hash, observation_hash FROM accepted",
    )
    .unwrap();
    let (d, o) = row.trim().split_once('|').expect("one row");
    assert!(
        d.starts_with("keyed-blake3:") && o.starts_with("keyed-blake3:"),
        "{row}"
    );
    let dump = sqlite_dump(&db, ".dump").unwrap();
    assert!(
        !dump.contains(&plain) && !dump.contains(&observation),
        "{dump}"
    );
    assert_exit(&s.datum(&["check"]), 0);
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 0);
    assert_eq!(fs::read_to_string(s.live("/token")).unwrap(), live);
}

/// A sensitive resource's verified record and acceptance are held only as
/// keyed digests, which no other key can check: with digest.key lost, a
/// new key made silently beside them took the acceptance with it, and the
/// next apply overwrote the accepted content as an "intentional" update
/// though nothing was declared anew. Beside keyed records a lost key is
/// refused (exit 1, the live file and state.db untouched, no key made)
/// until it is restored or `--rebuild-state` forgets them and makes a new
/// one; a root with no keyed records still gets its key silently.
#[test]
fn a_lost_digest_key_beside_keyed_records_is_refused_not_replaced() {
    let s = Sandbox::with_base(&format!(
        "datum: v1alpha1\ntype: File\nname: token\nclass: acc\nsensitive: true\ndesired:\n  path: /token\n  mode: \"0600\"\n  content: \"password={CANARY}-declared\\n\"\n"
    ));
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nclasses:\n  acc: {interval: 5m, policy: accept}\n",
    );
    let first = s.datum(&["apply"]);
    assert_exit(&first, 2);
    // A fresh root gets its key silently.
    assert!(!stderr(&first).contains("digest.key"), "{}", stderr(&first));
    let key_path = s.live("/var/lib/datum/digest.key");
    let key = fs::read(&key_path).expect("a key made on the first apply");
    let live = format!("password={CANARY}-live\n");
    fs::write(s.live("/token"), &live).unwrap();
    assert_exit(&s.datum(&["reconcile"]), 2);

    fs::remove_file(&key_path).unwrap();
    let db = s.live("/var/lib/datum/state.db");
    let db_before = fs::read(&db).unwrap();
    for args in [
        &["apply"][..],
        &["reconcile"],
        &["apply", "--target", "File[token]"],
    ] {
        let refused = s.datum(args);
        assert_exit(&refused, 1);
        let err = stderr(&refused);
        for needed in [
            "digest.key",
            "File[token]",
            "1 acceptance",
            "--rebuild-state",
            "backup",
        ] {
            assert!(err.contains(needed), "{args:?}: no {needed:?} in: {err}");
        }
        assert!(!err.contains(CANARY), "{err}");
        assert_eq!(
            fs::read_to_string(s.live("/token")).unwrap(),
            live,
            "{args:?}"
        );
        assert_eq!(
            fs::read(&db).unwrap(),
            db_before,
            "{args:?}: state.db changed"
        );
        assert!(!key_path.exists(), "{args:?} made a new key");
    }
    // Read-only commands go on without a key, say why, and make none.
    for args in [&["plan"][..], &["check"]] {
        let read = s.datum(args);
        let err = stderr(&read);
        assert!(
            err.contains("digest.key") && err.contains("--rebuild-state"),
            "{args:?}: {err}"
        );
        assert!(!stdout(&read).contains(CANARY) && !err.contains(CANARY));
        assert_eq!(fs::read_to_string(s.live("/token")).unwrap(), live);
        assert!(!key_path.exists(), "{args:?} made a new key");
    }

    // The key restored, the acceptance holds again: nothing to do.
    fs::write(&key_path, &key).unwrap();
    let restored = s.datum(&["apply"]);
    assert_exit(&restored, 0);
    assert_eq!(fs::read_to_string(s.live("/token")).unwrap(), live);

    // The way out without the key: --rebuild-state forgets the keyed
    // records, says so, and makes a new key; the next apply converges.
    fs::remove_file(&key_path).unwrap();
    let rebuilt = s.datum(&["apply", "--rebuild-state"]);
    assert_exit(&rebuilt, 2);
    assert!(
        stderr(&rebuilt).contains("forgot") && stderr(&rebuilt).contains("File[token]"),
        "{}",
        stderr(&rebuilt)
    );
    let new_key = fs::read(&key_path).expect("a new key");
    assert_ne!(new_key, key);
    assert_eq!(
        fs::read_to_string(s.live("/token")).unwrap(),
        format!("password={CANARY}-declared\n")
    );
    assert_exit(&s.datum(&["apply"]), 0);
    assert_exit(&s.datum(&["plan"]), 0);
}

/// A digest key replaced (a wrong backup, another host's key) beside
/// records keyed with the old one is refused like a lost one: the store
/// keeps a check value of the key it was used with (a keyed digest of a
/// fixed label), and a key that does not give it is not this store's.
#[test]
fn a_replaced_digest_key_beside_keyed_records_is_refused_not_used() {
    let s = Sandbox::with_base(&format!(
        "datum: v1alpha1\ntype: File\nname: token\nclass: acc\nsensitive: true\ndesired:\n  path: /token\n  mode: \"0600\"\n  content: \"password={CANARY}-declared\\n\"\n"
    ));
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nclasses:\n  acc: {interval: 5m, policy: accept}\n",
    );
    let first = s.datum(&["apply"]);
    assert_exit(&first, 2);
    assert!(!stderr(&first).contains("digest.key"), "{}", stderr(&first));
    let key_path = s.live("/var/lib/datum/digest.key");
    let key = fs::read(&key_path).expect("a key made on the first apply");
    let live = format!("password={CANARY}-live\n");
    fs::write(s.live("/token"), &live).unwrap();
    assert_exit(&s.datum(&["reconcile"]), 2);
    assert_exit(&s.datum(&["apply"]), 0);

    // Another 32-byte key in its place: refused, nothing changed.
    let wrong = vec![7u8; 32];
    assert_ne!(wrong, key);
    fs::write(&key_path, &wrong).unwrap();
    let db = s.live("/var/lib/datum/state.db");
    let db_before = fs::read(&db).unwrap();
    for args in [&["apply"][..], &["reconcile"]] {
        let refused = s.datum(args);
        assert_exit(&refused, 1);
        let err = stderr(&refused);
        for needed in [
            "digest.key",
            "is not the key",
            "File[token]",
            "1 acceptance",
            "--rebuild-state",
            "backup",
        ] {
            assert!(err.contains(needed), "{args:?}: no {needed:?} in: {err}");
        }
        assert!(!err.contains(CANARY), "{err}");
        assert_eq!(
            fs::read_to_string(s.live("/token")).unwrap(),
            live,
            "{args:?}"
        );
        assert!(fs::read(&db).unwrap() == db_before, "{args:?}: state.db");
        assert_eq!(fs::read(&key_path).unwrap(), wrong, "{args:?}: key");
    }
    // A read-only command warns and goes on without the key.
    let plan = s.datum(&["plan"]);
    let err = stderr(&plan);
    assert!(
        err.contains("is not the key") && err.contains("--rebuild-state"),
        "{err}"
    );
    assert!(!stdout(&plan).contains(CANARY) && !err.contains(CANARY));
    assert_eq!(fs::read(&key_path).unwrap(), wrong, "plan: key");

    // The right key restored: nothing to do, the acceptance holds.
    fs::write(&key_path, &key).unwrap();
    let restored = s.datum(&["apply"]);
    assert_exit(&restored, 0);
    assert!(!stderr(&restored).contains("digest.key"));
    assert_eq!(fs::read_to_string(s.live("/token")).unwrap(), live);

    // A store without a check value (made by a build before it was kept)
    // takes the key it has (nothing better is known) and records its
    // check value: the wrong key below is refused again.
    if sqlite_dump(&db, "UPDATE store_identity SET digest_key_check = NULL").is_some() {
        assert_exit(&s.datum(&["apply"]), 0);
        let check = sqlite_dump(&db, "SELECT digest_key_check FROM store_identity").unwrap();
        assert!(check.starts_with("keyed-blake3:"), "{check}");
    }

    // --rebuild-state gets out: the keyed records are forgotten, a new
    // key (neither) is made, and the next runs are quiet.
    fs::write(&key_path, &wrong).unwrap();
    let rebuilt = s.datum(&["apply", "--rebuild-state"]);
    assert_exit(&rebuilt, 2);
    assert!(
        stderr(&rebuilt).contains("forgot") && stderr(&rebuilt).contains("File[token]"),
        "{}",
        stderr(&rebuilt)
    );
    let new_key = fs::read(&key_path).unwrap();
    assert!(new_key.len() == 32 && new_key != key && new_key != wrong);
    assert_eq!(
        fs::read_to_string(s.live("/token")).unwrap(),
        format!("password={CANARY}-declared\n")
    );
    for args in [&["apply"][..], &["plan"]] {
        let quiet = s.datum(args);
        assert_exit(&quiet, 0);
        assert!(!stderr(&quiet).contains("digest.key"), "{}", stderr(&quiet));
    }
}
