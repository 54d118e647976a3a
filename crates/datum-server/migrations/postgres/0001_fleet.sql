-- The fleet's tables (PostgreSQL). Keep in step with sqlite/0001_fleet.sql:
-- the same tables, columns and meaning; only the dialect differs.
-- Times are Unix seconds (BIGINT); JSON is kept as text (read whole, never
-- queried inside).

-- Who may report: hosts and stacks (kind), and admins. Tokens are stored as
-- their SHA-256 only.
CREATE TABLE identities (
    token_hash  TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('host', 'stack', 'admin')),
    created_at  BIGINT NOT NULL
);
CREATE INDEX identities_by_name ON identities (name, kind);

-- One row per host or stack: its latest picture, updated by every report.
CREATE TABLE hosts (
    name                 TEXT PRIMARY KEY,
    kind                 TEXT NOT NULL,
    enrolled_at          BIGINT NOT NULL,
    labels               TEXT NOT NULL DEFAULT '{}',
    last_report_at       BIGINT,
    last_report_kind     TEXT,
    seq                  BIGINT NOT NULL DEFAULT 0,
    revision             TEXT,
    catalogue            TEXT,
    datum_version        TEXT,
    counts               TEXT NOT NULL DEFAULT '{}',
    resources            BIGINT NOT NULL DEFAULT 0,
    open_findings        BIGINT NOT NULL DEFAULT 0,
    quarantined          BIGINT NOT NULL DEFAULT 0,
    last_apply_at        BIGINT,
    last_apply_revision  TEXT,
    last_apply_failed    BIGINT NOT NULL DEFAULT 0,
    check_errors         BIGINT NOT NULL DEFAULT 0,
    state                TEXT NOT NULL DEFAULT 'new',
    expected_interval_s  BIGINT NOT NULL DEFAULT 0,
    outbox_depth         BIGINT NOT NULL DEFAULT 0,
    outbox_dropped       BIGINT NOT NULL DEFAULT 0,
    classes              TEXT NOT NULL DEFAULT '[]',
    trees                BIGINT NOT NULL DEFAULT 0,
    trees_differing      BIGINT NOT NULL DEFAULT 0,
    reports_held         BIGINT NOT NULL DEFAULT 0,
    last_deep_round      BIGINT
);

-- The last N reports of each host, whole (retention: server.yaml).
CREATE TABLE reports (
    id           BIGSERIAL PRIMARY KEY,
    host         TEXT NOT NULL,
    key          TEXT NOT NULL,
    seq          BIGINT NOT NULL,
    kind         TEXT NOT NULL,
    received_at  BIGINT NOT NULL,
    finished_at  BIGINT NOT NULL,
    revision     TEXT NOT NULL,
    exit_code    BIGINT NOT NULL,
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
    at    BIGINT NOT NULL,
    PRIMARY KEY (host, key)
);
CREATE INDEX report_keys_by_age ON report_keys (at);

-- Per host and revision: how its last apply of that revision ended.
CREATE TABLE host_revisions (
    host       TEXT NOT NULL,
    revision   TEXT NOT NULL,
    first_at   BIGINT NOT NULL,
    last_at    BIGINT NOT NULL,
    outcome    TEXT NOT NULL,
    changed    BIGINT NOT NULL,
    failed     BIGINT NOT NULL,
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
    exit_status        BIGINT,
    signature          TEXT NOT NULL,
    message            TEXT NOT NULL,
    at                 BIGINT NOT NULL,
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
    first_seen  BIGINT NOT NULL,
    last_seen   BIGINT NOT NULL,
    PRIMARY KEY (host, signature)
);
CREATE INDEX findings_by_signature ON findings (signature, observed);

-- Which sampling rounds each host deep-checked in.
CREATE TABLE deep_checks (
    host   TEXT NOT NULL,
    round  BIGINT NOT NULL,
    at     BIGINT NOT NULL,
    PRIMARY KEY (host, round)
);

-- Daily aggregates, kept longer than the reports themselves.
CREATE TABLE daily (
    host          TEXT NOT NULL,
    day           BIGINT NOT NULL,
    reports       BIGINT NOT NULL,
    applies       BIGINT NOT NULL,
    failed        BIGINT NOT NULL,
    max_findings  BIGINT NOT NULL,
    PRIMARY KEY (host, day)
);
