-- Tokens of deleted (or regenerated) keys, so a replica whose change listener
-- was disconnected can drop keys deleted meanwhile from its cache: after a
-- reconnect it re-reads every key that exists plus every key buried since
-- it lost the connection. Rows older than a week are pruned on each delete.
CREATE TABLE IF NOT EXISTS gateway_key_tombstones (
    token TEXT PRIMARY KEY,
    deleted_at TIMESTAMP(3) NOT NULL
);
CREATE INDEX IF NOT EXISTS gateway_key_tombstones_deleted_at_idx
    ON gateway_key_tombstones (deleted_at);
