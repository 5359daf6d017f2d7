//! A deployment whose provider LiteLLM knows and the gateway does not
//! serve: the gateway starts, logs one error naming the entry and its
//! provider, reports the deployment as unsupported in `/health` and
//! `/model/info`, refuses a request routed to it with a 400 naming the
//! provider, and a fallback still applies. A provider LiteLLM does not
//! know either (a typo) stops start-up.

use e2e::{to_yaml, Gateway, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

fn config() -> Value {
    json!({
        "model_list": [
            {"model_name": "rep", "litellm_params": {"model": "replicate/meta/llama-3-8b"}, "model_info": {"id": "rep-1"}},
            {"model_name": "solo", "litellm_params": {"model": "huggingface/bigscience/bloom"}, "model_info": {"id": "hf-1"}},
            {"model_name": "local", "litellm_params": {"model": "mock/local", "mock_response": "from the fallback"}, "model_info": {"id": "local-1"}},
        ],
        "router_settings": {"fallbacks": [{"rep": ["local"]}]},
        "general_settings": {"master_key": MASTER_KEY},
    })
}

fn chat(gw: &Gateway, model: &str) -> e2e::http::Response {
    gw.post(
        "/v1/chat/completions",
        &json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}),
    )
}

#[test]
fn an_unsupported_provider_starts_reports_and_refuses_with_fallbacks() {
    let gw = Gateway::start(&to_yaml(&config()), &[]);
    let out = gw.output();
    let errors: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("is not supported by this gateway"))
        .collect();
    assert_eq!(errors.len(), 2, "one error per entry:\n{out}");
    assert!(
        errors[0].contains("model_list[0]")
            && errors[0].contains("\"rep\"")
            && errors[0].contains("provider \"replicate\""),
        "{out}"
    );
    assert!(errors[1].contains("provider \"huggingface\""), "{out}");

    let resp = chat(&gw, "solo");
    assert_eq!(resp.status, 400, "{}", resp.text());
    let error = &resp.json()["error"];
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("Provider \"huggingface\"") && message.contains("hf-1"),
        "{message}"
    );
    assert_eq!(error["type"], "invalid_request_error");
    assert_eq!(error["param"], "model");

    let resp = chat(&gw, "rep");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.json()["choices"][0]["message"]["content"],
        "from the fallback"
    );
    assert_eq!(resp.header("x-litellm-attempted-fallbacks"), Some("1"));

    let health = gw.get("/health");
    assert_eq!(health.status, 200, "{}", health.text());
    let body = health.json();
    let unhealthy = body["unhealthy_endpoints"].as_array().unwrap();
    let shown: Vec<&Value> = unhealthy
        .iter()
        .filter(|e| e["custom_llm_provider"] == "replicate")
        .collect();
    assert_eq!(shown.len(), 1, "{body}");
    assert!(shown[0]["error"]
        .as_str()
        .unwrap()
        .contains("provider \"replicate\" is not supported"));
    assert_eq!(body["healthy_count"], 1, "the mock: {body}");

    let info = gw.get("/model/info").json();
    let data = info["data"].as_array().unwrap();
    let by_id = |id: &str| {
        data.iter()
            .find(|d| d["model_info"]["id"] == id)
            .unwrap_or_else(|| panic!("{id} in {info}"))
    };
    assert_eq!(by_id("rep-1")["model_info"]["supported"], false);
    assert!(by_id("rep-1")["model_info"]["unsupported_reason"]
        .as_str()
        .unwrap()
        .contains("replicate"));
    assert_eq!(
        by_id("rep-1")["litellm_params"]["model"],
        "replicate/meta/llama-3-8b"
    );
    assert!(by_id("local-1")["model_info"].get("supported").is_none());
}

#[test]
fn a_provider_litellm_does_not_know_stops_start_up() {
    let mut config = config();
    config["model_list"][0]["litellm_params"]["model"] = json!("replicat/meta/llama-3-8b");
    let mut gw = Gateway::spawn(&to_yaml(&config), &[], e2e::free_port(), &[]);
    let status = gw
        .wait_exit(Duration::from_secs(20))
        .expect("the gateway exits");
    assert!(!status.success());
    let out = gw.output();
    assert!(
        out.contains("provider \"replicat\" is not a provider LiteLLM knows"),
        "{out}"
    );
}
