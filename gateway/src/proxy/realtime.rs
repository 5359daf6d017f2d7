//! LiteLLM's realtime route (`/v1/realtime`, `/realtime`,
//! `/openai/v1/realtime`): a WebSocket session relayed to an `openai/` or
//! `azure/` deployment's realtime API. In order:
//!
//! 1. the key was checked from the head (`api::admit`; also LiteLLM's
//!    `openai-insecure-api-key.` subprotocol), before any upgrade: a
//!    refusal is an HTTP error, as every check below;
//! 2. the handshake is checked and `?model=` routed (access, aliases,
//!    router) to one deployment;
//! 3. rate limits are admitted once for the session, which holds its
//!    parallel slot until it ends, and token limits for each response
//!    (its tokens counted as it ends, the next one refused, ending the
//!    session, once a limit is full); budgets must not be exhausted;
//! 4. the upstream's WebSocket is opened (a fresh connection, TLS
//!    included, within [`HANDSHAKE_TIMEOUT`]); its refusal is relayed as
//!    an HTTP error;
//! 5. `101 Switching Protocols` to the client, then frames both ways on
//!    this core ([`relay`]): each `response.done`'s usage is charged to the
//!    budgets as it arrives, and a budget it exhausts ends the session
//!    (an `error` event, close 1008); oversize frames close with 1009, an
//!    idle session after [`IDLE_TIMEOUT`];
//! 6. one spend row for the session (call type `_arealtime`), its cost the
//!    sum of its responses', as LiteLLM logs a session.
//!
//! The session's guardrails (its key's, its team's and the `default_on`
//! ones) screen the client's texts and the model's on the way
//! ([`super::realtime_guard`]).

use super::realtime_guard::{FromClient, FromUpstream, RealtimeGuard};
use super::{authorize_model, headers, record, Caller};
use crate::auth::Principal;
use crate::deployment::Deployment;
use crate::downstream::{ClientStream, HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::http1::{ReadBuffer, RequestHead};
use crate::limits::AdmitInput;
use crate::providers::realtime::{self as provider, ResponseUsage};
use crate::router::PlanInput;
use crate::spend::{self, PromptEstimate};
use crate::state::Worker;
use crate::store::SpendLogRow;
use crate::upstream::{UpstreamConn, UpstreamError};
use crate::websocket::{self, Endpoint, Message, UpgradeAnswer};
use chrono::Utc;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, OwnedReadHalf, Splitable};
use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Longest the upstream's opening handshake may take (connect, TLS, 101).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// A session with no frame either way for this long is closed (1001).
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest a closing session waits for the other side's close frame.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// Largest message an upstream may send (a client's is capped by
/// `max_request_size_mb`).
const MAX_UPSTREAM_MESSAGE: usize = 64 << 20;
/// Largest body of an upstream's refusal read for its message.
const MAX_REFUSAL_BODY: u64 = 64 * 1024;
/// Bytes read from either socket at a time.
const READ_CHUNK: usize = 16 * 1024;
/// The subprotocol prefix under which browsers send a key (LiteLLM reads
/// it; it is never echoed back).
pub const KEY_PROTOCOL: &str = "openai-insecure-api-key.";

/// What the spend row and access line say of one session.
struct Session {
    call_id: Arc<str>,
    group: String,
    dep: Option<Arc<Deployment>>,
    upstream_model: String,
    usage: ResponseUsage,
    responses: u64,
    cost: f64,
    started: chrono::DateTime<Utc>,
    opened: Option<chrono::DateTime<Utc>>,
    /// Why the session ended, when not by a close handshake.
    ended_by: Option<String>,
    /// What its guardrails did.
    guard_log: crate::guardrails::log::Log,
}

