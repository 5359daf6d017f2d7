//! Money and evidence: admission against budgets before the call, settlement
//! after it, and one spend-log row per upstream attempt handed to the control
//! plane without waiting.

use super::answer_id::AnswerId;
use super::Caller;
use crate::alerts::{Alerts, BudgetAlert, Event};
use crate::auth::{Principal, WindowOwner};
use crate::budget::Reservation;
use crate::cache::HitFacts;
use crate::deployment::{Deployment, SpendLabels};
use crate::error::GatewayError;
use crate::inbound::{Endpoint, LlmRequest};
use crate::limits::Limiter;
use crate::router::Pick;
use crate::spend::{self, Price, Usage};
use crate::state::Worker;
use crate::store::SpendLogRow;
use chrono::{DateTime, Utc};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// Output tokens reserved when neither the request nor the model caps them.
pub(super) const DEFAULT_MAX_OUTPUT: u64 = 4096;

/// Reserves the request's worst-case cost against its key's, user's,
/// team's and end user's budgets, all or none (fleet-wide with Redis, see
/// `budget::fleet`). Master-key requests have no budget but their end
/// user's. The first refusal by a key's budget raises a budget-crossed
/// alert.
pub(super) async fn admit<'l>(
    (alerts, limiter): (&Alerts, &'l Limiter),
    caller: Caller<'_>,
    (req, attempt): (&LlmRequest, &Attempt),
    pick: &Pick<'_>,
    (price, priced): (Price, Priced),
) -> Result<Option<Reservation<'l>>, GatewayError> {
    let (group, dep, upstream_model) = (&*pick.group, &**pick.deployment, &*pick.upstream_model);
    if priced.block_all && !priced.known {
        return Err(GatewayError::UnpricedBlocked(group.to_string()));
    }
    let key = super::key_of(caller.principal);
    let budgets = budgets_of(caller, group);
    if budgets.is_empty() {
        return Ok(count_throttled(limiter, key, None));
    }
    let refused = |scope: &'static str| {
        let Some(key) = key else { return };
        if let Some((_, budget)) = budgets.iter().find(|(s, _)| *s == scope) {
            if budget.first_refusal() {
                alerts.raise(BudgetAlert::new(Event::BudgetCrossed, scope, budget, key));
            }
        }
    };
    let exceeded = |scope: &str, spend: f64, max: f64, reserve: Option<f64>| {
        refusal(caller, group, scope, (spend, max), reserve)
    };
    if !priced.known
        && priced.policy.refuses(dep)
        && budgets.iter().any(|(_, b)| b.max_usd().is_some())
    {
        // Free by accident would bypass the budget (a wildcard route lets the
        // client name any model): refuse until the model has a price.
        return Err(GatewayError::Unpriced(upstream_model.to_string()));
    }
    for (scope, budget) in &budgets {
        if budget.exhausted() {
            refused(scope);
            let max = budget.max_usd().unwrap_or(0.0);
            return Err(exceeded(scope, budget.spent_usd(), max, None));
        }
    }
    let max_output = if req.endpoint.writes_no_tokens() {
        0
    } else {
        req.max_tokens.unwrap_or_else(|| {
            let cap = spend::max_output_tokens(dep, upstream_model);
            match estimated_output(key, group, priced.estimated_output) {
                // An estimate, not a bound: the real cost is settled after,
                // so a request may pass its reservation (as in LiteLLM).
                Some(estimate) => cap.map_or(estimate, |c| c.min(estimate)),
                None => cap.unwrap_or(DEFAULT_MAX_OUTPUT),
            }
        })
    };
    // Exactness needs an upper bound, not an estimate: byte-level BPE spends
    // at least one byte per token, so the body's length bounds the prompt.
    // Never fewer tokens than bytes: an upper bound without parsing.
    let prompt_bound = req.body.len() as u64;
    let worst = spend::worst_case_cost(prompt_bound, max_output, price) + priced.reserved;
    let held = hold(limiter, &budgets, worst, &attempt.request_id)
        .await
        .map_err(|r| {
            refused(r.scope);
            exceeded(r.scope, r.spend, r.max, Some(worst))
        })?;
    Ok(count_throttled(limiter, key, held))
}

