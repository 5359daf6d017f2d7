//! Served-request counters, aggregated over all worker threads.
//!
//! Each worker writes only its own shard (an uncontended lock, so the hot
//! path costs a couple of atomic operations); readers merge all shards.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use serde::Serialize;

/// Request and token totals.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Successfully served LLM requests.
    pub requests: u64,
    /// Prompt (input) tokens of those requests.
    pub prompt_tokens: u64,
    /// Completion (output) tokens of those requests.
    pub completion_tokens: u64,
}

impl Counters {
    fn add(&mut self, prompt: u64, completion: u64) {
        self.requests += 1;
        self.prompt_tokens += prompt;
        self.completion_tokens += completion;
    }

    fn merge(&mut self, other: &Counters) {
        self.requests += other.requests;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
    }
}

/// One worker's counters.
#[derive(Default)]
struct Table {
    total: Counters,
    received: u64,
    failed: u64,
    token_grants: u64,
    by_model: HashMap<String, Counters>,
    by_key: HashMap<String, Counters>,
}

/// A shard padded to its own cache lines so workers never share one.
#[repr(align(128))]
#[derive(Default)]
struct Shard(Mutex<Table>);

/// The merged view returned by `GET /_stats`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Totals over everything.
    #[serde(flatten)]
    pub total: Counters,
    /// Provider API calls received (model calls, JSON or multipart form,
    /// and Files and Batch API calls), whatever the answer: served, refused
    /// by the mock's own checks, failed by injection or cut by a fault.
    /// What a test counts to show a request never reached the upstream.
    pub received: u64,
    /// Requests answered with an injected error (`--error-rate`,
    /// `x-mock-status`): attempts a gateway made that did not succeed.
    pub failed: u64,
    /// OAuth access tokens granted (`POST …/token`).
    pub token_grants: u64,
    /// Totals per request `model`.
    pub by_model: BTreeMap<String, Counters>,
    /// Totals per API key (bearer token or `x-api-key`).
    pub by_key: BTreeMap<String, Counters>,
    /// Most API calls the mock held at one time (received, answer not yet
    /// sent) since the start or the last reset: what a parallel-request
    /// limit in front of the mock lets through together.
    pub peak_in_flight: u64,
}

/// Counters for all workers of one mock server.
pub struct Stats {
    shards: Vec<Shard>,
    /// API calls received and not yet answered, over all workers.
    in_flight: AtomicU64,
    /// The most `in_flight` has been since the start or the last reset.
    peak_in_flight: AtomicU64,
}

/// One API call the mock holds: counted in flight until dropped.
pub struct InFlight<'a>(&'a Stats);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Stats {
    /// Creates counters for `workers` worker threads.
    pub fn new(workers: usize) -> Self {
        Stats {
            shards: (0..workers.max(1)).map(|_| Shard::default()).collect(),
            in_flight: AtomicU64::new(0),
            peak_in_flight: AtomicU64::new(0),
        }
    }

    fn lock(&self, worker: usize) -> MutexGuard<'_, Table> {
        let shard = &self.shards[worker % self.shards.len()];
        shard.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one served request on `worker`'s shard.
    pub fn record(
        &self,
        worker: usize,
        model: &str,
        key: Option<&str>,
        prompt: u64,
        completion: u64,
    ) {
        let mut t = self.lock(worker);
        t.total.add(prompt, completion);
        bump(&mut t.by_model, model, prompt, completion);
        if let Some(key) = key {
            bump(&mut t.by_key, key, prompt, completion);
        }
    }

    /// Records one API call received on `worker`'s shard, before it is
    /// checked or answered; it counts as in flight until the returned
    /// guard is dropped (its answer sent, or the connection given up).
    #[must_use = "the call counts as in flight until the guard is dropped"]
    pub fn record_received(&self, worker: usize) -> InFlight<'_> {
        self.lock(worker).received += 1;
        let now = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        self.peak_in_flight.fetch_max(now, Ordering::AcqRel);
        InFlight(self)
    }

    /// Records one request answered with an injected error on `worker`'s
    /// shard.
    pub fn record_failure(&self, worker: usize) {
        self.lock(worker).failed += 1;
    }

    /// Records one access token granted on `worker`'s shard.
    pub fn record_token_grant(&self, worker: usize) {
        self.lock(worker).token_grants += 1;
    }

    /// Merges all shards.
    pub fn snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::default();
        for i in 0..self.shards.len() {
            let t = self.lock(i);
            snap.total.merge(&t.total);
            snap.received += t.received;
            snap.failed += t.failed;
            snap.token_grants += t.token_grants;
            for (k, c) in &t.by_model {
                snap.by_model.entry(k.clone()).or_default().merge(c);
            }
            for (k, c) in &t.by_key {
                snap.by_key.entry(k.clone()).or_default().merge(c);
            }
        }
        snap.peak_in_flight = self.peak_in_flight.load(Ordering::Acquire);
        snap
    }

    /// Zeroes every counter; the peak starts again from the calls in
    /// flight now.
    pub fn reset(&self) {
        for i in 0..self.shards.len() {
            *self.lock(i) = Table::default();
        }
        self.reset_peak();
    }

    /// Starts the peak of calls in flight again from the calls held now.
    pub fn reset_peak(&self) {
        let now = self.in_flight.load(Ordering::Acquire);
        self.peak_in_flight.store(now, Ordering::Release);
    }
}

fn bump(map: &mut HashMap<String, Counters>, name: &str, prompt: u64, completion: u64) {
    match map.get_mut(name) {
        Some(c) => c.add(prompt, completion),
        None => {
            let mut c = Counters::default();
            c.add(prompt, completion);
            map.insert(name.to_string(), c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_shards_and_resets() {
        let stats = Stats::new(2);
        stats.record(0, "a", Some("k1"), 3, 5);
        stats.record(1, "a", Some("k2"), 1, 1);
        stats.record(1, "b", None, 2, 0);
        drop(stats.record_received(0));
        drop(stats.record_received(1));
        let snap = stats.snapshot();
        assert_eq!(snap.total.requests, 3);
        assert_eq!(snap.total.prompt_tokens, 6);
        assert_eq!(snap.total.completion_tokens, 6);
        assert_eq!(snap.by_model["a"].requests, 2);
        assert_eq!(snap.by_model["b"].prompt_tokens, 2);
        assert_eq!(snap.by_key.len(), 2);
        let json = serde_json::to_value(&snap).unwrap();
        assert_eq!(json["requests"], 3);
        assert_eq!(json["received"], 2);
        assert_eq!(json["by_key"]["k1"]["completion_tokens"], 5);
        stats.reset();
        assert_eq!(stats.snapshot(), Snapshot::default());
    }

    #[test]
    fn the_peak_counts_calls_held_together_not_calls_in_all() {
        let stats = Stats::new(2);
        let (a, b) = (stats.record_received(0), stats.record_received(1));
        drop(a);
        let c = stats.record_received(0);
        drop((b, c));
        // Four calls, never more than two at once.
        drop(stats.record_received(1));
        let snap = stats.snapshot();
        assert_eq!((snap.received, snap.peak_in_flight), (4, 2));
        // A reset starts the peak again from the calls still held.
        let held = stats.record_received(0);
        stats.reset();
        assert_eq!(stats.snapshot().peak_in_flight, 1);
        drop(held);
        drop(stats.record_received(0));
        assert_eq!(stats.snapshot().peak_in_flight, 1);
    }
}
