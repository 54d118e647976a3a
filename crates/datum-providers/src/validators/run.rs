//! Running a validator definition: on one staged file, or on the assembled
//! configuration of a group, always in a throwaway sandbox
//! (`datum_host::sandbox`: the machine read-only, writes discarded, no
//! network) unless the process cannot build one and the operator opted out.
//! Output is captured (bounded) for the failure report; whether it may be
//! shown is the engine's decision (sensitive resources never show it).

use std::path::{Path, PathBuf};

use datum_host::command::{self, CommandSpec};
use datum_host::sandbox::{self, Isolation, Sandbox};
use datum_host::{Host, HostError};

use super::{CONFIG, CONFIG_DIR, Check, STAGED, ValidatorDef, builtin, quote};
use crate::Staged;

/// How much validator output a failure report keeps.
const OUTPUT_LIMIT: usize = 8 * 1024;

/// Why a validator said no (or could not say anything).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RejectionKind {
    /// The validator judged the configuration invalid.
    Invalid {
        status: Option<i32>,
    },
    /// The validator ran but failed in a way that is not a verdict.
    ValidatorError {
        status: Option<i32>,
    },
    TimedOut,
    /// The validator could not be run at all (the sandbox could not be
    /// built, the program could not start): no verdict.
    NotRun,
    /// The binary is not installed on this host: a failure, never a skip.
    MissingBinary {
        binary: &'static str,
        package: Option<&'static str>,
    },
}

/// A validator's "no", with what a person needs to diagnose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub validator: &'static str,
    pub host: String,
    pub kind: RejectionKind,
    /// The validator binary's version, where it prints one. (A boxed str
    /// keeps the whole rejection small enough to return by value.)
    pub version: Option<Box<str>>,
    /// Captured output (stdout then stderr), bounded. Potentially sensitive.
    pub output: String,
}

impl Rejection {
    /// One line for reports. Never contains validator output.
    pub fn summary(&self) -> String {
        let version = self
            .version
            .as_deref()
            .map(|v| format!(", {v}"))
            .unwrap_or_default();
        let status = |s: &Option<i32>| match s {
            Some(code) => format!("exit {code}"),
            None => "killed by a signal".to_owned(),
        };
        // Datum's own precheck refused before the program ran.
        let verdict = |s: &Option<i32>| match s {
            Some(_) => status(s),
            None => "refused before it ran".to_owned(),
        };
        match &self.kind {
            RejectionKind::Invalid { status: s } => format!(
                "validation failed ({} on {}{version}, {})",
                self.validator,
                self.host,
                verdict(s)
            ),
            RejectionKind::ValidatorError { status: s } => format!(
                "validator {} could not check the content on {}{version} ({})",
                self.validator,
                self.host,
                status(s)
            ),
            RejectionKind::TimedOut => format!(
                "validator {} timed out on {}{version}",
                self.validator, self.host
            ),
            RejectionKind::NotRun => format!(
                "validator {} could not run on {}{version}",
                self.validator, self.host
            ),
            RejectionKind::MissingBinary { binary, package } => {
                let hint = match package {
                    Some(p) => format!(
                        "; install it first: declare Package[{p}] and add `requires: [Package/{p}]` to this resource"
                    ),
                    None => String::new(),
                };
                format!(
                    "validator {} needs `{binary}`, which is not installed on {}{hint}",
                    self.validator, self.host
                )
            }
        }
    }
}

fn argv(args: &[&str], placeholders: &[(&str, &Path)]) -> Vec<std::ffi::OsString> {
    args.iter()
        .map(|a| match placeholders.iter().find(|(name, _)| name == a) {
            Some((_, value)) => value.as_os_str().to_owned(),
            None => (*a).into(),
        })
        .collect()
}

/// The binary's version line, if it prints one.
pub fn validator_version(def: &ValidatorDef) -> Option<String> {
    let (binary, args) = (def.binary?, def.version_args?);
    let out = command::run(
        &CommandSpec::new(binary)
            .args(args.iter().copied())
            .timeout(std::time::Duration::from_secs(5))
            .output_limit(4096),
    )
    .ok()?;
    let text = format!("{}{}", out.stdout.text(), out.stderr.text());
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("usage") && !l.starts_with("Usage"))
        .map(|l| l.chars().take(80).collect())
}

