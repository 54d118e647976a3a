//! git, run with a minimal, explicit configuration.
//!
//! `datum pull` fetches content that is attacker-controlled until its
//! signature is verified, as root. git has a large attack surface beyond
//! parsing packs: hooks, `core.fsmonitor` and `core.sshCommand` run
//! programs, filters and `.gitattributes` transform content, submodules and
//! `protocol.*` reach other places, replace refs and grafts rewrite history,
//! and any of these can come from a system, global or repository
//! configuration. [`Git`] therefore runs every command:
//!
//! - with the environment cleared (the command runner's rule), plus
//!   `GIT_CONFIG_NOSYSTEM=1`, `GIT_CONFIG_GLOBAL=/dev/null`,
//!   `GIT_ATTR_NOSYSTEM=1`, `GIT_NO_REPLACE_OBJECTS=1`,
//!   `GIT_GRAFT_FILE=/dev/null`, `GIT_TERMINAL_PROMPT=0`,
//!   `GIT_OPTIONAL_LOCKS=0` and `GIT_ADVICE=0`: no configuration but the
//!   repository's own (which Datum wrote) and the options below;
//! - with `-c` options that turn off what runs programs or reaches further
//!   ([`HARDENING`]), every protocol refused but the one the caller allows,
//!   and every fetched object checked (`transfer.fsckObjects`);
//! - with an explicit `--git-dir` and that directory as its working
//!   directory, so no repository is discovered from wherever Datum was
//!   started.
//!
//! No command here checks content out: writing a revision's files is done
//! by the caller through [`crate::tree::TreeWriter`] from the objects
//! [`Git::read_objects`] streams, byte for byte, so no attribute, filter or
//! hook ever sees them. This module must not decide which revision is
//! trusted: `datum-pull` does.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ChildStdout;
use std::time::Duration;

use datum_host::HostError;
use datum_host::command::{self, CommandOutput, CommandSpec, Running};

/// `-c` options every git command gets. Each one closes a way for
/// configuration or repository content to run a program, transform
/// content, or reach another repository.
pub const HARDENING: &[(&str, &str)] = &[
    // No hooks, whatever a repository's configuration or hooks/ say.
    ("core.hooksPath", "/dev/null"),
    // No file-system monitor program.
    ("core.fsmonitor", "false"),
    // No credential helper and no prompt program: a password is never asked.
    ("credential.helper", ""),
    ("core.askPass", ""),
    // Every protocol is refused unless allowed for this command (`ext::`,
    // which runs a program, never is).
    ("protocol.allow", "never"),
    // Fetched objects are checked: malformed trees, `.git` or `..` path
    // components, and objects that are not what they claim are refused.
    ("transfer.fsckObjects", "true"),
    ("fetch.fsckObjects", "true"),
    // Submodules are never fetched.
    ("fetch.recurseSubmodules", "false"),
    ("submodule.recurse", "false"),
    // No background work started by a fetch.
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("fetch.writeCommitGraph", "false"),
    // `GIT_GRAFT_FILE=/dev/null` (below) makes every command that reads a
    // commit print a deprecation hint, which would crowd git's own message
    // out of the error lines kept (`GIT_ADVICE=0` too, for the commands
    // that read commits before this configuration).
    ("advice.graftFileDeprecated", "false"),
];

/// The environment every git command gets (on top of the runner's fixed
/// `PATH` and `LC_ALL=C`).
pub const ENVIRONMENT: &[(&str, &str)] = &[
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_ATTR_NOSYSTEM", "1"),
    ("GIT_NO_REPLACE_OBJECTS", "1"),
    ("GIT_GRAFT_FILE", "/dev/null"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_OPTIONAL_LOCKS", "0"),
    ("GIT_ADVICE", "0"),
];

/// How long one git command may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// A transport git may use for one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// A local path or `file://` URL, and bundle files.
    File,
    /// `git://` (git daemon).
    Git,
    Ssh,
    Http,
    Https,
}

impl Protocol {
    /// The name git's `protocol.<name>.allow` uses.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::File => "file",
            Protocol::Git => "git",
            Protocol::Ssh => "ssh",
            Protocol::Http => "http",
            Protocol::Https => "https",
        }
    }
}

