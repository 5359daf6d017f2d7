//! AWS Bedrock's Converse API (`bedrock/<model-id>`,
//! `bedrock/converse/<model-id>`).
//!
//! Requests go to `{endpoint}/model/{model-id}/converse` (or
//! `converse-stream` when streamed), signed with SigV4 for service
//! `bedrock` in the deployment's region. The endpoint is `api_base`, else
//! `aws_bedrock_runtime_endpoint` (or `AWS_BEDROCK_RUNTIME_ENDPOINT`),
//! else `https://bedrock-runtime.{region}.amazonaws.com`. Credentials are
//! LiteLLM's `aws_access_key_id`, `aws_secret_access_key`,
//! `aws_session_token` (else `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`); the region `aws_region_name` (else
//! `AWS_REGION_NAME`, `AWS_REGION`, `AWS_DEFAULT_REGION`, else
//! `us-west-2`). Role credentials (IMDS, web identity) are not fetched:
//! a deployment without keys answers 401.
//!
//! Chat completions requests (and Messages requests, through the internal
//! form) are translated (`request`); answers come back as JSON
//! (`response`) or as a binary event stream (`stream`, framing in
//! `eventstream`). Embeddings (Titan, Cohere) go through InvokeModel
//! (`embeddings`). Errors: `ThrottlingException` (429) is a rate limit, a
//! `ValidationException` about input length the context-window class,
//! 5xx and `ModelStreamErrorException` (424) internal errors. LiteLLM's
//! rerank goes to the agent runtime's Rerank API (`rerank`); OpenAI's
//! image generation to Titan and Stability image models through
//! InvokeModel (`images`).

pub mod embeddings;
pub mod images;
mod request;
pub mod rerank;
mod response;
mod stream;

pub use request::from_chat as request_from_chat;
pub use response::{to_chat as response_to_chat, usage_from_body};
pub use stream::ConverseToChat;

use super::sigv4::{self, SigningInput};
use super::{with_extra_headers, Header, Provider, UpstreamRequest};
use crate::deployment::{AwsSettings, Credentials, Deployment};
use crate::error::{ErrorClass, GatewayError};
use crate::formats::{Format, StreamTranslator, TranslateError};
use crate::inbound::{Endpoint, LlmRequest};
use std::borrow::Cow;

/// The region when nothing names one (LiteLLM's default).
pub const DEFAULT_REGION: &str = "us-west-2";

/// The `litellm_params` AWS keys of a deployment.
#[derive(Debug, Default)]
pub struct AwsParams<'a> {
    /// `aws_access_key_id`.
    pub access_key_id: Option<&'a str>,
    /// `aws_secret_access_key`.
    pub secret_access_key: Option<&'a str>,
    /// `aws_session_token`.
    pub session_token: Option<&'a str>,
    /// `aws_region_name`.
    pub region_name: Option<&'a str>,
    /// `aws_bedrock_runtime_endpoint`.
    pub runtime_endpoint: Option<&'a str>,
}

/// The settings and the default endpoint for `params`, reading the `AWS_*`
/// environment through `lookup` for what they leave out.
pub fn resolve(
    params: &AwsParams<'_>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(AwsSettings, String), String> {
    let pick = |given: Option<&str>, vars: &[&str]| -> Option<String> {
        given
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .or_else(|| {
                vars.iter()
                    .find_map(|v| lookup(v).filter(|s| !s.is_empty()))
            })
    };
    let region = pick(
        params.region_name,
        &["AWS_REGION_NAME", "AWS_REGION", "AWS_DEFAULT_REGION"],
    )
    .unwrap_or_else(|| DEFAULT_REGION.to_string());
    let valid_region = !region.is_empty()
        && region.len() <= 64
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid_region {
        return Err(format!("aws_region_name \"{region}\" is not an AWS region"));
    }
    let key_id = pick(params.access_key_id, &["AWS_ACCESS_KEY_ID"]);
    let secret = pick(params.secret_access_key, &["AWS_SECRET_ACCESS_KEY"]);
    let credentials = match (key_id, secret) {
        (Some(access_key_id), Some(secret_access_key)) => Some(Credentials {
            access_key_id,
            secret_access_key,
            session_token: pick(params.session_token, &["AWS_SESSION_TOKEN"]),
        }),
        (None, None) => None,
        _ => {
            return Err("aws_access_key_id and aws_secret_access_key must be given together".into())
        }
    };
    let endpoint = pick(params.runtime_endpoint, &["AWS_BEDROCK_RUNTIME_ENDPOINT"])
        .unwrap_or_else(|| format!("https://bedrock-runtime.{region}.amazonaws.com"));
    Ok((
        AwsSettings {
            credentials,
            region,
        },
        endpoint,
    ))
}

