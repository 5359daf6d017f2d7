//! `/v1/models`: the model names a caller may use, and nothing else: the
//! groups its key, team and user allow, the names they list that a
//! wildcard group serves, and the key's aliases of allowed groups.

use crate::auth::Principal;
use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::router::{ModelRegistry, RouterSettings};
use crate::state::Worker;
use serde_json::{json, Value};

fn model_object(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": 1677610602, "owned_by": "openai"})
}

/// Whether `caller` may ask for `name`: it names (directly or through the
/// caller's alias) a served group the caller may use.
#[cfg(test)]
fn usable(caller: &Principal, registry: &ModelRegistry, name: &str) -> bool {
    usable_with(caller, registry, &RouterSettings::default(), name)
}

/// [`usable`] with the config's `model_group_alias` resolved too: a key may
/// list the alias or its group.
fn usable_with(
    caller: &Principal,
    registry: &ModelRegistry,
    settings: &RouterSettings,
    name: &str,
) -> bool {
    let asked = caller.resolve_alias(name);
    let target = settings.group_alias(asked).unwrap_or(asked);
    let may = |model: &str| {
        caller
            .check_model(model, &registry.access_groups_of(model))
            .is_ok()
    };
    registry.resolve(target).is_some() && (may(target) || (target != asked && may(asked)))
}

/// The names `caller` may ask for: the exact groups in config order, then
/// listed names served by a wildcard group, then aliases; no repeats.
#[cfg(test)]
fn visible(caller: &Principal, registry: &ModelRegistry) -> Vec<String> {
    visible_with(caller, registry, &RouterSettings::default())
}

/// [`visible`], then the config's `model_group_alias` names that are not
/// hidden, sorted.
fn visible_with(
    caller: &Principal,
    registry: &ModelRegistry,
    settings: &RouterSettings,
) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let groups = registry.group_names().iter().map(String::as_str);
    let listed = caller.listed_models();
    let aliases: Vec<&str> = caller.aliases().into_iter().map(|(a, _)| a).collect();
    let mut config_aliases: Vec<&str> = settings.listed_aliases().map(|(a, _)| a).collect();
    config_aliases.sort_unstable();
    for name in groups.chain(listed).chain(aliases).chain(config_aliases) {
        // A listed model access group stands for its models, not a name to call.
        let access_group = registry.is_access_group(name) && !registry.has_group(name);
        if !access_group
            && usable_with(caller, registry, settings, name)
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_string());
        }
    }
    names
}

/// Whether the `/v1/models` query sets the flag `name` to true.
fn flag(query: &str, name: &str) -> bool {
    query.split('&').any(|pair| {
        pair.split_once('=')
            .is_some_and(|(n, value)| n == name && value.eq_ignore_ascii_case("true"))
    })
}

/// The model access groups `caller` lists (every one for a caller that may
/// use every model), in config order.
fn visible_access_groups<'r>(caller: &Principal, registry: &'r ModelRegistry) -> Vec<&'r str> {
    registry
        .access_groups()
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| caller.names_access_group(name))
        .collect()
}

/// `GET /v1/models`: the models the caller may use. With
/// `include_model_access_groups=true` the model access groups it lists
/// follow them; with `only_model_access_groups=true` they alone are
/// listed (LiteLLM 1.110.2 lists them only when both flags are set; one
/// is enough here).
pub async fn list(
    worker: &Worker,
    caller: &Principal,
    query: &str,
    out: &mut Responder<'_>,
) -> Result<(), GatewayError> {
    let router = worker.shared.models.router();
    let registry = router.registry();
    let mut names: Vec<String> = if flag(query, "only_model_access_groups") {
        Vec::new()
    } else {
        visible_with(caller, registry, router.settings())
    };
    if flag(query, "only_model_access_groups") || flag(query, "include_model_access_groups") {
        for group in visible_access_groups(caller, registry) {
            if !names.iter().any(|n| n == group) {
                names.push(group.to_string());
            }
        }
    }
    let data: Vec<Value> = names.iter().map(|n| model_object(n)).collect();
    let body = json!({"object": "list", "data": data}).to_string();
    let _ = out
        .send(
            200,
            HeadBuilder::new(200),
            "application/json",
            body.as_bytes(),
        )
        .await;
    Ok(())
}

