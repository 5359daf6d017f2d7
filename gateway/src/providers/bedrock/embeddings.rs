//! Embeddings on Bedrock through InvokeModel (`/model/{id}/invoke`):
//! Amazon Titan (`amazon.titan-embed-*`: `{"inputText"}`, one input per
//! call, `dimensions` on v2; answers `embedding` and
//! `inputTextTokenCount`) and Cohere (`cohere.embed-*`: `{"texts",
//! "input_type"}`, `search_document` unless the request names one;
//! answers `embeddings`, without a token count). Answers come back as
//! OpenAI's list of embeddings.

use crate::error::GatewayError;
use crate::formats::TranslateError;
use crate::providers::gemini::embeddings::{inputs, openai_list};
use crate::spend::Usage;
use serde_json::{json, Map, Value};

/// Cohere's `input_type` when the request gives none (LiteLLM's).
const DEFAULT_INPUT_TYPE: &str = "search_document";
/// Most texts in one Cohere call (Bedrock's limit).
const MAX_COHERE_TEXTS: usize = 96;

/// The InvokeModel body for an OpenAI embeddings request to `model_id`.
pub fn request(body: &[u8], model_id: &str) -> Result<Vec<u8>, GatewayError> {
    let (texts, dimensions) = inputs(body, "bedrock")?;
    let invalid = |message: String| GatewayError::InvalidParam {
        param: "input",
        message,
    };
    if model_id.contains("titan-embed") {
        let [text] = &texts[..] else {
            return Err(invalid(format!(
                "{model_id} embeds one input per request; send the {} inputs one by one",
                texts.len()
            )));
        };
        let mut out = json!({ "inputText": text });
        if let Some(d) = dimensions {
            out["dimensions"] = d.into();
        }
        return Ok(out.to_string().into_bytes());
    }
    if model_id.contains("cohere.embed") {
        if texts.len() > MAX_COHERE_TEXTS {
            return Err(invalid(format!(
                "{model_id} embeds at most {MAX_COHERE_TEXTS} inputs per request"
            )));
        }
        let req: Map<String, Value> =
            serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
        let input_type = req
            .get("input_type")
            .and_then(Value::as_str)
            .unwrap_or(DEFAULT_INPUT_TYPE);
        return Ok(json!({"texts": texts, "input_type": input_type})
            .to_string()
            .into_bytes());
    }
    Err(GatewayError::InvalidParam {
        param: "model",
        message: format!(
            "bedrock embeddings serve amazon.titan-embed-* and cohere.embed-* models, not {model_id}"
        ),
    })
}

/// The vectors and prompt tokens of a Titan or Cohere answer.
fn read(resp: &Value) -> Option<(Vec<&Value>, u64)> {
    if let Some(one) = resp.get("embedding") {
        let tokens = resp["inputTextTokenCount"].as_u64().unwrap_or(0);
        return Some((vec![one], tokens));
    }
    let list = match &resp["embeddings"] {
        Value::Array(list) => list,
        // `embedding_types` answers: `{"float": [[...]]}`.
        Value::Object(by_type) => by_type.get("float")?.as_array()?,
        _ => return None,
    };
    Some((list.iter().collect(), 0))
}

/// A Titan or Cohere answer as OpenAI's embeddings list.
pub fn to_openai(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let resp: Value = serde_json::from_slice(body)?;
    let (vectors, tokens) = read(&resp)
        .ok_or_else(|| TranslateError("the embeddings answer has no embedding".into()))?;
    openai_list(vectors, tokens, "an embedding is not a list")
}

/// The usage of an embeddings answer, when it reports one (Titan).
pub fn usage(resp: &Value) -> Option<Usage> {
    let (_, tokens) = read(resp)?;
    (tokens > 0).then(|| Usage {
        prompt_tokens: tokens,
        ..Usage::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titan_and_cohere_bodies() {
        let v: Value = serde_json::from_slice(
            &request(
                br#"{"input":"hi","dimensions":256}"#,
                "amazon.titan-embed-text-v2:0",
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(v, json!({"inputText": "hi", "dimensions": 256}));
        let e = request(br#"{"input":["a","b"]}"#, "amazon.titan-embed-text-v2:0").unwrap_err();
        assert_eq!(e.status(), 400);
        let v: Value = serde_json::from_slice(
            &request(br#"{"input":["a","b"]}"#, "cohere.embed-english-v3").unwrap(),
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"texts": ["a", "b"], "input_type": "search_document"})
        );
        assert_eq!(
            request(br#"{"input":"a"}"#, "anthropic.claude-3")
                .unwrap_err()
                .status(),
            400
        );
    }

    #[test]
    fn answers_become_openai_lists() {
        let titan = br#"{"embedding":[0.5,0.25],"inputTextTokenCount":3}"#;
        let v: Value = serde_json::from_slice(&to_openai(titan).unwrap()).unwrap();
        assert_eq!(v["data"][0]["embedding"], json!([0.5, 0.25]));
        assert_eq!(v["usage"]["prompt_tokens"], 3);
        let cohere = br#"{"id":"x","embeddings":[[1.0],[2.0]],"response_type":"embeddings_floats","texts":["a","b"]}"#;
        let v: Value = serde_json::from_slice(&to_openai(cohere).unwrap()).unwrap();
        assert_eq!(v["data"][1]["index"], 1);
        assert!(usage(&serde_json::from_slice(cohere).unwrap()).is_none());
        assert!(to_openai(br#"{"output":{}}"#).is_err());
    }
}
