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
    /// The lines the program prints itself, whatever the configuration
    /// holds (nginx's `configuration file F test failed`), as fixed text
    /// with variable text (holes) between: see [`OwnLine`]. The engine
    /// does not look for a sensitive file's words in their fixed text
    /// (only in the holes), so a secret that happens to share a word with
    /// the program's vocabulary does not withhold its every failure.
    /// Found by running the program on valid and invalid configurations;
    /// a line of another shape is searched whole, so a line missing here
    /// withholds more, never less.
    pub own_lines: &'static [OwnLine],
}

/// A line a validator (or Datum, [`quote::OWN_LINES`]) prints, as its fixed
/// pieces in order: the first starts the line, the last ends it (either
/// may be empty: the line starts or ends with a hole), the others are
/// found in order, the text between two pieces being a hole. Each piece
/// meets a hole at a character no word of a sensitive content ends with
/// (a space, a quote, a colon, a bracket), and a piece is never empty
/// between two holes. See [`own_line_holes`].
pub type OwnLine = &'static [&'static str];

/// The variable text (holes) of `line` if it is one of `own`'s lines (the
/// first that fits), or `None` when it is none of them.
pub fn own_line_holes<'l>(own: &[OwnLine], line: &'l str) -> Option<Vec<&'l str>> {
    own.iter().find_map(|pieces| holes(line, pieces))
}

fn holes<'l>(line: &'l str, pieces: &[&str]) -> Option<Vec<&'l str>> {
    let (first, after) = pieces.split_first()?;
    let mut rest = line.strip_prefix(first)?;
    let mut out = Vec::new();
    let Some((last, middle)) = after.split_last() else {
        return rest.is_empty().then_some(out);
    };
    for piece in middle {
        let at = rest.find(piece)?;
        out.push(&rest[..at]);
        rest = &rest[at + piece.len()..];
    }
    out.push(rest.strip_suffix(last)?);
    Some(out)
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

/// sshd's own lines (OpenSSH 9; it ends them with CR LF, which the
/// engine takes off): `/etc/ssh/sshd_config: line 3: Bad configuration
/// option: x`, `/etc/ssh/sshd_config: terminating, 1 bad configuration
/// options`.
const SSHD_LINES: &[OwnLine] = &[
    &["", ": line ", ": Bad configuration option: ", ""],
    &["", ": terminating, ", " bad configuration options"],
];

/// nginx's: `2026/12/07 11:17:58 [emerg] 1#1: unknown directive "x" in
/// /f:3` (before the error log is open) or `nginx: [emerg] ...`, and what
/// `nginx -t` says of the file as a whole (`-q` leaves out the success
/// lines; they are kept for a run without it).
const NGINX_LINES: &[OwnLine] = &[
    &["", " [emerg] ", ": unknown directive \"", "\" in ", ""],
    &["nginx: [emerg] unknown directive \"", "\" in ", ""],
    &["nginx: configuration file ", " test failed"],
    &["nginx: the configuration file ", " syntax is ok"],
    &["nginx: configuration file ", " test is successful"],
];

/// visudo's (sudo 1.9): `/etc/sudoers.d/x:2:12: syntax error` (the line
/// and a caret under it follow: not its own, searched),
/// `x:1:18: unknown defaults entry "y"`, and `x: parsed OK` for each file
/// it read.
const VISUDO_LINES: &[OwnLine] = &[
    &["", ": syntax error"],
    &["", ": unknown defaults entry \"", "\""],
    &["", ": parsed OK"],
];

/// systemd-analyze verify's (systemd 252): `/etc/x.service:4: Neither a
/// valid executable name nor an absolute path: y`, `x.service: Unit
/// configuration has fatal error, unit will not be started.`, `Unit
/// x.service has a bad unit file setting.`, and the warning `x:3: Unknown
/// key 'K' in section [S], ignoring.` printed beside them.
const SYSTEMD_ANALYZE_LINES: &[OwnLine] = &[
    &[
        "",
        ": Neither a valid executable name nor an absolute path: ",
        "",
    ],
    &[
        "",
        ": Unit configuration has fatal error, unit will not be started.",
    ],
    &["Unit ", " has a bad unit file setting."],
    &["", ": Unknown key '", "' in section [", "], ignoring."],
];

/// nft -c's (nftables 1.0): `/etc/nftables.conf:3:3-11: Error: syntax
/// error, unexpected newline` and `...: Error: No symbol type
/// information`; the quoted line and the carets under it are searched.
const NFT_LINES: &[OwnLine] = &[
    &["", ": Error: syntax error, unexpected ", ""],
    &["", ": Error: No symbol type information"],
];

/// haproxy -c's (2.6): `[NOTICE]   (123) : haproxy version is 2.6.12`,
/// `[NOTICE]   (123) : path to executable is /usr/sbin/haproxy`,
/// `[ALERT]    (123) : config : parsing [/f:2] : unknown keyword 'x' in
/// 'global' section`, `... : config : Error(s) found in configuration file
/// : /f`, `... : config : Fatal errors found in configuration.`, the exit 2
/// of a configuration without listener, and the success lines (exit 0).
const HAPROXY_LINES: &[OwnLine] = &[
    &["[NOTICE] ", ") : haproxy version is ", ""],
    &["[NOTICE] ", ") : path to executable is ", ""],
    &[
        "[ALERT] ",
        ") : config : parsing [",
        "] : unknown keyword '",
        "' in '",
        "' section",
    ],
    &[
        "[ALERT] ",
        ") : config : Error(s) found in configuration file : ",
        "",
    ],
    &[
        "[ALERT] ",
        ") : config : Fatal errors found in configuration.",
    ],
    &["Configuration file has no error but will not start (no listener) => exit(2)."],
    &["Configuration file is valid"],
    &["Warnings were found."],
];

