//! LiteLLM's provider pass-through routes (`/openai/*`, `/anthropic/*`,
//! `/gemini/*`, `/cohere/*`, `/mistral/*`, `/azure/*`, `/vertex_ai/*` with
//! a Google token, `/bedrock/*` signed with SigV4): the provider's own
//! API behind the gateway's key checks. The caller's key is authenticated
//! (from the head, `api::admit`), its budgets and rate limits checked, its
//! credential replaced by the provider's (`providers::passthrough`), the
//! body sent as received and the answer relayed as it arrives, status and
//! all. Usage is read where the route is one the gateway understands (chat,
//! Messages, Responses, embeddings, generateContent, Cohere's chat) and
//! charged at the price map's price of the body's (or path's) model; every
//! call writes a spend row (call type `pass_through_endpoint`). The
//! config's own endpoints (`general_settings.pass_through_endpoints`) are
//! served the same way, to their `target` with their `headers`.

use super::relay::{relay_as_is, UsageTap};
use super::{headers, record, Caller};
use crate::auth::Principal;
use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::formats::Format;
use crate::http1::RequestHead;
use crate::limits::AdmitInput;
use crate::providers::passthrough::{self, PassThroughProvider, PassThroughTarget};
use crate::providers::passthrough_cloud;
use crate::spend::{self, PromptEstimate, Usage};
use crate::state::Worker;
use crate::store::SpendLogRow;
use crate::upstream::{UpstreamBase, UpstreamError};
use bytes::Bytes;
use chrono::Utc;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a pass-through call waits for the provider's head, and for
/// each piece of its body after (LiteLLM's pass-through client waits 600 s).
const TIMEOUT: Duration = Duration::from_secs(600);

/// What the spend row and the access line say of one call.
struct Call {
    call_id: Arc<str>,
    /// The route's provider (`custom_llm_provider`), empty for a custom
    /// endpoint.
    label: &'static str,
    model: String,
    api_base: Arc<str>,
    usage: Usage,
    cost: f64,
    started: chrono::DateTime<Utc>,
    first_byte: Option<chrono::DateTime<Utc>>,
}

impl Call {
    fn new(label: &'static str) -> Call {
        Call {
            call_id: headers::call_id(),
            label,
            model: String::new(),
            api_base: Arc::from(""),
            usage: Usage::default(),
            cost: 0.0,
            started: Utc::now(),
            first_byte: None,
        }
    }
}

/// Where one call goes and what it carries beyond the client's request.
struct Destination<'t> {
    base: &'t UpstreamBase,
    /// The upstream request target (path and query).
    path: String,
    /// Headers the gateway adds (the target's credentials).
    added: Vec<(String, String)>,
    /// Whether the client's headers are forwarded (never its credentials).
    forward: bool,
    /// The answer's format when its usage is read, and whether it streams.
    usage_format: Option<(Format, bool)>,
    /// Most output tokens the call can be charged for (its body's cap,
    /// else the model's, else the default; 0 for embeddings).
    output_bound: u64,
}

/// Serves one pass-through request to `provider`'s `rest` (the path after
/// the route's prefix); `caller` is the result of authenticating its head.
pub async fn handle(
    worker: &Worker,
    head: &RequestHead,
    (provider, rest): (PassThroughProvider, &str),
    caller: Result<Principal, GatewayError>,
    body: Bytes,
    out: &mut Responder<'_>,
    received_at: Instant,
) {
    let mut call = Call::new(provider.name());
    let result = match caller {
        Err(err) => Err(err),
        Ok(principal) => {
            let principal = &principal;
            let dest = Box::pin(provider_destination(
                worker, head, provider, rest, &body, &mut call,
            ))
            .await;
            let served = match dest {
                Ok(dest) => {
                    serve(worker, Some(principal), (head, dest), body, out, &mut call).await
                }
                Err(err) => Err(err),
            };
            log_failure(worker, Some(principal), &call, served.as_ref().err(), out);
            served
        }
    };
    finish(head, result, out, &call, received_at).await;
}

