//! LiteLLM's `/rerank` on Jina AI, Voyage AI, Bedrock (the agent
//! runtime's Rerank API, SigV4) and Vertex AI's ranking API (Discovery
//! Engine, a Google token) end to end on the faithful mock (`loadgen
//! mock`, `api/rerank.rs`: each API's key or signature, paths, required
//! fields and answer shapes): LiteLLM's request in, LiteLLM's answer out
//! (`results` of `index` and `relevance_score`, `meta.billed_units`),
//! spend per token or per search unit as the price map says, and the
//! provider's refusals relayed.

use e2e::{to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};
use std::io::Write;

/// The mock's keys (`loadgen/src/mock/api/rerank.rs`, `bedrock.rs`).
const JINA_KEY: &str = "mock-jina-api-key";
const VOYAGE_KEY: &str = "mock-voyage-api-key";
const AWS_SECRET: &str = "mock-aws-secret-access-key";
/// The mock's service account (`loadgen/src/mock/api/vertex/`).
const KEY_FILE: &str = include_str!("../../loadgen/src/mock/api/vertex/service_account.json");

fn entry(group: &str, params: Value) -> Value {
    json!({"model_name": group, "litellm_params": params, "model_info": {"id": group}})
}

fn start(models: Vec<Value>) -> Gateway {
    let config = json!({
        "model_list": models,
        "general_settings": {"master_key": MASTER_KEY},
        "router_settings": {"num_retries": 0},
    });
    Gateway::start(&to_yaml(&config), &[])
}

fn docs() -> Value {
    json!(["Paris is the capital of France", "Berlin is in Germany", {"text": "The capital of France has the Louvre"}])
}

