//! Model groups and the choice of deployments for a request: strategies,
//! retries, fallbacks, cooldowns and regions.
//!
//! [`Router::plan`] turns a request into a [`Plan`], and the request loop
//! asks the plan for one [`Pick`] after another, reporting each attempt with
//! [`Router::on_start`] and [`Router::on_end`] (the request path does it
//! through [`Router::start`] and [`Running::end`], so an attempt whose
//! future is dropped still leaves the in-flight count):
//!
//! ```text
//! let mut plan = router.plan(model, input)?;          // fails closed: region, rpm/tpm
//! let mut last = None;
//! while let Some(pick) = plan.next(last.as_ref()) {   // fallbacks wrap retries wrap the call
//!     sleep(pick.delay);
//!     router.on_start(&pick);
//!     match call(&pick) {
//!         Ok(usage) => { router.on_end(&pick, elapsed, Ok(tokens)); break }
//!         Err(e) if a byte reached the client => { router.on_end(..); break }   // never retried
//!         Err(e) => { let f = AttemptFailure::from_error(class, &e, &pick);
//!                     router.on_end(&pick, elapsed, Err(&f)); last = Some(f) }
//!     }
//! }
//! ```
//!
//! The [`ModelRegistry`] is an immutable snapshot; live state (stats,
//! cooldowns) is atomics per deployment. Nothing on the request path locks.
//!
//! With Redis configured, the router holds a [`FleetLink`]: the cooldowns
//! it starts and, with allowed fails, the failures it counts are handed to
//! the control plane without waiting ([`fleet`]), and cooldowns announced by
//! other replicas are applied with [`Router::cool_until_unix`] and
//! [`Router::cool_for`] (atomics only).

mod cooldown;
pub mod cooldowns;
pub mod fleet;
mod plan;
mod registry;
mod retry;
mod select;
mod settings;
mod stats;
mod strategy;

pub use fleet::{FleetEvent, FleetLink};
pub use plan::{request_fallback_overrides, AttemptFailure, Pick, Plan, PlanInput};
pub use registry::{ModelRegistry, Route};
pub use retry::PerClass;
pub use settings::{Fallbacks, FieldError, GroupAlias, RouterSettings};
pub use stats::DeploymentStats;
pub use strategy::Strategy;

use crate::deployment::Deployment;
use crate::error::ErrorClass;
use cooldown::Cooldowns;
use stats::{minute_of, Clock, Stats};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// The model groups with their live state and the router settings.
#[derive(Debug)]
pub struct Router {
    registry: ModelRegistry,
    settings: RouterSettings,
    stats: Stats,
    cooldowns: Cooldowns,
    /// Whether each slot failed its last background health check: such a
    /// deployment is picked only when its whole group is cooling or down.
    down: Box<[Arc<AtomicBool>]>,
    /// Price per token (input + output) of each slot, for cost-based
    /// routing; infinite when unknown.
    costs: Box<[f64]>,
    /// Lower-case `region_name` of each slot.
    regions: Box<[Option<String>]>,
    /// Context window of each slot: its `max_input_tokens`, else the
    /// shipped price map's.
    windows: Box<[Option<u64>]>,
    /// Above how many prompt tokens the estimate matters to routing: 0 when
    /// a deployment has a `tpm`, else the smallest `max_input_tokens`;
    /// `None` when no deployment has either.
    prompt_estimate_above: Option<u64>,
    clock: Clock,
    /// Where cooldowns and counted failures go to be shared; `None`
    /// without Redis.
    fleet: Option<FleetLink>,
}

impl Router {
    /// A router over `deployments` (slots in this order) with `settings`.
    pub fn new(deployments: Vec<Deployment>, settings: RouterSettings) -> Router {
        let shared = deployments.into_iter().map(Arc::new).collect();
        Router::build(shared, settings, None)
    }

    /// This router, sharing its cooldowns through `link` (kept by the
    /// snapshots built from it).
    pub fn with_fleet(mut self, link: FleetLink) -> Router {
        self.fleet = Some(link);
        self
    }

