//! The admin console's login (`/ui`): LiteLLM's `UI_USERNAME` (default
//! `admin`) and `UI_PASSWORD` (else the master key), checked in constant
//! time; wrong passwords counted per source address (a bounded map).
//!
//! A session is a signed token, as LiteLLM's UI holds a JWT signed with the
//! master key: `<id>.<issued>.<role>.<mac>`, the MAC an HMAC-SHA256 under a
//! key derived from the master key and the console's password, so every
//! replica of a fleet with the same settings accepts it and nothing is
//! stored per session. It ends at `issued` + [`SESSION_TTL`] (wall clock,
//! shared by the replicas), when the password or master key changes, or at
//! logout: the id is then revoked here until the token would have expired
//! (and, by the caller, fleet-wide through Redis). The CSRF token is an
//! HMAC of the id under the same key, so it needs no storage either.

use super::cache::{hash_key, TokenHash};
use sha2::{Digest, Sha256};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// How long a session lasts after its login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// Most logged-out sessions remembered at once; past it (after forgetting
/// the expired ones), every session issued until then is refused instead
/// (fail closed).
pub const MAX_REVOKED: usize = 100_000;
/// Wrong passwords a source may send per [`FAILURE_WINDOW`].
pub const MAX_FAILURES: u32 = 5;
/// The window wrong passwords are counted in, from the first of them.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(300);
/// Most sources whose wrong passwords are counted at once; past it (after
/// forgetting the expired ones), a new source is refused (fail closed).
pub const MAX_SOURCES: usize = 10_000;
/// Longest token accepted (a key session's is about 170 bytes).
const MAX_TOKEN: usize = 512;

/// What a session may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRole {
    /// Logged in with the console's username and password: the admin API.
    Admin,
    /// Logged in with a virtual key (of an admin or an `internal_user`):
    /// what that key may do, looked up again on every call (by this sha256),
    /// so blocking or deleting the key ends the session's rights.
    Key(TokenHash),
}

/// A logged-in console, read from its token.
#[derive(Debug, Clone)]
pub struct Session {
    /// What it may do.
    pub role: SessionRole,
    /// The token state-changing calls must repeat in `x-csrf-token`.
    pub csrf: String,
    /// Its id (random, 128 bits in hex): what a logout revokes.
    pub id: String,
    /// When it ends, in Unix seconds.
    pub expires: u64,
}

/// A new session's secrets, handed to the browser once.
#[derive(Debug)]
pub struct NewSession {
    /// The cookie's value (the signed token).
    pub id: String,
    /// The CSRF token.
    pub csrf: String,
}

/// Why a login was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum LoginRefused {
    /// Wrong username or password.
    Wrong,
    /// Too many wrong passwords from this source: try again after this long.
    Throttled(Duration),
    /// No password is configured (neither `UI_PASSWORD` nor a master key).
    Disabled,
}

/// Wrong passwords of one source.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    since: Instant,
}

/// The console's credentials, the key sessions are signed with, and the
/// sessions logged out here.
pub struct Console {
    username: TokenHash,
    password: Option<TokenHash>,
    admin_only: bool,
    disabled: bool,
    /// The HMAC key of session tokens.
    signing: [u8; 32],
    /// Logged-out session ids, until their tokens would have expired.
    revoked: papaya::HashMap<String, u64>,
    /// Sessions issued before this Unix second are refused (set when the
    /// revoked map is full).
    not_before: AtomicU64,
    failures: papaya::HashMap<IpAddr, Failures>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("revoked", &self.revoked.len())
            .finish_non_exhaustive()
    }
}

impl Console {
    /// The console of `UI_USERNAME` (`None`: `admin`) and `UI_PASSWORD`
    /// (`None` or empty: the master key; neither: no login). Sessions are
    /// signed under a key derived from both the master key and the password.
    pub fn new(username: Option<&str>, password: Option<&str>, master_key: Option<&str>) -> Self {
        let username = username.filter(|u| !u.is_empty()).unwrap_or("admin");
        let password = password.filter(|p| !p.is_empty()).or(master_key);
        let mut material = b"gateway console session v1\0".to_vec();
        material.extend_from_slice(password.unwrap_or_default().as_bytes());
        let signing = hmac(master_key.unwrap_or_default().as_bytes(), &material);
        Console {
            username: hash_key(username),
            password: password.map(hash_key),
            admin_only: false,
            disabled: false,
            signing,
            revoked: papaya::HashMap::new(),
            not_before: AtomicU64::new(0),
            failures: papaya::HashMap::new(),
        }
    }

