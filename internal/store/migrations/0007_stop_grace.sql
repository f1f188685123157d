-- When a stop was decided and the grace it gives (the scheduler's
-- Stop.Grace): the agent's stop order and the scheduler's view of a
-- stopping attempt (holding its GPUs until the grace ends) read them.
ALTER TABLE attempts ADD COLUMN stop_requested_at BIGINT;
ALTER TABLE attempts ADD COLUMN stop_grace_s DOUBLE PRECISION;