/// Serves one request to the config's custom pass-through endpoint
/// `index` (`general_settings.pass_through_endpoints`); `caller` is `None`
/// when the endpoint does not ask for a key.
pub async fn handle_custom(
    worker: &Worker,
    head: &RequestHead,
    index: usize,
    caller: Result<Option<Principal>, GatewayError>,
    body: Bytes,
    out: &mut Responder<'_>,
    received_at: Instant,
) {
    let mut call = Call::new("");
    let result = match (caller, worker.shared.pass_through.custom.get(index)) {
        (Err(err), _) => Err(err),
        (Ok(_), None) => Err(GatewayError::Internal("the pass-through endpoint is gone")),
        (Ok(principal), Some(endpoint)) => {
            let principal = principal.as_ref();
            let path = endpoint
                .upstream_target(head.path().trim_end_matches('/'), head.query())
                .unwrap_or(Err(passthrough::BadPath("the path is not this endpoint's")))
                .map_err(|e| GatewayError::PassThroughPath(e.0));
            let served = match path {
                Ok(path) => {
                    let fields: BodyFields = serde_json::from_slice(&body).unwrap_or_default();
                    call.model = fields.model.unwrap_or_default();
                    call.api_base = Arc::from(endpoint.target.url.as_str());
                    let dest = Destination {
                        base: &endpoint.target,
                        path,
                        added: endpoint.headers.clone(),
                        forward: endpoint.forward_headers,
                        usage_format: None,
                        output_bound: 0,
                    };
                    serve(worker, principal, (head, dest), body, out, &mut call).await
                }
                Err(err) => Err(err),
            };
            log_failure(worker, principal, &call, served.as_ref().err(), out);
            served
        }
    };
    finish(head, result, out, &call, received_at).await;
}

/// A spend row for a call that failed after it was admitted (refusals
/// before the provider write none).
fn log_failure(
    worker: &Worker,
    principal: Option<&Principal>,
    call: &Call,
    error: Option<&GatewayError>,
    out: &Responder<'_>,
) {
    let Some(err) = error else { return };
    if !matches!(
        err,
        GatewayError::PassThroughPath(_)
            | GatewayError::PassThroughUnconfigured { .. }
            | GatewayError::BudgetExceeded { .. }
            | GatewayError::WindowBudgetExceeded { .. }
            | GatewayError::MemberBudgetExceeded { .. }
            | GatewayError::MemberModelBudgetExceeded { .. }
            | GatewayError::RateLimited { .. }
            | GatewayError::NoCapacity { .. }
    ) {
        record::submit(worker, row(worker, principal, call, Some(err), out));
    }
}

/// Answers a refused or failed call and writes the access line.
async fn finish(
    head: &RequestHead,
    result: Result<(), GatewayError>,
    out: &mut Responder<'_>,
    call: &Call,
    received_at: Instant,
) {
    if let Err(err) = &result {
        if out.started() {
            out.abort_stream();
        } else {
            let mut h = HeadBuilder::new(err.status());
            h.header("x-litellm-call-id", &call.call_id);
            let _ = out.send_error(err, Some(h)).await;
        }
    }
    tracing::info!(
        target: "gateway::access",
        call_id = %call.call_id,
        method = head.method(),
        path = head.path(),
        provider = call.label,
        status = out.status().unwrap_or(0),
        duration_ms = received_at.elapsed().as_millis() as u64,
        error = result.as_ref().err().map(ToString::to_string).unwrap_or_default(),
        "pass-through"
    );
}

/// The request's `model`, `stream` and output cap, when its body is JSON.
#[derive(serde::Deserialize, Default)]
struct BodyFields {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream: Option<bool>,
    /// Chat completions' and Messages' cap.
    #[serde(default)]
    max_tokens: Option<u64>,
    /// Chat completions' newer cap.
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    /// The Responses API's cap.
    #[serde(default)]
    max_output_tokens: Option<u64>,
    /// generateContent's cap (`generationConfig.maxOutputTokens`).
    #[serde(default, rename = "generationConfig")]
    generation_config: Option<GenerationConfig>,
    /// Converse's cap (`inferenceConfig.maxTokens`).
    #[serde(default, rename = "inferenceConfig")]
    inference_config: Option<InferenceConfig>,
}

