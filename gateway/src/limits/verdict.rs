//! What a limiter check answers, wherever it ran (local counters, Redis,
//! leases).

/// The answer of a check over all of a request's descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every descriptor had room; all were charged.
    Admitted {
        /// The window bucket charged (reconciliation refunds it).
        tick: u64,
        /// Usage of each descriptor before this request.
        used: Vec<u64>,
        /// The bucket each descriptor was charged in, when they differ
        /// (a Redis Cluster charges each slot on its own node's clock);
        /// empty when all were charged in `tick`.
        ticks: Vec<u64>,
    },
    /// Descriptor `index` had no room; nothing was charged.
    Denied {
        /// Which descriptor.
        index: usize,
        /// Its usage.
        used: u64,
        /// The limit enforced (0 when the caller should use the descriptor's).
        limit: u64,
        /// Unix second when room frees up.
        reset_at: u64,
    },
}
