-- Commits touch only what changes. A running execution's row is rewritten
-- on every commit (last_seq, updated_at); an index over a column that
-- every commit changes is rewritten with it. Retention's index therefore
-- moves from updated_at to finished_at, which is written once, when the
-- execution ends. With no indexed column changed, PostgreSQL can update
-- the row in place (HOT) instead of adding an entry to every index.
ALTER TABLE executions ADD COLUMN finished_at BIGINT;
UPDATE executions SET finished_at = updated_at
    WHERE status IN ('completed', 'failed', 'cancelled');
DROP INDEX executions_finished;
CREATE INDEX executions_finished ON executions (finished_at)
    WHERE parent IS NULL AND finished_at IS NOT NULL;
-- Room on each page for the new version of a row updated in place.
ALTER TABLE executions SET (fillfactor = 80);
