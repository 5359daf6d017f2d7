-- Team memberships by the budget row they are linked to (a member's own
-- budget, LiteLLM's `max_budget_in_team`, or its team's default member
-- budget): the budget-period sweep finds the memberships of a due row, and
-- `/budget/update` the teams whose members' keys to refresh, without
-- scanning the table. Harmless on a LiteLLM database.
CREATE INDEX IF NOT EXISTS "LiteLLM_TeamMembership_budget_id_idx"
    ON "LiteLLM_TeamMembership" (budget_id) WHERE budget_id IS NOT NULL;
