//! LiteLLM's cache settings routes (an admin's): `GET /cache/settings`
//! (the settings its UI renders, LiteLLM's `fields`, `current_values` and
//! `redis_type_descriptions`), `POST /cache/settings/test` (a connection
//! test) and `POST /cache/settings` (saving settings in the database,
//! refused: this gateway reads them from `config.yaml` only, and says so).
//! No credential is ever shown: a password or URL reads `***REDACTED***`.

use crate::cache::{Backend, Cache};
use serde_json::{json, Map, Value};

/// What LiteLLM shows in place of a credential.
const REDACTED: &str = "***REDACTED***";

/// A field of LiteLLM's cache settings form: name, type, what it means,
/// its default, its options and its label, and the Redis deployment it
/// applies to.
struct Field {
    name: &'static str,
    kind: &'static str,
    description: &'static str,
    default: Value,
    options: Option<&'static [&'static str]>,
    label: &'static str,
    redis_type: Option<&'static str>,
}

/// The fields of LiteLLM's form this gateway acts on (Sentinel, semantic
/// and cloud IAM settings it does not have are left out).
fn fields() -> Vec<Field> {
    let f = |name, kind, description, default, label| Field {
        name,
        kind,
        description,
        default,
        options: None,
        label,
        redis_type: None,
    };
    vec![
        Field {
            options: Some(&["node", "cluster"]),
            ..f(
                "redis_type",
                "String",
                "Kind of Redis deployment: one server or a Cluster",
                json!("node"),
                "Redis Type",
            )
        },
        f(
            "url",
            "String",
            "Redis URL (redis:// or rediss://); it wins over host, port, username and password",
            Value::Null,
            "Redis URL",
        ),
        f(
            "host",
            "String",
            "Redis host name or address",
            Value::Null,
            "Host",
        ),
        f("port", "String", "Redis port", json!("6379"), "Port"),
        f(
            "password",
            "String",
            "Redis password",
            Value::Null,
            "Password",
        ),
        f(
            "username",
            "String",
            "Redis user name (ACL)",
            Value::Null,
            "Username",
        ),
        f("ssl", "Boolean", "Connect over TLS", json!(false), "SSL"),
        f(
            "namespace",
            "String",
            "Prefix of every cache key",
            Value::Null,
            "Namespace",
        ),
        f(
            "ttl",
            "Float",
            "Seconds an entry lives",
            Value::Null,
            "TTL (seconds)",
        ),
        Field {
            redis_type: Some("cluster"),
            ..f(
                "redis_startup_nodes",
                "List",
                "Startup nodes of a Redis Cluster, e.g. [{'host': '127.0.0.1', 'port': '7001'}]",
                Value::Null,
                "Startup Nodes",
            )
        },
    ]
}

/// The settings in force, as LiteLLM's `current_values` (credentials
/// redacted); empty without a cache.
fn current_values(cache: Option<&Cache>) -> Map<String, Value> {
    let mut values = Map::new();
    let Some(cache) = cache else {
        return values;
    };
    let s = cache.settings();
    let kind = match s.backend {
        Backend::Local => "local",
        Backend::Redis => "redis",
    };
    values.insert("type".into(), kind.into());
    if let Some(ns) = &s.namespace {
        values.insert("namespace".into(), ns.clone().into());
    }
    if let Some(ttl) = s.ttl {
        values.insert("ttl".into(), ttl.as_secs_f64().into());
    }
    let Some(redis) = cache.redis() else {
        return values;
    };
    if redis.is_cluster() {
        values.insert("redis_type".into(), "cluster".into());
        let nodes: Vec<Value> = redis
            .cluster_nodes()
            .iter()
            .map(|n| {
                let (host, port) = n.rsplit_once(':').unwrap_or((n, ""));
                json!({"host": host, "port": port})
            })
            .collect();
        values.insert("redis_startup_nodes".into(), nodes.into());
    } else {
        values.insert("redis_type".into(), "node".into());
        let addr = redis.addr();
        let (host, port) = addr.rsplit_once(':').unwrap_or((addr, ""));
        values.insert("host".into(), host.into());
        values.insert("port".into(), port.into());
    }
    values.insert("ssl".into(), redis.is_tls().into());
    if redis.has_credentials() {
        values.insert("password".into(), REDACTED.into());
    }
    values
}

