//! The rows a batch shares with other transactions, written last and in
//! key order: the revisions' last-applied times and the drift clusters.

use std::collections::BTreeMap;

use datum_fleet::Finding;

use super::CHUNK;
use crate::store::{Stmt, Val, values_rows};

/// How the batch moves the shared rows (written last, in key order).
#[derive(Default)]
pub(super) struct BatchState {
    /// Revision -> when it was last applied in this batch.
    pub(super) revisions: BTreeMap<String, i64>,
    clusters: BTreeMap<(String, String), ClusterMove>,
}

/// One drift cluster's change in a batch, its reports taken one after
/// another in host order (as separate batches would store them).
#[derive(Default)]
pub(super) struct ClusterMove {
    /// Hosts joining minus hosts leaving.
    delta: i64,
    /// The lowest `delta` reached (0 or less): when the cluster's stored
    /// host count plus this is 0, its last host left during the batch and
    /// the cluster starts again with the hosts that joined after.
    low: i64,
    /// What the batch's hosts showing it say of it.
    all: Sighting,
    /// The same, of the hosts after `delta` last reached `low` (what a
    /// cluster started again is made of).
    since_low: Sighting,
    /// A host left it, or one staying in it gives it another class now:
    /// its class is read again from the findings of the hosts it has (the
    /// class that host gave it may be no other host's).
    pub(super) reclass: bool,
}

/// What the hosts of a batch showing one drift cluster say of it.
struct Sighting {
    /// The earliest first sighting of the hosts joining.
    first_seen: i64,
    /// The latest report showing it.
    last_seen: i64,
    /// A finding of it (for a cluster that did not exist yet).
    sample: Option<Finding>,
    /// The most consecutive checks a host of this batch saw it in.
    checks: u64,
    /// The first in byte order of the classes they give it (hosts may
    /// class one resource differently).
    class: Option<String>,
}

impl Default for Sighting {
    fn default() -> Self {
        Sighting {
            first_seen: i64::MAX,
            last_seen: 0,
            sample: None,
            checks: 0,
            class: None,
        }
    }
}

impl Sighting {
    fn see(&mut self, f: &Finding, finished_at: i64, joins: bool) {
        self.last_seen = self.last_seen.max(finished_at);
        self.checks = self.checks.max(f.checks.unwrap_or(1));
        if joins {
            self.first_seen = self.first_seen.min(f.first_seen);
        }
        if self.sample.is_none() {
            self.sample = Some(f.clone());
        }
        if self.class.as_ref().is_none_or(|c| f.class < *c) {
            self.class = Some(f.class.clone());
        }
    }
}

impl ClusterMove {
    /// A host of the batch left the cluster.
    pub(super) fn leave(&mut self) {
        self.reclass = true;
        self.delta -= 1;
        if self.delta <= self.low {
            self.low = self.delta;
            self.since_low = Sighting::default();
        }
    }

    /// A host of the batch shows it (`joins`: it did not before).
    pub(super) fn see(&mut self, f: &Finding, finished_at: i64, joins: bool) {
        if joins {
            self.delta += 1;
        }
        self.all.see(f, finished_at, joins);
        self.since_low.see(f, finished_at, joins);
    }
}

/// A cluster's columns from what the batch saw (`subject`, `category` and
/// `paths` from its sample, the first class in byte order; empty when it
/// has none).
fn cluster_columns(seen: &Sighting) -> [Val; 7] {
    let (subject, category, paths) = match &seen.sample {
        Some(f) => (
            f.subject.as_str(),
            f.category.as_str(),
            serde_json::to_string(&f.paths).unwrap_or_default(),
        ),
        None => ("", "", "[]".to_owned()),
    };
    [
        subject.into(),
        category.into(),
        seen.class.as_deref().unwrap_or("").into(),
        paths.into(),
        seen.first_seen.into(),
        seen.last_seen.into(),
        seen.checks.into(),
    ]
}

/// The upsert of a cluster no host left in the batch, and of one that
/// starts again (`DO UPDATE` only when it lives on).
const CLUSTER_UPSERT: &str = "INSERT INTO drift_clusters (signature, observed, hosts, subject, \
     category, class, paths, first_seen, last_seen, checks) VALUES";

/// The upserts of clusters no host of the batch left (added to, or made),
/// in the order given, [`CHUNK`] a statement.
fn cluster_upserts(moves: &[(&(String, String), &ClusterMove)], stmts: &mut Vec<Stmt>) {
    for chunk in moves.chunks(CHUNK) {
        let mut params = Vec::with_capacity(chunk.len() * 10);
        for ((signature, observed), m) in chunk {
            params.extend([
                signature.as_str().into(),
                observed.as_str().into(),
                m.delta.into(),
            ]);
            params.extend(cluster_columns(&m.all));
        }
        stmts.push(Stmt::built(
            format!(
                "{CLUSTER_UPSERT} {} ON CONFLICT (signature, observed) \
                 DO UPDATE SET hosts = drift_clusters.hosts + excluded.hosts, class = CASE \
                 WHEN excluded.class COLLATE \"C\" < drift_clusters.class COLLATE \"C\" \
                 THEN excluded.class ELSE drift_clusters.class END, first_seen = CASE \
                 WHEN excluded.first_seen < drift_clusters.first_seen THEN excluded.first_seen \
                 ELSE drift_clusters.first_seen END, last_seen = CASE \
                 WHEN excluded.last_seen > drift_clusters.last_seen THEN excluded.last_seen \
                 ELSE drift_clusters.last_seen END, checks = CASE \
                 WHEN excluded.checks > drift_clusters.checks THEN excluded.checks \
                 ELSE drift_clusters.checks END",
                values_rows(1, 10, chunk.len())
            ),
            params,
        ));
    }
}

