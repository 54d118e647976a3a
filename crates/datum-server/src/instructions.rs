//! What a person asks of a host through the server (quarantine, release):
//! recorded with who, from where and why, handed to the host in the reply
//! to each of its reports until a report says it was carried out.
//!
//! The path of one instruction, every step durable:
//! 1. the web view (or a script with the admin token) calls [`request`]:
//!    one row in `instructions`, the audit log, never pruned;
//! 2. the host delivers any report; the reply carries every instruction of
//!    that host not done yet ([`for_reply`]), oldest first, and the host
//!    carries them out in the transaction that records the delivery
//!    (`datum_store`'s `receive_instructions`), once per key;
//! 3. the host's next report confirms each key with its outcome
//!    ([`confirm`]); the row gets `done_at`, the outcome and the report's
//!    sequence number, and replies stop repeating it.
//!
//! A lost reply, a server restarted in between, two servers on one
//! database: the host sees the key again and only confirms it again.
//!
//! Owns: the table `instructions` and its SQL. Must not: authenticate
//! (callers do) or render anything.

use datum_fleet::{Instruction, InstructionAction, InstructionDone};

use crate::fleet::{Fleet, int, text};
use crate::store::{Backend, Row, Stmt, StoreError};

/// Instructions sent to a host in one reply at most.
pub const PER_REPLY: i64 = 100;

/// One instruction with its history, as the host page shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct InstructionRow {
    pub key: String,
    pub host: String,
    pub action: String,
    pub target: String,
    pub reason: String,
    pub requested_by: String,
    /// The first 12 hex digits of the admin credential's hash.
    pub credential: String,
    pub address: String,
    pub created_at: i64,
    pub sent_at: Option<i64>,
    pub sent_count: u64,
    pub done_at: Option<i64>,
    pub outcome: Option<String>,
    pub done_seq: Option<u64>,
}

/// Who asked: recorded with every instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester {
    /// The name given at login (or a script's).
    pub name: String,
    /// A prefix of the admin credential's hash: which credential it was.
    pub credential: String,
    /// The client's address.
    pub address: String,
}

/// Records that `by` asks `host` to `action` `target` because `reason`.
/// Returns the instruction's key.
pub async fn request<B: Backend>(
    fleet: &Fleet<B>,
    host: &str,
    action: InstructionAction,
    target: &str,
    reason: &str,
    by: &Requester,
    now: i64,
) -> Result<String, StoreError> {
    let key = datum_fleet::report::new_key();
    fleet
        .backend()
        .execute(vec![Stmt::new(
            "INSERT INTO instructions (key, host, action, target, reason, requested_by, credential, \
             address, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            vec![
                key.as_str().into(),
                host.into(),
                action.word().into(),
                target.into(),
                reason.into(),
                by.name.as_str().into(),
                by.credential.as_str().into(),
                by.address.as_str().into(),
                now.into(),
            ],
        )])
        .await?;
    Ok(key)
}

/// What the reply to `host`'s report carries: its instructions not done
/// yet, oldest first (each counted as sent once more).
pub async fn for_reply<B: Backend>(
    fleet: &Fleet<B>,
    host: &str,
    now: i64,
) -> Result<Vec<Instruction>, StoreError> {
    let rows = fleet
        .backend()
        .rows(Stmt::new(
            "SELECT key, action, target, reason, requested_by, created_at FROM instructions \
             WHERE host = $1 AND done_at IS NULL ORDER BY id LIMIT $2",
            vec![host.into(), PER_REPLY.into()],
        ))
        .await?;
    let out: Vec<Instruction> = rows
        .iter()
        .filter_map(|r| {
            Some(Instruction {
                key: text(r, 0)?,
                action: InstructionAction::parse(&text(r, 1)?)?,
                target: text(r, 2)?,
                reason: text(r, 3).unwrap_or_default(),
                by: text(r, 4).unwrap_or_default(),
                at: int(r, 5).unwrap_or(0),
            })
        })
        .collect();
    if !out.is_empty() {
        fleet
            .backend()
            .execute(vec![Stmt::new(
                "UPDATE instructions SET sent_at = $2, sent_count = sent_count + 1 \
                 WHERE host = $1 AND done_at IS NULL",
                vec![host.into(), now.into()],
            )])
            .await?;
    }
    Ok(out)
}

/// `host`'s report number `seq` says it carried out `done`.
pub async fn confirm<B: Backend>(
    fleet: &Fleet<B>,
    host: &str,
    seq: u64,
    done: &[InstructionDone],
) -> Result<(), StoreError> {
    if done.is_empty() {
        return Ok(());
    }
    let stmts = done
        .iter()
        .map(|d| {
            Stmt::new(
                "UPDATE instructions SET done_at = $3, outcome = $4, done_seq = $5 \
                 WHERE host = $1 AND key = $2 AND done_at IS NULL",
                vec![
                    host.into(),
                    d.key.as_str().into(),
                    d.at.into(),
                    datum_fleet::report::bounded(&d.outcome, 512).into(),
                    seq.into(),
                ],
            )
        })
        .collect();
    fleet.backend().execute(stmts).await
}

const COLUMNS: &str = "SELECT key, host, action, target, reason, requested_by, credential, address, \
     created_at, sent_at, sent_count, done_at, outcome, done_seq FROM instructions";

fn row(r: &Row) -> InstructionRow {
    InstructionRow {
        key: text(r, 0).unwrap_or_default(),
        host: text(r, 1).unwrap_or_default(),
        action: text(r, 2).unwrap_or_default(),
        target: text(r, 3).unwrap_or_default(),
        reason: text(r, 4).unwrap_or_default(),
        requested_by: text(r, 5).unwrap_or_default(),
        credential: text(r, 6).unwrap_or_default(),
        address: text(r, 7).unwrap_or_default(),
        created_at: int(r, 8).unwrap_or(0),
        sent_at: int(r, 9),
        sent_count: crate::fleet::u(int(r, 10)),
        done_at: int(r, 11),
        outcome: text(r, 12),
        done_seq: int(r, 13).and_then(|v| u64::try_from(v).ok()),
    }
}

/// Every instruction for `host`, newest first (at most `limit`).
pub async fn of_host<B: Backend>(
    fleet: &Fleet<B>,
    host: &str,
    limit: i64,
) -> Result<Vec<InstructionRow>, StoreError> {
    static SQL: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| format!("{COLUMNS} WHERE host = $1 ORDER BY id DESC LIMIT $2"));
    Ok(fleet
        .backend()
        .rows(Stmt::new(SQL.as_str(), vec![host.into(), limit.into()]))
        .await?
        .iter()
        .map(row)
        .collect())
}

/// The newest instructions across the fleet (at most `limit`).
pub async fn recent<B: Backend>(
    fleet: &Fleet<B>,
    limit: i64,
) -> Result<Vec<InstructionRow>, StoreError> {
    static SQL: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| format!("{COLUMNS} ORDER BY id DESC LIMIT $1"));
    Ok(fleet
        .backend()
        .rows(Stmt::new(SQL.as_str(), vec![limit.into()]))
        .await?
        .iter()
        .map(row)
        .collect())
}
