//! `--report-to FILE`: the stack's report goes to `datum server`, beside
//! the hosts, through the same outbox and delivery as a host's
//! (`datum_fleet`, `datum_store`): queued first in a small state store
//! (`--outbox`, default `FILE.outbox.db`), then delivered in order, with
//! backoff and an idempotency key, so a nightly job whose server is down
//! delivers last night's report with tonight's when its outbox is kept
//! (a CI cache), and never twice.
//!
//! The report carries counts per category and each finding's value-free
//! signature; a finding with a sensitive difference has no observed hash.
//! Delivery problems are warnings: they never change the exit code.
//!
//! Owns: [`send`]. Must not: change the drift report or its outputs.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use datum_fleet::report::{bounded, finding_signature, new_key, observed_hash};
use datum_fleet::{Credentials, IdentityKind, ReportKind};

use crate::classify::Report;
use crate::error::{Error, Result};

/// The outbox of `report_to` unless `--outbox` names one.
pub fn default_outbox(report_to: &Path) -> PathBuf {
    let mut name = report_to.as_os_str().to_owned();
    name.push(".outbox.db");
    PathBuf::from(name)
}

/// Queues the fleet report of `report` and delivers the outbox.
pub fn send(
    report: &Report,
    exit: u8,
    report_to: &Path,
    outbox: &Path,
    stderr: &mut dyn Write,
) -> Result<()> {
    let text = datum_host::named::read_to_string(report_to)
        .map_err(|e| Error::file(report_to, "cannot read the report credentials", e))?;
    let creds = Credentials::parse(report_to, &text).map_err(|e| Error::Fleet(e.to_string()))?;
    if creds.kind != IdentityKind::Stack {
        return Err(Error::Fleet(format!(
            "{}: `{}` is enrolled as a host; enroll the stack with `datum server enroll NAME --stack`",
            report_to.display(),
            creds.identity
        )));
    }
    let now = chrono::Utc::now().timestamp();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let findings: Vec<datum_fleet::Finding> = report
        .findings
        .iter()
        .map(|f| {
            *counts.entry(f.category.id().to_owned()).or_insert(0) += 1;
            let sig = f.signature();
            datum_fleet::Finding {
                signature: finding_signature(&sig.subject, &sig.category, &sig.paths),
                subject: sig.subject,
                category: sig.category,
                class: "stack".to_owned(),
                paths: sig.paths,
                observed: observed_of(f),
                first_seen: f
                    .age
                    .as_ref()
                    .and_then(|a| a.first_seen.and_hms_opt(0, 0, 0))
                    .map_or(now, |t| t.and_utc().timestamp()),
                checks: None,
                // Each attribute as driftwatch shows it: a sensitive one
                // (or one driftwatch withheld) travels by its path only.
                changes: f
                    .diffs
                    .iter()
                    .map(|d| {
                        let withheld = d.after.is_none() || d.shown.is_sensitive();
                        let value = |v: Option<&str>| {
                            v.filter(|_| !withheld)
                                .map(|v| bounded(v, datum_fleet::report::VALUE_KEPT))
                        };
                        // A refresh-only plan goes from the recorded state
                        // (before) to what the provider found (after).
                        datum_fleet::FieldChange {
                            path: d.shown.path().to_owned(),
                            observed: value(d.shown.after()),
                            declared: value(d.shown.before()),
                            sensitive: withheld,
                        }
                    })
                    .collect(),
                content_diff: None,
                changed_by: Vec::new(),
            }
        })
        .collect();
    counts.insert("pending".to_owned(), report.pending.len() as u64);
    let interval = creds.interval.unwrap_or(Duration::from_secs(86_400));
    let fleet = datum_fleet::Report {
        format_version: datum_fleet::FORMAT_VERSION,
        key: new_key(),
        seq: 0,
        kind: ReportKind::Stack,
        host: creds.identity.clone(),
        labels: BTreeMap::from([("stack".to_owned(), report.stack.clone())]),
        datum_version: env!("CARGO_PKG_VERSION").to_owned(),
        revision: format!("stack:{}", report.fingerprint()),
        catalogue: report.key.clone(),
        started_at: now,
        finished_at: now,
        duration_ms: 0,
        exit_code: i32::from(exit),
        classes_checked: Vec::new(),
        counts,
        resources: report.findings.len() as u64,
        classes: Vec::new(),
        expected_interval_s: interval.as_secs(),
        validators: BTreeMap::new(),
        trees: Vec::new(),
        failures: Vec::new(),
        findings,
        changed: Vec::new(),
        changed_total: 0,
        quarantined: Vec::new(),
        sampling: None,
        trusted_by_metadata: None,
        instructions: Vec::new(),
        pending: report
            .pending
            .iter()
            .take(datum_fleet::report::PENDING_KEPT)
            .map(|p| datum_fleet::PendingChange {
                address: p.address.clone(),
                action: p.action.clone(),
            })
            .collect(),
        // A stack's run has no pass warnings of a host.
        warnings: Vec::new(),
        verified_except: None,
    };
    let store_error = |e: datum_store::StoreError| Error::Fleet(e.to_string());
    let mut store = datum_store::Store::open(outbox).map_err(store_error)?;
    {
        let batch = store.batch().map_err(store_error)?;
        let mut fleet = fleet;
        fleet.seq = batch.next_report_seq().map_err(store_error)?;
        // Within what a server takes by default: a stack with thousands of
        // drifted resources made a report refused for good (413), and its
        // drift was never seen.
        let (body, shed) = fleet
            .encode_within(datum_fleet::report::REPORT_BUDGET)
            .map_err(|e| Error::Fleet(e.to_string()))?;
        if let Some(shed) = shed {
            let _ = writeln!(
                stderr,
                "driftwatch: warning: {shed}; this run's own report shows everything"
            );
        }
        let limit = creds.outbox_limit.unwrap_or(datum_store::OUTBOX_LIMIT);
        let bytes = creds.outbox_bytes.unwrap_or(datum_store::OUTBOX_BYTES);
        batch
            .enqueue_report_within(&fleet.key, fleet.seq, &body, limit, bytes, now)
            .map_err(store_error)?;
        batch.commit().map_err(store_error)?;
    }
    // One delivery of an outbox at a time (a nightly job and a run by
    // hand sharing one outbox): a second would send, count and trim the
    // same reports. The report stays queued when the other never ends.
    let _one_at_a_time = match store.delivery_lock(datum_store::DELIVERY_LOCK_WAIT) {
        Ok(lock) => lock,
        Err(datum_host::HostError::LockTimeout { waited, .. }) => {
            writeln!(
                stderr,
                "driftwatch: warning: another delivery of {} was still running after {}s; the report stays queued",
                outbox.display(),
                waited.as_secs()
            )?;
            return Ok(());
        }
        Err(e) => {
            writeln!(
                stderr,
                "driftwatch: warning: cannot lock {} for delivery: {e}; the report stays queued",
                outbox.display()
            )?;
            return Ok(());
        }
    };
    let client = datum_fleet::Client::new(
        &creds.server,
        &creds.ca_pem,
        &creds.token,
        datum_fleet::Timeouts::default(),
    )
    .map_err(|e| Error::Fleet(format!("{}: {e}", report_to.display())))?
    // A server certificate the CA does not verify names the file.
    .ca_from(report_to);
    let delivered = datum_fleet::deliver(
        &mut store.outbox(),
        &client,
        datum_fleet::Budget {
            until: Instant::now() + Duration::from_secs(30),
            respect_backoff: false,
        },
        || chrono::Utc::now().timestamp_millis(),
    )
    .map_err(store_error)?;
    for why in &delivered.refused {
        writeln!(
            stderr,
            "driftwatch: warning: the server refused a report for good: {why}"
        )?;
    }
    match &delivered.error {
        Some(e) => writeln!(
            stderr,
            "driftwatch: warning: {} report(s) kept in {} for {}: {e}",
            delivered.remaining,
            outbox.display(),
            creds.server
        )?,
        None => writeln!(
            stderr,
            "driftwatch: reported to {} ({} delivered)",
            creds.server,
            delivered.delivered + delivered.duplicates
        )?,
    }
    Ok(())
}

