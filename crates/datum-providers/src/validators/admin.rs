//! Validators an administrator adds without a rebuild:
//! `/etc/datum/validators.d/*.toml` (under `--root`), root's files only.
//!
//! The repository still only *names* a validator; what runs is defined here,
//! by root, outside any repository, and runs in the same sandbox as the
//! shipped ones. A file that root alone could not have written is refused
//! (`datum_host::admin`), and so is anything this module does not
//! understand: a definition that is refused stops every command that would
//! use validators (fail closed), naming the file and line.
//!
//! ```toml
//! [validator.named-checkconf]
//! program = "/usr/bin/named-checkconf"   # an absolute path, root's, not writable by others
//! args = ["{staged}"]                    # {staged}: the staged copy (scope "file")
//! package = "bind9-utils"                # optional: for the "not installed" hint
//! version_args = ["-v"]                  # optional
//! invalid_exit = [1]                     # exit statuses meaning "invalid" (default [1])
//! timeout = "10s"                        # optional (default 30s, at most 5m)
//! summary = "BIND configuration (named-checkconf)"
//!
//! [validator.postfix]
//! program = "/usr/sbin/postfix"
//! scope = "group"                        # the assembled configuration
//! main_config = "/etc/postfix/main.cf"   # {config} / {config_dir} in args
//! args = ["-c", "{config_dir}", "check"]
//! summary = "Postfix configuration (postfix check)"
//! ```
//!
//! Definitions are read once when the program starts (`datum agent`: restart
//! it to take a change).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{CONFIG, CONFIG_DIR, Check, STAGED, Scope, ValidatorDef};

/// Where the definitions live, relative to the root.
pub const ADMIN_DIR: &str = "etc/datum/validators.d";

/// Longest timeout a definition may set.
const MAX_TIMEOUT: Duration = Duration::from_secs(300);

