//! Endpoint dispatch: which handler answers a method and path. Paths are
//! accepted with and without the `/v1` prefix, as LiteLLM does; Anthropic's
//! `/v1/messages` is served beside OpenAI's endpoints.
//!
//! A request is admitted from its head alone ([`admit`]), before its body is
//! read and before `100 Continue`: the routes that need a credential get
//! their caller there, so a request without a valid one costs no body.

pub(crate) mod admin;
pub use admin::fuzz as admin_fuzz;
mod cache;
mod cache_settings;
mod health;
mod metrics;
mod models;
mod reload;
mod route_list;
#[cfg(debug_assertions)]
mod test_hooks;
mod ui;

use crate::auth::{CredentialMemo, Principal};
use crate::downstream::{ClientStream, Responder};
use crate::error::GatewayError;
use crate::http1::{BodyFraming, RequestHead};
use crate::inbound::Endpoint;
use crate::providers::files::FilesOp;
use crate::providers::passthrough::{self, PassThroughProvider};
use crate::proxy;
use crate::state::Worker;
use bytes::Bytes;
use std::net::IpAddr;
use std::time::Instant;

/// Which handler a request goes to, from its method and path.
enum Route<'a> {
    /// An LLM endpoint.
    Llm(Endpoint),
    /// Anthropic's `/v1/messages/count_tokens`.
    CountTokens,
    /// The management API, at this path (without `/v1`).
    Admin(&'a str),
    Liveliness,
    Readiness,
    /// `GET /health/readiness/details`: readiness with everything behind it,
    /// for any caller with a key.
    ReadinessDetails,
    /// `/health`: every deployment's health (admin).
    Health,
    /// `POST /config/reload`: re-read the config file (admin).
    Reload,
    /// LiteLLM's `/cache/*` routes (admin).
    Cache(cache::Op),
    /// `/metrics`, when metrics are on.
    Metrics,
    /// `GET /routes`: the routes served (public, as LiteLLM's).
    Routes,
    Models,
    /// `/models/{id}`.
    Model(&'a str),
    /// The admin console (`/ui`, `/ui/...`), at this path.
    Ui(&'a str),
    /// A provider pass-through route (`/openai/*`, `/anthropic/*`, ...):
    /// the provider and the path after its prefix.
    PassThrough(PassThroughProvider, &'a str),
    /// One of `general_settings.pass_through_endpoints`, by its index.
    CustomPassThrough(usize),
    /// OpenAI's Files and Batch APIs, with the provider a
    /// `/{provider}/v1/…` path names.
    Files(FilesOp<'a>, Option<&'a str>),
    /// The realtime API over WebSocket: the session keeps the connection.
    Realtime,
    /// One of LiteLLM's routes this gateway does not serve, refused with
    /// what a client can do instead (before the body is read).
    NotServed(&'static str),
    NotFound,
}

fn route<'h>(worker: &Worker, head: &'h RequestHead) -> Route<'h> {
    let path = head.path();
    let path = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    let unversioned = path
        .strip_prefix("/v1")
        .filter(|p| p.starts_with('/'))
        .unwrap_or(path);
    let method = head.method();
    let get = method == "GET" || method == "HEAD";
    if ui::is_ui_path(path) {
        return Route::Ui(path);
    }
    if let Some(op) = cache::Op::parse(method, path) {
        return Route::Cache(op);
    }
    // LiteLLM serves its realtime WebSocket under `/openai` too.
    if matches!(unversioned, "/realtime" | "/openai/v1/realtime") && method == "GET" {
        return Route::Realtime;
    }
    // LiteLLM's WebRTC routes, ahead of the `/openai/*` pass-through as
    // LiteLLM orders them: passed through, they would hand the caller an
    // OpenAI ephemeral key whose sessions no budget sees.
    if method == "POST" && is_realtime_webrtc(unversioned) {
        return Route::NotServed(REALTIME_WEBRTC_INSTEAD);
    }
    // LiteLLM's `/{provider}/v1/files…` and `/{provider}/v1/batches…`
    // come before its provider pass-through routes (`/openai/v1/files` is
    // a managed upload, not a pass-through).
    if let Some((provider, op)) = FilesOp::parse_scoped(method, path) {
        return Route::Files(op, Some(provider));
    }
    if let Some((provider, rest)) = PassThroughProvider::parse(path) {
        return Route::PassThrough(provider, rest);
    }
    if let Some(op) = FilesOp::parse(method, unversioned) {
        return Route::Files(op, None);
    }
    match unversioned {
        "/chat/completions" if method == "POST" => Route::Llm(Endpoint::ChatCompletions),
        "/completions" if method == "POST" => Route::Llm(Endpoint::Completions),
        "/embeddings" if method == "POST" => Route::Llm(Endpoint::Embeddings),
        "/messages" if method == "POST" => Route::Llm(Endpoint::Messages),
        "/responses" if method == "POST" => Route::Llm(Endpoint::Responses),
        "/rerank" | "/v2/rerank" if method == "POST" => Route::Llm(Endpoint::Rerank),
        "/moderations" if method == "POST" => Route::Llm(Endpoint::Moderations),
        "/images/generations" if method == "POST" => Route::Llm(Endpoint::ImageGenerations),
        "/images/edits" if method == "POST" => Route::Llm(Endpoint::ImageEdits),
        "/audio/speech" if method == "POST" => Route::Llm(Endpoint::AudioSpeech),
        "/audio/transcriptions" if method == "POST" => Route::Llm(Endpoint::AudioTranscriptions),
        "/audio/translations" if method == "POST" => Route::Llm(Endpoint::AudioTranslations),
        "/messages/count_tokens" if method == "POST" => Route::CountTokens,
        p if admin::is_admin_path(p) => Route::Admin(p),
        "/health/liveliness" | "/health/liveness" if get => Route::Liveliness,
        "/health/readiness" if get => Route::Readiness,
        "/health/readiness/details" if get => Route::ReadinessDetails,
        "/health" if get => Route::Health,
        "/config/reload" if method == "POST" => Route::Reload,
        "/metrics" if get && worker.shared.metrics.enabled() => Route::Metrics,
        "/models" if get => Route::Models,
        "/routes" if get => Route::Routes,
        p if get && p.starts_with("/models/") => Route::Model(&p["/models/".len()..]),
        // The config's own endpoints never shadow the gateway's routes.
        _ => match worker.shared.pass_through.custom_for(path) {
            Some(index) => Route::CustomPassThrough(index),
            None => Route::NotFound,
        },
    }
}

/// What a client of LiteLLM's WebRTC realtime routes can use instead.
const REALTIME_WEBRTC_INSTEAD: &str = "LiteLLM's WebRTC realtime routes (ephemeral client secrets, SDP calls, transcription sessions) are not implemented; open a WebSocket to /v1/realtime?model=... with the virtual key instead";

/// LiteLLM 1.110.2's WebRTC realtime routes (without `/v1`): ephemeral
/// client secrets, SDP calls and transcription sessions.
fn is_realtime_webrtc(unversioned: &str) -> bool {
    /// Served under `/v1`, `/` and `/openai/v1`.
    const EVERYWHERE: [&str; 3] = [
        "/realtime/client_secrets",
        "/realtime/calls",
        "/realtime/transcription_sessions",
    ];
    match unversioned.strip_prefix("/openai/v1") {
        Some(rest) => EVERYWHERE.contains(&rest),
        None => {
            EVERYWHERE.contains(&unversioned)
                || matches!(
                    unversioned,
                    "/realtime/translations/client_secrets" | "/realtime/translations/calls"
                )
        }
    }
}

/// Refuses a virtual key whose own `allowed_routes` leave `path` out.
fn key_routes(caller: Option<Principal>, path: &str) -> Result<Option<Principal>, GatewayError> {
    if let Some(Principal::Key(key)) = &caller {
        let allowed = &key.record.allowed_routes;
        if !crate::auth::routes::key_may_call(allowed, path) {
            return Err(GatewayError::KeyRouteForbidden {
                allowed: allowed.clone(),
                route: path.to_string(),
            });
        }
    }
    Ok(caller)
}

/// An `auth: true` custom pass-through endpoint, as LiteLLM gates it
/// ([`crate::auth::pass_through_grants`]).
fn granted_pass_through(caller: Principal, path: &str) -> Result<Principal, GatewayError> {
    crate::auth::pass_through_grants::check(&caller, path)?;
    Ok(caller)
}

/// What the request head alone decided: the caller, for the routes that
/// need a credential (`None` for the others), or why it is refused.
pub struct Admission(Result<Option<Principal>, GatewayError>);

impl Admission {
    /// Whether the request is refused already, so its body need not be read.
    pub fn is_refused(&self) -> bool {
        self.0.is_err()
    }

    /// The caller of a route that needs one.
    fn caller(self) -> Result<Principal, GatewayError> {
        self.0.and_then(|p| p.ok_or(GatewayError::MissingKey))
    }
}

/// The caller of an admin route: the console's session when the request
/// carries its cookie and no key, else the request's key.
async fn admin_caller(
    worker: &Worker,
    head: &RequestHead,
    credentials: &mut CredentialMemo,
) -> Result<Principal, GatewayError> {
    match ui::session::caller(worker, head).await {
        Some(result) => result,
        None => worker.shared.auth.authenticate(head, credentials).await,
    }
}

/// Authenticates a request from its head, before its body is read: LLM
/// endpoints and `/models` need a valid credential, the management API an
/// admin's (a key, or the console's session cookie).
pub async fn admit(
    worker: &Worker,
    head: &RequestHead,
    credentials: &mut CredentialMemo,
) -> Admission {
    let auth = &worker.shared.auth;
    let route = route(worker, head);
    if let Some(allowed) = &worker.shared.limits.allowed_routes {
        let public = matches!(route, Route::Liveliness | Route::Readiness);
        if !public && !allowed.iter().any(|r| r == head.path()) {
            return Admission(Err(GatewayError::RouteForbidden(head.path().to_string())));
        }
    }
    let result = match route {
        Route::Llm(_) | Route::CountTokens | Route::Models | Route::Model(_) | Route::Files(..) => {
            auth.authenticate(head, credentials).await.map(Some)
        }
        Route::Metrics if !worker.shared.metrics.require_auth() => Ok(None),
        Route::Metrics => match admin_caller(worker, head, credentials).await {
            Ok(p) if p.is_admin() => Ok(Some(p)),
            Ok(_) => Err(GatewayError::NotAdmin("/metrics".to_string())),
            Err(e) => Err(e),
        },
        Route::Admin(path) => match admin_caller(worker, head, credentials).await {
            Ok(p) if admin::may_try(&p, path) => Ok(Some(p)),
            Ok(_) => Err(GatewayError::NotAdmin(path.to_string())),
            Err(e) => Err(e),
        },
        Route::ReadinessDetails => admin_caller(worker, head, credentials).await.map(Some),
        // Google AI Studio's clients send the key as `?key=` or
        // `x-goog-api-key`.
        Route::PassThrough(provider, _) if provider.reads_google_key() => {
            let key = passthrough::query_key(head.query())
                .or_else(|| head.header("x-goog-api-key").map(str::trim))
                .or_else(|| crate::auth::credential(head));
            auth.authenticate_key(key, credentials).await.map(Some)
        }
        Route::PassThrough(..) => auth.authenticate(head, credentials).await.map(Some),
        // Browsers cannot set headers on a WebSocket: LiteLLM reads the
        // key from a subprotocol too.
        Route::Realtime => {
            let key = crate::auth::credential(head).or_else(|| realtime_protocol_key(head));
            auth.authenticate_key(key, credentials).await.map(Some)
        }
        Route::CustomPassThrough(index) => match worker.shared.pass_through.custom.get(index) {
            Some(endpoint) if endpoint.auth => auth
                .authenticate(head, credentials)
                .await
                .and_then(|p| granted_pass_through(p, head.path()))
                .map(Some),
            _ => Ok(None),
        },
        Route::Health | Route::Reload | Route::Cache(_) => {
            match admin_caller(worker, head, credentials).await {
                Ok(p) if p.is_admin() => Ok(Some(p)),
                Ok(_) => Err(GatewayError::NotAdmin(head.path().to_string())),
                Err(e) => Err(e),
            }
        }
        Route::NotServed(instead) => Err(GatewayError::RouteNotServed {
            method: head.method().to_string(),
            path: head.path().to_string(),
            instead,
        }),
        Route::Liveliness | Route::Readiness | Route::Routes | Route::Ui(_) | Route::NotFound => {
            Ok(None)
        }
    };
    Admission(result.and_then(|caller| key_routes(caller, head.path())))
}

/// The key a browser offers as a subprotocol (`openai-insecure-api-key.<key>`).
fn realtime_protocol_key(head: &RequestHead) -> Option<&str> {
    head.header("sec-websocket-protocol")?
        .split(',')
        .map(str::trim)
        .find_map(|p| p.strip_prefix(proxy::REALTIME_KEY_PROTOCOL))
        .filter(|k| !k.is_empty())
}

/// Whether the request's route keeps the connection for itself (the
/// realtime WebSocket): the connection loop then hands it over to
/// [`take_over`] instead of answering it.
pub fn takes_connection(worker: &Worker, head: &RequestHead) -> bool {
    matches!(route(worker, head), Route::Realtime)
}

/// Serves a request whose route keeps the connection ([`takes_connection`]):
/// `leftover` is what the client sent after the head.
pub async fn take_over(
    worker: &Worker,
    head: &RequestHead,
    admission: Admission,
    stream: ClientStream,
    leftover: Vec<u8>,
    received_at: Instant,
) {
    proxy::realtime(
        worker,
        head,
        admission.caller(),
        stream,
        leftover,
        received_at,
    )
    .await;
}

/// The length of the request's body when its route streams it to the
/// upstream as it reads it (a multipart upload, of an LLM endpoint or of
/// `/v1/files`, larger than `proxy::STREAM_UPLOADS_ABOVE`, with a
/// `Content-Length` within the body limit): the connection loop then
/// leaves the body to [`handle_upload`].
pub fn streamed_body(worker: &Worker, head: &RequestHead) -> Option<u64> {
    let BodyFraming::Length(length) = head.framing else {
        return None;
    };
    let fits = length <= worker.shared.limits.max_body_bytes as u64;
    let large = length > proxy::STREAM_UPLOADS_ABOVE;
    match route(worker, head) {
        Route::Llm(endpoint) if endpoint.takes_form() && fits && large => Some(length),
        Route::Files(FilesOp::Upload, _) if fits && large => Some(length),
        _ => None,
    }
}

/// Answers an admitted request whose body [`streamed_body`] left on the
/// connection (`early`: the bytes of it read with the head). Returns
/// whether the whole body was read, so the connection may go on.
pub async fn handle_upload(
    worker: &Worker,
    head: &RequestHead,
    admission: Admission,
    body: (Vec<u8>, u64),
    out: &mut Responder<'_>,
    received_at: Instant,
) -> bool {
    match route(worker, head) {
        Route::Llm(endpoint) => {
            proxy::upload(
                worker,
                head,
                endpoint,
                admission.caller(),
                body,
                out,
                received_at,
            )
            .await
        }
        Route::Files(op, provider) => {
            // Boxed, as the Files API's other requests.
            Box::pin(proxy::files_upload(
                worker,
                head,
                (op, provider),
                admission.caller(),
                body,
                out,
                received_at,
            ))
            .await
        }
        _ => false,
    }
}

/// Answers a request whose body could not be read (too large, too slow,
/// bad framing) with `err`: an LLM request as the proxy answers refusals
/// (call id, access line, metrics), any other with the bare error.
pub async fn refuse(
    worker: &Worker,
    head: &RequestHead,
    err: GatewayError,
    out: &mut Responder<'_>,
    received_at: Instant,
) {
    match route(worker, head) {
        Route::Llm(endpoint) => {
            proxy::handle(
                worker,
                head,
                endpoint,
                Err(err),
                Bytes::new(),
                out,
                received_at,
            )
            .await
        }
        _ => {
            let _ = out.send_error(&err, None).await;
        }
    }
}

/// The handler of a request admitted by [`admit`] (or refused there: the
/// refusal is answered by the handler of its route, with an empty body).
///
/// The connection awaits each handler's future on its own: one future
/// choosing between the two (an `Either`) added 128 B to every open
/// stream, its tag padded to the handlers' 128-byte alignment, where two
/// awaits share their room in the connection's state.
pub enum Handler<'h> {
    /// An LLM endpoint: [`handle_llm`].
    Llm(Endpoint),
    /// Any other route: [`handle_other`].
    Other(OtherRoute<'h>),
}

/// A route other than the LLM endpoints, for [`handle_other`].
pub struct OtherRoute<'h>(Route<'h>);

/// Which handler answers `head`.
pub fn handler<'h>(worker: &Worker, head: &'h RequestHead) -> Handler<'h> {
    match route(worker, head) {
        Route::Llm(endpoint) => Handler::Llm(endpoint),
        other => Handler::Other(OtherRoute(other)),
    }
}

