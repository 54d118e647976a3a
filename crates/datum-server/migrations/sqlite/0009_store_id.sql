-- The state store a host's last report came from (`Datum-Store-Id`, drawn
-- when the store was made), and the store of its last apply of each
-- revision: a report from another store than that one starts a numbering
-- of its own, so it is never late by its number, only by its second. NULL
-- for hosts (and rows) whose reports never said: the seq-1 rule then.
ALTER TABLE hosts ADD COLUMN store_id TEXT;
ALTER TABLE host_revisions ADD COLUMN store_id TEXT;
