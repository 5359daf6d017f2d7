//! Each core's own pipelined connection to Redis for per-request limiter
//! calls, so the request path makes one Redis round trip and no hop to
//! another thread. Calls queued on a core while a round trip is in flight
//! go out together in the next one (one pipeline per flush, per core).
//!
//! Every round trip has the limiter's deadline; connection errors and
//! timeouts feed the shared [`Breaker`] and drop the connection (a reply
//! may be in flight), script errors only fail their calls. A `NOSCRIPT`
//! reply loads the scripts again and resends those calls once. The flush
//! itself is [`super::link`], shared with the control plane.

use super::link::Upstream;
use super::outcome::Reporter;
use super::release::Releases;
use super::remote::Call;
use super::script;
use super::window::Window;
use super::Verdict;
use crate::redis::{Breaker, Endpoint, MonoioWire, RemoteError, Reply};
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

/// Longest a batch of settlements alone waits for an admission to share its
/// round trip: at a steady rate each request then costs one round trip, not
/// two, and settlements still reach Redis before the admission queued after
/// them (a client's next request finds its slot free). Other replicas see a
/// slot freed this much later.
const FINISH_HOLD: Duration = Duration::from_millis(2);

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
    let mut upstream = Upstream::<MonoioWire>::new(&config);
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
        if batch.iter().all(|call| matches!(call, Call::Finish { .. })) {
            // Nobody waits for a settlement: it rides with the next
            // admission's round trip, ahead of it, when one comes soon.
            monoio::select! {
                _ = link.wake.notified() => {}
                _ = monoio::time::sleep(FINISH_HOLD) => {}
            }
            batch.append(&mut link.queue.borrow_mut());
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
        let next = upstream
            .flush(&config, &mut report, &mut releases, batch)
            .await;
        link.queue.borrow_mut().extend(next);
    }
}

/// Reads `limiter.lua`'s reply.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::BreakerSettings;

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
