-- LiteLLM's `default_team_member_models` on teams: the models a member
-- added to the team without `allowed_models` of its own is restricted to
-- (its budget row's `allowed_models`). LiteLLM 1.110's schema has the
-- column; a database LiteLLM made already holds it.
ALTER TABLE "LiteLLM_TeamTable"
    ADD COLUMN IF NOT EXISTS default_team_member_models TEXT[] DEFAULT ARRAY[]::TEXT[];

-- LiteLLM's team model aliases: a `LiteLLM_ModelTable` row (its `aliases`)
-- the team names by `model_id`, as LiteLLM keeps them.
CREATE TABLE IF NOT EXISTS "LiteLLM_ModelTable" (
    id SERIAL PRIMARY KEY,
    aliases JSONB,
    created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    created_by TEXT NOT NULL,
    updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_by TEXT NOT NULL
);
ALTER TABLE "LiteLLM_TeamTable" ADD COLUMN IF NOT EXISTS model_id INTEGER;
CREATE UNIQUE INDEX IF NOT EXISTS "LiteLLM_TeamTable_model_id_key"
    ON "LiteLLM_TeamTable" (model_id);
