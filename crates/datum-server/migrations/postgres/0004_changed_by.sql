-- Who changed each open finding's resource (issue 20): the host's
-- attribution as the report carried it (JSON list of writers: kind, via,
-- user, login user, unit, time; never a command line), '[]' when nothing
-- was attributed. The drift views list the distinct writers per cluster.
ALTER TABLE findings ADD COLUMN changed_by TEXT NOT NULL DEFAULT '[]';
