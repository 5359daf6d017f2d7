//! The limiter's settings: LiteLLM's env vars, Redis from LiteLLM's usual
//! places, and `gateway_settings.rate_limits` for what LiteLLM has no name for.

use super::descriptor::ScopeLimits;
use super::redis_target::RedisSources;
use super::window::Window;
use crate::redis::BreakerSettings;
use serde::Deserialize;
use std::time::Duration;

/// Where counters live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// This process's counters only (no Redis configured, or `mode: local`).
    Local,
    /// One Redis script call per request, shared by the fleet.
    Redis,
    /// Each replica takes quota from Redis in leases and spends it locally
    /// (rpm and tpm; parallel stays per request in Redis).
    Lease,
}

impl Mode {
    /// `local`, `redis` or `lease`, as configured and as `/health/readiness`
    /// reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Local => "local",
            Mode::Redis => "redis",
            Mode::Lease => "lease",
        }
    }
}

/// `lease_max_ttl_ms` when not set: this many times `lease_ttl_ms`.
const MAX_TTL_FACTOR: u64 = 8;

/// How quota is leased in [`Mode::Lease`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseSettings {
    /// Share of a limit one lease takes (at least one unit).
    pub fraction: f64,
    /// Life of a lease of a busy key (one that would use its whole share
    /// in it); kept under half the window so a lease's bucket is still live
    /// when the lease ends.
    pub ttl: Duration,
    /// Longest life of a lease of a slow key (sized to its use, see
    /// `lease.rs`): at least `ttl`, kept under half the window.
    pub max_ttl: Duration,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        LeaseSettings {
            fraction: 0.1,
            ttl: Duration::from_millis(1000),
            max_ttl: Duration::from_millis(1000 * MAX_TTL_FACTOR),
        }
    }
}

/// How limits are enforced while Redis cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackPolicy {
    /// Each replica enforces the full limit (the fleet may admit up to
    /// `replicas` times it while Redis is out).
    Full,
    /// Each replica enforces `limit / replicas` (rounded up), so the fleet
    /// stays near the limit at the cost of false rejections on uneven load.
    Share {
        /// Replicas sharing the limit.
        replicas: u64,
    },
}

impl FallbackPolicy {
    /// The limit one replica enforces.
    pub fn scale(&self, limit: u64) -> u64 {
        match self {
            FallbackPolicy::Full => limit,
            FallbackPolicy::Share { replicas } => limit.div_ceil((*replicas).max(1)),
        }
    }
}

impl std::fmt::Display for FallbackPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FallbackPolicy::Full => write!(f, "full limit per replica"),
            FallbackPolicy::Share { replicas } => {
                write!(f, "1/{replicas} of each limit per replica")
            }
        }
    }
}

/// `gateway_settings.rate_limits` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitsFile {
    /// `local`, `redis` or `lease` (default: `redis` when Redis is
    /// configured); the env var `GATEWAY_RATE_LIMIT_MODE` wins over it.
    pub mode: Option<String>,
    /// Lease mode: share of a limit taken per lease (default 0.1).
    pub lease_fraction: Option<f64>,
    /// Lease mode: life of a busy key's lease, milliseconds (default 1000).
    pub lease_ttl_ms: Option<u64>,
    /// Lease mode: longest life of a slow key's lease (small, sized to its
    /// use), milliseconds (default 8 x `lease_ttl_ms`).
    pub lease_max_ttl_ms: Option<u64>,
    /// Deadline of one limiter call to Redis, milliseconds (default 100).
    pub redis_timeout_ms: Option<u64>,
    /// `full` (default) or `share`.
    pub fallback_policy: Option<String>,
    /// Replicas sharing a limit under the `share` policy.
    pub fallback_replicas: Option<u64>,
    /// Seconds a parallel slot outlives a replica that crashed holding it
    /// (default 600).
    pub parallel_slot_ttl_secs: Option<u64>,
    /// Budgets spent against slices taken from Redis instead of a hold per
    /// request (default: on with Redis, in `lease` and `redis` mode).
    pub budget_slices: Option<bool>,
    /// Limits on the whole server.
    #[serde(default)]
    pub server: LimitsFile,
    /// Limits on each end user (the body's `user`).
    #[serde(default)]
    pub end_user: LimitsFile,
}

