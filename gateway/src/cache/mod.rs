//! The response cache (LiteLLM's `litellm_settings.cache: true`), a phase
//! of the request path between admission and routing: a request's key
//! ([`key`]) is looked up after authentication and limits; a hit answers
//! without an upstream call; a miss's answer is stored once it is complete
//! and successful, a streamed one as it was relayed ([`stream`]).
//!
//! Entries live per core in this process ([`local`], `type: local`) or in
//! Redis ([`redis`], `type: redis`, through the limiter's client; each
//! core keeps a near copy of what it read, coherent through Redis's
//! `CLIENT TRACKING`: [`near`]). The
//! body's `cache` object ([`control`]) steers one request. Concurrent
//! misses for one key on a replica make one upstream call ([`flight`]).

pub mod control;
pub mod flight;
pub mod key;
mod key_skim;
pub mod local;
pub mod messages;
pub mod near;
pub mod redis;
pub mod responses;
pub mod settings;
pub mod slot;
pub mod stream;
mod tracking;

pub use control::Controls;
pub use flight::Join;
pub use key::Owner;
pub use local::{CoreCache, HitFacts, Stored};
pub use settings::{Backend, CacheSettings, Scope};
pub use slot::CacheSlot;

use crate::error::GatewayError;
use crate::inbound::Endpoint;
use memchr::memmem::FinderRev;
use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The configured cache of a process.
pub struct Cache {
    /// Tells this cache from the one it replaced ([`Cache::fit`]).
    generation: u64,
    settings: CacheSettings,
    redis: Option<redis::RedisStore>,
    flights: std::sync::Arc<flight::Flights>,
}

/// What the cache does for one request.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The entry's key (`x-litellm-cache-key`), one text shared by the
    /// spend row, the flight and the entry.
    pub key: std::sync::Arc<str>,
    /// Whether a stored answer may answer it.
    pub read: bool,
    /// Whether its answer is stored.
    pub write: bool,
    /// How long its answer is kept.
    pub ttl: Option<Duration>,
    /// Oldest stored answer it accepts.
    pub max_age: Option<Duration>,
    /// The client asked for a stream.
    pub stream: bool,
    /// A streamed answer carries a usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// The endpoint (the form of the stored answer).
    pub endpoint: Endpoint,
}

impl Cache {
    /// The cache of `settings`; `redis` is the limiter's Redis (URL,
    /// Cluster nodes, deadline, breaker settings), required for `type: redis`.
    pub fn new(
        settings: CacheSettings,
        redis: Option<(&str, &[String], Duration, crate::redis::BreakerSettings)>,
    ) -> Result<Cache, String> {
        let redis = match settings.backend {
            Backend::Local => None,
            Backend::Redis => {
                let (url, cluster, deadline, breaker) = redis.ok_or(
                    "litellm_settings.cache_params: type redis needs a Redis connection \
                     (host and port, url, REDIS_URL / REDIS_HOST or redis_startup_nodes)",
                )?;
                let near = settings.near_cache.then_some(near::NearBounds {
                    max_entries: settings.max_entries,
                    max_bytes: settings.max_bytes,
                    ttl: settings.near_ttl,
                });
                Some(redis::RedisStore::new(
                    url, cluster, deadline, breaker, near,
                )?)
            }
        };
        /// The generation of the next cache built (0 is no cache's).
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Ok(Cache {
            generation: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            settings,
            redis,
            flights: Default::default(),
        })
    }

    /// The settings in force.
    pub fn settings(&self) -> &CacheSettings {
        &self.settings
    }

    /// The Redis of `type: redis`.
    pub fn redis(&self) -> Option<&redis::RedisStore> {
        self.redis.as_ref()
    }

    /// A core's local cache, fitted to this cache: its share of the
    /// replica's bounds among `cores`.
    pub fn core_cache(&self, cores: usize) -> CoreCache {
        let core = CoreCache::idle(cores);
        self.fit(&core);
        core
    }

