//! LiteLLM's `/cache/*` management routes (an admin's): `GET /cache/ping`,
//! `POST /cache/delete` (`{"keys": [...]}`), `GET /cache/redis/info`,
//! `POST /cache/flushall` and the settings routes (`cache_settings`:
//! `GET /cache/settings`, `POST /cache/settings/test`, `POST
//! /cache/settings`), with LiteLLM's answers and messages. Deleting,
//! flushing and server information need `type: redis`, as in LiteLLM; a
//! flush removes this cache's entries only (its Redis is the limiter's,
//! whose counters a `FLUSHALL` would wipe).

use super::cache_settings;
use crate::cache::redis::{is_entry, RedisStore};
use crate::cache::{Backend, Cache};
use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::redis::resp::Reply;
use crate::state::Worker;
use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};

/// Most keys one `/cache/delete` names.
const MAX_DELETE_KEYS: usize = 1000;
/// Longest key `/cache/delete` takes (a namespace and a hash are far less).
const MAX_KEY_BYTES: usize = 1024;
/// Longest a flush keeps scanning.
const FLUSH_DEADLINE: Duration = Duration::from_secs(30);
/// Keys asked for per `SCAN`.
const SCAN_COUNT: &str = "1000";
/// The key `/cache/ping` writes to check writes work (not an entry).
const PING_KEY: &str = "gateway-cache-ping";

/// A `/cache/*` route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `GET /cache/ping`.
    Ping,
    /// `POST /cache/delete`.
    Delete,
    /// `GET /cache/redis/info`.
    RedisInfo,
    /// `POST /cache/flushall`.
    Flushall,
    /// `GET /cache/settings`.
    Settings,
    /// `POST /cache/settings/test`.
    SettingsTest,
    /// `POST /cache/settings` (refused: settings come from the config).
    SettingsSave,
}

impl Op {
    /// The route of `method` `path`, if it is one.
    pub fn parse(method: &str, path: &str) -> Option<Op> {
        let get = method == "GET" || method == "HEAD";
        match path {
            "/cache/ping" if get => Some(Op::Ping),
            "/cache/delete" if method == "POST" => Some(Op::Delete),
            "/cache/redis/info" if get => Some(Op::RedisInfo),
            "/cache/flushall" if method == "POST" => Some(Op::Flushall),
            "/cache/settings" if get => Some(Op::Settings),
            "/cache/settings" if method == "POST" => Some(Op::SettingsSave),
            "/cache/settings/test" if method == "POST" => Some(Op::SettingsTest),
            _ => None,
        }
    }
}

/// An answer that is not a success: LiteLLM's status and message.
struct Refusal {
    status: u16,
    message: String,
    kind: &'static str,
    param: Option<&'static str>,
}

impl Refusal {
    fn new(status: u16, message: String) -> Refusal {
        let kind = match status {
            400 => "invalid_request_error",
            503 => "service_unavailable",
            _ => "internal_server_error",
        };
        Refusal {
            status,
            message,
            kind,
            param: None,
        }
    }
}

/// Answers `op` for an admin.
pub async fn handle(
    worker: &Worker,
    op: Op,
    body: &[u8],
    out: &mut Responder<'_>,
) -> Result<(), GatewayError> {
    let cache = worker.shared.cache.load();
    let cache = cache.as_deref();
    let answer = match op {
        Op::Ping => ping(cache).await,
        Op::Delete => delete(cache, body).await,
        Op::RedisInfo => redis_info(cache).await,
        Op::Flushall => flushall(cache).await,
        Op::Settings => Ok(cache_settings::get(cache)),
        Op::SettingsTest => Ok(settings_test(cache, body).await),
        Op::SettingsSave => Err(Refusal::new(400, cache_settings::SAVE_REFUSED.into())),
    };
    let (status, body) = match answer {
        Ok(v) => (200, v),
        Err(r) => {
            let error = json!({"error": {"message": r.message, "type": r.kind,
                "param": r.param, "code": r.status.to_string()}});
            (r.status, error)
        }
    };
    let _ = out
        .send(
            status,
            HeadBuilder::new(status),
            "application/json",
            body.to_string().as_bytes(),
        )
        .await;
    Ok(())
}

/// What LiteLLM says when no cache is configured.
const NOT_INITIALIZED: &str = "Cache not initialized. litellm.cache is None";

fn type_name(cache: &Cache) -> &'static str {
    match cache.settings().backend {
        Backend::Local => "local",
        Backend::Redis => "redis",
    }
}

