//! A core's link to a Redis Cluster: one connection per master, the slot
//! map read with `CLUSTER SLOTS` from the startup nodes (or any known
//! master), each call split by slot ([`super::split`]) and every node's
//! share sent in the same round trip, all nodes at once.
//!
//! A `MOVED` reply updates the slot map at once, resends the part to the
//! new owner (at most [`MAX_HOPS`] redirects) and has the whole map read
//! again before the next round trip; an `ASK` reply resends the part after
//! `ASKING`, map unchanged. A node that cannot be reached or does not
//! answer within the limiter's deadline fails only its parts, loses its
//! connection, and has the map read again (a replica may have taken over).
//!
//! For the breaker the Cluster is one Redis: a round trip succeeds only
//! when every master of the map is reachable. While a master is down, each
//! round trip counts as a failure (calls to the other masters still get
//! their answers), and one in every [`REFRESH_EVERY`] tries to connect to
//! it again, so the breaker closes once it is back, and only then.

use super::direct::{self, Conn, LinkConfig};
use super::remote::{Call, RemoteError};
use super::resp::{self, Reply};
use super::script;
use super::slots::{redirect, Redirect, Topology};
use super::split::{self, Answer, Merged};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Redirects one part may follow in one round trip.
const MAX_HOPS: usize = 3;
/// Least time between two reads of the slot map.
const REFRESH_EVERY: Duration = Duration::from_millis(250);

/// One core's connections to a Cluster and its slot map.
pub struct ClusterLink {
    seeds: Vec<String>,
    topology: Option<Topology>,
    /// The map must be read again (a redirect or a lost node).
    stale: bool,
    last_refresh: Option<Instant>,
    conns: HashMap<String, Conn>,
    /// Masters that could not be reached: when they were last tried, why.
    down: HashMap<String, (Instant, RemoteError)>,
}

/// Where one part goes in one hop.
struct Send {
    part: usize,
    addr: String,
    asking: bool,
}

impl ClusterLink {
    /// A link that starts from `seeds` (`host:port`).
    pub fn new(seeds: &[String]) -> ClusterLink {
        ClusterLink {
            seeds: seeds.to_vec(),
            topology: None,
            stale: true,
            last_refresh: None,
            conns: HashMap::new(),
            down: HashMap::new(),
        }
    }

