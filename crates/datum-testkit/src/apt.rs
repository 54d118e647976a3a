//! Hermetic Debian packages for tests inside the test bed.
//!
//! The test bed has no network (`--private-network`), so a Package test
//! cannot reach a Debian mirror, and it should not: a test that depends on a
//! mirror's contents fails when the mirror changes. Instead a test builds tiny
//! packages with `dpkg-deb`, publishes them as a flat repository under
//! `/srv/datum-testkit/NAME`, and points apt at it alone. Everything here runs
//! only inside the test bed (each helper checks [`crate::inside`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::testbed::within;

/// A package to build: its name, version, optional `Depends:` and the files
/// it installs (absolute paths inside the test bed).
#[derive(Debug, Clone, Default)]
pub struct DebPackage {
    pub name: String,
    pub version: String,
    pub depends: Option<String>,
    pub files: Vec<(PathBuf, Vec<u8>)>,
}

impl DebPackage {
    pub fn new(name: &str, version: &str) -> Self {
        DebPackage {
            name: name.to_owned(),
            version: version.to_owned(),
            ..DebPackage::default()
        }
    }

    pub fn depends(mut self, depends: &str) -> Self {
        self.depends = Some(depends.to_owned());
        self
    }

    pub fn file(mut self, path: &str, contents: impl Into<Vec<u8>>) -> Self {
        self.files.push((PathBuf::from(path), contents.into()));
        self
    }

    /// A maintainer script (`postinst`, `prerm`, ...): a shell script dpkg
    /// runs at that step, made executable as dpkg-deb requires.
    pub fn script(self, step: &str, body: &str) -> Self {
        self.file(
            &format!("/DEBIAN/{step}"),
            format!("#!/bin/sh\nset -e\n{body}\n"),
        )
    }

    /// The file name apt expects (`name_version_all.deb`).
    pub fn deb_name(&self) -> String {
        format!("{}_{}_all.deb", self.name, self.version)
    }
}

/// A flat repository apt reads from, removed (list and files) when dropped.
/// Packages installed from it are not removed: the test that installed them
/// decides (and should purge them).
#[derive(Debug)]
pub struct LocalRepo {
    dir: PathBuf,
    list: PathBuf,
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Builds one package into `out_dir` and returns the `.deb`'s path.
fn build(package: &DebPackage, out_dir: &Path) -> PathBuf {
    let tree = out_dir.join(format!("build-{}-{}", package.name, package.version));
    let _ = std::fs::remove_dir_all(&tree);
    let mut control = format!(
        "Package: {}\nVersion: {}\nArchitecture: all\nMaintainer: Datum tests <tests@datum.invalid>\nDescription: Datum test package {}\n",
        package.name, package.version, package.name
    );
    if let Some(depends) = &package.depends {
        let _ = writeln!(control, "Depends: {depends}");
    }
    within::write(tree.join("DEBIAN/control"), control);
    for (path, contents) in &package.files {
        let at = tree.join(path.strip_prefix("/").unwrap_or(path));
        within::write(&at, contents);
        if path.parent() == Some(Path::new("/DEBIAN")) && path != Path::new("/DEBIAN/control") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o755))
                .unwrap_or_else(|e| panic!("chmod {}: {e}", at.display()));
        }
    }
    let deb = out_dir.join(package.deb_name());
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&tree)
        .arg(&deb));
    std::fs::remove_dir_all(&tree).unwrap_or_else(|e| panic!("remove {}: {e}", tree.display()));
    deb
}

impl LocalRepo {
    /// Builds `packages`, publishes them as the repository `name` and runs
    /// `apt-get update` for that repository only (the mirrors in
    /// sources.list are unreachable from the test bed and are left out).
    pub fn publish(name: &str, packages: &[DebPackage]) -> Self {
        assert!(crate::inside(), "LocalRepo runs only inside the test bed");
        let dir = Path::new("/srv/datum-testkit").join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));

        let mut index = String::new();
        for package in packages {
            let deb = build(package, &dir);
            // dpkg-deb --field prints the control stanza; apt also needs where
            // the file is, its size and a hash.
            let stanza = run(Command::new("dpkg-deb").args(["--field"]).arg(&deb));
            let size = std::fs::metadata(&deb)
                .unwrap_or_else(|e| panic!("stat {}: {e}", deb.display()))
                .len();
            let sha = run(Command::new("sha256sum").arg(&deb));
            let sha = sha.split_whitespace().next().unwrap_or_default();
            let _ = write!(
                index,
                "{}\nFilename: ./{}\nSize: {size}\nSHA256: {sha}\n\n",
                stanza.trim_end(),
                package.deb_name()
            );
        }
        within::write(dir.join("Packages"), index);

        let list = PathBuf::from(format!("/etc/apt/sources.list.d/datum-testkit-{name}.list"));
        within::write(
            &list,
            format!("deb [trusted=yes] file:{} ./\n", dir.display()),
        );
        let repo = LocalRepo { dir, list };
        repo.update();
        repo
    }

    /// `apt-get update` for this repository alone.
    pub fn update(&self) {
        let list = self.list.display().to_string();
        run(Command::new("apt-get")
            .args(["update", "-qq"])
            .arg(format!("-o=Dir::Etc::SourceList={list}"))
            .args(["-o=Dir::Etc::SourceParts=-", "-o=APT::Get::List-Cleanup=0"]));
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for LocalRepo {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.list);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deb_names_follow_debian_conventions() {
        let p = DebPackage::new("datum-dummy", "1.2-1").depends("coreutils");
        assert_eq!(p.deb_name(), "datum-dummy_1.2-1_all.deb");
        assert_eq!(p.depends.as_deref(), Some("coreutils"));
    }
}
