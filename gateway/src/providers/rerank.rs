//! LiteLLM's rerank request (Cohere's shape: `query`, `documents` as
//! strings or `{"text"}` objects, `top_n`, `return_documents`) read once
//! for the providers that translate it (Jina, Voyage, Bedrock, Vertex AI),
//! and the answer they give back in LiteLLM's shape: `id`, `results` of
//! `index`, `relevance_score` (and `document` when the provider returned
//! it), `meta.billed_units` (search units or tokens, as the provider
//! bills).

use crate::error::GatewayError;
use crate::formats::TranslateError;
use serde_json::{json, Map, Value};

/// Most documents one rerank call may carry (Cohere's, Jina's and
/// Bedrock's cap; Voyage and Vertex AI refuse fewer themselves).
pub const MAX_DOCUMENTS: usize = 1000;

/// Documents one search unit covers (Bedrock's and Vertex AI's queries,
/// as Cohere's search units: up to 100 documents each).
const DOCUMENTS_PER_UNIT: usize = 100;

/// A rerank request, read and checked.
#[derive(Debug)]
pub struct Ask {
    /// The query.
    pub query: String,
    /// The documents as sent: strings, or objects with a `text`.
    pub documents: Vec<Value>,
    /// How many results to return.
    pub top_n: Option<u64>,
    /// Whether the documents are returned with their scores.
    pub return_documents: Option<bool>,
}

fn invalid(param: &'static str, message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidParam {
        param,
        message: message.into(),
    }
}

impl Ask {
    /// Reads LiteLLM's rerank request `body`.
    pub fn parse(body: &[u8]) -> Result<Ask, GatewayError> {
        let mut req: Map<String, Value> =
            serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
        let query = match req.remove("query") {
            Some(Value::String(q)) if !q.is_empty() => q,
            None | Some(Value::Null) => return Err(GatewayError::MissingParam("query")),
            Some(_) => return Err(invalid("query", "must be a non-empty string")),
        };
        let documents = match req.remove("documents") {
            Some(Value::Array(docs)) if !docs.is_empty() && docs.len() <= MAX_DOCUMENTS => docs,
            None | Some(Value::Null) => return Err(GatewayError::MissingParam("documents")),
            Some(_) => {
                return Err(invalid(
                    "documents",
                    format!("must be a list of 1 to {MAX_DOCUMENTS} documents"),
                ))
            }
        };
        if documents.iter().any(|d| text(d).is_none()) {
            return Err(invalid(
                "documents",
                "each document must be a string or an object with a text",
            ));
        }
        let top_n = match req.get("top_n") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|n| (1..=MAX_DOCUMENTS as u64).contains(n))
                    .ok_or_else(|| {
                        invalid(
                            "top_n",
                            format!("must be an integer from 1 to {MAX_DOCUMENTS}"),
                        )
                    })?,
            ),
        };
        let return_documents = match req.get("return_documents") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err(invalid("return_documents", "must be a boolean")),
        };
        Ok(Ask {
            query,
            documents,
            top_n,
            return_documents,
        })
    }

    /// The documents' texts, in order.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.documents.iter().filter_map(text)
    }
}

/// A document's text: the string itself, or an object's `text`.
pub fn text(doc: &Value) -> Option<&str> {
    match doc {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("text").and_then(Value::as_str),
        _ => None,
    }
}

/// Search units a call ranking `documents` documents is billed: one per
/// 100 documents, as Bedrock and Vertex AI count their queries.
pub fn search_units(documents: usize) -> u64 {
    documents.div_ceil(DOCUMENTS_PER_UNIT) as u64
}

