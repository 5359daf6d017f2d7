//! Cooldowns shared by the fleet through Redis, run on the control plane.
//!
//! - **Announce.** The cores hand [`FleetEvent`]s over a bounded channel
//!   (see `crate::router::fleet`). A cooldown this replica started is
//!   written to `deployment:{id}:cooldown` (`SET .. PX` the time left) and
//!   published on [`message::CHANNEL`]; events are drained and sent as one
//!   pipeline per flush.
//! - **Listen.** A dedicated pub/sub connection receives the other
//!   replicas' announcements and applies them to the current router
//!   snapshot (atomics only; its own messages and unknown deployments are
//!   ignored). On every (re)connect it first subscribes, then reads the
//!   time left of every known deployment's cooldown key (`PTTL`), so a
//!   replica that starts later or was cut off catches up. It reconnects
//!   with a backoff of [`MIN_BACKOFF`] doubling to [`MAX_BACKOFF`].
//! - **Allowed fails, fleet-wide.** With `allowed_fails` or
//!   `allowed_fails_policy` set, each counted failure is `INCR`ed in
//!   `deployment:{id}:allowed_fails` (expiring [`FAILS_WINDOW`] after the
//!   first failure). The request path never waits for Redis: the local
//!   count decides at once, as without Redis, and when the `INCR` reply
//!   shows the fleet count above the allowed number while the deployment
//!   is not cooling here, the control plane starts the cooldown and
//!   announces it. So a deployment failing a little on every replica cools
//!   once the fleet's failures add up, one Redis round trip later.
//!   Starting a cooldown resets the counter (as the local count is reset).
//! - **Redis Cluster.** With startup nodes, each command is routed by its
//!   key's slot and the subscription is held on one node (a Cluster
//!   forwards every `PUBLISH` to all nodes); see [`store`].
//! - **Outage.** Every Redis error leaves each replica on its own view;
//!   each side logs once when Redis is lost and once when it is back.

pub mod message;
pub mod store;

use crate::models::Models;
use crate::redis::{Breaker, RemoteError};
use crate::router::fleet::{self, FleetEvent, FleetLink};
use message::{allowed_fails_key, cooldown_key, Announcement, CHANNEL};
use std::sync::Arc;
use std::time::Duration;
use store::{Pipeline, Store, StoreConn};
use tokio::sync::mpsc;

/// Events sent in one pipeline at most.
const MAX_BATCH: usize = 256;
/// Deadline of one flush, of a connection and of the catch-up read.
const DEADLINE: Duration = Duration::from_secs(1);
/// First wait before reconnecting the subscription.
pub const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait before reconnecting the subscription.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Lifetime of a fleet allowed-fails counter after its first failure.
pub const FAILS_WINDOW: Duration = Duration::from_secs(60);

/// Why a Redis exchange about cooldowns failed.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// Redis refused or dropped the call.
    #[error("redis: {0}")]
    Redis(#[from] RemoteError),
    /// No answer within the deadline.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
}

/// The control plane's side of shared cooldowns: what it reads from the
/// cores and where Redis is.
pub struct CooldownRunner {
    rx: mpsc::Receiver<FleetEvent>,
    url: String,
    cluster: Vec<String>,
    replica: String,
}

/// With Redis at `redis_url` (a Cluster when `cluster` names its startup
/// nodes), the link the routers send on and the runner for the control
/// plane, whose messages name this process as `replica`; `None` without
/// Redis (cooldowns stay per process).
pub fn shared(
    redis_url: Option<&str>,
    cluster: &[String],
    replica: &str,
) -> Option<(FleetLink, CooldownRunner)> {
    let url = redis_url?.to_string();
    let (link, rx) = FleetLink::channel(fleet::QUEUE);
    let replica = replica.to_string();
    let cluster = cluster.to_vec();
    Some((
        link,
        CooldownRunner {
            rx,
            url,
            cluster,
            replica,
        },
    ))
}

impl CooldownRunner {
    /// Announces this replica's cooldowns and applies the others' to
    /// `models`, until every sender is gone. With the limiter's `breaker`
    /// (the same Redis), nothing is sent while it is open, and each flush
    /// reports its outcome to it.
    pub async fn run(mut self, models: Arc<Models>, breaker: Option<Arc<Breaker>>) {
        let client = match Store::new(&self.url, &self.cluster) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "invalid Redis URL; cooldowns are per process");
                while self.rx.recv().await.is_some() {}
                return;
            }
        };
        tracing::info!(
            replica = %self.replica,
            "cooldowns and allowed-fails counters are shared through Redis"
        );
        tokio::spawn(listen(client.clone(), models.clone(), self.replica.clone()));
        announce(self.rx, client, models, self.replica, breaker).await;
    }
}