/// The Converse translator.
pub struct Bedrock;

/// The Converse model id of an upstream model name (`converse/` is
/// LiteLLM's route marker, not part of the id).
fn model_id(upstream_model: &str) -> &str {
    upstream_model
        .strip_prefix("converse/")
        .unwrap_or(upstream_model)
}

impl Provider for Bedrock {
    fn format(&self) -> Format {
        Format::Bedrock
    }

    fn build_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> Result<UpstreamRequest, GatewayError> {
        let base_path = dep.base.as_ref().map_or("", |b| b.path.as_str());
        if req.endpoint == Endpoint::Rerank {
            let region = dep
                .aws
                .as_ref()
                .map_or(DEFAULT_REGION, |a| a.region.as_str());
            let body = rerank::request(&req.body, &rerank::model_arn(upstream_model, region))?;
            let path = format!("{}/rerank", base_path.trim_end_matches('/'));
            let headers = sign(dep, &path, &body, sigv4::amz_date(unix_secs()))?;
            return Ok(UpstreamRequest {
                path,
                headers: with_extra_headers(headers, dep),
                body: [body.into(), Default::default(), Default::default()],
                include_usage: false,
            });
        }
        let (body, include_usage, method) = match (req.endpoint, req.stream) {
            (Endpoint::ChatCompletions, stream) => {
                let (body, include_usage) = request::from_chat(&req.body)?;
                let method = if stream { "converse-stream" } else { "converse" };
                (body, include_usage, method)
            }
            (Endpoint::Embeddings, _) => (
                embeddings::request(&req.body, model_id(upstream_model))?,
                false,
                "invoke",
            ),
            (Endpoint::ImageGenerations, _) => (
                images::request(&req.body, model_id(upstream_model))?,
                false,
                "invoke",
            ),
            _ => {
                return Err(GatewayError::InvalidParam {
                    param: "model",
                    message: format!(
                        "provider bedrock serves /chat/completions, /embeddings, /v1/messages, (rerank models) /rerank and (Titan and Stability image models) /images/generations, not {}",
                        req.endpoint.path_suffix()
                    ),
                })
            }
        };
        let path = format!(
            "{base_path}/model/{}/{method}",
            sigv4::uri_encode(model_id(upstream_model))
        );
        let headers = sign(dep, &path, &body, sigv4::amz_date(unix_secs()))?;
        Ok(UpstreamRequest {
            path,
            headers: with_extra_headers(headers, dep),
            body: [body.into(), Default::default(), Default::default()],
            include_usage,
        })
    }