/// `GET /cache/settings`: LiteLLM's `fields` (each with its
/// `field_value`), `current_values` and `redis_type_descriptions`.
pub fn get(cache: Option<&Cache>) -> Value {
    let current = current_values(cache);
    let fields: Vec<Value> = fields()
        .into_iter()
        .map(|f| {
            json!({
                "field_name": f.name,
                "field_type": f.kind,
                "field_value": current.get(f.name).cloned().unwrap_or(Value::Null),
                "field_description": f.description,
                "field_default": f.default,
                "options": f.options,
                "ui_field_name": f.label,
                "link": null,
                "redis_type": f.redis_type,
            })
        })
        .collect();
    json!({
        "fields": fields,
        "current_values": current,
        "redis_type_descriptions": {
            "node": "One Redis server",
            "cluster": "A Redis Cluster: keys spread over its nodes by slot",
        },
    })
}

/// Whether `asked` (a `cache_settings` object) names the Redis `cache`
/// uses: its host and port, or one of its Cluster nodes, or no target at
/// all (then the configured one is meant).
fn names_configured(cache: &Cache, asked: &Map<String, Value>) -> bool {
    let Some(redis) = cache.redis() else {
        return false;
    };
    let text = |k: &str| match asked.get(k) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    match (text("host"), text("port")) {
        (None, None) => true,
        (Some(host), port) => {
            let wanted = format!("{host}:{}", port.as_deref().unwrap_or("6379"));
            redis.addr() == wanted || redis.cluster_nodes().contains(&wanted)
        }
        (None, Some(_)) => false,
    }
}

/// What `POST /cache/settings/test` does for `body`: `Ok` with LiteLLM's
/// `{"status", "message"}` once decided without Redis, `Err(())` when the
/// configured Redis is to be pinged.
pub fn test_plan(cache: Option<&Cache>, body: &[u8]) -> Result<Value, ()> {
    let failed = |message: &str| json!({"status": "failed", "message": message, "error": null});
    let asked = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("cache_settings").and_then(Value::as_object).cloned());
    let Some(asked) = asked else {
        return Ok(failed(
            "the body must be {\"cache_settings\": {...}} with the settings to test",
        ));
    };
    if asked.get("type").and_then(Value::as_str) != Some("redis") {
        return Ok(failed(
            "Only Redis cache type is currently supported for testing",
        ));
    }
    match cache {
        Some(c) if names_configured(c, &asked) => Err(()),
        _ => Ok(failed(
            "this gateway tests only the Redis its config.yaml names for the cache \
             (litellm_settings.cache_params); settings are not changed at runtime",
        )),
    }
}

/// LiteLLM's answer to a connection test of the configured Redis.
pub fn tested(ping: Result<(), String>) -> Value {
    match ping {
        Ok(()) => json!({"status": "success", "message": "Redis connection test successful"}),
        Err(e) => json!({"status": "failed",
            "message": format!("Cache connection test failed: {e}"), "error": e}),
    }
}

/// Why `POST /cache/settings` is refused.
pub const SAVE_REFUSED: &str = "this gateway does not keep cache settings in the database: \
     set litellm_settings.cache and cache_params in config.yaml and restart";

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(yaml: &str) -> Cache {
        let doc: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        let s =
            crate::cache::CacheSettings::from_litellm(doc.get("litellm_settings"), &mut Vec::new())
                .unwrap()
                .unwrap();
        Cache::new(s, None).unwrap()
    }

    #[test]
    fn settings_show_litellms_shape() {
        let none = get(None);
        assert_eq!(none["current_values"], json!({}));
        assert!(none["fields"].as_array().unwrap().len() >= 10);
        assert!(none["redis_type_descriptions"]["node"].is_string());
        let c = cache(
            "litellm_settings: {cache: true, cache_params: {type: local, namespace: ns, ttl: 5}}",
        );
        let v = get(Some(&c));
        assert_eq!(
            v["current_values"],
            json!({"type": "local", "namespace": "ns", "ttl": 5.0})
        );
        let ns = v["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["field_name"] == "namespace")
            .unwrap();
        assert_eq!(ns["field_value"], "ns");
    }

    #[test]
    fn a_test_is_decided_without_redis_unless_it_names_the_configured_one() {
        let c = cache("litellm_settings: {cache: true, cache_params: {type: local}}");
        let v = test_plan(Some(&c), br#"{"cache_settings": {"type": "local"}}"#).unwrap();
        assert_eq!(v["status"], "failed");
        let v = test_plan(Some(&c), br#"{"cache_settings": {"type": "redis"}}"#).unwrap();
        assert_eq!(v["status"], "failed");
        assert_eq!(test_plan(None, b"not json").unwrap()["status"], "failed");
    }
}
