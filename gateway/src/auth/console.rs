//! The admin console's login (`/ui`): LiteLLM's `UI_USERNAME` (default
//! `admin`) and `UI_PASSWORD` (else the master key), checked in constant
//! time; sessions held in this process's memory, keyed by the sha256 of a
//! random id the browser keeps in an HttpOnly cookie; wrong passwords
//! counted per source address. Every map is bounded.

use super::cache::{hash_key, TokenHash};
use std::net::IpAddr;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// How long a session lasts after its login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// Most sessions held at once; past it, a login is refused until one expires.
pub const MAX_SESSIONS: usize = 10_000;
/// Wrong passwords a source may send per [`FAILURE_WINDOW`].
pub const MAX_FAILURES: u32 = 5;
/// The window wrong passwords are counted in, from the first of them.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(300);
/// Most sources whose wrong passwords are counted at once; past it (after
/// forgetting the expired ones), a new source is refused (fail closed).
pub const MAX_SOURCES: usize = 10_000;

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

/// A logged-in console.
#[derive(Debug, Clone)]
pub struct Session {
    /// What it may do.
    pub role: SessionRole,
    /// The token state-changing calls must repeat in `x-csrf-token`.
    pub csrf: String,
    /// When it ends.
    pub expires: Instant,
}

/// A new session's secrets, handed to the browser once.
#[derive(Debug)]
pub struct NewSession {
    /// The cookie's value.
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
    /// [`MAX_SESSIONS`] sessions are open.
    Full,
}

/// Wrong passwords of one source.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    since: Instant,
}

/// The console's credentials and sessions.
pub struct Console {
    username: TokenHash,
    password: Option<TokenHash>,
    admin_only: bool,
    disabled: bool,
    sessions: papaya::HashMap<TokenHash, Session>,
    failures: papaya::HashMap<IpAddr, Failures>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("sessions", &self.sessions.len())
            .finish_non_exhaustive()
    }
}

