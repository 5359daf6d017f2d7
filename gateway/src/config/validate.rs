//! Turns the parsed file into validated deployments and server limits.

use super::file::{ConfigFile, LitellmParams, ModelEntry};
use super::{Config, ConfigError};
use crate::deployment::{Deployment, ImagePrices, MockSettings, ProviderKind, SpendLabels};
use crate::providers;
use crate::router::RouterSettings;
use crate::upstream::parse_base;
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Default upstream timeout when none is configured (LiteLLM: 6000 s; we
/// choose a bound a client can live with).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest wait a setting may ask for (7 days), so that adding it to
/// the clock cannot overflow.
const MAX_WAIT_MS: u64 = 7 * 24 * 3600 * 1000;
/// The longest upstream timeout a deployment may set (a day): longer ones
/// would overflow deadline arithmetic, and no client waits that long.
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);
/// The longest mock delay (an hour).
const MAX_MOCK_DELAY_MS: u64 = 3_600_000;
/// The largest deployment rpm or tpm (10^12).
const MAX_RATE: u64 = 1_000_000_000_000;
/// The largest token count a deployment may declare (a billion).
const MAX_CONTEXT_TOKENS: u64 = 1_000_000_000;
/// The largest price per token, USD.
const MAX_TOKEN_PRICE: f64 = 1_000.0;
/// The largest simple-shuffle weight.
const MAX_WEIGHT: f64 = 1e9;

/// Range checks of a deployment's numbers besides its timeouts: every one
/// may come from a `/model/new` body, so each is bounded.
fn check_numbers(params: &LitellmParams, info: &super::file::ModelInfo) -> Result<(), EntryError> {
    let out_of_range = |field: &str, what: String| Err(bad(field, format!("{field} {what}")));
    for (field, v) in [
        ("litellm_params.rpm", params.rpm),
        ("litellm_params.tpm", params.tpm),
    ] {
        if v.is_some_and(|v| v > MAX_RATE) {
            return out_of_range(field, format!("must be at most {MAX_RATE}"));
        }
    }
    for (field, v) in [
        ("model_info.max_tokens", info.max_tokens),
        ("model_info.max_input_tokens", info.max_input_tokens),
        ("model_info.max_output_tokens", info.max_output_tokens),
    ] {
        if v.is_some_and(|v| v > MAX_CONTEXT_TOKENS) {
            return out_of_range(field, format!("must be at most {MAX_CONTEXT_TOKENS}"));
        }
    }
    for (field, v) in [
        ("litellm_params.mock_latency_ms", params.mock_latency_ms),
        (
            "litellm_params.mock_chunk_delay_ms",
            params.mock_chunk_delay_ms,
        ),
    ] {
        if v.is_some_and(|v| v > MAX_MOCK_DELAY_MS) {
            return out_of_range(field, format!("must be at most {MAX_MOCK_DELAY_MS}"));
        }
    }
    if let Some(status) = params.mock_error_status {
        if !(400..=599).contains(&status) {
            return out_of_range(
                "litellm_params.mock_error_status",
                format!("must be an HTTP error status, 400 to 599 (got {status})"),
            );
        }
    }
    if let Some(w) = params.weight {
        if !(w.is_finite() && (0.0..=MAX_WEIGHT).contains(&w)) {
            return out_of_range(
                "litellm_params.weight",
                format!("must be >= 0 and at most {MAX_WEIGHT} (got {w})"),
            );
        }
    }
    for (field, v) in [
        (
            "litellm_params.input_cost_per_token",
            params.input_cost_per_token,
        ),
        (
            "litellm_params.output_cost_per_token",
            params.output_cost_per_token,
        ),
        ("model_info.input_cost_per_token", info.input_cost_per_token),
        (
            "model_info.output_cost_per_token",
            info.output_cost_per_token,
        ),
        (
            "litellm_params.input_cost_per_second",
            params.input_cost_per_second,
        ),
        (
            "litellm_params.output_cost_per_second",
            params.output_cost_per_second,
        ),
        (
            "model_info.input_cost_per_second",
            info.input_cost_per_second,
        ),
        (
            "model_info.output_cost_per_second",
            info.output_cost_per_second,
        ),
        (
            "litellm_params.input_cost_per_image",
            params.input_cost_per_image,
        ),
        (
            "litellm_params.output_cost_per_image",
            params.output_cost_per_image,
        ),
        (
            "litellm_params.input_cost_per_pixel",
            params.input_cost_per_pixel,
        ),
        (
            "litellm_params.output_cost_per_image_token",
            params.output_cost_per_image_token,
        ),
        ("model_info.input_cost_per_image", info.input_cost_per_image),
        (
            "model_info.output_cost_per_image",
            info.output_cost_per_image,
        ),
        ("model_info.input_cost_per_pixel", info.input_cost_per_pixel),
        (
            "model_info.output_cost_per_image_token",
            info.output_cost_per_image_token,
        ),
    ] {
        if let Some(p) = v {
            if !(p.is_finite() && (0.0..=MAX_TOKEN_PRICE).contains(&p)) {
                return out_of_range(
                    field,
                    format!("must be a price in USD from 0 to {MAX_TOKEN_PRICE} (got {p})"),
                );
            }
        }
    }
    Ok(())
}

/// Limits of the HTTP server, with defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerLimits {
    /// Max request body bytes (413 above).
    pub max_body_bytes: usize,
    /// Max bytes of a request head (431 above).
    pub max_header_bytes: usize,
    /// Max request headers (431 above).
    pub max_headers: usize,
    /// Time to receive a request head (408).
    pub header_timeout: Duration,
    /// Time to receive the whole body (408).
    pub body_timeout: Duration,
    /// Idle keep-alive time.
    pub keepalive_timeout: Duration,
    /// Time for each write to a client; also the socket's TCP_USER_TIMEOUT.
    pub write_timeout: Duration,
    /// Open client connections per process.
    pub max_connections: usize,
    /// Grace period for in-flight work on shutdown.
    pub shutdown_grace: Duration,
    /// Idle upstream connection lifetime.
    pub upstream_idle: Duration,
    /// No retry or fallback starts later than this after the request
    /// arrived, whatever its `num_retries` and `fallbacks` ask.
    pub retry_deadline: Duration,
    /// Most retries a request body's `num_retries` may ask for (400 above).
    pub max_request_retries: u32,
    /// `general_settings.allowed_routes`: when set, the only paths served
    /// (403 for others; the public health probes always answer).
    pub allowed_routes: Option<Vec<String>>,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_body_bytes: 64 << 20,
            max_header_bytes: 64 << 10,
            max_headers: 100,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(75),
            write_timeout: Duration::from_secs(30),
            max_connections: 100_000,
            shutdown_grace: Duration::from_secs(30),
            upstream_idle: Duration::from_secs(60),
            retry_deadline: Duration::from_secs(30),
            max_request_retries: 10,
            allowed_routes: None,
        }
    }
}

