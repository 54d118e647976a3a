//! A check's findings: what the host had, and the writes of what
//! changed, each drift cluster moved by the hosts that joined or left it;
//! and the findings an apply closes (those of the resources it changed).

use std::collections::{BTreeMap, HashMap, HashSet};

use datum_fleet::{Finding, Report};

use super::CHUNK;
use super::shared::BatchState;
use crate::store::{Row, Stmt, Val, values_rows};

/// A finding as stored for a host.
pub(super) struct Stored {
    /// `Kind[name]` of a host's resource, or what else the finding is of
    /// (a Package's conffile: `Package[nginx]:/etc/nginx/mime.types`).
    subject: String,
    /// `changed_outside`, `unmanaged`, `invalid_live_config`...
    category: String,
    observed: String,
    class: String,
    /// Its writers as stored (JSON, `[]` when none).
    changed_by: String,
}

pub(super) fn stored_findings(rows: &[Row]) -> HashMap<String, Stored> {
    rows.iter()
        .filter_map(|r| {
            Some((
                r.first()?.text()?.to_owned(),
                Stored {
                    subject: r.get(5).and_then(Val::text).unwrap_or("").to_owned(),
                    category: r.get(6).and_then(Val::text).unwrap_or("").to_owned(),
                    observed: r.get(1).and_then(Val::text).unwrap_or("").to_owned(),
                    class: r.get(2).and_then(Val::text).unwrap_or("").to_owned(),
                    changed_by: r.get(3).and_then(Val::text).unwrap_or("[]").to_owned(),
                },
            ))
        })
        .collect()
}

/// A check (or a stack): its findings replace the host's open findings of
/// the classes it covers (every class, or those it names). Only what
/// changed is written, and each drift cluster moves by the hosts that
/// joined or left it.
pub(super) fn finding_writes(
    report: &Report,
    stored: &HashMap<String, Stored>,
    batch: &mut BatchState,
    stmts: &mut Vec<Stmt>,
) {
    let host = report.host.as_str();
    let covered = |class: &str| {
        report.classes_checked.is_empty() || report.classes_checked.iter().any(|c| c == class)
    };
    // What the host has after this report: the findings of classes it did
    // not cover, and its own (by signature; the last of a repeated one).
    let mut now: BTreeMap<&str, &Finding> = BTreeMap::new();
    for f in &report.findings {
        now.insert(f.signature.as_str(), f);
    }
    let mut gone: Vec<&str> = Vec::new();
    for (signature, old) in stored {
        match now.get(signature.as_str()) {
            None if covered(&old.class) => {
                gone.push(signature);
                batch.cluster(signature, &old.observed).leave();
            }
            None => {}
            Some(f) => {
                let observed = f.observed.as_deref().unwrap_or("");
                if observed != old.observed {
                    batch.cluster(signature, &old.observed).leave();
                }
            }
        }
    }
    gone.sort_unstable();
    close(host, &gone, stmts);
    // Findings the host did not have (plain inserts: its stored findings
    // were read under its row's lock, so none of these is there) and
    // findings it had that changed (upserts).
    let mut opened: Vec<(&Finding, String)> = Vec::new();
    let mut written: Vec<(&Finding, String)> = Vec::new();
    for (signature, f) in &now {
        let observed = f.observed.as_deref().unwrap_or("");
        let old = stored.get(*signature);
        let joins = old.is_none_or(|o| o.observed != observed);
        let cluster = batch.cluster(signature, observed);
        cluster.see(f, report.finished_at, joins);
        if !joins && old.is_some_and(|o| o.class != f.class) {
            cluster.reclass = true;
        }
        // Who changed it: a finding already open is written again when the
        // host's attribution names other writers.
        let changed_by = serde_json::to_string(&f.changed_by).unwrap_or_else(|_| "[]".into());
        if old.is_none() {
            opened.push((f, changed_by));
        } else if joins || old.is_some_and(|o| o.class != f.class || o.changed_by != changed_by) {
            written.push((f, changed_by));
        }
    }
    for chunk in opened.chunks(CHUNK) {
        stmts.push(Stmt::built(
            format!(
                "{FINDING_INSERT} VALUES {}",
                values_rows(1, 11, chunk.len())
            ),
            finding_params(host, report.finished_at, chunk),
        ));
    }
    for chunk in written.chunks(CHUNK) {
        stmts.push(Stmt::built(
            format!(
                "{FINDING_INSERT} VALUES {} ON CONFLICT (host, signature) DO UPDATE SET \
                 subject = excluded.subject, category = excluded.category, class = excluded.class, \
                 paths = excluded.paths, observed = excluded.observed, first_seen = excluded.first_seen, \
                 last_seen = excluded.last_seen, checks = excluded.checks, changed_by = excluded.changed_by",
                values_rows(1, 11, chunk.len())
            ),
            finding_params(host, report.finished_at, chunk),
        ));
    }
}

