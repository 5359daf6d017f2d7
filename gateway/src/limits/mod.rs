//! Rate limits: rpm, tpm and parallel requests for every scope a request
//! belongs to (server, key, user, team, the key's per-model limits, end
//! user), checked and charged all-or-none at admission and settled after
//! the response.
//!
//! With Redis configured, one `limiter.lua` call per request decides for the
//! whole fleet (batched with other cores' calls into one pipeline by the
//! control plane, [`remote`]). Without Redis, while it is unreachable, or
//! while Redis's circuit breaker is open, the same check runs on this process's
//! lock-free counters ([`local`]) under the configured fallback policy.
//! Counting is a sliding window ([`window`]): no 2x burst at a boundary.
//!
//! The cores ([`direct`]) and the control plane ([`remote`]) speak Redis
//! through the gateway's client ([`crate::redis`]); the limiter's calls
//! become its commands in [`batch`] (the runs of a batchable script of
//! another module grouped into one command by [`grouped`]), and one flush
//! with its deadline, breaker and reconnection is [`link`]. What a call
//! carries is [`call`], what a check answers [`verdict`]; the files import
//! one way (checked by `gateway/tests/layers.rs`), this root above them
//! all.
//!
//! On a Redis Cluster ([`split`]) each request is admitted slot by slot in
//! one round trip, the slots that admitted being given back when another
//! refuses. Other modules' scripts ([`Limiter::eval`])
//! run there too, one slot per call.
//!
//! In lease mode ([`lease`]) each replica takes rpm/tpm quota from Redis in
//! leases through the same scripts, and parallel slots in slot leases
//! ([`slot_lease`]), and spends them with local atomics.
//!
//! TPM reservation (`LITELLM_TPM_TOKEN_RESERVATION_ENABLED`, default on)
//! charges LiteLLM's estimate at admission and reconciles it to the real
//! usage; off, TPM admits while usage is under the limit and charges the
//! real usage after the call.

mod batch;
mod call;
mod descriptor;
mod direct;
mod grouped;
mod lease;
mod link;
mod local;
mod outcome;
mod redis_target;
mod release;
pub mod remote;
mod script;
mod settings;
mod slot_lease;
mod split;
mod usage;
mod verdict;
mod window;

pub use descriptor::{CounterNames, Descriptor, Kind, Scope, ScopeLimits};
pub use local::LocalLimiter;
pub use redis_target::RedisSources;
pub use settings::{
    FallbackPolicy, LeaseSettings, LimitSettings, LimitsFile, Mode, RateLimitsFile,
};
pub use window::Window;

use crate::error::GatewayError;
use crate::redis::{Breaker, BreakerState, RemoteError};
use crate::store::{KeyRecord, TeamRecord, UserRecord};
use call::{Call, Entry, ScriptDone};
pub use call::{LuaScript, ScriptCall};
use lease::{Hold, LeaseRedis, LeaseTable, Leased};
use remote::{LeaseExpiry, RemoteRunner};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};
pub use verdict::Verdict;

/// The stored rows whose limits a virtual key's request is checked against.
#[derive(Debug, Clone, Copy)]
pub struct KeyRows<'a> {
    /// The key.
    pub key: &'a KeyRecord,
    /// The key's team, if it has one.
    pub team: Option<&'a TeamRecord>,
    /// The key's user, if it has one.
    pub user: Option<&'a UserRecord>,
    /// The organization of the key's team and its rpm/tpm limits, when it
    /// sets any.
    pub org: Option<(&'a str, &'a ScopeLimits)>,
    /// Where the key's own counter names are kept once made (the cached
    /// key's), so its requests share them instead of building them.
    pub names: Option<&'a std::sync::OnceLock<CounterNames>>,
}

