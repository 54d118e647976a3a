//! The validators this build of Datum ships, by name.
//!
//! A resource refers to a validator only by name (`validate: sshd`); the
//! program, its arguments and what its exit statuses mean are defined here,
//! in code, never in a repository (repository content must not become a
//! command line run as root). Adding a validator is one new row in
//! [`VALIDATORS`].
//!
//! Every definition here must be free of side effects: it reads the staged
//! content and says yes or no, and does not write, reload or touch the live
//! configuration. Datum cannot trust a third-party binary with that (`nginx
//! -t` creates the logs, pid file and temporary folders its configuration
//! names), so every program here runs in a throwaway sandbox
//! (`datum_host::sandbox`): a private mount namespace in which the machine's
//! file systems are the read-only lower layers of overlays whose upper layer
//! is a private tmpfs, entered with `chroot`, with no network (a fresh
//! network namespace), a minimal environment, a deadline and bounded output.
//! Whatever the validator writes lands in that tmpfs and is gone when the
//! call ends; `tests/validators.rs` runs every row under it against a
//! configuration naming log, pid and temporary paths in a watched folder and
//! checks that nothing appears there and that the verdict is the one the
//! validator gives without the sandbox. As root the sandbox is mandatory
//! (one that cannot be built fails the validation: fail closed); a non-root
//! process cannot build one and refuses to validate unless the operator set
//! `DATUM_VALIDATOR_SANDBOX=off` (then the validator runs with that user's
//! own rights). Placing files in the view before a run
//! (`datum_host::sandbox::Sandbox::place`) is how `datum plan`'s scratch
//! copy is validated, and how a group can be validated with its staged files
//! laid over their live paths before any of them goes live.
//!
//! A validator loads what its configuration names, so a definition may carry
//! a `precheck` that refuses a configuration before the program sees it:
//! nginx's refuses `load_module` of anything but an intact file of an
//! installed package (see [`nginx`]), because a module is code that would run
//! as root; apache2's does the same for `LoadModule` and `LoadFile` (see
//! [`apache`]), haproxy's for the Lua scripts `lua-load` runs (see
//! [`haproxy`]).
//!
//! This module lists the definitions and runs them ([`run`]); what the engine
//! does with a "no" (discard the staged copy, withhold a reload) is the
//! engine's business.

pub mod admin;
pub mod apache;
pub mod builtin;
pub mod config_walk;
pub mod haproxy;
pub mod nginx;
pub mod quote;
pub mod run;

use std::path::Path;
use std::time::Duration;

use datum_host::sandbox::Sandbox;

pub use run::{
    Rejection, RejectionKind, validate_group, validate_group_in, validate_staged,
    validate_staged_in, validator_version,
};

/// What a validator checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One staged file on its own.
    File,
    /// The application's whole assembled configuration (nginx with its
    /// includes): run once for a group of files, after all are written and
    /// before the service is reloaded.
    Group,
}

/// How a validator is run.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    /// Run the binary with these arguments; [`STAGED`] stands for the path of
    /// the staged copy.
    Staged(&'static [&'static str]),
    /// Run the binary with these arguments against the assembled
    /// configuration; [`CONFIG`] stands for the main configuration file
    /// ([`ValidatorDef::main_config`]) resolved under the root, and
    /// [`CONFIG_DIR`] for the folder holding it (for programs that resolve
    /// relative includes against a server root rather than the file).
    Assembled(&'static [&'static str]),
    /// Parse the staged bytes in-process.
    Builtin(fn(&[u8]) -> Result<(), String>),
}

/// A group validator's check of the assembled configuration before the
/// program runs: the main configuration file's real path and the view the
/// program will see; an error is the reason it is refused.
pub type Precheck = fn(&Path, &Sandbox) -> Result<(), String>;

/// Placeholder for the staged copy in [`Check::Staged`] arguments.
pub const STAGED: &str = "{staged}";
/// Placeholder for the main configuration file in [`Check::Assembled`].
pub const CONFIG: &str = "{config}";
/// Placeholder for the folder holding the main configuration file.
pub const CONFIG_DIR: &str = "{config_dir}";

