//! Running programs: validators, systemctl, apt.
//!
//! A program is run directly with an argument vector, never through a shell,
//! so nothing in a repository can become shell syntax. It gets no standard
//! input (or exactly the bytes the caller gives it), a fixed environment (a
//! standard PATH, `LC_ALL=C` so output is stable, plus what the caller
//! adds), its own process group (so a timeout kills whatever it started
//! too), and a deadline. Output is captured up to a
//! bound, because a validator echoing a huge file must not exhaust memory.
//! This module must not decide what a status means: callers (the validator
//! definitions, the service provider) do.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use wait_timeout::ChildExt;

use crate::HostError;

/// The PATH a child gets, and where [`which`] looks after `$PATH`: the
/// standard Debian directories, sbin included (sshd, visudo and nft live
/// there and a non-login root shell may lack them).
pub const STANDARD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How much of each output stream is kept by default.
pub const DEFAULT_OUTPUT_LIMIT: usize = 64 * 1024;

/// How long readers may keep going after the program exited (something it
/// started may still hold the pipes) before its process group is killed.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// What to run. Build with [`CommandSpec::new`] and the chained setters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// A program name looked up with [`which`], or an absolute path.
    pub program: String,
    pub args: Vec<OsString>,
    /// Added to the fixed environment (and may override it).
    pub env: Vec<(OsString, OsString)>,
    pub timeout: Duration,
    /// Bytes kept of stdout and of stderr, each.
    pub output_limit: usize,
    /// Written to the program's standard input (then closed); `None` gives
    /// it `/dev/null`.
    pub input: Option<Vec<u8>>,
    /// The working directory; `None` keeps this process's.
    pub current_dir: Option<PathBuf>,
}

impl CommandSpec {
    pub fn new(program: impl Into<String>) -> Self {
        CommandSpec {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            timeout: Duration::from_secs(30),
            output_limit: DEFAULT_OUTPUT_LIMIT,
            input: None,
            current_dir: None,
        }
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes;
        self
    }

    /// Feeds `bytes` to the program's standard input.
    pub fn input(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.input = Some(bytes.into());
        self
    }

    /// Runs the program in `dir`.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// The process to start, before its standard streams are chosen.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(&self.args)
            .env_clear()
            .env("PATH", STANDARD_PATH)
            .env("LC_ALL", "C")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .process_group(0);
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        cmd
    }
}

/// One captured output stream, cut at the limit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Captured {
    pub bytes: Vec<u8>,
    /// More was written than was kept.
    pub truncated: bool,
}

impl Captured {
    /// The kept bytes as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// How a program ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// The program actually run (after the PATH lookup).
    pub program: PathBuf,
    /// Exit status; `None` when it was killed by a signal.
    pub status: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    pub stdout: Captured,
    pub stderr: Captured,
    /// The deadline passed and the program was killed.
    pub timed_out: bool,
    pub elapsed: Duration,
}

impl CommandOutput {
    /// Exited by itself with status 0.
    pub fn success(&self) -> bool {
        self.status == Some(0) && !self.timed_out
    }
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Finds a program: a name containing `/` must itself be executable; a bare
/// name is looked up in `$PATH`, then in [`STANDARD_PATH`].
pub fn which(program: &str) -> Option<PathBuf> {
    if program.is_empty() {
        return None;
    }
    if program.contains('/') {
        let path = PathBuf::from(program);
        return is_executable_file(&path).then_some(path);
    }
    let from_env = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&from_env)
        .chain(std::env::split_paths(STANDARD_PATH))
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable_file(candidate))
}