    /// Sends `batch` and combines the replies, within the limiter's deadline.
    pub async fn round_trip(&mut self, config: &LinkConfig, batch: &[Call]) -> Merged {
        let deadline = Instant::now() + config.deadline;
        self.refresh(config, deadline).await;
        let parts = split::split(batch);
        let mut outcomes: Vec<Option<split::Outcome>> = (0..parts.len()).map(|_| None).collect();
        let mut sends = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            match self.topology.as_ref().and_then(|t| t.node_of(part.slot)) {
                Some(addr) => sends.push(Send {
                    part: i,
                    addr: addr.to_string(),
                    asking: false,
                }),
                None => {
                    outcomes[i] = Some(Err(RemoteError::Unreachable(format!(
                        "no Cluster node known for slot {}",
                        part.slot
                    ))))
                }
            }
        }
        for _ in 0..=MAX_HOPS {
            if sends.is_empty() {
                break;
            }
            sends = self
                .hop(config, deadline, &parts, sends, &mut outcomes)
                .await;
        }
        for send in sends {
            outcomes[send.part] = Some(Err(RemoteError::Failed(format!(
                "more than {MAX_HOPS} Cluster redirects"
            ))));
        }
        self.retry_down(config, deadline).await;
        let outcomes = outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(RemoteError::Failed("no reply".into()))))
            .collect();
        let mut merged = split::merge(batch, parts, outcomes);
        if merged.unreachable.is_none() {
            merged.unreachable = self.down.values().next().map(|(_, e)| e.clone());
        }
        merged
    }

    /// Connects again to the masters that were down and were not tried in
    /// the last [`REFRESH_EVERY`].
    async fn retry_down(&mut self, config: &LinkConfig, deadline: Instant) {
        let due: Vec<String> = self
            .down
            .iter()
            .filter(|(_, (at, _))| at.elapsed() >= REFRESH_EVERY)
            .map(|(addr, _)| addr.clone())
            .collect();
        for addr in due {
            let left = deadline.saturating_duration_since(Instant::now());
            let opened = monoio::time::timeout(left, Conn::open(config, &addr))
                .await
                .unwrap_or_else(|_| Err(super::outcome::timed_out(config.deadline)));
            match opened {
                Ok(conn) => {
                    self.down.remove(&addr);
                    self.conns.insert(addr, conn);
                }
                Err(e) => {
                    self.down.insert(addr, (Instant::now(), e));
                }
            }
        }
    }

    /// Sends every part of `sends` to its node, all nodes at once; the
    /// parts redirected elsewhere, for the next hop.
    async fn hop(
        &mut self,
        config: &LinkConfig,
        deadline: Instant,
        parts: &[split::Part],
        sends: Vec<Send>,
        outcomes: &mut [Option<split::Outcome>],
    ) -> Vec<Send> {
        let mut by_node: Vec<(String, Vec<Send>)> = Vec::new();
        for send in sends {
            match by_node.iter_mut().find(|(a, _)| *a == send.addr) {
                Some((_, group)) => group.push(send),
                None => by_node.push((send.addr.clone(), vec![send])),
            }
        }
        let exchanges = by_node.into_iter().map(|(addr, group)| {
            let conn = self.conns.remove(&addr);
            let calls: Vec<(&Call, bool)> = group
                .iter()
                .map(|s| (&parts[s.part].sub, s.asking))
                .collect();
            async move {
                let left = deadline.saturating_duration_since(Instant::now());
                let result = monoio::time::timeout(left, on_node(config, &addr, conn, &calls))
                    .await
                    .unwrap_or_else(|_| Err(super::outcome::timed_out(config.deadline)));
                (addr, group, result)
            }
        });
        let mut next = Vec::new();
        for (addr, group, result) in futures_util::future::join_all(exchanges).await {
            let replies = match result {
                Ok((conn, replies)) => {
                    self.down.remove(&addr);
                    self.conns.insert(addr.clone(), conn);
                    replies
                }
                Err(e) => {
                    if matches!(e, RemoteError::Unreachable(_)) {
                        self.down.insert(addr.clone(), (Instant::now(), e.clone()));
                    }
                    self.stale = true;
                    for send in group {
                        outcomes[send.part] = Some(Err(e.clone()));
                    }
                    continue;
                }
            };
            for (send, reply) in group.into_iter().zip(replies) {
                let part = &parts[send.part];
                if let Reply::Error(e) = &reply {
                    match redirect(e) {
                        Some(Redirect::Moved { slot, addr: to }) => {
                            let to = with_host(&to, &addr);
                            if let Some(t) = &mut self.topology {
                                t.moved(slot, &to);
                            }
                            self.stale = true;
                            next.push(Send {
                                part: send.part,
                                addr: to,
                                asking: false,
                            });
                            continue;
                        }
                        Some(Redirect::Ask { addr: to }) => {
                            next.push(Send {
                                part: send.part,
                                addr: with_host(&to, &addr),
                                asking: true,
                            });
                            continue;
                        }
                        None if e.starts_with("CLUSTERDOWN") || e.starts_with("TRYAGAIN") => {
                            self.stale = true;
                            outcomes[send.part] = Some(Err(RemoteError::Unreachable(e.clone())));
                            continue;
                        }
                        None => {}
                    }
                }
                outcomes[send.part] = Some(match &part.sub {
                    Call::Admit { .. } => direct::verdict(&reply).map(Answer::Verdict),
                    Call::Script { .. } => direct::numbers(&reply).map(Answer::Numbers),
                    Call::Finish { .. } => match reply {
                        Reply::Error(e) => Err(RemoteError::Failed(e)),
                        _ => Ok(Answer::Settled),
                    },
                });
            }
        }
        next
    }

    /// Reads the slot map when there is none, or it is stale and was not
    /// read in the last [`REFRESH_EVERY`]: from the startup nodes first,
    /// then the known masters; the first answer wins. A failed read keeps
    /// the map it had.
    async fn refresh(&mut self, config: &LinkConfig, deadline: Instant) {
        let due = self.topology.is_none()
            || (self.stale
                && self
                    .last_refresh
                    .is_none_or(|t| t.elapsed() >= REFRESH_EVERY));
        if !due {
            return;
        }
        self.last_refresh = Some(Instant::now());
        let mut candidates = self.seeds.clone();
        if let Some(t) = &self.topology {
            candidates.extend(
                t.nodes()
                    .iter()
                    .filter(|n| !self.seeds.contains(n))
                    .cloned(),
            );
        }
        for addr in candidates {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            let conn = self.conns.remove(&addr);
            let read = monoio::time::timeout(left, slots_of(config, &addr, conn)).await;
            let Ok(Ok((conn, topology))) = read else {
                continue;
            };
            self.down.remove(&addr);
            self.conns.insert(addr, conn);
            // Connections to nodes no longer masters are closed.
            self.conns.retain(|a, _| topology.nodes().contains(a));
            self.down.retain(|a, _| topology.nodes().contains(a));
            self.topology = Some(topology);
            self.stale = false;
            return;
        }
    }
}