    /// Only admins may log in (LiteLLM's `ui_access_mode: admin_only`): a key
    /// login of an `internal_user` is refused.
    pub fn with_admin_only(mut self, admin_only: bool) -> Self {
        self.admin_only = admin_only;
        self
    }

    /// The console is off (LiteLLM's `DISABLE_ADMIN_UI`): `/ui` is a 404.
    pub fn with_disabled(mut self, disabled: bool) -> Self {
        self.disabled = disabled;
        self
    }

    /// Whether only admins may log in.
    pub fn admin_only(&self) -> bool {
        self.admin_only
    }

    /// Whether the console is off.
    pub fn disabled(&self) -> bool {
        self.disabled
    }

    /// Checks a login from `source` at `now`; on success opens a session
    /// issued at `unix` (seconds). Both fields are compared whole, in
    /// constant time, as hashes.
    pub fn login(
        &self,
        source: Option<IpAddr>,
        username: &str,
        password: &str,
        now: Instant,
        unix: u64,
    ) -> Result<NewSession, LoginRefused> {
        if let Some(wait) = source.and_then(|ip| self.throttled(ip, now)) {
            return Err(LoginRefused::Throttled(wait));
        }
        let Some(expected) = &self.password else {
            return Err(LoginRefused::Disabled);
        };
        let user_ok = hash_key(username).ct_eq(&self.username);
        let pass_ok = hash_key(password).ct_eq(expected);
        if !bool::from(user_ok & pass_ok) {
            if let Some(ip) = source {
                self.note_failure(ip, now);
            }
            return Err(LoginRefused::Wrong);
        }
        if let Some(ip) = source {
            self.failures.pin().remove(&ip);
        }
        Ok(self.open(SessionRole::Admin, unix))
    }

    /// Opens a session issued at `unix` for a virtual key (sha256 `key`) a
    /// login was checked against, forgetting `source`'s wrong passwords.
    pub fn open_key(&self, source: Option<IpAddr>, key: TokenHash, unix: u64) -> NewSession {
        if let Some(ip) = source {
            self.failures.pin().remove(&ip);
        }
        self.open(SessionRole::Key(key), unix)
    }

    /// The session a cookie value (token) names, if its signature holds,
    /// it is open at `unix` and it was not logged out here.
    pub fn session(&self, token: &str, unix: u64) -> Option<Session> {
        if token.len() > MAX_TOKEN {
            return None;
        }
        let (body, mac) = token.rsplit_once('.')?;
        let expected = hex::encode(hmac(&self.signing, body.as_bytes()));
        if !bool::from(expected.as_bytes().ct_eq(mac.as_bytes())) {
            return None;
        }
        let mut parts = body.splitn(3, '.');
        let (id, issued, role) = (parts.next()?, parts.next()?, parts.next()?);
        let issued: u64 = issued.parse().ok()?;
        let expires = issued.checked_add(SESSION_TTL.as_secs())?;
        let role = match role {
            "a" => SessionRole::Admin,
            k => {
                let bytes = hex::decode(k.strip_prefix('k')?).ok()?;
                SessionRole::Key(TokenHash::try_from(bytes.as_slice()).ok()?)
            }
        };
        let open = issued <= unix.saturating_add(60) && unix < expires;
        if !open || issued < self.not_before.load(Ordering::Acquire) || self.is_revoked(id) {
            return None;
        }
        Some(Session {
            role,
            csrf: self.csrf_of(id),
            id: id.to_string(),
            expires,
        })
    }

    /// Whether the session `id` was logged out here.
    pub fn is_revoked(&self, id: &str) -> bool {
        self.revoked.pin().contains_key(id)
    }

    /// Refuses the session `id` (whose token expires at `expires`) from now
    /// on. When [`MAX_REVOKED`] are remembered even after forgetting the
    /// expired ones at `unix`, every session issued until now is refused.
    pub fn revoke(&self, id: &str, expires: u64, unix: u64) {
        let revoked = self.revoked.pin();
        if revoked.len() >= MAX_REVOKED {
            revoked.retain(|_, exp| *exp > unix);
            if revoked.len() >= MAX_REVOKED {
                self.not_before
                    .fetch_max(unix.saturating_add(1), Ordering::AcqRel);
                return;
            }
        }
        revoked.insert(id.to_string(), expires);
    }