    /// A router over `deployments` that replaces `previous`: a deployment
    /// present in both, unchanged (the same `Arc`), keeps its live state
    /// (stats, cooldown); new or changed deployments start fresh. The fleet
    /// link of `previous` is kept.
    pub fn build(
        deployments: Vec<Arc<Deployment>>,
        settings: RouterSettings,
        previous: Option<&Router>,
    ) -> Router {
        let registry = ModelRegistry::from_shared(deployments);
        let deps = registry.deployments();
        let before: HashMap<&str, usize> = previous
            .map(|p| {
                let prev = p.registry.deployments().iter().enumerate();
                prev.map(|(slot, d)| (&*d.id, slot)).collect()
            })
            .unwrap_or_default();
        let carried = |d: &Arc<Deployment>| -> Option<(&Router, usize)> {
            let prev = previous?;
            let slot = *before.get(&*d.id)?;
            Arc::ptr_eq(&prev.registry.deployments()[slot], d).then_some((prev, slot))
        };
        let stats = deps
            .iter()
            .map(|d| carried(d).map_or_else(Arc::default, |(p, s)| p.stats.shared(s)))
            .collect();
        let cooldowns = deps
            .iter()
            .map(|d| carried(d).map_or_else(Arc::default, |(p, s)| p.cooldowns.shared(s)))
            .collect();
        let down = deps
            .iter()
            .map(|d| carried(d).map_or_else(Arc::default, |(p, s)| p.down[s].clone()))
            .collect();
        let costs = deps
            .iter()
            .map(|d| {
                let known = d.input_cost_per_token.is_some()
                    || d.output_cost_per_token.is_some()
                    || crate::spend::shipped(&d.upstream_model).is_some();
                let p = crate::spend::price_for(d, &d.upstream_model);
                if known {
                    p.input_per_token + p.output_per_token
                } else {
                    f64::INFINITY
                }
            })
            .collect();
        let regions = deps
            .iter()
            .map(|d| d.region.as_deref().map(str::to_ascii_lowercase))
            .collect();
        let windows: Box<[Option<u64>]> = deps
            .iter()
            .map(|d| crate::spend::max_input_tokens(d, &d.upstream_model))
            .collect();
        let prompt_estimate_above = if deps.iter().any(|d| d.tpm.is_some()) {
            Some(0)
        } else {
            windows.iter().flatten().copied().min()
        };
        Router {
            prompt_estimate_above,
            stats: Stats::from_slots(stats),
            cooldowns: Cooldowns::from_slots(cooldowns),
            down,
            costs,
            regions,
            windows,
            clock: previous.map_or_else(Clock::new, |p| p.clock.clone()),
            fleet: previous.and_then(|p| p.fleet.clone()),
            registry,
            settings,
        }
    }

    /// Whether [`PlanInput::prompt_tokens`] matters to this router for a
    /// prompt of at most `upper_bound` tokens: a deployment has a `tpm`, or
    /// a context window the prompt might not fit. When not, the caller may
    /// skip estimating the prompt.
    pub fn needs_prompt_estimate(&self, upper_bound: u64) -> bool {
        self.prompt_estimate_above
            .is_some_and(|above| upper_bound > above)
    }

    /// The model groups.
    pub fn registry(&self) -> &ModelRegistry {
        &self.registry
    }

    /// The settings in force.
    pub fn settings(&self) -> &RouterSettings {
        &self.settings
    }

    /// An attempt is about to be sent: counts it in flight and against the
    /// deployment's `rpm`.
    pub fn on_start(&self, pick: &Pick<'_>) {
        let minute = minute_of(self.clock.now_ms());
        self.stats.get(pick.slot).start(minute);
    }

