//! Model groups: deployments indexed by the name clients ask for, exact names
//! first, then the longest wildcard prefix. An immutable snapshot: lookups
//! borrow, nothing locks.
//!
//! Every deployment has a *slot*, its index in config order; the router's
//! live state (stats, cooldowns) is kept in arrays indexed by slot.

use crate::deployment::Deployment;
use crate::keyed_hash::KeyedHash;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// Deployments indexed by the group name clients ask for.
#[derive(Debug, Default)]
pub struct ModelRegistry {
    /// Every deployment, by slot.
    deployments: Vec<Arc<Deployment>>,
    /// Exact groups by name, looked up on every request.
    groups: HashMap<String, Group, KeyedHash>,
    /// Wildcard groups as (prefix before `*`, group), longest prefix first.
    wildcards: Vec<(String, Group)>,
    /// Exact group names in config order, for `/v1/models`.
    names: Vec<String>,
    /// LiteLLM's model access groups (`model_info.access_groups`) in config
    /// order, each with the groups of its deployments, in config order.
    access_groups: Vec<(String, Vec<String>)>,
}

/// The deployments of one configured group, as slots, with what selection
/// precomputes for them.
#[derive(Debug)]
pub(crate) struct Group {
    /// The name as configured (`openai/*` for a wildcard group).
    pub(crate) name: String,
    /// Member slots, in config order.
    pub(crate) slots: Vec<usize>,
    /// Simple-shuffle weight of each member, parallel to `slots`.
    pub(crate) weights: Vec<f64>,
    /// Running sums of `weights`, for sampling without a scan.
    cumulative: Vec<f64>,
    /// The largest context window of the members (`max_input_tokens`, else
    /// the shipped price map's); `None` when a member has no limit.
    pub(crate) max_input_tokens: Option<u64>,
}

/// A resolved model group.
#[derive(Debug)]
pub struct Route<'a> {
    /// The group's name (`x-litellm-model-group`): the requested name for
    /// wildcard groups.
    pub group: Cow<'a, str>,
    pub(crate) members: &'a Group,
    /// For wildcard groups, the part of the requested name the `*` matched.
    wildcard_match: Option<String>,
}

impl ModelRegistry {
    /// Indexes `deployments` by group; slots follow the given order.
    pub fn new(deployments: Vec<Deployment>) -> Self {
        Self::from_shared(deployments.into_iter().map(Arc::new).collect())
    }

    /// [`new`](Self::new) over deployments shared with other snapshots.
    pub fn from_shared(deployments: Vec<Arc<Deployment>>) -> Self {
        let mut reg = ModelRegistry::default();
        let mut exact: Vec<(String, Vec<usize>)> = Vec::new();
        let mut wild: Vec<(String, Vec<usize>)> = Vec::new();
        for (slot, d) in deployments.into_iter().enumerate() {
            let list = if d.is_wildcard() {
                &mut wild
            } else {
                &mut exact
            };
            match list.iter_mut().find(|(name, _)| *name == d.group) {
                Some((_, slots)) => slots.push(slot),
                None => list.push((d.group.clone(), vec![slot])),
            }
            for access in &d.access_groups {
                let members = match reg.access_groups.iter_mut().find(|(a, _)| a == access) {
                    Some((_, members)) => members,
                    None => {
                        reg.access_groups.push((access.clone(), Vec::new()));
                        &mut reg.access_groups.last_mut().expect("just pushed").1
                    }
                };
                if !members.contains(&d.group) {
                    members.push(d.group.clone());
                }
            }
            reg.deployments.push(d);
        }
        for (name, slots) in exact {
            reg.names.push(name.clone());
            let group = Group::new(name.clone(), slots, &reg.deployments);
            reg.groups.insert(name, group);
        }
        for (name, slots) in wild {
            let prefix = name.trim_end_matches('*').to_string();
            let group = Group::new(name, slots, &reg.deployments);
            reg.wildcards.push((prefix, group));
        }
        reg.wildcards
            .sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        reg
    }

