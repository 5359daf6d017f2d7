-- Keys: LiteLLM's `allowed_routes` column (the routes a virtual key may
-- call; empty: any its role allows), which LiteLLM's schema has and 0001
-- left out. Idempotent; on a LiteLLM database the column is already there.
ALTER TABLE "LiteLLM_VerificationToken"
    ADD COLUMN IF NOT EXISTS allowed_routes TEXT[] DEFAULT ARRAY[]::TEXT[];