/// A git command that did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(transparent)]
    Host(#[from] HostError),
    /// It exited with a failure; `stderr` is its last lines, with every
    /// secret the caller named replaced by `(sensitive)`.
    #[error("git {what} failed ({}): {stderr}", status.map_or_else(|| "killed".to_owned(), |s| format!("exit {s}")))]
    Failed {
        what: String,
        status: Option<i32>,
        stderr: String,
    },
    #[error("git {what} did not finish within {after:?} and was stopped")]
    TimedOut { what: String, after: Duration },
    /// Its output was larger than the bound set for it.
    #[error("git {what} wrote more than {limit} bytes, more than Datum accepts")]
    TooLarge { what: String, limit: usize },
    /// `git cat-file --batch` said something that is not an object.
    #[error("git cat-file: {0}")]
    Stream(String),
}

/// git run against one repository (a bare cache) with the hardening above
/// (its `Debug` form never shows the secrets).
#[derive(Clone)]
pub struct Git {
    git_dir: PathBuf,
    protocol: Option<Protocol>,
    ssh_command: Option<String>,
    secrets: Vec<String>,
    credentials: Option<crate::source::Credentials>,
    timeout: Duration,
}

impl std::fmt::Debug for Git {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Git")
            .field("git_dir", &self.git_dir)
            .field("protocol", &self.protocol)
            .field("ssh_command", &self.ssh_command)
            .field("secrets", &self.secrets.len())
            .field("credentials", &self.credentials)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The credential helper a fetch with credentials gets: it answers `get`
/// for the URL's host only, from the environment (which only the user
/// running Datum can read), so the credentials are never on a command line.
const CREDENTIAL_HELPER: &str = "!f() { h=; while IFS= read -r l; do case \"$l\" in host=*) h=\"${l#host=}\";; esac; done; test \"$1\" = get && test \"$h\" = \"$DATUM_GIT_HOST\" && printf 'username=%s\\npassword=%s\\n' \"$DATUM_GIT_USERNAME\" \"$DATUM_GIT_PASSWORD\"; exit 0; }; f";

impl Git {
    /// git for the repository at `git_dir` (which [`Git::init_bare`] makes);
    /// a relative path is taken against the working directory now, since
    /// git runs in `git_dir` itself.
    pub fn new(git_dir: impl Into<PathBuf>) -> Self {
        let git_dir = git_dir.into();
        Self {
            git_dir: std::path::absolute(&git_dir).unwrap_or(git_dir),
            protocol: None,
            ssh_command: None,
            secrets: Vec::new(),
            credentials: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// Allows one transport (for a fetch); every other stays refused.
    pub fn allow(mut self, protocol: Protocol) -> Self {
        self.protocol = Some(protocol);
        self
    }

    /// The `ssh` command line git runs for an `ssh://` remote (git runs it
    /// through a shell: the caller quotes what it puts in).
    pub fn ssh_command(mut self, command: impl Into<String>) -> Self {
        self.ssh_command = Some(command.into());
        self
    }

    /// A string (a password in a URL) that must never appear in an error.
    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        let secret = secret.into();
        if !secret.is_empty() {
            self.secrets.push(secret);
        }
        self
    }

    /// Credentials git asks for through its credential protocol (never
    /// given on a command line); their password is also a secret.
    pub fn credentials(mut self, credentials: &crate::source::Credentials) -> Self {
        self = self.secret(credentials.password.clone());
        // The user name too, decoded (the URL's own form is the source's
        // secret): an http(s) URL's whole user part is secret, since a
        // token is often written as the user name, alone or with a
        // placeholder password (`TOKEN:x-oauth-basic`).
        self = self.secret(credentials.username.clone());
        self.credentials = Some(credentials.clone());
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Creates the bare repository (its parent must exist), without the
    /// sample hooks and other templates.
    pub fn init_bare(&self) -> Result<(), GitError> {
        let parent = self.git_dir.parent().unwrap_or(Path::new("/"));
        let spec = self
            .base_spec()
            .current_dir(parent)
            .args([
                "init",
                "--quiet",
                "--bare",
                "--template=",
                "--object-format=sha1",
            ])
            .arg(self.git_dir.as_os_str());
        self.check("init", command::run(&spec)?, usize::MAX)
            .map(drop)
    }

    fn base_spec(&self) -> CommandSpec {
        let mut spec = CommandSpec::new("git").timeout(self.timeout);
        for (k, v) in ENVIRONMENT {
            spec = spec.env(k, v);
        }
        let mut config: Vec<(String, String)> = HARDENING
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if let Some(p) = self.protocol {
            config.push((format!("protocol.{}.allow", p.name()), "always".to_owned()));
        }
        let ssh = self
            .ssh_command
            .clone()
            .unwrap_or_else(|| "ssh -o BatchMode=yes".to_owned());
        config.push(("core.sshCommand".to_owned(), ssh));
        if let Some(c) = &self.credentials {
            // After `credential.helper=` (which empties the list).
            config.push(("credential.helper".to_owned(), CREDENTIAL_HELPER.to_owned()));
            spec = spec
                .env("DATUM_GIT_HOST", &c.host)
                .env("DATUM_GIT_USERNAME", &c.username)
                .env("DATUM_GIT_PASSWORD", &c.password);
        }
        if self.protocol == Some(Protocol::Ssh) {
            spec = spec.env("GIT_SSH_VARIANT", "ssh");
        }
        for (k, v) in config {
            spec = spec.arg("-c").arg(format!("{k}={v}"));
        }
        spec
    }

    /// The full command for `args` against this repository.
    pub fn spec<I, S>(&self, args: I) -> CommandSpec
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let mut git_dir = OsString::from("--git-dir=");
        git_dir.push(&self.git_dir);
        self.base_spec()
            .current_dir(&self.git_dir)
            .arg(git_dir)
            .args(args)
    }

    /// Runs `args`; its standard output on success (at most `limit` bytes,
    /// more is an error), a [`GitError`] on failure.
    pub fn output<I, S>(&self, args: I, limit: usize) -> Result<Vec<u8>, GitError>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let what = subcommand(&args);
        let spec = self.spec(args).output_limit(limit);
        self.check(&what, command::run(&spec)?, limit)
    }

