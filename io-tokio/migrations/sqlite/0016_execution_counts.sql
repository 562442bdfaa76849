-- Executions per status as running totals, changed in the same transaction
-- as the rows they count: `/metrics` reads a few rows here instead of
-- counting a table that grows with every execution ever run. A status's
-- count is the sum over its shards; SQLite has one writer, so one shard
-- (''). Counted once from the rows already stored.
CREATE TABLE execution_counts (
    shard  TEXT    NOT NULL,
    status TEXT    NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (shard, status)
);
INSERT INTO execution_counts (shard, status, n)
    SELECT '', status, COUNT(*) FROM executions GROUP BY status;