    /// Fits `core` to this cache when it was fitted to another (a cache
    /// rebuilt from settings read again): emptied, with this cache's
    /// bounds.
    pub fn fit(&self, core: &CoreCache) {
        if core.generation() == self.generation {
            return;
        }
        let cores = core.cores();
        let (entries, bytes) = match self.settings.backend {
            Backend::Local => (
                self.settings.max_entries.div_ceil(cores),
                self.settings.max_bytes / cores,
            ),
            Backend::Redis => (1, 0),
        };
        core.refit(entries, bytes, self.generation);
    }

    /// What the cache does for a request on `endpoint` for `group` by
    /// `owner` ([`Owner::of`]) whose body (without `cache`) is `body` and
    /// whose `cache` object is `controls`; `None` when it does nothing (an
    /// endpoint not cached, `mode: default_off` without `use-cache`).
    pub fn plan(
        &self,
        endpoint: Endpoint,
        group: &str,
        owner: Owner<'_>,
        body: &[u8],
        stream: bool,
        controls: &Controls,
    ) -> Result<Option<Plan>, GatewayError> {
        let s = &self.settings;
        let asked = !s.default_off || controls.use_cache;
        if !asked || !s.serves(endpoint) {
            return Ok(None);
        }
        if controls.no_cache && controls.no_store {
            return Ok(None);
        }
        let namespace = controls.namespace.as_deref().or(s.namespace.as_deref());
        let (key, include_usage) = key::key(endpoint, group, owner, body, namespace)
            .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
        Ok(Some(Plan {
            key,
            read: !controls.no_cache,
            write: !controls.no_store,
            ttl: controls.ttl.or(s.ttl),
            max_age: controls.max_age,
            stream,
            include_usage,
            endpoint,
        }))
    }

    /// The stored answer for `plan`, when there is one young enough.
    pub async fn lookup(&self, core: &CoreCache, plan: &Plan) -> Option<Stored> {
        if !plan.read {
            return None;
        }
        let stored = match &self.redis {
            None => {
                self.fit(core);
                core.get(&plan.key, Instant::now())?
            }
            Some(redis) => redis.get(&plan.key, core.cores()).await?,
        };
        if let Some(max_age) = plan.max_age {
            let age = unix_ms().saturating_sub(stored.stored_at_ms);
            if u128::from(age) > max_age.as_millis() {
                return None;
            }
        }
        Some(stored)
    }

    /// How a miss for `plan` takes part in its key's single flight: it
    /// leads when it may store and nobody leads, follows when it may read
    /// and another request leads ([`flight`]); alone when
    /// `single_flight_timeout` is 0.
    pub fn join(&self, plan: &Plan) -> Join {
        match self.settings.follow_wait {
            Some(_) => self.flights.join(&plan.key, plan.write, plan.read),
            None => Join::Alone,
        }
    }

    /// Longest a follower waits for its leader.
    pub fn follow_wait(&self) -> Duration {
        self.settings.follow_wait.unwrap_or(Duration::ZERO)
    }

    /// Stores a complete, successful answer for `plan`: `body` as the
    /// client got it (SSE for a stream, put together first; `tokens` is the
    /// upstream's usage, for a stream without its own), kept without a
    /// copy when whole. Too large, or a stream not understood: not stored.
    /// Returns what was stored.
    pub fn store(
        &self,
        core: &CoreCache,
        plan: &Plan,
        body: Vec<u8>,
        tokens: stream::Tokens,
    ) -> Option<Stored> {
        if !plan.write {
            return None;
        }
        let whole = match plan.stream {
            true => stream::collect(plan.endpoint, &body, tokens)?,
            false => {
                // Only a JSON object is an answer.
                if !body.trim_ascii_start().starts_with(b"{") {
                    return None;
                }
                body
            }
        };
        if whole.len() as u64 > self.settings.max_entry_bytes {
            return None;
        }
        let stored = Stored::new(whole.into(), unix_ms());
        match &self.redis {
            None => {
                self.fit(core);
                let expires = plan.ttl.and_then(|t| Instant::now().checked_add(t));
                core.put(&plan.key, stored.clone(), expires);
            }
            Some(redis) => redis.set(&plan.key, &stored, plan.ttl),
        }
        Some(stored)
    }

