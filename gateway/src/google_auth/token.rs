//! Access tokens of one service account: cached until shortly before they
//! expire and refreshed by a loop on the control plane, never by a request.
//!
//! The request path reads the cached token (one atomic load). Only when
//! there is none yet (the first request after start, or after failures)
//! does it start the refresher, if not running, and wait for its next
//! outcome, up to a deadline: concurrent requests share that one fetch. A
//! failed fetch is answered at once to every waiting request, and to later
//! ones while no token is valid, as a 401 (the token endpoint refused the
//! credentials) or a 503 (it could not be reached), never as a hang.

use super::account::Credentials;
use crate::control::ControlPlane;
use crate::error::{ErrorClass, GatewayError};
use crate::upstream::once as http_once;
use crate::upstream::UpstreamBase;
use arc_swap::ArcSwapOption;
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// Longest a token exchange may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(15);
/// Refresh this long before expiry (at most half the token's life).
const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// A token is not used when it expires within this (at most a quarter of
/// its life).
const EXPIRY_SLACK: Duration = Duration::from_secs(30);
/// First and largest pause after a failed fetch.
const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Longest token lifetime accepted from an answer (a day).
const MAX_LIFETIME_SECS: u64 = 86_400;
/// Longest access token accepted (Google's are about 1 KiB).
const MAX_TOKEN_BYTES: usize = 8 << 10;

/// A cached access token.
pub struct AccessToken {
    /// `Bearer <token>`, the `Authorization` value.
    pub header: String,
    /// Not used from this instant on.
    usable_until: Instant,
    /// The refresher fetches the next one from this instant on.
    refresh_at: Instant,
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessToken").finish_non_exhaustive()
    }
}

/// Why no token could be had.
#[derive(Debug, Clone)]
pub struct TokenError {
    /// 401 when the token endpoint refused the credentials, else 503.
    status: u16,
    message: Arc<str>,
}

impl TokenError {
    fn unavailable(message: impl Into<String>) -> Self {
        TokenError {
            status: 503,
            message: message.into().into(),
        }
    }

    /// The error a request gets.
    fn to_gateway(&self) -> GatewayError {
        GatewayError::Upstream {
            status: self.status,
            message: self.message.to_string(),
            error_type: Some(
                if self.status == 401 {
                    "authentication_error"
                } else {
                    "service_unavailable_error"
                }
                .into(),
            ),
            provider_code: None,
            upstream_param: None,
            retry_after: None,
            class: if self.status == 401 {
                ErrorClass::Authentication
            } else {
                ErrorClass::InternalServer
            },
        }
    }
}

/// What waiting requests watch: the refresher's last outcome.
#[derive(Debug, Clone, Default)]
struct Status {
    /// Set while the last fetch failed.
    error: Option<TokenError>,
}

/// The tokens of one service account, shared by every deployment (and
/// every config reload) using the same key.
pub struct TokenSource {
    account: Credentials,
    token_base: UpstreamBase,
    token_path: String,
    fingerprint: [u8; 32],
    token: ArcSwapOption<AccessToken>,
    running: AtomicBool,
    status: watch::Sender<Status>,
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSource")
            .field("account", &self.account.identity())
            .finish_non_exhaustive()
    }
}

impl PartialEq for TokenSource {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
    }
}

/// Sources by key, so that deployments and reloads share tokens; only
/// touched when a config is read.
static SOURCES: Mutex<Vec<Weak<TokenSource>>> = Mutex::new(Vec::new());

impl TokenSource {
    /// The source for a service-account key file's JSON (shared with every
    /// other user of the same key).
    pub fn for_key_file(json: &str) -> Result<Arc<TokenSource>, String> {
        let fingerprint: [u8; 32] = Sha256::digest(json.as_bytes()).into();
        let mut sources = SOURCES.lock().unwrap_or_else(|e| e.into_inner());
        sources.retain(|s| s.strong_count() > 0);
        if let Some(found) = sources
            .iter()
            .filter_map(Weak::upgrade)
            .find(|s| s.fingerprint == fingerprint)
        {
            return Ok(found);
        }
        let account = Credentials::from_json(json)?;
        let token_base = crate::upstream::parse_base(account.token_uri())
            .map_err(|e| format!("token_uri \"{}\": {e}", account.token_uri()))?;
        let token_path = if token_base.path.is_empty() {
            "/".to_string()
        } else {
            token_base.path.clone()
        };
        let source = Arc::new(TokenSource {
            account,
            token_base,
            token_path,
            fingerprint,
            token: ArcSwapOption::empty(),
            running: AtomicBool::new(false),
            status: watch::Sender::new(Status::default()),
        });
        sources.push(Arc::downgrade(&source));
        Ok(source)
    }

    /// The account's `project_id`.
    pub fn project_id(&self) -> Option<&str> {
        self.account.project_id()
    }

