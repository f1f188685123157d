-- Renewal keeps the previous node credential valid until its own expiry,
-- so an agent that lost the renewal's answer is not locked out.
ALTER TABLE node_credentials ADD COLUMN prev_hash {{.Bytes}};
ALTER TABLE node_credentials ADD COLUMN prev_expires_at BIGINT;
