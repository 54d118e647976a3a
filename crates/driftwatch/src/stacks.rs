//! Several stacks in one run: which stacks (`--chdir` repeated, or a stacks file), and a
//! bounded pool that checks them side by side.
//!
//! A stacks file lists one stack per line, `DIR` or `NAME=DIR`, with `DIR` relative to the
//! file; blank lines and lines starting with `#` are skipped. A stack's name defaults to
//! its directory's name; names must be unique, because a name is the stack's dedupe key
//! and its history. The pool runs at most `jobs` stacks at once and returns the results in
//! the order the stacks were listed, whatever order they finished in; one stack failing
//! never stops the others.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One stack to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackSpec {
    pub name: String,
    pub chdir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum StacksError {
    #[error("{path}: cannot read the stacks file: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path}:{line}: {reason}")]
    Line {
        path: String,
        line: usize,
        reason: String,
    },
    #[error("two stacks are named {name:?} ({first} and {second}); name them with NAME=DIR")]
    Duplicate {
        name: String,
        first: String,
        second: String,
    },
    #[error(
        "a stack is named \"summary\" ({dir}), and --markdown-dir writes the summary table to summary.md; name it with NAME=DIR in a stacks file"
    )]
    ReservedName { dir: String },
}

/// The name of a stack directory: its last component, after resolving `.` and links.
pub fn default_name(chdir: &Path) -> String {
    std::fs::canonicalize(chdir)
        .ok()
        .as_deref()
        .and_then(Path::file_name)
        .or_else(|| chdir.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "default".to_owned())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Read a stacks file.
pub fn from_file(path: &Path) -> Result<Vec<StackSpec>, StacksError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| StacksError::Read {
        path: shown.clone(),
        error,
    })?;
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    let mut specs = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |reason: String| StacksError::Line {
            path: shown.clone(),
            line: i + 1,
            reason,
        };
        let (name, dir) = match line.split_once('=') {
            Some((name, dir)) if valid_name(name.trim()) => {
                (Some(name.trim().to_owned()), dir.trim())
            }
            Some((name, _)) if !name.contains('/') => {
                return Err(bad(format!(
                    "{:?} is not a stack name (letters, digits, '-', '_' and '.')",
                    name.trim()
                )));
            }
            _ => (None, line),
        };
        if dir.is_empty() {
            return Err(bad("no directory".to_owned()));
        }
        let chdir = base.join(dir);
        if !chdir.is_dir() {
            return Err(bad(format!("{} is not a directory", chdir.display())));
        }
        let name = name.unwrap_or_else(|| default_name(&chdir));
        specs.push(StackSpec { name, chdir });
    }
    if specs.is_empty() {
        return Err(StacksError::Line {
            path: shown,
            line: text.lines().count().max(1),
            reason: "no stacks listed".to_owned(),
        });
    }
    Ok(specs)
}

/// Refuse two stacks with one name.
pub fn check_unique(specs: &[StackSpec]) -> Result<(), StacksError> {
    for (i, a) in specs.iter().enumerate() {
        if let Some(b) = specs[i + 1..].iter().find(|b| b.name == a.name) {
            return Err(StacksError::Duplicate {
                name: a.name.clone(),
                first: a.chdir.display().to_string(),
                second: b.chdir.display().to_string(),
            });
        }
    }
    Ok(())
}

/// The name `--markdown-dir` keeps for the summary table (`summary.md`).
pub const SUMMARY_NAME: &str = "summary";

/// Refuse a stack whose page would be the summary's file (`--markdown-dir`): one of the
/// two would be overwritten by the other.
pub fn check_markdown_names(specs: &[StackSpec]) -> Result<(), StacksError> {
    match specs.iter().find(|s| s.name == SUMMARY_NAME) {
        Some(s) => Err(StacksError::ReservedName {
            dir: s.chdir.display().to_string(),
        }),
        None => Ok(()),
    }
}

/// How many stacks to check at once by default: one per CPU.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Run `check` on every stack, at most `jobs` at a time; results in `specs` order.
pub fn run_bounded<T, F>(specs: &[StackSpec], jobs: usize, check: F) -> Vec<T>
where
    T: Send,
    F: Fn(&StackSpec) -> T + Sync,
{
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<T>>> = Mutex::new(specs.iter().map(|_| None).collect());
    let workers = jobs.clamp(1, specs.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(spec) = specs.get(i) else { break };
                    let result = check(spec);
                    let mut slots = match results.lock() {
                        Ok(g) => g,
                        Err(poisoned) => poisoned.into_inner(),
                    };
                    slots[i] = Some(result);
                }
            });
        }
    });
    let slots = match results.into_inner() {
        Ok(v) => v,
        Err(poisoned) => poisoned.into_inner(),
    };
    // Every index below specs.len() was taken by exactly one worker and filled in.
    slots.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stacks_file_lines() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["net", "shop/prod"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        let file = dir.path().join("stacks.txt");
        std::fs::write(&file, "# nightly\n\nnet\nshop-prod = shop/prod\n").unwrap();
        let specs = from_file(&file).unwrap();
        assert_eq!(specs[0].name, "net");
        assert_eq!(specs[1].name, "shop-prod");
        assert_eq!(specs[1].chdir, dir.path().join("shop/prod"));
        std::fs::write(&file, "net\nmissing\n").unwrap();
        let msg = from_file(&file).unwrap_err().to_string();
        assert!(msg.starts_with(&format!("{}:2: ", file.display())), "{msg}");
        std::fs::write(&file, "bad name=net\n").unwrap();
        assert!(from_file(&file).unwrap_err().to_string().contains(":1: "));
        std::fs::write(&file, "# nothing\n").unwrap();
        assert!(from_file(&file).is_err());
        let twice = [
            StackSpec {
                name: "a".into(),
                chdir: "x/a".into(),
            },
            StackSpec {
                name: "a".into(),
                chdir: "y/a".into(),
            },
        ];
        assert!(
            check_unique(&twice)
                .unwrap_err()
                .to_string()
                .contains("x/a and y/a")
        );
    }

    #[test]
    fn pool_is_bounded_and_keeps_order() {
        let specs: Vec<StackSpec> = (0..7)
            .map(|i| StackSpec {
                name: format!("s{i}"),
                chdir: PathBuf::from(format!("d{i}")),
            })
            .collect();
        let running = AtomicUsize::new(0);
        let peak = AtomicUsize::new(0);
        let out = run_bounded(&specs, 3, |spec| {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            // Later stacks finish first.
            let n: u64 = spec.name[1..].parse().unwrap();
            std::thread::sleep(Duration::from_millis(40 - 5 * n));
            running.fetch_sub(1, Ordering::SeqCst);
            spec.name.clone()
        });
        assert_eq!(out, ["s0", "s1", "s2", "s3", "s4", "s5", "s6"]);
        let peak = peak.load(Ordering::SeqCst);
        assert!((2..=3).contains(&peak), "peak {peak}");
    }
}
