-- A queued job's reason as data (gpufleet.Explanation, docs/JOBS.md#why-a-job-waits):
-- the nodes the scheduler looked at, the nodes each filter left out and the
-- dimension that ran out, as JSON, beside queue_reason and queue_reason_code.
-- JSON (not JSONB) on PostgreSQL keeps the text as written, so a cycle that
-- changes nothing writes nothing.
ALTER TABLE jobs ADD COLUMN queue_explanation {{.JSON}};
