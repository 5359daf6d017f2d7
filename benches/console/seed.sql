-- The console's lists at scale (BENCHMARKS.md, "The console's Logs list at
-- 10 million spend rows"): 10,000,000 spend rows over the last 30 days and
-- 100,000 keys, in a database the gateway has migrated. Run with
-- psql -f; about 4 minutes and 3.8 GB on a busy 2-core machine. The
-- secondary indexes are dropped for the insert and built again after.
DROP INDEX IF EXISTS "LiteLLM_SpendLogs_startTime_idx";
DROP INDEX IF EXISTS gateway_spendlogs_api_key_idx;
DROP INDEX IF EXISTS "LiteLLM_SpendLogs_api_key_startTime_idx";
DROP INDEX IF EXISTS "LiteLLM_SpendLogs_litellm_call_id_idx";
DROP INDEX IF EXISTS gateway_spendlogs_response_id_idx;
DROP INDEX IF EXISTS gateway_spendlogs_response_id_hash_idx;
INSERT INTO "LiteLLM_SpendLogs" (request_id, litellm_call_id, call_id, attempt, call_type, api_key,
    spend, total_tokens, prompt_tokens, completion_tokens, "startTime", "endTime", model, model_id,
    model_group, custom_llm_provider, api_base, "user", team_id, status, status_code, error_class,
    error_message)
SELECT 'req-' || lpad(i::text, 9, '0'), 'req-' || lpad(i::text, 9, '0'), 'req-' || lpad(i::text, 9, '0'),
    1, 'acompletion', md5('key-' || (i % 1000)::text), 0.0003, 22, 18, 4,
    now()::timestamp - interval '30 days' + (i * interval '30 days' / 10000000),
    now()::timestamp - interval '30 days' + (i * interval '30 days' / 10000000) + interval '120 ms',
    'gpt-' || (i % 10), 'dep-' || (i % 10), 'group-' || (i % 10), 'openai', 'http://upstream/v1',
    'user-' || (i % 1000), 'team-' || (i % 100),
    CASE WHEN i % 50 = 0 THEN 'failure' ELSE 'success' END,
    CASE WHEN i % 50 = 0 THEN 502 ELSE 200 END,
    CASE WHEN i % 50 = 0 THEN 'api_connection' END,
    CASE WHEN i % 50 = 0 THEN 'Upstream unreachable' END
FROM generate_series(1, 10000000) AS i;
SET maintenance_work_mem = '256MB';
CREATE INDEX "LiteLLM_SpendLogs_startTime_idx" ON "LiteLLM_SpendLogs" ("startTime");
CREATE INDEX "LiteLLM_SpendLogs_api_key_startTime_idx" ON "LiteLLM_SpendLogs" (api_key, "startTime");
CREATE INDEX "LiteLLM_SpendLogs_litellm_call_id_idx" ON "LiteLLM_SpendLogs" (litellm_call_id);
CREATE INDEX gateway_spendlogs_response_id_hash_idx ON "LiteLLM_SpendLogs" USING hash (response_id);
INSERT INTO "LiteLLM_VerificationToken" (token, key_alias, user_id, team_id, created_at)
SELECT md5('key-' || i::text) || md5('x' || i::text), 'bench-' || i, 'user-' || (i % 1000),
    'team-' || (i % 100), now() - (i * interval '1 second')
FROM generate_series(0, 99999) AS i;
VACUUM ANALYZE "LiteLLM_SpendLogs";
VACUUM ANALYZE "LiteLLM_VerificationToken";
