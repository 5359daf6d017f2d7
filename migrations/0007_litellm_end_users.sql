-- End users ("customers", /customer/*): LiteLLM's LiteLLM_EndUserTable with
-- its (Prisma) names and types. Their budgets and limits are rows of
-- LiteLLM_BudgetTable linked by budget_id. Created with its primary key
-- only and each column added with ADD COLUMN IF NOT EXISTS, so on a
-- LiteLLM database every statement finds its table or column and does
-- nothing.
CREATE TABLE IF NOT EXISTS "LiteLLM_EndUserTable" (
    user_id TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_EndUserTable"
    ADD COLUMN IF NOT EXISTS alias TEXT,
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS allowed_model_region TEXT,
    ADD COLUMN IF NOT EXISTS default_model TEXT,
    ADD COLUMN IF NOT EXISTS models TEXT[] DEFAULT ARRAY[]::TEXT[],
    ADD COLUMN IF NOT EXISTS budget_id TEXT,
    ADD COLUMN IF NOT EXISTS object_permission_id TEXT,
    ADD COLUMN IF NOT EXISTS blocked BOOLEAN NOT NULL DEFAULT false;
