-- Who put a node in its state (gpufleet.StateCause: operator, health,
-- repair, rollout): the quarantine circuit breaker counts the nodes the
-- health rules took out of service by it, not by the words of the
-- reason. Nodes the rules drained before this column carry reasons
-- starting "health:". GPUs keep their cause in the gpus JSON.
ALTER TABLE nodes ADD COLUMN state_cause TEXT NOT NULL DEFAULT '';
UPDATE nodes SET state_cause = 'health' WHERE state_reason LIKE 'health:%';
