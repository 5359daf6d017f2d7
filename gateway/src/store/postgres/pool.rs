//! A small fixed pool of Postgres connections for the control plane: a few
//! sessions tried round-robin, each opened on first use on the runtime that
//! uses it, replaced after it fails, with a short fail-fast window while the
//! database is unreachable so callers (the spend writer) spool at once rather
//! than queue behind connection attempts.
//!
//! TLS: as `sslmode` in the URL asks (rustls; see [`super::tls`]).

use super::super::StoreError;
use super::tls::{connector, SslMode};
use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, MutexGuard};
use tokio_postgres::{Client, Config, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

/// Connections in the pool. The control plane is one thread; a handful of
/// sessions lets a slow spend batch and a management call overlap.
pub(super) const POOL_SIZE: usize = 4;
/// Longest any one database operation may take before its session is
/// dropped and the caller told the database is unavailable.
const OP_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest a connection attempt may take when the URL does not say.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// After a failed connection attempt or a lost session, calls fail at once
/// for this long (the spend writer spools, management calls answer 503)
/// rather than queue behind connection attempts.
const FAIL_FAST: Duration = Duration::from_secs(1);
/// Longest a call waits for a session when every one is busy (a frozen
/// database holds each for up to [`OP_TIMEOUT`]).
const CHECKOUT_WAIT: Duration = Duration::from_secs(2);
/// Query parameters Prisma (and so LiteLLM's `DATABASE_URL`) accepts that
/// tokio-postgres does not; they tune Prisma's own pool and are dropped.
const PRISMA_ONLY_PARAMS: &[&str] = &[
    "connection_limit",
    "pool_timeout",
    "socket_timeout",
    "pgbouncer",
    "statement_cache_size",
    "schema",
    "sslaccept",
    "sslidentity",
    "sslpassword",
    "sslcert",
];

/// Backend process ids of this process's own pool sessions. The change
/// listener skips notifications they sent: this replica already refreshed
/// its caches for those changes when it published them.
#[derive(Debug, Default)]
pub struct SessionIds(StdMutex<HashSet<i32>>);

impl SessionIds {
    /// Whether `pid` is one of this process's pool sessions.
    pub fn contains(&self, pid: i32) -> bool {
        self.lock().contains(&pid)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<i32>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One open connection.
pub(super) struct Session {
    client: Client,
    /// Its backend process id, registered in `sessions` while it lives.
    pid: i32,
    sessions: Arc<SessionIds>,
}

impl std::ops::Deref for Session {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Session {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.sessions.lock().remove(&self.pid);
    }
}

/// Where and how to connect: the driver's settings and the TLS connector
/// `sslmode` asks for.
#[derive(Clone)]
pub struct PgTarget {
    /// The driver's settings (host, user, timeouts, application name...).
    pub config: Config,
    tls: MakeRustlsConnect,
}

/// A connection's I/O half, to be driven by a task.
pub type PgConnection = tokio_postgres::Connection<
    Socket,
    <MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<Socket>>::Stream,
>;

impl PgTarget {
    /// Opens a connection (TLS as the URL's `sslmode` asks).
    pub async fn connect(&self) -> Result<(Client, PgConnection), tokio_postgres::Error> {
        self.config.connect(self.tls.clone()).await
    }
}

/// The pool.
pub(super) struct Pool {
    config: PgTarget,
    /// One session each, `None` until first used or after a failure.
    slots: Vec<Mutex<Option<Session>>>,
    /// Round-robin cursor over `slots`.
    next: AtomicUsize,
    sessions: Arc<SessionIds>,
    /// Set when a connection attempt failed: calls fail fast until then.
    down_until: StdMutex<Option<Instant>>,
}

/// A session checked out of the pool; back in when dropped. A session
/// dropped before [`Conn::settle`] (its caller gave up mid-operation) is
/// closed rather than reused, so no one inherits a half-done exchange.
pub(super) struct Conn<'a> {
    pool: &'a Pool,
    slot: MutexGuard<'a, Option<Session>>,
    settled: bool,
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if !self.settled {
            *self.slot = None;
        }
    }
}

impl Pool {
    /// A pool for `config`; connects lazily.
    pub fn new(config: PgTarget) -> Pool {
        Pool {
            config,
            slots: (0..POOL_SIZE).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            sessions: Arc::default(),
            down_until: StdMutex::new(None),
        }
    }

    /// The backend ids of the pool's sessions.
    pub fn sessions(&self) -> Arc<SessionIds> {
        self.sessions.clone()
    }

    /// A free session (the next busy one when all are busy), connected.
    pub async fn get(&self) -> Result<Conn<'_>, StoreError> {
        if self.recently_down() {
            return Err(StoreError::Unavailable(
                "database unavailable (retrying shortly)".into(),
            ));
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let n = self.slots.len();
        let free = (0..n).find_map(|i| self.slots[(start + i) % n].try_lock().ok());
        let mut slot = match free {
            Some(slot) => slot,
            None => tokio::time::timeout(CHECKOUT_WAIT, self.slots[start % n].lock())
                .await
                .map_err(|_| {
                    StoreError::Unavailable(format!(
                        "every database session stayed busy for {CHECKOUT_WAIT:?}"
                    ))
                })?,
        };
        if slot.as_ref().is_none_or(|s| s.client.is_closed()) {
            *slot = None;
            *slot = Some(self.open().await?);
        }
        Ok(Conn {
            pool: self,
            slot,
            settled: false,
        })
    }

    async fn open(&self) -> Result<Session, StoreError> {
        if self.recently_down() {
            return Err(StoreError::Unavailable(
                "database unreachable (retrying shortly)".into(),
            ));
        }
        match connect(&self.config).await {
            Ok((client, pid)) => {
                self.sessions.lock().insert(pid);
                Ok(Session {
                    client,
                    pid,
                    sessions: self.sessions.clone(),
                })
            }
            Err(e) => {
                self.mark_down();
                Err(StoreError::Unavailable(describe(&e)))
            }
        }
    }

    /// Calls fail at once for [`FAIL_FAST`]: the database just failed.
    fn mark_down(&self) {
        *self.down_until.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Instant::now() + FAIL_FAST);
    }

    fn recently_down(&self) -> bool {
        let down = self.down_until.lock().unwrap_or_else(|p| p.into_inner());
        down.is_some_and(|until| Instant::now() < until)
    }
}

