-- The state store each report said it came from (`Datum-Store-Id`): a
-- report older than every one retention keeps of its host is taken as one
-- already seen (its key gone with it) only when it comes from the store
-- of the oldest kept, whose numbering it then shares; a new store's
-- reports, numbered from 1 again, are new whatever the host's clock says.
-- NULL for reports stored before, and for hosts that do not say.
ALTER TABLE reports ADD COLUMN store_id TEXT;
