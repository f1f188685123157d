-- Racks: power domains with a budget (docs/POWER.md). nodes is a JSON
-- array of the node names listed; nodes labelled rack=NAME belong too.
CREATE TABLE racks (
    name                     TEXT PRIMARY KEY,
    power_budget_watts       DOUBLE PRECISION NOT NULL,
    production_reserve_watts DOUBLE PRECISION NOT NULL,
    cooling_watts            DOUBLE PRECISION,
    pue                      DOUBLE PRECISION,
    nodes                    TEXT NOT NULL,
    updated_at               BIGINT NOT NULL
);
