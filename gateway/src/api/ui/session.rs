//! The console's login, logout and session endpoints, and the session
//! cookie as a credential for the admin API: the cookie names a session
//! held in this process ([`crate::auth::Console`]); a call that changes
//! state must repeat the session's CSRF token in `x-csrf-token`.

use crate::auth::console::{csrf_matches, LoginRefused, SessionRole, SESSION_TTL};
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::http1::RequestHead;
use crate::state::Worker;
use serde::Deserialize;
use serde_json::{json, Value};
use std::net::IpAddr;
use std::time::Instant;

/// The session cookie's name.
pub const COOKIE: &str = "gateway_session";
/// The header that carries the session's CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Longest accepted username or password.
const MAX_FIELD: usize = 1024;

/// The session cookie's value in a request, if any.
pub fn cookie(head: &RequestHead) -> Option<&str> {
    head.header("cookie")?
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|v| !v.is_empty())
}

/// The caller a session cookie authenticates, when the request has one
/// (and no other credential: a key always wins). Reads change nothing;
/// any other method needs the session's CSRF token.
pub fn caller(worker: &Worker, head: &RequestHead) -> Option<Result<Principal, GatewayError>> {
    if crate::auth::credential(head).is_some() {
        return None;
    }
    let id = cookie(head)?;
    let Some(session) = worker.shared.auth.console().session(id, Instant::now()) else {
        return Some(Err(GatewayError::ConsoleSession));
    };
    let reads = matches!(head.method(), "GET" | "HEAD");
    if !reads
        && !head
            .header(CSRF_HEADER)
            .is_some_and(|t| csrf_matches(&session, t.trim()))
    {
        return Some(Err(GatewayError::CsrfRefused));
    }
    Some(Ok(match session.role {
        SessionRole::Admin => Principal::Master,
    }))
}

/// The body of `POST /ui/login`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    username: String,
    password: String,
}

/// What a login or the session endpoint answers, and the `set-cookie`
/// value to send with it.
pub struct Answer {
    /// The JSON body.
    pub body: Value,
    /// A `set-cookie` header value, when the cookie changes.
    pub set_cookie: Option<String>,
}

/// The `set-cookie` value for `value` lasting `max_age` seconds; `Secure`
/// when the gateway terminates TLS.
fn set_cookie(worker: &Worker, value: &str, max_age: u64) -> String {
    let secure = if worker.shared.client_tls.is_some() {
        "; Secure"
    } else {
        ""
    };
    format!("{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
}

/// `POST /ui/login` with `{"username","password"}` as JSON (a browser
/// cannot send that cross-site without the gateway's consent, which it
/// never gives): opens a session and sets its cookie.
pub fn login(
    worker: &Worker,
    head: &RequestHead,
    peer: Option<IpAddr>,
    body: &[u8],
) -> Result<Answer, GatewayError> {
    let json = head
        .header("content-type")
        .is_some_and(|t| t.trim_start().starts_with("application/json"));
    if !json {
        return Err(GatewayError::InvalidParam {
            param: "content-type",
            message: "a login is a JSON body (application/json)".into(),
        });
    }
    let login: Login =
        serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    for (name, value) in [("username", &login.username), ("password", &login.password)] {
        if value.len() > MAX_FIELD {
            return Err(GatewayError::BadField {
                field: name.into(),
                message: format!("longer than {MAX_FIELD} bytes"),
            });
        }
    }
    let console = worker.shared.auth.console();
    let opened = console.login(peer, &login.username, &login.password, Instant::now());
    let session = opened.map_err(|refused| match refused {
        LoginRefused::Wrong => GatewayError::ConsoleLogin("Invalid credentials used to access UI."),
        LoginRefused::Disabled => GatewayError::ConsoleLogin(
            "The console has no password: set UI_PASSWORD or general_settings.master_key.",
        ),
        LoginRefused::Throttled(wait) => GatewayError::ConsoleThrottled {
            retry_after: wait.as_secs().max(1).to_string(),
        },
        LoginRefused::Full => GatewayError::Unavailable("too many console sessions are open"),
    })?;
    Ok(Answer {
        body: json!({
            "role": "proxy_admin",
            "csrf_token": session.csrf,
            "expires_in": SESSION_TTL.as_secs(),
        }),
        set_cookie: Some(set_cookie(worker, &session.id, SESSION_TTL.as_secs())),
    })
}

/// `GET /ui/session`: whether the browser is logged in and, when it is,
/// the session's CSRF token (only the console's own pages can read this
/// answer: no other origin is let in). Without a master key every caller
/// is an admin and no login is needed.
pub fn current(worker: &Worker, head: &RequestHead) -> Result<Answer, GatewayError> {
    let answer = |body| Answer {
        body,
        set_cookie: None,
    };
    if !worker.shared.auth.has_master_key() {
        return Ok(answer(json!({
            "authenticated": true,
            "role": "proxy_admin",
            "csrf_token": null,
            "login_required": false,
        })));
    }
    let now = Instant::now();
    let session = cookie(head).and_then(|id| worker.shared.auth.console().session(id, now));
    Ok(answer(match session {
        Some(session) => json!({
            "authenticated": true,
            "role": "proxy_admin",
            "csrf_token": session.csrf,
            "expires_in": session.expires.saturating_duration_since(now).as_secs(),
        }),
        None => json!({"authenticated": false}),
    }))
}

/// `POST /ui/logout`: ends the session (its CSRF token required, so another
/// site cannot log the console out) and clears the cookie.
pub fn logout(worker: &Worker, head: &RequestHead) -> Result<Answer, GatewayError> {
    if let Some(id) = cookie(head) {
        let console = worker.shared.auth.console();
        if let Some(session) = console.session(id, Instant::now()) {
            let token_ok = head
                .header(CSRF_HEADER)
                .is_some_and(|t| csrf_matches(&session, t.trim()));
            if !token_ok {
                return Err(GatewayError::CsrfRefused);
            }
            console.logout(id);
        }
    }
    Ok(Answer {
        body: json!({"logged_out": true}),
        set_cookie: Some(set_cookie(worker, "", 0)),
    })
}