impl Conn<'_> {
    /// The session.
    pub fn session(&mut self) -> &mut Session {
        self.slot
            .as_mut()
            .expect("a checked-out slot holds a session")
    }

    /// Passes `result` on, dropping the session when it says the database is
    /// unavailable (other than a lost conflict) so the next call reconnects.
    pub fn settle<T>(&mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        self.settled = true;
        if let Err(e @ StoreError::Unavailable(_)) = &result {
            if is_retryable_conflict(e) {
                return result;
            }
            *self.slot = None;
            self.pool.mark_down();
        }
        result
    }
}

/// Opens one connection, driven by a task on the current runtime; returns
/// the client and its backend process id.
pub(super) async fn connect(config: &PgTarget) -> Result<(Client, i32), tokio_postgres::Error> {
    let (client, connection) = config.connect().await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %describe(&e), "Postgres connection closed");
        }
    });
    client.batch_execute("SET TIME ZONE 'UTC'").await?;
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await?
        .try_get(0)?;
    Ok((client, pid))
}

/// Runs `op` with the pool's deadline, classifying its failure.
pub(super) async fn timed<T>(
    op: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(OP_TIMEOUT, op).await {
        Ok(result) => result.map_err(|e| classify(&e)),
        Err(_) => Err(StoreError::Unavailable(format!(
            "no answer within {OP_TIMEOUT:?}"
        ))),
    }
}

/// Maps a driver error: lost or refused connections, server shutdown,
/// resource exhaustion, deadlocks and serialization failures are
/// `Unavailable` (worth retrying; the spend writer spools); the rest `Query`.
pub(super) fn classify(e: &tokio_postgres::Error) -> StoreError {
    let retryable = match e.code() {
        Some(state) => {
            let code = state.code();
            ["08", "53", "57P", "40001", "40P01"]
                .iter()
                .any(|p| code.starts_with(p))
        }
        None => {
            e.is_closed() || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
        }
    };
    let text = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => describe(e),
    };
    if retryable {
        StoreError::Unavailable(text)
    } else {
        StoreError::Query(text)
    }
}

/// An error with its causes (`error connecting to server: Connection
/// refused (os error 111)`).
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}

/// Whether the statement failed for lack of serializability or a deadlock:
/// rerunning the whole transaction succeeds.
pub(super) fn is_retryable_conflict(e: &StoreError) -> bool {
    matches!(e, StoreError::Unavailable(m) if m.starts_with("40001") || m.starts_with("40P01"))
}

/// Parses a `DATABASE_URL` as LiteLLM accepts it: Prisma-only query
/// parameters are dropped (`schema` becomes the search path), `sslmode`
/// (libpq's values, `verify-ca` and `verify-full` included) and
/// `sslrootcert` choose the TLS connector, a connect timeout and an
/// application name are set when absent.
pub fn pg_target(url: &str) -> Result<PgTarget, StoreError> {
    let (cleaned, taken) = strip_params(url);
    let invalid = |e: &dyn std::fmt::Display| {
        StoreError::Query(format!("invalid database URL {}: {e}", redact_url(url)))
    };
    let mut config: Config = cleaned.parse().map_err(|e| invalid(&e))?;
    let mode = match taken.sslmode.as_deref() {
        Some(m) => SslMode::parse(m).map_err(|e| invalid(&e))?,
        None => SslMode::Prefer,
    };
    config.ssl_mode(mode.driver());
    let tls = connector(mode, taken.sslrootcert.as_deref())?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("gateway");
    }
    if let Some(schema) = taken.schema.filter(|s| s != "public") {
        let quoted = schema.replace('"', "\"\"");
        config.options(format!("-c search_path=\"{quoted}\",public"));
    }
    Ok(PgTarget { config, tls })
}

