//! The routing strategies, and the one-pass choice they share: candidates
//! are offered one by one with a tier (lower is preferred: healthy and
//! untried first) and a score; the choice keeps the best tier and, within
//! it, the lowest score, a weighted draw, or a uniform draw. Ties are broken
//! at random. No allocation, one pass over the group.

use super::stats::DeploymentStats;

/// Share of latency-based choices made uniformly at random, so that a
/// deployment whose average is stale (it recovered) is measured again.
const EXPLORE_SHARE: f64 = 0.05;

/// `router_settings.routing_strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// `simple-shuffle`: random, weighted by `weight`, else `rpm`, else `tpm`.
    SimpleShuffle,
    /// `least-busy`: fewest requests in flight.
    LeastBusy,
    /// `latency-based-routing`: lowest recent latency, with a small share
    /// of random picks.
    LatencyBased,
    /// `usage-based-routing-v2` (and `usage-based-routing`): fewest tokens
    /// used this minute.
    UsageBased,
    /// `cost-based-routing`: cheapest per token; unknown prices last.
    CostBased,
}

/// How a choice ranks candidates of the same tier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Mode {
    /// Drawn in proportion to the score (a weight); all-zero weights draw
    /// uniformly.
    Weighted,
    /// The lowest score.
    Lowest,
    /// Any, uniformly.
    Uniform,
}

impl Strategy {
    /// The names LiteLLM accepts.
    pub const NAMES: [&'static str; 6] = [
        "simple-shuffle",
        "least-busy",
        "latency-based-routing",
        "usage-based-routing-v2",
        "usage-based-routing",
        "cost-based-routing",
    ];

    /// The strategy a LiteLLM name stands for.
    pub fn from_name(name: &str) -> Option<Strategy> {
        Some(match name {
            "simple-shuffle" => Strategy::SimpleShuffle,
            "least-busy" => Strategy::LeastBusy,
            "latency-based-routing" => Strategy::LatencyBased,
            "usage-based-routing-v2" | "usage-based-routing" => Strategy::UsageBased,
            "cost-based-routing" => Strategy::CostBased,
            _ => return None,
        })
    }

    /// How this choice ranks candidates (latency-based explores now and then).
    pub(crate) fn mode(self, rng: &mut fastrand::Rng) -> Mode {
        match self {
            Strategy::SimpleShuffle => Mode::Weighted,
            Strategy::LatencyBased if rng.f64() < EXPLORE_SHARE => Mode::Uniform,
            _ => Mode::Lowest,
        }
    }

    /// A candidate's score: its weight for the shuffle, else lower is better.
    /// A deployment without a latency sample scores 0, so it is tried first.
    pub(crate) fn score(self, stats: &DeploymentStats, weight: f64, cost: f64, minute: u64) -> f64 {
        match self {
            Strategy::SimpleShuffle => weight,
            Strategy::LeastBusy => stats.in_flight() as f64,
            Strategy::LatencyBased => stats.latency().map_or(0.0, |l| l.as_secs_f64()),
            Strategy::UsageBased => stats.tokens_in(minute) as f64,
            Strategy::CostBased => cost,
        }
    }
}

/// A choice in progress over offered candidates.
#[derive(Debug)]
pub(crate) struct Choice {
    tier: u8,
    /// Lowest / uniform: the pick, its score and how many tied with it.
    pick: Option<usize>,
    best: f64,
    ties: u32,
    /// Weighted: the draw so far and the weight seen.
    weighted: Option<usize>,
    total: f64,
}

impl Choice {
    /// An empty choice.
    pub(crate) fn new() -> Self {
        Choice {
            tier: u8::MAX,
            pick: None,
            best: f64::INFINITY,
            ties: 0,
            weighted: None,
            total: 0.0,
        }
    }

    /// Offers `slot` in `tier` with `score`, ranked by `mode`.
    pub(crate) fn offer(
        &mut self,
        slot: usize,
        tier: u8,
        score: f64,
        mode: Mode,
        rng: &mut fastrand::Rng,
    ) {
        if tier > self.tier {
            return;
        }
        if tier < self.tier {
            *self = Choice::new();
            self.tier = tier;
        }
        let score = match mode {
            Mode::Uniform => 0.0,
            Mode::Lowest => score,
            Mode::Weighted => {
                if score > 0.0 {
                    self.total += score;
                    if rng.f64() * self.total < score {
                        self.weighted = Some(slot);
                    }
                }
                // Zero weights only count when every weight is zero.
                0.0
            }
        };
        if self.pick.is_none() || score < self.best {
            (self.pick, self.best, self.ties) = (Some(slot), score, 1);
        } else if score == self.best {
            self.ties += 1;
            if rng.u32(..self.ties) == 0 {
                self.pick = Some(slot);
            }
        }
    }

