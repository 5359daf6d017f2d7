//! One flush of limiter calls to Redis, the same on the cores and the
//! control plane: to one server (one pipeline, within the limiter's
//! deadline) or to a Cluster ([`ClusterLink`], the deadline per hop);
//! the [`Reporter`] tells the breaker and hands out the verdicts, a
//! connection that failed is dropped (and opened again by the next
//! flush), and the slots of lost calls are released later
//! ([`Releases`]). The one place for deadlines, the breaker and
//! reconnection, whichever runtime sends.

use super::batch::{GroupedCalls, SlotBatches};
use super::call::Call;
use super::outcome::Reporter;
use super::release::Releases;
use super::script::{self, LIMITER_SCRIPTS};
use super::split::{self, Answer, Merged};
use super::window::Window;
use crate::redis::{self, Breaker, ClusterLink, Conn, Endpoint, RemoteError, Reply, Wire};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// The name each core's link gives itself (`CLIENT SETNAME`).
pub const LINK_NAME: &str = "gateway-limiter-core";

/// Where and how the links connect; shared by every core.
#[derive(Debug)]
pub struct LinkConfig {
    /// The server (or the Cluster's credentials and TLS) and the log-in.
    pub endpoint: Endpoint,
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
    /// A Redis Cluster's startup nodes (`host:port`); empty for one server.
    pub cluster: Vec<String>,
}

impl LinkConfig {
    /// Reads `redis://[[user]:password@]host[:port][/db]`, and the same
    /// with `rediss://` when `tls` (the client config: the gateway's roots)
    /// is given; `None` for anything else (`rediss://...#insecure` and
    /// Unix sockets among them), which goes through the control plane.
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
        let endpoint = Endpoint::from_url(url, LINK_NAME, |verify| verify.then_some(tls).flatten())
            .filter(|e| !e.unix)?;
        Some(LinkConfig {
            endpoint,
            window,
            slot_ttl,
            deadline,
            breaker,
            calls,
            fallback_note,
            cluster: Vec::new(),
        })
    }
}

/// Where one runtime's limiter calls go.
pub enum Upstream<W> {
    /// One server, and the connection to it once open.
    Single(Option<Conn<W>>),
    /// A Cluster.
    Cluster(Box<ClusterLink<W>>),
}

impl<W: Wire> Upstream<W> {
    /// The link `config` describes (a Cluster when it names startup
    /// nodes); nothing is opened yet.
    pub fn new(config: &LinkConfig) -> Upstream<W> {
        match config.cluster.is_empty() {
            true => Upstream::Single(None),
            false => Upstream::Cluster(Box::new(ClusterLink::new(
                &config.cluster,
                Some(LIMITER_SCRIPTS),
            ))),
        }
    }

    /// Sends `batch` and reports the outcome; the calls to send next (the
    /// give-backs of admissions nobody waits for, a Cluster's
    /// compensations, what other modules' scripts hand back).
    pub async fn flush(
        &mut self,
        config: &LinkConfig,
        report: &mut Reporter<'_>,
        releases: &mut Releases,
        batch: Vec<Call>,
    ) -> Vec<Call> {
        let conn = match self {
            Upstream::Cluster(cluster) => {
                let merged = cluster_round_trip(cluster, config, &batch).await;
                releases.after_failure(&merged.lost);
                let mut next = report.concluded(
                    batch,
                    merged.answers.into_iter(),
                    merged.unreachable.as_ref(),
                );
                next.extend(merged.compensations);
                return next;
            }
            Upstream::Single(conn) => conn,
        };
        let calls = GroupedCalls::new(&batch, &config.window, config.slot_ttl);
        let result = W::timeout(
            config.deadline,
            redis::round_trip(conn, &config.endpoint, LIMITER_SCRIPTS, &calls),
        )
        .await
        .unwrap_or_else(|| Err(RemoteError::timed_out(config.deadline)));
        match result {
            Ok(replies) => {
                let replies = calls.replies(replies);
                report.succeeded(batch, replies.iter().map(script::read_numbers))
            }
            Err(err) => {
                releases.after_failure(&batch);
                if report.failed(batch, &err) {
                    *conn = None;
                }
                Vec::new()
            }
        }
    }
}

