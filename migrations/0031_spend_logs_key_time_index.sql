-- The spend log by key, newest first (the console's Logs page filtered by
-- a key, /spend/logs?api_key=): LiteLLM's own index (schema.prisma's
-- @@index([api_key, startTime])) under the name Prisma gives it, so
-- LiteLLM's migration job finds it and builds no other. It replaces the
-- gateway's index on api_key alone, whose every lookup it also serves:
-- a key's page reads its 100 newest rows instead of all of the key's rows
-- sorted (benches/hand-measured.md, "The Logs page's key filter"). It
-- costs the spend writer more than the index it replaces (an entry per
-- row where that one deduplicated its keys: 12 to 45 µs a row measured).
-- A plain CREATE INDEX holds off spend-log inserts while it builds (about
-- 45 s at 10 million rows on a busy 2-core machine); the spend writer
-- keeps its rows queued meanwhile.
CREATE INDEX IF NOT EXISTS "LiteLLM_SpendLogs_api_key_startTime_idx"
    ON "LiteLLM_SpendLogs" (api_key, "startTime");
DROP INDEX IF EXISTS gateway_spendlogs_api_key_idx;
