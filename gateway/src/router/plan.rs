//! A request's plan: which deployment to call first, and after each failure
//! whether to retry in the same group or fall back to another.
//!
//! Fallbacks wrap retries wrap the call, as in LiteLLM. A group gets up to
//! its retries (by error class); a retry goes to another healthy deployment
//! of the group when there is one, else waits (the upstream's
//! `retry-after`, or backoff) before the same one. When the group is spent,
//! its fallback list is tried in order, depth first: a fallback group has
//! its own retries and its own fallbacks. A group is entered at most once
//! per request, and at most `max_fallbacks` fallback groups are tried.
//!
//! Regions and rpm/tpm headroom bind every group alike: a group without an
//! eligible deployment is skipped. When no group at all can serve, the plan
//! is refused before anything is sent.

use super::registry::Route;
use super::retry::{backoff, retries_for, MAX_RETRY_AFTER};
use super::select::{select, Ask, Selection, FAILED};
use super::settings::Fallbacks;
use super::Router;
use crate::deployment::Deployment;
use crate::error::{ErrorClass, GatewayError};
use crate::inbound::MAX_REQUEST_FALLBACKS;
use smallvec::{smallvec, SmallVec};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// What a request brings to its plan.
#[derive(Debug, Clone, Default)]
pub struct PlanInput {
    /// Regions the key or team allows (`allowed_model_region`); `None` for
    /// `router_settings.allowed_model_region`, or no constraint.
    pub allowed_regions: Option<Vec<String>>,
    /// Prompt estimate in tokens (tpm headroom, context-window fallbacks).
    pub prompt_tokens: u64,
    /// The request's `num_retries`, replacing the router's.
    pub num_retries: Option<u32>,
    /// The request's `fallbacks` for the requested group, replacing the
    /// configured ones (`Some(vec![])` disables fallbacks); see
    /// [`PlanInput::request_fallbacks`].
    pub fallbacks: Option<Vec<String>>,
    /// Whether the response streams (selects `stream_timeout`).
    pub stream: bool,
    /// The request's tags (`tags`, else `metadata.tags`), for tag-based
    /// routing; read only with `enable_tag_filtering`.
    pub tags: Vec<String>,
}

impl PlanInput {
    /// The fallback groups for `model` from a request's `fallbacks` field,
    /// in the forms LiteLLM accepts: `["g1", "g2"]` (an entry may also be
    /// `{"model": "g1"}`), or `[{"model": ["g1"]}]` (an entry for `model`,
    /// else for `*`). Check it with [`PlanInput::request_fallback_names`]
    /// first.
    pub fn request_fallbacks(
        value: &serde_json::Value,
        model: &str,
    ) -> Result<Vec<String>, String> {
        let items = value.as_array().ok_or_else(fallbacks_shape)?;
        if items.iter().all(|i| fallback_target(i).is_some()) {
            return Ok(items
                .iter()
                .filter_map(fallback_target)
                .map(str::to_string)
                .collect());
        }
        let mut generic = None;
        for item in items {
            for (key, list) in item.as_object().ok_or_else(fallbacks_shape)? {
                let names = list.as_array().ok_or_else(fallbacks_shape)?;
                let names: Vec<String> = names
                    .iter()
                    .map(|n| n.as_str().map(str::to_string).ok_or_else(fallbacks_shape))
                    .collect::<Result<_, _>>()?;
                if key == model {
                    return Ok(names);
                }
                if key == "*" && generic.is_none() {
                    generic = Some(names);
                }
            }
        }
        Ok(generic.unwrap_or_default())
    }

    /// Every model a request's `fallbacks` names, in any of its entries
    /// (LiteLLM checks each against the caller's key, and that it can be
    /// routed, before the request runs), at most
    /// [`MAX_REQUEST_FALLBACKS`] (as many as entries).
    pub fn request_fallback_names(value: &serde_json::Value) -> Result<Vec<&str>, String> {
        let items = value.as_array().ok_or_else(fallbacks_shape)?;
        let mut names = Vec::new();
        for item in items {
            if let Some(name) = fallback_target(item) {
                names.push(name);
                continue;
            }
            let entry = item.as_object().ok_or_else(fallbacks_shape)?;
            for list in entry.values() {
                for name in list.as_array().ok_or_else(fallbacks_shape)? {
                    names.push(name.as_str().ok_or_else(fallbacks_shape)?);
                }
            }
        }
        if names.len() > MAX_REQUEST_FALLBACKS {
            return Err(format!(
                "at most {MAX_REQUEST_FALLBACKS} fallback models may be given"
            ));
        }
        Ok(names)
    }
}

/// The list-form entries of a request's `fallbacks` that bring their own
/// request parameters (`{"model": "g", "messages": [...]}`, LiteLLM's
/// form): the fallback model and the parameters that replace the request's
/// own when that model is tried (as LiteLLM updates the call's arguments
/// with the entry).
pub fn request_fallback_overrides(
    value: &serde_json::Value,
) -> Vec<(&str, serde_json::Map<String, serde_json::Value>)> {
    let Some(items) = value.as_array() else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let entry = item.as_object().filter(|e| e.len() > 1)?;
            let model = entry.get("model")?.as_str()?;
            let fields = entry
                .iter()
                .filter(|(k, _)| *k != "model")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Some((model, fields))
        })
        .collect()
}

fn fallbacks_shape() -> String {
    "fallbacks must be a list of model names (or {model: name} entries) or of {model: [models]} entries"
        .to_string()
}