/// rpm/tpm/parallel as written in the config.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// Requests per window.
    pub rpm_limit: Option<i64>,
    /// Tokens per window.
    pub tpm_limit: Option<i64>,
    /// Requests in flight.
    pub max_parallel_requests: Option<i64>,
}

impl LimitsFile {
    fn limits(&self) -> ScopeLimits {
        ScopeLimits::from_fields(self.rpm_limit, self.tpm_limit, self.max_parallel_requests)
    }
}

/// The resolved settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitSettings {
    /// Where counters live.
    pub mode: Mode,
    /// The Redis URL, when configured (for a Cluster: the first startup
    /// node's, with the password).
    pub redis_url: Option<String>,
    /// A Redis Cluster's startup nodes (`host:port`); empty for one server.
    pub redis_cluster: Vec<String>,
    /// The sliding window (`LITELLM_RATE_LIMIT_WINDOW_SIZE`).
    pub window: Window,
    /// `LITELLM_TPM_TOKEN_RESERVATION_ENABLED`.
    pub reservation: bool,
    /// `REDIS_CIRCUIT_BREAKER_*`.
    pub breaker: BreakerSettings,
    /// Deadline of a limiter call.
    pub redis_timeout: Duration,
    /// What the fallback enforces.
    pub fallback: FallbackPolicy,
    /// Lifetime of a parallel slot in Redis.
    pub parallel_slot_ttl: Duration,
    /// Limits on the whole server.
    pub server: ScopeLimits,
    /// Limits on each end user.
    pub end_user: ScopeLimits,
    /// Lease mode's knobs.
    pub lease: LeaseSettings,
    /// Budgets spent against slices of their room taken from Redis
    /// (`budget::slice`), not a hold per request.
    pub budget_slices: bool,
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            mode: Mode::Local,
            redis_url: None,
            redis_cluster: Vec::new(),
            window: Window::new(60),
            reservation: true,
            breaker: BreakerSettings::default(),
            redis_timeout: Duration::from_millis(100),
            fallback: FallbackPolicy::Full,
            parallel_slot_ttl: Duration::from_secs(600),
            server: ScopeLimits::default(),
            end_user: ScopeLimits::default(),
            lease: LeaseSettings::default(),
            budget_slices: false,
        }
    }
}

