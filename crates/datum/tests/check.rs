//! `datum check`, `datum fingerprint`, `schedule`, `quarantine`/`release`:
//! the built binary against temporary roots.
//!
//! Every drift scenario starts from a clean apply of a small example-like
//! repository (files from `source:`, a template-free Tree with exclusions,
//! a Directory), changes one thing the way a person or a package would, and
//! asserts exactly one finding in the right category and exit 2.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is the test failing, with its message"
)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use datum_testkit::run::{assert_exit, code, stderr, stdout};
use serde_json::Value;
use tempfile::TempDir;

// ---- helpers (the few from tests/it/support.rs this file needs) ----------

struct Sandbox {
    dir: TempDir,
}

const MANIFEST: &str = r#"datum: v1alpha1
type: Directory
name: etc-app
desired: {path: /etc/app, owner: root, group: root, mode: "0755"}
---
datum: v1alpha1
type: File
name: motd
desired: {path: /etc/motd, owner: root, group: root, mode: "0644", source: files/motd}
---
datum: v1alpha1
type: File
name: app-conf
desired: {path: /etc/app/app.conf, owner: root, group: root, mode: "0644", source: files/app.conf}
---
datum: v1alpha1
type: Tree
name: conf-d
desired:
  path: /etc/app/conf.d
  source: trees/conf.d
  owner: root
  group: root
  mode: "0644"
  dir_mode: "0755"
  exclude: ["*.swp", "cache/"]
"#;

/// A class `followed` that accepts drift, checked hourly.
const ACCEPT: &str = "classes:\n  followed: {interval: 1h, policy: accept}\n";
/// A class `critical` that reverts drift, checked every minute.
const REVERT: &str = "classes:\n  critical: {interval: 60s, policy: revert}\n";
/// A class `frozen` that quarantines drift, checked every five minutes.
const QUARANTINE: &str = "classes:\n  frozen: {interval: 5m, policy: quarantine}\n";

/// What was done (or would be) with the first finding of a report.
#[track_caller]
fn first_action(json: &Value) -> &str {
    json["findings"][0]["action"].as_str().expect("action")
}

impl Sandbox {
    /// The example-like repository; `classes` is the `classes:` block (or
    /// empty) and `motd_class` the class of File[motd].
    fn new(classes: &str, motd_class: Option<&str>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Sandbox { dir };
        s.write("host.yaml", "name: test-host\nlabels:\n  role: web\n");
        s.write(
            "repo/datum.yaml",
            &format!(
                "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {{}}\n{classes}"
            ),
        );
        let manifest = match motd_class {
            Some(c) => MANIFEST.replace("name: motd\n", &format!("name: motd\nclass: {c}\n")),
            None => MANIFEST.to_owned(),
        };
        s.write("repo/base/main.yaml", &manifest);
        s.write(
            "repo/base/files/motd",
            "Welcome to test-host.\nAuthorised use only.\n",
        );
        s.write("repo/base/files/app.conf", "listen = 8080\nworkers = 4\n");
        s.write("repo/base/trees/conf.d/10-a.conf", "a = 1\n");
        s.write("repo/base/trees/conf.d/sub/20-b.conf", "b = 2\n");
        s.write(
            "root/etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\nsvc:x:1234:1234::/:/bin/false\n",
        );
        s.write("root/etc/group", "root:x:0:\nsvc:x:1234:\n");
        s
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(&p, text).expect("write");
        p
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn live(&self, declared: &str) -> PathBuf {
        self.root().join(declared.trim_start_matches('/'))
    }

    fn datum(&self, args: &[&str]) -> Output {
        Command::cargo_bin("datum")
            .expect("datum binary")
            .arg("--repo")
            .arg(self.repo())
            .arg("--root")
            .arg(self.root())
            .arg("--host-file")
            .arg(self.dir.path().join("host.yaml"))
            .arg("--color")
            .arg("never")
            .args(args)
            .output()
            .expect("run datum")
    }

    /// A clean apply; fails the test if it does not converge.
    fn applied(self) -> Self {
        let o = self.datum(&["apply"]);
        assert_exit(&o, 2);
        let o = self.datum(&["check"]);
        assert_exit(&o, 0);
        self
    }

    /// Applied again once the files the first apply wrote are quiet: only
    /// then does a metadata pass trust their records (a record of a file
    /// that had just changed is racy; `datum_core::trust`).
    fn quiet(self) -> Self {
        wait_out_racy_records();
        let o = self.datum(&["apply"]);
        assert_exit(&o, 0);
        self
    }

    /// `datum check --output json`, parsed, with the exit code.
    fn check_json(&self, extra: &[&str]) -> (i32, Value) {
        self.json_of("check", extra)
    }

    /// `datum reconcile --output json` (the policies applied), parsed.
    fn reconcile_json(&self, extra: &[&str]) -> (i32, Value) {
        self.json_of("reconcile", extra)
    }

    fn json_of(&self, command: &str, extra: &[&str]) -> (i32, Value) {
        let mut args = vec![command, "--output", "json"];
        args.extend_from_slice(extra);
        let o = self.datum(&args);
        let json: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", stdout(&o), stderr(&o)));
        (code(&o), json)
    }
}

/// The findings as (subject, category, sorted paths).
fn findings(json: &Value) -> Vec<(String, String, Vec<String>)> {
    json["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            let mut paths: Vec<String> = f["diffs"]
                .as_array()
                .expect("diffs")
                .iter()
                .map(|d| d["path"].as_str().expect("path").to_owned())
                .collect();
            paths.sort();
            (
                f["subject"].as_str().expect("subject").to_owned(),
                f["category"].as_str().expect("category").to_owned(),
                paths,
            )
        })
        .collect()
}

#[track_caller]
fn one_finding(s: &Sandbox, subject: &str, category: &str, paths: &[&str]) -> Value {
    let (code, json) = s.check_json(&[]);
    let want = vec![(
        subject.to_owned(),
        category.to_owned(),
        paths.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>(),
    )];
    assert_eq!(findings(&json), want, "{json:#}");
    assert_eq!(code, 2);
    json
}

/// Rewrites `path` in place with `text` (same length), keeping its mtime.
fn edit_keeping_size_and_mtime(path: &Path, text: &str) {
    let before = fs::metadata(path).expect("stat");
    assert_eq!(before.len() as usize, text.len(), "same size");
    let mtime = before.modified().expect("mtime");
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
        .expect("rewrite");
    fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(mtime))
        .expect("set mtime");
    let after = fs::metadata(path).expect("stat");
    assert_eq!(after.modified().expect("mtime"), mtime);
    assert_eq!(after.len(), before.len());
}

// ---- no drift -------------------------------------------------------------

#[test]
fn a_clean_apply_leaves_nothing_to_report() {
    let s = Sandbox::new("", None).applied();
    let (code, json) = s.check_json(&[]);
    assert_eq!(code, 0, "{json:#}");
    assert!(findings(&json).is_empty());
    assert_eq!(json["fingerprint"], "clean");
    assert!(
        json["dedupe_key"]
            .as_str()
            .expect("key")
            .starts_with("datum-")
    );
    // A second check stays clean (no history artefacts).
    assert_eq!(s.check_json(&[]).0, 0);
}

// ---- the hidden scenarios, each exactly one finding ------------------------

#[test]
fn content_edit_keeping_size_and_mtime_is_seen_by_a_full_check() {
    let s = Sandbox::new("", None).applied();
    edit_keeping_size_and_mtime(
        &s.live("/etc/motd"),
        "Welcome to TEST-host.\nAuthorised use only.\n",
    );
    let json = one_finding(&s, "File[motd]", "changed_outside", &["content"]);
    let diff = json["findings"][0]["content_diff"].as_str().expect("diff");
    // Declared -> live: the host's edit is the `+` line.
    assert!(diff.contains("+Welcome to TEST-host."), "{diff}");
    assert!(diff.contains("-Welcome to test-host."), "{diff}");
    assert!(
        diff.contains("(declared)") && diff.contains("(live)"),
        "{diff}"
    );
}

#[test]
fn chmod_is_a_mode_change() {
    let s = Sandbox::new("", None).applied();
    fs::set_permissions(s.live("/etc/motd"), fs::Permissions::from_mode(0o600)).expect("chmod");
    let json = one_finding(&s, "File[motd]", "changed_outside", &["mode"]);
    // In the direction reality moved: declared 0644, now 0600.
    assert_eq!(json["findings"][0]["diffs"][0]["before"], "0644");
    assert_eq!(json["findings"][0]["diffs"][0]["after"], "0600");
}

#[test]
fn chown_is_an_owner_change() {
    let s = Sandbox::new("", None).applied();
    std::os::unix::fs::chown(s.live("/etc/app/app.conf"), Some(1234), None).expect("chown");
    let json = one_finding(&s, "File[app-conf]", "changed_outside", &["owner"]);
    assert_eq!(json["findings"][0]["diffs"][0]["before"], "root");
    assert_eq!(json["findings"][0]["diffs"][0]["after"], "svc");
}

#[test]
fn delete_is_deleted_outside() {
    let s = Sandbox::new("", None).applied();
    fs::remove_file(s.live("/etc/motd")).expect("rm");
    one_finding(&s, "File[motd]", "deleted_outside", &["presence"]);
}

#[test]
fn a_file_replaced_by_a_symlink_is_a_type_change() {
    let s = Sandbox::new("", None).applied();
    let motd = s.live("/etc/motd");
    fs::remove_file(&motd).expect("rm");
    std::os::unix::fs::symlink("/etc/issue", &motd).expect("ln");
    one_finding(&s, "File[motd]", "type_changed", &["type"]);
}

#[test]
fn an_editor_backup_inside_a_tree_is_unmanaged_unless_excluded() {
    let s = Sandbox::new("", None).applied();
    let confd = s.live("/etc/app/conf.d");
    // Excluded by the Tree's rules: invisible.
    fs::write(confd.join(".10-a.conf.swp"), "swap").expect("swp");
    fs::create_dir(confd.join("cache")).expect("cache");
    fs::write(confd.join("cache/x"), "x").expect("cache file");
    assert_eq!(s.check_json(&[]).0, 0);
    // Not excluded: one unmanaged finding naming the entry.
    fs::write(confd.join("10-a.conf~"), "a = 0\n").expect("backup");
    one_finding(&s, "Tree[conf-d]", "unmanaged", &["10-a.conf~"]);
}

#[test]
fn a_package_upgrade_replacing_content_and_mode_is_one_finding() {
    let s = Sandbox::new("", None).applied();
    // What dpkg does: write the new file beside, then rename it over.
    let conf = s.live("/etc/app/app.conf");
    let new = conf.with_file_name("app.conf.dpkg-new");
    fs::write(&new, "# packaged default\nlisten = 80\n").expect("write");
    fs::set_permissions(&new, fs::Permissions::from_mode(0o600)).expect("chmod");
    fs::rename(&new, &conf).expect("rename");
    one_finding(
        &s,
        "File[app-conf]",
        "changed_outside",
        &["content", "mode"],
    );
}

/// What a local user writes into a file or a Tree's folder reaches the
/// operator's terminal through the human report: an escape sequence there
/// could clear the screen, move the cursor over a finding (hiding it),
/// retitle the window or write the clipboard. The report shows it as text.
#[test]
fn the_human_report_never_passes_a_terminal_sequence_from_the_host_through() {
    use std::os::unix::ffi::OsStrExt as _;
    let s = Sandbox::new("", None).applied();
    // A content edit with a clear-screen and an OSC 52 clipboard write.
    fs::write(
        s.live("/etc/motd"),
        "Welcome to test-host.\n\u{1b}[2J\u{1b}]52;c;cm0gLXJmIH4=\u{7}hidden\n",
    )
    .expect("edit");
    // A new entry in the Tree whose name moves the cursor up a line.
    let name = std::ffi::OsStr::from_bytes(b"evil\x1b[1A\x1b[2K.conf");
    fs::write(s.live("/etc/app/conf.d").join(name), "x\n").expect("write");
    let o = s.datum(&["check"]);
    assert_exit(&o, 2);
    let out = stdout(&o);
    assert!(
        !out.contains('\u{1b}') && !out.contains('\u{7}'),
        "a control character reached the terminal:\n{}",
        out.escape_debug()
    );
    // Still shown, as text a person can read.
    assert!(out.contains("\\u{1b}[2J"), "{out}");
    assert!(out.contains("evil\\u{1b}[1A"), "{out}");
    // The JSON keeps the values as they are (its encoding escapes them).
    let (_, json) = s.check_json(&[]);
    let text = json.to_string();
    assert!(text.contains("evil\\u001b[1A"), "{text}");
}

#[test]
fn tree_changes_name_the_entry_and_the_category() {
    let s = Sandbox::new("", None).applied();
    let confd = s.live("/etc/app/conf.d");
    fs::write(confd.join("sub/20-b.conf"), "b = 3\n").expect("edit");
    one_finding(&s, "Tree[conf-d]", "changed_outside", &["sub/20-b.conf"]);
    fs::write(confd.join("sub/20-b.conf"), "b = 2\n").expect("restore");
    fs::remove_file(confd.join("10-a.conf")).expect("rm");
    one_finding(&s, "Tree[conf-d]", "deleted_outside", &["10-a.conf"]);
}

#[test]
fn a_sensitive_trees_entries_show_no_values_and_no_content() {
    let s = Sandbox::new("", None);
    s.write(
        "repo/base/main.yaml",
        &MANIFEST.replace("name: conf-d\n", "name: conf-d\nsensitive: true\n"),
    );
    let s = s.applied();
    let canary = "CANARY-tree-7f3e";
    fs::write(
        s.live("/etc/app/conf.d/sub/20-b.conf"),
        format!("b = {canary}\n"),
    )
    .expect("edit");
    let (code, json) = s.check_json(&[]);
    assert_eq!(code, 2, "{json:#}");
    let human = stdout(&s.datum(&["check", "--color", "never"]));
    for text in [json.to_string(), human] {
        assert!(!text.contains(canary), "{text}");
        assert!(!text.contains("b = 2"), "the declared content: {text}");
    }
}

