//! `type: redis`: entries in the Redis the limiter resolves, through the
//! gateway's Redis client (`crate::redis`: codec, log-in, TLS, Cluster slots and
//! redirects). Each core has its own pipelined connection: lookups and
//! writes queued while a round trip is out go together in the next one.
//! A lookup waits at most the limiter's Redis deadline; a write is never
//! waited for. While Redis fails, the cache's own breaker (the limiter's
//! settings) keeps requests off it: every lookup is a miss, and it comes
//! back by itself.
//!
//! A value is `gwc1`, the time it was stored (Unix milliseconds, 8 bytes
//! little-endian) and the body; anything else under a key is a miss.
//! Commands are written straight from what is queued (no argument copied
//! into a command of its own), and a hit's body is the reply's bytes.
//!
//! Stores built for one Redis (the cache rebuilt from settings read again)
//! share one link per core and one breaker.
//!
//! On one server (not a Cluster) each core also keeps a near copy of the
//! entries it read ([`super::near`]), coherent through `CLIENT TRACKING`:
//! the data connection turns tracking on, redirected to the core's
//! tracking connection ([`super::tracking`]); a lookup reads the entry's
//! `PTTL` with it, so the copy never outlives the entry.

use super::local::Stored;
use super::near::{Near, NearBounds};
use crate::redis::resp::{self, ArgSink};
use crate::redis::{
    key_slot, Breaker, BreakerSettings, BreakerState, ClusterLink, Commands, Conn, Endpoint,
    MonoioWire, Reply,
};
use bytes::Bytes;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};

/// The name each core's connection gives itself (`CLIENT SETNAME`).
const LINK_NAME: &str = "gateway-cache-core";
/// Operations waiting on one core before more are refused (a lookup then
/// is a miss, a write is dropped).
const MAX_QUEUED: usize = 4096;
/// What a stored value starts with.
const MAGIC: &[u8; 4] = b"gwc1";

/// Where entries live and how long a lookup may wait.
pub struct RedisStore {
    config: Arc<LinkConfig>,
    /// Each core's near copy's bounds; `None`: no near copy.
    near: Option<NearBounds>,
}

struct LinkConfig {
    /// The URL it was built from (a store for the same one shares it).
    url: String,
    endpoint: Endpoint,
    /// A Cluster's startup nodes; empty for one server.
    cluster: Vec<String>,
    deadline: Duration,
    breaker: Breaker,
}

enum Op {
    /// `GET`, and `PTTL` when `ttl` (for a near copy).
    Get {
        key: Arc<str>,
        ttl: bool,
        reply: oneshot::Sender<Option<(Vec<u8>, Option<i64>)>>,
    },
    Set {
        key: Arc<str>,
        stored: Stored,
        ttl: Option<Duration>,
    },
    /// A management command (`/cache/*`): its reply, `None` when Redis did
    /// not answer.
    Admin {
        command: Vec<Vec<u8>>,
        reply: oneshot::Sender<Option<Reply>>,
    },
    /// A `PING` that keeps the near copy serving ([`Near::wants_probe`]).
    Ping,
}

struct Link {
    queue: RefCell<Vec<Op>>,
    wake: Notify,
    near: Rc<Near>,
    /// Whether its tracking connection was started.
    tracking: Cell<bool>,
}

thread_local! {
    /// This core's link to each Redis a store was built for.
    static LINKS: RefCell<Vec<(Arc<LinkConfig>, Rc<Link>)>> = const { RefCell::new(Vec::new()) };
}

/// Every Redis a store was built for in this process: the limiter's (a
/// handful in tests).
static CONFIGS: Mutex<Vec<Arc<LinkConfig>>> = Mutex::new(Vec::new());