    /// [`Router::on_start`] for an attempt whose future may be dropped
    /// before it ends (a `during_call` guardrail's block drops the call
    /// where it stands): the [`Running`] attempt reports its end with
    /// [`Running::end`], and dropped without it, leaves the in-flight count
    /// as neither a success nor a failure of the deployment.
    pub fn start(&self, pick: &Pick<'_>) -> Running<'_> {
        self.on_start(pick);
        Running {
            router: self,
            slot: pick.slot,
            ended: false,
        }
    }

    /// An attempt ended after `latency`: `Ok(tokens)` used, or the failure.
    /// Updates load, latency and usage, and applies the cooldown rules. Call
    /// it before asking the plan for the next pick, so the retry sees the
    /// cooldown.
    pub fn on_end(&self, pick: &Pick<'_>, latency: Duration, result: Result<u64, &AttemptFailure>) {
        let now = self.clock.now_ms();
        let minute = minute_of(now);
        let stats = self.stats.get(pick.slot);
        let failure = match result {
            Ok(tokens) => return stats.succeed(minute, latency, tokens),
            Err(f) => f,
        };
        let fault = cooldown::is_deployment_fault(failure.class, failure.status);
        stats.fail(minute, latency, fault, failure.class == ErrorClass::Timeout);
        let health = stats.health_in(minute);
        let counted = fault && !self.settings.disable_cooldowns;
        if let (Some(fleet), Some(allowed), true) = (
            &self.fleet,
            cooldown::allowed_fails(&self.settings, failure.class),
            counted,
        ) {
            fleet.send(FleetEvent::Failed {
                deployment: pick.deployment.id.clone(),
                allowed,
                cooldown: cooldown::cooldown_time(&self.settings, failure.retry_after),
            });
        }
        if cooldown::should_cool(
            &self.settings,
            failure.class,
            failure.status,
            pick.group_len,
            health,
        ) {
            let time = cooldown::cooldown_time(&self.settings, failure.retry_after);
            let end = self.cooldowns.start(pick.slot, now, time);
            stats.reset_health(minute);
            crate::metrics::cooled_down(pick.deployment, failure.status);
            if let Some(fleet) = &self.fleet {
                fleet.send(FleetEvent::Cooled {
                    deployment: pick.deployment.id.clone(),
                    until_unix_ms: self.clock.to_unix(end),
                });
            }
            tracing::info!(
                deployment = %pick.deployment.id,
                group = %pick.group,
                class = failure.class.as_str(),
                status = failure.status,
                seconds = time.as_secs_f64(),
                "deployment cooling down"
            );
        }
    }

    /// The most failures this minute of a deployment serving `model` (0
    /// when none serves it): LiteLLM's dynamic rate limits read it.
    pub fn failures_this_minute(&self, model: &str) -> u64 {
        let Some(route) = self.registry.resolve(model) else {
            return 0;
        };
        let minute = minute_of(self.clock.now_ms());
        route
            .members
            .slots
            .iter()
            .map(|slot| self.stats.get(*slot).health_in(minute).1)
            .max()
            .unwrap_or(0)
    }

    /// The live numbers of the deployment with this id.
    pub fn stats(&self, deployment_id: &str) -> Option<&DeploymentStats> {
        self.slot_of(deployment_id).map(|s| self.stats.get(s))
    }

    /// Whether the deployment with this id is cooling down now.
    pub fn is_cooling(&self, deployment_id: &str) -> bool {
        self.slot_of(deployment_id)
            .is_some_and(|s| self.cooldowns.is_cooling(s, self.clock.now_ms()))
    }

    /// Cools the deployment with this id until `until_unix_ms` (a cooldown
    /// announced by another replica) unless it already cools longer;
    /// `false` when no deployment has this id.
    pub fn cool_until_unix(&self, deployment_id: &str, until_unix_ms: u64) -> bool {
        let Some(slot) = self.slot_of(deployment_id) else {
            return false;
        };
        self.cooldowns
            .extend_to(slot, self.clock.of_unix(until_unix_ms));
        true
    }

    /// Cools the deployment with this id for `remaining` from now, unless
    /// it already cools longer; the end in unix milliseconds, `None` when
    /// no deployment has this id.
    pub fn cool_for(&self, deployment_id: &str, remaining: Duration) -> Option<u64> {
        let slot = self.slot_of(deployment_id)?;
        let end = self.cooldowns.start(slot, self.clock.now_ms(), remaining);
        Some(self.clock.to_unix(end))
    }

    /// Records a background health check of the deployment with this id:
    /// an unhealthy one ranks with cooling deployments until a check finds
    /// it healthy; `false` when no deployment has this id.
    pub fn set_healthy(&self, deployment_id: &str, healthy: bool) -> bool {
        let Some(slot) = self.slot_of(deployment_id) else {
            return false;
        };
        self.down[slot].store(!healthy, Relaxed);
        true
    }

    /// Whether the deployment in `slot` failed its last health check.
    pub(crate) fn is_down(&self, slot: usize) -> bool {
        self.down[slot].load(Relaxed)
    }

    fn slot_of(&self, deployment_id: &str) -> Option<usize> {
        self.registry
            .deployments()
            .iter()
            .position(|d| &*d.id == deployment_id)
    }
}

/// An attempt counted in flight by [`Router::start`] until it ends.
#[must_use = "dropping it ends the attempt as abandoned"]
pub struct Running<'r> {
    router: &'r Router,
    slot: usize,
    ended: bool,
}

