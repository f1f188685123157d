-- Per-GPU one-minute rollups of the agents' samples: sums and counts, so
-- that writing the same minute twice adds up. Kept for the server's
-- --rollup-retention (7 days by default).
CREATE TABLE gpu_rollups (
    gpu          TEXT NOT NULL,
    minute       BIGINT NOT NULL,
    node         TEXT NOT NULL,
    model        TEXT NOT NULL,
    team         TEXT NOT NULL,   -- who held the GPU; '' when unallocated
    samples      BIGINT NOT NULL,
    util_sum     DOUBLE PRECISION NOT NULL,
    util_n       BIGINT NOT NULL,
    sm_sum       DOUBLE PRECISION NOT NULL,
    sm_n         BIGINT NOT NULL,
    dram_sum     DOUBLE PRECISION NOT NULL,
    dram_n       BIGINT NOT NULL,
    tensor_sum   DOUBLE PRECISION NOT NULL,
    tensor_n     BIGINT NOT NULL,
    eff_sum      DOUBLE PRECISION NOT NULL,
    eff_n        BIGINT NOT NULL,
    power_sum    DOUBLE PRECISION NOT NULL,
    power_n      BIGINT NOT NULL,
    energy_j     DOUBLE PRECISION NOT NULL,
    mem_used_max BIGINT,
    temp_max     DOUBLE PRECISION,
    PRIMARY KEY (gpu, minute)
);
CREATE INDEX gpu_rollups_minute ON gpu_rollups (minute);
CREATE INDEX gpu_rollups_node ON gpu_rollups (node, minute);
