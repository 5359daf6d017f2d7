-- LiteLLM's `default_team_member_models` on teams: the models a member
-- added to the team without `allowed_models` of its own is restricted to
-- (its budget row's `allowed_models`). LiteLLM 1.110's schema has the
-- column; a database LiteLLM made already holds it.
ALTER TABLE "LiteLLM_TeamTable"
    ADD COLUMN IF NOT EXISTS default_team_member_models TEXT[] DEFAULT ARRAY[]::TEXT[];