pub(super) fn validate(
    path: &Path,
    file: ConfigFile,
    lookup: &dyn Fn(&str) -> Option<String>,
    mut warnings: Vec<String>,
) -> Result<Config, ConfigError> {
    let invalid = |entry: String, problem: String| ConfigError::Invalid {
        file: path.to_path_buf(),
        entry,
        problem,
    };
    let router = RouterSettings::from_config(
        file.router_settings.as_ref(),
        file.litellm_settings.as_ref(),
    )
    .map_err(|e| invalid(e.field, e.problem))?;
    super::audit::audit(
        &super::audit::Sections {
            top_other: &file.other,
            litellm: file.litellm_settings.as_ref(),
            general_other: &file.general_settings.other,
            router: file.router_settings.as_ref(),
        },
        &mut warnings,
    )
    .map_err(|r| invalid(r.entry, r.problem))?;
    let file_general = file_general(&file.general_settings, lookup, &mut warnings);
    let mut deployments = Vec::with_capacity(file.model_list.len());
    // The deployments whose key the pass-through routes use.
    let mut in_pass_through = Vec::new();
    for (i, mut entry) in file.model_list.into_iter().enumerate() {
        let label = match &entry.model_name {
            Some(name) => format!("model_list[{i}] (model_name \"{name}\")"),
            None => format!("model_list[{i}]"),
        };
        let flag = entry
            .litellm_params
            .as_mut()
            .and_then(|p| p.other.remove("use_in_pass_through"));
        match flag {
            None | Some(serde_yaml::Value::Null) | Some(serde_yaml::Value::Bool(false)) => {}
            Some(serde_yaml::Value::Bool(true)) => in_pass_through.push(i),
            Some(_) => {
                return Err(invalid(
                    label,
                    "litellm_params.use_in_pass_through must be true or false".into(),
                ))
            }
        }
        let dep = deployment(entry, &router, lookup, &mut warnings, &label)
            .map_err(|e| invalid(label, e.problem))?;
        deployments.push(dep);
    }
    let pass_through = {
        let offered: Vec<_> = in_pass_through
            .iter()
            .map(|&i| {
                let d = &deployments[i];
                let base = d.base.as_ref();
                crate::providers::passthrough::DeploymentCredential {
                    provider: &d.provider_name,
                    key: d.api_key.as_deref(),
                    vertex: d.vertex.as_ref().zip(base),
                    aws: d.aws.as_ref().zip(base),
                }
            })
            .collect();
        let mut targets =
            crate::providers::passthrough::PassThroughTargets::resolve(lookup, &offered)
                .map_err(|p| invalid("pass-through routes".into(), p))?;
        targets.vertex_default = default_vertex(file.default_vertex_config.as_ref(), lookup)
            .map_err(|p| invalid("default_vertex_config".into(), p))?;
        if let Some(list) = file.general_settings.other.get("pass_through_endpoints") {
            if !list.is_null() {
                targets.custom = crate::providers::passthrough::CustomEndpoint::parse_all(list)
                    .map_err(|p| invalid("general_settings.pass_through_endpoints".into(), p))?;
            }
        }
        if let Some(list) = file.files_settings.as_ref().filter(|l| !l.is_null()) {
            let (files, skipped) = crate::providers::files::FilesSetting::parse_all(list)
                .map_err(|p| invalid("files_settings".into(), p))?;
            targets.files = files;
            warnings.extend(skipped);
        }
        targets
    };
    let mut ids = std::collections::HashSet::new();
    for d in &deployments {
        if !ids.insert(d.id.clone()) {
            return Err(invalid(
                format!("model_info.id \"{}\"", d.id),
                "two deployments share this id".into(),
            ));
        }
    }
    let unpriced_models =
        crate::spend::UnpricedModels::parse(file.gateway_settings.unpriced_models.as_deref())
            .map_err(|p| invalid("gateway_settings.unpriced_models".into(), p))?;
    for (i, d) in deployments.iter().enumerate() {
        if !d.is_wildcard() && !crate::spend::is_priced(d, &d.upstream_model) {
            let label = format!("model_list[{i}] (model_name \"{}\")", d.group);
            warnings.push(unpriced_models.warning(&label, d));
        }
    }
    let block_unpriced = match file
        .litellm_settings
        .as_ref()
        .and_then(|l| l.get("block_requests_for_models_without_pricing"))
        .filter(|v| !v.is_null())
    {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| {
            invalid(
                "litellm_settings.block_requests_for_models_without_pricing".into(),
                "must be true or false".into(),
            )
        })?,
    };
    let estimated_output_tokens = match file
        .litellm_settings
        .as_ref()
        .and_then(|l| l.get("default_estimated_output_tokens"))
        .filter(|v| !v.is_null())
    {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|n| (1..=MAX_OUTPUT_ESTIMATE).contains(n))
                .ok_or_else(|| {
                    invalid(
                        "litellm_settings.default_estimated_output_tokens".into(),
                        format!("must be an integer from 1 to {MAX_OUTPUT_ESTIMATE}"),
                    )
                })?,
        ),
    };
    let end_user_default_budget = match file
        .litellm_settings
        .as_ref()
        .and_then(|l| l.get("max_end_user_budget_id"))
    {
        None | Some(serde_yaml::Value::Null) => None,
        Some(v) => match v.as_str() {
            Some("") => None,
            Some(id) => Some(id.to_string()),
            None => {
                return Err(invalid(
                    "litellm_settings.max_end_user_budget_id".into(),
                    "must be the id of a budget row (/budget/new)".into(),
                ))
            }
        },
    };
    let budget_throttle = match file
        .litellm_settings
        .as_ref()
        .and_then(|l| l.get("budget_exceeded_throttle_percentage"))
    {
        None | Some(serde_yaml::Value::Null) => None,
        Some(v) => Some(v.as_f64().filter(|p| *p > 0.0 && *p <= 1.0).ok_or_else(|| {
            invalid(
                "litellm_settings.budget_exceeded_throttle_percentage".into(),
                "must be a number above 0 and at most 1 (the share of a key's limits it keeps past its budget)".into(),
            )
        })?),
    };
    let mock_testing_params = match file
        .general_settings
        .other
        .get("dangerously_allow_mock_testing_request_params")
    {
        None | Some(serde_yaml::Value::Null) => false,
        Some(v) => v.as_bool().ok_or_else(|| {
            invalid(
                "general_settings.dangerously_allow_mock_testing_request_params".into(),
                "must be true or false".into(),
            )
        })?,
    };
    let enforced_params =
        super::EnforcedParams::from_general(&file.general_settings.other, &mut warnings)
            .map_err(|(entry, problem)| invalid(entry, problem))?;
    let spend_logs = crate::spend::SpendLogs::parse(&file.general_settings.other, lookup)
        .map_err(|p| invalid("general_settings".into(), p))?
        .with_message_logging(file.litellm_settings.as_ref());
    let batch_polling = batch_polling(&file.general_settings.other, lookup)
        .map_err(|p| invalid("general_settings.proxy_batch_polling_interval".into(), p))?;
    let limits = server_limits(&file.general_settings, &file.gateway_settings)
        .map_err(|p| invalid("gateway_settings".into(), p))?;
    let master_key = file.general_settings.master_key.filter(|k| !k.is_empty());
    if let Some(k) = &master_key {
        if !k.starts_with("sk-") {
            warnings.push(
                "general_settings.master_key should start with `sk-` (LiteLLM requires it)".into(),
            );
        }
    }
    let database_url = file
        .general_settings
        .database_url
        .clone()
        .filter(|u| !u.is_empty())
        .or_else(|| lookup("DATABASE_URL").filter(|u| !u.is_empty()));
    let model_cipher = crate::store::cipher::ParamCipher::new(
        lookup("LITELLM_SALT_KEY")
            .filter(|k| !k.is_empty())
            .or_else(|| master_key.clone())
            .as_deref(),
        crate::store::cipher::Algorithm::from_setting(
            file.general_settings
                .other
                .get("encryption_algorithm")
                .and_then(serde_yaml::Value::as_str),
        ),
    );
    let alerting = file
        .general_settings
        .alerting
        .as_deref()
        .unwrap_or_default();
    let (alerts, alert_warnings) = crate::alerts::resolve(alerting, lookup)
        .map_err(|p| invalid("general_settings.alerting".into(), p))?;
    warnings.extend(alert_warnings);
    let spool_dir = file
        .gateway_settings
        .spool_dir
        .clone()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(".gateway-spool"));
    let model_env_allowlist = file.gateway_settings.model_env_allowlist.clone();
    let virtual_keys = file
        .gateway_settings
        .virtual_keys
        .into_iter()
        .enumerate()
        .map(|(i, k)| {
            config_key(k).map_err(|p| invalid(format!("gateway_settings.virtual_keys[{i}]"), p))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let global_parallel = file
        .general_settings
        .other
        .get("global_max_parallel_requests")
        .and_then(serde_yaml::Value::as_i64);
    let rate_limits = crate::limits::LimitSettings::resolve(
        &file.gateway_settings.rate_limits,
        global_parallel,
        crate::limits::RedisSources {
            router_settings: file.router_settings.as_ref(),
            litellm_settings: file.litellm_settings.as_ref(),
            coordination_redis: file.general_settings.other.get("coordination_redis"),
        },
        lookup,
    )
    .map_err(|p| invalid("gateway_settings.rate_limits".into(), p))?;
    let metrics = crate::metrics::MetricsSettings::resolve(
        file.litellm_settings.as_ref(),
        &file.gateway_settings.metrics,
    )
    .map_err(|p| invalid("metrics".into(), p))?;
    let health =
        crate::health::settings::HealthSettings::from_general(&file.general_settings.other)
            .map_err(|p| invalid("general_settings".into(), p))?;
    let otel = crate::otel::OtelSettings::resolve(file.litellm_settings.as_ref(), lookup)
        .map_err(|p| invalid("litellm_settings.callbacks (otel)".into(), p))?;
    let images = crate::upstream::fetch::ImageFetchSettings::resolve(
        &file.gateway_settings.image_url_fetch,
        file.litellm_settings.as_ref(),
        lookup,
    )
    .map_err(|p| invalid("image URL fetching".into(), p))?;
    let proxy_budget = super::ProxyBudget::from_litellm_settings(file.litellm_settings.as_ref())
        .map_err(|p| invalid("litellm_settings".into(), p))?;
    let team_defaults = super::TeamDefaults::from_litellm_settings(file.litellm_settings.as_ref())
        .map_err(|p| invalid("litellm_settings".into(), p))?;
    let team_admin =
        super::TeamAdminFields::from_general(&file.general_settings.other, &mut warnings)
            .map_err(|p| invalid("general_settings".into(), p))?;
    let console = console(&file.general_settings.other, lookup, master_key.as_deref())
        .map_err(|p| invalid("the admin console (/ui)".into(), p))?;
    let cache =
        crate::cache::CacheSettings::from_litellm(file.litellm_settings.as_ref(), &mut warnings)
            .and_then(|settings| {
                let Some(settings) = settings else {
                    return Ok(None);
                };
                let redis = rate_limits.redis_url.as_deref().map(|url| {
                    (
                        url,
                        rate_limits.redis_cluster.as_slice(),
                        rate_limits.redis_timeout,
                        rate_limits.breaker,
                    )
                });
                crate::cache::Cache::new(settings, redis).map(|c| Some(std::sync::Arc::new(c)))
            })
            .map_err(|p| invalid("litellm_settings.cache".into(), p))?;
    if master_key.is_none()
        && cache
            .as_ref()
            .is_some_and(|c| c.settings().scope != crate::cache::Scope::Global)
    {
        warnings.push(
            "litellm_settings.cache_params.scope: without general_settings.master_key every \
             caller is anonymous, so every entry is shared (as scope: global)"
                .into(),
        );
    }
    let guardrails = crate::guardrails::Guardrails::from_config(file.guardrails.as_ref())
        .map_err(|(entry, problem)| invalid(entry, problem))?;
    Ok(Config {
        file_general,
        console,
        cache,
        guardrails: std::sync::Arc::new(guardrails),
        team_defaults,
        team_admin,
        otel,
        images,
        source: path.to_path_buf(),
        health,
        rate_limits,
        metrics,
        deployments,
        master_key,
        database_url,
        model_cipher,
        spool_dir,
        virtual_keys,
        model_env_allowlist,
        unpriced_models,
        estimated_output_tokens,
        end_user_default_budget,
        budget_throttle,
        block_unpriced,
        mock_testing_params,
        enforced_params,
        proxy_budget,
        spend_logs,
        batch_polling,
        alerts,
        limits,
        router_settings: file.router_settings,
        router,
        litellm_settings: file.litellm_settings,
        warnings,
        pass_through: std::sync::Arc::new(pass_through),
    })
}

/// How often open batches are polled: LiteLLM's
/// `general_settings.proxy_batch_polling_interval` (seconds), else
/// `PROXY_BATCH_POLLING_INTERVAL`, else 3600; `None` when
/// `PROXY_BATCH_POLLING_ENABLED` is anything but `true` (LiteLLM's rule).
fn batch_polling(
    general: &std::collections::BTreeMap<String, serde_yaml::Value>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<std::time::Duration>, String> {
    /// A day: a longer interval polls a 24-hour batch never.
    const MAX_SECS: u64 = 86_400;
    let enabled =
        lookup("PROXY_BATCH_POLLING_ENABLED").is_none_or(|v| v.trim().eq_ignore_ascii_case("true"));
    let secs = match general.get("proxy_batch_polling_interval") {
        Some(v) if !v.is_null() => v
            .as_u64()
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
            .ok_or("must be a whole number of seconds")?,
        _ => match lookup("PROXY_BATCH_POLLING_INTERVAL") {
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| "PROXY_BATCH_POLLING_INTERVAL must be a whole number of seconds")?,
            None => 3600,
        },
    };
    if !(1..=MAX_SECS).contains(&secs) {
        return Err(format!(
            "the batch polling interval must be 1 to {MAX_SECS} seconds"
        ));
    }
    Ok(enabled.then(|| std::time::Duration::from_secs(secs)))
}

/// The admin console's login: `UI_USERNAME`, `UI_PASSWORD` (else the master
/// key), `general_settings.ui_access_mode` (`all`, the default, or
/// `admin_only`; LiteLLM's SSO group form is refused: no SSO here) and
/// `DISABLE_ADMIN_UI`.
fn console(
    general: &std::collections::BTreeMap<String, serde_yaml::Value>,
    lookup: &dyn Fn(&str) -> Option<String>,
    master_key: Option<&str>,
) -> Result<crate::auth::Console, String> {
    let admin_only = match general.get("ui_access_mode") {
        None | Some(serde_yaml::Value::Null) => false,
        Some(serde_yaml::Value::String(mode)) if mode == "all" => false,
        Some(serde_yaml::Value::String(mode)) if mode == "admin_only" => true,
        Some(other) => {
            return Err(format!(
                "general_settings.ui_access_mode must be \"all\" or \"admin_only\" here (no SSO), got {}",
                serde_yaml::to_string(other).unwrap_or_default().trim()
            ))
        }
    };
    let disabled = match lookup("DISABLE_ADMIN_UI").map(|v| v.trim().to_ascii_lowercase()) {
        None => false,
        Some(v) if v.is_empty() || ["false", "0", "no", "off"].contains(&v.as_str()) => false,
        Some(v) if ["true", "1", "yes", "on"].contains(&v.as_str()) => true,
        Some(v) => return Err(format!("DISABLE_ADMIN_UI must be true or false, got {v:?}")),
    };
    Ok(crate::auth::Console::new(
        lookup("UI_USERNAME").as_deref(),
        lookup("UI_PASSWORD").as_deref(),
        master_key,
    )
    .with_admin_only(admin_only)
    .with_disabled(disabled))
}
/// The largest `default_estimated_output_tokens` (as `max_tokens`).
const MAX_OUTPUT_ESTIMATE: u64 = 10_000_000;

/// A `model_list` entry that is not valid: the field at fault and what is
/// wrong with it (the message names the field too).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{problem}")]
pub struct EntryError {
    /// The field, e.g. `litellm_params.api_base`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

fn bad(field: &str, problem: impl Into<String>) -> EntryError {
    EntryError {
        field: field.to_string(),
        problem: problem.into(),
    }
}

/// What the file's `general_settings` says about stored settings.
fn file_general(
    general: &super::GeneralSettings,
    lookup: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> super::FileGeneral {
    let mut declared: Vec<String> = general.other.keys().cloned().collect();
    for (name, set) in [
        ("master_key", general.master_key.is_some()),
        ("database_url", general.database_url.is_some()),
        ("alerting", general.alerting.is_some()),
        ("max_request_size_mb", general.max_request_size_mb.is_some()),
    ] {
        if set {
            declared.push(name.to_string());
        }
    }
    let store_model_in_db = general.other.get("store_model_in_db").map(|v| match v {
        serde_yaml::Value::Bool(b) => *b,
        serde_yaml::Value::String(s) => s.eq_ignore_ascii_case("true"),
        _ => false,
    });
    let supported_db_objects = general
        .other
        .get("supported_db_objects")
        .and_then(|v| v.as_sequence())
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.as_str().map(str::to_string))
                .collect()
        });
    super::FileGeneral {
        declared,
        store_model_in_db,
        supported_db_objects,
        reload_interval: reload_interval(&general.other, lookup, warnings),
    }
}

