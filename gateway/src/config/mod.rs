//! Configuration: LiteLLM's `config.yaml`, resolved and validated into the
//! immutable [`Config`] the data plane reads.

mod audit;
mod enforced;
mod env_refs;
mod file;
mod proxy_budget;
mod stored;
mod stored_reload;
mod team_admin;
mod team_defaults;
mod validate;

pub use enforced::EnforcedParams;
pub use file::{ConfigFile, GatewaySettings, GeneralSettings};
pub use proxy_budget::ProxyBudget;
pub use stored::{Applied, CacheChange, FileGeneral, StoredBasis};
pub use stored_reload::StoredReload;
pub use team_admin::TeamAdminFields;
pub use team_defaults::TeamDefaults;
pub use validate::{deployment_from_json, EntryError, ServerLimits};

use crate::deployment::Deployment;
use std::path::{Path, PathBuf};

/// A configuration that failed to load; the message names the file, the entry
/// and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The config path.
        file: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The YAML does not parse or does not have LiteLLM's shape.
    #[error("{file}: {message}")]
    Syntax {
        /// The config path.
        file: PathBuf,
        /// Parser message with its location.
        message: String,
    },
    /// An `os.environ/NAME` reference names an unset variable.
    #[error("{file}: {path}: environment variable {var} is not set")]
    MissingEnv {
        /// The config path.
        file: PathBuf,
        /// Where the reference is.
        path: String,
        /// The variable.
        var: String,
    },
    /// A value is present but wrong.
    #[error("{file}: {entry}: {problem}")]
    Invalid {
        /// The config path.
        file: PathBuf,
        /// The entry, e.g. `model_list[2] (model_name "gpt-4o")`.
        entry: String,
        /// What is wrong.
        problem: String,
    },
}

