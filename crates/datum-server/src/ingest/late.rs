//! Which reports are late (older than what they would replace) and which
//! were seen before (older than retention keeps), within a state store.

use std::collections::HashMap;

use datum_fleet::Report;

use crate::store::{Row, Val};

/// Whether `report` is older than the report it would replace, finished at
/// `last.0` with sequence number `last.1`: it finished before, or in the
/// same second with a lower number (the host numbers its reports in the
/// order it makes and sends them). A report numbered 1 is the first of a
/// state store made anew (`--rebuild-state`, a host installed again under
/// its name), whose numbers start again: they say nothing of its order
/// against the old store's reports, so it is late only when it finished
/// before; taken, it makes 1 the host's number, which the new store's next
/// reports follow. That rule is for reports that do not say which store
/// made them (hosts older than `Datum-Store-Id`): a report that does, from
/// another store than `last`'s (or than a report that did not say), starts
/// a numbering of its own and is late only when it finished in an earlier
/// second, whatever its number; one from `last`'s store is judged by its
/// number in the second. So a new store's report 2 whose report 1 never
/// arrived is not late either. The picture's `FRESH` is the same rule.
pub(super) fn is_late(report: &Report, store: Option<u128>, last: &Last) -> bool {
    let seq = i64::try_from(report.seq).unwrap_or(i64::MAX);
    let numbered = (report.finished_at, seq) < (last.at, last.seq);
    match store {
        Some(id) if last.store.as_deref() == Some(store_hex(id).as_str()) => numbered,
        Some(_) => report.finished_at < last.at,
        None if report.seq == FIRST_SEQ => report.finished_at < last.at,
        None => numbered,
    }
}

/// Whether `report` (of `store`, when it says) is one the host sent before
/// and whose key went with it, judged against `oldest`, the oldest report
/// kept of a host holding all that retention keeps: it is late against it
/// ([`is_late`]) and numbered before it. A report that says which store
/// made it is judged only against a report of that store: one of another
/// store (made anew, numbered from 1 again, perhaps with its host's clock
/// set back) or against a report that did not say is new. One that does
/// not say (an older host) is judged as before the stores were known,
/// the seq-1 rule included.
pub(super) fn is_seen_before(report: &Report, store: Option<u128>, oldest: &Last) -> bool {
    let seq = i64::try_from(report.seq).unwrap_or(i64::MAX);
    let same_store = match store {
        Some(id) => oldest.store.as_deref() == Some(store_hex(id).as_str()),
        None => true,
    };
    same_store && is_late(report, store, oldest) && seq < oldest.seq
}

/// The report a new one is judged against ([`is_late`]): its finish, its
/// number and the store it said it came from.
pub(super) struct Last {
    at: i64,
    seq: i64,
    store: Option<String>,
}

impl Last {
    pub(super) fn of(at: i64, seq: i64, store: Option<&str>) -> Last {
        Last {
            at,
            seq,
            store: store.map(str::to_owned),
        }
    }

    /// Host -> its last report, from rows of (host, finish, sequence number,
    /// store); a row missing one of the first three is left out.
    pub(super) fn by_host(rows: impl Iterator<Item = Row>) -> HashMap<String, Last> {
        rows.filter_map(|r| {
            Some((
                r.first()?.text()?.to_owned(),
                Last::of(
                    r.get(1)?.int()?,
                    r.get(2)?.int()?,
                    r.get(3).and_then(Val::text),
                ),
            ))
        })
        .collect()
    }
}

/// A store id as the server keeps it: 32 lowercase hex digits.
fn store_hex(id: u128) -> String {
    format!("{id:032x}")
}

/// A report's store id as a statement's parameter (NULL when unsaid).
pub(super) fn store_val(id: Option<u128>) -> Val {
    id.map_or(Val::NullText, |id| Val::Text(store_hex(id)))
}

/// The number of a state store's first report (its outbox's `next_seq`
/// starts there).
const FIRST_SEQ: u64 = 1;
