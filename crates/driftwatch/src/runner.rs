//! Every call to `tofu` or `terraform` goes through [`Runner`].
//!
//! The real implementation spawns the process; tests substitute a fake that returns
//! fixture JSON (OpenTofu cannot be installed on the build machines, so the fake is how the
//! `run` and `codify` paths are tested end to end). The plan functions here own the rules
//! of the conversation: both plans with `-detailed-exitcode` (0 and 2 continue, anything
//! else is an error), plan files saved with `-out` in a temporary directory that is removed
//! on every path out (a [`SavedPlan`] is dropped), and plans read back with `show -json`
//! into a file in that directory, never from the human output, so that a big plan is
//! streamed from disk rather than held in memory.

use std::path::Path;

/// What a finished command returned.
#[derive(Debug, Clone, Default)]
pub struct CmdOutput {
    /// The exit code, or -1 when the process was killed by a signal.
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs one command line. `argv[0]` is the program. `Sync`, because several stacks run
/// side by side on one runner.
pub trait Runner: Sync {
    fn run(&self, argv: &[String]) -> std::io::Result<CmdOutput>;

    /// Like [`Runner::run`], with stdout written to the file `stdout` instead of kept in
    /// memory (a `show -json` of a big stack is hundreds of megabytes). The default runs
    /// [`Runner::run`] and writes what it returned.
    fn run_to_file(&self, argv: &[String], stdout: &Path) -> std::io::Result<CmdOutput> {
        let out = self.run(argv)?;
        std::fs::write(stdout, &out.stdout)?;
        Ok(CmdOutput {
            stdout: Vec::new(),
            ..out
        })
    }
}

/// Spawns real processes, stdin closed so a prompt cannot hang a nightly job.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessRunner;

impl Runner for ProcessRunner {
    fn run(&self, argv: &[String]) -> std::io::Result<CmdOutput> {
        let Some((program, args)) = argv.split_first() else {
            return Err(std::io::Error::other("empty command line"));
        };
        let output = std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()?;
        Ok(CmdOutput {
            code: output.status.code().unwrap_or(-1),
            stdout: output.stdout,
            stderr: output.stderr,
        })
    }

    fn run_to_file(&self, argv: &[String], stdout: &Path) -> std::io::Result<CmdOutput> {
        let Some((program, args)) = argv.split_first() else {
            return Err(std::io::Error::other("empty command line"));
        };
        let file = std::fs::File::create(stdout)?;
        let output = std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(file)
            .output()?;
        Ok(CmdOutput {
            code: output.status.code().unwrap_or(-1),
            stdout: Vec::new(),
            stderr: output.stderr,
        })
    }
}

/// A plan saved with `-out` and its `show -json` output, both in a private temporary
/// directory that is removed when this is dropped (they hold secrets in plain text).
#[derive(Debug)]
pub struct SavedPlan {
    _dir: tempfile::TempDir,
    /// The `show -json` output.
    pub json: std::path::PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(
        "cannot run {program}: not found (not on PATH, not at that path, or its #! interpreter is missing); --binary names the engine: tofu (the default), terraform, or a path to either"
    )]
    NotFound { program: String },
    #[error("cannot run {program}: {error}")]
    Spawn {
        program: String,
        error: std::io::Error,
    },
    #[error("{label} failed (exit {code}): {stderr}")]
    Failed {
        label: String,
        code: i32,
        stderr: String,
    },
    #[error("cannot create a temporary directory for plan files: {0}")]
    TempDir(std::io::Error),
}

/// How long each engine command of one stack took, in the order they ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timings {
    pub steps: Vec<(String, std::time::Duration)>,
}

impl Timings {
    /// Time spent waiting for the engine (every step added up).
    pub fn engine(&self) -> std::time::Duration {
        self.steps.iter().map(|(_, d)| *d).sum()
    }
}

/// Settings shared by every call.
#[derive(Debug, Clone)]
pub struct Tofu {
    pub binary: String,
    pub chdir: String,
    pub lock_timeout: String,
}

/// The exit codes of `-detailed-exitcode`.
const PLAN_CLEAN: i32 = 0;
const PLAN_CHANGES: i32 = 2;

