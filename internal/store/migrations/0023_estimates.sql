-- Estimates from history (docs/SCHEDULER.md#estimates-from-history): the
-- leader reads the newest succeeded jobs (Store.Runs) through
-- jobs_succeeded, and each queued job keeps the run time it was planned
-- on and where that came from (gpufleet.RunEstimate) as JSON.
CREATE INDEX jobs_succeeded ON jobs (finished_at) WHERE state = 'succeeded';
ALTER TABLE jobs ADD COLUMN queue_estimate {{.JSON}};