/// The hash of what a finding observed: each attribute's value as the refresh found it
/// (the `after` side, as `changes[].observed` carries it), so that one change made to
/// several stacks clusters, and a value that moves again is a new observation. `None`
/// when any attribute is withheld (sensitive).
fn observed_of(f: &crate::classify::Finding) -> Option<String> {
    if f.diffs.iter().any(|d| d.after.is_none()) {
        return None;
    }
    let pairs: Vec<(&str, &str)> = f
        .diffs
        .iter()
        .map(|d| (d.shown.path(), d.shown.after_display()))
        .collect();
    Some(observed_hash(pairs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{Category, Diff, Finding};
    use crate::flatten::Path;

    fn finding(before: &str, after: &str) -> Finding {
        Finding {
            address: "aws_sqs_queue.q".into(),
            previous_address: None,
            category: Category::ChangedOutside,
            next_apply: None,
            diffs: vec![Diff {
                path: Path::parse("visibility_timeout_seconds").unwrap(),
                shown: datum_report::AttrDiff::plain("visibility_timeout_seconds", before, after),
                after: Some(crate::plan::Leaf::parse(after).unwrap()),
            }],
            replace_paths: Vec::new(),
            forcing_paths: Vec::new(),
            ignored_by: Vec::new(),
            left_alone_by_update: false,
            overwritten: false,
            replace_reason: None,
            plan_checked: true,
            age: None,
        }
    }

    #[test]
    fn the_observed_hash_is_of_what_the_refresh_found() {
        // The same value found on two stacks whose state differed: one observation.
        assert_eq!(
            observed_of(&finding("30", "45")),
            observed_of(&finding("20", "45"))
        );
        // Another value found from the same state: another observation.
        assert_ne!(
            observed_of(&finding("30", "45")),
            observed_of(&finding("30", "60"))
        );
        assert_eq!(
            observed_of(&finding("30", "45")),
            Some(observed_hash([("visibility_timeout_seconds", "45")]))
        );
    }
}
