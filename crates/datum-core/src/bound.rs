//! The detection bound: the longest a change to a class's resources can
//! stay unnoticed, the number an operator must be able to state per class.
//! Checked at an interval, a change waits at most for the next check and is
//! found within that check's inspection time: interval + inspection. Under
//! the agent a watched class whose watches are in place is checked once a
//! watch reports a change and the debounce has passed: debounce +
//! inspection, for what a watch sees (what no watch sees still waits for
//! the interval).
//!
//! Owns [`detection_bound`], the one formula the agent's metric, `datum
//! schedule` and the fleet report state. Must not: measure or read the
//! inspection times (callers pass them in).

use std::time::Duration;

/// How a change reaches a check of a class, for its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detection {
    /// The class's interval checks find it (a polled class; for a watched
    /// class, what no watch sees, or anything while a watch is lost).
    Interval,
    /// A watch reports it and the class's changed resources are checked
    /// once the agent's `debounce` has passed (a watched class whose
    /// watches are in place).
    Watch {
        /// How long the agent gathers events before it checks.
        debounce: Duration,
    },
}

/// The longest a change can stay unseen when it reaches a check by
/// `detection` and one inspection takes `inspection` (a p95): interval +
/// inspection, or debounce + inspection for a watch.
pub fn detection_bound(interval: Duration, detection: Detection, inspection: Duration) -> Duration {
    match detection {
        Detection::Interval => interval.saturating_add(inspection),
        Detection::Watch { debounce } => debounce.saturating_add(inspection),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_polled_class_waits_for_its_interval_and_a_watched_one_for_the_debounce() {
        let minute = Duration::from_secs(60);
        let p95 = Duration::from_millis(250);
        assert_eq!(
            detection_bound(minute, Detection::Interval, p95),
            Duration::from_millis(60_250)
        );
        let debounce = Duration::from_millis(100);
        assert_eq!(
            detection_bound(minute, Detection::Watch { debounce }, p95),
            Duration::from_millis(350)
        );
        assert_eq!(
            detection_bound(Duration::MAX, Detection::Interval, p95),
            Duration::MAX
        );
    }
}
