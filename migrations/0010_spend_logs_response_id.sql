-- Spend logs: the `id` of the answer the client received (`chatcmpl-...`,
-- `msg_...`, `resp_...`). LiteLLM keeps that id as `request_id`, and a
-- client finds its request with `/spend/logs?request_id=<id>`; the gateway
-- keys rows by its own time-ordered call id (idempotent writes, retried
-- batches, upstreams that repeat ids), so the answer's id is a column of
-- its own, indexed for that lookup. Idempotent; on a LiteLLM database the
-- column is added empty.
ALTER TABLE "LiteLLM_SpendLogs"
    ADD COLUMN IF NOT EXISTS response_id TEXT;
CREATE INDEX IF NOT EXISTS gateway_spendlogs_response_id_idx
    ON "LiteLLM_SpendLogs" (response_id);
