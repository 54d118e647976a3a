//! Talking to apt and dpkg: `apt-get install|remove`, `apt-mark hold|unhold`
//! and `dpkg --audit`, run through the host's command runner.
//!
//! Every call is an argument vector (no shell), and package names and
//! versions arrive here already checked by [`super::desired`], so none can
//! be read as an option. apt runs non-interactively
//! (`DEBIAN_FRONTEND=noninteractive`, `-y`) and keeps configuration files
//! that were changed locally (`--force-confold`, with `--force-confdef` so a
//! conffile nobody changed is still updated): the files Datum manages are
//! never replaced by the packaged default behind its back.
//!
//! This module reads apt's output and picks out its `E:` lines and the
//! packages they name; it must not decide what a failure means for a
//! resource (the provider does).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datum_host::command::{self, CommandOutput, CommandSpec};
use datum_host::{Host, HostError};

use super::error::PackageError;
use super::status::{self, ADMIN_DIR, Stamp};

/// A whole transaction may download and configure many packages.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// `apt-mark`, `dpkg --audit` and simulations are quick.
const QUERY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long apt waits for another apt or dpkg (unattended-upgrades) to
/// release the database lock before it gives up.
const LOCK_WAIT_SECS: u32 = 120;
/// apt can be verbose; what matters is its error lines.
const OUTPUT_LIMIT: usize = 512 * 1024;
/// At most this many of apt's lines go into a message, each cut to
/// [`LINE_LIMIT`] characters.
const MAX_LINES: usize = 8;
const LINE_LIMIT: usize = 300;

/// Refuses anything but the running system: apt and dpkg under `--root DIR`
/// would change the machine running Datum (or run maintainer scripts
/// against it).
pub fn ensure_running_system(host: &Host, package: &str) -> Result<(), PackageError> {
    if host.root() == Path::new("/") {
        Ok(())
    } else {
        Err(PackageError::NotRunningSystem {
            package: package.to_owned(),
            root: host.root().to_path_buf(),
        })
    }
}

/// Makes apt take each argument as a package name and nothing else: without
/// it, a name no package has that contains `.` or `+` (both allowed in
/// Debian names: `python3.11`, `g++`) falls back to an unanchored regular
/// expression or an fnmatch pattern, so `zlib1g.dev` installs `zlib1g-dev`
/// and every package whose name contains a match, none of which the plan
/// showed. With it, a pattern must start with `?` or `~` and a regular
/// expression be anchored with `^` or `$`, none of which a checked name
/// holds (apt 2.x, `PackageFromRegEx` and `PackageFromFnmatch`).
const NAMES_ONLY: &str = "-oAPT::Cmd::Pattern-Only=true";

/// The options every changing apt-get call gets.
fn apt_get(verb: &str) -> CommandSpec {
    CommandSpec::new("apt-get")
        .arg(verb)
        .args(["-y", "-q", NAMES_ONLY])
        .arg(format!("-oDPkg::Lock::Timeout={LOCK_WAIT_SECS}"))
        .args([
            "-oDpkg::Options::=--force-confdef",
            "-oDpkg::Options::=--force-confold",
        ])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .env("APT_LISTCHANGES_FRONTEND", "none")
        .output_limit(OUTPUT_LIMIT)
        .timeout(TRANSACTION_TIMEOUT)
}

/// One `apt-get install` transaction for `pins` (`name` or `name=version`).
///
/// `--no-install-recommends`: a host runs what the repository declares and
/// what that hard-depends on, nothing a package merely recommends (declare a
/// recommended package to get it). `--allow-downgrades`: a declared version
/// older than the installed one is a declared downgrade. `--no-remove`:
/// Datum never removes a package the repository did not declare absent, so a
/// conflict is a failure, not a silent removal; except that when apt stops
/// for that reason and a simulation shows that everything it would remove is
/// in `may_remove` (the packages the repository declares absent, as when
/// nginx-full replaces nginx-light), the transaction runs again allowing
/// exactly that. `allow_held` lets apt change a held package, for a
/// declaration that names a version for it.
pub fn install(pins: &[String], allow_held: bool, may_remove: &[String]) -> Result<(), AptFailure> {
    match install_once(pins, allow_held, false) {
        Err(failure) if failure.wanted_removals() && !may_remove.is_empty() => {
            let removals = removals_for_install(pins);
            let declared = |name: &String| may_remove.iter().any(|m| bare(m) == bare(name));
            if !removals.is_empty() && removals.iter().all(declared) {
                install_once(pins, allow_held, true)
            } else {
                Err(failure)
            }
        }
        other => other,
    }
}

