//! Package-owned configuration files that no longer match the package.
//!
//! dpkg records, for every conffile, the MD5 of the version the package
//! shipped (the `Conffiles:` field of the status database), and for every
//! other file the package installed, an MD5 in `/var/lib/dpkg/info/
//! <package>.md5sums`. A file whose current MD5 differs was changed after
//! the package put it there: by hand, by another tool, or (for a file Datum
//! declares) by a package upgrade that replaced Datum's content with the
//! packaged default. This module reports those differences, like `dpkg
//! --verify` restricted to configuration, and reads everything under the
//! host's root.
//!
//! "Configuration" means the conffiles, plus files a package installed under
//! `/etc` without marking them as conffiles (some do). It must not decide
//! which differences are drift for a report: the caller drops the paths a
//! File resource declares (those are reported once, as File drift).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use datum_host::{FileKind, Host};
use md5::{Digest, Md5};

use super::status::{self, PackageRecord, StatusError};

/// One package-owned configuration file that differs from what the package
/// shipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConffileDrift {
    /// The package that owns it (`name`, or `name:arch` for multi-arch).
    pub package: String,
    /// The declared path (not under the root).
    pub path: PathBuf,
    /// The MD5 of the packaged version.
    pub expected_md5: String,
    /// The MD5 found; `None` when the file is missing or is not a regular
    /// file (see `found`).
    pub actual_md5: Option<String>,
    /// What is at the path when it is not a regular file (`symlink`,
    /// `directory`); `None` for a regular or a missing file.
    pub found: Option<&'static str>,
    /// Whether dpkg tracks it as a conffile (`false`: an ordinary packaged
    /// file under `/etc`).
    pub conffile: bool,
}

impl ConffileDrift {
    /// Deleted by somebody. dpkg respects that choice at upgrades (it does
    /// not restore a deleted conffile), so a report may treat it apart.
    pub fn is_missing(&self) -> bool {
        self.actual_md5.is_none() && self.found.is_none()
    }
}

/// Configuration files of installed packages whose content differs from the
/// packaged version, sorted by package then path. `packages`: only these
/// (`name` or `name:arch`); `None` for every installed package.
///
/// Obsolete conffiles (no longer shipped), conffiles dpkg has not finished
/// installing (`newconffile`) and packages whose files are not on the system
/// (removed, config-files only) are skipped.
pub fn changed_conffiles(
    host: &Host,
    packages: Option<&[String]>,
) -> Result<Vec<ConffileDrift>, StatusError> {
    let db = status::load(host)?;
    let mut records: Vec<&PackageRecord> = match packages {
        Some(names) => names.iter().filter_map(|n| db.get(n)).collect(),
        None => db.records().collect(),
    };
    records.retain(|r| !r.state.is_absent());
    records.sort_by(|a, b| (&a.name, &a.architecture).cmp(&(&b.name, &b.architecture)));
    records.dedup_by(|a, b| a.name == b.name && a.architecture == b.architecture);

    let mut drift = Vec::new();
    for record in records {
        let package = record.name.clone();
        let mut seen: HashSet<PathBuf> = HashSet::new();
        for conffile in &record.conffiles {
            seen.insert(conffile.path.clone());
            if conffile.obsolete || conffile.md5 == "newconffile" {
                continue;
            }
            if let Some(found) = compare(host, &conffile.path, &conffile.md5)? {
                drift.push(ConffileDrift {
                    package: package.clone(),
                    path: conffile.path.clone(),
                    expected_md5: conffile.md5.clone(),
                    actual_md5: found.0,
                    found: found.1,
                    conffile: true,
                });
            }
        }
        for (path, md5) in packaged_etc_files(host, record)? {
            if seen.contains(&path) {
                continue;
            }
            if let Some(found) = compare(host, &path, &md5)? {
                drift.push(ConffileDrift {
                    package: package.clone(),
                    path,
                    expected_md5: md5,
                    actual_md5: found.0,
                    found: found.1,
                    conffile: false,
                });
            }
        }
    }
    drift.sort_by(|a, b| (&a.package, &a.path).cmp(&(&b.package, &b.path)));
    Ok(drift)
}

/// Multi-arch records keep their architecture in the md5sums file name.
fn db_names_with_arch(record: &PackageRecord) -> Vec<String> {
    let mut names = vec![record.name.clone()];
    if let Some(arch) = &record.architecture {
        names.push(format!("{}:{arch}", record.name));
    }
    names
}

