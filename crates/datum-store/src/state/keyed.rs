//! What the store holds keyed with the host's digest key
//! (`datum_core::digest`): a sensitive resource's verified record, its
//! acceptance and its failed apply keep only keyed digests (`keyed-...`),
//! which no other key can check. Lost, the key takes them with it: an
//! accepted change would no longer hold, and a verified record would say
//! nothing. The binary asks this before it makes a key beside a store, and
//! refuses to make one silently over such records.

use rusqlite::params;

use super::{Store, sql};
use crate::error::StoreError;

/// How many of the store's records are keyed, by table, and the first few
/// resources they are of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyedRecords {
    /// Verified records (declaration hash or content checksum keyed).
    pub verified: u64,
    /// Acceptances of a policy `accept` (either hash keyed).
    pub accepted: u64,
    /// Failed applies (declaration hash keyed).
    pub failures: u64,
    /// How many resources these records are of.
    pub resources_total: u64,
    /// The first of those resources (`Kind[name]`), sorted, at most
    /// [`KeyedRecords::NAMED`].
    pub resources: Vec<String>,
}

impl KeyedRecords {
    /// How many resources [`KeyedRecords::resources`] names at most.
    pub const NAMED: usize = 5;

    /// Every keyed record.
    pub fn total(&self) -> u64 {
        self.verified + self.accepted + self.failures
    }

    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }
}

/// `column` holds a keyed digest (an exact prefix test: `LIKE` ignores case).
fn keyed(column: &str) -> String {
    format!("substr({column}, 1, 6) = 'keyed-'")
}

/// The tables holding keyed digests, each with its resource column's
/// expression and the condition of a keyed row.
fn tables() -> [(&'static str, &'static str, String); 3] {
    [
        (
            "verified",
            "kind || '[' || name || ']'",
            format!("{} OR {}", keyed("declaration_hash"), keyed("sha256")),
        ),
        (
            "accepted",
            "resource",
            format!(
                "{} OR {}",
                keyed("declaration_hash"),
                keyed("observation_hash")
            ),
        ),
        ("apply_failures", "resource", keyed("declaration_hash")),
    ]
}

impl Store {
    /// What the store holds keyed with the host's digest key (committed
    /// rows: called when the store is opened, before anything is buffered).
    pub fn keyed_records(&self) -> Result<KeyedRecords, StoreError> {
        let count = |sql: &str| -> rusqlite::Result<u64> {
            let n: i64 = self.conn.query_row(sql, [], |row| row.get(0))?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        let read = || -> rusqlite::Result<KeyedRecords> {
            let mut out = KeyedRecords::default();
            let mut union = Vec::new();
            for (table, resource, condition) in tables() {
                let n = count(&format!("SELECT count(*) FROM {table} WHERE {condition}"))?;
                match table {
                    "verified" => out.verified = n,
                    "accepted" => out.accepted = n,
                    _ => out.failures = n,
                }
                union.push(format!(
                    "SELECT {resource} AS r FROM {table} WHERE {condition}"
                ));
            }
            let union = union.join(" UNION ");
            out.resources_total = count(&format!("SELECT count(*) FROM ({union})"))?;
            let mut stmt = self
                .conn
                .prepare(&format!("SELECT r FROM ({union}) ORDER BY r LIMIT ?1"))?;
            out.resources = stmt
                .query_map(params![KeyedRecords::NAMED as i64], |row| {
                    row.get::<_, String>(0)
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(out)
        };
        read().map_err(sql(&self.path, "cannot read the keyed records"))
    }

    /// The check value of the digest key this store's keyed records were
    /// made with (`datum_core::DigestKey::digest` of a fixed label, which
    /// the binary computes), or `None` when none is recorded yet (a new
    /// store, or one made before schema version 14).
    pub fn digest_key_check(&self) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row(
                "SELECT digest_key_check FROM store_identity WHERE id = 1",
                [],
                |row| row.get::<_, Option<String>>(0),
            )
            .map_err(sql(&self.path, "cannot read the digest key's check value"))
    }

    /// Records `check` as the check value of the digest key now used with
    /// this store ([`Store::digest_key_check`]).
    pub fn set_digest_key_check(&mut self, check: &str) -> Result<(), StoreError> {
        self.write(|batch| {
            batch
                .tx
                .execute(
                    "UPDATE store_identity SET digest_key_check = ?1 WHERE id = 1",
                    params![check],
                )
                .map_err(sql(
                    batch.path,
                    "cannot record the digest key's check value",
                ))?;
            Ok(())
        })
    }

    /// Forgets every keyed record (one transaction), for a host whose
    /// digest key is lost and whose operator said so (`--rebuild-state`):
    /// those resources are then as if never verified, accepted or failed.
    /// Returns what was forgotten.
    pub fn forget_keyed_records(&mut self) -> Result<KeyedRecords, StoreError> {
        self.flush()?;
        let forgotten = self.keyed_records()?;
        self.write(|batch| {
            for (table, _, condition) in tables() {
                batch
                    .tx
                    .execute(&format!("DELETE FROM {table} WHERE {condition}"), [])
                    .map_err(sql(batch.path, "cannot forget the keyed records"))?;
            }
            Ok(())
        })?;
        Ok(forgotten)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datum_core::ResourceId;

    #[test]
    fn keyed_records_are_counted_and_forgotten_plain_ones_kept() {
        let mut store = Store::open_in_memory().unwrap();
        assert!(store.keyed_records().unwrap().is_empty());
        assert_eq!(store.digest_key_check().unwrap(), None);
        store.set_digest_key_check("keyed-blake3:cc").unwrap();
        assert_eq!(
            store.digest_key_check().unwrap().as_deref(),
            Some("keyed-blake3:cc")
        );
        let accept = |store: &mut Store, name: &str, declaration: &str| {
            let id = ResourceId::new("File", name);
            store.accept(&id, declaration, "plain", 1, "p").unwrap();
        };
        accept(&mut store, "token", "keyed-blake3:aa");
        accept(&mut store, "motd", "0123");
        let keyed = store.keyed_records().unwrap();
        assert_eq!((keyed.accepted, keyed.total()), (1, 1));
        assert_eq!(keyed.resources, ["File[token]"]);
        assert_eq!(keyed.resources_total, 1);
        assert_eq!(store.forget_keyed_records().unwrap(), keyed);
        assert!(store.keyed_records().unwrap().is_empty());
        assert!(
            store
                .accepted(&ResourceId::new("File", "motd"))
                .unwrap()
                .is_some()
        );
        assert!(
            store
                .accepted(&ResourceId::new("File", "token"))
                .unwrap()
                .is_none()
        );
    }
}
