//! The state database's tables, as an ordered list of migrations.
//!
//! Never edit a migration that has shipped: append a new one. Each entry turns
//! version `i` into `i + 1`; `db::open` runs the missing ones in a single
//! transaction and records the result in `PRAGMA user_version`.
//!
//! No table has a column for file content or a declared value: only hashes,
//! metadata, identities and counts (see the crate documentation).

use crate::db::Schema;

/// "DtmS" in ASCII: marks a SQLite file as Datum's state database.
const APPLICATION_ID: i32 = 0x4474_6d53;

pub(crate) const SCHEMA: Schema = Schema {
    application_id: APPLICATION_ID,
    migrations: &[
        V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11, V12, V13, V14, V15,
    ],
};

/// Version 1: everything issues 2, 3 and 5 need.
const V1: &str = "
-- Last verified state per resource. `resource` is the display form
-- (File[sshd-config]); kind and name are kept apart because a name may itself
-- contain brackets, which would make the display form ambiguous to parse.
CREATE TABLE verified (
    resource          TEXT PRIMARY KEY,
    kind              TEXT NOT NULL,
    name              TEXT NOT NULL,
    declaration_hash  TEXT NOT NULL,
    verified_at       INTEGER NOT NULL,
    has_meta          INTEGER NOT NULL,
    size              INTEGER,
    mtime_ns          INTEGER,
    ctime_ns          INTEGER,
    inode             INTEGER,
    dev               INTEGER,
    mode              INTEGER,
    uid               INTEGER,
    gid               INTEGER,
    sha256            TEXT
);

-- One row per pass (apply, plan, check). counts is a JSON object
-- {outcome word: count}: the set of words grows with the engine, and nothing
-- queries inside it.
CREATE TABLE passes (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    command      TEXT NOT NULL,
    host         TEXT NOT NULL,
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER NOT NULL,
    duration_ms  INTEGER NOT NULL,
    exit_code    INTEGER NOT NULL,
    counts       TEXT NOT NULL
);
CREATE INDEX passes_by_command ON passes (command, id);

-- Time spent inspecting each resource class in a pass (datum schedule).
CREATE TABLE class_inspections (
    pass_id      INTEGER NOT NULL REFERENCES passes (id) ON DELETE CASCADE,
    class        TEXT NOT NULL,
    duration_ms  INTEGER NOT NULL,
    PRIMARY KEY (pass_id, class)
);
CREATE INDEX class_inspections_by_class ON class_inspections (class, pass_id);

-- Drift findings currently present, per host: a row lives while consecutive
-- checks keep seeing the same signature and is deleted by the first check
-- that does not. `signature` is the canonical JSON of (subject, category,
-- sorted paths): values never take part.
CREATE TABLE findings (
    host          TEXT NOT NULL,
    signature     TEXT NOT NULL,
    subject       TEXT NOT NULL,
    category      TEXT NOT NULL,
    paths         TEXT NOT NULL,
    first_seen    INTEGER NOT NULL,
    last_seen     INTEGER NOT NULL,
    passes        INTEGER NOT NULL,
    last_pass_id  INTEGER NOT NULL,
    PRIMARY KEY (host, signature)
);

-- Service reloads or restarts owed because their files changed and the
-- activation has not happened yet (issue 3). reasons is a JSON array.
CREATE TABLE owed (
    service  TEXT PRIMARY KEY,
    kind     TEXT NOT NULL,
    name     TEXT NOT NULL,
    action   TEXT NOT NULL CHECK (action IN ('reload', 'restart')),
    reasons  TEXT NOT NULL,
    since    INTEGER NOT NULL
);

-- Observations a class with policy `accept` took as the new normal: they stay
-- accepted while both hashes stay the same.
CREATE TABLE accepted (
    resource          TEXT PRIMARY KEY,
    kind              TEXT NOT NULL,
    name              TEXT NOT NULL,
    declaration_hash  TEXT NOT NULL,
    observation_hash  TEXT NOT NULL,
    accepted_at       INTEGER NOT NULL
);

