//! One choice of a deployment in a group. Three filters exclude a
//! deployment: a region the caller may not use, no headroom under its own
//! `rpm`/`tpm` this minute, and (with `enable_pre_call_checks`) a context
//! window the prompt exceeds. What passes is ranked in tiers: healthy and
//! not yet tried in this request, then tried, then the deployment that just
//! failed, then cooling ones, of which only the one whose cooldown ends
//! first is offered, so a group is never cooled to nothing. The strategy
//! chooses within the best tier.

use super::registry::Group;
use super::stats::minute_of;
use super::strategy::{Choice, Mode, Strategy};
use super::Router;

/// Healthy, not yet tried by this request.
pub(crate) const UNTRIED: u8 = 0;
/// Healthy, tried earlier by this request.
pub(crate) const TRIED: u8 = 1;
/// The deployment whose failure the request is recovering from.
pub(crate) const FAILED: u8 = 2;
/// Cooling down.
pub(crate) const COOLING: u8 = 3;

/// Weighted draws tried before a full scan (simple-shuffle only).
const FAST_DRAWS: usize = 4;

/// What one choice must respect.
#[derive(Debug)]
pub(crate) struct Ask<'a> {
    /// Allowed regions, lower-case; `None` allows every deployment.
    pub(crate) regions: Option<&'a [String]>,
    /// The request's tags when `enable_tag_filtering` is on (see
    /// [`TagPool`]); `None` when it is off.
    pub(crate) tags: Option<&'a [String]>,
    /// Prompt estimate, for `tpm` headroom and the context filter.
    pub(crate) prompt_tokens: u64,
    /// Whether to exclude deployments whose context window is too small.
    pub(crate) context_filter: bool,
    /// Slots this request already tried in the group.
    pub(crate) tried: &'a [usize],
    /// The slot that just failed.
    pub(crate) failed: Option<usize>,
    /// The router clock.
    pub(crate) now_ms: u64,
}

/// The outcome of a choice.
#[derive(Debug, PartialEq)]
pub(crate) enum Selection {
    /// A deployment, with its tier.
    Picked {
        /// Its slot.
        slot: usize,
        /// Its tier (`UNTRIED` ... `COOLING`).
        tier: u8,
    },
    /// Every deployment is outside the allowed regions (or too small).
    NoRegion,
    /// Deployments in the allowed regions exist, but none has headroom.
    AtCapacity,
}

/// Which deployments of a group tag-based routing leaves, as LiteLLM's
/// `get_deployments_for_tag`: those carrying one of the request's tags;
/// else those tagged `default`; else, for a request without tags, all of
/// them; else none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum TagPool {
    /// No filtering.
    All,
    /// Deployments with one of the request's tags.
    Matching,
    /// Deployments tagged `default`.
    Default,
    /// None: the request has tags no deployment carries, and none is
    /// `default`.
    Nothing,
}

/// The [`TagPool`] of `group` for a request with `tags` (`None`: filtering
/// off).
pub(crate) fn tag_pool(router: &Router, group: &Group, tags: Option<&[String]>) -> TagPool {
    let Some(tags) = tags else {
        return TagPool::All;
    };
    let deps = router.registry.deployments();
    let any = |f: &dyn Fn(&String) -> bool| group.slots.iter().any(|&s| deps[s].tags.iter().any(f));
    if !tags.is_empty() && any(&|t| tags.contains(t)) {
        TagPool::Matching
    } else if any(&|t| t == "default") {
        TagPool::Default
    } else if tags.is_empty() {
        TagPool::All
    } else {
        TagPool::Nothing
    }
}

/// Why a deployment is excluded.
#[derive(Debug, PartialEq)]
enum Excluded {
    Tag,
    Region,
    Capacity,
    Context,
}

/// Chooses a deployment of `group` for `ask`.
pub(crate) fn select(
    router: &Router,
    group: &Group,
    ask: &Ask<'_>,
    rng: &mut fastrand::Rng,
) -> Selection {
    let strategy = router.settings.routing_strategy;
    let minute = minute_of(ask.now_ms);
    let pool = tag_pool(router, group, ask.tags);
    if strategy == Strategy::SimpleShuffle {
        for _ in 0..FAST_DRAWS {
            let Some(slot) = group.sample(rng) else { break };
            if excluded(router, slot, ask, pool, minute).is_none()
                && tier(router, slot, ask) == UNTRIED
            {
                return Selection::Picked {
                    slot,
                    tier: UNTRIED,
                };
            }
        }
    }
    let mode = strategy.mode(rng);
    let mut choice = Choice::new();
    let mut at_capacity = false;
    for (i, &slot) in group.slots.iter().enumerate() {
        match excluded(router, slot, ask, pool, minute) {
            Some(Excluded::Capacity) => at_capacity = true,
            Some(_) => {}
            None => {
                let tier = tier(router, slot, ask);
                if tier == COOLING {
                    let until = router.cooldowns.until(slot) as f64;
                    choice.offer(slot, tier, until, Mode::Lowest, rng);
                } else {
                    let stats = router.stats.get(slot);
                    let cost = router.costs[slot];
                    let score = strategy.score(stats, group.weights[i], cost, minute);
                    choice.offer(slot, tier, score, mode, rng);
                }
            }
        }
    }
    match choice.chosen() {
        Some((slot, tier)) => Selection::Picked { slot, tier },
        None if at_capacity => Selection::AtCapacity,
        None => Selection::NoRegion,
    }
}

