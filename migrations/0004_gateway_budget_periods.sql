-- When the current budget period of each key, user and team began (its last
-- reset), so spend rows settled before a reset but written after it (queued
-- on a core, in a batch, in the spool while Postgres was down, or on
-- another replica) are logged but not counted in the new period.
CREATE TABLE IF NOT EXISTS gateway_budget_periods (
    scope TEXT NOT NULL,
    id TEXT NOT NULL,
    started_at TIMESTAMP(3) NOT NULL,
    PRIMARY KEY (scope, id)
);
