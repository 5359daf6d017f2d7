-- LiteLLM's per-key list of the cache controls a request may set
-- (`allowed_cache_controls`, empty: any). A database LiteLLM created has it.
ALTER TABLE "LiteLLM_VerificationToken"
    ADD COLUMN IF NOT EXISTS allowed_cache_controls TEXT[] DEFAULT ARRAY[]::TEXT[];
