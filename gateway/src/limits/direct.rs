//! Each core's own pipelined connection to Redis for per-request limiter
//! calls, so the request path makes one Redis round trip and no hop to
//! another thread. Calls queued on a core while a round trip is in flight
//! go out together in the next one (one pipeline per flush, per core).
//!
//! Every round trip has the limiter's deadline; connection errors and
//! timeouts feed the shared [`Breaker`] and drop the connection (a reply
//! may be in flight), script errors only fail their calls. A `NOSCRIPT`
//! reply loads the scripts again and resends those calls once.

use super::breaker::Breaker;
use super::clock::{parse_time, RedisClock};
use super::cluster::ClusterLink;
use super::outcome::{self, Reporter};
use super::release::Releases;
use super::remote::{Call, RemoteError};
use super::resp::{self, Reply};
use super::script;
use super::window::Window;
use super::Verdict;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio_rustls::ClientTlsStream;
use rustls::pki_types::ServerName;
use std::cell::{OnceCell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The name each core's link gives itself (`CLIENT SETNAME`).
pub const LINK_NAME: &str = "gateway-limiter-core";

/// Calls waiting on one core before new ones are refused (the request then
/// is limited locally), so a stalled Redis cannot grow memory.
const MAX_QUEUED: usize = 4096;

/// Where and how the links connect; shared by every core.
#[derive(Debug)]
pub struct LinkConfig {
    /// `host:port`.
    pub addr: String,
    /// `AUTH` user, with the password.
    pub username: Option<String>,
    /// `AUTH` password.
    pub password: Option<String>,
    /// `SELECT` database.
    pub db: Option<u32>,
    /// The window the scripts count in.
    pub window: Window,
    /// Lifetime of a parallel slot.
    pub slot_ttl: Duration,
    /// Deadline of one round trip.
    pub deadline: Duration,
    /// The breaker every path reports to.
    pub breaker: Arc<Breaker>,
    /// Script calls sent, for `/health/readiness`.
    pub calls: Arc<AtomicU64>,
    /// What the fallback does, for the log line when it engages.
    pub fallback_note: String,
    /// `rediss://`: the TLS connector and the server's name.
    pub tls: Option<RedisTls>,
    /// A Redis Cluster's startup nodes (`host:port`); empty for one server.
    pub cluster: Vec<String>,
}

/// How a `rediss://` link wraps its connection.
pub struct RedisTls {
    connector: monoio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("name", &self.name)
            .finish()
    }
}

impl LinkConfig {
    /// Reads `redis://[[user]:password@]host[:port][/db]`, and the same
    /// with `rediss://` when `tls` (the client config: the gateway's roots)
    /// is given; `None` for anything else (`rediss://...#insecure` among
    /// them), which goes through the control plane's client.
    #[allow(clippy::too_many_arguments)]
    pub fn from_url(
        url: &str,
        window: Window,
        slot_ttl: Duration,
        deadline: Duration,
        breaker: Arc<Breaker>,
        calls: Arc<AtomicU64>,
        fallback_note: String,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Option<LinkConfig> {
        let (rest, tls) = match (url.strip_prefix("redis://"), url.strip_prefix("rediss://")) {
            (Some(rest), _) => (rest, None),
            (None, Some(rest)) if !rest.contains('#') => (rest, Some(tls?)),
            _ => return None,
        };
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((auth, rest)) => (Some(auth), rest),
            None => (None, rest),
        };
        let (hostport, db) = match rest.split_once('/') {
            Some((h, "")) => (h, None),
            Some((h, db)) => (h, Some(db.parse().ok()?)),
            None => (rest, None),
        };
        if hostport.is_empty() {
            return None;
        }
        let addr = if hostport.starts_with('[') || hostport.matches(':').count() == 1 {
            hostport.to_string()
        } else {
            format!("{hostport}:6379")
        };
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .ok()
                .map(|s| s.into_owned())
                .filter(|s| !s.is_empty())
        };
        let (username, password) = match auth.map(|a| a.split_once(':')) {
            Some(Some((user, pass))) => (decode(user), decode(pass)),
            Some(None) => (None, auth.and_then(decode)),
            None => (None, None),
        };
        let tls = match tls {
            Some(config) => {
                let host = match addr.rsplit_once(':') {
                    Some((host, _)) => host.trim_start_matches('[').trim_end_matches(']'),
                    None => addr.as_str(),
                };
                Some(RedisTls {
                    connector: monoio_rustls::TlsConnector::from(config),
                    name: ServerName::try_from(host.to_string()).ok()?,
                })
            }
            None => None,
        };
        Some(LinkConfig {
            addr,
            username,
            password,
            db,
            window,
            slot_ttl,
            deadline,
            breaker,
            calls,
            fallback_note,
            tls,
            cluster: Vec::new(),
        })
    }
}

