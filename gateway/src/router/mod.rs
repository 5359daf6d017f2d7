//! Model groups and the choice of a deployment. The registry is an immutable
//! snapshot built from config: lookups borrow, selection takes no lock.

use crate::config::Deployment;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// Deployments indexed by the group name clients ask for.
#[derive(Debug, Default)]
pub struct ModelRegistry {
    groups: HashMap<String, Vec<Arc<Deployment>>>,
    /// Wildcard groups as (prefix before `*`, deployments), longest prefix first.
    wildcards: Vec<(String, Vec<Arc<Deployment>>)>,
    /// Exact group names in config order, for `/v1/models`.
    names: Vec<String>,
}

/// A resolved model group.
#[derive(Debug)]
pub struct Route<'a> {
    /// The group's name (`x-litellm-model-group`): the requested name for
    /// wildcard groups.
    pub group: Cow<'a, str>,
    deployments: &'a [Arc<Deployment>],
    /// For wildcard groups, the part of the requested name the `*` matched.
    wildcard_match: Option<String>,
}

impl ModelRegistry {
    /// Indexes `deployments` by group.
    pub fn new(deployments: Vec<Deployment>) -> Self {
        let mut reg = ModelRegistry::default();
        for d in deployments {
            let d = Arc::new(d);
            if let Some(prefix) = d.group.strip_suffix('*') {
                match reg.wildcards.iter_mut().find(|(p, _)| p == prefix) {
                    Some((_, list)) => list.push(d),
                    None => reg.wildcards.push((prefix.to_string(), vec![d])),
                }
            } else {
                if !reg.groups.contains_key(&d.group) {
                    reg.names.push(d.group.clone());
                }
                reg.groups.entry(d.group.clone()).or_default().push(d);
            }
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
        if let Some((name, deployments)) = self.groups.get_key_value(model) {
            return Some(Route {
                group: Cow::Borrowed(name),
                deployments,
                wildcard_match: None,
            });
        }
        self.wildcards.iter().find_map(|(prefix, deployments)| {
            let rest = model.strip_prefix(prefix.as_str())?;
            (!rest.is_empty()).then(|| Route {
                group: Cow::Owned(model.to_string()),
                deployments,
                wildcard_match: Some(rest.to_string()),
            })
        })
    }
}

impl<'a> Route<'a> {
    /// Picks a deployment, weighted by `weight` (simple shuffle).
    pub fn pick(&self) -> &'a Arc<Deployment> {
        let ds = self.deployments;
        if ds.len() == 1 {
            return &ds[0];
        }
        let total: f64 = ds.iter().map(|d| d.weight).sum();
        if total <= 0.0 {
            return &ds[fastrand::usize(..ds.len())];
        }
        let mut x = fastrand::f64() * total;
        for d in ds {
            if x < d.weight {
                return d;
            }
            x -= d.weight;
        }
        &ds[ds.len() - 1]
    }

    /// The model name to send to `dep`'s provider.
    pub fn upstream_model(&self, dep: &'a Deployment) -> Cow<'a, str> {
        match (&self.wildcard_match, dep.upstream_model.strip_suffix('*')) {
            (Some(rest), Some(prefix)) => Cow::Owned(format!("{prefix}{rest}")),
            _ => Cow::Borrowed(&dep.upstream_model),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn registry() -> ModelRegistry {
        let cfg = Config::parse(
            std::path::Path::new("c.yaml"),
            "model_list:\n  - model_name: gpt\n    litellm_params: {model: mock/a, weight: 0}\n  - model_name: gpt\n    litellm_params: {model: mock/b, weight: 1}\n  - model_name: openai/*\n    litellm_params: {model: openai/*, api_base: 'http://h'}\n  - model_name: '*'\n    litellm_params: {model: mock/*}\n",
            &|_| None,
        )
        .unwrap();
        ModelRegistry::new(cfg.deployments)
    }

    #[test]
    fn exact_then_longest_wildcard() {
        let reg = registry();
        let r = reg.resolve("gpt").unwrap();
        for _ in 0..50 {
            assert_eq!(r.pick().upstream_model, "b", "weight 0 is never picked");
        }
        let w = reg.resolve("openai/gpt-4o").unwrap();
        assert_eq!(w.upstream_model(w.pick()), "gpt-4o");
        let any = reg.resolve("claude").unwrap();
        assert_eq!(any.upstream_model(any.pick()), "claude");
        assert_eq!(reg.group_names(), ["gpt"]);
    }
}
