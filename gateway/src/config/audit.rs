//! LiteLLM settings this gateway does not act on, named at start-up.
//!
//! An operator switching from LiteLLM must never lose a behaviour in silence.
//! Every key of `litellm_settings`, `general_settings` and `router_settings`
//! that no module of the gateway reads is either refused (ignoring it would
//! change who may spend or what reaches a model: guardrails, key and budget
//! defaults, custom auth) or reported as a warning (logging, UI and tuning
//! knobs). The lists name LiteLLM's settings (litellm 1.110's proxy); a key
//! missing from both the acted-on and the refused list is a warning.

use serde_yaml::Value;

/// Keys of `litellm_settings` that some module of the gateway reads.
const LITELLM_ACTED_ON: &[&str] = &[
    "num_retries",
    "fallbacks",
    "default_fallbacks",
    "context_window_fallbacks",
    "content_policy_fallbacks",
    "request_timeout",
    "callbacks",
    "success_callback",
    "failure_callback",
    "cache",
    "cache_params",
    "default_team_params",
    "default_team_settings",
    "use_chat_completions_url_for_anthropic_messages",
    "user_url_validation",
    "user_url_allowed_hosts",
    "require_auth_for_metrics_endpoint",
    "prometheus_metrics_max_series_per_metric",
    "model_group_alias",
    // Always on here: unsupported parameters are dropped.
    "drop_params",
    "block_requests_for_models_without_pricing",
    "default_estimated_output_tokens",
    // The proxy-wide budget (`config::ProxyBudget`).
    "max_budget",
    "budget_duration",
    // End users' default budget row (`Config::end_user_default_budget`).
    "max_end_user_budget_id",
    // Over-budget keys throttled (`Config::budget_throttle`).
    "budget_exceeded_throttle_percentage",
    // Messages redacted in spend-log rows (`spend::prompt_privacy`).
    "turn_off_message_logging",
];

/// Keys of `litellm_settings` refused while unimplemented, with the reason.
const LITELLM_REFUSED: &[(&str, &str)] = &[
    (
        "guardrails",
        "this legacy form of guardrails is not read, so requests would reach the models unchecked; write them in the top-level `guardrails:` list",
    ),
    (
        "max_end_user_budget",
        "end-user budget defaults are not applied, so end users would spend without a budget",
    ),
    (
        "upperbound_key_generate_params",
        "upper bounds on /key/generate are not applied, so keys could get any budget or limit",
    ),
    (
        "default_key_generate_params",
        "defaults for /key/generate are not applied, so new keys would have no budget or limits",
    ),
    (
        "default_internal_user_params",
        "defaults for new users are not applied, so new users would have no budget or limits",
    ),
    (
        "max_internal_user_budget",
        "the internal-user budget cap is not applied, so users could get any budget",
    ),
    (
        "default_max_internal_user_budget",
        "the internal-user budget default is not applied, so users would have no budget",
    ),
    (
        "key_generation_settings",
        "restrictions on who may generate keys are not applied",
    ),
];

/// Keys of `general_settings` that some module of the gateway reads (the
/// typed fields are read by `file.rs`; these come through `other`).
const GENERAL_ACTED_ON: &[&str] = &[
    "global_max_parallel_requests",
    "background_health_checks",
    "health_check_interval",
    "health_check_timeout",
    "allow_public_health_readiness_details",
    "allowed_routes",
    "coordination_redis",
    "encryption_algorithm",
    // The console (`api::ui`).
    "ui_access_mode",
    // Parameters every LLM request must carry (`config::EnforcedParams`).
    "enforced_params",
    "service_account_settings",
    // LiteLLM's mock testing request parameters (`proxy::mock_params`).
    "dangerously_allow_mock_testing_request_params",
    // The spend writer (`spend::SpendLogs`).
    "disable_spend_logs",
    "disable_error_logs",
    "store_prompts_in_spend_logs",
    "spend_logs_prompt_storage",
    // The config's own pass-through endpoints (`providers::passthrough`).
    "pass_through_endpoints",
    // What team admins may change (`config::team_admin`).
    "team_admin_editable_team_fields",
    // The batch poller (`proxy::batch_poll`).
    "proxy_batch_polling_interval",
    // Whether LiteLLM's stored settings apply (`config::stored`).
    "store_model_in_db",
    "supported_db_objects",
    // How often the stored cache settings are read again (`config::stored`).
    "proxy_config_reload_interval_seconds",
];

