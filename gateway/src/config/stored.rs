//! LiteLLM's settings kept in its database, applied at start-up as LiteLLM
//! applies them: only with `store_model_in_db` (the config's
//! `general_settings`, `STORE_MODEL_IN_DB`, or the stored
//! `general_settings` row), each `LiteLLM_Config` section merged key by key
//! under the file (a key the file declares wins), and the
//! `LiteLLM_CacheConfig` row (the cache settings LiteLLM's UI saves)
//! turning the response cache on with its parameters, over the file's, when
//! `general_settings.supported_db_objects` does not leave `cache_settings`
//! out.
//!
//! Applied: what builds the response cache (`litellm_settings.cache` and
//! `cache_params`, the `LiteLLM_CacheConfig` row). Every other stored
//! setting is named at start-up: refused when the config audit refuses it
//! (ignoring it would change who may spend or what reaches a model), a
//! warning otherwise. A stored cache on a Redis other than the one this
//! gateway's limiter resolves is refused: the cache only uses that Redis.

use super::audit;
use super::Config;
use crate::store::settings::StoredSettings;
use serde_json::{Map, Value};

/// What the file's `general_settings` says about stored settings.
#[derive(Debug, Clone, Default)]
pub struct FileGeneral {
    /// Every key the file's `general_settings` declares.
    pub declared: Vec<String>,
    /// `store_model_in_db`, when the file declares it.
    pub store_model_in_db: Option<bool>,
    /// `supported_db_objects`, when the file declares a list.
    pub supported_db_objects: Option<Vec<String>>,
    /// How often the stored cache settings are read again while serving
    /// (`proxy_config_reload_interval_seconds`, else
    /// `PROXY_CONFIG_RELOAD_INTERVAL_SECONDS`, else 30 s: LiteLLM's).
    pub reload_interval: std::time::Duration,
}

/// What applying the stored settings reads of the file's config, kept to
/// apply a `LiteLLM_CacheConfig` row read again while serving.
#[derive(Debug, Clone)]
pub struct StoredBasis {
    file_general: FileGeneral,
    litellm_settings: Option<serde_yaml::Value>,
    router_settings: Option<serde_yaml::Value>,
    rate_limits: crate::limits::LimitSettings,
}

/// The response cache applying stored settings leaves in force: `None`
/// when they do not touch it, `Some(None)` when they turn it off.
pub type CacheChange = Option<Option<std::sync::Arc<crate::cache::Cache>>>;

/// What applying the stored settings did, to log.
#[derive(Debug, Default, PartialEq)]
pub struct Applied {
    /// What was applied, or why nothing was (info).
    pub notes: Vec<String>,
    /// Stored settings not applied (warnings).
    pub warnings: Vec<String>,
}

/// The `cache_params` members that name a Redis connection.
const CONNECTION: &[&str] = &["host", "port", "url", "redis_startup_nodes"];

/// The table of the cache settings LiteLLM's UI saves.
const CACHE_TABLE: &str = "LiteLLM_CacheConfig";

impl Config {
    /// Applies LiteLLM's stored settings (`stored`, read from the database
    /// at start-up); `store_model_in_db_env` is `STORE_MODEL_IN_DB`. An
    /// error names the stored row and the setting that stops the start.
    pub fn apply_stored(
        &mut self,
        stored: &StoredSettings,
        store_model_in_db_env: Option<&str>,
    ) -> Result<Applied, String> {
        let (applied, cache) = self.stored_basis().apply(stored, store_model_in_db_env)?;
        if let Some(cache) = cache {
            self.cache = cache;
        }
        Ok(applied)
    }

    /// What [`StoredBasis::apply`] reads of this config.
    pub fn stored_basis(&self) -> StoredBasis {
        StoredBasis {
            file_general: self.file_general.clone(),
            litellm_settings: self.litellm_settings.clone(),
            router_settings: self.router_settings.clone(),
            rate_limits: self.rate_limits.clone(),
        }
    }
}