/// Serves one realtime request on `stream`, which it keeps: `leftover`
/// is what the client sent after the head. `caller` is the result of
/// authenticating the head.
pub async fn handle(
    worker: &Worker,
    head: &RequestHead,
    caller: Result<Principal, GatewayError>,
    mut stream: ClientStream,
    leftover: Vec<u8>,
    received_at: Instant,
) {
    let mut session = Session {
        call_id: headers::call_id(),
        group: String::new(),
        dep: None,
        upstream_model: String::new(),
        usage: ResponseUsage::default(),
        responses: 0,
        cost: 0.0,
        started: Utc::now(),
        opened: None,
        ended_by: None,
        guard_log: Default::default(),
    };
    let write_timeout = worker.shared.limits.write_timeout;
    let result: Result<(), GatewayError> = match caller {
        Err(err) => Err(err),
        Ok(principal) => {
            let prepared = Box::pin(prepare(worker, head, &principal, &mut session)).await;
            match prepared {
                Err(err) => Err(err),
                Ok(ready) => {
                    let answer = ready.accept(&session.call_id);
                    match monoio::time::timeout(write_timeout, stream.write_all(answer)).await {
                        Ok((Ok(_), _)) => {
                            Box::pin(run(
                                worker,
                                &principal,
                                ready,
                                (stream, leftover),
                                &mut session,
                            ))
                            .await;
                            log(head, 101, None, &session, received_at);
                        }
                        _ => log(
                            head,
                            0,
                            Some(&GatewayError::ClientGone),
                            &session,
                            received_at,
                        ),
                    }
                    return;
                }
            }
        }
    };
    if let Err(err) = result {
        let mut out =
            Responder::new(&mut stream, false, false, false).with_write_timeout(write_timeout);
        let mut h = HeadBuilder::new(err.status());
        h.header("x-litellm-call-id", &session.call_id);
        let _ = out.send_error(&err, Some(h)).await;
        log(head, err.status(), Some(&err), &session, received_at);
    }
}

/// The access line of a session.
fn log(
    head: &RequestHead,
    status: u16,
    error: Option<&GatewayError>,
    session: &Session,
    received_at: Instant,
) {
    tracing::info!(
        target: "gateway::access",
        call_id = %session.call_id,
        method = head.method(),
        path = head.path(),
        model = %session.group,
        status,
        responses = session.responses,
        spend = session.cost,
        duration_ms = received_at.elapsed().as_millis() as u64,
        error = error
            .map(ToString::to_string)
            .or_else(|| session.ended_by.clone())
            .unwrap_or_default(),
        "realtime"
    );
}

/// A session admitted and its upstream open, before the client's 101.
struct Ready<'w> {
    /// The client's `Sec-WebSocket-Key`.
    client_key: String,
    /// The subprotocol the 101 names: the first the client offered that
    /// carries no key (LiteLLM echoes the first).
    protocol: Option<String>,
    conn: UpstreamConn,
    /// Bytes the upstream sent after its 101.
    upstream_leftover: Vec<u8>,
    ticket: Option<crate::limits::Ticket<'w>>,
    /// The next response's place under the token limits, taken with
    /// nothing reserved; its tokens are settled on it.
    tokens: Option<crate::limits::Ticket<'w>>,
    reservation: Option<crate::budget::Reservation<'w>>,
    budgets: Vec<(&'static str, Arc<crate::budget::Budget>)>,
    price: (spend::Price, spend::AudioPrice),
    /// The session's guardrails, when any applies.
    guard: Option<Box<RealtimeGuard>>,
}

impl Ready<'_> {
    /// The client's `101 Switching Protocols`, with the call id.
    fn accept(&self, call_id: &str) -> Vec<u8> {
        let mut answer = websocket::accept_response(&self.client_key, self.protocol.as_deref());
        let end = answer.len() - 2;
        let mut extra = format!("x-litellm-call-id: {call_id}\r\n");
        if let Some(applied) = self.guard.as_ref().and_then(|g| g.applied()) {
            extra.push_str(&format!("x-litellm-applied-guardrails: {applied}\r\n"));
        }
        answer.splice(end..end, extra.into_bytes());
        answer
    }
}

