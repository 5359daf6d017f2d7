//! `GET /routes`: the routes this gateway serves, in LiteLLM's shape
//! (`{"routes": [{"path", "methods", "name", "endpoint"}]}`), public as
//! LiteLLM's is. The table is kept beside the dispatch it describes; an
//! end-to-end test calls every route in it and finds none unrouted.

use serde_json::{json, Value};

/// Every route as (methods, path); a path with `{...}` takes any one
/// segment there. LLM routes are also served under `/v1` (listed there
/// too, as LiteLLM lists both).
const ROUTES: &[(&[&str], &str)] = &[
    (&["POST"], "/chat/completions"),
    (&["POST"], "/completions"),
    (&["POST"], "/embeddings"),
    (&["POST"], "/messages"),
    (&["POST"], "/messages/count_tokens"),
    (&["POST"], "/responses"),
    (&["POST"], "/rerank"),
    (&["POST"], "/moderations"),
    (&["POST"], "/images/generations"),
    (&["POST"], "/audio/speech"),
    (&["POST"], "/audio/transcriptions"),
    (&["POST"], "/audio/translations"),
    (&["POST"], "/images/edits"),
    (&["GET", "POST"], "/files"),
    (&["GET", "DELETE"], "/files/{file_id}"),
    (&["GET"], "/files/{file_id}/content"),
    (&["GET", "POST"], "/batches"),
    (&["GET"], "/batches/{batch_id}"),
    (&["GET"], "/realtime"),
    (&["POST"], "/batches/{batch_id}/cancel"),
    (&["GET"], "/models"),
    (&["GET"], "/models/{model_id}"),
];

/// The methods a provider pass-through route serves.
const ANY: &[&str] = &["GET", "POST", "PUT", "DELETE", "PATCH"];

