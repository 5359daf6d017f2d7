//! Reloading `config.yaml` while serving (SIGHUP, or `POST /config/reload`):
//! the file is read and validated whole first; an invalid one is refused
//! with a log line naming the file, the entry and the problem, and nothing
//! changes. A valid one replaces, on the control plane:
//!
//! - the model list and router settings: one new router snapshot swapped
//!   atomically (`Models::reload_file`); requests and streams in flight
//!   keep the snapshot they started with, and deployments the reload left
//!   unchanged keep their stats, cooldowns and health;
//! - the server's and end users' rate limits (`Limiter::reload`);
//! - the alert targets (`Alerts::set_targets`).
//!
//! Everything else is read once at start-up: a reload that changes it
//! says so in a warning naming the setting, and it takes effect at the next
//! restart (the listening address and worker count are command-line
//! settings and never reloaded).

use crate::alerts::Alerts;
use crate::config::{Config, ServerLimits};
use crate::limits::Limiter;
use crate::models::FileReload;
use crate::models::Models;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// What is in force of the settings a reload cannot change.
#[derive(Debug, PartialEq)]
struct Fixed {
    database_url: Option<String>,
    master_key_hash: Option<[u8; 32]>,
    limits: ServerLimits,
    spool_dir: PathBuf,
    model_env_allowlist: Option<Vec<String>>,
    metrics: crate::metrics::MetricsSettings,
    health: crate::health::settings::HealthSettings,
    otel: crate::otel::OtelSettings,
    images: crate::upstream::fetch::ImageFetchSettings,
    virtual_keys: Vec<String>,
    team_defaults: crate::config::TeamDefaults,
    cache: Option<crate::cache::CacheSettings>,
    unpriced: (crate::spend::UnpricedModels, bool, Option<u64>),
    guardrails: String,
    spend_logs: crate::spend::SpendLogs,
    mock_testing_params: bool,
    enforced_params: crate::config::EnforcedParams,
    end_user_default_budget: Option<String>,
    budget_throttle: Option<f64>,
}

impl Fixed {
    fn of(config: &Config) -> Fixed {
        Fixed {
            database_url: config.database_url.clone(),
            master_key_hash: config
                .master_key
                .as_deref()
                .map(|k| Sha256::digest(k.as_bytes()).into()),
            limits: config.limits.clone(),
            spool_dir: config.spool_dir.clone(),
            model_env_allowlist: config.model_env_allowlist.clone(),
            metrics: config.metrics.clone(),
            health: config.health.clone(),
            otel: config.otel.clone(),
            images: config.images.clone(),
            virtual_keys: config
                .virtual_keys
                .iter()
                .map(|k| k.token.clone())
                .collect(),
            team_defaults: config.team_defaults.clone(),
            cache: config.cache.as_ref().map(|c| c.settings().clone()),
            unpriced: (
                config.unpriced_models,
                config.block_unpriced,
                config.estimated_output_tokens,
            ),
            guardrails: config.guardrails.source().to_string(),
            spend_logs: config.spend_logs,
            mock_testing_params: config.mock_testing_params,
            enforced_params: config.enforced_params.clone(),
            end_user_default_budget: config.end_user_default_budget.clone(),
            budget_throttle: config.budget_throttle,
        }
    }

    /// The settings that differ between `self` (in force) and `next`, by
    /// the name an operator finds in the file.
    fn changed(&self, next: &Fixed) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut check = |differs: bool, name: &'static str| {
            if differs {
                out.push(name);
            }
        };
        check(
            self.database_url != next.database_url,
            "general_settings.database_url (DATABASE_URL)",
        );
        check(
            self.master_key_hash != next.master_key_hash,
            "general_settings.master_key",
        );
        check(
            self.limits != next.limits,
            "gateway_settings server limits (timeouts, sizes, max_connections, general_settings.max_request_size_mb, general_settings.allowed_routes)",
        );
        check(
            self.spool_dir != next.spool_dir,
            "gateway_settings.spool_dir",
        );
        check(
            self.model_env_allowlist != next.model_env_allowlist,
            "gateway_settings.model_env_allowlist",
        );
        check(
            self.metrics != next.metrics,
            "metrics (litellm_settings callbacks, gateway_settings.metrics)",
        );
        check(
            self.health != next.health,
            "general_settings health checks (background_health_checks, health_check_interval, health_check_timeout)",
        );
        check(
            self.otel != next.otel,
            "traces (litellm_settings callbacks otel, OTEL_* variables)",
        );
        check(
            self.images != next.images,
            "image URL fetching (gateway_settings.image_url_fetch, litellm_settings.user_url_allowed_hosts, user_url_validation, MAX_IMAGE_URL_DOWNLOAD_SIZE_MB)",
        );
        check(
            self.virtual_keys != next.virtual_keys,
            "gateway_settings.virtual_keys",
        );
        check(
            self.team_defaults != next.team_defaults,
            "litellm_settings.default_team_params / default_team_settings",
        );
        check(
            self.cache != next.cache,
            "litellm_settings.cache / cache_params (the response cache)",
        );
        check(
            self.unpriced != next.unpriced,
            "gateway_settings.unpriced_models, litellm_settings.block_requests_for_models_without_pricing, default_estimated_output_tokens",
        );
        check(self.guardrails != next.guardrails, "guardrails");
        check(
            self.spend_logs != next.spend_logs,
            "general_settings.disable_spend_logs, disable_error_logs, store_prompts_in_spend_logs, spend_logs_prompt_storage, litellm_settings.turn_off_message_logging",
        );
        check(
            self.mock_testing_params != next.mock_testing_params,
            "general_settings.dangerously_allow_mock_testing_request_params",
        );
        check(
            self.enforced_params != next.enforced_params,
            "general_settings.enforced_params, service_account_settings",
        );
        check(
            self.end_user_default_budget != next.end_user_default_budget,
            "litellm_settings.max_end_user_budget_id",
        );
        check(
            self.budget_throttle != next.budget_throttle,
            "litellm_settings.budget_exceeded_throttle_percentage",
        );
        out
    }
}

