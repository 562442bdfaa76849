-- ORBIT schema v1 (PostgreSQL). The same logical schema as the SQLite set;
-- JSON documents are stored as TEXT so they round-trip byte for byte.

-- Registered definitions: immutable once written.
CREATE TABLE definitions (
    name          TEXT   NOT NULL,
    version       TEXT   NOT NULL,
    hash          TEXT   NOT NULL,
    kind          TEXT   NOT NULL,
    filename      TEXT   NOT NULL,
    source        TEXT   NOT NULL,
    body          TEXT   NOT NULL,
    registered_at BIGINT NOT NULL,
    PRIMARY KEY (name, version)
);

-- The execution projection: one row per execution, updated in the same
-- transaction as the events it summarises. owner_node/owner_epoch fence
-- writers in the cluster modes (a single node writes epoch 0).
CREATE TABLE executions (
    id              TEXT   PRIMARY KEY,
    workflow        TEXT   NOT NULL,
    version         TEXT   NOT NULL,
    definition_hash TEXT   NOT NULL,
    status          TEXT   NOT NULL,
    parent          TEXT,
    input           TEXT   NOT NULL,
    output          TEXT,
    error           TEXT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    last_seq        BIGINT NOT NULL,
    owner_node      TEXT   NOT NULL DEFAULT '',
    owner_epoch     BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX executions_status ON executions (status, created_at);
CREATE INDEX executions_created ON executions (created_at, id);

-- Histories: contiguous seq per execution, enforced by the primary key.
CREATE TABLE events (
    execution_id TEXT   NOT NULL,
    seq          BIGINT NOT NULL,
    at           BIGINT NOT NULL,
    type         TEXT   NOT NULL,
    body         TEXT   NOT NULL,
    PRIMARY KEY (execution_id, seq)
);

-- Task-queue rows (shared cluster mode claims them; a single node keeps
-- them in step with its memory).
CREATE TABLE task_queue (
    execution_id TEXT   NOT NULL,
    unit         TEXT   NOT NULL,
    task         TEXT   NOT NULL,
    enqueued_at  BIGINT NOT NULL,
    body         TEXT   NOT NULL,
    PRIMARY KEY (execution_id, unit)
);
CREATE INDEX task_queue_task ON task_queue (task, enqueued_at);

-- API idempotency records.
CREATE TABLE idempotency (
    scope       TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    status      INTEGER NOT NULL,
    body        TEXT    NOT NULL,
    expires_at  BIGINT  NOT NULL,
    PRIMARY KEY (scope, key)
);

-- Commands addressed to the owner of an execution (shared cluster mode).
CREATE TABLE inbox (
    id           BIGSERIAL PRIMARY KEY,
    node_id      TEXT   NOT NULL,
    execution_id TEXT   NOT NULL,
    body         TEXT   NOT NULL,
    created_at   BIGINT NOT NULL
);
CREATE INDEX inbox_node ON inbox (node_id, id);
