//! The fields of LiteLLM's management request types (`litellm/proxy/_types.py`
//! and `types/proxy/management_endpoints/`, litellm 1.110) that this gateway
//! accepts without enforcing, with their JSON types. LiteLLM's UI and
//! scripts send them; here they are type-checked and ignored (or kept in
//! `metadata` where LiteLLM keeps them). The compatibility table (docs/litellm-compatibility.md)
//! lists them.

use super::body::Kind::{self, Bool, Int, List, Num, Object, Str};

/// `GenerateKeyRequest`, `UpdateKeyRequest`, `RegenerateKeyRequest`.
pub const KEY: &[(&str, Kind)] = &[
    ("agent_id", Str),
    ("config", Object),
    ("permissions", Object),
    ("budget_fallbacks", Object),
    ("mcp_rpm_limit", Object),
    ("tag_rpm_limit", Object),
    ("guardrails", List),
    ("policies", List),
    ("prompts", List),
    ("object_permission", Object),
    ("tpd_limit", Int),
    ("default_estimated_output_tokens", Int),
    ("default_estimated_output_tokens_per_model", Object),
    // Kept in `metadata`; the budget row of the key's end users.
    ("end_user_budget_id", Str),
    ("tags", List),
    ("disable_global_guardrails", Bool),
    ("enable_prompt_caching", Bool),
    // Kept in `metadata`; enforced (`auth::budget_throttle`).
    ("throttle_on_budget_exceeded", Bool),
    ("enforced_params", List),
    ("allowed_passthrough_routes", List),
    ("denied_passthrough_routes", List),
    ("allowed_vector_store_indexes", List),
    ("rpm_limit_type", Str),
    ("tpm_limit_type", Str),
    ("router_settings", Object),
    ("access_group_ids", List),
    ("send_invite_email", Bool),
    ("key_type", Str),
    ("auto_rotate", Bool),
    ("rotation_interval", Str),
    ("organization_id", Str),
    ("project_id", Str),
    ("temp_budget_increase", Num),
    ("temp_budget_expiry", Str),
];

pub use crate::auth::litellm_fields::{Refused, KEY_REFUSED, TEAM_REFUSED};

/// `NewTeamRequest` (with `TeamBase`) and `UpdateTeamRequest`.
pub const TEAM: &[(&str, Kind)] = &[
    ("admins", List),
    ("team_member_permissions", List),
    ("tpd_limit", Int),
    ("soft_budget", Num),
    ("router_settings", Object),
    ("access_group_ids", List),
    ("tags", List),
    ("guardrails", List),
    ("policies", List),
    ("prompts", List),
    ("object_permission", Object),
    ("allowed_passthrough_routes", List),
    ("denied_passthrough_routes", List),
    ("disable_global_guardrails", Bool),
    ("require_trace_id", Bool),
    ("secret_manager_settings", Object),
    ("model_rpm_limit", Object),
    ("model_tpm_limit", Object),
    ("rpm_limit_type", Str),
    ("tpm_limit_type", Str),
    ("default_estimated_output_tokens", Int),
    ("default_estimated_output_tokens_per_model", Object),
    ("mcp_rpm_limit", Object),
    ("team_member_key_duration", Str),
    ("allowed_vector_store_indexes", List),
    ("enforced_batch_output_expires_after", Object),
    ("enforced_file_expires_after", Object),
];

/// `NewUserRequest` and `UpdateUserRequest`.
pub const USER: &[(&str, Kind)] = &[
    ("team_id", Str),
    ("agent_id", Str),
    ("budget_limits", List),
    ("allowed_cache_controls", List),
    ("config", Object),
    ("permissions", Object),
    ("budget_fallbacks", Object),
    ("model_rpm_limit", Object),
    ("model_tpm_limit", Object),
    ("mcp_rpm_limit", Object),
    ("tag_rpm_limit", Object),
    ("guardrails", List),
    ("policies", List),
    ("prompts", List),
    ("blocked", Bool),
    ("object_permission", Object),
    ("send_invite_email", Bool),
    ("sso_user_id", Str),
    ("organizations", List),
    ("password", Str),
];
