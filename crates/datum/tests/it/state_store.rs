//! An unusable state store stops everything that acts on it: a damaged or
//! full store makes apply (and policy checks) refuse before anything is
//! written, so a quarantined emergency fix is never overwritten, and the
//! quarantine is still there once the store is restored or has room again.

use std::fs;
use std::path::Path;
use std::process::Command;

use super::support::{Sandbox, assert_exit, stderr, stdout};

const FIX: &str = "the emergency fix, made by hand during the outage\n";

/// A root where File[motd] was applied, then fixed by hand and quarantined
/// by a person.
fn quarantined() -> Sandbox {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  content: \"declared\\n\"\n",
    );
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    fs::write(s.live("/etc/motd"), FIX).unwrap();
    assert_exit(
        &s.datum(&["quarantine", "File/motd", "--reason", "outage fix"]),
        0,
    );
    // Respected while the store is healthy: held, and a person's decision
    // is not a failure (0: nothing changed, nothing failed).
    assert_exit(&s.datum(&["apply"]), 0);
    assert_eq!(fs::read_to_string(s.live("/etc/motd")).unwrap(), FIX);
    s
}

#[track_caller]
fn assert_refused(s: &Sandbox, args: &[&str], why: &str) {
    let out = s.datum(args);
    assert_exit(&out, 1);
    let err = stderr(&out);
    for word in [why, "nothing was", "--rebuild-state", "restore"] {
        assert!(err.contains(word), "`{word}` missing from:\n{err}");
    }
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        FIX,
        "{args:?} overwrote the quarantined fix"
    );
}