#[test]
fn a_tree_entry_shows_its_declared_and_observed_mode_and_owner() {
    let s = Sandbox::new("", None).applied();
    let entry = s.live("/etc/app/conf.d/10-a.conf");
    fs::set_permissions(&entry, fs::Permissions::from_mode(0o777)).expect("chmod");
    std::os::unix::fs::chown(&entry, Some(1234), None).expect("chown");
    let json = one_finding(&s, "Tree[conf-d]", "changed_outside", &["10-a.conf"]);
    let d = &json["findings"][0]["diffs"][0];
    assert_eq!(d["before"], "mode 0644, owner 0", "{json:#}");
    assert_eq!(d["after"], "mode 0777, owner 1234", "{json:#}");
    let human = stdout(&s.datum(&["check", "--color", "never"]));
    assert!(
        human.contains("10-a.conf: mode 0644, owner 0 -> mode 0777, owner 1234"),
        "{human}"
    );
    // A content edit of an entry: its text diff, declared -> live, as for a File.
    fs::write(s.live("/etc/app/conf.d/sub/20-b.conf"), "b = 3\n").expect("edit");
    let (_, json) = s.check_json(&[]);
    let tree = json["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["subject"] == "Tree[conf-d]" && f["category"] == "changed_outside")
        .expect("the Tree's finding");
    let diff = tree["content_diff"].as_str().expect("a content diff");
    assert!(diff.contains("-b = 2") && diff.contains("+b = 3"), "{diff}");
    assert!(diff.contains("sub/20-b.conf (declared)"), "{diff}");
}

// ---- metadata-first -----------------------------------------------------

/// How many files a check trusted by their metadata, unread.
fn unread(json: &Value) -> u64 {
    json["metadata_only"].as_u64().expect("metadata_only count")
}

const METADATA_CLASSES: &str = "classes:\n  cheap: {interval: 5m, content: metadata}\n  audited: {interval: 5m, content: metadata, audit_every: 3}\n";

/// Makes the store believe the current metadata of `/etc/motd` is what the
/// last verified apply saw: exactly the state after an edit that also kept
/// ctime, inode and device (which user space cannot do without tampering).
fn forge_verified_meta(s: &Sandbox) {
    let db = s.live("/var/lib/datum/state.db");
    let mut store = datum_store::Store::open(&db).expect("store");
    let id = datum_core::ResourceId::new("File", "motd");
    let rec = store.last_verified(&id).expect("read").expect("verified");
    let mut meta = rec.meta.expect("meta");
    let live = datum_host::Host::new(s.live("/"))
        .lstat(std::path::Path::new("/etc/motd"))
        .expect("lstat")
        .expect("present")
        .meta;
    meta.size = live.size;
    meta.mtime_ns = live.mtime_ns;
    meta.ctime_ns = live.ctime_ns;
    meta.inode = live.inode;
    meta.dev = live.dev;
    // Verified after the edit had been quiet (a record of a file that had
    // just changed is never trusted).
    let quiet = live.ctime_ns.max(live.mtime_ns) / 1_000_000_000 + 3;
    store
        .record_verified(&id, &rec.declaration_hash, Some(&meta), quiet)
        .expect("record");
    store.flush().expect("flush");
}

#[test]
fn a_check_records_again_a_racy_verification_it_read_and_found_as_declared() {
    // The apply recorded motd as it wrote it: a racy record, so a metadata
    // check reads the file rather than trusting it.
    let s = Sandbox::new(METADATA_CLASSES, Some("cheap")).applied();
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, unread(&json)), (0, 0), "{json:#}");
    // Once the file is quiet, a check still reads it (the record is what
    // it was) and, finding it as declared, records its verification again...
    wait_out_racy_records();
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, unread(&json)), (0, 0), "{json:#}");
    // ...so the next trusts it, without an apply in between.
    let (code, json) = s.check_json(&[]);
    assert_eq!(code, 0, "{json:#}");
    assert!(unread(&json) >= 1, "{json:#}");
    // And an edit is still seen (ctime moved: read, reported).
    edit_keeping_size_and_mtime(
        &s.live("/etc/motd"),
        "Welcome to TEST-host.\nAuthorised use only.\n",
    );
    one_finding(&s, "File[motd]", "changed_outside", &["content"]);
}

#[test]
fn a_check_records_again_a_verification_whose_metadata_moved_while_the_content_stayed() {
    let s = Sandbox::new(METADATA_CLASSES, Some("cheap"))
        .applied()
        .quiet();
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, unread(&json)), (0, 1), "trusted unread: {json:#}");
    // A hard link to it moves its ctime (the link count), not its content.
    fs::hard_link(s.live("/etc/motd"), s.dir.path().join("motd-link")).expect("link");
    wait_out_racy_records();
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, unread(&json)), (0, 0), "read, as declared: {json:#}");
    assert_eq!(json["verified_again"], 1, "{json:#}");
    // Recorded again as this check found it: the next trusts it, with no
    // apply in between (before, every metadata pass read it until one).
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, unread(&json)), (0, 1), "trusted again: {json:#}");
    assert_eq!(json["verified_again"], 0, "{json:#}");
    // And an edit is still seen (ctime moved again: read, reported).
    edit_keeping_size_and_mtime(
        &s.live("/etc/motd"),
        "Welcome to TEST-host.\nAuthorised use only.\n",
    );
    one_finding(&s, "File[motd]", "changed_outside", &["content"]);
}

#[test]
fn metadata_mode_reads_a_file_whose_ctime_moved() {
    let s = Sandbox::new(METADATA_CLASSES, Some("cheap")).applied();
    edit_keeping_size_and_mtime(
        &s.live("/etc/motd"),
        "Welcome to TEST-host.\nAuthorised use only.\n",
    );
    // Size and mtime kept, but ctime moved: metadata-first still reads it.
    one_finding(&s, "File[motd]", "changed_outside", &["content"]);
}

#[test]
fn metadata_mode_misses_an_edit_that_keeps_all_metadata_until_the_audit() {
    let s = Sandbox::new(METADATA_CLASSES, Some("audited"))
        .applied()
        .quiet();
    // `applied()` ran the first check, which read content (no audit yet);
    // this one trusts metadata; the audit (every 3rd) comes after the next.
    let (code, json) = s.check_json(&[]);
    assert_eq!(code, 0, "{json:#}");
    assert!(unread(&json) >= 1, "{json:#}");
    edit_keeping_size_and_mtime(
        &s.live("/etc/motd"),
        "Welcome to TEST-host.\nAuthorised use only.\n",
    );
    forge_verified_meta(&s);
    // The documented blind spot: nothing is read, nothing is reported...
    let (code, json) = s.check_json(&[]);
    assert_eq!(code, 0, "metadata must trust the file: {json:#}");
    assert_eq!(unread(&json), 1, "{json:#}");
    // ...until the audit reads content: every 3rd check of the class.
    one_finding(&s, "File[motd]", "changed_outside", &["content"]);

    // The same edit is seen at once by a full class.
    let full = Sandbox::new("classes:\n  normal: {interval: 5m, content: full}\n", None).applied();
    edit_keeping_size_and_mtime(
        &full.live("/etc/motd"),
        "Welcome to TEST-host.\nAuthorised use only.\n",
    );
    forge_verified_meta(&full);
    one_finding(&full, "File[motd]", "changed_outside", &["content"]);
}

#[test]
fn sampling_decides_between_deep_and_metadata_passes() {
    let s = Sandbox::new("", None).applied();
    let (_, deep) = s.check_json(&["--sample", "1", "--pass-seed", "7"]);
    assert_eq!(deep["deep"], true);
    let (_, shallow) = s.check_json(&["--sample", "0", "--pass-seed", "7"]);
    assert_eq!(shallow["deep"], false);
    // A metadata pass still sees a chmod.
    fs::set_permissions(s.live("/etc/motd"), fs::Permissions::from_mode(0o600)).expect("chmod");
    let (code, shallow) = s.check_json(&["--sample", "0", "--pass-seed", "7"]);
    assert_eq!(code, 2);
    assert_eq!(findings(&shallow).len(), 1);
}

