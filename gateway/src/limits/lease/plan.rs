//! How big a lease is and how long it lives: from what this replica used
//! of the descriptor's last lease, so a slow key's leases are small and
//! live long (few Redis calls) while a busy key's are as they always were
//! (its share of the limit, `lease_ttl_ms`).
//!
//! A lease is sized to twice what the last one's rate of use would spend in
//! its life, and its life is the longest (up to `lease_max_ttl_ms`) at which
//! that still fits the share (`lease_fraction` x the limit). So room parked
//! in one replica's lease is at most twice its use at its last rate over
//! the lease's life, and at most the share; a key that would use its share
//! within `lease_ttl_ms` gets the share for `lease_ttl_ms`.

/// What a replica used of a lease: `units` in `ms` milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Use {
    /// Units spent.
    pub units: u64,
    /// Over how long.
    pub ms: u64,
}

/// A lease's size and life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    /// Units asked of Redis.
    pub size: u64,
    /// Milliseconds it serves.
    pub life_ms: u64,
}

/// The lease to ask for: `share` (the busy size, at least `need`) for
/// `ttl_ms` with no history, else sized and timed to `last` (at least
/// `need`, at most `share`; between `ttl_ms` and `max_ms`).
pub(super) fn plan(share: u64, need: u64, last: Option<Use>, ttl_ms: u64, max_ms: u64) -> Plan {
    let busy = Plan {
        size: share,
        life_ms: ttl_ms,
    };
    let Some(Use { units, ms }) = last else {
        return busy;
    };
    let max_ms = max_ms.max(ttl_ms);
    let ms = u128::from(ms.max(1));
    let twice = u128::from(units).saturating_mul(2);
    // The life at which twice the last rate's use fills the share.
    let life = match twice {
        0 => u128::from(max_ms),
        _ => u128::from(share).saturating_mul(ms) / twice,
    };
    let life_ms = u64::try_from(life)
        .unwrap_or(u64::MAX)
        .clamp(ttl_ms, max_ms);
    let size = twice.saturating_mul(u128::from(life_ms)).div_ceil(ms);
    let size = u64::try_from(size)
        .unwrap_or(u64::MAX)
        .clamp(need.max(1).min(share), share);
    Plan { size, life_ms }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn used(units: u64, ms: u64) -> Option<Use> {
        Some(Use { units, ms })
    }

    #[test]
    fn a_busy_key_gets_its_share_for_the_base_life() {
        let busy = Plan {
            size: 100,
            life_ms: 1000,
        };
        assert_eq!(plan(100, 1, None, 1000, 8000), busy, "no history");
        // 50 a second would spend the share in a life: as before.
        assert_eq!(plan(100, 1, used(50, 1000), 1000, 8000), busy);
        assert_eq!(plan(100, 1, used(100, 300), 1000, 8000), busy);
    }

    #[test]
    fn a_slow_key_gets_a_small_lease_that_lives_long() {
        // 4 a second: 8 seconds (the cap) at 8 a second.
        assert_eq!(
            plan(100, 1, used(4, 1000), 1000, 8000),
            Plan {
                size: 64,
                life_ms: 8000
            }
        );
        // 20 a second: the share lasts 2.5 s at 40 a second.
        assert_eq!(
            plan(100, 1, used(20, 1000), 1000, 8000),
            Plan {
                size: 100,
                life_ms: 2500
            }
        );
        // Unused: one request's amount for the longest life.
        assert_eq!(
            plan(100, 30, used(0, 1000), 1000, 8000),
            Plan {
                size: 30,
                life_ms: 8000
            }
        );
        // Never more than the share, even for a request bigger than twice
        // the use.
        assert_eq!(plan(10, 10, used(1, 8000), 1000, 8000).size, 10);
    }

    #[test]
    fn outside_numbers_do_not_overflow() {
        let p = plan(u64::MAX, u64::MAX, used(u64::MAX, 0), 1000, 8000);
        assert_eq!(p.life_ms, 1000);
        assert_eq!(p.size, u64::MAX);
        let p = plan(u64::MAX, 1, used(1, u64::MAX), 1000, 8000);
        assert_eq!(p.life_ms, 8000);
        assert_eq!(p.size, 1);
    }
}