/// Reads a stream to its end, keeping the first `limit` bytes. Reading on
/// past the limit keeps the program from blocking on a full pipe.
fn drain(mut stream: impl Read, limit: usize) -> Captured {
    let mut captured = Captured::default();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = limit.saturating_sub(captured.bytes.len());
                captured.bytes.extend_from_slice(&buf[..n.min(room)]);
                if n > room {
                    captured.truncated = true;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    captured
}

fn spawn_drain(
    stream: Option<impl Read + Send + 'static>,
    limit: usize,
) -> mpsc::Receiver<Captured> {
    let (tx, rx) = mpsc::channel();
    if let Some(stream) = stream {
        std::thread::spawn(move || {
            let _ = tx.send(drain(stream, limit));
        });
    }
    rx
}

fn kill_group(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        // ESRCH (already gone) is the common, harmless case.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Runs a program to completion or its deadline. A status other than 0 is
/// not an error here; failing to start it is.
pub fn run(spec: &CommandSpec) -> Result<CommandOutput, HostError> {
    start(spec)?.finish()
}

/// A program started by [`start`], not yet waited for.
pub(crate) struct Started {
    child: std::process::Child,
    program: PathBuf,
    started: Instant,
    timeout: Duration,
    output_limit: usize,
    /// What [`Started::finish`] writes to its standard input.
    input: Option<Vec<u8>>,
}

/// Starts a program from the calling thread (which matters to the sandbox:
/// the child inherits the thread's namespaces and root), its standard input
/// a pipe when the spec has input for it, `/dev/null` otherwise.
pub(crate) fn start(spec: &CommandSpec) -> Result<Started, HostError> {
    let stdin = if spec.input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    start_with(spec, stdin)
}

/// Finds and starts the program with `stdin` and piped output.
fn start_with(spec: &CommandSpec, stdin: Stdio) -> Result<Started, HostError> {
    let program = which(&spec.program).ok_or_else(|| HostError::ProgramNotFound {
        program: spec.program.clone(),
    })?;
    let started = Instant::now();
    let child = spec
        .command(&program)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| HostError::Spawn {
            program: program.clone(),
            source,
        })?;
    Ok(Started {
        child,
        program,
        started,
        timeout: spec.timeout,
        output_limit: spec.output_limit,
        input: spec.input.clone(),
    })
}

/// Waits for `child` up to `timeout`, then kills its process group; its
/// status and whether the deadline passed.
fn wait_deadline(
    child: &mut std::process::Child,
    program: &Path,
    timeout: Duration,
) -> Result<(std::process::ExitStatus, bool), HostError> {
    let pid = child.id();
    match child.wait_timeout(timeout) {
        Ok(Some(status)) => Ok((status, false)),
        Ok(None) => {
            kill_group(pid);
            let status = child.wait().map_err(|source| HostError::Spawn {
                program: program.to_path_buf(),
                source,
            })?;
            Ok((status, true))
        }
        Err(source) => {
            kill_group(pid);
            let _ = child.wait();
            Err(HostError::Spawn {
                program: program.to_path_buf(),
                source,
            })
        }
    }
}

/// Starts a program and leaves it to run on its own: no standard input or
/// output, the same fixed environment as [`run`], its own process group (a
/// Ctrl-C at the terminal that started the caller does not reach it), not
/// waited for, no deadline (the program bounds its own work). Returns its
/// pid. For work that must not hold up the caller, such as delivering a
/// pass's fleet report after the pass; the caller is expected to exit soon
/// (the child is then reaped by init).
pub fn spawn_detached(spec: &CommandSpec) -> Result<u32, HostError> {
    let program = which(&spec.program).ok_or_else(|| HostError::ProgramNotFound {
        program: spec.program.clone(),
    })?;
    let child = Command::new(&program)
        .args(&spec.args)
        .env_clear()
        .env("PATH", STANDARD_PATH)
        .env("LC_ALL", "C")
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|source| HostError::Spawn { program, source })?;
    Ok(child.id())
}

impl Started {
    /// Feeds the input, drains the output (on threads of the calling
    /// thread), waits up to the deadline, and kills the process group past
    /// it.
    pub(crate) fn finish(self) -> Result<CommandOutput, HostError> {
        let Started {
            mut child,
            program,
            started,
            timeout,
            output_limit,
            input,
        } = self;
        if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
            // On its own thread: a program that writes before it has read
            // all of its input must not deadlock against us. A program that
            // exits without reading it all makes the write fail, which is
            // its business.
            std::thread::spawn(move || {
                let _ = stdin.write_all(&bytes);
            });
        }
        let pid = child.id();
        let stdout = spawn_drain(child.stdout.take(), output_limit);
        let stderr = spawn_drain(child.stderr.take(), output_limit);

        let (status, timed_out) = wait_deadline(&mut child, &program, timeout)?;

        let collect = |rx: &mpsc::Receiver<Captured>| match rx.recv_timeout(DRAIN_GRACE) {
            Ok(c) => c,
            Err(mpsc::RecvTimeoutError::Disconnected) => Captured::default(),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Something the program started still holds the pipe open.
                kill_group(pid);
                rx.recv_timeout(DRAIN_GRACE).unwrap_or(Captured {
                    bytes: Vec::new(),
                    truncated: true,
                })
            }
        };
        let stdout = collect(&stdout);
        let stderr = collect(&stderr);

        Ok(CommandOutput {
            program,
            status: status.code(),
            signal: status.signal(),
            stdout,
            stderr,
            timed_out,
            elapsed: started.elapsed(),
        })
    }
}

/// A program started by [`spawn`] whose output the caller reads as it comes
/// (a stream too large to capture, such as `git cat-file --batch`). Its
/// standard error is captured up to the limit in the background; dropping
/// it without [`Running::finish`] kills its process group.
#[derive(Debug)]
pub struct Running {
    program: PathBuf,
    child: std::process::Child,
    /// Where the caller writes the program's input (closed when dropped).
    pub stdin: Option<std::process::ChildStdin>,
    /// The program's standard output, read (or taken) by the caller.
    pub stdout: Option<std::process::ChildStdout>,
    stderr: mpsc::Receiver<Captured>,
    started: Instant,
    timeout: Duration,
    finished: bool,
}

