//! Azure OpenAI (`azure/<deployment>`) and Azure AI Foundry's
//! OpenAI-compatible inference (`azure_ai/<model>`): OpenAI's wire format
//! behind Azure's URLs and credentials. Responses pass through unchanged,
//! Azure's extras (`prompt_filter_results`, `content_filter_results`, the
//! leading stream chunk with empty `choices`) included.
//!
//! Azure OpenAI: `{api_base}/openai/deployments/{deployment}/{endpoint}?api-version=…`
//! (`{api_base}/openai/responses?api-version=…` for the Responses API)
//! (`api_version` else `AZURE_API_VERSION` else LiteLLM's default), or
//! `{api_base}/openai/v1/{endpoint}` for the `v1`, `latest` and `preview`
//! versions; the key goes in `api-key`, an Azure AD token as a Bearer
//! token. A content-filter refusal (400, code `content_filter`) is the
//! content-policy class, as LiteLLM's `ContentPolicyViolationError`.
//!
//! Azure AI: `{api_base}/chat/completions` (`/models/chat/completions` on
//! `*.services.ai.azure.com`), `api-version` when configured; the key in
//! `api-key` on Azure hosts, else as a Bearer token (LiteLLM's rule).

use super::{openai_error, with_extra_headers, with_form_type, Header, Provider, UpstreamRequest};
use crate::deployment::Deployment;
use crate::error::{ErrorClass, GatewayError};
use crate::formats::Format;
use crate::inbound::{Endpoint, LlmRequest};
use std::borrow::Cow;

/// Which Azure API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    OpenAi,
    Foundry,
}

/// An Azure translator.
pub struct Azure(Flavor);

/// Azure OpenAI.
pub static AZURE: Azure = Azure(Flavor::OpenAi);
/// Azure AI Foundry.
pub static AZURE_AI: Azure = Azure(Flavor::Foundry);

/// LiteLLM's `AZURE_DEFAULT_API_VERSION`.
pub const DEFAULT_API_VERSION: &str = "2025-02-01-preview";

/// Versions served by Azure's unversioned `/openai/v1` API.
pub(super) fn is_v1(version: &str) -> bool {
    matches!(version, "v1" | "latest" | "preview")
}

/// Hosts that take the key in `api-key` for `azure_ai/`.
fn is_azure_host(host: &str) -> bool {
    host.ends_with(".services.ai.azure.com") || host.ends_with(".openai.azure.com")
}

impl Azure {
    fn path(&self, req: &LlmRequest, upstream_model: &str, dep: &Deployment) -> String {
        let base = dep.base.as_ref();
        let base_path = base.map_or("", |b| b.path.as_str());
        let suffix = req.endpoint.path_suffix();
        let version = dep.api_version.as_deref();
        match self.0 {
            Flavor::OpenAi => {
                let version = version.unwrap_or(DEFAULT_API_VERSION);
                if is_v1(version) {
                    format!("{base_path}/openai/v1{suffix}")
                } else if req.endpoint == Endpoint::Responses {
                    // The Responses API is not under a deployment: the
                    // body's `model` names it.
                    format!(
                        "{base_path}/openai/responses?api-version={}",
                        query_value(version)
                    )
                } else {
                    let deployment = query_value(upstream_model);
                    format!(
                        "{base_path}/openai/deployments/{deployment}{suffix}?api-version={}",
                        query_value(version)
                    )
                }
            }
            Flavor::Foundry => {
                let models = base.is_some_and(|b| b.host.ends_with(".services.ai.azure.com"))
                    && !base_path.ends_with("/models");
                let prefix = if models { "/models" } else { "" };
                match version {
                    Some(v) => {
                        format!("{base_path}{prefix}{suffix}?api-version={}", query_value(v))
                    }
                    None => format!("{base_path}{prefix}{suffix}"),
                }
            }
        }
    }

