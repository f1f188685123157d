-- A join token an admin issued to put another machine in an existing
-- node's place (gpufleet nodes replace): the only join token that may
-- register a name a node already holds.
ALTER TABLE join_tokens ADD COLUMN replaces BOOLEAN NOT NULL DEFAULT FALSE;
