//! A link to a Redis Cluster, a core's or the control plane's (the same
//! code over either runtime's [`Wire`]): one connection per master, the slot
//! map read with `CLUSTER SLOTS` from the startup nodes (or any known
//! master), each command sent to the master of its slot and every node's
//! share sent in the same round trip, all nodes at once.
//!
//! A `MOVED` reply updates the slot map at once, resends the part to the
//! new owner (at most [`MAX_HOPS`] redirects) and has the whole map read
//! again before the next round trip; an `ASK` reply resends the part after
//! `ASKING`, map unchanged. A node that cannot be reached or does not
//! answer within the caller's deadline fails only its commands, loses its
//! connection, and has the map read again (a replica may have taken over).
//!
//! For the breaker the Cluster is one Redis: a round trip succeeds only
//! when every master of the map is reachable. While a master is down, each
//! round trip counts as a failure (calls to the other masters still get
//! their answers), and one in every [`REFRESH_EVERY`] tries to connect to
//! it again, so the breaker closes once it is back, and only then.

use super::conn::{self, Commands, Conn, Picks, Wire};
use super::endpoint::Endpoint;
use super::error::RemoteError;
use super::resp::Reply;
use super::slots::{redirect, Redirect, Topology};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Redirects one command may follow in one round trip.
const MAX_HOPS: usize = 3;
/// Least time between two reads of the slot map.
const REFRESH_EVERY: Duration = Duration::from_millis(250);

/// Connections to a Cluster and its slot map, on the runtime of `W`.
pub struct ClusterLink<W> {
    seeds: Vec<String>,
    /// Scripts each connection loads (after reading Redis's clock);
    /// `None` for plain commands.
    scripts: Option<&'static [&'static str]>,
    topology: Option<Topology>,
    /// The map must be read again (a redirect or a lost node).
    stale: bool,
    last_refresh: Option<Instant>,
    conns: HashMap<String, Conn<W>>,
    /// Masters that could not be reached: when they were last tried, why.
    down: HashMap<String, (Instant, RemoteError)>,
}

/// Where one command goes in one hop.
struct Send {
    command: usize,
    addr: String,
    asking: bool,
}

/// Each command's reply, or why it got none.
pub type Replies = Vec<Result<Reply, RemoteError>>;