#[test]
fn a_corrupt_store_stops_apply_and_the_quarantine_survives_its_restoration() {
    let s = quarantined();
    let db = s.live("/var/lib/datum/state.db");
    // Fold the WAL in, so the database file alone is the whole store.
    drop(datum_store::Store::open(&db).unwrap());
    let good = fs::read(&db).unwrap();
    let mut bad = good.clone();
    for b in &mut bad[..100] {
        *b = 0x5a;
    }
    fs::write(&db, &bad).unwrap();

    assert_refused(&s, &["apply"], "not a database");
    assert_refused(&s, &["release", "File/motd"], "not a database");
    assert_eq!(
        fs::read(&db).unwrap(),
        bad,
        "the damaged store is never replaced"
    );
    // A report-only check and a plan go on, read-only, and say so.
    let out = s.datum(&["plan"]);
    assert!(stderr(&out).contains("read-only"), "{}", stderr(&out));
    assert_eq!(fs::read(&db).unwrap(), bad);

    // Restored from a backup: the quarantine is still there and respected.
    fs::write(&db, &good).unwrap();
    assert_exit(&s.datum(&["apply"]), 0);
    assert_eq!(fs::read_to_string(s.live("/etc/motd")).unwrap(), FIX);
    let out = s.datum(&["--output", "json", "check"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["quarantined"][0]["target"], "File[motd]", "{json:#}");

    // --rebuild-state is a person's explicit choice, and it says what it forgets.
    fs::write(&db, &bad).unwrap();
    let out = s.datum(&["apply", "--rebuild-state"]);
    assert!(stderr(&out).contains("quarantine"), "{}", stderr(&out));
    assert!(stdout(&out).contains("File[motd]"), "{}", stdout(&out));
}

/// A damaged row the integrity check does not see (it reads pages, not
/// values): the quarantine's target no longer parses. The apply refused
/// nothing and read no quarantine at all, so the person's fix was
/// overwritten; now the store is unusable, as when its pages are damaged.
#[test]
fn a_quarantine_the_store_cannot_read_stops_apply() {
    let s = quarantined();
    let db = s.live("/var/lib/datum/state.db");
    // Fold the WAL in, so the database file alone is the whole store.
    drop(datum_store::Store::open(&db).unwrap());
    let mut bad = fs::read(&db).unwrap();
    let (from, to) = (b"File[motd]", b"File{motd]");
    let mut damaged = 0;
    for i in 0..bad.len() - from.len() {
        if &bad[i..i + from.len()] == from {
            bad[i..i + from.len()].copy_from_slice(to);
            damaged += 1;
        }
    }
    assert!(damaged > 0, "the quarantine's target is in the file");
    fs::write(&db, &bad).unwrap();

    assert_refused(
        &s,
        &["apply"],
        "quarantine target in the database is malformed",
    );
    assert_eq!(
        fs::read(&db).unwrap(),
        bad,
        "the damaged store is left as it is"
    );
    // A plan goes on read-only, and says so.
    let out = s.datum(&["plan"]);
    assert!(stderr(&out).contains("read-only"), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(s.live("/etc/motd")).unwrap(), FIX);
}

/// A small tmpfs mounted over a folder, unmounted when dropped.
pub(crate) struct Mounted(std::path::PathBuf);

impl Mounted {
    pub(crate) fn tmpfs(at: &Path, size: &str) -> Option<Mounted> {
        fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Mounted(at.to_path_buf()))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_store_stops_apply_and_the_quarantine_survives_the_cleanup() {
    if !rustix::process::geteuid().is_root() {
        assert!(
            std::env::var_os("DATUM_VALIDATORS_REQUIRED").is_none(),
            "needs root to mount a small file system"
        );
        println!("skipped: needs root to mount a small file system");
        return;
    }
    let s = quarantined();
    let state = s.live("/var/lib/datum");
    // The store moves to a 4 MiB file system, which then fills up.
    let saved = s.dir.path().join("saved");
    fs::create_dir(&saved).unwrap();
    for e in fs::read_dir(&state).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            fs::copy(e.path(), saved.join(e.file_name())).unwrap();
        }
    }
    let Some(_mount) = Mounted::tmpfs(&state, "4m") else {
        panic!("cannot mount a tmpfs on {}", state.display());
    };
    for e in fs::read_dir(&saved).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), state.join(e.file_name())).unwrap();
    }
    let filler = state.join("filler");
    {
        use std::io::Write as _;
        let mut f = fs::File::create(&filler).unwrap();
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
    }
    fs::write(s.live("/etc/motd"), FIX).unwrap();
    // Nothing is damaged: the way out is room, not a restore or a rebuild
    // (which a full file system refuses the same way).
    let out = s.datum(&["apply"]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    for word in ["bytes free", "nothing was", "Make room", "not damaged"] {
        assert!(err.contains(word), "`{word}` missing from:\n{err}");
    }
    for word in ["--rebuild-state", "from a backup"] {
        assert!(!err.contains(word), "`{word}` in:\n{err}");
    }
    assert_eq!(fs::read_to_string(s.live("/etc/motd")).unwrap(), FIX);
    let out = s.datum(&["apply", "--rebuild-state"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("Make room"), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(s.live("/etc/motd")).unwrap(), FIX);

    // Room again: nothing was lost, the quarantine holds.
    fs::remove_file(&filler).unwrap();
    assert_exit(&s.datum(&["apply"]), 0);
    assert_eq!(fs::read_to_string(s.live("/etc/motd")).unwrap(), FIX);
    let out = s.datum(&["--output", "json", "check"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["quarantined"][0]["target"], "File[motd]", "{json:#}");
}

/// File[motd] at /etc/motd, its bytes from `files/motd`.
const MOTD_FROM_SOURCE: &str =
    "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  source: files/motd\n";

/// Waits out the racy window (a catalogue snapshot, and a `source:` file's
/// hash, are kept only of a repository quiet that long), then applies:
/// exit 2.
fn applied_once_quiet(s: &Sandbox) {
    std::thread::sleep(std::time::Duration::from_millis(
        (datum_core::observed::RACY_WINDOW_NS / 1_000_000) as u64 + 500,
    ));
    assert_exit(&s.datum(&["apply"]), 2);
}

/// Replaces the last `from` in the catalogue snapshot by `to` (as long):
/// a byte damaged on disk after the snapshot was written.
fn damage_snapshot(s: &Sandbox, from: &[u8], to: &[u8]) {
    let snapshot = s.live("/var/lib/datum/state.catalogue");
    let mut bytes = fs::read(&snapshot).unwrap();
    let at = bytes
        .windows(from.len())
        .rposition(|w| w == from)
        .expect("the value is in the snapshot");
    bytes[at..at + from.len()].copy_from_slice(to);
    fs::write(&snapshot, &bytes).unwrap();
}

/// The catalogue snapshot beside the store keeps a File's inline content
/// and declared values. A damaged byte in it (the disk, not the
/// repository) went live: the apply wrote the damaged bytes over the file
/// and only its verify, after the rename, found them wrong, on every apply
/// until a recompile (dc0b402 then refused them, exit 4, until
/// --recompile); a damaged mode (0640 read as 0666) was applied as it
/// read, the file made world-writable. Each record of the snapshot carries
/// a checksum: a damaged one is not used, the apply compiles again and
/// writes what the repository declares.
#[test]
fn content_damaged_in_the_snapshot_is_never_written() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  mode: \"0640\"\n  content: \"declared content\\n\"\n",
    );
    fs::create_dir_all(s.live("/etc")).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |s: &Sandbox| {
        fs::metadata(s.live("/etc/motd"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    applied_once_quiet(&s);
    for (from, to) in [
        (&b"declared content"[..], &b"declXred content"[..]),
        (b"0640", b"0666"),
    ] {
        damage_snapshot(&s, from, to);
        fs::write(s.live("/etc/motd"), "by hand\n").unwrap();
        fs::set_permissions(s.live("/etc/motd"), fs::Permissions::from_mode(0o600)).unwrap();
        let out = s.datum(&["apply"]);
        let text = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(
            (
                fs::read_to_string(s.live("/etc/motd")).unwrap().as_str(),
                mode(&s)
            ),
            ("declared content\n", 0o640),
            "damaged values went live:\n{text}"
        );
        assert_exit(&out, 2);
        assert!(stderr(&out).contains("snapshot is damaged"), "{text}");
        assert_exit(&s.datum(&["apply"]), 0);
    }
}

/// A Tree's declared entries (names, link targets, each file's hash) are
/// packed into the catalogue and read back from its snapshot. A damaged
/// byte there went live: a link target changed in the snapshot was made on
/// the host as it read (File content held in the snapshot was checked
/// since dc0b402, a Tree's packed entries were not; c06ca18 then refused
/// them, exit 4). The snapshot record's checksum now finds the damage: it
/// is not used, the apply compiles again and makes the declared link.
#[test]
fn a_tree_damaged_in_the_snapshot_is_never_written() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n",
    );
    s.write("repo/base/tree/a.conf", "a = 1\n");
    std::os::unix::fs::symlink("target-declared", s.repo().join("base/tree/link")).unwrap();
    fs::create_dir_all(s.live("/etc")).unwrap();
    applied_once_quiet(&s);
    let link = s.live("/etc/t/link");
    assert_eq!(fs::read_link(&link).unwrap(), Path::new("target-declared"));
    damage_snapshot(&s, b"target-declared", b"target-DAMAGED!");
    fs::remove_file(&link).unwrap();

    let out = s.datum(&["apply"]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        fs::read_link(&link).ok().as_deref(),
        Some(Path::new("target-declared")),
        "the damaged packed tree was written:\n{text}"
    );
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("snapshot is damaged"), "{text}");
}