    /// The chosen slot and its tier.
    pub(crate) fn chosen(&self) -> Option<(usize, u8)> {
        Some((self.weighted.or(self.pick)?, self.tier))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// How often each of `n` slots wins `rounds` choices.
    fn tally(
        n: usize,
        rounds: usize,
        mut offer: impl FnMut(&mut Choice, &mut fastrand::Rng),
    ) -> Vec<usize> {
        let mut rng = fastrand::Rng::with_seed(42);
        let mut wins = vec![0; n];
        for _ in 0..rounds {
            let mut c = Choice::new();
            offer(&mut c, &mut rng);
            wins[c.chosen().unwrap().0] += 1;
        }
        wins
    }

    #[test]
    fn names() {
        assert_eq!(
            Strategy::from_name("usage-based-routing"),
            Some(Strategy::UsageBased)
        );
        assert!(Strategy::NAMES
            .iter()
            .all(|n| Strategy::from_name(n).is_some()));
        assert_eq!(Strategy::from_name("round-robin"), None);
    }

    #[test]
    fn weighted_draw_follows_weights_and_zero_is_never_drawn() {
        let wins = tally(3, 10_000, |c, rng| {
            for (slot, w) in [(0, 1.0), (1, 3.0), (2, 0.0)] {
                c.offer(slot, 0, w, Mode::Weighted, rng);
            }
        });
        assert_eq!(wins[2], 0);
        assert!((2300..2700).contains(&wins[0]), "{wins:?}");
        let all_zero = tally(2, 1000, |c, rng| {
            c.offer(0, 0, 0.0, Mode::Weighted, rng);
            c.offer(1, 0, 0.0, Mode::Weighted, rng);
        });
        assert!(all_zero[0] > 400 && all_zero[1] > 400, "{all_zero:?}");
    }

    #[test]
    fn lowest_wins_and_ties_split() {
        let wins = tally(3, 1000, |c, rng| {
            c.offer(0, 0, 2.0, Mode::Lowest, rng);
            c.offer(1, 0, 1.0, Mode::Lowest, rng);
            c.offer(2, 0, 1.0, Mode::Lowest, rng);
        });
        assert_eq!(wins[0], 0);
        assert!(wins[1] > 400 && wins[2] > 400, "{wins:?}");
    }

    #[test]
    fn better_tier_beats_any_score() {
        let mut rng = fastrand::Rng::with_seed(1);
        let mut c = Choice::new();
        c.offer(0, 1, 0.0, Mode::Lowest, &mut rng);
        c.offer(1, 0, 9.0, Mode::Lowest, &mut rng);
        c.offer(2, 2, 0.0, Mode::Lowest, &mut rng);
        assert_eq!(c.chosen(), Some((1, 0)));
        let mut c = Choice::new();
        c.offer(0, 0, 5.0, Mode::Weighted, &mut rng);
        c.offer(1, 3, 7.0, Mode::Lowest, &mut rng);
        assert_eq!(c.chosen(), Some((0, 0)));
        assert_eq!(Choice::new().chosen(), None);
    }

    #[test]
    fn scores_read_live_stats() {
        let s = DeploymentStats::default();
        s.start(4);
        s.start(4);
        assert_eq!(Strategy::LeastBusy.score(&s, 1.0, 0.0, 4), 2.0);
        assert_eq!(Strategy::LatencyBased.score(&s, 1.0, 0.0, 4), 0.0);
        s.succeed(4, Duration::from_millis(250), 90);
        assert_eq!(Strategy::LatencyBased.score(&s, 1.0, 0.0, 4), 0.25);
        assert_eq!(Strategy::UsageBased.score(&s, 1.0, 0.0, 4), 90.0);
        assert_eq!(Strategy::UsageBased.score(&s, 1.0, 0.0, 5), 0.0);
        assert_eq!(Strategy::CostBased.score(&s, 1.0, 3e-6, 4), 3e-6);
        assert_eq!(Strategy::SimpleShuffle.score(&s, 2.5, 0.0, 4), 2.5);
    }

    #[test]
    fn latency_based_explores_a_small_share() {
        let mut rng = fastrand::Rng::with_seed(9);
        let uniform = (0..20_000)
            .filter(|_| Strategy::LatencyBased.mode(&mut rng) == Mode::Uniform)
            .count();
        assert!((800..1200).contains(&uniform), "{uniform}");
        assert_eq!(Strategy::LeastBusy.mode(&mut rng), Mode::Lowest);
        assert_eq!(Strategy::SimpleShuffle.mode(&mut rng), Mode::Weighted);
    }
}
