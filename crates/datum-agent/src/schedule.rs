//! When each class is checked: per-class slots with a per-host phase
//! (jitter), the backstop full pass, inspection times and the detection
//! bound an operator can state per class.
//!
//! Owns time arithmetic only. It must not sleep, read the clock itself or
//! run checks: the daemon passes `now` in (so tests control time) and blocks
//! until [`Schedule::next_deadline`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::check::ClassSpec;

/// How long the agent gathers file-change events before checking: one edit
/// often arrives as several events (truncate, write, close, rename).
pub const WATCH_DEBOUNCE: Duration = Duration::from_millis(100);

/// Default interval of the backstop full pass (`--full-interval`).
pub const DEFAULT_FULL_INTERVAL: Duration = Duration::from_secs(3600);

/// Inspection samples kept per class and pool for the p95 (bounded: memory
/// stays flat).
const SAMPLES_KEPT: usize = 64;

/// Which checks an inspection time is a sample of. Each bound takes the p95
/// of its own: a check of the few resources a watch reported is short, and
/// in one pool with the class's checks it would pull down the p95 the
/// interval bound adds (what no watch sees waits for a complete check), as
/// `datum-check` keeps `agent-watch` apart from `check` in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inspection {
    /// A complete check of the class: the full pass or its interval's.
    Scheduled,
    /// A check of the resources a watch reported.
    Watch,
}

