//! OpenAI and OpenAI-compatible servers: the request passes through with only
//! `model` rewritten; responses and streams are already in the client's format.

use super::{Provider, UpstreamRequest};
use crate::config::Deployment;
use crate::inbound::LlmRequest;

/// The OpenAI wire format, spoken natively.
pub struct OpenAiCompatible;

impl Provider for OpenAiCompatible {
    fn build_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> UpstreamRequest {
        let base_path = dep.base.as_ref().map_or("", |b| b.path.as_str());
        let mut headers = Vec::with_capacity(1);
        if let Some(key) = dep.api_key.as_deref().filter(|k| !k.is_empty()) {
            headers.push(("authorization", format!("Bearer {key}")));
        }
        UpstreamRequest {
            path: format!("{base_path}{}", req.endpoint.path_suffix()),
            headers,
            body: req.body_with_model(upstream_model),
        }
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
            "model_list:\n  - model_name: g\n    litellm_params: {model: openai/up, api_base: 'http://h:1/v1/', api_key: sk-u}\n",
            &|_| None,
        )
        .unwrap();
        let req =
            LlmRequest::parse(Endpoint::Embeddings, r#"{"model":"g","input":"x"}"#.into()).unwrap();
        let out = OpenAiCompatible.build_request(&req, "up", &cfg.deployments[0]);
        assert_eq!(out.path, "/v1/embeddings");
        assert_eq!(
            out.headers,
            vec![("authorization", "Bearer sk-u".to_string())]
        );
        let body: Vec<u8> = out.body.iter().flat_map(|b| b.to_vec()).collect();
        assert_eq!(body, br#"{"model":"up","input":"x"}"#);
    }
}