impl RedisStore {
    /// A store on `url` (or the Cluster of `cluster`), each round trip
    /// within `deadline`, each core with a near copy bounded by `near`
    /// (never on a Cluster); `Err` names what cannot be reached from the
    /// cores (a Unix socket, `rediss://...#insecure`).
    pub fn new(
        url: &str,
        cluster: &[String],
        deadline: Duration,
        breaker: BreakerSettings,
        near: Option<NearBounds>,
    ) -> Result<RedisStore, String> {
        let tls = url
            .starts_with("rediss://")
            .then(crate::upstream::client_config)
            .and_then(Result::ok);
        let endpoint = Endpoint::from_url(url, LINK_NAME, |verify| verify.then_some(tls).flatten())
            .filter(|e| !e.unix)
            .ok_or_else(|| {
                "litellm_settings.cache_params (type redis): the response cache reaches Redis from \
                 each core over redis:// or rediss:// (with the gateway's roots) only"
                    .to_string()
            })?;
        let mut configs = CONFIGS.lock().unwrap_or_else(PoisonError::into_inner);
        let same = configs
            .iter()
            .find(|c| c.url == url && c.cluster == cluster && c.deadline == deadline);
        let config = match same {
            Some(c) => c.clone(),
            None => {
                let c = Arc::new(LinkConfig {
                    url: url.to_string(),
                    endpoint,
                    cluster: cluster.to_vec(),
                    deadline,
                    breaker: Breaker::new(breaker),
                });
                configs.push(c.clone());
                c
            }
        };
        let near = near.filter(|_| cluster.is_empty());
        Ok(RedisStore { config, near })
    }

    /// The entry under `key`: `None` on a miss, a foreign value, Redis
    /// unavailable or slower than the deadline. With a near copy (on a
    /// core of `cores`), from it when it has the entry, else read and
    /// kept there.
    pub async fn get(&self, key: &Arc<str>, cores: u64) -> Option<Stored> {
        let link = self.link();
        let mut fill = None;
        if let Some(bounds) = self.near {
            let near = &link.near;
            near.fit(bounds, cores);
            let now = Instant::now();
            if let Some(stored) = near.get(key, now) {
                if near.wants_probe(now) && !self.push(&link, Op::Ping) {
                    near.data_closed();
                }
                return Some(stored);
            }
            fill = Some(near.ticket(key, now));
        }
        if !self.config.breaker.allow() {
            return None;
        }
        let (reply, rx) = oneshot::channel();
        let op = Op::Get {
            key: key.clone(),
            ttl: fill.is_some(),
            reply,
        };
        if !self.push(&link, op) {
            self.abandon_probe();
            return None;
        }
        let (value, ttl) = monoio::time::timeout(self.config.deadline, rx)
            .await
            .ok()?
            .ok()??;
        let stored = decode(value)?;
        if let (Some(ticket), Some(ttl)) = (fill, ttl) {
            link.near.fill(key, ticket, &stored, ttl);
        }
        Some(stored)
    }

    /// Stores `stored` under `key` for `ttl` (for ever when `None`);
    /// nobody waits for it.
    pub fn set(&self, key: &Arc<str>, stored: &Stored, ttl: Option<Duration>) {
        if !self.config.breaker.allow() {
            return;
        }
        let op = Op::Set {
            key: key.clone(),
            stored: stored.clone(),
            ttl,
        };
        if !self.submit(op) {
            self.abandon_probe();
        }
    }

    /// Runs one management command (`PING`, `DEL`, `INFO`, ...) on this
    /// core's link within the deadline, whatever the breaker says (the
    /// answer is the news an operator asks for). `Err` says why there is no
    /// reply, or is Redis's error.
    pub async fn admin(&self, command: Vec<Vec<u8>>) -> Result<Reply, String> {
        let (reply, rx) = oneshot::channel();
        if !self.submit(Op::Admin { command, reply }) {
            return Err("too many operations queued".into());
        }
        match monoio::time::timeout(self.config.deadline, rx).await {
            Err(_) => Err(format!("no answer within {:?}", self.config.deadline)),
            Ok(Err(_)) | Ok(Ok(None)) => Err("Redis unavailable".into()),
            Ok(Ok(Some(Reply::Error(e)))) => Err(e),
            Ok(Ok(Some(reply))) => Ok(reply),
        }
    }

    /// `host:port` of the server (the first startup node of a Cluster).
    pub fn addr(&self) -> &str {
        self.config
            .cluster
            .first()
            .map_or(&self.config.endpoint.addr, String::as_str)
    }