    fn response_to_internal(&self, body: &[u8]) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(response::to_chat(body))
    }

    fn embeddings_to_internal(&self, body: &[u8]) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(embeddings::to_openai(body))
    }

    fn rerank_to_cohere(
        &self,
        body: &[u8],
        documents: usize,
    ) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(rerank::to_cohere(body, documents))
    }

    fn images_to_openai(&self, body: &[u8]) -> Option<Result<Vec<u8>, GatewayError>> {
        Some(images::to_openai(body, unix_secs()))
    }

    fn stream_to_internal(&self, include_usage: bool) -> Option<Box<dyn StreamTranslator>> {
        Some(Box::new(ConverseToChat::new(include_usage)))
    }

    /// Converse takes image bytes only (or S3 locations): every http(s)
    /// image is inlined, as LiteLLM does.
    fn inlines_image_url(&self, _url: &str) -> bool {
        true
    }

    fn accepts_stream_options(&self, _dep: &Deployment) -> bool {
        false
    }

    fn error(&self, status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
        let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let message = json
            .as_ref()
            .and_then(|v| v["message"].as_str().or(v["Message"].as_str()))
            .map(str::to_string)
            .unwrap_or_else(|| {
                let text: String = String::from_utf8_lossy(body).chars().take(2000).collect();
                if text.trim().is_empty() {
                    format!("upstream returned status {status}")
                } else {
                    text
                }
            });
        let error_type = json
            .as_ref()
            .and_then(|v| v["__type"].as_str())
            .map(|t| t.rsplit('#').next().unwrap_or(t).to_string())
            .or_else(|| exception_for(status).map(str::to_string));
        let lower = message.to_ascii_lowercase();
        let class = if status == 400
            && (lower.contains("too long")
                || lower.contains("too many input tokens")
                || lower.contains("context length")
                || lower.contains("context window")
                || lower.contains("maximum context"))
        {
            ErrorClass::ContextWindow
        } else if status == 424 {
            ErrorClass::InternalServer
        } else {
            ErrorClass::from_status(status)
        };
        GatewayError::Upstream {
            status,
            message,
            provider_code: error_type.clone(),
            upstream_param: None,
            error_type,
            retry_after,
            class,
        }
    }
}

/// Bedrock's exception name for an error status.
fn exception_for(status: u16) -> Option<&'static str> {
    Some(match status {
        400 => "ValidationException",
        403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        500 => "InternalServerException",
        503 => "ServiceUnavailableException",
        _ => return None,
    })
}

fn unix_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The SigV4 headers for a POST of `body` to `path` on `dep`'s endpoint at
/// `amz_date`.
fn sign(
    dep: &Deployment,
    path: &str,
    body: &[u8],
    amz_date: String,
) -> Result<Vec<Header>, GatewayError> {
    let aws = dep.aws.as_ref();
    let Some(creds) = aws.and_then(|a| a.credentials.as_ref()) else {
        return Err(GatewayError::Upstream {
            status: 401,
            message: "no AWS credentials for this bedrock deployment: set aws_access_key_id and aws_secret_access_key (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); role credentials are not supported yet".into(),
            error_type: Some("authentication_error".into()),
            provider_code: None,
            upstream_param: None,
            retry_after: None,
            class: ErrorClass::Authentication,
        });
    };
    let region = aws.map_or(DEFAULT_REGION, |a| a.region.as_str());
    let host = dep.base.as_ref().map_or_else(String::new, host_header);
    let signed = sigv4::sign(
        creds,
        &SigningInput {
            method: "POST",
            path,
            query: "",
            headers: &[("host", &host), ("content-type", "application/json")],
            payload: &[body],
            amz_date: &amz_date,
            region,
            service: "bedrock",
            double_encode: true,
        },
    );
    Ok(signed
        .into_iter()
        .map(|(n, v)| (Cow::Borrowed(n), v))
        .collect())
}

