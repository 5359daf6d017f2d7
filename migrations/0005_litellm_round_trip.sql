-- Columns and tables LiteLLM reads that 0001 lacked, so LiteLLM (its UI,
-- /key/info, /spend/logs) reads a database the gateway created, and the
-- gateway writes the columns LiteLLM keeps. Idempotent: on a LiteLLM
-- database every statement finds its column or table and does nothing.

-- Models: LiteLLM's client selects `blocked` (a blocked deployment is not
-- served there).
ALTER TABLE "LiteLLM_ProxyModelTable"
    ADD COLUMN IF NOT EXISTS blocked BOOLEAN NOT NULL DEFAULT false;

-- Keys: lifetime spend (never reset) and the last time a key was used,
-- both written with each spend flush as LiteLLM writes them.
ALTER TABLE "LiteLLM_VerificationToken"
    ADD COLUMN IF NOT EXISTS total_spend DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS last_active TIMESTAMP(3);

-- Spend logs: LiteLLM's call id and duration, and the columns its
-- readers select.
ALTER TABLE "LiteLLM_SpendLogs"
    ADD COLUMN IF NOT EXISTS request_duration_ms INTEGER,
    ADD COLUMN IF NOT EXISTS litellm_call_id TEXT,
    ADD COLUMN IF NOT EXISTS organization_id TEXT,
    ADD COLUMN IF NOT EXISTS session_id TEXT,
    ADD COLUMN IF NOT EXISTS messages JSONB DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS response JSONB DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS proxy_server_request JSONB DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP;
CREATE INDEX IF NOT EXISTS "LiteLLM_SpendLogs_litellm_call_id_idx"
    ON "LiteLLM_SpendLogs" (litellm_call_id);

-- A user's spend within a team (LiteLLM adds to it with the team's).
CREATE TABLE IF NOT EXISTS "LiteLLM_TeamMembership" (
    user_id TEXT NOT NULL,
    team_id TEXT NOT NULL,
    PRIMARY KEY (user_id, team_id)
);
ALTER TABLE "LiteLLM_TeamMembership"
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS total_spend DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS budget_id TEXT;
