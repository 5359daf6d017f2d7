//! What one LLM request records, as LiteLLM's Prometheus callback does:
//! per upstream attempt the deployment counters, latencies, tokens, spend
//! and remaining budgets; at the end the proxy-level request counters, the
//! total latency and the key's rate-limit gauges; fallbacks as they resolve.
//!
//! The request carries a [`RequestMetrics`] (label symbols of its core, no
//! heap) and calls it at each phase; every call is a no-op when metrics are
//! off.

use super::families::{Fam, L};
use super::labels::{gateway_class, is_upstream, route, upstream_class, LabelValues};
use super::store::{ComboId, CoreWriter, NONE, OTHER};
use super::with_core;
use crate::auth::Principal;
use crate::deployment::Deployment;
use crate::error::GatewayError;
use crate::http1::ResponseHead;
use crate::limits::RateHeaders;
use crate::store::SpendLogRow;
use std::time::Duration;

/// LiteLLM's user id of the master key's holder.
const MASTER_USER: &str = "default_user_id";

/// One request's labels and fallback state; see the module documentation.
#[derive(Default)]
pub struct RequestMetrics {
    labels: LabelValues,
    /// The failure that sent the request to its fallbacks:
    /// (`exception_status`, `exception_class`) symbols.
    original_failure: Option<(u32, u32)>,
    /// The fallback group being tried, not yet resolved.
    pending_fallback: Option<u32>,
    /// The `exception_class` of the last failed attempt.
    last_class: Option<u32>,
    /// The upstream's `x-ratelimit-remaining-{requests,tokens}` of the
    /// current attempt.
    remaining: (Option<u64>, Option<u64>),
}

/// What the end of a request says (for metrics and traces).
pub struct Finish<'a> {
    /// The call id the client got.
    pub call_id: &'a str,
    /// The model group asked for, once read.
    pub requested: Option<&'a str>,
    /// Retries made.
    pub retries: u32,
    /// Fallback groups tried.
    pub fallbacks: u32,
    /// The request path as called.
    pub path: &'a str,
    /// The endpoint's path without `/v1` (`/chat/completions`).
    pub endpoint: &'static str,
    /// The status the client got, if a response started.
    pub status: Option<u16>,
    /// Why the request failed, if it did.
    pub error: Option<&'a GatewayError>,
    /// From arrival to the end of the response.
    pub total: Duration,
    /// Time spent waiting for the upstream.
    pub upstream_wait: Duration,
    /// The rate limiter's view after admission.
    pub rate: Option<&'a RateHeaders>,
}

impl RequestMetrics {
    /// The caller's labels (`hashed_api_key`, `api_key_alias`, `team`,
    /// `team_alias`, `user`, `user_email`); `master_token` is the master
    /// key's hash.
    pub fn identify(&mut self, principal: &Principal, master_token: Option<&str>) {
        let labels = &mut self.labels;
        with_core(|w| {
            let mut sym = |v: Option<&str>| v.map_or(NONE, |v| w.intern(v));
            match principal {
                Principal::Key(k) => {
                    labels.set(L::HashedApiKey, sym(Some(&k.record.token)));
                    labels.set(L::ApiKeyAlias, sym(k.record.key_alias.as_deref()));
                    labels.set(L::Team, sym(k.record.team_id.as_deref()));
                    let team_alias = k.team.as_ref().and_then(|t| t.record.team_alias.as_deref());
                    labels.set(L::TeamAlias, sym(team_alias));
                    labels.set(L::User, sym(k.record.user_id.as_deref()));
                    let email = k.user.as_ref().and_then(|u| u.record.user_email.as_deref());
                    labels.set(L::UserEmail, sym(email));
                }
                Principal::Master => {
                    labels.set(L::HashedApiKey, sym(master_token));
                    labels.set(L::User, sym(Some(MASTER_USER)));
                }
                Principal::Anonymous => {}
            }
        });
    }

    /// The body's end user and the requested model group; `known` says
    /// whether any group or wildcard serves that name (others are `other`,
    /// as LiteLLM bounds the label). Called only when metrics are on.
    pub fn requested(&mut self, end_user: Option<&str>, model: &str, known: impl FnOnce() -> bool) {
        let labels = &mut self.labels;
        with_core(|w| {
            labels.set(L::EndUser, end_user.map_or(NONE, |e| w.intern(e)));
            let requested = if known() { w.intern(model) } else { OTHER };
            labels.set(L::RequestedModel, requested);
        });
    }