impl BatchState {
    pub(super) fn cluster(&mut self, signature: &str, observed: &str) -> &mut ClusterMove {
        self.clusters
            .entry((signature.to_owned(), observed.to_owned()))
            .or_default()
    }

    /// The shared rows' statements.
    pub(super) fn finish(self, stmts: &mut Vec<Stmt>) {
        for (revision, at) in &self.revisions {
            stmts.push(Stmt::new(
                "INSERT INTO revisions (revision, first_at, last_at) VALUES ($1, $2, $2) \
                 ON CONFLICT (revision) DO UPDATE SET last_at = CASE \
                 WHEN excluded.last_at > revisions.last_at THEN excluded.last_at \
                 ELSE revisions.last_at END",
                vec![revision.as_str().into(), (*at).into()],
            ));
        }
        // The clusters in key order, whatever the batch does to each: two
        // servers' batches lock the rows they share in the same order, so
        // they cannot deadlock (a batch that first took the clusters its
        // hosts joined, then those they left, did with one moving hosts
        // the other way). The clusters no host of the batch left, between
        // two that one left, go in multi-row upserts.
        let mut run: Vec<(&(String, String), &ClusterMove)> = Vec::new();
        for (key, m) in &self.clusters {
            if m.low == 0 {
                run.push((key, m));
                continue;
            }
            cluster_upserts(&run, stmts);
            run.clear();
            // A cluster a host of the batch left. One whose last host left
            // (its count plus the lowest the batch took it to is 0) is
            // gone, and the hosts that joined after make it anew, with
            // their first sighting, as when the leaving and the joining
            // reports come in batches of their own; else it lives on,
            // moved by all of them.
            let (signature, observed) = key;
            let key = || -> Vec<Val> { vec![signature.as_str().into(), observed.as_str().into()] };
            let mut params = key();
            params.push(m.low.into());
            stmts.push(Stmt::new(
                "DELETE FROM drift_clusters WHERE signature = $1 AND observed = $2 \
                 AND hosts + $3 <= 0",
                params,
            ));
            let mut lives_on = key();
            lives_on.extend([
                m.delta.into(),
                m.all.first_seen.into(),
                m.all.last_seen.into(),
                m.all.checks.into(),
                Val::opt_text(m.all.class.as_deref()),
            ]);
            if m.delta > m.low {
                // Hosts joined after the lowest point: they make the
                // cluster if it went, else it lives on.
                let mut params = key();
                params.push((m.delta - m.low).into());
                params.extend(cluster_columns(&m.since_low));
                params.extend(lives_on.split_off(2));
                stmts.push(Stmt::new(
                    "INSERT INTO drift_clusters (signature, observed, hosts, subject, category, \
                     class, paths, first_seen, last_seen, checks) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                     ON CONFLICT (signature, observed) DO UPDATE SET \
                     hosts = drift_clusters.hosts + $11, first_seen = CASE \
                     WHEN $12 < drift_clusters.first_seen THEN $12 ELSE drift_clusters.first_seen END, \
                     last_seen = CASE WHEN $13 > drift_clusters.last_seen THEN $13 \
                     ELSE drift_clusters.last_seen END, checks = CASE \
                     WHEN $14 > drift_clusters.checks THEN $14 ELSE drift_clusters.checks END, \
                     class = CASE WHEN drift_clusters.class COLLATE \"C\" > $15 \
                     THEN $15 ELSE drift_clusters.class END",
                    params,
                ));
            } else {
                stmts.push(Stmt::new(
                    "UPDATE drift_clusters SET hosts = hosts + $3, first_seen = CASE \
                     WHEN $4 < first_seen THEN $4 ELSE first_seen END, last_seen = CASE \
                     WHEN $5 > last_seen THEN $5 ELSE last_seen END, checks = CASE \
                     WHEN $6 > checks THEN $6 ELSE checks END, class = CASE \
                     WHEN class COLLATE \"C\" > $7 THEN $7 ELSE class END \
                     WHERE signature = $1 AND observed = $2",
                    lives_on,
                ));
            }
            if m.delta < 0 {
                // A cluster whose last host left is gone.
                stmts.push(Stmt::new(
                    "DELETE FROM drift_clusters WHERE signature = $1 AND observed = $2 AND hosts <= 0",
                    key(),
                ));
            }
        }
        cluster_upserts(&run, stmts);
        // The class of a cluster a host left, or whose host now classes it
        // otherwise, when no host it has gives it that class any more: the
        // first in byte order of its hosts' (the findings are written
        // above). Any class a host gives it was folded in as it came, so
        // while one host still gives it its class that is the first; the
        // check stops at that host, and only a class no host gives reads
        // the cluster's findings whole.
        for (signature, observed) in self
            .clusters
            .iter()
            .filter(|(_, m)| m.reclass)
            .map(|(key, _)| key)
        {
            stmts.push(Stmt::new(
                "UPDATE drift_clusters SET class = COALESCE((SELECT min(f.class COLLATE \"C\") \
                 FROM findings f WHERE f.signature = $1 AND COALESCE(f.observed, '') = $2), class) \
                 WHERE signature = $1 AND observed = $2 AND NOT EXISTS (SELECT 1 FROM findings f \
                 WHERE f.signature = $1 AND COALESCE(f.observed, '') = $2 \
                 AND f.class = drift_clusters.class)",
                vec![signature.as_str().into(), observed.as_str().into()],
            ));
        }
    }
}