/// [`hold`] for a call of `principal` off the LLM routes (files, batches,
/// pass-through, realtime): a key that opted in to throttling has its
/// call's cost counted on its own budget too, as [`admit`] counts it, so
/// that these calls bring it to its budget (and its throttled limits) as
/// its LLM calls do.
pub(super) async fn hold_for<'l>(
    limiter: &'l Limiter,
    principal: &Principal,
    budgets: &[(&'static str, Arc<crate::budget::Budget>)],
    worst: f64,
    request_id: &str,
) -> Result<Option<Reservation<'l>>, crate::budget::Refusal> {
    let held = hold(limiter, budgets, worst, request_id).await?;
    Ok(count_throttled(limiter, super::key_of(principal), held))
}

/// A key that opted in to throttling is never refused by its own budget
/// (LiteLLM releases its counter rather than blocking; past the budget its
/// limits are scaled down instead), so room is not held in it
/// ([`budgets_of`]), but its spend is still counted on it.
pub(super) fn count_throttled<'l>(
    limiter: &'l Limiter,
    key: Option<&crate::auth::KeyEntry>,
    held: Option<Reservation<'l>>,
) -> Option<Reservation<'l>> {
    let Some(key) = key.filter(|k| k.budget_throttle.is_some()) else {
        return held;
    };
    let budget = key.budget.clone();
    Some(match held {
        Some(reservation) => reservation.counting(budget),
        None => Reservation::nothing_held(vec![budget], limiter.shared()),
    })
}

/// Holds `worst` USD against every budget of `budgets`, all or none. A
/// request answered a moment ago may not have settled yet (settlement
/// follows the last byte): in-flight reservations get a short while to
/// turn into real cost before a refusal, so a sequential client is not
/// refused by its own previous request's reservation.
pub(super) async fn hold<'l>(
    limiter: &'l Limiter,
    budgets: &[(&'static str, Arc<crate::budget::Budget>)],
    worst: f64,
    request_id: &str,
) -> Result<Option<Reservation<'l>>, crate::budget::Refusal> {
    if budgets.is_empty() {
        return Ok(None);
    }
    let mut waited = Duration::ZERO;
    loop {
        // Boxed: the fleet-wide reservation (a Redis exchange) is large and
        // over before the call; inline, a stream held open would carry it.
        let acquire = Box::pin(Reservation::acquire_shared(
            limiter, budgets, worst, request_id,
        ));
        match acquire.await {
            Ok(reservation) => return Ok(Some(reservation)),
            Err(r) if r.in_flight && waited < SETTLE_WAIT => {
                // Boxed: a timer is large, and only a refusal waits.
                Box::pin(monoio::time::sleep(SETTLE_POLL)).await;
                waited += SETTLE_POLL;
            }
            Err(r) => return Err(r),
        }
    }
}

