//! The dpkg status database (`<root>/var/lib/dpkg/status`), read directly.
//!
//! This module owns parsing the status file's deb822 stanzas into
//! [`PackageRecord`]s and caching the result for the pass: a host with
//! several hundred packages pays for one parse, not one `dpkg -s` per
//! resource (the cost model in the drift document says the parse dominates).
//! The cache lives in the [`Host`]'s per-pass store and is keyed by the
//! status file's identity (device, inode, size, mtime, ctime): dpkg replaces
//! the file by renaming a new one over it, so a transaction made during the
//! pass is seen by the next lookup, and nothing else is re-read.
//!
//! It must not run dpkg or apt, and it must not decide what a state means for
//! a resource (the provider does).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use datum_host::{Host, HostError};

/// Where dpkg keeps its database, relative to the root.
pub const ADMIN_DIR: &str = "/var/lib/dpkg";
/// The status file, relative to the root.
pub const STATUS_FILE: &str = "/var/lib/dpkg/status";
/// dpkg's journal: while a run of dpkg is unfinished (killed in a
/// maintainer script, a power cut), files named by digits alone.
pub const UPDATES_DIR: &str = "/var/lib/dpkg/updates";

/// The third word of `Status:`: how far dpkg got with the package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DpkgState {
    NotInstalled,
    ConfigFiles,
    HalfInstalled,
    Unpacked,
    HalfConfigured,
    TriggersAwaited,
    TriggersPending,
    Installed,
}

impl DpkgState {
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "not-installed" => DpkgState::NotInstalled,
            "config-files" => DpkgState::ConfigFiles,
            "half-installed" => DpkgState::HalfInstalled,
            "unpacked" => DpkgState::Unpacked,
            "half-configured" => DpkgState::HalfConfigured,
            "triggers-awaited" => DpkgState::TriggersAwaited,
            "triggers-pending" => DpkgState::TriggersPending,
            "installed" => DpkgState::Installed,
            _ => return None,
        })
    }

    pub fn word(self) -> &'static str {
        match self {
            DpkgState::NotInstalled => "not-installed",
            DpkgState::ConfigFiles => "config-files",
            DpkgState::HalfInstalled => "half-installed",
            DpkgState::Unpacked => "unpacked",
            DpkgState::HalfConfigured => "half-configured",
            DpkgState::TriggersAwaited => "triggers-awaited",
            DpkgState::TriggersPending => "triggers-pending",
            DpkgState::Installed => "installed",
        }
    }

    /// The package's files are not on the system (at most its conffiles).
    pub fn is_absent(self) -> bool {
        matches!(self, DpkgState::NotInstalled | DpkgState::ConfigFiles)
    }

    /// dpkg stopped part-way (or has work left): the database is not in a
    /// state a pass may call converged.
    pub fn is_unfinished(self) -> bool {
        !matches!(
            self,
            DpkgState::NotInstalled | DpkgState::ConfigFiles | DpkgState::Installed
        )
    }
}

/// One `Conffiles:` line: a configuration file dpkg tracks for a package,
/// with the MD5 of the version the package shipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conffile {
    /// Absolute path on the managed system (not under the root).
    pub path: PathBuf,
    /// Lower-case hex MD5, or `newconffile` while dpkg has not finished
    /// installing it.
    pub md5: String,
    /// No longer shipped by the package; left on disk for the administrator.
    pub obsolete: bool,
    /// Removed by dpkg at the next upgrade (`remove-on-upgrade`).
    pub remove_on_upgrade: bool,
}

/// One package's stanza, reduced to what Datum reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageRecord {
    pub name: String,
    pub architecture: Option<String>,
    pub version: Option<String>,
    /// First word of `Status:`: `unknown`, `install`, `hold`, `deinstall`, `purge`.
    pub want: String,
    /// Second word: `ok`, or `reinstreq` (dpkg needs it reinstalled).
    pub flag: String,
    pub state: DpkgState,
    pub conffiles: Vec<Conffile>,
}

impl PackageRecord {
    /// The selection says hold (`apt-mark hold`, `dpkg --set-selections`).
    pub fn is_held(&self) -> bool {
        self.want == "hold"
    }

