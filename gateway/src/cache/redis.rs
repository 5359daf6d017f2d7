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

use super::local::Stored;
use crate::redis::{
    Breaker, BreakerSettings, BreakerState, ClusterLink, Conn, Endpoint, MonoioWire, Plain, Reply,
};
use bytes::Bytes;
use std::cell::{OnceCell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
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
        value: Vec<u8>,
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
    static LINK: OnceCell<Rc<Link>> = const { OnceCell::new() };
}

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
        Ok(RedisStore {
            config: Arc::new(LinkConfig {
                endpoint,
                cluster: cluster.to_vec(),
                deadline,
                breaker: Breaker::new(breaker),
            }),
        })
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
        decode(&value)
    }

    /// Stores `stored` under `key` for `ttl` (for ever when `None`);
    /// nobody waits for it.
    pub fn set(&self, key: &str, stored: &Stored, ttl: Option<Duration>) {
        if !self.config.breaker.allow() {
            return;
        }
        let op = Op::Set {
            key: key.to_string(),
            value: encode(stored),
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
        LINK.with(|cell| {
            let link = cell.get_or_init(|| {
                let link = Rc::new(Link {
                    queue: RefCell::new(Vec::new()),
                    wake: Notify::new(),
                });
                monoio::spawn(drive(link.clone(), self.config.clone()));
                link
            });
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
        let commands: Vec<Vec<Vec<u8>>> = batch.iter().map(command).collect();
        let replies = round_trip(&mut upstream, &config, &commands).await;
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

fn command(op: &Op) -> Vec<Vec<u8>> {
    match op {
        Op::Get { key, .. } => vec![b"GET".to_vec(), key.as_bytes().to_vec()],
        Op::Set { key, value, ttl } => {
            let mut c = vec![b"SET".to_vec(), key.as_bytes().to_vec(), value.clone()];
            if let Some(ttl) = ttl {
                c.push(b"PX".to_vec());
                c.push(ttl.as_millis().max(1).to_string().into_bytes());
            }
            c
        }
        Op::Admin { command, .. } => command.clone(),
    }
}

/// One pipeline of `commands` within the deadline; one reply each.
async fn round_trip(
    upstream: &mut Upstream,
    config: &LinkConfig,
    commands: &[Vec<Vec<u8>>],
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
                c.exchange(commands.iter()).await.map_err(|e| e.to_string())
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
                .exchange(&config.endpoint, config.deadline, &Plain(commands))
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

fn encode(stored: &Stored) -> Vec<u8> {
    let mut v = Vec::with_capacity(12 + stored.body.len());
    v.extend_from_slice(MAGIC);
    v.extend_from_slice(&stored.stored_at_ms.to_le_bytes());
    v.extend_from_slice(&stored.body);
    v
}

/// A stored value, or `None` for anything this gateway did not write.
fn decode(value: &[u8]) -> Option<Stored> {
    let rest = value.strip_prefix(MAGIC)?;
    let (at, body) = rest.split_first_chunk::<8>()?;
    if body.is_empty() {
        return None;
    }
    Some(Stored {
        body: Bytes::copy_from_slice(body),
        stored_at_ms: u64::from_le_bytes(*at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_foreign_ones_are_misses() {
        let s = Stored {
            body: Bytes::from_static(b"{\"id\":\"x\"}"),
            stored_at_ms: 1234,
        };
        let back = decode(&encode(&s)).unwrap();
        assert_eq!((back.body, back.stored_at_ms), (s.body, 1234));
        for foreign in [
            &b""[..],
            b"gwc1",
            b"gwc1\x01\x02",
            b"gwc1\x00\x00\x00\x00\x00\x00\x00\x00",
            b"{\"timestamp\": 1, \"response\": \"{}\"}",
        ] {
            assert!(decode(foreign).is_none(), "{foreign:?}");
        }
    }

    #[test]
    fn writes_carry_their_ttl_in_milliseconds() {
        let op = Op::Set {
            key: "k".into(),
            value: b"v".to_vec(),
            ttl: Some(Duration::from_millis(1500)),
        };
        assert_eq!(
            command(&op),
            [&b"SET"[..], b"k", b"v", b"PX", b"1500"].map(<[u8]>::to_vec)
        );
        let op = Op::Set {
            key: "k".into(),
            value: b"v".to_vec(),
            ttl: None,
        };
        assert_eq!(command(&op).len(), 3);
    }
}
