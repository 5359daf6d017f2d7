-- Console sessions logged out, shared by the replicas through Postgres
-- (docs/console.md): a session token is signed, not stored, so a logout on
-- one replica is written here and every replica looks the session up on
-- the console's calls (never on an LLM request) when the fleet has no
-- shared Redis. A row is kept until the session would have expired, then
-- deleted by the next logout.
CREATE TABLE IF NOT EXISTS gateway_console_logouts (
    session_id TEXT PRIMARY KEY,
    expires_at TIMESTAMP(3) NOT NULL
);
CREATE INDEX IF NOT EXISTS gateway_console_logouts_expires_at_idx
    ON gateway_console_logouts (expires_at);