/// The validated configuration.
#[derive(Debug)]
pub struct Config {
    /// The file it was read from.
    pub source: PathBuf,
    /// Every deployment, in file order.
    pub deployments: Vec<Deployment>,
    /// The admin key, if set.
    pub master_key: Option<String>,
    /// HTTP server limits.
    pub limits: ServerLimits,
    /// `router_settings` as written.
    pub router_settings: Option<serde_yaml::Value>,
    /// The router's settings, from `router_settings` and `litellm_settings`.
    pub router: crate::router::RouterSettings,
    /// `litellm_settings`, kept for later features.
    pub litellm_settings: Option<serde_yaml::Value>,
    /// What the file's `general_settings` says about LiteLLM's settings
    /// stored in the database ([`Config::apply_stored`]).
    pub file_general: FileGeneral,
    /// `DATABASE_URL` or `general_settings.database_url`.
    pub database_url: Option<String>,
    /// Seals and opens the params of models stored in the database, keyed
    /// from `LITELLM_SALT_KEY` (else the master key), writing with
    /// `general_settings.encryption_algorithm` (LiteLLM's names).
    pub model_cipher: crate::store::cipher::ParamCipher,
    /// Where spend rows wait while the database is down.
    pub spool_dir: PathBuf,
    /// Keys declared in the file, hashed, to seed the store at start-up.
    pub virtual_keys: Vec<crate::store::KeyRecord>,
    /// `gateway_settings.model_env_allowlist`.
    pub model_env_allowlist: Option<Vec<String>>,
    /// `gateway_settings.unpriced_models`.
    pub unpriced_models: crate::spend::UnpricedModels,
    /// `litellm_settings.block_requests_for_models_without_pricing`: every
    /// caller is refused a model without a price.
    pub block_unpriced: bool,
    /// `litellm_settings.default_estimated_output_tokens`: the output a
    /// request without `max_tokens` reserves against budgets when neither
    /// its key nor its team says.
    pub estimated_output_tokens: Option<u64>,
    /// `litellm_settings.max_end_user_budget_id`: the budget row of end
    /// users without one of their own, when their key names none.
    pub end_user_default_budget: Option<String>,
    /// `litellm_settings.budget_exceeded_throttle_percentage`: the share
    /// of its rpm/tpm limits a key with `throttle_on_budget_exceeded` keeps
    /// past its budget.
    pub budget_throttle: Option<f64>,
    /// `general_settings.enforced_params` and
    /// `service_account_settings.enforced_params`: parameters every LLM
    /// request must carry.
    pub enforced_params: EnforcedParams,
    /// `general_settings.dangerously_allow_mock_testing_request_params`:
    /// LiteLLM's mock testing request parameters are acted on (else
    /// refused).
    pub mock_testing_params: bool,
    /// `litellm_settings.max_budget` and `budget_duration`: the proxy-wide
    /// budget every LLM request counts against.
    pub proxy_budget: Option<ProxyBudget>,
    /// Which spend-log rows are kept (`general_settings.disable_spend_logs`,
    /// `disable_error_logs`).
    pub spend_logs: crate::spend::SpendLogs,
    /// How often open batches are polled (LiteLLM's
    /// `general_settings.proxy_batch_polling_interval`, else
    /// `PROXY_BATCH_POLLING_INTERVAL`, else an hour); `None` when
    /// `PROXY_BATCH_POLLING_ENABLED` is `false`.
    pub batch_polling: Option<std::time::Duration>,
    /// Where budget alerts are POSTed (`general_settings.alerting`).
    pub alerts: Vec<crate::alerts::AlertTarget>,
    /// The rate limiter's settings.
    pub rate_limits: crate::limits::LimitSettings,
    /// Prometheus metrics.
    pub metrics: crate::metrics::MetricsSettings,
    /// Deployment health checks.
    pub health: crate::health::settings::HealthSettings,
    /// OpenTelemetry traces.
    pub otel: crate::otel::OtelSettings,
    /// Fetching images named by URL.
    pub images: crate::upstream::fetch::ImageFetchSettings,
    /// Defaults of teams `/team/new` creates.
    pub team_defaults: TeamDefaults,
    /// The team settings team admins may change
    /// (`general_settings.team_admin_editable_team_fields`).
    pub team_admin: TeamAdminFields,
    /// The admin console's login (`UI_USERNAME`, `UI_PASSWORD`, else the
    /// master key), held as hashes.
    pub console: crate::auth::Console,
    /// The response cache (`litellm_settings.cache`), when on.
    pub cache: Option<std::sync::Arc<crate::cache::Cache>>,
    /// The top-level `guardrails:` section, compiled.
    pub guardrails: std::sync::Arc<crate::guardrails::Guardrails>,
    /// Non-fatal findings (unknown keys), logged at start.
    pub warnings: Vec<String>,
    /// Where LiteLLM's provider pass-through routes go, and with which key.
    pub pass_through: std::sync::Arc<crate::providers::passthrough::PassThroughTargets>,
}