impl StoredBasis {
    /// How often the stored cache settings are read again while serving.
    pub fn reload_interval(&self) -> std::time::Duration {
        self.file_general.reload_interval
    }

    /// Applies LiteLLM's stored settings (`stored`) over the file's;
    /// `store_model_in_db_env` is `STORE_MODEL_IN_DB`. Returns what to log
    /// and the response cache they leave in force; an error names the
    /// stored row and the setting that cannot be applied.
    pub fn apply(
        &self,
        stored: &StoredSettings,
        store_model_in_db_env: Option<&str>,
    ) -> Result<(Applied, CacheChange), String> {
        let mut out = Applied::default();
        if stored == &StoredSettings::default() {
            return Ok((out, None));
        }
        let general = stored.section("general_settings");
        let from_row = general
            .and_then(|g| g.get("store_model_in_db"))
            .is_some_and(truthy);
        let on = self.file_general.store_model_in_db.unwrap_or(false)
            || store_model_in_db_env.is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || from_row;
        if !on {
            out.notes.push(format!(
                "LiteLLM's stored settings ({}) are not applied: store_model_in_db is off, and \
                 LiteLLM reads them only with it on",
                present(stored)
            ));
            return Ok((out, None));
        }
        self.stored_prompts(stored, &mut out)?;
        // The file's litellm_settings, with what the stored row adds.
        let mut litellm = match &self.litellm_settings {
            Some(serde_yaml::Value::Mapping(m)) => m.clone(),
            _ => serde_yaml::Mapping::new(),
        };
        let mut cache_source: Option<String> = None;
        for (section, row) in &stored.config {
            for (key, value) in row {
                if value.is_null() {
                    continue;
                }
                let declared = match section.as_str() {
                    "litellm_settings" => litellm.contains_key(key.as_str()),
                    "general_settings" => self.file_general.declared.iter().any(|k| k == key),
                    "router_settings" => self
                        .router_settings
                        .as_ref()
                        .and_then(|r| r.get(key.as_str()))
                        .is_some(),
                    _ => false,
                };
                // A key the file declares is the file's (LiteLLM's rule).
                if declared {
                    if section == "litellm_settings"
                        && matches!(key.as_str(), "cache" | "cache_params")
                    {
                        out.notes.push(format!(
                            "LiteLLM_Config row {section}: {key} is set in the config file, \
                             which wins (as in LiteLLM)"
                        ));
                    }
                    continue;
                }
                match (section.as_str(), key.as_str()) {
                    ("litellm_settings", "cache" | "cache_params") => {
                        litellm.insert(key.as_str().into(), yaml(value)?);
                        cache_source = Some(format!("LiteLLM_Config row litellm_settings ({key})"));
                    }
                    ("general_settings", "store_model_in_db" | "supported_db_objects") => {}
                    ("general_settings", "enforced_params" | "service_account_settings")
                        if !audit::asks_for_nothing(&yaml(value)?) =>
                    {
                        return Err(format!(
                            "LiteLLM_Config row general_settings: {key} is applied by LiteLLM \
                             (store_model_in_db) and read by this gateway from the config file \
                             only, so requests without those parameters would be served; copy it \
                             into the config file's general_settings"
                        ));
                    }
                    ("environment_variables", _) => out.warnings.push(format!(
                        "LiteLLM_Config row environment_variables: {key} is not exported by this \
                         gateway (LiteLLM exports it with store_model_in_db); set it in the \
                         environment or the config file"
                    )),
                    _ => not_applied(section, key, value, &mut out)?,
                }
            }
        }
        if let Some(params) = &stored.cache {
            let allowed = self
                .file_general
                .supported_db_objects
                .clone()
                .or_else(|| list(general?.get("supported_db_objects")?))
                .is_none_or(|l| l.iter().any(|o| o == "cache_settings"));
            if allowed {
                let params: Map<String, Value> = params
                    .iter()
                    .filter(|(k, _)| k.as_str() != "redis_type")
                    .map(|(k, v)| (k.clone(), typed(k, v)))
                    .collect();
                litellm.insert("cache".into(), serde_yaml::Value::Bool(true));
                litellm.insert("cache_params".into(), yaml(&Value::Object(params))?);
                cache_source = Some(format!("{CACHE_TABLE} row cache_config"));
            } else {
                out.notes.push(format!(
                    "{CACHE_TABLE} is not applied: general_settings.supported_db_objects does not \
                     list cache_settings"
                ));
            }
        }
        let Some(source) = cache_source else {
            return Ok((out, None));
        };
        let doc = serde_yaml::Value::Mapping(litellm);
        let settings = crate::cache::CacheSettings::from_litellm(Some(&doc), &mut out.warnings)
            .map_err(|e| format!("{source}: {e}"))?;
        let Some(settings) = settings else {
            out.notes
                .push(format!("{source}: the response cache is off"));
            return Ok((out, Some(None)));
        };
        let params = doc.get("cache_params");
        if settings.backend == crate::cache::Backend::Redis {
            self.same_redis(params)
                .map_err(|e| format!("{source}: {e}"))?;
        }
        let limits = &self.rate_limits;
        let redis = limits.redis_url.as_deref().map(|url| {
            (
                url,
                limits.redis_cluster.as_slice(),
                limits.redis_timeout,
                limits.breaker,
            )
        });
        let backend = settings.backend;
        let cache =
            crate::cache::Cache::new(settings, redis).map_err(|e| format!("{source}: {e}"))?;
        out.notes.push(format!(
            "{source}: the response cache is on ({}), as LiteLLM applies it; read again every {} s \
             (proxy_config_reload_interval_seconds, as LiteLLM)",
            match backend {
                crate::cache::Backend::Local => "local",
                crate::cache::Backend::Redis => "redis",
            },
            self.reload_interval().as_secs()
        ));
        Ok((out, Some(Some(std::sync::Arc::new(cache)))))
    }

