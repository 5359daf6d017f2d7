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

use super::local::Stored;
use crate::redis::resp::{self, ArgSink};
use crate::redis::{
    key_slot, Breaker, BreakerSettings, BreakerState, ClusterLink, Commands, Conn, Endpoint,
    MonoioWire, Reply,
};
use bytes::Bytes;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
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
    Get {
        key: String,
        reply: oneshot::Sender<Option<Vec<u8>>>,
    },
    Set {
        key: String,
        stored: Stored,
        ttl: Option<Duration>,
    },
    /// A management command (`/cache/*`): its reply, `None` when Redis did
    /// not answer.
    Admin {
        command: Vec<Vec<u8>>,
        reply: oneshot::Sender<Option<Reply>>,
    },
}

struct Link {
    queue: RefCell<Vec<Op>>,
    wake: Notify,
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
    /// within `deadline`; `Err` names what cannot be reached from the
    /// cores (a Unix socket, `rediss://...#insecure`).
    pub fn new(
        url: &str,
        cluster: &[String],
        deadline: Duration,
        breaker: BreakerSettings,
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
        Ok(RedisStore { config })
    }

    /// The entry under `key`: `None` on a miss, a foreign value, Redis
    /// unavailable or slower than the deadline.
    pub async fn get(&self, key: &str) -> Option<Stored> {
        if !self.config.breaker.allow() {
            return None;
        }
        let (reply, rx) = oneshot::channel();
        let op = Op::Get {
            key: key.to_string(),
            reply,
        };
        if !self.submit(op) {
            self.abandon_probe();
            return None;
        }
        let value = monoio::time::timeout(self.config.deadline, rx)
            .await
            .ok()?
            .ok()??;
        decode(value)
    }

    /// Stores `stored` under `key` for `ttl` (for ever when `None`);
    /// nobody waits for it.
    pub fn set(&self, key: &str, stored: &Stored, ttl: Option<Duration>) {
        if !self.config.breaker.allow() {
            return;
        }
        let op = Op::Set {
            key: key.to_string(),
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

    /// Queues `op` on this core's link, starting it on first use; `false`
    /// when the queue is full.
    fn submit(&self, op: Op) -> bool {
        LINKS.with(|links| {
            let mut links = links.borrow_mut();
            let at = match links.iter().position(|(c, _)| Arc::ptr_eq(c, &self.config)) {
                Some(at) => at,
                None => {
                    let link = Rc::new(Link {
                        queue: RefCell::new(Vec::new()),
                        wake: Notify::new(),
                    });
                    monoio::spawn(drive(link.clone(), self.config.clone()));
                    links.push((self.config.clone(), link));
                    links.len() - 1
                }
            };
            let link = &links[at].1;
            let mut queue = link.queue.borrow_mut();
            if queue.len() >= MAX_QUEUED {
                return false;
            }
            queue.push(op);
            drop(queue);
            link.wake.notify_one();
            true
        })
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
        let replies = round_trip(&mut upstream, &config, &Batch(&batch)).await;
        match &replies {
            Ok(_) => {
                config.breaker.on_success();
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
        for op in batch {
            let reply = replies.next();
            match op {
                Op::Get { reply: tx, .. } => {
                    let value = match reply {
                        Some(Reply::Bulk(Some(v))) => Some(v),
                        _ => None,
                    };
                    let _ = tx.send(value);
                }
                Op::Admin { reply: tx, .. } => {
                    let _ = tx.send(reply);
                }
                Op::Set { .. } => {}
            }
        }
    }
}

/// The queued operations, as the commands of one pipeline.
struct Batch<'a>(&'a [Op]);

impl Commands for Batch<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn slot(&self, i: usize) -> u16 {
        match &self.0[i] {
            Op::Get { key, .. } | Op::Set { key, .. } => key_slot(key.as_bytes()),
            Op::Admin { command, .. } => command.get(1).map_or(0, |key| key_slot(key)),
        }
    }

    fn encode(
        &self,
        i: usize,
        _clock: Option<&crate::redis::clock::RedisClock>,
        out: &mut Vec<u8>,
    ) {
        encode_op(&self.0[i], out);
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
    }
}

/// One pipeline of `commands` within the deadline; one reply each.
async fn round_trip(
    upstream: &mut Upstream,
    config: &LinkConfig,
    commands: &Batch<'_>,
) -> Result<Vec<Reply>, String> {
    match upstream {
        Upstream::One(conn) => {
            let exchange = async {
                let c = match conn {
                    Some(c) => c,
                    None => conn.insert(
                        Conn::open(&config.endpoint, &config.endpoint.addr)
                            .await
                            .map_err(|e| e.to_string())?,
                    ),
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
    Some(Stored {
        body: Bytes::from(value).slice(start..),
        stored_at_ms,
    })
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
        let s = Stored {
            body: Bytes::from_static(b"{\"id\":\"x\"}"),
            stored_at_ms: 1234,
        };
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
        let stored = Stored {
            body: Bytes::from_static(b"v"),
            stored_at_ms: 0,
        };
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
            reply: tx,
        };
        assert_eq!(written(&get), [b"GET".to_vec(), b"k".to_vec()]);
    }

    #[test]
    fn stores_for_one_redis_share_their_link_and_breaker() {
        let breaker = BreakerSettings::default();
        let deadline = Duration::from_millis(50);
        let a = RedisStore::new("redis://127.0.0.1:1", &[], deadline, breaker).unwrap();
        let b = RedisStore::new("redis://127.0.0.1:1", &[], deadline, breaker).unwrap();
        let c = RedisStore::new("redis://127.0.0.1:2", &[], deadline, breaker).unwrap();
        assert!(Arc::ptr_eq(&a.config, &b.config));
        assert!(!Arc::ptr_eq(&a.config, &c.config));
    }
}