    /// The upstream's `x-ratelimit-remaining-*` headers of this attempt.
    pub fn upstream_head(&mut self, head: &ResponseHead) {
        self.remaining = (
            head.ratelimit_remaining_requests,
            head.ratelimit_remaining_tokens,
        );
    }

    /// One upstream attempt to `dep` (serving `group` with the upstream
    /// model `model`, `priced` unless it has no price) ended, as its spend
    /// row says; `fallback_depth` is 0
    /// for the requested group. `principal` gives the remaining budgets.
    /// Label values are read from the deployment, whose texts keep their
    /// addresses (see [`CoreWriter::intern`]).
    pub fn attempt(
        &mut self,
        principal: &Principal,
        row: &SpendLogRow,
        (dep, group, model, priced): (&Deployment, &str, &str, bool),
        fallback_depth: u32,
        stream: bool,
    ) {
        let remaining = std::mem::take(&mut self.remaining);
        let this = &mut *self;
        with_core(|w| {
            let v = &mut this.labels;
            let group = w.intern(group);
            v.set(L::ModelGroup, group);
            let model = w.intern(model);
            v.set(L::Model, model);
            v.set(L::LitellmModelName, model);
            v.set(L::ModelId, w.intern(&dep.id));
            let base = match &dep.base {
                Some(b) if !b.url.is_empty() => w.intern(&b.url),
                _ => NONE,
            };
            v.set(L::ApiBase, base);
            v.set(L::ApiProvider, w.intern(&dep.provider_name));
            let ok = row.error_class.is_none();
            let status = u16::try_from(row.status_code).unwrap_or(0);
            if !ok {
                let class = upstream_class(
                    &dep.provider_name,
                    row.error_class.as_deref().unwrap_or(""),
                    status,
                );
                let class = w.intern(&class);
                let status = w.intern(itoa::Buffer::new().format(status));
                v.set(L::ExceptionStatus, status);
                v.set(L::ExceptionClass, class);
                this.last_class = Some(class);
                if fallback_depth == 0 {
                    this.original_failure = Some((status, class));
                }
            }
            let c = w.combo(v);
            let stamp = w.stamp();
            inc(w, Fam::DeploymentTotal, c, 1.0);
            if !priced {
                inc(w, Fam::UnpricedRequests, c, 1.0);
            }
            if ok {
                inc(w, Fam::DeploymentSuccess, c, 1.0);
                set(w, Fam::DeploymentState, c, 0.0, stamp);
            } else {
                inc(w, Fam::DeploymentFailure, c, 1.0);
                set(w, Fam::DeploymentState, c, 1.0, stamp);
            }
            let billed = row.total_tokens > 0 || row.spend > 0.0;
            if ok || billed {
                inc(w, Fam::Spend, c, row.spend);
                inc(w, Fam::TotalTokens, c, row.total_tokens as f64);
                inc(w, Fam::InputTokens, c, row.prompt_tokens as f64);
                inc(w, Fam::OutputTokens, c, row.completion_tokens as f64);
            }
            if ok {
                let seconds = |d: chrono::TimeDelta| d.to_std().map_or(0.0, |d| d.as_secs_f64());
                let latency = seconds(row.end_time - row.start_time);
                observe(w, Fam::LlmApiLatency, c, latency);
                let first = row
                    .completion_start_time
                    .map(|t| seconds(t - row.start_time));
                if let (true, Some(ttft)) = (stream, first) {
                    observe(w, Fam::TimeToFirstToken, c, ttft);
                }
                if row.completion_tokens > 0 {
                    let per = if stream {
                        first.unwrap_or(latency)
                    } else {
                        latency
                    };
                    observe(
                        w,
                        Fam::LatencyPerOutputToken,
                        c,
                        per / row.completion_tokens as f64,
                    );
                }
                if let Some(n) = remaining.0 {
                    set(w, Fam::RemainingRequests, c, n as f64, stamp);
                }
                if let Some(n) = remaining.1 {
                    set(w, Fam::RemainingTokens, c, n as f64, stamp);
                }
                budgets(w, principal, c, stamp);
            }
            this.fallback(w, fallback_depth, group, ok);
        });
    }

