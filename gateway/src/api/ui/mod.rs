//! The admin console at `/ui`: its files (built into the binary, see
//! [`assets`]), its login, logout and session endpoints ([`session`]). The
//! console is a client of the admin API like any other: its pages call the
//! management endpoints with the session cookie, which [`session::caller`]
//! turns into the login's rights.

mod assets;
mod revoked;
pub mod session;

use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::http1::RequestHead;
use crate::state::Worker;
use std::net::IpAddr;

/// The console's Content-Security-Policy: its own scripts, styles and API
/// only; no inline script or style, no framing, nothing from elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; form-action 'self'; \
frame-ancestors 'none'; base-uri 'none'";

/// Whether `path` (as sent, trailing `/` trimmed) is the console's.
pub fn is_ui_path(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// A response head with the console's security headers.
fn secured(status: u16) -> HeadBuilder {
    let mut head = HeadBuilder::new(status);
    head.header("content-security-policy", CSP)
        .header("x-frame-options", "DENY")
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer");
    head
}

/// Answers a request under `/ui`; `peer` is the client's address (wrong
/// passwords are counted per address).
pub async fn handle(
    worker: &Worker,
    head: &RequestHead,
    path: &str,
    peer: Option<IpAddr>,
    body: &[u8],
    out: &mut Responder<'_>,
) {
    if worker.shared.auth.console().disabled() {
        let err = GatewayError::RouteNotFound {
            method: head.method().to_string(),
            path: head.path().to_string(),
        };
        let _ = out.send_error(&err, Some(secured(404))).await;
        return;
    }
    let name = path.strip_prefix("/ui").unwrap_or(path);
    let name = name.strip_prefix('/').unwrap_or(name);
    let method = head.method();
    let answer = match (method, name) {
        ("POST", "login") => session::login(worker, head, peer, body).await,
        ("POST", "logout") => session::logout(worker, head).await,
        ("GET" | "HEAD", "session") => session::current(worker, head).await,
        ("GET" | "HEAD", _) => {
            let _ = serve_asset(head, name, out).await;
            return;
        }
        _ => Err(GatewayError::RouteNotFound {
            method: method.to_string(),
            path: head.path().to_string(),
        }),
    };
    let _ = match answer {
        Ok(answer) => {
            let mut h = secured(200);
            h.header("cache-control", "no-store");
            if let Some(cookie) = &answer.set_cookie {
                h.header("set-cookie", cookie);
            }
            let body = serde_json::to_vec(&answer.body).unwrap_or_default();
            out.send(200, h, "application/json", &body).await
        }
        Err(err) => {
            let mut h = secured(err.status());
            h.header("cache-control", "no-store");
            out.send_error(&err, Some(h)).await
        }
    };
}

/// Sends the asset `name` (a 404 when there is none), gzipped when the
/// browser accepts it, or a 304 when the browser's copy is current.
/// Browsers revalidate every time (`no-cache`): the names carry no
/// version, so a new binary's files are seen at once.
async fn serve_asset(
    head: &RequestHead,
    name: &str,
    out: &mut Responder<'_>,
) -> std::io::Result<()> {
    let Some(served) = assets::find(name) else {
        let err = GatewayError::RouteNotFound {
            method: head.method().to_string(),
            path: head.path().to_string(),
        };
        return out.send_error(&err, Some(secured(404))).await;
    };
    let gzip = head
        .header("accept-encoding")
        .is_some_and(assets::accepts_gzip);
    let (body, etag) = if gzip {
        (&served.gzip[..], served.gzip_etag.as_str())
    } else {
        (served.asset.body, served.etag.as_str())
    };
    let fresh = head
        .header("if-none-match")
        .is_some_and(|v| assets::matches(v, etag));
    let status = if fresh { 304 } else { 200 };
    let mut h = secured(status);
    h.header("cache-control", "no-cache")
        .header("etag", etag)
        .header("vary", "accept-encoding");
    if gzip {
        h.header("content-encoding", "gzip");
    }
    let body = if fresh { &[][..] } else { body };
    out.send(status, h, served.asset.content_type, body).await
}
