//! The file-system boundary, tried as an attacker would: a parent directory
//! swapped for a link to the outside while apply runs in a loop (bounded,
//! about 20 s in all), the same in a root where a directory on the path
//! belongs to an unprivileged user (systemd's CHASE_SAFE case), links planted
//! where every writer writes, and reads through a parent link that leaves
//! the root, whose target holds a canary that must never appear.

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::support::{Sandbox, assert_exit, code, mode_of, stderr, stdout};

const CANARY: &str = "CANARY-outside-the-root-4f1c";

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Every entry below `dir` (relative), links not followed.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(base, &p, out);
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn staging_left(dir: &Path) -> Vec<String> {
    tree(dir)
        .into_iter()
        .filter(|p| p.contains(".datum.stage."))
        .collect()
}

/// Two repositories declaring the same file with different content, so
/// every apply in a loop writes.
fn alternating(s: &Sandbox, declared: &str, extra_settings: &str) -> [PathBuf; 2] {
    ["a", "b"].map(|v| {
        s.write(
            &format!("repo-{v}/datum.yaml"),
            &format!(
                "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {{}}\n{extra_settings}"
            ),
        );
        s.write(
            &format!("repo-{v}/base/main.yaml"),
            &format!(
                "datum: v1alpha1\ntype: File\nname: f\ndesired:\n  path: {declared}\n  owner: root\n  mode: \"0644\"\n  content: \"version {v}\\n\"\n"
            ),
        );
        s.dir.path().join(format!("repo-{v}"))
    })
}

/// What a race run saw.
struct Race {
    swaps: u64,
    applies: u64,
    written: u64,
    refused: u64,
}

/// Exchanges `dir` and `link` (renameat2 RENAME_EXCHANGE) as fast as it can,
/// optionally as `uid`, until `stop`; returns the number of swaps.
fn swapper(
    dir: PathBuf,
    link: PathBuf,
    uid: Option<u32>,
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
) {
    if let Some(uid) = uid {
        // This thread only (the raw system call, not glibc's broadcast).
        rustix::thread::set_thread_res_gid(
            rustix::process::Gid::from_raw(uid),
            rustix::process::Gid::from_raw(uid),
            rustix::process::Gid::from_raw(uid),
        )
        .unwrap();
        rustix::thread::set_thread_res_uid(
            rustix::process::Uid::from_raw(uid),
            rustix::process::Uid::from_raw(uid),
            rustix::process::Uid::from_raw(uid),
        )
        .unwrap();
    }
    while !stop.load(Ordering::Relaxed) {
        if rustix::fs::renameat_with(
            rustix::fs::CWD,
            &dir,
            rustix::fs::CWD,
            &link,
            rustix::fs::RenameFlags::EXCHANGE,
        )
        .is_ok()
        {
            swaps.fetch_add(1, Ordering::Relaxed);
        }
        std::thread::yield_now();
    }
}

/// Runs apply in a loop for `secs` while the swapper exchanges `dir` and
/// `link`; afterwards `dir` is the directory again.
fn race(
    s: &Sandbox,
    repos: &[PathBuf; 2],
    dir: &Path,
    link: &Path,
    uid: Option<u32>,
    secs: u64,
) -> Race {
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let worker = {
        let (dir, link, stop, swaps) = (
            dir.to_path_buf(),
            link.to_path_buf(),
            Arc::clone(&stop),
            Arc::clone(&swaps),
        );
        std::thread::spawn(move || swapper(dir, link, uid, stop, swaps))
    };
    let started = Instant::now();
    let mut r = Race {
        swaps: 0,
        applies: 0,
        written: 0,
        refused: 0,
    };
    while started.elapsed() < Duration::from_secs(secs) {
        let repo = &repos[(r.applies % 2) as usize];
        let out = s.datum_repo(repo, &["apply"]);
        r.applies += 1;
        match code(&out) {
            2 => r.written += 1,
            0 => {}
            4 | 1 => r.refused += 1,
            other => panic!("apply exited {other}: {}", stderr(&out)),
        }
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    r.swaps = swaps.load(Ordering::Relaxed);
    // Put the directory back where it belongs.
    if fs::symlink_metadata(dir).unwrap().file_type().is_symlink() {
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            dir,
            rustix::fs::CWD,
            link,
            rustix::fs::RenameFlags::EXCHANGE,
        )
        .unwrap();
    }
    r
}