/// The budgets a request for `group` is admitted against, by scope: its
/// key's, user's, team's, the key's per-model one, its end user's and the
/// proxy-wide one (every caller's, the master key's too, as LiteLLM's).
pub(super) fn budgets_of(
    caller: Caller<'_>,
    group: &str,
) -> Vec<(&'static str, Arc<crate::budget::Budget>)> {
    let mut budgets = Vec::with_capacity(10);
    if let Some(key) = super::key_of(caller.principal) {
        // A key that opted in to throttling is not held to its own
        // budget ([`count_throttled`]).
        if key.budget_throttle.is_none() {
            budgets.push(("key", key.budget.clone()));
        }
        if let Some(user) = &key.user {
            budgets.push(("user", user.budget.clone()));
        }
        if let Some(team) = &key.team {
            budgets.push(("team", team.budget.clone()));
            if let Some(org) = &team.org_budget {
                budgets.push(("organization", org.clone()));
            }
        }
        let key_model = key.model_budget(group);
        if let Some(budget) = key_model {
            budgets.push(("model", budget.clone()));
        }
        // A key's own entry for the group takes the place of its team's, as
        // in LiteLLM; a user's applies beside it (one cap over all their
        // keys).
        let team_model = key.team.as_ref().and_then(|t| t.model_budget(group));
        if let (Some(budget), None) = (team_model, key_model) {
            budgets.push((TEAM_MODEL, budget.clone()));
        }
        if let Some(budget) = key.user.as_ref().and_then(|u| u.model_budget(group)) {
            budgets.push((USER_MODEL, budget.clone()));
        }
        if let Some(budget) = &key.member_budget {
            budgets.push((TEAM_MEMBER, budget.clone()));
        }
        let now = Utc::now();
        let windows = caller.budget_windows;
        if let Some(w) = key.member_model_budget(group) {
            let team = key.record.team_id.as_deref().unwrap_or_default();
            let user = key.record.user_id.as_deref().unwrap_or_default();
            let id = format!("{team}:{user}:{group}");
            if let Some(b) = windows.counter(WindowOwner::MemberModel, &id, w, now) {
                budgets.push((TEAM_MEMBER_MODEL, b));
            }
        }
        for w in &key.record.budget_limits {
            if let Some(b) = windows.counter(WindowOwner::Key, &key.record.token, w, now) {
                budgets.push((KEY_WINDOW, b));
            }
        }
        if let Some(team) = &key.team {
            for w in &team.record.budget_limits {
                if let Some(b) = windows.counter(WindowOwner::Team, &team.record.team_id, w, now) {
                    budgets.push((TEAM_WINDOW, b));
                }
            }
        }
    }
    if let Some(end_user) = caller.end_user {
        budgets.push((END_USER, end_user.budget.clone()));
        let now = Utc::now().timestamp();
        if let Some(budget) = end_user.model_budget(caller.model_windows, group, now) {
            budgets.push((END_USER_MODEL, budget));
        }
    }
    if let Some(proxy) = caller.proxy_budget {
        budgets.push((PROXY, proxy.clone()));
    }
    budgets
}

/// The scope of a team's budget for one model group in refusals.
const TEAM_MODEL: &str = "team model";
/// The scope of a user's budget for one model group in refusals.
const USER_MODEL: &str = "user model";
/// The scope of an end user's budget for one model group in refusals.
const END_USER_MODEL: &str = "end user model";

/// The scope of the proxy-wide budget in refusals.
const PROXY: &str = "proxy";
/// The scope of a user's budget in the key's team in refusals.
const TEAM_MEMBER: &str = "team member";
/// The scope of a user's budget for one model group in the key's team in
/// refusals.
const TEAM_MEMBER_MODEL: &str = "team member model";
/// The scope of a key's budget window (`budget_limits`) in refusals.
const KEY_WINDOW: &str = "key window";
/// The scope of a team's budget window (`budget_limits`) in refusals.
const TEAM_WINDOW: &str = "team window";