fn excluded(
    router: &Router,
    slot: usize,
    ask: &Ask<'_>,
    pool: TagPool,
    minute: u64,
) -> Option<Excluded> {
    let dep = &router.registry.deployments()[slot];
    let tagged = match pool {
        TagPool::All => true,
        TagPool::Matching => {
            let wanted = ask.tags.unwrap_or_default();
            dep.tags.iter().any(|t| wanted.contains(t))
        }
        TagPool::Default => dep.tags.iter().any(|t| t == "default"),
        TagPool::Nothing => false,
    };
    if !tagged {
        return Some(Excluded::Tag);
    }
    if let Some(allowed) = ask.regions {
        let region = router.regions[slot].as_deref();
        if !region.is_some_and(|r| allowed.iter().any(|a| a == r)) {
            return Some(Excluded::Region);
        }
    }
    if ask.context_filter && router.windows[slot].is_some_and(|m| ask.prompt_tokens > m) {
        return Some(Excluded::Context);
    }
    let stats = router.stats.get(slot);
    let over_rpm = dep.rpm.is_some_and(|rpm| stats.requests_in(minute) >= rpm);
    let over_tpm = dep
        .tpm
        .is_some_and(|tpm| stats.tokens_in(minute).saturating_add(ask.prompt_tokens) > tpm);
    (over_rpm || over_tpm).then_some(Excluded::Capacity)
}