#[test]
fn a_parent_swapped_for_a_link_during_apply_never_gets_a_write_outside_the_root() {
    let s = Sandbox::new();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("f.conf"), CANARY).unwrap();
    fs::create_dir_all(s.live("/etc/d")).unwrap();
    std::os::unix::fs::symlink(outside.path(), s.live("/etc/swap")).unwrap();
    let repos = alternating(&s, "/etc/d/f.conf", "");
    let r = race(
        &s,
        &repos,
        &s.live("/etc/d"),
        &s.live("/etc/swap"),
        None,
        20,
    );
    println!(
        "race: {} swaps, {} applies ({} wrote, {} refused a link)",
        r.swaps, r.applies, r.written, r.refused
    );
    assert!(
        r.swaps > 1000 && r.applies > 20,
        "the race did not run: {} swaps, {} applies",
        r.swaps,
        r.applies
    );
    assert!(
        r.written > 0 && r.refused > 0,
        "both outcomes must occur: {} wrote, {} refused",
        r.written,
        r.refused
    );
    // Zero writes outside: the outside folder holds exactly what it held.
    assert_eq!(tree(outside.path()), ["f.conf"]);
    assert_eq!(
        fs::read_to_string(outside.path().join("f.conf")).unwrap(),
        CANARY
    );
    // A clean run afterwards converges and leaves no staging anywhere.
    let out = s.datum_repo(&repos[0], &["apply"]);
    assert!(matches!(code(&out), 0 | 2), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(s.live("/etc/d/f.conf")).unwrap(),
        "version a\n"
    );
    assert_eq!(staging_left(&s.root()), Vec::<String>::new());
    assert_eq!(staging_left(outside.path()), Vec::<String>::new());
}