/// Sampling spreads the content reads over passes only if each pass has its
/// own seed: with the one seed `--pass-seed` used to default to, a host
/// outside the sample was outside it at every pass, and never read. A
/// fraction strictly between 0 and 1 needs a seed; 0 and 1 choose alone.
#[test]
fn a_sample_between_0_and_1_needs_a_pass_seed() {
    let s = Sandbox::new("", None).applied();
    let o = s.datum(&["check", "--sample", "0.1"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("--pass-seed"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    assert_eq!(s.check_json(&["--sample", "0.1", "--pass-seed", "3"]).0, 0);
    assert_eq!(s.check_json(&["--sample", "0"]).0, 0);
    assert_eq!(s.check_json(&["--sample", "1"]).0, 0);
}

// ---- policies -------------------------------------------------------------

/// Every regular file under `dir`, with its bytes and mode.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            let meta = fs::symlink_metadata(&p).expect("lstat");
            if meta.is_dir() {
                stack.push(p);
            } else {
                let bytes = fs::read(&p).unwrap_or_default();
                out.push((p, bytes, meta.permissions().mode()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn check_only_says_what_revert_would_do_and_reconcile_does_it() {
    let s = Sandbox::new(REVERT, Some("critical")).applied();
    fs::write(s.live("/etc/motd"), "defaced\n").expect("edit");
    fs::write(s.live("/etc/app/app.conf"), "listen = 1\n").expect("edit");
    let actions = |json: &Value| -> Vec<(String, String)> {
        json["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .map(|f| {
                (
                    f["subject"].as_str().unwrap().to_owned(),
                    f["action"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    // `check` only looks, however often: the host's files (the backup store
    // included) stay byte for byte as they were, and it says what a
    // reconcile would do.
    let etc = s.live("/etc");
    let before = snapshot(&etc);
    let backups_before = stdout(&s.datum(&["backup", "list"]));
    for _ in 0..2 {
        let (code, json) = s.check_json(&[]);
        assert_eq!(code, 2);
        assert_eq!(
            actions(&json),
            vec![
                pair("File[motd]", "would revert"),
                pair("File[app-conf]", "reported")
            ]
        );
        let human = stdout(&s.datum(&["check"]));
        assert!(human.contains("would revert"), "{human}");
    }
    assert_eq!(snapshot(&etc), before, "check changed the host");
    assert_eq!(stdout(&s.datum(&["backup", "list"])), backups_before);
    // No flap count either: three checks, then the first reconcile reverts.
    let (code, json) = s.reconcile_json(&[]);
    assert_eq!(code, 2);
    assert_eq!(
        actions(&json),
        vec![
            pair("File[motd]", "reverted"),
            pair("File[app-conf]", "reported")
        ]
    );
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).expect("read"),
        "Welcome to test-host.\nAuthorised use only.\n"
    );
    // The other class's drift is left for a person.
    assert_eq!(
        fs::read_to_string(s.live("/etc/app/app.conf")).unwrap(),
        "listen = 1\n"
    );
    // The evidence survives in the backup store.
    let o = s.datum(&["backup", "list", "/etc/motd"]);
    assert!(stdout(&o).contains("revert"), "{}", stdout(&o));
    // Next check: motd is clean, app-conf still drifted.
    let (_, json) = s.check_json(&[]);
    assert_eq!(findings(&json).len(), 1);
    assert_eq!(findings(&json)[0].0, "File[app-conf]");
}

/// A revert is an apply of the reverted resources alone: every other
/// resource's verified record stays (forgetting the records of resources
/// not visited is for an apply of the whole catalogue). Before, the revert's
/// catalogue of one resource looked whole to the engine, so it forgot the
/// others' records: each then read as never applied (`not_converged`), on
/// which no policy acts, so an `accept` (or `revert`, `quarantine`) class
/// stopped acting on its drift until the next `datum apply`.
#[test]
fn a_revert_forgets_no_other_resources_verified_record() {
    let s = Sandbox::new(
        "classes:\n  critical: {interval: 60s, policy: revert}\n  followed: {interval: 1h, policy: accept}\n",
        None,
    );
    s.write(
        "repo/base/main.yaml",
        &MANIFEST
            .replace("name: motd\n", "name: motd\nclass: critical\n")
            .replace("name: app-conf\n", "name: app-conf\nclass: followed\n"),
    );
    let s = s.applied();
    fs::write(s.live("/etc/motd"), "defaced\n").expect("edit");
    let (code, json) = s.reconcile_json(&["--class", "critical"]);
    assert_eq!(code, 2, "{json}");
    assert_eq!(first_action(&json), "reverted", "{json}");
    fs::write(s.live("/etc/app/app.conf"), "listen = 1\n").expect("edit");
    let (_, json) = s.check_json(&[]);
    let found = findings(&json);
    assert_eq!(found.len(), 1, "{json}");
    assert_eq!(
        (
            found[0].0.as_str(),
            found[0].1.as_str(),
            first_action(&json)
        ),
        ("File[app-conf]", "changed_outside", "would accept"),
        "{json}"
    );
    let (_, json) = s.reconcile_json(&["--class", "followed"]);
    assert!(first_action(&json).starts_with("accepted"), "{json}");
}

const SUDOERS_OK: &str = "ops ALL=(ALL) NOPASSWD: /usr/bin/systemctl\n";

fn sudoers_sandbox() -> Option<Sandbox> {
    if datum_host::command::which("visudo").is_none() {
        eprintln!("visudo not installed: skipping the validator revert test");
        return None;
    }
    let s = Sandbox::new(REVERT, None);
    s.write(
        "repo/base/sudo.yaml",
        "datum: v1alpha1\ntype: File\nname: sudoers-ops\nclass: critical\ndesired:\n  path: /etc/sudoers.d/ops\n  owner: root\n  group: root\n  mode: \"0440\"\n  source: files/sudoers-ops\n  validate: sudoers\n---\ndatum: v1alpha1\ntype: Directory\nname: sudoers-d\ndesired: {path: /etc/sudoers.d, owner: root, group: root, mode: \"0755\"}\n",
    );
    s.write("repo/base/files/sudoers-ops", SUDOERS_OK);
    Some(s.applied())
}

#[test]
fn revert_goes_through_validation() {
    let Some(s) = sudoers_sandbox() else { return };
    let live = s.live("/etc/sudoers.d/ops");
    // Passes the validator: restored.
    fs::write(&live, "ops ALL=(ALL) ALL\n").expect("edit");
    let (_, json) = s.reconcile_json(&[]);
    assert_eq!(json["findings"][0]["action"], "reverted", "{json:#}");
    assert_eq!(fs::read_to_string(&live).unwrap(), SUDOERS_OK);
    // A declaration the validator rejects is never written. Edited in the
    // repository, it is work apply owes, not a revert's (no revert puts a
    // repository edit in place); the apply refuses it through the validator.
    s.write("repo/base/files/sudoers-ops", "ops ALL=(ALL NOPASSWD\n");
    fs::write(&live, "ops ALL=(ALL) ALL\n").expect("edit");
    let (code, json) = s.reconcile_json(&[]);
    assert_eq!(code, 2);
    let action = first_action(&json);
    assert!(
        action.starts_with("not converged: its declaration changed"),
        "{json:#}"
    );
    assert_eq!(fs::read_to_string(&live).unwrap(), "ops ALL=(ALL) ALL\n");
    assert_exit(&s.datum(&["apply"]), 4);
    assert_eq!(fs::read_to_string(&live).unwrap(), "ops ALL=(ALL) ALL\n");
}

#[test]
fn flapping_resources_back_off_then_go_to_quarantine() {
    let s = Sandbox::new(
        "classes:\n  critical: {interval: 60s, policy: revert, flap_limit: 1, flap_window: 1h}\n",
        Some("critical"),
    )
    .applied();
    let actions: Vec<String> = (0..3)
        .map(|_| {
            fs::write(s.live("/etc/motd"), "defaced\n").expect("edit");
            let (_, json) = s.reconcile_json(&[]);
            first_action(&json).to_owned()
        })
        .collect();
    assert_eq!(actions[0], "reverted");
    assert!(actions[1].starts_with("backed off"), "{actions:?}");
    assert_eq!(actions[2], "quarantined: flapping");
    let (_, json) = s.reconcile_json(&[]);
    assert_eq!(json["quarantined"][0]["target"], "File[motd]");
    // The reason counts the reverts really made (the limit, 1), and the
    // human report does not say "flapping" twice.
    let human = stdout(&s.datum(&["check", "--color", "never"]));
    assert!(
        human.contains("flapping: drifted again after 1 revert within 1h"),
        "{human}"
    );
    assert!(!human.contains("flapping: flapping"), "{human}");
}

/// A revert that fails (here a folder in the way, which Datum never removes
/// unasked; a validator's refusal is the same) changed nothing: the file did
/// not drift *again*, nothing on the host keeps rewriting it. Counted as
/// reverts, three failures made a "backed off: reverted 3 times" and then a
/// "flapping" quarantine that held the resource out of every apply.
#[test]
fn a_failed_revert_is_not_counted_as_a_revert_for_flapping() {
    let s = Sandbox::new(
        "classes:\n  critical: {interval: 60s, policy: revert, flap_limit: 2, flap_window: 1h}\n",
        Some("critical"),
    )
    .applied();
    let motd = s.live("/etc/motd");
    fs::remove_file(&motd).expect("rm");
    fs::create_dir(&motd).expect("mkdir");
    fs::write(motd.join("inside"), "kept\n").expect("write");
    for round in 0..5 {
        let (code, json) = s.reconcile_json(&[]);
        assert_eq!(code, 2, "{json:#}");
        let action = first_action(&json);
        assert!(
            action.starts_with("revert failed:"),
            "reconcile {round}: {action}"
        );
        assert!(
            json["quarantined"].as_array().expect("list").is_empty(),
            "reconcile {round}: {json:#}"
        );
    }
    // Once the way is clear, the revert goes through, and real flapping is
    // still caught: the failures left the count untouched.
    fs::remove_dir_all(&motd).expect("rm -r");
    let actions: Vec<String> = (0..4)
        .map(|_| {
            fs::write(&motd, "defaced\n").expect("edit");
            let (_, json) = s.reconcile_json(&[]);
            first_action(&json).to_owned()
        })
        .collect();
    assert_eq!(actions[0], "reverted", "{actions:?}");
    assert_eq!(actions[1], "reverted", "{actions:?}");
    assert!(actions[2].starts_with("backed off"), "{actions:?}");
    assert_eq!(actions[3], "quarantined: flapping", "{actions:?}");
}

/// A person's quarantine is break-glass: what they change while it holds
/// stays theirs to look at. An `accept` class took it as the new normal
/// (reconcile accepted it, and after the release nothing reported it). It
/// is now held like a revert: `not accepted: quarantined by a person`,
/// and once the quarantine is released the change is reported and decided
/// as any other.
#[test]
fn a_change_made_under_a_persons_quarantine_is_not_accepted() {
    let s = Sandbox::new(ACCEPT, Some("followed")).applied();
    let patches = s.dir.path().join("patches");
    let patch_dir = patches.to_str().expect("utf8");
    for quarantine in [
        &["quarantine", "--host", "--reason", "incident 42"][..],
        &["quarantine", "File/motd", "--reason", "incident 42"][..],
    ] {
        assert_exit(&s.datum(quarantine), 0);
        fs::write(s.live("/etc/motd"), "emergency fix\n").expect("edit");
        let (code, json) = s.check_json(&["--patch-dir", patch_dir]);
        assert_eq!(code, 2, "{json:#}");
        assert_eq!(
            json["findings"][0]["action"], "not accepted: quarantined by a person",
            "{quarantine:?}: {json:#}"
        );
        let (_, json) = s.reconcile_json(&["--patch-dir", patch_dir]);
        assert_eq!(
            json["findings"][0]["action"], "not accepted: quarantined by a person",
            "{quarantine:?}: {json:#}"
        );
        assert!(!patches.exists(), "{quarantine:?}: a patch was written");
        let release: Vec<&str> = match quarantine[1] {
            "--host" => vec!["release", "--host"],
            id => vec!["release", id],
        };
        assert_exit(&s.datum(&release), 0);
        // Released: reported, and the class decides.
        let (code, json) = s.check_json(&["--patch-dir", patch_dir]);
        assert_eq!(code, 2, "{quarantine:?}: {json:#}");
        assert_eq!(json["findings"][0]["action"], "would accept", "{json:#}");
        assert_exit(&s.datum(&["apply"]), 2);
    }
}

#[test]
fn accept_stops_the_report_and_writes_a_patch_that_converges() {
    let s = Sandbox::new(ACCEPT, Some("followed")).applied();
    fs::write(
        s.live("/etc/motd"),
        "Welcome to test-host.\nAuthorised use only.\nMaintenance on Sunday.\n",
    )
    .expect("edit");
    let patches = s.dir.path().join("patches");
    let patch_dir = patches.to_str().expect("utf8");
    // A check says what would happen and writes no patch.
    let (code, json) = s.check_json(&["--patch-dir", patch_dir]);
    assert_eq!(code, 2);
    assert_eq!(json["findings"][0]["action"], "would accept", "{json:#}");
    assert!(!patches.exists());
    let (code, json) = s.reconcile_json(&["--patch-dir", patch_dir]);
    assert_eq!(code, 2);
    let action = first_action(&json);
    assert!(action.starts_with("accepted (patch: "), "{action}");
    // Accepted: not reported again while nothing changes.
    let (code, json) = s.check_json(&["--patch-dir", patch_dir]);
    assert_eq!(code, 0, "{json:#}");
    // Accepted means accepted: plan and apply leave it, and say why.
    let accepted = "Welcome to test-host.\nAuthorised use only.\nMaintenance on Sunday.\n";
    let patch = patches.join("File-motd.patch");
    for command in ["plan", "apply"] {
        let o = s.datum(&[command]);
        assert_exit(&o, 0);
        let text = stdout(&o);
        assert!(
            text.contains(&format!(
                "File[motd]  unchanged: accepted, not yet in the repository (patch: {})",
                patch.display()
            )),
            "{command}: {text}"
        );
        assert!(!text.contains("corrective"), "{command}: {text}");
        assert_eq!(fs::read_to_string(s.live("/etc/motd")).unwrap(), accepted);
    }
    let o = s.datum(&["--output", "json", "plan"]);
    let plan: Value = serde_json::from_slice(&o.stdout).expect("json");
    let motd = plan["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["id"] == "File[motd]")
        .expect("motd");
    assert!(
        motd["detail"]
            .as_str()
            .unwrap()
            .starts_with("accepted, not yet in the repository"),
        "{motd:#}"
    );
    // The patch applies to the repository, and then the host converges.
    let summary = fs::read_to_string(patches.join("SUMMARY.md")).expect("summary");
    assert!(summary.contains("File[motd]"), "{summary}");
    let applied = std::process::Command::new("patch")
        .arg("-p1")
        .arg("-d")
        .arg(s.repo())
        .arg("-i")
        .arg(&patch)
        .output()
        .expect("patch");
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stdout)
    );
    assert!(
        fs::read_to_string(s.repo().join("base/files/motd"))
            .unwrap()
            .contains("Maintenance on Sunday.")
    );
    let o = s.datum(&["plan"]);
    assert_exit(&o, 0);
    assert_eq!(s.check_json(&[]).0, 0);
}

/// SUMMARY.md says what to carry into the repository for each accepted
/// resource: one section per resource, its latest acceptance's. It was
/// appended to by every acceptance, so an agent accepting a file that keeps
/// changing grew it by a section per check, for ever, each one but the last
/// out of date. A section of another resource stays.
#[test]
fn the_summary_keeps_one_section_per_resource_however_often_it_is_accepted() {
    let s = Sandbox::new(ACCEPT, Some("followed")).applied();
    let patches = s.dir.path().join("patches");
    let patch_dir = patches.to_str().expect("utf8");
    let other = "## File[other] (declared at base/other.yaml:1:1)\n- set `mode` to `0600`\n\n";
    s.write("patches/SUMMARY.md", other);
    let mut sizes = Vec::new();
    for n in 0..12 {
        fs::write(s.live("/etc/motd"), format!("Welcome.\nedit {n}\n")).expect("edit");
        let (code, json) = s.reconcile_json(&["--patch-dir", patch_dir]);
        assert_eq!(code, 2, "{json:#}");
        let action = first_action(&json);
        assert!(action.starts_with("accepted (patch: "), "{n}: {action}");
        sizes.push(
            fs::metadata(patches.join("SUMMARY.md"))
                .expect("summary")
                .len(),
        );
    }
    let summary = fs::read_to_string(patches.join("SUMMARY.md")).expect("summary");
    assert_eq!(summary.matches("## File[motd] ").count(), 1, "{summary}");
    assert!(summary.starts_with(other), "{summary}");
    assert!(summary.contains("File-motd.patch"), "{summary}");
    assert!(sizes.iter().all(|n| *n == sizes[0]), "grew: {sizes:?}");
}

/// An acceptance is recorded only once its patch is written. A patch
/// folder that cannot be used (here a path below a regular file; a full
/// or read-only file system is the same) fails the reconcile, and the
/// change stays reported, so the next reconcile accepts it with its patch.
/// Recorded first, the acceptance outlived the failure: every later check
/// said 'no drift' and plan 'accepted', with no patch anywhere.
#[test]
fn an_acceptance_whose_patch_cannot_be_written_is_not_recorded() {
    let s = Sandbox::new(ACCEPT, Some("followed")).applied();
    let edited = "Welcome to test-host.\nAuthorised use only.\nMaintenance on Sunday.\n";
    fs::write(s.live("/etc/motd"), edited).expect("edit");
    let blocker = s.write("not-a-folder", "a regular file\n");
    let unusable = blocker.join("patches");
    let o = s.datum(&["reconcile", "--patch-dir", unusable.to_str().expect("utf8")]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("cannot open the folder for accepted patches"),
        "{}",
        stderr(&o)
    );
    // Nothing recorded: still drift, still to accept, and plan holds it as
    // drift to correct rather than as accepted.
    let (code, json) = s.check_json(&[]);
    assert_eq!(code, 2, "{json:#}");
    assert_eq!(json["findings"][0]["subject"], "File[motd]", "{json:#}");
    assert_eq!(json["findings"][0]["action"], "would accept", "{json:#}");
    let o = s.datum(&["plan"]);
    assert!(!stdout(&o).contains("accepted"), "{}", stdout(&o));
    // With a usable folder the next reconcile accepts it, patch and all.
    let patches = s.dir.path().join("patches");
    let (code, json) = s.reconcile_json(&["--patch-dir", patches.to_str().expect("utf8")]);
    assert_eq!(code, 2, "{json:#}");
    let action = first_action(&json);
    assert!(action.starts_with("accepted (patch: "), "{action}");
    assert!(patches.join("File-motd.patch").is_file());
    assert_eq!(s.check_json(&[]).0, 0);
    assert_eq!(fs::read_to_string(s.live("/etc/motd")).unwrap(), edited);
}

/// An acceptance holds while the host stays as it was accepted. Once the
/// resource is back as declared (put back by hand and seen by a check, or
/// converged by an apply) it is over: the same change made again later is
/// new drift, reported (and accepted again, with fresh evidence, by a
/// reconcile), not silently taken as accepted, which hid it from every
/// check (exit 0) and from plan ("unchanged: accepted").
#[test]
fn an_acceptance_ends_once_the_resource_is_back_as_declared() {
    let s = Sandbox::new(ACCEPT, Some("followed")).applied();
    let motd = s.live("/etc/motd");
    let chmod = |mode| fs::set_permissions(&motd, fs::Permissions::from_mode(mode)).expect("chmod");
    chmod(0o600);
    let (_, json) = s.reconcile_json(&[]);
    assert!(first_action(&json).starts_with("accepted"), "{json:#}");
    assert_eq!(s.check_json(&[]).0, 0, "accepted: not reported");
    // Put back by hand; a check sees it as declared.
    chmod(0o644);
    assert_eq!(s.check_json(&[]).0, 0);
    chmod(0o600);
    let (code, json) = s.check_json(&[]);
    assert_eq!(code, 2, "the same change again is drift: {json:#}");
    assert_eq!(json["findings"][0]["action"], "would accept", "{json:#}");
    // Accepted again, then converged by an apply (after another edit):
    // the acceptance is over as well.
    s.reconcile_json(&[]);
    fs::write(&motd, "edited\n").expect("edit");
    assert_exit(&s.datum(&["apply"]), 2);
    chmod(0o600);
    let (code, json) = s.check_json(&[]);
    assert_eq!(code, 2, "after an apply converged it: {json:#}");
    let plan = stdout(&s.datum(&["plan"]));
    assert!(!plan.contains("accepted"), "{plan}");
}

/// A File that became a symlink (or a folder) cannot be followed by its
/// declaration: no field of a File says "a link to X". Accepted, it was
/// recorded as "a symlink" and nothing more, so the link could then be
/// pointed anywhere (/etc/shadow, then authorized_keys) with no drift ever
/// reported. A type change is not accepted: it stays reported.
#[test]
fn a_type_change_is_not_accepted() {
    let s = Sandbox::new(ACCEPT, Some("followed")).applied();
    let motd = s.live("/etc/motd");
    fs::remove_file(&motd).expect("rm");
    std::os::unix::fs::symlink("/etc/shadow", &motd).expect("ln");
    let (_, json) = s.check_json(&[]);
    let action = first_action(&json);
    assert!(action.starts_with("would not accept: "), "{action}");
    let (code, json) = s.reconcile_json(&[]);
    assert_eq!(code, 2);
    let action = first_action(&json);
    assert!(action.starts_with("not accepted: "), "{action}");
    // Still drift, whatever the link is pointed at next.
    fs::remove_file(&motd).expect("rm");
    std::os::unix::fs::symlink("/root/.ssh/authorized_keys", &motd).expect("ln");
    let (code, json) = s.check_json(&[]);
    assert_eq!(code, 2, "{json:#}");
    assert_eq!(json["findings"][0]["category"], "type_changed");
    let plan = stdout(&s.datum(&["plan"]));
    assert!(!plan.contains("accepted"), "{plan}");
}

#[test]
fn accepting_a_mode_change_points_at_a_file_that_says_what_to_set() {
    let s = Sandbox::new(ACCEPT, Some("followed")).applied();
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(s.live("/etc/motd"), fs::Permissions::from_mode(0o600)).expect("chmod");
    let patches = s.dir.path().join("patches");
    let patch_dir = patches.to_str().expect("utf8");
    let (code, json) = s.reconcile_json(&["--patch-dir", patch_dir]);
    assert_eq!(code, 2, "{json:#}");
    let action = first_action(&json);
    let named = action
        .strip_prefix("accepted (patch: ")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{action}"));
    // The file the report (and plan, apply) names exists and says what to
    // set in the repository, and where.
    let text = fs::read_to_string(named).unwrap_or_else(|e| panic!("{named}: {e}"));
    assert!(text.contains("set `mode` to `0600`"), "{text}");
}

/// The notes of an acceptance name the line that declares each changed
/// field, as docs/check.md says: the layer this host gets that set it last.
/// A compile records field origins only for `--explain`, so every note
/// named where the resource's last document begins instead
/// (`web/motd.yaml:1:1: set `mode` ...`), not the field.
#[test]
fn accepting_names_the_line_that_declares_the_changed_field_for_this_host() {
    let s = Sandbox::new(ACCEPT, Some("followed"));
    s.write(
        "repo/datum.yaml",
        &format!(
            "datum: v1alpha1\nlayers:\n  - {{name: base, path: base}}\n  - {{name: web, path: web, match: {{role: web}}}}\n  - {{name: db, path: db, match: {{role: db}}}}\n{ACCEPT}"
        ),
    );
    let layer = |mode: &str| {
        format!("datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  mode: \"{mode}\"\n")
    };
    s.write("repo/web/motd.yaml", &layer("0640"));
    s.write("repo/db/motd.yaml", &layer("0600"));
    let s = s.applied();
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(s.live("/etc/motd"), fs::Permissions::from_mode(0o600)).expect("chmod");
    let patches = s.dir.path().join("patches");
    let (code, json) = s.reconcile_json(&["--patch-dir", patches.to_str().expect("utf8")]);
    assert_eq!(code, 2, "{json:#}");
    let summary = fs::read_to_string(patches.join("SUMMARY.md")).expect("summary");
    assert!(
        summary.contains("- web/motd.yaml:5:3: set `mode` to `0600` (changed_outside)"),
        "{summary}"
    );
}

/// An accepted deletion says what the repository needs: `ensure: absent`,
/// the field a File has, not "set `presence` to `absent`" (no such field:
/// the manifest written from that advice fails to compile).
#[test]
fn accepting_a_deletion_says_to_set_ensure_absent() {
    let s = Sandbox::new(ACCEPT, Some("followed")).applied();
    fs::remove_file(s.live("/etc/motd")).expect("rm");
    let patches = s.dir.path().join("patches");
    let (code, json) = s.reconcile_json(&["--patch-dir", patches.to_str().expect("utf8")]);
    assert_eq!(code, 2, "{json:#}");
    let summary = fs::read_to_string(patches.join("SUMMARY.md")).expect("summary");
    assert!(summary.contains("set `ensure` to `absent`"), "{summary}");
    assert!(!summary.contains("presence"), "{summary}");
}

/// A sensitive resource's accepted change names the field and says the
/// value is not shown: "set `mode` to `(sensitive)`" told the operator to
/// write the placeholder into the manifest (a User's shell or hash too).
#[test]
fn accepting_a_sensitive_change_never_says_to_set_the_placeholder() {
    let s = Sandbox::new(ACCEPT, Some("followed"));
    let manifest = fs::read_to_string(s.repo().join("base/main.yaml"))
        .expect("manifest")
        .replace("name: motd\n", "name: motd\nsensitive: true\n");
    s.write("repo/base/main.yaml", &manifest);
    let s = s.applied();
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(s.live("/etc/motd"), fs::Permissions::from_mode(0o600)).expect("chmod");
    let patches = s.dir.path().join("patches");
    let patch_dir = patches.to_str().expect("utf8");
    let (code, json) = s.reconcile_json(&["--patch-dir", patch_dir]);
    assert_eq!(code, 2, "{json:#}");
    let action = first_action(&json);
    let named = action
        .strip_prefix("accepted (patch: ")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{action}"));
    let text = fs::read_to_string(named).unwrap_or_else(|e| panic!("{named}: {e}"));
    assert!(!text.contains("(sensitive)`"), "{text}");
    assert!(
        text.contains("`mode` changed on the host") && text.contains("sensitive and not shown"),
        "{text}"
    );
}

/// An accepted content change of a sensitive File: its bytes are never
/// copied out of the host, so the notes said "nothing to carry (sensitive
/// or no declared content)", though the content did change and must be
/// carried by hand. They say that `content` changed, why it is not copied,
/// where it is declared, and never a byte of it.
#[test]
fn accepting_a_sensitive_content_change_says_to_carry_it_by_hand() {
    const CANARY: &str = "CANARY-accept-sens-41c7";
    let s = Sandbox::new(ACCEPT, Some("followed"));
    let manifest = fs::read_to_string(s.repo().join("base/main.yaml"))
        .expect("manifest")
        .replace("name: motd\n", "name: motd\nsensitive: true\n");
    s.write("repo/base/main.yaml", &manifest);
    let s = s.applied();
    fs::write(s.live("/etc/motd"), format!("{CANARY}\n")).expect("edit");
    let patches = s.dir.path().join("patches");
    let patch_dir = patches.to_str().expect("utf8");
    let (code, json) = s.reconcile_json(&["--patch-dir", patch_dir]);
    assert_eq!(code, 2, "{json:#}");
    assert!(!json.to_string().contains(CANARY), "{json:#}");
    let action = first_action(&json);
    let named = action
        .strip_prefix("accepted (patch: ")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{action}"));
    let text = fs::read_to_string(named).unwrap_or_else(|e| panic!("{named}: {e}"));
    let summary = fs::read_to_string(patches.join("SUMMARY.md")).expect("summary");
    for t in [&text, &summary] {
        assert!(
            !t.contains(CANARY) && !t.contains("nothing to carry"),
            "{t}"
        );
        assert!(
            t.contains("`content` changed on the host")
                && t.contains("sensitive")
                && t.contains("carry it into the repository by hand")
                && t.contains("main.yaml:"),
            "{t}"
        );
    }
}

/// An accepted content change of a live file not everyone may read: its
/// lines are never read for a diff, so the patch cannot carry them, and
/// the notes said nothing of the content at all (only `set mode`; with no
/// other change, "nothing to carry (sensitive or no declared content)",
/// untrue). They say that `content` changed and why it is not copied, and
/// no line of the file is in the notes, the summary or the report.
#[test]
fn accepting_a_file_not_everyone_may_read_says_its_content_is_not_copied() {
    const CANARY: &str = "CANARY-accept-6d10";
    let s = Sandbox::new(ACCEPT, Some("followed")).applied();
    use std::os::unix::fs::PermissionsExt as _;
    fs::write(s.live("/etc/motd"), format!("{CANARY}\n")).expect("edit");
    fs::set_permissions(s.live("/etc/motd"), fs::Permissions::from_mode(0o600)).expect("chmod");
    let patches = s.dir.path().join("patches");
    let patch_dir = patches.to_str().expect("utf8");
    let (code, json) = s.reconcile_json(&["--patch-dir", patch_dir]);
    assert_eq!(code, 2, "{json:#}");
    assert!(!json.to_string().contains(CANARY), "{json:#}");
    let action = first_action(&json);
    let named = action
        .strip_prefix("accepted (patch: ")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{action}"));
    let text = fs::read_to_string(named).unwrap_or_else(|e| panic!("{named}: {e}"));
    let summary = fs::read_to_string(patches.join("SUMMARY.md")).expect("summary");
    for t in [&text, &summary] {
        assert!(
            !t.contains(CANARY) && !t.contains("nothing to carry"),
            "{t}"
        );
        assert!(
            t.contains("`content` changed on the host") && t.contains("not readable by everyone"),
            "{t}"
        );
        assert!(t.contains("set `mode` to `0600`"), "{t}");
    }
}

#[test]
fn quarantine_blocks_apply_until_release() {
    let s = Sandbox::new(QUARANTINE, Some("frozen")).applied();
    fs::write(s.live("/etc/motd"), "defaced\n").expect("edit");
    let (code, json) = s.check_json(&[]);
    assert_eq!(code, 2);
    assert_eq!(json["findings"][0]["action"], "would quarantine");
    assert_eq!(json["quarantined"], serde_json::json!([]), "{json:#}");
    let (code, json) = s.reconcile_json(&[]);
    assert_eq!(code, 2);
    assert_eq!(json["findings"][0]["action"], "quarantined");
    // Apply skips it (and says so); the drift stays.
    let o = s.datum(&["apply"]);
    assert!(stdout(&o).contains("File[motd]"), "{}", stdout(&o));
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        "defaced\n"
    );
    // Every check reports it, as held already (not as a quarantine still
    // to come), and so does a second reconcile.
    let (_, json) = s.check_json(&[]);
    assert_eq!(json["quarantined"][0]["target"], "File[motd]", "{json:#}");
    assert_eq!(json["findings"][0]["action"], "already quarantined");
    let (_, json) = s.reconcile_json(&[]);
    assert_eq!(json["findings"][0]["action"], "already quarantined");
    // Released: the next apply restores it.
    assert_exit(&s.datum(&["release", "File/motd"]), 0);
    s.datum(&["apply"]);
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        "Welcome to test-host.\nAuthorised use only.\n"
    );
    // Releasing what is not quarantined is an error.
    assert_exit(&s.datum(&["release", "File/motd"]), 1);
}

/// A person's quarantine of the host does not stand in for a quarantine
/// class's own hold on a resource: the reconcile records the resource's, so
/// releasing the host does not let the next apply undo the drift.
#[test]
fn a_quarantine_class_holds_its_resource_under_a_persons_host_quarantine() {
    let s = Sandbox::new(QUARANTINE, Some("frozen")).applied();
    assert_exit(
        &s.datum(&["quarantine", "--host", "--reason", "incident 42"]),
        0,
    );
    fs::write(s.live("/etc/motd"), "defaced\n").expect("edit");
    let (_, json) = s.reconcile_json(&[]);
    assert_eq!(json["findings"][0]["action"], "quarantined", "{json:#}");
    assert_exit(&s.datum(&["release", "--host"]), 0);
    s.datum(&["apply"]);
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        "defaced\n",
        "the class's quarantine still holds the resource"
    );
}

/// A `scope: host` quarantine excludes the whole host from apply, and a
/// revert is an apply: once a drift in the frozen class quarantined the
/// host, a revert class on it must hold too, until `datum release --host`.
#[test]
fn a_host_a_policy_quarantined_is_not_reverted() {
    let s = Sandbox::new(
        "classes:\n  critical: {interval: 60s, policy: revert}\n  frozen: {interval: 5m, policy: quarantine, scope: host}\n",
        Some("critical"),
    );
    s.write(
        "repo/base/main.yaml",
        &MANIFEST
            .replace("name: motd\n", "name: motd\nclass: critical\n")
            .replace("name: app-conf\n", "name: app-conf\nclass: frozen\n"),
    );
    let s = s.applied();
    fs::set_permissions(
        s.live("/etc/app/app.conf"),
        fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    let (_, json) = s.reconcile_json(&["--class", "frozen"]);
    assert_eq!(json["quarantined"][0]["target"], "host", "{json:#}");
    fs::write(s.live("/etc/motd"), "defaced\n").expect("edit");
    let (code, json) = s.reconcile_json(&["--class", "critical"]);
    assert_eq!(code, 2);
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        "defaced\n",
        "reverted on a quarantined host: {json:#}"
    );
    assert_eq!(
        json["findings"][0]["action"], "not reverted: quarantined",
        "{json:#}"
    );
    // Released, the revert class acts again.
    assert_exit(&s.datum(&["release", "--host"]), 0);
    let (_, json) = s.reconcile_json(&["--class", "critical"]);
    assert_eq!(json["findings"][0]["action"], "reverted", "{json:#}");
    assert_ne!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        "defaced\n"
    );
}

/// Plan and apply hold back what requires a quarantined resource
/// (`blocked (by ...)`), and a revert is an apply: a drifted File that
/// requires a quarantined one (directly, or through a resource in between
/// that is in sync and never decoded by the check) is not reverted either.
#[test]
fn a_revert_holds_back_what_requires_a_quarantined_resource() {
    let s = Sandbox::new(REVERT, Some("critical"));
    // motd requires app-conf, which requires (by its folder) Directory[etc-app].
    s.write(
        "repo/base/main.yaml",
        &MANIFEST.replace(
            "name: motd\n",
            "name: motd\nclass: critical\nrequires: [File/app-conf]\n",
        ),
    );
    let s = s.applied();
    // `--class critical` decodes motd alone: the chain is read for the
    // question; a whole check has decoded it already.
    for (quarantined, args) in [
        ("File/app-conf", &["--class", "critical"][..]),
        ("Directory/etc-app", &["--class", "critical"][..]),
        ("Directory/etc-app", &[][..]),
    ] {
        assert_exit(
            &s.datum(&["quarantine", quarantined, "--reason", "incident"]),
            0,
        );
        let plan = stdout(&s.datum(&["plan"]));
        assert!(plan.contains("File[motd]  blocked"), "{plan}");
        fs::write(s.live("/etc/motd"), "defaced\n").expect("edit");
        let (code, json) = s.reconcile_json(args);
        assert_eq!(code, 2);
        assert_eq!(
            fs::read_to_string(s.live("/etc/motd")).unwrap(),
            "defaced\n",
            "reverted past the quarantine of {quarantined} ({args:?}): {json:#}"
        );
        let action = first_action(&json);
        assert!(
            action.starts_with("not reverted: blocked (by ") && action.contains("quarantined"),
            "{action}"
        );
        assert_exit(&s.datum(&["release", quarantined]), 0);
        let (_, json) = s.reconcile_json(args);
        assert_eq!(json["findings"][0]["action"], "reverted", "{json:#}");
    }
}

#[test]
fn check_never_reverts_what_a_person_quarantined() {
    let s = Sandbox::new(REVERT, Some("critical")).applied();
    assert_exit(
        &s.datum(&[
            "quarantine",
            "File/motd",
            "--reason",
            "incident 42: hot fix",
        ]),
        0,
    );
    fs::write(s.live("/etc/motd"), "hot fix\n").expect("edit");
    let (code, json) = s.reconcile_json(&[]);
    assert_eq!(code, 2);
    assert_eq!(
        json["findings"][0]["action"],
        "not reverted: quarantined by a person"
    );
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        "hot fix\n"
    );
    assert!(
        json["quarantined"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("incident 42")
    );
}

// ---- reports, schedule, errors ---------------------------------------------

#[test]
fn markdown_report_carries_the_dedupe_key_and_no_sensitive_value() {
    let s = Sandbox::new("", None);
    s.write(
        "repo/base/secret.yaml",
        "datum: v1alpha1\ntype: File\nname: token\nsensitive: true\ndesired: {path: /etc/app/token, mode: \"0600\", content: \"CANARY-declared\"}\n",
    );
    let s = s.applied();
    fs::write(s.live("/etc/app/token"), "CANARY-live").expect("edit");
    let md = s.dir.path().join("report.md");
    let o = s.datum(&["check", "--markdown", md.to_str().expect("utf8")]);
    assert_exit(&o, 2);
    let text = fs::read_to_string(&md).expect("markdown");
    assert!(text.starts_with("<!-- datum-"), "{text}");
    assert!(text.contains("`File[token]`"), "{text}");
    assert!(text.contains("(sensitive)"), "{text}");
    for out in [text, stdout(&o), stderr(&o)] {
        assert!(!out.contains("CANARY"), "{out}");
    }
}

#[test]
fn schedule_states_the_detection_bound_per_class() {
    let s = Sandbox::new(
        "classes:\n  critical: {interval: 60s, policy: revert}\n  normal: {interval: 1h}\n",
        Some("critical"),
    )
    .applied();
    s.check_json(&[]);
    let o = s.datum(&["schedule", "--output", "json"]);
    assert_exit(&o, 0);
    let rows: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(rows["format_version"], "1");
    let critical = rows["classes"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["class"] == "critical")
        .expect("critical");
    assert_eq!(critical["interval_s"], 60);
    assert_eq!(critical["resources"], 1);
    let p95 = critical["p95_ms"].as_u64().expect("measured");
    assert_eq!(critical["detection_bound_ms"].as_u64(), Some(60_000 + p95));
    let human = stdout(&s.datum(&["schedule"]));
    assert!(human.contains("DETECTED WITHIN"), "{human}");
}

/// A watched class's short bound holds for what a watch sees. A file is
/// watched through its folder and on its own inode as the watches are
/// armed; a write through another hard link of a file replaced since (the
/// kernel reports it to that link's folder and the new inode only), or one
/// made while a watch is lost, waits for the interval. `schedule` states
/// that bound too, rather than only the watch's.
#[test]
fn schedule_states_a_watched_class_s_bound_for_what_no_watch_sees() {
    let s = Sandbox::new(
        "classes:\n  critical: {interval: 1h, watch: true}\n",
        Some("critical"),
    )
    .applied();
    s.check_json(&[]);
    let o = s.datum(&["schedule", "--output", "json"]);
    assert_exit(&o, 0);
    let rows: Value = serde_json::from_slice(&o.stdout).expect("json");
    let critical = rows["classes"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["class"] == "critical")
        .expect("critical")
        .clone();
    assert_eq!(critical["watched"], true);
    let p95 = critical["p95_ms"].as_u64().expect("measured");
    assert_eq!(
        critical["unwatched_bound_ms"].as_u64(),
        Some(3_600_000 + p95),
        "{critical}"
    );
    let human = stdout(&s.datum(&["schedule"]));
    assert!(
        human.contains("critical: a change no watch sees")
            && human.contains("another hard link")
            && human.contains("within 1h"),
        "{human}"
    );
}

/// `--class` with a name no class has (a typo in a cron line) checked
/// nothing and said "no drift" (exit 0), forever: `reconcile --class
/// critcal` never reverted anything. It is refused, naming the classes.
#[test]
fn a_class_option_naming_no_class_is_an_error() {
    let s = Sandbox::new(REVERT, Some("critical")).applied();
    fs::write(s.live("/etc/motd"), "defaced\n").expect("edit");
    for command in ["check", "reconcile"] {
        let o = s.datum(&[command, "--class", "critcal"]);
        assert_exit(&o, 1);
        let err = stderr(&o);
        assert!(
            err.contains("critcal") && err.contains("critical"),
            "{command}: {err}"
        );
    }
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        "defaced\n"
    );
    // `normal` exists undeclared; a declared class works.
    assert_eq!(s.check_json(&["--class", "normal"]).0, 0);
    assert_eq!(s.check_json(&["--class", "critical"]).0, 2);
}

#[test]
fn a_resource_naming_an_undeclared_class_is_an_error() {
    let s = Sandbox::new("classes:\n  critical: {interval: 60s}\n", Some("critcal"));
    let o = s.datum(&["check"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("class `critcal` is not declared"),
        "{}",
        stderr(&o)
    );
    // Lint says it too, at the `class:` line.
    let o = s.datum(&["lint"]);
    assert_exit(&o, 1);
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(text.contains("base/main.yaml:9:"), "{text}");
    assert!(text.contains("class `critcal`"), "{text}");
    let bad = Sandbox::new("classes:\n  x: {interval: soon}\n", None);
    let o = bad.datum(&["check"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("classes.x.interval"), "{}", stderr(&o));
}

// ---- fingerprint -------------------------------------------------------------

enum E {
    Dir(&'static str, u32),
    File(&'static str, u32, Vec<u8>),
    Link(&'static str, &'static str),
}

fn build(root: &Path, entries: &[E]) {
    fs::create_dir_all(root).expect("root");
    for e in entries {
        match e {
            E::Dir(p, mode) => {
                fs::create_dir_all(root.join(p)).expect("dir");
                fs::set_permissions(root.join(p), fs::Permissions::from_mode(*mode))
                    .expect("chmod");
            }
            E::File(p, mode, bytes) => {
                fs::write(root.join(p), bytes).expect("file");
                fs::set_permissions(root.join(p), fs::Permissions::from_mode(*mode))
                    .expect("chmod");
            }
            E::Link(p, to) => std::os::unix::fs::symlink(to, root.join(p)).expect("link"),
        }
    }
}

/// Golden values from `fingerprint_ref.py` (the specification's function)
/// on the same trees, made as root (uid and gid 0 are in the leaves).
#[test]
fn compat_fingerprint_equals_the_reference_function() {
    if !rustix_is_root() {
        eprintln!("not root: the golden values were made with uid/gid 0");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let trees: Vec<(&str, Vec<E>, &str)> = vec![
        (
            "links",
            vec![
                E::File("a", 0o644, b"alpha\n".to_vec()),
                E::Link("l", "a"),
                E::Link("dangling", "nowhere"),
                E::Dir("sub", 0o755),
                E::File("sub/b", 0o600, Vec::new()),
                E::Link("sub/up", "../a"),
                E::Link("sub/dirlink", ".."),
            ],
            "d2649daaa63741028616808aa458968333aa24f6af8091c47446e9977bb585ad",
        ),
        (
            "empty",
            vec![
                E::Dir("e1", 0o755),
                E::Dir("e1/e2", 0o700),
                E::Dir("z", 0o755),
                E::File("x", 0o755, b"#!/bin/sh\n".to_vec()),
            ],
            "d532bead56bb1d7e4ff9603ac7e9b610f55f3f8f1d52aa4b7fd0b1e6e60e3351",
        ),
        (
            "odd",
            vec![
                E::File("a b", 0o644, b"1".to_vec()),
                E::File("c=d", 0o644, b"2".to_vec()),
                E::File("\u{fc}n\u{ef}.conf", 0o644, b"3".to_vec()),
                E::File("-dash", 0o644, b"4".to_vec()),
                E::File(".hidden", 0o644, b"5".to_vec()),
                E::File("new\nline", 0o644, b"6".to_vec()),
                E::Dir("B", 0o755),
                E::File("B/a", 0o644, b"7".to_vec()),
            ],
            "7c6c7e8c510322a0e93ffe461bdd4d55dba895694b459ba3bca7180645ea5a11",
        ),
        (
            "modes",
            vec![
                E::File("suid", 0o4755, b"s".to_vec()),
                E::File("sgid", 0o2750, b"g".to_vec()),
                E::Dir("sticky", 0o1777),
                E::File("sticky/none", 0o000, b"n".to_vec()),
                E::File("ro", 0o444, b"r".to_vec()),
                E::File("big", 0o640, (0..=255u8).cycle().take(256_000).collect()),
            ],
            "b6c1854b6b1ef31e23eca540a2a9b679040390c04bbfd253c15f325214a25a62",
        ),
    ];
    for (name, entries, golden) in trees {
        let root = dir.path().join(name);
        build(&root, &entries);
        let o = Command::cargo_bin("datum")
            .expect("datum")
            .args(["fingerprint", "--compat"])
            .arg(&root)
            .output()
            .expect("run");
        assert_exit(&o, 0);
        assert_eq!(stdout(&o).trim(), golden, "tree {name}");
        // The native fingerprint is a different function (covers link
        // targets and folder modes), and exclusions change the root.
        let native = Command::cargo_bin("datum")
            .expect("datum")
            .arg("fingerprint")
            .arg(&root)
            .output()
            .expect("run");
        assert_ne!(stdout(&native).trim(), golden);
    }
    let excluded = Command::cargo_bin("datum")
        .expect("datum")
        .args(["fingerprint", "--compat", "--exclude", "big"])
        .arg(dir.path().join("modes"))
        .output()
        .expect("run");
    assert_ne!(
        stdout(&excluded).trim(),
        "b6c1854b6b1ef31e23eca540a2a9b679040390c04bbfd253c15f325214a25a62"
    );
}

/// The reference function lists the path it is given (`os.listdir` follows
/// a link there), so a link to a folder fingerprints that folder; a path
/// that is not a folder has no fingerprint (the reference fails). `datum
/// fingerprint` hashed either as one leaf: every link gave the same
/// `--compat` root, whatever it pointed at.
#[test]
fn the_fingerprint_of_a_link_to_a_folder_is_the_folder_s_and_a_file_has_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    build(&a, &[E::File("x.conf", 0o644, b"x".to_vec())]);
    build(&b, &[E::File("y.conf", 0o600, b"other".to_vec())]);
    let (la, lb) = (dir.path().join("la"), dir.path().join("lb"));
    std::os::unix::fs::symlink(&a, &la).expect("ln");
    std::os::unix::fs::symlink("b", &lb).expect("ln");
    let fp = |args: &[&str], path: &Path| {
        let o = Command::cargo_bin("datum")
            .expect("datum")
            .arg("fingerprint")
            .args(args)
            .arg(path)
            .output()
            .expect("run");
        (code(&o), stdout(&o).trim().to_owned(), stderr(&o))
    };
    for args in [&["--compat"][..], &[][..]] {
        let (ca, ha, _) = fp(args, &a);
        let (cla, hla, _) = fp(args, &la);
        let (_, hb, _) = fp(args, &b);
        let (_, hlb, _) = fp(args, &lb);
        assert_eq!((ca, cla), (0, 0), "{args:?}");
        assert_eq!(hla, ha, "{args:?}: a link to a folder is that folder");
        assert_eq!(hlb, hb, "{args:?}");
        assert_ne!(hla, hlb, "{args:?}: two links to different folders");
        // Not a tree: refused, naming the path.
        let (code, out, err) = fp(args, &a.join("x.conf"));
        assert_eq!(code, 1, "{args:?}: {out}");
        assert!(out.is_empty(), "{out}");
        assert!(
            err.contains("x.conf") && err.contains("not a directory"),
            "{err}"
        );
    }
}

/// `datum fingerprint -v` lists every entry by name: a name is shown, never
/// obeyed by the terminal (a file in the tree named with an escape sequence
/// could clear the screen or rewrite the lines above).
#[test]
fn fingerprint_listing_shows_names_with_control_characters_as_text() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let name = std::ffi::OsStr::from_bytes(b"x\x1b[2J\x1b]0;t\x07y");
    fs::write(dir.path().join(name), "1").expect("write");
    let o = Command::cargo_bin("datum")
        .expect("datum")
        .args(["-v", "fingerprint"])
        .arg(dir.path())
        .output()
        .expect("run");
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        !out.contains('\u{1b}') && !out.contains('\u{7}'),
        "{}",
        out.escape_debug()
    );
    assert!(out.contains("x\\u{1b}[2J"), "{out}");
}

fn rustix_is_root() -> bool {
    // The owner of a file this process creates is its effective uid.
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("probe");
    fs::write(&p, "").expect("probe");
    std::os::unix::fs::MetadataExt::uid(&fs::metadata(&p).expect("stat")) == 0
}

// ---- the shipped example repository ----------------------------------------

#[test]
fn the_example_repository_checks_clean_and_reports_an_editor_backup_in_its_tree() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    let run = |args: &[&str]| {
        Command::cargo_bin("datum")
            .expect("datum")
            .arg("--repo")
            .arg(&examples)
            .arg("--root")
            .arg(&root)
            .arg("--host-file")
            .arg(examples.join("hosts/web-01.yaml"))
            .arg("--color")
            .arg("never")
            .args(args)
            .output()
            .expect("run")
    };
    assert_exit(&run(&["apply"]), 2);
    assert_exit(&run(&["check"]), 0);
    let limits = root.join("etc/security/limits.d");
    fs::write(limits.join(".10-nofile.conf.swp"), "vim").expect("swap");
    assert_exit(&run(&["check"]), 0);
    fs::write(limits.join("10-nofile.conf~"), "old").expect("backup");
    let o = run(&["check", "--output", "json"]);
    assert_exit(&o, 2);
    let json: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(
        findings(&json),
        vec![(
            "Tree[limits-d]".to_owned(),
            "unmanaged".to_owned(),
            vec!["10-nofile.conf~".to_owned()]
        )]
    );
}

#[test]
fn reverting_a_tree_restores_entries_and_purges_only_when_asked() {
    for purge in [false, true] {
        let s = Sandbox::new(REVERT, None);
        let manifest = MANIFEST
            .replace("name: conf-d\n", "name: conf-d\nclass: critical\n")
            .replace(
                "  exclude: [\"*.swp\", \"cache/\"]\n",
                &format!("  exclude: [\"*.swp\", \"cache/\"]\n  purge: {purge}\n"),
            );
        s.write("repo/base/main.yaml", &manifest);
        let s = s.applied();
        let confd = s.live("/etc/app/conf.d");
        fs::write(confd.join("10-a.conf"), "a = 9\n").expect("edit");
        fs::write(confd.join("stray.conf"), "x\n").expect("stray");
        fs::write(confd.join("keep.swp"), "swap").expect("swp");
        let (code, json) = s.reconcile_json(&[]);
        assert_eq!(code, 2);
        let cats: Vec<String> = findings(&json).into_iter().map(|f| f.1).collect();
        assert_eq!(cats, vec!["changed_outside", "unmanaged"], "{json:#}");
        assert_eq!(json["findings"][0]["action"], "reverted", "{json:#}");
        assert_eq!(
            fs::read_to_string(confd.join("10-a.conf")).unwrap(),
            "a = 1\n"
        );
        // Excluded entries are invisible to revert as to check.
        assert!(confd.join("keep.swp").exists());
        assert_eq!(confd.join("stray.conf").exists(), !purge, "purge: {purge}");
        let (code, _) = s.check_json(&[]);
        assert_eq!(code, if purge { 0 } else { 2 }, "purge: {purge}");
    }
}

#[test]
fn accepting_a_tree_lists_what_to_copy_and_reports_a_new_change() {
    let s = Sandbox::new(ACCEPT, None);
    s.write(
        "repo/base/main.yaml",
        &MANIFEST.replace("name: conf-d\n", "name: conf-d\nclass: followed\n"),
    );
    let s = s.applied();
    let confd = s.live("/etc/app/conf.d");
    fs::write(confd.join("10-a.conf"), "a = 5\n").expect("edit");
    let patches = s.dir.path().join("patches");
    let dir = patches.to_str().expect("utf8");
    let (code, json) = s.reconcile_json(&["--patch-dir", dir]);
    assert_eq!(code, 2);
    assert!(
        json["findings"][0]["action"]
            .as_str()
            .unwrap()
            .starts_with("accepted"),
        "{json:#}"
    );
    let summary = fs::read_to_string(patches.join("SUMMARY.md")).expect("summary");
    assert!(
        summary.contains(
            "copy `/etc/app/conf.d/10-a.conf` from the host to `base/trees/conf.d/10-a.conf`"
        ),
        "{summary}"
    );
    assert_eq!(s.check_json(&["--patch-dir", dir]).0, 0);
    // Another change is a new observation: reported (and accepted) again.
    fs::write(confd.join("10-a.conf"), "a = 6\n").expect("edit");
    assert_eq!(s.reconcile_json(&["--patch-dir", dir]).0, 2);
}

#[test]
fn apply_blocks_what_requires_a_quarantined_resource() {
    let s = Sandbox::new("", None).applied();
    assert_exit(
        &s.datum(&["quarantine", "Directory/etc-app", "--reason", "disk swap"]),
        0,
    );
    fs::remove_file(s.live("/etc/app/app.conf")).expect("rm");
    let o = s.datum(&["apply", "--output", "json"]);
    // Held by a person's decision, not failed: nothing changed, exit 0 (a
    // timer running apply does not page anyone for a quarantine) ...
    assert_exit(&o, 0);
    let json: Value = serde_json::from_slice(&o.stdout).expect("json");
    let outcome = |id: &str| {
        json["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["id"] == id)
            .map(|r| {
                (
                    r["outcome"]["status"].clone(),
                    r["outcome"]["by"]["name"].clone(),
                )
            })
            .expect("reported")
    };
    // The quarantined resource is blocked by itself, its dependent by it.
    assert_eq!(
        outcome("Directory[etc-app]"),
        ("blocked".into(), "etc-app".into())
    );
    assert_eq!(
        outcome("File[app-conf]"),
        ("blocked".into(), "etc-app".into())
    );
    assert!(json.to_string().contains("quarantined"), "{json:#}");
    assert!(!s.live("/etc/app/app.conf").exists(), "{json:#}");
    // A person reads "quarantined", not "blocked (by itself)".
    let plan = s.datum(&["plan", "--color", "never"]);
    assert_exit(&plan, 0);
    let human = stdout(&plan);
    let line = |id: &str| {
        human
            .lines()
            .find(|l| l.contains(id))
            .unwrap_or_else(|| panic!("{id}: {human}"))
            .to_owned()
    };
    assert!(
        line("Directory[etc-app]").ends_with("quarantined (not applied)"),
        "{human}"
    );
    assert!(
        line("File[app-conf]").contains("blocked (by Directory[etc-app])"),
        "{human}"
    );
    // Counted as held, not as blocked changes.
    assert!(
        human.contains("0 failed, 0 blocked, 3 held by a quarantine ("),
        "{human}"
    );
    // ... while a failure beside the quarantine still fails the pass.
    let broken = s.write(
        "repo/base/broken.yaml",
        "datum: v1alpha1\ntype: File\nname: broken\ndesired:\n  path: /etc/broken.json\n  content: \"{not json\"\n  validate: json\n",
    );
    assert_exit(&s.datum(&["plan"]), 4);
    assert_exit(&s.datum(&["apply"]), 4);
    fs::remove_file(broken).expect("rm");
    // Released: the next apply recreates it.
    assert_exit(&s.datum(&["release", "Directory/etc-app"]), 0);
    s.datum(&["apply"]);
    assert!(s.live("/etc/app/app.conf").exists());
}

/// Waits until what was written before is older than the racy window of a
/// verified record, as the store keeps its time (whole seconds, truncated).
fn wait_out_racy_records() {
    std::thread::sleep(std::time::Duration::from_millis(
        (datum_core::trust::RACY_WINDOW_NS / 1_000_000) as u64 + 1_200,
    ));
}

/// Waits until everything just written to the repository is older than the
/// racy window of `datum_catalog::hashes` (a snapshot is never saved from a
/// repository that changed within it).
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(
        (datum_catalog::hashes::RACY_WINDOW_NS / 1_000_000) as u64 + 200,
    ));
}

fn catalogue_source(json: &Value) -> &str {
    json["catalogue"].as_str().expect("catalogue provenance")
}

#[test]
fn a_first_apply_into_an_existing_state_folder_remembers_its_compile() {
    let s = Sandbox::new("", None);
    let state = s.live("/var/lib/datum");
    fs::create_dir_all(&state).expect("mkdir");
    fs::set_permissions(&state, fs::Permissions::from_mode(0o700)).expect("chmod");
    settle();
    let kept = || ["state.catalogue", "source-hashes"].map(|f| state.join(f).exists());
    // A plan is a dry run: with no store there, it leaves nothing.
    assert_exit(&s.datum(&["plan"]), 2);
    assert_eq!(kept(), [false, false]);
    // The apply makes the store: what its compile made is kept beside it
    // (before, the next run compiled and hashed every source again).
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(kept(), [true, true]);
    // The snapshot is committed off the pass's path, but before the
    // process ends: in place, and no temporary file of it left.
    let temporary: Vec<_> = fs::read_dir(&state)
        .expect("state folder")
        .map(|e| e.expect("entry").file_name())
        .filter(|n| n.to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(temporary.is_empty(), "{temporary:?}");
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (0, "snapshot"), "{json:#}");
}

#[test]
fn a_first_apply_on_a_bare_root_remembers_its_compile() {
    let s = Sandbox::new("", None);
    settle();
    let state = s.live("/var/lib/datum");
    // A plan is a dry run, and an apply of an unknown target or of a
    // repository with an error does nothing: none makes Datum's folder.
    assert_exit(&s.datum(&["plan"]), 2);
    assert_exit(&s.datum(&["apply", "--target", "File/nope"]), 1);
    let broken = s.write(
        "repo/base/broken.yaml",
        "datum: v1alpha1\ntype: File\nname: broken\ndesired: {path: etc/relative}\n",
    );
    assert_exit(&s.datum(&["apply"]), 1);
    assert_eq!(entries(&s.root()), ["etc"]);
    fs::remove_file(&broken).expect("rm");
    settle();
    // The first apply makes Datum's folder: what its compile made is kept
    // there (before, only beside a folder that existed before the compile,
    // so the run after it compiled and hashed every source again).
    assert_exit(&s.datum(&["apply"]), 2);
    let kept = ["state.catalogue", "source-hashes"].map(|f| state.join(f).exists());
    assert_eq!(kept, [true, true], "{:?}", entries(&state));
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (0, "snapshot"), "{json:#}");
    // Kept whole, the autorequires the pass does without included: the
    // catalogue shown from the snapshot is the one a compile shows.
    let shown = |args: &[&str]| {
        let o = s.datum(args);
        assert_exit(&o, 0);
        stdout(&o)
    };
    let from_snapshot = shown(&["--output", "json", "catalogue"]);
    assert!(
        from_snapshot.contains("Directory[etc-app]"),
        "{from_snapshot}"
    );
    assert_eq!(
        from_snapshot,
        shown(&["--recompile", "--output", "json", "catalogue"])
    );
}

#[test]
fn the_catalogue_snapshot_is_reused_until_the_repository_or_host_changes() {
    let s = Sandbox::new("", None);
    settle();
    let s = s.applied();
    let snapshot = s.live("/var/lib/datum/state.catalogue");
    assert!(
        snapshot.exists(),
        "the check after apply remembers its catalogue"
    );
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (0, "snapshot"), "{json:#}");
    // On request, compiled anyway (and remembered afresh).
    let (code, json) = s.check_json(&["--recompile"]);
    assert_eq!((code, catalogue_source(&json)), (0, "compiled"), "{json:#}");
    assert_eq!(catalogue_source(&s.check_json(&[]).1), "snapshot");

    // A declaration edited in the repository: compiled again, and the live
    // file (still the old declaration) now differs from it: the change
    // apply owes, not drift.
    s.write("repo/base/files/motd", "A new banner.\n");
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (2, "compiled"), "{json:#}");
    assert_eq!(
        findings(&json),
        [(
            "File[motd]".to_owned(),
            "not_converged".to_owned(),
            vec!["content".to_owned()]
        )]
    );
    // Just written: too fresh to be remembered, so compiled again.
    let (_, json) = s.check_json(&[]);
    assert_eq!(catalogue_source(&json), "compiled");

    // Settled, applied: remembered again; then a file inside a Tree source,
    // a new document, and new host labels each compile again.
    settle();
    assert_exit(&s.datum(&["apply"]), 2);
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (0, "snapshot"), "{json:#}");
    s.write("repo/base/trees/conf.d/sub/20-b.conf", "b = 3\n");
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (2, "compiled"), "{json:#}");

    settle();
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(catalogue_source(&s.check_json(&[]).1), "snapshot");
    s.write(
        "repo/base/extra.yaml",
        "datum: v1alpha1\ntype: File\nname: extra\ndesired: {path: /etc/extra, content: \"x\\n\"}\n",
    );
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (2, "compiled"), "{json:#}");
    // Declared but never applied: not converged (not deleted outside).
    assert_eq!(
        findings(&json),
        [(
            "File[extra]".to_owned(),
            "not_converged".to_owned(),
            vec!["presence".to_owned()]
        )]
    );

    settle();
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(catalogue_source(&s.check_json(&[]).1), "snapshot");
    s.write("host.yaml", "name: test-host\nlabels:\n  role: db\n");
    assert_eq!(catalogue_source(&s.check_json(&[]).1), "compiled");
}