/// Sends `batch` over a Cluster, each call split by slot and each slot's
/// limiter operations as one script call, and combines the replies,
/// within the limiter's deadline.
async fn cluster_round_trip<W: Wire>(
    cluster: &mut ClusterLink<W>,
    config: &LinkConfig,
    batch: &[Call],
) -> Merged {
    let parts = split::split(batch);
    let calls = SlotBatches::new(&parts, &config.window, config.slot_ttl);
    let replies = calls.replies(
        cluster
            .exchange(&config.endpoint, config.deadline, &calls)
            .await,
    );
    let outcomes = parts
        .iter()
        .zip(replies)
        .map(|(part, reply)| {
            let reply = reply?;
            match &part.sub {
                Call::Admit { .. } => script::read_verdict(&reply).map(Answer::Verdict),
                Call::Script { .. } => script::read_numbers(&reply).map(Answer::Numbers),
                Call::Finish { .. } => match reply {
                    Reply::Error(e) => Err(RemoteError::Failed(e)),
                    _ => Ok(Answer::Settled),
                },
            }
        })
        .collect();
    let mut merged = split::merge(batch, parts, outcomes);
    if merged.unreachable.is_none() {
        merged.unreachable = cluster.unreachable();
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::call::Entry;
    use crate::limits::descriptor::{Descriptor, Kind, Scope};
    use crate::limits::verdict::Verdict;
    use crate::limits::window::Window;
    use crate::redis::breaker::{Breaker, BreakerSettings, BreakerState};
    use crate::redis::tokio_wire::tests::{fake_redis, text};
    use crate::redis::tokio_wire::TokioWire;
    use crate::redis::RemoteError;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    use tokio::sync::oneshot;

    fn admit() -> (Call, oneshot::Receiver<Result<Verdict, RemoteError>>) {
        let d = Descriptor::new(Scope::ApiKey, "k", Kind::Requests, 10);
        let (reply, rx) = oneshot::channel();
        let call = Call::Admit {
            entries: vec![Entry::charge(&d, 10, 1)],
            request_id: "r".into(),
            deadline: Instant::now() + Duration::from_secs(5),
            reply,
        };
        (call, rx)
    }

    /// On the control plane's runtime: a flush Redis does not answer
    /// within the deadline fails its admission as unreachable, counts for
    /// the breaker and drops the connection; the next flush connects
    /// again, gets its verdict and closes the breaker.
    #[tokio::test(flavor = "current_thread")]
    async fn a_timed_out_flush_opens_the_breaker_and_the_next_one_reconnects() {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = seen.clone();
        let addr = fake_redis(Arc::new(move |args| {
            let mut seen = log.lock().unwrap();
            let answered_before = seen.iter().any(|c| c.starts_with("EVALSHA"));
            seen.push(text(args));
            match args[0].as_slice() {
                b"EVALSHA" if !answered_before => Vec::new(),
                b"EVALSHA" => b"*3\r\n:1\r\n:5\r\n:1\r\n".to_vec(),
                b"TIME" => b"*2\r\n$10\r\n1700000000\r\n$1\r\n0\r\n".to_vec(),
                _ => b"+OK\r\n".to_vec(),
            }
        }))
        .await;
        let breaker = Arc::new(Breaker::new(BreakerSettings {
            threshold: 1,
            ..BreakerSettings::default()
        }));
        let config = LinkConfig::from_url(
            &format!("redis://{addr}"),
            Window::new(60),
            Duration::from_secs(1),
            Duration::from_millis(300),
            breaker.clone(),
            Arc::default(),
            String::new(),
            None,
        )
        .unwrap();
        let mut upstream = Upstream::<TokioWire>::new(&config);
        let mut report = Reporter {
            breaker: &config.breaker,
            fallback_note: "",
            last_complaint: None,
        };
        let mut releases = Releases::default();
        let (call, rx) = admit();
        let next = upstream
            .flush(&config, &mut report, &mut releases, vec![call])
            .await;
        assert!(next.is_empty());
        assert!(matches!(
            rx.await.unwrap(),
            Err(RemoteError::Unreachable(_))
        ));
        assert_ne!(breaker.state(), BreakerState::Closed);
        let (call, rx) = admit();
        upstream
            .flush(&config, &mut report, &mut releases, vec![call])
            .await;
        assert_eq!(
            rx.await.unwrap().unwrap(),
            Verdict::Admitted {
                tick: 5,
                used: vec![1],
                ticks: Vec::new()
            }
        );
        assert_eq!(breaker.state(), BreakerState::Closed);
        let seen = seen.lock().unwrap();
        let logins = seen
            .iter()
            .filter(|c| c.starts_with("CLIENT SETNAME"))
            .count();
        assert_eq!(logins, 2, "connected again: {seen:?}");
    }

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
            (c.endpoint.addr.as_str(), c.endpoint.password, c.endpoint.db),
            ("127.0.0.1:6380", None, None)
        );
        let c = parse("redis://:p%40ss@r1/2").unwrap();
        assert_eq!(c.endpoint.addr, "r1:6379");
        assert_eq!(
            (
                c.endpoint.username,
                c.endpoint.password.as_deref(),
                c.endpoint.db
            ),
            (None, Some("p@ss"), Some(2))
        );
        let c = parse("redis://user:pw@[::1]:7000/").unwrap();
        assert_eq!(
            (c.endpoint.addr.as_str(), c.endpoint.username.as_deref()),
            ("[::1]:7000", Some("user"))
        );
        let secure = parse("rediss://:pw@secure.example:6380/1").unwrap();
        assert_eq!(secure.endpoint.addr, "secure.example:6380");
        assert!(secure.endpoint.tls.is_some());
        assert!(parse("redis://plain:6380").unwrap().endpoint.tls.is_none());
        assert!(
            parse("rediss://secure:6380/#insecure").is_none(),
            "left to the control plane's client"
        );
        assert!(parse("redis+unix:///tmp/r.sock").is_none());
        assert!(parse("unix:///tmp/r.sock").is_none());
        assert!(parse("redis://h/notadb").is_none());
    }
}