#[test]
fn a_directory_owned_by_an_unprivileged_user_cannot_redirect_root() {
    if !is_root() {
        println!("skipped: needs root (chown, a swapper running as nobody)");
        return;
    }
    const NOBODY: u32 = 65534;
    let s = Sandbox::new();
    // A real-looking root: /srv/app belongs to an unprivileged user, as a
    // deploy user's folder would.
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("app.conf"), CANARY).unwrap();
    // The user may make links there: the outside folder is theirs to name.
    fs::set_permissions(s.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let app = s.live("/srv/app");
    fs::create_dir_all(app.join("conf")).unwrap();
    for p in [&app, &app.join("conf")] {
        std::os::unix::fs::chown(p, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    std::os::unix::fs::symlink(outside.path(), app.join("swap")).unwrap();
    std::os::unix::fs::lchown(app.join("swap"), Some(NOBODY), Some(NOBODY)).unwrap();

    // 1. conf belongs to root: entering it from the user's folder is the
    //    unsafe transition, refused before anything is written.
    std::os::unix::fs::chown(app.join("conf"), Some(0), Some(0)).unwrap();
    let repos = alternating(&s, "/srv/app/conf/app.conf", "");
    let out = s.datum_repo(&repos[0], &["apply"]);
    assert_exit(&out, 4);
    let err = stdout(&out) + &stderr(&out);
    assert!(err.contains("unsafe ownership transition"), "{err}");
    assert!(err.contains("uid 65534"), "{err}");
    assert_eq!(tree(&app.join("conf")), Vec::<String>::new());

    // 2. conf belongs to the user (or the repository trusts it): the user
    //    races, swapping conf with a link to the outside, as themselves.
    std::os::unix::fs::chown(app.join("conf"), Some(NOBODY), Some(NOBODY)).unwrap();
    let r = race(
        &s,
        &repos,
        &app.join("conf"),
        &app.join("swap"),
        Some(NOBODY),
        4,
    );
    println!(
        "race as uid {NOBODY}: {} swaps, {} applies ({} wrote, {} refused)",
        r.swaps, r.applies, r.written, r.refused
    );
    assert!(r.swaps > 100 && r.applies > 5, "the race did not run");
    std::os::unix::fs::chown(app.join("conf"), Some(0), Some(0)).unwrap();
    let trusting = alternating(
        &s,
        "/srv/app/conf/app.conf",
        "boundary:\n  owner_transitions: [/srv/app/conf]\n",
    );
    let t = race(
        &s,
        &trusting,
        &app.join("conf"),
        &app.join("swap"),
        Some(NOBODY),
        4,
    );
    println!(
        "race as uid {NOBODY}, transition allowed: {} swaps, {} applies ({} wrote, {} refused)",
        t.swaps, t.applies, t.written, t.refused
    );
    assert!(t.written > 0, "an allowed transition must allow writes");
    assert_eq!(tree(outside.path()), ["app.conf"]);
    assert_eq!(
        fs::read_to_string(outside.path().join("app.conf")).unwrap(),
        CANARY
    );
    assert_eq!(staging_left(outside.path()), Vec::<String>::new());
}

/// A victim outside the root that a planted link points at.
struct Victim {
    dir: tempfile::TempDir,
}

impl Victim {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("victim"), CANARY).unwrap();
        Victim { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("victim")
    }

    fn plant(&self, at: &Path) {
        if let Some(parent) = at.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        let _ = fs::remove_file(at);
        std::os::unix::fs::symlink(self.path(), at).unwrap();
    }

    #[track_caller]
    fn assert_untouched(&self, what: &str) {
        assert_eq!(
            fs::read_to_string(self.path()).unwrap(),
            CANARY,
            "{what} wrote through a planted link"
        );
        assert_eq!(
            tree(self.dir.path()),
            ["victim"],
            "{what} wrote beside the victim"
        );
    }
}

/// A repository declaring `manifest`, and a root with `/etc`.
fn with_etc(manifest: &str) -> Sandbox {
    let s = Sandbox::with_base(manifest);
    fs::create_dir_all(s.live("/etc")).unwrap();
    s
}

const MOTD: &str = "datum: v1alpha1\ntype: File\nname: motd\ndesired:\n  path: /etc/motd\n  content: \"declared\\n\"\n";

#[test]
fn planted_links_are_never_written_through_by_any_writer() {
    let v = Victim::new();

    // apply: a link at the managed path is replaced, never followed.
    let s = with_etc(MOTD);
    v.plant(&s.live("/etc/motd"));
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(
        fs::read_to_string(s.live("/etc/motd")).unwrap(),
        "declared\n"
    );
    v.assert_untouched("apply");

    // state: a link where the state database belongs.
    for file in ["state.db", "state.db-wal", "state.db-shm", "lock"] {
        let s = with_etc(MOTD);
        v.plant(&s.live(&format!("/var/lib/datum/{file}")));
        let out = s.datum(&["apply"]);
        assert_exit(&out, 1);
        assert!(stderr(&out).contains(file), "{file}: {}", stderr(&out));
        v.assert_untouched(file);
        assert!(
            !s.live("/etc/motd").exists(),
            "{file}: applied without its store"
        );
    }

    // snapshot and source hashes: a link in their place is refused, the
    // pass goes on.
    let s = with_etc(MOTD);
    assert_exit(&s.datum(&["apply"]), 2);
    for file in ["state.catalogue", "source-hashes"] {
        v.plant(&s.live(&format!("/var/lib/datum/{file}")));
    }
    fs::write(s.live("/etc/motd"), "edited\n").unwrap();
    assert_exit(&s.datum(&["apply", "--recompile"]), 2);
    v.assert_untouched("the catalogue snapshot");

    // backups: the old content of a file goes to a blob named by its hash;
    // a link there is not written through (and the folder itself may not be
    // a link).
    let s = with_etc(MOTD);
    assert_exit(&s.datum(&["apply"]), 2);
    fs::write(s.live("/etc/motd"), "evidence\n").unwrap();
    let sha = datum_core::sha256_hex(b"evidence\n");
    v.plant(&s.live(&format!(
        "/var/lib/datum/backups/objects/{}/{sha}",
        &sha[..2]
    )));
    let _ = s.datum(&["apply"]);
    v.assert_untouched("a backup");
    let s = with_etc(MOTD);
    fs::create_dir_all(s.live("/var/lib/datum")).unwrap();
    fs::set_permissions(s.live("/var/lib/datum"), fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(v.dir.path(), s.live("/var/lib/datum/backups")).unwrap();
    assert_exit(&s.datum(&["apply"]), 1);
    v.assert_untouched("the backup folder");

    // restore: the file's folder replaced by a link, and the file itself.
    let s = Sandbox::with_base(MOTD.replace("/etc/motd", "/etc/app/motd").as_str());
    fs::create_dir_all(s.live("/etc/app")).unwrap();
    fs::write(s.live("/etc/app/motd"), "old\n").unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    fs::rename(s.live("/etc/app"), s.live("/etc/app.moved")).unwrap();
    std::os::unix::fs::symlink(v.dir.path(), s.live("/etc/app")).unwrap();
    let out = s.datum(&["backup", "restore", "1"]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    v.assert_untouched("restore through a parent link");
    fs::remove_file(s.live("/etc/app")).unwrap();
    fs::rename(s.live("/etc/app.moved"), s.live("/etc/app")).unwrap();
    v.plant(&s.live("/etc/app/motd"));
    assert_exit(&s.datum(&["backup", "restore", "1"]), 0);
    assert_eq!(
        fs::read_to_string(s.live("/etc/app/motd")).unwrap(),
        "old\n"
    );
    v.assert_untouched("restore over a link");

    // accept outputs: the patch, the content file and SUMMARY.md.
    for planted in ["File-motd.content", "SUMMARY.md"] {
        let s = with_etc(MOTD);
        s.write(
            "repo/datum.yaml",
            "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nclasses:\n  followed: {interval: 1h, policy: accept}\n",
        );
        s.write(
            "repo/base/main.yaml",
            &MOTD.replace("name: motd\n", "name: motd\nclass: followed\n"),
        );
        assert_exit(&s.datum(&["apply"]), 2);
        fs::write(s.live("/etc/motd"), "drifted\n").unwrap();
        v.plant(&s.live(&format!("/var/lib/datum/accepted/{planted}")));
        let out = s.datum(&["reconcile"]);
        assert_exit(&out, 1);
        v.assert_untouched(planted);
    }

    // --markdown FILE.
    let s = with_etc(MOTD);
    assert_exit(&s.datum(&["apply"]), 2);
    let report = s.dir.path().join("report.md");
    v.plant(&report);
    let out = s.datum(&["check", "--markdown", report.to_str().unwrap()]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("report.md"), "{}", stderr(&out));
    v.assert_untouched("--markdown");
}

#[test]
fn reads_through_a_parent_link_leaving_the_root_never_show_what_is_there() {
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("app.conf"), format!("{CANARY}\n")).unwrap();
    fs::write(outside.path().join(format!("{CANARY}.name")), "x").unwrap();
    let s = Sandbox::with_base(
        "datum: v1alpha1\ntype: File\nname: app\ndesired:\n  path: /etc/app/app.conf\n  content: \"declared\\n\"\n\
---\ndatum: v1alpha1\ntype: Tree\nname: tree\ndesired:\n  path: /etc/app\n  source: tree\n  exclude: [app.conf]\n",
    );
    // The File's path is left to it by the Tree's `exclude`.
    s.write("repo/base/tree/other.conf", "declared\n");
    fs::create_dir_all(s.live("/etc")).unwrap();
    std::os::unix::fs::symlink(outside.path(), s.live("/etc/app")).unwrap();
    let markdown = s.dir.path().join("report.md");
    let runs = [
        s.datum(&["plan"]),
        s.datum(&["--output", "json", "plan"]),
        s.datum(&["check"]),
        s.datum(&["--output", "json", "check"]),
        s.datum(&["check", "--markdown", markdown.to_str().unwrap()]),
        s.datum(&["apply"]),
    ];
    for out in &runs {
        let all = stdout(out) + &stderr(out);
        assert!(!all.contains(CANARY), "the outside canary leaked:\n{all}");
    }
    // The link is named, as a finding or error, and nothing was written.
    let plan = stdout(&runs[0]) + &stderr(&runs[0]);
    assert!(plan.contains("symbolic link"), "{plan}");
    let check = stdout(&runs[2]) + &stderr(&runs[2]);
    assert!(check.contains("symbolic link"), "{check}");
    let md = fs::read_to_string(&markdown).unwrap();
    assert!(!md.contains(CANARY), "{md}");
    assert!(md.contains("symbolic link"), "{md}");
    assert_eq!(
        tree(outside.path()),
        [format!("{CANARY}.name"), "app.conf".to_owned()]
    );
    assert_eq!(
        fs::read_to_string(outside.path().join("app.conf")).unwrap(),
        format!("{CANARY}\n")
    );
}

#[test]
fn an_allowed_link_inside_the_root_is_followed_once_and_stays_inside() {
    let s = Sandbox::new();
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nboundary:\n  follow_links: [/var/run]\n",
    );
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: File\nname: pid\ndesired:\n  path: /var/run/app.conf\n  content: \"x\\n\"\n",
    );
    fs::create_dir_all(s.live("/run")).unwrap();
    fs::create_dir_all(s.live("/var")).unwrap();
    // Absolute, as on Debian: resolved inside the root, not to the machine's /run.
    std::os::unix::fs::symlink("/run", s.live("/var/run")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    assert_eq!(fs::read_to_string(s.live("/run/app.conf")).unwrap(), "x\n");
    assert!(
        !Path::new("/run/app.conf").exists()
            || fs::metadata("/run/app.conf").unwrap().ino()
                != fs::metadata(s.live("/run/app.conf")).unwrap().ino()
    );
    assert_exit(&s.datum(&["apply"]), 0);
    // Without the allowance the same link is refused.
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
    );
    let out = s.datum(&["apply"]);
    assert_exit(&out, 4);
    assert!(
        (stdout(&out) + &stderr(&out)).contains("boundary.follow_links"),
        "{}",
        stdout(&out)
    );
}