/// One core's queue of calls and the task that sends them.
struct Link {
    queue: RefCell<Vec<Call>>,
    wake: Notify,
}

thread_local! {
    static LINK: OnceCell<Rc<Link>> = const { OnceCell::new() };
}

/// Queues `call` on this core's link, starting the link on first use.
/// Refused (`Err` with the call) when too many calls are waiting.
pub fn submit(config: &Arc<LinkConfig>, call: Call) -> Result<(), Call> {
    LINK.with(|cell| {
        let link = cell.get_or_init(|| {
            let link = Rc::new(Link {
                queue: RefCell::new(Vec::new()),
                wake: Notify::new(),
            });
            monoio::spawn(drive(link.clone(), config.clone()));
            link
        });
        let mut queue = link.queue.borrow_mut();
        if queue.len() >= MAX_QUEUED {
            return Err(call);
        }
        queue.push(call);
        drop(queue);
        link.wake.notify_one();
        Ok(())
    })
}

/// Sends whatever is queued, one round trip at a time, for as long as the
/// core runs; slot releases a failed round trip left go once they are due.
async fn drive(link: Rc<Link>, config: Arc<LinkConfig>) {
    let mut conn: Option<Conn> = None;
    let mut cluster = (!config.cluster.is_empty()).then(|| ClusterLink::new(&config.cluster));
    let mut report = Reporter {
        breaker: &config.breaker,
        fallback_note: &config.fallback_note,
        last_complaint: None,
    };
    let mut releases = Releases::default();
    loop {
        let mut batch = std::mem::take(&mut *link.queue.borrow_mut());
        batch.extend(releases.due(Instant::now()));
        if batch.is_empty() {
            match releases.next_due() {
                Some(at) => {
                    let wait = at.saturating_duration_since(Instant::now());
                    monoio::select! {
                        _ = link.wake.notified() => {}
                        _ = monoio::time::sleep(wait) => {}
                    }
                }
                None => link.wake.notified().await,
            }
            continue;
        }
        // An admission whose request already gave up (deadline) and was
        // limited locally is not sent: nothing was charged for it yet.
        batch.retain(|call| !matches!(call, Call::Admit { reply, .. } if reply.is_closed()));
        if batch.is_empty() {
            continue;
        }
        config
            .calls
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        if let Some(cluster) = &mut cluster {
            let merged = cluster.round_trip(&config, &batch).await;
            releases.after_failure(&merged.lost);
            let orphans = report.concluded(
                batch,
                merged.answers.into_iter(),
                merged.unreachable.as_ref(),
            );
            let mut queue = link.queue.borrow_mut();
            queue.extend(orphans);
            queue.extend(merged.compensations);
            continue;
        }
        let result = monoio::time::timeout(config.deadline, round_trip(&mut conn, &config, &batch))
            .await
            .unwrap_or_else(|_| Err(outcome::timed_out(config.deadline)));
        match result {
            Ok(replies) => {
                let orphans = report.succeeded(batch, replies.iter().map(numbers));
                link.queue.borrow_mut().extend(orphans);
            }
            Err(err) => {
                releases.after_failure(&batch);
                if report.failed(batch, &err) {
                    conn = None;
                }
            }
        }
    }
}

/// Reads `admit.lua`'s reply.
pub(super) fn verdict(reply: &Reply) -> Result<Verdict, RemoteError> {
    numbers(reply).and_then(|n| script::verdict(&n))
}

/// Reads a script's reply: an array of integers.
pub(super) fn numbers(reply: &Reply) -> Result<Vec<i64>, RemoteError> {
    match reply {
        Reply::Error(e) => Err(RemoteError::Failed(e.clone())),
        r => r
            .integers()
            .ok_or_else(|| RemoteError::Failed(format!("unexpected script reply {r:?}"))),
    }
}