/// A list-form fallback entry: a model name, or `{"model": name}` (with
/// or without request parameters of its own, see
/// [`request_fallback_overrides`]).
fn fallback_target(item: &serde_json::Value) -> Option<&str> {
    match item {
        serde_json::Value::String(name) => Some(name),
        serde_json::Value::Object(entry) => entry.get("model")?.as_str(),
        _ => None,
    }
}

/// Why an attempt failed, as the request loop reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptFailure {
    /// What kind of failure it was.
    pub class: ErrorClass,
    /// HTTP status answered (or implied).
    pub status: u16,
    /// The upstream's `retry-after`.
    pub retry_after: Option<Duration>,
    /// The deployment that failed.
    pub deployment: Arc<str>,
}

impl AttemptFailure {
    /// The failure of `pick` with `err`, classed `class` (usually
    /// `err.class()`); a `retry-after` in seconds is read from `err`.
    pub fn from_error(class: ErrorClass, err: &GatewayError, pick: &Pick<'_>) -> AttemptFailure {
        let retry_after = err
            .retry_after()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64);
        pick.failed(class, err.status(), retry_after)
    }
}

/// One attempt to make.
#[derive(Debug)]
pub struct Pick<'r> {
    /// The model group (`x-litellm-model-group`).
    pub group: Cow<'r, str>,
    /// The deployment to call.
    pub deployment: &'r Arc<Deployment>,
    /// The model name to send to its provider.
    pub upstream_model: Cow<'r, str>,
    /// 1 for the first attempt of the request, then 2, 3, ...
    pub attempt: u32,
    /// Retries in this group before this attempt (0 for the group's first).
    pub retry_of_group: u32,
    /// 0 in the requested group, 1 in its fallbacks, 2 in theirs...
    pub fallback_depth: u32,
    /// How long to wait before sending.
    pub delay: Duration,
    /// The deployment's `timeout`, or `stream_timeout` for a stream.
    pub timeout: Duration,
    pub(crate) slot: usize,
    pub(crate) group_len: usize,
}

impl Pick<'_> {
    /// The failure of this attempt.
    pub fn failed(
        &self,
        class: ErrorClass,
        status: u16,
        retry_after: Option<Duration>,
    ) -> AttemptFailure {
        AttemptFailure {
            class,
            status,
            retry_after,
            deployment: self.deployment.id.clone(),
        }
    }
}

/// The attempts of one request: see the module documentation.
#[derive(Debug)]
pub struct Plan<'r> {
    router: &'r Router,
    rng: fastrand::Rng,
    regions: Option<Cow<'r, [String]>>,
    /// The request's tags with `enable_tag_filtering`, else `None`.
    tags: Option<Vec<String>>,
    prompt_tokens: u64,
    stream: bool,
    num_retries: u32,
    request_fallbacks: Option<Vec<String>>,
    /// The group being attempted.
    current: Option<Current<'r>>,
    /// Fallback lists still to try, innermost last.
    pending: Vec<Frame<'r>>,
    /// Groups entered (or skipped) so far.
    visited: SmallVec<[Cow<'r, str>; 2]>,
    /// The first pick, found by `plan()`.
    first: Option<Pick<'r>>,
    /// Whether a group was skipped for want of rpm/tpm headroom.
    at_capacity: bool,
    attempts: u32,
    retries: u32,
    fallbacks: u32,
}

#[derive(Debug)]
struct Current<'r> {
    route: Route<'r>,
    depth: u32,
    retries: u32,
    tried: SmallVec<[usize; 4]>,
}

/// A fallback list being walked.
#[derive(Debug)]
struct Frame<'r> {
    groups: Cow<'r, [String]>,
    next: usize,
    depth: u32,
    /// False for the entry that calls a group whose context-window
    /// fallbacks gave nothing: it is called anyway, once.
    check_context: bool,
}

impl Router {
    /// The plan for a request to `model`; fails when no group the request
    /// may reach has an eligible deployment: 429 when some are in an allowed
    /// region but all of those are at their rpm/tpm limit, else 400 naming
    /// the requested group and the allowed regions.
    pub fn plan(&self, model: &str, input: PlanInput) -> Result<Plan<'_>, GatewayError> {
        self.plan_with(model, input, fastrand::Rng::new())
    }

    pub(crate) fn plan_with(
        &self,
        model: &str,
        input: PlanInput,
        rng: fastrand::Rng,
    ) -> Result<Plan<'_>, GatewayError> {
        let route = self
            .registry
            .resolve(model)
            .ok_or_else(|| GatewayError::UnknownModel(model.to_string()))?;
        let regions = match input.allowed_regions {
            Some(r) => Some(Cow::Owned(
                r.iter().map(|r| r.to_ascii_lowercase()).collect(),
            )),
            None => self
                .settings
                .allowed_model_region
                .as_deref()
                .map(Cow::Borrowed),
        };
        let mut plan = Plan {
            router: self,
            rng,
            regions,
            tags: self.settings.enable_tag_filtering.then_some(input.tags),
            prompt_tokens: input.prompt_tokens,
            stream: input.stream,
            num_retries: input.num_retries.unwrap_or(self.settings.num_retries),
            request_fallbacks: input.fallbacks,
            current: None,
            pending: Vec::new(),
            visited: SmallVec::new(),
            first: None,
            at_capacity: false,
            attempts: 0,
            retries: 0,
            fallbacks: 0,
        };
        let group = route.group.clone();
        plan.first = plan.enter(route, 0, true).or_else(|| plan.advance());
        if plan.first.is_some() {
            return Ok(plan);
        }
        if let Some(tags) = plan.tags.take() {
            let route = self.registry.resolve(model);
            if route.is_some_and(|r| {
                super::select::tag_pool(self, r.members, Some(&tags))
                    == super::select::TagPool::Nothing
            }) {
                return Err(GatewayError::NoTaggedDeployment {
                    group: group.into_owned(),
                    tags,
                });
            }
        }
        if plan.at_capacity {
            let ms_left = 60_000 - self.clock.now_ms() % 60_000;
            return Err(GatewayError::NoCapacity {
                group: group.into_owned(),
                retry_after: ms_left.div_ceil(1000).to_string(),
            });
        }
        Err(GatewayError::NoEligibleDeployment {
            group: group.into_owned(),
            regions: plan.regions.map(Cow::into_owned).unwrap_or_default(),
        })
    }
}

