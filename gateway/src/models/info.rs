//! Deployments as `/model/info` shows them: LiteLLM's
//! `{"model_name", "litellm_params", "model_info"}` with the secrets left out.

use crate::deployment::Deployment;
use crate::store::ModelRecord;
use serde_json::{json, Map, Value};

/// `litellm_params` fields never shown (LiteLLM leaves them out too).
const SECRETS: &[&str] = &[
    "api_key",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "vertex_credentials",
    "azure_ad_token",
    "client_secret",
];

/// `params` without its secrets, and its `api_base` without userinfo,
/// query or fragment.
pub fn redacted(params: &Map<String, Value>) -> Map<String, Value> {
    let mut out = params.clone();
    out.retain(|k, _| !SECRETS.contains(&k.as_str()));
    if let Some(Value::String(base)) = out.get_mut("api_base") {
        *base = crate::upstream::redact_url(base);
    }
    out
}

/// A served deployment as `/model/info` shows it: from its stored row when
/// it was added through the API, else from the validated config entry.
pub fn deployment_json(dep: &Deployment, stored: Option<&ModelRecord>) -> Value {
    let (params, mut info) = match stored {
        Some(r) => (redacted(&r.litellm_params), r.model_info.clone()),
        None => (config_params(dep), config_info(dep)),
    };
    info.insert("id".into(), Value::String(dep.id.to_string()));
    info.insert("db_model".into(), Value::Bool(stored.is_some()));
    if dep.provider == crate::deployment::ProviderKind::Unsupported {
        info.insert("supported".into(), Value::Bool(false));
        info.insert(
            "unsupported_reason".into(),
            crate::config::unsupported_note(dep).into(),
        );
    }
    json!({"model_name": dep.group, "litellm_params": params, "model_info": info})
}

/// The `litellm_params` of a config deployment, as far as it is known.
fn config_params(d: &Deployment) -> Map<String, Value> {
    let mut p = Map::new();
    p.insert(
        "model".into(),
        format!("{}/{}", d.provider_name, d.upstream_model).into(),
    );
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            p.insert(k.into(), v);
        }
    };
    put("api_base", d.base.as_ref().map(|b| b.url.clone().into()));
    put("api_version", d.api_version.clone().map(Value::from));
    put("rpm", d.rpm.map(Value::from));
    put("tpm", d.tpm.map(Value::from));
    put("weight", d.weight.map(Value::from));
    put("region_name", d.region.clone().map(Value::from));
    put("timeout", Some(d.timeout.as_secs_f64().into()));
    put(
        "stream_timeout",
        Some(d.stream_timeout.as_secs_f64().into()),
    );
    p
}

/// The `model_info` of a config deployment.
fn config_info(d: &Deployment) -> Map<String, Value> {
    let mut i = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            i.insert(k.into(), v);
        }
    };
    put("max_input_tokens", d.max_input_tokens.map(Value::from));
    put("max_output_tokens", d.max_output_tokens.map(Value::from));
    put(
        "input_cost_per_token",
        d.input_cost_per_token.map(Value::from),
    );
    put(
        "output_cost_per_token",
        d.output_cost_per_token.map(Value::from),
    );
    let images = &d.image_prices;
    put(
        "input_cost_per_image",
        images.input_per_image.map(Value::from),
    );
    put(
        "output_cost_per_image",
        images.output_per_image.map(Value::from),
    );
    put(
        "input_cost_per_pixel",
        images.input_per_pixel.map(Value::from),
    );
    put(
        "output_cost_per_image_token",
        images.output_per_image_token.map(Value::from),
    );
    put(
        "access_groups",
        (!d.access_groups.is_empty()).then(|| d.access_groups.clone().into()),
    );
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_left_out() {
        let params = json!({"model": "openai/x", "api_key": "sk-secret", "api_base": "http://h"});
        let shown = redacted(params.as_object().unwrap());
        assert!(!shown.contains_key("api_key"));
        assert_eq!(shown["api_base"], "http://h");
        let params = json!({"api_base": "http://u:p@h/v1?key=k"});
        assert_eq!(
            redacted(params.as_object().unwrap())["api_base"],
            "http://h/v1"
        );
    }
}