    /// `name:arch` for messages and dpkg arguments.
    pub fn qualified(&self) -> String {
        match &self.architecture {
            Some(arch) if arch != "all" => format!("{}:{arch}", self.name),
            _ => self.name.clone(),
        }
    }
}

/// A stanza the parser could not use, with its line number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}:{line}: {message}", path = path.display())]
pub struct StatusParseError {
    pub path: PathBuf,
    pub line: usize,
    pub message: String,
}

/// The parsed status database.
#[derive(Debug, Clone, Default)]
pub struct StatusDb {
    /// Records by package name; several for a name installed for more than
    /// one architecture (multi-arch `Multi-Arch: same` libraries).
    by_name: HashMap<String, Vec<PackageRecord>>,
    count: usize,
}

impl StatusDb {
    /// Parses the whole text of a status file. `path` only names the file in
    /// errors. A stanza without `Package:` or with a `Status:` dpkg would not
    /// write is an error: guessing would report a package as absent.
    pub fn parse(text: &str, path: &Path) -> Result<Self, StatusParseError> {
        let mut db = StatusDb::default();
        let mut stanza = Stanza::default();
        let mut current: Option<Field> = None;
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            if line.trim().is_empty() {
                db.finish(&mut stanza, path)?;
                current = None;
                continue;
            }
            if line.starts_with([' ', '\t']) {
                // A continuation line belongs to the field above it. Only
                // Conffiles is read line by line; the others Datum keeps are
                // single-line fields, so their continuations are ignored.
                if current == Some(Field::Conffiles) {
                    stanza.conffile_lines.push((number, line.trim().to_owned()));
                } else if current.is_none() {
                    return Err(StatusParseError {
                        path: path.to_path_buf(),
                        line: number,
                        message: "continuation line without a field above it".to_owned(),
                    });
                }
                continue;
            }
            let Some((name, value)) = line.split_once(':') else {
                return Err(StatusParseError {
                    path: path.to_path_buf(),
                    line: number,
                    message: format!("expected `Field: value`, found `{}`", clip(line)),
                });
            };
            if stanza.start == 0 {
                stanza.start = number;
            }
            let value = value.trim();
            current = Some(match name {
                "Package" => {
                    stanza.package = Some(value.to_owned());
                    Field::Kept
                }
                "Status" => {
                    stanza.status = Some((number, value.to_owned()));
                    Field::Kept
                }
                "Version" => {
                    stanza.version = Some(value.to_owned());
                    Field::Kept
                }
                "Architecture" => {
                    stanza.architecture = Some(value.to_owned());
                    Field::Kept
                }
                "Conffiles" => {
                    if !value.is_empty() {
                        stanza.conffile_lines.push((number, value.to_owned()));
                    }
                    Field::Conffiles
                }
                _ => Field::Other,
            });
        }
        db.finish(&mut stanza, path)?;
        Ok(db)
    }

    fn finish(&mut self, stanza: &mut Stanza, path: &Path) -> Result<(), StatusParseError> {
        let taken = std::mem::take(stanza);
        if taken.start == 0 {
            return Ok(());
        }
        let error = |line: usize, message: String| StatusParseError {
            path: path.to_path_buf(),
            line,
            message,
        };
        let name = taken
            .package
            .ok_or_else(|| error(taken.start, "stanza without a Package field".to_owned()))?;
        let (status_line, status) = taken
            .status
            .ok_or_else(|| error(taken.start, format!("package {name} has no Status field")))?;
        let words: Vec<&str> = status.split_whitespace().collect();
        let [want, flag, state] = words[..] else {
            return Err(error(
                status_line,
                format!("package {name}: Status `{status}` is not `want flag state`"),
            ));
        };
        let state = DpkgState::parse(state).ok_or_else(|| {
            error(
                status_line,
                format!("package {name}: unknown package state `{state}`"),
            )
        })?;
        let mut conffiles = Vec::with_capacity(taken.conffile_lines.len());
        for (line, text) in taken.conffile_lines {
            conffiles.push(parse_conffile(&text).ok_or_else(|| {
                error(
                    line,
                    format!(
                        "package {name}: conffile line `{}` is not `path md5`",
                        clip(&text)
                    ),
                )
            })?);
        }
        let record = PackageRecord {
            name: name.clone(),
            architecture: taken.architecture,
            version: taken.version,
            want: want.to_owned(),
            flag: flag.to_owned(),
            state,
            conffiles,
        };
        self.by_name.entry(name).or_default().push(record);
        self.count += 1;
        Ok(())
    }

    /// Number of stanzas (packages dpkg knows, in any state).
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The record for a declared package name: `name` or `name:arch`.
    ///
    /// Without an architecture, a name with several records (multi-arch)
    /// resolves to the one whose files are on the system, preferring
    /// `installed`; so `libc6` means the installed libc6 whatever its
    /// architecture.
    ///
    /// With one, the record of that architecture; but the native one is
    /// spelt three ways, as apt reads them: its name (`amd64`, dpkg's own
    /// architecture), `native`, and `all` (`apt-get install bash:all`
    /// installs bash:amd64); and an `Architecture: all` package is one of
    /// the native architecture's (`apt-get install adduser:amd64` is
    /// adduser, whose dpkg record says `all`, and which `dpkg -s
    /// adduser:amd64` does not find). So any of these finds a record of the
    /// native architecture or of `all`, preferring `installed` likewise.
    pub fn get(&self, declared: &str) -> Option<&PackageRecord> {
        let (name, arch) = match declared.split_once(':') {
            Some((name, arch)) => (name, Some(arch)),
            None => (declared, None),
        };
        let records = self.by_name.get(name)?;
        let on_system =
            |r: &&PackageRecord| (r.state == DpkgState::Installed, !r.state.is_absent());
        match arch {
            Some(arch) if self.is_native(arch) => records
                .iter()
                .filter(|r| r.architecture.as_deref().is_some_and(|a| self.is_native(a)))
                .max_by_key(on_system),
            Some(arch) => records
                .iter()
                .find(|r| r.architecture.as_deref() == Some(arch)),
            None => records.iter().max_by_key(on_system),
        }
    }

    /// The native architecture: dpkg's own (the architecture of its
    /// record), `None` when the database has no record of dpkg.
    pub fn native(&self) -> Option<&str> {
        self.by_name
            .get("dpkg")?
            .iter()
            .find_map(|r| r.architecture.as_deref())
    }

    /// Whether an architecture qualifier names the native architecture's
    /// packages for apt: `all`, `native`, or the native one's name.
    fn is_native(&self, arch: &str) -> bool {
        arch == "all" || arch == "native" || self.native() == Some(arch)
    }

    /// Every record, in no particular order.
    pub fn records(&self) -> impl Iterator<Item = &PackageRecord> {
        self.by_name.values().flatten()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// A field kept from this stanza (single-line).
    Kept,
    Conffiles,
    Other,
}

