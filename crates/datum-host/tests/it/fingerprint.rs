//! Scanning trees from disk: golden compat values, native coverage, declared-vs-observed
//! comparison and exclusions.
//!
//! The compat golden values were computed once with the specification's reference script
//! (`bench/fingerprint_ref.py` in the shared benchmark folder) on trees built by exactly
//! these builders, owned by 0:0; the tests do not need that script to run. Every tree is
//! chowned to 0:0 explicitly, so the values hold whoever runs the tests, as long as they
//! may chown (CI runs as root).

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use datum_fingerprint::{
    Algorithm, EntryKind, Exclusions, Node, TreeDifference, compare, fingerprint_declared,
    fingerprint_tree,
};
use datum_host::tree_scan::{ScanOptions, ScanProgress, scan, scan_root};

/// Builds trees on disk; modes are applied after ownership (a chown clears setuid bits).
struct Builder {
    root: PathBuf,
    modes: Vec<(PathBuf, u32)>,
}

impl Builder {
    fn new(root: &Path) -> Builder {
        fs::create_dir_all(root).unwrap();
        Builder {
            root: root.to_path_buf(),
            modes: vec![(root.to_path_buf(), 0o755)],
        }
    }
    fn path(&self, rel: &[u8]) -> PathBuf {
        self.root.join(OsStr::from_bytes(rel))
    }
    fn dir(&mut self, rel: &[u8], mode: u32) -> &mut Self {
        let p = self.path(rel);
        fs::create_dir_all(&p).unwrap();
        self.modes.push((p, mode));
        self
    }
    fn file(&mut self, rel: &[u8], mode: u32, content: &[u8]) -> &mut Self {
        let p = self.path(rel);
        fs::write(&p, content).unwrap();
        self.modes.push((p, mode));
        self
    }
    fn link(&mut self, rel: &[u8], target: &[u8]) -> &mut Self {
        symlink(OsStr::from_bytes(target), self.path(rel)).unwrap();
        self
    }
    fn fifo(&mut self, rel: &[u8], mode: u32) -> &mut Self {
        let p = self.path(rel);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &p,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        self.modes.push((p, mode));
        self
    }
    fn socket(&mut self, rel: &[u8], mode: u32) -> &mut Self {
        let p = self.path(rel);
        // The listener is dropped at once; the socket file stays.
        drop(std::os::unix::net::UnixListener::bind(&p).unwrap());
        self.modes.push((p, mode));
        self
    }
    /// Chowns everything to 0:0 (links themselves, not their targets), then sets modes.
    fn finish(&mut self) -> PathBuf {
        chown_tree(&self.root, 0, 0);
        for (p, mode) in &self.modes {
            fs::set_permissions(p, fs::Permissions::from_mode(*mode)).unwrap();
        }
        self.root.clone()
    }
}

fn chown_tree(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
    let meta = fs::symlink_metadata(path).unwrap();
    if meta.is_dir() {
        for e in fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), uid, gid);
        }
    }
}

fn opts(algorithm: Algorithm, threads: usize) -> ScanOptions {
    ScanOptions {
        algorithm,
        exclude: None,
        threads,
        progress: None,
    }
}

/// The root hash, checked to be the same from a full scan and a root-only one.
fn root_hash(path: &Path, algorithm: Algorithm) -> String {
    let full = scan(path, &opts(algorithm, 2)).unwrap();
    let root = scan_root(path, &opts(algorithm, 2)).unwrap();
    assert_eq!(root.hash, full.root_hash(), "{}", path.display());
    assert_eq!(root.stats, full.stats, "{}", path.display());
    full.root_hash().to_string()
}

/// Checks a compat golden value; on a mismatch keeps the tree for inspection with the
/// reference script.
fn assert_golden(dir: tempfile::TempDir, root: &Path, expected: &str) {
    let got = root_hash(root, Algorithm::Compat);
    if got != expected {
        let kept = dir.keep();
        panic!(
            "compat fingerprint of {} (kept in {}) is {got}, golden {expected}",
            root.display(),
            kept.display()
        );
    }
}

// --- the specification's golden values ----------------------------------------------

/// The bench README's vector: `mkdir -p t/d t/e && printf 'hi\n' > t/a && chmod 644 t/a
/// && ln -s a t/b`, as root.
fn readme_tree(base: &Path) -> PathBuf {
    let mut b = Builder::new(&base.join("t"));
    b.dir(b"d", 0o755)
        .dir(b"e", 0o755)
        .file(b"a", 0o644, b"hi\n")
        .link(b"b", b"a");
    b.finish()
}