/// What admission needs to know of a request.
#[derive(Debug)]
pub struct AdmitInput<'a> {
    /// The caller's rows when a virtual key calls; `None` for the master
    /// key and an open gateway, which have no limits of their own.
    pub key: Option<KeyRows<'a>>,
    /// The model group asked for (after aliases).
    pub model: &'a str,
    /// The body's `user` (LiteLLM's end user).
    pub end_user: Option<&'a str>,
    /// The limits of the end user's budget row (`/customer/*`), each one
    /// set taking the place of the config's `rate_limits.end_user` one.
    pub end_user_limits: Option<ScopeLimits>,
    /// Prompt tokens, estimated as LiteLLM does (characters / 4), computed
    /// only when a TPM reservation needs it.
    pub prompt: &'a crate::spend::PromptEstimate,
    /// `max_tokens` / `max_completion_tokens`.
    pub max_tokens: Option<u64>,
    /// LiteLLM's `default_estimated_output_tokens` for this request (key,
    /// team): reserved in place of the heuristic when `max_tokens` is absent.
    pub estimated_output: Option<u64>,
    /// The endpoint writes no output tokens (embeddings, rerank,
    /// moderations, images, audio): only the input is reserved.
    pub embeddings: bool,
    /// The request id; names its parallel slots.
    pub request_id: &'a str,
    /// Limits the caller built beyond these (a key's per-tag ones).
    pub extra: Vec<Descriptor>,
}

/// The limiter of this process.
pub struct Limiter {
    settings: LimitSettings,
    /// The server's and end users' limits from the config file, which a
    /// reload replaces (the copies in `settings` are those of start-up).
    scopes: arc_swap::ArcSwap<FileScopes>,
    local: LocalLimiter,
    remote: Option<RemoteHandle>,
    leases: Option<Arc<LeaseTable>>,
    calls: Arc<AtomicU64>,
}

/// The limits of the config file a reload may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileScopes {
    server: ScopeLimits,
    end_user: ScopeLimits,
}

struct RemoteHandle {
    /// The control plane's runner: leases, and per-request calls when the
    /// URL is not plain `redis://`.
    tx: mpsc::Sender<Call>,
    breaker: Arc<Breaker>,
    /// Each core's own connection, for per-request calls.
    direct: Option<Arc<link::LinkConfig>>,
}

impl RemoteHandle {
    /// Queues a per-request call on this core's link (or the control
    /// plane); `Err` gives it back when the queue is full.
    fn submit(&self, call: Call) -> Result<(), Call> {
        match &self.direct {
            Some(link) => direct::submit(link, call),
            None => self.tx.try_send(call).map_err(|e| match e {
                mpsc::error::TrySendError::Full(c) | mpsc::error::TrySendError::Closed(c) => c,
            }),
        }
    }
}

/// The limiter's Redis as its lease table uses it.
struct LeaseLink<'a> {
    limiter: &'a Limiter,
    remote: &'a RemoteHandle,
}

impl LeaseRedis for LeaseLink<'_> {
    async fn ask(&self, entries: Vec<Entry>, what: &str) -> Option<Verdict> {
        self.limiter.ask_redis(self.remote, entries, what).await
    }

    fn send(&self, call: Call) {
        self.limiter.send(self.remote, call);
    }

    async fn eval(
        &self,
        call: ScriptCall,
        deadline_arg: Option<usize>,
        late: impl FnOnce(&[i64]) -> Option<ScriptCall> + Send + Sync + 'static,
        undo: Option<ScriptCall>,
    ) -> Option<Vec<i64>> {
        self.limiter.eval(call, deadline_arg, late, undo).await
    }
}