impl Tofu {
    pub fn plan_argv(&self, out: &Path, refresh_only: bool) -> Vec<String> {
        let mut argv = vec![
            self.binary.clone(),
            format!("-chdir={}", self.chdir),
            "plan".to_owned(),
        ];
        if refresh_only {
            argv.push("-refresh-only".to_owned());
        }
        argv.extend([
            "-input=false".to_owned(),
            "-no-color".to_owned(),
            "-detailed-exitcode".to_owned(),
            format!("-lock-timeout={}", self.lock_timeout),
            format!("-out={}", out.display()),
        ]);
        argv
    }

    pub fn show_argv(&self, plan_file: &Path) -> Vec<String> {
        vec![
            self.binary.clone(),
            format!("-chdir={}", self.chdir),
            "show".to_owned(),
            "-json".to_owned(),
            plan_file.display().to_string(),
        ]
    }

    /// `apply -refresh-only` limited to `targets` (each as `-target=ADDRESS`), so that
    /// only the accepted resources take reality into state and every other drift stays
    /// visible as drift.
    pub fn apply_refresh_only_argv(&self, targets: &[String]) -> Vec<String> {
        let mut argv = vec![
            self.binary.clone(),
            format!("-chdir={}", self.chdir),
            "apply".to_owned(),
            "-refresh-only".to_owned(),
            "-auto-approve".to_owned(),
            "-input=false".to_owned(),
            "-no-color".to_owned(),
            format!("-lock-timeout={}", self.lock_timeout),
        ];
        argv.extend(targets.iter().map(|t| format!("-target={t}")));
        argv
    }

    /// [`tail`] of a failed command's stderr, with the values of the stack's secret
    /// variables hidden ([`crate::engine_secrets`]): a provider's error quotes the value it
    /// rejected, and this text goes to every output.
    fn tail(&self, stderr: &[u8]) -> String {
        let secrets = crate::engine_secrets::EngineSecrets::gather(Path::new(&self.chdir));
        let mut text = tail(&secrets.hide(&String::from_utf8_lossy(stderr)));
        if let Some(hint) = self.not_initialised() {
            text.push_str(&hint);
        }
        text
    }

    /// A failed command's hint when the stack was never initialised: its folder is there
    /// but holds no data directory (`.terraform`, or `TF_DATA_DIR`, which the engine reads
    /// relative to the folder). The engine then says only that the lock file's provider
    /// selections are inconsistent, or that a provider or module is missing, without
    /// naming `init` in the lines driftwatch quotes.
    fn not_initialised(&self) -> Option<String> {
        let chdir = Path::new(&self.chdir);
        let data_dir = std::env::var_os("TF_DATA_DIR")
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| ".terraform".into());
        if !chdir.is_dir() || chdir.join(&data_dir).is_dir() {
            return None;
        }
        Some(format!(
            " ({} is not initialised: it has no {} folder; run `{} -chdir={} init` first)",
            self.chdir,
            Path::new(&data_dir).display(),
            self.binary,
            self.chdir
        ))
    }

    /// The error of a command that could not be started: one not found says so in words
    /// (the OS's "No such file or directory" reads like a missing stack).
    fn spawn_error(&self, error: std::io::Error) -> RunError {
        if error.kind() == std::io::ErrorKind::NotFound {
            RunError::NotFound {
                program: self.binary.clone(),
            }
        } else {
            RunError::Spawn {
                program: self.binary.clone(),
                error,
            }
        }
    }

    fn call(&self, runner: &dyn Runner, argv: &[String]) -> Result<CmdOutput, RunError> {
        runner.run(argv).map_err(|error| self.spawn_error(error))
    }

    /// Plan, save, and read back as JSON. Returns the `show -json` bytes.
    pub fn plan_json(&self, runner: &dyn Runner, refresh_only: bool) -> Result<Vec<u8>, RunError> {
        let saved = self.plan(runner, refresh_only, &mut Timings::default())?;
        std::fs::read(&saved.json).map_err(RunError::TempDir)
    }

    /// Plan, save, and write `show -json` beside the plan file, recording how long the
    /// plan and the `show` took. Nothing of the plan is held in memory.
    pub fn plan(
        &self,
        runner: &dyn Runner,
        refresh_only: bool,
        timings: &mut Timings,
    ) -> Result<SavedPlan, RunError> {
        let label = if refresh_only {
            "refresh-only plan"
        } else {
            "plan"
        };
        // Dropped (and removed) on every return path, errors included.
        let dir = tempfile::Builder::new()
            .prefix("driftwatch-")
            .tempdir()
            .map_err(RunError::TempDir)?;
        let out = dir.path().join(if refresh_only {
            "refresh.tfplan"
        } else {
            "plan.tfplan"
        });
        let started = std::time::Instant::now();
        let plan = self.call(runner, &self.plan_argv(&out, refresh_only))?;
        timings.steps.push((label.to_owned(), started.elapsed()));
        if plan.code != PLAN_CLEAN && plan.code != PLAN_CHANGES {
            return Err(RunError::Failed {
                label: label.to_owned(),
                code: plan.code,
                stderr: self.tail(&plan.stderr),
            });
        }
        let json = dir.path().join(if refresh_only {
            "refresh.json"
        } else {
            "plan.json"
        });
        let started = std::time::Instant::now();
        let show = runner
            .run_to_file(&self.show_argv(&out), &json)
            .map_err(|error| self.spawn_error(error))?;
        timings
            .steps
            .push((format!("show -json of the {label}"), started.elapsed()));
        if show.code != 0 {
            return Err(RunError::Failed {
                label: format!("show -json of the {label}"),
                code: show.code,
                stderr: self.tail(&show.stderr),
            });
        }
        Ok(SavedPlan { _dir: dir, json })
    }

    /// `apply -refresh-only -auto-approve -target=...`: write reality into state for
    /// `targets` only.
    pub fn apply_refresh_only(
        &self,
        runner: &dyn Runner,
        targets: &[String],
    ) -> Result<(), RunError> {
        let out = self.call(runner, &self.apply_refresh_only_argv(targets))?;
        if out.code != 0 {
            return Err(RunError::Failed {
                label: "apply -refresh-only".to_owned(),
                code: out.code,
                stderr: self.tail(&out.stderr),
            });
        }
        Ok(())
    }
}