#[test]
fn compat_matches_the_readme_golden_vector() {
    let dir = tempfile::tempdir().unwrap();
    let root = readme_tree(dir.path());
    assert_golden(
        dir,
        &root,
        "0af960f6499974f32010cb41f68bd4665f5a4ce3e29fc528d3cb30cf3714c039",
    );
}

/// Names the reference sorts as raw bytes: spaces, a newline, `=`, non-UTF-8, a leading
/// dash, upper before lower case, multi-byte UTF-8.
fn odd_names_tree(base: &Path) -> PathBuf {
    let mut b = Builder::new(&base.join("odd"));
    b.file(b"with space.conf", 0o644, b"a b\n")
        .file(b"new\nline", 0o600, b"x")
        .file(b"a=b", 0o644, b"=")
        .file(b"caf\xe9.latin1", 0o644, b"\xff\xfe")
        .file(b"-dash", 0o640, b"")
        .file(b"Zebra", 0o644, b"Z")
        .file(b"zebra", 0o644, b"z")
        .file(
            "\u{00e9}t\u{00e9}.txt".as_bytes(),
            0o644,
            "\u{00e9}".as_bytes(),
        )
        .dir(b"dir with\ttab", 0o750)
        .file(b"dir with\ttab/inner", 0o444, b"inner\n");
    b.finish()
}

#[test]
fn compat_matches_the_reference_on_odd_names() {
    let dir = tempfile::tempdir().unwrap();
    let root = odd_names_tree(dir.path());
    assert_golden(
        dir,
        &root,
        "edd4d37e8ea5ae827ce1cc0a561984655e37cce03bd2f9e8255648c0db306c09",
    );
}

/// Special modes (setuid, setgid, sticky, none at all), every kind of link, special
/// files, empty and nested directories.
fn modes_and_links_tree(base: &Path) -> PathBuf {
    let mut b = Builder::new(&base.join("modes"));
    b.file(b"setuid", 0o4755, b"#!/bin/sh\n")
        .file(b"setgid", 0o2711, b"g")
        .file(b"all-special", 0o7777, b"s")
        .file(b"nothing", 0o000, b"n")
        .dir(b"sticky", 0o1777)
        .dir(b"empty", 0o700)
        .dir(b"a/b/c/d/e", 0o755)
        .file(b"a/b/c/d/e/leaf", 0o644, b"deep\n")
        .dir(b"a/b/also-empty", 0o755)
        .link(b"to-file", b"setuid")
        .link(b"to-dir", b"a/b")
        .link(b"dangling", b"/nonexistent/target")
        .link(b"a/b/up", b"../..")
        .link(b"loop", b"loop")
        .fifo(b"fifo", 0o620)
        .socket(b"sock", 0o755);
    b.finish()
}

#[test]
fn compat_matches_the_reference_on_modes_links_and_special_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = modes_and_links_tree(dir.path());
    assert_golden(
        dir,
        &root,
        "3e00ba8820fdfdcd2c961559d4389e882b6482a543b6f3d9fbf1c86ed0bc7c52",
    );
}

/// Files around the read buffer's size and an empty file: content is streamed.
fn sizes_tree(base: &Path) -> PathBuf {
    let mut b = Builder::new(&base.join("sizes"));
    let big: Vec<u8> = (0..(600 * 1024 + 7u32))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let exact: Vec<u8> = (0..(256 * 1024u32)).map(|i| (i % 253) as u8).collect();
    b.file(b"big.bin", 0o644, &big)
        .file(b"exact.bin", 0o600, &exact)
        .file(b"empty", 0o644, b"");
    for i in 0..40u32 {
        let name = format!("many/f{i:03}.conf");
        b.dir(b"many", 0o755)
            .file(name.as_bytes(), 0o644, format!("k={i}\n").as_bytes());
    }
    b.finish()
}

#[test]
fn compat_matches_the_reference_on_large_and_many_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = sizes_tree(dir.path());
    assert_golden(
        dir,
        &root,
        "78d5a5f0148302a73b46c1225b58833b849d27a49432095d2531a01df05691b9",
    );
}

#[test]
fn compat_of_an_empty_directory_is_sha256_of_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = Builder::new(&dir.path().join("void")).finish();
    assert_golden(
        dir,
        &root,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    );
}

