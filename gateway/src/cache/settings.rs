//! `litellm_settings.cache` and `cache_params`, read as LiteLLM reads them
//! (`litellm/proxy/proxy_server.py`, `litellm/caching/caching.py`): the
//! backend (`type`, `redis` when absent), `ttl` (replaced by
//! `default_in_memory_ttl` for `local`, `default_in_redis_ttl` for
//! `redis`), `namespace`, `supported_call_types` and `mode`. Backends this
//! gateway does not have are refused by name; settings it does not act on
//! are warnings.

use crate::inbound::Endpoint;
use serde_yaml::Value;
use std::time::Duration;

/// LiteLLM's in-memory default TTL (`InMemoryCache.default_ttl`).
const LOCAL_DEFAULT_TTL: Duration = Duration::from_secs(600);
/// LiteLLM's in-memory default size in entries (`DEFAULT_MAX_SIZE_IN_MEMORY`).
const DEFAULT_MAX_ENTRIES: u64 = 200;
/// LiteLLM's largest item (`MAX_SIZE_PER_ITEM_IN_MEMORY_CACHE_IN_KB`).
const DEFAULT_MAX_ITEM_KB: u64 = 1024;
/// Default bound of a replica's local cache in bytes.
const DEFAULT_MAX_MEMORY_MB: u64 = 64;
/// How long a request waits for an identical one's upstream call by
/// default (`single_flight_timeout`).
const DEFAULT_FOLLOW_WAIT: Duration = Duration::from_secs(60);
/// Longest TTL accepted anywhere (config or request): one year.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Longest namespace accepted (config or request).
pub const MAX_NAMESPACE_BYTES: usize = 256;

/// Where entries live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// In this process, per core (`type: local`).
    Local,
    /// In the Redis the limiter resolves (`type: redis`).
    Redis,
}

/// Who shares entries (`cache_params.scope`, this gateway's; LiteLLM's
/// cache is global).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// Every caller shares entries (LiteLLM's behaviour).
    #[default]
    Global,
    /// The keys of one team share entries; a key without a team, and the
    /// master key, keep their own.
    Team,
    /// Each key (and the master key) keeps its own entries.
    Key,
}

/// The response cache's settings; `None` in [`CacheSettings::from_litellm`]
/// when the cache is off.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheSettings {
    /// Where entries live.
    pub backend: Backend,
    /// How long an entry lives unless the request says otherwise; `None`:
    /// until evicted (Redis, as LiteLLM without a `ttl`).
    pub ttl: Option<Duration>,
    /// Prefix of every key (`namespace:hash`).
    pub namespace: Option<String>,
    /// Endpoints whose answers are cached.
    pub endpoints: Vec<Endpoint>,
    /// `mode: default_off`: only requests with `cache: {"use-cache": true}`.
    pub default_off: bool,
    /// Most entries a replica's local cache holds (`max_size_in_memory`).
    pub max_entries: u64,
    /// Most bytes a replica's local cache holds (`max_memory_mb`).
    pub max_bytes: u64,
    /// Largest answer stored (`max_size_per_item`, in KB as LiteLLM).
    pub max_entry_bytes: u64,
    /// Longest a miss waits for an identical request's upstream call
    /// before making its own (`single_flight_timeout`, this gateway's;
    /// `None`: 0, every miss makes its own call).
    pub follow_wait: Option<Duration>,
    /// Who shares entries.
    pub scope: Scope,
    /// `type: redis`: each core keeps a near copy of the entries it read
    /// (this gateway's `near_cache`, on by default), bounded by
    /// `max_size_in_memory` and `max_memory_mb`.
    pub near_cache: bool,
    /// Longest a near copy is kept (`default_in_memory_ttl` with `type:
    /// redis`); `None`: as long as Redis keeps the entry.
    pub near_ttl: Option<Duration>,
}

/// Backends of LiteLLM this gateway does not have.
const REFUSED_TYPES: &[&str] = &[
    "redis-semantic",
    "valkey-semantic",
    "qdrant-semantic",
    "s3",
    "gcs",
    "azure-blob",
    "disk",
];

/// `cache_params` keys read here or by the limiter's Redis resolution.
const KNOWN: &[&str] = &[
    "type",
    "mode",
    "ttl",
    "default_in_memory_ttl",
    "default_in_redis_ttl",
    "namespace",
    "supported_call_types",
    "max_size_in_memory",
    "max_size_per_item",
    "max_memory_mb",
    "host",
    "port",
    "password",
    "username",
    "url",
    "ssl",
    "redis_startup_nodes",
    "single_flight_timeout",
    "scope",
    "near_cache",
];