/// An apply (not older than its host's last report): the open findings of
/// the resources it verified close, each leaving its drift cluster. The
/// engine verifies every resource it changed (observed again and compared
/// after the change), so those are converged as of this report, whatever
/// a check said before; a resource it failed or held back is not in
/// `changed`. An apply of the whole catalogue also says which declared
/// resources it did not verify (`verified_except`, sent to a server that
/// takes it): every other one it found as declared or made so, and the
/// findings of those close too (a hand fix before the apply left it
/// nothing to change). Only findings whose subject is a resource itself
/// close: a finding of something else it owns (a Package's conffile,
/// subject `Package[nginx]:/etc/...`) is nothing an apply reverts. Without
/// `verified_except` (an older host, a partial apply, one that trusted
/// metadata) findings of resources the apply found unchanged stay until
/// the next check.
pub(super) fn applied_writes(
    report: &Report,
    stored: &HashMap<String, Stored>,
    batch: &mut BatchState,
    stmts: &mut Vec<Stmt>,
) {
    if !closes_findings(report) || stored.is_empty() {
        return;
    }
    let changed: HashSet<&str> = report.changed.iter().map(String::as_str).collect();
    let except: Option<HashSet<&str>> = report
        .verified_except
        .as_ref()
        .map(|e| e.iter().map(String::as_str).collect());
    let verified = |subject: &str| {
        changed.contains(subject)
            || except
                .as_ref()
                .is_some_and(|e| is_resource_id(subject) && !e.contains(subject))
    };
    let mut gone: Vec<&str> = Vec::new();
    for (signature, old) in stored {
        let closes = if old.category == ACTIVATION_OWED {
            changed.contains(old.subject.as_str())
        } else {
            resolved_by_apply(&old.category) && verified(old.subject.as_str())
        };
        if closes {
            gone.push(signature);
            batch.cluster(signature, &old.observed).leave();
        }
    }
    gone.sort_unstable();
    close(report.host.as_str(), &gone, stmts);
}

/// Whether this apply report may close findings of its host: it changed
/// something, or it says what it verified.
pub(super) fn closes_findings(report: &Report) -> bool {
    !report.changed.is_empty() || report.verified_except.is_some()
}

/// A reload or restart an apply owes a service: closed by an apply that
/// lists the service as changed, and by no other. The engine reports a
/// service changed only once its every phase passed, the activation it
/// owed among them (a refused group, a failed reload or its verify fail
/// the service instead), and clears the debt then: a revert's or partial
/// apply's pass too, which activates a service outside its selection
/// (reported changed) when it may. One the apply only found unchanged
/// stays open (a `verified_except` says nothing of a debt), as do those of
/// the apply's failed or blocked services.
const ACTIVATION_OWED: &str = "activation_owed";

/// Whether a finding of this category is one an apply that verified its
/// subject resolved: the resource's own declared fields (changed, deleted,
/// of another type, or not converged). Not a Tree's `unmanaged` entry (kept
/// unless the Tree purges: the Tree is found as declared with the entry
/// still there), nor `invalid_live_config` (its subject,
/// `ValidationGroup[..]`, is no declared resource, so never in
/// `verified_except`, and an apply that changes nothing in the group runs
/// no validator), nor `activation_owed` (see [`ACTIVATION_OWED`]), nor a
/// category this server does not know: those wait for the next check (fail
/// closed).
fn resolved_by_apply(category: &str) -> bool {
    matches!(
        category,
        "changed_outside" | "deleted_outside" | "type_changed" | "not_converged"
    )
}

/// Whether a finding's subject is a resource (`Kind[name]`), not
/// something a resource owns (a conffile: `Package[nginx]:/etc/...`). A
/// name holding `]:` is taken as not one (its finding waits for a check).
fn is_resource_id(subject: &str) -> bool {
    subject.ends_with(']') && subject.contains('[') && !subject.contains("]:")
}

/// Deletes the host's findings of these signatures.
fn close(host: &str, gone: &[&str], stmts: &mut Vec<Stmt>) {
    for chunk in gone.chunks(CHUNK) {
        let mut params: Vec<Val> = vec![host.into()];
        params.extend(chunk.iter().map(|s| Val::from(*s)));
        stmts.push(Stmt::built(
            format!(
                "DELETE FROM findings WHERE host = $1 AND signature IN {}",
                values_rows(2, chunk.len(), 1)
            ),
            params,
        ));
    }
}

const FINDING_INSERT: &str = "INSERT INTO findings (host, signature, subject, category, class, \
     paths, observed, first_seen, last_seen, checks, changed_by)";

/// The parameters of findings rows, as [`FINDING_INSERT`] lists the columns.
fn finding_params(host: &str, finished_at: i64, chunk: &[(&Finding, String)]) -> Vec<Val> {
    let mut params = Vec::with_capacity(chunk.len() * 11);
    for (f, changed_by) in chunk {
        params.extend([
            host.into(),
            f.signature.as_str().into(),
            f.subject.as_str().into(),
            f.category.as_str().into(),
            f.class.as_str().into(),
            serde_json::to_string(&f.paths).unwrap_or_default().into(),
            f.observed.as_deref().unwrap_or("").into(),
            f.first_seen.into(),
            finished_at.into(),
            f.checks.unwrap_or(1).into(),
            changed_by.as_str().into(),
        ]);
    }
    params
}
