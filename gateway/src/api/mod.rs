//! Endpoint dispatch: which handler answers a method and path. Paths are
//! accepted with and without the `/v1` prefix, as LiteLLM does.

mod admin;
pub use admin::fuzz as admin_fuzz;
mod health;
mod models;
#[cfg(debug_assertions)]
mod test_hooks;

use crate::error::GatewayError;
use crate::http1::RequestHead;
use crate::inbound::Endpoint;
use crate::proxy;
use crate::server::Responder;
use crate::state::Worker;
use bytes::Bytes;
use std::time::Instant;

/// Answers one request.
pub async fn handle(
    worker: &Worker,
    head: &RequestHead,
    body: Bytes,
    out: &mut Responder<'_>,
    received_at: Instant,
) {
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
    #[cfg(debug_assertions)]
    if let Some(result) = test_hooks::handle(unversioned, out).await {
        if let Err(err) = result {
            let _ = out.send_error(&err, None).await;
        }
        return;
    }
    let get = method == "GET" || method == "HEAD";
    let result = match unversioned {
        "/chat/completions" | "/completions" | "/embeddings" if method == "POST" => {
            let endpoint = match unversioned {
                "/chat/completions" => Endpoint::ChatCompletions,
                "/completions" => Endpoint::Completions,
                _ => Endpoint::Embeddings,
            };
            proxy::handle(worker, head, endpoint, body, out, received_at).await;
            return;
        }
        "/messages" if method == "POST" => {
            proxy::handle(worker, head, Endpoint::Messages, body, out, received_at).await;
            return;
        }
        "/messages/count_tokens" if method == "POST" => {
            proxy::count_tokens(worker, head, body, out).await;
            return;
        }
        p if admin::is_admin_path(p) => {
            admin::handle(worker, head, p, &body, out).await;
            return;
        }
        "/health/liveliness" | "/health/liveness" if get => health::liveliness(out).await,
        "/health/readiness" if get => health::readiness(worker, out).await,
        "/models" if get => models::list(worker, head, out).await,
        p if get && p.starts_with("/models/") => {
            models::get(worker, head, &p["/models/".len()..], out).await
        }
        _ => Err(GatewayError::RouteNotFound {
            method: method.to_string(),
            path: head.path().to_string(),
        }),
    };
    if let Err(err) = result {
        let _ = out.send_error(&err, None).await;
    }
}
