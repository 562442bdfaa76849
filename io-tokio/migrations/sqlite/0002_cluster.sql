-- ORBIT schema v2 (SQLite): the same logical schema as the PostgreSQL set.
-- `--cluster` runs on PostgreSQL only, so these tables stay empty here;
-- they exist so both backends carry one schema. Times are ms since the
-- Unix epoch.

CREATE TABLE cluster_lease (
    id          INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    holder      TEXT    NOT NULL DEFAULT '',
    epoch       INTEGER NOT NULL DEFAULT 0,
    expires_at  INTEGER NOT NULL DEFAULT 0,
    acquired_at INTEGER NOT NULL DEFAULT 0
);
INSERT INTO cluster_lease (id) VALUES (1);

CREATE TABLE cluster_nodes (
    node_id    TEXT    PRIMARY KEY NOT NULL,
    advertise  TEXT    NOT NULL,
    role       TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL
);