/// One validator definition.
#[derive(Debug, Clone, Copy)]
pub struct ValidatorDef {
    /// The name a manifest uses in `validate:`.
    pub name: &'static str,
    /// The program it runs, looked up in PATH and the sbin directories; `None`
    /// for validators built into Datum (parsers).
    pub binary: Option<&'static str>,
    /// The Debian package that provides the binary, for the "missing
    /// validator" error's suggestion of an ordering edge.
    pub package: Option<&'static str>,
    pub scope: Scope,
    pub check: Check,
    /// For group validators: the application's main configuration file.
    pub main_config: Option<&'static str>,
    /// Refuses a configuration before the program runs (given the main
    /// configuration file's real path, or a file validator's staged path,
    /// and the view the program will see): what the program would load
    /// must be checked before it loads it.
    pub precheck: Option<Precheck>,
    /// Arguments that make the binary print its version (for failure reports).
    pub version_args: Option<&'static [&'static str]>,
    /// Exit statuses that mean "the configuration is invalid". Any other
    /// non-zero status means the validator itself failed to judge it.
    pub invalid_exit: &'static [i32],
    pub timeout: Duration,
    /// Set in the program's environment (on top of the sandbox's minimal
    /// one), so that it reads nothing a repository can write instead: for
    /// Apache, `APACHE_ENVVARS` pointed away from `/etc/apache2/envvars`,
    /// which `apache2ctl` runs as shell, and Debian's values for what that
    /// file sets.
    pub env: &'static [(&'static str, &'static str)],
    /// One line for `datum validators`.
    pub summary: &'static str,
}

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// `apache2ctl` sources `$APACHE_ENVVARS` (by default
/// `/etc/apache2/envvars`) as shell before it runs `apache2 -t`: in a group
/// that lays a repository's `envvars` over its live path, that was the
/// repository's code, run as root by `datum plan`. `/dev/null` is not a
/// regular file, so apache2ctl sources nothing, and these are the values
/// Debian's `envvars` sets (a host that changed them is checked with
/// Debian's: a syntax check, which names the user only to look it up).
const APACHE_ENV: &[(&str, &str)] = &[
    ("APACHE_ENVVARS", "/dev/null"),
    ("APACHE_RUN_USER", "www-data"),
    ("APACHE_RUN_GROUP", "www-data"),
    ("APACHE_PID_FILE", "/var/run/apache2/apache2.pid"),
    ("APACHE_RUN_DIR", "/var/run/apache2"),
    ("APACHE_LOCK_DIR", "/var/lock/apache2"),
    ("APACHE_LOG_DIR", "/var/log/apache2"),
    ("LANG", "C"),
];

/// Every shipped validator, in the order `datum validators` lists them.
/// Every row must be free of side effects (see the module header).
pub const VALIDATORS: &[ValidatorDef] = &[
    ValidatorDef {
        name: "sshd",
        binary: Some("sshd"),
        package: Some("openssh-server"),
        scope: Scope::File,
        check: Check::Staged(&["-t", "-f", STAGED]),
        main_config: None,
        precheck: None,
        version_args: Some(&["-V"]),
        invalid_exit: &[255],
        timeout: DEFAULT_TIMEOUT,
        env: &[],
        summary: "OpenSSH server configuration (sshd -t -f)",
    },
    ValidatorDef {
        name: "nginx",
        binary: Some("nginx"),
        package: Some("nginx"),
        scope: Scope::Group,
        // `nginx -t` prepares what the configuration names, as a start
        // would: it opens the pid file and the logs (creating them when
        // missing) and creates its temporary folders (handing them to the
        // worker user). In the sandbox all of that lands in the throwaway
        // tmpfs; tests/validators.rs checks that nothing appears outside.
        check: Check::Assembled(&["-t", "-q", "-c", CONFIG]),
        main_config: Some("/etc/nginx/nginx.conf"),
        precheck: Some(nginx::precheck),
        version_args: Some(&["-v"]),
        invalid_exit: &[1],
        timeout: DEFAULT_TIMEOUT,
        env: &[],
        summary: "nginx configuration as a whole (nginx -t -c)",
    },
    ValidatorDef {
        name: "sudoers",
        binary: Some("visudo"),
        package: Some("sudo"),
        scope: Scope::File,
        // No -q: visudo then names the file, line and column and shows
        // the line with a caret under the mistake.
        check: Check::Staged(&["-c", "-f", STAGED]),
        main_config: None,
        precheck: None,
        version_args: Some(&["-V"]),
        invalid_exit: &[1],
        timeout: DEFAULT_TIMEOUT,
        env: &[],
        summary: "sudoers file or drop-in (visudo -c -f)",
    },
    ValidatorDef {
        name: "json",
        binary: None,
        package: None,
        scope: Scope::File,
        check: Check::Builtin(builtin::json),
        main_config: None,
        precheck: None,
        version_args: None,
        invalid_exit: &[],
        timeout: DEFAULT_TIMEOUT,
        env: &[],
        summary: "well-formed JSON (built in)",
    },
    ValidatorDef {
        name: "yaml",
        binary: None,
        package: None,
        scope: Scope::File,
        check: Check::Builtin(builtin::yaml),
        main_config: None,
        precheck: None,
        version_args: None,
        invalid_exit: &[],
        timeout: DEFAULT_TIMEOUT,
        env: &[],
        summary: "well-formed YAML (built in)",
    },
    ValidatorDef {
        name: "toml",
        binary: None,
        package: None,
        scope: Scope::File,
        check: Check::Builtin(builtin::toml),
        main_config: None,
        precheck: None,
        version_args: None,
        invalid_exit: &[],
        timeout: DEFAULT_TIMEOUT,
        env: &[],
        summary: "well-formed TOML (built in)",
    },
    ValidatorDef {
        name: "systemd-unit",
        binary: Some("systemd-analyze"),
        package: Some("systemd"),
        scope: Scope::File,
        check: Check::Staged(&["verify", "--man=no", STAGED]),
        main_config: None,
        precheck: None,
        version_args: Some(&["--version"]),
        invalid_exit: &[1],
        timeout: DEFAULT_TIMEOUT,
        env: &[],
        summary: "systemd unit file (systemd-analyze verify)",
    },
    ValidatorDef {
        name: "nftables",
        binary: Some("nft"),
        package: Some("nftables"),
        scope: Scope::File,
        check: Check::Staged(&["-c", "-f", STAGED]),
        main_config: None,
        precheck: None,
        version_args: Some(&["--version"]),
        invalid_exit: &[1],
        timeout: DEFAULT_TIMEOUT,
        env: &[],
        summary: "nftables ruleset (nft -c -f)",
    },
    ValidatorDef {
        name: "haproxy",
        binary: Some("haproxy"),
        package: Some("haproxy"),
        scope: Scope::File,
        // No -q: it would hide the alerts that name the file and line.
        check: Check::Staged(&["-c", "-f", STAGED]),
        main_config: None,
        precheck: Some(haproxy::precheck),
        version_args: Some(&["-v"]),
        invalid_exit: &[1, 2],
        timeout: DEFAULT_TIMEOUT,
        env: &[],
        summary: "HAProxy configuration (haproxy -c -f)",
    },
    ValidatorDef {
        name: "apache2",
        binary: Some("apache2ctl"),
        package: Some("apache2"),
        scope: Scope::Group,
        // -d and -f: the configuration under the root, not the machine's
        // (Debian's apache2.conf includes mods-enabled/ etc. relative to
        // the server root, so -f alone would mix in the machine's files).
        check: Check::Assembled(&["-t", "-d", CONFIG_DIR, "-f", CONFIG]),
        main_config: Some("/etc/apache2/apache2.conf"),
        precheck: Some(apache::precheck),
        version_args: Some(&["-v"]),
        invalid_exit: &[1],
        timeout: DEFAULT_TIMEOUT,
        env: APACHE_ENV,
        summary: "Apache configuration as a whole (apache2ctl -t -d -f)",
    },
    ValidatorDef {
        name: "logrotate",
        binary: Some("logrotate"),
        package: Some("logrotate"),
        scope: Scope::File,
        // -d: debug mode, which changes neither logs nor the state file.
        check: Check::Staged(&["-d", STAGED]),
        main_config: None,
        precheck: None,
        version_args: Some(&["--version"]),
        invalid_exit: &[1],
        timeout: DEFAULT_TIMEOUT,
        env: &[],
        summary: "logrotate configuration (logrotate -d)",
    },
];

