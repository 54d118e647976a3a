//! The server's instructions (issue 15): a quarantine or a release a person
//! asked for through `datum server`, for this host.
//!
//! They arrive in the reply to a delivered report and are carried out in
//! the transaction that records that delivery ([`Batch::receive_instructions`]),
//! so an instruction the outbox has acknowledged is never lost, and one key
//! is carried out once however often the server repeats it. The next
//! report queued confirms them ([`Batch::instructions_to_confirm`]); until
//! the server has read that confirmation it keeps repeating them, and a
//! repeated key only asks for the confirmation again.
//!
//! A quarantine from the server is a person's quarantine (source `person`:
//! no automatic action lifts it), its reason naming who asked and why.
//!
//! Owns the table `fleet_instructions`. Must not: decide whether an
//! instruction is wise (the person did), or send anything.

use datum_core::ResourceId;
use datum_fleet::report::HOST_TARGET as HOST_TARGET_WORD;
use datum_fleet::{Instruction, InstructionAction, InstructionDone};
use rusqlite::{OptionalExtension as _, params};

use super::{Batch, QuarantineSource, QuarantineTarget, Store, sql};
use crate::error::StoreError;

/// Confirmed instructions kept at most (the newest; every one not yet
/// confirmed stays too).
const INSTRUCTIONS_KEPT: usize = 1_000;

/// One instruction as this host recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedInstruction {
    pub key: String,
    pub action: String,
    pub target: String,
    pub reason: String,
    pub by: String,
    pub asked_at: i64,
    pub applied_at: i64,
    pub outcome: String,
    /// A queued report has confirmed it to the server.
    pub reported: bool,
}

/// The quarantine target a server names (`host` or `Kind[name]`).
pub fn target_of(word: &str) -> Option<QuarantineTarget> {
    if word == HOST_TARGET_WORD {
        return Some(QuarantineTarget::Host);
    }
    ResourceId::parse(word).ok().map(QuarantineTarget::Resource)
}

/// How a server names `target`.
pub fn word_of(target: &QuarantineTarget) -> String {
    match target {
        QuarantineTarget::Host => HOST_TARGET_WORD.to_owned(),
        QuarantineTarget::Resource(id) => id.to_string(),
    }
}