/// The cache's settings as `/cache/ping` shows them (no secret among them).
fn params(cache: &Cache) -> Value {
    let s = cache.settings();
    json!({
        "type": type_name(cache),
        "namespace": s.namespace,
        "ttl": s.ttl.map(|t| t.as_secs_f64()),
        "mode": if s.default_off { "default_off" } else { "default_on" },
        "supported_call_types": s.endpoints.iter().map(|e| e.path_suffix()).collect::<Vec<_>>(),
    })
}

/// The Redis of `cache`, or LiteLLM's refusal for another type (`what` the
/// operation, in LiteLLM's words).
fn redis_of<'c>(cache: Option<&'c Cache>, what: &str) -> Result<&'c RedisStore, String> {
    let cache = cache.ok_or_else(|| format!("503: {NOT_INITIALIZED}"))?;
    cache
        .redis()
        .ok_or_else(|| format!("500: Cache type {} {what}", type_name(cache)))
}

async fn ping(cache: Option<&Cache>) -> Result<Value, Refusal> {
    let unhealthy = |message: &str, params: &Value, health: &Value| {
        let mut r = Refusal::new(
            503,
            json!({"message": message, "litellm_cache_params": params.to_string(),
                "health_check_cache_params": health.to_string()})
            .to_string(),
        );
        r.kind = "cache_ping_error";
        r.param = Some("cache_ping");
        r
    };
    let Some(cache) = cache else {
        return Err(unhealthy(NOT_INITIALIZED, &json!({}), &json!({})));
    };
    let params = params(cache);
    let Some(redis) = cache.redis() else {
        return Ok(json!({"status": "healthy", "cache_type": type_name(cache),
            "ping_response": null, "set_cache_response": null,
            "litellm_cache_params": params.to_string(), "health_check_cache_params": null}));
    };
    let (host, port) = redis.addr().rsplit_once(':').unwrap_or((redis.addr(), ""));
    let mut health = json!({"host": host, "port": port, "namespace": cache.settings().namespace,
        "redis_kwargs": {}, "redis_version": null});
    let pong = redis.admin(command(&["PING"])).await;
    let set = redis
        .admin(command(&["SET", PING_KEY, "test_key", "PX", "60000"]))
        .await;
    if let Ok(Reply::Bulk(Some(info))) = redis.admin(command(&["INFO", "server"])).await {
        let info = parse_info(&String::from_utf8_lossy(&info));
        health["redis_version"] = info.get("redis_version").cloned().unwrap_or(Value::Null);
    }
    match (pong, set) {
        (Ok(_), Ok(_)) => Ok(json!({"status": "healthy", "cache_type": "redis",
            "ping_response": true, "set_cache_response": "success",
            "litellm_cache_params": params.to_string(), "health_check_cache_params": health})),
        _ => Err(unhealthy("Service Unhealthy", &params, &health)),
    }
}

/// `POST /cache/settings/test`: the configured Redis pinged when the body
/// names it.
async fn settings_test(cache: Option<&Cache>, body: &[u8]) -> Value {
    let redis = match (cache_settings::test_plan(cache, body), cache) {
        (Ok(answer), _) => return answer,
        (Err(()), Some(cache)) => cache.redis(),
        (Err(()), None) => None,
    };
    let Some(redis) = redis else {
        return cache_settings::tested(Err("no Redis is configured for the cache".into()));
    };
    let ping = match redis.admin(command(&["PING"])).await {
        Ok(Reply::Status(_)) | Ok(Reply::Bulk(Some(_))) => Ok(()),
        Ok(_) => Err("Redis ping returned False".into()),
        Err(e) => Err(e),
    };
    cache_settings::tested(ping)
}

async fn delete(cache: Option<&Cache>, body: &[u8]) -> Result<Value, Refusal> {
    let keys = delete_keys(body)?;
    let failed = |e: String| Refusal::new(500, format!("Cache Delete Failed({e})"));
    let redis = redis_of(
        cache,
        "does not support deleting a key. only `redis` is supported",
    )
    .map_err(failed)?;
    // One DEL per key: on a Cluster each goes to its own slot's node.
    let replies = futures_util::future::join_all(
        keys.iter()
            .map(|k| redis.admin(vec![b"DEL".to_vec(), k.as_bytes().to_vec()])),
    )
    .await;
    if let Some(Err(e)) = replies.into_iter().find(Result::is_err) {
        return Err(failed(e));
    }
    Ok(json!({"status": "success"}))
}

