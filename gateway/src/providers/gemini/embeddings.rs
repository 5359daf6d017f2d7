//! Embeddings on Google's APIs: AI Studio's `batchEmbedContents` (one
//! `requests` entry per input) and Vertex AI's `:predict` (one `instances`
//! entry per input), from OpenAI's embeddings request (`input` a string
//! or a list of strings, `dimensions` as `outputDimensionality`), and
//! their answers back as OpenAI's list of embeddings with usage
//! (`usageMetadata.promptTokenCount`, or the sum of Vertex's
//! `statistics.token_count`).

use crate::error::GatewayError;
use crate::formats::TranslateError;
use crate::spend::Usage;
use serde_json::{json, Map, Value};

/// Most inputs in one request (OpenAI's limit).
const MAX_INPUTS: usize = 2048;
/// Largest `dimensions` accepted.
const MAX_DIMENSIONS: u64 = 65_536;

/// The texts and `dimensions` of an OpenAI embeddings request.
pub fn inputs(body: &[u8], provider: &str) -> Result<(Vec<String>, Option<u64>), GatewayError> {
    let req: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    let invalid = |message: String| GatewayError::InvalidParam {
        param: "input",
        message,
    };
    let texts = match req.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_INPUTS => items
            .iter()
            .map(|i| i.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                invalid(format!(
                    "provider {provider} embeds strings; token arrays are not supported"
                ))
            })?,
        Some(Value::Array(_)) => {
            return Err(invalid(format!(
                "input must hold 1 to {MAX_INPUTS} strings"
            )))
        }
        _ => return Err(GatewayError::MissingParam("input")),
    };
    let dimensions = match req.get("dimensions") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|d| (1..=MAX_DIMENSIONS).contains(d))
                .ok_or_else(|| GatewayError::InvalidParam {
                    param: "dimensions",
                    message: format!("dimensions must be 1 to {MAX_DIMENSIONS}"),
                })?,
        ),
    };
    Ok((texts, dimensions))
}

/// AI Studio's `batchEmbedContents` body for `model`.
pub fn studio_request(body: &[u8], model: &str) -> Result<Vec<u8>, GatewayError> {
    let (texts, dimensions) = inputs(body, "gemini")?;
    let model = format!("models/{}", model.strip_prefix("models/").unwrap_or(model));
    let requests: Vec<Value> = texts
        .into_iter()
        .map(|text| {
            let mut r = json!({"model": model, "content": {"parts": [{"text": text}]}});
            if let Some(d) = dimensions {
                r["outputDimensionality"] = d.into();
            }
            r
        })
        .collect();
    Ok(json!({ "requests": requests }).to_string().into_bytes())
}

/// Vertex AI's `:predict` body.
pub fn vertex_request(body: &[u8]) -> Result<Vec<u8>, GatewayError> {
    let (texts, dimensions) = inputs(body, "vertex_ai")?;
    let instances: Vec<Value> = texts.into_iter().map(|t| json!({"content": t})).collect();
    let mut out = json!({ "instances": instances });
    if let Some(d) = dimensions {
        out["parameters"] = json!({"outputDimensionality": d});
    }
    Ok(out.to_string().into_bytes())
}

/// The vectors and prompt tokens of either answer.
fn read(resp: &Value) -> Option<(Vec<&Value>, u64)> {
    if let Some(list) = resp["embeddings"].as_array() {
        let vectors = list.iter().map(|e| &e["values"]).collect();
        let tokens = resp["usageMetadata"]["promptTokenCount"]
            .as_u64()
            .unwrap_or(0);
        return Some((vectors, tokens));
    }
    let list = resp["predictions"].as_array()?;
    let vectors = list.iter().map(|p| &p["embeddings"]["values"]).collect();
    let tokens = list
        .iter()
        .filter_map(|p| p["embeddings"]["statistics"]["token_count"].as_f64())
        .filter(|n| n.is_finite() && *n >= 0.0)
        .fold(0u64, |sum, n| sum.saturating_add(n as u64));
    Some((vectors, tokens))
}

/// An embeddings answer as OpenAI's.
pub fn to_openai(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let resp: Value = serde_json::from_slice(body)?;
    let (vectors, tokens) = read(&resp).ok_or(TranslateError(
        "the embeddings answer has neither embeddings nor predictions".into(),
    ))?;
    openai_list(vectors, tokens, "an embedding has no values")
}

/// OpenAI's embeddings list of `vectors` with `tokens` of usage; an entry
/// that is not a list of numbers is the error `not_a_list`. Bedrock's
/// answers end here too.
pub fn openai_list(
    vectors: Vec<&Value>,
    tokens: u64,
    not_a_list: &str,
) -> Result<Vec<u8>, TranslateError> {
    let mut data = Vec::with_capacity(vectors.len());
    for (index, values) in vectors.into_iter().enumerate() {
        if !values.is_array() {
            return Err(TranslateError(not_a_list.into()));
        }
        data.push(json!({"object": "embedding", "index": index, "embedding": values}));
    }
    let out = json!({
        "object": "list",
        "data": data,
        "model": "",
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    Ok(serde_json::to_vec(&out)?)
}

/// The usage of an embeddings answer, when it reports one.
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
    fn requests_carry_every_input() {
        let body = br#"{"model":"e","input":["a","b"],"dimensions":8}"#;
        let v: Value =
            serde_json::from_slice(&studio_request(body, "text-embedding-004").unwrap()).unwrap();
        assert_eq!(v["requests"][1]["content"]["parts"][0]["text"], "b");
        assert_eq!(v["requests"][0]["model"], "models/text-embedding-004");
        assert_eq!(v["requests"][0]["outputDimensionality"], 8);
        let v: Value =
            serde_json::from_slice(&vertex_request(br#"{"input":"x"}"#).unwrap()).unwrap();
        assert_eq!(v, json!({"instances": [{"content": "x"}]}));
        for bad in [
            &br#"{"input":[1,2]}"#[..],
            br#"{"input":[]}"#,
            br#"{"input":"a","dimensions":0}"#,
            br#"{"input":"a","dimensions":-1}"#,
            br#"{}"#,
        ] {
            assert_eq!(vertex_request(bad).unwrap_err().status(), 400);
        }
    }

    #[test]
    fn answers_become_openai_lists_with_usage() {
        let studio = br#"{"embeddings":[{"values":[0.1,0.2]},{"values":[0.3]}]}"#;
        let v: Value = serde_json::from_slice(&to_openai(studio).unwrap()).unwrap();
        assert_eq!(v["data"][1]["embedding"], json!([0.3]));
        assert_eq!(v["data"][1]["index"], 1);
        assert_eq!(v["usage"]["prompt_tokens"], 0);
        let vertex = br#"{"predictions":[{"embeddings":{"values":[1.0],"statistics":{"token_count":3,"truncated":false}}},{"embeddings":{"values":[2.0],"statistics":{"token_count":4.0}}}]}"#;
        let v: Value = serde_json::from_slice(&to_openai(vertex).unwrap()).unwrap();
        assert_eq!(v["usage"]["total_tokens"], 7);
        assert_eq!(
            usage(&serde_json::from_slice(vertex).unwrap())
                .unwrap()
                .prompt_tokens,
            7
        );
        assert!(to_openai(br#"{"candidates":[]}"#).is_err());
        assert!(to_openai(br#"{"embeddings":[{"values":null}]}"#).is_err());
    }
}
