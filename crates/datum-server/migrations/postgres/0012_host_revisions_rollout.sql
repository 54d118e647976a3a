-- The rollout page's revision list counts the hosts of each of the newest
-- revisions (and those that failed it) and their last apply: read from
-- this index alone, the table's rows are not visited (`queries::revisions`).
-- Its first column serves every lookup by revision the old index did,
-- which migration 13 drops.
CREATE INDEX IF NOT EXISTS host_revisions_rollout ON host_revisions (revision, outcome, last_at);