#[test]
fn the_drift_scenarios_hold_when_the_catalogue_comes_from_the_snapshot() {
    // The metadata class too: its trusted files are never decoded.
    let s = Sandbox::new(METADATA_CLASSES, Some("cheap"));
    settle();
    let s = s.applied().quiet();
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (0, "snapshot"), "{json:#}");
    assert!(unread(&json) >= 1, "{json:#}");

    edit_keeping_size_and_mtime(&s.live("/etc/app/app.conf"), "listen = 8081\nworkers = 4\n");
    fs::set_permissions(s.live("/etc/motd"), fs::Permissions::from_mode(0o600)).expect("chmod");
    fs::write(s.live("/etc/app/conf.d/10-a.conf~"), "a = 0\n").expect("backup");
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (2, "snapshot"), "{json:#}");
    let mut got = findings(&json);
    got.sort();
    let want = [
        ("File[app-conf]", "changed_outside", vec!["content"]),
        ("File[motd]", "changed_outside", vec!["mode"]),
        ("Tree[conf-d]", "unmanaged", vec!["10-a.conf~"]),
    ];
    let want: Vec<(String, String, Vec<String>)> = want
        .iter()
        .map(|(s, c, p)| {
            let paths = p.iter().map(|x| (*x).to_owned()).collect();
            ((*s).to_owned(), (*c).to_owned(), paths)
        })
        .collect();
    assert_eq!(got, want, "{json:#}");
}