/// The error of a refusal by `scope`'s budget (spend and budget, USD) of a
/// request for `model`: LiteLLM's messages for end users, team members and
/// budget windows.
pub(super) fn refusal(
    caller: Caller<'_>,
    model: &str,
    scope: &str,
    (spend, max): (f64, f64),
    reserve: Option<f64>,
) -> GatewayError {
    let key = super::key_of(caller.principal);
    let window = |owner: String, windows: &[crate::store::BudgetWindow]| {
        // The window whose budget refused: the one of that budget (the
        // closest, should two share it).
        let duration = windows
            .iter()
            .min_by(|a, b| {
                (a.max_budget - max)
                    .abs()
                    .total_cmp(&(b.max_budget - max).abs())
            })
            .map(|w| w.budget_duration.clone())
            .unwrap_or_default();
        GatewayError::WindowBudgetExceeded {
            owner,
            duration,
            spend,
            max,
            reserve,
        }
    };
    match (scope, caller.end_user, key) {
        (END_USER, Some(e), _) => GatewayError::EndUserBudgetExceeded {
            end_user: e.record.user_id.clone(),
            spend,
            max,
            reserve,
        },
        (KEY_WINDOW, _, Some(k)) => window("Key".into(), &k.record.budget_limits),
        (TEAM_MEMBER, _, Some(k)) => GatewayError::MemberBudgetExceeded {
            user: k.record.user_id.clone().unwrap_or_default(),
            team: k.record.team_id.clone().unwrap_or_default(),
            spend,
            max,
            reserve,
        },
        (TEAM_MEMBER_MODEL, _, Some(k)) => GatewayError::MemberModelBudgetExceeded {
            user: k.record.user_id.clone().unwrap_or_default(),
            team: k.record.team_id.clone().unwrap_or_default(),
            model: model.to_string(),
            reserve,
        },
        (TEAM_WINDOW, _, Some(k)) if k.team.is_some() => {
            let team = k.team.as_ref().map(|t| &t.record);
            let id = team.map(|t| t.team_id.as_str()).unwrap_or_default();
            window(
                format!("Team={id}"),
                team.map(|t| &t.budget_limits[..]).unwrap_or_default(),
            )
        }
        _ => GatewayError::BudgetExceeded {
            scope: scope.to_string(),
            spend,
            max,
            reserve,
        },
    }
}

/// A cached answer costs nothing, but a caller whose budget is spent is
/// refused all the same (LiteLLM checks budgets before its cache).
pub(super) fn refuse_if_exhausted(caller: Caller<'_>, group: &str) -> Result<(), GatewayError> {
    for (scope, budget) in budgets_of(caller, group) {
        if budget.exhausted() {
            let (spend, max) = (budget.spent_usd(), budget.max_usd().unwrap_or(0.0));
            return Err(refusal(caller, group, scope, (spend, max), None));
        }
    }
    Ok(())
}

/// Whether the model of an attempt has a price, and what the operator said
/// of those that do not (`gateway_settings.unpriced_models`).
#[derive(Clone, Copy)]
pub(super) struct Priced {
    /// Some price applies (configured or shipped).
    pub known: bool,
    /// What an unpriced model costs a caller with a budget.
    pub policy: spend::UnpricedModels,
    /// `litellm_settings.default_estimated_output_tokens`.
    pub estimated_output: Option<u64>,
    /// `litellm_settings.block_requests_for_models_without_pricing`.
    pub block_all: bool,
    /// USD the call costs beyond its tokens, reserved whole (an image
    /// generation's images).
    pub reserved: f64,
}

/// The output a request without `max_tokens` reserves, as LiteLLM resolves
/// `default_estimated_output_tokens`: the key's per-model then key-wide
/// value, its team's, then `litellm_settings`' (a budget reservation takes
/// at most the model's output cap; a TPM reservation takes it whole).
pub(super) fn estimated_output(
    key: Option<&crate::auth::KeyEntry>,
    group: &str,
    proxy_wide: Option<u64>,
) -> Option<u64> {
    let from = |meta: &serde_json::Map<String, serde_json::Value>| {
        meta.get("default_estimated_output_tokens_per_model")
            .and_then(|m| m.get(group))
            .and_then(serde_json::Value::as_u64)
            .filter(|n| *n > 0)
            .or_else(|| {
                meta.get("default_estimated_output_tokens")
                    .and_then(serde_json::Value::as_u64)
                    .filter(|n| *n > 0)
            })
    };
    key.and_then(|k| {
        from(&k.record.metadata).or_else(|| k.team.as_ref().and_then(|t| from(&t.record.metadata)))
    })
    .or(proxy_wide)
}

/// The budget scope of the request's end user.
const END_USER: &str = "end_user";

/// Longest a refusal waits for in-flight reservations to settle.
const SETTLE_WAIT: Duration = Duration::from_millis(20);
/// How often it looks again.
const SETTLE_POLL: Duration = Duration::from_millis(1);