/// How often LiteLLM's stored settings are read again:
/// `general_settings.proxy_config_reload_interval_seconds`, else
/// `PROXY_CONFIG_RELOAD_INTERVAL_SECONDS`, else 30 s; anything but a whole
/// number of seconds from 1 to a day is LiteLLM's fallback to 30 s, with a
/// warning.
fn reload_interval(
    general: &std::collections::BTreeMap<String, serde_yaml::Value>,
    lookup: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> std::time::Duration {
    const DEFAULT_SECS: u64 = 30;
    const MAX_SECS: u64 = 86_400;
    let (name, given) = match general.get("proxy_config_reload_interval_seconds") {
        Some(v) if !v.is_null() => (
            "general_settings.proxy_config_reload_interval_seconds",
            v.as_u64()
                .map(|n| n.to_string())
                .or_else(|| v.as_str().map(str::to_string))
                .unwrap_or_else(|| serde_yaml::to_string(v).unwrap_or_default()),
        ),
        _ => match lookup("PROXY_CONFIG_RELOAD_INTERVAL_SECONDS") {
            Some(v) => ("PROXY_CONFIG_RELOAD_INTERVAL_SECONDS", v),
            None => return std::time::Duration::from_secs(DEFAULT_SECS),
        },
    };
    match given.trim().parse::<u64>() {
        Ok(secs) if (1..=MAX_SECS).contains(&secs) => std::time::Duration::from_secs(secs),
        _ => {
            warnings.push(format!(
                "{name}={} must be a whole number of seconds from 1 to {MAX_SECS}; falling back \
                 to {DEFAULT_SECS} s (as LiteLLM)",
                given.trim()
            ));
            std::time::Duration::from_secs(DEFAULT_SECS)
        }
    }
}

/// Validates one `model_list` entry given as JSON (a `/model/new` body, a
/// row of `LiteLLM_ProxyModelTable`) by the rules of the config file, after
/// resolving its `os.environ/NAME` references with `lookup`. Returns the
/// deployment and the warnings (unused parameters).
pub fn deployment_from_json(
    entry: &serde_json::Value,
    router: &RouterSettings,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(Deployment, Vec<String>), EntryError> {
    let mut doc = serde_yaml::to_value(entry).map_err(|e| bad("model", e.to_string()))?;
    super::env_refs::resolve(&mut doc, lookup).map_err(|m| {
        bad(
            &m.path,
            format!("{}: environment variable {} is not set", m.path, m.var),
        )
    })?;
    let entry: ModelEntry = serde_path_to_error::deserialize(doc).map_err(|e| {
        let field = e.path().to_string();
        let problem = format!("{field}: {}", e.into_inner());
        bad(&field, problem)
    })?;
    let mut warnings = Vec::new();
    let label = entry.model_name.clone().unwrap_or_default();
    let dep = deployment(entry, router, lookup, &mut warnings, &label)?;
    Ok((dep, warnings))
}

/// The `/vertex_ai/*` route's default credentials: LiteLLM's
/// `default_vertex_config`, else its `DEFAULT_VERTEXAI_PROJECT`,
/// `DEFAULT_VERTEXAI_LOCATION` and `DEFAULT_GOOGLE_APPLICATION_CREDENTIALS`
/// (none when no project is named).
fn default_vertex(
    config: Option<&super::file::DefaultVertexConfig>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<crate::providers::passthrough_cloud::VertexTarget>, String> {
    let env = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    let (project, location, credentials) = match config {
        Some(c) => (
            c.vertex_project.clone(),
            c.vertex_location.clone(),
            c.vertex_credentials.clone(),
        ),
        None => (
            env("DEFAULT_VERTEXAI_PROJECT"),
            env("DEFAULT_VERTEXAI_LOCATION"),
            env("DEFAULT_GOOGLE_APPLICATION_CREDENTIALS"),
        ),
    };
    let Some(project) = project else {
        return match config {
            Some(_) => Err("vertex_project is required".into()),
            None => Ok(None),
        };
    };
    // Only what the block names: the deployments' VERTEXAI_* fallbacks do
    // not apply here.
    let only = |_: &str| None;
    let (settings, base) = crate::providers::vertex::resolve(
        &crate::providers::vertex::VertexParams {
            project: Some(&project),
            location: location.as_deref(),
            credentials: credentials.as_deref(),
        },
        &only,
    )?;
    let base = parse_base(&base).map_err(|e| format!("\"{base}\": {e}"))?;
    Ok(Some(crate::providers::passthrough_cloud::VertexTarget {
        settings,
        base,
    }))
}

/// The environment variables LiteLLM reads for a provider's `api_base`,
/// `api_key`, `api_version` and Azure AD token when the entry sets none.
fn provider_env(kind: ProviderKind) -> [Option<&'static str>; 4] {
    match kind {
        ProviderKind::Azure => [
            Some("AZURE_API_BASE"),
            Some("AZURE_API_KEY"),
            Some("AZURE_API_VERSION"),
            Some("AZURE_AD_TOKEN"),
        ],
        ProviderKind::AzureAi => [
            Some("AZURE_AI_API_BASE"),
            Some("AZURE_AI_API_KEY"),
            None,
            None,
        ],
        ProviderKind::Anthropic => [
            Some("ANTHROPIC_API_BASE"),
            Some("ANTHROPIC_API_KEY"),
            None,
            None,
        ],
        ProviderKind::Gemini => [Some("GEMINI_API_BASE"), Some("GEMINI_API_KEY"), None, None],
        ProviderKind::Cohere => [Some("COHERE_API_BASE"), Some("COHERE_API_KEY"), None, None],
        ProviderKind::Jina => [
            Some("JINA_AI_API_BASE"),
            Some("JINA_AI_API_KEY"),
            None,
            None,
        ],
        ProviderKind::Voyage => [Some("VOYAGE_API_BASE"), Some("VOYAGE_API_KEY"), None, None],
        ProviderKind::OpenAiCompatible
        | ProviderKind::Mock
        | ProviderKind::Unsupported
        | ProviderKind::Bedrock
        | ProviderKind::Vertex
        | ProviderKind::VertexAnthropic => [None; 4],
    }
}

/// The spec of a provider LiteLLM knows and this gateway does not serve.
static UNSUPPORTED: providers::ProviderSpec = providers::ProviderSpec {
    kind: ProviderKind::Unsupported,
    default_api_base: None,
};

fn deployment(
    mut entry: ModelEntry,
    router: &RouterSettings,
    lookup: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
    label: &str,
) -> Result<Deployment, EntryError> {
    let group = entry
        .model_name
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| bad("model_name", "model_name is required"))?;
    let mut params: LitellmParams = entry
        .litellm_params
        .ok_or_else(|| bad("litellm_params", "litellm_params is required"))?;
    let tags = deployment_tags(params.other.remove("tags"))?;
    let model = params
        .model
        .clone()
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| {
            bad(
                "litellm_params.model",
                "litellm_params.model is required (e.g. `openai/gpt-4o`)",
            )
        })?;
    let (provider_name, upstream_model) = match model.split_once('/') {
        Some((p, m))
            if providers::lookup(p).is_some() || providers::unsupported::known_to_litellm(p) =>
        {
            (p.to_string(), m.to_string())
        }
        Some((p, _)) => {
            return Err(bad(
                "litellm_params.model",
                format!(
            "litellm_params.model \"{model}\": provider \"{p}\" is not a provider LiteLLM knows (supported here: {})",
            providers::supported_names().join(", ")
        ),
            ))
        }
        None => ("openai".to_string(), model.clone()),
    };
    // A provider LiteLLM knows and this gateway does not serve: the
    // deployment starts unsupported (see `Config::unsupported`).
    let spec = providers::lookup(&provider_name).unwrap_or(&UNSUPPORTED);
    if group.ends_with('*') != upstream_model.ends_with('*') && group != "*" {
        return Err(bad("litellm_params.model", format!(
            "a wildcard model_name needs a wildcard litellm_params.model (got \"{group}\" → \"{model}\")"
        )));
    }
    let [env_base, env_key, env_version, env_token] = provider_env(spec.kind);
    let env = |name: Option<&str>| name.and_then(lookup).filter(|v| !v.is_empty());
    let env_base = match spec.kind {
        // LiteLLM also reads `ANTHROPIC_BASE_URL`.
        ProviderKind::Anthropic => env(env_base).or_else(|| env(Some("ANTHROPIC_BASE_URL"))),
        _ => env(env_base),
    };
    let api_key = match spec.kind {
        // LiteLLM also reads `CO_API_KEY`.
        ProviderKind::Cohere => params
            .api_key
            .clone()
            .or_else(|| env(env_key))
            .or_else(|| env(Some("CO_API_KEY"))),
        // LiteLLM also reads `VOYAGE_AI_API_KEY`.
        ProviderKind::Voyage => params
            .api_key
            .clone()
            .or_else(|| env(env_key))
            .or_else(|| env(Some("VOYAGE_AI_API_KEY"))),
        _ => params.api_key.clone().or_else(|| env(env_key)),
    };
    let api_version = params.api_version.clone().or_else(|| env(env_version));
    let azure_ad_token = params.azure_ad_token.clone().or_else(|| env(env_token));
    let (aws, env_base) = match spec.kind {
        ProviderKind::Bedrock => {
            let (aws, endpoint) = crate::providers::bedrock::resolve(
                &crate::providers::bedrock::AwsParams {
                    access_key_id: params.aws_access_key_id.as_deref(),
                    secret_access_key: params.aws_secret_access_key.as_deref(),
                    session_token: params.aws_session_token.as_deref(),
                    region_name: params.aws_region_name.as_deref(),
                    runtime_endpoint: params.aws_bedrock_runtime_endpoint.as_deref(),
                },
                lookup,
            )
            .map_err(|p| bad("litellm_params", format!("litellm_params: {p}")))?;
            (Some(aws), Some(endpoint))
        }
        _ => (None, env_base),
    };
    let (vertex, env_base) = match spec.kind {
        ProviderKind::Vertex => {
            let credentials = match &params.vertex_credentials {
                None | Some(serde_yaml::Value::Null) => None,
                Some(serde_yaml::Value::String(s)) => Some(s.clone()),
                Some(v @ serde_yaml::Value::Mapping(_)) => Some(serde_json::to_string(v).map_err(
                    |e| bad("litellm_params.vertex_credentials", format!("litellm_params.vertex_credentials: {e}")),
                )?),
                Some(_) => {
                    return Err(bad(
                        "litellm_params.vertex_credentials",
                        "litellm_params.vertex_credentials must be a key file's JSON, a mapping or a path",
                    ))
                }
            };
            let (vertex, base) = crate::providers::vertex::resolve(
                &crate::providers::vertex::VertexParams {
                    project: params.vertex_project.as_deref(),
                    location: params.vertex_location.as_deref(),
                    credentials: credentials.as_deref(),
                },
                lookup,
            )
            .map_err(|p| bad("litellm_params", format!("litellm_params: {p}")))?;
            // The ranking models live on Discovery Engine, not aiplatform.
            let base = if crate::providers::vertex::rank::is_ranker(&upstream_model) {
                crate::providers::vertex::rank::DEFAULT_BASE.to_string()
            } else {
                base
            };
            (Some(vertex), Some(base))
        }
        _ => (None, env_base),
    };
    let base = match spec.kind {
        ProviderKind::Mock => None,
        // Never called; its `api_base`, when given, is still checked.
        ProviderKind::Unsupported => match params.api_base.as_deref() {
            None => None,
            Some(url) => Some(parse_base(url).map_err(|e| {
                bad(
                    "litellm_params.api_base",
                    format!("litellm_params.api_base \"{url}\": {e}"),
                )
            })?),
        },
        _ => {
            let url = params
                .api_base
                .clone()
                .or(env_base)
                .or(spec.default_api_base.map(str::to_string))
                .ok_or_else(|| {
                    bad(
                        "litellm_params.api_base",
                        format!(
                            "litellm_params.api_base is required for provider \"{provider_name}\""
                        ),
                    )
                })?;
            // Bedrock's rerank models are served by the agent runtime
            // (LiteLLM's rule: `bedrock-runtime` in the endpoint becomes
            // `bedrock-agent-runtime`).
            let url = if spec.kind == ProviderKind::Bedrock
                && crate::providers::bedrock::rerank::is_rerank_model(&upstream_model)
            {
                url.replace("bedrock-runtime", "bedrock-agent-runtime")
            } else {
                url
            };
            let mut base = parse_base(&url).map_err(|e| {
                bad(
                    "litellm_params.api_base",
                    format!("litellm_params.api_base \"{url}\": {e}"),
                )
            })?;
            // LiteLLM's Ollama bases name the server; its OpenAI API is below `/v1`.
            if matches!(provider_name.as_str(), "ollama" | "ollama_chat")
                && !base.path.ends_with("/v1")
            {
                base.path.push_str("/v1");
            }
            Some(base)
        }
    };
    for key in params.other.keys() {
        warnings.push(format!(
            "{label}: litellm_params.{key} is not used by this gateway"
        ));
    }
    let access_groups = access_groups(entry.model_info.access_groups.take())?;
    let seconds = |v: Option<f64>, name: &str| -> Result<Option<Duration>, EntryError> {
        match v {
            None => Ok(None),
            Some(s) if s.is_finite() && s > 0.0 && s <= MAX_TIMEOUT.as_secs_f64() => {
                Ok(Some(Duration::from_secs_f64(s)))
            }
            Some(s) => Err(bad(
                &format!("litellm_params.{name}"),
                format!(
                    "litellm_params.{name} must be a positive number of seconds, at most {} (got {s})",
                    MAX_TIMEOUT.as_secs()
                ),
            )),
        }
    };
    check_numbers(&params, &entry.model_info)?;
    let timeout = seconds(params.timeout, "timeout")?
        .or(router.timeout)
        .unwrap_or(DEFAULT_TIMEOUT);
    let stream_timeout = seconds(params.stream_timeout, "stream_timeout")?
        .or(router.stream_timeout)
        .unwrap_or(timeout);
    let weight = params.weight;
    let id: Arc<str> = match &entry.model_info.id {
        Some(id) if !id.is_empty() => id.as_str().into(),
        _ => derived_id(&group, &model, params.api_base.as_deref()).into(),
    };
    // Anthropic's models on Vertex AI speak the Messages API.
    let provider = match spec.kind {
        ProviderKind::Vertex if crate::providers::vertex::is_anthropic_model(&upstream_model) => {
            ProviderKind::VertexAnthropic
        }
        kind => kind,
    };
    let spend_labels = SpendLabels::new(
        &group,
        &provider_name,
        &upstream_model,
        base.as_ref(),
        params.region_name.as_deref(),
    );
    Ok(Deployment {
        id,
        group,
        provider,
        provider_name,
        upstream_model,
        base,
        api_key,
        api_version,
        azure_ad_token,
        aws,
        vertex,
        use_chat_completions_api: params.use_chat_completions_api.unwrap_or(false),
        timeout,
        stream_timeout,
        rpm: params.rpm,
        tpm: params.tpm,
        weight,
        region: params.region_name,
        input_cost_per_token: params
            .input_cost_per_token
            .or(entry.model_info.input_cost_per_token),
        output_cost_per_token: params
            .output_cost_per_token
            .or(entry.model_info.output_cost_per_token),
        cache_read_input_token_cost: params
            .cache_read_input_token_cost
            .or(entry.model_info.cache_read_input_token_cost),
        cache_creation_input_token_cost: params
            .cache_creation_input_token_cost
            .or(entry.model_info.cache_creation_input_token_cost),
        cost_per_second: match (
            params
                .input_cost_per_second
                .or(entry.model_info.input_cost_per_second),
            params
                .output_cost_per_second
                .or(entry.model_info.output_cost_per_second),
        ) {
            (None, None) => None,
            (i, o) => Some(i.unwrap_or(0.0) + o.unwrap_or(0.0)),
        },
        image_prices: ImagePrices {
            input_per_image: params
                .input_cost_per_image
                .or(entry.model_info.input_cost_per_image),
            output_per_image: params
                .output_cost_per_image
                .or(entry.model_info.output_cost_per_image),
            input_per_pixel: params
                .input_cost_per_pixel
                .or(entry.model_info.input_cost_per_pixel),
            output_per_image_token: params
                .output_cost_per_image_token
                .or(entry.model_info.output_cost_per_image_token),
        },
        max_input_tokens: entry
            .model_info
            .max_input_tokens
            .or(entry.model_info.max_tokens),
        max_output_tokens: entry.model_info.max_output_tokens,
        extra_headers: params.extra_headers.into_iter().collect(),
        mock: MockSettings {
            response: params.mock_response,
            completion_tokens: params.mock_completion_tokens,
            latency: Duration::from_millis(params.mock_latency_ms.unwrap_or(0)),
            chunk_delay: Duration::from_millis(params.mock_chunk_delay_ms.unwrap_or(0)),
            error_status: params.mock_error_status,
            prompt_tokens: None,
        },
        tags,
        access_groups,
        spend_labels,
    })
}

/// `model_info.access_groups`: a list of strings (LiteLLM's 400 "must be a
/// list of strings" otherwise); no repeats, at most [`MAX_ACCESS_GROUPS`],
/// each at most [`MAX_ACCESS_GROUP_LEN`] bytes.
fn access_groups(v: Option<serde_yaml::Value>) -> Result<Vec<String>, EntryError> {
    let shape = || {
        bad(
            "model_info.access_groups",
            format!(
                "model_info.access_groups must be a list of strings (at most \
                 {MAX_ACCESS_GROUPS}, each 1 to {MAX_ACCESS_GROUP_LEN} bytes)"
            ),
        )
    };
    let items = match v {
        None | Some(serde_yaml::Value::Null) => return Ok(Vec::new()),
        Some(serde_yaml::Value::Sequence(items)) if items.len() <= MAX_ACCESS_GROUPS => items,
        Some(_) => return Err(shape()),
    };
    let mut groups: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let name = item
            .as_str()
            .filter(|n| !n.is_empty() && n.len() <= MAX_ACCESS_GROUP_LEN)
            .ok_or_else(shape)?;
        if !groups.iter().any(|g| g == name) {
            groups.push(name.to_string());
        }
    }
    Ok(groups)
}

