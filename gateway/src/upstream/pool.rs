//! Idle upstream connections of one core, per origin, with idle expiry.

use super::conn::UpstreamConn;
use crate::keyed_hash::KeyedHash;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Identifies an origin: connections are only reused for the same one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    /// Host name or address.
    pub host: Arc<str>,
    /// TCP port.
    pub port: u16,
    /// Whether TLS is used.
    pub tls: bool,
}

/// Most idle connections kept per origin and core.
const MAX_IDLE_PER_ORIGIN: usize = 256;

/// Idle connections of one core.
pub struct Pool {
    /// Keyed with aHash: the origins come from the configuration, and
    /// SipHash cost two hashes of a host name per request.
    idle: HashMap<Origin, Vec<(UpstreamConn, Instant)>, KeyedHash>,
    max_idle: Duration,
}

impl Pool {
    /// A pool whose connections expire after `max_idle`.
    pub fn new(max_idle: Duration) -> Self {
        Pool {
            idle: HashMap::default(),
            max_idle,
        }
    }

    /// The most recently used live connection to `origin`, if any.
    pub fn take(&mut self, origin: &Origin) -> Option<UpstreamConn> {
        let list = self.idle.get_mut(origin)?;
        let now = Instant::now();
        while let Some((conn, since)) = list.pop() {
            if now.duration_since(since) < self.max_idle {
                return Some(conn);
            }
        }
        None
    }

    /// Returns a connection whose last response was fully read.
    pub fn put(&mut self, origin: &Origin, conn: UpstreamConn) {
        if let Some(list) = self.idle.get_mut(origin) {
            if list.len() < MAX_IDLE_PER_ORIGIN {
                list.push((conn, Instant::now()));
            }
            return;
        }
        self.idle
            .insert(origin.clone(), vec![(conn, Instant::now())]);
    }

    /// Drops every connection idle for longer than the limit.
    pub fn expire(&mut self) {
        let now = Instant::now();
        let max = self.max_idle;
        for list in self.idle.values_mut() {
            list.retain(|(_, since)| now.duration_since(*since) < max);
        }
        self.idle.retain(|_, list| !list.is_empty());
    }

    /// Number of idle connections held.
    pub fn idle_count(&self) -> usize {
        self.idle.values().map(Vec::len).sum()
    }
}