/// apache2ctl -t's (Apache 2.4): `AH00526: Syntax error on line 8 of
/// /f:`, `Invalid command 'X', perhaps misspelled or defined by a module
/// not included in the server configuration`, `Action '-t -d ... -f ...'
/// failed.`, `The Apache error log may have more information.` and
/// `Syntax OK`.
const APACHE2_LINES: &[OwnLine] = &[
    &["AH00526: Syntax error on line ", " of ", ":"],
    &[
        "Invalid command '",
        "', perhaps misspelled or defined by a module not included in the server configuration",
    ],
    &["Action '", "' failed."],
    &["The Apache error log may have more information."],
    &["Syntax OK"],
];

/// logrotate -d's (3.21): the debug mode's banner and progress lines,
/// printed for every configuration, and its errors `error: /f:2 bad
/// rotation count 'x'`, `error: /f:3 unknown option 'x' -- ignoring
/// line`, `error: found error in /var/log/x.log , skipping`.
const LOGROTATE_LINES: &[OwnLine] = &[
    &[
        "warning: logrotate in debug mode does nothing except printing debug messages!  Consider using verbose mode (-v) instead if this is not what you want.",
    ],
    &["reading config file ", ""],
    &["Reading state from file: ", ""],
    &["state file ", " does not exist"],
    &["Allocating hash table for state file, size ", " entries"],
    &["Handling ", " logs"],
    &["removing last ", " log configs"],
    &["error: ", " bad rotation count '", "'"],
    &["error: ", " unknown option '", "' -- ignoring line"],
    &["error: found error in ", " , skipping"],
    &["empty log files are rotated, old logs are removed"],
    &["considering log ", ""],
    &["Creating new state"],
    &["  Now: ", ""],
    &["  Last rotated at ", ""],
    &["  log does not need rotating (log has already been rotated)"],
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
        own_lines: SSHD_LINES,
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
        own_lines: NGINX_LINES,
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
        own_lines: VISUDO_LINES,
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
        own_lines: &[],
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
        own_lines: &[],
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
        own_lines: &[],
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
        own_lines: SYSTEMD_ANALYZE_LINES,
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
        own_lines: NFT_LINES,
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
        own_lines: HAPROXY_LINES,
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
        own_lines: APACHE2_LINES,
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
        own_lines: LOGROTATE_LINES,
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

    /// A validator's own lines are its fixed text with holes between: each
    /// piece meets a hole at white space or the punctuation a sensitive
    /// content is split at (so no word of a secret runs from a hole into
    /// fixed text that is not searched), and a piece between two holes is
    /// never empty. An administrator's validator knows none.
    #[test]
    fn every_own_line_meets_its_holes_at_a_separator() {
        let separator = |c: Option<char>| {
            c.is_some_and(|c| c.is_whitespace() || "\"'`=:;,{}()[]<>".contains(c))
        };
        let lines = all()
            .into_iter()
            .flat_map(|v| v.own_lines.iter().map(move |l| (v.name, *l)))
            .chain(quote::OWN_LINES.iter().map(|l| ("datum", *l)));
        for (name, pieces) in lines {
            assert!(!pieces.is_empty(), "{name}");
            let last = pieces.len() - 1;
            for (i, piece) in pieces.iter().enumerate() {
                if i > 0 {
                    // A hole before it.
                    assert!(!piece.is_empty() || i == last, "{name}: {pieces:?}");
                    assert!(
                        piece.is_empty() || separator(piece.chars().next()),
                        "{name}: {piece:?} of {pieces:?} meets a hole at a word character"
                    );
                }
                if i < last && !piece.is_empty() {
                    // A hole after it.
                    assert!(
                        separator(piece.chars().next_back()),
                        "{name}: {piece:?} of {pieces:?} meets a hole at a word character"
                    );
                }
            }
        }
        assert_eq!(
            own_line_holes(
                lookup("nginx").unwrap().own_lines,
                "nginx: configuration file /r/etc/nginx/nginx.conf test failed"
            ),
            Some(vec!["/r/etc/nginx/nginx.conf"])
        );
        assert_eq!(
            own_line_holes(
                lookup("sshd").unwrap().own_lines,
                "/r/s: line 2: Bad configuration option: hunter2"
            ),
            Some(vec!["/r/s", "2", "hunter2"])
        );
        assert_eq!(
            own_line_holes(lookup("sshd").unwrap().own_lines, "Bad configuration"),
            None
        );
        assert_eq!(
            own_line_holes(quote::OWN_LINES, "offending line:"),
            Some(vec![])
        );
        assert_eq!(own_line_holes(quote::OWN_LINES, "offending line: x"), None);
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