/// The source-hash cache beside the store remembers each `source:` file's
/// checksum by its path and metadata. An entry whose checksum was damaged
/// on disk was trusted by every compile, `--recompile` too: the apply
/// refused the bytes ("changed since the catalogue was compiled; run the
/// pass again"), nothing wrong was written, but every pass failed the same
/// way until the cache was deleted by hand (e283852 then forgot the whole
/// cache after such a refusal). Each line of the cache now carries its own
/// checksum: the damaged entry is not used, the file is hashed again and
/// the first pass applies it.
#[test]
fn a_damaged_entry_of_the_source_hash_cache_is_not_trusted() {
    let s = Sandbox::with_base(MOTD_FROM_SOURCE);
    s.write("repo/base/files/motd", "declared\n");
    fs::create_dir_all(s.live("/etc")).unwrap();
    applied_once_quiet(&s);
    let cache = s.live("/var/lib/datum/source-hashes");
    let text = fs::read_to_string(&cache).unwrap();
    let (header, entry) = text.split_once('\n').expect("one entry");
    assert!(entry.contains("files/motd"), "{text}");
    // The SHA-256 (the field after the line's checksum) damaged, its
    // length kept.
    let (crc, rest) = entry.split_once('\t').unwrap();
    let damaged = format!("{header}\n{crc}\t{}{}", "0".repeat(12), &rest[12..]);
    assert_ne!(damaged, text);
    fs::write(&cache, damaged).unwrap();
    fs::write(s.live("/etc/motd"), "by hand\n").unwrap();

    let out = s.datum(&["apply", "--recompile"]);
    assert_exit(&out, 2);
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        "declared\n",
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(
        fs::read_to_string(&cache).unwrap(),
        text,
        "the entry is written again as it was"
    );
    assert_exit(&s.datum(&["apply"]), 0);
}