/// The `keys` of a `/cache/delete` body: a list of strings, bounded.
fn delete_keys(body: &[u8]) -> Result<Vec<String>, Refusal> {
    let bad = |m: &str| {
        let mut r = Refusal::new(400, m.to_string());
        r.param = Some("keys");
        r
    };
    let v: Value =
        serde_json::from_slice(body).map_err(|e| bad(&format!("the body is not JSON: {e}")))?;
    let Some(list) = v.get("keys").and_then(Value::as_array) else {
        return Err(bad("keys must be a list of cache keys"));
    };
    if list.len() > MAX_DELETE_KEYS {
        return Err(bad(&format!("at most {MAX_DELETE_KEYS} keys at once")));
    }
    list.iter()
        .map(|k| match k.as_str() {
            Some(k) if !k.is_empty() && k.len() <= MAX_KEY_BYTES => Ok(k.to_string()),
            _ => Err(bad(&format!(
                "each key must be a string of 1 to {MAX_KEY_BYTES} bytes"
            ))),
        })
        .collect()
}

async fn redis_info(cache: Option<&Cache>) -> Result<Value, Refusal> {
    let unhealthy = |e: String| Refusal::new(503, format!("Service Unhealthy ({e})"));
    let redis = redis_of(cache, "does not support redis info").map_err(unhealthy)?;
    let info = match redis.admin(command(&["INFO"])).await.map_err(unhealthy)? {
        Reply::Bulk(Some(text)) => parse_info(&String::from_utf8_lossy(&text)),
        _ => return Err(unhealthy("INFO gave no text".into())),
    };
    // CLIENT LIST may be refused (managed Redis): LiteLLM then says so.
    let (clients, num_clients) = match redis.admin(command(&["CLIENT", "LIST"])).await {
        Ok(Reply::Bulk(Some(text))) => {
            let clients = parse_clients(&String::from_utf8_lossy(&text));
            let n = clients.len() as i64;
            (clients, n)
        }
        _ => (
            vec![json!(
                "CLIENT LIST command not available on this Redis instance"
            )],
            -1,
        ),
    };
    Ok(json!({"num_clients": num_clients, "clients": clients, "info": info}))
}

async fn flushall(cache: Option<&Cache>) -> Result<Value, Refusal> {
    let unhealthy = |e: String| Refusal::new(503, format!("Service Unhealthy ({e})"));
    let redis = redis_of(cache, "does not support flushing").map_err(unhealthy)?;
    if redis.is_cluster() {
        return Err(unhealthy(
            "500: a flush scans one server; on a Redis Cluster delete entries by key \
             (/cache/delete)"
                .into(),
        ));
    }
    let started = Instant::now();
    let pattern = entry_pattern();
    let mut cursor = b"0".to_vec();
    loop {
        if started.elapsed() > FLUSH_DEADLINE {
            return Err(unhealthy(format!(
                "the flush took longer than {FLUSH_DEADLINE:?}; call it again to go on"
            )));
        }
        let scan = vec![
            b"SCAN".to_vec(),
            cursor,
            b"MATCH".to_vec(),
            pattern.as_bytes().to_vec(),
            b"COUNT".to_vec(),
            SCAN_COUNT.as_bytes().to_vec(),
        ];
        let (next, keys) = match redis.admin(scan).await.map_err(unhealthy)? {
            Reply::Array(Some(mut parts)) if parts.len() == 2 => {
                let keys = parts.pop();
                match (parts.pop(), keys) {
                    (Some(Reply::Bulk(Some(next))), Some(Reply::Array(Some(keys)))) => (next, keys),
                    _ => return Err(unhealthy("SCAN gave an odd reply".into())),
                }
            }
            _ => return Err(unhealthy("SCAN gave an odd reply".into())),
        };
        let keys: Vec<Vec<u8>> = keys
            .into_iter()
            .filter_map(|k| match k {
                Reply::Bulk(Some(k)) => Some(k),
                _ => None,
            })
            .collect();
        // Only values this cache wrote go: another program's key that
        // happens to look like one stays.
        let heads = futures_util::future::join_all(keys.iter().map(|k| {
            redis.admin(vec![
                b"GETRANGE".to_vec(),
                k.clone(),
                b"0".to_vec(),
                b"3".to_vec(),
            ])
        }))
        .await;
        let ours: Vec<Vec<u8>> = keys
            .into_iter()
            .zip(heads)
            .filter(|(_, head)| matches!(head, Ok(Reply::Bulk(Some(h))) if is_entry(h)))
            .map(|(k, _)| k)
            .collect();
        if !ours.is_empty() {
            let mut del = vec![b"DEL".to_vec()];
            del.extend(ours);
            redis.admin(del).await.map_err(unhealthy)?;
        }
        if next == b"0" {
            return Ok(json!({"status": "success"}));
        }
        cursor = next;
    }
}