fn reject(def: &ValidatorDef, host: &Host, kind: RejectionKind, output: String) -> Rejection {
    let version = match kind {
        RejectionKind::MissingBinary { .. } => None,
        _ => validator_version(def).map(String::into_boxed_str),
    };
    Rejection {
        validator: def.name,
        host: host.name().to_owned(),
        kind,
        version,
        output,
    }
}

/// How validators run in this process, as a rejection when they cannot
/// (a non-root process that did not opt out of the sandbox).
fn process_isolation(def: &ValidatorDef, host: &Host) -> Result<Isolation, Rejection> {
    sandbox::isolation().map_err(|e| cannot_run(def, host, &e))
}

fn cannot_run(def: &ValidatorDef, host: &Host, e: &HostError) -> Rejection {
    let kind = RejectionKind::NotRun;
    reject(def, host, kind, e.to_string())
}

fn run_binary(
    def: &ValidatorDef,
    host: &Host,
    args: Vec<std::ffi::OsString>,
    isolation: Isolation,
    view: &Sandbox,
    quote: &dyn Fn(&str) -> String,
) -> Result<(), Rejection> {
    let Some(binary) = def.binary else {
        return Ok(());
    };
    if command::which(binary).is_none() {
        let kind = RejectionKind::MissingBinary {
            binary,
            package: def.package,
        };
        return Err(reject(def, host, kind, String::new()));
    }
    // An administrator's program may have been installed (or changed)
    // since the definitions were read: it runs as root only while root
    // alone can change it.
    if super::is_admin(def) {
        match datum_host::admin::check_root_owned_file(Path::new(binary)) {
            Ok(true) => {}
            Ok(false) => {
                let kind = RejectionKind::MissingBinary {
                    binary,
                    package: def.package,
                };
                return Err(reject(def, host, kind, String::new()));
            }
            Err(e) => return Err(cannot_run(def, host, &e)),
        }
    }
    let spec = def.env.iter().fold(
        CommandSpec::new(binary)
            .args(args)
            .timeout(def.timeout)
            .output_limit(OUTPUT_LIMIT),
        |spec, (key, value)| spec.env(key, value),
    );
    let ran = match isolation {
        Isolation::Sandboxed => view.run(&spec),
        Isolation::Unsandboxed => command::run(&spec),
    };
    let out = match ran {
        Ok(out) => out,
        Err(e) => return Err(reject(def, host, RejectionKind::NotRun, e.to_string())),
    };
    if out.success() {
        return Ok(());
    }
    let mut output = out.stdout.text();
    output.push_str(&out.stderr.text());
    if out.stdout.truncated || out.stderr.truncated {
        output.push_str("\n(output truncated)");
    }
    let quoted = quote(&output);
    if !quoted.is_empty() {
        if !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&quoted);
    }
    let output = withheld_if_private(output, view);
    let kind = if out.timed_out {
        RejectionKind::TimedOut
    } else if out
        .status
        .is_some_and(|s| def.invalid_exit.is_empty() || def.invalid_exit.contains(&s))
    {
        RejectionKind::Invalid { status: out.status }
    } else {
        RejectionKind::ValidatorError { status: out.status }
    };
    Err(reject(def, host, kind, output))
}

/// A validator's output as a rejection carries it: withheld whole when it
/// names a file not everyone may read ([`private_file_named`]).
fn withheld_if_private(output: String, view: &Sandbox) -> String {
    match private_file_named(&output, view) {
        Named::None => output,
        Named::Private(private) => format!(
            "(output withheld: it names {}, a file not everyone may read, whose content a validator echoes; run the validator by hand to read it)\n",
            private.display()
        ),
        Named::TooMany => format!(
            "(output withheld: it names more than {PATHS_LOOKED_AT} possible paths, too many to tell whether one is a file not everyone may read; run the validator by hand to read it)\n"
        ),
    }
}