    /// Settles fallbacks: a new fallback group resolves the one before it
    /// as failed; a success resolves its own as successful.
    fn fallback(&mut self, w: &mut CoreWriter, depth: u32, group: u32, ok: bool) {
        if depth == 0 {
            return;
        }
        if let Some(previous) = self.pending_fallback.take() {
            if previous != group {
                self.fallback_event(w, Fam::FailedFallbacks, previous);
            }
        }
        if ok {
            self.fallback_event(w, Fam::SuccessfulFallbacks, group);
        } else {
            self.pending_fallback = Some(group);
        }
    }

    fn fallback_event(&self, w: &mut CoreWriter, fam: Fam, fallback: u32) {
        let mut v = self.labels;
        v.set(L::FallbackModel, fallback);
        let (status, class) = self.original_failure.unwrap_or((NONE, NONE));
        v.set(L::ExceptionStatus, status);
        v.set(L::ExceptionClass, class);
        v.set(L::ModelId, NONE);
        let c = w.combo(&v);
        inc(w, fam, c, 1.0);
    }

    /// The response cache answered (`hit`, with the answer's `tokens`) or
    /// not for model group `group`: LiteLLM's cache counters.
    pub fn cache(&mut self, group: &str, hit: bool, tokens: u64) {
        let labels = &mut self.labels;
        with_core(|w| {
            let mut v = *labels;
            v.set(L::Model, w.intern(group));
            let c = w.combo(&v);
            if !hit {
                inc(w, Fam::CacheMisses, c, 1.0);
                return;
            }
            inc(w, Fam::CacheHits, c, 1.0);
            if tokens > 0 {
                inc(w, Fam::CachedTokens, c, tokens as f64);
            }
        });
    }

    /// Guardrail `name` ran in `hook` (`pre_call`, ...) for `seconds`:
    /// LiteLLM's guardrail families. `status` is `success` when the text
    /// passed, `intervened` when it was masked and went on, `error` when
    /// it was blocked (`error_type` `blocked`), the guardrail failed
    /// (`failed`) or failed and let the text pass (`failed_open`).
    pub fn guardrail(&mut self, name: &str, hook: &'static str, outcome: &str, seconds: f64) {
        with_core(|w| {
            let (status, error_type) = match outcome {
                "passed" => ("success", None),
                "masked" => ("intervened", None),
                other => ("error", Some(other)),
            };
            let mut v = LabelValues::default();
            v.set(L::GuardrailName, w.intern(name));
            v.set(L::HookType, w.intern(hook));
            v.set(L::Status, w.intern(status));
            v.set(L::ErrorType, w.intern(error_type.unwrap_or("none")));
            let c = w.combo(&v);
            observe(w, Fam::GuardrailLatency, c, seconds);
            inc(w, Fam::GuardrailRequests, c, 1.0);
            if error_type.is_some() {
                inc(w, Fam::GuardrailErrors, c, 1.0);
            }
        });
    }

    /// The request ended: LiteLLM's proxy-level counters, and on success
    /// the total and overhead latencies and the key's rate-limit gauges.
    pub fn finish(&mut self, end: Finish<'_>) {
        let this = &mut *self;
        with_core(|w| {
            if let Some(pending) = this.pending_fallback.take() {
                this.fallback_event(w, Fam::FailedFallbacks, pending);
            }
            let v = &mut this.labels;
            v.set(L::Route, w.intern(route(end.path, end.endpoint)));
            let sent = end.status.filter(|s| *s != 0);
            let status = match (sent, end.error) {
                (Some(s), _) => s,
                (None, Some(e)) => e.status(),
                (None, None) => 200,
            };
            let mut digits = itoa::Buffer::new();
            v.set(L::StatusCode, w.intern(digits.format(status)));
            if let Some(err) = end.error {
                if err.status() == 401 {
                    // LiteLLM does not label a refused credential with a hash.
                    v.set(L::HashedApiKey, NONE);
                }
                let class = match this.last_class {
                    Some(class) if is_upstream(err) => class,
                    _ => w.intern(gateway_class(err)),
                };
                v.set(L::ExceptionStatus, w.intern(digits.format(err.status())));
                v.set(L::ExceptionClass, class);
            }
            let c = w.combo(v);
            if end.error.is_some() {
                inc(w, Fam::ProxyFailedRequests, c, 1.0);
            }
            inc(w, Fam::ProxyTotalRequests, c, 1.0);
            if end.error.is_none() {
                observe(w, Fam::RequestTotalLatency, c, end.total.as_secs_f64());
                let overhead = end.total.saturating_sub(end.upstream_wait);
                observe(w, Fam::OverheadLatency, c, overhead.as_secs_f64());
                if let Some(rate) = end.rate {
                    // Stamped when the request arrived (its counts were
                    // read at admission, just after): a request that
                    // arrived later wins, even if this one records last.
                    let arrived = w
                        .stamp()
                        .saturating_sub(u64::try_from(end.total.as_nanos()).unwrap_or(u64::MAX));
                    key_rate_limits(w, v, rate, arrived.max(1));
                }
            }
        });
    }
}