    /// Refuses stored prompts (`LiteLLM_PromptTable` rows) that LiteLLM
    /// loads with `store_model_in_db` (unless `supported_db_objects`, the
    /// file's else the stored row's, leaves `prompts` out): it applies
    /// them to requests naming a `prompt_id`, which this gateway would
    /// serve without them. The config's `prompts:` is refused the same way.
    fn stored_prompts(&self, stored: &StoredSettings, out: &mut Applied) -> Result<(), String> {
        if stored.prompt_rows == 0 {
            return Ok(());
        }
        let general = stored.section("general_settings");
        let loaded = self
            .file_general
            .supported_db_objects
            .clone()
            .or_else(|| list(general?.get("supported_db_objects")?))
            .is_none_or(|l| l.iter().any(|o| o == "prompts"));
        let what = format!(
            "LiteLLM_PromptTable holds {} prompt row(s) (prompt_id {})",
            stored.prompt_rows,
            stored.prompt_ids.join(", ")
        );
        if !loaded {
            out.notes.push(format!(
                "{what}: not loaded, as general_settings.supported_db_objects leaves prompts out \
                 (LiteLLM does not load them either)"
            ));
            return Ok(());
        }
        Err(format!(
            "{what}, which LiteLLM loads with store_model_in_db and applies to requests naming a \
             prompt_id; this gateway does not apply stored prompts, so those requests would \
             reach the model without them. Delete the rows, or set \
             general_settings.supported_db_objects to a list without prompts"
        ))
    }

