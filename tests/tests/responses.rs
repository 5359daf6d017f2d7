//! OpenAI's Responses API (`POST /v1/responses`, `/responses`): passed
//! through to OpenAI and Azure deployments (the mock serves the API), and
//! bridged through chat completions to every other kind: the in-process
//! mock, an OpenAI-compatible server, an Anthropic, a Bedrock and a Gemini
//! one on the faithful mock, and an `openai/` deployment with
//! `use_chat_completions_api`; whole and streamed, with function tools;
//! keys, errors and spend rows as on chat completions.

use e2e::{to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};

fn start(mock: &MockServer) -> Gateway {
    let base = format!("http://127.0.0.1:{}", mock.port());
    let config = json!({
        "model_list": [
            {"model_name": "local", "litellm_params": {"model": "mock/local", "mock_response": "hello from the mock"}},
            {"model_name": "gpt", "litellm_params": {"model": "openai/gpt-4o", "api_base": format!("{base}/v1"), "api_key": "sk-up"}},
            {"model_name": "claude", "litellm_params": {"model": "anthropic/claude-sonnet-4", "api_base": base, "api_key": "sk-ant"}},
            {"model_name": "bedrock", "litellm_params": {
                "model": "bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0",
                "api_base": base, "aws_access_key_id": "AKIDMOCK",
                "aws_secret_access_key": "mock-aws-secret-access-key", "aws_region_name": "us-east-1",
            }},
            {"model_name": "gemini", "litellm_params": {"model": "gemini/gemini-2.0-flash", "api_base": base, "api_key": "mock-gemini-api-key"}},
        ],
        "general_settings": {"master_key": MASTER_KEY},
    });
    Gateway::start(&to_yaml(&config), &[])
}

/// `(event name, data)` of each SSE event.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = String::new();
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            (
                name,
                serde_json::from_str(&data).unwrap_or(Value::String(data)),
            )
        })
        .collect()
}