impl Running<'_> {
    /// The attempt ended: [`Router::on_end`].
    pub fn end(mut self, pick: &Pick<'_>, latency: Duration, result: Result<u64, &AttemptFailure>) {
        self.ended = true;
        self.router.on_end(pick, latency, result);
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.router.stats.get(self.slot).abandon();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::Config;

    /// A router from a `model_list` document and `router_settings` lines.
    pub(crate) fn router(models: &str, router_settings: &str) -> Router {
        let mut yaml = models.to_string();
        if !router_settings.is_empty() {
            yaml += "router_settings:\n";
            for line in router_settings.lines() {
                yaml += &format!("  {line}\n");
            }
        }
        let cfg = Config::parse(std::path::Path::new("c.yaml"), &yaml, &|_| None).unwrap();
        Router::new(cfg.deployments, cfg.router)
    }

    #[test]
    fn on_end_cools_by_the_rules_and_counts_usage() {
        let r = router(
            "model_list:\n  - model_name: g\n    litellm_params: {model: mock/a}\n    model_info: {id: a}\n  - model_name: g\n    litellm_params: {model: mock/b}\n    model_info: {id: b}\n",
            "",
        );
        let mut plan = r.plan("g", PlanInput::default()).unwrap();
        let pick = plan.next(None).unwrap();
        let id = pick.deployment.id.to_string();
        r.on_start(&pick);
        assert_eq!(r.stats(&id).unwrap().in_flight(), 1);
        r.on_end(&pick, Duration::from_millis(20), Ok(42));
        let s = r.stats(&id).unwrap();
        assert_eq!(
            (s.in_flight(), s.latency()),
            (0, Some(Duration::from_millis(20)))
        );
        assert!(!r.is_cooling(&id));
        r.on_start(&pick);
        let bad = pick.failed(ErrorClass::BadRequest, 400, None);
        r.on_end(&pick, Duration::from_millis(5), Err(&bad));
        assert!(!r.is_cooling(&id), "a bad request is the client's");
        r.on_start(&pick);
        let limited = pick.failed(ErrorClass::RateLimit, 429, None);
        r.on_end(&pick, Duration::from_millis(5), Err(&limited));
        assert!(r.is_cooling(&id), "429 in a group of two");
        assert!(r.stats("nope").is_none() && !r.is_cooling("nope"));
    }

    #[test]
    fn an_attempt_dropped_before_its_end_leaves_the_in_flight_count_alone() {
        let r = router(
            "model_list:\n  - model_name: g\n    litellm_params: {model: mock/a}\n    model_info: {id: a}\n",
            "",
        );
        let mut plan = r.plan("g", PlanInput::default()).unwrap();
        let pick = plan.next(None).unwrap();
        let running = r.start(&pick);
        assert_eq!(r.stats("a").unwrap().in_flight(), 1);
        drop(running);
        let s = r.stats("a").unwrap();
        assert_eq!(s.in_flight(), 0, "released");
        let minute = minute_of(r.clock.now_ms());
        assert_eq!(s.health_in(minute), (0, 0), "neither success nor failure");
        assert!(!r.is_cooling("a"));
        r.start(&pick).end(&pick, Duration::from_millis(3), Ok(7));
        assert_eq!(
            r.stats("a").unwrap().in_flight(),
            0,
            "ended once, not twice"
        );
    }

    #[test]
    fn a_swap_keeps_unrelated_groups_and_the_live_state_of_unchanged_deployments() {
        let old = router(
            "model_list:\n  - model_name: g\n    litellm_params: {model: mock/a}\n    model_info: {id: a}\n  - model_name: h\n    litellm_params: {model: mock/b}\n    model_info: {id: b}\n",
            "",
        );
        let mut plan = old.plan("g", PlanInput::default()).unwrap();
        let pick = plan.next(None).unwrap();
        old.on_start(&pick);
        let refused = pick.failed(ErrorClass::Authentication, 401, None);
        old.on_end(&pick, Duration::from_millis(5), Err(&refused));
        assert!(old.is_cooling("a"));
        let deps = old.registry().deployments();
        let (a, b) = (deps[0].clone(), deps[1].clone());
        let cfg = Config::parse(
            std::path::Path::new("c.yaml"),
            "model_list:\n  - model_name: h\n    litellm_params: {model: mock/b2}\n    model_info: {id: b}\n  - model_name: n\n    litellm_params: {model: mock/n}\n",
            &|_| None,
        )
        .unwrap();
        let mut added: Vec<Arc<Deployment>> = cfg.deployments.into_iter().map(Arc::new).collect();
        let new_dep = added.remove(1);
        let changed_b = added.remove(0);
        let next = Router::build(
            vec![a, changed_b, new_dep],
            old.settings().clone(),
            Some(&old),
        );
        assert!(next.registry().has_group("g") && next.registry().has_group("n"));
        assert_eq!(
            next.stats("a")
                .unwrap()
                .requests_in(minute_of(next.clock.now_ms())),
            1
        );
        assert!(
            next.is_cooling("a"),
            "an unchanged deployment keeps its cooldown"
        );
        assert_eq!(next.stats("b").unwrap().in_flight(), 0);
        let again = Router::build(vec![b], old.settings().clone(), Some(&next));
        assert!(!again.registry().has_group("g"), "a removed group is gone");
        assert!(!again.is_cooling("b"));
    }

    #[test]
    fn cooldowns_and_counted_failures_go_to_the_fleet_link() {
        let models = "model_list:\n  - model_name: g\n    litellm_params: {model: mock/a}\n    model_info: {id: a}\n  - model_name: g\n    litellm_params: {model: mock/b}\n    model_info: {id: b}\n";
        let (link, mut rx) = FleetLink::channel(16);
        let r = router(models, "").with_fleet(link.clone());
        let mut plan = r.plan("g", PlanInput::default()).unwrap();
        let pick = plan.next(None).unwrap();
        let id = pick.deployment.id.clone();
        r.on_end(
            &pick,
            Duration::ZERO,
            Err(&pick.failed(ErrorClass::BadRequest, 400, None)),
        );
        assert!(rx.try_recv().is_err(), "a client error is nobody's news");
        r.on_end(
            &pick,
            Duration::ZERO,
            Err(&pick.failed(ErrorClass::RateLimit, 429, None)),
        );
        let Ok(FleetEvent::Cooled {
            deployment,
            until_unix_ms,
        }) = rx.try_recv()
        else {
            panic!("a cooldown is announced");
        };
        assert_eq!(deployment, id);
        assert!(until_unix_ms.abs_diff(fleet::unix_ms() + 5_000) < 100);
        assert!(rx.try_recv().is_err(), "no counter without allowed_fails");

        let counted = router(models, "allowed_fails: 1").with_fleet(link);
        let mut plan = counted.plan("g", PlanInput::default()).unwrap();
        let pick = plan.next(None).unwrap();
        let failed = pick.failed(ErrorClass::InternalServer, 500, None);
        counted.on_end(&pick, Duration::ZERO, Err(&failed));
        assert_eq!(
            rx.try_recv().unwrap(),
            FleetEvent::Failed {
                deployment: pick.deployment.id.clone(),
                allowed: 1,
                cooldown: Duration::from_secs(5)
            }
        );
        assert!(rx.try_recv().is_err() && !counted.is_cooling(&pick.deployment.id));
        counted.on_end(&pick, Duration::ZERO, Err(&failed));
        assert!(matches!(rx.try_recv(), Ok(FleetEvent::Failed { .. })));
        assert!(
            matches!(rx.try_recv(), Ok(FleetEvent::Cooled { .. })),
            "local count 2 > 1"
        );
        let next = Router::build(
            counted.registry().deployments().to_vec(),
            counted.settings().clone(),
            Some(&counted),
        );
        assert!(next.fleet.is_some(), "a swap keeps the link");
    }

    #[test]
    fn cooldowns_from_other_replicas_apply_by_id() {
        let r = router(
            "model_list:\n  - model_name: g\n    litellm_params: {model: mock/a}\n    model_info: {id: a}\n",
            "",
        );
        assert!(!r.cool_until_unix("nope", fleet::unix_ms() + 60_000));
        assert!(r.cool_until_unix("a", fleet::unix_ms().saturating_sub(1_000)));
        assert!(!r.is_cooling("a"), "an ended cooldown changes nothing");
        assert!(r.cool_until_unix("a", fleet::unix_ms() + 60_000));
        assert!(r.is_cooling("a"));
        assert!(r.cool_for("nope", Duration::from_secs(1)).is_none());
        let end = r.cool_for("a", Duration::from_secs(1)).unwrap();
        assert!(
            end > fleet::unix_ms() + 50_000,
            "the longer cooldown is kept"
        );
    }

    #[test]
    fn an_unhealthy_deployment_is_not_picked_while_its_group_has_another() {
        let r = router(
            "model_list:\n  - model_name: g\n    litellm_params: {model: mock/a}\n    model_info: {id: a}\n  - model_name: g\n    litellm_params: {model: mock/b}\n    model_info: {id: b}\n",
            "",
        );
        assert!(r.set_healthy("a", false) && !r.set_healthy("nope", false));
        for _ in 0..50 {
            let mut plan = r.plan("g", PlanInput::default()).unwrap();
            assert_eq!(&*plan.next(None).unwrap().deployment.id, "b");
        }
        r.set_healthy("b", false);
        let mut plan = r.plan("g", PlanInput::default()).unwrap();
        assert!(
            plan.next(None).is_some(),
            "a group is never down to nothing"
        );
        r.set_healthy("a", true);
        let next = Router::build(
            r.registry().deployments().to_vec(),
            r.settings().clone(),
            Some(&r),
        );
        for _ in 0..50 {
            let mut plan = next.plan("g", PlanInput::default()).unwrap();
            assert_eq!(
                &*plan.next(None).unwrap().deployment.id,
                "a",
                "a swap keeps health"
            );
        }
    }

    #[test]
    fn cost_and_region_tables() {
        let r = router(
            "model_list:\n  - model_name: g\n    litellm_params: {model: mock/gpt-4o, region_name: EU-West}\n  - model_name: g\n    litellm_params: {model: mock/local, input_cost_per_token: 0}\n  - model_name: g\n    litellm_params: {model: mock/unknown-thing}\n",
            "",
        );
        assert!(r.costs[0] > 0.0 && r.costs[0].is_finite());
        assert_eq!(r.costs[1], 0.0);
        assert_eq!(r.costs[2], f64::INFINITY);
        assert_eq!(r.regions[0].as_deref(), Some("eu-west"));
        assert_eq!(r.settings().routing_strategy, Strategy::SimpleShuffle);
    }
}