/// Enough of a command's stderr to say why, without flooding the log: the engine's first
/// `Error:` diagnostic and the line after it when there is one (`Error: Error acquiring
/// the state lock / Error message: resource temporarily unavailable`), else the last three
/// lines.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.trim_start_matches(['│', '╷', '╵', ' ']).trim_end())
        .filter(|l| !l.trim().is_empty())
        .collect();
    let picked: &[&str] = match lines.iter().position(|l| l.starts_with("Error:")) {
        Some(i) => &lines[i..(i + 2).min(lines.len())],
        None => &lines[lines.len().saturating_sub(3)..],
    };
    let joined = picked.join(" / ");
    if joined.is_empty() {
        "(no error output)".to_owned()
    } else {
        crate::report::truncate(&joined, 400)
    }
}

/// A scripted runner for tests: answers by subcommand and records every call.
///
/// `plan` calls answer with the next queued exit code for their kind (refresh-only or
/// normal) and `show -json` answers with the JSON queued for the plan file most recently
/// written. It is part of the library (not `cfg(test)`) so integration tests and the
/// documentation's examples can use it.
#[derive(Debug, Default)]
pub struct FakeRunner {
    state: std::sync::Mutex<FakeState>,
}

#[derive(Debug, Default)]
struct FakeState {
    calls: Vec<Vec<String>>,
    refresh: std::collections::VecDeque<(i32, Vec<u8>)>,
    normal: std::collections::VecDeque<(i32, Vec<u8>)>,
    apply_codes: std::collections::VecDeque<i32>,
    shown: std::collections::HashMap<String, Vec<u8>>,
}

impl FakeRunner {
    pub fn new() -> Self {
        FakeRunner::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut FakeState) -> R) -> R {
        let mut guard = match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    /// Queue the answer to the next `plan -refresh-only`.
    pub fn push_refresh(&self, code: i32, json: impl Into<Vec<u8>>) {
        self.with(|s| s.refresh.push_back((code, json.into())));
    }

    /// Queue the answer to the next normal `plan`.
    pub fn push_plan(&self, code: i32, json: impl Into<Vec<u8>>) {
        self.with(|s| s.normal.push_back((code, json.into())));
    }

    /// Queue the exit code of the next `apply`.
    pub fn push_apply(&self, code: i32) {
        self.with(|s| s.apply_codes.push_back(code));
    }

    /// Every command line run so far.
    pub fn calls(&self) -> Vec<Vec<String>> {
        self.with(|s| s.calls.clone())
    }
}

