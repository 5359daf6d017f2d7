//! LiteLLM's rerank on Bedrock's Agent Runtime `Rerank` API (`bedrock/`
//! rerank models: `amazon.rerank-v1:0`, `cohere.rerank-v3-5:0`, or their
//! model ARNs).
//!
//! The request is a `POST {endpoint}/rerank` on the agent runtime
//! (`https://bedrock-agent-runtime.{region}.amazonaws.com`: LiteLLM's
//! runtime endpoint with `bedrock-runtime` replaced, see `config`), signed
//! with SigV4 for service `bedrock`. Its body: one `TEXT` query, the
//! documents as `INLINE` sources (`TEXT` for strings, `JSON` for objects,
//! as LiteLLM sends them), and a `BEDROCK_RERANKING_MODEL` configuration
//! naming the model's ARN (a model id is made the foundation model's ARN
//! in the deployment's region: Bedrock takes ARNs only, LiteLLM sends the
//! id as given) with `numberOfResults` = `top_n` (at most the documents),
//! else every document.
//! The answer's `results` (`index`, `relevanceScore`) become LiteLLM's;
//! Bedrock reports no usage, so the call is billed one search unit per
//! 100 documents, as AWS counts its rerank queries (LiteLLM bills one).

use crate::error::GatewayError;
use crate::formats::TranslateError;
use crate::providers::rerank::{self, Ask};
use serde_json::{json, Value};

/// Whether a Bedrock model id (or ARN) names a rerank model.
pub fn is_rerank_model(model: &str) -> bool {
    model.contains("rerank")
}

/// The model ARN Bedrock's Rerank API takes for `model` in `region`.
pub fn model_arn(model: &str, region: &str) -> String {
    if model.starts_with("arn:") {
        model.to_string()
    } else {
        format!("arn:aws:bedrock:{region}::foundation-model/{model}")
    }
}

/// The Rerank API body for LiteLLM's rerank request `body`.
pub fn request(body: &[u8], model_arn: &str) -> Result<Vec<u8>, GatewayError> {
    let ask = Ask::parse(body)?;
    let sources: Vec<Value> = ask
        .documents
        .iter()
        .map(|d| match d {
            Value::String(text) => json!({
                "type": "INLINE",
                "inlineDocumentSource": {"type": "TEXT", "textDocument": {"text": text}},
            }),
            doc => json!({
                "type": "INLINE",
                "inlineDocumentSource": {"type": "JSON", "jsonDocument": doc},
            }),
        })
        .collect();
    // Bedrock refuses more results than sources.
    let sources_count = ask.documents.len() as u64;
    let results = ask.top_n.map_or(sources_count, |n| n.min(sources_count));
    let out = json!({
        "queries": [{"type": "TEXT", "textQuery": {"text": ask.query}}],
        "rerankingConfiguration": {
            "type": "BEDROCK_RERANKING_MODEL",
            "bedrockRerankingConfiguration": {
                "modelConfiguration": {"modelArn": model_arn},
                "numberOfResults": results,
            },
        },
        "sources": sources,
    });
    Ok(out.to_string().into_bytes())
}

/// LiteLLM's answer for a Rerank API answer to a call ranking `documents`
/// documents.
pub fn to_cohere(body: &[u8], documents: usize) -> Result<Vec<u8>, TranslateError> {
    let answer = rerank::read(body)?;
    let Some(Value::Array(found)) = answer.get("results") else {
        return Err(TranslateError("rerank answer: no `results` list".into()));
    };
    let results = found
        .iter()
        .map(|r| {
            let document = r.get("document").and_then(|d| {
                d.get("textDocument")
                    .and_then(|t| t.get("text"))
                    .or_else(|| d.get("jsonDocument"))
            });
            Ok(rerank::result(
                rerank::index(&r["index"], documents)?,
                rerank::score(&r["relevanceScore"])?,
                document,
            ))
        })
        .collect::<Result<Vec<_>, TranslateError>>()?;
    Ok(rerank::answer(
        None,
        results,
        json!({ "search_units": rerank::search_units(documents) }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_follow_the_rerank_api() {
        let arn = model_arn("amazon.rerank-v1:0", "us-west-2");
        assert_eq!(
            arn,
            "arn:aws:bedrock:us-west-2::foundation-model/amazon.rerank-v1:0"
        );
        assert_eq!(model_arn(&arn, "eu-west-1"), arn);
        let body = request(
            br#"{"model":"r","query":"q","documents":["a",{"text":"b","id":7}],"top_n":1}"#,
            &arn,
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["queries"][0]["textQuery"]["text"], "q");
        assert_eq!(
            v["sources"][0]["inlineDocumentSource"],
            json!({"type": "TEXT", "textDocument": {"text": "a"}})
        );
        assert_eq!(
            v["sources"][1]["inlineDocumentSource"]["jsonDocument"],
            json!({"text": "b", "id": 7})
        );
        let config = &v["rerankingConfiguration"]["bedrockRerankingConfiguration"];
        assert_eq!(config["numberOfResults"], 1);
        assert_eq!(config["modelConfiguration"]["modelArn"], arn.as_str());
        let out: Value = serde_json::from_slice(
            &to_cohere(
                br#"{"results":[{"index":1,"relevanceScore":0.7},{"index":0,"relevanceScore":0.2}]}"#,
                2,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            out["results"],
            json!([{"index": 1, "relevance_score": 0.7}, {"index": 0, "relevance_score": 0.2}])
        );
        assert_eq!(out["meta"]["billed_units"]["search_units"], 1);
        assert!(to_cohere(br#"{"results":[{"index":2,"relevanceScore":0.7}]}"#, 2).is_err());
    }
}