/// Keys of `general_settings` refused while unimplemented, with the reason.
const GENERAL_REFUSED: &[(&str, &str)] = &[
    (
        "custom_auth",
        "custom authentication is not run, so every valid key would be let in",
    ),
    (
        "enforce_user_param",
        "requests without `user` would be served",
    ),
    ("allowed_ips", "requests from any address would be served"),
    (
        "user_header_name",
        "end users named by that header would spend outside their budgets",
    ),
    (
        "litellm_key_header_name",
        "keys sent in that header would not be read",
    ),
    (
        "max_parallel_requests",
        "the proxy-wide parallel limit is read from global_max_parallel_requests only",
    ),
    (
        "key_management_system",
        "keys kept in a secret manager are not read",
    ),
];

/// Keys of `router_settings` that the router or the limiter reads.
const ROUTER_ACTED_ON: &[&str] = &[
    "routing_strategy",
    "num_retries",
    "retry_after",
    "retry_policy",
    "allowed_fails",
    "allowed_fails_policy",
    "cooldown_time",
    "disable_cooldowns",
    "fallbacks",
    "default_fallbacks",
    "context_window_fallbacks",
    "content_policy_fallbacks",
    "max_fallbacks",
    "timeout",
    "stream_timeout",
    "enable_pre_call_checks",
    "model_group_alias",
    "enable_tag_filtering",
    "allowed_model_region",
    "redis_url",
    "redis_host",
    "redis_port",
    "redis_password",
];

/// Keys of `router_settings` refused while unimplemented, with the reason.
const ROUTER_REFUSED: &[(&str, &str)] = &[(
    "provider_budget_config",
    "provider budgets are not enforced, so spend per provider would be unbounded",
)];

/// LiteLLM callbacks that check or change what reaches a model; refused
/// while the gateway has no guardrails.
const GUARDRAIL_CALLBACKS: &[&str] = &[
    "detect_prompt_injection",
    "hide_secrets",
    "lakera_prompt_injection",
    "presidio",
    "llamaguard_moderations",
    "llmguard_moderations",
    "google_text_moderation",
    "openai_moderations",
    "azure_content_safety",
    "aporia_prompt_injection",
    "bedrock_guardrails",
];

/// LiteLLM callbacks that register a prompt manager (its
/// `CustomPromptManagement` loggers), which rewrites the requests naming a
/// `prompt_id`; refused, as the gateway has no prompt management.
const PROMPT_CALLBACKS: &[&str] = &["dotprompt", "gitlab", "bitbucket"];

/// Logging callbacks the gateway sends to (the rest are reported).
const CALLBACKS_SERVED: &[&str] = &["prometheus", "otel"];

/// A setting refused at start-up: where it is and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The setting, e.g. `litellm_settings.guardrails`.
    pub entry: String,
    /// Why ignoring it is not allowed.
    pub problem: String,
}

/// The raw sections the audit reads.
pub struct Sections<'a> {
    /// Top-level sections the typed file does not name.
    pub top_other: &'a std::collections::BTreeMap<String, Value>,
    /// `litellm_settings`, raw.
    pub litellm: Option<&'a Value>,
    /// `general_settings` keys the typed struct does not name.
    pub general_other: &'a std::collections::BTreeMap<String, Value>,
    /// `router_settings`, raw.
    pub router: Option<&'a Value>,
}

