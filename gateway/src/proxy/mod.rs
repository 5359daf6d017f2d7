//! The life of an LLM request, one phase after another. Each phase is a call
//! into the module that owns it; this file only orders them.
//!
//! 1. **authenticate**: the credential names a principal (`auth`), from the
//!    request head before the body was read (`api::admit`); here its result.
//! 2. **read**: the routing fields of the body, borrowed, never re-serialized (`inbound`).
//! 3. **authorize**: aliases, then the key's, team's and user's allowed models (`auth`).
//! 4. **route**: the model group and one of its deployments (`router`).
//! 5. **limit**: check and charge rpm, tpm and parallel limits of every scope,
//!    all or none, once per request (`limits`).
//!    Then **cache** (5b): with `litellm_settings.cache` on, the request's
//!    key is looked up (`cache`); a hit is answered from the entry (after a
//!    check that no budget is spent), skipping phases 6 to 9; on a miss the
//!    answer is copied as it is relayed and stored once it is complete and
//!    successful. A miss while an identical request's call is in progress
//!    waits for that answer (bounded) instead of making its own call.
//! 6. **admit**: reserve the worst-case cost against every budget (`budget`, `spend`).
//! 7. **translate**: images by URL the provider refuses are fetched and
//!    inlined (`images`); the provider builds its native request (`providers`).
//! 8. **call and relay**: the per-core pool sends it; the body streams back as it
//!    arrives, SSE event by event, while usage is read on the side (`upstream`, `relay`).
//! 9. **settle**: the real cost replaces the reservation; one spend row per
//!    attempt goes to the control plane without waiting (`record`); the rate
//!    limiter's reservation becomes the real usage and parallel slots are freed.
//! 10. **log**: one access line with durations.

mod access;
mod answer_id;
mod batch_poll;
mod cached;
mod convert;
mod count_tokens;
mod cut_off;
mod enforced_params;
mod files;
mod guard;
mod guard_api;
mod headers;
mod held;
mod images;
mod mock_params;
mod passthrough;
mod prompt_log;
mod realtime;
mod realtime_guard;
mod record;
mod relay;
mod trace_id;
mod upload;

use crate::auth::Principal;
use crate::deployment::{Deployment, SpendLabels};
use crate::downstream::Responder;
use crate::error::GatewayError;
use crate::formats::Format;
use crate::http1::RequestHead;
use crate::inbound::{Endpoint, LlmRequest};
use crate::limits::{AdmitInput, RateHeaders};
use crate::panic_guard::CatchPanic;
use crate::providers::{self, MockReply};
use crate::router::{AttemptFailure, Pick, PlanInput, Router};
use crate::spend;
use crate::state::Worker;
use bytes::Bytes;
use headers::{litellm_headers, upstream_head};
use held::{Form, Held};
use record::Attempt;
use relay::UsageTap;

pub use batch_poll::run as poll_batches;
pub use count_tokens::handle as count_tokens;
pub use files::{handle as files, upload as files_upload};
pub use passthrough::handle as pass_through;
pub use passthrough::handle_custom as pass_through_custom;
pub use realtime::{handle as realtime, KEY_PROTOCOL as REALTIME_KEY_PROTOCOL};
pub use record::flush_spend;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use upload::STREAM_ABOVE as STREAM_UPLOADS_ABOVE;

/// Largest upstream error body read to extract its message.
const MAX_ERROR_BODY: usize = 1 << 20;

/// What the headers and the access log report of one request.
pub(crate) struct Outcome {
    call_id: Arc<str>,
    /// What the request's headers say about redacting its messages in its
    /// rows.
    redaction: crate::spend::prompt_privacy::RedactionHeaders,
    received_at: Instant,
    /// The model group asked for (after the key's aliases), once read.
    requested: Option<String>,
    group: Option<Arc<str>>,
    deployment: Option<Arc<Deployment>>,
    upstream_wait: Duration,
    stream: bool,
    /// Retries made so far (`x-litellm-attempted-retries`).
    retries: u32,
    /// Fallback groups tried so far (`x-litellm-attempted-fallbacks`).
    fallbacks: u32,
    /// `x-litellm-max-fallbacks`, once the plan exists.
    max_fallbacks: Option<u32>,
    /// `x-ratelimit-*`, once the limiter admitted the request.
    rate: Option<RateHeaders>,
    /// Tokens the attempts really used, for the limiter's reconciliation.
    tokens_used: u64,
    /// The successful attempt's usage, for a streamed answer the cache
    /// stores.
    answer_tokens: crate::cache::stream::Tokens,
    /// Whether the answer came from the response cache (`None`: not
    /// looked up).
    cache_hit: Option<bool>,
    /// The spend rows' `cache_key`: the entry's key, `Cache OFF` without a
    /// cache.
    cache_key: Option<Arc<str>>,
    /// What metrics and traces record of the request.
    telemetry: crate::telemetry::Telemetry,
    /// The request's `post_call` guardrails, for a whole answer.
    post_call: Option<crate::guardrails::PostCall>,
    /// The guardrails it runs (`x-litellm-applied-guardrails`).
    applied_guardrails: Option<Arc<str>>,
    /// The caller's `user_api_key_*` fields for its guardrail services.
    guard_caller: serde_json::Map<String, serde_json::Value>,
    /// What each guardrail did (the spend rows' `guardrail_information`,
    /// metrics and trace spans).
    guard_log: crate::guardrails::log::Log,
    /// Whether `during_call` guardrail services run beside the attempts
    /// (whose block drops the one on the wire): only then is
    /// [`Self::on_the_wire`] kept.
    during_call: bool,
    /// The attempt on the wire while `during_call` services run: its
    /// number, and its upstream model when the route made it (a wildcard),
    /// for the row of an attempt a block drops ([`record_dropped`]).
    on_the_wire: Option<(u32, Option<String>)>,
    /// A `during_call` content filter's refusal, answered once the limiter
    /// has admitted the request (LiteLLM's `during_call` hooks run after
    /// its rate limiter, so such a request counts toward the limits).
    /// Boxed: rare, and the outcome is kept by every open stream.
    deferred_refusal: Option<Box<GatewayError>>,
}

/// Serves a multipart upload on `endpoint` whose body (`length` bytes,
/// `early` of them read with the head) is still on the client's
/// connection: read as it is streamed to the upstream, or whole (see
/// `upload`). Returns whether the whole body was read (else the
/// connection cannot serve another request).
pub async fn upload(
    worker: &Worker,
    head: &RequestHead,
    endpoint: Endpoint,
    caller: Result<Principal, GatewayError>,
    (early, length): (Vec<u8>, u64),
    out: &mut Responder<'_>,
    received_at: Instant,
) -> bool {
    let limits = &worker.shared.limits;
    let received = upload::receive(
        out.request_stream(),
        head,
        upload::Plan::of(endpoint),
        (early, length),
        limits,
    );
    match received.await {
        Err(err) => {
            out.close_after();
            handle_streamed(
                worker,
                head,
                endpoint,
                Err(err),
                (Bytes::new(), None),
                out,
                received_at,
            )
            .await;
            false
        }
        Ok(upload::Received::Whole(body)) => {
            handle(worker, head, endpoint, caller, body, out, received_at).await;
            true
        }
        Ok(upload::Received::Streamed(prefix, rest)) => {
            let read_all = rest.read_all();
            let body = (prefix, Some(rest));
            handle_streamed(worker, head, endpoint, caller, body, out, received_at).await;
            read_all.get()
        }
    }
}