    /// Session ids remembered as logged out (expired ones not yet swept
    /// included).
    pub fn revoked_sessions(&self) -> usize {
        self.revoked.len()
    }

    fn open(&self, role: SessionRole, unix: u64) -> NewSession {
        let mut id = [0u8; 16];
        getrandom::fill(&mut id).expect("the OS random generator is available");
        let id = hex::encode(id);
        let role = match role {
            SessionRole::Admin => "a".to_string(),
            SessionRole::Key(hash) => format!("k{}", hex::encode(hash)),
        };
        let body = format!("{id}.{unix}.{role}");
        let mac = hex::encode(hmac(&self.signing, body.as_bytes()));
        NewSession {
            csrf: self.csrf_of(&id),
            id: format!("{body}.{mac}"),
        }
    }

    /// The CSRF token of session `id`.
    fn csrf_of(&self, id: &str) -> String {
        hex::encode(hmac(&self.signing, format!("csrf.{id}").as_bytes()))
    }

    /// How long `ip` must wait, when it is over its wrong passwords; a new
    /// source when [`MAX_SOURCES`] are counted is refused for a window.
    fn throttled(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let failures = self.failures.pin();
        match failures.get(&ip) {
            Some(f) if now.duration_since(f.since) >= FAILURE_WINDOW => {
                failures.remove(&ip);
                None
            }
            Some(f) if f.count >= MAX_FAILURES => {
                Some(FAILURE_WINDOW.saturating_sub(now.duration_since(f.since)))
            }
            Some(_) => None,
            None if failures.len() >= MAX_SOURCES => {
                failures.retain(|_, f| now.duration_since(f.since) < FAILURE_WINDOW);
                (failures.len() >= MAX_SOURCES).then_some(FAILURE_WINDOW)
            }
            None => None,
        }
    }

    fn note_failure(&self, ip: IpAddr, now: Instant) {
        self.failures.pin().update_or_insert(
            ip,
            |f| Failures {
                count: f.count.saturating_add(1),
                since: f.since,
            },
            Failures {
                count: 1,
                since: now,
            },
        );
    }
}