/// Checks every key of the sections: the first refused one is an error,
/// every other key not acted on is a warning pushed onto `warnings`.
pub fn audit(sections: &Sections<'_>, warnings: &mut Vec<String>) -> Result<(), Refusal> {
    for (key, value) in sections.top_other {
        if key == "include" && !asks_for_nothing(value) {
            return Err(Refusal {
                entry: "include".into(),
                problem: "LiteLLM merges the files it names into the config (models, settings, guardrails) and this gateway does not read them; write their sections into this file to start".into(),
            });
        }
        if matches!(key.as_str(), "policies" | "policy_attachments") && !asks_for_nothing(value) {
            return Err(Refusal {
                entry: key.clone(),
                problem: "LiteLLM's policy engine attaches guardrails to keys, teams and models through it, and this gateway does not run it, so requests would reach the models unchecked; name the guardrails in the top-level `guardrails:` list and on the keys or teams instead".into(),
            });
        }
        if key == "prompts" && !asks_for_nothing(value) {
            return Err(Refusal {
                entry: key.clone(),
                problem: "LiteLLM's prompt management applies the templates it lists to the requests that name them with `prompt_id` (the messages and model that reach the upstream change), and this gateway does not manage prompts, so those requests would reach the model as sent; remove it to start".into(),
            });
        }
        if !asks_for_nothing(value) {
            warnings.push(format!(
                "the top-level section {key} of the config is not read by this gateway; it is ignored"
            ));
        }
    }
    if let Some(litellm) = sections.litellm.and_then(Value::as_mapping) {
        for (key, value) in litellm {
            let Some(key) = key.as_str() else { continue };
            check(
                "litellm_settings",
                key,
                value,
                LITELLM_ACTED_ON,
                LITELLM_REFUSED,
                warnings,
            )?;
        }
        for field in ["callbacks", "success_callback", "failure_callback"] {
            check_callbacks(field, litellm.get(field), warnings)?;
        }
    }
    for (key, value) in sections.general_other {
        check(
            "general_settings",
            key,
            value,
            GENERAL_ACTED_ON,
            GENERAL_REFUSED,
            warnings,
        )?;
    }
    if let Some(router) = sections.router.and_then(Value::as_mapping) {
        for (key, value) in router {
            let Some(key) = key.as_str() else { continue };
            check(
                "router_settings",
                key,
                value,
                ROUTER_ACTED_ON,
                ROUTER_REFUSED,
                warnings,
            )?;
        }
    }
    Ok(())
}

/// One key: acted on, refused (when set to something that asks for the
/// behaviour), or a warning.
fn check(
    section: &str,
    key: &str,
    value: &Value,
    acted_on: &[&str],
    refused: &[(&str, &str)],
    warnings: &mut Vec<String>,
) -> Result<(), Refusal> {
    if acted_on.contains(&key) || asks_for_nothing(value) {
        return Ok(());
    }
    if let Some((_, why)) = refused.iter().find(|(name, _)| *name == key) {
        return Err(Refusal {
            entry: format!("{section}.{key}"),
            problem: format!(
                "LiteLLM acts on this setting and this gateway does not: {why}; remove it to start"
            ),
        });
    }
    warnings.push(format!(
        "{section}.{key} is a LiteLLM setting this gateway does not act on; it is ignored"
    ));
    Ok(())
}

/// Why `section.key` set to `value` is refused, when it is (a stored
/// setting, `config::stored`, is judged as the file's).
pub(super) fn refusal(section: &str, key: &str, value: &Value) -> Option<&'static str> {
    let refused = match section {
        "litellm_settings" => LITELLM_REFUSED,
        "general_settings" => GENERAL_REFUSED,
        "router_settings" => ROUTER_REFUSED,
        _ => return None,
    };
    if asks_for_nothing(value) {
        return None;
    }
    refused
        .iter()
        .find(|(name, _)| *name == key)
        .map(|(_, why)| *why)
}

/// A value that switches nothing on: null, `false`, an empty list or map.
pub(super) fn asks_for_nothing(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        // A zero budget or limit is LiteLLM's "off".
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Sequence(s) => s.is_empty(),
        Value::Mapping(m) => m.is_empty(),
        _ => false,
    }
}