/// Starts a program with piped standard input and output (see [`Running`]).
/// `spec.input` is ignored: the caller writes to [`Running::stdin`].
pub fn spawn(spec: &CommandSpec) -> Result<Running, HostError> {
    let Started {
        mut child,
        program,
        started,
        timeout,
        output_limit,
        input: _,
    } = start_with(spec, Stdio::piped())?;
    let stderr = spawn_drain(child.stderr.take(), output_limit);
    let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
    Ok(Running {
        program,
        child,
        stdin,
        stdout,
        stderr,
        started,
        timeout,
        finished: false,
    })
}

impl Running {
    /// Closes the input, waits for the program (up to what is left of its
    /// deadline; then its process group is killed) and says how it ended.
    /// Standard output is whatever the caller did not read (not captured).
    pub fn finish(mut self) -> Result<CommandOutput, HostError> {
        self.finished = true;
        drop(self.stdin.take());
        let left = self.timeout.saturating_sub(self.started.elapsed());
        let (status, timed_out) = wait_deadline(&mut self.child, &self.program, left)?;
        let stderr = self.stderr.recv_timeout(DRAIN_GRACE).unwrap_or_default();
        Ok(CommandOutput {
            program: self.program.clone(),
            status: status.code(),
            signal: status.signal(),
            stdout: Captured::default(),
            stderr,
            timed_out,
            elapsed: self.started.elapsed(),
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.finished {
            kill_group(self.child.id());
            let _ = self.child.wait();
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_output_are_captured_without_a_shell() {
        // The argument would be expanded by a shell; run directly it is not.
        let out = run(&CommandSpec::new("echo").arg("$HOME; rm -rf /")).unwrap();
        assert!(out.success());
        assert_eq!(out.stdout.text(), "$HOME; rm -rf /\n");
        assert!(!out.stdout.truncated);

        let out = run(&CommandSpec::new("false")).unwrap();
        assert_eq!(out.status, Some(1));
        assert!(!out.success());
    }

    #[test]
    fn a_detached_program_runs_on_after_the_call_in_its_own_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let pid = spawn_detached(
            &CommandSpec::new("sh")
                .args(["-c", &format!("sleep 0.2; echo $$ > {}", marker.display())]),
        )
        .unwrap();
        assert!(!marker.exists(), "the call does not wait for the program");
        let own = rustix::process::getpgid(rustix::process::Pid::from_raw(pid as i32)).unwrap();
        assert_eq!(
            own.as_raw_nonzero().get() as u32,
            pid,
            "its own process group"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !marker.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(marker.exists(), "the program ran to its end");
    }

    #[test]
    fn the_environment_is_fixed_plus_what_the_caller_adds() {
        let out = run(&CommandSpec::new("env").env("DATUM_TEST", "1")).unwrap();
        let text = out.stdout.text();
        assert!(text.contains("LC_ALL=C\n"), "{text}");
        assert!(text.contains("DATUM_TEST=1\n"), "{text}");
        assert!(!text.contains("HOME="), "inherited variables leak: {text}");
    }

    #[test]
    fn output_is_bounded_and_marked_truncated() {
        let out = run(&CommandSpec::new("head")
            .args(["-c", "300000", "/dev/zero"])
            .output_limit(1000))
        .unwrap();
        assert!(out.success());
        assert_eq!(out.stdout.bytes.len(), 1000);
        assert!(out.stdout.truncated);
    }

    #[test]
    fn a_program_past_its_deadline_is_killed() {
        let started = Instant::now();
        let out = run(&CommandSpec::new("sleep")
            .arg("30")
            .timeout(Duration::from_millis(200)))
        .unwrap();
        assert!(out.timed_out);
        assert!(!out.success());
        assert_eq!(out.signal, Some(9));
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn input_and_working_directory_are_the_callers() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(&CommandSpec::new("sh")
            .args(["-c", "pwd; cat"])
            .current_dir(dir.path())
            .input(b"from stdin\n".to_vec()))
        .unwrap();
        assert!(out.success(), "{out:?}");
        let want = format!(
            "{}\nfrom stdin\n",
            dir.path().canonicalize().unwrap().display()
        );
        assert_eq!(out.stdout.text(), want);
    }

    #[test]
    fn a_running_program_streams_and_is_killed_when_dropped() {
        let mut running = spawn(&CommandSpec::new("cat")).unwrap();
        let mut stdin = running.stdin.take().unwrap();
        stdin.write_all(b"one line\n").unwrap();
        drop(stdin);
        let mut text = String::new();
        running
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "one line\n");
        assert!(running.finish().unwrap().success());

        let running = spawn(&CommandSpec::new("sleep").arg("30")).unwrap();
        let pid = running.child.id();
        drop(running);
        let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        assert!(
            rustix::process::test_kill_process(pid).is_err(),
            "still running after drop"
        );
    }

    #[test]
    fn missing_programs_are_named() {
        let err = run(&CommandSpec::new("datum-no-such-program")).unwrap_err();
        assert!(
            matches!(&err, HostError::ProgramNotFound { program } if program == "datum-no-such-program")
        );
        assert_eq!(which("datum-no-such-program"), None);
        assert_eq!(which(""), None);
        assert!(which("sh").is_some());
        assert_eq!(which("/etc/passwd"), None, "not executable");
    }
}