impl Limiter {
    /// A limiter for `settings`; in Redis mode also the runner the control
    /// plane must start.
    pub fn new(settings: LimitSettings) -> (Limiter, Option<RemoteRunner>) {
        let local = LocalLimiter::new(settings.window);
        let calls = Arc::new(AtomicU64::new(0));
        let leases = (settings.mode == Mode::Lease && settings.redis_url.is_some())
            .then(|| Arc::new(LeaseTable::new(settings.lease, settings.redis_timeout)));
        let (remote, runner) = match (&settings.mode, &settings.redis_url) {
            (Mode::Redis | Mode::Lease, Some(url)) => {
                let (tx, rx) = mpsc::channel(remote::QUEUE);
                let breaker = Arc::new(Breaker::new(settings.breaker));
                let expiry = leases.as_ref().map(|table| LeaseExpiry {
                    table: table.clone(),
                    tx: tx.downgrade(),
                });
                let runner = RemoteRunner {
                    rx,
                    url: url.clone(),
                    breaker: breaker.clone(),
                    window: settings.window,
                    deadline: settings.redis_timeout,
                    slot_ttl: settings.parallel_slot_ttl,
                    fallback_note: settings.fallback.to_string(),
                    calls: calls.clone(),
                    leases: expiry,
                    cluster: settings.redis_cluster.clone(),
                };
                let tls = url
                    .starts_with("rediss://")
                    .then(crate::upstream::client_config)
                    .and_then(|config| {
                        config
                            .inspect_err(|e| tracing::warn!(error = %e, "no TLS roots for rediss:// on the cores; limiter calls go through the control plane"))
                            .ok()
                    });
                let direct = link::LinkConfig::from_url(
                    url,
                    settings.window,
                    settings.parallel_slot_ttl,
                    settings.redis_timeout,
                    breaker.clone(),
                    calls.clone(),
                    settings.fallback.to_string(),
                    tls,
                )
                .map(|mut link| {
                    link.cluster = settings.redis_cluster.clone();
                    Arc::new(link)
                });
                (
                    Some(RemoteHandle {
                        tx,
                        breaker,
                        direct,
                    }),
                    Some(runner),
                )
            }
            _ => (None, None),
        };
        let scopes = arc_swap::ArcSwap::from_pointee(FileScopes {
            server: settings.server,
            end_user: settings.end_user,
        });
        (
            Limiter {
                settings,
                scopes,
                local,
                remote,
                leases,
                calls,
            },
            runner,
        )
    }

    /// The settings in force.
    pub fn settings(&self) -> &LimitSettings {
        &self.settings
    }

    /// Applies a reloaded config: its server and end-user limits take
    /// effect for the next request; `false` when something else differs
    /// (mode, Redis, window, reservation, breaker, lease), which only a
    /// restart applies.
    pub fn reload(&self, next: &LimitSettings) -> bool {
        self.scopes.store(Arc::new(FileScopes {
            server: next.server,
            end_user: next.end_user,
        }));
        let mut rest = next.clone();
        rest.server = self.settings.server;
        rest.end_user = self.settings.end_user;
        rest == self.settings
    }

    /// The Redis breaker's state; `None` without Redis.
    pub fn breaker_state(&self) -> Option<BreakerState> {
        self.remote.as_ref().map(|r| r.breaker.state())
    }

    /// The Redis breaker, for the control plane's other Redis work
    /// (cooldown sharing) to consult and inform; `None` without Redis.
    pub fn breaker(&self) -> Option<Arc<Breaker>> {
        self.remote.as_ref().map(|r| r.breaker.clone())
    }

    /// Where counters live, as configured.
    pub fn mode(&self) -> Mode {
        self.settings.mode
    }

    /// Script calls sent to Redis since start (admits, settlements, lease
    /// grants and ends).
    pub fn redis_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// This process's count on the counter named `key` (a descriptor's
    /// key): the count itself in local mode, the fallback's while Redis is
    /// unusable.
    pub fn local_usage(&self, key: &str) -> u64 {
        self.local.usage(key, unix_now())
    }