    /// Runs `args` with `input` on its standard input; its output.
    pub fn output_with_input<I, S>(
        &self,
        args: I,
        input: Vec<u8>,
        limit: usize,
    ) -> Result<Vec<u8>, GitError>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let what = subcommand(&args);
        let spec = self.spec(args).output_limit(limit).input(input);
        self.check(&what, command::run(&spec)?, limit)
    }

    /// Runs `args` and says only whether it exited 0 (for questions such as
    /// `merge-base --is-ancestor`); a program killed or timed out is an error.
    pub fn succeeds<I, S>(&self, args: I) -> Result<bool, GitError>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let what = subcommand(&args);
        let out = command::run(&self.spec(args))?;
        if out.timed_out {
            return Err(GitError::TimedOut {
                what,
                after: self.timeout,
            });
        }
        match out.status {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            status => Err(GitError::Failed {
                what,
                status,
                stderr: self.tail(&out),
            }),
        }
    }

    fn check(&self, what: &str, out: CommandOutput, limit: usize) -> Result<Vec<u8>, GitError> {
        if out.timed_out {
            return Err(GitError::TimedOut {
                what: what.to_owned(),
                after: self.timeout,
            });
        }
        if !out.success() {
            return Err(GitError::Failed {
                what: what.to_owned(),
                status: out.status,
                stderr: self.tail(&out),
            });
        }
        if out.stdout.truncated {
            return Err(GitError::TooLarge {
                what: what.to_owned(),
                limit,
            });
        }
        Ok(out.stdout.bytes)
    }

    /// The last lines of a command's standard error, secrets removed and
    /// control characters defused.
    fn tail(&self, out: &CommandOutput) -> String {
        let text = out.stderr.text();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let start = lines.len().saturating_sub(4);
        let mut tail = lines[start..].join("; ");
        for secret in &self.secrets {
            tail = tail.replace(secret.as_str(), "(sensitive)");
        }
        if tail.is_empty() {
            "(no message)".to_owned()
        } else {
            defuse(&tail)
        }
    }

    /// Streams the objects `ids` (in that order) from `git cat-file
    /// --batch`: read each with [`ObjectStream::next`].
    pub fn read_objects(&self, ids: Vec<String>) -> Result<ObjectStream, GitError> {
        let mut running = command::spawn(&self.spec(["cat-file", "--batch"]))?;
        let mut stdin = running
            .stdin
            .take()
            .ok_or_else(|| GitError::Stream("no input pipe".to_owned()))?;
        let expected = ids.len();
        // On its own thread: git answers while we are still asking, and a
        // pipe in each direction fills up long before 5,000 requests do.
        let feeder = std::thread::spawn(move || {
            let mut w = std::io::BufWriter::new(&mut stdin);
            for id in ids {
                if w.write_all(id.as_bytes()).is_err() || w.write_all(b"\n").is_err() {
                    return;
                }
            }
            let _ = w.flush();
        });
        let stdout = running
            .stdout
            .take()
            .ok_or_else(|| GitError::Stream("no output pipe".to_owned()))?;
        Ok(ObjectStream {
            reader: BufReader::with_capacity(128 * 1024, stdout),
            running: Some(running),
            feeder: Some(feeder),
            left: expected,
            git: self.clone(),
        })
    }
}