/// The phase of `class` on `host`, in `[0, interval)`: a hash of both names,
/// so hosts of a fleet check at different moments while each host keeps the
/// same moments across restarts. FNV-1a, not `DefaultHasher`, whose output
/// may change between Rust releases.
pub fn jitter_offset(host: &str, class: &str, interval: Duration) -> Duration {
    let millis = interval.as_millis();
    if millis == 0 {
        return Duration::ZERO;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in host.bytes().chain([0u8]).chain(class.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let offset = u128::from(hash) % millis;
    Duration::from_millis(u64::try_from(offset).unwrap_or(0))
}

/// How long from `unix_now` until the next slot of a class: slots are the
/// Unix times `t` with `(t - offset) mod interval == 0`. Always in
/// `(0, interval]`, so a check that just ran is not run again at once.
pub fn until_next_slot(unix_now: Duration, interval: Duration, offset: Duration) -> Duration {
    let period = interval.as_millis();
    if period == 0 {
        return Duration::from_millis(1);
    }
    let now = unix_now.as_millis();
    let phase = offset.as_millis() % period;
    // (now - phase) mod period, without going negative.
    let into = (now + period - phase) % period;
    let wait = period - into;
    Duration::from_millis(u64::try_from(wait).unwrap_or(u64::MAX))
}

/// The bound the agent exports as `datum_detection_bound_seconds`: the
/// formula `datum schedule` and the fleet report use too, in `datum-core`.
pub use datum_core::bound::{Detection, detection_bound};

/// What the daemon should run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    Full,
    Class(String),
}

struct Slot {
    spec: ClassSpec,
    offset: Duration,
    next: Instant,
    /// Inspection times of complete checks.
    scheduled: VecDeque<Duration>,
    /// Inspection times of watch-triggered checks.
    watch: VecDeque<Duration>,
}

/// The agent's timetable.
pub struct Schedule {
    host: String,
    slots: Vec<Slot>,
    full_every: Duration,
    next_full: Instant,
}

impl Schedule {
    /// A timetable whose first full pass is due at `now` (an agent that
    /// starts checks everything once, so its metrics are complete at once).
    pub fn new(
        host: &str,
        classes: &[ClassSpec],
        full_every: Duration,
        now: Instant,
        unix_now: Duration,
    ) -> Self {
        let mut schedule = Self {
            host: host.to_owned(),
            slots: Vec::new(),
            full_every,
            next_full: now,
        };
        schedule.set_classes(classes, now, unix_now);
        schedule
    }

    /// Replaces the classes (after a reload). Inspection samples of classes
    /// that keep their name are kept.
    pub fn set_classes(&mut self, classes: &[ClassSpec], now: Instant, unix_now: Duration) {
        let mut old: Vec<Slot> = std::mem::take(&mut self.slots);
        for spec in classes {
            let offset = jitter_offset(&self.host, &spec.name, spec.interval);
            let next = now + until_next_slot(unix_now, spec.interval, offset);
            let (scheduled, watch) = old
                .iter_mut()
                .find(|s| s.spec.name == spec.name)
                .map(|s| {
                    (
                        std::mem::take(&mut s.scheduled),
                        std::mem::take(&mut s.watch),
                    )
                })
                .unwrap_or_default();
            self.slots.push(Slot {
                spec: spec.clone(),
                offset,
                next,
                scheduled,
                watch,
            });
        }
    }

    pub fn classes(&self) -> impl Iterator<Item = &ClassSpec> {
        self.slots.iter().map(|s| &s.spec)
    }

    pub fn full_interval(&self) -> Duration {
        self.full_every
    }

    /// The earliest moment something is due (the daemon blocks until then).
    pub fn next_deadline(&self) -> Instant {
        self.slots
            .iter()
            .map(|s| s.next)
            .fold(self.next_full, Instant::min)
    }

    /// The work due at `now`: the full pass first (it covers every class),
    /// then the class that has waited longest.
    pub fn due(&self, now: Instant) -> Option<Due> {
        if self.next_full <= now {
            return Some(Due::Full);
        }
        self.slots
            .iter()
            .filter(|s| s.next <= now)
            .min_by_key(|s| s.next)
            .map(|s| Due::Class(s.spec.name.clone()))
    }

    /// Asks for a full pass as soon as possible (a watch overflowed, a
    /// repository was reloaded).
    pub fn request_full(&mut self, now: Instant) {
        self.next_full = self.next_full.min(now);
    }

    /// A full pass finished at `now`: every class was checked too.
    pub fn ran_full(&mut self, now: Instant, unix_now: Duration) {
        self.next_full = now + self.full_every;
        for slot in &mut self.slots {
            slot.next = now + until_next_slot(unix_now, slot.spec.interval, slot.offset);
        }
    }

    /// A check of `class` finished at `now`.
    pub fn ran_class(&mut self, class: &str, now: Instant, unix_now: Duration) {
        if let Some(slot) = self.slots.iter_mut().find(|s| s.spec.name == class) {
            slot.next = now + until_next_slot(unix_now, slot.spec.interval, slot.offset);
        }
    }

    /// Remembers how long inspecting `class` took, in a check of kind
    /// `kind`.
    pub fn record_inspection(&mut self, class: &str, took: Duration, kind: Inspection) {
        if let Some(slot) = self.slots.iter_mut().find(|s| s.spec.name == class) {
            let samples = match kind {
                Inspection::Scheduled => &mut slot.scheduled,
                Inspection::Watch => &mut slot.watch,
            };
            if samples.len() == SAMPLES_KEPT {
                samples.pop_front();
            }
            samples.push_back(took);
        }
    }

    /// The 95th percentile of the recent inspection times of `class` in
    /// checks of kind `kind` (zero before the first sample). Until a
    /// watch-triggered check has been measured, the complete checks' p95
    /// stands in for it (as in `datum schedule`).
    pub fn inspection_p95(&self, class: &str, kind: Inspection) -> Duration {
        let Some(slot) = self.slots.iter().find(|s| s.spec.name == class) else {
            return Duration::ZERO;
        };
        match kind {
            Inspection::Watch if !slot.watch.is_empty() => p95(&slot.watch),
            _ => p95(&slot.scheduled),
        }
    }
}

/// The nearest-rank 95th percentile of `samples` (zero when empty).
fn p95(samples: &VecDeque<Duration>) -> Duration {
    let mut sorted: Vec<Duration> = samples.iter().copied().collect();
    sorted.sort_unstable();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Nearest rank: ceil(0.95 n) - 1.
    let rank = (sorted.len() * 95).div_ceil(100).saturating_sub(1);
    sorted[rank.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, secs: u64, watch: bool) -> ClassSpec {
        ClassSpec {
            name: name.into(),
            interval: Duration::from_secs(secs),
            watch,
            policy: "report".into(),
        }
    }

    #[test]
    fn jitter_is_stable_per_host_and_spreads_a_fleet() {
        let interval = Duration::from_secs(60);
        let a = jitter_offset("web-01", "critical", interval);
        assert_eq!(a, jitter_offset("web-01", "critical", interval));
        assert!(a < interval);
        let offsets: std::collections::BTreeSet<Duration> = (0..50)
            .map(|i| jitter_offset(&format!("web-{i:02}"), "critical", interval))
            .collect();
        // 50 hosts over 60 000 ms: collisions are possible but rare.
        assert!(offsets.len() >= 45, "{} distinct offsets", offsets.len());
        let max = offsets.iter().max().copied().unwrap_or_default();
        let min = offsets.iter().min().copied().unwrap_or_default();
        assert!(
            max - min > Duration::from_secs(30),
            "spread {min:?}..{max:?}"
        );
        assert_eq!(jitter_offset("h", "c", Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn next_slot_is_within_one_interval_and_on_the_phase() {
        let interval = Duration::from_secs(10);
        let offset = Duration::from_secs(3);
        // At 100 s: slots at 103, 113... -> 3 s.
        assert_eq!(
            until_next_slot(Duration::from_secs(100), interval, offset),
            Duration::from_secs(3)
        );
        // Exactly on a slot: the next one, a whole interval later.
        assert_eq!(
            until_next_slot(Duration::from_secs(103), interval, offset),
            interval
        );
        assert_eq!(
            until_next_slot(Duration::from_millis(104_500), interval, offset),
            Duration::from_millis(8_500)
        );
    }

    /// A check that ran late does not move the class's slots: the next is
    /// the next slot after it, not an interval after the late check (the
    /// daemon test cannot see this on a loaded machine, where any check
    /// may be late).
    #[test]
    fn a_late_check_keeps_the_class_on_its_slots() {
        let t0 = Instant::now();
        let interval = Duration::from_secs(10);
        let offset = jitter_offset("h", "critical", interval);
        // A slot of the class: unix time 1_000_000 s + offset (1_000_000
        // is a whole number of intervals).
        let slot = Duration::from_secs(1_000_000) + offset;
        let mut s = Schedule::new(
            "h",
            &[spec("critical", 10, false)],
            Duration::from_secs(3600),
            t0,
            slot - Duration::from_secs(1),
        );
        s.ran_full(t0, slot - Duration::from_secs(1));
        assert_eq!(s.next_deadline(), t0 + Duration::from_secs(1));
        // Run 7 s late: the next is 3 s later, at the next slot.
        let late = t0 + Duration::from_secs(8);
        assert_eq!(s.due(late), Some(Due::Class("critical".into())));
        s.ran_class("critical", late, slot + Duration::from_secs(7));
        assert_eq!(s.next_deadline(), late + Duration::from_secs(3));
        // On time: a whole interval later.
        let on_time = late + Duration::from_secs(3);
        s.ran_class("critical", on_time, slot + interval);
        assert_eq!(s.next_deadline(), on_time + interval);
    }

    #[test]
    fn full_pass_first_then_classes_in_order() {
        let t0 = Instant::now();
        let unix = Duration::from_secs(1_000_000);
        let mut s = Schedule::new(
            "h",
            &[spec("critical", 2, true), spec("normal", 5, false)],
            Duration::from_secs(3600),
            t0,
            unix,
        );
        assert_eq!(s.due(t0), Some(Due::Full));
        s.ran_full(t0, unix);
        assert_eq!(s.due(t0), None);
        let deadline = s.next_deadline();
        assert!(deadline > t0 && deadline <= t0 + Duration::from_secs(2));
        // Far enough ahead, both are due; the one waiting longest first.
        let later = t0 + Duration::from_secs(6);
        let first = s.due(later);
        assert!(matches!(first, Some(Due::Class(_))));
        if let Some(Due::Class(name)) = &first {
            s.ran_class(name, later, unix + Duration::from_secs(6));
        }
        let second = s.due(later);
        assert!(matches!(second, Some(Due::Class(_))));
        assert_ne!(first, second);
        s.request_full(later);
        assert_eq!(s.due(later), Some(Due::Full));
    }

    #[test]
    fn p95_uses_bounded_samples() {
        let t0 = Instant::now();
        let mut s = Schedule::new(
            "h",
            &[spec("c", 2, false)],
            DEFAULT_FULL_INTERVAL,
            t0,
            Duration::ZERO,
        );
        assert_eq!(s.inspection_p95("c", Inspection::Scheduled), Duration::ZERO);
        for ms in 1..=100 {
            s.record_inspection("c", Duration::from_millis(ms), Inspection::Scheduled);
        }
        // Only the last 64 (37..=100) are kept; p95 of those is 97.
        assert_eq!(
            s.inspection_p95("c", Inspection::Scheduled),
            Duration::from_millis(97)
        );
        // A reload keeps samples of a class with the same name.
        s.set_classes(
            &[spec("c", 4, false), spec("d", 4, false)],
            t0,
            Duration::ZERO,
        );
        assert_eq!(
            s.inspection_p95("c", Inspection::Scheduled),
            Duration::from_millis(97)
        );
        assert_eq!(s.inspection_p95("d", Inspection::Scheduled), Duration::ZERO);
    }

    /// A watch-triggered check looks at a few resources: its short time
    /// must not pull down the p95 of the complete checks, which the
    /// interval bound (what no watch sees) adds.
    #[test]
    fn watch_triggered_and_scheduled_checks_keep_their_own_p95() {
        let t0 = Instant::now();
        let mut s = Schedule::new(
            "h",
            &[spec("critical", 60, true)],
            DEFAULT_FULL_INTERVAL,
            t0,
            Duration::ZERO,
        );
        let long = Duration::from_secs(2);
        let short = Duration::from_millis(3);
        s.record_inspection("critical", long, Inspection::Scheduled);
        // No watch-triggered check measured yet: the checks' p95 stands in.
        assert_eq!(s.inspection_p95("critical", Inspection::Watch), long);
        for _ in 0..40 {
            s.record_inspection("critical", short, Inspection::Watch);
        }
        s.record_inspection("critical", long, Inspection::Scheduled);
        assert_eq!(s.inspection_p95("critical", Inspection::Scheduled), long);
        assert_eq!(s.inspection_p95("critical", Inspection::Watch), short);
        // A reload keeps both pools.
        s.set_classes(&[spec("critical", 60, true)], t0, Duration::ZERO);
        assert_eq!(s.inspection_p95("critical", Inspection::Scheduled), long);
        assert_eq!(s.inspection_p95("critical", Inspection::Watch), short);
    }
}