/// HMAC-SHA256 of `message` under `key` (RFC 2104).
fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// Whether `given` is the session's CSRF token, compared in constant time.
pub fn csrf_matches(session: &Session, given: &str) -> bool {
    bool::from(hash_key(given).ct_eq(&hash_key(&session.csrf)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    const T0: u64 = 1_800_000_000;

    fn login(c: &Console, user: &str, pw: &str) -> Result<NewSession, LoginRefused> {
        c.login(IP, user, pw, Instant::now(), T0)
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 2 of RFC 4231.
        let mac = hmac(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block.
        let mac = hmac(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First",
        );
        assert_eq!(
            hex::encode(mac),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn the_master_key_is_the_password_unless_ui_password_is_set() {
        let c = Console::new(None, None, Some("sk-master"));
        assert!(login(&c, "admin", "sk-master").is_ok());
        assert_eq!(
            login(&c, "root", "sk-master").unwrap_err(),
            LoginRefused::Wrong
        );
        let c = Console::new(Some("ops"), Some("pw"), Some("sk-master"));
        assert_eq!(
            login(&c, "ops", "sk-master").unwrap_err(),
            LoginRefused::Wrong
        );
        assert!(login(&c, "ops", "pw").is_ok());
        let c = Console::new(None, None, None);
        assert_eq!(login(&c, "admin", "").unwrap_err(), LoginRefused::Disabled);
    }

    #[test]
    fn a_session_lives_until_its_expiry_or_logout() {
        let c = Console::new(None, Some("pw"), Some("sk-master"));
        let s = login(&c, "admin", "pw").unwrap();
        assert_ne!(s.id, s.csrf);
        let held = c.session(&s.id, T0 + 1).unwrap();
        assert_eq!(held.role, SessionRole::Admin);
        assert_eq!(held.expires, T0 + SESSION_TTL.as_secs());
        assert!(csrf_matches(&held, &s.csrf) && !csrf_matches(&held, "x"));
        assert!(c.session("not-a-session", T0).is_none());
        assert!(c.session(&s.id, T0 + SESSION_TTL.as_secs()).is_none());
        assert!(
            c.session(&s.id, T0 - 3600).is_none(),
            "issued in the future"
        );
        c.revoke(&held.id, held.expires, T0);
        assert!(c.session(&s.id, T0 + 1).is_none());
        assert_eq!(c.revoked_sessions(), 1);
        let key = hash_key("sk-user");
        let s = c.open_key(IP, key, T0);
        assert_eq!(c.session(&s.id, T0).unwrap().role, SessionRole::Key(key));
    }

    #[test]
    fn every_replica_with_the_same_settings_accepts_a_session_and_no_other() {
        let a = Console::new(None, None, Some("sk-master"));
        let b = Console::new(None, None, Some("sk-master"));
        let s = login(&a, "admin", "sk-master").unwrap();
        let on_b = b.session(&s.id, T0).expect("another replica accepts it");
        assert!(csrf_matches(&on_b, &s.csrf), "with the same CSRF token");
        for other in [
            Console::new(None, None, Some("sk-other")),
            Console::new(None, Some("pw"), Some("sk-master")),
        ] {
            assert!(other.session(&s.id, T0).is_none());
        }
        // Any change to the token breaks its signature.
        let (body, mac) = s.id.rsplit_once('.').unwrap();
        let later = body.replacen(&format!(".{T0}."), &format!(".{}.", T0 + 40_000), 1);
        assert!(a.session(&format!("{later}.{mac}"), T0 + 50_000).is_none());
        let key_role = format!("{}k{}", &body[..body.len() - 1], "00".repeat(32));
        assert!(a.session(&format!("{key_role}.{mac}"), T0).is_none());
        assert!(a
            .session(&format!("{}.{mac}", "x".repeat(600)), T0)
            .is_none());
    }

    #[test]
    fn a_full_revocation_list_refuses_every_earlier_session() {
        let c = Console::new(None, None, Some("sk-master"));
        let old = login(&c, "admin", "sk-master").unwrap();
        for i in 0..MAX_REVOKED {
            c.revoke(&format!("{i:032x}"), T0 + 100, T0);
        }
        c.revoke("one-more", T0 + 100, T0 + 1);
        assert!(c.session(&old.id, T0 + 2).is_none(), "fail closed");
        let fresh = c.login(IP, "admin", "sk-master", Instant::now(), T0 + 2);
        assert!(c.session(&fresh.unwrap().id, T0 + 2).is_some());
        c.revoke("after-expiry", T0 + 500, T0 + 101);
        assert_eq!(c.revoked_sessions(), 1, "expired entries make room");
    }

    #[test]
    fn wrong_passwords_are_throttled_per_source_for_a_window() {
        let now = Instant::now();
        let c = Console::new(None, Some("pw"), None);
        for _ in 0..MAX_FAILURES {
            assert_eq!(
                c.login(IP, "admin", "bad", now, T0).unwrap_err(),
                LoginRefused::Wrong
            );
        }
        assert_eq!(
            c.login(IP, "admin", "pw", now, T0).unwrap_err(),
            LoginRefused::Throttled(FAILURE_WINDOW),
            "even the right password waits"
        );
        let other = Some(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)));
        assert!(c.login(other, "admin", "pw", now, T0).is_ok());
        assert!(c.login(IP, "admin", "pw", now + FAILURE_WINDOW, T0).is_ok());
    }

    #[test]
    fn counted_sources_are_bounded_and_fail_closed() {
        let now = Instant::now();
        let c = Console::new(None, Some("pw"), None);
        for i in 0..MAX_SOURCES as u32 {
            let ip = Some(IpAddr::V4(std::net::Ipv4Addr::from(i)));
            assert_eq!(
                c.login(ip, "admin", "bad", now, T0).unwrap_err(),
                LoginRefused::Wrong
            );
        }
        let newcomer = Some(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST));
        assert_eq!(
            c.login(newcomer, "admin", "pw", now, T0).unwrap_err(),
            LoginRefused::Throttled(FAILURE_WINDOW),
            "no room to count a new source: refused"
        );
        let counted = Some(IpAddr::V4(std::net::Ipv4Addr::from(7)));
        assert!(
            c.login(counted, "admin", "pw", now, T0).is_ok(),
            "a counted source may log in"
        );
        assert!(
            c.login(newcomer, "admin", "pw", now + FAILURE_WINDOW, T0)
                .is_ok(),
            "expired counts make room"
        );
    }
}
