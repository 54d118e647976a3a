//! The one progress style of every long command (plan, apply, check, pull):
//! an indicatif bar on stderr, on a terminal only (hidden when piped, so logs
//! and CI output stay clean), in human units.
//!
//! A bar over resources also shows the work inside them as it happens, from
//! the process's counters (`datum_core::progress`, fed by the observers and
//! the file hashing): resources observed, files and bytes hashed and the rate,
//! so a check of one 3 GB Tree moves while its one resource is being read.

use std::fmt::Write as _;
use std::time::Duration;

use datum_core::progress::Snapshot;
use indicatif::{
    HumanBytes, HumanCount, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle,
};

/// How often a bar redraws itself (its counters move between events).
const TICK: Duration = Duration::from_millis(120);

/// The template of a bar over resources; `{work}` is [`work`].
const RESOURCES: &str = "{spinner} [{bar:30}] {pos}/{len} resources  {work}  {elapsed}  {wide_msg}";

/// The template of a spinner over hashing alone.
const HASHING: &str = "{spinner} {work}  {elapsed}";

/// The template of a spinner over steps of unknown length.
const STEPS: &str = "{spinner} {wide_msg}  {elapsed}";

/// Whether progress is drawn at all: stderr is a terminal.
pub fn wanted() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// A bar over `total` resources, or `None` when stderr is not a terminal.
pub fn resources(total: u64) -> Option<ProgressBar> {
    wanted().then(|| resources_to(total, ProgressDrawTarget::stderr()))
}

/// [`resources`] drawn to `target` (tests draw to a hidden target).
pub fn resources_to(total: u64, target: ProgressDrawTarget) -> ProgressBar {
    let start = Snapshot::now();
    let style = ProgressStyle::with_template(RESOURCES)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key(
            "work",
            move |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&work(Snapshot::since(start), state.elapsed()));
            },
        )
        .progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(Some(total), target).with_style(style);
    bar.enable_steady_tick(TICK);
    bar
}

/// A spinner over hashing alone (`datum fingerprint`): files and bytes
/// hashed and the rate, or `None` when stderr is not a terminal.
pub fn hashing() -> Option<ProgressBar> {
    hashing_with("")
}

/// [`hashing`] while the repository compiles (its `source:` files are
/// hashed unless the cache of an earlier compile knows them).
pub fn compiling() -> Option<ProgressBar> {
    hashing_with("compiling the repository: ")
}

fn hashing_with(prefix: &'static str) -> Option<ProgressBar> {
    wanted().then(|| {
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
/// not a terminal.
pub fn steps() -> Option<ProgressBar> {
    wanted().then(|| {
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
}