/// Steps 2 to 4; an error is answered over HTTP by the caller (nothing
/// was upgraded).
async fn prepare<'w>(
    worker: &'w Worker,
    head: &RequestHead,
    principal: &Principal,
    session: &mut Session,
) -> Result<Ready<'w>, GatewayError> {
    let client_key = websocket::check_handshake(head.method(), |n| head.header(n))
        .map_err(|e| GatewayError::NotWebSocket(e.0.to_string()))?
        .to_string();
    let query = Query::parse(head.query());
    let requested = query.model.ok_or(GatewayError::MissingParam("model"))?;
    let group = authorize_model(worker, principal, &requested)?;
    session.group = group.clone();
    super::enforced_params::check_realtime(&worker.shared.enforced_params, principal, &requested)?;
    let guard = worker
        .shared
        .guardrails
        .session(super::guard::scope_of(principal))?
        .map(|rails| {
            let caller = super::guard_api::caller(principal);
            Box::new(RealtimeGuard::new(rails, caller, &session.call_id))
        });
    let shared = &worker.shared;
    let router = shared.models.router_for(&shared.control, &group).await;
    let input = PlanInput {
        allowed_regions: principal.allowed_regions(),
        prompt_tokens: 0,
        num_retries: Some(0),
        fallbacks: Some(Vec::new()),
        stream: true,
        tags: Vec::new(),
    };
    let mut plan = match router.plan(&group, input) {
        Err(GatewayError::UnknownModel(_)) => Err(GatewayError::UnknownModel(requested.clone())),
        other => other,
    }?;
    let pick = plan
        .next(None)
        .ok_or_else(|| GatewayError::UnknownModel(requested.clone()))?;
    let dep = pick.deployment.clone();
    let upstream_model = pick.upstream_model.to_string();
    drop(plan);
    session.dep = Some(dep.clone());
    session.upstream_model = upstream_model.clone();
    let no_realtime = || GatewayError::NoRealtime {
        provider: dep.provider_name.clone(),
        deployment: dep.id.to_string(),
    };
    let beta = head
        .header("openai-beta")
        .is_some_and(|v| v.contains("realtime=v1"));
    let target = provider::target(&dep, &upstream_model, query.intent.as_deref(), beta)
        .map_err(|_| no_realtime())?;
    let base = dep.base.as_ref().ok_or_else(no_realtime)?;
    // 3. limits for the session (its parallel slot held until it ends),
    // and the first response's room under the token limits; budgets not
    // exhausted; its spend is charged per response.
    let prompt = PromptEstimate::new(bytes::Bytes::new());
    let throttled = principal.throttled_key();
    let admission = admission(
        (principal, throttled.as_ref()),
        &group,
        &prompt,
        &session.call_id,
    );
    let ticket = shared.limiter.admit(&admission).await?;
    let tokens = shared.limiter.admit_tokens(&admission).await?;
    let caller = Caller {
        principal,
        end_user: None,
        proxy_budget: shared.auth.keys().proxy_budget(),
        model_windows: shared.auth.keys().end_users().model_windows(),
        budget_windows: shared.auth.keys().budget_windows(),
    };
    record::refuse_if_exhausted(caller, &group)?;
    let budgets = record::budgets_of(caller, &group);
    let priced = spend::is_priced(&dep, &upstream_model);
    if shared.block_unpriced && !priced {
        return Err(GatewayError::UnpricedBlocked(group.clone()));
    }
    if !priced
        && shared.unpriced_models.refuses(&dep)
        && budgets.iter().any(|(_, b)| b.max_usd().is_some())
    {
        return Err(GatewayError::Unpriced(upstream_model.clone()));
    }
    // Held between responses: taken with nothing reserved, so it only
    // asks whether the budgets are open; settled with each response's
    // cost.
    let reservation = record::hold_for(&shared.limiter, principal, &budgets, 0.0, &session.call_id)
        .await
        .map_err(|r| record::refusal(caller, &group, r.scope, (r.spend, r.max), None))?;
    // 4. the upstream's WebSocket.
    let provider_name = dep.provider_name.clone();
    let unreachable = |e: UpstreamError| match e {
        UpstreamError::Timeout => GatewayError::UpstreamTimeout {
            provider: provider_name.clone(),
            deployment: dep.id.to_string(),
            after: HANDSHAKE_TIMEOUT,
        },
        UpstreamError::Connect(reason) | UpstreamError::Io(reason) => {
            GatewayError::UpstreamUnreachable {
                provider: provider_name.clone(),
                url: base.url.clone(),
                reason,
            }
        }
        UpstreamError::Protocol(reason) => GatewayError::UpstreamProtocol {
            provider: provider_name.clone(),
            reason,
        },
    };
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let conn = Box::pin(worker.upstream.connect_fresh(base, deadline))
        .await
        .map_err(unreachable)?;
    let (conn, upstream_leftover) = Box::pin(open_upstream(conn, base, &target, deadline))
        .await
        .map_err(|e| match e {
            Opening::Failed(e) => unreachable(e),
            Opening::Refused(err) => err,
        })?;
    let protocol = head.header("sec-websocket-protocol").and_then(|offered| {
        offered
            .split(',')
            .map(str::trim)
            .find(|p| !p.is_empty() && !p.starts_with(KEY_PROTOCOL))
            .map(str::to_string)
    });
    Ok(Ready {
        client_key,
        protocol,
        conn,
        upstream_leftover,
        ticket,
        tokens,
        reservation,
        budgets,
        price: (
            spend::price_for(&dep, &upstream_model),
            spend::audio_price(&upstream_model),
        ),
        guard,
    })
}

