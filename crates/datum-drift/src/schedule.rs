//! The number an operator must be able to state per class: how long drift
//! can go unnoticed. The bound is the class's interval plus the time one
//! inspection takes (p95 over recent checks, from the state store). A
//! metadata-first class has two: that one for changes its metadata shows
//! (size, times, inode, owner, mode), and `audit_every` × interval plus the
//! inspection time for an edit that keeps size and times (only a content
//! audit reads it; without `audit_every`, never). A watched class has two
//! as well: under the agent, the debounce plus the inspection time for what
//! a watch sees, and interval + p95 for what no watch sees.
//!
//! Owns: [`ScheduleRow`]. Must not: read the store (the binary passes the
//! percentiles in). The formula itself is [`detection_bound`], in
//! `datum-core` so the agent (which depends on nothing else) states the
//! same.

use std::time::Duration;

pub use datum_core::bound::{Detection, detection_bound};

use serde::Serialize;

use crate::classes::{ClassSpec, ContentMode, Policy};

/// One line of `datum schedule`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleRow {
    pub class: String,
    pub interval_s: u64,
    pub content: ContentMode,
    pub policy: Policy,
    pub audit_every: Option<u64>,
    pub p50_ms: Option<u64>,
    pub p95_ms: Option<u64>,
    pub samples: usize,
    /// Interval + p95 (for a watched class under `datum agent`: the
    /// watch's debounce + p95 of watch-triggered checks, or of ordinary
    /// checks until the agent has measured one); `None` until a check has
    /// been measured.
    pub detection_bound_ms: Option<u64>,
    /// A metadata-first class: how long an edit that keeps size and times
    /// can go unnoticed (`audit_every` × interval + p95); `None` for a full
    /// class (covered by `detection_bound_ms`), for a metadata class without
    /// an audit (never detected: see `stamp_preserving_never`), or before a
    /// check was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stamp_preserving_bound_ms: Option<u64>,
    /// A metadata-first class without `audit_every`: an edit that keeps size
    /// and times is never detected.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stamp_preserving_never: bool,
    /// The class is watched (`watch: true`): under the agent a change is
    /// checked within the debounce, not at the next interval.
    pub watched: bool,
    /// A watched class: how long a change no watch sees can go unnoticed
    /// (interval + p95). A file is watched through its folder and on its
    /// own inode as the watches are armed, so a write through another hard
    /// link of a file replaced since (or of a file in a Tree) reaches no
    /// watch; nor does anything while a watch is lost. The
    /// interval's checks still find those. `None` for a polled class
    /// (`detection_bound_ms` is that bound) or before a check was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unwatched_bound_ms: Option<u64>,
    /// The agent finds out who changed each file (`attribute: true`).
    pub attributed: bool,
    /// The policy by who changed a resource (`on_change_by`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_change_by: Option<crate::classes::WriterRules>,
    pub resources: usize,
}

/// A metadata-first class's bound for an edit that keeps size and times:
/// the audit comes every `audit_every` checks of the class.
pub fn stamp_preserving_bound(
    interval: Duration,
    audit_every: u64,
    inspection_p95: Duration,
) -> Duration {
    interval.saturating_mul(u32::try_from(audit_every.max(1)).unwrap_or(u32::MAX)) + inspection_p95
}