/// `None` when the file matches; otherwise what was found (MD5 or the kind
/// of entry in the way).
#[expect(
    clippy::type_complexity,
    reason = "a private pair of the two ConffileDrift fields it fills"
)]
fn compare(
    host: &Host,
    declared: &Path,
    expected: &str,
) -> Result<Option<(Option<String>, Option<&'static str>)>, StatusError> {
    let Some(at) = host.try_locate(declared)? else {
        return Ok(Some((None, None)));
    };
    let Some(stat) = at.lstat()? else {
        return Ok(Some((None, None)));
    };
    if stat.kind != FileKind::File {
        return Ok(Some((None, Some(stat.kind.word()))));
    }
    // Streamed through a buffer: a conffile someone else owns (a managed
    // File's `owner`) may have been made huge, and is never held whole.
    let (mut file, _) = at.open_file()?;
    let mut md5 = Md5::new();
    datum_host::fs::read_through(&mut file, at.path(), |chunk| md5.update(chunk))?;
    let actual = hex(&md5.finalize());
    if actual.eq_ignore_ascii_case(expected) {
        Ok(None)
    } else {
        Ok(Some((Some(actual), None)))
    }
}

/// Files under `/etc` in the package's md5sums list, with their MD5s. A
/// package without the list (some older or locally built ones) has none.
fn packaged_etc_files(
    host: &Host,
    record: &PackageRecord,
) -> Result<Vec<(PathBuf, String)>, StatusError> {
    for name in db_names_with_arch(record).iter().rev() {
        let declared = Path::new(status::ADMIN_DIR)
            .join("info")
            .join(format!("{name}.md5sums"));
        let Some(bytes) = host.read(&declared)? else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes).into_owned();
        return Ok(parse_md5sums(&text)
            .into_iter()
            .filter(|(path, _)| path.starts_with("/etc/"))
            .collect());
    }
    Ok(Vec::new())
}

/// `md5  relative/path` lines (two spaces, as md5sum writes them).
pub fn parse_md5sums(text: &str) -> Vec<(PathBuf, String)> {
    text.lines()
        .filter_map(|line| {
            let (md5, path) = line.split_once(' ')?;
            let path = path.trim_start_matches([' ', '*']);
            if md5.len() != 32 || path.is_empty() {
                return None;
            }
            Some((
                Path::new("/").join(path.trim_start_matches('/')),
                md5.to_ascii_lowercase(),
            ))
        })
        .collect()
}

/// A check's extra findings for the declared, installed packages: their
/// configuration files (dpkg's conffiles, and files a package put under
/// `/etc`) that differ from the packaged version, one each. Whether a File or
/// Tree declares the path is the check's business (it leaves those out).
impl crate::provider::ExtraFindings for super::PackageProvider {
    fn findings(
        &self,
        host: &Host,
        resources: &[&datum_core::Resource],
    ) -> Result<Vec<crate::provider::ExtraFinding>, crate::ProviderError> {
        use crate::provider::{ExtraDrift, ExtraFinding};
        let mut owners: std::collections::BTreeMap<String, &datum_core::Resource> =
            std::collections::BTreeMap::new();
        for r in resources {
            // An invalid declaration already failed its own observation.
            if let Ok(spec) = super::spec(r)
                && spec.state != super::Wanted::Absent
            {
                owners.insert(spec.bare_name().to_owned(), r);
            }
        }
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<String> = owners.keys().cloned().collect();
        let drift = changed_conffiles(host, Some(&names))
            .map_err(|e| crate::ProviderError::Kind(crate::KindError::new(e)))?;
        let md5 = |sum: &str| format!("md5:{}", sum.get(..12).unwrap_or(sum));
        Ok(drift
            .into_iter()
            .filter_map(|d| {
                let owner = owners.get(&d.package)?;
                let drift = match (&d.actual_md5, d.found) {
                    (_, Some(found)) => ExtraDrift::TypeChanged {
                        found: found.to_owned(),
                    },
                    (None, None) => ExtraDrift::Deleted,
                    (Some(actual), None) => ExtraDrift::Changed {
                        field: "content",
                        expected: format!("{} (packaged)", md5(&d.expected_md5)),
                        found: md5(actual),
                    },
                };
                Some(ExtraFinding {
                    owner: owner.id.clone(),
                    path: d.path,
                    drift,
                })
            })
            .collect())
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md5_hex(bytes: &[u8]) -> String {
        hex(&Md5::digest(bytes))
    }

    /// A root with a status database and files, as dpkg would leave them.
    fn root_with(status: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let real = root.path().join(path.trim_start_matches('/'));
            std::fs::create_dir_all(real.parent().unwrap()).unwrap();
            std::fs::write(real, text).unwrap();
        }
        let dpkg = root.path().join("var/lib/dpkg");
        std::fs::create_dir_all(dpkg.join("info")).unwrap();
        std::fs::write(dpkg.join("status"), status).unwrap();
        root
    }

