-- A group commit written as one statement (io-tokio/src/storage/postgres/
-- one_statement.rs) also moves its commit connection's token one step, in
-- the same transaction. When the statement's answer is lost, the token
-- tells whether it committed, and fencing it (made negative) stops a late
-- copy of the statement from writing anything. Rows untouched for a week
-- belong to servers long gone and are deleted when a store opens.
CREATE TABLE commit_tokens (
    writer TEXT PRIMARY KEY,
    token BIGINT NOT NULL,
    touched_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
