//! LiteLLM's rerank request (Cohere's own shape) → Cohere's v2 rerank
//! (`POST /v2/rerank`): `query`, `documents` (strings, or objects whose
//! `text` is taken, as v2 takes strings only), `top_n`,
//! `max_tokens_per_doc` (LiteLLM's `max_chunks_per_doc` is v1's and
//! dropped, as are `rank_fields` and `return_documents`, which v2 does
//! not take). The answer (`id`, `results` of `index` and
//! `relevance_score`, `meta.billed_units.search_units`) is LiteLLM's
//! answer as it is.

use crate::error::GatewayError;
use serde_json::{json, Map, Value};

/// Most documents Cohere ranks in one call.
pub const MAX_DOCUMENTS: usize = 1000;

fn invalid(param: &'static str, message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidParam {
        param,
        message: message.into(),
    }
}

fn positive(req: &Map<String, Value>, name: &'static str) -> Result<Option<u64>, GatewayError> {
    match req.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=1_000_000).contains(n))
            .map(Some)
            .ok_or_else(|| invalid(name, "must be a positive integer")),
    }
}

/// The `/v2/rerank` body for the rerank request `body`, asking for `model`.
pub fn request(body: &[u8], model: &str) -> Result<Vec<u8>, GatewayError> {
    let req: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    let query = match req.get("query") {
        Some(Value::String(q)) if !q.is_empty() => q,
        None | Some(Value::Null) => return Err(GatewayError::MissingParam("query")),
        Some(_) => return Err(invalid("query", "must be a non-empty string")),
    };
    let documents = match req.get("documents") {
        Some(Value::Array(docs)) if !docs.is_empty() && docs.len() <= MAX_DOCUMENTS => docs,
        None | Some(Value::Null) => return Err(GatewayError::MissingParam("documents")),
        Some(_) => {
            return Err(invalid(
                "documents",
                format!("must be a list of 1 to {MAX_DOCUMENTS} documents"),
            ))
        }
    };
    let texts = documents
        .iter()
        .map(|d| match d {
            Value::String(s) => Some(s.as_str()),
            Value::Object(o) => o.get("text").and_then(Value::as_str),
            _ => None,
        })
        .collect::<Option<Vec<&str>>>()
        .ok_or_else(|| {
            invalid(
                "documents",
                "each document must be a string or an object with a text",
            )
        })?;
    let mut out = json!({"model": model, "query": query, "documents": texts});
    if let Some(n) = positive(&req, "top_n")? {
        out["top_n"] = n.into();
    }
    if let Some(n) = positive(&req, "max_tokens_per_doc")? {
        out["max_tokens_per_doc"] = n.into();
    }
    Ok(out.to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(body: Value) -> Result<Value, GatewayError> {
        request(body.to_string().as_bytes(), "rerank-v3.5")
            .map(|b| serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn requests_carry_query_documents_and_limits() {
        let out = req(json!({"model": "r", "query": "q", "documents": ["a", {"text": "b", "title": "t"}], "top_n": 1, "return_documents": true, "rank_fields": ["text"], "max_tokens_per_doc": 512})).unwrap();
        assert_eq!(
            out,
            json!({"model": "rerank-v3.5", "query": "q", "documents": ["a", "b"], "top_n": 1, "max_tokens_per_doc": 512})
        );
        let many = vec!["d"; MAX_DOCUMENTS + 1];
        for (bad, param) in [
            (json!({"documents": ["a"]}), "query"),
            (json!({"query": "", "documents": ["a"]}), "query"),
            (json!({"query": "q"}), "documents"),
            (json!({"query": "q", "documents": []}), "documents"),
            (json!({"query": "q", "documents": many}), "documents"),
            (json!({"query": "q", "documents": [1]}), "documents"),
            (
                json!({"query": "q", "documents": ["a"], "top_n": 0}),
                "top_n",
            ),
            (
                json!({"query": "q", "documents": ["a"], "top_n": -1}),
                "top_n",
            ),
        ] {
            let err = req(bad.clone()).unwrap_err();
            assert_eq!((err.status(), err.param()), (400, Some(param)), "{bad}");
        }
    }
}