    /// The descriptors `input` is checked against, tightest scopes last.
    pub fn descriptors(&self, input: &AdmitInput<'_>) -> Vec<Descriptor> {
        let mut out = Vec::new();
        let scopes = self.scopes.load();
        scopes.server.push_into(Scope::Server, "global", &mut out);
        if let Some(rows) = input.key {
            let r = rows.key;
            if let Some((org, limits)) = rows.org {
                limits.push_into(Scope::Organization, org, &mut out);
            }
            if let Some(t) = rows.team {
                ScopeLimits::from_fields(t.rpm_limit, t.tpm_limit, t.max_parallel_requests)
                    .push_into(Scope::Team, &t.team_id, &mut out);
            }
            if let Some(u) = rows.user {
                ScopeLimits::from_fields(u.rpm_limit, u.tpm_limit, u.max_parallel_requests)
                    .push_into(Scope::User, &u.user_id, &mut out);
            }
            let own = ScopeLimits::from_fields(r.rpm_limit, r.tpm_limit, r.max_parallel_requests);
            let names = rows
                .names
                .filter(|_| !own.is_empty())
                .map(|kept| kept.get_or_init(|| CounterNames::new(Scope::ApiKey, &r.token)))
                .filter(|names| names.are_for(Scope::ApiKey, &r.token));
            match names {
                Some(names) => own.push_named(names, &mut out),
                None => own.push_into(Scope::ApiKey, &r.token, &mut out),
            }
            let per_model = |field: &str| r.model_limit(field, input.model);
            let model = ScopeLimits::from_fields(
                per_model("model_rpm_limit"),
                per_model("model_tpm_limit"),
                None,
            );
            if !model.is_empty() {
                model.push_into(
                    Scope::ModelPerKey,
                    &format!("{}:{}", r.token, input.model),
                    &mut out,
                );
            }
            // The team's per-model limit binds where the key has no own one
            // for that model (LiteLLM's `model_per_team`).
            if let Some(t) = rows.team.filter(|t| !t.metadata.is_empty()) {
                let inherited = |field: &str| match r.model_limit(field, input.model) {
                    Some(_) => None,
                    None => t.model_limit(field, input.model),
                };
                let team = ScopeLimits::from_fields(
                    inherited("model_rpm_limit"),
                    inherited("model_tpm_limit"),
                    None,
                );
                if !team.is_empty() {
                    team.push_into(
                        Scope::ModelPerTeam,
                        &format!("{}:{}", t.team_id, input.model),
                        &mut out,
                    );
                }
            }
        }
        if let Some(user) = input.end_user.filter(|u| !u.is_empty()) {
            let file = scopes.end_user;
            let limits = match input.end_user_limits {
                Some(row) => ScopeLimits {
                    rpm: row.rpm.or(file.rpm),
                    tpm: row.tpm.or(file.tpm),
                    parallel: row.parallel.or(file.parallel),
                },
                None => file,
            };
            limits.push_into(Scope::EndUser, user, &mut out);
        }
        out.extend(input.extra.iter().cloned());
        out
    }

    /// Tokens a request reserves against TPM limits, LiteLLM's estimate:
    /// the prompt plus `max_tokens`; without a cap the prompt plus the
    /// declared `default_estimated_output_tokens`, else the larger of the
    /// prompt and `min(1024, smallest TPM limit / 4)`; embeddings only the
    /// prompt.
    pub fn reservation(input: &AdmitInput<'_>, descs: &[Descriptor]) -> u64 {
        if input.embeddings {
            return input.prompt.get();
        }
        match input.max_tokens.or(input.estimated_output) {
            Some(cap) => input.prompt.get().saturating_add(cap),
            None => {
                let smallest = descs
                    .iter()
                    .filter(|d| d.kind == Kind::Tokens)
                    .map(|d| d.limit)
                    .min()
                    .unwrap_or(4096);
                input.prompt.get().max((smallest / 4).min(1024))
            }
        }
    }