-- Resources (or the whole host, target '(host)') excluded from apply until
-- `datum release`.
CREATE TABLE quarantine (
    target  TEXT PRIMARY KEY,
    reason  TEXT NOT NULL,
    source  TEXT NOT NULL CHECK (source IN ('person', 'policy', 'flapping')),
    since   INTEGER NOT NULL
);

-- Each revert of a drifted resource, for flap detection.
CREATE TABLE reverts (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    resource  TEXT NOT NULL,
    at        INTEGER NOT NULL
);
CREATE INDEX reverts_by_resource ON reverts (resource, at);
";

/// Version 2: whether a class's inspection read content or only metadata, so
/// a class that demands a full content audit every Nth check can count the
/// checks since its last one. NULL: not said (recorded by an older caller).
const V2: &str = "
ALTER TABLE class_inspections ADD COLUMN full_content INTEGER;
";

/// Version 3: the repository revisions `datum pull` deployed (issue 16),
/// newest last. `previous` is NULL for the first one; `rollback` is 1 when a
/// person allowed a revision that does not descend from the one it replaced.
const V3: &str = "
CREATE TABLE deployments (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    deployed_at  INTEGER NOT NULL,
    revision     TEXT NOT NULL,
    previous     TEXT,
    git_ref      TEXT NOT NULL,
    source       TEXT NOT NULL,
    signer       TEXT NOT NULL,
    key          TEXT NOT NULL,
    rollback     INTEGER NOT NULL CHECK (rollback IN (0, 1)),
    allowed_by   TEXT
);
CREATE INDEX deployments_by_revision ON deployments (revision, id);
";

/// Version 4: the fleet outbox (issue 13). `outbox` holds reports waiting
/// for delivery, oldest first; `outbox_state` is one row: the next sequence
/// number, the delivery's backoff, totals, and the sampling plan the server
/// handed out last (JSON). Bodies are report JSON: counts, hashes, names and
/// value-free signatures, never a sensitive value.
const V4: &str = "
CREATE TABLE outbox (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    key        TEXT NOT NULL UNIQUE,
    seq        INTEGER NOT NULL,
    queued_at  INTEGER NOT NULL,
    body       BLOB NOT NULL
);
CREATE TABLE outbox_state (
    id                 INTEGER PRIMARY KEY CHECK (id = 1),
    next_seq           INTEGER NOT NULL DEFAULT 1,
    failures           INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms    INTEGER NOT NULL DEFAULT 0,
    last_error         TEXT,
    dropped            INTEGER NOT NULL DEFAULT 0,
    dropped_total      INTEGER NOT NULL DEFAULT 0,
    refused_total      INTEGER NOT NULL DEFAULT 0,
    last_refused       TEXT,
    delivered_total    INTEGER NOT NULL DEFAULT 0,
    last_delivered_at  INTEGER,
    sampling           TEXT
);
";

/// Version 5: the server's instructions (issue 15): a quarantine or release
/// a person asked for through `datum server`, carried out when the reply
/// that brought it was recorded. `reported` is 0 until a queued report
/// confirms it to the server.
const V5: &str = "
CREATE TABLE fleet_instructions (
    key          TEXT PRIMARY KEY,
    action       TEXT NOT NULL,
    target       TEXT NOT NULL,
    reason       TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    asked_at     INTEGER NOT NULL,
    applied_at   INTEGER NOT NULL,
    outcome      TEXT NOT NULL,
    reported     INTEGER NOT NULL DEFAULT 0
);
";

/// Version 6: who changed a watched resource (issue 20), one row per
/// distinct writer since the resource was last clean. `writer` is the JSON
/// of `datum_core::ChangedBy`: ids, names, command line, unit, never content.
const V6: &str = "
CREATE TABLE writers (
    resource    TEXT NOT NULL,
    writer_key  TEXT NOT NULL,
    at          INTEGER NOT NULL,
    writer      TEXT NOT NULL,
    PRIMARY KEY (resource, writer_key)
);
";