/// Moves the sandbox's repository to where `datum pull` keeps the checkout
/// of `commit` (its private folders 0700, its marker naming `commit`), and
/// leaves a link to it where the repository was, as `datum pull` deploys.
fn deploy_as_checkout(s: &Sandbox, commit: &str) -> PathBuf {
    let checkouts = s.root().join("var/lib/datum/pull/checkouts");
    fs::create_dir_all(&checkouts).expect("mkdir");
    for private in [
        "var/lib/datum",
        "var/lib/datum/pull",
        "var/lib/datum/pull/checkouts",
    ] {
        fs::set_permissions(s.root().join(private), fs::Permissions::from_mode(0o700))
            .expect("chmod");
    }
    let folder = checkouts.join(commit);
    fs::rename(s.repo(), &folder).expect("move the repository");
    std::os::unix::fs::symlink(&folder, s.repo()).expect("link");
    write_marker(&folder, commit);
    folder
}

/// A checkout's `.datum-revision.json` naming `commit`.
fn write_marker(folder: &Path, commit: &str) {
    let marker = serde_json::json!({
        "format_version": 1,
        "commit": commit,
        "tree": "e".repeat(40),
        "ref": "main",
        "source": "file:///srv/infra.git",
        "signer": "alice@example.com",
        "key": "ED25519 SHA256:x",
        "checked_out_at": 1,
    });
    fs::write(
        folder.join(".datum-revision.json"),
        serde_json::to_vec(&marker).expect("json"),
    )
    .expect("marker");
}