/// Steps 5 and 6 once the client has its 101: the relay, then the
/// session's limits settled and its spend row.
async fn run(
    worker: &Worker,
    principal: &Principal,
    ready: Ready<'_>,
    (stream, leftover): (ClientStream, Vec<u8>),
    session: &mut Session,
) {
    session.opened = Some(Utc::now());
    let Ready {
        conn,
        upstream_leftover,
        ticket,
        tokens,
        reservation,
        budgets,
        price,
        guard,
        ..
    } = ready;
    let group = session.group.clone();
    let charge = Charge {
        worker,
        budgets: &budgets,
        price,
        principal,
        group: &group,
    };
    let limits = Limits {
        client_message: worker.shared.limits.max_body_bytes,
        write_timeout: worker.shared.limits.write_timeout,
    };
    let ended = relay(
        worker,
        (stream, leftover),
        (conn, upstream_leftover),
        (limits, guard),
        (charge, reservation, tokens),
        session,
    )
    .await;
    session.ended_by = ended;
    // Each response's tokens were settled as it ended; the session's
    // ticket gives back its parallel slot.
    drop(ticket);
    // LiteLLM's guardrail metrics (a session has no trace to hang spans
    // on).
    crate::telemetry::Telemetry::default().guardrails(&session.call_id, &session.guard_log);
    record::submit(worker, row(worker, principal, session));
}

/// The realtime query parameters LiteLLM reads.
#[derive(Default)]
struct Query {
    model: Option<String>,
    intent: Option<String>,
}

impl Query {
    fn parse(query: &str) -> Query {
        let mut q = Query::default();
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            let value = Some(value.into_owned()).filter(|v| !v.is_empty());
            match &*name {
                "model" => q.model = value,
                "intent" => q.intent = value,
                _ => {}
            }
        }
        q
    }
}

/// Why the upstream's WebSocket did not open.
enum Opening {
    /// Its socket failed or timed out.
    Failed(UpstreamError),
    /// It answered with an HTTP error.
    Refused(GatewayError),
}

/// Sends the opening handshake on `conn` and reads the answer: the
/// connection and the bytes after the 101's head.
async fn open_upstream(
    mut conn: UpstreamConn,
    base: &crate::upstream::UpstreamBase,
    target: &provider::RealtimeTarget,
    deadline: Instant,
) -> Result<(UpstreamConn, Vec<u8>), Opening> {
    let key = websocket::new_key();
    let mut h = Vec::with_capacity(512);
    h.extend_from_slice(b"GET ");
    h.extend_from_slice(target.path.as_bytes());
    h.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    h.extend_from_slice(base.host.as_bytes());
    if base.port != if base.tls { 443 } else { 80 } {
        h.push(b':');
        h.extend_from_slice(itoa::Buffer::new().format(base.port).as_bytes());
    }
    h.extend_from_slice(b"\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: ");
    h.extend_from_slice(key.as_bytes());
    h.extend_from_slice(b"\r\n");
    for (name, value) in &target.headers {
        if value.bytes().any(|b| b == b'\r' || b == b'\n') {
            continue;
        }
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(b": ");
        h.extend_from_slice(value.as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    h.extend_from_slice(b"\r\n");
    let left = || deadline.saturating_duration_since(Instant::now());
    let io = |e: std::io::Error| Opening::Failed(UpstreamError::Io(e.to_string()));
    let timeout = |_| Opening::Failed(UpstreamError::Timeout);
    let (res, _) = monoio::time::timeout(left(), conn.write_all(h))
        .await
        .map_err(timeout)?;
    res.map_err(io)?;
    monoio::time::timeout(left(), conn.flush())
        .await
        .map_err(timeout)?
        .map_err(io)?;
    let mut buf = ReadBuffer::with_capacity(8 * 1024);
    loop {
        let answer = websocket::check_upgrade_answer(buf.bytes(), &key)
            .map_err(|e| Opening::Failed(UpstreamError::Protocol(e)))?;
        match answer {
            Some(UpgradeAnswer::Accepted(len)) => {
                buf.consume(len);
                return Ok((conn, buf.bytes().to_vec()));
            }
            Some(UpgradeAnswer::Refused {
                status,
                head_len,
                content_length,
            }) => {
                buf.consume(head_len);
                let want = content_length.unwrap_or(0).min(MAX_REFUSAL_BODY) as usize;
                while buf.len() < want {
                    match monoio::time::timeout(left(), buf.fill(&mut conn)).await {
                        Ok(Ok(n)) if n > 0 => {}
                        _ => break,
                    }
                }
                let body = &buf.bytes()[..buf.len().min(want)];
                return Err(Opening::Refused(crate::providers::openai_error(
                    status, body, None,
                )));
            }
            None => {}
        }
        match monoio::time::timeout(left(), buf.fill(&mut conn)).await {
            Err(_) => return Err(Opening::Failed(UpstreamError::Timeout)),
            Ok(Ok(0)) => {
                return Err(Opening::Failed(UpstreamError::Io(
                    "closed before answering the WebSocket handshake".into(),
                )))
            }
            Ok(Err(e)) => return Err(io(e)),
            Ok(Ok(_)) => {}
        }
    }
}

/// Caps of one session.
#[derive(Clone, Copy)]
struct Limits {
    /// Largest client message (`max_request_size_mb`).
    client_message: usize,
    /// Time each write to either side may take.
    write_timeout: Duration,
}

/// What a response's usage is charged against.
struct Charge<'a> {
    worker: &'a Worker,
    budgets: &'a [(&'static str, Arc<crate::budget::Budget>)],
    price: (spend::Price, spend::AudioPrice),
    principal: &'a Principal,
    /// The model group the session was admitted for.
    group: &'a str,
}