impl LimitSettings {
    /// Resolves the settings; `Err` names the setting and the problem.
    pub fn resolve(
        file: &RateLimitsFile,
        global_max_parallel_requests: Option<i64>,
        redis: RedisSources<'_>,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<LimitSettings, String> {
        let (redis_url, redis_cluster) = match super::redis_target::target(&redis, lookup)? {
            Some((url, nodes)) => (Some(url), nodes),
            None => (redis_url(&redis, lookup), Vec::new()),
        };
        let mut s = LimitSettings {
            redis_url,
            redis_cluster,
            ..LimitSettings::default()
        };
        if let Some(secs) = env_num(lookup, "LITELLM_RATE_LIMIT_WINDOW_SIZE")? {
            s.window = Window::new(secs);
        }
        if let Some(on) = env_bool(lookup, "LITELLM_TPM_TOKEN_RESERVATION_ENABLED")? {
            s.reservation = on;
        }
        if let Some(on) = env_bool(lookup, "REDIS_CIRCUIT_BREAKER_ENABLED")? {
            s.breaker.enabled = on;
        }
        if let Some(n) = env_num(lookup, "REDIS_CIRCUIT_BREAKER_FAILURE_THRESHOLD")? {
            s.breaker.threshold = n.max(1) as u32;
        }
        if let Some(v) = lookup("REDIS_CIRCUIT_BREAKER_RECOVERY_TIMEOUT") {
            let secs: f64 = v.trim().parse().map_err(|_| {
                format!("REDIS_CIRCUIT_BREAKER_RECOVERY_TIMEOUT must be seconds, got {v:?}")
            })?;
            s.breaker.recovery = Duration::from_secs_f64(secs.max(0.0));
        }
        let env_mode = lookup("GATEWAY_RATE_LIMIT_MODE").filter(|m| !m.trim().is_empty());
        let mode = env_mode.as_deref().or(file.mode.as_deref()).map(str::trim);
        let no_redis = |m: &str| {
            format!("rate_limits.mode is {m} but no Redis is configured (REDIS_HOST, REDIS_URL or router_settings.redis_host)")
        };
        s.mode = match mode {
            None if s.redis_url.is_some() => Mode::Redis,
            None | Some("local") => Mode::Local,
            Some(m @ ("redis" | "lease")) if s.redis_url.is_none() => return Err(no_redis(m)),
            Some("redis") => Mode::Redis,
            Some("lease") => Mode::Lease,
            Some(other) => {
                return Err(format!(
                    "rate_limits.mode must be local, redis or lease, got {other:?}"
                ))
            }
        };
        if let Some(f) = file.lease_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Err(format!(
                    "rate_limits.lease_fraction must be in (0, 1], got {f}"
                ));
            }
            s.lease.fraction = f;
        }
        if let Some(ms) = file.lease_ttl_ms {
            s.lease.ttl = Duration::from_millis(ms.max(1));
        }
        s.lease.max_ttl = match file.lease_max_ttl_ms {
            Some(ms) => Duration::from_millis(ms),
            None => s.lease.ttl.saturating_mul(MAX_TTL_FACTOR as u32),
        };
        // A lease's units sit in the bucket it was charged at until it ends:
        // it must end while that bucket is live (see lease.rs).
        let half_window = Duration::from_millis(s.window.secs.saturating_mul(500));
        s.lease.ttl = s.lease.ttl.min(half_window);
        s.lease.max_ttl = s.lease.max_ttl.clamp(s.lease.ttl, half_window);
        if let Some(ms) = file.redis_timeout_ms {
            s.redis_timeout = Duration::from_millis(ms.max(1));
        }
        s.fallback = match file.fallback_policy.as_deref() {
            None | Some("full") => FallbackPolicy::Full,
            Some("share") => FallbackPolicy::Share {
                replicas: file
                    .fallback_replicas
                    .ok_or("rate_limits.fallback_policy share needs rate_limits.fallback_replicas")?
                    .max(1),
            },
            Some(other) => {
                return Err(format!(
                    "rate_limits.fallback_policy must be full or share, got {other:?}"
                ))
            }
        };
        if let Some(secs) = file.parallel_slot_ttl_secs {
            s.parallel_slot_ttl = Duration::from_secs(secs.max(1));
        }
        s.budget_slices = s.mode != Mode::Local && file.budget_slices.unwrap_or(true);
        s.server = file.server.limits();
        if s.server.parallel.is_none() {
            s.server.parallel =
                ScopeLimits::from_fields(None, None, global_max_parallel_requests).parallel;
        }
        s.end_user = file.end_user.limits();
        Ok(s)
    }
}

fn env_bool(lookup: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<bool>, String> {
    match lookup(name).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) if ["true", "1", "yes", "on"].contains(&v.as_str()) => Ok(Some(true)),
        Some(v) if ["false", "0", "no", "off"].contains(&v.as_str()) => Ok(Some(false)),
        Some(v) => Err(format!("{name} must be true or false, got {v:?}")),
    }
}