    /// Exact group names, in config order.
    pub fn group_names(&self) -> &[String] {
        &self.names
    }

    /// Whether `name` is an exact group.
    pub fn has_group(&self, name: &str) -> bool {
        self.groups.contains_key(name)
    }

    /// The group serving `model`: an exact name first, else the longest
    /// matching wildcard.
    pub fn resolve<'a>(&'a self, model: &str) -> Option<Route<'a>> {
        if let Some((name, members)) = self.groups.get_key_value(model) {
            return Some(Route {
                group: Cow::Borrowed(name),
                members,
                wildcard_match: None,
            });
        }
        self.wildcards.iter().find_map(|(prefix, members)| {
            let rest = model.strip_prefix(prefix.as_str())?;
            (!rest.is_empty()).then(|| Route {
                group: Cow::Owned(model.to_string()),
                members,
                wildcard_match: Some(rest.to_string()),
            })
        })
    }

    /// Every deployment, by slot.
    pub fn deployments(&self) -> &[Arc<Deployment>] {
        &self.deployments
    }

    /// LiteLLM's model access groups as (name, the model groups whose
    /// deployments name it), in config order.
    pub fn access_groups(&self) -> &[(String, Vec<String>)] {
        &self.access_groups
    }

    /// Whether `name` is a model access group.
    pub fn is_access_group(&self, name: &str) -> bool {
        self.access_groups.iter().any(|(a, _)| a == name)
    }

    /// The model access groups that grant `model`: those named by a
    /// deployment of the group serving it (through a wildcard too, as
    /// LiteLLM's `get_model_access_groups(model_name)`); empty for a name
    /// no group serves.
    pub fn access_groups_of(&self, model: &str) -> Vec<&str> {
        if self.access_groups.is_empty() {
            return Vec::new();
        }
        let Some(route) = self.resolve(model) else {
            return Vec::new();
        };
        let mut groups: Vec<&str> = Vec::new();
        for &slot in &route.members.slots {
            for access in &self.deployments[slot].access_groups {
                if !groups.contains(&access.as_str()) {
                    groups.push(access);
                }
            }
        }
        groups
    }
}

impl Group {
    fn new(name: String, slots: Vec<usize>, all: &[Arc<Deployment>]) -> Self {
        let members: Vec<&Deployment> = slots.iter().map(|&s| &*all[s]).collect();
        let weights = shuffle_weights(&members);
        let cumulative = weights
            .iter()
            .scan(0.0, |sum, w| {
                *sum += w;
                Some(*sum)
            })
            .collect();
        let max_input_tokens = members
            .iter()
            .map(|d| crate::spend::max_input_tokens(d, &d.upstream_model))
            .try_fold(0, |max, m| m.map(|m| max.max(m)));
        Group {
            name,
            slots,
            weights,
            cumulative,
            max_input_tokens,
        }
    }

    /// A member slot drawn in proportion to its weight, `None` when every
    /// weight is zero.
    pub(crate) fn sample(&self, rng: &mut fastrand::Rng) -> Option<usize> {
        let total = *self.cumulative.last()?;
        if total <= 0.0 {
            return None;
        }
        let x = rng.f64() * total;
        let i = self.cumulative.partition_point(|&c| c <= x);
        Some(self.slots[i.min(self.slots.len() - 1)])
    }
}

/// LiteLLM's simple-shuffle weights: `weight` when any member sets it (an
/// unset weight counts 1), else `rpm` when every member sets it, else `tpm`
/// when every member sets it, else equal.
fn shuffle_weights(members: &[&Deployment]) -> Vec<f64> {
    if members.iter().any(|d| d.weight.is_some()) {
        return members.iter().map(|d| d.weight.unwrap_or(1.0)).collect();
    }
    if let Some(rpm) = members.iter().map(|d| d.rpm).collect::<Option<Vec<_>>>() {
        return rpm.into_iter().map(|r| r as f64).collect();
    }
    if let Some(tpm) = members.iter().map(|d| d.tpm).collect::<Option<Vec<_>>>() {
        return tpm.into_iter().map(|t| t as f64).collect();
    }
    vec![1.0; members.len()]
}