/// USD for one response's usage: text tokens at the model's token prices
/// (cached input at its cache price), audio tokens at its audio prices.
fn response_cost(usage: &ResponseUsage, (price, audio): (spend::Price, spend::AudioPrice)) -> f64 {
    spend::realtime_cost(usage.tokens, usage.audio, price, audio)
}

type ClientRead = OwnedReadHalf<ClientStream>;
type UpstreamRead = OwnedReadHalf<UpstreamConn>;

/// One read on a half, which it gives back with the buffer.
async fn read_some<R: AsyncReadRent>(
    mut half: R,
    mut buf: Vec<u8>,
) -> (std::io::Result<usize>, Vec<u8>, R) {
    buf.clear();
    let (res, buf) = half.read(buf).await;
    (res, buf, half)
}

/// What woke the relay.
enum Wake {
    Client((std::io::Result<usize>, Vec<u8>, ClientRead)),
    Upstream((std::io::Result<usize>, Vec<u8>, UpstreamRead)),
    Timer,
    Shutdown,
}

type Reading<R> = Pin<Box<dyn Future<Output = (std::io::Result<usize>, Vec<u8>, R)>>>;

/// Relays frames between the client and the upstream until both closed,
/// either failed, the session went idle or the gateway shuts down; each
/// `response.done` is charged as it passes. Returns why it ended when not
/// by a close handshake.
async fn relay(
    worker: &Worker,
    (client, client_leftover): (ClientStream, Vec<u8>),
    (upstream, upstream_leftover): (UpstreamConn, Vec<u8>),
    (limits, mut guard): (Limits, Option<Box<RealtimeGuard>>),
    (charge, mut reservation, mut tokens): (
        Charge<'_>,
        Option<crate::budget::Reservation<'_>>,
        Option<crate::limits::Ticket<'_>>,
    ),
    session: &mut Session,
) -> Option<String> {
    let (client_r, mut client_w) = client.into_split();
    let (upstream_r, mut upstream_w) = upstream.into_split();
    let mut client_ep = Endpoint::server(limits.client_message);
    let mut upstream_ep = Endpoint::client(MAX_UPSTREAM_MESSAGE);
    let mut client_reading: Option<Reading<ClientRead>> = Some(Box::pin(read_some(
        client_r,
        Vec::with_capacity(READ_CHUNK),
    )));
    let mut upstream_reading: Option<Reading<UpstreamRead>> = Some(Box::pin(read_some(
        upstream_r,
        Vec::with_capacity(READ_CHUNK),
    )));
    let mut shutdown = Some(Box::pin(worker.shutdown.wait()));
    let mut last_activity = Instant::now();
    let mut close_deadline: Option<Instant> = None;
    let mut timer = Box::pin(monoio::time::sleep(IDLE_TIMEOUT));
    let mut ended: Option<String> = None;
    // Bytes that came with the heads are frames already.
    let mut pending_client = Some(client_leftover);
    let mut pending_upstream = Some(upstream_leftover);
    let mut timer_spent = false;
    let ended = loop {
        let wake = if let Some(bytes) = pending_client.take().filter(|b| !b.is_empty()) {
            client_ep.feed(&bytes);
            None
        } else if let Some(bytes) = pending_upstream.take().filter(|b| !b.is_empty()) {
            upstream_ep.feed(&bytes);
            None
        } else {
            Some(
                std::future::poll_fn(|cx| {
                    if let Some(r) = client_reading.as_mut() {
                        if let Poll::Ready(out) = r.as_mut().poll(cx) {
                            client_reading = None;
                            return Poll::Ready(Wake::Client(out));
                        }
                    }
                    if let Some(r) = upstream_reading.as_mut() {
                        if let Poll::Ready(out) = r.as_mut().poll(cx) {
                            upstream_reading = None;
                            return Poll::Ready(Wake::Upstream(out));
                        }
                    }
                    if timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Wake::Timer);
                    }
                    if let Some(signal) = shutdown.as_mut() {
                        if signal.as_mut().poll(cx).is_ready() {
                            shutdown = None;
                            return Poll::Ready(Wake::Shutdown);
                        }
                    }
                    Poll::Pending
                })
                .await,
            )
        };
        match wake {
            None => {}
            Some(Wake::Client((Ok(n), buf, half))) if n > 0 => {
                last_activity = Instant::now();
                client_ep.feed(&buf[..n]);
                client_reading = Some(Box::pin(read_some(half, buf)));
            }
            Some(Wake::Client(_)) => {
                // The client left without a close handshake.
                if !client_ep.finished() {
                    ended.get_or_insert_with(|| "the client connection closed".into());
                }
                upstream_ep.close(1001, "client gone");
                let _ = write_out(&mut upstream_w, &mut upstream_ep, limits).await;
                break ended;
            }
            Some(Wake::Upstream((Ok(n), buf, half))) if n > 0 => {
                last_activity = Instant::now();
                upstream_ep.feed(&buf[..n]);
                upstream_reading = Some(Box::pin(read_some(half, buf)));
            }
            Some(Wake::Upstream(_)) => {
                if !upstream_ep.finished() {
                    ended.get_or_insert_with(|| "the upstream connection closed".into());
                    client_ep.close(1011, "the upstream connection was lost");
                }
                let _ = write_out(&mut client_w, &mut client_ep, limits).await;
                break ended;
            }
            Some(Wake::Timer) if close_deadline.is_some() => {
                ended.get_or_insert_with(|| "no close frame in time".into());
                break ended;
            }
            Some(Wake::Timer) => {
                timer_spent = true;
                if last_activity.elapsed() >= IDLE_TIMEOUT {
                    ended.get_or_insert_with(|| "idle".into());
                    client_ep.close(1001, "idle timeout");
                    upstream_ep.close(1001, "idle timeout");
                }
            }
            // Already closing: the close wait bounds it.
            Some(Wake::Shutdown) if close_deadline.is_some() => {}
            Some(Wake::Shutdown) => {
                ended.get_or_insert_with(|| "the gateway is shutting down".into());
                client_ep.close(1001, "server shutting down");
                upstream_ep.close(1001, "server shutting down");
            }
        }
        // Client messages go upstream as they are, or as the session's
        // guardrails leave them.
        loop {
            match client_ep.next_message() {
                Ok(None) => break,
                Ok(Some(Message::Close(frame))) => {
                    let (code, reason) = close_of(frame.as_ref());
                    upstream_ep.close(code, &reason);
                }
                Ok(Some(m @ (Message::Text(_) | Message::Binary(_)))) => {
                    let m = match guard.as_mut() {
                        None => Some(m),
                        Some(g) => match g.client(worker, &m).await {
                            FromClient::Send(rewritten) => Some(rewritten.unwrap_or(m)),
                            FromClient::Refuse(refusal, instead) => {
                                if !client_ep.closing() {
                                    let _ = client_ep.send(refusal);
                                }
                                instead
                            }
                            FromClient::Drop => None,
                        },
                    };
                    if let Some(m) = m.filter(|_| !upstream_ep.closing()) {
                        let _ = upstream_ep.send(m);
                    }
                }
                Ok(Some(_)) => {}
                Err(failure) => {
                    ended.get_or_insert_with(|| format!("client: {failure}"));
                    client_ep.fail(&failure);
                    upstream_ep.close(1001, "client failed");
                    break;
                }
            }
        }
        // Upstream messages go to the client as they are; their usage is
        // charged on the way.
        loop {
            match upstream_ep.next_message() {
                Ok(None) => break,
                Ok(Some(Message::Close(frame))) => {
                    let (code, reason) = close_of(frame.as_ref());
                    client_ep.close(code, &reason);
                }
                Ok(Some(m @ (Message::Text(_) | Message::Binary(_)))) => {
                    let usage = websocket::payload(&m).and_then(provider::response_done_usage);
                    let screened = match guard.as_mut() {
                        Some(g) => g.upstream(worker, &m).await,
                        None => FromUpstream::default(),
                    };
                    if let Some(cancel) = screened.to_upstream {
                        if !upstream_ep.closing() {
                            let _ = upstream_ep.send(cancel);
                        }
                    }
                    if !client_ep.closing() {
                        match screened.to_client {
                            None => {
                                let _ = client_ep.send(m);
                            }
                            Some(instead) => {
                                for m in instead {
                                    let _ = client_ep.send(m);
                                }
                            }
                        }
                    }
                    if let Some(usage) = usage {
                        let open = charge_response(
                            &charge,
                            (&mut reservation, &mut tokens),
                            &usage,
                            session,
                        )
                        .await;
                        if let Err(err) = open {
                            ended.get_or_insert_with(|| err.to_string());
                            let event = serde_json::json!({
                                "type": "error",
                                "error": {"type": err.error_type(), "message": err.to_string(), "code": err.error_type()},
                            });
                            let _ = client_ep.send(websocket::text(event.to_string()));
                            client_ep.close(1008, err.error_type());
                            upstream_ep.close(1000, "");
                        }
                    }
                }
                Ok(Some(_)) => {}
                Err(failure) => {
                    ended.get_or_insert_with(|| format!("upstream: {failure}"));
                    upstream_ep.fail(&failure);
                    client_ep.close(1011, "the upstream sent an invalid frame");
                    break;
                }
            }
        }
        let wrote_client = write_out(&mut client_w, &mut client_ep, limits).await;
        let wrote_upstream = write_out(&mut upstream_w, &mut upstream_ep, limits).await;
        if wrote_client.is_err() || wrote_upstream.is_err() {
            ended.get_or_insert_with(|| "a peer stopped reading".into());
            break ended;
        }
        if client_ep.finished() && upstream_ep.finished() {
            break ended;
        }
        if (client_ep.closing() || upstream_ep.closing()) && close_deadline.is_none() {
            let deadline = Instant::now() + CLOSE_WAIT;
            close_deadline = Some(deadline);
            timer = Box::pin(monoio::time::sleep(CLOSE_WAIT));
            timer_spent = false;
        } else if timer_spent && close_deadline.is_none() {
            // Fired with activity since: wait for the rest of the idle time.
            let left = IDLE_TIMEOUT.saturating_sub(last_activity.elapsed());
            timer = Box::pin(monoio::time::sleep(left.max(Duration::from_millis(1))));
            timer_spent = false;
        }
    };
    // Both write sides closed (a TLS close_notify, a FIN), within the
    // write timeout.
    let _ = monoio::time::timeout(limits.write_timeout, client_w.shutdown()).await;
    let _ = monoio::time::timeout(limits.write_timeout, upstream_w.shutdown()).await;
    if let Some(guard) = guard.as_mut() {
        session.guard_log = guard.finish();
    }
    ended
}