impl Config {
    /// Reads, resolves and validates a config file, reading `os.environ/`
    /// references from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = Self::read(path)?;
        Self::parse(path, &text, &|name| std::env::var(name).ok())
    }

    /// One message per deployment whose provider LiteLLM knows and this
    /// gateway does not serve, naming its entry and provider: logged as
    /// errors at start and on reload (the deployment serves as unsupported).
    pub fn unsupported(&self) -> Vec<String> {
        self.deployments
            .iter()
            .enumerate()
            .filter(|(_, d)| d.provider == crate::deployment::ProviderKind::Unsupported)
            .map(|(i, d)| {
                format!(
                    "model_list[{i}] (model_name \"{}\"): {}",
                    d.group,
                    unsupported_note(d)
                )
            })
            .collect()
    }

    /// Reads a config file again while the process serves: as [`Config::load`],
    /// except that `environment_variables` are not exported (changing the
    /// environment of a running multi-threaded process is unsound); the
    /// file's own `os.environ/` references see them beside the environment.
    pub fn reload(path: &Path) -> Result<Config, ConfigError> {
        let text = Self::read(path)?;
        let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap_or_default();
        let block = doc
            .get("environment_variables")
            .and_then(|v| v.as_mapping());
        let from_block = |name: &str| {
            let value = block?.get(name)?;
            match value {
                serde_yaml::Value::String(s) => Some(s.clone()),
                serde_yaml::Value::Number(n) => Some(n.to_string()),
                serde_yaml::Value::Bool(b) => Some(b.to_string()),
                _ => None,
            }
        };
        let lookup = |name: &str| std::env::var(name).ok().or_else(|| from_block(name));
        Self::parse_with(path, &text, &lookup, false)
    }

    fn read(path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: path.to_path_buf(),
            source,
        })
    }

    /// Parses config text; `lookup` reads environment variables.
    pub fn parse(
        path: &Path,
        text: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        Self::parse_with(path, text, lookup, true)
    }

    /// Parses config text, exporting `environment_variables` when `export`.
    fn parse_with(
        path: &Path,
        text: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
        export: bool,
    ) -> Result<Config, ConfigError> {
        let syntax = |message: String| ConfigError::Syntax {
            file: path.to_path_buf(),
            message,
        };
        let mut doc: serde_yaml::Value = if text.trim().is_empty() {
            serde_yaml::Value::Mapping(Default::default())
        } else {
            serde_yaml::from_str(text).map_err(|e| syntax(e.to_string()))?
        };
        let mut warnings = if export {
            export_environment_block(&doc)
        } else {
            Vec::new()
        };
        env_refs::resolve(&mut doc, lookup).map_err(|m| ConfigError::MissingEnv {
            file: path.to_path_buf(),
            path: m.path,
            var: m.var,
        })?;
        let parsed: ConfigFile = serde_ignored::deserialize(doc, |unknown| {
            warnings.push(format!("unknown config key `{unknown}` ignored"));
        })
        .map_err(|e| syntax(e.to_string()))?;
        validate::validate(path, parsed, lookup, warnings)
    }
}

/// Why `dep` (of an unsupported provider) will refuse every request.
pub fn unsupported_note(dep: &crate::deployment::Deployment) -> String {
    format!(
        "provider \"{}\" is not supported by this gateway (LiteLLM serves it); deployment {} starts as unsupported: /health and /model/info report it, and requests routed to it get a 400 (fallbacks apply)",
        dep.provider_name, dep.id
    )
}

/// LiteLLM exports `environment_variables` before resolving references.
/// A name or value the environment cannot hold (empty, `=` or NUL in the
/// name, NUL in the value) is skipped with a warning.
fn export_environment_block(doc: &serde_yaml::Value) -> Vec<String> {
    let mut warnings = Vec::new();
    let Some(block) = doc
        .get("environment_variables")
        .and_then(|v| v.as_mapping())
    else {
        return warnings;
    };
    for (k, v) in block {
        let value = match v {
            serde_yaml::Value::String(s) => s.clone(),
            serde_yaml::Value::Number(n) => n.to_string(),
            serde_yaml::Value::Bool(b) => b.to_string(),
            _ => continue,
        };
        if let Some(key) = k.as_str() {
            if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
                warnings.push(format!(
                    "environment_variables.{key:?} ignored: not a valid environment variable"
                ));
            } else if std::env::var_os(key).is_none() {
                std::env::set_var(key, value);
            }
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_names_the_process_cannot_hold_are_warnings_not_panics() {
        let text = "environment_variables:\n  \"A=B\": x\n  \"\": y\n  \"NUL\\0\": z\n  GATEWAY_TEST_NUL_VALUE: \"a\\0b\"\n  GATEWAY_TEST_EXPORTED: ok\n";
        let config = Config::parse(Path::new("t.yaml"), text, &|_| None).unwrap();
        let ignored = config
            .warnings
            .iter()
            .filter(|w| w.contains("not a valid environment variable"))
            .count();
        assert_eq!(ignored, 4, "{:?}", config.warnings);
        assert_eq!(std::env::var("GATEWAY_TEST_EXPORTED").as_deref(), Ok("ok"));
    }
}
