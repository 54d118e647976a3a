//! Who changed a watched resource (the `writers` table): each writer the
//! agent's attribution saw since the resource was last found clean, so that
//! a later `datum check` (the agent's delegated one, or a person's) reports
//! it with the finding and a class's `on_change_by` rules can use it.
//!
//! Writers are metadata (ids, names, command lines, units), never content.
//! One row per distinct writer of a resource (the same process writing the
//! same resource again only refreshes its row), at most [`WRITERS_KEPT`]
//! per resource.

use datum_core::{ChangedBy, ResourceId};
use rusqlite::params;

use super::{Batch, Store, malformed, sql};
use crate::error::StoreError;

/// Writers kept per resource (the most recent).
const WRITERS_KEPT: usize = 16;

/// What makes two events the same writer.
fn writer_key(w: &ChangedBy) -> String {
    format!(
        "{}|{:?}|{:?}|{:?}|{}",
        w.kind.word(),
        w.pid,
        w.uid,
        w.session,
        w.via
    )
}

impl Batch<'_> {
    /// Remembers `writer` as one who changed `id`.
    pub fn record_writer(&self, id: &ResourceId, writer: &ChangedBy) -> Result<(), StoreError> {
        let json = serde_json::to_string(writer).map_err(|e| malformed(self.path, "writer", e))?;
        let resource = id.to_string();
        self.tx
            .execute(
                "INSERT INTO writers (resource, writer_key, at, writer) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (resource, writer_key) DO UPDATE SET at = excluded.at, writer = excluded.writer",
                params![resource, writer_key(writer), writer.at, json],
            )
            .map_err(sql(self.path, "cannot record a writer"))?;
        self.tx
            .execute(
                "DELETE FROM writers WHERE resource = ?1 AND rowid NOT IN \
                 (SELECT rowid FROM writers WHERE resource = ?1 ORDER BY at DESC, rowid DESC LIMIT ?2)",
                params![resource, WRITERS_KEPT as i64],
            )
            .map_err(sql(self.path, "cannot record a writer"))?;
        Ok(())
    }

    /// Forgets who changed `id` (it was found clean: the next drift is
    /// someone else's doing).
    pub fn forget_writers(&self, id: &ResourceId) -> Result<(), StoreError> {
        self.tx
            .execute("DELETE FROM writers WHERE resource = ?1", [id.to_string()])
            .map_err(sql(self.path, "cannot forget writers"))?;
        Ok(())
    }
}

impl Store {
    /// Who changed `id` since it was last clean, oldest first.
    pub fn writers(&self, id: &ResourceId) -> Result<Vec<ChangedBy>, StoreError> {
        let rows: Vec<String> = self
            .conn
            .prepare_cached("SELECT writer FROM writers WHERE resource = ?1 ORDER BY at, rowid")
            .and_then(|mut stmt| stmt.query_map([id.to_string()], |r| r.get(0))?.collect())
            .map_err(sql(&self.path, "cannot read writers"))?;
        rows.iter()
            .map(|row| serde_json::from_str(row).map_err(|e| malformed(&self.path, "writer", e)))
            .collect()
    }

    /// The resources (display form) someone is recorded to have changed: few,
    /// so a check forgets writers by this list rather than per resource.
    pub fn written_resources(&self) -> Result<Vec<String>, StoreError> {
        self.conn
            .prepare_cached("SELECT DISTINCT resource FROM writers ORDER BY resource")
            .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
            .map_err(sql(&self.path, "cannot read writers"))
    }

    /// See [`Batch::record_writer`]; one transaction for all of them.
    pub fn record_writers(
        &mut self,
        writers: &[(ResourceId, ChangedBy)],
    ) -> Result<(), StoreError> {
        self.write(|b| {
            for (id, w) in writers {
                b.record_writer(id, w)?;
            }
            Ok(())
        })
    }

    /// See [`Batch::forget_writers`]; one transaction.
    pub fn forget_writers<'a>(
        &mut self,
        ids: impl IntoIterator<Item = &'a ResourceId>,
    ) -> Result<(), StoreError> {
        self.write(|b| {
            for id in ids {
                b.forget_writers(id)?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use datum_core::WriterKind;

    use super::*;

    fn writer(pid: i32, at: i64) -> ChangedBy {
        let mut w = ChangedBy::unknown("/etc/motd", "modified", at, Some(pid), "test");
        w.kind = WriterKind::Person;
        w.via = "terminal /dev/pts/1".to_owned();
        w.uid = Some(1000);
        w
    }

    #[test]
    fn writers_are_kept_per_resource_once_each_and_forgotten_when_clean() {
        let mut store = Store::open_in_memory().unwrap();
        let motd = ResourceId::parse("File[motd]").unwrap();
        let hosts = ResourceId::parse("File[hosts]").unwrap();
        store
            .record_writers(&[
                (motd.clone(), writer(10, 1)),
                (motd.clone(), writer(10, 2)),
                (motd.clone(), writer(11, 3)),
                (hosts.clone(), writer(12, 4)),
            ])
            .unwrap();
        let got = store.writers(&motd).unwrap();
        assert_eq!(
            got.iter().map(|w| (w.pid, w.at)).collect::<Vec<_>>(),
            [(Some(10), 2), (Some(11), 3)]
        );
        let many: Vec<_> = (0..40)
            .map(|i| (motd.clone(), writer(100 + i, 10 + i as i64)))
            .collect();
        store.record_writers(&many).unwrap();
        let got = store.writers(&motd).unwrap();
        assert_eq!(got.len(), WRITERS_KEPT);
        assert_eq!(got.last().unwrap().pid, Some(139));
        assert_eq!(
            store.written_resources().unwrap(),
            ["File[hosts]", "File[motd]"]
        );
        store.forget_writers([&motd]).unwrap();
        assert!(store.writers(&motd).unwrap().is_empty());
        assert_eq!(store.writers(&hosts).unwrap().len(), 1);
    }
}