/// The number of documents in LiteLLM's rerank request `body` (0 when it
/// cannot be read: the provider's translation refused it first).
pub fn document_count(body: &[u8]) -> usize {
    #[derive(serde::Deserialize)]
    struct Docs {
        documents: Vec<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Docs>(body).map_or(0, |d| d.documents.len())
}

/// One result of the answer: the document's index and score, with the
/// document as `{"text"}` when the provider returned it.
pub fn result(index: u64, score: f64, document: Option<&Value>) -> Value {
    let mut out = json!({"index": index, "relevance_score": score});
    match document {
        Some(Value::String(s)) => out["document"] = json!({ "text": s }),
        Some(d @ Value::Object(_)) => out["document"] = d.clone(),
        _ => {}
    }
    out
}

/// LiteLLM's rerank answer: `id` (the provider's, else a fresh one),
/// `results`, and `meta.billed_units`.
pub fn answer(id: Option<&str>, results: Vec<Value>, billed_units: Value) -> Vec<u8> {
    let id = id.map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_string);
    let mut meta = json!({ "billed_units": billed_units });
    // LiteLLM's `meta.tokens` for answers billed by the token.
    if let Some(tokens) = meta["billed_units"]["total_tokens"].as_u64() {
        meta["tokens"] = json!({"input_tokens": tokens, "output_tokens": 0});
    }
    json!({"id": id, "results": results, "meta": meta})
        .to_string()
        .into_bytes()
}

/// A provider's whole rerank answer, or why it cannot be read.
pub fn read(body: &[u8]) -> Result<Map<String, Value>, TranslateError> {
    serde_json::from_slice(body).map_err(|e| TranslateError(format!("rerank answer: {e}")))
}

/// An index a provider answered, checked against the request's documents.
pub fn index(value: &Value, documents: usize) -> Result<u64, TranslateError> {
    let index = match value {
        Value::String(s) => s.parse::<u64>().ok(),
        v => v.as_u64(),
    };
    index
        .filter(|i| usize::try_from(*i).is_ok_and(|i| documents == 0 || i < documents))
        .ok_or_else(|| TranslateError(format!("rerank answer: bad index {value}")))
}

/// A score a provider answered (a finite number).
pub fn score(value: &Value) -> Result<f64, TranslateError> {
    value
        .as_f64()
        .filter(|s| s.is_finite())
        .ok_or_else(|| TranslateError(format!("rerank answer: bad score {value}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_and_checked() {
        let ask = Ask::parse(
            br#"{"model":"m","query":"q","documents":["a",{"text":"b","title":"t"}],"top_n":1,"return_documents":true}"#,
        )
        .unwrap();
        assert_eq!(ask.texts().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!((ask.top_n, ask.return_documents), (Some(1), Some(true)));
        for (bad, param) in [
            (json!({"documents": ["a"]}), "query"),
            (json!({"query": 1, "documents": ["a"]}), "query"),
            (json!({"query": "q"}), "documents"),
            (json!({"query": "q", "documents": []}), "documents"),
            (
                json!({"query": "q", "documents": [{"image": "x"}]}),
                "documents",
            ),
            (
                json!({"query": "q", "documents": ["a"], "top_n": 0}),
                "top_n",
            ),
            (
                json!({"query": "q", "documents": ["a"], "return_documents": "yes"}),
                "return_documents",
            ),
        ] {
            let err = Ask::parse(bad.to_string().as_bytes()).unwrap_err();
            assert_eq!((err.status(), err.param()), (400, Some(param)), "{bad}");
        }
    }

    #[test]
    fn answers_have_litellms_shape() {
        let body = answer(
            Some("x"),
            vec![result(1, 0.5, Some(&json!("doc")))],
            json!({"total_tokens": 7}),
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"id": "x", "results": [{"index": 1, "relevance_score": 0.5, "document": {"text": "doc"}}],
                   "meta": {"billed_units": {"total_tokens": 7}, "tokens": {"input_tokens": 7, "output_tokens": 0}}})
        );
        assert_eq!(
            (search_units(1), search_units(100), search_units(101)),
            (1, 1, 2)
        );
        assert_eq!(document_count(br#"{"documents":["a",{"text":"b"}]}"#), 2);
        assert!(index(&json!("3"), 2).is_err());
        assert_eq!(index(&json!("1"), 2).unwrap(), 1);
        assert!(score(&json!("x")).is_err());
    }
}
