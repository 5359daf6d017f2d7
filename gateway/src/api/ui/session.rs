//! The console's login, logout and session endpoints, and the session
//! cookie as a credential for the admin API: the cookie is a signed session
//! token ([`crate::auth::Console`]) any replica with the same settings
//! accepts, unless it was logged out (here, or on another replica when the
//! fleet shares Redis or a database: [`super::revoked`]); a call that changes state must
//! repeat the session's CSRF token in `x-csrf-token`.

use super::revoked;
use crate::auth::console::{
    csrf_matches, LoginRefused, NewSession, Session, SessionRole, SESSION_TTL,
};
use crate::auth::{hash_key, Principal};
use crate::error::GatewayError;
use crate::http1::RequestHead;
use crate::state::Worker;
use serde::Deserialize;
use serde_json::{json, Value};
use std::net::IpAddr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

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

/// The wall clock in Unix seconds (session tokens carry their issue time).
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The open session a cookie value names: signed, not expired, not logged
/// out here nor (with a shared Redis or database) on another replica, which this
/// replica then remembers too.
async fn open_session(worker: &Worker, token: &str) -> Option<Session> {
    let console = worker.shared.auth.console();
    let now = unix_now();
    let session = console.session(token, now)?;
    if revoked::logged_out_elsewhere(worker, &session.id).await {
        console.revoke(&session.id, session.expires, now);
        return None;
    }
    Some(session)
}

/// Whether a request authenticated by a session cookie may go ahead:
/// reads change nothing; any other method needs the session's CSRF token.
fn csrf_ok(head: &RequestHead, session: &Session) -> Result<(), GatewayError> {
    let reads = matches!(head.method(), "GET" | "HEAD");
    let token_ok = || {
        head.header(CSRF_HEADER)
            .is_some_and(|t| csrf_matches(session, t.trim()))
    };
    if reads || token_ok() {
        Ok(())
    } else {
        Err(GatewayError::CsrfRefused)
    }
}

/// What a session may do now: the admin's rights, or those of the key it
/// logged in with (looked up again, so a blocked or deleted key ends it).
async fn principal(worker: &Worker, session: &Session) -> Result<Principal, GatewayError> {
    match session.role {
        SessionRole::Admin => Ok(Principal::Master),
        SessionRole::Key(hash) => worker.shared.auth.key_by_hash(&hash).await,
    }
}

/// The caller a session cookie authenticates, when the request has one
/// (and no other credential: a key always wins); a call that is not a read
/// needs the session's CSRF token.
pub async fn caller(
    worker: &Worker,
    head: &RequestHead,
) -> Option<Result<Principal, GatewayError>> {
    if crate::auth::credential(head).is_some() {
        return None;
    }
    let id = cookie(head)?;
    let Some(session) = open_session(worker, id).await else {
        return Some(Err(GatewayError::ConsoleSession));
    };
    if let Err(e) = csrf_ok(head, &session) {
        return Some(Err(e));
    }
    Some(principal(worker, &session).await)
}

/// The console role a caller has: `proxy_admin`, or `internal_user` (its
/// own keys and spend); `None` for any other key.
fn role_of(principal: &Principal) -> Option<(&'static str, Option<&str>)> {
    if principal.is_admin() {
        Some(("proxy_admin", None))
    } else {
        principal
            .internal_user()
            .map(|user| ("internal_user", Some(user)))
    }
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
/// never gives): the console's username and password open an admin
/// session; else a virtual key as the password (username ignored) opens a
/// session with that key's rights, when it is an admin's or an
/// `internal_user`'s. Sets the session's cookie.
pub async fn login(
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
    let now = Instant::now();
    let unix = unix_now();
    let login_result = console.login(peer, &login.username, &login.password, now, unix);
    let (session, role, user) = match login_result {
        Ok(session) => (session, "proxy_admin", None),
        Err(LoginRefused::Wrong) if login.password.starts_with("sk-") => {
            let hash = hash_key(&login.password);
            let key = worker.shared.auth.key_by_hash(&hash).await;
            let Some((role, user)) = key.as_ref().ok().and_then(role_of) else {
                return Err(refused(LoginRefused::Wrong));
            };
            if console.admin_only() && role != "proxy_admin" {
                return Err(GatewayError::ConsoleLogin(
                    "Only proxy admins may log in to this console (ui_access_mode: admin_only).",
                ));
            }
            let user = user.map(str::to_string);
            let session = console.open_key(peer, hash, unix);
            (session, role, user)
        }
        Err(other) => return Err(refused(other)),
    };
    let NewSession { id, csrf } = session;
    Ok(Answer {
        body: json!({
            "authenticated": true,
            "role": role,
            "user_id": user,
            "csrf_token": csrf,
            "expires_in": SESSION_TTL.as_secs(),
        }),
        set_cookie: Some(set_cookie(worker, &id, SESSION_TTL.as_secs())),
    })
}

/// The error of a refused login.
fn refused(refused: LoginRefused) -> GatewayError {
    match refused {
        LoginRefused::Wrong => GatewayError::ConsoleLogin("Invalid credentials used to access UI."),
        LoginRefused::Disabled => GatewayError::ConsoleLogin(
            "The console has no password: set UI_PASSWORD or general_settings.master_key.",
        ),
        LoginRefused::Throttled(wait) => GatewayError::ConsoleThrottled {
            retry_after: wait.as_secs().max(1).to_string(),
        },
    }
}

/// `GET /ui/session`: whether the browser is logged in and, when it is,
/// its role and the session's CSRF token (only the console's own pages can
/// read this answer: no other origin is let in). Without a master key
/// every caller is an admin and no login is needed.
pub async fn current(worker: &Worker, head: &RequestHead) -> Result<Answer, GatewayError> {
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
    let session = match cookie(head) {
        Some(id) => open_session(worker, id).await,
        None => None,
    };
    let Some(session) = session else {
        return Ok(answer(json!({"authenticated": false})));
    };
    let principal = principal(worker, &session).await;
    let Some((role, user)) = principal.as_ref().ok().and_then(role_of) else {
        return Ok(answer(json!({"authenticated": false})));
    };
    Ok(answer(json!({
        "authenticated": true,
        "role": role,
        "user_id": user,
        "csrf_token": session.csrf,
        "expires_in": session.expires.saturating_sub(unix_now()),
    })))
}

/// `POST /ui/logout`: ends the session (its CSRF token required, so another
/// site cannot log the console out) on this replica and, with a shared
/// Redis or a database, on every replica; clears the cookie.
pub async fn logout(worker: &Worker, head: &RequestHead) -> Result<Answer, GatewayError> {
    if let Some(id) = cookie(head) {
        let console = worker.shared.auth.console();
        let now = unix_now();
        if let Some(session) = console.session(id, now) {
            let token_ok = head
                .header(CSRF_HEADER)
                .is_some_and(|t| csrf_matches(&session, t.trim()));
            if !token_ok {
                return Err(GatewayError::CsrfRefused);
            }
            console.revoke(&session.id, session.expires, now);
            let ttl = session.expires.saturating_sub(now);
            if !revoked::announce(worker, &session.id, now, ttl).await {
                tracing::warn!("the fleet's store (Redis or Postgres) did not confirm a console logout: other replicas may accept that session until it expires");
            }
        }
    }
    Ok(Answer {
        body: json!({"logged_out": true}),
        set_cookie: Some(set_cookie(worker, "", 0)),
    })
}