    /// Whether entries live on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        !self.config.cluster.is_empty()
    }

    /// `host:port` of each startup node of a Cluster (none for one server).
    pub fn cluster_nodes(&self) -> &[String] {
        &self.config.cluster
    }

    /// Whether the connection is TLS (`rediss://`).
    pub fn is_tls(&self) -> bool {
        self.config.endpoint.tls.is_some()
    }

    /// Whether the connection authenticates (a password, maybe a user).
    pub fn has_credentials(&self) -> bool {
        self.config.endpoint.password.is_some()
    }

    /// A call the breaker let through as its probe never went out.
    fn abandon_probe(&self) {
        if self.config.breaker.state() == BreakerState::HalfOpen {
            self.config.breaker.abandon_probe();
        }
    }

    /// Queues `op` on this core's link; `false` when the queue is full.
    fn submit(&self, op: Op) -> bool {
        self.push(&self.link(), op)
    }

    /// Queues `op` on `link`; `false` when the queue is full.
    fn push(&self, link: &Link, op: Op) -> bool {
        let mut queue = link.queue.borrow_mut();
        if queue.len() >= MAX_QUEUED {
            return false;
        }
        queue.push(op);
        drop(queue);
        link.wake.notify_one();
        true
    }

    /// This core's link, started on first use (with its tracking
    /// connection when this store keeps near copies).
    fn link(&self) -> Rc<Link> {
        let link = LINKS.with(|links| {
            let mut links = links.borrow_mut();
            match links.iter().find(|(c, _)| Arc::ptr_eq(c, &self.config)) {
                Some((_, link)) => link.clone(),
                None => {
                    let link = Rc::new(Link {
                        queue: RefCell::new(Vec::new()),
                        wake: Notify::new(),
                        near: Rc::default(),
                        tracking: Cell::new(false),
                    });
                    monoio::spawn(drive(link.clone(), self.config.clone()));
                    links.push((self.config.clone(), link.clone()));
                    link
                }
            }
        });
        if self.near.is_some() && !link.tracking.replace(true) {
            monoio::spawn(super::tracking::track(
                link.near.clone(),
                self.config.endpoint.clone(),
                self.config.deadline,
            ));
        }
        link
    }
}

/// A core's connection: one server or a Cluster.
enum Upstream {
    One(Option<Conn<MonoioWire>>),
    Cluster(Box<ClusterLink<MonoioWire>>),
}

/// Sends what is queued, one round trip at a time, for as long as the core
/// runs.
async fn drive(link: Rc<Link>, config: Arc<LinkConfig>) {
    let mut upstream = match config.cluster.is_empty() {
        true => Upstream::One(None),
        false => Upstream::Cluster(Box::new(ClusterLink::new(&config.cluster, None))),
    };
    let mut complained = false;
    loop {
        let batch = std::mem::take(&mut *link.queue.borrow_mut());
        if batch.is_empty() {
            link.wake.notified().await;
            continue;
        }
        let batch = Batch::new(batch);
        let replies = round_trip(&mut upstream, &config, &link.near, &batch).await;
        match &replies {
            Ok(_) => {
                config.breaker.on_success();
                link.near.answered(Instant::now());
                complained = false;
            }
            Err(e) => {
                config.breaker.on_failure();
                if !complained {
                    tracing::warn!(error = %e, "response cache: Redis unavailable; requests are served from the upstream until it answers");
                    complained = true;
                }
            }
        }
        let mut replies = replies.unwrap_or_default().into_iter();
        for op in batch.ops {
            let reply = replies.next();
            match op {
                Op::Get { reply: tx, ttl, .. } => {
                    let ttl = match ttl {
                        true => match replies.next() {
                            Some(Reply::Int(ms)) => Some(ms),
                            _ => None,
                        },
                        false => None,
                    };
                    let value = match reply {
                        Some(Reply::Bulk(Some(v))) => Some((v, ttl)),
                        _ => None,
                    };
                    let _ = tx.send(value);
                }
                Op::Admin { reply: tx, .. } => {
                    let _ = tx.send(reply);
                }
                Op::Set { .. } | Op::Ping => {}
            }
        }
    }
}

/// The queued operations, as the commands of one pipeline: one each, two
/// for a lookup that reads its entry's `PTTL` too.
struct Batch {
    ops: Vec<Op>,
    /// Each command's operation, and whether it is the operation's second.
    commands: Vec<(usize, bool)>,
}

impl Batch {
    fn new(ops: Vec<Op>) -> Batch {
        let mut commands = Vec::with_capacity(ops.len() + 1);
        for (i, op) in ops.iter().enumerate() {
            commands.push((i, false));
            if let Op::Get { ttl: true, .. } = op {
                commands.push((i, true));
            }
        }
        Batch { ops, commands }
    }
}

impl Commands for Batch {
    fn len(&self) -> usize {
        self.commands.len()
    }