    fn credentials(&self, dep: &Deployment) -> Vec<Header> {
        let key = dep.api_key.as_deref().filter(|k| !k.is_empty());
        let bearer = |token: &str| (Cow::Borrowed("authorization"), format!("Bearer {token}"));
        match (self.0, key) {
            (Flavor::OpenAi, Some(key)) => vec![(Cow::Borrowed("api-key"), key.to_string())],
            (Flavor::Foundry, Some(key)) => {
                if dep.base.as_ref().is_some_and(|b| is_azure_host(&b.host)) {
                    vec![(Cow::Borrowed("api-key"), key.to_string())]
                } else {
                    vec![bearer(key)]
                }
            }
            (_, None) => dep
                .azure_ad_token
                .as_deref()
                .filter(|t| !t.is_empty())
                .map(bearer)
                .into_iter()
                .collect(),
        }
    }
}

/// Bytes escaped in a path segment or query value.
const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'&')
    .add(b'+')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// A path segment or query value, percent-encoded.
pub(super) fn query_value(v: &str) -> percent_encoding::PercentEncode<'_> {
    percent_encoding::utf8_percent_encode(v, COMPONENT)
}

impl Provider for Azure {
    fn format(&self) -> Format {
        Format::OpenAi
    }

    fn build_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> Result<UpstreamRequest, GatewayError> {
        Ok(UpstreamRequest {
            path: self.path(req, upstream_model, dep),
            headers: with_form_type(with_extra_headers(self.credentials(dep), dep), req),
            body: req.body_with_model(upstream_model),
            include_usage: false,
        })
    }

    /// Azure OpenAI takes `stream_options` from API version 2024-07-01 on
    /// (and on its `v1` API); older versions refuse the field.
    fn accepts_stream_options(&self, dep: &Deployment) -> bool {
        match (self.0, dep.api_version.as_deref()) {
            (Flavor::OpenAi, Some(v)) => is_v1(v) || v.get(..10).is_some_and(|d| d >= "2024-07-01"),
            _ => true,
        }
    }

