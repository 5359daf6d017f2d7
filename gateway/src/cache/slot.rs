//! The cache in force, swapped whole: LiteLLM re-reads the cache settings
//! its UI saves (`LiteLLM_CacheConfig`) while it serves, and a changed row
//! rebuilds its cache. Requests read the slot without a lock (`arc_swap`);
//! the control plane's poller swaps in the rebuilt cache, and each core
//! fits its local share to it on its next lookup ([`super::Cache::fit`]).

use super::Cache;
use arc_swap::{ArcSwapOption, Guard};
use std::sync::Arc;

/// Where the process's response cache is (none while it is off).
#[derive(Default)]
pub struct CacheSlot {
    current: ArcSwapOption<Cache>,
}

impl CacheSlot {
    /// A slot holding `cache`.
    pub fn new(cache: Option<Arc<Cache>>) -> CacheSlot {
        CacheSlot {
            current: ArcSwapOption::new(cache),
        }
    }

    /// The cache in force now (requests in progress keep the one they
    /// loaded).
    pub fn load(&self) -> Guard<Option<Arc<Cache>>> {
        self.current.load()
    }

    /// Puts `cache` in force for the requests that start from now on.
    pub fn replace(&self, cache: Option<Arc<Cache>>) {
        self.current.store(cache);
    }
}

impl std::fmt::Debug for CacheSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CacheSlot").field(&*self.load()).finish()
    }
}
