//! `GET /routes` (LiteLLM's list of the proxy's routes, public there): every
//! route it lists is served (none answers "Route not found"), the LLM
//! routes with their `/v1` twins, in LiteLLM's shape.

use e2e::{to_yaml, Gateway, MASTER_KEY};
use serde_json::{json, Value};

fn start() -> Gateway {
    let config = json!({
        "model_list": [{
            "model_name": "m",
            "litellm_params": {"model": "mock/m", "mock_response": "hi"},
        }],
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start(&to_yaml(&config), &[])
}

#[test]
fn routes_lists_every_route_served_in_litellms_shape_without_a_key() {
    let gw = start();
    let resp = gw.call("GET", "/routes", &[], b"");
    assert_eq!(resp.status, 200, "public, as LiteLLM's: {}", resp.text());
    let all = resp.json();
    let routes = all["routes"].as_array().expect("routes");
    let listed = |path: &str| routes.iter().any(|r| r["path"] == path);
    for path in [
        "/chat/completions",
        "/v1/chat/completions",
        "/key/generate",
        "/routes",
    ] {
        assert!(listed(path), "{path} missing: {all}");
    }
    let auth = format!("Bearer {MASTER_KEY}");
    for route in routes {
        let path = route["path"].as_str().unwrap().replace("{key}", "sk-none");
        let path = path.replace("{model_id}", "m");
        for method in route["methods"].as_array().unwrap() {
            let method = method.as_str().unwrap();
            let body: &[u8] = if method == "GET" { b"" } else { b"{}" };
            let resp = gw.call(
                method,
                &path,
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/json"),
                ],
                body,
            );
            let text = resp.text();
            let unrouted = resp.status == 404
                && serde_json::from_str::<Value>(&text).is_ok_and(|v| {
                    v["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("Route not found"))
                });
            assert!(
                !unrouted,
                "{method} {path} is listed and not served: {text}"
            );
        }
    }
}

/// `GET /models?only_model_access_groups=True` (LiteLLM's client asks it):
/// the caller's model access groups, none here (the config defines none),
/// never the model list; `include_model_access_groups` adds none to it
/// (`access_groups.rs` tests a config with access groups).
#[test]
fn models_with_only_model_access_groups_lists_no_models() {
    let gw = start();
    let auth = format!("Bearer {MASTER_KEY}");
    let list = |path: &str| {
        let resp = gw.call("GET", path, &[("Authorization", &auth)], b"");
        assert_eq!(resp.status, 200, "{path}: {}", resp.text());
        let ids: Vec<String> = resp.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect();
        ids
    };
    for path in [
        "/models?only_model_access_groups=True",
        "/v1/models?only_model_access_groups=true",
    ] {
        assert!(list(path).is_empty(), "{path}");
    }
    assert_eq!(list("/v1/models?include_model_access_groups=true"), ["m"]);
    assert_eq!(list("/v1/models"), ["m"]);
}