/// A `source:` file edited after the compile and before the apply writes
/// it (here while the apply waits for the root lock, which it takes after
/// compiling) is refused: its bytes are no longer those the catalogue
/// recorded. The next pass sees the edit by itself (the catalogue
/// snapshot's stamp and the file's cache key both hold its ctime) and
/// applies it. e283852 also removed the snapshot and the whole source-hash
/// cache after such a refusal, so that next pass hashed every source of
/// the repository again: the cache now stays, the other sources' entries
/// with it.
#[test]
fn a_source_edited_between_compile_and_write_is_refused_then_applied_by_the_next_pass() {
    let s = Sandbox::with_base(&format!(
        "{MOTD_FROM_SOURCE}---\ndatum: v1alpha1\ntype: File\nname: issue\ndesired:\n  path: /etc/issue\n  source: files/issue\n"
    ));
    s.write("repo/base/files/motd", "declared\n");
    s.write("repo/base/files/issue", "issue\n");
    fs::create_dir_all(s.live("/etc")).unwrap();
    applied_once_quiet(&s);
    let cache = s.live("/var/lib/datum/source-hashes");
    let remembered = fs::read_to_string(&cache).unwrap();
    assert!(
        remembered.contains("files/issue") && remembered.contains("files/motd"),
        "{remembered}"
    );
    fs::write(s.live("/etc/motd"), "by hand\n").unwrap();

    // Another pass holds the root lock: the apply compiles, then waits.
    let lock = s.live("/var/lib/datum/lock");
    let held = datum_host::RootLock::acquire(
        &datum_host::Host::new(s.root()),
        std::time::Duration::from_secs(1),
    )
    .unwrap();
    let apply = Command::new(assert_cmd::cargo::cargo_bin("datum"))
        .arg("--repo")
        .arg(s.repo())
        .arg("--root")
        .arg(s.root())
        .arg("--host-file")
        .arg(s.dir.path().join("host.yaml"))
        .args(["--color", "never", "apply"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let waiting = std::time::Instant::now();
    while !has_open(apply.id(), &lock) {
        assert!(
            waiting.elapsed() < std::time::Duration::from_secs(60),
            "the apply never reached the root lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    s.write("repo/base/files/motd", "edited\n");
    drop(held);
    let out = apply.wait_with_output().unwrap();
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert_exit(&out, 4);
    assert!(
        text.contains("changed since the catalogue was compiled"),
        "{text}"
    );
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        "by hand\n",
        "{text}"
    );
    assert_eq!(
        fs::read_to_string(&cache).ok().as_deref(),
        Some(remembered.as_str()),
        "the source hashes were forgotten: {text}"
    );

    // Run again: the edit is compiled and applied.
    let out = s.datum(&["apply"]);
    assert_exit(&out, 2);
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        "edited\n",
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        fs::read_to_string(&cache).unwrap().contains("files/issue"),
        "the other source is still remembered"
    );
    assert_exit(&s.datum(&["apply"]), 0);
}

/// Whether process `pid` has the file `path` open (an apply opens the root
/// lock's file before it waits for it).
fn has_open(pid: u32, path: &Path) -> bool {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten()
                .any(|fd| fs::read_link(fd.path()).is_ok_and(|target| target == path))
        })
        .unwrap_or(false)
}

