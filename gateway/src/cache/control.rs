//! The body's `cache` object, LiteLLM's per-request controls
//! (`DynamicCacheControl`): `ttl`, `s-maxage` (also `s-max-age`),
//! `no-cache`, `no-store`, `namespace`, `use-cache`. A wrong type, an
//! absurd value or an unknown member is a 400 naming it (a misspelt
//! `no_cache` would otherwise serve stored answers in silence).

use super::settings::{check_namespace, positive_secs, MAX_TTL};
use crate::error::GatewayError;
use serde_json::Value;
use std::time::Duration;

/// What one request asks of the cache.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Controls {
    /// How long this answer is kept (`ttl`).
    pub ttl: Option<Duration>,
    /// Oldest stored answer accepted (`s-maxage`).
    pub max_age: Option<Duration>,
    /// Never answered from the cache (`no-cache`).
    pub no_cache: bool,
    /// Never stored (`no-store`).
    pub no_store: bool,
    /// Prefix of the key instead of the configured one (`namespace`).
    pub namespace: Option<String>,
    /// Opt-in under `mode: default_off` (`use-cache`).
    pub use_cache: bool,
}

/// Reads the `cache` member of a body (`None` when absent or `null`).
pub fn parse(v: Option<&Value>) -> Result<Controls, GatewayError> {
    let mut c = Controls::default();
    let map = match v {
        None | Some(Value::Null) => return Ok(c),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(bad("cache", "must be an object".into())),
    };
    for (name, value) in map {
        match name.as_str() {
            "ttl" => c.ttl = secs("cache.ttl", value, false)?,
            "s-maxage" | "s-max-age" => {
                let param = if name == "s-maxage" {
                    "cache.s-maxage"
                } else {
                    "cache.s-max-age"
                };
                c.max_age = secs(param, value, true)?;
            }
            "no-cache" => c.no_cache = flag("cache.no-cache", value)?,
            "no-store" => c.no_store = flag("cache.no-store", value)?,
            "use-cache" => c.use_cache = flag("cache.use-cache", value)?,
            "namespace" => {
                c.namespace = match value {
                    Value::Null => None,
                    Value::String(s) => Some(
                        check_namespace(s).map_err(|m| bad("cache.namespace", m))?,
                    )
                    .filter(|s| !s.is_empty()),
                    _ => return Err(bad("cache.namespace", "must be a string".into())),
                }
            }
            _ => {
                return Err(bad(
                    "cache",
                    format!(
                        "unknown member {name:?} (known: ttl, s-maxage, s-max-age, no-cache, no-store, namespace, use-cache)"
                    ),
                ))
            }
        }
    }
    Ok(c)
}

