-- Expired idempotency records are deleted once a minute. Without an index
-- on the expiry every round read the whole table — each keyed request of
-- the last 24 hours; 0.3 s at two million records on SQLite, where the
-- round holds the write lock — to find the few that had just expired.
CREATE INDEX idempotency_expiry ON idempotency (expires_at);
