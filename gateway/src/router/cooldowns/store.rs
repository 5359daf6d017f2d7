//! Where cooldowns are shared (and replicas heartbeat, `crate::replicas`):
//! one Redis server, or a Redis Cluster, over the limiter's connection code
//! (the same codec, log-in, TLS and Cluster routing as the cores' links, on
//! tokio).
//!
//! On a Cluster every command is routed by its key's slot (following
//! `MOVED` / `ASK`); a pipeline's commands go to their masters, all at
//! once. Pub/sub needs no routing: a Cluster forwards every `PUBLISH` to
//! all its nodes, so the subscription is held on one node, the next one in
//! turn after each reconnection.

use crate::redis::{
    control_endpoint, ClusterLink, Conn, Endpoint, Plain, RemoteError, Reply, TokioWire,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A Redis server or Cluster, cheap to clone.
#[derive(Clone)]
pub struct Store {
    /// The server (for a Cluster: the credentials and TLS of its nodes).
    endpoint: Arc<Endpoint>,
    /// A Cluster's startup nodes; empty for one server.
    nodes: Arc<Vec<String>>,
    /// The node the next subscription tries.
    next: Arc<AtomicUsize>,
}

/// An open connection to a [`Store`].
pub enum StoreConn {
    /// To one server.
    Single(Conn<TokioWire>),
    /// To a Cluster: a connection per master, opened as needed.
    Cluster(Box<ClusterLink<TokioWire>>, Arc<Endpoint>),
}

/// Commands sent together, and which replies are kept.
#[derive(Debug, Default)]
pub struct Pipeline {
    commands: Vec<Vec<Vec<u8>>>,
    kept: Vec<bool>,
}

impl Pipeline {
    /// Adds a command (its arguments); its reply is returned when `keep`.
    pub fn push(&mut self, keep: bool, args: Vec<Vec<u8>>) {
        self.commands.push(args);
        self.kept.push(keep);
    }

    /// Whether it holds no command.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// The commands as RESP, for tests to read.
    #[cfg(test)]
    pub fn packed(&self) -> String {
        let mut out = Vec::new();
        for command in &self.commands {
            crate::redis::resp::encode(command, &mut out);
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

impl Store {
    /// The store at `url`, or the Cluster of `nodes` (`host:port`) with
    /// the credentials of `url`.
    pub fn new(url: &str, nodes: &[String]) -> Result<Store, String> {
        Ok(Store {
            endpoint: Arc::new(control_endpoint(url)?),
            nodes: Arc::new(nodes.to_vec()),
            next: Arc::default(),
        })
    }

    /// A connection for commands.
    pub async fn connect(&self) -> Result<StoreConn, RemoteError> {
        Ok(match self.nodes.is_empty() {
            true => StoreConn::Single(Conn::open(&self.endpoint, &self.endpoint.addr).await?),
            false => StoreConn::Cluster(
                Box::new(ClusterLink::new(&self.nodes, None)),
                self.endpoint.clone(),
            ),
        })
    }

    /// A connection subscribed to `channel`, its confirmation read.
    pub async fn subscribe(&self, channel: &str) -> Result<Subscription, RemoteError> {
        let addr = match self.nodes.is_empty() {
            true => &self.endpoint.addr,
            false => &self.nodes[self.next.fetch_add(1, Ordering::Relaxed) % self.nodes.len()],
        };
        let mut conn = Conn::<TokioWire>::open(&self.endpoint, addr).await?;
        match conn
            .exchange([["SUBSCRIBE", channel]].iter())
            .await?
            .first()
        {
            Some(Reply::Array(Some(items))) if matches!(items.first(), Some(Reply::Bulk(Some(kind))) if kind == b"subscribe") => {
                Ok(Subscription(conn))
            }
            other => Err(RemoteError::Failed(format!("SUBSCRIBE: {other:?}"))),
        }
    }
}

/// A connection that only receives the messages of its channel.
pub struct Subscription(Conn<TokioWire>);

impl Subscription {
    /// The next message's payload; an error when the connection ends.
    pub async fn next_message(&mut self) -> Result<Vec<u8>, RemoteError> {
        loop {
            if let Reply::Array(Some(mut items)) = self.0.receive().await? {
                if items.len() == 3 && items[0] == Reply::Bulk(Some(b"message".to_vec())) {
                    if let Some(Reply::Bulk(Some(payload))) = items.pop() {
                        return Ok(payload);
                    }
                }
            }
        }
    }
}

impl StoreConn {
    /// Runs `pipe`; the replies of the commands it keeps. Any error reply
    /// fails the whole pipeline.
    pub async fn query(&mut self, pipe: &Pipeline) -> Result<Vec<Reply>, RemoteError> {
        let replies: Vec<Reply> = match self {
            StoreConn::Single(c) => c.exchange(pipe.commands.iter()).await?,
            StoreConn::Cluster(link, endpoint) => link
                .exchange(endpoint, super::DEADLINE, &Plain(&pipe.commands))
                .await
                .into_iter()
                .collect::<Result<_, _>>()?,
        };
        let mut out = Vec::new();
        for (reply, keep) in replies.into_iter().zip(&pipe.kept) {
            if let Reply::Error(e) = reply {
                return Err(RemoteError::Failed(e));
            }
            if *keep {
                out.push(reply);
            }
        }
        Ok(out)
    }
}

/// The integers of `replies`.
pub fn integers(replies: &[Reply]) -> Result<Vec<i64>, RemoteError> {
    replies
        .iter()
        .map(|r| match r {
            Reply::Int(n) => Ok(*n),
            other => Err(RemoteError::Failed(format!(
                "expected an integer: {other:?}"
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::tokio_wire::tests::{fake_redis, text};

    #[tokio::test(flavor = "current_thread")]
    async fn pipelines_keep_the_asked_replies_and_subscriptions_get_messages() {
        let addr = fake_redis(Arc::new(|args| match text(args).as_str() {
            "INCR n" => b":3\r\n".to_vec(),
            "INCR bad" => b"-WRONGTYPE not a number\r\n".to_vec(),
            "SUBSCRIBE ch" => {
                b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n"
                    .to_vec()
            }
            _ => b"+OK\r\n".to_vec(),
        }))
        .await;
        let store = Store::new(&format!("redis://{addr}"), &[]).unwrap();
        let mut conn = store.connect().await.unwrap();
        let mut pipe = Pipeline::default();
        pipe.push(false, vec![b"SET".to_vec(), b"k".to_vec(), b"1".to_vec()]);
        pipe.push(true, vec![b"INCR".to_vec(), b"n".to_vec()]);
        let replies = conn.query(&pipe).await.unwrap();
        assert_eq!(integers(&replies).unwrap(), [3]);
        pipe.push(false, vec![b"INCR".to_vec(), b"bad".to_vec()]);
        assert!(conn.query(&pipe).await.is_err(), "an error reply fails it");
        let mut subscription = store.subscribe("ch").await.unwrap();
        assert_eq!(subscription.next_message().await.unwrap(), b"hello");
    }
}
