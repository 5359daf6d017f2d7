-- Models added through the API (/model/new) live in LiteLLM's
-- LiteLLM_ProxyModelTable (0001). A replica asked for a group it does not
-- know reads that group's rows by name (the read-through that catches a
-- missed change notification): index the name.
CREATE INDEX IF NOT EXISTS gateway_proxy_model_name_idx
    ON "LiteLLM_ProxyModelTable" (model_name);
