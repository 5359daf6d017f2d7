//! The guard in front of a database read-through (seed 001), shared by keys
//! and model names: a name the database did not know moments ago is not
//! asked for again for [`NEGATIVE_TTL`], and at most [`RESYNC_PER_WINDOW`]
//! read-throughs run per [`RESYNC_WINDOW`], so a flood of unknown names
//! cannot hammer the database. Keys in the known set (`auth::known`) are
//! read through without the budget, so the flood cannot lock them out.
//! Lock-free.

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long an unknown name is answered without asking the database again.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(2);
/// Read-throughs allowed per window (seed 001: 20 per 5 s).
pub const RESYNC_PER_WINDOW: u64 = 20;
/// Window of the resync budget.
pub const RESYNC_WINDOW: Duration = Duration::from_secs(5);
/// Remembered names past which expired ones are swept.
const SWEEP_ABOVE: usize = 100_000;

/// Recently unknown names (`K`, hashed by `S`) and the read-through budget.
pub struct ReadThroughGuard<K, S = RandomState> {
    misses: papaya::HashMap<K, Instant, S>,
    epoch: Instant,
    window: AtomicU64,
    used: AtomicU64,
}

impl<K, S: Default> Default for ReadThroughGuard<K, S> {
    fn default() -> Self {
        ReadThroughGuard {
            misses: papaya::HashMap::with_hasher(S::default()),
            epoch: Instant::now(),
            window: AtomicU64::new(0),
            used: AtomicU64::new(0),
        }
    }
}

impl<K: Hash + Eq, S: BuildHasher> ReadThroughGuard<K, S> {
    /// Whether `name` was unknown to the database moments ago.
    pub fn recently_missed<Q>(&self, name: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let misses = self.misses.pin();
        match misses.get(name) {
            Some(at) if at.elapsed() < NEGATIVE_TTL => true,
            Some(_) => {
                misses.remove(name);
                false
            }
            None => false,
        }
    }

    /// Remembers that `name` is unknown.
    pub fn note_miss(&self, name: K) {
        let misses = self.misses.pin();
        if misses.len() > SWEEP_ABOVE {
            misses.retain(|_, at| at.elapsed() < NEGATIVE_TTL);
        }
        misses.insert(name, Instant::now());
    }

    /// Forgets that `name` was unknown (it was just loaded).
    pub fn forget<Q>(&self, name: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.misses.pin().remove(name);
    }

    /// Forgets every unknown name (the whole set changed).
    pub fn clear(&self) {
        self.misses.pin().clear();
    }

    /// Takes one read-through from the budget; `false` when it is spent.
    pub fn try_resync(&self) -> bool {
        let window = self.epoch.elapsed().as_secs() / RESYNC_WINDOW.as_secs();
        let current = self.window.load(Ordering::Acquire);
        if current != window
            && self
                .window
                .compare_exchange(current, window, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.used.store(0, Ordering::Release);
        }
        self.used.fetch_add(1, Ordering::AcqRel) < RESYNC_PER_WINDOW
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_bounded_and_misses_are_remembered() {
        let m: ReadThroughGuard<String> = ReadThroughGuard::default();
        let granted = (0..100).filter(|_| m.try_resync()).count();
        assert_eq!(granted as u64, RESYNC_PER_WINDOW);
        assert!(!m.recently_missed("x"));
        m.note_miss("x".to_string());
        assert!(m.recently_missed("x") && !m.recently_missed("y"));
        m.forget("x");
        assert!(!m.recently_missed("x"));
        m.note_miss("x".to_string());
        m.clear();
        assert!(!m.recently_missed("x"));
    }
}
