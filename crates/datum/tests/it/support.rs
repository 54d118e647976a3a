//! Test helpers: temporary repositories and roots, and running the binary.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use tempfile::TempDir;

/// The example repository shipped in `examples/`.
pub fn examples_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    assert!(
        dir.join("datum.yaml").is_file(),
        "examples/ missing at {}",
        dir.display()
    );
    dir
}

/// A repository written file by file, plus an empty root to apply it to.
pub struct Sandbox {
    pub dir: TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(dir.path().join("repo")).expect("repo dir");
        fs::create_dir_all(dir.path().join("root")).expect("root dir");
        let s = Self { dir };
        s.write(
            "host.yaml",
            "name: test-host\nlabels:\n  role: web\n  env: test\n",
        );
        s
    }

    pub fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// Writes a file relative to the sandbox (e.g. `repo/base/x.yaml`).
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(&p, text).expect("write");
        p
    }

    /// An administrator's validator definition (TOML) in the root's
    /// `/etc/datum/validators.d/local.toml`, root's and writable only by it,
    /// with every folder above it searchable: what Datum requires of a
    /// definition it loads. Returns the file. (Root only: the files must be
    /// root's.)
    pub fn with_admin_validator(&self, definition: &str) -> PathBuf {
        let dir = self.live("/etc/datum/validators.d");
        fs::create_dir_all(&dir).unwrap();
        for p in [
            self.dir.path(),
            &self.root(),
            &self.live("/etc"),
            &self.live("/etc/datum"),
            &dir,
        ] {
            fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let file = dir.join("local.toml");
        fs::write(&file, definition).unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        file
    }

    /// A repository with one base layer holding `manifest` in `base/main.yaml`.
    pub fn with_base(manifest: &str) -> Self {
        let s = Self::new();
        s.write(
            "repo/datum.yaml",
            "datum: v1alpha1\nlayers:\n  - name: base\n    path: base\n    match: {}\n",
        );
        s.write("repo/base/main.yaml", manifest);
        s
    }

    /// A path under the root (`/etc/motd` -> `<root>/etc/motd`).
    pub fn live(&self, declared: &str) -> PathBuf {
        self.root().join(declared.trim_start_matches('/'))
    }

    pub fn datum(&self, args: &[&str]) -> Output {
        self.datum_repo(&self.repo(), args)
    }

    pub fn datum_repo(&self, repo: &Path, args: &[&str]) -> Output {
        Command::cargo_bin("datum")
            .expect("datum binary")
            .arg("--repo")
            .arg(repo)
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

    /// Every file under the root (relative paths), for "nothing written" checks.
    pub fn files_under_root(&self) -> Vec<String> {
        let mut out = Vec::new();
        walk(&self.root(), &self.root(), &mut out);
        out.sort();
        out
    }
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        out.push(p.strip_prefix(base).expect("prefix").display().to_string());
        if e.file_type().expect("type").is_dir() {
            walk(base, &p, out);
        }
    }
}

pub fn mode_of(p: &Path) -> u32 {
    fs::symlink_metadata(p).expect("stat").permissions().mode() & 0o7777
}

pub use datum_testkit::run::{assert_exit, code, stderr, stdout};

/// `text` as a regular expression matching itself (for insta filters).
pub fn regex_escape(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '/' || c == '_' || c == '-' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}
