//! The Redis targets LiteLLM reads before its plain URL and host settings:
//! `general_settings.coordination_redis` (which wins over everything: a
//! Cluster's `startup_nodes`, a `url` or a `host`), then a Redis Cluster
//! from the env var `REDIS_CLUSTER_NODES` or from
//! `litellm_settings.cache_params.redis_startup_nodes`. Startup nodes are
//! a JSON (or YAML) list of `{"host", "port"}`.

use crate::redis::slots::join_host_port;
use serde_yaml::Value;

/// Where LiteLLM reads Redis from, besides the environment.
pub struct RedisSources<'a> {
    /// `router_settings` (`redis_url`, `redis_host`, `redis_port`, `redis_password`).
    pub router_settings: Option<&'a serde_yaml::Value>,
    /// `litellm_settings` (`cache_params` of a Redis cache).
    pub litellm_settings: Option<&'a serde_yaml::Value>,
    /// `general_settings.coordination_redis`, which wins over the rest.
    pub coordination_redis: Option<&'a serde_yaml::Value>,
}

/// Startup nodes accepted at most.
const MAX_NODES: usize = 64;

/// The Redis URL and the Cluster's startup nodes (`host:port`, empty for
/// one server) from the places above; `None` when none is set, so the
/// URL and host settings decide.
pub fn target(
    sources: &RedisSources<'_>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(String, Vec<String>)>, String> {
    let env = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    if let Some(block) = sources.coordination_redis {
        const NAME: &str = "general_settings.coordination_redis";
        if !block.is_mapping() {
            return Err(format!("{NAME} must be a mapping of Redis settings"));
        }
        let password = text(block, "password").or_else(|| env("REDIS_PASSWORD"));
        let username = text(block, "username").or_else(|| env("REDIS_USERNAME"));
        if let Some(nodes) = block.get("startup_nodes").filter(|n| !n.is_null()) {
            no_tls(block, NAME)?;
            let nodes = startup_nodes(nodes, &format!("{NAME}.startup_nodes"))?;
            return Ok(Some(cluster(nodes, username, password)));
        }
        if let Some(url) = text(block, "url") {
            return Ok(Some((url, Vec::new())));
        }
        if let Some(host) = text(block, "host") {
            let port = text(block, "port").unwrap_or_else(|| "6379".into());
            let scheme = match block.get("ssl").and_then(Value::as_bool) {
                Some(true) => "rediss",
                _ => "redis",
            };
            let url = format!(
                "{scheme}://{}{}:{port}",
                credentials(username, password),
                host
            );
            return Ok(Some((url, Vec::new())));
        }
        return Err(format!(
            "{NAME} needs a connection target: startup_nodes, url or host"
        ));
    }
    if let Some(json) = env("REDIS_CLUSTER_NODES") {
        let nodes: Value = serde_json::from_str(&json).map_err(|e| {
            format!("REDIS_CLUSTER_NODES must be a JSON list of {{\"host\", \"port\"}}: {e}")
        })?;
        let nodes = startup_nodes(&nodes, "REDIS_CLUSTER_NODES")?;
        return Ok(Some(cluster(
            nodes,
            env("REDIS_USERNAME"),
            env("REDIS_PASSWORD"),
        )));
    }
    let cache = sources.litellm_settings.and_then(|l| l.get("cache_params"));
    let is_redis = cache
        .and_then(|c| c.get("type"))
        .and_then(Value::as_str)
        .is_none_or(|t| t == "redis");
    if let (Some(cache), true) = (cache, is_redis) {
        if let Some(nodes) = cache.get("redis_startup_nodes").filter(|n| !n.is_null()) {
            no_tls(cache, "litellm_settings.cache_params")?;
            let nodes = startup_nodes(nodes, "litellm_settings.cache_params.redis_startup_nodes")?;
            let password = text(cache, "password").or_else(|| env("REDIS_PASSWORD"));
            let username = text(cache, "username").or_else(|| env("REDIS_USERNAME"));
            return Ok(Some(cluster(nodes, username, password)));
        }
    }
    Ok(None)
}

/// Refuses `ssl: true` beside startup nodes: the Cluster links speak plain
/// RESP only (a TLS Cluster would otherwise fail at every call).
fn no_tls(block: &Value, name: &str) -> Result<(), String> {
    match block.get("ssl").and_then(Value::as_bool) {
        Some(true) => Err(format!(
            "{name}: ssl with startup_nodes (a Redis Cluster over TLS) is not supported yet"
        )),
        _ => Ok(()),
    }
}

