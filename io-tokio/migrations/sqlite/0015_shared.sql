-- Shared cluster mode runs on PostgreSQL only (`--cluster` is refused on
-- SQLite); its tables are kept here so that both backends hold the same
-- logical schema. The indexes that serve its calls are PostgreSQL's alone.
CREATE TABLE nodes (
    node_id    TEXT    PRIMARY KEY NOT NULL,
    advertise  TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL
);

ALTER TABLE inbox ADD COLUMN kind TEXT NOT NULL DEFAULT '';

CREATE TABLE worker_sessions (
    session   TEXT    PRIMARY KEY NOT NULL,
    node_id   TEXT    NOT NULL,
    last_seen INTEGER NOT NULL
);