#[derive(Debug, Default)]
struct Stanza {
    /// Line of the first field; 0 while the stanza is empty.
    start: usize,
    package: Option<String>,
    status: Option<(usize, String)>,
    version: Option<String>,
    architecture: Option<String>,
    conffile_lines: Vec<(usize, String)>,
}

/// One `Conffiles:` entry: ` /etc/x.conf 0123...abcd [obsolete] [remove-on-upgrade]`.
/// Read from the right, because the flags and the hash are single words and
/// the path is everything before them.
fn parse_conffile(text: &str) -> Option<Conffile> {
    let mut rest = text.trim();
    let mut obsolete = false;
    let mut remove_on_upgrade = false;
    loop {
        let (head, last) = rest.rsplit_once(' ')?;
        match last {
            "obsolete" => obsolete = true,
            "remove-on-upgrade" => remove_on_upgrade = true,
            _ => break,
        }
        rest = head.trim_end();
    }
    let (path, md5) = rest.rsplit_once(' ')?;
    let path = path.trim_end();
    if !path.starts_with('/') || md5.is_empty() {
        return None;
    }
    Some(Conffile {
        path: PathBuf::from(path),
        md5: md5.to_ascii_lowercase(),
        obsolete,
        remove_on_upgrade,
    })
}

fn clip(text: &str) -> String {
    const MAX: usize = 80;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut}...")
    }
}

/// What identifies one version of the status file on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    inode: u64,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

