-- LiteLLM's tables, with LiteLLM's (Prisma) table and column names and types,
-- so the gateway can run on a database LiteLLM created and keep its data.
--
-- Every table is created with its primary key only; every column is then
-- added with ADD COLUMN IF NOT EXISTS. On a fresh database this builds the
-- whole table; on a LiteLLM database it adds only what that LiteLLM version
-- lacks (and the gateway's own columns) and leaves existing data alone.
-- Columns added to tables that may already hold rows carry a default when
-- they are NOT NULL. Timestamps are TIMESTAMP(3) without time zone holding
-- UTC, as Prisma writes them.

-- Budgets shared by keys, teams and organisations. A key's soft budget lives
-- here (LiteLLM links it through "LiteLLM_VerificationToken".budget_id).
CREATE TABLE IF NOT EXISTS "LiteLLM_BudgetTable" (
    budget_id TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_BudgetTable"
    ADD COLUMN IF NOT EXISTS max_budget DOUBLE PRECISION,
    ADD COLUMN IF NOT EXISTS soft_budget DOUBLE PRECISION,
    ADD COLUMN IF NOT EXISTS max_parallel_requests INTEGER,
    ADD COLUMN IF NOT EXISTS tpm_limit BIGINT,
    ADD COLUMN IF NOT EXISTS rpm_limit BIGINT,
    ADD COLUMN IF NOT EXISTS model_max_budget JSONB,
    ADD COLUMN IF NOT EXISTS budget_duration TEXT,
    ADD COLUMN IF NOT EXISTS budget_reset_at TIMESTAMP(3),
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS created_by TEXT NOT NULL DEFAULT 'gateway',
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_by TEXT NOT NULL DEFAULT 'gateway';

-- Virtual keys. `token` is the sha256 (lowercase hex) of the key.
CREATE TABLE IF NOT EXISTS "LiteLLM_VerificationToken" (
    token TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_VerificationToken"
    ADD COLUMN IF NOT EXISTS key_name TEXT,
    ADD COLUMN IF NOT EXISTS key_alias TEXT,
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS expires TIMESTAMP(3),
    ADD COLUMN IF NOT EXISTS models TEXT[] DEFAULT ARRAY[]::TEXT[],
    ADD COLUMN IF NOT EXISTS aliases JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS config JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS user_id TEXT,
    ADD COLUMN IF NOT EXISTS team_id TEXT,
    ADD COLUMN IF NOT EXISTS permissions JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS max_parallel_requests INTEGER,
    ADD COLUMN IF NOT EXISTS metadata JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS blocked BOOLEAN,
    ADD COLUMN IF NOT EXISTS tpm_limit BIGINT,
    ADD COLUMN IF NOT EXISTS rpm_limit BIGINT,
    ADD COLUMN IF NOT EXISTS max_budget DOUBLE PRECISION,
    ADD COLUMN IF NOT EXISTS budget_duration TEXT,
    ADD COLUMN IF NOT EXISTS budget_reset_at TIMESTAMP(3),
    ADD COLUMN IF NOT EXISTS model_spend JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS model_max_budget JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS budget_id TEXT,
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS created_by TEXT,
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_by TEXT,
    -- The gateway's own columns. LiteLLM keeps per-model limits in
    -- metadata.model_rpm_limit / metadata.model_tpm_limit; the gateway reads
    -- them from there while its column is NULL.
    ADD COLUMN IF NOT EXISTS allowed_model_region TEXT,
    ADD COLUMN IF NOT EXISTS model_rpm_limit JSONB,
    ADD COLUMN IF NOT EXISTS model_tpm_limit JSONB;
CREATE INDEX IF NOT EXISTS "LiteLLM_VerificationToken_user_id_team_id_idx"
    ON "LiteLLM_VerificationToken" (user_id, team_id);
CREATE INDEX IF NOT EXISTS "LiteLLM_VerificationToken_team_id_idx"
    ON "LiteLLM_VerificationToken" (team_id);
CREATE INDEX IF NOT EXISTS "LiteLLM_VerificationToken_budget_reset_at_expires_idx"
    ON "LiteLLM_VerificationToken" (budget_reset_at, expires);

-- Teams.
CREATE TABLE IF NOT EXISTS "LiteLLM_TeamTable" (
    team_id TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_TeamTable"
    ADD COLUMN IF NOT EXISTS team_alias TEXT,
    ADD COLUMN IF NOT EXISTS organization_id TEXT,
    ADD COLUMN IF NOT EXISTS admins TEXT[] DEFAULT ARRAY[]::TEXT[],
    ADD COLUMN IF NOT EXISTS members TEXT[] DEFAULT ARRAY[]::TEXT[],
    ADD COLUMN IF NOT EXISTS members_with_roles JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS metadata JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS max_budget DOUBLE PRECISION,
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS models TEXT[] DEFAULT ARRAY[]::TEXT[],
    ADD COLUMN IF NOT EXISTS max_parallel_requests INTEGER,
    ADD COLUMN IF NOT EXISTS tpm_limit BIGINT,
    ADD COLUMN IF NOT EXISTS rpm_limit BIGINT,
    ADD COLUMN IF NOT EXISTS budget_duration TEXT,
    ADD COLUMN IF NOT EXISTS budget_reset_at TIMESTAMP(3),
    ADD COLUMN IF NOT EXISTS blocked BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS model_spend JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS model_max_budget JSONB NOT NULL DEFAULT '{}',
    -- The gateway's own column: region constraint of the team's keys.
    ADD COLUMN IF NOT EXISTS allowed_model_region TEXT;

-- Users.
CREATE TABLE IF NOT EXISTS "LiteLLM_UserTable" (
    user_id TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_UserTable"
    ADD COLUMN IF NOT EXISTS user_alias TEXT,
    ADD COLUMN IF NOT EXISTS team_id TEXT,
    ADD COLUMN IF NOT EXISTS teams TEXT[] DEFAULT ARRAY[]::TEXT[],
    ADD COLUMN IF NOT EXISTS user_role TEXT,
    ADD COLUMN IF NOT EXISTS max_budget DOUBLE PRECISION,
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS user_email TEXT,
    ADD COLUMN IF NOT EXISTS models TEXT[] DEFAULT ARRAY[]::TEXT[],
    ADD COLUMN IF NOT EXISTS metadata JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS max_parallel_requests INTEGER,
    ADD COLUMN IF NOT EXISTS tpm_limit BIGINT,
    ADD COLUMN IF NOT EXISTS rpm_limit BIGINT,
    ADD COLUMN IF NOT EXISTS budget_duration TEXT,
    ADD COLUMN IF NOT EXISTS budget_reset_at TIMESTAMP(3),
    ADD COLUMN IF NOT EXISTS model_spend JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS model_max_budget JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP;

-- One row per upstream attempt (LiteLLM: one per request).
CREATE TABLE IF NOT EXISTS "LiteLLM_SpendLogs" (
    request_id TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_SpendLogs"
    ADD COLUMN IF NOT EXISTS call_type TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS api_key TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS total_tokens INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS prompt_tokens INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS completion_tokens INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS "startTime" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS "endTime" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS "completionStartTime" TIMESTAMP(3),
    ADD COLUMN IF NOT EXISTS model TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS model_id TEXT DEFAULT '',
    ADD COLUMN IF NOT EXISTS model_group TEXT DEFAULT '',
    ADD COLUMN IF NOT EXISTS custom_llm_provider TEXT DEFAULT '',
    ADD COLUMN IF NOT EXISTS api_base TEXT DEFAULT '',
    ADD COLUMN IF NOT EXISTS "user" TEXT DEFAULT '',
    ADD COLUMN IF NOT EXISTS metadata JSONB DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS cache_hit TEXT DEFAULT '',
    ADD COLUMN IF NOT EXISTS cache_key TEXT DEFAULT '',
    ADD COLUMN IF NOT EXISTS request_tags JSONB DEFAULT '[]',
    ADD COLUMN IF NOT EXISTS team_id TEXT,
    ADD COLUMN IF NOT EXISTS end_user TEXT,
    ADD COLUMN IF NOT EXISTS requester_ip_address TEXT,
    ADD COLUMN IF NOT EXISTS status TEXT,
    -- The gateway's own columns: every attempt of one client request shares
    -- call_id; attempt counts from 1.
    ADD COLUMN IF NOT EXISTS call_id TEXT,
    ADD COLUMN IF NOT EXISTS attempt INTEGER,
    ADD COLUMN IF NOT EXISTS region TEXT,
    ADD COLUMN IF NOT EXISTS status_code INTEGER,
    ADD COLUMN IF NOT EXISTS error_class TEXT,
    ADD COLUMN IF NOT EXISTS error_message TEXT;
CREATE INDEX IF NOT EXISTS "LiteLLM_SpendLogs_startTime_idx"
    ON "LiteLLM_SpendLogs" ("startTime");
CREATE INDEX IF NOT EXISTS gateway_spendlogs_call_id_idx
    ON "LiteLLM_SpendLogs" (call_id);
CREATE INDEX IF NOT EXISTS gateway_spendlogs_api_key_idx
    ON "LiteLLM_SpendLogs" (api_key);

-- Models added through the API (/model/new).
CREATE TABLE IF NOT EXISTS "LiteLLM_ProxyModelTable" (
    model_id TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_ProxyModelTable"
    ADD COLUMN IF NOT EXISTS model_name TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS litellm_params JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS model_info JSONB,
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS created_by TEXT NOT NULL DEFAULT 'gateway',
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_by TEXT NOT NULL DEFAULT 'gateway';