/// A hard link at a managed path shares its inode with a name elsewhere (a
/// local user can make one where `fs.protected_hardlinks` is off). Setting
/// the declared owner or mode in place would change that other name too:
/// File and Tree rewrite the file by rename instead, and the other name
/// keeps its mode and its content.
/// A File that declares no content, hard-linked to a file it may not read:
/// its bytes are never copied under the declared mode (a readable copy of
/// /etc/shadow for whoever made the link), nor its mode changed in place.
#[test]
fn a_hard_link_is_never_copied_when_no_content_is_declared() {
    let outside = tempfile::tempdir().unwrap();
    let s = with_etc(
        "datum: v1alpha1\ntype: File\nname: app\ndesired:\n  path: /etc/app.conf\n  mode: \"0644\"\n",
    );
    let other = outside.path().join("shadow");
    fs::write(&other, "root:canary-7f3a-hash:1::::::\n").unwrap();
    fs::set_permissions(&other, fs::Permissions::from_mode(0o600)).unwrap();
    fs::hard_link(&other, s.live("/etc/app.conf")).unwrap();

    let plan = s.datum(&["plan"]);
    let out = s.datum(&["apply"]);
    assert_exit(&out, 4);
    let all = format!("{}{}{}", stdout(&out), stderr(&out), stdout(&plan));
    assert!(all.contains("hard links"), "{all}");
    assert!(all.contains("declare its content"), "{all}");
    assert!(!all.contains("canary-7f3a"), "{all}");
    let live = fs::metadata(s.live("/etc/app.conf")).unwrap();
    let kept = fs::metadata(&other).unwrap();
    assert_eq!(live.ino(), kept.ino(), "the name was replaced");
    assert_eq!(kept.mode() & 0o7777, 0o600, "the other name changed");
    assert_eq!(staging_left(&s.root()), Vec::<String>::new());
}

