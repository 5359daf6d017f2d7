-- Files and batches created through /v1/files and /v1/batches, in LiteLLM's
-- tables (LiteLLM_ManagedFileTable, LiteLLM_ManagedObjectTable) with the
-- gateway's own columns: the creating key's token (gateway_key: only that
-- key reaches the object) and the upstream route (gateway_route). Created
-- with their keys only and columns added IF NOT EXISTS, as 0001 does, so a
-- database LiteLLM created keeps its rows.
CREATE TABLE IF NOT EXISTS "LiteLLM_ManagedFileTable" (id TEXT PRIMARY KEY);
ALTER TABLE "LiteLLM_ManagedFileTable"
    ADD COLUMN IF NOT EXISTS unified_file_id TEXT,
    ADD COLUMN IF NOT EXISTS file_object JSONB,
    ADD COLUMN IF NOT EXISTS model_mappings JSONB NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN IF NOT EXISTS flat_model_file_ids TEXT[] NOT NULL DEFAULT ARRAY[]::text[],
    ADD COLUMN IF NOT EXISTS storage_backend TEXT,
    ADD COLUMN IF NOT EXISTS storage_url TEXT,
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS created_by TEXT,
    ADD COLUMN IF NOT EXISTS team_id TEXT,
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_by TEXT,
    ADD COLUMN IF NOT EXISTS gateway_key TEXT,
    ADD COLUMN IF NOT EXISTS gateway_route TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS "LiteLLM_ManagedFileTable_unified_file_id_key"
    ON "LiteLLM_ManagedFileTable" (unified_file_id);

CREATE TABLE IF NOT EXISTS "LiteLLM_ManagedObjectTable" (id TEXT PRIMARY KEY);
ALTER TABLE "LiteLLM_ManagedObjectTable"
    ADD COLUMN IF NOT EXISTS unified_object_id TEXT,
    ADD COLUMN IF NOT EXISTS model_object_id TEXT,
    ADD COLUMN IF NOT EXISTS file_object JSONB NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN IF NOT EXISTS file_purpose TEXT NOT NULL DEFAULT 'batch',
    ADD COLUMN IF NOT EXISTS status TEXT,
    ADD COLUMN IF NOT EXISTS batch_processed BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS created_by TEXT,
    ADD COLUMN IF NOT EXISTS team_id TEXT,
    ADD COLUMN IF NOT EXISTS api_key TEXT,
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_by TEXT,
    ADD COLUMN IF NOT EXISTS gateway_key TEXT,
    ADD COLUMN IF NOT EXISTS gateway_route TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS "LiteLLM_ManagedObjectTable_unified_object_id_key"
    ON "LiteLLM_ManagedObjectTable" (unified_object_id);
CREATE UNIQUE INDEX IF NOT EXISTS "LiteLLM_ManagedObjectTable_model_object_id_key"
    ON "LiteLLM_ManagedObjectTable" (model_object_id);