impl CacheSettings {
    /// Reads `litellm_settings`; `Ok(None)` when `cache` is not `true`.
    /// Warnings (settings accepted but not acted on) go to `warnings`.
    pub fn from_litellm(
        litellm: Option<&Value>,
        warnings: &mut Vec<String>,
    ) -> Result<Option<CacheSettings>, String> {
        let Some(litellm) = litellm else {
            return Ok(None);
        };
        match litellm.get("cache") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => return Ok(None),
            Some(Value::Bool(true)) => {}
            Some(_) => return Err("litellm_settings.cache must be true or false".into()),
        }
        let empty = Value::Mapping(Default::default());
        let params = match litellm.get("cache_params") {
            None | Some(Value::Null) => &empty,
            Some(p) if p.is_mapping() => p,
            Some(_) => return Err("litellm_settings.cache_params must be a mapping".into()),
        };
        let name = |k: &str| format!("litellm_settings.cache_params.{k}");
        let backend = match params.get("type") {
            None | Some(Value::Null) => Backend::Redis,
            Some(Value::String(t)) if t == "redis" => Backend::Redis,
            Some(Value::String(t)) if t == "local" => Backend::Local,
            Some(Value::String(t)) if REFUSED_TYPES.contains(&t.as_str()) => {
                return Err(format!(
                    "{}: `{t}` is not supported by this gateway (supported: local, redis); \
                     a response cache LiteLLM would use is never ignored in silence",
                    name("type")
                ))
            }
            Some(other) => {
                return Err(format!(
                    "{}: unknown cache type {other:?} (supported: local, redis)",
                    name("type")
                ))
            }
        };
        let ttl_of = |k: &str| seconds(params.get(k), &name(k));
        let mut ttl = ttl_of("ttl")?;
        let (memory_ttl, redis_ttl) = (
            ttl_of("default_in_memory_ttl")?,
            ttl_of("default_in_redis_ttl")?,
        );
        match backend {
            Backend::Local => ttl = memory_ttl.or(ttl).or(Some(LOCAL_DEFAULT_TTL)),
            Backend::Redis => ttl = redis_ttl.or(ttl),
        }
        let near_ttl = match backend {
            Backend::Redis => memory_ttl,
            Backend::Local => None,
        };
        let near_cache = match params.get("near_cache") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(format!("{} must be true or false", name("near_cache"))),
        };
        let namespace = match params.get("namespace") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                Some(check_namespace(s).map_err(|e| format!("{}: {e}", name("namespace")))?)
                    .filter(|s| !s.is_empty())
            }
            Some(_) => return Err(format!("{} must be a string", name("namespace"))),
        };
        let endpoints = call_types(params.get("supported_call_types"), warnings)
            .map_err(|e| format!("{}: {e}", name("supported_call_types")))?;
        let default_off = match params.get("mode") {
            None | Some(Value::Null) => false,
            Some(Value::String(m)) if m == "default_on" => false,
            Some(Value::String(m)) if m == "default_off" => true,
            Some(_) => {
                return Err(format!(
                    "{} must be default_on or default_off",
                    name("mode")
                ))
            }
        };
        let count = |k: &str, default: u64, most: u64| -> Result<u64, String> {
            match params.get(k) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v
                    .as_u64()
                    .filter(|n| (1..=most).contains(n))
                    .ok_or_else(|| format!("{} must be an integer from 1 to {most}", name(k))),
            }
        };
        let max_entries = count("max_size_in_memory", DEFAULT_MAX_ENTRIES, 100_000_000)?;
        let max_bytes = count("max_memory_mb", DEFAULT_MAX_MEMORY_MB, 1 << 20)? << 20;
        let max_entry_bytes = count("max_size_per_item", DEFAULT_MAX_ITEM_KB, 16 * 1024)? << 10;
        let follow_wait = match params.get("single_flight_timeout") {
            None | Some(Value::Null) => Some(DEFAULT_FOLLOW_WAIT),
            Some(v) if v.as_f64() == Some(0.0) => None,
            v => seconds(v, &name("single_flight_timeout"))?,
        };
        let scope = match params.get("scope") {
            None | Some(Value::Null) => Scope::Global,
            Some(Value::String(s)) if s == "global" => Scope::Global,
            Some(Value::String(s)) if s == "team" => Scope::Team,
            Some(Value::String(s)) if s == "key" => Scope::Key,
            Some(_) => return Err(format!("{} must be global, team or key", name("scope"))),
        };
        if let Some(map) = params.as_mapping() {
            for key in map.keys().filter_map(Value::as_str) {
                if !KNOWN.contains(&key) {
                    warnings.push(format!(
                        "{} is not acted on by this gateway's response cache",
                        name(key)
                    ));
                }
            }
        }
        Ok(Some(CacheSettings {
            backend,
            ttl,
            namespace,
            endpoints,
            default_off,
            max_entries,
            max_bytes,
            max_entry_bytes,
            follow_wait,
            scope,
            near_cache,
            near_ttl,
        }))
    }

    /// Whether answers on `endpoint` are cached.
    pub fn serves(&self, endpoint: Endpoint) -> bool {
        self.endpoints.contains(&endpoint)
    }
}