#[test]
fn a_hard_link_at_a_managed_path_never_passes_a_mode_change_on() {
    let outside = tempfile::tempdir().unwrap();
    let s = with_etc(
        "datum: v1alpha1\ntype: File\nname: app\ndesired:\n  path: /etc/app.conf\n  mode: \"0666\"\n  content: \"declared\\n\"\n\
---\ndatum: v1alpha1\ntype: Tree\nname: tree\ndesired:\n  path: /etc/t\n  source: tree\n  mode: \"0666\"\n",
    );
    s.write("repo/base/tree/entry.conf", "entry\n");
    fs::create_dir_all(s.live("/etc/t")).unwrap();
    let mut others = Vec::new();
    for (managed, content) in [
        ("/etc/app.conf", "declared\n"),
        ("/etc/t/entry.conf", "entry\n"),
    ] {
        let other = outside.path().join(managed.replace('/', "_"));
        fs::write(&other, content).unwrap();
        fs::set_permissions(&other, fs::Permissions::from_mode(0o600)).unwrap();
        fs::hard_link(&other, s.live(managed)).unwrap();
        others.push((managed, other));
    }

    let out = s.datum(&["apply"]);
    assert_exit(&out, 2);
    for (managed, other) in &others {
        let live = fs::metadata(s.live(managed)).unwrap();
        let kept = fs::metadata(other).unwrap();
        assert_eq!(live.mode() & 0o7777, 0o666, "{managed}: {}", stdout(&out));
        assert_eq!(
            kept.mode() & 0o7777,
            0o600,
            "{managed}: the other name changed"
        );
        assert_ne!(live.ino(), kept.ino(), "{managed}: still one inode");
        assert_eq!(kept.nlink(), 1, "{managed}");
    }
    assert_eq!(staging_left(&s.root()), Vec::<String>::new());
    // Converged: the next pass has nothing to do.
    assert_exit(&s.datum(&["apply"]), 0);
}

