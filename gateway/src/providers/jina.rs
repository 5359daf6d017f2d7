//! Jina AI (`jina_ai/<model>`): LiteLLM's rerank on Jina's `POST
//! /v1/rerank`.
//!
//! The request goes to `/v1/rerank` on the deployment's host (LiteLLM
//! replaces the `api_base` path, default `https://api.jina.ai/v1`, by
//! it), with `api_key` (else `JINA_AI_API_KEY`) as `Authorization:
//! Bearer`. The body is LiteLLM's: `model`, `query`, `documents` as sent
//! (strings or `{"text"}` objects), `top_n`, `return_documents`
//! (`rank_fields`, `max_chunks_per_doc` and `max_tokens_per_doc` are not
//! Jina's and are dropped, as LiteLLM does). The answer (`model`,
//! `usage.total_tokens`, `results` of `index`, `relevance_score` and
//! `document` as a string or an object) becomes LiteLLM's, billed by its
//! tokens (`meta.billed_units.total_tokens`). Errors (`{"detail": …}`)
//! keep Jina's status and message.

use super::rerank::{self, Ask};
use super::{openai_error, with_extra_headers, Header, Provider, UpstreamRequest};
use crate::deployment::Deployment;
use crate::error::GatewayError;
use crate::formats::{Format, TranslateError};
use crate::inbound::{Endpoint, LlmRequest};
use serde_json::{json, Value};
use std::borrow::Cow;

/// The Jina AI translator.
pub struct Jina;

/// `Authorization: Bearer` with `dep`'s key, then its extra headers.
pub fn bearer(dep: &Deployment) -> Vec<Header> {
    let mut own: Vec<Header> = Vec::with_capacity(1);
    if let Some(key) = dep.api_key.as_deref().filter(|k| !k.is_empty()) {
        own.push((Cow::Borrowed("authorization"), format!("Bearer {key}")));
    }
    with_extra_headers(own, dep)
}

/// A refusal of every endpoint but rerank by a rerank-only provider.
pub fn rerank_only(provider: &str, endpoint: Endpoint) -> GatewayError {
    GatewayError::InvalidParam {
        param: "model",
        message: format!(
            "provider {provider} serves /rerank here, not {}",
            endpoint.path_suffix()
        ),
    }
}

impl Provider for Jina {
    fn format(&self) -> Format {
        Format::OpenAi
    }

    fn build_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> Result<UpstreamRequest, GatewayError> {
        if req.endpoint != Endpoint::Rerank {
            return Err(rerank_only("jina_ai", req.endpoint));
        }
        let ask = Ask::parse(&req.body)?;
        let mut body =
            json!({"model": upstream_model, "query": ask.query, "documents": ask.documents});
        if let Some(n) = ask.top_n {
            body["top_n"] = n.into();
        }
        if let Some(r) = ask.return_documents {
            body["return_documents"] = r.into();
        }
        Ok(UpstreamRequest::whole(
            "/v1/rerank".to_string(),
            bearer(dep),
            body.to_string().into_bytes(),
        ))
    }

    fn rerank_to_cohere(
        &self,
        body: &[u8],
        documents: usize,
    ) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(results_answer(body, "results", documents))
    }

    fn error(&self, status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
        openai_error(status, body, retry_after)
    }
}

/// LiteLLM's answer for a Jina- or Voyage-shaped one: `field` holds the
/// results (`index`, `relevance_score`, `document`), `usage.total_tokens`
/// the tokens billed.
pub fn results_answer(
    body: &[u8],
    field: &str,
    documents: usize,
) -> Result<Vec<u8>, TranslateError> {
    let answer = rerank::read(body)?;
    let Some(Value::Array(found)) = answer.get(field) else {
        return Err(TranslateError(format!("rerank answer: no `{field}` list")));
    };
    let results = found
        .iter()
        .map(|r| {
            Ok(rerank::result(
                rerank::index(&r["index"], documents)?,
                rerank::score(&r["relevance_score"])?,
                r.get("document"),
            ))
        })
        .collect::<Result<Vec<_>, TranslateError>>()?;
    let tokens = answer
        .get("usage")
        .and_then(|u| u.get("total_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Ok(rerank::answer(
        answer.get("id").and_then(Value::as_str),
        results,
        json!({ "total_tokens": tokens }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_litellms() {
        let body = br#"{"model":"jina-reranker-v2-base-multilingual","usage":{"total_tokens":15},"results":[{"index":1,"document":{"text":"b"},"relevance_score":0.9},{"index":0,"relevance_score":0.1}]}"#;
        let out: Value =
            serde_json::from_slice(&Jina.rerank_to_cohere(body, 2).unwrap().unwrap()).unwrap();
        assert_eq!(
            out["results"],
            json!([{"index": 1, "relevance_score": 0.9, "document": {"text": "b"}}, {"index": 0, "relevance_score": 0.1}])
        );
        assert_eq!(out["meta"]["billed_units"]["total_tokens"], 15);
        assert!(out["id"].as_str().is_some_and(|id| !id.is_empty()));
        assert!(Jina.rerank_to_cohere(b"{}", 2).unwrap().is_err());
        assert!(Jina
            .rerank_to_cohere(br#"{"results":[{"index":5,"relevance_score":1}]}"#, 2)
            .unwrap()
            .is_err());
    }
}
