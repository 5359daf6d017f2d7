//! The router's side of cooldowns shared by the fleet: what the request
//! path tells the control plane, without waiting for it.
//!
//! A replica with Redis configured holds a [`FleetLink`] in its router.
//! When `on_end` starts a cooldown it sends [`FleetEvent::Cooled`] (the end
//! as wall-clock unix milliseconds: replicas have different monotonic
//! clocks); with `allowed_fails` or `allowed_fails_policy` set, every
//! failure that counts sends [`FleetEvent::Failed`] so the control plane
//! counts it fleet-wide. Both are `try_send` on a bounded channel: when it is
//! full the event is dropped (the replica keeps its own view) and a warning
//! is logged at most every [`WARN_EVERY_SECS`] seconds.
//!
//! The control plane's side (Redis keys, pub/sub) is
//! `crate::router::cooldowns`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// Capacity of the channel from the cores to the control plane.
pub const QUEUE: usize = 4096;
/// Least interval between two "events dropped" warnings.
const WARN_EVERY_SECS: u64 = 10;

/// What a replica's router tells the fleet.
#[derive(Debug, Clone, PartialEq)]
pub enum FleetEvent {
    /// This replica started a cooldown of `deployment` until `until_unix_ms`.
    Cooled {
        /// The deployment's id.
        deployment: Arc<str>,
        /// When the cooldown ends, in unix milliseconds.
        until_unix_ms: u64,
    },
    /// A failure of `deployment` that counts toward its allowed fails.
    Failed {
        /// The deployment's id.
        deployment: Arc<str>,
        /// Failures allowed before it cools (for this failure's class).
        allowed: u32,
        /// How long it cools when the fleet count exceeds `allowed`.
        cooldown: Duration,
    },
}

/// The sending end held by the router; cheap to clone, carried across
/// snapshot swaps.
#[derive(Debug, Clone)]
pub struct FleetLink {
    tx: mpsc::Sender<FleetEvent>,
    /// Unix seconds of the last "dropped" warning.
    last_warning: Arc<AtomicU64>,
}

impl FleetLink {
    /// A link and the receiving end the control plane drains.
    pub fn channel(capacity: usize) -> (FleetLink, mpsc::Receiver<FleetEvent>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let link = FleetLink {
            tx,
            last_warning: Arc::default(),
        };
        (link, rx)
    }

    /// Hands `event` to the control plane without waiting; drops it when
    /// the queue is full or the control plane is gone.
    pub fn send(&self, event: FleetEvent) {
        if let Err(e) = self.tx.try_send(event) {
            let now = unix_ms() / 1000;
            let last = self.last_warning.load(Relaxed);
            if now >= last.saturating_add(WARN_EVERY_SECS)
                && self
                    .last_warning
                    .compare_exchange(last, now, Relaxed, Relaxed)
                    .is_ok()
            {
                let reason = match e {
                    mpsc::error::TrySendError::Full(_) => "queue full",
                    mpsc::error::TrySendError::Closed(_) => "control plane stopped",
                };
                tracing::warn!(
                    reason,
                    "cooldown events dropped: this replica's cooldowns are not shared until the control plane catches up"
                );
            }
        }
    }
}

/// The wall clock in unix milliseconds (0 before 1970).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_instead_of_waiting() {
        let (link, mut rx) = FleetLink::channel(1);
        let event = |until| FleetEvent::Cooled {
            deployment: "a".into(),
            until_unix_ms: until,
        };
        link.send(event(1));
        link.send(event(2));
        assert_eq!(rx.try_recv().unwrap(), event(1));
        assert!(rx.try_recv().is_err(), "the second was dropped");
        assert!(link.last_warning.load(Relaxed) > 0, "and warned about");
        drop(rx);
        link.send(event(3));
    }
}