impl Console {
    /// The console of `UI_USERNAME` (`None`: `admin`) and `UI_PASSWORD`
    /// (`None` or empty: the master key; neither: no login).
    pub fn new(username: Option<&str>, password: Option<&str>, master_key: Option<&str>) -> Self {
        let username = username.filter(|u| !u.is_empty()).unwrap_or("admin");
        let password = password.filter(|p| !p.is_empty()).or(master_key);
        Console {
            username: hash_key(username),
            password: password.map(hash_key),
            admin_only: false,
            disabled: false,
            sessions: papaya::HashMap::new(),
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

    /// Checks a login from `source` at `now`; on success opens a session.
    /// Both fields are compared whole, in constant time, as hashes.
    pub fn login(
        &self,
        source: Option<IpAddr>,
        username: &str,
        password: &str,
        now: Instant,
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
        self.open(SessionRole::Admin, now)
    }

    /// Opens a session for a virtual key (sha256 `key`) a login was checked
    /// against, forgetting `source`'s wrong passwords.
    pub fn open_key(
        &self,
        source: Option<IpAddr>,
        key: TokenHash,
        now: Instant,
    ) -> Result<NewSession, LoginRefused> {
        if let Some(ip) = source {
            self.failures.pin().remove(&ip);
        }
        self.open(SessionRole::Key(key), now)
    }

    /// The session a cookie value names, if it is open at `now`.
    pub fn session(&self, id: &str, now: Instant) -> Option<Session> {
        let key = hash_key(id);
        let sessions = self.sessions.pin();
        let session = sessions.get(&key)?;
        if session.expires <= now {
            sessions.remove(&key);
            return None;
        }
        Some(session.clone())
    }

    /// Ends the session a cookie value names; whether there was one.
    pub fn logout(&self, id: &str) -> bool {
        self.sessions.pin().remove(&hash_key(id)).is_some()
    }

    /// Sessions open (expired ones not yet swept included).
    pub fn open_sessions(&self) -> usize {
        self.sessions.len()
    }

    fn open(&self, role: SessionRole, now: Instant) -> Result<NewSession, LoginRefused> {
        let sessions = self.sessions.pin();
        if sessions.len() >= MAX_SESSIONS {
            sessions.retain(|_, s| s.expires > now);
            if sessions.len() >= MAX_SESSIONS {
                return Err(LoginRefused::Full);
            }
        }
        let id = random_hex();
        let csrf = random_hex();
        sessions.insert(
            hash_key(&id),
            Session {
                role,
                csrf: csrf.clone(),
                expires: now + SESSION_TTL,
            },
        );
        Ok(NewSession { id, csrf })
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

/// 32 random bytes in hex.
fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random generator is available");
    hex::encode(bytes)
}

/// Whether `given` is the session's CSRF token, compared in constant time.
pub fn csrf_matches(session: &Session, given: &str) -> bool {
    bool::from(hash_key(given).ct_eq(&hash_key(&session.csrf)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));

    #[test]
    fn the_master_key_is_the_password_unless_ui_password_is_set() {
        let now = Instant::now();
        let c = Console::new(None, None, Some("sk-master"));
        assert!(c.login(IP, "admin", "sk-master", now).is_ok());
        assert_eq!(
            c.login(IP, "root", "sk-master", now).unwrap_err(),
            LoginRefused::Wrong
        );
        let c = Console::new(Some("ops"), Some("pw"), Some("sk-master"));
        assert_eq!(
            c.login(IP, "ops", "sk-master", now).unwrap_err(),
            LoginRefused::Wrong
        );
        assert!(c.login(IP, "ops", "pw", now).is_ok());
        let c = Console::new(None, None, None);
        assert_eq!(
            c.login(IP, "admin", "", now).unwrap_err(),
            LoginRefused::Disabled
        );
    }

    #[test]
    fn a_session_lives_until_its_expiry_or_logout() {
        let now = Instant::now();
        let c = Console::new(None, Some("pw"), None);
        let s = c.login(IP, "admin", "pw", now).unwrap();
        assert_ne!(s.id, s.csrf);
        let held = c.session(&s.id, now).unwrap();
        assert_eq!(held.role, SessionRole::Admin);
        assert!(csrf_matches(&held, &s.csrf) && !csrf_matches(&held, "x"));
        assert!(c.session("not-a-session", now).is_none());
        assert!(c.session(&s.id, now + SESSION_TTL).is_none());
        assert_eq!(c.open_sessions(), 0, "an expired session is dropped");
        let s = c.login(IP, "admin", "pw", now).unwrap();
        assert!(c.logout(&s.id) && !c.logout(&s.id));
        assert!(c.session(&s.id, now).is_none());
        let key = hash_key("sk-user");
        let s = c.open_key(IP, key, now).unwrap();
        assert_eq!(c.session(&s.id, now).unwrap().role, SessionRole::Key(key));
    }

    #[test]
    fn wrong_passwords_are_throttled_per_source_for_a_window() {
        let now = Instant::now();
        let c = Console::new(None, Some("pw"), None);
        for _ in 0..MAX_FAILURES {
            assert_eq!(
                c.login(IP, "admin", "bad", now).unwrap_err(),
                LoginRefused::Wrong
            );
        }
        assert_eq!(
            c.login(IP, "admin", "pw", now).unwrap_err(),
            LoginRefused::Throttled(FAILURE_WINDOW),
            "even the right password waits"
        );
        let other = Some(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)));
        assert!(c.login(other, "admin", "pw", now).is_ok());
        assert!(c.login(IP, "admin", "pw", now + FAILURE_WINDOW).is_ok());
    }

    #[test]
    fn counted_sources_are_bounded_and_fail_closed() {
        let now = Instant::now();
        let c = Console::new(None, Some("pw"), None);
        for i in 0..MAX_SOURCES as u32 {
            let ip = Some(IpAddr::V4(std::net::Ipv4Addr::from(i)));
            assert_eq!(
                c.login(ip, "admin", "bad", now).unwrap_err(),
                LoginRefused::Wrong
            );
        }
        let newcomer = Some(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST));
        assert_eq!(
            c.login(newcomer, "admin", "pw", now).unwrap_err(),
            LoginRefused::Throttled(FAILURE_WINDOW),
            "no room to count a new source: refused"
        );
        let counted = Some(IpAddr::V4(std::net::Ipv4Addr::from(7)));
        assert!(
            c.login(counted, "admin", "pw", now).is_ok(),
            "a counted source may log in"
        );
        assert!(
            c.login(newcomer, "admin", "pw", now + FAILURE_WINDOW)
                .is_ok(),
            "expired counts make room"
        );
    }

    #[test]
    fn sessions_are_bounded() {
        let now = Instant::now();
        let c = Console::new(None, Some("pw"), None);
        for _ in 0..MAX_SESSIONS {
            c.login(None, "admin", "pw", now).unwrap();
        }
        assert_eq!(
            c.login(None, "admin", "pw", now).unwrap_err(),
            LoginRefused::Full
        );
        assert!(
            c.login(None, "admin", "pw", now + SESSION_TTL).is_ok(),
            "expired sessions make room"
        );
        assert_eq!(c.open_sessions(), 1);
    }
}
