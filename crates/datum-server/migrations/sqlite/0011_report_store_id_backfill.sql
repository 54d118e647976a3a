-- Reports stored before migration 10 say no store, and a report that says
-- its store is taken as already seen only against an oldest kept report
-- of that same store: without this, no resend would be taken as seen (and
-- each stored and counted again) until retention had replaced every
-- report kept from before. They get their host's last store (what its
-- reports have said since migration 9): the store that made them unless
-- the host's store was made anew among its reports kept. Rows of hosts
-- that never said stay NULL (judged as before stores were known).
UPDATE reports SET store_id = (SELECT h.store_id FROM hosts h WHERE h.name = reports.host)
WHERE store_id IS NULL;