/// The names in one callback field: guardrail hooks refused, logging
/// callbacks the gateway does not serve reported.
fn check_callbacks(
    field: &str,
    value: Option<&Value>,
    warnings: &mut Vec<String>,
) -> Result<(), Refusal> {
    let names: Vec<&str> = match value {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Sequence(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => return Ok(()),
    };
    for name in names.into_iter().map(str::trim) {
        if GUARDRAIL_CALLBACKS.contains(&name) {
            return Err(Refusal {
                entry: format!("litellm_settings.{field}"),
                problem: format!(
                    "`{name}` checks or changes what reaches a model, and this gateway has no such guardrail; remove it to start"
                ),
            });
        }
        if PROMPT_CALLBACKS.contains(&name) {
            return Err(Refusal {
                entry: format!("litellm_settings.{field}"),
                problem: format!(
                    "`{name}` is LiteLLM's prompt management: it rewrites the requests that name a prompt_id, and this gateway does not manage prompts; remove it to start"
                ),
            });
        }
        if !CALLBACKS_SERVED.contains(&name) {
            warnings.push(format!(
                "litellm_settings.{field}: callback `{name}` is not supported by this gateway; nothing is sent to it"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn run(litellm: &str, general: &str, router: &str) -> (Result<(), Refusal>, Vec<String>) {
        let litellm: Value = serde_yaml::from_str(litellm).unwrap();
        let general: BTreeMap<String, Value> = serde_yaml::from_str(general).unwrap();
        let router: Value = serde_yaml::from_str(router).unwrap();
        let mut warnings = Vec::new();
        let result = audit(
            &Sections {
                top_other: &Default::default(),
                litellm: Some(&litellm),
                general_other: &general,
                router: Some(&router),
            },
            &mut warnings,
        );
        (result, warnings)
    }

    fn audit_top(top: &str) -> (Result<(), Refusal>, Vec<String>) {
        let top: std::collections::BTreeMap<String, Value> = serde_yaml::from_str(top).unwrap();
        let mut warnings = Vec::new();
        let result = audit(
            &Sections {
                top_other: &top,
                litellm: None,
                general_other: &Default::default(),
                router: None,
            },
            &mut warnings,
        );
        (result, warnings)
    }

    /// A top-level section no part of the gateway reads (LiteLLM's
    /// `credential_list`, `callback_settings`, ...) is named at start-up;
    /// before, the file's unknown sections were dropped without a word.
    #[test]
    fn an_unread_top_level_section_is_named() {
        let (result, warnings) = audit_top("{callback_settings: {otel: {}}, credential_list: []}");
        assert!(result.is_ok());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("callback_settings"), "{warnings:?}");
    }

    /// LiteLLM's `include` merges other files' sections (a master key,
    /// guardrails) into the config: not read here, so refused.
    #[test]
    fn an_include_is_refused() {
        let (result, _) = audit_top("{include: [models.yaml]}");
        assert_eq!(result.unwrap_err().entry, "include");
        assert!(
            audit_top("{include: []}").0.is_ok(),
            "an empty one asks for nothing"
        );
    }

    /// LiteLLM's policy engine (`policies`, `policy_attachments`) attaches
    /// guardrails: not run here, so refused.
    #[test]
    fn policies_are_refused() {
        let (result, _) = audit_top("{policies: {strict: {guardrails: {add: [pii]}}}}");
        assert_eq!(result.unwrap_err().entry, "policies");
        let (result, _) = audit_top("{policy_attachments: [{policy: strict, scope: '*'}]}");
        assert_eq!(result.unwrap_err().entry, "policy_attachments");
        assert!(audit_top("{policies: {}}").0.is_ok());
    }

    /// LiteLLM's `prompts` (prompt management) rewrite the requests that
    /// name one with `prompt_id`: not served here, so refused; without it
    /// LiteLLM ignores a request's `prompt_id`, as the gateway does.
    #[test]
    fn prompts_are_refused() {
        let (result, _) = audit_top(
            "{prompts: [{prompt_id: greet, litellm_params: {prompt_integration: dotprompt}}]}",
        );
        let refusal = result.unwrap_err();
        assert_eq!(refusal.entry, "prompts");
        assert!(refusal.problem.contains("prompt_id"), "{refusal:?}");
        assert!(audit_top("{prompts: []}").0.is_ok());
        let (result, _) = run("{callbacks: [prometheus, dotprompt]}", "{}", "{}");
        let refusal = result.unwrap_err();
        assert_eq!(refusal.entry, "litellm_settings.callbacks");
        assert!(refusal.problem.contains("dotprompt"), "{refusal:?}");
    }

    #[test]
    fn a_config_files_unknown_sections_are_kept_for_the_audit() {
        let file: super::super::file::ConfigFile =
            serde_yaml::from_str("model_list: []\ninclude: [models.yaml]\n").unwrap();
        assert!(file.other.contains_key("include"));
        assert!(!file.other.contains_key("model_list"));
    }

    #[test]
    fn settings_the_gateway_reads_pass_in_silence() {
        let (result, warnings) = run(
            "{num_retries: 2, callbacks: [prometheus, otel], drop_params: true}",
            "{global_max_parallel_requests: 10}",
            "{routing_strategy: simple-shuffle, redis_host: h}",
        );
        assert_eq!(result, Ok(()));
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn guardrails_and_budget_defaults_stop_start_up_naming_the_setting() {
        let (result, _) = run("{guardrails: [{prompt_injection: {}}]}", "{}", "{}");
        assert_eq!(result.unwrap_err().entry, "litellm_settings.guardrails");
        let (result, _) = run("{max_end_user_budget: 100}", "{}", "{}");
        assert_eq!(
            result.unwrap_err().entry,
            "litellm_settings.max_end_user_budget"
        );
        let (result, warnings) = run("{max_end_user_budget_id: end-users}", "{}", "{}");
        assert_eq!(result, Ok(()), "applied, so neither refused");
        assert!(warnings.is_empty(), "nor warned about: {warnings:?}");
        let (result, _) = run("{}", "{custom_auth: my.auth}", "{}");
        assert_eq!(result.unwrap_err().entry, "general_settings.custom_auth");
        let (result, _) = run("{}", "{}", "{provider_budget_config: {openai: {}}}");
        assert_eq!(
            result.unwrap_err().entry,
            "router_settings.provider_budget_config"
        );
    }

    #[test]
    fn a_refused_setting_that_switches_nothing_on_is_accepted() {
        let (result, warnings) = run("{guardrails: [], max_end_user_budget: 0}", "{}", "{}");
        assert_eq!(result, Ok(()));
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn guardrail_callbacks_are_refused_and_unknown_logging_callbacks_reported() {
        let (result, _) = run("{callbacks: [prometheus, hide_secrets]}", "{}", "{}");
        let refusal = result.unwrap_err();
        assert_eq!(refusal.entry, "litellm_settings.callbacks");
        assert!(refusal.problem.contains("hide_secrets"), "{refusal:?}");
        let (result, warnings) = run("{success_callback: langfuse}", "{}", "{}");
        assert_eq!(result, Ok(()));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("`langfuse`"), "{warnings:?}");
    }

    #[test]
    fn other_settings_are_named_in_a_warning() {
        let (result, warnings) = run(
            "{set_verbose: true}",
            "{alert_types: [budget_alerts]}",
            "{routing_strategy_args: {ttl: 1}}",
        );
        assert_eq!(result, Ok(()));
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        for (w, name) in warnings.iter().zip([
            "litellm_settings.set_verbose",
            "general_settings.alert_types",
            "router_settings.routing_strategy_args",
        ]) {
            assert!(w.starts_with(name), "{w}");
        }
    }
}