/// `CLUSTER SLOTS` from `addr`, over `conn` or a new connection.
async fn slots_of(
    config: &LinkConfig,
    addr: &str,
    conn: Option<Conn>,
) -> Result<(Conn, Topology), RemoteError> {
    let mut conn = match conn {
        Some(c) => c,
        None => Conn::open(config, addr).await?,
    };
    let reply = conn.exchange([["CLUSTER", "SLOTS"]].iter()).await?;
    let topology = reply
        .first()
        .ok_or_else(|| RemoteError::Failed("no CLUSTER SLOTS reply".into()))
        .and_then(|r| Topology::from_cluster_slots(r, addr).map_err(RemoteError::Failed))?;
    Ok((conn, topology))
}

/// Sends `calls` to the node at `addr` as one pipeline (each after
/// `ASKING` when asked to), loading the scripts and resending once on
/// `NOSCRIPT` (other modules' scripts too); one reply per call, and the
/// connection to keep.
async fn on_node(
    config: &LinkConfig,
    addr: &str,
    conn: Option<Conn>,
    calls: &[(&Call, bool)],
) -> Result<(Conn, Vec<Reply>), RemoteError> {
    let mut conn = match conn {
        Some(c) => c,
        None => Conn::open(config, addr).await?,
    };
    let mut replies = pipeline(&mut conn, config, calls).await?;
    let missing: Vec<usize> = (0..replies.len())
        .filter(|&i| matches!(&replies[i], Reply::Error(e) if e.starts_with("NOSCRIPT")))
        .collect();
    if !missing.is_empty() {
        conn.load_scripts().await?;
        let mut extra: Vec<&str> = missing
            .iter()
            .filter_map(|&i| calls[i].0.extra_script().map(|s| s.body()))
            .collect();
        extra.sort_unstable();
        extra.dedup();
        conn.load(&extra).await?;
        let again: Vec<(&Call, bool)> = missing.iter().map(|&i| calls[i]).collect();
        for (i, reply) in missing
            .into_iter()
            .zip(pipeline(&mut conn, config, &again).await?)
        {
            replies[i] = reply;
        }
    }
    Ok((conn, replies))
}

/// One exchange of `calls`, with the node's clock for the deadlines; the
/// `ASKING` replies are dropped.
async fn pipeline(
    conn: &mut Conn,
    config: &LinkConfig,
    calls: &[(&Call, bool)],
) -> Result<Vec<Reply>, RemoteError> {
    let clock = conn.clock;
    let mut encoded = conn.take_out();
    let mut expected = 0;
    for (call, asking) in calls {
        if *asking {
            resp::encode(&["ASKING"], &mut encoded);
            expected += 1;
        }
        script::encode_evalsha(
            call,
            &config.window,
            config.slot_ttl,
            clock.as_ref(),
            &mut encoded,
        );
        expected += 1;
    }
    let replies = conn.exchange_encoded(encoded, expected).await?;
    let mut out = Vec::with_capacity(calls.len());
    let mut replies = replies.into_iter();
    for (_, asking) in calls {
        if *asking {
            replies.next();
        }
        out.extend(replies.next());
    }
    Ok(out)
}

/// A redirect's address with the answering node's host when it names
/// only a port (`:7001`, a node that does not know its own address).
fn with_host(to: &str, from: &str) -> String {
    match (to.strip_prefix(':'), from.rsplit_once(':')) {
        (Some(port), Some((host, _))) => format!("{host}:{port}"),
        _ => to.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_without_a_host_keeps_the_answering_nodes() {
        assert_eq!(with_host(":7001", "10.0.0.1:7000"), "10.0.0.1:7001");
        assert_eq!(with_host("10.0.0.2:7001", "10.0.0.1:7000"), "10.0.0.2:7001");
    }
}