/// `text` with every control character shown escaped (`\u{1b}`, see
/// `datum_core::text::visible`): what a remote says (git prints its
/// `remote:` lines as they came, before anything is verified) or a tool
/// prints must not reach the reader's terminal or a log as escape sequences
/// (a window title, a cleared screen, the clipboard written through OSC 52,
/// a forged log line).
pub fn defuse(text: &str) -> String {
    datum_core::text::visible(text, &[]).into_owned()
}

/// The git subcommand of an argument list, for messages (never the other
/// arguments: a URL may hold a password).
fn subcommand(args: &[OsString]) -> String {
    args.iter()
        .map(|a| a.to_string_lossy())
        .find(|a| !a.starts_with('-'))
        .map_or_else(|| "(no command)".to_owned(), |a| a.into_owned())
}

/// One object of an [`ObjectStream`]: its id, type and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectHeader {
    pub id: String,
    /// `blob`, `tree`, `commit` or `tag`.
    pub kind: String,
    pub size: u64,
}

/// Objects coming out of `git cat-file --batch`, in the order asked.
pub struct ObjectStream {
    reader: BufReader<ChildStdout>,
    running: Option<Running>,
    feeder: Option<std::thread::JoinHandle<()>>,
    left: usize,
    git: Git,
}

impl std::fmt::Debug for ObjectStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStream")
            .field("left", &self.left)
            .finish()
    }
}

impl ObjectStream {
    /// Hands the next object's content to `f` (which may read all of it or
    /// not; the rest is skipped); `None` when every object asked for came.
    pub fn next<T>(
        &mut self,
        f: impl FnOnce(&ObjectHeader, &mut dyn Read) -> Result<T, HostError>,
    ) -> Result<Option<T>, GitError> {
        if self.left == 0 {
            return Ok(None);
        }
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .map_err(|e| GitError::Stream(format!("cannot read its output: {e}")))?;
        let fields: Vec<&str> = line.trim_end_matches('\n').split(' ').collect();
        let header = match fields.as_slice() {
            [id, kind, size] => ObjectHeader {
                id: (*id).to_owned(),
                kind: (*kind).to_owned(),
                size: size
                    .parse()
                    .map_err(|_| GitError::Stream(format!("a bad size in `{}`", line.trim())))?,
            },
            [id, "missing"] => {
                return Err(GitError::Stream(format!("object {id} is missing")));
            }
            _ if line.is_empty() => {
                return Err(self.ended_early());
            }
            _ => {
                return Err(GitError::Stream(format!(
                    "an unexpected line `{}`",
                    line.trim()
                )));
            }
        };
        let mut content = (&mut self.reader).take(header.size);
        let result = f(&header, &mut content)?;
        // Whatever `f` left, then the newline after the content.
        std::io::copy(&mut content, &mut std::io::sink())
            .map_err(|e| GitError::Stream(format!("cannot read its output: {e}")))?;
        if content.limit() != 0 {
            return Err(self.ended_early());
        }
        let mut newline = [0u8; 1];
        self.reader
            .read_exact(&mut newline)
            .map_err(|_| self.ended_early())?;
        self.left -= 1;
        Ok(Some(result))
    }

    fn ended_early(&mut self) -> GitError {
        match self.running.take().map(Running::finish) {
            Some(Ok(out)) if !out.success() => GitError::Failed {
                what: "cat-file".to_owned(),
                status: out.status,
                stderr: self.git.tail(&out),
            },
            _ => GitError::Stream("its output ended early".to_owned()),
        }
    }