/// The `host` header the gateway sends for `base` (the port when not the
/// scheme's).
pub fn host_header(base: &crate::upstream::UpstreamBase) -> String {
    let default_port = if base.tls { 443 } else { 80 };
    if base.port == default_port {
        base.host.to_string()
    } else {
        format!("{}:{}", base.host, base.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn dep(params: &str, env: &[(&str, &str)]) -> Result<Deployment, String> {
        let text = format!("model_list:\n  - model_name: c\n    litellm_params: {{{params}}}\n");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        Config::parse(std::path::Path::new("c.yaml"), &text, &lookup)
            .map(|mut c| c.deployments.remove(0))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn config_keys_env_and_endpoints() {
        let d = dep(
            "model: bedrock/anthropic.claude-3-haiku-20240307-v1:0, aws_access_key_id: AKID, aws_secret_access_key: os.environ/SECRET, aws_region_name: eu-west-1",
            &[("SECRET", "s3cr3t")],
        )
        .unwrap();
        let aws = d.aws.as_ref().unwrap();
        assert_eq!(aws.region, "eu-west-1");
        assert_eq!(
            aws.credentials.as_ref().unwrap().secret_access_key,
            "s3cr3t"
        );
        assert_eq!(
            d.base.as_ref().unwrap().url,
            "https://bedrock-runtime.eu-west-1.amazonaws.com"
        );
        let d = dep(
            "model: bedrock/converse/m, aws_bedrock_runtime_endpoint: 'http://127.0.0.1:9/br'",
            &[
                ("AWS_ACCESS_KEY_ID", "A"),
                ("AWS_SECRET_ACCESS_KEY", "B"),
                ("AWS_REGION", "ap-south-1"),
                ("AWS_SESSION_TOKEN", "T"),
            ],
        )
        .unwrap();
        let aws = d.aws.as_ref().unwrap();
        assert_eq!(aws.region, "ap-south-1");
        assert_eq!(
            aws.credentials.as_ref().unwrap().session_token.as_deref(),
            Some("T")
        );
        assert_eq!(d.base.as_ref().unwrap().path, "/br");
        let d = dep("model: bedrock/m, api_base: 'http://h:1'", &[]).unwrap();
        assert!(d.aws.as_ref().unwrap().credentials.is_none());
        assert_eq!(d.aws.as_ref().unwrap().region, DEFAULT_REGION);
        assert!(dep("model: bedrock/m, aws_access_key_id: A", &[]).is_err());
        assert!(dep("model: bedrock/m, aws_region_name: 'x/../y'", &[]).is_err());
    }

    #[test]
    fn requests_are_signed_for_the_model_path() {
        let d = dep(
            "model: bedrock/converse/us.anthropic.claude-3-5-sonnet-20241022-v2:0, api_base: 'http://127.0.0.1:8080', aws_access_key_id: AKID, aws_secret_access_key: SECRET, aws_region_name: us-east-1",
            &[],
        )
        .unwrap();
        let req = LlmRequest::parse(
            Endpoint::ChatCompletions,
            r#"{"model":"c","messages":[{"role":"user","content":"hi"}],"stream":true}"#.into(),
        )
        .unwrap();
        let out = Bedrock.build_request(&req, &d.upstream_model, &d).unwrap();
        assert_eq!(
            out.path,
            "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse-stream"
        );
        let auth = &out
            .headers
            .iter()
            .find(|(n, _)| n == "authorization")
            .unwrap()
            .1;
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKID/"),
            "{auth}"
        );
        assert!(auth.contains("/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature="));
        let unsigned = dep("model: bedrock/m", &[]).unwrap();
        let err = Bedrock.build_request(&req, "m", &unsigned).unwrap_err();
        assert_eq!(
            (err.status(), err.class()),
            (401, ErrorClass::Authentication)
        );
        let embed =
            LlmRequest::parse(Endpoint::Embeddings, r#"{"model":"c","input":"x"}"#.into()).unwrap();
        assert_eq!(
            Bedrock.build_request(&embed, "m", &d).unwrap_err().status(),
            400
        );
    }

    #[test]
    fn errors_are_classed() {
        let e = Bedrock.error(
            429,
            br#"{"message":"Too many requests, please wait before trying again."}"#,
            None,
        );
        assert_eq!(
            (e.class(), e.error_type()),
            (ErrorClass::RateLimit, "ThrottlingException")
        );
        let e = Bedrock.error(
            400,
            br#"{"message":"Input is too long for requested model."}"#,
            None,
        );
        assert_eq!(e.class(), ErrorClass::ContextWindow);
        let e = Bedrock.error(400, br#"{"message":"messages: field required"}"#, None);
        assert_eq!(e.class(), ErrorClass::BadRequest);
        let e = Bedrock.error(424, br#"{"message":"The model failed"}"#, None);
        assert_eq!(
            (e.class(), e.error_type()),
            (ErrorClass::InternalServer, "ModelErrorException")
        );
        let e = Bedrock.error(503, b"", None);
        assert_eq!(e.class(), ErrorClass::InternalServer);
        assert_eq!(e.to_string(), "upstream returned status 503");
    }
}
