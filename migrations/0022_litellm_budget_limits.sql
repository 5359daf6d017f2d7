-- Keys and teams: LiteLLM's `budget_limits` column (several budget windows
-- at once, each `{"budget_duration", "max_budget", "reset_at"}`), added by
-- litellm-proxy-extras' 20260401000000_add_budget_limits. Idempotent; on a
-- LiteLLM database the columns are already there.
ALTER TABLE "LiteLLM_VerificationToken" ADD COLUMN IF NOT EXISTS budget_limits JSONB;
ALTER TABLE "LiteLLM_TeamTable" ADD COLUMN IF NOT EXISTS budget_limits JSONB;