#[test]
fn a_root_that_is_a_file_or_a_link_is_a_single_leaf() {
    let dir = tempfile::tempdir().unwrap();
    let root = readme_tree(dir.path());
    // sha256("f:644:0:0:" + sha256("hi\n")) and sha256("o:777"), as the reference gives.
    assert_eq!(
        root_hash(&root.join("a"), Algorithm::Compat),
        "35f3c14c8ad1e1fcebd5793fe8096cd07a104a9c132c9f2d21c1d832febde11c"
    );
    assert_eq!(
        root_hash(&root.join("b"), Algorithm::Compat),
        "f28bc24a29e0fae11c20556176d5cd412c1cfc1db0677b4a0007dc0778a0cc3f"
    );
}

// --- properties of the scan ------------------------------------------------------------

#[test]
fn thread_count_does_not_change_any_hash() {
    let dir = tempfile::tempdir().unwrap();
    let root = sizes_tree(dir.path());
    for algorithm in [Algorithm::Compat, Algorithm::Native] {
        let one = scan(&root, &opts(algorithm, 1)).unwrap();
        for threads in [2, 3, 8] {
            let many = scan(&root, &opts(algorithm, threads)).unwrap();
            assert_eq!(many.tree, one.tree, "{algorithm} with {threads} threads");
        }
        assert_eq!(one.stats.files, 43);
        let progress = std::sync::Arc::new(ScanProgress::default());
        let counted = ScanOptions {
            progress: Some(progress.clone()),
            ..opts(algorithm, 3)
        };
        scan(&root, &counted).unwrap();
        assert_eq!(progress.snapshot(), (43, one.stats.bytes));
        assert_eq!(one.stats.dirs, 2);
        // 10 files of 4 bytes (`k=0\n`) and 30 of 5.
        assert_eq!(
            one.stats.bytes,
            600 * 1024 + 7 + 256 * 1024 + 10 * 4 + 30 * 5
        );
    }
}

#[test]
fn links_are_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let root = modes_and_links_tree(dir.path());
    let scanned = scan(&root, &opts(Algorithm::Native, 2)).unwrap();
    let tree = &scanned.tree;
    let kind = |p: &str| tree.root.get(Path::new(p)).map(|n| n.entry.kind());
    assert_eq!(kind("to-dir"), Some(EntryKind::Symlink));
    assert_eq!(kind("a/b/up"), Some(EntryKind::Symlink));
    assert_eq!(kind("loop"), Some(EntryKind::Symlink));
    // Nothing below a link: the tree has exactly what is under the root.
    assert!(tree.root.get(Path::new("to-dir/also-empty")).is_none());
    assert_eq!(scanned.stats.dirs, 9);
    // A root that is a link to a directory is a link, not the directory.
    let via_link = scan(&root.join("to-dir"), &opts(Algorithm::Native, 2)).unwrap();
    assert_eq!(via_link.tree.root.entry.kind(), EntryKind::Symlink);
}

