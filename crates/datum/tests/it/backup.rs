//! The backup store: an apply never destroys the evidence of what was there.

use std::fs;

use serde_json::json;

use crate::support::*;

#[test]
fn replaced_content_is_kept_and_can_be_shown_and_restored() {
    let decl = |c: &str| {
        format!(
            "datum: v1alpha1\ntype: File\nname: f\ndesired:\n  path: /f.conf\n  content: \"{c}\\n\"\n"
        )
    };
    let s = Sandbox::with_base(&decl("declared"));
    fs::write(s.live("/f.conf"), "what was there before\n").unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(fs::read_to_string(s.live("/f.conf")).unwrap(), "declared\n");

    let list = s.datum(&["--output", "json", "backup", "list"]);
    assert_exit(&list, 0);
    let doc: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(doc["format_version"], "1");
    let entries = &doc["backups"];
    assert_eq!(entries.as_array().unwrap().len(), 1, "{entries}");
    assert_eq!(entries[0]["path"], "/f.conf");
    let id = entries[0]["id"].to_string().trim_matches('"').to_owned();

    let show = s.datum(&["backup", "show", &id]);
    assert_exit(&show, 0);
    assert_eq!(stdout(&show), "what was there before\n");

    // `--output json` prints one JSON document, for show and restore too.
    let show = s.datum(&["--output", "json", "backup", "show", &id]);
    assert_exit(&show, 0);
    let doc: serde_json::Value =
        serde_json::from_slice(&show.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&show)));
    assert_eq!(doc["format_version"], "1");
    assert_eq!(doc["content"], "what was there before\n");
    assert_eq!(doc["path"], "/f.conf");

    let restore = s.datum(&["--output", "json", "backup", "restore", &id]);
    assert_exit(&restore, 0);
    let doc: serde_json::Value = serde_json::from_slice(&restore.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", stdout(&restore)));
    assert_eq!(
        (&doc["restored"], &doc["path"]),
        (&json!(true), &json!("/f.conf"))
    );
    assert_eq!(
        fs::read_to_string(s.live("/f.conf")).unwrap(),
        "what was there before\n"
    );
    // What the restore replaced was saved first: the restore can be undone.
    let list = s.datum(&["--output", "json", "backup", "list"]);
    let doc: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let entries = doc["backups"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{doc}");
    let newest = entries[0]["id"].to_string();
    // It is kept as sensitive (what the file held may be a secret the
    // restored entry predates): shown as the placeholder, restored whole
    // (below).
    assert_eq!(
        stdout(&s.datum(&["backup", "show", &newest])).trim_end(),
        datum_core::SENSITIVE_PLACEHOLDER
    );
    // Restoring again what is there saves nothing more.
    assert_exit(&s.datum(&["backup", "restore", &id]), 0);
    let list = s.datum(&["--output", "json", "backup", "list"]);
    let doc: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(doc["backups"].as_array().unwrap().len(), 2, "{doc}");
    // The restored file is drift from the declaration again.
    assert_exit(&s.datum(&["plan"]), 2);
    // The restore is undone by restoring what it saved.
    assert_exit(&s.datum(&["backup", "restore", &newest]), 0);
    assert_eq!(fs::read_to_string(s.live("/f.conf")).unwrap(), "declared\n");
    assert_exit(&s.datum(&["plan"]), 0);
}

/// A File declaring `content` at /f.conf, with `extra` fields.
fn file_decl(content: &str, extra: &str) -> String {
    format!(
        "datum: v1alpha1\ntype: File\nname: f\ndesired:\n  path: /f.conf\n  content: {content:?}\n{extra}"
    )
}

fn backup_paths(s: &Sandbox) -> Vec<String> {
    let list = s.datum(&["--output", "json", "backup", "list"]);
    assert_exit(&list, 0);
    let doc: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let mut paths: Vec<String> = doc["backups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_owned())
        .collect();
    paths.sort();
    paths
}

#[test]
fn a_backup_that_cannot_be_saved_stops_the_replacement() {
    let s = Sandbox::with_base(&file_decl("declared\n", ""));
    let before = b"what was there before\n";
    fs::write(s.live("/f.conf"), before).unwrap();
    // A first apply creates the backup store; then the fan-out folder this
    // content's blob goes to is made unusable (a file in its place: it
    // fails for root as for anyone).
    let other = file_decl("declared\n", "");
    s.write("repo/base/main.yaml", &other.replace("/f.conf", "/g.conf"));
    assert_exit(&s.datum(&["apply"]), 2);
    s.write("repo/base/main.yaml", &file_decl("declared\n", ""));
    let sha = datum_core::sha256_hex(before);
    let fan = s.live("/var/lib/datum/backups/objects").join(&sha[..2]);
    let _ = fs::remove_dir_all(&fan);
    fs::write(&fan, "in the way").unwrap();

    let o = s.datum(&["apply"]);
    assert_exit(&o, 4);
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(text.contains("cannot save the old content"), "{text}");
    assert!(text.contains("not replaced"), "{text}");
    assert_eq!(fs::read(s.live("/f.conf")).unwrap(), before);
    assert_eq!(backup_paths(&s), Vec::<String>::new());
    // A store that works again: replaced, with the evidence kept.
    fs::remove_file(&fan).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(fs::read_to_string(s.live("/f.conf")).unwrap(), "declared\n");
    assert_eq!(backup_paths(&s), vec!["/f.conf".to_owned()]);
}

/// A backup folder on a file system with no room left: the apply stops
/// before anything is replaced and says the file system is full. It said
/// the index was damaged (SQLite's I/O error on its shared memory) and
/// advised restoring an older index.db or --rebuild-state, which forgets
/// the entries saved since or changes nothing.
#[test]
fn a_full_backup_folder_stops_the_apply_and_says_it_is_full() {
    if !rustix::process::geteuid().is_root() {
        assert!(
            std::env::var_os("DATUM_VALIDATORS_REQUIRED").is_none(),
            "needs root to mount a small file system"
        );
        println!("skipped: needs root to mount a small file system");
        return;
    }
    let s = Sandbox::with_base(&file_decl("declared\n", ""));
    let before = b"what was there before\n";
    // A first apply makes the stores (another file, so f.conf stays).
    s.write(
        "repo/base/main.yaml",
        &file_decl("declared\n", "").replace("/f.conf", "/g.conf"),
    );
    assert_exit(&s.datum(&["apply"]), 2);
    s.write("repo/base/main.yaml", &file_decl("declared\n", ""));
    fs::write(s.live("/f.conf"), before).unwrap();
    // The backup folder moves to a 2 MiB file system, which fills up.
    let backups = s.live("/var/lib/datum/backups");
    let saved = s.dir.path().join("saved-backups");
    fs::rename(&backups, &saved).unwrap();
    let Some(_mount) = crate::state_store::Mounted::tmpfs(&backups, "2m") else {
        panic!("cannot mount a tmpfs on {}", backups.display());
    };
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", saved.display()))
        .arg(&backups)
        .status()
        .unwrap();
    assert!(copied.success());
    let filler = backups.join("filler");
    {
        use std::io::Write as _;
        let mut f = fs::File::create(&filler).unwrap();
        let block = vec![0u8; 16 * 1024];
        while f.write_all(&block).is_ok() {}
    }
    let o = s.datum(&["apply"]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("bytes free"), "{err}");
    assert!(!err.contains("restore its index.db"), "{err}");
    assert_eq!(fs::read(s.live("/f.conf")).unwrap(), before);
    // With room again nothing was saved, and the apply goes ahead, the
    // evidence kept.
    fs::remove_file(&filler).unwrap();
    assert_eq!(backup_paths(&s), Vec::<String>::new());
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(fs::read_to_string(s.live("/f.conf")).unwrap(), "declared\n");
    assert_eq!(backup_paths(&s), vec!["/f.conf".to_owned()]);
}

#[test]
fn content_the_validator_refuses_leaves_no_backup_entry() {
    let s = Sandbox::with_base(&file_decl("{\"broken\": \n", "  validate: json\n"));
    fs::write(s.live("/f.conf"), "{\"live\": 1}\n").unwrap();
    let o = s.datum(&["apply"]);
    assert_exit(&o, 4);
    assert_eq!(
        fs::read_to_string(s.live("/f.conf")).unwrap(),
        "{\"live\": 1}\n"
    );
    assert_eq!(backup_paths(&s), Vec::<String>::new());
    // Valid content: saved once the validator accepted it, then replaced.
    s.write(
        "repo/base/main.yaml",
        &file_decl("{\"declared\": 2}\n", "  validate: json\n"),
    );
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(backup_paths(&s), vec!["/f.conf".to_owned()]);
    let list = s.datum(&["--output", "json", "backup", "list"]);
    let doc: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let id = doc["backups"][0]["id"].to_string();
    let show = s.datum(&["backup", "show", id.trim_matches('"')]);
    assert_eq!(stdout(&show), "{\"live\": 1}\n");
}

#[test]
fn tree_overwrites_and_purges_are_backed_up() {
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n  purge: true\n",
    );
    s.write("repo/base/tree/a.conf", "a = 1\n");
    s.write("repo/base/tree/sub/b.conf", "b = 2\n");
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(backup_paths(&s), Vec::<String>::new());
    fs::write(s.live("/etc/t/a.conf"), "a = edited\n").unwrap();
    fs::write(s.live("/etc/t/sub/stray.conf"), "stray\n").unwrap();
    // An unmanaged folder: purged whole, every file in it saved first.
    fs::create_dir_all(s.live("/etc/t/extra/deep")).unwrap();
    fs::write(s.live("/etc/t/extra/deep/kept.conf"), "kept\n").unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    assert!(!s.live("/etc/t/extra").exists());
    assert_eq!(
        fs::read_to_string(s.live("/etc/t/a.conf")).unwrap(),
        "a = 1\n"
    );
    assert!(!s.live("/etc/t/sub/stray.conf").exists());
    assert_eq!(
        backup_paths(&s),
        vec![
            "/etc/t/a.conf".to_owned(),
            "/etc/t/extra/deep/kept.conf".to_owned(),
            "/etc/t/sub/stray.conf".to_owned()
        ]
    );
    let list = s.datum(&["backup", "list", "/etc/t/sub/stray.conf"]);
    assert!(stdout(&list).contains("remove"), "{}", stdout(&list));
}

/// A Tree entry whose name is not UTF-8 is saved like any other before it
/// is overwritten or purged, and restored to that very name. Before, the
/// evidence was looked for under the lossy name (`bad\u{fffd}`), found
/// nothing there, and the old content was lost without a word.
#[test]
fn a_tree_entry_whose_name_is_not_utf8_is_backed_up() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: t\ndesired:\n  path: /etc/t\n  source: tree\n  purge: true\n",
    );
    let declared = OsStr::from_bytes(b"bad\xff");
    let tree = s.repo().join("base/tree");
    fs::create_dir_all(&tree).unwrap();
    fs::write(tree.join(declared), "declared\n").unwrap();
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    let live = s.live("/etc/t");
    fs::write(live.join(declared), "edited\n").unwrap();
    fs::write(live.join(OsStr::from_bytes(b"stray\xfe")), "stray\n").unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(
        fs::read_to_string(live.join(declared)).unwrap(),
        "declared\n"
    );
    let list = stdout(&s.datum(&["backup", "list"]));
    let id_of = |reason: &str, name: &str| {
        list.lines()
            .find(|l| l.contains(reason) && l.contains(name))
            .and_then(|l| l.split_whitespace().next())
            .map(str::to_owned)
    };
    assert!(id_of("remove", "/etc/t/stray").is_some(), "{list}");
    let edited = id_of("update", "/etc/t/bad").unwrap_or_else(|| panic!("{list}"));
    assert_exit(&s.datum(&["backup", "restore", &edited]), 0);
    assert_eq!(fs::read_to_string(live.join(declared)).unwrap(), "edited\n");
    // JSON shows such a path lossily, its bytes beside it (before, the
    // listing failed: "path contains invalid UTF-8 characters").
    assert_eq!(
        backup_paths(&s),
        [
            "/etc/t/bad\u{fffd}",
            "/etc/t/bad\u{fffd}",
            "/etc/t/stray\u{fffd}"
        ]
    );
    let list = s.datum(&["--output", "json", "backup", "list"]);
    let doc: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let stray = doc["backups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["reason"] == "remove")
        .unwrap();
    assert_eq!(stray["path_bytes"], json!(b"/etc/t/stray\xfe".to_vec()));
    let restore = s.datum(&["--output", "json", "backup", "restore", &edited]);
    assert_exit(&restore, 0);
    let doc: serde_json::Value = serde_json::from_slice(&restore.stdout).unwrap();
    assert_eq!(doc["path"], "/etc/t/bad\u{fffd}");
}