    /// The cached token, when still usable.
    pub fn current(&self) -> Option<Arc<AccessToken>> {
        self.token
            .load_full()
            .filter(|t| Instant::now() < t.usable_until)
    }

    /// A usable token: the cached one, else the refresher's next, waited
    /// for up to `wait`. Starts the refresher on the control plane when it
    /// does not run.
    pub async fn ready(
        self: &Arc<Self>,
        control: &ControlPlane,
        tls: &Arc<rustls::ClientConfig>,
        wait: Duration,
    ) -> Result<Arc<AccessToken>, GatewayError> {
        if let Some(token) = self.current() {
            return Ok(token);
        }
        let mut outcomes = self.status.subscribe();
        self.start(control, tls)?;
        let deadline = Instant::now() + wait;
        loop {
            if let Some(settled) = self.settled(&mut outcomes) {
                return settled;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match monoio::time::timeout(left, outcomes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return Err(self.timed_out(wait)),
            }
        }
    }

    /// [`TokenSource::ready`] for the control plane's own jobs (health
    /// probes): the refresher is started on this runtime, the wait is on
    /// its timer.
    pub async fn ready_on_control(
        self: &Arc<Self>,
        tls: &Arc<rustls::ClientConfig>,
        wait: Duration,
    ) -> Result<Arc<AccessToken>, GatewayError> {
        if let Some(token) = self.current() {
            return Ok(token);
        }
        let mut outcomes = self.status.subscribe();
        if !self.running.swap(true, Ordering::AcqRel) {
            tokio::spawn(refresh_loop(Arc::downgrade(self), tls.clone()));
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(settled) = self.settled(&mut outcomes) {
                return settled;
            }
            match tokio::time::timeout_at(deadline, outcomes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return Err(self.timed_out(wait)),
            }
        }
    }

    /// A usable token, or the last fetch's failure; `None` while waiting.
    fn settled(
        &self,
        outcomes: &mut watch::Receiver<Status>,
    ) -> Option<Result<Arc<AccessToken>, GatewayError>> {
        if let Some(token) = self.current() {
            return Some(Ok(token));
        }
        let error = outcomes.borrow_and_update().error.clone();
        error.map(|e| Err(e.to_gateway()))
    }

    fn timed_out(&self, wait: Duration) -> GatewayError {
        TokenError::unavailable(format!(
            "no Google access token for {} within {}s",
            self.account.identity(),
            wait.as_secs()
        ))
        .to_gateway()
    }

    /// Starts the refresh loop on the control plane unless it runs.
    fn start(
        self: &Arc<Self>,
        control: &ControlPlane,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Result<(), GatewayError> {
        if self.running.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let source = Arc::downgrade(self);
        let tls = tls.clone();
        control
            .spawn(move |_| refresh_loop(source, tls))
            .map_err(|_| {
                self.running.store(false, Ordering::Release);
                GatewayError::Unavailable("the control plane is busy; no access token yet")
            })
    }

    /// One token request: a fresh assertion, or the refresh token.
    async fn fetch(&self, tls: &Arc<rustls::ClientConfig>) -> Result<AccessToken, TokenError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let body = self
            .account
            .token_request(now)
            .map_err(TokenError::unavailable)?;
        let mut request = http_once::head(
            &self.token_base,
            "POST",
            &self.token_path,
            body.len(),
            [
                ("content-type", "application/x-www-form-urlencoded"),
                ("accept", "application/json"),
            ]
            .into_iter(),
        );
        request.extend_from_slice(body.as_bytes());
        let started = Instant::now();
        let answer = http_once::exchange(&self.token_base, &request, tls)
            .await
            .map_err(|e| {
                TokenError::unavailable(format!(
                    "cannot reach the token endpoint {}: {e}",
                    self.token_base.url
                ))
            })?;
        grant(
            self.account.identity(),
            answer.status,
            &answer.body,
            started,
        )
    }
}

/// The token in a token endpoint's answer, or why there is none.
fn grant(
    account: &str,
    status: u16,
    body: &[u8],
    started: Instant,
) -> Result<AccessToken, TokenError> {
    let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    if status != 200 {
        let field = |name: &str| {
            json.as_ref()
                .and_then(|v| v[name].as_str())
                .map(|s| s.chars().take(300).collect::<String>())
        };
        let reason = match (field("error"), field("error_description")) {
            (Some(e), Some(d)) => format!("{e}: {d}"),
            (Some(e), None) => e,
            _ => format!("status {status}"),
        };
        let message =
            format!("Google's token endpoint refused the credentials of {account}: {reason}");
        return Err(match status {
            400 | 401 | 403 => TokenError {
                status: 401,
                message: message.into(),
            },
            _ => TokenError::unavailable(message),
        });
    }
    let bad = |what: &str| {
        TokenError::unavailable(format!(
            "the token endpoint's answer for {account} is unusable: {what}"
        ))
    };
    let json = json.ok_or_else(|| bad("not JSON"))?;
    let token = json["access_token"]
        .as_str()
        .filter(|t| !t.is_empty() && t.len() <= MAX_TOKEN_BYTES)
        .filter(|t| t.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| bad("no usable access_token"))?;
    if let Some(kind) = json["token_type"].as_str() {
        if !kind.eq_ignore_ascii_case("bearer") {
            return Err(bad("token_type is not Bearer"));
        }
    }
    let lifetime = json["expires_in"]
        .as_u64()
        .filter(|s| (1..=MAX_LIFETIME_SECS).contains(s))
        .map(Duration::from_secs)
        .ok_or_else(|| bad("expires_in is not 1 to 86400 seconds"))?;
    let expires = started + lifetime;
    Ok(AccessToken {
        header: format!("Bearer {token}"),
        usable_until: expires - EXPIRY_SLACK.min(lifetime / 4),
        refresh_at: expires - REFRESH_MARGIN.min(lifetime / 2),
    })
}

/// Marks the refresher stopped when its loop ends, a panic included, so
/// the next request starts another.
struct Running(Weak<TokenSource>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(source) = self.0.upgrade() {
            source.running.store(false, Ordering::Release);
        }
    }
}