/// Serves one OpenAI-style LLM request on `endpoint`; `caller` is the
/// result of authenticating its head.
///
/// Not an `async fn`: its future is [`handle_streamed`]'s, without a
/// wrapper keeping a second copy of the arguments for as long as a stream
/// is open.
pub fn handle<'a, 'r>(
    worker: &'a Worker,
    head: &'a RequestHead,
    endpoint: Endpoint,
    caller: Result<Principal, GatewayError>,
    body: Bytes,
    out: &'a mut Responder<'r>,
    received_at: Instant,
) -> impl std::future::Future<Output = ()> + use<'a, 'r> {
    handle_streamed(
        worker,
        head,
        endpoint,
        caller,
        (body, None),
        out,
        received_at,
    )
}

/// [`handle`], for a body that may be a streamed upload's prefix and the
/// rest to stream.
async fn handle_streamed(
    worker: &Worker,
    head: &RequestHead,
    endpoint: Endpoint,
    caller: Result<Principal, GatewayError>,
    (body, upload): (Bytes, Option<Box<upload::StreamedBody>>),
    out: &mut Responder<'_>,
    received_at: Instant,
) {
    let read_all = upload.as_deref().map(upload::StreamedBody::read_all);
    let mut outcome = Outcome {
        call_id: headers::call_id(),
        redaction: prompt_log::redaction_headers(head),
        received_at,
        requested: None,
        group: None,
        deployment: None,
        upstream_wait: Duration::ZERO,
        stream: false,
        retries: 0,
        fallbacks: 0,
        max_fallbacks: None,
        rate: None,
        tokens_used: 0,
        answer_tokens: Default::default(),
        cache_hit: None,
        cache_key: None,
        telemetry: crate::telemetry::Telemetry::begin(head, received_at),
        post_call: None,
        applied_guardrails: None,
        guard_caller: Default::default(),
        guard_log: Default::default(),
        during_call: false,
        on_the_wire: None,
        deferred_refusal: None,
    };
    if let Ok(caller) = &caller {
        outcome
            .telemetry
            .identify(caller, worker.shared.auth.master_token_shared());
    }
    // The principal is borrowed below: a value moved into a future is
    // also kept in this one's state, which every open stream carries.
    let result = match caller {
        Err(err) => Err(err),
        Ok(principal) => match trace_id::check(&principal, head, Some(&body)).and_then(|()| {
            let checked = enforced_params::Body {
                bytes: &body,
                form: endpoint
                    .takes_form()
                    .then(|| head.header("content-type").unwrap_or("")),
                streamed: upload.is_some(),
            };
            enforced_params::check(
                &worker.shared.enforced_params,
                &principal,
                endpoint,
                checked,
            )
        }) {
            Err(err) => Err(err),
            Ok(()) => {
                let forward = convert::forward_headers(head, endpoint);
                let served = CatchPanic::new(serve(
                    worker,
                    endpoint,
                    (&principal, forward),
                    (body, upload),
                    out,
                    &mut outcome,
                ))
                .await;
                served.unwrap_or_else(|panic| {
                    // Tickets and reservations were released while unwinding;
                    // only this request fails, and its connection closes.
                    tracing::error!(call_id = %outcome.call_id, panic = %panic, "request panicked");
                    out.close_after();
                    Err(GatewayError::Internal("the request handler failed"))
                })
            }
        },
    };
    let mut error = None;
    if let Err(err) = result {
        // An upload's unread rest stays on the connection: it closes.
        if read_all.as_ref().is_some_and(|read| !read.get()) {
            out.close_after();
        }
        if out.started() {
            out.abort_stream();
        } else {
            let headers = litellm_headers(err.status(), &outcome);
            convert::send_error(out, endpoint.format(), &err, headers).await;
        }
        error = Some(err);
    }
    access::log_access(
        head,
        endpoint,
        out.status().unwrap_or(0),
        &outcome,
        error.as_ref(),
    );
    outcome
        .telemetry
        .guardrails(&outcome.call_id, &outcome.guard_log);
    outcome.telemetry.finish(crate::metrics::Finish {
        call_id: &outcome.call_id,
        requested: outcome.requested.as_deref(),
        retries: outcome.retries,
        fallbacks: outcome.fallbacks,
        path: head.path(),
        endpoint: endpoint.path_suffix(),
        status: out.status(),
        error: error.as_ref(),
        total: outcome.received_at.elapsed(),
        upstream_wait: outcome.upstream_wait,
        rate: outcome.rate.as_ref(),
    });
}

/// The group `requested` names for `principal`: through the key's aliases,
/// then `router_settings.model_group_alias`.
pub(crate) fn resolve_model(worker: &Worker, principal: &Principal, requested: &str) -> String {
    let asked = principal.resolve_alias(requested);
    let router = worker.shared.models.router();
    router
        .settings()
        .group_alias(asked)
        .unwrap_or(asked)
        .to_string()
}

/// Whether `principal` may call `model`, the group [`resolve_model`] gave
/// for `requested`: a key may list a config alias instead of its group,
/// and a team's `model_aliases` grant the names they map (LiteLLM checks
/// the name sent). A model access group (`model_info.access_groups`) the
/// caller lists grants the models of its deployments.
pub(crate) fn check_access(
    worker: &Worker,
    principal: &Principal,
    requested: &str,
    model: &str,
) -> Result<(), GatewayError> {
    let router = worker.shared.models.router();
    let registry = router.registry();
    principal
        .check_model(model, &registry.access_groups_of(model))
        .or_else(|e| {
            let asked = principal.resolve_alias(requested);
            let grants = |name: &str| {
                name != model
                    && principal
                        .check_model(name, &registry.access_groups_of(name))
                        .is_ok()
            };
            if grants(asked) || grants(requested) {
                Ok(())
            } else {
                Err(e)
            }
        })
}

/// The tags tag-based routing reads and the spend row carries: the
/// request's, then its key's and its team's `metadata.tags`, without
/// repeats (LiteLLM merges them so).
fn routing_tags(principal: &Principal, request: &[String]) -> Vec<String> {
    let mut tags = request.to_vec();
    let Principal::Key(k) = principal else {
        return tags;
    };
    let team = k.team.as_ref().map(|t| &t.record.metadata);
    for metadata in std::iter::once(&k.record.metadata).chain(team) {
        let listed = metadata.get("tags").and_then(serde_json::Value::as_array);
        for tag in listed
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
        {
            if !tags.iter().any(|t| t == tag) {
                tags.push(tag.to_string());
            }
        }
    }
    tags
}

