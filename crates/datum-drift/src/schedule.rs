//! The number an operator must be able to state per class: how long drift
//! can go unnoticed. The bound is the class's interval plus the time one
//! inspection takes (p95 over recent checks, from the state store).
//!
//! Owns: [`ScheduleRow`] and [`detection_bound`]. Must not: read the store
//! (the binary passes the percentiles in).

use std::time::Duration;

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
    /// watch's debounce + p95); `None` until a check has been measured.
    pub detection_bound_ms: Option<u64>,
    /// The class is watched (`watch: true`): under the agent a change is
    /// checked within the debounce, not at the next interval.
    pub watched: bool,
    /// The agent finds out who changed each file (`attribute: true`).
    pub attributed: bool,
    /// The policy by who changed a resource (`on_change_by`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_change_by: Option<crate::classes::WriterRules>,
    pub resources: usize,
}

/// Interval + inspection time.
pub fn detection_bound(interval: Duration, inspection_p95: Duration) -> Duration {
    interval + inspection_p95
}

impl ScheduleRow {
    pub fn new(spec: &ClassSpec, resources: usize, p: Option<(u64, u64, usize)>) -> Self {
        ScheduleRow {
            class: spec.name.clone(),
            interval_s: spec.interval.as_secs(),
            content: spec.content,
            policy: spec.policy,
            audit_every: spec.audit_every,
            p50_ms: p.map(|x| x.0),
            p95_ms: p.map(|x| x.1),
            samples: p.map_or(0, |x| x.2),
            detection_bound_ms: p.map(|x| {
                detection_bound(spec.interval, Duration::from_millis(x.1)).as_millis() as u64
            }),
            resources,
            watched: false,
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

    #[test]
    fn bound_is_interval_plus_p95() {
        let spec = ClassSpec::default_named("normal");
        let row = ScheduleRow::new(&spec, 4, Some((100, 250, 7)));
        assert_eq!(row.detection_bound_ms, Some(3_600_250));
        assert_eq!(format_ms(3_600_250), "1h 250ms");
        assert_eq!(ScheduleRow::new(&spec, 0, None).detection_bound_ms, None);
    }
}