impl ScheduleRow {
    /// The row of `spec`, with `resources` resources and `p` = (p50, p95,
    /// samples) of its checks. A watched class (`spec.watch`) states
    /// `debounce` + `watch_p95_ms` (the p95 of the agent's watch-triggered
    /// checks; `None` until it measured one, when the checks' p95 stands
    /// in) as its bound, and interval + p95 as `unwatched_bound_ms`; both
    /// are ignored for a polled class.
    pub fn new(
        spec: &ClassSpec,
        resources: usize,
        p: Option<(u64, u64, usize)>,
        debounce: Duration,
        watch_p95_ms: Option<u64>,
    ) -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let interval_bound = p.map(|x| {
            ms(detection_bound(
                spec.interval,
                Detection::Interval,
                Duration::from_millis(x.1),
            ))
        });
        let (detection_bound_ms, unwatched_bound_ms) = if spec.watch {
            let watched = watch_p95_ms.or(p.map(|x| x.1)).map(|p95| {
                ms(detection_bound(
                    spec.interval,
                    Detection::Watch { debounce },
                    Duration::from_millis(p95),
                ))
            });
            (watched, interval_bound)
        } else {
            (interval_bound, None)
        };
        ScheduleRow {
            class: spec.name.clone(),
            interval_s: spec.interval.as_secs(),
            content: spec.content,
            policy: spec.policy,
            audit_every: spec.audit_every,
            p50_ms: p.map(|x| x.0),
            p95_ms: p.map(|x| x.1),
            samples: p.map_or(0, |x| x.2),
            detection_bound_ms,
            stamp_preserving_bound_ms: match (spec.content, spec.audit_every, p) {
                (ContentMode::Metadata, Some(every), Some(x)) => Some(
                    stamp_preserving_bound(spec.interval, every, Duration::from_millis(x.1))
                        .as_millis() as u64,
                ),
                _ => None,
            },
            stamp_preserving_never: spec.content == ContentMode::Metadata
                && spec.audit_every.is_none(),
            resources,
            watched: spec.watch,
            unwatched_bound_ms,
            attributed: spec.attribute,
            on_change_by: spec.on_change_by,
        }
    }
}

/// `1h 0m 0.250s`-style text for a duration in milliseconds.
pub fn format_ms(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEBOUNCE: Duration = Duration::from_millis(100);

    #[test]
    fn bound_is_interval_plus_p95() {
        let spec = ClassSpec::default_named("normal");
        let row = ScheduleRow::new(&spec, 4, Some((100, 250, 7)), DEBOUNCE, None);
        assert_eq!(row.detection_bound_ms, Some(3_600_250));
        assert_eq!(format_ms(3_600_250), "1h 250ms");
        assert_eq!(
            ScheduleRow::new(&spec, 0, None, DEBOUNCE, None).detection_bound_ms,
            None
        );
        assert_eq!(row.stamp_preserving_bound_ms, None);
        assert!(!row.stamp_preserving_never);
    }

    #[test]
    fn a_metadata_class_states_the_audit_bound_for_stamp_preserving_edits() {
        let mut spec = ClassSpec::default_named("cheap");
        spec.content = ContentMode::Metadata;
        spec.interval = Duration::from_secs(300);
        spec.audit_every = Some(3);
        let row = ScheduleRow::new(&spec, 4, Some((100, 250, 7)), DEBOUNCE, None);
        assert_eq!(row.detection_bound_ms, Some(300_250));
        assert_eq!(row.stamp_preserving_bound_ms, Some(900_250));
        spec.audit_every = None;
        let row = ScheduleRow::new(&spec, 4, Some((100, 250, 7)), DEBOUNCE, None);
        assert_eq!(row.stamp_preserving_bound_ms, None);
        assert!(row.stamp_preserving_never);
    }

    #[test]
    fn a_watched_class_states_the_watch_bound_and_the_interval_bound_for_what_no_watch_sees() {
        let mut spec = ClassSpec::default_named("critical");
        spec.interval = Duration::from_secs(60);
        spec.watch = true;
        // The watch-triggered checks measured: debounce + their p95.
        let row = ScheduleRow::new(&spec, 3, Some((100, 250, 7)), DEBOUNCE, Some(20));
        assert!(row.watched);
        assert_eq!(row.detection_bound_ms, Some(120));
        assert_eq!(row.unwatched_bound_ms, Some(60_250));
        // None measured yet: the checks' p95 stands in.
        let row = ScheduleRow::new(&spec, 3, Some((100, 250, 7)), DEBOUNCE, None);
        assert_eq!(row.detection_bound_ms, Some(350));
        assert_eq!(row.unwatched_bound_ms, Some(60_250));
        let row = ScheduleRow::new(&spec, 3, None, DEBOUNCE, None);
        assert_eq!(
            (row.detection_bound_ms, row.unwatched_bound_ms),
            (None, None)
        );
        // A polled class ignores the watch's inputs.
        spec.watch = false;
        let row = ScheduleRow::new(&spec, 3, Some((100, 250, 7)), DEBOUNCE, Some(20));
        assert!(!row.watched);
        assert_eq!(row.detection_bound_ms, Some(60_250));
        assert_eq!(row.unwatched_bound_ms, None);
    }
}