    /// Waits for git to exit; an error if it failed.
    pub fn finish(mut self) -> Result<(), GitError> {
        if let Some(feeder) = self.feeder.take() {
            let _ = feeder.join();
        }
        let Some(running) = self.running.take() else {
            return Ok(());
        };
        let out = running.finish()?;
        self.git.check("cat-file", out, usize::MAX).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn have_git() -> bool {
        command::which("git").is_some()
    }

    fn plain_git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn the_configuration_is_minimal_and_explicit() {
        let dir = tempfile::tempdir().unwrap();
        let git = Git::new(dir.path().join("cache.git")).allow(Protocol::File);
        let spec = git.spec(["fetch"]);
        let args: Vec<String> = spec
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for want in [
            "core.hooksPath=/dev/null",
            "core.fsmonitor=false",
            "protocol.allow=never",
            "protocol.file.allow=always",
            "transfer.fsckObjects=true",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} missing in {args:?}");
        }
        assert!(!args.iter().any(|a| a == "protocol.ssh.allow=always"));
        assert_eq!(
            spec.current_dir.as_deref(),
            Some(dir.path().join("cache.git").as_path())
        );
        assert!(
            args.iter()
                .position(|a| a.starts_with("--git-dir="))
                .unwrap()
                < args.iter().position(|a| a == "fetch").unwrap()
        );
        let env: Vec<String> = spec
            .env
            .iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect();
        assert!(env.contains(&"GIT_CONFIG_NOSYSTEM=1".to_owned()), "{env:?}");
        assert!(
            env.contains(&"GIT_CONFIG_GLOBAL=/dev/null".to_owned()),
            "{env:?}"
        );
    }

    #[test]
    fn a_hook_named_by_the_repository_config_never_runs() {
        if !have_git() {
            eprintln!("skipped: no git");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache.git");
        let git = Git::new(&cache);
        git.init_bare().unwrap();
        assert!(
            !cache.join("hooks").join("pre-commit.sample").exists(),
            "no templates"
        );
        // A hostile configuration in the repository itself.
        let canary = dir.path().join("ran");
        let script = dir.path().join("evil.sh");
        std::fs::write(&script, format!("#!/bin/sh\ntouch {}\n", canary.display())).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut config = std::fs::read_to_string(cache.join("config")).unwrap();
        config.push_str(&format!(
            "[core]\n\tfsmonitor = {0}\n\thooksPath = {1}\n[alias]\n\tstatus = !{0}\n",
            script.display(),
            dir.path().display()
        ));
        std::fs::write(cache.join("config"), config).unwrap();
        // The same script as a hook, in the folder the config names.
        std::fs::copy(&script, dir.path().join("reference-transaction")).unwrap();
        // Make a commit in a work repository and fetch it.
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        plain_git(&work, &["init", "-q", "-b", "main"]);
        std::fs::write(work.join("a"), "a\n").unwrap();
        plain_git(&work, &["add", "a"]);
        plain_git(&work, &["commit", "-q", "-m", "one"]);
        let head = plain_git(&work, &["rev-parse", "HEAD"]).trim().to_owned();
        // The control: git as usually run obeys that configuration.
        let refspec = "+refs/heads/main:refs/datum/test";
        let cache_arg = format!("--git-dir={}", cache.display());
        let work_arg = work.display().to_string();
        plain_git(dir.path(), &[&cache_arg, "fetch", "-q", &work_arg, refspec]);
        assert!(canary.exists(), "the control did not run the hook");
        std::fs::remove_file(&canary).unwrap();
        plain_git(
            dir.path(),
            &[&cache_arg, "update-ref", "-d", "refs/datum/test"],
        );
        std::fs::remove_file(&canary).unwrap();
        let fetch = Git::new(&cache).allow(Protocol::File);
        fetch
            .output(
                [
                    OsString::from("fetch"),
                    OsString::from("--quiet"),
                    OsString::from("--"),
                    work.as_os_str().to_owned(),
                    OsString::from(refspec),
                ],
                1 << 20,
            )
            .unwrap();
        assert!(!canary.exists(), "the hook ran");
        // The one protocol allowed is the only one: git:// is refused.
        let err = Git::new(&cache)
            .allow(Protocol::File)
            .output(
                ["fetch", "--quiet", "--", "git://127.0.0.1:1/x", "main"],
                1 << 20,
            )
            .unwrap_err();
        assert!(
            err.to_string().contains("transport 'git' not allowed"),
            "{err}"
        );

        // Objects stream back byte for byte, in the order asked.
        let tree = git.output(["ls-tree", "-z", &head], 1 << 20).unwrap();
        let blob = String::from_utf8(tree).unwrap();
        let blob_id = blob.split_whitespace().nth(2).unwrap().to_owned();
        let mut stream = git
            .read_objects(vec![blob_id.clone(), head.clone(), blob_id])
            .unwrap();
        let mut seen = Vec::new();
        while let Some((kind, bytes)) = stream
            .next(|h, r| {
                let mut b = Vec::new();
                r.read_to_end(&mut b).unwrap();
                Ok((h.kind.clone(), b))
            })
            .unwrap()
        {
            seen.push((kind, bytes));
        }
        stream.finish().unwrap();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0], ("blob".to_owned(), b"a\n".to_vec()));
        assert_eq!(seen[1].0, "commit");
        assert_eq!(seen[2], seen[0]);

