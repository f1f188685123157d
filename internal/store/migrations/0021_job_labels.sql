-- Job labels (docs/JOBS.md#labels), one row per label, for label
-- selectors (GET /api/v1/jobs?selector=...). jobs.spec holds the labels a
-- job is returned with; these rows index them. Both are written in the
-- submission's transaction and never change.
CREATE TABLE job_labels (
    job_id TEXT NOT NULL REFERENCES jobs (id),
    label  TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (job_id, label)
);
CREATE INDEX job_labels_value ON job_labels (label, value, job_id);