/// Keeps `source`'s token fresh while any deployment uses it: fetches,
/// sleeps until shortly before expiry, fetches again; after a failure,
/// retries with a growing pause.
async fn refresh_loop(source: Weak<TokenSource>, tls: Arc<rustls::ClientConfig>) {
    let _running = Running(source.clone());
    let mut backoff = MIN_BACKOFF;
    loop {
        let Some(src) = source.upgrade() else { return };
        let outcome = tokio::time::timeout(FETCH_TIMEOUT, src.fetch(&tls))
            .await
            .unwrap_or_else(|_| {
                Err(TokenError::unavailable(format!(
                    "the token endpoint {} did not answer within {}s",
                    src.token_base.url,
                    FETCH_TIMEOUT.as_secs()
                )))
            });
        let pause = match outcome {
            Ok(token) => {
                let pause = token.refresh_at.saturating_duration_since(Instant::now());
                src.token.store(Some(Arc::new(token)));
                src.status.send_replace(Status { error: None });
                tracing::debug!(account = %src.account.identity(), "Google access token refreshed");
                backoff = MIN_BACKOFF;
                pause
            }
            Err(err) => {
                tracing::warn!(account = %src.account.identity(), error = %err.message, "could not get a Google access token; retrying");
                src.status.send_replace(Status { error: Some(err) });
                let pause = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                pause
            }
        };
        drop(src);
        tokio::time::sleep(pause.max(Duration::from_millis(100))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_read_and_checked() {
        let now = Instant::now();
        let t = grant(
            "a@b",
            200,
            br#"{"access_token":"ya29.x","expires_in":3599,"token_type":"Bearer"}"#,
            now,
        )
        .unwrap();
        assert_eq!(t.header, "Bearer ya29.x");
        assert_eq!(t.refresh_at, now + Duration::from_secs(3299));
        assert_eq!(t.usable_until, now + Duration::from_secs(3569));
        let short = grant("a@b", 200, br#"{"access_token":"t","expires_in":2}"#, now).unwrap();
        assert_eq!(short.refresh_at, now + Duration::from_secs(1));
        for bad in [
            &br#"{"access_token":"t","expires_in":0}"#[..],
            br#"{"access_token":"t","expires_in":100000}"#,
            br#"{"access_token":"t","expires_in":-5}"#,
            br#"{"access_token":"a\r\nb","expires_in":60}"#,
            br#"{"access_token":"t","expires_in":60,"token_type":"mac"}"#,
            b"<html>",
        ] {
            assert_eq!(grant("a@b", 200, bad, now).unwrap_err().status, 503);
        }
        let refused = grant(
            "a@b",
            400,
            br#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
            now,
        )
        .unwrap_err();
        assert_eq!(refused.status, 401);
        assert!(refused.message.contains("a@b"));
        assert!(refused.message.contains("Invalid JWT Signature."));
        let e = refused.to_gateway();
        assert_eq!((e.status(), e.class()), (401, ErrorClass::Authentication));
        assert_eq!(grant("a@b", 502, b"", now).unwrap_err().status, 503);
    }

    #[test]
    fn one_source_per_key() {
        let key = super::super::account::tests::TEST_KEY_FILE;
        let a = TokenSource::for_key_file(key).unwrap();
        let b = TokenSource::for_key_file(key).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.project_id(), Some("mock-project"));
        assert!(a.current().is_none());
        assert!(TokenSource::for_key_file("{}").is_err());
    }
}
