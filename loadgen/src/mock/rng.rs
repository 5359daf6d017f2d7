//! A tiny per-thread pseudo-random source for `--error-rate`.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    static STATE: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // RandomState is keyed differently per thread, so workers diverge.
    RandomState::new().hash_one(nanos) | 1
}

/// A uniform value in `[0, 1)` (xorshift64*; not cryptographic).
pub fn unit() -> f64 {
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// True with probability `p` (clamped to `[0, 1]`).
pub fn chance(p: f64) -> bool {
    p > 0.0 && (p >= 1.0 || unit() < p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chance_is_roughly_right() {
        assert!(!chance(0.0));
        assert!(chance(1.0));
        let hits = (0..10_000).filter(|_| chance(0.25)).count();
        assert!((2000..3000).contains(&hits), "{hits}");
        assert!((0..1000).map(|_| unit()).all(|u| (0.0..1.0).contains(&u)));
    }
}