/// The most model access groups one deployment may name.
const MAX_ACCESS_GROUPS: usize = 64;
/// The longest model access group name, in bytes.
const MAX_ACCESS_GROUP_LEN: usize = 256;

/// `litellm_params.tags`: a list of strings.
fn deployment_tags(v: Option<serde_yaml::Value>) -> Result<Vec<String>, EntryError> {
    let shape = || {
        bad(
            "litellm_params.tags",
            "litellm_params.tags must be a list of strings",
        )
    };
    match v {
        None | Some(serde_yaml::Value::Null) => Ok(Vec::new()),
        Some(serde_yaml::Value::Sequence(items)) => items
            .iter()
            .map(|t| t.as_str().map(str::to_string).ok_or_else(shape))
            .collect(),
        Some(_) => Err(shape()),
    }
}

/// A declared key as stored: hashed, abbreviated, never in plain text.
fn config_key(k: super::file::ConfigKey) -> Result<crate::store::KeyRecord, String> {
    if !k.key.starts_with("sk-") || k.key.len() < 8 {
        return Err("key must start with `sk-` and be at least 8 characters".into());
    }
    if !k.fields.token.is_empty() {
        return Err("give the plain `key`, not a `token`".into());
    }
    crate::auth::routes::check(&k.fields.allowed_routes)?;
    let hash = crate::auth::hash_key(&k.key);
    let tail: String = k
        .key
        .chars()
        .rev()
        .take(4)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    Ok(crate::store::KeyRecord {
        token: crate::auth::token_hex(&hash),
        key_name: Some(format!("sk-...{tail}")),
        ..k.fields
    })
}