fn env_num(lookup: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<u64>, String> {
    match lookup(name) {
        None => Ok(None),
        Some(v) if v.trim().is_empty() => Ok(None),
        Some(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|n| *n >= 0.0)
            .map(|n| Some(n as u64))
            .ok_or_else(|| format!("{name} must be a non-negative number, got {v:?}")),
    }
}

/// `REDIS_URL`, else `REDIS_HOST`/`REDIS_PORT`/`REDIS_PASSWORD`, else
/// `router_settings.redis_*`, else `litellm_settings.cache_params` of a
/// Redis cache: LiteLLM's order.
fn redis_url(
    sources: &RedisSources<'_>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Option<String> {
    let non_empty = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    if let Some(url) = non_empty(lookup("REDIS_URL")) {
        return Some(url);
    }
    let yaml_str = |v: Option<&serde_yaml::Value>, k: &str| -> Option<String> {
        match v?.get(k)? {
            serde_yaml::Value::String(s) if !s.is_empty() => Some(s.clone()),
            serde_yaml::Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };
    let build = |host: String, port: Option<String>, password: Option<String>| {
        let port = port.unwrap_or_else(|| "6379".into());
        match password {
            Some(p) => format!("redis://:{p}@{host}:{port}"),
            None => format!("redis://{host}:{port}"),
        }
    };
    if let Some(host) = non_empty(lookup("REDIS_HOST")) {
        return Some(build(
            host,
            non_empty(lookup("REDIS_PORT")),
            non_empty(lookup("REDIS_PASSWORD")),
        ));
    }
    let router = sources.router_settings;
    if let Some(url) = yaml_str(router, "redis_url") {
        return Some(url);
    }
    if let Some(host) = yaml_str(router, "redis_host") {
        return Some(build(
            host,
            yaml_str(router, "redis_port"),
            yaml_str(router, "redis_password"),
        ));
    }
    let cache = sources.litellm_settings.and_then(|l| l.get("cache_params"));
    let is_redis = cache
        .and_then(|c| c.get("type"))
        .and_then(|t| t.as_str())
        .is_none_or(|t| t == "redis");
    if is_redis {
        if let Some(url) = yaml_str(cache, "url") {
            return Some(url);
        }
        if let Some(host) = yaml_str(cache, "host") {
            return Some(build(
                host,
                yaml_str(cache, "port"),
                yaml_str(cache, "password"),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(yaml: &str, env: &[(&str, &str)]) -> Result<LimitSettings, String> {
        let doc: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        let file: RateLimitsFile = doc
            .get("rate_limits")
            .map(|v| serde_yaml::from_value(v.clone()).unwrap())
            .unwrap_or_default();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LimitSettings::resolve(
            &file,
            None,
            RedisSources {
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
    fn defaults_are_litellms() {
        let s = resolve("{}", &[]).unwrap();
        assert_eq!(s.mode, Mode::Local);
        assert!(s.reservation && s.breaker.enabled);
        assert_eq!(s.breaker.threshold, 5);
        assert_eq!(s.breaker.recovery, Duration::from_secs(60));
        assert_eq!(s.window.secs, 60);
        assert_eq!(s.redis_timeout, Duration::from_millis(100));
    }

    #[test]
    fn env_vars_switch_reservation_breaker_and_window() {
        let s = resolve(
            "{}",
            &[
                ("LITELLM_TPM_TOKEN_RESERVATION_ENABLED", "false"),
                ("REDIS_CIRCUIT_BREAKER_ENABLED", "False"),
                ("REDIS_CIRCUIT_BREAKER_FAILURE_THRESHOLD", "2"),
                ("REDIS_CIRCUIT_BREAKER_RECOVERY_TIMEOUT", "1.5"),
                ("LITELLM_RATE_LIMIT_WINDOW_SIZE", "10"),
            ],
        )
        .unwrap();
        assert!(!s.reservation && !s.breaker.enabled);
        assert_eq!(s.breaker.threshold, 2);
        assert_eq!(s.breaker.recovery, Duration::from_millis(1500));
        assert_eq!(s.window.secs, 10);
        assert!(resolve("{}", &[("REDIS_CIRCUIT_BREAKER_ENABLED", "maybe")]).is_err());
    }

    #[test]
    fn redis_is_found_where_litellm_looks() {
        let s = resolve("router_settings: {redis_host: r1, redis_port: 6380}", &[]).unwrap();
        assert_eq!(s.redis_url.as_deref(), Some("redis://r1:6380"));
        assert_eq!(s.mode, Mode::Redis);
        let s = resolve(
            "litellm_settings: {cache: true, cache_params: {type: redis, host: c, port: 1, password: pw}}",
            &[],
        )
        .unwrap();
        assert_eq!(s.redis_url.as_deref(), Some("redis://:pw@c:1"));
        let s = resolve("router_settings: {redis_host: r1}", &[("REDIS_HOST", "e")]).unwrap();
        assert_eq!(s.redis_url.as_deref(), Some("redis://e:6379"));
        let s = resolve(
            "router_settings: {redis_host: r1}\nrate_limits: {mode: local}",
            &[],
        )
        .unwrap();
        assert_eq!(s.mode, Mode::Local);
        assert!(resolve("rate_limits: {mode: redis}", &[]).is_err());
    }

    #[test]
    fn budget_slices_default_on_with_redis_and_can_be_turned_off() {
        let redis = "router_settings: {redis_host: r1}\n";
        let mode = |m: &str, extra: &str| {
            resolve(&format!("{redis}rate_limits: {{mode: {m}{extra}}}"), &[])
                .unwrap()
                .budget_slices
        };
        assert!(mode("lease", ""));
        assert!(mode("redis", ""));
        assert!(!mode("redis", ", budget_slices: false"));
        assert!(!mode("lease", ", budget_slices: false"));
        assert!(!mode("local", ", budget_slices: true"), "no Redis to slice");
    }

    #[test]
    fn lease_mode_from_config_or_env_needs_redis() {
        let redis = "router_settings: {redis_host: r1}\n";
        let s = resolve(&format!("{redis}rate_limits: {{mode: lease}}"), &[]).unwrap();
        assert_eq!(s.mode, Mode::Lease);
        assert_eq!(s.lease, LeaseSettings::default());
        let s = resolve(redis, &[("GATEWAY_RATE_LIMIT_MODE", "lease")]).unwrap();
        assert_eq!(s.mode, Mode::Lease);
        // The env var wins over the file.
        let s = resolve(
            &format!("{redis}rate_limits: {{mode: lease}}"),
            &[("GATEWAY_RATE_LIMIT_MODE", "redis")],
        )
        .unwrap();
        assert_eq!(s.mode, Mode::Redis);
        assert!(resolve("rate_limits: {mode: lease}", &[]).is_err());
        assert!(resolve("{}", &[("GATEWAY_RATE_LIMIT_MODE", "lease")]).is_err());
        assert!(resolve(redis, &[("GATEWAY_RATE_LIMIT_MODE", "leased")]).is_err());
        assert_eq!(Mode::Lease.as_str(), "lease");
    }

    #[test]
    fn lease_knobs_are_checked_and_the_ttl_kept_under_half_the_window() {
        let redis = "router_settings: {redis_host: r1}\n";
        let s = resolve(
            &format!(
                "{redis}rate_limits: {{mode: lease, lease_fraction: 0.25, lease_ttl_ms: 300}}"
            ),
            &[],
        )
        .unwrap();
        assert_eq!(s.lease.fraction, 0.25);
        assert_eq!(s.lease.ttl, Duration::from_millis(300));
        assert_eq!(s.lease.max_ttl, Duration::from_millis(2400), "8 lives");
        let s = resolve(
            &format!("{redis}rate_limits: {{mode: lease, lease_max_ttl_ms: 50000}}"),
            &[],
        )
        .unwrap();
        assert_eq!(s.lease.max_ttl, Duration::from_secs(30), "half the window");
        let s = resolve(
            &format!("{redis}rate_limits: {{mode: lease, lease_max_ttl_ms: 10}}"),
            &[],
        )
        .unwrap();
        assert_eq!(s.lease.max_ttl, s.lease.ttl, "never under the busy life");
        for bad in ["0", "1.5", "-0.1", ".nan"] {
            let yaml = format!("{redis}rate_limits: {{mode: lease, lease_fraction: {bad}}}");
            assert!(resolve(&yaml, &[]).is_err(), "{bad}");
        }
        let s = resolve(
            &format!("{redis}rate_limits: {{mode: lease, lease_ttl_ms: 5000}}"),
            &[("LITELLM_RATE_LIMIT_WINDOW_SIZE", "2")],
        )
        .unwrap();
        assert_eq!(s.lease.ttl, Duration::from_millis(1000));
        assert_eq!(s.lease.max_ttl, Duration::from_millis(1000));
    }

    #[test]
    fn fallback_share_divides_the_limit() {
        let s = resolve(
            "rate_limits: {fallback_policy: share, fallback_replicas: 3}",
            &[],
        )
        .unwrap();
        assert_eq!(s.fallback.scale(10), 4);
        assert_eq!(FallbackPolicy::Full.scale(10), 10);
        assert!(resolve("rate_limits: {fallback_policy: share}", &[]).is_err());
    }

    #[test]
    fn server_and_end_user_limits_from_config() {
        let s = resolve(
            "rate_limits: {server: {rpm_limit: 1000}, end_user: {tpm_limit: 50, max_parallel_requests: 2}}",
            &[],
        )
        .unwrap();
        assert_eq!(s.server.rpm, Some(1000));
        assert_eq!((s.end_user.tpm, s.end_user.parallel), (Some(50), Some(2)));
    }
}
