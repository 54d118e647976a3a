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
