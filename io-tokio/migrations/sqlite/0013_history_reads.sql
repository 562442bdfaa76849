-- Reads from storage (issue 13). A page of GET /v1/executions, newest first,
-- walks one index backwards whatever the filter, so its cost does not grow
-- with the table: executions_created (created_at, id) serves no filter and
-- the created range; the others lead with the filtered columns.
CREATE INDEX executions_status_page ON executions (status, created_at, id);
CREATE INDEX executions_workflow_page ON executions (workflow, created_at, id);
CREATE INDEX executions_workflow_status_page ON executions (workflow, status, created_at, id);
CREATE INDEX executions_workflow_version_page ON executions (workflow, version, created_at, id);
CREATE INDEX executions_version_page ON executions (version, created_at, id);
-- Superseded by executions_status_page.
DROP INDEX executions_status;

-- Retention: finished top-level executions, oldest finish first.
CREATE INDEX executions_finished ON executions (updated_at)
    WHERE parent IS NULL AND status IN ('completed', 'failed', 'cancelled');
-- Retention deletes a parent with its descendants, found through parent.
CREATE INDEX executions_parent ON executions (parent) WHERE parent IS NOT NULL;