/// A live file far larger than anything kept as evidence (a local user
/// who owns one managed file made it a sparse 4 GiB) is neither read into
/// memory nor copied into the backup store: before, the save read it whole
/// (`Vec::with_capacity(len)`) and every apply aborted (`memory allocation
/// of 4294967297 bytes failed`, exit 134) before the resources after it
/// ran. Now the apply, held to 2 GiB of address space, replaces it and
/// goes on; the evidence keeps its size and SHA-256 and says the content
/// was too large to keep (`backup show` says so, `restore` refuses).
#[test]
fn a_live_file_too_large_to_keep_is_replaced_with_its_size_and_checksum_as_evidence() {
    const BIG: u64 = 4 << 30;
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: Tree\nname: app\ndesired:\n  path: /app\n  source: tree\n---\n\
         datum: v1alpha1\ntype: File\nname: z\ndesired:\n  path: /z.conf\n  content: \"one\\n\"\n",
    );
    s.write("repo/base/tree/a.conf", "declared\n");
    assert_exit(&s.datum(&["apply"]), 2);
    // Sparse: costs no disk.
    fs::OpenOptions::new()
        .write(true)
        .open(s.live("/app/a.conf"))
        .unwrap()
        .set_len(BIG)
        .unwrap();
    s.write(
        "repo/base/main.yaml",
        &fs::read_to_string(s.repo().join("base/main.yaml"))
            .unwrap()
            .replace("one", "two"),
    );
    let datum = assert_cmd::cargo::cargo_bin("datum");
    let o = std::process::Command::new("prlimit")
        .arg(format!("--as={}", 2u64 << 30))
        .arg("--")
        .arg(&datum)
        .arg("--repo")
        .arg(s.repo())
        .arg("--root")
        .arg(s.root())
        .arg("--host-file")
        .arg(s.dir.path().join("host.yaml"))
        .args(["--color", "never", "apply"])
        .output()
        .expect("run datum under prlimit (util-linux)");
    assert_exit(&o, 2);
    assert_eq!(
        fs::read_to_string(s.live("/app/a.conf")).unwrap(),
        "declared\n"
    );
    assert_eq!(fs::read_to_string(s.live("/z.conf")).unwrap(), "two\n");
    // Nothing of it copied into the store.
    let mut stored = 0;
    let mut dirs = vec![s.live("/var/lib/datum/backups")];
    while let Some(dir) = dirs.pop() {
        for e in fs::read_dir(dir).unwrap().flatten() {
            let m = fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                dirs.push(e.path());
            } else {
                use std::os::unix::fs::MetadataExt as _;
                stored += m.blocks() * 512;
            }
        }
    }
    assert!(stored < 64 << 20, "{stored} bytes in the backup store");
    let list = s.datum(&["--output", "json", "backup", "list"]);
    assert_exit(&list, 0);
    let doc: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let entries = doc["backups"].as_array().unwrap();
    let big = entries
        .iter()
        .find(|e| e["path"] == "/app/a.conf")
        .unwrap_or_else(|| panic!("{doc}"));
    assert_eq!(big["size"], json!(BIG));
    assert_eq!(big["content_kept"], json!(false), "{big}");
    // SHA-256 of what it held: its declared content, then zeros.
    let held = {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        h.update(b"declared\n");
        let block = vec![0u8; 1 << 20];
        let mut left = BIG - 9;
        while left > 0 {
            let n = left.min(block.len() as u64);
            h.update(&block[..n as usize]);
            left -= n;
        }
        hex::encode(h.finalize())
    };
    assert_eq!(big["sha256"], json!(held));
    let id = big["id"].to_string();
    let show = s.datum(&["backup", "show", &id]);
    assert_exit(&show, 1);
    assert!(
        stderr(&show).contains("too large to keep"),
        "{}",
        stderr(&show)
    );
    let restore = s.datum(&["backup", "restore", &id]);
    assert_exit(&restore, 1);
    assert!(
        stderr(&restore).contains("too large to keep"),
        "{}",
        stderr(&restore)
    );
    assert_eq!(
        fs::read_to_string(s.live("/app/a.conf")).unwrap(),
        "declared\n"
    );
}