fn output_text(resp: &Value) -> String {
    resp["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn responses_are_served_by_every_provider_whole_and_streamed() {
    let mock = MockServer::start(&["--completion-tokens", "3"]);
    let gw = start(&mock);
    for (model, expected) in [
        ("local", "hello from the mock"),
        ("gpt", "lorem ipsum dolor"),
        ("claude", "lorem ipsum dolor"),
        ("bedrock", "lorem ipsum dolor"),
        ("gemini", "lorem ipsum dolor"),
    ] {
        let resp = gw.post(
            "/v1/responses",
            &json!({"model": model, "instructions": "be brief", "input": "hi"}),
        );
        assert_eq!(resp.status, 200, "{model}: {}", resp.text());
        let body = resp.json();
        assert_eq!(body["object"], "response", "{model}");
        assert_eq!(body["status"], "completed", "{model}");
        assert_eq!(output_text(&body), expected, "{model}");
        assert!(
            body["usage"]["input_tokens"].as_u64() > Some(0),
            "{model}: {body}"
        );
        assert!(
            body["usage"]["output_tokens"].as_u64() > Some(0),
            "{model}: {body}"
        );

        let resp = gw.post(
            "/responses",
            &json!({"model": model, "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}], "stream": true}),
        );
        assert_eq!(resp.status, 200, "{model}: {}", resp.text());
        let evs = events(&resp.text());
        assert_eq!(evs[0].0, "response.created", "{model}");
        let text: String = evs
            .iter()
            .filter(|(n, _)| n == "response.output_text.delta")
            .filter_map(|(_, v)| v["delta"].as_str())
            .collect();
        assert_eq!(text, expected, "{model}");
        let (last, done) = evs.last().unwrap();
        assert_eq!(last, "response.completed", "{model}");
        assert_eq!(output_text(&done["response"]), expected, "{model}");
        assert!(
            done["response"]["usage"]["output_tokens"].as_u64() > Some(0),
            "{model}: {done}"
        );
    }
}

#[test]
fn responses_call_function_tools_and_refuse_what_cannot_be_bridged() {
    let mock = MockServer::start(&["--completion-tokens", "2"]);
    let gw = start(&mock);
    let tools = json!([{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    for model in ["claude", "bedrock", "gemini"] {
        let resp = gw.post(
            "/v1/responses",
            &json!({"model": model, "input": "weather?", "tools": tools, "tool_choice": "required"}),
        );
        assert_eq!(resp.status, 200, "{model}: {}", resp.text());
        let body = resp.json();
        let call = body["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "function_call")
            .unwrap_or_else(|| panic!("{model}: no function_call in {body}"))
            .clone();
        assert_eq!(call["name"], "get_weather");
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"city": "mock"}));
        // The result goes back as a function_call_output item.
        let resp = gw.post(
            "/v1/responses",
            &json!({"model": model, "tools": tools, "input": [
                {"role": "user", "content": "weather?"},
                {"type": "function_call", "call_id": call["call_id"], "name": "get_weather", "arguments": call["arguments"]},
                {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"},
            ]}),
        );
        assert_eq!(resp.status, 200, "{model}: {}", resp.text());

        let resp = gw.post(
            "/v1/responses",
            &json!({"model": model, "input": "weather?", "tools": tools, "tool_choice": "required", "stream": true}),
        );
        let evs = events(&resp.text());
        let args: String = evs
            .iter()
            .filter(|(n, _)| n == "response.function_call_arguments.delta")
            .filter_map(|(_, v)| v["delta"].as_str())
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&args).unwrap(),
            json!({"city": "mock"}),
            "{model}"
        );
    }

    let err = e2e::assert_error(
        &gw.post(
            "/v1/responses",
            &json!({"model": "claude", "input": "x", "previous_response_id": "resp_1"}),
        ),
        400,
    );
    assert_eq!(err["param"], "previous_response_id");
    let err = e2e::assert_error(&gw.post("/v1/responses", &json!({"model": "gpt"})), 400);
    assert_eq!(err["param"], "input");
    let resp = gw.call(
        "POST",
        "/v1/responses",
        &[
            ("authorization", "Bearer sk-wrong"),
            ("content-type", "application/json"),
        ],
        br#"{"model":"gpt","input":"x"}"#,
    );
    e2e::assert_error(&resp, 401);
}

#[test]
fn responses_pass_through_to_openai_and_azure_and_bridge_the_rest() {
    let mock = MockServer::start(&["--completion-tokens", "3"]);
    let base = format!("http://127.0.0.1:{}", mock.port());
    let config = json!({
        "model_list": [
            {"model_name": "gpt", "litellm_params": {"model": "openai/gpt-4o", "api_base": format!("{base}/v1"), "api_key": "sk-up"}},
            {"model_name": "azure", "litellm_params": {"model": "azure/gpt-4o-prod", "api_base": base, "api_key": "azure-key", "api_version": "2025-03-01-preview"}},
            {"model_name": "bridged", "litellm_params": {"model": "openai/gpt-4o", "api_base": format!("{base}/v1"), "api_key": "sk-up", "use_chat_completions_api": true}},
            {"model_name": "vllm", "litellm_params": {"model": "hosted_vllm/llama", "api_base": format!("{base}/v1")}},
        ],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let spend_row = |call_id: &str| {
        e2e::eventually("the spend row", std::time::Duration::from_secs(5), || {
            let rows = gw.get(&format!("/spend/logs?request_id={call_id}")).json();
            rows.as_array().and_then(|r| r.first().cloned())
        })
    };
    for (model, passed_through) in [
        ("gpt", true),
        ("azure", true),
        ("bridged", false),
        ("vllm", false),
    ] {
        let resp = gw.post(
            "/v1/responses",
            &json!({"model": model, "instructions": "be brief", "input": "hi"}),
        );
        assert_eq!(resp.status, 200, "{model}: {}", resp.text());
        let body = resp.json();
        let id = body["id"].as_str().unwrap();
        // The mock's own ids, or the bridge's made from a chat completion's.
        assert_eq!(
            id.starts_with("resp_mock"),
            passed_through,
            "{model}: {body}"
        );
        assert_eq!(output_text(&body), "lorem ipsum dolor", "{model}");
        let input_tokens = body["usage"]["input_tokens"].as_u64().unwrap();
        let row = spend_row(resp.header("x-litellm-call-id").unwrap());
        assert_eq!(row["prompt_tokens"], input_tokens, "{model}: {row}");
        assert_eq!(row["completion_tokens"], 3, "{model}: {row}");
        assert_eq!(row["call_type"], "aresponses", "{model}: {row}");

        let resp = gw.post(
            "/v1/responses",
            &json!({"model": model, "input": "hi", "stream": true}),
        );
        assert_eq!(resp.status, 200, "{model}: {}", resp.text());
        let evs = events(&resp.text());
        let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.first(), Some(&"response.created"), "{model}");
        assert_eq!(names.last(), Some(&"response.completed"), "{model}");
        let (_, done) = evs.last().unwrap();
        assert_eq!(
            done["response"]["id"]
                .as_str()
                .unwrap()
                .starts_with("resp_mock"),
            passed_through,
            "{model}: {done}"
        );
        let text: String = evs
            .iter()
            .filter(|(n, _)| n == "response.output_text.delta")
            .filter_map(|(_, v)| v["delta"].as_str())
            .collect();
        assert_eq!(text, "lorem ipsum dolor", "{model}");
        let row = spend_row(resp.header("x-litellm-call-id").unwrap());
        assert_eq!(row["completion_tokens"], 3, "{model}: {row}");
    }
    // Passed through, a stored response is the upstream's business.
    let resp = gw.post(
        "/v1/responses",
        &json!({"model": "gpt", "input": "x", "previous_response_id": "resp_1"}),
    );
    let err = e2e::assert_error(&resp, 400);
    assert!(e2e::error_message(&err).contains("not found"), "{err:?}");
}
