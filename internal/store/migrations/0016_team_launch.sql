-- Container jobs (docs/JOBS.md#containers): the host paths a team's jobs
-- may mount, and its registry credentials (a JSON object of registry to
-- username and password; the API never returns it).
ALTER TABLE teams ADD COLUMN mounts TEXT NOT NULL DEFAULT '[]';
ALTER TABLE teams ADD COLUMN registry_auth TEXT NOT NULL DEFAULT '{}';
-- Each team's offset in the agents' --uid-range: its attempts run as
-- FIRST + uid_offset on every node (docs/AGENT.md#runtimes-and-isolation),
-- so no two teams share a uid and a job's files stay its own across
-- attempts and nodes. Existing teams get 0, 1, ... by name.
ALTER TABLE teams ADD COLUMN uid_offset INTEGER;
UPDATE teams SET uid_offset = (SELECT COUNT(*) FROM teams t2 WHERE t2.name < teams.name);
CREATE UNIQUE INDEX teams_uid_offset ON teams (uid_offset);
