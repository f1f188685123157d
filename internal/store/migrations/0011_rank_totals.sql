-- A multi-node attempt's accounting is the sum of its nodes' totals: each
-- node's own, as its agent reports them (totals, never decreasing).
ALTER TABLE attempt_nodes ADD COLUMN gpu_seconds DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE attempt_nodes ADD COLUMN effective_gpu_seconds DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE attempt_nodes ADD COLUMN energy_joules DOUBLE PRECISION NOT NULL DEFAULT 0;