/// A followed link the pass changes: the walk read it once (observing what
/// is below it) and kept the folder it led to for the rest of the pass, so
/// a File below a Symlink retargeted (or a Directory put in the link's
/// place) was written into the old target, the apply said done, and the
/// next plan wanted it again. Whatever Datum changes at a link's path, what
/// is below is reached again afterwards, where the kernel would go.
#[test]
fn what_is_below_a_followed_link_the_pass_changes_is_written_where_it_now_leads() {
    let cases = [
        (
            "retargeted",
            "datum: v1alpha1\ntype: Symlink\nname: link\ndesired: {path: /etc/app, target: app-v2}\n",
            "/etc/app-v2/conf",
        ),
        (
            "replaced by a folder",
            "datum: v1alpha1\ntype: Directory\nname: link\ndesired: {path: /etc/app}\n",
            "/etc/app/conf",
        ),
    ];
    for (case, link, want) in cases {
        let s = Sandbox::new();
        s.write(
            "repo/datum.yaml",
            "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nboundary:\n  follow_links: [/etc/app]\n",
        );
        s.write(
            "repo/base/main.yaml",
            &format!(
                "{link}---\ndatum: v1alpha1\ntype: File\nname: conf\ndesired:\n  path: /etc/app/conf\n  content: \"x\\n\"\n"
            ),
        );
        fs::create_dir_all(s.live("/etc/app-v1")).unwrap();
        fs::create_dir_all(s.live("/etc/app-v2")).unwrap();
        std::os::unix::fs::symlink("app-v1", s.live("/etc/app")).unwrap();
        let out = s.datum(&["apply"]);
        assert_exit(&out, 2);
        assert_eq!(
            fs::read_to_string(s.live(want)).ok().as_deref(),
            Some("x\n"),
            "{case}: {}",
            stdout(&out)
        );
        assert!(
            !s.live("/etc/app-v1/conf").exists(),
            "{case}: written into the link's old target"
        );
        let out = s.datum(&["plan"]);
        assert_exit(&out, 0);
    }
}

/// The same with the changed link inside the folder another followed link
/// leads to (Debian's /var/run -> /run, and /var/run/app -> v1 in there):
/// the folder the walk reached through /var/run must go by that spelling,
/// or what the link led to is forgotten under /run/app, not /var/run/app.
#[test]
fn a_followed_link_changed_inside_another_s_target_is_reached_again() {
    let s = Sandbox::new();
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nboundary:\n  follow_links: [/var/run, /var/run/app]\n",
    );
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: Symlink\nname: link\ndesired: {path: /var/run/app, target: v2}\n\
---\ndatum: v1alpha1\ntype: File\nname: conf\ndesired:\n  path: /var/run/app/conf\n  content: \"x\\n\"\n",
    );
    fs::create_dir_all(s.live("/run/v1")).unwrap();
    fs::create_dir_all(s.live("/run/v2")).unwrap();
    fs::create_dir_all(s.live("/var")).unwrap();
    std::os::unix::fs::symlink("/run", s.live("/var/run")).unwrap();
    std::os::unix::fs::symlink("v1", s.live("/run/app")).unwrap();
    let out = s.datum(&["apply"]);
    assert_exit(&out, 2);
    assert_eq!(
        fs::read_to_string(s.live("/run/v2/conf")).ok().as_deref(),
        Some("x\n"),
        "{}",
        stdout(&out)
    );
    assert!(
        !s.live("/run/v1/conf").exists(),
        "written into the old target"
    );
    assert_exit(&s.datum(&["plan"]), 0);
}