#[test]
fn a_pull_checkout_is_remembered_by_its_commit_and_any_other_folder_by_its_stamp() {
    let s = Sandbox::new("", None);
    let commit = "c".repeat(40);
    let folder = deploy_as_checkout(&s, &commit);
    // No settling: a stamp this fresh would be racy and never saved; a
    // commit's checkout is remembered at once.
    let s = s.applied();
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (0, "snapshot"), "{json:#}");

    // A source edited in the checkout by hand (a stamp sees this: size,
    // mtime and ctime move) and a new document: the snapshot is keyed by the
    // commit, so no repository entry is looked at and the edit is unseen ...
    s.write("repo/base/files/motd", "A banner edited in the checkout.\n");
    s.write(
        "repo/base/extra.yaml",
        "datum: v1alpha1\ntype: File\nname: extra\ndesired: {path: /etc/extra, content: \"x\\n\"}\n",
    );
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (0, "snapshot"), "{json:#}");
    // ... until a compile is asked for, which reads the files as they are.
    let (code, json) = s.check_json(&["--recompile"]);
    assert_eq!((code, catalogue_source(&json)), (2, "compiled"), "{json:#}");
    fs::remove_file(folder.join("base/extra.yaml")).expect("rm");

    // The marker names another commit than the folder: not a checkout
    // `datum pull` wrote, so the commit's snapshot is not taken, and the
    // folder is stamped like any other (just changed: racy, not saved).
    write_marker(&folder, &"d".repeat(40));
    let (_, json) = s.check_json(&[]);
    assert_eq!(catalogue_source(&json), "compiled", "{json:#}");
    settle();
    let (_, json) = s.check_json(&[]);
    assert_eq!(catalogue_source(&json), "compiled", "{json:#}");
    let (_, json) = s.check_json(&[]);
    assert_eq!(catalogue_source(&json), "snapshot", "{json:#}");
    // Stamped: an edit that keeps size and mtime is seen (ctime moved).
    edit_keeping_size_and_mtime(
        &folder.join("base/files/app.conf"),
        "listen = 8081\nworkers = 4\n",
    );
    let (_, json) = s.check_json(&[]);
    assert_eq!(catalogue_source(&json), "compiled", "{json:#}");

    // The right marker again: keyed by the commit once more.
    write_marker(&folder, &commit);
    assert_eq!(catalogue_source(&s.check_json(&[]).1), "compiled");
    assert_eq!(catalogue_source(&s.check_json(&[]).1), "snapshot");
    // A checkout folder others may write to is not trusted to stay as
    // written: stamped again.
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o775)).expect("chmod");
    assert_eq!(catalogue_source(&s.check_json(&[]).1), "compiled");
}