/// The part of a Converse body that caps its output.
#[derive(serde::Deserialize, Default)]
struct InferenceConfig {
    #[serde(default, rename = "maxTokens")]
    max_tokens: Option<u64>,
}

/// The part of a generateContent body that caps its output.
#[derive(serde::Deserialize, Default)]
struct GenerationConfig {
    #[serde(default, rename = "maxOutputTokens")]
    max_output_tokens: Option<u64>,
}

impl BodyFields {
    /// The output cap the body names, if any.
    fn output_cap(&self) -> Option<u64> {
        self.max_completion_tokens
            .or(self.max_tokens)
            .or(self.max_output_tokens)
            .or_else(|| {
                self.generation_config
                    .as_ref()
                    .and_then(|g| g.max_output_tokens)
            })
            .or_else(|| self.inference_config.as_ref().and_then(|c| c.max_tokens))
    }
}

/// Where a provider route's call goes, with the provider's key (for
/// Vertex AI a Google token, for Bedrock a SigV4 signature).
async fn provider_destination<'w>(
    worker: &'w Worker,
    head: &RequestHead,
    provider: PassThroughProvider,
    rest: &str,
    body: &Bytes,
    call: &mut Call,
) -> Result<Destination<'w>, GatewayError> {
    let fields: BodyFields = serde_json::from_slice(body).unwrap_or_default();
    let output_cap = fields.output_cap();
    let body_stream = fields.stream.unwrap_or(false);
    call.model = fields
        .model
        .or_else(|| provider.model_in_path(rest))
        .unwrap_or_default();
    let output_bound = if rest.ends_with("/embeddings") {
        0
    } else {
        output_cap
            .or_else(|| spend::shipped(&call.model).and_then(|m| m.max_output_tokens))
            .unwrap_or(record::DEFAULT_MAX_OUTPUT)
    };
    let usage_format = provider.usage_format(rest, body_stream);
    let (base, path, added) = match provider {
        PassThroughProvider::VertexAi => Box::pin(vertex_destination(worker, head, rest)).await?,
        PassThroughProvider::Bedrock => bedrock_destination(worker, head, rest, body)?,
        _ => keyed_destination(worker, head, provider, rest)?,
    };
    call.api_base = Arc::from(base.url.as_str());
    Ok(Destination {
        base,
        path,
        added,
        forward: true,
        usage_format,
        output_bound,
    })
}

/// A call's server, upstream path and the headers the gateway adds.
type Target<'w> = (&'w UpstreamBase, String, Vec<(String, String)>);

/// The destination of a route whose provider key is configured.
fn keyed_destination<'w>(
    worker: &'w Worker,
    head: &RequestHead,
    provider: PassThroughProvider,
    rest: &str,
) -> Result<Target<'w>, GatewayError> {
    let target: &PassThroughTarget = worker.shared.pass_through.get(provider).ok_or_else(|| {
        GatewayError::PassThroughUnconfigured {
            provider: provider.name(),
            missing: format!("set {}", provider.base_env()),
        }
    })?;
    let key = target
        .key
        .as_deref()
        .ok_or_else(|| GatewayError::PassThroughUnconfigured {
            provider: provider.name(),
            missing: format!(
                "set {} or give a {} deployment `use_in_pass_through: true`",
                provider.key_env(),
                provider.name()
            ),
        })?;
    let gemini_key = provider.reads_google_key().then_some(key);
    let path =
        passthrough::upstream_target(provider, &target.base.path, rest, head.query(), gemini_key)
            .map_err(|e| GatewayError::PassThroughPath(e.0))?;
    let added = provider
        .credential_headers(key)
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    Ok((&target.base, path, added))
}