/// The code and reason to pass on for a peer's close frame.
fn close_of(frame: Option<&tungstenite::protocol::CloseFrame>) -> (u16, String) {
    match frame {
        Some(f) => (u16::from(f.code), f.reason.to_string()),
        None => (1000, String::new()),
    }
}

/// Writes what `ep` has for its peer within the write timeout.
async fn write_out<W: monoio::io::AsyncWriteRent>(
    half: &mut W,
    ep: &mut Endpoint,
    limits: Limits,
) -> Result<(), ()> {
    if ep.pending() == 0 {
        return Ok(());
    }
    let bytes = ep.take_output();
    match monoio::time::timeout(limits.write_timeout, half.write_all(bytes)).await {
        Ok((Ok(_), _)) => match monoio::time::timeout(limits.write_timeout, half.flush()).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(()),
        },
        _ => Err(()),
    }
}

/// What a session's admission (or one response's, under the token
/// limits) is checked as: the key's rows and limits for `group`, nothing
/// reserved.
fn admission<'a>(
    (principal, throttled): (&'a Principal, Option<&'a crate::store::KeyRecord>),
    group: &'a str,
    prompt: &'a PromptEstimate,
    request_id: &'a str,
) -> AdmitInput<'a> {
    AdmitInput {
        key: principal.key_rows_as(throttled),
        model: group,
        end_user: None,
        end_user_limits: None,
        prompt,
        max_tokens: None,
        estimated_output: None,
        embeddings: true,
        request_id,
        extra: principal.extra_limits(group, &[]),
    }
}