/// A sensitive File whose content is a repository file (`source:`) no
/// longer keeps the catalogue from being remembered (a5916fc had every
/// run compile such a catalogue): the snapshot is saved without the
/// source's digests and declaration hash, and each load hashes the source
/// again. So a secret rotated in a pull checkout by hand (which the
/// commit's snapshot does not look for) is seen by the next check from
/// the snapshot and written by the next apply, and the snapshot holds no
/// plain digest of either secret.
#[test]
fn a_sensitive_sources_snapshot_hashes_the_source_again_at_each_load() {
    let s = Sandbox::new("", None);
    s.write(
        "repo/base/token.yaml",
        "datum: v1alpha1\ntype: File\nname: token\nsensitive: true\ndesired:\n  path: /etc/token\n  source: files/token\n",
    );
    let first = "password=CANARY-3c9e first\n";
    s.write("repo/base/files/token", first);
    let folder = deploy_as_checkout(&s, &"c".repeat(40));
    let s = s.applied();
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (0, "snapshot"), "{json:#}");

    let rotated = "password=CANARY-3c9e rotated\n";
    fs::write(folder.join("base/files/token"), rotated).expect("rotate");
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (2, "snapshot"), "{json:#}");
    assert!(
        findings(&json).iter().any(|(id, _, _)| id == "File[token]"),
        "{json:#}"
    );
    let o = s.datum(&["apply"]);
    assert_exit(&o, 2);
    assert_eq!(
        fs::read_to_string(s.live("/etc/token")).expect("token"),
        rotated
    );
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (0, "snapshot"), "{json:#}");

    let snapshot = fs::read(s.live("/var/lib/datum/state.catalogue")).expect("snapshot");
    for secret in [first, rotated] {
        let content = datum_core::Content::new(secret.as_bytes().to_vec());
        let sha = content.sha256.clone();
        let b3 = content.blake3.clone().expect("blake3");
        for needle in [
            sha.as_bytes().to_vec(),
            b3.as_bytes().to_vec(),
            hex::decode(&sha).expect("hex"),
            hex::decode(&b3).expect("hex"),
            b"CANARY-3c9e".to_vec(),
        ] {
            assert!(
                !snapshot.windows(needle.len()).any(|w| w == needle),
                "the snapshot holds {}",
                String::from_utf8_lossy(&needle)
            );
        }
    }
}