    /// Checks and charges every limit of the request. `Ok(None)`: no limit
    /// applies. Refused: LiteLLM's 429 naming the scope that is full.
    pub async fn admit<'l>(
        &'l self,
        input: &AdmitInput<'_>,
    ) -> Result<Option<Ticket<'l>>, GatewayError> {
        self.admit_these(input, self.descriptors(input)).await
    }

    /// [`admit`](Self::admit) of the request's token limits alone: each
    /// response of a realtime session, whose request and parallel slot the
    /// session's own admission holds.
    pub async fn admit_tokens<'l>(
        &'l self,
        input: &AdmitInput<'_>,
    ) -> Result<Option<Ticket<'l>>, GatewayError> {
        let mut descs = self.descriptors(input);
        descs.retain(|d| d.kind == Kind::Tokens);
        self.admit_these(input, descs).await
    }

    /// Checks and charges `descs`, the request's limits.
    async fn admit_these<'l>(
        &'l self,
        input: &AdmitInput<'_>,
        descs: Vec<Descriptor>,
    ) -> Result<Option<Ticket<'l>>, GatewayError> {
        if descs.is_empty() {
            return Ok(None);
        }
        let reserve = if self.settings.reservation && descs.iter().any(|d| d.kind == Kind::Tokens) {
            Self::reservation(input, &descs)
        } else {
            0
        };
        let amounts: Vec<u64> = descs
            .iter()
            .map(|d| match d.kind {
                Kind::Requests | Kind::Parallel => 1,
                Kind::Tokens => reserve,
            })
            .collect();
        if let (Some(remote), Some(table)) = (&self.remote, &self.leases) {
            let redis = LeaseLink {
                limiter: self,
                remote,
            };
            // Boxed: the largest state of an admission, which would
            // otherwise join every request's (and every open stream's) future.
            match Box::pin(table.admit(&redis, &descs, &amounts)).await {
                Leased::Admitted { holds, used } => {
                    let verdict = Verdict::Admitted {
                        tick: 0,
                        used,
                        ticks: Vec::new(),
                    };
                    let settle = Settle::Lease(holds);
                    return self.conclude(verdict, descs, amounts, settle, input.request_id);
                }
                Leased::Denied(verdict) => {
                    return self.conclude(verdict, descs, amounts, Settle::Local, input.request_id)
                }
                Leased::Contended | Leased::Unseen => {}
                Leased::Unavailable => return self.admit_locally(descs, amounts, input),
            }
        }
        if let Some(remote) = &self.remote {
            let entries = entries(&descs, &amounts, |d| d.limit);
            if let Some(verdict) = self.ask_redis(remote, entries, input.request_id).await {
                return self.conclude(verdict, descs, amounts, Settle::Remote, input.request_id);
            }
        }
        self.admit_locally(descs, amounts, input)
    }

    /// Admission on this process's counters: without Redis, or as the
    /// fallback while it cannot be used.
    fn admit_locally<'l>(
        &'l self,
        descs: Vec<Descriptor>,
        amounts: Vec<u64>,
        input: &AdmitInput<'_>,
    ) -> Result<Option<Ticket<'l>>, GatewayError> {
        let policy = match self.remote {
            Some(_) => self.settings.fallback,
            None => FallbackPolicy::Full,
        };
        let verdict = self
            .local
            .admit(&descs, &amounts, |d| policy.scale(d.limit), unix_now());
        self.conclude(verdict, descs, amounts, Settle::Local, input.request_id)
    }

    /// One admission through Redis; `None` when Redis gave no verdict in
    /// time (or the breaker is open) and the local counters must decide.
    async fn ask_redis(
        &self,
        remote: &RemoteHandle,
        entries: Vec<Entry>,
        request_id: &str,
    ) -> Option<Verdict> {
        if !remote.breaker.allow() {
            return None;
        }
        let (reply, rx) = oneshot::channel();
        let call = Call::Admit {
            entries,
            request_id: request_id.to_string(),
            deadline: std::time::Instant::now() + self.settings.redis_timeout,
            reply,
        };
        if remote.submit(call).is_err() {
            if remote.breaker.state() == BreakerState::HalfOpen {
                remote.breaker.abandon_probe();
            }
            return None;
        }
        match monoio::time::timeout(self.settings.redis_timeout, rx).await {
            Ok(Ok(Ok(verdict))) => Some(verdict),
            _ => None,
        }
    }

    /// The fleet's current use of each of `descs`, in order, as Redis holds
    /// it: requests and tokens in the sliding window, parallel slots not
    /// lapsed. One call per counter (a Cluster keeps a request's scopes on
    /// different slots), sent together; `None` without Redis, while the
    /// breaker is open, or when any counter did not answer within the
    /// Redis deadline. Read-only.
    pub async fn fleet_usage(&self, descs: &[Descriptor]) -> Option<Vec<u64>> {
        let calls = descs.iter().map(|d| {
            self.eval(
                usage::usage_call(&self.settings.window, d),
                None,
                |_| None,
                None,
            )
        });
        let replies = futures_util::future::join_all(calls).await;
        replies
            .into_iter()
            .map(|r| match r.as_deref() {
                Some([units]) => Some((*units).max(0) as u64),
                _ => None,
            })
            .collect()
    }

    /// Whether shared counters of other modules (budgets) live in Redis:
    /// the limiter speaks to Redis, one server or a Cluster (mode `redis`
    /// or `lease`).
    pub fn shared(&self) -> bool {
        self.remote.is_some()
    }

    /// Whether that Redis is a Cluster: a script may only touch keys of one
    /// hash slot ([`key_slot`]), so a caller whose keys span slots makes
    /// one call per slot.
    pub fn cluster(&self) -> bool {
        self.remote.is_some() && !self.settings.redis_cluster.is_empty()
    }

    /// How long a hold taken in Redis lives unless settled
    /// (`parallel_slot_ttl_secs`): what a crashed replica's holds cost.
    pub fn hold_ttl(&self) -> std::time::Duration {
        self.settings.parallel_slot_ttl
    }

    /// Runs `call` on this core's Redis link and waits for its integers up
    /// to the Redis deadline; the argument at `deadline_arg`, if any,
    /// becomes that deadline in Redis time (the script must refuse to run
    /// after it). `None` without Redis, while the breaker is open, when the
    /// queue is full or no answer came in time: the caller decides per
    /// process. A reply that comes after the caller gave up goes to `late`,
    /// which may return a call that undoes it; `undo` is sent once Redis
    /// answers again when the round trip failed (Redis may have run it).
    pub async fn eval(
        &self,
        call: ScriptCall,
        deadline_arg: Option<usize>,
        late: impl FnOnce(&[i64]) -> Option<ScriptCall> + Send + Sync + 'static,
        undo: Option<ScriptCall>,
    ) -> Option<Vec<i64>> {
        let remote = self.remote.as_ref()?;
        if !remote.breaker.allow() {
            return None;
        }
        let (reply, rx) = oneshot::channel();
        let deadline = std::time::Instant::now() + self.settings.redis_timeout;
        let done = ScriptDone(Box::new(move |result| match reply.send(result) {
            Err(Ok(numbers)) => late(&numbers).map(Call::undo),
            _ => None,
        }));
        let call = Call::Script {
            call,
            deadline: deadline_arg.map(|i| (i, deadline)),
            done,
            undo: undo.map(Box::new),
        };
        if remote.submit(call).is_err() {
            if remote.breaker.state() == BreakerState::HalfOpen {
                remote.breaker.abandon_probe();
            }
            return None;
        }
        match monoio::time::timeout(self.settings.redis_timeout, rx).await {
            Ok(Ok(Ok(numbers))) => Some(numbers),
            _ => None,
        }
    }

    /// Sends `call` without waiting, with the Redis deadline at
    /// `deadline_arg` as in [`Limiter::eval`]; `failed` runs when it did not
    /// run (Redis unavailable, breaker open, queue full, past its deadline:
    /// the script answers `{2}`) or may not have; then `undo` is sent once
    /// Redis answers again.
    pub fn send_script(
        &self,
        call: ScriptCall,
        deadline_arg: usize,
        undo: ScriptCall,
        failed: impl FnOnce() + Send + Sync + 'static,
    ) {
        let Some(remote) = self.remote.as_ref() else {
            failed();
            return;
        };
        if !remote.breaker.allow() {
            failed();
            // Like a parallel slot's release: sent (and kept while it
            // fails) even while the breaker is open.
            let _ = remote.submit(Call::undo(undo));
            return;
        }
        let deadline = std::time::Instant::now() + self.settings.redis_timeout;
        let again = undo.clone();
        let call = Call::Script {
            call,
            deadline: Some((deadline_arg, deadline)),
            done: ScriptDone(Box::new(move |result| match result.as_deref() {
                Ok([1]) => None,
                // Not run (past its deadline): the undo goes next.
                Ok(_) => {
                    failed();
                    Some(Call::undo(again))
                }
                // The failed round trip keeps the undo.
                Err(_) => {
                    failed();
                    None
                }
            })),
            undo: Some(Box::new(undo)),
        };
        if let Err(Call::Script { done, .. }) = remote.submit(call) {
            if remote.breaker.state() == BreakerState::HalfOpen {
                remote.breaker.abandon_probe();
            }
            let _ = (done.0)(Err(RemoteError::Unreachable("limiter queue full".into())));
        }
    }

    fn conclude<'l>(
        &'l self,
        verdict: Verdict,
        descs: Vec<Descriptor>,
        amounts: Vec<u64>,
        settle: Settle,
        request_id: &str,
    ) -> Result<Option<Ticket<'l>>, GatewayError> {
        let now = unix_now();
        match verdict {
            Verdict::Admitted { tick, used, ticks } => {
                let headers =
                    RateHeaders::after(&descs, &amounts, &used, self.settings.window, now);
                Ok(Some(Ticket {
                    limiter: self,
                    descs,
                    amounts,
                    tick,
                    ticks,
                    used,
                    settle,
                    request_id: request_id.to_string(),
                    tokens_used: 0,
                    headers,
                }))
            }
            Verdict::Denied {
                index,
                used,
                limit,
                reset_at,
            } => {
                let d = &descs[index.min(descs.len() - 1)];
                let limit = if limit == 0 { d.limit } else { limit };
                Err(GatewayError::RateLimited {
                    scope: d.scope.as_str(),
                    value: d.value().to_string(),
                    kind: d.kind.as_str(),
                    limit,
                    remaining: limit.saturating_sub(used),
                    resets_at: format_utc(reset_at),
                    retry_after: reset_at.saturating_sub(now).max(1).to_string(),
                })
            }
        }
    }

    /// Drops idle local counters; called every few seconds.
    pub fn sweep(&self) {
        self.local.sweep(unix_now());
    }

    /// Queues a lease's call for the control plane; nobody waits for it.
    fn send(&self, remote: &RemoteHandle, call: Call) {
        if remote.tx.try_send(call).is_err() {
            tracing::warn!("limiter queue full: a settlement was dropped; its reservation lapses with the window and its parallel slot with its TTL");
        }
    }

    fn finish(&self, t: &Ticket<'_>) {
        let settle: Vec<usize> = (0..t.descs.len())
            .filter(|&i| t.descs[i].kind != Kind::Requests)
            .collect();
        if settle.is_empty() {
            return;
        }
        let remote = match &t.settle {
            Settle::Local => {
                self.local
                    .finish(&t.descs, &t.amounts, t.tick, t.tokens_used, unix_now());
                return;
            }
            Settle::Lease(holds) => {
                // Tokens are reconciled on the lease while it lives, in
                // Redis after; a slot goes back to its lease.
                for &i in &settle {
                    let call = match (&holds[i], &self.leases) {
                        (Hold::Units(l), _) => l.settle(t.amounts[i], t.tokens_used),
                        (Hold::Slots(l), Some(table)) => table.release_slot(l),
                        (Hold::Slots(l), None) => {
                            l.release();
                            None
                        }
                    };
                    if let (Some(call), Some(remote)) = (call, &self.remote) {
                        self.send(remote, call);
                    }
                }
                return;
            }
            Settle::Remote => match &self.remote {
                Some(remote) => remote,
                None => return,
            },
        };
        let call = Call::Finish {
            entries: settle
                .iter()
                .map(|&i| {
                    Entry::charge(&t.descs[i], t.descs[i].limit, t.amounts[i])
                        .settling(t.used.get(i).copied())
                })
                .collect(),
            request_id: t.request_id.clone(),
            tick: t.tick,
            ticks: match t.ticks.is_empty() {
                true => Vec::new(),
                false => settle.iter().map(|&i| t.ticks[i]).collect(),
            },
            tokens_used: t.tokens_used,
        };
        if remote.submit(call).is_err() {
            tracing::warn!("limiter queue full: a settlement was dropped; its reservation lapses with the window and its parallel slot with its TTL");
        }
    }
}