/// Answers a request to an LLM `endpoint`.
///
/// Not an `async fn`: its future is the proxy's own, without a routing
/// future around it keeping these arguments beside the proxy's copy of
/// them (768 B that every open stream carried).
pub fn handle_llm<'a, 'r>(
    worker: &'a Worker,
    (head, endpoint): (&'a RequestHead, Endpoint),
    admission: Admission,
    body: Bytes,
    out: &'a mut Responder<'r>,
    received_at: Instant,
) -> impl std::future::Future<Output = ()> + use<'a, 'r> {
    let caller = admission.caller();
    proxy::handle(worker, head, endpoint, caller, body, out, received_at)
}

/// Answers a request to a route other than the LLM endpoints; `peer` is
/// the client's address.
pub async fn handle_other(
    worker: &Worker,
    (head, route): (&RequestHead, OtherRoute<'_>),
    (admission, body): (Admission, Bytes),
    out: &mut Responder<'_>,
    received_at: Instant,
    peer: Option<IpAddr>,
) {
    let result = match route.0 {
        // Not awaited here: its future would set this one's size.
        Route::Llm(_) => unreachable!("`handle_llm` answers the LLM routes"),
        Route::PassThrough(provider, rest) => {
            // Boxed, as the management API below: its state would join
            // every LLM request's.
            Box::pin(proxy::pass_through(
                worker,
                head,
                (provider, rest),
                admission.caller(),
                body,
                out,
                received_at,
            ))
            .await;
            return;
        }
        Route::CustomPassThrough(index) => {
            // Boxed, as above.
            Box::pin(proxy::pass_through_custom(
                worker,
                head,
                index,
                admission.0,
                body,
                out,
                received_at,
            ))
            .await;
            return;
        }
        Route::Files(op, provider) => {
            // Boxed, as the pass-through routes above.
            Box::pin(proxy::files(
                worker,
                head,
                (op, provider),
                admission.caller(),
                body,
                out,
                received_at,
            ))
            .await;
            return;
        }
        Route::CountTokens => {
            // Boxed, as the management API below: rare, and their states
            // are larger than an LLM request's, which a stream keeps open.
            Box::pin(proxy::count_tokens(
                worker,
                head,
                admission.caller(),
                body,
                out,
            ))
            .await;
            return;
        }
        Route::Admin(p) => {
            Box::pin(admin::handle(
                worker,
                head,
                p,
                admission.caller(),
                &body,
                out,
            ))
            .await;
            return;
        }
        Route::Ui(path) => {
            if let Err(err) = admission.0 {
                let _ = out.send_error(&err, None).await;
                return;
            }
            Box::pin(ui::handle(worker, head, path, peer, &body, out)).await;
            return;
        }
        Route::Liveliness => health::liveliness(out).await,
        Route::Routes => {
            let body = route_list::routes(worker.shared.metrics.enabled()).to_string();
            let head = crate::downstream::HeadBuilder::new(200);
            let _ = out
                .send(200, head, "application/json", body.as_bytes())
                .await;
            Ok(())
        }
        Route::Readiness => health::readiness(worker, out).await,
        Route::ReadinessDetails => match admission.0 {
            Ok(_) => health::readiness_details(worker, out).await,
            Err(e) => Err(e),
        },
        Route::Health => match admission.0 {
            Ok(_) => health::deployments(worker, head, out).await,
            Err(e) => Err(e),
        },
        Route::Reload => match admission.0 {
            Ok(_) => reload::reload(worker, out).await,
            Err(e) => Err(e),
        },
        Route::Cache(op) => match admission.0 {
            // Boxed: rare, and a flush's state is large.
            Ok(_) => Box::pin(cache::handle(worker, op, &body, out)).await,
            Err(e) => Err(e),
        },
        Route::Metrics => match admission.0 {
            Ok(_) => metrics::scrape(worker, out).await,
            Err(e) => Err(e),
        },
        Route::Models => match admission.caller() {
            Ok(caller) => models::list(worker, &caller, head.query(), out).await,
            Err(e) => Err(e),
        },
        Route::Model(id) => match admission.caller() {
            Ok(caller) => models::get(worker, &caller, id, out).await,
            Err(e) => Err(e),
        },
        // The connection loop hands this route over to `take_over`.
        Route::Realtime => Err(GatewayError::Internal(
            "the realtime route keeps its connection",
        )),
        Route::NotServed(_) => admission.caller().map(drop),
        Route::NotFound if admission.is_refused() => admission.caller().map(drop),
        Route::NotFound => {
            #[cfg(debug_assertions)]
            if let Some(result) = test_hooks::handle(worker, head.path(), out).await {
                if let Err(err) = result {
                    let _ = out.send_error(&err, None).await;
                }
                return;
            }
            Err(GatewayError::RouteNotFound {
                method: head.method().to_string(),
                path: head.path().to_string(),
            })
        }
    };
    if let Err(err) = result {
        let _ = out.send_error(&err, None).await;
    }
}
