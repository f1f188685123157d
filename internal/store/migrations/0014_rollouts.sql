-- Rollouts: a stack moving over the fleet in waves (docs/STACKS.md). The
-- whole state is JSON, written by the leader after each step; state is
-- repeated for listing the active ones.
CREATE TABLE rollouts (
    id         TEXT PRIMARY KEY,
    state      TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
