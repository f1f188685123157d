-- Seconds a GPU was held in each minute, and of those the seconds it was
-- held at under the idle threshold, classified per heartbeat interval (a
-- minute's mean would count a GPU held for a few seconds as a whole idle
-- minute).
ALTER TABLE gpu_rollups ADD COLUMN allocated_s DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE gpu_rollups ADD COLUMN idle_allocated_s DOUBLE PRECISION NOT NULL DEFAULT 0;
