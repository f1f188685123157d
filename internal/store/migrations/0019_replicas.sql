-- The server replicas and the URL each answers on, so that a follower can
-- forward what it is asked to the leader (the lease names its holder; this
-- says where it listens). One row per replica: a restarted replica's new
-- process replaces its old one's.
CREATE TABLE replicas (
	holder     TEXT PRIMARY KEY,
	replica    TEXT NOT NULL,
	url        TEXT NOT NULL,
	started_at BIGINT NOT NULL
);
CREATE INDEX replicas_replica ON replicas (replica);
