//! Embeddings on Cohere's v2 embed API (`POST /v2/embed`), from OpenAI's
//! embeddings request as LiteLLM maps it: `input` (a string or up to 96
//! strings) as `texts`, the request's `input_type` (else LiteLLM's
//! `search_document`; Cohere requires one for its v3 and later models),
//! `encoding_format` as `embedding_types` (`float` unless `base64` is
//! asked for), `dimensions` as `output_dimension`, `truncate` passed on.
//! The answer's vectors of the asked type become OpenAI's list, its usage
//! `meta.billed_units.input_tokens`.

use super::usage;
use crate::error::GatewayError;
use crate::formats::TranslateError;
use serde_json::{json, Map, Value};

/// Most texts in one Cohere embed call.
const MAX_TEXTS: usize = 96;
/// Cohere's input types.
const INPUT_TYPES: &[&str] = &[
    "search_document",
    "search_query",
    "classification",
    "clustering",
];

fn invalid(param: &'static str, message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidParam {
        param,
        message: message.into(),
    }
}

/// The `/v2/embed` body for the OpenAI embeddings request `body`, asking
/// for `model`.
pub fn request(body: &[u8], model: &str) -> Result<Vec<u8>, GatewayError> {
    let (texts, dimensions) = crate::providers::gemini::embeddings::inputs(body, "cohere")?;
    if texts.len() > MAX_TEXTS {
        return Err(invalid(
            "input",
            format!("provider cohere embeds at most {MAX_TEXTS} texts a request"),
        ));
    }
    let req: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    let input_type = match req.get("input_type") {
        None | Some(Value::Null) => "search_document",
        Some(Value::String(t)) if INPUT_TYPES.contains(&t.as_str()) => t.as_str(),
        Some(_) => {
            return Err(invalid(
                "input_type",
                format!("must be one of {}", INPUT_TYPES.join(", ")),
            ))
        }
    };
    let embedding_type = match req.get("encoding_format") {
        None | Some(Value::Null) => "float",
        Some(Value::String(f)) if f == "float" || f == "base64" => f.as_str(),
        Some(_) => return Err(invalid("encoding_format", "must be float or base64")),
    };
    let mut out = json!({
        "model": model,
        "texts": texts,
        "input_type": input_type,
        "embedding_types": [embedding_type],
    });
    if let Some(d) = dimensions {
        out["output_dimension"] = d.into();
    }
    match req.get("truncate") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) if matches!(t.as_str(), "NONE" | "START" | "END") => {
            out["truncate"] = json!(t);
        }
        Some(_) => return Err(invalid("truncate", "must be NONE, START or END")),
    }
    Ok(out.to_string().into_bytes())
}

/// A `/v2/embed` answer as OpenAI's embeddings list (the vectors of the
/// one type asked for: numbers, or base64 strings).
pub fn to_openai(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let resp: Value = serde_json::from_slice(body)?;
    let vectors = match &resp["embeddings"] {
        // `embeddings_by_type`: one list per type asked for.
        Value::Object(by_type) => by_type
            .get("float")
            .or_else(|| by_type.get("base64"))
            .or_else(|| by_type.values().next())
            .and_then(Value::as_array),
        // v1's `embeddings_floats`.
        Value::Array(list) => Some(list),
        _ => None,
    }
    .ok_or(TranslateError(
        "the Cohere embed answer has no embeddings".into(),
    ))?;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(index, v)| json!({"object": "embedding", "index": index, "embedding": v}))
        .collect();
    let tokens = usage::of_meta(&resp).map_or(0, |u| u.prompt_tokens);
    let out = json!({
        "object": "list",
        "data": data,
        "model": "",
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    Ok(serde_json::to_vec(&out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(body: Value) -> Result<Value, GatewayError> {
        request(body.to_string().as_bytes(), "embed-english-v3.0")
            .map(|b| serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn requests_carry_texts_types_and_dimensions() {
        let out = req(json!({"model": "g", "input": ["a", "b"], "dimensions": 256, "input_type": "search_query"})).unwrap();
        assert_eq!(
            out,
            json!({"model": "embed-english-v3.0", "texts": ["a", "b"], "input_type": "search_query", "embedding_types": ["float"], "output_dimension": 256})
        );
        let out = req(json!({"input": "one", "encoding_format": "base64"})).unwrap();
        assert_eq!(
            (&out["texts"], &out["input_type"], &out["embedding_types"]),
            (
                &json!(["one"]),
                &json!("search_document"),
                &json!(["base64"])
            )
        );
        let many: Vec<String> = (0..97).map(|i| i.to_string()).collect();
        for bad in [
            json!({"input": many}),
            json!({"input": "x", "input_type": "bogus"}),
            json!({"input": "x", "encoding_format": "int8"}),
            json!({"input": "x", "truncate": 3}),
            json!({"input": [1, 2]}),
            json!({}),
        ] {
            assert_eq!(req(bad.clone()).unwrap_err().status(), 400, "{bad}");
        }
    }

    #[test]
    fn answers_become_openai_lists_with_usage() {
        let body = br#"{"id":"e1","embeddings":{"float":[[0.5,1.0],[0.25,0.0]]},"texts":["a","b"],"meta":{"api_version":{"version":"2"},"billed_units":{"input_tokens":6}},"response_type":"embeddings_by_type"}"#;
        let out: Value = serde_json::from_slice(&to_openai(body).unwrap()).unwrap();
        assert_eq!(out["data"][1]["embedding"], json!([0.25, 0.0]));
        assert_eq!(out["data"][1]["index"], 1);
        assert_eq!(out["usage"]["prompt_tokens"], 6);
        let b64 =
            br#"{"embeddings":{"base64":["AAAA"]},"meta":{"billed_units":{"input_tokens":1}}}"#;
        let out: Value = serde_json::from_slice(&to_openai(b64).unwrap()).unwrap();
        assert_eq!(out["data"][0]["embedding"], "AAAA");
        assert!(to_openai(b"{}").is_err());
    }
}