/// Version 7 (issue 14): the last apply of a resource that failed, so a
/// check reports it as not converged (with the failure) instead of as drift,
/// until an apply verifies it; and the patch an acceptance wrote, so plan and
/// apply can point at it. `reason` is the engine's one-line outcome (never
/// validator output, never content).
const V7: &str = "
CREATE TABLE apply_failures (
    resource          TEXT PRIMARY KEY,
    kind              TEXT NOT NULL,
    name              TEXT NOT NULL,
    declaration_hash  TEXT NOT NULL,
    phase             TEXT NOT NULL,
    reason            TEXT NOT NULL,
    failed_at         INTEGER NOT NULL
);
ALTER TABLE accepted ADD COLUMN patch TEXT;
";

/// Version 8: verified records keyed by (kind, name) in the table's own
/// b-tree (`WITHOUT ROWID`). The display form `resource` was a second copy
/// of the id in every row and, as the primary key, again in an index of
/// its own: 8 % of a store of 20,000 resources (4.74 -> 4.35 MB), which
/// the integrity check at every open and a metadata pass read whole.
const V8: &str = "
CREATE TABLE verified_by_id (
    kind              TEXT NOT NULL,
    name              TEXT NOT NULL,
    declaration_hash  TEXT NOT NULL,
    verified_at       INTEGER NOT NULL,
    has_meta          INTEGER NOT NULL,
    size              INTEGER,
    mtime_ns          INTEGER,
    ctime_ns          INTEGER,
    inode             INTEGER,
    dev               INTEGER,
    mode              INTEGER,
    uid               INTEGER,
    gid               INTEGER,
    sha256            TEXT,
    PRIMARY KEY (kind, name)
) WITHOUT ROWID;
INSERT OR REPLACE INTO verified_by_id
    SELECT kind, name, declaration_hash, verified_at, has_meta, size, mtime_ns, ctime_ns,
           inode, dev, mode, uid, gid, sha256
    FROM verified;
DROP TABLE verified;
ALTER TABLE verified_by_id RENAME TO verified;
";

/// Version 9: a verified record's file metadata in one column, `meta`
/// (size, mtime, ctime, inode and device as 8 bytes each, mode, owner and
/// group as 4, big-endian; NULL for a record without metadata), in place of
/// `has_meta` and a column per number: a metadata pass reads every row, and
/// each column read was a step of SQLite's and a call through rusqlite (half
/// of the pass's reading of the store). The numbers move bit for bit
/// (`printf('%016x')` writes a negative integer as its two's complement,
/// which is how the unsigned ones were stored).
const V9: &str = "
CREATE TABLE verified_v9 (
    kind              TEXT NOT NULL,
    name              TEXT NOT NULL,
    declaration_hash  TEXT NOT NULL,
    verified_at       INTEGER NOT NULL,
    meta              BLOB,
    sha256            TEXT,
    PRIMARY KEY (kind, name)
) WITHOUT ROWID;
INSERT INTO verified_v9
    SELECT kind, name, declaration_hash, verified_at,
           CASE WHEN has_meta THEN unhex(printf('%016x%016x%016x%016x%016x%08x%08x%08x',
               size, mtime_ns, ctime_ns, inode, dev, mode, uid, gid)) END,
           CASE WHEN has_meta THEN sha256 END
    FROM verified;
DROP TABLE verified;
ALTER TABLE verified_v9 RENAME TO verified;
";

/// Version 10: the dropped count a queued report carries to the server,
/// fixed at its first attempt (NULL: not sent yet) and sent unchanged with
/// every repeat, so a duplicate (the reply to an attempt the server stored
/// was lost) neither loses nor repeats it; a report once sent is no longer
/// the one a full outbox drops.
const V10: &str = "
ALTER TABLE outbox ADD COLUMN announced INTEGER;
";

/// Version 11: where the link a deployment made is (`deploy`, a host
/// path), so a pull told another `deploy` knows where the old link is
/// (NULL: recorded before this version, not known).
const V11: &str = "
ALTER TABLE deployments ADD COLUMN link TEXT;
";

/// Version 12: the store's id, 128 random bits (SQLite's randomblob, from
/// the system's randomness) drawn when the store is made, or when a store
/// made before is first opened: its reports carry it to the server
/// (`Datum-Store-Id`), which so tells a store made anew (`--rebuild-state`,
/// a host installed again), whose reports are numbered from 1 again, from
/// the old one. A store restored from a backup keeps its id and numbering.
const V12: &str = "
CREATE TABLE store_identity (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    store_id  TEXT NOT NULL
);
INSERT INTO store_identity (id, store_id) VALUES (1, lower(hex(randomblob(16))));
";