/// Parameters read from the URL rather than passed to the driver.
#[derive(Debug, Default, PartialEq)]
struct Taken {
    schema: Option<String>,
    sslmode: Option<String>,
    sslrootcert: Option<String>,
}

/// Removes the parameters tokio-postgres would reject or that the gateway
/// reads itself, from a URL's query or a `key=value` string; returns what
/// is left and what was taken.
fn strip_params(url: &str) -> (String, Taken) {
    let mut taken = Taken::default();
    let mut keep = |pair: &str, decode: bool| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = if decode {
            percent_encoding::percent_decode_str(value)
                .decode_utf8_lossy()
                .into_owned()
        } else {
            value.to_string()
        };
        match key {
            "schema" => taken.schema = Some(value),
            "sslmode" => taken.sslmode = Some(value),
            "sslrootcert" => taken.sslrootcert = Some(value),
            _ => return !key.is_empty() && !PRISMA_ONLY_PARAMS.contains(&key),
        }
        false
    };
    if !url.contains("://") {
        let kept: Vec<&str> = url
            .split_whitespace()
            .filter(|pair| keep(pair, false))
            .collect();
        return (kept.join(" "), taken);
    }
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), taken);
    };
    let kept: Vec<&str> = query.split('&').filter(|pair| keep(pair, true)).collect();
    if kept.is_empty() {
        (base.to_string(), taken)
    } else {
        (format!("{base}?{}", kept.join("&")), taken)
    }
}

/// The URL without its password, for logs and errors:
/// `postgres://user:secret@host/db` → `postgres://user@host/db`; a
/// `password=` pair of a key/value string is masked.
pub fn redact_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        if let Some((userinfo, host)) = authority.rsplit_once('@') {
            let user = userinfo.split(':').next().unwrap_or_default();
            return format!("{scheme}://{user}@{host}{tail}");
        }
        return url.to_string();
    }
    url.split_whitespace()
        .map(|pair| {
            if pair.starts_with("password=") {
                "password=***"
            } else {
                pair
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db?x=1"),
            "postgres://u@h:5432/db?x=1"
        );
        assert_eq!(redact_url("postgresql://u@h/db"), "postgresql://u@h/db");
        assert_eq!(redact_url("postgres://h/db"), "postgres://h/db");
        assert_eq!(
            redact_url("host=h password=secret user=u"),
            "host=h password=*** user=u"
        );
    }

    #[test]
    fn drops_prisma_parameters() {
        let (url, taken) = strip_params(
            "postgres://u@h/db?connection_limit=5&sslmode=disable&schema=lite&application_name=x",
        );
        assert_eq!(url, "postgres://u@h/db?application_name=x");
        assert_eq!(taken.schema.as_deref(), Some("lite"));
        assert_eq!(taken.sslmode.as_deref(), Some("disable"));
        let target = pg_target("postgres://u@h/db?pool_timeout=10&schema=public").unwrap();
        assert_eq!(target.config.get_dbname(), Some("db"));
        assert_eq!(target.config.get_options(), None);
    }

    #[test]
    fn reads_sslmode_and_sslrootcert() {
        let (url, taken) =
            strip_params("postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem");
        assert_eq!(url, "postgres://u@h/db");
        assert_eq!(taken.sslmode.as_deref(), Some("verify-full"));
        assert_eq!(taken.sslrootcert.as_deref(), Some("/etc/ca.pem"));
        let (kv, taken) = strip_params("host=h user=u sslmode=require dbname=d");
        assert_eq!(kv, "host=h user=u dbname=d");
        assert_eq!(taken.sslmode.as_deref(), Some("require"));
        let required = pg_target("postgres://u@h/db?sslmode=verify-ca").unwrap();
        assert_eq!(
            required.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        let default = pg_target("postgres://u@h/db").unwrap();
        assert_eq!(
            default.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Prefer
        );
        assert!(pg_target("postgres://u@h/db?sslmode=sometimes").is_err());
    }

    #[test]
    fn classifies_driver_errors() {
        let unavailable = StoreError::Unavailable("40P01: deadlock detected".into());
        assert!(is_retryable_conflict(&unavailable));
        assert!(!is_retryable_conflict(&StoreError::Unavailable(
            "08006: gone".into()
        )));
    }
}
