//! Console logouts shared by the fleet through Redis, when the fleet
//! counts in Redis (the limiter's mode `redis` or `lease`, its client and
//! breaker): a logout sets `{gateway:console}:logout:<id>` until the
//! session would have expired, and every use of a session on any replica
//! asks whether it is set (one round trip, on the console's calls only,
//! never on an LLM request). While Redis does not answer, a replica goes
//! by the logouts it has seen itself.

use crate::limits::{Limiter, LuaScript, ScriptCall};

/// Marks a session logged out: `KEYS[1]` for `ARGV[1]` seconds.
static MARK: LuaScript =
    LuaScript::new("redis.call('SET', KEYS[1], '1', 'EX', ARGV[1])\nreturn {1}\n");
/// Whether a session is logged out: `{1}` when `KEYS[1]` is set.
static CHECK: LuaScript = LuaScript::new("return {redis.call('EXISTS', KEYS[1])}\n");

/// The Redis key of session `id`'s logout.
fn key(id: &str) -> String {
    format!("{{gateway:console}}:logout:{id}")
}

/// Tells the fleet session `id` ended, remembered for `ttl_secs` (at least
/// one); whether Redis confirmed it (`true` without a shared Redis: there is
/// no fleet to tell).
pub async fn announce(limiter: &Limiter, id: &str, ttl_secs: u64) -> bool {
    if !limiter.shared() {
        return true;
    }
    let call = ScriptCall {
        script: &MARK,
        keys: vec![key(id)],
        args: vec![ttl_secs.max(1).to_string()],
    };
    limiter.eval(call, None, |_| None, None).await.is_some()
}

/// Whether another replica logged session `id` out (`false` without a
/// shared Redis, or while it does not answer).
pub async fn logged_out_elsewhere(limiter: &Limiter, id: &str) -> bool {
    if !limiter.shared() {
        return false;
    }
    let call = ScriptCall {
        script: &CHECK,
        keys: vec![key(id)],
        args: Vec::new(),
    };
    matches!(
        limiter.eval(call, None, |_| None, None).await.as_deref(),
        Some([1])
    )
}