/// A namespace's text, checked: at most [`MAX_NAMESPACE_BYTES`], no
/// control characters.
pub fn check_namespace(s: &str) -> Result<String, String> {
    if s.len() > MAX_NAMESPACE_BYTES {
        return Err(format!("at most {MAX_NAMESPACE_BYTES} bytes"));
    }
    if s.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(s.to_string())
}

/// A TTL in seconds (integer or fractional), more than 0 and at most
/// [`MAX_TTL`].
fn seconds(v: Option<&Value>, name: &str) -> Result<Option<Duration>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            v.as_f64().and_then(positive_secs).map(Some).ok_or_else(|| {
                format!("{name} must be a number of seconds above 0, at most one year")
            })
        }
    }
}

/// `secs` as a duration when it is above 0 and at most [`MAX_TTL`].
pub fn positive_secs(secs: f64) -> Option<Duration> {
    (secs > 0.0 && secs <= MAX_TTL.as_secs_f64()).then(|| Duration::from_secs_f64(secs))
}

/// The endpoints of LiteLLM's call types; chat, text completions,
/// embeddings, Responses and Anthropic Messages by default (LiteLLM's
/// default list also names call types this gateway caches nothing for: a
/// warning when listed).
fn call_types(v: Option<&Value>, warnings: &mut Vec<String>) -> Result<Vec<Endpoint>, String> {
    let all = vec![
        Endpoint::ChatCompletions,
        Endpoint::Completions,
        Endpoint::Embeddings,
        Endpoint::Responses,
        Endpoint::Messages,
    ];
    let list = match v {
        None | Some(Value::Null) => return Ok(all),
        Some(Value::Sequence(list)) => list,
        Some(_) => return Err("must be a list of call types".into()),
    };
    let mut endpoints = Vec::new();
    for item in list {
        let t = item.as_str().ok_or("must be a list of strings")?;
        let endpoint = match t {
            "completion" | "acompletion" => Endpoint::ChatCompletions,
            "text_completion" | "atext_completion" => Endpoint::Completions,
            "embedding" | "aembedding" => Endpoint::Embeddings,
            "responses" | "aresponses" => Endpoint::Responses,
            "anthropic_messages" | "aanthropic_messages" => Endpoint::Messages,
            "transcription" | "atranscription" | "rerank" | "arerank" => {
                warnings.push(format!(
                    "litellm_settings.cache_params.supported_call_types: `{t}` answers are not cached by this gateway"
                ));
                continue;
            }
            other => return Err(format!("unknown call type {other:?}")),
        };
        if !endpoints.contains(&endpoint) {
            endpoints.push(endpoint);
        }
    }
    Ok(endpoints)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> (Result<Option<CacheSettings>, String>, Vec<String>) {
        let doc: Value = serde_yaml::from_str(yaml).unwrap();
        let mut warnings = Vec::new();
        let s = CacheSettings::from_litellm(doc.get("litellm_settings"), &mut warnings);
        (s, warnings)
    }

    #[test]
    fn off_unless_cache_is_true() {
        assert_eq!(read("{}").0, Ok(None));
        assert_eq!(
            read("litellm_settings: {cache: false, cache_params: {type: local}}").0,
            Ok(None)
        );
        assert!(read("litellm_settings: {cache: yes-please}").0.is_err());
    }

    #[test]
    fn type_defaults_to_redis_and_ttls_follow_litellm() {
        let s = read("litellm_settings: {cache: true}").0.unwrap().unwrap();
        assert_eq!((s.backend, s.ttl), (Backend::Redis, None));
        let s = read("litellm_settings: {cache: true, cache_params: {type: redis, ttl: 30, default_in_redis_ttl: 5, default_in_memory_ttl: 9}}")
            .0.unwrap().unwrap();
        assert_eq!(s.ttl, Some(Duration::from_secs(5)));
        // Redis's near copies: on by default, kept at most the in-memory TTL.
        assert_eq!(
            (s.near_cache, s.near_ttl),
            (true, Some(Duration::from_secs(9)))
        );
        let s = read("litellm_settings: {cache: true, cache_params: {near_cache: false}}")
            .0
            .unwrap()
            .unwrap();
        assert_eq!((s.near_cache, s.near_ttl), (false, None));
        let s = read("litellm_settings: {cache: true, cache_params: {type: local}}")
            .0
            .unwrap()
            .unwrap();
        assert_eq!(
            (s.backend, s.ttl),
            (Backend::Local, Some(LOCAL_DEFAULT_TTL))
        );
        let s = read("litellm_settings: {cache: true, cache_params: {type: local, ttl: 2.5, default_in_redis_ttl: 9}}")
            .0.unwrap().unwrap();
        assert_eq!(s.ttl, Some(Duration::from_millis(2500)));
        assert!(!s.default_off);
        assert_eq!(s.endpoints.len(), 5);
    }

    #[test]
    fn other_backends_are_refused_by_name() {
        for t in ["s3", "gcs", "disk", "qdrant-semantic", "redis-semantic"] {
            let err = read(&format!(
                "litellm_settings: {{cache: true, cache_params: {{type: {t}}}}}"
            ))
            .0
            .unwrap_err();
            assert!(err.contains(t) && err.contains("not supported"), "{err}");
        }
        assert!(
            read("litellm_settings: {cache: true, cache_params: {type: memcached}}")
                .0
                .is_err()
        );
    }

    #[test]
    fn bad_values_are_refused_naming_them() {
        for (params, field) in [
            ("{type: local, ttl: -1}", "ttl"),
            ("{type: local, ttl: 0}", "ttl"),
            ("{type: local, ttl: 100000000}", "ttl"),
            (
                "{type: local, default_in_memory_ttl: x}",
                "default_in_memory_ttl",
            ),
            ("{type: local, namespace: 3}", "namespace"),
            ("{type: local, mode: sometimes}", "mode"),
            (
                "{type: local, supported_call_types: [chat]}",
                "supported_call_types",
            ),
            ("{type: local, max_size_in_memory: 0}", "max_size_in_memory"),
            ("{type: local, scope: user}", "scope"),
            ("{type: redis, near_cache: sometimes}", "near_cache"),
        ] {
            let err = read(&format!(
                "litellm_settings: {{cache: true, cache_params: {params}}}"
            ))
            .0
            .unwrap_err();
            assert!(err.contains(field), "{params}: {err}");
        }
    }

    #[test]
    fn call_types_mode_namespace_and_bounds() {
        let (s, warnings) = read(
            "litellm_settings: {cache: true, cache_params: {type: local, mode: default_off, namespace: ns1, \
             supported_call_types: [acompletion, embedding, rerank], max_size_in_memory: 10, max_size_per_item: 2, \
             max_memory_mb: 3, redis_flush_size: 5}}",
        );
        let s = s.unwrap().unwrap();
        assert!(s.default_off);
        assert_eq!(s.namespace.as_deref(), Some("ns1"));
        assert_eq!(
            s.endpoints,
            [Endpoint::ChatCompletions, Endpoint::Embeddings]
        );
        assert!(s.serves(Endpoint::ChatCompletions) && !s.serves(Endpoint::Completions));
        assert_eq!(
            (s.max_entries, s.max_bytes, s.max_entry_bytes),
            (10, 3 << 20, 2048)
        );
        assert!(warnings.iter().any(|w| w.contains("rerank")));
        assert!(warnings.iter().any(|w| w.contains("redis_flush_size")));
        assert_eq!(s.follow_wait, Some(DEFAULT_FOLLOW_WAIT));
        assert_eq!(s.scope, Scope::Global);
        let (s, _) =
            read("litellm_settings: {cache: true, cache_params: {type: local, scope: team}}");
        assert_eq!(s.unwrap().unwrap().scope, Scope::Team);
    }

    #[test]
    fn single_flight_timeout_bounds_a_wait_or_turns_it_off() {
        let of = |v: &str| {
            read(&format!(
                "litellm_settings: {{cache: true, cache_params: {{type: local, single_flight_timeout: {v}}}}}"
            ))
            .0
        };
        assert_eq!(
            of("2.5").unwrap().unwrap().follow_wait,
            Some(Duration::from_millis(2500))
        );
        assert_eq!(of("0").unwrap().unwrap().follow_wait, None);
        for bad in ["-1", "x", "100000000"] {
            assert!(of(bad).unwrap_err().contains("single_flight_timeout"));
        }
    }
}