/// The controls a key's `metadata.cache` sets for its every request,
/// replacing the body's as LiteLLM does: its `ttl`, `s-maxage`, `no-cache`
/// and `no-store` (LiteLLM's `SupportedCacheControls`); other members and
/// a value that is not an object set none.
pub fn of_key(v: &Value) -> Result<Controls, GatewayError> {
    let Value::Object(map) = v else {
        return Ok(Controls::default());
    };
    let kept: serde_json::Map<String, Value> = map
        .iter()
        .filter(|(k, _)| KEY_CONTROLS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    parse(Some(&Value::Object(kept)))
}

/// LiteLLM's `allowed_cache_controls` of a key: refuses (403) the first
/// member of the request's `cache` object not in `allowed`, the object
/// being the key's `metadata.cache` when it has one (its members LiteLLM
/// keeps, see [`of_key`]), else the body's. An empty list allows any.
pub fn check_allowed(
    body: Option<&Value>,
    of_key: Option<&Value>,
    allowed: &[String],
) -> Result<(), GatewayError> {
    if allowed.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = match of_key {
        Some(Value::Object(map)) => map
            .keys()
            .map(String::as_str)
            .filter(|k| KEY_CONTROLS.contains(k))
            .collect(),
        Some(_) => Vec::new(),
        None => match body {
            Some(Value::Object(map)) => map.keys().map(String::as_str).collect(),
            _ => Vec::new(),
        },
    };
    match names.into_iter().find(|n| !allowed.iter().any(|a| a == n)) {
        Some(name) => Err(GatewayError::CacheControlDenied(name.to_string())),
        None => Ok(()),
    }
}

/// The controls a key's `metadata.cache` may set (LiteLLM's
/// `SupportedCacheControls`).
const KEY_CONTROLS: [&str; 4] = ["ttl", "s-maxage", "no-cache", "no-store"];

fn bad(param: &'static str, message: String) -> GatewayError {
    GatewayError::InvalidParam { param, message }
}

fn flag(param: &'static str, v: &Value) -> Result<bool, GatewayError> {
    match v {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(*b),
        _ => Err(bad(param, "must be a boolean".into())),
    }
}

/// Seconds, above 0 (or 0 too when `zero`) and at most a year.
fn secs(param: &'static str, v: &Value, zero: bool) -> Result<Option<Duration>, GatewayError> {
    if v.is_null() {
        return Ok(None);
    }
    let n = v
        .as_f64()
        .ok_or_else(|| bad(param, "must be a number of seconds".into()))?;
    if zero && n == 0.0 {
        return Ok(Some(Duration::ZERO));
    }
    positive_secs(n).map(Some).ok_or_else(|| {
        bad(
            param,
            format!(
                "must be {} seconds and at most {}",
                if zero { "at least 0" } else { "more than 0" },
                MAX_TTL.as_secs()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn param_of(v: Value) -> &'static str {
        match parse(Some(&v)).unwrap_err() {
            GatewayError::InvalidParam { param, .. } => param,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_keys_allowed_controls_bound_the_requests() {
        let allowed = vec!["no-cache".to_string()];
        let body = json!({"no-cache": true, "ttl": 5});
        assert!(check_allowed(Some(&body), None, &[]).is_ok());
        assert!(check_allowed(None, None, &allowed).is_ok());
        assert!(check_allowed(Some(&json!({"no-cache": true})), None, &allowed).is_ok());
        let denied = |r: Result<(), GatewayError>| match r {
            Err(GatewayError::CacheControlDenied(name)) => name,
            other => panic!("{other:?}"),
        };
        assert_eq!(denied(check_allowed(Some(&body), None, &allowed)), "ttl");
        // The key's controls replace the body's; members LiteLLM drops
        // from them are not checked.
        let of_key = json!({"no-store": true, "namespace": "x"});
        assert_eq!(
            denied(check_allowed(Some(&json!({})), Some(&of_key), &allowed)),
            "no-store"
        );
        let kept = json!({"no-cache": true, "namespace": "x"});
        assert!(check_allowed(Some(&body), Some(&kept), &allowed).is_ok());
    }

    #[test]
    fn reads_litellms_controls() {
        let c = parse(Some(
            &json!({"ttl": 30, "s-maxage": 0, "no-cache": true, "no-store": false,
            "namespace": "team-a", "use-cache": true}),
        ))
        .unwrap();
        assert_eq!(c.ttl, Some(Duration::from_secs(30)));
        assert_eq!(c.max_age, Some(Duration::ZERO));
        assert!(c.no_cache && !c.no_store && c.use_cache);
        assert_eq!(c.namespace.as_deref(), Some("team-a"));
        let c = parse(Some(&json!({"s-max-age": 1.5}))).unwrap();
        assert_eq!(c.max_age, Some(Duration::from_millis(1500)));
        assert_eq!(parse(None).unwrap(), Controls::default());
        assert_eq!(parse(Some(&Value::Null)).unwrap(), Controls::default());
    }

    #[test]
    fn a_keys_controls_keep_litellms_supported_ones() {
        let c = of_key(&json!({"no-cache": true, "ttl": 5, "namespace": "x", "use-cache": true}))
            .unwrap();
        assert!(c.no_cache && !c.use_cache);
        assert_eq!(c.ttl, Some(Duration::from_secs(5)));
        assert_eq!(c.namespace, None);
        assert_eq!(of_key(&json!("on")).unwrap(), Controls::default());
        assert!(of_key(&json!({"ttl": "x"})).is_err());
    }

    #[test]
    fn wrong_types_and_absurd_values_name_the_field() {
        assert_eq!(param_of(json!("no-cache")), "cache");
        assert_eq!(param_of(json!({"ttl": "10"})), "cache.ttl");
        assert_eq!(param_of(json!({"ttl": -5})), "cache.ttl");
        assert_eq!(param_of(json!({"ttl": 0})), "cache.ttl");
        assert_eq!(param_of(json!({"ttl": 1e12})), "cache.ttl");
        assert_eq!(param_of(json!({"s-maxage": -1})), "cache.s-maxage");
        assert_eq!(param_of(json!({"s-max-age": true})), "cache.s-max-age");
        assert_eq!(param_of(json!({"no-cache": "yes"})), "cache.no-cache");
        assert_eq!(param_of(json!({"no-store": 1})), "cache.no-store");
        assert_eq!(param_of(json!({"use-cache": 1})), "cache.use-cache");
        assert_eq!(param_of(json!({"namespace": 7})), "cache.namespace");
        assert_eq!(
            param_of(json!({"namespace": "x".repeat(300)})),
            "cache.namespace"
        );
        assert_eq!(param_of(json!({"no_cache": true})), "cache");
    }
}
