-- The drift samples are the first hosts of a cluster in byte order,
-- whatever the database's collation, so the cluster index holds its hosts
-- in that order: the overview's per-cluster LIMIT reads its few rows from
-- the index (on PostgreSQL it sorted every host of the cluster once the
-- query asked for byte order and the index was in the database's
-- collation, even C.UTF-8), and the drift view's window reads the
-- findings in the order it numbers them. SQLite's default collation is
-- byte order already: the same index, made again.
DROP INDEX findings_by_cluster;
CREATE INDEX findings_by_cluster ON findings (signature, observed, host COLLATE "C");
