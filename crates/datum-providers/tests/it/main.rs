//! Integration tests: every provider against a real file system, in a
//! temporary root (never the machine's /etc).
//!
//! `conform` is the conformance round every kind goes through: observe shows
//! a change, apply makes it, verify finds nothing left, and a second round is
//! a no-op. The other tests cover what the round cannot: tampering, a gate
//! that says no, leftovers of a killed pass, things in the way, bad accounts.

#![allow(
    clippy::disallowed_methods,
    reason = "integration tests build fixtures and inspect results on disk directly, and start real programs; the code under test goes through datum-host"
)]
#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly at the first surprise"
)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use datum_core::{Action, Content, Diff, Presence, Resource, ResourceId};
use datum_host::{Host, HostError};
use datum_providers::{
    GateRejection, OpenGate, Provider, ProviderError, Staged, StagingGate, lookup,
};
use serde_json::{Value, json};

mod kind_names;

/// A temporary root with its own account files.
struct Root {
    dir: tempfile::TempDir,
    host: Host,
}

impl Root {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        std::fs::write(
            dir.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\napp:x:1234:1234::/srv/app:/bin/false\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("etc/group"),
            "root:x:0:\napp:x:1234:\nadm:x:4:\n",
        )
        .unwrap();
        let host = Host::with_name(dir.path(), "test-host");
        Root { dir, host }
    }

    /// Where a declared path lands.
    fn path(&self, declared: &str) -> PathBuf {
        self.dir.path().join(declared.trim_start_matches('/'))
    }

    fn staging_left(&self, declared_dir: &str) -> Vec<String> {
        std::fs::read_dir(self.path(declared_dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".datum.stage."))
            .collect()
    }
}

fn resource(kind: &str, desired: Value, content: Option<&[u8]>) -> Resource {
    lookup(kind)
        .unwrap()
        .check(&desired)
        .unwrap_or_else(|e| panic!("{kind} {desired}: {e:?}"));
    Resource {
        content: content.map(|c| Content::new(c.to_vec())),
        ..Resource::new(ResourceId::new(kind, "it"), desired)
    }
}

fn provider(r: &Resource) -> &'static dyn Provider {
    lookup(&r.id.kind).unwrap()
}

fn plan(root: &Root, r: &Resource) -> Diff {
    let observed = provider(r).observe(&root.host, r).unwrap();
    provider(r).plan(&provider(r).declare(r).unwrap(), &observed)
}

fn apply_with(
    root: &Root,
    r: &Resource,
    gate: &mut dyn StagingGate,
) -> Result<Diff, ProviderError> {
    let p = provider(r);
    let observed = p.observe(&root.host, r)?;
    let diff = p.plan(&p.declare(r).unwrap(), &observed);
    p.apply(&root.host, r, &observed, &diff, gate)?;
    Ok(diff)
}

/// The conformance round: a change is seen and made, verify converges, and
/// a second round changes nothing. Returns the first diff.
fn conform(root: &Root, r: &Resource, expected: Action) -> Diff {
    let diff = apply_with(root, r, &mut OpenGate).unwrap();
    assert_eq!(diff.action(), expected, "{}: first diff {diff:?}", r.id);
    let (_, remaining) = provider(r).verify(&root.host, r).unwrap();
    assert!(remaining.is_empty(), "{}: verify left {remaining:?}", r.id);
    let again = apply_with(root, r, &mut OpenGate).unwrap();
    assert!(again.is_empty(), "{}: second round {again:?}", r.id);
    diff
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        == 0
}

/// A gate that records what it was shown and says no.
struct Rejecting {
    seen: Option<(PathBuf, Vec<u8>, u32)>,
}

impl StagingGate for Rejecting {
    fn check_staged(&mut self, staged: &Staged<'_>) -> Result<(), GateRejection> {
        let path = staged.path;
        assert_eq!(
            std::fs::read(path).unwrap(),
            staged.bytes,
            "the gate is shown what was written"
        );
        assert_eq!(mode_of(path), staged.mode);
        self.seen = Some((
            path.to_path_buf(),
            std::fs::read(path).unwrap(),
            mode_of(path),
        ));
        Err(GateRejection {
            summary: "validation failed (sshd, exit 255)".into(),
            detail: Some("line 1: bad option".into()),
        })
    }
}

// ----- File -----------------------------------------------------------------