    /// Whether the Redis stored `cache_params` name is the one this
    /// gateway's limiter resolved (the only one its cache uses).
    fn same_redis(&self, params: Option<&serde_yaml::Value>) -> Result<(), String> {
        let named = |k: &str| params.and_then(|p| p.get(k)).filter(|v| !v.is_null());
        if CONNECTION.iter().all(|k| named(k).is_none()) {
            // No connection of its own: the one the environment names, as
            // the limiter resolves it.
            return Ok(());
        }
        let ours = self.rate_limits.redis_url.as_deref().and_then(host_port);
        let theirs = match named("url").and_then(serde_yaml::Value::as_str) {
            Some(url) => host_port(url),
            None => match named("redis_startup_nodes") {
                Some(nodes) => {
                    let first = nodes.as_sequence().and_then(|s| s.first());
                    let host = first.and_then(|n| n.get("host")).and_then(|h| h.as_str());
                    let port = first.and_then(|n| n.get("port")).and_then(port_of);
                    host.zip(port).map(|(h, p)| (h.to_string(), p))
                }
                None => {
                    let host = named("host")
                        .and_then(|h| h.as_str())
                        .unwrap_or("localhost");
                    let port = named("port").map_or(Some(6379), port_of);
                    port.map(|p| (host.to_string(), p))
                }
            },
        };
        let cluster = &self.rate_limits.redis_cluster;
        let matches = match (&ours, &theirs) {
            (Some(ours), Some(theirs)) => {
                ours == theirs
                    || cluster
                        .iter()
                        .any(|n| *n == format!("{}:{}", theirs.0, theirs.1))
            }
            _ => false,
        };
        if matches {
            return Ok(());
        }
        let show = |hp: &Option<(String, u16)>| match hp {
            Some((h, p)) => format!("{h}:{p}"),
            None => "none".into(),
        };
        Err(format!(
            "the stored cache uses the Redis at {}, and this gateway's cache uses only the Redis \
             its config resolves ({}): set cache_params (or router_settings.redis_*) in the \
             config file; a response cache LiteLLM would use is never ignored in silence",
            show(&theirs),
            show(&ours)
        ))
    }
}

/// A stored setting this gateway does not apply: refused as the config
/// audit refuses it in the file, else a warning.
fn not_applied(section: &str, key: &str, value: &Value, out: &mut Applied) -> Result<(), String> {
    let as_yaml = yaml(value)?;
    if let Some(why) = audit::refusal(section, key, &as_yaml) {
        return Err(format!(
            "LiteLLM_Config row {section}: {key} is applied by LiteLLM (store_model_in_db) and \
             not by this gateway: {why}; remove it from the row, or set what this gateway \
             supports in the config file"
        ));
    }
    if !audit::asks_for_nothing(&as_yaml) {
        out.warnings.push(format!(
            "LiteLLM_Config row {section}: {key} is not applied by this gateway (LiteLLM applies \
             it with store_model_in_db); set it in the config file"
        ));
    }
    Ok(())
}

/// Which stored rows there are, for a message.
fn present(stored: &StoredSettings) -> String {
    let mut names: Vec<String> = stored
        .config
        .iter()
        .map(|(s, _)| format!("LiteLLM_Config row {s}"))
        .collect();
    if stored.cache.is_some() {
        names.push(format!("{CACHE_TABLE} row cache_config"));
    }
    if stored.prompt_rows > 0 {
        names.push("LiteLLM_PromptTable".to_string());
    }
    names.join(", ")
}

/// LiteLLM's reading of a stored flag: `true`, or the text `true` in any case.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::String(s) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

/// A list of strings.
fn list(v: &Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// A stored cache parameter as the config file would hold it: LiteLLM's
/// UI saves every field as text (sealed, then opened), so numbers and flags
/// come back as strings.
fn typed(key: &str, v: &Value) -> Value {
    let Value::String(s) = v else {
        return v.clone();
    };
    let numeric = matches!(
        key,
        "port"
            | "ttl"
            | "default_in_memory_ttl"
            | "default_in_redis_ttl"
            | "max_size_in_memory"
            | "max_size_per_item"
            | "max_memory_mb"
            | "single_flight_timeout"
    );
    if numeric {
        if let Ok(n) = s.trim().parse::<u64>() {
            return Value::from(n);
        }
        if let Some(n) = s
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            return Value::Number(n);
        }
    }
    if key == "ssl" && (s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false")) {
        return Value::Bool(s.eq_ignore_ascii_case("true"));
    }
    v.clone()
}

fn yaml(v: &Value) -> Result<serde_yaml::Value, String> {
    serde_yaml::to_value(v).map_err(|e| format!("a stored setting does not convert: {e}"))
}