/// A request's own `fallbacks`, checked as LiteLLM checks them before the
/// request runs: the caller may use each one (else the refusal a model of
/// its own would get), and each can be routed (else `Invalid model name`).
async fn authorize_fallbacks(
    worker: &Worker,
    principal: &Principal,
    names: Vec<&str>,
) -> Result<(), GatewayError> {
    for name in names {
        let model = resolve_model(worker, principal, name);
        check_access(worker, principal, name, &model)?;
        let router = worker
            .shared
            .models
            .router_for(&worker.shared.control, &model)
            .await;
        if router.registry().resolve(&model).is_none() {
            return Err(GatewayError::UnknownModel(name.to_string()));
        }
    }
    Ok(())
}

/// The request a fallback entry with its own parameters sends: the one
/// received with `fields` in place of its own (as LiteLLM updates the
/// call's arguments with the entry), through the same guardrails.
async fn fallback_request(
    worker: &Worker,
    principal: &Principal,
    received: &LlmRequest,
    fields: serde_json::Map<String, serde_json::Value>,
    outcome: &mut Outcome,
) -> Result<LlmRequest, GatewayError> {
    let bad = |e: serde_json::Error| GatewayError::InvalidParam {
        param: "fallbacks",
        message: format!("a fallback's own parameters could not be applied: {e}"),
    };
    let mut body: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&received.body).map_err(bad)?;
    body.extend(fields);
    let body = Bytes::from(serde_json::to_vec(&body).map_err(bad)?);
    let body = guard::checked_body(worker, (principal, received.endpoint), body, outcome).await?;
    let mut req = LlmRequest::parse(received.endpoint, body)?;
    req.forward_headers = received.forward_headers.clone();
    req.message_logging_off = req.message_logging_off.or(received.message_logging_off);
    Ok(req)
}

/// [`resolve_model`] then [`check_access`].
pub(crate) fn authorize_model(
    worker: &Worker,
    principal: &Principal,
    requested: &str,
) -> Result<String, GatewayError> {
    let model = resolve_model(worker, principal, requested);
    check_access(worker, principal, requested, &model)?;
    Ok(model)
}