/// A string or number setting, when not empty.
fn text(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn credentials(username: Option<String>, password: Option<String>) -> String {
    let enc = |s: &str| {
        percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    match (username, password) {
        (Some(u), Some(p)) => format!("{}:{}@", enc(&u), enc(&p)),
        (None, Some(p)) => format!(":{}@", enc(&p)),
        _ => String::new(),
    }
}

/// The URL the first node is reached at (the credentials for all) and the
/// nodes.
fn cluster(
    nodes: Vec<String>,
    username: Option<String>,
    password: Option<String>,
) -> (String, Vec<String>) {
    let url = format!("redis://{}{}", credentials(username, password), nodes[0]);
    (url, nodes)
}

/// Reads a list of `{"host", "port"}`; the error names `setting`.
fn startup_nodes(v: &Value, setting: &str) -> Result<Vec<String>, String> {
    let bad = |why: &str| format!("{setting}: {why}");
    // LiteLLM also takes the list as a JSON string.
    let parsed;
    let v = match v {
        Value::String(s) => {
            parsed =
                serde_json::from_str::<Value>(s).map_err(|e| bad(&format!("not JSON: {e}")))?;
            &parsed
        }
        v => v,
    };
    let items = v
        .as_sequence()
        .ok_or_else(|| bad("must be a list of {host, port}"))?;
    if items.is_empty() {
        return Err(bad("lists no node"));
    }
    if items.len() > MAX_NODES {
        return Err(bad(&format!("lists more than {MAX_NODES} nodes")));
    }
    items
        .iter()
        .map(|item| {
            let host = item
                .get("host")
                .and_then(Value::as_str)
                .filter(|h| !h.is_empty() && !h.contains(['/', '@', ' ']))
                .ok_or_else(|| bad("each node needs a host"))?;
            let port = match item.get("port") {
                Some(Value::Number(n)) => n.as_u64(),
                Some(Value::String(s)) => s.trim().parse().ok(),
                None => Some(6379),
                _ => None,
            }
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p > 0)
            .ok_or_else(|| bad("each node's port must be 1 to 65535"))?;
            Ok(join_host_port(host.trim_matches(['[', ']']), port))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(yaml: &str, env: &[(&str, &str)]) -> Result<Option<(String, Vec<String>)>, String> {
        let doc: Value = serde_yaml::from_str(yaml).unwrap();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        target(
            &RedisSources {
                router_settings: doc.get("router_settings"),
                litellm_settings: doc.get("litellm_settings"),
                coordination_redis: doc
                    .get("general_settings")
                    .and_then(|g| g.get("coordination_redis")),
            },
            &move |k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
        )
    }

    #[test]
    fn cluster_nodes_from_the_env_as_litellm_reads_them() {
        let got = resolve(
            "{}",
            &[
                (
                    "REDIS_CLUSTER_NODES",
                    r#"[{"host": "10.0.0.1", "port": 7000}, {"host": "r2", "port": "7001"}]"#,
                ),
                ("REDIS_PASSWORD", "p@ss"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(got.0, "redis://:p%40ss@10.0.0.1:7000");
        assert_eq!(got.1, ["10.0.0.1:7000", "r2:7001"]);
        assert_eq!(resolve("{}", &[]).unwrap(), None);
        for bad in [
            "not json",
            "[]",
            r#"[{"port": 1}]"#,
            r#"[{"host": "h", "port": 0}]"#,
            r#"[{"host": "h", "port": 70000}]"#,
            r#"{"host": "h"}"#,
        ] {
            let err = resolve("{}", &[("REDIS_CLUSTER_NODES", bad)]).unwrap_err();
            assert!(err.starts_with("REDIS_CLUSTER_NODES"), "{bad}: {err}");
        }
    }

    #[test]
    fn cache_params_startup_nodes_and_coordination_redis_which_wins() {
        let cache = "litellm_settings: {cache: true, cache_params: {type: redis, password: pw, redis_startup_nodes: [{host: c1, port: 7000}]}}\n";
        let got = resolve(cache, &[]).unwrap().unwrap();
        assert_eq!(got, ("redis://:pw@c1:7000".into(), vec!["c1:7000".into()]));
        // The env's nodes come before the cache's.
        let got = resolve(
            cache,
            &[("REDIS_CLUSTER_NODES", r#"[{"host": "e", "port": 1}]"#)],
        )
        .unwrap()
        .unwrap();
        assert_eq!(got.1, ["e:1"]);
        // coordination_redis wins over both, cluster or not.
        let both = format!(
            "{cache}general_settings: {{coordination_redis: {{startup_nodes: [{{host: k, port: 7100}}, {{host: '::1', port: 7101}}]}}}}\n"
        );
        let got = resolve(
            &both,
            &[("REDIS_CLUSTER_NODES", r#"[{"host": "e", "port": 1}]"#)],
        )
        .unwrap()
        .unwrap();
        assert_eq!(got.1, ["k:7100", "[::1]:7101"]);
        let single = format!("{cache}general_settings: {{coordination_redis: {{host: s, port: 6390, password: x}}}}\n");
        assert_eq!(
            resolve(&single, &[]).unwrap(),
            Some(("redis://:x@s:6390".into(), Vec::new()))
        );
        let url = "general_settings: {coordination_redis: {url: 'redis://u:6379/0'}}\n";
        assert_eq!(resolve(url, &[]).unwrap().unwrap().0, "redis://u:6379/0");
        let tls = "general_settings: {coordination_redis: {ssl: true, startup_nodes: [{host: k, port: 1}]}}\n";
        assert!(resolve(tls, &[]).unwrap_err().contains("not supported"));
        let empty = "general_settings: {coordination_redis: {ssl: true}}\n";
        assert!(resolve(empty, &[])
            .unwrap_err()
            .contains("needs a connection target"));
        let bad =
            "general_settings: {coordination_redis: {startup_nodes: [{host: k, port: -1}]}}\n";
        assert!(resolve(bad, &[])
            .unwrap_err()
            .starts_with("general_settings.coordination_redis.startup_nodes"));
    }
}