impl<'r> Plan<'r> {
    /// The next attempt: the first with `None`, then after each failure the
    /// retry or fallback it calls for, `None` when the plan is spent (the
    /// caller then answers with the last error). Report the failure with
    /// [`Router::on_end`] first. Never ask again once a byte of the response
    /// has reached the client: that attempt is final.
    pub fn next(&mut self, last: Option<&AttemptFailure>) -> Option<Pick<'r>> {
        let Some(failure) = last else {
            return self.first.take();
        };
        self.first = None;
        if let Some(pick) = self.retry(failure) {
            self.retries += 1;
            return Some(pick);
        }
        if let Some(cur) = self.current.take() {
            if let Some(groups) = self.fallbacks_after(&cur.route, cur.depth, failure.class) {
                self.pending.push(Frame {
                    groups,
                    next: 0,
                    depth: cur.depth + 1,
                    check_context: true,
                });
            }
        }
        self.advance()
    }

    /// Abandons the group of the last pick without calling it (the caller
    /// may not use it) and returns the next pick: the next fallback group,
    /// never a retry in the abandoned one.
    pub fn skip_group(&mut self) -> Option<Pick<'r>> {
        self.first = None;
        self.current = None;
        self.advance()
    }

    /// Retries made so far (`x-litellm-attempted-retries`).
    pub fn attempted_retries(&self) -> u32 {
        self.retries
    }

    /// Fallback groups tried so far (`x-litellm-attempted-fallbacks`).
    pub fn attempted_fallbacks(&self) -> u32 {
        self.fallbacks
    }

    /// The most fallback groups this request may try (`x-litellm-max-fallbacks`).
    pub fn max_fallbacks(&self) -> u32 {
        self.router.settings.max_fallbacks
    }

    /// Retries a group gets when its error class has no policy
    /// (`x-litellm-max-retries`).
    pub fn max_retries(&self) -> u32 {
        self.num_retries
    }

    /// Enters `route` at `depth`: its first pick, or `None` after queueing
    /// what to try instead.
    fn enter(&mut self, route: Route<'r>, depth: u32, check_context: bool) -> Option<Pick<'r>> {
        let router = self.router;
        self.visited.push(route.group.clone());
        if check_context && self.too_small(&route) {
            if let Some(larger) = lookup(&router.settings.context_window_fallbacks, &route) {
                self.pending.push(Frame {
                    groups: Cow::Owned(vec![route.group.to_string()]),
                    next: 0,
                    depth,
                    check_context: false,
                });
                self.pending.push(Frame {
                    groups: Cow::Borrowed(larger),
                    next: 0,
                    depth: depth + 1,
                    check_context: true,
                });
                return None;
            }
        }
        let ask = Ask {
            regions: self.regions.as_deref(),
            tags: self.tags.as_deref(),
            prompt_tokens: self.prompt_tokens,
            context_filter: router.settings.enable_pre_call_checks && !self.too_small(&route),
            tried: &[],
            failed: None,
            now_ms: router.clock.now_ms(),
        };
        match select(router, route.members, &ask, &mut self.rng) {
            Selection::Picked { slot, .. } => {
                if depth > 0 {
                    self.fallbacks += 1;
                }
                self.current = Some(Current {
                    route,
                    depth,
                    retries: 0,
                    tried: smallvec![slot],
                });
                Some(self.pick(slot, Duration::ZERO))
            }
            skipped => {
                self.at_capacity |= skipped == Selection::AtCapacity;
                if let Some(groups) = self.regular_fallbacks(&route, depth) {
                    self.pending.push(Frame {
                        groups,
                        next: 0,
                        depth: depth + 1,
                        check_context: true,
                    });
                }
                None
            }
        }
    }

    /// Walks the pending fallback lists to the next group that can serve.
    fn advance(&mut self) -> Option<Pick<'r>> {
        let router = self.router;
        while let Some(frame) = self.pending.last_mut() {
            let Some(name) = frame.groups.get(frame.next).cloned() else {
                self.pending.pop();
                continue;
            };
            frame.next += 1;
            let (depth, check_context) = (frame.depth, frame.check_context);
            if depth > 0 && self.fallbacks >= router.settings.max_fallbacks {
                continue;
            }
            if check_context && self.visited.iter().any(|v| *v == name) {
                continue;
            }
            let Some(route) = router.registry.resolve(&name) else {
                continue;
            };
            if let Some(pick) = self.enter(route, depth, check_context) {
                return Some(pick);
            }
        }
        None
    }

    /// A retry in the current group after `f`, if its class, the retries
    /// left and the group's deployments allow one.
    fn retry(&mut self, f: &AttemptFailure) -> Option<Pick<'r>> {
        let router = self.router;
        let settings = &router.settings;
        let cur = self.current.as_ref()?;
        if cur.retries >= retries_for(&settings.retry_policy, f.class, self.num_retries) {
            return None;
        }
        let specific = match f.class {
            ErrorClass::ContentPolicy => lookup(&settings.content_policy_fallbacks, &cur.route),
            ErrorClass::ContextWindow => lookup(&settings.context_window_fallbacks, &cur.route),
            _ => None,
        };
        if specific.is_some() {
            return None;
        }
        let deployments = router.registry.deployments();
        let failed = cur
            .tried
            .iter()
            .copied()
            .find(|&s| deployments[s].id == f.deployment);
        let ask = Ask {
            regions: self.regions.as_deref(),
            tags: self.tags.as_deref(),
            prompt_tokens: self.prompt_tokens,
            context_filter: settings.enable_pre_call_checks && !self.too_small(&cur.route),
            tried: &cur.tried,
            failed,
            now_ms: router.clock.now_ms(),
        };
        let Selection::Picked { slot, tier } =
            select(router, cur.route.members, &ask, &mut self.rng)
        else {
            return None;
        };
        let same = failed == Some(slot);
        match f.class {
            ErrorClass::RateLimit
                if tier >= FAILED && self.has_fallbacks(&cur.route, cur.depth) =>
            {
                return None
            }
            ErrorClass::Authentication if same => return None,
            _ if same && f.retry_after.is_some_and(|ra| ra > MAX_RETRY_AFTER) => return None,
            _ => {}
        }
        let delay = if same {
            backoff(
                cur.retries + 1,
                f.retry_after,
                settings.retry_after,
                &mut self.rng,
            )
        } else {
            Duration::ZERO
        };
        let cur = self.current.as_mut()?;
        cur.retries += 1;
        if !cur.tried.contains(&slot) {
            cur.tried.push(slot);
        }
        Some(self.pick(slot, delay))
    }

    fn pick(&mut self, slot: usize, delay: Duration) -> Pick<'r> {
        let cur = self.current.as_ref().expect("a pick is made in a group");
        let deployment = &self.router.registry.deployments()[slot];
        self.attempts += 1;
        Pick {
            group: cur.route.group.clone(),
            deployment,
            upstream_model: cur.route.upstream_model(deployment),
            attempt: self.attempts,
            retry_of_group: cur.retries,
            fallback_depth: cur.depth,
            delay,
            timeout: if self.stream {
                deployment.stream_timeout
            } else {
                deployment.timeout
            },
            slot,
            group_len: cur.route.members.slots.len(),
        }
    }

    /// Whether the prompt exceeds every deployment's context window.
    fn too_small(&self, route: &Route<'_>) -> bool {
        route
            .members
            .max_input_tokens
            .is_some_and(|m| self.prompt_tokens > m)
    }

    /// Where to go after the group failed with `class`: the content-policy
    /// or context-window list when the class has one, else the regular one.
    fn fallbacks_after(
        &self,
        route: &Route<'r>,
        depth: u32,
        class: ErrorClass,
    ) -> Option<Cow<'r, [String]>> {
        let settings = &self.router.settings;
        let specific = match class {
            ErrorClass::ContentPolicy => lookup(&settings.content_policy_fallbacks, route),
            ErrorClass::ContextWindow => lookup(&settings.context_window_fallbacks, route),
            _ => None,
        };
        specific
            .map(Cow::Borrowed)
            .or_else(|| self.regular_fallbacks(route, depth))
    }

    /// The request's fallbacks for the requested group (they replace all
    /// configured ones), else `fallbacks`, else `default_fallbacks`.
    fn regular_fallbacks(&self, route: &Route<'r>, depth: u32) -> Option<Cow<'r, [String]>> {
        if let Some(own) = &self.request_fallbacks {
            return (depth == 0).then(|| Cow::Owned(own.clone()));
        }
        let settings = &self.router.settings;
        lookup(&settings.fallbacks, route)
            .or_else(|| {
                (!settings.default_fallbacks.is_empty()).then_some(&settings.default_fallbacks[..])
            })
            .map(Cow::Borrowed)
    }

    fn has_fallbacks(&self, route: &Route<'r>, depth: u32) -> bool {
        self.regular_fallbacks(route, depth)
            .is_some_and(|l| !l.is_empty())
    }
}