fn install_once(pins: &[String], allow_held: bool, allow_removals: bool) -> Result<(), AptFailure> {
    let mut spec = apt_get("install").args(["--no-install-recommends", "--allow-downgrades"]);
    if !allow_removals {
        spec = spec.arg("--no-remove");
    }
    if allow_held {
        spec = spec.arg("--allow-change-held-packages");
    }
    // Names and versions were checked and never start with `-`; the `--`
    // makes sure of it anyway.
    let spec = spec.arg("--").args(pins);
    // Downloads and maintainer scripts may take minutes: a progress bar
    // says what the pass waits for meanwhile.
    let words = format!("waiting for apt-get: installing {}", some_of(pins));
    let _waiting = datum_core::progress::waiting(words, Some(spec.timeout));
    run("install", pins, &spec).map(drop)
}

/// `a, b, c and 7 more`: the first names of a list, for a progress line.
fn some_of(names: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = names
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

/// A package name without its `:arch` qualifier.
pub fn bare(name: &str) -> &str {
    name.split_once(':').map_or(name, |(b, _)| b)
}

/// `apt-get remove` (not purge: the package's configuration files stay, as
/// they would after an administrator's `apt remove`, and a later install
/// finds them). First simulated: if apt would remove anything besides
/// `package` and the names in `also_declared_absent`, nothing is removed.
/// `unhold`: clear a hold first (after the simulation), so the selection
/// ends as `deinstall` and a later install of the package is not held from
/// the start.
pub fn remove(
    host: &Host,
    package: &str,
    also_declared_absent: &[String],
    unhold: bool,
) -> Result<(), PackageError> {
    let names = [package.to_owned()];
    let simulate = CommandSpec::new("apt-get")
        .args([
            "-s",
            "-q",
            NAMES_ONLY,
            "remove",
            "--allow-change-held-packages",
        ])
        .arg("--")
        .arg(package)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output_limit(OUTPUT_LIMIT)
        .timeout(QUERY_TIMEOUT);
    let out = run("remove", &names, &simulate).map_err(|f| f.into_error(host, package))?;
    let others: Vec<String> = removals(&out.stdout.text())
        .into_iter()
        .filter(|n| {
            bare(n) != bare(package) && !also_declared_absent.iter().any(|d| bare(d) == bare(n))
        })
        .collect();
    if !others.is_empty() {
        return Err(PackageError::WouldRemoveOthers {
            verb: "removing",
            package: package.to_owned(),
            host: host.name().to_owned(),
            others,
        });
    }
    if unhold {
        mark(host, Mark::Unhold, package)?;
    }
    let spec = apt_get("remove")
        .args(["--allow-change-held-packages", "--"])
        .arg(package);
    let words = format!("waiting for apt-get: removing {package}");
    let _waiting = datum_core::progress::waiting(words, Some(spec.timeout));
    run("remove", &names, &spec)
        .map(drop)
        .map_err(|f| f.into_error(host, package))
}

/// The names among `names` (none of which dpkg has a record of) that apt
/// knows only as virtual packages: no version of their own, provided by
/// other packages, each with its providers. `apt-get install` of such a
/// name with a single provider installs that provider and succeeds, so a
/// Package of it installed something else and then failed every pass; it
/// is refused before apt runs. Names apt does not know at all are left to
/// `apt-get install` to say so.
pub fn purely_virtual(
    host: &Host,
    names: &[String],
) -> Result<Vec<(String, Vec<String>)>, PackageError> {
    let Some(first) = names.first() else {
        return Ok(Vec::new());
    };
    ensure_running_system(host, first)?;
    let spec = CommandSpec::new("apt-cache")
        .args(["-q", "showpkg", "--"])
        .args(names)
        .output_limit(OUTPUT_LIMIT)
        .timeout(QUERY_TIMEOUT);
    let out = run("showpkg", names, &spec).map_err(|f| f.into_error(host, first))?;
    let found = virtual_in_showpkg(&out.stdout.text());
    Ok(names
        .iter()
        .filter_map(|name| {
            let providers = found
                .iter()
                .find(|(shown, _)| shown == name || shown == bare(name))?
                .1
                .clone();
            Some((name.clone(), providers))
        })
        .collect())
}

/// The packages `apt-cache showpkg` shows without any version of their own
/// and with providers (`Reverse Provides:`), each with the providers' names.
pub fn virtual_in_showpkg(text: &str) -> Vec<(String, Vec<String>)> {
    #[derive(PartialEq)]
    enum Section {
        Versions,
        Provides,
        Other,
    }
    let mut found = Vec::new();
    let mut current: Option<(String, bool, Vec<String>)> = None;
    let mut section = Section::Other;
    let mut finish = |current: Option<(String, bool, Vec<String>)>| {
        if let Some((name, false, providers)) = current
            && !providers.is_empty()
        {
            found.push((name, providers));
        }
    };
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("Package: ") {
            finish(current.take());
            current = Some((name.trim().to_owned(), false, Vec::new()));
            section = Section::Other;
            continue;
        }
        let Some((_, has_versions, providers)) = current.as_mut() else {
            continue;
        };
        let trimmed = line.trim();
        if !line.starts_with(' ') && trimmed.ends_with(':') {
            section = match trimmed {
                "Versions:" => Section::Versions,
                "Reverse Provides:" => Section::Provides,
                _ => Section::Other,
            };
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        match section {
            Section::Versions => *has_versions = true,
            Section::Provides => {
                if let Some(provider) = trimmed.split_whitespace().next()
                    && !providers.iter().any(|p| p == provider)
                {
                    providers.push(provider.to_owned());
                }
            }
            Section::Other => {}
        }
    }
    finish(current);
    found
}

/// What apt would remove if it installed `pins` (from a simulation), for a
/// message when `--no-remove` stopped an install.
pub fn removals_for_install(pins: &[String]) -> Vec<String> {
    let spec = CommandSpec::new("apt-get")
        .args([
            "-s",
            "-q",
            NAMES_ONLY,
            "install",
            "--no-install-recommends",
            "--allow-downgrades",
            "--",
        ])
        .args(pins)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output_limit(OUTPUT_LIMIT)
        .timeout(QUERY_TIMEOUT);
    match command::run(&spec) {
        Ok(out) => removals(&out.stdout.text()),
        Err(_) => Vec::new(),
    }
}

/// The packages in a simulation's `Remv name [version]` lines.
pub fn removals(simulation: &str) -> Vec<String> {
    simulation
        .lines()
        .filter_map(|l| l.strip_prefix("Remv "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Whether the hold is set or cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Hold,
    Unhold,
}

/// `apt-mark hold|unhold package`.
pub fn mark(host: &Host, mark: Mark, package: &str) -> Result<(), PackageError> {
    let verb = match mark {
        Mark::Hold => "hold",
        Mark::Unhold => "unhold",
    };
    let spec = CommandSpec::new("apt-mark")
        .args([NAMES_ONLY, verb, "--", package])
        .timeout(QUERY_TIMEOUT);
    let out = command::run(&spec).map_err(|source| PackageError::Host {
        program: "apt-mark",
        package: package.to_owned(),
        source,
    })?;
    if out.success() {
        Ok(())
    } else {
        Err(AptFailure::from_output(verb, &[package.to_owned()], &out).into_error(host, package))
    }
}

/// `dpkg --audit`'s verdict on one version of the status file.
#[derive(Debug, Default)]
pub struct AuditCache {
    last: Mutex<Option<(Stamp, Arc<Vec<String>>)>>,
}

/// What `dpkg --audit` reports (empty when the database is consistent):
/// packages dpkg left half-installed, half-configured, unpacked, awaiting
/// triggers or needing a reinstall. Cached per pass for one version of the
/// status file, so verifying many packages after one transaction asks once.
pub fn audit(host: &Host, package: &str) -> Result<Arc<Vec<String>>, PackageError> {
    let status_error = |source| PackageError::Status {
        package: package.to_owned(),
        source,
    };
    let (_, now) = status::stamp(host).map_err(status_error)?;
    let cache = host.pass_cache::<AuditCache>();
    let mut last = cache.last.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((seen, lines)) = last.as_ref()
        && *seen == now
    {
        return Ok(Arc::clone(lines));
    }
    let admin = host
        .resolve(Path::new(ADMIN_DIR))
        .map_err(|e| status_error(e.into()))?;
    let spec = CommandSpec::new("dpkg")
        .arg(format!("--admindir={}", admin.display()))
        .arg("--audit")
        .timeout(QUERY_TIMEOUT);
    let out = command::run(&spec).map_err(|source| PackageError::Host {
        program: "dpkg",
        package: package.to_owned(),
        source,
    })?;
    // dpkg exits 1 when it found something; what it found is on stdout.
    let text = out.stdout.text();
    let lines: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| clip(l, LINE_LIMIT))
        .collect();
    if lines.is_empty() && !matches!(out.status, Some(0 | 1)) {
        return Err(
            AptFailure::from_output("--audit", &[package.to_owned()], &out)
                .into_error(host, package),
        );
    }
    let lines = Arc::new(lines);
    *last = Some((now, Arc::clone(&lines)));
    Ok(lines)
}

/// A failed apt or dpkg run, before it is attributed to a resource.
#[derive(Debug)]
pub struct AptFailure {
    pub verb: &'static str,
    pub packages: Vec<String>,
    pub status: Option<i32>,
    pub timed_out: bool,
    /// apt's `E:` lines (bounded), or its last lines when it printed none.
    pub lines: Vec<String>,
    /// The program could not be run at all.
    pub spawn: Option<Box<HostError>>,
}

impl AptFailure {
    fn from_output(verb: &'static str, packages: &[String], out: &CommandOutput) -> Self {
        AptFailure {
            verb,
            packages: packages.to_vec(),
            status: out.status,
            timed_out: out.timed_out,
            lines: error_lines(&out.stderr.text(), &out.stdout.text()),
            spawn: None,
        }
    }

    /// Packages apt's error lines say it cannot find (by name or version).
    pub fn unknown_packages(&self) -> Vec<String> {
        unknown_packages(&self.lines)
    }

    /// apt stopped because installing would remove something.
    pub fn wanted_removals(&self) -> bool {
        self.lines.iter().any(|l| l.contains("remove is disabled"))
    }

    /// The error for `package`: unknown when apt says it cannot find it,
    /// apt's failure otherwise.
    pub fn into_error(self, host: &Host, package: &str) -> PackageError {
        if let Some(source) = self.spawn {
            return PackageError::Host {
                program: if self.verb == "--audit" {
                    "dpkg"
                } else {
                    "apt-get"
                },
                package: package.to_owned(),
                source: *source,
            };
        }
        let bare = package.split_once(':').map_or(package, |(b, _)| b);
        if self
            .unknown_packages()
            .iter()
            .any(|n| n == package || n == bare)
        {
            let apt = self
                .lines
                .into_iter()
                .filter(|l| l.contains(bare))
                .collect();
            return PackageError::Unknown {
                package: package.to_owned(),
                host: host.name().to_owned(),
                apt,
            };
        }
        PackageError::Apt {
            verb: self.verb,
            packages: self.packages,
            host: host.name().to_owned(),
            status: self.status,
            timed_out: self.timed_out,
            apt: self.lines,
        }
    }
}

/// Runs one apt/dpkg command: its output on success, an [`AptFailure`]
/// otherwise.
fn run(
    verb: &'static str,
    packages: &[String],
    spec: &CommandSpec,
) -> Result<CommandOutput, AptFailure> {
    let out = command::run(spec).map_err(|source| AptFailure {
        verb,
        packages: packages.to_vec(),
        status: None,
        timed_out: false,
        lines: Vec::new(),
        spawn: Some(Box::new(source)),
    })?;
    if out.success() {
        Ok(out)
    } else {
        Err(AptFailure::from_output(verb, packages, &out))
    }
}

/// apt's `E:` lines from its output (stderr first), at most eight,
/// each cut to 300 characters. Without any, the last lines of
/// stderr (or stdout): dpkg's own errors are not prefixed.
pub fn error_lines(stderr: &str, stdout: &str) -> Vec<String> {
    let errors: Vec<String> = stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .filter(|l| l.starts_with("E: "))
        .map(|l| clip(l, LINE_LIMIT))
        .collect();
    let mut unique: Vec<String> = Vec::new();
    for line in errors {
        if !unique.contains(&line) {
            unique.push(line);
        }
    }
    if !unique.is_empty() {
        unique.truncate(MAX_LINES);
        return unique;
    }
    let source = if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    };
    let tail: Vec<&str> = source
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let start = tail.len().saturating_sub(MAX_LINES.min(4));
    tail[start..].iter().map(|l| clip(l, LINE_LIMIT)).collect()
}

/// The packages apt's error lines say it cannot find or cannot install at
/// the requested version.
pub fn unknown_packages(lines: &[String]) -> Vec<String> {
    let mut names = Vec::new();
    for line in lines {
        let found = if let Some(rest) = line.strip_prefix("E: Unable to locate package ") {
            Some(rest.trim().to_owned())
        } else if line.starts_with("E: Version '") || line.starts_with("E: Release '") {
            // E: Version '9.9' for 'datum-demo' was not found
            line.split_once("' for '")
                .and_then(|(_, rest)| rest.split_once('\''))
                .map(|(name, _)| name.to_owned())
        } else if let Some(rest) = line.strip_prefix("E: Package '") {
            // E: Package 'x' has no installation candidate
            rest.split_once('\'').map(|(name, _)| name.to_owned())
        } else if let Some(rest) = line.strip_prefix("E: Couldn't find any package by ") {
            // ... by glob 'x' / by regex 'x'
            rest.split_once('\'')
                .and_then(|(_, r)| r.split_once('\''))
                .map(|(name, _)| name.to_owned())
        } else {
            None
        };
        if let Some(name) = found
            && !name.is_empty()
            && !names.contains(&name)
        {
            names.push(name);
        }
    }
    names
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(max).collect();
        format!("{cut}...")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_line_names_the_first_packages_and_counts_the_rest() {
        let names = |n: usize| (0..n).map(|i| format!("p{i}")).collect::<Vec<_>>();
        assert_eq!(some_of(&names(1)), "p0");
        assert_eq!(some_of(&names(3)), "p0, p1, p2");
        assert_eq!(some_of(&names(10)), "p0, p1, p2 and 7 more");
    }

    #[test]
    fn e_lines_are_picked_bounded_and_deduplicated() {
        let stderr = "W: some warning\nE: Unable to locate package nosuch\nE: Unable to locate package nosuch\nE: Version '9.9' for 'datum-demo' was not found\n";
        let lines = error_lines(stderr, "Reading package lists...\n");
        assert_eq!(
            lines,
            [
                "E: Unable to locate package nosuch",
                "E: Version '9.9' for 'datum-demo' was not found"
            ]
        );
        let many: String = (0..20).map(|i| format!("E: problem {i}\n")).collect();
        assert_eq!(error_lines(&many, "").len(), MAX_LINES);
        let long = format!("E: {}\n", "x".repeat(1000));
        assert!(error_lines(&long, "")[0].len() < LINE_LIMIT + 10);
    }

    #[test]
    fn without_e_lines_the_tail_of_the_output_is_kept() {
        let lines = error_lines(
            "",
            "Reading...\nline 1\nline 2\ndpkg: error processing package x (--configure):\n installed x package post-installation script subprocess returned error exit status 1\n",
        );
        assert_eq!(lines.len(), 4);
        assert!(lines[3].contains("post-installation"), "{lines:?}");
    }

    #[test]
    fn unknown_packages_are_named_from_apt_messages() {
        let lines: Vec<String> = [
            "E: Unable to locate package nosuch",
            "E: Version '9.9' for 'datum-demo' was not found",
            "E: Package 'virtual' has no installation candidate",
            "E: Couldn't find any package by glob 'x*'",
            "E: Release 'sid' for 'curl' was not found",
            "E: Sub-process /usr/bin/dpkg returned an error code (1)",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            unknown_packages(&lines),
            ["nosuch", "datum-demo", "virtual", "x*", "curl"]
        );
    }

    #[test]
    fn failures_naming_the_package_are_unknown_package_errors() {
        let host = Host::with_name("/", "web-01");
        let failure = AptFailure {
            verb: "install",
            packages: vec!["nosuch".into(), "curl".into()],
            status: Some(100),
            timed_out: false,
            lines: vec![
                "E: Unable to locate package nosuch".into(),
                "E: something else".into(),
            ],
            spawn: None,
        };
        assert!(!failure.wanted_removals());
        let err = failure.into_error(&host, "nosuch");
        assert_eq!(
            err.to_string(),
            "package nosuch cannot be installed on web-01: E: Unable to locate package nosuch"
        );
        let failure = AptFailure {
            verb: "install",
            packages: vec!["curl".into()],
            status: Some(100),
            timed_out: false,
            lines: vec!["E: Packages need to be removed but remove is disabled.".into()],
            spawn: None,
        };
        assert!(failure.wanted_removals());
        assert!(matches!(
            failure.into_error(&host, "curl"),
            PackageError::Apt { .. }
        ));
    }

    /// Captured from apt 2.6 in the test bed: `awk` is purely virtual (three
    /// providers), `mawk` is a package (which also names itself among
    /// no providers), an unknown name prints nothing.
    #[test]
    fn purely_virtual_names_are_read_from_showpkg() {
        let text = "Package: awk\nVersions: \n\nReverse Depends: \n  base-files,awk\nDependencies: \nProvides: \nReverse Provides: \noriginal-awk 2022-09-12-1 (= )\nmawk 1.3.4.20200120-3.1 (= )\ngawk 1:5.2.1-2 (= )\nPackage: mawk\nVersions: \n1.3.4.20200120-3.1 (/var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages) (/var/lib/dpkg/status)\n Description Language: \n\nReverse Depends: \n  base-files,mawk\nDependencies: \n1.3.4.20200120-3.1 - libc6 (2 2.34) \nProvides: \n1.3.4.20200120-3.1 - awk (= ) \nReverse Provides: \n";
        assert_eq!(
            virtual_in_showpkg(text),
            [(
                "awk".to_owned(),
                vec![
                    "original-awk".to_owned(),
                    "mawk".to_owned(),
                    "gawk".to_owned()
                ]
            )]
        );
        assert!(virtual_in_showpkg("").is_empty());
    }

    #[test]
    fn simulated_removals_are_read() {
        let sim = "NOTE: This is only a simulation!\nRemv nginx [1.22.1-9]\nRemv nginx-light [1.22.1-9]\nInst x (1 Debian:12)\n";
        assert_eq!(removals(sim), ["nginx", "nginx-light"]);
    }

    #[test]
    fn nothing_is_changed_under_another_root() {
        let host = Host::with_name("/tmp/some-root", "h");
        let err = ensure_running_system(&host, "curl").unwrap_err();
        assert!(err.to_string().contains("--root /tmp/some-root"), "{err}");
        assert!(ensure_running_system(&Host::with_name("/", "h"), "curl").is_ok());
    }
}
