-- A multi-node attempt succeeds when every node's rank has exited 0: the
-- time each node reported its own success (NULL while it runs).
ALTER TABLE attempt_nodes ADD COLUMN succeeded_at BIGINT;
