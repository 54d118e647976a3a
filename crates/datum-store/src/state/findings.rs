//! Drift history for `datum check`: how long each finding has been there.
//!
//! A finding is identified by its signature (subject, category, changed
//! paths), never by values, so a secret that drifts leaves no trace here. A
//! signature seen by consecutive checks keeps its first-seen time and its pass
//! count grows; a check that no longer sees it deletes it, so the next
//! appearance starts a new history (drift that was fixed and came back is new
//! drift). A new changed path makes a new signature on purpose: the drift grew.

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::{Batch, Store, malformed, sql, u64_from_sql};
use crate::error::StoreError;

// A finding is known by `datum_report::Signature`, the one signature type
// of every report (`File[motd]`, `changed_outside`, the paths that differ).
use datum_report::Signature;

/// The canonical key: JSON of subject, category and the sorted, deduplicated
/// paths. Readable in the database, and equal for equal findings (whatever
/// order and duplicates the paths came in).
fn key(signature: &Signature) -> (String, Vec<String>) {
    let set: BTreeSet<&String> = signature.paths.iter().collect();
    let paths: Vec<String> = set.into_iter().cloned().collect();
    let key = serde_json::to_string(&(&signature.subject, &signature.category, &paths))
        .unwrap_or_else(|_| {
            format!(
                "{}\u{0}{}\u{0}{}",
                signature.subject,
                signature.category,
                paths.join("\u{0}")
            )
        });
    (key, paths)
}

/// How old a finding is, after the current check was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingAge {
    /// Unix seconds of the first check in the current unbroken run.
    pub first_seen: i64,
    /// Consecutive checks (this one included) that saw it.
    pub passes: u64,
}

/// A finding currently in the history of a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingRecord {
    pub signature: Signature,
    pub first_seen: i64,
    pub last_seen: i64,
    pub passes: u64,
    pub last_pass_id: i64,
}

/// Which earlier findings a check is entitled to clear.
#[derive(Debug, Clone, Copy)]
pub enum FindingScope<'a> {
    /// The check looked at everything: whatever it did not see is gone.
    All,
    /// The check looked only at these subjects (one class's schedule came due,
    /// a sampled metadata-only pass): findings of other subjects are kept
    /// untouched, neither cleared nor counted.
    Subjects(&'a [String]),
}

