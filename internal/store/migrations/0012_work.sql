-- Energy per unit of work: the units an attempt's work counter reported
-- (NULL: none), per node of a multi-node attempt too.
ALTER TABLE attempts ADD COLUMN work DOUBLE PRECISION;
ALTER TABLE attempt_nodes ADD COLUMN work DOUBLE PRECISION;
-- Facility energy at the PUE of the rack the GPUs were in when the energy
-- was counted; NULL for a day counted before this column (the report uses
-- the server's PUE for it).
ALTER TABLE usage_daily ADD COLUMN facility_joules DOUBLE PRECISION;