/// Charges one response's usage: settles the held reservation with its
/// cost and takes the next one, and settles its tokens on its place under
/// the token limits and takes the next response's; `Err` when a budget is
/// now spent, a token limit full or the key was blocked, expired or deleted
/// since (the session ends).
async fn charge_response<'l>(
    charge: &Charge<'l>,
    (reservation, tokens): (
        &mut Option<crate::budget::Reservation<'l>>,
        &mut Option<crate::limits::Ticket<'l>>,
    ),
    usage: &ResponseUsage,
    session: &mut Session,
) -> Result<(), GatewayError> {
    let cost = response_cost(usage, charge.price);
    session.usage.add(usage);
    session.responses += 1;
    session.cost += cost;
    let alerts = &charge.worker.shared.alerts;
    let limiter = &charge.worker.shared.limiter;
    // The next response's hold is taken before this one's cost is
    // settled (while the budgets still admit it), so a response that
    // finishes while a spent session closes is charged too; each under
    // its own id.
    let id = format!("{}:{}", session.call_id, session.responses);
    let mut next = record::hold_for(limiter, charge.principal, charge.budgets, 0.0, &id)
        .await
        .ok()
        .flatten();
    if let Some(held) = reservation.take().or_else(|| next.take()) {
        record::settle(alerts, Some(held), cost, charge.principal);
    }
    *reservation = next;
    // This response's tokens count in the window at once (not when the
    // session ends), and the next response needs room under the limits.
    if let Some(mut done) = tokens.take() {
        done.add_tokens(
            usage
                .tokens
                .prompt_tokens
                .saturating_add(usage.tokens.completion_tokens),
        );
    }
    let prompt = PromptEstimate::new(bytes::Bytes::new());
    let throttled = charge.principal.throttled_key();
    let admission = admission(
        (charge.principal, throttled.as_ref()),
        charge.group,
        &prompt,
        &id,
    );
    *tokens = limiter.admit_tokens(&admission).await?;
    // A key blocked, expired or deleted since the session opened ends it.
    charge.worker.shared.auth.still_usable(charge.principal)?;
    for (scope, budget) in charge.budgets {
        if budget.exhausted() {
            return Err(GatewayError::BudgetExceeded {
                scope: scope.to_string(),
                spend: budget.spent_usd(),
                max: budget.max_usd().unwrap_or(0.0),
                reserve: None,
            });
        }
    }
    Ok(())
}

