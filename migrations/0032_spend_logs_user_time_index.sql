-- The spend log by user, newest first (the console's Logs page filtered by
-- a user, /gateway/logs?user_id=, and an internal user's own Logs page,
-- always pinned to its user), under the name LiteLLM's own migrations
-- give the same index (recent releases; older schemas have none), so
-- LiteLLM's CREATE INDEX IF NOT EXISTS finds it and builds no other. Without it a user filter walks the log by time
-- in bounded steps (p95 201 ms at 10 million rows for a user with 0.1 %
-- of them, and a user with no rows is never proven empty in one call);
-- with it, one short index scan (benches/hand-measured.md, "The Logs
-- page's user filter"). It costs the spend writer Postgres time on every
-- row inserted (measured there). A plain CREATE INDEX holds off spend-log
-- inserts while it builds (under a minute at 10 million rows on a busy
-- 2-core machine); the spend writer keeps its rows queued meanwhile.
CREATE INDEX IF NOT EXISTS "LiteLLM_SpendLogs_user_startTime_idx"
    ON "LiteLLM_SpendLogs" ("user", "startTime");