impl Batch<'_> {
    /// Carries out each of `instructions` not carried out before, in order,
    /// at `now`; a key seen before is only confirmed again.
    pub fn receive_instructions(
        &self,
        instructions: &[Instruction],
        now: i64,
    ) -> Result<(), StoreError> {
        let mut received = false;
        for i in instructions {
            let seen: Option<i64> = self
                .tx
                .query_row(
                    "SELECT applied_at FROM fleet_instructions WHERE key = ?1",
                    [&i.key],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql(self.path, "cannot read the server's instructions"))?;
            if seen.is_some() {
                // The server has not read the confirmation yet: send it again.
                self.tx
                    .execute(
                        "UPDATE fleet_instructions SET reported = 0 WHERE key = ?1",
                        [&i.key],
                    )
                    .map_err(sql(self.path, "cannot record the server's instruction"))?;
                continue;
            }
            let outcome = self.carry_out(i, now)?;
            self.tx
                .execute(
                    "INSERT INTO fleet_instructions (key, action, target, reason, requested_by, \
                     asked_at, applied_at, outcome) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![
                        i.key,
                        i.action.word(),
                        i.target,
                        i.reason,
                        i.by,
                        i.at,
                        now,
                        outcome
                    ],
                )
                .map_err(sql(self.path, "cannot record the server's instruction"))?;
            received = true;
        }
        if received {
            self.forget_old_instructions()?;
        }
        Ok(())
    }

    /// Forgets the confirmed instructions beyond the newest
    /// [`INSTRUCTIONS_KEPT`]. A key is remembered so that one the server
    /// repeats is carried out once, and the server repeats only what it has
    /// not seen confirmed: a key it repeats is set unconfirmed again, and
    /// one not confirmed is never forgotten. Without this every
    /// instruction a host ever received stayed in the store.
    fn forget_old_instructions(&self) -> Result<(), StoreError> {
        self.tx
            .execute(
                "DELETE FROM fleet_instructions WHERE reported = 1 AND key NOT IN \
                 (SELECT key FROM fleet_instructions WHERE reported = 1 \
                  ORDER BY applied_at DESC, key DESC LIMIT ?1)",
                [INSTRUCTIONS_KEPT as i64],
            )
            .map(drop)
            .map_err(sql(self.path, "cannot forget old instructions"))
    }

    fn carry_out(&self, i: &Instruction, now: i64) -> Result<String, StoreError> {
        let Some(target) = target_of(&i.target) else {
            return Ok(format!(
                "refused: `{}` is neither `host` nor a resource (Kind[name])",
                i.target
            ));
        };
        Ok(match i.action {
            InstructionAction::Quarantine => {
                let reason = format!("{} ({} via datum server)", i.reason, i.by);
                self.quarantine(&target, &reason, QuarantineSource::Person, now)?;
                "quarantined".to_owned()
            }
            InstructionAction::Release => {
                if self.release(&target)? {
                    "released".to_owned()
                } else {
                    "not quarantined".to_owned()
                }
            }
        })
    }

    /// The instructions carried out and not yet confirmed; they count as
    /// confirmed once this batch (which queues the report carrying them)
    /// commits.
    pub fn instructions_to_confirm(&self) -> Result<Vec<InstructionDone>, StoreError> {
        let done: Vec<InstructionDone> = self
            .tx
            .prepare_cached(
                "SELECT key, outcome, applied_at FROM fleet_instructions WHERE reported = 0 \
                 ORDER BY applied_at, key",
            )
            .and_then(|mut stmt| {
                stmt.query_map([], |r| {
                    Ok(InstructionDone {
                        key: r.get(0)?,
                        outcome: r.get(1)?,
                        at: r.get(2)?,
                    })
                })?
                .collect()
            })
            .map_err(sql(self.path, "cannot read the server's instructions"))?;
        if !done.is_empty() {
            self.tx
                .execute(
                    "UPDATE fleet_instructions SET reported = 1 WHERE reported = 0",
                    [],
                )
                .map_err(sql(self.path, "cannot record the server's instruction"))?;
        }
        Ok(done)
    }
}

