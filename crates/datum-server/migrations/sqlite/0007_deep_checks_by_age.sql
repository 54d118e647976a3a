-- Recorded deep checks are removed with the daily aggregates, after
-- `retention.daily_days` (`Fleet::prune`, every hour): by their time, like
-- the remembered keys, without reading the whole table.
CREATE INDEX deep_checks_by_age ON deep_checks (at);