/// `entry` (a line of the source-hash cache) with its SHA-256 replaced by
/// zeros and its line checksum made again: an entry that reads well but
/// holds a wrong checksum (as if recorded wrong), which the compile trusts.
fn wrong_hash_entry(entry: &str) -> String {
    let (_, rest) = entry.split_once('\t').unwrap();
    let rest = format!("{}{}", "0".repeat(64), &rest[64..]);
    format!("{:08x}\t{rest}", crc32(rest.as_bytes()))
}

/// CRC-32 (IEEE, reflected), as the cache's `crc32fast` computes it.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Declared bytes refused for a diff (their repository file no longer
/// holds what the catalogue recorded: here a source-hash entry holding a
/// wrong checksum under a good line checksum)
/// were shown as "too large to diff: over 8.00 MiB" by plan, for a file of
/// nine bytes, and `datum check` diffed the live file against nothing (every
/// live line added, as if nothing were declared). Both now say what
/// happened, and no line of either side.
#[test]
fn declared_bytes_refused_for_a_diff_are_said_to_be_refused() {
    let s = Sandbox::with_base(MOTD_FROM_SOURCE);
    s.write("repo/base/files/motd", "declared\n");
    fs::create_dir_all(s.live("/etc")).unwrap();
    applied_once_quiet(&s);
    let cache = s.live("/var/lib/datum/source-hashes");
    let good = fs::read_to_string(&cache).unwrap();
    let damage = || {
        let text = fs::read_to_string(&cache).unwrap();
        let (header, entry) = text.split_once('\n').expect("one entry");
        fs::write(
            &cache,
            format!("{header}\n{}\n", wrong_hash_entry(entry.trim_end())),
        )
        .unwrap();
    };
    damage();
    fs::write(s.live("/etc/motd"), "by hand\n").unwrap();
    let out = s.datum(&["plan", "--recompile"]);
    assert_exit(&out, 2);
    let text = stdout(&out);
    assert!(
        text.contains(datum_core::diff::DECLARED_UNREAD) && !text.contains("too large"),
        "{text}"
    );
    assert!(!text.contains("by hand"), "{text}");
    // The entry put right (nothing but a forgery leaves a wrong checksum
    // under a good line checksum), then made wrong again for the check.
    fs::write(&cache, &good).unwrap();
    assert_exit(&s.datum(&["apply", "--recompile"]), 2);
    assert_exit(&s.datum(&["apply"]), 0);
    damage();
    fs::write(s.live("/etc/motd"), "by hand\n").unwrap();
    let out = s.datum(&["check", "--recompile"]);
    assert_exit(&out, 2);
    let text = stdout(&out);
    assert!(
        text.contains(
            &datum_core::diff::unread_note("/etc/motd")
                .trim_end()
                .to_owned()
        ),
        "{text}"
    );
    assert!(!text.contains("+by hand"), "diffed against nothing: {text}");
}

/// An apply records its pass, and queues its fleet report, in the state
/// store once its changes are made. When that write failed (a file system
/// that filled during the pass; here another connection holding the
/// store's write lock past its busy timeout) the apply only warned and
/// exited 2, so nothing but that run knew of the change: the server never
/// heard of it and the exit code said all was well. It is now a failure
/// of the apply: exit 6 (changes and failures), the error saying what was
/// lost and what to do.
#[test]
fn an_apply_the_state_store_cannot_record_says_so_in_its_exit_code() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  content: \"declared\\n\"\n",
    );
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    fs::write(s.live("/etc/motd"), "by hand\n").unwrap();
    let out = {
        let mut other = datum_store::Store::open(&s.live("/var/lib/datum/state.db")).unwrap();
        let _writing = other.batch().unwrap();
        s.datum(&["apply"])
    };
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        "declared\n",
        "{text}"
    );
    assert_exit(&out, 6);
    assert!(
        stderr(&out).contains("could not be recorded in the state store"),
        "{text}"
    );
    assert_exit(&s.datum(&["apply"]), 0);
}