    fn slot(&self, i: usize) -> u16 {
        match &self.ops[self.commands[i].0] {
            Op::Get { key, .. } | Op::Set { key, .. } => key_slot(key.as_bytes()),
            Op::Admin { command, .. } => command.get(1).map_or(0, |key| key_slot(key)),
            Op::Ping => 0,
        }
    }

    fn encode(
        &self,
        i: usize,
        _clock: Option<&crate::redis::clock::RedisClock>,
        out: &mut Vec<u8>,
    ) {
        let (op, second) = self.commands[i];
        match (&self.ops[op], second) {
            (Op::Get { key, .. }, true) => {
                let mut c = resp::Command::start(out, 2);
                c.arg(b"PTTL");
                c.arg(key.as_bytes());
            }
            (op, _) => encode_op(op, out),
        }
    }

    fn script(&self, _i: usize) -> Option<&'static str> {
        None
    }
}

/// Appends `op`'s command to `out`: a value is written from the stored
/// answer's bytes, a TTL in milliseconds.
fn encode_op(op: &Op, out: &mut Vec<u8>) {
    match op {
        Op::Get { key, .. } => {
            let mut c = resp::Command::start(out, 2);
            c.arg(b"GET");
            c.arg(key.as_bytes());
        }
        Op::Set { key, stored, ttl } => {
            let mut c = resp::Command::start(out, if ttl.is_some() { 5 } else { 3 });
            c.arg(b"SET");
            c.arg(key.as_bytes());
            c.parts(&[MAGIC, &stored.stored_at_ms.to_le_bytes(), &stored.body]);
            if let Some(ttl) = ttl {
                c.arg(b"PX");
                let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
                c.int(ms);
            }
        }
        Op::Admin { command, .. } => resp::encode(command, out),
        Op::Ping => resp::encode(&[b"PING"], out),
    }
}

/// One pipeline of `commands` within the deadline; one reply each. A
/// connection to one server is opened with tracking on, redirected to
/// `near`'s tracking connection when it has one, and opened again when
/// that connection changed.
async fn round_trip(
    upstream: &mut Upstream,
    config: &LinkConfig,
    near: &Near,
    commands: &Batch,
) -> Result<Vec<Reply>, String> {
    match upstream {
        Upstream::One(conn) => {
            if conn.is_some()
                && !near.refused()
                && near.tracker().is_some()
                && near.tracked() != near.tracker()
            {
                *conn = None;
                near.data_closed();
            }
            let exchange = async {
                let c = match conn {
                    Some(c) => c,
                    None => {
                        let mut c = Conn::open(&config.endpoint, &config.endpoint.addr)
                            .await
                            .map_err(|e| e.to_string())?;
                        let tracked = match near.tracker() {
                            Some(id) => track_reads(&mut c, near, id).await?,
                            None => None,
                        };
                        near.data_opened(tracked);
                        conn.insert(c)
                    }
                };
                let mut out = c.take_out();
                for i in 0..commands.len() {
                    commands.encode(i, None, &mut out);
                }
                c.exchange_encoded(out, commands.len())
                    .await
                    .map_err(|e| e.to_string())
            };
            let result = match monoio::time::timeout(config.deadline, exchange).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer within {:?}", config.deadline)),
            };
            if result.is_err() {
                // A reply may still be on its way: never read it as another's.
                *conn = None;
                near.data_closed();
            }
            result
        }
        Upstream::Cluster(link) => {
            let replies = link
                .exchange(&config.endpoint, config.deadline, commands)
                .await;
            if let Some(e) = link.unreachable() {
                return Err(e.to_string());
            }
            Ok(replies
                .into_iter()
                .map(|r| r.unwrap_or(Reply::Bulk(None)))
                .collect())
        }
    }
}

/// Turns tracking on for what `conn` reads, its invalidations sent to
/// client `id`: `Some(id)` when Redis agreed, `None` when it refused (a
/// Redis before 6, an ACL): then no near copy is kept.
async fn track_reads(
    conn: &mut Conn<MonoioWire>,
    near: &Near,
    id: i64,
) -> Result<Option<i64>, String> {
    let id = id.to_string();
    let command = ["CLIENT", "TRACKING", "on", "REDIRECT", id.as_str()];
    let replies = conn
        .exchange([command].iter())
        .await
        .map_err(|e| e.to_string())?;
    match replies.first() {
        Some(Reply::Status(_)) => Ok(id.parse().ok()),
        other => {
            tracing::warn!(reply = ?other, "response cache: Redis refused CLIENT TRACKING; no near cache");
            near.refuse();
            Ok(None)
        }
    }
}

