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
mod store;

use crate::models::Models;
use crate::router::fleet::{self, FleetEvent, FleetLink};
use futures_util::StreamExt;
use message::{allowed_fails_key, cooldown_key, Announcement, CHANNEL};
use std::sync::Arc;
use std::time::Duration;
use store::{Store, StoreConn};
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
    Redis(#[from] redis::RedisError),
    /// No answer within the deadline.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// The subscription ended (the connection closed).
    #[error("the subscription connection closed")]
    Closed,
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
/// plane; `None` without Redis (cooldowns stay per process).
pub fn shared(redis_url: Option<&str>, cluster: &[String]) -> Option<(FleetLink, CooldownRunner)> {
    let url = redis_url?.to_string();
    let (link, rx) = FleetLink::channel(fleet::QUEUE);
    let replica = uuid::Uuid::new_v4().simple().to_string();
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
    /// `models`, until every sender is gone.
    pub async fn run(mut self, models: Arc<Models>) {
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
        announce(self.rx, client, models, self.replica).await;
    }
}

/// Sends the cores' events to Redis, one pipeline per flush.
async fn announce(
    mut rx: mpsc::Receiver<FleetEvent>,
    client: Store,
    models: Arc<Models>,
    replica: String,
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
        let result = tokio::time::timeout(DEADLINE, flush(&client, &mut conn, &replica, &batch))
            .await
            .unwrap_or(Err(FleetError::Timeout(DEADLINE)));
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

/// Sends `batch`; the fleet counts of its `Failed` events, in order.
async fn flush(
    client: &Store,
    conn: &mut Option<StoreConn>,
    replica: &str,
    batch: &[FleetEvent],
) -> Result<Vec<i64>, FleetError> {
    let pipe = pipeline(replica, batch, fleet::unix_ms());
    if pipe.cmd_iter().next().is_none() {
        return Ok(Vec::new());
    }
    let c = match conn {
        Some(c) => c,
        None => conn.insert(client.connect().await?),
    };
    let counts = c.query(&pipe, |cmd| store::is(cmd, "INCR")).await?;
    Ok(redis::from_redis_value(&redis::Value::Array(counts))?)
}

/// The commands of `batch` at `now_unix_ms`; only the `INCR` replies are
/// kept. A cooldown already over is not sent.
fn pipeline(replica: &str, batch: &[FleetEvent], now_unix_ms: u64) -> redis::Pipeline {
    let mut pipe = redis::pipe();
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
                pipe.cmd("SET")
                    .arg(cooldown_key(deployment))
                    .arg(until_unix_ms)
                    .arg("PX")
                    .arg(left)
                    .ignore()
                    .cmd("PUBLISH")
                    .arg(CHANNEL)
                    .arg(message.encode())
                    .ignore()
                    .cmd("DEL")
                    .arg(allowed_fails_key(deployment))
                    .ignore();
            }
            FleetEvent::Failed { deployment, .. } => {
                let key = allowed_fails_key(deployment);
                pipe.cmd("INCR")
                    .arg(&key)
                    .cmd("EXPIRE")
                    .arg(&key)
                    .arg(FAILS_WINDOW.as_secs())
                    .arg("NX")
                    .ignore();
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
        let error = match subscribe(&client, &models, &replica, &mut down, &mut backoff).await {
            Ok(()) => FleetError::Closed,
            Err(e) => e,
        };
        if !down {
            down = true;
            tracing::warn!(error = %error, "cooldown subscription lost: this replica routes on its own view until Redis returns");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One subscription: subscribe, catch up, apply messages until it ends.
async fn subscribe(
    client: &Store,
    models: &Models,
    replica: &str,
    down: &mut bool,
    backoff: &mut Duration,
) -> Result<(), FleetError> {
    let mut pubsub = within(client.pubsub()).await?;
    within(pubsub.subscribe(CHANNEL)).await?;
    let caught_up = within(catch_up(client, models)).await?;
    if *down {
        *down = false;
        tracing::info!(
            caught_up,
            "cooldown subscription restored: cooldowns are shared with the fleet again"
        );
    }
    *backoff = MIN_BACKOFF;
    let mut messages = pubsub.on_message();
    while let Some(msg) = messages.next().await {
        apply(models, replica, msg.get_payload_bytes());
    }
    Ok(())
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
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.cmd("PTTL").arg(cooldown_key(id));
    }
    let mut conn = client.connect().await?;
    let left = conn.query(&pipe, |_| true).await?;
    let left: Vec<i64> = redis::from_redis_value(&redis::Value::Array(left))?;
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

    fn packed(pipe: &redis::Pipeline) -> String {
        String::from_utf8_lossy(&pipe.get_packed_pipeline()).into_owned()
    }

    #[test]
    fn a_cooldown_is_stored_published_and_resets_the_counter() {
        let batch = [FleetEvent::Cooled {
            deployment: "a".into(),
            until_unix_ms: 10_500,
        }];
        let text = packed(&pipeline("r1", &batch, 10_000));
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
        assert!(
            over.cmd_iter().next().is_none(),
            "an ended cooldown is not sent"
        );
    }

    #[test]
    fn a_failure_is_counted_with_a_window() {
        let batch = [FleetEvent::Failed {
            deployment: "b".into(),
            allowed: 1,
            cooldown: Duration::from_secs(5),
        }];
        let text = packed(&pipeline("r1", &batch, 0));
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

    #[test]
    fn without_redis_nothing_is_shared() {
        assert!(shared(None, &[]).is_none());
        let (_, runner) = shared(Some("redis://127.0.0.1:1"), &[]).unwrap();
        assert_eq!(runner.replica.len(), 32);
    }
}
