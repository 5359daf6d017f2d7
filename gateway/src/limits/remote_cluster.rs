//! The control plane's calls to a Redis Cluster (lease ends and
//! settlements, per-request calls when a core has no link of its own):
//! each call split by slot ([`super::split`]), every part one `EVAL`
//! routed by its key through the redis crate's Cluster client (which
//! follows `MOVED` / `ASK` and reads the slot map again), all at once.

use super::remote::{parse_admit, parse_numbers, Call};
use super::script;
use super::split::{self, Answer, Merged};
use super::window::Window;
use std::time::Duration;

/// The Cluster client and its connection, opened on first use.
pub struct ClusterRunner {
    client: redis::cluster::ClusterClient,
    conn: Option<redis::cluster_async::ClusterConnection>,
}

impl ClusterRunner {
    /// A client for `nodes` (`host:port`) with the credentials of `url`
    /// (`redis://[user:password@]host:port`); every wait within `deadline`.
    pub fn new(url: &str, nodes: &[String], deadline: Duration) -> Result<ClusterRunner, String> {
        let credentials = url
            .strip_prefix("redis://")
            .and_then(|rest| rest.rsplit_once('@'))
            .map(|(c, _)| format!("{c}@"))
            .unwrap_or_default();
        let urls: Vec<String> = nodes
            .iter()
            .map(|n| format!("redis://{credentials}{n}"))
            .collect();
        let client = redis::cluster::ClusterClient::builder(urls)
            .retries(1)
            .connection_timeout(deadline)
            .response_timeout(deadline)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(ClusterRunner { client, conn: None })
    }

    /// Sends `batch`'s parts and combines their replies.
    pub async fn round_trip(
        &mut self,
        batch: &[Call],
        window: &Window,
        slot_ttl: Duration,
    ) -> Merged {
        let parts = split::split(batch);
        let conn = match &mut self.conn {
            Some(c) => c.clone(),
            None => match self.client.get_async_connection().await {
                Ok(c) => self.conn.insert(c).clone(),
                Err(e) => {
                    let err = super::remote::classify(e);
                    let outcomes = parts.iter().map(|_| Err(err.clone())).collect();
                    return split::merge(batch, parts, outcomes);
                }
            },
        };
        let sends = parts.iter().map(|part| {
            let mut conn = conn.clone();
            let args = script::evalsha(&part.sub, window, slot_ttl, None);
            let body = match &part.sub {
                Call::Admit { .. } => script::ADMIT_LUA,
                Call::Finish { .. } => script::FINISH_LUA,
                Call::Script { call, .. } => call.script.body(),
            };
            async move {
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(body);
                for a in &args[2..] {
                    cmd.arg(a);
                }
                cmd.query_async::<redis::Value>(&mut conn).await
            }
        });
        let replies = futures_util::future::join_all(sends).await;
        let outcomes = parts
            .iter()
            .zip(replies)
            .map(|(part, reply)| match (reply, &part.sub) {
                (Err(e), _) => Err(super::remote::classify(e)),
                (Ok(v), Call::Admit { .. }) => parse_admit(&v).map(Answer::Verdict),
                (Ok(v), Call::Script { .. }) => parse_numbers(&v).map(Answer::Numbers),
                (Ok(_), Call::Finish { .. }) => Ok(Answer::Settled),
            })
            .collect();
        let merged = split::merge(batch, parts, outcomes);
        if merged.unreachable.is_some() {
            self.conn = None;
        }
        merged
    }
}
