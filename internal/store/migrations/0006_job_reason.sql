-- Why a job ended without its attempts deciding it (the leader failed a
-- stored job it could not schedule: reason code invalid_request).
ALTER TABLE jobs ADD COLUMN end_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN end_reason_code TEXT NOT NULL DEFAULT '';