#[test]
fn file_create_update_noop_remove() {
    let root = Root::new();
    let live = root.path("/etc/motd");
    let desired = json!({"path": "/etc/motd", "owner": "root", "group": "root", "mode": "0640"});

    let created = conform(
        &root,
        &resource("File", desired.clone(), Some(b"hello\n")),
        Action::Create,
    );
    assert_eq!(
        created.changed_fields(),
        ["owner", "group", "mode", "content"]
    );
    assert_eq!(std::fs::read(&live).unwrap(), b"hello\n");
    assert_eq!(mode_of(&live), 0o640);

    let updated = conform(
        &root,
        &resource("File", desired.clone(), Some(b"bye\n")),
        Action::Update,
    );
    let change = updated.content.unwrap();
    // Observation keeps checksums only (the engine reads bytes for diffs).
    assert_eq!(change.before, None);
    assert_eq!(
        change.before_sha256.as_deref(),
        Some(datum_core::sha256_hex(b"hello\n").as_str())
    );
    assert_eq!(std::fs::read(&live).unwrap(), b"bye\n");
    assert_eq!(mode_of(&live), 0o640, "mode kept through a content change");

    let absent = json!({"path": "/etc/motd", "ensure": "absent"});
    conform(&root, &resource("File", absent, None), Action::Remove);
    assert!(!live.exists());
    assert!(root.staging_left("/etc").is_empty());
}

#[test]
fn file_without_content_manages_metadata_only() {
    let root = Root::new();
    let live = root.path("/etc/hosts.allow");
    let r = resource(
        "File",
        json!({"path": "/etc/hosts.allow", "mode": "0600"}),
        None,
    );

    conform(&root, &r, Action::Create);
    assert_eq!(std::fs::read(&live).unwrap(), b"", "created empty");

    std::fs::write(&live, b"local edits are not managed\n").unwrap();
    std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o644)).unwrap();
    let inode = std::fs::metadata(&live).unwrap().ino();
    let diff = conform(&root, &r, Action::Update);
    assert_eq!(diff.changed_fields(), ["mode"]);
    assert_eq!(
        std::fs::read(&live).unwrap(),
        b"local edits are not managed\n"
    );
    assert_eq!(
        std::fs::metadata(&live).unwrap().ino(),
        inode,
        "changed in place"
    );
    assert_eq!(mode_of(&live), 0o600);
}

#[test]
fn default_mode_of_a_new_file_is_0644_whatever_the_umask() {
    let root = Root::new();
    let r = resource("File", json!({"path": "/etc/issue"}), Some(b"x"));
    conform(&root, &r, Action::Create);
    assert_eq!(mode_of(&root.path("/etc/issue")), 0o644);
}

#[test]
fn tampering_shows_as_a_diff_and_is_repaired() {
    let root = Root::new();
    let live = root.path("/etc/motd");
    let r = resource(
        "File",
        json!({"path": "/etc/motd", "mode": "0644"}),
        Some(b"managed\n"),
    );
    conform(&root, &r, Action::Create);

    // A chmod that takes no one's writing away: only the mode differs, and
    // it is fixed in place.
    std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o600)).unwrap();
    let inode = std::fs::metadata(&live).unwrap().ino();
    let diff = plan(&root, &r);
    assert_eq!(diff.changed_fields(), ["mode"]);
    assert_eq!(diff.changes[0].before, Some(json!("0600")));
    conform(&root, &r, Action::Update);
    assert_eq!(std::fs::metadata(&live).unwrap().ino(), inode);

    // One that takes writing away from others (0666): rewritten, so a
    // descriptor opened for writing while it was 0666 writes nowhere the
    // path leads (40cfb5b).
    std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o666)).unwrap();
    let inode = std::fs::metadata(&live).unwrap().ino();
    let diff = plan(&root, &r);
    assert_eq!(diff.changed_fields(), ["mode"]);
    assert_eq!(diff.changes[0].before, Some(json!("0666")));
    conform(&root, &r, Action::Update);
    assert_ne!(std::fs::metadata(&live).unwrap().ino(), inode);
    assert_eq!(mode_of(&live), 0o644);
    assert_eq!(std::fs::read(&live).unwrap(), b"managed\n");

    // An edit: the content differs, with the edited checksum as "before".
    std::fs::write(&live, b"edited by hand\n").unwrap();
    let diff = plan(&root, &r);
    assert_eq!(diff.changed_fields(), ["content"]);
    assert_eq!(
        diff.content.as_ref().unwrap().before_sha256.as_deref(),
        Some(datum_core::sha256_hex(b"edited by hand\n").as_str())
    );
    conform(&root, &r, Action::Update);
    assert_eq!(std::fs::read(&live).unwrap(), b"managed\n");

    // The file replaced by a symlink: a replace, and the link (not its
    // target) is what gets replaced.
    let elsewhere = root.path("/elsewhere");
    std::fs::write(&elsewhere, b"not managed\n").unwrap();
    std::fs::remove_file(&live).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &live).unwrap();
    let observed = provider(&r).observe(&root.host, &r).unwrap();
    assert_eq!(observed.presence, Presence::OtherType("symlink".into()));
    conform(&root, &r, Action::Replace);
    assert!(std::fs::symlink_metadata(&live).unwrap().is_file());
    assert_eq!(std::fs::read(&elsewhere).unwrap(), b"not managed\n");
}

