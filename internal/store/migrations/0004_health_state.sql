-- The health rules' memory per node (held event conditions, counter
-- baselines), as JSON, so that a restarted or new leader judges a node the
-- way the last one did.
ALTER TABLE nodes ADD COLUMN health_state TEXT NOT NULL DEFAULT '';
