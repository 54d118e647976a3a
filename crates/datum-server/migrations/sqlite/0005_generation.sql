-- The views' generation (issue 13): every write that changes what the
-- fleet views show (a report stored, a host enrolled, a picture
-- backfilled) adds one to a slot here, in the same transaction. The sum
-- only grows, so a server that cached an answer when the sum was G may
-- serve it for as long as the sum is still G, whichever server wrote
-- since. Several slots so that concurrent writers rarely wait on the same
-- row.
CREATE TABLE generation (
    slot INTEGER PRIMARY KEY,
    n BIGINT NOT NULL
);