        let missing = git
            .read_objects(vec!["0".repeat(40)])
            .unwrap()
            .next(|_, _| Ok(()))
            .unwrap_err();
        assert!(missing.to_string().contains("missing"), "{missing}");
        assert!(
            !git.succeeds(["merge-base", "--is-ancestor", &head, &"0".repeat(40)])
                .is_ok_and(|b| b)
        );
    }

    #[test]
    fn no_hint_about_the_graft_file_crowds_an_error() {
        if !have_git() {
            eprintln!("skipped: no git");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        plain_git(&work, &["init", "-q", "-b", "main"]);
        plain_git(&work, &["commit", "-q", "--allow-empty", "-m", "one"]);
        let head = plain_git(&work, &["rev-parse", "HEAD"]).trim().to_owned();
        // A command that reads commits and fails: only git's own message.
        let err = Git::new(work.join(".git"))
            .output(["bundle", "create", "--quiet", "x.bundle", &head], 1 << 20)
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("empty bundle"), "{text}");
        assert!(!text.contains("hint"), "{text}");
    }

    #[test]
    fn secrets_never_reach_an_error() {
        if !have_git() {
            eprintln!("skipped: no git");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache.git");
        Git::new(&cache).init_bare().unwrap();
        let err = Git::new(&cache)
            .allow(Protocol::Http)
            .secret("hunter2-canary")
            .output(
                [
                    "fetch",
                    "--",
                    "http://user:hunter2-canary@127.0.0.1:1/x.git",
                    "main",
                ],
                1 << 20,
            )
            .unwrap_err();
        let text = err.to_string();
        assert!(!text.contains("hunter2-canary"), "{text}");
        assert!(text.starts_with("git fetch failed"), "{text}");

        // A token written as the user name (`https://tok%2Fen-canary@h/`) is
        // scrubbed decoded too, wherever git or the server repeats it, alone
        // and with a placeholder password beside it
        // (`https://tok%2Fen-canary:x-oauth-basic@h/`).
        let token = crate::source::Credentials {
            host: "127.0.0.1:1".to_owned(),
            username: "tok/en-canary".to_owned(),
            password: String::new(),
        };
        let placeholder = crate::source::Credentials {
            password: "x-oauth-basic".to_owned(),
            ..token.clone()
        };
        for credentials in [&token, &placeholder] {
            let err = Git::new(&cache)
                .allow(Protocol::Http)
                .credentials(credentials)
                .output(
                    [
                        "fetch",
                        "--",
                        "http://127.0.0.1:1/tok/en-canary.git",
                        "main",
                    ],
                    1 << 20,
                )
                .unwrap_err();
            let text = err.to_string();
            assert!(!text.contains("en-canary"), "{text}");
            assert!(text.contains("(sensitive)"), "{text}");
        }
        let token = placeholder;
        // Nor in a debug print of the git that holds them.
        let shown = format!("{:?}", Git::new(&cache).credentials(&token));
        assert!(!shown.contains("en-canary"), "{shown}");
        assert!(!shown.contains("x-oauth-basic"), "{shown}");
    }
}