impl<W: Wire> ClusterLink<W> {
    /// A link that starts from `seeds` (`host:port`); with `scripts`, its
    /// connections read Redis's clock and load them.
    pub fn new(seeds: &[String], scripts: Option<&'static [&'static str]>) -> ClusterLink<W> {
        ClusterLink {
            seeds: seeds.to_vec(),
            scripts,
            topology: None,
            stale: true,
            last_refresh: None,
            conns: HashMap::new(),
            down: HashMap::new(),
        }
    }

    /// Why a master of the map is down, if one is: the Cluster counts as
    /// unreachable for the breaker until every master answers.
    pub fn unreachable(&self) -> Option<RemoteError> {
        self.down.values().next().map(|(_, e)| e.clone())
    }

    /// Sends each of `commands` to the master of its slot, all masters at
    /// once, following redirects, within `limit`; one reply per command
    /// (a redirect or `CLUSTERDOWN` / `TRYAGAIN` is never one).
    pub async fn exchange<C: Commands>(
        &mut self,
        endpoint: &Endpoint,
        limit: Duration,
        commands: &C,
    ) -> Replies {
        let deadline = Instant::now() + limit;
        self.refresh(endpoint, limit, deadline).await;
        let mut replies: Vec<Option<Result<Reply, RemoteError>>> =
            (0..commands.len()).map(|_| None).collect();
        let mut sends = Vec::with_capacity(commands.len());
        for (i, reply) in replies.iter_mut().enumerate() {
            let slot = commands.slot(i);
            match self.topology.as_ref().and_then(|t| t.node_of(slot)) {
                Some(addr) => sends.push(Send {
                    command: i,
                    addr: addr.to_string(),
                    asking: false,
                }),
                None => {
                    *reply = Some(Err(RemoteError::Unreachable(format!(
                        "no Cluster node known for slot {slot}"
                    ))))
                }
            }
        }
        for _ in 0..=MAX_HOPS {
            if sends.is_empty() {
                break;
            }
            sends = self
                .hop(endpoint, limit, deadline, commands, sends, &mut replies)
                .await;
        }
        for send in sends {
            replies[send.command] = Some(Err(RemoteError::Failed(format!(
                "more than {MAX_HOPS} Cluster redirects"
            ))));
        }
        self.retry_down(endpoint, limit, deadline).await;
        replies
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(RemoteError::Failed("no reply".into()))))
            .collect()
    }

    /// Connects again to the masters that were down and were not tried in
    /// the last [`REFRESH_EVERY`].
    async fn retry_down(&mut self, endpoint: &Endpoint, limit: Duration, deadline: Instant) {
        let due: Vec<String> = self
            .down
            .iter()
            .filter(|(_, (at, _))| at.elapsed() >= REFRESH_EVERY)
            .map(|(addr, _)| addr.clone())
            .collect();
        for addr in due {
            let left = deadline.saturating_duration_since(Instant::now());
            let opened = W::timeout(left, open(endpoint, self.scripts, &addr))
                .await
                .unwrap_or_else(|| Err(RemoteError::timed_out(limit)));
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

    /// Sends every command of `sends` to its node, all nodes at once; the
    /// commands redirected elsewhere, for the next hop.
    async fn hop<C: Commands>(
        &mut self,
        endpoint: &Endpoint,
        limit: Duration,
        deadline: Instant,
        commands: &C,
        sends: Vec<Send>,
        replies: &mut [Option<Result<Reply, RemoteError>>],
    ) -> Vec<Send> {
        let mut by_node: Vec<(String, Vec<Send>)> = Vec::new();
        for send in sends {
            match by_node.iter_mut().find(|(a, _)| *a == send.addr) {
                Some((_, group)) => group.push(send),
                None => by_node.push((send.addr.clone(), vec![send])),
            }
        }
        let scripts = self.scripts;
        let exchanges = by_node.into_iter().map(|(addr, group)| {
            let conn = self.conns.remove(&addr);
            let picks: Vec<(usize, bool)> = group.iter().map(|s| (s.command, s.asking)).collect();
            async move {
                let left = deadline.saturating_duration_since(Instant::now());
                let result = W::timeout(
                    left,
                    on_node(
                        endpoint,
                        scripts,
                        &addr,
                        conn,
                        commands,
                        Picks::These(&picks),
                    ),
                )
                .await
                .unwrap_or_else(|| Err(RemoteError::timed_out(limit)));
                (addr, group, result)
            }
        });
        let mut next = Vec::new();
        for (addr, group, result) in futures_util::future::join_all(exchanges).await {
            let answers = match result {
                Ok((conn, answers)) => {
                    self.down.remove(&addr);
                    self.conns.insert(addr.clone(), conn);
                    answers
                }
                Err(e) => {
                    if matches!(e, RemoteError::Unreachable(_)) {
                        self.down.insert(addr.clone(), (Instant::now(), e.clone()));
                    }
                    self.stale = true;
                    for send in group {
                        replies[send.command] = Some(Err(e.clone()));
                    }
                    continue;
                }
            };
            for (send, reply) in group.into_iter().zip(answers) {
                if let Reply::Error(e) = &reply {
                    match redirect(e) {
                        Some(Redirect::Moved { slot, addr: to }) => {
                            let to = with_host(&to, &addr);
                            if let Some(t) = &mut self.topology {
                                t.moved(slot, &to);
                            }
                            self.stale = true;
                            next.push(Send {
                                command: send.command,
                                addr: to,
                                asking: false,
                            });
                            continue;
                        }
                        Some(Redirect::Ask { addr: to }) => {
                            next.push(Send {
                                command: send.command,
                                addr: with_host(&to, &addr),
                                asking: true,
                            });
                            continue;
                        }
                        None if e.starts_with("CLUSTERDOWN") || e.starts_with("TRYAGAIN") => {
                            self.stale = true;
                            replies[send.command] = Some(Err(RemoteError::Unreachable(e.clone())));
                            continue;
                        }
                        None => {}
                    }
                }
                replies[send.command] = Some(Ok(reply));
            }
        }
        next
    }

    /// Reads the slot map when there is none, or it is stale and was not
    /// read in the last [`REFRESH_EVERY`]: from the startup nodes first,
    /// then the known masters; the first answer wins. A failed read keeps
    /// the map it had.
    async fn refresh(&mut self, endpoint: &Endpoint, limit: Duration, deadline: Instant) {
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
            let conn = match self.conns.remove(&addr) {
                Some(c) => Ok(c),
                None => W::timeout(left, open(endpoint, self.scripts, &addr))
                    .await
                    .unwrap_or_else(|| Err(RemoteError::timed_out(limit))),
            };
            let Ok(conn) = conn else {
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let read = W::timeout(left, slots_of(conn, &addr)).await;
            let Some(Ok((conn, topology))) = read else {
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

/// A connection to `addr`; with `scripts`, it reads Redis's clock and
/// loads them.
async fn open<W: Wire>(
    endpoint: &Endpoint,
    scripts: Option<&[&str]>,
    addr: &str,
) -> Result<Conn<W>, RemoteError> {
    match scripts {
        Some(scripts) => Conn::open_for_scripts(endpoint, addr, scripts).await,
        None => Conn::open(endpoint, addr).await,
    }
}

/// `CLUSTER SLOTS` from `addr` over `conn`.
async fn slots_of<W: Wire>(
    mut conn: Conn<W>,
    addr: &str,
) -> Result<(Conn<W>, Topology), RemoteError> {
    let reply = conn.exchange([["CLUSTER", "SLOTS"]].iter()).await?;
    let topology = reply
        .first()
        .ok_or_else(|| RemoteError::Failed("no CLUSTER SLOTS reply".into()))
        .and_then(|r| Topology::from_cluster_slots(r, addr).map_err(RemoteError::Failed))?;
    Ok((conn, topology))
}

/// Sends `picks` of `commands` to the node at `addr` as one pipeline
/// ([`conn::send`]), over `conn` or a new connection; one reply per pick,
/// and the connection to keep.
async fn on_node<W: Wire, C: Commands>(
    endpoint: &Endpoint,
    scripts: Option<&[&str]>,
    addr: &str,
    conn: Option<Conn<W>>,
    commands: &C,
    picks: Picks<'_>,
) -> Result<(Conn<W>, Vec<Reply>), RemoteError> {
    let mut conn = match conn {
        Some(c) => c,
        None => open(endpoint, scripts, addr).await?,
    };
    let replies = conn::send(&mut conn, commands, picks).await?;
    Ok((conn, replies))
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
    use crate::redis::conn::Plain;
    use crate::redis::slots::key_slot;
    use crate::redis::tokio_wire::tests::{endpoint, fake_redis, text};
    use crate::redis::tokio_wire::TokioWire;
    use std::sync::{Arc, Mutex, OnceLock};

    fn slots_reply(ranges: &[(u16, u16, &str)]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", ranges.len());
        for (start, end, addr) in ranges {
            let (host, port) = addr.rsplit_once(':').unwrap();
            out += &format!(
                "*3\r\n:{start}\r\n:{end}\r\n*2\r\n${}\r\n{host}\r\n:{port}\r\n",
                host.len()
            );
        }
        out.into_bytes()
    }

    /// On the control plane's runtime: a `MOVED` key goes to its new
    /// master (and goes there directly afterwards), an `ASK` key is sent
    /// after `ASKING` and keeps asking its old master.
    #[tokio::test(flavor = "current_thread")]
    async fn commands_follow_moved_and_ask_redirects() {
        let asking = Arc::new(Mutex::new(false));
        let b_asking = asking.clone();
        let b = fake_redis(Arc::new(move |args| {
            let mut asking = b_asking.lock().unwrap();
            match text(args).as_str() {
                "ASKING" => {
                    *asking = true;
                    b"+OK\r\n".to_vec()
                }
                "GET moved" => b"$1\r\nm\r\n".to_vec(),
                "GET asked" if std::mem::take(&mut *asking) => b"$1\r\na\r\n".to_vec(),
                "GET asked" => b"-ERR not asked\r\n".to_vec(),
                _ => b"+OK\r\n".to_vec(),
            }
        }))
        .await;
        let a_addr: Arc<OnceLock<String>> = Arc::default();
        let a_seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let (me, seen, to) = (a_addr.clone(), a_seen.clone(), b.clone());
        let moved = key_slot(b"moved");
        let a = fake_redis(Arc::new(move |args| {
            let me = me.get().unwrap();
            let command = text(args);
            let mut seen = seen.lock().unwrap();
            seen.push(command.clone());
            let answered_moved = seen.iter().any(|c| c == "GET moved");
            match command.as_str() {
                "CLUSTER SLOTS" if answered_moved => slots_reply(&[
                    (0, moved - 1, me),
                    (moved, moved, &to),
                    (moved + 1, 16383, me),
                ]),
                "CLUSTER SLOTS" => slots_reply(&[(0, 16383, me)]),
                "GET moved" => format!("-MOVED {moved} {to}\r\n").into_bytes(),
                "GET asked" => format!("-ASK {} {to}\r\n", key_slot(b"asked")).into_bytes(),
                _ => b"+OK\r\n".to_vec(),
            }
        }))
        .await;
        a_addr.set(a.clone()).unwrap();
        assert!(moved > 0 && moved < 16383);
        let commands: Vec<Vec<Vec<u8>>> = vec![
            vec![b"GET".to_vec(), b"moved".to_vec()],
            vec![b"GET".to_vec(), b"asked".to_vec()],
        ];
        let mut link = ClusterLink::<TokioWire>::new(std::slice::from_ref(&a), None);
        for round in 0..2 {
            let replies: Vec<Result<Reply, String>> = link
                .exchange(&endpoint(&a), Duration::from_secs(5), &Plain(&commands))
                .await
                .into_iter()
                .map(|r| r.map_err(|e| e.to_string()))
                .collect();
            assert_eq!(
                replies,
                [
                    Ok(Reply::Bulk(Some(b"m".to_vec()))),
                    Ok(Reply::Bulk(Some(b"a".to_vec())))
                ],
                "round {round}"
            );
        }
        let seen = a_seen.lock().unwrap();
        let count = |c: &str| seen.iter().filter(|s| *s == c).count();
        assert_eq!(count("GET moved"), 1, "went to the new master: {seen:?}");
        assert_eq!(count("GET asked"), 2, "ASK leaves the map as it was");
        assert!(link.unreachable().is_none());
    }

    #[test]
    fn a_redirect_without_a_host_keeps_the_answering_nodes() {
        assert_eq!(with_host(":7001", "10.0.0.1:7000"), "10.0.0.1:7001");
        assert_eq!(with_host("10.0.0.2:7001", "10.0.0.1:7000"), "10.0.0.2:7001");
    }
}