fn entries(
    descs: &[Descriptor],
    amounts: &[u64],
    limit: impl Fn(&Descriptor) -> u64,
) -> Vec<Entry> {
    descs
        .iter()
        .zip(amounts)
        .map(|(d, &amount)| Entry::charge(d, limit(d), amount))
        .collect()
}

/// Where an admission was charged, so its ticket settles there.
enum Settle {
    /// This process's counters (also a refusal, which settles nothing).
    Local,
    /// Redis, per request.
    Remote,
    /// The leases the request took from, one per descriptor.
    Lease(Vec<Hold>),
}

/// An admitted request's hold on its limits; settled when dropped (also
/// when the client goes away mid-stream), so parallel slots are always freed.
pub struct Ticket<'l> {
    limiter: &'l Limiter,
    descs: Vec<Descriptor>,
    amounts: Vec<u64>,
    tick: u64,
    ticks: Vec<u64>,
    /// Each counter's use as the admission's verdict reported it (a
    /// parallel slot's settlement names its form by it).
    used: Vec<u64>,
    settle: Settle,
    request_id: String,
    tokens_used: u64,
    headers: RateHeaders,
}

impl Ticket<'_> {
    /// Adds tokens the request really used (reconciled at drop).
    pub fn add_tokens(&mut self, tokens: u64) {
        self.tokens_used = self.tokens_used.saturating_add(tokens);
    }

    /// The `x-ratelimit-*` headers for the response.
    pub fn headers(&self) -> &RateHeaders {
        &self.headers
    }

    /// Whether the request holds a parallel slot, given back at drop.
    pub fn holds_slot(&self) -> bool {
        self.descs.iter().any(|d| d.kind == Kind::Parallel)
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.limiter.finish(self);
    }
}

