//! How long each drift has been there.
//!
//! A history file is JSON keyed by dedupe key (one entry per stack or host). Each entry
//! maps a [`Signature`] id to the day it was first seen, the last day it was seen and the
//! number of distinct days it was seen on. Recording a pass keeps the first date of every
//! signature that persists, starts a new date for a new one (a new path changes the
//! signature, so it restarts the clock on purpose), forgets signatures that went away, and
//! removes the whole entry on a clean pass. Values never reach this file: a signature has
//! only subjects, categories and paths.
//!
//! The date comes from a [`Clock`], so tests can replay a week in a second.

//! This module holds the model and its JSON only; reading and replacing the
//! file is the tool's (driftwatch's `--history FILE`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::Signature;

/// The schema version written into the file; bumped on an incompatible change.
pub const HISTORY_VERSION: u32 = 1;

/// Where "today" comes from.
pub trait Clock {
    fn today(&self) -> NaiveDate;
}

/// The real clock, in UTC so that a nightly job does not change dates with the runner's zone.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn today(&self) -> NaiveDate {
        chrono::Utc::now().date_naive()
    }
}

/// A clock stopped on one date.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub NaiveDate);

impl Clock for FixedClock {
    fn today(&self) -> NaiveDate {
        self.0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{path}: cannot read history: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Only the position is kept: serde's own message may quote the file's contents.
    #[error("{path}: not a history file (invalid JSON at line {line}, column {column})")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
    },
    #[error("{path}: history version {found} is not supported (expected {HISTORY_VERSION})")]
    Version { path: PathBuf, found: u32 },
    #[error("{path}: cannot write history: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What the history says about one signature after a pass was recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub first_seen: NaiveDate,
    pub last_seen: NaiveDate,
    /// Distinct days this signature was seen on, today included.
    pub count: u32,
    #[serde(flatten)]
    pub signature: Signature,
}

/// The signatures of one stack or host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub name: String,
    pub signatures: BTreeMap<String, Seen>,
}

/// The whole history file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub version: u32,
    #[serde(default)]
    pub entries: BTreeMap<String, Entry>,
}

impl Default for History {
    fn default() -> Self {
        History {
            version: HISTORY_VERSION,
            entries: BTreeMap::new(),
        }
    }
}

impl History {
    /// Parse the bytes of the history file at `path` (named in errors only).
    pub fn from_json(bytes: &[u8], path: &Path) -> Result<History, HistoryError> {
        let history: History = serde_json::from_slice(bytes).map_err(|e| HistoryError::Parse {
            path: path.to_owned(),
            line: e.line(),
            column: e.column(),
        })?;
        if history.version != HISTORY_VERSION {
            return Err(HistoryError::Version {
                path: path.to_owned(),
                found: history.version,
            });
        }
        Ok(history)
    }

    /// The file's bytes: pretty JSON and a final newline.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut body = serde_json::to_vec_pretty(self)?;
        body.push(b'\n');
        Ok(body)
    }

    /// Record one pass for `key` and return what is known about each given signature, in
    /// the order given.
    pub fn record(
        &mut self,
        key: &str,
        name: &str,
        signatures: &[Signature],
        clock: &dyn Clock,
    ) -> Vec<Seen> {
        let today = clock.today();
        if signatures.is_empty() {
            // A clean pass: tomorrow's drift, even if identical, is new drift.
            self.entries.remove(key);
            return Vec::new();
        }
        let previous = self.entries.remove(key).unwrap_or_default();
        let mut next = Entry {
            name: name.to_owned(),
            signatures: BTreeMap::new(),
        };
        let mut out = Vec::with_capacity(signatures.len());
        for signature in signatures {
            let id = signature.id();
            let seen = match previous.signatures.get(&id) {
                Some(old) if old.signature == *signature => {
                    // Running twice on one day must not count two nights.
                    let count = if old.last_seen < today {
                        old.count.saturating_add(1)
                    } else {
                        old.count
                    };
                    Seen {
                        first_seen: old.first_seen,
                        last_seen: today.max(old.last_seen),
                        count,
                        signature: signature.clone(),
                    }
                }
                _ => Seen {
                    first_seen: today,
                    last_seen: today,
                    count: 1,
                    signature: signature.clone(),
                },
            };
            next.signatures.insert(id, seen.clone());
            out.push(seen);
        }
        self.entries.insert(key.to_owned(), next);
        out
    }
}

impl Seen {
    /// "first seen 2026-10-28, 4 nights" (the noun is the caller's: nights, passes).
    pub fn describe(&self, unit_singular: &str, unit_plural: &str) -> String {
        let unit = if self.count == 1 {
            unit_singular
        } else {
            unit_plural
        };
        format!(
            "first seen {}, {} {unit}",
            self.first_seen.format("%Y-%m-%d"),
            self.count
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(d: u32) -> FixedClock {
        FixedClock(NaiveDate::from_ymd_opt(2026, 10, d).unwrap())
    }

    fn sig(paths: &[&str]) -> Signature {
        Signature::new(
            "k.flags".into(),
            "changed_outside".into(),
            paths.iter().map(|p| p.to_string()).collect(),
        )
    }

    #[test]
    fn five_nights() {
        let mut h = History::default();
        let color = sig(&["data.color"]);
        let wider = sig(&["data.color", "data.size"]);
        for d in 28..=31 {
            let seen = h.record("dw-1", "shop", std::slice::from_ref(&color), &day(d));
            assert_eq!(seen[0].first_seen, day(28).0);
            assert_eq!(seen[0].count, d - 27);
        }
        assert_eq!(
            h.entries["dw-1"]
                .signatures
                .values()
                .next()
                .unwrap()
                .describe("night", "nights"),
            "first seen 2026-10-28, 4 nights"
        );
        // A new attribute is a new signature with a new date.
        let seen = h.record(
            "dw-1",
            "shop",
            std::slice::from_ref(&wider),
            &FixedClock(NaiveDate::from_ymd_opt(2026, 11, 1).unwrap()),
        );
        assert_eq!(seen[0].count, 1);
        assert_eq!(
            seen[0].first_seen,
            NaiveDate::from_ymd_opt(2026, 11, 1).unwrap()
        );
        // A clean night clears the stack.
        assert!(h.record("dw-1", "shop", &[], &day(2)).is_empty());
        assert!(!h.entries.contains_key("dw-1"));
    }

    #[test]
    fn same_day_twice_counts_once() {
        let mut h = History::default();
        h.record("k", "n", &[sig(&["a"])], &day(1));
        let seen = h.record("k", "n", &[sig(&["a"])], &day(1));
        assert_eq!(seen[0].count, 1);
    }

    #[test]
    fn json_round_trip() {
        let path = Path::new("history.json");
        let mut h = History::default();
        h.record("k", "n", &[sig(&["a"])], &day(3));
        let bytes = h.to_json().unwrap();
        assert!(bytes.ends_with(b"}\n"));
        assert_eq!(History::from_json(&bytes, path).unwrap(), h);
    }

    #[test]
    fn bad_file_error_does_not_quote_content() {
        let path = Path::new("/ci/h.json");
        let msg = History::from_json(b"{\"version\": CANARY-in-history", path)
            .unwrap_err()
            .to_string();
        assert!(!msg.contains("CANARY"), "{msg}");
        assert!(msg.contains("h.json"));
        let msg = History::from_json(b"{\"version\": 9}", path)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("history version 9"), "{msg}");
    }
}
