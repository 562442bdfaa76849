-- Executions per status as running totals, changed in the same transaction
-- as the rows they count: `/metrics` reads a few rows here instead of
-- counting a table that grows with every execution ever run. A status's
-- count is the sum over its shards. Each shared-mode member adds to a
-- shard of its own (its node id), so members never wait on one another's
-- totals; a single server, the leader of `--cluster` and retention use ''.
-- A shard may go below zero (retention removes what a member counted);
-- only the sums mean anything. Counted once from the rows already stored.
CREATE TABLE execution_counts (
    shard  TEXT   NOT NULL,
    status TEXT   NOT NULL,
    n      BIGINT NOT NULL,
    PRIMARY KEY (shard, status)
);
INSERT INTO execution_counts (shard, status, n)
    SELECT '', status, COUNT(*) FROM executions GROUP BY status;
