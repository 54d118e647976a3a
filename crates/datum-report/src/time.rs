//! The one timestamp form of every report and JSON document: RFC 3339 in UTC, to the
//! second (`2026-12-01T15:20:00Z`).

use chrono::{DateTime, SecondsFormat, Utc};

/// `unix` seconds as RFC 3339 UTC (a time before 1970 is shown as 1970).
pub fn rfc3339(unix: i64) -> String {
    DateTime::<Utc>::from_timestamp(unix.max(0), 0)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn seconds_are_rfc3339_utc() {
        assert_eq!(super::rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(super::rfc3339(-5), "1970-01-01T00:00:00Z");
    }
}