/// Why the administrator's validators cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Host(#[from] datum_host::HostError),
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    validator: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    program: String,
    args: Vec<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    main_config: Option<String>,
    #[serde(default)]
    package: Option<String>,
    #[serde(default)]
    version_args: Option<Vec<String>>,
    #[serde(default)]
    invalid_exit: Option<Vec<i32>>,
    #[serde(default)]
    timeout: Option<String>,
    summary: String,
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn leak_all(v: Vec<String>) -> &'static [&'static str] {
    Box::leak(
        v.into_iter()
            .map(leak)
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The definition of one `[validator.NAME]` table.
fn definition(name: &str, e: Entry) -> Result<ValidatorDef, String> {
    if !valid_name(name) {
        return Err(format!(
            "validator name `{name}`: use lower-case letters, digits and -"
        ));
    }
    if super::VALIDATORS.iter().any(|v| v.name == name) {
        return Err(format!(
            "validator `{name}` is shipped with Datum; give yours another name"
        ));
    }
    if !Path::new(&e.program).is_absolute() {
        return Err(format!(
            "validator `{name}`: `program` must be an absolute path, found `{}`",
            e.program
        ));
    }
    let scope = match e.scope.as_deref() {
        None | Some("file") => Scope::File,
        Some("group") => Scope::Group,
        Some(other) => {
            return Err(format!(
                "validator `{name}`: `scope` is \"file\" or \"group\", found \"{other}\""
            ));
        }
    };
    let mentions = |p: &str| e.args.iter().any(|a| a.contains(p));
    match scope {
        Scope::File => {
            if !mentions(STAGED) {
                return Err(format!(
                    "validator `{name}`: `args` must name the staged copy as {STAGED}"
                ));
            }
            if e.main_config.is_some() {
                return Err(format!(
                    "validator `{name}`: `main_config` is for scope \"group\""
                ));
            }
        }
        Scope::Group => {
            let Some(main) = &e.main_config else {
                return Err(format!(
                    "validator `{name}`: scope \"group\" needs `main_config` (the application's main configuration file)"
                ));
            };
            if !Path::new(main).is_absolute() {
                return Err(format!(
                    "validator `{name}`: `main_config` must be an absolute path"
                ));
            }
            if mentions(STAGED) {
                return Err(format!(
                    "validator `{name}`: a group validator checks {CONFIG} (or {CONFIG_DIR}), not {STAGED}"
                ));
            }
        }
    }
    let timeout = match &e.timeout {
        None => super::DEFAULT_TIMEOUT,
        Some(t) => humantime::parse_duration(t)
            .map_err(|err| format!("validator `{name}`: `timeout` \"{t}\": {err}"))?,
    };
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(format!(
            "validator `{name}`: `timeout` must be between 1ms and {}s",
            MAX_TIMEOUT.as_secs()
        ));
    }
    let args = leak_all(e.args);
    Ok(ValidatorDef {
        name: leak(name.to_owned()),
        binary: Some(leak(e.program)),
        package: e.package.map(leak),
        scope,
        check: match scope {
            Scope::File => Check::Staged(args),
            Scope::Group => Check::Assembled(args),
        },
        main_config: e.main_config.map(leak),
        precheck: None,
        version_args: e.version_args.map(leak_all),
        invalid_exit: Box::leak(e.invalid_exit.unwrap_or_else(|| vec![1]).into_boxed_slice()),
        timeout,
        env: &[],
        summary: leak(e.summary),
        // An administrator's program's wording is not known: its every
        // line is searched whole.
        own_lines: &[],
    })
}

/// Parses one definitions file.
fn parse(path: &Path, text: &str) -> Result<Vec<ValidatorDef>, AdminError> {
    let invalid = |message: String| AdminError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let file: File = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
    file.validator
        .into_iter()
        .map(|(name, entry)| definition(&name, entry).map_err(&invalid))
        .collect()
}

/// Reads every definitions file under `root` (none when the folder does not
/// exist); any problem refuses them all.
pub fn load(root: &Path) -> Result<Vec<ValidatorDef>, AdminError> {
    let dir = root.join(ADMIN_DIR);
    let Some(files) = datum_host::admin::read_root_owned(&dir, "toml")? else {
        return Ok(Vec::new());
    };
    let mut defs: Vec<ValidatorDef> = Vec::new();
    for (path, text) in files {
        for def in parse(&path, &text)? {
            if defs.iter().any(|d| d.name == def.name) {
                return Err(AdminError::Invalid {
                    path,
                    message: format!("validator `{}` is defined twice", def.name),
                });
            }
            // The program runs as root: it must be root's alone too. One
            // that is not installed is checked when a resource uses it (and
            // fails that resource, as a shipped validator's missing binary
            // does): `run` checks it again before every use.
            if let Some(program) = def.binary {
                datum_host::admin::check_root_owned_file(Path::new(program)).map_err(|e| {
                    AdminError::Invalid {
                        path: path.clone(),
                        message: format!("validator `{}`: {e}", def.name),
                    }
                })?;
            }
            defs.push(def);
        }
    }
    Ok(defs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Result<ValidatorDef, String> {
        parse(Path::new("/etc/datum/validators.d/x.toml"), text)
            .map(|mut v| v.remove(0))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_file_definition_becomes_a_validator() {
        let def = one(
            "[validator.named-checkconf]\nprogram = \"/usr/bin/named-checkconf\"\nargs = [\"{staged}\"]\n\
             version_args = [\"-v\"]\ninvalid_exit = [1]\ntimeout = \"10s\"\nsummary = \"BIND\"\n",
        )
        .unwrap();
        assert_eq!(def.name, "named-checkconf");
        assert_eq!(def.binary, Some("/usr/bin/named-checkconf"));
        assert_eq!(def.scope, Scope::File);
        assert!(matches!(def.check, Check::Staged(["{staged}"])));
        assert_eq!(def.timeout, Duration::from_secs(10));
        assert_eq!(def.invalid_exit, &[1]);
    }

    #[test]
    fn what_cannot_be_trusted_or_understood_is_refused_with_the_file() {
        for (text, says) in [
            (
                "[validator.sshd]\nprogram = \"/x\"\nargs = [\"{staged}\"]\nsummary = \"s\"\n",
                "shipped",
            ),
            (
                "[validator.a]\nprogram = \"x\"\nargs = [\"{staged}\"]\nsummary = \"s\"\n",
                "absolute path",
            ),
            (
                "[validator.a]\nprogram = \"/x\"\nargs = [\"-c\"]\nsummary = \"s\"\n",
                "{staged}",
            ),
            (
                "[validator.a]\nprogram = \"/x\"\nargs = [\"{staged}\"]\nsummary = \"s\"\nshell = true\n",
                "unknown field",
            ),
            (
                "[validator.a]\nprogram = \"/x\"\nscope = \"group\"\nargs = [\"{config}\"]\nsummary = \"s\"\n",
                "main_config",
            ),
            (
                "[validator.A_b]\nprogram = \"/x\"\nargs = [\"{staged}\"]\nsummary = \"s\"\n",
                "lower-case",
            ),
            (
                "[validator.a]\nprogram = \"/x\"\nargs = [\"{staged}\"]\nsummary = \"s\"\ntimeout = \"1h\"\n",
                "timeout",
            ),
            (
                "[validator.a]\nprogram = \"/x\"\nargs = [\"{staged}\"\n",
                "line 3",
            ),
        ] {
            let err = one(text)
                .err()
                .unwrap_or_else(|| panic!("accepted: {text}"));
            assert!(err.contains(says), "{err} (expected {says})");
            assert!(err.contains("validators.d/x.toml"), "{err}");
        }
    }
}