/// The `SCAN` pattern of this cache's keys: `[namespace:]` and a hex
/// SHA-256.
fn entry_pattern() -> String {
    let mut p = String::from("*");
    for _ in 0..64 {
        p.push_str("[0-9a-f]");
    }
    p
}

fn command(parts: &[&str]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.as_bytes().to_vec()).collect()
}

/// `INFO`'s text as redis-py's `info()` reads it: `name:value` lines, a
/// number where the value is one, `a=1,b=2` as an object.
fn parse_info(text: &str) -> Map<String, Value> {
    let mut info = Map::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = if value.contains('=') && !value.contains(' ') {
            let fields = value
                .split(',')
                .filter_map(|f| f.split_once('='))
                .map(|(k, v)| (k.to_string(), scalar(v)))
                .collect::<Map<_, _>>();
            Value::Object(fields)
        } else {
            scalar(value)
        };
        info.insert(name.to_string(), value);
    }
    info
}

/// `CLIENT LIST`'s lines, each `name=value ...` as an object of strings
/// (redis-py's `client_list()`).
fn parse_clients(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields = line
                .split(' ')
                .filter_map(|f| f.split_once('='))
                .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
                .collect::<Map<_, _>>();
            Value::Object(fields)
        })
        .collect()
}

fn scalar(v: &str) -> Value {
    if let Ok(n) = v.parse::<i64>() {
        return json!(n);
    }
    match v.parse::<f64>() {
        Ok(f) if f.is_finite() && v.contains('.') => json!(f),
        _ => Value::String(v.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_litellms() {
        assert_eq!(Op::parse("GET", "/cache/ping"), Some(Op::Ping));
        assert_eq!(Op::parse("POST", "/cache/delete"), Some(Op::Delete));
        assert_eq!(Op::parse("GET", "/cache/redis/info"), Some(Op::RedisInfo));
        assert_eq!(Op::parse("POST", "/cache/flushall"), Some(Op::Flushall));
        assert_eq!(Op::parse("GET", "/cache/settings"), Some(Op::Settings));
        assert_eq!(
            Op::parse("POST", "/cache/settings/test"),
            Some(Op::SettingsTest)
        );
        assert_eq!(Op::parse("GET", "/cache/delete"), None);
        assert_eq!(Op::parse("POST", "/cache/other"), None);
    }

    #[test]
    fn info_and_clients_read_as_redis_py_reads_them() {
        let info = parse_info(
            "# Server\r\nredis_version:7.2.4\r\nuptime_in_seconds:12\r\n\
             mem_fragmentation_ratio:1.25\r\n# Keyspace\r\ndb0:keys=3,expires=1\r\n",
        );
        assert_eq!(info["redis_version"], "7.2.4");
        assert_eq!(info["uptime_in_seconds"], 12);
        assert_eq!(info["mem_fragmentation_ratio"], 1.25);
        assert_eq!(info["db0"], json!({"keys": 3, "expires": 1}));
        let clients =
            parse_clients("id=3 addr=127.0.0.1:5 name=gateway-cache-core\nid=4 addr=x name=\n");
        assert_eq!(clients.len(), 2);
        assert_eq!(clients[0]["name"], "gateway-cache-core");
        assert_eq!(clients[1]["name"], "");
    }

    #[test]
    fn delete_takes_a_bounded_list_of_strings() {
        assert_eq!(
            delete_keys(br#"{"keys": ["a", "b"]}"#).ok(),
            Some(vec!["a".to_string(), "b".into()])
        );
        for bad in [
            &br#"{}"#[..],
            br#"{"keys": "a"}"#,
            br#"{"keys": [1]}"#,
            br#"{"keys": [""]}"#,
            b"nope",
        ] {
            let r = delete_keys(bad).expect_err("refused");
            assert_eq!((r.status, r.param), (400, Some("keys")));
        }
        let many = json!({"keys": vec!["k"; MAX_DELETE_KEYS + 1]}).to_string();
        assert!(delete_keys(many.as_bytes()).is_err());
    }

    #[test]
    fn the_pattern_matches_a_hash_with_or_without_a_namespace() {
        let p = entry_pattern();
        assert_eq!(p.matches("[0-9a-f]").count(), 64);
        assert!(p.starts_with('*'));
    }
}
