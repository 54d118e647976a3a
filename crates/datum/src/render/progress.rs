//! The one progress style of every long command (plan, apply, check, pull):
//! an indicatif bar on stderr, on a terminal only (hidden when piped, so logs
//! and CI output stay clean), in human units, and for `--output human` only:
//! a machine format (json, markdown) gets no decoration on stderr, only its
//! warnings and errors, whichever command made it.
//!
//! A bar over resources also shows the work inside them as it happens, from
//! the process's counters (`datum_core::progress`, fed by the observers and
//! the file hashing): resources observed, files and bytes hashed and the rate,
//! so a check of one 3 GB Tree moves while its one resource is being read.
//! While the pass waits for a step with nothing to count (a job systemd runs
//! for a Service, up to its `timeout:`; the `daemon-reload` before it; its
//! `settle:`; an `apt-get` transaction), the bar says what it waits for, for
//! how long so far and at most how long, in place of those counters
//! (`datum_core::progress::waiting`, [`waited`]).

use std::fmt::Write as _;
use std::time::Duration;

use datum_core::progress::{Snapshot, Wait};

use crate::cli::Format;
use indicatif::{
    HumanBytes, HumanCount, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle,
};

/// How often a bar redraws itself (its counters move between events).
const TICK: Duration = Duration::from_millis(120);

/// The template of a bar over resources; `{work}` is [`work`].
const RESOURCES: &str = "{spinner} [{bar:30}] {pos}/{len} resources  {work}  {elapsed}  {wide_msg}";

/// How long a wait lasts before the bar names it: a quick reload is not
/// worth a flash of words.
const WAIT_SHOWN_AFTER: Duration = Duration::from_secs(1);

/// The template of a spinner over hashing alone.
const HASHING: &str = "{spinner} {work}  {elapsed}";

/// The template of a spinner over steps of unknown length.
const STEPS: &str = "{spinner} {wide_msg}  {elapsed}";

/// Whether progress is drawn at all: stderr is a terminal.
fn terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Whether a command whose result leaves as `output` draws progress: for a
/// person (`--output human`: `Format::wants_progress`) on a terminal only.
pub fn wanted(output: Format) -> bool {
    output.wants_progress() && terminal()
}

/// A bar over `total` resources, or `None` when stderr is not a terminal
/// or the result is not for a person.
pub fn resources(output: Format, total: u64) -> Option<ProgressBar> {
    wanted(output).then(|| resources_to(total, ProgressDrawTarget::stderr()))
}

/// [`resources`] drawn to `target` (tests draw to a hidden target).
pub fn resources_to(total: u64, target: ProgressDrawTarget) -> ProgressBar {
    let start = Snapshot::now();
    let style = ProgressStyle::with_template(RESOURCES)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key(
            "work",
            move |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let text = match datum_core::progress::current_wait() {
                    Some(wait) if wait.elapsed >= WAIT_SHOWN_AFTER => waited(&wait),
                    _ => work(Snapshot::since(start), state.elapsed()),
                };
                let _ = w.write_str(&text);
            },
        )
        .progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(Some(total), target).with_style(style);
    bar.enable_steady_tick(TICK);
    bar
}

/// A spinner over hashing alone (`datum fingerprint`): files and bytes
/// hashed and the rate, or `None` as [`resources`] says.
pub fn hashing(output: Format) -> Option<ProgressBar> {
    hashing_with(output, "")
}

/// [`hashing`] while the repository compiles (its `source:` files are
/// hashed unless the cache of an earlier compile knows them).
pub fn compiling(output: Format) -> Option<ProgressBar> {
    hashing_with(output, "compiling the repository: ")
}

fn hashing_with(output: Format, prefix: &'static str) -> Option<ProgressBar> {
    wanted(output).then(|| {
        let start = Snapshot::now();
        let style = ProgressStyle::with_template(HASHING)
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .with_key(
                "work",
                move |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let done = Snapshot::since(start);
                    let _ = w.write_str(prefix);
                    let _ = w.write_str(&hashed(done, state.elapsed()));
                },
            );
        let bar =
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()).with_style(style);
        bar.enable_steady_tick(TICK);
        bar
    })
}

/// A spinner whose message names the current step, or `None` when stderr is
/// not a terminal (the caller asks for one with `--output human` only).
pub fn steps() -> Option<ProgressBar> {
    terminal().then(|| {
        let style = ProgressStyle::with_template(STEPS)
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let bar =
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()).with_style(style);
        bar.enable_steady_tick(TICK);
        bar
    })
}