/// The entry for the route's group, else for its wildcard pattern.
fn lookup<'r>(map: &'r Fallbacks, route: &Route<'_>) -> Option<&'r [String]> {
    map.get(&route.group)
        .or_else(|| route.pattern().and_then(|p| map.get(p)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::tests::router;

    /// A `model_list` of `(group, id, extra litellm_params)`.
    fn models(entries: &[(&str, &str, &str)]) -> String {
        let mut yaml = "model_list:\n".to_string();
        for (group, id, extra) in entries {
            yaml += &format!(
                "  - model_name: {group}\n    litellm_params: {{model: mock/{id}{sep}{extra}}}\n    model_info: {{id: {id}}}\n",
                sep = if extra.is_empty() { "" } else { ", " }
            );
        }
        yaml
    }

    fn plan<'r>(r: &'r Router, model: &str, input: PlanInput) -> Result<Plan<'r>, GatewayError> {
        r.plan_with(model, input, fastrand::Rng::with_seed(11))
    }

    /// Fails `pick` with `class`/`status` and asks for the next one.
    fn after<'r>(
        p: &mut Plan<'r>,
        pick: &Pick<'r>,
        class: ErrorClass,
        status: u16,
    ) -> Option<Pick<'r>> {
        p.next(Some(&pick.failed(class, status, None)))
    }

    fn id(pick: &Pick<'_>) -> String {
        pick.deployment.id.to_string()
    }

    /// The deployments a plan calls when every attempt fails with `class`.
    fn walk(p: &mut Plan<'_>, class: ErrorClass, status: u16) -> Vec<String> {
        let mut seen = Vec::new();
        let mut pick = p.next(None);
        while let Some(cur) = pick {
            seen.push(format!("{}:{}", cur.group, id(&cur)));
            pick = after(p, &cur, class, status);
        }
        seen
    }

    #[test]
    fn retries_prefer_another_deployment_without_waiting() {
        let r = router(
            &models(&[("g", "a", ""), ("g", "b", ""), ("g", "c", "")]),
            "num_retries: 2",
        );
        let mut p = plan(&r, "g", PlanInput::default()).unwrap();
        let first = p.next(None).unwrap();
        assert_eq!(
            (first.attempt, first.retry_of_group, first.delay),
            (1, 0, Duration::ZERO)
        );
        let second = after(&mut p, &first, ErrorClass::InternalServer, 500).unwrap();
        let third = after(&mut p, &second, ErrorClass::Timeout, 408).unwrap();
        let mut ids = vec![id(&first), id(&second), id(&third)];
        ids.sort();
        assert_eq!(ids, ["a", "b", "c"], "each retry goes elsewhere");
        assert_eq!(
            (third.attempt, third.retry_of_group, third.delay),
            (3, 2, Duration::ZERO)
        );
        assert!(
            after(&mut p, &third, ErrorClass::Timeout, 408).is_none(),
            "2 retries spent"
        );
        assert_eq!(
            (
                p.attempted_retries(),
                p.attempted_fallbacks(),
                p.max_retries()
            ),
            (2, 0, 2)
        );
    }

    #[test]
    fn a_lone_deployment_is_retried_after_backoff_or_retry_after() {
        let r = router(
            &models(&[("g", "a", "")]),
            "num_retries: 3\nretry_after: 0.1",
        );
        let mut p = plan(&r, "g", PlanInput::default()).unwrap();
        let first = p.next(None).unwrap();
        let second = after(&mut p, &first, ErrorClass::InternalServer, 500).unwrap();
        assert_eq!(id(&second), "a");
        assert!(
            second.delay >= Duration::from_millis(375)
                && second.delay <= Duration::from_millis(500)
        );
        let asked = first.failed(ErrorClass::RateLimit, 429, Some(Duration::from_secs(7)));
        let third = p.next(Some(&asked)).unwrap();
        assert_eq!(third.delay, Duration::from_secs(7), "retry-after honoured");
        let too_long = first.failed(ErrorClass::RateLimit, 429, Some(Duration::from_secs(3600)));
        assert!(p.next(Some(&too_long)).is_none(), "not waited for");
    }

    #[test]
    fn retry_policy_per_class() {
        let r = router(
            &models(&[("g", "a", ""), ("g", "b", ""), ("g", "c", ""), ("h", "h", "")]),
            "num_retries: 2\nretry_policy: {TimeoutErrorRetries: 0, BadRequestErrorRetries: 1}\nfallbacks: [{g: [h]}]",
        );
        let mut p = plan(&r, "g", PlanInput::default()).unwrap();
        let first = p.next(None).unwrap();
        let next = after(&mut p, &first, ErrorClass::Timeout, 408).unwrap();
        assert_eq!(
            (next.group.as_ref(), next.fallback_depth),
            ("h", 1),
            "no timeout retries"
        );
        let mut p = plan(&r, "g", PlanInput::default()).unwrap();
        let first = p.next(None).unwrap();
        let next = after(&mut p, &first, ErrorClass::BadRequest, 400).unwrap();
        assert_eq!(
            (next.group.as_ref(), next.retry_of_group),
            ("g", 1),
            "policy allows one"
        );
        assert_eq!(
            after(&mut p, &next, ErrorClass::BadRequest, 400)
                .unwrap()
                .group,
            "h"
        );
        let r = router(
            &models(&[("g", "a", ""), ("g", "b", ""), ("h", "h", "")]),
            "fallbacks: [{g: [h]}]",
        );
        let mut p = plan(&r, "g", PlanInput::default()).unwrap();
        let first = p.next(None).unwrap();
        assert_eq!(
            after(&mut p, &first, ErrorClass::BadRequest, 400)
                .unwrap()
                .group,
            "h",
            "no retry by default"
        );
        let mut p = plan(&r, "g", PlanInput::default()).unwrap();
        let first = p.next(None).unwrap();
        let next = after(&mut p, &first, ErrorClass::ContentPolicy, 400).unwrap();
        assert_eq!(
            next.group, "h",
            "content policy: no retry, regular fallbacks"
        );
    }

    #[test]
    fn auth_and_rate_limit_retries_need_another_deployment() {
        let r = router(
            &models(&[("g", "a", ""), ("h", "h", "")]),
            "fallbacks: [{g: [h]}]",
        );
        let mut p = plan(&r, "g", PlanInput::default()).unwrap();
        let first = p.next(None).unwrap();
        assert_eq!(
            after(&mut p, &first, ErrorClass::Authentication, 401)
                .unwrap()
                .group,
            "h"
        );
        let mut p = plan(&r, "g", PlanInput::default()).unwrap();
        let first = p.next(None).unwrap();
        assert_eq!(
            after(&mut p, &first, ErrorClass::RateLimit, 429)
                .unwrap()
                .group,
            "h",
            "straight to fallbacks"
        );
        let r = router(&models(&[("g", "a", "")]), "");
        let mut p = plan(&r, "g", PlanInput::default()).unwrap();
        let first = p.next(None).unwrap();
        let again = after(&mut p, &first, ErrorClass::RateLimit, 429).unwrap();
        assert_eq!(
            (id(&again), again.retry_of_group),
            ("a".into(), 1),
            "no fallbacks: retry it"
        );
        assert!(after(&mut p, &again, ErrorClass::Authentication, 401).is_none());
    }

    #[test]
    fn a_skipped_group_is_left_whole_for_the_next_fallback() {
        let r = router(
            &models(&[
                ("a", "a", ""),
                ("b", "b1", ""),
                ("b", "b2", ""),
                ("c", "c", ""),
            ]),
            "num_retries: 10\nfallbacks: [{a: [b, c]}]",
        );
        let mut p = plan(&r, "a", PlanInput::default()).unwrap();
        let first = p.next(None).unwrap();
        // A retryable class, so `a` would be retried ten times; skip to `b`.
        let mut in_b = after(&mut p, &first, ErrorClass::InternalServer, 500).unwrap();
        while in_b.group == "a" {
            in_b = after(&mut p, &in_b, ErrorClass::InternalServer, 500).unwrap();
        }
        assert_eq!(in_b.group, "b");
        let next = p.skip_group().unwrap();
        assert_eq!(id(&next), "c", "no retry in the skipped group");
        assert!(p.skip_group().is_none());
    }

    #[test]
    fn fallbacks_are_depth_first_bounded_and_never_revisit() {
        let r = router(
            &models(&[("a", "a", ""), ("b", "b", ""), ("c", "c", ""), ("d", "d", ""), ("e", "e", "")]),
            "num_retries: 0\nfallbacks: [{a: [b, c, missing, a]}, {b: [d, a]}, {d: [b]}]\ndefault_fallbacks: [e]",
        );
        let mut p = plan(&r, "a", PlanInput::default()).unwrap();
        assert_eq!(
            walk(&mut p, ErrorClass::InternalServer, 500),
            ["a:a", "b:b", "d:d", "c:c", "e:e"]
        );
        assert_eq!(p.attempted_fallbacks(), 4);
        let r = router(
            &models(&[
                ("a", "a", ""),
                ("b", "b", ""),
                ("c", "c", ""),
                ("d", "d", ""),
            ]),
            "num_retries: 0\nmax_fallbacks: 2\nfallbacks: [{a: [b, c, d]}]",
        );
        let mut p = plan(&r, "a", PlanInput::default()).unwrap();
        assert_eq!(
            walk(&mut p, ErrorClass::InternalServer, 500),
            ["a:a", "b:b", "c:c"]
        );
        assert_eq!((p.attempted_fallbacks(), p.max_fallbacks()), (2, 2));
    }

    #[test]
    fn context_window_fallback_is_chosen_before_the_call() {
        let yaml = "model_list:\n  - model_name: small\n    litellm_params: {model: mock/s}\n    model_info: {id: s, max_input_tokens: 100}\n  - model_name: large\n    litellm_params: {model: mock/l, region_name: us}\n    model_info: {id: l, max_input_tokens: 1000}\n";
        let r = router(yaml, "context_window_fallbacks: [{small: [large]}]");
        let long = PlanInput {
            prompt_tokens: 500,
            ..PlanInput::default()
        };
        let mut p = plan(&r, "small", long.clone()).unwrap();
        let first = p.next(None).unwrap();
        assert_eq!((first.group.as_ref(), first.fallback_depth), ("large", 1));
        assert_eq!(p.attempted_fallbacks(), 1);
        let short = PlanInput {
            prompt_tokens: 50,
            ..PlanInput::default()
        };
        assert_eq!(
            plan(&r, "small", short).unwrap().next(None).unwrap().group,
            "small"
        );
        let eu_only = PlanInput {
            allowed_regions: Some(vec!["us".into()]),
            ..long
        };
        let r2 = router(
            &yaml.replace("model: mock/s}", "model: mock/s, region_name: US}"),
            "context_window_fallbacks: [{small: [large]}]",
        );
        assert_eq!(
            plan(&r2, "small", eu_only.clone())
                .unwrap()
                .next(None)
                .unwrap()
                .group,
            "large"
        );
        let r3 = router(
            yaml,
            "context_window_fallbacks: [{small: [large]}]\nallowed_model_region: EU",
        );
        let err = plan(
            &r3,
            "small",
            PlanInput {
                allowed_regions: None,
                ..eu_only
            },
        )
        .unwrap_err();
        assert_eq!(err.status(), 400);
        assert!(
            err.to_string().contains("'small'") && err.to_string().contains("[\"eu\"]"),
            "{err}"
        );
    }

    #[test]
    fn a_too_long_prompt_still_calls_the_group_when_no_larger_one_serves() {
        let yaml = "model_list:\n  - model_name: small\n    litellm_params: {model: mock/s}\n    model_info: {id: s, max_input_tokens: 100}\n  - model_name: large\n    litellm_params: {model: mock/l, rpm: 0}\n    model_info: {id: l, max_input_tokens: 1000}\n";
        let r = router(yaml, "context_window_fallbacks: [{small: [large]}]");
        let mut p = plan(
            &r,
            "small",
            PlanInput {
                prompt_tokens: 500,
                ..PlanInput::default()
            },
        )
        .unwrap();
        let first = p.next(None).unwrap();
        assert_eq!((first.group.as_ref(), first.fallback_depth), ("small", 0));
        assert_eq!(p.attempted_fallbacks(), 0);
    }

    #[test]
    fn failure_classes_choose_their_fallback_lists() {
        let r = router(
            &models(&[("g", "g", ""), ("safe", "safe", ""), ("long", "long", ""), ("other", "other", "")]),
            "content_policy_fallbacks: [{g: [safe]}]\ncontext_window_fallbacks: [{g: [long]}]\nfallbacks: [{g: [other]}]\nretry_policy: {ContentPolicyViolationErrorRetries: 3}",
        );
        for (class, status, group) in [
            (ErrorClass::ContentPolicy, 400, "safe"),
            (ErrorClass::ContextWindow, 400, "long"),
            (ErrorClass::InternalServer, 500, "g"),
        ] {
            let mut p = plan(&r, "g", PlanInput::default()).unwrap();
            let first = p.next(None).unwrap();
            assert_eq!(
                after(&mut p, &first, class, status).unwrap().group,
                group,
                "{class:?}"
            );
        }
        let mut p = plan(
            &r,
            "g",
            PlanInput {
                num_retries: Some(0),
                ..PlanInput::default()
            },
        )
        .unwrap();
        let first = p.next(None).unwrap();
        assert_eq!(
            after(&mut p, &first, ErrorClass::ApiConnection, 502)
                .unwrap()
                .group,
            "other"
        );
    }

    #[test]
    fn regions_bind_primary_retries_and_fallbacks() {
        let r = router(
            &models(&[
                ("g", "g-us", "region_name: us"),
                ("g", "g-eu", "region_name: eu"),
                ("g", "g-none", ""),
                ("h", "h-us", "region_name: us"),
                ("k", "k-eu", "region_name: eu"),
            ]),
            "fallbacks: [{g: [h, k]}]\nnum_retries: 3",
        );
        let eu = PlanInput {
            allowed_regions: Some(vec!["EU".into()]),
            ..PlanInput::default()
        };
        let mut p = plan(&r, "g", eu.clone()).unwrap();
        assert_eq!(
            walk(&mut p, ErrorClass::InternalServer, 500),
            ["g:g-eu", "g:g-eu", "g:g-eu", "g:g-eu", "k:k-eu", "k:k-eu", "k:k-eu", "k:k-eu"]
        );
        let mut p = plan(&r, "h", eu.clone()).unwrap_err();
        assert!(
            matches!(&mut p, GatewayError::NoEligibleDeployment { group, regions } if group == "h" && regions == &["eu"])
        );
        let apac = PlanInput {
            allowed_regions: Some(vec!["apac".into()]),
            ..PlanInput::default()
        };
        let err = plan(&r, "g", apac).unwrap_err();
        assert_eq!(err.status(), 400);
        assert!(
            err.to_string().contains("model group 'g'") && err.to_string().contains("apac"),
            "{err}"
        );
        let mut p = plan(
            &r,
            "h",
            PlanInput {
                allowed_regions: Some(vec![]),
                ..eu
            },
        )
        .unwrap_err();
        assert!(
            matches!(&mut p, GatewayError::NoEligibleDeployment { .. }),
            "empty set allows nothing"
        );
        let mut p = plan(
            &r,
            "h",
            PlanInput {
                fallbacks: Some(vec!["k".into()]),
                allowed_regions: Some(vec!["eu".into()]),
                ..PlanInput::default()
            },
        )
        .unwrap();
        assert_eq!(
            p.next(None).unwrap().group,
            "k",
            "an ineligible primary falls back at once"
        );
    }

    #[test]
    fn over_rpm_everywhere_is_429_and_a_fallback_with_headroom_serves() {
        let r = router(
            &models(&[("g", "a", "rpm: 1"), ("g", "b", "tpm: 10"), ("h", "h", "")]),
            "",
        );
        let input = PlanInput {
            prompt_tokens: 20,
            ..PlanInput::default()
        };
        let mut p = plan(&r, "g", input.clone()).unwrap();
        let first = p.next(None).unwrap();
        assert_eq!(id(&first), "a", "b's tpm is too small for 20 tokens");
        r.on_start(&first);
        let err = plan(&r, "g", input.clone()).unwrap_err();
        assert_eq!(err.status(), 429);
        assert!(
            err.retry_after()
                .is_some_and(|s| s.parse::<u64>().unwrap() <= 60),
            "{err:?}"
        );
        assert!(err.to_string().contains("'g'"));
        let with_fallback = PlanInput {
            fallbacks: Some(vec!["h".into()]),
            ..input
        };
        assert_eq!(
            plan(&r, "g", with_fallback)
                .unwrap()
                .next(None)
                .unwrap()
                .group,
            "h"
        );
    }

    #[test]
    fn per_request_overrides() {
        let r = router(
            &models(&[
                ("g", "a", ""),
                ("g", "b", ""),
                ("h", "h", ""),
                ("k", "k", ""),
            ]),
            "num_retries: 1\nfallbacks: [{g: [h]}]",
        );
        let mut p = plan(
            &r,
            "g",
            PlanInput {
                fallbacks: Some(vec!["k".into()]),
                ..PlanInput::default()
            },
        )
        .unwrap();
        let groups: Vec<_> = walk(&mut p, ErrorClass::InternalServer, 500)
            .into_iter()
            .map(|s| s[..1].to_string())
            .collect();
        assert_eq!(
            groups,
            ["g", "g", "k", "k"],
            "the request's list replaces the configured one"
        );
        let mut p = plan(
            &r,
            "g",
            PlanInput {
                fallbacks: Some(vec![]),
                num_retries: Some(0),
                ..PlanInput::default()
            },
        )
        .unwrap();
        assert_eq!(
            walk(&mut p, ErrorClass::InternalServer, 500).len(),
            1,
            "no retries, fallbacks disabled"
        );
        let mut p = plan(
            &r,
            "g",
            PlanInput {
                num_retries: Some(3),
                ..PlanInput::default()
            },
        )
        .unwrap();
        assert_eq!(
            walk(&mut p, ErrorClass::InternalServer, 500).len(),
            8,
            "4 in g, then 4 in h"
        );
    }

    #[test]
    fn request_fallbacks_in_both_litellm_forms() {
        let parse =
            |s: &str| PlanInput::request_fallbacks(&serde_json::from_str(s).unwrap(), "gpt");
        assert_eq!(parse(r#"["a", "b"]"#).unwrap(), ["a", "b"]);
        assert_eq!(parse(r#"[{"x": ["y"]}, {"gpt": ["c"]}]"#).unwrap(), ["c"]);
        assert_eq!(parse(r#"[{"*": ["d"]}]"#).unwrap(), ["d"]);
        assert!(parse(r#"[{"x": ["y"]}]"#).unwrap().is_empty());
        assert!(parse(r#"{"gpt": ["c"]}"#).is_err());
        assert!(parse(r#"[{"gpt": [1]}]"#).is_err());
        assert_eq!(parse(r#"[{"model": "a"}, "b"]"#).unwrap(), ["a", "b"]);
    }

    #[test]
    fn request_fallback_names_are_every_model_named() {
        let names = |s: &str| {
            let v: serde_json::Value = serde_json::from_str(s).unwrap();
            PlanInput::request_fallback_names(&v).map(|n| n.join(","))
        };
        assert_eq!(names(r#"["a", {"model": "b"}]"#).unwrap(), "a,b");
        assert_eq!(
            names(r#"[{"gpt": ["c", "d"]}, {"*": ["e"]}]"#).unwrap(),
            "c,d,e"
        );
        let own = r#"[{"model": "a", "messages": [{"role": "user", "content": "x"}]}, "b"]"#;
        assert_eq!(names(own).unwrap(), "a,b");
        let own: serde_json::Value = serde_json::from_str(own).unwrap();
        let overrides = request_fallback_overrides(&own);
        assert_eq!(overrides.len(), 1);
        assert_eq!(overrides[0].0, "a");
        assert_eq!(overrides[0].1["messages"][0]["content"], "x");
        assert!(!overrides[0].1.contains_key("model"));
        assert!(names(r#"[{"gpt": [1]}]"#).is_err());
        let many = serde_json::to_string(&vec!["m"; MAX_REQUEST_FALLBACKS + 1]).unwrap();
        assert!(names(&many).unwrap_err().contains("at most"));
    }

    #[test]
    fn a_cooled_deployment_is_avoided_by_the_retry() {
        let r = router(&models(&[("g", "a", ""), ("g", "b", "")]), "num_retries: 5");
        let mut p = plan(&r, "g", PlanInput::default()).unwrap();
        let first = p.next(None).unwrap();
        r.on_start(&first);
        let f = first.failed(ErrorClass::RateLimit, 429, Some(Duration::from_secs(30)));
        r.on_end(&first, Duration::from_millis(3), Err(&f));
        assert!(r.is_cooling(&id(&first)));
        let second = p.next(Some(&f)).unwrap();
        assert_ne!(id(&second), id(&first));
        let third = after(&mut p, &second, ErrorClass::InternalServer, 500).unwrap();
        assert_eq!(id(&third), id(&second), "healthy and tried beats cooling");
        assert!(third.delay > Duration::ZERO);
        for _ in 0..20 {
            let fresh = plan(&r, "g", PlanInput::default())
                .unwrap()
                .next(None)
                .unwrap();
            assert_eq!(id(&fresh), id(&second), "new requests avoid it too");
        }
    }

    #[test]
    fn picks_carry_timeouts_and_wildcard_names() {
        let r = router(
            "model_list:\n  - model_name: g\n    litellm_params: {model: mock/a, timeout: 9, stream_timeout: 2}\n  - model_name: openai/*\n    litellm_params: {model: mock/*}\n  - model_name: z\n    litellm_params: {model: mock/z}\n",
            "fallbacks: [{'openai/*': [z]}]\ntimeout: 30",
        );
        let pick = plan(&r, "g", PlanInput::default())
            .unwrap()
            .next(None)
            .unwrap();
        assert_eq!(pick.timeout, Duration::from_secs(9));
        let stream = PlanInput {
            stream: true,
            ..PlanInput::default()
        };
        assert_eq!(
            plan(&r, "g", stream).unwrap().next(None).unwrap().timeout,
            Duration::from_secs(2)
        );
        let mut p = plan(
            &r,
            "openai/gpt-x",
            PlanInput {
                num_retries: Some(0),
                ..PlanInput::default()
            },
        )
        .unwrap();
        let first = p.next(None).unwrap();
        assert_eq!(
            (first.group.as_ref(), first.upstream_model.as_ref()),
            ("openai/gpt-x", "gpt-x")
        );
        assert_eq!(
            first.timeout,
            Duration::from_secs(30),
            "router-wide timeout"
        );
        assert_eq!(
            after(&mut p, &first, ErrorClass::Timeout, 408)
                .unwrap()
                .group,
            "z",
            "keyed by pattern"
        );
        assert!(p.next(None).is_none(), "None after the first ends the plan");
        assert!(
            matches!(plan(&r, "nope", PlanInput::default()), Err(GatewayError::UnknownModel(m)) if m == "nope")
        );
    }

    #[test]
    fn failure_from_a_gateway_error() {
        let r = router(&models(&[("g", "a", "")]), "");
        let pick = plan(&r, "g", PlanInput::default())
            .unwrap()
            .next(None)
            .unwrap();
        let err = GatewayError::Upstream {
            status: 429,
            message: "slow down".into(),
            error_type: None,
            retry_after: Some("2.5".into()),
            provider_code: None,
            upstream_param: None,
            class: ErrorClass::RateLimit,
        };
        let f = AttemptFailure::from_error(ErrorClass::RateLimit, &err, &pick);
        assert_eq!(
            f,
            AttemptFailure {
                class: ErrorClass::RateLimit,
                status: 429,
                retry_after: Some(Duration::from_millis(2500)),
                deployment: "a".into(),
            }
        );
    }
}
