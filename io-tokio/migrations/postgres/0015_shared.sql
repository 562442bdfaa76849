-- Shared cluster mode (`--cluster --cluster-mode shared`): every server
-- executes workflows; each running execution has one owner
-- (executions.owner_node, owner_epoch). Times are the database's clock.
-- See orbit_core::store::shared for the calls that use these tables.

-- Each server's contact, written every 250 ms. A node silent for
-- --node-timeout is dead; who is dead and what it owns is read from
-- executions, so a row is only needed while a node is alive.
CREATE TABLE nodes (
    node_id    TEXT        PRIMARY KEY,
    advertise  TEXT        NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    last_seen  TIMESTAMPTZ NOT NULL
);

-- The non-terminal executions of each owner: the dead owners (a loose scan
-- of the distinct owner_node values) and a dead owner's executions for a
-- takeover. owner_node changes only on takeover, so a running execution's
-- commits stay HOT (status is indexed already).
CREATE INDEX executions_owner ON executions (owner_node, id)
    WHERE status NOT IN ('completed', 'failed', 'cancelled');

-- The slot of an execution id that spreads a dead node's executions over
-- the survivors: the first four bytes of SHA-256 of its UTF-8 bytes,
-- big-endian (orbit_core::store::shared::slot computes the same).
CREATE FUNCTION orbit_slot(id TEXT) RETURNS BIGINT
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT (get_byte(h, 0)::BIGINT << 24) | (get_byte(h, 1)::BIGINT << 16)
         | (get_byte(h, 2)::BIGINT << 8) | get_byte(h, 3)::BIGINT
    FROM (SELECT sha256(convert_to(id, 'UTF8')) AS h) AS digest
$$;

-- What an inbox entry asks (start, signal, cancel, result, dispatch).
-- Entries are read by (node_id, id) (index inbox_node) and re-addressed by
-- execution on takeover.
ALTER TABLE inbox ADD COLUMN kind TEXT NOT NULL DEFAULT '';
CREATE INDEX inbox_execution ON inbox (execution_id);

-- A poll claims the oldest row of its tasks: the index walks each task's
-- rows in claim order.
CREATE INDEX task_queue_claim ON task_queue (task, enqueued_at, execution_id, unit);
DROP INDEX task_queue_task;

-- Each worker session's last contact, written by the server it polls every
-- 250 ms and read by the owners of its tasks.
CREATE TABLE worker_sessions (
    session   TEXT        PRIMARY KEY,
    node_id   TEXT        NOT NULL,
    last_seen TIMESTAMPTZ NOT NULL
);