/// What a reload did.
#[derive(Debug)]
pub struct ReloadReport {
    /// What happened to the file's deployments.
    pub models: FileReload,
    /// Settings that changed in the file but keep their start-up value.
    pub not_reloaded: Vec<&'static str>,
}

/// Reloads of one config file.
pub struct Reloader {
    path: PathBuf,
    fixed: Fixed,
    /// One reload at a time.
    running: tokio::sync::Mutex<()>,
}

impl Reloader {
    /// Reloads of the file `config` was read from, against its settings.
    pub fn new(config: &Config) -> Reloader {
        Reloader {
            path: config.source.clone(),
            fixed: Fixed::of(config),
            running: tokio::sync::Mutex::const_new(()),
        }
    }

    /// Reads the file again and applies it to the rate limiter, the alert
    /// targets and the model set; run it on the control plane. `Err` (the
    /// file, the entry, the problem) when the file is invalid: nothing
    /// changed.
    pub async fn reload(
        &self,
        limiter: &Limiter,
        alerts: &Alerts,
        models: &Models,
    ) -> Result<ReloadReport, String> {
        let _one = self.running.lock().await;
        let config = match Config::reload(&self.path) {
            Ok(config) => config,
            Err(e) => {
                tracing::error!(error = %e, "config reload refused; the running config keeps serving");
                return Err(e.to_string());
            }
        };
        for warning in &config.warnings {
            tracing::warn!("{}: {warning}", self.path.display());
        }
        for problem in config.unsupported() {
            tracing::error!("{}: {problem}", self.path.display());
        }
        let mut not_reloaded = self.fixed.changed(&Fixed::of(&config));
        if !limiter.reload(&config.rate_limits) {
            not_reloaded.push(
                "gateway_settings.rate_limits (mode, Redis, window, reservation, breaker, lease; server and end_user limits are reloaded)",
            );
        }
        for setting in &not_reloaded {
            tracing::warn!(
                setting,
                "config reload: this setting changed but is not reloadable; it takes effect at the next restart"
            );
        }
        alerts.set_targets(config.alerts);
        let models = models.reload_file(config.deployments, config.router).await;
        tracing::info!(
            file = %self.path.display(),
            kept = models.kept,
            changed = models.changed,
            added = models.added,
            removed = models.removed,
            "config reloaded"
        );
        Ok(ReloadReport {
            models,
            not_reloaded,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(text: &str) -> Fixed {
        Fixed::of(&Config::parse(std::path::Path::new("c.yaml"), text, &|_| None).unwrap())
    }

    #[test]
    fn the_unpriced_and_estimate_settings_are_reported_as_needing_a_restart() {
        let before = fixed("");
        for text in [
            "gateway_settings: {unpriced_models: free}\n",
            "litellm_settings: {block_requests_for_models_without_pricing: true}\n",
            "litellm_settings: {default_estimated_output_tokens: 64}\n",
        ] {
            let changed = before.changed(&fixed(text));
            assert_eq!(changed.len(), 1, "{text}: {changed:?}");
            assert!(changed[0].contains("unpriced_models"), "{changed:?}");
        }
        assert!(before.changed(&fixed("")).is_empty());
    }

    #[test]
    fn the_spend_log_switches_are_reported_as_needing_a_restart() {
        let before = fixed("");
        for text in [
            "general_settings: {disable_spend_logs: true}\n",
            "general_settings: {disable_error_logs: true}\n",
        ] {
            let changed = before.changed(&fixed(text));
            assert_eq!(
                changed,
                ["general_settings.disable_spend_logs, disable_error_logs, store_prompts_in_spend_logs, spend_logs_prompt_storage, litellm_settings.turn_off_message_logging"],
                "{text}"
            );
        }
        assert!(before
            .changed(&fixed("general_settings: {disable_spend_logs: false}\n"))
            .is_empty());
    }

    #[test]
    fn the_mock_testing_switch_is_reported_as_needing_a_restart() {
        let on = "general_settings: {dangerously_allow_mock_testing_request_params: true}\n";
        assert_eq!(
            fixed("").changed(&fixed(on)),
            ["general_settings.dangerously_allow_mock_testing_request_params"]
        );
    }

    #[test]
    fn the_enforced_params_are_reported_as_needing_a_restart() {
        let set = "general_settings: {enforced_params: [user]}\n";
        assert_eq!(
            fixed("").changed(&fixed(set)),
            ["general_settings.enforced_params, service_account_settings"]
        );
    }

    #[test]
    fn the_end_user_default_budget_and_throttle_are_reported_as_needing_a_restart() {
        let set = "litellm_settings: {max_end_user_budget_id: tier-1}\n";
        assert_eq!(
            fixed("").changed(&fixed(set)),
            ["litellm_settings.max_end_user_budget_id"]
        );
        let set = "litellm_settings: {budget_exceeded_throttle_percentage: 0.5}\n";
        assert_eq!(
            fixed("").changed(&fixed(set)),
            ["litellm_settings.budget_exceeded_throttle_percentage"]
        );
    }
}