/// Whether `value` is an entry this cache wrote.
pub fn is_entry(value: &[u8]) -> bool {
    value.starts_with(MAGIC)
}

/// A stored value, or `None` for anything this gateway did not write; the
/// body is `value`'s own bytes.
fn decode(value: Vec<u8>) -> Option<Stored> {
    let rest = value.strip_prefix(MAGIC)?;
    let (at, body) = rest.split_first_chunk::<8>()?;
    if body.is_empty() {
        return None;
    }
    let stored_at_ms = u64::from_le_bytes(*at);
    let start = value.len() - body.len();
    Some(Stored::new(Bytes::from(value).slice(start..), stored_at_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value `op` writes: the third argument of its RESP command.
    fn written(op: &Op) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        encode_op(op, &mut out);
        let (reply, used) = resp::parse(&out).unwrap().unwrap();
        assert_eq!(used, out.len());
        match reply {
            Reply::Array(Some(items)) => items
                .into_iter()
                .map(|i| match i {
                    Reply::Bulk(Some(b)) => b,
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn values_round_trip_and_foreign_ones_are_misses() {
        let s = Stored::new(Bytes::from_static(b"{\"id\":\"x\"}"), 1234);
        let op = Op::Set {
            key: "k".into(),
            stored: s.clone(),
            ttl: None,
        };
        let value = written(&op).swap_remove(2);
        let back = decode(value).unwrap();
        assert_eq!((back.body, back.stored_at_ms), (s.body, 1234));
        for foreign in [
            &b""[..],
            b"gwc1",
            b"gwc1\x01\x02",
            b"gwc1\x00\x00\x00\x00\x00\x00\x00\x00",
            b"{\"timestamp\": 1, \"response\": \"{}\"}",
        ] {
            assert!(decode(foreign.to_vec()).is_none(), "{foreign:?}");
        }
    }

    #[test]
    fn writes_carry_their_ttl_in_milliseconds() {
        let stored = Stored::new(Bytes::from_static(b"v"), 0);
        let op = Op::Set {
            key: "k".into(),
            stored: stored.clone(),
            ttl: Some(Duration::from_millis(1500)),
        };
        let args = written(&op);
        assert_eq!(args.len(), 5);
        assert_eq!((&args[0][..], &args[1][..]), (&b"SET"[..], &b"k"[..]));
        assert_eq!((&args[3][..], &args[4][..]), (&b"PX"[..], &b"1500"[..]));
        let op = Op::Set {
            key: "k".into(),
            stored,
            ttl: None,
        };
        assert_eq!(written(&op).len(), 3);
        let (tx, _rx) = oneshot::channel();
        let get = Op::Get {
            key: "k".into(),
            ttl: true,
            reply: tx,
        };
        assert_eq!(written(&get), [b"GET".to_vec(), b"k".to_vec()]);
        // A lookup for a near copy reads the entry's PTTL in the same
        // pipeline, right after it.
        let batch = Batch::new(vec![get, Op::Ping]);
        let mut out = Vec::new();
        for i in 0..batch.len() {
            batch.encode(i, None, &mut out);
        }
        let mut commands = Vec::new();
        let mut at = 0;
        while let Some((reply, used)) = resp::parse(&out[at..]).unwrap() {
            at += used;
            commands.push(reply);
        }
        let names: Vec<Vec<u8>> = commands
            .iter()
            .map(|c| match c {
                Reply::Array(Some(items)) => match &items[0] {
                    Reply::Bulk(Some(b)) => b.clone(),
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(names, [&b"GET"[..], b"PTTL", b"PING"]);
    }

    #[test]
    fn stores_for_one_redis_share_their_link_and_breaker() {
        let breaker = BreakerSettings::default();
        let deadline = Duration::from_millis(50);
        let a = RedisStore::new("redis://127.0.0.1:1", &[], deadline, breaker, None).unwrap();
        let b = RedisStore::new("redis://127.0.0.1:1", &[], deadline, breaker, None).unwrap();
        let c = RedisStore::new("redis://127.0.0.1:2", &[], deadline, breaker, None).unwrap();
        assert!(Arc::ptr_eq(&a.config, &b.config));
        assert!(!Arc::ptr_eq(&a.config, &c.config));
    }
}