/// Replaces the reservation by the real cost and raises soft-budget alerts.
pub(super) fn settle(
    alerts: &Alerts,
    reservation: Option<Reservation<'_>>,
    cost: f64,
    principal: &Principal,
) {
    let Some(reservation) = reservation else {
        return;
    };
    let crossed = reservation.settle(cost);
    let Some(key) = super::key_of(principal) else {
        return;
    };
    for (scope, budget) in crossed {
        alerts.raise(BudgetAlert::new(
            Event::SoftBudgetCrossed,
            scope,
            &budget,
            key,
        ));
    }
}

/// Times of one upstream attempt.
pub(super) struct Attempt {
    request_id: Arc<str>,
    call_id: Arc<str>,
    number: i32,
    start: DateTime<Utc>,
    first_byte: Option<DateTime<Utc>>,
    /// The id of the answer the client receives.
    pub(super) answer: AnswerId,
}

/// What a finished attempt's row says.
pub(super) struct AttemptInfo<'a> {
    pub principal: &'a Principal,
    pub master_token: Option<&'a str>,
    pub group: &'a str,
    pub dep: &'a Deployment,
    pub upstream_model: &'a str,
    pub endpoint: Endpoint,
    pub usage: Usage,
    pub cost: f64,
    pub status: u16,
    pub error: Option<&'a GatewayError>,
    pub end_user: Option<&'a str>,
    /// The proxy-wide budget counts the attempt's cost.
    pub proxy_budget: bool,
    /// The response cache's key of the request (`Cache OFF` without a
    /// cache).
    pub cache_key: Option<Arc<str>>,
    /// The request's own `metadata.tags`.
    pub tags: &'a [String],
    /// What its guardrails did so far.
    pub guardrails: &'a crate::guardrails::log::Log,
}

impl Attempt {
    /// Starts attempt `number` (1 for the first) of request `call_id`.
    pub(super) fn start(call_id: &Arc<str>, number: i32) -> Self {
        let request_id = match number {
            1 => call_id.clone(),
            _ => Arc::from(format!("{call_id}:{number}")),
        };
        Attempt {
            request_id,
            call_id: call_id.clone(),
            number,
            start: Utc::now(),
            first_byte: None,
            answer: AnswerId::default(),
        }
    }

    /// Time since the attempt started.
    pub(super) fn elapsed(&self) -> std::time::Duration {
        (Utc::now() - self.start).to_std().unwrap_or_default()
    }

    /// Marks the first response byte.
    pub(super) fn first_byte(&mut self) {
        self.first_byte = Some(Utc::now());
    }

    /// The attempt's spend-log row.
    pub(super) fn finish(self, info: AttemptInfo<'_>) -> SpendLogRow {
        let key = super::key_of(info.principal);
        let api_key = match key {
            Some(k) => k.record.token.as_str().into(),
            None => info.master_token.unwrap_or_default().into(),
        };
        let labels = &info.dep.spend_labels;
        let shared = SpendLabels::share;
        SpendLogRow {
            request_id: self.request_id,
            call_id: self.call_id,
            attempt: self.number,
            call_type: Cow::Borrowed(call_type(info.endpoint)),
            api_key,
            spend: info.cost,
            total_tokens: column(
                info.usage
                    .prompt_tokens
                    .saturating_add(info.usage.completion_tokens),
            ),
            prompt_tokens: column(info.usage.prompt_tokens),
            completion_tokens: column(info.usage.completion_tokens),
            start_time: self.start,
            completion_start_time: self.first_byte,
            end_time: Utc::now(),
            model: shared(&labels.upstream_model, info.upstream_model),
            model_id: info.dep.id.clone(),
            model_group: shared(&labels.group, info.group),
            custom_llm_provider: labels.provider.clone(),
            api_base: labels.api_base.clone(),
            region: labels.region.clone(),
            user: key.and_then(|k| k.record.user_id.clone()),
            team_id: key.and_then(|k| k.record.team_id.clone()),
            status: Cow::Borrowed(match info.error {
                None => "success",
                Some(_) => "failure",
            }),
            status_code: i32::from(info.status),
            error_class: info.error.map(|e| Cow::Borrowed(e.class().as_str())),
            error_message: info.error.map(|e| e.to_string()),
            end_user: info.end_user.filter(|e| !e.is_empty()).map(str::to_string),
            response_id: self.answer.take(),
            proxy_budget: info.proxy_budget,
            cache_hit: false,
            cache_key: info.cache_key,
            request_tags: Some(super::routing_tags(info.principal, info.tags))
                .filter(|tags| !tags.is_empty())
                .map(Arc::from),
            guardrail_information: info
                .guardrails
                .information()
                .map(|t| Arc::new(crate::store::JsonText(t))),
            proxy_server_request: None,
            response: None,
        }
    }
}

