-- The web view (issue 15), SQLite. Keep in step with postgres/0003_web.sql.

-- Signed-in operators. The cookie holds a random token; only its SHA-256 is
-- kept, so a copy of the database signs nobody in. A session lives as long
-- as the admin credential it was opened with (token_hash) still exists, at
-- most until expires_at, and ends at logout (the row is deleted: every
-- server process sees it at once).
CREATE TABLE sessions (
    id_hash     TEXT PRIMARY KEY,
    token_hash  TEXT NOT NULL,
    operator    TEXT NOT NULL,
    address     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
CREATE INDEX sessions_by_expiry ON sessions (expires_at);

-- What a person asked of a host (quarantine, release), with who, from
-- where and why: the audit log, never pruned. A reply to the host's reports
-- repeats an instruction until a report of the host says it was carried out
-- (done_at, outcome, done_seq).
CREATE TABLE instructions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    key           TEXT NOT NULL UNIQUE,
    host          TEXT NOT NULL,
    action        TEXT NOT NULL CHECK (action IN ('quarantine', 'release')),
    target        TEXT NOT NULL,
    reason        TEXT NOT NULL,
    requested_by  TEXT NOT NULL,
    credential    TEXT NOT NULL,
    address       TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    sent_at       INTEGER,
    sent_count    INTEGER NOT NULL DEFAULT 0,
    done_at       INTEGER,
    outcome       TEXT,
    done_seq      INTEGER
);
CREATE INDEX instructions_by_host ON instructions (host, done_at);

-- How many consecutive checks of its host saw each open finding, as the
-- host said when the finding was last written (the host page reads the
-- newest report's count), and the most any host of a drift cluster said
-- (moved with the cluster's last_seen at ingest, so it costs no write).
ALTER TABLE findings ADD COLUMN checks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE drift_clusters ADD COLUMN checks INTEGER NOT NULL DEFAULT 0;
