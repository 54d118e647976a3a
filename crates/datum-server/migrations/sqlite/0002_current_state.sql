-- The current state the fleet's views read, kept up to date by every report
-- (SQLite). Keep in step with postgres/0002_current_state.sql.
--
-- Each view reads only what it shows: `hosts` one row per host with its
-- picture pre-rendered; `drift` one row per cluster; `rollout` the
-- revision's own rows. Ingest maintains all of it in the report's
-- transaction, so a view never recomputes the fleet from its history.

-- The host's picture as the hosts view shows it (the members of its JSON
-- object, rendered when the report that set them was stored), so listing
-- 10,000 hosts decodes nothing.
ALTER TABLE hosts ADD COLUMN view_json TEXT;

-- The host's labels when it applied the revision: what separates the
-- groups of a rollout, without reading every host.
ALTER TABLE host_revisions ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
UPDATE host_revisions SET labels = coalesce(
    (SELECT hosts.labels FROM hosts WHERE hosts.name = host_revisions.host), '{}');
DROP INDEX host_revisions_by_revision;
CREATE INDEX host_revisions_by_revision ON host_revisions (revision);

-- Every revision applied, and when last: the latest is one index lookup.
CREATE TABLE revisions (
    revision  TEXT PRIMARY KEY,
    first_at  BIGINT NOT NULL,
    last_at   BIGINT NOT NULL
);
CREATE INDEX revisions_by_time ON revisions (last_at);
INSERT INTO revisions (revision, first_at, last_at)
    SELECT revision, min(first_at), max(last_at) FROM host_revisions GROUP BY revision;

-- A finding without an observed hash (a sensitive resource) has '' there,
-- so it belongs to one cluster like any other.
UPDATE findings SET observed = '' WHERE observed IS NULL;
DROP INDEX findings_by_signature;
CREATE INDEX findings_by_cluster ON findings (signature, observed, host);

-- Drift clusters: hosts with an open finding of the same value-free
-- signature and observed hash. `hosts` moves with every report that opens
-- or closes such a finding; `first_seen` is the earliest sighting since the
-- cluster last had no host, `last_seen` the latest report that showed it.
CREATE TABLE drift_clusters (
    signature   TEXT NOT NULL,
    observed    TEXT NOT NULL,
    hosts       BIGINT NOT NULL,
    subject     TEXT NOT NULL,
    category    TEXT NOT NULL,
    class       TEXT NOT NULL,
    paths       TEXT NOT NULL,
    first_seen  BIGINT NOT NULL,
    last_seen   BIGINT NOT NULL,
    PRIMARY KEY (signature, observed)
);
INSERT INTO drift_clusters (signature, observed, hosts, subject, category, class, paths, first_seen, last_seen)
    SELECT signature, observed, count(*), min(subject), min(category), min(class), min(paths),
           min(first_seen), max(last_seen)
    FROM findings GROUP BY signature, observed;