    /// Most bytes of an answer captured for storing: what is larger is
    /// never stored (a stream's SSE framing takes more than its answer).
    pub fn capture_limit(&self, plan: &Plan) -> usize {
        let most = self.settings.max_entry_bytes as usize;
        match plan.stream {
            true => most.saturating_mul(8),
            false => most,
        }
    }
}

/// The `cache_key` LiteLLM logs for a request when no cache is on.
pub fn off_key() -> std::sync::Arc<str> {
    static OFF: std::sync::LazyLock<std::sync::Arc<str>> =
        std::sync::LazyLock::new(|| std::sync::Arc::from("Cache OFF"));
    OFF.clone()
}

/// The last `"total_tokens"` count of an answer (its usage; in a played
/// back stream, the usage chunk), 0 without one: what a hit served.
/// An Anthropic message's usage has no total: its last `"input_tokens"`
/// and `"output_tokens"` are added.
pub fn total_tokens(answer: &[u8]) -> u64 {
    match last_count(answer, &TOTAL_TOKENS) {
        Some(n) => n,
        None => {
            let input = last_count(answer, &INPUT_TOKENS).unwrap_or(0);
            input.saturating_add(last_count(answer, &OUTPUT_TOKENS).unwrap_or(0))
        }
    }
}

/// A member name and its colon, searched from the end; built once.
type MemberFinder = LazyLock<FinderRev<'static>>;
static TOTAL_TOKENS: MemberFinder = LazyLock::new(|| FinderRev::new(b"\"total_tokens\":"));
static INPUT_TOKENS: MemberFinder = LazyLock::new(|| FinderRev::new(b"\"input_tokens\":"));
static OUTPUT_TOKENS: MemberFinder = LazyLock::new(|| FinderRev::new(b"\"output_tokens\":"));