#[test]
fn the_gate_sees_the_complete_staged_copy_under_the_exact_name() {
    struct Inspect(Option<(PathBuf, Vec<u8>, u32, bool)>);
    impl StagingGate for Inspect {
        fn check_staged(&mut self, staged: &Staged<'_>) -> Result<(), GateRejection> {
            let staged = staged.path;
            let target_untouched = !staged
                .parent()
                .unwrap()
                .parent()
                .unwrap()
                .join("sshd_config")
                .exists();
            self.0 = Some((
                staged.to_path_buf(),
                std::fs::read(staged).unwrap(),
                mode_of(staged),
                target_untouched,
            ));
            Ok(())
        }
    }
    let root = Root::new();
    std::fs::create_dir(root.path("/etc/ssh")).unwrap();
    let r = resource(
        "File",
        json!({"path": "/etc/ssh/sshd_config", "mode": "0600"}),
        Some(b"Port 22\n"),
    );
    let mut gate = Inspect(None);
    apply_with(&root, &r, &mut gate).unwrap();
    let (staged, bytes, mode, target_untouched) = gate.0.unwrap();
    assert_eq!(staged.file_name().unwrap(), "sshd_config");
    let stage_dir = staged.parent().unwrap();
    assert!(
        stage_dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".datum.stage.")
    );
    assert_eq!(stage_dir.parent().unwrap(), root.path("/etc/ssh"));
    assert_eq!(bytes, b"Port 22\n");
    assert_eq!(mode, 0o600, "mode is set before the gate");
    assert!(target_untouched, "nothing live before the gate says yes");
    assert!(root.staging_left("/etc/ssh").is_empty());
}

#[test]
fn a_rejecting_gate_leaves_the_live_file_byte_identical() {
    let root = Root::new();
    let live = root.path("/etc/motd");
    std::fs::write(&live, b"old and working\n").unwrap();
    std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = std::fs::metadata(&live).unwrap();

    let r = resource(
        "File",
        json!({"path": "/etc/motd", "mode": "0600"}),
        Some(b"broken\n"),
    );
    let mut gate = Rejecting { seen: None };
    let err = apply_with(&root, &r, &mut gate).unwrap_err();
    assert!(matches!(err, ProviderError::Rejected(_)), "{err}");
    assert!(err.to_string().contains("sshd"), "{err}");

    let (staged, bytes, mode) = gate.seen.unwrap();
    assert_eq!((bytes.as_slice(), mode), (&b"broken\n"[..], 0o600));
    assert!(!staged.exists());
    let after = std::fs::metadata(&live).unwrap();
    assert_eq!(std::fs::read(&live).unwrap(), b"old and working\n");
    assert_eq!(after.ino(), before.ino());
    assert_eq!(
        (after.mtime(), after.mtime_nsec()),
        (before.mtime(), before.mtime_nsec())
    );
    assert_eq!(after.mode(), before.mode());
    assert!(root.staging_left("/etc").is_empty());
}

#[test]
fn stale_staging_from_a_killed_pass_is_removed() {
    let root = Root::new();
    let stale = root.path("/etc/.datum.stage.0123456789abcdef");
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("motd"), b"half writ").unwrap();
    let r = resource("File", json!({"path": "/etc/motd"}), Some(b"whole\n"));
    conform(&root, &r, Action::Create);
    assert!(!stale.exists());
    assert!(root.staging_left("/etc").is_empty());
}

#[test]
fn a_directory_in_the_way_of_a_file_fails_and_is_kept() {
    let root = Root::new();
    let dir = root.path("/etc/motd");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("precious"), b"x").unwrap();
    let r = resource("File", json!({"path": "/etc/motd"}), Some(b"hi\n"));
    assert_eq!(plan(&root, &r).action(), Action::Replace);
    let err = apply_with(&root, &r, &mut OpenGate).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("directory is in the way") && text.contains(&dir.display().to_string()),
        "{text}"
    );
    assert!(dir.join("precious").exists());
}