/// A failure to read or parse the status database.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error(
        "no dpkg status database at {}: is this a Debian system (under --root, the root of one)?",
        path.display()
    )]
    Missing { path: PathBuf },
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("cannot read the dpkg status database: {0}")]
    Parse(#[from] StatusParseError),
}

/// The per-pass cache of the parsed database (and of facts derived from the
/// same version of it, such as `dpkg --audit`'s verdict).
#[derive(Debug, Default)]
pub struct StatusCache {
    parsed: Mutex<Option<(Stamp, Arc<StatusDb>)>>,
    parses: std::sync::atomic::AtomicUsize,
}

impl StatusCache {
    /// How many times this pass parsed the status file (for tests and the
    /// benchmark's claim of one parse per pass).
    pub fn parses(&self) -> usize {
        self.parses.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The status file's identity right now.
pub fn stamp(host: &Host) -> Result<(PathBuf, Stamp), StatusError> {
    let path = host.resolve(Path::new(STATUS_FILE))?;
    // Through the boundary, as every path under the root: a parent link
    // is refused (dpkg's database is never reached through one).
    match host.lstat(Path::new(STATUS_FILE))? {
        Some(stat) => Ok((
            path,
            Stamp {
                dev: stat.meta.dev,
                inode: stat.meta.inode,
                size: stat.meta.size,
                mtime_ns: stat.meta.mtime_ns,
                ctime_ns: stat.meta.ctime_ns,
            },
        )),
        None => Err(StatusError::Missing { path }),
    }
}

/// Whether dpkg was interrupted: its journal holds an entry (a file named by
/// digits alone, what apt checks before it does anything: `CheckUpdates`
/// of apt's dpkg system), so apt-get refuses to install or remove anything
/// until `dpkg --configure -a` finished the job.
pub fn interrupted(host: &Host) -> Result<bool, StatusError> {
    use std::os::unix::ffi::OsStrExt;
    let updates = Path::new(UPDATES_DIR);
    if host.lstat(updates)?.is_none() {
        return Ok(false);
    }
    Ok(host.dir(updates)?.list()?.iter().any(|(name, _)| {
        let name = name.as_bytes();
        !name.is_empty() && name.iter().all(u8::is_ascii_digit)
    }))
}

/// The parsed database for this pass: parsed at the first call, and again
/// only when dpkg has replaced the status file since.
pub fn load(host: &Host) -> Result<Arc<StatusDb>, StatusError> {
    let cache = host.pass_cache::<StatusCache>();
    let (path, now) = stamp(host)?;
    let mut parsed = cache.parsed.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((seen, db)) = parsed.as_ref()
        && *seen == now
    {
        return Ok(Arc::clone(db));
    }
    let bytes = host
        .read(Path::new(STATUS_FILE))?
        .ok_or_else(|| StatusError::Missing { path: path.clone() })?;
    let text = String::from_utf8_lossy(&bytes);
    let db = Arc::new(StatusDb::parse(&text, &path)?);
    cache
        .parses
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    *parsed = Some((now, Arc::clone(&db)));
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
Package: openssh-server
Status: install ok installed
Priority: optional
Section: net
Installed-Size: 1779
Maintainer: Debian OpenSSH Maintainers <debian-ssh@lists.debian.org>
Architecture: amd64
Multi-Arch: foreign
Source: openssh
Version: 1:9.2p1-2+deb12u3
Depends: libc6 (>= 2.34),
 libwrap0 (>= 7.6-4~)
Conffiles:
 /etc/default/ssh 500e3cf069fe9a7b9936108eb9d9c035
 /etc/init.d/ssh 3649a6fe8c18ad1d5245fd91737de507
 /etc/ssh/moduli 4a6fe46a9be7f4ac6a5d3a2a1cf77f7e
 /etc/ssh/sshd_config.d/old.conf d41d8cd98f00b204e9800998ecf8427e obsolete
Description: secure shell (SSH) server, for secure access from remote machines
 This is the portable version of OpenSSH, a free implementation of
 the Secure Shell protocol as specified by the IETF secsh working
 group.
 .
 Ssh (Secure Shell) is a program for logging into a remote machine.

Package: libc6
Status: install ok installed
Architecture: i386
Version: 2.36-9+deb12u4

Package: libc6
Status: hold ok installed
Architecture: amd64
Version: 2.36-9+deb12u4

Package: old-tool
Status: deinstall ok config-files
Architecture: all
Version: 0.9
Conffiles:
 /etc/old tool/with space.conf 0123456789abcdef0123456789abcdef
 /etc/old-tool.conf newconffile remove-on-upgrade

Package: broken
Status: install reinstreq half-configured
Architecture: all
Version: 2.0
";

    fn db() -> StatusDb {
        StatusDb::parse(SAMPLE, Path::new("/var/lib/dpkg/status")).unwrap()
    }

    #[test]
    fn stanzas_and_continuation_lines_parse() {
        let db = db();
        assert_eq!(db.len(), 5);
        let ssh = db.get("openssh-server").unwrap();
        assert_eq!(ssh.version.as_deref(), Some("1:9.2p1-2+deb12u3"));
        assert_eq!(ssh.state, DpkgState::Installed);
        assert_eq!((ssh.want.as_str(), ssh.flag.as_str()), ("install", "ok"));
        assert!(!ssh.is_held());
        assert_eq!(ssh.qualified(), "openssh-server:amd64");
        // The Depends and Description continuations did not leak into Conffiles.
        assert_eq!(ssh.conffiles.len(), 4);
        assert_eq!(ssh.conffiles[0].path, Path::new("/etc/default/ssh"));
        assert_eq!(ssh.conffiles[0].md5, "500e3cf069fe9a7b9936108eb9d9c035");
        assert!(!ssh.conffiles[0].obsolete);
        assert!(ssh.conffiles[3].obsolete);
        assert_eq!(ssh.conffiles[3].md5, "d41d8cd98f00b204e9800998ecf8427e");
    }

    #[test]
    fn conffile_paths_may_hold_spaces_and_flags_follow_the_hash() {
        let db = db();
        let old = db.get("old-tool").unwrap();
        assert_eq!(old.state, DpkgState::ConfigFiles);
        assert!(old.state.is_absent());
        assert_eq!(
            old.conffiles[0].path,
            Path::new("/etc/old tool/with space.conf")
        );
        assert_eq!(old.conffiles[1].md5, "newconffile");
        assert!(old.conffiles[1].remove_on_upgrade && !old.conffiles[1].obsolete);
    }

    #[test]
    fn multi_arch_names_resolve_by_architecture_or_to_an_installed_one() {
        let db = db();
        assert_eq!(
            db.get("libc6:amd64").map(|r| r.is_held()),
            Some(true),
            "the amd64 record is the held one"
        );
        assert_eq!(
            db.get("libc6:i386").and_then(|r| r.architecture.as_deref()),
            Some("i386")
        );
        assert!(db.get("libc6:arm64").is_none());
        assert!(db.get("libc6").is_some());
        assert!(db.get("nosuch").is_none());
        assert_eq!(db.records().count(), 5);
    }

    /// apt reads `all`, `native` and the native architecture's name as
    /// one, and an `Architecture: all` package as one of the native
    /// architecture's: `adduser:amd64` is adduser (its record says `all`),
    /// `bash:all` is bash:amd64. A foreign one stays apart.
    #[test]
    fn the_native_architecture_is_spelt_three_ways_and_holds_arch_all_packages() {
        let text = "Package: dpkg\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1.21.22\n\n\
Package: adduser\nStatus: install ok installed\nArchitecture: all\nVersion: 3.134\n\n\
Package: bash\nStatus: install ok installed\nArchitecture: amd64\nVersion: 5.2\n\n\
Package: zlib1g\nStatus: install ok installed\nArchitecture: i386\nVersion: 1.2\n\n\
Package: zlib1g\nStatus: deinstall ok config-files\nArchitecture: amd64\nVersion: 1.2\n\n";
        let db = StatusDb::parse(text, Path::new("/var/lib/dpkg/status")).unwrap();
        assert_eq!(db.native(), Some("amd64"));
        let arch = |name: &str| db.get(name).and_then(|r| r.architecture.as_deref());
        for name in ["adduser", "adduser:all", "adduser:amd64", "adduser:native"] {
            assert_eq!(arch(name), Some("all"), "{name}");
        }
        for name in ["bash", "bash:all", "bash:amd64", "bash:native"] {
            assert_eq!(arch(name), Some("amd64"), "{name}");
        }
        assert_eq!(arch("adduser:i386"), None);
        assert_eq!(arch("bash:i386"), None);
        assert_eq!(arch("zlib1g"), Some("i386"));
        assert_eq!(arch("zlib1g:i386"), Some("i386"));
        assert_eq!(arch("zlib1g:amd64"), Some("amd64"));
        assert_eq!(arch("zlib1g:all"), Some("amd64"));
    }

    #[test]
    fn unfinished_states_are_recognised() {
        let db = db();
        let broken = db.get("broken").unwrap();
        assert_eq!(broken.state, DpkgState::HalfConfigured);
        assert_eq!(broken.flag, "reinstreq");
        assert!(broken.state.is_unfinished());
        for word in [
            "half-installed",
            "unpacked",
            "triggers-awaited",
            "triggers-pending",
        ] {
            assert!(DpkgState::parse(word).unwrap().is_unfinished(), "{word}");
            assert_eq!(DpkgState::parse(word).unwrap().word(), word);
        }
        assert!(!DpkgState::Installed.is_unfinished());
        assert!(!DpkgState::ConfigFiles.is_unfinished());
    }

    #[test]
    fn malformed_stanzas_are_errors_with_a_line() {
        let path = Path::new("/s");
        let err = StatusDb::parse("Package: a\nStatus: install ok\n", path).unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.to_string().starts_with("/s:2: package a"), "{err}");
        let err = StatusDb::parse("Version: 1\n", path).unwrap_err();
        assert!(err.message.contains("without a Package"), "{err}");
        let err = StatusDb::parse("Package: a\nStatus: install ok exploded\n", path).unwrap_err();
        assert!(err.message.contains("exploded"), "{err}");
        let err = StatusDb::parse(" leading continuation\n", path).unwrap_err();
        assert_eq!(err.line, 1);
        let err = StatusDb::parse(
            "Package: a\nStatus: install ok installed\nConffiles:\n nohash\n",
            path,
        )
        .unwrap_err();
        assert_eq!(err.line, 4);
        let err = StatusDb::parse("Package: a\nno colon here\n", path).unwrap_err();
        assert_eq!(err.line, 2);
    }

    #[test]
    fn blank_runs_and_a_missing_final_newline_are_fine() {
        let db = StatusDb::parse(
            "\n\nPackage: a\nStatus: install ok installed\n\n\n\nPackage: b\nStatus: purge ok not-installed",
            Path::new("/s"),
        )
        .unwrap();
        assert_eq!(db.len(), 2);
        assert_eq!(db.get("b").unwrap().state, DpkgState::NotInstalled);
        assert_eq!(db.get("b").unwrap().version, None);
        assert!(StatusDb::parse("", Path::new("/s")).unwrap().is_empty());
    }

    #[test]
    fn the_database_is_parsed_once_per_pass_until_dpkg_replaces_it() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("var/lib/dpkg");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("status"), SAMPLE).unwrap();
        let host = Host::with_name(root.path(), "h");
        for _ in 0..50 {
            assert!(load(&host).unwrap().get("broken").is_some());
        }
        let cache = host.pass_cache::<StatusCache>();
        assert_eq!(cache.parses(), 1);

        // dpkg writes status-new and renames it over status: a new inode.
        std::fs::write(
            dir.join("status-new"),
            "Package: z\nStatus: install ok installed\n",
        )
        .unwrap();
        std::fs::rename(dir.join("status-new"), dir.join("status")).unwrap();
        let db = load(&host).unwrap();
        assert!(db.get("broken").is_none() && db.get("z").is_some());
        assert_eq!(cache.parses(), 2);

        // Another pass (another Host) parses again.
        let next = Host::with_name(root.path(), "h");
        load(&next).unwrap();
        assert_eq!(next.pass_cache::<StatusCache>().parses(), 1);
    }

    #[test]
    fn a_root_without_dpkg_says_so() {
        let root = tempfile::tempdir().unwrap();
        let err = load(&Host::with_name(root.path(), "h")).unwrap_err();
        assert!(matches!(err, StatusError::Missing { .. }));
        assert!(err.to_string().contains("var/lib/dpkg/status"), "{err}");
    }
}
