//! The fleet's current use of a request's limits, read from Redis without
//! changing anything: what the admin API's live limits show in `redis` and
//! `lease` mode (in `lease` mode a counter holds the units granted to the
//! replicas' leases, spent or not, as admissions see them).

use super::descriptor::{Descriptor, Kind};
use super::remote::{LuaScript, ScriptCall};
use super::Limiter;

/// `usage.lua`: one counter's units in the window, or its live slots.
static USAGE_LUA: LuaScript = LuaScript::new(include_str!("usage.lua"));

/// The call reading descriptor `d`'s use.
fn usage_call(limiter: &Limiter, d: &Descriptor) -> ScriptCall {
    let window = limiter.settings().window;
    let args = match d.kind {
        Kind::Parallel => vec!["p".to_string()],
        Kind::Requests | Kind::Tokens => vec![
            "w".to_string(),
            window.bucket_secs.to_string(),
            window.buckets.to_string(),
        ],
    };
    ScriptCall {
        script: &USAGE_LUA,
        keys: vec![d.key.clone()],
        args,
    }
}

impl Limiter {
    /// The fleet's current use of each of `descs`, in order, as Redis holds
    /// it: requests and tokens in the sliding window, parallel slots not
    /// lapsed. One call per counter (a Cluster keeps a request's scopes on
    /// different slots), sent together; `None` without Redis, while the
    /// breaker is open, or when any counter did not answer within the
    /// Redis deadline. Read-only.
    pub async fn fleet_usage(&self, descs: &[Descriptor]) -> Option<Vec<u64>> {
        let calls = descs
            .iter()
            .map(|d| self.eval(usage_call(self, d), None, |_| None, None));
        let replies = futures_util::future::join_all(calls).await;
        replies
            .into_iter()
            .map(|r| match r.as_deref() {
                Some([units]) => Some((*units).max(0) as u64),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{LimitSettings, Scope};

    #[test]
    fn window_counters_are_read_over_the_limiters_window_and_slots_alone() {
        let (limiter, _) = Limiter::new(LimitSettings::default());
        let window = limiter.settings().window;
        let rpm = Descriptor::new(Scope::ApiKey, "k", Kind::Requests, 5);
        let call = usage_call(&limiter, &rpm);
        assert_eq!(call.keys, ["{api_key:k}:requests"]);
        assert_eq!(
            call.args,
            [
                "w".to_string(),
                window.bucket_secs.to_string(),
                window.buckets.to_string()
            ]
        );
        let slots = Descriptor::new(Scope::Team, "t", Kind::Parallel, 2);
        assert_eq!(usage_call(&limiter, &slots).args, ["p"]);
    }
}