/// The tightest request and token limits after admission, for OpenAI's
/// `x-ratelimit-*` headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateHeaders {
    /// (limit, remaining, seconds to reset) of the tightest rpm descriptor.
    pub requests: Option<(u64, u64, u64)>,
    /// The same for tpm.
    pub tokens: Option<(u64, u64, u64)>,
    /// (limit, used in the window) of the key's own rpm, for LiteLLM's
    /// `litellm_api_key_rate_limit_*` metrics.
    pub api_key_requests: Option<(u64, u64)>,
    /// The same for the key's tpm.
    pub api_key_tokens: Option<(u64, u64)>,
}

impl RateHeaders {
    fn after(
        descs: &[Descriptor],
        amounts: &[u64],
        used: &[u64],
        window: Window,
        now: u64,
    ) -> RateHeaders {
        let mut h = RateHeaders::default();
        let reset = window.expiry_of(window.tick(now)).saturating_sub(now);
        for (i, d) in descs.iter().enumerate() {
            let slot = match d.kind {
                Kind::Requests => &mut h.requests,
                Kind::Tokens => &mut h.tokens,
                Kind::Parallel => continue,
            };
            let u = used.get(i).copied().unwrap_or(0).saturating_add(amounts[i]);
            if d.scope == Scope::ApiKey {
                let own = match d.kind {
                    Kind::Requests => &mut h.api_key_requests,
                    _ => &mut h.api_key_tokens,
                };
                *own = Some((d.limit, u));
            }
            let remaining = d.limit.saturating_sub(u);
            if slot.is_none_or(|(_, r, _)| remaining < r) {
                *slot = Some((d.limit, remaining, reset));
            }
        }
        h
    }

    /// `(header, value)` pairs, as LiteLLM and OpenAI name them.
    pub fn pairs(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        let req = self.requests.into_iter().flat_map(|(l, r, s)| {
            [
                ("x-ratelimit-limit-requests", l),
                ("x-ratelimit-remaining-requests", r),
                ("x-ratelimit-reset-requests", s),
            ]
        });
        let tok = self.tokens.into_iter().flat_map(|(l, r, s)| {
            [
                ("x-ratelimit-limit-tokens", l),
                ("x-ratelimit-remaining-tokens", r),
                ("x-ratelimit-reset-tokens", s),
            ]
        });
        req.chain(tok)
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn format_utc(unix_secs: u64) -> String {
    chrono::DateTime::from_timestamp(unix_secs as i64, 0)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}
