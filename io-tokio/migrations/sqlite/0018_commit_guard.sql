-- The conflict rule of a commit made in one call (see
-- io-tokio/src/storage/sqlite/one_call.rs): when an append breaks the
-- rule, the call inserts a row here, the CHECK refuses it, and the call
-- stops before its first write. The table never holds a row.
CREATE TABLE commit_guard (
    refused INTEGER NOT NULL,
    CONSTRAINT conflict_rule CHECK (refused = 0)
);
