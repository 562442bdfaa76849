-- ORBIT schema v2 (PostgreSQL): the `--cluster` leader lease and the node
-- contact table. Times are the database's own clock (now()), never a
-- server's.

-- One row: who leads, with which epoch, until when. A standby takes it
-- once expires_at has passed, with epoch + 1; every commit of the leader
-- reads it (FOR SHARE) in its own transaction and is refused when the
-- holder or the epoch moved on.
CREATE TABLE cluster_lease (
    id          SMALLINT    PRIMARY KEY CHECK (id = 1),
    holder      TEXT        NOT NULL DEFAULT '',
    epoch       BIGINT      NOT NULL DEFAULT 0,
    expires_at  TIMESTAMPTZ NOT NULL DEFAULT 'epoch',
    acquired_at TIMESTAMPTZ NOT NULL DEFAULT 'epoch'
);
INSERT INTO cluster_lease (id) VALUES (1);

-- Every node's last contact, for GET /v1/cluster.
CREATE TABLE cluster_nodes (
    node_id    TEXT        PRIMARY KEY,
    advertise  TEXT        NOT NULL,
    role       TEXT        NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    last_seen  TIMESTAMPTZ NOT NULL
);