/// What a request answered from the response cache logs.
pub(super) struct HitInfo<'a> {
    pub call_id: &'a Arc<str>,
    pub principal: &'a Principal,
    pub master_token: Option<&'a str>,
    pub group: &'a Arc<str>,
    pub endpoint: Endpoint,
    pub end_user: Option<&'a str>,
    /// The request's own `metadata.tags`.
    pub tags: &'a [String],
    /// The entry's key.
    pub key: &'a Arc<str>,
    /// What the stored answer reports (its usage is what the hit served).
    pub facts: &'a HitFacts,
    /// When the stored answer started to go out.
    pub start: DateTime<Utc>,
}

/// The spend-log row of an answer from the response cache, as LiteLLM
/// writes it: `cache_hit` true, the entry's key, the stored answer's
/// tokens, spend 0 (so no budget moves), no deployment.
pub(super) fn hit_row(info: HitInfo<'_>) -> SpendLogRow {
    let key = super::key_of(info.principal);
    let usage = info.facts;
    let group = info.group.clone();
    let empty = || EMPTY.clone();
    SpendLogRow {
        request_id: info.call_id.clone(),
        call_id: info.call_id.clone(),
        attempt: 1,
        call_type: Cow::Borrowed(call_type(info.endpoint)),
        api_key: match key {
            Some(k) => k.record.token.as_str().into(),
            None => info.master_token.unwrap_or_default().into(),
        },
        spend: 0.0,
        total_tokens: column(usage.prompt_tokens.saturating_add(usage.completion_tokens)),
        prompt_tokens: column(usage.prompt_tokens),
        completion_tokens: column(usage.completion_tokens),
        start_time: info.start,
        completion_start_time: Some(info.start),
        end_time: Utc::now(),
        model: group.clone(),
        model_id: empty(),
        model_group: group,
        custom_llm_provider: empty(),
        api_base: empty(),
        region: None,
        user: key.and_then(|k| k.record.user_id.clone()),
        team_id: key.and_then(|k| k.record.team_id.clone()),
        status: Cow::Borrowed("success"),
        status_code: 200,
        error_class: None,
        error_message: None,
        end_user: info.end_user.filter(|e| !e.is_empty()).map(str::to_string),
        // The stored answer's id is the one the client got.
        response_id: info.facts.response_id.clone(),
        proxy_budget: false,
        cache_hit: true,
        cache_key: Some(info.key.clone()),
        request_tags: Some(super::routing_tags(info.principal, info.tags))
            .filter(|tags| !tags.is_empty())
            .map(Arc::from),
        guardrail_information: None,
        proxy_server_request: None,
        response: None,
    }
}

/// What a hit on a stored answer `body` reports, read once an entry
/// ([`crate::cache::Stored::facts`]): its usage as a spend row reads it,
/// its total as [`crate::cache::total_tokens`] counts it, and its id.
pub(super) fn hit_facts(body: &[u8]) -> HitFacts {
    let usage = spend::from_response_body(body).unwrap_or_default();
    let mut id = AnswerId::default();
    id.whole(body);
    HitFacts {
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        total_tokens: crate::cache::total_tokens(body),
        response_id: id.take(),
    }
}

/// The empty text a hit row's deployment columns share.
static EMPTY: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));

