-- LiteLLM's daily spend aggregates (LiteLLM_Daily{User,Team,Organization,
-- EndUser,Tag}Spend) with LiteLLM's (Prisma) names, types and unique keys:
-- one row per entity, UTC day (YYYY-MM-DD), key, model, provider, MCP tool
-- and endpoint, every one of them '' rather than NULL (LiteLLM's writer
-- normalizes so, since NULLs never conflict in a unique index). The spend
-- writer upserts them with the spend rows; /user/daily/activity and its
-- siblings read them. Created with the primary key only and each column
-- added with ADD COLUMN IF NOT EXISTS, every index IF NOT EXISTS under
-- LiteLLM's name, so on a LiteLLM database each statement does nothing,
-- and LiteLLM's own migrations still apply after these.

CREATE TABLE IF NOT EXISTS "LiteLLM_DailyUserSpend" (
    id TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_DailyUserSpend"
    ADD COLUMN IF NOT EXISTS user_id TEXT,
    ADD COLUMN IF NOT EXISTS date TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS api_key TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS model TEXT,
    ADD COLUMN IF NOT EXISTS model_group TEXT,
    ADD COLUMN IF NOT EXISTS custom_llm_provider TEXT,
    ADD COLUMN IF NOT EXISTS mcp_namespaced_tool_name TEXT,
    ADD COLUMN IF NOT EXISTS endpoint TEXT,
    ADD COLUMN IF NOT EXISTS prompt_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS completion_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cache_read_input_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cache_creation_input_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS compression_saved_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS compression_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS prompt_caching_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS gateway_injected_caching_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS autorouter_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS api_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS successful_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS failed_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS total_response_time_ms BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS timed_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP;
CREATE UNIQUE INDEX IF NOT EXISTS "LiteLLM_DailyUserSpend_user_id_date_api_key_model_custom_ll_key" ON "LiteLLM_DailyUserSpend"("user_id", "date", "api_key", "model", "custom_llm_provider", "mcp_namespaced_tool_name", "endpoint");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyUserSpend_date_idx" ON "LiteLLM_DailyUserSpend"("date");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyUserSpend_user_id_date_idx" ON "LiteLLM_DailyUserSpend"("user_id", "date");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyUserSpend_api_key_idx" ON "LiteLLM_DailyUserSpend"("api_key");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyUserSpend_model_idx" ON "LiteLLM_DailyUserSpend"("model");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyUserSpend_mcp_namespaced_tool_name_idx" ON "LiteLLM_DailyUserSpend"("mcp_namespaced_tool_name");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyUserSpend_endpoint_idx" ON "LiteLLM_DailyUserSpend"("endpoint");

CREATE TABLE IF NOT EXISTS "LiteLLM_DailyTeamSpend" (
    id TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_DailyTeamSpend"
    ADD COLUMN IF NOT EXISTS team_id TEXT,
    ADD COLUMN IF NOT EXISTS date TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS api_key TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS model TEXT,
    ADD COLUMN IF NOT EXISTS model_group TEXT,
    ADD COLUMN IF NOT EXISTS custom_llm_provider TEXT,
    ADD COLUMN IF NOT EXISTS mcp_namespaced_tool_name TEXT,
    ADD COLUMN IF NOT EXISTS endpoint TEXT,
    ADD COLUMN IF NOT EXISTS prompt_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS completion_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cache_read_input_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cache_creation_input_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS compression_saved_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS compression_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS prompt_caching_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS gateway_injected_caching_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS autorouter_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS api_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS successful_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS failed_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS total_response_time_ms BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS timed_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS ptu_flat_cost DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP;
CREATE UNIQUE INDEX IF NOT EXISTS "LiteLLM_DailyTeamSpend_team_id_date_api_key_model_custom_ll_key" ON "LiteLLM_DailyTeamSpend"("team_id", "date", "api_key", "model", "custom_llm_provider", "mcp_namespaced_tool_name", "endpoint");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyTeamSpend_date_idx" ON "LiteLLM_DailyTeamSpend"("date");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyTeamSpend_team_id_date_idx" ON "LiteLLM_DailyTeamSpend"("team_id", "date");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyTeamSpend_api_key_idx" ON "LiteLLM_DailyTeamSpend"("api_key");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyTeamSpend_model_idx" ON "LiteLLM_DailyTeamSpend"("model");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyTeamSpend_mcp_namespaced_tool_name_idx" ON "LiteLLM_DailyTeamSpend"("mcp_namespaced_tool_name");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyTeamSpend_endpoint_idx" ON "LiteLLM_DailyTeamSpend"("endpoint");

CREATE TABLE IF NOT EXISTS "LiteLLM_DailyOrganizationSpend" (
    id TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_DailyOrganizationSpend"
    ADD COLUMN IF NOT EXISTS organization_id TEXT,
    ADD COLUMN IF NOT EXISTS date TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS api_key TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS model TEXT,
    ADD COLUMN IF NOT EXISTS model_group TEXT,
    ADD COLUMN IF NOT EXISTS custom_llm_provider TEXT,
    ADD COLUMN IF NOT EXISTS mcp_namespaced_tool_name TEXT,
    ADD COLUMN IF NOT EXISTS endpoint TEXT,
    ADD COLUMN IF NOT EXISTS prompt_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS completion_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cache_read_input_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cache_creation_input_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS compression_saved_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS compression_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS prompt_caching_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS gateway_injected_caching_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS autorouter_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS api_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS successful_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS failed_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS total_response_time_ms BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS timed_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP;
CREATE UNIQUE INDEX IF NOT EXISTS "LiteLLM_DailyOrganizationSpend_organization_id_date_api_key_key" ON "LiteLLM_DailyOrganizationSpend"("organization_id", "date", "api_key", "model", "custom_llm_provider", "mcp_namespaced_tool_name", "endpoint");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyOrganizationSpend_date_idx" ON "LiteLLM_DailyOrganizationSpend"("date");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyOrganizationSpend_organization_id_date_idx" ON "LiteLLM_DailyOrganizationSpend"("organization_id", "date");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyOrganizationSpend_api_key_idx" ON "LiteLLM_DailyOrganizationSpend"("api_key");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyOrganizationSpend_model_idx" ON "LiteLLM_DailyOrganizationSpend"("model");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyOrganizationSpend_mcp_namespaced_tool_name_idx" ON "LiteLLM_DailyOrganizationSpend"("mcp_namespaced_tool_name");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyOrganizationSpend_endpoint_idx" ON "LiteLLM_DailyOrganizationSpend"("endpoint");

CREATE TABLE IF NOT EXISTS "LiteLLM_DailyEndUserSpend" (
    id TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_DailyEndUserSpend"
    ADD COLUMN IF NOT EXISTS end_user_id TEXT,
    ADD COLUMN IF NOT EXISTS date TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS api_key TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS model TEXT,
    ADD COLUMN IF NOT EXISTS model_group TEXT,
    ADD COLUMN IF NOT EXISTS custom_llm_provider TEXT,
    ADD COLUMN IF NOT EXISTS mcp_namespaced_tool_name TEXT,
    ADD COLUMN IF NOT EXISTS endpoint TEXT,
    ADD COLUMN IF NOT EXISTS prompt_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS completion_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cache_read_input_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cache_creation_input_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS compression_saved_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS compression_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS prompt_caching_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS gateway_injected_caching_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS autorouter_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS api_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS successful_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS failed_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS total_response_time_ms BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS timed_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP;
CREATE UNIQUE INDEX IF NOT EXISTS "LiteLLM_DailyEndUserSpend_end_user_id_date_api_key_model_cu_key" ON "LiteLLM_DailyEndUserSpend"("end_user_id", "date", "api_key", "model", "custom_llm_provider", "mcp_namespaced_tool_name", "endpoint");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyEndUserSpend_date_idx" ON "LiteLLM_DailyEndUserSpend"("date");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyEndUserSpend_end_user_id_date_idx" ON "LiteLLM_DailyEndUserSpend"("end_user_id", "date");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyEndUserSpend_api_key_idx" ON "LiteLLM_DailyEndUserSpend"("api_key");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyEndUserSpend_model_idx" ON "LiteLLM_DailyEndUserSpend"("model");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyEndUserSpend_mcp_namespaced_tool_name_idx" ON "LiteLLM_DailyEndUserSpend"("mcp_namespaced_tool_name");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyEndUserSpend_endpoint_idx" ON "LiteLLM_DailyEndUserSpend"("endpoint");

CREATE TABLE IF NOT EXISTS "LiteLLM_DailyTagSpend" (
    id TEXT PRIMARY KEY
);
ALTER TABLE "LiteLLM_DailyTagSpend"
    ADD COLUMN IF NOT EXISTS request_id TEXT,
    ADD COLUMN IF NOT EXISTS tag TEXT,
    ADD COLUMN IF NOT EXISTS date TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS api_key TEXT NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS model TEXT,
    ADD COLUMN IF NOT EXISTS model_group TEXT,
    ADD COLUMN IF NOT EXISTS custom_llm_provider TEXT,
    ADD COLUMN IF NOT EXISTS mcp_namespaced_tool_name TEXT,
    ADD COLUMN IF NOT EXISTS endpoint TEXT,
    ADD COLUMN IF NOT EXISTS prompt_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS completion_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cache_read_input_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS cache_creation_input_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS compression_saved_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS compression_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS prompt_caching_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS gateway_injected_caching_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS autorouter_savings_spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS spend DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    ADD COLUMN IF NOT EXISTS api_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS successful_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS failed_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS total_response_time_ms BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS timed_requests BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ADD COLUMN IF NOT EXISTS updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP;
CREATE UNIQUE INDEX IF NOT EXISTS "LiteLLM_DailyTagSpend_tag_date_api_key_model_custom_llm_pro_key" ON "LiteLLM_DailyTagSpend"("tag", "date", "api_key", "model", "custom_llm_provider", "mcp_namespaced_tool_name", "endpoint");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyTagSpend_date_idx" ON "LiteLLM_DailyTagSpend"("date");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyTagSpend_tag_date_idx" ON "LiteLLM_DailyTagSpend"("tag", "date");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyTagSpend_api_key_idx" ON "LiteLLM_DailyTagSpend"("api_key");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyTagSpend_model_idx" ON "LiteLLM_DailyTagSpend"("model");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyTagSpend_mcp_namespaced_tool_name_idx" ON "LiteLLM_DailyTagSpend"("mcp_namespaced_tool_name");
CREATE INDEX IF NOT EXISTS "LiteLLM_DailyTagSpend_endpoint_idx" ON "LiteLLM_DailyTagSpend"("endpoint");
