//! The change listener: `LISTEN gateway_changes` on a dedicated connection,
//! so a key, team, user or model changed by another replica is refreshed in
//! this replica's key cache or model snapshot within one notification hop.
//!
//! Notifications sent by this process's own pool sessions are skipped: the
//! control plane refreshed its caches when it published those changes. The
//! connection is re-opened with backoff when lost; after every (re)connect,
//! every stored model and every cached key is re-read (notifications sent
//! while deaf are lost), including keys deleted meanwhile, found through the
//! store's tombstones.

use super::SyncCtx;
use crate::store::postgres::{
    describe, pg_target, PgConnection, PgTarget, SessionIds, CHANNEL, RESYNC_TOKENS,
};
use crate::store::Change;
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, Notification};

/// First wait after a failed connection; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(200);
/// Longest wait between connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often the connection is checked, so a silently dead one is noticed.
const PING_EVERY: Duration = Duration::from_secs(15);
/// Longest a check may take.
const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// Tombstones are read from this long before the connection was lost, to
/// cover clock differences between replicas.
const CLOCK_SKEW: chrono::Duration = chrono::Duration::seconds(60);

/// Whether the listener is connected and caught up.
static LISTENING: AtomicBool = AtomicBool::new(false);

/// Whether this process hears other replicas' changes now (for
/// `/health/readiness`).
pub fn is_listening() -> bool {
    LISTENING.load(Ordering::Relaxed)
}

/// Where and how to listen.
pub struct ListenConfig {
    /// The database URL (the store's).
    pub url: String,
    /// This process's pool sessions, whose notifications are skipped.
    pub own_sessions: Arc<SessionIds>,
}

/// Listens until the process ends.
pub async fn run(ctx: Arc<SyncCtx>, listen: ListenConfig) {
    let config = match pg_target(&listen.url) {
        Ok(mut target) => {
            // Named apart from the pool's sessions in pg_stat_activity.
            let name = format!(
                "{}-listener",
                target.config.get_application_name().unwrap_or("gateway")
            );
            target.config.application_name(name);
            target
        }
        Err(e) => {
            tracing::error!(error = %e, "change listener not started: other replicas' changes will not reach this one");
            return;
        }
    };
    let mut listener = Listener {
        ctx,
        config,
        own: listen.own_sessions,
        backoff: MIN_BACKOFF,
        deaf_since: Some(Utc::now()),
    };
    loop {
        let Err(e) = listener.session().await;
        LISTENING.store(false, Ordering::Relaxed);
        listener.deaf_since.get_or_insert_with(Utc::now);
        tracing::warn!(error = %e, retry_in = ?listener.backoff, "change listener disconnected");
        tokio::time::sleep(listener.backoff).await;
        listener.backoff = (listener.backoff * 2).min(MAX_BACKOFF);
    }
}

/// The listener's state across reconnections.
struct Listener {
    ctx: Arc<SyncCtx>,
    config: PgTarget,
    /// This process's pool sessions.
    own: Arc<SessionIds>,
    /// Wait before the next connection attempt.
    backoff: Duration,
    /// Since when notifications may have been missed; `None` while
    /// listening.
    deaf_since: Option<DateTime<Utc>>,
}

impl Listener {
    /// One connection's life: connect, listen, catch up, then apply
    /// notifications until the connection fails.
    async fn session(&mut self) -> Result<std::convert::Infallible, String> {
        let (client, connection) = self.config.connect().await.map_err(|e| describe(&e))?;
        let mut notes = pump(connection);
        client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .await
            .map_err(|e| describe(&e))?;
        self.backoff = MIN_BACKOFF;
        self.resync(&client).await?;
        self.deaf_since = None;
        LISTENING.store(true, Ordering::Relaxed);
        tracing::info!("listening for key, team, user and model changes of other replicas");
        self.serve(&client, &mut notes).await
    }

    /// Re-reads every stored model, the set of known keys, and every cached
    /// key that exists or was deleted since `deaf_since` (none while the key
    /// cache is empty).
    async fn resync(&self, client: &Client) -> Result<(), String> {
        let models = self
            .ctx
            .models
            .reload(self.ctx.store())
            .await
            .map_err(|e| format!("resync: {e}"))?;
        tracing::info!(models, "stored models resynchronized after (re)connecting");
        let known = self
            .ctx
            .keys
            .reload_known(self.ctx.store())
            .await
            .map_err(|e| format!("resync: {e}"))?;
        tracing::info!(known, "known keys reloaded after (re)connecting");
        if self.ctx.keys.is_empty() {
            return Ok(());
        }
        let since = (self.deaf_since.unwrap_or_else(Utc::now) - CLOCK_SKEW).naive_utc();
        let rows = client
            .query_raw(RESYNC_TOKENS, [&since])
            .await
            .map_err(|e| describe(&e))?;
        let mut rows = std::pin::pin!(rows);
        let mut count = 0usize;
        while let Some(row) = rows.next().await {
            let token: String = row.and_then(|r| r.try_get(0)).map_err(|e| describe(&e))?;
            self.ctx
                .keys
                .refresh(self.ctx.store(), &Change::Key(token))
                .await
                .map_err(|e| format!("resync: {e}"))?;
            count += 1;
        }
        tracing::info!(
            checked = count,
            "key cache resynchronized after (re)connecting"
        );
        Ok(())
    }

    /// Applies notifications as they come; checks the connection when
    /// quiet. Returns when it fails.
    async fn serve(
        &self,
        client: &Client,
        notes: &mut mpsc::UnboundedReceiver<Notification>,
    ) -> Result<std::convert::Infallible, String> {
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.reset();
        loop {
            tokio::select! {
                note = notes.recv() => match note {
                    Some(note) => self.apply(&note).await?,
                    None => return Err("connection closed".into()),
                },
                _ = ping.tick() => match tokio::time::timeout(PING_TIMEOUT, client.simple_query("SELECT 1")).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(describe(&e)),
                    Err(_) => return Err(format!("no answer to a check within {PING_TIMEOUT:?}")),
                },
            }
        }
    }

    /// Refreshes what one notification names, unless this process sent it.
    /// A refresh that fails ends the session, so the reconnect's resync
    /// catches the change up.
    async fn apply(&self, note: &Notification) -> Result<(), String> {
        if self.own.contains(note.process_id()) {
            return Ok(());
        }
        match Change::parse(note.payload()) {
            Some(change) => self
                .ctx
                .refresh(&change)
                .await
                .map_err(|e| format!("refresh after a notification: {e}")),
            None => {
                tracing::debug!(
                    payload = note.payload(),
                    "ignoring an unknown change notification"
                );
                Ok(())
            }
        }
    }
}

/// Drives the connection on its own task and forwards its notifications;
/// the channel closes when the connection ends.
fn pump(mut connection: PgConnection) -> mpsc::UnboundedReceiver<Notification> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        let mut messages = std::pin::pin!(messages);
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(note)) => {
                    if tx.send(note).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %describe(&e), "change listener connection failed");
                    return;
                }
            }
        }
    });
    rx
}