/// Version 13: the optional report fields the server's last reply said it
/// takes (`datum_fleet::Reply::takes`, a JSON array; NULL: none, or no
/// reply yet). A server refuses a report holding a field it does not know,
/// so a report carries such a field (the pass's warnings) only when queued
/// after a reply that named it.
const V13: &str = "
ALTER TABLE outbox_state ADD COLUMN takes TEXT;
";

/// Version 14: a check value of the host's digest key this store's keyed
/// records were made with (`datum_core::DigestKey::digest` of a fixed
/// label; NULL: none yet, as in a store made before, which gets one the
/// next time the key is used with it). A key restored from the wrong
/// backup or copied from another host does not give it, and is refused
/// beside keyed records as a lost key is (`Store::digest_key_check`).
const V14: &str = "
ALTER TABLE store_identity ADD COLUMN digest_key_check TEXT;
";

/// Version 15: a group validator's owed revalidation under the engine's
/// name for it, `ValidationGroup[NAME]` (`datum_engine::GROUP_KIND`), where
/// stores written before ffdd91f hold it as `Group[NAME]`, which is now the
/// Group kind's (Unix groups): read as is, such a row would be an activation
/// a declared Group owes (no kind but Service owes one). Only `owed` rows
/// move: a Group resource's other rows (verified, accepted, failures,
/// writers, reverts, quarantine) are its own and stay.
///
/// The kind names are literal on purpose: they are the data as older
/// Datums wrote it, fixed like every shipped migration, not a comparison
/// the code makes with a kind (so not the engine's constant, whose value
/// a later rename would change under this history).
///
/// A store that holds both names for one group (it failed again under the
/// new name before it passed) keeps one debt: the new row, with the older
/// `since`; the old row's reasons are the same words ("failed
/// validation").
const V15: &str = "
UPDATE owed SET since = min(since, (SELECT old.since FROM owed AS old
                                     WHERE old.kind = 'Group' AND old.name = owed.name))
    WHERE kind = 'ValidationGroup'
      AND EXISTS (SELECT 1 FROM owed AS old WHERE old.kind = 'Group' AND old.name = owed.name);
DELETE FROM owed
    WHERE kind = 'Group'
      AND EXISTS (SELECT 1 FROM owed AS new
                  WHERE new.kind = 'ValidationGroup' AND new.name = owed.name);
UPDATE owed SET kind = 'ValidationGroup', service = 'ValidationGroup[' || name || ']'
    WHERE kind = 'Group';
";

#[cfg(test)]
mod tests {
    use super::*;
    use datum_core::ResourceId;