/// `GET /v1/models/{id}`: a 404 for a name the caller may not use.
pub async fn get(
    worker: &Worker,
    caller: &Principal,
    id: &str,
    out: &mut Responder<'_>,
) -> Result<(), GatewayError> {
    let router = worker.shared.models.router();
    if !usable_with(caller, router.registry(), router.settings(), id) {
        return Err(GatewayError::ModelNotFound(id.to_string()));
    }
    let body = model_object(id).to_string();
    let _ = out
        .send(
            200,
            HeadBuilder::new(200),
            "application/json",
            body.as_bytes(),
        )
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_model_access_groups_is_read_as_litellm_reads_it() {
        let only = |q: &str| flag(q, "only_model_access_groups");
        assert!(only("only_model_access_groups=True"));
        assert!(only("a=1&only_model_access_groups=true"));
        assert!(!only("only_model_access_groups=false"));
        assert!(!only("include_model_access_groups=true"));
        assert!(!only(""));
    }
    use crate::auth::{KeyEntry, TeamEntry};
    use crate::budget::Budget;
    use crate::config::deployment_from_json;
    use crate::router::RouterSettings;
    use crate::store::{KeyRecord, TeamRecord};
    use std::sync::Arc;

    fn registry() -> ModelRegistry {
        let settings = RouterSettings::default();
        let deployments = ["gpt-4o", "gpt-4o-mini", "claude", "openai/*"]
            .iter()
            .map(|name| {
                let model = if name.ends_with('*') {
                    "mock/*".to_string()
                } else {
                    format!("mock/{name}")
                };
                let entry = json!({"model_name": name, "litellm_params": {"model": model}});
                Arc::new(
                    deployment_from_json(&entry, &settings, &|_| None)
                        .unwrap()
                        .0,
                )
            })
            .collect();
        ModelRegistry::from_shared(deployments)
    }

    fn key(models: &[&str], aliases: Value, team_models: Option<&[&str]>) -> Principal {
        let strings = |m: &[&str]| m.iter().map(|s| s.to_string()).collect();
        let team = team_models.map(|t| {
            Arc::new(TeamEntry {
                record: TeamRecord {
                    team_id: "t".into(),
                    models: strings(t),
                    ..Default::default()
                },
                budget: Budget::new(None, None, 0.0),
                model_budgets: Vec::new(),
                org_budget: None,
                org_limits: None,
                org_model_limits: None,
                member_defaults: None,
            })
        });
        Principal::Key(Arc::new(KeyEntry {
            budget_throttle: None,
            record: KeyRecord {
                models: strings(models),
                aliases: aliases.as_object().cloned().unwrap_or_default(),
                ..Default::default()
            },
            budget: Budget::new(None, None, 0.0),
            team,
            user: None,
            model_budgets: Vec::new(),
            member_budget: None,
            member_model_budgets: Vec::new(),
            member_row: None,
            counter_names: Default::default(),
        }))
    }

    #[test]
    fn lists_only_what_the_caller_may_use() {
        let reg = registry();
        assert_eq!(
            visible(&Principal::Master, &reg),
            ["gpt-4o", "gpt-4o-mini", "claude"]
        );
        assert_eq!(
            visible(&key(&[], json!({}), None), &reg),
            ["gpt-4o", "gpt-4o-mini", "claude"]
        );
        assert_eq!(
            visible(&key(&["gpt-4o-mini"], json!({}), None), &reg),
            ["gpt-4o-mini"]
        );
        assert_eq!(
            visible(&key(&["gpt-4o*"], json!({}), None), &reg),
            ["gpt-4o", "gpt-4o-mini"]
        );
        assert_eq!(
            visible(
                &key(&["all-proxy-models"], json!({}), Some(&["claude"])),
                &reg
            ),
            ["claude"],
            "the team narrows the key"
        );
        assert_eq!(
            visible(&key(&["openai/gpt-x", "nowhere"], json!({}), None), &reg),
            ["openai/gpt-x"],
            "a listed name a wildcard serves; an unserved one is not shown"
        );
        assert_eq!(
            visible(
                &key(
                    &["claude"],
                    json!({"fast": "claude", "sneaky": "gpt-4o", "broken": 3}),
                    None
                ),
                &reg
            ),
            ["claude", "fast"],
            "aliases of allowed groups only"
        );
        let k = key(&["claude"], json!({}), None);
        assert!(usable(&k, &reg, "claude") && !usable(&k, &reg, "gpt-4o"));
    }
}
