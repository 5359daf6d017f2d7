//! The guard in front of the model read-through, as for keys (seed 001): a
//! name the database did not know moments ago is not asked for again for
//! [`NEGATIVE_TTL`], and at most [`RESYNC_PER_WINDOW`] read-throughs run per
//! [`RESYNC_WINDOW`], so a flood of unknown names cannot hammer the database.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long an unknown name is answered without asking the database again.
const NEGATIVE_TTL: Duration = Duration::from_secs(2);
/// Read-throughs allowed per window.
const RESYNC_PER_WINDOW: u64 = 20;
/// Window of the resync budget.
const RESYNC_WINDOW: Duration = Duration::from_secs(5);
/// Remembered names past which expired ones are swept.
const SWEEP_ABOVE: usize = 100_000;

/// Recently unknown names and the read-through budget; lock-free.
pub(super) struct Misses {
    names: papaya::HashMap<String, Instant>,
    epoch: Instant,
    window: AtomicU64,
    used: AtomicU64,
}

impl Default for Misses {
    fn default() -> Self {
        Misses {
            names: papaya::HashMap::new(),
            epoch: Instant::now(),
            window: AtomicU64::new(0),
            used: AtomicU64::new(0),
        }
    }
}

impl Misses {
    /// Whether `name` was unknown to the database moments ago.
    pub(super) fn recent(&self, name: &str) -> bool {
        let names = self.names.pin();
        match names.get(name) {
            Some(at) if at.elapsed() < NEGATIVE_TTL => true,
            Some(_) => {
                names.remove(name);
                false
            }
            None => false,
        }
    }

    /// Remembers that `name` is unknown.
    pub(super) fn note(&self, name: &str) {
        let names = self.names.pin();
        if names.len() > SWEEP_ABOVE {
            names.retain(|_, at| at.elapsed() < NEGATIVE_TTL);
        }
        names.insert(name.to_string(), Instant::now());
    }

    /// Forgets every unknown name (the model set changed).
    pub(super) fn clear(&self) {
        self.names.pin().clear();
    }

    /// Takes one read-through from the budget; `false` when it is spent.
    pub(super) fn try_resync(&self) -> bool {
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
        let m = Misses::default();
        let granted = (0..100).filter(|_| m.try_resync()).count();
        assert_eq!(granted as u64, RESYNC_PER_WINDOW);
        assert!(!m.recent("x"));
        m.note("x");
        assert!(m.recent("x") && !m.recent("y"));
        m.clear();
        assert!(!m.recent("x"));
    }
}