fn call_type(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::ChatCompletions => "acompletion",
        Endpoint::Completions => "atext_completion",
        Endpoint::Embeddings => "aembedding",
        Endpoint::Messages => "anthropic_messages",
        Endpoint::Responses => "aresponses",
        Endpoint::Rerank => "arerank",
        Endpoint::Moderations => "amoderation",
        Endpoint::ImageGenerations => "aimage_generation",
        Endpoint::ImageEdits => "aimage_edit",
        Endpoint::AudioSpeech => "aspeech",
        // LiteLLM has no call type of its own for translations (its proxy
        // has no such route): its transcription one.
        Endpoint::AudioTranscriptions | Endpoint::AudioTranslations => "atranscription",
    }
}

/// Queues a row on this core; the core's flusher hands queued rows to the
/// control plane in one batch (see [`flush_spend`]), so a request never wakes
/// the control thread itself. A row that would neither be written nor
/// count anywhere ([`crate::spend::SpendLogs::matters`]) is dropped here.
pub(super) fn submit(worker: &Worker, row: SpendLogRow) {
    if !worker.shared.spend_logs.matters(&row) {
        return;
    }
    let mut backlog = worker.spend_backlog.borrow_mut();
    backlog.push(row);
    if backlog.len() > MAX_BACKLOG {
        let lost = backlog.len() - MAX_BACKLOG;
        backlog.drain(..lost);
        tracing::error!(
            rows = lost,
            "spend rows LOST: the control plane is not keeping up"
        );
    }
}

/// Hands this core's queued rows to the spend writer; rows that do not fit
/// its queue stay for the next flush, so none is lost while it catches up.
pub fn flush_spend(worker: &Worker) {
    let rows = {
        let mut backlog = worker.spend_backlog.borrow_mut();
        if backlog.is_empty() {
            return;
        }
        // The next batch is likely as large: sized for it up front, it
        // does not grow (each growth copies every row).
        let next = Vec::with_capacity(backlog.len().min(MAX_PRESIZED));
        std::mem::replace(&mut *backlog, next)
    };
    if let Err(mut kept) = worker.shared.spend.record(rows) {
        let mut backlog = worker.spend_backlog.borrow_mut();
        kept.append(&mut backlog);
        *backlog = kept;
    }
}

/// Rows one core keeps while the control plane's queue is full.
const MAX_BACKLOG: usize = 100_000;

/// Most rows a core's next batch is sized for: a burst's size is not
/// kept reserved.
const MAX_PRESIZED: usize = 256;

