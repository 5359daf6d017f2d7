-- Organizations (/organization/*) and the budget columns LiteLLM added
-- since 0001 (/budget/*), with LiteLLM's (Prisma) names and types. Each
-- table is created with its primary key only and each column added with
-- ADD COLUMN IF NOT EXISTS, so on a LiteLLM database every statement finds
-- its table or column and does nothing.

ALTER TABLE "LiteLLM_BudgetTable"
    ADD COLUMN IF NOT EXISTS tpd_limit BIGINT,
    ADD COLUMN IF NOT EXISTS allowed_models TEXT[] DEFAULT ARRAY[]::TEXT[],
    ADD COLUMN IF NOT EXISTS temp_budget_increase DOUBLE PRECISION,
    ADD COLUMN IF NOT EXISTS temp_budget_expiry TIMESTAMP(3);

CREATE TABLE IF NOT EXISTS "LiteLLM_OrganizationTable" (
    organization_id TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_OrganizationTable"
    ADD COLUMN IF NOT EXISTS organization_alias TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS budget_id TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS metadata JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS models TEXT[],
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS model_spend JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS object_permission_id TEXT,
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS created_by TEXT NOT NULL DEFAULT 'gateway',
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_by TEXT NOT NULL DEFAULT 'gateway';

-- A user's role (and budget) within an organization.
CREATE TABLE IF NOT EXISTS "LiteLLM_OrganizationMembership" (
    user_id TEXT NOT NULL,
    organization_id TEXT NOT NULL,
    PRIMARY KEY (user_id, organization_id)
);
ALTER TABLE "LiteLLM_OrganizationMembership"
    ADD COLUMN IF NOT EXISTS user_role TEXT,
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS budget_id TEXT,
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP;
CREATE INDEX IF NOT EXISTS "LiteLLM_OrganizationMembership_organization_id_idx"
    ON "LiteLLM_OrganizationMembership" (organization_id);

-- The organization of a key (LiteLLM deletes an organization's keys with it).
ALTER TABLE "LiteLLM_VerificationToken"
    ADD COLUMN IF NOT EXISTS organization_id TEXT;