/// The administrator's validators ([`admin`]), once installed.
static ADMIN: std::sync::OnceLock<Vec<ValidatorDef>> = std::sync::OnceLock::new();

/// Makes the administrator's validators known for the rest of the process
/// (the first call wins; they are read once at start-up).
pub fn install_admin(defs: Vec<ValidatorDef>) {
    let _ = ADMIN.set(defs);
}

fn admin_defs() -> &'static [ValidatorDef] {
    ADMIN.get().map_or(&[], Vec::as_slice)
}

/// Every validator a manifest may name: the shipped ones, then the
/// administrator's.
pub fn all() -> Vec<&'static ValidatorDef> {
    VALIDATORS.iter().chain(admin_defs()).collect()
}

/// Whether `def` comes from the administrator's folder rather than the program.
pub fn is_admin(def: &ValidatorDef) -> bool {
    !VALIDATORS.iter().any(|v| v.name == def.name)
}

/// The validator a manifest names, if there is one by that name.
pub fn lookup(name: &str) -> Option<&'static ValidatorDef> {
    VALIDATORS
        .iter()
        .chain(admin_defs())
        .find(|v| v.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_the_issue_lists_is_shipped_once() {
        let names = [
            "sshd",
            "nginx",
            "sudoers",
            "json",
            "yaml",
            "toml",
            "systemd-unit",
            "nftables",
            "haproxy",
            "apache2",
            "logrotate",
        ];
        for name in names {
            assert_eq!(lookup(name).map(|v| v.name), Some(name));
        }
        let mut all_names: Vec<&str> = all().iter().map(|v| v.name).collect();
        all_names.sort_unstable();
        all_names.dedup();
        assert_eq!(all_names.len(), all().len(), "duplicate names");
    }

    #[test]
    fn command_lines_and_unknown_names_are_not_validators() {
        for bad in ["sshd -t -f %s", "/usr/sbin/sshd", "SSHD", "", "nginx {}"] {
            assert!(lookup(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn binaries_and_packages_go_together() {
        for v in all() {
            assert_eq!(v.binary.is_some(), v.package.is_some(), "{}", v.name);
            if let Some(binary) = v.binary {
                assert!(
                    !binary.contains(['/', ' ']),
                    "{}: a bare program name",
                    v.name
                );
            }
        }
        assert_eq!(lookup("nginx").map(|v| v.scope), Some(Scope::Group));
    }
}