/// The destination of a `/vertex_ai` call: the project and location of
/// the `use_in_pass_through` deployment the path names (else LiteLLM's
/// `default_vertex_config`, else the first deployment),
/// put in the path as LiteLLM does, with that deployment's Google token.
async fn vertex_destination<'w>(
    worker: &'w Worker,
    head: &RequestHead,
    rest: &str,
) -> Result<Target<'w>, GatewayError> {
    let provider = PassThroughProvider::VertexAi;
    let targets = &worker.shared.pass_through;
    let target = passthrough_cloud::vertex_target(&targets.vertex, targets.vertex_default.as_ref(), rest)
        .ok_or_else(|| GatewayError::PassThroughUnconfigured {
            provider: provider.name(),
            missing:
                "give a vertex_ai deployment with vertex_credentials `use_in_pass_through: true`, or set default_vertex_config"
                    .into(),
        })?;
    let checked = passthrough::upstream_target(provider, "", rest, head.query(), None)
        .map_err(|e| GatewayError::PassThroughPath(e.0))?;
    let path = passthrough_cloud::vertex_path(&target.settings, &checked)
        .map_err(|e| GatewayError::PassThroughPath(e.0))?;
    let source = target.settings.auth.as_ref().ok_or_else(|| {
        GatewayError::PassThroughUnconfigured {
            provider: provider.name(),
            missing: format!(
                "give the vertex_ai deployment of project {} credentials (vertex_credentials or GOOGLE_APPLICATION_CREDENTIALS)",
                target.settings.project
            ),
        }
    })?;
    let token =
        Box::pin(source.ready(&worker.shared.control, &worker.shared.tls, TOKEN_WAIT)).await?;
    let added = vec![("authorization".to_string(), token.header.clone())];
    Ok((&target.base, path, added))
}

/// Longest a `/vertex_ai` call waits for a Google token.
const TOKEN_WAIT: Duration = Duration::from_secs(20);

/// The destination of a `/bedrock` call: the runtime (or, for its routes,
/// the agent runtime) of the `use_in_pass_through` deployment, else of the
/// `AWS_*` environment, the request signed with its keys.
fn bedrock_destination<'w>(
    worker: &'w Worker,
    head: &RequestHead,
    rest: &str,
    body: &Bytes,
) -> Result<Target<'w>, GatewayError> {
    let provider = PassThroughProvider::Bedrock;
    let target = worker.shared.pass_through.bedrock.as_ref().ok_or_else(|| {
        GatewayError::PassThroughUnconfigured {
            provider: provider.name(),
            missing: "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give a bedrock deployment with keys `use_in_pass_through: true`".into(),
        }
    })?;
    let base = if passthrough_cloud::bedrock_is_agent_route(rest) {
        &target.agent_runtime
    } else {
        &target.runtime
    };
    let path = passthrough::upstream_target(provider, &base.path, rest, head.query(), None)
        .map_err(|e| GatewayError::PassThroughPath(e.0))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    let amz_date = crate::providers::sigv4::amz_date(now);
    let added =
        passthrough_cloud::bedrock_sign(&target.aws, base, (head.method(), &path), body, &amz_date)
            .ok_or_else(|| GatewayError::PassThroughUnconfigured {
                provider: provider.name(),
                missing: "give the bedrock deployment aws_access_key_id and aws_secret_access_key"
                    .into(),
            })?;
    Ok((base, path, added))
}

