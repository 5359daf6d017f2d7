//! `GET /model_group/info[?model_group=]`: LiteLLM's `ModelGroupInfo` of each
//! exact group the caller may use: providers, token limits, prices and
//! rpm/tpm summed over its deployments.

use super::query::Query;
use crate::auth::Principal;
use crate::deployment::Deployment;
use crate::error::GatewayError;
use crate::state::Worker;
use serde_json::{json, Value};

/// The group `name` of `deps` as LiteLLM's `ModelGroupInfo`: the smallest
/// token limits and the highest prices of its deployments (what a request
/// may meet), rpm and tpm summed.
fn group_info(name: &str, deps: &[&Deployment]) -> Value {
    let mut providers: Vec<&str> = Vec::new();
    for d in deps {
        if !providers.contains(&d.provider_name.as_str()) {
            providers.push(&d.provider_name);
        }
    }
    let min = |f: fn(&Deployment) -> Option<u64>| deps.iter().filter_map(|d| f(d)).min();
    let max = |f: fn(&Deployment) -> Option<f64>| deps.iter().filter_map(|d| f(d)).reduce(f64::max);
    let sum = |f: fn(&Deployment) -> Option<u64>| {
        let all: Option<Vec<u64>> = deps.iter().map(|d| f(d)).collect();
        all.map(|v| v.iter().fold(0u64, |a, b| a.saturating_add(*b)))
    };
    json!({
        "model_group": name,
        "providers": providers,
        "max_input_tokens": min(|d| d.max_input_tokens),
        "max_output_tokens": min(|d| d.max_output_tokens),
        "input_cost_per_token": max(|d| d.input_cost_per_token),
        "output_cost_per_token": max(|d| d.output_cost_per_token),
        "mode": "chat",
        "tpm": sum(|d| d.tpm),
        "rpm": sum(|d| d.rpm),
        "supports_parallel_function_calling": false,
        "supports_vision": false,
        "supports_function_calling": false,
        "supported_openai_params": [],
        "configurable_clientside_auth_params": null,
    })
}

/// `GET /model_group/info`: the groups `caller` may use (all for an admin),
/// or the one `model_group` names (an empty list when it is not one).
pub fn info(worker: &Worker, caller: &Principal, mut q: Query) -> Result<Value, GatewayError> {
    let wanted = q.take("model_group");
    q.finish()?;
    let router = worker.shared.models.router();
    let registry = router.registry();
    let data: Vec<Value> = registry
        .group_names()
        .iter()
        .filter(|g| wanted.as_deref().is_none_or(|w| w == g.as_str()))
        .filter(|g| {
            caller.is_admin() || caller.check_model(g, &registry.access_groups_of(g)).is_ok()
        })
        .map(|g| {
            let deps: Vec<&Deployment> = registry
                .deployments()
                .iter()
                .filter(|d| &d.group == g)
                .map(|d| d.as_ref())
                .collect();
            group_info(g, &deps)
        })
        .collect();
    Ok(json!({ "data": data }))
}
