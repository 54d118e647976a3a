-- The fleet's tables (SQLite). Keep in step with postgres/0001_fleet.sql:
-- the same tables, columns and meaning; only the dialect differs.
-- Times are Unix seconds (INTEGER); JSON is kept as text (read whole, never
-- queried inside).

-- Who may report: hosts and stacks (kind), and admins. Tokens are stored as
-- their SHA-256 only.
CREATE TABLE identities (
    token_hash  TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('host', 'stack', 'admin')),
    created_at  INTEGER NOT NULL
);
CREATE INDEX identities_by_name ON identities (name, kind);

-- One row per host or stack: its latest picture, updated by every report.
CREATE TABLE hosts (
    name                 TEXT PRIMARY KEY,
    kind                 TEXT NOT NULL,
    enrolled_at          INTEGER NOT NULL,
    labels               TEXT NOT NULL DEFAULT '{}',
    last_report_at       INTEGER,
    last_report_kind     TEXT,
    seq                  INTEGER NOT NULL DEFAULT 0,
    revision             TEXT,
    catalogue            TEXT,
    datum_version        TEXT,
    counts               TEXT NOT NULL DEFAULT '{}',
    resources            INTEGER NOT NULL DEFAULT 0,
    open_findings        INTEGER NOT NULL DEFAULT 0,
    quarantined          INTEGER NOT NULL DEFAULT 0,
    last_apply_at        INTEGER,
    last_apply_revision  TEXT,
    last_apply_failed    INTEGER NOT NULL DEFAULT 0,
    check_errors         INTEGER NOT NULL DEFAULT 0,
    state                TEXT NOT NULL DEFAULT 'new',
    expected_interval_s  INTEGER NOT NULL DEFAULT 0,
    outbox_depth         INTEGER NOT NULL DEFAULT 0,
    outbox_dropped       INTEGER NOT NULL DEFAULT 0,
    classes              TEXT NOT NULL DEFAULT '[]',
    trees                INTEGER NOT NULL DEFAULT 0,
    trees_differing      INTEGER NOT NULL DEFAULT 0,
    reports_held         INTEGER NOT NULL DEFAULT 0,
    last_deep_round      INTEGER
);

-- The last N reports of each host, whole (retention: server.yaml).
CREATE TABLE reports (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    host         TEXT NOT NULL,
    key          TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    kind         TEXT NOT NULL,
    received_at  INTEGER NOT NULL,
    finished_at  INTEGER NOT NULL,
    revision     TEXT NOT NULL,
    exit_code    INTEGER NOT NULL,
    body         TEXT NOT NULL,
    UNIQUE (host, key)
);
CREATE INDEX reports_by_host ON reports (host, id);

-- Every idempotency key stored, kept longer than the reports themselves
-- (retention prunes reports, never the memory of having taken one), so a
-- retried delivery is recognised however late it comes.
CREATE TABLE report_keys (
    host  TEXT NOT NULL,
    key   TEXT NOT NULL,
    at    INTEGER NOT NULL,
    PRIMARY KEY (host, key)
);
CREATE INDEX report_keys_by_age ON report_keys (at);

-- Per host and revision: how its last apply of that revision ended.
CREATE TABLE host_revisions (
    host       TEXT NOT NULL,
    revision   TEXT NOT NULL,
    first_at   INTEGER NOT NULL,
    last_at    INTEGER NOT NULL,
    outcome    TEXT NOT NULL,
    changed    INTEGER NOT NULL,
    failed     INTEGER NOT NULL,
    PRIMARY KEY (host, revision)
);
CREATE INDEX host_revisions_by_revision ON host_revisions (revision, last_at);

-- The failures of each host's last apply of each revision.
CREATE TABLE failures (
    host               TEXT NOT NULL,
    revision           TEXT NOT NULL,
    resource           TEXT NOT NULL,
    phase              TEXT NOT NULL,
    validator          TEXT,
    validator_version  TEXT,
    exit_status        INTEGER,
    signature          TEXT NOT NULL,
    message            TEXT NOT NULL,
    at                 INTEGER NOT NULL,
    PRIMARY KEY (host, revision, resource)
);
CREATE INDEX failures_by_revision ON failures (revision);

-- Drift findings open on each host (as of its latest check of their class).
CREATE TABLE findings (
    host        TEXT NOT NULL,
    signature   TEXT NOT NULL,
    subject     TEXT NOT NULL,
    category    TEXT NOT NULL,
    class       TEXT NOT NULL,
    paths       TEXT NOT NULL,
    observed    TEXT,
    first_seen  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    PRIMARY KEY (host, signature)
);
CREATE INDEX findings_by_signature ON findings (signature, observed);

-- Which sampling rounds each host deep-checked in.
CREATE TABLE deep_checks (
    host   TEXT NOT NULL,
    round  INTEGER NOT NULL,
    at     INTEGER NOT NULL,
    PRIMARY KEY (host, round)
);

-- Daily aggregates, kept longer than the reports themselves.
CREATE TABLE daily (
    host          TEXT NOT NULL,
    day           INTEGER NOT NULL,
    reports       INTEGER NOT NULL,
    applies       INTEGER NOT NULL,
    failed        INTEGER NOT NULL,
    max_findings  INTEGER NOT NULL,
    PRIMARY KEY (host, day)
);
