-- The ETA is a range (scheduler.Pending): the p90 of the estimated start
-- and the confidence in its median, beside queue_estimated_start.
ALTER TABLE jobs ADD COLUMN queue_estimated_start_p90 BIGINT;
ALTER TABLE jobs ADD COLUMN queue_eta_confidence DOUBLE PRECISION;