async fn serve(
    worker: &Worker,
    endpoint: Endpoint,
    (principal, forward_headers): (&Principal, Vec<(&'static str, String)>),
    (body, upload): (Bytes, Option<Box<upload::StreamedBody>>),
    out: &mut Responder<'_>,
    outcome: &mut Outcome,
) -> Result<(), GatewayError> {
    // 1. authenticate: `handle` answered a refused caller
    // 2. read, after the guardrails (which may refuse it or mask its text;
    // a form's audio has no text for them); its `during_call` services
    // are kept to run beside the call
    let mut beside = None;
    let parsed = match convert::form_content_type(&forward_headers) {
        Some(content_type) => {
            let form = match upload {
                Some(_) => LlmRequest::parse_form_prefix(endpoint, content_type, body)?,
                None => LlmRequest::parse_form(endpoint, content_type, body)?,
            };
            guard::form_prompt(worker, principal, &form, outcome).await?;
            form
        }
        None => {
            // LiteLLM answers a model the key may not use and an
            // exhausted budget from its key check, before any guardrail
            // reads the request: made first when a guardrail service
            // could be called, else only when a content filter refuses
            // (the answer is the same; a request that passes meets the
            // same checks below).
            let early = worker.shared.guardrails.has_pre_call_services();
            if early {
                guard::refuse_as_key_check(worker, principal, &body).await?;
            }
            let checked =
                guard::checked_body_beside(worker, (principal, endpoint), body.clone(), outcome);
            let (checked, during) = match checked.await {
                Ok(checked) => checked,
                Err(refusal) => {
                    if !early {
                        guard::refuse_as_key_check(worker, principal, &body).await?;
                    }
                    return Err(refusal);
                }
            };
            if !early && outcome.deferred_refusal.is_some() {
                guard::refuse_as_key_check(worker, principal, &body).await?;
            }
            // The request holds the body from here (`Held::release` lets
            // it go once a stream's head is out); kept in this future as
            // well, every open stream held its body until it ended.
            drop(body);
            beside = during;
            LlmRequest::parse(endpoint, checked)?
        }
    };
    // Generated audio has no text for `post_call` guardrails, and is
    // relayed as it arrives rather than held for them.
    if endpoint == Endpoint::AudioSpeech {
        outcome.post_call = None;
    }
    // Held in one place (a local moved into a call would also keep its
    // room in this future).
    let mut held = Held::new(parsed);
    held.upload = upload;
    let req = &mut held.req;
    let allowed = worker.shared.mock_testing_params;
    held.mock = mock_params::read(req, allowed, principal)?;
    req.forward_headers = forward_headers;
    outcome.stream = req.stream;
    // The body's `cache` controls are checked whenever the cache is on; a
    // key whose metadata has `cache` replaces them (LiteLLM's key-level
    // controls).
    let of_key = key_of(principal).and_then(|k| k.record.metadata.get("cache"));
    if let Some(k) = key_of(principal) {
        let allowed = &k.record.allowed_cache_controls;
        crate::cache::control::check_allowed(req.cache.as_ref(), of_key, allowed)?;
    }
    let controls = match worker.shared.cache.load().as_ref() {
        Some(_) => Some(match of_key {
            Some(v) => crate::cache::control::of_key(v)?,
            None => crate::cache::control::parse(req.cache.as_ref())?,
        }),
        None => None,
    };
    let most = worker.shared.limits.max_request_retries;
    if req.num_retries.is_some_and(|n| n > most) {
        return Err(GatewayError::InvalidParam {
            param: "num_retries",
            message: format!(
                "at most {most} retries may be asked for (gateway_settings.max_request_retries)"
            ),
        });
    }
    // 3. authorize
    let model = resolve_model(worker, principal, &req.model);
    outcome.requested = Some(model.clone());
    outcome
        .telemetry
        .requested(req.end_user.as_deref(), &model, || {
            let router = worker.shared.models.router();
            router.registry().resolve(&model).is_some()
        });
    #[cfg(debug_assertions)]
    if crate::panic_guard::test_panic_model(&model) {
        panic!("test hook: the request path panicked");
    }
    check_access(worker, principal, &req.model, &model)?;
    // The end user (`user`): refused when blocked; its budget and limits
    // (its own, else the key's or the proxy's default) join the key's
    // below.
    let end_user = worker
        .shared
        .auth
        .end_user(req.end_user.as_deref(), end_user_default(principal))
        .await?;
    // Fallback entries bringing their own parameters (LiteLLM's
    // `[{"model": ..., "messages": [...]}]`): each one's request is made
    // now, so a bad one is refused before anything is sent.
    if let Some(value) = req.fallbacks.clone().filter(|_| !req.is_form()) {
        for (name, fields) in crate::router::request_fallback_overrides(&value) {
            let group = resolve_model(worker, principal, name);
            let own = fallback_request(worker, principal, &held.req, fields, outcome).await?;
            held.park(group, own);
        }
    }
    // 4. route: fallbacks wrap retries wrap the call
    let (req, prompt) = (&held.req, &held.prompt);
    let fallbacks = match &req.fallbacks {
        Some(value) => {
            let invalid = |message| GatewayError::InvalidParam {
                param: "fallbacks",
                message,
            };
            // Boxed: a read-through of a fallback's name is rare and large.
            Box::pin(authorize_fallbacks(
                worker,
                principal,
                PlanInput::request_fallback_names(value).map_err(invalid)?,
            ))
            .await?;
            Some(PlanInput::request_fallbacks(value, &model).map_err(invalid)?)
        }
        None => None,
    };
    let shared = &worker.shared;
    let router = shared.models.router_for(&shared.control, &model).await;
    let input = PlanInput {
        // The end user's region, else the key's (its team's).
        allowed_regions: end_user
            .as_ref()
            .and_then(|e| e.record.allowed_model_region.clone())
            .map(|region| vec![region])
            .or_else(|| principal.allowed_regions()),
        prompt_tokens: if router.needs_prompt_estimate(prompt.upper_bound()) {
            prompt.get()
        } else {
            0
        },
        num_retries: req.num_retries,
        fallbacks,
        stream: req.stream,
        tags: if router.settings().enable_tag_filtering {
            routing_tags(principal, &req.tags)
        } else {
            Vec::new()
        },
    };
    let mut plan = match router.plan(&model, input) {
        Err(GatewayError::UnknownModel(_)) => Err(GatewayError::UnknownModel(req.model.clone())),
        other => other,
    }?;
    // 5. limit
    // A key past its budget that opted in to throttling is held to a share
    // of its limits; a key's dynamic limits bind only while the group fails.
    // Boxed: a ticket is large and kept until the answer ends. The
    // throttled row (600 B) lives only in this block: bound beside the
    // call, it stayed in this future's state while a stream was open.
    let mut ticket = {
        let throttled = principal.key_for_limits(|| router.failures_this_minute(&model));
        worker
            .shared
            .limiter
            .admit(&AdmitInput {
                key: principal.key_rows_as(throttled.as_ref()),
                model: &model,
                end_user: req.end_user.as_deref(),
                end_user_limits: end_user.as_ref().map(|e| e.limits()),
                prompt,
                max_tokens: req.max_tokens,
                estimated_output: record::estimated_output(
                    key_of(principal),
                    &model,
                    worker.shared.estimated_output_tokens,
                ),
                embeddings: req.endpoint.writes_no_tokens(),
                request_id: &outcome.call_id,
                extra: principal.extra_limits(&model, &req.tags),
            })
            .await?
            .map(Box::new)
    };
    outcome.rate = ticket.as_ref().map(|t| *t.headers());
    // Counted, then refused: the ticket's drop frees its parallel slot
    // and settles its reserved tokens at none used.
    if let Some(refusal) = outcome.deferred_refusal.take() {
        return Err(*refusal);
    }
    let caller = Caller {
        principal,
        end_user: end_user.as_deref(),
        proxy_budget: worker.shared.auth.keys().proxy_budget(),
        model_windows: worker.shared.auth.keys().end_users().model_windows(),
        budget_windows: worker.shared.auth.keys().budget_windows(),
    };
    // A parallel slot is given back before the client sees the end of its
    // response: a client that sends its next request as soon as this one
    // ends finds the slot free, whichever core takes it.
    if ticket.as_ref().is_some_and(|t| t.holds_slot()) {
        out.hold_last_write();
    }
    // 5b. cache
    let cache = worker.shared.cache.load();
    let cache = cache.as_deref();
    // A request with `post_call` (or `during_call` services) guardrails
    // never reads the cache: an entry another caller stored was not
    // checked by them.
    let cache_plan = match (cache, &controls) {
        (Some(cache), Some(controls)) if outcome.post_call.is_none() && beside.is_none() => {
            let req = &held.req;
            let owner = crate::cache::Owner::of(cache.settings().scope, principal);
            cache.plan(req.endpoint, &model, owner, &req.body, req.stream, controls)?
        }
        _ => None,
    };
    outcome.cache_key = match (cache, &cache_plan) {
        (None, _) => Some(crate::cache::off_key()),
        (Some(_), Some(plan)) => Some(plan.key.clone()),
        (Some(_), None) => None,
    };
    let result = match (cache, &cache_plan) {
        (Some(cache), Some(cache_plan)) => {
            // Boxed: a Redis lookup's state is over before the call.
            let stored = Box::pin(cache.lookup(&worker.cache, cache_plan)).await;
            outcome.cache_hit = Some(false);
            // A miss joins its key's single flight: a follower is answered
            // with the leader's stored answer as a hit, or makes its own
            // call when there is none in time.
            let mut lead = None;
            let stored = match stored {
                Some(stored) => Some(stored),
                None => match cache.join(cache_plan) {
                    crate::cache::Join::Lead(l) => {
                        lead = Some(l);
                        None
                    }
                    crate::cache::Join::Follow(f) => Box::pin(f.wait(cache.follow_wait())).await,
                    crate::cache::Join::Alone => None,
                },
            };
            let answer = stored.and_then(|s| Some((cached::answer_of(cache_plan, &s)?, s)));
            match answer {
                Some((answer, stored)) => {
                    record::refuse_if_exhausted(caller, &model)?;
                    outcome.cache_hit = Some(true);
                    // Read from the stored body by its first hit only.
                    let facts = stored.facts(record::hit_facts);
                    let tokens = match cache_plan.stream {
                        true => crate::cache::total_tokens(&answer),
                        false => facts.total_tokens,
                    };
                    outcome.telemetry.cache(&model, true, tokens);
                    let group: Arc<str> = model.as_str().into();
                    outcome.group = Some(group.clone());
                    let start = chrono::Utc::now();
                    let sent = cached::send(cache_plan, &answer, out, outcome).await;
                    if sent.is_ok() {
                        let mut row = record::hit_row(record::HitInfo {
                            call_id: &outcome.call_id,
                            principal,
                            master_token: worker.shared.auth.master_token(),
                            group: &group,
                            endpoint: held.req.endpoint,
                            end_user: held.req.end_user.as_deref(),
                            tags: &held.req.tags,
                            key: &cache_plan.key,
                            facts,
                            start,
                        });
                        row.guardrail_information = outcome
                            .guard_log
                            .information()
                            .map(|t| Arc::new(crate::store::JsonText(t)));
                        let asked = (held.req.endpoint, held.req.message_logging_off);
                        let privacy = (principal, asked, outcome.redaction);
                        prompt_log::keep_hit(
                            worker,
                            privacy,
                            &mut row,
                            &held.req.body,
                            &stored.body,
                        );
                        record::submit(worker, row);
                    }
                    sent
                }
                None => {
                    outcome.telemetry.cache(&model, false, 0);
                    out.capture_body(cache.capture_limit(cache_plan));
                    // A whole answer's write (its last) waits until the
                    // answer is stored and the flight's followers are let
                    // go: they never wait on this client's reading, and a
                    // client slow to read it (or gone) does not lose the
                    // others a complete answer. Released below with any
                    // other held write. A stream's last write is its
                    // 5-byte end, after everything else was relayed:
                    // nothing to gain there.
                    if !cache_plan.stream {
                        out.hold_last_write();
                    }
                    let result =
                        attempts(worker, &router, caller, &mut held, &mut plan, out, outcome).await;
                    let body = out.take_capture();
                    let stored = match (&result, out.status(), body) {
                        (Ok(()), Some(200), Some(body)) => {
                            cache.store(&worker.cache, cache_plan, body, outcome.answer_tokens)
                        }
                        _ => None,
                    };
                    if let Some(lead) = lead {
                        lead.finish(stored);
                    }
                    result
                }
            }
        }
        _ => match beside {
            None => attempts(worker, &router, caller, &mut held, &mut plan, out, outcome).await,
            Some(beside) => {
                // Nothing reaches the client before the services pass.
                let gate = Rc::new(crate::local_signal::LocalSignal::default());
                out.gate(Rc::clone(&gate));
                outcome.during_call = true;
                let verdict = {
                    let call =
                        attempts(worker, &router, caller, &mut held, &mut plan, out, outcome);
                    let check = guard::beside_the_call(worker, beside, Box::pin(call), &gate);
                    Box::pin(check).await
                };
                match verdict {
                    Ok(result) => result,
                    // Refused: the upstream call (or its answer) is
                    // dropped, and the refusal is what the client sees;
                    // a call dropped on the wire still gets its row.
                    Err(refusal) => {
                        out.discard_unsent();
                        record_dropped(worker, caller, &held, outcome, &refusal);
                        Err(refusal)
                    }
                }
            }
        },
    };
    if let Some(ticket) = ticket.as_mut() {
        ticket.add_tokens(outcome.tokens_used);
    }
    drop(ticket);
    let released = out.release_last_write().await;
    result.and_then(|()| released.map_err(|_| GatewayError::Unavailable("client connection lost")))
}

/// Who a request is for: its caller, and its end user when that one's row
/// restricts it.
#[derive(Clone, Copy)]
pub(crate) struct Caller<'a> {
    /// The authenticated caller.
    pub principal: &'a Principal,
    /// The body's `user`, when restricted (budget, limits).
    pub end_user: Option<&'a crate::auth::EndUserEntry>,
    /// The proxy-wide budget (`litellm_settings.max_budget`), if set.
    pub proxy_budget: Option<&'a Arc<crate::budget::Budget>>,
    /// End users' per-model budget counters.
    pub model_windows: &'a crate::auth::ModelWindows,
    /// Keys' and teams' budget-window counters (`budget_limits`).
    pub budget_windows: &'a crate::auth::BudgetWindows,
}

/// Phases 6 to 9 for each pick of the plan until one succeeds, a byte has
/// reached the client, or the plan is exhausted.
#[allow(clippy::too_many_arguments)]
async fn attempts<'r>(
    worker: &Worker,
    router: &'r Router,
    caller: Caller<'_>,
    held: &mut Held,
    plan: &mut crate::router::Plan<'r>,
    out: &mut Responder<'_>,
    outcome: &mut Outcome,
) -> Result<(), GatewayError> {
    held.ask_for_usage();
    // Kept small: every open stream carries this future's state.
    let mut last: Option<AttemptFailure> = None;
    let mut failure: Option<Box<GatewayError>> = None;
    let mut skip = false;
    outcome.max_fallbacks = Some(plan.max_fallbacks());
    // Retries and fallbacks start only until this instant, however many
    // the body or the config ask for.
    let retry_deadline = outcome.received_at + worker.shared.limits.retry_deadline;
    let principal = caller.principal;
    loop {
        let next = if skip {
            plan.skip_group()
        } else {
            plan.next(last.as_ref())
        };
        let Some(pick) = next else { break };
        skip = pick.fallback_depth > 0
            && principal
                .check_model(
                    &pick.group,
                    &router.registry().access_groups_of(&pick.group),
                )
                .is_err();
        if skip {
            // A fallback the key may not use is no fallback at all: skip
            // the whole group, never retry it.
            continue;
        }
        if last.is_some() {
            if out.client_gone() {
                return Err(failure.map_or(GatewayError::ClientGone, |f| *f));
            }
            if Instant::now() + pick.delay >= retry_deadline {
                break;
            }
        }
        if !pick.delay.is_zero() {
            // Boxed: a timer is large, and only retries wait.
            Box::pin(monoio::time::sleep(pick.delay)).await;
        }
        outcome.group = Some(SpendLabels::share(
            &pick.deployment.spend_labels.group,
            &pick.group,
        ));
        outcome.deployment = Some(pick.deployment.clone());
        outcome.retries = plan.attempted_retries();
        outcome.fallbacks = plan.attempted_fallbacks();
        // LiteLLM's mock failures: the requested group fails without a call.
        if let Some(ask) = held
            .mock
            .as_ref()
            .filter(|a| a.fails() && pick.fallback_depth == 0)
        {
            let err = match ask.error(&pick.group) {
                Some(err) => err,
                None => {
                    let dep = pick.deployment;
                    let timeout = if held.req.stream {
                        dep.stream_timeout
                    } else {
                        dep.timeout
                    };
                    let wait = ask.delay.unwrap_or_default() + timeout;
                    Box::pin(monoio::time::sleep(wait)).await;
                    relay::upstream_error(crate::upstream::UpstreamError::Timeout, dep, timeout)
                }
            };
            record_mocked(worker, caller, held, &pick, outcome, &err);
            last = Some(AttemptFailure::from_error(err.class(), &err, &pick));
            failure = Some(Box::new(err));
            continue;
        }
        let started = Instant::now();
        held.use_for((pick.fallback_depth > 0).then_some(&*pick.group));
        let form = held.prepare(worker, pick.deployment).await?;
        // Dropped with this future (a `during_call` guardrail's block),
        // it leaves the deployment's in-flight count.
        let running = router.start(&pick);
        if outcome.during_call {
            let made = match &pick.upstream_model {
                std::borrow::Cow::Owned(model) => Some(model.clone()),
                std::borrow::Cow::Borrowed(_) => None,
            };
            outcome.on_the_wire = Some((pick.attempt, made));
        }
        let result = attempt_once(worker, caller, held, form, &pick, out, outcome).await;
        outcome.on_the_wire = None;
        match result {
            Ok(tokens) => {
                running.end(&pick, started.elapsed(), Ok(tokens));
                return Ok(());
            }
            Err(err) => {
                let failed = AttemptFailure::from_error(err.class(), &err, &pick);
                running.end(&pick, started.elapsed(), Err(&failed));
                // Never retried: a byte reached the client, the budget said
                // no, or the grace period of a shutdown is over.
                if out.started()
                    || held
                        .upload
                        .as_deref()
                        .is_some_and(upload::StreamedBody::started)
                    || matches!(
                        err,
                        GatewayError::BudgetExceeded { .. }
                            | GatewayError::EndUserBudgetExceeded { .. }
                            | GatewayError::WindowBudgetExceeded { .. }
                            | GatewayError::MemberBudgetExceeded { .. }
                            | GatewayError::MemberModelBudgetExceeded { .. }
                            | GatewayError::CutOff
                    )
                {
                    return Err(err);
                }
                last = Some(failed);
                failure = Some(Box::new(err));
            }
        }
    }
    Err(failure.map_or_else(
        || GatewayError::UnknownModel(held.req.model.clone()),
        |f| *f,
    ))
}