/// A deployment id stable across restarts and replicas (LiteLLM hashes the
/// params likewise).
fn derived_id(group: &str, model: &str, api_base: Option<&str>) -> String {
    let mut h = Sha256::new();
    h.update(group.as_bytes());
    h.update([0]);
    h.update(model.as_bytes());
    h.update([0]);
    h.update(api_base.unwrap_or("").as_bytes());
    h.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn server_limits(
    general: &super::GeneralSettings,
    gateway: &super::GatewaySettings,
) -> Result<ServerLimits, String> {
    let mut limits = ServerLimits::default();
    if let Some(v) = general.other.get("allowed_routes").filter(|v| !v.is_null()) {
        let shape = || "general_settings.allowed_routes must be a list of paths".to_string();
        let routes = v
            .as_sequence()
            .ok_or_else(shape)?
            .iter()
            .map(|r| r.as_str().map(str::to_string).ok_or_else(shape))
            .collect::<Result<Vec<_>, _>>()?;
        limits.allowed_routes = Some(routes);
    }
    if let Some(mb) = general.max_request_size_mb {
        if !(mb.is_finite() && mb > 0.0) {
            return Err(format!(
                "general_settings.max_request_size_mb must be positive (got {mb})"
            ));
        }
        limits.max_body_bytes = (mb * 1024.0 * 1024.0) as usize;
    }
    // Every wait is added to an Instant: bound them so that cannot overflow.
    let bounded = |name: &str, v: Option<u64>, unit_ms: u64, d: Duration| match v {
        None => Ok(d),
        Some(n) if (1..=MAX_WAIT_MS / unit_ms).contains(&n) => {
            Ok(Duration::from_millis(n * unit_ms))
        }
        Some(n) => Err(format!(
            "gateway_settings.{name} must be between 1 and {} (got {n})",
            MAX_WAIT_MS / unit_ms
        )),
    };
    limits.header_timeout = bounded(
        "header_timeout_ms",
        gateway.header_timeout_ms,
        1,
        limits.header_timeout,
    )?;
    limits.body_timeout = bounded(
        "body_timeout_ms",
        gateway.body_timeout_ms,
        1,
        limits.body_timeout,
    )?;
    limits.keepalive_timeout = bounded(
        "keepalive_timeout_ms",
        gateway.keepalive_timeout_ms,
        1,
        limits.keepalive_timeout,
    )?;
    limits.write_timeout = bounded(
        "write_timeout_ms",
        gateway.write_timeout_ms,
        1,
        limits.write_timeout,
    )?;
    if let Some(n) = gateway.max_request_retries {
        if n > crate::inbound::MAX_REQUEST_RETRIES {
            return Err(format!(
                "gateway_settings.max_request_retries must be at most {} (got {n})",
                crate::inbound::MAX_REQUEST_RETRIES
            ));
        }
        limits.max_request_retries = n;
    }
    limits.retry_deadline = bounded(
        "retry_deadline_ms",
        gateway.retry_deadline_ms,
        1,
        limits.retry_deadline,
    )?;
    limits.max_connections = gateway.max_connections.unwrap_or(limits.max_connections);
    limits.max_header_bytes = gateway.max_header_bytes.unwrap_or(limits.max_header_bytes);
    limits.max_headers = gateway.max_headers.unwrap_or(limits.max_headers);
    limits.shutdown_grace = bounded(
        "shutdown_grace_secs",
        gateway.shutdown_grace_secs,
        1000,
        limits.shutdown_grace,
    )?;
    limits.upstream_idle = bounded(
        "upstream_idle_secs",
        gateway.upstream_idle_secs,
        1000,
        limits.upstream_idle,
    )?;
    if limits.max_headers == 0 || limits.max_header_bytes < 256 || limits.max_connections == 0 {
        return Err("max_headers, max_connections must be > 0 and max_header_bytes >= 256".into());
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use std::path::Path;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(Path::new("config.yaml"), text, &|n| {
            (n == "UP_KEY").then(|| "sk-up".to_string())
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn stored_settings_reload_interval_follows_litellms_settings() {
        let secs = std::time::Duration::from_secs;
        let of = |yaml: &str, env: &[(&str, &str)]| {
            let env: Vec<(String, String)> = env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let c = Config::parse(Path::new("c.yaml"), yaml, &move |n| {
                env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
            })
            .unwrap();
            (c.file_general.reload_interval, c.warnings)
        };
        let quiet = |w: &[String]| !w.iter().any(|w| w.contains("reload_interval"));
        let (every, warnings) = of("", &[]);
        assert_eq!(every, secs(30));
        assert!(quiet(&warnings), "{warnings:?}");
        let set = "general_settings:\n  proxy_config_reload_interval_seconds: 5\n";
        let (every, warnings) = of(set, &[("PROXY_CONFIG_RELOAD_INTERVAL_SECONDS", "7")]);
        assert_eq!(every, secs(5), "the file wins over the environment");
        assert!(quiet(&warnings), "{warnings:?}");
        assert_eq!(
            of("", &[("PROXY_CONFIG_RELOAD_INTERVAL_SECONDS", "7")]).0,
            secs(7)
        );
        // LiteLLM falls back to 30 s on anything else: so does the gateway,
        // saying so.
        for bad in ["0", "-3", "soon", "100000"] {
            let yaml =
                format!("general_settings:\n  proxy_config_reload_interval_seconds: {bad}\n");
            let (every, warnings) = of(&yaml, &[]);
            assert_eq!(every, secs(30), "{bad}");
            assert!(
                warnings
                    .iter()
                    .any(|w| w.contains("proxy_config_reload_interval_seconds")
                        && w.contains("30 s")),
                "{bad}: {warnings:?}"
            );
        }
    }

    #[test]
    fn batch_polling_follows_litellms_settings() {
        let hour = Some(std::time::Duration::from_secs(3600));
        assert_eq!(parse("").unwrap().batch_polling, hour);
        let set = "general_settings:\n  proxy_batch_polling_interval: 60\n";
        assert_eq!(
            parse(set).unwrap().batch_polling,
            Some(std::time::Duration::from_secs(60))
        );
        let zero = "general_settings:\n  proxy_batch_polling_interval: 0\n";
        assert!(parse(zero).unwrap_err().contains("1 to 86400 seconds"));
        let with_env = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Config::parse(Path::new("c.yaml"), "", &move |n| {
                vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
            })
            .map(|c| c.batch_polling)
            .map_err(|e| e.to_string())
        };
        assert_eq!(
            with_env(&[("PROXY_BATCH_POLLING_INTERVAL", "5")]),
            Ok(Some(std::time::Duration::from_secs(5)))
        );
        assert_eq!(
            with_env(&[("PROXY_BATCH_POLLING_ENABLED", "false")]),
            Ok(None)
        );
        assert!(with_env(&[("PROXY_BATCH_POLLING_INTERVAL", "soon")]).is_err());
    }

    #[test]
    fn default_vertex_config_is_the_vertex_routes_fallback() {
        let c = parse("model_list: []\ndefault_vertex_config: {vertex_project: proj-1, vertex_location: europe-west4}\n").unwrap();
        let d = c.pass_through.vertex_default.as_ref().unwrap();
        assert_eq!(
            (d.settings.project.as_str(), d.settings.location.as_str()),
            ("proj-1", "europe-west4")
        );
        assert_eq!(&*d.base.host, "europe-west4-aiplatform.googleapis.com");
        assert!(parse("model_list: []\n")
            .unwrap()
            .pass_through
            .vertex_default
            .is_none());
        assert!(parse("model_list: []\ndefault_vertex_config: {vertex_location: us}\n").is_err());
        assert!(parse("model_list: []\ndefault_vertex_config: {vertex_projekt: p}\n").is_err());
    }

    #[test]
    fn reads_the_consoles_settings() {
        let with = |general: &str, env: Option<&'static str>| {
            let text = format!("model_list: []\ngeneral_settings: {{master_key: sk-1{general}}}\n");
            Config::parse(Path::new("config.yaml"), &text, &move |n| {
                (n == "DISABLE_ADMIN_UI").then(|| env.unwrap_or_default().to_string())
            })
            .map(|c| (c.console.admin_only(), c.console.disabled()))
            .map_err(|e| e.to_string())
        };
        assert_eq!(with("", None), Ok((false, false)));
        assert_eq!(
            with(", ui_access_mode: all", Some("False")),
            Ok((false, false))
        );
        assert_eq!(
            with(", ui_access_mode: admin_only", Some("true")),
            Ok((true, true))
        );
        let sso = with(", ui_access_mode: {type: restricted_sso_group}", None).unwrap_err();
        assert!(sso.contains("ui_access_mode"), "{sso}");
        let typo = with("", Some("ture")).unwrap_err();
        assert!(typo.contains("DISABLE_ADMIN_UI"), "{typo}");
    }

    #[test]
    fn loads_litellm_entries() {
        let c = parse(
            "model_list:\n  - model_name: gpt-4o\n    litellm_params:\n      model: openai/gpt-4o-2024\n      api_base: http://127.0.0.1:9000/v1/\n      api_key: os.environ/UP_KEY\n      timeout: 2\n      rpm: 10\n    model_info: {id: dep-1}\n  - model_name: groq/*\n    litellm_params: {model: groq/*}\n  - model_name: m\n    litellm_params: {model: mock/x, mock_response: hi}\ngeneral_settings: {master_key: sk-1}\n",
        )
        .unwrap();
        let d = &c.deployments[0];
        assert_eq!(&*d.id, "dep-1");
        assert_eq!(d.upstream_model, "gpt-4o-2024");
        assert_eq!(d.api_key.as_deref(), Some("sk-up"));
        let base = d.base.as_ref().unwrap();
        assert_eq!(
            (&*base.host, base.port, base.path.as_str(), base.tls),
            ("127.0.0.1", 9000, "/v1", false)
        );
        assert!(c.deployments[1].is_wildcard());
        assert!(c.deployments[1].base.as_ref().unwrap().tls);
        assert_eq!(c.deployments[2].mock.response.as_deref(), Some("hi"));
        assert_eq!(c.master_key.as_deref(), Some("sk-1"));
        // Only the unpriced listed deployment is named (the priced one and
        // the wildcard are not).
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(
            c.warnings[0].starts_with("model_list[2] (model_name \"m\"): `mock/x` has no price"),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn model_access_groups_are_read() {
        let c = parse(
            "model_list:\n  - model_name: m\n    litellm_params: {model: mock/m, input_cost_per_token: 1, output_cost_per_token: 1}\n    model_info: {access_groups: [beta, beta, gamma]}\n",
        )
        .unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(c.deployments[0].access_groups, ["beta", "gamma"]);
        for bad in ["beta", "[1]", "[\"\"]", "{a: b}"] {
            let err = parse(&format!(
                "model_list:\n  - model_name: m\n    litellm_params: {{model: mock/m, input_cost_per_token: 1, output_cost_per_token: 1}}\n    model_info: {{access_groups: {bad}}}\n"
            ))
            .unwrap_err();
            assert!(
                err.contains("model_info.access_groups must be a list of strings"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_proxy_wide_budget_and_spend_log_switches_are_read() {
        let c = parse("litellm_settings: {max_budget: 100, budget_duration: 30d}\n").unwrap();
        assert_eq!(
            c.proxy_budget,
            Some(crate::config::ProxyBudget {
                max_usd: 100.0,
                duration: Some("30d".into())
            })
        );
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(
            parse("litellm_settings: {max_budget: 0}\n")
                .unwrap()
                .proxy_budget,
            None
        );
        let err = parse("litellm_settings: {max_budget: 1, budget_duration: often}\n").unwrap_err();
        assert!(
            err.to_string().contains("litellm_settings.budget_duration"),
            "{err}"
        );
        let c = parse(
            "general_settings: {disable_spend_logs: true, disable_error_logs: true, store_prompts_in_spend_logs: true}\n",
        )
        .unwrap();
        assert!(c.spend_logs.disable_spend_logs && c.spend_logs.disable_error_logs);
        assert!(c.spend_logs.prompts.on);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(parse("").unwrap().spend_logs, Default::default());
        let c = parse(
            "general_settings: {store_prompts_in_spend_logs: true, spend_logs_prompt_storage: latest_turn}\nlitellm_settings: {turn_off_message_logging: true}\n",
        )
        .unwrap();
        assert!(c.spend_logs.prompts.latest_turn && c.spend_logs.prompts.redact_by_default);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let err = parse("general_settings: {spend_logs_prompt_storage: everything}\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("general_settings.spend_logs_prompt_storage"),
            "{err}"
        );
        let err = parse("general_settings: {disable_error_logs: yes please}\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("general_settings.disable_error_logs"),
            "{err}"
        );
        let c = parse("litellm_settings: {block_requests_for_models_without_pricing: true, default_estimated_output_tokens: 50}\n").unwrap();
        assert!(c.block_unpriced);
        assert_eq!(c.estimated_output_tokens, Some(50));
        for bad in [
            "litellm_settings: {block_requests_for_models_without_pricing: 1}\n",
            "litellm_settings: {default_estimated_output_tokens: 0}\n",
            "gateway_settings: {unpriced_models: sometimes}\n",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_file_entry_and_problem() {
        let err = parse("model_list:\n  - model_name: a\n    litellm_params: {model: mock/x}\n  - model_name: gpt\n    litellm_params: {api_base: http://x}\n").unwrap_err();
        assert_eq!(
            err,
            "config.yaml: model_list[1] (model_name \"gpt\"): litellm_params.model is required (e.g. `openai/gpt-4o`)"
        );
        let err = parse("model_list:\n  - model_name: a\n    litellm_params: {model: nope/x}\n")
            .unwrap_err();
        assert!(
            err.contains("provider \"nope\" is not a provider LiteLLM knows"),
            "{err}"
        );
        let err = parse("model_list:\n  - model_name: a\n    litellm_params: {model: openai/x, api_key: os.environ/MISSING}\n").unwrap_err();
        assert_eq!(err, "config.yaml: model_list[0].litellm_params.api_key: environment variable MISSING is not set");
    }

    #[test]
    fn server_waits_are_bounded_so_the_clock_cannot_overflow() {
        use std::time::Duration;
        let c =
            parse("gateway_settings: {write_timeout_ms: 250, shutdown_grace_secs: 3}\n").unwrap();
        assert_eq!(c.limits.write_timeout, Duration::from_millis(250));
        assert_eq!(c.limits.shutdown_grace, Duration::from_secs(3));
        assert_eq!(
            parse("{}\n").unwrap().limits.write_timeout,
            Duration::from_secs(30)
        );
        for bad in [
            "header_timeout_ms: 18446744073709551615",
            "body_timeout_ms: 0",
            "keepalive_timeout_ms: 604800001",
            "write_timeout_ms: 0",
            "shutdown_grace_secs: 18446744073709551615",
            "upstream_idle_secs: 604801",
        ] {
            let err = parse(&format!("gateway_settings: {{{bad}}}\n")).unwrap_err();
            let name = bad.split(':').next().unwrap();
            assert!(
                err.contains(&format!("gateway_settings.{name} must be between")),
                "{err}"
            );
        }
    }

    #[test]
    fn warns_on_unknown_keys_and_keeps_later_sections() {
        let c = parse("model_list: []\nrouter_settings: {routing_strategy: least-busy}\nbogus_section: 1\ngateway_settings: {header_timeout_ms: 5, typo: 1}\n").unwrap();
        assert!(
            c.warnings.iter().any(|w| w.contains("bogus_section")),
            "{:?}",
            c.warnings
        );
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("gateway_settings.typo")),
            "{:?}",
            c.warnings
        );
        assert!(c.router_settings.is_some());
        assert_eq!(c.limits.header_timeout.as_millis(), 5);
    }

    #[test]
    fn router_settings_are_validated_and_fill_deployment_timeouts() {
        let c = parse("model_list:\n  - model_name: a\n    litellm_params: {model: mock/x}\n  - model_name: b\n    litellm_params: {model: mock/y, timeout: 3}\nrouter_settings: {timeout: 20, stream_timeout: 4, num_retries: 1}\nlitellm_settings: {num_retries: 9, default_fallbacks: [b]}\n").unwrap();
        assert_eq!(
            (c.router.num_retries, c.router.default_fallbacks.clone()),
            (1, vec!["b".to_string()])
        );
        let (a, b) = (&c.deployments[0], &c.deployments[1]);
        assert_eq!((a.timeout.as_secs(), a.stream_timeout.as_secs()), (20, 4));
        assert_eq!((b.timeout.as_secs(), b.stream_timeout.as_secs()), (3, 4));
        assert_eq!(
            parse("router_settings: {cooldown_time: soon}\n").unwrap_err(),
            "config.yaml: router_settings.cooldown_time: expected a number of seconds >= 0, got soon"
        );
    }

    #[test]
    fn declared_keys_are_stored_hashed() {
        let c = parse("gateway_settings:\n  virtual_keys:\n    - {key: sk-declared-1, models: [gpt-4o], max_budget: 2.5, rpm_limit: 10}\n").unwrap();
        let k = &c.virtual_keys[0];
        assert_eq!(
            k.token,
            crate::auth::token_hex(&crate::auth::hash_key("sk-declared-1"))
        );
        assert_eq!(
            (k.models.clone(), k.max_budget, k.rpm_limit),
            (vec!["gpt-4o".to_string()], Some(2.5), Some(10))
        );
        assert_eq!(k.key_name.as_deref(), Some("sk-...ed-1"));
        assert!(
            parse("gateway_settings:\n  virtual_keys:\n    - {key: nope}\n")
                .unwrap_err()
                .contains("virtual_keys[0]")
        );
    }

    #[test]
    fn alerting_channels_take_their_urls_from_the_environment() {
        let env = |n: &str| (n == "WEBHOOK_URL").then(|| "http://127.0.0.1:9/hook".to_string());
        let text = "general_settings: {alerting: [webhook]}\n";
        let c = Config::parse(Path::new("config.yaml"), text, &env).unwrap();
        assert_eq!(c.alerts.len(), 1);
        assert_eq!(c.alerts[0].url.target, "/hook");
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let err = parse("general_settings: {alerting: [slack]}\n").unwrap_err();
        assert!(
            err.contains("general_settings.alerting") && err.contains("SLACK_WEBHOOK_URL"),
            "{err}"
        );
        assert!(parse("general_settings: {alerting: null}\n")
            .unwrap()
            .alerts
            .is_empty());
    }

    #[test]
    fn json_entries_follow_the_file_rules_and_name_the_field() {
        let router = crate::router::RouterSettings::default();
        let env = |n: &str| (n == "UP_KEY").then(|| "sk-up".to_string());
        let check = |entry: serde_json::Value| super::deployment_from_json(&entry, &router, &env);
        let (dep, warnings) = check(serde_json::json!({
            "model_name": "g",
            "litellm_params": {"model": "openai/x", "api_base": "http://h:9/v1", "api_key": "os.environ/UP_KEY", "odd": 1},
            "model_info": {"id": "m1", "max_input_tokens": 10},
        }))
        .unwrap();
        assert_eq!((&*dep.id, dep.api_key.as_deref()), ("m1", Some("sk-up")));
        assert_eq!(dep.max_input_tokens, Some(10));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let field = |entry: serde_json::Value| check(entry).unwrap_err().field;
        assert_eq!(
            field(
                serde_json::json!({"model_name": "g", "litellm_params": {"model": "openai/x", "api_base": "ftp://h"}})
            ),
            "litellm_params.api_base"
        );
        assert_eq!(
            field(
                serde_json::json!({"model_name": "g", "litellm_params": {"model": "mock/x", "rpm": "many"}})
            ),
            "litellm_params.rpm"
        );
        assert_eq!(
            field(
                serde_json::json!({"model_name": "g", "litellm_params": {"model": "mock/x", "timeout": -1}})
            ),
            "litellm_params.timeout"
        );
        assert_eq!(
            field(serde_json::json!({"model_name": " ", "litellm_params": {"model": "mock/x"}})),
            "model_name"
        );
        assert_eq!(
            field(
                serde_json::json!({"model_name": "g", "litellm_params": {"model": "openai/x", "api_key": "os.environ/NOPE"}})
            ),
            "litellm_params.api_key"
        );
    }

    #[test]
    fn azure_and_anthropic_read_litellms_environment_variables() {
        let env = |n: &str| match n {
            "AZURE_API_KEY" => Some("az-key".to_string()),
            "AZURE_API_VERSION" => Some("2024-06-01".to_string()),
            "AZURE_API_BASE" => Some("https://r.openai.azure.com".to_string()),
            "ANTHROPIC_API_KEY" => Some("sk-ant".to_string()),
            _ => None,
        };
        let c = Config::parse(
            Path::new("config.yaml"),
            "model_list:\n  - model_name: a\n    litellm_params: {model: azure/gpt}\n  - model_name: b\n    litellm_params: {model: azure/gpt, api_key: own, api_version: v1, api_base: 'https://o.openai.azure.com'}\n  - model_name: c\n    litellm_params: {model: anthropic/claude-x, cache_read_input_token_cost: 0.1}\n",
            &env,
        )
        .unwrap();
        let (a, b, c) = (&c.deployments[0], &c.deployments[1], &c.deployments[2]);
        assert_eq!(
            (a.api_key.as_deref(), a.api_version.as_deref()),
            (Some("az-key"), Some("2024-06-01"))
        );
        assert_eq!(&*a.base.as_ref().unwrap().host, "r.openai.azure.com");
        assert_eq!(
            (b.api_key.as_deref(), b.api_version.as_deref()),
            (Some("own"), Some("v1"))
        );
        assert_eq!(c.api_key.as_deref(), Some("sk-ant"));
        assert_eq!(c.base.as_ref().unwrap().url, "https://api.anthropic.com");
        assert_eq!(c.cache_read_input_token_cost, Some(0.1));
        assert!(
            parse("model_list:\n  - model_name: a\n    litellm_params: {model: azure/gpt}\n")
                .unwrap_err()
                .contains("api_base is required")
        );
    }

    #[test]
    fn bounds_every_number_of_an_entry() {
        let router = crate::router::RouterSettings::default();
        let env = |_: &str| None;
        for (params, info, field) in [
            (
                serde_json::json!({"timeout": 1e300}),
                serde_json::json!({}),
                "litellm_params.timeout",
            ),
            (
                serde_json::json!({"stream_timeout": 86401}),
                serde_json::json!({}),
                "litellm_params.stream_timeout",
            ),
            (
                serde_json::json!({"rpm": u64::MAX}),
                serde_json::json!({}),
                "litellm_params.rpm",
            ),
            (
                serde_json::json!({"tpm": 1_000_000_000_001u64}),
                serde_json::json!({}),
                "litellm_params.tpm",
            ),
            (
                serde_json::json!({"weight": 1e300}),
                serde_json::json!({}),
                "litellm_params.weight",
            ),
            (
                serde_json::json!({"weight": -1}),
                serde_json::json!({}),
                "litellm_params.weight",
            ),
            (
                serde_json::json!({"mock_latency_ms": u64::MAX}),
                serde_json::json!({}),
                "litellm_params.mock_latency_ms",
            ),
            (
                serde_json::json!({"mock_chunk_delay_ms": 3_600_001}),
                serde_json::json!({}),
                "litellm_params.mock_chunk_delay_ms",
            ),
            (
                serde_json::json!({"mock_error_status": 200}),
                serde_json::json!({}),
                "litellm_params.mock_error_status",
            ),
            (
                serde_json::json!({"input_cost_per_token": -1e-6}),
                serde_json::json!({}),
                "litellm_params.input_cost_per_token",
            ),
            (
                serde_json::json!({"output_cost_per_token": 1e9}),
                serde_json::json!({}),
                "litellm_params.output_cost_per_token",
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"input_cost_per_token": -1}),
                "model_info.input_cost_per_token",
            ),
        ] {
            let mut litellm_params = params.as_object().unwrap().clone();
            litellm_params.insert("model".into(), "mock/x".into());
            let entry = serde_json::json!({"model_name": "g", "litellm_params": litellm_params, "model_info": info});
            let err = super::deployment_from_json(&entry, &router, &env).unwrap_err();
            assert_eq!(err.field, field, "{entry}");
        }
        let entry = serde_json::json!({"model_name": "g", "litellm_params": {"model": "mock/x", "timeout": 86400, "weight": 2, "rpm": 1_000_000_000_000u64, "mock_error_status": 503}});
        let (dep, _) = super::deployment_from_json(&entry, &router, &env).unwrap();
        assert_eq!(dep.timeout, std::time::Duration::from_secs(86_400));
    }

    #[test]
    fn rejects_bad_values() {
        assert!(parse("model_list:\n  - model_name: a\n    litellm_params: {model: openai/x, api_base: ftp://h}\n").unwrap_err().contains("not http or https"));
        assert!(parse(
            "model_list:\n  - model_name: a\n    litellm_params: {model: openai/x, timeout: -1}\n"
        )
        .unwrap_err()
        .contains("timeout"));
        assert!(parse(
            "model_list:\n  - model_name: a\n    litellm_params: {model: hosted_vllm/x}\n"
        )
        .unwrap_err()
        .contains("api_base is required"));
    }
}
