//! Where cooldowns are shared: one Redis server, or a Redis Cluster.
//!
//! On a Cluster every command names one key and is routed by its slot (the
//! redis crate's Cluster client follows `MOVED` / `ASK`); a pipeline's
//! commands go one by one, all at once. Pub/sub needs no routing: a Cluster
//! forwards every `PUBLISH` to all its nodes, so the subscription is held
//! on one node, the next one in turn after each reconnection.

use redis::aio::{MultiplexedConnection, PubSub};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A Redis server or Cluster, cheap to clone.
#[derive(Clone)]
pub enum Store {
    /// One server.
    Single(redis::Client),
    /// A Cluster: the routing client and one plain client per node for
    /// the subscription, tried in turn.
    Cluster {
        /// Routes each command by its key.
        client: redis::cluster::ClusterClient,
        /// A client per startup node.
        nodes: Arc<Vec<redis::Client>>,
        /// The node the next subscription tries.
        next: Arc<AtomicUsize>,
    },
}

/// An open connection to a [`Store`].
pub enum StoreConn {
    /// To one server.
    Single(MultiplexedConnection),
    /// To a Cluster.
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Store {
    /// The store at `url`, or the Cluster of `nodes` (`host:port`) with
    /// the credentials of `url`.
    pub fn new(url: &str, nodes: &[String]) -> Result<Store, String> {
        if nodes.is_empty() {
            return crate::limits::redis_client::client(url).map(Store::Single);
        }
        let credentials = url
            .strip_prefix("redis://")
            .and_then(|rest| rest.rsplit_once('@'))
            .map(|(c, _)| format!("{c}@"))
            .unwrap_or_default();
        let urls: Vec<String> = nodes
            .iter()
            .map(|n| format!("redis://{credentials}{n}"))
            .collect();
        let client = redis::cluster::ClusterClient::builder(urls.clone())
            .retries(1)
            .connection_timeout(super::DEADLINE)
            .response_timeout(super::DEADLINE)
            .build()
            .map_err(|e| e.to_string())?;
        let nodes = urls
            .iter()
            .map(|u| redis::Client::open(u.as_str()).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Store::Cluster {
            client,
            nodes: Arc::new(nodes),
            next: Arc::default(),
        })
    }

    /// A connection for commands.
    pub async fn connect(&self) -> redis::RedisResult<StoreConn> {
        Ok(match self {
            Store::Single(c) => StoreConn::Single(c.get_multiplexed_async_connection().await?),
            Store::Cluster { client, .. } => {
                StoreConn::Cluster(client.get_async_connection().await?)
            }
        })
    }

    /// A connection for the subscription.
    pub async fn pubsub(&self) -> redis::RedisResult<PubSub> {
        match self {
            Store::Single(c) => c.get_async_pubsub().await,
            Store::Cluster { nodes, next, .. } => {
                let i = next.fetch_add(1, Ordering::Relaxed) % nodes.len();
                nodes[i].get_async_pubsub().await
            }
        }
    }
}

impl StoreConn {
    /// Runs `pipe`; the replies of the commands it does not ignore, which
    /// `kept` names (on a Cluster the commands go one by one).
    pub async fn query(
        &mut self,
        pipe: &redis::Pipeline,
        kept: impl Fn(&redis::Cmd) -> bool,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        match self {
            StoreConn::Single(c) => pipe.query_async(c).await,
            StoreConn::Cluster(c) => {
                let sends = pipe.cmd_iter().map(|cmd| {
                    let mut c = c.clone();
                    let keep = kept(cmd);
                    async move { (keep, cmd.query_async::<redis::Value>(&mut c).await) }
                });
                let mut out = Vec::new();
                for (keep, reply) in futures_util::future::join_all(sends).await {
                    let reply = reply?;
                    if keep {
                        out.push(reply);
                    }
                }
                Ok(out)
            }
        }
    }
}

/// Whether `cmd` is the command `name`.
pub fn is(cmd: &redis::Cmd, name: &str) -> bool {
    matches!(cmd.args_iter().next(), Some(redis::Arg::Simple(n)) if n.eq_ignore_ascii_case(name.as_bytes()))
}
