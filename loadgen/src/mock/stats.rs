//! Served-request counters, aggregated over all worker threads.
//!
//! Each worker writes only its own shard (an uncontended lock, so the hot
//! path costs a couple of atomic operations); readers merge all shards.

use std::collections::{BTreeMap, HashMap};
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
}

/// Counters for all workers of one mock server.
pub struct Stats {
    shards: Vec<Shard>,
}

impl Stats {
    /// Creates counters for `workers` worker threads.
    pub fn new(workers: usize) -> Self {
        Stats {
            shards: (0..workers.max(1)).map(|_| Shard::default()).collect(),
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
    /// checked or answered.
    pub fn record_received(&self, worker: usize) {
        self.lock(worker).received += 1;
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
        snap
    }

    /// Zeroes every counter.
    pub fn reset(&self) {
        for i in 0..self.shards.len() {
            *self.lock(i) = Table::default();
        }
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
        stats.record_received(0);
        stats.record_received(1);
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
}
