-- /key/list (the console's Keys page) pages keys newest first in Postgres
-- (ORDER BY created_at DESC NULLS LAST, token ... LIMIT/OFFSET) and finds
-- them by alias: with 100,000 keys a page reads its rows from this index
-- instead of sorting the table. Gateway-named indexes only, so LiteLLM's
-- own migrations still apply to the same database.
CREATE INDEX IF NOT EXISTS gateway_key_list_order_idx
    ON "LiteLLM_VerificationToken" (created_at DESC NULLS LAST, token);
CREATE INDEX IF NOT EXISTS gateway_key_alias_idx
    ON "LiteLLM_VerificationToken" (key_alias);