/// Sends `batch` and reads one reply per call, connecting first if needed.
async fn round_trip(
    conn: &mut Option<Conn>,
    config: &LinkConfig,
    batch: &[Call],
) -> Result<Vec<Reply>, RemoteError> {
    let c = match conn {
        Some(c) => c,
        None => conn.insert(Conn::open(config, &config.addr).await?),
    };
    let clock = c.clock;
    let encode = |calls: &mut dyn Iterator<Item = &Call>, out: &mut Vec<u8>| {
        for call in calls {
            script::encode_evalsha(call, &config.window, config.slot_ttl, clock.as_ref(), out);
        }
    };
    let mut out = c.take_out();
    encode(&mut batch.iter(), &mut out);
    let mut replies = c.exchange_encoded(out, batch.len()).await?;
    let missing: Vec<usize> = (0..replies.len())
        .filter(|&i| matches!(&replies[i], Reply::Error(e) if e.starts_with("NOSCRIPT")))
        .collect();
    if !missing.is_empty() {
        c.load_scripts().await?;
        let mut extra: Vec<&str> = missing
            .iter()
            .filter_map(|&i| batch[i].extra_script().map(|s| s.body()))
            .collect();
        extra.sort_unstable();
        extra.dedup();
        c.load(&extra).await?;
        let mut out = c.take_out();
        encode(&mut missing.iter().map(|&i| &batch[i]), &mut out);
        let again = c.exchange_encoded(out, missing.len()).await?;
        for (i, reply) in missing.into_iter().zip(again) {
            replies[i] = reply;
        }
    }
    Ok(replies)
}

/// A link's socket: plain, or TLS for `rediss://`.
enum Stream {
    Plain(TcpStream),
    Tls(Box<ClientTlsStream<TcpStream>>),
}

impl Stream {
    /// Writes all of `buf` (and, over TLS, flushes its records); gives the
    /// buffer back for the next command.
    async fn send(&mut self, buf: Vec<u8>) -> (std::io::Result<()>, Vec<u8>) {
        match self {
            Stream::Plain(s) => {
                let (sent, buf) = s.write_all(buf).await;
                (sent.map(drop), buf)
            }
            Stream::Tls(s) => {
                let (sent, buf) = s.write_all(buf).await;
                match sent {
                    Ok(_) => (s.flush().await, buf),
                    Err(e) => (Err(e), buf),
                }
            }
        }
    }

    async fn read(&mut self, buf: Vec<u8>) -> monoio::BufResult<usize, Vec<u8>> {
        match self {
            Stream::Plain(s) => s.read(buf).await,
            Stream::Tls(s) => s.read(buf).await,
        }
    }
}

/// One connection with its read buffer and its reading of Redis's clock.
pub(super) struct Conn {
    stream: Stream,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    /// The outgoing buffer, kept between round trips.
    out: Vec<u8>,
    /// The server's clock, read when the connection opened.
    pub(super) clock: Option<RedisClock>,
}

impl Conn {
    /// Connects to `addr` (`config.addr`, or a Cluster node), logs in and
    /// loads the scripts.
    pub(super) async fn open(config: &LinkConfig, addr: &str) -> Result<Conn, RemoteError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| RemoteError::Unreachable(format!("connect {addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let stream = match &config.tls {
            None => Stream::Plain(stream),
            Some(tls) => {
                let secured = tls
                    .connector
                    .connect(tls.name.clone(), stream)
                    .await
                    .map_err(|e| {
                        RemoteError::Unreachable(format!("TLS handshake with {addr}: {e}"))
                    })?;
                Stream::Tls(Box::new(secured))
            }
        };
        let mut conn = Conn {
            stream,
            buf: Vec::with_capacity(4096),
            scratch: Vec::with_capacity(16 * 1024),
            out: Vec::with_capacity(4096),
            clock: None,
        };
        let mut setup: Vec<Vec<String>> = Vec::new();
        if let Some(password) = &config.password {
            let mut auth = vec!["AUTH".to_string()];
            auth.extend(config.username.clone());
            auth.push(password.clone());
            setup.push(auth);
        }
        if let Some(db) = config.db {
            setup.push(vec!["SELECT".into(), db.to_string()]);
        }
        // Named, so `CLIENT LIST` tells the cores' links apart (a server
        // whose ACL refuses it serves the link all the same).
        setup.push(vec!["CLIENT".into(), "SETNAME".into(), LINK_NAME.into()]);
        let named = setup.len() - 1;
        for (i, reply) in conn.exchange(setup.iter()).await?.into_iter().enumerate() {
            if let (Reply::Error(e), false) = (reply, i == named) {
                return Err(RemoteError::Failed(format!("Redis set-up: {e}")));
            }
        }
        conn.clock = conn.read_clock().await?;
        conn.load_scripts().await?;
        Ok(conn)
    }

