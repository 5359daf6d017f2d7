-- Spend logs: every row the gateway writes since 0005 holds its call id in
-- both `call_id` and LiteLLM's `litellm_call_id`, so the gateway's own index
-- on `call_id` duplicated LiteLLM's on `litellm_call_id` and cost Postgres
-- CPU on every row written (~2-4 us of ~30). `/spend/logs` now finds a call
-- by `litellm_call_id`: rows written before 0005 get theirs, then the
-- duplicate index goes. Idempotent; on a LiteLLM database (`call_id` NULL)
-- the UPDATE changes nothing.
UPDATE "LiteLLM_SpendLogs" SET litellm_call_id = call_id
    WHERE litellm_call_id IS NULL AND call_id IS NOT NULL;
DROP INDEX IF EXISTS gateway_spendlogs_call_id_idx;