/// The attempt row of a failure LiteLLM's mock testing parameters made up
/// (no upstream call, nothing charged): a fallback never makes it vanish
/// from the record.
fn record_mocked(
    worker: &Worker,
    caller: Caller<'_>,
    held: &Held,
    pick: &Pick<'_>,
    outcome: &Outcome,
    err: &GatewayError,
) {
    let attempt = Attempt::start(&outcome.call_id, pick.attempt as i32);
    let upstream = (&*pick.group, &**pick.deployment, &*pick.upstream_model);
    record_uncharged(worker, caller, held, outcome, attempt, upstream, err);
}

/// The attempt row of the call a `during_call` guardrail's block dropped
/// on the wire (its answer never read, nothing charged: what the upstream
/// bills for it is unknown here), so every upstream call has its row.
fn record_dropped(
    worker: &Worker,
    caller: Caller<'_>,
    held: &Held,
    outcome: &mut Outcome,
    err: &GatewayError,
) {
    let Some((number, made)) = outcome.on_the_wire.take() else {
        return;
    };
    let (Some(group), Some(dep)) = (outcome.group.clone(), outcome.deployment.clone()) else {
        return;
    };
    let model = made.as_deref().unwrap_or(&dep.upstream_model);
    let attempt = Attempt::start(&outcome.call_id, number as i32);
    record_uncharged(
        worker,
        caller,
        held,
        outcome,
        attempt,
        (&group, &dep, model),
        err,
    );
}