    /// Reads Redis's clock (`TIME`); without it (a server whose ACL refuses
    /// TIME) admissions go without a deadline.
    async fn read_clock(&mut self) -> Result<Option<RedisClock>, RemoteError> {
        let sent = Instant::now();
        let reply = self.exchange([["TIME"]].iter()).await?;
        let answered = Instant::now();
        let parts: Vec<String> = match reply.first() {
            Some(Reply::Array(Some(items))) => items
                .iter()
                .filter_map(|i| match i {
                    Reply::Bulk(Some(b)) => String::from_utf8(b.clone()).ok(),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok(parse_time(&parts)
            .map(|(secs, micros)| RedisClock::from_time(secs, micros, sent, answered)))
    }

    /// Loads both scripts (after a `NOSCRIPT`).
    pub(super) async fn load_scripts(&mut self) -> Result<(), RemoteError> {
        self.load(&[script::ADMIT_LUA, script::FINISH_LUA]).await
    }

    /// `SCRIPT LOAD` of each of `bodies`.
    pub(super) async fn load(&mut self, bodies: &[&str]) -> Result<(), RemoteError> {
        let load: Vec<[&str; 3]> = bodies.iter().map(|b| ["SCRIPT", "LOAD", b]).collect();
        for reply in self.exchange(load.iter()).await? {
            if let Reply::Error(e) = reply {
                return Err(RemoteError::Failed(format!("SCRIPT LOAD: {e}")));
            }
        }
        Ok(())
    }

    /// Writes every command, then reads as many replies.
    pub(super) async fn exchange<'a, C, S>(
        &mut self,
        commands: impl Iterator<Item = &'a C>,
    ) -> Result<Vec<Reply>, RemoteError>
    where
        C: AsRef<[S]> + 'a + ?Sized,
        S: AsRef<[u8]>,
    {
        let mut out = self.take_out();
        let mut expected = 0;
        for command in commands {
            resp::encode(command.as_ref(), &mut out);
            expected += 1;
        }
        self.exchange_encoded(out, expected).await
    }

    /// The outgoing buffer, empty, to encode commands into.
    pub(super) fn take_out(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        out
    }

    /// Writes `out` (`expected` encoded commands), then reads as many
    /// replies.
    pub(super) async fn exchange_encoded(
        &mut self,
        out: Vec<u8>,
        expected: usize,
    ) -> Result<Vec<Reply>, RemoteError> {
        if expected == 0 {
            self.out = out;
            return Ok(Vec::new());
        }
        let (sent, out) = self.stream.send(out).await;
        self.out = out;
        sent.map_err(|e| RemoteError::Unreachable(format!("write: {e}")))?;
        let mut replies = Vec::with_capacity(expected);
        let mut at = 0;
        while replies.len() < expected {
            match resp::parse(&self.buf[at..]).map_err(RemoteError::Failed)? {
                Some((reply, used)) => {
                    replies.push(reply);
                    at += used;
                }
                None => {
                    let mut scratch = std::mem::take(&mut self.scratch);
                    scratch.clear();
                    let (read, scratch) = self.stream.read(scratch).await;
                    let n = read.map_err(|e| RemoteError::Unreachable(format!("read: {e}")))?;
                    if n == 0 {
                        return Err(RemoteError::Unreachable("connection closed".into()));
                    }
                    self.buf.extend_from_slice(&scratch[..n]);
                    self.scratch = scratch;
                }
            }
        }
        self.buf.drain(..at);
        Ok(replies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::breaker::BreakerSettings;

    fn parse(url: &str) -> Option<LinkConfig> {
        let tls = crate::upstream::client_config().ok();
        LinkConfig::from_url(
            url,
            Window::new(60),
            Duration::from_secs(1),
            Duration::from_millis(100),
            Arc::new(Breaker::new(BreakerSettings::default())),
            Arc::default(),
            String::new(),
            tls,
        )
    }

    #[test]
    fn reads_redis_urls() {
        let c = parse("redis://127.0.0.1:6380").unwrap();
        assert_eq!(
            (c.addr.as_str(), c.password, c.db),
            ("127.0.0.1:6380", None, None)
        );
        let c = parse("redis://:p%40ss@r1/2").unwrap();
        assert_eq!(c.addr, "r1:6379");
        assert_eq!(
            (c.username, c.password.as_deref(), c.db),
            (None, Some("p@ss"), Some(2))
        );
        let c = parse("redis://user:pw@[::1]:7000/").unwrap();
        assert_eq!(
            (c.addr.as_str(), c.username.as_deref()),
            ("[::1]:7000", Some("user"))
        );
        let secure = parse("rediss://:pw@secure.example:6380/1").unwrap();
        assert_eq!(secure.addr, "secure.example:6380");
        assert!(secure.tls.is_some());
        assert!(parse("redis://plain:6380").unwrap().tls.is_none());
        assert!(
            parse("rediss://secure:6380/#insecure").is_none(),
            "left to the control plane's client"
        );
        assert!(parse("redis+unix:///tmp/r.sock").is_none());
        assert!(parse("redis://h/notadb").is_none());
    }
}