impl<'a> Route<'a> {
    /// The model name to send to `dep`'s provider.
    pub fn upstream_model(&self, dep: &'a Deployment) -> Cow<'a, str> {
        match (&self.wildcard_match, dep.upstream_model.strip_suffix('*')) {
            (Some(rest), Some(prefix)) => Cow::Owned(format!("{prefix}{rest}")),
            _ => Cow::Borrowed(&dep.upstream_model),
        }
    }

    /// The configured name when it differs from [`Route::group`] (the
    /// `openai/*` of a wildcard group), for settings keyed by it.
    pub(crate) fn pattern(&self) -> Option<&'a str> {
        (self.members.name != self.group).then_some(self.members.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn registry(yaml: &str) -> ModelRegistry {
        let cfg = Config::parse(std::path::Path::new("c.yaml"), yaml, &|_| None).unwrap();
        ModelRegistry::new(cfg.deployments)
    }

    #[test]
    fn exact_then_longest_wildcard() {
        let reg = registry("model_list:\n  - model_name: gpt\n    litellm_params: {model: mock/a}\n  - model_name: openai/*\n    litellm_params: {model: openai/*, api_base: 'http://h'}\n  - model_name: '*'\n    litellm_params: {model: mock/*}\n");
        let w = reg.resolve("openai/gpt-4o").unwrap();
        let dep = &reg.deployments()[w.members.slots[0]];
        assert_eq!(w.upstream_model(dep), "gpt-4o");
        assert_eq!(w.pattern(), Some("openai/*"));
        let any = reg.resolve("claude").unwrap();
        let dep = &reg.deployments()[any.members.slots[0]];
        assert_eq!(any.upstream_model(dep), "claude");
        assert_eq!(reg.resolve("gpt").unwrap().pattern(), None);
        assert_eq!(reg.group_names(), ["gpt"]);
        assert!(reg.has_group("gpt") && !reg.has_group("openai/*"));
    }

    #[test]
    fn shuffle_weights_follow_litellm() {
        let g = |params: &[&str]| {
            let mut yaml = "model_list:\n".to_string();
            for (i, p) in params.iter().enumerate() {
                yaml +=
                    &format!("  - model_name: g\n    litellm_params: {{model: mock/x{i}, {p}}}\n");
            }
            let reg = registry(&yaml);
            reg.groups["g"].weights.clone()
        };
        assert_eq!(g(&["weight: 3", "rpm: 9"]), [3.0, 1.0]);
        assert_eq!(g(&["rpm: 10", "rpm: 30"]), [10.0, 30.0]);
        assert_eq!(g(&["rpm: 10", "tpm: 30"]), [1.0, 1.0]);
        assert_eq!(g(&["tpm: 5", "tpm: 15"]), [5.0, 15.0]);
        assert_eq!(g(&["weight: 0", "weight: 0"]), [0.0, 0.0]);
    }

    #[test]
    fn sampling_follows_weights_and_group_limits() {
        let reg = registry("model_list:\n  - model_name: g\n    litellm_params: {model: mock/a, weight: 1}\n    model_info: {max_input_tokens: 100}\n  - model_name: g\n    litellm_params: {model: mock/b, weight: 3}\n    model_info: {max_input_tokens: 300}\n  - model_name: z\n    litellm_params: {model: mock/z, weight: 0}\n  - model_name: u\n    litellm_params: {model: mock/u}\n    model_info: {max_input_tokens: 5}\n  - model_name: u\n    litellm_params: {model: mock/v}\n");
        let group = &reg.groups["g"];
        assert_eq!(group.max_input_tokens, Some(300));
        assert_eq!(reg.groups["u"].max_input_tokens, None);
        let mut rng = fastrand::Rng::with_seed(7);
        let b = (0..4000)
            .filter(|_| group.sample(&mut rng) == Some(1))
            .count();
        assert!((2800..3200).contains(&b), "{b}");
        assert_eq!(reg.groups["z"].sample(&mut rng), None);
    }
}
