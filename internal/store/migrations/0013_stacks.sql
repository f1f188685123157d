-- Stacks: named sets of software and firmware versions (docs/STACKS.md).
-- versions is a JSON object of component to version; validated a JSON
-- array of the evidence per GPU model.
CREATE TABLE stacks (
    name       TEXT PRIMARY KEY,
    versions   TEXT NOT NULL,
    notes      TEXT NOT NULL,
    state      TEXT NOT NULL,
    validated  TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    retired_at BIGINT
);