/// A token count (read from an upstream) as a BIGINT column, saturating.
fn column(tokens: u64) -> i64 {
    i64::try_from(tokens).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn deployments(model_list: &str) -> Vec<Arc<Deployment>> {
        let text = format!("model_list:\n{model_list}");
        Config::parse(std::path::Path::new("c.yaml"), &text, &|_| None)
            .unwrap()
            .deployments
            .into_iter()
            .map(Arc::new)
            .collect()
    }

    fn row(
        dep: &Deployment,
        group: &str,
        model: &str,
        error: Option<&GatewayError>,
    ) -> SpendLogRow {
        Attempt::start(&Arc::from("call-1"), 1).finish(AttemptInfo {
            principal: &Principal::Master,
            master_token: Some("hashed-master"),
            group,
            dep,
            upstream_model: model,
            endpoint: Endpoint::ChatCompletions,
            usage: Usage {
                prompt_tokens: 3,
                completion_tokens: 4,
                ..Usage::default()
            },
            cost: 0.5,
            status: error.map_or(200, |_| 500),
            error,
            end_user: Some(""),
            proxy_budget: false,
            cache_key: None,
            tags: &[],
            guardrails: &Default::default(),
        })
    }

    #[test]
    fn a_hit_row_is_free_and_names_its_entry() {
        let stored =
            br#"{"id":"x","usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}"#;
        let facts = hit_facts(stored);
        assert_eq!(facts.total_tokens, 12);
        let r = hit_row(HitInfo {
            call_id: &Arc::from("call-9"),
            principal: &Principal::Master,
            master_token: Some("hashed-master"),
            group: &Arc::from("g"),
            endpoint: Endpoint::ChatCompletions,
            end_user: Some("eu-1"),
            tags: &["team-a".to_string()],
            key: &Arc::from("ns:abc"),
            facts: &facts,
            start: Utc::now(),
        });
        assert!(r.cache_hit);
        assert_eq!(
            r.response_id.as_deref(),
            Some("x"),
            "the stored answer's id"
        );
        assert_eq!(r.request_tags.as_deref(), Some(&["team-a".to_string()][..]));
        assert_eq!(r.cache_key.as_deref(), Some("ns:abc"));
        assert_eq!(r.spend, 0.0);
        assert_eq!(
            (r.prompt_tokens, r.completion_tokens, r.total_tokens),
            (7, 5, 12)
        );
        assert_eq!(
            (&*r.request_id, &*r.model_group, &*r.api_key),
            ("call-9", "g", "hashed-master")
        );
        assert_eq!(r.end_user.as_deref(), Some("eu-1"));
        // An attempt's row is no hit.
        assert!(!row(&deployments("  - model_name: g\n    litellm_params: {model: openai/gpt-4o, api_base: 'http://127.0.0.1:9/v1'}\n")[0], "g", "gpt-4o", None).cache_hit);
    }

    #[test]
    fn a_row_shares_its_deployments_names() {
        let deps = deployments(
            "  - model_name: g\n    litellm_params: {model: openai/gpt-4o, api_base: 'http://127.0.0.1:9/v1', region_name: eu}\n",
        );
        let dep = &deps[0];
        let r = row(dep, "g", "gpt-4o", None);
        let labels = &dep.spend_labels;
        assert!(Arc::ptr_eq(&r.model_group, &labels.group));
        assert!(Arc::ptr_eq(&r.model, &labels.upstream_model));
        assert!(Arc::ptr_eq(&r.custom_llm_provider, &labels.provider));
        assert!(Arc::ptr_eq(&r.api_base, &labels.api_base));
        assert!(Arc::ptr_eq(&r.model_id, &dep.id));
        assert_eq!(
            (&*r.model_group, &*r.model, &*r.custom_llm_provider),
            ("g", "gpt-4o", "openai")
        );
        assert_eq!(&*r.api_base, "http://127.0.0.1:9/v1");
        assert_eq!(r.region.as_deref(), Some("eu"));
        assert_eq!(
            (&*r.api_key, &*r.call_type, &*r.status),
            ("hashed-master", "acompletion", "success")
        );
        assert_eq!((&*r.request_id, &*r.call_id), ("call-1", "call-1"));
        assert_eq!((r.total_tokens, r.error_class, r.end_user), (7, None, None));
    }

    #[test]
    fn attempts_share_the_call_id() {
        let call_id: Arc<str> = Arc::from("call-1");
        let first = Attempt::start(&call_id, 1);
        assert!(Arc::ptr_eq(&first.request_id, &call_id) && Arc::ptr_eq(&first.call_id, &call_id));
        let second = Attempt::start(&call_id, 2);
        assert_eq!(
            (&*second.request_id, &*second.call_id),
            ("call-1:2", "call-1")
        );
        assert!(Arc::ptr_eq(&second.call_id, &call_id));
    }

    #[test]
    fn a_wildcard_row_names_the_group_and_model_asked_for() {
        let deps =
            deployments("  - model_name: 'openai/*'\n    litellm_params: {model: 'openai/*'}\n");
        let error = GatewayError::UpstreamTimeout {
            provider: "openai".into(),
            deployment: deps[0].id.to_string(),
            after: Duration::from_secs(1),
        };
        let r = row(&deps[0], "openai/gpt-4o-mini", "gpt-4o-mini", Some(&error));
        assert_eq!(
            (&*r.model_group, &*r.model),
            ("openai/gpt-4o-mini", "gpt-4o-mini")
        );
        assert_eq!(&*r.status, "failure");
        assert_eq!(r.error_class.as_deref(), Some(error.class().as_str()));
        assert_eq!(r.error_message, Some(error.to_string()));
        assert_eq!(
            &*r.api_base, "https://api.openai.com/v1",
            "the provider's default"
        );
    }
}