/// Datum's own folder is refused by its spelling at compile; through a link
/// the repository lets the walk follow (here /etc/app -> /var/lib/datum on
/// the host) the same folder was reached under another: a File replaced
/// the state store and a Directory opened the backups to everyone, and the
/// apply said done.
#[test]
fn datum_s_own_folder_is_not_reached_through_a_followed_link() {
    let s = Sandbox::new();
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nboundary:\n  follow_links: [/etc/app, /etc/lib]\n",
    );
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: File\nname: motd\ndesired: {path: /etc/motd, content: \"hi\\n\"}\n",
    );
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    let store = fs::read(s.live("/var/lib/datum/state.db")).unwrap();
    std::os::unix::fs::symlink("/var/lib/datum", s.live("/etc/app")).unwrap();
    std::os::unix::fs::symlink("/var/lib", s.live("/etc/lib")).unwrap();
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: File\nname: store\ndesired: {path: /etc/app/state.db, content: \"not a database\\n\"}\n\
---\ndatum: v1alpha1\ntype: Directory\nname: backups\ndesired: {path: /etc/app/backups, mode: \"0777\"}\n\
---\ndatum: v1alpha1\ntype: Directory\nname: own\ndesired: {path: /etc/lib/datum, mode: \"0777\"}\n",
    );
    for command in ["plan", "apply"] {
        let out = s.datum(&[command]);
        let text = stdout(&out) + &stderr(&out);
        assert!(
            text.matches("Datum's own folder").count() >= 3,
            "{command}: {text}"
        );
        assert_ne!(out.status.code(), Some(2), "{command}: {text}");
    }
    assert!(
        fs::read(s.live("/var/lib/datum/state.db"))
            .unwrap()
            .starts_with(&store[..16])
    );
    assert_eq!(mode_of(&s.live("/var/lib/datum/backups")) & 0o777, 0o700);
    assert_eq!(mode_of(&s.live("/var/lib/datum")) & 0o777, 0o700);
}

/// A purging Tree above Datum's own folder leaves it out, by its spelling
/// (`/var/lib`); through a followed link (/etc/x -> /var, a Tree at
/// /etc/x/lib) the folder is the same, and so must the rule be: before,
/// the plan said `tree:datum` would be removed and the apply failed on it.
#[test]
fn a_purging_tree_through_a_followed_link_leaves_datum_s_own_folder_out() {
    let s = Sandbox::new();
    s.write(
        "repo/datum.yaml",
        "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\nboundary:\n  follow_links: [/etc/x]\n",
    );
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: File\nname: motd\ndesired: {path: /etc/motd, content: \"hi\\n\"}\n",
    );
    fs::create_dir_all(s.live("/etc")).unwrap();
    assert_exit(&s.datum(&["apply"]), 2);
    std::os::unix::fs::symlink("/var", s.live("/etc/x")).unwrap();
    s.write("repo/base/files/lib/keep", "k\n");
    s.write(
        "repo/base/main.yaml",
        "datum: v1alpha1\ntype: Tree\nname: lib\ndesired: {path: /etc/x/lib, source: files/lib, purge: true}\n",
    );
    let out = s.datum(&["plan"]);
    assert_exit(&out, 2);
    assert!(!stdout(&out).contains("tree:datum"), "{}", stdout(&out));
    let out = s.datum(&["apply"]);
    assert_exit(&out, 2);
    assert_eq!(fs::read_to_string(s.live("/var/lib/keep")).unwrap(), "k\n");
    assert!(s.live("/var/lib/datum/state.db").exists());
    assert_exit(&s.datum(&["plan"]), 0);
}