/// Sends the cores' events to Redis, one pipeline per flush.
async fn announce(
    mut rx: mpsc::Receiver<FleetEvent>,
    client: Store,
    models: Arc<Models>,
    replica: String,
    breaker: Option<Arc<Breaker>>,
) {
    let mut conn: Option<StoreConn> = None;
    let mut down = false;
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut follow_ups = Vec::new();
    loop {
        if follow_ups.is_empty() {
            match rx.recv().await {
                Some(event) => batch.push(event),
                None => return,
            }
        }
        batch.append(&mut follow_ups);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(event) => batch.push(event),
                Err(_) => break,
            }
        }
        if breaker.as_ref().is_some_and(|b| !b.allow()) {
            // Redis is known to be down: route on this replica's own view
            // rather than wait out a deadline per batch.
            batch.clear();
            continue;
        }
        let result = tokio::time::timeout(DEADLINE, flush(&client, &mut conn, &replica, &batch))
            .await
            .unwrap_or(Err(FleetError::Timeout(DEADLINE)));
        if let Some(b) = &breaker {
            report(b, &result);
        }
        match result {
            Ok(counts) => {
                if down {
                    down = false;
                    tracing::info!("Redis is back: cooldowns are shared with the fleet again");
                }
                follow_ups = crossed(&models, &batch, &counts);
            }
            Err(e) => {
                conn = None;
                if !down {
                    down = true;
                    tracing::warn!(error = %e, "cannot share cooldowns through Redis: this replica routes on its own view until Redis returns");
                }
            }
        }
        batch.clear();
    }
}

/// Tells the limiter's breaker how a flush went: connection errors and
/// timeouts count against Redis, an error reply does not.
fn report<T>(breaker: &Breaker, result: &Result<T, FleetError>) {
    match result {
        Ok(_) => {
            breaker.on_success();
        }
        Err(FleetError::Timeout(_)) | Err(FleetError::Redis(RemoteError::Unreachable(_))) => {
            breaker.on_failure();
        }
        Err(FleetError::Redis(_)) => breaker.abandon_probe(),
    }
}

/// Sends `batch`; the fleet counts of its `Failed` events, in order.
async fn flush(
    client: &Store,
    conn: &mut Option<StoreConn>,
    replica: &str,
    batch: &[FleetEvent],
) -> Result<Vec<i64>, FleetError> {
    let pipe = pipeline(replica, batch, fleet::unix_ms());
    if pipe.is_empty() {
        return Ok(Vec::new());
    }
    let c = match conn {
        Some(c) => c,
        None => conn.insert(client.connect().await?),
    };
    let counts = c.query(&pipe).await?;
    Ok(store::integers(&counts)?)
}

/// The commands of `batch` at `now_unix_ms`; only the `INCR` replies are
/// kept. A cooldown already over is not sent.
fn pipeline(replica: &str, batch: &[FleetEvent], now_unix_ms: u64) -> Pipeline {
    let number = |n: u64| n.to_string().into_bytes();
    let mut pipe = Pipeline::default();
    for event in batch {
        match event {
            FleetEvent::Cooled {
                deployment,
                until_unix_ms,
            } => {
                let left = until_unix_ms.saturating_sub(now_unix_ms);
                if left == 0 {
                    continue;
                }
                let message = Announcement {
                    replica: replica.to_string(),
                    deployment: deployment.to_string(),
                    until_unix_ms: *until_unix_ms,
                };
                pipe.push(
                    false,
                    vec![
                        b"SET".to_vec(),
                        cooldown_key(deployment).into_bytes(),
                        number(*until_unix_ms),
                        b"PX".to_vec(),
                        number(left),
                    ],
                );
                pipe.push(
                    false,
                    vec![
                        b"PUBLISH".to_vec(),
                        CHANNEL.as_bytes().to_vec(),
                        message.encode(),
                    ],
                );
                pipe.push(
                    false,
                    vec![b"DEL".to_vec(), allowed_fails_key(deployment).into_bytes()],
                );
            }
            FleetEvent::Failed { deployment, .. } => {
                let key = allowed_fails_key(deployment).into_bytes();
                pipe.push(true, vec![b"INCR".to_vec(), key.clone()]);
                pipe.push(
                    false,
                    vec![
                        b"EXPIRE".to_vec(),
                        key,
                        number(FAILS_WINDOW.as_secs()),
                        b"NX".to_vec(),
                    ],
                );
            }
        }
    }
    pipe
}