/// LiteLLM's remaining and maximum budgets of the key, its team and its
/// user (`+Inf` remaining without a budget).
fn budgets(w: &mut CoreWriter, principal: &Principal, c: ComboId, stamp: u64) {
    let Principal::Key(key) = principal else {
        return;
    };
    let remaining =
        |b: &crate::budget::Budget| b.max_usd().map_or(f64::INFINITY, |max| max - b.spent_usd());
    set(
        w,
        Fam::RemainingApiKeyBudget,
        c,
        remaining(&key.budget),
        stamp,
    );
    if let Some(max) = key.budget.max_usd() {
        set(w, Fam::ApiKeyMaxBudget, c, max, stamp);
    }
    if let Some(team) = &key.team {
        set(
            w,
            Fam::RemainingTeamBudget,
            c,
            remaining(&team.budget),
            stamp,
        );
        if let Some(max) = team.budget.max_usd() {
            set(w, Fam::TeamMaxBudget, c, max, stamp);
        }
    }
    if let Some(user) = &key.user {
        set(
            w,
            Fam::RemainingUserBudget,
            c,
            remaining(&user.budget),
            stamp,
        );
        if let Some(max) = user.budget.max_usd() {
            set(w, Fam::UserMaxBudget, c, max, stamp);
        }
    }
}

/// LiteLLM's `litellm_api_key_rate_limit_{allowed,used}_metric`: the key's
/// rpm and tpm limits and what the window has used of them.
fn key_rate_limits(w: &mut CoreWriter, v: &mut LabelValues, rate: &RateHeaders, stamp: u64) {
    for (kind, limit) in [
        ("requests", rate.api_key_requests),
        ("tokens", rate.api_key_tokens),
    ] {
        if let Some((allowed, used)) = limit {
            v.set(L::RateLimitType, w.intern(kind));
            let c = w.combo(v);
            set(w, Fam::ApiKeyRateLimitAllowed, c, allowed as f64, stamp);
            set(w, Fam::ApiKeyRateLimitUsed, c, used as f64, stamp);
        }
    }
}

/// Adds `n` to the counter `fam` at the labels of `c`.
pub(crate) fn inc(w: &mut CoreWriter, fam: Fam, c: ComboId, n: f64) {
    if let Some(s) = w.combo_series(c, fam) {
        s.add_f64(0, n);
    }
}

/// Sets the gauge `fam` at the labels of `c` as of `stamp` (a later stamp
/// from any core wins).
pub(crate) fn set(w: &mut CoreWriter, fam: Fam, c: ComboId, value: f64, stamp: u64) {
    if let Some(s) = w.combo_series(c, fam) {
        s.set(value, stamp);
    }
}

/// Observes `value` in the histogram `fam` at the labels of `c`.
pub(crate) fn observe(w: &mut CoreWriter, fam: Fam, c: ComboId, value: f64) {
    let buckets = fam.spec().buckets;
    let bucket = buckets
        .iter()
        .position(|b| value <= *b)
        .unwrap_or(buckets.len());
    if let Some(s) = w.combo_series(c, fam) {
        s.add_one(bucket);
        s.add_f64(buckets.len() + 1, value);
    }
}