/// Writes the row of an attempt that failed with `err` and cost nothing,
/// to `upstream` (its group, deployment and upstream model).
fn record_uncharged(
    worker: &Worker,
    caller: Caller<'_>,
    held: &Held,
    outcome: &Outcome,
    attempt: Attempt,
    (group, dep, upstream_model): (&str, &Deployment, &str),
    err: &GatewayError,
) {
    let row = attempt.finish(record::AttemptInfo {
        principal: caller.principal,
        master_token: worker.shared.auth.master_token(),
        group,
        dep,
        upstream_model,
        endpoint: held.req.endpoint,
        usage: spend::Usage::default(),
        cost: 0.0,
        status: err.status(),
        error: Some(err),
        end_user: held.req.end_user.as_deref(),
        proxy_budget: caller.proxy_budget.is_some(),
        cache_key: outcome.cache_key.clone(),
        tags: &held.req.tags,
        guardrails: &outcome.guard_log,
    });
    record::submit(worker, row);
}

/// Phases 6 to 9 for one pick of the plan: admit, translate, call and relay,
/// settle and record. Returns the tokens used. `form` is the form of
/// `held`'s request the pick's provider takes (see [`Held::prepare`]).
#[allow(clippy::too_many_arguments)]
async fn attempt_once(
    worker: &Worker,
    caller: Caller<'_>,
    held: &mut Held,
    form: Form,
    pick: &Pick<'_>,
    out: &mut Responder<'_>,
    outcome: &mut Outcome,
) -> Result<u64, GatewayError> {
    let mut attempt = Attempt::start(&outcome.call_id, pick.attempt as i32);
    let dep: &Deployment = pick.deployment;
    let upstream_model = &pick.upstream_model;
    let (stream, endpoint) = (held.req.stream, held.req.endpoint);
    let (sent, with_usage) = held.sent(form)?;
    // 6. admit
    let media = match &held.req.media {
        Some(ask) => Some(spend::media_bill(dep, upstream_model, ask)),
        None if held.req.is_form() => Some(spend::transcription_bill(dep, upstream_model)),
        None => None,
    };
    let price = match &media {
        Some(media) => media.token_price(),
        None => spend::price_for(dep, upstream_model),
    };
    let priced = record::Priced {
        known: media
            .as_ref()
            .map_or_else(|| spend::is_priced(dep, upstream_model), |i| i.is_priced()),
        policy: worker.shared.unpriced_models,
        estimated_output: worker.shared.estimated_output_tokens,
        block_all: worker.shared.block_unpriced,
        reserved: media.as_ref().map_or(0.0, spend::MediaBill::reserved),
    };
    let principal = caller.principal;
    let reservation = record::admit(
        (&worker.shared.alerts, &worker.shared.limiter),
        caller,
        (&held.req, &attempt),
        pick,
        (price, priced),
    )
    .await?;
    // The answer is copied for the row only when it keeps the prompt.
    let asked = (endpoint, held.req.message_logging_off);
    let keep = prompt_log::Keep::start(worker, (principal, asked, outcome.redaction), out);
    // 7 and 8. translate, call and relay; cut off when the shutdown grace
    // period ends (the row below then says so)
    // A Responses request still in its own form passes through to a
    // provider serving that API, and is answered in it.
    let wire = if sent.endpoint == Endpoint::Responses {
        Format::Responses
    } else {
        providers::format_of(dep.provider)
    };
    // Generated audio carries no usage: it is relayed, never kept.
    let mut tap = match endpoint {
        Endpoint::AudioSpeech => UsageTap::off(),
        Endpoint::AudioTranscriptions | Endpoint::AudioTranslations => {
            UsageTap::new(false, Format::OpenAi)
        }
        // Read from the answer in LiteLLM's shape (Cohere's), whatever the
        // provider's.
        Endpoint::Rerank => UsageTap::new(false, Format::Cohere),
        // OpenAI's answer, whatever the provider's: its images are billed.
        Endpoint::ImageGenerations | Endpoint::ImageEdits => UsageTap::images(),
        _ => UsageTap::new(stream, wire),
    };
    let client = endpoint.format();
    let names = convert::call_names(client, &held.req.body);
    let sent_endpoint = sent.endpoint;
    // LiteLLM's `mock_response`: the pick's answer made up, at its price.
    let canned = held.mock.as_ref().and_then(|ask| {
        let response = ask.response.clone()?;
        Some(crate::deployment::MockSettings {
            response: Some(response),
            completion_tokens: Some(mock_params::COMPLETION_TOKENS),
            latency: ask.delay.unwrap_or_default(),
            prompt_tokens: Some(held.prompt.get()),
            ..Default::default()
        })
    });
    let provider = match canned {
        Some(_) => None,
        None => providers::http_provider(dep.provider),
    };
    let result = match provider {
        Some(provider) => {
            let with_usage = with_usage.filter(|_| provider.accepts_stream_options(dep));
            let strip_usage = with_usage.is_some();
            let upstream_req = match credentials_ready(worker, dep).await {
                Err(err) => Err(err),
                Ok(()) => match with_usage {
                    Some(body) => {
                        provider.build_request(&sent.with_body(body.clone()), upstream_model, dep)
                    }
                    None => provider.build_request(sent, upstream_model, dep),
                },
            };
            match upstream_req {
                Ok(mut upstream_req) => {
                    // Boxed and never bound to a local: a future moved into
                    // another is stored twice in its caller's state, and
                    // this one is the largest of a request (every open
                    // stream carries it).
                    let call = Box::pin(forward(
                        worker,
                        dep,
                        (provider, (client, &names), sent_endpoint),
                        &mut upstream_req,
                        (stream, strip_usage),
                        held,
                        out,
                        outcome,
                        &mut tap,
                        &mut attempt,
                    ));
                    cut_off::unless_cut_off(worker, call).await
                }
                Err(err) => Err(err),
            }
        }
        None => {
            // Boxed, as `forward` above.
            let call = Box::pin(serve_mock(
                (worker, sent, (client, &names)),
                upstream_model,
                (dep, canned.as_ref().unwrap_or(&dep.mock)),
                out,
                outcome,
                &mut tap,
                &mut attempt,
            ));
            cut_off::unless_cut_off(worker, call).await
        }
    };
    // 9. settle and record
    let req = &held.req;
    // Only a media bill reads what the answer reports besides its usage
    // (a transcription's seconds are a parse of the whole answer).
    let measured = media.as_ref().map(|_| spend::Measured {
        audio_seconds: tap.audio_seconds(),
        images: tap.images_returned(),
    });
    let usage = tap.finish(&held.prompt);
    let billable = result.is_ok() || out.started();
    if result.is_ok() {
        outcome.answer_tokens = crate::cache::stream::Tokens {
            prompt: usage.prompt_tokens,
            completion: usage.completion_tokens,
        };
    }
    if billable {
        // Counts come from the upstream: never let them overflow.
        outcome.tokens_used = outcome
            .tokens_used
            .saturating_add(usage.prompt_tokens.saturating_add(usage.completion_tokens));
    }
    let cost = match &media {
        _ if !billable => 0.0,
        Some(media) => media.cost(usage, measured.unwrap_or_default()),
        None => spend::cost(usage, price) + spend::time_cost(attempt.elapsed(), price),
    };
    record::settle(&worker.shared.alerts, reservation, cost, principal);
    let mut row = attempt.finish(record::AttemptInfo {
        principal,
        master_token: worker.shared.auth.master_token(),
        group: &pick.group,
        dep,
        upstream_model,
        endpoint,
        usage: if billable {
            usage
        } else {
            spend::Usage::default()
        },
        cost,
        status: if result.is_ok() || out.started() {
            out.status().unwrap_or(200)
        } else {
            result.as_ref().err().map_or(200, GatewayError::status)
        },
        error: result.as_ref().err(),
        end_user: req.end_user.as_deref(),
        proxy_budget: caller.proxy_budget.is_some(),
        cache_key: outcome.cache_key.clone(),
        tags: &req.tags,
        guardrails: &outcome.guard_log,
    });
    if let Some(keep) = keep {
        let tokens = crate::cache::stream::Tokens {
            prompt: usage.prompt_tokens,
            completion: usage.completion_tokens,
        };
        keep.finish(&mut row, &req.body, (out, stream, endpoint, tokens));
    }
    outcome.telemetry.attempt(
        principal,
        &row,
        crate::telemetry::Upstream {
            deployment: pick.deployment,
            group: &pick.group,
            model: &pick.upstream_model,
            priced: priced.known,
        },
        (pick.fallback_depth, stream),
    );
    record::submit(worker, row);
    result.map(|()| usage.prompt_tokens.saturating_add(usage.completion_tokens))
}

