//! Voyage AI (`voyage/<model>`): LiteLLM's rerank on Voyage's `POST
//! /v1/rerank`.
//!
//! The request goes to `{api_base}/v1/rerank` (default base
//! `https://api.voyageai.com/v1`; a base ending in `/v1` gets `/rerank`,
//! one ending in `/v1/rerank` is used as it is, as LiteLLM builds it),
//! with `api_key` (else `VOYAGE_API_KEY`, else `VOYAGE_AI_API_KEY`) as
//! `Authorization: Bearer`. The body is Voyage's: `model`, `query`,
//! `documents` (strings only: an object's `text` is sent, where LiteLLM
//! sends the object and Voyage refuses it), `top_n` as `top_k`,
//! `return_documents`. The answer (`data` of `index`, `relevance_score`,
//! `document`; `usage.total_tokens`) becomes LiteLLM's, billed by its
//! tokens. Errors (`{"detail": …}`) keep Voyage's status and message.

use super::jina::{bearer, rerank_only, results_answer};
use super::rerank::Ask;
use super::{openai_error, Provider, UpstreamRequest};
use crate::deployment::Deployment;
use crate::error::GatewayError;
use crate::formats::{Format, TranslateError};
use crate::inbound::{Endpoint, LlmRequest};
use serde_json::json;

/// The Voyage AI translator.
pub struct Voyage;

/// The rerank path below `dep`'s base (LiteLLM's rule, see the module doc).
fn path(dep: &Deployment) -> String {
    let base = dep
        .base
        .as_ref()
        .map_or("", |b| b.path.as_str())
        .trim_end_matches('/');
    if base.ends_with("/v1/rerank") {
        base.to_string()
    } else if base.ends_with("/v1") {
        format!("{base}/rerank")
    } else {
        format!("{base}/v1/rerank")
    }
}

impl Provider for Voyage {
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
            return Err(rerank_only("voyage", req.endpoint));
        }
        let ask = Ask::parse(&req.body)?;
        let texts: Vec<&str> = ask.texts().collect();
        let mut body = json!({"model": upstream_model, "query": ask.query, "documents": texts});
        if let Some(n) = ask.top_n {
            body["top_k"] = n.into();
        }
        if let Some(r) = ask.return_documents {
            body["return_documents"] = r.into();
        }
        Ok(UpstreamRequest::whole(
            path(dep),
            bearer(dep),
            body.to_string().into_bytes(),
        ))
    }

    fn rerank_to_cohere(
        &self,
        body: &[u8],
        documents: usize,
    ) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(results_answer(body, "data", documents))
    }

    fn error(&self, status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
        openai_error(status, body, retry_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use serde_json::Value;

    fn dep(api_base: &str) -> Deployment {
        let text = format!("model_list:\n  - model_name: r\n    litellm_params: {{model: voyage/rerank-2, api_base: '{api_base}', api_key: k}}\n");
        Config::parse(std::path::Path::new("c.yaml"), &text, &|_| None)
            .unwrap()
            .deployments
            .remove(0)
    }

    #[test]
    fn requests_follow_litellms_paths_and_voyages_fields() {
        assert_eq!(path(&dep("https://api.voyageai.com/v1")), "/v1/rerank");
        assert_eq!(path(&dep("http://h:1/p/v1/rerank")), "/p/v1/rerank");
        assert_eq!(path(&dep("http://h:1")), "/v1/rerank");
        let d = dep("http://h:1");
        let req = LlmRequest::parse(
            Endpoint::Rerank,
            r#"{"model":"r","query":"q","documents":["a",{"text":"b"}],"top_n":1,"return_documents":true}"#.into(),
        )
        .unwrap();
        let out = Voyage.build_request(&req, "rerank-2", &d).unwrap();
        let body: Value = serde_json::from_slice(&out.body[0]).unwrap();
        assert_eq!(
            body,
            json!({"model": "rerank-2", "query": "q", "documents": ["a", "b"], "top_k": 1, "return_documents": true})
        );
        assert_eq!(out.headers[0].1, "Bearer k");
        let answer = br#"{"object":"list","data":[{"relevance_score":0.8,"index":1,"document":"b"}],"model":"rerank-2","usage":{"total_tokens":9}}"#;
        let out: Value =
            serde_json::from_slice(&Voyage.rerank_to_cohere(answer, 2).unwrap().unwrap()).unwrap();
        assert_eq!(
            out["results"],
            json!([{"index": 1, "relevance_score": 0.8, "document": {"text": "b"}}])
        );
        assert_eq!(out["meta"]["billed_units"]["total_tokens"], 9);
    }
}