/// The first file named in a validator's output that not everyone may read
/// (see [`Sandbox::is_private_file`]). Validators echo what they cannot
/// parse, from whatever file the configuration includes: `Include
/// /etc/shadow` in an sshd_config, `include /etc/ssh/ssh_host_ed25519_key;`
/// in nginx's, print a password hash or a private key line by line. The
/// repository names those files; its content must not become a way to read
/// them (in a plan's output, a CI log, the fleet server's pages), so such
/// an output is withheld whole (a line naming the file may be followed by
/// one quoting it that does not).
fn private_file_named(output: &str, view: &Sandbox) -> Named {
    // A path may hold spaces, quotes or colons (`Include "/a b/c"`, echoed
    // as `/a b/c line 1: ...`): every stretch from a `/` to each later word
    // boundary of its line is a candidate, so a name is never split where
    // the file's own name goes on. Any `/` may start one (not only one at a
    // word's start): a path is glued to what comes before it as often as
    // not (`file=/etc/shadow`, `</etc/shadow>`, `x/etc/shadow`); a
    // `/` right after another starts none (the first one's path is the
    // same file).
    let boundary = |c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '[' | ']'
                    | '"'
                    | '\''
                    | '('
                    | ')'
                    | ','
                    | ':'
                    | '`'
                    | '<'
                    | '>'
                    | '{'
                    | '}'
                    | '='
                    | ';'
                    | '|'
            )
    };
    let mut looked = 0usize;
    for line in output.lines() {
        let starts = line
            .char_indices()
            .filter(|&(i, c)| c == '/' && !line[..i].ends_with('/'));
        for (start, _) in starts {
            let rest = &line[start..];
            let ends = rest
                .char_indices()
                .filter(|&(_, c)| boundary(c))
                .map(|(i, _)| i)
                .chain([rest.len()]);
            for end in ends {
                let path = rest[..end].trim_end_matches(['.', ';']);
                if path.is_empty() {
                    continue;
                }
                looked += 1;
                if looked > PATHS_LOOKED_AT {
                    // Fail closed: what was not looked at may be private.
                    return Named::TooMany;
                }
                if view.is_private_file(Path::new(path)) {
                    return Named::Private(PathBuf::from(path));
                }
            }
        }
    }
    Named::None
}

/// What [`private_file_named`] found in a validator's output.
enum Named {
    /// No file not everyone may read.
    None,
    /// This file, which not everyone may read.
    Private(PathBuf),
    /// More possible paths than are looked at: withheld all the same.
    TooMany,
}

/// The most possible paths looked up in one validator's output (each is
/// one `stat`); past that the output is withheld.
const PATHS_LOOKED_AT: usize = 20_000;

/// Checks one staged file (validators of [`super::Scope::File`]), in the
/// sandbox.
pub fn validate_staged(
    def: &ValidatorDef,
    host: &Host,
    staged: &Staged<'_>,
) -> Result<(), Rejection> {
    if !matches!(def.check, Check::Staged(_)) {
        return validate_staged_in(def, host, staged, Isolation::Unsandboxed);
    }
    let isolation = process_isolation(def, host)?;
    validate_staged_in(def, host, staged, isolation)
}

/// [`validate_staged`] with the isolation chosen by the caller (tests and
/// benchmarks compare a verdict with and without the sandbox). In the
/// sandbox, the staged bytes are laid at the staged path in the view, so
/// the validator judges exactly what was written, whatever the path holds
/// on the machine a moment later.
pub fn validate_staged_in(
    def: &ValidatorDef,
    host: &Host,
    staged: &Staged<'_>,
    isolation: Isolation,
) -> Result<(), Rejection> {
    match def.check {
        // A parser's "no" reads like a checker's that exits 1.
        Check::Builtin(parse) => parse(staged.bytes).map_err(|mut message| {
            let line = builtin::line_in(&message);
            if let Some(n) = line {
                let quoted = quote::offending_at(staged.bytes, n);
                if !quoted.is_empty() {
                    message.push('\n');
                    message.push_str(&quoted);
                }
            }
            let kind = RejectionKind::Invalid { status: Some(1) };
            reject(def, host, kind, message)
        }),
        Check::Staged(args) => {
            let mut view = Sandbox::new();
            view.place(
                staged.path,
                staged.bytes.to_vec(),
                staged.mode,
                staged.uid,
                staged.gid,
            );
            if let Some(precheck) = def.precheck {
                precheck(staged.path, &view).map_err(|message| {
                    let kind = RejectionKind::Invalid { status: None };
                    reject(def, host, kind, message)
                })?;
            }
            let args = argv(args, &[(STAGED, staged.path)]);
            let quote = |output: &str| quote::offending(output, &[(staged.path, staged.bytes)]);
            run_binary(def, host, args, isolation, &view, &quote)
        }
        // A group validator pointed at one file would validate a
        // combination that never exists; the engine runs it per group.
        Check::Assembled(_) => Ok(()),
    }
}