/// Routes served only as listed (no `/v1` twin).
const OTHER_ROUTES: &[(&[&str], &str)] = &[
    (&["POST"], "/v2/rerank"),
    (&["GET"], "/routes"),
    (&["GET", "POST"], "/{provider}/v1/files"),
    (&["GET", "DELETE"], "/{provider}/v1/files/{file_id}"),
    (&["GET"], "/{provider}/v1/files/{file_id}/content"),
    (&["GET", "POST"], "/{provider}/v1/batches"),
    (&["GET"], "/{provider}/v1/batches/{batch_id}"),
    (&["POST"], "/{provider}/v1/batches/{batch_id}/cancel"),
    (ANY, "/openai/{endpoint}"),
    (ANY, "/anthropic/{endpoint}"),
    (ANY, "/gemini/{endpoint}"),
    (ANY, "/cohere/{endpoint}"),
    (ANY, "/mistral/{endpoint}"),
    (ANY, "/azure/{endpoint}"),
    (ANY, "/vertex_ai/{endpoint}"),
    (ANY, "/vertex-ai/{endpoint}"),
    (ANY, "/bedrock/{endpoint}"),
    (&["GET"], "/health"),
    (&["GET"], "/health/liveliness"),
    (&["GET"], "/health/liveness"),
    (&["GET"], "/health/readiness"),
    (&["GET"], "/health/readiness/details"),
    (&["POST"], "/config/reload"),
    (&["GET"], "/cache/ping"),
    (&["POST"], "/cache/delete"),
    (&["GET"], "/cache/redis/info"),
    (&["POST"], "/cache/flushall"),
    (&["POST"], "/key/generate"),
    (&["GET"], "/key/info"),
    (&["POST"], "/key/update"),
    (&["POST"], "/key/delete"),
    (&["POST"], "/key/regenerate"),
    (&["POST"], "/key/{key}/regenerate"),
    (&["GET"], "/key/list"),
    (&["POST"], "/key/block"),
    (&["POST"], "/key/unblock"),
    (&["POST"], "/key/health"),
    (&["POST"], "/team/new"),
    (&["GET"], "/team/info"),
    (&["POST"], "/team/update"),
    (&["POST"], "/team/delete"),
    (&["GET"], "/team/list"),
    (&["GET"], "/v2/team/list"),
    (&["POST"], "/team/block"),
    (&["POST"], "/team/unblock"),
    (&["POST"], "/team/member_add"),
    (&["POST"], "/team/member_delete"),
    (&["POST"], "/team/member_update"),
    (&["POST"], "/user/new"),
    (&["GET"], "/user/info"),
    (&["POST"], "/user/update"),
    (&["POST"], "/user/delete"),
    (&["GET"], "/user/list"),
    (&["POST"], "/model/new"),
    (&["GET"], "/model/info"),
    (&["GET"], "/v2/model/info"),
    (&["POST"], "/model/update"),
    (&["POST"], "/model/delete"),
    (&["GET"], "/model_group/info"),
    (&["GET"], "/spend/logs"),
    (&["GET"], "/global/spend"),
    (&["GET"], "/gateway/limits"),
    (&["GET"], "/gateway/logs"),
    (&["GET"], "/gateway/replicas"),
    (&["GET"], "/user/daily/activity"),
    (&["GET"], "/team/daily/activity"),
    (&["GET"], "/organization/daily/activity"),
    (&["GET"], "/customer/daily/activity"),
    (&["GET"], "/end_user/daily/activity"),
    (&["GET"], "/tag/daily/activity"),
    (&["POST"], "/budget/new"),
    (&["POST"], "/budget/update"),
    (&["POST"], "/budget/info"),
    (&["GET"], "/budget/settings"),
    (&["GET"], "/budget/list"),
    (&["POST"], "/budget/delete"),
    (&["POST"], "/organization/new"),
    (&["POST", "PATCH"], "/organization/update"),
    (&["GET", "POST"], "/organization/info"),
    (&["GET"], "/organization/list"),
    (&["POST", "DELETE"], "/organization/delete"),
    (&["POST"], "/organization/member_add"),
    (&["POST", "PATCH"], "/organization/member_update"),
    (&["POST", "DELETE"], "/organization/member_delete"),
    (&["POST"], "/customer/new"),
    (&["GET"], "/customer/info"),
    (&["POST"], "/customer/update"),
    (&["POST"], "/customer/delete"),
    (&["POST"], "/customer/block"),
    (&["POST"], "/customer/unblock"),
    (&["GET"], "/customer/list"),
    (&["POST"], "/end_user/new"),
    (&["GET"], "/end_user/info"),
    (&["POST"], "/end_user/update"),
    (&["POST"], "/end_user/delete"),
    (&["POST"], "/end_user/block"),
    (&["POST"], "/end_user/unblock"),
    (&["GET"], "/end_user/list"),
    (&["GET"], "/ui"),
];

/// `/metrics`, listed when metrics are on.
const METRICS: (&[&str], &str) = (&["GET"], "/metrics");

/// One route in LiteLLM's shape: its name and endpoint are the path's
/// words (`/key/generate` → `key_generate`).
fn route_json(methods: &[&str], path: &str) -> Value {
    let name: String = path
        .trim_start_matches('/')
        .replace(['{', '}'], "")
        .replace('/', "_");
    json!({"path": path, "methods": methods, "name": name, "endpoint": name})
}

/// The answer of `GET /routes`; `metrics` says whether `/metrics` is served.
pub fn routes(metrics: bool) -> Value {
    let llm = ROUTES.iter().flat_map(|(methods, path)| {
        [
            route_json(methods, path),
            route_json(methods, &format!("/v1{path}")),
        ]
    });
    let other = OTHER_ROUTES
        .iter()
        .chain(metrics.then_some(&METRICS))
        .map(|(methods, path)| route_json(methods, path));
    json!({"routes": llm.chain(other).collect::<Vec<_>>()})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_each_route_in_litellms_shape_with_its_v1_twin() {
        let all = routes(false);
        let list = all["routes"].as_array().unwrap();
        let find = |p: &str| list.iter().find(|r| r["path"] == p).cloned();
        assert_eq!(
            find("/v1/chat/completions").unwrap(),
            json!({"path": "/v1/chat/completions", "methods": ["POST"],
                "name": "v1_chat_completions", "endpoint": "v1_chat_completions"})
        );
        assert!(find("/chat/completions").is_some() && find("/key/generate").is_some());
        assert!(find("/metrics").is_none());
        assert!(routes(true)["routes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["path"] == "/metrics"));
    }
}
