//! The Redis side of the limiter, run on the control plane: limiter calls
//! from every core are drained from one queue and sent as one pipeline per
//! flush, each call one `EVALSHA` of `limiter.lua` (a batch of admissions and settlements), over the
//! same connection code as the cores' links ([`crate::redis::conn`], on tokio:
//! [`crate::redis::tokio_wire`]; a Cluster through [`ClusterLink`]).
//!
//! Every flush has a deadline; connection errors and timeouts feed the
//! [`Breaker`], other errors (a script error) only fail the calls. A
//! `NOSCRIPT` reply loads the scripts again and resends those calls once.

use super::call::Call;
use super::lease::LeaseTable;
use super::link::{LinkConfig, Upstream};
use super::outcome::Reporter;
use super::release::Releases;
use super::window::Window;
use crate::redis::tokio_wire::{self, TokioWire};
use crate::redis::{Breaker, RemoteError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Calls drained into one pipeline at most.
const MAX_BATCH: usize = 512;
/// Capacity of the queue from the cores.
pub const QUEUE: usize = 8192;

/// The Redis connection settings and what the runner reports to.
pub struct RemoteRunner {
    /// The calls from the cores.
    pub rx: mpsc::Receiver<Call>,
    /// The Redis URL.
    pub url: String,
    /// The breaker the cores read.
    pub breaker: Arc<Breaker>,
    /// The window the scripts count in.
    pub window: Window,
    /// Deadline of one flush.
    pub deadline: Duration,
    /// Lifetime of a parallel slot.
    pub slot_ttl: Duration,
    /// What the fallback does, for the log line when it engages.
    pub fallback_note: String,
    /// Script calls sent to Redis since start (admits, settlements, lease
    /// grants and ends), read by `/health/readiness`.
    pub calls: Arc<AtomicU64>,
    /// Lease mode: the leases to end when they expire.
    pub leases: Option<LeaseExpiry>,
    /// A Redis Cluster's startup nodes; empty for one server.
    pub cluster: Vec<String>,
}

/// What the control plane needs to end expired leases.
pub struct LeaseExpiry {
    /// The process's leases.
    pub table: Arc<LeaseTable>,
    /// The limiter's queue, held weakly so the runner still stops when the
    /// limiter is gone.
    pub tx: mpsc::WeakSender<Call>,
}

impl RemoteRunner {
    /// Serves calls until every sender is gone.
    pub async fn run(mut self) {
        let endpoint = match tokio_wire::control_endpoint(&self.url) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(error = %e, "invalid Redis URL; rate limits are enforced per process");
                while let Some(call) = self.rx.recv().await {
                    if let Call::Admit { reply, .. } = call {
                        let _ = reply.send(Err(RemoteError::Failed("invalid Redis URL".into())));
                    }
                }
                return;
            }
        };
        if let Some(leases) = self.leases.take() {
            tokio::spawn(expire_leases(leases));
        }
        let config = LinkConfig {
            endpoint,
            window: self.window,
            slot_ttl: self.slot_ttl,
            deadline: self.deadline,
            breaker: self.breaker.clone(),
            calls: self.calls.clone(),
            fallback_note: self.fallback_note.clone(),
            cluster: self.cluster.clone(),
        };
        let mut upstream = Upstream::<TokioWire>::new(&config);
        let mut report = Reporter {
            breaker: &config.breaker,
            fallback_note: &config.fallback_note,
            last_complaint: None,
        };
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut orphans = Vec::new();
        let mut releases = Releases::default();
        loop {
            if orphans.is_empty() {
                let due_at = releases.next_due();
                let release_timer = async {
                    match due_at {
                        Some(at) => tokio::time::sleep_until(at.into()).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    call = self.rx.recv() => match call {
                        Some(call) => batch.push(call),
                        None => return,
                    },
                    _ = release_timer => {}
                }
            }
            batch.append(&mut orphans);
            batch.extend(releases.due(std::time::Instant::now()));
            while batch.len() < MAX_BATCH {
                match self.rx.try_recv() {
                    Ok(call) => batch.push(call),
                    Err(_) => break,
                }
            }
            // Admissions whose request gave up waiting are not sent.
            batch.retain(|call| !matches!(call, Call::Admit { reply, .. } if reply.is_closed()));
            if batch.is_empty() {
                continue;
            }
            self.calls.fetch_add(batch.len() as u64, Ordering::Relaxed);
            orphans = upstream
                .flush(
                    &config,
                    &mut report,
                    &mut releases,
                    std::mem::take(&mut batch),
                )
                .await;
        }
    }
}

/// Ends expired leases and renews slot leases every half lease life, until
/// the limiter is gone.
async fn expire_leases(leases: LeaseExpiry) {
    let every = (leases.table.ttl() / 2).max(Duration::from_millis(5));
    loop {
        tokio::time::sleep(every).await;
        let Some(tx) = leases.tx.upgrade() else {
            return;
        };
        let calls = leases.table.end_expired();
        for call in calls.into_iter().chain(leases.table.renew_slots()) {
            if tx.try_send(call).is_err() {
                tracing::warn!("limiter queue full: an expired lease was not returned or a slot lease not renewed; its units lapse with the window, its slots with the lease life");
            }
        }
    }
}