#[test]
fn native_sees_a_retargeted_link_and_a_chmod_of_a_directory_that_compat_misses() {
    let dir = tempfile::tempdir().unwrap();
    let root = readme_tree(dir.path());
    let before_native = root_hash(&root, Algorithm::Native);
    let before_compat = root_hash(&root, Algorithm::Compat);

    fs::remove_file(root.join("b")).unwrap();
    symlink("d", root.join("b")).unwrap();
    assert_eq!(root_hash(&root, Algorithm::Compat), before_compat);
    let retargeted = root_hash(&root, Algorithm::Native);
    assert_ne!(retargeted, before_native);

    fs::set_permissions(root.join("d"), fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(root_hash(&root, Algorithm::Compat), before_compat);
    assert_ne!(root_hash(&root, Algorithm::Native), retargeted);
}

#[test]
fn a_missing_root_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let err = scan(&missing, &opts(Algorithm::Native, 1)).unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

// --- declared vs observed ---------------------------------------------------------------

/// The declaration of `readme_tree`, as the Tree provider would build it.
fn readme_declared(algorithm: Algorithm) -> Node {
    let mut root = Node::dir(0o755, 0, 0);
    for (name, child) in [
        ("a", Node::file_with_bytes(algorithm, 0o644, 0, 0, b"hi\n")),
        ("b", Node::symlink("a")),
        ("d", Node::dir(0o755, 0, 0)),
        ("e", Node::dir(0o755, 0, 0)),
    ] {
        assert!(root.insert(name, child).is_ok());
    }
    root
}

#[test]
fn an_undrifted_host_proves_it_with_one_equal_root_hash() {
    let dir = tempfile::tempdir().unwrap();
    let root = readme_tree(dir.path());
    for algorithm in [Algorithm::Compat, Algorithm::Native] {
        let declared = readme_declared(algorithm);
        let observed = scan(&root, &opts(algorithm, 2)).unwrap();
        assert_eq!(
            fingerprint_declared(&declared, algorithm).unwrap(),
            observed.root_hash(),
            "{algorithm}"
        );
        let declared = fingerprint_tree(declared, algorithm).unwrap();
        assert_eq!(compare(&declared, &observed.tree).unwrap(), vec![]);
    }
}

#[test]
fn each_host_change_is_named_once_in_the_right_category() {
    let dir = tempfile::tempdir().unwrap();
    let root = readme_tree(dir.path());
    let mut declared = readme_declared(Algorithm::Native);
    let mut sub = Node::dir(0o755, 0, 0);
    assert!(
        sub.insert(
            "x.conf",
            Node::file_with_bytes(Algorithm::Native, 0o644, 0, 0, b"x\n")
        )
        .is_ok()
    );
    assert!(declared.insert("sub", sub).is_ok());
    let declared = fingerprint_tree(declared, Algorithm::Native).unwrap();

    // Edit keeping the size, chmod+chown, a file replaced by a link, an editor backup.
    fs::write(root.join("a"), b"ho\n").unwrap();
    std::os::unix::fs::lchown(root.join("d"), Some(1000), None).unwrap();
    fs::set_permissions(root.join("d"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::write(root.join("a~"), b"hi\n").unwrap();
    fs::remove_dir(root.join("e")).unwrap();
    symlink("a", root.join("e")).unwrap();

    let observed = scan(&root, &opts(Algorithm::Native, 2)).unwrap();
    let diffs = compare(&declared, &observed.tree).unwrap();
    assert_eq!(
        diffs,
        vec![
            TreeDifference::Changed {
                path: "a".into(),
                fields: vec!["content"]
            },
            TreeDifference::Unmanaged { path: "a~".into() },
            TreeDifference::Changed {
                path: "d".into(),
                fields: vec!["mode", "owner"]
            },
            TreeDifference::TypeChanged {
                path: "e".into(),
                declared: EntryKind::Directory,
                found: EntryKind::Symlink
            },
            TreeDifference::Missing { path: "sub".into() },
        ]
    );
}

#[test]
fn excluded_entries_are_not_part_of_the_fingerprint_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let root = readme_tree(dir.path());
    let clean = root_hash(&root, Algorithm::Native);
    fs::write(root.join("a.swp"), b"junk").unwrap();
    fs::create_dir(root.join("cache")).unwrap();
    fs::write(root.join("cache/blob"), b"junk").unwrap();
    fs::write(root.join("d/.lock"), b"").unwrap();
    assert_ne!(root_hash(&root, Algorithm::Native), clean);

    let rules = Exclusions::new(["*.swp", "/cache/", ".lock"]).unwrap();
    let with = |algorithm| ScanOptions {
        algorithm,
        exclude: Some(rules.clone()),
        threads: 2,
        progress: None,
    };
    let scanned = scan(&root, &with(Algorithm::Native)).unwrap();
    assert_eq!(scanned.root_hash().to_string(), clean);
    assert_eq!(scanned.stats.excluded, 3);
    let root_only = scan_root(&root, &with(Algorithm::Native)).unwrap();
    assert_eq!(root_only.hash.to_string(), clean);
    assert_eq!(root_only.stats, scanned.stats);
    assert_eq!(
        scan(&root, &with(Algorithm::Compat))
            .unwrap()
            .root_hash()
            .to_string(),
        "0af960f6499974f32010cb41f68bd4665f5a4ce3e29fc528d3cb30cf3714c039"
    );

    // The same rules prune a declaration identically.
    let mut declared = readme_declared(Algorithm::Native);
    assert!(declared.insert("a.swp", Node::symlink("x")).is_ok());
    declared.prune(&rules);
    assert_eq!(
        fingerprint_declared(&declared, Algorithm::Native)
            .unwrap()
            .to_string(),
        clean
    );
}
