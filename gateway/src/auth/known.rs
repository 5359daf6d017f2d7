//! The set of every key the store holds, so a known key is always read
//! through and an unknown one only within a small shared budget.
//!
//! Each key is kept as the first 8 bytes of its sha256 (already uniform, so
//! no further hashing): a sorted `Vec<u64>` loaded from the store at start-up
//! and again every [`RELOAD_EVERY`] and after the change listener
//! reconnects, plus a small lock-free overlay of the keys
//! added since (by this replica's management API or a change notification).
//! 1M keys take 8 MB. Two keys sharing a prefix, or a deleted key still in
//! the set until the next reload, only cost a read-through that misses. A
//! key written without an announcement (`NOTIFY gateway_changes`) is outside
//! the set until the next reload, read through from the shared budget.

use super::TokenHash;
use arc_swap::ArcSwap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the whole set is read again from the store, so keys written by
/// something that does not announce them (a LiteLLM proxy sharing the
/// database) are known within this period, and deleted ones are dropped.
pub const RELOAD_EVERY: Duration = Duration::from_secs(300);

/// Hasher for prefixes, which are uniformly random already.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The prefix a key is known by.
pub fn prefix(hash: &TokenHash) -> u64 {
    let mut head = [0u8; 8];
    head.copy_from_slice(&hash[..8]);
    u64::from_be_bytes(head)
}

/// Every known key, by prefix; see the module documentation.
pub struct KnownKeys {
    /// Sorted, without repeats, as of the last reload.
    base: ArcSwap<Vec<u64>>,
    /// Prefixes added since, with the generation they were added in.
    recent: papaya::HashMap<u64, u64, BuildHasherDefault<Identity>>,
    /// Bumped when a reload starts.
    generation: AtomicU64,
}

impl Default for KnownKeys {
    fn default() -> Self {
        KnownKeys {
            base: ArcSwap::from_pointee(Vec::new()),
            recent: papaya::HashMap::default(),
            generation: AtomicU64::new(0),
        }
    }
}

/// A reload under way: the generation it started.
#[derive(Debug, Clone, Copy)]
pub struct Reload(u64);

impl KnownKeys {
    /// Whether the key of `hash` may be in the store.
    pub fn contains(&self, hash: &TokenHash) -> bool {
        let p = prefix(hash);
        self.base.load().binary_search(&p).is_ok() || self.recent.pin().contains_key(&p)
    }

    /// Adds a key the store now holds.
    pub fn insert(&self, hash: &TokenHash) {
        if self.contains(hash) {
            return;
        }
        let generation = self.generation.load(Ordering::Acquire);
        self.recent.pin().insert(prefix(hash), generation);
    }

    /// Starts a reload; read the store after this call. A key added from
    /// here on stays in the overlay until the next reload, so one the read
    /// missed is not lost.
    pub fn begin_reload(&self) -> Reload {
        Reload(self.generation.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// Replaces the base with the `prefixes` read since `reload` began and
    /// drops the overlay entries that read covered (those added before it).
    pub fn finish_reload(&self, reload: Reload, mut prefixes: Vec<u64>) {
        prefixes.sort_unstable();
        prefixes.dedup();
        prefixes.shrink_to_fit();
        self.base.store(Arc::new(prefixes));
        self.recent.pin().retain(|_, added| *added >= reload.0);
    }

    /// Number of distinct prefixes known.
    pub fn count(&self) -> usize {
        self.base.load().len() + self.recent.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::hash_key;

    #[test]
    fn knows_loaded_and_added_keys_only() {
        let known = KnownKeys::default();
        let (a, b, c) = (hash_key("sk-a"), hash_key("sk-b"), hash_key("sk-c"));
        assert!(!known.contains(&a));
        let reload = known.begin_reload();
        known.finish_reload(reload, vec![prefix(&b), prefix(&a), prefix(&a)]);
        assert!(known.contains(&a) && known.contains(&b) && !known.contains(&c));
        known.insert(&c);
        known.insert(&a);
        assert!(known.contains(&c));
        assert_eq!(known.count(), 3);
        assert!(!known.contains(&hash_key("sk-random")));
    }

    #[test]
    fn a_reload_keeps_keys_added_while_it_ran() {
        let known = KnownKeys::default();
        let (old, during, gone) = (hash_key("sk-old"), hash_key("sk-new"), hash_key("sk-gone"));
        known.insert(&old);
        known.insert(&gone);
        let reload = known.begin_reload();
        // Added after the read began: the read may not have seen it.
        known.insert(&during);
        known.finish_reload(reload, vec![prefix(&old)]);
        assert!(known.contains(&old) && known.contains(&during));
        assert!(
            !known.contains(&gone),
            "a key the read did not find is dropped"
        );
        let reload = known.begin_reload();
        known.finish_reload(reload, vec![prefix(&old), prefix(&during)]);
        assert_eq!(known.count(), 2);
    }
}