/// Starts the cooldowns whose fleet count crossed the allowed number and
/// are not running here yet; the announcements to send.
fn crossed(models: &Models, batch: &[FleetEvent], counts: &[i64]) -> Vec<FleetEvent> {
    let failed = batch.iter().filter_map(|e| match e {
        FleetEvent::Failed {
            deployment,
            allowed,
            cooldown,
        } => Some((deployment, *allowed, *cooldown)),
        FleetEvent::Cooled { .. } => None,
    });
    let router = models.router();
    let mut announce = Vec::new();
    for ((deployment, allowed, cooldown), count) in failed.zip(counts) {
        if *count <= i64::from(allowed) || router.is_cooling(deployment) {
            continue;
        }
        if let Some(until_unix_ms) = router.cool_for(deployment, cooldown) {
            tracing::info!(
                deployment = %deployment,
                fleet_failures = count,
                allowed,
                seconds = cooldown.as_secs_f64(),
                "deployment cooling down: the fleet's failures exceed allowed_fails"
            );
            announce.push(FleetEvent::Cooled {
                deployment: deployment.clone(),
                until_unix_ms,
            });
        }
    }
    announce
}

/// Applies the other replicas' cooldowns, reconnecting with a backoff.
async fn listen(client: Store, models: Arc<Models>, replica: String) {
    let mut backoff = MIN_BACKOFF;
    let mut down = false;
    loop {
        let Err(error) = subscribe(&client, &models, &replica, &mut down, &mut backoff).await;
        if !down {
            down = true;
            tracing::warn!(error = %error, "cooldown subscription lost: this replica routes on its own view until Redis returns");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One subscription: subscribe, catch up, apply messages until it ends
/// (the connection closed or failed: the error).
async fn subscribe(
    client: &Store,
    models: &Models,
    replica: &str,
    down: &mut bool,
    backoff: &mut Duration,
) -> Result<std::convert::Infallible, FleetError> {
    let mut subscription = within(client.subscribe(CHANNEL)).await?;
    let caught_up = within(catch_up(client, models)).await?;
    if *down {
        *down = false;
        tracing::info!(
            caught_up,
            "cooldown subscription restored: cooldowns are shared with the fleet again"
        );
    }
    *backoff = MIN_BACKOFF;
    loop {
        let payload = subscription.next_message().await?;
        apply(models, replica, &payload);
    }
}

/// Runs `f` within [`DEADLINE`].
async fn within<T, E: Into<FleetError>>(
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, FleetError> {
    match tokio::time::timeout(DEADLINE, f).await {
        Ok(r) => r.map_err(Into::into),
        Err(_) => Err(FleetError::Timeout(DEADLINE)),
    }
}

/// Reads the time left of every known deployment's cooldown and applies
/// it; how many deployments are cooling.
async fn catch_up(client: &Store, models: &Models) -> Result<usize, FleetError> {
    let router = models.router();
    let ids: Vec<&str> = router
        .registry()
        .deployments()
        .iter()
        .map(|d| &*d.id)
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    let mut pipe = Pipeline::default();
    for id in &ids {
        pipe.push(true, vec![b"PTTL".to_vec(), cooldown_key(id).into_bytes()]);
    }
    let mut conn = client.connect().await?;
    let left = store::integers(&conn.query(&pipe).await?)?;
    let mut cooling = 0;
    for (id, ms) in ids.iter().zip(left) {
        if ms > 0
            && router
                .cool_for(id, Duration::from_millis(ms as u64))
                .is_some()
        {
            cooling += 1;
            tracing::info!(
                deployment = id,
                ms,
                "deployment cooling down: caught up from Redis"
            );
        }
    }
    Ok(cooling)
}

/// Applies one message from the channel.
fn apply(models: &Models, replica: &str, payload: &[u8]) {
    let announcement = match Announcement::decode(payload) {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(error = %e, "ignored a message on the cooldown channel");
            return;
        }
    };
    if announcement.replica == replica {
        return;
    }
    let router = models.router();
    if router.cool_until_unix(&announcement.deployment, announcement.until_unix_ms) {
        tracing::info!(
            deployment = %announcement.deployment,
            from = %announcement.replica,
            ms_left = announcement.until_unix_ms.saturating_sub(fleet::unix_ms()),
            "deployment cooling down: announced by another replica"
        );
    } else {
        tracing::debug!(deployment = %announcement.deployment, "cooldown of a deployment this replica does not serve");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::RouterSettings;

    fn models() -> Models {
        let cfg = crate::config::Config::parse(
            std::path::Path::new("c.yaml"),
            "model_list:\n  - model_name: g\n    litellm_params: {model: mock/a}\n    model_info: {id: a}\n  - model_name: g\n    litellm_params: {model: mock/b}\n    model_info: {id: b}\n",
            &|_| None,
        )
        .unwrap();
        Models::new(cfg.deployments, RouterSettings::default(), false, None)
    }

    #[test]
    fn a_cooldown_is_stored_published_and_resets_the_counter() {
        let batch = [FleetEvent::Cooled {
            deployment: "a".into(),
            until_unix_ms: 10_500,
        }];
        let text = pipeline("r1", &batch, 10_000).packed();
        for part in [
            "SET",
            "deployment:a:cooldown",
            "10500",
            "PX",
            "\r\n500\r\n",
            "PUBLISH",
            CHANNEL,
            r#"{"replica":"r1","deployment":"a","until_unix_ms":10500}"#,
            "DEL",
            "deployment:a:allowed_fails",
        ] {
            assert!(text.contains(part), "{part} in {text:?}");
        }
        let over = pipeline("r1", &batch, 10_500);
        assert!(over.is_empty(), "an ended cooldown is not sent");
    }

    #[test]
    fn a_failure_is_counted_with_a_window() {
        let batch = [FleetEvent::Failed {
            deployment: "b".into(),
            allowed: 1,
            cooldown: Duration::from_secs(5),
        }];
        let text = pipeline("r1", &batch, 0).packed();
        for part in [
            "INCR",
            "deployment:b:allowed_fails",
            "EXPIRE",
            "\r\n60\r\n",
            "NX",
        ] {
            assert!(text.contains(part), "{part} in {text:?}");
        }
    }

    #[test]
    fn the_fleet_count_starts_a_cooldown_once() {
        let models = models();
        let failed = |id: &str| FleetEvent::Failed {
            deployment: id.into(),
            allowed: 2,
            cooldown: Duration::from_secs(5),
        };
        let batch = [failed("a"), failed("b"), failed("zz")];
        assert!(
            crossed(&models, &batch, &[2, 1, 9]).is_empty(),
            "not above 2"
        );
        assert!(!models.router().is_cooling("a"));
        let out = crossed(&models, &batch, &[3, 1, 9]);
        assert_eq!(out.len(), 1, "only a, and not the unknown zz: {out:?}");
        let FleetEvent::Cooled {
            deployment,
            until_unix_ms,
        } = &out[0]
        else {
            panic!("{out:?}");
        };
        assert_eq!(&**deployment, "a");
        assert!(until_unix_ms.abs_diff(fleet::unix_ms() + 5_000) < 100);
        assert!(models.router().is_cooling("a") && !models.router().is_cooling("b"));
        assert!(
            crossed(&models, &batch, &[4, 1, 9]).is_empty(),
            "already cooling: not announced twice"
        );
    }

    #[test]
    fn announcements_from_others_apply_and_our_own_are_ignored() {
        let models = models();
        let msg = |replica: &str, id: &str| {
            Announcement {
                replica: replica.into(),
                deployment: id.into(),
                until_unix_ms: fleet::unix_ms() + 60_000,
            }
            .encode()
        };
        apply(&models, "me", &msg("me", "a"));
        assert!(!models.router().is_cooling("a"), "our own");
        apply(&models, "me", &msg("other", "nope"));
        apply(&models, "me", b"garbage");
        assert!(!models.router().is_cooling("a") && !models.router().is_cooling("b"));
        apply(&models, "me", &msg("other", "b"));
        assert!(models.router().is_cooling("b"));
        assert!(!models.router().is_cooling("a"));
    }

    fn open_breaker() -> Arc<Breaker> {
        let breaker = Arc::new(Breaker::new(crate::redis::BreakerSettings {
            enabled: true,
            threshold: 1,
            recovery: Duration::from_secs(3600),
        }));
        breaker.on_failure();
        breaker
    }

    /// Runs the announcer over one cooldown event until its queue closes.
    async fn announce_one(url: &str, breaker: Option<Arc<Breaker>>) {
        let (tx, rx) = mpsc::channel(4);
        tx.send(FleetEvent::Cooled {
            deployment: "a".into(),
            until_unix_ms: fleet::unix_ms() + 5_000,
        })
        .await
        .unwrap();
        drop(tx);
        let client = Store::new(url, &[]).unwrap();
        announce(rx, client, Arc::new(models()), "me".into(), breaker).await;
    }

    #[tokio::test]
    async fn nothing_is_sent_while_the_limiters_breaker_is_open() {
        let redis = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        redis.set_nonblocking(true).unwrap();
        let url = format!("redis://{}", redis.local_addr().unwrap());
        announce_one(&url, Some(open_breaker())).await;
        let accepted = redis.accept();
        assert!(
            matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "a connection was opened: {accepted:?}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_redis_counts_against_the_breaker() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let breaker = Arc::new(Breaker::new(crate::redis::BreakerSettings {
            enabled: true,
            threshold: 1,
            recovery: Duration::from_secs(3600),
        }));
        announce_one(&format!("redis://127.0.0.1:{port}"), Some(breaker.clone())).await;
        assert_eq!(breaker.state(), crate::redis::BreakerState::Open);
    }

    #[test]
    fn without_redis_nothing_is_shared() {
        assert!(shared(None, &[], "r").is_none());
        let (_, runner) = shared(Some("redis://127.0.0.1:1"), &[], "replica-id").unwrap();
        assert_eq!(runner.replica, "replica-id");
    }
}
