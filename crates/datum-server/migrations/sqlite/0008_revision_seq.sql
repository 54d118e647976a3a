-- The host's sequence number of its last apply of each revision: an apply
-- finished in the same second as that one is late when its number is
-- lower (the order the host made and sends its reports in), as a report
-- is late against the host's last report (`hosts.seq`). 0 for the rows
-- stored before: any apply of their second is then taken as newer.
ALTER TABLE host_revisions ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