/// A sensitive source in a pull checkout (whose snapshot is keyed by the
/// commit, its files not looked at) replaced by a FIFO or a link is not
/// hashed again as if it were the file: the snapshot is left unused and
/// the compile refuses the source, as without a snapshot.
#[test]
fn a_sensitive_source_replaced_by_a_fifo_or_a_link_leaves_the_snapshot_unused() {
    for kind in ["fifo", "link"] {
        let s = Sandbox::new("", None);
        s.write(
            "repo/base/token.yaml",
            "datum: v1alpha1\ntype: File\nname: token\nsensitive: true\ndesired:\n  path: /etc/token\n  source: files/token\n",
        );
        s.write("repo/base/files/token", "password=CANARY-7f21\n");
        let folder = deploy_as_checkout(&s, &"d".repeat(40));
        let s = s.applied();
        let (code, json) = s.check_json(&[]);
        assert_eq!((code, catalogue_source(&json)), (0, "snapshot"), "{json:#}");
        let source = folder.join("base/files/token");
        fs::remove_file(&source).expect("rm");
        if kind == "fifo" {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                &source,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .expect("mkfifo");
        } else {
            let elsewhere = s.dir.path().join("elsewhere");
            fs::write(&elsewhere, "password=CANARY-7f21\n").expect("write");
            std::os::unix::fs::symlink(&elsewhere, &source).expect("link");
        }
        let (code, json) = s.check_json(&[]);
        // The compile refuses the source: exit 1, no findings from the
        // snapshot (the FIFO read as empty gave 'File[token] changed').
        assert_eq!(code, 1, "{kind}: {json:#}");
        assert_ne!(
            json["catalogue"].as_str(),
            Some("snapshot"),
            "{kind}: {json:#}"
        );
        let o = s.datum(&["--log-level", "debug", "check"]);
        assert!(
            stderr(&o).contains("source file cannot be hashed again"),
            "{kind}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn the_debug_log_says_why_the_catalogue_snapshot_was_not_used() {
    let s = Sandbox::new("", None);
    settle();
    let s = s.applied();
    let debug_check = || s.datum(&["--log-level", "debug", "check"]);
    let o = debug_check();
    assert_exit(&o, 0);
    assert!(
        !stderr(&o).contains("snapshot is not used"),
        "{}",
        stderr(&o)
    );
    s.write("repo/base/files/motd", "A new banner.\n");
    let o = debug_check();
    assert!(
        stderr(&o).contains(
            "the catalogue snapshot is not used: a file or folder of the repository changed"
        ),
        "{}",
        stderr(&o)
    );
    s.write("host.yaml", "name: test-host\nlabels:\n  role: db\n");
    let o = debug_check();
    assert!(
        stderr(&o).contains("is not used: it was compiled for another host identity"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_check_of_a_broken_repository_leaves_nothing_behind() {
    let s = Sandbox::new("", None);
    s.write(
        "repo/base/broken.yaml",
        "datum: v1alpha1\ntype: File\nname: broken\ndesired: {path: etc/relative}\n",
    );
    let o = s.datum(&["check"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("broken.yaml"), "{}", stderr(&o));
    assert!(
        !s.live("/var/lib/datum").exists(),
        "no state store, lock or snapshot for a repository that does not compile"
    );
}

/// The entries of `dir`, sorted by name.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A state store Datum refuses, `state.db` in a private folder of its own
/// under the sandbox (never `/dev/null` itself): a directory, a FIFO, or a
/// file that is not a database.
fn refused_store(s: &Sandbox, kind: &str) -> PathBuf {
    let folder = s.dir.path().join(format!("state-{kind}"));
    fs::create_dir(&folder).expect("mkdir");
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o700)).expect("chmod");
    let store = folder.join("state.db");
    match kind {
        "directory" => fs::create_dir(&store).expect("mkdir"),
        "fifo" => rustix::fs::mknodat(
            rustix::fs::CWD,
            &store,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo"),
        _ => fs::write(&store, "not a database\n").expect("write"),
    }
    store
}

#[test]
fn read_only_commands_write_nothing_beside_a_refused_store() {
    let s = Sandbox::new("", None);
    settle();
    for kind in ["directory", "fifo", "not-a-database"] {
        let store = refused_store(&s, kind);
        let folder = store.parent().expect("folder").to_path_buf();
        let state = store.to_str().expect("UTF-8");
        for (args, exit) in [
            (&["plan"][..], 2),
            (&["plan", "--output", "json"], 2),
            (&["check"], 2),
            (&["check", "--output", "json"], 2),
            (&["catalogue"], 0),
            (&["schedule"], 0),
        ] {
            let o = s.datum(&[&["--state", state][..], args].concat());
            assert_exit(&o, exit);
            if args[0] != "catalogue" {
                assert!(stderr(&o).contains("read-only"), "{args:?}: {}", stderr(&o));
                // Said once (the store's error repeated its host error
                // when printed with its causes).
                assert_eq!(
                    stderr(&o)
                        .matches(&format!("refusing to use {state}"))
                        .count(),
                    usize::from(kind != "not-a-database"),
                    "{kind}: {args:?}: {}",
                    stderr(&o)
                );
            }
            // Before: the catalogue snapshot, the source hashes and the
            // digest key were written beside the refused store, and the
            // check made the root's lock (and Datum's folder for it).
            assert_eq!(entries(&folder), ["state.db"], "{kind}: {args:?}");
            assert_eq!(entries(&s.root()), ["etc"], "{kind}: {args:?}");
        }
    }
}

#[test]
fn read_only_commands_on_a_never_applied_root_write_nothing() {
    let s = Sandbox::new("", None);
    settle();
    let commands: [(&[&str], i32); 7] = [
        (&["check"], 2),
        (&["check", "--output", "json"], 2),
        (&["plan", "--output", "json"], 2),
        (&["catalogue"], 0),
        (&["backup", "list"], 0),
        (&["--output", "json", "backup", "list"], 0),
        (&["backup", "show", "1"], 1),
    ];
    for (args, exit) in commands {
        assert_exit(&s.datum(args), exit);
        // Before: the check made var/lib/datum and its lock, and the
        // backup commands made an empty backup store.
        assert_eq!(entries(&s.root()), ["etc"], "{args:?}");
    }
    // Datum's folder made by hand, with no store in it: it stays empty
    // (before: the check left its lock and the digest key there, a plan in
    // JSON the digest key).
    let state = s.live("/var/lib/datum");
    fs::create_dir_all(&state).expect("mkdir");
    fs::set_permissions(&state, fs::Permissions::from_mode(0o700)).expect("chmod");
    for (args, exit) in commands {
        assert_exit(&s.datum(args), exit);
        assert!(
            entries(&state).is_empty(),
            "{args:?}: {:?}",
            entries(&state)
        );
    }
    // The first apply sets it all up, and a check then takes the lock.
    let s = s.applied();
    assert!(s.live("/var/lib/datum/lock").exists());
}

#[test]
fn a_saved_plan_makes_no_digest_key_beside_a_refused_store() {
    let s = Sandbox::new("", None);
    s.write(
        "repo/base/secret.yaml",
        "datum: v1alpha1\ntype: File\nname: token\nsensitive: true\ndesired: {path: /etc/app/token, mode: \"0600\", content: \"CANARY-key-5d1c\\n\"}\n",
    );
    let store = refused_store(&s, "directory");
    let folder = store.parent().expect("folder").to_path_buf();
    let plan = s.dir.path().join("saved.plan");
    let (state, out) = (store.to_str().unwrap(), plan.to_str().unwrap());
    let o = s.datum(&["--state", state, "plan", "--out", out]);
    assert_exit(&o, 1);
    for words in [
        "no plan was saved",
        "File[token] is sensitive",
        "no key is made beside a store Datum refuses",
    ] {
        assert!(stderr(&o).contains(words), "{words}: {}", stderr(&o));
    }
    assert!(!plan.exists());
    // Before: digest.key was made beside the refused store, and the plan saved.
    assert_eq!(entries(&folder), ["state.db"]);
    // Where there is no store yet, saving makes the key the apply of the
    // plan reads again (in the folder the apply makes the store in).
    let fresh = s.dir.path().join("fresh").join("state.db");
    let fresh_state = fresh.to_str().unwrap();
    assert_exit(&s.datum(&["--state", fresh_state, "plan", "--out", out]), 2);
    assert_eq!(entries(fresh.parent().unwrap()), ["digest.key"]);
    assert_exit(&s.datum(&["--state", fresh_state, "apply", out]), 2);
}

#[test]
fn a_sensitive_rendered_value_is_never_remembered() {
    let s = Sandbox::new("", None);
    s.write(
        "repo/base/secret.yaml",
        "datum: v1alpha1\ntype: File\nname: token\nsensitive: true\ndesired: {path: /etc/app/token, mode: \"0600\", content: \"CANARY-snap-7f3e\\n\"}\n",
    );
    settle();
    let s = s.applied();
    let (code, json) = s.check_json(&[]);
    assert_eq!((code, catalogue_source(&json)), (0, "compiled"), "{json:#}");
    let state = s.live("/var/lib/datum");
    assert!(!state.join("state.catalogue").exists());
    for entry in walkdir(&state) {
        let bytes = fs::read(&entry).unwrap_or_default();
        assert!(
            !bytes.windows(16).any(|w| w == b"CANARY-snap-7f3e"),
            "{} holds the sensitive value",
            entry.display()
        );
    }
}

fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            out.extend(walkdir(&path));
        } else {
            out.push(path);
        }
    }
    out
}

// ---- drift is what the apply loop did not produce ---------------------------

#[test]
fn a_never_applied_root_is_not_converged_not_drifted() {
    let s = Sandbox::new("", None);
    let (code, json) = s.check_json(&[]);
    assert_eq!(code, 2, "{json:#}");
    let found = json["findings"].as_array().expect("findings");
    assert!(!found.is_empty(), "{json:#}");
    for f in found {
        assert_eq!(f["category"], "not_converged", "{json:#}");
        assert!(
            f["action"].as_str().unwrap().contains("never applied"),
            "{json:#}"
        );
    }
    // One finding per resource, whatever its differences (a Tree has
    // several).
    let subjects: Vec<&str> = found
        .iter()
        .map(|f| f["subject"].as_str().unwrap())
        .collect();
    let mut unique = subjects.clone();
    unique.dedup();
    assert_eq!(subjects, unique);
    assert!(subjects.contains(&"Tree[conf-d]"), "{subjects:?}");
    let human = stdout(&s.datum(&["check"]));
    assert!(human.contains("not_converged"), "{human}");
    // Applied: converged, and an edit afterwards is drift again.
    let s = s.applied();
    fs::write(s.live("/etc/motd"), "defaced\n").expect("edit");
    one_finding(&s, "File[motd]", "changed_outside", &["content"]);
}

#[test]
fn a_resource_whose_last_apply_failed_is_not_converged_with_the_failure() {
    let s = Sandbox::new("", None).applied();
    s.write(
        "repo/base/app.yaml",
        "datum: v1alpha1\ntype: File\nname: settings\ndesired:\n  path: /etc/app/settings.json\n  content: \"{\\\"broken\\\": \\n\"\n  validate: json\n",
    );
    fs::write(s.live("/etc/app/settings.json"), "{\"live\": 1}\n").expect("write");
    assert_exit(&s.datum(&["apply"]), 4);
    let (code, json) = s.check_json(&[]);
    assert_eq!(code, 2);
    assert_eq!(
        findings(&json),
        vec![(
            "File[settings]".to_owned(),
            "not_converged".to_owned(),
            vec!["content".to_owned()]
        )],
        "{json:#}"
    );
    let action = json["findings"][0]["action"].as_str().unwrap();
    assert!(
        action.starts_with("not converged: its last apply failed (apply): "),
        "{action}"
    );
    assert!(action.contains("json"), "{action}");
    // Fixed and applied: converged; a later edit is drift.
    s.write(
        "repo/base/app.yaml",
        "datum: v1alpha1\ntype: File\nname: settings\ndesired:\n  path: /etc/app/settings.json\n  content: \"{\\\"declared\\\": 2}\\n\"\n  validate: json\n",
    );
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(s.check_json(&[]).0, 0);
    fs::write(s.live("/etc/app/settings.json"), "{\"edited\": 3}\n").expect("edit");
    one_finding(&s, "File[settings]", "changed_outside", &["content"]);
}

#[test]
fn metadata_drift_found_by_an_audit_stays_reported_with_its_history() {
    let s = Sandbox::new(METADATA_CLASSES, Some("audited"))
        .applied()
        .quiet();
    // Check 2 trusts metadata; the stamp-preserving edit (size, mtime,
    // ctime as recorded: the worst case) is missed by check 3 and found by
    // the audit (check 4, every 3rd).
    assert_eq!(s.check_json(&[]).0, 0);
    edit_keeping_size_and_mtime(
        &s.live("/etc/motd"),
        "Welcome to TEST-host.\nAuthorised use only.\n",
    );
    forge_verified_meta(&s);
    assert_eq!(s.check_json(&[]).0, 0);
    let audit = one_finding(&s, "File[motd]", "changed_outside", &["content"]);
    let first_seen = audit["findings"][0]["first_seen"].clone();
    assert_eq!(audit["findings"][0]["passes"], 1);
    // The following metadata passes keep reporting it, and its history
    // goes on (same first seen, one more pass each), through the next
    // audit too.
    for passes in 2..=4 {
        let json = one_finding(&s, "File[motd]", "changed_outside", &["content"]);
        assert_eq!(json["findings"][0]["first_seen"], first_seen, "{json:#}");
        assert_eq!(json["findings"][0]["passes"], passes, "{json:#}");
    }
    // A plan sees it too (apply reads content, never the stamp).
    assert_exit(&s.datum(&["plan"]), 2);
    // The file matches again: the finding closes.
    fs::write(
        s.live("/etc/motd"),
        "Welcome to test-host.\nAuthorised use only.\n",
    )
    .expect("restore");
    assert_eq!(s.check_json(&[]).0, 0);
}

#[test]
fn schedule_states_both_bounds_of_a_metadata_class() {
    let s = Sandbox::new(METADATA_CLASSES, Some("audited")).applied();
    s.check_json(&[]);
    let o = s.datum(&["schedule", "--output", "json"]);
    assert_exit(&o, 0);
    let rows: Value = serde_json::from_slice(&o.stdout).expect("json");
    let row = |name: &str| {
        rows["classes"]
            .as_array()
            .expect("rows")
            .iter()
            .find(|r| r["class"] == name)
            .cloned()
            .expect("class")
    };
    let audited = row("audited");
    let p95 = audited["p95_ms"].as_u64().expect("measured");
    assert_eq!(audited["detection_bound_ms"].as_u64(), Some(300_000 + p95));
    assert_eq!(
        audited["stamp_preserving_bound_ms"].as_u64(),
        Some(3 * 300_000 + p95),
        "{audited:#}"
    );
    assert_eq!(row("cheap")["stamp_preserving_never"], true);
    let human = stdout(&s.datum(&["schedule"]));
    assert!(
        human.contains("audited: metadata-visible changes within 5m")
            && human.contains("edits that keep size and times: within 15m"),
        "{human}"
    );
    assert!(
        human.contains("cheap: metadata-visible changes within")
            && human.contains("edits that keep size and times: never"),
        "{human}"
    );
}

/// A report-only check waits for the root lock before it opens the state
/// store, as an apply does: a store it opened first, while an apply held the
/// lock, may be the one that apply moves aside (`--rebuild-state`), and the
/// check recorded its findings into that file. Here the test holds the lock
/// (as an apply), the check waits on it, the store is moved aside with a
/// copy put in its place, and the lock let go: the check records into the
/// store in place, and the file moved aside is left as it was.
#[test]
fn a_check_opens_the_store_only_once_it_holds_the_lock() {
    let s = Sandbox::new("", None).applied();
    fs::set_permissions(s.live("/etc/motd"), fs::Permissions::from_mode(0o600)).expect("chmod");
    let held = datum_host::RootLock::acquire(
        &datum_host::Host::new(s.root()),
        std::time::Duration::from_secs(5),
    )
    .expect("lock");
    let lock = s.live("/var/lib/datum/lock");
    let check = std::process::Command::new(assert_cmd::cargo::cargo_bin("datum"))
        .arg("--repo")
        .arg(s.repo())
        .arg("--root")
        .arg(s.root())
        .arg("--host-file")
        .arg(s.dir.path().join("host.yaml"))
        .args(["--lock-timeout", "60s", "check"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn datum check");
    // Waiting on the lock: the check has the lock file open.
    let fds = PathBuf::from(format!("/proc/{}/fd", check.id()));
    let started = std::time::Instant::now();
    while !fs::read_dir(&fds)
        .into_iter()
        .flatten()
        .flatten()
        .any(|fd| fs::read_link(fd.path()).is_ok_and(|target| target == lock))
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the check never waited on the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    // What --rebuild-state does under the lock, with the old store's copy
    // in its place.
    let store = s.live("/var/lib/datum/state.db");
    let aside = s.live("/var/lib/datum/state.db.aside");
    fs::rename(&store, &aside).expect("move aside");
    fs::copy(&aside, &store).expect("copy");
    let before = fs::read(&aside).expect("read");
    drop(held);
    let out = check.wait_with_output().expect("check");
    assert_exit(&out, 2);
    assert!(
        fs::read(&aside).expect("read") == before,
        "the check recorded into the store moved aside: {}",
        stderr(&out)
    );
    assert!(
        fs::read(&store).expect("read") != before,
        "nothing recorded"
    );
}

/// A host set up to report whose check runs without the state store is told
/// what brings the store back: an apply when there is none yet, but not
/// when the store is there and damaged (an apply refuses it then, unless
/// given --rebuild-state).
#[test]
fn a_reporting_host_without_a_usable_store_is_told_the_way_back() {
    let s = Sandbox::new("", None);
    s.write(
        "root/etc/datum/report.yaml",
        "server: https://fleet.example.org:8443\ntoken: t\n",
    );
    fs::set_permissions(
        s.live("/etc/datum/report.yaml"),
        fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    // None yet: an apply makes it.
    let out = s.datum(&["check"]);
    let err = stderr(&out);
    let line = |err: &str| {
        err.lines()
            .find(|l| l.contains("report.yaml is set up"))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no warning about report.yaml:\n{err}"))
    };
    assert!(
        line(&err).contains("`datum apply` once creates the store"),
        "{err}"
    );
    // There, but damaged: an apply would refuse it.
    let s = s.applied();
    let db = s.live("/var/lib/datum/state.db");
    drop(datum_store::Store::open(&db).expect("open"));
    let mut bad = fs::read(&db).expect("read");
    for b in &mut bad[..100] {
        *b = 0x5a;
    }
    fs::write(&db, &bad).expect("write");
    let out = s.datum(&["apply"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("--rebuild-state"), "{}", stderr(&out));
    let out = s.datum(&["check"]);
    let err = stderr(&out);
    let warned = line(&err);
    assert!(!warned.contains("once creates"), "{err}");
    assert!(
        warned.contains("unusable") && warned.contains("--rebuild-state"),
        "{err}"
    );
}

/// A check on a host set up to report, its state store on a full file
/// system (a 4 MiB tmpfs filled to the last byte, in a mount namespace of
/// its own): the store cannot be opened (SQLite's xShmMap I/O error), and
/// both warnings gave the advice for a damaged store (restore it from a
/// backup, or `--rebuild-state`, which a full disk refuses the same way and
/// which would forget every quarantine). They now say the file system is
/// full, nothing is damaged, and room is the way back.
#[test]
fn a_reporting_host_whose_store_is_on_a_full_disk_is_told_to_make_room() {
    if !rustix::process::geteuid().is_root() {
        assert!(
            std::env::var_os("DATUM_VALIDATORS_REQUIRED").is_none(),
            "needs root to mount a small file system"
        );
        println!("skipped: needs root to mount a small file system");
        return;
    }
    let s = Sandbox::new("", None).applied();
    s.write(
        "root/etc/datum/report.yaml",
        "datum: v1alpha1\nserver: https://fleet.example.org:8443\ntoken: t\n",
    );
    fs::set_permissions(
        s.live("/etc/datum/report.yaml"),
        fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    let state = s.live("/var/lib/datum");
    let saved = s.dir.path().join("saved");
    fs::create_dir(&saved).expect("mkdir");
    for e in fs::read_dir(&state).expect("read_dir") {
        let e = e.expect("entry");
        if e.file_type().expect("type").is_file() {
            fs::copy(e.path(), saved.join(e.file_name())).expect("copy");
        }
    }
    // The mount lives and dies with the namespace `unshare` makes.
    let script = r#"set -e
mount -t tmpfs -o size=4m,mode=0700 tmpfs "$1"
cp -p "$2"/* "$1"/
dd if=/dev/zero of="$1/filler" bs=64k 2>/dev/null || true
shift 2
exec "$@""#;
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(&state)
        .arg(&saved)
        .arg(env!("CARGO_BIN_EXE_datum"))
        .arg("--repo")
        .arg(s.repo())
        .arg("--root")
        .arg(s.root())
        .arg("--host-file")
        .arg(s.dir.path().join("host.yaml"))
        .args(["--color", "never", "check"])
        .output()
        .expect("unshare");
    let err = stderr(&out);
    assert_exit(&out, 0);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("state store")).collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].contains("the file system has 0 bytes free")
            && lines[0].contains("Nothing is damaged: make room"),
        "{err}"
    );
    assert!(
        lines[1].contains("report.yaml is set up")
            && lines[1].contains("the file system holding the state store is full")
            && lines[1].contains("until there is room again"),
        "{err}"
    );
    for wrong in ["--rebuild-state", "from a backup", "damaged store"] {
        assert!(!err.contains(wrong), "`{wrong}` in:\n{err}");
    }
    // The mount went with the namespace: the store is as it was.
    assert!(!state.join("filler").exists());
}

/// `datum check` and `datum reconcile` drew their progress bar (and the
/// compile's spinner, as plan and apply did) on a terminal's stderr with
/// `--output json` or `markdown`, while plan and apply never drew their bar
/// for a machine format. No command draws progress for one now: run under
/// `script`'s pseudo-terminal with stdout to a file, the terminal sees
/// nothing but what a human check draws there.
#[test]
fn a_machine_format_draws_no_progress_on_a_terminal() {
    if !datum_testkit::tools::have("script", "util-linux") {
        return;
    }
    let s = Sandbox::new("", None).applied();
    let on_terminal = |args: &str| -> String {
        let command = format!(
            "stty cols 200; {} --repo {} --root {} --host-file {} --color never {args} >{}",
            env!("CARGO_BIN_EXE_datum"),
            s.repo().display(),
            s.root().display(),
            s.dir.path().join("host.yaml").display(),
            s.dir.path().join("stdout").display(),
        );
        let out = std::process::Command::new("script")
            .args(["--quiet", "--return", "--command", &command, "/dev/null"])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("script");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // A person's check draws there (the compile's spinner always; the
    // resources bar when the draw rate lets it, on a check this short).
    let human = on_terminal("check");
    assert!(
        human.contains("compiling the repository") || human.contains("resources"),
        "{human:?}"
    );
    for args in [
        "--output json check",
        "--output markdown check",
        "--json reconcile",
        "--output markdown reconcile",
        "--output json plan",
        "--output json apply",
    ] {
        let terminal = on_terminal(args);
        assert_eq!(terminal, "", "{args}: drawn on the terminal: {terminal:?}");
    }
}
