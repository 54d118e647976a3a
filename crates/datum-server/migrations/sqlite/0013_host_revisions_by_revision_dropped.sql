-- `host_revisions_rollout` (migration 12) begins with the revision: this
-- index only cost every apply a write.
DROP INDEX IF EXISTS host_revisions_by_revision;