fn tier(router: &Router, slot: usize, ask: &Ask<'_>) -> u8 {
    if router.cooldowns.is_cooling(slot, ask.now_ms) || router.is_down(slot) {
        COOLING
    } else if ask.failed == Some(slot) {
        FAILED
    } else if ask.tried.contains(&slot) {
        TRIED
    } else {
        UNTRIED
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::tests::router;
    use std::time::Duration;

    fn ask(now_ms: u64) -> Ask<'static> {
        Ask {
            regions: None,
            tags: None,
            prompt_tokens: 10,
            context_filter: false,
            tried: &[],
            failed: None,
            now_ms,
        }
    }

    fn pick(r: &Router, group: &str, ask: &Ask<'_>, seed: u64) -> Selection {
        let route = r.registry.resolve(group).unwrap();
        select(r, route.members, ask, &mut fastrand::Rng::with_seed(seed))
    }

    const FOUR: &str = "model_list:\n  - model_name: g\n    litellm_params: {model: mock/a, region_name: EU}\n  - model_name: g\n    litellm_params: {model: mock/b, region_name: us}\n  - model_name: g\n    litellm_params: {model: mock/c, region_name: eu}\n  - model_name: g\n    litellm_params: {model: mock/d}\n";

    #[test]
    fn tiers_prefer_untried_then_tried_then_failed() {
        let r = router(FOUR, "");
        let tried = [0, 1, 2];
        let a = Ask {
            tried: &tried,
            failed: Some(2),
            ..ask(0)
        };
        for seed in 0..20 {
            assert_eq!(
                pick(&r, "g", &a, seed),
                Selection::Picked {
                    slot: 3,
                    tier: UNTRIED
                }
            );
        }
        let tried = [0, 1, 2, 3];
        let a = Ask {
            tried: &tried,
            failed: Some(2),
            ..ask(0)
        };
        for seed in 0..20 {
            assert!(matches!(
                pick(&r, "g", &a, seed),
                Selection::Picked {
                    slot: 0 | 1 | 3,
                    tier: TRIED
                }
            ));
        }
        let regions = ["eu".to_string()];
        let a = Ask {
            regions: Some(&regions),
            tried: &tried,
            failed: Some(2),
            ..ask(0)
        };
        assert_eq!(
            pick(&r, "g", &a, 1),
            Selection::Picked {
                slot: 0,
                tier: TRIED
            }
        );
    }

    #[test]
    fn regions_are_a_hard_filter_matched_without_case() {
        let r = router(FOUR, "");
        let eu = ["eu".to_string()];
        let a = Ask {
            regions: Some(&eu),
            ..ask(0)
        };
        for seed in 0..50 {
            let Selection::Picked { slot, .. } = pick(&r, "g", &a, seed) else {
                panic!()
            };
            assert!(slot == 0 || slot == 2, "{slot}");
        }
        let none = ["apac".to_string()];
        let a = Ask {
            regions: Some(&none),
            ..ask(0)
        };
        assert_eq!(pick(&r, "g", &a, 0), Selection::NoRegion);
    }

    #[test]
    fn never_cools_a_group_to_nothing() {
        let r = router(FOUR, "");
        for (slot, secs) in [(0, 30), (1, 10), (2, 20), (3, 40)] {
            r.cooldowns.start(slot, 0, Duration::from_secs(secs));
        }
        assert_eq!(
            pick(&r, "g", &ask(1), 0),
            Selection::Picked {
                slot: 1,
                tier: COOLING
            }
        );
        assert_eq!(
            pick(&r, "g", &ask(15_000), 0),
            Selection::Picked {
                slot: 1,
                tier: UNTRIED
            }
        );
    }

    #[test]
    fn over_rpm_or_tpm_is_skipped() {
        let r = router("model_list:\n  - model_name: g\n    litellm_params: {model: mock/a, rpm: 2}\n  - model_name: g\n    litellm_params: {model: mock/b, tpm: 100}\n", "");
        let minute = minute_of(0);
        r.stats.get(0).start(minute);
        r.stats.get(0).start(minute);
        for seed in 0..20 {
            assert_eq!(
                pick(&r, "g", &ask(0), seed),
                Selection::Picked {
                    slot: 1,
                    tier: UNTRIED
                }
            );
        }
        r.stats.get(1).start(minute);
        r.stats.get(1).succeed(minute, Duration::from_millis(1), 95);
        assert_eq!(
            pick(&r, "g", &ask(0), 0),
            Selection::AtCapacity,
            "95 + 10 > 100"
        );
        assert!(
            matches!(pick(&r, "g", &ask(60_000), 0), Selection::Picked { .. }),
            "next minute"
        );
    }

    #[test]
    fn pre_call_checks_skip_small_windows() {
        let r = router("model_list:\n  - model_name: g\n    litellm_params: {model: mock/a}\n    model_info: {max_input_tokens: 5}\n  - model_name: g\n    litellm_params: {model: mock/b}\n    model_info: {max_input_tokens: 50}\n", "");
        let a = Ask {
            context_filter: true,
            ..ask(0)
        };
        for seed in 0..20 {
            assert_eq!(
                pick(&r, "g", &a, seed),
                Selection::Picked {
                    slot: 1,
                    tier: UNTRIED
                }
            );
        }
    }

    fn distribution(strategy: &str, rounds: usize, r_setup: impl Fn(&Router)) -> Vec<usize> {
        let r = router(
            "model_list:\n  - model_name: g\n    litellm_params: {model: mock/a, input_cost_per_token: 3.0e-6}\n  - model_name: g\n    litellm_params: {model: mock/b, input_cost_per_token: 1.0e-6}\n  - model_name: g\n    litellm_params: {model: mock/c}\n",
            &format!("routing_strategy: {strategy}\n"),
        );
        r_setup(&r);
        let mut wins = vec![0; 3];
        let mut rng = fastrand::Rng::with_seed(3);
        let route = r.registry.resolve("g").unwrap();
        for _ in 0..rounds {
            let Selection::Picked { slot, .. } = select(&r, route.members, &ask(0), &mut rng)
            else {
                panic!()
            };
            wins[slot] += 1;
        }
        wins
    }

    #[test]
    fn each_strategy_reads_its_numbers() {
        let m = minute_of(0);
        let shuffle = distribution("simple-shuffle", 3000, |_| {});
        assert!(
            shuffle.iter().all(|&w| (850..1150).contains(&w)),
            "{shuffle:?}"
        );
        let busy = distribution("least-busy", 100, |r| {
            r.stats.get(0).start(m);
            r.stats.get(2).start(m);
        });
        assert_eq!(busy, [0, 100, 0]);
        let latency = distribution("latency-based-routing", 2000, |r| {
            r.stats.get(0).succeed(m, Duration::from_millis(300), 1);
            r.stats.get(1).succeed(m, Duration::from_millis(100), 1);
            r.stats.get(2).succeed(m, Duration::from_millis(200), 1);
        });
        assert!(
            latency[1] > 1850 && latency[0] > 10 && latency[2] > 10,
            "explores: {latency:?}"
        );
        let usage = distribution("usage-based-routing-v2", 100, |r| {
            r.stats.get(0).succeed(m, Duration::ZERO, 50);
            r.stats.get(1).succeed(m, Duration::ZERO, 10);
            r.stats.get(2).succeed(m, Duration::ZERO, 30);
        });
        assert_eq!(usage, [0, 100, 0]);
        let cost = distribution("cost-based-routing", 100, |_| {});
        assert_eq!(cost, [0, 100, 0], "unknown price last");
    }
}