    #[test]
    fn md5_of_known_text() {
        assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
    }

    #[test]
    fn changed_missing_and_replaced_conffiles_are_reported() {
        let shipped = "listen 80;\n";
        let status = format!(
            "Package: demo\nStatus: install ok installed\nVersion: 1.0\nArchitecture: all\nConffiles:\n /etc/demo/a.conf {m}\n /etc/demo/b.conf {m}\n /etc/demo/gone.conf {m}\n /etc/demo/dir.conf {m}\n /etc/demo/old.conf {m} obsolete\n /etc/demo/new.conf newconffile\n\nPackage: removed\nStatus: deinstall ok config-files\nVersion: 1.0\nConffiles:\n /etc/removed.conf {m}\n",
            m = md5_hex(shipped.as_bytes())
        );
        let root = root_with(
            &status,
            &[
                ("/etc/demo/a.conf", shipped),
                ("/etc/demo/b.conf", "listen 8080;\n"),
                ("/etc/demo/dir.conf/x", ""),
                ("/etc/demo/old.conf", "anything\n"),
                ("/etc/removed.conf", "changed\n"),
            ],
        );
        let host = Host::with_name(root.path(), "h");
        let drift = changed_conffiles(&host, None).unwrap();
        let paths: Vec<&Path> = drift.iter().map(|d| d.path.as_path()).collect();
        assert_eq!(
            paths,
            [
                Path::new("/etc/demo/b.conf"),
                Path::new("/etc/demo/dir.conf"),
                Path::new("/etc/demo/gone.conf")
            ]
        );
        assert_eq!(drift[0].package, "demo");
        assert_eq!(drift[0].expected_md5, md5_hex(shipped.as_bytes()));
        assert_eq!(
            drift[0].actual_md5.as_deref(),
            Some(md5_hex(b"listen 8080;\n").as_str())
        );
        assert!(drift[0].conffile && !drift[0].is_missing());
        assert_eq!(drift[1].found, Some("directory"));
        assert!(!drift[1].is_missing());
        assert!(drift[2].is_missing());

        // Restricted to a package, and to one dpkg does not know.
        assert_eq!(
            changed_conffiles(&host, Some(&["demo".to_owned()]))
                .unwrap()
                .len(),
            3
        );
        assert!(
            changed_conffiles(&host, Some(&["nosuch".to_owned(), "removed".to_owned()]))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn packaged_files_under_etc_count_and_the_rest_do_not() {
        let status =
            "Package: tool\nStatus: install ok installed\nVersion: 1\nArchitecture: amd64\n";
        let root = root_with(
            status,
            &[
                ("/etc/tool/defaults", "edited\n"),
                ("/usr/share/tool/data", "edited\n"),
                ("/etc/tool/same", "same\n"),
            ],
        );
        let md5sums = format!(
            "{}  etc/tool/defaults\n{}  usr/share/tool/data\n{}  etc/tool/same\nnot a line\n",
            md5_hex(b"original\n"),
            md5_hex(b"original\n"),
            md5_hex(b"same\n")
        );
        // Multi-arch packages keep the architecture in the file name.
        std::fs::write(
            root.path().join("var/lib/dpkg/info/tool:amd64.md5sums"),
            md5sums,
        )
        .unwrap();
        let drift = changed_conffiles(&Host::with_name(root.path(), "h"), None).unwrap();
        assert_eq!(drift.len(), 1, "{drift:?}");
        assert_eq!(drift[0].path, Path::new("/etc/tool/defaults"));
        assert!(!drift[0].conffile);
    }

    #[test]
    fn md5sums_lines_parse() {
        let parsed = parse_md5sums(
            "d41d8cd98f00b204e9800998ecf8427e  usr/bin/x\nD41D8CD98F00B204E9800998ECF8427E  etc/a b\nshort  x\n",
        );
        assert_eq!(
            parsed,
            [
                (
                    PathBuf::from("/usr/bin/x"),
                    "d41d8cd98f00b204e9800998ecf8427e".to_owned()
                ),
                (
                    PathBuf::from("/etc/a b"),
                    "d41d8cd98f00b204e9800998ecf8427e".to_owned()
                )
            ]
        );
    }
}
