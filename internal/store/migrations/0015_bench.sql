-- Benchmarks (docs/BENCH.md): every figure measured on a GPU, kept with
-- its history (the fleet rule reads each GPU's newest), and the workload
-- benches users ran. Figures and workloads are JSON bodies; the columns
-- are what they are selected by.
CREATE TABLE bench_results (
    id       {{.Serial}},
    node     TEXT NOT NULL,
    gpu_uuid TEXT NOT NULL,
    model    TEXT NOT NULL,
    name     TEXT NOT NULL,
    peer     INTEGER NOT NULL,
    at       BIGINT NOT NULL,
    body     TEXT NOT NULL
);
CREATE INDEX bench_results_gpu ON bench_results (gpu_uuid, name, peer, id);
CREATE INDEX bench_results_node ON bench_results (node, id);
CREATE INDEX bench_results_model ON bench_results (model, id);
CREATE TABLE bench_workloads (
    id         TEXT PRIMARY KEY,
    team       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    body       TEXT NOT NULL
);