    fn error(&self, status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
        let mut err = openai_error(status, body, retry_after);
        if let GatewayError::Upstream { message, class, .. } = &mut err {
            let lower = message.to_ascii_lowercase();
            let filtered = lower.contains("responsibleaipolicyviolation")
                || lower.contains("content management policy")
                || lower.contains("content_filter_policy");
            if *class == ErrorClass::ContentPolicy || (status == 400 && filtered) {
                *class = ErrorClass::ContentPolicy;
                *message = format!("litellm.ContentPolicyViolationError: AzureException - content policy violation: {message}");
            }
        }
        err
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::inbound::Endpoint;

    fn dep(params: &str) -> Deployment {
        let text = format!("model_list:\n  - model_name: g\n    litellm_params: {{{params}}}\n");
        Config::parse(std::path::Path::new("c.yaml"), &text, &|_| None)
            .unwrap()
            .deployments
            .remove(0)
    }

    fn req(endpoint: Endpoint) -> LlmRequest {
        LlmRequest::parse(
            endpoint,
            r#"{"model":"g","messages":[],"input":"x","prompt":"p"}"#.into(),
        )
        .unwrap()
    }

    fn headers(out: &UpstreamRequest) -> Vec<(&str, &str)> {
        out.headers
            .iter()
            .map(|(n, v)| (n.as_ref(), v.as_str()))
            .collect()
    }

    #[test]
    fn azure_openai_urls_and_credentials() {
        let d = dep("model: azure/my-gpt, api_base: 'https://r.openai.azure.com/', api_key: k1, api_version: '2024-10-21'");
        let out = AZURE
            .build_request(&req(Endpoint::ChatCompletions), "my-gpt", &d)
            .unwrap();
        assert_eq!(
            out.path,
            "/openai/deployments/my-gpt/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(headers(&out), [("api-key", "k1")]);
        let out = AZURE
            .build_request(&req(Endpoint::Embeddings), "emb", &d)
            .unwrap();
        assert!(out.path.starts_with("/openai/deployments/emb/embeddings?"));
        let d = dep("model: azure/x, api_base: 'https://r.openai.azure.com', azure_ad_token: tok");
        let out = AZURE
            .build_request(&req(Endpoint::Completions), "x", &d)
            .unwrap();
        assert_eq!(
            out.path,
            format!(
                "/openai/deployments/x/completions?api-version={}",
                query_value(DEFAULT_API_VERSION)
            )
        );
        assert_eq!(headers(&out), [("authorization", "Bearer tok")]);
        let d = dep(
            "model: azure/x, api_base: 'https://r.openai.azure.com', api_version: v1, api_key: k",
        );
        let out = AZURE
            .build_request(&req(Endpoint::ChatCompletions), "x", &d)
            .unwrap();
        assert_eq!(out.path, "/openai/v1/chat/completions");
        let out = AZURE
            .build_request(&req(Endpoint::Responses), "x", &d)
            .unwrap();
        assert_eq!(out.path, "/openai/v1/responses");
        // The Responses API is not under a deployment.
        let d = dep("model: azure/my-gpt, api_base: 'https://r.openai.azure.com', api_key: k, api_version: 2025-03-01-preview");
        let out = AZURE
            .build_request(&req(Endpoint::Responses), "my-gpt", &d)
            .unwrap();
        assert_eq!(out.path, "/openai/responses?api-version=2025-03-01-preview");
        let body: Vec<u8> = out.body.iter().flat_map(|b| b.to_vec()).collect();
        assert!(String::from_utf8(body)
            .unwrap()
            .contains(r#""model":"my-gpt""#));
    }

    #[test]
    fn azure_ai_urls_and_credentials() {
        let d =
            dep("model: azure_ai/mistral, api_base: 'https://n.services.ai.azure.com', api_key: k");
        let out = AZURE_AI
            .build_request(&req(Endpoint::ChatCompletions), "mistral", &d)
            .unwrap();
        assert_eq!(out.path, "/models/chat/completions");
        assert_eq!(headers(&out), [("api-key", "k")]);
        let d = dep("model: azure_ai/m, api_base: 'https://m.eastus.models.ai.azure.com/v1', api_key: k, api_version: '2024-05-01-preview'");
        let out = AZURE_AI
            .build_request(&req(Endpoint::ChatCompletions), "m", &d)
            .unwrap();
        assert_eq!(
            out.path,
            "/v1/chat/completions?api-version=2024-05-01-preview"
        );
        assert_eq!(headers(&out), [("authorization", "Bearer k")]);
    }

    #[test]
    fn old_api_versions_get_no_stream_options() {
        let old = dep(
            "model: azure/x, api_base: 'https://r.openai.azure.com', api_version: '2024-02-01'",
        );
        assert!(!AZURE.accepts_stream_options(&old));
        for v in ["2024-10-21", "2025-02-01-preview", "v1"] {
            let d = dep(&format!(
                "model: azure/x, api_base: 'https://r.openai.azure.com', api_version: '{v}'"
            ));
            assert!(AZURE.accepts_stream_options(&d), "{v}");
        }
        let default = dep("model: azure/x, api_base: 'https://r.openai.azure.com'");
        assert!(AZURE.accepts_stream_options(&default));
    }

    #[test]
    fn content_filter_refusals_are_the_content_policy_class() {
        let body = br#"{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400}}"#;
        let e = AZURE.error(400, body, None);
        assert_eq!((e.status(), e.class()), (400, ErrorClass::ContentPolicy));
        assert!(e.to_string().contains("content policy violation"), "{e}");
        let e = AZURE.error(
            429,
            br#"{"error":{"message":"slow","code":"429"}}"#,
            Some("3".into()),
        );
        assert_eq!(
            (e.class(), e.retry_after()),
            (ErrorClass::RateLimit, Some("3"))
        );
    }
}
