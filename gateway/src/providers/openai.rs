//! OpenAI and OpenAI-compatible servers: the request passes through with only
//! `model` rewritten; responses and streams are already in the internal
//! form.

use super::{openai_error, with_extra_headers, with_form_type, Provider, UpstreamRequest};
use crate::deployment::Deployment;
use crate::error::GatewayError;
use crate::formats::Format;
use crate::inbound::LlmRequest;
use std::borrow::Cow;

/// The OpenAI wire format, spoken natively.
pub struct OpenAiCompatible;

impl Provider for OpenAiCompatible {
    fn format(&self) -> Format {
        Format::OpenAi
    }

    fn build_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> Result<UpstreamRequest, GatewayError> {
        let base_path = dep.base.as_ref().map_or("", |b| b.path.as_str());
        let mut headers = Vec::with_capacity(1 + dep.extra_headers.len());
        if let Some(key) = dep.api_key.as_deref().filter(|k| !k.is_empty()) {
            headers.push((Cow::Borrowed("authorization"), ["Bearer ", key].concat()));
        }
        Ok(UpstreamRequest {
            path: [base_path, req.endpoint.path_suffix()].concat(),
            headers: with_form_type(with_extra_headers(headers, dep), req),
            body: req.body_with_model(upstream_model),
            include_usage: false,
        })
    }

    fn error(&self, status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
        openai_error(status, body, retry_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::inbound::Endpoint;

    #[test]
    fn targets_base_path_and_sends_the_key() {
        let cfg = Config::parse(
            std::path::Path::new("c.yaml"),
            "model_list:\n  - model_name: g\n    litellm_params: {model: openai/up, api_base: 'http://h:1/v1/', api_key: sk-u, extra_headers: {Authorization: Bearer other, x-team: a}}\n",
            &|_| None,
        )
        .unwrap();
        let req =
            LlmRequest::parse(Endpoint::Embeddings, r#"{"model":"g","input":"x"}"#.into()).unwrap();
        let out = OpenAiCompatible
            .build_request(&req, "up", &cfg.deployments[0])
            .unwrap();
        assert_eq!(out.path, "/v1/embeddings");
        let headers: Vec<(&str, &str)> = out
            .headers
            .iter()
            .map(|(n, v)| (n.as_ref(), v.as_str()))
            .collect();
        assert_eq!(
            headers,
            vec![("Authorization", "Bearer other"), ("x-team", "a")]
        );
        let body: Vec<u8> = out.body.iter().flat_map(|b| b.to_vec()).collect();
        assert_eq!(body, br#"{"model":"up","input":"x"}"#);
    }

    #[test]
    fn ollama_prefixes_reach_its_openai_api() {
        let cfg = Config::parse(
            std::path::Path::new("c.yaml"),
            "model_list:\n  - model_name: a\n    litellm_params: {model: ollama_chat/llama3}\n  - model_name: b\n    litellm_params: {model: ollama/llama3, api_base: 'http://gpu:11434/v1'}\n",
            &|_| None,
        )
        .unwrap();
        let req = LlmRequest::parse(
            Endpoint::ChatCompletions,
            r#"{"model":"a","messages":[]}"#.into(),
        )
        .unwrap();
        for (dep, host) in cfg.deployments.iter().zip(["localhost", "gpu"]) {
            assert_eq!(&*dep.base.as_ref().unwrap().host, host);
            let out = OpenAiCompatible.build_request(&req, "llama3", dep).unwrap();
            assert_eq!(out.path, "/v1/chat/completions");
        }
    }
}