fn port_of(v: &serde_yaml::Value) -> Option<u16> {
    match v {
        serde_yaml::Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        serde_yaml::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A Redis URL's host and port (6379 when it names none).
fn host_port(url: &str) -> Option<(String, u16)> {
    let url = url::Url::parse(url).ok()?;
    let host = url.host_str()?.trim_matches(['[', ']']).to_string();
    Some((host, url.port().unwrap_or(6379)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn config(yaml: &str) -> Config {
        Config::parse(Path::new("c.yaml"), yaml, &|_| None).unwrap()
    }

    fn stored(config: &[(&str, Value)], cache: Option<Value>) -> StoredSettings {
        StoredSettings {
            config: config
                .iter()
                .map(|(s, v)| (s.to_string(), v.as_object().unwrap().clone()))
                .collect(),
            cache: cache.map(|c| c.as_object().unwrap().clone()),
            ..Default::default()
        }
    }

    #[test]
    fn stored_prompts_stop_the_start_where_litellm_loads_them() {
        let prompts = StoredSettings {
            prompt_rows: 2,
            prompt_ids: vec!["greeter".into()],
            ..Default::default()
        };
        // Not loaded without store_model_in_db.
        let mut c = config(&format!("{BASE}}}\n"));
        let out = c.apply_stored(&prompts, None).unwrap();
        assert!(out.notes[0].contains("LiteLLM_PromptTable"), "{out:?}");
        let mut on = config(&format!("{BASE}, store_model_in_db: true}}\n"));
        let err = on.apply_stored(&prompts, None).unwrap_err();
        assert!(
            err.contains("LiteLLM_PromptTable") && err.contains("greeter"),
            "{err}"
        );
        let err = c.apply_stored(&prompts, Some("True")).unwrap_err();
        assert!(err.contains("prompt_id"), "{err}");
        // Left out by supported_db_objects, the file's or the stored row's.
        let mut only_models = config(&format!(
            "{BASE}, store_model_in_db: true, supported_db_objects: [models]}}\n"
        ));
        let out = only_models.apply_stored(&prompts, None).unwrap();
        assert!(
            out.notes.iter().any(|n| n.contains("not loaded")),
            "{out:?}"
        );
        let row = json!({"store_model_in_db": true, "supported_db_objects": ["models"]});
        let with_row = StoredSettings {
            config: vec![("general_settings".into(), row.as_object().unwrap().clone())],
            ..prompts.clone()
        };
        assert!(c.apply_stored(&with_row, None).is_ok());
        let row = json!({"store_model_in_db": true, "supported_db_objects": ["prompts"]});
        let with_row = StoredSettings {
            config: vec![("general_settings".into(), row.as_object().unwrap().clone())],
            ..prompts
        };
        assert!(c.apply_stored(&with_row, None).is_err());
    }

    const BASE: &str = "model_list: []\ngeneral_settings: {master_key: sk-1";

    #[test]
    fn nothing_applies_without_store_model_in_db() {
        let mut c = config(&format!("{BASE}}}\n"));
        let s = stored(&[], Some(json!({"type": "local"})));
        let out = c.apply_stored(&s, None).unwrap();
        assert!(c.cache.is_none());
        assert!(
            out.notes[0].contains("LiteLLM_CacheConfig")
                && out.notes[0].contains("store_model_in_db")
        );
        // The env, the file or the stored general_settings turn it on.
        for (yaml, env, general) in [
            (format!("{BASE}}}\n"), Some("True"), json!({})),
            (
                format!("{BASE}, store_model_in_db: true}}\n"),
                None,
                json!({}),
            ),
            (
                format!("{BASE}}}\n"),
                None,
                json!({"store_model_in_db": "true"}),
            ),
        ] {
            let mut c = config(&yaml);
            let s = stored(
                &[("general_settings", general)],
                Some(json!({"type": "local"})),
            );
            c.apply_stored(&s, env).unwrap();
            assert!(c.cache.is_some(), "{yaml} {env:?}");
        }
    }

    #[test]
    fn the_cache_row_wins_over_the_file_and_its_text_is_typed() {
        let mut c = config(&format!(
            "{BASE}, store_model_in_db: true}}\nlitellm_settings: {{cache: true, cache_params: {{type: local, ttl: 5}}}}\n"
        ));
        let s = stored(
            &[],
            Some(json!({"type": "local", "ttl": "30", "namespace": "db", "redis_type": "node"})),
        );
        let out = c.apply_stored(&s, None).unwrap();
        let settings = c.cache.as_ref().unwrap().settings();
        assert_eq!(settings.ttl, Some(std::time::Duration::from_secs(30)));
        assert_eq!(settings.namespace.as_deref(), Some("db"));
        assert!(out.notes.iter().any(|n| n.contains("LiteLLM_CacheConfig")));
        // Listed out by supported_db_objects: not applied.
        let mut c = config(&format!(
            "{BASE}, store_model_in_db: true, supported_db_objects: [models]}}\n"
        ));
        let out = c.apply_stored(&s, None).unwrap();
        assert!(c.cache.is_none());
        assert!(out.notes[0].contains("supported_db_objects"));
    }

    #[test]
    fn the_litellm_settings_row_fills_what_the_file_leaves_out() {
        let row = json!({"cache": true, "cache_params": {"type": "local", "namespace": "row"},
            "num_retries": 3, "json_logs": false});
        let mut c = config(&format!("{BASE}, store_model_in_db: true}}\n"));
        let out = c
            .apply_stored(&stored(&[("litellm_settings", row.clone())], None), None)
            .unwrap();
        assert_eq!(
            c.cache.as_ref().unwrap().settings().namespace.as_deref(),
            Some("row")
        );
        assert!(
            out.warnings.iter().any(|w| w.contains("num_retries")),
            "{out:?}"
        );
        assert!(
            !out.warnings.iter().any(|w| w.contains("json_logs")),
            "{out:?}"
        );
        // The file's own cache_params win.
        let mut c = config(&format!(
            "{BASE}, store_model_in_db: true}}\nlitellm_settings: {{cache_params: {{type: local, namespace: file}}}}\n"
        ));
        c.apply_stored(&stored(&[("litellm_settings", row)], None), None)
            .unwrap();
        assert_eq!(
            c.cache.as_ref().unwrap().settings().namespace.as_deref(),
            Some("file")
        );
    }

    #[test]
    fn refused_stored_settings_and_another_redis_stop_the_start() {
        let mut c = config(&format!("{BASE}, store_model_in_db: true}}\n"));
        let s = stored(&[("general_settings", json!({"custom_auth": "x.y"}))], None);
        let err = c.apply_stored(&s, None).unwrap_err();
        assert!(
            err.contains("general_settings") && err.contains("custom_auth"),
            "{err}"
        );
        // Acted on from the file only: a stored one would go unenforced.
        let s = stored(
            &[("general_settings", json!({"enforced_params": ["user"]}))],
            None,
        );
        let err = c.apply_stored(&s, None).unwrap_err();
        assert!(err.contains("enforced_params"), "{err}");
        // A Redis cache without the limiter's Redis, or on another one.
        let s = stored(
            &[],
            Some(json!({"type": "redis", "host": "cache.internal", "port": "6380"})),
        );
        let err = c.apply_stored(&s, None).unwrap_err();
        assert!(
            err.contains("LiteLLM_CacheConfig") && err.contains("cache.internal:6380"),
            "{err}"
        );
        let mut c = config(&format!(
            "{BASE}, store_model_in_db: true}}\nrouter_settings: {{redis_host: 127.0.0.1, redis_port: 6390}}\n"
        ));
        assert!(c.apply_stored(&s, None).is_err());
        let same = stored(
            &[],
            Some(json!({"type": "redis", "host": "127.0.0.1", "port": "6390"})),
        );
        c.apply_stored(&same, None).unwrap();
        assert_eq!(
            c.cache.as_ref().unwrap().settings().backend,
            crate::cache::Backend::Redis
        );
    }
}