impl Batch<'_> {
    /// Records the findings of a check that looked at everything on `host`.
    /// Returns each signature's age, in the order given.
    pub fn record_findings(
        &self,
        pass_id: i64,
        host: &str,
        findings: &[Signature],
        at: i64,
    ) -> Result<Vec<FindingAge>, StoreError> {
        self.record_findings_scoped(pass_id, host, findings, at, FindingScope::All)
    }

    /// Like [`Batch::record_findings`] for a check that inspected only `scope`.
    pub fn record_findings_scoped(
        &self,
        pass_id: i64,
        host: &str,
        findings: &[Signature],
        at: i64,
        scope: FindingScope<'_>,
    ) -> Result<Vec<FindingAge>, StoreError> {
        let err = || sql(self.path, "cannot record findings");
        let keyed: Vec<(String, Vec<String>)> = findings.iter().map(key).collect();

        // Clear what this check could have seen and did not.
        let seen: BTreeSet<&str> = keyed.iter().map(|(k, _)| k.as_str()).collect();
        let existing: Vec<(String, String)> = self
            .tx
            .prepare_cached("SELECT signature, subject FROM findings WHERE host = ?1")
            .and_then(|mut stmt| {
                stmt.query_map([host], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .map_err(err())?;
        let in_scope = |subject: &str| match scope {
            FindingScope::All => true,
            FindingScope::Subjects(subjects) => subjects.iter().any(|s| s == subject),
        };
        for (key, subject) in &existing {
            if !seen.contains(key.as_str()) && in_scope(subject) {
                self.tx
                    .execute(
                        "DELETE FROM findings WHERE host = ?1 AND signature = ?2",
                        params![host, key],
                    )
                    .map_err(err())?;
            }
        }

        // Count each distinct signature once per check, even if listed twice.
        let mut ages: BTreeMap<&str, FindingAge> = BTreeMap::new();
        for ((key, paths), finding) in keyed.iter().zip(findings) {
            if ages.contains_key(key.as_str()) {
                continue;
            }
            let paths_json = serde_json::to_string(paths)
                .map_err(|e| malformed(self.path, "finding paths", e))?;
            let (first_seen, passes): (i64, i64) = self
                .tx
                .prepare_cached(
                    "INSERT INTO findings (host, signature, subject, category, paths, first_seen, \
                     last_seen, passes, last_pass_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, 1, ?7) \
                     ON CONFLICT (host, signature) DO UPDATE SET \
                       last_seen = excluded.last_seen, \
                       passes = passes + (last_pass_id <> excluded.last_pass_id), \
                       last_pass_id = excluded.last_pass_id \
                     RETURNING first_seen, passes",
                )
                .and_then(|mut stmt| {
                    stmt.query_row(
                        params![
                            host,
                            key,
                            finding.subject,
                            finding.category,
                            paths_json,
                            at,
                            pass_id
                        ],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                })
                .map_err(err())?;
            ages.insert(
                key,
                FindingAge {
                    first_seen,
                    passes: u64_from_sql(passes),
                },
            );
        }
        Ok(keyed
            .iter()
            .filter_map(|(key, _)| ages.get(key.as_str()).copied())
            .collect())
    }
}

impl Store {
    /// The findings currently recorded for `host`, oldest first.
    pub fn current_findings(&self, host: &str) -> Result<Vec<FindingRecord>, StoreError> {
        type Row = (String, String, String, i64, i64, i64, i64);
        let rows: Vec<Row> = self
            .conn
            .prepare_cached(
                "SELECT subject, category, paths, first_seen, last_seen, passes, last_pass_id \
                 FROM findings WHERE host = ?1 ORDER BY first_seen, subject, signature",
            )
            .and_then(|mut stmt| {
                stmt.query_map([host], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                    ))
                })?
                .collect()
            })
            .map_err(sql(&self.path, "cannot read findings"))?;
        rows.into_iter()
            .map(
                |(subject, category, paths, first_seen, last_seen, passes, last_pass_id)| {
                    let paths: Vec<String> = serde_json::from_str(&paths)
                        .map_err(|e| malformed(&self.path, "finding paths", e))?;
                    Ok(FindingRecord {
                        signature: Signature {
                            subject,
                            category,
                            paths,
                        },
                        first_seen,
                        last_seen,
                        passes: u64_from_sql(passes),
                        last_pass_id,
                    })
                },
            )
            .collect()
    }

    /// See [`Batch::record_findings`]; one transaction.
    pub fn record_findings(
        &mut self,
        pass_id: i64,
        host: &str,
        findings: &[Signature],
        at: i64,
    ) -> Result<Vec<FindingAge>, StoreError> {
        self.write(|b| b.record_findings(pass_id, host, findings, at))
    }

    /// See [`Batch::record_findings_scoped`]; one transaction.
    pub fn record_findings_scoped(
        &mut self,
        pass_id: i64,
        host: &str,
        findings: &[Signature],
        at: i64,
        scope: FindingScope<'_>,
    ) -> Result<Vec<FindingAge>, StoreError> {
        self.write(|b| b.record_findings_scoped(pass_id, host, findings, at, scope))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(subject: &str, paths: &[&str]) -> Signature {
        Signature {
            subject: subject.into(),
            category: "changed_outside".into(),
            paths: paths.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    #[test]
    fn path_order_and_duplicates_do_not_change_the_key() {
        assert_eq!(
            key(&sig("File[a]", &["mode", "content", "mode"])).0,
            key(&sig("File[a]", &["content", "mode"])).0
        );
        assert_ne!(
            key(&sig("File[a]", &["mode"])).0,
            key(&sig("File[a]", &["content", "mode"])).0
        );
    }

    #[test]
    fn same_pass_recorded_twice_counts_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        let s = [sig("File[a]", &["mode"]), sig("File[a]", &["mode"])];
        let ages = store.record_findings(1, "h", &s, 10).unwrap();
        assert_eq!(ages.len(), 2);
        assert_eq!(ages[0], ages[1]);
        let again = store.record_findings(1, "h", &s[..1], 11).unwrap();
        assert_eq!(again[0].passes, 1);
    }

    #[test]
    fn scoped_check_keeps_findings_outside_its_scope() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        store
            .record_findings(
                1,
                "h",
                &[sig("File[a]", &["mode"]), sig("File[b]", &["uid"])],
                10,
            )
            .unwrap();
        let scope = ["File[a]".to_owned()];
        store
            .record_findings_scoped(2, "h", &[], 20, FindingScope::Subjects(&scope))
            .unwrap();
        let left = store.current_findings("h").unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].signature.subject, "File[b]");
        assert_eq!(left[0].passes, 1);
    }
}