/// Checks the caller's budgets and limits (a call without a key has
/// none but the proxy-wide budget), sends the call, settles its cost and
/// writes its spend row.
async fn serve(
    worker: &Worker,
    principal: Option<&Principal>,
    (head, dest): (&RequestHead, Destination<'_>),
    body: Bytes,
    out: &mut Responder<'_>,
    call: &mut Call,
) -> Result<(), GatewayError> {
    if let Some(p) = principal {
        // Pass-through routes name a trace in their headers only.
        super::trace_id::check(p, head, None)?;
    }
    let anonymous = Principal::Anonymous;
    let caller = Caller {
        principal: principal.unwrap_or(&anonymous),
        end_user: None,
        proxy_budget: worker.shared.auth.keys().proxy_budget(),
        model_windows: worker.shared.auth.keys().end_users().model_windows(),
        budget_windows: worker.shared.auth.keys().budget_windows(),
    };
    record::refuse_if_exhausted(caller, &call.model)?;
    let prompt = PromptEstimate::new(body.clone());
    let throttled = principal.and_then(Principal::throttled_key);
    let mut ticket = worker
        .shared
        .limiter
        .admit(&AdmitInput {
            key: principal.and_then(|p| p.key_rows_as(throttled.as_ref())),
            model: &call.model,
            end_user: None,
            end_user_limits: None,
            prompt: &prompt,
            max_tokens: None,
            estimated_output: None,
            embeddings: true,
            request_id: &call.call_id,
            extra: Vec::new(),
        })
        .await?
        .map(Box::new);
    let budgets = record::budgets_of(caller, &call.model);
    // The call's worst case is held against its budgets before it is sent,
    // as on the LLM routes, so concurrent calls cannot pass a budget by
    // more than what they were told they might cost: the body's length
    // bounds its prompt tokens, its output cap (else the model's) its
    // completion. Routes whose usage is not read cost nothing and hold
    // nothing.
    let price = spend::shipped(&call.model)
        .map(|m| m.price)
        .unwrap_or_default();
    let worst = match dest.usage_format {
        Some(_) => spend::worst_case_cost(body.len() as u64, dest.output_bound, price),
        None => 0.0,
    };
    let reservation = record::hold_for(
        &worker.shared.limiter,
        caller.principal,
        &budgets,
        worst,
        &call.call_id,
    )
    .await
    .map_err(|r| record::refusal(caller, &call.model, r.scope, (r.spend, r.max), Some(worst)))?;
    let upstream_head = request_head(head, &dest, body.len());
    let result = Box::pin(relay(
        worker,
        dest.base,
        (upstream_head, &body),
        dest.usage_format,
        out,
        call,
    ))
    .await;
    if dest.usage_format.is_some() && (result.is_ok() || out.started()) {
        call.cost = spend::cost(call.usage, price);
    }
    record::settle(
        &worker.shared.alerts,
        reservation,
        call.cost,
        caller.principal,
    );
    if let Some(ticket) = ticket.as_mut() {
        let used = call
            .usage
            .prompt_tokens
            .saturating_add(call.usage.completion_tokens);
        ticket.add_tokens(used);
    }
    drop(ticket);
    if result.is_ok() {
        record::submit(worker, row(worker, principal, call, None, out));
    }
    result
}

/// The upstream request head: the client's method and allowed headers
/// (when forwarded), the destination's own headers, the gateway's framing
/// headers.
fn request_head(head: &RequestHead, dest: &Destination<'_>, body_len: usize) -> Vec<u8> {
    let (base, path) = (dest.base, &dest.path);
    // The client's head is bounded by the server's header limits, so is
    // this one.
    let mut h = Vec::with_capacity(512 + path.len());
    h.extend_from_slice(head.method().as_bytes());
    h.push(b' ');
    h.extend_from_slice(path.as_bytes());
    h.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    h.extend_from_slice(base.host.as_bytes());
    let default_port = if base.tls { 443 } else { 80 };
    if base.port != default_port {
        h.push(b':');
        h.extend_from_slice(itoa::Buffer::new().format(base.port).as_bytes());
    }
    h.extend_from_slice(b"\r\naccept-encoding: identity\r\n");
    if body_len > 0 || !matches!(head.method(), "GET" | "HEAD" | "DELETE") {
        h.extend_from_slice(b"content-length: ");
        h.extend_from_slice(itoa::Buffer::new().format(body_len).as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    let bad = |s: &str| s.bytes().any(|b| b == b'\r' || b == b'\n');
    let added = |name: &str| dest.added.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    for (name, value) in head.headers() {
        let content_type = name.eq_ignore_ascii_case("content-type");
        if !(dest.forward || content_type)
            || !passthrough::forwards_header(name)
            || added(name)
            || bad(name)
            || bad(value)
        {
            continue;
        }
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(b": ");
        h.extend_from_slice(value.as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    for (name, value) in &dest.added {
        if bad(name) || bad(value) {
            continue;
        }
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(b": ");
        h.extend_from_slice(value.as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    h.extend_from_slice(b"\r\n");
    h
}

/// Sends the call and relays the answer as it arrives, reading its usage
/// on the side when `usage_format` names one.
async fn relay(
    worker: &Worker,
    base: &UpstreamBase,
    (upstream_head, body): (Vec<u8>, &Bytes),
    usage_format: Option<(Format, bool)>,
    out: &mut Responder<'_>,
    call: &mut Call,
) -> Result<(), GatewayError> {
    let provider = call.label;
    let unreachable = |e: UpstreamError| match e {
        UpstreamError::Timeout => GatewayError::UpstreamTimeout {
            provider: provider.to_string(),
            deployment: "pass-through".to_string(),
            after: TIMEOUT,
        },
        UpstreamError::Connect(reason) | UpstreamError::Io(reason) => {
            GatewayError::UpstreamUnreachable {
                provider: provider.to_string(),
                url: base.url.clone(),
                reason,
            }
        }
        UpstreamError::Protocol(reason) => GatewayError::UpstreamProtocol {
            provider: provider.to_string(),
            reason,
        },
    };
    let deadline = Instant::now() + TIMEOUT;
    let pieces = [body.clone()];
    let sent = Box::pin(worker.upstream.send(base, upstream_head, &pieces, deadline)).await;
    let mut resp = sent.map_err(unreachable)?;
    call.first_byte = Some(Utc::now());
    let status = resp.head.status;
    let mut tap = match usage_format {
        Some((format, stream)) if status < 400 => Some(UsageTap::new(stream, format)),
        _ => None,
    };
    let mut h = HeadBuilder::new(status);
    h.header("x-litellm-call-id", &call.call_id);
    if let Some(ra) = &resp.head.retry_after {
        h.header("retry-after", ra);
    }
    let content_type = resp
        .head
        .content_type
        .clone()
        .unwrap_or_else(|| "application/json".into());
    relay_as_is(
        &mut resp,
        (h, &content_type),
        out,
        TIMEOUT,
        |piece| {
            if let Some(tap) = tap.as_mut() {
                tap.feed(piece);
            }
        },
        unreachable,
    )
    .await?;
    if let Some(tap) = tap {
        call.usage = tap.finish(&PromptEstimate::new(body.clone()));
    }
    Ok(())
}

/// The call's spend row, as LiteLLM writes one for a pass-through call.
fn row(
    worker: &Worker,
    principal: Option<&Principal>,
    call: &Call,
    error: Option<&GatewayError>,
    out: &Responder<'_>,
) -> SpendLogRow {
    let key = principal.and_then(super::key_of);
    let model: Arc<str> = call.model.as_str().into();
    let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let usage = call.usage;
    SpendLogRow {
        request_id: call.call_id.clone(),
        call_id: call.call_id.clone(),
        attempt: 1,
        call_type: Cow::Borrowed("pass_through_endpoint"),
        api_key: match (key, principal) {
            (Some(k), _) => k.record.token.as_str().into(),
            // A custom endpoint without `auth` has no caller.
            (None, None) => "".into(),
            (None, Some(_)) => worker.shared.auth.master_token().unwrap_or_default().into(),
        },
        spend: call.cost,
        total_tokens: tokens(usage.prompt_tokens.saturating_add(usage.completion_tokens)),
        prompt_tokens: tokens(usage.prompt_tokens),
        completion_tokens: tokens(usage.completion_tokens),
        start_time: call.started,
        completion_start_time: call.first_byte,
        end_time: Utc::now(),
        model: model.clone(),
        model_id: Arc::from(""),
        model_group: model,
        custom_llm_provider: Arc::from(call.label),
        api_base: call.api_base.clone(),
        region: None,
        user: key.and_then(|k| k.record.user_id.clone()),
        team_id: key.and_then(|k| k.record.team_id.clone()),
        // The provider's own refusals are relayed as they are, and logged
        // as failures.
        status: Cow::Borrowed(match (error, out.status()) {
            (None, Some(s)) if s < 400 => "success",
            _ => "failure",
        }),
        status_code: i32::from(match error {
            Some(e) if !out.started() => e.status(),
            _ => out.status().unwrap_or(200),
        }),
        error_class: error.map(|e| Cow::Borrowed(e.class().as_str())),
        error_message: error.map(|e| e.to_string()),
        end_user: None,
        response_id: None,
        proxy_budget: worker.shared.auth.keys().proxy_budget().is_some(),
        cache_hit: false,
        cache_key: None,
        request_tags: None,
        guardrail_information: None,
        proxy_server_request: None,
        response: None,
    }
}
