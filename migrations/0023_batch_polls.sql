-- The batch poller and the budget hold of a batch (0020's managed batches):
-- gateway_next_poll is when a replica may next poll the batch (claimed by
-- moving it forward under the row lock, so the fleet polls each batch once
-- per interval; NULL once its status is final), gateway_hold the USD the
-- batch's input could cost at most, counted against its key's later batch
-- creations while the batch is open. Batches recorded before this
-- migration that are not charged yet are due at once.
ALTER TABLE "LiteLLM_ManagedObjectTable"
    ADD COLUMN IF NOT EXISTS gateway_next_poll TIMESTAMP(3),
    ADD COLUMN IF NOT EXISTS gateway_hold DOUBLE PRECISION NOT NULL DEFAULT 0;
UPDATE "LiteLLM_ManagedObjectTable" SET gateway_next_poll = CURRENT_TIMESTAMP
WHERE gateway_key IS NOT NULL AND NOT batch_processed AND gateway_next_poll IS NULL
    AND coalesce(status, '') NOT IN ('completed', 'complete', 'failed', 'expired', 'cancelled');
CREATE INDEX IF NOT EXISTS "LiteLLM_ManagedObjectTable_gateway_next_poll_idx"
    ON "LiteLLM_ManagedObjectTable" (gateway_next_poll) WHERE gateway_next_poll IS NOT NULL;