/// Phase 7's credentials that are fetched rather than configured: a
/// Vertex AI deployment's Google access token. A cached one is read at
/// once; otherwise the control plane fetches it while this request waits
/// (bounded by the deployment's timeout, at most 20 s).
async fn credentials_ready(worker: &Worker, dep: &Deployment) -> Result<(), GatewayError> {
    let Some(source) = dep.vertex.as_ref().and_then(|v| v.auth.as_ref()) else {
        return Ok(());
    };
    let wait = dep.timeout.min(Duration::from_secs(20));
    // Boxed: a token refresh is rare and its future large.
    Box::pin(source.ready(&worker.shared.control, &worker.shared.tls, wait))
        .await
        .map(drop)
}

/// The client's format, with what its request's tools make of the calls
/// in an answer (see `convert::call_names`).
type ClientFormat<'a> = (Format, &'a crate::formats::responses::CallNames);

/// Phase 7 for a provider reached over HTTP; its answer reaches the client
/// in the client's format.
#[allow(clippy::too_many_arguments)]
async fn forward(
    worker: &Worker,
    dep: &Deployment,
    (provider, (client, names), endpoint): (&dyn providers::Provider, ClientFormat<'_>, Endpoint),
    req: &mut providers::UpstreamRequest,
    (stream, strip_usage): (bool, bool),
    held: &mut Held,
    out: &mut Responder<'_>,
    outcome: &mut Outcome,
    tap: &mut UsageTap,
    attempt: &mut Attempt,
) -> Result<(), GatewayError> {
    let base = dep.base.as_ref().expect("HTTP providers have a base URL");
    let timeout = if stream {
        dep.stream_timeout
    } else {
        dep.timeout
    };
    if let Some(traceparent) = outcome.telemetry.traceparent() {
        req.headers.push(("traceparent".into(), traceparent));
    }
    let streamed = held.upload.as_deref().map_or(0, upload::StreamedBody::len);
    let head = upstream_head(req, base, streamed);
    let started = Instant::now();
    let deadline = started + timeout;
    // Boxed: sending is this future's largest state and is over before the
    // relay, which a stream may hold for minutes.
    let sent = match held.upload.as_mut() {
        // An upload's file goes as the client sends it.
        Some(rest) => {
            let mut source = rest.source(out.request_stream());
            let send = worker
                .upstream
                .send_streamed(base, head, &req.body, &mut source, deadline);
            let sent = Box::pin(send).await;
            match rest.take_failure() {
                Some(err) => return Err(err),
                None => sent,
            }
        }
        None => Box::pin(worker.upstream.send(base, head, &req.body, deadline)).await,
    };
    outcome.upstream_wait = started.elapsed();
    let mut resp = sent.map_err(|e| relay::upstream_error(e, dep, timeout))?;
    attempt.first_byte();
    outcome.telemetry.upstream_head(&resp.head);
    let status = resp.head.status;
    if status >= 400 {
        // Boxed, as the plain body below.
        let body = Box::pin(resp.read_to_end(MAX_ERROR_BODY, timeout))
            .await
            .unwrap_or_default();
        return Err(provider.error(status, &body, resp.head.retry_after.take()));
    }
    let mut headers = litellm_headers(status, outcome);
    if let Some(ra) = &resp.head.retry_after {
        headers.header("retry-after", ra);
    }
    let content_type = resp
        .head
        .content_type
        .clone()
        .unwrap_or_else(|| "application/json".into());
    let is_stream = resp.head.is_event_stream();
    let io = |_| GatewayError::Unavailable("client connection lost");
    // A Responses request reaching the provider untranslated is answered
    // in the Responses API: relayed as it is.
    let passthrough = convert::is_passthrough(provider.format(), client)
        || (endpoint == Endpoint::Responses && client == Format::Responses);
    // A whole answer is read whole when translated or guarded.
    if !is_stream && (!passthrough || outcome.post_call.is_some()) {
        let limit = crate::formats::MAX_BODY_BYTES;
        // Boxed: reading a whole body is over at once, and its state is
        // larger than the relay's, which a stream keeps for minutes.
        let read = Box::pin(convert::read_body(&mut resp, limit, deadline, dep, timeout));
        let body = read.await?;
        let rerank = endpoint == Endpoint::Rerank;
        let images = endpoint == Endpoint::ImageGenerations;
        // Rerank and image answers are read in the client's shape.
        let read_translated = (rerank || images) && !passthrough;
        if !read_translated {
            tap.feed(&body);
        }
        if passthrough {
            attempt.answer.whole(&body);
            let answer = (status, headers, content_type.as_str());
            // Boxed: larger than the relay's state, which a stream keeps.
            let send = guard::send_answer(out, client, (worker, outcome), answer, &body);
            return Box::pin(send).await;
        }
        let embeddings = endpoint == Endpoint::Embeddings;
        let body = if images {
            convert::translate_images(provider, &body)?
        } else if rerank {
            let documents = providers::rerank::document_count(&held.req.body);
            convert::translate_rerank(provider, &body, documents)
                .map_err(|e| convert::translate_error(dep, e))?
        } else {
            convert::translate_body(Some(provider), (client, names), embeddings, &body)
                .map_err(|e| convert::translate_error(dep, e))?
        };
        if read_translated {
            tap.feed(&body);
        }
        attempt.answer.whole(&body);
        let answer = (status, headers, "application/json");
        // Boxed, as above.
        let send = guard::send_answer(out, client, (worker, outcome), answer, &body);
        return Box::pin(send).await;
    }
    let translate = (is_stream && !passthrough)
        .then(|| convert::stream_translator(Some(provider), (client, names), req.include_usage))
        .flatten();
    // A translated stream is server-sent events whatever the provider's framing.
    let content_type = match translate {
        Some(_) => "text/event-stream".to_string(),
        None => content_type,
    };
    let guard = is_stream
        .then(|| guard::StreamGuard::new(outcome, client))
        .flatten();
    let mut relay = relay::Relay::new(dep, timeout, deadline, is_stream, strip_usage && is_stream)
        .translating(translate)
        .guarding(guard, worker);
    match resp.content_length() {
        Some(len) if !is_stream => {
            out.start_fixed(status, headers, &content_type, len)
                .await
                .map_err(io)?;
            relay
                .run(&mut resp, out, false, (tap, &mut attempt.answer))
                .await
        }
        _ => {
            out.start_stream(status, headers, &content_type)
                .await
                .map_err(io)?;
            if stream {
                // The client has the head: no other attempt can follow, and
                // a stream may stay open for minutes.
                req.body = Default::default();
                held.release();
            }
            relay
                .run(&mut resp, out, true, (tap, &mut attempt.answer))
                .await?;
            out.end_stream().await.map_err(io)
        }
    }
}

/// Phase 7 for the in-process mock provider, answering `req` in the
/// internal form, translated to the `client`'s format.
async fn serve_mock(
    (worker, req, (client, names)): (&Worker, &LlmRequest, ClientFormat<'_>),
    model: &str,
    (dep, settings): (&Deployment, &crate::deployment::MockSettings),
    out: &mut Responder<'_>,
    outcome: &mut Outcome,
    tap: &mut UsageTap,
    attempt: &mut Attempt,
) -> Result<(), GatewayError> {
    match providers::mock_reply(req, model, settings) {
        MockReply::Error { status, message } => Err(GatewayError::Upstream {
            status,
            message,
            error_type: None,
            provider_code: None,
            upstream_param: None,
            retry_after: None,
            class: crate::error::ErrorClass::from_status(status),
        }),
        MockReply::Success {
            content_type,
            parts,
            latency,
            chunk_delay,
            unsent_usage,
        } => {
            let started = Instant::now();
            if !latency.is_zero() {
                monoio::time::sleep(latency).await;
            }
            outcome.upstream_wait = started.elapsed();
            attempt.first_byte();
            let headers = litellm_headers(200, outcome);
            let io = |_| GatewayError::Unavailable("client connection lost");
            let translated = |e| convert::translate_error(dep, e);
            if content_type != "text/event-stream" {
                let body = parts.concat();
                tap.feed(&body);
                let body = convert::translate_body(None, (client, names), false, &body)
                    .map_err(translated)?;
                attempt.answer.whole(&body);
                let answer = (200, headers, content_type);
                return guard::send_answer(out, client, (worker, outcome), answer, &body).await;
            }
            out.start_stream(200, headers, content_type)
                .await
                .map_err(io)?;
            let mut translate = convert::stream_translator(None, (client, names), false);
            let mut guard = guard::StreamGuard::new(outcome, client);
            for (i, part) in parts.iter().enumerate() {
                if i > 0 && !chunk_delay.is_zero() {
                    monoio::time::sleep(chunk_delay).await;
                }
                tap.feed(part);
                let mut piece = part.to_vec();
                if let Some(t) = &mut translate {
                    piece.clear();
                    t.feed(part, &mut piece).map_err(translated)?;
                    if i + 1 == parts.len() {
                        t.finish(&mut piece).map_err(translated)?;
                    }
                }
                if let Some(g) = &mut guard {
                    let mut checked = Vec::with_capacity(piece.len());
                    g.feed(&piece, &mut checked).map_err(translated)?;
                    if i + 1 == parts.len() {
                        g.finish(&mut checked).map_err(translated)?;
                    }
                    guard::check_stream(worker, g, &mut checked, i + 1 == parts.len()).await;
                    piece = checked;
                }
                attempt.answer.feed(&piece, true);
                out.send_chunk(&piece).await.map_err(io)?;
                if guard.as_ref().is_some_and(guard::StreamGuard::blocked) {
                    break;
                }
            }
            if let Some(usage) = unsent_usage {
                tap.feed(&usage);
            }
            out.end_stream().await.map_err(io)
        }
    }
}

/// Principal of a request, for phases that only need to know whether it is a key.
pub(crate) fn key_of(principal: &Principal) -> Option<&crate::auth::KeyEntry> {
    match principal {
        Principal::Key(k) => Some(k),
        _ => None,
    }
}

/// The key's `end_user_budget_id` (kept in its `metadata`, as LiteLLM
/// keeps it; empty means none): the budget row of its end users that have
/// none of their own.
fn end_user_default(principal: &Principal) -> Option<&str> {
    key_of(principal)?
        .record
        .metadata
        .get("end_user_budget_id")?
        .as_str()
        .filter(|id| !id.is_empty())
}

/// The stream guard alone, for the criterion suites and instruction
/// counts in `benches/` (not part of the gateway's interface).
#[doc(hidden)]
pub mod bench {
    use crate::guardrails::PostCall;

    /// An OpenAI stream's `post_call` content filters, as the relay runs
    /// them on the client's bytes.
    pub struct StreamGuard(super::guard::StreamGuard);

    impl StreamGuard {
        /// The guard of `post`'s stream window.
        pub fn new(post: &PostCall) -> StreamGuard {
            StreamGuard(super::guard::StreamGuard::of_window(
                post.stream(),
                false,
                Default::default(),
            ))
        }

        /// Appends to `out` what the client gets of the events `input`
        /// completes; `false` when the stream could not be read.
        pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> bool {
            self.0.feed(input, out).is_ok()
        }
    }
}
