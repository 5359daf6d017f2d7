//! What the soak does beside its load: key churn (a key created, used,
//! deleted and then refused, again and again), the Redis restart in the
//! middle, and the spend-row count at the end.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::gateway_proc::{exchange_once, GatewayProcess, MASTER_KEY, MODEL};
use crate::redis_proc::RedisProcess;

/// How the key churn went.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChurnReport {
    /// Keys created.
    pub created: u64,
    /// Keys deleted.
    pub deleted: u64,
    /// Requests with a fresh key answered 2xx (each leaves a spend row).
    pub served: u64,
    /// Requests with a deleted key refused with 401.
    pub refused_after_delete: u64,
    /// Steps that did not go as expected (the first few, in words).
    pub errors: Vec<String>,
    /// How many steps did not go as expected.
    pub error_count: u64,
}

impl ChurnReport {
    fn error(&mut self, what: String) {
        self.error_count += 1;
        if self.errors.len() < 10 {
            self.errors.push(what);
        }
    }
}

/// Creates, uses and deletes a key every `every` until `stop` is set.
pub fn churn(gateway: &GatewayProcess, every: Duration, stop: &AtomicBool) -> ChurnReport {
    let mut report = ChurnReport::default();
    let addr = gateway.addr();
    while !stop.load(Ordering::Acquire) {
        let started = Instant::now();
        match gateway.generate_key() {
            Ok(key) => {
                report.created += 1;
                match status(addr, &chat(&key)) {
                    Ok(200) => report.served += 1,
                    other => report.error(format!("request with a new key: {other:?}")),
                }
                let body = serde_json::json!({ "keys": [key] }).to_string();
                match status(addr, &post(MASTER_KEY, "/key/delete", &body)) {
                    Ok(200) => report.deleted += 1,
                    other => report.error(format!("/key/delete: {other:?}")),
                }
                match status(addr, &chat(&key)) {
                    Ok(401) => report.refused_after_delete += 1,
                    other => report.error(format!("request with a deleted key: {other:?}")),
                }
            }
            Err(e) => report.error(e),
        }
        let left = every.saturating_sub(started.elapsed());
        let until = Instant::now() + left;
        while !stop.load(Ordering::Acquire) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    report
}

/// Kills and restarts `redis` `after` from now, unless `stop` is set first;
/// returns it and whether it was restarted.
pub fn restart_redis_after(
    mut redis: RedisProcess,
    after: Duration,
    stop: &AtomicBool,
) -> (RedisProcess, Result<bool, String>) {
    let at = Instant::now() + after;
    while Instant::now() < at {
        if stop.load(Ordering::Acquire) {
            return (redis, Ok(false));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let restarted = redis.restart().map(|()| true);
    (redis, restarted)
}

/// Waits up to `wait` for `expected` success rows in `LiteLLM_SpendLogs`;
/// returns the count last seen.
pub fn success_rows(database_url: &str, expected: u64, wait: Duration) -> Result<u64, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let target =
            gateway::store::postgres::pg_target(database_url).map_err(|e| e.to_string())?;
        let (client, connection) = target.connect().await.map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let deadline = Instant::now() + wait;
        loop {
            let rows: i64 = client
                .query_one(
                    r#"SELECT count(*) FROM "LiteLLM_SpendLogs" WHERE status = 'success'"#,
                    &[],
                )
                .await
                .map_err(|e| e.to_string())?
                .get(0);
            let rows = u64::try_from(rows).unwrap_or(0);
            if rows >= expected || Instant::now() >= deadline {
                return Ok(rows);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

fn chat(key: &str) -> Vec<u8> {
    let body = serde_json::json!({
        "model": MODEL,
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "soak key churn"}],
    })
    .to_string();
    post(key, "/v1/chat/completions", &body)
}

fn post(key: &str, path: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The status of one exchange.
fn status(addr: SocketAddr, request: &[u8]) -> Result<u16, String> {
    let response = exchange_once(addr, request).map_err(|e| e.to_string())?;
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status line in {:?}", response.lines().next()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_the_key_and_the_body_length() {
        let text = String::from_utf8(post("sk-1", "/key/delete", "{\"keys\":[]}")).unwrap();
        assert!(text.starts_with("POST /key/delete HTTP/1.1\r\n"));
        assert!(text.contains("Authorization: Bearer sk-1\r\n"));
        assert!(text.contains("Content-Length: 11\r\n"));
        assert!(text.ends_with("\r\n\r\n{\"keys\":[]}"));
    }
}