/// Checks the assembled configuration of a group (validators of
/// [`super::Scope::Group`]), after every changed file of the group is
/// written, in the sandbox.
pub fn validate_group(def: &ValidatorDef, host: &Host) -> Result<(), Rejection> {
    let isolation = process_isolation(def, host)?;
    validate_group_in(def, host, isolation, &Sandbox::new())
}

/// [`validate_group`] with the isolation chosen by the caller, in a view
/// that may hold files laid over their live paths first (`view`: how a group
/// is validated before any of its files goes live).
pub fn validate_group_in(
    def: &ValidatorDef,
    host: &Host,
    isolation: Isolation,
    view: &Sandbox,
) -> Result<(), Rejection> {
    let Check::Assembled(args) = def.check else {
        return Ok(());
    };
    let config = match def.main_config {
        Some(declared) => host
            .resolve(Path::new(declared))
            .map_err(|e| cannot_run(def, host, &e))?,
        None => std::path::PathBuf::new(),
    };
    if let Some(precheck) = def.precheck {
        precheck(&config, view).map_err(|message| {
            let kind = RejectionKind::Invalid { status: None };
            reject(def, host, kind, message)
        })?;
    }
    let dir = config.parent().unwrap_or(Path::new("/"));
    let args = argv(args, &[(CONFIG, &config), (CONFIG_DIR, dir)]);
    // The lines it names: of the files laid into the view, and of the live
    // files of the application's configuration folder.
    let quote = |output: &str| {
        let mut files: Vec<(std::path::PathBuf, Vec<u8>)> = view
            .placed_files()
            .map(|(p, b)| (p.to_path_buf(), b.to_vec()))
            .collect();
        for token in output.split(|c: char| c.is_whitespace() || matches!(c, '[' | ']' | '"')) {
            let candidate = token.split(':').next().unwrap_or_default();
            let path = Path::new(candidate);
            if path.is_absolute()
                && path.starts_with(dir)
                && !files.iter().any(|(p, _)| p == path)
                && let Ok(bytes) = view.read_as_program(path, 1024 * 1024)
            {
                files.push((path.to_path_buf(), bytes));
            }
        }
        let refs: Vec<(&Path, &[u8])> = files
            .iter()
            .map(|(p, b)| (p.as_path(), b.as_slice()))
            .collect();
        quote::offending(output, &refs)
    };
    run_binary(def, host, args, isolation, view, &quote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validators::lookup;

    fn host() -> Host {
        Host::with_name("/", "test-host")
    }

    #[test]
    fn a_missing_binary_is_a_failure_naming_validator_binary_host_and_package() {
        let def = ValidatorDef {
            binary: Some("datum-no-such-validator-binary"),
            package: Some("no-such-package"),
            ..*lookup("sshd").unwrap()
        };
        let staged = Staged {
            path: Path::new("/nonexistent/sshd_config"),
            bytes: b"Port 22\n",
            mode: 0o600,
            uid: None,
            gid: None,
        };
        let err = validate_staged(&def, &host(), &staged).unwrap_err();
        let summary = err.summary();
        for word in [
            "sshd",
            "datum-no-such-validator-binary",
            "test-host",
            "Package/no-such-package",
        ] {
            assert!(summary.contains(word), "{word} missing from {summary}");
        }
    }

    /// An administrator's program is checked when the definitions are read
    /// only if it is there; it is checked again before each use, so one
    /// installed since by someone other than root never runs as root.
    #[test]
    fn an_administrators_program_that_is_not_roots_alone_is_not_run() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("zone-check");
        std::fs::write(&program, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        if std::os::unix::fs::chown(&program, Some(65534), None).is_err() {
            println!("skipped: needs root (the program is given to another owner)");
            return;
        }
        let binary: &'static str = Box::leak(program.display().to_string().into_boxed_str());
        let def = ValidatorDef {
            name: "zone-check",
            binary: Some(binary),
            package: None,
            check: Check::Staged(&["{staged}"]),
            precheck: None,
            version_args: None,
            ..*lookup("sshd").unwrap()
        };
        assert!(crate::validators::is_admin(&def));
        let staged = Staged {
            path: Path::new("/nonexistent/zone.conf"),
            bytes: b"zone {}\n",
            mode: 0o644,
            uid: None,
            gid: None,
        };
        let err = validate_staged_in(&def, &host(), &staged, Isolation::Unsandboxed)
            .expect_err("a program uid 65534 may change ran as root");
        assert_eq!(err.kind, RejectionKind::NotRun, "{}", err.summary());
        assert!(err.output.contains("uid 65534"), "{}", err.output);
        // Root's alone: it runs (and says yes).
        std::os::unix::fs::chown(&program, Some(0), None).unwrap();
        validate_staged_in(&def, &host(), &staged, Isolation::Unsandboxed).unwrap();
        // Gone: not installed, a failure naming it.
        std::fs::remove_file(&program).unwrap();
        let err = validate_staged_in(&def, &host(), &staged, Isolation::Unsandboxed).unwrap_err();
        assert!(
            matches!(err.kind, RejectionKind::MissingBinary { .. }),
            "{}",
            err.summary()
        );
    }

    #[test]
    fn builtin_validators_judge_content() {
        let staged = |bytes: &'static [u8]| Staged {
            path: Path::new("/etc/x.json"),
            bytes,
            mode: 0o644,
            uid: None,
            gid: None,
        };
        let err =
            validate_staged(lookup("json").unwrap(), &host(), &staged(b"{\"a\": }")).unwrap_err();
        assert!(matches!(err.kind, RejectionKind::Invalid { .. }));
        assert!(validate_staged(lookup("json").unwrap(), &host(), &staged(b"{\"a\": 1}")).is_ok());
    }

    /// A validator names an included file however its own syntax writes
    /// it: glued to a key (`file=PATH`), quoted, bracketed, followed by a
    /// colon. Each form names the private file (its content, a canary, is
    /// what a validator would go on to echo), and the whole output is
    /// withheld; a public file's name withholds nothing.
    #[test]
    fn a_private_file_glued_to_other_text_is_found() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("shadow");
        std::fs::write(&secret, "root:$6$CANARY-GLUED-5e1d$x:1::::::\n").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let public = dir.path().join("public");
        std::fs::write(&public, "x\n").unwrap();
        std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = secret.display().to_string();
        let view = Sandbox::new();
        for form in [
            format!("bad line in file={path} near"),
            format!("include '{path}' failed:"),
            format!("\"{path}:\" line 1:"),
            format!("error ({path}) at line 1:"),
            format!("--config={path};"),
            format!("<{path}>: unknown"),
            format!("conf.d{path} line 1:"),
        ] {
            // What the validator goes on to echo from the file.
            let form = format!("{form} root:$6$CANARY-GLUED-5e1d\n");
            let shown = withheld_if_private(form.clone(), &view);
            assert!(!shown.contains("CANARY"), "{form} shown as {shown}");
            assert!(shown.contains(&format!("it names {path},")), "{shown}");
        }
        let public = format!("file={}: line 1: CANARY", public.display());
        assert_eq!(withheld_if_private(public.clone(), &view), public);
    }

    #[test]
    fn the_summary_never_carries_validator_output() {
        let r = Rejection {
            validator: "sshd",
            host: "h".into(),
            kind: RejectionKind::Invalid { status: Some(255) },
            version: None,
            output: "line 1: Bad option CANARY".into(),
        };
        assert!(!r.summary().contains("CANARY"));
        assert!(r.summary().contains("exit 255"));
    }
}