/// A resource renamed (or removed from the repository) left its verified
/// record in the store for good: nothing reads it again, and the store
/// kept one row per name a resource ever had. An apply of the whole
/// catalogue forgets them; one limited to some resources (`--label`,
/// a target) does not, since it does not know the others are gone.
#[test]
fn records_of_resources_no_longer_declared_are_forgotten_by_an_apply() {
    let file = |name: &str| {
        format!(
            "datum: v1alpha1\ntype: File\nname: {name}\ndesired:\n  path: /etc/{name}\n  content: \"x\\n\"\n"
        )
    };
    let s = Sandbox::with_base(&file("motd"));
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    let names = |s: &Sandbox| -> Vec<String> {
        let store = datum_store::Store::open(&s.live("/var/lib/datum/state.db")).unwrap();
        let mut names: Vec<String> = store
            .all_verified()
            .unwrap()
            .into_iter()
            .map(|(id, _)| id.to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(&s), ["File[motd]"]);
    for renamed in ["motd1", "motd2", "motd3"] {
        s.write("repo/base/main.yaml", &file(renamed));
        assert_exit(&s.datum(&["apply"]), 2);
    }
    assert_eq!(names(&s), ["File[motd3]"]);
    // A plan forgets nothing, nor does an apply of part of the catalogue.
    s.write(
        "repo/base/main.yaml",
        &format!("{}---\n{}", file("motd4"), file("issue")),
    );
    assert_exit(&s.datum(&["plan"]), 2);
    assert_eq!(names(&s), ["File[motd3]"]);
    assert_exit(&s.datum(&["apply", "--target", "File/issue"]), 2);
    assert_eq!(names(&s), ["File[issue]", "File[motd3]"]);
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(names(&s), ["File[issue]", "File[motd4]"]);
}

/// A sensitive File's verified record holds only the host's keyed digests
/// since 6adf9dd, but one recorded plain (by a build before that, or while
/// the File was not yet marked sensitive) stayed plain through every
/// `check` and `reconcile`, the agent's passes, until an apply: the plain
/// SHA-256 of the secret's content and a declaration hash covering it in
/// state.db. A check seals such a record (its keyed digests, the same
/// verification), and the File is still converged, no drift.
#[test]
fn a_check_seals_a_sensitive_files_plain_record() {
    let doc = |sensitive: bool| {
        format!(
            "datum: v1alpha1\ntype: File\nname: token\nsensitive: {sensitive}\ndesired:\n  path: /token\n  mode: \"0600\"\n  content: \"password=CNRYh107seal\\n\"\n"
        )
    };
    let s = Sandbox::with_base(&doc(false));
    assert_exit(&s.datum(&["apply"]), 2);
    let db = s.live("/var/lib/datum/state.db");
    let row = || {
        let o = Command::new("sqlite3")
            .arg(&db)
            .arg("SELECT declaration_hash, sha256 FROM verified WHERE name = 'token'")
            .output()
            .ok()?;
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        Some(String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(plain) = row() else {
        return; // no sqlite3
    };
    assert!(!plain.contains("keyed-blake3:"), "{plain}");
    s.write("repo/base/main.yaml", &doc(true));
    for command in ["check", "reconcile"] {
        let out = s.datum(&[command]);
        assert_exit(&out, 0);
        assert!(stdout(&out).contains("no drift"), "{}", stdout(&out));
        let now = row().unwrap();
        let (declaration, sha) = now.split_once('|').unwrap();
        assert!(
            declaration.starts_with("keyed-blake3:") && sha.starts_with("keyed-blake3:"),
            "{command}: {now}"
        );
    }
    // Still this very verification: a metadata check trusts it, and an
    // apply has nothing to do.
    let apply = s.datum(&["apply"]);
    assert_exit(&apply, 0);
    assert!(
        stdout(&apply).contains("0 changed, 1 unchanged"),
        "{}",
        stdout(&apply)
    );
}