/// Asks `group` to rerank [`docs`]; the answer, its spend row.
fn rerank(gw: &Gateway, group: &str, extra: Value) -> (Value, Value) {
    let mut body =
        json!({"model": group, "query": "capital of France", "documents": docs(), "top_n": 2});
    if let (Some(b), Value::Object(extra)) = (body.as_object_mut(), extra) {
        b.extend(extra);
    }
    let resp = gw.post("/v1/rerank", &body);
    assert_eq!(resp.status, 200, "{group}: {}", resp.text());
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
    let answer = resp.json();
    let results = answer["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "{answer}");
    // The two documents about France, best first.
    let indexes: Vec<u64> = results
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    assert!(
        indexes.contains(&0) && indexes.contains(&2),
        "{group}: {answer}"
    );
    let scores: Vec<f64> = results
        .iter()
        .map(|r| r["relevance_score"].as_f64().unwrap())
        .collect();
    assert!(scores[0] >= scores[1], "{answer}");
    assert!(answer["id"].as_str().is_some_and(|id| !id.is_empty()));
    let row = gw.spend_row(&call_id);
    assert_eq!(row["call_type"], "arerank", "{row}");
    (answer, row)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12
}

#[test]
fn jina_and_voyage_rerank_in_litellms_shape_billed_by_the_token() {
    let mock = MockServer::start(&[]);
    let base = format!("http://127.0.0.1:{}", mock.port());
    let gw = start(vec![
        // LiteLLM replaces Jina's base path by /v1/rerank.
        entry(
            "jina",
            json!({"model": "jina_ai/jina-reranker-v2-base-multilingual", "api_base": format!("{base}/ignored"), "api_key": JINA_KEY}),
        ),
        entry(
            "voyage",
            json!({"model": "voyage/rerank-2", "api_base": format!("{base}/v1"), "api_key": VOYAGE_KEY}),
        ),
        entry(
            "jina-bad-key",
            json!({"model": "jina_ai/jina-reranker-v2-base-multilingual", "api_base": base, "api_key": "wrong"}),
        ),
    ]);
    let (answer, row) = rerank(&gw, "jina", json!({"return_documents": true}));
    let tokens = answer["meta"]["billed_units"]["total_tokens"]
        .as_u64()
        .unwrap();
    assert!(tokens > 0, "{answer}");
    assert_eq!(
        answer["results"][0]["document"]["text"], "Paris is the capital of France",
        "{answer}"
    );
    assert_eq!(row["custom_llm_provider"], "jina_ai");
    // jina-reranker-v2-base-multilingual: 5e-8 USD a token.
    assert!(
        close(row["spend"].as_f64().unwrap(), tokens as f64 * 5e-8),
        "{row}"
    );
    assert_eq!(row["prompt_tokens"].as_u64(), Some(tokens));

    // Voyage takes strings and top_k: the mock refuses objects and top_n.
    let (answer, row) = rerank(&gw, "voyage", json!({}));
    let tokens = answer["meta"]["billed_units"]["total_tokens"]
        .as_u64()
        .unwrap();
    assert!(tokens > 0, "{answer}");
    assert!(answer["results"][0].get("document").is_none(), "{answer}");
    // voyage/rerank-2: 5e-8 USD a token.
    assert!(
        close(row["spend"].as_f64().unwrap(), tokens as f64 * 5e-8),
        "{row}"
    );

    // The provider's refusal keeps its status and message.
    let resp = gw.post(
        "/v1/rerank",
        &json!({"model": "jina-bad-key", "query": "q", "documents": ["a"]}),
    );
    assert_eq!(resp.status, 401, "{}", resp.text());
    assert!(resp.text().contains("invalid API key"), "{}", resp.text());
    // Bad input never reaches the provider.
    let before = mock.stats()["received"].clone();
    let resp = gw.post(
        "/v1/rerank",
        &json!({"model": "voyage", "query": "q", "documents": [1]}),
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert_eq!(resp.json()["error"]["param"], "documents");
    assert_eq!(mock.stats()["received"], before);
    // A chat request to a rerank-only provider is a clear 400.
    let resp = gw.post(
        "/v1/chat/completions",
        &json!({"model": "jina", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert!(resp.text().contains("jina_ai"), "{}", resp.text());
}

#[test]
fn bedrock_rerank_is_signed_and_billed_per_search_unit() {
    let mock = MockServer::start(&[]);
    let endpoint = format!("http://127.0.0.1:{}", mock.port());
    let aws = |secret: &str, model: &str| {
        json!({
            "model": model,
            "aws_access_key_id": "AKIDMOCK",
            "aws_secret_access_key": secret,
            "aws_region_name": "us-west-2",
            "aws_bedrock_runtime_endpoint": endpoint,
        })
    };
    let gw = start(vec![
        entry(
            "amazon-rerank",
            aws(AWS_SECRET, "bedrock/amazon.rerank-v1:0"),
        ),
        entry(
            "cohere-rerank",
            aws(
                AWS_SECRET,
                "bedrock/arn:aws:bedrock:us-west-2::foundation-model/cohere.rerank-v3-5:0",
            ),
        ),
        entry("wrong-secret", aws("nope", "bedrock/amazon.rerank-v1:0")),
        entry(
            "chat-model",
            aws(AWS_SECRET, "bedrock/anthropic.claude-3-haiku-20240307-v1:0"),
        ),
    ]);
    let (answer, row) = rerank(&gw, "amazon-rerank", json!({}));
    assert_eq!(
        answer["meta"]["billed_units"]["search_units"], 1,
        "{answer}"
    );
    assert_eq!(row["custom_llm_provider"], "bedrock");
    // amazon.rerank-v1:0: 0.001 USD a search unit.
    assert!(close(row["spend"].as_f64().unwrap(), 0.001), "{row}");
    // 150 documents are two units at cohere.rerank-v3-5:0's 0.002.
    let many: Vec<String> = (0..150).map(|i| format!("document {i}")).collect();
    let resp = gw.post(
        "/v1/rerank",
        &json!({"model": "cohere-rerank", "query": "document 7", "documents": many}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let answer = resp.json();
    assert_eq!(answer["results"].as_array().unwrap().len(), 150);
    assert_eq!(answer["meta"]["billed_units"]["search_units"], 2);
    let row = gw.spend_row(resp.header("x-litellm-call-id").unwrap());
    assert!(close(row["spend"].as_f64().unwrap(), 0.004), "{row}");
    // A wrong secret fails the mock's signature check.
    let resp = gw.post(
        "/v1/rerank",
        &json!({"model": "wrong-secret", "query": "q", "documents": ["a"]}),
    );
    assert_eq!(resp.status, 403, "{}", resp.text());
    assert!(resp.text().contains("signature"), "{}", resp.text());
    // A chat model is no reranker.
    let resp = gw.post(
        "/v1/rerank",
        &json!({"model": "chat-model", "query": "q", "documents": ["a"]}),
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert!(resp.text().contains("bedrock"), "{}", resp.text());
}

#[test]
fn vertex_ai_ranking_uses_the_google_token_and_bills_per_search_unit() {
    let mock = MockServer::start(&[]);
    let mut key = tempfile::NamedTempFile::new().unwrap();
    key.write_all(
        KEY_FILE
            .replace(
                "https://oauth2.googleapis.com/token",
                &format!("http://127.0.0.1:{}/token", mock.port()),
            )
            .as_bytes(),
    )
    .unwrap();
    let path = key.path().to_str().unwrap();
    let project = serde_json::from_str::<Value>(KEY_FILE).unwrap()["project_id"]
        .as_str()
        .unwrap()
        .to_string();
    let base = format!("http://127.0.0.1:{}", mock.port());
    let gw = start(vec![
        entry(
            "ranker",
            json!({"model": "vertex_ai/semantic-ranker-default@latest", "api_base": base, "vertex_credentials": path}),
        ),
        entry(
            "other-project",
            json!({"model": "vertex_ai/semantic-ranker-default@latest", "api_base": base, "vertex_credentials": path, "vertex_project": "not-the-accounts"}),
        ),
        entry(
            "no-credentials",
            json!({"model": "vertex_ai/semantic-ranker-default@latest", "api_base": base, "vertex_project": project}),
        ),
    ]);
    let (answer, row) = rerank(&gw, "ranker", json!({"return_documents": true}));
    assert_eq!(
        answer["meta"]["billed_units"]["search_units"], 1,
        "{answer}"
    );
    assert_eq!(
        answer["results"][0]["document"]["text"], "Paris is the capital of France",
        "{answer}"
    );
    assert_eq!(row["custom_llm_provider"], "vertex_ai");
    // semantic-ranker-default@latest: 0.001 USD a search unit.
    assert!(close(row["spend"].as_f64().unwrap(), 0.001), "{row}");
    let resp = gw.post(
        "/v1/rerank",
        &json!({"model": "other-project", "query": "q", "documents": ["a"]}),
    );
    assert_eq!(resp.status, 403, "{}", resp.text());
    let resp = gw.post(
        "/v1/rerank",
        &json!({"model": "no-credentials", "query": "q", "documents": ["a"]}),
    );
    assert_eq!(resp.status, 401, "{}", resp.text());
}
