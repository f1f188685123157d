-- 0001: the initial schema. Timestamps are BIGINT unix nanoseconds (UTC),
-- NULL when not yet known; JSON documents are TEXT. {{.Serial}} and
-- {{.Bytes}} come from the dialect.

CREATE TABLE teams (
    name            TEXT PRIMARY KEY,
    quota           TEXT NOT NULL,             -- JSON {class: GPUs}
    borrowing_limit BIGINT NOT NULL,
    weight          DOUBLE PRECISION NOT NULL,
    updated_at      BIGINT NOT NULL
);

CREATE TABLE classes (
    name       TEXT PRIMARY KEY,
    models     TEXT NOT NULL,                  -- JSON [catalog id]
    updated_at BIGINT NOT NULL
);

CREATE TABLE tokens (
    id         TEXT PRIMARY KEY,
    hash       {{.Bytes}} NOT NULL,
    team       TEXT NOT NULL,
    role       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);

CREATE TABLE join_tokens (
    id         TEXT PRIMARY KEY,
    hash       {{.Bytes}} NOT NULL,
    node       TEXT NOT NULL,
    single_use BOOLEAN NOT NULL,
    expires_at BIGINT,
    used_at    BIGINT,
    created_at BIGINT NOT NULL
);

CREATE TABLE node_credentials (
    node       TEXT PRIMARY KEY,
    hash       {{.Bytes}} NOT NULL,
    expires_at BIGINT NOT NULL
);

CREATE TABLE nodes (
    name          TEXT PRIMARY KEY,
    state         TEXT NOT NULL,
    health        TEXT NOT NULL,
    state_reason  TEXT NOT NULL,
    health_reason TEXT NOT NULL,
    metrics_url   TEXT NOT NULL,
    labels        TEXT NOT NULL,               -- JSON
    versions      TEXT NOT NULL,               -- JSON
    gpus          TEXT NOT NULL,               -- JSON [NodeGPU]
    registered_at BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);

CREATE TABLE jobs (
    id               TEXT PRIMARY KEY,
    team             TEXT NOT NULL,
    name             TEXT NOT NULL,
    state            TEXT NOT NULL,
    cancel_requested BOOLEAN NOT NULL,
    priority         TEXT NOT NULL,
    request_id       TEXT NOT NULL,
    spec             TEXT NOT NULL,            -- JSON of the immutable fields
    retries_max      BIGINT NOT NULL,
    retries_used     BIGINT NOT NULL,
    interruptions    BIGINT NOT NULL,
    submitted_at     BIGINT NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT,
    -- queue information from the last decision; NULL position: none
    queue_position        BIGINT,
    queue_team_position   BIGINT,
    queue_reason          TEXT,
    queue_reason_code     TEXT,
    queue_estimated_start BIGINT,
    updated_at       BIGINT NOT NULL
);
CREATE UNIQUE INDEX jobs_team_request ON jobs (team, request_id) WHERE request_id <> '';
CREATE INDEX jobs_state ON jobs (state, id);
CREATE INDEX jobs_team ON jobs (team, id);
CREATE INDEX jobs_queue ON jobs (queue_position) WHERE queue_position IS NOT NULL;

CREATE TABLE attempts (
    id                    TEXT PRIMARY KEY,
    job_id                TEXT NOT NULL REFERENCES jobs (id),
    seq                   BIGINT NOT NULL,     -- 1, 2, ... within the job
    state                 TEXT NOT NULL,
    node                  TEXT NOT NULL,       -- first node
    nodes                 TEXT NOT NULL,       -- JSON [AttemptNode]
    fraction              DOUBLE PRECISION NOT NULL,
    started_at            BIGINT,
    finished_at           BIGINT,
    exit_code             BIGINT,
    reason                TEXT NOT NULL,
    reason_code           TEXT NOT NULL,
    gpu_seconds           DOUBLE PRECISION NOT NULL,
    effective_gpu_seconds DOUBLE PRECISION NOT NULL,
    energy_joules         DOUBLE PRECISION NOT NULL,
    stop_requested        BOOLEAN NOT NULL,
    stop_reason           TEXT NOT NULL,
    stop_reason_code      TEXT NOT NULL,
    updated_at            BIGINT NOT NULL,
    UNIQUE (job_id, seq)
);

-- attempt_nodes indexes attempts by every node they use, for the
-- assignments an agent asks for.
CREATE TABLE attempt_nodes (
    node       TEXT NOT NULL,
    attempt_id TEXT NOT NULL REFERENCES attempts (id),
    PRIMARY KEY (node, attempt_id)
);

CREATE TABLE events (
    id     {{.Serial}},
    at     BIGINT NOT NULL,
    actor  TEXT NOT NULL,
    kind   TEXT NOT NULL,
    object TEXT NOT NULL,
    team   TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX events_object ON events (object, id);
CREATE INDEX events_team ON events (team, id);

CREATE TABLE usage_daily (
    team                  TEXT NOT NULL,
    model                 TEXT NOT NULL,
    day                   BIGINT NOT NULL,     -- UTC midnight
    gpu_seconds           DOUBLE PRECISION NOT NULL,
    effective_gpu_seconds DOUBLE PRECISION NOT NULL,
    energy_joules         DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (team, model, day)
);

CREATE TABLE leader_lease (
    id         BIGINT PRIMARY KEY CHECK (id = 1),
    holder     TEXT NOT NULL,
    epoch      BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