impl Runner for FakeRunner {
    fn run(&self, argv: &[String]) -> std::io::Result<CmdOutput> {
        self.with(|s| {
            s.calls.push(argv.to_vec());
            let sub = argv.get(2).map(String::as_str).unwrap_or_default();
            match sub {
                "plan" => {
                    let refresh = argv.iter().any(|a| a == "-refresh-only");
                    let queue = if refresh {
                        &mut s.refresh
                    } else {
                        &mut s.normal
                    };
                    let (code, json) = queue
                        .pop_front()
                        .ok_or_else(|| std::io::Error::other("fake runner: no plan queued"))?;
                    if let Some(out) = argv.iter().find_map(|a| a.strip_prefix("-out=")) {
                        // The real tool writes the file; so does the fake, so tests can
                        // check that the temporary directory is removed afterwards.
                        std::fs::write(out, b"fake plan file")?;
                        s.shown.insert(out.to_owned(), json);
                    }
                    Ok(CmdOutput {
                        code,
                        ..CmdOutput::default()
                    })
                }
                "show" => {
                    let file = argv.last().cloned().unwrap_or_default();
                    let json = s.shown.get(&file).cloned().unwrap_or_default();
                    Ok(CmdOutput {
                        code: 0,
                        stdout: json,
                        stderr: Vec::new(),
                    })
                }
                "apply" => Ok(CmdOutput {
                    code: s.apply_codes.pop_front().unwrap_or(0),
                    ..CmdOutput::default()
                }),
                _ => Err(std::io::Error::other("fake runner: unexpected command")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tofu() -> Tofu {
        Tofu {
            binary: "tofu".into(),
            chdir: "stacks/shop".into(),
            lock_timeout: "5m".into(),
        }
    }

    #[test]
    fn tail_prefers_the_engine_error() {
        let lock = b"\nError: Error acquiring the state lock\n\nError message: resource temporarily unavailable\nLock Info:\n  ID: 2031\n\nTerraform acquires a state lock to protect the state from being written\nflag, but this is not recommended.\n";
        assert_eq!(
            tail(&String::from_utf8_lossy(lock)),
            "Error: Error acquiring the state lock / Error message: resource temporarily unavailable"
        );
        let boxed = "\u{256d}\n\u{2502} Error: Inconsistent dependency lock file\n\u{2502} \n\u{2502} The following dependency selections recorded\n\u{2575}\n";
        assert_eq!(
            tail(boxed),
            "Error: Inconsistent dependency lock file / The following dependency selections recorded"
        );
        assert_eq!(tail("a\nb\nc\nd\n"), "b / c / d");
        assert_eq!(tail(""), "(no error output)");
    }

    #[test]
    fn plan_flags() {
        let argv = tofu().plan_argv(Path::new("/tmp/x/p"), true);
        assert_eq!(
            argv,
            vec![
                "tofu",
                "-chdir=stacks/shop",
                "plan",
                "-refresh-only",
                "-input=false",
                "-no-color",
                "-detailed-exitcode",
                "-lock-timeout=5m",
                "-out=/tmp/x/p"
            ]
        );
        assert!(
            !tofu()
                .plan_argv(Path::new("p"), false)
                .contains(&"-refresh-only".to_owned())
        );
    }

    #[test]
    fn only_zero_and_two_continue_and_temp_dir_is_removed() {
        let fake = FakeRunner::new();
        fake.push_refresh(2, b"{}".to_vec());
        fake.push_refresh(1, b"{}".to_vec());
        assert_eq!(tofu().plan_json(&fake, true).unwrap(), b"{}");
        assert!(matches!(
            tofu().plan_json(&fake, true),
            Err(RunError::Failed { code: 1, .. })
        ));
        for call in fake.calls() {
            if let Some(out) = call.iter().find_map(|a| a.strip_prefix("-out=")) {
                let dir = Path::new(out).parent().unwrap();
                assert!(!dir.exists(), "{} was left behind", dir.display());
            }
        }
        assert_eq!(
            fake.calls()[1][2..4],
            ["show".to_owned(), "-json".to_owned()]
        );
    }
}