impl Store {
    /// Every instruction this host received, newest first.
    pub fn received_instructions(&self) -> Result<Vec<ReceivedInstruction>, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT key, action, target, reason, requested_by, asked_at, applied_at, outcome, \
                 reported FROM fleet_instructions ORDER BY applied_at DESC, key",
            )
            .and_then(|mut stmt| {
                stmt.query_map([], |r| {
                    Ok(ReceivedInstruction {
                        key: r.get(0)?,
                        action: r.get(1)?,
                        target: r.get(2)?,
                        reason: r.get(3)?,
                        by: r.get(4)?,
                        asked_at: r.get(5)?,
                        applied_at: r.get(6)?,
                        outcome: r.get(7)?,
                        reported: r.get::<_, i64>(8)? != 0,
                    })
                })?
                .collect()
            })
            .map_err(sql(&self.path, "cannot read the server's instructions"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        (dir, store)
    }

    fn asked(key: &str, action: InstructionAction, target: &str) -> Instruction {
        Instruction {
            key: key.into(),
            action,
            target: target.into(),
            reason: "investigating INC-7".into(),
            by: "alice".into(),
            at: 10,
        }
    }

    #[test]
    fn an_instruction_is_carried_out_once_and_confirmed_until_the_server_has_read_it() {
        let (_dir, mut store) = open();
        let q = asked("k1", InstructionAction::Quarantine, "File[motd]");
        let b = store.batch().unwrap();
        b.receive_instructions(std::slice::from_ref(&q), 20)
            .unwrap();
        b.commit().unwrap();
        let motd = QuarantineTarget::Resource(ResourceId::new("File", "motd"));
        let held = store.quarantine_of(&motd).unwrap().unwrap();
        assert_eq!(held.source, QuarantineSource::Person);
        assert!(held.reason.contains("alice"), "{}", held.reason);
        assert!(held.reason.contains("INC-7"), "{}", held.reason);

        let b = store.batch().unwrap();
        let done = b.instructions_to_confirm().unwrap();
        assert_eq!(done.len(), 1);
        assert_eq!(
            (done[0].key.as_str(), done[0].outcome.as_str()),
            ("k1", "quarantined")
        );
        assert!(
            b.instructions_to_confirm().unwrap().is_empty(),
            "confirmed once"
        );
        b.commit().unwrap();

        // A person released it locally meanwhile; the server repeats the key
        // (it has not read the confirmation): nothing is quarantined again,
        // the confirmation is asked for again.
        store.release(&motd).unwrap();
        let b = store.batch().unwrap();
        b.receive_instructions(&[q], 30).unwrap();
        assert_eq!(b.instructions_to_confirm().unwrap().len(), 1);
        b.commit().unwrap();
        assert!(store.quarantine_of(&motd).unwrap().is_none());
    }

    /// Every instruction a host ever received stayed in `fleet_instructions`
    /// for good. The rows are there to carry out a key once however often
    /// the server repeats it, and the server repeats only what it has not
    /// seen confirmed; the newest INSTRUCTIONS_KEPT confirmed ones stay,
    /// with every one not confirmed yet.
    #[test]
    fn confirmed_instructions_beyond_the_newest_are_forgotten() {
        let (_dir, mut store) = open();
        let rounds = INSTRUCTIONS_KEPT + 50;
        for n in 0..rounds {
            let b = store.batch().unwrap();
            b.receive_instructions(
                &[asked(
                    &format!("k{n:05}"),
                    InstructionAction::Release,
                    "File[x]",
                )],
                n as i64,
            )
            .unwrap();
            if n + 1 < rounds {
                b.instructions_to_confirm().unwrap();
            }
            b.commit().unwrap();
        }
        let kept = store.received_instructions().unwrap();
        assert_eq!(
            kept.len(),
            INSTRUCTIONS_KEPT + 1,
            "the newest and the unconfirmed"
        );
        assert_eq!(kept[0].key, format!("k{:05}", rounds - 1));
        assert!(!kept[0].reported);
        assert_eq!(
            kept.last().unwrap().key,
            format!("k{:05}", rounds - 1 - INSTRUCTIONS_KEPT)
        );
        // A key still kept, repeated, is only confirmed again.
        let b = store.batch().unwrap();
        b.receive_instructions(
            &[asked(
                &format!("k{:05}", rounds - 2),
                InstructionAction::Quarantine,
                "File[x]",
            )],
            rounds as i64,
        )
        .unwrap();
        b.commit().unwrap();
        assert!(store.quarantined().unwrap().is_empty());
    }

    #[test]
    fn release_host_and_refusal_outcomes() {
        let (_dir, mut store) = open();
        let b = store.batch().unwrap();
        b.receive_instructions(
            &[
                asked("a", InstructionAction::Quarantine, "host"),
                asked("b", InstructionAction::Release, "host"),
                asked("c", InstructionAction::Release, "File[x]"),
                asked("d", InstructionAction::Quarantine, "rm -rf /"),
            ],
            5,
        )
        .unwrap();
        let done = b.instructions_to_confirm().unwrap();
        b.commit().unwrap();
        let outcome = |k: &str| {
            done.iter()
                .find(|d| d.key == k)
                .map(|d| d.outcome.clone())
                .unwrap()
        };
        assert_eq!(outcome("a"), "quarantined");
        assert_eq!(outcome("b"), "released");
        assert_eq!(outcome("c"), "not quarantined");
        assert!(outcome("d").starts_with("refused"), "{}", outcome("d"));
        assert!(store.quarantined().unwrap().is_empty());
        assert_eq!(store.received_instructions().unwrap().len(), 4);
    }
}