/// `observed 120, 3,204 files 1.20 GiB hashed (310.5 MiB/s)`: what the
/// counters say was done in `elapsed`.
pub fn work(done: Snapshot, elapsed: Duration) -> String {
    let mut out = format!("observed {}", HumanCount(done.observed));
    if done.files > 0 || done.bytes > 0 {
        let _ = write!(out, ", {}", hashed(done, elapsed));
    }
    out
}

/// `waiting for systemd: restarting nginx.service (12s, up to 2m)`: a step
/// waited for, how long so far and at most how long.
pub fn waited(wait: &Wait) -> String {
    let so_far = wait.elapsed.as_secs();
    match wait.limit {
        Some(limit) => format!(
            "{} ({so_far}s, up to {})",
            wait.what,
            humantime::format_duration(limit)
        ),
        None => format!("{} ({so_far}s)", wait.what),
    }
}

/// `3,204 files 1.20 GiB hashed (310.5 MiB/s)`.
fn hashed(done: Snapshot, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(0.001);
    let rate = (done.bytes as f64 / secs) as u64;
    format!(
        "{} files {} hashed ({}/s)",
        HumanCount(done.files),
        HumanBytes(done.bytes),
        HumanBytes(rate)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_in_human_units_with_a_rate() {
        let done = Snapshot {
            observed: 1,
            files: 12_345,
            bytes: 3 * 1024 * 1024 * 1024,
        };
        assert_eq!(
            work(done, Duration::from_secs(2)),
            "observed 1, 12,345 files 3.00 GiB hashed (1.50 GiB/s)"
        );
        assert_eq!(work(Snapshot::default(), Duration::ZERO), "observed 0");
    }

    /// A terminal a test reads back: what the bar drew, each line as it
    /// was last written.
    #[derive(Debug, Default, Clone)]
    struct Screen(std::sync::Arc<std::sync::Mutex<String>>);

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            200
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(&format!("{s}\n"))
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            self.write_str("\n")
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A pass waiting for systemd's job (a Service's restart, up to its
    /// `timeout:`) shows what it waits for on the bar, once it has waited a
    /// second, and the counters again once the wait is over.
    #[test]
    fn a_bar_over_resources_says_what_a_slow_step_waits_for() {
        let screen = Screen::default();
        let bar = resources_to(2, ProgressDrawTarget::term_like(Box::new(screen.clone())));
        let last_line = || {
            bar.tick();
            let text = screen.0.lock().unwrap().clone();
            text.lines()
                .rfind(|l| !l.is_empty())
                .unwrap_or("")
                .to_owned()
        };
        let started = std::time::Instant::now();
        let wait = datum_core::progress::waiting(
            "waiting for systemd: restarting h77.service",
            Some(Duration::from_secs(120)),
        );
        let quick = last_line();
        // Not shown before a second (asserted only when this thread did get
        // there within the second: a loaded machine may hold it longer).
        if started.elapsed() < Duration::from_millis(900) {
            assert!(!quick.contains("waiting"), "{quick}");
        }
        std::thread::sleep(Duration::from_millis(1100));
        // Shown at a draw after the first second (waited for: a draw may be
        // skipped by indicatif's rate limit or come late under load, and the
        // last one drawn may predate the second).
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut slow = last_line();
        while !slow.contains("waiting") && std::time::Instant::now() < deadline {
            std::thread::sleep(TICK);
            slow = last_line();
        }
        let waited = started.elapsed().as_secs();
        assert!(
            slow.contains("waiting for systemd: restarting h77.service (")
                && (1..=waited).any(|s| slow.contains(&format!("({s}s, up to 2m)"))),
            "{slow}"
        );
        drop(wait);
        // Redrawn at a later tick (waited for: under load a tick may come
        // late, never not at all).
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut after = last_line();
        while after.contains("waiting") && std::time::Instant::now() < deadline {
            std::thread::sleep(TICK);
            after = last_line();
        }
        assert!(
            !after.contains("waiting") && after.contains("observed"),
            "{after}"
        );
        bar.finish_and_clear();
    }

    #[test]
    fn a_wait_says_how_long_so_far_and_at_most() {
        let wait = Wait {
            what: "waiting for systemd: reloading nginx.service".to_owned(),
            elapsed: Duration::from_millis(12_400),
            limit: Some(Duration::from_secs(90)),
        };
        assert_eq!(
            waited(&wait),
            "waiting for systemd: reloading nginx.service (12s, up to 1m 30s)"
        );
        let unbounded = Wait {
            limit: None,
            ..wait
        };
        assert_eq!(
            waited(&unbounded),
            "waiting for systemd: reloading nginx.service (12s)"
        );
    }
}