#[test]
fn a_missing_parent_is_named_and_not_created() {
    let root = Root::new();
    let r = resource(
        "File",
        json!({"path": "/etc/app/conf.d/x.conf"}),
        Some(b"x"),
    );
    let err = apply_with(&root, &r, &mut OpenGate).unwrap_err();
    match err {
        ProviderError::Host(HostError::MissingParent { parent, .. }) => {
            assert_eq!(parent, root.path("/etc/app/conf.d"));
        }
        other => panic!("unexpected {other}"),
    }
    assert!(!root.path("/etc/app").exists());
}

#[test]
fn an_unknown_user_is_an_error_naming_it_and_nothing_is_written() {
    let root = Root::new();
    let r = resource(
        "File",
        json!({"path": "/etc/motd", "owner": "ghost"}),
        Some(b"x"),
    );
    // Plan still works: the owner shows as a change to make.
    assert_eq!(plan(&root, &r).action(), Action::Create);
    let err = apply_with(&root, &r, &mut OpenGate).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("unknown user `ghost`"), "{text}");
    assert!(!text.contains('\n'));
    assert!(!root.path("/etc/motd").exists());
    assert!(root.staging_left("/etc").is_empty());

    let g = resource(
        "Directory",
        json!({"path": "/srv", "group": "nogroup"}),
        None,
    );
    let err = apply_with(&root, &g, &mut OpenGate).unwrap_err();
    assert!(err.to_string().contains("unknown group `nogroup`"), "{err}");
    assert!(!root.path("/srv").exists());
}

#[test]
fn owners_resolve_from_the_roots_account_files() {
    if !running_as_root() {
        eprintln!("skipped: chown to another user needs root");
        return;
    }
    let root = Root::new();
    let live = root.path("/etc/app.conf");
    let r = resource(
        "File",
        json!({"path": "/etc/app.conf", "owner": "app", "group": "adm", "mode": "0640"}),
        Some(b"x=1\n"),
    );
    conform(&root, &r, Action::Create);
    let m = std::fs::metadata(&live).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 4));

    // Observed owners read back as names; a chown by hand is drift.
    let observed = provider(&r).observe(&root.host, &r).unwrap();
    assert_eq!(observed.fields["owner"], json!("app"));
    std::os::unix::fs::chown(&live, Some(0), None).unwrap();
    let diff = plan(&root, &r);
    assert_eq!(diff.changed_fields(), ["owner"]);
    assert_eq!(diff.changes[0].before, Some(json!("root")));
    conform(&root, &r, Action::Update);
    assert_eq!(std::fs::metadata(&live).unwrap().uid(), 1234);

    // Numeric owners work without an entry, and chown keeps a set-id mode.
    let n = resource(
        "File",
        json!({"path": "/etc/tool", "owner": 4321, "mode": "4755"}),
        Some(b"#!"),
    );
    conform(&root, &n, Action::Create);
    let m = std::fs::metadata(root.path("/etc/tool")).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o7777), (4321, 0o4755));
}

// ----- Directory ------------------------------------------------------------

#[test]
fn directory_create_update_noop_remove() {
    let root = Root::new();
    let dir = root.path("/etc/app-secrets");
    let r = resource(
        "Directory",
        json!({"path": "/etc/app-secrets", "owner": "root", "mode": "0700"}),
        None,
    );
    conform(&root, &r, Action::Create);
    assert!(dir.is_dir());
    assert_eq!(mode_of(&dir), 0o700);

    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(plan(&root, &r).changed_fields(), ["mode"]);
    conform(&root, &r, Action::Update);
    assert_eq!(mode_of(&dir), 0o700);

    let setgid = resource(
        "Directory",
        json!({"path": "/etc/shared", "mode": "2775"}),
        None,
    );
    conform(&root, &setgid, Action::Create);
    assert_eq!(mode_of(&root.path("/etc/shared")), 0o2775);

    let default = resource("Directory", json!({"path": "/etc/plain"}), None);
    conform(&root, &default, Action::Create);
    assert_eq!(mode_of(&root.path("/etc/plain")), 0o755);

    conform(
        &root,
        &resource(
            "Directory",
            json!({"path": "/etc/app-secrets", "ensure": "absent"}),
            None,
        ),
        Action::Remove,
    );
    assert!(!dir.exists());
}

#[test]
fn a_non_empty_directory_is_never_removed() {
    let root = Root::new();
    let dir = root.path("/etc/app");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("keep"), b"x").unwrap();
    let r = resource(
        "Directory",
        json!({"path": "/etc/app", "ensure": "absent"}),
        None,
    );
    let err = apply_with(&root, &r, &mut OpenGate).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("not empty") && text.contains(&dir.display().to_string()),
        "{text}"
    );
    assert!(dir.join("keep").exists());
}