    #[test]
    fn version_7_verified_records_are_kept_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let v7 = Schema {
            application_id: APPLICATION_ID,
            migrations: &[V1, V2, V3, V4, V5, V6, V7],
        };
        {
            let dir = crate::db::private_dir(path.parent().unwrap()).unwrap();
            let conn = crate::db::open(&dir, "state.db", &v7).unwrap();
            conn.execute_batch(
                "INSERT INTO verified (resource, kind, name, declaration_hash, verified_at, \
                 has_meta, size, mtime_ns, ctime_ns, inode, dev, mode, uid, gid, sha256) VALUES \
                 ('File[/etc/a]', 'File', '/etc/a', 'h1', 5, 1, 3, 1, 2, 7, 8, 420, 0, 0, 'ab'), \
                 ('Service[a]', 'Service', 'a', 'h2', 6, 0, NULL, NULL, NULL, NULL, NULL, \
                  NULL, NULL, NULL, NULL);",
            )
            .unwrap();
        }
        let mut store = crate::Store::open(&path).unwrap();
        let file = ResourceId::new("File", "/etc/a");
        let record = store.last_verified(&file).unwrap().unwrap();
        assert_eq!(
            (record.declaration_hash.as_str(), record.verified_at),
            ("h1", 5)
        );
        let meta = record.meta.unwrap();
        assert_eq!((meta.size, meta.inode, meta.mode), (3, 7, 420));
        assert_eq!(meta.sha256.as_deref(), Some("ab"));
        let service = ResourceId::new("Service", "a");
        let record = store.last_verified(&service).unwrap().unwrap();
        assert_eq!(
            (record.declaration_hash.as_str(), record.meta),
            ("h2", None)
        );
        let all: Vec<ResourceId> = store
            .all_verified()
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(all, [file.clone(), service]);
        // Recorded and forgotten again by id.
        store.record_verified(&file, "h3", None, 9).unwrap();
        store.flush().unwrap();
        assert_eq!(
            store
                .last_verified(&file)
                .unwrap()
                .unwrap()
                .declaration_hash,
            "h3"
        );
        assert!(store.forget(&file).unwrap());
        store.flush().unwrap();
        assert_eq!(store.last_verified(&file).unwrap(), None);
    }

    /// A report queued before version 10 (its first attempt, if any, made
    /// without the column) is sent with the count not yet announced, and
    /// keeps it from then on.
    #[test]
    fn version_9_queued_reports_are_announced_after_the_upgrade() {
        use datum_fleet::Queue;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let v9 = Schema {
            application_id: APPLICATION_ID,
            migrations: &[V1, V2, V3, V4, V5, V6, V7, V8, V9],
        };
        {
            let dir = crate::db::private_dir(path.parent().unwrap()).unwrap();
            let conn = crate::db::open(&dir, "state.db", &v9).unwrap();
            conn.execute_batch(
                "INSERT INTO outbox (key, seq, queued_at, body) VALUES ('k', 3, 5, x'7b7d'); \
                 INSERT INTO outbox_state (id, next_seq, dropped, dropped_total) VALUES (1, 4, 2, 2);",
            )
            .unwrap();
        }
        let mut store = crate::Store::open(&path).unwrap();
        let mut outbox = store.outbox();
        let head = outbox.oldest().unwrap().unwrap();
        assert_eq!(head.key, "k");
        assert_eq!(outbox.announce(head.id).unwrap(), Some(2));
        assert_eq!(outbox.dropped().unwrap(), 0);
        assert_eq!(outbox.announce(head.id).unwrap(), Some(2));
    }

    /// A store's id is drawn when it is made, or, for one made before
    /// version 12, when it is first opened since; it is kept from then on,
    /// a store made anew draws another, and a queued report carries it.
    #[test]
    fn a_store_has_an_id_of_its_own_kept_across_opens() {
        use datum_fleet::Queue;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let v11 = Schema {
            application_id: APPLICATION_ID,
            migrations: &[V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11],
        };
        {
            let dir = crate::db::private_dir(path.parent().unwrap()).unwrap();
            let conn = crate::db::open(&dir, "state.db", &v11).unwrap();
            conn.execute_batch(
                "INSERT INTO outbox (key, seq, queued_at, body) VALUES ('k', 3, 5, x'7b7d');",
            )
            .unwrap();
        }
        let old = crate::Store::open(&path).unwrap().store_id().unwrap();
        let mut store = crate::Store::open(&path).unwrap();
        assert_eq!(store.store_id().unwrap(), old, "kept across opens");
        assert_eq!(store.outbox().oldest().unwrap().unwrap().store, Some(old));
        drop(store);
        let other = dir.path().join("other.db");
        let new = crate::Store::open(&other).unwrap().store_id().unwrap();
        assert_ne!(new, old, "each store draws its own");
        let private = crate::db::private_dir(dir.path()).unwrap();
        let (rebuilt, _) = crate::Store::rebuild_in(&private, "state.db").unwrap();
        let again = rebuilt.store_id().unwrap();
        assert!(
            again != old && again != new,
            "a store made anew draws another"
        );
    }

    #[test]
    fn version_8_metadata_moves_into_one_column_bit_for_bit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let v8 = Schema {
            application_id: APPLICATION_ID,
            migrations: &[V1, V2, V3, V4, V5, V6, V7, V8],
        };
        {
            let dir = crate::db::private_dir(path.parent().unwrap()).unwrap();
            let conn = crate::db::open(&dir, "state.db", &v8).unwrap();
            // The unsigned numbers as the store wrote them (their bits as
            // i64: -1 is u64::MAX), the signed ones at their extremes.
            conn.execute_batch(
                "INSERT INTO verified (kind, name, declaration_hash, verified_at, has_meta, \
                 size, mtime_ns, ctime_ns, inode, dev, mode, uid, gid, sha256) VALUES \
                 ('File', '/etc/a', 'h1', 5, 1, -1, -9223372036854775808, \
                  9223372036854775807, 7, -2, 33188, 4294967295, 0, 'ab'), \
                 ('File', '/etc/b', 'h2', 6, 1, 0, 0, 0, 0, 0, 0, 0, 0, NULL), \
                 ('Service', 'a', 'h3', 7, 0, NULL, NULL, NULL, NULL, NULL, NULL, \
                  NULL, NULL, NULL);",
            )
            .unwrap();
        }
        let store = crate::Store::open(&path).unwrap();
        let a = store
            .last_verified(&ResourceId::new("File", "/etc/a"))
            .unwrap()
            .unwrap();
        assert_eq!((a.declaration_hash.as_str(), a.verified_at), ("h1", 5));
        assert_eq!(
            a.meta,
            Some(datum_core::FileMeta {
                size: u64::MAX,
                mtime_ns: i64::MIN,
                ctime_ns: i64::MAX,
                inode: 7,
                dev: u64::MAX - 1,
                mode: 0o100_644,
                uid: u32::MAX,
                gid: 0,
                sha256: Some("ab".to_owned()),
            })
        );
        let b = store
            .last_verified(&ResourceId::new("File", "/etc/b"))
            .unwrap()
            .unwrap();
        assert_eq!(b.meta, Some(datum_core::FileMeta::default()));
        let service = store
            .last_verified(&ResourceId::new("Service", "a"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (service.declaration_hash.as_str(), service.meta),
            ("h3", None)
        );
    }

    /// Every row of `table` in the database at `path`, as text, sorted.
    fn rows(path: &std::path::Path, table: &str, columns: &str) -> Vec<String> {
        let conn = rusqlite::Connection::open(path).unwrap();
        let mut stmt = conn
            .prepare(&format!("SELECT {columns} FROM {table} ORDER BY {columns}"))
            .unwrap();
        let n = stmt.column_count();
        stmt.query_map([], |r| {
            (0..n)
                .map(|i| {
                    r.get::<_, rusqlite::types::Value>(i)
                        .map(|v| format!("{v:?}"))
                })
                .collect::<rusqlite::Result<Vec<_>>>()
                .map(|v| v.join(" "))
        })
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap()
    }

    /// A group validator's revalidation owed under its name before
    /// ffdd91f (`Group[nginx]`) is owed by `ValidationGroup[nginx]` after
    /// the upgrade; a declared Group's own rows (same kind name) and a
    /// service's debt are left as they were.
    #[test]
    fn version_14_owed_group_revalidations_move_to_validation_group() {
        use crate::OwedAction;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let v14 = Schema {
            application_id: APPLICATION_ID,
            migrations: &[V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11, V12, V13, V14],
        };
        let others = [
            ("verified", "kind, name, declaration_hash, verified_at"),
            ("apply_failures", "resource, kind, name, phase, reason"),
            ("accepted", "resource, kind, name, observation_hash"),
            ("quarantine", "target, reason, source"),
            ("reverts", "resource, at"),
            ("writers", "resource, writer_key"),
        ];
        let before;
        {
            let dir = crate::db::private_dir(path.parent().unwrap()).unwrap();
            let conn = crate::db::open(&dir, "state.db", &v14).unwrap();
            conn.execute_batch(
                "INSERT INTO owed (service, kind, name, action, reasons, since) VALUES \
                 ('Group[nginx]', 'Group', 'nginx', 'reload', '[\"failed validation\"]', 5), \
                 ('Group[both]', 'Group', 'both', 'reload', '[\"failed validation\"]', 3), \
                 ('ValidationGroup[both]', 'ValidationGroup', 'both', 'reload', \
                  '[\"failed validation\"]', 8), \
                 ('Service[nginx]', 'Service', 'nginx', 'restart', '[\"File[unit] changed\"]', 4); \
                 INSERT INTO verified (kind, name, declaration_hash, verified_at) VALUES \
                 ('Group', 'nginx', 'h1', 5), ('Group', 'ops', 'h2', 6); \
                 INSERT INTO apply_failures (resource, kind, name, declaration_hash, phase, \
                  reason, failed_at) VALUES ('Group[ops]', 'Group', 'ops', 'h', 'apply', 'x', 1); \
                 INSERT INTO accepted (resource, kind, name, declaration_hash, \
                  observation_hash, accepted_at) VALUES ('Group[nginx]', 'Group', 'nginx', 'd', 'o', 2); \
                 INSERT INTO quarantine (target, reason, source, since) VALUES \
                  ('Group[nginx]', 'hands off', 'person', 3); \
                 INSERT INTO reverts (resource, at) VALUES ('Group[nginx]', 4); \
                 INSERT INTO writers (resource, writer_key, at, writer) VALUES \
                  ('Group[nginx]', 'k', 5, '{}');",
            )
            .unwrap();
            drop(conn);
            before = others.map(|(table, columns)| rows(&path, table, columns));
        }
        let store = crate::Store::open(&path).unwrap();
        let owed: Vec<(String, OwedAction, i64)> = store
            .owed_reloads()
            .unwrap()
            .into_iter()
            .map(|o| (o.service.to_string(), o.action, o.since))
            .collect();
        assert_eq!(
            owed,
            [
                // Both names for one group: one debt, the older since.
                ("ValidationGroup[both]".to_owned(), OwedAction::Reload, 3),
                ("Service[nginx]".to_owned(), OwedAction::Restart, 4),
                ("ValidationGroup[nginx]".to_owned(), OwedAction::Reload, 5),
            ]
        );
        let nginx = store
            .owed_reload(&ResourceId::new("ValidationGroup", "nginx"))
            .unwrap()
            .unwrap();
        assert_eq!(nginx.reasons, ["failed validation"]);
        assert_eq!(
            store
                .owed_reload(&ResourceId::new("Group", "nginx"))
                .unwrap(),
            None
        );
        drop(store);
        let after = others.map(|(table, columns)| rows(&path, table, columns));
        assert_eq!(after, before, "a Group resource's own rows are untouched");
        assert!(after.iter().all(|t| !t.is_empty()));
    }

    /// A store a newer Datum wrote (a schema version past this one's) is
    /// refused, not migrated down or used, and left as it is.
    #[test]
    fn a_store_newer_than_this_schema_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        drop(crate::Store::open(&path).unwrap());
        let newer = SCHEMA.migrations.len() + 1;
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(&format!("PRAGMA user_version = {newer}"))
            .unwrap();
        let Err(crate::StoreError::Unusable { reason, .. }) = crate::Store::open(&path) else {
            panic!("a newer store was opened");
        };
        assert!(
            reason.contains(&format!("schema version {newer} is newer")),
            "{reason}"
        );
        let conn = rusqlite::Connection::open(&path).unwrap();
        let version: usize = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, newer);
    }

    #[test]
    fn version_1_database_migrates_to_current_keeping_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let v1 = Schema {
            application_id: APPLICATION_ID,
            migrations: &[V1],
        };
        {
            let dir = crate::db::private_dir(path.parent().unwrap()).unwrap();
            let conn = crate::db::open(&dir, "state.db", &v1).unwrap();
            conn.execute_batch(
                "INSERT INTO passes (command, host, started_at, finished_at, duration_ms, \
                 exit_code, counts) VALUES ('check', 'h', 1, 2, 30, 0, '{}');
                 INSERT INTO class_inspections (pass_id, class, duration_ms) VALUES (1, 'normal', 7);",
            )
            .unwrap();
        }
        let mut store = crate::Store::open(&path).unwrap();
        let p = store
            .inspection_percentiles("check", Some("normal"), 10)
            .unwrap()
            .unwrap();
        assert_eq!(p.p50_ms, 7);
        // The new column is usable.
        let id = store.recent_passes(1).unwrap()[0].id;
        store
            .record_class_inspection_full(id, "critical", 9, true)
            .unwrap();
    }
}