/// The number after the last match of `name` (a member name and its colon).
fn last_count(answer: &[u8], name: &FinderRev<'_>) -> Option<u64> {
    let at = name.rfind(answer)?;
    let rest = answer[at + name.needle().len()..].trim_ascii_start();
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(yaml: &str) -> Cache {
        let doc: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        let s = CacheSettings::from_litellm(doc.get("litellm_settings"), &mut Vec::new())
            .unwrap()
            .unwrap();
        Cache::new(s, None).unwrap()
    }

    const BODY: &[u8] = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    const ANSWER: &[u8] = br#"{"id":"x","choices":[]}"#;

    #[test]
    fn a_core_fitted_to_a_rebuilt_cache_starts_empty_with_its_bounds() {
        let before = cache("litellm_settings: {cache: true, cache_params: {type: local}}");
        let core = CoreCache::idle(2);
        let plan = |c: &Cache| {
            c.plan(
                Endpoint::ChatCompletions,
                "g",
                Owner::Everyone,
                BODY,
                false,
                &Controls::default(),
            )
            .unwrap()
            .unwrap()
        };
        let p = plan(&before);
        // An idle core is fitted on first use.
        before.store(&core, &p, ANSWER.to_vec(), stream::Tokens::default());
        assert!(monoio_run(before.lookup(&core, &p)).is_some());
        assert_eq!(core.generation(), before.generation);
        // The same settings read again build another cache: the core is
        // emptied and takes its bounds (one entry a core of two here).
        let after = cache(
            "litellm_settings: {cache: true, cache_params: {type: local, max_size_in_memory: 2}}",
        );
        assert!(monoio_run(after.lookup(&core, &p)).is_none());
        assert_eq!(core.generation(), after.generation);
        after.store(&core, &p, ANSWER.to_vec(), stream::Tokens::default());
        let other = Cache::plan(
            &after,
            Endpoint::ChatCompletions,
            "other group",
            Owner::Everyone,
            BODY,
            false,
            &Controls::default(),
        )
        .unwrap()
        .unwrap();
        after.store(&core, &other, ANSWER.to_vec(), stream::Tokens::default());
        assert!(
            monoio_run(after.lookup(&core, &p)).is_none(),
            "one entry a core: the first was evicted"
        );
        assert!(monoio_run(after.lookup(&core, &other)).is_some());
        // Back on the older cache: fitted again, nothing served.
        assert!(monoio_run(before.lookup(&core, &other)).is_none());
    }

    #[test]
    fn stored_then_served_and_controls_apply() {
        let c = cache("litellm_settings: {cache: true, cache_params: {type: local}}");
        let core = c.core_cache(1);
        let none = Controls::default();
        let plan = c
            .plan(
                Endpoint::ChatCompletions,
                "g",
                Owner::Everyone,
                BODY,
                false,
                &none,
            )
            .unwrap()
            .unwrap();
        assert!(monoio_run(c.lookup(&core, &plan)).is_none());
        c.store(&core, &plan, ANSWER.to_vec(), stream::Tokens::default());
        assert_eq!(
            &monoio_run(c.lookup(&core, &plan)).unwrap().body[..],
            ANSWER
        );
        // no-cache: not served; no-store: not stored.
        let no_cache = Controls {
            no_cache: true,
            ..Controls::default()
        };
        let p = c
            .plan(
                Endpoint::ChatCompletions,
                "g",
                Owner::Everyone,
                BODY,
                false,
                &no_cache,
            )
            .unwrap()
            .unwrap();
        assert!(monoio_run(c.lookup(&core, &p)).is_none());
        let no_store = Controls {
            no_store: true,
            namespace: Some("other".into()),
            ..Controls::default()
        };
        let p = c
            .plan(
                Endpoint::ChatCompletions,
                "g",
                Owner::Everyone,
                BODY,
                false,
                &no_store,
            )
            .unwrap()
            .unwrap();
        c.store(&core, &p, ANSWER.to_vec(), stream::Tokens::default());
        assert!(monoio_run(c.lookup(&core, &p)).is_none());
        // An error body is not an answer.
        let p = c
            .plan(
                Endpoint::Completions,
                "g",
                Owner::Everyone,
                BODY,
                false,
                &none,
            )
            .unwrap()
            .unwrap();
        c.store(&core, &p, b"oops".to_vec(), stream::Tokens::default());
        assert!(monoio_run(c.lookup(&core, &p)).is_none());
    }

    #[test]
    fn total_tokens_of_an_answer() {
        assert_eq!(
            total_tokens(br#"{"usage":{"prompt_tokens":3,"total_tokens": 12}}"#),
            12
        );
        assert_eq!(total_tokens(br#"{"id":"x"}"#), 0);
        assert_eq!(
            total_tokens(br#"{"usage":{"input_tokens":7, "output_tokens": 5}}"#),
            12
        );
        assert_eq!(
            total_tokens(br#"{"total_tokens":99999999999999999999999}"#),
            0
        );
    }

    #[test]
    fn default_off_needs_use_cache() {
        let c = cache(
            "litellm_settings: {cache: true, cache_params: {type: local, mode: default_off}}",
        );
        let none = Controls::default();
        assert!(c
            .plan(
                Endpoint::ChatCompletions,
                "g",
                Owner::Everyone,
                BODY,
                false,
                &none
            )
            .unwrap()
            .is_none());
        let opt_in = Controls {
            use_cache: true,
            ..Controls::default()
        };
        assert!(c
            .plan(
                Endpoint::ChatCompletions,
                "g",
                Owner::Everyone,
                BODY,
                false,
                &opt_in
            )
            .unwrap()
            .is_some());
        assert!(c
            .plan(
                Endpoint::Messages,
                "g",
                Owner::Everyone,
                BODY,
                true,
                &opt_in
            )
            .unwrap()
            .is_some());
        assert!(c
            .plan(Endpoint::Rerank, "g", Owner::Everyone, BODY, false, &opt_in)
            .unwrap()
            .is_none());
    }

    #[test]
    fn redis_needs_a_connection() {
        let doc: serde_yaml::Value =
            serde_yaml::from_str("litellm_settings: {cache: true, cache_params: {type: redis}}")
                .unwrap();
        let s = CacheSettings::from_litellm(doc.get("litellm_settings"), &mut Vec::new())
            .unwrap()
            .unwrap();
        assert!(Cache::new(s, None).unwrap_err().contains("Redis"));
    }

    fn monoio_run<F: std::future::Future>(f: F) -> F::Output {
        monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
            .block_on(f)
    }
}