#[test]
fn a_directory_creates_only_itself() {
    let root = Root::new();
    let r = resource("Directory", json!({"path": "/srv/app/data"}), None);
    let err = apply_with(&root, &r, &mut OpenGate).unwrap_err();
    assert!(
        err.to_string()
            .contains(&root.path("/srv/app").display().to_string()),
        "{err}"
    );
    assert!(!root.path("/srv").exists());
}

#[test]
fn a_file_in_the_way_of_a_directory_is_replaced() {
    let root = Root::new();
    let path = root.path("/etc/app");
    std::fs::write(&path, b"stray").unwrap();
    let r = resource(
        "Directory",
        json!({"path": "/etc/app", "mode": "0750"}),
        None,
    );
    let diff = conform(&root, &r, Action::Replace);
    assert_eq!(diff.changes[0].before, Some(json!("file")));
    assert!(path.is_dir());
    assert_eq!(mode_of(&path), 0o750);
}

// ----- Symlink --------------------------------------------------------------

#[test]
fn symlink_create_retarget_noop_remove() {
    let root = Root::new();
    let link = root.path("/etc/current");
    let r = resource(
        "Symlink",
        json!({"path": "/etc/current", "target": "releases/1"}),
        None,
    );
    conform(&root, &r, Action::Create);
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("releases/1"),
        "stored as declared"
    );

    let r2 = resource(
        "Symlink",
        json!({"path": "/etc/current", "target": "/opt/releases/2"}),
        None,
    );
    let diff = conform(&root, &r2, Action::Update);
    assert_eq!(diff.changes[0].before, Some(json!("releases/1")));
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("/opt/releases/2")
    );

    // Retargeted by hand: drift.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("elsewhere", &link).unwrap();
    assert_eq!(plan(&root, &r2).changed_fields(), ["target"]);
    conform(&root, &r2, Action::Update);

    conform(
        &root,
        &resource(
            "Symlink",
            json!({"path": "/etc/current", "ensure": "absent"}),
            None,
        ),
        Action::Remove,
    );
    assert!(std::fs::symlink_metadata(&link).is_err());
    assert!(root.staging_left("/etc").is_empty());
}

#[test]
fn a_file_in_the_way_of_a_symlink_is_replaced_a_directory_is_not() {
    let root = Root::new();
    let path = root.path("/etc/localtime");
    std::fs::write(&path, b"TZif").unwrap();
    let r = resource(
        "Symlink",
        json!({"path": "/etc/localtime", "target": "/usr/share/zoneinfo/UTC"}),
        None,
    );
    conform(&root, &r, Action::Replace);
    assert_eq!(
        std::fs::read_link(&path).unwrap(),
        Path::new("/usr/share/zoneinfo/UTC")
    );

    let dir = root.path("/etc/alternatives");
    std::fs::create_dir(&dir).unwrap();
    let d = resource(
        "Symlink",
        json!({"path": "/etc/alternatives", "target": "x"}),
        None,
    );
    let err = apply_with(&root, &d, &mut OpenGate).unwrap_err();
    assert!(err.to_string().contains("directory is in the way"), "{err}");
    assert!(dir.is_dir());
}

#[test]
fn observing_never_follows_links() {
    let root = Root::new();
    let target = root.path("/etc/real");
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&target, root.path("/etc/link")).unwrap();
    let d = resource("Directory", json!({"path": "/etc/link"}), None);
    let observed = provider(&d).observe(&root.host, &d).unwrap();
    assert_eq!(observed.presence, Presence::OtherType("symlink".into()));
}

#[test]
fn writes_never_escape_the_root_through_a_symlinked_parent() {
    let root = Root::new();
    let outside = tempfile::tempdir().unwrap();
    // Declared for the real machine, the link points outside the temp root.
    let link = resource(
        "Symlink",
        json!({"path": "/etc/sites-enabled", "target": outside.path().to_str().unwrap()}),
        None,
    );
    conform(&root, &link, Action::Create);
    let file = resource(
        "File",
        json!({"path": "/etc/sites-enabled/shop.conf"}),
        Some(b"x"),
    );
    let err = apply_with(&root, &file, &mut OpenGate).unwrap_err();
    assert!(err.to_string().contains("is a symbolic link"), "{err}");
    // Observing it (plan, check) is refused the same way: nothing is read
    // through the link.
    let err = provider(&file).observe(&root.host, &file).unwrap_err();
    assert!(err.to_string().contains("is a symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}