/// The session's spend row, as LiteLLM writes one per realtime session.
fn row(worker: &Worker, principal: &Principal, session: &Session) -> SpendLogRow {
    let key = super::key_of(principal);
    let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let usage = session.usage.tokens;
    let dep = session.dep.as_deref();
    SpendLogRow {
        request_id: session.call_id.clone(),
        call_id: session.call_id.clone(),
        attempt: 1,
        call_type: Cow::Borrowed("_arealtime"),
        api_key: match key {
            Some(k) => k.record.token.as_str().into(),
            None => worker.shared.auth.master_token().unwrap_or_default().into(),
        },
        spend: session.cost,
        total_tokens: tokens(usage.prompt_tokens.saturating_add(usage.completion_tokens)),
        prompt_tokens: tokens(usage.prompt_tokens),
        completion_tokens: tokens(usage.completion_tokens),
        start_time: session.started,
        completion_start_time: session.opened,
        end_time: Utc::now(),
        model: session.upstream_model.as_str().into(),
        model_id: dep.map_or_else(|| Arc::from(""), |d| d.id.clone()),
        model_group: session.group.as_str().into(),
        custom_llm_provider: dep.map_or_else(|| Arc::from(""), |d| d.spend_labels.provider.clone()),
        api_base: dep.map_or_else(|| Arc::from(""), |d| d.spend_labels.api_base.clone()),
        region: dep.and_then(|d| d.spend_labels.region.clone()),
        user: key.and_then(|k| k.record.user_id.clone()),
        team_id: key.and_then(|k| k.record.team_id.clone()),
        status: Cow::Borrowed("success"),
        status_code: 101,
        error_class: None,
        error_message: session.ended_by.clone(),
        end_user: None,
        response_id: None,
        proxy_budget: worker.shared.auth.keys().proxy_budget().is_some(),
        cache_hit: false,
        cache_key: None,
        request_tags: None,
        guardrail_information: session
            .guard_log
            .information()
            .map(|t| Arc::new(crate::store::JsonText(t))),
        proxy_server_request: None,
        response: None,
    }
}
